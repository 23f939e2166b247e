"""The step's exchanges inside the ranks: the jitted MPI_Allgather (ordersim/jit_mpi.py) and the
shared-memory exchange (ordersim/node_exchange.py) deliver what mpi4py's Allgather does."""

import os
import time

import numpy as np
import pytest
from numba import njit

from ordersim import node_exchange
from ordersim.backend import MPIBackend
from ordersim.jit_mpi import allgather, handles
from ordersim.node_exchange import exchange
from reference.exchange_skew import exchange_many


@njit
def jitted_allgather(send, recv, mpi):
    return allgather(send, recv, mpi)


def test_jitted_allgather_matches_mpi4py_on_the_world_and_a_split_communicator(comm):
    # a split communicator's MPICH handle has the high bit set, unlike MPI_COMM_WORLD's
    rng = np.random.default_rng(comm.rank)
    split = comm.Split(comm.rank % 2, comm.rank)
    for c in (comm, split):
        for shape in ((3,), (2, 5), (2, 1, 7)):
            send = rng.standard_normal(shape)
            got = np.empty((c.size * shape[0],) + shape[1:])
            want = np.empty_like(got)
            error = jitted_allgather(send, got, handles(c))
            c.Allgather(send, want)
            assert error == 0 and np.array_equal(got, want), (c.rank, shape)
    split.Free()


CALLS = 3000


@pytest.fixture
def backends(comm):
    """backends(*options): a new MPIBackend on the world; all are closed (collectively) in the
    teardown, after a failed test has aborted the job rather than in a `finally` that could wait
    for ranks that never come."""
    made = []

    def make(*options):
        made.append(MPIBackend(comm.size, comm, *options))
        return made[-1]

    yield make
    for backend in made:
        backend.close()


def expected_rows(ranks, calls, size):
    q, c, i = np.meshgrid(np.arange(ranks), np.arange(calls), np.arange(size))
    return (q * 1e6 + c * 1e2 + i).reshape(calls, ranks * size)


def test_shared_memory_exchange_delivers_what_allgather_does_call_after_call(comm, backends):
    """No stale slot over many calls with skewed arrivals, across a growth of the window."""
    backend = backends()
    assert backend.exchange == "shared-memory"
    for size in (5, 64, 300):  # 300 outgrows the first window: reallocated, collectively
        received = np.empty((CALLS, comm.size * size))
        errors = exchange_many(backend.exchange_link(size), comm.rank, size, CALLS, received)
        assert errors == 0 and np.array_equal(received, expected_rows(comm.size, CALLS, size)), size


@pytest.mark.skipif(not node_exchange.SLEEPS, reason="waits sleep only on Linux with futexes, jitted")
def test_a_rank_that_waits_long_sleeps_instead_of_spinning(comm, backends):
    link = backends().exchange_link(5)
    send, got = np.zeros(5), np.empty(comm.size * 5)
    exchange(send, got, link)  # compiled and warm before the clock starts
    comm.Barrier()
    if comm.rank != 0:
        time.sleep(2.0)
    cpu = time.thread_time()
    exchange(send, got, link)
    cpu = time.thread_time() - cpu
    # spinning, even with sched_yield between reads, would use the core for most of the 2 s
    assert comm.rank != 0 or cpu < 0.2, f"rank 0 used {cpu:.2f} s of a core while it waited 2 s"


def test_on_one_core_the_exchange_is_oversubscribed_and_still_exact(comm, backends):
    """Every rank pinned to one core: more ranks than cores, so the waits sleep at once."""
    before = os.sched_getaffinity(0)
    core = comm.bcast(min(before))
    os.sched_setaffinity(0, {core})
    try:
        link = backends().exchange_link(5)
        assert link[4][node_exchange.SPIN_LIMIT] == node_exchange.SPINS_BEFORE_SLEEP_OVERSUBSCRIBED
        calls = 200
        received = np.empty((calls, comm.size * 5))
        assert exchange_many(link, comm.rank, 5, calls, received) == 0
        assert np.array_equal(received, expected_rows(comm.size, calls, 5))
    finally:
        os.sched_setaffinity(0, before)  # this rank's alone: no other rank needed


def crowded_backend(comm, backends, *options):
    """An MPIBackend made while every rank is pinned to one core: oversubscribed, whatever this
    machine is (the pinning is undone at once: only the backend's judgement stays)."""
    before = os.sched_getaffinity(0)
    core = comm.bcast(min(before))
    os.sched_setaffinity(0, {core})
    try:
        return backends(*options)
    finally:
        os.sched_setaffinity(0, before)


def test_oversubscribed_the_collectives_wait_asleep_and_deliver_the_same(comm, backends):
    """Oversubscribed, the backend's per-epoch collectives go through the shared-memory window
    (or, elsewhere, nonblocking, tested asleep) and the others start with a sleeping barrier: the
    same results as the blocking ones."""
    crowded = crowded_backend(comm, backends)
    roomy = backends()
    assert crowded.oversubscribed  # roomy: whatever this machine is; the results must not differ
    local = np.arange(6.0).reshape(2, 3) + 10 * comm.rank
    for backend in (crowded, roomy):
        rows = backend.gather_workers(local, np.empty((2 * comm.size, 3)))
        assert np.array_equal(rows, np.concatenate([np.arange(6.0).reshape(2, 3) + 10 * q for q in range(comm.size)]))
        assert backend.max(0.5 + comm.rank) == comm.size - 0.5
        assert backend.any(comm.rank == comm.size - 1) and not backend.any(False)
        assert backend.bcast(comm.rank) == 0 and backend.allgather(comm.rank) == list(range(comm.size))
        assert backend.agree("bad" if comm.rank == 1 else None) == "bad"
    # and the crowded backend's waits sleep: a blocking MPICH collective would spin the whole second
    for collective in (lambda: crowded.max(1.0), lambda: crowded.gather_workers(local, np.empty((2 * comm.size, 3))),
                       lambda: crowded.bcast(None)):
        comm.Barrier()
        if comm.rank != 0:
            time.sleep(1.0)
        cpu = time.thread_time()
        collective()
        cpu = time.thread_time() - cpu
        assert comm.rank != 0 or cpu < 0.2, f"rank 0 used {cpu:.2f} s of a core while it waited 1 s"


@pytest.mark.skipif(not node_exchange.SLEEPS, reason="the shared-memory gathers need sleeping waits")
def test_oversubscribed_on_one_node_the_per_epoch_collectives_go_through_shared_memory(comm, backends):
    """Oversubscribed, gather_workers and max use the step exchange's window (a nonblocking MPI
    collective progresses only when its sleeping ranks wake to test it: ~30x slower at 8 ranks on
    2 cores), in pieces of the window's size, and deliver what MPI_Allgather does."""
    crowded = crowded_backend(comm, backends)
    assert crowded.exchange == "shared-memory"
    local = (np.arange(2 * 5000.0) + 1e5 * comm.rank).reshape(2, 5000)  # 10 000 doubles: 3 pieces
    want = np.empty((2 * comm.size, 5000))
    comm.Allgather(local, want)
    count = lambda: crowded.exchange_link(1)[4][node_exchange.COUNT]  # noqa: E731  (no new window)
    rows = crowded.gather_workers(local, np.empty((2 * comm.size, 5000)))
    assert np.array_equal(rows, want)
    pieces = -(-local.size // crowded.exchange_link(1)[3].shape[1])
    assert pieces == 3 and count() == pieces
    assert crowded.max(-float(comm.rank)) == 0.0 and count() == pieces + 1
    assert crowded.any(comm.rank == 1) and count() == pieces + 2
    assert np.array_equal(crowded.gather_workers(local[:, :7], np.empty((2 * comm.size, 7))),
                          want[:, :7]) and count() == pieces + 3
    # another dtype than float64 takes MPI, and says so by not counting an exchange
    ints = crowded.gather_workers(np.full((2, 3), comm.rank), np.empty((2 * comm.size, 3), dtype=np.int64))
    assert np.array_equal(ints[::2, 0], np.arange(comm.size)) and count() == pieces + 3


@pytest.mark.skipif(not node_exchange.SLEEPS, reason="the shared-memory gathers need sleeping waits")
def test_oversubscribed_a_gather_that_waits_too_long_stalls_with_one_line(comm, backends):
    """A shared-memory gather is bounded by the stall timeout as the steps are: rank 0 gives up
    on ranks that come 3 s late with a 1 s timeout and raises Stalled naming the wait; the late
    ranks, which arrive together, still finish (rank 0 had published)."""
    from ordersim.stall import Stalled

    local = np.full((1, 4), float(comm.rank))
    # the exchange's kernel loaded (a cache load can take a while under load) without a timeout
    crowded_backend(comm, backends).gather_workers(local, np.empty((comm.size, 4)))
    crowded = crowded_backend(comm, backends, "auto", 1.0)
    crowded.gather_workers(local, np.empty((comm.size, 4)))  # its window made, by every rank at once
    comm.Barrier()
    if comm.rank == 0:
        with pytest.raises(Stalled, match=r"rank 0 waited .* for rank 1 in gathering the workers' "
                                          r"rows \(shared memory\) during "):
            crowded.gather_workers(local, np.empty((comm.size, 4)))
    else:
        time.sleep(3.0)
        rows = crowded.gather_workers(local, np.empty((comm.size, 4)))
        assert np.array_equal(rows[:, 0], np.arange(comm.size))
    comm.Barrier()


def test_exchange_allgather_uses_mpi_allgather(comm, backends):
    backend = backends("allgather")
    link = backend.exchange_link(8)
    assert backend.exchange == "allgather" and link[3].shape[0] == 0
    send, got, want = np.full(8, float(comm.rank)), np.empty(comm.size * 8), np.empty(comm.size * 8)
    assert exchange(send, got, link) == 0
    comm.Allgather(send, want)
    assert np.array_equal(got, want)
    assert link[4][0] == 1  # the watchdog's progress: one exchange counted
