"""ordersim/cli.py: the command dispatch."""

import pytest

from conftest import run_mpi


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
