import math

import numpy as np

from ordersim.orderers._balance import SIGN_SCALED_WALK, AdaptivePairWalk
from ordersim.orderers.pair_grab import PairGraB

KH_DELTA = 0.5  # the failure probability delta of the Low-Rank Thinning code's constant


def check_epochs(name, epochs):
    """The option epochs: the run's number of training epochs E, which the rule's constant needs."""
    if isinstance(epochs, bool) or not isinstance(epochs, (int, np.integer)) or epochs < 1:
        raise ValueError(f"{name}: epochs (the run's number of training epochs, which its rule needs) "
                         f"must be an integer >= 1, got {epochs!r}")
    return int(epochs)


class SelfBalancingWalk(AdaptivePairWalk, PairGraB):
    """pair-grab's self-balancing walk with c = b_max 30 ln(n E d / (2 delta)), the Low-Rank
    Thinning code's constant; b_max by default from the differences seen (docs/algorithms.md)."""

    name = "sbw"
    description = ("self-balancing walk on pair differences with the Low-Rank Thinning code's constant "
                   "c = b_max 30 ln(n E d / (2 delta)) (m = 1)")
    extra_options = ("epochs", "b_max")
    required_options = ("epochs",)

    @classmethod
    def check_options(cls, options):
        super().check_options(options)
        if "epochs" in options:  # absent from a config's table: the run's epochs (make_orderer)
            check_epochs(cls.name, options["epochs"])
        b_max = options.get("b_max")
        if b_max is not None and not (isinstance(b_max, (int, float, np.floating)) and not isinstance(b_max, bool)
                                      and math.isfinite(b_max) and b_max > 0):
            raise ValueError(f"{cls.name}: b_max must be a finite number > 0 (or None: from the differences "
                             f"seen), got {b_max!r}")

    def __init__(self, *args, epochs=None, b_max=None, **kwargs):
        self.check_options({"epochs": epochs, "b_max": b_max})
        self.epochs = int(epochs)
        self.b_max = 0.0 if b_max is None else float(b_max)  # 0: from the differences seen
        super().__init__(*args, **kwargs)

    def _setup_state(self):
        super()._setup_state()
        self.sign_mode[...] = SIGN_SCALED_WALK
        # n and d of what is balanced: the units and their (projected) dimension
        self.walk_scale[...] = 30.0 * math.log(self.units * self.epochs * self.balanced_dim / (2.0 * KH_DELTA))
        self.difference_bound[...] = self.b_max

    def _begin(self):
        super()._begin()
        self.previous_largest[:] = self.largest_difference  # bounds this epoch's ||v||, unless 0
        self.largest_difference[:] = 0.0
