"""The loss and the accuracy on the held-out test split."""

import math

import numpy as np

from ordersim.engine import sum_in_worker_order
from ordersim.measurements.base import Measurement
from ordersim.trace_schema import Dataset


class HeldOut(Measurement):
    name = "held-out"
    description = "loss and accuracy on the held-out test split (test_fraction > 0)"
    datasets = (
        Dataset("test_loss", "float64", "(T,)", "`test_fraction > 0`", "the loss on the held-out split"),
        Dataset("test_accuracy", "float64", "(T,)", "`test_fraction > 0`, classifiers",
                "the accuracy on the held-out split"),
    )
    default = True

    def measure(self, view):
        """Every worker's loss and accuracy sums over its test rows, added in worker order."""
        if view.test_A is None:
            return {}
        p = view.problem
        local = np.zeros((view.local, 3))
        grad = np.empty(view.problem.dim)
        offset = view.test_bounds[view.first]
        for w in range(view.local):
            lo = view.test_bounds[view.first + w] - offset
            hi = view.test_bounds[view.first + w + 1] - offset
            if hi > lo:
                idx = np.arange(lo, hi, dtype=np.int64)
                loss = p.full_grad(view.x, view.test_A, view.test_y, idx, p.params, grad)
                acc = p.accuracy(view.x, view.test_A, view.test_y, idx, p.params)
                local[w] = (loss * (hi - lo), acc * (hi - lo), hi - lo)
        totals = sum_in_worker_order(view.gather_workers(local))
        values = {"test_loss": totals[0] / totals[2]}
        if not math.isnan(totals[1]):
            values["test_accuracy"] = totals[1] / totals[2]
        return values
