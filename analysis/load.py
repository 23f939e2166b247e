"""Read ordersim HDF5 traces (layout: docs/trace-format.md).

    load_runs(paths)                 -> pandas.DataFrame, one row per (file, run, measured epoch)
    load_run_arrays(path)            -> {"attrs": {...}, "runs": {(orderer, seed): {"attrs": {...}, name: array}}}
    load_orders(path, orderer, seed) -> int (E + 1, m, n) array of recorded visit orders
    load_steps(path, orderer, seed)  -> {"steps/loss": array, "stragglers/step_time": array, ...}

Problems with a file are never fatal when the data can still be read: they are reported with a
``TraceWarning`` naming the file and run, and collected as strings in ``df.attrs["notes"]``.
- interrupted runs are loaded up to the last completed epoch, with ``interrupted = True``: status
  "interrupted", or, in a file without ``end_time`` (a job killed, or stopped with a checkpoint),
  any run whose status is not "completed" or "diverged" (the simulator sets those only when a run
  finished); a file without ``end_time`` is itself noted;
- a per-epoch dataset that a run lacks becomes NaN in that run's rows; a warning is raised when the
  dataset is one the simulator always writes, or when another run of the same file has it (datasets
  that do not apply, e.g. ``suboptimality`` of a nonconvex problem, are absent by design);
- datasets shorter than ``epoch`` (a job killed between two writes) are padded with NaN;
- rows after ``epochs_completed`` of a run that is not completed (written after the last flush the
  writer confirmed: docs/trace-format.md) are dropped, by every loader here.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import h5py
import numpy as np

from ordersim import trace_schema
from ordersim.config import FIELDS


def per_epoch_names() -> tuple[str, ...]:
    """The per-epoch datasets this process knows (ordersim/trace_schema.py: ordersim's own and
    every registered measurement's), in the schema's order: the columns of load_runs."""
    return tuple(e.name for e in trace_schema.epoch_datasets())


def always_written() -> set[str]:
    """The per-epoch datasets every run has."""
    return {e.name for e in trace_schema.epoch_datasets() if e.always}

# Root attributes copied into every row of load_runs (config and hosts stay in load_run_arrays).
FILE_COLUMNS = ("problem", "data", "backend", "ranks", "dropped_examples", "ordersim_version",
                "git_commit", "git_dirty", "start_time", "end_time")
# Run attributes first in the table, in this order; any other attribute follows.
RUN_COLUMNS = ("orderer", "seed", "workers", "examples_per_worker", "batch", "lr", "status",
               "epochs_completed", "f_star", "L", "L_max", "mu", "sigma2_star", "zeta2_star")


# Config fields that change where or how a job ran, or what it records, never what it computed (the
# same run with another value has the same iterates): never a setting that tells files apart.
# orderers and seeds are per-run columns already; remainder = "error" only stops a job that "drop"
# would have run the same.
NOT_SETTINGS = ("orderers", "seeds", "out", "overwrite", "quiet", "cache_dir", "hdf5_locking",
                "checkpoint_every", "exchange", "stall_timeout", "backend", "remainder", "record_orders",
                "trace_every", "measure_every", "herding", "shuffle_variance", "measurements")


def _config(file_attrs: dict) -> dict:
    try:
        config = json.loads(file_attrs.get("config", "{}"))
    except (ValueError, TypeError):
        return {}
    return config if isinstance(config, dict) else {}


def setting_value(value):
    """A config value as one table cell: tables and lists as sorted JSON text."""
    return json.dumps(value, sort_keys=True) if isinstance(value, (dict, list)) else value


def varying_settings(configs) -> list[str]:
    """The config fields whose values differ among `configs` (parsed configs, one per file), except
    NOT_SETTINGS: in ordersim.config's field order (the stored config's keys are sorted), then
    fields this version does not know, alphabetically."""
    configs = list(configs)
    position = {name: i for i, name in enumerate(FIELDS)}
    names = sorted({name for config in configs for name in config},
                   key=lambda name: (position.get(name, len(position)), name))
    return [name for name in names if name not in NOT_SETTINGS
            and len({json.dumps(config.get(name), sort_keys=True) for config in configs}) > 1]


def code_label(attrs: dict) -> str:
    """The code state that wrote a file, from its root attributes: '0.1.0 @ 1a2b3c4d5e6f', with
    ' (dirty, diff <hash>)' for an uncommitted tree; older traces say what they did not record."""
    version = attrs.get("ordersim_version") or "unknown version"
    commit = attrs.get("git_commit")
    if commit is None:
        return f"{version} @ commit not recorded"
    if not commit:
        return f"{version} (not from a git checkout)"
    dirty = f" (dirty, diff {attrs.get('git_diff_sha1') or '?'})" if attrs.get("git_dirty") else ""
    return f"{version} @ {commit[:12]}{dirty}"


def _note_code_states(states: dict, notes: "_Notes") -> None:
    """A note when the files come from more than one code state ({label: [files]})."""
    if len(states) > 1:
        notes.add(f"the files come from {len(states)} code states; their results may not be "
                  "comparable: " + "; ".join(f"{label}: {len(files)} file(s), e.g. {files[0]}"
                                             for label, files in states.items()))


class TraceWarning(UserWarning):
    """Something in a trace file is missing or incomplete; the data that exists was loaded."""


def _value(v):
    """An HDF5 attribute as a plain Python value (str, int, float, bool or list)."""
    if isinstance(v, bytes):
        return v.decode()
    if isinstance(v, np.ndarray):
        return [_value(x) for x in v.tolist()] if v.dtype.kind in "OS" else v.tolist()
    if isinstance(v, np.generic):
        return v.item()
    return v


def _attrs(obj) -> dict:
    return {k: _value(v) for k, v in obj.attrs.items()}


class _Notes:
    """Collects what is missing or incomplete; ``emit`` warns once per note, from the caller's line."""

    def __init__(self):
        self.items: list[str] = []
        self.missing: dict[tuple[str, str], list[str]] = {}  # (file, dataset) -> runs without it

    def add(self, text: str):
        self.items.append(text)

    def emit(self) -> list[str]:
        for (path, name), runs in self.missing.items():
            self.items.append(f"file {path}: dataset '{name}' is missing in run(s) {', '.join(runs)}; "
                              "filled with NaN")
        self.missing = {}
        for text in self.items:
            warnings.warn(text, TraceWarning, stacklevel=3)
        return self.items


def _read_run(run: h5py.Group, path: str, where: str, file_attrs: dict, expected: tuple, notes: _Notes) -> dict:
    """One run's attributes and per-epoch arrays (all of one length), noting which of the
    `expected` datasets are missing."""
    attrs = _attrs(run)
    attrs.setdefault("orderer", where.split("/")[0])
    attrs.setdefault("seed", int(where.rsplit("_", 1)[-1]) if where.rsplit("_", 1)[-1].isdigit() else where)
    data = {name: ds[()] for name, ds in run.items() if isinstance(ds, h5py.Dataset) and ds.ndim == 1}
    if "epoch" in data:
        length = len(data["epoch"])
    else:
        length = max((len(a) for a in data.values()), default=0)
        data["epoch"] = np.arange(length, dtype=np.int64)
        notes.add(f"run {where} in file {path} has no dataset 'epoch'; epochs numbered 0..{length - 1}")
    status = attrs.get("status", "unknown")
    confirmed = attrs.get("epochs_completed")
    if status != "completed" and confirmed is not None and length:
        # the writer sets epochs_completed after the epoch's rows were flushed: rows after it may
        # be those of a failed write (docs/trace-format.md). Cut before padding, so that a dataset
        # the kill left one row short is not reported padded for a row that is dropped anyway
        # the prefix of increasing epochs up to it (a row the kill left unwritten reads as epoch 0)
        kept = _confirmed_rows(data["epoch"], data["epoch"], confirmed)
        if kept < length:
            notes.add(f"run {where} in file {path}: dropped {length - kept} row(s) after "
                      f"epochs_completed = {confirmed} (status '{status}': written after the last "
                      "flush the writer confirmed)")
            length = kept
    for name, array in list(data.items()):
        if len(array) < length:
            data[name] = np.concatenate([array.astype(float), np.full(length - len(array), np.nan)])
            notes.add(f"run {where} in file {path}: dataset '{name}' has {len(array)} entries, "
                      f"'epoch' has {length}; padded with NaN")
        elif len(array) > length:
            data[name] = array[:length]
    for name in expected:
        if name not in data:
            notes.missing.setdefault((path, name), []).append(where)
    # A killed job leaves no end_time; its runs that had finished say so in their status.
    interrupted = status == "interrupted" or ("end_time" not in file_attrs
                                              and status not in ("completed", "diverged"))
    last = int(data["epoch"][-1]) if length else None
    if interrupted:
        why = "status 'interrupted'" if status == "interrupted" else "the file has no end_time"
        notes.add(f"run {where} in file {path} is interrupted after epoch {last} ({why}); "
                  f"loaded its {length} measured epochs")
    elif status == "diverged":
        notes.add(f"run {where} in file {path} diverged (last measured epoch {last})")
    attrs["interrupted"] = bool(interrupted)
    return {"attrs": attrs, **data}


def _runs(f: h5py.File):
    """(where, group) for every /runs/<orderer>/seed_<k>, sorted by orderer then seed."""
    if "runs" not in f:
        return []
    found = []
    for orderer, seeds in f["runs"].items():
        for name, run in seeds.items():
            if isinstance(run, h5py.Group):
                key = int(name.split("_", 1)[1]) if name.startswith("seed_") and name[5:].isdigit() else 1 << 62
                found.append(((orderer, key, name), f"{orderer}/{name}", run))
    return [(where, run) for _, where, run in sorted(found, key=lambda x: x[0])]


def _read_file(path, notes: _Notes) -> tuple[dict, dict]:
    path = str(path)
    with h5py.File(path, "r") as f:
        file_attrs = _attrs(f)
        runs = _runs(f)
        if "end_time" not in file_attrs:
            notes.add(f"file {path} has no end_time: the job did not finish (killed, or stopped with a "
                      "checkpoint that --resume continues); runs with status 'completed' are complete, "
                      "the others interrupted")
        if not runs:
            notes.add(f"file {path} holds no runs (no group /runs/<orderer>/seed_<k>)")
        # per-epoch datasets expected in every run of this file: those always written, those
        # another run has, and those its config switches on
        known = per_epoch_names()
        present = always_written()
        for _, run in runs:
            present |= {n for n in run if n in known}
        present |= trace_schema.switched_on(_config(file_attrs))
        expected = tuple(name for name in known if name in present)
        out = {}
        for where, run in runs:
            arrays = _read_run(run, path, where, file_attrs, expected, notes)
            out[(arrays["attrs"]["orderer"], arrays["attrs"]["seed"])] = arrays
    return file_attrs, out


def load_run_arrays(path) -> dict:
    """Every run of one trace file as NumPy arrays.

    Returns ``{"attrs": root attributes (config parsed from JSON), "runs": {(orderer, seed):
    {"attrs": run attributes + "interrupted", "epoch": ..., "train_loss": ..., ...}}}``; every
    1-D dataset of a run is there, all of the length of ``epoch``. Warns (TraceWarning) as
    ``load_runs`` does.
    """
    notes = _Notes()
    file_attrs, runs = _read_file(path, notes)
    for key in ("config", "hosts"):
        if isinstance(file_attrs.get(key), str):
            try:
                file_attrs[key] = json.loads(file_attrs[key])
            except ValueError:
                pass
    return {"attrs": file_attrs, "runs": runs, "notes": notes.emit()}


def load_runs(paths) -> "pandas.DataFrame":  # noqa: F821
    """A tidy table of one or many trace files: one row per (file, run, measured epoch).

    Columns, in this order: ``file``, the root attributes in FILE_COLUMNS, ``code_state``,
    ``data_seed``, every config field whose value differs among the files (e.g. ``momentum``,
    ``schedule``, ``partition`` of a sweep's cells; tables and lists as JSON text; the names in
    ``df.attrs["settings"]``, except NOT_SETTINGS), the run attributes (orderer, seed, workers,
    examples_per_worker, batch, lr, status, epochs_completed, f_star, ... and any other),
    ``interrupted`` (bool); then ``epoch`` and every per-epoch dataset: the schema's (NaN where a
    run lacks it), then any other 1-D dataset of a run. A setting's column holds the config's value
    in every row, also where a run attribute has its name (``coding_s`` is the s a scheme tolerates,
    0 for wait-all; the setting is the s of the sweep's cell). ``df.attrs["notes"]`` lists what
    was missing or incomplete; each note is also a TraceWarning.
    """
    import pandas as pd

    if isinstance(paths, (str, Path)):
        paths = [paths]
    notes = _Notes()
    frames = []
    states: dict[str, list[str]] = {}
    configs: dict[str, dict] = {}
    known = per_epoch_names()
    others: set[str] = set()  # 1-D datasets of runs that the schema does not know
    for path in paths:
        file_attrs, runs = _read_file(path, notes)
        label = code_label(file_attrs)
        states.setdefault(label, []).append(str(path))
        configs[str(path)] = _config(file_attrs)
        data_seed = configs[str(path)].get("data_seed")
        for arrays in runs.values():
            columns = {"file": str(path)}
            columns.update({k: file_attrs.get(k) for k in FILE_COLUMNS})
            columns.update(code_state=label, data_seed=data_seed)
            attrs = arrays["attrs"]
            columns.update({k: attrs.get(k, np.nan) for k in RUN_COLUMNS})
            columns.update({k: v for k, v in attrs.items() if k not in columns and not isinstance(v, list)})
            series = set(arrays) - {"attrs"}
            others |= series - set(known)
            table = pd.DataFrame({name: arrays[name] for name in series})
            for k, v in columns.items():
                table[k] = [v] * len(table)
            frames.append(table)
    df = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=["file", *RUN_COLUMNS])
    # a measurement registered twice in this process (by path, then installed) is one column
    per_epoch = list(dict.fromkeys(["epoch", *known, *sorted(others)]))
    for name in per_epoch:
        if name not in df:
            df[name] = np.nan
    settings = varying_settings(configs.values())
    for name in settings:
        df[name] = df["file"].map(lambda path: setting_value(configs[path].get(name)))
    # pd.concat puts an attribute that only later runs have after the per-epoch columns: order
    # them here (to_xarray reads the per-epoch datasets as the columns after 'epoch')
    first = ["file", *FILE_COLUMNS, "code_state", "data_seed", *settings]
    run_level = [*dict.fromkeys(c for c in [*first, *df.columns] if c in df and c not in per_epoch)]
    run_level.append(run_level.pop(run_level.index("interrupted")))  # after every run attribute
    df = df[[*run_level, *per_epoch]]
    _note_code_states(states, notes)
    df.attrs["code_states"] = states
    df.attrs["settings"] = settings
    df.attrs["notes"] = notes.emit()
    return df


def _confirmed_rows(epochs: np.ndarray, counter: np.ndarray, confirmed: int) -> int:
    """How many leading rows belong to the first `confirmed` epochs: those up to the first whose
    epoch is later or whose `counter` (epoch or step) does not increase, as a row a kill left
    unwritten reads 0."""
    ok = (epochs <= confirmed) & np.concatenate([[True], np.diff(counter) > 0])
    return len(ok) if ok.all() else int(np.argmin(ok))


def _run_group(f: h5py.File, path, orderer: str, seed: int) -> h5py.Group:
    where = f"runs/{orderer}/seed_{seed}"
    if where not in f:
        known = [w for w, _ in _runs(f)]
        raise KeyError(f"file {path} has no run {orderer}/seed_{seed}; runs: {', '.join(known) or 'none'}")
    return f[where]


def _confirmed_epochs(run: h5py.Group) -> int | None:
    """epochs_completed of a run that did not complete, whose rows after it may be a failed
    write's (docs/trace-format.md); None for a completed run (every row is its own)."""
    attrs = run.attrs
    if attrs.get("status") == "completed" or "epochs_completed" not in attrs:
        return None
    return int(attrs["epochs_completed"])


def load_orders(path, orderer: str, seed: int) -> np.ndarray:
    """The recorded visit orders of run (orderer, seed): int32 (E + 1, m, n) for E trained epochs,
    ``orders[t]`` the order of epoch t+1 (the last, recorded after the last epoch, is the order an
    epoch after it would have used). Of a run that did not complete, E is its epochs_completed.

    Raises KeyError naming the file when the run is absent or was run without --record-orders.
    The local example j of worker i is training example ``load_shards(path)[i, j]``.
    """
    with h5py.File(path, "r") as f:
        run = _run_group(f, path, orderer, seed)
        if "orders" not in run:
            raise KeyError(f"run {orderer}/seed_{seed} in file {path} has no 'orders' "
                           "(the simulator records them with --record-orders)")
        confirmed = _confirmed_epochs(run)
        return run["orders"][() if confirmed is None else slice(0, confirmed + 1)]


def load_steps(path, orderer: str, seed: int, names=None) -> dict:
    """The per-step datasets of run (orderer, seed), by their path in the run's group (only
    those in ``names``, if given):
    ``steps/epoch``, ``steps/step``, ``steps/loss`` (every K-th step, with --trace-every K) and
    ``stragglers/step_time``, ``stragglers/responded`` (every step) and ``stragglers/coverage*``
    (every epoch) of a run with a straggler model; {} for a run with none of them. Of a run that did
    not complete, only the rows of its epochs_completed epochs (later rows may be a failed
    write's). Raises KeyError naming the file when the run is absent."""
    with h5py.File(path, "r") as f:
        run = _run_group(f, path, orderer, seed)
        found = [f"{group}/{name}" for group in ("steps", "stragglers") if group in run
                 for name, ds in run[group].items() if isinstance(ds, h5py.Dataset)]
        confirmed = _confirmed_epochs(run)
        if confirmed is None:
            return {name: run[name][()] for name in found if names is None or name in names}
        steps_per_epoch = -(-int(run.attrs["examples_per_worker"]) // int(run.attrs["batch"]))
        traced = 0  # the traced steps of the confirmed epochs (all three datasets are appended together)
        if {"steps/epoch", "steps/step"} <= set(found):
            length = min(len(run[name]) for name in found if name.startswith("steps/"))
            traced = _confirmed_rows(run["steps/epoch"][:length], run["steps/step"][:length], confirmed)
        rows = {"stragglers/step_time": confirmed * steps_per_epoch,
                "stragglers/responded": confirmed * steps_per_epoch}
        return {name: run[name][:traced if name.startswith("steps/") else rows.get(name, confirmed)]
                for name in found if names is None or name in names}


# load_herding_sim's columns, in this order (docs/analysis.md)
HERDING_SIM_COLUMNS = ("file", "workers", "examples_per_worker", "orderer", "seed", "dim", "batch", "norm",
                       "round", "herding")


def load_herding_sim(paths) -> "pandas.DataFrame":  # noqa: F821
    """Files of ``python -m ordersim herding-sim`` (docs/herding_sim.md) as a tidy table.

    One row per (file, m, orderer, round): columns file, workers, examples_per_worker, orderer, seed,
    dim, batch, norm, round (0 = the shared random start), herding. A file without end_time (the
    command was interrupted) is loaded with the cells it finished and a TraceWarning.
    """
    import pandas as pd

    if isinstance(paths, (str, Path)):
        paths = [paths]
    notes = _Notes()
    frames = []
    states: dict[str, list[str]] = {}
    for path in paths:
        with h5py.File(path, "r") as f:
            root = _attrs(f)
            if root.get("experiment") != "herding-sim":
                notes.add(f"file {path} is not a herding-sim file (root attribute experiment = "
                          f"{root.get('experiment')!r}); skipped")
                continue
            states.setdefault(code_label(root), []).append(str(path))  # of the files drawn
            config = json.loads(root.get("config", "{}"))
            if "end_time" not in root:
                notes.add(f"file {path} has no end_time: herding-sim was interrupted; loaded its finished cells")
            for group in f.values():
                if not isinstance(group, h5py.Group):
                    continue
                for name, ds in group.items():
                    a = {**config, **_attrs(group), **_attrs(ds)}
                    values = ds[()]
                    columns = {**{k: a.get(k) for k in HERDING_SIM_COLUMNS}, "file": str(path),
                               "orderer": a.get("orderer", name), "norm": a.get("norm", "inf"),
                               "round": np.arange(len(values)), "herding": values}
                    frames.append(pd.DataFrame({k: columns[k] for k in HERDING_SIM_COLUMNS}))
    df = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=list(HERDING_SIM_COLUMNS))
    _note_code_states(states, notes)
    df.attrs["code_states"] = states
    df.attrs["notes"] = notes.emit()
    return df


def load_shards(path) -> np.ndarray:
    """``/shards``: int (m, n), the training-example index of every worker's local example."""
    with h5py.File(path, "r") as f:
        if "shards" not in f:
            raise KeyError(f"file {path} has no dataset /shards")
        return f["shards"][()]


__all__ = ["NOT_SETTINGS", "TraceWarning", "always_written", "code_label", "load_herding_sim", "load_orders",
           "load_run_arrays", "load_runs", "load_shards", "load_steps", "per_epoch_names", "setting_value",
           "varying_settings"]
