"""ordersim/quick_exit.py: a finished run leaves after the exit handlers, without the interpreter's
teardown, and keeps the teardown wherever skipping it could lose something."""

import json
import subprocess
import sys
import textwrap

import h5py
import pytest

from conftest import ROOT, run_mpi

# A script's lines that mark, in its directory `marks`, whether the interpreter's teardown ran.
TEARDOWN = textwrap.dedent("""
    class Teardown:
        def __init__(self, path):
            self.path = str(path)  # no module of its own is needed late in the teardown

        def __del__(self, open=open):  # bound now: late in the teardown the builtins are gone
            open(self.path, "w").close()

    kept = Teardown(marks / "teardown")  # freed only by the interpreter's teardown
""")

# Marks what happened at the exit in the directory argv[1]: "teardown" when the interpreter freed
# the module's objects, "atexit" when the exit handlers ran; "buffered" holds what a file object
# had in its buffer, unflushed, when the exit began.
MARKS = textwrap.dedent("""
    import atexit, sys
    from pathlib import Path

    marks = Path(sys.argv[1])
""") + TEARDOWN + textwrap.dedent("""
    atexit.register((marks / "atexit").touch)
    pending = open(marks / "buffered", "w")
    pending.write("written before the exit")  # stays in the file object's buffer
    print("printed", end="")
""")

EXIT = MARKS + textwrap.dedent("""
    from ordersim.quick_exit import exit_without_teardown

    if sys.argv[2] == "open-hdf5":
        import h5py
        trace = h5py.File(marks / "open.h5", "w")
        trace["x"] = [1.0, 2.0]
    elif sys.argv[2] == "running-thread":
        import threading, time
        threading.Thread(target=lambda: (time.sleep(0.5), (marks / "thread").touch())).start()
    elif sys.argv[2] == "unflushable-file":  # its descriptor closed under it: its flush fails
        import os
        broken = os.fdopen(os.dup(1), "w")
        broken.write("lost")
        os.close(broken.fileno())
    exit_without_teardown(3)
""")


def run_script(script, *args):
    return subprocess.run([sys.executable, "-c", script, *map(str, args)], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)


def test_the_exit_runs_the_handlers_flushes_and_skips_the_teardown(tmp_path):
    done = run_script(EXIT, tmp_path, "plain")
    assert done.returncode == 3, done.stderr
    assert done.stdout == "printed"
    assert (tmp_path / "atexit").exists()
    assert (tmp_path / "buffered").read_text() == "written before the exit"
    assert not (tmp_path / "teardown").exists()


@pytest.mark.parametrize("case", ["open-hdf5", "running-thread", "unflushable-file"])
def test_what_the_teardown_must_see_keeps_it(case, tmp_path):
    """HDF5 flushes an open file when the library shuts down, Python joins a running thread and
    reports a file it cannot flush: the exit leaves through SystemExit then, teardown included,
    with the run's status."""
    done = run_script(EXIT, tmp_path, case)
    assert done.returncode == 3, done.stderr
    assert (tmp_path / "teardown").exists() and (tmp_path / "atexit").exists()
    assert (tmp_path / "buffered").read_text() == "written before the exit"
    if case == "open-hdf5":
        with h5py.File(tmp_path / "open.h5", "r") as f:
            assert f["x"][:].tolist() == [1.0, 2.0]
    elif case == "running-thread":
        assert (tmp_path / "thread").exists()


# `python -m ordersim ARGS` as run, in the directory argv[1]/rank-R of each rank R: "teardown" when
# the interpreter freed the module's objects, "finalized" when MPI_Finalize returned (with the
# number of objects still frozen then), "frozen" when gc.freeze() was called.
COMMAND = textwrap.dedent("""
    import gc, json, os, runpy, sys
    from pathlib import Path

    from mpi4py import MPI

    rank = os.environ.get("PMI_RANK", os.environ.get("OMPI_COMM_WORLD_RANK", "0"))
    marks = Path(sys.argv[1]) / f"rank-{rank}"
    marks.mkdir(parents=True)
""") + TEARDOWN + textwrap.dedent("""
    finalize = MPI.Finalize

    def finalize_and_mark():  # at the exit: records whether anything is still frozen
        finalize()
        (marks / "finalized").write_text(json.dumps(gc.get_freeze_count()))

    MPI.Finalize = finalize_and_mark
    freeze = gc.freeze

    def freeze_and_mark():
        freeze()
        (marks / "frozen").touch()

    gc.freeze = freeze_and_mark
    sys.argv = ["ordersim", *json.loads(sys.argv[2])]
    runpy.run_module("ordersim", run_name="__main__", alter_sys=True)
""")
SMALL_RUN = ["--orderers", "rr", "cd-grab", "--seeds", "0", "--epochs", "2", "--quiet"]


def statuses(trace):
    """Every run's status in the trace."""
    with h5py.File(trace, "r") as f:
        return [run.attrs["status"] for seeds in f["runs"].values() for run in seeds.values()]


def test_a_run_skips_the_teardown_and_the_other_commands_keep_it(tmp_path):
    """`python -m ordersim run` (the default command) freezes its imports while it runs and leaves
    without the teardown, its trace whole; the listings, which tests run in one process one after
    the other, return through SystemExit."""
    out = tmp_path / "trace.h5"
    done = run_script(COMMAND, tmp_path / "run", json.dumps([*SMALL_RUN, "--out", str(out)]))
    assert done.returncode == 0, done.stderr
    marks = tmp_path / "run" / "rank-0"
    assert (marks / "frozen").exists() and json.loads((marks / "finalized").read_text()) == 0
    assert not (marks / "teardown").exists()
    assert statuses(out) == ["completed", "completed"]
    done = run_script(COMMAND, tmp_path / "listing", json.dumps(["orderers"]))
    assert done.returncode == 0 and "cd-grab" in done.stdout, done.stderr
    assert (tmp_path / "listing" / "rank-0" / "teardown").exists()


def test_a_run_called_in_the_same_process_freezes_nothing(tmp_path):
    """cli.main() returns to its caller, whose process goes on: its objects stay collectable."""
    import gc

    from ordersim.cli import main

    assert gc.get_freeze_count() == 0
    assert main([*SMALL_RUN, "--out", str(tmp_path / "trace.h5")]) == 0
    assert gc.get_freeze_count() == 0
    assert statuses(tmp_path / "trace.h5") == ["completed", "completed"]


@pytest.mark.mpi
@pytest.mark.parametrize("ranks", [2, 4])
def test_every_rank_of_a_run_finalizes_mpi_before_it_leaves(ranks, tmp_path):
    out = tmp_path / "trace.h5"
    script = tmp_path / "command.py"
    script.write_text(COMMAND)
    done = run_mpi(ranks, [str(script), str(tmp_path / "marks"),
                           json.dumps([*SMALL_RUN, "--workers", "4", "--out", str(out)])])
    assert done.returncode == 0, done.stderr
    for rank in range(ranks):
        marks = tmp_path / "marks" / f"rank-{rank}"
        assert (marks / "frozen").exists() and json.loads((marks / "finalized").read_text()) == 0, rank
        assert not (marks / "teardown").exists(), rank
    assert statuses(out) == ["completed", "completed"]
