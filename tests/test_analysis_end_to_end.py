"""Every analysis script on traces that the simulator and herding-sim write here (the synthetic
traces of test_analysis.py pin the layout; these pin that the real writer matches it)."""

import h5py
import numpy as np
import pytest

pytest.importorskip("matplotlib")
pytest.importorskip("pandas")

from ordersim.analysis import convergence, fit, herding, herding_sim, scaling, stragglers  # noqa: E402
from ordersim.analysis.load import load_orders, load_runs, load_steps  # noqa: E402
from test_analysis import written  # noqa: E402
from test_simulator import run_serial  # noqa: E402


@pytest.fixture(scope="module")
def sweep_over_m(tmp_path_factory):
    """A sweep over m at fixed n = 16 per worker, as `reproduce scaling` runs (one sweep cell a file)."""
    out = tmp_path_factory.mktemp("scaling")
    config = out / "scaling.toml"
    config.write_text(
        'problem = "least-squares"\nproblem_options = { lam = 0.1 }\ntest_fraction = 0.0\n'
        'orderers = ["rr", "cd-grab"]\nseeds = [0, 1]\nepochs = 4\nlr = 0.05\nquiet = true\n'
        f'out = "{out / "cells"}"\n'
        '[sweep]\nworkers = [1, 2, 4]\n')
    for cell, m in enumerate((1, 2, 4)):  # the data grows with m: a flag overrides the cell's
        result = run_serial(["run", str(config), "--cell", str(cell), "--data",
                             f"synthetic:regression?n={16 * m}&d=3"])
        assert result.returncode == 0, result.stderr
    return sorted(str(p) for p in (out / "cells").glob("cell_*.h5"))


def test_loader_reads_simulator_traces(sweep_over_m):
    table = load_runs(sweep_over_m)
    assert set(table.orderer) == {"rr", "cd-grab"} and set(table.workers) == {1, 2, 4}
    assert (table.status == "completed").all() and table.suboptimality.notna().all()
    assert table.groupby(["file", "orderer", "seed"]).ngroups == 12


def test_every_script_runs_on_simulator_traces(sweep_over_m, tmp_path, capsys):
    assert convergence.main([*sweep_over_m, "--out", str(tmp_path), "--dpi", "60"]) == 0
    assert herding.main([*sweep_over_m, "--out", str(tmp_path), "--dpi", "60"]) == 0
    assert scaling.main([*sweep_over_m, "--out", str(tmp_path), "--dpi", "60"]) == 0
    written(tmp_path, "convergence_epochs", "convergence_time", "herding_epochs", "scaling")
    assert fit.main(sweep_over_m) == 0
    assert "cd-grab" in capsys.readouterr().out


def test_herding_sim_figure_from_the_command(tmp_path):
    out = tmp_path / "hs.h5"
    result = run_serial(["herding-sim", "--workers", "2", "4", "--total", "400", "--rounds", "3",
                         "--quiet", "--out", str(out)])
    assert result.returncode == 0, result.stderr
    assert herding_sim.main([str(out), "--out", str(tmp_path), "--dpi", "60"]) == 0
    written(tmp_path, "herding_sim")


def test_steps_and_orders_of_a_run_that_did_not_complete_stop_at_its_confirmed_epochs(tmp_path):
    """load_steps and load_orders give what the simulator wrote; of a run that did not complete,
    the rows of its epochs_completed epochs only. The finished trace is made that of a run killed
    during epoch 2 (status interrupted, epochs_completed 1, and one more row of each traced-step
    dataset, which reads as zeros as a row the kill left unwritten does)."""
    out = tmp_path / "steps.h5"
    result = run_serial(["--orderers", "rr", "--seeds", "0", "--epochs", "2", "--workers", "4",
                         "--trace-every", "7", "--stragglers", "shifted-exp", "--coding", "gc-fr",
                         "--coding-s", "1", "--record-orders", "--quiet", "--out", str(out)])
    assert result.returncode == 0, result.stderr
    with h5py.File(out) as f:
        run = f["runs/rr/seed_0"]
        written = {f"{group}/{name}": ds[()] for group in ("steps", "stragglers") for name, ds in run[group].items()}
        orders = run["orders"][()]
        steps_per_epoch = -(-int(run.attrs["examples_per_worker"]) // int(run.attrs["batch"]))
    assert {"steps/loss", "stragglers/step_time", "stragglers/responded", "stragglers/coverage_min"} <= set(written)
    steps = load_steps(out, "rr", 0)
    assert steps.keys() == written.keys()
    for name, values in written.items():
        np.testing.assert_array_equal(steps[name], values)
    np.testing.assert_array_equal(load_orders(out, "rr", 0), orders)

    with h5py.File(out, "r+") as f:
        run = f["runs/rr/seed_0"]
        run.attrs["status"], run.attrs["epochs_completed"] = "interrupted", 1
        for name in ("steps/epoch", "steps/step", "steps/loss"):
            run[name].resize(len(run[name]) + 1, axis=0)
    steps = load_steps(out, "rr", 0)
    first = written["steps/epoch"] == 1
    for name in ("steps/epoch", "steps/step", "steps/loss"):
        np.testing.assert_array_equal(steps[name], written[name][first])
    for name in ("stragglers/step_time", "stragglers/responded"):
        np.testing.assert_array_equal(steps[name], written[name][:steps_per_epoch])
    np.testing.assert_array_equal(steps["stragglers/coverage_min"], written["stragglers/coverage_min"][:1])
    np.testing.assert_array_equal(load_orders(out, "rr", 0), orders[:2])
    only = load_steps(out, "rr", 0, names=["stragglers/step_time"])
    assert list(only) == ["stragglers/step_time"]
    np.testing.assert_array_equal(only["stragglers/step_time"], steps["stragglers/step_time"])
    (times,) = stragglers.step_times([out]).itertuples()  # the script's step-time panel and table
    assert times.steps == steps_per_epoch
    assert times.step_time == written["stragglers/step_time"][:steps_per_epoch].mean()
