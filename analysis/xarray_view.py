"""Traces as one labelled cube: ``to_xarray(files)`` -> xarray.Dataset (needs the `xarray` extra).

    from ordersim import analysis
    ds = analysis.to_xarray(sorted(glob.glob("sweep-lr/cell_*.h5")))
    ds.train_loss.sel(orderer="cd-grab").mean("seed")          # (lr, epoch)
    ds.suboptimality.isel(epoch=-1).to_pandas()               # any 2-d slice as a table

Dimensions: every config field that differs among the files (``load_runs``' ``settings``: a sweep's
axes, or whatever tells separate runs' files apart, in ordersim.config's field order; a setting's
values are the config's, also where a run attribute has its name, e.g. ``coding_s``), then
``orderer``, ``seed`` and ``epoch`` (the measured epochs of any run). Every per-epoch dataset is a
variable over all of them; NaN where a run has no such epoch (measured every K epochs, diverged,
interrupted) and where a combination of settings has no file. Run attributes that differ among runs
(``status``, ``compile_time``, ``file``, the problem constants of a swept ``workers``, ...) are
variables over the settings, orderer and seed; those that are the same everywhere (the problem
constants f_star, L, L_max, mu, sigma2_star, zeta2_star of one problem and partition, ``problem``,
``data``, ``workers``, ...) are attributes of the Dataset, as are ``settings`` (the setting
dimensions) and ``notes`` (load_runs' notes). Two runs with the same settings, orderer and seed
(the same run in two files) are refused with a ValueError naming the files.
"""

from __future__ import annotations

import numpy as np

from ordersim.analysis import extras
from ordersim.analysis.load import load_runs

RUN_KEYS = ("orderer", "seed")


def _attribute(value):
    """A value as a Dataset attribute (netCDF takes numbers and text)."""
    if isinstance(value, (bool, np.bool_)):
        return int(value)
    if isinstance(value, np.generic):
        return value.item()
    return value


def to_xarray(files) -> "xarray.Dataset":  # noqa: F821
    """One xarray.Dataset of trace files (one path or a list): see the module's doc."""
    extras.require("to_xarray", "xarray")
    import xarray as xr

    df = load_runs(files)
    settings = list(df.attrs["settings"])
    runs = [*settings, *RUN_KEYS]
    twice = df[df.duplicated([*runs, "epoch"], keep=False)]
    if len(twice):
        key, group = next(iter(twice.groupby(runs, sort=False)))
        where = ", ".join(f"{k} = {v!r}" for k, v in zip(runs, key))
        raise ValueError(f"to_xarray: the run {where} is in more than one file "
                         f"({', '.join(sorted(set(group.file)))}); pass each run once")
    # load_runs' per-epoch columns follow 'epoch'; the ones no run has (all NaN) are left out
    per_epoch = [c for c in df.columns[df.columns.get_loc("epoch") + 1:] if df[c].notna().any()]
    run_level = [c for c in df.columns[:df.columns.get_loc("epoch")] if c not in runs]
    first = df.drop_duplicates(runs)
    constant = {c: first[c].iloc[0] for c in run_level
                if len(first) and first[c].nunique(dropna=False) == 1}
    cube = xr.Dataset.from_dataframe(df.set_index([*runs, "epoch"])[per_epoch])
    varying = [c for c in run_level if c not in constant]
    if varying:
        cube = cube.merge(xr.Dataset.from_dataframe(first.set_index(runs)[varying]))
    cube.attrs.update({k: _attribute(v) for k, v in constant.items() if v is not None and v == v})
    cube.attrs["settings"] = settings
    cube.attrs["notes"] = list(df.attrs["notes"])
    return cube


__all__ = ["to_xarray"]
