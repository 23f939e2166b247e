"""Herding and discrepancy metrics (docs/algorithms.md, section "Metrics").

    herding(z, order, norm="inf")                      one worker: max_k ||sum_{t<=k} (z_{pi(t)} - zbar)||
    parallel_herding(z, orders, batch=1, norm="inf", interleaved=False)
                                                       m workers, the CD-GraB paper's quantity
    balancing_discrepancy(vectors, signs)              max_k ||sum_{t<=k} eps_t v_t||_inf
    avg_grad_error(z, order, mean=None)                sum_k ||(1/k) sum_{t<=k} z_{pi(t)} - zbar||_2^2
    parallel_avg_grad_error(z, orders, means=None)     its mean over m workers, each with its own mean
    shuffle_variance(problem, x_star, A, y, orders, gamma)
                                                       max_k mean_w D_{f_{pi_w(k)}}(x*_{w,k}, x*) / gamma

Every metric validates its arguments in Python (one-line ``ValueError`` naming the argument, the
bad value and what is allowed) and then runs a Numba kernel in O(m n d) time and O(d) extra memory:
the kernels walk the vectors in visit order through a running sum, they never build an (m, n, d)
temporary. Inputs already float64 / int64 and C-contiguous are used without a copy. Checking that
an order is a permutation takes O(n) bytes of scratch.

The empty prefix (k = 0) has norm 0, so including it or not does not change any maximum.

The simulator computes the average gradient error inside herding's gradient pass
(``step_sums_and_grad_error``: the per-example gradients of every step, walked once) and the
shuffling variance with ``shuffle_variance_walk``, one worker at a time, so each worker's value is
the same number whichever rank computes it; both take the problem's kernels as arguments (not
cacheable, numba#2956).
"""

import math

import numpy as np
from numba import njit

from ordersim import numba_cache  # noqa: F401  (before the cached kernels: stamps them)
from ordersim.engine import problem_loop, sum_in_worker_order, worker_step  # worker_step: bound per problem
from ordersim.orderers.base import first_non_permutation

NORMS = ("inf", "2")
_NORM_CODES = {"inf": 0, "2": 1}


# -- kernels -----------------------------------------------------------------------------------------
@njit(cache=True, error_model="numpy")
def _norm(s, norm_code):
    d = s.shape[0]
    if norm_code == 0:
        peak = 0.0
        for k in range(d):
            a = abs(s[k])
            if a > peak:
                peak = a
        return peak
    total = 0.0
    for k in range(d):
        total += s[k] * s[k]
    return math.sqrt(total)


@njit(cache=True, error_model="numpy")
def _herding_kernel(z, order, norm_code):
    n, d = z.shape
    mean = np.zeros(d)
    for e in range(n):
        for k in range(d):
            mean[k] += z[e, k]
    for k in range(d):
        mean[k] /= n
    s = np.zeros(d)
    best = 0.0
    for t in range(n):
        e = order[t]
        for k in range(d):
            s[k] += z[e, k] - mean[k]
        value = _norm(s, norm_code)
        if value > best:
            best = value
    return best


@njit(cache=True, error_model="numpy")
def _parallel_herding_kernel(z, orders, batch, norm_code, interleaved):
    m, n, d = z.shape
    mean = np.zeros(d)
    for i in range(m):
        for e in range(n):
            for k in range(d):
                mean[k] += z[i, e, k]
    for k in range(d):
        mean[k] /= m * n
    s = np.zeros(d)
    best = 0.0
    for start in range(0, n, batch):
        stop = min(start + batch, n)
        for i in range(m):
            for t in range(start, stop):
                e = orders[i, t]
                for k in range(d):
                    s[k] += z[i, e, k] - mean[k]
                if interleaved:
                    value = _norm(s, norm_code)
                    if value > best:
                        best = value
        if not interleaved:
            value = _norm(s, norm_code)
            if value > best:
                best = value
    return best


@njit(cache=True, error_model="numpy")
def _discrepancy_kernel(vectors, signs):
    T, d = vectors.shape
    s = np.zeros(d)
    best = 0.0
    for t in range(T):
        eps = signs[t]
        for k in range(d):
            s[k] += eps * vectors[t, k]
        value = _norm(s, 0)
        if value > best:
            best = value
    return best


@njit(cache=True, error_model="numpy")
def grad_error_walk(grads, count, mean, prefix, totals, row, start):
    """Advance worker `row`'s average gradient error over its next `count` visited examples.

    grads (>= count, d): their gradients in visit order; start: the examples it visited before;
    prefix (d): the sum of those; mean (d): the worker's mean gradient. Adds
    ||prefix_k / k - mean||^2 for k = start + 1 .. start + count to totals[row], term by term.
    """
    d = mean.shape[0]
    for r in range(count):
        k = start + r + 1
        term = 0.0
        for j in range(d):
            prefix[j] += grads[r, j]
            gap = prefix[j] / k - mean[j]
            term += gap * gap
        totals[row] += term


@njit(cache=True, error_model="numpy")
def _avg_grad_error_kernel(z, orders, means):
    """Every worker's average gradient error (m,), the simulator's walk one example at a time."""
    m, n, d = z.shape
    totals = np.zeros(m)
    prefix = np.zeros(d)
    for i in range(m):
        prefix[:] = 0.0
        for t in range(n):
            e = orders[i, t]
            grad_error_walk(z[i, e:e + 1], 1, means[i], prefix, totals, i, t)
    return totals


def herding_steps(x, A, y, params, order, row, base, first_step, steps, b, n, idx, scratch, out,
                  mean, prefix, totals):
    """step_sums_and_grad_error's code: a template that engine.problem_loop compiles per problem
    (worker_step bound to that problem's kernel), so that the pass is cached on disk."""
    for s in range(steps):
        pos = (first_step + s) * b
        count = min(b, n - pos)
        worker_step(x, A, y, params, order, row, base, pos, count, idx, scratch, out[s], False)
        grad_error_walk(scratch, count, mean, prefix, totals, row, pos)


def step_sums_and_grad_error(batch_grads, x, A, y, params, order, row, base, first_step, steps, b, n,
                             idx, scratch, out, mean, prefix, totals):
    """out[s]: the sum of the gradients at x of worker `row`'s step first_step + s (steps of b
    visit positions, the last one short), as the step loops sum them (engine.worker_step); each
    step's per-example gradients are walked by grad_error_walk on the way: herding's pass also
    gives the error."""
    problem_loop(herding_steps, batch_grads)(x, A, y, params, order, row, base, first_step, steps, b, n,
                                             idx, scratch, out, mean, prefix, totals)


@njit(error_model="numpy")
def shuffle_variance_walk(batch_grads, full_loss, x_star, A, y, params, order, row, base, gamma,
                          idx, grad, point, prefix, out):
    """out[k] = D_{f_e}(x*_k, x*) / gamma along row `row` of `order` (e its k-th example, row
    base + e of A), x*_k = x* - gamma * (sum of the gradients at x* of the examples before it).

    D_f(u, w) = f(u) - f(w) - <grad f(w), u - w>; here u - w = -gamma * prefix. grad (1, d),
    point, prefix (d): scratch; idx (>= 1,) int64.
    """
    n = order.shape[1]
    d = x_star.shape[0]
    prefix[:] = 0.0
    for k in range(n):
        idx[0] = base + order[row, k]
        at_star = batch_grads(x_star, A, y, idx[:1], params, grad)
        inner = 0.0
        for j in range(d):
            point[j] = x_star[j] - gamma * prefix[j]
            inner += grad[0, j] * prefix[j]
        out[k] = (full_loss(point, A, y, idx[:1], params) - at_star + gamma * inner) / gamma
        for j in range(d):
            prefix[j] += grad[0, j]


# -- validation -------------------------------------------------------------------------------------
def _float_array(name, value, ndim, shape_text):
    array = np.asarray(value)
    if array.ndim != ndim:
        raise ValueError(f"{name} must be a {ndim}-d array of shape {shape_text}, got shape {array.shape}")
    if not (np.issubdtype(array.dtype, np.floating) or np.issubdtype(array.dtype, np.integer)):
        raise ValueError(f"{name} must hold real numbers, got dtype {array.dtype}")
    if 0 in array.shape:
        raise ValueError(f"{name} must have every dimension >= 1 ({shape_text}), got shape {array.shape}")
    return np.ascontiguousarray(array, dtype=np.float64)


def _int_array(name, value, shape, shape_text):
    array = np.asarray(value)
    if array.shape != shape:
        raise ValueError(f"{name} must have shape {shape_text} = {shape}, got shape {array.shape}")
    if not np.issubdtype(array.dtype, np.integer):
        raise ValueError(f"{name} must hold integers, got dtype {array.dtype}")
    return np.ascontiguousarray(array, dtype=np.int64)


def _check_permutations(name, orders):
    row, t = first_non_permutation(orders)
    if row >= 0:
        where = f"{name}[{t}]" if name == "order" else f"{name}[{row}, {t}]"
        raise ValueError(
            f"{name} must be a permutation of 0..{orders.shape[1] - 1}{'' if name == 'order' else ' in every row'}, but {where} = "
            f"{orders[row, t]} is out of range or repeated"
        )


def _norm_code(norm):
    if not isinstance(norm, str) or norm not in _NORM_CODES:
        raise ValueError(f"norm must be one of {', '.join(repr(n) for n in NORMS)}, got {norm!r}")
    return _NORM_CODES[norm]


# -- public API -------------------------------------------------------------------------------------
def herding(z, order, norm: str = "inf") -> float:
    """H(pi) = max_k ||sum_{t<=k} (z_{pi(t)} - zbar)|| for one worker.

    z: (n, d) vectors indexed by example id; order: (n,) a permutation of 0..n-1 (the visit order);
    norm: "inf" or "2". zbar is the mean of all n vectors.
    """
    code = _norm_code(norm)
    z = _float_array("z", z, 2, "(n, d)")
    order = _int_array("order", order, (z.shape[0],), "(n,)")
    _check_permutations("order", order.reshape(1, -1))
    return float(_herding_kernel(z, order, code))


def parallel_herding(z, orders, batch: int = 1, norm: str = "inf", interleaved: bool = False) -> float:
    """Parallel herding of m workers' orders (the CD-GraB paper's quantity).

    z: (m, n, d), z[i, e] = worker i's vector of local example e; orders: (m, n), row i a
    permutation of 0..n-1. With zbar the mean over all m*n vectors and y_t = sum_i (z^i_{pi_i(t)} - zbar):
    - interleaved=False: max over step boundaries k = b, 2b, ..., n (the last step is short when b
      does not divide n) of ||sum_{t<k} y_t||;
    - interleaved=True: max over every prefix of the step-major, worker-minor sequence: for each
      step, worker 0's b vectors in visit order, then worker 1's, ..., then worker m-1's.
    With m = 1 and batch = 1 both equal herding(z[0], orders[0], norm).
    """
    code = _norm_code(norm)
    z = _float_array("z", z, 3, "(m, n, d)")
    m, n, _ = z.shape
    orders = _int_array("orders", orders, (m, n), "(m, n)")
    if isinstance(batch, (bool, np.bool_)) or not isinstance(batch, (int, np.integer)) or not 1 <= batch <= n:
        raise ValueError(f"batch must be an integer in 1..n = 1..{n}, got {batch!r}")
    if not isinstance(interleaved, (bool, np.bool_)):
        raise ValueError(f"interleaved must be True or False, got {interleaved!r}")
    _check_permutations("orders", orders)
    return float(_parallel_herding_kernel(z, orders, int(batch), code, bool(interleaved)))


def balancing_discrepancy(vectors, signs) -> float:
    """max_k ||s_k||_inf of the running sum s_k = sum_{t<=k} eps_t v_t.

    vectors: (T, d) in arrival order; signs: (T,) each +1 or -1.
    """
    vectors = _float_array("vectors", vectors, 2, "(T, d)")
    raw = np.asarray(signs)
    if raw.shape != (vectors.shape[0],):
        raise ValueError(f"signs must have shape (T,) = ({vectors.shape[0]},), got shape {raw.shape}")
    if not (np.issubdtype(raw.dtype, np.integer) or np.issubdtype(raw.dtype, np.floating)):
        raise ValueError(f"signs must be numbers +1 or -1, got dtype {raw.dtype}")
    bad = np.flatnonzero((raw != 1) & (raw != -1))
    if bad.size:
        raise ValueError(f"signs must be +1 or -1, but signs[{bad[0]}] = {raw[bad[0]].item()!r}")
    return float(_discrepancy_kernel(vectors, np.ascontiguousarray(raw, dtype=np.float64)))


def _means(name, value, z, shape_text):
    if value is None:
        return np.ascontiguousarray(z.mean(axis=-2))
    means = _float_array(name, value, z.ndim - 1, shape_text)
    if means.shape != z.shape[:-2] + z.shape[-1:]:
        raise ValueError(f"{name} must have shape {shape_text} = {z.shape[:-2] + z.shape[-1:]}, got shape {means.shape}")
    return means


def parallel_avg_grad_error(z, orders, means=None) -> float:
    """The mean over the m workers of avg_grad_error(z[i], orders[i], means[i]).

    z: (m, n, d), z[i, e] = worker i's vector of local example e; orders: (m, n), row i a
    permutation of 0..n-1; means: (m, d), each worker's own mean (default: z[i]'s mean).
    """
    z = _float_array("z", z, 3, "(m, n, d)")
    m, n, _ = z.shape
    orders = _int_array("orders", orders, (m, n), "(m, n)")
    _check_permutations("orders", orders)
    means = _means("means", means, z, "(m, d)")
    totals = _avg_grad_error_kernel(z, orders, means)
    return float(sum_in_worker_order(totals.reshape(m, 1))[0] / m)


def avg_grad_error(z, order, mean=None) -> float:
    """The average gradient error of an order (GraB's ``compute_avg_grad_error``):
    sum_{k=1..n} ||(1/k) sum_{t<=k} z_{pi(t)} - zbar||_2^2.

    z: (n, d) vectors indexed by example id; order: (n,) a permutation of 0..n-1; mean: (d,) zbar
    (default: the mean of the n vectors).
    """
    z = _float_array("z", z, 2, "(n, d)")
    order = _int_array("order", order, (z.shape[0],), "(n,)")
    _check_permutations("order", order.reshape(1, -1))
    mean = None if mean is None else np.asarray(mean)[None]
    return parallel_avg_grad_error(z[None], order[None], mean)


def shuffle_variance(problem, x_star, A, y, orders, gamma: float) -> float:
    """The shuffling variance at x* of orders over shards (Mishchenko, Khaled, Richtarik 2020),
    estimated over the m orders: max_k (1/m) sum_w D_{f_{pi_w(k)}}(x*_{w,k}, x*) / gamma with
    x*_{w,k} = x* - gamma sum_{t<k} grad f_{pi_w(t)}(x*).

    problem: an ordersim problem (its kernels batch_grads and full_loss); A (m n, p), y (m n,):
    worker w's local example e is row w n + e; orders (m, n); gamma > 0 the step.
    """
    x_star = _float_array("x_star", x_star, 1, "(d,)")
    A = _float_array("A", A, 2, "(m n, p)")
    y = np.ascontiguousarray(y, dtype=np.float64)
    orders = np.asarray(orders)
    if orders.ndim != 2 or orders.size != A.shape[0]:
        raise ValueError(f"orders must be (m, n) with m n = {A.shape[0]} rows of A, got shape {orders.shape}")
    orders = _int_array("orders", orders, orders.shape, "(m, n)")
    _check_permutations("orders", orders)
    if not (isinstance(gamma, (int, float, np.floating)) and math.isfinite(gamma) and gamma > 0):
        raise ValueError(f"gamma must be a finite number > 0, got {gamma!r}")
    m, n = orders.shape
    d = x_star.shape[0]
    values = np.empty((m, n))
    for w in range(m):
        shuffle_variance_walk(problem.batch_grads, problem.full_loss, x_star, A, y, problem.params, orders,
                              w, w * n, float(gamma), np.empty(1, dtype=np.int64), np.empty((1, d)),
                              np.empty(d), np.empty(d), values[w])
    return float((sum_in_worker_order(values) / m).max())


__all__ = ["NORMS", "avg_grad_error", "balancing_discrepancy", "herding", "parallel_avg_grad_error",
           "parallel_herding", "shuffle_variance"]
