"""`python -m ordersim compare A.h5 B.h5` (ordersim/compare.py) on real traces: identical runs,
different ones, a missing run, files that are not traces, and serial vs `mpiexec -n 2`."""

import os
import re
import shutil
import subprocess
import sys

import h5py
import numpy as np
import pytest

from conftest import ROOT, run_mpi

from ordersim.compare import TIMING, TIMING_ATTRIBUTES, TIMING_DATASETS

SMALL = ["--epochs", "3", "--workers", "4", "--seeds", "0", "1", "--orderers", "rr", "cd-grab", "--quiet"]


def ordersim(args, timeout=300):
    return subprocess.run([sys.executable, "-m", "ordersim", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT, env=dict(os.environ))


def compare(a, b, *options):
    return ordersim(["compare", str(a), str(b), *options], timeout=120)


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    """Two runs of the same small job, and one with another step size."""
    folder = tmp_path_factory.mktemp("compare")
    paths = {}
    for name, extra in (("a", []), ("b", []), ("lr", ["--lr", "0.2"])):
        paths[name] = folder / f"{name}.h5"
        result = ordersim([*SMALL, *extra, "--out", str(paths[name])])
        assert result.returncode == 0, result.stderr
    return paths


def compared_counts(path):
    """What compare must count on a trace: its runs, its datasets but the timings (the root's
    included) and the attributes of its runs and their datasets but compile_time."""
    runs = datasets = attributes = 0
    with h5py.File(path, "r") as f:
        for seeds in f["runs"].values():
            for run in seeds.values():
                runs += 1
                attributes += len([k for k in run.attrs if k not in TIMING_ATTRIBUTES])
                for name, data in run.items():
                    if name not in TIMING_DATASETS:
                        datasets += 1
                        attributes += len(data.attrs)
        datasets += len([name for name in f if name != "runs"])
    return runs, datasets, attributes


def test_the_timings_are_the_schemas_timing_rows():
    """A timing renamed in ordersim/trace_schema.py would be compared (and differ at every run)."""
    from ordersim import trace_schema

    assert set(TIMING_DATASETS) <= {d.name for d in trace_schema.MEASURED_LAST if d.always}
    assert set(TIMING_ATTRIBUTES) <= {n for a in trace_schema.RUN_ATTRIBUTES for n in a.each}
    assert TIMING == set(TIMING_DATASETS) | set(TIMING_ATTRIBUTES)


def test_two_runs_of_the_same_job_are_identical(traces):
    result = compare(traces["a"], traces["b"])
    assert result.returncode == 0 and result.stderr == "", result
    [line] = result.stdout.splitlines()
    runs, datasets, attributes = compared_counts(traces["a"])
    assert runs == 4 and datasets > 4 * 10 and attributes > 4 * 15
    assert line == (f"identical: {runs} runs, {datasets} datasets and {attributes} attributes bit for bit "
                    f"(not compared: timings {', '.join(TIMING_DATASETS + TIMING_ATTRIBUTES)} and the "
                    "root's job attributes)"), line
    with h5py.File(traces["a"], "r") as a, h5py.File(traces["b"], "r") as b:  # the job attributes differ
        assert a.attrs["run_id"] != b.attrs["run_id"]


def test_another_step_size_is_different_and_named(traces):
    result = compare(traces["a"], traces["lr"])
    assert result.returncode == 1 and result.stderr == "", result
    lines = result.stdout.splitlines()
    assert len(lines) == 22, lines  # 20 differences, "... and K more", the summary
    more = re.fullmatch(r"\.\.\. and (\d+) more", lines[20])
    assert more, lines[20]
    total = re.match(r"different: (\d+) differences: 4 of the 4 runs in both files differ", lines[21])
    assert total and int(total[1]) == 20 + int(more[1]), lines[21]
    lr = f"/runs/cd-grab/seed_0: attribute lr: 0.3 in {traces['a']}, 0.2 in {traces['lr']}"
    assert lr in lines
    loss = [line for line in lines if line.startswith("/runs/cd-grab/seed_0/train_loss: ")]
    assert loss and re.fullmatch(r"/runs/cd-grab/seed_0/train_loss: values differ at 3 of 4 positions, "
                                 rf"first at \[1\]: \S+ in {re.escape(str(traces['a']))}, \S+ in "
                                 rf"{re.escape(str(traces['lr']))}", loss[0]), loss
    everything = compare(traces["a"], traces["lr"], "--limit", "0").stdout.splitlines()
    assert len(everything) == int(total[1]) + 1 and everything[:20] == lines[:20]
    assert "/runs/rr/seed_1/train_loss: " in "\n".join(everything)


def test_a_missing_run_is_named(traces, tmp_path):
    fewer = tmp_path / "fewer.h5"
    shutil.copy(traces["b"], fewer)
    with h5py.File(fewer, "a") as f:
        del f["runs/cd-grab/seed_1"]
    for a, b in ((traces["a"], fewer), (fewer, traces["a"])):
        result = compare(a, b)
        assert result.returncode == 1 and result.stderr == "", result
        assert result.stdout.splitlines() == [
            f"/runs/cd-grab/seed_1: run only in {traces['a']}",
            f"different: 1 difference: 0 of the 3 runs in both files differ; 1 run only in {traces['a']} "
            f"(compared {compared_counts(fewer)[1]} datasets and {compared_counts(fewer)[2]} attributes; "
            f"not compared: timings {', '.join(TIMING_DATASETS + TIMING_ATTRIBUTES)} and the root's job "
            "attributes)"], result.stdout


def test_bits_count_not_values_and_timings_and_job_attributes_do_not(traces, tmp_path):
    """NaNs at the same places are equal, -0.0 is not 0.0, an int32 4 is not an int64 4; the
    timings, compile_time and the root's attributes may differ."""
    same, other = tmp_path / "same.h5", tmp_path / "other.h5"
    for path in (same, other):
        shutil.copy(traces["b"], path)
    with h5py.File(same, "a") as s, h5py.File(other, "a") as o:
        for f in (s, o):
            f["runs/rr/seed_0/train_loss"][2] = np.nan
        for name in TIMING_DATASETS:
            o[f"runs/rr/seed_0/{name}"][1] += 1.0
        o["runs/rr/seed_0"].attrs["compile_time"] = 1e9
        o.attrs["hosts"], o.attrs["ranks"] = '["elsewhere"]', 8
    result = compare(same, other)
    assert result.returncode == 0 and result.stdout.startswith("identical: 4 runs, "), result
    with h5py.File(other, "a") as o:
        assert o["runs/rr/seed_1/balance_discrepancy"][1] == 0.0  # rr balances nothing
        o["runs/rr/seed_1/balance_discrepancy"][1] = -0.0
        o["runs/cd-grab/seed_0"].attrs["workers"] = np.int32(4)
    result = compare(same, other)
    assert result.returncode == 1, result
    assert result.stdout.splitlines()[:2] == [
        f"/runs/cd-grab/seed_0: attribute workers: 4 (int64, bytes 0400000000000000) in {same}, "
        f"4 (int32, bytes 04000000) in {other}",
        f"/runs/rr/seed_1/balance_discrepancy: values differ at 1 of 4 positions, first at [1]: "
        f"0.0 in {same}, -0.0 in {other}"], result.stdout
    assert result.stdout.splitlines()[2].startswith("different: 2 differences: 2 of the 4 runs")


@pytest.mark.parametrize("bad", ["random", "missing", "herding"])
def test_a_file_that_is_no_run_trace_is_one_line_exit_2(traces, tmp_path, bad):
    path = tmp_path / f"{bad}.h5"
    if bad == "random":
        with h5py.File(path, "w") as f:
            f["x"] = np.arange(3.0)
            f.attrs["note"] = "not a trace"
        expected = "is an HDF5 file but not an ordersim trace (no root attributes ordersim_version and config)"
    elif bad == "herding":
        result = ordersim(["herding-sim", "--workers", "2", "--total", "64", "--dim", "4", "--rounds", "1",
                           "--out", str(path)])
        assert result.returncode == 0, result.stderr
        expected = "is an ordersim herding-sim file, not a run trace"
    else:
        expected = "does not exist"
    for pair in ((traces["a"], path), (path, traces["a"])):
        result = compare(*pair)
        assert result.returncode == 2 and result.stdout == "", result
        [line] = result.stderr.splitlines()
        assert line == (f"ordersim compare: error: {str(path)!r} {expected}; expected an ordersim run trace "
                        "(the HDF5 file `python -m ordersim ... --out FILE` writes)"), line


@pytest.mark.parametrize("args", [[], ["one.h5"], ["a.h5", "b.h5", "--limit", "-1"]])
def test_usage_errors_are_one_line(args):
    result = ordersim(["compare", *args], timeout=60)
    assert result.returncode == 2 and result.stdout == ""
    [line] = result.stderr.splitlines()
    assert line.startswith("python -m ordersim compare: error: "), line


@pytest.mark.mpi
def test_a_run_under_two_ranks_is_identical_to_the_serial_run(traces, tmp_path):
    """The promise the command checks: the serial trace bit for bit under `mpiexec -n 2`."""
    mpi = tmp_path / "mpi.h5"
    result = run_mpi(2, ["-m", "ordersim", *SMALL, "--backend", "mpi", "--out", str(mpi)])
    assert result.returncode == 0, result.stderr
    with h5py.File(mpi, "r") as f:
        assert f.attrs["ranks"] == 2 and f.attrs["backend"] == "mpi"
    result = compare(traces["a"], mpi)
    assert result.returncode == 0 and result.stderr == "", result
    [line] = result.stdout.splitlines()
    runs, datasets, attributes = compared_counts(mpi)
    assert line.startswith(f"identical: {runs} runs, {datasets} datasets and {attributes} attributes bit "
                           "for bit"), line
