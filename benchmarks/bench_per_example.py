"""The engine's fixed cost per example (issue #23 item 3): rr's epoch next to a hand-written loop.

    python benchmarks/bench_per_example.py            # N = 200 000, about a minute of CPU time
    python benchmarks/bench_per_example.py --quick    # N = 40 000, seconds

Logistic regression (lam = 1e-3, no momentum, no weight decay), one worker, rr's visits (random
permutations), d in {8, 128} and b in {1, 8}, the rows of A standard normal, y = +-1. At d = 8 the
rows are 4 000 (256 KB, they stay in L2) visited in PASSES permutations one after the other, so the
fixed cost per example shows, not memory; at d = 128 they are N (200 MB: every row comes from
memory) visited once.

- engine: engine.epoch_loop (the loop Run.train_epoch calls) over those visits, with the inputs
  Run.epoch_inputs builds for rr (no gradients kept) and no trace (trace_every = 0); "traced":
  the same with the loss recorded at every step (trace_every = 1);
- hand: `hand_sgd` below, 20 lines of Numba with the same arithmetic (the problem's fastmath dot
  product and sigmoid, lam x in every example's gradient, x -= lr (sum / b)) and no loss;
- read: at d = 128, a sum of the rows of A in the same random order (one 1 KB row per example:
  the memory-bound floor of any SGD over them).

Times are the process's CPU time (time.process_time: a shared machine's other jobs take wall
time, not this), each variant in turn, `--repeats` times, the best kept. Prints ns per example and
the ratios, with the targets: engine / hand <= 1.5 at d = 8; engine at b = 8 no slower per example
than at b = 1; read / engine >= 0.5 at d = 128.

This is a script: it prints and never asserts (pytest does not collect it).
"""

import os

for _var in ("NUMBA_NUM_THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
from numba import njit  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # benchmark the checkout this script is in (not another install)

from ordersim import aligned, engine  # noqa: E402
from ordersim.problems import make_problem  # noqa: E402
from ordersim.problems._kernels import FAST, sigmoid  # noqa: E402

DIMS, BATCHES = (8, 128), (1, 8)
SMALL_ROWS, PASSES = 4_000, 20  # d = 8: rows in L2, visited PASSES times per timed call
LAM, LR = 1e-3, 0.05


@njit(fastmath=FAST, error_model="numpy")
def hand_sgd(x, A, y, order, b, lr, lam, grad):
    """SGD over `order`, b examples a step: the engine's arithmetic for logistic regression."""
    n, d = order.shape[0], x.shape[0]
    for start in range(0, n, b):
        count = min(b, n - start)
        grad[:] = 0.0
        for r in range(start, start + count):
            i = order[r]
            z = 0.0
            for j in range(d):
                z += A[i, j] * x[j]
            c = -y[i] * sigmoid(-y[i] * z)
            for j in range(d):
                grad[j] += c * A[i, j] + lam * x[j]
        for j in range(d):
            x[j] -= lr * (grad[j] / count)


@njit(fastmath=FAST, error_model="numpy")
def read_rows(A, order):
    """Sum of the rows of A in `order`: one random row read per example, vectorized."""
    total = 0.0
    for i in order:
        for j in range(A.shape[1]):
            total += A[i, j]
    return total


def engine_epoch(problem, A, y, order, b, trace_every):
    """One serial rr epoch through engine.epoch_loop from x = 0 (the inputs as Run.epoch_inputs
    builds them for an orderer that keeps no gradients); returns the seconds."""
    n, d = order.shape[1], problem.dim
    steps = -(-n // b)
    inputs = engine.EpochInputs(
        engine.Model(aligned.zeros(d), aligned.zeros(d)),
        engine.Data(A, y, problem.params, order, n, b, np.empty(b, dtype=np.int64)),
        engine.UpdateRule(LR, 0.0, 0.0, aligned.empty((1, 1, d)), np.zeros((1, 1, 1)), False, 0,
                          aligned.empty(d)),
        engine.first_class(engine.no_observer),
        engine.Observer(engine.NO_GRADIENTS, np.zeros(1, dtype=np.int64), aligned.empty((1, 1, 1)),
                        aligned.empty((b, d)), engine.no_projection()),
        None,
        engine.Recording(trace_every, np.full(steps, np.nan), np.zeros(3)))
    loop = engine.epoch_loop(problem.batch_grads)
    start = time.process_time()
    done = loop(*inputs)
    elapsed = time.process_time() - start
    if done != steps:
        raise RuntimeError(f"the epoch ended after {done} of {steps} steps (diverged)")
    return elapsed


def hand_epoch(A, y, order, b):
    x = aligned.zeros(A.shape[1])
    start = time.process_time()
    hand_sgd(x, A, y, order[0], b, LR, LAM, aligned.empty(A.shape[1]))
    return time.process_time() - start


def read_epoch(A, order):
    start = time.process_time()
    read_rows(A, order[0])
    return time.process_time() - start


def measure(rows: int, passes: int, d: int, repeats: int) -> dict:
    """Best CPU seconds per example of every variant at dimension d: `passes` random permutations
    of `rows` rows."""
    rng = np.random.default_rng(0)
    A = aligned.on_cache_line(rng.standard_normal((rows, d)))
    y = np.where(rng.random(rows) < 0.5, -1.0, 1.0)
    order = np.concatenate([rng.permutation(rows) for _ in range(passes)]).astype(np.int64)[None, :]
    visits = order.shape[1]
    problem = make_problem("logistic", d, 2, lam=LAM)
    engine.compile_for_steps(problem.batch_grads)
    variants = {}
    for b in BATCHES:
        variants[f"engine b={b}"] = lambda b=b: engine_epoch(problem, A, y, order, b, 0)
        variants[f"engine b={b} traced"] = lambda b=b: engine_epoch(problem, A, y, order, b, 1)
        variants[f"hand b={b}"] = lambda b=b: hand_epoch(A, y, order, b)
    if d >= 128:
        variants["read"] = lambda: read_epoch(A, order)
    few = order[:, :64].copy()
    for b in BATCHES:  # compile outside the timing
        engine_epoch(problem, A, y, few, b, 0)
        hand_epoch(A, y, few, b)
    read_epoch(A, few)
    best = dict.fromkeys(variants, np.inf)
    names = list(variants)
    for rep in range(repeats):
        for name in (names if rep % 2 == 0 else names[::-1]):  # alternate who goes first
            best[name] = min(best[name], variants[name]())
    return {name: seconds / visits for name, seconds in best.items()}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="N = 40 000 at d = 128 (40 MB: partly in L3)")
    p.add_argument("--repeats", type=int, default=None, help="timed epochs per variant (best kept)")
    args = p.parse_args()
    N = 40_000 if args.quick else 200_000
    repeats = args.repeats or (5 if args.quick else 7)
    print(f"bench_per_example: {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}; logistic, one "
          f"worker; d = 8: {PASSES} x {SMALL_ROWS} rows, d = 128: {N} rows; best of {repeats}; CPU ns "
          f"per example", flush=True)
    print(f"  {'d':>4} {'b':>3} {'engine':>8} {'traced':>8} {'hand':>8} {'engine/hand':>12} "
          f"{'b=8/b=1':>8} {'read':>8} {'read/engine':>12}")
    verdicts = []
    for d in DIMS:
        rows, passes = (SMALL_ROWS, PASSES) if d == 8 else (N, 1)
        ns = {name: seconds * 1e9 for name, seconds in measure(rows, passes, d, repeats).items()}
        for b in BATCHES:
            eng, hand = ns[f"engine b={b}"], ns[f"hand b={b}"]
            per_b = eng / ns["engine b=1"]
            read = ns.get("read")
            read_cols = f"{read:>8.1f} {read / eng:>12.2f}" if read else f"{'':>8} {'':>12}"
            print(f"  {d:>4} {b:>3} {eng:>8.1f} {ns[f'engine b={b} traced']:>8.1f} {hand:>8.1f} "
                  f"{eng / hand:>12.2f} {per_b:>8.2f} {read_cols}", flush=True)
            if d == 8:
                verdicts.append((f"d = 8, b = {b}: engine / hand <= 1.5", eng / hand, eng / hand <= 1.5))
            if b > 1:
                verdicts.append((f"d = {d}: engine b = {b} / b = 1 <= 1", per_b, per_b <= 1.0))
            if read and b == 1:
                verdicts.append((f"d = {d}, b = 1: read / engine >= 0.5", read / eng, read / eng >= 0.5))
    for what, value, met in verdicts:
        print(f"  target {what}: {value:.2f} -> {'met' if met else 'MISSED'}")


if __name__ == "__main__":
    main()
