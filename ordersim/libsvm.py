"""LIBSVM (svmlight) text files, read a block of rows at a time by any process.

    rows = LibsvmRows(path, block_rows=4096, features=None)   # scans the file once
    X, y = rows.block(b)                                      # dense rows b*block_rows.. of it

Opening scans the file's bytes once (Numba, a piece of 16 MB at a time, so the file is never in
memory as a whole): every data line is checked, the rows counted, the range of the feature
indices found and the byte offset of every block_rows-th row kept. A block is then read and
parsed on its own. An MPI rank parses only the blocks that hold its workers' rows, and no process
holds more of the data set than the rows it asks for (the reader before this kept every value of
the file as Python objects on rank 0: ~100 bytes per nonzero).

Format: ``LABEL INDEX:VALUE INDEX:VALUE ...`` per line, indices increasing; ``#`` starts a
comment; blank lines are skipped; lines end with ``\\n`` (``\\r\\n`` works too). Indices are
1-based unless an index 0 appears anywhere, then 0-based (scikit-learn's "auto"). An INDEX is
a non-negative integer written with digits (an optional ``+``); a LABEL or VALUE is a decimal
number as Python's ``float()`` reads it, without underscores: ``-1``, ``.5``, ``2.5e-3``, ``inf``
and ``nan`` (the last two rejected as not finite), not hexadecimal. Values are converted by the C
library's ``strtod``, correctly rounded like ``float()``. The first problem in the file is
raised as a one-line ValueError with its line number.
"""

import math
import os

import numpy as np
from llvmlite import ir
from numba import config, njit, types
from numba.core import cgutils
from numba.extending import intrinsic

from ordersim import numba_cache  # noqa: F401  (before the cached kernels: stamps them)

# scan() outcome codes (result[ERROR])
OK, BAD_LABEL, LABEL_NOT_FINITE, BAD_FEATURE, VALUE_NOT_FINITE, NOT_INCREASING = range(6)
# result slots: rows; smallest and largest index (-1: none); the first error: its code, line,
# the byte span of the offending token, the index and the previous index it concerns
ROWS, MIN_INDEX, MAX_INDEX, ERROR, LINE, SPAN_START, SPAN_END, INDEX, PREVIOUS = range(9)
RESULT_SLOTS = 9
SCRATCH = 64  # bytes for one number and its NUL (a longer number allocates its own)
READ_BYTES = 1 << 24  # the scan reads the file in pieces of this size (whole lines)
MAX_INDEX_DIGITS = 18  # an int64 holds every index with this many digits

_NEWLINE, _HASH, _COLON, _PLUS, _MINUS, _DOT = 10, 35, 58, 43, 45, 46


@intrinsic
def _strtod(typingctx, address):
    """C's strtod on the NUL-terminated bytes at ``address``."""
    if not isinstance(address, types.Integer):
        return None
    def codegen(context, builder, signature, args):
        char_pointer = ir.IntType(8).as_pointer()
        strtod = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(ir.DoubleType(), [char_pointer, char_pointer.as_pointer()]),
            "strtod")
        return builder.call(strtod, [builder.inttoptr(args[0], char_pointer),
                                     ir.Constant(char_pointer.as_pointer(), None)])
    return types.float64(address), codegen


if config.DISABLE_JIT:
    def _to_double(scratch, length):
        """The number in scratch[:length] (grammar checked already): float() agrees with strtod."""
        return float(bytes(scratch[:length]).decode("ascii"))
else:
    @njit(inline="always")
    def _to_double(scratch, length):
        scratch[length] = 0
        return _strtod(scratch.ctypes.data)


@njit(inline="always")
def _is_space(c):
    return c == 32 or c == 9 or c == 13 or c == 11 or c == 12


@njit(inline="always")
def _token_end(buf, i):
    """The end of the token starting at i: whitespace, a newline, a comment or the end of buf."""
    while i < buf.shape[0]:
        c = buf[i]
        if c == _NEWLINE or c == _HASH or _is_space(c):
            break
        i += 1
    return i


@njit(inline="always")
def _is_digit(c):
    return 48 <= c <= 57


@njit(inline="always")
def _lower(c):
    return c + 32 if 65 <= c <= 90 else c


@njit(inline="always")
def _is_word(buf, start, end, word):
    """buf[start:end] spells ``word`` (lower-case ASCII codes), in any case."""
    if end - start != len(word):
        return False
    for k in range(len(word)):
        if _lower(buf[start + k]) != word[k]:
            return False
    return True


NOT_A_NUMBER, FINITE_DECIMAL, OTHER_NUMBER = range(3)  # _decimal_kind's answers


@njit(inline="always")
def _decimal_kind(buf, start, end):
    """Whether buf[start:end] is a number in Python float()'s grammar, underscores aside (a sign,
    then digits with at most one point and at least one digit and an optional exponent, or inf,
    infinity, nan): NOT_A_NUMBER; FINITE_DECIMAL when its value is surely finite (no exponent,
    fewer than 300 digits before the point), so that checking it needs no conversion;
    OTHER_NUMBER else."""
    i = start
    if i < end and (buf[i] == _PLUS or buf[i] == _MINUS):
        i += 1
    if _is_word(buf, i, end, (105, 110, 102)) or _is_word(buf, i, end, (110, 97, 110)) \
            or _is_word(buf, i, end, (105, 110, 102, 105, 110, 105, 116, 121)):
        return OTHER_NUMBER
    digits = 0
    while i < end and _is_digit(buf[i]):
        i += 1
        digits += 1
    whole = digits
    if i < end and buf[i] == _DOT:
        i += 1
        while i < end and _is_digit(buf[i]):
            i += 1
            digits += 1
    if digits == 0:
        return NOT_A_NUMBER
    if i == end:
        return FINITE_DECIMAL if whole < 300 else OTHER_NUMBER
    if _lower(buf[i]) != 101:  # e
        return NOT_A_NUMBER
    i += 1
    if i < end and (buf[i] == _PLUS or buf[i] == _MINUS):
        i += 1
    if i == end:
        return NOT_A_NUMBER
    while i < end and _is_digit(buf[i]):
        i += 1
    return OTHER_NUMBER if i == end else NOT_A_NUMBER


@njit(inline="always")
def _value(buf, start, end, scratch):
    """The value of the number buf[start:end] (its grammar checked). scratch: room for the usual
    number and its terminating NUL; a longer one gets its own."""
    length = end - start
    if length >= scratch.shape[0]:
        scratch = np.empty(length + 1, dtype=np.uint8)
    for k in range(length):
        scratch[k] = buf[start + k]
    return _to_double(scratch, length)


@njit(inline="always")
def _check_number(buf, start, end, scratch):
    """(whether buf[start:end] is a number, whether it is finite); converts only numbers whose
    finiteness the text does not settle."""
    kind = _decimal_kind(buf, start, end)
    if kind == NOT_A_NUMBER:
        return False, False
    return True, kind == FINITE_DECIMAL or math.isfinite(_value(buf, start, end, scratch))


@njit(inline="always")
def _index(buf, start, end):
    """The non-negative integer buf[start:end] (digits, an optional +), or -1."""
    i = start + (1 if start < end and buf[start] == _PLUS else 0)
    if i == end or end - i > MAX_INDEX_DIGITS:
        return -1
    value = 0
    while i < end:
        if not _is_digit(buf[i]):
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
    while i < size and _is_space(buf[i]):
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
        ok, finite = _check_number(buf, start, i, scratch)
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
            ok, finite = _check_number(buf, colon + 1, i, scratch)
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
        y[r] = _value(buf, begin, i, scratch)
        while True:
            begin, i, colon = _next_feature(buf, i)
            if begin < 0:
                i = -begin - 1
                break
            X[r, _index(buf, begin, colon) - shift] = _value(buf, colon + 1, i, scratch)


class LibsvmRows:
    """A LIBSVM file's rows, a block of ``block_rows`` at a time (the data sets' row source
    protocol: ``rows``, ``features``, ``labels`` (None: they come with the blocks), ``block(b)``).
    ``features`` (from the spec's ``features=D``): at least this many columns. Raises a one-line
    ValueError naming the file and the line of the first problem. The file is read in pieces of
    READ_BYTES for the scan and one block's bytes at a time afterwards."""

    labels = None

    def __init__(self, path: str, block_rows: int, features: int | None = None):
        self.path, self.block_rows = path, block_rows
        self.size = os.path.getsize(path)
        offsets = np.zeros(self.size // (2 * block_rows) + 2, dtype=np.int64)  # a row takes >= 2 bytes
        result = np.zeros(RESULT_SLOTS, dtype=np.int64)
        result[MIN_INDEX] = result[MAX_INDEX] = -1
        base, carry = 0, b""
        with open(path, "rb") as fh:
            while True:
                data = fh.read(READ_BYTES)
                text = carry + data
                cut = len(text) if not data else text.rfind(b"\n") + 1  # whole lines, or the rest
                if data and cut == 0:  # a line longer than READ_BYTES: read on
                    carry = text
                    continue
                body, carry = text[:cut], text[cut:]
                buf = np.frombuffer(body, dtype=np.uint8)
                scan(buf, base, block_rows, offsets, result)
                if result[ERROR] != OK:
                    raise ValueError(self._message(buf, result))
                base += cut
                if not data:
                    break
        self.rows = int(result[ROWS])
        if self.rows == 0:
            raise ValueError(f"libsvm file {path!r} holds no examples")
        self.offsets = np.append(offsets[:-(-self.rows // block_rows)], self.size)
        # like scikit-learn's "auto": one index 0 makes the file zero-based
        self.zero_based = bool(result[MIN_INDEX] == 0)
        used = int(result[MAX_INDEX]) + 1 if self.zero_based else max(int(result[MAX_INDEX]), 0)
        if features is not None and features < used:
            raise ValueError(f"libsvm file {path!r}: features={features} but the file uses {used} features")
        self.features = max(used if features is None else features, 1)

    def block(self, b: int):
        lo = b * self.block_rows
        count = min(self.block_rows, self.rows - lo)
        with open(self.path, "rb") as fh:
            fh.seek(self.offsets[b])
            body = fh.read(self.offsets[b + 1] - self.offsets[b])
        X, y = np.zeros((count, self.features)), np.empty(count)
        parse_rows(np.frombuffer(body, dtype=np.uint8), 0, 0 if self.zero_based else 1, X, y)
        return X, y

    def _message(self, buf, result) -> str:
        code, line = int(result[ERROR]), int(result[LINE])
        text = bytes(buf[result[SPAN_START]:result[SPAN_END]]).decode("utf-8", errors="replace")
        where = f"libsvm file {self.path!r} line {line}"
        if code == BAD_LABEL:
            return (f"{where}: label {text!r} is not a number (expected: LABEL INDEX:VALUE ...; "
                    f"one label per line)")
        if code == LABEL_NOT_FINITE:
            return f"{where}: label {text!r} is not finite"
        if code == BAD_FEATURE:
            return (f"{where}: malformed feature {text!r} (expected INDEX:VALUE with an integer INDEX "
                    f">= 1 and a number VALUE)")
        if code == VALUE_NOT_FINITE:
            return f"{where}: feature {int(result[INDEX])} has the non-finite value {text!r}"
        return (f"{where}: feature indices must increase, got {int(result[INDEX])} after "
                f"{int(result[PREVIOUS])}")
