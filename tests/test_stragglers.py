"""Straggler models, communication model, the virtual clock, and the step-time theory."""

import math

import numpy as np
import pytest

from ordersim.coding import make_scheme
from ordersim.stragglers import BLOCK, STRAGGLER_MODELS, CommModel, make_straggler_model
from ordersim.streams import stream
from reference.coding import StragglerClock


def H(n):
    return sum(1.0 / i for i in range(1, n + 1))


@pytest.mark.parametrize("name", ["constant", "shifted-exp", "persistent", "bernoulli", "bursty"])
def test_draws_depend_only_on_seed_worker_step(name):
    m = make_straggler_model(name, 4, seed=3)
    ref = m.times_block(0, 2 * BLOCK + 10, load=2)
    # any access order, any block split, a fresh instance: the same numbers
    fresh = make_straggler_model(name, 4, seed=3)
    steps = np.random.default_rng(0).permutation(2 * BLOCK + 10)[:40]
    for t in steps:
        np.testing.assert_array_equal(fresh.times(int(t), load=2), ref[t])
    np.testing.assert_array_equal(make_straggler_model(name, 4, seed=3).times_block(BLOCK - 3, 9, 2),
                                  ref[BLOCK - 3:BLOCK + 6])
    if name != "bursty":  # per-worker streams: a worker's times do not depend on how many there are
        wide = make_straggler_model(name, 7, seed=3).times_block(0, 2 * BLOCK + 10, load=2)
        np.testing.assert_array_equal(wide[:, :4], ref)
    if name != "constant":
        assert not np.array_equal(make_straggler_model(name, 4, seed=4).times_block(0, 50, 2), ref[:50])


def test_shifted_exponential_is_load_times_a_plus_exp():
    m = make_straggler_model("shifted-exp", 3, seed=1, a=0.5, mu=4.0)
    t = m.times_block(0, 10, load=3)
    expected = np.stack([0.5 + stream(1, "straggler", w, 0).exponential(0.25, BLOCK)[:10]
                         for w in range(3)], axis=1)
    np.testing.assert_allclose(t, 3 * expected, rtol=1e-15)
    np.testing.assert_allclose(m.times_block(0, 10, load=np.array([1, 2, 3])), expected * [1, 2, 3])


def test_persistent_adds_delays_on_the_chosen_workers_only():
    base = make_straggler_model("shifted-exp", 5, seed=2).times_block(0, 4000, load=2)
    m = make_straggler_model("persistent", 5, seed=2, stragglers=[1, 3], delay=4.0)
    t = m.times_block(0, 4000, load=2)
    np.testing.assert_array_equal(t[:, [0, 2, 4]], base[:, [0, 2, 4]])
    extra = t[:, [1, 3]] - base[:, [1, 3]]
    assert np.all(extra >= 0)
    assert abs(extra.mean() - 4.0) < 4 * 4.0 / math.sqrt(extra.size)  # Exp(mean 4), not scaled by load
    with pytest.raises(ValueError, match="worker ids"):
        make_straggler_model("persistent", 5, stragglers=[5])


def test_bernoulli_slows_a_fraction_p_by_the_factor():
    base = make_straggler_model("shifted-exp", 6, seed=0).times_block(0, 5000)
    t = make_straggler_model("bernoulli", 6, seed=0, p=0.2, slowdown=7.0).times_block(0, 5000)
    ratio = t / base
    slow = np.isclose(ratio, 7.0)
    assert np.all(slow | np.isclose(ratio, 1.0))
    p_hat = slow.mean()
    assert abs(p_hat - 0.2) < 4 * math.sqrt(0.2 * 0.8 / slow.size)


@pytest.mark.parametrize("B,W,lam,p", [(2, 6, 1, 0.1), (3, 5, 2, 0.3), (1, 1, 3, 0.5)])
def test_bursty_obeys_the_window_rules(B, W, lam, p):
    m = make_straggler_model("bursty", 6, seed=1, B=B, W=W, lam=lam, p_start=p, slowdown=5.0)
    steps = 1500
    flags = m.straggling(0, steps)
    assert flags.any()
    for start in range(steps - W + 1):
        window = flags[start:start + W]
        assert window.any(axis=0).sum() <= lam
        for i in np.flatnonzero(window.any(axis=0)):
            idx = np.flatnonzero(window[:, i])
            assert idx[-1] - idx[0] + 1 == len(idx) <= B  # one burst, at most B long
    base = make_straggler_model("shifted-exp", 6, seed=1).times_block(0, steps)
    np.testing.assert_allclose(m.times_block(0, steps), np.where(flags, 5.0 * base, base))


def test_trace_replay_csv_npz(tmp_path):
    table = np.arange(12, dtype=float).reshape(4, 3) + 1
    csv = tmp_path / "t.csv"
    np.savetxt(csv, table, delimiter=",", header="w0,w1,w2")
    npz = tmp_path / "t.npz"
    np.savez(npz, times=table)
    for source in (dict(path=str(csv)), dict(path=str(npz)), dict(times=table)):
        m = make_straggler_model("trace", 3, **source)
        np.testing.assert_array_equal(m.times_block(0, 4), table)
        np.testing.assert_array_equal(m.times(6, load=2), 2 * table[2])  # wraps around
    with pytest.raises(ValueError, match="3 workers"):
        make_straggler_model("trace", 4, times=table)
    with pytest.raises(ValueError, match="past the trace"):
        make_straggler_model("trace", 3, times=table, wrap=False).times(4)
    with pytest.raises(ValueError, match=">= 0"):
        make_straggler_model("trace", 3, times=-table)


def test_comm_model_and_bad_parameters():
    assert CommModel().time(1e9) == 0.0
    assert CommModel(latency=1e-3, bandwidth=1e6).time(8000) == pytest.approx(1e-3 + 8e-3)
    with pytest.raises(ValueError, match="bandwidth"):
        CommModel(bandwidth=0)
    with pytest.raises(ValueError, match="unknown straggler model"):
        make_straggler_model("slowish", 3)
    with pytest.raises(ValueError, match="shifted-exp"):
        make_straggler_model("shifted-exp", 3, sigma=1)
    with pytest.raises(ValueError, match="mu"):
        make_straggler_model("shifted-exp", 3, mu=-1)
    assert set(STRAGGLER_MODELS) == {"constant", "shifted-exp", "persistent", "bernoulli", "bursty", "trace"}


def test_clock_accumulates_broadcast_compute_and_upload():
    n, s, d = 6, 2, 10
    model = make_straggler_model("shifted-exp", n, seed=0)
    comm = CommModel(latency=0.01, bandwidth=8000.0)  # one 80-byte message: 0.02 s
    clock = StragglerClock(model, make_scheme("pgc-cr", n, s), d, comm)
    G = np.ones((n, d))
    total = 0.0
    for t in range(5):
        arrival = model.times(t, s + 1 if t == 0 else 1) + 0.02
        np.testing.assert_allclose(clock.arrivals(t), arrival)
        r = clock.advance(t, G)
        assert r.time == np.sort(arrival)[n - s - 1]
        total += 0.02 + r.time
    assert clock.now == pytest.approx(total)
    assert [h[2] for h in clock.history] == [3, 1, 1, 1, 1]


# -- validation against theory -------------------------------------------------------------------
# Shifted exponential T = l (a + E), E ~ Exp(mu): the k-th fastest of n has mean l (a + (H_n - H_{n-k}) / mu).
# wait-all: k = n, l = 1; ignore-stragglers: k = n - s, l = 1; GC-CR and GC-FR (wait n - s):
# k = n - s, l = s + 1; GC-FR decoding at the first response of every block: the max over n/(s+1)
# blocks of the min of s+1, i.e. l (a + H_{n/(s+1)} / ((s+1) mu)); pipelined GC: k = n - s, l = 1.

@pytest.mark.parametrize("n,s", [(6, 2), (12, 3)])
def test_mean_step_time_matches_order_statistics(n, s):
    a, mu, draws = 0.5, 2.0, 20000
    model = make_straggler_model("shifted-exp", n, seed=11, a=a, mu=mu)
    k = n - s
    cases = [
        ("wait-all", {}, 1, a + H(n) / mu),
        ("ignore-stragglers", {}, 1, a + (H(n) - H(n - k)) / mu),
        ("gc-fr", {"wait": "n-s"}, s + 1, (s + 1) * (a + (H(n) - H(n - k)) / mu)),
        ("gc-fr", {"wait": "decodable"}, s + 1, (s + 1) * (a + H(n // (s + 1)) / ((s + 1) * mu))),
        ("gc-cr", {}, s + 1, (s + 1) * (a + (H(n) - H(n - k)) / mu)),
        ("pgc-cr", {}, 1, a + (H(n) - H(n - k)) / mu),
    ]
    for name, options, load, expected in cases:
        scheme = make_scheme(name, n, s, **options)
        assert scheme.load == load
        times = scheme.step_times(model.times_block(1, draws, load))  # step 0 of pgc is the fill
        se = times.std(ddof=1) / math.sqrt(draws)
        assert abs(times.mean() - expected) < 4 * se, (name, options, times.mean(), expected, se)


# -- the simulator's clock ---------------------------------------------------------------------------

def test_simulator_records_simulated_time_without_changing_training(tmp_path, capsys):
    import h5py

    from ordersim.runner import main

    common = ["--epochs", "2", "--workers", "6", "--batch", "2", "--seeds", "3", "--orderers", "cd-grab",
              "--no-herding", "--quiet", "--test-fraction", "0"]
    plain, timed = tmp_path / "plain.h5", tmp_path / "timed.h5"
    assert main([*common, "--out", str(plain)]) == 0
    options = '{"a": 0.5, "mu": 2.0, "latency": 0.001, "bandwidth": 8e5}'
    assert main([*common, "--out", str(timed), "--stragglers", "shifted-exp", "--straggler-options",
                 options, "--coding", "gc-cr", "--coding-s", "2"]) == 0
    with h5py.File(plain, "r") as f0, h5py.File(timed, "r") as f1:
        r0, r1 = f0["runs/cd-grab/seed_3"], f1["runs/cd-grab/seed_3"]
        np.testing.assert_array_equal(r0["train_loss"][()], r1["train_loss"][()])  # GC is exact
        assert "sim_time" not in r0 and "stragglers" not in r0
        n, d = r1.attrs["examples_per_worker"], f1["x_star"].shape[0]
        steps = 2 * -(-n // 2)
        assert r1.attrs["coding"] == "gc-cr" and r1.attrs["load"] == 3 and r1.attrs["coding_s"] == 2
        step_time = r1["stragglers/step_time"][()]
        responded = r1["stragglers/responded"][()]
        assert step_time.shape == (steps,) and responded.shape == (steps, 6)
        # independent recomputation: seed 3's draws, load 3, decode at the 4th arrival, comm both ways
        message = 0.001 + 8 * d / 8e5
        arrival = make_straggler_model("shifted-exp", 6, seed=3, a=0.5, mu=2.0).times_block(0, steps, 3) + message
        decode = np.sort(arrival, axis=1)[:, 3]
        np.testing.assert_allclose(step_time, decode + message, rtol=1e-12)
        np.testing.assert_array_equal(responded, arrival <= decode[:, None])
        assert responded.sum(axis=1).min() >= 4
        np.testing.assert_allclose(r1["sim_time"][()], [0, step_time[:steps // 2].sum(), step_time.sum()],
                                   rtol=1e-12)
    assert main([*common, "--out", str(tmp_path / "x.h5"), "--stragglers", "shifted-exp",
                 "--coding", "pgc-nope"]) == 2
    assert "config field 'coding'" in capsys.readouterr().err
    assert main([*common, "--out", str(tmp_path / "x.h5"), "--stragglers", "shifted-exp",
                 "--coding", "gc-fr", "--coding-s", "3"]) == 2
    assert "config field 'coding_s'" in capsys.readouterr().err
