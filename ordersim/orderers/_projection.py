"""The random projection Pi (k x d) the balancing orderers may apply before balancing
(docs/algorithms.md, "Random projection before balancing"): how it is drawn, its default k, and
the jitted product, whose association is fixed so that the references take the same decisions.

Pi is drawn once per run from stream(seed, "projection", 0, 0): no worker, rank or epoch in the
key, so every worker and rank has the same Pi.

- gaussian: Pi = Z / sqrt(k), Z = standard_normal((k, d)) of the stream, row-major; row r of
  Pi v is the 16-lane dot product <Pi_r, v> of _vector.py (dot_with_difference).
- sparse: density rho = 1/sqrt(d), non-zero entries +-sigma, sigma = 1/sqrt(k rho). Row by row
  (r = 0..k-1): c = binomial(d, rho), the c columns choice(d, c, replace=False), then
  random(c) < 1/2 makes an entry +sigma (else -sigma): each entry is +sigma or -sigma with
  probability rho/2, else 0, independently. Stored as the columns of every row, its + columns
  then its - columns, each ascending (O(nnz)); row r of Pi v is sigma (P - M), P the sum of v
  over the + columns and M over the - columns, each added in ascending column order from 0.0.
"""

import math

import numpy as np
from numba import njit

from ordersim.orderers._vector import _component, dot_with_difference
from ordersim.streams import stream

NONE, GAUSSIAN, SPARSE = 0, 1, 2
KINDS = {"none": NONE, "gaussian": GAUSSIAN, "sparse": SPARSE}
JL_EPS = 0.1  # the distortion of the Johnson-Lindenstrauss default


def johnson_lindenstrauss_dim(points: int, dim: int, eps: float = JL_EPS) -> int:
    """The default k: scikit-learn's johnson_lindenstrauss_min_dim(points, eps) (the formula
    4 ln(points) / (eps^2/2 - eps^3/3), truncated), at least 1 and at most d."""
    denominator = (eps ** 2 / 2) - (eps ** 3 / 3)
    return int(min(dim, max(1, int(4 * math.log(points) / denominator))))


def gaussian_projection(seed: int, k: int, d: int) -> np.ndarray:
    """Pi (k, d), entries N(0, 1/k)."""
    return stream(seed, "projection").standard_normal((k, d)) / math.sqrt(k)


def sparse_projection(seed: int, k: int, d: int) -> tuple[np.ndarray, np.ndarray, float]:
    """(columns, bounds, sigma): row r's + columns are columns[bounds[2r]:bounds[2r+1]], its -
    columns columns[bounds[2r+1]:bounds[2r+2]], each ascending."""
    rng, rho = stream(seed, "projection"), 1.0 / math.sqrt(d)
    rows, bounds = [], np.zeros(2 * k + 1, dtype=np.int64)
    for r in range(k):
        picked = rng.choice(d, rng.binomial(d, rho), replace=False)
        plus = rng.random(len(picked)) < 0.5
        rows += [np.sort(picked[plus]), np.sort(picked[~plus])]
        bounds[2 * r + 1] = bounds[2 * r] + plus.sum()
        bounds[2 * r + 2] = bounds[2 * r] + len(picked)
    columns = np.concatenate(rows).astype(np.int64) if rows else np.zeros(0, dtype=np.int64)
    return columns, bounds, 1.0 / math.sqrt(k * rho)


@njit(inline="always", error_model="numpy")
def _column_sum(a, b, columns, first, last):
    total = 0.0
    for j in range(first, last):
        total += _component(a, b, columns[j])
    return total


@njit(inline="always", error_model="numpy")
def project(out, a, b, kind, dense, columns, bounds, sigma):
    """out = Pi (a - b) (b None: Pi a) by the module's rules; kind NONE copies a - b into out."""
    if kind == GAUSSIAN:
        for r in range(out.shape[0]):
            out[r] = dot_with_difference(dense[r], a, b)
    elif kind == SPARSE:
        for r in range(out.shape[0]):
            plus = _column_sum(a, b, columns, bounds[2 * r], bounds[2 * r + 1])
            minus = _column_sum(a, b, columns, bounds[2 * r + 1], bounds[2 * r + 2])
            out[r] = sigma * (plus - minus)
    else:
        for c in range(out.shape[0]):
            out[c] = _component(a, b, c)


@njit(cache=True, error_model="numpy")
def project_rows(A, kind, dense, columns, bounds, sigma, out):
    """out[i] = Pi A[i] for every row of A (out: (rows, k)): a linear model's rows projected once
    per run (the engine hands a projecting orderer s_i out[i] + Pi grad R(x))."""
    for i in range(A.shape[0]):
        project(out[i], A[i], None, kind, dense, columns, bounds, sigma)
    return out
