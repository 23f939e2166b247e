"""Numba kernels shared by the balancing orderers: the sign choice and the two reorder loops.

The kernels keep their whole state in preallocated arrays that the orderer object owns, so a call
allocates nothing and the same kernels can be called from other jitted code (the serial simulator).
Signs follow ../shared/docs/algorithms.md: deterministic (eps = +1 iff <s,v> <= 0, or < 0 with
tie="minus") or the self-balancing walk (eps = +1 with probability 1/2 - <s,v>/(2c), clipped).
"""

import numpy as np
from numba import njit

SIGN_DETERMINISTIC = 0
SIGN_WALK = 1


@njit(inline="always")
def choose_sign(dot, mode, tie_plus, walk_c, u):
    if mode == SIGN_DETERMINISTIC:
        if dot < 0.0 or (dot == 0.0 and tie_plus):
            return 1.0
        return -1.0
    p = 0.5 - dot / (2.0 * walk_c)
    return 1.0 if u < p else -1.0


@njit(inline="always")
def row_abs_max(s, r):
    """max_k |s[r, k]| (0 for d = 0). max is exact in any order, so four independent running
    maxima give the same value as one sequential max while breaking its dependency chain (which
    cost as much as the whole sign decision at large d)."""
    d = s.shape[1]
    p0 = p1 = p2 = p3 = 0.0
    k = 0
    while k + 4 <= d:
        p0 = max(p0, abs(s[r, k]))
        p1 = max(p1, abs(s[r, k + 1]))
        p2 = max(p2, abs(s[r, k + 2]))
        p3 = max(p3, abs(s[r, k + 3]))
        k += 4
    while k < d:
        p0 = max(p0, abs(s[r, k]))
        k += 1
    return max(max(p0, p1), max(p2, p3))


@njit(inline="always")
def dot_with_difference(s, r, a, b):
    """<s[r], a - b> in four interleaved partial sums added as (p0 + p1) + (p2 + p3): the same
    association for every caller and array layout (so every backend signs alike), without the
    one long dependency chain of a sequential sum, which bounded the kernels' speed."""
    d = s.shape[1]
    p0 = p1 = p2 = p3 = 0.0
    k = 0
    while k + 4 <= d:
        p0 += s[r, k] * (a[k] - b[k])
        p1 += s[r, k + 1] * (a[k + 1] - b[k + 1])
        p2 += s[r, k + 2] * (a[k + 2] - b[k + 2])
        p3 += s[r, k + 3] * (a[k + 3] - b[k + 3])
        k += 4
    while k < d:
        p0 += s[r, k] * (a[k] - b[k])
        k += 1
    return (p0 + p1) + (p2 + p3)


@njit(cache=True)
def mean_balance_observe(grads, start, order, next_order, s, mean_prev, grad_sum, left, right,
                         u, mode, tie_plus, walk_c, discrepancy, walk_failures):
    """GraB's mean balance, every row on its own: v = g - mean of the previous epoch's gradients.

    grads (m, b, d) holds visit positions start..start+b-1 of each row. +1 examples fill row i of
    next_order from the left in arrival order, -1 examples from the right (reverse arrival order).
    """
    m, b, d = grads.shape
    for j in range(b):
        t = start + j
        for i in range(m):
            dot = dot_with_difference(s, i, grads[i, j], mean_prev[i])
            eps = choose_sign(dot, mode, tie_plus, walk_c, u[i, t])
            if mode == SIGN_WALK and abs(dot) > walk_c:
                walk_failures[i] += 1
            for k in range(d):
                g = grads[i, j, k]
                s[i, k] += eps * (g - mean_prev[i, k])
                grad_sum[i, k] += g
            discrepancy[i] = max(discrepancy[i], row_abs_max(s, i))
            if eps > 0.0:
                next_order[i, left[i]] = order[i, t]
                left[i] += 1
            else:
                next_order[i, right[i]] = order[i, t]
                right[i] -= 1


@njit(inline="always")
def balance_difference(s, r, first, second, mode, tie_plus, walk_c, u, discrepancy, walk_failures, i):
    """Sign of v = first - second against the running sum s[r], then s[r] += eps v; returns eps."""
    dot = dot_with_difference(s, r, first, second)
    eps = choose_sign(dot, mode, tie_plus, walk_c, u)
    if mode == SIGN_WALK and abs(dot) > walk_c:
        walk_failures[i] += 1
    for k in range(first.shape[0]):
        s[r, k] += eps * (first[k] - second[k])
    discrepancy[r] = max(discrepancy[r], row_abs_max(s, r))
    return eps


@njit(cache=True)
def pair_balance_observe(grads, start, order, next_order, s, pending, left, right,
                         u, mode, tie_plus, walk_c, discrepancy, walk_failures):
    """PairBalance: consecutive visit positions (2k, 2k+1) form a pair, v = g_first - g_second.

    ``s`` has one row per worker (independent, d-grab-pair) or a single shared row (cd-grab), and
    the pair's workers are visited in worker order inside every pair index, so with a shared row
    the walk is the coordinated one of CD-GraB. When a pair's first gradient is the last of a call,
    ``pending`` keeps a copy of it: the caller may overwrite its buffer before the partner arrives.
    With n odd the last example has no partner and takes the one free slot (left == right).
    """
    m, b, d = grads.shape
    n = order.shape[1]
    shared = s.shape[0] == 1
    for j in range(b):
        t = start + j
        if t % 2 == 0:
            if t == n - 1:
                for i in range(m):
                    next_order[i, left[i]] = order[i, t]
            elif j == b - 1:  # the partner comes in a later call: copy, the buffer may be reused
                for i in range(m):
                    for k in range(d):
                        pending[i, k] = grads[i, j, k]
            continue
        pair = t // 2
        for i in range(m):
            r = 0 if shared else i
            if j > 0:  # both of the pair are in this call's buffer
                eps = balance_difference(s, r, grads[i, j - 1], grads[i, j], mode, tie_plus, walk_c,
                                         u[i, pair], discrepancy, walk_failures, i)
            else:
                eps = balance_difference(s, r, pending[i], grads[i, j], mode, tie_plus, walk_c,
                                         u[i, pair], discrepancy, walk_failures, i)
            first, second = order[i, t - 1], order[i, t]
            if eps > 0.0:
                next_order[i, left[i]] = first
                next_order[i, right[i]] = second
            else:
                next_order[i, left[i]] = second
                next_order[i, right[i]] = first
            left[i] += 1
            right[i] -= 1


class BalancingState:
    """Mixin for orderers that balance signs: the arrays every balancing kernel shares."""

    def _setup_balance(self, sum_rows: int) -> None:
        m, n, d = self.workers, self.examples, self.dim
        self.running_sum = np.zeros((sum_rows, d))
        self.next_order = np.empty((m, n), dtype=np.int64)
        self.left = np.zeros(m, dtype=np.int64)
        self.right = np.zeros(m, dtype=np.int64)
        self.discrepancy = np.zeros(sum_rows)
        self.walk_failures = np.zeros(m, dtype=np.int64)
        self.uniforms = np.zeros((m, n))
        self._mode = SIGN_WALK if self.sign == "walk" else SIGN_DETERMINISTIC
        self._tie_plus = self.tie == "plus"

    def _begin_balance(self) -> None:
        self.running_sum[:] = 0.0
        self.left[:] = 0
        self.right[:] = self.examples - 1
        self.discrepancy[:] = 0.0
        self.walk_failures[:] = 0
        if self._mode == SIGN_WALK:
            self.uniforms = self.walk_uniforms()

    @property
    def balance_discrepancy(self) -> float:
        """max_k ||s_k||_inf over the epoch so far (the largest over independent rows)."""
        return float(self.discrepancy.max())

    def _finish_balance(self) -> np.ndarray:
        result = self.next_order
        self.next_order = np.empty_like(result)
        return result
