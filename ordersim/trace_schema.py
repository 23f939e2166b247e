"""The trace's datasets and attributes, in tables (docs/trace-format.md is generated from them).

A per-epoch dataset is a row of PER_EPOCH: the values of the full-gradient pass and the walk
metrics that ordersim.simulate.Run.measure computes itself, and the datasets every measurement
plug-in declares (ordersim.measurements: the built-ins here, installed ones and files by path in
``epoch_datasets()``). The writer (ordersim.trace) takes a per-epoch dataset's dtype from here and
refuses a name that is not here; the loader (ordersim.analysis.load) takes from here which datasets
every run has and which a config field switches on; the layout tests check a real trace's
datasets and attributes against the tables; and the tables of docs/trace-format.md between the
``<!-- schema:NAME -->`` markers are ``markdown(NAME)``:

    python -m ordersim.trace_schema            rewrite those tables in docs/trace-format.md
    python -m ordersim.trace_schema --check    exit 1 when they differ from this table

(tests/test_docs.py runs the check).
"""

import re
import sys
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Dataset:
    """One dataset: its path below its group, dtype and shape (T: measured epochs; E: trained
    epochs; S: steps; m workers, n examples each), when it is written and what it holds.
    ``config_field``: the boolean config field that switches it on (its presence in every run of
    a file then follows from the file's config); ``always``: every run has it."""

    name: str
    dtype: str
    shape: str
    when: str
    meaning: str
    always: bool = False
    config_field: str = ""

    @property
    def ndim(self) -> int:
        return len([axis for axis in self.shape.strip("()").split(",") if axis.strip()])


@dataclass(frozen=True)
class Attribute:
    """One HDF5 attribute (or a few of one kind: ``names``, comma-separated), its type as the
    docs say it and what it holds (when it is there, where not always)."""

    names: str
    type: str
    meaning: str

    @property
    def each(self) -> tuple[str, ...]:
        return tuple(name.strip() for name in self.names.split(","))


CONVEX = "convex problems (x* known)"
SHUFFLE = "`shuffle_variance = true` (x* known)"
HERDING = "`herding` on (the default; `--no-herding` turns it off)"

# One entry per measured epoch (epoch 0 is the initial model, before any training; with
# measure_every = K the epochs 0, K, 2K, ..., and always the last): /runs/<orderer>/seed_<k>/NAME.
# Run.measure's own: the full-gradient pass (first), the walks over the next order and the clocks
# (after the measurements' datasets).
MEASURED_FIRST = (
    Dataset("epoch", "int64", "(T,)", "always", "epoch index t: the model after t epochs", always=True),
    Dataset("train_loss", "float64", "(T,)", "always",
            "f(x_t), the full training objective (regularizer included) over all m·n examples", always=True),
    Dataset("grad_norm", "float64", "(T,)", "always", "‖∇f(x_t)‖₂", always=True),
    Dataset("train_accuracy", "float64", "(T,)", "classifiers", "the accuracy on the training examples"),
)
MEASURED_LAST = (
    Dataset("herding_inf", "float64", "(T,)", HERDING,
            "parallel herding (∞-norm, prefixes at step boundaries) of the order that epoch t+1 will "
            "use, on per-example gradients at x_t", config_field="herding"),
    Dataset("herding_2", "float64", "(T,)", HERDING, "the same in the 2-norm", config_field="herding"),
    Dataset("avg_grad_error", "float64", "(T,)", HERDING,
            "average gradient error of that order at x_t, Σ_k ‖(1/k) Σ_{j≤k} g_{π(j)} − ḡ‖², each worker's "
            "own with its own mean ḡ, averaged over the workers (docs/algorithms.md, \"Metrics\")",
            config_field="herding"),
    Dataset("shuffle_variance", "float64", "(T,)", SHUFFLE,
            "shuffling variance σ²_Shuffle at x* of that order, at the step γ = α/(m·b) of epoch t+1 "
            "(docs/algorithms.md, \"Metrics\")", config_field="shuffle_variance"),
    Dataset("shuffle_variance_upper", "float64", "(T,)", SHUFFLE, "its upper bound γ L n σ*²/4",
            config_field="shuffle_variance"),
    Dataset("shuffle_variance_lower", "float64", "(T,)", SHUFFLE,
            "its lower bound γ μ n σ*²/8 (NaN where μ is)", config_field="shuffle_variance"),
    Dataset("balance_discrepancy", "float64", "(T,)", "always",
            "max_k ‖s_k‖_∞ of the running sum during epoch t (0 at epoch 0 and for orderers that do "
            "not balance)", always=True),
    Dataset("wall_time", "float64", "(T,)", "always",
            "seconds since the run started (cumulative), everything included: training, "
            "measurements, trace writes; the run starts after its warm-up, so no compilation is in it",
            always=True),
    Dataset("train_time", "float64", "(T,)", "always",
            "cumulative wall-clock seconds of the training epochs (the orderer, the steps and their "
            "exchange), without the measurements and the trace: the time axis that compares "
            "orderers (0 at epoch 0)", always=True),
    Dataset("compute_time", "float64", "(T,)", "always",
            "the part of `train_time` spent computing gradients and updates (timed inside the jitted "
            "epoch loops with `clock_gettime`; where the C library lacks it, Windows, it reads 0)",
            always=True),
    Dataset("order_time", "float64", "(T,)", "always", "the same, in the orderer", always=True),
    Dataset("comm_time", "float64", "(T,)", "always", "the same, in the training's MPI collectives",
            always=True),
    Dataset("measure_time", "float64", "(T,)", "always",
            "cumulative wall-clock seconds of the measurements up to and including epoch t's (the "
            "full-gradient pass, herding, the other measurements and their collectives), which "
            "`train_time` leaves out", always=True),
    Dataset("sim_time", "float64", "(T,)", "`stragglers` set",
            "cumulative simulated seconds ([stragglers.md](stragglers.md))"),
    Dataset("sim_epoch_time", "float64", "(T,)", "`stragglers` set", "simulated seconds of epoch t"),
)

# The run's other datasets, below /runs/<orderer>/seed_<k>.
PER_RUN = (
    Dataset("orders", "int32", "(E + 1, m, n)", "`--record-orders`",
            "`orders[t]` is the visit order used in epoch t+1 (row i = worker i's order of its local "
            "examples 0..n−1; local example j of worker i is training example `shards[i, j]`)"),
    Dataset("steps/epoch", "int64", "(S / K,)", "`--trace-every K`", "the epoch of every K-th step"),
    Dataset("steps/step", "int64", "(S / K,)", "`--trace-every K`", "its global step index"),
    Dataset("steps/loss", "float64", "(S / K,)", "`--trace-every K`",
            "the mean minibatch loss of that step over all workers"),
    Dataset("stragglers/step_time", "float64", "(S,)", "`stragglers` set",
            "simulated seconds of every step: model broadcast plus the wait for the decoding responder"),
    Dataset("stragglers/responded", "uint8", "(S, m)", "`stragglers` set",
            "whose message had arrived by then"),
    *(Dataset(f"stragglers/coverage_{stat}", "float64", "(E,)", "`stragglers` set",
              f"the {word} over all m·n examples of how many updates an example's gradient entered "
              "with a non-zero weight, one entry per trained epoch")
      for stat, word in (("min", "minimum"), ("mean", "mean"), ("max", "maximum"))),
    *(Dataset(f"stragglers/coverage_weight_{stat}", "float64", "(E,)", "`stragglers` set",
              f"the {word} of that total weight") for stat, word in
      (("min", "minimum"), ("mean", "mean"), ("max", "maximum"))),
    Dataset("stragglers/coverage", "int16", "(E, m, n)", "`stragglers` set and `--record-orders`",
            "`coverage[t, j, e]` is the count of local example e of partition (worker) j in epoch "
            "t+1, the epoch that visited `orders[t]`"),
)

# Datasets at the file's root.
ROOT = (
    Dataset("shards", "int64", "(m, n)", "always", "training-example index of every worker's local example",
            always=True),
    Dataset("x_star", "float64", "(d,)", CONVEX,
            "the reference solution used for `suboptimality` and `dist_to_opt`"),
)

# The file's root attributes (ordersim.simulate.open_trace, ordersim.provenance, ordersim.sweep).
ROOT_ATTRIBUTES = (
    Attribute("ordersim_version", "str", "package version that wrote the file"),
    Attribute("git_commit", "str",
              "commit of the checkout ordersim was imported from (`''` when not run from a git checkout)"),
    Attribute("git_dirty", "bool", "a tracked file differed from that commit (untracked files do not count)"),
    Attribute("git_diff_sha1", "str", "first 12 hex digits of the SHA-1 of `git diff HEAD` when dirty (`''` "
              "otherwise): two dirty trees on one commit differ here"),
    Attribute("numpy_version, numba_version, mpi4py_version, h5py_version", "str",
              "the libraries' versions (`''` when not installed)"),
    Attribute("mpi_library", "str", "first line of `MPI.Get_library_version()` (`''` without mpi4py)"),
    Attribute("command_line", "str", "the command that ran, as it can be run again: the interpreter's full "
              "path, `-m ordersim` (or the script), the arguments; shell-quoted"),
    Attribute("working_directory", "str", "the directory it ran in, which its relative paths are relative to"),
    Attribute("plugin_files", "str (JSON object)", "every plug-in file given by path (problem, orderer, data "
              "source, ...): its absolute path -> the SHA-256 of its contents as imported (`{}` when none)"),
    Attribute("config", "str (JSON)", "the full resolved configuration (every field, defaults included)"),
    Attribute("ranks", "int", "number of MPI ranks (1 for the serial backend)"),
    Attribute("backend", "str", "`serial` or `mpi`"),
    Attribute("exchange", "str", "how the ranks exchanged each step's sums or gradients: `shared-memory` (all "
              "ranks on one node), `allgather` (MPI_Allgather), `none` (serial)"),
    Attribute("hosts", "str (JSON list)", "host names of the ranks"),
    Attribute("start_time, end_time", "str (ISO 8601, UTC)", "`end_time` is absent when the job did not finish: it was killed, "
              "or stopped with a checkpoint (SIGUSR1, SIGTERM: exit 3) until `--resume` finishes it"),
    Attribute("resumes", "str (JSON list)", "one object per `--resume` that continued this trace, in order: "
              "its `time`, `ranks`, `backend`, `exchange` and `hosts`, and its code state (the code-state "
              "attributes above, `command_line`, `working_directory` and `plugin_files` included, `hosts` a list and `plugin_files` an object in it); absent when the trace was never resumed. The "
              "root's own code state is that of the job that created the trace"),
    Attribute("problem, data", "str", "problem name and data spec"),
    Attribute("data_info", "str (JSON)", "the data set as opened: `source` (the data spec), `kind`, "
              "standardization, intercept, the test split, sizes and what its source adds (label map, "
              "feature names, …)"),
    Attribute("setup_time", "float", "seconds from the job's start (after its imports) to the trace's creation: "
              "the data, the compiling on a cold cache (under MPI the node's first rank compiles every kernel "
              "then) and the problem's constants; a resumed trace keeps the first job's"),
    Attribute("dropped_examples", "int", "training examples dropped so that every worker holds n (0 if none)"),
    Attribute("run_id", "str", "random id (32 hex digits) of this trace, made when it was created; its "
              "checkpoints carry it, and `--resume` continues only from a checkpoint with the same one"),
    Attribute("sweep_cell", "str (JSON)", "the sweep cell's parameters (only in a sweep cell's file)"),
    Attribute("sweep_cell_index, sweep_cells", "int", "the cell's index and the number of cells of its sweep "
              "(only in a sweep cell's file; `merge` names the missing cells from them)"),
    Attribute("sweep", "str (JSON)", "the sweep's axes, field: [values] (only in a sweep cell's file; all of "
              "them, also those a flag pinned to select the cell)"),
)

# The attributes of a run's group /runs/<orderer>/seed_<k> (ordersim.simulate.run_experiment,
# ordersim.trace.TraceWriter.start_run).
RUN_ATTRIBUTES = (
    Attribute("orderer, seed", "str, int", "the run's orderer (its name) and seed"),
    Attribute("workers, examples_per_worker, batch", "int", "m, n and b"),
    Attribute("lr", "float", "the config's step size (the schedule's base value)"),
    Attribute("status", "str", "`completed`, `diverged` or `interrupted`; a run is `interrupted` from its "
              "start until it finishes, so a killed job leaves that value"),
    Attribute("epochs_completed", "int", "the last epoch whose rows were flushed (0 at the start)"),
    Attribute("compile_time", "float", "seconds of the warm-up that compiled this orderer's kernels before "
              "the run's clock started (a throwaway run of one epoch at step size 0 on the first 16, or 2b, "
              "examples of every worker's shard, and one measurement; done for the first run of each "
              "orderer in a job (or in a `--resume`d job's process: a resumed trace may have it on a later "
              "seed), 0 for the others; under MPI on a cold cache the node's first rank "
              "compiled the kernels before, in the root's `setup_time`, and this is their loading)"),
    Attribute("f_star, L, L_max, mu, sigma2_star, zeta2_star", "float",
              "the problem's constants (NaN where undefined, e.g. f* of a nonconvex problem)"),
    Attribute("step_size, alpha_L_n, alpha_Lmax_n", "float",
              "on a problem with a known L_max (every built-in one but `mlp`), for every schedule: the step "
              "α of every epoch (the `theory` and `constant` schedules; a decaying one records `largest_step` "
              "instead and the numbers are at it), α L n and α L_max n ([simulator.md](simulator.md), \"The "
              "theory schedule and the analyses' regime\")"),
    Attribute("largest_step", "float", "with those, for a decaying schedule (`step`, `inv-epoch`, "
              "`inv-sqrt-epoch`): its largest step"),
    Attribute("kappa, T_over_kappa", "float", "with those, on a problem with μ > 0: κ = L_max / μ and T / κ"),
    Attribute("analyses", "str", "with those: whose assumptions `in_regime` checks, `PL` (μ > 0) or "
              "`smooth non-convex`"),
    Attribute("in_regime", "bool", "with those: α L_max n ≤ 1, and under PL T ≥ κ, in the analyses' setting "
              "(b = 1, no momentum, a constant step: a run with b > 1, momentum or a decaying schedule is "
              "outside whatever its numbers)"),
    Attribute("outside_setting", "str", "with those, for a run with b > 1, momentum or a decaying schedule: "
              "why it is outside the analyses' setting"),
    Attribute("theory_step", "float", "with those, for the `theory` schedule: the analyses' step; `step_size` "
              "is min(lr, theory_step), and below it the run does not take the step the rate assumes"),
    Attribute("straggler_model, straggler_params, coding", "str", "with a straggler model (`stragglers` set; "
              "[stragglers.md](stragglers.md)): its name, its parameters (a JSON object), and the coding "
              "scheme's name"),
    Attribute("coding_s, load", "int", "with a straggler model: the stragglers s the scheme tolerates, and its "
              "load"),
    Attribute("latency, bandwidth", "float", "with a straggler model: the communication model's latency (s) "
              "and bandwidth (bytes/s; `inf`: transfer is free)"),
)

_STATIC_TABLES = {"per-run": PER_RUN, "root": ROOT, "root-attributes": ROOT_ATTRIBUTES,
                  "run-attributes": RUN_ATTRIBUTES}
_MEASURED_HERE = {entry.name: entry for entry in (*MEASURED_FIRST, *MEASURED_LAST)}


def _rows(classes) -> tuple[Dataset, ...]:
    return tuple(entry for cls in classes for entry in cls.datasets)


def __getattr__(name: str):
    """PER_EPOCH and TABLES, built at first use: they hold the built-in measurements' rows, whose
    modules import this one."""
    if name == "PER_EPOCH":
        from ordersim.measurements import builtin_measurements

        return (*MEASURED_FIRST, *_rows(builtin_measurements()), *MEASURED_LAST)
    if name == "TABLES":
        return {"per-epoch": __getattr__("PER_EPOCH"), **_STATIC_TABLES}
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def epoch_datasets() -> tuple[Dataset, ...]:
    """Every per-epoch dataset this process knows: PER_EPOCH, then the datasets of the installed
    measurements (entry points) and of those loaded from files."""
    from ordersim.measurements import MEASUREMENTS, builtin_measurements

    builtin = set(builtin_measurements())
    return (*__getattr__("PER_EPOCH"), *_rows(cls for cls in MEASUREMENTS.loaded() if cls not in builtin))


def epoch_dtype(name: str) -> str:
    """The dtype of per-epoch dataset `name`; KeyError naming the table for one not in it."""
    entry = _MEASURED_HERE.get(name) or next((e for e in epoch_datasets() if e.name == name), None)
    if entry is None:
        raise KeyError(f"{name!r} is not a per-epoch dataset of ordersim/trace_schema.py or of a measurement")
    return entry.dtype


def switched_on(config: dict) -> set[str]:
    """The per-epoch datasets that a trace's config (parsed) switches on, so that every run of the
    file has them: those of its true boolean fields, and those of the registered measurements that
    its ``measurements`` names (one given by a path is not imported to find out)."""
    from ordersim.measurements import MEASUREMENTS

    names = {e.name for e in epoch_datasets() if e.config_field and config.get(e.config_field)}
    for measurement in config.get("measurements") or ():
        if isinstance(measurement, str) and measurement in MEASUREMENTS:
            names |= {e.name for e in MEASUREMENTS[measurement].datasets}
    return names


def markdown(table: str) -> str:
    """The docs' table of TABLES[table]."""
    rows = __getattr__("TABLES")[table]
    if isinstance(rows[0], Attribute):
        lines = ["| attribute | type | meaning |", "|---|---|---|"]
        for entry in rows:
            lines.append(f"| {', '.join(f'`{n}`' for n in entry.each)} | {entry.type} | {entry.meaning} |")
        return "\n".join(lines)
    lines = ["| dataset | dtype, shape | written | meaning |", "|---|---|---|---|"]
    for entry in rows:
        lines.append(f"| `{entry.name}` | {entry.dtype} {entry.shape} | {entry.when} | {entry.meaning} |")
    return "\n".join(lines)


DOC = Path(__file__).resolve().parent.parent / "docs" / "trace-format.md"
_MARKED = re.compile(r"(<!-- schema:(?P<name>[a-z-]+) -->\n).*?(<!-- /schema -->)", re.S)


def generated(text: str) -> str:
    """`text` (docs/trace-format.md) with every marked table replaced by markdown(its name)."""
    return _MARKED.sub(lambda m: m.group(1) + markdown(m.group("name")) + "\n" + m.group(3), text)


def main(argv: list[str]) -> int:
    text = DOC.read_text(encoding="utf-8")
    if argv == ["--check"]:
        if generated(text) != text:
            print(f"{DOC}: its tables differ from ordersim/trace_schema.py; run "
                  "`python -m ordersim.trace_schema`", file=sys.stderr)
            return 1
        return 0
    if argv:
        print("usage: python -m ordersim.trace_schema [--check]", file=sys.stderr)
        return 2
    DOC.write_text(generated(text), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
