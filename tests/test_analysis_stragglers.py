"""Loss against simulated time (analysis.convergence --x sim_time) and time per step against s
(analysis.stragglers), on small traces the simulator writes here."""

import pytest

pytest.importorskip("matplotlib")
pytest.importorskip("pandas")

from ordersim.analysis import convergence, stragglers  # noqa: E402
from test_analysis import written  # noqa: E402
from test_simulator import run_serial  # noqa: E402

COMMON = ["--problem", "least-squares", "--data", "synthetic:regression?n=96&d=3", "--test-fraction", "0",
          "--workers", "4", "--batch", "4", "--epochs", "2", "--seeds", "0", "1", "--orderers", "rr",
          "cd-grab", "--no-herding", "--quiet", "--stragglers", "shifted-exp"]


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    out = tmp_path_factory.mktemp("stragglers")
    paths = []
    for coding, s in (("wait-all", 1), ("ignore-stragglers", 1), ("pgc-fr", 1), ("gc-cr", 1), ("pgc-cr", 1),
                      ("pgc-cr", 2), ("gc-cr", 2), ("ignore-stragglers", 3), ("pgc-cr-exact", 1)):
        path = out / f"{coding}_{s}.h5"
        result = run_serial([*COMMON, "--coding", coding, "--coding-s", str(s), "--out", str(path)])
        assert result.returncode == 0, result.stderr
        paths.append(str(path))
    return paths


@pytest.fixture(scope="module")
def plain(tmp_path_factory):
    """A trace of the same runs without a straggler model (no sim_time, no coding attributes)."""
    path = tmp_path_factory.mktemp("plain") / "plain.h5"
    result = run_serial([*COMMON[:-2], "--out", str(path)])
    assert result.returncode == 0, result.stderr
    return str(path)


def test_convergence_against_simulated_time(traces, tmp_path):
    assert convergence.main([*traces, "--out", str(tmp_path), "--x", "sim_time", "--dpi", "60"]) == 0
    written(tmp_path, "convergence_sim_time")
    assert not (tmp_path / "convergence_epochs.png").exists()


def test_convergence_sim_time_needs_straggler_traces(plain, tmp_path, capsys):
    """An option value the files cannot have (--x sim_time without a straggler run, --metrics none
    of which the files hold) is argparse's one-line error, exit 2, as documented (it was exit 1)."""
    for option, why in ((["--x", "sim_time"], "argument --x: 'sim_time' is not allowed; allowed: epochs, time"),
                        (["--metrics", "test_accuracy", "test_loss"],
                         "argument --metrics: 'test_accuracy', 'test_loss' not in the files; allowed: the "
                         "metrics they have: train_loss, suboptimality, grad_norm")):
        with pytest.raises(SystemExit) as stop:
            convergence.main([plain, "--out", str(tmp_path), *option])
        assert stop.value.code == 2
        assert f"python -m ordersim.analysis.convergence: error: {why}" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())
    assert convergence.main([plain, "--out", str(tmp_path), "--dpi", "60"]) == 0  # default: no sim_time
    assert not (tmp_path / "convergence_sim_time.png").exists()


def test_convergence_draws_plain_and_straggler_runs_together(plain, traces, tmp_path):
    """A plain run has no coding, s or sim_time (NaN in its rows): that raised a ValueError (NaN !=
    NaN, so its configuration was not found). Against epochs it is a line of its own, "none" on the
    grey scale; against simulated time only the straggler runs are drawn, the caption says so."""
    import matplotlib.pyplot as plt

    files = [plain, traces[0]]  # traces[0]: wait-all
    assert convergence.main([*files, "--out", str(tmp_path), "--dpi", "60"]) == 0
    written(tmp_path, "convergence_epochs", "convergence_time", "convergence_sim_time")
    figs = convergence.figures(stragglers.style.load(files))
    for name, lines_per_orderer in (("convergence_epochs", 2), ("convergence_sim_time", 1)):
        fig = figs[name]
        first = fig.axes[0]
        drawn = [line.get_label() for line in first.get_lines() if line.get_gid() == "orderer-line"]
        assert sorted(drawn) == sorted(["rr", "cd-grab"] * lines_per_orderer), name
    (bar,) = [ax for ax in figs["convergence_epochs"].axes if ax.get_label() == "<colorbar>"]
    assert [t.get_text().replace("\n", " ") for t in bar.get_yticklabels()] == [  # wrapped at 32 characters
        "wait-all, s=0, stragglers=shifted-exp", "none, s=none, stragglers=none"]
    assert not [ax for ax in figs["convergence_sim_time"].axes if ax.get_label() == "<colorbar>"]
    caption = next(t.get_text() for t in figs["convergence_sim_time"].texts if t.get_gid() == "caption")
    assert "4 run(s) without a straggler model (no simulated time) not drawn" in caption.replace("\n", " ")
    plt.close("all")


def test_convergence_sim_time_leaves_out_a_metric_only_plain_runs_have(traces, tmp_path):
    """A plain run with a test split beside straggler runs without one: the simulated-time figure
    drew an empty log-scaled test_loss panel, which raised in matplotlib (a traceback, nothing
    written); it has the panels of the runs it draws."""
    import matplotlib.pyplot as plt

    path = tmp_path / "plain_test.h5"
    result = run_serial([*COMMON[:-2], "--test-fraction", "0.25", "--out", str(path)])
    assert result.returncode == 0, result.stderr
    files = [str(path), traces[0]]
    figs = convergence.figures(stragglers.style.load(files), names=("train_loss", "test_loss"))
    panels = {name: [ax.get_ylabel() for ax in fig.axes if ax.get_ylabel() and ax.get_label() != "<colorbar>"]
              for name, fig in figs.items()}
    assert panels["convergence_epochs"] == [convergence.LABELS[m][0] for m in ("train_loss", "test_loss")]
    assert panels["convergence_sim_time"] == [convergence.LABELS["train_loss"][0]]
    plt.close("all")


def test_stragglers_script(traces, tmp_path, capsys):
    assert stragglers.main([*traces, "--out", str(tmp_path), "--dpi", "60"]) == 0
    written(tmp_path, "stragglers")
    out = capsys.readouterr().out
    assert "pgc-cr" in out and "wait-all" in out
    summary = stragglers.table(stragglers.step_times(traces))
    by = summary.set_index(["coding", "coding_s"])["mean"]
    # GC computes s+1 partitions per worker per step: slower than pipelined GC at the same s
    assert by[("gc-cr", 1)] > by[("pgc-cr", 1)] and by[("gc-cr", 2)] > by[("pgc-cr", 2)]
    assert by[("ignore-stragglers", 3)] < by[("wait-all", 0)]
    # the final table: one row per (lr, coding, s, orderer), the last epoch's mean over the seeds
    df = stragglers.style.load(traces)
    final = stragglers.finals(df, "train_loss", target=float("inf"))
    assert len(final) == 9 * 2 and set(final.orderer) == {"rr", "cd-grab"}
    row = final[(final.coding == "pgc-cr") & (final.coding_s == 2) & (final.orderer == "rr")].iloc[0]
    runs = df[(df.coding == "pgc-cr") & (df.coding_s == 2) & (df.orderer == "rr")]
    last = runs[runs.epoch == runs.epoch.max()].train_loss
    assert row.final == pytest.approx(last.mean()) and row.final_min == last.min()
    assert row.time_to_target == 0.0  # every run starts below an infinite target
    assert stragglers.main([*traces, "--out", str(tmp_path / "one"), "--orderers", "cd-grab",
                            "--metric", "train_loss", "--dpi", "60"]) == 0
    written(tmp_path / "one", "stragglers")


def test_stragglers_refuses_an_orderer_not_in_the_files_in_one_line(traces, tmp_path, capsys):
    """--orderers bogus left no run to draw: matplotlib's traceback (a grid of 0 rows)."""
    for names, bad in ((["bogus"], "'bogus' is"), (["rr", "grab", "x"], "'grab', 'x' are")):
        with pytest.raises(SystemExit) as stop:
            stragglers.main([*traces[:2], "--out", str(tmp_path / "figures"), "--orderers", *names])
        assert stop.value.code == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith(
            f"python -m ordersim.analysis.stragglers: error: argument --orderers: {bad} not allowed; allowed: "
            "the orderers of the runs with a straggler model: rr, cd-grab"), err
    assert not (tmp_path / "figures").exists()


def test_stragglers_figure_has_one_legend_per_meaning_and_shared_ranges(traces):
    import matplotlib.colors
    import matplotlib.pyplot as plt

    fig, _ = stragglers.draw(stragglers.style.load(traces), stragglers.step_times(traces))
    schemes, orderers = ([t.get_text() for t in legend.get_texts()] for legend in fig.legends)
    assert schemes == [c for c in stragglers.SCHEMES if c not in ("gc-fr", "pgc-fr-staggered")]  # those traced
    assert orderers == ["rr", "cd-grab"]
    assert "coding" in fig.legends[0].get_title().get_text() and "orderer" in fig.legends[1].get_title().get_text()
    # the orderer is the line style and marker it has in every figure; the scheme the colour
    panels = [ax for ax in fig.axes if ax.get_visible() and ax.get_xlabel() == "simulated time (s)"]
    assert len(panels) == 3  # s = 1, 2, 3
    rr = [ln for ax in panels for ln in ax.get_lines() if ln.get_gid() == "orderer-line" and ln.get_label() == "rr"]
    assert {(ln.get_linestyle(), ln.get_marker()) for ln in rr} == {("--", "o")}
    assert {matplotlib.colors.to_hex(ln.get_color()) for ln in rr} <= {
        matplotlib.colors.to_hex(c) for c in stragglers.SCHEME_COLORS.values()}
    # the panels compared across s share their y and x ranges
    assert len({ax.get_ylim() for ax in panels}) == 1 and len({ax.get_xlim() for ax in panels}) == 1
    plt.close(fig)


def test_stragglers_tables_say_what_they_hold(traces, tmp_path, capsys):
    assert stragglers.main([*traces, "--out", str(tmp_path), "--dpi", "40", "--target", "0.5"]) == 0
    lines = capsys.readouterr().out.splitlines()
    (steps,) = [i for i, line in enumerate(lines) if line == stragglers.TABLE_TITLE]
    assert "simulated seconds per step" in lines[steps] and lines[steps + 1].split()[:2] == ["coding", "coding_s"]
    (final,) = [i for i, line in enumerate(lines) if line == stragglers.finals_title("suboptimality", 0.5)]
    assert "f - f*" in lines[final] and "<= 0.5" in lines[final] and "NaN" in lines[final]
    assert lines[final + 1].split()[:4] == ["lr", "coding", "coding_s", "orderer"]


def test_step_time_panel_shows_every_scheme_and_labels_wait_all(traces):
    """Schemes with the same time per step (the pipelined ones, often ignore-stragglers too): their
    markers must not fall on one another; the black line is named."""
    import matplotlib.pyplot as plt

    fig, summary = stragglers.draw(stragglers.style.load(traces), stragglers.step_times(traces))
    (ax,) = [a for a in fig.axes if a.get_ylabel() == "simulated time per step (s)"]
    coded = summary[summary.coding != "wait-all"]
    assert coded.duplicated(["coding_s", "mean"]).any()  # some schemes do coincide (pgc-fr and pgc-cr at s = 1)
    points = [(x, y) for line in ax.get_lines() if line.get_marker() == "o"
              for x, y in zip(line.get_xdata(), line.get_ydata())]
    assert len(points) == len(coded) == len(set(points))
    (wait_all,) = [line for line in ax.get_lines() if line.get_gid() == "wait-all"]
    assert any(t.get_text() == "wait-all" for t in ax.texts)
    plt.close(fig)


@pytest.mark.parametrize("width, beside", [(6.5, False), (13.0, True)])
def test_step_time_panel_is_beside_the_first_row_or_in_a_row_of_its_own_under_all(traces, monkeypatch,
                                                                                 width, beside):
    """At the default 6.5 in, 3 panels of s and the step-time panel do not fit in a row: the
    step-time panel wrapped between the two step sizes' rows. Now it is under them, or beside the
    first row when the width holds it."""
    import matplotlib.pyplot as plt

    monkeypatch.setattr(stragglers.style, "WIDTH", width)
    fig, _ = stragglers.draw(stragglers.style.load(traces), stragglers.step_times(traces))
    rows = {}
    for ax in fig.axes:
        if ax.get_subplotspec() is not None:
            rows.setdefault(ax.get_subplotspec().rowspan.start, []).append(ax)
    (time_ax,) = [a for a in fig.axes if a.get_ylabel() == "simulated time per step (s)"]
    last = max(rows)
    if beside:
        assert list(rows) == [0] and rows[0][-1] is time_ax and len(rows[0]) == 4
    else:
        assert rows[last] == [time_ax] and all(time_ax not in axes for row, axes in rows.items() if row != last)
        assert [len(rows[row]) for row in sorted(rows)[:-1]] == [3]
    plt.close(fig)
