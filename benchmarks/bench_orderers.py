"""Per-example cost of Orderer.observe() next to the cost of merely reading the same gradients.

    python benchmarks/bench_orderers.py            # full grid, about a minute or two
    python benchmarks/bench_orderers.py --quick    # a few seconds

For every orderer, d in {16, 128, 1024}, m in {1, 8, 64} (grab and pair-grab: m = 1 only) and
b in {1, 16}, one epoch of observe() calls is timed over a pool of preallocated (m, b, d) float64
gradient buffers (cycled, so consecutive gradients differ, as a training loop's would). The
baseline, "read", sums the same buffers, called the same way, once per step, in the same process:
it pays the same Python call per step and one pass over the numbers at the speed the core reads
them (a jitted sum with reassociation allowed, which LLVM turns into SIMD lanes with several
accumulators: tens of GB/s from L1/L2, the memory bandwidth beyond). The ratio observe / read is
the orderer's cost in units of "reading the gradient once"; the read's bandwidth is printed per
cell (GB/s), so a baseline slower than the machine's reads shows.

Also printed: the per-call overhead of observe() at m = b = 1, d = 16 in microseconds.
Targets: grab, d-grab and cd-grab within 3x of read at d >= 128; per-call overhead under 5 us.
This is a script: it prints and never asserts (pytest does not collect it).
"""

import argparse
import time

import numpy as np
from numba import njit

from ordersim.orderers import available_orderers, make_orderer, orderer_class

DIMS = (16, 128, 1024)
WORKERS = (1, 8, 64)
BATCHES = (1, 16)
POOL = 4  # distinct gradient buffers cycled through
GREEDY_MAX_EXAMPLES = 512  # greedy is O(n^2 d) per epoch: only at small n
TARGETS = ("grab", "d-grab", "cd-grab")
RUN_EPOCHS = 100  # the run length told to orderers whose rule needs one (kh-sgd, sbw): more than timed here


@njit(cache=True, fastmath=True)
def read_sum(grads):
    """One pass over the (m, b, d) gradients (C-contiguous) at the core's read speed: fastmath lets
    LLVM reorder the additions into vector lanes (a plain sequential sum waits on each add)."""
    flat = grads.reshape(-1)
    total = 0.0
    for k in range(flat.size):
        total += flat[k]
    return total


def _examples(m, d, b, work):
    """n: about ``work`` numbers per epoch, a multiple of b, at least 4 steps."""
    steps = max(4, work // (m * d * b))
    return steps * b


def _time_epochs(fn, repeats, budget):
    """Best of the times fn() returns over up to ``repeats`` calls (stops early after ``budget`` seconds)."""
    best, spent = np.inf, 0.0
    for _ in range(repeats):
        elapsed = fn()
        best, spent = min(best, elapsed), spent + elapsed
        if spent > budget:
            break
    return best


def bench_cell(name, m, d, b, work, repeats, budget, options=None):
    """(n, ns per example of observe(), ns per example of the read, the read's GB/s) for one
    epoch of b-example steps of `name` with `options` (make_orderer's)."""
    n = _examples(m, d, b, work)
    if name == "greedy":
        n = min(n, GREEDY_MAX_EXAMPLES // b * b)
    rng = np.random.default_rng(0)
    pool = [rng.standard_normal((m, b, d)) for _ in range(POOL)]
    steps = n // b
    o = make_orderer(name, workers=m, examples=n, dim=d, seed=0, **{"run_epochs": RUN_EPOCHS, **(options or {})})

    def epoch_observe():
        # Only the observe() calls are timed: begin_epoch/end_epoch (building the next order) are
        # once-per-epoch costs, not per-example ones.
        o.begin_epoch()
        start = time.perf_counter()
        for step in range(steps):
            o.observe(pool[step % POOL])
        elapsed = time.perf_counter() - start
        if name == "greedy":  # skip its O(n^2 d) end_epoch: it is not observe()
            o.in_epoch = False
        else:
            o.end_epoch()
        return elapsed

    sink = [0.0]

    def epoch_read():
        start = time.perf_counter()
        total = 0.0
        for step in range(steps):
            total += read_sum(pool[step % POOL])
        sink[0] = total
        return time.perf_counter() - start

    epoch_observe()  # compile / warm up
    epoch_read()
    # Alternate the two so that load from other processes hits both alike; keep the best of each.
    t_observe = t_read = np.inf
    spent = 0.0
    for _ in range(repeats):
        a, b_ = epoch_observe(), epoch_read()
        t_observe, t_read, spent = min(t_observe, a), min(t_read, b_), spent + a + b_
        if spent > budget:
            break
    per = m * n
    return n, t_observe / per * 1e9, t_read / per * 1e9, steps * m * b * d * 8 / t_read / 1e9


def call_overhead(repeats=5, calls=20000):
    """Microseconds per observe() call at m = b = 1, d = 16 for each orderer, and for read_sum."""
    g = np.random.default_rng(1).standard_normal((1, 1, 16))
    result = {}
    for name in available_orderers():
        o = make_orderer(name, workers=1, examples=calls, dim=16, seed=0, run_epochs=RUN_EPOCHS)

        def epoch():
            o.begin_epoch()
            start = time.perf_counter()
            for _ in range(calls):
                o.observe(g)
            elapsed = time.perf_counter() - start
            if name == "greedy":  # skip its O(n^2 d) end_epoch
                o.in_epoch = False
            else:
                o.end_epoch()
            return elapsed

        epoch()
        result[name] = _time_epochs(epoch, repeats, 2.0) / calls * 1e6

    def read_epoch():
        start = time.perf_counter()
        for _ in range(calls):
            read_sum(g)
        return time.perf_counter() - start

    read_epoch()
    result["(read)"] = _time_epochs(read_epoch, repeats, 2.0) / calls * 1e6
    return result


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small epochs and one repeat: a few seconds")
    parser.add_argument("--orderers", nargs="+", default=None, help="orderers to time (default: all)")
    args = parser.parse_args(argv)
    work, repeats, budget = (1 << 16, 1, 0.2) if args.quick else (1 << 20, 7, 1.0)
    names = args.orderers or list(available_orderers())
    started = time.perf_counter()

    print(f"observe() cost per example in ns (best of up to {repeats} epochs of ~{work} numbers each); "
          f"read = vectorized sum over the same buffers (its bandwidth in GB/s); ratio = observe / read")
    print(f"{'orderer':<12} {'d':>5} {'m':>3} {'b':>3} {'n':>7} {'observe':>9} {'read':>8} {'GB/s':>6} {'ratio':>7}")
    misses = []
    for name in names:
        centralized = bool(orderer_class(name).centralized_alternatives)
        for d in DIMS:
            for m in (1,) if centralized else WORKERS:
                for b in BATCHES:
                    if name == "greedy" and d * m > 1024:
                        continue  # O(n^2 d m) per epoch; small cells show its per-example cost
                    n, t_obs, t_read, bandwidth = bench_cell(name, m, d, b, work, repeats, budget)
                    ratio = t_obs / t_read
                    flag = ""
                    if name in TARGETS and d >= 128 and ratio > 3.0:
                        flag = "  > 3x"
                        misses.append((name, d, m, b, ratio))
                    print(f"{name:<12} {d:>5} {m:>3} {b:>3} {n:>7} {t_obs:>9.2f} {t_read:>8.2f} {bandwidth:>6.1f} "
                          f"{ratio:>7.2f}{flag}", flush=True)

    print("\nper-call overhead at m = b = 1, d = 16 (us per observe() call; target < 5 us)")
    for name, us in call_overhead(repeats=1 if args.quick else 5, calls=2000 if args.quick else 20000).items():
        print(f"  {name:<12} {us:6.2f}{'  > 5 us' if us >= 5.0 and name != '(read)' else ''}")

    print(f"\ntargets (grab, d-grab, cd-grab within 3x of read at d >= 128): "
          f"{'all met' if not misses else f'{len(misses)} cell(s) above 3x'}")
    print(f"total benchmark time: {time.perf_counter() - started:.1f} s")


if __name__ == "__main__":
    main()
