"""Random streams derived from (seed, purpose, worker, epoch) only, never from the MPI rank.

Every random decision in ordersim draws from ``stream(seed, purpose, worker, epoch)`` so that the
same config gives the same numbers on any number of ranks, and a resumed run can rebuild any stream
without having saved it.
"""

import numpy as np

# Fixed codes keep streams for different purposes independent (SeedSequence mixes the whole key).
PURPOSES = {
    "order": 0,  # permutations of random orderers and first orders
    "walk": 1,  # uniforms of the self-balancing walk
    "data": 2,  # synthetic data, splits, partitions
    "init": 3,  # model initialisation
    "vectors": 4,  # random vectors of the herding experiment
    "straggler": 5,  # simulated compute times
    "projection": 6,  # the balancing orderers' random projection (drawn once per run)
}


def stream(seed: int, purpose: str, worker: int = 0, epoch: int = 0) -> np.random.Generator:
    """The generator for one (seed, purpose, worker, epoch) cell."""
    if purpose not in PURPOSES:
        raise ValueError(f"stream purpose {purpose!r} is unknown; known: {', '.join(PURPOSES)}")
    key = [int(seed), PURPOSES[purpose], int(worker), int(epoch)]
    if min(key) < 0:
        raise ValueError(f"seed, worker and epoch must be >= 0, got {key}")
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence(key)))
