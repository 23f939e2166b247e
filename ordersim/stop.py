"""Stop requests (SIGTERM, SIGUSR1, SIGINT, a closed standard output): the flag a run checks at
its epoch and set-up phase boundaries (ordersim/checkpoint.py writes the checkpoint then).

This module imports only the standard library's light modules: `python -m ordersim run` installs
its handlers before NumPy, Numba, h5py and MPI are imported (a tenth of a second to seconds, more
on a cold network file system), so a signal in that time stops the run instead of killing it."""

import os
import signal
import sys
import threading

EXIT_CHECKPOINTED = 3
EXIT_INTERRUPTED = 130  # the shell's 128 + SIGINT: a second Ctrl-C
# SIGINT is Ctrl-C: the first stops at the next epoch boundary like SIGTERM, a second aborts now
SIGNALS = (signal.SIGTERM, signal.SIGUSR1, signal.SIGINT)


class StopRequest:
    """Remembers that SIGTERM, SIGUSR1 or SIGINT arrived; the work stops at the next epoch
    boundary, or at the next phase boundary of the set-up.

    One per process (stop_request()), which `python -m ordersim run` installs before its heavy
    imports and keeps until the exit: a repeated SIGTERM or SIGUSR1 is only remembered again, never
    fatal (a scheduler may send several); a second Ctrl-C (SIGINT) raises KeyboardInterrupt, the
    user's way to stop without waiting for the epoch to end (abort_on_exception ends the job).
    ``announce``: whether this process says so on stderr (the runner leaves it to rank 0).
    The C-level handler also writes the signal's number to the pipe `wakeup`, which a thread can
    wait on while the main thread is inside jitted code or MPI (ordersim/stall.py): the Python
    handler runs only when the main thread executes bytecode again."""

    def __init__(self):
        self.signal_name = None
        self.announce = True
        self.interrupts = 0
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
        if signum == signal.SIGINT:
            self.interrupts += 1
            if self.interrupts > 1:
                raise KeyboardInterrupt
            if self.announce:
                print("\nordersim: Ctrl-C: stopping at the next epoch boundary with a checkpoint "
                      "(Ctrl-C again to stop now, without one)", file=sys.stderr, flush=True)
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

    @property
    def cause(self) -> str:
        """What stopped the run, for its last line (under MPI this rank may have had no signal)."""
        return self.signal_name or "a signal to another rank"

    def ignore_from_now(self) -> None:
        """Ignore the signals from here to the exit, whose code is decided: the interpreter's
        shutdown would otherwise restore their default action, and a repeated SIGTERM during it
        would kill the process (exit 143) after the checkpoint was written."""
        for sig in SIGNALS:
            signal.signal(sig, signal.SIG_IGN)


def discard_output(stream) -> None:
    """Point ``stream``'s descriptor at /dev/null once its reader has gone (``| head``): what it
    still buffers, and the interpreter's flush at exit, then go nowhere instead of failing again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, stream.fileno())
    os.close(devnull)


class StdoutWatch:
    """``sys.stdout`` of a run: when its reader goes away (``| head``), the run stops at the next
    epoch boundary with a checkpoint, as on SIGTERM, instead of dying mid-epoch with a
    BrokenPipeError traceback and an interrupted trace; the rest of its output is dropped."""

    def __init__(self, stream, stop: StopRequest):
        self._stream, self._stop = stream, stop

    def write(self, text):
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            self._closed()
            return len(text)

    def flush(self):
        try:
            self._stream.flush()
        except BrokenPipeError:
            self._closed()

    def _closed(self):
        discard_output(self._stream)
        if not self._stop.requested and self._stop.announce:
            print("ordersim: standard output closed (piped into head?): stopping at the next epoch "
                  "boundary with a checkpoint", file=sys.stderr, flush=True)
        self._stop.note(signal.SIGPIPE)

    def __getattr__(self, name):
        return getattr(self._stream, name)


_installed: StopRequest | None = None


def stop_request() -> StopRequest:
    """The process's StopRequest, installed on the first call."""
    global _installed
    if _installed is None:
        _installed = StopRequest()
    return _installed
