"""The step loops of a problem (engine.problem_loop) are cached on disk per problem kernel: a second
process loads them instead of compiling, and a change to the kernel's source recompiles them."""

import os
import subprocess
import sys
import textwrap

from numba import njit

from ordersim import engine, metrics, numba_cache
from ordersim.problems import make_problem

# A user's problem file (loaded by path): least squares with its loss and gradients times SCALE.
PROBLEM = textwrap.dedent("""
    from numba import njit

    from ordersim.problems.base import Problem
    from ordersim.problems.least_squares import accuracy, full_grad, full_loss

    SCALE = {scale}


    @njit(cache=True)
    def batch_grads(x, A, y, idx, params, out):
        loss = 0.0
        for r in range(idx.shape[0]):
            residual = -y[idx[r]]
            for j in range(x.shape[0]):
                residual += A[idx[r], j] * x[j]
            loss += SCALE * 0.5 * residual * residual
            for j in range(x.shape[0]):
                out[r, j] = SCALE * residual * A[idx[r], j]
        return loss


    class Scaled(Problem):
        name = "scaled-least-squares"
        batch_grads = staticmethod(batch_grads)
        full_loss, full_grad, accuracy = map(staticmethod, (full_loss, full_grad, accuracy))
""")

# One serial epoch (engine.epoch_loop) and one herding pass (metrics.step_sums_and_grad_error) of that
# problem; prints their results and how many of the two loops came from Numba's cache.
RUN = textwrap.dedent("""
    import sys
    import numpy as np
    from ordersim import engine, metrics
    from ordersim.problems import make_problem

    m, n, d, b = 2, 6, 3, 2
    problem = make_problem(sys.argv[1], d)
    kernel = problem.batch_grads
    engine.compile_for_steps(kernel)
    rng = np.random.default_rng(0)
    A, y = np.ascontiguousarray(rng.normal(size=(m * n, d))), rng.normal(size=m * n)
    order = np.stack([rng.permutation(n) for _ in range(m)]).astype(np.int64)
    x, idx = np.zeros(d), np.empty(b, dtype=np.int64)
    loop = engine.epoch_loop(kernel)
    loop(engine.Model(x, np.zeros(d)), engine.Data(A, y, problem.params, order, n, b, idx),
         engine.UpdateRule(0.1, 0.0, 0.0, np.empty((1, m, d)), np.zeros((1, 1, 1)), False, 0, np.empty(d)),
         engine.first_class(engine.no_observer),
         engine.Observer(engine.NO_GRADIENTS, np.zeros(1, dtype=np.int64), np.empty((1, 1, 1)), np.empty((b, d)),
                         engine.no_projection()),
         None, engine.Recording(0, np.empty(0), np.zeros(3)))
    sums = np.zeros((n // b, d))
    metrics.step_sums_and_grad_error(kernel, x, A, y, problem.params, order, 1, n, 0, n // b, b, n, idx,
                                     np.empty((b, d)), sums, np.zeros(d), np.zeros(d), np.zeros(m))
    herding = engine.problem_loop(metrics.herding_steps, kernel)
    hits = sum(sum(f.stats.cache_hits.values()) for f in (loop, herding))
    print(repr(float(x.sum())), repr(float(sums.sum())), hits)
""")


def run(tmp_path):
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "cache"))
    out = subprocess.run([sys.executable, "-c", RUN, str(tmp_path / "scaled.py")], env=env,
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    assert "Cannot cache" not in out.stderr, out.stderr
    x_sum, sums_sum, hits = out.stdout.split()
    return float(x_sum), float(sums_sum), int(hits)


def test_a_user_problems_loops_load_from_the_cache_until_its_kernel_changes(tmp_path):
    problem = tmp_path / "scaled.py"
    problem.write_text(PROBLEM.format(scale=1.0))
    first = run(tmp_path)
    assert first[2] == 0, "a fresh cache directory: both loops compiled"
    assert run(tmp_path) == (*first[:2], 2), "the second process loads both loops from the cache"
    problem.write_text(PROBLEM.format(scale=3.0))
    changed = run(tmp_path)
    assert changed[2] == 0, "the kernel's file changed: both loops compiled again"
    assert changed[:2] != first[:2], "and they call the new kernel, not the cached machine code"


def test_only_kernels_their_name_identifies_get_cached_loops():
    """Two problems' kernels get different digests; a closure (one name, many kernels) gets none,
    and its loops run uncached."""
    least_squares, logistic = (make_problem(name, 3).batch_grads for name in ("least-squares", "logistic"))
    assert None is not numba_cache.kernel_digest(least_squares) != numba_cache.kernel_digest(logistic)

    def make(scale):
        @njit
        def scaled(x, A, y, idx, params, out):
            return scale * least_squares(x, A, y, idx, params, out)
        return scaled

    assert numba_cache.kernel_digest(make(2.0)) is None
    loop = engine.problem_loop(metrics.herding_steps, make(2.0))
    assert getattr(loop, "py_func", loop).__qualname__.endswith("_uncached")
