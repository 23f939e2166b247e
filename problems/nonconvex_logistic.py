"""Logistic regression with the nonconvex regularizer of the variance-reduction literature:

    f(x) = (1/N) sum_i log(1 + exp(-y_i a_i^T x)) + lam sum_j x_j^2 / (1 + x_j^2),  y in {-1, +1}.

Same kernels as ``logistic`` with params = [lam, 1].
"""

import math

from ordersim.problems.logistic import Logistic


class NonconvexLogistic(Logistic):
    name = "nonconvex-logistic"
    description = ("logistic regression with the nonconvex regularizer lam sum_j x_j^2/(1 + x_j^2), "
                   "y in {-1,+1} (nonconvex)")
    convex = False
    defaults = {"lam": 0.1}
    regularizer = 1.0

    def smoothness(self, rows):
        # |d^2/dt^2 t^2/(1+t^2)| = |2 - 6t^2| / (1+t^2)^3 <= 2, so the regularizer adds at most 2 lam
        lam = self.options["lam"]
        return rows.top / 4.0 + 2.0 * lam, rows.max_row_norm2 / 4.0 + 2.0 * lam, math.nan

    hessian_matrix = None  # logistic's has the convex regularizer's lam I

    def hessp(self, x, v, A, y):
        raise NotImplementedError
