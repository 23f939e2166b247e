"""Run a text-file row source (ordersim.libsvm.LibsvmRows, ordersim.csv_rows.CsvRows) under
NUMBA_DISABLE_JIT in a fresh interpreter: the rows it reads from one file, the error it raises
for another."""

import os
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = """
import importlib, sys, numpy as np
module, name, good, out, bad = sys.argv[1:]
Rows = getattr(importlib.import_module(module), name)
rows = Rows(good, 2)
np.save(out, np.vstack([rows.block(b)[0] for b in range(-(-rows.rows // 2))]))
try:
    Rows(bad, 2)
except ValueError as exc:
    print(exc)
"""


def read_without_jit(reader: str, good, bad, tmp_path):
    """(the features reader "module.Class" reads from file good, the message of its error for file
    bad) without Numba's compiler."""
    module, name = reader.rsplit(".", 1)
    out = tmp_path / "rows.npy"
    result = subprocess.run([sys.executable, "-c", SCRIPT, module, name, str(good), str(out), str(bad)],
                            capture_output=True, text=True, env=dict(os.environ, NUMBA_DISABLE_JIT="1"),
                            cwd=ROOT, timeout=300)
    assert result.returncode == 0, result.stderr
    return np.load(out), result.stdout.strip()
