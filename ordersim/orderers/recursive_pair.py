"""recursive-pair: grab-sampler's recursive pair balance (docs/algorithms.md, "recursive-pair")."""

import numpy as np
from numba import njit

from ordersim.orderers._balance import SIGN_DETERMINISTIC, SIGN_WALK, choose_sign
from ordersim.orderers._state import GradientOrderer, StateLayout, epoch_order, f64, i64, observer
from ordersim.orderers._vector import add_signed_difference, dot_with_difference

STATE = StateLayout(
    block_grads=f64["m", "block", "d"],  # the gradients of the block being filled, by its position
    accumulators=f64["m", "nodes", "d"],  # per worker the tree's B - 1 running sums, heap order
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
pair_signs, next_order, walk_failures, peaks = STATE.pair_signs, STATE.next_order, STATE.walk_failures, STATE.peaks
uniforms, sign_mode, tie_plus, walk_bound = STATE.uniforms, STATE.sign_mode, STATE.tie_plus, STATE.walk_bound


@njit(inline="always", error_model="numpy")
def _balance_block(state, i, j):
    """Row i's block j (its gradients in block_grads[i]) through the tree, level by level: every
    node's pairs are signed against its sum as the block finds it, then the sum moves; the
    leaves go to their slots of the next order (docs/algorithms.md, "recursive-pair")."""
    grads, acc, order, new = block_grads(state)[i], accumulators(state)[i], epoch_order(state)[i], next_order(state)[i]
    at, moved, eps = positions(state), next_positions(state), pair_signs(state)
    u, failures, peak = uniforms(state)[i], walk_failures(state), peaks(state)
    mode, plus, walk_c = sign_mode(state), tie_plus(state) != 0, walk_bound(state)
    B, n = grads.shape[0], order.shape[0]
    blocks = n // B
    levels = 0
    while (1 << levels) < B:
        levels += 1
    for r in range(B):
        at[r] = r
    size, level = B, 0
    while size > 1:
        half = size // 2
        for r in range(B // size):
            node, base = (1 << level) - 1 + r, r * size
            first_decision = j * (levels * B // 2) + level * (B // 2) + r * half
            s = acc[node]
            for q in range(half):
                dot = dot_with_difference(s, grads[at[base + 2 * q]], grads[at[base + 2 * q + 1]])
                eps[q] = choose_sign(i, dot, mode, plus, walk_c, u, first_decision + q, failures)
            for q in range(half):
                first, second = at[base + 2 * q], at[base + 2 * q + 1]
                peak[i] = max(peak[i], add_signed_difference(s, grads[first], grads[second], eps[q]))
                to_left = first if eps[q] > 0.0 else second
                moved[base + q] = to_left
                moved[base + half + q] = first + second - to_left
        for r in range(B):
            at[r] = moved[r]
        size, level = half, level + 1
    rest = n - blocks * B
    for r in range(B):
        slot = r * blocks + (rest if r >= B // 2 else 0) + (j if r % 2 == 0 else blocks - 1 - j)
        new[slot] = order[j * B + at[r]]


@observer
def recursive_pair_observe(grads, state, start):
    """Copy every row's gradients into its block; balance each block as it completes. Positions
    after the last whole block are no block (their slots are set at begin_epoch())."""
    m, b, d = grads.shape
    buffer = block_grads(state)
    B, n = buffer.shape[1], epoch_order(state).shape[1]
    whole = n // B * B
    for j in range(b):
        t = start + j
        if t >= whole:
            break
        for i in range(m):
            for k in range(d):
                buffer[i, t % B, k] = grads[i, j, k]
        if t % B == B - 1:
            for i in range(m):
                _balance_block(state, i, t // B)


class RecursivePairBalance(GradientOrderer):
    """Every worker balances blocks of B consecutive examples recursively, each level's halves
    against their own running sums (grab-sampler's beta sorter RecursivePairBalance)."""

    name = "recursive-pair"
    description = "recursive pair balance within blocks of B = 2^p examples (grab-sampler), every worker on its own"
    state_layout = STATE
    kernel = staticmethod(recursive_pair_observe)
    extra_options = ("block",)

    def __init__(self, *args, block: int = 8, **kwargs):
        if isinstance(block, bool) or not isinstance(block, (int, np.integer)) or block < 2 or block & (block - 1):
            raise ValueError(f"{self.name}: block must be a power of two >= 2, got {block!r}")
        self.block = int(block)
        super().__init__(*args, **kwargs)

    def _setup(self):
        levels = self.block.bit_length() - 1
        self.nodes, self.half_block = self.block - 1, self.block // 2
        self.decisions = self.examples // self.block * levels * self.block // 2

    def _setup_state(self):
        self.sign_mode[...] = SIGN_WALK if self.sign == "walk" else SIGN_DETERMINISTIC
        self.tie_plus[...] = self.tie == "plus"
        self.walk_bound[...] = self.walk_c

    def _begin(self):
        self.accumulators[...] = 0.0
        self.peaks[:] = 0.0
        self.walk_failures[:] = 0
        if self.sign == "walk":
            for i in range(self.workers):
                self.uniforms[i] = self.stream("walk", i, self.epoch).random(self.decisions)
        # the examples after the last whole block keep their visit order, between the two halves
        whole = self.examples // self.block * self.block
        middle = self.examples // self.block * self.half_block
        self.next_order[:, middle:middle + self.examples - whole] = self.order[:, whole:]

    def _next_order(self):
        return self.next_order.copy()

    @property
    def balance_discrepancy(self) -> float:
        """max ||acc||_inf over the epoch so far, any node of any worker."""
        return float(self.peaks.max())
