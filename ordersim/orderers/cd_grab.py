from ordersim.orderers.d_grab_pair import DistributedPairGraB


class CoordinatedGraB(DistributedPairGraB):
    """One running sum and one pair of pointers shared by all workers: for pair index k, workers
    0..m-1 are balanced in turn against the shared sum, so every worker's slot k is decided in the
    same round. Under MPI every rank runs the same walk on the all-gathered gradients."""

    name = "cd-grab"
    description = "CD-GraB: PairBalance across workers with one shared running sum (coordinated)"
    coordinated = True
