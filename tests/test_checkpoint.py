"""Checkpoint and exact restart: a run stopped by SIGUSR1/SIGTERM (Slurm's warning and preemption)
and resumed gives traces and orders bitwise identical to the same run never interrupted."""

import os
import pickle
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from conftest import ROOT, mpiexec_path
from test_simulator import assert_bitwise_equal, contents, open_when_released, run_serial

from ordersim import checkpoint

ARGS = ["--epochs", "8", "--orderers", "rr", "cd-grab", "d-grab", "--seeds", "0", "1", "--workers",
        "4", "--batch", "2", "--momentum", "0.5", "--record-orders", "--trace-every", "7"]


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    out = tmp_path_factory.mktemp("full") / "full.h5"
    result = run_serial([*ARGS, "--quiet", "--out", str(out)])
    assert result.returncode == 0, result.stderr
    return contents(out)


def stop_after(command, marker, sig, timeout=300):
    """Start command, send `sig` once a stdout line contains `marker`; return its exit code."""
    proc = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    for line in proc.stdout:
        if marker in line:
            proc.send_signal(sig)
            break
    proc.stdout.read()
    err = proc.stderr.read()
    code = proc.wait(timeout=timeout)
    return code, err


@pytest.mark.parametrize("stops", [
    [("[rr seed 0] epoch   1/", signal.SIGUSR1)],
    [("[rr seed 1] epoch   7/", signal.SIGTERM), ("[cd-grab seed 1] epoch   2/", signal.SIGUSR1),
     ("[d-grab seed 0] epoch   5/", signal.SIGTERM)],
])
def test_resumed_run_is_bitwise_identical_to_uninterrupted(uninterrupted, tmp_path, stops):
    out = tmp_path / "stopped.h5"
    command = [sys.executable, "-m", "ordersim", *ARGS, "--out", str(out)]
    for i, (marker, sig) in enumerate(stops):
        code, err = stop_after(command + (["--resume"] if i else []), marker, sig)
        assert code == checkpoint.EXIT_CHECKPOINTED, err
        assert os.path.exists(checkpoint.checkpoint_path(str(out)))
        with open_when_released(out) as f:  # the trace holds every completed epoch meanwhile
            assert "runs/rr/seed_0/train_loss" in f
    result = run_serial([*ARGS, "--quiet", "--resume", "--out", str(out)])
    assert result.returncode == 0, result.stderr
    assert not os.path.exists(checkpoint.checkpoint_path(str(out)))  # finished: nothing to resume
    assert_bitwise_equal(uninterrupted, contents(out))


def test_resume_after_a_hard_kill_cuts_the_trace_back_to_the_checkpoint(uninterrupted, tmp_path):
    """kill -9 after a periodic checkpoint: epochs written after it are dropped and recomputed."""
    out = tmp_path / "killed.h5"
    command = [sys.executable, "-m", "ordersim", *ARGS, "--checkpoint-every", "3", "--out", str(out)]
    code, _ = stop_after(command, "[cd-grab seed 0] epoch   5/", signal.SIGKILL)
    assert code == -signal.SIGKILL
    with open(checkpoint.checkpoint_path(str(out)), "rb") as fh:
        assert pickle.load(fh)["position"] == 2  # inside cd-grab seed 0, after its epoch 3
    result = run_serial([*ARGS, "--checkpoint-every", "3", "--quiet", "--resume", "--out", str(out)])
    assert result.returncode == 0, result.stderr
    assert_bitwise_equal(uninterrupted, contents(out))


@pytest.mark.mpi
@pytest.mark.parametrize("ranks", [2, 4])
def test_mpi_run_stopped_by_signal_resumes_bitwise_identically(uninterrupted, tmp_path, ranks):
    """At 4 ranks the resumed half exchanges through MPI_Allgather instead of shared memory: the
    exchange changes no value, so resuming accepts the different setting."""
    out = tmp_path / "mpi.h5"
    command = [mpiexec_path(), "-n", str(ranks), sys.executable, "-m", "ordersim", *ARGS, "--out", str(out)]
    code, err = stop_after(command, "[cd-grab seed 0] epoch   3/", signal.SIGUSR1)
    assert code == checkpoint.EXIT_CHECKPOINTED, err
    exchange = ["--exchange", "allgather"] if ranks == 4 else []
    result = subprocess.run(command + ["--resume", "--quiet", *exchange], cwd=ROOT, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert_bitwise_equal(uninterrupted, contents(out))


def test_resume_refuses_a_different_config(tmp_path):
    out = tmp_path / "a.h5"
    command = [sys.executable, "-m", "ordersim", *ARGS, "--out", str(out)]
    code, err = stop_after(command, "epoch   2/", signal.SIGUSR1)
    assert code == checkpoint.EXIT_CHECKPOINTED, err
    result = run_serial([*ARGS, "--lr", "0.01", "--resume", "--out", str(out)])
    assert result.returncode == 2
    assert "lr" in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_checkpoint_write_is_atomic(tmp_path, monkeypatch):
    """A failure (or kill) while writing leaves the previous checkpoint whole."""
    path = str(tmp_path / "x.ckpt")
    checkpoint.save(path, {"position": 1})

    def broken_dump(obj, fh, protocol=None):
        fh.write(b"half a checkpoint")
        raise KeyboardInterrupt("killed mid-write")

    monkeypatch.setattr(checkpoint.pickle, "dump", broken_dump)
    with pytest.raises(KeyboardInterrupt):
        checkpoint.save(path, {"position": 2})
    monkeypatch.undo()
    assert checkpoint.load(path)["position"] == 1
    assert os.listdir(tmp_path) == ["x.ckpt"]  # no half-written file left behind


def test_resume_skips_a_finished_sweep_cell_and_runs_the_missing_one(tmp_path):
    config = tmp_path / "sweep.toml"
    config.write_text(f'orderers = ["rr"]\nseeds = [0]\nepochs = 2\nworkers = 2\nquiet = true\n'
                      f'out = "{tmp_path / "cells"}"\n[sweep]\nlr = [0.1, 0.2]\n')
    assert run_serial(["run", str(config), "--cell", "0"]).returncode == 0
    first = (tmp_path / "cells" / "cell_0000.h5").stat().st_mtime_ns
    result = run_serial(["run", str(config), "--resume"])
    assert result.returncode == 0, result.stderr
    assert "cell_0000.h5 is already complete" in result.stdout
    assert (tmp_path / "cells" / "cell_0000.h5").stat().st_mtime_ns == first
    assert (tmp_path / "cells" / "cell_0001.h5").exists()


def test_resume_from_an_unreadable_checkpoint_says_so(tmp_path):
    out = tmp_path / "x.h5"
    out.write_bytes(b"")
    (tmp_path / "x.h5.ckpt").write_bytes(b"not a pickle")
    result = run_serial([*ARGS, "--resume", "--out", str(out)])
    assert result.returncode == 2
    assert "unreadable" in result.stderr and "Traceback" not in result.stderr


def test_resume_refuses_a_checkpoint_of_another_format(tmp_path):
    """A checkpoint from a version whose pickled state has another shape (here: the format before
    the key existed) is refused with one line, before any compute."""
    out = tmp_path / "a.h5"
    command = [sys.executable, "-m", "ordersim", *ARGS, "--out", str(out)]
    code, err = stop_after(command, "epoch   2/", signal.SIGUSR1)
    assert code == checkpoint.EXIT_CHECKPOINTED, err
    path = checkpoint.checkpoint_path(str(out))
    state = checkpoint.load(path)
    assert state["format"] == checkpoint.FORMAT
    del state["format"]
    with open(path, "wb") as fh:
        pickle.dump(state, fh)
    result = run_serial([*ARGS, "--resume", "--out", str(out)])
    assert result.returncode == 2
    assert "format 1" in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_signals_repeated_through_the_shutdown_still_exit_3(uninterrupted, tmp_path):
    """SIGUSR1, then SIGTERM every few ms until the process is gone (Slurm's warning followed by
    the time limit's SIGTERM, or an impatient user): the stop stays a checkpoint (exit 3, which the
    Slurm templates requeue), never a death by signal (143) during the interpreter's shutdown."""
    out = tmp_path / "repeated.h5"
    proc = subprocess.Popen([sys.executable, "-m", "ordersim", *ARGS, "--out", str(out)], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        for line in proc.stdout:
            if "[rr seed 0] epoch   2/" in line:
                break
        proc.send_signal(signal.SIGUSR1)
        repeats = 0
        while proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            repeats += 1
            time.sleep(0.005)
        proc.stdout.read()
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == checkpoint.EXIT_CHECKPOINTED and repeats > 1
    result = run_serial([*ARGS, "--quiet", "--resume", "--out", str(out)])
    assert result.returncode == 0, result.stderr
    assert_bitwise_equal(uninterrupted, contents(out))


def handlers_installed(pid: int) -> bool:
    """Whether the process catches SIGTERM (SigCgt in /proc, Linux)."""
    with open(f"/proc/{pid}/status") as fh:
        caught = next(int(line.split()[1], 16) for line in fh if line.startswith("SigCgt:"))
    return bool(caught >> (signal.SIGTERM - 1) & 1)


def test_a_signal_at_the_start_stops_before_the_first_epoch(tmp_path):
    """SIGTERM as soon as the process catches it (before NumPy, Numba and MPI are imported): exit
    3 at the set-up's next phase boundary, one line, nothing written."""
    out = tmp_path / "early.h5"
    proc = subprocess.Popen([sys.executable, "-m", "ordersim", *ARGS, "--out", str(out)], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not handlers_installed(proc.pid):
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.001)
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=300)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == checkpoint.EXIT_CHECKPOINTED, stderr
    stopped = [line for line in stderr.splitlines() if "stopped by SIGTERM" in line]
    assert len(stopped) == 1 and "during the set-up" in stopped[0], stderr
    assert "--resume starts from the beginning" in stopped[0]
    assert not out.exists() and not os.path.exists(checkpoint.checkpoint_path(str(out)))


SLOW_PROBLEM = textwrap.dedent('''
    import time

    from problems.logistic import Logistic

    class SlowLogistic(Logistic):
        """Logistic regression that takes its time to build (a long set-up: data, constants)."""
        name = "slow-logistic"

        def __init__(self, *args, **options):
            print("building the problem", flush=True)
            time.sleep(3)
            super().__init__(*args, **options)
''')


def test_a_signal_during_a_long_set_up_stops_at_its_next_phase(tmp_path):
    """SIGUSR1 while the problem is built: exit 3 when that phase ends, not after a first epoch."""
    module = tmp_path / "slow_problem.py"
    module.write_text(SLOW_PROBLEM)
    out = tmp_path / "setup.h5"
    code, err = stop_after([sys.executable, "-m", "ordersim", *ARGS, "--problem", str(module),
                            "--out", str(out)], "building the problem", signal.SIGUSR1)
    assert code == checkpoint.EXIT_CHECKPOINTED, err
    assert "stopped by SIGUSR1 during the set-up (opening the data and building the problem)" in err
    assert not out.exists() and not os.path.exists(checkpoint.checkpoint_path(str(out)))
