"""`python -m ordersim [run CONFIG.toml] [--field value ...]`: train and trace (see --help)."""

import argparse
import json
import os
import pickle
import sys
import time

from ordersim.backend import MPIBackend, SerialBackend, abort_on_exception, world
from ordersim.checkpoint import EXIT_CHECKPOINTED, StopRequest, checkpoint_path
from ordersim.checkpoint import FORMAT as CHECKPOINT_FORMAT
from ordersim.checkpoint import load as load_checkpoint
from ordersim.cli import commands_help
from ordersim.config import ConfigError, add_arguments, build_config, overrides_from_args
from ordersim.sweep import config_cells, select_cell
from ordersim.trace import EXIT_TRACE_WRITE, TraceWriteError

DESCRIPTION = f"""\
Synchronous data-parallel SGD over m workers with each orderer and seed; traces go to one HDF5 file
(layout: docs/trace-format.md). Under `mpiexec -n K` (or `srun`) the K ranks host the m workers
(m a multiple of K); alone, the serial backend simulates all workers in one process. Without a
config file, the built-in default experiment runs: logistic regression on scikit-learn's
breast_cancer data, rr, d-grab and cd-grab, 3 seeds. Every config field can be set in the TOML
file or by its flag (flags win). A config with a [sweep] table runs every cell into its own file,
or only cell I with --cell I (or SLURM_ARRAY_TASK_ID): see `python -m ordersim sweep --help`.
SIGTERM or SIGUSR1 (Slurm's warning) makes every rank stop at the next epoch boundary, write a
checkpoint next to the trace and exit with code {EXIT_CHECKPOINTED}; run again with --resume.
One Numba/BLAS thread per rank unless NUMBA_NUM_THREADS / OMP_NUM_THREADS say otherwise."""


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m ordersim [run]", description=DESCRIPTION,
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=commands_help())
    p.add_argument("config", nargs="?", help="TOML experiment config (runs/ has examples)")
    p.add_argument("--cell", type=int, default=None, metavar="I",
                   help="run only cell I of the config's [sweep] (default: SLURM_ARRAY_TASK_ID when "
                        "set, else every cell in turn)")
    p.add_argument("--resume", action="store_true",
                   help="continue from the checkpoint next to the output file (<out>.ckpt) if there "
                        "is one, else start from the beginning; the config must be the same")
    add_arguments(p)
    return p


def main(argv: list[str]) -> int:
    comm, size = world()
    args = parser().parse_args(argv)
    return abort_on_exception(comm, _main, args, comm, size)


def _main(args, comm, size) -> int:
    rank = comm.Get_rank() if comm is not None else 0
    try:
        runs = [({}, None)]
        if args.config:
            runs = select_cell(config_cells(args.config), args.config, args.cell)
    except ConfigError as err:
        if rank == 0:
            print(f"ordersim: error: {err}", file=sys.stderr, flush=True)
        return 2
    for values, cell in runs:  # one run, or every cell of a sweep in turn
        status = run_config({**values, **overrides_from_args(args)}, args.resume, comm, size, rank, cell)
        if status:
            return status
    return 0


def run_config(values: dict, resume: bool, comm, size: int, rank: int, cell: dict | None) -> int:
    from ordersim.simulate import (Checkpointed, check_fields, check_output, default_out_path,
                                   prepare, run_experiment, summary_table)

    stop = StopRequest()  # from the start: a signal during set-up stops at the first epoch boundary
    backend = SerialBackend(1)
    try:
        config = check_fields(build_config(values), size)
        backend = (MPIBackend(config.workers, comm, config.exchange) if config.backend == "mpi"
                   else SerialBackend(config.workers))
        out = backend.bcast(config.out or default_out_path())
        error = check_output(out) if rank == 0 else None
        state, complete = None, False
        if resume and rank == 0 and error is None:
            complete = trace_is_complete(out, config)
            if not complete:
                state, error = read_checkpoint(out, config, size)
        error = backend.agree(error)
        if error:
            raise ConfigError(error)
        if backend.bcast(complete):
            if rank == 0:
                print(f"ordersim: {out} is already complete: nothing to resume", flush=True)
            return 0
        state = broadcast_resume(backend, state)
        setup = prepare(config, backend)
    except ConfigError as err:
        if rank == 0:
            print(f"ordersim: error: {err}", file=sys.stderr, flush=True)
        return 2
    if rank == 0 and setup.dropped:
        print(f"ordersim: warning: dropped {setup.dropped} training examples so that each of the "
              f"{config.workers} workers holds {setup.n} (recorded as 'dropped_examples' in the trace)",
              file=sys.stderr, flush=True)
    if rank == 0 and not config.quiet:
        where = f" (sweep cell {json.dumps(cell)})" if cell else ""
        print(f"ordersim: {config.problem} on {config.data}{where}: m = {config.workers} workers x "
              f"n = {setup.n} examples, d = {setup.problem.dim}, b = {config.batch}, {config.epochs} "
              f"epochs, backend {config.backend} on {backend.size} rank(s)", flush=True)
        if state is not None:
            print(f"ordersim: resuming from {checkpoint_path(out)}", flush=True)
    start = time.perf_counter()
    # backend.close() is collective: only on the paths every rank takes (an exception aborts)
    try:
        results = run_experiment(config, backend, setup, out, stop, state, cell)
    except Checkpointed as stopped:
        backend.close()
        if rank == 0:
            print(f"ordersim: stopped by a signal; checkpoint {stopped}; trace {out}; continue with "
                  f"--resume (exit {EXIT_CHECKPOINTED})", file=sys.stderr, flush=True)
        return EXIT_CHECKPOINTED
    except TraceWriteError as err:  # raised on rank 0, the writer, while the others compute
        print(f"ordersim: error: {err} (exit {EXIT_TRACE_WRITE})", file=sys.stderr, flush=True)
        if backend.size > 1:
            backend.abort(EXIT_TRACE_WRITE)  # the other ranks wait in a collective: end them
        if not err.intact:  # HDF5 failed mid-write: tearing down its objects could crash
            sys.stdout.flush()
            os._exit(EXIT_TRACE_WRITE)
        return EXIT_TRACE_WRITE
    backend.close()
    if rank == 0:
        print()
        print(summary_table(results))
        print(f"\ntrace: {out}  ({time.perf_counter() - start:.1f} s)", flush=True)
    return 0


RESULT_NEUTRAL = ("quiet", "exchange")  # fields that change no value in the trace


def config_differences(saved_json: str, config) -> list[str]:
    """Fields (other than RESULT_NEUTRAL ones) in which config differs from a saved config's JSON."""
    saved, current = json.loads(saved_json), json.loads(config.to_json())
    return sorted(k for k in current if k not in RESULT_NEUTRAL and saved.get(k) != current[k])


def trace_is_complete(out: str, config) -> bool:
    """True when `out` holds a finished job of this config (and no checkpoint waits to resume)."""
    import h5py

    if os.path.exists(checkpoint_path(out)) or not os.path.exists(out) or not os.path.getsize(out):
        return False
    try:
        with h5py.File(out, "r", locking=config.hdf5_locking) as f:
            return "end_time" in f.attrs and not config_differences(f.attrs["config"], config)
    except OSError:  # not an HDF5 file (e.g. an empty file)
        return False


def read_checkpoint(out: str, config, size: int) -> tuple[dict | None, str | None]:
    """(checkpoint, None), (None, None) when there is none, or (None, error) when it does not fit."""
    path = checkpoint_path(out)
    if not os.path.exists(path):
        print(f"ordersim: no checkpoint {path}: starting from the beginning", file=sys.stderr, flush=True)
        return None, None
    try:
        state = load_checkpoint(path)
    except (OSError, EOFError, pickle.UnpicklingError, AttributeError, ImportError) as err:
        return None, f"--resume: checkpoint {path!r} is unreadable ({err}); delete it to start over"
    written = state.get("format", 1)
    if written != CHECKPOINT_FORMAT:
        return None, (f"--resume: checkpoint {path!r} has format {written}, this ordersim reads format "
                      f"{CHECKPOINT_FORMAT} (written by another version); delete it to start over")
    differ = config_differences(state["config"], config)
    if differ:
        saved, current = json.loads(state["config"]), json.loads(config.to_json())
        return None, (f"--resume: the config differs from the checkpoint's in {', '.join(differ)} "
                      f"(e.g. {differ[0]} = {current[differ[0]]!r}, checkpoint {saved.get(differ[0])!r})")
    if state["ranks"] != size:
        return None, (f"--resume: the checkpoint was written by {state['ranks']} ranks; run with "
                      f"{state['ranks']} ranks (got {size})")
    return state, None


def broadcast_resume(backend, state: dict | None) -> dict | None:
    """Every rank gets the checkpoint's plan position; the run states stay on rank 0 (scattered later)."""
    light = None if state is None else {k: v for k, v in state.items() if k != "run_states"}
    light = backend.bcast(light)
    if backend.rank == 0:
        return state
    return light
