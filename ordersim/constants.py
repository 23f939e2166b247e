"""The constants the theory curves need, computed once per (problem, data, partition) and cached.

    c = problem_constants(problem, data, shards)   # keys: x_star, f_star, L, L_max, mu, sigma2_star, zeta2_star

All constants refer to the objective the simulator actually trains: the mean of f_i over the
examples in ``shards`` (examples dropped by ``partition`` are not part of it).

- x_star, f_star: for convex problems, SciPy L-BFGS-B from x = 0 (or the problem's closed form),
  then Newton-CG steps (Hessian-vector products, scipy.sparse.linalg.cg) until the gradient norm
  is <= 1e-12 relative to ||grad f(0)|| or stops improving; a RuntimeWarning if it ends above 1e-10.
  None / NaN for nonconvex problems.
- L: a bound on the largest Hessian eigenvalue of f; L_max: the same bound maximized over the f_i;
  mu: the strong-convexity constant where it exists (NaN otherwise). See docs/problems.md.
- sigma2_star = (1/N) sum_i ||grad f_i(x*)||^2; zeta2_star = (1/m) sum_w ||grad F_w(x*)||^2 with F_w
  the mean of f_i over worker w's shard (NaN without x*).

Cache: one .npz per key in ``cache_dir`` (argument; else $ORDERSIM_CACHE; else ~/.cache/ordersim;
``cache_dir=False`` disables it). The key hashes the arrays, the shards and the problem's name,
options and kernel parameters. Reading or writing the cache never fails a run: it warns and recomputes.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import tempfile
import warnings
from pathlib import Path

import numpy as np

CACHE_VERSION = 1
KEYS = ("x_star", "f_star", "L", "L_max", "mu", "sigma2_star", "zeta2_star")
TARGET_REL_GRAD = 1e-10


def default_cache_dir() -> Path:
    return Path(os.environ.get("ORDERSIM_CACHE") or Path.home() / ".cache" / "ordersim")


def cache_key(problem, data, shards: np.ndarray) -> str:
    h = hashlib.sha256()
    meta = {"version": CACHE_VERSION, "problem": problem.name, "options": problem.options, "dim": problem.dim,
            "features": problem.features, "classes": problem.classes, "module": type(problem).__module__}
    h.update(json.dumps(meta, sort_keys=True, default=str).encode())
    for arr in (problem.params, data.X, data.y, shards):
        arr = np.ascontiguousarray(arr)
        h.update(f"{arr.dtype.str}{arr.shape}".encode())
        h.update(arr.data)  # the bytes in place: tobytes() would copy the whole data set
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


def minimize(problem, A: np.ndarray, y: np.ndarray, idx: np.ndarray) -> tuple[np.ndarray, float, float]:
    """(x*, f*, final gradient norm relative to ||grad f(0)||) of the mean of f_i over idx."""
    from scipy.optimize import minimize as scipy_minimize
    from scipy.sparse.linalg import LinearOperator, cg

    d = problem.dim
    buf = np.empty(d)

    def fg(x):
        f = problem.full_grad(np.ascontiguousarray(x), A, y, idx, problem.params, buf)
        return f, buf.copy()

    x0 = np.zeros(d)
    _, g0 = fg(x0)
    g0n = float(np.linalg.norm(g0))
    if g0n == 0.0:
        return x0, fg(x0)[0], 0.0
    Asub, ysub = rows_of(A, idx), rows_of(y, idx)
    x = problem.solve_exact(Asub, ysub)
    if x is None:
        res = scipy_minimize(fg, x0, jac=True, method="L-BFGS-B",
                             options={"maxiter": 5000, "maxcor": 30, "ftol": 0.0, "gtol": 1e-6 * g0n})
        x = res.x
    x = np.asarray(x, dtype=np.float64)
    f, g = fg(x)
    gn = float(np.linalg.norm(g))
    stalls = 0
    for _ in range(60):
        if gn <= 1e-12 * g0n or stalls >= 3:
            break
        xk = x
        H = LinearOperator((d, d), matvec=lambda v, xk=xk: problem.hessp(xk, v, Asub, ysub), dtype=np.float64)
        step, _ = cg(H, -g, rtol=min(1e-2, gn / g0n), atol=0.0, maxiter=max(100, 4 * d))
        t, best = 1.0, None
        while t > 1e-12:
            fn, gnew = fg(x + t * step)
            gnn = float(np.linalg.norm(gnew))
            if fn <= f + 1e-4 * t * float(g @ step) or gnn < gn:
                best = (x + t * step, fn, gnew, gnn)
                break
            t *= 0.5
        if best is None:
            break
        stalls = stalls + 1 if best[3] >= 0.5 * gn else 0
        if best[3] < gn:
            x, f, g, gn = best
    rel = gn / g0n
    if rel > TARGET_REL_GRAD:
        warnings.warn(f"{problem.name}: the solver for x* stopped at relative gradient norm {rel:.2e} "
                      f"> {TARGET_REL_GRAD:g}; f* and the constants at x* are less accurate", RuntimeWarning,
                      stacklevel=2)
    return x, float(f), rel


def compute_constants(problem, X: np.ndarray, y: np.ndarray, shards: np.ndarray) -> dict:
    """The constants without any cache (see the module docstring)."""
    idx = np.ascontiguousarray(shards.ravel(), dtype=np.int64)
    L, L_max, mu = (float(v) for v in problem.smoothness(rows_of(X, idx)))
    out = {"x_star": None, "f_star": math.nan, "L": L, "L_max": L_max, "mu": mu,
           "sigma2_star": math.nan, "zeta2_star": math.nan}
    if not problem.convex:
        return out
    x, f, _ = minimize(problem, X, y, idx)
    out["x_star"], out["f_star"] = x, f
    chunk = 4096
    grads = np.empty((min(chunk, idx.size), problem.dim))
    total = 0.0
    for start in range(0, idx.size, chunk):
        part = idx[start:start + chunk]
        problem.batch_grads(x, X, y, part, problem.params, grads[: part.size])
        total += float(np.sum(grads[: part.size] ** 2))
    out["sigma2_star"] = total / idx.size
    g = np.empty(problem.dim)
    zeta = 0.0
    for w in range(shards.shape[0]):
        problem.full_grad(x, X, y, shards[w], problem.params, g)
        zeta += float(g @ g)
    out["zeta2_star"] = zeta / shards.shape[0]
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


def problem_constants(problem, data, shards: np.ndarray, cache_dir=None) -> dict:
    """Constants of ``problem`` on the training rows of ``data`` selected by ``shards`` (m, n)."""
    shards = _check(problem, data, shards)
    path = None
    if cache_dir is not False:
        try:
            root = Path(cache_dir) if cache_dir is not None else default_cache_dir()
            safe = re.sub(r"[^A-Za-z0-9_.-]", "_", problem.name)
            path = root / f"constants-{safe}-{cache_key(problem, data, shards)}.npz"
        except Exception as exc:
            warnings.warn(f"constants cache disabled: {type(exc).__name__}: {exc}", RuntimeWarning, stacklevel=2)
        if path is not None:
            cached = _read(path)
            if cached is not None:
                return cached
    consts = compute_constants(problem, data.X, data.y, shards)
    if path is not None:
        _write(path, consts)
    return consts
