"""The jitted metrics against plain-NumPy references written straight from the definitions."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from ordersim import metrics
from ordersim.metrics import (avg_grad_error, balancing_discrepancy, herding, parallel_avg_grad_error,
                              parallel_herding, shuffle_variance)
from reference.metrics import (logistic_grad, logistic_loss, ls_grad, ls_loss, ref_avg_grad_error,
                               ref_discrepancy, ref_herding, ref_parallel_avg_grad_error, ref_parallel_herding,
                               ref_shuffle_variance)

RTOL = 1e-12
ATOL = 1e-12

SHAPES_2D = [(1, 1), (2, 3), (7, 1), (50, 16), (257, 5)]
SHAPES_3D = [(1, 1, 1), (1, 9, 4), (3, 10, 2), (4, 33, 7), (8, 64, 16)]


def _perms(rng, m, n):
    return np.stack([rng.permutation(n) for _ in range(m)])


# -- herding -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("norm", ["inf", "2"])
@pytest.mark.parametrize("shape", SHAPES_2D)
def test_herding_matches_reference(shape, norm):
    rng = np.random.default_rng(hash(shape) % 2**32)
    for _ in range(3):
        z = rng.standard_normal(shape) + rng.standard_normal(shape[1])  # non-zero mean
        order = rng.permutation(shape[0])
        np.testing.assert_allclose(herding(z, order, norm), ref_herding(z, order, norm), rtol=RTOL, atol=ATOL)


def test_herding_accepts_other_dtypes_and_lists():
    z = np.arange(12, dtype=np.int32).reshape(4, 3)
    order = np.array([3, 0, 2, 1], dtype=np.int16)
    expected = ref_herding(z.astype(float), order)
    assert herding(z, order) == pytest.approx(expected, rel=RTOL)
    assert herding(z.tolist(), order.tolist()) == pytest.approx(expected, rel=RTOL)
    assert herding(np.asfortranarray(z.astype(float)), order) == pytest.approx(expected, rel=RTOL)


def test_herding_of_sorted_line_is_known():
    # z = 0..n-1 on a line: identity order has prefix sums of (t - mean), max at the middle.
    n = 10
    z = np.arange(n, dtype=float)[:, None]
    expected = max(abs(sum(t - 4.5 for t in range(k + 1))) for k in range(n))
    assert herding(z, np.arange(n)) == pytest.approx(expected)
    assert herding(z, np.arange(n), "2") == pytest.approx(expected)


# -- parallel herding -----------------------------------------------------------------------------------
@pytest.mark.parametrize("interleaved", [False, True])
@pytest.mark.parametrize("norm", ["inf", "2"])
@pytest.mark.parametrize("shape", SHAPES_3D)
def test_parallel_herding_matches_reference(shape, norm, interleaved):
    rng = np.random.default_rng(sum(shape) * 7 + len(norm))
    m, n, d = shape
    for batch in sorted({1, 2, 3, max(1, n // 2), n} & set(range(1, n + 1))):
        z = rng.standard_normal(shape) + rng.standard_normal(d)
        orders = _perms(rng, m, n)
        got = parallel_herding(z, orders, batch=batch, norm=norm, interleaved=interleaved)
        expected = ref_parallel_herding(z, orders, batch, norm, interleaved)
        np.testing.assert_allclose(got, expected, rtol=RTOL, atol=ATOL, err_msg=f"batch={batch}")


def test_parallel_herding_one_worker_is_herding():
    rng = np.random.default_rng(3)
    z = rng.standard_normal((1, 40, 6))
    order = rng.permutation(40)
    for norm in ("inf", "2"):
        expected = herding(z[0], order, norm)
        for interleaved in (False, True):
            got = parallel_herding(z, order[None], 1, norm, interleaved)
            np.testing.assert_allclose(got, expected, rtol=RTOL, atol=ATOL)


def test_parallel_herding_short_last_step_counts():
    # n = 3, b = 2: boundaries after positions 2 and 3. One worker, d = 1, mean 0.
    z = np.array([[[1.0], [1.0], [-2.0]]])
    assert parallel_herding(z, [[0, 1, 2]], batch=2) == pytest.approx(2.0)
    # With b = 3 the only boundary is the full (zero) sum.
    assert parallel_herding(z, [[0, 1, 2]], batch=3) == pytest.approx(0.0, abs=1e-15)
    # Interleaved sees every prefix regardless of b.
    assert parallel_herding(z, [[0, 1, 2]], batch=3, interleaved=True) == pytest.approx(2.0)


def test_parallel_herding_interleaving_is_step_major_worker_minor():
    # Two workers, b = 2, d = 1, global mean 0. Step 0: worker 0's (+1, +1), then worker 1's (-1, -1).
    z = np.array([[[1.0], [1.0], [0.0], [0.0]], [[-1.0], [-1.0], [0.0], [0.0]]])
    orders = [[0, 1, 2, 3], [0, 1, 2, 3]]
    assert parallel_herding(z, orders, batch=2, interleaved=True) == pytest.approx(2.0)
    assert parallel_herding(z, orders, batch=1, interleaved=True) == pytest.approx(1.0)
    assert parallel_herding(z, orders, batch=2) == pytest.approx(0.0)


# -- balancing discrepancy ------------------------------------------------------------------------------
@pytest.mark.parametrize("shape", SHAPES_2D)
def test_discrepancy_matches_reference(shape):
    rng = np.random.default_rng(shape[0] * 31 + shape[1])
    vectors = rng.standard_normal(shape)
    signs = rng.choice([-1, 1], size=shape[0])
    for s in (signs, signs.astype(float), signs.astype(np.int8)):
        np.testing.assert_allclose(balancing_discrepancy(vectors, s), ref_discrepancy(vectors, signs),
                                   rtol=RTOL, atol=ATOL)


def test_discrepancy_agrees_with_the_orderers_kernel():
    # grab's kernel records max_k ||s_k||_inf of its own walk; recompute it from its signs.
    from ordersim.orderers import make_orderer

    rng = np.random.default_rng(5)
    n, d = 30, 4
    o = make_orderer("grab", workers=1, examples=n, dim=d, first_order="identity")
    o.begin_epoch()
    g = rng.standard_normal((1, n, d))
    o.observe(g)
    discrepancy = o.balance_discrepancy
    o.end_epoch()
    # The +1 examples fill the next order from the left in arrival order: rebuild the signs.
    order = o.order[0]
    s = np.zeros(d)
    signs = np.empty(n)
    for t in range(n):
        signs[t] = 1.0 if s @ g[0, t] <= 0 else -1.0
        s += signs[t] * g[0, t]
    plus = signs > 0
    np.testing.assert_array_equal(order[: plus.sum()], np.flatnonzero(plus))
    assert balancing_discrepancy(g[0], signs) == pytest.approx(discrepancy, rel=RTOL)


# -- average gradient error ----------------------------------------------------------------------------
@pytest.mark.parametrize("shape", SHAPES_2D)
def test_avg_grad_error_matches_reference(shape):
    rng = np.random.default_rng(hash(shape) % 2**32)
    z = rng.standard_normal(shape)
    order = rng.permutation(shape[0])
    np.testing.assert_allclose(avg_grad_error(z, order), ref_avg_grad_error(z, order), rtol=RTOL, atol=ATOL)
    mean = rng.standard_normal(shape[1])
    np.testing.assert_allclose(avg_grad_error(z, order, mean), ref_avg_grad_error(z, order, mean),
                               rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("shape", SHAPES_3D)
def test_parallel_avg_grad_error_is_the_workers_mean(shape):
    rng = np.random.default_rng(sum(shape))
    z = rng.standard_normal(shape)
    orders = _perms(rng, shape[0], shape[1])
    np.testing.assert_allclose(parallel_avg_grad_error(z, orders), ref_parallel_avg_grad_error(z, orders),
                               rtol=RTOL, atol=ATOL)
    means = rng.standard_normal((shape[0], shape[2]))
    np.testing.assert_allclose(parallel_avg_grad_error(z, orders, means),
                               ref_parallel_avg_grad_error(z, orders, means), rtol=RTOL, atol=ATOL)


def test_avg_grad_error_of_a_known_order():
    # z = +1, -1, +1, -1 ... in that order: the running mean is 1/k for odd k and 0 for even k
    z = np.array([[1.0], [-1.0]] * 3)
    assert avg_grad_error(z, np.arange(6)) == pytest.approx(1 + 1 / 9 + 1 / 25, rel=RTOL)
    assert avg_grad_error(np.ones((5, 3)), np.arange(5)) == 0.0


def test_the_simulators_pass_gives_the_metric_and_herdings_step_sums():
    """step_sums_and_grad_error (what the simulator calls) over a few chunks of steps, with a
    short last step: the step sums are the per-example gradients added in visit order from 0.0
    (the step loops' sums) bit for bit, and the error is avg_grad_error's of those gradients."""
    from ordersim.problems import make_problem

    rng = np.random.default_rng(3)
    n, p, b = 11, 4, 3
    problem = make_problem("least-squares", p, lam=0.1)
    A, y = rng.standard_normal((2 * n, p)), rng.standard_normal(2 * n)
    x = rng.standard_normal(p)
    orders = _perms(rng, 2, n)
    grads = np.empty((2 * n, p))
    problem.batch_grads(x, A, y, np.arange(2 * n), problem.params, grads)
    means = grads.reshape(2, n, p).mean(axis=1)
    steps = -(-n // b)
    totals, idx, scratch = np.zeros(2), np.empty(b, dtype=np.int64), np.empty((b, p))
    for w in range(2):
        prefix, sums, expected = np.zeros(p), np.empty((steps, p)), np.empty((steps, p))
        for first in (0, 2, 3):  # chunks of 2, 1 and 1 steps
            count = {0: 2, 2: 1, 3: 1}[first]
            metrics.step_sums_and_grad_error(problem.batch_grads, x, A, y, problem.params, orders, w, w * n,
                                             first, count, b, n, idx, scratch, sums[first:first + count],
                                             means[w], prefix, totals)
        for s in range(steps):
            expected[s] = 0.0
            for e in orders[w, s * b:(s + 1) * b]:
                expected[s] += grads[w * n + e]
        assert sums.tobytes() == expected.tobytes()
    z = grads.reshape(2, n, p)
    np.testing.assert_allclose(totals.mean(), parallel_avg_grad_error(z, orders, means), rtol=1e-12)
    np.testing.assert_allclose(totals.mean(), ref_parallel_avg_grad_error(z, orders, means), rtol=1e-12)


# -- shuffling variance ----------------------------------------------------------------------------------
def _problem_data(name, m, n, p, seed):
    from ordersim.problems import make_problem

    rng = np.random.default_rng(seed)
    A = rng.standard_normal((m * n, p))
    y = rng.standard_normal(m * n) if name == "least_squares" else rng.choice([-1.0, 1.0], m * n)
    problem = make_problem(name.replace("_", "-"), p, lam=0.05)
    return problem, A, y, rng.standard_normal(p) * 0.3, _perms(rng, m, n)


@pytest.mark.parametrize("name, loss, grad", [("least_squares", ls_loss, ls_grad),
                                              ("logistic", logistic_loss, logistic_grad)])
@pytest.mark.parametrize("m, n", [(1, 1), (1, 17), (3, 8)])
def test_shuffle_variance_matches_reference(name, loss, grad, m, n):
    # any point serves as x*: the definition does not need the gradients to sum to zero there
    problem, A, y, x_star, orders = _problem_data(name, m, n, 5, 7 * m + n)
    gamma = 0.05
    got = shuffle_variance(problem, x_star, A, y, orders, gamma)
    expected = ref_shuffle_variance(loss, grad, x_star, A, y, 0.05, orders, gamma)
    np.testing.assert_allclose(got, expected, rtol=1e-9, atol=1e-12)


def test_shuffle_variance_of_a_quadratic_is_its_closed_form():
    """For least squares D_f(u, w) = ((a.(u - w))^2 + lam ||u - w||^2) / 2 exactly, so the value
    is max_k (gamma / 2m) sum_w ((a_e . P_{w,k})^2 + lam ||P_{w,k}||^2), P the prefix at x*."""
    problem, A, y, x_star, orders = _problem_data("least_squares", 2, 12, 4, 1)
    gamma = 0.3
    m, n = orders.shape
    values = np.zeros((m, n))
    for w in range(m):
        prefix = np.zeros(4)
        for k in range(n):
            e = w * n + orders[w, k]
            values[w, k] = gamma / 2 * ((A[e] @ prefix) ** 2 + 0.05 * prefix @ prefix)
            prefix += ls_grad(x_star, A[e], y[e], 0.05)
    np.testing.assert_allclose(shuffle_variance(problem, x_star, A, y, orders, gamma),
                               values.mean(axis=0).max(), rtol=1e-8)


def test_shuffle_variance_of_random_orders_lies_between_its_bounds():
    """Mishchenko, Khaled, Richtarik (2020), Prop. 2: gamma mu n sigma*^2 / 8 <= sigma^2_Shuffle <=
    gamma L n sigma*^2 / 4 at the true x*, estimated here over 400 random orders of one data set
    (400 workers holding copies of the same n examples: the mean over workers is the expectation)."""
    from ordersim.problems import make_problem

    rng = np.random.default_rng(2)
    n, p, copies, lam, gamma = 10, 3, 400, 0.5, 0.01
    a, b = rng.standard_normal((n, p)), rng.standard_normal(n)
    x_star = np.linalg.solve(a.T @ a / n + lam * np.eye(p), a.T @ b / n)
    problem = make_problem("least-squares", p, lam=lam)
    orders = _perms(rng, copies, n)
    value = shuffle_variance(problem, x_star, np.tile(a, (copies, 1)), np.tile(b, copies), orders, gamma)
    grads = (a @ x_star - b)[:, None] * a + lam * x_star
    sigma2 = (grads ** 2).sum(axis=1).mean()
    eig = np.linalg.eigvalsh(np.einsum("ij,ik->ijk", a, a) + lam * np.eye(p))
    L, mu = eig.max(), np.linalg.eigvalsh(a.T @ a / n + lam * np.eye(p)).min()
    assert gamma * mu * n * sigma2 / 8 <= value <= gamma * L * n * sigma2 / 4


# -- validation -------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "call, words",
    [
        (lambda: herding(np.zeros((3, 2)), [0, 1]), ["order", "(3,)", "(2,)"]),
        (lambda: herding(np.zeros((3, 2)), [0, 1, 1]), ["order", "permutation", "order[2] = 1"]),
        (lambda: herding(np.zeros((3, 2)), [0, 1, 3]), ["order", "permutation", "= 3"]),
        (lambda: herding(np.zeros((3, 2)), [0, 1, -1]), ["order", "permutation", "= -1"]),
        (lambda: herding(np.zeros((3, 2)), [0.0, 1.0, 2.0]), ["order", "integers", "float64"]),
        (lambda: herding(np.zeros(3), [0, 1, 2]), ["z", "(n, d)", "(3,)"]),
        (lambda: herding(np.zeros((0, 2)), []), ["z", ">= 1"]),
        (lambda: herding(np.array([["a"]]), [0]), ["z", "real numbers"]),
        (lambda: herding(np.zeros((3, 2)), [0, 1, 2], norm="1"), ["norm", "'inf'", "'2'", "'1'"]),
        (lambda: herding(np.zeros((3, 2)), [0, 1, 2], norm=2), ["norm", "'inf'", "2"]),
        (lambda: parallel_herding(np.zeros((2, 3)), [[0, 1, 2]]), ["z", "(m, n, d)"]),
        (lambda: parallel_herding(np.zeros((2, 3, 1)), [[0, 1, 2]]), ["orders", "(2, 3)", "(1, 3)"]),
        (lambda: parallel_herding(np.zeros((2, 3, 1)), [[0, 1, 2], [2, 2, 0]]), ["orders[1, 1] = 2", "permutation"]),
        (lambda: parallel_herding(np.zeros((1, 3, 1)), [[0, 1, 2]], batch=0), ["batch", "1..3", "0"]),
        (lambda: parallel_herding(np.zeros((1, 3, 1)), [[0, 1, 2]], batch=4), ["batch", "1..3", "4"]),
        (lambda: parallel_herding(np.zeros((1, 3, 1)), [[0, 1, 2]], batch=1.0), ["batch", "1.0"]),
        (lambda: parallel_herding(np.zeros((1, 3, 1)), [[0, 1, 2]], batch=True), ["batch", "True"]),
        (lambda: parallel_herding(np.zeros((1, 3, 1)), [[0, 1, 2]], norm="l2"), ["norm", "'l2'"]),
        (lambda: parallel_herding(np.zeros((1, 3, 1)), [[0, 1, 2]], interleaved="yes"), ["interleaved", "'yes'"]),
        (lambda: balancing_discrepancy(np.zeros((3, 2)), [1, -1]), ["signs", "(3,)", "(2,)"]),
        (lambda: balancing_discrepancy(np.zeros((3, 2)), [1, 0, -1]), ["signs", "+1 or -1", "signs[1] = 0"]),
        (lambda: balancing_discrepancy(np.zeros((3, 2)), [1, 0.5, -1]), ["signs", "signs[1] = 0.5"]),
        (lambda: balancing_discrepancy(np.zeros((2, 3, 2)), [1, 1]), ["vectors", "(T, d)"]),
    ],
)
def test_bad_arguments_raise_one_line_value_errors(call, words):
    with pytest.raises(ValueError) as info:
        call()
    message = str(info.value)
    assert "\n" not in message
    for word in words:
        assert word in message, (word, message)


# -- pure Python (NUMBA_DISABLE_JIT=1) -----------------------------------------------------------------
_SCRIPT = """
import json, sys
import numpy as np
import numba.core.config
from ordersim import metrics
assert numba.core.config.DISABLE_JIT and not hasattr(metrics._herding_kernel, "py_func")
rng = np.random.default_rng(11)
z = rng.standard_normal((3, 20, 4)); orders = np.stack([rng.permutation(20) for _ in range(3)])
v = rng.standard_normal((25, 3)); s = rng.choice([-1, 1], 25)
out = {
    "herding_inf": metrics.herding(z[0], orders[0]),
    "herding_2": metrics.herding(z[0], orders[0], "2"),
    "parallel": metrics.parallel_herding(z, orders, batch=3),
    "interleaved": metrics.parallel_herding(z, orders, batch=3, norm="2", interleaved=True),
    "discrepancy": metrics.balancing_discrepancy(v, s),
    "avg_grad_error": metrics.parallel_avg_grad_error(z, orders),
}
from ordersim.problems import make_problem
problem = make_problem("logistic", 4, lam=0.05)
A = rng.standard_normal((60, 4)); y = rng.choice([-1.0, 1.0], 60); x = rng.standard_normal(4) * 0.3
out["shuffle_variance"] = metrics.shuffle_variance(problem, x, A, y, orders, 0.05)
try:
    metrics.herding(z[0], orders[0][::-1] * 0)
except ValueError as error:
    out["error"] = str(error)
print(json.dumps(out))
"""


def test_metrics_run_without_numba_jit():
    env = dict(os.environ, NUMBA_DISABLE_JIT="1")
    result = subprocess.run([sys.executable, "-c", _SCRIPT], capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 0, result.stderr
    got = json.loads(result.stdout)
    rng = np.random.default_rng(11)
    z = rng.standard_normal((3, 20, 4))
    orders = np.stack([rng.permutation(20) for _ in range(3)])
    v = rng.standard_normal((25, 3))
    s = rng.choice([-1, 1], 25)
    expected = {
        "herding_inf": ref_herding(z[0], orders[0]),
        "herding_2": ref_herding(z[0], orders[0], "2"),
        "parallel": ref_parallel_herding(z, orders, 3),
        "interleaved": ref_parallel_herding(z, orders, 3, "2", True),
        "discrepancy": ref_discrepancy(v, s),
        "avg_grad_error": ref_parallel_avg_grad_error(z, orders),
    }
    A, y, x = rng.standard_normal((60, 4)), rng.choice([-1.0, 1.0], 60), rng.standard_normal(4) * 0.3
    np.testing.assert_allclose(got["shuffle_variance"], ref_shuffle_variance(
        logistic_loss, logistic_grad, x, A, y, 0.05, orders, 0.05), rtol=1e-9)
    for key, value in expected.items():
        np.testing.assert_allclose(got[key], value, rtol=RTOL, atol=ATOL, err_msg=key)
    assert "permutation" in got["error"]
