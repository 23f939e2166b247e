"""A linear model whose slopes do not depend on x (real labels), for tests of the projected-rows route:
f_i(x) = y_i a_i^T x, so grad f_i = y_i a_i (s_i = y_i, no regularizer), and the vectors a
projecting orderer is handed, Pi g_i = y_i (Pi a_i) + Pi 0, can be written down without
replaying SGD (tests/test_projected_rows.py). Unbounded below: for a few small steps only."""

import math

import numpy as np
from numba import njit

from ordersim.problems.base import Problem


@njit(cache=True, error_model="numpy")
def batch_grads_slopes(x, A, y, idx, params, out, slopes):
    total = 0.0
    for r in range(idx.shape[0]):
        i = idx[r]
        z = 0.0
        for j in range(x.shape[0]):
            z += A[i, j] * x[j]
            out[r, j] = y[i] * A[i, j]
        slopes[r] = y[i]
        total += y[i] * z
    return total


@njit(cache=True, error_model="numpy")
def batch_grads(x, A, y, idx, params, out):
    return batch_grads_slopes(x, A, y, idx, params, out, np.empty(idx.shape[0]))


@njit(cache=True, error_model="numpy")
def regularizer_gradient(x, params, out):
    out[:] = 0.0


@njit(cache=True, error_model="numpy")
def full_grad(x, A, y, idx, params, out):
    out[:] = 0.0
    total = 0.0
    for i in idx:
        total += y[i] * (A[i] @ x)
        out += y[i] * A[i]
    out /= idx.shape[0]
    return total / idx.shape[0]


@njit(cache=True, error_model="numpy")
def full_loss(x, A, y, idx, params):
    total = 0.0
    for i in idx:
        total += y[i] * (A[i] @ x)
    return total / idx.shape[0]


@njit(cache=True, error_model="numpy")
def accuracy(x, A, y, idx, params):
    return math.nan


class FixedSlope(Problem):
    name = "fixed-slope"
    description = "f_i(x) = y_i a_i^T x: gradients y_i a_i at every x (a test problem)"
    label_kind = "real"

    batch_grads = staticmethod(batch_grads)
    batch_grads_slopes = staticmethod(batch_grads_slopes)
    regularizer_gradient = staticmethod(regularizer_gradient)
    full_grad = staticmethod(full_grad)
    full_loss = staticmethod(full_loss)
    accuracy = staticmethod(accuracy)
