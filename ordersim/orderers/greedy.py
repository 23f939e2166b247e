import numpy as np
from numba import njit

from ordersim.orderers._projection import project
from ordersim.orderers._state import N, StateLayout, epoch_order, f64, i64, observer
from ordersim.orderers._units import UNITS, UnitOrderer, add_to_group, close_group, group_size, group_sum, \
    projection_of

STATE = StateLayout(
    **UNITS.fields,
    # the epoch's gradients by local example; with projection or group, its unit vectors by unit
    # id (a unit's position in the first order), k wide under a projection
    table=f64["m", "units", "balanced_dim"],
    unit_at=i64["m", "unit_slots"],  # with projection or group: the id of the unit at each unit position
)
table, unit_at = STATE.table, STATE.unit_at


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


@observer
def store_by_unit(grads, state, start):
    """table[i, u] = the vector of worker i's unit u (its group's mean, or its gradient,
    projected) when the unit completes; the positions after the last whole group are no unit."""
    m, b = grads.shape[0], grads.shape[1]
    by_unit, ids = table(state), unit_at(state)
    r, sums = group_size(state), group_sum(state)
    kind, dense, columns, bounds, sigma = projection_of(state)
    end = state[N] // r * r
    for j in range(b):
        t = start + j
        if t >= end:
            break
        for i in range(m):
            if r == 1:
                project(by_unit[i, ids[i, t]], grads[i, j], None, kind, dense, columns, bounds, sigma)
            elif t % r != r - 1:
                add_to_group(sums[i], grads[i, j], t % r == 0)
            else:
                close_group(sums[i], grads[i, j], r)
                project(by_unit[i, ids[i, t // r]], sums[i], None, kind, dense, columns, bounds, sigma)


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


class GreedyHerding(UnitOrderer):
    """Offline herding baseline (Lu, Meng, De Sa 2022), per worker. Holds the vectors of all u
    units of the previous epoch (u = n/r, each of k = the balanced dimension: d, or Pi's k), O(m u k)
    memory and O(u^2 k) time per epoch: for small n only."""

    name = "greedy"
    description = "greedy herding on the previous epoch's centered gradients (offline baseline, O(n d) memory; units: O(n k / r))"
    state_layout = STATE
    kernel = staticmethod(store_by_example)
    unit_kernels = (store_by_unit, None)

    def _setup(self):
        super()._setup()
        self.unit_dim = 0  # the units' vectors go to the table
        self.unit_slots = self.units if self.balances_units else 0

    def _setup_state(self):
        super()._setup_state()
        self.unit_at[...] = np.arange(self.unit_slots)  # the first order numbers the units

    def _next_order(self):
        rows = self.units
        order = np.empty((self.workers, rows), dtype=np.int64)
        for i in range(self.workers):
            z = self.table[i] - self.table[i].sum(axis=0) / rows
            greedy_herding_order(z, order[i])
        if not self.balances_units:
            return order
        # the next unit order of unit ids, as this epoch's unit positions, then its examples
        positions = np.argsort(self.unit_at, axis=1)
        self.unit_at[...] = order
        return self.expand_units(np.take_along_axis(positions, order, axis=1))
