"""The papers' experiments (runs/papers/, `python -m ordersim reproduce`): the [quick] tables, and
every experiment run at its quick size with the claims that size can show checked."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ordersim.analysis.reproduce import CONFIGS, EXPERIMENTS
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
        text = (CONFIGS / f"{name}.toml").read_text()
        assert "[quick]" in text and "arXiv" in text and "Differs from the paper" in text, name
        assert "Paper scale" in text, name


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


def test_an_unknown_experiment_is_refused_before_anything_runs(capsys):
    from ordersim.analysis.reproduce import main

    assert main(["grab_mnist", "nosuch"]) == 2
    assert "unknown experiment(s) nosuch; known: grab_mnist, cdgrab_logreg" in capsys.readouterr().err
