"""`python -m ordersim [run CONFIG.toml] [--field value ...]`: train and trace (see --help)."""

import argparse
import gc
import json
import os
import shlex
import sys
import time

from ordersim import backend as backend_module
from ordersim import cli
from ordersim.backend import (INSTALL_MPI, MPIBackend, MPIUnavailable, SerialBackend,
                              abort_on_exception, world)
from ordersim.checkpoint import CheckpointError, checkpoint_path
from ordersim.checkpoint import load as load_checkpoint
from ordersim.cli import commands_help, counted
from ordersim.config import (SIGNAL_GRACE_SECONDS, ConfigError, OneLineParser, add_arguments,
                             build_config, check_fields, overrides_from_args)
from ordersim.output import OutputLock, input_files, same_file
from ordersim.stall import EXIT_STALLED
from ordersim.stop import EXIT_CHECKPOINTED, stop_request
from ordersim.sweep import Cell, config_cells, select_cell
from ordersim.trace import EXIT_TRACE_WRITE, TraceWriteError
from ordersim.warm import warm_node_first

DESCRIPTION = f"""\
Synchronous data-parallel SGD over m workers with each orderer and seed; traces go to one HDF5 file
(layout: docs/trace-format.md). Under `mpiexec -n K` (or `srun`) the K ranks host the m workers
(m a multiple of K); alone, the serial backend simulates all workers in one process. Without a
config file, the built-in default experiment runs: logistic regression on scikit-learn's
breast_cancer data, rr, d-grab and cd-grab, 3 seeds. Every config field can be set in the TOML
file or by its flag (flags win). A config with a [sweep] table runs every cell into its own file
under --out or its `out`, or only cell I with --cell I (or SLURM_ARRAY_TASK_ID); a swept field
given as a flag selects the cells with its value, which keep their indices and files (a value the
sweep does not list is refused): see `python -m ordersim sweep --help`. An existing trace at --out
is replaced only with --overwrite or continued with --resume; any other existing file is never
written over, nor the run's input data. A second run writing the same --out while the first is
running is refused (exit 2): rank 0 holds a lock on <out>.lock for the whole run.
SIGTERM or SIGUSR1 (Slurm's warning) makes every rank stop at the next epoch boundary, write a
checkpoint next to the trace (<out>.ckpt: HDF5 with arrays, numbers and strings only, and a
sha256 checksum; loading it runs no code) and exit with code {EXIT_CHECKPOINTED}; run again with
--resume (during the set-up: exit {EXIT_CHECKPOINTED} at its next phase, no checkpoint; --resume
starts over). A run without --resume deletes any checkpoint of its output. A wait for the other
ranks longer than --stall-timeout (or {SIGNAL_GRACE_SECONDS:g} s after such a signal) aborts the
job with exit {EXIT_STALLED}.
One Numba/BLAS thread per rank unless NUMBA_NUM_THREADS / OMP_NUM_THREADS say otherwise.
Code that runs: --problem PATH imports that file (Python: it can do anything you can), and Numba
loads compiled machine code from its cache (next to the sources, or NUMBA_CACHE_DIR: under Slurm
$TMPDIR/ordersim-numba-$SLURM_JOB_ID unless set). ordersim creates NUMBA_CACHE_DIR with mode 0700
and refuses one that another user owns or that group or others can write (docs/cluster.md)."""


def parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="python -m ordersim [run]", description=DESCRIPTION,
                      formatter_class=argparse.RawDescriptionHelpFormatter, epilog=commands_help())
    p.add_argument("config", nargs="?", help="TOML experiment config (runs/ has examples)")
    p.add_argument("--cell", type=int, default=None, metavar="I",
                   help="run only cell I of the config's [sweep] (default: SLURM_ARRAY_TASK_ID when "
                        "set, else every cell in turn)")
    p.add_argument("--resume", action="store_true",
                   help="continue from the checkpoint next to the output file (<out>.ckpt) if there "
                        "is one, else start from the beginning (a trace of this config is then "
                        "replaced; one of another config only with --overwrite). The config (but for "
                        "--quiet, --exchange, --stall-timeout and --checkpoint-every, which change no "
                        "value) and the number of ranks must be the same, and the checkpoint must be this trace's "
                        "(the same run id, every row it counted still in the trace), be an ordersim "
                        "checkpoint with a valid checksum (never a pickle) and hold the run state "
                        "this ordersim has; else one line says what does not fit (exit 2) and "
                        "nothing is changed")
    p.add_argument("--dry-run", action="store_true",
                   help="print what the run would do and exit 0 without training: every config "
                        "field's resolved value and where it came from (default, file, flag, sweep), "
                        "the runs (orderers x seeds x sweep cells), the memory each rank needs and "
                        "the problem's constants with the PL analyses' regime numbers. It does the "
                        "run's set-up (reads the data, computes the constants or reads them from "
                        "their cache) but writes no trace, checkpoint or lock; under mpiexec rank 0 "
                        "prints, every rank exits 0")
    p.add_argument("--quick", action="store_true",
                   help="apply the config's [quick] table: the smaller size its experiment runs at in "
                        "CI (runs/papers/ has such configs)")
    add_arguments(p)
    return p


def main(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    try:
        comm, size = world()
    except MPIUnavailable as err:
        print(f"ordersim: error: {err}", file=sys.stderr, flush=True)
        return 2
    stop_request().install()  # again after MPI_Init, which replaces the SIGUSR1 handler (MPICH)
    return abort_on_exception(comm, _main, args, comm, size)


def _main(args, comm, size) -> int:
    rank = comm.Get_rank() if comm is not None else 0
    stop_request().announce = rank == 0  # one "stopping at the next epoch" line per job
    try:
        flags = overrides_from_args(args)
        runs = [(flags, None)]
        if args.config:
            runs = select_cell(config_cells(args.config, flags, args.quick), args.config, args.cell)
        elif args.cell is not None or args.quick:  # else ignored: the whole default experiment would run
            option, table = ("--quick", "[quick]") if args.quick else (f"--cell {args.cell}", "[sweep]")
            raise ConfigError(f"{option}: the built-in experiment (no config file) has no {table} table; "
                              f"allowed: a config file with one (runs/ has examples)")
        if len(runs) > 1:  # a sweep: every cell's fields before the first one computes
            checked = [(check_fields(build_config(values), size), cell) for values, cell in runs]
    except ConfigError as err:
        if rank == 0:
            print(f"ordersim: error: {err}", file=sys.stderr, flush=True)
        return 2
    if len(runs) > 1 and not args.dry_run:  # and against its data (--dry-run checks that itself)
        from ordersim.simulate import check_cells_against_data

        error = None
        if rank == 0:
            try:
                check_cells_against_data(checked, size)
            except ConfigError as err:
                error = str(err)
        if comm is not None:
            error = comm.bcast(error, root=0)
        if error:
            if rank == 0:
                print(f"ordersim: error: {error}", file=sys.stderr, flush=True)
            return 2
    if args.dry_run:
        from ordersim.dry_run import dry_run

        try:
            return dry_run(runs, args.config, flags, comm, size, rank)
        except ConfigError as err:
            if rank == 0:
                print(f"ordersim: error: {err}", file=sys.stderr, flush=True)
            return 2
    for values, cell in runs:  # one run, or every cell of a sweep in turn
        status = run_config(values, args.resume, comm, size, rank, cell)
        if status:
            return status
    return 0


def run_config(values: dict, resume: bool, comm, size: int, rank: int, cell: Cell | None) -> int:
    """One run (or sweep cell); rank 0 holds the output file's lock from before any write to it
    until the end (ordersim/output.py)."""
    lock = OutputLock()
    frozen = freeze_imports()
    try:
        return run_locked(values, resume, comm, size, rank, cell, lock)
    finally:
        lock.release()
        if frozen:  # whichever way the process now ends, its teardown finalizes every object
            gc.unfreeze()


def freeze_imports() -> bool:
    """In a process of the run's own (cli.OWN_PROCESS), set what the imports made aside from the
    garbage collector until the run returns (gc.freeze): the collections that Numba's first kernel
    load triggers (its registries: 10^5 objects) walked it, ~50 ms a process (docs/performance.md,
    "Start-up: the exit"). Whether it did."""
    if not cli.OWN_PROCESS or gc.get_freeze_count():
        return False
    import ordersim.simulate  # noqa: F401  (the run's modules, which run_locked imports)

    gc.freeze()
    return True


def run_locked(values: dict, resume: bool, comm, size: int, rank: int, cell: Cell | None,
               lock: OutputLock) -> int:
    from ordersim.compile_notice import compile_notice
    from ordersim.simulate import (Checkpointed, StoppedInSetup, check_fields, check_output,
                                   default_out_path, plan_data, prepare, run_experiment,
                                   stop_at_phase_boundary, summary_table)

    started = time.perf_counter()  # the last line's time: the whole job, compiling included
    stop = stop_request()  # installed by `python -m ordersim run` before its imports
    backend = SerialBackend(1)
    try:
        config = build_config(values)
        if comm is None and backend_module.MPI_LOAD_ERROR:
            if config.backend == "mpi":
                raise ConfigError(f"config field 'backend': 'mpi' needs an MPI library and mpi4py "
                                  f"cannot load one ({backend_module.MPI_LOAD_ERROR}); {INSTALL_MPI}; "
                                  f"or use --backend serial")
            if config.backend == "auto" and not config.quiet:
                print(f"ordersim: note: no MPI library ({backend_module.MPI_LOAD_ERROR}): running "
                      f"the serial backend", file=sys.stderr, flush=True)
        config = check_fields(config, size)
        if resume and not config.out:
            raise ConfigError("--resume needs --out, the trace to continue: without it the run would "
                              "start a new file named after the start time")
        backend = (MPIBackend(config.workers, comm, config.exchange, config.stall_timeout, stop)
                   if config.backend == "mpi" else SerialBackend(config.workers))
        out = backend.bcast(config.out or default_out_path())
        error = None
        if rank == 0:  # the lock first: nothing may touch a file another run is writing
            error = (lock.acquire(out) or check_output(out)
                     or existing_output_error(out, config, resume, cell))
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
        stop_at_phase_boundary(backend, stop, "checking the config and the output")
        state = broadcast_resume(backend, state)
        planned = plan_data(config, backend, stop)  # the data's errors before any compiling
        warm_node_first(config, backend)  # a cold cache: each node compiles once, not in every rank
        with compile_notice(f"the kernels of {config.problem} (for its constants)",
                            rank == 0 and not config.quiet):
            setup = prepare(config, backend, stop, planned)
    except ConfigError as err:
        if rank == 0:
            print(f"ordersim: error: {err}", file=sys.stderr, flush=True)
        return 2
    except StoppedInSetup as phase:
        backend.close()
        if rank == 0:
            print(f"ordersim: stopped by {stop.cause} during the set-up ({phase}), before the first "
                  f"epoch: no checkpoint written; --resume starts from the beginning, or from the "
                  f"checkpoint a previous attempt left (exit {EXIT_CHECKPOINTED})", file=sys.stderr, flush=True)
        return EXIT_CHECKPOINTED
    if rank == 0 and setup.dropped:
        print(f"ordersim: warning: dropped {counted(setup.dropped, 'training example')} so that each "
              f"of the {config.workers} workers holds {setup.n} (recorded as 'dropped_examples' in the "
              f"trace)", file=sys.stderr, flush=True)
    if rank == 0 and not config.quiet:
        where = f" (sweep cell {cell.index}: {json.dumps(cell.params)})" if cell else ""
        print(f"ordersim: {config.problem} on {config.data}{where}: m = {counted(config.workers, 'worker')} "
              f"x n = {counted(setup.n, 'example')}, d = {setup.problem.dim}, b = {config.batch}, "
              f"{counted(config.epochs, 'epoch')}, backend {config.backend} on {backend.size} rank(s)",
              flush=True)
        if state is not None:
            print(f"ordersim: resuming from {checkpoint_path(out)}", flush=True)
    # backend.close() is collective: only on the paths every rank takes (an exception aborts)
    try:
        results = run_experiment(config, backend, setup, out, stop, state, cell, started)
    except ConfigError as err:  # a checkpoint whose run state does not fit, on every rank
        if rank == 0:
            print(f"ordersim: error: {err}", file=sys.stderr, flush=True)
        return 2
    except Checkpointed as stopped:
        backend.close()
        if rank == 0:
            # --out named: without it a new run would write a new timestamped file
            print(f"ordersim: stopped by {stop.cause}; checkpoint {stopped}; trace {out}; continue with "
                  f"the same command and --resume --out {shlex.quote(out)} (exit {EXIT_CHECKPOINTED})",
                  file=sys.stderr, flush=True)
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
        if cell:  # a sweep prints a table per cell: say whose (with --quiet nothing above does)
            print(f"sweep cell {cell.index} of {cell.count}: {json.dumps(cell.params)}")
        print(summary_table(results))
        print(f"\ntrace: {out}  ({time.perf_counter() - started:.1f} s)", flush=True)
    return 0


# fields that change no value in the trace (a resume may change them: e.g. checkpoint more often
# on a queue that preempts more than the first job's did; `out` is the file being resumed, however
# it is spelt now or wherever it was moved with its checkpoint)
RESULT_NEUTRAL = ("quiet", "exchange", "overwrite", "stall_timeout", "checkpoint_every", "out")


def config_differences(saved_json: str, config) -> list[str]:
    """Fields (other than RESULT_NEUTRAL ones) in which config differs from a saved config's JSON."""
    saved, current = json.loads(saved_json), json.loads(config.to_json())
    return sorted(k for k in current if k not in RESULT_NEUTRAL and saved.get(k) != current[k])


def existing_output_error(out: str, config, resume: bool, cell: Cell | None = None) -> str | None:
    """Why the run (sweep cell `cell`) must not write `out`, or None: it is one of the run's input
    files, an existing file other than an ordersim run trace (an empty file holds nothing to lose),
    a trace without --overwrite or --resume (another sweep cell's: both named), or, under --resume
    without --overwrite, a trace of another config that no checkpoint continues."""
    from ordersim.trace import NotATrace, trace_root

    for what, path in input_files(config):
        if same_file(out, path):
            return (f"config field 'out': {out!r} is the run's {what} ({path!r}); choose another "
                    f"--out")
    if os.path.exists(out) and not os.path.isfile(out) and not os.path.isdir(out):
        return (f"config field 'out': {out!r} exists and is not a regular file (a device, a pipe); "
                f"choose another --out")
    if not os.path.exists(out) or not os.path.getsize(out):
        return None
    try:
        root = trace_root(out, config.hdf5_locking)
    except NotATrace as why:
        return (f"config field 'out': {out!r} exists and {why}; ordersim replaces only its own "
                f"traces: choose another --out or remove the file")
    if config.overwrite:
        return None
    held = json.loads(root["sweep_cell"]) if "sweep_cell" in root else None
    if not resume and cell is not None and held is not None and held != cell.params:
        # written by another version of the sweep: --overwrite would lose that cell
        return (f"config field 'out': {out!r} holds sweep cell {root.get('sweep_cell_index')} "
                f"{json.dumps(held)}, and this run is cell {cell.index} {json.dumps(cell.params)} "
                f"(the config's [sweep] differs from the one that wrote it); choose another --out, "
                f"or pass --overwrite to replace that cell's trace")
    if not resume:
        return (f"config field 'out': {out!r} already holds an ordersim trace; pass --overwrite to "
                f"replace it or --resume to continue it")
    differ = config_differences(root["config"], config)
    if differ and not os.path.exists(checkpoint_path(out)):
        return (f"--resume: {out!r} holds a trace of another config (it differs in "
                f"{', '.join(differ)}) and there is no checkpoint to continue; pass --overwrite to "
                f"replace it or choose another --out")
    return None


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


# A checkpoint's meta fields and their JSON types (run_states are checked against the run later)
CHECKPOINT_FIELDS = dict(position=int, results=dict, config=str, ranks=int, run_id=str, in_run=bool)
IN_RUN_FIELDS = dict(record=dict, lengths=dict, run_states=list)  # inside a run


def read_checkpoint(out: str, config, size: int) -> tuple[dict | None, str | None]:
    """(checkpoint, None), (None, None) when there is none, or (None, error) when it does not fit
    this config, this number of ranks or the trace `out` (another run's, or shorter than it says)."""
    path = checkpoint_path(out)
    if not os.path.exists(path):
        print(f"ordersim: no checkpoint {path}: starting from the beginning", file=sys.stderr, flush=True)
        return None, None
    start_over = "delete it to start over"
    try:
        state = load_checkpoint(path, locking=config.hdf5_locking)
    except CheckpointError as err:
        return None, f"--resume: checkpoint {path!r} {err}; {start_over}"
    fields = dict(CHECKPOINT_FIELDS, **(IN_RUN_FIELDS if state.get("in_run") else {}))
    for name, kind in fields.items():
        if not isinstance(state.get(name), kind):
            return None, (f"--resume: checkpoint {path!r} has no valid {name!r} (written by another "
                          f"ordersim version?); {start_over}")
    # Before the config: a rank count other than the checkpoint's also changes the backend and the
    # default workers, and naming those would hide that only the mpiexec line differs.
    if state["ranks"] != size:
        ranks = state["ranks"]
        how = "without mpiexec" if ranks == 1 else f"under mpiexec -n {ranks} (or srun -n {ranks})"
        return None, (f"--resume: the checkpoint was written by {ranks} rank(s) and this run has "
                      f"{size}; resume it {how}")
    try:
        differ = config_differences(state["config"], config)
    except ValueError:
        return None, f"--resume: checkpoint {path!r} has a config that is not JSON; {start_over}"
    if differ:
        saved, current = json.loads(state["config"]), json.loads(config.to_json())
        return None, (f"--resume: the config differs from the checkpoint's in {', '.join(differ)} "
                      f"(e.g. {differ[0]} = {current[differ[0]]!r}, checkpoint {saved.get(differ[0])!r})")
    if state["in_run"] and len(state["run_states"]) != size:
        return None, (f"--resume: checkpoint {path!r} holds "
                      f"{counted(len(state['run_states']), 'run state')} for {counted(size, 'rank')}; "
                      f"{start_over}")
    mismatch = trace_mismatch(out, state, config)
    if mismatch:
        return None, f"--resume: checkpoint {path!r} does not fit the trace {out!r}: {mismatch}; {start_over}"
    return state, None


def trace_mismatch(out: str, state: dict, config) -> str | None:
    """Why trace `out` is not the one checkpoint `state` was written for, or None: it must carry
    the checkpoint's run id, hold every run finished before it and, of the run it stopped inside,
    at least the rows of every dataset it counted."""
    import h5py

    from ordersim.simulate import run_plan

    plan, position = run_plan(config), state["position"]
    if not 0 <= position <= len(plan) or (state["in_run"] and position == len(plan)):
        return f"its plan position {position} is outside the {counted(len(plan), 'run')} of the config"
    try:
        with h5py.File(out, "r", locking=config.hdf5_locking) as f:
            run_id = f.attrs.get("run_id")
            if run_id != state["run_id"]:
                return (f"the trace has run id {run_id!r}, the checkpoint {state['run_id']!r} (the trace "
                        f"was written anew, or replaced, after the checkpoint)")
            runs = f.get("runs")
            for index, (orderer, seed) in enumerate(plan[:position + state["in_run"]]):
                name = f"{orderer}/seed_{seed}"
                if runs is None or name not in runs:
                    return f"the trace lacks run {name}, which the checkpoint says it holds"
                if index < position and runs[name].attrs.get("status") == "interrupted":
                    return f"run {name} did not finish in the trace, but did by the checkpoint"
            if state["in_run"]:
                orderer, seed = plan[position]
                group = runs[f"{orderer}/seed_{seed}"]
                for dataset, length in sorted(state["lengths"].items()):
                    have = group[dataset].shape[0] if isinstance(group.get(dataset), h5py.Dataset) else 0
                    if not isinstance(length, int) or have < length:
                        return (f"run {orderer}/seed_{seed}'s {dataset} has {counted(have, 'row')} in the "
                                f"trace, the checkpoint counted {length!r}")
    except OSError as err:
        return f"the trace cannot be read ({' '.join(str(err).split())})"
    return None


def broadcast_resume(backend, state: dict | None) -> dict | None:
    """Every rank gets the checkpoint's plan position; the run states stay on rank 0 (scattered later)."""
    light = None if state is None else {k: v for k, v in state.items() if k != "run_states"}
    light = backend.bcast(light)
    if backend.rank == 0:
        return state
    return light
