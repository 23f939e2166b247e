"""ordersim/cli.py: the command dispatch."""

import os
import subprocess
import sys

import pytest

from conftest import ROOT, run_mpi
from ordersim.cli import COMMANDS


def ordersim(args, cwd):
    return subprocess.run([sys.executable, "-m", "ordersim", *args], capture_output=True, text=True,
                          timeout=120, cwd=cwd, env=dict(os.environ, PYTHONPATH=str(ROOT)))


@pytest.mark.parametrize("command", list(COMMANDS))
def test_every_command_has_help_and_refuses_a_misspelled_option_in_one_line(command, tmp_path):
    """`orderers --help` printed the listing (and `orderers --bogus` was ignored); sweep and warm,
    which take every config flag, printed 35 lines of usage above the error: now --help explains
    each command and a misspelled option is one line naming it, exit 2, as for `run`; so is an
    abbreviated one (argparse read `--hel` as --help)."""
    prog = f"python -m ordersim {'[run]' if command == 'run' else command}"
    result = ordersim([command, "--help"], cwd=tmp_path)
    assert result.returncode == 0 and result.stdout.startswith(f"usage: {prog} "), result.stdout
    required = {"sweep": ["sweep.toml"], "merge": ["cell.h5", "--out", "table.csv"]}.get(command, [])
    result = ordersim([command, *required, "--bogus"], cwd=tmp_path)
    assert result.returncode == 2 and result.stdout == ""
    [line] = result.stderr.splitlines()
    assert line.startswith(f"{prog}: error: unrecognized arguments: --bogus"), line
    assert line.endswith("(--help explains every option)")
    result = ordersim([command, *required, "--hel"], cwd=tmp_path)  # an abbreviation is no option either
    assert result.returncode == 2 and result.stderr.startswith(f"{prog}: error: unrecognized arguments: --hel")
    assert not list(tmp_path.iterdir())


@pytest.mark.mpi
@pytest.mark.parametrize("ranks", [2, 4])
@pytest.mark.parametrize("command", ["herding-sim", "merge", "sweep"])
def test_a_one_process_command_under_several_ranks_is_refused_in_one_line(command, ranks, tmp_path):
    """Every rank would run it and race for the same --out: one line from rank 0, exit 2 on all
    ranks, nothing written."""
    out = tmp_path / "out.h5"
    result = run_mpi(ranks, ["-m", "ordersim", command, "--out", str(out)], timeout=60, cwd=tmp_path)
    assert result.returncode == 2
    ours = [line for line in result.stderr.splitlines() if line.startswith("ordersim: error:")]
    assert ours == [f"ordersim: error: {command} runs in one process, not under a launcher with {ranks} "
                    f"ranks; allowed: `python -m ordersim {command} ...` alone (or mpiexec -n 1)"], result.stderr
    assert not list(tmp_path.iterdir())


@pytest.mark.mpi
def test_a_one_process_command_runs_under_one_rank(tmp_path):
    out = tmp_path / "herding.h5"
    result = run_mpi(1, ["-m", "ordersim", "herding-sim", "--workers", "2", "--total", "64", "--dim", "4",
                         "--rounds", "1", "--out", str(out)], timeout=120, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert out.exists()


@pytest.mark.parametrize("command", [["orderers"], ["sweep", str(ROOT / "runs" / "stragglers.toml")]])
def test_a_listing_piped_into_a_reader_that_stops_early_ends_without_a_traceback(command, tmp_path):
    """`python -m ordersim sweep CONFIG | head` ended in a BrokenPipeError traceback."""
    process = subprocess.Popen([sys.executable, "-m", "ordersim", *command], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, cwd=tmp_path,
                               env=dict(os.environ, PYTHONPATH=str(ROOT)))
    process.stdout.close()  # before the command writes: every write finds the pipe closed
    stderr = process.stderr.read()
    assert process.wait(timeout=120) == 1 and stderr == ""
