import numpy as np
from numba import njit

from ordersim.orderers._state import (FIRST_OWN_SLOT, N, OBSERVED, ORDER, StateBuffer, block, fits,
                                      state_kernel)
from ordersim.orderers.base import Orderer

TABLE = FIRST_OWN_SLOT  # header slot: where the (m, n, d) gradient table starts


@state_kernel
def store_by_example(grads, state):
    """table[i, e] = gradient of worker i's local example e, for the b examples just visited.
    Returns b, or -1 if grads do not fit."""
    if not fits(grads, state):
        return -1
    m, b, d = grads.shape
    n, start = state[N], state[OBSERVED]
    order = block(state, ORDER, state, m * n)
    table = block(state.view(np.float64), TABLE, state, m * n * d)
    for j in range(b):
        for i in range(m):
            e = order[i * n + start + j]
            for k in range(d):
                table[(i * n + e) * d + k] = grads[i, j, k]
    state[OBSERVED] = start + b
    return b


@njit(cache=True, error_model="numpy")
def greedy_herding_order(z, out):
    """Greedy herding on centered vectors z (n, d): repeatedly take the unused example j that
    minimizes ||s + z_j||^2 = ||s||^2 + 2<s, z_j> + ||z_j||^2 (ties: smallest j)."""
    n, d = z.shape
    used = np.zeros(n, dtype=np.bool_)
    s = np.zeros(d)
    sq = np.zeros(n)
    for j in range(n):
        for k in range(d):
            sq[j] += z[j, k] * z[j, k]
    for slot in range(n):
        best, best_value = -1, np.inf
        for j in range(n):
            if used[j]:
                continue
            value = 0.0
            for k in range(d):
                value += s[k] * z[j, k]
            value = sq[j] + 2.0 * value
            if value < best_value:
                best, best_value = j, value
        used[best] = True
        out[slot] = best
        for k in range(d):
            s[k] += z[best, k]


class GreedyHerding(StateBuffer, Orderer):
    """Offline herding baseline (Lu, Meng, De Sa 2022), per worker. Holds all n gradients of the
    previous epoch, O(m n d) memory, and O(n^2 d) time per epoch: for small n only."""

    name = "greedy"
    description = "greedy herding on the previous epoch's centered gradients (offline baseline, O(n d) memory)"

    kernel = staticmethod(store_by_example)
    header_slots = TABLE + 1

    def _state_layout(self):
        return {**super()._state_layout(),
                "table": (TABLE, np.float64, (self.workers, self.examples, self.dim))}

    def _setup(self):
        self._allocate_state()

    def _begin(self):
        self._load_epoch_order()

    def _next_order(self):
        order = np.empty((self.workers, self.examples), dtype=np.int64)
        for i in range(self.workers):
            z = self.table[i] - self.table[i].sum(axis=0) / self.examples
            greedy_herding_order(z, order[i])
        return order
