"""The trace's datasets, in one table (docs/trace-format.md is generated from it).

The writer (ordersim.trace) takes a per-epoch dataset's dtype from here and refuses a name that is
not here; the loader (ordersim.analysis.load) takes from here which datasets every run has and
which a config field switches on; the layout test checks a real trace against it; and the tables
of docs/trace-format.md between the ``<!-- schema:NAME -->`` markers are ``markdown(NAME)``:

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


CONVEX = "convex problems (x* known)"
SHUFFLE = "`shuffle_variance = true` (x* known)"
HERDING = "`herding` on (the default; `--no-herding` turns it off)"

# One entry per measured epoch (epoch 0 is the initial model, before any training; with
# measure_every = K the epochs 0, K, 2K, ..., and always the last): /runs/<orderer>/seed_<k>/NAME.
PER_EPOCH = (
    Dataset("epoch", "int64", "(T,)", "always", "epoch index t: the model after t epochs", always=True),
    Dataset("train_loss", "float64", "(T,)", "always",
            "f(x_t), the full training objective (regularizer included) over all m·n examples", always=True),
    Dataset("suboptimality", "float64", "(T,)", CONVEX, "f(x_t) − f*"),
    Dataset("grad_norm", "float64", "(T,)", "always", "‖∇f(x_t)‖₂", always=True),
    Dataset("dist_to_opt", "float64", "(T,)", CONVEX, "‖x_t − x*‖₂"),
    Dataset("test_loss", "float64", "(T,)", "`test_fraction > 0`", "the loss on the held-out split"),
    Dataset("test_accuracy", "float64", "(T,)", "`test_fraction > 0`, classifiers",
            "the accuracy on the held-out split"),
    Dataset("train_accuracy", "float64", "(T,)", "classifiers", "the accuracy on the training examples"),
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
            "seconds since the run started (cumulative); the run starts after its warm-up, so no "
            "compilation is in it", always=True),
    Dataset("compute_time", "float64", "(T,)", "always",
            "cumulative seconds spent computing gradients and updates (timed inside the jitted epoch "
            "loops with `clock_gettime`; where the C library lacks it, Windows, it reads 0)", always=True),
    Dataset("order_time", "float64", "(T,)", "always", "the same, in the orderer", always=True),
    Dataset("comm_time", "float64", "(T,)", "always", "the same, in MPI collectives", always=True),
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

TABLES = {"per-epoch": PER_EPOCH, "per-run": PER_RUN, "root": ROOT}
_BY_NAME = {entry.name: entry for entry in PER_EPOCH}


def epoch_dtype(name: str) -> str:
    """The dtype of per-epoch dataset `name`; KeyError naming the table for one not in it."""
    try:
        return _BY_NAME[name].dtype
    except KeyError:
        raise KeyError(f"{name!r} is not a per-epoch dataset of ordersim/trace_schema.py") from None


def markdown(table: str) -> str:
    """The docs' table of TABLES[table]."""
    lines = ["| dataset | dtype, shape | written | meaning |", "|---|---|---|---|"]
    for entry in TABLES[table]:
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
