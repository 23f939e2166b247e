"""The analysis package on small synthetic traces written here with h5py (docs/trace-format.md)."""

import json
import re
import warnings
import zlib
from pathlib import Path

import h5py
import numpy as np
import pytest

pytest.importorskip("matplotlib")
pytest.importorskip("pandas")

from ordersim.analysis.load import TraceWarning, always_written, load_orders, load_run_arrays, load_runs  # noqa: E402
from ordersim.analysis import convergence, fit, herding, herding_sim, scaling, stragglers, style  # noqa: E402

ORDERERS = ("rr", "cd-grab")
SEEDS = (0, 1, 2)
WORKERS = (1, 2, 4, 8, 16)
# Synthetic truth: suboptimality = C * (m n)^EXPONENT[orderer] * (t + 1)^-2 * lognormal noise.
EXPONENT = {"rr": -1.0, "cd-grab": -2.0}


def write_trace(path, workers=4, n=8, epochs=5, orderers=ORDERERS, seeds=SEEDS, noise=0.05,
                drop=(), interrupted=None, killed=False, record_orders=False, convex=True,
                scale=1.0, floor=0.0, code=None, config=None, data="synthetic", batch=1, lr=0.01, run_attrs=None):
    """A trace file as the simulator writes it: ``drop`` names datasets left out of every run,
    ``interrupted`` = (orderer, seed) of a run stopped after epoch 2 with status "interrupted",
    ``killed`` leaves out the root end_time; ``scale`` multiplies every run's suboptimality (a data
    draw's offset, shared by its seeds), ``floor`` bounds it from below; ``code`` = root attributes
    of the code state (git_commit, git_dirty, ...); ``config``: more fields of the stored config;
    ``run_attrs``: more attributes of every run (those of a straggler model, say)."""
    rng = np.random.default_rng(zlib.crc32(f"{Path(path).name} {workers} {n}".encode()))
    with h5py.File(path, "w") as f:
        f.attrs.update(ordersim_version="0.1.0",
                       config=json.dumps({"workers": workers, "n": n, "batch": batch, **(config or {})},
                                         sort_keys=True),
                       ranks=1, backend="serial", hosts=json.dumps(["localhost"]),
                       start_time="2026-11-29T16:00:00+00:00", problem="logreg", data=data,
                       dropped_examples=0, **(code or {}))
        if not killed:
            f.attrs["end_time"] = "2026-11-29T16:01:00+00:00"
        f["shards"] = np.arange(workers * n, dtype=np.int64).reshape(workers, n)
        for orderer in orderers:
            for seed in seeds:
                run = f.create_group(f"runs/{orderer}/seed_{seed}")
                stop = 2 if interrupted == (orderer, seed) else epochs
                t = np.arange(stop + 1)
                noisy = np.exp(noise * rng.standard_normal(stop + 1))
                sub = np.maximum(scale * 0.5 * (workers * n / 8) ** EXPONENT[orderer] * (t + 1.0) ** -2 * noisy,
                                 floor)
                herd = (np.sqrt(workers * n) if orderer == "rr" else np.log(workers * n + 1)) * noisy
                herd[0] = np.sqrt(workers * n) * noisy[0]
                data = {
                    "epoch": t.astype(np.int64), "train_loss": 0.3 + sub, "grad_norm": np.sqrt(2 * sub),
                    "suboptimality": sub, "dist_to_opt": np.sqrt(sub), "test_loss": 0.35 + sub,
                    "test_accuracy": 0.9 - sub / 10, "herding_inf": herd, "herding_2": 2 * herd,
                    "balance_discrepancy": np.where(t == 0, 0.0, herd / 2),
                    "wall_time": 0.1 * t * (1.2 if orderer == "cd-grab" else 1.0) * noisy,
                    "compute_time": 0.08 * t, "order_time": 0.01 * t, "comm_time": 0.0 * t,
                }
                for name in sorted(always_written() - set(data)):  # the schema's other timers
                    data[name] = 0.01 * t
                if not convex:
                    data.pop("suboptimality"), data.pop("dist_to_opt")
                for name, values in data.items():
                    if name not in drop:
                        run.create_dataset(name, data=values, maxshape=(None,), chunks=True)
                if record_orders:  # the first epoch's order, then the next one after every epoch
                    run["orders"] = np.stack([np.stack([rng.permutation(n) for _ in range(workers)])
                                              for _ in range(stop + 1)]).astype(np.int32)
                run.attrs.update(orderer=orderer, seed=seed, workers=workers, examples_per_worker=n,
                                 batch=batch, lr=lr, f_star=0.3 if convex else np.nan, L=1.0, L_max=2.0,
                                 mu=0.1 if convex else np.nan, sigma2_star=0.5, zeta2_star=0.2,
                                 status="interrupted" if stop < epochs else "completed",
                                 epochs_completed=stop, **(run_attrs or {}))
    return path


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    """One file per m in WORKERS (n = 8), plus one file per n at m = 4 (the n sweep)."""
    d = tmp_path_factory.mktemp("sweep")
    files = [write_trace(d / f"m{m}.h5", workers=m) for m in WORKERS]
    files += [write_trace(d / f"n{n}.h5", workers=4, n=n) for n in (16, 32)]
    return files


def keep_epochs(path, keep):
    """Rewrite every run's per-epoch datasets of ``path`` to the epochs in ``keep`` (as if measured
    only there)."""
    with h5py.File(path, "r+") as f:
        for orderer in f["runs"]:
            for run in f["runs"][orderer].values():
                rows = np.isin(run["epoch"][()], keep)
                for name in [k for k, v in run.items() if isinstance(v, h5py.Dataset) and v.ndim == 1]:
                    values = run[name][()][rows]
                    del run[name]
                    run.create_dataset(name, data=values, maxshape=(None,), chunks=True)


def quiet(fn, *args):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TraceWarning)
        return fn(*args)


def herding_sim_file(path, seed=0, workers=(2, 4), total=64, rounds=3):
    """A file as ``python -m ordersim herding-sim`` writes it (docs/herding_sim.md)."""
    rng = np.random.default_rng(seed)
    with h5py.File(path, "w") as f:
        f.attrs.update(experiment="herding-sim", ordersim_version="0.1.0", start_time="x", end_time="y",
                       config=json.dumps({"workers": list(workers), "total": total, "rounds": rounds,
                                          "seed": seed, "dim": 16, "batch": 1, "norm": "inf"}))
        for m in workers:
            g = f.create_group(f"m_{m}")
            g.attrs.update(workers=m, examples_per_worker=total // m)
            for name in ("rr", "d-grab", "cd-grab"):
                values = 5.0 * np.exp(-(np.arange(rounds + 1) if name != "rr" else 0) / 2)
                ds = g.create_dataset(name, data=values * (1 + 0.05 * rng.random(rounds + 1)))
                ds.attrs.update(orderer=name, workers=m, examples_per_worker=total // m, dim=16,
                                rounds=rounds, batch=1, seed=seed, norm="inf", seconds=0.1)
    return path


def written(out, *names):
    for name in names:
        for ext in ("png", "pdf"):
            p = out / f"{name}.{ext}"
            assert p.exists() and p.stat().st_size > 1000, p


# -- loading ------------------------------------------------------------------------------------------
def test_load_runs_is_tidy(sweep):
    df = load_runs(sweep[:2])
    # 2 files x 2 orderers x 3 seeds x 6 measured epochs
    assert len(df) == 2 * 2 * 3 * 6
    for column in ("file", "orderer", "seed", "workers", "examples_per_worker", "batch", "lr", "status",
                   "f_star", "interrupted", "epoch", "train_loss", "suboptimality", "herding_inf", "wall_time"):
        assert column in df, column
    assert set(df.orderer) == set(ORDERERS) and set(df.workers) == {1, 2}
    assert df.attrs["notes"] == [] and not df.interrupted.any()
    one = df[(df.file == str(sweep[1])) & (df.orderer == "rr") & (df.seed == 2)]
    with h5py.File(sweep[1]) as f:
        np.testing.assert_array_equal(one.train_loss, f["runs/rr/seed_2/train_loss"][()])


def test_interrupted_follows_every_run_attribute_whichever_file_has_them(tmp_path):
    """docs/analysis.md's column order: a plain trace first, then a straggler run's, put
    `interrupted` before the attributes only the later file has."""
    plain = write_trace(tmp_path / "plain.h5")
    straggling = write_trace(tmp_path / "straggling.h5", run_attrs={"coding": "gc-fr", "coding_s": 1})
    columns = list(load_runs([plain, straggling]).columns)
    assert columns.index("interrupted") == columns.index("epoch") - 1, columns
    assert columns.index("coding_s") < columns.index("interrupted"), columns


def test_load_run_arrays_and_orders(tmp_path):
    path = write_trace(tmp_path / "orders.h5", workers=2, n=4, epochs=3, record_orders=True)
    arrays = load_run_arrays(path)
    assert arrays["attrs"]["config"] == {"workers": 2, "n": 4, "batch": 1}
    run = arrays["runs"][("cd-grab", 1)]
    assert run["attrs"]["workers"] == 2 and run["train_loss"].shape == run["epoch"].shape == (4,)
    orders = load_orders(path, "cd-grab", 1)
    assert orders.shape == (4, 2, 4) and (np.sort(orders, axis=2) == np.arange(4)).all()  # (E + 1, m, n)
    with pytest.raises(KeyError, match="no run"):
        load_orders(path, "grab", 0)
    with pytest.raises(KeyError, match="record-orders"):
        load_orders(write_trace(tmp_path / "plain.h5", seeds=(0,)), "rr", 0)


def test_missing_dataset_loads_as_nan_and_warns(tmp_path):
    path = write_trace(tmp_path / "missing.h5", drop=("grad_norm",))
    with pytest.warns(TraceWarning, match=r"missing\.h5: dataset 'grad_norm' is missing"):
        df = load_runs(path)
    assert df.grad_norm.isna().all() and df.train_loss.notna().all()
    assert any("grad_norm" in note for note in df.attrs["notes"])


def test_a_dataset_the_config_switched_on_is_expected_in_every_run(tmp_path):
    """shuffle_variance = true in a file's config (ordersim/trace_schema.py: the field that
    switches the dataset on) makes a run without it a warning; the new columns load."""
    path = write_trace(tmp_path / "switched.h5")
    with h5py.File(path, "a") as f:
        f.attrs["config"] = json.dumps({"workers": 4, "shuffle_variance": True})
        for orderer, seeds in f["runs"].items():
            for seed, run in seeds.items():
                if (orderer, seed) != ("rr", "seed_0"):
                    run["shuffle_variance"] = np.ones(len(run["epoch"]))
    with pytest.warns(TraceWarning, match=r"dataset 'shuffle_variance' is missing in run\(s\) rr/seed_0"):
        df = load_runs(path)
    assert df.loc[df.orderer == "cd-grab", "shuffle_variance"].eq(1).all()
    assert df.loc[df.orderer == "rr", "shuffle_variance"].isna().any() and "avg_grad_error" in df


def test_conditional_dataset_absent_everywhere_is_silent(tmp_path):
    path = write_trace(tmp_path / "nonconvex.h5", convex=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error", TraceWarning)
        df = load_runs(path)
    assert df.suboptimality.isna().all()


def test_interrupted_run_loads_and_warns(tmp_path):
    path = write_trace(tmp_path / "stopped.h5", interrupted=("cd-grab", 1), epochs=5)
    with pytest.warns(TraceWarning, match=r"run cd-grab/seed_1 in file .*stopped\.h5 is interrupted after epoch 2"):
        df = load_runs(path)
    run = df[(df.orderer == "cd-grab") & (df.seed == 1)]
    assert list(run.epoch) == [0, 1, 2] and run.interrupted.all()
    assert not df[df.orderer == "rr"].interrupted.any()


def test_killed_job_without_end_time_warns(tmp_path):
    path = write_trace(tmp_path / "killed.h5", killed=True, interrupted=("rr", 0))
    with pytest.warns(TraceWarning) as record:
        df = load_runs(path)
    messages = [str(w.message) for w in record]
    # a checkpointed stop (SIGUSR1, exit 3) leaves no end_time either: the note must not say killed only
    assert any("has no end_time" in m and "stopped with a checkpoint" in m for m in messages)
    assert any("run rr/seed_0 in file" in m and "interrupted after epoch 2" in m for m in messages)
    assert df[(df.orderer == "rr") & (df.seed == 0)].interrupted.all()


STRAGGLER_ATTRS = dict(straggler_model="shifted-exp", straggler_params='{"a": 0.2}', coding="wait-all", coding_s=0,
                       load=1.0, latency=0.0, bandwidth=1e9)


def test_attributes_that_only_some_runs_have_come_before_epoch(tmp_path):
    """A plain run's file, then a straggler run's (coding, coding_s, straggler_model, ... only
    there): every run-level column before 'epoch', the per-epoch datasets after it."""
    pytest.importorskip("xarray")
    from ordersim.analysis import to_xarray

    files = [write_trace(tmp_path / "plain.h5", seeds=(0,)),
             write_trace(tmp_path / "straggling.h5", seeds=(1,), run_attrs=STRAGGLER_ATTRS)]
    df = quiet(load_runs, files)
    columns = list(df.columns)
    assert max(columns.index(name) for name in STRAGGLER_ATTRS) < columns.index("epoch")
    assert columns[columns.index("epoch") + 1] == "train_loss"
    ds = quiet(to_xarray, files)
    assert ds.train_loss.dims == ("orderer", "seed", "epoch") and "coding" not in ds.train_loss.dims
    assert ds.coding.dims == ("orderer", "seed")


def test_a_setting_holds_the_configs_value_over_a_run_attribute_of_its_name(tmp_path):
    """runs/stragglers.toml's wait-all cells: config coding_s = 1, 2, 3, run attribute coding_s = 0
    (what wait-all tolerates); with a plain run's file beside them (no coding attributes)."""
    pytest.importorskip("xarray")
    from ordersim.analysis import to_xarray

    files = [write_trace(tmp_path / f"cell_{s}.h5", seeds=(0, 1), run_attrs=STRAGGLER_ATTRS,
                         config={"coding": "wait-all", "coding_s": s, "stragglers": "shifted-exp"})
             for s in (1, 2, 3)]
    files.append(write_trace(tmp_path / "plain.h5", seeds=(0, 1),
                             config={"coding": "wait-all", "coding_s": 1, "stragglers": ""}))
    df = quiet(load_runs, files)
    assert df.attrs["settings"] == ["stragglers", "coding_s"]
    assert df.groupby("file").coding_s.unique().map(list).to_dict() == {
        str(files[0]): [1], str(files[1]): [2], str(files[2]): [3], str(files[3]): [1]}
    ds = quiet(to_xarray, files[:3])
    assert ds.coding_s.values.tolist() == [1, 2, 3] and ds.train_loss.dims[0] == "coding_s"


def test_fields_that_change_only_how_a_job_ran_or_what_it_records_are_no_settings(tmp_path):
    ran = [{"backend": "serial", "record_orders": False, "trace_every": 0, "measure_every": 1, "herding": True,
            "shuffle_variance": False, "measurements": [], "remainder": "drop"},
           {"backend": "mpi", "record_orders": True, "trace_every": 5, "measure_every": 2, "herding": False,
            "shuffle_variance": True, "measurements": ["held-out"], "remainder": "error"}]
    files = [write_trace(tmp_path / f"job{i}.h5", seeds=(i,), config=config) for i, config in enumerate(ran)]
    df = quiet(load_runs, files)
    assert df.attrs["settings"] == []


def test_settings_come_in_the_configs_field_order(tmp_path):
    """workers before batch (ordersim/config.py), not alphabetically (the stored config's keys are)."""
    pytest.importorskip("xarray")
    from ordersim.analysis import to_xarray

    files = [write_trace(tmp_path / f"m{m}_b{b}.h5", workers=m, batch=b, seeds=(0,)) for m in (2, 4) for b in (1, 2)]
    assert quiet(load_runs, files).attrs["settings"] == ["workers", "batch"]
    assert quiet(to_xarray, files).train_loss.dims == ("workers", "batch", "orderer", "seed", "epoch")


def test_rows_after_epochs_completed_are_dropped(tmp_path):
    """An interrupted run whose datasets hold a row that epochs_completed does not confirm."""
    path = write_trace(tmp_path / "failed.h5", interrupted=("cd-grab", 1), epochs=5)
    with h5py.File(path, "r+") as f:
        run = f["runs/cd-grab/seed_1"]
        run.attrs["epochs_completed"] = 1
    with pytest.warns(TraceWarning) as record:
        df = load_runs(path)
    notes = [str(w.message) for w in record]
    assert any(re.search(r"cd-grab/seed_1 in file .*failed\.h5: dropped 1 row\(s\) after epochs_completed = 1",
                         note) for note in notes), notes
    assert any("interrupted after epoch 1" in note and "its 2 measured epochs" in note for note in notes)
    assert list(df[(df.orderer == "cd-grab") & (df.seed == 1)].epoch) == [0, 1]
    assert len(df[(df.orderer == "rr") & (df.seed == 1)]) == 6  # completed runs are whole


def test_a_row_the_kill_left_half_written_is_dropped_without_padding_notes(tmp_path):
    """SIGKILL between two datasets' appends: epoch's row is there, the timers' is not, and
    epochs_completed does not confirm it. The row is dropped; nothing is reported padded."""
    path = write_trace(tmp_path / "killed.h5", killed=True, interrupted=("cd-grab", 1), epochs=5)
    with h5py.File(path, "r+") as f:
        run = f["runs/cd-grab/seed_1"]
        run.attrs["epochs_completed"] = 1
        run["comm_time"].resize(2, axis=0)
    with pytest.warns(TraceWarning) as record:
        df = load_runs(path)
    notes = [str(w.message) for w in record]
    assert any("dropped 1 row(s) after epochs_completed = 1" in note for note in notes), notes
    assert not any("padded with NaN" in note for note in notes), notes
    run = df[(df.orderer == "cd-grab") & (df.seed == 1)]
    assert list(run.epoch) == [0, 1] and run.comm_time.notna().all()
    with h5py.File(path, "r+") as f:  # the epoch row resized but unwritten: HDF5's fill value, 0
        f["runs/cd-grab/seed_1/epoch"][2] = 0
    with pytest.warns(TraceWarning):
        df = load_runs(path)
    assert list(df[(df.orderer == "cd-grab") & (df.seed == 1)].epoch) == [0, 1]


def test_the_readmes_load_runs_snippet_runs(tmp_path, monkeypatch, capsys):
    """README.md, "Traces and analysis": the snippet as written, on traces of the names it reads."""
    pytest.importorskip("xarray")
    readme = (Path(__file__).parents[1] / "README.md").read_text()
    snippet = next(block for block in readme.split("```python\n")[1:] if "load_runs" in block).split("```")[0]
    monkeypatch.chdir(tmp_path)
    write_trace(tmp_path / "ordersim-20261129-161931.h5", seeds=(0, 1))
    (tmp_path / "sweep-x").mkdir()
    for i, momentum in enumerate((0.0, 0.9)):
        write_trace(tmp_path / "sweep-x" / f"cell_{i}.h5", seeds=(0, 1), config={"momentum": momentum})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TraceWarning)
        exec(snippet, {})
    df = quiet(load_runs, tmp_path / "ordersim-20261129-161931.h5")
    last = df[df.epoch == 5].groupby("orderer").suboptimality.mean()
    printed = capsys.readouterr().out
    assert "mean" in printed and "std" in printed  # over the seeds, not the last seed's row
    assert all(f"{value:.6g}"[:6] in printed for value in last), (printed, last)


# -- fit ----------------------------------------------------------------------------------------------
def test_fit_exponent_recovers_known_slope():
    rng = np.random.default_rng(1)
    m = np.repeat([1, 2, 4, 8, 16, 32, 64], 3)
    y = 3.0 * m**-2.0 * np.exp(0.05 * rng.standard_normal(m.size))
    slope, lo, hi = fit.fit_exponent(m, y)
    assert lo < slope < hi and lo <= -2 <= hi and hi - lo < 0.1
    exact = fit.fit_exponent([1, 2, 4], [1, 0.25, 0.0625])
    assert exact[0] == pytest.approx(-2) and exact[1] == pytest.approx(-2) and exact[2] == pytest.approx(-2)
    assert np.isnan(fit.fit_exponent([1, 2], [1, 0.5])[1])


def test_fit_table_from_traces_agrees_with_theory(sweep, capsys):
    result, metric, setting, epoch, _ = quiet(fit.table, quiet(load_runs, sweep))
    assert (metric, setting, epoch) == ("suboptimality", "pl", 5)
    by = result.set_index(["variable", "orderer"])
    for variable in ("m", "n"):
        for orderer, expected in EXPONENT.items():
            row = by.loc[(variable, orderer)]
            assert row.ci_low <= expected <= row.ci_high and row.agree == "yes", (variable, orderer, row)
    assert by.loc[("m", "rr")].cells == len(WORKERS) and by.loc[("m", "rr")].draws == 1
    assert fit.main([str(p) for p in sweep]) == 0
    out = capsys.readouterr().out
    assert "cd-grab" in out and "-2" in out and "yes" in out


def test_fit_interval_holds_the_data_draw_variation(tmp_path):
    """Three data draws per m, each moving all its seeds' errors together (seed noise 1%, draw noise
    30%): the seeds are not independent points. Fitting every run as a point gives an interval that
    the draw variation does not widen, much narrower than the fit over cell means, which covers
    the true slope."""
    rng = np.random.default_rng(7)
    files = [write_trace(tmp_path / f"m{m}_d{draw}.h5", workers=m, noise=0.01,
                         scale=float(np.exp(0.3 * rng.standard_normal())))
             for m in WORKERS for draw in range(3)]
    df = quiet(load_runs, files)
    result, *_ = quiet(fit.table, df)
    by = result.set_index(["variable", "orderer"])
    errors, *_ = fit.final_errors(df)
    for orderer, expected in EXPONENT.items():
        row = by.loc[("m", orderer)]
        assert row.cells == len(WORKERS) and row.draws == 3
        assert row.ci_low <= expected <= row.ci_high, row
        runs = errors[errors.orderer == orderer]
        _, lo, hi = fit.fit_exponent(runs.workers, runs.error)
        assert 2 * (hi - lo) < row.ci_high - row.ci_low, (lo, hi, row)


def test_cells_at_a_floor_are_flagged_and_left_out(tmp_path, capsys):
    # cd-grab's error (0.5/36 m^-2 at T = 5) meets the floor after m = 8; rr's (m^-1) stays above it
    files = [write_trace(tmp_path / f"m{m}.h5", workers=m, floor=2e-4) for m in (1, 2, 4, 8, 16, 32)]
    result, *_, notes = quiet(fit.table, quiet(load_runs, files))
    cd = result.set_index(["variable", "orderer"]).loc[("m", "cd-grab")]
    assert cd.floor == "16, 32" and cd.cells == 4 and cd.ci_low <= -2 <= cd.ci_high
    assert result.set_index(["variable", "orderer"]).loc[("m", "rr")].floor == "-"
    assert any("cd-grab, m: cells m = 16, 32 are at a floor" in note for note in notes)


@pytest.mark.parametrize("module", [fit, scaling])
def test_fit_options_outside_their_domain_are_refused_in_one_line(module, tmp_path, capsys):
    """--epoch and --level were used unchecked: a negative or unmeasured T fitted no run (or some
    runs only), a level of 0, 1.5 or 95 printed a 0%, 150% or 9500% interval."""
    files = [str(write_trace(tmp_path / f"m{m}.h5", workers=m, seeds=(0, 1))) for m in (1, 2, 4)]
    gappy = str(write_trace(tmp_path / "every3.h5", workers=8, seeds=(0, 1), epochs=7))
    keep_epochs(gappy, [0, 3, 6, 7])  # measure_every = 3
    out = ["--out", str(tmp_path / "figures")] if module is scaling else []
    cases = [(files, ["--epoch", "-1"], "argument --epoch: '-1' is not allowed; allowed: an integer >= 0"),
             (files, ["--epoch", "6"], "argument --epoch: '6' is not allowed; allowed: an epoch every completed "
                                       "run measured: 0 to 5"),
             (files + [gappy], ["--epoch", "4"], "measured: 0, 3"),
             (files, ["--level", "0"], "argument --level: '0' is not allowed; allowed: a number strictly between "
                                       "0 and 1"),
             (files, ["--level", "1.5"], "'1.5' is not allowed"), (files, ["--level", "95"], "'95' is not allowed"),
             (files, ["--level", "nan"], "'nan' is not allowed")]
    for paths, option, why in cases:
        with pytest.raises(SystemExit) as stop:
            quiet(module.main, [*paths, *out, *option])
        assert stop.value.code == 2, option
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith(f"python -m {module.__name__}: error: ") and why in err[0], \
            (option, err)
    assert not (tmp_path / "figures").exists()
    assert quiet(module.main, [*files, *out, "--epoch", "3", "--level", "0.9"]) == 0


def test_scripts_say_which_code_states_they_read(tmp_path, capsys):
    a = write_trace(tmp_path / "a.h5", code={"git_commit": "a" * 40, "git_dirty": False})
    b = write_trace(tmp_path / "b.h5", code={"git_commit": "b" * 40, "git_dirty": True,
                                             "git_diff_sha1": "123456789abc"})
    with pytest.warns(TraceWarning, match="the files come from 2 code states"):
        df = load_runs([a, b])
    assert df.attrs["code_states"] == {"0.1.0 @ aaaaaaaaaaaa": [str(a)],
                                       "0.1.0 @ bbbbbbbbbbbb (dirty, diff 123456789abc)": [str(b)]}
    assert fit.main([str(a)]) == 0
    out = capsys.readouterr()
    assert "code: 0.1.0 @ aaaaaaaaaaaa (1 file)" in out.out and "code states" not in out.err
    assert fit.main([str(a), str(b)]) == 0
    assert "the files come from 2 code states" in capsys.readouterr().err


# -- scripts ------------------------------------------------------------------------------------------
def test_convergence_script(sweep, tmp_path):
    assert convergence.main([str(sweep[0]), str(sweep[2]), "--out", str(tmp_path), "--dpi", "80"]) == 0
    written(tmp_path, "convergence_epochs", "convergence_time")


def test_herding_script(sweep, tmp_path):
    assert herding.main([*map(str, sweep), "--out", str(tmp_path), "--norm", "2", "--band", "std", "--dpi", "80"]) == 0
    written(tmp_path, "herding_epochs", "herding_vs_n")


def test_scaling_script(sweep, tmp_path):
    assert scaling.main([*map(str, sweep), "--out", str(tmp_path), "--dpi", "80"]) == 0
    written(tmp_path, "scaling")


def test_herding_sim_script(tmp_path):
    files = [str(herding_sim_file(tmp_path / f"hs{s}.h5", seed=s)) for s in (0, 1)]
    assert herding_sim.main([*files, "--out", str(tmp_path), "--dpi", "80"]) == 0
    written(tmp_path, "herding_sim")


def test_herding_sim_script_says_it_skips_a_run_trace_in_one_plain_line(tmp_path, capsys):
    """The warning came as the warnings module's source excerpt (a path, a line number, the code
    line); like every script's, it is one plain line on stderr."""
    trace, sim = write_trace(tmp_path / "trace.h5"), herding_sim_file(tmp_path / "sim.h5")
    assert herding_sim.main([str(trace), str(sim), "--out", str(tmp_path), "--dpi", "80"]) == 0
    assert capsys.readouterr().err.splitlines() == [
        f"warning: file {trace} is not a herding-sim file (root attribute experiment = None); skipped"]


@pytest.mark.parametrize("module", [convergence, herding, scaling, stragglers, herding_sim, fit])
def test_scripts_refuse_a_file_they_cannot_read_in_one_line(module, tmp_path, capsys):
    """A missing file, a directory, a file that is not HDF5, and the other kind of ordersim file
    (a run trace for herding_sim, a herding-sim file for the others): argparse's one-line usage
    error naming the file (exit 2), before anything is read, never h5py's traceback."""
    not_hdf5 = tmp_path / "notes.h5"
    not_hdf5.write_text("not HDF5")
    trace, sim = write_trace(tmp_path / "trace.h5"), herding_sim_file(tmp_path / "sim.h5")
    other_kind = trace if module is herding_sim else sim
    cases = [(tmp_path / "missing.h5", "does not exist"), (tmp_path, "is not a file"),
             (not_hdf5, "is not an HDF5 file")]
    if module is not herding_sim:  # herding_sim's reader skips a run trace with a warning
        cases.append((other_kind, "is an ordersim herding-sim file, not a run trace"))
    out = [] if module is fit else ["--out", str(tmp_path / "figures")]
    for path, why in cases:
        with pytest.raises(SystemExit) as stop:
            module.main([str(path), *out])
        assert stop.value.code == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1, err
        assert err[0].startswith(f"python -m {module.__name__}: error: argument FILE.h5: {str(path)!r} {why}"), err
    assert not (tmp_path / "figures").exists()


@pytest.mark.parametrize("module", [convergence, herding, scaling, stragglers, herding_sim])
def test_scripts_check_dpi_and_out_before_reading(module, tmp_path, capsys):
    """--dpi 0 failed in matplotlib after the traces were read, 10^5 exhausted the memory; an
    --out that is a file or under one gave a traceback: argparse's error now, exit 2."""
    trace = herding_sim_file(tmp_path / "sim.h5") if module is herding_sim else write_trace(tmp_path / "t.h5")
    a_file = tmp_path / "notes.txt"
    a_file.write_text("kept\n")
    for extra, why in ((["--dpi", "0"], "argument --dpi: '0' is not allowed"),
                       (["--dpi", "100000"], "an integer from 1 to 2400"),
                       (["--out", str(a_file)], "exists and is not a directory"),
                       (["--out", str(a_file / "figures")], "is not a writable directory")):
        args = [str(trace), "--out", str(tmp_path / "figures"), *extra]
        with pytest.raises(SystemExit) as stop:
            module.main(args)
        assert stop.value.code == 2
        assert why in capsys.readouterr().err.strip().splitlines()[-1]
    assert a_file.read_text() == "kept\n" and not (tmp_path / "figures").exists()


def test_reproduce_checks_dpi_before_running(capsys):
    from ordersim.analysis import reproduce

    with pytest.raises(SystemExit) as stop:
        reproduce.main(["cdgrab_logreg", "--quick", "--dpi", "0"])
    assert stop.value.code == 2 and "argument --dpi" in capsys.readouterr().err


def test_scaling_says_its_band_is_over_the_data_draws(capsys):
    """--help said "shaded band over seeds" while the band is over the data draws (each the mean over
    its seeds), as the description and docs/analysis.md say."""
    with pytest.raises(SystemExit):
        scaling.main(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    start = text.rindex("--band {minmax,std}")  # its help, after the usage line
    band = text[start:text.index("--dpi DPI", start)]
    assert "shaded band over the data draws (each draw's mean over its seeds)" in band and "seeds:" not in band
    assert "the band their min-max" in text
    doc = " ".join((Path(__file__).parents[1] / "docs" / "analysis.md").read_text().split())
    assert "the draws' min–max, or ±1 std over the draws with `--band std`" in doc


def test_scripts_explain_every_option(capsys):
    for module in (convergence, herding, scaling, stragglers, herding_sim, fit):
        with pytest.raises(SystemExit):
            module.main(["--help"])
        text = capsys.readouterr().out
        assert "FILE.h5" in text and "--out" in text, module.__name__
        # each default said once (stragglers' --target said "(default 1e-3) (default: 0.001)")
        assert not re.search(r"\(default[^)]*\) \(default", " ".join(text.split())), module.__name__


def test_each_value_of_another_swept_setting_is_a_fit_of_its_own(tmp_path, capsys):
    """A sweep of lr {0.1, 0.3} x m {2, 4, 8}: fit fitted the lr = 0.1 cells only and dropped the
    lr = 0.3 files without a word. Each lr is now a fit (a block of rows with its lr), the scaling
    figure a panel each, and a file in no sweep (lr = 0.5 at one m) is named in a note."""
    files = [str(write_trace(tmp_path / f"lr{lr}_m{m}.h5", workers=m, lr=lr, config={"lr": lr}, seeds=(0, 1),
                             scale=lr / 0.1))
             for lr in (0.1, 0.3) for m in (2, 4, 8)]
    lone = str(write_trace(tmp_path / "lr0.5_m2.h5", workers=2, lr=0.5, config={"lr": 0.5}, seeds=(0, 1)))
    df = quiet(load_runs, [*files, lone])
    result, *_, notes = quiet(fit.table, df)
    assert list(result.columns[:3]) == ["variable", "lr", "orderer"]
    assert [(r.lr, r.orderer, r.cells) for r in result.itertuples()] == [
        (0.1, "rr", 3), (0.1, "cd-grab", 3), (0.3, "rr", 3), (0.3, "cd-grab", 3)]
    for r in result.itertuples():
        assert r.ci_low <= EXPONENT[r.orderer] <= r.ci_high, r
    assert f"left out 1 file(s) in no sweep over m or n (one value of each where their other settings are fixed): " \
           f"{lone}" in notes
    assert quiet(fit.main, [*files, lone]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[2].split()[:3] == ["variable", "lr", "orderer"]
    assert [line.split()[:3] for line in out[3:7]] == [["m", "0.1", "rr"], ["m", "0.1", "cd-grab"],
                                                      ["m", "0.3", "rr"], ["m", "0.3", "cd-grab"]]
    fig, _ = scaling.draw(quiet(style.load, [*files, lone]))
    titles = [ax.get_title() for ax in fig.axes if ax.get_title()]
    assert [t.split(",")[:2] for t in titles] == [["n = 8", " lr=0.1"], ["n = 8", " lr=0.3"]]


def test_sweep_over_m_on_a_fixed_dataset_is_used_with_a_note(tmp_path):
    files = [write_trace(tmp_path / f"fixed{m}.h5", workers=m, n=64 // m) for m in (2, 4, 8)]
    result, *_, notes = quiet(fit.table, quiet(load_runs, files))
    assert set(result.variable) == {"m", "n"}
    # m n is fixed, so the error does not move with m: a flat line, fitted (not a floor)
    assert (result.cells == 3).all() and (result.floor == "-").all()
    assert (result.exponent.abs() < 0.1).all()
    assert any("does not hold examples_per_worker fixed" in note for note in notes)


def test_a_sweep_over_m_at_fixed_n_spans_data_specs_as_documented(tmp_path):
    """Each m draws its own m*n examples (its own data spec), and the fit takes them as one sweep;
    docs/analysis.md said the runs of a sweep agree in data too."""
    files = [write_trace(tmp_path / f"m{m}.h5", workers=m, data=f"synthetic:regression?n={8 * m}")
             for m in (2, 4, 8)]
    result, *_ = quiet(fit.table, quiet(load_runs, files))
    assert (result[result.variable == "m"].cells == 3).all()
    doc = " ".join((Path(__file__).parents[1] / "docs" / "analysis.md").read_text().split())
    assert "the runs whose n, b, lr and problem agree" in doc and "the data spec may differ" in doc


def test_herding_sim_loader_reads_every_cell(tmp_path):
    from ordersim.analysis.load import load_herding_sim

    df = load_herding_sim(herding_sim_file(tmp_path / "hs.h5", rounds=4))
    assert len(df) == 2 * 3 * 5 and set(df.workers) == {2, 4} and set(df.examples_per_worker) == {32, 16}
    assert (df.groupby(["workers", "orderer"])["round"].max() == 4).all()


def test_herding_sim_loader_columns_in_the_documented_order(tmp_path):
    """docs/analysis.md: load_herding_sim returns (file, workers, examples_per_worker, orderer, seed,
    dim, batch, norm, round, herding), with files and without (a run trace only: an empty table)."""
    from ordersim.analysis.load import TraceWarning, load_herding_sim

    documented = ["file", "workers", "examples_per_worker", "orderer", "seed", "dim", "batch", "norm",
                  "round", "herding"]
    doc = " ".join((Path(__file__).parents[1] / "docs" / "analysis.md").read_text().split())
    assert "as a table (" + ", ".join(documented) + ")" in doc
    assert list(load_herding_sim(herding_sim_file(tmp_path / "hs.h5", rounds=2)).columns) == documented
    run_trace = tmp_path / "run.h5"
    with h5py.File(run_trace, "w") as f:
        f.attrs["ordersim_version"] = "0.1.0"
    with pytest.warns(TraceWarning, match="not a herding-sim file"):
        empty = load_herding_sim(run_trace)
    assert empty.empty and list(empty.columns) == documented
    with pytest.warns(TraceWarning, match="not a herding-sim file"):  # "code: ... (2 files)" counted it
        drawn = load_herding_sim([tmp_path / "hs.h5", run_trace])
    assert [len(files) for files in drawn.attrs["code_states"].values()] == [1]
