"""Multinomial (softmax) regression, labels 0..K-1, parameters W (K, p) stored row-major in x:

    f(x) = (1/N) sum_i [ log sum_k exp(w_k^T a_i) - w_{y_i}^T a_i ] + (lam/2) ||W||_F^2.

The full K x p parametrization is over-complete; the L2 term makes the minimizer unique.
"""

import math

import numpy as np
from numba import njit

from ordersim.problems._kernels import FAST, half_sq_norm
from ordersim.problems.base import Problem


@njit(cache=True, inline="always", fastmath=FAST, error_model="numpy")
def logits(x, A, i, p, K, z):
    """z[k] = w_k^T a_i; returns log sum_k exp(z_k)."""
    zmax = -np.inf
    for k in range(K):
        s = 0.0
        base = k * p
        for j in range(p):
            s += x[base + j] * A[i, j]
        z[k] = s
        if s > zmax:
            zmax = s
    t = 0.0
    for k in range(K):
        t += math.exp(z[k] - zmax)
    return zmax + math.log(t)


@njit(cache=True, fastmath=FAST, error_model="numpy")
def batch_grads(x, A, y, idx, params, out):
    lam = params[0]
    p = A.shape[1]
    K = x.shape[0] // p
    z = np.empty(K)
    reg = lam * half_sq_norm(x)
    total = 0.0
    for r in range(idx.shape[0]):
        i = idx[r]
        lse = logits(x, A, i, p, K, z)
        label = int(y[i])
        total += lse - z[label] + reg
        for k in range(K):
            c = math.exp(z[k] - lse)
            if k == label:
                c -= 1.0
            base = k * p
            for j in range(p):
                out[r, base + j] = c * A[i, j] + lam * x[base + j]
    return total


@njit(cache=True, fastmath=FAST, error_model="numpy")
def full_grad(x, A, y, idx, params, out):
    lam = params[0]
    p = A.shape[1]
    K = x.shape[0] // p
    n = idx.shape[0]
    z = np.empty(K)
    for j in range(x.shape[0]):
        out[j] = 0.0
    total = 0.0
    for r in range(n):
        i = idx[r]
        lse = logits(x, A, i, p, K, z)
        label = int(y[i])
        total += lse - z[label]
        for k in range(K):
            c = math.exp(z[k] - lse)
            if k == label:
                c -= 1.0
            base = k * p
            for j in range(p):
                out[base + j] += c * A[i, j]
    for j in range(x.shape[0]):
        out[j] = out[j] / n + lam * x[j]
    return total / n + lam * half_sq_norm(x)


@njit(cache=True, fastmath=FAST, error_model="numpy")
def full_loss(x, A, y, idx, params):
    p = A.shape[1]
    K = x.shape[0] // p
    n = idx.shape[0]
    z = np.empty(K)
    total = 0.0
    for r in range(n):
        i = idx[r]
        lse = logits(x, A, i, p, K, z)
        total += lse - z[int(y[i])]
    return total / n + params[0] * half_sq_norm(x)


@njit(cache=True, fastmath=FAST, error_model="numpy")
def accuracy(x, A, y, idx, params):
    """argmax_k w_k^T a_i (first index on ties) against the label."""
    p = A.shape[1]
    K = x.shape[0] // p
    n = idx.shape[0]
    z = np.empty(K)
    hits = 0
    for r in range(n):
        i = idx[r]
        logits(x, A, i, p, K, z)
        best = 0
        for k in range(1, K):
            if z[k] > z[best]:
                best = k
        if best == int(y[i]):
            hits += 1
    return hits / n


class Softmax(Problem):
    name = "softmax"
    description = "multinomial (softmax) regression, cross-entropy + lam/2 ||W||^2, labels 0..K-1 (convex)"
    convex = True
    label_kind = "multiclass"
    defaults = {"lam": 1e-3}

    batch_grads = staticmethod(batch_grads)
    full_grad = staticmethod(full_grad)
    full_loss = staticmethod(full_loss)
    accuracy = staticmethod(accuracy)

    def validate_options(self, options):
        options = super().validate_options(options)
        if self.classes < 2:
            raise ValueError(f"{self.name}: needs classes >= 2 (labels 0..K-1), got classes={self.classes}")
        return options

    def parameter_dim(self):
        return self.classes * self.features

    def smoothness(self, rows):
        # per example the loss Hessian is (diag(q) - q q^T) kron a a^T with ||diag(q) - q q^T|| <= 1/2
        lam = self.options["lam"]
        return rows.top / 2.0 + lam, rows.max_row_norm2 / 2.0 + lam, lam

    def hessp(self, x, v, A, y):
        return self.hessian_at(x, A, y)(v)

    def hessian_at(self, x, A, y):
        K, p = self.classes, self.features
        Z = A @ x.reshape(K, p).T
        Z -= Z.max(axis=1, keepdims=True)
        P = np.exp(Z)
        P /= P.sum(axis=1, keepdims=True)  # the rows' class probabilities: once per x
        lam = self.options["lam"]

        def product(v):
            AV = A @ v.reshape(K, p).T
            M = P * AV - P * (P * AV).sum(axis=1, keepdims=True)
            return (M.T @ A).ravel() / A.shape[0] + lam * v
        return product
