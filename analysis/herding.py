"""Parallel herding per epoch per orderer, against the sqrt(n) and log(n) reference curves.

    python -m ordersim.analysis.herding FILE.h5 [FILE.h5 ...] --out DIR [--norm inf|2] [--band minmax|std]

DIR/herding_epochs.{png,pdf}: herding of the order used in epoch t+1 (dataset herding_inf or
herding_2) against t, one panel per configuration (m, n, b), one line per orderer (mean over seeds
with a band), log scale.

Reference curves, and how they are scaled: at epoch 0 every orderer's next order is the uniformly
random first-epoch order, so the mean epoch-0 herding H0 of all runs of a panel is the random-order
level. With c = H0 / sqrt(n), the dashed line is c*sqrt(n) (random orders, Theta(sqrt n)) and the
dotted line is c*log(n) (balanced orders, O~(1): what the same constant gives with log n in place of
sqrt n).

DIR/herding_vs_n.{png,pdf} (only when the files hold at least two values of n for some m): the
final-epoch herding against n, log-log, one panel per m, with c*sqrt(n) and c*log(n), c fitted to
the epoch-0 herding of all runs of the panel by least squares on log H0 - log sqrt(n).
"""

from __future__ import annotations

import numpy as np

from ordersim.analysis import style

NORM_LABEL = {"inf": r"$\|\cdot\|_\infty$", "2": r"$\|\cdot\|_2$"}


def _references(ax, n_values, c, with_label=True):
    n = np.asarray(n_values, dtype=float)
    ax.plot(n, c * np.sqrt(n), "k--", lw=1, label=r"$c\sqrt{n}$ (random orders)" if with_label else None)
    ax.plot(n, c * np.log(n), "k:", lw=1, label=r"$c\log n$ (balanced orders)" if with_label else None)


def plot_epochs(df, out, column, norm, band_kind):
    panels = list(df.groupby(["workers", "examples_per_worker", "batch"]))
    fig, axes = style.figure(len(panels), cols=min(len(panels), 3))
    for ax, ((m, n, b), g) in zip(axes, panels):
        g = style.with_labels(g, exclude=("workers", "examples_per_worker", "batch"))
        series = style.by_seed(g, "epoch", column)
        for lab, (epochs, values) in series.items():
            style.band(ax, epochs, values, lab, band_kind, labels=list(series))
        h0 = g.loc[g.epoch == g.epoch.min(), column].mean()
        c = h0 / np.sqrt(n)
        epochs = np.sort(g.epoch.unique())
        ax.plot(epochs, np.full(len(epochs), c * np.sqrt(n)), "k--", lw=1, label=r"$c\sqrt{n}$ (random)")
        ax.plot(epochs, np.full(len(epochs), c * np.log(n)), "k:", lw=1, label=r"$c\log n$ (balanced)")
        style.plain_log_y(ax)
        ax.set_title(f"m = {m}, n = {n}, b = {b}")
        ax.set_xlabel("epoch $t$")
        ax.set_ylabel(f"parallel herding {NORM_LABEL[norm]}")
    style.legend(axes[0], band_kind, figure_level=True)
    fig.tight_layout()
    return style.save(fig, out, "herding_epochs")


def plot_vs_n(df, out, column, norm, band_kind):
    panels = [(m, g) for m, g in df.groupby("workers") if g.examples_per_worker.nunique() > 1]
    if not panels:
        return []
    fig, axes = style.figure(len(panels), cols=min(len(panels), 3))
    for ax, (m, g) in zip(axes, panels):
        last = g[g.epoch == g.groupby(["file", "orderer", "seed"]).epoch.transform("max")]
        last = style.with_labels(last, exclude=("examples_per_worker",))
        series = style.by_seed(last, "examples_per_worker", column)
        for lab, (n, values) in series.items():
            style.band(ax, n, values, lab, band_kind, labels=list(series), marker="o", ms=3)
        first = g[g.epoch == g.epoch.min()]
        c = float(np.exp(np.nanmean(np.log(first[column]) - 0.5 * np.log(first.examples_per_worker))))
        _references(ax, np.sort(g.examples_per_worker.unique()), c)
        style.log2_axis(ax, g.examples_per_worker)
        style.plain_log_y(ax)
        ax.set_title(f"m = {m}, final epoch")
        ax.set_xlabel("examples per worker $n$")
        ax.set_ylabel(f"parallel herding {NORM_LABEL[norm]}")
    style.legend(axes[0], band_kind, figure_level=True)
    fig.tight_layout()
    return style.save(fig, out, "herding_vs_n")


def plot(df, out, norm="inf", band_kind="minmax"):
    column = f"herding_{norm}"
    if column not in df or df[column].notna().sum() == 0:
        raise SystemExit(f"herding: no dataset {column} in the files")
    df = df[df[column].notna()]
    return plot_epochs(df, out, column, norm, band_kind) + plot_vs_n(df, out, column, norm, band_kind)


def main(argv=None) -> int:
    p = style.parser("ordersim.analysis.herding", __doc__)
    p.add_argument("--norm", choices=("inf", "2"), default="inf",
                   help="herding norm: the dataset herding_inf (the CD-GraB paper's) or herding_2")
    args = style.parse(p, argv)
    plot(style.load(args.files), args.out, args.norm, args.band)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
