"""The output file's guard: one ordersim run at a time writes a given trace.

Rank 0 takes an exclusive POSIX lock (fcntl.lockf) on `<out>.lock` before it opens the trace for
writing, and holds it until the run (or the sweep cell) ends; the kernel drops it when the process
dies, however it dies. The lock is ordersim's own, so it works when HDF5's file locking is off
(`hdf5_locking = false`, HDF5_USE_FILE_LOCKING=FALSE). The lock file holds the host and process id
of its holder, for the message that refuses a second run; the holder removes it when it is done (a
killed run leaves it behind, unlocked and harmless).

Where the file system has no locks (lockf fails with ENOLCK, EOPNOTSUPP or ENOSYS: NFS mounted with
`nolock`, Lustre without `flock`) ordersim warns and runs unguarded. Where locks are local to a node
(NFS `local_lock=all`, Lustre `localflock`) two runs on different nodes do not see each other's lock.
"""

import errno
import fcntl
import os
import socket
import sys

UNSUPPORTED = (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS)


def lock_path(out: str) -> str:
    return os.path.abspath(out) + ".lock"


class OutputLock:
    """The lock on one output file; `acquire` returns the one-line error when another run holds it."""

    def __init__(self):
        self.path = None
        self.fd = None

    def acquire(self, out: str) -> str | None:
        path = lock_path(out)
        try:
            os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
            while True:
                fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
                try:
                    fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except OSError as err:
                    os.close(fd)
                    if err.errno in (errno.EACCES, errno.EAGAIN):
                        return (f"config field 'out': {out!r} is being written by another ordersim run "
                                f"({holder(path)}, holding {path}); wait for it or choose another --out")
                    if err.errno in UNSUPPORTED:
                        print(f"ordersim: warning: the file system of {path} has no file locks "
                              f"({err.strerror}): nothing stops a second run writing {out}",
                              file=sys.stderr, flush=True)
                        return None
                    raise
                # The holder before us may have removed the file between our open and our lock:
                # the lock is ours only if the path still names the file we locked.
                try:
                    same = os.path.samestat(os.fstat(fd), os.stat(path))
                except FileNotFoundError:
                    same = False
                if same:
                    break
                os.close(fd)
            os.ftruncate(fd, 0)
            os.write(fd, f"host {socket.gethostname()} pid {os.getpid()}\n".encode())
        except OSError as err:
            return unwritable("config field 'out'", out, err)
        self.path, self.fd = path, fd
        return None

    def release(self) -> None:
        if self.fd is None:
            return
        try:  # removed while still held: a run waiting on the old file then sees it is gone
            os.remove(self.path)
        except OSError:
            pass
        os.close(self.fd)
        self.path = self.fd = None


def holder(path: str) -> str:
    try:
        with open(path) as fh:
            return fh.read().strip() or "no holder recorded"
    except OSError:
        return "no holder recorded"


def input_files(config) -> list[tuple[str, str]]:
    """(what, path) of every file the run reads: its data file and a straggler trace's times."""
    from ordersim.data import spec_file

    found = []
    data = spec_file(config.data)
    if data:
        found.append(("data file", data))
    if config.stragglers == "trace" and isinstance(config.straggler_options.get("path"), str):
        found.append(("straggler trace", config.straggler_options["path"]))
    return found


def unwritable(what: str, path: str, err: OSError) -> str:
    """The one line for an output `path` that cannot be written; `what` names the field or option."""
    # the system's reason: HDF5 wraps it in a paragraph of its own (h5py keeps the errno)
    reason = os.strerror(err.errno) if err.errno else str(err)
    blocker = file_in_a_directorys_place(path)
    if blocker:  # the system says "File exists", "Not a directory" or "Is a directory": name the file
        why = f"{blocker!r} is a file, not a directory"
    elif err.filename in (None, path):
        why = reason
    else:  # a directory on the way: name it
        why = f"{err.filename!r}: {reason}"
    return f"{what}: {path!r} is not writable ({why})"


def file_in_a_directorys_place(path: str) -> str | None:
    """The existing file (not a directory) that `path` takes for a directory, or None: `my.h5` of
    `my.h5/`, `my.h5/x.h5` or `my.h5/sub/x.h5`."""
    directory = (path if path.endswith(os.sep) else os.path.dirname(path)).rstrip(os.sep)
    while directory and not os.path.lexists(directory):
        directory = os.path.dirname(directory)
    return directory if directory and not os.path.isdir(directory) else None


def missing_file(path) -> str:
    """Why an input file `path` (not a regular file) cannot be read: it is a directory, or absent."""
    return "is a directory, not a file" if os.path.isdir(path) else "does not exist"


def same_file(a: str, b: str) -> bool:
    """Whether two paths name one file (through links and relative paths)."""
    try:
        return os.path.samefile(a, b)
    except OSError:  # one of them does not exist
        return os.path.realpath(a) == os.path.realpath(b)
