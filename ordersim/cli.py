"""`python -m ordersim [COMMAND] ...`: dispatch to the subcommands (`run` when none is given)."""

import importlib
import os
import sys

# command: (module, function taking the remaining arguments, summary)
COMMANDS = {
    "run": ("ordersim.runner", "main", "train with each orderer and seed, trace to HDF5 (the default)"),
    "sweep": ("ordersim.sweep", "main", "list a config's [sweep] cells; write a Slurm job-array script"),
    "merge": ("ordersim.sweep", "merge_main", "join trace files (a sweep's cells) into one tidy table"),
    "compare": ("ordersim.compare", "main",
                "tell whether two traces hold the same results bit for bit (timings and job attributes aside)"),
    "herding-sim": ("ordersim.herding_sim", "main",
                    "the CD-GraB paper's random-vector parallel-herding experiment"),
    "warm": ("ordersim.warm", "main",
             "compile and cache a config's kernels ahead of a job (e.g. in a Slurm prologue)"),
    "reproduce": ("ordersim.analysis.reproduce", "main",
                  "run the papers' experiments (runs/papers/) and the scaling sweep, draw figures, verdicts"),
    "orderers": ("ordersim.listing", "orderers", "list the orderers with a one-line description"),
    "problems": ("ordersim.listing", "problems", "list the problems with a one-line description"),
    "measurements": ("ordersim.listing", "measurements",
                     "list the per-epoch measurements and the trace datasets each writes"),
}

# Commands that run in one process and write one file: under a launcher with several ranks every
# rank would run them and race for the same --out.
SERIAL_COMMANDS = ("sweep", "merge", "herding-sim")

def counted(count: int, noun: str) -> str:
    """The count and its noun, singular for 1: "1 epoch", "30 epochs"."""
    return f"{count} {noun}{'' if count == 1 else 's'}"


def own_warnings_on_one_line() -> None:
    """ordersim's own warnings (the solver's accuracy, a constants cache that cannot be used, a
    code's conditioning) as `ordersim: warning: ...` lines, as the CLI's other warnings are, not
    with the source line that raised them; other packages' warnings keep Python's format."""
    import warnings

    package = os.path.dirname(os.path.abspath(__file__)) + os.sep
    python_format = warnings.showwarning

    def show(message, category, filename, lineno, file=None, line=None):
        if not os.path.abspath(filename).startswith(package):
            return python_format(message, category, filename, lineno, file, line)
        print(f"ordersim: warning: {' '.join(str(message).split())}", file=file or sys.stderr, flush=True)

    warnings.showwarning = show


def commands_help() -> str:
    lines = ["commands (python -m ordersim COMMAND --help for each):"]
    lines += [f"  {name:<12} {summary}" for name, (_, _, summary) in COMMANDS.items()]
    lines += ["python -m ordersim --version: ordersim (and its git commit), Python, numpy, numba, "
              "mpi4py, h5py, scipy and the MPI library mpi4py loads"]
    return "\n".join(lines)


def with_command(argv: list[str]) -> list[str]:
    """The arguments with their command first: `run` when none is given (options, or a config);
    `--version` alone is no command's option and stays as it is."""
    if argv[:1] == ["--version"]:
        return argv
    if not argv or argv[0].startswith("-") or argv[0].endswith(".toml"):
        return ["run", *argv]
    return argv


# Set by script() for `run`: the process is the command's own and ends with it, so the run may
# freeze what its imports made (runner.freeze_imports) and leave without the interpreter's teardown.
OWN_PROCESS = False


def script() -> None:
    """`python -m ordersim` and the `ordersim` console script: main() on the command line, then
    the exit; after `run`, without the interpreter's teardown (ordersim/quick_exit.py). main()
    itself returns, and freezes nothing, for callers in the same process."""
    global OWN_PROCESS
    argv = sys.argv[1:]
    OWN_PROCESS = with_command(argv)[0] == "run"
    status = main(argv)
    if OWN_PROCESS:
        from ordersim.quick_exit import exit_without_teardown

        exit_without_teardown(status)
    raise SystemExit(status)


def main(argv: list[str] | None = None) -> int:
    argv = with_command(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--version"]:
        from ordersim.provenance import versions

        for name, version in versions():
            print(f"{name:<12} {version}")
        return 0
    if argv[0] not in COMMANDS:
        print(f"ordersim: error: unknown command {argv[0]!r}; commands: {', '.join(COMMANDS)}",
              file=sys.stderr)
        return 2
    stop = None
    if argv[0] == "run":
        # SIGTERM/SIGUSR1/SIGINT handled from before any import that takes time (the config's
        # modules, NumPy, Numba, MPI: a tenth of a second to seconds) to the exit: a signal at any
        # moment stops the run cleanly (exit 3), never kills it; so does a closed stdout
        from ordersim.stop import stop_request  # light: signal, os, sys, threading

        stop = stop_request()
    from ordersim.config import launcher_size, report_once  # light: the standard library

    if argv[0] in SERIAL_COMMANDS and launcher_size() > 1:

        report_once(f"ordersim: error: {argv[0]} runs in one process, not under a launcher with "
                    f"{launcher_size()} ranks; allowed: `python -m ordersim {argv[0]} ...` alone "
                    f"(or mpiexec -n 1)")
        return 2
    cache_dir = os.environ.get("NUMBA_CACHE_DIR")
    if cache_dir:  # before anything loads machine code from it
        from ordersim.numba_cache import private_cache_dir_error

        error = private_cache_dir_error(cache_dir)
        if error:
            print(f"ordersim: error: {error}", file=sys.stderr)
            return 2
    own_warnings_on_one_line()
    from ordersim.registry import PluginError  # light: importlib.metadata

    module, function, _ = COMMANDS[argv[0]]
    try:
        if argv[0] != "run":
            try:
                status = getattr(importlib.import_module(module), function)(argv[1:])
                sys.stdout.flush()  # a reader that left early (`| head`) shows here, not at the exit
                return status
            except BrokenPipeError:  # the rest of the output is not wanted: no traceback
                from ordersim.stop import discard_output

                discard_output(sys.stdout)
                return 1
        from ordersim.stop import StdoutWatch

        watched, sys.stdout = sys.stdout, StdoutWatch(sys.stdout, stop)
        try:
            return getattr(importlib.import_module(module), function)(argv[1:])
        finally:
            stop.ignore_from_now()
            sys.stdout = watched
    except PluginError as err:  # the same on every rank: every rank reads the same entry points
        print(f"ordersim: error: {err}", file=sys.stderr)
        return 2
