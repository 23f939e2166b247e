from ordersim.orderers.base import Orderer


class ShuffleOnce(Orderer):
    name = "so"
    description = "shuffle once: one random permutation per worker, reused every epoch"

    def _next_order(self):
        return self.order
