"""The engine's epoch loop with an exchange (ordersim/engine.py, through simulate.Run) against the
serial loop, inside the ranks: the same model and orders, bitwise, for one small problem; the
data rows rank 0 sends are this rank's shard of the serial set-up's, on a cache line."""

import numpy as np
import pytest

from ordersim import aligned
from ordersim.backend import MPIBackend, SerialBackend
from ordersim.config import build_config
from ordersim.simulate import Run, check_fields, gather_order, learning_rate, prepare

WORKERS, EPOCHS = 4, 2
# rank 0 loads the scikit-learn set and sends every rank its rows (backend.scatter_rows)
VALUES = dict(data="sklearn:breast_cancer", test_fraction=0.25, workers=WORKERS, batch=3, epochs=EPOCHS,
              seeds=[0], momentum=0.5, quiet=True)
# rr: no gradients; d-grab: each rank observes its own rows at every step; cd-grab: every
# worker's gradients are gathered; d-grab-pair: pair differences in the serial loop
ORDERERS = ("rr", "d-grab", "cd-grab", "d-grab-pair")


def mpi_setup(comm, exchange):
    config = check_fields(build_config(dict(VALUES, exchange=exchange)), comm.size)
    return prepare(config, MPIBackend(config.workers, comm, config.exchange))


def serial_setup():
    return prepare(check_fields(build_config(VALUES), 1), SerialBackend(WORKERS))


def train(setup, orderer):
    run = Run(setup, orderer, 0)
    for epoch in range(EPOCHS):
        assert run.train_epoch(epoch + 1, learning_rate(setup.config, epoch, setup, orderer))
    return run


def outcome(run) -> dict:
    return dict(x=run.x.copy(), velocity=run.velocity.copy(), order=gather_order(run).copy(), step=run.step)


@pytest.fixture(scope="module")
def serial(on_rank_0):
    """The serial loop's outcome of every orderer, and the serial set-up's rows, from rank 0."""
    def compute():
        setup = serial_setup()
        rows = dict(A=setup.A, y=setup.y, test_A=setup.test_A, test_bounds=setup.test_bounds)
        return rows, {orderer: outcome(train(setup, orderer)) for orderer in ORDERERS}
    return on_rank_0(compute)


@pytest.fixture(scope="module", params=["auto", "allgather"])
def mpi(request, comm):
    setup = mpi_setup(comm, request.param)
    assert setup.backend.exchange == ("shared-memory" if request.param == "auto" else "allgather")
    yield setup
    setup.backend.close()


def test_each_rank_holds_its_shard_of_the_serial_rows_on_a_cache_line(mpi, serial, comm):
    whole = serial[0]
    rows = slice(comm.rank * mpi.A.shape[0], (comm.rank + 1) * mpi.A.shape[0])
    assert mpi.A.tobytes() == whole["A"][rows].tobytes() and np.array_equal(mpi.y, whole["y"][rows])
    lo, hi = whole["test_bounds"][mpi.backend.first], whole["test_bounds"][mpi.backend.last]
    assert mpi.test_A.tobytes() == whole["test_A"][lo:hi].tobytes()
    assert all(a.ctypes.data % aligned.CACHE_LINE == 0 for a in (mpi.A, mpi.test_A))


@pytest.mark.parametrize("orderer", ORDERERS)
def test_the_epoch_loop_with_an_exchange_gives_the_serial_model_and_orders(mpi, serial, orderer):
    ranks, alone = outcome(train(mpi, orderer)), serial[1][orderer]
    assert ranks["x"].tobytes() == alone["x"].tobytes()
    assert ranks["velocity"].tobytes() == alone["velocity"].tobytes()
    assert np.array_equal(ranks["order"], alone["order"])
    assert ranks["step"] == alone["step"] == EPOCHS * -(-mpi.n // VALUES["batch"])
