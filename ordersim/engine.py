"""The epoch loop of both backends (``epoch_loop``) and the Numba kernels of its steps.

One jitted loop runs an epoch on either backend; the serial one is the MPI one with no exchange.
Its inputs are six named records (Model, Data, UpdateRule, Observer, Exchange, Recording) and the
orderer's kernel, built in one place (simulate.Run.epoch_inputs). Both backends compute the same
floating-point operations in the same order: every worker's gradient sum is accumulated over its
b examples in visit order, and the workers' sums are added in worker order. That is what makes
traces bitwise identical whatever the number of ranks.
"""

from typing import NamedTuple

import numpy as np
from numba import config, njit, types
from numba.core import errors
from numba.core.types.function_type import CompileResultWAP

from ordersim import numba_cache  # before the cached kernels: stamps them
from ordersim.jit_clock import seconds
from ordersim.orderers._projection import project
from ordersim.orderers._state import OBSERVE_ARGS, state_kernel
from ordersim.prefetch import prefetch_row

# The argument types the step loops pass to a problem's batch_grads (x, A, y, idx, params, out).
_C1, _C2 = types.float64[::1], types.float64[:, ::1]
STEP_KERNEL_ARGS = (_C1, _C2, _C1, types.int64[::1], _C1, _C2)
SLOPES_KERNEL_ARGS = STEP_KERNEL_ARGS + (_C1,)  # batch_grads_slopes' (..., out, slopes)


def compile_for_steps(batch_grads, args=STEP_KERNEL_ARGS) -> None:
    """Compile a problem's batch_grads, with its own options, for the step loops' argument types
    (`args`; a linear model's batch_grads_slopes: SLOPES_KERNEL_ARGS).

    The step loops run without reference counting (``_nrt=False``, see epoch_loop), and a
    kernel first compiled from inside one would be compiled that way too, which fails for kernels
    that allocate (softmax, mlp, users' own). Compiled here first, the loops reuse this version.
    """
    if config.DISABLE_JIT or args in batch_grads.overloads:
        return
    try:
        batch_grads.compile(args)
    except RuntimeError:  # "compilation disabled": declared with explicit signatures, all compiled
        pass  # with its own options already; the loops call whichever accepts their arrays


def loss_dropped(x, A, y, idx, params, out):
    """The template of gradients_kernel's kernels: batch_grads' gradients, its loss unused."""
    batch_grads(x, A, y, idx, params, out)
    return 0.0


def slopes_loss_dropped(x, A, y, idx, params, out, slopes):
    """The template for a linear model's batch_grads_slopes (bound to the name batch_grads here):
    its gradients and slopes, its loss unused."""
    batch_grads(x, A, y, idx, params, out, slopes)
    return 0.0


_GRADIENT_KERNELS = {}


def gradients_kernel(batch_grads, template=loss_dropped, args=STEP_KERNEL_ARGS):
    """A kernel that writes batch_grads' gradients, bit for bit, and returns 0.0 instead of the
    loss, which the step loops need only on the steps they trace (Recording.trace_every); with
    template slopes_loss_dropped and args SLOPES_KERNEL_ARGS, the same for batch_grads_slopes.

    batch_grads' own code, inlined (inline="always") into a copy of loss_dropped compiled with
    batch_grads' options (fastmath included: the same instructions for the same operations), so
    LLVM drops what only the loss uses (logistic: a log1p and an exp per example, the regularizer's
    pass over x). Cached on disk as the loops are (problem_loop), per kernel digest; compiled here
    for the loops' argument types, as compile_for_steps does batch_grads. A kernel whose code cannot
    be inlined that way (or without the JIT) is its own gradients kernel: the loss computed and
    dropped."""
    found = _GRADIENT_KERNELS.get(batch_grads)
    if found is not None:
        return found
    found = batch_grads
    if not config.DISABLE_JIT:
        options = {key: value for key, value in batch_grads.targetoptions.items()
                   if key not in ("cache", "inline", "nopython")}
        digest = numba_cache.kernel_digest(batch_grads)
        names = dict(globals(), batch_grads=njit(inline="always", **options)(batch_grads.py_func))
        copy = numba_cache.function_copy(template, names, f"{template.__name__}_{digest or 'uncached'}")
        compiled = njit(cache=digest is not None, **options)(copy)
        try:
            compiled.compile(args)
            found = compiled
        except errors.NumbaError:
            pass
    _GRADIENT_KERNELS[batch_grads] = found
    return found


# The loops' code below (worker_step, worker_examples, epoch_steps; metrics.herding_steps) calls the
# problem's kernel (batch_grads, and gradients_only: gradients_kernel's; a linear model's
# gradients_with_slopes, slopes_only and regularizer_gradient, or stubs), and the MPI loop the
# exchange, by global names that problem_loop binds in each problem's jitted copies; here they hold
# the serial loop's values (the exchange's names only in branches that an exchange of None removes
# at compile time).
batch_grads = gradients_only = gradients_with_slopes = slopes_only = regularizer_gradient = None
STALLED, STEP, collect, exchange_rows, publish = -1, 0, None, None, None
# A worker's step prefetches the rows it will read once this many rows (its own and the other
# local workers') have been read, or its next step's if that is further: at one worker and b = 1
# the next example's row arrived too late (rr at d = 128 from memory: 220 -> 195 ns an example);
# with 8 workers the next step is 8 rows ahead already, and 32 took cd-grab's and cd-kh's serial
# epochs 2-9 % longer.
ROWS_AHEAD = 4


def worker_step(x, A, y, params, order, row, base, pos, count, idx, grads, grad_sum, with_loss,
                slopes=None, projected_rows=None):
    """Gradients of one worker's next `count` examples (visit positions pos..pos+count-1).

    Local example e of local row `row` is row base + e of A. Writes the per-example gradients to
    grads[:count] and their sum (in visit order) to grad_sum; returns the sum of the losses, or
    without `with_loss` 0.0 (their computation left out: gradients_kernel). With `slopes` (a
    linear model's route, Projection) the kernel is gradients_with_slopes (slopes_only), which
    also writes each example's s_i to slopes[:count]; the next step's projected_rows (A Pi^T)
    are prefetched with its data rows.
    One example (every step at b = 1) goes to a copy of worker_examples with count the constant 1
    (both inlined), whose loops LLVM then removes: the serial loop's memory-bound epoch at b = 1
    took 15 % less time that way (docs/performance.md).
    """
    if count == 1:
        return worker_examples(x, A, y, params, order, row, base, pos, 1, idx, grads, grad_sum,
                               with_loss, slopes, projected_rows)
    return worker_examples(x, A, y, params, order, row, base, pos, count, idx, grads, grad_sum,
                           with_loss, slopes, projected_rows)


def worker_examples(x, A, y, params, order, row, base, pos, count, idx, grads, grad_sum, with_loss,
                    slopes=None, projected_rows=None):
    """worker_step's work. The rows of the `count` examples max(count, ROWS_AHEAD / workers)
    positions ahead are prefetched first, to arrive while these and the steps between are
    computed. At count 1 `grads` may be a (1, d) view of grad_sum itself (epoch_steps, when
    nothing keeps the gradient or it is a pair's second): the gradient is the sum, and no copy
    is made."""
    ahead = max(count, -(-ROWS_AHEAD // order.shape[0]))  # order: a row per local worker
    for r in range(pos + ahead, min(pos + ahead + count, order.shape[1])):
        prefetch_row(A, base + order[row, r])
        if projected_rows is not None:
            prefetch_row(projected_rows, base + order[row, r])
    for r in range(count):
        idx[r] = base + order[row, pos + r]
    if slopes is not None and with_loss:
        loss = gradients_with_slopes(x, A, y, idx[:count], params, grads[:count], slopes[:count])
    elif slopes is not None:
        loss = slopes_only(x, A, y, idx[:count], params, grads[:count], slopes[:count])
    elif with_loss:
        loss = batch_grads(x, A, y, idx[:count], params, grads[:count])
    else:
        loss = gradients_only(x, A, y, idx[:count], params, grads[:count])
    # the sum from 0.0 in visit order; its first term written in the same pass as the zeroing
    d = grad_sum.shape[0]
    if count == 1 and grads.ctypes.data == grad_sum.ctypes.data:  # written there by the kernel
        return loss
    for k in range(d):
        grad_sum[k] = 0.0 + grads[0, k]
    for r in range(1, count):
        for k in range(d):
            grad_sum[k] += grads[r, k]
    return loss


@njit(cache=True, inline="always", error_model="numpy")
def apply_update(x, velocity, worker_sums, count, lr, momentum, weight_decay, total):
    """x -= lr * v with v = momentum v + g, g = (sum over workers in worker order) / count + wd x.

    Returns whether every entry of x is still finite (the divergence check, at no extra pass).
    Every entry sees the same operations in the same order as a plain loop over k with the workers
    added inside; the loops are only arranged so that LLVM can vectorize them over k. total (d,)
    is scratch for the sum (the step loops allocate nothing).
    """
    m, d = worker_sums.shape
    for k in range(d):  # the sum from 0.0; its first term written in the same pass as the zeroing
        total[k] = 0.0 + worker_sums[0, k]
    for w in range(1, m):
        for k in range(d):
            total[k] += worker_sums[w, k]
    # A power of two divides exactly as its reciprocal multiplies (the same bits); the
    # multiplication costs a fraction of the division, which bounded a step at small b.
    inverse = 1.0 / count
    exact = count & (count - 1) == 0
    finite = True
    for k in range(d):
        g = (total[k] * inverse if exact else total[k] / count) + weight_decay * x[k]
        if momentum != 0.0:
            velocity[k] = momentum * velocity[k] + g
            g = velocity[k]
        x[k] -= lr * g
        finite &= x[k] - x[k] == 0.0  # False for inf and NaN
    return finite


@njit(cache=True, error_model="numpy")
def row_sums(grads, out):
    """out[w] = sum of grads[w, r] over r in visit order (the same sum worker_step computes)."""
    m, count, d = grads.shape
    for w in range(m):
        out[w, :] = 0.0
        for r in range(count):
            for k in range(d):
                out[w, k] += grads[w, r, k]


@njit(cache=True, error_model="numpy")
def sum_in_worker_order(worker_values):
    """Column sums of (m, k) values, adding rows in worker order."""
    m, k = worker_values.shape
    total = np.zeros(k)
    for w in range(m):
        for j in range(k):
            total[j] += worker_values[w, j]
    return total


@njit(cache=True, error_model="numpy")
def apply_coded_update(x, velocity, history, coef, step, lr, momentum, weight_decay, total):
    """The update of a decoded scheme (ignore-stragglers, pipelined GC) at global step `step`.

    history (s+1, k, d): partition j's gradient sum of step u is history[u mod (s+1), j];
    coef (k, s+1): the step's update coefficients (EpochClock.update_coefficients, the decode
    weights already divided by k times the examples per partition). g = Σ_j Σ_age coef[j, age] ·
    history[(step − age) mod (s+1), j], partitions in order, ages in order inside, zero
    coefficients skipped; then weight decay, momentum and the step as in apply_update. Returns
    whether x is still finite. total (d,): scratch, as in apply_update.
    """
    slots, k, d = history.shape
    total[:] = 0.0
    for j in range(k):
        for age in range(slots):
            c = coef[j, age]
            if c != 0.0:
                slot = (step - age) % slots
                for i in range(d):
                    total[i] += c * history[slot, j, i]
    finite = True
    for i in range(d):
        g = total[i] + weight_decay * x[i]
        if momentum != 0.0:
            velocity[i] = momentum * velocity[i] + g
            g = velocity[i]
        x[i] -= lr * g
        finite &= x[i] - x[i] == 0.0
    return finite


@njit(inline="always", error_model="numpy")
def slot_of(step, slots):
    """The history's slot of global step `step`: step mod slots, with no division (tens of
    cycles, every step) for the single slot of plain updates."""
    return 0 if slots == 1 else step % slots


@njit(inline="always", error_model="numpy")
def update_after_step(x, velocity, history, coef, row, step, count, coded, lr, momentum,
                      weight_decay, total):
    """The update that follows global step `step`, whose per-worker sums (of `count` examples
    each) are in history[step mod slots]: with ``coded`` apply_coded_update with coefficients
    coef[row], else apply_update along those sums (coef unused). Returns whether x is finite."""
    if coded:
        return apply_coded_update(x, velocity, history, coef[row], step, lr, momentum, weight_decay,
                                  total)
    return apply_update(x, velocity, history[slot_of(step, history.shape[0])], history.shape[1] * count,
                        lr, momentum, weight_decay, total)


@njit(cache=True, error_model="numpy")
def pack_rows(grads, count):
    """Move grads[:, :count] (m, b, d) to the front of grads' memory, as a C-contiguous
    (m, count, d) array would lie there; each row moves to an earlier or the same place, so none
    is overwritten before it moves."""
    m, b, d = grads.shape
    flat = grads.reshape(-1)
    for w in range(m):
        for r in range(count):
            source, target = (w * b + r) * d, (w * count + r) * d
            for k in range(d):
                flat[target + k] = flat[source + k]


# inline: the view is made in the calling loop's own code, which counts no references (epoch_loop)
@njit(inline="always", error_model="numpy")
def packed(grads, count):
    """grads[:, :count] (m, b, d) as a C-contiguous (m, count, d) array, as the orderers' kernels
    take it: the rows moved to the front of grads' memory (pack_rows) and viewed there."""
    m, d = grads.shape[0], grads.shape[2]
    pack_rows(grads, count)
    return grads.reshape(-1)[:m * count * d].reshape((m, count, d))


# What the epoch loop does with the steps' gradients for the orderer (Observer.mode). Kept in
# chunks (the serial backend, all workers local): nothing (rr, so, ...), every gradient, or pair
# differences g_2k - g_2k+1 (the pair orderers' pair_difference_kernel). Per step (the MPI
# backend): the step's local rows, observed while the exchange completes, or, for a coordinated
# orderer, every worker's rows, exchanged and observed one step late.
NO_GRADIENTS, GRADIENTS, PAIR_DIFFERENCES, EACH_STEP, GATHERED = range(5)
CHUNKED = (GRADIENTS, PAIR_DIFFERENCES)


# Doubles per chunk of the kept gradients (docs/performance.md). Gradients: 256 KB stay in
# L2 from the steps that write them to the orderer that reads them; mean balance walks each row
# through the chunk's examples, and larger chunks keep a row's state in cache longer. Pair
# differences: 16 KB stay in L1 beside the data rows the steps read (cd-grab's extra time over
# rr ~9.5 -> ~7 ms per epoch against 256 KB at m = 8, d = 128; 32 KB was already slower).
GRADIENT_CHUNK_DOUBLES, PAIR_CHUNK_DOUBLES = 1 << 15, 1 << 11


def chunk_rows(mode, m, n, b, d, doubles=None):
    """Rows per worker of the chunks the loop keeps for `mode` (GRADIENTS or PAIR_DIFFERENCES),
    for chunks of about `doubles` doubles (by default the constants above): whole steps of
    gradients (at least one), or pair differences (at least b: a step may end inside a pair, so
    two steps must fit); never more than the epoch has."""
    if mode == PAIR_DIFFERENCES:
        doubles = PAIR_CHUNK_DOUBLES if doubles is None else doubles
        return min(max(b, doubles // (m * d)), (n + 1) // 2)
    doubles = GRADIENT_CHUNK_DOUBLES if doubles is None else doubles
    return min(max(1, doubles // (m * b * d)) * b, n)


@njit(inline="always", error_model="numpy")
def fold_pairs(grads, count, first, pair_rows):
    """Fold gradients grads[:count] of a worker's positions first.. (counted from the chunk's
    first position, which is even) into pair_rows: a pair's first gradient is copied to its row,
    the second subtracted from it (row k: g_2k - g_2k+1)."""
    d = grads.shape[1]
    for r in range(count):
        t = first + r
        if t % 2 == 0:
            for j in range(d):
                pair_rows[t // 2, j] = grads[r, j]
        else:
            for j in range(d):
                pair_rows[t // 2, j] = pair_rows[t // 2, j] - grads[r, j]


@njit(inline="always", error_model="numpy")
def projected_gradients(vectors, rows, idx, slopes, projected_regularizer, count):
    """vectors[r] = slopes[r] rows[idx[r]] + projected_regularizer for r < count: a linear model's
    Pi g_i = s_i (Pi a_i) + Pi grad R(x) from its projected row (Projection). No fastmath: a
    product and a sum per value, the references' rounding."""
    for r in range(count):
        i, s = idx[r], slopes[r]
        for c in range(vectors.shape[1]):
            vectors[r, c] = s * rows[i, c] + projected_regularizer[c]


@njit(inline="always", error_model="numpy")
def observe_rows(observe, kept, rows, state):
    """observe(kept[:, :rows], state) on a C-contiguous (m, rows, d) array, as observe wants
    (a short chunk packed first)."""
    observe(kept if rows == kept.shape[1] else packed(kept, rows), state)


@state_kernel
def no_observer(grads, state):
    """The observe kernel of orderers that need no gradients (rr, so, ...): nothing to do."""
    return 0


def first_class(observe):
    """An orderer's kernel as a first-class function value (Numba's FunctionType) of its
    C-contiguous signature. The epoch loop takes it as a field of one type, so the loop compiles
    once per problem (and backend), not once per orderer; the call through the pointer costs a
    few ns per step."""
    if config.DISABLE_JIT:
        return observe
    # once per kernel and process: looking the signature up hashes a dozen Numba types, and
    # with the wrapper it cost 20-40 us an epoch, more than a small epoch's steps
    value = _FIRST_CLASS.get(observe)
    if value is None:
        if OBSERVE_ARGS not in observe.overloads:  # state kernels have it; plain jitted ones compile it
            observe.compile(OBSERVE_ARGS)
        value = _FIRST_CLASS[observe] = CompileResultWAP(observe.overloads[OBSERVE_ARGS])
    return value


_FIRST_CLASS: dict = {}  # kernel (a Numba dispatcher) -> first_class(kernel)


# -- the epoch loop's inputs -------------------------------------------------------------------------
class Model(NamedTuple):
    """What the steps train: the parameters (d,) and the momentum's velocity (d,)."""
    x: np.ndarray
    velocity: np.ndarray


class Data(NamedTuple):
    """This rank's examples and the epoch's visits: local worker w's example e is row w n + e of
    A; order (local, n) the epoch's visit order of its workers; b examples per worker and step
    (the last step shorter); idx (b,) int64 scratch for a step's rows."""
    A: np.ndarray
    y: np.ndarray
    params: np.ndarray
    order: np.ndarray
    n: int
    b: int
    idx: np.ndarray


class UpdateRule(NamedTuple):
    """The update after each step (update_after_step): plain, along history[step mod slots]
    (one slot), or with ``coded`` along coef[k] (the epoch's (steps, k, s+1) coefficients) and
    the partition sums in history (s+1, m, d); first_step the epoch's first global step; total
    (d,) scratch."""
    lr: float
    momentum: float
    weight_decay: float
    history: np.ndarray
    coef: np.ndarray
    coded: bool
    first_step: int
    total: np.ndarray


class Projection(NamedTuple):
    """A linear model's route to an orderer handed Pi g (docs/algorithms.md, "Random projection
    before balancing"): with ``active`` the loop hands the orderer, instead of the gradients,
    Pi g_i = s_i rows[i] + Pi grad R(x) (projected_gradients), rows = A Pi^T (this rank's rows,
    projected once per run), s_i from the problem's gradients_with_slopes into slopes (b,), and
    Pi grad R(x) once per step: regularizer_gradient into regularizer (d,), then Pi
    (_projection.project with kind, dense, columns, bounds, sigma) into projected_regularizer (k,);
    vectors (b, k) holds a step's vectors the mode does not keep in place."""
    active: bool
    rows: np.ndarray
    kind: int
    dense: np.ndarray
    columns: np.ndarray
    bounds: np.ndarray
    sigma: float
    slopes: np.ndarray
    regularizer: np.ndarray
    projected_regularizer: np.ndarray
    vectors: np.ndarray


def no_projection() -> Projection:
    """The Projection of a run whose orderer is handed the gradients themselves."""
    matrix, indices = np.zeros((1, 1)), np.zeros(1, dtype=np.int64)
    return Projection(False, matrix, 0, matrix, indices, indices, 0.0, np.zeros(1), np.zeros(1), np.zeros(1), matrix)


class Observer(NamedTuple):
    """The orderer's part besides its kernel (EpochInputs.observe): mode (NO_GRADIENTS, ...) and
    the kernel's state; kept: what the mode keeps of the gradients (or, with projection active,
    of the vectors Pi g), (m, chunk_rows, width) chunks or (local, b, width) per step, width d or
    k; scratch (b, d) for the gradients it does not keep."""
    mode: int
    state: np.ndarray
    kept: np.ndarray
    scratch: np.ndarray
    projection: Projection


class Exchange(NamedTuple):
    """Between the ranks, along link (MPIBackend.exchange_link): the local workers' sums
    (local, d) and losses (local, 1), and, gathered from every rank, losses (m, 1) and for
    GATHERED every worker's gradients (m, b, d). The serial backend passes None instead: the
    sums go straight to the history and the losses are summed in place."""
    link: tuple
    local_sums: np.ndarray
    local_loss: np.ndarray
    all_loss: np.ndarray
    gathered: np.ndarray


class Recording(NamedTuple):
    """What the epoch leaves behind: the mean loss of every trace_every-th global step into
    trace_loss[k] (k: the epoch's step), and timers (3,) += compute, communication and ordering
    seconds (jit_clock; the serial loop's compute is its whole time minus the ordering)."""
    trace_every: int
    trace_loss: np.ndarray
    timers: np.ndarray


class EpochInputs(NamedTuple):
    """The epoch loop's arguments, in its order. observe: the orderer's kernel, first_class(kernel),
    an argument of its own: Numba's dispatcher types a tuple of arrays and numbers in C (~2 us),
    but one holding a first-class function in Python, field by field (~250 us an epoch for the
    Observer when the kernel was one of its fields); the function alone takes ~11 us."""
    model: Model
    data: Data
    rule: UpdateRule
    observe: object
    observer: Observer
    exchange: Exchange | None
    recording: Recording


_LOOPS, _NAMES = {}, {}
# worker_step and worker_examples, jitted in each problem's copies with these options (_nrt: see
# epoch_loop); inlined into the loops (a call per step passed every field of its arrays), they
# take no kernel argument: a dispatcher passed as a value is a constant of the process (its id) in
# the machine code, not cacheable
_STEP_HELPERS = {name: dict(inline="always", _nrt=False) for name in ("worker_step", "worker_examples")}


@njit(cache=True, error_model="numpy")
def no_slopes(x, A, y, idx, params, out, slopes):
    """gradients_with_slopes of a problem that declares none (never called: Projection inactive)."""
    return 0.0


@njit(cache=True, error_model="numpy")
def no_regularizer_gradient(x, params, out):
    """regularizer_gradient of a problem that declares none (never called)."""


def _problem_names(kernel, exchanging: bool, linear) -> dict:
    """This module's globals with the problem's kernel (and a linear model's two, else stubs)
    and its jitted step helpers (and the exchange's names) bound: the globals of the problem's
    loops."""
    key = (kernel, exchanging, linear)
    names = _NAMES.get(key)
    if names is not None:
        return names
    slopes, regularizer = linear or (no_slopes, no_regularizer_gradient)
    names = dict(globals(), batch_grads=kernel, gradients_only=gradients_kernel(kernel),
                 gradients_with_slopes=slopes, regularizer_gradient=regularizer,
                 slopes_only=gradients_kernel(slopes, slopes_loss_dropped, SLOPES_KERNEL_ARGS)
                 if linear else no_slopes)
    if exchanging:
        from ordersim import node_exchange, stall

        names.update(STALLED=node_exchange.STALLED, STEP=stall.STEP, collect=node_exchange.collect,
                     exchange_rows=node_exchange.exchange, publish=node_exchange.publish)
    for name, options in _STEP_HELPERS.items():
        helper = numba_cache.function_copy(globals()[name], names)
        names[name] = helper if config.DISABLE_JIT else njit(error_model="numpy", **options)(helper)
    _NAMES[key] = names
    return names


def problem_loop(template, kernel, exchanging: bool = False, linear=None, **options):
    """The jitted copy of `template` (a plain function of this module, or of another that calls
    worker_step) whose global
    ``batch_grads`` is the problem's `kernel` (with `linear`, a linear model's
    (batch_grads_slopes, regularizer_gradient), those of gradients_with_slopes and
    regularizer_gradient; and, with `exchanging`, whose exchange names are node_exchange's),
    compiled with njit(error_model="numpy", **options), once per process.

    A loop that took the kernel as an argument, or closed over it, could not be cached on disk
    (numba#2956): as a global of the copy it can. The copy's qualified name carries
    numba_cache.kernel_digest(kernel) (the kernel's name, file and source state), so every
    problem's loop has its own cache entry, stamped by this file and ordersim's tree and
    recompiled when the kernel's source changes. The MPI loop is cached too, under its own name
    (with jit_mpi.ABI, the MPI handles' sizes): its exchange calls C functions by symbol
    (sched_yield, the futex syscall, MPI_Allgather: node_exchange, jit_mpi), resolved when the
    cached code is loaded, and takes every per-process value (the MPI handles, the shared
    window's addresses) as an argument. MPIBackend.run_steps compiles it on one rank per node
    first, the node's other ranks then load it."""
    key = (template, kernel, exchanging, linear)
    loop = _LOOPS.get(key)
    if loop is not None:
        return loop
    digests = [numba_cache.kernel_digest(function) for function in (kernel, *(linear or ()))]
    digest = None if None in digests else "_".join(digests)
    names = _problem_names(kernel, exchanging, linear)
    if template.__globals__ is not globals():  # another module's template (metrics' herding pass)
        names = dict(template.__globals__, **{name: names[name] for name in
                                              ("batch_grads", "gradients_only", *_STEP_HELPERS)})
    backend = "serial"
    if exchanging:
        from ordersim.jit_mpi import ABI

        backend = f"mpi_{ABI}"
    loop = numba_cache.function_copy(template, names, f"{template.__name__}_{backend}_{digest or 'uncached'}")
    if not config.DISABLE_JIT:
        loop = njit(error_model="numpy", cache=digest is not None, **options)(loop)
    _LOOPS[key] = loop
    return loop


def epoch_loop(batch_grads, exchanging: bool = False, linear=None):
    """The epoch of both backends, every step, its exchange and the orderer's kernel in one jitted
    call, compiled once per problem kernel (and once more for the MPI backend's exchange; the
    orderer's kernel is a first-class function argument, so every orderer shares it):

        steps = epoch_loop(batch_grads, exchanging, linear)(model, data, rule, observe, observer, exchange,
                                                            recording)

exchanging: the MPI backend's version, whose exchange is an Exchange (the other takes None and
needs no MPI library). linear: a linear model's (batch_grads_slopes, regularizer_gradient), for
the Observer's Projection (a loop of its own: both kernels are globals of it), or None.

    A step: the previous step's update (UpdateRule); the local workers' gradients and their sums
    for the next b visit positions (worker_step), in worker order; with an Exchange, one exchange
    between the ranks (node_exchange's publish and collect along its link: an Allgather's result)
    of the sums into history[step mod slots], or for GATHERED of the gradients into
    ``gathered``, summed per worker there (at b = 1 a gradient is its worker's sum: gathered into
    history directly); between publish and collect the orderer observes the step's local rows
    (EACH_STEP), or every worker's rows of the step before (GATHERED; a short last step packs its
    rows in place first). Without one (the serial backend) the sums go to the history directly,
    and a CHUNKED mode keeps the gradients: worker w's go to kept[w] (m, chunk, d) in visit order,
    and observe gets them whenever the next step would not fit and at the epoch's end (a short
    chunk is packed first; chunk sizes: chunk_rows). For PAIR_DIFFERENCES row k of kept[w] is the
    chunk's pair k, g_2k - g_2k+1, formed as the gradients come (fold_pairs; at b = 1 a pair's
    first gradient is written to its row directly), and observe (a pair_difference_kernel) gets
    the whole pairs when a step ends on a pair's end and the steps up to the next one's would not
    fit (two steps for b odd, one for b even), and at the epoch's end. Every trace_every steps
    the step's loss (with an Exchange: one more exchange, of the losses) goes to the Recording;
    the other steps do not compute it (gradients_kernel: logistic's log1p and exp per example).
    The last update (and a GATHERED orderer's last observe) follows the loop.

    Returns the steps done, or -(steps done, the diverging one included) - 1 when x stopped being
    finite. When an exchange gives up waiting (node_exchange.STALLED) the loop returns at once,
    with the step in the link's limits (ordersim/stall.py).

    Every worker's gradient sum is accumulated over its b examples in visit order, and the
    workers' sums are added in worker order, whichever rank computed them: the traces are bitwise
    the same on any number of ranks. Python-level calls per step cost more than the step itself
    at small b (dispatch of ~20 arguments, mpi4py's wrapper): hence one call per epoch, with the
    problem's kernel a global of the loop's copy (problem_loop; both are cached on disk).
    Compiled without Numba's reference counting (_nrt=False; it allocates nothing): the views
    taken per worker and step would otherwise each cost two atomic operations, which wait for the
    step's outstanding memory loads (a third of rr's serial epoch at N = 200 000, d = 128);
    without the GIL: the stall watchdog's thread must run while it waits in an exchange.
    """
    return problem_loop(epoch_steps, batch_grads, exchanging, linear, _nrt=False, nogil=True)


def epoch_steps(model, data, rule, observe, observer, exchange, recording):
    """epoch_loop's code (problem_loop binds batch_grads and the exchange)."""
    x, velocity = model.x, model.velocity
    A, y, params, order, n, b, idx = data.A, data.y, data.params, data.order, data.n, data.b, data.idx
    history, coef, total = rule.history, rule.coef, rule.total
    mode, state, kept, scratch = observer.mode, observer.state, observer.kept, observer.scratch
    projection = observer.projection
    projecting = projection.active
    unkept = projection.vectors if projecting else scratch  # a step's rows not written into kept
    local = order.shape[0]
    slots, m = history.shape[0], history.shape[1]
    width, kept_dim = kept.shape[1], kept.shape[2]  # of a CHUNKED mode's chunks; d, or k projecting
    # a coordinated orderer's gradients are exchanged and summed there; Pi g is exchanged beside the sums
    gathers_gradients, gathers_vectors = mode == GATHERED and not projecting, mode == GATHERED and projecting
    pairs = mode == PAIR_DIFFERENCES
    span = b if b % 2 == 0 else 2 * b  # positions from a pair's end to the next step ending on one
    held = k = last_count = 0  # held: positions per worker kept in a chunk, not yet observed
    pos = np.int64(0)  # not a literal 0, for which Numba would compile worker_step once more
    compute = communicate = ordering = 0.0
    finite = True
    status = 0  # of the step's exchanges: STALLED ends the loop
    previous = kept  # GATHERED: every worker's gradients of the step before
    # The serial loop's compute time is the loop's minus the orderer's: no clock per step
    started = seconds()
    while pos < n:
        count = min(b, n - pos)
        step = rule.first_step + k
        if exchange is not None:
            t0 = seconds()
        if k > 0:
            finite = update_after_step(x, velocity, history, coef, k - 1, step - 1, last_count,
                                       rule.coded, rule.lr, rule.momentum, rule.weight_decay, total)
            if not finite:
                break
        slot = slot_of(step, slots)
        sums = history[slot] if exchange is None else exchange.local_sums
        traced = recording.trace_every > 0 and step % recording.trace_every == 0
        loss = 0.0
        if projecting:  # Pi grad R(x) at the step's model, once for every worker
            regularizer_gradient(x, params, projection.regularizer)
            project(projection.projected_regularizer, projection.regularizer, None, projection.kind,
                    projection.dense, projection.columns, projection.bounds, projection.sigma)
        for w in range(local):
            # the kernel (or projected_gradients) writes straight into kept where it can
            if mode == GRADIENTS:
                out = kept[w, held:held + count]
            elif pairs and count == 1 and held % 2 == 0:  # a pair's first gradient
                out = kept[w, held // 2:held // 2 + 1]
            elif mode == EACH_STEP or mode == GATHERED:
                out = kept[w]
            elif count == 1 and not projecting and (mode == NO_GRADIENTS or pairs):
                out = sums[w:w + 1]  # the gradient is its worker's sum (a pair's second: folded from there)
            else:
                out = unkept
            if projecting:  # the gradients go to the sums only; the orderer sees Pi g
                worker_loss = worker_step(x, A, y, params, order, w, w * n, pos, count, idx, scratch,
                                          sums[w], traced, projection.slopes, projection.rows)
                projected_gradients(out, projection.rows, idx, projection.slopes,
                                    projection.projected_regularizer, count)
            else:
                worker_loss = worker_step(x, A, y, params, order, w, w * n, pos, count, idx, out,
                                          sums[w], traced)
            if pairs and (count > 1 or held % 2 == 1):
                fold_pairs(out, count, held, kept[w])
            if exchange is None:
                loss += worker_loss
            else:
                exchange.local_loss[w, 0] = worker_loss
        if exchange is not None:
            t1 = seconds()
            link, gathered = exchange.link, exchange.gathered
            local_grads, all_grads = kept, gathered
            if count < b and (mode == EACH_STEP or mode == GATHERED):
                # the short last step: C-contiguous (·, count, ·) views, as observe wants
                local_grads = packed(kept, count)
                if mode == GATHERED:
                    all_grads = gathered.reshape(-1)[:m * count * kept_dim].reshape((m, count, kept_dim))
            # publish, then the orderer while the other ranks catch up, then collect: with the
            # shared-memory exchange the orderer's work overlaps the wait (node_exchange.py). A
            # GATHERED orderer observes every worker's gradients (or Pi g), so one step late.
            if gathers_gradients:
                publish(local_grads, link)
            else:
                publish(exchange.local_sums, link)
            t2 = seconds()
            if mode == EACH_STEP:
                observe(local_grads, state)
            elif mode == GATHERED and k > 0:
                observe(previous, state)
            t3 = seconds()
            if gathers_gradients:
                if b == 1:  # a worker's gradient is its sum (the updates add it to 0.0 either way)
                    all_grads = history[slot].reshape((m, 1, kept_dim))
                status = collect(local_grads, all_grads, link)
                if b > 1:
                    row_sums(all_grads, history[slot])
                previous = all_grads
            else:
                status = collect(exchange.local_sums, history[slot], link)
                if gathers_vectors and status != STALLED:
                    status = exchange_rows(local_grads, all_grads, link)
                    previous = all_grads
            if status == STALLED:
                break
        if traced:
            if exchange is not None:
                status = exchange_rows(exchange.local_loss, exchange.all_loss, exchange.link)
                if status == STALLED:
                    break
                for w in range(m):  # in worker order, as the serial loop above
                    loss += exchange.all_loss[w, 0]
            recording.trace_loss[k] = loss / (m * count)
        if exchange is not None:
            t4 = seconds()
            compute += t1 - t0
            communicate += (t2 - t1) + (t4 - t3)
            ordering += t3 - t2
        last_count = count
        pos += count
        held += count
        k += 1
        if pairs:  # observe the whole pairs when the steps up to the next pair's end would not fit
            due = pos == n or (pos % 2 == 0 and (held + min(span, n - pos) + 1) // 2 > width)
        else:  # observe when the next step would not fit
            due = mode == GRADIENTS and (pos == n or held + min(b, n - pos) > width)
        if due:
            t0 = seconds()
            observe_rows(observe, kept, held // 2 if pairs else held, state)
            held = 0
            ordering += seconds() - t0
    if exchange is not None:
        if status == STALLED:  # the caller raises Stalled (MPIBackend.run_steps)
            exchange.link[5][STEP] = k
            return k
    if mode == GATHERED and k > 0:
        t0 = seconds()
        observe(previous, state)
        ordering += seconds() - t0
    if finite and k > 0:
        t0 = seconds()
        finite = update_after_step(x, velocity, history, coef, k - 1, rule.first_step + k - 1,
                                   last_count, rule.coded, rule.lr, rule.momentum,
                                   rule.weight_decay, total)
        if exchange is not None:
            compute += seconds() - t0
    if exchange is None:
        compute = seconds() - started - ordering
    timers = recording.timers
    timers[0] += compute
    timers[1] += communicate
    timers[2] += ordering
    return k if finite else -k - 1


@njit(cache=True, error_model="numpy")
def accumulate_herding(gathered, step_counts, mean, prefix, peaks):
    """Advance the parallel-herding prefix over a chunk of steps.

    gathered (m, K, d): every worker's gradient sum per step; step_counts (K,): examples per worker
    in each step. prefix += sum_w gathered[w, s] - m * count * mean (workers in worker order), and
    peaks[0], peaks[1] track the largest inf- and 2-norm of the prefix.
    """
    m, steps, d = gathered.shape
    for s in range(steps):
        inf_norm = 0.0
        two = 0.0
        for k in range(d):
            acc = 0.0
            for w in range(m):
                acc += gathered[w, s, k]
            prefix[k] += acc - m * step_counts[s] * mean[k]
            inf_norm = max(inf_norm, abs(prefix[k]))
            two += prefix[k] * prefix[k]
        peaks[0] = max(peaks[0], inf_norm)
        peaks[1] = max(peaks[1], np.sqrt(two))
