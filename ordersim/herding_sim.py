"""The CD-GraB paper's random-vector experiment: how far does each orderer push parallel herding down?

m workers each hold n unit-norm Gaussian vectors in R^dim, centered per worker. Every orderer starts
from the same random orders and reorders them ``rounds`` times by observing the vectors as if they
were the gradients of one epoch; after every round the parallel herding (inf-norm, prefixes at step
boundaries) of the new order is recorded. See docs/herding_sim.md.

    python -m ordersim herding-sim --workers 1 5 10 20 --total 100000 --out herding.h5
"""

import argparse
import datetime
import json
import os
import sys
import time

import numpy as np
from numba import njit

from ordersim import numba_cache  # noqa: F401  (before the cached kernels: stamps them)
from ordersim.cli import counted
from ordersim.config import OneLineParser
from ordersim.data import check_fits_in_memory
from ordersim.metrics import parallel_herding
from ordersim.orderers import available_orderers, make_orderer, orderer_class
from ordersim.output import unwritable
from ordersim.provenance import code_state
from ordersim.streams import stream
from ordersim.trace import NotATrace, check_hdf5_file

PAPER_ORDERERS = ("rr", "d-grab", "d-grab-pair", "cd-grab")  # the CD-GraB paper's figure; run()'s default
# The command's default: the paper's, then the second wave (cd-kh is ordersim's own); kh-sgd and
# sbw are centralized and run in the m = 1 cell only.
DEFAULT_ORDERERS = PAPER_ORDERERS + ("cd-kh", "kh-sgd", "sbw")
OURS = {"cd-kh"}  # in no paper: marked wherever shown
# Orderers whose rows are not permutations: herding is not defined for them.
UNSUPPORTED = {"wr": "samples with replacement, its orders are not permutations"}
GREEDY_MAX_EXAMPLES = 5000  # greedy costs O(n^2 d) per round and worker
CHUNK_ELEMENTS = 1 << 20  # float64 elements per observe() chunk (8 MB)


@njit(cache=True, error_model="numpy")
def gather_visits(z, order, start, out):
    """out[i, j] = z[i, order[i, start + j]]: the next b vectors of every row, in visit order."""
    m, b, d = out.shape
    for i in range(m):
        for j in range(b):
            e = order[i, start + j]
            for k in range(d):
                out[i, j, k] = z[i, e, k]


def random_vectors(workers: int, examples: int, dim: int, seed: int = 0) -> np.ndarray:
    """(m, n, dim) unit-norm Gaussian vectors, centered per worker (each worker's mean subtracted).

    Worker i draws from ``stream(seed, "vectors", i, 0)``, so its vectors depend on (seed, i, n, dim)
    only, not on m or on how the work is split.
    """
    z = np.empty((workers, examples, dim))
    for i in range(workers):
        v = stream(seed, "vectors", i, 0).standard_normal((examples, dim))
        v /= np.linalg.norm(v, axis=1, keepdims=True)
        v -= v.mean(axis=0)
        z[i] = v
    return z


def _check_int(name, value, low):
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) or value < low:
        raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")


def check_orderers(names, workers_list, examples_list) -> None:
    """ValueError (one line) unless every name can run this experiment for every (m, n)."""
    known = supported_orderers()
    for name in names:
        if name in UNSUPPORTED:
            raise ValueError(f"orderer {name!r} {UNSUPPORTED[name]}; supported: {', '.join(known)}")
        if name not in known:
            raise ValueError(f"unknown orderer {name!r}; known: {', '.join(known)}")
        cls = orderer_class(name)
        if cls.centralized_alternatives and 1 not in workers_list:
            raise ValueError(
                f"orderer {name!r} is centralized and needs 1 worker, got workers "
                f"{' '.join(map(str, workers_list))}; it runs in the m = 1 cell only (add 1 to the "
                f"workers), or use {' or '.join(cls.centralized_alternatives)}"
            )
        big_n = [n for n in examples_list if n > GREEDY_MAX_EXAMPLES]
        if name == "greedy" and big_n:
            raise ValueError(
                f"orderer 'greedy' costs O(n^2 d) per round; n = {big_n[0]} examples per worker is "
                f"above its limit {GREEDY_MAX_EXAMPLES}"
            )
    duplicates = sorted({name for name in names if list(names).count(name) > 1})
    if duplicates:
        raise ValueError(f"orderer {duplicates[0]!r} is listed twice")


def supported_orderers() -> list[str]:
    return [name for name in available_orderers() if name not in UNSUPPORTED]


def run(workers, examples, dim=16, rounds=15, orderers=PAPER_ORDERERS, seed=0, batch=1,
        *, on_result=None) -> dict[str, np.ndarray]:
    """Parallel herding of each orderer's orders over ``rounds`` reorder rounds.

    workers (m), examples (n per worker), dim: the vectors are ``random_vectors(m, n, dim, seed)``:
    unit-norm Gaussian, worker i's drawn from stream(seed, "vectors", i, 0), centered per worker.

    Every orderer is built with ``make_orderer(name, m, n, dim, seed, first_order="random")``, so all
    of them start from the same random orders. One reorder round = begin_epoch(), observe() every
    row's vectors in its visit order (in chunks of about 2^20 numbers), end_epoch(). Orderers that
    ignore gradients (rr, so, flipflop) are not shown the vectors: for rr every round is simply a
    fresh random permutation per worker.

    Returns {orderer: float64 array of length rounds + 1}: entry r is the parallel herding
    (inf-norm, prefixes at step boundaries of ``batch`` positions; the paper uses batch = 1) of the
    order in use after r rounds. Entry 0 is the initial random order, equal across orderers.

    on_result(name, values, seconds), if given, is called as each orderer finishes.
    """
    for name, value, low in (("workers", workers, 1), ("examples", examples, 1), ("dim", dim, 1),
                             ("rounds", rounds, 0), ("seed", seed, 0), ("batch", batch, 1)):
        _check_int(name, value, low)
    if batch > examples:
        raise ValueError(f"batch must be an integer in 1..examples = 1..{examples}, got {batch}")
    if isinstance(orderers, str):
        orderers = (orderers,)
    check_orderers(list(orderers), [workers], [examples])

    z = random_vectors(workers, examples, dim, seed)
    chunk = max(1, min(examples, CHUNK_ELEMENTS // (workers * dim)))
    buffer = np.empty((workers, chunk, dim))
    results = {}
    for name in orderers:
        started = time.perf_counter()
        o = make_orderer(name, workers=workers, examples=examples, dim=dim, seed=seed, first_order="random",
                         run_epochs=max(rounds, 1))
        values = np.empty(rounds + 1)
        for r in range(rounds + 1):
            order = o.begin_epoch()
            values[r] = parallel_herding(z, order, batch=batch, norm="inf")
            if r == rounds:
                break
            if o.needs_gradients:
                for start in range(0, examples, chunk):
                    b = min(chunk, examples - start)
                    view = buffer[:, :b]
                    if b != chunk:
                        view = np.ascontiguousarray(view)
                    gather_visits(z, order, start, view)
                    o.observe(view)
            o.end_epoch()
        results[name] = values
        if on_result is not None:
            on_result(name, values, time.perf_counter() - started)
    return results


# -- command line -------------------------------------------------------------------------------------
PROG = "python -m ordersim herding-sim"


def _parser() -> argparse.ArgumentParser:
    names = ", ".join(supported_orderers())
    parser = OneLineParser(
        prog=PROG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=(
            "The CD-GraB paper's random-vector experiment. For every worker count m, each of the m\n"
            "workers holds n = TOTAL // m unit-norm Gaussian vectors in R^DIM, centered per worker.\n"
            "Every orderer starts from the same random orders and reorders them ROUNDS times, seeing\n"
            "the vectors as one epoch's gradients; after each round the parallel herding of the new\n"
            "order is measured: max over steps k of || sum_{t<=k} sum_i (z^i_{pi_i(t)} - zbar) ||_inf\n"
            "(prefixes at step boundaries of BATCH positions per worker). Results go to an HDF5 file,\n"
            "written cell by cell, and a table of the final herding is printed."
        ),
        epilog=f"orderers: {names}\nlayout of the output file: docs/herding_sim.md",
    )
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 5, 10, 20, 50, 100], metavar="M",
                        help="worker counts m to simulate, one cell row per m (default: 1 5 10 20 50 100)")
    parser.add_argument("--total", type=int, default=1_000_000,
                        help="total number of vectors m*n; each worker gets n = TOTAL // m (default: 1000000)")
    parser.add_argument("--dim", type=int, default=16, help="dimension of the vectors (default: 16)")
    parser.add_argument("--rounds", type=int, default=15,
                        help="reorder rounds per orderer; herding is recorded before the first and after "
                             "every round (default: 15)")
    parser.add_argument("--orderers", nargs="+", default=None, metavar="NAME",
                        help=f"orderers to compare (default: {' '.join(DEFAULT_ORDERERS)}, the "
                             f"centralized kh-sgd and sbw only when 1 is among --workers; cd-kh is "
                             f"ordersim's own, in no paper); the centralized ones (grab, pair-grab, "
                             f"kh-sgd, sbw) run in the m = 1 cell only and need 1 among --workers; "
                             f"greedy needs n <= {GREEDY_MAX_EXAMPLES}")
    parser.add_argument("--batch", type=int, default=1,
                        help="examples per worker per step: herding prefixes are taken at these step "
                             "boundaries (default: 1, as in the paper)")
    parser.add_argument("--seed", type=int, default=0,
                        help="seed of the vectors and of every orderer's random streams (default: 0)")
    parser.add_argument("--out", default="herding_sim.h5",
                        help="HDF5 file to write (default: herding_sim.h5); an existing one is "
                             "replaced only with --overwrite, and only if it is a herding-sim file")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing herding-sim --out")
    parser.add_argument("--quiet", action="store_true",
                        help="do not print a progress line per (m, orderer); the table is still printed")
    return parser


def _validate(args) -> str | None:
    """The first problem with the options as a one-line message, or None. Resolves the default
    orderers (without the centralized ones when no cell has m = 1)."""
    if args.orderers is None:
        args.orderers = [name for name in DEFAULT_ORDERERS
                         if 1 in args.workers or not orderer_class(name).centralized_alternatives]
    for option, value, low in (("--total", args.total, 1), ("--dim", args.dim, 1),
                               ("--rounds", args.rounds, 0), ("--batch", args.batch, 1),
                               ("--seed", args.seed, 0)):
        if value < low:
            return f"{option} must be >= {low}, got {value}"
    for m in args.workers:
        if m < 1:
            return f"--workers must all be >= 1, got {m}"
        if m > args.total:
            return f"--workers {m} leaves no vector per worker with --total {args.total} (need m <= total)"
    if len(set(args.workers)) != len(args.workers):
        return f"--workers lists a value twice: {' '.join(map(str, args.workers))}"
    examples = [args.total // m for m in args.workers]
    try:  # random_vectors' (m, n, dim) float64 vectors and a worker's draw of (n, dim) beside them
        check_fits_in_memory(f"--total {args.total} and --dim {args.dim}", "the m x n x dim vectors",
                             8 * args.dim * (args.total + max(examples)), "use a smaller --total or --dim")
    except ValueError as error:
        return str(error)
    if args.batch > min(examples):
        return f"--batch {args.batch} is more than n = {counted(min(examples), 'example')} per worker"
    try:
        check_orderers(args.orderers, args.workers, examples)
    except ValueError as error:
        return f"--orderers: {error}"
    return None


def _existing_output_error(out: str, overwrite: bool) -> str | None:
    """Why herding-sim must not replace `out`, or None: an existing file that is not a herding-sim
    file (a run trace, notes: never replaced), or one that is, without --overwrite. An empty file
    holds nothing to lose."""
    import h5py

    if not os.path.isfile(out) or not os.path.getsize(out):
        return None
    try:
        check_hdf5_file(out)
    except NotATrace as why:
        return f"--out {out!r} exists and {why}; herding-sim replaces only its own files: choose another --out"
    try:
        with h5py.File(out, "r") as f:
            kind = f.attrs.get("experiment")
    except OSError:  # a damaged HDF5 file: not known to be herding-sim's
        kind = None
    if kind != "herding-sim":
        return (f"--out {out!r} exists and is not a herding-sim file; herding-sim replaces only its own "
                f"files: choose another --out")
    if not overwrite:
        return f"--out {out!r} already holds a herding-sim file; pass --overwrite to replace it"
    return None


def _table(args, results, initial) -> str:
    width = max(11, *(len(name) + 2 for name in args.orderers))
    head = f"{'m':>6} {'n':>9} {'start':>{width}}" + "".join(
        f"{name + ('*' if name in OURS else ''):>{width}}" for name in args.orderers)
    lines = [f"parallel herding (inf-norm, batch {args.batch}) after {counted(args.rounds, 'round')}; "
             f"start = the shared random order; - = not run (centralized, m > 1)", head]
    for m in args.workers:
        n = args.total // m
        if m not in initial:
            continue
        row = f"{m:>6} {n:>9} {initial[m]:>{width}.3f}"
        for name in args.orderers:
            value = results.get((m, name))
            row += f"{value[-1]:>{width}.3f}" if value is not None else f"{'-':>{width}}"
        lines.append(row)
    if OURS & set(args.orderers):
        lines.append("* ordersim's own coordinated kernel halving, in no paper (docs/algorithms.md)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    import h5py

    args = _parser().parse_args(sys.argv[1:] if argv is None else argv)
    problem = _validate(args)
    if problem:
        print(f"{PROG}: error: {problem}", file=sys.stderr)
        return 2
    config = {
        "workers": args.workers, "total": args.total, "dim": args.dim, "rounds": args.rounds,
        "orderers": args.orderers, "batch": args.batch, "seed": args.seed, "norm": "inf",
        "first_order": "random", "out": args.out,
    }
    problem = _existing_output_error(args.out, args.overwrite)
    if problem:
        print(f"{PROG}: error: {problem}", file=sys.stderr)
        return 2
    try:
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)  # as `run --out` does
        handle = h5py.File(args.out, "w")
    except OSError as error:
        print(f"{PROG}: error: {unwritable('--out', args.out, error)}", file=sys.stderr)
        return 2

    results, initial = {}, {}
    with handle:
        handle.attrs["experiment"] = "herding-sim"
        handle.attrs.update(code_state())  # ordersim_version, git commit, libraries, command line
        handle.attrs["config"] = json.dumps(config, sort_keys=True)
        handle.attrs["start_time"] = datetime.datetime.now(datetime.timezone.utc).isoformat()
        handle.flush()
        try:
            for m in args.workers:
                n = args.total // m
                group = handle.create_group(f"m_{m}")
                group.attrs.update({"workers": m, "examples_per_worker": n})

                def store(name, values, seconds, m=m, n=n, group=group):
                    results[(m, name)] = values
                    initial[m] = values[0]
                    data = group.create_dataset(name, data=values)
                    data.attrs.update({
                        "orderer": name, "workers": m, "examples_per_worker": n, "dim": args.dim,
                        "rounds": args.rounds, "batch": args.batch, "seed": args.seed, "norm": "inf",
                        "seconds": seconds,
                    })
                    handle.flush()
                    if not args.quiet:
                        print(f"m={m:<4} n={n:<8} {name:<12} herding {values[0]:10.3f} -> {values[-1]:10.3f}"
                              f"  ({seconds:.1f} s)", flush=True)

                cell = [name for name in args.orderers
                        if m == 1 or not orderer_class(name).centralized_alternatives]
                run(m, n, dim=args.dim, rounds=args.rounds, orderers=cell, seed=args.seed,
                    batch=args.batch, on_result=store)
        except KeyboardInterrupt:
            print(_table(args, results, initial))
            print(f"interrupted; the finished cells are in {args.out}", file=sys.stderr)
            return 130
        handle.attrs["end_time"] = datetime.datetime.now(datetime.timezone.utc).isoformat()
    print(_table(args, results, initial))
    print(f"results: {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
