"""Numba kernels shared by the balancing orderers: the sign choice and the two reorder loops.

Signs follow ../shared/docs/algorithms.md: deterministic (eps = +1 iff <s,v> <= 0, or < 0 with
tie="minus") or the self-balancing walk (eps = +1 with probability 1/2 - <s,v>/(2c), clipped).

The state lives in one flat buffer (``_state.py``); a kernel call takes just (grads, state).

The epoch's balancing discrepancy, max over steps of ||s||_inf, is kept as ``peaks``: per
running-sum row, the largest ||s||_inf so far, which the vector update of s returns at no extra
pass over s (``_vector.py``).
"""

import numpy as np
from numba import njit

from ordersim.orderers._vector import (add_signed_difference, add_signed_difference_and_sum,
                                       add_signed_difference_and_sum_then_dot, add_signed_difference_then_dot,
                                       dot_with_difference)
from ordersim.orderers._state import (FIRST_OWN_SLOT, N, OBSERVED, ORDER, StateBuffer, block, fits,
                                      state_kernel)

SIGN_DETERMINISTIC = 0
SIGN_WALK = 1

# The balancing orderers' header slots: running-sum rows, sign options (walk_c stored as a
# float64), then where each of their arrays starts.
ROWS, MODE, TIE_PLUS, WALK_C = range(FIRST_OWN_SLOT, FIRST_OWN_SLOT + 4)
NEXT_ORDER, LEFT, RIGHT, WALK_FAILURES, RUNNING_SUM, PEAKS, UNIFORMS, EXTRA = range(
    FIRST_OWN_SLOT + 4, FIRST_OWN_SLOT + 12)


@njit(inline="always", error_model="numpy")
def choose_sign(i, dot, mode, tie_plus, walk_c, u, at, walk_failures):
    """Row i's sign for dot = <s, v>, the walk's uniform being u[at]; a walk step with |dot| > c
    counts as row i's failure."""
    if mode == SIGN_DETERMINISTIC:
        if dot < 0.0 or (dot == 0.0 and tie_plus):
            return 1.0
        return -1.0
    if abs(dot) > walk_c:
        walk_failures[i] += 1
    p = 0.5 - dot / (2.0 * walk_c)
    return 1.0 if u[at] < p else -1.0


@njit(inline="always", error_model="numpy")
def place_example(i, t, eps, n, order, next_order, left, right):
    """Row i's example at visit position t, of sign eps: +1 takes the row's next free place from
    the left in the next order, -1 the next from the right."""
    plus = eps > 0.0  # selects, not branches: the sign is as unpredictable as a coin
    next_order[i * n + (left[i] if plus else right[i])] = order[i * n + t]
    left[i] += plus
    right[i] -= not plus


@state_kernel
def mean_balance_observe(grads, state):
    """GraB's mean balance, every row on its own: v = g - mean of the previous epoch's gradients.

    grads (m, b, d) holds visit positions start..start+b-1 of each row. +1 examples fill row i of
    next_order from the left in arrival order, -1 examples from the right (reverse arrival order).
    The extra arrays are the previous epoch's means and this epoch's sums, (m, d) each.
    Rows are independent, so they are walked one at a time and each row's state stays in cache for
    its b examples. Returns b, or -1 if grads do not fit (nothing is changed then).
    """
    if not fits(grads, state):
        return -1
    m, b, d = grads.shape
    n, start, floats = state[N], state[OBSERVED], state.view(np.float64)
    order, next_order = block(state, ORDER, state, m * n), block(state, NEXT_ORDER, state, m * n)
    left, right = block(state, LEFT, state, m), block(state, RIGHT, state, m)
    walk_failures = block(state, WALK_FAILURES, state, m)
    s, peaks = block(floats, RUNNING_SUM, state, m * d), block(floats, PEAKS, state, m)
    u, extra = block(floats, UNIFORMS, state, m * n), block(floats, EXTRA, state, 2 * m * d)
    mode, tie_plus, walk_c = state[MODE], state[TIE_PLUS] != 0, floats[WALK_C]
    for i in range(m):
        row = s[i * d:(i + 1) * d]
        mean_prev, grad_sum = extra[i * d:(i + 1) * d], extra[(m + i) * d:(m + i + 1) * d]
        dot = dot_with_difference(row, grads[i, 0], mean_prev)
        for j in range(b):
            g = grads[i, j]
            eps = choose_sign(i, dot, mode, tie_plus, walk_c, u, i * n + start + j, walk_failures)
            # the row's next example is balanced against the s this update makes: its dot
            # product is taken in the update's pass, on s still in registers
            if j + 1 < b:
                largest, dot = add_signed_difference_and_sum_then_dot(row, g, mean_prev, eps, grad_sum,
                                                                      grads[i, j + 1], mean_prev)
            else:
                largest = add_signed_difference_and_sum(row, g, mean_prev, eps, grad_sum)
            peaks[i] = max(peaks[i], largest)  # s_i's largest ||s||_inf so far
            place_example(i, start + j, eps, n, order, next_order, left, right)
    state[OBSERVED] = start + b
    return b


@njit(inline="always", error_model="numpy")
def place_pair(i, t, eps, n, order, next_order, left, right):
    """Row i's pair ending at visit position t, of sign eps: the example eps sends left takes
    row i's next free place from the left in the next order, the other the next from the right."""
    earlier, later = order[i * n + t - 1], order[i * n + t]
    to_left = earlier if eps > 0.0 else later  # a select (see place_example)
    next_order[i * n + left[i]] = to_left
    next_order[i * n + right[i]] = earlier + later - to_left
    left[i] += 1
    right[i] -= 1


@state_kernel
def pair_balance_observe(grads, state):
    """PairBalance: consecutive visit positions (2k, 2k+1) form a pair, v = g_first - g_second.

    The running sum has one row per worker (independent, d-grab-pair) or a single shared row
    (cd-grab), and the pair's workers are visited in worker order inside every pair index, so with
    a shared row the walk is the coordinated one of CD-GraB. When a pair's first gradient is the
    last of a call, the extra (m, d) array keeps a copy of it: the caller may overwrite its buffer
    before the partner arrives. With n odd the last example has no partner and takes the one free
    slot (left == right). Returns b, or -1 if grads do not fit (nothing is changed then).
    """
    if not fits(grads, state):
        return -1
    m, b, d = grads.shape
    n, rows, start, floats = state[N], state[ROWS], state[OBSERVED], state.view(np.float64)
    order, next_order = block(state, ORDER, state, m * n), block(state, NEXT_ORDER, state, m * n)
    left, right = block(state, LEFT, state, m), block(state, RIGHT, state, m)
    walk_failures = block(state, WALK_FAILURES, state, m)
    s, peaks = block(floats, RUNNING_SUM, state, rows * d), block(floats, PEAKS, state, rows)
    u, pending = block(floats, UNIFORMS, state, m * n), block(floats, EXTRA, state, m * d)
    mode, tie_plus, walk_c = state[MODE], state[TIE_PLUS] != 0, floats[WALK_C]
    dot_ahead, dot = False, 0.0  # whether the last update already took this pair's <s, v>
    for j in range(b):
        t = start + j
        if t % 2 == 0:
            if t == n - 1:
                for i in range(m):
                    next_order[i * n + left[i]] = order[i * n + t]
            elif j == b - 1:  # the partner comes in a later call: copy, the buffer may be reused
                for i in range(m):
                    for k in range(d):
                        pending[i * d + k] = grads[i, j, k]
            continue
        for i in range(m):
            r = 0 if rows == 1 else i
            row = s[r * d:(r + 1) * d]
            # the pair's first gradient: in this call's buffer, or kept from the previous call
            first = grads[i, j - 1] if j > 0 else pending[i * d:(i + 1) * d]
            if not dot_ahead:
                dot = dot_with_difference(row, first, grads[i, j])
            eps = choose_sign(i, dot, mode, tie_plus, walk_c, u, i * n + t // 2, walk_failures)
            # With one shared row, the next pair of this call (the next worker's, or worker 0's
            # two positions on) is balanced against the s this update makes: its dot product is
            # taken in the update's pass, on s still in registers.
            dot_ahead = rows == 1 and (i + 1 < m or j + 2 < b)
            if dot_ahead:
                w, k = (i + 1, j) if i + 1 < m else (0, j + 2)
                next_first = grads[w, k - 1] if k > 0 else pending[w * d:(w + 1) * d]
                largest, dot = add_signed_difference_then_dot(row, first, grads[i, j], eps, next_first,
                                                              grads[w, k])
            else:
                largest = add_signed_difference(row, first, grads[i, j], eps)
            peaks[r] = max(peaks[r], largest)  # s_r's largest ||s||_inf so far
            place_pair(i, t, eps, n, order, next_order, left, right)
    state[OBSERVED] = start + b
    return b


class BalancingState(StateBuffer):
    """Mixin for orderers that balance signs. Subclasses set ``kernel`` (one of the two above) and
    call ``_setup_balance`` from ``_setup``."""

    header_slots = EXTRA + 1

    def _setup_balance(self, sum_rows: int, extra_rows: int) -> None:
        self.sum_rows, self.extra_rows = sum_rows, extra_rows
        self._allocate_state()
        self.state[ROWS] = sum_rows
        self.state[MODE] = SIGN_WALK if self.sign == "walk" else SIGN_DETERMINISTIC
        self.state[TIE_PLUS] = self.tie == "plus"
        self.state.view(np.float64)[WALK_C] = self.walk_c

    def _state_layout(self):
        m, n, d, rows = self.workers, self.examples, self.dim, self.sum_rows
        return {**super()._state_layout(),
                "next_order": (NEXT_ORDER, np.int64, (m, n)),
                "left": (LEFT, np.int64, (m,)),
                "right": (RIGHT, np.int64, (m,)),
                "walk_failures": (WALK_FAILURES, np.int64, (m,)),
                "running_sum": (RUNNING_SUM, np.float64, (rows, d)),
                "peaks": (PEAKS, np.float64, (rows,)),  # per row, the largest ||s||_inf so far
                "uniforms": (UNIFORMS, np.float64, (m, n)),
                "extra": (EXTRA, np.float64, (self.extra_rows, m, d))}

    def _begin_balance(self) -> None:
        self._load_epoch_order()
        self.running_sum[:] = 0.0
        self.left[:] = 0
        self.right[:] = self.examples - 1
        self.peaks[:] = 0.0
        self.walk_failures[:] = 0
        if self.sign == "walk":
            self.uniforms[...] = self.walk_uniforms()

    def _finish_balance(self) -> np.ndarray:
        return self.next_order.copy()

    @property
    def balance_discrepancy(self) -> float:
        """max_k ||s_k||_inf over the epoch so far (the largest over independent rows)."""
        return float(self.peaks.max())
