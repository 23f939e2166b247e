"""The random-vector parallel herding experiment as the CD-GraB paper's figure.

    python -m ordersim.analysis.herding_sim HERDING.h5 [HERDING.h5 ...] --out DIR [--band minmax|std] [--linear]

Input: files written by ``python -m ordersim herding-sim`` (docs/herding_sim.md); several files
(e.g. one per --seed) are combined, and the band is then over seeds. Writes DIR/herding_sim.{png,pdf}:
parallel herding (inf-norm, prefixes at step boundaries) against the reorder round, one panel per
number of workers m (n = total / m vectors each), one line per orderer, log y axis (--linear for a
linear one), with the c*sqrt(n) (random orders) and c*log(n) (balanced orders) levels (the
curves of analysis.herding's herding_vs_n), c = the panel's round-0 herding / sqrt(n). Round 0 is
the shared random starting order. cd-kh, ordersim's own coordinated kernel halving (in no paper),
is named so in the caption; the centralized orderers (kh-sgd, sbw) have a curve in the m = 1 panel
only.
"""

from __future__ import annotations

import numpy as np

from ordersim.analysis import extras

extras.script_requires(__name__)  # before matplotlib and pandas are imported: one line if they are missing
from ordersim.analysis import style  # noqa: E402
from ordersim.analysis.herding import REFERENCE_LABELS  # noqa: E402
from ordersim.analysis.load import load_herding_sim  # noqa: E402


def draw(df, band_kind="minmax", log=True, title=None):
    """The herding_sim figure: one panel per m, one line per orderer, the c sqrt(n) and c log(n)
    levels (c = the round-0 herding of the panel / sqrt(n): the vectors are the same in every round, so
    the round-0 level is every round's random-order level); ``title`` opens
    the caption when given."""
    if df.empty:
        raise SystemExit("herding_sim: no herding-sim results in the files")
    panels = sorted(df.groupby("workers"), key=lambda kv: kv[0])
    orderers = sorted(df.orderer.unique(), key=style.orderer_key)
    fig, axes = style.figure(len(panels), cols=5, width=2.6, height=2.4)
    for ax, (m, g) in zip(axes, panels):
        g = g.assign(label=g.orderer)
        for lab, (rounds, values) in style.by_seed(g, "round", "herding").items():
            style.band(ax, rounds, values, lab, band_kind, epochs=rounds)
        n = g.examples_per_worker.iloc[0]
        c = g.loc[g["round"] == g["round"].min(), "herding"].mean() / np.sqrt(n)
        ends = [g["round"].min(), g["round"].max()]
        ax.plot(ends, [c * np.sqrt(n)] * 2, "k--", lw=1, label=REFERENCE_LABELS[0])
        ax.plot(ends, [c * np.log(n)] * 2, "k:", lw=1, label=REFERENCE_LABELS[1])
        ax.set_title(f"m = {m}, n = {n}")
        ax.set_xlabel("reorder round")
        style.counted_x(ax)
        if log:
            style.plain_log_y(ax)
        if ax.get_subplotspec().is_first_col():
            ax.set_ylabel(r"parallel herding $\|\cdot\|_\infty$")
    style.orderer_legend(fig, orderers, band_kind if df.seed.nunique() > 1 else None, ax=axes[0])
    fig.tight_layout()
    first = df.iloc[0]
    seeds = df.seed.nunique()
    ours = "; cd-kh is ordersim's own (in no paper)" if "cd-kh" in orderers else ""
    if 1 in df.workers.values:
        ours += "; at m = 1 cd-kh is kh-sgd and cd-grab is d-grab-pair (their lines coincide)"
    style.caption(fig, None, extra=(f"{title} " if title else "") + (
        f"{int(first.workers * first.examples_per_worker)} unit-norm Gaussian vectors in d = {first.dim}, "
        f"centred per worker; b = {first.batch}; {first.norm}-norm, prefixes at step boundaries; "
        f"{seeds} seed{'s' if seeds > 1 else ''}; c = round-0 herding / $\\sqrt{{n}}$ per panel{ours}"))
    return fig


def plot(df, out, band_kind="minmax", log=True, title=None, name="herding_sim"):
    """The figure as DIR/NAME.{png,pdf}."""
    return style.save(draw(df, band_kind, log, title), out, name)


def main(argv=None) -> int:
    p = style.parser("ordersim.analysis.herding_sim", __doc__,
                     files_help="files written by python -m ordersim herding-sim (docs/herding_sim.md)",
                     files_type=style.hdf5_file)
    p.add_argument("--linear", action="store_true", help="linear y axis instead of log")
    args = style.parse(p, argv)
    df = style.read_with_plain_warnings(load_herding_sim, args.files)
    style.print_code_states(df)
    plot(df, args.out, args.band, log=not args.linear)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
