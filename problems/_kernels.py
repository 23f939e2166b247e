"""Scalar Numba helpers shared by the problem kernels (numerically stable forms)."""

import math

from numba import njit

# Reassociation lets LLVM vectorize the dot-product reductions (about 2x faster); no nnan/ninf, so
# NaN and inf still propagate. Sums may differ in the last bits between CPUs of different vector width.
FAST = {"reassoc", "contract", "nsz"}


@njit(cache=True, inline="always", fastmath=FAST, error_model="numpy")
def log1pexp(z):
    """log(1 + exp(z)) without overflow."""
    if z > 0.0:
        return z + math.log1p(math.exp(-z))
    return math.log1p(math.exp(z))


@njit(cache=True, inline="always", fastmath=FAST, error_model="numpy")
def sigmoid(z):
    if z >= 0.0:
        return 1.0 / (1.0 + math.exp(-z))
    e = math.exp(z)
    return e / (1.0 + e)


@njit(cache=True, inline="always", fastmath=FAST, error_model="numpy")
def half_sq_norm(x):
    s = 0.0
    for j in range(x.shape[0]):
        s += x[j] * x[j]
    return 0.5 * s


@njit(cache=True, inline="always", fastmath=FAST, error_model="numpy")
def row_dot(A, i, x):
    """a_i^T x, the linear models' score of example i."""
    z = 0.0
    for j in range(x.shape[0]):
        z += A[i, j] * x[j]
    return z


@njit(cache=True, error_model="numpy")
def l2_regularizer_gradient(x, params, out):
    """grad (lam/2)||x||^2 = lam x, lam = params[0]: the linear models' regularizer_gradient."""
    for j in range(x.shape[0]):
        out[j] = params[0] * x[j]
