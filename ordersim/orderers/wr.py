from ordersim.orderers.base import Orderer

import numpy as np


class WithReplacement(Orderer):
    """Rows are n uniform draws from 0..n-1, so an example may appear twice or not at all."""

    name = "wr"
    description = "sampling with replacement (plain SGD): n uniform draws per worker per epoch"
    permutes = False

    def _draws(self, row, epoch):
        return self.stream("order", row, epoch).integers(0, self.examples, self.examples, dtype=np.int64)

    def _first_row(self, row):
        if self.first_order == "identity":
            return super()._first_row(row)
        return self._draws(row, 0)

    def _next_order(self):
        return np.stack([self._draws(i, self.epoch) for i in range(self.workers)])
