"""Data sets by name and their partition across workers.

    load_dataset("synthetic:regression?n=2000&d=20&cond=100&noise=0.1")
    load_dataset("sklearn:breast_cancer", label_kind="binary", test_fraction=0.2, seed=1)
    load_dataset("libsvm:path/to/a1a.txt")   # also csv:PATH, npz:PATH (arrays X, y), hdf5:PATH (datasets X, y)
    shards, dropped = partition(data.y, workers=4, scheme="dirichlet", alpha=0.1, seed=0)

Randomness (ordersim.streams, purpose "data", worker 0): epoch 0 generates synthetic data, epoch 1
draws the train/test split, epoch 2 the partition; so changing the split never changes the data,
and the three never share random numbers. Every error is a one-line ValueError that names the
file, line, row or column and what is allowed.
"""

from __future__ import annotations

import csv
import math
import os
from dataclasses import dataclass, field

import numpy as np
from numba import njit

from ordersim.streams import stream

SOURCES = ("synthetic", "sklearn", "libsvm", "csv", "npz", "hdf5")
SYNTHETIC_KINDS = {
    "regression": {"n": 1000, "d": 20, "cond": 10.0, "noise": 0.1},
    "classification": {"n": 1000, "d": 20, "cond": 10.0, "sep": 2.0, "classes": 2},
}
SKLEARN_SETS = {  # name -> (loader, task)
    "breast_cancer": ("load_breast_cancer", "classification"),
    "digits": ("load_digits", "classification"),
    "iris": ("load_iris", "classification"),
    "wine": ("load_wine", "classification"),
    "diabetes": ("load_diabetes", "regression"),
}
FILE_OPTIONS = {"libsvm": ("features",), "csv": ("label", "header"), "npz": (), "hdf5": ()}
LABEL_KINDS = ("binary", "multiclass", "real")
SCHEMES = ("contiguous", "shuffled", "dirichlet")
REMAINDERS = ("drop", "error")

# stream epochs of purpose "data"
_GENERATE, _SPLIT, _PARTITION = 0, 1, 2
# Large arrays are generated and transformed this many rows at a time, so that loading makes no
# temporaries the size of the data set.
ROW_BLOCK = 4096


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
def _parse_spec(spec: str) -> tuple[str, str, dict]:
    if not isinstance(spec, str) or ":" not in spec:
        raise ValueError(f"data set spec {spec!r} must look like SOURCE:NAME_OR_PATH[?key=value&...]; "
                         f"sources: {', '.join(SOURCES)}")
    source, rest = spec.split(":", 1)
    if source not in SOURCES:
        raise ValueError(f"unknown data source {source!r} in {spec!r}; known sources: {', '.join(SOURCES)}")
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


# -- sources ----------------------------------------------------------------------------------------
def _feature_array(n: int, p: int, spare: int, fill=np.empty) -> np.ndarray:
    """An (n, p) array for a loader to fill: the first p columns of an (n, p + spare) buffer, so
    that the intercept column can be added in place (`_transformed`)."""
    return fill((n, p + spare))[:, :p]


def _synthetic(spec: str, kind: str, options: dict, rng: np.random.Generator, spare: int = 0):
    if kind not in SYNTHETIC_KINDS:
        raise ValueError(f"unknown synthetic kind {kind!r} in {spec!r}; known: {', '.join(SYNTHETIC_KINDS)}")
    defaults = SYNTHETIC_KINDS[kind]
    _check_keys(spec, options, defaults)
    o = dict(defaults)
    for key, text in options.items():
        typ = int if key in ("n", "d", "classes") else float
        low = {"n": 2, "d": 1, "classes": 2, "cond": 1.0, "noise": 0.0, "sep": 0.0}[key]
        o[key] = _number(spec, key, text, typ, low)
    n, d = o["n"], o["d"]
    # features with covariance Q diag(s^2) Q^T, s^2 geometric from 1 down to 1/cond
    scales = np.sqrt(np.geomspace(1.0, 1.0 / o["cond"], d)) if d > 1 else np.ones(1)
    Q, _ = np.linalg.qr(rng.normal(size=(d, d)))
    X = _feature_array(n, d, spare)
    for lo in range(0, n, ROW_BLOCK):  # in row blocks: no temporaries the size of X
        rows = min(ROW_BLOCK, n - lo)
        np.matmul(rng.normal(size=(rows, d)) * scales, Q.T, out=X[lo:lo + rows])
    if kind == "regression":
        x_true = rng.normal(size=d)  # planted coefficients, N(0, 1) each
        y = X @ x_true + o["noise"] * rng.normal(size=n)
        return X, y, "regression", {"x_planted": x_true, "options": o}
    K = o["classes"]
    W = rng.normal(size=(K, d))
    W /= np.linalg.norm(W, axis=1, keepdims=True)
    Z = X @ W.T / np.sqrt(np.mean(scales**2))  # logits of unit scale, times sep
    if math.isinf(o["sep"]):
        y = np.argmax(Z, axis=1)
    else:
        Z = o["sep"] * Z
        Z -= Z.max(axis=1, keepdims=True)
        P = np.exp(Z)
        P /= P.sum(axis=1, keepdims=True)
        u = rng.random(n)[:, None]
        y = np.minimum((np.cumsum(P, axis=1) < u).sum(axis=1), K - 1)
    return X, y.astype(np.float64), "classification", {"options": o}


def _sklearn(spec: str, name: str, options: dict):
    if name not in SKLEARN_SETS:
        raise ValueError(f"unknown scikit-learn data set {name!r} in {spec!r}; known: {', '.join(sorted(SKLEARN_SETS))}")
    _check_keys(spec, options, ())
    import sklearn.datasets

    loader, task = SKLEARN_SETS[name]
    bunch = getattr(sklearn.datasets, loader)()
    return np.asarray(bunch.data, dtype=np.float64), np.asarray(bunch.target, dtype=np.float64), task, {}


def _require_file(source: str, path: str) -> None:
    if not os.path.isfile(path):
        raise ValueError(f"{source} file {path!r} does not exist")


def _libsvm(spec: str, path: str, options: dict, spare: int = 0):
    _check_keys(spec, options, FILE_OPTIONS["libsvm"])
    _require_file("libsvm", path)
    labels, rows, cols, vals = [], [], [], []
    min_index, max_index = None, 0
    with open(path, encoding="utf-8", errors="replace") as fh:
        for lineno, line in enumerate(fh, start=1):
            content = line.split("#", 1)[0].strip()
            if not content:
                continue
            tokens = content.split()
            try:
                label = float(tokens[0])
            except ValueError:
                raise ValueError(f"libsvm file {path!r} line {lineno}: label {tokens[0]!r} is not a number "
                                 f"(expected: LABEL INDEX:VALUE ...; one label per line)") from None
            if not math.isfinite(label):
                raise ValueError(f"libsvm file {path!r} line {lineno}: label {tokens[0]!r} is not finite")
            row = len(labels)
            labels.append(label)
            previous = None
            for token in tokens[1:]:
                index_text, sep, value_text = token.partition(":")
                try:
                    if not sep:
                        raise ValueError
                    index, value = int(index_text), float(value_text)
                    if index < 0:
                        raise ValueError
                except ValueError:
                    raise ValueError(f"libsvm file {path!r} line {lineno}: malformed feature {token!r} "
                                     f"(expected INDEX:VALUE with an integer INDEX >= 1 and a number VALUE)") from None
                if not math.isfinite(value):
                    raise ValueError(f"libsvm file {path!r} line {lineno}: feature {index} has the non-finite "
                                     f"value {value_text!r}")
                if previous is not None and index <= previous:
                    raise ValueError(f"libsvm file {path!r} line {lineno}: feature indices must increase, "
                                     f"got {index} after {previous}")
                previous = index
                min_index = index if min_index is None else min(min_index, index)
                max_index = max(max_index, index)
                rows.append(row)
                cols.append(index)
                vals.append(value)
    if not labels:
        raise ValueError(f"libsvm file {path!r} holds no examples")
    zero_based = min_index == 0  # like scikit-learn's "auto": one index 0 makes the file zero-based
    cols = np.asarray(cols, dtype=np.int64) - (0 if zero_based else 1)
    p = max_index + 1 if zero_based else max_index
    if "features" in options:
        want = _number(spec, "features", options["features"], int, 1)
        if want < p:
            raise ValueError(f"libsvm file {path!r}: features={want} but the file uses {p} features")
        p = want
    X = _feature_array(len(labels), max(p, 1), spare, np.zeros)
    X[np.asarray(rows, dtype=np.int64), cols] = vals
    return X, np.asarray(labels), None, {"zero_based": bool(zero_based)}


def _csv(spec: str, path: str, options: dict):
    _check_keys(spec, options, FILE_OPTIONS["csv"])
    _require_file("csv", path)
    header_opt = options.get("header", "auto")
    if header_opt not in ("auto", "yes", "no"):
        raise ValueError(f"data set spec {spec!r}: header={header_opt!r}; allowed: auto, yes, no")
    with open(path, newline="", encoding="utf-8", errors="replace") as fh:
        lines = [(lineno, row) for lineno, row in enumerate(csv.reader(fh), start=1)
                 if row and any(cell.strip() for cell in row)]
    if not lines:
        raise ValueError(f"csv file {path!r} holds no rows")

    def numeric(cell):
        try:
            float(cell)
            return True
        except ValueError:
            return cell.strip() == ""

    header = None
    if header_opt == "yes" or (header_opt == "auto" and not all(numeric(c) for c in lines[0][1])):
        header = [c.strip() for c in lines[0][1]]
        lines = lines[1:]
    if not lines:
        raise ValueError(f"csv file {path!r} holds a header and no data rows")
    width = len(header) if header else len(lines[0][1])
    if width < 2:
        raise ValueError(f"csv file {path!r} has {width} column; it needs at least one feature and a label")
    label_opt = options.get("label", "last")
    if label_opt == "last":
        label_col = width - 1
    elif label_opt == "first":
        label_col = 0
    elif header and label_opt in header:
        label_col = header.index(label_opt)
    else:
        try:
            label_col = int(label_opt)
            if not 0 <= label_col < width:
                raise ValueError
        except ValueError:
            names = f", or a column name ({', '.join(header)})" if header else ""
            raise ValueError(f"data set spec {spec!r}: label={label_opt!r}; allowed: last, first, a column "
                             f"number 0..{width - 1}{names}") from None
    data = np.empty((len(lines), width))
    for r, (lineno, row) in enumerate(lines):
        if len(row) != width:
            raise ValueError(f"csv file {path!r} line {lineno}: {len(row)} columns, expected {width}")
        for c, cell in enumerate(row):
            text = cell.strip()
            if text == "":
                data[r, c] = np.nan
                continue
            try:
                data[r, c] = float(text)
            except ValueError:
                col = f"column {c}" + (f" ({header[c]!r})" if header else "")
                raise ValueError(f"csv file {path!r} line {lineno}, {col}: {text!r} is not a number") from None
    y = data[:, label_col]
    X = np.delete(data, label_col, axis=1)
    names = [h for i, h in enumerate(header) if i != label_col] if header else None
    bad = np.flatnonzero(~np.isfinite(y))
    if bad.size:
        lineno = lines[bad[0]][0]
        raise ValueError(f"csv file {path!r} line {lineno}: the label (column {label_col}) is missing or not finite")
    first_data_line = [lineno for lineno, _ in lines]
    return X, y, None, {"feature_names": names, "label_column": label_col, "_lines": first_data_line}


def _arrays(source: str, spec: str, path: str, options: dict):
    _check_keys(spec, options, FILE_OPTIONS[source])
    _require_file(source, path)
    try:
        if source == "npz":
            with np.load(path, allow_pickle=False) as archive:
                keys = list(archive.keys())
                if "X" not in keys or "y" not in keys:
                    raise ValueError(f"npz file {path!r} must hold arrays 'X' and 'y', found: {', '.join(keys) or 'none'}")
                X, y = archive["X"], archive["y"]
        else:
            import h5py

            with h5py.File(path, "r") as fh:
                keys = list(fh.keys())
                if "X" not in keys or "y" not in keys:
                    raise ValueError(f"hdf5 file {path!r} must hold datasets 'X' and 'y', found: {', '.join(keys) or 'none'}")
                X, y = fh["X"][()], fh["y"][()]
    except ValueError:
        raise
    except Exception as exc:  # corrupt archive, not HDF5, ...
        raise ValueError(f"{source} file {path!r} could not be read: {type(exc).__name__}: {exc}") from None
    for label, arr in (("X", X), ("y", y)):
        if not np.issubdtype(np.asarray(arr).dtype, np.number) and np.asarray(arr).dtype != bool:
            raise ValueError(f"{source} file {path!r}: {label} must be numeric, got dtype {np.asarray(arr).dtype}")
    return np.asarray(X, dtype=np.float64), np.asarray(y, dtype=np.float64), None, {}


# -- checks and transformations ---------------------------------------------------------------------
def _validate(where: str, X: np.ndarray, y: np.ndarray, lines=None) -> None:
    if X.ndim != 2:
        raise ValueError(f"{where}: dimension mismatch: X must be 2-d (examples x features), got shape {X.shape}")
    if y.ndim != 1:
        raise ValueError(f"{where}: dimension mismatch: y must be 1-d, got shape {y.shape}")
    if X.shape[0] != y.shape[0]:
        raise ValueError(f"{where}: dimension mismatch: X has {X.shape[0]} rows but y has {y.shape[0]} labels")
    if X.shape[0] == 0 or X.shape[1] == 0:
        raise ValueError(f"{where}: no data (X has shape {X.shape})")
    bad = ~np.isfinite(X)
    if bad.any():
        row, col = map(int, np.argwhere(bad)[0])
        line = f" (line {lines[row]})" if lines else ""
        count = int(bad.sum())
        raise ValueError(f"{where}: feature column {col} has a NaN/inf value at row {row}{line} "
                         f"({count} non-finite value(s) in all); features must be finite")
    bad = np.flatnonzero(~np.isfinite(y))
    if bad.size:
        raise ValueError(f"{where}: label at row {bad[0]} is {float(y[bad[0]])!r}; labels must be finite")


def _convert_labels(where: str, y: np.ndarray, label_kind: str | None, task: str | None):
    """(converted y, classes, label map as JSON-friendly dict or None)."""
    values = np.unique(y)
    integral = bool(np.all(values == np.round(values)))
    if label_kind == "real" or (label_kind is None and (task == "regression" or (task is None and not integral))):
        return y, 0, None
    if label_kind is None:
        return y, len(values), None
    if not integral and task != "classification":
        shown = ", ".join(f"{v:g}" for v in values[:5])
        raise ValueError(f"{where}: label_kind={label_kind!r} needs class labels, but the labels are real "
                         f"numbers ({shown}, ...); use label_kind='real' with a regression problem")
    if label_kind == "binary":
        if len(values) != 2:
            shown = ", ".join(f"{v:g}" for v in values[:10]) + (", ..." if len(values) > 10 else "")
            raise ValueError(f"{where}: label_kind='binary' needs exactly 2 classes, the labels have "
                             f"{len(values)}: {shown}")
        mapped = np.where(y == values[1], 1.0, -1.0)
        return mapped, 2, {f"{values[0]:g}": -1, f"{values[1]:g}": 1}
    mapped = np.searchsorted(values, y).astype(np.float64)
    return mapped, len(values), {f"{v:g}": i for i, v in enumerate(values)}


def load_dataset(spec: str, *, standardize: bool = True, intercept: bool = True, test_fraction: float = 0.0,
                 seed: int = 0, label_kind: str | None = None) -> Dataset:
    """Load a data set by spec; label_kind converts labels for the problem ("binary": two classes to
    -1/+1, "multiclass": to 0..K-1, "real": unchanged; None keeps the labels as loaded)."""
    if label_kind is not None and label_kind not in LABEL_KINDS:
        raise ValueError(f"label_kind must be one of {', '.join(LABEL_KINDS)} or None, got {label_kind!r}")
    if not (isinstance(test_fraction, (int, float)) and 0.0 <= test_fraction < 1.0):
        raise ValueError(f"test_fraction must be a number in [0, 1), got {test_fraction!r}")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed must be an integer >= 0, got {seed!r}")
    source, name, options = _parse_spec(spec)
    extra: dict = {}
    lines = None
    # Loaders that allocate their own array leave room for the intercept column when the training
    # rows will be that very array (no test split): the transformation then needs no second copy.
    spare = int(intercept and test_fraction == 0)
    if source == "synthetic":
        X, y, task, extra = _synthetic(spec, name, options, stream(seed, "data", 0, _GENERATE), spare)
        where = f"synthetic data {spec!r}"
    elif source == "sklearn":
        X, y, task, extra = _sklearn(spec, name, options)
        where = f"scikit-learn data set {name!r}"
    elif source == "libsvm":
        X, y, task, extra = _libsvm(spec, name, options, spare)
        where = f"libsvm file {name!r}"
    elif source == "csv":
        X, y, task, extra = _csv(spec, name, options)
        lines = extra.pop("_lines")
        where = f"csv file {name!r}"
    else:
        X, y, task, extra = _arrays(source, spec, name, options)
        where = f"{source} file {name!r}"
    _validate(where, X, y, lines)
    y, classes, label_map = _convert_labels(where, y, label_kind, task)

    N, raw_features = X.shape
    n_test = int(round(test_fraction * N))
    if test_fraction > 0 and not 1 <= n_test <= N - 2:
        raise ValueError(f"test_fraction={test_fraction} leaves {N - n_test} training and {n_test} test examples "
                         f"of {N}; both must be non-empty")
    if n_test:
        perm = stream(seed, "data", 0, _SPLIT).permutation(N)
        test_idx, train_idx = np.sort(perm[:n_test]), np.sort(perm[n_test:])
        X_train, y_train, X_test, y_test = X[train_idx], y[train_idx], X[test_idx], y[test_idx]
    else:
        X_train, y_train, X_test, y_test = X, y, None, None
    del X  # from here on only the split parts are kept

    info = {"source": spec, "kind": source, "standardized": bool(standardize), "intercept": bool(intercept),
            "test_fraction": float(test_fraction), "seed": int(seed), "label_kind": label_kind,
            "n_train": int(X_train.shape[0]), "n_test": int(n_test), "raw_features": int(raw_features)}
    if label_map is not None:
        info["label_map"] = label_map
    if "feature_names" in extra and extra["feature_names"] is not None:
        info["feature_names"] = extra["feature_names"]
    if "zero_based" in extra:
        info["zero_based"] = extra["zero_based"]
    if source == "synthetic":
        info["synthetic"] = extra["options"]

    mean = np.zeros(raw_features)
    scale = np.ones(raw_features)
    if standardize:
        mean, std = _column_mean_std(X_train)
        scale = np.where(std > 0, std, 1.0)  # constant columns are centered only
    if standardize or intercept:
        X_train = _transformed(X_train, mean, scale, intercept)
        if X_test is not None:
            X_test = _transformed(X_test, mean, scale, intercept)
    if "x_planted" in extra and (intercept or not standardize):
        # X x = Xs (scale * x) + mean^T x: the planted solution in the transformed coordinates
        planted = extra["x_planted"] * scale
        if intercept:
            planted = np.append(planted, mean @ extra["x_planted"])
        info["x_planted"] = planted.tolist()

    def c64(a):
        return None if a is None else np.ascontiguousarray(a, dtype=np.float64)

    return Dataset(name=spec, X=c64(X_train), y=c64(y_train), X_test=c64(X_test), y_test=c64(y_test),
                   classes=int(classes), info=info)


def _column_mean_std(X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-column mean and (population) standard deviation, the deviations summed in row blocks."""
    mean = X.mean(axis=0)
    squares = np.zeros(X.shape[1])
    for lo in range(0, X.shape[0], ROW_BLOCK):
        deviation = X[lo:lo + ROW_BLOCK] - mean
        squares += np.einsum("ij,ij->j", deviation, deviation)
    return mean, np.sqrt(squares / X.shape[0])


def _transformed(X: np.ndarray, mean: np.ndarray, scale: np.ndarray, intercept: bool) -> np.ndarray:
    """(X - mean) / scale as a C-contiguous float64 array, with a last column of ones if
    `intercept`, written in row blocks. In place when X is the first columns of a buffer with room
    for the intercept (`_feature_array`); otherwise the only large allocation is the result."""
    N, p = X.shape
    buffer = X.base
    if (intercept and X.dtype == np.float64 and isinstance(buffer, np.ndarray)
            and buffer.shape == (N, p + 1) and buffer.dtype == np.float64
            and buffer.flags.c_contiguous and X.ctypes.data == buffer.ctypes.data):
        out = buffer  # each block is read before it is overwritten: the same values as a copy
    else:
        out = np.empty((N, p + int(intercept)))
    if intercept:
        out[:, p] = 1.0
    for lo in range(0, N, ROW_BLOCK):
        block = slice(lo, lo + ROW_BLOCK)
        np.divide(np.subtract(X[block], mean), scale, out=out[block, :p])
    return out


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


def partition(y: np.ndarray, workers: int, scheme: str = "contiguous", *, alpha: float = 1.0, seed: int = 0,
              remainder: str = "drop") -> tuple[np.ndarray, int]:
    """Shards (m, n) int64 of training-example indices and the number of examples dropped.

    contiguous: worker w gets rows w*n..(w+1)*n-1; shuffled: a random permutation cut into m pieces;
    dirichlet: worker w draws class proportions q_w ~ Dirichlet(alpha 1_K) and fills its n slots with
    examples of classes drawn from q_w (round-robin over workers, so classes that run out are shared
    fairly); smaller alpha = more label skew = more heterogeneity. When N mod m = r != 0, remainder="drop"
    drops r examples (the last r rows; for shuffled and dirichlet the last r of a random permutation)
    and returns r so the caller can warn and record it; remainder="error" raises.
    """
    y = np.asarray(y)
    if y.ndim != 1 or y.shape[0] == 0:
        raise ValueError(f"partition: y must be a non-empty 1-d array of labels, got shape {y.shape}")
    N = y.shape[0]
    if isinstance(workers, bool) or not isinstance(workers, (int, np.integer)) or not 1 <= workers <= N:
        raise ValueError(f"partition: workers must be an integer in 1..{N} (the number of examples), got {workers!r}")
    if scheme not in SCHEMES:
        raise ValueError(f"partition: unknown scheme {scheme!r}; known: {', '.join(SCHEMES)}")
    if remainder not in REMAINDERS:
        raise ValueError(f"partition: remainder must be one of {', '.join(REMAINDERS)}, got {remainder!r}")
    if not (isinstance(alpha, (int, float, np.integer, np.floating)) and not isinstance(alpha, bool)
            and math.isfinite(alpha) and alpha > 0):
        raise ValueError(f"partition: alpha must be a finite number > 0, got {alpha!r}")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"partition: seed must be an integer >= 0, got {seed!r}")
    m = int(workers)
    n, dropped = divmod(N, m)
    if dropped and remainder == "error":
        raise ValueError(f"partition: {N} examples do not split evenly over {m} workers ({N} mod {m} = {dropped}); "
                         f"use remainder='drop' to drop {dropped}, or choose workers dividing {N}")
    rng = stream(seed, "data", 0, _PARTITION)
    if scheme == "contiguous":
        return np.arange(m * n, dtype=np.int64).reshape(m, n), dropped
    perm = rng.permutation(N).astype(np.int64)
    kept = perm[: m * n]
    if scheme == "shuffled":
        return kept.reshape(m, n).copy(), dropped
    labels = y[kept]
    if not np.all(np.isfinite(labels)) or not np.all(labels == np.round(labels)):
        raise ValueError("partition: scheme 'dirichlet' needs discrete class labels, but y holds non-integer values")
    values, inverse = np.unique(labels, return_inverse=True)
    K = len(values)
    order = np.argsort(inverse, kind="stable")  # kept examples grouped by class, random within a class
    pools = kept[order]
    counts = np.bincount(inverse, minlength=K).astype(np.int64)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
    q = rng.dirichlet(np.full(K, float(alpha)), size=m)
    u = rng.random((n, m))
    return _dirichlet_fill(q, pools, starts, counts, n, u), dropped
