"""ordersim on a real one-node Slurm cluster (tests/slurm_cluster.py starts it on loopback).

Needs Debian's slurm-wlm and munge and root; where the cluster cannot start, every test here is
skipped with the reason (the daemon's log tail, a missing binary, ...), never passed. Set
ORDERSIM_REQUIRE_SLURM=1 to make that a failure instead.

- srun --mpi=pmi2 and mpiexec inside an allocation give a real multi-rank world (PyPI mpich);
- runs/slurm/single.sbatch runs ordersim on 2 ranks under `sbatch --wait`;
- a sweep's job array (`python -m ordersim sweep --write-array`) runs every cell into its own file,
  and runs/slurm/sweep_array.sbatch re-runs chosen cells bitwise identically;
- a job interrupted twice (SIGUSR1, then SIGTERM) checkpoints, requeues itself, resumes, and ends with
  a trace bitwise equal to an uninterrupted job's.
"""

import json
import os
import re
import subprocess
import sys
import time
import warnings
from pathlib import Path

import h5py
import pytest

from conftest import ROOT
from slurm_cluster import SlurmCluster, SlurmUnavailable
from test_simulator import TIMING

pytestmark = pytest.mark.slurm

SINGLE = ROOT / "runs" / "slurm" / "single.sbatch"
SWEEP_ARRAY = ROOT / "runs" / "slurm" / "sweep_array.sbatch"
# Rank 0 alone prints the ranks it can reach (two processes printing at once may interleave their
# characters); K one-rank worlds would print "world [0]" K times instead.
WORLD = ("from mpi4py import MPI; c = MPI.COMM_WORLD; r = c.gather(c.Get_rank()); "
         "c.Get_rank() or print('world', sorted(r), flush=True)")


class SlurmSkipped(UserWarning):
    """The Slurm tests were skipped; the message says why (shown in pytest's warnings summary)."""


@pytest.fixture(scope="module")
def cluster():
    c = SlurmCluster()
    try:
        c.start()
    except SlurmUnavailable as err:
        reason = f"no Slurm test cluster: {err}"
        if os.environ.get("ORDERSIM_REQUIRE_SLURM"):
            pytest.fail(reason)
        warnings.warn(reason, SlurmSkipped)
        pytest.skip(reason)
    # The jobs run this Python (the venv with ordersim and the mpich wheel), one thread per rank.
    c.env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{c.env.get('PATH', '')}"
    c.env.update(PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1", NUMBA_NUM_THREADS="1")
    yield c
    c.stop()


def job_log(path: Path) -> str:
    return path.read_text(errors="replace") if path.exists() else f"(no job output {path})"


def contents(path):
    """Every dataset of every run (timings excluded), the run attributes and the root datasets."""
    out = {}
    with h5py.File(path, "r") as f:
        for name in ("shards", "x_star"):
            if name in f:
                out[(name,)] = f[name][()]
        for orderer, seeds in f["runs"].items():
            for seed, run in seeds.items():
                out[(orderer, seed, "attrs")] = {k: str(v) for k, v in run.attrs.items() if k not in TIMING}

                def visit(name, obj, key=(orderer, seed)):
                    if isinstance(obj, h5py.Dataset) and name.split("/")[-1] not in TIMING:
                        out[(*key, name)] = obj[()]
                run.visititems(visit)
    return out


def assert_bitwise_equal(a, b):
    assert sorted(a) == sorted(b)
    for key in a:
        if key[-1] == "attrs":
            assert a[key] == b[key], key
        else:
            assert a[key].dtype == b[key].dtype and a[key].shape == b[key].shape, key
            assert a[key].tobytes() == b[key].tobytes(), key


# -- the launch ---------------------------------------------------------------------------------


def test_srun_pmi2_gives_a_multi_rank_world(cluster, tmp_path):
    r = cluster.run(["srun", "--mpi=pmi2", "-n", "2", sys.executable, "-c", WORLD], cwd=tmp_path,
                    check=False, timeout=90)
    assert r.returncode == 0, f"{r.stdout}\n{r.stderr}\n{cluster.logs()}"
    assert r.stdout.split() == ["world", "[0,", "1]"], r.stdout + r.stderr


def test_mpiexec_inside_an_allocation_gives_a_multi_rank_world(cluster, tmp_path):
    script = tmp_path / "mpiexec.sbatch"
    script.write_text(f"#!/bin/bash\n#SBATCH --ntasks=2\n#SBATCH --output=mpiexec.out\n"
                      f"mpiexec -n \"$SLURM_NTASKS\" {sys.executable} -c \"{WORLD}\"\n")
    job, r = cluster.sbatch(script, cwd=tmp_path, timeout=90)
    out = job_log(tmp_path / "mpiexec.out")
    assert r.returncode == 0, f"{r.stderr}\n{out}\n{cluster.logs()}"
    assert out.split() == ["world", "[0,", "1]"], out


def test_single_sbatch_runs_ordersim_on_two_ranks(cluster, tmp_path):
    args = ["--workers", "4", "--epochs", "2", "--batch", "4", "--orderers", "rr", "cd-grab",
            "--seeds", "0", "--out", "single.h5"]
    job, r = cluster.sbatch(SINGLE, "--ntasks=2", "--time=5", "--output=single.out", args=args,
                            cwd=tmp_path, timeout=150)
    log = job_log(tmp_path / "single.out")
    assert r.returncode == 0, f"sbatch --wait: {r.returncode}\n{r.stderr}\n{log}\n{cluster.logs()}"
    with h5py.File(tmp_path / "single.h5", "r") as f:
        assert f.attrs["ranks"] == 2 and f.attrs["backend"] == "mpi", log
        assert "end_time" in f.attrs
        for orderer in ("rr", "cd-grab"):
            run = f[f"runs/{orderer}/seed_0"]
            assert run.attrs["status"] == "completed" and run.attrs["epochs_completed"] == 2


# -- sweeps as job arrays -----------------------------------------------------------------------


def sweep_available() -> bool:
    r = subprocess.run([sys.executable, "-m", "ordersim", "sweep", "--help"], capture_output=True,
                       text=True, cwd=ROOT, timeout=60)
    return r.returncode == 0 and "--write-array" in r.stdout


SWEEP = """\
problem = "logistic"
data = "sklearn:breast_cancer"
orderers = ["rr", "cd-grab"]
epochs = 2
batch = 4
seeds = [0, 1]
quiet = true
out = "sweep/cells.h5"

[sweep]
workers = [2, 4]
lr = [0.1, 0.3]
"""


def test_sweep_runs_as_a_job_array(cluster, tmp_path):
    if not sweep_available():
        pytest.skip("`python -m ordersim sweep --write-array` is not implemented yet")
    pytest.importorskip("pandas")
    from ordersim.analysis.load import load_runs

    (tmp_path / "sweep.toml").write_text(SWEEP)
    r = subprocess.run([sys.executable, "-m", "ordersim", "sweep", "sweep.toml", "--write-array",
                        "array.sbatch", "--time", "00:05:00"],
                       capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "4 cells" in r.stdout, r.stdout
    job, r = cluster.sbatch(tmp_path / "array.sbatch", cwd=tmp_path, timeout=170)
    logs = "\n".join(f"--- {p.name}\n{job_log(p)}" for p in sorted(tmp_path.rglob("slurm-*.out")))
    assert r.returncode == 0, f"sbatch --wait: {r.returncode}\n{r.stderr}\n{logs}\n{cluster.logs()}"

    files = sorted((tmp_path / "sweep").rglob("cell_*.h5"))
    assert len(files) == 4, (files, logs)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # an incomplete or interrupted cell warns: fail on it
        table = load_runs(files)
    assert table["file"].nunique() == 4
    runs = table.groupby(["file", "orderer", "seed"])
    assert runs.ngroups == 4 * 2 * 2
    last = runs.tail(1)
    assert (last["status"] == "completed").all() and (last["epochs_completed"] == 2).all(), last
    assert (table["backend"] == "serial").all()  # one task per cell: all workers in one process
    # Cell i is the i-th combination, lr varying fastest; each file says which cell it holds and
    # its runs used that cell's parameters.
    expected = [{"workers": 2, "lr": 0.1}, {"workers": 2, "lr": 0.3}, {"workers": 4, "lr": 0.1},
                {"workers": 4, "lr": 0.3}]
    for i, path in enumerate(files):
        with h5py.File(path, "r") as f:
            assert json.loads(f.attrs["sweep_cell"]) == expected[i], path
        rows = table[table["file"].astype(str).str.endswith(path.name)]
        assert {(int(w), float(lr)) for w, lr in zip(rows["workers"], rows["lr"])} == \
            {(expected[i]["workers"], expected[i]["lr"])}, path

    # The hand-written template runs chosen cells of the same config (here 1 and 2, in another
    # directory): a re-run cell reproduces the first run's cell exactly.
    again = tmp_path / "again"
    again.mkdir()
    (again / "sweep.toml").write_text(SWEEP)
    job, r = cluster.sbatch(SWEEP_ARRAY, "--array=1,2", "--time=5", args=["sweep.toml"], cwd=again,
                            timeout=170)
    logs = "\n".join(f"--- {p.name}\n{job_log(p)}" for p in sorted(again.glob("slurm-*.out")))
    assert r.returncode == 0, f"sbatch --wait: {r.returncode}\n{r.stderr}\n{logs}\n{cluster.logs()}"
    redone = sorted((again / "sweep").rglob("cell_*.h5"))
    assert [p.name for p in redone] == [files[1].name, files[2].name], (redone, logs)
    for path in redone:
        assert_bitwise_equal(contents(path), contents(files[[p.name for p in files].index(path.name)]))


# -- preemption and exact resume ----------------------------------------------------------------


def checkpoint_available() -> bool:
    r = subprocess.run([sys.executable, "-m", "ordersim", "run", "--help"], capture_output=True,
                       text=True, cwd=ROOT, timeout=60)
    return r.returncode == 0 and "--resume" in r.stdout


PREEMPT = """\
problem = "logistic"
data = "synthetic:classification?n=6000&d=20"
workers = 4
batch = 1
orderers = ["rr", "cd-grab"]
seeds = [0, 1]
epochs = 40
record_orders = true
trace_every = 100
"""

EPOCH_LINE = re.compile(r"^\[\S+ seed \d+\] epoch +\d+/", re.M)


def wait_for(predicate, what: str, timeout: float, describe):
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}\n{describe()}")
        time.sleep(0.2)


def test_preempted_job_resumes_to_a_bitwise_identical_trace(cluster, tmp_path):
    if not checkpoint_available():
        pytest.skip("`python -m ordersim run --resume` (checkpoints) is not implemented yet")
    (tmp_path / "config.toml").write_text(PREEMPT)
    common = ["--ntasks=2", "--time=10"]
    ref, r = cluster.sbatch(SINGLE, *common, "--output=ref.out", args=["config.toml", "--out", "ref.h5"],
                            wait=False, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    job, r = cluster.sbatch(SINGLE, *common, "--output=pre.out", args=["config.toml", "--out", "pre.h5"],
                            wait=False, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    log = tmp_path / "pre.out"

    def describe():
        return f"job {job}: {cluster.job_state(job)}\n{job_log(log)}\n{cluster.logs()}"

    def epochs_after(marker: str) -> int:
        text = job_log(log)
        return len(EPOCH_LINE.findall(text[text.rfind(marker):])) if marker in text else 0

    # 1st interruption: Slurm's early warning (SIGUSR1 to the ranks) once the first epochs are done.
    wait_for(lambda: epochs_after("restart 0") >= 1, "the first epoch", 90, describe)
    cluster.run(["scancel", "--signal=USR1", job])
    wait_for(lambda: "resuming from" in job_log(log) and epochs_after("resuming from") >= 1,
             "the requeued job to resume", 120, describe)
    # 2nd interruption, of the resumed job: SIGTERM (what preemption and the time limit send).
    cluster.run(["scancel", "--signal=TERM", job])
    wait_for(lambda: job_log(log).count("resuming from") >= 2, "the second resume", 120, describe)
    cluster.wait_state(job, {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"}, timeout=120)
    cluster.wait_state(ref, {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"}, timeout=120)
    text = job_log(log)
    assert cluster.job_state(job) == "COMPLETED", describe()
    assert cluster.job_state(ref) == "COMPLETED", job_log(tmp_path / "ref.out")
    assert text.count("checkpointed: requeueing") == 2, text
    assert "restart 2" in text, text
    assert not (tmp_path / "pre.h5.ckpt").exists()  # a finished job removes its checkpoint

    with h5py.File(tmp_path / "pre.h5", "r") as f:
        assert f.attrs["ranks"] == 2 and "end_time" in f.attrs
        assert all(run.attrs["status"] == "completed" and run.attrs["epochs_completed"] == 40
                   for seeds in f["runs"].values() for run in seeds.values())
    assert_bitwise_equal(contents(tmp_path / "pre.h5"), contents(tmp_path / "ref.h5"))
