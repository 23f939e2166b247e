"""Random streams (ordersim/streams.py) depend on (seed, purpose, worker, epoch), never on the
rank: a rank's orderer for its own workers draws what the serial orderer draws for them."""

import numpy as np
import pytest

from ordersim.orderers import available_orderers, make_orderer, orderer_class
from ordersim.streams import PURPOSES, stream

M, N, D, SEED, EPOCHS = 8, 11, 3, 5, 3


def own_workers(comm):
    per_rank = M // comm.size
    return comm.rank * per_rank, (comm.rank + 1) * per_rank


def test_each_ranks_draws_for_its_workers_are_the_serial_draws(comm):
    first, last = own_workers(comm)
    for purpose in PURPOSES:
        for epoch in (0, 4):
            mine = [stream(SEED, purpose, w, epoch).random(6) for w in range(first, last)]
            gathered = np.concatenate(comm.allgather(mine))
            serial = comm.bcast(np.array([stream(SEED, purpose, w, epoch).random(6) for w in range(M)])
                                if comm.rank == 0 else None)
            assert gathered.tobytes() == serial.tobytes(), (purpose, epoch)


GRADIENT_FREE = [name for name in available_orderers() if not orderer_class(name).needs_gradients]
# a centralized orderer (grab, ...) takes one worker only
LOCAL = [name for name in available_orderers()
         if not orderer_class(name).coordinated and not orderer_class(name).centralized_alternatives]


@pytest.mark.parametrize("name", GRADIENT_FREE)
def test_a_gradient_free_orderers_rows_on_a_rank_are_the_serial_rows(comm, name):
    first, last = own_workers(comm)
    mine = make_orderer(name, last - first, N, D, SEED, first_worker=first, run_epochs=EPOCHS)
    whole = make_orderer(name, M, N, D, SEED, run_epochs=EPOCHS)
    for epoch in range(EPOCHS):
        gathered = np.concatenate(comm.allgather(mine.begin_epoch()))
        assert np.array_equal(gathered, whole.begin_epoch()), (name, epoch)
        mine.end_epoch()
        whole.end_epoch()


@pytest.mark.parametrize("name", LOCAL)
def test_every_local_orderers_first_order_on_a_rank_is_the_serial_one(comm, name):
    first, last = own_workers(comm)
    mine = make_orderer(name, last - first, N, D, SEED, first_worker=first, run_epochs=EPOCHS)
    whole = make_orderer(name, M, N, D, SEED, run_epochs=EPOCHS)
    assert np.array_equal(np.concatenate(comm.allgather(mine.begin_epoch())), whole.begin_epoch()), name
