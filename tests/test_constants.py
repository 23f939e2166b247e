"""Theory constants: the solver against scikit-learn and planted solutions, the definitions of
sigma*^2 and zeta*^2, the smoothness bounds, and a cache that never breaks a run."""

import dataclasses
import warnings
from pathlib import Path

import numpy as np
import pytest

import ordersim.constants as constants
from ordersim.constants import problem_constants
from ordersim.data import load_dataset, partition
from ordersim.problems import make_problem

KEYS = {"x_star", "f_star", "L", "L_max", "mu", "sigma2_star", "zeta2_star"}


def test_logistic_f_star_matches_scikit_learn():
    from sklearn.linear_model import LogisticRegression

    data = load_dataset("sklearn:breast_cancer", label_kind="binary")  # standardized, intercept column
    lam = 1e-3
    problem = make_problem("logistic", data.features, data.classes, lam=lam)
    shards, dropped = partition(data.y, 1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        c = problem_constants(problem, data, shards, cache_dir=False)
    assert set(c) == KEYS and dropped == 0
    N = data.X.shape[0]
    clf = LogisticRegression(C=1 / (lam * N), fit_intercept=False, solver="newton-cg", tol=1e-12, max_iter=1000)
    clf.fit(data.X, data.y)
    f_sklearn = problem.full_loss(clf.coef_.ravel(), data.X, data.y, np.arange(N), problem.params)
    assert abs(f_sklearn - c["f_star"]) <= 1e-8 * abs(c["f_star"])
    g = np.empty(problem.dim)
    problem.full_grad(c["x_star"], data.X, data.y, np.arange(N), problem.params, g)
    g0 = np.empty(problem.dim)
    problem.full_grad(np.zeros(problem.dim), data.X, data.y, np.arange(N), problem.params, g0)
    assert np.linalg.norm(g) <= 1e-10 * np.linalg.norm(g0)
    assert c["mu"] == lam
    assert c["L"] == pytest.approx(np.linalg.norm(data.X, 2) ** 2 / (4 * N) + lam)
    assert c["L_max"] == pytest.approx(np.max(np.sum(data.X**2, axis=1)) / 4 + lam)
    assert c["zeta2_star"] < 1e-20  # one worker: F_1 = f


def test_planted_solution_recovery_least_squares():
    data = load_dataset("synthetic:regression?n=600&d=8&cond=50&noise=0", seed=2)
    problem = make_problem("least-squares", data.features, lam=1e-12)
    shards, _ = partition(data.y, 4, "shuffled")
    c = problem_constants(problem, data, shards, cache_dir=False)
    np.testing.assert_allclose(c["x_star"], data.info["x_planted"], atol=1e-8)
    assert c["f_star"] < 1e-10 and c["sigma2_star"] < 1e-10  # only the 1e-12 ridge term is left
    A = data.X[shards.ravel()]
    eig = np.linalg.eigvalsh(A.T @ A / A.shape[0])
    assert c["L"] == pytest.approx(eig[-1] + 1e-12) and c["mu"] == pytest.approx(eig[0] + 1e-12)
    noisy = load_dataset("synthetic:regression?n=4000&d=8&cond=10&noise=0.1", seed=2)
    c = problem_constants(make_problem("least-squares", noisy.features, lam=0.0), noisy, partition(noisy.y, 1)[0],
                          cache_dir=False)
    assert np.linalg.norm(c["x_star"] - noisy.info["x_planted"]) < 0.05
    assert c["f_star"] == pytest.approx(0.5 * 0.1**2, rel=0.1)


def test_sigma_and_zeta_follow_their_definitions():
    data = load_dataset("synthetic:classification?n=303&d=4&classes=3&sep=1", label_kind="multiclass", seed=1)
    problem = make_problem("softmax", data.features, data.classes, lam=1e-2)
    shards, dropped = partition(data.y, 4, "dirichlet", alpha=0.5, seed=1)
    assert dropped == 3
    c = problem_constants(problem, data, shards, cache_dir=False)
    x = c["x_star"]
    idx = shards.ravel()
    out = np.empty((idx.size, problem.dim))
    problem.batch_grads(x, data.X, data.y, idx, problem.params, out)
    assert c["sigma2_star"] == pytest.approx(np.mean(np.sum(out**2, axis=1)), rel=1e-12)
    means = out.reshape(4, -1, problem.dim).mean(axis=1)
    assert c["zeta2_star"] == pytest.approx(np.mean(np.sum(means**2, axis=1)), rel=1e-9)
    np.testing.assert_allclose(means.mean(axis=0), 0, atol=1e-12)  # x* of the kept examples
    # mu <= every Hessian eigenvalue at x* <= L
    H = np.column_stack([problem.hessp(x, e, data.X[idx], data.y[idx]) for e in np.eye(problem.dim)])
    eig = np.linalg.eigvalsh((H + H.T) / 2)
    assert c["mu"] <= eig[0] * (1 + 1e-9) and eig[-1] <= c["L"]


def test_zeta_grows_with_label_skew():
    data = load_dataset("synthetic:classification?n=800&d=6&classes=4&sep=1", label_kind="multiclass")
    problem = make_problem("softmax", data.features, data.classes, lam=1e-3)
    zeta = []
    for alpha in (100.0, 1.0, 0.1):
        values = [problem_constants(problem, data, partition(data.y, 8, "dirichlet", alpha=alpha, seed=s)[0],
                                    cache_dir=False)["zeta2_star"] for s in range(3)]
        zeta.append(np.mean(values))
    assert zeta[0] < zeta[1] < zeta[2]
    assert zeta[2] > 3 * zeta[0]


def test_nonconvex_problems_have_no_x_star():
    data = load_dataset("sklearn:iris", label_kind="multiclass")
    shards, _ = partition(data.y, 3)
    c = problem_constants(make_problem("mlp", data.features, data.classes, width=4), data, shards, cache_dir=False)
    assert set(c) == KEYS and c["x_star"] is None
    assert all(np.isnan(c[k]) for k in KEYS - {"x_star"})
    binary = load_dataset("sklearn:breast_cancer", label_kind="binary")
    c = problem_constants(make_problem("nonconvex-logistic", binary.features, 2, lam=0.1), binary,
                          partition(binary.y, 2)[0], cache_dir=False)
    assert c["x_star"] is None and np.isnan(c["f_star"]) and np.isnan(c["mu"])
    assert c["L"] == pytest.approx(np.linalg.norm(binary.X[:568], 2) ** 2 / (4 * 568) + 0.2)


def test_cache_roundtrip_env_and_failures(tmp_path, monkeypatch):
    data = load_dataset("synthetic:regression?n=40&d=3")
    problem = make_problem("least-squares", data.features)
    shards, _ = partition(data.y, 2)
    monkeypatch.setenv("ORDERSIM_CACHE", str(tmp_path / "env"))
    first = problem_constants(problem, data, shards)
    files = list((tmp_path / "env").glob("constants-least-squares-*.npz"))
    assert len(files) == 1

    def boom(*args):
        raise AssertionError("recomputed although cached")

    monkeypatch.setattr(constants, "compute_constants", boom)
    again = problem_constants(problem, data, shards)
    np.testing.assert_array_equal(again["x_star"], first["x_star"])
    assert {k: again[k] for k in KEYS - {"x_star"}} == {k: first[k] for k in KEYS - {"x_star"}}
    monkeypatch.undo()

    # a different partition or option is a different key
    other = problem_constants(make_problem("least-squares", data.features, lam=0.5), data, shards, cache_dir=tmp_path)
    assert other["f_star"] != first["f_star"]
    # a corrupt file warns and recomputes; an unusable directory warns and still returns
    files[0].write_bytes(b"not an npz")
    with pytest.warns(RuntimeWarning, match="unreadable constants cache"):
        c = problem_constants(problem, data, shards, cache_dir=tmp_path / "env")
    assert c["f_star"] == pytest.approx(first["f_star"], rel=1e-12)
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.warns(RuntimeWarning, match="could not write the constants cache"):
        c = problem_constants(problem, data, shards, cache_dir=blocker)
    assert c["f_star"] == pytest.approx(first["f_star"], rel=1e-12)


def test_bad_inputs():
    data = load_dataset("sklearn:iris", label_kind="multiclass")
    shards, _ = partition(data.y, 3)
    with pytest.raises(ValueError, match=r"logistic: label 0.0 at row 0 is outside the allowed labels"):
        problem_constants(make_problem("logistic", data.features, 2), data, shards, cache_dir=False)
    with pytest.raises(ValueError, match="dimension mismatch"):
        problem_constants(make_problem("softmax", 3, 3), data, shards, cache_dir=False)
    with pytest.raises(ValueError, match=r"shards hold example indices outside 0..149"):
        problem_constants(make_problem("softmax", data.features, 3), data, shards + 100, cache_dir=False)


def test_a_problem_hook_of_the_wrong_shape_is_named():
    """smoothness of two numbers and hessp of the wrong shape failed as an unpacking error and a
    broadcast deep in the worker gather, naming neither the problem nor the hook."""
    from ordersim.problems.least_squares import LeastSquares

    class TwoNumbers(LeastSquares):
        name = "two-numbers"

        def smoothness(self, rows):
            return super().smoothness(rows)[:2]

    class ShortProduct(LeastSquares):
        name = "short-product"

        def hessp(self, x, v, A, y):
            return super().hessp(x, v, A, y)[:-1]

        def solve_exact(self, rows):
            return None  # the solver's Newton-CG then calls hessp

    data = load_dataset("synthetic:regression?n=40&d=3")
    shards, _ = partition(data.y, 2)
    for cls, message in ((TwoNumbers, r"^two-numbers: smoothness\(rows\) must return \(L, L_max, mu\), three numbers"),
                         (ShortProduct, r"^short-product: hessp\(x, v, A, y\) must return an array of v's shape "
                                        r"\(4,\) \(the parameters\), got shape \(3,\)$")):
        with pytest.raises(ValueError, match=message):
            problem_constants(cls(data.features), data, shards, cache_dir=False)


def test_rows_of_avoids_copying_the_data_set_for_in_order_indices():
    A = np.arange(40.0).reshape(10, 4)
    for idx in (np.arange(10), np.arange(7), np.array([3, 1, 2]), np.array([0, 1, 3]), np.arange(0)):
        rows = constants.rows_of(A, idx)
        np.testing.assert_array_equal(rows, A[idx])
        in_order = idx.size == 0 or np.array_equal(idx, np.arange(idx.size))
        assert np.shares_memory(rows, A) == (in_order and idx.size > 0)


def test_constants_are_the_same_whether_rows_are_viewed_or_copied():
    """The view taken for a contiguous partition must give bitwise the constants of a copy."""
    data = load_dataset("synthetic:classification?n=403&d=5", label_kind="binary")
    problem = make_problem("logistic", features=data.features, classes=data.classes)
    shards, dropped = partition(data.y, workers=4)  # rows 0..399 in order: a view
    assert dropped == 3
    viewed = problem_constants(problem, data, shards, cache_dir=False)
    # the same rows, reached through a permutation of a copy: the copying path
    perm = np.arange(data.X.shape[0])[::-1].copy()
    reversed_data = dataclasses.replace(data, X=data.X[perm], y=data.y[perm])
    copied = problem_constants(problem, reversed_data, perm[shards], cache_dir=False)
    for key, value in viewed.items():
        np.testing.assert_array_equal(copied[key], value, err_msg=key)


def test_row_statistics_in_bands_and_without_a_gram_matrix(monkeypatch):
    """The Gram matrix gathered a band of rows at a time, and (many features) Lanczos on A^T A v
    products with no Gram matrix and no closed form: the same constants up to rounding."""
    data = load_dataset("synthetic:regression?n=400&d=9&cond=30", seed=4)
    problem = make_problem("least-squares", data.features, lam=1e-3)
    shards, _ = partition(data.y, 4, "shuffled")
    whole = problem_constants(problem, data, shards, cache_dir=False)
    A = data.X[shards.ravel()]
    eig = np.linalg.eigvalsh(A.T @ A / A.shape[0])
    assert whole["L"] == pytest.approx(eig[-1] + 1e-3, rel=1e-12)
    monkeypatch.setattr(constants, "GATHER_DOUBLES", 3 * 4 * data.features)  # bands of 3 rows
    banded = problem_constants(problem, data, shards, cache_dir=False)
    for key in ("L", "mu", "L_max", "f_star"):
        assert banded[key] == pytest.approx(whole[key], rel=1e-12), key
    monkeypatch.setattr(constants, "GRAM_LIMIT", 2)
    lanczos = problem_constants(problem, data, shards, cache_dir=False)
    assert lanczos["L"] == pytest.approx(whole["L"], rel=1e-10)
    assert lanczos["mu"] == pytest.approx(1e-3)  # no Gram matrix: the smallest eigenvalue is taken as 0
    np.testing.assert_allclose(lanczos["x_star"], whole["x_star"], rtol=1e-8, atol=1e-10)


REPO_DATA = Path(__file__).resolve().parent.parent / "data"


def reference_logistic_minimizer(A, y, lam):
    """x* by scipy's trust-exact on NumPy's f, gradient and explicit Hessian of the mean logistic
    loss: nothing of ordersim's solver or kernels."""
    from scipy.optimize import minimize as scipy_minimize
    from scipy.special import expit, log_expit

    N, d = A.shape

    def f(x):
        return -np.mean(log_expit(y * (A @ x))) + 0.5 * lam * x @ x

    def g(x):
        return A.T @ (-y * expit(-y * (A @ x))) / N + lam * x

    def h(x):
        s = expit(A @ x)
        return (A.T * (s * (1 - s))) @ A / N + lam * np.eye(d)

    res = scipy_minimize(f, np.zeros(d), jac=g, hess=h, method="trust-exact", options={"gtol": 1e-14, "maxiter": 500})
    return res.x, np.linalg.norm(g(res.x)) / np.linalg.norm(g(np.zeros(d)))


@pytest.mark.parametrize("spec, workers, lam", [
    (f"libsvm:{REPO_DATA / 'w8a.gz'}", 4, 2.96e-3),  # rr_w8a's lam; all rows are the subsample
    (f"libsvm:{REPO_DATA / 'mushrooms.gz'}", 3, 1e-4),
    ("synthetic:classification?n=40000&d=24&cond=100&sep=4", 8, 1e-5),  # a 1/16 subsample
])
def test_logistic_x_star_matches_an_independent_solver(spec, workers, lam):
    data = load_dataset(spec, label_kind="binary")
    problem = make_problem("logistic", data.features, data.classes, lam=lam)
    shards, _ = partition(data.y, workers, "shuffled", seed=3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the solver reaches its target: no RuntimeWarning
        c = problem_constants(problem, data, shards, cache_dir=False)
    A, y = data.X[shards.ravel()], data.y[shards.ravel()]
    x_ref, rel_ref = reference_logistic_minimizer(A, y, lam)
    assert rel_ref < 1e-11
    np.testing.assert_allclose(c["x_star"], x_ref, rtol=0, atol=1e-7 * max(1.0, np.linalg.norm(x_ref)))
    assert c["f_star"] == pytest.approx(problem.full_loss(x_ref, A, y, np.arange(A.shape[0]), problem.params),
                                        rel=1e-13)
    g, g0 = np.empty(problem.dim), np.empty(problem.dim)
    problem.full_grad(c["x_star"], A, y, np.arange(A.shape[0]), problem.params, g)
    problem.full_grad(np.zeros(problem.dim), A, y, np.arange(A.shape[0]), problem.params, g0)
    assert np.linalg.norm(g) <= 1e-11 * np.linalg.norm(g0)


def count_solver_passes(problem, n, workers):
    """Wraps the problem's full_grad and hessian_at (instance attributes, which the solver calls):
    returns a dict counting gradient passes and Hessian-vector products over all rows (per worker)."""
    counts = {"gradients": 0.0, "products": 0.0}
    full_grad, hessian_at = problem.full_grad, problem.hessian_at

    def counted_grad(x, A, y, idx, params, out):
        if idx.shape[0] == n:  # a whole shard, not the subsample
            counts["gradients"] += 1 / workers
        return full_grad(x, A, y, idx, params, out)

    def counted_hessian_at(x, A, y):
        product = hessian_at(x, A, y)

        def counted(v):
            counts["products"] += 1 / workers
            return product(v)
        return counted

    problem.full_grad, problem.hessian_at = counted_grad, counted_hessian_at
    return counts


def test_the_subsample_preconditioner_keeps_full_data_passes_few(monkeypatch):
    """Ill-conditioned logistic regression (lam = 1e-6): x0 from the subsample and CG preconditioned
    by its Hessian need few passes over all rows; plain CG from the same x0 needs many more."""
    data = load_dataset("synthetic:classification?n=64000&d=31&cond=1000&sep=4", label_kind="binary")
    shards, _ = partition(data.y, 4, "shuffled")
    results = {}
    for preconditioned in (True, False):
        if not preconditioned:
            newton = constants.subsample_newton
            monkeypatch.setattr(constants, "subsample_newton", lambda *args: (newton(*args)[0], None))
        problem = make_problem("logistic", data.features, data.classes, lam=1e-6)
        counts = count_solver_passes(problem, shards.shape[1], 4)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            c = problem_constants(problem, data, shards, cache_dir=False)
        results[preconditioned] = (counts["gradients"] + counts["products"], c["f_star"])
    # the solver's passes (and zeta*^2's one): 26 here, plain CG 141; L-BFGS-B and plain Newton-CG
    # took 80 at N = 10^6, d = 128
    assert results[True][0] <= 30
    assert results[False][0] >= 3 * results[True][0]
    assert results[True][1] == pytest.approx(results[False][1], rel=1e-13)


def test_without_hessian_matrix_the_solver_starts_from_l_bfgs(monkeypatch):
    """Problems without the hook (or d > HESSIAN_MATRIX_LIMIT) keep L-BFGS-B and plain Newton-CG,
    and reach the same x*."""
    data = load_dataset("synthetic:classification?n=3000&d=9&cond=30", label_kind="binary")
    problem = make_problem("logistic", data.features, data.classes, lam=1e-3)
    shards, _ = partition(data.y, 3, "shuffled")
    direct = problem_constants(problem, data, shards, cache_dir=False)
    monkeypatch.setattr(constants, "HESSIAN_MATRIX_LIMIT", problem.dim - 1)
    counts = count_solver_passes(problem, shards.shape[1], 3)
    iterated = problem_constants(problem, data, shards, cache_dir=False)
    assert counts["gradients"] > 10  # L-BFGS-B's passes
    np.testing.assert_allclose(iterated["x_star"], direct["x_star"], rtol=1e-9, atol=1e-11)


def test_the_cli_prints_a_constants_cache_warning_as_one_line(tmp_path):
    """ordersim's own warnings in a run are `ordersim: warning:` lines, not Python's format with the
    source line that raised them (cli.own_warnings_on_one_line)."""
    import subprocess
    import sys

    command = [sys.executable, "-m", "ordersim", "--epochs", "1", "--seeds", "0", "--orderers", "rr",
               "--quiet", "--overwrite", "--cache-dir", str(tmp_path / "cache"), "--out", str(tmp_path / "t.h5")]
    assert subprocess.run(command, capture_output=True, text=True, timeout=300).returncode == 0
    for cached in (tmp_path / "cache").glob("constants-*.npz"):
        cached.write_bytes(b"not an npz")
    result = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    lines = [line for line in result.stderr.splitlines() if "constants cache" in line]
    assert len(lines) == 1 and lines[0].startswith("ordersim: warning: ignoring the unreadable"), result.stderr
    assert "RuntimeWarning" not in result.stderr and "worker_constants(" not in result.stderr, result.stderr
