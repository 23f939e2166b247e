import numpy as np

from ordersim.orderers._balance import BalancingState, pair_balance_observe
from ordersim.orderers.base import Orderer


class DistributedPairGraB(BalancingState, Orderer):
    """Every worker runs PairBalance with its own running sum and pointers."""

    name = "d-grab-pair"
    description = "ID-GraB (PairBal): every worker runs PairBalance on its own, no coordination"

    def _setup(self):
        self._setup_balance(1 if self.coordinated else self.workers)
        self.pending = np.zeros((self.workers, self.dim))

    def _begin(self):
        self._begin_balance()

    def _observe(self, grads, start):
        pair_balance_observe(grads, start, self.order, self.next_order, self.running_sum,
                             self.pending, self.left, self.right, self.uniforms, self._mode,
                             self._tie_plus, self.walk_c, self.discrepancy, self.walk_failures)

    def _next_order(self):
        return self._finish_balance()
