from ordersim.orderers.d_grab_pair import DistributedPairGraB


class PairGraB(DistributedPairGraB):
    name = "pair-grab"
    description = "PairBalance (centralized, m = 1): balance differences of consecutive pairs, no stale mean"
    centralized_alternatives = ("d-grab-pair", "cd-grab")
