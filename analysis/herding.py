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


def _references(ax, n_values, c):
    n = np.asarray(n_values, dtype=float)
    ax.plot(n, c * np.sqrt(n), "k--", lw=1, label=REFERENCE_LABELS[0])
    ax.plot(n, c * np.log(n), "k:", lw=1, label=REFERENCE_LABELS[1])


REFERENCE_LABELS = (r"$c\sqrt{n}$ (random orders)", r"$c\log n$ (balanced orders)")
PANEL = ("workers", "examples_per_worker", "batch")


def draw_epochs(df, column, norm, band_kind):
    """The herding_epochs figure: one panel per (m, n, b), with c sqrt(n) and c log(n) as levels."""
    panels = list(df.groupby(list(PANEL)))
    variants = style.Variants(df, exclude=PANEL)
    fig, axes = style.figure(len(panels), cols=min(len(panels), 3))
    for ax, ((m, n, b), g) in zip(axes, panels):
        for orderer, config, epochs, values in variants.series(g, column):
            style.band(ax, epochs, values, orderer, band_kind, col=variants.color(orderer, config), epochs=epochs)
        h0 = g.loc[g.epoch == g.epoch.min(), column].mean()
        c = h0 / np.sqrt(n)
        epochs = np.sort(g.epoch.unique())
        ax.plot(epochs[[0, -1]], np.full(2, c * np.sqrt(n)), "k--", lw=1, label=REFERENCE_LABELS[0])
        ax.plot(epochs[[0, -1]], np.full(2, c * np.log(n)), "k:", lw=1, label=REFERENCE_LABELS[1])
        style.plain_log_y(ax)
        ax.set_title(f"m = {m}, n = {n}, b = {b}")
        ax.set_xlabel("epoch $t$")
        ax.set_ylabel(f"parallel herding {NORM_LABEL[norm]}")
    style.orderer_legend(fig, variants.orderers, band_kind, ax=axes[0])
    fig.tight_layout()
    variants.colorbar(fig)
    style.caption(fig, df, exclude=(*PANEL, *variants.columns),
                  extra=r"c = epoch-0 herding / $\sqrt{n}$ per panel")
    return fig


def draw_vs_n(df, column, norm, band_kind):
    """The herding_vs_n figure (None without two values of n for some m): final herding against n."""
    panels = [(m, g) for m, g in df.groupby("workers") if g.examples_per_worker.nunique() > 1]
    if not panels:
        return None
    variants = style.Variants(df, exclude=("workers", "examples_per_worker"))
    fig, axes = style.figure(len(panels), cols=min(len(panels), 3))
    for ax, (m, g) in zip(axes, panels):
        last = g[g.epoch == g.groupby(["file", "orderer", "seed"]).epoch.transform("max")]
        for orderer, config, n, values in variants.series(last, column, x="examples_per_worker"):
            style.band(ax, n, values, orderer, band_kind, col=variants.color(orderer, config))
        first = g[g.epoch == g.epoch.min()]
        c = float(np.exp(np.nanmean(np.log(first[column]) - 0.5 * np.log(first.examples_per_worker))))
        _references(ax, np.sort(g.examples_per_worker.unique()), c)
        style.log2_axis(ax, g.examples_per_worker)
        style.plain_log_y(ax)
        ax.set_title(f"m = {m}, final epoch")
        ax.set_xlabel("examples per worker $n$")
        ax.set_ylabel(f"parallel herding {NORM_LABEL[norm]}")
    style.orderer_legend(fig, variants.orderers, band_kind, ax=axes[0])
    fig.tight_layout()
    variants.colorbar(fig)
    style.caption(fig, df, exclude=("workers", "examples_per_worker", *variants.columns),
                  extra=r"c fitted to the epoch-0 herding of the panel's runs")
    return fig


def figures(df, norm="inf", band_kind="minmax") -> dict:
    """{figure name: Figure}: herding_epochs, and herding_vs_n when the files sweep n."""
    column = f"herding_{norm}"
    if column not in df or df[column].notna().sum() == 0:
        raise SystemExit(f"herding: no dataset {column} in the files")
    df = df[df[column].notna()]
    out = {"herding_epochs": draw_epochs(df, column, norm, band_kind)}
    vs_n = draw_vs_n(df, column, norm, band_kind)
    if vs_n is not None:
        out["herding_vs_n"] = vs_n
    return out


def plot(df, out, norm="inf", band_kind="minmax"):
    return [path for name, fig in figures(df, norm, band_kind).items() for path in style.save(fig, out, name)]


def main(argv=None) -> int:
    p = style.parser("ordersim.analysis.herding", __doc__)
    p.add_argument("--norm", choices=("inf", "2"), default="inf",
                   help="herding norm: the dataset herding_inf (the CD-GraB paper's) or herding_2")
    args = style.parse(p, argv)
    plot(style.load(args.files), args.out, args.norm, args.band)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
