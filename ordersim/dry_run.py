"""`python -m ordersim run ... --dry-run`: what a run would do, without training.

Prints (rank 0; under mpiexec every rank takes part in the set-up and exits 0 too):
- every config field's resolved value and where it came from: default, the config file, a flag
  or the sweep cell (and what `workers = 0`, `backend = auto` and `out = ''` resolve to);
- the runs: orderers x seeds (x sweep cells), epochs and each cell's output file;
- per sweep cell, the set-up's sizes (m, n, d, dropped examples), the memory each rank needs
  (the process as measured after the set-up, which holds this rank's data rows, plus the
  largest run's buffers: the orderer's state, the step loops' and the herding measurement's) and
  the problem's constants with the regime numbers of the PL analyses (ordersim/regime.py).

The set-up is the run's own (ordersim.simulate.prepare): the data are read and the problem's
constants computed, or read from their cache (which a dry run fills for the real run); nothing is
trained, no trace, checkpoint or lock file is written, and the output file is only checked.
"""

import json
import os
import resource
import socket
from dataclasses import replace

import numpy as np

from ordersim.cli import counted
from ordersim.config import FIELDS, ConfigError, build_config, check_fields, read_toml
from ordersim.data import check_fits_in_memory, physical_memory

GIB = 2**30


def size_text(nbytes: float) -> str:
    return f"{nbytes / GIB:.3g} GiB" if nbytes >= GIB else f"{nbytes / 2**20:.3g} MiB"


def field_sources(config_path: str | None, flags: dict, cell) -> dict[str, str]:
    """Where every field's value came from: 'flag', 'sweep', 'file NAME' or 'default'."""
    from ordersim.sweep import split_sweep

    raw = split_sweep(read_toml(config_path), config_path)[0] if config_path else {}
    sources = {}
    for name in FIELDS:
        if name in flags:
            sources[name] = "flag"
        elif cell is not None and name in cell.params:
            sources[name] = "sweep"
        elif cell is not None and name == "out":
            sources[name] = "the sweep cells' directory: cell_<i>.h5 in it"
        elif name in raw:
            sources[name] = f"file {config_path}"
        else:
            sources[name] = "default"
    return sources


def config_lines(built, resolved, sources: dict) -> list[str]:
    """One line per field: name = resolved value, its source, and what an automatic value became."""
    width = max(map(len, FIELDS))
    lines = []
    for name in FIELDS:
        given, value = getattr(built, name), getattr(resolved, name)
        note = f"; {json.dumps(given)} resolves to this" if given != value else ""
        lines.append(f"  {name:<{width}} = {json.dumps(value):<28} ({sources[name]}{note})")
    return lines


def rss_bytes() -> tuple[int, int]:
    """(current, peak) resident memory of this process, in bytes (current: 0 where unknown)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux
    try:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE"), peak
    except (OSError, ValueError, IndexError):
        return 0, peak


def array_bytes(obj) -> int:
    """Bytes of the NumPy arrays an object's attributes hold, each memory block counted once."""
    owners = {}
    for value in vars(obj).values():
        if isinstance(value, np.ndarray):
            while isinstance(value.base, np.ndarray):
                value = value.base
            owners[id(value)] = value.nbytes
    return sum(owners.values())


def run_buffer_bytes(config, setup, name: str) -> int:
    """The largest arrays a run of orderer `name` allocates on a rank besides the data: the
    orderer itself (made here as a Run makes it, without compiling), the step loops' gradient
    buffers, a linear model's projected rows and the herding measurement's chunks
    (ordersim/simulate.py, ordersim/engine.py)."""
    from ordersim import engine
    from ordersim.simulate import CHUNK_DOUBLES, run_orderer

    backend, m, n, b, d = setup.backend, config.workers, setup.n, config.batch, setup.problem.dim
    local = backend.local_workers
    orderer, coordinated = run_orderer(config, backend, name, n, d, 0, setup.problem.linear)
    projected_rows = setup.A.shape[0] * orderer.dim if orderer.projected_input else 0  # A Pi^T
    if backend.size == 1:
        store = (engine.PAIR_DIFFERENCES if orderer.pair_difference_kernel is not None
                 else engine.GRADIENTS if orderer.needs_gradients else engine.NO_GRADIENTS)
        steps = m * engine.chunk_rows(store, m, n, b, d) * d if store != engine.NO_GRADIENTS else 0
    else:
        steps = local * b * d + (m * b * d if coordinated else 0)
    herding = 2 * CHUNK_DOUBLES if config.herding else 0  # this rank's chunk and the gathered one
    orders = m * n * 8 * (2 if config.record_orders else 0)
    return array_bytes(orderer) + 8 * (steps + herding + 4 * d + projected_rows) + orders


def memory_report(config, setup) -> tuple[list[str], int]:
    """Lines on this cell's memory per rank and the largest estimate over the ranks (collective)."""
    current, peak = rss_bytes()
    buffers = max(run_buffer_bytes(config, setup, name) for name in config.orderers)
    data = setup.A.nbytes + setup.y.nbytes + (0 if setup.test_A is None else setup.test_A.nbytes)
    mine = (max(peak, current + buffers), data, buffers, socket.gethostname())
    every = setup.backend.allgather(mine)
    need = max(e[0] for e in every)
    per_host: dict[str, int] = {}
    for total, *_, host in every:
        per_host[host] = per_host.get(host, 0) + total
    have = physical_memory()
    lines = [f"  memory per rank: {size_text(need)} at most (rank 0: {size_text(data)} of data rows, "
             f"{size_text(buffers)} of run buffers, the rest Python, NumPy, Numba and the set-up's "
             f"peak, as measured)"]
    host, total = max(per_host.items(), key=lambda item: item[1])
    lines.append(f"  memory per node: {size_text(total)} on {host} "
                 f"({sum(e[3] == host for e in every)} rank(s)); this machine has "
                 + (size_text(have) if have else "an unknown amount"))
    return lines, total


def regime_lines(config, setup) -> list[str]:
    from ordersim.regime import CONDITIONS, numbers
    from ordersim.simulate import theory_regime

    c = setup.constants
    lines = ["  constants: " + ", ".join(f"{k} = {c[k]:.4g}" for k in ("f_star", "L", "L_max", "mu",
                                                                         "sigma2_star", "zeta2_star")
                                     if isinstance(c.get(k), float))]
    for name in config.orderers:
        info = theory_regime(config, setup, name)
        if not info:
            lines.append(f"  regime of {name}: not recorded ({config.problem} states no bound on L_max)")
            continue
        step = info.get("step_size", info.get("largest_step"))
        lines.append(f"  regime of {name}: {'step' if 'step_size' in info else 'largest step'} {step:.4g}, "
                     + numbers(info, kappa=True)
                     + f": {'inside' if info['in_regime'] else 'outside'} the {info['analyses']} analyses' "
                     f"regime ({CONDITIONS[info['analyses']]}, b = 1 without momentum, a constant step)"
                     + (f"; {info['outside_setting']}" if "outside_setting" in info else "")
                     + (f"; lr caps the theory step {info['theory_step']:.4g}"
                        if info.get("theory_step", 0) > step else ""))
    return lines


def output_refusal(out: str, config, cell) -> str | None:
    """Why a run would refuse `out` (rank 0): the same checks, the writability one by creating the
    file as a run does; the directories that made are removed again (a dry run writes nothing)."""
    from ordersim.runner import existing_output_error
    from ordersim.simulate import check_output

    directory = first_missing = os.path.dirname(os.path.abspath(out))
    while not os.path.exists(os.path.dirname(first_missing)):
        first_missing = os.path.dirname(first_missing)
    created = not os.path.exists(first_missing)
    refused = existing_output_error(out, config, False, cell) or check_output(out)
    if created and os.path.isdir(first_missing):
        while True:  # from the deepest up to the first one that was missing
            os.rmdir(directory)
            if directory == first_missing:
                break
            directory = os.path.dirname(directory)
    return refused


def dry_run(runs: list, config_path: str | None, flags: dict, comm, size: int, rank: int) -> int:
    """Print what the runs (values, cell) would do; 0, or 2 on a config error (every rank)."""
    from ordersim.backend import MPIBackend, SerialBackend
    from ordersim.compile_notice import compile_notice
    from ordersim.simulate import default_out_path, prepare

    def say(*lines):
        if rank == 0:
            print("\n".join(lines), flush=True)

    say("ordersim: dry run: nothing is trained and no trace is written")
    for position, (values, cell) in enumerate(runs):
        built = build_config(values)
        config = check_fields(built, size)
        if config.backend == "mpi" and comm is None:
            raise ConfigError("config field 'backend': 'mpi' needs an MPI library and mpi4py cannot "
                              "load one; use --backend serial")
        backend = (MPIBackend(config.workers, comm, config.exchange, config.stall_timeout)
                   if config.backend == "mpi" else SerialBackend(config.workers))
        try:
            out = backend.bcast(config.out or default_out_path())
            if position == 0:
                # a sweep's fields by their axis (but those a flag pins); out as resolved (a
                # sweep: the cells' directory)
                axes = {}
                if cell is not None:
                    axes = {name: axis for name, axis in cell.sweep.items() if name not in flags}
                    axes["out"] = os.path.dirname(out)
                shown = dict(axes, out=axes.get("out", out))
                say("config (every field: value (where it came from)):",
                    *config_lines(replace(built, **axes), replace(config, **shown),
                                  field_sources(config_path, flags, cell)))
                cells = f" x {cell.count} sweep cells" if cell is not None else ""
                if cell is not None and len(runs) != cell.count:
                    cells += f" (of which this runs {len(runs)})"
                say(f"runs: {len(config.orderers)} orderer(s) ({', '.join(config.orderers)}) x "
                    f"{len(config.seeds)} seed(s) ({', '.join(map(str, config.seeds))}){cells} = "
                    f"{counted(len(config.orderers) * len(config.seeds) * len(runs), 'run')} of "
                    f"{counted(config.epochs, 'epoch')}")
            with compile_notice(f"the kernels of {config.problem} (for its constants)", rank == 0):
                setup = prepare(config, backend)
            where = f"cell {cell.index} {json.dumps(cell.params)}" if cell is not None else "the run"
            refused = output_refusal(out, config, cell) if rank == 0 else None
            say(f"{where}: out {out}" + (f" (a run would refuse it: {refused})" if refused else ""),
                f"  m = {counted(config.workers, 'worker')} x n = {counted(setup.n, 'example')} "
                f"(dropped {setup.dropped}), d = {setup.problem.dim}, b = {config.batch}, "
                f"{counted(-(-setup.n // config.batch), 'step')} per epoch, backend {config.backend} on "
                f"{backend.size} rank(s)")
            memory, per_node = memory_report(config, setup)
            say(*memory, *regime_lines(config, setup))
            try:
                check_fits_in_memory(where, "the ranks of one node", per_node, "use more nodes, "
                                     "or fewer ranks per node, rows or features")
            except ValueError as err:
                raise ConfigError(str(err)) from None
        finally:
            backend.close()
    say("dry run: done (exit 0)")
    return 0

