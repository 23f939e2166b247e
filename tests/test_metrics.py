"""The jitted metrics against plain-NumPy references written straight from the definitions."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from ordersim.metrics import balancing_discrepancy, herding, parallel_herding

RTOL = 1e-12
ATOL = 1e-12


# -- references (plain NumPy, definitions of docs/algorithms.md "Metrics") -------------------------
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
}
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
    }
    for key, value in expected.items():
        np.testing.assert_allclose(got[key], value, rtol=RTOL, atol=ATOL, err_msg=key)
    assert "permutation" in got["error"]
