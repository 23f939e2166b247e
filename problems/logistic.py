"""Binary logistic regression, y in {-1, +1}, with a regularizer chosen by params[1]:

    f(x) = (1/N) sum_i log(1 + exp(-y_i a_i^T x)) + R(x)
    R(x) = (lam/2) ||x||^2                  params = [lam, 0]   (logistic, convex)
    R(x) = lam sum_j x_j^2 / (1 + x_j^2)    params = [lam, 1]   (nonconvex-logistic)
"""


import numpy as np
from numba import njit

from ordersim.problems._kernels import FAST, row_dot, log1pexp, sigmoid
from ordersim.problems.base import Problem


@njit(cache=True, inline="always", fastmath=FAST, error_model="numpy")
def reg_value(x, lam, kind):
    s = 0.0
    if kind == 0.0:
        for j in range(x.shape[0]):
            s += x[j] * x[j]
        return 0.5 * lam * s
    for j in range(x.shape[0]):
        t = x[j] * x[j]
        s += t / (1.0 + t)
    return lam * s


@njit(cache=True, inline="always", fastmath=FAST, error_model="numpy")
def reg_grad(xj, lam, kind):
    if kind == 0.0:
        return lam * xj
    t = 1.0 + xj * xj
    return 2.0 * lam * xj / (t * t)


@njit(inline="always", fastmath=FAST, error_model="numpy")
def gradients_and_slopes(x, A, y, idx, params, out, slopes):
    """batch_grads' code; with slopes (not None) also slopes[r] = -y_i sigmoid(-y_i a_i^T x), the
    scalar of a_i in the gradient."""
    lam = params[0]
    kind = params[1]
    d = x.shape[0]
    reg = reg_value(x, lam, kind)
    k = idx.shape[0]
    if kind != 0.0 and k > 0:
        # the regularizer's gradient once, in the last row; every row adds it (the last row in place)
        for j in range(d):
            out[k - 1, j] = reg_grad(x[j], lam, kind)
    total = 0.0
    for r in range(k):
        i = idx[r]
        z = row_dot(A, i, x)
        m = -y[i] * z
        total += log1pexp(m) + reg
        c = -y[i] * sigmoid(m)
        if slopes is not None:
            slopes[r] = c
        if kind == 0.0:
            for j in range(d):
                out[r, j] = c * A[i, j] + lam * x[j]
        else:
            for j in range(d):
                out[r, j] = c * A[i, j] + out[k - 1, j]
    return total


@njit(cache=True, fastmath=FAST, error_model="numpy")
def batch_grads(x, A, y, idx, params, out):
    return gradients_and_slopes(x, A, y, idx, params, out, None)


@njit(cache=True, fastmath=FAST, error_model="numpy")
def batch_grads_slopes(x, A, y, idx, params, out, slopes):
    return gradients_and_slopes(x, A, y, idx, params, out, slopes)


@njit(cache=True, fastmath=FAST, error_model="numpy")
def regularizer_gradient(x, params, out):
    for j in range(x.shape[0]):
        out[j] = reg_grad(x[j], params[0], params[1])


@njit(cache=True, fastmath=FAST, error_model="numpy")
def full_grad(x, A, y, idx, params, out):
    lam = params[0]
    kind = params[1]
    d = x.shape[0]
    k = idx.shape[0]
    for j in range(d):
        out[j] = 0.0
    total = 0.0
    for r in range(k):
        i = idx[r]
        z = row_dot(A, i, x)
        m = -y[i] * z
        total += log1pexp(m)
        c = -y[i] * sigmoid(m)
        for j in range(d):
            out[j] += c * A[i, j]
    for j in range(d):
        out[j] = out[j] / k + reg_grad(x[j], lam, kind)
    return total / k + reg_value(x, lam, kind)


@njit(cache=True, fastmath=FAST, error_model="numpy")
def full_loss(x, A, y, idx, params):
    k = idx.shape[0]
    total = 0.0
    for r in range(k):
        i = idx[r]
        z = row_dot(A, i, x)
        total += log1pexp(-y[i] * z)
    return total / k + reg_value(x, params[0], params[1])


@njit(cache=True, fastmath=FAST, error_model="numpy")
def accuracy(x, A, y, idx, params):
    """Prediction sign(a^T x), with a^T x = 0 predicted as +1."""
    k = idx.shape[0]
    hits = 0
    for r in range(k):
        i = idx[r]
        z = row_dot(A, i, x)
        pred = 1.0 if z >= 0.0 else -1.0
        if pred == y[i]:
            hits += 1
    return hits / k


@njit(cache=True, fastmath=FAST, error_model="numpy")
def hessian_product(A, weights, v, lam, out):
    """out = A^T (weights * (A v)) / N + lam v in one pass over the rows (each row is read from
    memory once; its second use finds it in L1)."""
    k, d = A.shape
    for j in range(d):
        out[j] = 0.0
    for i in range(k):
        z = 0.0
        for j in range(d):
            z += A[i, j] * v[j]
        c = weights[i] * z
        for j in range(d):
            out[j] += c * A[i, j]
    for j in range(d):
        out[j] = out[j] / k + lam * v[j]
    return out


@njit(cache=True, fastmath=FAST, error_model="numpy")
def loss_curvature(x, A):
    """The logistic loss'' s(1 - s), s = sigmoid(a_i^T x), of every row (the same for y = +-1), in
    one pass over the rows (NumPy's A @ x, exp and products: twice the time)."""
    k = A.shape[0]
    out = np.empty(k)
    for i in range(k):
        s = sigmoid(row_dot(A, i, x))
        out[i] = s * (1.0 - s)
    return out


class Logistic(Problem):
    name = "logistic"
    description = "binary logistic regression (1/N) sum log(1 + exp(-y_i a_i^T x)) + lam/2 ||x||^2, y in {-1,+1} (convex)"
    convex = True
    label_kind = "binary"
    defaults = {"lam": 0.01}
    regularizer = 0.0

    batch_grads = staticmethod(batch_grads)
    batch_grads_slopes = staticmethod(batch_grads_slopes)
    regularizer_gradient = staticmethod(regularizer_gradient)
    full_grad = staticmethod(full_grad)
    full_loss = staticmethod(full_loss)
    accuracy = staticmethod(accuracy)

    def validate_options(self, options):
        options = super().validate_options(options)
        if self.classes not in (0, 2):
            raise ValueError(f"{self.name}: binary problem, but the data has {self.classes} classes; "
                             f"use softmax or mlp for more than 2 classes")
        return options

    def kernel_params(self):
        return np.array([self.options["lam"], self.regularizer])

    def smoothness(self, rows):
        # logistic loss'' <= 1/4, so H <= A^T A / (4N) + lam I; mu = lam (the loss Hessian can be ~0)
        lam = self.options["lam"]
        return rows.top / 4.0 + lam, rows.max_row_norm2 / 4.0 + lam, lam

    def hessp(self, x, v, A, y):
        return self.hessian_at(x, A, y)(v)

    def hessian_at(self, x, A, y):
        weights, lam = loss_curvature(np.ascontiguousarray(x, dtype=np.float64), A), self.options["lam"]
        return lambda v: hessian_product(A, weights, np.ascontiguousarray(v, dtype=np.float64), lam,
                                         np.empty(A.shape[1]))

    def hessian_matrix(self, x, A, y):
        # A^T diag(w) A as B^T B with B = sqrt(w) A: NumPy hands a product with its own transpose
        # to BLAS syrk (half the flops of a general product, and exactly symmetric)
        B = np.sqrt(loss_curvature(np.ascontiguousarray(x, dtype=np.float64), A))[:, None] * A
        H = B.T @ B
        H /= A.shape[0]
        H[np.diag_indices_from(H)] += self.options["lam"]
        return H
