"""The CSV reader (ordersim/csv_rows.py) against its plain-Python reference
(tests/reference/csv_reader.py): the same rows, labels, feature names and first error, for
generated files in the layouts numeric CSV files come in, read a block of rows at a time and in
pieces that cut records, jitted and under NUMBA_DISABLE_JIT."""

import numpy as np
import pytest

from ordersim import text_numbers
from ordersim.csv_rows import CsvRows
from no_jit_reader import read_without_jit
from reference.csv_reader import load_csv


def cell_text(rng, value):
    """A number as CSV files write it: repr, fixed, exponent, an int, padded, quoted."""
    text = [repr(value), f"{value:.5f}", f"{value:.4e}", str(int(value)), f" {value!r} "][rng.integers(5)]
    return f'"{text}"' if rng.random() < 0.15 else text


def csv_text(rng, rows, width, header, blank_cells):
    lines = []
    if header:
        lines.append(",".join(f'"name {j}"' if j % 3 == 0 else f"c{j}" for j in range(width)))
    for _ in range(rows):
        cells = [cell_text(rng, float(rng.normal() * 100)) for _ in range(width)]
        cells[-1] = cell_text(rng, float(rng.integers(0, 3)))
        free = sorted({*range(width)} - {0, width // 2, width - 1})  # not a label column of the test
        if blank_cells and free and rng.random() < 0.3:
            cells[int(rng.choice(free))] = rng.choice(["", "  "])
        if rng.random() < 0.1:
            lines.append(rng.choice(["", ",,", " , "]))  # blank records are skipped
        lines.append(",".join(cells))
    ending = "\r\n" if rng.random() < 0.3 else "\n"
    text = ending.join(lines)
    return text if rng.random() < 0.5 else text + ending


def read_whole(rows):
    blocks = [rows.block(b) for b in range(-(-rows.rows // rows.block_rows))]
    return np.vstack([X for X, _ in blocks]), np.concatenate([y for _, y in blocks])


@pytest.mark.parametrize("read_bytes", [7, 1 << 24])
@pytest.mark.parametrize("seed", range(10))
def test_generated_files_read_as_the_reference_reads_them(tmp_path, monkeypatch, seed, read_bytes):
    monkeypatch.setattr(text_numbers, "READ_BYTES", read_bytes)
    rng = np.random.default_rng(seed)
    width = int(rng.integers(2, 7))
    path = tmp_path / "data.csv"
    path.write_bytes(csv_text(rng, int(rng.integers(1, 30)), width, header=seed % 2 == 0,
                              blank_cells=seed % 3 == 0).encode())
    for label in ("last", "first", str(width // 2)):
        want_X, want_y, extra = load_csv(str(path), label=label)
        for block_rows in (1, 4, 4096):
            rows = CsvRows(str(path), block_rows, label=label)
            X, y = read_whole(rows)
            np.testing.assert_array_equal(X, want_X)
            np.testing.assert_array_equal(y, want_y)
            assert rows.feature_names == extra["feature_names"]
            assert rows.label_column == extra["label_column"]
            assert [rows.line_of(r) for r in range(rows.rows)] == extra["_lines"]


def test_header_names_pick_the_label(tmp_path):
    path = tmp_path / "named.csv"
    path.write_text('age,"height, cm",label\n1,2,0\n3,4,1\n')
    rows = CsvRows(str(path), 4, label="height, cm")
    X, y = read_whole(rows)
    np.testing.assert_array_equal(X, [[1, 0], [3, 1]])
    np.testing.assert_array_equal(y, [2, 4])
    assert rows.feature_names == ["age", "label"]


def test_a_header_is_a_first_record_with_a_cell_the_rows_could_not_hold(tmp_path):
    """header=auto uses the rows' own number grammar: a first record of numbers, blanks and
    padded exponents is data; one cell the rows would refuse (text, an underscore) makes it a
    header."""
    path = tmp_path / "h.csv"
    path.write_text(' 2.5e3 ,,"-1"\n1,2,3\n')
    assert CsvRows(str(path), 4).feature_names is None
    np.testing.assert_array_equal(read_whole(CsvRows(str(path), 4))[1], [-1, 3])
    path.write_text("1_0,2,3\n1,2,3\n")
    assert CsvRows(str(path), 4).feature_names == ["1_0", "2"]


BAD_FILES = [
    ("1,2,0\n3,x,1\n", {}),
    ("1,2,0\n3,4\n", {}),
    ("1,2,0\n3,4,1,5\n", {}),
    ("a,b,c\n1,2,0\n3,,\n5,6,1\n", {}),
    ("1,2,\n3,oops,1\n", {}),  # a missing label is reported after every other problem
    ("1,2,nan\n", {}),
    ("1,2,-inf\n", {}),
    ("a,b\n", {}),
    ("", {}),
    ("\n,,\n  \n", {}),
    ("x\n1\n", {}),
    ("1\n2\n", {}),
    ("a,b,c\n1,2,3\n", {"label": "d"}),
    ("a,b,c\n1,2,3\n", {"label": "7"}),
    ("1,2,3\n", {"header": "maybe"}),
    ("1,2,3\n4,5,6\n", {"header": "yes", "label": "x"}),
    ('1,"2\n3",4\n', {}),
    ("1,2,3\n4,1e999,5\n", {}),
    ("1,2,3\n4,5,1e999\n", {}),
    ("1,2,3\n4,0x10,5\n", {}),
    (",a,label\n0,1.5,0\n1,2.5,1\n", {}),  # pandas' to_csv with its row index
    ('"",a,label\n0,1.5,0\n', {"header": "yes", "label": "first"}),
]


@pytest.mark.parametrize("read_bytes", [5, 1 << 24])
@pytest.mark.parametrize("content,options", BAD_FILES)
def test_bad_files_give_the_reference_error(tmp_path, monkeypatch, content, options, read_bytes):
    monkeypatch.setattr(text_numbers, "READ_BYTES", read_bytes)
    path = tmp_path / "bad.csv"
    path.write_bytes(content.encode())
    try:
        X, y, _ = load_csv(str(path), spec="csv:bad.csv", **options)
        want = None if np.isfinite(X).all() else "NaN features: the data set's check reports them"
    except ValueError as exc:
        want = str(exc)
    if want is None or want.startswith("NaN"):
        rows = CsvRows(str(path), 2, spec="csv:bad.csv", **options)
        X_got, y_got = read_whole(rows)
        np.testing.assert_array_equal(X_got, X)
        np.testing.assert_array_equal(y_got, y)
        return
    with pytest.raises(ValueError) as got:
        CsvRows(str(path), 2, spec="csv:bad.csv", **options)
    assert str(got.value) == want


def test_an_open_quote_is_an_error_with_its_line(tmp_path):
    """The csv module raises its own error type here (the reference crashes with csv.Error)."""
    path = tmp_path / "open.csv"
    path.write_text('1,2,3\n4,"5,6\n7,8,9\n')
    with pytest.raises(ValueError, match=r"open.csv' line 2: a quoted cell is not closed"):
        CsvRows(str(path), 2)
    path.write_text('"a,b\n')
    with pytest.raises(ValueError, match=r"open.csv' line 1: a quoted cell is not closed"):
        CsvRows(str(path), 2)


def test_reader_runs_without_jit(tmp_path):
    rng = np.random.default_rng(3)
    good, bad = tmp_path / "good.csv", tmp_path / "bad.csv"
    good.write_bytes(csv_text(rng, 9, 4, header=True, blank_cells=False).encode())
    bad.write_text("1,2,3\n4,5\n")
    X, message = read_without_jit("ordersim.csv_rows.CsvRows", good, bad, tmp_path)
    np.testing.assert_array_equal(X, load_csv(str(good))[0])
    assert message.endswith("line 2: 2 columns, expected 3")
