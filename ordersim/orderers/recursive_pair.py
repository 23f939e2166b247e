"""recursive-pair: grab-sampler's recursive pair balance (docs/algorithms.md, "recursive-pair")."""

import numpy as np
from numba import njit

from ordersim.orderers._balance import SIGN_DETERMINISTIC, SIGN_WALK, choose_sign
from ordersim.orderers._projection import NONE, project
from ordersim.orderers._state import StateLayout, epoch_order, f64, i64, observer
from ordersim.orderers._units import UNITS, UnitOrderer, add_to_group, close_group, group_size, projection_of
from ordersim.orderers._vector import add_signed_difference, dot_with_difference

STATE = StateLayout(
    **UNITS.fields,
    # the gradients of the block being filled, by its position; with groups, its units' means
    # (a group summed in place, then made its mean)
    block_grads=f64["m", "block", "d"],
    accumulators=f64["m", "nodes", "balanced_dim"],  # per worker the tree's B - 1 running sums, heap order
    pair_vectors=f64["half_block", "pair_dim"],  # under a projection: one node's projected pairs
    positions=i64["block"],  # the block's positions in tree order after the levels done so far
    next_positions=i64["block"],  # the same after the level being balanced
    pair_signs=f64["half_block"],  # the signs of one node's pairs, taken before its sum moves
    next_order=i64["m", "n"],
    walk_failures=i64["m"],
    peaks=f64["m"],  # per worker, the largest ||acc||_inf of any node so far in the epoch
    uniforms=f64["m", "decisions"],  # the walk's uniforms, u[i, k] for row i's k-th decision
    sign_mode=i64[()],
    tie_plus=i64[()],
    walk_bound=f64[()],
)
block_grads, accumulators, positions, next_positions = (STATE.block_grads, STATE.accumulators, STATE.positions,
                                                        STATE.next_positions)
pair_vectors = STATE.pair_vectors
pair_signs, next_order, walk_failures, peaks = STATE.pair_signs, STATE.next_order, STATE.walk_failures, STATE.peaks
uniforms, sign_mode, tie_plus, walk_bound = STATE.uniforms, STATE.sign_mode, STATE.tie_plus, STATE.walk_bound


@njit(inline="always", error_model="numpy")
def _balance_block(state, i, j):
    """Row i's block j (its units' vectors in block_grads[i]) through the tree, level by level:
    every node's pairs are signed against its sum as the block finds it, then the sum moves; the
    leaves' units go to their slots of the next order (docs/algorithms.md, "recursive-pair").
    A pair's vector is v = P(first - second), P = Pi or the identity."""
    grads, acc, order, new = block_grads(state)[i], accumulators(state)[i], epoch_order(state)[i], next_order(state)[i]
    at, moved, eps = positions(state), next_positions(state), pair_signs(state)
    u, failures, peak = uniforms(state)[i], walk_failures(state), peaks(state)
    mode, plus, walk_c = sign_mode(state), tie_plus(state) != 0, walk_bound(state)
    r, vectors = group_size(state), pair_vectors(state)
    kind, dense, columns, bounds, sigma = projection_of(state)
    B, n = grads.shape[0], order.shape[0]
    blocks = n // r // B
    levels = 0
    while (1 << levels) < B:
        levels += 1
    for p in range(B):
        at[p] = p
    size, level = B, 0
    while size > 1:
        half = size // 2
        for node_at in range(B // size):
            node, base = (1 << level) - 1 + node_at, node_at * size
            first_decision = j * (levels * B // 2) + level * (B // 2) + node_at * half
            s = acc[node]
            for q in range(half):
                a, b = grads[at[base + 2 * q]], grads[at[base + 2 * q + 1]]
                if kind == NONE:
                    dot = dot_with_difference(s, a, b)
                else:
                    project(vectors[q], a, b, kind, dense, columns, bounds, sigma)
                    dot = dot_with_difference(s, vectors[q], None)
                eps[q] = choose_sign(i, dot, mode, plus, walk_c, u, first_decision + q, failures)
            for q in range(half):
                first, second = at[base + 2 * q], at[base + 2 * q + 1]
                if kind == NONE:
                    largest = add_signed_difference(s, grads[first], grads[second], eps[q])
                else:
                    largest = add_signed_difference(s, vectors[q], None, eps[q])
                peak[i] = max(peak[i], largest)
                to_left = first if eps[q] > 0.0 else second
                moved[base + q] = to_left
                moved[base + half + q] = first + second - to_left
        for p in range(B):
            at[p] = moved[p]
        size, level = half, level + 1
    rest = n // r - blocks * B
    for p in range(B):
        slot = p * blocks + (rest if p >= B // 2 else 0) + (j if p % 2 == 0 else blocks - 1 - j)
        for c in range(r):
            new[slot * r + c] = order[(j * B + at[p]) * r + c]


@observer
def recursive_pair_observe(grads, state, start):
    """Copy every row's gradients into its block (with groups: sum each group there and make it
    its mean); balance each block as it completes. Positions after the last whole block are no
    block (their slots are set at begin_epoch())."""
    m, b, d = grads.shape
    buffer, r = block_grads(state), group_size(state)
    B, n = buffer.shape[1], epoch_order(state).shape[1]
    whole = n // r // B * B * r
    for j in range(b):
        t = start + j
        if t >= whole:
            break
        unit = t // r
        for i in range(m):
            if r == 1:
                for k in range(d):
                    buffer[i, unit % B, k] = grads[i, j, k]
            elif t % r != r - 1:
                add_to_group(buffer[i, unit % B], grads[i, j], t % r == 0)
            else:
                close_group(buffer[i, unit % B], grads[i, j], r)
        if t % r == r - 1 and unit % B == B - 1:
            for i in range(m):
                _balance_block(state, i, unit // B)


class RecursivePairBalance(UnitOrderer):
    """Every worker balances blocks of B consecutive examples recursively, each level's halves
    against their own running sums (grab-sampler's beta sorter RecursivePairBalance)."""

    name = "recursive-pair"
    description = "recursive pair balance within blocks of B = 2^p examples (grab-sampler), every worker on its own"
    state_layout = STATE
    kernel = staticmethod(recursive_pair_observe)
    extra_options = ("block",)

    @classmethod
    def check_options(cls, options):
        super().check_options(options)
        block = options.get("block", 8)
        if isinstance(block, bool) or not isinstance(block, (int, np.integer)) or block < 2 or block & (block - 1):
            raise ValueError(f"{cls.name}: block must be a power of two >= 2, got {block!r}")

    def __init__(self, *args, block: int = 8, **kwargs):
        self.check_options({"block": block})
        self.block = int(block)
        super().__init__(*args, **kwargs)

    def _setup(self):
        super()._setup()
        levels = self.block.bit_length() - 1
        self.nodes, self.half_block = self.block - 1, self.block // 2
        self.decisions = self.units // self.block * levels * self.block // 2
        # the block keeps the units' means and a node's projected pairs: no group sum, no unit vectors
        self.group_dim = self.unit_dim = 0
        self.pair_dim = self.projection_dim if self.projection != "none" else 0

    def _setup_state(self):
        self.sign_mode[...] = SIGN_WALK if self.sign == "walk" else SIGN_DETERMINISTIC
        self.tie_plus[...] = self.tie == "plus"
        self.walk_bound[...] = self.walk_c
        super()._setup_state()

    def _begin(self):
        self.accumulators[...] = 0.0
        self.peaks[:] = 0.0
        self.walk_failures[:] = 0
        if self.sign == "walk":
            for i in range(self.workers):
                self.uniforms[i] = self.stream("walk", i, self.epoch).random(self.decisions)
        # the units after the last whole block keep their visit order, between the two halves;
        # the positions after the last whole group stay last
        r, units = self.group, self.units
        whole, middle = units // self.block * self.block, units // self.block * self.half_block
        self.next_order[:, middle * r:(middle + units - whole) * r] = self.order[:, whole * r:units * r]
        self.next_order[:, units * r:] = self.order[:, units * r:]

    def _next_order(self):
        return self.next_order.copy()

    @property
    def balance_discrepancy(self) -> float:
        """max ||acc||_inf over the epoch so far, any node of any worker."""
        return float(self.peaks.max())
