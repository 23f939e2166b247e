"""The Problem contract shared by every finite-sum objective f(x) = (1/N) sum_i f_i(x).

A problem module in ``problems/`` defines one ``Problem`` subclass with a ``name`` and four Numba
kernels exposed as staticmethods (so other ``@njit`` code can take them as arguments):

    batch_grads(x, A, y, idx, params, out) -> float   out[r] = grad f_{idx[r]}(x); returns sum_r f_{idx[r]}(x)
    full_loss(x, A, y, idx, params) -> float          mean of f_i over idx
    full_grad(x, A, y, idx, params, out) -> float     out = mean gradient over idx; returns the mean loss
    accuracy(x, A, y, idx, params) -> float           classification accuracy over idx (NaN for regression)

Every f_i includes the regularizer, so the mean of the f_i is the objective. A is (N, p) float64
C-contiguous, y (N,) float64, idx int64 (k,), out float64 (k, dim) or (dim,), params float64 (the
problem's hyperparameters, see ``kernel_params``). See docs/problems.md for a worked example.

A linear model, whose gradients are grad f_i(x) = s_i(x) a_i + grad R(x) (a_i row i of A, s_i a
scalar, R the regularizer), may declare it with two more kernels; the simulator then hands a
projecting orderer s_i (Pi a_i) + Pi grad R(x), from the rows projected once per run, instead of
projecting each gradient (docs/algorithms.md, "Random projection before balancing"):

    batch_grads_slopes(x, A, y, idx, params, out, slopes) -> float   batch_grads, bit for bit, and slopes[r] = s_idx[r](x)
    regularizer_gradient(x, params, out) -> None                     out = grad R(x)
"""

import inspect
import math
import warnings
from dataclasses import dataclass
from types import CodeType, FunctionType

import numpy as np
from numba import config as numba_config
from numba.core.dispatcher import Dispatcher

from ordersim import numba_cache

LABEL_KINDS = ("binary", "multiclass", "real")

# Every kernel of the contract (module docstring) and its arguments; the first four are required.
KERNEL_ARGUMENTS = {
    "batch_grads": "x, A, y, idx, params, out",
    "full_loss": "x, A, y, idx, params",
    "full_grad": "x, A, y, idx, params, out",
    "accuracy": "x, A, y, idx, params",
    "batch_grads_slopes": "x, A, y, idx, params, out, slopes",
    "regularizer_gradient": "x, params, out",
}
REQUIRED_KERNELS = ("batch_grads", "full_loss", "full_grad", "accuracy")


def kernel_contract_error(cls) -> str | None:
    """What breaks the kernel contract in a problem class, or None: a required kernel missing, a
    kernel that is not Numba-jitted (the step loops call it from compiled code) or that does not
    take the contract's arguments. Checked when the class is defined, so a plug-in's mistake is
    one line naming the kernel, not Numba's typing traceback after the data are prepared."""
    for name, arguments in KERNEL_ARGUMENTS.items():
        kernel = getattr(cls, name, None)
        if kernel is None:
            if name in REQUIRED_KERNELS:
                return f"defines no kernel {name}({arguments})"
            continue
        if not numba_config.DISABLE_JIT and not isinstance(kernel, Dispatcher):
            return (f"kernel {name} is not Numba-jitted ({type(kernel).__name__}); decorate it with "
                    f"@njit(cache=True, error_model=\"numpy\")")
        try:
            inspect.signature(getattr(kernel, "py_func", kernel)).bind(*arguments.split(", "))
        except (TypeError, ValueError):
            return (f"kernel {name}{inspect.signature(getattr(kernel, 'py_func', kernel))} does not take "
                    f"the contract's arguments ({arguments})")
    return None


def _global_names(code: CodeType) -> set[str]:
    """The global names a code object and the code nested in it (comprehensions, lambdas) load."""
    names = set(code.co_names)
    for constant in code.co_consts:
        if isinstance(constant, CodeType):
            names |= _global_names(constant)
    return names


def python_function(kernel, copies: dict | None = None):
    """A kernel's pure-Python function (``py_func``; the kernel itself under NUMBA_DISABLE_JIT),
    calling the jitted helpers it names among its module's globals as pure Python in turn: called
    from Python a dispatcher compiles itself (seconds), without bounds checks. A closure is taken
    as it is. `copies`: the functions made so far (a helper shared, or calling itself)."""
    function = getattr(kernel, "py_func", kernel)
    copies = {} if copies is None else copies
    if function in copies or not isinstance(function, FunctionType) or function.__closure__ is not None:
        return copies.get(function, function)
    names = dict(function.__globals__)
    copies[function] = copy = numba_cache.function_copy(function, names)
    for name in _global_names(function.__code__):
        if isinstance(names.get(name), Dispatcher):
            names[name] = python_function(names[name], copies)
    return copy


def probe_rows(problem) -> tuple[np.ndarray, np.ndarray]:
    """Two rows of ones and labels the problem takes: the kernel probe's rows where no data rows
    are at hand."""
    labels = {"binary": [1.0, -1.0], "multiclass": [0.0, max(problem.classes - 1, 0)], "real": [0.0, 0.0]}
    return np.ones((2, problem.features)), np.array(labels[problem.label_kind])


def kernel_probe_error(problem, A, y) -> str | None:
    """An IndexError of one of the problem's kernels, each run once as pure Python
    (python_function) on the rows A[:2] and labels y[:2], as one line naming the kernel; or None.
    Compiled, a kernel has no bounds checks: one that reads params[1] when kernel_params() gives
    only [lam] reads whatever lies there, and the run goes on with wrong numbers. Any other
    exception is ignored: a Numba-only construct may not run as Python, and Numba reports a
    mistake of the code when it compiles the kernel."""
    A = np.ascontiguousarray(A[:2], dtype=np.float64)
    y = np.ascontiguousarray(y[:2], dtype=np.float64)
    rows = A.shape[0]
    try:
        x = np.array(problem.initial_point(np.random.default_rng(0)), dtype=np.float64).reshape(problem.dim)
    except Exception:  # the hook's own mistake: the run reports it where it calls the hook
        x = np.zeros(problem.dim)
    copies = {}
    for name, arguments in KERNEL_ARGUMENTS.items():
        kernel = getattr(problem, name, None)
        if kernel is None:
            continue
        values = {"x": x.copy(), "A": A, "y": y, "idx": np.arange(rows, dtype=np.int64),
                  "params": problem.params.copy(), "slopes": np.zeros(rows),
                  "out": np.zeros((rows, problem.dim) if name.startswith("batch_grads") else problem.dim)}
        names = arguments.split(", ")
        try:
            with np.errstate(all="ignore"), warnings.catch_warnings():
                warnings.simplefilter("ignore")  # overflow on made-up rows: the probe's, not the run's
                python_function(kernel, copies)(*(values[a] for a in names))
        except IndexError as err:
            # NumPy's message names the axis and its size, not the array: the shapes tell which
            shapes = ", ".join(f"{a} {values[a].shape}" for a in names)
            return (f"{problem.name}'s kernel {name} raised IndexError, run once as plain Python on "
                    f"{rows} rows ({err}): compiled, it reads past an array's end and goes on with wrong "
                    f"numbers; the arrays it got: {shapes}; params holds the {problem.params.size} value(s) "
                    f"of kernel_params(): a kernel that reads more needs kernel_params() to return them")
        except Exception:  # not the probe's to report (docstring)
            pass
    return None


def attribute_contract_error(cls) -> str | None:
    """What breaks the contract of a problem class's attributes, or None; then its kernels'
    (kernel_contract_error). Checked when the class is defined: a bad label_kind surfaced as an
    error of the config's data field, a convex problem without hessp as a bare NotImplementedError
    from the solver for x*."""
    if cls.label_kind not in LABEL_KINDS:
        return f"label_kind must be one of {', '.join(LABEL_KINDS)}, got {cls.label_kind!r}"
    if not isinstance(cls.convex, bool):
        return f"convex must be True or False, got {cls.convex!r}"
    if not isinstance(cls.defaults, dict):
        return f"defaults must be a dict of every option and its default, got {type(cls.defaults).__name__}"
    if cls.convex and cls.hessp is Problem.hessp and cls.hessian_at is Problem.hessian_at:
        return ("is convex but defines no hessp(x, v, A, y), which the solver for x* needs; define it or "
                "set convex = False")
    return kernel_contract_error(cls)


def option_float(problem: str, name: str, value, low: float = 0.0, low_open: bool = False) -> float:
    """A finite float >= low (> low with low_open), or a one-line ValueError naming the option."""
    ok = isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)
    if ok:
        value = float(value)
        ok = math.isfinite(value) and (value > low if low_open else value >= low)
    if not ok:
        rel = ">" if low_open else ">="
        raise ValueError(f"{problem}: option {name} must be a finite number {rel} {low:g}, got {value!r}")
    return value


def option_int(problem: str, name: str, value, low: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
        raise ValueError(f"{problem}: option {name} must be an integer >= {low}, got {value!r}")
    return int(value)


def option_choice(problem: str, name: str, value, choices) -> str:
    if value not in choices:
        raise ValueError(f"{problem}: option {name} must be one of {', '.join(map(repr, choices))}, got {value!r}")
    return value


@dataclass(frozen=True)
class RowStatistics:
    """What the constants hooks see of the training rows a_i (labels y_i), all N of them: the
    simulator computes these from per-worker sums, so no process needs the whole data set."""

    rows: int  # N
    gram: np.ndarray | None  # A^T A / N (p, p); None when p > ordersim.constants.GRAM_LIMIT
    moment: np.ndarray  # A^T y / N (p,)
    top: float  # largest eigenvalue of A^T A / N
    bottom: float  # smallest eigenvalue of A^T A / N, clipped at 0 (0 when gram is None)
    max_row_norm2: float  # max_i ||a_i||^2


class Problem:
    name: str = ""
    description: str = ""
    convex: bool = False
    label_kind: str = "real"
    # option name -> default; every option must be listed here (unknown names are rejected)
    defaults: dict = {}
    # a linear model's kernels (the module docstring); None: gradients are projected one by one
    batch_grads_slopes = None
    regularizer_gradient = None

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if cls.name:  # a problem, not an intermediate base class
            error = attribute_contract_error(cls)
            if error:
                raise TypeError(f"problem {cls.name!r} {error} (docs/problems.md, \"Adding a problem\")")

    def __init__(self, features: int, classes: int = 0, **options):
        for field, value, low in (("features", features, 1), ("classes", classes, 0)):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
                raise ValueError(f"{self.name}: {field} must be an integer >= {low}, got {value!r}")
        unknown = sorted(set(options) - set(self.defaults))
        if unknown:
            allowed = ", ".join(sorted(self.defaults)) or "none"
            raise ValueError(f"{self.name}: unknown option(s) {', '.join(unknown)}; allowed: {allowed}")
        self.features = int(features)
        self.classes = int(classes)
        resolved = dict(self.defaults)
        resolved.update(options)
        self.options = self.validate_options(resolved)
        if not isinstance(self.options, dict):
            raise ValueError(f"{self.name}: validate_options must return the options dict, got "
                             f"{type(self.options).__name__}")
        self.dim = int(self.parameter_dim())
        self.params = np.ascontiguousarray(self.kernel_params(), dtype=np.float64)

    # -- hooks for subclasses --------------------------------------------------------------------
    def validate_options(self, options: dict) -> dict:
        """Check and normalize the options (JSON-serializable values); default: lam >= 0."""
        if "lam" in options:
            options["lam"] = option_float(self.name, "lam", options["lam"])
        return options

    def parameter_dim(self) -> int:
        return self.features

    def kernel_params(self) -> np.ndarray:
        return np.array([self.options.get("lam", 0.0)])

    def smoothness(self, rows: RowStatistics) -> tuple[float, float, float]:
        """(L, L_max, mu) of the objective over the training rows; NaN where no bound is known."""
        return math.nan, math.nan, math.nan

    def hessp(self, x: np.ndarray, v: np.ndarray, A: np.ndarray, y: np.ndarray) -> np.ndarray:
        """Hessian of the mean objective over the rows of A times v (NumPy; convex problems). The
        constants call it on each worker's shard and average over the workers."""
        raise NotImplementedError

    def hessian_at(self, x: np.ndarray, A: np.ndarray, y: np.ndarray):
        """v -> hessp(x, v, A, y) at one x: the solver's CG calls it many times per x, so a problem
        may compute what depends on x alone once (and must return the same values as hessp)."""
        return lambda v: self.hessp(x, v, A, y)

    # Optional: hessian_matrix(x, A, y) -> the (d, d) Hessian of the mean objective over the rows of
    # A, explicitly (a convex problem with d <= ordersim.constants.HESSIAN_MATRIX_LIMIT). The solver
    # for x* calls it on a subsample of each worker's shard: Newton steps there give its start, and
    # the Cholesky factor preconditions CG on all rows. None: L-BFGS-B, then CG without it.
    hessian_matrix = None

    def solve_exact(self, rows: RowStatistics):
        """A closed-form minimizer from the row statistics, or None to let the solver iterate."""
        return None

    # -- shared behaviour ---------------------------------------------------------------------------
    @property
    def linear(self) -> bool:
        """Whether the problem declares its gradients as s_i a_i + grad R (both kernels set)."""
        return self.batch_grads_slopes is not None and self.regularizer_gradient is not None

    def initial_point(self, rng: np.random.Generator) -> np.ndarray:
        return np.zeros(self.dim)

    def allowed_labels(self) -> str:
        if self.label_kind == "binary":
            return "-1 and +1 (binary; load the data with label_kind='binary')"
        if self.label_kind == "multiclass":
            return (f"the integers 0..{self.classes - 1} (multiclass with {self.classes} classes; load the "
                    f"data with label_kind='multiclass')")
        return "finite real numbers"

    def check_labels(self, y) -> None:
        y = np.asarray(y, dtype=np.float64)
        if y.ndim != 1:
            raise ValueError(f"{self.name}: labels must be a 1-d array, got shape {y.shape}")
        if self.label_kind == "binary":
            bad = ~((y == 1.0) | (y == -1.0))
        elif self.label_kind == "multiclass":
            bad = ~((y == np.round(y)) & (y >= 0) & (y <= self.classes - 1))
        else:
            bad = ~np.isfinite(y)
        if bad.any():
            row = int(np.argmax(bad))
            raise ValueError(f"{self.name}: label {float(y[row])!r} at row {row} is outside the allowed labels: "
                             f"{self.allowed_labels()}")

    def check_data(self, A, y) -> None:
        """Shapes, dtype and labels of a data set this problem will run on."""
        A = np.asarray(A)
        if A.ndim != 2 or A.shape[1] != self.features:
            raise ValueError(f"{self.name}: dimension mismatch: the problem was made for {self.features} "
                             f"features, the data has shape {A.shape}")
        if np.shape(y) != (A.shape[0],):
            raise ValueError(f"{self.name}: dimension mismatch: {A.shape[0]} rows of features but labels "
                             f"of shape {np.shape(y)}")
        self.check_labels(y)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, features={self.features}, dim={self.dim}, options={self.options})"
