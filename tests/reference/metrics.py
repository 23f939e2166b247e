"""Plain-NumPy references of the metrics (docs/algorithms.md, "Metrics"), written straight from
the definitions, and a replay of a traced run that recomputes what the simulator records per
measured epoch from the run's recorded orders (tests/test_metrics.py, tests/test_trace_metrics.py)."""

import numpy as np


def _norms(prefixes, norm):
    if norm == "inf":
        return np.abs(prefixes).max(axis=-1)
    return np.sqrt((prefixes**2).sum(axis=-1))


def ref_herding(z, order, norm="inf"):
    prefixes = np.cumsum(z[order] - z.mean(axis=0), axis=0)
    return float(_norms(prefixes, norm).max())


def ref_parallel_herding(z, orders, batch=1, norm="inf", interleaved=False):
    m, n, d = z.shape
    zbar = z.reshape(m * n, d).mean(axis=0)
    visited = z[np.arange(m)[:, None], orders] - zbar  # (m, n, d) in visit order
    if interleaved:
        pieces = []
        for start in range(0, n, batch):
            for i in range(m):
                pieces.append(visited[i, start:start + batch])
        prefixes = np.cumsum(np.concatenate(pieces), axis=0)
    else:
        bounds = list(range(batch, n, batch)) + [n]
        per_position = np.cumsum(visited.sum(axis=0), axis=0)
        prefixes = per_position[np.array(bounds) - 1]
    return float(_norms(prefixes, norm).max())


def ref_discrepancy(vectors, signs):
    return float(np.abs(np.cumsum(signs[:, None] * vectors, axis=0)).max())


def ref_avg_grad_error(z, order, mean=None):
    mean = z.mean(axis=0) if mean is None else mean
    running_means = np.cumsum(z[order], axis=0) / np.arange(1, len(order) + 1)[:, None]
    return float(((running_means - mean) ** 2).sum())


def ref_parallel_avg_grad_error(z, orders, means=None):
    return float(np.mean([ref_avg_grad_error(z[i], orders[i], None if means is None else means[i])
                          for i in range(len(z))]))


# Plain-NumPy losses and gradients of two bundled problems (docs/problems.md), per example.
def ls_loss(x, a, y, lam):
    return 0.5 * (a @ x - y) ** 2 + lam * 0.5 * (x @ x)


def ls_grad(x, a, y, lam):
    return (a @ x - y) * a + lam * x


def logistic_loss(x, a, y, lam):
    return np.logaddexp(0.0, -y * (a @ x)) + lam * 0.5 * (x @ x)


def logistic_grad(x, a, y, lam):
    return -y * a / (1.0 + np.exp(y * (a @ x))) + lam * x


def ref_shuffle_variance(loss, grad, x_star, A, y, lam, orders, gamma):
    """max_k (1/m) sum_w D_{f_{pi_w(k)}}(x*_{w,k}, x*) / gamma, straight from the definition."""
    m, n = orders.shape
    values = np.zeros((m, n))
    for w in range(m):
        prefix = np.zeros_like(x_star)
        for k in range(n):
            e = w * n + orders[w, k]
            g = grad(x_star, A[e], y[e], lam)
            point = x_star - gamma * prefix
            values[w, k] = (loss(point, A[e], y[e], lam) - loss(x_star, A[e], y[e], lam)
                            - g @ (point - x_star)) / gamma
            prefix += g
    return float(values.mean(axis=0).max())


PER_EXAMPLE = {"least-squares": (ls_loss, ls_grad), "logistic": (logistic_loss, logistic_grad)}


def example_grads(grad, x, A, y, lam):
    """(N, d): the per-example gradients at x (regularizer included) of every row of A."""
    return np.stack([grad(x, A[e], y[e], lam) for e in range(len(y))])


def step_size(schedule, lr, lr_decay, t):
    """The step of epoch t (0-based) of the constant and inv-epoch schedules (docs/simulator.md)."""
    if schedule == "constant":
        return lr
    if schedule == "inv-epoch":
        return lr / (1.0 + lr_decay * t)
    raise ValueError(f"the reference has no schedule {schedule!r} (constant, inv-epoch)")


def replay_sgd(grad, A, y, lam, orders, steps, b):
    """The models x_0 = 0, x_1, ..., x_E of plain SGD (no momentum, no weight decay) that visits
    orders[t - 1] in epoch t at step size steps[t - 1] (docs/simulator.md, "What one step does"):
    every step adds the m workers' next b gradients and divides by m times the examples of the step.
    A (m n, d): worker w's local example e is row w n + e; orders (E, m, n)."""
    epochs, m, n = orders.shape
    x = np.zeros(A.shape[1])
    models = [x.copy()]
    for t in range(epochs):
        for pos in range(0, n, b):
            rows = [w * n + e for w in range(m) for e in orders[t, w, pos:pos + b]]
            x = x - steps[t] * example_grads(grad, x, A[rows], y[rows], lam).sum(axis=0) / len(rows)
        models.append(x.copy())
    return models


def measured_epoch(problem, A, y, lam, x, x_star, order, b, gamma, L, mu):
    """What the simulator records of one measured epoch at model x, whose next epoch visits
    `order` (m, n) at per-example weight gamma: the objective, the herding of that order, its
    average gradient error and its shuffling variance at x* with the bounds."""
    loss, grad = PER_EXAMPLE[problem]
    m, n = order.shape
    z = example_grads(grad, x, A, y, lam).reshape(m, n, -1)
    sigma2_star = float((example_grads(grad, x_star, A, y, lam) ** 2).sum(axis=1).mean())
    return dict(
        train_loss=float(np.mean([loss(x, A[e], y[e], lam) for e in range(len(y))])),
        dist_to_opt=float(np.linalg.norm(x - x_star)),
        herding_inf=ref_parallel_herding(z, order, b, "inf"),
        herding_2=ref_parallel_herding(z, order, b, "2"),
        avg_grad_error=ref_parallel_avg_grad_error(z, order),
        shuffle_variance=ref_shuffle_variance(loss, grad, x_star, A, y, lam, order, gamma),
        shuffle_variance_upper=gamma * L * n * sigma2_star / 4,
        shuffle_variance_lower=gamma * mu * n * sigma2_star / 8,
    )
