"""Numbers in text data files (LIBSVM, CSV), read from their bytes in Numba, and the loop that
feeds a file's bytes to a scan a piece at a time.

A number is what Python's ``float()`` reads, but for underscores: a sign, then digits with at
most one point and at least one digit and an optional exponent, or inf, infinity, nan (any
case). Its value comes from the C library's ``strtod``, correctly rounded as ``float()`` is, so
a row reads bitwise as Python would read it. ``check_number`` converts only numbers whose
finiteness the text does not settle (an exponent, 300 digits or more before the point, inf, nan):
checking a file's numbers costs no conversion in the usual case.
"""

import bz2
import gzip
import lzma
import math
import re
import zlib

import numpy as np
from llvmlite import ir
from numba import config, njit, types
from numba.core import cgutils
from numba.extending import intrinsic

SCRATCH = 64  # bytes for one number and its NUL (a longer number allocates its own)
READ_BYTES = 1 << 24  # scan_pieces reads a file in pieces of this size
PLUS, MINUS, DOT = 43, 45, 46


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
def is_space(c):
    return c == 32 or c == 9 or c == 13 or c == 11 or c == 12


@njit(inline="always")
def is_digit(c):
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


NOT_A_NUMBER, FINITE_DECIMAL, OTHER_NUMBER = range(3)  # decimal_kind's answers


@njit(inline="always")
def decimal_kind(buf, start, end):
    """Whether buf[start:end] is a number in Python float()'s grammar, underscores aside (a sign,
    then digits with at most one point and at least one digit and an optional exponent, or inf,
    infinity, nan): NOT_A_NUMBER; FINITE_DECIMAL when its value is surely finite (no exponent,
    fewer than 300 digits before the point), so that checking it needs no conversion;
    OTHER_NUMBER else."""
    i = start
    if i < end and (buf[i] == PLUS or buf[i] == MINUS):
        i += 1
    if _is_word(buf, i, end, (105, 110, 102)) or _is_word(buf, i, end, (110, 97, 110)) \
            or _is_word(buf, i, end, (105, 110, 102, 105, 110, 105, 116, 121)):
        return OTHER_NUMBER
    digits = 0
    while i < end and is_digit(buf[i]):
        i += 1
        digits += 1
    whole = digits
    if i < end and buf[i] == DOT:
        i += 1
        while i < end and is_digit(buf[i]):
            i += 1
            digits += 1
    if digits == 0:
        return NOT_A_NUMBER
    if i == end:
        return FINITE_DECIMAL if whole < 300 else OTHER_NUMBER
    if _lower(buf[i]) != 101:  # e
        return NOT_A_NUMBER
    i += 1
    if i < end and (buf[i] == PLUS or buf[i] == MINUS):
        i += 1
    if i == end:
        return NOT_A_NUMBER
    while i < end and is_digit(buf[i]):
        i += 1
    return OTHER_NUMBER if i == end else NOT_A_NUMBER


@njit(inline="always")
def value(buf, start, end, scratch):
    """The value of the number buf[start:end] (its grammar checked). scratch: room for the usual
    number and its terminating NUL; a longer one gets its own."""
    length = end - start
    if length >= scratch.shape[0]:
        scratch = np.empty(length + 1, dtype=np.uint8)
    for k in range(length):
        scratch[k] = buf[start + k]
    return _to_double(scratch, length)


@njit(inline="always")
def check_number(buf, start, end, scratch):
    """(whether buf[start:end] is a number, whether it is finite); converts only numbers whose
    finiteness the text does not settle."""
    kind = decimal_kind(buf, start, end)
    if kind == NOT_A_NUMBER:
        return False, False
    return True, kind == FINITE_DECIMAL or math.isfinite(value(buf, start, end, scratch))


# Compressed files, told by their first bytes (not their name): (pattern, format, opener). bz2's
# includes its block magic, so no text file (a CSV header "BZh...") looks like one.
COMPRESSED = ((re.compile(rb"\x1f\x8b"), "gzip", gzip.open),
              (re.compile(rb"BZh[1-9](1AY&SY|\x17rE8P\x90)"), "bz2", bz2.open),
              (re.compile(rb"\xfd7zXZ\x00"), "xz", lzma.open))
# what a damaged compressed stream raises while it is read (gzip's BadGzipFile is an OSError)
DECOMPRESS_ERRORS = (OSError, EOFError, zlib.error, lzma.LZMAError)
UTF8_BOM = b"\xef\xbb\xbf"  # Excel's "CSV UTF-8" and utf-8-sig writers start the file with it


def compression(path: str):
    """(format, opener) of the compressed file at ``path`` (gzip, bz2, xz); None for a plain file."""
    with open(path, "rb") as fh:
        head = fh.read(10)
    return next(((name, opener) for pattern, name, opener in COMPRESSED if pattern.match(head)), None)


def open_bytes(path: str):
    """The file at ``path`` opened for binary reading; a gzip, bz2 or xz file decompressed on the
    way (its offsets are those of the decompressed bytes; seeking backwards decompresses from the
    start)."""
    compressed = compression(path)
    return compressed[1](path, "rb") if compressed else open(path, "rb")


def open_plain(path: str):
    return open(path, "rb")


def text_start(path: str, opener=open_plain) -> int:
    """Where the text of the file at ``path`` starts: after a UTF-8 byte order mark, if any."""
    with opener(path) as fh:
        return len(UTF8_BOM) if fh.read(len(UTF8_BOM)) == UTF8_BOM else 0


def scan_pieces(path: str, scan_piece, start: int = 0, opener=open_plain) -> None:
    """Feed the bytes of the file at ``path``, from offset ``start`` on, to scan_piece(buf, base,
    at_end) a piece of READ_BYTES at a time (buf: the bytes from file offset ``base`` on, a uint8
    array; at_end: buf reaches the end of the file). scan_piece returns how many bytes it is done
    with (whole records; the rest comes again at the front of the next piece) or -1 to stop.
    ``opener(path)`` opens the file (``open_bytes``: also compressed files)."""
    base, carry = start, b""
    with opener(path) as fh:
        fh.seek(start)
        while True:
            data = fh.read(READ_BYTES)
            text = carry + data
            used = scan_piece(np.frombuffer(text, dtype=np.uint8), base, not data)
            if used < 0 or not data:
                return
            carry, base = text[used:], base + used
