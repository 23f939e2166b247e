import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ordersim.backend import LAUNCHER_VARIABLES

ROOT = Path(__file__).resolve().parents[1]

# tests/mpi/ runs inside the ranks of an MPI job (tests/test_mpi_layer.py launches it): a plain
# `pytest` run collects it only through that driver.
collect_ignore = [] if any(v in os.environ for v in LAUNCHER_VARIABLES) else ["mpi"]


def mpiexec_path() -> str:
    """mpiexec next to this Python (the mpich wheel in the venv) or on PATH."""
    local = Path(sys.executable).parent / "mpiexec"
    found = str(local) if local.exists() else shutil.which("mpiexec")
    if found is None:
        pytest.fail("mpiexec not found: install the mpich extra (pip install -e '.[test,mpich]')")
    return found


def run_mpi(ranks: int, args: list[str], timeout: float = 300, env: dict | None = None, cwd=None):
    """Run ``python ARGS`` under ``mpiexec -n RANKS`` and return the CompletedProcess."""
    full_env = dict(os.environ, OMP_NUM_THREADS="1", NUMBA_NUM_THREADS="1", **(env or {}))
    cmd = [mpiexec_path(), "-n", str(ranks), sys.executable, *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=full_env,
                          cwd=cwd or ROOT)


@pytest.fixture
def mpi():
    return run_mpi


@pytest.fixture(scope="session")
def serial_reference(tmp_path_factory):
    """serial_reference(args): the path of the trace of the serial run `python -m ordersim ARGS`,
    run once per session however many tests compare with it (each MPI case of a config compares
    its trace with the same serial one; a serial run is seconds of start-up and compilation)."""
    from test_simulator import run_serial

    traces = {}

    def trace(args: list[str]) -> Path:
        key = tuple(args)
        if key not in traces:
            path = tmp_path_factory.mktemp("serial-reference") / "serial.h5"
            result = run_serial([*args, "--out", str(path)])
            assert result.returncode == 0, result.stderr
            traces[key] = path
        return traces[key]

    return trace

