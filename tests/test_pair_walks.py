"""The orderers after CD-GraB (docs/algorithms.md): kh-sgd, cd-kh, sbw and recursive-pair.

First their plain-NumPy references (tests/reference/orderers.py) against small cases worked out
by hand from the spec, and the equivalences the spec states; then the orderers' own properties
that the conformance suite (tests/test_orderers.py) does not cover: options, the m = 1
equivalences of the kernels, and that the rules differ from their neighbours.
"""

import math

import numpy as np
import pytest

from ordersim.streams import stream
from reference.orderers import cd_kh, d_grab_pair, kh_sgd, pair_grab, recursive_pair, sbw


def one_epoch(values):
    """Gradients of one epoch, m = 1, d = 1, by local example id."""
    return [np.asarray(values, dtype=np.float64)[None, :, None]]


def same(a, b):
    return len(a) == len(b) and all(np.array_equal(x, y) for x, y in zip(a, b))


# -- references against hand-worked cases ------------------------------------------------------------
@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("second", [1.0, 10.0])
def test_kh_sgd_reference_by_hand(seed, second):
    """n = 4, d = 1, identity first order, E = 1: pairs (0, 1) and (2, 3) with v_1 = 1, v_2 = second.
    Decision 1: sigma = 0, so a = beta_1 = 1, sigma <- 2, and <s, v> = 0 <= U_1 a iff U_1 >= 0.
    Decision 2: L_2 = ln(8 (1 + ln 2) 2), ratio = 2 L_2 / beta_2: 6.60 > 1 for v_2 = 1 (a = sqrt(6.60)),
    0.066 <= 1 for v_2 = 10 (a = beta_2 = 100); <s, v_2> = eps_1 v_2."""
    u = stream(seed, "walk", 0, 0).random(4)
    U1, U2 = 2 * u[0] - 1, 2 * u[1] - 1
    eps1 = 1 if 0.0 <= U1 * 1.0 else -1
    L2 = math.log(8.0 * (1.0 + math.log(2.0)) * 2.0)
    beta2 = second * second
    ratio = 2.0 * L2 / beta2
    threshold = math.sqrt(ratio) * beta2 if ratio > 1 else beta2
    assert (ratio > 1) == (second == 1.0)
    eps2 = 1 if eps1 * second <= U2 * threshold else -1
    want = np.empty(4, dtype=np.int64)
    want[0], want[3] = (0, 1) if eps1 > 0 else (1, 0)
    want[1], want[2] = (2, 3) if eps2 > 0 else (3, 2)
    got = kh_sgd(1, 4, 1, seed, one_epoch([1.0, 0.0, second, 0.0]), epochs=1, first_order="identity")
    assert np.array_equal(got[1][0], want), (got[1], want)


def _kh_two_pairs_by_hand(order, values, u, E, e):
    """The next order of kh-sgd's epoch e (1-based) for n = 4, d = 1, written out: decision 1 has
    sigma = 0 (a = beta_1, sigma <- 2 beta_1), decision 2 the penalty L_2 = ln(8 (ln E + 1)(1 + ln 2) 2 e)."""
    v1, v2 = values[order[0]] - values[order[1]], values[order[2]] - values[order[3]]
    eps1 = 1 if v1 == 0 or 0.0 <= (2 * u[0] - 1) * v1 * v1 else -1
    sigma = 2 * v1 * v1
    L2 = math.log(8.0 * (math.log(E) + 1.0) * (1.0 + math.log(2.0)) * 2.0 * e)
    beta2 = v2 * v2
    ratio = sigma * L2 / beta2
    a = beta2 if ratio <= 1 else math.sqrt(ratio) * beta2
    eps2 = 1 if eps1 * v1 * v2 <= (2 * u[1] - 1) * a else -1
    new = np.empty(4, dtype=np.int64)
    new[0], new[3] = (order[0], order[1]) if eps1 > 0 else (order[1], order[0])
    new[1], new[2] = (order[2], order[3]) if eps2 > 0 else (order[3], order[2])
    return new


@pytest.mark.parametrize("seed", range(8))
def test_kh_sgd_reference_penalty_by_hand_over_epochs(seed):
    """Three epochs of E = 3 with the same gradients: the penalty's e and E as the spec writes them."""
    values = np.array([2.0, -1.0, 0.5, 3.0])
    got = kh_sgd(1, 4, 1, seed, one_epoch(values) * 3, epochs=3, first_order="identity")
    order = np.arange(4)
    for e in range(1, 4):
        order = _kh_two_pairs_by_hand(order, values, stream(seed, "walk", 0, e - 1).random(4), 3, e)
        assert np.array_equal(got[e][0], order), (e, got[e], order)


def test_kh_sgd_reference_zero_difference_gets_plus():
    """A pair of equal gradients keeps its order (eps = +1), whatever the uniforms."""
    for seed in range(5):
        got = kh_sgd(1, 4, 2, seed, [np.ones((1, 4, 2))], epochs=2, first_order="identity")
        assert np.array_equal(got[1][0], [0, 2, 3, 1])


def test_cd_kh_reference_with_one_worker_is_kh_sgd_and_counts_decisions_over_workers():
    rng = np.random.default_rng(1)
    grads = [rng.standard_normal((1, 11, 3)) for _ in range(3)]
    assert same(cd_kh(1, 11, 3, 4, grads, epochs=3), kh_sgd(1, 11, 3, 4, grads, epochs=3))
    # with m = 2, the shared walk: worker 1's first pair is decision 2 and meets worker 0's sign
    # in s, so its rows are not those of two independent kh walks
    grads = [rng.standard_normal((2, 12, 3)) for _ in range(3)]
    shared = cd_kh(2, 12, 3, 4, grads, epochs=3)
    alone = [kh_sgd(1, 12, 3, 4, [g[1:2]], epochs=3, first_worker=1) for g in grads[:1]][0]
    assert np.array_equal(shared[0][1], alone[0][0])
    assert not np.array_equal(shared[1][1], alone[1][0])


def test_sbw_reference_is_the_pair_walk_with_its_constant():
    """With b_max given, sbw is pair-grab's walk with c = b_max 30 ln(n E d / (2 delta)), delta = 1/2."""
    rng = np.random.default_rng(2)
    n, d, E = 13, 4, 5
    grads = [rng.standard_normal((1, n, d)) for _ in range(E)]
    c = 0.7 * (30.0 * math.log(n * E * d / 1.0))
    for seed in range(3):
        want = pair_grab(1, n, d, seed, grads, sign="walk", walk_c=c)
        assert same(sbw(1, n, d, seed, grads, epochs=E, b_max=0.7), want)


def test_sbw_reference_default_bound_is_the_previous_epochs_largest_difference():
    """Default b_max: in epoch 0 the running maximum of ||v||_2, later the previous epoch's largest.
    Epoch 0's first pair has the epoch's largest difference X, so the running maximum is X from
    the first decision on, and epoch 1 (whose differences are 50 times larger) uses X too: over
    these two epochs the default must give exactly what b_max = X gives, and b_max = 50 X not."""
    rng = np.random.default_rng(3)
    n, d, E = 10, 3, 4
    first = rng.standard_normal((1, n, d))
    first[0, 0], first[0, 1] = 10.0, -10.0
    grads = [first, 50 * rng.standard_normal((1, n, d))]
    X = float(np.linalg.norm(first[0, 0] - first[0, 1]))
    assert X == math.sqrt(1200.0)
    differs = False
    for seed in range(6):
        stats, fixed_stats, big_stats = [], [], []
        got = sbw(1, n, d, seed, grads, epochs=E, first_order="identity", stats=stats)
        assert same(got, sbw(1, n, d, seed, grads, epochs=E, b_max=X, first_order="identity", stats=fixed_stats))
        assert all(np.array_equal(a["walk_failures"], b["walk_failures"]) for a, b in zip(stats, fixed_stats))
        big = sbw(1, n, d, seed, grads, epochs=E, b_max=50 * X, first_order="identity", stats=big_stats)
        differs |= not same(got, big) or any(
            not np.array_equal(a["walk_failures"], b["walk_failures"]) for a, b in zip(stats, big_stats))
    assert differs


# -- recursive pair balance ------------------------------------------------------------------------------
def test_recursive_pair_reference_by_hand():
    """B = 4, identity first order, d = 1, g = 3, 0, 0, 1 | 1, 0, 0, 2 (| 5).
    Block 0: the root's pairs (0,1), (2,3) meet acc_0 = 0: both +1, acc_0 = 3 - 1 = 2; "+" half
    0, 2 and "-" half 1, 3; node 1: (0, 2) against 0: +1, acc_1 = 3; node 2: (1, 3): +1, acc_2 = -1.
    Leaves 0, 2, 1, 3. Block 1: the root's (4,5) has v = 1, <2, 1> > 0: -1; (6,7) has v = -2: +1
    (both against acc_0 = 2); "+" half 5, 6, "-" half 4, 7; node 1: (5, 6), v = 0: +1; node 2:
    (4, 7), v = -1 against acc_2 = -1: -1. Leaves 5, 6, 7, 4. Next order: runs i = 0..3 of the
    blocks' i-th leaves, odd i reversed: [0 5] [6 2] [1 7] [4 3]; with n = 9 the ninth example
    goes between the first two runs and the last two."""
    values = [3, 0, 0, 1, 1, 0, 0, 2, 5]
    got = recursive_pair(1, 8, 1, 0, one_epoch(values[:8]), block=4, first_order="identity")
    assert got[1][0].tolist() == [0, 5, 6, 2, 1, 7, 4, 3]
    got = recursive_pair(1, 9, 1, 0, one_epoch(values), block=4, first_order="identity")
    assert got[1][0].tolist() == [0, 5, 6, 2, 8, 1, 7, 4, 3]


@pytest.mark.parametrize("options", [{}, {"tie": "minus"}, {"sign": "walk", "walk_c": 1.5}])
def test_recursive_pair_reference_with_blocks_of_two_is_pair_balance(options):
    rng = np.random.default_rng(4)
    for m, n in ((1, 10), (1, 9), (3, 11)):
        grads = [rng.standard_normal((m, n, 5)) for _ in range(3)]
        assert same(recursive_pair(m, n, 5, 2, grads, block=2, **options), d_grab_pair(m, n, 5, 2, grads, **options))


def test_recursive_pair_reference_signs_a_nodes_pairs_against_the_same_accumulator():
    """The root's pairs of the first block all meet acc_0 = 0: with tie plus all are +1 although
    a sequential walk would give the second pair (v equal to the first's) -1."""
    got = recursive_pair(1, 4, 1, 0, one_epoch([1, 0, 1, 0]), block=4, first_order="identity")
    # "+" half 0, 2 and "-" half 1, 3; node 1's pair (0, 2) has v = 0: +1; node 2's (1, 3): +1
    assert got[1][0].tolist() == [0, 2, 1, 3]


# -- the kernels' pieces ---------------------------------------------------------------------------------
def test_squared_norm_of_difference_sums_as_the_reference():
    """kernel halving's beta = <v, v> and sbw's ||v|| come from it: lane_dot's bits, b = None too."""
    from numba import njit

    from ordersim.orderers._vector import squared_norm_of_difference
    from reference.orderers import lane_dot

    norm = njit(lambda a, b: squared_norm_of_difference(a, b))
    rng = np.random.default_rng(5)
    for d in (1, 3, 15, 16, 17, 37, 128, 131):
        a, b = rng.standard_normal((2, d)) * rng.uniform(0.1, 1e3, (2, d))
        want = lane_dot(a - b, a - b)
        assert norm(a, b) == want and norm(a - b, None) == want, d
        G = rng.standard_normal((2, 3, d))
        assert norm(G[1, 0], G[0, 2]) == lane_dot(G[1, 0] - G[0, 2], G[1, 0] - G[0, 2]), d
