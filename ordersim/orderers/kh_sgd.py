"""kh-sgd: kernel-halving signs on pair differences (docs/algorithms.md, "kh-sgd")."""

import math

from ordersim.orderers._balance import SIGN_KERNEL_HALVING, AdaptivePairWalk
from ordersim.orderers.d_grab_pair import DistributedPairGraB
from ordersim.orderers.sbw import KH_DELTA, check_epochs


class KernelHalvingWalk(AdaptivePairWalk):
    """Mixin: the kernel-halving sign rule on a pair walk (docs/algorithms.md, "kh-sgd"), sigma
    per running-sum row, the penalty's P and the epoch's factor e + 1 in the state."""

    extra_options = ("epochs",)
    required_options = ("epochs",)

    @classmethod
    def check_options(cls, options):
        super().check_options(options)
        if "epochs" in options:  # absent from a config's table: the run's epochs (make_orderer)
            check_epochs(cls.name, options["epochs"])

    def __init__(self, *args, epochs=None, **kwargs):
        self.check_options({"epochs": epochs})
        self.epochs = int(epochs)
        super().__init__(*args, **kwargs)

    def _setup_state(self):
        super()._setup_state()
        self.sign_mode[...] = SIGN_KERNEL_HALVING
        # K, the decisions of a running sum per epoch: its own pairs (of units), or every worker's (shared)
        decisions = self.units // 2 * (self.workers if self.coordinated else 1)
        self.penalty_base[...] = (4.0 / KH_DELTA) * (math.log(self.epochs) + 1.0) * (1.0 + math.log(max(decisions, 1)))

    def _begin(self):
        super()._begin()
        self.sub_gaussian[:] = 0.0
        self.epoch_factor[...] = self.epoch + 1


class KernelHalvingSGD(KernelHalvingWalk, DistributedPairGraB):
    name = "kh-sgd"
    description = ("KH-SGD (Low-Rank Thinning): kernel-halving signs of pair differences, a random threshold "
                   "that adapts to the walk (m = 1)")
    centralized_alternatives = ("cd-kh",)
