"""Checkpoint and exact restart: a run stopped by SIGUSR1/SIGTERM (Slurm's warning and preemption)
and resumed gives traces and orders bitwise identical to the same run never interrupted."""

import json
import os
import pickle
import shutil
import signal
import subprocess
import sys
import textwrap
import time

import h5py
import numpy as np
import pytest

from conftest import ROOT, mpiexec_path, run_mpi
from reference.orderers import drive, make_orderer  # with required options
from test_simulator import assert_bitwise_equal, contents, open_when_released, run_serial

from ordersim import checkpoint
from ordersim.orderers import available_orderers, orderer_class
from ordersim.stop import EXIT_CHECKPOINTED, EXIT_INTERRUPTED, StopRequest

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
    # Ctrl-C; not in the job's last run: a signal that arrives late, after its last epoch began,
    # finishes the job (exit 0), as it should; under load it did
    [("[d-grab seed 0] epoch   3/", signal.SIGINT)],
    [("[rr seed 1] epoch   7/", signal.SIGTERM), ("[cd-grab seed 1] epoch   2/", signal.SIGUSR1),
     ("[d-grab seed 0] epoch   5/", signal.SIGTERM)],
])
def test_resumed_run_is_bitwise_identical_to_uninterrupted(uninterrupted, tmp_path, stops):
    out = tmp_path / "stopped.h5"
    command = [sys.executable, "-m", "ordersim", *ARGS, "--out", str(out)]
    for i, (marker, sig) in enumerate(stops):
        code, err = stop_after(command + (["--resume"] if i else []), marker, sig)
        assert code == EXIT_CHECKPOINTED, err
        assert f"--resume --out {out}" in err, err  # the message names the file to resume
        assert f"ordersim: stopped by {sig.name}; checkpoint " in err, err
        assert ("Ctrl-C again to stop now" in err) == (sig == signal.SIGINT), err
        assert os.path.exists(checkpoint.checkpoint_path(str(out)))
        with open_when_released(out) as f:  # the trace holds every completed epoch meanwhile
            assert "runs/rr/seed_0/train_loss" in f
    result = run_serial([*ARGS, "--quiet", "--resume", "--out", str(out)])
    assert result.returncode == 0, result.stderr
    assert not os.path.exists(checkpoint.checkpoint_path(str(out)))  # finished: nothing to resume
    assert_bitwise_equal(uninterrupted, contents(out))
    with h5py.File(out, "r") as f:  # every --resume recorded, with its code state and command
        resumes = json.loads(f.attrs["resumes"])
    assert len(resumes) == len(stops) and all("--resume" in r["command_line"] and "git_commit" in r
                                              for r in resumes), resumes
    # JSON values, not JSON text inside JSON (plugin_files was a string to decode again)
    assert all(isinstance(r["plugin_files"], dict) and isinstance(r["hosts"], list) for r in resumes), resumes


def test_a_second_ctrl_c_stops_at_once_in_one_line(capsys):
    """The first Ctrl-C asks for a checkpoint at the next epoch boundary; the second raises
    KeyboardInterrupt, which abort_on_exception turns into one line and exit 130 (no traceback).
    In process: two SIGINTs sent to a child within one jitted epoch reach Python as one."""
    from ordersim.backend import abort_on_exception

    stop = StopRequest.__new__(StopRequest)  # its handler, without installing it
    stop.signal_name, stop.announce, stop.interrupts = None, True, 0
    stop._handle(signal.SIGINT, None)
    assert stop.requested and "Ctrl-C again to stop now" in capsys.readouterr().err
    with pytest.raises(SystemExit) as ended:
        abort_on_exception(None, stop._handle, signal.SIGINT, None)
    assert ended.value.code == EXIT_INTERRUPTED == 130
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "interrupted by a second Ctrl-C" in err and "Traceback" not in err, err


def test_resume_after_a_hard_kill_cuts_the_trace_back_to_the_checkpoint(uninterrupted, tmp_path):
    """kill -9 after a periodic checkpoint: epochs written after it are dropped and recomputed. The
    resume checkpoints at another period and spells --out another way (relative to its working
    directory): settings that change no value, so it may."""
    out = tmp_path / "killed.h5"
    command = [sys.executable, "-m", "ordersim", *ARGS, "--checkpoint-every", "3", "--out", str(out)]
    code, _ = stop_after(command, "[cd-grab seed 0] epoch   5/", signal.SIGKILL)
    assert code == -signal.SIGKILL
    assert checkpoint.load(checkpoint.checkpoint_path(str(out)))["position"] == 2  # inside cd-grab seed 0
    respelt = os.path.relpath(out, ROOT)
    result = run_serial([*ARGS, "--checkpoint-every", "2", "--quiet", "--resume", "--out", respelt])
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
    assert code == EXIT_CHECKPOINTED, err
    exchange = ["--exchange", "allgather"] if ranks == 4 else []
    result = subprocess.run(command + ["--resume", "--quiet", *exchange], cwd=ROOT, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert_bitwise_equal(uninterrupted, contents(out))


def test_resume_refuses_a_different_config(tmp_path):
    out = tmp_path / "a.h5"
    command = [sys.executable, "-m", "ordersim", *ARGS, "--out", str(out)]
    code, err = stop_after(command, "epoch   2/", signal.SIGUSR1)
    assert code == EXIT_CHECKPOINTED, err
    result = run_serial([*ARGS, "--lr", "0.01", "--resume", "--out", str(out)])
    assert result.returncode == 2
    assert "lr" in result.stderr and len(result.stderr.strip().splitlines()) == 1


@pytest.mark.mpi
def test_resume_with_another_number_of_ranks_names_the_ranks_not_the_config(tmp_path):
    """Without --workers the rank count also sets the backend and the workers: the one line must say
    how to launch the resume, not that the config differs in those."""
    command = [sys.executable, "-m", "ordersim", *(a for a in ARGS if a not in ("--workers", "4"))]
    launch = {1: [], 2: [mpiexec_path(), "-n", "2"]}
    out = {ranks: str(tmp_path / f"ranks{ranks}.h5") for ranks in launch}
    for ranks in launch:
        code, err = stop_after([*launch[ranks], *command, "--out", out[ranks]], "epoch   2/", signal.SIGUSR1)
        assert code == EXIT_CHECKPOINTED, err
    for written, resumed, how in ((1, 2, "without mpiexec"), (2, 1, "under mpiexec -n 2")):
        result = subprocess.run([*launch[resumed], *command, "--resume", "--out", out[written]], cwd=ROOT,
                                capture_output=True, text=True, timeout=120)
        assert result.returncode == 2, result.stderr
        # ordersim's lines (Open MPI's launcher adds its own report of a non-zero exit)
        lines = {line for line in result.stderr.splitlines() if line.startswith("ordersim:")}
        assert len(lines) == 1, result.stderr
        line = lines.pop()
        assert f"written by {written} rank(s)" in line and how in line and "differs" not in line, line


def test_checkpoint_write_is_atomic(tmp_path, monkeypatch):
    """A failure (or kill) while writing leaves the previous checkpoint whole."""
    path = str(tmp_path / "x.ckpt")
    checkpoint.save(path, {"position": 1})

    def broken_write(group, tree):
        group.create_dataset("half", data=np.zeros(1000))
        raise KeyboardInterrupt("killed mid-write")

    monkeypatch.setattr(checkpoint, "_write_tree", broken_write)
    with pytest.raises(KeyboardInterrupt):
        checkpoint.save(path, {"position": 2, "run_states": [{"x": np.zeros(3)}]})
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


def one_line_refusal(result, *words):
    """The command refused to resume: exit 2, one error line on stderr naming `words` (besides
    warnings about the data, when the refusal comes after loading it), no traceback."""
    assert result.returncode == 2, result.stderr
    lines = [line for line in result.stderr.strip().splitlines() if not line.startswith("ordersim: warning:")]
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    for word in words:
        assert word in lines[0], lines[0]


def test_resume_from_an_unreadable_checkpoint_says_so(tmp_path):
    out = tmp_path / "x.h5"
    out.write_bytes(b"")
    (tmp_path / "x.h5.ckpt").write_bytes(b"not a pickle")
    one_line_refusal(run_serial([*ARGS, "--resume", "--out", str(out)]), "not an ordersim checkpoint")


class RunsCode:
    """What a crafted pickle holds: unpickling it calls open(marker, "w"), creating the marker."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return open, (self.marker, "w")


@pytest.mark.parametrize("ranks", [1, 2])
def test_a_pickled_checkpoint_is_refused_without_being_unpickled(tmp_path, ranks):
    out, marker = tmp_path / "x.h5", tmp_path / "code-ran"
    with open(checkpoint.checkpoint_path(str(out)), "wb") as fh:
        pickle.dump({"position": 0, "x": RunsCode(str(marker))}, fh)
    args = ["-m", "ordersim", *ARGS, "--resume", "--out", str(out)]
    result = run_serial(args[2:]) if ranks == 1 else run_mpi(ranks, args, timeout=120)
    one_line_refusal(result, "is a pickle", "delete it to start over")
    assert not marker.exists()


@pytest.fixture(scope="module")
def stopped(tmp_path_factory):
    """A trace and its checkpoint, stopped by SIGUSR1 inside rr seed 1 (after its epoch 3 or 4)."""
    out = tmp_path_factory.mktemp("stopped") / "s.h5"
    code, err = stop_after([sys.executable, "-m", "ordersim", *ARGS, "--out", str(out)],
                           "[rr seed 1] epoch   3/", signal.SIGUSR1)
    assert code == EXIT_CHECKPOINTED, err
    return out


def copy_of(stopped, tmp_path):
    """A copy of the stopped trace and its checkpoint (whose config names the copy's path)."""
    out, ckpt = tmp_path / "s.h5", checkpoint.checkpoint_path(str(tmp_path / "s.h5"))
    shutil.copy(stopped, out)
    state = checkpoint.load(checkpoint.checkpoint_path(str(stopped)))
    state["config"] = json.dumps(dict(json.loads(state["config"]), out=str(out)))
    checkpoint.save(ckpt, state)
    return out, ckpt


def flip_a_byte_of_x(path):
    with h5py.File(path, "r+") as f:
        f["run_states/0/x"][0] += 1.0


def truncate(path):
    os.truncate(path, os.path.getsize(path) // 2)


def other_hdf5(path):
    with h5py.File(path, "w") as f:
        f.attrs["format"] = "something else"


@pytest.mark.parametrize("damage, words", [
    (flip_a_byte_of_x, "fails its checksum"),
    (truncate, "is unreadable (truncated or damaged"),
    (other_hdf5, "not an ordersim checkpoint"),
])
def test_a_damaged_checkpoint_is_refused_in_one_line(stopped, tmp_path, damage, words):
    out, ckpt = copy_of(stopped, tmp_path)
    before = out.read_bytes()
    damage(ckpt)
    one_line_refusal(run_serial([*ARGS, "--resume", "--out", str(out)]), words)
    assert out.read_bytes() == before  # the trace is left as it was


def test_a_checkpoint_whose_run_state_does_not_fit_is_refused_before_the_trace_changes(stopped, tmp_path):
    """What another version's checkpoint looks like: a valid file whose orderer state has another
    layout (here one more field, and an order of another shape). It is refused (one line, exit 2)
    leaving the trace as it was."""
    out, ckpt = copy_of(stopped, tmp_path)
    state = checkpoint.load(ckpt)
    orderer = state["run_states"][0]["orderer"]
    order = orderer["order"]
    orderer["order"] = order[:, 1:]
    checkpoint.save(ckpt, state)
    before = out.read_bytes()
    one_line_refusal(run_serial([*ARGS, "--resume", "--out", str(out)]), "run state does not fit",
                     "its orderer/order is <i8 array (4, 112), this ordersim's <i8 array (4, 113)")
    orderer["order"], orderer["signs"] = order, np.zeros(3, dtype=np.uint8)
    checkpoint.save(ckpt, state)
    one_line_refusal(run_serial([*ARGS, "--resume", "--out", str(out)]), "run state does not fit",
                     "it holds orderer/signs, which this ordersim's run state lacks")
    assert out.read_bytes() == before


def test_resume_refuses_a_checkpoint_of_another_trace(stopped, tmp_path):
    """A checkpoint put back next to a trace written anew since (its run id differs)."""
    out, ckpt = copy_of(stopped, tmp_path)
    shutil.move(ckpt, tmp_path / "aside")
    code, _ = stop_after([sys.executable, "-m", "ordersim", *ARGS, "--overwrite", "--out", str(out)],
                         "[rr seed 0] epoch   2/", signal.SIGKILL)
    assert code == -signal.SIGKILL
    shutil.move(tmp_path / "aside", ckpt)
    one_line_refusal(run_serial([*ARGS, "--resume", "--out", str(out)]), "run id", "delete it")


def shorten_train_loss(out):
    with h5py.File(out, "r+") as f:
        f["runs/rr/seed_1/train_loss"].resize((2,))


def shorten_steps(out):
    with h5py.File(out, "r+") as f:
        f["runs/rr/seed_1/steps/loss"].resize((1,))


def unfinish_a_run(out):
    with h5py.File(out, "r+") as f:
        f["runs/rr/seed_0"].attrs["status"] = "interrupted"


@pytest.mark.parametrize("change, words", [
    (shorten_train_loss, "rr/seed_1's train_loss has 2 rows in the trace, the checkpoint counted {train_loss}"),
    (shorten_steps, "steps/loss has 1 row in"),
    (unfinish_a_run, "run rr/seed_0 did not finish"),
    (os.remove, "the trace cannot be read"),
])
def test_resume_refuses_a_trace_that_lacks_what_its_checkpoint_counted(stopped, tmp_path, change, words):
    """The stop request is honoured at the end of an epoch, so the checkpoint may count one epoch
    more than the line the signal followed: the expected count is read from the checkpoint."""
    out, ckpt = copy_of(stopped, tmp_path)
    counted = checkpoint.load(ckpt)["lengths"]["train_loss"]
    assert counted > 2  # shortening train_loss to 2 rows takes rows the checkpoint counted
    change(out)
    one_line_refusal(run_serial([*ARGS, "--resume", "--out", str(out)]), words.format(train_loss=counted))


def test_a_fresh_run_deletes_a_stale_checkpoint(uninterrupted, stopped, tmp_path):
    """The same command without --resume after a checkpointed stop writes the trace anew; its
    checkpoint (of the old trace, further on) must not be resumed onto it: it is gone as soon as
    the new trace exists, and --resume after a hard kill starts over and ends bitwise equal."""
    out, ckpt = copy_of(stopped, tmp_path)
    code, _ = stop_after([sys.executable, "-m", "ordersim", *ARGS, "--overwrite", "--out", str(out)],
                         "[rr seed 0] epoch   2/", signal.SIGKILL)
    assert code == -signal.SIGKILL
    assert not os.path.exists(ckpt)
    result = run_serial([*ARGS, "--quiet", "--resume", "--out", str(out)])
    assert result.returncode == 0, result.stderr
    assert_bitwise_equal(uninterrupted, contents(out))


@pytest.mark.parametrize("resume", [["--resume"], []])
def test_a_killed_checkpoint_writes_temporary_file_is_removed_by_the_next_run(stopped, tmp_path, resume):
    out, ckpt = copy_of(stopped, tmp_path)
    leftovers = [tmp_path / f"s.h5.ckpt.tmp-{pid}" for pid in (12345, 99999)]
    for path in leftovers:
        with h5py.File(path, "w") as f:  # what a write killed half way leaves
            f.create_dataset("half", data=np.zeros(10))
    unrelated = tmp_path / "other.h5.ckpt.tmp-12345"
    unrelated.write_bytes(b"")
    result = run_serial([*ARGS, "--quiet", *(resume or ["--overwrite"]), "--out", str(out)])
    assert result.returncode == 0, result.stderr
    assert not any(path.exists() for path in leftovers) and unrelated.exists()


# -- orderers' state: arrays, numbers and strings only ----------------------------------------------
def _orderer_cases():
    for name in sorted(available_orderers()):
        m = 1 if orderer_class(name).centralized_alternatives else 3
        yield pytest.param(name, m, {}, id=name)
        if hasattr(make_orderer(name, 1, 2, 1), "walk_failures"):
            yield pytest.param(name, m, dict(sign="walk", tie="minus"), id=f"{name}-walk")


@pytest.mark.parametrize("name, m, options", list(_orderer_cases()))
def test_every_orderer_resumes_from_a_checkpoint_file_with_identical_orders(tmp_path, name, m, options):
    """Save an orderer's checkpoint_state() after 2 epochs to a real checkpoint file, restore it
    into a fresh orderer made with the same settings, and run both on: identical orders and
    identical state (the walk's failures and peaks included)."""
    n, d, b = 9, 5, 2
    rng = np.random.default_rng(3)
    grads = [rng.standard_normal((m, n, d)) for _ in range(5)]
    settings = (name, m, n, d, 7)
    first = make_orderer(*settings, **options)
    drive(first, grads[:2], b)
    path = str(tmp_path / "o.ckpt")
    checkpoint.save(path, {"position": 0, "run_states": [{"orderer": first.checkpoint_state()}]})
    restored = make_orderer(*settings, **options)
    restored.restore_state(checkpoint.load(path)["run_states"][0]["orderer"])
    want, got = drive(first, grads[2:], b), drive(restored, grads[2:], b)
    for epoch, (g, w) in enumerate(zip(got, want)):
        assert np.array_equal(g, w), f"{name}: epoch {epoch} after the restore differs"
    want, got = (checkpoint.normalized(o.checkpoint_state()) for o in (first, restored))
    assert checkpoint.layout_mismatch(got, want) is None
    for key, value in want.items():
        same = np.array_equal(value, got[key]) if isinstance(value, np.ndarray) else value == got[key]
        assert same, f"{name}: {key} differs after the restore"


def test_an_orderer_state_that_is_not_arrays_numbers_and_strings_cannot_be_saved(tmp_path):
    """A checkpoint stores no objects (that would need pickle): an orderer keeping, say, a list
    makes saving fail, naming the attribute."""
    orderer = make_orderer("d-grab", 2, 4, 3)
    orderer.history_of_orders = [orderer.order.copy()]
    path = str(tmp_path / "o.ckpt")
    with pytest.raises(checkpoint.CheckpointError, match=r"run_states/0/orderer/history_of_orders is a list"):
        checkpoint.save(path, {"run_states": [{"orderer": orderer.checkpoint_state()}]})
    assert not os.path.exists(path) and os.listdir(tmp_path) == []


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
    assert proc.returncode == EXIT_CHECKPOINTED and repeats > 1
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
    assert proc.returncode == EXIT_CHECKPOINTED, stderr
    stopped = [line for line in stderr.splitlines() if "stopped by SIGTERM" in line]
    assert len(stopped) == 1 and "during the set-up" in stopped[0], stderr
    assert "--resume starts from the beginning" in stopped[0]
    assert not out.exists() and not os.path.exists(checkpoint.checkpoint_path(str(out)))


def test_the_handlers_are_installed_before_numpy_and_the_other_heavy_imports():
    """`run` must catch the signals before anything slow is imported: importing NumPy (through
    ordersim.checkpoint) took about 0.1 s here, and seconds from a cold network file system, and a
    SIGTERM then killed the run (exit -15) where it should stop it (exit 3)."""
    code = textwrap.dedent("""
        import signal, sys
        real, seen = signal.signal, []
        def spy(sig, handler):
            if sig == signal.SIGTERM and not seen:
                seen.append(sorted(m for m in ("numpy", "numba", "h5py", "mpi4py", "tomllib") if m in sys.modules))
            return real(sig, handler)
        signal.signal = spy
        from ordersim.cli import main
        try:
            main(["run", "--help"])
        except SystemExit:
            pass
        print("heavy modules when the handlers were installed:", seen[0] if seen else "never installed")
    """)
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                            timeout=120)
    assert result.stdout.splitlines()[-1].endswith(": []"), result.stdout[-500:] + result.stderr


SLOW_PROBLEM = textwrap.dedent('''
    import time

    from ordersim.problems.logistic import Logistic

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
    assert code == EXIT_CHECKPOINTED, err
    assert "stopped by SIGUSR1 during the set-up (opening the data and building the problem)" in err
    assert not out.exists() and not os.path.exists(checkpoint.checkpoint_path(str(out)))


def test_a_closed_stdout_stops_the_run_with_a_checkpoint(uninterrupted, tmp_path):
    """`python -m ordersim ... | head -1`: the reader goes away after one line; the run stops at
    the next epoch boundary (exit 3, no BrokenPipeError traceback) and --resume finishes it."""
    out = tmp_path / "piped.h5"
    proc = subprocess.Popen([sys.executable, "-m", "ordersim", *ARGS, "--out", str(out)], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout.readline()
    proc.stdout.close()
    err = proc.stderr.read()
    assert proc.wait(timeout=300) == EXIT_CHECKPOINTED, err
    assert "Traceback" not in err and "standard output closed" in err, err
    result = run_serial([*ARGS, "--quiet", "--resume", "--out", str(out)])
    assert result.returncode == 0, result.stderr
    assert_bitwise_equal(uninterrupted, contents(out))


SIGNAL_IN_LAST_EPOCH = textwrap.dedent('''
    import os
    import signal

    from ordersim.measurements.base import Measurement
    from ordersim.trace_schema import Dataset


    class SignalAt(Measurement):
        """Sends SIGUSR1 to its own process when rank SIGNAL_RANK measures epoch SIGNAL_EPOCH: a
        signal at an exact point of the run (the warm-up measures epoch 1 only)."""
        name = "signal-at"
        description = "test: SIGUSR1 at a chosen epoch"
        datasets = (Dataset("signalled", "float64", "(T,)", "test", "1 in the epoch signalled"),)

        def measure(self, view):
            hit = view.epoch == int(os.environ["SIGNAL_EPOCH"])
            if hit and view.backend.rank == int(os.environ["SIGNAL_RANK"]):
                os.kill(os.getpid(), signal.SIGUSR1)
            return {"signalled": float(hit)}
''')


@pytest.mark.parametrize("ranks", [1, pytest.param(2, marks=pytest.mark.mpi), pytest.param(4, marks=pytest.mark.mpi)])
def test_a_signal_in_the_last_epoch_finishes_the_job(tmp_path, ranks):
    """SIGUSR1 during the last epoch of the last run (on the last rank alone under MPI): every epoch is
    done, so the job finishes (exit 0, end_time, no checkpoint) instead of stopping with a
    checkpoint that only a requeued job would close."""
    plugin = tmp_path / "signal_at.py"
    plugin.write_text(SIGNAL_IN_LAST_EPOCH)
    out = tmp_path / "last.h5"
    args = ["--epochs", "3", "--orderers", "rr", "--seeds", "0", "--workers", "4", "--quiet",
            "--measurements", str(plugin), "--out", str(out)]
    env = dict(SIGNAL_EPOCH="3", SIGNAL_RANK=str(ranks - 1))
    result = (run_serial(args, env=env) if ranks == 1
              else run_mpi(ranks, ["-m", "ordersim", *args], env=env))
    assert result.returncode == 0, result.stderr
    assert not os.path.exists(checkpoint.checkpoint_path(str(out)))
    with h5py.File(out, "r") as f:
        run = f["runs/rr/seed_0"]
        assert "end_time" in f.attrs and run.attrs["status"] == "completed"
        assert list(run["signalled"][()]) == [0, 0, 0, 1]  # epochs 0..3: the signal came in epoch 3
