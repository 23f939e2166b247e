"""Sweeps: a `[sweep]` table in the TOML config lists values for any config field.

    [sweep]
    workers = [2, 4, 8]
    lr = [0.1, 0.3]

The cells are the cartesian product, in the order the fields are written, the last field varying
fastest (cell 0: workers 2, lr 0.1; cell 1: workers 2, lr 0.3; ...). Cell i writes its own trace
`<out>/cell_<i>.h5`, where <out> is the config's `out` without `.h5` (default: `sweep-<config
name>`). A cell depends only on its own parameters (its seeds are the config's `seeds`, its data
split the config's `data_seed`), so re-running one cell reproduces it exactly.

`python -m ordersim sweep CONFIG.toml` prints the cells; `--write-array FILE` writes a Slurm
job-array script whose task i runs cell i (`python -m ordersim run CONFIG.toml --cell i`, or with
SLURM_ARRAY_TASK_ID set); `python -m ordersim merge FILES --out table.csv` joins the cells' traces.
"""

import argparse
import itertools
import json
import os
import shlex
import sys
from pathlib import Path

from ordersim.config import FIELDS, ConfigError, read_toml


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
    return raw, sweep


def cells(sweep: dict) -> list[dict]:
    """Every cell's parameters, the last field varying fastest."""
    names = list(sweep)
    return [dict(zip(names, combo)) for combo in itertools.product(*(sweep[n] for n in names))]


def cell_out(base_out: str, config_path: str, index: int) -> str:
    directory = base_out[:-3] if base_out.endswith(".h5") else base_out
    directory = directory or f"sweep-{Path(config_path).stem}"
    return os.path.join(directory, f"cell_{index:04d}.h5")


def config_cells(config_path: str) -> list[tuple[dict, dict | None]]:
    """The runs a config file stands for: [(values, cell parameters)], one per sweep cell (each
    with its own `out`), or [(values, None)] when the file has no [sweep] table."""
    raw, sweep = split_sweep(read_toml(config_path), config_path)
    if not sweep:
        return [(raw, None)]
    return [(dict(raw, **cell, out=cell_out(raw.get("out", ""), config_path, i)), cell)
            for i, cell in enumerate(cells(sweep))]


def select_cell(runs: list, config_path: str, cell: int | None) -> list:
    """The one cell asked for by --cell or, in a job-array task, SLURM_ARRAY_TASK_ID; else all."""
    sweep = runs[0][1] is not None
    if cell is None and sweep and "SLURM_ARRAY_TASK_ID" in os.environ:
        cell = int(os.environ["SLURM_ARRAY_TASK_ID"])
    if cell is None:
        return runs
    if not sweep:
        raise ConfigError(f"--cell {cell}: config file {config_path!r} has no [sweep] table")
    if not 0 <= cell < len(runs):
        raise ConfigError(f"--cell {cell} is out of range: config file {config_path!r} has "
                          f"{len(runs)} cells (0..{len(runs) - 1})")
    return [runs[cell]]


ARRAY_TEMPLATE = """\
#!/bin/bash
# Job array for the sweep in {config} ({count} cells), written by `python -m ordersim sweep`.
# Task i runs cell i into {outdir}/cell_<i>.h5; merge with
#   python -m ordersim merge {outdir}/cell_*.h5 --out {outdir}/merged.csv
#SBATCH --job-name=ordersim-sweep
#SBATCH --array=0-{last}
#SBATCH --ntasks={ntasks}
#SBATCH --cpus-per-task=1
#SBATCH --time={time}
#SBATCH --signal=USR1@120
#SBATCH --requeue
#SBATCH --open-mode=append
#SBATCH --output={outdir}/slurm-%A_%a.out
{extra}
export OMP_NUM_THREADS=1 NUMBA_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1
export HDF5_USE_FILE_LOCKING=FALSE
# node-local; ordersim creates it (mode 0700) and refuses one that is not private
export NUMBA_CACHE_DIR="${{TMPDIR:-/tmp}}/ordersim-numba-$SLURM_JOB_ID"
cd {workdir}
# Slurm sends USR1 to the ranks 120 s before the time limit (SIGTERM on preemption): ordersim
# checkpoints at the next epoch boundary and exits 3; the task is requeued and --resume goes on.
srun --mpi=pmi2 {python} -m ordersim run {config} --cell "$SLURM_ARRAY_TASK_ID" --resume
status=$?
if [ "$status" -eq 3 ]; then scontrol requeue "${{SLURM_ARRAY_JOB_ID}}_${{SLURM_ARRAY_TASK_ID}}"; fi
exit "$status"
"""


def write_array_script(path: str, config_path: str, count: int, out_dir: str, ntasks: int,
                       time_limit: str, partition: str | None) -> None:
    extra = f"#SBATCH --partition={partition}" if partition else ""
    text = ARRAY_TEMPLATE.format(config=shlex.quote(config_path), count=count, last=count - 1,
                                 ntasks=ntasks, time=time_limit, outdir=out_dir, extra=extra,
                                 workdir=shlex.quote(os.getcwd()), python=shlex.quote(sys.executable))
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(out_dir).mkdir(parents=True, exist_ok=True)  # Slurm does not create --output directories
    Path(path).write_text(text)


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m ordersim sweep", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("config", help="TOML config with a [sweep] table")
    p.add_argument("--write-array", metavar="FILE", help="write a Slurm job-array script to FILE")
    p.add_argument("--ntasks", type=int, default=1,
                   help="MPI ranks per array task (must divide every cell's workers; default 1: the "
                        "serial backend simulates all workers in one process)")
    p.add_argument("--time", default="01:00:00", help="time limit per array task (default 01:00:00)")
    p.add_argument("--partition", default=None, help="Slurm partition (default: the cluster's)")
    args = p.parse_args(argv)
    try:
        raw, sweep = split_sweep(read_toml(args.config), args.config)
        if not sweep:
            raise ConfigError(f"config file {args.config!r} has no [sweep] table")
        if args.ntasks < 1:
            raise ConfigError(f"--ntasks must be >= 1, got {args.ntasks}")
        all_cells = cells(sweep)
        for i, cell in enumerate(all_cells):
            workers = int(cell.get("workers", raw.get("workers", 0)) or args.ntasks)
            if workers % args.ntasks:
                raise ConfigError(f"--ntasks {args.ntasks} does not divide cell {i}'s workers = {workers}")
    except ConfigError as err:
        print(f"ordersim: error: {err}", file=sys.stderr)
        return 2
    names = list(sweep)
    widths = [max(len(n), *(len(json.dumps(c[n])) for c in all_cells)) for n in names]
    print(f"{'cell':>5}  " + "  ".join(f"{n:>{w}}" for n, w in zip(names, widths)) + "  output")
    for i, cell in enumerate(all_cells):
        print(f"{i:>5}  " + "  ".join(f"{json.dumps(cell[n]):>{w}}" for n, w in zip(names, widths))
              + f"  {cell_out(raw.get('out', ''), args.config, i)}")
    print(f"{len(all_cells)} cells -> {len(all_cells)} array tasks")
    if args.write_array:
        out_dir = os.path.dirname(cell_out(raw.get("out", ""), args.config, 0))
        write_array_script(args.write_array, args.config, len(all_cells), out_dir, args.ntasks,
                           args.time, args.partition)
        print(f"wrote {args.write_array}: submit with `sbatch {args.write_array}`")
    return 0


def merge_main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m ordersim merge",
                                description="Join trace files (e.g. a sweep's cells) into one tidy "
                                            "table: one row per (file, run, measured epoch), the run "
                                            "attributes and the sweep cell's parameters as columns.")
    p.add_argument("files", nargs="+", help="trace files (HDF5)")
    p.add_argument("--out", required=True, help="output table: .csv or .parquet")
    args = p.parse_args(argv)
    from analysis.load import load_runs

    missing = [f for f in args.files if not os.path.isfile(f)]
    if missing:
        print(f"ordersim: error: merge: no such file {missing[0]!r}", file=sys.stderr)
        return 2
    table = load_runs(args.files)
    if args.out.endswith(".parquet"):
        table.to_parquet(args.out)
    else:
        table.to_csv(args.out, index=False)
    runs = table.groupby(["file", "orderer", "seed"]).ngroups if len(table) else 0
    print(f"merged {len(args.files)} files, {runs} runs, {len(table)} rows -> {args.out}")
    return 0
