"""The step's exchange between ranks (ordersim/node_exchange.py), under mpiexec -n 2 and -n 4, as
plain Python (NUMBA_DISABLE_JIT=1, a setting of the whole process): the shared-memory exchange
must deliver what MPI_Allgather delivers, call after call with no stale slot, while the ranks
arrive skewed, across a growth of its window; `exchange = "allgather"` must use MPI_Allgather.
The jitted exchange, with more ranks than cores and a rank that waits long (it must sleep, not
spin), is checked inside the ranks: tests/mpi/test_exchanges_mpi.py."""

import os
import subprocess
import sys
import textwrap

import pytest

from conftest import ROOT, run_mpi

SCRIPT = textwrap.dedent("""
    import sys

    import numpy as np
    from mpi4py import MPI

    sys.path.insert(0, TESTS)
    from ordersim.backend import MPIBackend
    from ordersim.node_exchange import exchange
    from reference.exchange_skew import exchange_many

    CALLS = 200  # the interpreter is slow

    world = MPI.COMM_WORLD
    rank, ranks = world.Get_rank(), world.Get_size()
    shared = MPIBackend(ranks, world)
    assert shared.exchange == "shared-memory", shared.exchange
    for size in (5, 64, 300):  # 300 outgrows the first window: reallocated, collectively
        received = np.empty((CALLS, ranks * size))
        errors = exchange_many(shared.exchange_link(size), rank, size, CALLS, received)
        q, c, i = np.meshgrid(np.arange(ranks), np.arange(CALLS), np.arange(size))
        expected = (q * 1e6 + c * 1e2 + i).reshape(CALLS, ranks * size)
        assert errors == 0 and np.array_equal(received, expected), (rank, size)
    shared.close()

    plain = MPIBackend(ranks, world, "allgather")
    link = plain.exchange_link(8)
    assert plain.exchange == "allgather" and link[3].shape[0] == 0
    send, got, want = np.full(8, float(rank)), np.empty(ranks * 8), np.empty(ranks * 8)
    exchange(send, got, link)
    world.Allgather(send, want)
    assert np.array_equal(got, want)
    checked = world.gather(rank)
    if rank == 0:
        print("exchange ok on ranks", checked)
""")


@pytest.mark.mpi
@pytest.mark.parametrize("ranks", [2, 4])
def test_shared_memory_exchange_delivers_what_allgather_does_without_jit(ranks, tmp_path):
    script = tmp_path / "exchange_check.py"
    script.write_text(SCRIPT.replace("TESTS", repr(str(ROOT / "tests"))))
    result = run_mpi(ranks, [str(script)], timeout=240, env={"NUMBA_DISABLE_JIT": "1"})
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"exchange ok on ranks {list(range(ranks))}" in result.stdout


NO_SCHED_YIELD = textwrap.dedent("""
    import os
    del os.sched_yield  # as on a platform without it (Windows)
    import numpy as np
    from numba import typeof

    from ordersim import node_exchange

    assert not node_exchange.AVAILABLE
    link = ((0, 0), 0, np.zeros(0, np.int64), np.zeros((0, 1)), np.zeros(1, np.int64), np.zeros(6))
    node_exchange.collect.compile((typeof(np.zeros(3)), typeof(np.zeros(6)), typeof(link)))
    print("collect compiles")
""")


def test_without_sched_yield_the_exchange_still_compiles(tmp_path):
    """Where there is no sched_yield every exchange is an MPI_Allgather, but the step loop's
    collect() holds the shared-memory branch too and must compile."""
    script = tmp_path / "no_yield.py"
    script.write_text(NO_SCHED_YIELD)
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                            cwd=ROOT, timeout=120, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert result.returncode == 0, result.stderr
    assert "collect compiles" in result.stdout
