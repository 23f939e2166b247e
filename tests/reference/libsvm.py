"""Plain-Python reference of the LIBSVM reader (ordersim/libsvm.py): the file read as text, line
by line, every number through Python's int() and float(). It was ordersim's own reader before
the Numba scan; tests/test_libsvm.py requires the same rows, labels and error messages.

    load_libsvm(path, features=None) -> (X (N, p) dense, y (N,), zero_based)
"""

import math

import numpy as np


def load_libsvm(path, features=None):
    labels, rows, cols, vals = [], [], [], []
    min_index, max_index = None, 0
    with open(path, encoding="utf-8", errors="replace", newline="\n") as fh:
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
    zero_based = min_index == 0
    cols = np.asarray(cols, dtype=np.int64) - (0 if zero_based else 1)
    p = max_index + 1 if zero_based else max_index
    if features is not None:
        if features < p:
            raise ValueError(f"libsvm file {path!r}: features={features} but the file uses {p} features")
        p = features
    X = np.zeros((len(labels), max(p, 1)))
    X[np.asarray(rows, dtype=np.int64), cols] = vals
    return X, np.asarray(labels), bool(zero_based)
