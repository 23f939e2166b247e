"""Convergence: train loss, suboptimality, gradient norm and test accuracy per orderer.

    python -m analysis.convergence FILE.h5 [FILE.h5 ...] --out DIR [--band minmax|std]

Writes DIR/convergence_epochs.{png,pdf} (against epochs) and DIR/convergence_time.{png,pdf}
(against wall-clock time: at each measured epoch, the mean over seeds of the run's cumulative
``wall_time``). One panel per metric present in the files, one line per orderer (and per
configuration when the files differ in m, n, b, lr or problem): mean over seeds with a band.
"""

from __future__ import annotations

import numpy as np

from analysis import style

# dataset, axis label (with units), scale factor (accuracy as a percentage)
METRICS = (
    ("train_loss", r"train loss $f(x_t)$", 1.0),
    ("suboptimality", r"suboptimality $f(x_t)-f^\star$", 1.0),
    ("grad_norm", r"gradient norm $\|\nabla f(x_t)\|_2$", 1.0),
    ("test_accuracy", "test accuracy (%)", 100.0),
)
X_AXES = (("epochs", "epoch", "epoch $t$ (passes over the data)"),
          ("time", "wall_time", "wall-clock time (s)"))


def plot(df, out, band_kind="minmax"):
    metrics = [m for m in METRICS if m[0] in df and df[m[0]].notna().any()]
    if not metrics:
        raise SystemExit("convergence: none of train_loss, suboptimality, grad_norm, test_accuracy in the files")
    written = []
    for name, x_col, x_label in X_AXES:
        fig, axes = style.figure(len(metrics))
        times = style.by_seed(df, "epoch", "wall_time") if x_col == "wall_time" else None
        for ax, (metric, y_label, scale) in zip(axes, metrics):
            scale = scale if df[metric].max() <= 1 else 1.0  # accuracy stored as a fraction or in %
            series = style.by_seed(df, "epoch", metric)
            for lab, (epochs, values) in series.items():
                x = epochs if times is None else np.nanmean(times[lab][1], axis=0)
                style.band(ax, x, values * scale, lab, band_kind, labels=list(series))
            ax.set_xlabel(x_label)
            ax.set_ylabel(y_label)
            if metric != "test_accuracy":
                style.log_if_positive(ax, df[metric])
        style.legend(axes[0], band_kind, figure_level=True)
        fig.tight_layout()
        written += style.save(fig, out, f"convergence_{name}")
    return written


def main(argv=None) -> int:
    args = style.parse(style.parser(__doc__.split("\n")[0]), argv)
    plot(style.load(args.files), args.out, args.band)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
