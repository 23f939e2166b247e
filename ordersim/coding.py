"""Gradient-coding schemes: who computes what, what the server waits for, and what it decodes.

Setting (Tandon et al., ICML 2017; see docs/algorithms.md, "Gradient coding"): n_w workers,
k = n_w data partitions, straggler tolerance s. ``B`` is the (n_w, k) encoding matrix: worker i sends
f_i = Σ_j B_ij g_j, where g_j is partition j's gradient (a d-vector; in training, the sum of the
per-example gradients of partition j's examples of that step). Worker i stores the partitions in
``partitions(i)``; a partition with B_ij ≠ 0 is stored by worker i.

Every scheme answers one question per step, from the arrival times alone (the simulator forms
the update from the weights; tests/reference/coding.py replays the schemes with gradients)::

    weights, time, responded = scheme.step_weights(arrival, step)
    # arrival (n_w,): when each worker's message reaches the server
    # weights (k, s+1): weight of partition j's gradient computed `age` steps ago (column = age)
    #   in the decoded estimate of Σ_j g_j (a sum, not a mean); only column 0 for non-pipelined schemes
    # time: arrival time of the responder that completed decoding
    # responded: bool (n_w,), the messages that had arrived by then (ties included)
    scheme.step_times(arrivals)   # (T, n_w) -> (T,): the decode times of many steps at once
    weights, times, responded = scheme.steps_weights(arrivals, first_step)
    # steps first_step .. first_step+T-1 at once: (T, k, s+1), (T,), (T, n_w); bit for bit the
    # stacked step_weights (vectorized over the steps for the built-in schemes)

An exact scheme (``exact = True``) decodes Σ_j g_j itself, so training keeps the plain sum and only
the clock runs; the others change the update (docs/stragglers.md). Schemes are found by name in
``SCHEMES`` (ordersim.registry: another package adds one through the ``ordersim.coding_schemes``
entry-point group, a user through a path to a .py file; docs/adding.md).

Arrival ties are broken by worker index (stable sort). ``load`` is the number of partitions a worker
computes per step (what a straggler model multiplies its per-partition time by):

| scheme | B | load ℓ | server waits for | decoded gradient |
|---|---|---|---|---|
| ``wait-all`` | I | 1 | all n_w | Σ_j g_j |
| ``ignore-stragglers`` | I | 1 | first n_w − s | (n_w/(n_w−s)) Σ_{i∈I} g_i |
| ``gc-fr`` | blocks of ones | s+1 | first response of every block (``wait="decodable"``, default) or first n_w − s | Σ_j g_j exactly |
| ``gc-cr`` | cyclic, random | s+1 | first n_w − s | Σ_j g_j exactly (up to rounding) |
| ``pgc-fr`` | as gc-fr | 1 (s+1 at step 0) | first n_w − s (default) | Σ_j g_j, each at its last step |
| ``pgc-cr`` | cyclic, ones | 1 (s+1 at step 0) | first n_w − s | μ Σ_{i∈R} f_i, μ = n_w / ((n_w − s)(s+1)) |
| ``pgc-fr-staggered`` | as gc-fr | 1 (s+1 at step 0) | first n_w − s (default) | as pgc-fr |
| ``pgc-cr-exact`` | as gc-cr | 1 (s+1 at step 0) | first n_w − s | gc-cr's coefficients on stale messages |

ignore-stragglers rescales by n_w/(n_w − s) so that the estimate is unbiased when the set of the
s slowest workers is uniformly random (i.i.d. times); under persistent stragglers it is biased
towards the fast workers' partitions, which is the point of comparing it with GC.

Pipelined GC (arXiv 2607.20739). ``pgc-fr`` and ``pgc-cr`` follow the authors' released code,
``resnet18_cifar10.py`` of github.com/PipelinedGradientCoding/PipelinedGradientCoding (classes
``PipelinedNetwork``, ``GC_FR``, ``Pipelined_GC_CR``; the paper's own text was not available to
check these details against). ``pgc-fr-staggered`` and ``pgc-cr-exact`` are ordersim's variants.

Worker i's partitions are listed in a fixed order P_i = (P_i[0], …, P_i[s]): for CR,
P_i[q] = (i + q) mod n_w; for FR, the s+1 partitions of its block in increasing order. At step 0
every worker computes all its s+1 partitions (the pipeline fill, load s+1; the authors' code does
this before its timed loop, we charge it to step 0). At step t >= 1 worker i computes only position
q_i(t) = (t + r_i) mod (s+1) of its list, at the current model x_t. Worker i keeps the most recent
gradient of each of its partitions, h_i[j] = g_j(x_{τ_ij}) with τ_ij the last step <= t at which it
computed j (t − τ_ij <= s), and sends f_i = Σ_j B_ij h_i[j]. Every worker computes every step (a
late worker's result is late for the server, not lost for the worker). In the simulator, g_j(x_τ)
is partition j's gradient over its examples of step τ (a fresh minibatch per computation).

- ``pgc-cr`` (the authors' ``Pipelined_GC_CR``): r_i = 0, so at every step each partition is
  computed by exactly one of its s+1 holders (worker j − q computes partition j at steps ≡ q), and
  the holders' copies of a partition have the ages 0..s. B is the cyclic support with every
  coefficient 1 (their ``dev`` = 0): f_i is the plain sum of worker i's s+1 latest gradients. The
  server takes the first n_w − s responses R and decodes μ Σ_{i∈R} f_i, μ = n_w / ((n_w − s)(s+1))
  (the authors then divide by n_w for the mean, as our update does). Not exact even on a fixed
  model: partition j's weight is μ times the number of its holders in R, 1 on average when R is a
  uniformly random set; after the fill every weight[j, age] is 0 or μ (one holder per age).
- ``pgc-fr`` (the authors' ``PipelinedNetwork`` with ``GC_FR``): r_i = 0, so all s+1 members of a
  block compute the same partition at a step (P[t mod (s+1)]) and send the same message; each
  partition is computed once every s+1 steps (by all of its holders), and its examples of the
  other steps enter no update (coverage 0). Decoding: the earliest responder of every block,
  coefficient 1, among the first n_w − s (``wait="n-s"``, the authors' rule, default) or at the
  first response of every block (``wait="decodable"``). The decoded vector is Σ_j g_j(x_{τ_j}),
  each partition once at the step it was last computed, whoever responded.
- ``pgc-fr-staggered`` (ours): as pgc-fr but r_i = i mod (s+1), the worker's rank in its block,
  so that every partition is computed by exactly one holder at every step (each example's
  gradient enters an update when its holder responds); the decoder's weights then depend on which
  block member responded first.
- ``pgc-cr-exact`` (ours): gc-cr's random Tandon et al. code B and its decoding coefficients
  a (aᵀB_I = 1ᵀ) on the stale messages, so the decoded vector is

      Σ_{i∈I} a_i Σ_j B_ij g_j(x_{τ_ij})  =  Σ_j Σ_age weights[j, age] · g_j(x_{t−age}),

  an affine combination per partition (Σ_age weights[j, age] = 1 for every j): exact on a fixed
  model, but for n_w = 12 the weights reach |w| of tens (s = 1) to thousands (s = 3) and amplify
  the differences between a partition's successive minibatch gradients, so with per-step
  minibatches it converges far worse than pgc-cr or diverges (docs/stragglers.md, "Results").

CR construction of gc-cr and pgc-cr-exact (Tandon et al., Algorithm 2): H is an s × n_w matrix
with i.i.d. N(0, 1) entries in its first n_w − 1 columns and last column minus their row sums
(H·1 = 0); row i of B has support {i, …, i+s} mod n_w, B_ii = 1, and the other s entries solve
H[:, S_i∖{i}] b = −H[:, i], so every row lies in null(H). Any n_w − s rows then span null(H) (dimension n_w − s, almost surely), which
contains 1, so B_Iᵀ a = 1 is solvable. Decoding solves it by least squares for the responders I,
checks the residual ‖B_Iᵀ a − 1‖_∞ (DecodingWarning above 1e-8; ValueError above 1e-3: not
decodable) and warns when cond(B_I) > ``cond_warn`` (default 1e8). At construction, when there are
at most 5000 responder sets, 10 random codes are drawn and the one with the smallest worst-case
cond(B_I) over all responder sets is kept (``condition``; a DecodingWarning if even that exceeds
``cond_warn``): the same random construction, minus its unlucky draws. H is drawn from stream(seed, "straggler", 0, CODE_BLOCK),
a block index no run's straggler times reach.
"""

from __future__ import annotations

import itertools
import math
import warnings
import numpy as np

from ordersim.registry import Registry
from ordersim.streams import stream

CODE_BLOCK = 2 ** 31 - 1  # stream block reserved for code construction
WAITS = ("decodable", "n-s")


class DecodingWarning(RuntimeWarning):
    """Poorly conditioned or inexact decoding of a gradient code."""


def _int(name, value, low):
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
        raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
    return int(value)


class Scheme:
    """Base: encoding matrix B, the wait rule and the decoding coefficients."""

    name = ""
    description = ""
    pipelined = False
    exact = True  # the decoded vector is Σ_j g_j, whoever responds

    def __init__(self, workers: int, s: int = 0, seed: int = 0):
        self.workers = _int("workers", workers, 1)
        self.s = _int("s", s, 0)
        self.seed = _int("seed", seed, 0)
        if self.s >= self.workers:
            raise ValueError(f"{self.name}: s must be < workers ({self.workers}), got {s}")
        self.k = self.workers  # partitions
        self.B = np.eye(self.workers)
        self.load = 1

    # -- structure ------------------------------------------------------------------------------
    def loads(self, first: int, steps: int) -> np.ndarray:
        """(steps,) float64: the partitions a worker computes at steps first .. first+steps-1."""
        return np.full(steps, float(self.load))

    def load_at(self, step: int) -> int:
        return int(self.loads(step, 1)[0])

    def partitions(self, worker: int) -> np.ndarray:
        """Partitions stored (and computed, unless pipelined) by ``worker``, in list order."""
        plist = getattr(self, "plist", None)
        return plist[worker].copy() if plist is not None else np.flatnonzero(self.B[worker])

    # -- decoding -------------------------------------------------------------------------------
    def needed(self, order: np.ndarray) -> int:
        """How many of the first responders (``order``: workers by arrival) the decoder needs."""
        return self.workers - self.s

    def coefficients(self, first: np.ndarray) -> np.ndarray:
        """Decoding coefficients a (n_w,), zero outside ``first`` (the first responders)."""
        a = np.zeros(self.workers)
        a[first] = 1.0
        return a

    def _arrival_order(self, arrival):
        arrival = np.asarray(arrival, dtype=np.float64)
        if arrival.shape != (self.workers,) or not np.all(arrival >= 0) or np.any(np.isnan(arrival)):
            raise ValueError(f"{self.name}: arrival must be ({self.workers},) times >= 0, got "
                             f"{arrival.shape}")
        order = np.argsort(arrival, kind="stable")
        r = self.needed(order)
        first = order[:r]
        t = float(arrival[first[-1]])
        return arrival, first, t

    def step_weights(self, arrival: np.ndarray, step: int = 0):
        """The decode of one step: (weights (k, s+1), time, responded). A pure function of
        (arrival, step), also for the pipelined schemes (see ``_Pipelined.stamps``), so that every
        rank computes it identically, for any step, in any order."""
        arrival, first, t = self._arrival_order(arrival)
        a = self.coefficients(first)
        weights = np.zeros((self.k, self.s + 1))
        weights[:, 0] = a @ self.B
        return weights, t, arrival <= t

    def step_times(self, arrival: np.ndarray) -> np.ndarray:
        """Decode times of many steps at once: arrival (T, n_w) -> (T,)."""
        arrival = np.asarray(arrival, dtype=np.float64)
        r = self.workers - self.s
        return np.partition(arrival, r - 1, axis=1)[:, r - 1]

    def steps_weights(self, arrival: np.ndarray, first_step: int = 0):
        """The decodes of steps first_step .. first_step+T-1 at once, from arrival (T, n_w):
        (weights (T, k, s+1), times (T,), responded (T, n_w)), bit for bit ``step_weights`` of
        every step stacked. Vectorized over the steps when the scheme's ``needed``,
        ``coefficients`` and ``step_weights`` have batched counterparts (``_needed_batch``,
        ``_coefficients_batch``, ``_weights_batch``) defined at least as far down the class
        hierarchy as they are; otherwise (a user's scheme overriding one of them) a loop over
        ``step_weights``."""
        arrival = np.asarray(arrival, dtype=np.float64)
        if arrival.ndim != 2 or arrival.shape[1] != self.workers or not np.all(arrival >= 0):
            raise ValueError(f"{self.name}: arrival must be (T, {self.workers}) times >= 0, got "
                             f"{arrival.shape}")
        if not self._batched():
            weights, times, responded = zip(*(self.step_weights(row, first_step + t)
                                              for t, row in enumerate(arrival)))
            return np.stack(weights), np.array(times, dtype=np.float64), np.stack(responded)
        order = np.argsort(arrival, axis=1, kind="stable")
        rank = np.empty_like(order)  # rank[t, i]: worker i's position in step t's arrival order
        np.put_along_axis(rank, order, np.broadcast_to(np.arange(self.workers), order.shape), axis=1)
        r = np.broadcast_to(self._needed_batch(rank), len(arrival))[:, None]  # (T, 1)
        times = np.take_along_axis(arrival, np.take_along_axis(order, r - 1, axis=1), axis=1)[:, 0]
        weights = self._weights_batch(self._coefficients_batch(rank, r), first_step)
        return weights, times, arrival <= times[:, None]

    def _batched(self) -> bool:
        """Whether every per-step hook has its batched counterpart at or below it (steps_weights)."""
        mro = type(self).__mro__

        def owner(name):
            return next(i for i, cls in enumerate(mro) if name in vars(cls))

        return all(owner(batch) <= owner(hook) for hook, batch in (
            ("needed", "_needed_batch"), ("coefficients", "_coefficients_batch"),
            ("step_weights", "_weights_batch")))

    def _needed_batch(self, rank):
        """``needed`` of every step (an int, or (T,) ints), from rank (T, n_w)."""
        return self.workers - self.s

    def _coefficients_batch(self, rank, r):
        """``coefficients`` of every step (T, n_w), r (T, 1): the first responders have rank < r."""
        return np.where(rank < r, 1.0, 0.0)

    def _weights_batch(self, a, first_step):
        """``step_weights``' weights (T, k, s+1) from the coefficients a (T, n_w). ``a @ B`` is
        evaluated once per distinct row of a, as the per-step decode does (a matrix product of
        all rows could round differently)."""
        distinct, inverse = np.unique(a, axis=0, return_inverse=True)
        weights = np.zeros((len(a), self.k, self.s + 1))
        weights[:, :, 0] = np.stack([row @ self.B for row in distinct])[inverse.reshape(-1)]
        return weights

    def __repr__(self):
        return f"{type(self).__name__}(workers={self.workers}, s={self.s}, load={self.load})"


class WaitAll(Scheme):
    name = "wait-all"
    description = "plain synchronous SGD: wait for every worker"

    def __init__(self, workers, s=0, seed=0):
        super().__init__(workers, 0, seed)  # tolerates no straggler whatever s says

    def step_times(self, arrival):
        return np.max(arrival, axis=1)


class IgnoreStragglers(Scheme):
    name = "ignore-stragglers"
    description = "use the first n_w - s responders' own gradients, rescaled by n_w/(n_w - s)"
    exact = False

    def coefficients(self, first):
        a = np.zeros(self.workers)
        a[first] = self.workers / len(first)
        return a

    def _coefficients_batch(self, rank, r):
        return np.where(rank < r, self.workers / r, 0.0)


def _fr_matrix(workers, s):
    if workers % (s + 1):
        raise ValueError(f"fractional repetition needs (s+1) | workers, got workers={workers}, s={s}")
    groups = np.arange(workers) // (s + 1)
    return (groups[:, None] == groups[None, :]).astype(np.float64), groups


def _cr_matrix(workers, s, rng):
    n = workers
    H = np.empty((s, n))
    H[:, :n - 1] = rng.standard_normal((s, n - 1))
    H[:, n - 1] = -H[:, :n - 1].sum(axis=1)
    B = np.zeros((n, n))
    for i in range(n):
        support = (i + np.arange(s + 1)) % n
        B[i, i] = 1.0
        if s:
            B[i, support[1:]] = np.linalg.solve(H[:, support[1:]], -H[:, i])
    return B, H


class _FRDecoder:
    """FR decoding: the earliest responder of every block, coefficient 1."""

    def _init_fr(self, wait):
        if wait not in WAITS:
            raise ValueError(f"{self.name}: wait must be one of {WAITS}, got {wait!r}")
        self.wait = wait
        self.B, self.groups = _fr_matrix(self.workers, self.s)
        self.n_groups = self.workers // (self.s + 1)

    def needed(self, order):
        if self.wait == "n-s":
            return self.workers - self.s
        seen = np.zeros(self.n_groups, dtype=bool)
        for r, i in enumerate(order):
            seen[self.groups[i]] = True
            if seen.all():
                return r + 1
        raise AssertionError("unreachable")

    def coefficients(self, first):
        a = np.zeros(self.workers)
        seen = set()
        for i in first:  # in arrival order
            g = self.groups[i]
            if g not in seen:
                seen.add(g)
                a[i] = 1.0
        if len(seen) != self.n_groups:
            raise ValueError(f"{self.name}: responders {sorted(map(int, first))} miss a block; not decodable")
        return a

    def _block_first(self, rank):
        """(T, n_groups): the arrival position of every block's earliest responder."""
        return rank.reshape(len(rank), self.n_groups, self.s + 1).min(axis=2)

    def _needed_batch(self, rank):
        if self.wait == "n-s":
            return self.workers - self.s
        return self._block_first(rank).max(axis=1) + 1

    def _coefficients_batch(self, rank, r):
        # every block's earliest responder is among the first r: a block has s+1 members, at most
        # s do not respond, and "decodable" waits for all blocks
        earliest = np.repeat(self._block_first(rank), self.s + 1, axis=1)
        return np.where(rank == earliest, 1.0, 0.0)

    def step_times(self, arrival):
        arrival = np.asarray(arrival, dtype=np.float64)
        if self.wait == "n-s":
            return Scheme.step_times(self, arrival)
        T = arrival.shape[0]
        return arrival.reshape(T, self.n_groups, self.s + 1).min(axis=2).max(axis=1)


class _CRDecoder:
    """CR decoding: solve B_Iᵀ a = 1 for the responders I."""

    def _init_cr(self, cond_warn, check_limit=5000, tries=10):
        self.cond_warn = float(cond_warn)
        self._cache: dict[bytes, np.ndarray] = {}
        rng = stream(self.seed, "straggler", 0, CODE_BLOCK)
        self.B, self.H = _cr_matrix(self.workers, self.s, rng)
        self.condition = math.nan  # worst cond(B_I) over all responder sets, when enumerated
        if math.comb(self.workers, self.s) <= check_limit and self.s:
            self.condition = self.worst_condition()
            for _ in range(tries - 1):
                B, H = _cr_matrix(self.workers, self.s, rng)
                cond = self.worst_condition(B)
                if cond < self.condition:
                    self.B, self.H, self.condition = B, H, cond
            if self.condition > self.cond_warn:
                warnings.warn(f"{self.name}: best of {tries} random codes has worst cond(B_I) = "
                              f"{self.condition:.3g}", DecodingWarning, stacklevel=3)

    def worst_condition(self, B=None) -> float:
        """max over every responder set I of size n_w − s of cond(B_I)."""
        B = self.B if B is None else B
        r = self.workers - self.s
        return max(np.linalg.cond(B[list(I)]) for I in itertools.combinations(range(self.workers), r))

    def coefficients(self, first):
        # solve in worker order, so the coefficients depend on the responder set only, not on its
        # arrival order or on which order the cache first saw it in (resumed runs, look-ahead)
        first = np.sort(np.asarray(first))
        key = first.tobytes()
        if key not in self._cache:
            BI = self.B[first]
            sol, *_ = np.linalg.lstsq(BI.T, np.ones(self.k), rcond=None)
            residual = float(np.max(np.abs(BI.T @ sol - 1.0)))
            cond = float(np.linalg.cond(BI))
            if residual > 1e-3:
                raise ValueError(f"{self.name}: responders {sorted(map(int, first))} cannot decode "
                                 f"(residual {residual:.3g})")
            if residual > 1e-8 or cond > self.cond_warn:
                warnings.warn(f"{self.name}: decoding from workers {sorted(map(int, first))}: "
                              f"cond(B_I) = {cond:.3g}, residual {residual:.3g}", DecodingWarning,
                              stacklevel=3)
            a = np.zeros(self.workers)
            a[first] = sol
            self._cache[key] = a
        return self._cache[key]

    def _coefficients_batch(self, rank, r):
        # one least-squares solve per responder set, in the order the steps first meet them (so
        # warnings and errors come as the per-step decode's would)
        sets, first_use, inverse = np.unique(rank < r, axis=0, return_index=True, return_inverse=True)
        a = np.empty((len(sets), self.workers))
        for u in np.argsort(first_use):
            a[u] = self.coefficients(np.flatnonzero(sets[u]))
        return a[inverse.reshape(-1)]


class GCFR(_FRDecoder, Scheme):
    name = "gc-fr"
    description = "gradient coding, fractional repetition (needs (s+1) | workers)"

    def __init__(self, workers, s=1, seed=0, wait="decodable"):
        super().__init__(workers, s, seed)
        self._init_fr(wait)
        self.load = self.s + 1


class GCCR(_CRDecoder, Scheme):
    name = "gc-cr"
    description = "gradient coding, cyclic repetition (random construction, least-squares decoding)"

    def __init__(self, workers, s=1, seed=0, cond_warn=1e8):
        super().__init__(workers, s, seed)
        self._init_cr(cond_warn)
        self.load = self.s + 1


class _Pipelined:
    """Pipelined GC's schedule: worker i computes list position (t + r_i) mod (s+1) of its
    partitions P_i at step t >= 1 (all of them at step 0, the fill), so what it sends at step t
    holds each partition's gradient of the last step it computed it."""

    pipelined = True
    exact = False  # stale gradients of moving models

    def _init_pipeline(self, plist, offsets):
        self.plist = plist  # (n_w, s+1): P_i[q]
        self.offsets = offsets  # r_i
        self.load = 1

    def loads(self, first, steps):
        loads = np.ones(steps)
        if first == 0 and steps:  # the fill
            loads[0] = self.s + 1
        return loads

    def stamps(self, step) -> np.ndarray:
        """(n_w, s+1), or (T, n_w, s+1) for an array of T steps: the step at which every worker
        last computed each list position, as of ``step`` (inclusive):
        max(0, t − ((t + r_i − q) mod (s+1))), step 0 being the fill."""
        step = np.asarray(step)[..., None, None]
        q = np.arange(self.s + 1)
        return np.maximum(0, step - (step + self.offsets[:, None] - q) % (self.s + 1))

    def step_weights(self, arrival, step=0):
        arrival, first, t = self._arrival_order(arrival)
        a = self.coefficients(first)
        used = np.flatnonzero(a)
        coef = self.B[used[:, None], self.plist[used]]  # (|used|, s+1): B_ij of each list entry
        weights = np.zeros((self.k, self.s + 1))
        ages = step - self.stamps(step)[used]
        np.add.at(weights, (self.plist[used], ages), a[used][:, None] * coef)
        return weights, t, arrival <= t

    def _weights_batch(self, a, first_step):
        T, width = len(a), self.s + 1
        steps = first_step + np.arange(T)
        ages = steps[:, None, None] - self.stamps(steps)  # (T, n_w, s+1)
        t, used = np.nonzero(a)  # step by step, the used workers in worker order, as step_weights
        coef = self.B[np.arange(self.workers)[:, None], self.plist]  # (n_w, s+1): B_ij of each list entry
        terms = a[t, used][:, None] * coef[used]
        cells = (t[:, None] * self.k + self.plist[used]) * width + ages[t, used]
        # bincount adds the terms in this order, from 0, as np.add.at does: the same sums bit for
        # bit, also where a cell gets several terms (the first s steps)
        return np.bincount(cells.ravel(), weights=terms.ravel(),
                           minlength=T * self.k * width).reshape(T, self.k, width)


class _ScaledSumDecoder:
    """The authors' pipelined-CR decoder: μ on each of the first n_w − s responders,
    μ = n_w / ((n_w − s)(s+1))."""

    @property
    def mu(self) -> float:
        return self.workers / ((self.workers - self.s) * (self.s + 1))

    def coefficients(self, first):
        a = np.zeros(self.workers)
        a[first] = self.mu
        return a

    def _coefficients_batch(self, rank, r):
        return np.where(rank < r, self.mu, 0.0)


def _cyclic_lists(workers, s):
    """(n_w, s+1): P_i[q] = (i + q) mod n_w."""
    return (np.arange(workers)[:, None] + np.arange(s + 1)[None, :]) % workers


class PipelinedFR(_Pipelined, _FRDecoder, Scheme):
    name = "pgc-fr"
    description = ("pipelined GC, fractional repetition (the authors' code): a block's members compute "
                   "the same partition per step")
    staggered = False

    def __init__(self, workers, s=1, seed=0, wait="n-s"):
        Scheme.__init__(self, workers, s, seed)
        self._init_fr(wait)
        rank_in_block = np.arange(self.workers) % (self.s + 1)
        self._init_pipeline(np.stack([self.partitions(i) for i in range(self.workers)]),
                            rank_in_block if self.staggered else np.zeros(self.workers, dtype=np.int64))


class PipelinedFRStaggered(PipelinedFR):
    name = "pgc-fr-staggered"
    description = ("pipelined GC, fractional repetition, ordersim's variant: a block's members "
                   "compute different partitions per step")
    staggered = True


class PipelinedCR(_Pipelined, _ScaledSumDecoder, Scheme):
    name = "pgc-cr"
    description = ("pipelined GC, cyclic repetition (the authors' code): plain sums of stale "
                   "gradients, scaled sum of the first n - s")

    def __init__(self, workers, s=1, seed=0):
        Scheme.__init__(self, workers, s, seed)
        cyclic = _cyclic_lists(self.workers, self.s)
        self.B = np.zeros((self.workers, self.workers))
        np.put_along_axis(self.B, cyclic, 1.0, axis=1)
        self._init_pipeline(cyclic, np.zeros(self.workers, dtype=np.int64))


class PipelinedCRExact(_Pipelined, _CRDecoder, Scheme):
    name = "pgc-cr-exact"
    description = ("pipelined GC, cyclic repetition, ordersim's variant: Tandon et al.'s code and "
                   "exact decoding on stale messages")

    def __init__(self, workers, s=1, seed=0, cond_warn=1e8):
        Scheme.__init__(self, workers, s, seed)
        self._init_cr(cond_warn)
        self._init_pipeline(_cyclic_lists(self.workers, self.s), np.zeros(self.workers, dtype=np.int64))


def _builtin_schemes() -> tuple[type[Scheme], ...]:
    return (WaitAll, IgnoreStragglers, GCFR, GCCR, PipelinedFR, PipelinedCR, PipelinedFRStaggered,
            PipelinedCRExact)


SCHEMES = Registry("coding scheme", "ordersim.coding_schemes", _builtin_schemes, lambda: Scheme)


def make_scheme(name: str, workers: int, s: int = 0, seed: int = 0, **options) -> Scheme:
    """A scheme by registered name (or path to a .py file) for ``workers`` workers tolerating
    ``s`` stragglers; ValueError naming what is wrong."""
    cls = SCHEMES.get_class(name)
    try:
        return cls(workers, s, seed, **options)
    except TypeError as err:
        raise ValueError(f"{name}: {err}") from None


__all__ = ["CODE_BLOCK", "SCHEMES", "DecodingWarning", "Scheme", "make_scheme"]
