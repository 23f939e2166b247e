"""Checkpoint and exact restart (Slurm preemption and time limits).

On SIGTERM or SIGUSR1 a rank only sets a flag; at the next epoch boundary the ranks agree (one
small all-reduce per epoch), write one checkpoint and exit with EXIT_CHECKPOINTED. The checkpoint
holds every rank's run state (model, momentum, the orderer object with all its arrays, step and
timers), the position in the (orderer, seed) plan, the finished runs' summaries and the length of
every trace dataset, so that `--resume` truncates the trace to that point and goes on; the resumed
traces and orders are bitwise identical to an uninterrupted run's. Random streams derive from
(seed, worker, epoch), so they need no saving.

The file `<out>.ckpt` is written by rank 0 to a temporary name, flushed to disk and renamed over
the previous one: a kill during the write never loses the previous checkpoint.
"""

import os
import pickle
import signal

import ordersim

EXIT_CHECKPOINTED = 3
SIGNALS = (signal.SIGTERM, signal.SIGUSR1)
# What a checkpoint pickles has this shape; a checkpoint of another one is refused on --resume
# (its orderer buffers would be read with the wrong layout). Bump it with any change to an
# orderer's state layout or to Run.state(). 2: the balancing orderers record signs (no next order
# or left/right pointers in their state) and every state array starts on a cache line.
# Checkpoints without one are 1.
FORMAT = 2


class StopRequest:
    """Remembers that SIGTERM or SIGUSR1 arrived; the work stops at the next epoch boundary."""

    def __init__(self):
        self.signal_name = None
        for sig in SIGNALS:
            signal.signal(sig, self._handle)

    def _handle(self, signum, frame):
        self.signal_name = signal.Signals(signum).name

    @property
    def requested(self) -> bool:
        return self.signal_name is not None


def checkpoint_path(out: str) -> str:
    return out + ".ckpt"


def save(path: str, state: dict) -> None:
    """Write state atomically: a temporary file, fsync, then rename over the previous checkpoint."""
    state = dict(state, ordersim_version=ordersim.__version__, format=FORMAT)
    tmp = f"{path}.tmp-{os.getpid()}"
    try:
        with open(tmp, "wb") as fh:
            pickle.dump(state, fh, protocol=pickle.HIGHEST_PROTOCOL)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def load(path: str) -> dict:
    with open(path, "rb") as fh:
        return pickle.load(fh)
