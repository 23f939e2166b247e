"""Choosing the backend: a machine whose mpi4py cannot load an MPI library still runs serially."""

import os
import subprocess
import sys

import h5py

from conftest import ROOT

# mpi4py loads this library instead of the one it found at install time: a real load failure.
NO_MPI = {"MPI4PY_LIBMPI": "/nonexistent/libmpi.so"}
SMALL = ["--epochs", "1", "--workers", "2", "--seeds", "0", "--orderers", "rr"]


def ordersim(args, env):
    clean = {k: v for k, v in os.environ.items()
             if k not in ("PMI_SIZE", "PMI_RANK", "OMPI_COMM_WORLD_SIZE", "PMIX_RANK")}
    return subprocess.run([sys.executable, "-m", "ordersim", *args], capture_output=True, text=True,
                          timeout=300, cwd=ROOT, env=dict(clean, **env))


def test_without_an_mpi_library_the_serial_backend_runs_with_a_note(tmp_path):
    out = tmp_path / "t.h5"
    result = ordersim([*SMALL, "--out", str(out)], NO_MPI)
    assert result.returncode == 0, result.stderr
    assert "ordersim: note: no MPI library (cannot load MPI library" in result.stderr
    assert "running the serial backend" in result.stderr
    with h5py.File(out, "r") as f:
        assert f.attrs["backend"] == "serial" and "end_time" in f.attrs


def test_backend_mpi_without_an_mpi_library_is_a_one_line_error(tmp_path):
    result = ordersim([*SMALL, "--backend", "mpi", "--out", str(tmp_path / "t.h5")], NO_MPI)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert lines[0].startswith("ordersim: error: config field 'backend': 'mpi' needs an MPI library")
    assert "pip install mpich" in lines[0]
    assert not (tmp_path / "t.h5").exists()


def test_a_rank_started_by_a_launcher_without_an_mpi_library_refuses_to_run_alone(tmp_path):
    # Each such rank would otherwise run the whole job by itself and write the same trace.
    result = ordersim([*SMALL, "--out", str(tmp_path / "t.h5")], dict(NO_MPI, PMI_SIZE="2", PMI_RANK="1"))
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [result.stderr.strip()]
    assert "started by an MPI launcher (PMI_SIZE is set)" in result.stderr
    assert not (tmp_path / "t.h5").exists()


def test_version_names_ordersim_its_libraries_and_the_mpi_library():
    import ordersim

    found = ordersim_versions({})
    assert found["ordersim"].startswith(ordersim.__version__)
    assert set(found) >= {"python", "numpy", "numba", "mpi4py", "h5py", "MPI library"}
    assert found["MPI library"].startswith(("MPICH", "Open MPI"))
    assert ordersim_versions(NO_MPI)["MPI library"].startswith("none loadable")


def ordersim_versions(env) -> dict:
    result = ordersim(["--version"], env)
    assert result.returncode == 0, result.stderr
    return dict(line.split(None, 1) if not line.startswith("MPI library") else
                ("MPI library", line[len("MPI library"):].strip()) for line in result.stdout.splitlines())
