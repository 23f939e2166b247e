"""Checkpoint and exact restart: a run stopped by SIGUSR1/SIGTERM (Slurm's warning and preemption)
and resumed gives traces and orders bitwise identical to the same run never interrupted."""

import os
import pickle
import signal
import subprocess
import sys

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
