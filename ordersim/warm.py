"""`python -m ordersim warm [CONFIG.toml] [FIELD FLAGS]`: fill Numba's on-disk cache ahead of a job.

Compiles what a run of the config compiles (the problem's kernels, every orderer's kernels, the
update and measurement kernels) for a small synthetic stand-in of the config's data with the same
label kind: Numba compiles for argument types, not sizes, so the stand-in's machine code is the
run's, and the real data are never read. A sweep's cells are all warmed (each distinct problem and
orderer once), the serial step loop and the herding pass once per problem (engine.problem_loop).
One process, no MPI, so not the MPI backend's step loop: a run's warm-up compiles that on one
rank per node and caches it (MPIBackend.run_steps). On a cluster, run it once per node into the
node's cache (docs/cluster.md); it uses NUMBA_CACHE_DIR as a run would.
"""

import argparse
import json
import math
import os
import sys
import tempfile
import time
from dataclasses import replace

from ordersim.config import ConfigError, add_arguments, build_config, overrides_from_args
from ordersim.sweep import config_cells

# stand-in data for each label kind: features = 4 (+ the intercept); rows set per config
STAND_INS = {"binary": "synthetic:classification?d=4&classes=2",
             "multiclass": "synthetic:classification?d=4&classes=3",
             "real": "synthetic:regression?d=4"}


def stand_in(config):
    """The config with its data replaced by the small synthetic set that compiles the same kernels."""
    from ordersim.problems import problem_class

    try:
        kind = problem_class(config.problem).label_kind
    except ValueError as err:
        raise ConfigError(f"config field 'problem': {err}") from None
    per_worker = max(8, 2 * config.batch)  # a few steps per epoch
    rows = math.ceil(config.workers * per_worker / (1 - config.test_fraction)) + 2
    return replace(config, data=f"{STAND_INS[kind]}&n={rows}", backend="serial", remainder="drop")


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m ordersim warm", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("config", nargs="?", help="TOML experiment config (default: the built-in one)")
    add_arguments(p)
    args = p.parse_args(argv)
    from ordersim.backend import SerialBackend
    from ordersim.compile_notice import compile_notice
    from ordersim.simulate import check_fields, prepare, warm_up

    start = time.perf_counter()
    warmed = set()
    try:
        flags = overrides_from_args(args)
        runs = config_cells(args.config, flags) if args.config else [(flags, None)]
        with tempfile.TemporaryDirectory() as constants_cache:  # the stand-in's constants: not kept
            for values, _ in runs:
                config = check_fields(replace(build_config(values), backend="serial"), 1)
                config = replace(stand_in(config), cache_dir=constants_cache)
                problem = (config.problem, json.dumps(config.problem_options, sort_keys=True))
                todo = [name for name in config.orderers if (problem, name) not in warmed]
                if not todo:
                    continue
                with compile_notice(f"the kernels of {config.problem}"):
                    setup = prepare(config, SerialBackend(config.workers))
                for name in todo:
                    with compile_notice(f"the kernels of {name} on {config.problem}"):
                        warm_up(setup, name, config.seeds[0])
                    warmed.add((problem, name))
    except ConfigError as err:
        print(f"ordersim: error: {err}", file=sys.stderr)
        return 2
    where = os.environ.get("NUMBA_CACHE_DIR") or "__pycache__ next to the sources"
    print(f"ordersim warm: {len(warmed)} (problem, orderer) pair(s) compiled and cached in {where} "
          f"({time.perf_counter() - start:.1f} s)", flush=True)
    return 0
