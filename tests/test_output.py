"""The output file: a second writer never destroys a live trace, nothing but an ordersim trace is
written over (and that only with --overwrite or --resume), sweeps with --out and with swept fields
set on the command line, and merge's answers to bad inputs. Real processes and real files."""

import os
import signal
import subprocess
import sys
import time

import h5py
import numpy as np
import pytest

from conftest import ROOT, run_mpi
from test_simulator import run_serial

TINY = ["--epochs", "1", "--seeds", "0", "--orderers", "rr", "--workers", "2", "--no-herding",
        "--quiet"]


def one_line_error(result, *words):
    assert result.returncode == 2, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


# -- a second writer --------------------------------------------------------------------------


@pytest.mark.parametrize("second", ["serial", "mpi-2"])
@pytest.mark.parametrize("locking", [[], ["--no-hdf5-locking"]], ids=["hdf5-locks", "no-hdf5-locks"])
def test_a_second_run_on_a_live_trace_is_refused_and_the_first_finishes_intact(tmp_path, locking, second):
    """The first run is stopped (SIGSTOP) with its trace open; the second, on the same --out, must
    be refused before it touches the file; the first then finishes with a complete trace."""
    out = tmp_path / "live.h5"
    args = ["--epochs", "4", "--seeds", "0", "--orderers", "rr", "cd-grab", "--workers", "2",
            "--no-herding", *locking, "--out", str(out)]
    first = subprocess.Popen([sys.executable, "-m", "ordersim", *args], cwd=ROOT, text=True,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        for line in first.stdout:
            if "[rr seed 0] epoch   1/" in line:  # the trace is open and being written
                break
        first.send_signal(signal.SIGSTOP)
        start = time.monotonic()
        if second == "serial":
            result = run_serial([*args, "--quiet"], timeout=120)
        else:
            result = run_mpi(2, ["-m", "ordersim", *args, "--quiet"], timeout=120)
        assert time.monotonic() - start < 120  # refused, not waiting for the lock
        line = one_line_error(result, "'out'", "another ordersim run", f"pid {first.pid}")
        assert "Traceback" not in result.stdout
    finally:
        first.send_signal(signal.SIGCONT)
    rest, err = first.communicate(timeout=300)
    assert first.returncode == 0, err
    with h5py.File(out, "r") as f:
        assert "end_time" in f.attrs
        for orderer in ("rr", "cd-grab"):
            run = f[f"runs/{orderer}/seed_0"]
            assert run.attrs["status"] == "completed" and run.attrs["epochs_completed"] == 4
            assert list(run["epoch"][()]) == [0, 1, 2, 3, 4]
    assert not (tmp_path / "live.h5.lock").exists(), line  # removed by its holder at the end


def test_a_killed_runs_lock_file_does_not_block_the_next_run(tmp_path):
    out = tmp_path / "t.h5"
    (tmp_path / "t.h5.lock").write_text("host gone pid 1\n")  # left by a run killed with -9
    result = run_serial([*TINY, "--out", str(out)])
    assert result.returncode == 0, result.stderr
    assert not (tmp_path / "t.h5.lock").exists()


# -- what --out may write over ----------------------------------------------------------------


def test_out_refuses_files_that_are_not_ordersim_traces(tmp_path):
    text = tmp_path / "notes.txt"
    text.write_text("my notes\n")
    foreign = tmp_path / "foreign.h5"
    with h5py.File(foreign, "w") as f:
        f["x"] = np.arange(3)
    for path in (text, foreign):
        before = path.read_bytes()
        for flags in ([], ["--overwrite"], ["--resume"]):
            one_line_error(run_serial([*TINY, *flags, "--out", str(path)], timeout=120), "'out'",
                           "not", "ordersim replaces only its own traces")
            assert path.read_bytes() == before


HERDING_SIM = ["herding-sim", "--total", "64", "--workers", "1", "2", "--rounds", "2", "--orderers", "rr",
               "--quiet"]


@pytest.mark.parametrize("command", ["run", "herding-sim"])
@pytest.mark.parametrize("under", ["my.h5/", "my.h5/sub/x.h5"])
def test_an_out_that_takes_a_file_for_a_directory_names_that_file(tmp_path, command, under):
    """`--out results/my.h5/` with results/my.h5 a file: the system's "Is a directory" (or "Not a
    directory" for the path further down) named the wrong thing; the line names the file."""
    taken = tmp_path / "my.h5"
    taken.write_text("kept\n")
    out = f"{tmp_path}/{under}"
    argv, option = (TINY, "'out'") if command == "run" else (HERDING_SIM, "--out")
    line = one_line_error(run_serial([*argv, "--out", out], timeout=120), option,
                          f"{out!r} is not writable", f"({str(taken)!r} is a file, not a directory)")
    assert "errno" not in line and "Unable to" not in line, line
    assert taken.read_text() == "kept\n"


def test_herding_sim_creates_the_directories_of_out_as_run_does(tmp_path):
    """It exited 2 with HDF5's "Unable to synchronously create file ... errno = 2" instead."""
    out = tmp_path / "results" / "nodir" / "hs.h5"
    result = run_serial([*HERDING_SIM, "--out", str(out)], timeout=120)
    assert result.returncode == 0, result.stderr
    with h5py.File(out, "r") as f:
        assert f.attrs["experiment"] == "herding-sim"


@pytest.mark.parametrize("source", ["hdf5", "csv", "npz"])
def test_out_refuses_the_runs_own_input_file(tmp_path, source):
    X = np.random.default_rng(0).normal(size=(40, 3))
    y = np.where(X[:, 0] > 0, 1.0, -1.0)
    data = tmp_path / f"data.{source}"
    if source == "hdf5":
        with h5py.File(data, "w") as f:
            f["X"], f["y"] = X, y
    elif source == "csv":
        np.savetxt(data, np.column_stack([X, y]), delimiter=",")
    else:
        data = tmp_path / "data.npz"
        np.savez(data, X=X, y=y)
    os.symlink(data, tmp_path / "symlink")  # the same file by other names
    os.link(data, tmp_path / "hardlink")
    before = data.read_bytes()
    for out in (data, tmp_path / "symlink", tmp_path / "hardlink"):
        result = run_serial([*TINY, "--overwrite", "--data", f"{source}:{data}", "--out", str(out)],
                            timeout=120)
        one_line_error(result, "'out'", "the run's data file")
    assert data.read_bytes() == before


def test_an_existing_trace_needs_overwrite_or_resume(tmp_path):
    out = tmp_path / "t.h5"
    assert run_serial([*TINY, "--out", str(out)]).returncode == 0
    before = out.read_bytes()
    line = one_line_error(run_serial([*TINY, "--out", str(out)], timeout=120), "'out'")
    assert "--overwrite" in line and "--resume" in line
    assert out.read_bytes() == before
    # --resume of a finished trace of the same config: nothing to do, nothing written
    result = run_serial([*TINY, "--resume", "--out", str(out)])
    assert result.returncode == 0 and "already complete" in result.stdout, result.stderr
    assert out.read_bytes() == before
    # --resume over a trace of another config that no checkpoint continues: refused
    line = one_line_error(run_serial([*TINY, "--lr", "0.1", "--resume", "--out", str(out)],
                                     timeout=120), "--resume", "lr", "--overwrite")
    assert out.read_bytes() == before
    result = run_serial([*TINY, "--lr", "0.1", "--overwrite", "--out", str(out)])
    assert result.returncode == 0, result.stderr
    with h5py.File(out, "r") as f:
        assert '"lr": 0.1' in f.attrs["config"] and "end_time" in f.attrs


def test_resume_without_a_trace_starts_the_run(tmp_path):
    """What the Slurm templates do on first submission: --resume, no trace yet."""
    out = tmp_path / "new" / "t.h5"
    result = run_serial([*TINY, "--resume", "--out", str(out)])
    assert result.returncode == 0, result.stderr
    with h5py.File(out, "r") as f:
        assert f["runs/rr/seed_0"].attrs["status"] == "completed"


def test_help_explains_overwrite():
    result = run_serial(["--help"])
    assert "--overwrite" in result.stdout and "--no-overwrite" in result.stdout


# -- sweeps: --out and swept fields on the command line -----------------------------------------


SWEEP = """\
orderers = ["rr"]
seeds = [0]
epochs = 1
workers = 2
herding = false
quiet = true
out = "{out}"

[sweep]
lr = [0.1, 0.2]
batch = [1, 2]
"""


def cell_values(path):
    import json

    with h5py.File(path, "r") as f:
        config = json.loads(f.attrs["config"])
        return (config["lr"], config["batch"], int(f.attrs["sweep_cell_index"]),
                int(f.attrs["sweep_cells"]))


def test_out_on_a_sweep_gives_every_cell_its_own_file_under_it(tmp_path):
    config = tmp_path / "sweep.toml"
    config.write_text(SWEEP.format(out=tmp_path / "config_out.h5"))
    result = run_serial(["run", str(config), "--out", str(tmp_path / "mine.h5")])
    assert result.returncode == 0, result.stderr
    files = sorted((tmp_path / "mine").glob("cell_*.h5"))
    assert [cell_values(p) for p in files] == [(0.1, 1, 0, 4), (0.1, 2, 1, 4), (0.2, 1, 2, 4),
                                               (0.2, 2, 3, 4)]
    assert not (tmp_path / "mine.h5").exists() and not (tmp_path / "config_out").exists()
    # quiet = true: each cell's summary table still says which cell it is
    labels = [line for line in result.stdout.splitlines() if line.startswith("sweep cell ")]
    assert [label.split(":")[0] for label in labels] == [f"sweep cell {i} of 4" for i in range(4)], result.stdout
    assert '"lr": 0.2' in labels[3] and '"batch": 2' in labels[3], labels


def test_a_swept_field_given_as_a_flag_selects_its_cells_under_their_numbers(tmp_path):
    """--lr 0.2 runs cells 2 and 3 of the full sweep into cell_0002.h5 and cell_0003.h5 (not
    renumbered from 0, where cell_0000.h5 is the lr = 0.1 cell), by --cell and
    SLURM_ARRAY_TASK_ID too; every axis given is the one cell of those values, in its own file."""
    config = tmp_path / "sweep.toml"
    config.write_text(SWEEP.format(out=tmp_path / "cells.h5"))
    listing = run_serial(["sweep", str(config), "--lr", "0.2"], timeout=60)
    assert listing.returncode == 0, listing.stderr
    assert "2 of the 4 cells -> 2 array tasks" in listing.stdout, listing.stdout
    assert "cell_0002.h5" in listing.stdout and "cell_0000.h5" not in listing.stdout, listing.stdout
    result = run_serial(["run", str(config), "--lr", "0.2", "--cell", "3"])
    assert result.returncode == 0, result.stderr
    assert [p.name for p in (tmp_path / "cells").iterdir()] == ["cell_0003.h5"]
    assert cell_values(tmp_path / "cells" / "cell_0003.h5") == (0.2, 2, 3, 4)
    result = run_serial(["run", str(config), "--lr", "0.2", "--out", str(tmp_path / "arr")],
                        env={"SLURM_ARRAY_TASK_ID": "2"})
    assert result.returncode == 0, result.stderr
    assert [p.name for p in (tmp_path / "arr").iterdir()] == ["cell_0002.h5"]
    assert cell_values(tmp_path / "arr" / "cell_0002.h5") == (0.2, 1, 2, 4)
    one_line_error(run_serial(["run", str(config), "--lr", "0.2", "--cell", "0"], timeout=60),
                   "--cell 0", '"lr": 0.1', "leave out", "2-3")
    # every axis given: the one cell of those values (a value written otherwise is the same value)
    listing = run_serial(["sweep", str(config), "--lr", "0.20", "--batch", "1"], timeout=60)
    assert "1 of the 4 cells -> 1 array task\n" in listing.stdout, listing.stdout
    result = run_serial(["run", str(config), "--lr", "0.20", "--batch", "1"])
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in (tmp_path / "cells").iterdir()) == ["cell_0002.h5", "cell_0003.h5"]
    assert cell_values(tmp_path / "cells" / "cell_0002.h5") == (0.2, 1, 2, 4)
    assert not (tmp_path / "cells.h5").exists()


def test_a_flag_value_the_sweep_does_not_list_is_refused_in_one_line(tmp_path):
    """Its cells would have no number of their own: renumbered from 0, they took the full sweep's
    file names (and with --overwrite replaced other cells' traces)."""
    config = tmp_path / "sweep.toml"
    config.write_text(SWEEP.format(out=tmp_path / "cells.h5"))
    for command in (["run", str(config), "--lr", "0.5"], ["sweep", str(config), "--lr", "0.5"],
                    ["run", str(config), "--lr", "0.5", "--cell", "0"]):
        one_line_error(run_serial(command, timeout=60), "--lr 0.5", "'lr'", "[0.1, 0.2]")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sweep.toml"]


def test_a_reduced_sweep_rewrites_only_its_own_cells(tmp_path):
    """The audit's case: the full sweep, then the same config with --lr 0.2. Its cells' files exist
    (refused without --overwrite); with --overwrite the lr = 0.2 cells are rewritten and the
    lr = 0.1 cells keep their traces."""
    config = tmp_path / "sweep.toml"
    config.write_text(SWEEP.format(out=tmp_path / "cells.h5"))
    assert run_serial(["run", str(config)]).returncode == 0
    files = sorted((tmp_path / "cells").glob("cell_*.h5"))

    def run_ids():
        ids = []
        for path in files:
            with h5py.File(path, "r") as f:
                ids.append(f.attrs["run_id"])
        return ids

    before = run_ids()
    one_line_error(run_serial(["run", str(config), "--lr", "0.2"], timeout=60),
                   f"{str(tmp_path / 'cells' / 'cell_0002.h5')!r} already holds", "--overwrite")
    result = run_serial(["run", str(config), "--lr", "0.2", "--overwrite"])
    assert result.returncode == 0, result.stderr
    assert [line.split(":")[0] for line in result.stdout.splitlines() if line.startswith("sweep cell ")] \
        == ["sweep cell 2 of 4", "sweep cell 3 of 4"], result.stdout
    after = run_ids()
    assert after[:2] == before[:2] and after[2] != before[2] and after[3] != before[3]
    assert [cell_values(p) for p in files] == [(0.1, 1, 0, 4), (0.1, 2, 1, 4), (0.2, 1, 2, 4),
                                               (0.2, 2, 3, 4)]


def test_an_existing_cell_file_of_another_sweep_is_refused_naming_both_cells(tmp_path):
    """The config's [sweep] changed since its cells ran: cell_0000.h5 holds lr = 0.1, and cell 0
    is now lr = 0.05; the refusal says so rather than suggest --overwrite blindly."""
    config = tmp_path / "sweep.toml"
    config.write_text(SWEEP.format(out=tmp_path / "cells.h5"))
    assert run_serial(["run", str(config), "--cell", "0"]).returncode == 0
    config.write_text(config.read_text().replace("lr = [0.1, 0.2]", "lr = [0.05, 0.2]"))
    one_line_error(run_serial(["run", str(config), "--cell", "0"], timeout=60), "cell_0000.h5",
                   'sweep cell 0 {"lr": 0.1, "batch": 1}', 'cell 0 {"lr": 0.05, "batch": 1}', "--overwrite")
    assert cell_values(tmp_path / "cells" / "cell_0000.h5") == (0.1, 1, 0, 4)


def test_write_array_passes_the_flags_on_to_every_task(tmp_path):
    config = tmp_path / "sweep.toml"
    config.write_text(SWEEP.format(out=tmp_path / "cells.h5"))
    script = tmp_path / "array.sbatch"
    result = run_serial(["sweep", str(config), "--lr", "0.2", "--no-standardize", "--write-array",
                         str(script), "--slurm-partition", "short"], timeout=60)
    assert result.returncode == 0, result.stderr
    text = script.read_text()
    assert "#SBATCH --array=2-3" in text and "#SBATCH --partition=short" in text  # lr 0.2's cells
    srun = next(line for line in text.splitlines() if line.startswith("srun "))
    assert srun.endswith('--cell "$SLURM_ARRAY_TASK_ID" --resume')
    assert " --lr 0.2 " in srun and " --no-standardize " in srun
    result = run_serial(["sweep", str(config), "--batch", "2", "--write-array", str(script)], timeout=60)
    assert result.returncode == 0, result.stderr
    assert "#SBATCH --array=1,3" in script.read_text()


def sbatch_directives(script) -> dict:
    """The options of a job script's #SBATCH lines, read as sbatch reads them (up to the first
    command; the values split like shell words)."""
    import shlex

    options = {}
    for line in script.read_text().splitlines()[1:]:
        if line.strip() and not line.startswith("#"):
            break
        if line.startswith("#SBATCH "):
            name, _, value = shlex.split(line[len("#SBATCH "):])[0].partition("=")
            options[name] = value
    return options


STUB = """#!/bin/sh
echo "$(basename "$0") $* in $(pwd)" >> "{calls}"
{exit}
"""


def test_write_array_script_runs_from_any_submit_directory_and_requeues_as_documented(tmp_path):
    """The job array from --write-array, submitted from another directory and run as Slurm would
    (its --chdir, its --output opened there before the script starts, srun and scontrol stubs; the
    cell's srun exits 3, a checkpoint): the log's directory exists, the cell runs in the directory
    its config's paths are relative to, and the task is requeued unless ORDERSIM_NO_REQUEUE is set
    (docs/cluster.md §5)."""
    project, elsewhere, bin_dir = tmp_path / "project", tmp_path / "elsewhere", tmp_path / "bin"
    for directory in (project, elsewhere, bin_dir):
        directory.mkdir()
    (project / "sweep.toml").write_text(SWEEP.format(out="results/cells.h5"))
    result = subprocess.run([sys.executable, "-m", "ordersim", "sweep", "sweep.toml", "--write-array",
                             "array.sbatch"], cwd=project, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    options = sbatch_directives(project / "array.sbatch")
    workdir = elsewhere / options.get("--chdir", ".")  # sbatch run from `elsewhere`
    assert workdir.resolve() == project.resolve(), options
    assert (workdir / options["--output"]).parent.is_dir(), options  # Slurm does not create it
    calls = tmp_path / "calls"
    for name, code in (("srun", "exit 3"), ("scontrol", "")):
        (bin_dir / name).write_text(STUB.format(calls=calls, exit=code))
        (bin_dir / name).chmod(0o755)
    env = dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}", SLURM_ARRAY_JOB_ID="77",
               SLURM_ARRAY_TASK_ID="2", SLURM_JOB_ID="79", SLURM_JOB_NODELIST="node1")
    for no_requeue in ("", "1"):
        calls.write_text("")
        task = subprocess.run(["bash", str(project / "array.sbatch")], cwd=workdir, capture_output=True,
                              text=True, timeout=60, env=dict(env, ORDERSIM_NO_REQUEUE=no_requeue))
        assert task.returncode == 3, task.stderr
        assert "restart 0" in task.stdout, task.stdout
        srun, *requeue = calls.read_text().splitlines()
        assert srun.startswith("srun ") and "--cell 2 --resume" in srun, srun
        assert srun.endswith(f" in {project.resolve()}"), srun
        assert requeue == ([] if no_requeue else [f"scontrol requeue 77_2 in {project.resolve()}"])


# -- merge --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cells(tmp_path_factory):
    """Cells 0 and 2 of a 4-cell sweep (1 and 3 never ran)."""
    root = tmp_path_factory.mktemp("merge")
    config = root / "sweep.toml"
    config.write_text(SWEEP.format(out=root / "cells.h5"))
    for i in (0, 2):
        result = run_serial(["run", str(config), "--cell", str(i)])
        assert result.returncode == 0, result.stderr
    return root / "cells"


def merge(files, out):
    return run_serial(["merge", *map(str, files), "--out", str(out)], timeout=120)


def test_merge_names_the_missing_cells_of_a_sweep(cells, tmp_path):
    result = merge(sorted(cells.glob("cell_*.h5")), tmp_path / "m.csv")
    assert result.returncode == 0, result.stderr
    assert "2 of the 4 cells" in result.stderr and "missing: 1, 3" in result.stderr, result.stderr
    assert (tmp_path / "m.csv").exists()


def test_merge_prints_the_loaders_notes_as_plain_lines(cells, tmp_path):
    """A cell whose job was killed (no end_time): its note is a line of merge's, not a Python
    warning with the source line that raised it."""
    killed = tmp_path / "cell_0000.h5"
    killed.write_bytes((cells / "cell_0000.h5").read_bytes())
    with h5py.File(killed, "r+") as f:
        del f.attrs["end_time"]
    result = merge([killed], tmp_path / "m.csv")
    assert result.returncode == 0, result.stderr
    assert f"ordersim: warning: merge: file {killed} has no end_time" in result.stderr, result.stderr
    assert "TraceWarning" not in result.stderr and "load_runs(" not in result.stderr, result.stderr


def test_merge_of_bad_inputs_is_one_line_and_exit_2(cells, tmp_path):
    good = cells / "cell_0000.h5"
    text = tmp_path / "notes.txt"
    text.write_text("hello\n")
    foreign = tmp_path / "foreign.h5"
    with h5py.File(foreign, "w") as f:
        f["x"] = np.arange(3)
    truncated = tmp_path / "truncated.h5"
    truncated.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    for bad, words in ((tmp_path / "nope.h5", ["does not exist"]), (text, ["not an HDF5 file"]),
                       (foreign, ["not an ordersim trace"]), (truncated, ["does not open"])):
        line = one_line_error(merge([good, bad], tmp_path / "m.csv"), repr(str(bad)), *words)
        assert not (tmp_path / "m.csv").exists(), line


def test_merge_refuses_to_write_over_its_inputs_or_an_existing_file(cells, tmp_path):
    good = cells / "cell_0000.h5"
    before = good.read_bytes()
    existing = tmp_path / "table.csv"
    existing.write_text("kept\n")
    cases = [(good, ["is one of the input traces"]), (tmp_path / "table.h5", ["extension", ".csv, .parquet"]),
             (existing, ["exists", "--overwrite"])]
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        cases.append((tmp_path / "table.parquet", ["needs pyarrow"]))
    cases.append((tmp_path / "nodir" / "table.csv", ["is not a directory"]))  # found before any trace is read
    for out, words in cases:
        one_line_error(merge([good], out), repr(str(out)), *words)
    assert good.read_bytes() == before and existing.read_text() == "kept\n"
    replaced = run_serial(["merge", str(good), "--out", str(existing), "--overwrite"], timeout=120)
    assert replaced.returncode == 0, replaced.stderr
    assert existing.read_text().startswith("file,")


def test_merge_refuses_a_trace_given_twice(cells, tmp_path):
    """Its rows would be in the table twice, one run counted as two."""
    good = cells / "cell_0000.h5"
    link = tmp_path / "link.h5"
    link.symlink_to(good)
    one_line_error(merge([good, link], tmp_path / "m.csv"), repr(str(link)), "given twice", repr(str(good)))
    assert not (tmp_path / "m.csv").exists()


def test_merge_has_a_column_for_every_config_field_that_differs(tmp_path):
    """momentum is no run attribute: only the configs tell the cells apart."""
    config = tmp_path / "momentum.toml"
    config.write_text(SWEEP.format(out=tmp_path / "cells.h5").replace("lr = [0.1, 0.2]\nbatch = [1, 2]",
                                                                       "momentum = [0.0, 0.5]"))
    result = run_serial(["run", str(config)])
    assert result.returncode == 0, result.stderr
    out = tmp_path / "m.csv"
    result = merge(sorted((tmp_path / "cells").glob("cell_*.h5")), out)
    assert result.returncode == 0, result.stderr
    import pandas as pd

    table = pd.read_csv(out)
    assert sorted(table.groupby("file").momentum.first()) == [0.0, 0.5]


@pytest.mark.parametrize("sweep, words", [
    ("lr = [0.1, -1]", ["config field 'lr'", "-1"]),  # cell 1's, found before cell 0 computes
    ("lr = [0.1, 0.1]", ["lists a value twice"]),
    ('out = ["a.h5", "b.h5"]', ["sweep field 'out' is not allowed"]),
])
def test_a_bad_sweep_is_refused_before_any_cell_computes(tmp_path, sweep, words):
    config = tmp_path / "sweep.toml"
    config.write_text(SWEEP.format(out=tmp_path / "cells.h5").replace("lr = [0.1, 0.2]\nbatch = [1, 2]", sweep))
    for command in (["run", str(config)], ["sweep", str(config), "--write-array", str(tmp_path / "a.sbatch")]):
        one_line_error(run_serial(command, timeout=120), *words)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sweep.toml"]  # no cell, no script


def test_sweep_writes_no_array_script_over_the_config_or_another_file(tmp_path):
    config = tmp_path / "sweep.toml"
    config.write_text(SWEEP.format(out=tmp_path / "cells.h5"))
    notes = tmp_path / "notes.txt"
    notes.write_text("kept\n")
    for target, words in ((config, ["is the config file"]), (notes, ["is not a job script"])):
        one_line_error(run_serial(["sweep", str(config), "--write-array", str(target)], timeout=60), *words)
    assert notes.read_text() == "kept\n" and "[sweep]" in config.read_text()
    script = tmp_path / "array.sbatch"
    for _ in range(2):  # its own script is replaced
        assert run_serial(["sweep", str(config), "--write-array", str(script)], timeout=60).returncode == 0
    blocker = tmp_path / "afile"  # a file where the script's directory would go
    blocker.write_text("kept\n")
    one_line_error(run_serial(["sweep", str(config), "--write-array", str(blocker / "a.sbatch")], timeout=60),
                   "--write-array", "is not writable", f"{str(blocker)!r} is a file, not a directory")
    one_line_error(run_serial(["sweep", str(config), "--time", "1 hour"], timeout=60), "--time")
    one_line_error(run_serial(["sweep", str(config), "--slurm-partition", "a b;x"], timeout=60),
                   "--slurm-partition")


@pytest.mark.parametrize("flags, words", [(["--cell", "1"], ["--cell 1", "[sweep]"]),
                                          (["--quick"], ["--quick", "[quick]"])])
def test_cell_or_quick_without_a_config_is_refused_not_ignored(tmp_path, flags, words):
    """Ignored, they would run the whole built-in experiment instead of the cell or size asked for."""
    result = run_serial([*flags, *TINY, "--out", str(tmp_path / "t.h5")], timeout=60)
    one_line_error(result, *words, "no config file")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("task, words", [("abc", ["SLURM_ARRAY_TASK_ID 'abc'", "0-3"]),
                                         ("4", ["SLURM_ARRAY_TASK_ID 4 is out of range", "4 cells", "0..3"])])
def test_a_job_array_task_id_that_is_no_index_is_one_line(tmp_path, task, words):
    """The error names SLURM_ARRAY_TASK_ID, which the task set, not --cell, which it did not."""
    config = tmp_path / "sweep.toml"
    config.write_text(SWEEP.format(out=tmp_path / "cells.h5"))
    result = run_serial(["run", str(config)], env={"SLURM_ARRAY_TASK_ID": task}, timeout=60)
    one_line_error(result, *words)


def test_a_config_that_is_not_utf8_text_is_one_line(tmp_path):
    config = tmp_path / "binary.toml"
    config.write_bytes(b"\xff\xfe\x00epochs = 1\n")
    one_line_error(run_serial(["run", str(config)], timeout=60), "is not valid TOML")


@pytest.mark.parametrize("toml, words", [
    ('epochs = "2"\n', ["field 'epochs' is the string '2'", "allowed: an integer, written without quotes"]),
    ('lr = "1e-3 "\n', ["field 'lr' is the string '1e-3 '", "allowed: a number"]),
    ('epochs = 1\n[sweep]\nrecord_orders = [true, "false"]\n', ["field 'sweep.record_orders'", "'false'", "true or false"]),
    ('epochs = 1\n[quick]\nbatch = "4"\n', ["field 'quick.batch'", "'4'"]),
])
def test_a_quoted_number_in_a_config_file_is_refused(tmp_path, toml, words):
    """TOML has numbers and booleans: a quoted one (a slip, "1e-3 " with its space) was converted;
    it is one line naming the field, before any compute."""
    config = tmp_path / "quoted.toml"
    config.write_text(f'out = "{tmp_path / "x.h5"}"\n' + toml)
    one_line_error(run_serial(["run", str(config), "--dry-run"], timeout=60), *words)
    assert not (tmp_path / "x.h5").exists()


@pytest.mark.parametrize("ranks", [1, pytest.param(2, marks=pytest.mark.mpi)])
@pytest.mark.parametrize("sweep, words", [
    ("batch = [1, 100000]", ["sweep cell 1", "'batch'", "100000 is more than the"]),
    ("workers = [2, 1000]", ["sweep cell 1", "'workers'", "got 1000"]),
    ('data = ["sklearn:breast_cancer", "synthetic:regression?n=100&d=3"]',
     ["sweep cell 1", "config field 'data'", "real numbers"]),
    ('problem = ["least-squares", "{tmp_path}/reads_params_1.py"]',
     ["sweep cell 1", "config field 'problem'", "kernel batch_grads raised IndexError"]),
])
def test_a_sweep_cell_its_data_refutes_is_refused_before_the_first_cell_computes(tmp_path, ranks, sweep, words):
    """What only the data can refute (a batch beyond a worker's examples, more workers than examples,
    labels the problem cannot take, a kernel reading past params) was found when that cell's turn
    came, after the cells before it had trained."""
    from test_problems import READS_PARAMS_1

    (tmp_path / "reads_params_1.py").write_text(READS_PARAMS_1)
    sweep = sweep.format(tmp_path=tmp_path)
    config = tmp_path / "sweep.toml"
    config.write_text(f'orderers = ["rr"]\nseeds = [0]\nepochs = 1\nout = "{tmp_path / "s.h5"}"\n'
                      f"[sweep]\n{sweep}\n")
    args = ["-m", "ordersim", "run", str(config)]
    result = (run_mpi(ranks, args, timeout=120) if ranks > 1
              else subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=120))
    assert result.returncode == 2, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("ordersim:")]
    assert len(lines) == 1 and all(word in lines[0] for word in words), result.stderr
    assert not (tmp_path / "s").exists()  # no cell ran


@pytest.mark.mpi
def test_a_sweeps_data_check_estimates_memory_per_rank_of_the_run(tmp_path):
    """The check reads the data in rank 0 alone but must judge memory per rank of the run: a data
    set that fits spread over the ranks would otherwise be refused before any cell ran."""
    config = tmp_path / "sweep.toml"
    config.write_text(f'problem = "least-squares"\norderers = ["rr"]\nseeds = [0]\nepochs = 1\n'
                      f'out = "{tmp_path / "s.h5"}"\n[sweep]\ndata = ["synthetic:regression?n=100", '
                      f'"synthetic:regression?n=100000000000&d=20"]\n')
    result = run_mpi(2, ["-m", "ordersim", "run", str(config)], timeout=120)
    assert result.returncode == 2, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("ordersim:")]
    assert len(lines) == 1 and "sweep cell 1" in lines[0], result.stderr
    assert "per rank (of 100000000000, on 2 rank(s))" in lines[0], result.stderr
