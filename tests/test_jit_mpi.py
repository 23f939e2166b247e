"""MPI calls from jitted code (ordersim/jit_mpi.py), under mpiexec -n 2 and -n 4: the Allgather
that the MPI backend's epoch loop calls (ranks on several nodes, or --exchange allgather) must
gather exactly what mpi4py's does, on the world communicator and on a split one (MPICH's handles
of those have the high bit set)."""

import textwrap

import pytest

from conftest import run_mpi

SCRIPT = textwrap.dedent("""
    import numpy as np
    from mpi4py import MPI
    from numba import njit

    from ordersim.jit_mpi import allgather, comm_handle

    @njit
    def gather(send, recv, comm):
        return allgather(send, recv, comm)

    world = MPI.COMM_WORLD
    rng = np.random.default_rng(world.rank)
    for comm in (world, world.Split(world.rank % 2, world.rank)):
        for shape in ((3,), (2, 5), (2, 1, 7)):
            send = rng.standard_normal(shape)
            got = np.empty((comm.size * shape[0],) + shape[1:])
            want = np.empty_like(got)
            error = gather(send, got, comm_handle(comm))
            comm.Allgather(send, want)
            assert error == 0 and np.array_equal(got, want), (comm.rank, shape)
    checked = world.gather(world.rank)
    if world.rank == 0:
        print("jit-mpi ok on ranks", checked)
""")


@pytest.mark.mpi
@pytest.mark.parametrize("ranks", [2, 4])
def test_jitted_allgather_matches_mpi4py(ranks, tmp_path):
    script = tmp_path / "jit_mpi_check.py"
    script.write_text(SCRIPT)
    result = run_mpi(ranks, [str(script)], timeout=240)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"jit-mpi ok on ranks {list(range(ranks))}" in result.stdout
