"""LIBSVM (svmlight) text files, read a block of rows at a time by any process.

    rows = LibsvmRows(path, block_rows=4096, features=None)   # scans the file once
    X, y = rows.block(b)                                      # dense rows b*block_rows.. of it

Opening scans the file's bytes once (Numba, a piece of 16 MB at a time, so the file is never in
memory as a whole): every data line is checked, the rows counted, the range of the feature
indices found and the byte offset of every block_rows-th row kept. A block is then read and
parsed on its own. An MPI rank parses only the blocks that hold its workers' rows, and no process
holds more of the data set than the rows it asks for (the reader before this kept every value of
the file as Python objects on rank 0: ~100 bytes per nonzero).

A gzip, bz2 or xz file (told by its first bytes, whatever its name) is decompressed on the way (a
block's read decompresses from the start of the file up to it). A UTF-8 byte order mark at the
start is skipped.

Format: ``LABEL INDEX:VALUE INDEX:VALUE ...`` per line, indices increasing; ``#`` starts a
comment; blank lines are skipped; lines end with ``\\n`` (``\\r\\n`` works too). Indices are
1-based unless an index 0 appears anywhere, then 0-based (scikit-learn's "auto"). An INDEX is
a non-negative integer written with digits (an optional ``+``); a LABEL or VALUE is a decimal
number as Python's ``float()`` reads it, without underscores: ``-1``, ``.5``, ``2.5e-3``, ``inf``
and ``nan`` (the last two rejected as not finite), not hexadecimal. Values are converted by the C
library's ``strtod``, correctly rounded like ``float()``. The first problem in the file is
raised as a one-line ValueError with its line number.
"""

import re

import numpy as np
from numba import njit

from ordersim import numba_cache  # noqa: F401  (before the cached kernels: stamps them)
from ordersim import text_numbers
from ordersim.text_numbers import PLUS, SCRATCH, check_number, is_digit, is_space, value

# scan() outcome codes (result[ERROR])
OK, BAD_LABEL, LABEL_NOT_FINITE, BAD_FEATURE, VALUE_NOT_FINITE, NOT_INCREASING = range(6)
# result slots: rows; smallest and largest index (-1: none); the first error: its code, line,
# the byte span of the offending token, the index and the previous index it concerns
ROWS, MIN_INDEX, MAX_INDEX, ERROR, LINE, SPAN_START, SPAN_END, INDEX, PREVIOUS = range(9)
RESULT_SLOTS = 9
MAX_INDEX_DIGITS = 18  # an int64 holds every index with this many digits

_NEWLINE, _HASH, _COLON = 10, 35, 58


@njit(inline="always")
def _token_end(buf, i):
    """The end of the token starting at i: whitespace, a newline, a comment or the end of buf."""
    while i < buf.shape[0]:
        c = buf[i]
        if c == _NEWLINE or c == _HASH or is_space(c):
            break
        i += 1
    return i


@njit(inline="always")
def _index(buf, start, end):
    """The non-negative integer buf[start:end] (digits, an optional +), or -1."""
    i = start + (1 if start < end and buf[start] == PLUS else 0)
    if i == end or end - i > MAX_INDEX_DIGITS:
        return -1
    value = 0
    while i < end:
        if not is_digit(buf[i]):
            return -1
        value = value * 10 + (buf[i] - 48)
        i += 1
    return value


@njit(inline="always")
def _skip_line(buf, i):
    """The position after the end of the line that i is in."""
    while i < buf.shape[0] and buf[i] != _NEWLINE:
        i += 1
    return i + 1


@njit(inline="always")
def _next_token(buf, i):
    """The start of the line's next token after i, or -(position after the line) - 1 at its end."""
    size = buf.shape[0]
    while i < size and is_space(buf[i]):
        i += 1
    if i >= size:
        return -size - 1
    if buf[i] == _NEWLINE or buf[i] == _HASH:
        return -_skip_line(buf, i) - 1
    return i


@njit(inline="always")
def _next_feature(buf, i):
    """(start, end, colon) of the line's next INDEX:VALUE token after i (colon == end: it has
    none), or the same negative start as _next_token's three times at the line's end."""
    start = _next_token(buf, i)
    if start < 0:
        return start, start, start
    end = _token_end(buf, start)
    colon = start
    while colon < end and buf[colon] != _COLON:
        colon += 1
    return start, end, colon


@njit(inline="always")
def _fail(result, code, line, start, end, index, previous):
    result[ERROR], result[LINE], result[SPAN_START], result[SPAN_END] = code, line, start, end
    result[INDEX], result[PREVIOUS] = index, previous


@njit(cache=True, error_model="numpy")
def scan(buf, base, block_rows, offsets, result):
    """Check the lines of ``buf``, the file's bytes from offset ``base`` on, ending with a line's
    end or the file's: count the rows (result[ROWS]) and the lines (result[LINE]) on from earlier
    calls, track the range of the indices (result[MIN_INDEX], result[MAX_INDEX]; -1: no feature
    yet) and put the file offset of row k * block_rows in offsets[k]. Stops at the first problem:
    result[ERROR] (OK otherwise), result[LINE] its line and the slots after it; the span is an
    offset into buf."""
    scratch = np.empty(SCRATCH, dtype=np.uint8)
    rows, line, i, size = result[ROWS], result[LINE], 0, buf.shape[0]
    while i < size:
        line += 1
        start = _next_token(buf, i)
        if start < 0:  # a blank or comment line
            i = -start - 1
            continue
        if rows % block_rows == 0:
            offsets[rows // block_rows] = base + start
        i = _token_end(buf, start)
        ok, finite = check_number(buf, start, i, scratch)
        if not ok:
            _fail(result, BAD_LABEL, line, start, i, 0, 0)
            return
        if not finite:
            _fail(result, LABEL_NOT_FINITE, line, start, i, 0, 0)
            return
        previous = -1
        while True:
            start, i, colon = _next_feature(buf, i)
            if start < 0:
                i = -start - 1
                break
            index = _index(buf, start, colon) if colon < i else -1
            ok, finite = check_number(buf, colon + 1, i, scratch)
            if index < 0 or not ok:
                _fail(result, BAD_FEATURE, line, start, i, 0, 0)
                return
            if not finite:
                _fail(result, VALUE_NOT_FINITE, line, colon + 1, i, index, 0)
                return
            if previous >= 0 and index <= previous:
                _fail(result, NOT_INCREASING, line, start, i, index, previous)
                return
            previous = index
            if result[MIN_INDEX] < 0 or index < result[MIN_INDEX]:
                result[MIN_INDEX] = index
            result[MAX_INDEX] = max(result[MAX_INDEX], index)
        rows += 1
    result[ROWS], result[LINE] = rows, line


@njit(cache=True)
def _after_last_newline(buf):
    """The position after buf's last newline (0: none)."""
    i = buf.shape[0]
    while i > 0 and buf[i - 1] != _NEWLINE:
        i -= 1
    return i


@njit(cache=True, error_model="numpy")
def parse_rows(buf, start, shift, X, y):
    """The X.shape[0] rows from byte offset ``start`` of a scanned file: labels into y, value of
    index j into X[r, j - shift] (X zeroed by the caller)."""
    scratch = np.empty(SCRATCH, dtype=np.uint8)
    i = start
    for r in range(X.shape[0]):
        begin = _next_token(buf, i)
        while begin < 0:  # blank and comment lines between the rows
            begin = _next_token(buf, -begin - 1)
        i = _token_end(buf, begin)
        y[r] = value(buf, begin, i, scratch)
        while True:
            begin, i, colon = _next_feature(buf, i)
            if begin < 0:
                i = -begin - 1
                break
            X[r, _index(buf, begin, colon) - shift] = value(buf, colon + 1, i, scratch)


class LibsvmRows:
    """A LIBSVM file's rows, a block of ``block_rows`` at a time (the data sets' row source
    protocol: ``rows``, ``features``, ``labels`` (None: they come with the blocks), ``block(b)``).
    ``features`` (from the spec's ``features=D``): at least this many columns. Raises a one-line
    ValueError naming the file and the line of the first problem. The file is read in pieces of
    text_numbers.READ_BYTES for the scan and one block's bytes at a time afterwards."""

    labels = None

    def __init__(self, path: str, block_rows: int, features: int | None = None):
        self.path, self.block_rows = path, block_rows
        offsets = np.zeros(2, dtype=np.int64)
        result = np.zeros(RESULT_SLOTS, dtype=np.int64)
        result[MIN_INDEX] = result[MAX_INDEX] = -1
        size = 0  # of the (decompressed) bytes

        def scan_piece(buf, base, at_end):  # whole lines
            nonlocal offsets, size
            end = buf.size if at_end else _after_last_newline(buf)
            need = (int(result[ROWS]) + end // 2) // block_rows + 2  # a row takes >= 2 bytes
            if need > offsets.size:
                offsets = np.concatenate([offsets, np.zeros(need - offsets.size, dtype=np.int64)])
            scan(buf[:end], base, block_rows, offsets, result)
            if result[ERROR] != OK:
                raise ValueError(self._message(buf, result))
            size = base + end
            return end

        compressed = text_numbers.compression(path)
        try:
            start = text_numbers.text_start(path, text_numbers.open_bytes)
            text_numbers.scan_pieces(path, scan_piece, start, opener=text_numbers.open_bytes)
        except text_numbers.DECOMPRESS_ERRORS as exc:  # a truncated or damaged compressed file
            what = f"as {compressed[0]}" if compressed else "from disk"
            raise ValueError(f"libsvm file {path!r} could not be read {what}: {type(exc).__name__}: {exc}; "
                             f"allowed: plain text or a complete gzip, bz2 or xz file") from None
        self.rows = int(result[ROWS])
        if self.rows == 0:
            raise ValueError(f"libsvm file {path!r} holds no examples")
        self.offsets = np.append(offsets[:-(-self.rows // block_rows)], size)
        # like scikit-learn's "auto": one index 0 makes the file zero-based
        self.zero_based = bool(result[MIN_INDEX] == 0)
        used = int(result[MAX_INDEX]) + 1 if self.zero_based else max(int(result[MAX_INDEX]), 0)
        if features is not None and features < used:
            raise ValueError(f"libsvm file {path!r}: features={features} but the file uses {used} features")
        self.features = max(used if features is None else features, 1)

    def block(self, b: int):
        lo = b * self.block_rows
        count = min(self.block_rows, self.rows - lo)
        with text_numbers.open_bytes(self.path) as fh:
            fh.seek(self.offsets[b])
            body = fh.read(self.offsets[b + 1] - self.offsets[b])
        X, y = np.zeros((count, self.features)), np.empty(count)
        parse_rows(np.frombuffer(body, dtype=np.uint8), 0, 0 if self.zero_based else 1, X, y)
        return X, y

    def _message(self, buf, result) -> str:
        code, line = int(result[ERROR]), int(result[LINE])
        text = bytes(buf[result[SPAN_START]:result[SPAN_END]]).decode("utf-8", errors="replace")
        where = f"libsvm file {self.path!r} line {line}"
        before = bytes(buf[:result[SPAN_START]])
        if re.search(rb"\r(?!\n)", before[before.rfind(b"\n") + 1:]):
            # a file with classic Mac line ends is one line: its rows' labels read as features
            where += " (it holds a \\r that ends no line: lines must end with \\n or \\r\\n)"
        if code == BAD_LABEL:
            return (f"{where}: label {text!r} is not a number (expected: LABEL INDEX:VALUE ...; "
                    f"one label per line)")
        if code == LABEL_NOT_FINITE:
            return f"{where}: label {text!r} is not finite"
        if code == BAD_FEATURE:
            # svmlight's ranking files have one after the label (scikit-learn returns it apart)
            qid = "; qid:N fields (ranking files) are not read, remove them" if text.startswith("qid:") else ""
            return (f"{where}: malformed feature {text!r} (expected INDEX:VALUE with an integer INDEX "
                    f">= 1 and a number VALUE){qid}")
        if code == VALUE_NOT_FINITE:
            return f"{where}: feature {int(result[INDEX])} has the non-finite value {text!r}"
        return (f"{where}: feature indices must increase, got {int(result[INDEX])} after "
                f"{int(result[PREVIOUS])}")
