from ordersim.orderers._balance import (BalancingOrderer, pair_balance_observe, pair_difference_observe,
                                       projected_pair_difference_observe, unit_pair_balance_observe)


class DistributedPairGraB(BalancingOrderer):
    """Every worker runs PairBalance with its own running sum and pointers."""

    name = "d-grab-pair"
    description = "ID-GraB (PairBal): every worker runs PairBalance on its own, no coordination"
    kernel = staticmethod(pair_balance_observe)
    pair_difference_kernel = staticmethod(pair_difference_observe)
    unit_kernels = (unit_pair_balance_observe, projected_pair_difference_observe)
    pair_walk = True
    # extra[0]: a pair's first gradient when its partner comes in a later observe()
    extra_rows = 1
