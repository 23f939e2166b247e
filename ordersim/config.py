"""The experiment configuration: one dataclass, read from TOML and command-line flags, and its
validation.

Every field has a help text (the `--help` of `python -m ordersim run`) and is checked here: its
type when it is read (build_config), its value by check_fields, on every rank before any compute.
A bad value raises ConfigError, whose one-line message names the field, the bad value and what is
allowed. Each choice list is written once: the fixed ones below, the plug-in kinds' in their
registries (ordersim.registry), the orderers' options in ordersim.orderers.base; help texts and
errors are built from them. What needs the data (the data spec itself, the problem's options, the
partition) is checked by ordersim.simulate.prepare, the theory schedule's mu > 0 once the
constants are known.
"""

import argparse
import dataclasses
import json
import math
import os
import sys
import time
import tomllib
import warnings
from dataclasses import dataclass, field, replace
from pathlib import Path

# After SIGTERM/SIGUSR1 a wait may last this long (from the later of its start and the signal):
# shorter than Slurm's default KillWait (30 s), so the job says why it ends before SIGKILL comes;
# longer than any wait of a healthy job (the epoch boundary's trace write on a slow file system).
SIGNAL_GRACE_SECONDS = 20.0


class ConfigError(ValueError):
    """A bad configuration value; the message is the one line the user sees."""


SCHEDULES = ("constant", "step", "inv-epoch", "inv-sqrt-epoch", "theory")
BACKENDS = ("auto", "serial", "mpi")
EXCHANGES = ("auto", "allgather")
PARTITIONS = ("contiguous", "shuffled", "dirichlet")
REMAINDERS = ("drop", "error")


def _help(text: str, choices=None, **kw):
    """A field with its help text; ``choices`` (a function returning the text that replaces
    "{choices}" in it) reads a registry only when a help text is printed."""
    return field(metadata={"help": text, "choices": choices}, **kw)


def _straggler_choices() -> str:
    from ordersim.stragglers import STRAGGLER_MODELS

    return STRAGGLER_MODELS.choices()


def _coding_choices() -> str:
    from ordersim.coding import SCHEMES

    exact = [name for name, cls in SCHEMES.items() if cls.exact]
    decoded = [name for name, cls in SCHEMES.items() if not cls.exact]
    return (f"{', '.join(exact)} (exact: the clock only), {', '.join(decoded)} (the update is the "
            f"scheme's decoded gradient)")


def _measurement_choices() -> str:
    from ordersim.measurements import MEASUREMENTS

    opt_in = [name for name, cls in MEASUREMENTS.items() if not cls.default]
    always = [name for name, cls in MEASUREMENTS.items() if cls.default]
    return f"{', '.join(opt_in) or 'none installed'}; {', '.join(always)} always run"


def _data_choices() -> str:
    from ordersim.data import DATA_SOURCES

    return DATA_SOURCES.choices()


@dataclass
class Config:
    problem: str = _help("finite-sum problem by name (see `python -m ordersim problems`) or a path to a "
                         "module following the problem contract (imported: it runs as Python code)",
                         default="logistic")
    problem_options: dict = _help("problem options as a TOML table / JSON object; none given: the "
                                  "problem's own defaults (every bundled problem takes lam, its L2 "
                                  "weight; see docs/problems.md)", default_factory=dict)
    data: str = _help("data spec SOURCE:NAME_OR_PATH?key=value&..., sources {choices}, or "
                      "FILE.py:NAME_OR_PATH for a source in a .py file (`python -m ordersim problems` "
                      "lists the data sets)", choices=_data_choices, default="sklearn:breast_cancer")
    standardize: bool = _help("standardize every feature to zero mean and unit variance", default=True)
    intercept: bool = _help("append a constant-1 feature (the intercept)", default=True)
    test_fraction: float = _help("fraction of the examples held out as a test split (0 = none)",
                                 default=0.2)
    partition: str = _help(f"how examples are split across workers: {', '.join(PARTITIONS)}",
                           default="shuffled")
    alpha: float = _help("Dirichlet concentration for partition=dirichlet (smaller = more label skew)",
                         default=1.0)
    remainder: str = _help("when the training examples are not a multiple of the workers: drop the "
                           "remainder (with a warning, recorded in the trace) or error", default="drop")
    data_seed: int = _help("seed of the data split and partition (shared by all runs)", default=0)
    orderers: list = _help("orderers to compare, by name (see `python -m ordersim orderers`) or path "
                           "to a .py file (imported: it runs as Python code)",
                           default_factory=lambda: ["rr", "d-grab", "cd-grab"])
    sign: str = _help("balancing sign rule: deterministic or walk (self-balancing walk)",
                      default="deterministic")
    walk_c: float = _help("the self-balancing walk's c (0 = the theory's 30 log(N d / 0.01))",
                          default=0.0)
    tie: str = _help("sign of a tie <s,v> = 0: plus (+1) or minus (-1)", default="plus")
    first_order: str = _help("order of the first epoch: random or identity", default="random")
    orderer_options: dict = _help("options of the balancing orderers as a table, e.g. {projection = "
                                  "\"sparse\", projection_dim = 64, group = 4}: projection (none, gaussian, "
                                  "sparse), projection_dim (k; 0 = the Johnson-Lindenstrauss default), group "
                                  "(r examples balanced as one unit; r divides batch); the orderers that "
                                  "ignore the gradients ignore them (docs/algorithms.md); and the orderers' "
                                  "own options (recursive-pair's block, sbw's b_max, a plug-in's "
                                  "extra_options), each taken by the orderers that have it",
                                  default_factory=dict)
    workers: int = _help("logical workers m (0 = number of MPI ranks, or 8 in a single process); a "
                         "multiple of the number of ranks", default=0)
    epochs: int = _help("training epochs T", default=30)
    batch: int = _help("examples per worker per step b (the per-worker microbatch)", default=1)
    lr: float = _help("step size (the base value of the schedule)", default=0.3)
    schedule: str = _help(f"step-size schedule: {', '.join(SCHEDULES)} (formulas in docs/simulator.md)",
                          default="constant")
    lr_decay: float = _help("decay factor: step (lr * decay^floor(t/lr_step)), inv-epoch "
                            "(lr / (1 + decay t)), inv-sqrt-epoch (lr / sqrt(1 + decay t))",
                            default=0.5)
    lr_step: int = _help("epochs between decays of the step schedule", default=10)
    momentum: float = _help("heavy-ball momentum (v = momentum v + g; x -= lr v)", default=0.0)
    weight_decay: float = _help("weight decay added to the gradient (on top of the problem's "
                                "regularizer)", default=0.0)
    seeds: list = _help("run seeds; each seed gives the model init, first orders and random streams",
                        default_factory=lambda: [0, 1, 2])
    measure_every: int = _help("measure every K epochs (epoch 0 and the last are always measured)",
                               default=1)
    herding: bool = _help("measure the parallel herding of the next order and its average gradient "
                          "error (one extra gradient pass)", default=True)
    shuffle_variance: bool = _help("measure the shuffling variance at x* of the next order and its two "
                                   "bounds (convex problems whose x* is known; one loss and gradient "
                                   "per example at x*)", default=False)
    measurements: list = _help("more per-epoch trace datasets: measurements by name ({choices}) or a path to "
                               "a .py file (imported: it runs as Python code; docs/adding.md, \"A trace "
                               "dataset\")", choices=_measurement_choices, default_factory=list)
    record_orders: bool = _help("store every epoch's orders in the trace: int32 (E + 1, m, n) for E "
                                "epochs, orders[t] the one used in epoch t + 1",
                                default=False)
    trace_every: int = _help("store the minibatch loss every K steps (0 = off)", default=0)
    stragglers: str = _help("straggler model of the simulated clock ('' = off): {choices} "
                            "(docs/stragglers.md), or a path to a .py file", choices=_straggler_choices,
                            default="")
    straggler_options: dict = _help("straggler model parameters as a table, e.g. {a = 1, mu = 1}; "
                                    "latency (s) and bandwidth (bytes/s) set the communication model",
                                    default_factory=dict)
    coding: str = _help("straggler mitigation (needs stragglers): {choices} (docs/stragglers.md), or "
                        "a path to a .py file", choices=_coding_choices, default="wait-all")
    coding_s: int = _help("stragglers s the coding tolerates, < workers (gc-fr and the pgc-fr schemes need "
                          "(s+1) | workers)", default=1)
    checkpoint_every: int = _help("also write a checkpoint every K epochs (0 = only when SIGTERM or "
                                  "SIGUSR1 arrives); resume with --resume", default=0)
    hdf5_locking: bool = _help("let HDF5 lock the files it opens (the trace, an hdf5: data set); "
                               "--no-hdf5-locking on NFS/Lustre, which often lack the locks",
                               default=True)
    backend: str = _help("serial (all workers in one process), mpi (ranks host workers), or auto "
                         "(mpi when there are several ranks)", default="auto")
    exchange: str = _help("mpi backend: how ranks exchange each step's sums or gradients: auto "
                          "(through shared memory when all ranks are on one node, else "
                          "MPI_Allgather) or allgather (always); the traces are the same",
                          default="auto")
    stall_timeout: float = _help("mpi backend: seconds a rank may wait for the others at one exchange "
                                 "or agreement before the whole job aborts (exit 4) with one line "
                                 "naming the wait; after SIGTERM/SIGUSR1 no wait lasts more than "
                                 f"{SIGNAL_GRACE_SECONDS:g} s "
                                 "past the signal (0 = no timeout; docs/cluster.md)", default=600.0)
    out: str = _help("output HDF5 file ('' = ordersim-<UTC time>.h5 in the current directory); an "
                     "existing file is refused unless it is an ordersim trace and --overwrite or "
                     "--resume is given, and so is the run's own input file", default="")
    overwrite: bool = _help("replace an existing ordersim trace at out (never any other file); with "
                            "--resume, a trace that can be continued is continued", default=False)
    cache_dir: str = _help("directory for cached problem constants ('' = ~/.cache/ordersim or "
                           "$ORDERSIM_CACHE)", default="")
    quiet: bool = _help("print only the summary table", default=False)

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), sort_keys=True)


FIELDS = {f.name: f for f in dataclasses.fields(Config)}


def _type_name(f) -> str:
    if f.type is dict:
        return 'table: a TOML inline table ({a = 1, b = "x"}) or a JSON object ({"a": 1, "b": "x"})'
    return {"orderers": "list of names", "measurements": "list of names", "seeds": "list of ints"}.get(
        f.name, f.type.__name__ if isinstance(f.type, type) else str(f.type))


def _table(text: str):
    """A table given as text (a flag's value): a JSON object or a TOML inline table, the form the
    help texts and TOML configs show."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        document = tomllib.loads(f"table = {text}")  # TOMLDecodeError is a ValueError
        if list(document) != ["table"]:  # more than one value
            raise ValueError(text) from None
        return document["table"]


def _coerce(name: str, value):
    """Convert a TOML or command-line value to the field's type, or say what is allowed."""
    f = FIELDS[name]
    kind = f.type
    try:
        if kind is bool:
            if isinstance(value, bool):
                return value
            if str(value).lower() in ("1", "true", "yes", "on"):
                return True
            if str(value).lower() in ("0", "false", "no", "off"):
                return False
            raise ValueError
        if kind is int:
            if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
                raise ValueError
            return int(value)
        if kind is float:
            if isinstance(value, bool):
                raise ValueError
            return float(value)
        if kind is str:
            if not isinstance(value, str):
                raise ValueError
            return value
        if kind is dict:
            value = _table(value) if isinstance(value, str) else value
            if not isinstance(value, dict):
                raise ValueError
            return dict(value)
        if kind is list:
            if isinstance(value, str):
                value = [v for v in value.replace(",", " ").split() if v]
            if not isinstance(value, (list, tuple)):
                raise ValueError
            if name == "seeds":
                return [_coerce_int_item(name, v) for v in value]
            return [str(v) for v in value]
    except (ValueError, TypeError, json.JSONDecodeError):
        raise ConfigError(f"config field {name!r}: {value!r} is not a valid {_type_name(f)}") from None
    raise AssertionError(kind)


def _coerce_int_item(name, v):
    if isinstance(v, bool) or (isinstance(v, float) and not v.is_integer()):
        raise ValueError
    return int(v)


def read_toml(path: str) -> dict:
    p = Path(path)
    if not p.is_file():
        from ordersim.output import missing_file

        raise ConfigError(f"config file {path!r} {missing_file(path)}")
    try:
        with open(p, "rb") as fh:
            raw = tomllib.load(fh)
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as err:  # TOML is UTF-8 text
        raise ConfigError(f"config file {path!r} is not valid TOML: {err}") from None
    unknown = sorted(set(raw) - set(FIELDS) - {"sweep", "quick"})  # [sweep], [quick]: see ordersim.sweep
    if unknown:
        raise ConfigError(f"config file {path!r}: unknown field(s) {', '.join(unknown)}; "
                          f"known fields: {', '.join(FIELDS)}")
    _refuse_quoted_scalars(path, raw)
    return raw


def _refuse_quoted_scalars(path: str, table: dict, prefix: str = "") -> None:
    """A TOML string where a field takes a number or a boolean (epochs = "2") is refused: TOML has
    those types, and a quoted value is more often a slip (lr = "1e-3 ") than meant. Flags are
    text by nature and keep their conversion. Also in [sweep], [quick] and [quick.sweep]."""
    for name, value in table.items():
        if name in ("sweep", "quick") and isinstance(value, dict):
            _refuse_quoted_scalars(path, value, f"{prefix}{name}.")
            continue
        f = FIELDS.get(name)
        allowed = {int: "an integer", float: "a number", bool: "true or false"}.get(f and f.type)
        if allowed is None:
            continue
        listed = prefix.endswith("sweep.") and isinstance(value, list)  # a sweep axis lists values
        for item in value if listed else [value]:
            if isinstance(item, str):
                raise ConfigError(f"config file {path!r}: field '{prefix}{name}' is the string {item!r}; "
                                  f"allowed: {allowed}, written without quotes")


def build_config(values: dict) -> Config:
    """A Config from raw values (TOML or flags), coerced but not yet checked against the data."""
    return Config(**{name: _coerce(name, value) for name, value in values.items()})


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """One flag per config field; defaults stay None so that only given flags override the TOML."""
    for f in dataclasses.fields(Config):
        flag = "--" + f.name.replace("_", "-")
        default = f.default_factory() if f.default is dataclasses.MISSING else f.default
        text = f.metadata["help"]
        if f.metadata["choices"] is not None:
            text = text.replace("{choices}", f.metadata["choices"]())
        help_text = f"{text} (default: {json.dumps(default)})"
        if f.type is bool:
            parser.add_argument(flag, dest=f.name, action=argparse.BooleanOptionalAction, default=None,
                                help=help_text)
        elif f.type is list:  # space- or comma-separated: --orderers rr cd-grab, --seeds 0,1,2
            parser.add_argument(flag, dest=f.name, nargs="+", default=None, metavar="VALUE",
                                help=f"{help_text}; space- or comma-separated")
        else:
            parser.add_argument(flag, dest=f.name, default=None, metavar=f.name.upper(), help=help_text)


def overrides_from_args(args: argparse.Namespace) -> dict:
    """The flags given, list values split at commas as well as spaces."""
    values = {name: getattr(args, name) for name in FIELDS if getattr(args, name, None) is not None}
    for name, value in values.items():
        if isinstance(value, list):
            values[name] = [part for item in value for part in item.split(",") if part]
    return values


def flags_for(values: dict) -> list[str]:
    """The command-line flags that set `values` (field: value, as overrides_from_args gives them)."""
    argv = []
    for name, value in values.items():
        flag, kind = "--" + name.replace("_", "-"), FIELDS[name].type
        if kind is bool:
            argv.append(flag if _coerce(name, value) else "--no-" + flag[2:])
        elif kind is list:
            argv += [flag, *map(str, value)]
        else:
            argv += [flag, value if isinstance(value, str) else json.dumps(value)]
    return argv


# -- checks of the values (no data needed) ------------------------------------------------------------
def _registered(name: str, registry, value: str, off: str = "") -> type:
    """The class a registry field names (a registered name or a .py file), or ConfigError."""
    from ordersim.registry import PluginError, is_path

    try:
        return registry.get_class(value)
    except PluginError as err:
        raise ConfigError(f"config field {name!r}: {err}") from None
    except ValueError as err:
        if isinstance(value, str) and is_path(value):
            raise ConfigError(f"config field {name!r}: {err}") from None
        raise ConfigError(f"config field {name!r}: {value!r} is not allowed; allowed: {off}"
                          f"{registry.choices()}, or a path to a .py file") from None


def _check_measurements(names: list) -> None:
    """Every measurement the run takes is registered or a .py file, declares its datasets as the
    trace takes them, and writes datasets no other per-epoch value has; else ConfigError."""
    from ordersim.measurements import MEASUREMENTS
    from ordersim.measurements.base import declaration_error
    from ordersim.trace_schema import MEASURED_FIRST, MEASURED_LAST

    if len(set(names)) != len(names):
        raise ConfigError(f"config field 'measurements': {names!r} is not allowed; allowed: each "
                          f"measurement once")
    writer = {entry.name: "ordersim.simulate.Run.measure" for entry in (*MEASURED_FIRST, *MEASURED_LAST)}
    given = [(name, cls) for name, cls in MEASUREMENTS.items() if cls.default]
    given += [(name, _registered("measurements", MEASUREMENTS, name)) for name in names]
    for name, cls in given:
        error = declaration_error(cls)
        if error:
            raise ConfigError(f"config field 'measurements': {name!r} {error}")
        for entry in cls.datasets:
            other = writer.setdefault(entry.name, f"measurement {cls.name!r}")
            if other != f"measurement {cls.name!r}":
                raise ConfigError(f"config field 'measurements': {name!r} declares the dataset {entry.name!r}, "
                                  f"which {other} writes; allowed: a name no other per-epoch dataset has")


INT64_END = 2**63
# What MPI launchers and Slurm tell a process of its rank, read before MPI is initialized.
RANK_VARIABLES = ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "SLURM_PROCID")


# What MPI launchers tell a process of the job's size.
SIZE_VARIABLES = ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE")


def _launcher_number(variables: tuple[str, ...], default: int) -> int:
    for name in variables:
        value = os.environ.get(name, "")
        if value.isdigit():
            return int(value)
    return default


def launcher_rank() -> int:
    """This process's rank as its launcher says (0 when not launched by one)."""
    return _launcher_number(RANK_VARIABLES, 0)


def launcher_size() -> int:
    """The number of ranks the process's launcher started (1 when not launched by one)."""
    return _launcher_number(SIZE_VARIABLES, 1)


def report_once(line: str) -> None:
    """Print an error found on every rank before MPI is up: rank 0 prints it, the others wait a
    moment before they exit, since a launcher that ends the job at the first non-zero exit (Open
    MPI's) would otherwise kill rank 0 before its line is out."""
    if launcher_rank() == 0:
        print(line, file=sys.stderr, flush=True)
    else:
        time.sleep(1.0)


class OneLineParser(argparse.ArgumentParser):
    """An argparse parser whose usage errors are one line (not the whole usage, dozens of lines),
    printed by rank 0 only; every rank exits with 2. Options are spelled in full: an abbreviation
    (`--epoch` for --epochs) is an unknown option, so that a typo is not read as another option
    and an option added later does not change what a job script's flags mean."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message):
        report_once(f"{self.prog}: error: {message} (--help explains every option)")
        self.exit(2)


def check_fields(config: Config, ranks: int) -> Config:
    """Checks that need no data; returns the config with workers and backend resolved and every
    orderer given by path replaced by its name (the name the trace files it under)."""
    from ordersim.coding import SCHEMES
    from ordersim.orderers import ORDERERS, table_options
    from ordersim.orderers.base import FIRST_ORDERS, SIGNS, TIES
    from ordersim.problems import PROBLEMS
    from ordersim.stragglers import STRAGGLER_MODELS, comm_and_model, scheme_from_config

    def bad(name, value, allowed):
        raise ConfigError(f"config field {name!r}: {value!r} is not allowed; allowed: {allowed}")

    for name, allowed in (("backend", BACKENDS), ("exchange", EXCHANGES), ("schedule", SCHEDULES),
                          ("partition", PARTITIONS), ("remainder", REMAINDERS), ("sign", SIGNS),
                          ("tie", TIES), ("first_order", FIRST_ORDERS)):
        if getattr(config, name) not in allowed:
            bad(name, getattr(config, name), ", ".join(allowed))
    if not config.orderers:
        bad("orderers", config.orderers, "a non-empty list of " + ORDERERS.choices())
    orderers = [_registered("orderers", ORDERERS, name) for name in config.orderers]
    names = [cls.name for cls in orderers]
    if len(set(names)) != len(names):
        bad("orderers", config.orderers, "each orderer once")
    # integers the trace and the jitted loops hold as int64
    if (not config.seeds or min(config.seeds) < 0 or max(config.seeds) >= INT64_END
            or len(set(config.seeds)) != len(config.seeds)):
        bad("seeds", config.seeds, "a non-empty list of distinct integers, 0 <= seed < 2^63")
    for name, low in (("epochs", 1), ("batch", 1), ("measure_every", 1), ("trace_every", 0),
                      ("checkpoint_every", 0), ("workers", 0), ("lr_step", 1), ("data_seed", 0)):
        if not low <= getattr(config, name) < INT64_END:
            bad(name, getattr(config, name), f"an integer >= {low} and < 2^63")
    for name, ok, allowed in (
        ("lr", config.lr > 0 and math.isfinite(config.lr), "a finite number > 0"),
        ("lr_decay", config.lr_decay > 0 and math.isfinite(config.lr_decay), "a finite number > 0"),
        ("momentum", 0 <= config.momentum < 1, "0 <= momentum < 1"),
        ("weight_decay", 0 <= config.weight_decay < math.inf, "a finite number >= 0"),
        ("test_fraction", 0 <= config.test_fraction < 1, "0 <= test_fraction < 1"),
        ("alpha", config.alpha > 0 and math.isfinite(config.alpha), "a finite number > 0"),
        ("walk_c", config.walk_c >= 0 and math.isfinite(config.walk_c), "0 (the theory's value) or > 0"),
        ("stall_timeout", 0 <= config.stall_timeout < math.inf, "0 (no limit) or a finite number of seconds > 0"),
    ):
        if not ok:
            bad(name, getattr(config, name), allowed)
    if config.cache_dir and os.path.exists(config.cache_dir) and not os.path.isdir(config.cache_dir):
        bad("cache_dir", config.cache_dir, "a directory (made if missing), or '' for the default")

    backend = config.backend
    if backend == "auto":
        backend = "mpi" if ranks > 1 else "serial"
    if backend == "serial" and ranks > 1:
        bad("backend", "serial", f"mpi or auto under mpiexec with {ranks} ranks (serial runs in one process)")
    workers = config.workers or (ranks if ranks > 1 else 8)
    if workers % ranks:
        bad("workers", workers, f"a multiple of the number of ranks ({ranks})")
    for cls in orderers:
        if cls.centralized_alternatives and workers != 1:
            bad("orderers", cls.name, f"workers=1 for the centralized {cls.name} (or use "
                f"{' / '.join(cls.centralized_alternatives)} with {workers} workers)")
    problem = _registered("problem", PROBLEMS, config.problem)
    if config.shuffle_variance and not problem.convex:  # x* is solved for convex problems only
        raise ConfigError(f"config field 'shuffle_variance': true needs a problem whose x* is known (a convex "
                          f"problem); {problem.name} has none (set shuffle_variance = false)")
    # none given: the problem's own defaults, recorded (trace, --dry-run) as the options in effect
    problem_options = config.problem_options or dict(problem.defaults)
    config = replace(config, workers=workers, backend=backend, orderers=names, problem_options=problem_options)
    try:
        table_options(orderers, config.orderer_options, config.batch)
    except ValueError as err:
        raise ConfigError(str(err)) from None

    _check_measurements(config.measurements)
    _registered("coding", SCHEMES, config.coding)
    if not config.stragglers:
        if config.coding != "wait-all":
            raise ConfigError(f"config field 'stragglers': coding {config.coding!r} needs a straggler "
                              f"model to decide who responds; set stragglers to one of "
                              f"{STRAGGLER_MODELS.choices()}")
        if config.straggler_options:  # would be ignored: say so rather than run without them
            raise ConfigError(f"config field 'straggler_options': {config.straggler_options!r} is not "
                              f"allowed without a straggler model; allowed: {{}}, or set stragglers to "
                              f"one of {STRAGGLER_MODELS.choices()}")
        return config
    _registered("stragglers", STRAGGLER_MODELS, config.stragglers, "'' (off), ")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a poorly conditioned code warns again in the run
        try:
            scheme_from_config(config, workers, 0)  # takes only workers and coding_s
        except (ValueError, TypeError) as err:
            raise ConfigError(f"config field 'coding_s': {err}") from None
    try:
        comm_and_model(config, workers, 0)
    except (ValueError, TypeError, OSError) as err:
        raise ConfigError(f"config field 'straggler_options': {err}") from None
    return config
