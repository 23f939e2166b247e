"""Time to prepare a run (its data rows and the problem's constants), in units of an rr epoch.

    python benchmarks/bench_prepare.py            # N = 1 000 000, d = 128 (1 GB of rows; a minute or two)
    python benchmarks/bench_prepare.py --quick    # N = 100 000, seconds
    python benchmarks/bench_prepare.py --ranks 2  # the data plan and rows phases on 2 MPI ranks, before/after

Logistic regression on `synthetic:classification?n=N&d=127` plus the intercept (d = 128), no test
split, m = 8 workers, serial backend, the constants' cache off. The phases of `simulate.prepare`,
timed one by one: the data plan (`open_dataset`: the one pass over the rows, which generates them,
checks them and computes the labels and the standardization statistics, keeping the rows), the rows
(`DataPlan.train_rows` of every worker's shard: those kept rows, standardized in place) and the constants (`constants.compute_constants`: the row statistics, the solver
for x*, with its count of gradient passes and Hessian-vector products over all rows and of its
gradients and d x d Hessians over the subsample, then sigma*^2 and zeta*^2).
Then the best of 3 rr epochs (`Run.train_epoch`, after a warm-up on a slice), and a vectorized read
of the rows (bench_orderers' `read_sum`): each phase is printed in seconds, in rr epochs and as the
bandwidth of one pass over the rows (their bytes over its seconds) in % of that read's; then the
solver's gradient passes and Hessian-vector products the same way; the data plan's time generating
the rows, next to a first touch of as much fresh memory as the rows take (what the machine's page
faults cost the data plan, which keeps its rows in such memory; docs/performance.md); and how many
synthetic blocks were generated against how many there are.
Target (issue #23): data and constants within 5 rr epochs; every pass over the rows at >= 50 % of
the read's bandwidth; synthetic rows generated once.
With --ranks R the script re-launches itself as `mpiexec -n R` (mpiexec next to this Python) and
times only the two data phases, with the MPI backend and m = 8 workers, twice: "before", the rows
generated again by each rank for its workers' shards (`open_dataset(keep_rows=False)`, the path
every rank took before the kept rows were routed), and "after", what `prepare` does (each rank
keeps the rows of the blocks it surveys, and `train_rows` routes them to the ranks whose workers
hold them); the phases' wall times (between barriers), their ratios, the synthetic blocks
generated over all ranks, whether both give the same bits, and each rank's peak resident memory
after the "after" run (it runs first) in units of its rows.
This is a script: it prints and never asserts (pytest does not collect it).
"""

import os

for _var in ("NUMBA_NUM_THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import resource  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # benchmark the checkout this script is in (not another install)
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_orderers import read_sum  # noqa: E402
from bench_simulator import M, make_config, warm_up  # noqa: E402


class Timed:
    """Wraps a function: calls and seconds spent in it."""

    def __init__(self, fn):
        self.fn, self.calls, self.seconds = fn, 0, 0.0

    def __call__(self, *args, **kwargs):
        start = time.perf_counter()
        try:
            return self.fn(*args, **kwargs)
        finally:
            self.calls += 1
            self.seconds += time.perf_counter() - start


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="N = 100 000")
    parser.add_argument("--examples", type=int, default=None, metavar="N", help="N (default 1 000 000)")
    parser.add_argument("--ranks", type=int, default=0, metavar="R",
                        help="time the data phases under mpiexec -n R (R >= 2), before and after routing")
    parser.add_argument("--mpi-part", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    N = args.examples or (100_000 if args.quick else 1_000_000)
    if args.mpi_part:
        mpi_part(N)
        return
    if args.ranks:
        if args.ranks < 2:
            parser.error(f"--ranks must be at least 2, got {args.ranks}")
        mpiexec = Path(sys.executable).parent / "mpiexec"
        subprocess.run([str(mpiexec if mpiexec.exists() else "mpiexec"), "-n", str(args.ranks), sys.executable,
                        str(Path(__file__).resolve()), "--mpi-part", "--examples", str(N)], check=False, cwd=ROOT)
        return

    from ordersim import aligned, constants, data
    from ordersim.backend import SerialBackend
    from ordersim.constants import WorkerRows
    from ordersim.simulate import Run, Setup, _plan, learning_rate

    config = make_config(N, "serial", 1)
    backend = SerialBackend(M)
    block = Timed(data.SyntheticRows.block)
    data.SyntheticRows.block = lambda rows, b: block(rows, b)
    times = {}
    start = time.perf_counter()
    problem, plan, shards, dropped = _plan(config, backend)
    times["data plan (generate and check rows, labels, statistics)"] = time.perf_counter() - start
    start = time.perf_counter()
    A = plan.train_rows(shards.reshape(-1))
    y = np.ascontiguousarray(plan.y[shards.reshape(-1)])
    times["rows (standardize the rows that pass kept)"] = time.perf_counter() - start

    statistics, solver = Timed(constants.row_statistics), Timed(constants.minimize)
    constants.row_statistics, constants.minimize = statistics, solver
    full_grad, subsample_grad = Timed(problem.full_grad), Timed(problem.full_grad)
    setup_hessian, hessian_matrix = Timed(problem.hessian_at), Timed(problem.hessian_matrix)
    hessp = Timed(None)  # every Hessian-vector product of every shard, wherever its x
    subsample_rows = [0]

    def grad(x, A, y, idx, params, out):  # a whole shard, or the solver's subsample of it
        if idx.shape[0] == shards.shape[1]:
            return full_grad(x, A, y, idx, params, out)
        subsample_rows[0] += idx.shape[0]
        return subsample_grad(x, A, y, idx, params, out)

    def hessian_at(x, A, y):
        product = setup_hessian(x, A, y)

        def timed(v):
            hessp.fn = product
            return hessp(v)
        return timed

    # instance attributes: minimize calls these
    problem.full_grad, problem.hessian_at, problem.hessian_matrix = grad, hessian_at, hessian_matrix
    start = time.perf_counter()
    consts = constants.compute_constants(problem, WorkerRows(backend, A, y, shards.shape[1]))
    total = time.perf_counter() - start
    times["constants: row statistics (Gram matrix, spectrum)"] = statistics.seconds
    times["constants: solver for x* (gradients, Hessian-vector products)"] = solver.seconds
    times["constants: sigma*^2, zeta*^2"] = total - statistics.seconds - solver.seconds

    setup = Setup(config, backend, problem, A, y, shards.shape[1], shards, dropped, consts, None, None,
                  np.zeros(M + 1, dtype=np.int64), plan.info)
    lr = learning_rate(config, 0, setup)
    warm_up(setup, lr)
    run = Run(setup, "rr", 0)
    epoch = min(_timed_epoch(run, e + 1, lr) for e in range(3))

    read = np.inf
    read_sum(A)
    for _ in range(3):
        start = time.perf_counter()
        read_sum(A)
        read = min(read, time.perf_counter() - start)
    gb = A.nbytes / 1e9
    # The machine's cost of memory never touched before, for as many bytes as the rows (the data
    # plan keeps the rows it generates in such memory): allocated as the rows are, with NumPy
    # (which asks for transparent huge pages), while the rows still exist, so none of their pages
    # can be reused.
    fresh = aligned.empty(A.shape)
    start = time.perf_counter()
    fresh.fill(0.0)
    first_touch = time.perf_counter() - start
    del fresh

    def bandwidth(passes, seconds):  # GB/s of `passes` passes over the rows, and % of the read's
        rate = passes * gb / max(seconds, 1e-12)
        return f"{rate:6.1f} GB/s {100 * rate * read / gb:5.0f} %"

    print(f"prepare: logistic, N = {N}, d = {A.shape[1]}, m = {M} (rows: {gb:.2f} GB); "
          f"rr epoch {epoch:.3f} s; a read of the rows {read:.3f} s ({gb / read:.1f} GB/s)")
    print(f"  {'phase':<64} {'s':>8} {'rr epochs':>10}   one pass: of the read")
    for name, seconds in times.items():
        print(f"  {name:<64} {seconds:>8.2f} {seconds / epoch:>10.1f}   {bandwidth(1, seconds)}")
    prep = sum(times.values())
    print(f"  {'total':<64} {prep:>8.2f} {prep / epoch:>10.1f}   (target <= 5 rr epochs: "
          f"{'met' if prep <= 5 * epoch else 'MISSED'})")
    passes, products = full_grad.calls / M, hessp.calls / M
    print(f"  solver: {passes:.0f} gradient passes ({full_grad.seconds:.2f} s, {bandwidth(passes, full_grad.seconds)}), "
          f"{products:.0f} Hessian-vector products ({hessp.seconds:.2f} s, {bandwidth(products, hessp.seconds)}, "
          f"one read of the rows each; {setup_hessian.seconds:.2f} s more for what depends on x alone)")
    print(f"  solver's subsample: {subsample_grad.calls / M:.0f} gradients ({subsample_rows[0] / N:.2f} passes, "
          f"{subsample_grad.seconds:.2f} s), {hessian_matrix.calls / M:.0f} d x d Hessians ({hessian_matrix.seconds:.2f} s)")
    print(f"  of the data plan: generating the rows {block.seconds:.2f} s ({block.seconds / epoch:.1f} rr epochs); "
          f"a first touch of as much fresh memory as the rows {first_touch:.2f} s ({first_touch / epoch:.1f} rr "
          f"epochs: this machine's page faults)")
    blocks = -(-N // data.SYNTHETIC_BLOCK)
    print(f"  synthetic blocks generated: {block.calls} of {blocks} (target: each once)")


def mpi_part(N: int) -> None:
    """The data plan and rows phases on every rank of MPI_COMM_WORLD, before and after routing."""
    from mpi4py import MPI

    from ordersim import data, simulate
    from ordersim.backend import MPIBackend

    comm = MPI.COMM_WORLD
    backend = MPIBackend(M, comm)
    block = Timed(data.SyntheticRows.block)
    data.SyntheticRows.block = lambda rows, b: block(rows, b)
    keeping = simulate.open_dataset

    def phases(examples: int, keep: bool):
        """(data plan seconds, rows seconds, blocks generated over the ranks, this rank's rows)."""
        simulate.open_dataset = keeping if keep else lambda *a, **k: keeping(*a, **dict(k, keep_rows=False))
        config = make_config(examples, "mpi", comm.size)
        calls = block.calls
        comm.Barrier()
        start = time.perf_counter()
        _, plan, shards, _ = simulate._plan(config, backend)
        comm.Barrier()
        planned = time.perf_counter()
        A = plan.train_rows(shards[backend.first:backend.last].reshape(-1))
        comm.Barrier()
        end = time.perf_counter()
        return planned - start, end - planned, comm.allreduce(block.calls - calls), A

    for keep in (True, False):  # what compiles or is imported on a first call, on a small set
        phases(20_000, keep)
    after = phases(N, True)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # bytes (Linux: ru_maxrss in KiB)
    before = phases(N, False)
    same = comm.allreduce(int(before[3].tobytes() == after[3].tobytes()), op=MPI.MIN)
    peaks = comm.gather(peak / after[3].nbytes)
    backend.close()
    if comm.rank:
        return
    rows = after[3]
    print(f"prepare under mpiexec -n {comm.size}: logistic, N = {N}, d = {rows.shape[1]}, m = {M}, shuffled "
          f"partition (rows of a rank: {rows.nbytes / 1e9:.2f} GB)")
    print(f"  {'phase':<58} {'before s':>9} {'after s':>9}  after/before")
    names = ("data plan (generate and check rows, labels, statistics)",
             "rows (before: generated again; after: routed to their ranks)")
    for name, b, a in zip(names, before[:2], after[:2]):
        print(f"  {name:<58} {b:>9.2f} {a:>9.2f}  {a / b:>8.2f}")
    b, a = sum(before[:2]), sum(after[:2])
    print(f"  {'data plan + rows':<58} {b:>9.2f} {a:>9.2f}  {a / b:>8.2f}")
    blocks = -(-N // data.SYNTHETIC_BLOCK)
    print(f"  synthetic blocks generated over the ranks: before {before[2]}, after {after[2]} of {blocks} "
          f"(target: each once); the same bits: {'yes' if same else 'NO'}")
    print(f"  peak resident memory of a rank after the routed phases: "
          f"{', '.join(f'{p:.2f}' for p in peaks)} x its rows")


def _timed_epoch(run, epoch, lr) -> float:
    start = time.perf_counter()
    run.train_epoch(epoch, lr)
    return time.perf_counter() - start


if __name__ == "__main__":
    main()
