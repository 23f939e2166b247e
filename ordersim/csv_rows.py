"""Numeric CSV files, read a block of rows at a time by any process.

    rows = CsvRows(path, block_rows=4096, label="last", header="auto", spec=...)
    X, y = rows.block(b)              # rows b*block_rows.. of it: features and labels

A UTF-8 byte order mark at the start is skipped; a compressed file is refused. The cells are those
of Python's ``csv.reader`` with its default dialect: ``,`` between cells, ``"`` around a cell that
may hold commas or line ends, ``""`` inside it for one quote; a record ends with ``\\n``,
``\\r\\n`` or ``\\r``. Records whose cells are all blank are skipped. The first other record is a
header when ``header=yes``, or with ``header=auto`` when one of its cells is neither blank nor a
number; every later record is a row of numbers: a blank cell is NaN (which the
data set's check then rejects, naming its row and line), any other cell a number as
``ordersim.text_numbers`` reads it (Python's ``float()`` but for underscores), whitespace around
it allowed. The label is the last column unless ``label`` names another (first, a column number or
a header name).

Opening reads the first record with the csv module, then scans the rest once (Numba, a piece of
16 MB at a time): every record checked, the rows counted and the byte offset and line of every
block_rows-th row kept. A block is then read and parsed on its own, so no process holds the file
or more rows than it asks for. Errors are one-line ValueErrors naming the file, the line (where a
record starts) and the column; a label that is missing or not finite is reported after every
other problem, as the reader before this one did.
"""

import csv
import io
import os

import numpy as np
from numba import njit

from ordersim import numba_cache  # noqa: F401  (before the cached kernels: stamps them)
from ordersim import text_numbers
from ordersim.text_numbers import NOT_A_NUMBER, check_number, decimal_kind, is_space, value

HEADERS = ("auto", "yes", "no")
# scan() outcome codes (result[ERROR])
OK, WIDTH, NOT_NUMBER, OPEN_QUOTE = range(4)
# result slots: rows and lines so far; the first problem: code, line, the record's byte span,
# its column (or cell count for WIDTH); the first missing or non-finite label's line (0: none)
ROWS, LINE, ERROR, ERROR_LINE, SPAN_START, SPAN_END, COLUMN, LABEL_LINE = range(8)
RESULT_SLOTS = 8
_NEWLINE, _RETURN, _QUOTE, _COMMA = 10, 13, 34, 44


@njit(inline="always")
def _is_blank(c):
    """What str.strip() removes from ASCII text (the csv module's cells are stripped so)."""
    return is_space(c) or c == _NEWLINE or 28 <= c <= 31


@njit(inline="always")
def _ends_record(c):
    return c == _NEWLINE or c == _RETURN


@njit(inline="always")
def _after_terminator(buf, i):
    """The position after the record terminator at i (\\r\\n counts as one)."""
    if buf[i] == _RETURN and i + 1 < buf.shape[0] and buf[i + 1] == _NEWLINE:
        return i + 2
    return i + 1


@njit(inline="always")
def _cell(buf, i, out):
    """Read the cell starting at i into out (its text as the csv module gives it, quotes
    undone). Returns (its length in out, the position after it: at a comma, a record's end or
    the end of buf, the line ends inside it, whether a quote is left open at the end of buf)."""
    size, length, lines = buf.shape[0], 0, 0
    if i < size and buf[i] == _QUOTE:
        i += 1
        while True:
            if i >= size:
                return length, i, lines, True
            c = buf[i]
            if c == _QUOTE:
                if i + 1 < size and buf[i + 1] == _QUOTE:  # "" stands for one quote
                    out[length] = _QUOTE
                    length += 1
                    i += 2
                    continue
                i += 1
                break
            if c == _NEWLINE or (c == _RETURN and not (i + 1 < size and buf[i + 1] == _NEWLINE)):
                lines += 1
            out[length] = c
            length += 1
            i += 1
    while i < size and buf[i] != _COMMA and not _ends_record(buf[i]):  # unquoted, or after the quote
        out[length] = buf[i]
        length += 1
        i += 1
    return length, i, lines, False


@njit(inline="always")
def _stripped(out, length):
    """(start, end) of out[:length] without the blanks around it."""
    start, end = 0, length
    while start < end and _is_blank(out[start]):
        start += 1
    while end > start and _is_blank(out[end - 1]):
        end -= 1
    return start, end


@njit(inline="always")
def _record(buf, i, at_end, width, label, scratch):
    """Check the record starting at i, its first ``width`` cells for numbers. Returns (the
    position after it, its cell count, the line ends it holds, a problem code, the column of the
    problem, whether cell ``label`` is missing or not finite, whether every cell is blank); the
    position is -1 when the record does not end before the end of buf and more bytes follow (not
    at_end)."""
    size, count, lines, blank, bad_label = buf.shape[0], 0, 0, True, False
    code, column = OK, -1
    while True:
        length, i, inside, open_quote = _cell(buf, i, scratch)
        lines += inside
        if open_quote or (i >= size and not at_end):
            if not at_end:
                return -1, count, lines, OK, -1, False, False
            return size, count, lines, OPEN_QUOTE, count, False, False
        start, end = _stripped(scratch, length)
        kind = -1 if start == end else decimal_kind(scratch, start, end)
        if count < width:
            if kind != -1:
                blank = False
            if code == OK and kind == NOT_A_NUMBER:
                code, column = NOT_NUMBER, count
            if count == label:
                bad_label = kind == -1 or not check_number(scratch, start, end, scratch[length:])[1]
        elif kind != -1:
            blank = False
        count += 1
        if i >= size:
            return size, count, lines + 1, code, column, bad_label, blank
        if buf[i] == _COMMA:
            i += 1
            continue
        if buf[i] == _RETURN and i + 1 == size and not at_end:  # \r\n cut between two pieces?
            return -1, count, lines, OK, -1, False, False
        return _after_terminator(buf, i), count, lines + 1, code, column, bad_label, blank


@njit(cache=True, error_model="numpy")
def scan(buf, base, at_end, width, label, block_rows, offsets, first_lines, result):
    """Check the records of ``buf`` (the file's bytes from offset ``base`` on): count the rows
    (result[ROWS]) and lines (result[LINE]) on from earlier calls, put the file offset and line of
    row k * block_rows in offsets[k] and first_lines[k]. A record that does not end in buf waits
    for the next piece unless at_end. Stops at the first problem (result[ERROR] and the slots
    after it); keeps the line of the first missing or non-finite label in result[LABEL_LINE].
    Returns the bytes done with."""
    scratch = np.empty(buf.shape[0] + 1, dtype=np.uint8)
    rows, line, i, size = result[ROWS], result[LINE], 0, buf.shape[0]
    while i < size:
        end, count, lines, code, column, bad_label, blank = _record(buf, i, at_end, width, label,
                                                                     scratch)
        if end < 0:
            break
        if not blank:
            if code != OPEN_QUOTE and count != width:  # the cell count first, as csv.reader's rows
                code, column = WIDTH, count
            if code != OK:
                result[ERROR], result[ERROR_LINE], result[COLUMN] = code, line + 1, column
                result[SPAN_START], result[SPAN_END] = i, end
                return -1
            if bad_label and result[LABEL_LINE] == 0:
                result[LABEL_LINE] = line + 1
            if rows % block_rows == 0:
                offsets[rows // block_rows] = base + i
                first_lines[rows // block_rows] = line + 1
            rows += 1
        line += lines
        i = end
    result[ROWS], result[LINE] = rows, line
    return i


@njit(cache=True, error_model="numpy")
def parse_rows(buf, first_line, width, label, X, y, lines):
    """The X.shape[0] rows at the start of ``buf`` (a block's bytes): features into X, labels
    into y, blank cells as NaN; lines[r]: the line row r starts on (the first row's: first_line)."""
    scratch = np.empty(buf.shape[0] + 1, dtype=np.uint8)
    i, line, r = 0, first_line, 0
    while r < X.shape[0]:
        start_line, blank, row_start = line, True, i
        while True:  # a first pass: is the record blank? (blank records hold no row)
            length, i, inside, _ = _cell(buf, i, scratch)
            line += inside
            start, end = _stripped(scratch, length)
            blank = blank and start == end
            if i < buf.shape[0] and buf[i] == _COMMA:
                i += 1
                continue
            break
        if i < buf.shape[0]:
            i = _after_terminator(buf, i)
        line += 1
        if blank:
            continue
        j = row_start
        for column in range(width):
            length, j, _, _ = _cell(buf, j, scratch)
            start, end = _stripped(scratch, length)
            number = np.nan if start == end else value(scratch, start, end, scratch[length:])
            if column == label:
                y[r] = number
            else:
                X[r, column - (column > label)] = number
            j += 1  # past the comma
        lines[r] = start_line
        r += 1


@njit(cache=True, error_model="numpy")
def _skip_blank(buf, at_end, found):
    """Skip the records of buf whose cells are all blank: found = (the offset of the first other
    record, -1 if none ends in buf; the offset after it; the line ends before it; those it spans;
    OPEN_QUOTE if it never ends, NOT_NUMBER if a cell is neither blank nor a number (a header),
    else OK). Returns the bytes done with."""
    scratch = np.empty(buf.shape[0] + 1, dtype=np.uint8)
    i, lines_before = 0, 0
    found[0] = -1
    while i < buf.shape[0]:
        end, _, lines, code, _, _, blank = _record(buf, i, at_end, buf.shape[0], -1, scratch)
        if end < 0:
            break
        if not blank or code == OPEN_QUOTE:
            found[0], found[1], found[3], found[4] = i, end, lines, code
            break
        lines_before += lines
        i = end
    found[2] = lines_before
    return i


def _first_record(path: str, start: int = 0):
    """The first record from byte ``start`` on that is not all blank, as (its byte offset, the
    line it starts on counted from start's, its cells as the csv module reads them, the offset
    after it, the line ends it spans, whether a cell is neither blank nor a number); None if
    there is none."""
    found, lines_before, record = np.zeros(5, dtype=np.int64), [0], []

    def scan_piece(buf, base, at_end):
        used = _skip_blank(buf, at_end, found)
        lines_before[0] += found[2]
        if found[0] < 0:
            return used
        line = lines_before[0] + 1
        if found[4] == OPEN_QUOTE:
            raise ValueError(f"csv file {path!r} line {line}: a quoted cell is not closed before the end "
                             f"of the file")
        text = bytes(buf[found[0]:found[1]]).decode("utf-8", errors="replace")
        cells = next(csv.reader(io.StringIO(text, newline="")), [])
        record.append((base + int(found[0]), line, cells, base + int(found[1]), int(found[3]),
                       found[4] == NOT_NUMBER))
        return -1

    text_numbers.scan_pieces(path, scan_piece, start)
    return record[0] if record else None


class CsvRows:
    """A numeric CSV file's rows, a block of ``block_rows`` at a time (the data sets' row source
    protocol: ``rows``, ``features``, ``labels`` (None: they come with the blocks), ``block(b)``),
    with ``feature_names`` (from a header, else None), ``label_column`` and ``line_of(row)``.
    ``spec``: the data set spec, named in errors about the options."""

    labels = None

    def __init__(self, path: str, block_rows: int, label: str = "last", header: str = "auto",
                 spec: str = ""):
        if header not in HEADERS:
            raise ValueError(f"data set spec {spec!r}: header={header!r}; allowed: {', '.join(HEADERS)}")
        self.path, self.block_rows = path, block_rows
        where = f"csv file {path!r}"
        compressed = text_numbers.compression(path)
        if compressed:  # a block's read seeks into the file: decompressing it each time would cost a pass
            raise ValueError(f"{where} is {compressed[0]}-compressed; allowed: plain CSV text "
                             f"(decompress it first)")
        first = _first_record(path, text_numbers.text_start(path))
        if first is None:
            raise ValueError(f"{where} holds no rows")
        start, line, cells, after, spanned, has_text = first
        names = None
        lines_before = line - 1  # before the scan's first record
        if header == "yes" or (header == "auto" and has_text):
            names = [c.strip() for c in cells]
            if _first_record(path, after) is None:
                raise ValueError(f"{where} holds a header and no data rows")
            start, lines_before = after, lines_before + spanned
        self.width = width = len(cells)
        if width < 2:
            raise ValueError(f"{where} has {width} column; it needs at least one feature and a label, "
                             f"separated by ',' (not ';' or a tab)")
        if names and names[0] == "":  # read as a feature, the row number would be one
            raise ValueError(f"{where}: the header names no first column, as in the row index pandas' "
                             f"to_csv writes; allowed: a name for every column (write the file with "
                             f"index=False, or name the column if it is a feature)")
        self.label_column = self._label_column(label, names, spec)
        self.feature_names = [h for i, h in enumerate(names) if i != self.label_column] if names else None

        size = os.path.getsize(path)
        offsets = np.zeros(size // (2 * block_rows) + 2, dtype=np.int64)  # a row takes >= 2 bytes
        first_lines = np.zeros_like(offsets)
        result = np.zeros(RESULT_SLOTS, dtype=np.int64)
        result[LINE] = lines_before

        def scan_piece(buf, base, at_end):
            used = scan(buf, base, at_end, width, self.label_column, block_rows, offsets, first_lines,
                        result)
            if used < 0:
                raise ValueError(self._message(buf, result, names))
            return used

        text_numbers.scan_pieces(path, scan_piece, start)
        self.rows = int(result[ROWS])
        if result[LABEL_LINE]:
            raise ValueError(f"{where} line {int(result[LABEL_LINE])}: the label (column "
                             f"{self.label_column}) is missing or not finite")
        blocks = -(-self.rows // block_rows)
        self.offsets = np.append(offsets[:blocks], size)
        self.first_lines = first_lines[:blocks].copy()
        self.features = width - 1

    def _label_column(self, label: str, names, spec: str) -> int:
        width = self.width
        if label == "last":
            return width - 1
        if label == "first":
            return 0
        if names and label in names:
            same = [str(i) for i, name in enumerate(names) if name == label]
            if len(same) > 1:  # taking the first would be a guess
                raise ValueError(f"data set spec {spec!r}: label={label!r} names {len(same)} columns of the "
                                 f"header; allowed: one of them by number ({', '.join(same)})")
            return names.index(label)
        try:
            column = int(label)
            if not 0 <= column < width:
                raise ValueError
            return column
        except ValueError:
            known = f", or a column name ({', '.join(names)})" if names else ""
            raise ValueError(f"data set spec {spec!r}: label={label!r}; allowed: last, first, a column "
                             f"number 0..{width - 1}{known}") from None

    def _parse(self, b: int):
        with open(self.path, "rb") as fh:
            fh.seek(self.offsets[b])
            buf = np.frombuffer(fh.read(self.offsets[b + 1] - self.offsets[b]), dtype=np.uint8)
        count = min(self.block_rows, self.rows - b * self.block_rows)
        X, y, lines = np.empty((count, self.features)), np.empty(count), np.empty(count, dtype=np.int64)
        parse_rows(buf, self.first_lines[b], self.width, self.label_column, X, y, lines)
        return X, y, lines

    def block(self, b: int):
        X, y, _ = self._parse(b)
        return X, y

    def line_of(self, row: int) -> int:
        """The line data row ``row`` starts on."""
        return int(self._parse(row // self.block_rows)[2][row % self.block_rows])

    def _message(self, buf, result, names) -> str:
        code, line, column = int(result[ERROR]), int(result[ERROR_LINE]), int(result[COLUMN])
        where = f"csv file {self.path!r} line {line}"
        if code == OPEN_QUOTE:
            return f"{where}: a quoted cell is not closed before the end of the file"
        if code == WIDTH:
            return f"{where}: {column} columns, expected {self.width}"
        text = bytes(buf[result[SPAN_START]:result[SPAN_END]]).decode("utf-8", errors="replace")
        cells = next(csv.reader(io.StringIO(text, newline="")), [])
        name = f"column {column}" + (f" ({names[column]!r})" if names else "")
        return f"{where}, {name}: {cells[column].strip()!r} is not a number"
