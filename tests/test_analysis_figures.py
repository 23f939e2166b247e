"""What a reader of the figures relies on, asserted on the matplotlib objects (not on pixels): one
colour per orderer in every figure, one legend entry per orderer however many files, the shared
configuration in the caption, no point drawn at an epoch that was not measured, references drawn."""

import h5py
import numpy as np
import pytest

pytest.importorskip("matplotlib")
pytest.importorskip("pandas")

import matplotlib.colors  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from ordersim.analysis import convergence, herding, herding_sim, scaling, stragglers, style  # noqa: E402
from ordersim.analysis.load import load_herding_sim  # noqa: E402
from test_analysis import herding_sim_file, keep_epochs, quiet, write_trace  # noqa: E402


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


def load(files):
    return quiet(style.load, [str(f) for f in files])


def orderer_lines(fig):
    """{orderer: [Line2D]} of the mean lines ``style.band`` drew."""
    out = {}
    for ax in fig.axes:
        for line in ax.get_lines():
            if line.get_gid() == "orderer-line":
                out.setdefault(line.get_label(), []).append(line)
    return out


def legend_labels(legend):
    return [t.get_text() for t in legend.get_texts()]


def caption(fig):
    return next(t.get_text() for t in fig.texts if t.get_gid() == "caption").replace("\n", " ")


def test_every_known_orderer_has_its_own_fixed_style_and_new_names_a_stable_one():
    known = ("rr", "so", "flipflop", "wr", "ig", "grab", "pair-grab", "recursive-pair", "d-grab", "d-grab-pair",
             "cd-grab", "greedy", "kh-sgd", "cd-kh", "sbw")
    colors = [matplotlib.colors.to_hex(style.color(name)) for name in known]
    assert len(set(colors)) == len(known)
    assert len({style.orderer_style(name)["marker"] for name in known}) == len(known)
    assert style.orderer_style("d-rr") == style.orderer_style("rr")  # D-RR is rr with m > 1
    assert style.color("cd-grab (m=8)") == style.color("cd-grab")
    # a name registered later: derived from the name alone (a literal, so it cannot drift), distinct
    assert style.orderer_style("some-new-orderer") == style.orderer_style("some-new-orderer")
    assert style.color("some-new-orderer") == "#1017e0"
    assert style.color("some-new-orderer") != style.color("another-new-one")
    # the stragglers figure colours coding schemes: none of them is an orderer's colour
    assert not {matplotlib.colors.to_hex(c) for c in stragglers.SCHEME_COLORS.values()} & set(colors)


def test_an_orderer_has_the_same_colour_in_every_figure(tmp_path):
    files = [write_trace(tmp_path / f"n{n}.h5", workers=4, n=n, seeds=(0, 1)) for n in (8, 16, 32)]
    df = load(files)
    single = load(files[:1])
    hs = load_herding_sim([herding_sim_file(tmp_path / "hs.h5")])
    figures = [*convergence.figures(single).values(), *herding.figures(df).values(), herding_sim.draw(hs),
               scaling.draw(df)[0]]
    for fig in figures:
        drawn = {}
        for ax in fig.axes:
            for line in ax.get_lines():
                if line.get_label() in ("rr", "cd-grab"):
                    drawn.setdefault(line.get_label(), set()).add(matplotlib.colors.to_hex(line.get_color()))
        assert drawn.get("rr") == {matplotlib.colors.to_hex("tab:blue")}, fig
        assert drawn.get("cd-grab") == {matplotlib.colors.to_hex("tab:red")}, fig


def test_twelve_files_give_one_legend_entry_per_orderer_and_a_scale_for_the_sweep(tmp_path):
    files = [write_trace(tmp_path / f"m{m}.h5", workers=m, n=4, epochs=3, seeds=(0,)) for m in range(1, 13)]
    fig = convergence.figures(load(files), x_axes=["epochs"])["convergence_epochs"]
    (legend,) = fig.legends
    assert legend_labels(legend) == ["rr", "cd-grab"]
    # the 12 values of m are a grey scale with one step each, its ticks the values
    bar_axes = [ax for ax in fig.axes if ax.get_label() == "<colorbar>"]
    assert len(bar_axes) == 1
    assert [t.get_text() for t in bar_axes[0].get_yticklabels()] == [str(m) for m in range(1, 13)]
    # one line per (orderer, m) in each panel, shades of the orderer's hue, darker for larger m
    lines = orderer_lines(fig)
    panels = len([ax for ax in fig.axes if ax.get_label() != "<colorbar>"])
    assert len(lines["cd-grab"]) == 12 * panels
    first_panel = [ln for ln in lines["cd-grab"] if ln.axes is fig.axes[0]]
    lightness = [sum(matplotlib.colors.to_rgb(ln.get_color())) for ln in first_panel]
    assert lightness == sorted(lightness, reverse=True)
    assert "m = " not in caption(fig) and "n = 4, b = 1" in caption(fig)


def test_caption_names_the_configuration_and_the_step_against_L(tmp_path):
    fig = convergence.figures(load([write_trace(tmp_path / "a.h5")]), x_axes=["epochs"])["convergence_epochs"]
    text = caption(fig)
    assert "logreg on synthetic" in text and "m = 4, n = 8, b = 1" in text
    assert "step α = 0.01 (α L = 0.01)" in text and "3 runs (file, seed) per line" in text


def test_measure_every_draws_markers_at_the_measured_epochs_only(tmp_path):
    path = write_trace(tmp_path / "every3.h5", epochs=7)
    keep_epochs(path, [0, 3, 6, 7])  # measure_every = 3: 0, 3, 6, and always the last
    fig = convergence.figures(load([path]), x_axes=["epochs"])["convergence_epochs"]
    for lines in orderer_lines(fig).values():
        for line in lines:
            assert list(line.get_xdata()) == [0, 3, 6, 7]  # no point in between, no break at 6 -> 7
            assert line.get_marker() not in (None, "", "None") and line.get_markevery() is None


def test_a_killed_seed_does_not_shift_the_mean_and_a_missing_epoch_breaks_the_line(tmp_path):
    killed = write_trace(tmp_path / "killed.h5", epochs=5, interrupted=("cd-grab", 1))
    fig = convergence.figures(load([killed]), names=("suboptimality",), x_axes=["epochs"])["convergence_epochs"]
    (ax,) = [a for a in fig.axes if a.get_label() != "<colorbar>"]
    (cd,) = orderer_lines(fig)["cd-grab"]
    x, y = np.asarray(cd.get_xdata(), float), np.asarray(cd.get_ydata(), float)
    assert list(x[np.isfinite(y)]) == [0, 1, 2]  # the mean over all seeds: only where all were measured
    partial = [ln for ln in ax.get_lines() if ln.get_gid() == "partial-mean" and ln.get_color() == cd.get_color()]
    assert len(partial) == 1 and list(partial[0].get_xdata()) == [3, 4, 5]
    assert partial[0].get_linestyle() == "None" and partial[0].get_markerfacecolor() == "white"
    (rr,) = orderer_lines(fig)["rr"]
    assert list(rr.get_xdata()) == [0, 1, 2, 3, 4, 5]

    gap = write_trace(tmp_path / "gap.h5", epochs=6)
    keep_epochs(gap, [0, 1, 2, 3, 5, 6])  # epoch 4 of every run lost
    fig = convergence.figures(load([gap]), names=("suboptimality",), x_axes=["epochs"])["convergence_epochs"]
    for (line,) in orderer_lines(fig).values():
        x, y = np.asarray(line.get_xdata(), float), np.asarray(line.get_ydata(), float)
        assert np.isnan(x[4]) and np.isnan(y[4])  # the line breaks between 3 and 5 ...
        assert list(x[np.isfinite(x)]) == [0, 1, 2, 3, 5, 6]  # ... and no point is drawn at 4


def references(ax):
    """The black reference curves of an axes: {line style: Line2D}."""
    return {ln.get_linestyle(): ln for ln in ax.get_lines() if ln.get_color() == "k"}


def test_herding_vs_n_and_herding_sim_draw_the_sqrt_n_and_log_n_references(tmp_path):
    files = [write_trace(tmp_path / f"n{n}.h5", workers=2, n=n, seeds=(0,)) for n in (8, 16, 32)]
    hs = load_herding_sim([herding_sim_file(tmp_path / "hs.h5")])
    figs = [herding.figures(load(files))["herding_vs_n"], herding_sim.draw(hs)]
    for fig in figs:
        legend_text = legend_labels(fig.legends[0])
        assert legend_text[:2] == ["rr", "cd-grab"] or "d-grab" in legend_text
        assert set(herding.REFERENCE_LABELS) <= set(legend_text)
        for ax in fig.axes:
            assert {"--", ":"} <= set(references(ax)), fig
    # herding-sim panel m = 2, n = 32: the dashed level is the round-0 herding, the dotted c log n
    lines = references(figs[1].axes[0])
    h0 = hs[(hs.workers == 2) & (hs["round"] == 0)].herding.mean()
    assert lines["--"].get_ydata()[0] == pytest.approx(h0)
    assert lines[":"].get_ydata()[0] == pytest.approx(h0 / np.sqrt(32) * np.log(32))


def test_herding_sim_rounds_have_integer_ticks(tmp_path):
    """With 1 or 2 rounds matplotlib put ticks at 0.2 or 0.5 rounds."""
    for rounds in (1, 2):
        fig = herding_sim.draw(load_herding_sim([herding_sim_file(tmp_path / f"hs{rounds}.h5", rounds=rounds)]))
        fig.canvas.draw()
        for ax in fig.axes:
            ticks = ax.get_xticks()
            assert len(ticks) > 1 and (ticks == np.round(ticks)).all(), (rounds, ticks)


def test_epoch_axes_have_integer_ticks(tmp_path):
    """A run of 1 or 2 epochs got ticks at 0.25 or 0.5 epochs on every figure drawn against epochs."""
    for epochs in (1, 2):
        df = load([write_trace(tmp_path / f"e{epochs}.h5", epochs=epochs)])
        figs = [convergence.figures(df, x_axes=["epochs"])["convergence_epochs"],
                herding.figures(df)["herding_epochs"]]
        for fig in figs:
            fig.canvas.draw()
            for ax in fig.axes:
                if ax.get_xlabel().startswith("epoch"):
                    ticks = ax.get_xticks()
                    assert len(ticks) > 1 and (ticks == np.round(ticks)).all(), (epochs, ticks)
            plt.close(fig)


def test_herding_epochs_draws_no_level_scaled_from_epoch_0(tmp_path):
    """Later epochs are measured at other models: a level from the epoch-0 herding compares nothing."""
    fig = herding.figures(load([write_trace(tmp_path / "a.h5")]))["herding_epochs"]
    assert legend_labels(fig.legends[0]) == ["rr", "cd-grab"]
    assert not any(references(ax) for ax in fig.axes)
    assert "c =" not in caption(fig)


def test_herding_vs_n_fits_c_at_one_epoch_that_every_n_has(tmp_path):
    files = [write_trace(tmp_path / f"n{n}.h5", workers=2, n=n, seeds=(0, 1)) for n in (8, 16, 32)]
    fig = herding.figures(load(files))["herding_vs_n"]
    assert "c fitted per panel to the epoch-0 herding of all its runs, the same epoch for every n" in caption(fig)
    assert "each run's last epoch (T = 5)" in caption(fig)
    keep_epochs(files[2], [1, 2, 3, 4, 5])  # n = 32 without epoch 0: the fit moves to epoch 1 for every n
    df = load(files)
    fig = herding.figures(df)["herding_vs_n"]
    assert "epoch-1 herding" in caption(fig)
    at = df[df.epoch == 1]
    c = np.exp(np.mean(np.log(at.herding_inf) - 0.5 * np.log(at.examples_per_worker)))
    dashed = references(fig.axes[0])["--"]
    np.testing.assert_allclose(dashed.get_ydata(), c * np.sqrt([8, 16, 32]))


def test_herding_vs_n_joins_n_set_through_the_data_spec(tmp_path):
    """Each n its own data spec (synthetic:...?n=...): one line per orderer across n, no data scale."""
    files = [write_trace(tmp_path / f"n{n}.h5", workers=2, n=n, seeds=(0, 1),
                         data=f"synthetic:classification?n={2 * n}", config={"data": f"synthetic:?n={2 * n}"})
             for n in (8, 16, 32)]
    fig = herding.figures(load(files))["herding_vs_n"]
    lines = orderer_lines(fig)
    assert sorted(lines) == ["cd-grab", "rr"]
    for (line,) in lines.values():
        assert list(line.get_xdata()) == [8, 16, 32] and np.isfinite(line.get_ydata()).all()
    assert not [ax for ax in fig.axes if ax.get_label() == "<colorbar>"]


def test_a_swept_setting_splits_lines_labels_and_the_runs_per_line(tmp_path):
    """A 2-cell sweep over momentum (a config field, not in style.CONFIG): one line per (orderer,
    momentum), its name on the scale and in the labels, 2 runs per line, not 4 pooled."""
    files = [write_trace(tmp_path / f"cell_{i}.h5", seeds=(0, 1), config={"momentum": momentum})
             for i, momentum in enumerate((0.0, 0.9))]
    df = load(files)
    assert df.attrs["settings"] == ["momentum"]
    assert set(df.label) == {"rr (momentum=0)", "rr (momentum=0.9)", "cd-grab (momentum=0)",
                             "cd-grab (momentum=0.9)"}
    fig = convergence.figures(df, names=("suboptimality",), x_axes=["epochs"])["convergence_epochs"]
    assert {name: len(lines) for name, lines in orderer_lines(fig).items()} == {"rr": 2, "cd-grab": 2}
    (bar,) = [ax for ax in fig.axes if ax.get_label() == "<colorbar>"]
    assert bar.get_ylabel().startswith("momentum") and [t.get_text() for t in bar.get_yticklabels()] == ["0", "0.9"]
    assert "2 runs (file, seed) per line" in caption(fig)


def test_runs_are_the_file_seed_pairs_there_are(tmp_path):
    """Seeds 0 1 in one file and 2 3 in another are 4 runs, not 2 x 4 pairs of which half are
    empty (no epoch would have every run: no line). A run that is there with NaN values (diverged)
    still counts: no mean where it has none."""
    files = [write_trace(tmp_path / "a.h5", seeds=(0, 1)), write_trace(tmp_path / "b.h5", seeds=(2, 3))]
    with h5py.File(files[1], "r+") as f:
        f["runs/cd-grab/seed_3/suboptimality"][3:] = np.nan
    df = load(files)
    epochs, values = style.by_seed(df[df.orderer == "rr"], "epoch", "suboptimality")["rr"]
    assert values.shape == (4, 6) and np.isfinite(values).all()
    fig = convergence.figures(df, names=("suboptimality",), x_axes=["epochs"])["convergence_epochs"]
    (rr,) = orderer_lines(fig)["rr"]
    assert list(rr.get_xdata()) == [0, 1, 2, 3, 4, 5] and np.isfinite(rr.get_ydata()).all()
    (cd,) = orderer_lines(fig)["cd-grab"]
    assert list(cd.get_xdata()) == [0, 1, 2]
    assert "4 runs (file, seed) per line" in caption(fig)
    # herding-sim files, one per seed, give the band
    hs = load_herding_sim([herding_sim_file(tmp_path / f"hs{seed}.h5", seed=seed) for seed in (0, 1)])
    lines = orderer_lines(herding_sim.draw(hs))
    assert all(list(line.get_xdata()) == [0, 1, 2, 3] for group in lines.values() for line in group)


def test_scaling_legend_says_what_the_band_is_and_the_caption_clears_the_x_label(tmp_path):
    files = [write_trace(tmp_path / f"m{m}.h5", workers=m, seeds=(0, 1)) for m in (1, 2, 4, 8)]
    fig, _ = scaling.draw(load(files))  # an m sweep only: one panel, and its legend in a panel of its own
    ax, key = fig.axes
    assert "band: min–max over the draws" in key.get_legend().get_title().get_text()
    fig.canvas.draw()
    text = next(t for t in fig.texts if t.get_gid() == "caption")
    assert text.get_window_extent().y1 <= ax.xaxis.label.get_window_extent().y0


def test_log_tick_labels_are_plain_numbers_or_powers_of_ten():
    """plain_log_y (herding, herding_sim, scaling) labelled the scaling figure's errors 1e-05,
    1e-10: beyond the short numbers its labels are powers of ten, as on the other log axes."""
    fig, ax = plt.subplots()
    ax.plot([1, 2], [1e-10, 1e-5])
    style.plain_log_y(ax)
    fig.canvas.draw()
    labels = [t.get_text() for t in ax.get_yticklabels() if t.get_text()]
    assert "$10^{-5}$" in labels and not [label for label in labels if "e-" in label]
    ax.set_ylim(2, 12)  # herding's short ranges keep plain numbers
    fig.canvas.draw()
    assert "10" in [t.get_text() for t in ax.get_yticklabels()]


def test_caption_of_a_decaying_schedule_gives_its_largest_step_the_regime_numbers_are_at():
    text = style.config_text(pd.DataFrame({"problem": ["logistic"], "lr": [1e-4], "largest_step": [9e-4],
                                     "L": [2.0], "alpha_Lmax_n": [0.5]}), runs=False)
    assert text == "logistic; largest step α = 0.0009 (α L = 0.0018, α L_max n = 0.5)", text


def page_width(pdf) -> float:
    """The width in inches of the (one) page of a PDF matplotlib wrote."""
    import re

    box = re.search(rb"/MediaBox \[\s*0 0 ([\d.]+) ([\d.]+)", pdf.read_bytes())
    return float(box[1]) / 72


def panel_grid(fig) -> tuple[int, int]:
    """(rows, columns) of the figure's panels (its axes but the colour scale)."""
    boxes = [ax.get_position() for ax in fig.axes if ax.get_label() != "<colorbar>"]
    return len({round(b.y0, 3) for b in boxes}), len({round(b.x0, 3) for b in boxes})


def test_width_sets_the_saved_figure_width_and_panels_wrap(tmp_path, monkeypatch):
    """convergence_epochs was 13.1 x 3.2 in (14.5 with a sweep's colour scale), stragglers 13.3 in:
    at a paper's 6.5 in text width the 9 pt labels printed at 4.5 pt. --width sets the page width,
    colour scale, legends and caption inside it, the fonts keep their points, panels wrap."""
    monkeypatch.setattr(style, "WIDTH", style.WIDTH)  # main sets them; later tests get the defaults back
    monkeypatch.setattr(style, "COLUMNS", style.COLUMNS)
    files = [str(write_trace(tmp_path / f"m{m}.h5", workers=m, seeds=(0, 1))) for m in (2, 4)]
    for width, columns, grid in ((3.5, None, (4, 1)), (6.5, None, (2, 2)), (10, 4, (1, 4))):
        out = tmp_path / f"w{width}"
        args = ["--width", str(width)] + (["--columns", str(columns)] if columns else [])
        assert quiet(convergence.main, [*files, "--out", str(out), "--x", "epochs", "--dpi", "50", *args]) == 0
        assert page_width(out / "convergence_epochs.pdf") == pytest.approx(width, abs=0.01)
        fig = convergence.figures(load(files), x_axes=["epochs"])["convergence_epochs"]
        assert fig.get_figwidth() == width and panel_grid(fig) == grid, width
        style.fit_width(fig)
        box = fig.get_tightbbox(fig.canvas.get_renderer())
        assert 0 <= box.x0 and box.x1 <= width, (width, box)  # the colour scale of m = 2, 4 too
        assert {t.get_fontsize() for ax in fig.axes[:4] for t in ax.get_yticklabels()} == {8.0}
    # the default: a one-column paper's text width; herding_sim's five panels wrap at it
    assert style.parser("x", "").parse_args([files[0], "--out", str(tmp_path)]).width == style.PAPER_WIDTH == 6.5
    style.WIDTH, style.COLUMNS = 6.5, None
    hs = load_herding_sim([herding_sim_file(tmp_path / "hs.h5", workers=(1, 2, 4, 8, 16))])
    assert panel_grid(herding_sim.draw(hs)) == (2, 3)


def test_width_narrower_than_a_panel_is_refused_in_one_line(tmp_path, capsys):
    with pytest.raises(SystemExit) as stop:
        convergence.main([str(write_trace(tmp_path / "t.h5")), "--out", str(tmp_path / "f"), "--width", "1"])
    assert stop.value.code == 2
    assert "argument --width: '1' is not allowed; allowed: inches from 2 to 100" in capsys.readouterr().err


@pytest.mark.parametrize("log_axis", [style.plain_log_y, lambda ax: style.log_if_positive(ax, [3, 40])])
@pytest.mark.parametrize("limits", [(3, 30), (3, 40), (2, 12), (6, 9)])
def test_a_log_axis_of_less_than_two_decades_labels_enough_ticks_to_read(log_axis, limits):
    """herding on short runs and herding_sim's panels had one labelled tick (10) from 3 to 30, the
    convergence panels from 3 to 40: no value could be read off."""
    fig, ax = plt.subplots()
    ax.plot([1, 2], limits)
    log_axis(ax)
    ax.set_ylim(*limits)
    fig.canvas.draw()
    shown = [t.get_text() for t in ax.yaxis.get_ticklabels(which="both")
             if t.get_text() and limits[0] <= t.get_position()[1] <= limits[1]]
    assert len(shown) >= 3, (limits, shown)
    assert not [text for text in shown if "times" in text]  # plain numbers, not 3x10^0


def test_the_caption_counts_one_run_in_the_singular():
    """The caption said "1 runs (file, seed) per line"."""
    runs = pd.DataFrame({"file": ["a.h5", "a.h5", "a.h5"], "seed": [0, 1, 0], "orderer": ["rr", "rr", "cd-grab"]})
    assert style.config_text(runs[2:]) == "1 run (file, seed) per line"
    assert style.config_text(runs[:2]) == "2 runs (file, seed) per line"
    assert style.config_text(runs) == "1–2 runs (file, seed) per line"


def test_a_legend_that_wraps_fills_its_rows_evenly():
    """Six entries with room for five a row were laid out 5 + 1 (herding_sim: rr, then d-grab
    alone under it); the same two rows hold them 3 + 3."""
    fig = plt.figure(figsize=(6.5, 2))
    lines = [fig.add_subplot().plot([0, 1], label=f"entry {i}")[0] for i in range(6)]
    legend = style.figure_legend(fig, 5, handles=lines, loc="upper center")
    fig.canvas.draw()
    columns = {round(t.get_window_extent().x0) for t in legend.get_texts()}
    assert len(columns) == 3, columns


def test_epoch_ticks_of_a_third_of_a_page_do_not_touch():
    """grab_mnist's three panels at 6.5 in: Matplotlib's own count put 30 epochs' labels every 4,
    and "12", "16", "20" ran together."""
    fig, axes = style.figure(3, width=3.4, height=2.6)
    for ax in axes:
        ax.plot(np.arange(31), np.arange(31))
        style.counted_x(ax)
        ax.set_ylabel("training loss\n/ RR's mean − 1")
    fig.tight_layout()
    style.fit_width(fig)
    fig.canvas.draw()
    for ax in axes:
        boxes = sorted((t.get_window_extent() for t in ax.get_xticklabels() if t.get_text()), key=lambda b: b.x0)
        gaps = [right.x0 - left.x1 for left, right in zip(boxes, boxes[1:])]
        assert len(boxes) > 2 and min(gaps) > boxes[0].height / 2, gaps


def test_long_configurations_on_the_colour_scale_leave_the_panels_their_width(tmp_path):
    """A straggler run's configuration beside a plain run's labelled the colour scale in one line
    of ~90 characters: fit_width squeezed the four panels to slivers."""
    plain = write_trace(tmp_path / "plain.h5", workers=8, lr=0.3)
    coded = write_trace(tmp_path / "coded.h5", workers=4, lr=0.03, config={
        "stragglers": "shifted-exp", "straggler_options": {"a": 0.2, "mu": 1.0}, "coding": "pgc-cr", "coding_s": 1})
    fig = convergence.figures(load([plain, coded]), x_axes=["epochs"])["convergence_epochs"]
    style.fit_width(fig)
    labels = [t.get_text() for ax in fig.axes if ax.get_label() == "<colorbar>" for t in ax.get_yticklabels()]
    assert any("straggler_options" in text for text in labels), labels
    widths = [ax.get_position().width * fig.get_figwidth() for ax in fig.axes if ax.get_label() != "<colorbar>"]
    assert len(widths) == 4 and min(widths) > 1.5, widths
