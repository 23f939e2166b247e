"""The end of `python -m ordersim run`: the exit handlers, then no interpreter teardown.

When a run has returned, what is left for Python to do is to free every object one by one and
collect them once more: with NumPy, Numba (its types, dispatchers and code libraries) and the
loaded kernels that is some 10⁵ objects, 0.15 s of CPU in a serial run and up to 0.3 s in each
rank of `mpiexec -n 8` on 2 cores, where eight teardowns share the cores (docs/performance.md,
"Start-up: the exit"). None of it changes a file: the trace and the checkpoints are closed HDF5
files by then, and the run's output is flushed.

exit_without_teardown(status) does what matters of the interpreter's exit and then leaves through
the C library's exit(): it flushes stdout and stderr and every Python file object still open for
writing, runs the atexit handlers (weakref finalizers among them), finalizes MPI as mpi4py would
(from the interpreter's own exit handlers, which only the teardown runs: an Open MPI job whose rank
exits without MPI_Finalize fails), then calls exit(status), which runs the C libraries' exit
handlers (HDF5's, the MPI library's) and the C++ destructors as a normal exit does after the
teardown. Not os._exit, which skips those too: after it, MPICH's launcher took the first ranks to
leave for ranks that ended badly and killed the others (signal 9; a bare mpi4py script that
finalized and called os._exit failed so in 4 runs of 4 at `mpiexec -n 4`).

In a process of its own (cli.OWN_PROCESS) the run also sets what its imports made aside from the
garbage collector while it runs (runner.freeze_imports), and gives it back when it returns: a
frozen object is neither finalized by the teardown (a file object that a plugin module kept
open would lose what its buffer holds) nor listed by gc.get_objects().

It raises SystemExit as usual instead, teardown included, wherever skipping the teardown could
lose something: an HDF5 file still open (h5py closes it when its objects are freed), a thread other
than daemons still running (Python joins it), a status that is not a number, or a stream that
cannot be flushed (a reader that left early).
"""

import atexit
import ctypes
import gc
import io
import sys
import threading

BUFFERED_FILES = (io.TextIOWrapper, io.BufferedWriter, io.BufferedRandom)


def exit_without_teardown(status) -> None:
    """End the process with exit code `status` (an int, or None for 0) after the exit handlers,
    skipping the interpreter's teardown where that loses nothing; else raise SystemExit(status)."""
    status = 0 if status is None else status
    try:
        c_exit = ctypes.PyDLL(None).exit  # the process's own symbols, the C library's among them
    except (OSError, AttributeError):  # no such library here
        raise SystemExit(status) from None
    if not isinstance(status, int) or _teardown_needed():
        raise SystemExit(status)
    try:
        _flush_open_files()
    except (OSError, ValueError):  # a closed pipe, or a stream closed under us: Python's exit reports it
        raise SystemExit(status) from None
    atexit._run_exitfuncs()
    _finalize_mpi()
    try:
        sys.stdout.flush()  # what the handlers printed
        sys.stderr.flush()
    except (OSError, ValueError):
        pass
    c_exit(status & 0xFF)  # through PyDLL the call keeps the GIL: no Python thread runs meanwhile


def _teardown_needed() -> bool:
    """Whether the teardown has work that the exit without it would skip: a running thread that
    is not a daemon, or an open HDF5 file."""
    if any(t is not threading.main_thread() and not t.daemon and t.is_alive() for t in threading.enumerate()):
        return True
    h5py = sys.modules.get("h5py")
    if h5py is not None:
        try:
            return len(h5py.h5f.get_obj_ids(types=h5py.h5f.OBJ_FILE)) > 0
        except Exception:  # an h5py without the call: let the library close its files itself
            return True
    return False


def _flush_open_files() -> None:
    """Flush stdout, stderr and every other Python file object open for writing (the teardown
    would, when it frees them)."""
    sys.stdout.flush()
    sys.stderr.flush()
    for obj in gc.get_objects():
        # the buffered types that open() returns, C types: isinstance of io.IOBase, an ABC, took
        # 0.1 s over a run's 10^5 objects, this test ~35 ms
        if isinstance(obj, BUFFERED_FILES) and not obj.closed and obj.writable():
            obj.flush()


def _finalize_mpi() -> None:
    """MPI_Finalize, where mpi4py would call it at the exit: MPI initialized, not yet finalized,
    and mpi4py's rc.finalize not False."""
    MPI = sys.modules.get("mpi4py.MPI")
    if MPI is None or sys.modules["mpi4py"].rc.finalize is False:
        return
    if MPI.Is_initialized() and not MPI.Is_finalized():
        MPI.Finalize()
