"""The simulator: synchronous data-parallel SGD over m workers, one run per (orderer, seed).

One code path drives both backends (ordersim.backend): a rank hosts workers first..last-1 and holds
only their shards. Per step, every worker's gradient sum over its b examples is computed, the
workers' sums are gathered (all of every worker's gradients for a coordinated orderer such as
cd-grab) and added in worker order, so the result is the same bit for bit on any number of ranks.
An epoch is one call of the jitted loop both backends share (engine.epoch_loop), its inputs built
in one place (Run.epoch_inputs).
"""

import json
import math
import os
import sys
import time
import warnings
from dataclasses import dataclass, replace

import numpy as np

from ordersim import aligned, engine, metrics, provenance, regime
from ordersim.constants import HookError, WorkerRows, worker_constants
from ordersim.data import open_dataset, partition, streamed_source
from ordersim.measurements import run_measurements
from ordersim.measurements.base import RunView, read_only, values_error
from ordersim.backend import SerialBackend
from ordersim.checkpoint import (CheckpointError, checkpoint_path, discard, layout_mismatch, new_run_id,
                                 normalized, remove_temporaries)
from ordersim.checkpoint import save as save_checkpoint
from ordersim.cli import counted
from ordersim.compile_notice import compile_notice
from ordersim.config import Config, ConfigError, check_fields  # noqa: F401  (check_fields: the set-up's first step)
from ordersim.orderers import build_orderer
from ordersim.orderers._projection import project_rows
from ordersim.output import unwritable
from ordersim.stop import StopRequest
from ordersim.streams import stream
from ordersim.stragglers import clock_from_config
from ordersim.trace import NoTrace, TraceWriter, utc_now
from ordersim.problems import make_problem, problem_class
from ordersim.problems.base import kernel_probe_error, probe_rows

NO_COEFFICIENTS = np.zeros((1, 1, 1))  # the coefficients of plain (not decoded) updates
# Bound on the doubles a chunk buffer holds (herding's step sums).
CHUNK_DOUBLES = 1 << 20


def default_out_path() -> str:
    return time.strftime("ordersim-%Y%m%d-%H%M%S.h5", time.gmtime())


def check_output(path: str) -> str | None:
    """Try to create the output file (rank 0); the one-line error, or None. A file made by the try
    is removed again, so that a config error found later leaves nothing behind."""
    try:
        directory = os.path.dirname(os.path.abspath(path))
        os.makedirs(directory, exist_ok=True)
        existed = os.path.exists(path)
        with open(path, "ab"):
            pass
        if not existed:
            os.remove(path)
    except OSError as err:
        return unwritable("config field 'out'", path, err)
    return None


@dataclass
class Setup:
    """Everything the runs share: data shards of this rank, the problem and its constants."""

    config: Config
    backend: SerialBackend
    problem: object
    A: np.ndarray  # this rank's shards, worker-major: local worker w's example e is row w * n + e
    y: np.ndarray
    n: int
    shards: np.ndarray  # (m, n) training-example indices of every worker
    dropped: int
    constants: dict
    test_A: np.ndarray | None  # this rank's part of the test split
    test_y: np.ndarray | None
    test_bounds: np.ndarray  # (m + 1,) test rows of worker w: test_bounds[w]..test_bounds[w+1]-1
    data_info: dict


def _open_data(config: Config, share, keep_rows: bool, ranks: int | None = None):
    """The data plan of config's data for its problem's label kind; or ConfigError."""
    try:
        problem_cls = problem_class(config.problem)
    except ValueError as err:
        raise ConfigError(f"config field 'problem': {err}") from None
    try:
        return open_dataset(config.data, standardize=config.standardize, intercept=config.intercept,
                            test_fraction=config.test_fraction, seed=config.data_seed,
                            label_kind=problem_cls.label_kind, share=share,
                            hdf5_locking=config.hdf5_locking, keep_rows=keep_rows, ranks=ranks,
                            labels_for=f"problem {config.problem!r} ({problem_cls.label_kind} labels)")
    except (ValueError, OSError) as err:
        raise ConfigError(f"config field 'data': {err}") from None


def _fit_to_data(config: Config, plan) -> tuple:
    """Problem and partition of config on the data of `plan`: what only the data can refute (the
    problem's options and labels, workers, batch) as a ConfigError naming the field at fault."""
    try:
        problem = make_problem(config.problem, plan.features, plan.classes, **config.problem_options)
        problem.check_labels(plan.y)
    except ValueError as err:
        raise ConfigError(f"config field 'problem_options': {err}") from None
    try:
        shards, dropped = partition(plan.y, config.workers, config.partition, alpha=config.alpha,
                                    seed=config.data_seed, remainder=config.remainder)
    except ValueError as err:
        raise ConfigError(f"config field {getattr(err, 'field', 'workers')!r}: {err}") from None
    n = shards.shape[1]
    if n < 1:
        raise ConfigError(f"config field 'workers': {config.workers} workers leave no example per "
                          f"worker ({plan.n_train} training examples)")
    if config.batch > n:
        raise ConfigError(f"config field 'batch': {config.batch} is more than the {counted(n, 'example')} per "
                          f"worker; allowed: 1 to {n}")
    return problem, shards, dropped


def _probe_rows(plan, problem) -> tuple[np.ndarray, np.ndarray]:
    """Two training rows and labels for the kernel probe: the first two rows this process kept,
    with the labels of training examples 0 and 1 (the same examples' in one process and on rank
    0, whose kept rows start with block 0's); rows of the problem's kind when it kept fewer."""
    rows = plan.first_kept_train(2)
    return probe_rows(problem) if rows is None else (rows, plan.y[:2])


def _plan(config: Config, share) -> tuple:
    """Problem, data plan, partition; or ConfigError naming the field at fault. The problem's
    kernels are probed here, before anything compiles them (kernel_probe_error)."""
    plan = _open_data(config, share, keep_rows=True)
    problem, shards, dropped = _fit_to_data(config, plan)
    check_kernels(problem, *_probe_rows(plan, problem))
    return problem, plan, shards, dropped


def check_kernels(problem, A, y) -> None:
    """kernel_probe_error's line as a ConfigError."""
    error = kernel_probe_error(problem, A, y)
    if error:
        raise ConfigError(f"config field 'problem': {error}")


# The fields that choose a data plan (open_dataset's arguments)
DATA_FIELDS = ("data", "standardize", "intercept", "test_fraction", "data_seed", "hdf5_locking")


def check_cells_against_data(cells: list[tuple[Config, object]], ranks: int) -> None:
    """A sweep's cells (checked configs, Cell) against their data before the first one computes:
    each data set opened once, in this process, keeping no rows (one pass that checks them and
    counts the labels; the memory check per rank of a run on `ranks`), each cell's problem fitted
    to it and its kernels probed (check_kernels, on rows of its kind); ConfigError naming the cell
    and the field at fault."""
    plans = {}
    for config, cell in cells:
        try:
            kind = problem_class(config.problem).label_kind
            key = (*(getattr(config, name) for name in DATA_FIELDS), kind)
            if key not in plans:
                plans[key] = _open_data(config, None, keep_rows=False, ranks=ranks)
            problem = _fit_to_data(config, plans[key])[0]
            check_kernels(problem, *probe_rows(problem))  # no rows kept here: rows of its kind
        except ConfigError as err:
            where = f"sweep cell {cell.index} ({json.dumps(cell.params)})" if cell else "sweep cell"
            raise ConfigError(f"{where}: {err}") from None


class StoppedInSetup(Exception):
    """SIGTERM or SIGUSR1 arrived (on some rank) during the set-up; the message names the phase."""


def stop_at_phase_boundary(backend: SerialBackend, stop: StopRequest | None, phase: str) -> None:
    """At a boundary of the set-up's phases: StoppedInSetup on every rank when a stop was
    requested on any (one small all-reduce; the set-up holds nothing worth a checkpoint)."""
    if backend.any(stop is not None and stop.requested):
        raise StoppedInSetup(phase)


@dataclass
class PlannedData:
    """The set-up's first phase on this rank: the problem, the data plan (rank 0's, or every rank's
    for a streamed source; None where the rows come from rank 0), the partition and the labels."""

    streamed: bool
    problem: object
    plan: object
    shards: np.ndarray
    dropped: int
    labels: np.ndarray
    test_labels: np.ndarray | None
    info: dict
    features: int


def plan_data(config: Config, backend: SerialBackend, stop: StopRequest | None = None) -> PlannedData:
    """Open and check the data, build the problem, partition: every error of the data and of what
    depends on its size (problem options, workers, batch) as a ConfigError on every rank. Cheap
    next to compiling (it reads the data once, with the few kernels that needs), so a run does it
    before warm_node_first, which compiles all of the config's kernels."""
    streamed = streamed_source(config.data)
    error, planned = None, None
    if streamed or backend.rank == 0:
        try:
            planned = _plan(config, backend)
        except ConfigError as err:
            error = str(err)
    error = backend.agree(error)
    if error:
        raise ConfigError(error)
    stop_at_phase_boundary(backend, stop, "opening the data and building the problem")
    if streamed:
        problem, plan, shards, dropped = planned
        return PlannedData(True, problem, plan, shards, dropped, plan.y, plan.y_test, plan.info, plan.features)
    # labels, partition and what the plan knows, from rank 0
    if backend.rank == 0:
        problem, plan, shards, dropped = planned
        meta = dict(features=plan.features, classes=plan.classes, y=plan.y, y_test=plan.y_test,
                    shards=shards, dropped=dropped, info=plan.info)
    meta = backend.bcast(meta if backend.rank == 0 else None)
    if backend.rank != 0:
        problem = make_problem(config.problem, meta["features"], meta["classes"], **config.problem_options)
        plan = None
    return PlannedData(False, problem, plan, meta["shards"], meta["dropped"], meta["y"], meta["y_test"],
                       meta["info"], meta["features"])


def prepare(config: Config, backend: SerialBackend, stop: StopRequest | None = None,
            planned: PlannedData | None = None) -> Setup:
    """Load data, build the problem, partition, constants; ConfigError on bad input, on every rank.

    No rank holds more of the data set than its workers' shards and test rows. Synthetic, HDF5,
    LIBSVM, CSV and npz data are read by every rank, each only its rows (the pass that checks the
    rows and computes the standardization statistics is split among the ranks); the scikit-learn
    sets are loaded by rank 0, which sends every rank its rows. The constants are computed from
    per-worker sums. After each phase (the data plan, the rows, the constants) a stop requested
    through `stop` raises StoppedInSetup on every rank. `planned`: plan_data's result, when the
    caller ran the first phase itself.
    """
    if planned is None:
        planned = plan_data(config, backend, stop)
    streamed, problem, plan, shards = planned.streamed, planned.problem, planned.plan, planned.shards
    dropped, labels, test_labels = planned.dropped, planned.labels, planned.test_labels
    info, features = planned.info, planned.features

    per_rank = config.workers // backend.size
    n = shards.shape[1]

    def train_rows(rank):
        return shards[rank * per_rank:(rank + 1) * per_rank].reshape(-1)

    def rows_for(rank_rows, shape):  # this rank's rows: read here, or sent by rank 0
        if streamed:
            return rank_rows(backend.rank)
        return backend.scatter_rows(None if plan is None else rank_rows, shape)

    A = rows_for(lambda r: plan.train_rows(train_rows(r)), (per_rank * n, features))
    y = np.ascontiguousarray(labels[train_rows(backend.rank)])
    test_A = test_y = None
    test_rows = 0 if test_labels is None else test_labels.shape[0]
    test_bounds = np.linspace(0, test_rows, config.workers + 1).astype(np.int64)
    if test_rows:
        lo, hi = test_bounds[backend.first], test_bounds[backend.last]
        test_A = rows_for(lambda r: plan.test_rows(test_bounds[r * per_rank], test_bounds[(r + 1) * per_rank]),
                          (hi - lo, features))
        test_y = np.ascontiguousarray(test_labels[lo:hi])
    stop_at_phase_boundary(backend, stop, "reading the data rows")
    with warnings.catch_warnings():
        if backend.rank != 0:  # every rank runs the same solver: one copy of its warnings is enough
            warnings.simplefilter("ignore")
        try:
            constants = worker_constants(problem, WorkerRows(backend, A, y, n), shards,
                                         cache_dir=config.cache_dir or None)
        except HookError as err:  # on every rank: one line, not a traceback
            raise ConfigError(f"config field 'problem': {err}") from None
    stop_at_phase_boundary(backend, stop, "computing the problem's constants")
    if config.schedule == "theory" and not (constants.get("mu") or 0) > 0:
        raise ConfigError("config field 'schedule': 'theory' needs a problem with mu > 0 (a PL or "
                          f"strongly convex problem); {config.problem} has mu = {constants.get('mu')}")
    return Setup(config, backend, problem, A, y, n, shards, dropped, constants, test_A,
                 test_y, test_bounds, info)


def learning_rate(config: Config, epoch: int, setup: Setup, orderer: str = "rr") -> float:
    """Step size of epoch `epoch` (0-based) for `orderer`; formulas in docs/simulator.md."""
    t = epoch
    if config.schedule == "constant":
        return config.lr
    if config.schedule == "step":
        return config.lr * config.lr_decay ** (t // config.lr_step)
    if config.schedule == "inv-epoch":
        return config.lr / (1.0 + config.lr_decay * t)
    if config.schedule == "inv-sqrt-epoch":
        return config.lr / math.sqrt(1.0 + config.lr_decay * t)
    # theory: the orderer's PL step size (ordersim.regime), capped by lr
    return min(config.lr, regime.theory_step(orderer, config.workers, setup.n, config.epochs,
                                             setup.constants["mu"]))


def theory_regime(config: Config, setup: Setup, orderer: str) -> dict:
    """Run attributes: the step size and the quantities the analyses' assumptions are stated in
    (ordersim.regime), for every schedule on a problem with a known L_max; {} without one."""
    if not math.isfinite(setup.constants.get("L_max") or math.nan):
        return {}
    alpha = max(learning_rate(config, epoch, setup, orderer) for epoch in range(config.epochs))
    constant = config.schedule in regime.CONSTANT_SCHEDULES
    out = {"step_size" if constant else "largest_step": alpha,
           **regime.regime(alpha, setup.constants, config.workers, setup.n, config.epochs, config.batch,
                           config.momentum, config.schedule)}
    if config.schedule == "theory":  # step_size is min(lr, theory_step): below it, not the analysed step
        out["theory_step"] = regime.theory_step(orderer, config.workers, setup.n, config.epochs,
                                                setup.constants["mu"])
    return out


def warn_regime(backend, regimes: dict) -> None:
    """One line on stderr (rank 0) naming the orderers whose runs leave the analyses' regime, for
    every schedule that records it (theory_regime): a constant step outside it must say so too, or
    its rates read as the theorems'."""
    for line in (regime.regime_warning(regimes), regime.capped_warning(regimes)):
        if backend.rank == 0 and line:
            print(line, file=sys.stderr, flush=True)


def run_orderer(config: Config, backend, name: str, n: int, d: int, seed: int, linear: bool = False) -> tuple:
    """(orderer, coordinated): the orderer a run of `name` holds on this rank, with the config's
    options (build_orderer); for a `linear` problem a projecting orderer is handed Pi g, which
    the epoch loop forms from the projected rows (engine.Projection)."""
    return build_orderer(name, config.workers, n, d, seed, ranks=backend.size, first=backend.first,
                         local=backend.local_workers, orderer_options=config.orderer_options, batch=config.batch,
                         walk_c=config.walk_c or None, sign=config.sign, tie=config.tie,
                         first_order=config.first_order, run_epochs=config.epochs, projected_input=linear)


class Run:
    """One (orderer, seed) run: model, optimizer state, orderer, and the per-rank buffers."""

    def __init__(self, setup: Setup, orderer_name: str, seed: int):
        self.setup, self.seed, self.orderer_name = setup, seed, orderer_name
        config, backend, problem = setup.config, setup.backend, setup.problem
        m, n, d, b = config.workers, setup.n, problem.dim, config.batch
        self.m, self.n, self.d, self.b = m, n, d, b
        self.local = backend.local_workers
        self.orderer, self.coordinated = run_orderer(config, backend, orderer_name, n, d, seed, problem.linear)
        self.own_rows = slice(backend.first, backend.last) if self.coordinated else slice(None)
        # a linear model's rows projected once (engine.Projection): the orderer is handed Pi g
        self.projected_rows = None
        if self.orderer.projected_input:
            engine.compile_for_steps(problem.batch_grads_slopes, engine.SLOPES_KERNEL_ARGS)
            self.input_projection = self.orderer.input_projection()
            self.projected_rows = project_rows(setup.A, *self.input_projection,
                                               aligned.empty((setup.A.shape[0], self.orderer.dim)))
        # the model and every buffer of the step loops start on a cache line (ordersim/aligned.py)
        self.x = aligned.on_cache_line(problem.initial_point(stream(seed, "init")))
        engine.compile_for_steps(problem.batch_grads)  # before the step loops use it
        self.velocity = aligned.zeros(d)
        self.idx = np.empty(max(b, 1), dtype=np.int64)
        # train_time: wall-clock seconds of the training epochs, split (not exhaustively) into
        # compute, order and comm; measure_time: of the measurements, which none of them counts
        self.timers = dict(train_time=0.0, compute_time=0.0, order_time=0.0, comm_time=0.0, measure_time=0.0)
        self.status = "completed"
        self.step = 0
        self.trace_steps: list[tuple[int, int, float]] = []
        self.clock = clock_from_config(config, m, d, seed)  # simulated time (docs/stragglers.md)
        # Decoded schemes (ignore-stragglers, pipelined GC) update along the scheme's decoded
        # gradient: partition j = worker j's shard; history[u mod (s+1)] holds every partition's
        # gradient sum of step u (the last s+1 steps), on every rank.
        self.coded = self.clock is not None and self.clock.decoded
        self.history = aligned.zeros((self.clock.scheme.s + 1, m, d)) if self.coded else None
        self.steps_per_epoch = -(-n // b)
        self.measurements = [cls() for cls in run_measurements(config.measurements)]
        self.measurement_error: str | None = None  # the first plug-in's values that did not fit
        self.defer_measurement_errors = False  # the warm-up's: it agrees on them across the ranks
        self.epoch = 0  # epochs completed
        self.wall_start = time.perf_counter()
        self.buffers: dict[str, np.ndarray] = {}  # the loops' scratch, by name (buffer)
        # the loop's inputs for an orderer that is handed no gradients or no projection
        self.unused_state, self.inactive_projection = np.zeros(1, dtype=np.int64), engine.no_projection()

    # -- checkpoint -------------------------------------------------------------------------------
    def state(self) -> dict:
        """What a checkpoint keeps of this rank's run: arrays, numbers and strings only."""
        state = dict(x=self.x, velocity=self.velocity, orderer=self.orderer.checkpoint_state(),
                     step=self.step, epoch=self.epoch, status=self.status, timers=dict(self.timers),
                     elapsed=time.perf_counter() - self.wall_start)
        if self.history is not None:
            state["history"] = self.history
        return state

    def restore(self, state: dict) -> None:
        """Continue from a checkpoint's state() of this run; CheckpointError (before changing
        anything) when its layout is not the one this run has (another ordersim version)."""
        mismatch = layout_mismatch(state, normalized(self.state()))
        if mismatch:
            raise CheckpointError(f"its run state does not fit this ordersim: {mismatch}")
        self.x = aligned.on_cache_line(state["x"])
        self.velocity = aligned.on_cache_line(state["velocity"])
        self.orderer.restore_state(state["orderer"])
        self.step, self.epoch, self.status = state["step"], state["epoch"], state["status"]
        self.timers = dict(state["timers"])
        if self.history is not None:
            self.history = aligned.on_cache_line(state["history"])
        self.wall_start = time.perf_counter() - state["elapsed"]
        if self.clock:  # simulated time is a function of the steps: replay it, record nothing
            self.clock.skip(self.epoch, self.steps_per_epoch)

    # -- training ---------------------------------------------------------------------------------
    def timed(self, key, func, *args):
        start = time.perf_counter()
        result = func(*args)
        self.timers[key] += time.perf_counter() - start
        return result

    def train_epoch(self, epoch: int, lr: float) -> bool:
        """One epoch; False when the run diverged."""
        began = time.perf_counter()
        ok = self._train_epoch(epoch, lr)
        self.timers["train_time"] += time.perf_counter() - began
        return ok

    def _train_epoch(self, epoch: int, lr: float) -> bool:
        order = self.timed("order_time", self.orderer.begin_epoch)[self.own_rows]
        first_step = self.step
        end = self.setup.config.epochs * self.steps_per_epoch  # the run's last step + 1
        coef = None
        if self.coded:
            coef = self.clock.update_coefficients(first_step, self.steps_per_epoch, self.n, self.b, end)
        kernel, inputs = self.epoch_inputs(order, lr, coef)
        done = self.setup.backend.run_steps(kernel, *inputs)
        # the steps done are traced; after a divergence up to the diverging one
        self._record_steps(epoch, inputs.recording.trace_loss[:done if done >= 0 else -done - 1])
        for key, seconds in zip(("compute_time", "comm_time", "order_time"), inputs.recording.timers):
            self.timers[key] += seconds
        ok = done >= 0
        if ok:
            self.timed("order_time", self.orderer.end_epoch)
            if self.clock:
                self.clock.advance(first_step, self.step - first_step)
                self.clock.cover(first_step, self.step - first_step, self.n, self.b, end)
        return ok

    def epoch_inputs(self, order, lr, coef) -> tuple:
        """(the epoch loop, its inputs: engine.EpochInputs) for one epoch along `order` (this
        rank's rows) at step size lr; coef: a decoded scheme's update coefficients, or None.
        Its scratch is the run's (buffer): allocated at the first epoch, overwritten by every
        later one before it is read.

        The serial backend keeps the gradients (or a pair orderer's pair differences) in chunks,
        observed from inside the loop (engine.chunk_rows); the MPI backend exchanges every step's
        sums (a coordinated orderer's gradients) and observes per step, between the exchange's
        two halves."""
        s, config, orderer = self.setup, self.setup.config, self.orderer
        m, n, b, d, local = self.m, self.n, self.b, self.d, self.local
        serial = not s.backend.mpi_steps
        if not orderer.needs_gradients:
            mode, kernel = engine.NO_GRADIENTS, engine.no_observer
        elif not serial:
            mode, kernel = (engine.GATHERED if self.coordinated else engine.EACH_STEP), orderer.kernel
        elif orderer.pair_difference_kernel is not None:
            mode, kernel = engine.PAIR_DIFFERENCES, orderer.pair_difference_kernel
        else:
            mode, kernel = engine.GRADIENTS, orderer.kernel
        projecting = self.projected_rows is not None and mode != engine.NO_GRADIENTS
        width = self.orderer.dim if projecting else d  # the orderer is handed k values per example
        if mode in engine.CHUNKED:
            kept = self.buffer("kept", (m, engine.chunk_rows(mode, m, n, b, width), width))
        elif mode in (engine.EACH_STEP, engine.GATHERED):
            kept = self.buffer("kept", (local, b, width))
        else:
            kept = self.buffer("kept", (1, 1, 1))
        projection = self.inactive_projection
        if projecting:
            projection = engine.Projection(
                True, self.projected_rows, *self.input_projection, self.buffer("projection slopes", (b,)),
                self.buffer("projection gradient", (d,)), self.buffer("projection row", (width,)),
                self.buffer("projection rows", (b, width)))
        state = orderer.state if orderer.needs_gradients else self.unused_state
        # Decoded schemes (ignore-stragglers, pipelined GC) update along coef-weighted partition
        # sums kept in self.history (engine.apply_coded_update); the others along the plain sum
        # of one step (a history of one slot, no coefficients).
        history = self.history if coef is not None else self.buffer("history", (1, m, d))
        exchange = None
        if not serial:
            gathered = self.buffer("gathered", (m, b, width) if mode == engine.GATHERED else (1, 1, 1))
            # the sums, or a coordinated orderer's gradients; projecting, Pi g beside the sums
            link = s.backend.exchange_link(max(local * d, gathered.size // s.backend.size))
            exchange = engine.Exchange(link, self.buffer("sums", (local, d)), self.buffer("losses", (local, 1)),
                                       self.buffer("gathered losses", (m, 1)), gathered)
        inputs = engine.EpochInputs(
            engine.Model(self.x, self.velocity),
            engine.Data(s.A, s.y, s.problem.params, order, int(n), int(b), self.idx),
            engine.UpdateRule(float(lr), float(config.momentum), float(config.weight_decay), history,
                              NO_COEFFICIENTS if coef is None else coef, coef is not None, int(self.step),
                              self.buffer("update", (d,))),
            engine.first_class(kernel),
            engine.Observer(mode, state, kept, self.buffer("gradients", (b, d)), projection),
            exchange,
            engine.Recording(int(config.trace_every), self.buffer("step losses", (self.steps_per_epoch,)),
                             self.buffer("loop timers", (3,))))
        inputs.recording.trace_loss.fill(np.nan)  # the steps not traced stay NaN
        inputs.recording.timers.fill(0.0)
        linear = (s.problem.batch_grads_slopes, s.problem.regularizer_gradient) if projecting else None
        return engine.epoch_loop(s.problem.batch_grads, exchanging=not serial, linear=linear), inputs

    def buffer(self, name: str, shape: tuple) -> np.ndarray:
        """This run's float64 scratch array `name` of `shape` (on a cache line), allocated at
        its first use and the same array from then on: a dozen allocations an epoch cost ~0.1 ms
        (and the kept chunks' pages faulted in anew), more than a small data set's steps."""
        array = self.buffers.get(name)
        if array is None or array.shape != shape:
            array = self.buffers[name] = aligned.empty(shape)
        return array

    def _record_steps(self, epoch, losses):
        """Trace every trace_every-th global step of these (losses: one per step) and count them."""
        every = self.setup.config.trace_every
        if every:
            for k in range(-self.step % every, len(losses), every):
                self.trace_steps.append((epoch, self.step + k, float(losses[k])))
        self.step += len(losses)

    # -- measurement ------------------------------------------------------------------------------
    def measure(self, epoch: int) -> dict:
        """The record of a measured epoch: the full-gradient pass, the measurements' values
        (ordersim.measurements), the walk metrics over the next order and the clocks.

        A measurement whose values do not fit its declaration is skipped (the others still run,
        so every rank takes part in every collective) and named in measurement_error; the record
        done, that raises ValueError, unless defer_measurement_errors (the warm-up, which turns
        it into a config error on every rank).

        A diverging model's values overflow to inf or NaN without NumPy's RuntimeWarnings: the
        record says so, and the run stops there with one line (report_divergence)."""
        with np.errstate(over="ignore", invalid="ignore"):
            return self._measure(epoch)

    def _measure(self, epoch: int) -> dict:
        s, backend = self.setup, self.setup.backend
        p, m, n, d = s.problem, self.m, self.n, self.d
        began = time.perf_counter()
        local = np.empty((self.local, d + 2))
        for w in range(self.local):
            idx = np.arange(w * n, (w + 1) * n, dtype=np.int64)
            local[w, 0] = p.full_grad(self.x, s.A, s.y, idx, p.params, local[w, 2:])
            local[w, 1] = p.accuracy(self.x, s.A, s.y, idx, p.params)
        gathered = self._gather(local)
        totals = engine.sum_in_worker_order(gathered) / m
        mean_grad = totals[2:]
        worker_grads = np.ascontiguousarray(local[:, 2:])
        record = dict(epoch=epoch, train_loss=totals[0], grad_norm=float(np.linalg.norm(mean_grad)))
        if not math.isnan(totals[1]):
            record["train_accuracy"] = totals[1]
        record.update(self._measurements(RunView(
            epoch=epoch, x=self.x.copy(), problem=p, A=s.A, y=s.y, test_A=s.test_A, test_y=s.test_y,
            test_bounds=s.test_bounds, workers=m, n=n, first=backend.first, local=self.local,
            constants=s.constants, train_loss=totals[0], mean_grad=read_only(mean_grad),
            worker_grads=read_only(worker_grads), config=s.config, backend=backend, gather=self._gather)))
        # The walk metrics stay here, not measurements: they walk the orderer's next order in
        # chunks with the run's index and scratch buffers, which a view would have to expose
        # whole (the Run itself) to keep.
        if s.config.herding:
            record["herding_inf"], record["herding_2"], record["avg_grad_error"] = \
                self._herding(mean_grad, worker_grads)
        if s.config.shuffle_variance:
            record.update(self._shuffle_variance(epoch))
        record["balance_discrepancy"] = backend.max(getattr(self.orderer, "balance_discrepancy", 0.0)) \
            if epoch > 0 else 0.0
        now = time.perf_counter()
        self.timers["measure_time"] += now - began
        record["wall_time"] = now - self.wall_start
        record.update(self.timers)
        if self.clock:
            record.update(self.clock.record())
        if self.measurement_error and not self.defer_measurement_errors:
            raise ValueError(self.measurement_error)
        return record

    def _measurements(self, view: RunView) -> dict:
        """Every measurement's values, in the run's order, those that fit their declaration. In
        the warm-up (defer_measurement_errors) the ranks also compare their values: only rank 0's
        reach the trace, so a measurement that forgot view.gather_workers would make the trace
        depend on the number of ranks."""
        values = {}
        for measurement in self.measurements:
            got = measurement.measure(view)
            error = values_error(type(measurement), got)
            if self.defer_measurement_errors and not same_on_every_rank(self.setup.backend.allgather(got)):
                error = error or ("returned different values on different ranks (a value over the "
                                  "workers must come from view.gather_workers, which gives every "
                                  "rank all of them; docs/adding.md, \"A trace dataset\")")
            if error is None:
                values.update((key, value) for key, value in got.items() if value is not None)
            elif self.measurement_error is None:
                self.measurement_error = f"config field 'measurements': measurement {measurement.name!r} {error}"
        return values

    def _gather(self, local):
        """Every worker's rows of `local`, on every rank: for measurements and recorded orders
        (measure_time, not the training's comm_time)."""
        return self.setup.backend.gather_workers(local, np.empty((self.m, *local.shape[1:]), local.dtype))

    def _herding(self, mean_grad, worker_means) -> tuple[float, float, float]:
        """Parallel herding (inf, 2) and the average gradient error of the next epoch's order, on
        gradients at the current model, in one pass. worker_means (local, d): this rank's
        workers' mean gradients; the error is each worker's with its own mean (docs/algorithms.md,
        "Metrics"), averaged over the m workers in worker order."""
        s, p = self.setup, self.setup.problem
        m, n, b, d = self.m, self.n, self.b, self.d
        order = self.orderer.order[self.own_rows]
        steps_total = -(-n // b)
        chunk = max(1, CHUNK_DOUBLES // (m * d))
        prefix, peaks = np.zeros(d), np.zeros(2)
        worker_prefix, errors = np.zeros((self.local, d)), np.zeros(self.local)
        scratch = self.buffer("gradients", (b, d))
        for first in range(0, steps_total, chunk):
            steps = min(chunk, steps_total - first)
            local = self.buffer("herding step sums", (self.local, steps, d))
            for w in range(self.local):
                metrics.step_sums_and_grad_error(p.batch_grads, self.x, s.A, s.y, p.params, order, w, w * n,
                                                 first, steps, b, n, self.idx, scratch, local[w],
                                                 worker_means[w], worker_prefix[w], errors)
            gathered = self._gather(local)
            counts = np.minimum(b, n - (first + np.arange(steps)) * b).astype(np.float64)
            engine.accumulate_herding(gathered, counts, mean_grad, prefix, peaks)
        error = engine.sum_in_worker_order(self._gather(errors.reshape(-1, 1)))[0] / m
        return float(peaks[0]), float(peaks[1]), float(error)

    def _shuffle_variance(self, epoch: int) -> dict:
        """The shuffling variance at x* of the next epoch's order and its bounds (docs/algorithms.md,
        "Metrics"): every worker walks its own order at x*, the values are averaged over the m
        workers per position (in worker order) and the largest is kept."""
        s, p, c = self.setup, self.setup.problem, self.setup.constants
        n, d = self.n, self.d
        gamma = learning_rate(s.config, epoch, s, self.orderer_name) / (self.m * self.b)
        order = self.orderer.order[self.own_rows]
        values = np.empty((self.local, n))
        for w in range(self.local):
            metrics.shuffle_variance_walk(p.batch_grads, p.full_loss, c["x_star"], s.A, s.y, p.params, order,
                                          w, w * n, gamma, self.idx, np.empty((1, d)), np.empty(d),
                                          np.empty(d), values[w])
        per_position = engine.sum_in_worker_order(self._gather(values)) / self.m
        spread = gamma * n * c["sigma2_star"]
        return dict(shuffle_variance=float(per_position.max()), shuffle_variance_upper=spread * c["L"] / 4,
                    shuffle_variance_lower=spread * c["mu"] / 8)


# Examples per worker of the warm-up's epoch (at least two steps): Numba compiles for argument
# types, not sizes, so a slice of every shard compiles all a whole epoch would.
WARM_UP_EXAMPLES = 16


def warm_up_slice(setup: Setup) -> Setup:
    """The set-up with every worker's shard cut to its first WARM_UP_EXAMPLES (or 2 b) examples."""
    n = min(setup.n, max(WARM_UP_EXAMPLES, 2 * setup.config.batch))
    if n == setup.n:
        return setup
    local = setup.A.shape[0] // setup.n
    A = aligned.on_cache_line(setup.A.reshape(local, setup.n, -1)[:, :n].reshape(local * n, -1))
    y = np.ascontiguousarray(setup.y.reshape(local, setup.n)[:, :n].reshape(-1))
    return replace(setup, A=A, y=y, n=n, shards=setup.shards[:, :n])


def warm_up(setup: Setup, orderer_name: str, seed: int) -> float:
    """Compile what a run of this orderer calls before its clock starts; the seconds it took.

    A throwaway Run trains one epoch (step size 0) on a slice of every worker's shard
    (warm_up_slice) and measures once, so that Numba compiles the step loops, the orderer's
    kernels and the measurement for these argument types here and not in the first timed epoch.
    Collective under MPI (every rank warms up alike); it touches no state of the real run (its
    own model, orderer and clock). A measurement plug-in whose values do not fit its declaration
    raises ConfigError here, on every rank.
    """
    start = time.perf_counter()
    sliced = warm_up_slice(setup)
    scratch = Run(sliced, orderer_name, seed)
    try:
        scratch.train_epoch(1, 0.0)
    except ValueError as failure:  # an orderer's own check names the slice's n, not the run's
        if sliced.n != setup.n:
            failure.add_note(f"(in the warm-up: an epoch on the first {sliced.n} of every worker's "
                           f"{setup.n} examples, so n = {sliced.n} there)")
        raise
    scratch.defer_measurement_errors = True
    scratch.measure(1)
    error = setup.backend.agree(scratch.measurement_error)
    if error:
        raise ConfigError(error)
    return time.perf_counter() - start


def same_on_every_rank(values: list) -> bool:
    """Whether every rank's measurement values (allgathered) are the same, NaN equal to NaN.
    Values that do not fit a declaration count as the same: values_error names those."""
    first = values[0]
    try:
        return all(other.keys() == first.keys() and all(
            np.array_equal(np.asarray(other[k], dtype=float), np.asarray(first[k], dtype=float), equal_nan=True)
            for k in first) for other in values[1:])
    except (AttributeError, TypeError, ValueError):
        return True


class Checkpointed(Exception):
    """The job stopped at an epoch boundary after writing a checkpoint (exit EXIT_CHECKPOINTED)."""


def run_plan(config: Config) -> list[tuple[str, int]]:
    """The (orderer, seed) runs in the order they run (a checkpoint's position indexes it)."""
    return [(orderer, seed) for orderer in config.orderers for seed in config.seeds]


def run_experiment(config: Config, backend: SerialBackend, setup: Setup, out: str,
                   stop: StopRequest | None = None, resume: dict | None = None,
                   cell=None, started: float | None = None) -> dict:
    """Every (orderer, seed) run; returns {orderer: [final records]} for the summary table.

    With `resume` (a loaded checkpoint) the trace is cut back to the checkpoint and the plan goes
    on from there. When `stop` was requested, or every `checkpoint_every` epochs, the ranks write
    a checkpoint at an epoch boundary; after a stop request, Checkpointed is raised. A checkpoint
    whose run state does not fit raises ConfigError on every rank, before the trace is touched.
    `cell` (a sweep.Cell) is recorded in the trace's root attributes; `started` (perf_counter) is
    when the command began, for the trace's `setup_time` (default: now).
    """
    started = time.perf_counter() if started is None else started
    plan = run_plan(config)
    position, resumed = 0, None
    results: dict[str, list[dict]] = {}
    ckpt = checkpoint_path(out)
    warm_up_times: dict[str, float] = {}  # seconds of each orderer's warm-up (its kernels compiled)

    def compile_once(name: str, seed: int) -> float:
        """Seconds the warm-up of orderer `name` took (the same at every call)."""
        if name not in warm_up_times:
            with compile_notice(f"the kernels of {name}", backend.rank == 0 and not config.quiet):
                warm_up_times[name] = warm_up(setup, name, seed)
        return warm_up_times[name]

    first_runs = set()  # orderers that had a run: only the first records the warm-up's time

    if resume is not None:
        position, results = resume["position"], resume["results"]
        resumed = resume_run(setup, plan, resume, ckpt)
    # the first run's warm-up before the trace is touched: it finds a measurement plug-in that does
    # not fit (a config error)
    warm_up_time = compile_once(*plan[position]) if position < len(plan) else 0.0
    writer, run_id = open_trace(config, backend, setup, out, plan, resume, cell, started)
    constants = {k: v for k, v in setup.constants.items() if k != "x_star"}
    regimes = {name: theory_regime(config, setup, name) for name in config.orderers}
    warn_regime(backend, regimes)
    # how often a run appends to its datasets, which sizes their chunks: every epoch (and the
    # start) for orders and steps, the measured epochs (0, K, 2K, ..., the last) for the rest
    appends = dict(appends=config.epochs + 1, measured=-(-config.epochs // config.measure_every) + 1)
    if resumed is not None:
        resumed.wall_start += warm_up_time  # its clock was restored before the warm-up
    for index in range(position, len(plan)):
        orderer_name, seed = plan[index]
        backend.phase = f"the start of {orderer_name} seed {seed}"
        compile_time = 0.0 if orderer_name in first_runs else compile_once(orderer_name, seed)
        first_runs.add(orderer_name)
        if resumed is not None:  # the run the checkpoint stopped inside
            run, resumed = resumed, None
            trace = writer.run(orderer_name, seed, **appends)
            first_epoch = run.epoch + 1
            record = resume["record"]
            visited = gather_order(run) if config.record_orders else None
        else:
            run = Run(setup, orderer_name, seed)
            trace = writer.start_run(orderer_name, seed, dict(
                workers=config.workers, examples_per_worker=setup.n, batch=config.batch, lr=config.lr,
                compile_time=compile_time, **constants, **regimes[orderer_name],
                **(run.clock.attrs() if run.clock else {})), **appends)
            record = run.measure(0)
            trace.append_epoch(record)
            visited = None  # the orders the next epoch visits (for per-example coverage)
            if config.record_orders:
                visited = gather_order(run)
                trace.append_orders(visited)
            first_epoch = 1
            if non_finite(record):  # nothing to train from a start whose loss is not finite
                report_divergence(run, backend, orderer_name, seed, 0, learning_rate(config, 0, setup),
                                  non_finite(record))
                first_epoch = config.epochs + 1
        for epoch in range(first_epoch, config.epochs + 1):
            backend.phase = f"epoch {epoch} of {orderer_name} seed {seed}"
            lr = learning_rate(config, epoch - 1, setup, orderer_name)
            if not run.train_epoch(epoch, lr):
                report_divergence(run, backend, orderer_name, seed, epoch, lr, "the model is not finite")
                break
            run.epoch = epoch
            overflow = None
            if epoch % config.measure_every == 0 or epoch == config.epochs:
                record = run.measure(epoch)
                trace.append_epoch(record)
                progress(config, backend, orderer_name, seed, record, index, len(plan))
                overflow = non_finite(record)
            coverage = None
            if config.record_orders:
                if run.clock:  # (1, m, n) by example index, from the orders this epoch visited
                    coverage = run.clock.coverage_by_example(visited)[None]
                visited = gather_order(run)
                trace.append_orders(visited)
            if run.trace_steps:
                trace.append_steps(*zip(*run.trace_steps))
                run.trace_steps.clear()
            if run.clock:
                trace.append_group("stragglers", dict(run.clock.take(), coverage=coverage))
            if overflow:  # the epoch is traced whole; the run stops here
                report_divergence(run, backend, orderer_name, seed, epoch, lr, overflow)
                break
            if epoch < config.epochs:
                checkpoint_if_due(config, backend, stop, ckpt, epoch, dict(
                    position=index, results=results, record=record, lengths=trace.lengths(),
                    run_id=run_id), run.state())
        trace.finish(run.status)
        results.setdefault(orderer_name, []).append(dict(record, status=run.status))
        if index + 1 < len(plan):  # after the last run nothing is left to resume: finish (exit 0)
            checkpoint_if_due(config, backend, stop, ckpt, None,
                              dict(position=index + 1, results=results, run_id=run_id), None)
    writer.close()
    if backend.rank == 0 and os.path.exists(ckpt):
        os.remove(ckpt)  # finished: the checkpoint would only resume a completed job
    return results


def resume_run(setup: Setup, plan, resume: dict, ckpt: str) -> "Run | None":
    """The run the checkpoint stopped inside, restored on every rank from its own state (rank 0
    scatters them), or None when it stopped between runs; ConfigError on every rank when a
    state does not fit."""
    run_state = setup.backend.scatter(resume.get("run_states"))
    if not resume["in_run"]:
        return None
    run, error = Run(setup, *plan[resume["position"]]), None
    try:
        run.restore(run_state)
    except CheckpointError as err:
        error = (f"--resume: checkpoint {ckpt!r}: {err} (written by another ordersim version); "
                 f"resume with that version, or delete the checkpoint to start over")
    error = setup.backend.agree(error)
    if error:
        raise ConfigError(error)
    return run


def non_finite(record: dict) -> str | None:
    """'train_loss = inf' (or grad_norm, NaN) when a measured value that must be finite is not."""
    return next((f"{key} = {record[key]}" for key in ("train_loss", "grad_norm")
                 if not math.isfinite(record[key])), None)


def report_divergence(run: Run, backend, orderer_name: str, seed: int, epoch: int, lr: float,
                      why: str) -> None:
    """Mark the run diverged and say so in one line (rank 0)."""
    run.status = "diverged"
    if backend.rank == 0:
        print(f"[{orderer_name} seed {seed}] diverged in epoch {epoch} (lr {lr:g}): {why}", flush=True)


def open_trace(config, backend, setup, out, plan, resume, cell, started):
    """(writer, run id): the trace writer (rank 0; the others hold a NoTrace), new or cut back to
    a checkpoint, and the trace's run id (every rank). A new trace makes any checkpoint of the
    output stale: it is deleted first; it records the seconds since `started` (perf_counter)."""
    hosts = backend.hosts()  # collective: every rank takes part
    run_id = backend.bcast(resume["run_id"] if resume is not None else new_run_id())
    if backend.rank != 0:
        return NoTrace(), run_id
    ckpt = checkpoint_path(out)
    if resume is not None:
        remove_temporaries(ckpt)
        position = resume["position"]
        current = plan[position] if resume["in_run"] else None
        code = provenance.code_state()
        code["plugin_files"] = json.loads(code["plugin_files"])  # inside the JSON list: an object, not its text
        resumed = dict(time=utc_now(), ranks=backend.size,
                       backend=config.backend, exchange=backend.exchange, hosts=hosts, **code)
        return TraceWriter.reopen(out, plan[:position], current, resume["lengths"] if current else {},
                                  resumed, locking=config.hdf5_locking), run_id
    discard(ckpt)
    writer = TraceWriter(out, dict(
        config=config.to_json(), ranks=backend.size, backend=config.backend,
        exchange=backend.exchange, hosts=hosts, run_id=run_id,
        problem=config.problem, data=config.data, dropped_examples=setup.dropped,
        data_info=setup.data_info, setup_time=time.perf_counter() - started, **provenance.code_state(),
        **(cell.trace_attrs() if cell else {})),
        locking=config.hdf5_locking)
    writer.add_array("shards", setup.shards)
    if setup.constants.get("x_star") is not None:
        writer.add_array("x_star", setup.constants["x_star"])
    return writer, run_id


def checkpoint_if_due(config, backend, stop, path, epoch, state, run_state):
    """At an epoch boundary: write a checkpoint when a stop was requested on any rank (then raise
    Checkpointed) or every `checkpoint_every` epochs of a run."""
    stopping = backend.any(stop is not None and stop.requested)
    periodic = epoch is not None and config.checkpoint_every and epoch % config.checkpoint_every == 0
    if not (stopping or periodic):
        return
    run_states = backend.gather(run_state)
    if backend.rank == 0:
        if run_state is not None:
            state["run_states"] = run_states
        save_checkpoint(path, dict(state, config=config.to_json(), ranks=backend.size),
                        locking=config.hdf5_locking)
    if stopping:
        raise Checkpointed(path)


def gather_order(run: Run) -> np.ndarray:
    """Every worker's current order (m, n), on every rank."""
    order = run.orderer.order
    if run.coordinated or run.setup.backend.size == 1:
        return order
    return run._gather(order)


def duration(seconds: float) -> str:
    """'8.1 s', '2 min 05 s', '1 h 04 min': short enough for a progress line."""
    if not math.isfinite(seconds):
        return "?"
    if seconds < 100:
        return f"{seconds:.1f} s"
    minutes = int(seconds // 60)
    if minutes < 60:
        return f"{minutes} min {int(seconds % 60):02d} s"
    return f"{minutes // 60} h {minutes % 60:02d} min"


def progress(config, backend, orderer, seed, record, run_index: int, runs: int):
    """One line per measured epoch: the measures, the run's elapsed time and the time left of the
    run and of the job (ETA), assuming every epoch and every later run takes as long as this run's
    epochs so far (a first guess: orderers differ in cost)."""
    if config.quiet or backend.rank != 0:
        return
    epoch, elapsed = record["epoch"], record["wall_time"]
    parts = [f"[{orderer} seed {seed}] epoch {epoch:>3}/{config.epochs}",
             f"loss {record['train_loss']:.6g}"]
    if "suboptimality" in record:
        parts.append(f"subopt {record['suboptimality']:.3e}")
    if "test_accuracy" in record:
        parts.append(f"test acc {100 * record['test_accuracy']:.1f}%")  # in % as the figures give it
    if "herding_inf" in record:
        parts.append(f"herding {record['herding_inf']:.3g}")
    per_epoch = elapsed / epoch if epoch else math.nan
    run_left = per_epoch * (config.epochs - epoch)
    job_left = run_left + per_epoch * config.epochs * (runs - run_index - 1)
    parts.append(f"elapsed {duration(elapsed)}  ETA run {duration(run_left)}, "
                 f"job {duration(job_left)} (run {run_index + 1}/{runs})")
    print("  ".join(parts), flush=True)


SPREAD = "mean ± sample standard deviation over the runs (seeds) of each orderer"


def summary_table(results: dict) -> str:
    """The final records of every orderer's runs: the mean ± the sample standard deviation
    (ddof 1; '-' for a single run) over its seeds, labelled as such above the table; accuracy in %. A diverged
    run's values (inf, NaN, or finite but meaningless) are left out, and the row says how many
    diverged."""
    columns = [("train_loss", "final loss"), ("suboptimality", "f - f*"), ("herding_inf", "herding (inf)"),
               ("test_accuracy", "test acc (%)")]
    scale = {"test_accuracy": 100.0}  # in % as the progress lines and the figures give it
    present = [(k, label) for k, label in columns if any(k in r for rs in results.values() for r in rs)]
    header = f"{'orderer':<12} {'runs':>4}  " + "  ".join(f"{label:>22}" for _, label in present)
    lines = [f"{SPREAD}:", header, "-" * len(header)]
    for orderer, records in results.items():
        kept = [r for r in records if r["status"] != "diverged"]
        cells = []
        for key, _ in present:
            # scaled after the statistics: equal accuracies keep a spread of exactly 0
            values, factor = np.array([r[key] for r in kept if key in r]), scale.get(key, 1.0)
            spread = f"{factor * values.std(ddof=1):<8.2g}" if len(values) > 1 else f"{'-':<8}"
            cells.append(f"{factor * values.mean():>11.4g} ± {spread}" if len(values) else f"{'-':>22}")
        diverged = len(records) - len(kept)
        status = ("" if not diverged else f"  (all {diverged} diverged)" if not kept
                  else f"  ({diverged} of {len(records)} diverged: the others' mean)")
        lines.append(f"{orderer:<12} {len(records):>4}  " + "  ".join(cells) + status)
    return "\n".join(lines)
