import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


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
