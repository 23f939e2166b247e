"""Sweeps: a `[sweep]` table in the TOML config lists values for any config field.

    [sweep]
    workers = [2, 4, 8]
    lr = [0.1, 0.3]

The cells are the cartesian product, in the order the fields are written, the last field varying
fastest (cell 0: workers 2, lr 0.1; cell 1: workers 2, lr 0.3; ...). Cell i writes its own trace
`<out>/cell_<i>.h5`, where <out> is --out or the config's `out`, without `.h5` (default:
`sweep-<config name>`). A cell depends only on its own parameters (its seeds are the config's
`seeds`, its data split the config's `data_seed`), so re-running one cell reproduces it exactly.

A swept field given on the command line (`--coding pgc-cr`) selects the cells with that value: they
keep their indices (--cell, SLURM_ARRAY_TASK_ID), files and trace attributes, so a cell is the same
file however it is chosen. A value the sweep does not list is refused: its cells would have no
number of their own in the sweep.

A `[quick]` table sets fields (and `sweep = {...}` axes) for `run --quick`, the size for CI
(`quick_values`).

`python -m ordersim sweep CONFIG.toml [FIELD FLAGS]` prints the cells (the flags are those of
`python -m ordersim run`); `--write-array FILE` writes a Slurm job-array script whose task i runs
cell i (`python -m ordersim run CONFIG.toml [FIELD FLAGS] --cell i`, or with SLURM_ARRAY_TASK_ID
set); `python -m ordersim merge FILES --out table.csv` joins the cells' traces and names the cells
missing from them (each cell's trace records its index and the sweep's cell count).
"""

import argparse
import itertools
import json
import os
import re
import shlex
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path

from ordersim.cli import counted
from ordersim.config import (FIELDS, ConfigError, OneLineParser, add_arguments, build_config, check_fields,
                             flags_for, overrides_from_args, read_toml)


def quick_values(raw: dict, path: str, quick: bool, fields=FIELDS) -> dict:
    """The raw TOML dict without its [quick] table, or (quick) with that table's fields on top and
    its own [quick.sweep] axes in place of the [sweep] axes it names (`run --quick`: the size for
    CI). `fields`: the names the table may set."""
    raw = dict(raw)
    table = raw.pop("quick", {})
    if not isinstance(table, dict):
        raise ConfigError(f"config file {path!r}: 'quick' must be a table of field = value")
    unknown = sorted(set(table) - set(fields) - {"sweep"})
    if unknown:
        raise ConfigError(f"config file {path!r}: [quick] field(s) {', '.join(unknown)} unknown; known fields: "
                          f"{', '.join(fields)}")
    if not quick:
        return raw
    if not table:
        raise ConfigError(f"--quick: config file {path!r} has no [quick] table")
    table = dict(table)
    axes = table.pop("sweep", {})
    if not isinstance(axes, dict):
        raise ConfigError(f"config file {path!r}: 'quick.sweep' must be a table of field = [values]")
    sweep = dict(raw.get("sweep", {}), **axes)
    raw.update(table)
    return dict(raw, sweep=sweep) if sweep else raw


def split_sweep(raw: dict, path: str) -> tuple[dict, dict]:
    """(base values, sweep table) of a raw TOML dict, the sweep checked field by field."""
    raw = dict(raw)
    sweep = raw.pop("sweep", {})
    if not isinstance(sweep, dict):
        raise ConfigError(f"config file {path!r}: 'sweep' must be a table of field = [values]")
    for name, values in sweep.items():
        if name not in FIELDS:
            raise ConfigError(f"config file {path!r}: sweep field {name!r} is unknown; known fields: "
                              f"{', '.join(FIELDS)}")
        if not isinstance(values, list) or not values:
            raise ConfigError(f"config file {path!r}: sweep field {name!r} must list one or more "
                              f"values, got {values!r}")
        if name == "out":
            raise ConfigError(f"config file {path!r}: sweep field 'out' is not allowed; every cell "
                              f"writes <out>/cell_<i>.h5 under the config's out")
        if len({json.dumps(v, sort_keys=True) for v in values}) != len(values):
            raise ConfigError(f"config file {path!r}: sweep field {name!r} lists a value twice: "
                              f"{values!r}; allowed: distinct values (each cell once)")
    return raw, sweep


def cells(sweep: dict) -> list[dict]:
    """Every cell's parameters, the last field varying fastest."""
    names = list(sweep)
    return [dict(zip(names, combo)) for combo in itertools.product(*(sweep[n] for n in names))]


@dataclass(frozen=True)
class Cell:
    """Cell `index` of a sweep of `count` cells over the axes `sweep`: its parameters `params`."""

    index: int
    count: int
    params: dict
    sweep: dict

    def trace_attrs(self) -> dict:
        """What a cell's trace records of it (docs/trace-format.md); merge reads it back."""
        return dict(sweep_cell=self.params, sweep_cell_index=self.index, sweep_cells=self.count,
                    sweep=self.sweep)


def cell_out(base_out: str, config_path: str, index: int) -> str:
    directory = base_out[:-3] if base_out.endswith(".h5") else base_out
    directory = directory or f"sweep-{Path(config_path).stem}"
    return os.path.join(directory, f"cell_{index:04d}.h5")


def field_value(name: str, raw):
    """A field's value from TOML or flag text, to compare: `--lr 0.30` is the sweep's 0.3."""
    return getattr(build_config({name: raw}), name)


def config_cells(config_path: str, flags: dict | None = None, quick: bool = False) -> list[tuple[dict, Cell | None]]:
    """The runs a config file stands for with the command line's field values `flags` on top:
    [(values, cell)], one per sweep cell (each with its own `out` under the flags' or the config's
    `out`), or [(values, None)] when there is no sweep. A flag that sets a swept field selects the
    cells with its value, which keep their indices and files (the config's other cells are not
    run); a value the sweep does not list is a ConfigError. `quick`: the config's [quick] table
    applies (`quick_values`)."""
    raw, sweep = split_sweep(quick_values(read_toml(config_path), config_path, quick), config_path)
    flags = flags or {}
    values = {**raw, **flags}
    if not sweep:
        return [(values, None)]
    pinned = {name: field_value(name, flags[name]) for name in sweep if name in flags}
    for name, value in pinned.items():
        if value not in [field_value(name, v) for v in sweep[name]]:
            raise ConfigError(f"{' '.join(flags_for({name: flags[name]}))}: config file {config_path!r} "
                              f"sweeps {name!r} over {json.dumps(sweep[name])} only; allowed: one of "
                              f"those values (it runs their cells, into their own files), or a config "
                              f"whose [sweep] lists it")
    table = cells(sweep)
    # a cell's values are the sweep's (not the flag's text): its trace is the full sweep's cell
    return [(dict(values, **params, out=cell_out(values.get("out", ""), config_path, i)),
             Cell(i, len(table), params, sweep)) for i, params in enumerate(table)
            if all(field_value(name, params[name]) == value for name, value in pinned.items())]


def select_cell(runs: list, config_path: str, cell: int | None) -> list:
    """The one cell asked for by --cell or, in a job-array task, SLURM_ARRAY_TASK_ID; else all the
    cells (of `config_cells`: those the field flags select)."""
    sweep = runs[0][1]
    source = "--cell"  # the error names what the user set
    if cell is None and sweep and "SLURM_ARRAY_TASK_ID" in os.environ:
        task = os.environ["SLURM_ARRAY_TASK_ID"]
        if not task.isdigit():
            raise ConfigError(f"SLURM_ARRAY_TASK_ID {task!r} is not a cell index; allowed: "
                              f"{index_ranges([c.index for _, c in runs])} (the array task of "
                              f"`sweep --write-array`'s script)")
        cell, source = int(task), "SLURM_ARRAY_TASK_ID"
    if cell is None:
        return runs
    if not sweep:
        raise ConfigError(f"--cell {cell}: config file {config_path!r} has no [sweep] table")
    if not 0 <= cell < sweep.count:
        raise ConfigError(f"{source} {cell} is out of range: config file {config_path!r} has "
                          f"{counted(sweep.count, 'cell')} (0..{sweep.count - 1})")
    chosen = [run for run in runs if run[1].index == cell]
    if not chosen:
        raise ConfigError(f"{source} {cell} is the cell {json.dumps(cells(sweep.sweep)[cell])} of config "
                          f"file {config_path!r}, which the command line's field flags leave out; they "
                          f"select the cells {index_ranges([c.index for _, c in runs])}")
    return chosen


def index_ranges(indices: list[int]) -> str:
    """Increasing indices in Slurm's --array form: [0, 1, 2, 3] is "0-3", [0, 2, 3] is "0,2-3"."""
    runs = [[index for _, index in run]
            for _, run in itertools.groupby(enumerate(indices), lambda pair: pair[1] - pair[0])]
    return ",".join(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]) for run in runs)


ARRAY_TEMPLATE = """\
#!/bin/bash
# Job array for the sweep in {config}: cells {array} of its {count}.
# Written by `python -m ordersim sweep`.
# Task i runs cell i into {outdir}/cell_<i>.h5; merge with
#   python -m ordersim merge {outdir}/cell_*.h5 --out {outdir}/merged.csv
#SBATCH --job-name=ordersim-sweep
#SBATCH --array={array}
#SBATCH --ntasks={ntasks}
#SBATCH --cpus-per-task=1
#SBATCH --time={time}
#SBATCH --signal=USR1@120
#SBATCH --requeue
#SBATCH --open-mode=append
# the directory the config's paths are relative to, for the job and for its --output (which Slurm
# opens before the script runs): the script may be submitted from any directory
#SBATCH --chdir={workdir}
#SBATCH --output={log}
{extra}
export OMP_NUM_THREADS=1 NUMBA_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1
export HDF5_USE_FILE_LOCKING=FALSE
# node-local; ordersim creates it (mode 0700) and refuses one that is not private
export NUMBA_CACHE_DIR="${{TMPDIR:-/tmp}}/ordersim-numba-$SLURM_JOB_ID"
export PYTHONUNBUFFERED=1
echo "array task ${{SLURM_ARRAY_JOB_ID}}_${{SLURM_ARRAY_TASK_ID}} on ${{SLURM_JOB_NODELIST}}, restart ${{SLURM_RESTART_COUNT:-0}}"
# Slurm sends USR1 to the ranks 120 s before the time limit (SIGTERM on preemption): ordersim
# checkpoints at the next epoch boundary and exits 3; the task is requeued and --resume goes on
# (export ORDERSIM_NO_REQUEUE=1 before sbatch to resubmit by hand instead).
srun --mpi=pmi2 {python} -m ordersim run {config}{flags} --cell "$SLURM_ARRAY_TASK_ID" --resume
status=$?
if [ "$status" -eq 3 ] && [ -z "${{ORDERSIM_NO_REQUEUE:-}}" ]; then
    echo "checkpointed: requeueing ${{SLURM_ARRAY_JOB_ID}}_${{SLURM_ARRAY_TASK_ID}}"
    scontrol requeue "${{SLURM_ARRAY_JOB_ID}}_${{SLURM_ARRAY_TASK_ID}}"
fi
exit "$status"
"""


def write_array_script(path: str, config_path: str, flags: list[str], indices: list[int], count: int,
                       out_dir: str, ntasks: int, time_limit: str, partition: str | None) -> None:
    """A job array of one task per cell index in `indices`, of a sweep of `count` cells."""
    extra = f"#SBATCH --partition={partition}" if partition else ""
    text = ARRAY_TEMPLATE.format(config=shlex.quote(config_path), count=count, array=index_ranges(indices),
                                 flags="".join(" " + shlex.quote(flag) for flag in flags),
                                 ntasks=ntasks, time=time_limit, outdir=out_dir, extra=extra,
                                 log=shlex.quote(os.path.join(out_dir, "slurm-%A_%a.out")),
                                 workdir=shlex.quote(os.getcwd()), python=shlex.quote(sys.executable))
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(out_dir).mkdir(parents=True, exist_ok=True)  # Slurm does not create --output directories
    Path(path).write_text(text)


def main(argv: list[str]) -> int:
    p = OneLineParser(prog="python -m ordersim sweep", description=__doc__,
                      formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("config", help="TOML config with a [sweep] table")
    p.add_argument("--write-array", metavar="FILE", help="write a Slurm job-array script to FILE")
    p.add_argument("--ntasks", type=int, default=1,
                   help="MPI ranks per array task (must divide every cell's workers; default 1: the "
                        "serial backend simulates all workers in one process)")
    p.add_argument("--time", default="01:00:00", help="time limit per array task (default 01:00:00)")
    p.add_argument("--slurm-partition", default=None, metavar="P",
                   help="Slurm partition (default: the cluster's; --partition is the config field)")
    add_arguments(p)
    args = p.parse_args(argv)
    flags = overrides_from_args(args)
    try:
        runs = config_cells(args.config, flags)
        if runs[0][1] is None:
            raise ConfigError(f"config file {args.config!r} has no [sweep] table")
        if args.ntasks < 1:
            raise ConfigError(f"--ntasks must be >= 1, got {args.ntasks}")
        for values, _ in runs:  # here, not in every array task of the job
            check_fields(build_config(values), args.ntasks)
        if args.write_array:
            problem = array_script_error(args.write_array, args.config)
            if problem:
                raise ConfigError(problem)
        # written into #SBATCH lines as they are: Slurm's forms only
        if not re.fullmatch(r"(\d+-)?\d+(:\d{1,2}){0,2}", args.time):
            raise ConfigError(f"--time {args.time!r} is not a Slurm time limit; allowed: MM, HH:MM:SS, "
                              f"D-HH:MM:SS")
        if args.slurm_partition is not None and not re.fullmatch(r"[\w.,-]+", args.slurm_partition):
            raise ConfigError(f"--slurm-partition {args.slurm_partition!r} is not a partition name; "
                              f"allowed: letters, digits, _ . , -")
        for values, cell in runs:
            workers = build_config({"workers": values.get("workers", 0)}).workers or args.ntasks
            if workers % args.ntasks:
                raise ConfigError(f"--ntasks {args.ntasks} does not divide cell {cell.index}'s "
                                  f"workers = {workers}")
        if args.write_array:  # before the cells are listed: a path that cannot be written is one line
            from ordersim.output import unwritable

            try:
                write_array_script(args.write_array, args.config, flags_for(flags),
                                   [cell.index for _, cell in runs], runs[0][1].count,
                                   os.path.dirname(runs[0][0]["out"]), args.ntasks, args.time,
                                   args.slurm_partition)
            except OSError as err:  # a directory on the way is a file, or not writable
                raise ConfigError(unwritable("--write-array", args.write_array, err)) from None
    except ConfigError as err:
        print(f"ordersim: error: {err}", file=sys.stderr)
        return 2
    names = list(runs[0][1].sweep)
    widths = [max(len(n), *(len(json.dumps(c.params[n])) for _, c in runs)) for n in names]
    print(f"{'cell':>5}  " + "  ".join(f"{n:>{w}}" for n, w in zip(names, widths)) + "  output")
    for values, cell in runs:
        print(f"{cell.index:>5}  " + "  ".join(f"{json.dumps(cell.params[n]):>{w}}"
                                              for n, w in zip(names, widths)) + f"  {values['out']}")
    count = runs[0][1].count
    listed = counted(count, "cell") if len(runs) == count else f"{len(runs)} of the {counted(count, 'cell')}"
    print(f"{listed} -> {counted(len(runs), 'array task')}")
    if args.write_array:
        print(f"wrote {args.write_array}: submit with `sbatch {args.write_array}`")
    return 0


def array_script_error(path: str, config_path: str) -> str | None:
    """Why --write-array must not write `path`, or None: the config itself, or an existing file
    that is not a job script (a previous --write-array's is replaced)."""
    from ordersim.output import same_file

    if same_file(path, config_path):
        return f"--write-array {path!r} is the config file; choose another file"
    if os.path.isdir(path):
        return f"--write-array {path!r} is a directory; choose a file"
    if os.path.exists(path):
        with open(path, "rb") as fh:
            head = fh.read(4096)
        if not (head.startswith(b"#!") and b"#SBATCH" in head):
            return (f"--write-array {path!r} exists and is not a job script; ordersim replaces only "
                    f"its own: choose another file or remove it")
    return None


def merge_main(argv: list[str]) -> int:
    p = OneLineParser(prog="python -m ordersim merge",
                      description="Join trace files (e.g. a sweep's cells) into one tidy "
                      "table: one row per (file, run, measured epoch), the run "
                      "attributes and every config field that differs among "
                      "the files (a sweep's axes) as columns. "
                      "A file that is missing, given twice or not a readable ordersim "
                      "trace stops the merge (exit 2). Files that are cells of one "
                      "sweep (their traces record the cell's index and the "
                      "sweep's cell count) are checked for missing cells: the "
                      "merge goes on with a warning naming them.")
    p.add_argument("files", nargs="+", help="trace files (HDF5)")
    p.add_argument("--out", required=True,
                   help="output table, its format from the extension: .csv, or .parquet (needs pyarrow); "
                        "never one of the input files")
    p.add_argument("--overwrite", action="store_true", help="replace an existing --out")
    args = p.parse_args(argv)
    from ordersim.analysis import extras

    try:
        extras.require_or_exit("ordersim", "merge", "analysis", ["pandas"])
    except SystemExit as missing:
        return missing.code
    import pandas as pd
    problem = merge_input_error(args.files) or merge_output_error(args.out, args.files, args.overwrite)
    if problem:
        print(f"ordersim: error: merge: {problem}", file=sys.stderr)
        return 2

    from ordersim.analysis.load import TraceWarning, load_runs
    from ordersim.trace import NotATrace, trace_root

    roots = []
    for path in args.files:
        try:
            roots.append(trace_root(path))
        except NotATrace as why:
            print(f"ordersim: error: merge: {path!r} {why}", file=sys.stderr)
            return 2
    try:
        # all files at once: the config fields that differ among them (a sweep's axes) become columns
        with warnings.catch_warnings():  # printed below as lines of ours, not as source excerpts
            warnings.simplefilter("ignore", TraceWarning)
            table = load_runs(args.files)
    except (OSError, KeyError, ValueError) as err:
        path = next((path for path in args.files if not _loads_alone(path)), args.files[0])
        print(f"ordersim: error: merge: {path!r} is an unreadable trace ({err})", file=sys.stderr)
        return 2
    for warning in [*table.attrs["notes"], *missing_cells(roots)]:
        print(f"ordersim: warning: merge: {warning}", file=sys.stderr)
    if args.out.endswith(".parquet"):
        table.to_parquet(args.out)
    else:
        table.to_csv(args.out, index=False)
    runs = table.groupby(["file", "orderer", "seed"]).ngroups if len(table) else 0
    print(f"merged {counted(len(args.files), 'file')}, {counted(runs, 'run')}, "
          f"{counted(len(table), 'row')} -> {args.out}")
    return 0


def _loads_alone(path: str) -> bool:
    """Whether one file loads on its own (to name the file an error of a whole merge came from)."""
    from ordersim.analysis.load import TraceWarning, load_runs

    try:
        with warnings.catch_warnings():  # merge prints the notes of the files that do load
            warnings.simplefilter("ignore", TraceWarning)
            load_runs([path])
    except (OSError, KeyError, ValueError):
        return False
    return True


MERGE_FORMATS = (".csv", ".parquet")


def merge_input_error(inputs: list[str]) -> str | None:
    """Why merge must not read `inputs`, or None: a trace given twice (a shell glob and a name,
    a link), whose rows the table would hold twice."""
    from ordersim.output import same_file

    for i, path in enumerate(inputs):
        for earlier in inputs[:i]:
            if same_file(path, earlier):
                return f"{path!r} is given twice (also as {earlier!r}); allowed: each trace once"
    return None


def merge_output_error(out: str, inputs: list[str], overwrite: bool) -> str | None:
    """Why merge must not write the table `out`, or None: one of the input traces, an extension
    other than MERGE_FORMATS' (a trace's name would get CSV text), parquet without pyarrow, an
    existing file without --overwrite, or a directory that is not there."""
    from ordersim.output import same_file

    for path in inputs:
        if same_file(out, path):
            return f"--out {out!r} is one of the input traces; choose another --out"
    if not out.endswith(MERGE_FORMATS):
        return (f"--out {out!r}: the table's format comes from its extension; allowed: "
                f"{', '.join(MERGE_FORMATS)}")
    if out.endswith(".parquet"):
        try:
            import pyarrow  # noqa: F401  (pandas writes parquet through it)
        except ImportError:
            return f"--out {out!r}: writing .parquet needs pyarrow (pip install pyarrow); or write .csv"
    if os.path.exists(out) and not overwrite:
        return f"--out {out!r} exists; pass --overwrite to replace it"
    directory = os.path.dirname(os.path.abspath(out))
    if not os.path.isdir(directory):  # found here, not by pandas after every trace was read
        return f"--out {out!r}: {directory!r} is not a directory; allowed: a file in an existing directory"
    return None


def missing_cells(roots: list[dict]) -> list[str]:
    """One line per sweep (the same sweep axes and cell count) whose cells are not all among the
    traces' root attributes `roots`. Traces written before cells recorded their index and count
    are not checked."""
    found: dict[tuple[str, int], set[int]] = {}
    for root in roots:
        if "sweep_cells" in root and "sweep_cell_index" in root:
            key = (str(root.get("sweep", "")), int(root["sweep_cells"]))
            found.setdefault(key, set()).add(int(root["sweep_cell_index"]))
    lines = []
    for (axes, count), present in found.items():
        absent = sorted(set(range(count)) - present)
        if absent:
            lines.append(f"{len(absent)} of the {counted(count, 'cell')} of the sweep over {axes} "
                         f"{'is' if len(absent) == 1 else 'are'} missing: "
                         f"{', '.join(map(str, absent))}")
    return lines
