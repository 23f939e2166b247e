"""`python -m ordersim [run CONFIG.toml] [--field value ...]`: train and trace (see --help)."""

import argparse
import sys
import time

from ordersim.cli import commands_help
from ordersim.backend import MPIBackend, SerialBackend, abort_on_exception, world
from ordersim.config import ConfigError, add_arguments, build_config, overrides_from_args, read_toml

DESCRIPTION = """\
Synchronous data-parallel SGD over m workers with each orderer and seed; traces go to one HDF5 file
(layout: docs/trace-format.md). Under `mpiexec -n K` the K ranks host the m workers (m a multiple of
K); alone, the serial backend simulates all workers in one process. Without a config file, the
built-in default experiment runs: logistic regression on scikit-learn's breast_cancer data, rr,
d-grab and cd-grab, 3 seeds. Every config field can be set in the TOML file or by its flag (flags
win). One Numba/BLAS thread per rank unless NUMBA_NUM_THREADS / OMP_NUM_THREADS say otherwise."""


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m ordersim [run]", description=DESCRIPTION,
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=commands_help())
    p.add_argument("config", nargs="?", help="TOML experiment config (runs/ has examples)")
    add_arguments(p)
    return p


def main(argv: list[str]) -> int:
    comm, size = world()
    args = parser().parse_args(argv)
    return abort_on_exception(comm, _main, args, comm, size)


def _main(args, comm, size) -> int:
    from ordersim.simulate import check_fields, check_output, default_out_path, prepare, \
        run_experiment, summary_table

    rank = comm.Get_rank() if comm is not None else 0
    serial_backend = SerialBackend(1)
    backend = serial_backend
    try:
        values = read_toml(args.config) if args.config else {}
        values.update(overrides_from_args(args))
        config = check_fields(build_config(values), size)
        backend = MPIBackend(config.workers, comm) if config.backend == "mpi" else SerialBackend(config.workers)
        out = backend.bcast(config.out or default_out_path())
        error = check_output(out) if rank == 0 else None
        error = backend.agree(error)
        if error:
            raise ConfigError(error)
        setup = prepare(config, backend)
    except ConfigError as err:
        if rank == 0:
            print(f"ordersim: error: {err}", file=sys.stderr, flush=True)
        return 2
    if setup.dropped and rank == 0:
        print(f"ordersim: warning: dropped {setup.dropped} training examples so that each of the "
              f"{config.workers} workers holds {setup.n} (recorded as 'dropped_examples' in the trace)",
              file=sys.stderr, flush=True)
    if rank == 0 and not config.quiet:
        print(f"ordersim: {config.problem} on {config.data}: m = {config.workers} workers x n = "
              f"{setup.n} examples, d = {setup.problem.dim}, b = {config.batch}, {config.epochs} epochs, "
              f"backend {config.backend} on {backend.size} rank(s)", flush=True)
    start = time.perf_counter()
    results = run_experiment(config, backend, setup, out)
    if rank == 0:
        print()
        print(summary_table(results))
        print(f"\ntrace: {out}  ({time.perf_counter() - start:.1f} s)", flush=True)
    return 0
