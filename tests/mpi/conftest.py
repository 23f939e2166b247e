"""The MPI test layer: tests that run inside every rank of `mpiexec -n 2` and `-n 4`.

tests/test_mpi_layer.py launches `mpiexec -n R python -m mpi4py -m pytest tests/mpi`; the normal
run of the suite does not collect this folder (tests/conftest.py). Every rank runs every test, in
the same order, on MPI_COMM_WORLD. A failure on one rank would leave the others waiting in the
next collective, so a failed test prints its report and aborts the whole job (MPI_Abort); each
rank writes its counts to ORDERSIM_MPI_REPORTS/rank-R.json for the driver to check, and a failed
test's report to rank-R-failure.txt there too, before the abort. Collective
clean-up belongs in fixtures (their teardown runs after that abort), never in a `finally` of the
test, which would wait for ranks that never come.
"""

import json
import os
import shutil
import sys
import tempfile
import time

import pytest
from mpi4py import MPI

WORLD = MPI.COMM_WORLD
_passed: list[str] = []


@pytest.fixture(scope="session")
def comm():
    return WORLD


def idle_barrier(comm) -> None:
    """A barrier that sleeps while it waits: MPICH's blocking collectives spin, and with more
    ranks than cores the spinning ranks would slow the one they wait for."""
    request = comm.Ibarrier()
    while not request.Test():
        time.sleep(0.005)


@pytest.fixture(scope="session")
def on_rank_0():
    """on_rank_0(func): func() computed on rank 0 alone (e.g. a serial reference, compiled once
    per job rather than on every rank) while the others sleep; its result on every rank."""
    def compute(func):
        result = func() if WORLD.rank == 0 else None
        idle_barrier(WORLD)
        return WORLD.bcast(result)
    return compute


@pytest.fixture
def shared_dir():
    """A fresh directory that every rank sees (rank 0 makes it and removes it afterwards)."""
    path = WORLD.bcast(tempfile.mkdtemp(prefix="ordersim-mpi-") if WORLD.rank == 0 else None)
    yield path
    WORLD.Barrier()
    if WORLD.rank == 0:
        shutil.rmtree(path, ignore_errors=True)


def pytest_runtest_logreport(report):
    if report.failed:
        # with the others waiting in a collective, an ordinary failure would hang the job
        message = (f"\nrank {WORLD.rank} of {WORLD.size}: {report.nodeid} failed ({report.when}):\n"
                   f"{report.longreprtext}\n")
        reports = os.environ.get("ORDERSIM_MPI_REPORTS")
        if reports:  # the abort may end the job before the launcher forwards this rank's stderr
            with open(os.path.join(reports, f"rank-{WORLD.rank}-failure.txt"), "w") as f:
                f.write(message)
        print(message, file=sys.stderr, flush=True)
        sys.stdout.flush()
        WORLD.Abort(1)
    if report.passed and report.when == "call":
        _passed.append(report.nodeid)


def pytest_sessionfinish(session, exitstatus):
    reports = os.environ.get("ORDERSIM_MPI_REPORTS")
    if reports:
        with open(os.path.join(reports, f"rank-{WORLD.rank}.json"), "w") as f:
            json.dump(dict(size=WORLD.size, exitstatus=int(exitstatus), collected=session.testscollected,
                           passed=_passed), f)
