"""Gradient-coding schemes against plain NumPy references (ordersim/coding.py docstring)."""

import itertools
import warnings

import numpy as np
import pytest

from ordersim.coding import SCHEMES, DecodingWarning
from ordersim.coding import make_scheme as make_pure_scheme
from reference.coding import Stepper


def make_scheme(*args, **kwargs):
    """A scheme that carries gradients through its steps (tests/reference/coding.py)."""
    return Stepper(make_pure_scheme(*args, **kwargs))


def arrivals_with_first(n, first, rng):
    """Arrival times whose earliest responders are exactly `first`, in that order."""
    t = np.empty(n)
    t[list(first)] = np.arange(len(first)) * 0.1 + 0.1
    rest = [i for i in range(n) if i not in set(first)]
    t[rest] = 10.0 + rng.random(len(rest))
    return t


def rel_err(x, ref):
    return np.linalg.norm(x - ref) / np.linalg.norm(ref)


@pytest.mark.parametrize("name,n,s", [("gc-fr", 4, 1), ("gc-fr", 6, 2), ("gc-fr", 6, 1), ("gc-fr", 8, 3),
                                      ("gc-cr", 4, 1), ("gc-cr", 5, 2), ("gc-cr", 6, 2), ("gc-cr", 7, 3),
                                      ("gc-cr", 8, 3)])
def test_gc_decodes_full_sum_for_every_responder_set(name, n, s):
    rng = np.random.default_rng(n * 10 + s)
    scheme = make_scheme(name, n, s, seed=1, **({"wait": "n-s"} if name == "gc-fr" else {}))
    assert scheme.load == s + 1
    G = rng.standard_normal((n, 5)) * rng.uniform(0.1, 10, (n, 1))
    full = G.sum(axis=0)
    for I in itertools.combinations(range(n), n - s):
        first = list(rng.permutation(I))
        r = scheme.step(G, arrivals_with_first(n, first, rng))
        assert rel_err(r.gradient, full) < 1e-10, I
        assert sorted(np.flatnonzero(r.responded)) == sorted(I)
        assert r.time == pytest.approx(0.1 * (n - s))
        # the NumPy reference: any a with a^T B_I = 1^T gives the full sum from the coded messages
        F = scheme.B @ G
        a = r.coefficients
        assert set(np.flatnonzero(a)) <= set(I)
        np.testing.assert_allclose(a @ scheme.B, np.ones(n), atol=1e-9)
        assert rel_err(a @ F, full) < 1e-10


@pytest.mark.parametrize("n,s", [(5, 1), (6, 2), (7, 3)])
def test_cr_construction_follows_tandon(n, s):
    scheme = make_scheme("gc-cr", n, s, seed=3)
    B, H = scheme.B, scheme.H
    np.testing.assert_allclose(H @ np.ones(n), 0, atol=1e-12)
    np.testing.assert_allclose(H @ B.T, 0, atol=1e-10)  # every row of B in null(H)
    for i in range(n):
        support = set(np.flatnonzero(np.abs(B[i]) > 0))
        assert support == {(i + q) % n for q in range(s + 1)}
        assert B[i, i] == 1.0
        assert list(scheme.partitions(i)) == sorted(support)
    assert scheme.worst_condition() < 1e8
    # same seed, same code; another seed, another code
    np.testing.assert_array_equal(make_scheme("gc-cr", n, s, seed=3).B, B)
    assert not np.allclose(make_scheme("gc-cr", n, s, seed=4).B, B)


def test_fr_decodes_at_first_response_of_every_block():
    n, s = 6, 2  # blocks {0,1,2}, {3,4,5}
    scheme = make_scheme("gc-fr", n, s)
    rng = np.random.default_rng(0)
    G = rng.standard_normal((n, 3))
    t = np.array([5.0, 1.0, 6.0, 7.0, 8.0, 2.0])
    r = scheme.step(G, t)
    assert r.time == 2.0
    assert list(np.flatnonzero(r.responded)) == [1, 5] == list(np.flatnonzero(r.used))
    assert rel_err(r.gradient, G.sum(0)) < 1e-12
    np.testing.assert_array_equal(scheme.step_times(t[None]), [2.0])
    with pytest.raises(ValueError, match=r"\(s\+1\) \| workers"):
        make_scheme("gc-fr", 7, 2)


def test_wait_all_and_ignore_stragglers_against_numpy():
    n, s = 7, 2
    rng = np.random.default_rng(1)
    G = rng.standard_normal((n, 4))
    t = rng.random(n)
    r = make_scheme("wait-all", n, s).step(G, t)
    np.testing.assert_allclose(r.gradient, G.sum(0), rtol=1e-12)
    assert r.time == t.max() and r.responded.all() and r.load == 1
    r = make_scheme("ignore-stragglers", n, s).step(G, t)
    fastest = np.argsort(t)[:n - s]
    np.testing.assert_allclose(r.gradient, n / (n - s) * G[fastest].sum(0), rtol=1e-12)
    assert r.time == np.sort(t)[n - s - 1]
    assert sorted(np.flatnonzero(r.used)) == sorted(fastest)
    np.testing.assert_allclose(r.weights[:, 0], np.where(np.isin(np.arange(n), fastest), n / (n - s), 0))


def test_ties_broken_by_worker_index():
    r = make_scheme("ignore-stragglers", 4, 1).step(np.eye(4), np.ones(4))
    assert list(np.flatnonzero(r.used)) == [0, 1, 2]
    assert r.responded.all()  # every message had arrived by the decode time


@pytest.mark.parametrize("name", list(SCHEMES))
def test_step_times_match_step(name):
    n, s = 6, 2
    scheme = make_scheme(name, n, s, seed=0)
    rng = np.random.default_rng(2)
    T = rng.exponential(1.0, (40, n))
    G = rng.standard_normal((n, 2))
    times = [scheme.step(G, T[t], t).time for t in range(40)]
    np.testing.assert_array_equal(scheme.step_times(T), times)


@pytest.mark.parametrize("name", list(SCHEMES))
def test_loads_are_the_partitions_a_worker_computes(name):
    """A worker computes every partition it stores at each step, except in pipelined GC, where it
    computes all of them at step 0 (the fill) and one list position at each later step."""
    n, s = 6, 2
    scheme = make_pure_scheme(name, n, s, seed=0)
    (stored,) = {len(scheme.partitions(worker)) for worker in range(n)}
    later = 1 if scheme.pipelined else stored
    assert scheme.loads(0, 5).tolist() == [stored] + [later] * 4
    assert scheme.loads(3, 4).tolist() == [later] * 4
    assert scheme.loads(0, 0).shape == (0,)
    assert [scheme.load_at(t) for t in range(5)] == scheme.loads(0, 5).tolist()


def assert_same_bits(batched, per_step):
    assert batched.dtype == per_step.dtype and batched.shape == per_step.shape
    assert batched.tobytes() == per_step.tobytes()


def assert_steps_weights_match_step_weights(scheme, arrival, first_step):
    weights, times, responded = scheme.steps_weights(arrival, first_step)
    decodes = [scheme.step_weights(row, first_step + t) for t, row in enumerate(arrival)]
    assert_same_bits(weights, np.stack([w for w, _, _ in decodes]))
    assert_same_bits(times, np.array([t for _, t, _ in decodes]))
    assert_same_bits(responded, np.stack([r for _, _, r in decodes]))


@pytest.mark.parametrize("s", [1, 2, 3])
@pytest.mark.parametrize("name, options", [(name, {}) for name in SCHEMES] +
                         [("gc-fr", {"wait": "n-s"}), ("pgc-fr", {"wait": "decodable"}),
                          ("pgc-fr-staggered", {"wait": "decodable"})])
def test_steps_weights_equal_stacked_step_weights_bitwise(name, options, s):
    """The batched decode is the per-step one bit for bit, for step ranges starting at the pipeline
    fill (step 0), inside the first s steps, and around the end of an epoch of 7 steps (its last,
    partial step 6 and the next epoch's first steps), with ties in the arrival times."""
    workers = 12
    for seed in (0, 1, 2):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DecodingWarning)  # poorly conditioned codes decode too
            scheme = make_pure_scheme(name, workers, s, seed=seed, **options)
            assert scheme._batched()  # the built-ins are vectorized, not the fallback loop
            rng = np.random.default_rng(seed)
            arrival = rng.exponential(1.0, (40, workers))
            arrival[4, 3] = arrival[4, 8] = arrival[4, 1]  # ties, broken by worker index
            for first_step, steps in ((0, 40), (0, 1), (1, 3), (6, 1), (6, 7), (7, 7 + s), (13, 27)):
                assert_steps_weights_match_step_weights(scheme, arrival[:steps], first_step)


def test_steps_weights_of_a_scheme_overriding_a_hook_loops_over_its_step_weights():
    """A user's scheme that changes ``coefficients`` (docs/adding.md) without a batched
    counterpart gets the per-step loop, not the base class's vectorized decode."""
    class DropStragglers(SCHEMES.get_class("ignore-stragglers")):
        def coefficients(self, first):
            a = np.zeros(self.workers)
            a[first] = 2.0
            return a

    scheme = DropStragglers(6, 2)
    assert not scheme._batched()
    arrival = np.random.default_rng(0).exponential(1.0, (9, 6))
    assert_steps_weights_match_step_weights(scheme, arrival, 3)
    assert set(np.unique(scheme.steps_weights(arrival, 3)[0])) == {0.0, 2.0}


PIPELINED = ["pgc-fr", "pgc-cr", "pgc-fr-staggered", "pgc-cr-exact"]


def reference_pipelined_step(name, n, s, arrival, t, seed):
    """Independent NumPy reference of one pipelined step's decode, written from the definitions in
    ordersim/coding.py's docstring (pgc-fr, pgc-cr: the authors' resnet18_cifar10.py): returns
    (weights (n, s+1), a (n,), terms) where terms lists (a_i B_ij, j, tau) of every partition copy
    the decoder uses, worker by worker, list position by list position (the order the scheme adds
    them in, so that the weights compare bit for bit)."""
    fr = name.startswith("pgc-fr")
    if fr:
        lists = [[(i // (s + 1)) * (s + 1) + q for q in range(s + 1)] for i in range(n)]
        offsets = [i % (s + 1) if name == "pgc-fr-staggered" else 0 for i in range(n)]
    else:
        lists = [[(i + q) % n for q in range(s + 1)] for i in range(n)]
        offsets = [0] * n
    B = np.zeros((n, n))
    for i in range(n):
        B[i, lists[i]] = 1.0
    if name == "pgc-cr-exact":
        B = make_pure_scheme("gc-cr", n, s, seed=seed).B  # Tandon et al.'s random code (tested above)
    first = list(np.argsort(arrival, kind="stable")[:n - s])
    a = np.zeros(n)
    if fr:  # the earliest responder of every block, coefficient 1
        seen = set()
        for i in first:
            if i // (s + 1) not in seen:
                seen.add(i // (s + 1))
                a[i] = 1.0
    elif name == "pgc-cr":  # the authors' scaled sum
        a[first] = n / ((n - s) * (s + 1))
    else:  # exact decoding, solved in worker order
        ordered = sorted(first)
        a[ordered] = np.linalg.lstsq(B[ordered].T, np.ones(n), rcond=None)[0]
    weights = np.zeros((n, s + 1))
    terms = []
    for i in np.flatnonzero(a):
        for q, j in enumerate(lists[i]):
            # the last step <= t at which worker i computed its q-th partition (0: the fill)
            tau = max(u for u in range(t + 1) if u == 0 or (u + offsets[i]) % (s + 1) == q)
            assert t - tau <= s
            weights[j, t - tau] += a[i] * B[i, j]
            terms.append((a[i] * B[i, j], j, tau))
    return weights, a, terms


@pytest.mark.parametrize("name,n,s", [("pgc-fr", 6, 2), ("pgc-fr", 4, 1), ("pgc-cr", 6, 2), ("pgc-cr", 5, 1),
                                      ("pgc-cr", 12, 3), ("pgc-fr-staggered", 6, 2),
                                      ("pgc-fr-staggered", 4, 1), ("pgc-cr-exact", 6, 2),
                                      ("pgc-cr-exact", 5, 1)])
def test_pipelined_equals_numpy_reference(name, n, s):
    rng = np.random.default_rng(7)
    steps, d = 12, 3
    Gs = rng.standard_normal((steps, n, d))
    arrivals = rng.exponential(1.0, (steps, n))
    scheme = make_scheme(name, n, s, seed=5)
    pure = make_pure_scheme(name, n, s, seed=5)
    for t in range(steps):
        weights, a, terms = reference_pipelined_step(name, n, s, arrivals[t], t, seed=5)
        r = scheme.step(Gs[t], arrivals[t], t)
        np.testing.assert_array_equal(r.coefficients, a)
        np.testing.assert_array_equal(r.weights, weights)
        np.testing.assert_array_equal(pure.step_weights(arrivals[t], t)[0], weights)
        decoded = sum(c * Gs[tau, j] for c, j, tau in terms)  # Σ_i a_i f_i from the stale messages
        assert rel_err(r.gradient, decoded) < 1e-12
        assert r.load == (s + 1 if t == 0 else 1)
        if t == 0:
            continue
        computed = scheme.plist[scheme.computes(t)]
        assert scheme.computes(t).sum(axis=1).tolist() == [1] * n  # one partition per worker
        if name == "pgc-fr":  # all members of a block compute the same partition
            assert computed.tolist() == [(i // (s + 1)) * (s + 1) + t % (s + 1) for i in range(n)]
        else:  # every partition computed by exactly one of its holders: the load of uncoded SGD
            assert sorted(computed) == list(range(n))
    with pytest.raises(ValueError, match="in order"):
        scheme.step(Gs[0], arrivals[0], steps + 3)


@pytest.mark.parametrize("name", PIPELINED)
def test_pipelined_weights_per_partition(name):
    """pgc-fr, pgc-fr-staggered and pgc-cr-exact give every partition total weight 1 (exact on a
    fixed model); pgc-cr gives μ per responding holder, one holder per age after the fill."""
    n, s = 6, 2
    mu = n / ((n - s) * (s + 1))
    rng = np.random.default_rng(8)
    G = rng.standard_normal((n, 4))
    scheme = make_scheme(name, n, s, seed=0)
    for t in range(8):
        r = scheme.step(G, rng.random(n), t)
        if name == "pgc-cr":
            count = np.bincount([j for j in range(n) for q in range(s + 1) if r.used[(j - q) % n]],
                                minlength=n)
            np.testing.assert_allclose(r.weights.sum(axis=1), mu * count, rtol=1e-15)
            if t >= s:
                assert set(np.unique(r.weights)) <= {0.0, mu}
            np.testing.assert_allclose(r.weights.sum(), n, rtol=1e-14)  # n − s responders × (s+1) × μ
            assert rel_err(r.gradient, mu * (scheme.B[r.used] @ G).sum(axis=0)) < 1e-12
        else:
            np.testing.assert_allclose(r.weights.sum(axis=1), 1.0, atol=1e-9)
            assert rel_err(r.gradient, G.sum(0)) < 1e-10


def test_authors_cr_code_is_cyclic_ones():
    n, s = 7, 3
    scheme = make_scheme("pgc-cr", n, s)
    for i in range(n):
        assert sorted(np.flatnonzero(scheme.B[i])) == sorted((i + q) % n for q in range(s + 1))
    assert set(np.unique(scheme.B)) == {0.0, 1.0}
    np.testing.assert_array_equal(make_scheme("pgc-cr", n, 0).B, np.eye(n))


def test_cr_warns_on_poor_conditioning_and_refuses_undecodable_sets():
    scheme = make_pure_scheme("gc-cr", 5, 2, seed=0)
    with pytest.raises(ValueError, match="cannot decode"):
        scheme.coefficients(np.array([0, 1]))  # fewer than n - s responders
    scheme.B[1] = scheme.B[0] + 1e-10 * scheme.B[1]  # make two rows nearly equal
    scheme._cache.clear()
    with pytest.warns(DecodingWarning, match="cond"):
        scheme.coefficients(np.array([0, 1, 2]))
    good = make_scheme("gc-cr", 5, 2, seed=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DecodingWarning)
        for I in itertools.combinations(range(5), 3):
            good.coefficients(np.array(I))


def test_bad_arguments():
    with pytest.raises(ValueError, match="unknown coding scheme 'gc-xx'; known coding schemes: wait-all, "):
        make_pure_scheme("gc-xx", 4, 1)
    with pytest.raises(ValueError, match="s must be < workers"):
        make_scheme("gc-cr", 3, 3)
    with pytest.raises(ValueError, match="wait"):
        make_scheme("gc-fr", 4, 1, wait="sometimes")
    with pytest.raises(ValueError, match="G must be"):
        make_scheme("wait-all", 4).step(np.zeros((3, 2)), np.ones(4))
