"""The LIBSVM reader (ordersim/libsvm.py) against its plain-Python reference
(tests/reference/libsvm.py): the same rows, labels and first error, for generated files in every
layout the format allows, read whole or a block of rows at a time, jitted and under
NUMBA_DISABLE_JIT."""

import bz2
import gzip
import lzma
from pathlib import Path

import numpy as np
import pytest

from ordersim import text_numbers
from ordersim.libsvm import LibsvmRows
from no_jit_reader import read_without_jit
from reference.libsvm import load_libsvm


def number_text(rng, value):
    """value written as a LIBSVM file may hold it: shortest repr, fixed, exponent, signs, ints."""
    style = rng.integers(6)
    if style == 0:
        return repr(value)
    if style == 1:
        return f"{value:.6f}"
    if style == 2:
        return f"{value:.3E}"
    if style == 3:
        return f"+{abs(value)!r}" if value >= 0 else repr(value)
    if style == 4:
        return str(int(round(value)))
    return f"{value:.17g}".lstrip("0") or "0"  # ".5" style where it applies


def libsvm_text(rng, rows, width, zero_based):
    """A file with comments, blank lines, tabs, CRLF and trailing spaces; the last line may lack its
    newline."""
    lines = ["# a header comment"]
    first = 0 if zero_based else 1
    for _ in range(rows):
        label = number_text(rng, float(rng.choice([-1.0, 1.0, 2.5, 0.0])))
        columns = np.sort(rng.choice(width, size=rng.integers(0, width + 1), replace=False)) + first
        if zero_based and rng.random() < 0.2:
            columns = np.unique(np.append(columns, 0))
        tokens = [f"{c}:{number_text(rng, float(rng.normal() * 10.0 ** rng.integers(-3, 4)))}" for c in columns]
        gap = "\t" if rng.random() < 0.2 else " " * int(rng.integers(1, 3))
        line = gap.join([label, *tokens])
        if rng.random() < 0.1:
            line += "  # trailing comment 1:2"
        if rng.random() < 0.1:
            lines.append(rng.choice(["", "   ", "# between rows", "\t"]))
        lines.append(("  " if rng.random() < 0.1 else "") + line)
    ending = "\r\n" if rng.random() < 0.3 else "\n"
    text = ending.join(lines)
    return text if rng.random() < 0.5 else text + ending


def read_whole(path, block_rows, features=None):
    rows = LibsvmRows(str(path), block_rows, features)
    blocks = [rows.block(b) for b in range(-(-rows.rows // block_rows))]
    return np.vstack([X for X, _ in blocks]), np.concatenate([y for _, y in blocks]), rows.zero_based


@pytest.mark.parametrize("read_bytes", [5, 100, 1 << 24])  # pieces of the scan: lines cross them
@pytest.mark.parametrize("seed", range(12))
def test_generated_files_read_as_the_reference_reads_them(tmp_path, monkeypatch, seed, read_bytes):
    monkeypatch.setattr(text_numbers, "READ_BYTES", read_bytes)
    rng = np.random.default_rng(seed)
    path = tmp_path / "data.svm"
    path.write_bytes(libsvm_text(rng, int(rng.integers(1, 40)), int(rng.integers(1, 9)),
                                 zero_based=seed % 3 == 0).encode())
    want_X, want_y, want_zero = load_libsvm(str(path))
    for block_rows in (1, 3, 4096):
        X, y, zero = read_whole(path, block_rows)
        np.testing.assert_array_equal(X, want_X)
        np.testing.assert_array_equal(y, want_y)
        assert zero == want_zero
    wider = want_X.shape[1] + 3
    np.testing.assert_array_equal(read_whole(path, 5, features=wider)[0], load_libsvm(str(path), wider)[0])


BAD_FILES = [
    "1 1:0.5\n1 2:x\n",
    "1 1:0.5\n-1 2-3\n",
    "1 1:0.5\n\nabc 1:1\n",
    "1 3:1 2:1\n",
    "1 3:1 3:1\n",
    "1 1:nan\n",
    "1 1:-Infinity\n",
    "inf 1:1\n",
    "NaN\n",
    "1 -1:2\n",
    "1 1:\n",
    "1 :5\n",
    "1 1:2:3\n",
    "1 1:0x10\n",
    "1 1:1e\n",
    "1 1:1e+\n",
    "1 1:.\n",
    "1 1:--1\n",
    "1 1:1.2.3\n",
    "1 x1:2\n",
    "1\n1 1:1 2:2 # fine\n1 1:2 1:3\n",
    "# only a comment\n\n   \n",
    "",
    "1 1:" + "9" * 500 + "\n",
    "1 1:" + "9" * 309 + ".5\n",
    "1 1:1e309\n",
    "-1e999 1:1\n",
    "\u00e9 1:1\n",
]


@pytest.mark.parametrize("read_bytes", [3, 1 << 24])
@pytest.mark.parametrize("content", BAD_FILES)
def test_bad_files_give_the_reference_error(tmp_path, monkeypatch, content, read_bytes):
    monkeypatch.setattr(text_numbers, "READ_BYTES", read_bytes)
    path = tmp_path / "bad.svm"
    path.write_bytes(content.encode())
    with pytest.raises(ValueError) as want:
        load_libsvm(str(path))
    with pytest.raises(ValueError) as got:
        LibsvmRows(str(path), 4)
    assert str(got.value) == str(want.value)


def test_numbers_that_float_reads(tmp_path):
    """Every spelling float() accepts but underscores, each to the double float() gives."""
    texts = ["1", "-0", "+0.0", ".5", "5.", "-.25e+3", "1E-5", "2.2250738585072014e-308", "4.9e-324",
             "1.7976931348623157e308", "0.1000000000000000055511151231257827", "123456789012345678901234",
             "3.14159265358979323846264338327950288", "9" * 299 + ".25", "1e308", "-0.0e-400"]
    path = tmp_path / "numbers.svm"
    path.write_text("".join(f"{t} 1:{t}\n" for t in texts))
    X, y, _ = read_whole(path, 4)
    want = np.array([float(t) for t in texts])
    np.testing.assert_array_equal(y, want)
    np.testing.assert_array_equal(X[:, 0], want)


def test_reader_runs_without_jit(tmp_path):
    rng = np.random.default_rng(7)
    good, bad = tmp_path / "good.svm", tmp_path / "bad.svm"
    good.write_bytes(libsvm_text(rng, 9, 5, zero_based=False).encode())
    bad.write_text("1 1:1\n-1 2:1 1:2\n")
    X, message = read_without_jit("ordersim.libsvm.LibsvmRows", good, bad, tmp_path)
    np.testing.assert_array_equal(X, load_libsvm(str(good))[0])
    assert message.endswith("line 2: feature indices must increase, got 1 after 2")


REPO_DATA = Path(__file__).resolve().parent.parent / "data"


@pytest.mark.parametrize("name, shape, empty_rows", [("w8a", (49749, 300), 4203), ("mushrooms", (8124, 112), 0)])
def test_the_repository_copies_of_the_rr_papers_data_read_as_the_reference_reads_them(tmp_path, monkeypatch, name,
                                                                                        shape, empty_rows):
    """data/NAME.gz, read through gzip a block at a time, scanned in pieces that cut lines, is the
    reference's reading of the decompressed file (w8a's rows with no feature at all included)."""
    plain = tmp_path / name
    plain.write_bytes(gzip.decompress((REPO_DATA / f"{name}.gz").read_bytes()))
    want_X, want_y, want_zero = load_libsvm(str(plain))
    monkeypatch.setattr(text_numbers, "READ_BYTES", 1 << 16)  # many pieces: the offsets table grows
    X, y, zero = read_whole(REPO_DATA / f"{name}.gz", 4096)
    assert X.shape == shape and zero is want_zero is False
    np.testing.assert_array_equal(X, want_X)
    np.testing.assert_array_equal(y, want_y)
    assert int((X.sum(axis=1) == 0).sum()) == empty_rows
    assert sorted(np.unique(y)) == ([-1.0, 1.0] if name == "w8a" else [1.0, 2.0])


def test_gzip_files_read_as_their_plain_text_in_small_blocks(tmp_path, monkeypatch):
    monkeypatch.setattr(text_numbers, "READ_BYTES", 7)
    rng = np.random.default_rng(5)
    text = libsvm_text(rng, 60, 6, zero_based=False).encode()
    (tmp_path / "a.svm").write_bytes(text)
    (tmp_path / "a.svm.gz").write_bytes(gzip.compress(text))
    for block_rows in (1, 4, 4096):
        got, want = read_whole(tmp_path / "a.svm.gz", block_rows), read_whole(tmp_path / "a.svm", block_rows)
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_array_equal(got[1], want[1])


def test_compressed_files_are_told_by_their_bytes_not_their_name(tmp_path, monkeypatch):
    monkeypatch.setattr(text_numbers, "READ_BYTES", 7)
    text = libsvm_text(np.random.default_rng(6), 30, 5, zero_based=False).encode()
    (tmp_path / "a.svm").write_bytes(text)
    want = read_whole(tmp_path / "a.svm", 4)
    files = {"a.svm.bz2": bz2.compress(text), "a.svm.xz": lzma.compress(text),
             "gzip_no_suffix.svm": gzip.compress(text),
             "plain.svm.gz": text, "bom.svm": b"\xef\xbb\xbf" + text}
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
        got = read_whole(tmp_path / name, 4)
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_array_equal(got[1], want[1])


def test_a_truncated_compressed_file_is_a_one_line_error(tmp_path):
    path = tmp_path / "cut.svm.gz"
    path.write_bytes(gzip.compress(b"1 1:0.5\n" * 1000)[:40])
    with pytest.raises(ValueError, match=r"^libsvm file '.*cut.svm.gz' could not be read as gzip: EOFError: .*; "
                                         r"allowed: plain text or a complete gzip, bz2 or xz file$"):
        LibsvmRows(str(path), 4096)


def test_classic_mac_line_ends_are_named_in_the_error(tmp_path):
    path = tmp_path / "mac.svm"
    path.write_bytes(b"1 1:0.5\r-1 2:0.3\r")  # one line to the reader: "-1" reads as a feature
    with pytest.raises(ValueError, match=r"line 1 \(it holds a \\r that ends no line: lines must end with \\n "
                                         r"or \\r\\n\): malformed feature '-1'"):
        LibsvmRows(str(path), 4096)
