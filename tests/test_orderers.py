"""Conformance suite for every registered orderer against its plain-NumPy reference.

The references in tests/reference/orderers.py are written from docs/algorithms.md; every
orderer that ``available_orderers()`` lists must have one (adding an orderer means adding its
reference), and must produce exactly the same orders over several epochs, for many shapes, step
sizes and options. The rest checks the properties the spec states: permutations, the m = 1
equivalences, rank invariance, the reorder lemma, the in-place-buffer pitfall, argument
validation, O(m d + m n) memory, determinism and the self-balancing walk.
"""

import itertools
import os
import pickle
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from ordersim.orderers import available_orderers, orderer_class
from ordersim.orderers._state import StateLayout, observer
# make_orderer: ordersim's, with the options some orderers require (kh-sgd's epochs) filled in
from reference.orderers import (REFERENCES, drive, drive_pair_differences, herding, herding_reorder, lane_dot,
                                make_orderer, required_options)

ROOT = Path(__file__).resolve().parents[1]
ORDERERS = sorted(available_orderers())
EPOCHS = 4
# Orders that are not permutations by design.
NOT_PERMUTATIONS = {"wr"}


@observer
def observe_nothing(grads, state, start):
    """The kernel of the tests' own gradient orderers, which need no state: observer counts."""


def is_centralized(name):
    return bool(orderer_class(name).centralized_alternatives)


def is_coordinated(name):
    return bool(getattr(orderer_class(name), "coordinated", False))


def is_balancing(name):
    """Orderers that choose signs (and count walk failures)."""
    return hasattr(make_orderer(name, 1, 2, 1), "walk_failures")


def takes_sign_options(name):
    """Balancing orderers whose signs follow the sign options (not a rule of their own, kh-sgd's)."""
    return is_balancing(name) and not orderer_class(name).own_sign_rule


def gradients(m, n, d, seed, epochs=EPOCHS, kind="normal"):
    """Per-epoch gradients (m, n, d) by local example id. "int": values in {-1, 0, 1}, so that
    pairs with equal gradients and exact ties <s, v> = 0 happen often (tie="plus" vs "minus")."""
    rng = np.random.default_rng([seed, m, n, d])
    if kind == "int":
        return [rng.integers(-1, 2, (m, n, d)).astype(np.float64) for _ in range(epochs)]
    return [rng.standard_normal((m, n, d)) for _ in range(epochs)]


def assert_same_orders(got, want, context=""):
    assert len(got) == len(want)
    for epoch, (g, w) in enumerate(zip(got, want)):
        assert g.dtype == np.int64 and g.shape == w.shape, f"{context} epoch {epoch}: {g.dtype} {g.shape}"
        assert np.array_equal(g, w), f"{context}: orders differ in epoch {epoch}\nkernel:\n{g}\nreference:\n{w}"


def assert_valid_orders(name, orders, n):
    for epoch, order in enumerate(orders):
        if name in NOT_PERMUTATIONS:
            assert order.min() >= 0 and order.max() < n, f"{name} epoch {epoch}: draws outside 0..{n - 1}"
        else:
            assert np.array_equal(np.sort(order, axis=1), np.broadcast_to(np.arange(n), order.shape)), (
                f"{name} epoch {epoch}: a row is not a permutation of 0..{n - 1}:\n{order}")


def test_dot_with_difference_sums_as_the_reference():
    """The vector kernel must give lane_dot's bits: the sign decisions of the references depend
    on them (its plain-Python form: test_kernels_run_without_jit, d = 37); b = None is <s, a>."""
    from numba import njit

    from ordersim.orderers._vector import dot_with_difference

    dot = njit(lambda s, a, b: dot_with_difference(s, a, b))
    rng = np.random.default_rng(7)
    for d in (1, 15, 16, 17, 37, 128, 131, 512):
        s, a, b = rng.standard_normal((3, d)) * rng.uniform(0.1, 1e3, (3, d))
        want = lane_dot(s, a - b)
        assert dot(s, a, b) == want, d
        assert dot(s, a - b, None) == want, d
        # the rows of a 3-d array and slices of a flat one, as the kernels pass them
        G = rng.standard_normal((2, 3, d))
        flat = rng.standard_normal(4 * d)
        assert dot(flat[d:2 * d], G[1, 0], G[0, 2]) == lane_dot(flat[d:2 * d], G[1, 0] - G[0, 2])


def test_signed_update_matches_numpy():
    """s += eps (a - b) in vector code gives NumPy's bits, returns max |s| (also with b = None:
    s += eps a), and the variant that also sums keeps sums += a; d covers whole vectors, a tail
    and tails alone."""
    from numba import njit

    from ordersim.orderers._vector import add_signed_difference, add_signed_difference_and_sum

    update = njit(lambda s, a, b, eps: add_signed_difference(s, a, b, eps))
    update_and_sum = njit(lambda s, a, b, eps, sums: add_signed_difference_and_sum(s, a, b, eps, sums))
    rng = np.random.default_rng(8)
    for d in (1, 7, 8, 9, 37, 128, 131):
        for eps in (1.0, -1.0):
            s, a, b, sums = rng.standard_normal((4, d)) * rng.uniform(0.1, 1e3, (4, d))
            want, want_sums = s + eps * (a - b), sums + a
            got, got_sums = s.copy(), sums.copy()
            assert update(got, a, b, eps) == np.abs(want).max(), (d, eps)
            np.testing.assert_array_equal(got, want, err_msg=f"d={d} eps={eps}")
            got = s.copy()
            assert update(got, a - b, None, eps) == np.abs(want).max(), (d, eps)
            np.testing.assert_array_equal(got, want, err_msg=f"d={d} eps={eps} b=None")
            got = s.copy()
            largest = update_and_sum(got, a, b, eps, got_sums)
            np.testing.assert_array_equal(got, want, err_msg=f"d={d} eps={eps}")
            np.testing.assert_array_equal(got_sums, want_sums, err_msg=f"d={d}")
            assert largest == np.abs(want).max(), (d, eps)


def test_update_then_dot_is_the_update_followed_by_the_dot():
    """The walks' fused pass: s += eps (a - b) with NumPy's bits and max |s| (and sums += a in the
    variant that sums), then <s, a2 - b2> on the new s with lane_dot's bits, also with b and b2
    None (the differences given); d covers whole 16-lane blocks, tails, and tails alone."""
    from numba import njit

    from ordersim.orderers._vector import add_signed_difference_and_sum_then_dot, add_signed_difference_then_dot

    fused = njit(lambda s, a, b, eps, a2, b2: add_signed_difference_then_dot(s, a, b, eps, a2, b2))
    fused_and_sum = njit(lambda s, a, b, eps, sums, a2, b2:
                         add_signed_difference_and_sum_then_dot(s, a, b, eps, sums, a2, b2))
    rng = np.random.default_rng(9)
    for d in (1, 8, 15, 16, 17, 37, 128, 131):
        for eps in (1.0, -1.0):
            s, a, b, a2, b2, sums = rng.standard_normal((6, d)) * rng.uniform(0.1, 1e3, (6, d))
            want = s + eps * (a - b)
            for summing in (False, True):
                got, got_sums = s.copy(), sums.copy()
                if summing:
                    largest, dot = fused_and_sum(got, a, b, eps, got_sums, a2, b2)
                    np.testing.assert_array_equal(got_sums, sums + a, err_msg=f"d={d}")
                else:
                    largest, dot = fused(got, a, b, eps, a2, b2)
                np.testing.assert_array_equal(got, want, err_msg=f"d={d} eps={eps}")
                assert largest == np.abs(want).max(), (d, eps)
                assert dot == lane_dot(want, a2 - b2), (d, eps)
            got = s.copy()
            largest, dot = fused(got, a - b, None, eps, a2 - b2, None)
            np.testing.assert_array_equal(got, want, err_msg=f"d={d} eps={eps} b=None")
            assert largest == np.abs(want).max() and dot == lane_dot(want, a2 - b2), (d, eps)


# -- conformance against the references ----------------------------------------------------------
# (m, n, d, b): n = 1 and 2, n even and odd, b = 1, odd, even, b = n, b not dividing n, d up to 512.
SHAPES = [
    (1, 1, 3, 1),
    (1, 2, 1, 1),
    (1, 7, 1, 1),
    (1, 12, 3, 5),
    (1, 10, 512, 4),
    (1, 9, 6, 9),
    (2, 9, 4, 2),
    (2, 20, 512, 6),
    (2, 15, 7, 7),
    (3, 16, 8, 3),
    (3, 13, 64, 13),
    (8, 11, 2, 4),
    (8, 6, 16, 1),
    (3, 10, 37, 2),  # 16-lane blocks and a tail in the dot product
]
OPTION_SETS = {
    "det-plus-random": {},
    "det-minus-identity": {"tie": "minus", "first_order": "identity"},
    "walk-default-c": {"sign": "walk", "seed": 11},
    "walk-small-c-minus-identity": {"sign": "walk", "walk_c": 2.0, "tie": "minus", "first_order": "identity"},
    "walk-tiny-c-first-worker": {"sign": "walk", "walk_c": 0.3, "first_worker": 3, "seed": 5},
    "det-plus-first-worker": {"first_worker": 2, "seed": 123},
}


def _cases():
    for name, shape, (label, options) in itertools.product(ORDERERS, SHAPES, OPTION_SETS.items()):
        m, n, d, b = shape
        if is_centralized(name) and m > 1:
            continue
        kinds = ["normal"]
        # Exact ties: small integer data. Not for greedy, whose ||s + z_j|| has exact ties between
        # different examples that rounding breaks in an arbitrary (spec-free) way.
        if d <= 8 and name != "greedy" and label.startswith("det"):
            kinds.append("int")
        for kind in kinds:
            yield pytest.param(name, shape, options, kind, id=f"{name}-m{m}n{n}d{d}b{b}-{label}-{kind}")


def test_every_registered_orderer_has_a_reference():
    missing = sorted(set(ORDERERS) - set(REFERENCES))
    assert not missing, f"no reference in tests/reference/orderers.py for: {', '.join(missing)}"


@pytest.mark.parametrize("name", [name for name in ORDERERS if orderer_class(name).needs_gradients])
def test_state_kernel_called_directly_equals_observe(name):
    """kernel(grads, state) is what the MPI backend calls inside its jitted epoch loop: it gives
    the orders observe() gives, returns the examples it took, and -1 for gradients that do not
    fit or outside an epoch (changing nothing)."""
    m = 1 if is_centralized(name) else 2
    n, d = 6, 3
    via_observe, direct = make_orderer(name, m, n, d), make_orderer(name, m, n, d)
    for g in gradients(m, n, d, seed=3):
        assert direct.kernel(np.zeros((m, 1, d)), direct.state) == -1, "no epoch is open"
        for o in (via_observe, direct):
            order = o.begin_epoch()
            for start, stop in ((0, 4), (4, 6)):
                chunk = np.ascontiguousarray(np.take_along_axis(g, order[:, start:stop, None], axis=1))
                if o is direct:
                    assert o.kernel(chunk[:, :, :-1], o.state) == -1 and o.observed == start
                    assert o.kernel(chunk, o.state) == stop - start and o.observed == stop
                else:
                    o.observe(chunk)
            if o is direct:
                assert o.kernel(chunk[:, :1], o.state) == -1, "the epoch is full"
            o.end_epoch()
        assert np.array_equal(via_observe.order, direct.order)


@pytest.mark.parametrize("name", [name for name in ORDERERS if orderer_class(name).pair_difference_kernel])
def test_pair_difference_kernel_takes_only_whole_pairs_that_fit(name):
    """pair_difference_kernel(differences, state) returns the pairs it took, and -1 (changing
    nothing) outside an epoch, for the wrong shape, more pairs than are left, after half a pair
    (observe() of one example), and for no pairs before the end of the rows."""
    m = 1 if is_centralized(name) else 2
    n, d = 7, 3
    o = make_orderer(name, m, n, d)
    kernel = o.pair_difference_kernel
    assert kernel(np.zeros((m, 1, d)), o.state) == -1, "no epoch is open"
    o.begin_epoch()
    assert kernel(np.zeros((m, 0, d)), o.state) == -1 and o.observed == 0, "no pairs, not at the end"
    assert kernel(np.zeros((m, 4, d)), o.state) == -1, "3 pairs in a row of 7"
    assert kernel(np.zeros((m + 1, 1, d)), o.state) == -1 and kernel(np.zeros((m, 1, d + 1)), o.state) == -1
    assert kernel(np.ones((m, 2, d)), o.state) == 2 and o.observed == 4
    o.observe(np.ones((m, 1, d)))
    assert kernel(np.ones((m, 1, d)), o.state) == -1 and o.observed == 5, "half a pair observed"
    o.observe(np.ones((m, 1, d)))
    assert kernel(np.ones((m, 1, d)), o.state) == -1, "no pair left"
    assert kernel(np.zeros((m, 0, d)), o.state) == 0 and o.observed == 7, "the unpaired last example"
    assert kernel(np.zeros((m, 0, d)), o.state) == 0 and o.observed == 7, "nothing more to count"
    o.end_epoch()


@pytest.mark.parametrize("name,shape,options,kind", list(_cases()))
def test_matches_reference(name, shape, options, kind):
    assert name in REFERENCES, f"{name} has no reference in tests/reference/orderers.py"
    m, n, d, b = shape
    options = required_options(name, options)
    seed = options.pop("seed", 0)
    grads = gradients(m, n, d, seed, kind=kind)
    got_stats, want_stats = [], []
    got = drive(make_orderer(name, m, n, d, seed=seed, **options), grads, b, stats=got_stats)
    want = REFERENCES[name](m, n, d, seed, grads, stats=want_stats, **options)
    assert_same_orders(got, want, f"{name} m={m} n={n} d={d} b={b} {options} {kind}")
    assert_valid_orders(name, got, n)
    runs = [got_stats]
    if orderer_class(name).pair_difference_kernel is not None:  # the serial backend's way in
        pair_stats = []
        via_pairs = drive_pair_differences(make_orderer(name, m, n, d, seed=seed, **options), grads, b,
                                           stats=pair_stats)
        assert_same_orders(via_pairs, want, f"{name} by pair differences m={m} n={n} d={d} {b} a call")
        runs.append(pair_stats)
    if is_balancing(name):
        for stats in runs:
            assert len(stats) == len(want_stats) == EPOCHS
            for epoch, (g, w) in enumerate(zip(stats, want_stats)):
                assert np.array_equal(g["walk_failures"], w["walk_failures"]), f"epoch {epoch}: walk failures"
                assert np.isclose(g["discrepancy"], w["discrepancy"], rtol=1e-12, atol=0), f"epoch {epoch}"


# -- random projection and grouped balancing ------------------------------------------------------
UNIT_ORDERERS = [name for name in ORDERERS if orderer_class(name).takes_projection_and_group]
UNIT_SHAPES = [(1, 12, 3, 5), (2, 9, 4, 2), (3, 13, 64, 13), (8, 11, 2, 4), (3, 10, 37, 2)]
# "b" stands for the shape's b: r = b orders whole minibatches
UNIT_OPTION_SETS = {
    "sparse-k5": {"projection": "sparse", "projection_dim": 5},
    "gaussian-k7-walk": {"projection": "gaussian", "projection_dim": 7, "sign": "walk", "walk_c": 2.0, "seed": 3},
    "gaussian-default-k": {"projection": "gaussian"},
    "group-2": {"group": 2},
    "group-b-minus-identity": {"group": "b", "tie": "minus", "first_order": "identity"},
    "group-3-sparse-walk-first-worker": {"group": 3, "projection": "sparse", "sign": "walk", "walk_c": 0.5,
                                         "first_worker": 2, "seed": 5},
}


def _unit_cases():
    for name, shape, (label, options) in itertools.product(UNIT_ORDERERS, UNIT_SHAPES, UNIT_OPTION_SETS.items()):
        m, n, d, b = shape
        if (is_centralized(name) and m > 1) or (d > 64 and options.get("projection_dim") is None
                                                and options.get("projection")):
            continue  # the default k at d = 512 is 512: a slow reference, nothing new
        group = b if options.get("group") == "b" else options.get("group", 1)
        if name == "greedy" and n // group == 2:
            continue  # two centered units are opposite: an exact tie, which rounding breaks (see _cases)
        # exact ties from integer data, not for greedy (see _cases)
        kinds = ["normal"] + (["int"] if "projection" not in options and d <= 8 and name != "greedy" else [])
        for kind in kinds:
            yield pytest.param(name, shape, options, kind, id=f"{name}-m{m}n{n}d{d}b{b}-{label}-{kind}")


@pytest.mark.parametrize("name,shape,options,kind", list(_unit_cases()))
def test_projection_and_group_match_reference(name, shape, options, kind):
    """Projected and grouped balancing equal the reference (tests/reference/orderers.py,
    with_units): orders, walk failures and discrepancies, through both kernels where the orderer
    has the pair-difference one (a grouped pair walk has none)."""
    m, n, d, b = shape
    options = required_options(name, {**options, "group": b} if options.get("group") == "b" else options)
    seed = options.pop("seed", 0)
    grads = gradients(m, n, d, seed, kind=kind)
    want_stats = []
    want = REFERENCES[name](m, n, d, seed, grads, stats=want_stats, **options)
    runs = [("gradients", lambda o, stats: drive(o, grads, b, stats=stats))]
    if make_orderer(name, m, n, d, seed=seed, **options).pair_difference_kernel is not None:
        runs.append(("pair differences", lambda o, stats: drive_pair_differences(o, grads, b, stats=stats)))
    elif orderer_class(name).pair_difference_kernel is not None:
        assert options.get("group", 1) > 1, "only a grouped pair walk goes without pair differences"
    for label, run in runs:
        stats = []
        got = run(make_orderer(name, m, n, d, seed=seed, **options), stats)
        assert_same_orders(got, want, f"{name} by {label} m={m} n={n} d={d} b={b} {options} {kind}")
        assert_valid_orders(name, got, n)
        for epoch, (g, w) in enumerate(zip(stats, want_stats)):
            assert np.array_equal(g["walk_failures"], w["walk_failures"]), f"{label} epoch {epoch}: walk failures"
            assert np.isclose(g["discrepancy"], w["discrepancy"], rtol=1e-12, atol=0), f"{label} epoch {epoch}"


@pytest.mark.parametrize("name", UNIT_ORDERERS)
def test_projection_and_group_change_the_orders(name):
    """Each option changes what is balanced (else the suite above could pass on orders that
    ignore it), and groups move as units: within a group the examples keep their relative order."""
    m = 1 if is_centralized(name) else 2
    n, d, r = 16, 12, 4
    grads = gradients(m, n, d, seed=6)
    # sbw's c is ~300 ||v||: its signs are nearly coin flips unless b_max is small
    own = {"b_max": 1e-3} if name == "sbw" else {}
    plain = drive(make_orderer(name, m, n, d, seed=1, **own), grads, 4)
    for options in ({"projection": "sparse", "projection_dim": 3}, {"projection": "gaussian", "projection_dim": 2},
                    {"group": r}):
        orders = drive(make_orderer(name, m, n, d, seed=1, **own, **options), grads, 4)
        assert any(not np.array_equal(a, b) for a, b in zip(orders[1:], plain[1:])), f"{name} ignores {options}"
    orders = drive(make_orderer(name, m, n, d, seed=1, group=r), grads, 4)
    groups = [set(map(tuple, orders[0][i].reshape(-1, r))) for i in range(m)]
    for order in orders[1:]:
        assert [set(map(tuple, order[i].reshape(-1, r))) for i in range(m)] == groups, f"{name}: a group split"


def test_default_projection_dim_is_the_johnson_lindenstrauss_bound():
    """k by default: scikit-learn's bound at eps = 0.1 for the vectors one running sum balances
    per epoch (n // r per worker, all workers' for a shared sum), capped at d."""
    from sklearn.random_projection import johnson_lindenstrauss_min_dim

    for name, m, n, group, d in (("d-grab", 2, 6, 1, 2000), ("cd-grab", 2, 4, 2, 1500), ("grab", 1, 30, 1, 64)):
        o = make_orderer(name, m, n, d, projection="sparse", group=group)
        points = n // group * (m if name == "cd-grab" else 1)
        assert o.projection_dim == min(d, int(johnson_lindenstrauss_min_dim(points, eps=0.1))), name
    assert make_orderer("grab", 1, 30, 64, projection="sparse").projection_dim == 64, "capped at d"


def test_projection_is_drawn_once_for_every_worker_and_rank():
    """Pi comes from (seed, "projection") only: workers 2..3 built on their own get rows 2..3 of
    the m = 4 orderer under a projection and groups too, and Pi does not depend on first_worker."""
    n, d, b = 12, 10, 3
    grads = gradients(4, n, d, seed=4)
    for name in ("d-grab", "d-grab-pair"):
        for options in ({"projection": "gaussian", "projection_dim": 4},
                        {"projection": "sparse", "projection_dim": 6, "group": 3, "sign": "walk", "walk_c": 2.0}):
            full = drive(make_orderer(name, 4, n, d, seed=8, **options), grads, b)
            part = drive(make_orderer(name, 2, n, d, seed=8, first_worker=2, **options), [g[2:4] for g in grads], b)
            assert_same_orders(part, [order[2:4] for order in full], f"{name} {options} workers 2..3")
    a, c = (make_orderer("d-grab", m, n, d, seed=8, first_worker=w, projection="gaussian", projection_dim=4)
            for m, w in ((1, 0), (3, 5)))
    assert np.array_equal(a.dense_projection, c.dense_projection)


@pytest.mark.parametrize("name", ["d-grab", "cd-grab", "cd-kh"])
def test_projected_and_grouped_orderer_survives_a_pickle_mid_epoch(name):
    """The unit kernels are bound again after a round trip (a checkpoint keeps no functions)."""
    m, n, d, b = 3, 12, 9, 3
    options = required_options(name, {"projection": "sparse", "projection_dim": 4, "group": 3})
    grads = gradients(m, n, d, seed=2)
    want = drive(make_orderer(name, m, n, d, seed=1, **options), grads, b)
    o = make_orderer(name, m, n, d, seed=1, **options)
    assert "kernel" not in o.checkpoint_state() and "pair_difference_kernel" not in o.checkpoint_state()
    got = []
    for g in grads:
        order = o.begin_epoch()
        got.append(order)
        for start in range(0, n, b):
            o.observe(np.ascontiguousarray(np.take_along_axis(g, order[:, start:start + b, None], axis=1)))
            if start == b:
                o = pickle.loads(pickle.dumps(o))
        o.end_epoch()
    got.append(o.order.copy())
    assert_same_orders(got, want, f"{name} pickled mid-epoch")


def test_projected_and_grouped_orderer_resumes_from_a_checkpoint_file(tmp_path):
    """A real checkpoint file (arrays, numbers and strings only) keeps Pi and the units' state."""
    from ordersim import checkpoint

    m, n, d, b = 3, 12, 9, 3
    options = {"projection": "gaussian", "projection_dim": 4, "group": 3, "sign": "walk", "walk_c": 1.0}
    grads = gradients(m, n, d, seed=5)
    first = make_orderer("cd-grab", m, n, d, seed=2, **options)
    drive(first, grads[:2], b)
    path = str(tmp_path / "o.ckpt")
    checkpoint.save(path, {"position": 0, "run_states": [{"orderer": first.checkpoint_state()}]})
    restored = make_orderer("cd-grab", m, n, d, seed=2, **options)
    restored.restore_state(checkpoint.load(path)["run_states"][0]["orderer"])
    assert_same_orders(drive(restored, grads[2:], b), drive(first, grads[2:], b), "cd-grab restored")


@pytest.mark.parametrize("name", [*ORDERERS, "docs/adding.md's norm-sort"])
def test_projection_and_group_options_are_checked(name, tmp_path):
    """One-line errors naming the option and what is allowed, for every orderer; the options are
    taken by the orderers that take them (UnitOrderers: every built-in one that reads the
    gradients), ignored by those that ignore the gradients, and refused with one line by any other
    gradient orderer, such as the worked example of docs/adding.md, added as the page says."""
    if name.startswith("docs/"):
        from test_adding import example_block

        name = str(tmp_path / "norm_sort.py")
        Path(name).write_text(example_block("orderer"))
    base = required_options(name, {"workers": 1, "examples": 4, "dim": 2})
    for options, message in (({"projection": "dense"}, r"projection must be one of .*got 'dense'"),
                             ({"projection": "sparse", "projection_dim": 0}, r"projection_dim must be an integer >= 1"),
                             ({"projection_dim": 3}, r"projection_dim needs projection"),
                             ({"group": 0}, r"group must be an integer in 1\.\.4 .*got 0"),
                             ({"group": 5}, r"group must be an integer in 1\.\.4 .*got 5"),
                             ({"group": 1.5}, r"group must be an integer")):
        with pytest.raises(ValueError, match=message):
            make_orderer(name, **base, **options)
    cls = orderer_class(name)
    if cls.takes_projection_and_group or not cls.needs_gradients:
        make_orderer(name, **base, projection="sparse", group=2)
        return
    for options in ({"projection": "sparse"}, {"group": 2}):
        with pytest.raises(ValueError, match=rf"^{cls.name}: projection and group are options of the balancing "
                                             rf"orderers; {cls.name} takes neither .*got projection="):
            make_orderer(name, **base, **options)


def test_a_gradient_orderer_of_its_own_refuses_projection_and_group():
    """An orderer that reads the gradients but is no UnitOrderer (a user's) refuses the options
    with one line, rather than ignoring them."""
    from ordersim.orderers._state import GradientOrderer

    class Reader(GradientOrderer):
        name = "reader"
        state_layout = StateLayout()
        kernel = observe_nothing

    for options in ({"group": 2}, {"projection": "sparse"}):
        with pytest.raises(ValueError, match=r"^reader: projection and group are options of the balancing orderers"):
            Reader(1, 4, 2, **options)
    Reader(1, 4, 2)


@pytest.mark.parametrize("field", ["state", "order", "epoch", "workers", "kernel", "begin_epoch"])
def test_a_state_field_that_would_hide_an_attribute_is_refused_when_the_class_is_defined(field, tmp_path):
    """A field's view would replace the attribute (``state``, the buffer, slipped through and
    failed later in Numba); a plug-in file declaring one fails to load with one line."""
    from ordersim.orderers._state import GradientOrderer, StateLayout, f64

    message = rf"hider: state field\(s\) {field} would hide an attribute of the orderer; name them otherwise$"
    with pytest.raises(TypeError, match="^" + message):
        class Hider(GradientOrderer):
            name = "hider"
            state_layout = StateLayout(**{field: f64["m"]})
    assert_orderer_file_refused(tmp_path / "hider.py",
                                "from ordersim.orderers._state import GradientOrderer, StateLayout, f64\n\n\n"
                                f"class Hider(GradientOrderer):\n    name = 'hider'\n"
                                f"    state_layout = StateLayout({field}=f64['m'])\n", message)


def assert_orderer_file_refused(path, source, message):
    """An orderer file of ``source`` fails to load with the one-line config error ``message``."""
    from ordersim.config import Config, ConfigError, check_fields

    path.write_text(source)
    with pytest.raises(ConfigError, match=r"^config field 'orderers': orderer file .* failed to import: TypeError: "
                                          + message) as info:
        check_fields(Config(orderers=[str(path)]), 1)
    assert "\n" not in str(info.value)


def test_a_state_field_named_like_an_attribute_set_in_setup_is_refused_at_construction():
    from ordersim.orderers._state import GradientOrderer, StateLayout, f64

    class Keeper(GradientOrderer):
        name = "keeper"
        state_layout = StateLayout(history=f64["m"])
        kernel = observe_nothing

        def _setup(self):
            self.history = []

    with pytest.raises(TypeError, match=r"^keeper: state field\(s\) history would hide an attribute"):
        Keeper(1, 2, 1)


# A plug-in gradient orderer with one mistake each, refused when its class is defined with one line
# naming the orderer and what to set: without a state_layout the run segfaulted once it observed
# (the kernel's accessors read another layout's slots); the kernel's mistakes were Numba's or an
# AttributeError in the engine.
GRADIENT_ORDERER_MISTAKES = [
    ("kernel = record", r"orderer 'mistake' sets no state_layout; set it to the StateLayout its kernel's fields"),
    ("state_layout = {'values': f64['m', 'n']}", r"orderer 'mistake' state_layout must be a StateLayout, got dict"),
    ("state_layout = STATE", r"orderer 'mistake' defines no kernel; set kernel = staticmethod\(body\)"),
    ("state_layout = STATE\n    kernel = staticmethod(njit(lambda grads, state, start: 0))",
     r"orderer 'mistake' kernel\(grads, state, start\) does not take \(grads, state\)"),
    pytest.param("state_layout = STATE\n    kernel = staticmethod(lambda grads, state: 0)",
                 r"orderer 'mistake' kernel is not Numba-jitted \(function\); decorate its body with @observer",
                 marks=pytest.mark.skipif(os.environ.get("NUMBA_DISABLE_JIT") == "1", reason="Numba is off")),
]


@pytest.mark.parametrize("line, message", GRADIENT_ORDERER_MISTAKES)
def test_a_gradient_orderer_that_breaks_the_contract_is_one_line_when_its_file_loads(line, message, tmp_path):
    assert_orderer_file_refused(tmp_path / "mistake.py",
                                "from numba import njit\n\n"
                                "from ordersim.orderers._state import GradientOrderer, StateLayout, f64, observer\n\n"
                                "STATE = StateLayout(values=f64['m', 'n'])\n\n\n"
                                "@observer\ndef record(grads, state, start):\n    pass\n\n\n"
                                f"class Mistake(GradientOrderer):\n    name = 'mistake'\n    {line}\n", message)


def test_an_observer_body_of_other_arguments_is_refused_when_decorated():
    with pytest.raises(TypeError, match=r"^@observer: .*body\(grads, state\) must take the arguments "
                                        r"\(grads, state, start\)$"):
        @observer
        def body(grads, state):
            pass


def test_a_state_dimension_that_is_no_attribute_is_one_line_naming_the_field():
    from ordersim.orderers._state import GradientOrderer, f64

    class Sized(GradientOrderer):
        name = "sized"
        state_layout = StateLayout(table=f64["m", "k"])
        kernel = observe_nothing

    with pytest.raises(TypeError, match=r"^sized: state field 'table' has the dimension 'k', which is no "
                                        r"attribute of the orderer; allowed: 'm', 'n', 'd', an int, or an "
                                        r"attribute set in _setup"):
        Sized(1, 4, 2)
    Sized.k = 3  # a class attribute is one
    assert Sized(1, 4, 2).table.shape == (1, 3)


def test_every_attribute_the_base_classes_set_is_declared():
    """What the class-time check of the state fields compares with: the attributes Orderer and
    GradientOrderer set are annotated (one left out would escape the check)."""
    from ordersim.orderers._state import GradientOrderer, StateLayout

    class Plain(GradientOrderer):
        name = "plain"
        state_layout = StateLayout()
        kernel = observe_nothing

    for o in (make_orderer("rr", 2, 4, 3), Plain(2, 4, 3)):
        declared = {key for klass in type(o).__mro__ for key in (*vars(klass), *vars(klass).get("__annotations__", {}))}
        assert set(vars(o)) - set(getattr(o, "state_layout", StateLayout()).fields) <= declared, o.name


def test_balance_options_of_the_config():
    from ordersim.orderers.base import balance_options

    assert balance_options({}, 4) == {"projection": "none", "projection_dim": None, "group": 1}
    assert balance_options({"projection": "sparse", "projection_dim": 0, "group": 4}, 8) == {
        "projection": "sparse", "projection_dim": None, "group": 4}
    for table, message in (({"group": 3}, r"'orderer_options': group must divide batch \(4\), got 3"),
                           ({"projection": "x"}, r"'orderer_options': projection must be one of")):
        with pytest.raises(ValueError, match=message):
            balance_options(table, 4)


READER = """\
from ordersim.orderers._state import GradientOrderer, StateLayout, observer


@observer
def observe_nothing(grads, state, start):
    pass


class Reader(GradientOrderer):
    name = "reader"
    description = "reads the gradients, is no UnitOrderer, takes an option of its own"
    extra_options = ("stride",)
    state_layout = StateLayout()
    kernel = observe_nothing

    def __init__(self, *args, stride=1, **kwargs):
        self.stride = stride
        super().__init__(*args, **kwargs)
"""


@pytest.fixture
def reader(tmp_path):
    path = tmp_path / "reader.py"
    path.write_text(READER)
    return str(path)


@pytest.mark.parametrize("names,table", [
    (["rr"], {"projection": "sparse", "group": 2}),  # accepted and ignored by both
    (["rr"], {"block": 4}),
    (["recursive-pair"], {"block": 4, "group": 2}),
    (["d-grab"], {"colour": 1}),
    (["reader"], {"group": 2}),
    (["reader"], {"projection": "sparse"}),
    (["reader"], {"stride": 3}),
    (["reader", "d-grab"], {"stride": 3, "group": 2}),  # each takes its own; reader refuses group
    (["rr", "recursive-pair", "reader"], {"stride": 3, "block": 2}),
    (["recursive-pair"], {"block": 3}),  # a bad value of an orderer's own option (check_options)
    (["rr", "recursive-pair"], {"block": True}),
])
def test_the_simulator_refuses_exactly_what_make_orderer_refuses(names, table, reader):
    """The config's orderer_options (shared by the run's orderers, each taking the entries that
    are its options) is refused, with one line naming the orderer or the allowed options, exactly
    when make_orderer refuses one of the orderers with its entries; what is accepted reaches the
    orderer the simulator builds. Without this, a user's orderer ran without projection or group
    silently, and recursive-pair's block could not be given."""
    from ordersim.config import Config, ConfigError, check_fields
    from ordersim.orderers import build_orderer

    names = [reader if name == "reader" else name for name in names]
    refusals, taken = [], set()
    for name in names:
        own = {key: value for key, value in table.items()
               if key in ("projection", "group", *orderer_class(name).extra_options)}
        taken |= set(own)
        try:
            make_orderer(name, 2, 8, 3, **own)
        except ValueError as err:
            refusals.append(str(err))
    config = Config(orderers=names, orderer_options=table, batch=2)
    if refusals or set(table) - taken:
        with pytest.raises(ConfigError, match=r"^config field 'orderer_options': .*(reader: projection and group "
                                              r"are options|unknown option\(s\) \w+ for the orderers .*; allowed: "
                                              r"projection, projection_dim, group|recursive-pair: block must "
                                              r"be a power of two >= 2, got)"):
            check_fields(config, 1)
        return
    for name in check_fields(config, 1).orderers:
        orderer, _ = build_orderer(name, 2, 8, 3, 0, ranks=1, first=0, local=2, orderer_options=table, batch=2)
        for key in set(table) & set(orderer_class(name).extra_options):
            assert getattr(orderer, key) == table[key], (name, key)
        if orderer.needs_gradients:
            assert orderer.group == table.get("group", 1)


def test_a_user_orderer_given_projection_exits_2_with_one_line(reader):
    from test_simulator import run_serial

    result = run_serial(["--orderers", reader, "--batch", "2", "--orderer-options", '{"group": 2}', "--dry-run"])
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "ordersim: error: config field 'orderer_options': reader: projection and group are options of the "
        "balancing orderers; reader takes neither (docs/algorithms.md, \"Random projection before balancing\"), "
        "got projection='none', group=2"]


@pytest.mark.parametrize("name", [name for name in UNIT_ORDERERS if name not in ("greedy", "recursive-pair")])
def test_projected_state_is_small(name):
    """Under a projection the state is O(m k + m n) plus Pi (its non-zeros for the sparse one),
    plus a pair walk's pending first gradient (m d): no d-wide running sums or means."""
    m = 1 if is_centralized(name) else 4
    n, d, k = 1000, 2000, 16
    batch = np.random.default_rng(0).standard_normal((m, 100, d))
    for projection in ("sparse", "gaussian"):
        o = make_orderer(name, m, n, d, **required_options(name, {"projection": projection, "projection_dim": k}))
        o.begin_epoch()
        for start in range(0, n, 100):
            o.observe(batch[:, : min(100, n - start)])
        o.end_epoch()
        matrix = o.dense_projection.nbytes + o.sparse_columns.nbytes + o.sparse_bounds.nbytes
        # (_held_bytes counts the state buffer and its views of the fields: Pi twice)
        bound = 16 * (m * k + m * n) * 8 + 2 * (matrix + (m * d * 8 if o.pair_walk else 0))
        assert o.running_sum.shape[1] == k
        assert _held_bytes(o) <= bound, f"{name} {projection}: {_held_bytes(o)} bytes held > {bound}"
    assert o.sparse_columns.size == 0 and o.dense_projection.shape == (k, d)


def test_grouped_state_keeps_one_d_wide_row_per_open_group():
    """With groups and a projection the d-wide state is the open group's sum (made its mean in
    place) and, for a pair walk, its pending row, where a pair's first group is summed: no row
    for a group's mean (docs/algorithms.md, "Grouped balancing")."""
    m, n, d, k, r = 2, 40, 300, 6, 4
    for name, want in (("d-grab", ["group_sum"]), ("d-grab-pair", ["extra", "group_sum"]),
                       ("cd-kh", ["extra", "group_sum"]), ("greedy", ["group_sum"]), ("recursive-pair", ["block_grads"])):
        o = make_orderer(name, m, n, d, projection="sparse", projection_dim=k, group=r)
        wide = sorted(field for field, view in o.state_layout.views(o.state).items() if view.shape[-1:] == (d,))
        assert wide == want, name


def test_projected_and_grouped_state_of_greedy_and_recursive_pair():
    """greedy's table holds the units' projected vectors, (m, n/r, k), not (m, n, d);
    recursive-pair's tree sums are k wide (its block keeps d-wide unit means, B d per worker);
    neither keeps a unit vector beside them (docs/algorithms.md)."""
    m, n, d, k, r = 2, 40, 300, 6, 4
    batch = np.random.default_rng(0).standard_normal((m, n, d))
    greedy = make_orderer("greedy", m, n, d, projection="sparse", projection_dim=k, group=r)
    tree = make_orderer("recursive-pair", m, n, d, projection="gaussian", projection_dim=k, group=r, block=4)
    for o in (greedy, tree):
        o.begin_epoch()
        o.observe(batch)
        o.end_epoch()
        assert o.unit_vectors.size == 0
    assert greedy.table.shape == (m, n // r, k)
    assert tree.accumulators.shape == (m, 3, k) and tree.block_grads.shape == (m, 4, d)
    assert tree.pair_vectors.shape == (2, k)


@pytest.mark.parametrize("name", ORDERERS)
def test_orders_are_permutations_every_epoch(name):
    m = 1 if is_centralized(name) else 3
    for n, b in ((17, 4), (8, 1)):
        for first_order in ("random", "identity"):
            grads = gradients(m, n, 5, seed=n, epochs=7)
            orders = drive(make_orderer(name, m, n, 5, seed=1, first_order=first_order), grads, b)
            assert len(orders) == 8
            assert_valid_orders(name, orders, n)


# Orders a plug-in's _next_order() might return instead of the correct (3, 8) rows, and the fault
# end_epoch() must name (unchecked, the first segfaulted the simulator, the 1-based one trained on
# wrong rows, the 1-d one failed deep in Numba).
BROKEN_ORDERS = {
    "short rows": (lambda rows: rows[:, :-1], r"must have shape \(3, 8\) \(workers, examples\), got shape \(3, 7\)"),
    "one row": (lambda rows: rows[0], r"must have shape \(3, 8\) \(workers, examples\), got shape \(8,\)"),
    "1-based": (lambda rows: rows + 1, r"must be a permutation of 0\.\.7 in every row, but order\[0, \d\] = 8 "
                                       r"is out of range$"),
    "negative": (lambda rows: np.where(rows == 5, -1, rows), r"must be .*, but order\[0, \d\] = -1 is out of range$"),
    "repeat in the last row": (lambda rows: np.vstack([rows[:2], np.zeros((1, 8), np.int64)]),
                               r"must be .*, but order\[2, 1\] = 0 repeats an example of the row$"),
    "floats": (lambda rows: rows.astype(float), r"must hold integers \(int64 example ids\), got dtype float64$"),
}


@pytest.mark.parametrize("base", ["rr", "d-grab"])
@pytest.mark.parametrize("fault", sorted(BROKEN_ORDERS))
def test_end_epoch_refuses_an_order_that_breaks_the_contract(base, fault):
    """Every order an orderer builds is checked: one ValueError naming the orderer, the epoch and
    the first fault, whether the orderer reads the gradients (d-grab) or not (rr)."""
    breaks, message = BROKEN_ORDERS[fault]

    class Broken(orderer_class(base)):
        name = "broken"

        def _next_order(self):
            rows = super()._next_order()
            return rows if self.epoch < 2 else breaks(rows)

    grads = gradients(3, 8, 2, seed=0, epochs=2)
    o = Broken(3, 8, 2)
    drive(o, grads[:1], 2)  # epoch 1's order is fine
    with pytest.raises(ValueError, match=r"^broken: the order _next_order\(\) built after epoch 2 " + message):
        drive(o, grads[1:], 2)


def test_the_first_order_is_checked():
    class FirstOneBased(orderer_class("rr")):
        name = "first-one-based"

        def _first_row(self, row):
            return super()._first_row(row) + 1

    with pytest.raises(ValueError, match=r"^first-one-based: the first order \(_first_row\) must be a permutation "
                                         r"of 0\.\.7 in every row, but order\[0, \d\] = 8 is out of range$"):
        FirstOneBased(2, 8, 1)


def test_an_orderer_that_does_not_permute_may_repeat_but_not_leave_the_range():
    """wr (permutes = False) draws with replacement: repeats pass, an id outside 0..n-1 does not."""
    assert not orderer_class("wr").permutes and all(orderer_class(n).permutes for n in ORDERERS if n != "wr")

    class Draws(orderer_class("wr")):
        name = "draws"
        shift = 0

        def _next_order(self):
            return np.zeros((self.workers, self.examples), np.int64) + self.shift

    o = Draws(2, 8, 1)
    drive(o, gradients(2, 8, 1, seed=0, epochs=1), 1)
    assert not o.order.any()
    o.shift = 8
    with pytest.raises(ValueError, match=r"^draws: the order _next_order\(\) built after epoch 2 must be example "
                                         r"ids in 0\.\.7, but order\[0, 0\] = 8 is out of range$"):
        drive(o, gradients(2, 8, 1, seed=0, epochs=1), 1)


def first_non_permutation_reference(orders):
    """NumPy: (row, position) of the first entry out of 0..n-1 or seen before in its row."""
    n = orders.shape[1]
    for i, row in enumerate(orders):
        first_seen = np.zeros(n, dtype=bool)
        first_seen[np.unique(row, return_index=True)[1]] = True
        bad = np.flatnonzero((row < 0) | (row >= n) | ~first_seen)
        if bad.size:
            return i, int(bad[0])
    return -1, -1


def test_first_non_permutation_matches_numpy():
    from ordersim.orderers.base import first_non_permutation

    rng = np.random.default_rng(7)
    faults = 0
    for _ in range(400):
        m, n = rng.integers(1, 5), rng.integers(1, 12)
        orders = np.stack([rng.permutation(n) for _ in range(m)]).astype(np.int64)
        for _ in range(rng.integers(0, 3)):  # corrupt a few entries: out of range or a repeat
            orders[rng.integers(m), rng.integers(n)] = rng.integers(-2, n + 2)
        expected = first_non_permutation_reference(orders)
        faults += expected[0] >= 0
        assert tuple(first_non_permutation(orders)) == expected, orders
    assert 100 < faults < 400


def test_the_simulator_stops_on_a_plug_in_order_with_its_message(tmp_path):
    """A plug-in's 1-based orders used to train on wrong rows (serial and MPI disagreeing) and
    short rows to segfault the run; now the run stops with the orderer's message."""
    from test_simulator import run_serial

    for name, body in (("one-based", "self.random_row(i, self.epoch) + 1"),
                       ("short", "self.random_row(i, self.epoch)[:-1]")):
        module = tmp_path / f"{name.replace('-', '_')}.py"
        module.write_text(textwrap.dedent(f"""\
            import numpy as np
            from ordersim.orderers.base import Orderer

            class Bad(Orderer):
                name = "{name}"
                description = "a broken order"

                def _next_order(self):
                    return np.stack([{body} for i in range(self.workers)])
            """))
        result = run_serial(["--orderers", str(module), "--epochs", "2", "--seeds", "0", "--quiet",
                             "--out", str(tmp_path / f"{name}.h5")])
        assert result.returncode == 1, result.stderr
        *_, error, where = result.stderr.strip().splitlines()  # where: the warm-up's slice of n
        assert re.fullmatch(rf"ValueError: {name}: the order _next_order\(\) built after epoch 1 must .*",
                            error), result.stderr
        assert where.startswith("(in the warm-up: an epoch on the first 16 of every worker's 56"), where


# -- equivalences ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", [n for n in ORDERERS if is_centralized(n)])
def test_centralized_orderers_refuse_several_workers(name):
    """The error names the orderers to use for m > 1, each registered (kh-sgd: cd-kh; the others: cd-grab, ...)."""
    alternatives = orderer_class(name).centralized_alternatives
    assert set(alternatives) <= set(ORDERERS)
    assert "cd-kh" in alternatives if name == "kh-sgd" else "cd-grab" in alternatives
    for m in (2, 3, 8):
        with pytest.raises(ValueError, match=r"workers=1") as info:
            make_orderer(name, workers=m, examples=10, dim=3)
        assert all(other in str(info.value) for other in alternatives) and f"workers={m}" in str(info.value)


@pytest.mark.parametrize("n,b", [(10, 1), (11, 3), (12, 4), (9, 9)])
@pytest.mark.parametrize("options", [{}, {"tie": "minus"}, {"sign": "walk", "walk_c": 1.5}])
def test_one_worker_equivalences(n, b, options):
    """cd-grab with m = 1 is pair-grab; grab is d-grab with m = 1."""
    for kind in ("normal", "int"):
        grads = gradients(1, n, 6, seed=b, epochs=EPOCHS, kind=kind)
        for a, c in (("cd-grab", "pair-grab"), ("grab", "d-grab")):
            got = drive(make_orderer(a, 1, n, 6, seed=4, **options), grads, b)
            want = drive(make_orderer(c, 1, n, 6, seed=4, **options), grads, b)
            assert_same_orders(got, want, f"{a} vs {c}")


@pytest.mark.parametrize("name", [n for n in ORDERERS if not is_centralized(n) and not is_coordinated(n)])
@pytest.mark.parametrize("options", [{}, {"sign": "walk", "walk_c": 3.0, "first_order": "identity"}])
def test_worker_slice_is_rows_of_the_full_orderer(name, options):
    """Rank invariance: workers 2..3 built on their own (first_worker=2) get exactly rows 2..3 of the
    m = 4 orderer. (walk_c is given explicitly: its default depends on the workers passed.)"""
    n, d, b = 13, 6, 3
    grads = gradients(4, n, d, seed=9)
    full = drive(make_orderer(name, 4, n, d, seed=8, **options), grads, b)
    part = drive(make_orderer(name, 2, n, d, seed=8, first_worker=2, **options), [g[2:4] for g in grads], b)
    assert_same_orders(part, [order[2:4] for order in full], f"{name} workers 2..3")


def test_cd_grab_rows_depend_on_the_other_workers():
    """The converse for the coordinated orderer: its rows are not those of an independent slice."""
    n, d = 16, 4
    grads = gradients(4, n, d, seed=3)
    full = drive(make_orderer("cd-grab", 4, n, d, seed=8), grads, 1)
    part = drive(make_orderer("cd-grab", 2, n, d, seed=8, first_worker=2), [g[2:4] for g in grads], 1)
    assert np.array_equal(full[0][2:4], part[0])  # the same first orders
    assert any(not np.array_equal(f[2:4], p) for f, p in zip(full[1:], part[1:]))


# -- the reorder lemma ---------------------------------------------------------------------------
def _lemma_holds(z, old_order, signs, new_order):
    """herd(new) <= 1/2 herd(old) + 1/2 max_k ||sum_{t<=k} eps_t z_{old(t)}||, inf- and 2-norm."""
    signed = np.cumsum(np.asarray(signs, dtype=np.float64)[:, None] * z[old_order], axis=0)
    tolerance = 1e-9 * (1.0 + np.abs(z).sum())
    for norm in (np.inf, 2):
        balanced = float(np.max(np.linalg.norm(signed, ord=norm, axis=1)))
        lhs = herding(z, new_order, norm)
        rhs = 0.5 * herding(z, old_order, norm) + 0.5 * balanced
        assert lhs <= rhs + tolerance, f"norm {norm}: herd(new) = {lhs} > {rhs}"


@st.composite
def centered_problem(draw, integers=False):
    n = draw(st.integers(1, 16))
    d = draw(st.integers(1, 4))
    if integers:
        elements = st.integers(-5, 5).map(float)
    else:
        elements = st.floats(-1e3, 1e3, allow_nan=False, allow_infinity=False, allow_subnormal=False)
    z = draw(hnp.arrays(np.float64, (n, d), elements=elements))
    z = z - z.mean(axis=0)
    old_order = np.array(draw(st.permutations(range(n))), dtype=np.int64)
    return z, old_order


@settings(max_examples=200, deadline=None)
@given(problem=centered_problem(), data=st.data())
def test_reorder_lemma_for_any_signs(problem, data):
    z, old_order = problem
    n = len(old_order)
    signs = data.draw(st.lists(st.sampled_from([1, -1]), min_size=n, max_size=n))
    new_order = herding_reorder(old_order, signs)
    assert np.array_equal(np.sort(new_order), np.arange(n))
    # the two-pointer rule is "+1 in arrival order, then -1 in reverse arrival order"
    plus = [e for e, s in zip(old_order, signs) if s > 0]
    minus = [e for e, s in zip(old_order, signs) if s < 0]
    assert new_order.tolist() == plus + minus[::-1]
    _lemma_holds(z, old_order, signs, new_order)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(problem=centered_problem(integers=True), sign=st.sampled_from(["deterministic", "walk"]),
       tie=st.sampled_from(["plus", "minus"]), seed=st.integers(0, 3))
def test_grab_kernel_reorders_by_the_two_pointer_rule(problem, sign, tie, seed):
    """Feed grab centered vectors (first epoch: v = z), read the signs the kernel chose, and check
    its next order is the reference's two-pointer order for those signs, that the lemma holds for
    it, and that its discrepancy is the max of the signed prefix sums."""
    z, old_order = problem
    n, d = z.shape
    o = make_orderer("grab", 1, n, d, seed=seed, sign=sign, tie=tie, walk_c=2.0, first_order="identity")
    visit = o.begin_epoch()[0]
    for t in range(n):
        o.observe(np.ascontiguousarray(z[visit[t]][None, None, :]))
    signs = [1 if plus else -1 for plus in o.signs[0]]
    o.end_epoch()
    prefix = np.cumsum(np.array(signs, dtype=np.float64)[:, None] * z[visit], axis=0)
    assert np.isclose(o.balance_discrepancy, np.abs(prefix).max(), rtol=1e-12, atol=1e-12)
    new_order = o.begin_epoch()[0]
    assert np.array_equal(new_order, herding_reorder(visit, signs))
    _lemma_holds(z, visit, signs, new_order)


@settings(max_examples=60, deadline=None)
@given(problem=centered_problem(), b=st.integers(1, 4))
def test_pair_kernel_reorder_is_the_two_pointer_rule_with_pair_signs(problem, b):
    """PairBalance's placement is the two-pointer rule with example signs (eps_k, -eps_k) for the
    pair (first, second), so the lemma holds for pair-grab's new order too."""
    z, old_order = problem
    n, d = z.shape
    o = make_orderer("pair-grab", 1, n, d, first_order="identity")
    visit = o.begin_epoch()[0]
    for start in range(0, n, b):
        o.observe(np.ascontiguousarray(z[visit[start:start + b]][None]))
    o.end_epoch()
    new_order = o.begin_epoch()[0]
    signs = []
    for k in range(n // 2):
        eps = 1 if new_order[k] == visit[2 * k] else -1
        signs += [eps, -eps]
    if n % 2:
        signs.append(1)
    assert np.array_equal(new_order, herding_reorder(visit, signs))
    _lemma_holds(z, visit, signs, new_order)


# -- the in-place-buffer pitfall ------------------------------------------------------------------
@pytest.mark.parametrize("name", [n for n in ORDERERS if orderer_class(n).needs_gradients])
def test_buffer_overwritten_in_place_is_copied(name):
    """observe() gets the SAME buffer every step (b = 1), overwritten with the next gradients: the
    orders must equal those from fresh arrays, and pair differences must not collapse to zero."""
    m = 1 if is_centralized(name) else 3
    n, d = 14, 5
    grads = gradients(m, n, d, seed=21)
    fresh_orderer = make_orderer(name, m, n, d, seed=2)
    fresh = drive(fresh_orderer, grads, 1)
    o = make_orderer(name, m, n, d, seed=2)
    buffer = np.empty((m, 1, d))
    reused = []
    for g in grads:
        order = o.begin_epoch()
        reused.append(order)
        for t in range(n):
            buffer[:, 0, :] = g[np.arange(m), order[:, t]]
            o.observe(buffer)
        o.end_epoch()
        if hasattr(o, "balance_discrepancy"):
            assert o.balance_discrepancy > 0, f"{name}: every balanced vector was zero"
        if "pair" in name or name == "cd-grab":
            # with all differences zero every sign is +1: first of pair k at slot k, second at n-1-k
            collapsed = np.empty_like(order)
            collapsed[:, : n // 2] = order[:, 0::2]
            collapsed[:, n // 2:] = order[:, 1::2][:, ::-1]
            assert not np.array_equal(o.order, collapsed), f"{name}: gradient-independent pattern"
    reused.append(o.order.copy())
    assert_same_orders(reused, fresh, f"{name} with a reused buffer")


class GradientArray(np.ndarray):
    """An ndarray subclass, as array libraries hand out (observe() must take it like any array)."""


@pytest.mark.parametrize("name", ORDERERS)
def test_layouts_subclasses_pickling_and_kept_orders(name):
    """The same orders whatever the gradients' memory layout (strided views, an ndarray subclass,
    read-only arrays), after a pickle round trip mid-epoch (through checkpoint_state), and an order returned by
    begin_epoch() or read from ``order`` stays as it was when later epochs run."""
    m = 1 if is_centralized(name) else 3
    n, d, b = 11, 19, 3  # d: whole vectors of the balancing kernels' vector code and a tail
    grads = gradients(m, n, d, seed=8)
    want = drive(make_orderer(name, m, n, d, seed=4), grads, b)
    o = make_orderer(name, m, n, d, seed=4)
    got, kept = [], []
    for epoch, g in enumerate(grads):
        order = o.begin_epoch()
        got.append(order)
        kept.append((order, order.copy(), o.order, o.order.copy()))
        for step, start in enumerate(range(0, n, b)):
            chunk = np.take_along_axis(g, order[:, start:start + b, None], axis=1)
            if step % 3 == 0:  # every other element of a wider array: a strided view
                wide = np.zeros(chunk.shape[:2] + (2 * d,))
                wide[:, :, ::2] = chunk
                chunk = wide[:, :, ::2]
            elif step % 3 == 1:
                chunk = np.asfortranarray(chunk).view(GradientArray)
            else:  # read-only, as arrays converted from JAX are
                chunk.setflags(write=False)
            o.observe(chunk)
            if step == 1 and epoch % 2 == 0:
                o = pickle.loads(pickle.dumps(o))
        o.end_epoch()
    got.append(o.order.copy())
    assert_same_orders(got, want, f"{name} with strided, subclassed and pickled inputs")
    for epoch, (returned, returned_copy, attribute, attribute_copy) in enumerate(kept):
        assert np.array_equal(returned, returned_copy), f"{name}: epoch {epoch}'s begin_epoch() result changed"
        assert np.array_equal(attribute, attribute_copy), f"{name}: epoch {epoch}'s order attribute changed"


# -- misuse -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ORDERERS)
def test_observe_rejects_bad_gradients(name):
    m = 1 if is_centralized(name) else 2
    n, d = 5, 3
    o = make_orderer(name, m, n, d)
    with pytest.raises(ValueError, match=r"begin_epoch"):
        o.observe(np.zeros((m, 1, d)))
    with pytest.raises(ValueError, match=r"begin_epoch"):
        o.end_epoch()
    o.begin_epoch()
    with pytest.raises(ValueError, match=r"called twice"):
        o.begin_epoch()
    for bad in (np.zeros((m, 1, d), np.float32), np.zeros((m, 1, d), np.int64), np.zeros((m, 1, d)).tolist()):
        with pytest.raises(ValueError, match=r"float64"):
            o.observe(bad)
    for shape in ((m, d), (m, 1, 1, d), (m + 1, 1, d), (m, 1, d + 1)):
        with pytest.raises(ValueError, match=rf"shape \({m}, b, {d}\)"):
            o.observe(np.zeros(shape))
    with pytest.raises(ValueError, match=r"b must be 1\.\.5"):
        o.observe(np.zeros((m, 0, d)))
    with pytest.raises(ValueError, match=r"b must be 1\.\.5"):
        o.observe(np.zeros((m, 6, d)))
    o.observe(np.zeros((m, 3, d)))
    with pytest.raises(ValueError, match=r"2 of 5 left"):
        o.observe(np.zeros((m, 3, d)))
    if orderer_class(name).needs_gradients:
        with pytest.raises(ValueError, match=r"after 3 of 5 examples.*needs the gradients of every example"):
            o.end_epoch()
        o.observe(np.ones((m, 2, d)))
        with pytest.raises(ValueError, match=r"all 5 examples.*end_epoch"):
            o.observe(np.zeros((m, 1, d)))
    o.end_epoch()  # gradient-free orderers may end early
    o.begin_epoch()  # and the orderer is usable afterwards


def test_make_orderer_rejects_bad_names_and_options():
    with pytest.raises(ValueError, match=r"unknown orderer 'nope'") as info:
        make_orderer("nope", 1, 4, 2)
    assert all(name in str(info.value) for name in ORDERERS)
    with pytest.raises(ValueError, match=r"unknown option\(s\) colour.*allowed: .*walk_c"):
        make_orderer("d-grab", 1, 4, 2, colour="red")


@pytest.mark.parametrize("name", ORDERERS)
@pytest.mark.parametrize("kwargs,message", [
    ({"sign": "x"}, r"sign must be one of"),
    ({"tie": "x"}, r"tie must be one of"),
    ({"first_order": "x"}, r"first_order must be one of"),
    ({"walk_c": -1}, r"walk_c must be a finite number > 0"),
    ({"walk_c": 0.0}, r"walk_c must be a finite number > 0"),
    ({"walk_c": float("nan")}, r"walk_c must be a finite number > 0"),
    ({"workers": 0}, r"workers must be an integer >= 1"),
    ({"workers": 1.0}, r"workers must be an integer >= 1"),
    ({"examples": 0}, r"examples must be an integer >= 1"),
    ({"dim": 0}, r"dim must be an integer >= 1"),
    ({"seed": -1}, r"seed must be an integer >= 0"),
    ({"first_worker": -1}, r"first_worker must be an integer >= 0"),
])
def test_bad_option_values(name, kwargs, message):
    args = {"workers": 1, "examples": 4, "dim": 2, **kwargs}
    with pytest.raises(ValueError, match=message):
        make_orderer(name, **args)


# -- memory ------------------------------------------------------------------------------------------
def _held_bytes(obj):
    total = 0
    for value in vars(obj).values():
        items = value.values() if isinstance(value, dict) else value if isinstance(value, (list, tuple)) else [value]
        total += sum(item.nbytes for item in items if isinstance(item, np.ndarray))
    return total


@pytest.mark.parametrize("name", ORDERERS)
def test_memory_is_linear(name):
    """O(m d + m n) arrays after an epoch (no (m, n, d) table), except greedy's O(m n d)."""
    m = 1 if is_centralized(name) else 4
    if name == "greedy":
        n, d = 50, 40
        bound = 16 * (m * n * d + m * d + m * n) * 8
    else:
        n, d = 1000, 2000
        bound = 16 * (m * d + m * n) * 8
        if name == "recursive-pair":  # and its block's tree: (2B - 1) d per worker (docs/algorithms.md)
            bound += 2 * (2 * 8 - 1) * m * d * 8
    batch = np.random.default_rng(0).standard_normal((m, 100, d))
    for sign in ("deterministic", "walk"):
        o = make_orderer(name, m, n, d, sign=sign)
        o.begin_epoch()
        for start in range(0, n, 100):
            o.observe(batch[:, : min(100, n - start)])
        o.end_epoch()
        assert _held_bytes(o) <= bound, f"{name}: {_held_bytes(o)} bytes held > {bound}"


# -- determinism and the walk -----------------------------------------------------------------------
@pytest.mark.parametrize("name", [n for n in ORDERERS if n != "ig"])  # ig: no randomness at all
def test_same_seed_same_orders_different_seed_different_first_order(name):
    m = 1 if is_centralized(name) else 3
    n, d = 20, 4
    grads = gradients(m, n, d, seed=1)
    for options in ({}, {"sign": "walk"}):
        a = drive(make_orderer(name, m, n, d, seed=42, **options), grads, 3)
        b = drive(make_orderer(name, m, n, d, seed=42, **options), grads, 3)
        assert_same_orders(a, b, f"{name} seed 42 twice")
        c = drive(make_orderer(name, m, n, d, seed=43, **options), grads, 3)
        assert not np.array_equal(a[0], c[0])
        assert all(not np.array_equal(a[0][i], a[0][j]) for i in range(m) for j in range(i))


@pytest.mark.parametrize("name", [n for n in ORDERERS if takes_sign_options(n)])
def test_walk_is_seeded_and_counts_failures(name):
    m = 1 if is_centralized(name) else 3
    n, d = 30, 4
    grads = gradients(m, n, d, seed=2)
    # identity first orders: only the walk's uniforms depend on the seed
    runs = {}
    for seed in (0, 0, 1):
        stats = []
        orders = drive(make_orderer(name, m, n, d, seed=seed, sign="walk", first_order="identity"), grads, 2,
                       stats=stats)
        runs.setdefault(seed, []).append(orders)
    assert_same_orders(runs[0][0], runs[0][1], f"{name} walk, same seed")
    assert any(not np.array_equal(x, y) for x, y in zip(runs[0][0][1:], runs[1][0][1:])), "walk ignores the seed"
    for walk_c, expect_failures in ((1e-9, True), (1e12, False)):
        stats = []
        drive(make_orderer(name, m, n, d, sign="walk", walk_c=walk_c), grads, 2, stats=stats)
        failures = [int(s["walk_failures"].sum()) for s in stats]
        if expect_failures:
            assert all(f > 0 for f in failures), failures
        else:
            assert failures == [0] * EPOCHS
    stats = []
    drive(make_orderer(name, m, n, d, walk_c=1e-9), grads, 2, stats=stats)
    assert all(int(s["walk_failures"].sum()) == 0 for s in stats), "the deterministic sign is no walk"


# -- pure-Python execution of the kernels ------------------------------------------------------------
NO_JIT_SCRIPT = textwrap.dedent("""
    import numpy as np
    import numba
    from ordersim.orderers import make_orderer, orderer_class
    from reference.orderers import REFERENCES, drive, drive_pair_differences, required_options
    assert numba.config.DISABLE_JIT
    rng = np.random.default_rng(0)
    checked = []
    for name, m in (("cd-grab", 3), ("d-grab", 2), ("greedy", 2), ("pair-grab", 1), ("d-grab-pair", 2),
                    ("sbw", 1), ("kh-sgd", 1), ("cd-kh", 3), ("recursive-pair", 2)):
        for n, b, options in ((7, 2, {}), (6, 1, {"sign": "walk", "walk_c": 1.0, "tie": "minus"}),
                              (13, 3, {"block": 4, "b_max": 0.5, "epochs": 7}),
                              (9, 3, {"projection": "sparse", "projection_dim": 5, "group": 3}), (10, 4, {"group": 2}),
                              (8, 2, {"projection": "gaussian", "projection_dim": 4, "sign": "walk", "walk_c": 2.0})):
            options = {key: value for key, value in options.items()
                       if key not in ("block", "b_max", "epochs") or key in orderer_class(name).extra_options}
            options = required_options(name, options)
            grads = [rng.standard_normal((m, n, 37)) for _ in range(3)]  # 16-lane blocks and a tail
            want = REFERENCES[name](m, n, 37, 1, grads, **options)
            got = drive(make_orderer(name, m, n, 37, seed=1, **options), grads, b)
            assert all(np.array_equal(g, w) for g, w in zip(got, want)), (name, n, b, options)
            orderer = make_orderer(name, m, n, 37, seed=1, **options)
            if orderer.pair_difference_kernel:  # and through pair differences (not a grouped pair walk's)
                got = drive_pair_differences(orderer, grads, b)
                assert all(np.array_equal(g, w) for g, w in zip(got, want)), (name, n, b, options)
                checked.append(name)
    assert checked.count("cd-grab") == 4, checked  # a grouped pair walk has no pair-difference kernel
    print("no-jit ok")
""")


def test_kernels_run_without_jit():
    env = dict(os.environ, NUMBA_DISABLE_JIT="1",
               PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT / "tests"), os.environ.get("PYTHONPATH")])))
    result = subprocess.run([sys.executable, "-c", NO_JIT_SCRIPT], capture_output=True, text=True,
                            env=env, cwd=ROOT, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no-jit ok" in result.stdout


# -- the simulator's route: TOML, serial = MPI -------------------------------------------------------
# One projected and one grouped configuration, serial = MPI bitwise (orders included) at 2 and 4 ranks.
UNIT_RUNS = {
    "projected": ["--orderers", "d-grab", "cd-grab", "recursive-pair", "greedy", "--batch", "2",
                  "--orderer-options", '{"projection": "sparse", "projection_dim": 8}'],
    "grouped": ["--orderers", "d-grab-pair", "cd-kh", "--batch", "3",
                "--orderer-options", '{"group": 3, "projection": "gaussian", "projection_dim": 4}'],
}
UNIT_RUN_BASE = ["--epochs", "2", "--workers", "4", "--seeds", "0", "--quiet", "--record-orders"]


@pytest.mark.mpi
@pytest.mark.parametrize("ranks", [2, 4])
@pytest.mark.parametrize("config", sorted(UNIT_RUNS))
def test_projected_and_grouped_runs_match_serial_under_mpi(tmp_path, ranks, config, serial_reference):
    from conftest import run_mpi
    from test_simulator import assert_bitwise_equal, contents

    args = [*UNIT_RUN_BASE, *UNIT_RUNS[config]]
    path = tmp_path / f"mpi{ranks}.h5"
    # generous: a cold Numba cache compiles the MPI epoch loop and the unit kernels first
    result = run_mpi(ranks, ["-m", "ordersim", *args, "--backend", "mpi", "--out", str(path)], timeout=900)
    assert result.returncode == 0, result.stderr
    assert_bitwise_equal(contents(serial_reference(args)), contents(path))


def test_orderer_options_from_toml_reach_the_orderers(tmp_path, serial_reference):
    """[orderer_options] in a TOML config is the --orderer-options flag: the same trace, whose
    groups move as units; a group that does not divide batch exits 2 with one line."""
    import h5py
    from test_simulator import assert_bitwise_equal, contents, run_serial

    config = tmp_path / "grouped.toml"
    config.write_text('orderers = ["d-grab-pair", "cd-kh"]\nbatch = 3\n\n[orderer_options]\n'
                      'group = 3\nprojection = "gaussian"\nprojection_dim = 4\n')
    path = tmp_path / "toml.h5"
    result = run_serial(["run", str(config), *UNIT_RUN_BASE, "--out", str(path)])
    assert result.returncode == 0, result.stderr
    flags = serial_reference([*UNIT_RUN_BASE, *UNIT_RUNS["grouped"]])
    assert_bitwise_equal(contents(flags), contents(path))
    with h5py.File(path, "r") as f:
        orders = f["runs/cd-kh/seed_0/orders"][()]
        assert '"group": 3' in f.attrs["config"]
    # groups of 3 move as units: the rows of epochs 1 and 2 are made of epoch 0's triples
    n = orders.shape[2] // 3 * 3
    for row in range(orders.shape[1]):
        triples = set(map(tuple, orders[0, row, :n].reshape(-1, 3)))
        assert set(map(tuple, orders[2, row, :n].reshape(-1, 3))) == triples
    config.write_text('orderers = ["cd-grab"]\nbatch = 3\n\n[orderer_options]\ngroup = 2\n')
    result = run_serial(["run", str(config), *UNIT_RUN_BASE, "--out", str(tmp_path / "bad.h5")])
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == (
        "ordersim: error: config field 'orderer_options': group must divide batch (3), got 2")
