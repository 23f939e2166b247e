"""What the command line tells the user: --dry-run, compile notices, progress ETA, the summary's
spread, `warm`; and the traces as xarray / pandas (analysis.to_xarray, load_runs' settings)."""

import contextlib
import io
import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

from conftest import ROOT, run_mpi
from ordersim.config import FIELDS, Config, ConfigError, build_config

SMALL = ["--epochs", "2", "--workers", "2", "--seeds", "0", "1", "--orderers", "rr", "d-grab"]


def ordersim(args, cwd, env=None, timeout=600):
    return subprocess.run([sys.executable, "-m", "ordersim", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=cwd, env=dict(os.environ, PYTHONPATH=str(ROOT), **(env or {})))


def field_line(stdout: str, name: str) -> str:
    return next(line for line in stdout.splitlines() if line.split("=")[0].strip() == name)


def test_dry_run_prints_every_field_with_its_source_and_writes_nothing(tmp_path):
    config = tmp_path / "exp.toml"
    config.write_text('lr = 0.05\nmomentum = 0.5\n')
    out = tmp_path / "trace.h5"
    result = ordersim([str(config), "--dry-run", "--epochs", "2", "--orderers", "rr", "cd-grab",
                       "--out", str(out)], cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    for name in FIELDS:
        assert "(" in field_line(result.stdout, name), name  # every field, with its source
    assert field_line(result.stdout, "lr").endswith(f"(file {config})")
    assert field_line(result.stdout, "epochs").endswith("(flag)")
    assert field_line(result.stdout, "batch").endswith("(default)")
    assert "0 resolves to this" in field_line(result.stdout, "workers")
    # none given: logistic's own defaults, the value in effect (mu = lam below)
    assert field_line(result.stdout, "problem_options").split() == [
        "problem_options", "=", '{"lam":', "0.01}", "(default;", "{}", "resolves", "to", "this)"]
    assert '"serial"' in field_line(result.stdout, "backend")
    assert "2 orderer(s) (rr, cd-grab) x 3 seed(s) (0, 1, 2) = 6 runs of 2 epochs" in result.stdout
    assert "memory per rank:" in result.stdout and "memory per node:" in result.stdout
    assert "regime of cd-grab: step 0.05" in result.stdout and "mu = 0.01" in result.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == ["exp.toml"]  # no trace, lock or checkpoint


def test_dry_run_of_a_sweep_lists_its_cells(tmp_path):
    config = tmp_path / "sweep.toml"
    config.write_text('epochs = 1\nseeds = [0]\norderers = ["rr"]\n[sweep]\nmomentum = [0.0, 0.9]\n')
    result = ordersim([str(config), "--dry-run", "--out", str(tmp_path / "cells")], cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert field_line(result.stdout, "momentum").endswith("= [0.0, 0.9]                   (sweep)")
    assert "x 2 sweep cells = 2 runs" in result.stdout
    assert 'cell 1 {"momentum": 0.9}: out ' + str(tmp_path / "cells" / "cell_0001.h5") in result.stdout
    assert not (tmp_path / "cells").exists()


def test_dry_run_refuses_a_bad_field_like_a_run(tmp_path):
    result = ordersim(["--dry-run", "--momentum", "1.5"], cwd=tmp_path)
    assert result.returncode == 2
    assert "config field 'momentum': 1.5 is not allowed" in result.stderr


@pytest.mark.parametrize("problem, data, words", [
    ("logistic", "synthetic:regression?n=64&d=3", ["needs class labels", "least-squares"]),
    ("logistic", "sklearn:iris", ["needs exactly 2 classes", "softmax"]),
])
def test_labels_the_problem_cannot_take_name_the_problem_not_an_api_term(tmp_path, problem, data, words):
    """A user chose a problem, not a label_kind: the one line names the problem and what would fit."""
    result = ordersim(["--dry-run", "--problem", problem, "--data", data], cwd=tmp_path)
    assert result.returncode == 2
    [line] = result.stderr.splitlines()
    assert f"problem '{problem}' (binary labels)" in line and "label_kind='" not in line, line
    assert all(word in line for word in words), line


def test_the_last_lines_time_is_the_whole_jobs_and_the_trace_records_its_set_up(tmp_path):
    """README: the time on the last line includes compiling. Under MPI the node compiles in the
    set-up, which the clock started after; the trace's setup_time says how long that took."""
    import h5py

    out = tmp_path / "t.h5"
    result = ordersim([*SMALL, "--out", str(out)], cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    seconds = float(re.search(r"trace: .*\(([0-9.]+) s\)", result.stdout).group(1))
    with h5py.File(out) as f:
        assert 0 < f.attrs["setup_time"] <= seconds + 0.05, (f.attrs["setup_time"], seconds)


TABLE_FIELDS = [name for name, f in FIELDS.items() if f.type is dict]


@pytest.mark.parametrize("name", TABLE_FIELDS)
def test_a_table_flag_takes_a_toml_inline_table_or_a_json_object(name):
    """--orderer-options '{projection = "sparse"}', the form the help shows, and its JSON twin."""
    def parsed(text):
        return getattr(build_config({name: text}), name)

    examples = re.findall(r"\{[^{}]*\}", FIELDS[name].metadata["help"])
    for toml_text in [*examples, '{lam = 0.5, kind = "x", nested = {k = [1, 2]}}']:
        table = parsed(toml_text)
        assert table and parsed(json.dumps(table)) == table
    assert parsed("{}") == {}
    for bad in ["{lam = }", "[1, 2]", '{"lam": 1', "{lam = 1}\nextra = 2"]:
        with pytest.raises(ConfigError, match=rf"config field '{name}': .* is not a valid table: a TOML "
                                              r"inline table \(\{a = 1, b = \"x\"\}\) or a JSON object"):
            parsed(bad)


def test_the_help_of_every_table_field_shows_an_example_or_both_forms():
    for name in TABLE_FIELDS:
        text = FIELDS[name].metadata["help"]
        assert re.search(r"\{[^{}]*=[^{}]*\}", text) or "TOML table / JSON object" in text, name


@pytest.mark.mpi
def test_dry_run_under_mpiexec_prints_once_and_every_rank_exits_0(tmp_path):
    out = tmp_path / "trace.h5"
    result = run_mpi(2, ["-m", "ordersim", "--dry-run", "--workers", "4", "--epochs", "1",
                         "--out", str(out)], timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("dry run: done") == 1
    assert result.stdout.count("config (every field") == 1
    assert "backend mpi on 2 rank(s)" in result.stdout
    assert "(2 rank(s))" in result.stdout  # the node's memory sums both ranks
    assert not out.exists()


def test_progress_line_gives_elapsed_time_and_eta():
    from ordersim.backend import SerialBackend
    from ordersim.simulate import progress

    record = dict(epoch=1, train_loss=0.5, wall_time=2.0)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        progress(Config(epochs=3), SerialBackend(2), "rr", 0, record, 1, 3)
    # 2 s per epoch: 2 epochs of this run left, and one run of 3 epochs after it
    assert "elapsed 2.0 s  ETA run 4.0 s, job 10.0 s (run 2/3)" in printed.getvalue()


def test_summary_table_labels_its_spread_as_the_sample_std_over_seeds():
    from ordersim.simulate import summary_table

    done = dict(status="completed")
    table = summary_table({"rr": [dict(done, train_loss=1.0), dict(done, train_loss=2.0)],
                           "d-grab": [dict(done, train_loss=1.0)]})
    assert table.splitlines()[0] == "mean ± sample standard deviation over the runs (seeds) of each orderer:"
    rr = next(line for line in table.splitlines() if line.startswith("rr"))
    assert f"1.5 ± {np.std([1.0, 2.0], ddof=1):.2g}" in rr
    assert "1 ± -" in next(line for line in table.splitlines() if line.startswith("d-grab"))


def test_accuracy_is_in_percent_in_the_progress_line_and_the_summary_as_in_the_figures():
    """They printed the fraction (0.947) where every figure gives the test accuracy in %."""
    from ordersim.backend import SerialBackend
    from ordersim.simulate import progress, summary_table

    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        progress(Config(epochs=3), SerialBackend(2), "rr", 0,
                 dict(epoch=1, train_loss=0.5, test_accuracy=0.9474, wall_time=2.0), 0, 1)
    assert "  test acc 94.7%  " in printed.getvalue(), printed.getvalue()
    done = dict(status="completed", train_loss=0.1)
    table = summary_table({"rr": [dict(done, test_accuracy=0.9474), dict(done, test_accuracy=0.9474)]}).splitlines()
    assert table[1].split()[-3:] == ["test", "acc", "(%)"], table
    assert table[3].endswith("94.74 ± 0       "), table


def test_compile_notice_says_when_numba_compiles_and_how_long(capsys):
    numba = pytest.importorskip("numba")
    if numba.config.DISABLE_JIT:
        pytest.skip("nothing compiles under NUMBA_DISABLE_JIT=1")
    from ordersim.compile_notice import compile_notice

    @numba.njit
    def twice(x):
        return 2 * x

    with compile_notice("a test kernel"):
        twice(1.0)
    first = capsys.readouterr().err
    assert "ordersim: compiling a test kernel ..." in first
    assert "ordersim: compiled a test kernel in " in first and "Numba cannot cache" in first
    with compile_notice("a test kernel"):
        twice(2.0)  # compiled already: nothing to say
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("cached, per_process, times", [(8.8, 0.0, ["8.8 s"]), (0.0, 1.2, ["1.2 s"]),
                                                          (8.8, 1.2, ["10.0 s", "8.8 s", "1.2 s"])])
def test_the_compile_summary_says_each_time_and_each_part_once(cached, per_process, times):
    """A cold run printed `compiled ... in 8.8 s: 8.8 s for kernels now cached on disk (first run
    ...; cached after)`: one kind of kernel's time twice, and "cached" twice."""
    pytest.importorskip("numba")
    from ordersim.compile_notice import CompileTimer

    timer = CompileTimer("the kernels of logistic (for its constants)", enabled=False)
    timer.seconds = {True: cached, False: per_process}
    line = timer.summary()
    assert line.startswith("ordersim: compiled the kernels of logistic (for its constants) in "), line
    assert re.findall(r"\d+\.\d s\b", line) == times, line
    assert line.count("(for its constants)") == 1, line
    assert line.count("cached on disk") == (1 if cached else 0), line
    assert line.count("Numba cannot cache") == (1 if per_process else 0), line
    assert len(re.findall(r"\bcached\b", line)) == (1 if cached else 0), line


def test_counts_of_one_take_the_singular(tmp_path):
    """The run's header said "1 epochs", its warning "dropped 1 training examples" (455 training
    rows over 2 workers), the dry run "1 runs of 1 epochs" and "m = 1 workers"."""
    result = ordersim(["--epochs", "1", "--seeds", "0", "--orderers", "rr", "--workers", "2", "--no-herding",
                       "--out", str(tmp_path / "t.h5")], cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    header = result.stdout.splitlines()[0]
    assert "m = 2 workers x n = 227 examples" in header and ", 1 epoch," in header, header
    assert "dropped 1 training example so that" in result.stderr, result.stderr
    dry = ordersim(["--dry-run", "--epochs", "1", "--seeds", "0", "--orderers", "rr", "--workers", "1",
                    "--batch", "455"], cwd=tmp_path)
    assert dry.returncode == 0, dry.stderr
    assert "= 1 run of 1 epoch" in dry.stdout and "m = 1 worker x n = 455 examples" in dry.stdout, dry.stdout
    assert "1 step per epoch" in dry.stdout, dry.stdout
    plural_after_one = re.compile(r"(?<![\d.])1 (epochs|runs|workers|examples|steps|training examples)\b")
    assert not plural_after_one.search(result.stdout + result.stderr + dry.stdout)


def test_warm_compiles_on_a_stand_in_and_never_reads_the_data(tmp_path):
    result = ordersim(["warm", "--data", "libsvm:/nonexistent/data.svm", "--orderers", "rr",
                       "--workers", "2", "--test-fraction", "0"], cwd=tmp_path,
                      env={"NUMBA_DISABLE_JIT": "1"})
    assert result.returncode == 0, result.stderr
    assert "ordersim warm: 1 (problem, orderer) pair(s) compiled and cached" in result.stdout


@pytest.mark.parametrize("spec", ["bogus", "nosuch:x"])
def test_warm_refuses_a_bad_data_spec_as_a_run_does(tmp_path, spec):
    """The data are not read, but their spec is checked: a malformed one or an unknown source
    exited 0 before, having warmed the stand-in."""
    result = ordersim(["warm", "--data", spec, "--orderers", "rr"], cwd=tmp_path, env={"NUMBA_DISABLE_JIT": "1"})
    assert result.returncode == 2 and "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ordersim: error: config field 'data': ") and spec in lines[0]


@pytest.fixture(scope="module")
def sweep_traces(tmp_path_factory):
    """Two sweep cells (momentum 0 and 0.5) of rr and d-grab, 2 seeds, 2 epochs, measured at 0 and 2."""
    tmp = tmp_path_factory.mktemp("sweep")
    config = tmp / "sweep.toml"
    config.write_text("measure_every = 2\n[sweep]\nmomentum = [0.0, 0.5]\n")
    result = ordersim([str(config), *SMALL, "--out", str(tmp / "cells")], cwd=tmp)
    assert result.returncode == 0, result.stderr
    return sorted((tmp / "cells").glob("cell_*.h5")), result


def test_a_run_prints_eta_and_the_labelled_summary(sweep_traces):
    _, result = sweep_traces
    progress = [line for line in result.stdout.splitlines() if line.startswith("[d-grab seed 1]")]
    assert progress and all("elapsed " in line and " ETA run " in line for line in progress)
    assert "(run 4/4)" in progress[-1]
    assert "mean ± sample standard deviation over the runs (seeds) of each orderer:" in result.stdout


def test_load_runs_has_a_column_for_every_setting_that_differs(sweep_traces):
    from ordersim.analysis import load_runs

    files, _ = sweep_traces
    df = load_runs(files)
    assert df.attrs["settings"] == ["momentum"]
    assert {(str(f), m) for f, m in zip(df.file, df.momentum)} == {(str(files[0]), 0.0), (str(files[1]), 0.5)}
    assert "schedule" not in df  # the same in every file
    assert df.groupby(["momentum", "orderer"]).seed.nunique().tolist() == [2, 2, 2, 2]


def test_to_xarray_gives_the_settings_orderer_seed_epoch_cube(sweep_traces):
    pytest.importorskip("xarray")
    from ordersim import analysis
    from ordersim.analysis.load import load_run_arrays

    files, _ = sweep_traces
    ds = analysis.to_xarray(files)
    assert ds.train_loss.dims == ("momentum", "orderer", "seed", "epoch")
    assert ds.momentum.values.tolist() == [0.0, 0.5]
    assert sorted(ds.orderer.values.tolist()) == ["d-grab", "rr"]
    assert ds.seed.values.tolist() == [0, 1]
    assert ds.epoch.values.tolist() == [0, 2]
    for key in ("f_star", "L", "L_max", "mu", "sigma2_star", "zeta2_star", "problem", "workers"):
        assert key in ds.attrs, key
    assert ds.attrs["mu"] == pytest.approx(0.01) and ds.attrs["settings"] == ["momentum"]
    assert ds.compile_time.dims == ("momentum", "orderer", "seed")  # differs from run to run
    arrays = load_run_arrays(files[1])["runs"]["d-grab", 1]
    np.testing.assert_array_equal(ds.train_loss.sel(momentum=0.5, orderer="d-grab", seed=1).values,
                                  arrays["train_loss"])
    with pytest.raises(ValueError, match="is in more than one file"):
        analysis.to_xarray([files[0], files[0]])


def test_the_warm_up_trains_on_the_first_examples_of_every_shard():
    from ordersim.backend import SerialBackend
    from ordersim.simulate import WARM_UP_EXAMPLES, check_fields, prepare, warm_up_slice

    config = check_fields(Config(data="synthetic:regression?n=200&d=3", problem="least-squares",
                                 problem_options={}, test_fraction=0.0, workers=2, batch=1), 1)
    setup = prepare(config, SerialBackend(2))
    part = warm_up_slice(setup)
    assert (setup.n, part.n) == (100, WARM_UP_EXAMPLES)
    for w in range(2):
        rows = slice(w * setup.n, w * setup.n + WARM_UP_EXAMPLES)
        np.testing.assert_array_equal(part.A[w * part.n:(w + 1) * part.n], setup.A[rows])
        np.testing.assert_array_equal(part.y[w * part.n:(w + 1) * part.n], setup.y[rows])
    np.testing.assert_array_equal(part.shards, setup.shards[:, :WARM_UP_EXAMPLES])
    assert part.A.flags.c_contiguous and part.A.ctypes.data % 64 == 0
