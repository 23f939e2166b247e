"""Shared plotting style and command-line plumbing for the analysis scripts.

Every figure: Agg backend, serif fonts sized for a two-column paper, one colour per orderer (the same
in every figure), a mean line over seeds with a shaded band (min-max by default, or mean +- one
standard deviation with ``--band std``), written as PNG (300 dpi) and PDF.
"""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.ticker  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from ordersim.analysis.load import TraceWarning, load_runs  # noqa: E402

RC = {
    "font.family": "serif",
    "font.size": 9,
    "axes.labelsize": 9,
    "axes.titlesize": 9,
    "legend.fontsize": 7.5,
    "xtick.labelsize": 8,
    "ytick.labelsize": 8,
    "lines.linewidth": 1.4,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "grid.linewidth": 0.5,
    "savefig.bbox": "tight",
    "pdf.fonttype": 42,
}
# One colour per orderer, the same in every figure; variants of a configuration get line styles.
COLORS = {"rr": "tab:blue", "so": "tab:cyan", "flipflop": "tab:purple", "wr": "tab:gray",
          "grab": "tab:green", "pair-grab": "tab:olive", "d-grab": "tab:orange",
          "d-grab-pair": "tab:brown", "cd-grab": "tab:red", "greedy": "tab:pink"}
ORDER = tuple(COLORS)
_SPARE = ("black", "darkgoldenrod", "navy", "teal", "indigo", "darkolivegreen")
LINESTYLES = ("-", "--", "-.", ":", (0, (5, 1, 1, 1, 1, 1)), (0, (1, 1)), (0, (6, 2)))
BAND_TEXT = {"minmax": "line: mean over seeds, band: min–max", "std": "line: mean over seeds, band: ±1 std"}
# Configuration columns that tell runs apart besides the orderer, with their short names in labels.
CONFIG = {"problem": "", "data": "", "workers": "m", "examples_per_worker": "n", "batch": "b", "lr": "lr",
          "coding": "", "coding_s": "s"}


def color(label: str):
    """The colour of the orderer a label starts with (the same in every figure)."""
    base = label.split(" ")[0]
    return COLORS.get(base) or _SPARE[sum(map(ord, base)) % len(_SPARE)]


def linestyle(label: str, labels) -> object:
    """Line style of a label among ``labels``: the i-th configuration variant of its orderer gets style i."""
    base = label.split(" ")[0]
    variants = [lab for lab in labels if lab.split(" ")[0] == base]
    return LINESTYLES[variants.index(label) % len(LINESTYLES)] if label in variants else "-"


def orderer_key(name: str):
    base = name.split(" ")[0]
    return (ORDER.index(base) if base in ORDER else len(ORDER), name)


def figure(panels: int, cols: int | None = None, width: float = 3.3, height: float = 2.5):
    """A figure with ``panels`` axes (a flat list), ``cols`` per row (default: all in one row, at most 4)."""
    plt.rcParams.update(RC)
    cols = cols or min(panels, 4)
    rows = -(-panels // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(width * cols, height * rows), squeeze=False)
    axes = axes.ravel()
    for ax in axes[panels:]:
        ax.set_visible(False)
    return fig, list(axes[:panels])


def band(ax, x, values, label: str, kind: str = "minmax", col=None, labels=(), **line):
    """Mean line over the rows of ``values`` (seeds x points; NaN ignored) and a shaded band.

    kind: "minmax" (band from min to max over seeds) or "std" (mean +- one standard deviation).
    labels: every label of the axes, so that configuration variants of one orderer get line styles.
    """
    values = np.atleast_2d(np.asarray(values, dtype=float)).copy()
    values[~np.isfinite(values)] = np.nan  # a diverged run: inf or NaN losses
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN columns
        mean = np.nanmean(values, axis=0)
        if kind == "std":
            sd = np.nanstd(values, axis=0)
            lo, hi = mean - sd, mean + sd
        else:
            lo, hi = np.nanmin(values, axis=0), np.nanmax(values, axis=0)
    col = col if col is not None else color(label)
    line.setdefault("linestyle", linestyle(label, labels))
    ax.plot(x, mean, label=label, color=col, **line)
    if values.shape[0] > 1:
        ax.fill_between(x, lo, hi, color=col, alpha=0.2, linewidth=0)
    return mean


def log_if_positive(ax, values, axis: str = "y"):
    """Log scale on ``axis`` when every finite value is > 0 (rates live on log scales)."""
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v)]
    if v.size and (v > 0).all():
        (ax.set_yscale if axis == "y" else ax.set_xscale)("log")


def legend(ax, band_kind: str | None = "minmax", figure_level: bool = False, **kw):
    """The legend of ``ax``, titled with what the line and band are; ``figure_level``: one legend above
    all panels of the figure (for figures whose panels share their lines)."""
    handles, labels = ax.get_legend_handles_labels()
    if not handles:
        return
    title = BAND_TEXT.get(band_kind) if band_kind else None
    if figure_level:
        ax.figure.legend(handles, labels, title=title, title_fontsize=7, loc="lower center",
                         bbox_to_anchor=(0.5, 1.0), ncol=min(len(labels), 6), frameon=False, **kw)
    else:
        ax.legend(handles, labels, title=title, title_fontsize=7, **kw)


def plain_log_y(ax):
    """Log y axis whose tick labels are plain numbers (3, 4, 6) rather than 3x10^0 on short ranges."""
    ax.set_yscale("log")
    fmt = matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}")
    ax.yaxis.set_major_formatter(fmt)
    ax.yaxis.set_minor_formatter(matplotlib.ticker.FuncFormatter(
        lambda v, _: f"{v:g}" if ax.get_ylim()[1] / ax.get_ylim()[0] < 10 else ""))


def log2_axis(ax, ticks=None):
    """Log base 2 x axis with plain numbers as tick labels (at ``ticks``, e.g. the swept values)."""
    ax.set_xscale("log", base=2)
    if ticks is not None:
        ax.set_xticks(sorted(set(np.asarray(ticks).tolist())))
    ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))
    ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())


DEFAULT_DPI = 300
DPI = DEFAULT_DPI  # PNG resolution used by save(); the scripts set it from --dpi


def save(fig, out: Path, name: str) -> list[Path]:
    """Write ``out/name.png`` (at DPI, set by --dpi) and ``out/name.pdf``; return both paths."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / f"{name}.png", out / f"{name}.pdf"]
    fig.savefig(paths[0], dpi=DPI)
    fig.savefig(paths[1])
    plt.close(fig)
    for p in paths:
        print(f"wrote {p}")
    return paths


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """The module docstring as the description, verbatim; defaults shown where there is one."""

    def _get_help_string(self, action):
        text = action.help or ""
        if action.default not in (None, False, argparse.SUPPRESS) and "%(default)" not in text \
                and action.option_strings:
            text += " (default: %(default)s)"
        return text


def base_parser(module: str, doc: str) -> argparse.ArgumentParser:
    """An ArgumentParser named ``python -m MODULE`` whose description is the module docstring."""
    return argparse.ArgumentParser(prog=f"python -m {module}", description=doc, formatter_class=HelpFormatter)


def parser(module: str, doc: str, files_help: str = "ordersim trace files (layout: docs/trace-format.md)"
           ) -> argparse.ArgumentParser:
    """The arguments every figure script shares: FILE.h5 ..., --out DIR, --band, --dpi."""
    p = base_parser(module, doc)
    p.add_argument("files", nargs="+", metavar="FILE.h5", help=files_help)
    p.add_argument("--out", type=Path, required=True, metavar="DIR",
                   help="directory for the figures (created if missing); each figure as NAME.png and NAME.pdf")
    p.add_argument("--band", choices=("minmax", "std"), default="minmax",
                   help="shaded band over seeds: min-max, or mean +- one standard deviation")
    p.add_argument("--dpi", type=int, default=DEFAULT_DPI, help="resolution of the PNG files (the PDFs are vector)")
    return p


def parse(p: argparse.ArgumentParser, argv):
    """Parse the arguments and apply the shared ones (--dpi)."""
    global DPI
    args = p.parse_args(argv)
    DPI = args.dpi
    return args


def load(files) -> "pandas.DataFrame":  # noqa: F821
    """load_runs plus a ``label`` column: the orderer, and the configuration values that vary."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", TraceWarning)
        df = load_runs(files)
    for w in caught:  # one plain line each on stderr, not the warnings module's source excerpt
        print(f"warning: {w.message}", file=sys.stderr)
    print_code_states(df)
    return with_labels(df)


def print_code_states(df) -> None:
    """One line per code state the loaded files come from (load_runs warns when there are several)."""
    for label, files in df.attrs.get("code_states", {}).items():
        print(f"code: {label} ({len(files)} file{'s' if len(files) > 1 else ''})")


def with_labels(df, exclude=()):
    """A copy of df with ``label``: the orderer plus the CONFIG values that vary (except ``exclude``)."""
    varying = [c for c in CONFIG if c in df and c not in exclude and df[c].nunique(dropna=False) > 1]
    df = df.copy()

    def label(row):
        extra = [f"{CONFIG[c]}={row[c]}" if CONFIG[c] else str(row[c]) for c in varying]
        return row["orderer"] + (f" ({', '.join(extra)})" if extra else "")

    df["label"] = df.apply(label, axis=1) if len(df) else []
    return df


def by_seed(df, x: str, y: str):
    """Per label: (x values, runs x points array of y), aligned on x, NaN where a run lacks a point.

    A run is one (file, seed); labels are sorted by orderer (the COLORS order).
    """
    out = {}
    for lab, g in df.groupby("label", sort=False):
        table = g.pivot_table(index=["file", "seed"], columns=x, values=y, aggfunc="mean", dropna=False)
        out[lab] = (table.columns.to_numpy(dtype=float), table.to_numpy(dtype=float))
    return dict(sorted(out.items(), key=lambda kv: orderer_key(kv[0])))
