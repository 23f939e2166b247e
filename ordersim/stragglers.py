"""Simulated worker times on a virtual clock: straggler models and a communication model.

Nothing here sleeps. A straggler model answers "how long does worker i need for its computation
at step t with load ℓ?" (ℓ = number of data partitions it computes that step, see
ordersim.coding), all workers at once, as a float64 array of seconds:

    model = make_straggler_model("shifted-exp", workers=12, seed=0, a=1.0, mu=1.0)
    model.times(step=5, load=3)            # (12,)  one step
    model.times_block(0, 1000, load=1)     # (1000, 12)  steps 0..999

Every model writes a worker's time as ``load * base + extra`` with ``base`` and ``extra`` drawn per
worker: ``base`` is the per-partition compute time, ``extra`` a delay that does not scale with the
load (zero unless the model says otherwise).

Seeding and rank-count invariance. Worker i's draws for steps ``k*BLOCK .. (k+1)*BLOCK - 1`` come
from ``stream(seed, "straggler", i, k)`` (one generator per worker and block of BLOCK = 256 steps,
the block index in the stream's ``epoch`` slot), vectorized over the block. They therefore depend
only on (seed, worker, step): not on the MPI rank count, not on the other workers, and not on the
order in which steps are asked for. Every rank can compute every worker's times (the server logic
of a coding scheme needs all of them). The bursty model adds one deterministic pass over steps
that couples the workers (its window constraint); it too depends only on (seed, workers, step).

Communication (``CommModel``): sending ``nbytes`` takes ``latency + nbytes / bandwidth`` seconds
(bandwidth in bytes per second; ``bandwidth = inf`` means free transfer). A step of the
simulated clock (``EpochClock``) costs: broadcast of the model to every worker (one message of ``8·d`` bytes,
the same for all), then each worker's compute time plus its upload of one coded vector (``8·d``
bytes); the server decodes when the responder that completes decoding has arrived. So

    step time = comm(8·d) + t_decode,   t_decode = time of that responder's compute + comm(8·d).

Models (``STRAGGLER_MODELS``, an ordersim.registry: another package adds one through the
``ordersim.straggler_models`` entry-point group, a user through a path to a .py file; parameters in
each class docstring): ``constant``, ``shifted-exp``, ``persistent``, ``bernoulli``, ``bursty``,
``trace``.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

import numpy as np

from ordersim.registry import Registry
from ordersim.streams import stream

BLOCK = 256  # steps per per-worker random block


def _positive(name, value, allow_zero=False, allow_inf=False):
    ok = isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)
    ok = ok and not math.isnan(value) and (value >= 0 if allow_zero else value > 0)
    ok = ok and (allow_inf or math.isfinite(value))
    if not ok:
        bound = ">= 0" if allow_zero else "> 0"
        raise ValueError(f"{name} must be a {'' if allow_inf else 'finite '}number {bound}, got {value!r}")
    return float(value)


class StragglerModel:
    """Base class: per-worker, per-block draws of (base, extra); subclasses set ``name`` and
    implement ``_worker_block(worker, rng, length) -> (base, extra)`` (1-D arrays of ``length``)."""

    name = ""
    description = ""

    def __init__(self, workers: int, seed: int = 0):
        if isinstance(workers, bool) or not isinstance(workers, (int, np.integer)) or workers < 1:
            raise ValueError(f"{self.name}: workers must be an integer >= 1, got {workers!r}")
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
            raise ValueError(f"{self.name}: seed must be an integer >= 0, got {seed!r}")
        self.workers, self.seed = int(workers), int(seed)
        self._cache: dict[int, tuple[np.ndarray, np.ndarray]] = {}

    # -- subclasses -----------------------------------------------------------------------------
    def _worker_block(self, worker: int, rng: np.random.Generator, length: int):
        raise NotImplementedError

    def _block(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        """(base, extra), each (BLOCK, workers), of steps k*BLOCK .. (k+1)*BLOCK - 1."""
        if k not in self._cache:
            base = np.empty((BLOCK, self.workers))
            extra = np.zeros((BLOCK, self.workers))
            for w in range(self.workers):
                base[:, w], extra[:, w] = self._worker_block(w, stream(self.seed, "straggler", w, k), BLOCK)
            if len(self._cache) >= 8:  # steps are asked for in order; keep a few blocks
                self._cache.pop(next(iter(self._cache)))
            self._cache[k] = (base, extra)
        return self._cache[k]

    # -- public ---------------------------------------------------------------------------------
    def draw(self, first: int, steps: int) -> tuple[np.ndarray, np.ndarray]:
        """(base, extra), each (steps, workers), for steps first .. first+steps-1."""
        if first < 0 or steps < 0:
            raise ValueError(f"{self.name}: steps must be >= 0, got first={first}, steps={steps}")
        base = np.empty((steps, self.workers))
        extra = np.empty((steps, self.workers))
        pos = first
        while pos < first + steps:
            k, off = divmod(pos, BLOCK)
            take = min(BLOCK - off, first + steps - pos)
            b, e = self._block(k)
            base[pos - first:pos - first + take] = b[off:off + take]
            extra[pos - first:pos - first + take] = e[off:off + take]
            pos += take
        return base, extra

    def times_block(self, first: int, steps: int, load=1.0) -> np.ndarray:
        """Compute times (steps, workers): load * base + extra. ``load`` is a number or a
        per-worker array (workers,)."""
        base, extra = self.draw(first, steps)
        return np.asarray(load, dtype=np.float64) * base + extra

    def times(self, step: int, load=1.0) -> np.ndarray:
        """Compute times (workers,) of every worker at one step."""
        return self.times_block(step, 1, load)[0]

    def __repr__(self):
        params = ", ".join(f"{k}={v!r}" for k, v in self.params().items())
        return f"{type(self).__name__}(workers={self.workers}, seed={self.seed}, {params})"

    def params(self) -> dict:
        return {}


class Constant(StragglerModel):
    """No stragglers: every worker takes ``load * a`` (a > 0, seconds per partition)."""

    name = "constant"
    description = "no randomness: time load * a for every worker"

    def __init__(self, workers, seed=0, a=1.0):
        super().__init__(workers, seed)
        self.a = _positive("a", a)

    def _worker_block(self, worker, rng, length):
        return np.full(length, self.a), np.zeros(length)

    def params(self):
        return dict(a=self.a)


class ShiftedExponential(StragglerModel):
    """Shifted exponential: time = ℓ·(a + E), E ~ Exp(rate μ) i.i.d. over workers and steps.

    a >= 0 is the deterministic time per partition, μ > 0 the rate (mean of E is 1/μ). With load ℓ
    the whole time scales (Lee et al. / Tandon et al.'s model), so the k-th fastest of n workers
    has E[T_(k:n)] = ℓ·(a + (H_n − H_{n−k})/μ).
    """

    name = "shifted-exp"
    description = "load * (a + Exp(mu)) for every worker"

    def __init__(self, workers, seed=0, a=1.0, mu=1.0):
        super().__init__(workers, seed)
        self.a = _positive("a", a, allow_zero=True)
        self.mu = _positive("mu", mu)

    def _worker_block(self, worker, rng, length):
        return self.a + rng.exponential(1.0 / self.mu, length), np.zeros(length)

    def params(self):
        return dict(a=self.a, mu=self.mu)


class PersistentStragglers(ShiftedExponential):
    """Shifted exponential for everyone, plus an additive delay D ~ Exp(mean ``delay``) on the
    workers listed in ``stragglers`` (the same workers every step): time = ℓ·(a + E) + D. The
    delay does not scale with the load (a slow link or a shared, busy machine)."""

    name = "persistent"
    description = "shifted exponential plus Exp(delay) added on a fixed subset of workers"

    def __init__(self, workers, seed=0, a=1.0, mu=1.0, stragglers=(0,), delay=5.0):
        super().__init__(workers, seed, a, mu)
        self.delay = _positive("delay", delay)
        self.stragglers = tuple(sorted({int(w) for w in stragglers}))
        if any(w < 0 or w >= self.workers for w in self.stragglers):
            raise ValueError(f"persistent: stragglers must be worker ids in 0..{self.workers - 1}, "
                             f"got {list(stragglers)}")

    def _worker_block(self, worker, rng, length):
        base, _ = super()._worker_block(worker, rng, length)
        extra = rng.exponential(self.delay, length) if worker in self.stragglers else np.zeros(length)
        return base, extra

    def params(self):
        return dict(a=self.a, mu=self.mu, stragglers=list(self.stragglers), delay=self.delay)


class BernoulliStragglers(ShiftedExponential):
    """Every worker straggles independently with probability p at every step; a straggler's time
    is multiplied by ``slowdown`` >= 1: time = ℓ·(a + E)·(slowdown if straggling else 1)."""

    name = "bernoulli"
    description = "shifted exponential, each worker slowed down by a factor with probability p per step"

    def __init__(self, workers, seed=0, a=1.0, mu=1.0, p=0.1, slowdown=10.0):
        super().__init__(workers, seed, a, mu)
        if not 0 <= p <= 1:
            raise ValueError(f"bernoulli: p must be in [0, 1], got {p!r}")
        self.p = float(p)
        self.slowdown = _positive("slowdown", slowdown)
        if self.slowdown < 1:
            raise ValueError(f"bernoulli: slowdown must be >= 1, got {slowdown!r}")

    def _worker_block(self, worker, rng, length):
        base, _ = super()._worker_block(worker, rng, length)
        slow = rng.random(length) < self.p
        return np.where(slow, base * self.slowdown, base), np.zeros(length)

    def params(self):
        return dict(a=self.a, mu=self.mu, p=self.p, slowdown=self.slowdown)


class BurstyStragglers(ShiftedExponential):
    """Two-state bursty stragglers, conforming to the (B, W, λ)-bursty straggler model.

    Every worker is in one of two states at every step: *normal* (time ℓ·(a + E)) or *straggling*
    (time ℓ·(a + E)·slowdown). A straggling episode (a *burst*) is a run of consecutive straggling
    steps of one worker. The parameters mean exactly:

    - B (int >= 1): the longest burst, in steps; a burst's length is uniform on 1..B.
    - W (int >= B): the window length, in steps. In every window of W consecutive steps each worker
      has at most one burst (its straggling steps in the window are consecutive, at most B of them).
    - λ (``lam``, int >= 0): in every window of W consecutive steps at most λ distinct workers
      straggle.
    - ``p_start``: the probability that a normal worker that may start a burst (without breaking
      the two window rules) starts one at a given step.

    (This is the (B, W, λ) model of sequential gradient coding, Krishnan, Ebrahimi and Khisti,
    ICLR 2023, as we read it, made generative by the Bernoulli(p_start) burst starts.)

    Generation is per step, workers in index order: worker i (normal at step t) draws u < p_start
    and a length L from its own stream; the burst [t, t+L-1] is accepted iff worker i's previous
    burst ended at a step <= t − W, and fewer than λ other workers have straggling steps (already
    decided, past or future) in [t − W + 1, t + L + W − 2], the steps that share a window with the
    new burst. The last burst added to any window has seen all others in it, so both rules hold
    for every window. The acceptance pass carries state from step to step, so steps are generated
    in order (asking for step t generates 0..t once; the flags are kept).
    """

    name = "bursty"
    description = "two-state bursty stragglers obeying the (B, W, lambda) window rules"

    def __init__(self, workers, seed=0, a=1.0, mu=1.0, B=2, W=8, lam=1, p_start=0.05, slowdown=10.0):
        super().__init__(workers, seed, a, mu)
        for name, value, low in (("B", B, 1), ("W", W, 1), ("lam", lam, 0)):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
                raise ValueError(f"bursty: {name} must be an integer >= {low}, got {value!r}")
        if W < B:
            raise ValueError(f"bursty: W must be >= B, got W={W}, B={B}")
        if not 0 <= p_start <= 1:
            raise ValueError(f"bursty: p_start must be in [0, 1], got {p_start!r}")
        self.B, self.W, self.lam, self.p_start = int(B), int(W), int(lam), float(p_start)
        self.slowdown = _positive("slowdown", slowdown)
        if self.slowdown < 1:
            raise ValueError(f"bursty: slowdown must be >= 1, got {slowdown!r}")
        self._flags = np.zeros((0, self.workers), dtype=bool)  # straggling[t, i], decided so far
        self._done = 0  # steps whose burst starts were decided
        self._last_end = np.full(self.workers, -10 ** 9, dtype=np.int64)
        self._raw: dict[int, tuple] = {}

    def _worker_raw(self, worker, rng, length):
        """Per-partition times, burst-start uniforms and burst lengths of one worker's block."""
        base, _ = super()._worker_block(worker, rng, length)
        return base, rng.random(length), rng.integers(1, self.B + 1, length)

    def _raw_block(self, k):
        if k not in self._raw:
            base = np.empty((BLOCK, self.workers))
            u = np.empty((BLOCK, self.workers))
            lengths = np.empty((BLOCK, self.workers), dtype=np.int64)
            for w in range(self.workers):
                base[:, w], u[:, w], lengths[:, w] = self._worker_raw(
                    w, stream(self.seed, "straggler", w, k), BLOCK)
            if len(self._raw) >= 8:
                self._raw.pop(next(iter(self._raw)))
            self._raw[k] = (base, u, lengths)
        return self._raw[k]

    def _decide(self, upto):
        """Decide burst starts of every step < upto."""
        need = upto + self.B + self.W
        if self._flags.shape[0] < need:
            grown = np.zeros((max(need, 2 * self._flags.shape[0]), self.workers), dtype=bool)
            grown[:self._flags.shape[0]] = self._flags
            self._flags = grown
        W = self.W
        while self._done < upto:
            t = self._done
            _, u, lengths = self._raw_block(t // BLOCK)
            row = t % BLOCK
            for i in np.flatnonzero(u[row] < self.p_start):
                if self._flags[t, i] or self._last_end[i] > t - W:
                    continue
                L = int(lengths[row, i])
                lo, hi = max(0, t - W + 1), t + L + W - 1  # steps sharing a window with the burst
                others = self._flags[lo:hi].any(axis=0)
                others[i] = False
                if others.sum() >= self.lam:
                    continue
                self._flags[t:t + L, i] = True
                self._last_end[i] = t + L - 1
            self._done += 1

    def straggling(self, first, steps) -> np.ndarray:
        """bool (steps, workers): which workers straggle at steps first .. first+steps-1."""
        self._decide(first + steps)
        return self._flags[first:first + steps].copy()

    def draw(self, first, steps):
        if first < 0 or steps < 0:
            raise ValueError(f"bursty: steps must be >= 0, got first={first}, steps={steps}")
        base = np.empty((steps, self.workers))
        pos = first
        while pos < first + steps:
            k, off = divmod(pos, BLOCK)
            take = min(BLOCK - off, first + steps - pos)
            base[pos - first:pos - first + take] = self._raw_block(k)[0][off:off + take]
            pos += take
        slow = self.straggling(first, steps)
        return np.where(slow, base * self.slowdown, base), np.zeros((steps, self.workers))

    def params(self):
        return dict(a=self.a, mu=self.mu, B=self.B, W=self.W, lam=self.lam, p_start=self.p_start,
                    slowdown=self.slowdown)


class TraceReplay(StragglerModel):
    """Replay recorded per-partition compute times: a (steps, workers) array of seconds, given as
    ``times=`` or read from ``path`` (``.csv``: comma-separated, ``#`` comments, one row per step;
    ``.npz``: the array ``times``, or the only array in the file). Worker i's time at step t is
    ``load * trace[t mod steps, i]``: the trace is taken as unit-load times and wraps around
    (``wrap=False`` makes stepping past its end an error). No randomness; ``seed`` is unused."""

    name = "trace"
    description = "replay a recorded (steps, workers) table of times (CSV or NPZ)"

    def __init__(self, workers, seed=0, path=None, times=None, wrap=True):
        super().__init__(workers, seed)
        if (path is None) == (times is None):
            raise ValueError("trace: give exactly one of path= and times=")
        if path is not None:
            times = load_trace(path)
        times = np.asarray(times, dtype=np.float64)
        if times.ndim != 2 or times.shape[0] < 1:
            raise ValueError(f"trace: times must be a (steps, workers) table, got shape {times.shape}")
        if times.shape[1] != self.workers:
            raise ValueError(f"trace: the trace has {times.shape[1]} workers (columns), the run has "
                             f"{self.workers}")
        if not np.all(np.isfinite(times)) or np.any(times < 0):
            raise ValueError("trace: times must be finite and >= 0")
        self.path, self.trace, self.wrap = path, times, bool(wrap)

    def draw(self, first, steps):
        if first < 0 or steps < 0:
            raise ValueError(f"trace: steps must be >= 0, got first={first}, steps={steps}")
        n = self.trace.shape[0]
        if not self.wrap and first + steps > n:
            raise ValueError(f"trace: step {first + steps - 1} is past the trace's {n} steps (wrap=False)")
        rows = np.arange(first, first + steps) % n
        return self.trace[rows], np.zeros((steps, self.workers))

    def params(self):
        return dict(path=self.path, steps=self.trace.shape[0], wrap=self.wrap)


def load_trace(path: str) -> np.ndarray:
    """A (steps, workers) float64 table from a .csv or .npz file."""
    path = str(path)
    if path.endswith(".npz"):
        with np.load(path) as data:
            if "times" in data.files:
                return np.asarray(data["times"], dtype=np.float64)
            if len(data.files) == 1:
                return np.asarray(data[data.files[0]], dtype=np.float64)
            raise ValueError(f"trace: {path} has arrays {data.files}; name the table 'times'")
    if path.endswith(".csv"):
        return np.atleast_2d(np.loadtxt(path, delimiter=",", comments="#", dtype=np.float64))
    raise ValueError(f"trace: {path!r} is neither .csv nor .npz")


def _builtin_models() -> tuple[type[StragglerModel], ...]:
    return (Constant, ShiftedExponential, PersistentStragglers, BernoulliStragglers, BurstyStragglers,
            TraceReplay)


STRAGGLER_MODELS = Registry("straggler model", "ordersim.straggler_models", _builtin_models,
                            lambda: StragglerModel)


def make_straggler_model(name: str, workers: int, seed: int = 0, **params) -> StragglerModel:
    """A model by registered name (or path to a .py file); ValueError naming what is wrong."""
    cls = STRAGGLER_MODELS.get_class(name)
    try:
        return cls(workers, seed, **params)
    except TypeError as err:  # unknown parameter name
        raise ValueError(f"{name}: {err}") from None


@dataclass(frozen=True)
class CommModel:
    """Time to send one message of ``nbytes``: ``latency + nbytes / bandwidth`` seconds.

    ``latency`` >= 0 seconds, ``bandwidth`` > 0 bytes per second (``inf``: transfer is free). The
    default is free communication, so step times are pure compute times."""

    latency: float = 0.0
    bandwidth: float = math.inf

    def __post_init__(self):
        _positive("latency", self.latency, allow_zero=True)
        _positive("bandwidth", self.bandwidth, allow_inf=True)

    def time(self, nbytes: float) -> float:
        return self.latency + (0.0 if math.isinf(self.bandwidth) else nbytes / self.bandwidth)


# -- the simulator's side (docs/stragglers.md) ------------------------------------------------------
# Exact schemes (Scheme.exact) decode the full gradient Σ_j g_j: training keeps the plain sum (bit
# for bit the run without stragglers) and only the clock runs. The others change the update itself:
# the model moves along the scheme's decoded gradient (Run's coded path, engine.apply_coded_update).
COMM_OPTIONS = ("latency", "bandwidth")  # straggler_options that set the CommModel


class EpochClock:
    """What ``Run`` holds when ``stragglers`` is set: the simulated time of every step, advanced
    per epoch from the scheme's wait rule (vectorized; no gradients needed), the decode weights of
    the decoded schemes, per-example coverage, and the records the trace stores. Depends only on
    (seed, workers, step): every rank computes the same numbers."""

    def __init__(self, model: StragglerModel, scheme, dim: int, comm: CommModel):
        self.model, self.scheme, self.dim, self.comm = model, scheme, dim, comm
        self.decoded = not scheme.exact
        self.now = 0.0
        self.pending: dict[str, list] = {"step_time": [], "responded": []}
        self.pending_epoch: dict[str, list] = {}
        self.epoch_times: list[float] = []
        self.last_coverage = None  # (k, n) counts by visit position of the last covered epoch
        self._epoch_weights = None  # ((first, span), weights) of the last epoch asked for

    def arrivals(self, first: int, steps: int) -> np.ndarray:
        """(steps, n_w) arrival times at the server: compute time at each step's load (pipelined
        GC's step 0 has load s+1) plus the upload."""
        base, extra = self.model.draw(first, steps)
        return self.scheme.loads(first, steps)[:, None] * base + extra + self.comm.time(8 * self.dim)

    def advance(self, first: int, steps: int) -> float:
        """Simulated time of steps first .. first+steps-1 (one epoch); returns their total."""
        message = self.comm.time(8 * self.dim)
        arrival = self.arrivals(first, steps)
        decode = self.scheme.step_times(arrival)
        step_time = decode + message  # the model's broadcast, then the wait for the decoder
        self.pending["step_time"].append(step_time)
        self.pending["responded"].append((arrival <= decode[:, None]).astype(np.uint8))
        total = float(step_time.sum())
        self.now += total
        self.epoch_times.append(total)
        return total

    def weights(self, first: int, steps: int) -> np.ndarray:
        """(steps, k, s+1): weights[t, j, age], the weight of partition j's gradient computed
        ``age`` steps before step first+t in that step's decoded gradient (Scheme.steps_weights)."""
        return self.scheme.steps_weights(self.arrivals(first, steps), first)[0]

    def epoch_weights(self, first: int, steps: int, end: int) -> np.ndarray:
        """``weights`` of the epoch of steps first .. first+steps-1 and, pipelined, of the s steps
        after it (up to ``end``, the run's last step + 1), whose updates still use the epoch's
        gradients: computed once for update_coefficients and cover."""
        ahead = self.scheme.s if self.scheme.pipelined else 0
        span = (first, min(steps + ahead, end - first))
        if self._epoch_weights is None or self._epoch_weights[0] != span:
            self._epoch_weights = (span, self.weights(*span))
        return self._epoch_weights[1]

    def update_coefficients(self, first: int, steps: int, n: int, b: int, end: int) -> np.ndarray:
        """(steps, k, s+1) coefficients of the coded update: weights[t, j, age] / (k · c(t − age)),
        c(u) the examples per partition at step u (b, or fewer at an epoch's last step), so that
        Σ_j Σ_age coef · (partition j's gradient sum of step t − age) is the decoded estimate of
        the mean gradient (the plain path's Σ_j g_j / (m · c)). ``end``: the run's last step + 1."""
        w = self.epoch_weights(first, steps, end)[:steps]
        per_epoch = -(-n // b)
        ages = np.arange(self.scheme.s + 1)
        u = np.arange(first, first + steps)[:, None] - ages[None, :]
        count = np.minimum(b, n - (u % per_epoch) * b).astype(np.float64)  # (steps, s+1)
        return w / (self.scheme.k * count[:, None, :])

    def cover(self, first: int, steps: int, n: int, b: int, end: int) -> None:
        """Per-example coverage of the epoch of steps first .. first+steps-1: how many updates
        (steps < ``end``, the run's last step + 1) each example's gradient entered with a non-zero
        weight, and its total weight. A gradient computed at step u enters the updates u .. u+s
        (pipelined GC; later ones belong to the next epoch's first steps but count for the epoch
        that computed it). Records per-epoch min/mean/max of both over the k·n examples and keeps
        the counts by visit position in ``last_coverage`` (k, n)."""
        k = self.scheme.k
        if self.decoded:
            w = self.epoch_weights(first, steps, end)  # (span, k, s+1), span <= steps + s
            self._epoch_weights = None  # the epoch is done: no one asks again (its size is the epoch's)
            count = np.zeros((steps, k))
            total = np.zeros((steps, k))
            for age in range(self.scheme.s + 1):
                used = w[age:, :, age][:steps]  # updates at step u + age of gradients of step u
                rows = used.shape[0]
                count[:rows] += used != 0
                total[:rows] += used
        else:  # the exact sum: every gradient enters its own step's update once, with weight 1
            count, total = np.ones((steps, k)), np.ones((steps, k))
        per_example = np.repeat(np.arange(steps), b)[:n]  # visit position -> step of the epoch
        count, total = count[per_example].T, total[per_example].T  # (k, n)
        self.last_coverage = count.astype(np.int16)
        for name, values in (("coverage", count), ("coverage_weight", total)):
            for stat in ("min", "mean", "max"):
                self.pending_epoch.setdefault(f"{name}_{stat}", []).append(float(getattr(values, stat)()))

    def coverage_by_example(self, order: np.ndarray) -> np.ndarray:
        """The last covered epoch's counts (k, n) int16 by local example index, given that epoch's
        visit orders (k, n)."""
        out = np.empty_like(self.last_coverage)
        np.put_along_axis(out, np.asarray(order), self.last_coverage, axis=1)
        return out

    def skip(self, epochs: int, steps_per_epoch: int) -> None:
        """Advance through ``epochs`` whole epochs from step 0 without recording (a resumed run)."""
        for e in range(epochs):
            self.advance(e * steps_per_epoch, steps_per_epoch)
        self.take()

    def record(self) -> dict:
        """Per-epoch trace fields: cumulative simulated time and the last epoch's."""
        return dict(sim_time=self.now, sim_epoch_time=self.epoch_times[-1] if self.epoch_times else 0.0)

    def attrs(self) -> dict:
        return dict(straggler_model=self.model.name, straggler_params=json.dumps(self.model.params(), sort_keys=True),
                    coding=self.scheme.name, coding_s=self.scheme.s, load=self.scheme.load,
                    latency=self.comm.latency, bandwidth=self.comm.bandwidth)

    def take(self) -> dict:
        """The per-step and per-epoch arrays gathered since the last call (for the trace's
        ``stragglers`` group), and forget them."""
        out = {k: np.concatenate(v) if v else None for k, v in self.pending.items()}
        out.update({k: np.asarray(v) for k, v in self.pending_epoch.items() if v})
        for v in self.pending.values():
            v.clear()
        self.pending_epoch.clear()
        return out


def comm_and_model(config, workers: int, seed: int) -> tuple[CommModel, StragglerModel]:
    """The communication model and the straggler model that ``config.straggler_options`` set;
    ValueError (TypeError, OSError: a trace file) naming what is wrong."""
    options = dict(config.straggler_options)
    comm = CommModel(**{k: float(options.pop(k)) for k in COMM_OPTIONS if k in options})
    return comm, make_straggler_model(config.stragglers, workers, seed, **options)


def scheme_from_config(config, workers: int, seed: int):
    """The config's coding scheme (wait-all tolerates no straggler, whatever coding_s says)."""
    from ordersim.coding import make_scheme

    return make_scheme(config.coding, workers, config.coding_s if config.coding != "wait-all" else 0, seed)


def clock_from_config(config, workers: int, dim: int, seed: int) -> EpochClock | None:
    """The run's clock, or None when ``config.stragglers`` is empty (config.check_fields has
    checked the fields)."""
    if not config.stragglers:
        return None
    comm, model = comm_and_model(config, workers, seed)
    return EpochClock(model, scheme_from_config(config, workers, seed), dim, comm)


__all__ = ["BLOCK", "COMM_OPTIONS", "STRAGGLER_MODELS", "CommModel", "EpochClock", "StragglerModel",
           "clock_from_config", "comm_and_model", "load_trace", "make_straggler_model", "scheme_from_config"]
