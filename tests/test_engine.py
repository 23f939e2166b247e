"""The simulator's step kernels (ordersim.engine) against plain NumPy references."""

import sys

import numpy as np
import pytest

from ordersim import engine, metrics
from ordersim.problems import make_problem

M, N_LOCAL, P = 3, 11, 4


def least_squares_data(seed=0):
    rng = np.random.default_rng(seed)
    A = np.ascontiguousarray(rng.normal(size=(M * N_LOCAL, P)))
    y = rng.normal(size=M * N_LOCAL)
    orders = np.stack([rng.permutation(N_LOCAL) for _ in range(M)]).astype(np.int64)
    return A, y, orders


def reference_sgd(A, y, orders, lam, b, lr, momentum, weight_decay, steps):
    """Synchronous SGD in NumPy: per step, the mean of the m*count per-example gradients."""
    x, v = np.zeros(P), np.zeros(P)
    losses, grads = [], []
    pos = 0
    for _ in range(steps):
        count = min(b, N_LOCAL - pos)
        rows = np.concatenate([w * N_LOCAL + orders[w, pos:pos + count] for w in range(M)])
        residual = A[rows] @ x - y[rows]
        g_each = residual[:, None] * A[rows] + lam * x
        losses.append(np.mean(0.5 * residual**2 + 0.5 * lam * x @ x))
        grads.append(g_each.reshape(M, count, P))
        g = g_each.mean(axis=0) + weight_decay * x
        v = momentum * v + g if momentum else g
        x = x - lr * v
        pos += count
    return x, np.array(losses), np.concatenate(grads, axis=1)


def epoch_from_zero(kernel, A, y, orders, params, b, lr, momentum=0.0, weight_decay=0.0,
                    grads_out=None, orderer=None, store=engine.GRADIENTS, trace_every=1):
    """engine.epoch_loop as the serial backend runs it (no exchange) from x = 0 over the orders;
    with grads_out, the gradients (or with store=PAIR_DIFFERENCES the pair differences) are kept
    there and observed by ``orderer`` (its begun epoch; none: an observer that does nothing).
    Returns (steps done or the divergence code, x, the loss of every trace_every-th step, NaN
    at the others)."""
    steps = -(-orders.shape[1] // b)
    x, velocity = np.zeros(P), np.zeros(P)
    if grads_out is None:
        store = engine.NO_GRADIENTS
    observe = engine.no_observer
    if orderer:
        observe = orderer.pair_difference_kernel if store == engine.PAIR_DIFFERENCES else orderer.kernel
    state = orderer.state if orderer else np.zeros(1, dtype=np.int64)
    recording = engine.Recording(trace_every, np.full(steps, np.nan), np.zeros(3))
    done = engine.epoch_loop(kernel)(
        engine.Model(x, velocity),
        engine.Data(A, y, params, orders, orders.shape[1], b, np.empty(b, dtype=np.int64)),
        engine.UpdateRule(lr, momentum, weight_decay, np.empty((1, M, P)), np.zeros((1, 1, 1)), False, 0,
                          np.empty(P)),
        engine.first_class(observe),
        engine.Observer(store, state, np.empty((1, 1, 1)) if grads_out is None else grads_out, np.empty((b, P)),
                        engine.no_projection()),
        None, recording)
    return done, x, recording.trace_loss


@pytest.mark.parametrize("store", [engine.NO_GRADIENTS, engine.GRADIENTS, engine.PAIR_DIFFERENCES])
@pytest.mark.parametrize("b, momentum, weight_decay",
                         [(1, 0.0, 0.0), (3, 0.0, 0.0), (4, 0.9, 0.01), (11, 0.5, 0.0)])
def test_serial_epoch_matches_numpy_sgd(b, momentum, weight_decay, store):
    """Keeping nothing (rr), every gradient, or the pair differences g_2k - g_2k+1 (the pair
    orderers): the same SGD, and what is kept is what the orderer is meant to see."""
    A, y, orders = least_squares_data()
    problem = make_problem("least-squares", P, lam=0.1)
    rows = engine.chunk_rows(store, M, N_LOCAL, b, P, M * N_LOCAL * b * P)  # the whole epoch
    grads_out = None if store == engine.NO_GRADIENTS else np.empty((M, rows, P))
    done, x, losses = epoch_from_zero(problem.batch_grads, A, y, orders, problem.params, b, 0.05,
                                      momentum, weight_decay, grads_out, store=store)
    steps = -(-N_LOCAL // b)
    assert done == steps
    x_ref, losses_ref, grads_ref = reference_sgd(A, y, orders, 0.1, b, 0.05, momentum, weight_decay, steps)
    np.testing.assert_allclose(x, x_ref, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(losses, losses_ref, rtol=1e-12)
    if store == engine.GRADIENTS:
        np.testing.assert_allclose(grads_out, grads_ref, rtol=1e-12, atol=1e-14)
    if store == engine.PAIR_DIFFERENCES:  # the whole pairs, packed to the front as observed
        pairs = N_LOCAL // 2
        observed = grads_out.reshape(-1)[:M * pairs * P].reshape(M, pairs, P)
        np.testing.assert_allclose(observed, grads_ref[:, 0:2 * pairs:2] - grads_ref[:, 1::2], rtol=1e-12,
                                   atol=1e-14)


def test_serial_epoch_reports_divergence():
    A, y, orders = least_squares_data()
    problem = make_problem("least-squares", P, lam=0.0)
    done, x, _ = epoch_from_zero(problem.batch_grads, A * 1e200, y, orders, problem.params, 1, 1e200)
    assert done == -2, "the first step diverged: -1 - (steps done, the diverging one included)"
    assert not np.all(np.isfinite(x))


def epoch_observed_in_chunks(orderer_name, A, y, orders, problem, b, lr, chunk_steps):
    """epoch_from_zero with the orderer observing chunks of about chunk_steps steps (its pair
    differences, if it takes them); returns (steps or divergence code, x, losses, the orderer's
    next order)."""
    from ordersim.orderers import make_orderer

    orderer = make_orderer(orderer_name, M, N_LOCAL, P, seed=0, first_order="identity")
    orderer.begin_epoch()
    store = engine.GRADIENTS if orderer.pair_difference_kernel is None else engine.PAIR_DIFFERENCES
    rows = engine.chunk_rows(store, M, N_LOCAL, b, P, chunk_steps * M * b * P)
    done, x, losses = epoch_from_zero(problem.batch_grads, A, y, orders, problem.params, b, lr,
                                      grads_out=np.empty((M, rows, P)), orderer=orderer, store=store)
    next_order = None
    if done >= 0:
        orderer.end_epoch()
        next_order = orderer.begin_epoch()
    return done, x, losses, next_order


@pytest.mark.parametrize("orderer_name", ["d-grab", "cd-grab", "d-grab-pair"])
@pytest.mark.parametrize("b", [1, 2, 3, 4])
def test_serial_epoch_observes_every_chunk_like_one_pass(orderer_name, b):
    """The serial epoch hands the orderer a chunk of steps at a time (short last chunk and short
    last step packed; with b odd a step can end inside a pair; the pair orderers get pair
    differences, down to chunks of b pairs, and with N_LOCAL odd an unpaired last example): x, the
    losses and the next order must be the same for every chunk size, and the same as one observe()
    over the whole epoch's gradients (for the pair orderers: their gradient kernel)."""
    A, y, orders = least_squares_data()
    orders = np.tile(np.arange(N_LOCAL), (M, 1))  # the orderers' identity first order
    problem = make_problem("least-squares", P, lam=0.1)
    results = [epoch_observed_in_chunks(orderer_name, A, y, orders, problem, b, 0.05, chunk)
               for chunk in (1, 3, 4, N_LOCAL)]
    steps = -(-N_LOCAL // b)
    for done, x, losses, next_order in results:
        assert done == steps
        np.testing.assert_array_equal(x, results[0][1])
        np.testing.assert_array_equal(losses, results[0][2])
        np.testing.assert_array_equal(next_order, results[0][3])

    from ordersim.orderers import make_orderer

    grads = np.empty((M, N_LOCAL, P))
    _, x, _ = epoch_from_zero(problem.batch_grads, A, y, orders, problem.params, b, 0.05, grads_out=grads)
    whole = make_orderer(orderer_name, M, N_LOCAL, P, seed=0, first_order="identity")
    whole.begin_epoch()
    whole.observe(grads)
    whole.end_epoch()
    np.testing.assert_array_equal(x, results[0][1])
    np.testing.assert_array_equal(whole.begin_epoch(), results[0][3])


def test_serial_epoch_reports_divergence_in_a_later_chunk():
    """A model that stops being finite in the second chunk: -(steps done, the diverging one
    included) - 1 counted from the epoch's start, and the losses of the steps before it."""
    A, y, orders = least_squares_data()
    problem = make_problem("least-squares", P, lam=0.0)
    A = A.copy()
    rows = [w * N_LOCAL + orders[w, 4] for w in range(M)]  # every worker's fifth example (step 4)
    A[rows] *= 1e200
    done, x, losses, _ = epoch_observed_in_chunks("cd-grab", A, y, orders, problem, 1, 1e-3, 3)
    assert done == -6, "step 4 diverged: -1 - (5 steps done)"
    assert np.all(np.isfinite(losses[:4])) and not np.all(np.isfinite(x))


@pytest.mark.parametrize("name, classes, options", [("logistic", 2, {}), ("nonconvex-logistic", 2, {}),
                                                    ("softmax", 3, {})])
def test_gradients_kernel_writes_the_kernels_gradients_bit_for_bit(name, classes, options):
    """The kernel the step loops call on untraced steps: batch_grads' gradients, bitwise, and 0.0
    for the loss it leaves out (softmax: a kernel that allocates)."""
    rng = np.random.default_rng(3)
    problem = make_problem(name, P, classes, **options)
    A = np.ascontiguousarray(rng.normal(size=(9, P)))
    y = np.where(rng.random(9) < 0.5, -1.0, 1.0) if classes == 2 else rng.integers(0, classes, 9) * 1.0
    x = rng.normal(size=problem.dim)
    idx = np.array([4, 0, 7], dtype=np.int64)
    gradients = engine.gradients_kernel(problem.batch_grads)
    expected, out = np.empty((3, problem.dim)), np.empty((3, problem.dim))
    assert problem.batch_grads(x, A, y, idx, problem.params, expected) > 0.0
    loss = gradients(x, A, y, idx, problem.params, out)
    np.testing.assert_array_equal(out, expected)
    from numba import config
    assert config.DISABLE_JIT or loss == 0.0, "the loss is left out"


@pytest.mark.parametrize("b", [1, 3])
def test_tracing_every_kth_step_changes_no_bit(b):
    """Untraced steps skip the loss (gradients_kernel): the model is bitwise the same whether the
    loss is traced on every step, every third or never, and the traced losses are the same."""
    A, _, orders = least_squares_data()
    y = np.where(np.arange(M * N_LOCAL) % 3 == 0, 1.0, -1.0)
    problem = make_problem("logistic", P, 2, lam=0.01)
    runs = {every: epoch_from_zero(problem.batch_grads, A, y, orders, problem.params, b, 0.5,
                                   momentum=0.5, trace_every=every) for every in (1, 3, 0)}
    steps = -(-N_LOCAL // b)
    for every, (done, x, losses) in runs.items():
        assert done == steps
        np.testing.assert_array_equal(x, runs[1][1], err_msg=f"trace_every = {every}")
    np.testing.assert_array_equal(runs[3][2][::3], runs[1][2][::3])
    assert np.isnan(runs[3][2][1::3]).all() and np.isnan(runs[0][2]).all()
    assert np.isfinite(runs[1][2]).all()


def test_jitted_clock_reads_the_monotonic_clock():
    """seconds() from jitted code is clock_gettime(CLOCK_MONOTONIC): Python's time.monotonic on
    Linux reads the same clock, so the two agree to well under a second, and it never goes back."""
    import time

    from numba import njit

    from ordersim.jit_clock import python_seconds, seconds

    read_twice = njit(lambda: (seconds(), seconds()))
    first, second = read_twice()
    assert second >= first
    if sys.platform == "linux":
        assert abs(first - time.monotonic()) < 0.5
        # the stall watchdog's Python side stamps waits that the jitted spin compares with its own
        before, jitted, after = python_seconds(), read_twice()[0], python_seconds()
        assert before <= jitted <= after


def test_worker_order_sums_match_numpy():
    rng = np.random.default_rng(1)
    values = rng.normal(size=(5, 7))
    np.testing.assert_allclose(engine.sum_in_worker_order(values), values.sum(axis=0), rtol=1e-14)
    grads = rng.normal(size=(5, 3, 7))
    out = np.empty((5, 7))
    engine.row_sums(grads, out)
    np.testing.assert_allclose(out, grads.sum(axis=1), rtol=1e-14)


@pytest.mark.parametrize("count", [1, 2, 3, 4, 6, 8, 12, 64])
@pytest.mark.parametrize("momentum", [0.0, 0.9])
def test_apply_update_is_bitwise_the_plain_division(count, momentum):
    """The update against its NumPy reference, bit for bit: the workers' sums added from 0.0 in
    worker order, divided by the count (a power of two multiplies by its reciprocal instead),
    then weight decay, momentum and the step; values from subnormal to huge and a -0.0 sum."""
    rng = np.random.default_rng(count)
    m, d = 3, 40
    sums = rng.normal(size=(m, d)) * 10.0 ** rng.integers(-310, 300, size=(m, d))
    sums[:, 0] = -0.0
    x, velocity = rng.normal(size=d), rng.normal(size=d)
    lr, weight_decay = 0.05, 1e-3
    total = 0.0 + sums[0]
    for w in range(1, m):
        total = total + sums[w]
    g = total / count + weight_decay * x
    v_expected = momentum * velocity + g if momentum else velocity
    x_expected = x - lr * (v_expected if momentum else g)
    finite = engine.apply_update(x, velocity, sums, count, lr, momentum, weight_decay, np.empty(d))
    assert finite
    np.testing.assert_array_equal(x, x_expected)
    np.testing.assert_array_equal(velocity, v_expected)


@pytest.mark.parametrize("b", [1, 3, 4])
def test_chunked_herding_accumulation_matches_parallel_herding(b):
    """What the simulator computes chunk by chunk from per-step sums equals the metric."""
    rng = np.random.default_rng(2)
    m, n, d = 4, 10, 6
    z = rng.normal(size=(m, n, d))
    orders = np.stack([rng.permutation(n) for _ in range(m)]).astype(np.int64)
    steps = -(-n // b)
    step_sums = np.zeros((m, steps, d))
    for s in range(steps):
        for w in range(m):
            step_sums[w, s] = z[w, orders[w, s * b:(s + 1) * b]].sum(axis=0)
    counts = np.array([min(b, n - s * b) for s in range(steps)], dtype=np.float64)
    mean = z.reshape(-1, d).mean(axis=0)
    prefix, peaks = np.zeros(d), np.zeros(2)
    for first in range(0, steps, 2):  # two steps per chunk, as the simulator's gathers go
        engine.accumulate_herding(np.ascontiguousarray(step_sums[:, first:first + 2]),
                                  counts[first:first + 2], mean, prefix, peaks)
    np.testing.assert_allclose(peaks[0], metrics.parallel_herding(z, orders, batch=b, norm="inf"), rtol=1e-12)
    np.testing.assert_allclose(peaks[1], metrics.parallel_herding(z, orders, batch=b, norm="2"), rtol=1e-12)


@pytest.mark.parametrize("dtype, shape", [(np.float64, (5, 128)), (np.float32, (3, 7)), (np.int64, (1, 1))])
def test_prefetch_row_compiles_for_any_row_size_and_changes_nothing(dtype, shape):
    """prefetch_row is a hint: it must compile for rows shorter or longer than a cache line (and
    be a no-op without the JIT) and leave the array as it was."""
    from numba import njit

    from ordersim.prefetch import prefetch_row

    @njit
    def prefetch_all(A):
        for i in range(A.shape[0]):
            prefetch_row(A, i)
        return A.sum()

    A = np.arange(np.prod(shape), dtype=dtype).reshape(shape)
    before = A.copy()
    assert prefetch_all(A) == before.sum()
    np.testing.assert_array_equal(A, before)


def test_step_loops_run_a_fresh_kernel_that_allocates():
    """The step loops are compiled without reference counting; a problem kernel that allocates
    (softmax, mlp and users' own do) must still run in them once compile_for_steps compiled it."""
    from numba import njit

    @njit  # a fresh dispatcher: nothing compiled or cached before this test
    def allocating_least_squares(x, A, y, idx, params, out):
        residual = np.empty(idx.shape[0])
        total = 0.0
        for r in range(idx.shape[0]):
            i = idx[r]
            residual[r] = -y[i]
            for j in range(x.shape[0]):
                residual[r] += A[i, j] * x[j]
            total += 0.5 * residual[r] ** 2
            for j in range(x.shape[0]):
                total += 0.5 * params[0] * x[j] * x[j]
                out[r, j] = residual[r] * A[i, j] + params[0] * x[j]
        return total

    # declared with an explicit (strided) signature: nothing more to compile, and it still runs
    explicit = njit("float64(float64[:], float64[:, :], float64[:], int64[:], float64[:], float64[:, :])")(
        getattr(allocating_least_squares, "py_func", allocating_least_squares))

    A, y, orders = least_squares_data()
    problem = make_problem("least-squares", P, lam=0.1)
    results = []
    for kernel in (problem.batch_grads, allocating_least_squares, explicit):
        engine.compile_for_steps(kernel)
        done, x, _ = epoch_from_zero(kernel, A, y, orders, problem.params, 1, 0.05)
        assert done == N_LOCAL
        results.append(x)
    np.testing.assert_allclose(results[1], results[0], rtol=1e-10, atol=1e-12)
    np.testing.assert_array_equal(results[2], results[1])


def test_first_class_orderer_kernels_share_one_compilation():
    """The MPI epoch loop takes the orderer's kernel as a first-class function: state kernels and
    plain jitted kernels alike must pass as the same type and be called through it."""
    from numba import config, njit

    from ordersim.orderers._state import state_kernel

    @state_kernel
    def counts_examples(grads, state):
        state[0] += grads.shape[1]
        return grads.shape[1]

    @njit  # no explicit signature: first_class compiles the C-contiguous one
    def counts_workers(grads, state):
        state[0] += grads.shape[0]
        return grads.shape[0]

    @njit
    def call(observe, grads, state):
        return observe(grads, state)

    grads, state = np.zeros((3, 2, 4)), np.zeros(1, dtype=np.int64)
    for kernel, expected in ((counts_examples, 2), (counts_workers, 3), (engine.no_observer, 0)):
        assert call(engine.first_class(kernel), grads, state) == expected
    assert state[0] == 5
    assert config.DISABLE_JIT or len(call.overloads) == 1, "one compilation for all three"


@pytest.mark.parametrize("orderer, options", [
    ("rr", {}), ("cd-grab", {}), ("d-grab-pair", {}),
    ("cd-grab", {"projection": "sparse", "projection_dim": 3})])
def test_the_epoch_loops_records_are_typed_from_their_fingerprint(orderer, options):
    """Numba's dispatcher types an argument from its fingerprint, in C, unless the fingerprint
    refuses it; then in Python, field by field (~300 us an epoch for the loop's records when the
    orderer's first-class kernel was a field of Observer). Every argument but that kernel, as
    Run.epoch_inputs builds them (a projection's Projection included), must have a fingerprint."""
    from numba._dispatcher import compute_fingerprint

    from ordersim.backend import SerialBackend
    from ordersim.config import build_config
    from ordersim.simulate import Run, check_fields, prepare

    config = check_fields(build_config(dict(data="synthetic:classification?n=40&d=5", workers=4,
                                            orderers=[orderer], orderer_options=options, quiet=True)), 1)
    run = Run(prepare(config, SerialBackend(4)), orderer, 0)
    order = run.orderer.begin_epoch()[run.own_rows]
    _, inputs = run.epoch_inputs(order, 0.1, None)
    assert (inputs.observer.projection.active) is bool(options)
    for field, value in inputs._asdict().items():
        if field != "observe":
            compute_fingerprint(value)  # raises for a value it refuses

    # The scratch is the run's (Run.buffer), not the epoch's: the next epoch's inputs hold the
    # very same arrays, the step losses back at NaN and the loop's timers at 0.
    inputs.recording.trace_loss[:] = 1.0
    inputs.recording.timers[:] = 2.0
    _, again = run.epoch_inputs(order, 0.2, None)
    first, second = arrays_in(inputs), arrays_in(again)
    assert first.keys() == second.keys() and len(first) > 10
    assert [path for path in first if first[path] is not second[path]] == []
    assert np.isnan(again.recording.trace_loss).all() and not again.recording.timers.any()
    assert again.observe is inputs.observe, "one first-class value per kernel"


def arrays_in(record, path="") -> dict:
    """Every array in a tree of named tuples, by its path of field names."""
    found = {}
    for field, value in record._asdict().items():
        if isinstance(value, np.ndarray):
            found[path + field] = value
        elif hasattr(value, "_asdict"):
            found.update(arrays_in(value, f"{path}{field}."))
    return found
