from ordersim.orderers.base import Orderer

import numpy as np


class FlipFlop(Orderer):
    name = "flipflop"
    description = "flipflop: a new random permutation on even epochs, the previous one reversed on odd epochs"

    def _next_order(self):
        if self.epoch % 2 == 1:
            return self.order[:, ::-1].copy()
        return np.stack([self.random_row(i, self.epoch) for i in range(self.workers)])
