"""The MPI backend's per-epoch operations (ordersim/backend.py) inside the ranks: each gives on
every rank what the serial backend gives for the same workers."""

import numpy as np
import pytest

from ordersim import aligned
from ordersim.backend import MPIBackend, SerialBackend

WORKERS_PER_RANK = 2


@pytest.fixture
def backend(comm):
    backend = MPIBackend(WORKERS_PER_RANK * comm.size, comm)
    yield backend
    backend.close()


def test_the_ranks_hold_consecutive_workers_that_cover_all(backend, comm):
    spans = comm.allgather((backend.first, backend.last))
    assert spans == [(r * WORKERS_PER_RANK, (r + 1) * WORKERS_PER_RANK) for r in range(comm.size)]
    assert backend.local_workers == WORKERS_PER_RANK and (backend.rank, backend.size) == (comm.rank, comm.size)


def test_gather_workers_stacks_the_rows_in_worker_order_as_the_serial_backend(backend):
    m = backend.workers

    def rows(first, last):  # worker w's rows: (w, 0..2) + w / 10
        return np.arange(first, last)[:, None] * 10.0 + np.arange(3) + np.arange(first, last)[:, None] / 10

    got = backend.gather_workers(rows(backend.first, backend.last), np.empty((m, 3)))
    want = SerialBackend(m).gather_workers(rows(0, m), np.empty((m, 3)))
    assert got.tobytes() == want.tobytes()


def test_reductions_and_agreements_reach_every_rank(backend, comm):
    assert backend.max(float(comm.rank)) == comm.size - 1
    assert backend.bcast({"from": comm.rank}) == {"from": 0}
    assert backend.any(comm.rank == comm.size - 1) and not backend.any(False)
    # the first rank's error, on every rank; None when no rank has one
    errors = [None] + [f"error on rank {r}" for r in range(1, comm.size)]
    assert backend.agree(errors[comm.rank]) == "error on rank 1"
    assert backend.agree(None) is None
    assert backend.allgather(comm.rank * 3) == [r * 3 for r in range(comm.size)]
    gathered = backend.gather(comm.rank + 0.5)
    assert gathered == ([r + 0.5 for r in range(comm.size)] if comm.rank == 0 else None)
    assert backend.hosts() == comm.allgather(SerialBackend(1).hosts()[0])


def test_scatter_gives_each_rank_its_object_and_none_when_rank_0_has_none(backend, comm):
    objects = [{"rank": r} for r in range(comm.size)] if comm.rank == 0 else None
    assert backend.scatter(objects) == {"rank": comm.rank}
    assert backend.scatter(None) is None


def test_scatter_rows_sends_each_rank_only_its_block_on_a_cache_line(backend, comm):
    shape = (5, 3)
    calls = []

    def block_of(rank):
        calls.append(rank)
        return np.arange(15.0).reshape(shape) + 100 * rank

    block = backend.scatter_rows(block_of if comm.rank == 0 else None, shape)
    assert np.array_equal(block, block_of(comm.rank)) and block.dtype == np.float64
    assert block.ctypes.data % aligned.CACHE_LINE == 0
    # rank 0 made every rank's block once (the last call above is this check's)
    assert sorted(calls[:-1]) == (list(range(comm.size)) if comm.rank == 0 else [])
