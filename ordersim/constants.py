"""The constants the theory curves need, computed once per (problem, data, partition) and cached.

    c = problem_constants(problem, data, shards)   # keys: x_star, f_star, L, L_max, mu, sigma2_star, zeta2_star

All constants refer to the objective the simulator actually trains: the mean of f_i over the
examples in ``shards`` (examples dropped by ``partition`` are not part of it).

They are computed from per-worker quantities, as the simulator holds the data: every rank only its
workers' shards (``WorkerRows``). Means over the examples are means over the workers of per-worker
means (every shard has n examples), added in worker order, so the constants are bitwise the same
on any number of ranks and with ``problem_constants`` on a whole data set in one process.

- x_star, f_star: for convex problems, from the problem's closed form (``solve_exact``), or a
  subsample's minimizer (``subsample_newton``: problems with ``hessian_matrix``), or SciPy L-BFGS-B
  from x = 0, Newton-CG steps (Hessian-vector products, scipy.sparse.linalg.cg, preconditioned by
  the subsample's Hessian where there is one) until the gradient norm is <= 1e-12 relative to
  ||grad f(0)|| or stops improving; a RuntimeWarning if it ends above 1e-10. None / NaN for
  nonconvex problems. Every rank runs the same solver on the same reduced values, so every rank
  ends with the same x*.
- L: a bound on the largest Hessian eigenvalue of f; L_max: the same bound maximized over the f_i;
  mu: the strong-convexity constant where it exists (NaN otherwise); from ``RowStatistics`` (the
  spectrum of A^T A / N and the largest squared row norm). See docs/problems.md.
- sigma2_star = (1/N) sum_i ||grad f_i(x*)||^2; zeta2_star = (1/m) sum_w ||grad F_w(x*)||^2 with F_w
  the mean of f_i over worker w's shard (NaN without x*).

Cache: one .npz per key in ``cache_dir`` (argument; else $ORDERSIM_CACHE; else ~/.cache/ordersim;
``cache_dir=False`` disables it). The key hashes each worker's rows and labels, the shards, the
problem's name, options and kernel parameters, and the source of the problem's code (``source_files``:
editing a loss is a new key, for bundled problems and problems loaded by path alike). Rank 0 reads and writes it. Reading or writing the
cache never fails a run: it warns and recomputes.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import math
import os
import re
import sys
import tempfile
import warnings
from pathlib import Path

import numpy as np

from ordersim.backend import SerialBackend
from ordersim.engine import sum_in_worker_order
from ordersim.problems.base import RowStatistics

CACHE_VERSION = 4
KEYS = ("x_star", "f_star", "L", "L_max", "mu", "sigma2_star", "zeta2_star")
TARGET_REL_GRAD = 1e-10  # the solver warns above it
TARGET_REL_GRAD_STOP = 1e-12  # and stops at it
# Largest Gram matrix (p x p) formed for the spectrum; beyond it Lanczos on A^T A v products.
GRAM_LIMIT = 4000
# Doubles per gathered block of per-worker values (the Gram matrix goes a band of rows at a time).
GATHER_DOUBLES = 1 << 20
# The solver's subsample (``subsample_newton``): the first 1/SUBSAMPLE_FRACTION of every shard, or
# all rows where that is fewer than SUBSAMPLE_ROWS_PER_PARAMETER rows per parameter over all workers;
# its Newton steps stop at SUBSAMPLE_REL_GRAD (x0 need not be closer to x* than the subsample's own
# error); problems with more parameters than HESSIAN_MATRIX_LIMIT never form a d x d Hessian.
SUBSAMPLE_FRACTION = 16
SUBSAMPLE_ROWS_PER_PARAMETER = 32
SUBSAMPLE_REL_GRAD = 1e-8
SUBSAMPLE_STEPS = 50
HESSIAN_MATRIX_LIMIT = 512


def default_cache_dir() -> Path:
    return Path(os.environ.get("ORDERSIM_CACHE") or Path.home() / ".cache" / "ordersim")


class WorkerRows:
    """The training rows as the simulator holds them: this rank's workers' shards, worker-major
    (local worker w's example e is row w * n + e of A), and the backend that gathers per-worker
    values of all workers in worker order."""

    def __init__(self, backend: SerialBackend, A: np.ndarray, y: np.ndarray, n: int):
        self.backend, self.A, self.y, self.n = backend, A, y, int(n)
        self.m, self.local = backend.workers, backend.local_workers

    def shard(self, w: int) -> tuple[np.ndarray, np.ndarray]:
        """Local worker w's rows and labels (views)."""
        rows = slice(w * self.n, (w + 1) * self.n)
        return self.A[rows], self.y[rows]

    def index(self, w: int) -> np.ndarray:
        return np.arange(w * self.n, (w + 1) * self.n, dtype=np.int64)

    def gather(self, value_of, k: int, dtype=np.float64) -> np.ndarray:
        """(m, k): row w is value_of(local worker) of worker w, from every rank."""
        local = np.empty((self.local, k), dtype=dtype)
        for w in range(self.local):
            local[w] = value_of(w)
        return self.backend.gather_workers(local, np.empty((self.m, k), dtype=dtype))

    def mean(self, value_of, k: int) -> np.ndarray:
        """Mean over the workers of value_of(worker) (k,), added in worker order."""
        return sum_in_worker_order(self.gather(value_of, k)) / self.m


def source_files(problem) -> list[str]:
    """The files whose code defines ``problem``'s values, sorted: the module of its class and of
    every base class up to Problem, and the modules of the functions and Numba kernels those
    modules import from their own package or directory (e.g. problems/_kernels.py; not NumPy's or
    Numba's). The same with and without NUMBA_DISABLE_JIT."""
    def file_of(module):
        path = getattr(module, "__file__", None)
        return os.path.realpath(path) if path else None

    classes = [sys.modules[cls.__module__] for cls in type(problem).__mro__
               if cls is not object and cls.__module__ in sys.modules]
    packages = {module.__name__.partition(".")[0] for module in classes}
    directories = {os.path.dirname(file_of(module)) for module in classes if file_of(module)}
    modules = list(classes)
    for module in classes:
        for value in vars(module).values():
            function = getattr(value, "py_func", value)  # a Numba dispatcher's Python function
            source = sys.modules.get(getattr(function, "__module__", None) or "")
            if inspect.isfunction(function) and source is not None and file_of(source) and (
                    source.__name__.partition(".")[0] in packages
                    or os.path.dirname(file_of(source)) in directories):
                modules.append(source)
    return sorted({file_of(module) for module in modules if file_of(module)})


def source_digest(problem) -> str:
    """sha256 of the bytes of ``source_files(problem)``: an edit of a problem's code is a new key."""
    h = hashlib.sha256()
    for path in source_files(problem):
        h.update(Path(path).read_bytes())
        h.update(b"\0")
    return h.hexdigest()


def cache_key(problem, rows: WorkerRows, shards: np.ndarray) -> str:
    """The same on every rank and for every rank count: per-worker digests, in worker order."""
    def digest(w):
        h = hashlib.sha256()
        for arr in rows.shard(w):
            arr = np.ascontiguousarray(arr)
            h.update(f"{arr.dtype.str}{arr.shape}".encode())
            h.update(arr.data)  # the bytes in place, no copy
        return np.frombuffer(h.digest(), dtype=np.uint8)

    digests = rows.gather(digest, 32, dtype=np.uint8)
    h = hashlib.sha256()
    meta = {"version": CACHE_VERSION, "problem": problem.name, "options": problem.options, "dim": problem.dim,
            "features": problem.features, "classes": problem.classes, "module": type(problem).__module__,
            "source": source_digest(problem)}
    h.update(json.dumps(meta, sort_keys=True, default=str).encode())
    for arr in (problem.params, np.ascontiguousarray(shards, dtype=np.int64), digests):
        h.update(f"{arr.dtype.str}{arr.shape}".encode())
        h.update(arr.data)
    return h.hexdigest()[:32]


def _check(problem, data, shards) -> np.ndarray:
    problem.check_data(data.X, data.y)
    shards = np.asarray(shards)
    if shards.ndim != 2 or shards.size == 0 or not np.issubdtype(shards.dtype, np.integer):
        raise ValueError(f"shards must be a non-empty 2-d integer array (workers, n), got {shards.dtype} {shards.shape}")
    if shards.min() < 0 or shards.max() >= data.X.shape[0]:
        raise ValueError(f"shards hold example indices outside 0..{data.X.shape[0] - 1}")
    return np.ascontiguousarray(shards, dtype=np.int64)


def rows_of(A: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """A[idx]: a view when idx is 0, 1, ..., k-1 (a contiguous partition with nothing or the last
    rows dropped: no copy of the data set), else a copy."""
    k = idx.size
    in_order = k == 0 or (idx[0] == 0 and idx[-1] == k - 1 and np.array_equal(idx, np.arange(k)))
    if k <= A.shape[0] and in_order:
        return A[:k]
    return A[idx]


def mean_matrix(rows: WorkerRows, band_of, p: int) -> np.ndarray:
    """(p, p) mean over the workers of a matrix, gathered a band of rows at a time (band_of(w, lo,
    hi): rows lo..hi-1 of worker w's matrix), so a gathered block stays within GATHER_DOUBLES."""
    out = np.empty((p, p))
    band = max(1, GATHER_DOUBLES // (rows.m * p))
    for lo in range(0, p, band):
        hi = min(p, lo + band)
        out[lo:hi] = rows.mean(lambda w: band_of(w, lo, hi).ravel(), (hi - lo) * p).reshape(hi - lo, p)
    return out


def row_statistics(rows: WorkerRows) -> RowStatistics:
    """The spectrum of A^T A / N, the largest squared row norm and A^T y / N of all workers' rows."""
    p = rows.A.shape[1]
    n = rows.n

    def max_norm2(w):
        A_w, _ = rows.shard(w)
        return np.max(np.einsum("ij,ij->i", A_w, A_w))

    max_row_norm2 = float(np.max(rows.gather(max_norm2, 1)))
    moment = rows.mean(lambda w: rows.shard(w)[0].T @ rows.shard(w)[1] / n, p)
    if p > GRAM_LIMIT:
        from scipy.sparse.linalg import LinearOperator, eigsh

        def product(v):
            v = np.ravel(v)
            return rows.mean(lambda w: rows.shard(w)[0].T @ (rows.shard(w)[0] @ v) / n, p)

        # a fixed start vector: every rank runs the same iteration
        top = eigsh(LinearOperator((p, p), matvec=product, dtype=np.float64), k=1, which="LA",
                    v0=np.ones(p), return_eigenvectors=False)[0]
        return RowStatistics(rows=rows.m * n, gram=None, moment=moment, top=float(top), bottom=0.0,
                             max_row_norm2=max_row_norm2)
    gram = mean_matrix(rows, lambda w, lo, hi: rows.shard(w)[0][:, lo:hi].T @ rows.shard(w)[0] / n, p)
    eig = np.linalg.eigvalsh(gram)
    return RowStatistics(rows=rows.m * n, gram=gram, moment=moment, top=float(eig[-1]),
                         bottom=float(max(eig[0], 0.0)), max_row_norm2=max_row_norm2)


def subsample_newton(problem, rows: WorkerRows, fg):
    """(x0, CG preconditioner) for ``minimize``, from a fixed subsample: the first k rows of every
    shard (the same rows on any number of ranks). Newton steps with the subsample's explicit d x d
    Hessian (``problem.hessian_matrix``, Cholesky) find its minimizer x0, each step reading 1/16 of
    the rows; the Cholesky factor of its Hessian at x0 then preconditions CG on all rows
    (DiSCO, Zhang & Xiao 2015), so each full Newton step needs only a few Hessian-vector products.
    None when the problem has no hessian_matrix, d > HESSIAN_MATRIX_LIMIT or that Hessian is not
    positive definite: then ``minimize`` starts from L-BFGS-B."""
    from scipy.linalg import LinAlgError, cho_factor, cho_solve
    from scipy.sparse.linalg import LinearOperator

    d, n = problem.dim, rows.n
    if getattr(problem, "hessian_matrix", None) is None or d > HESSIAN_MATRIX_LIMIT:
        return None
    k = -(-n // SUBSAMPLE_FRACTION)
    if k * rows.m < SUBSAMPLE_ROWS_PER_PARAMETER * d:
        k = n  # a small data set, whose subsample would miss directions (w8a's rare features): all rows

    def factor(x):
        local = [problem.hessian_matrix(x, *(part[:k] for part in rows.shard(w))) for w in range(rows.local)]
        return cho_factor(mean_matrix(rows, lambda w, lo, hi: local[w][lo:hi], d))

    x = np.zeros(d)
    f, g = fg(x, k)
    g0n = float(np.linalg.norm(g))
    for _ in range(SUBSAMPLE_STEPS):
        try:
            chol = factor(x)  # at the x returned, when the loop stops
        except LinAlgError:
            return None
        gn = float(np.linalg.norm(g))
        if gn <= SUBSAMPLE_REL_GRAD * g0n:
            break
        step = -cho_solve(chol, g)
        t = 1.0
        while t > 1e-12:
            fn, gnew = fg(x + t * step, k)
            if fn <= f + 1e-4 * t * float(g @ step) or float(np.linalg.norm(gnew)) < gn:
                break
            t *= 0.5
        else:
            break  # no decrease left at rounding level: x is the subsample's minimizer
        x, f, g = x + t * step, fn, gnew
    return x, LinearOperator((d, d), matvec=lambda v: cho_solve(chol, np.ravel(v)), dtype=np.float64)


def minimize(problem, rows: WorkerRows, statistics: RowStatistics) -> tuple[np.ndarray, float, float]:
    """(x*, f*, final gradient norm relative to ||grad f(0)||) of the mean of f_i over all workers' rows."""
    from scipy.optimize import minimize as scipy_minimize
    from scipy.sparse.linalg import LinearOperator, cg

    d = problem.dim

    def fg(x, k=rows.n):  # over the first k rows of every shard (all of them by default)
        x = np.ascontiguousarray(x)

        def loss_and_grad(w):
            out = np.empty(d + 1)
            out[0] = problem.full_grad(x, rows.A, rows.y, rows.index(w)[:k], problem.params, out[1:])
            return out

        mean = rows.mean(loss_and_grad, d + 1)
        return float(mean[0]), mean[1:]

    def hessian_at(x):  # v -> the mean over the workers of their shards' Hessian-vector products
        products = [problem.hessian_at(x, *rows.shard(w)) for w in range(rows.local)]
        return lambda v: rows.mean(lambda w: hessian_product(problem, products[w], v), d)

    x0 = np.zeros(d)
    _, g0 = fg(x0)
    g0n = float(np.linalg.norm(g0))
    if g0n == 0.0:
        return x0, fg(x0)[0], 0.0
    x, preconditioner = problem.solve_exact(statistics), None
    if x is None:
        start = subsample_newton(problem, rows, fg)
        if start is not None:
            x, preconditioner = start
        else:
            res = scipy_minimize(fg, x0, jac=True, method="L-BFGS-B",
                                 options={"maxiter": 5000, "maxcor": 30, "ftol": 0.0, "gtol": 1e-6 * g0n})
            x = res.x
    x = np.asarray(x, dtype=np.float64)
    f, g = fg(x)
    gn = float(np.linalg.norm(g))
    best = (x, f, gn)  # the smallest gradient norm seen: what is returned
    stalls = 0
    for _ in range(60):
        if gn <= TARGET_REL_GRAD_STOP * g0n or stalls >= 3:
            break
        product = hessian_at(x)
        H = LinearOperator((d, d), matvec=lambda v: product(np.ravel(v)), dtype=np.float64)
        # no more accurate than the target needs: the new gradient is about CG's residual
        step, _ = cg(H, -g, rtol=min(1e-2, gn / g0n), atol=0.5 * TARGET_REL_GRAD_STOP * g0n,
                     maxiter=max(100, 4 * d), M=preconditioner)
        t = 1.0
        while t > 1e-12:
            fn, gnew = fg(x + t * step)
            gnn = float(np.linalg.norm(gnew))
            if fn <= f + 1e-4 * t * float(g @ step) or gnn < gn:
                break
            t *= 0.5
        else:
            break
        # far from x* (a subsample's x0) damped steps lower f without halving the gradient; a stall
        # is a step that does neither, f changing by rounding only
        stalls = 0 if gnn < 0.5 * gn or f - fn > 8 * np.finfo(float).eps * abs(f) else stalls + 1
        x, f, g, gn = x + t * step, fn, gnew, gnn
        if gn < best[2]:
            best = (x, f, gn)
    x, f, gn = best
    rel = gn / g0n
    if rel > TARGET_REL_GRAD:
        warnings.warn(f"{problem.name}: the solver for x* stopped at relative gradient norm {rel:.2e} "
                      f"> {TARGET_REL_GRAD:g}; f* and the constants at x* are less accurate", RuntimeWarning,
                      stacklevel=2)
    return x, float(f), rel


class HookError(ValueError):
    """A problem's hook returned what its contract does not allow: every rank finds the same, and
    a run reports it as one line, an error of its problem."""


def hessian_product(problem, product, v) -> np.ndarray:
    """product(v), a problem's Hessian-vector product, or a HookError naming the hook when it is
    not of v's shape (it failed as a broadcast deep in the worker gather)."""
    value = np.asarray(product(v))
    if value.shape != v.shape:
        raise HookError(f"{problem.name}: hessp(x, v, A, y) must return an array of v's shape {v.shape} "
                        f"(the parameters), got shape {value.shape}")
    return value


def compute_constants(problem, rows: WorkerRows) -> dict:
    """The constants without any cache (see the module docstring)."""
    statistics = row_statistics(rows)
    smoothness = problem.smoothness(statistics)
    if np.shape(smoothness) != (3,):
        raise HookError(f"{problem.name}: smoothness(rows) must return (L, L_max, mu), three numbers (NaN "
                        f"where unknown), got {smoothness!r}")
    L, L_max, mu = (float(v) for v in smoothness)
    out = {"x_star": None, "f_star": math.nan, "L": L, "L_max": L_max, "mu": mu,
           "sigma2_star": math.nan, "zeta2_star": math.nan}
    if not problem.convex:
        return out
    x, f, _ = minimize(problem, rows, statistics)
    out["x_star"], out["f_star"] = x, f
    d, n = problem.dim, rows.n
    chunk = max(1, min(n, GATHER_DOUBLES // (4 * d)))
    grads = np.empty((chunk, d))

    def squared_norms(w):  # sum over the shard of ||grad f_i(x*)||^2, divided by n
        idx, total = rows.index(w), 0.0
        for start in range(0, n, chunk):
            part = idx[start:start + chunk]
            problem.batch_grads(x, rows.A, rows.y, part, problem.params, grads[: part.size])
            total += float(np.sum(grads[: part.size] ** 2))
        return total / n

    out["sigma2_star"] = float(rows.mean(squared_norms, 1)[0])

    def shard_grad(w):
        g = np.empty(d)
        problem.full_grad(x, rows.A, rows.y, rows.index(w), problem.params, g)
        return g

    worker_grads = rows.gather(shard_grad, d)
    out["zeta2_star"] = float(sum_in_worker_order(np.einsum("wj,wj->w", worker_grads, worker_grads)[:, None])[0]
                              / rows.m)
    return out


def _read(path: Path) -> dict | None:
    if not path.exists():
        return None
    try:
        with np.load(path, allow_pickle=False) as archive:
            scalars = json.loads(str(archive["scalars"]))
            x = archive["x_star"] if bool(archive["has_x"]) else None
        out = {key: float(scalars[key]) for key in KEYS if key != "x_star"}
        out["x_star"] = None if x is None else np.array(x, dtype=np.float64)
        return {key: out[key] for key in KEYS}
    except Exception as exc:  # corrupt or foreign file: recompute
        warnings.warn(f"ignoring the unreadable constants cache file {path}: {type(exc).__name__}: {exc}",
                      RuntimeWarning, stacklevel=3)
        return None


def _write(path: Path, consts: dict) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        scalars = json.dumps({key: consts[key] for key in KEYS if key != "x_star"})  # NaN is fine for json
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".constants-", suffix=".npz")
        try:
            with os.fdopen(fd, "wb") as fh:
                x = consts["x_star"]
                np.savez(fh, scalars=np.array(scalars), has_x=np.array(x is not None),
                         x_star=np.zeros(0) if x is None else x)
            os.replace(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
    except Exception as exc:
        warnings.warn(f"could not write the constants cache {path}: {type(exc).__name__}: {exc}",
                      RuntimeWarning, stacklevel=3)


def worker_constants(problem, rows: WorkerRows, shards: np.ndarray, cache_dir=None) -> dict:
    """Constants of ``problem`` on every worker's rows (``rows`` holds this rank's), on every rank;
    ``shards`` (m, n) are the training-example indices (part of the cache key)."""
    backend = rows.backend
    path = None
    if cache_dir is not False:
        key = cache_key(problem, rows, shards)
        if backend.rank == 0:
            try:
                root = Path(cache_dir) if cache_dir is not None else default_cache_dir()
                safe = re.sub(r"[^A-Za-z0-9_.-]", "_", problem.name)
                path = root / f"constants-{safe}-{key}.npz"
            except Exception as exc:
                warnings.warn(f"constants cache disabled: {type(exc).__name__}: {exc}", RuntimeWarning,
                              stacklevel=2)
        cached = backend.bcast(None if path is None else _read(path))
        if cached is not None:
            return cached
    consts = compute_constants(problem, rows)
    if path is not None:
        _write(path, consts)
    return consts


def problem_constants(problem, data, shards: np.ndarray, cache_dir=None) -> dict:
    """Constants of ``problem`` on the training rows of ``data`` selected by ``shards`` (m, n), in
    one process."""
    shards = _check(problem, data, shards)
    idx = shards.ravel()
    rows = WorkerRows(SerialBackend(shards.shape[0]), rows_of(data.X, idx), rows_of(data.y, idx), shards.shape[1])
    return worker_constants(problem, rows, shards, cache_dir)
