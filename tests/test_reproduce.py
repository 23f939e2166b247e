"""The papers' experiments (runs/papers/) and the scaling experiment (runs/scaling.toml),
`python -m ordersim reproduce`: the [quick] tables, every experiment run at its quick size with the
claims that size can show checked, and the README's scaling table against its claims."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ordersim.analysis.reproduce import CONFIGS, EXPERIMENTS, SCALING_GRIDS, config_path
from ordersim.config import ConfigError
from ordersim.sweep import config_cells

ROOT = Path(__file__).resolve().parents[1]


def write(tmp_path, text):
    path = tmp_path / "c.toml"
    path.write_text(text)
    return str(path)


def test_quick_table_sets_fields_and_replaces_the_sweep_axes_it_names(tmp_path):
    path = write(tmp_path, 'epochs = 30\nout = "r/x"\n[sweep]\nworkers = [4, 8, 16]\nlr = [0.1, 0.2]\n'
                           '[quick]\nepochs = 2\nsweep = { workers = [4] }\n')
    full = config_cells(path)
    assert len(full) == 6 and full[0][0]["epochs"] == 30
    quick = config_cells(path, quick=True)
    assert [(v["epochs"], v["workers"], v["lr"]) for v, _ in quick] == [(2, 4, 0.1), (2, 4, 0.2)]
    assert quick[0][1].sweep == {"workers": [4], "lr": [0.1, 0.2]}
    assert config_cells(path, {"epochs": 5}, quick=True)[0][0]["epochs"] == 5  # flags win


@pytest.mark.parametrize("text, pattern", [
    ("epochs = 3\n", "has no \\[quick\\] table"),
    ("epochs = 3\n[quick]\nepoch = 2\n", "\\[quick\\] field\\(s\\) epoch unknown"),
])
def test_bad_quick_tables(tmp_path, text, pattern):
    with pytest.raises(ConfigError, match=pattern):
        config_cells(write(tmp_path, text), quick=True)


def test_every_experiment_has_a_config_that_names_its_paper_and_quick_size():
    for name in EXPERIMENTS:
        text = config_path(name).read_text()
        assert "[quick]" in text and "Differs from the paper" in text and "Paper scale" in text, name
        assert "arXiv" in text or name == "scaling", name  # scaling tests the papers' rates on synthetic data
    assert config_path("grab_mnist").parent == CONFIGS


def test_scaling_grids_share_a_cell_between_the_two_sweeps():
    """The n-sweep's cell at n = examples is the m-sweep's cell (one run, as in the README's grid)."""
    for grid in SCALING_GRIDS.values():
        cells = grid.cells()
        assert len(cells) == len(set(cells)) == len(grid.workers) + len(grid.examples_sweep)
        assert (grid.workers_for_n, grid.examples) in cells and grid.workers_for_n in grid.workers


@pytest.mark.slow
def test_reproduce_quick_runs_every_experiment_and_its_checkable_claims_hold(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, "-m", "ordersim", "reproduce", "--quick", "--results",
                           str(tmp_path / "traces"), "--figures", str(tmp_path / "figures")],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = (tmp_path / "figures" / "verdicts.txt").read_text().splitlines()
    assert [line.split(":")[0] for line in lines] == list(EXPERIMENTS)
    for name, line in zip(EXPERIMENTS, lines):
        assert (tmp_path / "figures" / f"{name}.png").stat().st_size > 10_000
        assert line in done.stdout
        want = ": shown (quick size)" if EXPERIMENTS[name].quick_shows else ": not checked (quick size)"
        assert want in line, line
    # the scaling fit table, as analysis.fit prints it, for the README
    table = (tmp_path / "figures" / "scaling.txt").read_text()
    assert table.startswith("code: ") and "variable orderer" in table
    assert {(r.variable, r.orderer) for r in fit_rows(table).itertuples()} == {
        (v, o) for v in "mn" for o in ("rr", "cd-grab")}


def fit_rows(text):
    """The rows of an analysis.fit table (its printed text) as a DataFrame."""
    import pandas as pd

    row = re.compile(r"^\s*(m|n)\s+(\S+)\s+(\d+)\s+(\d+)\s+([+-][\d.]+)\s+\[([+-][\d.]+), ([+-][\d.]+)\]"
                     r"\s+(\S+)\s+(\S+)\s+(.+?)\s*$")
    rows = [m.groups() for m in map(row.match, text.splitlines()) if m]
    df = pd.DataFrame(rows, columns=["variable", "orderer", "cells", "draws", "exponent", "ci_low", "ci_high",
                                     "theory", "agree", "floor"])
    return df.astype({c: float for c in ("exponent", "ci_low", "ci_high")})


def test_readme_scaling_table_is_the_committed_output_and_bears_out_its_claims():
    """The README's table is docs/figures/papers/scaling.txt (what `python -m ordersim reproduce
    scaling --figures docs/figures/papers` wrote), and the README's claims hold on it: the same
    check (`scaling_shown`) as the verdict line. A re-run that changes the table must update both."""
    pytest.importorskip("pandas")
    from ordersim.analysis.reproduce import scaling_shown

    readme = (ROOT / "README.md").read_text()
    written = (ROOT / "docs" / "figures" / "papers" / "scaling.txt").read_text().strip()
    assert f"```\n{written}\n```" in readme
    rows = fit_rows(written)
    assert len(rows) == 6 and set(rows.orderer) == {"rr", "d-grab", "cd-grab"}
    assert scaling_shown(rows)
    # and the check fails on a table where rr's interval misses D-RR's -1
    broken = rows.copy()
    broken.loc[(broken.variable == "m") & (broken.orderer == "rr"), "ci_low"] = -0.9
    assert not scaling_shown(broken)


def test_an_unknown_experiment_is_refused_before_anything_runs(capsys):
    from ordersim.analysis.reproduce import main

    assert main(["grab_mnist", "nosuch"]) == 2
    assert "unknown experiment(s) nosuch; known: scaling, grab_mnist, cdgrab_logreg" in capsys.readouterr().err


def test_no_run_without_the_traces_says_which_and_how_to_make_them(tmp_path, capsys):
    """--no-run draws from traces already written; where they are missing, one line names one
    and the command that writes them (exit 2), before any figure, never h5py's traceback."""
    from ordersim.analysis.reproduce import main

    results, figures = tmp_path / "results", tmp_path / "figures"
    assert main(["herding", "scaling", "--quick", "--no-run", "--results", str(results),
                 "--figures", str(figures)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("reproduce: error: --no-run: 1 of the 1 trace(s) of herding "
                                               f"are not there (e.g. {results}"), err
    assert err[0].endswith(f"run `python -m ordersim reproduce herding --quick --results {results}` first")
    assert not figures.exists()


def test_inside_the_regime_cd_grabs_slope_in_m_is_still_steeper_than_rrs(tmp_path):
    """README, "Regime": the scaling command at a T long enough for alpha L_max n <= 1 in every run
    (T = 200), at a small size (m = 1, 4, 16 at n = 32, d = 5, 3 draws): every run is inside the
    regime, and cd-grab's slope in m is still below rr's, the intervals apart (measured: cd-grab
    -2.44 [-3.01, -1.86], rr -0.88 [-1.48, -0.28])."""
    pytest.importorskip("pandas")
    import h5py

    from ordersim.analysis import fit, style

    files = []
    for m in (1, 4, 16):
        out = tmp_path / f"m{m}"
        result = subprocess.run([sys.executable, "-m", "ordersim", "run", str(config_path("scaling")),
                                 "--workers", str(m), "--epochs", "200", "--measure-every", "200",
                                 "--orderers", "rr", "cd-grab", "--data",
                                 f"synthetic:regression?n={m * 32}&d=5&cond=10&noise=0.5", "--out", str(out)],
                                cwd=ROOT, capture_output=True, text=True, timeout=300)
        assert result.returncode == 0 and "outside the regime" not in result.stderr, result.stderr
        files += sorted(out.glob("*.h5"))
    for path in files:
        with h5py.File(path) as f:
            assert all(run.attrs["in_regime"] for seeds in f["runs"].values() for run in seeds.values())
    rows = fit.table(style.load(files))[0].set_index("orderer")
    assert rows.ci_high["cd-grab"] < rows.ci_low["rr"], rows
