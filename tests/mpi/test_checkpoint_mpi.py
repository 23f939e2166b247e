"""Checkpoints are collective (ordersim/checkpoint.py, simulate.checkpoint_if_due/resume_run),
inside the ranks: a stop requested on one rank stops every rank at the epoch boundary, with one
checkpoint holding every rank's run state, from which every rank resumes its own run exactly."""

import os
import signal

import numpy as np
import pytest

from ordersim.backend import MPIBackend
from ordersim.checkpoint import checkpoint_path, load
from ordersim.config import build_config
from ordersim.runner import broadcast_resume
from ordersim.simulate import (Checkpointed, Run, check_fields, checkpoint_if_due, learning_rate, prepare,
                               resume_run, run_plan)
from ordersim.stop import SIGNALS, StopRequest

# d-grab: every rank's orderer holds the state of its own workers only
VALUES = dict(data="synthetic:classification?n=240&d=5", workers=4, batch=2, epochs=3,
              orderers=["d-grab"], seeds=[0], quiet=True)


@pytest.fixture
def stop():
    """The process's real StopRequest handlers, for one test: restored afterwards."""
    before = {sig: signal.getsignal(sig) for sig in SIGNALS}
    request = StopRequest()
    yield request
    for sig, handler in before.items():
        signal.signal(sig, handler)
    signal.set_wakeup_fd(-1)
    os.close(request.wakeup)


@pytest.fixture
def backend(comm):
    # closed (collectively) in the teardown, after a failed test has aborted the job
    backend = MPIBackend(VALUES["workers"], comm)
    yield backend
    backend.close()


def test_a_signal_on_one_rank_checkpoints_every_ranks_run_and_each_resumes_its_own(comm, shared_dir, stop,
                                                                                    backend):
    config = check_fields(build_config(dict(VALUES, out=os.path.join(shared_dir, "t.h5"))), comm.size)
    setup = prepare(config, backend)
    run = Run(setup, "d-grab", 0)
    assert run.train_epoch(1, learning_rate(config, 0, setup))
    run.epoch = 1
    if comm.rank == comm.size - 1:
        os.kill(os.getpid(), signal.SIGTERM)  # noted by the handler, acted on at the boundary
    assert stop.requested == (comm.rank == comm.size - 1)
    ckpt = checkpoint_path(config.out)
    state = dict(position=0, results={}, run_id="test-run", record={}, lengths={})
    with pytest.raises(Checkpointed):  # on every rank, not only the signalled one
        checkpoint_if_due(config, backend, stop, ckpt, 1, state, run.state())
    comm.Barrier()  # rank 0 wrote it before raising
    assert os.path.exists(ckpt)

    saved = load(ckpt) if comm.rank == 0 else None
    if comm.rank == 0:
        assert saved["ranks"] == comm.size and len(saved["run_states"]) == comm.size
    resume = broadcast_resume(backend, saved)
    restored = resume_run(setup, run_plan(config), resume, ckpt)
    assert restored.x.tobytes() == run.x.tobytes() and restored.step == run.step
    for r in (run, restored):
        assert r.train_epoch(2, learning_rate(config, 1, setup))
    assert restored.x.tobytes() == run.x.tobytes()
    assert np.array_equal(restored.orderer.order, run.orderer.order)
    assert restored.orderer.state.tobytes() == run.orderer.state.tobytes()
