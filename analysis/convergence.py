"""Convergence: train loss, suboptimality, gradient norm and test accuracy per orderer.

    python -m ordersim.analysis.convergence FILE.h5 [FILE.h5 ...] --out DIR [--band minmax|std]
                                   [--x epochs time sim_time]

Writes DIR/convergence_epochs.{png,pdf} (against epochs), DIR/convergence_time.{png,pdf}
(against training time: at each measured epoch, the mean over seeds of the run's cumulative
``train_time``, the wall-clock seconds of its training epochs without the measurements; traces
older than train_time fall back to ``wall_time``, which includes them, and the axis says so)
and, for traces with a straggler model, DIR/convergence_sim_time.{png,pdf} (against simulated
time, the cumulative ``sim_time``; docs/stragglers.md). ``--x`` picks the figures. One panel per metric present in the files, one line per orderer (and per configuration
when the files differ in m, n, b, lr, problem, coding, s or a setting such as a swept momentum:
shades of the orderer's colour, a grey scale at the right says which): mean over seeds with a
band, markers at measured epochs only. Plain runs given with straggler runs are lines of their
own (coding, s and stragglers "none" on the grey scale); the simulated-time figure draws the
straggler runs only (a plain run has no simulated time) and its caption says how many it left out.
The caption under the panels gives the configuration the runs share (problem, m, n, b, the step
size against L).
"""

from __future__ import annotations

import warnings

import numpy as np

from ordersim.analysis import extras

extras.script_requires(__name__)  # before matplotlib and pandas are imported: one line if they are missing
from ordersim.analysis import style  # noqa: E402

# dataset -> axis label (with units), scale factor (accuracies stored as fractions shown in %)
LABELS = {
    "train_loss": (r"train loss $f(x_t)$", 1.0),
    "suboptimality": (r"suboptimality $f(x_t)-f^\star$", 1.0),
    "grad_norm": (r"gradient norm $\|\nabla f(x_t)\|_2$", 1.0),
    "test_accuracy": ("test accuracy (%)", 100.0),
    "test_loss": ("test loss", 1.0),
    "train_accuracy": ("train accuracy (%)", 100.0),
    "dist_to_opt": (r"distance to optimum $\|x_t-x^\star\|_2$", 1.0),
}
DEFAULT_METRICS = ("train_loss", "suboptimality", "grad_norm", "test_accuracy")
X_AXES = (("epochs", "epoch", "epoch $t$ (passes over the data)"),
          ("time", "train_time", "training time (s, wall clock)"),
          ("sim_time", "sim_time", "simulated time (s)"))


def time_column(df) -> tuple[str, str]:
    """The wall-clock axis and its label: ``train_time`` (the training alone), or ``wall_time``
    for traces written before train_time was recorded (their time includes the measurements)."""
    if "train_time" in df and df["train_time"].notna().any():
        return X_AXES[1][1:]
    return "wall_time", "wall-clock time (s, measurements included)"


def present_metrics(df, names) -> list[str]:
    """The metrics of ``names`` that some run of ``df`` has."""
    return [m for m in names if m in df and df[m].notna().any()]


def has_sim_time(df) -> bool:
    """Whether some run of ``df`` has a straggler model's simulated time."""
    return "sim_time" in df and df["sim_time"].notna().any()


def figures(df, band_kind="minmax", names=DEFAULT_METRICS, x_axes=None) -> dict:
    """{figure name: Figure}; x_axes: names from X_AXES (None: epochs, time, and sim_time when the
    files have it). One line per (orderer, configuration): the orderer's colour, shaded by the
    configuration (m, n, b, lr, ...) when the files differ in it, with a grey scale saying which."""
    metrics = [(m, *LABELS[m]) for m in present_metrics(df, names)]
    if not metrics:
        raise SystemExit(f"convergence: none of {', '.join(names)} in the files")
    has_sim = has_sim_time(df)
    if x_axes is None:
        x_axes = ["epochs", "time"] + (["sim_time"] if has_sim else [])
    elif "sim_time" in x_axes and not has_sim:
        raise SystemExit("convergence: --x sim_time needs traces of runs with a straggler model "
                         "(no dataset 'sim_time' in the files)")
    out = {}
    for name, x_col, x_label in (axis for axis in X_AXES if axis[0] in x_axes):
        if name == "time":
            x_col, x_label = time_column(df)
        shown, left_out = df, ""
        if name == "sim_time":  # a plain run beside straggler runs has no simulated time to draw at
            timed = df.groupby(["file", "orderer", "seed"]).sim_time.transform("count") > 0
            shown, plain = df[timed], df[~timed].groupby(["file", "orderer", "seed"]).ngroups
            if plain:
                left_out = f"{plain} run(s) without a straggler model (no simulated time) not drawn"
        # the panels of the runs drawn: a metric only the plain runs have (their test split) would be
        # an empty panel against simulated time, and an empty log axis raises in matplotlib
        panels = [entry for entry in metrics if entry[0] in present_metrics(shown, names)]
        variants = style.Variants(shown)
        fig, axes = style.figure(len(panels))
        times = ({(o, c): v for o, c, _, v in variants.series(shown, x_col)} if x_col != "epoch" else None)
        for ax, (metric, y_label, scale) in zip(axes, panels):
            scale = scale if df[metric].max() <= 1 else 1.0  # accuracy stored as a fraction or in %
            for orderer, config, epochs, values in variants.series(shown, metric):
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", RuntimeWarning)  # an epoch no run measured
                    x = epochs if times is None else np.nanmean(times[orderer, config], axis=0)
                style.band(ax, x, values * scale, orderer, band_kind, col=variants.color(orderer, config),
                           epochs=epochs)
            ax.set_xlabel(x_label)
            if x_col == "epoch":
                style.counted_x(ax)
            ax.set_ylabel(y_label)
            if "accuracy" not in metric:
                style.log_if_positive(ax, shown[metric])
        style.orderer_legend(fig, variants.orderers, band_kind)
        fig.tight_layout()
        variants.colorbar(fig)
        style.caption(fig, shown, exclude=variants.columns, extra=left_out)
        out[f"convergence_{name}"] = fig
    return out


def plot(df, out, band_kind="minmax", names=DEFAULT_METRICS, x_axes=None):
    """Write the figures of ``figures`` to ``out``; return the paths."""
    return [path for name, fig in figures(df, band_kind, names, x_axes).items() for path in style.save(fig, out, name)]


def main(argv=None) -> int:
    p = style.parser("ordersim.analysis.convergence", __doc__)
    p.add_argument("--metrics", nargs="+", choices=tuple(LABELS), default=list(DEFAULT_METRICS), metavar="NAME",
                   help=f"per-epoch datasets to plot, one panel each (those absent from the files are skipped); "
                        f"choices: {', '.join(LABELS)}")
    p.add_argument("--x", nargs="+", choices=[a[0] for a in X_AXES], default=None, metavar="AXIS",
                   help="x axes, one figure each: epochs, time (the training's wall-clock time, "
                        "without the measurements), sim_time (simulated time "
                        "of a straggler model); default: epochs and time, plus sim_time when present")
    args = style.parse(p, argv)
    df = style.load(args.files)
    # values the files cannot have: a usage error (exit 2) before anything is drawn
    if not present_metrics(df, args.metrics):
        p.error(f"argument --metrics: {', '.join(map(repr, args.metrics))} not in the files; allowed: the "
                f"metrics they have: {', '.join(present_metrics(df, LABELS))}")
    if "sim_time" in (args.x or ()) and not has_sim_time(df):
        p.error("argument --x: 'sim_time' is not allowed; allowed: epochs, time (no run in the files has a "
                "straggler model, so none has a simulated time)")
    plot(df, args.out, args.band, args.metrics, args.x)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
