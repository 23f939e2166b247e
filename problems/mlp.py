"""One-hidden-layer MLP classifier with a smooth activation, labels 0..K-1:

    h(a) = s(W1 a + b1)          W1 (H, p), b1 (H,), s = tanh or softplus(t) = log(1 + e^t)
    z(a) = W2 h(a) + b2          W2 (K, H), b2 (K,)
    f(x) = (1/N) sum_i [ log sum_k exp z_k(a_i) - z_{y_i}(a_i) ] + (lam/2) ||x||^2

x = [W1 row-major, b1, W2 row-major, b2]; params = [lam, H, activation (0 tanh, 1 softplus), K].
"""

import math

import numpy as np
from numba import njit

from ordersim.problems._kernels import FAST, half_sq_norm, log1pexp, sigmoid
from ordersim.problems.base import Problem, option_choice, option_float, option_int

ACTIVATIONS = ("tanh", "softplus")


@njit(cache=True, inline="always", fastmath=FAST, error_model="numpy")
def forward(x, A, i, p, H, K, act, work):
    """Fills work = [pre-activations (H), activations (H), logits (K)]; returns log-sum-exp of the logits."""
    off_b1 = H * p
    off_w2 = off_b1 + H
    off_b2 = off_w2 + K * H
    for u in range(H):
        s = x[off_b1 + u]
        base = u * p
        for j in range(p):
            s += x[base + j] * A[i, j]
        work[u] = s
        if act == 0.0:
            work[H + u] = math.tanh(s)
        else:
            work[H + u] = log1pexp(s)
    zmax = -np.inf
    for k in range(K):
        s = x[off_b2 + k]
        base = off_w2 + k * H
        for u in range(H):
            s += x[base + u] * work[H + u]
        work[2 * H + k] = s
        if s > zmax:
            zmax = s
    t = 0.0
    for k in range(K):
        t += math.exp(work[2 * H + k] - zmax)
    return zmax + math.log(t)


@njit(cache=True, inline="always", fastmath=FAST, error_model="numpy")
def backward(x, A, i, label, p, H, K, act, lam, lse, work, g, scale, accumulate):
    """g (+)= scale * gradient of the loss of example i (without the regularizer); uses work from forward."""
    off_b1 = H * p
    off_w2 = off_b1 + H
    off_b2 = off_w2 + K * H
    # delta2 = softmax - onehot, stored over the logits; delta1 over the pre-activations
    for k in range(K):
        c = math.exp(work[2 * H + k] - lse)
        if k == label:
            c -= 1.0
        work[2 * H + k] = c
    for u in range(H):
        s = 0.0
        for k in range(K):
            s += x[off_w2 + k * H + u] * work[2 * H + k]
        if act == 0.0:
            deriv = 1.0 - work[H + u] * work[H + u]
        else:
            deriv = sigmoid(work[u])
        work[u] = s * deriv
    if accumulate:
        for u in range(H):
            c = scale * work[u]
            base = u * p
            for j in range(p):
                g[base + j] += c * A[i, j]
            g[off_b1 + u] += c
        for k in range(K):
            c = scale * work[2 * H + k]
            base = off_w2 + k * H
            for u in range(H):
                g[base + u] += c * work[H + u]
            g[off_b2 + k] += c
    else:
        for u in range(H):
            c = work[u]
            base = u * p
            for j in range(p):
                g[base + j] = c * A[i, j] + lam * x[base + j]
            g[off_b1 + u] = c + lam * x[off_b1 + u]
        for k in range(K):
            c = work[2 * H + k]
            base = off_w2 + k * H
            for u in range(H):
                g[base + u] = c * work[H + u] + lam * x[base + u]
            g[off_b2 + k] = c + lam * x[off_b2 + k]


@njit(cache=True, fastmath=FAST, error_model="numpy")
def batch_grads(x, A, y, idx, params, out):
    lam = params[0]
    H = int(params[1])
    act = params[2]
    K = int(params[3])
    p = A.shape[1]
    work = np.empty(2 * H + K)
    reg = lam * half_sq_norm(x)
    total = 0.0
    for r in range(idx.shape[0]):
        i = idx[r]
        label = int(y[i])
        lse = forward(x, A, i, p, H, K, act, work)
        total += lse - work[2 * H + label] + reg
        backward(x, A, i, label, p, H, K, act, lam, lse, work, out[r], 1.0, False)
    return total


@njit(cache=True, fastmath=FAST, error_model="numpy")
def full_grad(x, A, y, idx, params, out):
    lam = params[0]
    H = int(params[1])
    act = params[2]
    K = int(params[3])
    p = A.shape[1]
    n = idx.shape[0]
    work = np.empty(2 * H + K)
    for j in range(x.shape[0]):
        out[j] = 0.0
    total = 0.0
    for r in range(n):
        i = idx[r]
        label = int(y[i])
        lse = forward(x, A, i, p, H, K, act, work)
        total += lse - work[2 * H + label]
        backward(x, A, i, label, p, H, K, act, lam, lse, work, out, 1.0, True)
    for j in range(x.shape[0]):
        out[j] = out[j] / n + lam * x[j]
    return total / n + lam * half_sq_norm(x)


@njit(cache=True, fastmath=FAST, error_model="numpy")
def full_loss(x, A, y, idx, params):
    H = int(params[1])
    act = params[2]
    K = int(params[3])
    p = A.shape[1]
    n = idx.shape[0]
    work = np.empty(2 * H + K)
    total = 0.0
    for r in range(n):
        i = idx[r]
        lse = forward(x, A, i, p, H, K, act, work)
        total += lse - work[2 * H + int(y[i])]
    return total / n + params[0] * half_sq_norm(x)


@njit(cache=True, fastmath=FAST, error_model="numpy")
def accuracy(x, A, y, idx, params):
    H = int(params[1])
    act = params[2]
    K = int(params[3])
    p = A.shape[1]
    n = idx.shape[0]
    work = np.empty(2 * H + K)
    hits = 0
    for r in range(n):
        i = idx[r]
        forward(x, A, i, p, H, K, act, work)
        best = 0
        for k in range(1, K):
            if work[2 * H + k] > work[2 * H + best]:
                best = k
        if best == int(y[i]):
            hits += 1
    return hits / n


class MLP(Problem):
    name = "mlp"
    description = "one-hidden-layer MLP classifier (tanh or softplus), softmax cross-entropy + lam/2 ||x||^2 (nonconvex)"
    convex = False
    label_kind = "multiclass"
    defaults = {"lam": 1e-4, "width": 32, "activation": "tanh", "init_scale": 1.0}

    batch_grads = staticmethod(batch_grads)
    full_grad = staticmethod(full_grad)
    full_loss = staticmethod(full_loss)
    accuracy = staticmethod(accuracy)

    def validate_options(self, options):
        options = super().validate_options(options)
        options["width"] = option_int(self.name, "width", options["width"], 1)
        options["activation"] = option_choice(self.name, "activation", options["activation"], ACTIVATIONS)
        options["init_scale"] = option_float(self.name, "init_scale", options["init_scale"])
        if self.classes < 2:
            raise ValueError(f"{self.name}: needs classes >= 2 (labels 0..K-1), got classes={self.classes}")
        return options

    def parameter_dim(self):
        H, p, K = self.options["width"], self.features, self.classes
        return H * p + H + K * H + K

    def kernel_params(self):
        o = self.options
        return np.array([o["lam"], o["width"], ACTIVATIONS.index(o["activation"]), self.classes])

    def initial_point(self, rng):
        """W1 ~ N(0, s^2/p), W2 ~ N(0, s^2/H) (s = init_scale), biases 0."""
        H, p, K, s = self.options["width"], self.features, self.classes, self.options["init_scale"]
        x = np.zeros(self.dim)
        x[: H * p] = rng.normal(0.0, s / math.sqrt(p), H * p)
        off = H * p + H
        x[off: off + K * H] = rng.normal(0.0, s / math.sqrt(H), K * H)
        return x
