from ordersim.orderers._balance import BalancingState, pair_balance_observe, pair_difference_observe
from ordersim.orderers.base import Orderer


class DistributedPairGraB(BalancingState, Orderer):
    """Every worker runs PairBalance with its own running sum and pointers."""

    name = "d-grab-pair"
    description = "ID-GraB (PairBal): every worker runs PairBalance on its own, no coordination"
    kernel = staticmethod(pair_balance_observe)
    pair_difference_kernel = staticmethod(pair_difference_observe)

    def _setup(self):
        # extra[0]: a pair's first gradient when its partner comes in a later observe()
        self._setup_balance(sum_rows=1 if self.coordinated else self.workers, extra_rows=1)

    def _begin(self):
        self._begin_balance()

    def _next_order(self):
        return self._finish_balance()
