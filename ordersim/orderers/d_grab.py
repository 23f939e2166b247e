import numpy as np

from ordersim.orderers._balance import BalancingOrderer, mean_balance_observe


class DistributedGraB(BalancingOrderer):
    """Every worker balances its own gradients against its own stale mean; no coordination."""

    name = "d-grab"
    description = "ID-GraB (Bal): every worker runs GraB's mean balance on its own, no coordination"
    kernel = staticmethod(mean_balance_observe)
    # extra[0]: the previous epoch's mean gradient per worker (zero in the first epoch);
    # extra[1]: this epoch's gradient sums
    extra_rows = 2

    def _begin(self):
        super()._begin()
        self.extra[1] = 0.0

    def _next_order(self):
        np.divide(self.extra[1], self.units, out=self.extra[0])
        return super()._next_order()
