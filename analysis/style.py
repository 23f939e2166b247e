"""Shared plotting style and command-line plumbing for the analysis scripts.

Every figure: Agg backend, serif fonts in points, WIDTH inches wide (--width; a one-column
paper's text width by default, so that it prints at the nominal sizes) with its panels wrapped into
rows (``figure``), legends, colour scale and caption inside that width (``save``), log axes with
enough labelled ticks to read values off (``log_axis``), one colour, marker and line style per
orderer (the same in every figure: ``orderer_style``), a mean line over seeds with a shaded band
(min-max by default, or mean +- one standard deviation with ``--band std``), written as PNG
(300 dpi) and PDF.

For a new figure script (the API the scripts here use):

    fig, axes = style.figure(panels)
    variants = style.Variants(df)                 # the configurations (m, n, b, lr, ...) that vary
    for orderer, config, epochs, values in variants.series(df, "suboptimality"):
        style.band(ax, epochs, values, orderer, col=variants.color(orderer, config))
    style.orderer_legend(fig, variants.orderers, band_kind)   # one entry per orderer
    variants.colorbar(fig)                         # the varying configuration, as a shade scale
    style.caption(fig, df, exclude=variants.columns)          # problem, m, n, b, step against L
    style.save(fig, out, "name")

``band`` draws a point only at an x where every run (seed) of the line was measured, with the
orderer's marker, and breaks the line where measurements are missing (docs/analysis.md).
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
import textwrap
import warnings
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.cm  # noqa: E402
import matplotlib.colors  # noqa: E402
import matplotlib.lines  # noqa: E402
import matplotlib.ticker  # noqa: E402
import matplotlib.transforms  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from ordersim.analysis.load import TraceWarning, load_runs  # noqa: E402
from ordersim.trace import NotATrace, check_hdf5_file, trace_root  # noqa: E402

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
# One colour per orderer, the same in every figure; a name not listed gets a colour derived from
# the name alone (``orderer_style``), so an orderer registered later is stable across figures too.
COLORS = {"rr": "tab:blue", "so": "tab:cyan", "flipflop": "tab:purple", "wr": "tab:gray",
          "grab": "tab:green", "pair-grab": "tab:olive", "d-grab": "tab:orange",
          "d-grab-pair": "tab:brown", "cd-grab": "tab:red", "greedy": "tab:pink",
          "ig": "#000080", "recursive-pair": "#006400", "kh-sgd": "#daa520", "cd-kh": "#8b008b",
          "sbw": "#008080"}
ORDER = tuple(COLORS)
# Other names for a listed orderer: rr with m > 1 is what the papers call D-RR.
ALIASES = {"d-rr": "rr"}
# Marker and line style per orderer: random-order baselines dashed, the balancing orderers solid.
MARKERS = {"rr": "o", "so": "v", "flipflop": "<", "wr": "x", "ig": ">", "grab": "s", "pair-grab": "D",
           "recursive-pair": "d", "d-grab": "^", "d-grab-pair": "P", "cd-grab": "*", "greedy": "X",
           "kh-sgd": "h", "cd-kh": "H", "sbw": "p"}
ORDERER_LINESTYLES = {name: "--" for name in ("rr", "so", "flipflop", "wr", "ig")}
_SPARE_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
LINESTYLES = ("-", "--", "-.", ":", (0, (5, 1, 1, 1, 1, 1)), (0, (1, 1)), (0, (6, 2)))
BAND_TEXT = {"minmax": "line: mean over seeds, band: min–max", "std": "line: mean over seeds, band: ±1 std"}
# Configuration columns that tell runs apart besides the orderer, with their short names in labels
# (none: the value alone); the settings of load_runs (config fields that differ among the files)
# join them under their own names (config_columns).
CONFIG = {"problem": "", "data": "", "workers": "m", "examples_per_worker": "n", "batch": "b", "lr": "lr",
          "coding": "", "coding_s": "s"}


def orderer_of(label: str) -> str:
    """The orderer a label starts with ("cd-grab (m=8)" -> "cd-grab"), aliases resolved."""
    base = label.split(" ")[0]
    return ALIASES.get(base, base)


def _derived_color(name: str) -> str:
    """A colour from the name alone (stable across runs and processes, unlike hash()): a hue from
    its digest at a saturation and lightness that read on white."""
    import colorsys
    import hashlib

    digest = hashlib.sha256(name.encode()).digest()
    hue = int.from_bytes(digest[:4], "big") / 2**32
    r, g, b = colorsys.hls_to_rgb(hue, 0.4 + 0.1 * digest[4] / 255, 0.65 + 0.3 * digest[5] / 255)
    return matplotlib.colors.to_hex((r, g, b))


def orderer_style(label: str) -> dict:
    """``color``, ``marker`` and ``linestyle`` of the orderer a label starts with: the same in every
    figure (fixed for the names in COLORS, derived from the name for others)."""
    base = orderer_of(label)
    if base in COLORS:
        return dict(color=COLORS[base], marker=MARKERS[base], linestyle=ORDERER_LINESTYLES.get(base, "-"))
    import zlib

    return dict(color=_derived_color(base), marker=_SPARE_MARKERS[zlib.crc32(base.encode()) % len(_SPARE_MARKERS)],
                linestyle="-")


def color(label: str):
    """The colour of the orderer a label starts with (the same in every figure)."""
    return orderer_style(label)["color"]


def linestyle(label: str, labels) -> object:
    """Line style of a label among ``labels``: the i-th configuration variant of its orderer gets style i."""
    base = label.split(" ")[0]
    variants = [lab for lab in labels if lab.split(" ")[0] == base]
    return LINESTYLES[variants.index(label) % len(LINESTYLES)] if label in variants else "-"


def orderer_key(name: str):
    """Sort key: the orderers in COLORS order, then other names alphabetically."""
    base = orderer_of(name)
    return (ORDER.index(base) if base in ORDER else len(ORDER), name)


# The width of every figure (--width), whatever it holds: legends, colour scale and caption
# included, so that it prints at the nominal font sizes at this width. The default is the text
# width of a one-column paper (US letter with 1 in margins; A4 with 2.5 cm margins is 6.3 in).
PAPER_WIDTH = 6.5
WIDTH = PAPER_WIDTH
COLUMNS = None  # panels per row (--columns); None: as many as fit at MIN_PANEL_WIDTH
# Narrower, a panel's 8-9 pt tick and axis labels leave its plot too little room.
MIN_PANEL_WIDTH = 2.0
PAD = 0.04  # inches of white around the saved figure's content


def figure(panels, cols: int | None = None, width: float = 3.3, height: float = 2.5):
    """A figure WIDTH inches wide with ``panels`` axes (a flat list, row by row).

    ``panels``: a count, or a list of counts, each the panels of a row of its own (stragglers' one
    row per step size). A row holds at most ``cols`` panels (default 4; --columns overrides) and no
    more than fit at MIN_PANEL_WIDTH: longer rows wrap, with as few panels a row as keep the
    number of rows. ``width`` × ``height``: a panel's shape in inches, whose height it keeps when
    wider and scales down with it when narrower.
    """
    plt.rcParams.update(RC)
    rows = [panels] if isinstance(panels, int) else list(panels)
    most = min(row_capacity(cols), max(rows))

    def row_count(columns):
        return sum(-(-k // columns) for k in rows)

    cols = next(c for c in range(1, most + 1) if row_count(c) == row_count(most))
    panel_height = height * min(1.0, WIDTH / cols / width)
    fig = plt.figure(figsize=(WIDTH, panel_height * row_count(cols)))
    grid = fig.add_gridspec(row_count(cols), cols)
    axes, top = [], 0
    for k in rows:
        axes += [fig.add_subplot(grid[top + i // cols, i % cols]) for i in range(k)]
        top += -(-k // cols)
    return fig, axes


def row_capacity(cols: int | None = None) -> int:
    """The most panels ``figure`` puts in a row: --columns, else ``cols`` (default 4) but no more
    than fit at MIN_PANEL_WIDTH."""
    return COLUMNS or min(cols or 4, max(1, int(WIDTH // MIN_PANEL_WIDTH)))


def fits_in_a_row(panels: int) -> bool:
    """Whether ``figure`` puts ``panels`` panels side by side in one row (at WIDTH, --columns)."""
    return panels <= row_capacity(panels)


def figure_legend(fig, columns: int, **kw):
    """``fig.legend(**kw)`` in at most ``columns`` columns, fewer until it is no wider than the
    figure, and as few as fill the same rows (6 entries in 3 + 3, not 5 + 1); its title on several
    lines if one column is still too wide."""

    room = (fig.get_figwidth() - 2 * PAD) * fig.dpi
    renderer = fig.canvas.get_renderer()
    for k in range(columns, 0, -1):
        legend = fig.legend(ncols=k, **kw)
        if legend.get_window_extent(renderer).width <= room:
            entries = len(legend.get_texts())
            even = -(-entries // -(-entries // k))  # the fewest columns in as many rows
            if even < k:
                legend.remove()
                legend = fig.legend(ncols=even, **kw)
            return legend
        if k > 1:
            legend.remove()  # its columns are laid out when it is made
    title = legend.get_title()
    text = title.get_text()
    title.set_text(textwrap.fill(text, max(10, int(len(text) * room / title.get_window_extent(renderer).width))))
    return legend


def fit_width(fig):
    """Bring what sticks out at the sides (the colour scale, a legend beside a panel, long tick
    labels) inside the figure's width: the panels narrow, the gaps between them and every font
    keep their size."""
    width = fig.get_figwidth()
    grid = [ax for ax in fig.axes if ax.get_subplotspec() is not None]
    if not grid:
        return
    columns = grid[0].get_subplotspec().get_gridspec().ncols
    for _ in range(3):  # tick labels move with the panels: measure again
        box = fig.get_tightbbox(fig.canvas.get_renderer())
        left, right = max(0.0, PAD - box.x0), max(0.0, box.x1 - width + PAD)
        if left + right < 0.01:
            return
        pars = fig.subplotpars
        panel = (pars.right - pars.left) * width / (columns + (columns - 1) * pars.wspace)
        gap = pars.wspace * panel
        new_left, new_right = pars.left + left / width, pars.right - right / width
        narrower = ((new_right - new_left) * width - (columns - 1) * gap) / columns
        fig.subplots_adjust(left=new_left, right=new_right, wspace=gap / narrower)
        for ax in fig.axes:  # the colour scale at the right of the panels follows their right edge
            if ax.get_subplotspec() is None:
                x0, y0, w, h = ax.get_position().bounds
                ax.set_position([x0 - right / width, y0, w, h])


def _regular_breaks(epochs) -> np.ndarray:
    """Indices i after which a line through ``epochs`` must break: the step from epoch i to the next
    is larger than the most common step between them (an epoch in between was not measured; the
    shorter last step of ``measure_every`` is not a gap)."""
    e = np.asarray(epochs, dtype=float)
    if e.size < 3:
        return np.array([], dtype=int)
    steps = np.diff(e)
    values, counts = np.unique(steps, return_counts=True)
    return np.flatnonzero(steps > values[counts.argmax()])


def band(ax, x, values, label: str, kind: str = "minmax", col=None, labels=(), epochs=None, **line):
    """Mean line over the rows of ``values`` (runs x points) and a shaded band over the runs.

    kind: "minmax" (band from min to max over runs) or "std" (mean +- one standard deviation).
    Unmeasured points are not drawn as if measured: the mean is drawn only where every run has a
    finite value (a killed or diverged run, or one measured at other epochs, would shift it),
    points that only some runs have are open markers, not joined, and with ``epochs`` (the epoch
    of each column) the line breaks where an epoch of the measurement grid is missing. Markers (the
    orderer's) sit on measured points only: every point when some epochs were not measured or
    there are few points, else every k-th.
    labels: every label of the axes; configuration variants of one orderer then get line styles
    (the scripts here shade them instead: ``Variants``).
    """
    values = np.atleast_2d(np.asarray(values, dtype=float)).copy()
    values[~np.isfinite(values)] = np.nan  # a diverged run: inf or NaN losses
    x = np.asarray(x, dtype=float)
    measured = np.isfinite(values).sum(axis=0)
    full = (measured == values.shape[0]) & np.isfinite(x)
    partial = (measured > 0) & ~full & np.isfinite(x)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN columns
        mean = np.nanmean(values, axis=0)
        if kind == "std":
            sd = np.nanstd(values, axis=0)
            lo, hi = mean - sd, mean + sd
        else:
            lo, hi = np.nanmin(values, axis=0), np.nanmax(values, axis=0)
    own = orderer_style(label)
    col = col if col is not None else own["color"]
    if labels and sum(orderer_of(lab) == orderer_of(label) for lab in labels) > 1:
        line.setdefault("linestyle", linestyle(label, labels))
    line.setdefault("linestyle", own["linestyle"])
    line.setdefault("marker", own["marker"])
    line.setdefault("ms", 3)
    order = np.flatnonzero(full)
    xs, ys, lows, highs = (a[order] for a in (x, mean, lo, hi))
    if epochs is not None and order.size:
        cut = _regular_breaks(np.asarray(epochs, dtype=float)[order]) + 1
        xs, ys, lows, highs = (np.insert(a, cut, np.nan) for a in (xs, ys, lows, highs))
    every_epoch = epochs is not None and order.size > 1 and np.all(np.diff(np.asarray(epochs)[order]) == 1)
    if every_epoch and order.size > 20 and "markevery" not in line:
        line["markevery"] = max(1, order.size // 10)
    drawn = ax.plot(xs, ys, label=label, color=col, **line)[0]
    drawn.set_gid("orderer-line")
    if partial.any():
        ax.plot(x[partial], mean[partial], linestyle="none", marker=line["marker"], ms=line["ms"], mfc="white",
                color=col, gid="partial-mean")
    if values.shape[0] > 1:
        ax.fill_between(xs, lows, highs, color=col, alpha=0.2, linewidth=0)
    return np.where(full, mean, np.nan)


def shade(col, position: float):
    """``col`` at a lightness for a configuration's position in [0, 1] (0 light, 1 dark), its hue and
    saturation kept: the variants of one orderer are shades of its colour."""
    import colorsys

    r, g, b = matplotlib.colors.to_rgb(col)
    h, _, s = colorsys.rgb_to_hls(r, g, b)
    return colorsys.hls_to_rgb(h, SHADE_LIGHT + (SHADE_DARK - SHADE_LIGHT) * position, max(s, 0.35 if s else 0))


SHADE_LIGHT, SHADE_DARK = 0.72, 0.3
# The columns that name a run: its file and seed (the same seed in two files is two runs).
RUN = ("file", "seed")
# A configuration column's name in a colour bar.
CONFIG_NAMES = {"problem": "problem", "data": "data", "workers": "workers $m$",
                "examples_per_worker": "examples per worker $n$", "batch": "batch $b$", "lr": "lr",
                "coding": "coding", "coding_s": "stragglers tolerated $s$"}


def config_columns(df) -> list[str]:
    """The columns of ``df`` that tell configurations apart besides the orderer: CONFIG's, then every
    setting of load_runs (``df.attrs["settings"]``: the config fields that differ among the files,
    e.g. ``momentum`` of a sweep). Lines, labels and the caption's runs per line all use these."""
    return [c for c in dict.fromkeys([*CONFIG, *df.attrs.get("settings", ())]) if c in df]


def varying_columns(df, exclude=()) -> list[str]:
    """The config_columns that split runs into lines: those not in ``exclude`` (the figure shows
    them otherwise: panels, the x axis) that take more than one value where the ``exclude``
    columns are fixed. A column that varies only with them, as ``data`` does when n is set through
    the data spec (``synthetic:...?n=160``), is not a line of its own."""
    fixed = [c for c in exclude if c in df]

    def varies(column):
        if fixed:
            return df.groupby(fixed, dropna=False)[column].nunique(dropna=False).max() > 1
        return df[column].nunique(dropna=False) > 1

    return [c for c in config_columns(df) if c not in exclude and varies(c)]


def missing(value) -> bool:
    """Whether a configuration value is absent: NaN where a run lacks the attribute (a plain run
    beside straggler runs has no ``coding``), or None."""
    return value is None or (isinstance(value, float) and np.isnan(value))


def config_value_text(value) -> str:
    """A configuration value as text: numbers with %g (8, 0.9), "none" for an absent or empty
    one (a plain run's coding, its ``stragglers = ""``), anything else as it is."""
    if missing(value) or value == "":
        return "none"
    numeric = isinstance(value, (int, float, np.number)) and not isinstance(value, (bool, np.bool_))
    return f"{value:g}" if numeric else str(value)


def value_label(column: str, value) -> str:
    """A configuration value as label text: "m=8" (CONFIG's short name), "momentum=0.9" (a
    setting's name), or the value alone (problem, data, coding)."""
    name = CONFIG.get(column, column)
    return f"{name}={config_value_text(value)}" if name else config_value_text(value)


COLOR_SCALE_CHARACTERS = 32  # a line of the colour scale's labels: about a quarter of a 6.5 in page


class Variants:
    """The configurations that tell runs apart besides the orderer (``varying_columns``: the
    CONFIG columns and settings that vary, except ``exclude`` and what varies only with it): each
    one a shade of every orderer's colour, explained by one grey scale (``colorbar``), so that a
    legend has one entry per orderer however many files there are.

    ``columns``: the varying columns; ``configs``: their value tuples, sorted; ``orderers``: sorted
    by ``orderer_key``.
    """

    def __init__(self, df, exclude=()):
        self.columns = varying_columns(df, exclude)
        self.configs = (sorted({config_key(c) for c in df[self.columns].itertuples(index=False, name=None)},
                               key=_sort_key) if self.columns else [()])
        self.orderers = sorted(df.orderer.unique(), key=orderer_key) if len(df) else []

    def position(self, config) -> float:
        k = len(self.configs)
        return self.configs.index(config_key(config)) / (k - 1) if k > 1 else 1.0

    def color(self, orderer: str, config=()):
        """The orderer's colour, shaded by the configuration when several are drawn."""
        base = color(orderer)
        return base if len(self.configs) < 2 else shade(base, self.position(config))

    def text(self, config) -> str:
        """"m=8, n=56" for a configuration tuple."""
        return ", ".join(value_label(c, v) for c, v in zip(self.columns, config))

    def series(self, df, y: str, x: str = "epoch", run=RUN):
        """(orderer, config, x values, runs x points array of y) per line (``run_values``); in
        orderer order, then configuration order."""
        out = [(orderer, config_key(config), *run_values(g, x, y, run))
               for (orderer, *config), g in df.groupby(["orderer", *self.columns], sort=False, dropna=False)]
        return sorted(out, key=lambda item: (orderer_key(item[0]), self.configs.index(item[1])))

    def colorbar(self, fig, axes=None):
        """A discrete grey scale at the right of ``axes`` (default: every visible axes), one step per
        configuration, labelled with its values; nothing when only one configuration is drawn."""
        if len(self.configs) < 2:
            return None
        axes = [ax for ax in (axes or fig.axes) if ax.get_visible()]
        k = len(self.configs)
        grays = [shade("tab:gray", self.position(c)) for c in self.configs]
        sm = matplotlib.cm.ScalarMappable(norm=matplotlib.colors.BoundaryNorm(np.arange(k + 1) - 0.5, k),
                                          cmap=matplotlib.colors.ListedColormap(grays))
        boxes = [ax.get_position() for ax in axes]
        right, bottom, top = max(b.x1 for b in boxes), min(b.y0 for b in boxes), max(b.y1 for b in boxes)
        inch = 1 / fig.get_figwidth()  # a gap of 0.12 in and a bar 0.1 in wide at any figure width
        cax = fig.add_axes([right + 0.12 * inch, bottom, 0.1 * inch, top - bottom], label="<colorbar>")
        bar = fig.colorbar(sm, cax=cax, ticks=np.arange(k))
        # a straggler run's configuration beside a plain run's is ~90 characters: on one line it
        # took most of the page from the panels
        wrap = functools.partial(textwrap.fill, width=COLOR_SCALE_CHARACTERS, break_long_words=False)
        if len(self.columns) == 1:
            bar.set_ticklabels([wrap(config_value_text(c[0])) for c in self.configs])
            bar.set_label(f"{CONFIG_NAMES.get(self.columns[0], self.columns[0])} (shade of each orderer's colour)",
                          fontsize=7)
        else:
            bar.set_ticklabels([wrap(self.text(c)) for c in self.configs])
            bar.set_label("configuration (shade of each orderer's colour)", fontsize=7)
        bar.ax.tick_params(labelsize=6)
        return bar


def config_key(values) -> tuple:
    """A configuration as a tuple whose absent values are None: NaN != NaN, so two runs without
    the attribute would otherwise be two configurations, and neither found among ``configs``."""
    return tuple(None if missing(v) else v for v in values)


def _sort_key(config):
    """Numbers first, in order, then text, then absent values."""
    return tuple((2, 0, "") if v is None else (0, v, "") if isinstance(v, (int, float, np.number)) else (1, 0, str(v))
                 for v in config)


def orderer_legend(fig, orderers, band_kind: str | None = "minmax", ax=None, **kw):
    """One legend above the figure with one entry per orderer (its colour, marker and line style),
    then the other labelled lines of ``ax`` (reference curves), titled with what line and band are."""
    handles = [matplotlib.lines.Line2D([], [], label=o, ms=4, **orderer_style(o)) for o in orderers]
    if ax is not None:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            if getattr(h, "get_gid", lambda: None)() != "orderer-line" and lab not in {x.get_label() for x in handles}:
                handles.append(h)
    if not handles:
        return None
    title = BAND_TEXT.get(band_kind) if band_kind else None
    return figure_legend(fig, min(len(handles), 6), handles=handles, title=title, title_fontsize=7,
                         loc="lower center", bbox_to_anchor=(0.5, 1.0), frameon=False, **kw)


def value_text(values, digits: int = 2) -> str:
    """One value, or "lo–hi" when the runs differ."""
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v)]
    if not v.size:
        return ""
    lo, hi = (f"{float(f'{x:.{digits}g}'):g}" for x in (v.min(), v.max()))  # 110, not 1.1e+02
    return lo if lo == hi else f"{lo}–{hi}"


def config_text(df, exclude=(), runs: bool = True) -> str:
    """The configuration a figure's runs share, for its caption: problem and data, m, n, b (those
    not in ``exclude``: they vary and are shown otherwise), the step size α (the run's ``step_size``
    when it has one, else a decaying schedule's ``largest_step``, else ``lr``) against the
    smoothness: α L, and α L n and α L_max n of the analyses' regime when the trace has them
    (docs/trace-format.md), and (``runs``) the runs per line. A quantity that differs between runs is given as a range."""
    parts = []
    if len(df) == 0:
        return ""
    setting = [str(df[c].iloc[0]) for c in ("problem", "data") if c in df and c not in exclude
               and df[c].nunique() == 1]
    if setting:
        parts.append(" on ".join(setting))
    sizes = [f"{CONFIG[c]} = {value_text(df[c], 6)}" for c in ("workers", "examples_per_worker", "batch")
             if c in df and c not in exclude and df[c].notna().any()]
    if sizes:
        parts.append(", ".join(sizes))
    def has(column):
        return column in df and df[column].notna().any()

    column = next((c for c in ("step_size", "largest_step", "lr") if has(c)), None)
    if "lr" not in exclude and column:
        # step_size: the constant step the run took (the theory schedule ignores lr); largest_step:
        # a decaying schedule's, at which the regime's numbers are
        step, against = df[column], []
        if has("L"):
            against.append(f"α L = {value_text(step * df['L'])}")
        against += [f"{text} = {value_text(df[c])}" for c, text in (("alpha_L_n", "α L n"),
                                                                     ("alpha_Lmax_n", "α L_max n")) if has(c)]
        name = "largest step α" if column == "largest_step" else "step α"
        parts.append(f"{name} = {value_text(step, 3)}" + (f" ({', '.join(against)})" if against else ""))
    if runs and {"file", "seed", "orderer"} <= set(df.columns):
        line = ["orderer", *config_columns(df)]
        per_line = value_text(df.drop_duplicates(["file", "seed", *line]).groupby(line, dropna=False).size(), 6)
        parts.append(f"{per_line} run{'' if per_line == '1' else 's'} (file, seed) per line")
    return "; ".join(parts)


def caption(fig, df, exclude=(), extra: str = ""):
    """``config_text`` (none for ``df`` None) and ``extra`` as a caption line under the figure's axes:
    at the figure's bottom edge, or lower when an axes' tick labels or x label reach below it (a
    figure laid out without tight_layout)."""
    text = "; ".join(t for t in (config_text(df, exclude) if df is not None else "", extra) if t)
    text = textwrap.fill(text, width=int((fig.get_figwidth() - 2 * PAD) * 17))  # ~17 characters an inch at 7 pt
    renderer = fig.canvas.get_renderer()
    lowest = min((ax.get_tightbbox(renderer).y0 for ax in fig.axes if ax.get_visible()), default=0.0)
    gap = 2 / 72 / fig.get_figheight()  # 2 points under the lowest label
    top = min(0.0, fig.transFigure.inverted().transform((0.0, lowest))[1] - gap)
    return fig.text(0.5, top, text, ha="center", va="top", fontsize=7, gid="caption")


def log_if_positive(ax, values, axis: str = "y"):
    """``log_axis`` when every finite value is > 0 (rates live on log scales)."""
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v)]
    if v.size and (v > 0).all():
        log_axis(ax, axis)


def legend(ax, band_kind: str | None = "minmax", figure_level: bool = False, title: str | None = None, **kw):
    """The legend of ``ax``, titled with what the line and band are (BAND_TEXT of ``band_kind``, or
    ``title`` for a figure whose band is something else); ``figure_level``: one legend above all
    panels of the figure (for figures whose panels share their lines)."""
    handles, labels = ax.get_legend_handles_labels()
    if not handles:
        return
    title = title or (BAND_TEXT.get(band_kind) if band_kind else None)
    if figure_level:
        figure_legend(ax.figure, min(len(labels), 6), handles=handles, labels=labels, title=title, title_fontsize=7,
                      loc="lower center", bbox_to_anchor=(0.5, 1.0), frameon=False, **kw)
    else:
        ax.legend(handles, labels, title=title, title_fontsize=7, **kw)


def tick_number(v, _=None) -> str:
    """A log axis' tick label: the plain number where it is short (3, 40, 0.5), a power of ten
    beyond (10^-5, 3x10^-5 in mathtext, as matplotlib's own log axes), not Python's 1e-05."""
    if v <= 0 or 1e-3 <= v < 1e4:
        return f"{v:g}"
    exponent = int(np.floor(np.log10(v) + 1e-9))
    mantissa = float(f"{v / 10.0 ** exponent:.6g}")
    return f"$10^{{{exponent}}}$" if mantissa == 1 else f"${mantissa:g}\\times10^{{{exponent}}}$"


def leading_digit(v: float) -> int:
    """3 for 0.03, 30 and 3e5."""
    return round(v / 10.0 ** np.floor(np.log10(v) + 1e-9))


MIN_LOG_LABELS = 3  # labelled ticks a log axis needs for a value to be read off it


class MinorLogLabels(matplotlib.ticker.Formatter):
    """The labels of a log axis' ticks between the decades: none when MIN_LOG_LABELS decades are
    in view; else those whose leading digit is 2 or 5, or failing that 2, 3 or 5, or failing that
    any, whichever first gives the axis MIN_LOG_LABELS labels with its decades (an axis from 3 to
    30 shows 5, 10, 20; one from 6 to 9, 6, 7, 8, 9). matplotlib's own labels these ticks only
    below one decade: 3 to 30 had one label, 10."""

    DIGITS = ({2, 5}, {2, 3, 5}, set(range(2, 10)))

    def __init__(self):
        self.labelled = set()

    def set_locs(self, locs):
        low, high = sorted(self.axis.get_view_interval())

        def in_view(values):
            return [v for v in values if low * (1 - 1e-9) <= v <= high * (1 + 1e-9)]

        decades = len(in_view(self.axis.get_majorticklocs()))
        digits = [leading_digit(v) for v in in_view(locs)]
        self.labelled = set()
        if decades >= MIN_LOG_LABELS:
            return
        for labelled in self.DIGITS:
            self.labelled = labelled
            if decades + sum(d in labelled for d in digits) >= MIN_LOG_LABELS:
                return

    def __call__(self, v, pos=None):
        return tick_number(v) if v > 0 and leading_digit(v) in self.labelled else ""


def log_axis(ax, axis: str = "y"):
    """Log scale on ``axis``, its ticks labelled with plain numbers (tick_number): the decades,
    and on an axis spanning few decades enough ticks between them to read values off
    (MinorLogLabels)."""
    (ax.set_yscale if axis == "y" else ax.set_xscale)("log")
    ticks = ax.yaxis if axis == "y" else ax.xaxis
    ticks.set_major_formatter(matplotlib.ticker.FuncFormatter(tick_number))
    ticks.set_minor_formatter(MinorLogLabels())


def plain_log_y(ax):
    """Log y axis whose tick labels are plain numbers (3, 4, 6) rather than 3x10^0 on short ranges."""
    log_axis(ax, "y")


def counted_x(ax):
    """Integer ticks on an x axis of counted things (epochs, rounds): no 0.5 on a short run."""
    # at most 7 ticks at 1, 2 or 5 times a power of ten: Matplotlib's own count crowds the two-digit
    # epochs of a panel a third of a page wide
    ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(nbins=6, integer=True, steps=[1, 2, 5, 10]))


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
    """Write ``out/name.png`` (at DPI, set by --dpi) and ``out/name.pdf``, as wide as the figure
    (``fit_width``) and as tall as what it holds; return both paths."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / f"{name}.png", out / f"{name}.pdf"]
    fit_width(fig)
    box = fig.get_tightbbox(fig.canvas.get_renderer())
    page = matplotlib.transforms.Bbox.from_extents(0, box.y0 - PAD, fig.get_figwidth(), box.y1 + PAD)
    fig.savefig(paths[0], dpi=DPI, bbox_inches=page)
    fig.savefig(paths[1], bbox_inches=page)
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
    """An ArgumentParser named ``python -m MODULE`` whose description is the module docstring and
    whose usage errors are one line (the simulator's)."""
    from ordersim.config import OneLineParser

    return OneLineParser(prog=f"python -m {module}", description=doc, formatter_class=HelpFormatter)


def _file_argument(check, path: str) -> str:
    """`path` if check(path) passes, else argparse's one-line error ("argument FILE.h5: 'x.h5'
    does not exist") rather than h5py's traceback."""
    try:
        check(path)
    except NotATrace as why:
        raise argparse.ArgumentTypeError(f"{path!r} {why}") from None
    return path


def hdf5_file(path: str) -> str:
    """argparse's type of a FILE.h5 argument: an existing HDF5 file (herding-sim's files)."""
    return _file_argument(check_hdf5_file, path)


def run_trace(path: str) -> str:
    """argparse's type of a FILE.h5 argument: an ordersim run trace."""
    return _file_argument(trace_root, path)


MAX_DPI = 2400


def dpi(text: str) -> int:
    """argparse's type of --dpi: an integer from 1 to MAX_DPI (a PNG of 0 dpi fails in matplotlib
    after the traces were read; 10^5 dpi exhausts the memory)."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if not 1 <= value <= MAX_DPI:
        raise argparse.ArgumentTypeError(f"{text!r} is not allowed; allowed: an integer from 1 to {MAX_DPI}")
    return value


def out_dir(text: str) -> Path:
    """argparse's type of --out DIR: a directory, or a path where one can be made (its nearest
    existing parent a writable directory), checked before any trace is read."""
    path = Path(text)
    if path.exists() and not path.is_dir():
        raise argparse.ArgumentTypeError(f"{text!r} exists and is not a directory")
    parent = next(p for p in (path, *path.parents) if p.exists())
    if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
        raise argparse.ArgumentTypeError(f"{text!r} cannot be written ({str(parent)!r} is not a writable directory)")
    return path


def inches(text: str) -> float:
    """argparse's type of --width: a width in inches that holds one panel (MIN_PANEL_WIDTH) and is
    no more than a poster's (100)."""
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not MIN_PANEL_WIDTH <= value <= 100:
        raise argparse.ArgumentTypeError(f"{text!r} is not allowed; allowed: inches from {MIN_PANEL_WIDTH:g} to 100")
    return value


def panels_per_row(text: str) -> int:
    """argparse's type of --columns: an integer >= 1."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not allowed; allowed: an integer >= 1")
    return value


def add_size_arguments(p: argparse.ArgumentParser) -> None:
    """--width and --columns: the size of every figure (``figure``)."""
    p.add_argument("--width", type=inches, default=PAPER_WIDTH, metavar="INCHES",
                   help="width of each figure, legends and caption included; the fonts keep their point sizes, "
                        "so it prints at them at this width (6.5: a one-column paper's text width, 3.3: a column "
                        "of a two-column one); panels that do not fit side by side wrap into rows")
    p.add_argument("--columns", type=panels_per_row, default=None, metavar="N",
                   help=f"panels per row (default: as many as fit, each at least {MIN_PANEL_WIDTH:g} in wide)")


def parser(module: str, doc: str, files_help: str = "ordersim trace files (layout: docs/trace-format.md)",
           files_type=run_trace, band_over: str = "seeds") -> argparse.ArgumentParser:
    """The arguments every figure script shares: FILE.h5 ..., --out DIR, --band (its band over
    ``band_over``), --dpi, --width, --columns."""
    p = base_parser(module, doc)
    p.add_argument("files", nargs="+", type=files_type, metavar="FILE.h5", help=files_help)
    p.add_argument("--out", type=out_dir, required=True, metavar="DIR",
                   help="directory for the figures (created if missing); each figure as NAME.png and NAME.pdf")
    p.add_argument("--band", choices=("minmax", "std"), default="minmax",
                   help=f"shaded band over {band_over}: min-max, or mean +- one standard deviation")
    p.add_argument("--dpi", type=dpi, default=DEFAULT_DPI, help="resolution of the PNG files (the PDFs are vector)")
    add_size_arguments(p)
    return p


def apply(args) -> None:
    """Apply the parsed shared arguments: --dpi, --width, --columns."""
    global DPI, WIDTH, COLUMNS
    DPI, WIDTH, COLUMNS = args.dpi, args.width, args.columns


def parse(p: argparse.ArgumentParser, argv):
    """Parse the arguments and apply the shared ones (``apply``)."""
    args = p.parse_args(argv)
    apply(args)
    return args


def read_with_plain_warnings(read, files) -> "pandas.DataFrame":  # noqa: F821
    """``read(files)``, its warnings printed as one plain line each on stderr, not the warnings
    module's source excerpt."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", TraceWarning)
        df = read(files)
    for w in caught:
        print(f"warning: {w.message}", file=sys.stderr)
    return df


def load(files) -> "pandas.DataFrame":  # noqa: F821
    """load_runs plus a ``label`` column: the orderer, and the configuration values that vary."""
    df = read_with_plain_warnings(load_runs, files)
    print_code_states(df)
    return with_labels(df)


def code_state_lines(df) -> list[str]:
    """One line per code state the loaded files come from (load_runs warns when there are several)."""
    return [f"code: {label} ({len(files)} file{'s' if len(files) > 1 else ''})"
            for label, files in df.attrs.get("code_states", {}).items()]


def print_code_states(df) -> None:
    for line in code_state_lines(df):
        print(line)


def with_labels(df, exclude=()):
    """A copy of df with ``label``: the orderer plus the values of its ``varying_columns`` (those
    of Variants(df, exclude))."""
    varying = varying_columns(df, exclude)
    df = df.copy()

    def label(row):
        extra = [value_label(c, row[c]) for c in varying]
        return row["orderer"] + (f" ({', '.join(extra)})" if extra else "")

    df["label"] = df.apply(label, axis=1) if len(df) else []
    return df


def run_values(df, x: str, y: str, run=RUN):
    """(x values, runs x points array of y): one row per run, a run being a (file, seed) pair that
    ``df`` has (not every file with every seed: the files of one line may hold different seeds),
    aligned on x with NaN where a run lacks a point. A run whose values are NaN (diverged) keeps
    its row, so that ``band`` draws no mean there. ``run``: the columns that name a row instead (a
    figure against n, whose runs have one n each, numbers the runs at each n)."""
    table = df.groupby([*run, x])[y].mean().unstack(x)
    return table.columns.to_numpy(dtype=float), table.to_numpy(dtype=float)


def by_seed(df, x: str, y: str):
    """Per label: ``run_values`` of its rows; labels sorted by orderer (the COLORS order)."""
    out = {lab: run_values(g, x, y) for lab, g in df.groupby("label", sort=False)}
    return dict(sorted(out.items(), key=lambda kv: orderer_key(kv[0])))
