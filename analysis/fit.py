"""Fit the rate exponents of the final error against m and n and compare them with the theory.

    python -m ordersim.analysis.fit FILE.h5 [FILE.h5 ...] [--metric auto|suboptimality|gap|grad_norm_sq]
                           [--setting auto|pl|nonconvex] [--epoch T] [--level 0.95] [--out DIR]

Prints one row per (variable, sweep, orderer): the cells fitted (one cell = one value of m or n), the
data draws per cell, the measured exponent with its confidence interval, the theory's exponent
(analysis/theory.py), whether they agree (the theory inside the interval) and the cells left out
at a floor. With --out, also writes DIR/fit.csv.

Each trace file is one data draw (its data_seed). A cell's value is the mean of log error over its
draws, each draw's the mean over its seeds; the exponent is the least-squares slope of the cell
values on log m (or log n), and its interval the t interval (cells - 2 degrees of freedom) of that
slope. The seeds of one draw share its data, so they are not independent points; the cells are:
each has its own draws, and the scatter of the cell values about the line holds the data-draw
variation. A cell is at a floor when the error stopped falling: after a step that lowered it, every
later step lowers it by less than a quarter of rr's theory slope (FLOOR_FRACTION); those cells are
flagged and left out of the fit.

The error of a run is its metric at epoch T (default: the last epoch every completed run reached;
interrupted and diverged runs are left out with a note). For a variable (m or n), a sweep is the
runs whose other settings (n or m, b, lr, problem, and any other swept config field, such as
momentum) agree and that take at least two values of it; each is a fit of its own, and the values
that tell a variable's sweeps apart (lr = 0.1 and 0.3, say) are columns of the table. The data spec
may differ (`python -m ordersim reproduce scaling` draws m*n synthetic examples per cell). Files in
no sweep are named in a note.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
from scipy import stats

from ordersim.analysis import extras

extras.script_requires(__name__)  # before matplotlib and pandas are imported: one line if they are missing
from ordersim.analysis import style, theory  # noqa: E402

VARIABLE_COLUMN = {"m": "workers", "n": "examples_per_worker"}
OTHER = {"m": "n", "n": "m"}
METRICS = ("auto", "suboptimality", "gap", "grad_norm_sq")
METRIC_LABEL = {"suboptimality": r"final suboptimality $f(x_T)-f^\star$",
                "gap": r"final train loss minus the best, $f(x_T)-\min f$",
                "grad_norm_sq": r"final squared gradient norm $\|\nabla f(x_T)\|_2^2$"}


def fit_exponent(x, y, level: float = 0.95) -> tuple[float, float, float]:
    """Least-squares slope of log(y) on log(x) and its ``level`` confidence interval (t distribution).

    Points with x <= 0, y <= 0 or non-finite values are ignored. With fewer than 3 points (or one
    distinct x) the interval is (nan, nan) (and the slope nan when it cannot be fitted).
    """
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    keep = np.isfinite(x) & np.isfinite(y) & (x > 0) & (y > 0)
    lx, ly = np.log(x[keep]), np.log(y[keep])
    k = lx.size
    if k < 2 or np.ptp(lx) == 0:
        return float("nan"), float("nan"), float("nan")
    sxx = np.sum((lx - lx.mean()) ** 2)
    slope = float(np.sum((lx - lx.mean()) * (ly - ly.mean())) / sxx)
    if k < 3:
        return slope, float("nan"), float("nan")
    residual = ly - ly.mean() - slope * (lx - lx.mean())
    se = np.sqrt(np.sum(residual**2) / (k - 2) / sxx)
    half = float(stats.t.ppf(0.5 + level / 2, k - 2) * se)
    return slope, slope - half, slope + half


FLOOR_FRACTION = 0.25  # a cell-to-cell slope flatter than this times rr's theory slope is a floor


def cell_values(points, column: str):
    """Per value of ``column``: the mean over data draws (files) of the mean over seeds of log
    error, and the number of draws; sorted by the value. Returns (x, log_error, draws) arrays."""
    per_draw = points.assign(log_error=np.log(points.error.astype(float))).groupby(
        [column, "file"]).log_error.mean()
    per_cell = per_draw.groupby(level=0).agg(["mean", "size"]).sort_index()
    return (per_cell.index.to_numpy(dtype=float), per_cell["mean"].to_numpy(),
            per_cell["size"].to_numpy())


def floor_cells(x, log_error, flat_slope: float) -> np.ndarray:
    """Boolean mask of the cells at a floor: the error fell into a cell (a step to it steeper than
    ``flat_slope`` < 0) and every later step is flatter; those later cells are at the floor. An
    error that never falls (or rises) has no floor: it is fitted, and its slope says so."""
    at_floor = np.zeros(len(x), dtype=bool)
    if len(x) < 3:
        return at_floor
    flat = np.diff(log_error) / np.diff(np.log(x)) > flat_slope  # flat[i]: the step from cell i to i+1
    for start in range(2, len(x)):
        if not flat[start - 2] and flat[start - 1:].all():
            at_floor[start:] = True
            break
    return at_floor


def fit_cells(points, column: str, flat_slope: float, level: float = 0.95) -> dict:
    """The fit of one (variable, orderer): slope and interval over the cells not at a floor."""
    x, log_error, draws = cell_values(points, column)
    at_floor = floor_cells(x, log_error, flat_slope)
    used = ~at_floor
    slope, lo, hi = fit_exponent(x[used], np.exp(log_error[used]), level)
    return dict(cells=int(used.sum()), draws=int(draws.min()) if len(draws) else 0, exponent=slope,
                ci_low=lo, ci_high=hi, x=x, log_error=log_error, used=used,
                floor=", ".join(f"{v:g}" for v in x[at_floor]))


def completed_runs(df):
    """The rows of the runs that completed: interrupted and diverged runs are left out of a fit."""
    return df[(df.status == "completed") & ~df.interrupted.astype(bool)]


def common_epochs(df) -> list[int]:
    """The epochs every completed run measured: those --epoch may name."""
    per_run = completed_runs(df).groupby(["file", "orderer", "seed"]).epoch.apply(lambda e: set(e.astype(int)))
    return sorted(set.intersection(*per_run)) if len(per_run) else []


def check_epoch(p: argparse.ArgumentParser, df, epoch: int | None) -> None:
    """argparse's error (exit 2) when --epoch names an epoch that not every completed run measured:
    the fit would silently drop the runs without it, or have no run at all."""
    if epoch is None:
        return
    allowed = common_epochs(df)
    if epoch in allowed:
        return
    if not allowed:
        span = "none (no completed run in the files)"
    elif allowed == list(range(allowed[0], allowed[-1] + 1)):
        span = f"{allowed[0]} to {allowed[-1]}"
    else:
        span = ", ".join(map(str, allowed))
    p.error(f"argument --epoch: '{epoch}' is not allowed; allowed: an epoch every completed run measured: {span}")


def final_errors(df, metric: str = "auto", epoch: int | None = None):
    """One row per completed run: its settings and ``error`` at epoch T; also returns (metric, T, notes)."""
    notes = []
    ok = completed_runs(df)
    left = df.loc[~df.index.isin(ok.index), ["file", "orderer", "seed", "status"]].drop_duplicates()
    for r in left.itertuples():
        notes.append(f"left out run {r.orderer}/seed_{r.seed} of {r.file} (status {r.status})")
    if metric == "auto":
        metric = "suboptimality" if "suboptimality" in ok and ok.suboptimality.notna().all() else "gap"
    if epoch is None:
        epoch = int(ok.groupby(["file", "orderer", "seed"]).epoch.max().min()) if len(ok) else 0
    rows = ok[ok.epoch == epoch].copy()
    if metric == "suboptimality":
        rows["error"] = rows.suboptimality
    elif metric == "grad_norm_sq":
        rows["error"] = rows.grad_norm**2
    else:  # train loss minus the best train loss seen in the same file (the same problem instance)
        rows["error"] = rows.train_loss - ok.groupby("file").train_loss.transform("min").loc[rows.index]
    bad = rows[~(rows.error > 0)]
    for r in bad.itertuples():
        notes.append(f"left out run {r.orderer}/seed_{r.seed} of {r.file}: {metric} at epoch {epoch} "
                     f"is {r.error} (log needs > 0)")
    return rows[rows.error > 0], metric, epoch, notes


def held_columns(errors, variable: str) -> list[str]:
    """The columns a sweep over ``variable`` (m or n) holds fixed: the other of m and n, b, lr and
    problem, and every setting of the files (load_runs' settings) that takes several values where
    those and the variable are fixed: another axis of the sweep, such as momentum. Not a setting
    that changes with the variable alone, as the data spec does (a sweep over m at fixed n draws
    m*n examples per cell), nor ``data_seed``: each file is one data draw of its cell."""
    column = VARIABLE_COLUMN[variable]
    held = [c for c in (VARIABLE_COLUMN[OTHER[variable]], "batch", "lr", "problem") if c in errors]
    settings = [c for c in errors.attrs.get("settings", ()) if c in errors and c not in (*held, column, "data_seed")]
    if not len(errors):
        return held
    per_cell = errors.groupby([*held, column], dropna=False)
    return held + [c for c in settings if per_cell[c].nunique(dropna=False).max() > 1]


def sweeps(errors, variable: str, notes: list | None = None) -> list:
    """Every sweep over ``variable`` (m or n): ({held column: value}, rows) per combination of values
    of the ``held_columns`` at which the runs take at least two values of the variable (a sweep
    over m at lr 0.1 and another at lr 0.3 are two fits, not one pooled or one dropped).

    When none holds the other of m and n fixed (e.g. m workers sharing one fixed dataset, so
    n = N/m), those holding only the rest fixed are used, and a note says so.
    """
    column, other = VARIABLE_COLUMN[variable], VARIABLE_COLUMN[OTHER[variable]]
    held = held_columns(errors, variable)
    for keys in (held, [c for c in held if c != other]):
        found = [(dict(zip(keys, values)), g) for values, g in errors.groupby(keys, dropna=False)
                 if g[column].nunique() >= 2] if len(errors) else []
        if found:
            if keys is not held and notes is not None:
                notes += [f"the sweep over {variable} does not hold {other} fixed ({other} takes "
                          f"{sorted(g[other].unique().tolist())}): the theory's slope assumes it does"
                          for _, g in found]
            return found
    return []


def all_sweeps(errors, notes: list) -> dict:
    """{variable: its ``sweeps``} for m and n, and a note naming the files in none of them (one
    value of m and of n where their other settings are fixed): no fit has them."""
    found = {variable: sweeps(errors, variable, notes) for variable in VARIABLE_COLUMN}
    fitted = {path for blocks in found.values() for _, rows in blocks for path in rows.file}
    left = sorted(set(errors.file) - fitted)
    if left:
        notes.append(f"left out {len(left)} file(s) in no sweep over m or n (one value of each where their other "
                     f"settings are fixed): {', '.join(left)}")
    return found


def telling_apart(blocks) -> list[str]:
    """The held columns whose values differ between the sweeps ``blocks`` of one variable: what
    names each of them in a table or a title."""
    if len(blocks) < 2:
        return []
    return [c for c in blocks[0][0] if len({style.config_value_text(held[c]) for held, _ in blocks}) > 1]


def held_text(held: dict, columns) -> str:
    """"lr=0.3, momentum=0.9": the values of ``columns`` in ``held``."""
    return ", ".join(style.value_label(c, held[c]) for c in columns)


def setting_of(errors, metric: str, setting: str = "auto") -> str:
    if setting != "auto":
        return setting
    if metric == "grad_norm_sq":
        return "nonconvex"
    return "pl" if np.isfinite(errors.f_star.astype(float)).all() else "nonconvex"


def table(df, metric="auto", setting="auto", epoch=None, level=0.95):
    """The fit table as a DataFrame, plus (metric, setting, T, notes): one row per (variable, sweep,
    orderer); the held columns that tell a variable's sweeps apart (``telling_apart``: lr, say)
    come between ``variable`` and ``orderer``, NaN for the other variable's rows."""
    import pandas as pd

    errors, metric, epoch, notes = final_errors(df, metric, epoch)
    setting = setting_of(errors, metric, setting)
    rows, block_columns = [], {}
    for variable, blocks in all_sweeps(errors, notes).items():
        column = VARIABLE_COLUMN[variable]
        if not blocks:
            notes.append(f"no sweep over {variable}: the files hold one value of {column} per setting")
            continue
        flat = FLOOR_FRACTION * theory.exponent("rr", variable, setting)
        named = telling_apart(blocks)
        block_columns.update(dict.fromkeys(named))
        for held, points in blocks:
            where = f" at {held_text(held, named)}" if named else ""
            for orderer, g in sorted(points.groupby("orderer"), key=lambda kv: style.orderer_key(kv[0])):
                cells = fit_cells(g, column, flat, level)
                lo, hi = cells["ci_low"], cells["ci_high"]
                expected = theory.exponent(orderer, variable, setting)
                agree = "n/a" if expected is None or not np.isfinite(lo) else ("yes" if lo <= expected <= hi else "no")
                if cells["floor"]:
                    notes.append(f"{orderer}, {variable}{where}: cells {variable} = {cells['floor']} are at a floor "
                                 "(the error stops falling); left out of the fit")
                rows.append({"variable": variable, **{c: held[c] for c in named}, "orderer": orderer,
                             "cells": cells["cells"], "draws": cells["draws"], "exponent": cells["exponent"],
                             "ci_low": lo, "ci_high": hi, "theory": theory.format_exponent(expected), "agree": agree,
                             "floor": cells["floor"] or "-"})
    columns = ["variable", *block_columns, "orderer", "cells", "draws", "exponent", "ci_low", "ci_high", "theory",
               "agree", "floor"]
    return pd.DataFrame(rows, columns=columns), metric, setting, epoch, notes


def epoch_number(text: str) -> int:
    """argparse's type of --epoch: an integer >= 0, checked before any trace is read (check_epoch
    then checks it against the traces' epochs)."""
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not allowed; allowed: an integer >= 0, an epoch every "
                                         "completed run measured")
    return value


def confidence_level(text: str) -> float:
    """argparse's type of --level: a number strictly between 0 and 1 (at 1 the interval is
    infinite, at 0 a single point, outside NaN), checked before any trace is read."""
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not allowed; allowed: a number strictly between 0 and 1 "
                                         "(0.95 for a 95% interval)")
    return value


def add_arguments(p: argparse.ArgumentParser):
    p.add_argument("--metric", choices=METRICS, default="auto",
                   help="error of a run: suboptimality f-f*; gap = train loss minus the smallest train loss "
                        "in the same file; grad_norm_sq = squared gradient norm (non-convex theory); "
                        "auto = suboptimality when every run has it, else gap")
    p.add_argument("--setting", choices=("auto",) + theory.SETTINGS, default="auto",
                   help="which theory column to compare with: pl (PL / strongly convex) or nonconvex; "
                        "auto = pl when f* is known for every run and the metric is not grad_norm_sq")
    p.add_argument("--epoch", type=epoch_number, default=None, metavar="T",
                   help="epoch at which the error is taken, one every completed run measured "
                        "(default: the last epoch every completed run reached)")
    p.add_argument("--level", type=confidence_level, default=0.95,
                   help="confidence level of the interval, strictly between 0 and 1")


def report(result, metric, setting, epoch, notes, level=0.95) -> str:
    """The table as the command prints it: a header line, one row per (variable, orderer), the notes."""
    lines = [f"error: {metric} at epoch T = {epoch}; theory: {setting}; slope of the cell means "
             f"(log error averaged over seeds, then data draws), {level:.0%} t interval over cells"]
    if len(result):
        held = list(result.columns[1:result.columns.get_loc("orderer")])
        shown = result.assign(exponent=result.exponent.map("{:+.3f}".format),
                              ci=[f"[{lo:+.3f}, {hi:+.3f}]" for lo, hi in zip(result.ci_low, result.ci_high)],
                              **{c: result[c].map(lambda v: "-" if style.missing(v) else style.config_value_text(v))
                                 for c in held})
        shown = shown.rename(columns={c: style.CONFIG.get(c) or c for c in held})
        lines.append(shown[["variable", *(style.CONFIG.get(c) or c for c in held), "orderer", "cells", "draws",
                            "exponent", "ci", "theory", "agree", "floor"]].to_string(index=False))
    lines += [f"note: {note}" for note in notes]
    return "\n".join(lines)


def main(argv=None) -> int:
    p = style.base_parser("ordersim.analysis.fit", __doc__)
    p.add_argument("files", nargs="+", type=style.run_trace, metavar="FILE.h5",
                   help="ordersim trace files (docs/trace-format.md)")
    p.add_argument("--out", type=style.out_dir, default=None, metavar="DIR", help="also write the table to DIR/fit.csv")
    add_arguments(p)
    args = p.parse_args(argv)
    df = style.load(args.files)
    check_epoch(p, df, args.epoch)
    result, metric, setting, epoch, notes = table(df, args.metric, args.setting, args.epoch, args.level)
    print(report(result, metric, setting, epoch, notes, args.level))
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        result.to_csv(args.out / "fit.csv", index=False)
        print(f"wrote {args.out / 'fit.csv'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
