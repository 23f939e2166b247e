"""HDF5 traces, written as the runs go (layout: docs/trace-format.md).

Only rank 0 writes. Every per-epoch dataset is 1-D, chunked and growable; the file is flushed after
every append, so a job killed at any moment leaves a readable file with every completed epoch.

A full disk must not reach HDF5: a write that fails inside the library leaves rows that read back
as zeros and a library state that can crash the process later. So after every flush the writer
reserves the space the next appends may take (fallocate with FALLOC_FL_KEEP_SIZE: the blocks are
the file's, its size is unchanged; where fallocate is missing, a check of the free space) and
raises TraceWriteError, with the file closed and whole, when it cannot. An error HDF5 raises all
the same (an I/O error, a reservation too small) is a TraceWriteError too; the file is then left
as it is, and ``epochs_completed`` (set only after the epoch's rows were flushed) tells which rows
to trust.
"""

import contextlib
import ctypes
import datetime
import errno
import json
import math
import os

import h5py
import numpy as np

import ordersim
from ordersim.trace_schema import epoch_dtype


EXIT_TRACE_WRITE = 74  # sysexits' EX_IOERR: the trace could not be written
# Space kept reserved beyond what the next appends' chunks need, for HDF5's metadata.
MIN_RESERVE = 256 * 1024
_KEEP_SIZE = 1  # FALLOC_FL_KEEP_SIZE (linux/falloc.h)
# Chunks of the growable datasets: at most this many rows and elements (8 KiB of a 1-D float64
# series, 64 Ki elements of the rows of orders), fewer when the run will not fill them. HDF5
# allocates a whole chunk at its first row.
MAX_CHUNK_ROWS = 1024
MAX_CHUNK_ELEMENTS = 1 << 16


class TraceWriteError(Exception):
    """Writing the trace failed (full disk, I/O error). ``intact``: the failure was found before
    HDF5 wrote anything and the file was closed whole; otherwise HDF5 failed mid-write and the file
    must not be touched again by this process (not even closed)."""

    def __init__(self, message: str, intact: bool):
        super().__init__(message)
        self.intact = intact


def _libc_fallocate():
    try:
        function = ctypes.CDLL(None, use_errno=True).fallocate
    except (OSError, AttributeError):  # not glibc / not Linux
        return None
    function.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
    function.restype = ctypes.c_int
    return function


_FALLOCATE = _libc_fallocate()


def reserve_space(fd: int, path: str, end: int) -> OSError | None:
    """Make bytes 0..end of the open file take no new disk space when written (without changing its
    size); the error when the disk cannot hold them."""
    if _FALLOCATE is not None:
        if _FALLOCATE(fd, _KEEP_SIZE, 0, end) == 0:
            return None
        code = ctypes.get_errno()
        if code not in (errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):
            return OSError(code, os.strerror(code))
    # no reservation on this file system: check that the free space holds what is not yet written
    stat = os.statvfs(os.path.dirname(os.path.abspath(path)))
    if stat.f_bavail * stat.f_frsize < end - os.fstat(fd).st_size:
        return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    return None


def utc_now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def _attr(value):
    return np.nan if value is None else value


class NotATrace(Exception):
    """A file that is not an ordersim run trace; the message says why, to follow "FILE ..."."""


def check_hdf5_file(path: str) -> None:
    """NotATrace unless `path` is an existing HDF5 file."""
    if not os.path.isfile(path):
        raise NotATrace("is not a file" if os.path.exists(path) else "does not exist")
    if not h5py.is_hdf5(path):
        raise NotATrace("is not an HDF5 file")


def trace_root(path: str, locking: bool | None = None) -> dict:
    """The root attributes of the run trace at `path`, or NotATrace (why not, to follow the
    path in a message). `locking` as h5py's (None: HDF5's default, HDF5_USE_FILE_LOCKING
    respected)."""
    check_hdf5_file(path)
    try:
        with h5py.File(path, "r", locking=locking) as f:
            root = dict(f.attrs)
    except OSError as err:
        raise NotATrace(f"is an HDF5 file that does not open ({err})") from None
    if "ordersim_version" not in root or "config" not in root:
        raise NotATrace("is an HDF5 file but not an ordersim trace (no root attributes "
                        "ordersim_version and config)")
    if "experiment" in root:
        raise NotATrace(f"is an ordersim {root['experiment']} file, not a run trace")
    return root


class TraceWriter:
    def __init__(self, path: str, root_attrs: dict, locking: bool = True):
        self._open(path, "w", locking)
        with self.writing():
            self._write_root(root_attrs)
        self.commit()

    def _open(self, path: str, mode: str, locking: bool) -> None:
        self.path = path
        self.file = h5py.File(path, mode, locking=locking)
        self.failed: str | None = None
        self.committed = "nothing"  # what the file holds for sure (for the error message)
        self.growth = 0  # the most the file grew in one flush
        self.chunk_bytes = 0  # one chunk of every dataset of the current run: what one append may add
        self._size = os.fstat(self.file.id.get_vfd_handle()).st_size
        self._reserve()

    @classmethod
    def reopen(cls, path: str, done: list[tuple[str, int]], current: tuple[str, int] | None,
               lengths: dict[str, int], resume: dict, locking: bool = True) -> "TraceWriter":
        """Reopen a trace to resume from a checkpoint: keep the finished runs `done`, cut the run
        `current` back to the checkpoint's dataset lengths, drop anything written after it, and
        add `resume` (when, where and with which code) to the root's ``resumes``."""
        writer = cls.__new__(cls)
        writer._open(path, "a", locking)
        with writer.writing():
            writer.file.attrs.pop("end_time", None)
            resumes = json.loads(writer.file.attrs.get("resumes", "[]"))
            writer.file.attrs["resumes"] = json.dumps([*resumes, resume])
            keep = {f"{o}/seed_{s}" for o, s in done}
            current_name = None if current is None else f"{current[0]}/seed_{current[1]}"
            runs = writer.file.require_group("runs")
            for orderer in list(runs):
                for seed in list(runs[orderer]):
                    name = f"{orderer}/seed_{seed.removeprefix('seed_')}"
                    if name not in keep and name != current_name:
                        del runs[orderer][seed]
            if current_name is not None:
                group = runs[current_name]
                for name, dataset in list(run_datasets(group).items()):
                    if name in lengths:
                        dataset.resize(lengths[name], axis=0)
                    else:
                        del group[name]
                group.attrs["epochs_completed"] = int(group["epoch"][-1])
                # the run may have finished after the checkpoint (a kill later, in the next run):
                # cut back, it is unfinished again until it finishes anew
                group.attrs["status"] = "interrupted"
        writer.committed = "the runs up to the checkpoint"
        writer.commit()
        return writer

    @contextlib.contextmanager
    def writing(self):
        """Around every change of the file: an error of HDF5 becomes a TraceWriteError."""
        if self.failed:
            raise TraceWriteError(self.failed, intact=False)
        try:
            yield
        except TraceWriteError:
            raise
        except (OSError, RuntimeError) as exc:  # h5py's errors of a failed write or flush
            self.failed = self._message(f"{type(exc).__name__}: {str(exc).splitlines()[0]}")
            raise TraceWriteError(self.failed, intact=False) from exc

    def commit(self, array_bytes: int = 0) -> None:
        """Flush, then reserve the space the next appends may need (TraceWriteError if there is
        none). ``array_bytes``: written by add_array, not an append's growth."""
        with self.writing():
            self.file.flush()
        size = os.fstat(self.file.id.get_vfd_handle()).st_size
        self.growth, self._size = max(self.growth, size - self._size - array_bytes), size
        self._reserve()

    def _reserve(self, array_bytes: int = 0) -> None:
        need = MIN_RESERVE + max(2 * self.growth, self.chunk_bytes, array_bytes)
        error = reserve_space(self.file.id.get_vfd_handle(), self.path, self._size + need)
        if error is not None:
            message = self._message(f"{error.strerror} (reserving {need // 1024} KiB for the next rows)")
            self._close_whole()
            raise TraceWriteError(message, intact=True)

    def _message(self, reason: str) -> str:
        return (f"could not write the trace {self.path}: {reason}; it keeps {self.committed}, every "
                f"row as computed")

    def _close_whole(self) -> None:
        """Close a file whose writes all succeeded and give back the space reserved past its end."""
        self.file.close()
        self.failed = "the trace was closed after a write error"
        with contextlib.suppress(OSError):
            os.truncate(self.path, os.path.getsize(self.path))

    def _write_root(self, root_attrs: dict) -> None:
        self.file.attrs["ordersim_version"] = ordersim.__version__
        self.file.attrs["start_time"] = utc_now()
        for key, value in root_attrs.items():
            self.file.attrs[key] = value if not isinstance(value, (list, dict)) else json.dumps(value)

    def add_array(self, name: str, array: np.ndarray) -> None:
        self._reserve(array.nbytes)
        with self.writing():
            self.file.create_dataset(name, data=array)
        self.commit(array.nbytes)

    def start_run(self, orderer: str, seed: int, attrs: dict, appends: int | None = None,
                  measured: int | None = None) -> "RunTrace":
        """A new run's group; ``appends``, ``measured``: as RunTrace's."""
        with self.writing():
            group = self.file.require_group("runs").require_group(orderer).create_group(f"seed_{seed}")
            group.attrs["orderer"] = orderer
            group.attrs["seed"] = seed
            for key, value in attrs.items():
                group.attrs[key] = _attr(value)
            group.attrs["status"] = "interrupted"  # until the run finishes: a killed job leaves this
            group.attrs["epochs_completed"] = 0
        self.chunk_bytes = 0
        self.commit()
        return RunTrace(self, group, appends, measured)

    def run(self, orderer: str, seed: int, appends: int | None = None, measured: int | None = None) -> "RunTrace":
        trace = RunTrace(self, self.file[f"runs/{orderer}/seed_{seed}"], appends, measured)
        self.chunk_bytes = sum(math.prod(d.chunks) * d.dtype.itemsize for d in trace.datasets.values())
        return trace

    def close(self) -> None:
        with self.writing():
            self.file.attrs["end_time"] = utc_now()
            self.file.close()
        with contextlib.suppress(OSError):  # give back the space reserved past the end
            os.truncate(self.path, os.path.getsize(self.path))


def run_datasets(group: h5py.Group) -> dict:
    """Every dataset below a run's group, by path relative to it (e.g. 'train_loss', 'steps/loss')."""
    found = {}

    def visit(name, obj):  # must return None: h5py stops visiting at the first other value
        if isinstance(obj, h5py.Dataset):
            found[name] = obj

    group.visititems(visit)
    return found


class RunTrace:
    def __init__(self, writer: TraceWriter, group: h5py.Group, appends: int | None = None,
                 measured: int | None = None):
        """appends: how many times the run appends to orders (every epoch and the start; steps/
        and stragglers/ every trained epoch, one fewer), measured: to its per-epoch ones
        (append_epoch; default appends), which size their chunks (None: unknown)."""
        self.writer, self.group = writer, group
        self.appends, self.measured = appends, measured or appends
        self.trained = appends - 1 if appends else None  # the appends of steps/ and stragglers/
        self.name = group.name.removeprefix("/")
        # open once: a dataset closed after every append would flush its chunks on closing, where
        # h5py drops a write error (ObjectID.__dealloc__)
        self.datasets = run_datasets(group)
        self.rows = {name: data.shape[0] for name, data in self.datasets.items()}
        self.last_chunks: dict[str, np.ndarray] = {}  # per dataset: its last chunk, as in the file
        self.epochs_completed = None  # the attribute, opened at the first append_epoch

    def lengths(self) -> dict[str, int]:
        return dict(self.rows)

    def _last_chunk(self, path: str, data: h5py.Dataset) -> np.ndarray:
        """The dataset's last chunk as the file holds it (rows past the last one are zero, HDF5's
        fill value), read once: every later append writes it whole."""
        chunk = self.last_chunks.get(path)
        if chunk is None:
            chunk = np.zeros(data.chunks, dtype=data.dtype)
            rows = self.rows[path]
            first = rows - rows % data.chunks[0]
            if rows > first:  # a run resumed in the middle of a chunk
                data.read_direct(chunk, np.s_[first:rows], np.s_[:rows - first])
            self.last_chunks[path] = chunk
        return chunk

    def _extend(self, path: str, values, dtype, appends: int | None = None) -> None:
        """Append rows `values` to the dataset at `path` below the run's group, creating it (as
        `dtype`) at the first append, chunked for `appends` such appends (default self.appends)."""
        data = self.datasets.get(path)
        if data is None:
            values = np.asarray(values, dtype=dtype)
            shape = values.shape[1:]
            rows = max(1, min(MAX_CHUNK_ROWS, MAX_CHUNK_ELEMENTS // max(1, math.prod(shape))))
            appends = appends or self.appends
            if appends:  # no bigger than the whole run's rows: a short run's file stays small
                rows = max(1, min(rows, len(values) * appends))
            parent, _, name = path.rpartition("/")
            group = self.group.require_group(parent) if parent else self.group
            data = group.create_dataset(name, shape=(0, *shape), maxshape=(None, *shape), dtype=dtype,
                                        chunks=(rows, *shape))
            self.datasets[path], self.rows[path] = data, 0
            self.writer.chunk_bytes += math.prod(data.chunks) * data.dtype.itemsize
        # Whole chunks through H5Dwrite_chunk: a few scalars an epoch into each of some 16
        # datasets cost ~20 us each through H5Dwrite's selections, ~4 us this way (the rows are
        # numbers, whose bytes in memory are those in the file)
        chunk = self._last_chunk(path, data)
        values = np.asarray(values, dtype=chunk.dtype)
        start, end, size = self.rows[path], self.rows[path] + len(values), chunk.shape[0]
        data.id.set_extent((end, *chunk.shape[1:]))
        origin = (0,) * (chunk.ndim - 1)
        row = start
        while row < end:
            first = row - row % size
            stop = min(end, first + size)
            chunk[row - first:stop - first] = values[row - start:stop - start]
            data.id.write_direct_chunk((first, *origin), chunk)
            if stop - first == size:  # full: the next chunk starts from the fill value
                chunk[:] = 0
            row = stop
        self.rows[path] = end

    def append_epoch(self, record: dict) -> None:
        """One measured epoch: record maps dataset names (ordersim.trace_schema.epoch_datasets():
        ordersim's own and the measurements') to scalars (None = not applicable). The rows are
        flushed before epochs_completed says they are there."""
        # a name not in the schema: KeyError before anything is written
        dtypes = {name: epoch_dtype(name) for name in record if name not in self.datasets}
        with self.writer.writing():
            for name, value in record.items():
                if value is not None:
                    self._extend(name, [value], dtypes.get(name), self.measured)
        with self.writer.writing():
            self.writer.file.flush()  # within the space reserved before these rows
            if self.epochs_completed is None:
                self.epochs_completed = h5py.h5a.open(self.group.id, b"epochs_completed")
            self.epochs_completed.write(np.array(int(record["epoch"]), dtype=np.int64))
        self.writer.committed = f"{self.name} up to epoch {int(record['epoch'])}"
        self.writer.commit()

    def append_orders(self, order: np.ndarray) -> None:
        with self.writer.writing():
            self._extend("orders", order[None], np.int32)
        self.writer.commit()

    def append_steps(self, epochs, steps, losses) -> None:
        if len(steps):
            with self.writer.writing():
                self._extend("steps/epoch", epochs, np.int64, self.trained)
                self._extend("steps/step", steps, np.int64, self.trained)
                self._extend("steps/loss", losses, np.float64, self.trained)
            self.writer.commit()

    def append_group(self, name: str, arrays: dict) -> None:
        """Append rows to the growable datasets of subgroup ``name`` (None values are skipped)."""
        arrays = {k: v for k, v in arrays.items() if v is not None and len(v)}
        if arrays:
            with self.writer.writing():
                for key, values in arrays.items():
                    self._extend(f"{name}/{key}", values, np.asarray(values).dtype, self.trained)
            self.writer.commit()

    def finish(self, status: str) -> None:
        with self.writer.writing():
            self.group.attrs["status"] = status
        self.writer.committed = f"{self.name} ({status})"
        self.writer.commit()


class NoTrace:
    """What ranks other than 0 hold instead of a writer or a run's trace: every call does nothing."""

    def __getattr__(self, name):
        return lambda *args, **kwargs: self
