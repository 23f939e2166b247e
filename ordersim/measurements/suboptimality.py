"""f(x_t) − f*, where the problem's f* is known."""

import math

from ordersim.measurements.base import Measurement
from ordersim.trace_schema import CONVEX, Dataset


class Suboptimality(Measurement):
    name = "suboptimality"
    description = "f(x_t) - f*, the training objective's gap to its optimum (f* known)"
    datasets = (Dataset("suboptimality", "float64", "(T,)", CONVEX, "f(x_t) − f*"),)
    default = True

    def measure(self, view):
        f_star = view.constants.get("f_star")
        if f_star is None or math.isnan(f_star):
            return {}
        return {"suboptimality": view.train_loss - f_star}
