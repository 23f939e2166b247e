"""The random-vector parallel herding experiment as the CD-GraB paper's figure.

    python -m ordersim.analysis.herding_sim HERDING.h5 [HERDING.h5 ...] --out DIR [--band minmax|std] [--linear]

Input: files written by ``python -m ordersim herding-sim`` (docs/herding_sim.md); several files
(e.g. one per --seed) are combined, and the band is then over seeds. Writes DIR/herding_sim.{png,pdf}:
parallel herding (inf-norm, prefixes at step boundaries) against the reorder round, one panel per
number of workers m (n = total / m vectors each), one line per orderer, log y axis (--linear for a
linear one). Round 0 is the shared random starting order.
"""

from __future__ import annotations

from ordersim.analysis import style
from ordersim.analysis.load import load_herding_sim


def plot(df, out, band_kind="minmax", log=True):
    if df.empty:
        raise SystemExit("herding_sim: no herding-sim results in the files")
    panels = sorted(df.groupby("workers"), key=lambda kv: kv[0])
    fig, axes = style.figure(len(panels), cols=min(len(panels), 5), width=2.6, height=2.4)
    for ax, (m, g) in zip(axes, panels):
        g = g.assign(label=g.orderer)
        for lab, (rounds, values) in style.by_seed(g, "round", "herding").items():
            style.band(ax, rounds, values, lab, band_kind, marker="o", ms=2.5)
        n = g.examples_per_worker.iloc[0]
        ax.set_title(f"m = {m}, n = {n}")
        ax.set_xlabel("reorder round")
        if log:
            style.plain_log_y(ax)
    axes[0].set_ylabel(r"parallel herding $\|\cdot\|_\infty$")
    style.legend(axes[0], band_kind if df.seed.nunique() > 1 else None, figure_level=True)
    fig.tight_layout()
    return style.save(fig, out, "herding_sim")


def main(argv=None) -> int:
    p = style.parser("ordersim.analysis.herding_sim", __doc__,
                     files_help="files written by python -m ordersim herding-sim (docs/herding_sim.md)")
    p.add_argument("--linear", action="store_true", help="linear y axis instead of log")
    args = style.parse(p, argv)
    df = load_herding_sim(args.files)
    style.print_code_states(df)
    plot(df, args.out, args.band, log=not args.linear)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
