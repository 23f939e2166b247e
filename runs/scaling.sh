#!/usr/bin/env bash
# Scaling sweeps behind analysis.scaling / analysis.fit: final error against the number of workers
# m at fixed n per worker, and against n at fixed m. Every cell draws DATA_SEEDS synthetic data sets
# of m*n examples (the [sweep] over data_seed in runs/scaling.toml; one process per (m, n), the
# draws as its sweep cells), so n per worker stays fixed as m grows and the fits see how much the
# error moves from one data draw to the next.
#
#   bash runs/scaling.sh                  # laptop size: ~1.5 min of CPU, one core (more wall time on a busy machine)
#   N_PER_WORKER=1024 EPOCHS=50 bash runs/scaling.sh   # closer to paper scale (use a cluster)
#
# Then:  python -m ordersim.analysis.scaling results/scaling/*/*.h5 --out docs/figures
#        python -m ordersim.analysis.fit     results/scaling/*/*.h5
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python}
N=${N_PER_WORKER:-128}
D=${DIM:-10}
EPOCHS=${EPOCHS:-60}
OUT=${OUT:-results/scaling}
mkdir -p "$OUT"
run() {  # m n: one trace per data draw (the config's [sweep]) in $OUT/m<m>_n<n>/cell_<draw>.h5
    "$PY" -m ordersim run runs/scaling.toml --workers "$1" --epochs "$EPOCHS" --measure-every "$EPOCHS" \
        --data "synthetic:regression?n=$(($1 * $2))&d=$D&cond=10&noise=0.5" \
        --out "$OUT/m$(printf %03d "$1")_n$(printf %05d "$2")" --overwrite  # a re-run replaces them
}
for m in 1 2 4 8 16 32 64; do run "$m" "$N"; done          # error vs m at fixed n
for n in 32 64 256 512; do run 8 "$n"; done                  # error vs n at fixed m (n = N at m = 8 above)
echo "results in $OUT"
