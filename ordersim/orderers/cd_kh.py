"""cd-kh: kh-sgd's rule over CD-GraB's shared walk (docs/algorithms.md, "cd-kh"; ordersim's own)."""

from ordersim.orderers.cd_grab import CoordinatedGraB
from ordersim.orderers.kh_sgd import KernelHalvingWalk


class CoordinatedKernelHalving(KernelHalvingWalk, CoordinatedGraB):
    """ordersim's own (in no paper): kh-sgd's rule over cd-grab's walk shared by all workers."""

    name = "cd-kh"
    description = "ordersim's own, in no paper: kh-sgd's kernel-halving rule over CD-GraB's shared walk"
