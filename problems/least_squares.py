"""Ridge least squares: f(x) = (1/N) sum_i 1/2 (a_i^T x - y_i)^2 + (lam/2) ||x||^2."""

import numpy as np
from numba import njit

from ordersim.problems._kernels import FAST, half_sq_norm, l2_regularizer_gradient, row_dot
from ordersim.problems.base import Problem


@njit(inline="always", fastmath=FAST, error_model="numpy")
def gradients_and_slopes(x, A, y, idx, params, out, slopes):
    """batch_grads' code; with slopes (not None) also slopes[r] = a_i^T x - y_i, the scalar of a_i in
    the gradient."""
    lam = params[0]
    d = x.shape[0]
    reg = lam * half_sq_norm(x)
    total = 0.0
    for r in range(idx.shape[0]):
        i = idx[r]
        e = row_dot(A, i, x) - y[i]
        total += 0.5 * e * e + reg
        if slopes is not None:
            slopes[r] = e
        for j in range(d):
            out[r, j] = e * A[i, j] + lam * x[j]
    return total


@njit(cache=True, fastmath=FAST, error_model="numpy")
def batch_grads(x, A, y, idx, params, out):
    return gradients_and_slopes(x, A, y, idx, params, out, None)


@njit(cache=True, fastmath=FAST, error_model="numpy")
def batch_grads_slopes(x, A, y, idx, params, out, slopes):
    return gradients_and_slopes(x, A, y, idx, params, out, slopes)


@njit(cache=True, fastmath=FAST, error_model="numpy")
def full_grad(x, A, y, idx, params, out):
    lam = params[0]
    d = x.shape[0]
    k = idx.shape[0]
    for j in range(d):
        out[j] = 0.0
    total = 0.0
    for r in range(k):
        i = idx[r]
        e = row_dot(A, i, x) - y[i]
        total += 0.5 * e * e
        for j in range(d):
            out[j] += e * A[i, j]
    for j in range(d):
        out[j] = out[j] / k + lam * x[j]
    return total / k + lam * half_sq_norm(x)


@njit(cache=True, fastmath=FAST, error_model="numpy")
def full_loss(x, A, y, idx, params):
    lam = params[0]
    k = idx.shape[0]
    total = 0.0
    for r in range(k):
        i = idx[r]
        e = row_dot(A, i, x) - y[i]
        total += 0.5 * e * e
    return total / k + lam * half_sq_norm(x)


@njit(cache=True, fastmath=FAST, error_model="numpy")
def accuracy(x, A, y, idx, params):
    return np.nan


class LeastSquares(Problem):
    name = "least-squares"
    description = "ridge least squares (1/N) sum 1/2 (a_i^T x - y_i)^2 + lam/2 ||x||^2 (convex)"
    convex = True
    label_kind = "real"
    defaults = {"lam": 1e-3}

    batch_grads = staticmethod(batch_grads)
    batch_grads_slopes = staticmethod(batch_grads_slopes)
    regularizer_gradient = staticmethod(l2_regularizer_gradient)
    full_grad = staticmethod(full_grad)
    full_loss = staticmethod(full_loss)
    accuracy = staticmethod(accuracy)

    def smoothness(self, rows):
        lam = self.options["lam"]
        return rows.top + lam, rows.max_row_norm2 + lam, rows.bottom + lam

    def hessp(self, x, v, A, y):
        return A.T @ (A @ v) / A.shape[0] + self.options["lam"] * v

    def solve_exact(self, rows):
        if rows.gram is None:
            return None  # too many features for the normal equations: let the solver iterate
        from scipy import linalg  # here, not at the top: every run imports this module (the registry)
        H = rows.gram + self.options["lam"] * np.eye(rows.gram.shape[0])
        try:
            return linalg.solve(H, rows.moment, assume_a="pos")
        except (linalg.LinAlgError, ValueError):
            return None  # singular (lam = 0 and rank-deficient): let the iterative solver try
