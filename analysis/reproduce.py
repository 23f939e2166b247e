"""The papers' experiments (runs/papers/) and the scaling experiment that tests their rates
(runs/scaling.toml): run them, draw each figure with the claim and whether this run shows it.

    python -m ordersim reproduce [NAME ...] [--quick] [--figures DIR] [--results DIR] [--no-run]

NAME: scaling, grab_mnist, cdgrab_logreg, cdgrab_workers, rr_w8a, herding (default: all). Every
paper's experiment runs as its own `python -m ordersim run runs/papers/NAME.toml [--quick]
--overwrite` (herding: `python -m ordersim herding-sim --overwrite` with the options of
runs/papers/herding.toml) into the config's `out`; scaling runs `python -m ordersim run
runs/scaling.toml --workers m --data ... --out OUT/m<m>_n<n>` for every (m, n) of its grid
(SCALING_GRIDS), in this process (its many small runs would spend more time starting processes
than training). Then DIR/NAME.png (and .pdf) is drawn from the traces, titled with the claim and a
verdict line, which is also printed (scaling also writes the fit table, `python -m
ordersim.analysis.fit`'s output, to DIR/scaling.txt):

    grab_mnist: GraB's training loss ends below RR's, SO's and FlipFlop's: shown (grab 0.301 < ...)

`--quick` runs the configs' [quick] tables (the CI size) into results/papers/quick/; a verdict
whose claim that size is too small to show says so ("quick size: not checked"). `--no-run` draws
from the traces already there. Exit status 0 when everything ran, whatever the verdicts (a claim
this run does not show is a result, not an error); 1 when a run failed. DIR/verdicts.txt keeps
the lines of the experiments not run this time. docs/reproductions.md shows the papers' figures at
the default size and says, per experiment, what the paper shows; the README shows scaling's.
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ordersim.analysis import extras
from ordersim.stop import EXIT_CHECKPOINTED
from ordersim.config import OneLineParser

ROOT = Path(__file__).resolve().parents[1]
PROG = "python -m ordersim reproduce"
CONFIGS = ROOT / "runs" / "papers"


@dataclass(frozen=True)
class Experiment:
    paper: str
    claim: str
    quick_shows: bool  # whether the [quick] size is large enough to show the claim (CI checks it)


EXPERIMENTS = {
    "scaling": Experiment("The PL rates of D-RR (1/(mnT^2)) and CD-GraB (1/(mnT)^2), least squares",
                          "in m and in n, CD-GraB's error falls faster than D-RR's (intervals apart) and "
                          "at least as fast as its bound's -2; D-RR's interval in m holds its -1; "
                          "D-GraB's rises with m (where it ran)", True),
    "grab_mnist": Experiment("GraB (Lu, Guo, De Sa 2022), MNIST logistic regression",
                             "GraB's training loss ends below RR's, SO's and FlipFlop's", False),
    "cdgrab_logreg": Experiment("CD-GraB (Cooper et al. 2023), logistic regression on 4 workers",
                                "CD-GraB's f - f* ends below D-RR's and the independent balancers' "
                                "(per epoch and at equal wall-clock time)", False),
    "cdgrab_workers": Experiment("CD-GraB (Cooper et al. 2023), speedup in the number of workers m",
                                 "CD-GraB's lead over D-RR grows with m", False),
    "rr_w8a": Experiment("Random reshuffling (Mishchenko, Khaled, Richtárik 2020), w8a",
                         "RR and SO end closer to x* than SGD with replacement and IG", True),
    "herding": Experiment("CD-GraB (Cooper et al. 2023), random-vector parallel herding",
                          "CD-GraB's herding stays below the independent balancers' and RR's at every m, "
                          "flat as m grows", True),
}


# "Flat as m grows": CD-GraB's herding varies by at most this factor over the m of the experiment.
FLAT = 1.5


@dataclass
class Verdict:
    name: str
    shown: bool | None  # None: not checked at this size
    detail: str

    def state(self, quick: bool) -> str:
        state = {True: "shown", False: "not shown"}[self.shown] if self.shown is not None else "not checked"
        return state + (" (quick size)" if quick else "")

    def line(self, quick: bool) -> str:
        return f"{self.name}: {EXPERIMENTS[self.name].claim}: {self.state(quick)} ({self.detail})"

    def caption(self, quick: bool) -> str:
        """The figure's text: the paper, its claim and whether this run shows it."""
        experiment = EXPERIMENTS[self.name]
        return f"{experiment.paper}. Claim: {experiment.claim}. This run: {self.state(quick)}."


@dataclass(frozen=True)
class ScalingGrid:
    """The (m, n) cells of the scaling experiment: m over `workers` at n = `examples` per worker,
    and n over `examples_sweep` at m = `workers_for_n`, on data of dimension `dim`."""
    workers: tuple[int, ...]
    examples: int
    examples_sweep: tuple[int, ...]
    workers_for_n: int
    dim: int

    def cells(self) -> list[tuple[int, int]]:
        cells = [(m, self.examples) for m in self.workers]
        return cells + [(self.workers_for_n, n) for n in self.examples_sweep if (self.workers_for_n, n) not in cells]

    def data(self, m: int, n: int) -> str:
        return f"synthetic:regression?n={m * n}&d={self.dim}&cond=10&noise=0.5"


# by `quick`: the README's grid, and the CI size
SCALING_GRIDS = {False: ScalingGrid((1, 2, 4, 8, 16, 32, 64), 128, (32, 64, 256, 512), 8, 10),
                 True: ScalingGrid((1, 2, 4, 8, 16), 32, (16, 64, 128), 4, 5)}


def config_path(name: str) -> Path:
    return ROOT / "runs" / "scaling.toml" if name == "scaling" else CONFIGS / f"{name}.toml"


def config(name: str, quick: bool) -> dict:
    """The experiment's TOML with its [quick] table applied when `quick`."""
    from ordersim.config import read_toml
    from ordersim.sweep import quick_values

    path = str(config_path(name))
    if name != "herding":
        return quick_values(read_toml(path), path, quick)
    with open(path, "rb") as fh:  # herding-sim's options, not a training config
        raw = tomllib.load(fh)
    return quick_values(raw, path, quick, fields=set(raw))


def trace_out(values: dict, results: Path | None) -> Path:
    """The trace file (or a sweep's directory) of an experiment: the config's `out`, or its last
    part under `results`."""
    return ROOT / values["out"] if results is None else results / Path(values["out"]).name


def scaling_out(out: Path, m: int, n: int) -> Path:
    return out / f"m{m:03d}_n{n:05d}"


def trace_files(name: str, values: dict, results: Path | None, quick: bool = False) -> list[Path]:
    from ordersim.sweep import cell_out, cells

    out = trace_out(values, results)
    if name == "scaling":
        draws = len(cells(values["sweep"]))
        return [Path(cell_out(str(scaling_out(out, m, n)), name, i))
                for m, n in SCALING_GRIDS[quick].cells() for i in range(draws)]
    if "sweep" in values and name != "herding":
        return [Path(cell_out(str(out), name, i)) for i in range(len(cells(values["sweep"])))]
    return [out]


def commands(name: str, values: dict, quick: bool, results: Path | None) -> list[list[str]]:
    """The `python -m ordersim ...` argument lists that run the experiment (scaling: one per cell)."""
    out = trace_out(values, results)
    quick_flag = ["--quick"] if quick else []
    if name == "scaling":
        grid = SCALING_GRIDS[quick]
        return [["run", str(config_path(name)), "--workers", str(m), "--data", grid.data(m, n), "--out",
                 str(scaling_out(out, m, n)), "--overwrite", *quick_flag] for m, n in grid.cells()]
    return [command(name, values, quick_flag, str(out))]


def command(name: str, values: dict, quick_flag: list[str], out: str) -> list[str]:
    if name == "herding":
        options = ["--workers", *map(str, values["workers"]), "--total", str(values["total"]), "--dim",
                   str(values["dim"]), "--rounds", str(values["rounds"]), "--orderers", *values["orderers"],
                   "--seed", str(values["seed"]), "--out", out, "--overwrite", "--quiet"]
        return ["herding-sim", *options]
    return ["run", str(config_path(name)), "--overwrite", "--out", out, *quick_flag]


def run_in_process(argv: list[str]) -> int:
    """`python -m ordersim run ARGV` in this process; the run's signal handlers (a stop at the next
    epoch) are undone afterwards, so that a signal between runs ends reproduce as it would."""
    from ordersim.stop import SIGNALS
    from ordersim.runner import main as run_main

    saved = {sig: signal.getsignal(sig) for sig in SIGNALS}
    try:
        return run_main(argv[1:])
    except SystemExit as exit:  # abort_on_exception's, after printing the traceback
        return exit.code
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)


def run(name: str, argvs: list[list[str]]) -> int:
    """Run the experiment's commands in turn, each printed first; the first non-zero status ends it."""
    for argv in argvs:
        print(f"reproduce: {name}: python -m ordersim {' '.join(argv)}", flush=True)
        if name == "scaling":
            status = run_in_process(argv)
        else:
            status = subprocess.run([sys.executable, "-m", "ordersim", *argv], cwd=ROOT).returncode
        if status:
            return status
    return 0


# -- reading the traces -------------------------------------------------------------------------------
def runs_table(files):
    from ordersim.analysis import style

    df = style.load([str(f) for f in files])
    df["label"] = df["orderer"]
    return df


def final_mean(df, column: str) -> dict:
    """Per orderer: the mean over seeds of `column` at the last measured epoch."""
    last = df[df.epoch == df.epoch.max()]
    return last.groupby("orderer")[column].mean().to_dict()


def at_time(df, column: str, time: float) -> dict:
    """Per orderer: the mean over seeds of `column` interpolated at training time `time` (seconds
    of wall clock, convergence.time_column)."""
    from ordersim.analysis.convergence import time_column

    clock = time_column(df)[0]
    out = {}
    for orderer, g in df.groupby("orderer"):
        values = [np.interp(time, run[clock].to_numpy(), run[column].to_numpy())
                  for _, run in g.groupby(["file", "seed"])]
        out[orderer] = float(np.mean(values))
    return out


def numbers(values: dict) -> str:
    return ", ".join(f"{k} {v:.4g}" for k, v in sorted(values.items(), key=lambda kv: kv[1]))


# -- the experiments' figures and checks ------------------------------------------------------------
def curves(df, panels, out: Path, name: str, title: str, x: str = "epoch"):
    """One panel per (column, y label, log y): mean and min-max band over seeds, per orderer."""
    from ordersim.analysis import style

    fig, axes = style.figure(len(panels), width=3.4, height=2.6)
    for ax, (column, label, log) in zip(axes, panels):
        for lab, (xs, values) in style.by_seed(df, x, column).items():
            style.band(ax, xs, values, lab)
        ax.set_xlabel({"epoch": "epoch (data passes)"}.get(x, x))
        if x == "epoch":
            style.counted_x(ax)
        ax.set_ylabel(label)
        if log:
            style.log_if_positive(ax, df[column])
    style.legend(axes[0], "minmax" if df.seed.nunique() > 1 else None, figure_level=True)
    fig.tight_layout()
    style.caption(fig, df, extra=title)
    return style.save(fig, out, name)


def grab_mnist(files, quick):
    df = runs_table(files)
    final = final_mean(df, "train_loss")
    others = {k: v for k, v in final.items() if k in ("rr", "so", "flipflop")}
    shown = final["grab"] < min(others.values())
    verdict = Verdict("grab_mnist", None if quick else shown, f"final training loss: {numbers(final)}")
    rr_mean = df[df.orderer == "rr"].groupby("epoch").train_loss.mean()
    df["vs_rr"] = df.train_loss / df.epoch.map(rr_mean) - 1  # the orders differ by far less than the loss falls
    from ordersim.analysis.convergence import LABELS

    accuracy, percent = LABELS["test_accuracy"]
    df["test_accuracy"] *= percent  # as every other figure and the summary table give it
    panels = [("train_loss", "training loss", True), ("vs_rr", "training loss\n/ RR's mean − 1", False),
              ("test_accuracy", accuracy, False)]
    return verdict, (df, panels)


def cdgrab_logreg(files, quick):
    df = runs_table(files)
    final = final_mean(df, "suboptimality")
    from ordersim.analysis.convergence import time_column

    end = min(g[time_column(df)[0]].max() for _, g in df.groupby(["orderer", "seed"]))
    timed = at_time(df, "suboptimality", end)
    rivals = [k for k in final if k != "cd-grab"]
    shown = all(final["cd-grab"] < final[k] and timed["cd-grab"] < timed[k] for k in rivals)
    verdict = Verdict("cdgrab_logreg", None if quick else shown,
                      f"final f - f*: {numbers(final)}; at {end:.2g} s: {numbers(timed)}")
    panels = [("suboptimality", r"$f(x) - f^*$", True)]
    return verdict, (df, panels)


def cdgrab_workers(files, quick):
    df = runs_table(files)
    lead = {}
    for m, g in df.groupby("workers"):
        final = final_mean(g, "train_loss")
        lead[int(m)] = (final["rr"] - final["cd-grab"]) / final["rr"]
    ms = sorted(lead)
    shown = lead[ms[-1]] > lead[ms[0]] and all(lead[a] <= lead[b] for a, b in zip(ms, ms[1:]))
    detail = "relative lead (D-RR - CD-GraB) / D-RR of the final loss: " + ", ".join(
        f"m={m} {lead[m]:+.3f}" for m in ms)
    return Verdict("cdgrab_workers", None if quick else shown, detail), (df, lead)


def rr_w8a(files, quick):
    df = runs_table(files)
    df = df.assign(dist2=df.dist_to_opt**2)
    final = final_mean(df, "suboptimality")
    dist = final_mean(df, "dist2")
    shown = all(final[a] < final[b] and dist[a] < dist[b] for a in ("rr", "so") for b in ("wr", "ig"))
    verdict = Verdict("rr_w8a", shown, f"final f - f*: {numbers(final)}; ||x - x*||^2: {numbers(dist)}")
    panels = [("suboptimality", r"$f(x) - f^*$", True), ("dist2", r"$\|x - x^*\|^2$", True)]
    return verdict, (df, panels)


def scaling_shown(result) -> bool:
    """The scaling claim on a fit table (analysis.fit.table's, or the README's read back)."""
    by = result.set_index(["variable", "orderer"])
    rr_m = by.loc[("m", "rr")]
    shown = rr_m.ci_low <= -1 <= rr_m.ci_high and (result.floor == "-").all()
    for variable in ("m", "n"):
        rr, cd = by.loc[(variable, "rr")], by.loc[(variable, "cd-grab")]
        shown = shown and cd.ci_high < rr.ci_low and rr.ci_high < 0 and cd.ci_low <= -2
    if ("m", "d-grab") in by.index:
        shown = shown and by.loc[("m", "d-grab")].ci_low > 0
    return bool(shown)


def scaling(files, quick):
    from ordersim.analysis import fit, style

    df = style.load([str(f) for f in files])
    result, metric, setting, epoch, notes = fit.table(df)
    detail = "; ".join(f"{r.variable} {r.orderer} {r.exponent:+.2f} [{r.ci_low:+.2f}, {r.ci_high:+.2f}]"
                       for r in result.itertuples())
    text = "\n".join([*style.code_state_lines(df), fit.report(result, metric, setting, epoch, notes)]) + "\n"
    return Verdict("scaling", scaling_shown(result), detail), (df, text)


def herding(files, quick):
    from ordersim.analysis.load import load_herding_sim

    df = load_herding_sim([str(f) for f in files])
    last = df[df["round"] == df["round"].max()]
    table = last.groupby(["workers", "orderer"]).herding.mean().unstack()
    rivals = [k for k in table.columns if k != "cd-grab"]
    below = all(table.loc[m, "cd-grab"] < table.loc[m, k] for m in table.index for k in rivals)
    spread = table["cd-grab"].max() / table["cd-grab"].min()
    m = table.index.max()
    return Verdict("herding", below and spread <= FLAT, f"cd-grab's max / min over m {spread:.2f}; after the last "
                                                        f"round at m = {m}: {numbers(table.loc[m].to_dict())}"), df


def draw(name, verdict, data, out: Path, quick: bool):
    from ordersim.analysis import style

    title = verdict.caption(quick)
    if name == "scaling":
        from ordersim.analysis import scaling as scaling_figure

        df, text = data
        out.mkdir(parents=True, exist_ok=True)
        (out / "scaling.txt").write_text(text)
        fig, _ = scaling_figure.draw(df, title=title)
        return style.save(fig, out, name)
    if name == "herding":
        from ordersim.analysis import herding_sim

        return herding_sim.plot(data, out, title=title, name=name)
    if name == "cdgrab_workers":
        df, lead = data
        fig, axes = style.figure(2, width=3.4, height=2.6)
        last = df[df.epoch == df.epoch.max()]
        for orderer, g in sorted(last.groupby("orderer"), key=lambda kv: style.orderer_key(kv[0])):
            table = g.groupby("workers").train_loss
            ms = np.array(sorted(table.groups))
            style.band(axes[0], ms, np.stack([table.min().loc[ms], table.max().loc[ms]]), orderer, marker="o")
        axes[0].set_ylabel(f"training loss after epoch {int(df.epoch.max())}")
        ms = sorted(lead)
        axes[1].plot(ms, [lead[m] for m in ms], "o-", color=style.color("cd-grab"))
        axes[1].axhline(0, color="0.5", linewidth=0.6)
        axes[1].set_ylabel("(D-RR − CD-GraB) / D-RR")
        for ax in axes:
            style.log2_axis(ax, ms)
            ax.set_xlabel("workers m")
        style.legend(axes[0], None, figure_level=True)
        fig.tight_layout()
        style.caption(fig, df, extra=title)
        return style.save(fig, out, name)
    df, panels = data
    if name != "cdgrab_logreg":
        return curves(df, panels, out, name, title)
    from ordersim.analysis.convergence import time_column

    fig, axes = style.figure(2, width=3.4, height=2.6)
    column, label, _ = panels[0]
    clock, clock_label = time_column(df)
    for lab, (xs, values) in style.by_seed(df, "epoch", column).items():
        style.band(axes[0], xs, values, lab)
    for lab, g in sorted(df.groupby("label"), key=lambda kv: style.orderer_key(kv[0])):
        for _, run in g.groupby(["file", "seed"]):
            axes[1].plot(run[clock], run[column], color=style.color(lab), linewidth=0.8)
    for ax in axes:
        style.log_if_positive(ax, df[column])
    axes[0].set_xlabel("epoch")
    style.counted_x(axes[0])
    axes[1].set_xlabel(f"{clock_label}\nno compilation; a line per seed")  # one line: wider than the panel
    axes[0].set_ylabel(label)
    style.legend(axes[0], "minmax" if df.seed.nunique() > 1 else None, figure_level=True)
    fig.tight_layout()
    style.caption(fig, df, extra=title)
    return style.save(fig, out, name)


CHECKS = {"scaling": scaling, "grab_mnist": grab_mnist, "cdgrab_logreg": cdgrab_logreg, "cdgrab_workers": cdgrab_workers,
          "rr_w8a": rr_w8a, "herding": herding}


def parser() -> argparse.ArgumentParser:
    extras.require_or_exit(PROG, "reproduce", "analysis")  # one line, not style's traceback, without matplotlib
    from ordersim.analysis import style  # its argument types: checked before anything runs

    p = OneLineParser(prog=PROG, description=__doc__,
                      formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("names", nargs="*", metavar="NAME", help=f"experiments (default: all): {', '.join(EXPERIMENTS)}")
    p.add_argument("--quick", action="store_true", help="the configs' [quick] size (CI), into results/papers/quick/")
    p.add_argument("--figures", type=style.out_dir, default=None, metavar="DIR",
                   help="where the figures go (default: results/papers/figures, or results/papers/quick/figures)")
    p.add_argument("--results", default=None, metavar="DIR",
                   help="write (and read) the traces under DIR instead of at the configs' `out`")
    p.add_argument("--no-run", action="store_true", help="draw from the traces already written")
    p.add_argument("--dpi", type=style.dpi, default=110, help="PNG resolution (default: 110)")
    style.add_size_arguments(p)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    unknown = [n for n in args.names if n not in EXPERIMENTS]
    if unknown:
        print(f"reproduce: error: unknown experiment(s) {', '.join(unknown)}; known: {', '.join(EXPERIMENTS)}",
              file=sys.stderr)
        return 2
    from ordersim.analysis import style

    style.apply(args)
    out = Path(args.figures or ROOT / "results" / "papers" / ("quick" if args.quick else "") / "figures")
    results = Path(args.results).resolve() if args.results else None
    if args.no_run:  # every experiment's traces first: one line, before any figure is drawn
        for name in args.names or EXPERIMENTS:
            files = trace_files(name, config(name, args.quick), results, args.quick)
            missing = [path for path in files if not path.is_file()]
            if missing:
                print(f"reproduce: error: --no-run: {len(missing)} of the {len(files)} trace(s) of {name} "
                      f"are not there (e.g. {missing[0]}); run `python -m ordersim reproduce {name}"
                      f"{' --quick' if args.quick else ''}{f' --results {args.results}' if args.results else ''}` "
                      f"first", file=sys.stderr)
                return 2
    failed, lines = [], {}
    for name in args.names or EXPERIMENTS:
        values = config(name, args.quick)
        if not args.no_run:
            status = run(name, commands(name, values, args.quick, results))
            if status == EXIT_CHECKPOINTED:  # a signal stopped the run: stop here too
                return status
            if status:
                failed.append(name)
                continue
        verdict, data = CHECKS[name](trace_files(name, values, results, args.quick), args.quick)
        draw(name, verdict, data, out, args.quick)
        lines[name] = verdict.line(args.quick)
        print(lines[name], flush=True)
    write_verdicts(out / "verdicts.txt", lines)
    if failed:
        print(f"reproduce: error: the run(s) of {', '.join(failed)} failed (their output above)", file=sys.stderr)
        return 1
    return 0


def write_verdicts(path: Path, lines: dict) -> None:
    """DIR/verdicts.txt: this call's verdict lines and the earlier lines of the experiments it did
    not run, in the order of EXPERIMENTS."""
    old = {}
    if path.exists():
        for line in path.read_text().splitlines():
            name = line.split(":")[0]
            if name in EXPERIMENTS:
                old[name] = line
    merged = {**old, **lines}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(merged[name] + "\n" for name in EXPERIMENTS if name in merged))


if __name__ == "__main__":
    raise SystemExit(main())
