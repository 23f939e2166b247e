"""A data plan opened with keep_rows=True on several ranks: each rank keeps the rows of the blocks
it surveys, and the first train_rows / test_rows route them to the ranks that ask for them, so
every synthetic block is generated once over all ranks and every rank ends with the serial rows,
bit for bit."""

import numpy as np
import pytest

from ordersim import data
from ordersim.backend import MPIBackend

WORKERS = 4
SPEC = "synthetic:classification?n=1003&d=6&classes=3"  # 16 blocks of 64 rows, the last short


@pytest.fixture
def backend(comm):
    backend = MPIBackend(WORKERS, comm)
    yield backend
    backend.close()


@pytest.fixture
def generated(monkeypatch):
    """The synthetic blocks this rank generates (blocks of 64 rows; routing rounds of 2 KB, a few
    rows each, so the rows go in many rounds of uneven sizes)."""
    blocks = []
    block = data.SyntheticRows.block
    monkeypatch.setattr(data.SyntheticRows, "block_rows", 64)
    monkeypatch.setattr(data.SyntheticRows, "block", lambda self, b: blocks.append(b) or block(self, b))
    monkeypatch.setattr(data, "ROUTE_BYTES", 2048)
    return blocks


def own_rows(plan, comm, scheme):
    """This rank's training rows (its workers' shards) and test rows, as prepare asks for them."""
    shards, dropped = data.partition(plan.y, WORKERS, scheme, alpha=0.3, seed=2)
    per_rank = WORKERS // comm.size
    idx = shards[comm.rank * per_rank:(comm.rank + 1) * per_rank].reshape(-1)
    bounds = np.linspace(0, plan.n_test, WORKERS + 1).astype(np.int64)
    tests = (bounds[comm.rank * per_rank], bounds[(comm.rank + 1) * per_rank])
    return idx, tests, dropped


@pytest.mark.parametrize("test_fraction", [0.0, 0.2])
@pytest.mark.parametrize("scheme", ["contiguous", "shuffled", "dirichlet"])
def test_each_block_is_generated_once_and_each_rank_gets_the_serial_rows(comm, backend, generated, on_rank_0,
                                                                         test_fraction, scheme):
    plan = data.open_dataset(SPEC, test_fraction=test_fraction, seed=3, label_kind="multiclass", share=backend,
                             keep_rows=True)
    idx, (lo, hi), dropped = own_rows(plan, comm, scheme)
    assert dropped > 0  # some kept rows go to no rank
    rows = plan.train_rows(idx)
    test = plan.test_rows(lo, hi) if plan.n_test else None
    every = sorted(b for blocks in comm.allgather(generated) for b in blocks)
    assert every == list(range(16)), every  # each block once, over all ranks
    assert rows.flags.c_contiguous and rows.shape == (idx.size, 7)

    def serial():
        whole = data.open_dataset(SPEC, test_fraction=test_fraction, seed=3, label_kind="multiclass",
                                  keep_rows=True)
        return whole.train_rows(np.arange(whole.n_train)), whole.test_rows(0, whole.n_test) if whole.n_test else None

    train_rows, test_rows = on_rank_0(serial)
    assert rows.tobytes() == train_rows[idx].tobytes()
    if test is not None:
        assert test.tobytes() == test_rows[lo:hi].tobytes()
    assert plan.train_rows(idx).tobytes() == rows.tobytes()  # later calls read the blocks again


def test_a_bad_request_on_one_rank_is_the_error_of_every_rank(comm, backend, generated):
    """One rank asks for an example that does not exist: every rank raises the same one-line
    error (none waits in the routing for it)."""
    plan = data.open_dataset(SPEC, seed=3, share=backend, keep_rows=True)
    idx = np.arange(comm.rank, plan.n_train, comm.size)
    if comm.rank == comm.size - 1:
        idx[-1] = plan.n_train
    with pytest.raises(ValueError) as info:
        plan.train_rows(idx)
    message = str(info.value)
    assert "\n" not in message and message == comm.bcast(message)
    assert message.startswith(f"train_rows: rank {comm.size - 1} asks for [{plan.n_train}]") and "0..1002" in message


def test_rows_that_cannot_be_allocated_on_one_rank_are_the_error_of_every_rank(comm, backend, generated,
                                                                               monkeypatch):
    plan = data.open_dataset(SPEC, test_fraction=0.2, seed=3, share=backend, keep_rows=True)
    if comm.rank == 0:
        def refuse(shape, dtype=np.float64):
            raise MemoryError
        monkeypatch.setattr(data.aligned, "empty", refuse)
    with pytest.raises(ValueError) as info:
        plan.test_rows(0, plan.n_test)
    assert str(info.value) == (f"test_rows: rank 0 cannot allocate its {plan.n_test} rows x 7 features "
                               f"({plan.n_test * 7 * 8 / 2**30:.3g} GiB); use more ranks")


def test_prepare_routes_the_kept_rows_each_rank_gets_its_serial_rows(comm, generated, on_rank_0, shared_dir):
    """simulate.prepare takes this path: every block generated once over the ranks, and each
    rank's training and test rows (its workers' shards) are the serial set-up's, bit for bit."""
    from ordersim.backend import SerialBackend
    from ordersim.config import build_config, check_fields
    from ordersim.simulate import prepare

    values = dict(data="synthetic:classification?n=1003&d=6", test_fraction=0.1, partition="shuffled",
                  workers=WORKERS, orderers=["rr"], seeds=[0], quiet=True, cache_dir=shared_dir)
    config = check_fields(build_config(dict(values, backend="mpi")), comm.size)
    backend = MPIBackend(WORKERS, comm)
    try:
        setup = prepare(config, backend)
    finally:
        backend.close()
    every = sorted(b for blocks in comm.allgather(generated) for b in blocks)
    assert every == list(range(16)), every

    def serial():
        whole = prepare(check_fields(build_config(dict(values, backend="serial")), 1), SerialBackend(WORKERS))
        return whole.A, whole.test_A
    A, test_A = on_rank_0(serial)
    n, first, last = setup.n, backend.first, backend.last
    assert setup.A.tobytes() == A[first * n:last * n].tobytes()
    lo, hi = setup.test_bounds[first], setup.test_bounds[last]
    assert setup.test_A.tobytes() == test_A[lo:hi].tobytes()
