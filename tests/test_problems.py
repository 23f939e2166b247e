"""Problems: every kernel against a NumPy reference written here and against finite differences."""

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from ordersim.problems import available_problems, make_problem, problem_class

ROOT = Path(__file__).resolve().parents[1]
N, P, K = 13, 5, 3


# -- NumPy references: per-example losses (N,) and gradients (N, dim), regularizer included ---------
def ref_least_squares(x, A, y, o):
    e = A @ x - y
    return 0.5 * e**2 + 0.5 * o["lam"] * x @ x, e[:, None] * A + o["lam"] * x


def ref_logistic(x, A, y, o, nonconvex=False):
    m = -y * (A @ x)
    loss = np.logaddexp(0.0, m)
    grad = (-y / (1.0 + np.exp(-m)))[:, None] * A
    lam = o["lam"]
    if nonconvex:
        return loss + lam * np.sum(x**2 / (1 + x**2)), grad + 2 * lam * x / (1 + x**2) ** 2
    return loss + 0.5 * lam * x @ x, grad + lam * x


def ref_softmax(x, A, y, o):
    W = x.reshape(-1, A.shape[1])
    Z = A @ W.T
    lse = np.log(np.exp(Z).sum(1))
    Pr = np.exp(Z - lse[:, None])
    onehot = np.eye(W.shape[0])[y.astype(int)]
    loss = lse - Z[np.arange(len(y)), y.astype(int)] + 0.5 * o["lam"] * x @ x
    grads = np.einsum("ik,ij->ikj", Pr - onehot, A).reshape(len(y), -1) + o["lam"] * x
    return loss, grads


def ref_mlp(x, A, y, o):
    H, p = o["width"], A.shape[1]
    Kc = (x.size - H * p - H) // (H + 1)
    W1 = x[: H * p].reshape(H, p)
    b1 = x[H * p: H * p + H]
    W2 = x[H * p + H: H * p + H + Kc * H].reshape(Kc, H)
    b2 = x[H * p + H + Kc * H:]
    Z1 = A @ W1.T + b1
    if o["activation"] == "tanh":
        Hd, dact = np.tanh(Z1), 1 - np.tanh(Z1) ** 2
    else:
        Hd, dact = np.logaddexp(0, Z1), 1 / (1 + np.exp(-Z1))
    Z2 = Hd @ W2.T + b2
    lse = np.log(np.exp(Z2).sum(1))
    lab = y.astype(int)
    loss = lse - Z2[np.arange(len(y)), lab] + 0.5 * o["lam"] * x @ x
    D2 = np.exp(Z2 - lse[:, None]) - np.eye(Kc)[lab]
    D1 = (D2 @ W2) * dact
    grads = np.hstack([np.einsum("iu,ij->iuj", D1, A).reshape(len(y), -1), D1,
                       np.einsum("ik,iu->iku", D2, Hd).reshape(len(y), -1), D2])
    return loss, grads + o["lam"] * x


def ref_robust(x, A, y, o):
    r = A @ x - y
    c = o["c"]
    u = (r / c) ** 2
    if o["loss"] == "cauchy":
        rho, psi = 0.5 * c * c * np.log1p(u), r / (1 + u)
    elif o["loss"] == "geman-mcclure":
        rho, psi = 0.5 * r * r / (1 + u), r / (1 + u) ** 2
    else:
        rho, psi = 0.5 * c * c * (1 - np.exp(-u)), r * np.exp(-u)
    return rho + 0.5 * o["lam"] * x @ x, psi[:, None] * A + o["lam"] * x


CASES = [  # (id, problem name, options, reference)
    ("least-squares", "least-squares", {"lam": 0.3}, ref_least_squares),
    ("logistic", "logistic", {"lam": 0.2}, ref_logistic),
    ("nonconvex-logistic", "nonconvex-logistic", {"lam": 0.5}, lambda *a: ref_logistic(*a, nonconvex=True)),
    ("softmax", "softmax", {"lam": 0.1}, ref_softmax),
    ("mlp-tanh", "mlp", {"lam": 0.05, "width": 4, "activation": "tanh"}, ref_mlp),
    ("mlp-softplus", "mlp", {"lam": 0.0, "width": 3, "activation": "softplus"}, ref_mlp),
    ("robust-gm", "robust-regression", {"lam": 0.1, "loss": "geman-mcclure", "c": 0.7}, ref_robust),
    ("robust-cauchy", "robust-regression", {"lam": 0.1, "loss": "cauchy", "c": 1.3}, ref_robust),
    ("robust-welsch", "robust-regression", {"lam": 0.0, "loss": "welsch", "c": 1.0}, ref_robust),
]


def make_case(name, options, seed=0):
    rng = np.random.default_rng(seed)
    A = np.ascontiguousarray(rng.normal(size=(N, P)))
    cls = problem_class(name)
    classes = {"binary": 2, "multiclass": K, "real": 0}[cls.label_kind]
    if cls.label_kind == "binary":
        y = rng.choice([-1.0, 1.0], size=N)
    elif cls.label_kind == "multiclass":
        y = rng.integers(0, K, size=N).astype(np.float64)
    else:
        y = 2.0 * rng.normal(size=N)
    problem = make_problem(name, P, classes, **options)
    x = problem.initial_point(rng) + 0.7 * rng.normal(size=problem.dim)
    return problem, A, y, x


def test_every_registered_problem_has_a_reference_case():
    """A new problem is one module in problems/ plus its NumPy reference in CASES above."""
    missing = set(available_problems()) - {name for _, name, _, _ in CASES}
    assert not missing, f"problems without a NumPy reference case in tests/test_problems.py: {missing}"


@pytest.mark.parametrize("name", sorted(available_problems()))
def test_contract_holds_for_every_registered_problem(name):
    """The generic contract, with default options: batch_grads is consistent with full_grad and
    full_loss, the shapes are right, and accuracy is a fraction or NaN."""
    problem, A, y, x = make_case(name, {})
    problem.check_data(A, y)
    idx = np.arange(N, dtype=np.int64)
    per_example = np.empty((N, problem.dim))
    total = problem.batch_grads(x, A, y, idx, problem.params, per_example)
    mean_grad = np.empty(problem.dim)
    mean_loss = problem.full_grad(x, A, y, idx, problem.params, mean_grad)
    np.testing.assert_allclose(mean_loss, total / N, rtol=1e-12)
    np.testing.assert_allclose(problem.full_loss(x, A, y, idx, problem.params), mean_loss, rtol=1e-12)
    np.testing.assert_allclose(mean_grad, per_example.mean(axis=0), rtol=1e-10, atol=1e-13)
    accuracy = problem.accuracy(x, A, y, idx, problem.params)
    assert np.isnan(accuracy) if problem.label_kind == "real" else 0.0 <= accuracy <= 1.0
    assert problem.initial_point(np.random.default_rng(0)).shape == (problem.dim,)


@pytest.mark.parametrize("name", sorted(available_problems()))
def test_every_registered_problem_passes_the_kernel_probe(name):
    """The probe a run makes before compiling (kernel_probe_error) never fires on a correct
    problem, and it runs every kernel through as Python, its helpers too, with the compiled
    kernel's values: nothing of it is swallowed as a Numba-only construct."""
    from ordersim.problems.base import KERNEL_ARGUMENTS, kernel_probe_error, probe_rows, python_function

    cls = problem_class(name)
    problem = make_problem(name, P, {"binary": 2, "multiclass": K, "real": 0}[cls.label_kind])
    A, y = probe_rows(problem)
    assert kernel_probe_error(problem, A, y) is None
    x = problem.initial_point(np.random.default_rng(0))
    for kernel, arguments in KERNEL_ARGUMENTS.items():
        if getattr(problem, kernel) is None:
            continue
        results = []
        for function in (getattr(problem, kernel), python_function(getattr(problem, kernel))):
            values = {"x": x, "A": A, "y": y, "idx": np.arange(2, dtype=np.int64), "params": problem.params,
                      "slopes": np.zeros(2),
                      "out": np.zeros((2, problem.dim) if kernel.startswith("batch_grads") else problem.dim)}
            returned = function(*(values[a] for a in arguments.split(", ")))
            results.append((np.asarray(returned, dtype=np.float64), values["out"], values["slopes"]))  # None: NaN
        for compiled, python in zip(*results):
            np.testing.assert_allclose(python, compiled, rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_kernels_match_numpy_reference(case):
    _, name, options, ref = case
    problem, A, y, x = make_case(name, options)
    problem.check_data(A, y)
    idx = np.array([3, 0, 7, 7, 12], dtype=np.int64)
    out = np.full((idx.size, problem.dim), np.nan)
    total = problem.batch_grads(x, A, y, idx, problem.params, out)
    losses, grads = ref(x, A, y, problem.options)
    np.testing.assert_allclose(total, losses[idx].sum(), rtol=1e-12)
    np.testing.assert_allclose(out, grads[idx], rtol=1e-10, atol=1e-13)

    allidx = np.arange(N, dtype=np.int64)
    g = np.full(problem.dim, np.nan)
    f = problem.full_grad(x, A, y, allidx, problem.params, g)
    np.testing.assert_allclose(f, losses.mean(), rtol=1e-12)
    np.testing.assert_allclose(problem.full_loss(x, A, y, allidx, problem.params), losses.mean(), rtol=1e-12)
    np.testing.assert_allclose(g, grads.mean(axis=0), rtol=1e-10, atol=1e-13)


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_gradients_match_finite_differences(case):
    _, name, options, _ = case
    problem, A, y, x = make_case(name, options, seed=1)
    params = problem.params
    h = 1e-6
    for idx in (np.arange(N, dtype=np.int64), np.array([5], dtype=np.int64)):
        g = np.empty(problem.dim)
        problem.full_grad(x, A, y, idx, params, g)
        fd = np.empty(problem.dim)
        for j in range(problem.dim):
            e = np.zeros(problem.dim)
            e[j] = h
            fd[j] = (problem.full_loss(x + e, A, y, idx, params) - problem.full_loss(x - e, A, y, idx, params)) / (2 * h)
        np.testing.assert_allclose(g, fd, rtol=1e-6, atol=1e-7)


def test_logistic_hessian_product_matches_numpy_reference():
    """The solver's one-pass kernel against A^T diag(s(1 - s)) A / N + lam I, s = sigmoid(A x)."""
    problem, A, y, x = make_case("logistic", {"lam": 0.01}, seed=2)
    v = np.random.default_rng(3).normal(size=problem.dim)
    s = 1.0 / (1.0 + np.exp(-(A @ x)))
    reference = A.T @ (s * (1.0 - s) * (A @ v)) / A.shape[0] + 0.01 * v
    np.testing.assert_allclose(problem.hessian_at(x, A, y)(v), reference, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(problem.hessp(x, v, A, y), reference, rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("case", [c for c in CASES if problem_class(c[1]).hessian_matrix is not None],
                         ids=lambda c: c[0])
def test_hessian_matrix_is_hessp_column_by_column(case):
    """The optional explicit Hessian (the solver's subsample Newton steps and preconditioner) holds
    hessp's values, and is exactly symmetric (Cholesky reads one triangle)."""
    _, name, options, _ = case
    problem, A, y, x = make_case(name, options, seed=4)
    H = problem.hessian_matrix(x, A, y)
    columns = np.column_stack([problem.hessp(x, e, A, y) for e in np.eye(problem.dim)])
    np.testing.assert_allclose(H, columns, rtol=1e-12, atol=1e-15)
    np.testing.assert_array_equal(H, H.T)


def test_nonconvex_problems_declare_no_hessian_matrix():
    for name in available_problems():
        if not problem_class(name).convex:
            assert problem_class(name).hessian_matrix is None, name


@pytest.mark.parametrize("name", ["logistic", "softmax", "mlp"])
def test_accuracy_matches_reference(name):
    problem, A, y, x = make_case(name, {} if name != "mlp" else {"width": 3})
    idx = np.arange(N, dtype=np.int64)
    acc = problem.accuracy(x, A, y, idx, problem.params)
    if name == "logistic":
        pred = np.where(A @ x >= 0, 1.0, -1.0)
    else:
        if name == "softmax":
            Z = A @ x.reshape(K, P).T
        else:
            H = 3
            Z1 = np.tanh(A @ x[: H * P].reshape(H, P).T + x[H * P: H * P + H])
            Z = Z1 @ x[H * P + H: H * P + H + K * H].reshape(K, H).T + x[-K:]
        pred = np.argmax(Z, axis=1)
    assert acc == pytest.approx(np.mean(pred == y))
    assert np.isnan(make_problem("least-squares", P).accuracy(x[:P], A, y, idx, np.array([0.0])))


def test_extreme_margins_stay_finite():
    problem = make_problem("logistic", 2, 2, lam=0.0)
    A = np.array([[1000.0, 0.0], [-1000.0, 0.0]])
    y = np.array([1.0, 1.0])
    out = np.empty((2, 2))
    total = problem.batch_grads(np.array([1.0, 0.0]), A, y, np.arange(2), problem.params, out)
    assert total == pytest.approx(1000.0) and np.all(np.isfinite(out))


def test_registry_lists_every_problem():
    names = available_problems()
    assert set(names) >= {"least-squares", "logistic", "softmax", "nonconvex-logistic", "mlp", "robust-regression"}
    assert all(isinstance(d, str) and d for d in names.values())
    for name in names:
        cls = problem_class(name)
        assert cls.label_kind in ("binary", "multiclass", "real")
    assert make_problem("mlp", 4, 3, width=5).dim == 5 * 4 + 5 + 3 * 5 + 3
    p = make_problem("softmax", 4, 3)
    assert p.dim == 12 and p.options == {"lam": 1e-3} and p.convex
    assert not make_problem("robust-regression", 4).convex


@pytest.mark.parametrize("args, kwargs, pattern", [
    (("nope", 3, 0), {}, r"unknown problem 'nope'; known problems: .*least-squares.*logistic"),
    (("logistic", 3, 2), {"lamda": 1}, r"logistic: unknown option\(s\) lamda; allowed: lam"),
    (("logistic", 3, 2), {"lam": -1.0}, r"logistic: option lam must be a finite number >= 0"),
    (("mlp", 3, 3), {"activation": "relu"}, r"mlp: option activation must be one of 'tanh', 'softplus'"),
    (("mlp", 3, 3), {"width": 0}, r"mlp: option width must be an integer >= 1"),
    (("robust-regression", 3, 0), {"loss": "huber"}, r"option loss must be one of"),
    (("robust-regression", 3, 0), {"c": 0.0}, r"option c must be a finite number > 0"),
    (("logistic", 3, 3), {}, r"logistic: binary problem, but the data has 3 classes"),
    (("softmax", 3, 1), {}, r"softmax: needs classes >= 2"),
    (("least-squares", 0, 0), {}, r"features must be an integer >= 1"),
    (("missing/problem.py", 3, 0), {}, r"problem file 'missing/problem.py' does not exist"),
])
def test_bad_problem_arguments(args, kwargs, pattern):
    with pytest.raises(ValueError, match=pattern) as info:
        make_problem(*args, **kwargs)
    assert "\n" not in str(info.value)


def test_labels_and_dimensions_are_checked():
    logistic = make_problem("logistic", 3, 2)
    with pytest.raises(ValueError, match=r"logistic: label 2.0 at row 1 is outside the allowed labels: -1 and \+1"):
        logistic.check_labels(np.array([1.0, 2.0, -1.0]))
    with pytest.raises(ValueError, match=r"softmax: label 3.0 at row 0 .* integers 0..2"):
        make_problem("softmax", 3, 3).check_labels(np.array([3.0]))
    with pytest.raises(ValueError, match=r"least-squares: label nan at row 1"):
        make_problem("least-squares", 3).check_labels(np.array([0.0, np.nan]))
    with pytest.raises(ValueError, match=r"dimension mismatch: the problem was made for 3 features, the data has shape \(4, 5\)"):
        logistic.check_data(np.zeros((4, 5)), np.ones(4))
    with pytest.raises(ValueError, match=r"dimension mismatch: 4 rows of features but labels of shape \(3,\)"):
        logistic.check_data(np.zeros((4, 3)), np.ones(3))


def test_mlp_initial_point_is_small_random_and_seeded():
    p = make_problem("mlp", 10, 3, width=8)
    a = p.initial_point(np.random.default_rng(5))
    b = p.initial_point(np.random.default_rng(5))
    np.testing.assert_array_equal(a, b)
    assert a.shape == (p.dim,) and np.any(a != 0) and np.abs(a).max() < 3
    assert not np.any(make_problem("logistic", 4, 2).initial_point(np.random.default_rng(0)))


def test_documented_worked_example_loads_by_path(tmp_path):
    text = (ROOT / "docs" / "problems.md").read_text()
    blocks = re.findall(r"```python\n(# my_problem.py\n.*?)```", text, flags=re.S)
    assert len(blocks) == 1
    path = tmp_path / "my_problem.py"
    path.write_text(blocks[0])
    problem = make_problem(str(path), P, 0, delta=0.5)
    assert problem.name == "pseudo-huber" and problem.dim == P
    rng = np.random.default_rng(2)
    A, y, x = rng.normal(size=(N, P)), rng.normal(size=N), rng.normal(size=P)
    idx = np.arange(N, dtype=np.int64)
    e = A @ x - y
    root = np.sqrt(1 + (e / 0.5) ** 2)
    g = np.empty(P)
    f = problem.full_grad(x, A, y, idx, problem.params, g)
    assert f == pytest.approx(np.mean(0.25 * (root - 1)) + 0.5e-3 * x @ x, rel=1e-12)
    np.testing.assert_allclose(g, (e / root) @ A / N + 1e-3 * x, rtol=1e-10)
    with pytest.raises(ValueError, match="unknown option"):
        make_problem(str(path), P, 0, width=3)
    bad = tmp_path / "empty_problem.py"
    bad.write_text("x = 1\n")
    with pytest.raises(ValueError, match=r"must define exactly one subclass of ordersim.problems.base.Problem"):
        make_problem(str(bad), P, 0)


# A plug-in problem file with one kernel mistake each: refused when its class is defined, in one
# line naming the kernel, not by Numba's typing traceback once the data are prepared.
KERNEL_MISTAKES = [
    ("batch_grads = staticmethod(njit(lambda x, A, y, idx, out: 0.0))",
     r"kernel batch_grads\(x, A, y, idx, out\) does not take the contract's arguments \(x, A, y, idx, params, out\)"),
    ("accuracy = None", r"defines no kernel accuracy\(x, A, y, idx, params\)"),
    ("regularizer_gradient = staticmethod(njit(lambda x, out: None))",
     r"kernel regularizer_gradient\(x, out\) does not take the contract's arguments \(x, params, out\)"),
    ("full_loss = staticmethod(lambda x, A, y, idx, params: 0.0)", r"kernel full_loss is not Numba-jitted \(function\)"),
]


@pytest.mark.parametrize("line, message", KERNEL_MISTAKES)
def test_a_problem_that_breaks_the_kernel_contract_is_one_line_before_any_data(line, message, tmp_path):
    plug_in = tmp_path / "broken.py"
    plug_in.write_text("from numba import njit\n\nfrom ordersim.problems.least_squares import LeastSquares\n\n\n"
                       f"class Broken(LeastSquares):\n    name = 'broken'\n    {line}\n")
    # with Numba on, as users run (under NUMBA_DISABLE_JIT=1 every kernel is a plain function)
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_DISABLE_JIT"}
    result = subprocess.run([sys.executable, "-m", "ordersim", "--problem", str(plug_in), "--epochs", "1",
                             "--out", str(tmp_path / "x.h5")], capture_output=True, text=True, timeout=120,
                            env=env)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "config field 'problem'" in lines[0] and re.search(message, lines[0]), result.stderr
    assert not (tmp_path / "x.h5").exists()


# A plug-in problem whose kernels read params[1], the option weight, through a helper, where the
# default kernel_params() gives only [lam]: compiled, they read whatever lies past the array's end.
READS_PARAMS_1 = textwrap.dedent("""
    import numpy as np
    from numba import njit

    from ordersim.problems.base import Problem


    @njit(cache=True, error_model="numpy")
    def weight(params):
        return params[1]


    @njit(cache=True, error_model="numpy")
    def batch_grads(x, A, y, idx, params, out):
        lam, w, total = params[0], weight(params), 0.0
        for r in range(idx.shape[0]):
            i = idx[r]
            e = -y[i]
            for j in range(x.shape[0]):
                e += A[i, j] * x[j]
            total += 0.5 * w * e * e + 0.5 * lam * (x @ x)
            for j in range(x.shape[0]):
                out[r, j] = w * e * A[i, j] + lam * x[j]
        return total


    @njit(cache=True, error_model="numpy")
    def full_grad(x, A, y, idx, params, out):
        grads = np.empty((idx.shape[0], x.shape[0]))
        total = batch_grads(x, A, y, idx, params, grads)
        for j in range(x.shape[0]):
            out[j] = grads[:, j].mean()
        return total / idx.shape[0]


    @njit(cache=True, error_model="numpy")
    def full_loss(x, A, y, idx, params):
        return full_grad(x, A, y, idx, params, np.empty(x.shape[0]))


    @njit(cache=True, error_model="numpy")
    def accuracy(x, A, y, idx, params):
        return np.nan


    class Weighted(Problem):
        name = "weighted-least-squares"
        description = "least squares, its loss weighted by the option weight"
        defaults = {"lam": 1e-3, "weight": 2.0}
        batch_grads = staticmethod(batch_grads)
        full_loss = staticmethod(full_loss)
        full_grad = staticmethod(full_grad)
        accuracy = staticmethod(accuracy)
""")
PASSES_THE_WEIGHT = ("\n    def kernel_params(self):\n"
                     "        return np.array([self.options['lam'], self.options['weight']])\n")


@pytest.mark.parametrize("jit", ["on", "off"])
def test_a_kernel_that_reads_past_kernel_params_is_one_line_before_anything_compiles(tmp_path, jit):
    """Probed once as Python on two data rows before the run compiles: the IndexError is one line
    naming the kernel and kernel_params(), exit 2 (with Numba on, the run went on with whatever
    lay past params' end); with kernel_params() passing the weight, the file runs. Without the
    JIT too (the kernels are plain functions, the probe calls them as they are)."""
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_DISABLE_JIT"}
    if jit == "off":
        env["NUMBA_DISABLE_JIT"] = "1"
    for name, source, status in (("reads_params_1", READS_PARAMS_1, 2),
                                 ("passes_the_weight", READS_PARAMS_1 + PASSES_THE_WEIGHT, 0)):
        plug_in = tmp_path / f"{name}.py"
        plug_in.write_text(source)
        out = tmp_path / f"{name}.h5"
        result = subprocess.run([sys.executable, "-m", "ordersim", "--problem", str(plug_in), "--data",
                                 "synthetic:regression?n=40&d=3", "--orderers", "rr", "--epochs", "1", "--quiet",
                                 "--cache-dir", str(tmp_path / "cache"), "--out", str(out)],
                                capture_output=True, text=True, timeout=300, env=env)
        assert result.returncode == status, result.stderr
        if status == 0:
            assert out.exists(), result.stdout
            continue
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("ordersim: error: config field 'problem': "
                                                       "weighted-least-squares's kernel batch_grads raised "
                                                       "IndexError"), result.stderr
        assert "kernel_params()" in lines[0] and "Traceback" not in result.stderr, result.stderr
        assert not out.exists()


def test_the_probe_runs_the_helpers_a_kernel_calls_as_python_and_compiles_nothing(tmp_path):
    """The helper a kernel calls by its name in its module runs as Python in the probe: its
    IndexError is the kernel's. Called from Python, a dispatcher would compile itself (seconds),
    with no bounds checks."""
    from ordersim.problems.base import kernel_probe_error, probe_rows

    plug_in = tmp_path / "reads_params_1.py"
    plug_in.write_text(READS_PARAMS_1)
    problem = make_problem(str(plug_in), P)
    error = kernel_probe_error(problem, *probe_rows(problem))
    assert re.fullmatch(r"weighted-least-squares's kernel batch_grads raised IndexError, run once as plain "
                        r"Python on 2 rows \(index 1 is out of bounds for axis 0 with size 1\): .*; the arrays "
                        r"it got: x \(5,\), A \(2, 5\), y \(2,\), idx \(2,\), params \(1,\), out \(2, 5\); params "
                        r"holds the 1 value\(s\) of kernel_params\(\): .*", error), error
    module = sys.modules[type(problem).__module__]
    compiled = [name for name in ("weight", "batch_grads", "full_grad", "full_loss", "accuracy")
                if getattr(getattr(module, name), "signatures", [])]
    assert compiled == []


# A plug-in problem whose hook returns what its contract does not allow: found while the constants
# are computed, and one line (it was the ValueError's traceback, exit 1).
HOOK_MISTAKES = [
    ("def smoothness(self, rows):\n        return super().smoothness(rows)[:2]",
     r"smoothness\(rows\) must return \(L, L_max, mu\), three numbers"),
    ("def hessp(self, x, v, A, y):\n        return super().hessp(x, v, A, y)[:-1]\n\n"
     "    def solve_exact(self, rows):\n        return None",
     r"hessp\(x, v, A, y\) must return an array of v's shape \(4,\) \(the parameters\), got shape \(3,\)"),
]


@pytest.mark.parametrize("hook, message", HOOK_MISTAKES)
def test_a_problem_hook_that_breaks_its_contract_stops_the_run_in_one_line(hook, message, tmp_path):
    plug_in = tmp_path / "broken.py"
    plug_in.write_text("from ordersim.problems.least_squares import LeastSquares\n\n\n"
                       f"class Broken(LeastSquares):\n    name = 'broken'\n\n    {hook}\n")
    result = subprocess.run([sys.executable, "-m", "ordersim", "--problem", str(plug_in), "--data",
                             "synthetic:regression?n=40&d=3", "--orderers", "rr", "--epochs", "1", "--quiet",
                             "--cache-dir", str(tmp_path / "cache"), "--out", str(tmp_path / "x.h5")],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and re.search(rf"^ordersim: error: config field 'problem': broken: {message}",
                                         lines[0]), result.stderr


# A plug-in problem whose attributes break the contract: one line when its file loads (a bad
# label_kind was an error of the config's data field, a convex problem without hessp a bare
# NotImplementedError from the solver for x* once the data were read).
ATTRIBUTE_MISTAKES = [
    ("label_kind = 'regression'", r"label_kind must be one of binary, multiclass, real, got 'regression'"),
    ("convex = 'yes'", r"convex must be True or False, got 'yes'"),
    ("defaults = ({'lam': 1e-3},)", r"defaults must be a dict of every option and its default, got tuple"),
    ("hessp = Problem.hessp", r"is convex but defines no hessp\(x, v, A, y\), which the solver for x\* needs"),
]


@pytest.mark.parametrize("line, message", ATTRIBUTE_MISTAKES)
def test_a_problem_whose_attributes_break_the_contract_is_one_line_when_its_file_loads(line, message, tmp_path):
    from ordersim.config import Config, ConfigError, check_fields

    plug_in = tmp_path / "broken.py"
    plug_in.write_text("from ordersim.problems.base import Problem\n"
                       "from ordersim.problems.least_squares import LeastSquares\n\n\n"
                       f"class Broken(LeastSquares):\n    name = 'broken'\n    {line}\n")
    with pytest.raises(ConfigError, match=r"^config field 'problem': problem file .* failed to import: "
                                          rf"TypeError: problem 'broken' {message}") as info:
        check_fields(Config(problem=str(plug_in)), 1)
    assert "\n" not in str(info.value)


def test_validate_options_that_returns_no_dict_is_named():
    """It failed later, as a TypeError in kernel_params or wherever the options were read."""
    from ordersim.problems.least_squares import LeastSquares

    class Forgetful(LeastSquares):
        name = "forgetful"

        def validate_options(self, options):
            super().validate_options(options)  # the options not returned

    with pytest.raises(ValueError, match=r"^forgetful: validate_options must return the options dict, got NoneType$"):
        Forgetful(3)


def test_without_problem_options_a_run_takes_the_problem_s_own_defaults(tmp_path):
    """No problem_options given: the problem's own ``defaults`` apply and are recorded as the run's
    options (they were overridden by lam = 0.01, and a problem without lam was refused). The
    default experiment keeps logistic's lam = 0.01; options given are kept as given."""
    from ordersim.config import Config, check_fields

    for name, defaults in (("small-lam", {"lam": 1e-4}), ("no-lam", {"ridge": 0.5})):
        plug_in = tmp_path / f"{name.replace('-', '_')}.py"
        plug_in.write_text("from ordersim.problems.least_squares import LeastSquares\n\n\n"
                           f"class Mine(LeastSquares):\n    name = {name!r}\n    defaults = {defaults!r}\n")
        config = check_fields(Config(problem=str(plug_in)), 1)
        assert config.problem_options == defaults
        assert make_problem(config.problem, P, **config.problem_options).options == defaults
    assert check_fields(Config(), 1).problem_options == {"lam": 0.01}
    assert check_fields(Config(problem="mlp"), 1).problem_options == problem_class("mlp").defaults
    given = check_fields(Config(problem="mlp", problem_options={"width": 4}), 1)
    assert given.problem_options == {"width": 4}


def test_kernels_run_without_jit():
    """NUMBA_DISABLE_JIT=1 turns every kernel into plain Python: it must still be correct."""
    code = (
        "import numpy as np\n"
        "from ordersim.problems import make_problem\n"
        "import ordersim.problems.logistic as L\n"
        "assert not hasattr(L.batch_grads, 'py_func'), 'jit is on'\n"
        "rng = np.random.default_rng(0)\n"
        "A = rng.normal(size=(6, 3)); y = rng.choice([-1.0, 1.0], size=6); x = rng.normal(size=3)\n"
        "ok = True\n"
        "for name, yy, cl in (('logistic', y, 2), ('mlp', (y > 0).astype(float), 2), ('robust-regression', y, 0)):\n"
        "    p = make_problem(name, 3, cl)\n"
        "    xx = rng.normal(size=p.dim)\n"
        "    out = np.empty((6, p.dim)); p.batch_grads(xx, A, yy, np.arange(6), p.params, out)\n"
        "    g = np.empty(p.dim); p.full_grad(xx, A, yy, np.arange(6), p.params, g)\n"
        "    ok &= np.allclose(out.mean(0), g, rtol=1e-12, atol=1e-14)\n"
        "p = make_problem('logistic', 3, 2, lam=1e-3)\n"
        "out = np.empty((6, 3)); p.batch_grads(x, A, y, np.arange(6), p.params, out)\n"
        "ref = (-y / (1 + np.exp(y * (A @ x))))[:, None] * A + 1e-3 * x\n"
        "ok &= np.allclose(out, ref, rtol=1e-12)\n"
        "s = 1 / (1 + np.exp(-(A @ x))); v = rng.normal(size=3)\n"
        "ok &= np.allclose(p.hessp(x, v, A, y), A.T @ (s * (1 - s) * (A @ v)) / 6 + 1e-3 * v, rtol=1e-12)\n"
        "print('OK' if ok else 'MISMATCH')\n"
    )
    env = dict(os.environ, NUMBA_DISABLE_JIT="1")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "OK"


def test_problem_file_runs_in_fresh_processes_and_an_edit_is_seen(tmp_path):
    """A problem loaded by path, run three times in fresh processes (Numba's cache and the
    constants cache warm from the second on), the third after an edit that doubles the loss (same
    file size): every run works, the second reuses the first's constants, the third has new
    constants and new machine code."""
    text = (ROOT / "docs" / "problems.md").read_text()
    source = re.findall(r"```python\n(# my_problem.py\n.*?)```", text, flags=re.S)[0]
    scaled = ("total += delta * delta * (root - 1.0) + reg", "out[r, j] = e / root * A[i, j] + lam * x[j]")
    for line in scaled:
        assert line in source
        source = source.replace(line, line.replace("= ", "= 1.0 * ", 1).replace("+= ", "+= 1.0 * ", 1))
    path = tmp_path / "my_problem.py"
    path.write_text(source)
    env = dict(os.environ, ORDERSIM_CACHE=str(tmp_path / "cache"), PYTHONPATH=str(ROOT))

    def run(name):
        out = tmp_path / f"{name}.h5"
        result = subprocess.run([sys.executable, "-m", "ordersim", "--problem", str(path), "--data",
                                 "synthetic:regression?n=80&d=3", "--epochs", "1", "--orderers", "rr",
                                 "--seeds", "0", "--quiet", "--out", str(out)],
                                capture_output=True, text=True, env=env, cwd=ROOT, timeout=600)
        assert result.returncode == 0, result.stderr
        import h5py

        with h5py.File(out, "r") as f:
            run = f["runs/rr/seed_0"]
            return float(run.attrs["f_star"]), float(run["train_loss"][0])

    first = run("first")
    assert run("second") == first
    assert len(list((tmp_path / "cache").glob("constants-*.npz"))) == 1
    edited = path.read_text().replace("1.0 * e", "2.0 * e").replace("1.0 * delta", "2.0 * delta")
    assert len(edited) == len(source) and edited != source
    path.write_text(edited)
    f_star, loss0 = run("edited")
    assert loss0 == pytest.approx(2 * first[1], rel=1e-12)  # x0 = 0: no regularizer, loss doubled
    assert f_star != pytest.approx(first[0], rel=1e-6)
    assert len(list((tmp_path / "cache").glob("constants-*.npz"))) == 2
