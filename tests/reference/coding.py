"""Gradient-carrying replays of the coding schemes and of the straggler clock, for the tests.

The simulator never moves gradients through a scheme: it asks ``step_weights`` / ``step_times``
(pure functions of the arrival times and the step) and forms the update itself. These replays do
it the direct way, from the definitions in ordersim/coding.py's docstring: every worker encodes
its (latest, for pipelined GC) partition gradients with B, the server decodes Σ_i a_i f_i from the
responders' messages. The tests check the pure functions against them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class StepResult:
    gradient: np.ndarray  # (d,) the decoded estimate of Σ_j g_j (a sum, not a mean)
    time: float  # arrival time of the responder that completed decoding
    responded: np.ndarray  # bool (n_w,): messages that had arrived by `time` (ties included)
    used: np.ndarray  # bool (n_w,): responders with a non-zero decoding coefficient
    coefficients: np.ndarray  # (n_w,) decoding coefficients a
    weights: np.ndarray  # (k, s+1): weight of partition j's gradient computed `age` steps ago
    load: int


class Stepper:
    """A scheme that carries gradients: ``step(G, arrival, step)`` with G (k, d) the partition
    gradients of this step. Pipelined schemes keep every worker's latest gradient of each of its
    partitions, so their steps must come in order. Other attributes are the scheme's."""

    def __init__(self, scheme):
        self.scheme = scheme
        self.h = None  # (n_w, s+1, d): h[i, q] = worker i's latest gradient of partition P_i[q]
        self.stamp = np.full((scheme.workers, scheme.s + 1), -1, dtype=np.int64)  # its step
        self.last_step = -1

    def __getattr__(self, name):
        return getattr(self.scheme, name)

    def computes(self, step: int) -> np.ndarray:
        """(n_w, s+1) bool: the list positions every worker of a pipelined scheme computes at
        ``step``: all at step 0 (the fill), position (t + r_i) mod (s+1) after."""
        s1 = self.scheme.s + 1
        if step == 0:
            return np.ones((self.scheme.workers, s1), dtype=bool)
        q = (step + self.scheme.offsets) % s1
        return np.arange(s1)[None, :] == q[:, None]

    def step(self, G, arrival, step: int = 0) -> StepResult:
        scheme = self.scheme
        G = np.asarray(G, dtype=np.float64)
        if G.ndim != 2 or G.shape[0] != scheme.k:
            raise ValueError(f"{scheme.name}: G must be (k={scheme.k}, d), got {G.shape}")
        arrival, first, t = scheme._arrival_order(arrival)
        a = scheme.coefficients(first)
        used = np.flatnonzero(a)
        weights = np.zeros((scheme.k, scheme.s + 1))
        if not scheme.pipelined:
            gradient = a[used] @ (scheme.B @ G)[used]
            weights[:, 0] = a @ scheme.B
            return StepResult(gradient, t, arrival <= t, a != 0, a, weights, scheme.load_at(step))
        if step != self.last_step + 1:
            raise ValueError(f"{scheme.name}: steps must come in order; expected {self.last_step + 1}, got {step}")
        self.last_step = step
        if self.h is None:
            self.h = np.zeros((scheme.workers, scheme.s + 1, G.shape[1]))
        rows, cols = np.nonzero(self.computes(step))
        self.h[rows, cols] = G[scheme.plist[rows, cols]]
        self.stamp[rows, cols] = step
        coef = scheme.B[used[:, None], scheme.plist[used]]  # (|used|, s+1): B_ij of each list entry
        messages = np.einsum("uq,uqd->ud", coef, self.h[used])  # the used workers' coded messages
        np.add.at(weights, (scheme.plist[used], step - self.stamp[used]), a[used][:, None] * coef)
        return StepResult(a[used] @ messages, t, arrival <= t, a != 0, a, weights, scheme.load_at(step))


@dataclass
class StragglerClock:
    """The virtual clock step by step, with gradients: ``advance(step, partition_grads)`` returns
    the scheme's StepResult and adds comm(8 d) (the model's broadcast) + result.time (which holds
    each worker's upload: worker i arrives at compute_i + comm(8 d)) to ``now``. The simulator's
    ordersim.stragglers.EpochClock computes the same times a whole epoch at once."""

    model: object
    scheme: object
    dim: int
    comm: object
    now: float = 0.0
    history: list = field(default_factory=list)  # (step, step_time, load) per advanced step

    def __post_init__(self):
        self.stepper = Stepper(self.scheme)

    def arrivals(self, step: int) -> np.ndarray:
        return self.model.times(step, self.scheme.load_at(step)) + self.comm.time(8 * self.dim)

    def advance(self, step: int, partition_grads: np.ndarray) -> StepResult:
        result = self.stepper.step(partition_grads, self.arrivals(step), step)
        elapsed = self.comm.time(8 * self.dim) + result.time
        self.now += elapsed
        self.history.append((step, elapsed, self.scheme.load_at(step)))
        return result
