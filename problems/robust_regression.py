"""Robust linear regression with a redescending loss rho of the residual r_i = a_i^T x - y_i:

    f(x) = (1/N) sum_i rho_c(a_i^T x - y_i) + (lam/2) ||x||^2,   u = (r / c)^2
    cauchy:          rho = (c^2/2) log(1 + u)        rho' = r / (1 + u)
    geman-mcclure:   rho = (r^2/2) / (1 + u)         rho' = r / (1 + u)^2
    welsch:          rho = (c^2/2) (1 - exp(-u))     rho' = r exp(-u)

All three equal r^2/2 near 0, have |rho''| <= 1 and are nonconvex for |r| > c (roughly).
params = [lam, c, loss (0 cauchy, 1 geman-mcclure, 2 welsch)].
"""

import math

import numpy as np
from numba import njit

from ordersim.problems._kernels import FAST, half_sq_norm, l2_regularizer_gradient, row_dot
from ordersim.problems.base import Problem, option_choice, option_float

LOSSES = ("cauchy", "geman-mcclure", "welsch")


@njit(cache=True, inline="always", fastmath=FAST, error_model="numpy")
def rho(r, c, kind):
    u = (r / c) * (r / c)
    if kind == 0.0:
        return 0.5 * c * c * math.log1p(u)
    if kind == 1.0:
        return 0.5 * r * r / (1.0 + u)
    return 0.5 * c * c * (-math.expm1(-u))


@njit(cache=True, inline="always", fastmath=FAST, error_model="numpy")
def psi(r, c, kind):
    u = (r / c) * (r / c)
    if kind == 0.0:
        return r / (1.0 + u)
    if kind == 1.0:
        return r / ((1.0 + u) * (1.0 + u))
    return r * math.exp(-u)


@njit(inline="always", fastmath=FAST, error_model="numpy")
def gradients_and_slopes(x, A, y, idx, params, out, slopes):
    """batch_grads' code; with slopes (not None) also slopes[r] = rho'(a_i^T x - y_i), the scalar
    of a_i in the gradient."""
    lam, c, kind = params[0], params[1], params[2]
    d = x.shape[0]
    reg = lam * half_sq_norm(x)
    total = 0.0
    for r in range(idx.shape[0]):
        i = idx[r]
        e = row_dot(A, i, x) - y[i]
        total += rho(e, c, kind) + reg
        g = psi(e, c, kind)
        for j in range(d):
            out[r, j] = g * A[i, j] + lam * x[j]
        if slopes is not None:
            slopes[r] = g
    return total


@njit(cache=True, fastmath=FAST, error_model="numpy")
def batch_grads(x, A, y, idx, params, out):
    return gradients_and_slopes(x, A, y, idx, params, out, None)


@njit(cache=True, fastmath=FAST, error_model="numpy")
def batch_grads_slopes(x, A, y, idx, params, out, slopes):
    return gradients_and_slopes(x, A, y, idx, params, out, slopes)


@njit(cache=True, fastmath=FAST, error_model="numpy")
def full_grad(x, A, y, idx, params, out):
    lam, c, kind = params[0], params[1], params[2]
    d = x.shape[0]
    k = idx.shape[0]
    for j in range(d):
        out[j] = 0.0
    total = 0.0
    for r in range(k):
        i = idx[r]
        e = row_dot(A, i, x) - y[i]
        total += rho(e, c, kind)
        g = psi(e, c, kind)
        for j in range(d):
            out[j] += g * A[i, j]
    for j in range(d):
        out[j] = out[j] / k + lam * x[j]
    return total / k + lam * half_sq_norm(x)


@njit(cache=True, fastmath=FAST, error_model="numpy")
def full_loss(x, A, y, idx, params):
    lam, c, kind = params[0], params[1], params[2]
    k = idx.shape[0]
    total = 0.0
    for r in range(k):
        i = idx[r]
        e = row_dot(A, i, x) - y[i]
        total += rho(e, c, kind)
    return total / k + lam * half_sq_norm(x)


@njit(cache=True, fastmath=FAST, error_model="numpy")
def accuracy(x, A, y, idx, params):
    return np.nan


class RobustRegression(Problem):
    name = "robust-regression"
    description = ("robust linear regression with a redescending loss (cauchy, geman-mcclure or welsch, "
                   "scale c) + lam/2 ||x||^2 (nonconvex)")
    convex = False
    label_kind = "real"
    defaults = {"lam": 1e-3, "loss": "geman-mcclure", "c": 1.0}

    batch_grads = staticmethod(batch_grads)
    batch_grads_slopes = staticmethod(batch_grads_slopes)
    regularizer_gradient = staticmethod(l2_regularizer_gradient)
    full_grad = staticmethod(full_grad)
    full_loss = staticmethod(full_loss)
    accuracy = staticmethod(accuracy)

    def validate_options(self, options):
        options = super().validate_options(options)
        options["loss"] = option_choice(self.name, "loss", options["loss"], LOSSES)
        options["c"] = option_float(self.name, "c", options["c"], 0.0, low_open=True)
        return options

    def kernel_params(self):
        o = self.options
        return np.array([o["lam"], o["c"], LOSSES.index(o["loss"])])

    def smoothness(self, rows):
        # sup |rho''| = 1 (at r = 0) for all three losses
        lam = self.options["lam"]
        return rows.top + lam, rows.max_row_norm2 + lam, math.nan
