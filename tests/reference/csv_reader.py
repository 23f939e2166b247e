"""Plain-Python reference of the CSV reader (ordersim/csv_rows.py): the csv module's records,
every cell through Python's float(). It was ordersim's own reader before the Numba scan;
tests/test_csv_rows.py requires the same rows, labels and error messages.

    load_csv(path, label="last", header="auto") -> (X, y, extra) with extra's feature_names,
    label_column and _lines (the line of every row)
"""

import csv

import numpy as np


def load_csv(path, label="last", header="auto", spec=""):
    header_opt = header
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
        raise ValueError(f"csv file {path!r} has {width} column; it needs at least one feature and a label, "
                         f"separated by ',' (not ';' or a tab)")
    if header and header[0] == "":
        raise ValueError(f"csv file {path!r}: the header names no first column, as in the row index pandas' "
                         f"to_csv writes; allowed: a name for every column (write the file with "
                         f"index=False, or name the column if it is a feature)")
    label_opt = label
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
    return X, y, {"feature_names": names, "label_column": label_col, "_lines": first_data_line}
