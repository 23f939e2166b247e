"""The measurement plug-in contract: a class that declares its per-epoch datasets and computes
their values once per measured epoch from a read-only view of the run (docs/adding.md)."""

from __future__ import annotations

import numbers
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from ordersim.trace_schema import Dataset

# The dtypes a per-epoch dataset may have: one number per measured epoch.
DTYPES = ("float64", "int64")


@dataclass(frozen=True)
class RunView:
    """What a measurement sees of a run at a measured epoch, on every rank.

    epoch: the epochs trained so far (0: the initial model); x: a copy of the model (d,);
    problem: the problem (its kernels, ``params``, ``dim``); A, y: this rank's training rows,
    worker-major (local worker w's example e is row w * n + e); test_A, test_y: this rank's rows
    of the test split (None without one), local worker w's rows from ``test_bounds[first + w] -
    test_bounds[first]`` up to the next worker's; workers, n, first, local: m, the examples per
    worker, the first worker this rank hosts and how many; constants: the problem's constants
    (x_star, f_star, L, L_max, mu, sigma2_star, zeta2_star; None or NaN where unknown);
    train_loss: f(x) and mean_grad: ∇f(x), over all m·n examples; worker_grads: the full
    gradients (local, d) of this rank's workers' shards; config: the run's Config; backend: the
    backend (rank, size), for reductions see gather_workers.

    mean_grad and worker_grads are read-only (the walk metrics use them after the measurements);
    A, y and the test rows are the run's own arrays, to read only (a read-only view would not
    pass the problems' kernels, whose signatures are declared).
    """

    epoch: int
    x: np.ndarray
    problem: object
    A: np.ndarray
    y: np.ndarray
    test_A: np.ndarray | None
    test_y: np.ndarray | None
    test_bounds: np.ndarray
    workers: int
    n: int
    first: int
    local: int
    constants: Mapping
    train_loss: float
    mean_grad: np.ndarray
    worker_grads: np.ndarray
    config: object
    backend: object
    gather: Callable[[np.ndarray], np.ndarray]

    def gather_workers(self, local: np.ndarray) -> np.ndarray:
        """Every worker's rows (m, ...), in worker order, on every rank, from this rank's workers'
        ``local`` (local, ...): a collective, every rank calls it (its time counts as measure_time).
        Add them up with ordersim.engine.sum_in_worker_order for a sum that is the same on any
        number of ranks."""
        return self.gather(np.ascontiguousarray(local))


def read_only(array: np.ndarray | None) -> np.ndarray | None:
    """A view of `array` that cannot be written (no copy)."""
    if array is None:
        return None
    view = array.view()
    view.flags.writeable = False
    return view


class Measurement:
    """A per-epoch measurement. Subclasses set ``name``, ``description`` (one line), ``datasets``
    (the trace_schema rows of what it writes: each one number per measured epoch, shape "(T,)",
    dtype float64 or int64) and ``default`` (True: measured in every run; False: only where
    ``--measurements`` names it), and give ``measure``. One instance serves a whole run."""

    name = ""
    description = ""
    datasets: tuple[Dataset, ...] = ()
    default = False

    def measure(self, view: RunView) -> dict:
        """{dataset name: a number, or None where it does not apply} for the epoch of `view`; a
        dataset left out is not written either. Called on every rank, in the same order on each:
        a collective of view.gather_workers must be reached on every rank."""
        raise NotImplementedError


def declaration_error(cls: type) -> str | None:
    """What is wrong with a measurement class's ``datasets`` (as a phrase), or None."""
    rows = cls.datasets
    if not isinstance(rows, tuple) or not rows or not all(isinstance(row, Dataset) for row in rows):
        return "declares no datasets (a tuple of ordersim.trace_schema.Dataset)"
    for row in rows:
        if row.dtype not in DTYPES or row.shape != "(T,)":
            return (f"declares {row.name!r} as {row.dtype} {row.shape}; allowed: "
                    f"{' or '.join(DTYPES)} (T,), one number per measured epoch")
    return None


def values_error(cls: type, values) -> str | None:
    """What is wrong with the values a measurement returned (as a phrase), or None."""
    if not isinstance(values, Mapping):
        return f"returned a {type(values).__name__}; allowed: a dict of its datasets' values"
    declared = [row.name for row in cls.datasets]
    for key, value in values.items():
        if key not in declared:
            return f"returned the dataset {key!r}, which it does not declare; allowed: {', '.join(declared)}"
        if value is None or isinstance(value, numbers.Real):
            continue
        shape = np.shape(value)
        if shape != () or np.asarray(value).dtype.kind not in "iuf":
            return (f"returned {type(value).__name__} of shape {shape} for {key!r}; allowed: one number "
                    f"per measured epoch (or None)")
    return None


__all__ = ["DTYPES", "Measurement", "RunView", "declaration_error", "read_only", "values_error"]
