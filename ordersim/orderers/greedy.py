import numpy as np
from numba import njit

from ordersim.orderers._state import GradientOrderer, StateLayout, epoch_order, f64, observer

STATE = StateLayout(table=f64["m", "n", "d"])  # the epoch's gradients by local example
table = STATE.table


@observer
def store_by_example(grads, state, start):
    """table[i, e] = gradient of worker i's local example e, for the b examples just visited."""
    m, b, d = grads.shape
    order, by_example = epoch_order(state), table(state)
    for j in range(b):
        for i in range(m):
            e = order[i, start + j]
            for k in range(d):
                by_example[i, e, k] = grads[i, j, k]


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


class GreedyHerding(GradientOrderer):
    """Offline herding baseline (Lu, Meng, De Sa 2022), per worker. Holds all n gradients of the
    previous epoch, O(m n d) memory, and O(n^2 d) time per epoch: for small n only."""

    name = "greedy"
    description = "greedy herding on the previous epoch's centered gradients (offline baseline, O(n d) memory)"
    state_layout = STATE
    kernel = staticmethod(store_by_example)

    def _next_order(self):
        order = np.empty((self.workers, self.examples), dtype=np.int64)
        for i in range(self.workers):
            z = self.table[i] - self.table[i].sum(axis=0) / self.examples
            greedy_herding_order(z, order[i])
        return order
