"""Checkpoint and exact restart (Slurm preemption and time limits).

On SIGTERM or SIGUSR1 a rank only sets a flag (ordersim/stop.py); at the next epoch boundary the
ranks agree (one small all-reduce per epoch), write one checkpoint and exit with EXIT_CHECKPOINTED. The checkpoint
holds every rank's run state (model, momentum, the orderer's arrays and settings, step and
timers), the position in the (orderer, seed) plan, the finished runs' summaries, the length of
every trace dataset and the run id of the trace it belongs to, so that `--resume` truncates the
trace to that point and goes on; the resumed traces and orders are bitwise identical to an
uninterrupted run's. Random streams derive from (seed, worker, epoch), so they need no saving.

The file `<out>.ckpt` is HDF5 holding only numbers, arrays and strings, so loading one cannot run
code (a pickle could, and `--resume` runs unattended in the Slurm templates):

- root attributes: ``format`` (FORMAT), ``ordersim_version``, ``meta`` (JSON: position, results,
  lengths, config, ranks, run id, ...) and ``checksum``, the sha256 of everything else
  (``payload_digest``), verified on load;
- ``run_states/<rank>``: one group per rank while a run is in progress; arrays are datasets,
  numbers and strings attributes, dicts subgroups (``orderer``: its ``checkpoint_state()``).

Whether a run state fits this ordersim is decided by its layout (every path, dtype and shape, and
the digest of every declared orderer state, ``state_layout``: ordersim/orderers/_state.py),
compared with a freshly made run's (``layout_mismatch``), not by a version number.

Rank 0 writes it to a temporary name, flushes it to disk and renames it over the previous one: a
kill during the write never loses the previous checkpoint; a temporary file left by a kill is
removed when the next run on the same output starts (``remove_temporaries``).
"""

import glob
import hashlib
import json
import os
import uuid

import numpy as np

import ordersim

FORMAT = "ordersim-checkpoint-hdf5"  # what kind of file this is; layouts are compared, not versions
HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"
ARRAY_KINDS = "biuf"  # bool, signed and unsigned integers, floats: nothing that needs decoding


class CheckpointError(Exception):
    """A checkpoint that cannot be written or read; the message is one line."""


def checkpoint_path(out: str) -> str:
    return out + ".ckpt"


def new_run_id() -> str:
    """A random id for a fresh trace; its checkpoints carry it, so a checkpoint of another trace
    (a stale one, from before the trace was written anew) is never resumed onto it."""
    return uuid.uuid4().hex


def remove_temporaries(path: str) -> None:
    """Remove the temporary files that killed writes of checkpoint `path` left behind (one job
    writes an output file at a time, so none of them is being written)."""
    for tmp in glob.glob(glob.escape(path) + ".tmp-*"):
        try:
            os.remove(tmp)
        except FileNotFoundError:
            pass


def discard(path: str) -> None:
    """Remove checkpoint `path` and its temporaries: a fresh trace makes them stale."""
    remove_temporaries(path)
    try:
        os.remove(path)
    except FileNotFoundError:
        pass


# -- the value tree: dicts of arrays, numbers, strings ---------------------------------------------
def _scalar(value, where: str):
    """value as a plain bool, int, float or str; CheckpointError for anything else."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return float(value)
    if isinstance(value, str):
        return value
    raise CheckpointError(f"{where} is a {type(value).__name__}, which a checkpoint does not store "
                          f"(only arrays, numbers, strings and dicts of them)")


def normalized(tree: dict, where: str = "") -> dict:
    """The tree with every leaf a C-contiguous numeric array or a plain scalar; CheckpointError
    naming the first leaf that is neither (a checkpoint must not need pickle)."""
    out = {}
    for key, value in tree.items():
        path = f"{where}/{key}" if where else str(key)
        if not isinstance(key, str) or not key or "/" in key or key.startswith("."):
            raise CheckpointError(f"{path!r}: a checkpoint key must be a non-empty string without '/'")
        if isinstance(value, dict):
            out[key] = normalized(value, path)
        elif isinstance(value, np.ndarray):
            if value.dtype.kind not in ARRAY_KINDS or value.dtype.fields is not None:
                raise CheckpointError(f"{path} is an array of dtype {value.dtype}, which a checkpoint "
                                      f"does not store (only bool, integer and float arrays)")
            out[key] = np.ascontiguousarray(value)
        else:
            out[key] = _scalar(value, path)
    return out


def _leaves(tree: dict, where: str = ""):
    for key in sorted(tree):
        path = f"{where}/{key}"
        if isinstance(tree[key], dict):
            yield from _leaves(tree[key], path)
        else:
            yield path, tree[key]


def _kind(value) -> str:
    if isinstance(value, np.ndarray):
        return f"{value.dtype.str} array {value.shape}"
    return type(value).__name__


LAYOUT_KEY = "state_layout"  # a leaf that describes a layout: it must be equal, not just a string


def layout_mismatch(saved: dict, expected: dict) -> str | None:
    """How normalized tree `saved` differs in layout (paths, dtypes, shapes, scalar types and the
    values of LAYOUT_KEY leaves) from `expected`, or None when it fits."""
    have, want = dict(_leaves(saved)), dict(_leaves(expected))
    for path in sorted(have.keys() | want.keys()):
        if path not in want:
            return f"it holds {path[1:]}, which this ordersim's run state lacks"
        if path not in have:
            return f"it lacks {path[1:]}, which this ordersim's run state has"
        if _kind(have[path]) != _kind(want[path]):
            return f"its {path[1:]} is {_kind(have[path])}, this ordersim's {_kind(want[path])}"
        if path.rsplit("/", 1)[-1] == LAYOUT_KEY and have[path] != want[path]:
            return (f"its {path[1:]} is {have[path]!r}, this ordersim's {want[path]!r} (the "
                    f"orderer's state has other fields)")
    return None


def payload_digest(meta_json: str, run_states: list[dict] | None) -> str:
    """sha256 of the payload: the meta JSON and every leaf of every rank's run state."""
    digest = hashlib.sha256(meta_json.encode())
    for rank, tree in enumerate(run_states or []):
        for path, value in _leaves(tree, f"/run_states/{rank}"):
            digest.update(f"\0{path}\0{_kind(value)}\0".encode())
            digest.update(value.tobytes() if isinstance(value, np.ndarray) else repr(value).encode())
    return digest.hexdigest()


def _json_default(value):
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"a checkpoint's summary cannot hold a {type(value).__name__}")


def _write_tree(group, tree: dict) -> None:
    for key, value in tree.items():
        if isinstance(value, dict):
            _write_tree(group.create_group(key), value)
        elif isinstance(value, np.ndarray):
            group.create_dataset(key, data=value)
        else:
            group.attrs[key] = value


def _read_tree(group, where: str) -> dict:
    import h5py

    tree = {}
    for key, item in group.items():
        if isinstance(item, h5py.Group):
            tree[key] = _read_tree(item, f"{where}/{key}")
        else:
            if item.dtype.kind not in ARRAY_KINDS or item.dtype.fields is not None:
                raise CheckpointError(f"{where}/{key} has dtype {item.dtype}")
            tree[key] = np.asarray(item[...])
    for key, value in group.attrs.items():
        tree[key] = _scalar(value, f"{where}/{key} (attribute)")
    return tree


# -- files -------------------------------------------------------------------------------------------
def save(path: str, state: dict, locking: bool = True) -> None:
    """Write state atomically: a temporary file, fsync, then rename over the previous checkpoint.
    state["run_states"] (optional): one tree per rank; everything else must be JSON-able."""
    import h5py

    run_states = state.get("run_states")
    if run_states is not None:
        run_states = [normalized(tree, f"run_states/{rank}") for rank, tree in enumerate(run_states)]
    meta = {k: v for k, v in state.items() if k != "run_states"}
    meta_json = json.dumps(dict(meta, in_run=run_states is not None), default=_json_default)
    tmp = f"{path}.tmp-{os.getpid()}"
    try:
        with h5py.File(tmp, "w", locking=locking) as f:
            f.attrs["format"] = FORMAT
            f.attrs["ordersim_version"] = ordersim.__version__
            f.attrs["meta"] = meta_json
            if run_states is not None:
                group = f.create_group("run_states")
                for rank, tree in enumerate(run_states):
                    _write_tree(group.create_group(str(rank)), tree)
            f.attrs["checksum"] = payload_digest(meta_json, run_states)
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def _one_line(err: BaseException) -> str:
    return " ".join(str(err).split()) or type(err).__name__


def load(path: str, locking: bool = True) -> dict:
    """The state save() wrote; CheckpointError (one line) for anything else: a pickle (never
    unpickled), another kind of file, a truncated or damaged one, a wrong checksum."""
    import h5py

    try:
        with open(path, "rb") as fh:
            head = fh.read(len(HDF5_SIGNATURE))
    except OSError as err:
        raise CheckpointError(f"cannot be read ({err.strerror})") from None
    if head != HDF5_SIGNATURE:
        if head[:1] == b"\x80":
            raise CheckpointError("is a pickle (an older ordersim's checkpoint, or not written by "
                                  "ordersim); it was not loaded: unpickling can run any code")
        raise CheckpointError("is not an ordersim checkpoint (not an HDF5 file)")
    try:
        with h5py.File(path, "r", locking=locking) as f:
            kind = f.attrs.get("format")
            if kind != FORMAT:
                raise CheckpointError(f"is an HDF5 file but not an ordersim checkpoint (format {kind!r}, "
                                      f"expected {FORMAT!r})")
            meta_json, checksum = f.attrs["meta"], f.attrs["checksum"]
            if not (isinstance(meta_json, str) and isinstance(checksum, str)):
                raise CheckpointError("has a meta or checksum attribute that is not a string")
            run_states = None
            if "run_states" in f:
                group = f["run_states"]
                run_states = [_read_tree(group[str(rank)], f"run_states/{rank}") for rank in range(len(group))]
    except CheckpointError:
        raise
    except Exception as err:  # whatever a truncated or crafted file makes h5py raise
        raise CheckpointError(f"is unreadable (truncated or damaged: {_one_line(err)})") from None
    if payload_digest(meta_json, run_states) != checksum:
        raise CheckpointError("fails its checksum (damaged, or edited after it was written)")
    try:
        state = json.loads(meta_json)
    except ValueError as err:
        raise CheckpointError(f"has a meta attribute that is not JSON ({_one_line(err)})") from None
    if not isinstance(state, dict):
        raise CheckpointError("has a meta attribute that is not a JSON object")
    if run_states is not None:
        state["run_states"] = run_states
    return state
