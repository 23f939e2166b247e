import numpy as np

from ordersim.orderers.base import Orderer


class IncrementalGradient(Orderer):
    name = "ig"
    description = "incremental gradient: the identity order every epoch (first_order is ignored)"

    def _first_row(self, row: int) -> np.ndarray:
        return np.arange(self.examples, dtype=np.int64)

    def _next_order(self):
        return self.order
