"""Start-up cost of a default run: compilation against training and measurement (issue #23).

    python benchmarks/bench_startup.py              # serial: a cold and a warm default run
    python benchmarks/bench_startup.py --ranks 2    # also a cold and a warm run at mpiexec -n 2

Each run is a fresh process of `python -m ordersim` (the built-in default experiment) with its own
NUMBA_CACHE_DIR: a fresh, empty one for the cold run, then the same one, now filled, for the warm
run. Prints per run the wall time of the process, the seconds Numba compiled (the sum of the
"ordersim: compiled ..." lines, rank 0's) and the training and measurement time (the sum over
the trace's runs of their last epoch's wall_time: the steps, the orderer and the measurements,
after the warm-up), and their ratios within the same invocation, so that other load on the
machine hits both alike. Under mpiexec also how many ranks compiled the MPI epoch loop and how many
loaded it from the cache (Numba's cache log, NUMBA_DEBUG_CACHE: a compiling rank saves it): on a
cold cache one rank per node compiles it (MPIBackend), on a warm one none.

This is a script: it prints and never asserts (pytest does not collect it).
"""

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time

import h5py


def training_seconds(trace: str) -> float:
    """Sum over the trace's runs of the wall_time of their last epoch."""
    total = []

    def visit(name, obj):
        if isinstance(obj, h5py.Dataset) and name.rsplit("/", 1)[-1] == "wall_time" and obj.shape[0]:
            total.append(float(obj[-1]))

    with h5py.File(trace, "r") as f:
        f.visititems(visit)
    return sum(total)


def run(cache_dir: str, workdir: str, ranks: int) -> dict:
    env = dict(os.environ, NUMBA_CACHE_DIR=cache_dir, NUMBA_DEBUG_CACHE="1")
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # warm: Python's bytecode cache filled too, as a user's is
    out = os.path.join(workdir, f"trace-{time.time_ns()}.h5")
    command = [sys.executable, "-m", "ordersim", "--out", out]
    if ranks > 1:
        mpiexec = os.path.join(os.path.dirname(sys.executable), "mpiexec")
        command = [mpiexec, "-n", str(ranks), *command, "--backend", "mpi"]
    start = time.perf_counter()
    done = subprocess.run(command, env=env, cwd=workdir, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed ({done.returncode}):\n{done.stderr}")
    compiled = sum(float(s) for s in re.findall(r"ordersim: compiled .*? in ([0-9.]+) s", done.stderr))
    mpi_loop = [line for line in done.stdout.splitlines() if "engine.epoch_steps_mpi_" in line]
    return dict(wall=wall, compiled=compiled, training=training_seconds(out),
                loop_saved=sum("data saved to" in line for line in mpi_loop),
                loop_loaded=sum("data loaded from" in line for line in mpi_loop))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ranks", type=int, default=1, help="also run at mpiexec -n RANKS (default: serial only)")
    args = p.parse_args()
    for ranks in sorted({1, args.ranks}):
        with tempfile.TemporaryDirectory() as workdir:
            cache_dir = os.path.join(workdir, "numba-cache")
            for state in ("cold", "warm"):
                r = run(cache_dir, workdir, ranks)
                outside = r["wall"] - r["training"]
                print(f"ranks {ranks} {state}: wall {r['wall']:6.2f} s  compiled {r['compiled']:6.2f} s  "
                      f"training+measurement {r['training']:5.2f} s  outside/wall {outside / r['wall']:.2f}  "
                      f"compiled/wall {r['compiled'] / r['wall']:.2f}"
                      + (f"  MPI loop compiled by {r['loop_saved']}, loaded by {r['loop_loaded']} of "
                         f"{ranks} ranks" if ranks > 1 else ""), flush=True)


if __name__ == "__main__":
    main()
