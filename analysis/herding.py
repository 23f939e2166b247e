"""Parallel herding per epoch per orderer, and its final value against n with the sqrt(n) and
log(n) reference curves.

    python -m ordersim.analysis.herding FILE.h5 [FILE.h5 ...] --out DIR [--norm inf|2] [--band minmax|std]

DIR/herding_epochs.{png,pdf}: herding of the order used in epoch t+1 (dataset herding_inf or
herding_2) against t, one panel per configuration (m, n, b), one line per orderer (mean over seeds
with a band), log scale. It has no sqrt(n) or log(n) level: the herding of epoch t is measured on
the per-example gradients at x_t, which shrink as the model trains, so a level scaled from the
epoch-0 herding (at the initial model) does not say where random or balanced orders should be at
a later epoch (rr, a random order every epoch, ends far below it). At one n the levels compare
nothing; the sqrt(n) against log(n) comparison is across n, in herding_vs_n.

DIR/herding_vs_n.{png,pdf} (only when the files hold at least two values of n for some m): each
run's last-epoch herding against n, log-log, one panel per m, with c*sqrt(n) (random orders,
Theta(sqrt n)) and c*log(n) (balanced orders, O~(1): the same constant with log n in place of
sqrt n). c is fitted by least squares on log H - log sqrt(n) to the herding H of every run of the
panel at one epoch that every n has, the first (epoch 0: the random first-epoch order at the
initial model), so that every n enters at the same point; the caption names that epoch. A config
field that varies only with n (the data spec, when n is set through it) does not split lines.
"""

from __future__ import annotations

import numpy as np

from ordersim.analysis import extras

extras.script_requires(__name__)  # before matplotlib and pandas are imported: one line if they are missing
from ordersim.analysis import style  # noqa: E402

NORM_LABEL = {"inf": r"$\|\cdot\|_\infty$", "2": r"$\|\cdot\|_2$"}


def _references(ax, n_values, c):
    n = np.asarray(n_values, dtype=float)
    ax.plot(n, c * np.sqrt(n), "k--", lw=1, label=REFERENCE_LABELS[0])
    ax.plot(n, c * np.log(n), "k:", lw=1, label=REFERENCE_LABELS[1])


REFERENCE_LABELS = (r"$c\sqrt{n}$ (random orders)", r"$c\log n$ (balanced orders)")
PANEL = ("workers", "examples_per_worker", "batch")


def draw_epochs(df, column, norm, band_kind):
    """The herding_epochs figure: one panel per (m, n, b); no reference level (the module's doc)."""
    panels = list(df.groupby(list(PANEL)))
    variants = style.Variants(df, exclude=PANEL)
    fig, axes = style.figure(len(panels), cols=min(len(panels), 3))
    for ax, ((m, n, b), g) in zip(axes, panels):
        for orderer, config, epochs, values in variants.series(g, column):
            style.band(ax, epochs, values, orderer, band_kind, col=variants.color(orderer, config), epochs=epochs)
        style.plain_log_y(ax)
        ax.set_title(f"m = {m}, n = {n}, b = {b}")
        ax.set_xlabel("epoch $t$")
        style.counted_x(ax)
        ax.set_ylabel(f"parallel herding {NORM_LABEL[norm]}")
    style.orderer_legend(fig, variants.orderers, band_kind)
    fig.tight_layout()
    variants.colorbar(fig)
    style.caption(fig, df, exclude=(*PANEL, *variants.columns))
    return fig


def fit_epoch(g):
    """The first epoch that every n of the panel ``g`` has measured (None if there is none): the
    point at which c is fitted, the same for every n."""
    common = set.intersection(*(set(runs.epoch) for _, runs in g.groupby("examples_per_worker")))
    return min(common) if common else None


def draw_vs_n(df, column, norm, band_kind):
    """The herding_vs_n figure (None without two values of n for some m): final herding against n."""
    panels = [(m, g) for m, g in df.groupby("workers") if g.examples_per_worker.nunique() > 1]
    if not panels:
        return None
    variants = style.Variants(df, exclude=("workers", "examples_per_worker"))
    fig, axes = style.figure(len(panels), cols=min(len(panels), 3))
    fitted, finals = set(), []
    for ax, (m, g) in zip(axes, panels):
        last = g[g.epoch == g.groupby(["file", "orderer", "seed"]).epoch.transform("max")]
        finals.extend(last.epoch)
        # a run has one n: the band at each n is over that n's runs, numbered 0, 1, ... there
        last = last.assign(run=last.groupby(["orderer", *variants.columns, "examples_per_worker"],
                                            dropna=False).cumcount())
        for orderer, config, n, values in variants.series(last, column, x="examples_per_worker", run=("run",)):
            style.band(ax, n, values, orderer, band_kind, col=variants.color(orderer, config))
        epoch = fit_epoch(g)
        if epoch is not None:
            at = g[g.epoch == epoch]
            c = float(np.exp(np.nanmean(np.log(at[column]) - 0.5 * np.log(at.examples_per_worker))))
            _references(ax, np.sort(g.examples_per_worker.unique()), c)
            fitted.add(int(epoch))
        style.log2_axis(ax, g.examples_per_worker)
        style.plain_log_y(ax)
        ax.set_title(f"m = {m}, final epoch")
        ax.set_xlabel("examples per worker $n$")
        ax.set_ylabel(f"parallel herding {NORM_LABEL[norm]}")
    style.orderer_legend(fig, variants.orderers, band_kind, ax=axes[0])
    fig.tight_layout()
    variants.colorbar(fig)
    how = (f"c fitted per panel to the epoch-{style.value_text(sorted(fitted), 6)} herding of all its runs, "
           "the same epoch for every n" if fitted else "no epoch that every n has: no reference curves")
    style.caption(fig, df, exclude=("workers", "examples_per_worker", *variants.columns),
                  extra=f"points: each run's last epoch (T = {style.value_text(finals, 6)}); {how}")
    return fig


def figures(df, norm="inf", band_kind="minmax") -> dict:
    """{figure name: Figure}: herding_epochs, and herding_vs_n when the files sweep n."""
    column = f"herding_{norm}"
    if column not in df or df[column].notna().sum() == 0:
        raise SystemExit(f"herding: no run in the files measured {column} (runs made with --no-herding, "
                         f"herding = false, have none; herding-sim files: ordersim.analysis.herding_sim)")
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
