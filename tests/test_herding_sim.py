"""The random-vector herding experiment: run() and the herding-sim command, at small sizes."""

import json
import subprocess
import sys

import h5py
import numpy as np
import pytest

from conftest import ROOT

import ordersim
from ordersim import herding_sim
from ordersim.herding_sim import main, random_vectors, run
from ordersim.metrics import parallel_herding
from ordersim.streams import stream

ORDERERS = ("rr", "d-grab", "d-grab-pair", "cd-grab")
SMALL = dict(dim=16, rounds=5)


@pytest.fixture(scope="module")
def small_runs():
    """{(m, seed): run(...)} for m in {2, 4}, m*n = 2000, rounds 5."""
    return {(m, seed): run(m, 2000 // m, seed=seed, **SMALL) for m in (2, 4) for seed in (0, 1, 2)}


def test_run_returns_one_curve_of_rounds_plus_one_per_orderer(small_runs):
    for result in small_runs.values():
        assert list(result) == list(ORDERERS)
        for values in result.values():
            assert values.shape == (SMALL["rounds"] + 1,) and values.dtype == np.float64
            assert np.all(np.isfinite(values)) and np.all(values > 0)


def test_every_orderer_starts_from_the_same_random_order(small_runs):
    for result in small_runs.values():
        starts = {name: values[0] for name, values in result.items()}
        assert len(set(starts.values())) == 1, starts


def test_balancing_orderers_end_far_below_random_reshuffling(small_runs):
    # Measured at these sizes: rr ends near 13-15, the balancing orderers near 2-4.5.
    for (m, seed), result in small_runs.items():
        rr = result["rr"][-1]
        for name in ("d-grab", "d-grab-pair", "cd-grab"):
            assert result[name][-1] < rr / 2, (m, seed, name, result[name][-1], rr)
        assert result["cd-grab"][-1] < result["cd-grab"][0] / 4


def test_uncoordinated_balancers_degrade_with_m_while_the_coordinated_ones_stay_flat():
    """README, "The CD-GraB paper's random-vector experiment", at m*n = 2048 (measured: d-grab 1.6 ->
    4.6-6.4 and d-grab-pair 2.1 -> 6.1-7.5 from m = 1 to 16; cd-grab 1.8-2.3 and cd-kh 5.9-8.7 at
    every m; kh-sgd 7.5-8.7 and sbw 13.6-14.8 at m = 1)."""
    for seed in (0, 1):
        ends = {m: {name: values[-1] for name, values in run(m, 2048 // m, seed=seed, **SMALL, orderers=(
            "d-grab", "d-grab-pair", "cd-grab", "cd-kh", *(("kh-sgd", "sbw") if m == 1 else ()))).items()}
            for m in (1, 16)}
        for name in ("d-grab", "d-grab-pair"):
            assert ends[16][name] > 2 * ends[1][name], (seed, name, ends)
        for name in ("cd-grab", "cd-kh"):
            assert ends[16][name] < 1.5 * ends[1][name], (seed, name, ends)
        # the randomized balancers stay above the greedy one, the walk's constant above kernel halving's
        assert ends[1]["cd-grab"] < ends[1]["kh-sgd"] < ends[1]["sbw"], (seed, ends)
        assert ends[16]["cd-grab"] < ends[16]["cd-kh"], (seed, ends)


def test_random_orders_herding_grows_as_sqrt_n_and_balanced_orders_barely_grow():
    """docs/algorithms.md, "Theory": Theta(sqrt n) for random orders, O~(1) for balanced ones; from n =
    256 to 4096 sqrt n grows 4x and log n 1.5x (measured: rr and so 3.3-5x, grab and pair-grab 1.2-1.4x)."""
    for seed in (0, 1):
        small, large = (run(1, n, seed=seed, **SMALL, orderers=("rr", "so", "grab", "pair-grab")) for n in (256, 4096))
        for name in ("rr", "so"):
            assert 2.5 < large[name][-1] / small[name][-1] < 8, (seed, name)
        for name in ("grab", "pair-grab"):
            assert large[name][-1] / small[name][-1] < 2, (seed, name)


def test_rr_rounds_are_fresh_random_permutations():
    m, n, rounds = 3, 50, 3
    values = run(m, n, dim=4, rounds=rounds, orderers=["rr"], seed=7)["rr"]
    z = random_vectors(m, n, 4, 7)
    for r in range(rounds + 1):
        orders = np.stack([stream(7, "order", i, r).permutation(n) for i in range(m)])
        assert values[r] == parallel_herding(z, orders)


def test_vectors_are_unit_norm_then_centered_and_do_not_depend_on_m():
    z2, z4 = random_vectors(2, 100, 8, 3), random_vectors(4, 100, 8, 3)
    np.testing.assert_array_equal(z2, z4[:2])
    np.testing.assert_allclose(z4.mean(axis=1), 0.0, atol=1e-15)
    raw = stream(3, "vectors", 1, 0).standard_normal((100, 8))
    raw /= np.linalg.norm(raw, axis=1, keepdims=True)
    np.testing.assert_array_equal(z4[1], raw - raw.mean(axis=0))


def test_chunked_observation_gives_identical_results(monkeypatch):
    whole = run(3, 101, dim=5, rounds=3, orderers=["d-grab", "cd-grab"], batch=2)
    monkeypatch.setattr(herding_sim, "CHUNK_ELEMENTS", 3 * 5 * 7)  # chunks of 7, last one short
    chunked = run(3, 101, dim=5, rounds=3, orderers=["d-grab", "cd-grab"], batch=2)
    for name in whole:
        np.testing.assert_array_equal(whole[name], chunked[name])


@pytest.mark.parametrize(
    "kwargs, words",
    [
        (dict(workers=0, examples=10), ["workers", ">= 1", "0"]),
        (dict(workers=2, examples=10, rounds=-1), ["rounds", ">= 0"]),
        (dict(workers=2, examples=10, batch=11), ["batch", "1..10", "11"]),
        (dict(workers=2, examples=10, orderers=["nope"]), ["unknown orderer 'nope'", "cd-grab"]),
        (dict(workers=2, examples=10, orderers=["grab"]), ["grab", "1 worker", "d-grab"]),
        (dict(workers=2, examples=10, orderers=["wr"]), ["wr", "permutations"]),
    ],
)
def test_run_rejects_bad_arguments(kwargs, words):
    with pytest.raises(ValueError) as info:
        run(**kwargs)
    for word in words:
        assert word in str(info.value)


# -- the command ------------------------------------------------------------------------------------
def test_cli_writes_the_documented_hdf5_layout(tmp_path, capsys):
    out = tmp_path / "h.h5"
    args = ["--workers", "2", "4", "--total", "2000", "--rounds", "5", "--seed", "1", "--out", str(out),
            "--orderers", *ORDERERS]
    assert main(args) == 0
    printed = capsys.readouterr().out
    assert printed.count("herding") >= 8  # a progress line per (m, orderer)
    assert f"results: {out}" in printed
    table = printed[printed.index("parallel herding"):].splitlines()
    assert all(name in table[1] for name in ORDERERS)
    assert table[2].split()[:2] == ["2", "1000"] and table[3].split()[:2] == ["4", "500"]

    with h5py.File(out, "r") as f:
        assert f.attrs["ordersim_version"] == ordersim.__version__
        assert f.attrs["experiment"] == "herding-sim"
        assert "start_time" in f.attrs and "end_time" in f.attrs
        documented = (ROOT / "docs" / "herding_sim.md").read_text()
        assert [name for name in f.attrs if f"`{name}`" not in documented] == []
        config = json.loads(f.attrs["config"])
        assert config["workers"] == [2, 4] and config["total"] == 2000 and config["rounds"] == 5
        assert config["orderers"] == list(ORDERERS) and config["seed"] == 1 and config["dim"] == 16
        assert sorted(f) == ["m_2", "m_4"]
        for m in (2, 4):
            group = f[f"m_{m}"]
            assert group.attrs["workers"] == m and group.attrs["examples_per_worker"] == 2000 // m
            expected = run(m, 2000 // m, rounds=5, seed=1)
            assert sorted(group) == sorted(ORDERERS)
            for name in ORDERERS:
                data = group[name]
                np.testing.assert_array_equal(data[()], expected[name])
                assert data.attrs["orderer"] == name and data.attrs["rounds"] == 5
                assert data.attrs["norm"] == "inf" and data.attrs["seconds"] >= 0
            # The table shows the final value of every orderer and the shared start.
            row = next(line.split() for line in table[2:] if line.split()[0] == str(m))
            assert float(row[2]) == pytest.approx(expected["rr"][0], abs=1e-3)
            assert [float(x) for x in row[3:]] == pytest.approx([expected[o][-1] for o in ORDERERS], abs=1e-3)


def test_the_default_orderers_run_centralized_ones_in_the_m_1_cell_only(tmp_path, capsys):
    """kh-sgd and sbw (centralized) are in the m = 1 row and '-' elsewhere; cd-kh is in every row
    and marked as ordersim's own; kh-sgd's curve is run()'s."""
    out = tmp_path / "d.h5"
    assert main(["--workers", "1", "2", "--total", "200", "--rounds", "2", "--quiet", "--out", str(out)]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[1].split()[3:] == ["rr", "d-grab", "d-grab-pair", "cd-grab", "cd-kh*", "kh-sgd", "sbw"]
    assert "-" not in table[2].split() and table[3].split()[-2:] == ["-", "-"]
    assert "ordersim's own" in table[4]
    with h5py.File(out, "r") as f:
        assert {"cd-kh", "kh-sgd", "sbw"} <= set(f["m_1"]) and "kh-sgd" not in f["m_2"] and "cd-kh" in f["m_2"]
        np.testing.assert_array_equal(f["m_1/kh-sgd"][()], run(1, 200, rounds=2, orderers=["kh-sgd"])["kh-sgd"])
        # cd-kh with one worker is kh-sgd (docs/algorithms.md)
        np.testing.assert_array_equal(f["m_1/cd-kh"][()], f["m_1/kh-sgd"][()])


def test_cli_quiet_prints_only_the_table(tmp_path, capsys):
    out = tmp_path / "q.h5"
    assert main(["--workers", "2", "--total", "40", "--rounds", "1", "--orderers", "cd-grab", "--quiet",
                 "--out", str(out)]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed[0].startswith("parallel herding") and len(printed) == 4


@pytest.mark.parametrize(
    "args, words",
    [
        (["--orderers", "rr", "nope"], ["--orderers", "'nope'", "cd-grab", "rr"]),
        (["--workers", "2", "--orderers", "grab"], ["--orderers", "grab", "1 worker", "m = 1 cell"]),
        (["--workers", "2", "4", "--orderers", "kh-sgd"], ["--orderers", "kh-sgd", "1 worker", "cd-kh"]),
        (["--orderers", "wr"], ["--orderers", "wr", "permutations"]),
        (["--orderers", "rr", "rr"], ["--orderers", "'rr'", "twice"]),
        (["--workers", "0"], ["--workers", "0"]),
        (["--workers", "2", "-3"], ["--workers", "-3"]),
        (["--workers", "2", "2"], ["--workers", "twice"]),
        (["--workers", "5000"], ["--workers", "5000", "--total"]),
        (["--total", "0"], ["--total", ">= 1", "0"]),
        (["--dim", "0"], ["--dim", ">= 1", "0"]),
        # sizes no machine holds: refused from an estimate, not a MemoryError traceback
        (["--total", str(10**14)], ["--total", str(10**14), "GiB", "memory"]),
        (["--dim", str(10**13)], ["--dim", str(10**13), "GiB", "memory"]),
        (["--rounds", "-1"], ["--rounds", ">= 0", "-1"]),
        (["--batch", "0"], ["--batch", "0"]),
        (["--batch", "2000"], ["--batch", "2000"]),
        (["--seed", "-1"], ["--seed", "-1"]),
        (["--workers", "two"], ["--workers", "'two'"]),
        (["--bogus"], ["--bogus"]),
    ],
)
def test_cli_rejects_bad_options_with_one_line_and_no_file(tmp_path, capsys, args, words):
    out = tmp_path / "never.h5"
    base = ["--workers", "2", "4", "--total", "2000", "--rounds", "1"]
    assert _exit_code(base + args + ["--out", str(out)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    message = captured.err.strip()
    assert "\n" not in message and message.startswith("python -m ordersim herding-sim: error:")
    for word in words:
        assert word in message, (word, message)
    assert not out.exists()


def _exit_code(args):
    """main()'s return value, or the code of the SystemExit that argparse raises."""
    try:
        return main(args)
    except SystemExit as stop:
        return stop.code


@pytest.mark.parametrize("where", ["under_a_file", "directory"])
def test_cli_checks_the_output_path_before_computing(tmp_path, capsys, monkeypatch, where):
    """A missing directory is made (as `run --out` makes it); a file on the way is not."""
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    out = blocker / "x.h5" if where == "under_a_file" else tmp_path
    monkeypatch.setattr(herding_sim, "run", lambda *a, **k: pytest.fail("computed before checking --out"))
    assert main(["--workers", "2", "--total", "20", "--out", str(out)]) == 2
    message = capsys.readouterr().err.strip()
    assert "\n" not in message and "--out" in message and str(out) in message


def test_module_entry_point_runs_and_reports_errors(tmp_path):
    out = tmp_path / "cli.h5"
    command = [sys.executable, "-m", "ordersim", "herding-sim"]
    ok = subprocess.run(command + ["--workers", "1", "2", "--total", "64", "--rounds", "2", "--orderers", "rr",
                                   "cd-grab", "--out", str(out)], capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0, ok.stderr
    with h5py.File(out, "r") as f:
        assert f["m_1/cd-grab"].shape == (3,) and f["m_2/rr"].shape == (3,)
    bad = subprocess.run(command + ["--orderers", "nope", "--out", str(tmp_path / "bad.h5")],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "bad.h5").exists()


def test_out_refuses_other_files_and_replaces_its_own_only_with_overwrite(tmp_path, capsys, monkeypatch):
    notes = tmp_path / "notes.txt"
    notes.write_text("kept\n")
    trace = tmp_path / "trace.h5"
    with h5py.File(trace, "w") as f:
        f.attrs.update(ordersim_version="0.1.0", config="{}")
    own = tmp_path / "own.h5"
    assert main(["--workers", "2", "--total", "16", "--rounds", "1", "--orderers", "rr", "--quiet",
                 "--out", str(own)]) == 0
    capsys.readouterr()
    monkeypatch.setattr(herding_sim, "run", lambda *a, **k: pytest.fail("computed before checking --out"))
    for out, words in ((notes, ["is not an HDF5 file"]), (trace, ["is not a herding-sim file"]),
                       (own, ["already holds a herding-sim file", "--overwrite"])):
        assert main(["--workers", "2", "--total", "16", "--out", str(out)]) == 2
        message = capsys.readouterr().err.strip()
        assert "\n" not in message and repr(str(out)) in message, message
        for word in words:
            assert word in message, (word, message)
    assert notes.read_text() == "kept\n"
    with h5py.File(trace, "r") as f:
        assert f.attrs["config"] == "{}"
    monkeypatch.undo()
    assert main(["--workers", "2", "--total", "16", "--rounds", "1", "--orderers", "rr", "--quiet",
                 "--out", str(own), "--overwrite"]) == 0
    with h5py.File(own, "r") as f:
        assert f.attrs["experiment"] == "herding-sim" and "git_commit" in f.attrs
