"""Final error against the number of workers m and against n, log-log, with fitted and theory slopes.

    python -m analysis.scaling FILE.h5 [FILE.h5 ...] --out DIR [--metric ...] [--setting ...]
                               [--epoch T] [--level 0.95] [--band minmax|std]

Writes DIR/scaling.{png,pdf}: one panel per swept variable (m and/or n; the runs are chosen as in
analysis.fit), one colour per orderer. Small dots: every run; solid line and band: mean over seeds;
dashed line: the least-squares fit on log-log, its slope and confidence interval in the legend;
dotted line: the theory's slope (analysis/theory.py) through the geometric mean of the points.
"""

from __future__ import annotations

import numpy as np

from analysis import fit, style, theory

AXIS_LABEL = {"m": "number of workers $m$", "n": "examples per worker $n$"}


def plot(df, out, metric="auto", setting="auto", epoch=None, level=0.95, band_kind="minmax"):
    errors, metric, epoch, notes = fit.final_errors(df, metric, epoch)
    setting = fit.setting_of(errors, metric, setting)
    sweeps = {v: s for v in fit.VARIABLE_COLUMN if (s := fit.sweep(errors, v, notes)) is not None}
    if not sweeps:
        raise SystemExit("scaling: the files hold no sweep over m or n (need at least two values)")
    fig, axes = style.figure(len(sweeps), cols=1, width=3.6, height=2.9)
    fig.subplots_adjust(hspace=0.45)  # no tight_layout: it would shrink the axes for the outside legends
    for ax, (variable, points) in zip(axes, sweeps.items()):
        column = fit.VARIABLE_COLUMN[variable]
        points = style.with_labels(points, exclude=(*fit.VARIABLE_COLUMN.values(), "data"))
        series = style.by_seed(points, column, "error")
        for lab, (x, values) in series.items():
            g = points[points.label == lab]
            col = style.color(lab)
            ax.plot(g[column], g.error, ".", color=col, ms=3, alpha=0.5)
            style.band(ax, x, values, lab, band_kind, col=col, labels=list(series))
            slope, lo, hi = fit.fit_exponent(g[column], g.error, level)
            lx, ly = np.log(g[column].astype(float)), np.log(g.error)
            grid = np.array([x.min(), x.max()])
            ax.plot(grid, np.exp(ly.mean() + slope * (np.log(grid) - lx.mean())), "--", color=col, lw=1,
                    label=f"fit: slope {slope:+.2f} [{lo:+.2f}, {hi:+.2f}]")
            expected = theory.exponent(g.orderer.iloc[0], variable, setting)
            if expected is not None:
                ax.plot(grid, np.exp(ly.mean() + expected * (np.log(grid) - lx.mean())), ":", color=col,
                        lw=1.2, label=f"theory ({setting}): slope {theory.format_exponent(expected)}")
        style.log2_axis(ax, points[column])
        style.plain_log_y(ax)
        ax.set_xlabel(AXIS_LABEL[variable])
        ax.set_ylabel(fit.METRIC_LABEL[metric])
        ax.set_title(f"after T = {epoch} epochs; fit CI {level:.0%}")
        style.legend(ax, band_kind, fontsize=6.5, loc="center left", bbox_to_anchor=(1.02, 0.5))
    for note in notes:
        print(f"note: {note}")
    return style.save(fig, out, "scaling")


def main(argv=None) -> int:
    p = style.parser("analysis.scaling", __doc__)
    fit.add_arguments(p)
    args = style.parse(p, argv)
    plot(style.load(args.files), args.out, args.metric, args.setting, args.epoch, args.level, args.band)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
