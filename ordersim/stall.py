"""--stall-timeout: a rank that waits too long for the others ends the whole job, with one line.

A rank waits for its peers in three kinds of places: the shared-memory exchange of every step (a
spin on the peers' flags inside the jitted epoch loop, ordersim/node_exchange.py), the
MPI_Allgather of every step on the other exchange (a blocking call from the same loop), and the
mpi4py collectives of the backend (the agreements between epochs and during the set-up). A
stopped peer (SIGSTOP, a job-control stop, a frozen node) would hold every other rank there for
ever, spinning at full speed, with no Python code running to act on SIGTERM.

- The spin reads the clock at each of its sched_yield calls (every SPINS_BEFORE_YIELD spins,
  never on the fast path) and each wake-up once it sleeps, and gives up when waited_too_long(): the epoch loop returns, and the
  rank raises Stalled, which names the rank it waited for; abort_on_exception ends the job.
- A Watchdog thread watches the blocking MPI calls: the backend marks each one (waiting()), and
  the epoch loop's MPI_Allgather counts its exchanges in a progress counter. The epoch loop runs
  without the GIL (nogil) and mpi4py releases it in blocking calls, so the thread runs while the
  main thread waits; it prints the line and calls MPI_Abort itself, from its own thread (MPI is
  initialised with MPI_THREAD_MULTIPLE, mpi4py's default).
- SIGTERM/SIGUSR1: the C-level handler writes the signal's number to the StopRequest's wakeup
  pipe, which the thread reads at once (the Python handler waits for the main thread); from then
  on every wait is bounded by SIGNAL_GRACE_SECONDS past the signal, so a rank waiting on a stopped
  peer gives up within the grace instead of the full timeout. With healthy peers the waits are
  short, and the epoch boundary's checkpoint happens as usual.

Either way the job ends with EXIT_STALLED on every rank (MPI_Abort); rank 0 has flushed every
completed epoch to the trace, so it stays readable.
"""

import math
import select
import sys
import threading
import time
from contextlib import contextmanager

import numpy as np
from numba import njit

from ordersim.stop import SIGNALS
from ordersim.config import SIGNAL_GRACE_SECONDS
from ordersim.jit_clock import python_seconds

EXIT_STALLED = 4
# A moment for rank 0 to finish writing the epoch it holds before MPI_Abort ends it.
ABORT_GRACE_SECONDS = 1.0

# The limits array (float64), read by the jitted spin and the watchdog, written by both:
# LIMIT the stall timeout (inf: off), GRACE the wait allowed after a signal, SIGNALLED the time of
# the first signal (inf: none yet); when the spin gives up, WAITED_FOR the rank it waited for,
# WAITED the seconds, STEP the epoch's step (WAITED_FOR -1 until then).
LIMIT, GRACE, SIGNALLED, WAITED_FOR, WAITED, STEP = range(6)


def limits_array(timeout: float) -> np.ndarray:
    limit = timeout if timeout > 0 else math.inf
    return np.array([limit, min(SIGNAL_GRACE_SECONDS, limit), math.inf, -1.0, 0.0, 0.0])


class Stalled(RuntimeError):
    """This rank waited longer than allowed for another; the message is the line the user sees."""


def abort_job(comm, code: int) -> None:
    """End every rank of the job with exit code `code` (MPI_Abort), after a moment for rank 0."""
    sys.stdout.flush()
    sys.stderr.flush()
    time.sleep(ABORT_GRACE_SECONDS)
    comm.Abort(code)


def stall_message(rank: int, waited: float, where: str, peer: str, limits: np.ndarray,
                  signal_name: str | None) -> str:
    """The line a rank prints when it gives up a wait."""
    if signal_name is not None and waited <= limits[LIMIT]:
        reason = (f"{signal_name} arrived and the wait went on {limits[GRACE]:g} s past it, so no "
                  f"checkpoint can be written (--resume starts from the last one, if any)")
    else:
        reason = f"--stall-timeout {limits[LIMIT]:g} s"
    return (f"ordersim: stalled: rank {rank} waited {waited:.1f} s for {peer} in {where}; "
            f"{reason}: aborting the job (exit {EXIT_STALLED})")


class Watchdog:
    """The thread that ends the job when a blocking MPI call of this rank waits too long (or too
    long after a signal), and that notes SIGTERM/SIGUSR1 as they arrive (see the module doc)."""

    def __init__(self, comm, timeout: float, stop=None):
        self.comm, self.rank, self.stop = comm, comm.Get_rank(), stop
        self.limits = limits_array(timeout)
        self.phase = "the set-up"  # where the job is, for the message (simulate sets it per epoch)
        self._wait = None  # (what, started, progress counter or None, its value then, counting)
        self._lock = threading.Lock()  # the thread updates a wait only while it lasts
        self._closed = threading.Event()
        self._poll = min(1.0, max(0.05, min(self.limits[LIMIT], self.limits[GRACE]) / 20))
        threading.Thread(target=self._watch, name="ordersim-stall-watchdog", daemon=True).start()

    @contextmanager
    def waiting(self, what: str, progress: np.ndarray | None = None):
        """Mark a blocking wait `what`; with `progress` (an int64 counter the waiting code
        advances at the start of each wait) the wait counts from the counter's last change, and
        nothing counts before its first (the jitted loop may still be compiling)."""
        with self._lock:
            self._wait = (what, python_seconds(), progress,
                          None if progress is None else int(progress[0]), progress is None)
        try:
            yield
        finally:
            with self._lock:
                self._wait = None

    def raise_if_gave_up(self, where: str, at_step: bool = True) -> None:
        """After a shared-memory exchange (the epoch loop's, or a gather's: at_step False, and
        ``where`` says it all): Stalled when its spin gave up (reset for the next one)."""
        limits = self.limits
        if limits[WAITED_FOR] < 0:
            return
        peer, waited, step = int(limits[WAITED_FOR]), limits[WAITED], int(limits[STEP])
        limits[WAITED_FOR] = -1.0
        if at_step:
            where = f"{where} at step {step} of {self.phase}"
        raise Stalled(stall_message(self.rank, waited, where, f"rank {peer}", limits, self._signal_name()))

    def close(self) -> None:
        self._closed.set()

    def _signal_name(self) -> str | None:
        return None if self.stop is None else self.stop.signal_name

    def _note_signals(self) -> None:
        wakeup = None if self.stop is None else self.stop.wakeup
        if wakeup is not None and select.select([wakeup], [], [], self._poll)[0]:
            for number in self.stop.drain():
                if number in SIGNALS:
                    self.stop.note(number)
        elif wakeup is None:
            time.sleep(self._poll)
        if self._signal_name() is not None and self.limits[SIGNALLED] == math.inf:
            self.limits[SIGNALLED] = python_seconds()

    def _watch(self) -> None:
        while not self._closed.is_set():
            self._note_signals()
            wait = self._wait
            if wait is None:
                continue
            what, started, progress, seen, counting = wait
            now = python_seconds()
            if progress is not None and int(progress[0]) != seen:
                with self._lock:  # unless the wait ended meanwhile
                    if self._wait is wait:
                        self._wait = (what, now, progress, int(progress[0]), True)
            elif counting and _waited_too_long(self.limits, started, now) and self._wait is wait:
                print(stall_message(self.rank, now - started, f"{what} during {self.phase}",
                                    "the other ranks", self.limits, self._signal_name()),
                      file=sys.stderr, flush=True)
                abort_job(self.comm, EXIT_STALLED)


def _waited_too_long(limits, start, now):
    """Whether a wait that began at `start` has lasted longer than the stall timeout, or, after a
    signal, longer than the grace past the later of its start and the signal."""
    return now - start > limits[LIMIT] or now - max(start, limits[SIGNALLED]) > limits[GRACE]


waited_too_long = njit(inline="always")(_waited_too_long)  # for the spin; the thread: the plain one
