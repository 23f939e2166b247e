import numpy as np

from ordersim.orderers._balance import BalancingState, mean_balance_observe
from ordersim.orderers.base import Orderer


class DistributedGraB(BalancingState, Orderer):
    """Every worker balances its own gradients against its own stale mean; no coordination."""

    name = "d-grab"
    description = "ID-GraB (Bal): every worker runs GraB's mean balance on its own, no coordination"

    def _setup(self):
        self._setup_balance(self.workers)
        self.mean_prev = np.zeros((self.workers, self.dim))  # zero in the first epoch
        self.grad_sum = np.zeros((self.workers, self.dim))

    def _begin(self):
        self._begin_balance()
        self.grad_sum[:] = 0.0

    def _observe(self, grads, start):
        mean_balance_observe(grads, start, self.order, self.next_order, self.running_sum,
                             self.mean_prev, self.grad_sum, self.left, self.right, self.uniforms,
                             self._mode, self._tie_plus, self.walk_c, self.discrepancy,
                             self.walk_failures)

    def _next_order(self):
        np.divide(self.grad_sum, self.examples, out=self.mean_prev)
        return self._finish_balance()
