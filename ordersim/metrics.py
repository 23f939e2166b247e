"""Herding and discrepancy metrics (docs/algorithms.md, section "Metrics").

    herding(z, order, norm="inf")                      one worker: max_k ||sum_{t<=k} (z_{pi(t)} - zbar)||
    parallel_herding(z, orders, batch=1, norm="inf", interleaved=False)
                                                       m workers, the CD-GraB paper's quantity
    balancing_discrepancy(vectors, signs)              max_k ||sum_{t<=k} eps_t v_t||_inf

Every metric validates its arguments in Python (one-line ``ValueError`` naming the argument, the
bad value and what is allowed) and then runs a Numba kernel in O(m n d) time and O(d) extra memory:
the kernels walk the vectors in visit order through a running sum, they never build an (m, n, d)
temporary. Inputs already float64 / int64 and C-contiguous are used without a copy. Checking that
an order is a permutation takes O(n) bytes of scratch.

The empty prefix (k = 0) has norm 0, so including it or not does not change any maximum.
"""

import math

import numpy as np
from numba import njit

from ordersim import numba_cache  # noqa: F401  (before the cached kernels: stamps them)

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
def _first_non_permutation(orders):
    """(row, position) of the first entry that breaks row being a permutation of 0..n-1, else (-1, -1)."""
    m, n = orders.shape
    seen = np.zeros(n, dtype=np.bool_)
    for i in range(m):
        seen[:] = False
        for t in range(n):
            e = orders[i, t]
            if e < 0 or e >= n or seen[e]:
                return i, t
            seen[e] = True
    return -1, -1


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
    row, t = _first_non_permutation(orders)
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


__all__ = ["NORMS", "balancing_discrepancy", "herding", "parallel_herding"]
