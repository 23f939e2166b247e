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
import threading

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
    """Remembers that SIGTERM or SIGUSR1 arrived; the work stops at the next epoch boundary, or
    at the next phase boundary of the set-up.

    One per process (stop_request()), which `python -m ordersim run` installs before its heavy
    imports and keeps until the exit: a repeated signal is only remembered again, never fatal.
    The C-level handler also writes the signal's number to the pipe `wakeup`, which a thread can
    wait on while the main thread is inside jitted code or MPI (ordersim/stall.py): the Python
    handler runs only when the main thread executes bytecode again."""

    def __init__(self):
        self.signal_name = None
        self.wakeup = None
        if threading.current_thread() is threading.main_thread():  # set_wakeup_fd's condition
            self.wakeup, write = os.pipe()
            os.set_blocking(write, False)
            signal.set_wakeup_fd(write, warn_on_full_buffer=False)  # unread: bytes are dropped
        self.install()

    def install(self) -> None:
        """(Re)install the handlers: MPI_Init puts its own on SIGUSR1 (MPICH)."""
        for sig in SIGNALS:
            signal.signal(sig, self._handle)

    def _handle(self, signum, frame):
        self.note(signum)

    def note(self, signum: int) -> None:
        """Remember the signal (the first one's name is kept)."""
        if self.signal_name is None:
            self.signal_name = signal.Signals(signum).name

    def drain(self) -> bytes:
        """The signal numbers written to `wakeup` since the last call (blocks until there is one)."""
        return os.read(self.wakeup, 512)

    @property
    def requested(self) -> bool:
        return self.signal_name is not None

    def ignore_from_now(self) -> None:
        """Ignore the signals from here to the exit, whose code is decided: the interpreter's
        shutdown would otherwise restore their default action, and a repeated SIGTERM during it
        would kill the process (exit 143) after the checkpoint was written."""
        for sig in SIGNALS:
            signal.signal(sig, signal.SIG_IGN)


_installed: StopRequest | None = None


def stop_request() -> StopRequest:
    """The process's StopRequest, installed on the first call."""
    global _installed
    if _installed is None:
        _installed = StopRequest()
    return _installed


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
