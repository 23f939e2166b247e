"""Read ordersim traces and draw theory-versus-practice figures (see docs/analysis.md).

    from ordersim.analysis import load_runs
    df = load_runs(["sweep_m4.h5", "sweep_m8.h5"])        # one row per (file, run, measured epoch)
    df.groupby(["orderer", "workers"]).train_loss.last()

Loaders: ``load_runs`` (tidy pandas table), ``load_run_arrays`` (NumPy arrays per run),
``load_orders`` (the recorded (E + 1, m, n) visit orders), ``load_shards``, ``load_herding_sim`` (files
of ``python -m ordersim herding-sim``), ``to_xarray`` (an xarray.Dataset over the swept settings,
orderer, seed and epoch; the `xarray` extra). Command-line figures:
``python -m ordersim.analysis.convergence | herding | scaling | herding_sim | fit FILE.h5 ... --out DIR``.
"""

from ordersim.analysis.load import TraceWarning, load_herding_sim, load_orders, load_run_arrays, load_runs, load_shards
from ordersim.analysis.xarray_view import to_xarray

__all__ = ["TraceWarning", "load_herding_sim", "load_orders", "load_run_arrays", "load_runs", "load_shards",
           "to_xarray"]
