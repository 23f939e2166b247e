"""What a random projection before balancing saves the orderer at d = 1024 (issue #24).

    python benchmarks/bench_projection.py            # d = 1024, about a minute
    python benchmarks/bench_projection.py --quick    # a few seconds

For grab (mean balance), pair-grab and cd-grab (pair walks; cd-grab at m = 8), one epoch of
observe() calls at b = 16 is timed by bench_orderers.py's bench_cell (a pool of gradient
buffers, the best of several epochs, the vectorized read of the same gradients as the unit), without
a projection and with the sparse and the gaussian one at several k. Printed per cell: ns per
example, observe / read, and the speed-up over no projection (the issue's target: >= 3x).

The arithmetic: balancing one d-dimensional vector costs about 2-3 passes over d doubles (the
dot product, the update of s, for grab the epoch's sum), in vector code. A sparse Pi costs
k sqrt(d) gathered additions per projected vector (k d rho, rho = 1/sqrt(d)), a dense one
k d multiply-adds; the balancing itself then costs 2-3 k. So at d = 1024 the sparse projection
can pay only for k well below sqrt(d) = 32, and the dense one never does; the
Johnson-Lindenstrauss default (k = d here) only adds its cost (docs/algorithms.md).

The rows "given Pi g, k" time the route that avoids the product (issue #24): for a linear model
Pi g_i = l'_i (Pi a_i) + Pi(reg), so the engine could project the data rows once per run and hand
the orderer k-dimensional gradients; the orderer's part is then the orderer without a projection
at d = k, which is what they time (the engine's O(k) per example to form them is not counted).
This is a script: it prints and never asserts (pytest does not collect it).
"""

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_orderers import bench_cell  # noqa: E402

D, B = 1024, 16
CELLS = (("grab", 1), ("pair-grab", 1), ("cd-grab", 8))
PROJECTIONS = (("none", None), ("sparse", 8), ("sparse", 16), ("sparse", 64), ("gaussian", 16), ("gaussian", 64))
GIVEN_DIMS = (8, 16, 64)  # k of the rows that are handed Pi g (the orderer at d = k, no projection)


def per_example_ns(name, m, options, work, repeats, budget, d=D):
    """ns per example of observe() and of reading the same gradients, over one epoch of b = B."""
    _, observe, read, _ = bench_cell(name, m, d, B, work, repeats, budget, options)
    return observe, read


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller epochs, fewer repeats")
    args = parser.parse_args(argv)
    work, repeats, budget = (1 << 20, 3, 0.5) if args.quick else (1 << 23, 7, 3.0)
    print(f"d = {D}, b = {B}: ns per example of observe(); x read = observe / read; "
          f"speed-up = no projection / this")
    print(f"{'orderer':<10} {'m':>2} {'projection':<15} {'ns/example':>10} {'x read':>7} {'speed-up':>8}")
    for name, m in CELLS:
        plain = None
        for projection, k in PROJECTIONS:
            options = {} if projection == "none" else {"projection": projection, "projection_dim": k}
            observe, read = per_example_ns(name, m, options, work, repeats, budget)
            plain = observe if plain is None else plain
            label = "none" if k is None else f"{projection} {k}"
            print(f"{name:<10} {m:>2} {label:<15} {observe:>10.1f} {observe / read:>7.2f} {plain / observe:>8.2f}")
        for k in GIVEN_DIMS:
            observe, read = per_example_ns(name, m, {}, work, repeats, budget, d=k)
            label = f"given Pi g, {k}"
            print(f"{name:<10} {m:>2} {label:<15} {observe:>10.1f} {observe / read:>7.2f} {plain / observe:>8.2f}")


if __name__ == "__main__":
    main()
