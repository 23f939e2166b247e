"""Arrays whose data start on a cache line (64 bytes).

NumPy aligns an array's data to 16 bytes. The hot loops read and write rows a vector at a time
(the balancing kernels' vector code, the problems' gradient loops): a row that starts 16 bytes
into a cache line splits many such accesses over two lines, and a data row of A touches 17 lines
instead of 16. In alternating runs of the serial benchmark (docs/performance.md) aligning
the data, the gradient buffers and the orderers' state took cd-grab's epoch from 1.20-1.28 to
1.18-1.21 x rr's and d-grab's from 1.32-1.41 to 1.26-1.28. Alignment changes no value: every
array holds the same numbers at the same indices.
"""

import math

import numpy as np

CACHE_LINE = 64  # bytes


def empty(shape, dtype=np.float64) -> np.ndarray:
    """np.empty(shape, dtype), its data starting on a cache line (a view of a slightly larger
    byte buffer, which it keeps alive)."""
    # math.prod and isinstance, not np.prod and np.isscalar, which took 9 us a call where
    # np.empty takes 0.2
    dtype = np.dtype(dtype)
    shape = (int(shape),) if isinstance(shape, (int, np.integer)) else tuple(map(int, shape))
    size = math.prod(shape) * dtype.itemsize
    raw = np.empty(size + CACHE_LINE, dtype=np.uint8)
    start = -raw.ctypes.data % CACHE_LINE
    return raw[start:start + size].view(dtype).reshape(shape)


def zeros(shape, dtype=np.float64) -> np.ndarray:
    """np.zeros(shape, dtype), its data starting on a cache line."""
    out = empty(shape, dtype)
    out[...] = 0
    return out


def on_cache_line(array: np.ndarray) -> np.ndarray:
    """`array` as a C-contiguous array starting on a cache line: itself when it is one already,
    otherwise a copy."""
    if array.flags.c_contiguous and array.ctypes.data % CACHE_LINE == 0:
        return array
    out = empty(array.shape, array.dtype)
    out[...] = array
    return out
