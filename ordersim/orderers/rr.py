from ordersim.orderers.base import Orderer

import numpy as np


class RandomReshuffling(Orderer):
    name = "rr"
    description = "random reshuffling: a fresh uniform permutation per worker every epoch (D-RR for m > 1)"

    def _next_order(self):
        return np.stack([self.random_row(i, self.epoch) for i in range(self.workers)])
