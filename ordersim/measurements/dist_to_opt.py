"""‖x_t − x*‖₂, where the problem's x* is known."""

import numpy as np

from ordersim.measurements.base import Measurement
from ordersim.trace_schema import CONVEX, Dataset


class DistToOpt(Measurement):
    name = "dist-to-opt"
    description = "||x_t - x*||_2, the model's distance to the optimum (x* known)"
    datasets = (Dataset("dist_to_opt", "float64", "(T,)", CONVEX, "‖x_t − x*‖₂"),)
    default = True

    def measure(self, view):
        x_star = view.constants.get("x_star")
        if x_star is None:
            return {}
        return {"dist_to_opt": float(np.linalg.norm(view.x - x_star))}
