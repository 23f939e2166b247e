"""Stragglers and gradient coding: loss against simulated time, and time per step against s.

    python -m ordersim.analysis.stragglers FILE.h5 [FILE.h5 ...] --out DIR [--metric NAME]
                                  [--orderers NAME ...] [--band minmax|std] [--target VALUE]

For traces of runs with a straggler model (docs/stragglers.md), e.g. the cells of
runs/stragglers.toml. Writes DIR/stragglers.{png,pdf}: one panel per tolerance s (one row of them
per step size lr when the traces have several, titled with lr·L, L the trace's smoothness
constant), the metric (default: suboptimality when present, else train loss) against simulated
time, one colour per coding scheme (a palette no orderer uses) and the orderer's line style and
marker (the same as in every figure), one legend for each (mean over seeds, band over seeds;
wait-all, which tolerates no straggler, appears in every panel; the panels of one lr share their y
and x ranges), and a panel with the mean
simulated time per step against s per scheme (markers: mean over runs of each run's mean step
time, each scheme offset a little in s so that schemes with the same step times, such as
ignore-stragglers and the pipelined ones, do not hide each other; wait-all as a labelled
horizontal line). Prints that table, then per (lr, coding, s, orderer) the last epoch's metric
(mean, min and max over seeds) and the mean simulated time at which the metric first reaches
``--target`` (default 1e-3; NaN: a seed never reached it), each under a line that says what it
holds.
"""

from __future__ import annotations

import warnings

import h5py
import numpy as np

from ordersim import coding
from ordersim.analysis import extras

extras.script_requires(__name__)  # before matplotlib and pandas are imported: one line if they are missing
import matplotlib.lines  # noqa: E402

from ordersim.analysis import style  # noqa: E402
from ordersim.analysis.convergence import LABELS  # noqa: E402
from ordersim.analysis.load import load_steps  # noqa: E402

# The coding schemes in the registry's order (ordersim.coding.SCHEMES), which the tables and the
# legends follow.
SCHEMES = tuple(coding.SCHEMES)
# A palette of its own (Dark2 and greys), so that no scheme shares a colour with an orderer; the
# built-ins take it in their order.
SCHEME_COLORS = dict(zip(SCHEMES, ("black", "#999999", "#1b9e77", "#66a61e", "#d95f02", "#7570b3",
                                   "#e7298a", "#a6761d")))


def step_times(files) -> "pandas.DataFrame":  # noqa: F821
    """One row per run: file, orderer, seed, coding, coding_s, mean and number of step times."""
    import pandas as pd

    rows = []
    for path in files:
        with h5py.File(path, "r") as f:
            runs = [(orderer, name, dict(run.attrs)) for orderer, seeds in f.get("runs", {}).items()
                    for name, run in seeds.items() if "stragglers/step_time" in run]
        for orderer, name, attrs in runs:
            # a run that did not complete: its confirmed epochs' steps only
            t = load_steps(path, orderer, int(name.removeprefix("seed_")),
                           names=["stragglers/step_time"])["stragglers/step_time"]
            rows.append(dict(file=str(path), orderer=orderer, seed=name, coding=attrs["coding"],
                             coding_s=int(attrs["coding_s"]), step_time=float(t.mean()) if len(t) else np.nan,
                             steps=len(t)))
    if not rows:
        raise SystemExit("stragglers: no run in the files has a straggler model (stragglers/step_time); "
                         "runs get one from --stragglers MODEL, as runs/stragglers.toml's do")
    return pd.DataFrame(rows)


# Offset in s between the schemes of the step-time panel (7 schemes span 0.54 between s and s + 1).
DODGE = 0.09
TABLE_TITLE = ("simulated seconds per step by coding scheme and the stragglers s it tolerates (wait-all: 0): "
               "mean, min and max over runs of each run's mean step time; count: runs")


def finals_title(metric: str, target: float) -> str:
    """The line above the ``finals`` table: what its columns hold."""
    what = {"suboptimality": "suboptimality f - f*", "train_loss": "train loss f"}.get(metric, metric)
    return (f"{what} at each run's last measured epoch: final = mean over the runs (seeds), final_min, "
            f"final_max = their min and max; time_to_target = mean simulated seconds until {metric} first "
            f"<= {target:g} (NaN: a run never got there)")


def table(times) -> "pandas.DataFrame":  # noqa: F821
    """Mean simulated time per step by (coding, s), over runs."""
    return (times.groupby(["coding", "coding_s"]).step_time.agg(["mean", "min", "max", "count"])
            .reset_index().sort_values(["coding", "coding_s"], key=lambda c: c.map(
                {s: i for i, s in enumerate(SCHEMES)}) if c.name == "coding" else c))


def _metric(df, metric):
    if metric is None:
        return "suboptimality" if "suboptimality" in df and df["suboptimality"].notna().any() else "train_loss"
    return metric


def finals(df, metric=None, target=1e-3) -> "pandas.DataFrame":  # noqa: F821
    """Per (lr, coding, coding_s, orderer): the last epoch's metric (mean, min, max over runs) and
    the mean simulated time at which each run's metric first reached ``target`` (NaN when a run
    never did)."""
    import pandas as pd

    metric = _metric(df, metric)
    rows = []
    for key, group in df[df["sim_time"].notna()].groupby(["lr", "coding", "coding_s", "orderer"]):
        last, reached = [], []
        for _, run in group.groupby(["file", "seed"]):
            run = run.sort_values("epoch")
            last.append(float(run[metric].iloc[-1]))
            hit = run.loc[run[metric] <= target, "sim_time"]
            reached.append(float(hit.iloc[0]) if len(hit) else np.nan)
        rows.append(dict(zip(("lr", "coding", "coding_s", "orderer"), key), final=np.mean(last),
                         final_min=min(last), final_max=max(last), time_to_target=np.mean(reached)))
    order = {c: i for i, c in enumerate(SCHEMES)}
    return pd.DataFrame(rows).sort_values(["lr", "coding", "coding_s", "orderer"], key=lambda c: c.map(
        order) if c.name == "coding" else c).reset_index(drop=True)


def draw(df, times, metric=None, orderers=None, band_kind="minmax"):
    """The stragglers figure and the step-time table. Colour = coding scheme, line style and marker
    = orderer (its style in every figure, analysis.style); one legend for each. The metric panels
    of one step size (one row) share their y and x ranges: they are compared across s."""
    df = df[df["sim_time"].notna()] if "sim_time" in df else df.iloc[:0]
    if df.empty:
        raise SystemExit("stragglers: no dataset 'sim_time' in the files (runs without a straggler model)")
    metric = _metric(df, metric)
    orderers = orderers or sorted(df.orderer.unique(), key=style.orderer_key)
    df = df[df.orderer.isin(orderers)]
    times = times[times.orderer.isin(orderers)]
    coded = sorted(df.loc[df.coding != "wait-all", "coding_s"].unique().tolist()) or [0]
    rates = sorted(df.lr.unique().tolist())
    # a row per step size, the step-time panel at the end of the first when the width holds it
    # beside them, else in a row of its own under them (not wrapped between two step sizes)
    beside = style.fits_in_a_row(len(coded) + 1)
    rows = [len(coded) + 1] + [len(coded)] * (len(rates) - 1) if beside else [len(coded)] * len(rates) + [1]
    fig, axes = style.figure(rows, cols=len(coded) + 1 if beside else len(coded))
    time_ax = axes.pop(len(coded) if beside else -1)
    y_label, _ = LABELS.get(metric, (metric, 1.0))
    for row, lr in enumerate(rates):
        first = axes[row * len(coded)]
        for ax, s in zip(axes[row * len(coded):], coded):
            if ax is not first:
                ax.sharey(first)
                ax.sharex(first)
            panel = df[(df.lr == lr) & ((df.coding_s == s) | (df.coding == "wait-all"))].copy()
            panel["label"] = panel.coding + " " + panel.orderer
            for scheme in (c for c in SCHEMES if c in set(panel.coding)):
                for orderer in orderers:
                    part = panel[(panel.coding == scheme) & (panel.orderer == orderer)]
                    if part.empty:
                        continue
                    epochs, values = next(iter(style.by_seed(part, "epoch", metric).values()))
                    _, sim = next(iter(style.by_seed(part, "epoch", "sim_time").values()))
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore", RuntimeWarning)  # an epoch no run measured
                        x = np.nanmean(sim, axis=0)
                    style.band(ax, x, values, orderer, band_kind, col=scheme_color(scheme), epochs=epochs)
            title = f"s = {s}" if s else "no coding"
            if len(rates) > 1:
                title += f"\nlr {lr:g} (lr·L = {lr * float(panel.L.iloc[0]):.2g})"
            ax.set_title(title)
            ax.set_xlabel("simulated time (s)")
            if ax is first:  # the row shares its y axis: one label, not one crowding each neighbour
                ax.set_ylabel(y_label)
            style.log_if_positive(ax, df.loc[df.lr == lr, metric])
    ax = time_ax
    summary = table(times)
    schemes = [c for c in SCHEMES if c in set(summary.coding) | set(df.coding)]
    coded_schemes = [c for c in SCHEMES if c in set(summary.coding) and c != "wait-all"]
    offsets = (np.arange(len(coded_schemes)) - (len(coded_schemes) - 1) / 2) * DODGE
    for scheme, offset in zip(coded_schemes, offsets):
        rows = summary[summary.coding == scheme]
        ax.errorbar(rows.coding_s + offset, rows["mean"], yerr=[rows["mean"] - rows["min"], rows["max"] - rows["mean"]],
                    color=scheme_color(scheme), marker="o", markersize=3, capsize=2)
    if "wait-all" in set(summary.coding):
        level = summary.loc[summary.coding == "wait-all", "mean"].mean()
        ax.axhline(level, color=scheme_color("wait-all"), lw=1, gid="wait-all")
        ax.annotate("wait-all", (1.0, level), xycoords=("axes fraction", "data"), xytext=(-2, 2),
                    textcoords="offset points", ha="right", va="bottom", fontsize=6)
    ax.set_xlabel("stragglers tolerated $s$")
    ax.set_ylabel("simulated time per step (s)")
    ax.set_title("mean over runs, bars: min–max;\nschemes side by side at each s", fontsize=8)
    ax.set_xticks(coded)
    fig.tight_layout()
    scheme_handles = [matplotlib.lines.Line2D([], [], color=scheme_color(c), label=c) for c in schemes]
    scheme_legend = style.figure_legend(
        fig, min(len(schemes), 4), handles=scheme_handles, title_fontsize=7, loc="lower left",
        title="colour: coding scheme (wait-all: a line in the step-time panel)", bbox_to_anchor=(0.0, 1.0),
        frameon=False)
    orderer_handles = [matplotlib.lines.Line2D([], [], label=o, **{**style.orderer_style(o), "color": "black"})
                       for o in orderers]
    orderer_legend = style.figure_legend(
        fig, 1, handles=orderer_handles, title="line style and marker: orderer; " + style.BAND_TEXT[band_kind],
        title_fontsize=7, loc="lower right", bbox_to_anchor=(1.0, 1.0), frameon=False)
    renderer = fig.canvas.get_renderer()
    schemes_box, orderers_box = (legend.get_window_extent(renderer) for legend in (scheme_legend, orderer_legend))
    if schemes_box.x1 > orderers_box.x0:  # too narrow a figure for them side by side: one above the other
        scheme_legend.set_bbox_to_anchor((0.0, 1.0 + orderers_box.height / fig.bbox.height), transform=fig.transFigure)
    style.caption(fig, df, exclude=("lr", "coding", "coding_s"), extra=_straggler_text(df))
    return fig, summary


def _straggler_text(df) -> str:
    """The straggler model and its parameters, when the runs share them."""
    if "straggler_model" not in df or df.straggler_model.nunique() != 1:
        return ""
    text = f"stragglers: {df.straggler_model.iloc[0]}"
    if "straggler_params" in df and df.straggler_params.nunique() == 1:
        text += f" {df.straggler_params.iloc[0]}"
    return text


def scheme_color(scheme: str):
    """The colour of a coding scheme (none of them an orderer's colour, analysis.style.COLORS)."""
    return SCHEME_COLORS.get(scheme) or style.shade(style.color(scheme), 0.5)


def plot(df, times, out, metric=None, orderers=None, band_kind="minmax"):
    fig, summary = draw(df, times, metric, orderers, band_kind)
    return style.save(fig, out, "stragglers"), summary


def main(argv=None) -> int:
    p = style.parser("ordersim.analysis.stragglers", __doc__)
    p.add_argument("--metric", choices=tuple(LABELS), default=None, metavar="NAME",
                   help="per-epoch dataset against simulated time (default: suboptimality when present, "
                        f"else train_loss); choices: {', '.join(LABELS)}")
    p.add_argument("--orderers", nargs="+", default=None, metavar="NAME",
                   help="orderers to draw (default: every orderer in the files, one line style each)")
    p.add_argument("--target", type=float, default=1e-3, metavar="VALUE",
                   help="the metric value whose first simulated time the final table reports")
    args = style.parse(p, argv)
    df = style.load(args.files)
    times = step_times(args.files)
    present = sorted(times.orderer.unique(), key=style.orderer_key)
    unknown = [name for name in args.orderers or () if name not in present]
    if unknown:
        p.error(f"argument --orderers: {', '.join(map(repr, unknown))} {'is' if len(unknown) == 1 else 'are'} "
                f"not allowed; allowed: the orderers of the runs with a straggler model: {', '.join(present)}")
    _, summary = plot(df, times, args.out, args.metric, args.orderers, args.band)
    print(TABLE_TITLE)
    print(summary.to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    print()
    print(finals_title(_metric(df, args.metric), args.target))
    print(finals(df[df.orderer.isin(args.orderers)] if args.orderers else df, args.metric, args.target)
          .to_string(index=False, float_format=lambda v: f"{v:.3g}"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
