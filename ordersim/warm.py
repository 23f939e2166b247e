"""`python -m ordersim warm [CONFIG.toml] [FIELD FLAGS]`: fill Numba's on-disk cache ahead of a job.

Compiles what a run of the config compiles (the problem's kernels, every orderer's kernels, the
update and measurement kernels) for a small synthetic stand-in of the config's data with the same
label kind: Numba compiles for argument types, not sizes, so the stand-in's machine code is the
run's, and the real data are never read. A sweep's cells are all warmed (each distinct problem and
orderer once), the serial step loop and the herding pass once per problem (engine.problem_loop).
One process, no MPI, so not the MPI backend's step loop: a run's warm-up compiles that on one
rank per node and caches it (MPIBackend.run_steps). On a cluster, run it once per node into the
node's cache (docs/cluster.md); it uses NUMBA_CACHE_DIR as a run would.

An MPI run does the same by itself on a cold cache (warm_node_first): the node's first rank warms
the run's config while the node's other ranks wait asleep, then they load what it cached, so that
a node compiles every kernel once, not once per rank on the same cores.
"""

import argparse
import hashlib
import json
import math
import os
import sys
import tempfile
import time
from dataclasses import replace

from ordersim.config import ConfigError, OneLineParser, add_arguments, build_config, overrides_from_args
from ordersim.sweep import config_cells

# stand-in data for each label kind: features = 4 (+ the intercept); rows set per config
STAND_INS = {"binary": "synthetic:classification?d=4&classes=2",
             "multiclass": "synthetic:classification?d=4&classes=3",
             "real": "synthetic:regression?d=4"}


def stand_in(config):
    """The config with its data replaced by the small synthetic set that compiles the same kernels.
    The data spec is still checked (not read), so that a bad one fails here as it fails a run."""
    from ordersim.data import check_spec
    from ordersim.problems import problem_class

    try:
        kind = problem_class(config.problem).label_kind
    except ValueError as err:
        raise ConfigError(f"config field 'problem': {err}") from None
    try:
        check_spec(config.data)
    except ValueError as err:
        raise ConfigError(f"config field 'data': {err}") from None
    per_worker = max(8, 2 * config.batch)  # a few steps per epoch
    rows = math.ceil(config.workers * per_worker / (1 - config.test_fraction)) + 2
    return replace(config, data=f"{STAND_INS[kind]}&n={rows}", backend="serial", remainder="drop")


def warm_config(config, warmed: set, notices: bool = True, backend=None) -> None:
    """Compile and cache what a run of ``config`` (checked) compiles, on its stand-in in this
    process, with the serial backend or ``backend`` (MPIBackend.alone: a job's MPI kernels); the
    (problem, orderer) pairs in ``warmed`` are skipped, the new ones added."""
    from ordersim.backend import SerialBackend
    from ordersim.compile_notice import compile_notice
    from ordersim.simulate import prepare, warm_up

    suffix = " (once for the node's ranks, which wait and then load them)" if backend else ""
    problem = (config.problem, json.dumps(config.problem_options, sort_keys=True))
    todo = [name for name in config.orderers if (problem, name) not in warmed]
    if not todo:
        return
    with tempfile.TemporaryDirectory() as constants_cache:  # the stand-in's constants: not kept
        config = replace(stand_in(config), cache_dir=constants_cache)
        with compile_notice(f"the kernels of {config.problem}{suffix}", notices):
            setup = prepare(config, backend or SerialBackend(config.workers))
        for name in todo:
            with compile_notice(f"the kernels of {name} on {config.problem}{suffix}", notices):
                warm_up(setup, name, config.seeds[0])
            warmed.add((problem, name))


# Fields that choose no kernel: a config that differs from a warmed one only in these finds its
# kernels cached (a field missing here only costs a needless warm-up).
RUN_ONLY_FIELDS = ("data", "data_seed", "epochs", "lr", "lr_decay", "lr_step", "seeds", "measure_every",
                   "checkpoint_every", "stall_timeout", "out", "overwrite", "cache_dir", "quiet", "workers")


def warm_marker(config) -> str | None:
    """The file whose presence says that this node's Numba cache holds the kernels of ``config``
    for this code state (numba_cache.code_state) and MPI library (jit_mpi.ABI: the MPI loop's
    code differs), beside the cached kernels themselves (so that clearing the cache clears it);
    None without a cache directory."""
    from dataclasses import asdict

    from ordersim import node_exchange, numba_cache
    from ordersim.jit_mpi import ABI

    directory = getattr(getattr(node_exchange.exchange_from_python, "_cache", None), "_cache_path", None)
    if directory is None:
        return None
    fields = {k: v for k, v in asdict(config).items() if k not in RUN_ONLY_FIELDS}
    for name in (config.problem, *config.orderers, *config.measurements):
        if os.path.isfile(name):  # a user's file: its own state
            info = os.stat(name)
            fields[f"file {os.path.realpath(name)}"] = [info.st_size, info.st_mtime_ns]
    text = json.dumps([numba_cache.code_state(), ABI, fields], sort_keys=True, default=str)
    return os.path.join(directory, f"ordersim-warm-{hashlib.sha256(text.encode()).hexdigest()[:16]}")


def warm_node_first(config, backend) -> None:
    """Under MPI, on a cold cache: the node's first rank compiles and caches the kernels of
    ``config`` (warm_config on the stand-in, with a backend of its own that takes the MPI steps:
    MPIBackend.alone) while the node's other ranks wait asleep; then every rank's set-up and
    warm-up load them from the cache. Without it every rank of a node compiles every kernel at
    once, on the same cores (`mpiexec -n 8` on 2 cores: 8 compilations, ~95 s).

    Cold means the first rank finds no warm_marker; the marker is written after the warm-up. A
    wrong answer costs time only: a missing marker one warm-up of cached kernels on the first
    rank, a stale one the old way. A warm-up that fails is skipped (the run meets the same error
    on every rank, with its one-line message). Collective."""
    from numba import config as numba_config

    if numba_config.DISABLE_JIT or backend.name != "mpi" or backend.node_size == 1:
        return
    marker = warm_marker(config) if backend.node_rank == 0 else None
    if not backend.node_any(marker is not None and not os.path.exists(marker)):
        return

    def warm() -> None:
        alone = type(backend).alone(config.workers)
        try:
            warm_config(config, set(), backend.rank == 0 and not config.quiet, alone)
            with open(marker, "w") as f:
                f.write(f"ordersim warmed {config.problem} with {', '.join(config.orderers)}\n")
        except Exception:  # noqa: BLE001  (the run meets a config's error itself; a marker
            pass           # that cannot be written only means warming again next time)
        finally:
            alone.close()

    backend.on_node_first(warm)


def main(argv: list[str]) -> int:
    p = OneLineParser(prog="python -m ordersim warm", description=__doc__,
                      formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("config", nargs="?", help="TOML experiment config (default: the built-in one)")
    add_arguments(p)
    args = p.parse_args(argv)
    from ordersim.simulate import check_fields

    start = time.perf_counter()
    warmed = set()
    try:
        flags = overrides_from_args(args)
        runs = config_cells(args.config, flags) if args.config else [(flags, None)]
        for values, _ in runs:
            warm_config(check_fields(replace(build_config(values), backend="serial"), 1), warmed)
    except ConfigError as err:
        print(f"ordersim: error: {err}", file=sys.stderr)
        return 2
    where = os.environ.get("NUMBA_CACHE_DIR") or "__pycache__ next to the sources"
    print(f"ordersim warm: {len(warmed)} (problem, orderer) pair(s) compiled and cached in {where} "
          f"({time.perf_counter() - start:.1f} s)", flush=True)
    return 0
