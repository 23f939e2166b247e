#!/usr/bin/env bash
# Scaling sweeps behind analysis.scaling / analysis.fit: final error against the number of workers
# m at fixed n per worker, and against n at fixed m. Every cell draws its own synthetic data set of
# m*n examples (the same generator and data seed), so n per worker stays fixed as m grows.
#
#   bash runs/scaling.sh                  # laptop size: a few minutes on 2 cores
#   N_PER_WORKER=1024 EPOCHS=50 bash runs/scaling.sh   # closer to paper scale (use a cluster)
#
# Then:  python -m analysis.scaling results/scaling/*.h5 --out docs/figures
#        python -m analysis.fit     results/scaling/*.h5
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python}
N=${N_PER_WORKER:-128}
D=${DIM:-10}
EPOCHS=${EPOCHS:-20}
OUT=${OUT:-results/scaling}
mkdir -p "$OUT"
run() {  # m n
    "$PY" -m ordersim run runs/scaling.toml --workers "$1" --epochs "$EPOCHS" --measure-every "$EPOCHS" \
        --data "synthetic:regression?n=$(($1 * $2))&d=$D&cond=10&noise=0.5" \
        --out "$OUT/m$(printf %03d "$1")_n$(printf %05d "$2").h5" --overwrite  # a re-run replaces them
}
for m in 1 2 4 8 16 32 64; do run "$m" "$N"; done          # error vs m at fixed n
for n in 32 64 256 512; do run 8 "$n"; done                  # error vs n at fixed m (n = N at m = 8 above)
echo "results in $OUT"
