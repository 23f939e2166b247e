"""Final error against the number of workers m and against n, log-log, with fitted and theory curves.

    python -m ordersim.analysis.scaling FILE.h5 [FILE.h5 ...] --out DIR [--metric ...] [--setting ...]
                               [--epoch T] [--level 0.95] [--band minmax|std]

Writes DIR/scaling.{png,pdf}: one panel per sweep over m or n (the runs and cells are chosen and
fitted as in analysis.fit: a sweep over m at lr 0.1 and one at lr 0.3 are two panels), its legend
in a panel at its right (under it when the figure is too narrow), one colour per orderer. Small
dots: each data draw's mean over seeds (of log error), the band their min-max (--band std: the cell mean +- one standard
deviation over draws, on log scale); solid line and markers: the cell means (open markers: cells at a floor, left out of
the fit); dashed line: the fit, its slope and confidence interval in the legend; dotted line: the
theory's rate (analysis/theory.py), known only up to a constant, with the constant fitted to the
same cells (least squares on log error) and labelled so. The legend's title says what dots, line
and band are; the caption sits below the lowest x label.
"""

from __future__ import annotations

import numpy as np

from ordersim.analysis import extras

extras.script_requires(__name__)  # before matplotlib and pandas are imported: one line if they are missing
import pandas as pd  # noqa: E402

from ordersim.analysis import fit, style, theory  # noqa: E402

AXIS_LABEL = {"m": "number of workers $m$", "n": "examples per worker $n$"}
# The legend's title: what dots, line and band are (the panel title's interval is the fit's).
BAND_TEXT = {"minmax": "dots: data draws (mean over seeds),\nline: cell mean,\nband: min–max over the draws",
             "std": "dots: data draws (mean over seeds),\nline: cell mean,\nband: ±1 std over the draws (log scale)"}
AXIS_COLUMNS = ("workers", "examples_per_worker")


def draw(df, metric="auto", setting="auto", epoch=None, level=0.95, band_kind="minmax", title=None):
    """The scaling figure and the notes of the fit (analysis.fit); ``title`` ends the caption."""
    errors, metric, epoch, notes = fit.final_errors(df, metric, epoch)
    setting = fit.setting_of(errors, metric, setting)
    # a panel per sweep (each value of lr, say, its own: analysis.fit.sweeps)
    sweeps = [(variable, held, points, fit.telling_apart(blocks))
              for variable, blocks in fit.all_sweeps(errors, notes).items() for held, points in blocks]
    if not sweeps:
        raise SystemExit("scaling: the files hold no sweep over m or n (need at least two values)")
    # each panel's legend in a panel of its own at its right, or under it when the figure is too narrow
    fig, axes = style.figure([2] * len(sweeps), cols=2, width=3.6, height=2.9)
    for ax, key, (variable, held, points, named) in zip(axes[::2], axes[1::2], sweeps):
        column = fit.VARIABLE_COLUMN[variable]
        flat = fit.FLOOR_FRACTION * theory.exponent("rr", variable, setting)
        for orderer, g in sorted(points.groupby("orderer"), key=lambda kv: style.orderer_key(kv[0])):
            col, mark = style.color(orderer), style.orderer_style(orderer)["marker"]
            draws = g.assign(log_error=np.log(g.error.astype(float))).groupby([column, "file"]).log_error.mean()
            ax.plot(draws.index.get_level_values(0), np.exp(draws.to_numpy()), ".", color=col, ms=3, alpha=0.5)
            cells = fit.fit_cells(g, column, flat, level)
            x, y, used = cells["x"], np.exp(cells["log_error"]), cells["used"]
            spread = draws.groupby(level=0).agg(["min", "max", "std"]).sort_index().fillna(0.0)
            lo, hi = ((spread["min"], spread["max"]) if band_kind == "minmax" else
                      (cells["log_error"] - spread["std"], cells["log_error"] + spread["std"]))
            ax.fill_between(x, np.exp(lo), np.exp(hi), color=col, alpha=0.15, linewidth=0)
            ax.plot(x, y, "-", color=col, lw=1.2, label=orderer)
            ax.plot(x[used], y[used], mark, color=col, ms=3.5)
            if (~used).any():
                ax.plot(x[~used], y[~used], mark, mfc="none", color=col, ms=4.5,
                        label=f"{orderer}: at a floor (not fitted)")
            if used.sum() < 2:
                continue
            lx, ly = np.log(x[used]), np.log(y[used])
            grid = np.array([x[used].min(), x[used].max()])
            slope, lo, hi = cells["exponent"], cells["ci_low"], cells["ci_high"]
            ax.plot(grid, np.exp(ly.mean() + slope * (np.log(grid) - lx.mean())), "--", color=col, lw=1,
                    label=f"fit: slope {slope:+.2f} [{lo:+.2f}, {hi:+.2f}]")
            expected = theory.exponent(orderer, variable, setting)
            if expected is not None:
                ax.plot(grid, np.exp(ly.mean() + expected * (np.log(grid) - lx.mean())), ":", color=col,
                        lw=1.4, label=f"theory {theory.RATE_TEXT[setting][orderer]}, C fitted "
                                      f"(slope {theory.format_exponent(expected)})")
        style.log2_axis(ax, points[column])
        style.plain_log_y(ax)
        ax.set_xlabel(AXIS_LABEL[variable])
        ax.set_ylabel(fit.METRIC_LABEL[metric])
        other = AXIS_COLUMNS[1 - AXIS_COLUMNS.index(column)]
        where = "".join(f", {fit.held_text(held, [c])}" for c in named if c != other)
        ax.set_title(f"{style.CONFIG[other]} = {style.value_text(points[other], 6)}{where}, after T = {epoch} epochs;\n"
                     f"mean over seeds and data draws; fit CI {level:.0%}", fontsize=7)
        key.axis("off")
        key.legend(*ax.get_legend_handles_labels(), title=BAND_TEXT[band_kind], title_fontsize=7, fontsize=6,
                   loc="center left")
    fig.tight_layout()
    points = pd.concat([points for _, _, points, _ in sweeps])
    style.caption(fig, None, extra=f"{style.config_text(points, exclude=tuple(AXIS_COLUMNS), runs=False)}; "
                                   f"theory: {setting}" + (f". {title}" if title else ""))
    return fig, notes


def plot(df, out, metric="auto", setting="auto", epoch=None, level=0.95, band_kind="minmax"):
    fig, notes = draw(df, metric, setting, epoch, level, band_kind)
    for note in notes:
        print(f"note: {note}")
    return style.save(fig, out, "scaling")


def main(argv=None) -> int:
    p = style.parser("ordersim.analysis.scaling", __doc__, band_over="the data draws (each draw's mean over its seeds)")
    fit.add_arguments(p)
    args = style.parse(p, argv)
    df = style.load(args.files)
    fit.check_epoch(p, df, args.epoch)
    plot(df, args.out, args.metric, args.setting, args.epoch, args.level, args.band)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
