"""HDF5 traces, written as the runs go (layout: docs/trace-format.md).

Only rank 0 writes. Every per-epoch dataset is 1-D, chunked and growable; the file is flushed after
every append, so a job killed at any moment leaves a readable file with every completed epoch.
"""

import datetime
import json
import math

import h5py
import numpy as np

import ordersim


def utc_now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def _attr(value):
    return np.nan if value is None else value


class NotATrace(Exception):
    """A file that is not an ordersim run trace; the message says why, to follow "FILE ..."."""


def trace_root(path: str, locking: bool | None = None) -> dict:
    """The root attributes of the run trace at `path` (an existing file), or NotATrace. `locking`
    as h5py's (None: HDF5's default, HDF5_USE_FILE_LOCKING respected)."""
    if not h5py.is_hdf5(path):
        raise NotATrace("is not an HDF5 file")
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
        self.file = h5py.File(path, "w", locking=locking)
        self._write_root(root_attrs)

    @classmethod
    def reopen(cls, path: str, done: list[tuple[str, int]], current: tuple[str, int] | None,
               lengths: dict[str, int], locking: bool = True) -> "TraceWriter":
        """Reopen a trace to resume from a checkpoint: keep the finished runs `done`, cut the run
        `current` back to the checkpoint's dataset lengths, and drop anything written after it."""
        writer = cls.__new__(cls)
        writer.file = h5py.File(path, "a", locking=locking)
        writer.file.attrs.pop("end_time", None)
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
        writer.file.flush()
        return writer

    def _write_root(self, root_attrs: dict) -> None:
        self.file.attrs["ordersim_version"] = ordersim.__version__
        self.file.attrs["start_time"] = utc_now()
        for key, value in root_attrs.items():
            self.file.attrs[key] = value if not isinstance(value, (list, dict)) else json.dumps(value)
        self.file.flush()

    def add_array(self, name: str, array: np.ndarray) -> None:
        self.file.create_dataset(name, data=array)
        self.file.flush()

    def start_run(self, orderer: str, seed: int, attrs: dict) -> "RunTrace":
        group = self.file.require_group("runs").require_group(orderer).create_group(f"seed_{seed}")
        group.attrs["orderer"] = orderer
        group.attrs["seed"] = seed
        for key, value in attrs.items():
            group.attrs[key] = _attr(value)
        group.attrs["status"] = "interrupted"  # until the run finishes: a killed job leaves this
        group.attrs["epochs_completed"] = 0
        self.file.flush()
        return RunTrace(self.file, group)

    def run(self, orderer: str, seed: int) -> "RunTrace":
        return RunTrace(self.file, self.file[f"runs/{orderer}/seed_{seed}"])

    def close(self) -> None:
        self.file.attrs["end_time"] = utc_now()
        self.file.close()


def run_datasets(group: h5py.Group) -> dict:
    """Every dataset below a run's group, by path relative to it (e.g. 'train_loss', 'steps/loss')."""
    found = {}

    def visit(name, obj):  # must return None: h5py stops visiting at the first other value
        if isinstance(obj, h5py.Dataset):
            found[name] = obj

    group.visititems(visit)
    return found


class RunTrace:
    def __init__(self, file: h5py.File, group: h5py.Group):
        self.file, self.group = file, group

    def lengths(self) -> dict[str, int]:
        return {name: data.shape[0] for name, data in run_datasets(self.group).items()}

    def _extend(self, group: h5py.Group, name: str, values, dtype) -> None:
        values = np.asarray(values, dtype=dtype)
        if name not in group:
            shape = values.shape[1:]
            rows = max(1, min(1024, 2**16 // max(1, math.prod(shape))))
            group.create_dataset(name, shape=(0, *shape), maxshape=(None, *shape), dtype=dtype,
                                 chunks=(rows, *shape))
        data = group[name]
        data.resize(data.shape[0] + len(values), axis=0)
        data[-len(values):] = values

    def append_epoch(self, record: dict) -> None:
        """One measured epoch: record maps dataset names to scalars (None = not applicable)."""
        for name, value in record.items():
            if value is not None:
                self._extend(self.group, name, [value], np.int64 if name == "epoch" else np.float64)
        self.group.attrs["epochs_completed"] = int(record["epoch"])
        self.file.flush()

    def append_orders(self, order: np.ndarray) -> None:
        self._extend(self.group, "orders", order[None], np.int32)
        self.file.flush()

    def append_steps(self, epochs, steps, losses) -> None:
        if len(steps):
            group = self.group.require_group("steps")
            self._extend(group, "epoch", epochs, np.int64)
            self._extend(group, "step", steps, np.int64)
            self._extend(group, "loss", losses, np.float64)
            self.file.flush()

    def append_group(self, name: str, arrays: dict) -> None:
        """Append rows to the growable datasets of subgroup ``name`` (None values are skipped)."""
        arrays = {k: v for k, v in arrays.items() if v is not None and len(v)}
        if arrays:
            group = self.group.require_group(name)
            for key, values in arrays.items():
                self._extend(group, key, values, np.asarray(values).dtype)
            self.file.flush()

    def finish(self, status: str) -> None:
        self.group.attrs["status"] = status
        self.file.flush()


class NoTrace:
    """What ranks other than 0 hold instead of a writer or a run's trace: every call does nothing."""

    def __getattr__(self, name):
        return lambda *args, **kwargs: self
