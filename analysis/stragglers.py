"""Stragglers and gradient coding: loss against simulated time, and time per step against s.

    python -m analysis.stragglers FILE.h5 [FILE.h5 ...] --out DIR [--metric NAME]
                                  [--orderers NAME ...] [--band minmax|std]

For traces of runs with a straggler model (docs/stragglers.md), e.g. the cells of
runs/stragglers.toml. Writes DIR/stragglers.{png,pdf}: one panel per tolerance s, the metric
(default: suboptimality when present, else train loss) against simulated time, one colour per
coding scheme and one line style per orderer (mean over seeds, band over seeds; wait-all, which
tolerates no straggler, appears in every panel), and a last panel with the mean simulated time per
step against s per scheme (markers: mean over runs of each run's mean step time; wait-all as a
horizontal line). Also prints that table.
"""

from __future__ import annotations

import h5py
import numpy as np

from analysis import style
from analysis.convergence import LABELS

SCHEMES = ("wait-all", "ignore-stragglers", "gc-fr", "gc-cr", "pgc-fr", "pgc-cr")
SCHEME_COLORS = dict(zip(SCHEMES, ("black", "tab:gray", "tab:blue", "tab:cyan", "tab:red", "tab:orange")))
ORDERER_STYLES = ("-", "--", ":", "-.")


def step_times(files) -> "pandas.DataFrame":  # noqa: F821
    """One row per run: file, orderer, seed, coding, coding_s, mean and number of step times."""
    import pandas as pd

    rows = []
    for path in files:
        with h5py.File(path, "r") as f:
            for orderer, seeds in f.get("runs", {}).items():
                for name, run in seeds.items():
                    if "stragglers/step_time" not in run:
                        continue
                    t = run["stragglers/step_time"][()]
                    rows.append(dict(file=str(path), orderer=orderer, seed=name, coding=run.attrs["coding"],
                                     coding_s=int(run.attrs["coding_s"]), step_time=float(t.mean()),
                                     steps=len(t)))
    if not rows:
        raise SystemExit("stragglers: no run with a straggler model (stragglers/step_time) in the files")
    return pd.DataFrame(rows)


def table(times) -> "pandas.DataFrame":  # noqa: F821
    """Mean simulated time per step by (coding, s), over runs."""
    return (times.groupby(["coding", "coding_s"]).step_time.agg(["mean", "min", "max", "count"])
            .reset_index().sort_values(["coding", "coding_s"], key=lambda c: c.map(
                {s: i for i, s in enumerate(SCHEMES)}) if c.name == "coding" else c))


def plot(df, times, out, metric=None, orderers=None, band_kind="minmax"):
    df = df[df["sim_time"].notna()] if "sim_time" in df else df.iloc[:0]
    if df.empty:
        raise SystemExit("stragglers: no dataset 'sim_time' in the files (runs without a straggler model)")
    if metric is None:
        metric = "suboptimality" if "suboptimality" in df and df["suboptimality"].notna().any() else "train_loss"
    orderers = orderers or sorted(df.orderer.unique(), key=style.orderer_key)
    df = df[df.orderer.isin(orderers)]
    times = times[times.orderer.isin(orderers)]
    coded = sorted(df.loc[df.coding != "wait-all", "coding_s"].unique().tolist()) or [0]
    fig, axes = style.figure(len(coded) + 1)
    y_label, _ = LABELS.get(metric, (metric, 1.0))
    for ax, s in zip(axes, coded):
        panel = df[(df.coding_s == s) | (df.coding == "wait-all")].copy()
        panel["label"] = panel.coding + " " + panel.orderer
        for scheme in (c for c in SCHEMES if c in set(panel.coding)):
            for k, orderer in enumerate(orderers):
                part = panel[(panel.coding == scheme) & (panel.orderer == orderer)]
                if part.empty:
                    continue
                _, values = next(iter(style.by_seed(part, "epoch", metric).values()))
                _, sim = next(iter(style.by_seed(part, "epoch", "sim_time").values()))
                label = scheme if len(orderers) == 1 else f"{scheme}, {orderer}"
                style.band(ax, np.nanmean(sim, axis=0), values, label, band_kind,
                           col=SCHEME_COLORS.get(scheme), linestyle=ORDERER_STYLES[k % len(ORDERER_STYLES)])
        ax.set_title(f"s = {s}" if s else "no coding")
        ax.set_xlabel("simulated time (s)")
        ax.set_ylabel(y_label)
        style.log_if_positive(ax, panel[metric])
    ax = axes[-1]
    summary = table(times)
    for scheme in (c for c in SCHEMES if c in set(summary.coding)):
        rows = summary[summary.coding == scheme]
        if scheme == "wait-all":
            ax.axhline(rows["mean"].mean(), color=SCHEME_COLORS[scheme], linestyle="--", label=scheme)
            continue
        ax.errorbar(rows.coding_s, rows["mean"], yerr=[rows["mean"] - rows["min"], rows["max"] - rows["mean"]],
                    color=SCHEME_COLORS.get(scheme), marker="o", markersize=3, capsize=2, label=scheme)
    ax.set_xlabel("stragglers tolerated $s$")
    ax.set_ylabel("simulated time per step (s)")
    ax.set_xticks(coded)
    style.legend(axes[0], band_kind, figure_level=True)
    fig.tight_layout()
    return style.save(fig, out, "stragglers"), summary


def main(argv=None) -> int:
    p = style.parser("analysis.stragglers", __doc__)
    p.add_argument("--metric", choices=tuple(LABELS), default=None, metavar="NAME",
                   help="per-epoch dataset against simulated time (default: suboptimality when present, "
                        f"else train_loss); choices: {', '.join(LABELS)}")
    p.add_argument("--orderers", nargs="+", default=None, metavar="NAME",
                   help="orderers to draw (default: every orderer in the files, one line style each)")
    args = style.parse(p, argv)
    _, summary = plot(style.load(args.files), step_times(args.files), args.out, args.metric, args.orderers,
                      args.band)
    print(summary.to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
