"""The driver of the MPI test layer (tests/mpi/): `mpiexec -n 2` and `-n 4` run pytest inside every
rank, through `python -m mpi4py`, and every rank must pass every test. A failed test on one rank
aborts the job (tests/mpi/conftest.py) and fails the driver; a job that still hangs is killed at
the timeout, its ranks with it."""

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, mpiexec_path

LAYER = ROOT / "tests" / "mpi"
TIMEOUT = 900  # seconds: a generous "ends, does not hang"; the layer takes well under a minute idle


def run_layer(ranks: int, target, reports, cwd=ROOT, timeout: float = TIMEOUT):
    """`mpiexec -n RANKS python -m mpi4py -m pytest TARGET` (returncode, output), each rank's
    counts in REPORTS/rank-R.json. The output ends with the reports of failed tests that the
    ranks wrote to REPORTS (the launcher can end the job before it forwards a failed rank's
    stderr: seen under load). On a timeout the launcher's whole process group is killed."""
    cmd = [mpiexec_path(), "-n", str(ranks), sys.executable, "-m", "mpi4py", "-m", "pytest", str(target),
           "-q", "-p", "no:cacheprovider"]
    env = dict(os.environ, OMP_NUM_THREADS="1", NUMBA_NUM_THREADS="1", ORDERSIM_MPI_REPORTS=str(reports))
    process = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, start_new_session=True)
    try:
        output, _ = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        output, _ = process.communicate()
        pytest.fail(f"the MPI test layer did not end within {timeout} s at {ranks} ranks:\n"
                    f"{output}{failure_reports(reports)}")
    return process.returncode, output + failure_reports(reports)


def failure_reports(reports) -> str:
    return "".join(path.read_text() for path in sorted(Path(reports).glob("rank-*-failure.txt")))


@pytest.mark.mpi
@pytest.mark.parametrize("ranks", [2, 4])
def test_every_rank_passes_every_test_of_the_mpi_layer(ranks, tmp_path):
    returncode, output = run_layer(ranks, LAYER.relative_to(ROOT), tmp_path)
    assert returncode == 0, output
    reports = [json.loads((tmp_path / f"rank-{r}.json").read_text()) for r in range(ranks)]
    for rank, report in enumerate(reports):
        assert report["size"] == ranks and report["exitstatus"] == 0, (rank, report)
        assert report["collected"] > 0 and len(report["passed"]) == report["collected"], (rank, report)
    assert all(report["passed"] == reports[0]["passed"] for report in reports), "the ranks ran other tests"


FAILS_ON_ONE_RANK = """
from mpi4py import MPI

WORLD = MPI.COMM_WORLD


def test_fails_on_the_last_rank_before_a_barrier_the_others_wait_in():
    assert WORLD.rank != WORLD.size - 1, "failed on purpose"
    WORLD.Barrier()


def test_another_barrier():
    WORLD.Barrier()
"""


@pytest.mark.mpi
def test_a_failure_on_one_rank_ends_the_job_with_its_report(tmp_path):
    """The failed rank aborts the job at once: the other, waiting in a barrier it never reaches,
    ends too, without finishing its session (no counts of rank 0). The failed test's report
    reaches the driver through the file the rank wrote before the abort: its stderr alone was
    once cut by the abort under load, and the output held only pytest's "F"."""
    layer = tmp_path / "layer"
    layer.mkdir()
    shutil.copy(LAYER / "conftest.py", layer)
    (layer / "test_failing.py").write_text(FAILS_ON_ONE_RANK)
    returncode, output = run_layer(2, layer, tmp_path, cwd=tmp_path, timeout=120)
    assert returncode != 0, output
    assert ("rank 1 of 2: layer/test_failing.py::"
            "test_fails_on_the_last_rank_before_a_barrier_the_others_wait_in failed (call)") in output, output
    assert "failed on purpose" in output
    assert not (tmp_path / "rank-0.json").exists(), output
