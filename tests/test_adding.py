"""docs/adding.md's worked examples run: the orderer module and its reference, as the page gives
them, agree; the orderer works inside the serial backend's jitted epoch loop and through a
checkpoint file and a pickle; a checkpoint of another state layout is refused. The problem, data
source, straggler model, coding scheme and measurement follow the rules their text states, alone
and together in one run by path; a measurement's datasets reach the trace and analysis.load's
frame, the same on any number of ranks, and a bad one is a one-line config error; and the page's
entry points, installed as a package, add the orderer, the straggler model and the measurement by
name."""

import importlib.util
import pickle
import re
import sys
from pathlib import Path

import numpy as np
import pytest

import reference.orderers as reference_module
from ordersim import checkpoint, engine
from ordersim.problems import make_problem
from conftest import run_mpi
from reference.orderers import drive
from test_engine import M, N_LOCAL, P, epoch_from_zero, least_squares_data
from test_simulator import TIMING, assert_bitwise_equal, contents

ROOT = Path(__file__).resolve().parents[1]


def example_block(label: str) -> str:
    """The python block after the page's ``<!-- example: label -->`` marker."""
    page = (ROOT / "docs/adding.md").read_text()
    match = re.search(rf"<!-- example: {label} -->\n```python\n(.*?)```", page, re.S)
    assert match, f"docs/adding.md has no '{label}' example block"
    return match.group(1)


@pytest.fixture(scope="module")
def example(tmp_path_factory):
    """(the orderer class, the reference function) of the worked example."""
    path = tmp_path_factory.mktemp("example") / "norm_sort.py"
    path.write_text(example_block("orderer"))
    spec = importlib.util.spec_from_file_location("norm_sort_example", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # as an import would (pickle finds the class there)
    spec.loader.exec_module(module)
    namespace = dict(vars(reference_module))  # the reference's helpers (_options, first_orders)
    exec(example_block("reference"), namespace)
    return module.NormSort, namespace["norm_sort"]


@pytest.mark.parametrize("m, n, d, b, options", [(1, 7, 3, 1, {}), (3, 10, 17, 3, {"first_order": "identity"}),
                                                 (2, 9, 4, 9, {"first_worker": 2})])
def test_worked_example_matches_its_reference(example, m, n, d, b, options):
    NormSort, norm_sort = example
    rng = np.random.default_rng([m, n, d])
    grads = [rng.standard_normal((m, n, d)) for _ in range(3)]
    got = drive(NormSort(m, n, d, 5, **options), grads, b)
    want = norm_sort(m, n, d, 5, grads, **options)
    assert len(got) == len(want) == 4
    for epoch, (g, w) in enumerate(zip(got, want)):
        np.testing.assert_array_equal(g, w, err_msg=f"epoch {epoch}")
    assert not np.array_equal(got[1], got[2]), "the orders follow the gradients"


def test_the_out_of_tree_conformance_example_runs(example, tmp_path, monkeypatch):
    """The page's recipe for an orderer by path: the worked example's module and reference pass it,
    and a reference that disagrees fails it."""
    module = tmp_path / "norm_sort.py"
    module.write_text(example_block("orderer"))
    recipe = example_block("conformance").replace("path/to/norm_sort.py", str(module))
    _, norm_sort = example
    monkeypatch.setitem(sys.modules, "my_reference", type(sys)("my_reference"))
    sys.modules["my_reference"].norm_sort = norm_sort
    exec(recipe, {})
    sys.modules["my_reference"].norm_sort = lambda *args: [order[:, ::-1] for order in norm_sort(*args)]
    with pytest.raises(AssertionError):
        exec(recipe, {})


@pytest.mark.parametrize("b", [1, 2])
def test_worked_example_observes_inside_the_serial_epoch_loop(example, b):
    """The kernel, handed chunks of three steps from inside the serial epoch loop, builds the order
    its reference builds from the whole epoch's gradients (identity orders: visit position t is
    example t)."""
    NormSort, norm_sort = example
    A, y, _ = least_squares_data()
    orders = np.tile(np.arange(N_LOCAL), (M, 1))
    problem = make_problem("least-squares", P, lam=0.1)
    orderer = NormSort(M, N_LOCAL, P, 0, first_order="identity")
    orderer.begin_epoch()
    rows = engine.chunk_rows(engine.GRADIENTS, M, N_LOCAL, b, P, 3 * M * b * P)
    done, x, _ = epoch_from_zero(problem.batch_grads, A, y, orders, problem.params, b, 0.05,
                                 grads_out=np.empty((M, rows, P)), orderer=orderer)
    assert done == -(-N_LOCAL // b) and orderer.observed == N_LOCAL
    orderer.end_epoch()
    grads = np.empty((M, N_LOCAL, P))
    _, x_whole, _ = epoch_from_zero(problem.batch_grads, A, y, orders, problem.params, b, 0.05, grads_out=grads)
    np.testing.assert_array_equal(x, x_whole)
    np.testing.assert_array_equal(orderer.order, norm_sort(M, N_LOCAL, P, 0, [grads], first_order="identity")[1])


def test_worked_example_resumes_from_a_checkpoint_and_a_pickle(example, tmp_path):
    NormSort, _ = example
    m, n, d = 2, 8, 5
    rng = np.random.default_rng(1)
    grads = [rng.standard_normal((m, n, d)) for _ in range(4)]
    first = NormSort(m, n, d, 3)
    drive(first, grads[:2], 3)
    path = str(tmp_path / "o.ckpt")
    checkpoint.save(path, {"run_states": [{"orderer": first.checkpoint_state()}]})
    saved = checkpoint.load(path)["run_states"][0]["orderer"]
    restored = NormSort(m, n, d, 3)
    want = checkpoint.normalized(restored.checkpoint_state())
    assert checkpoint.layout_mismatch(saved, want) is None
    restored.restore_state(saved)
    visited = np.take_along_axis(grads[2], first.begin_epoch()[:, :, None], axis=1)
    first.observe(np.ascontiguousarray(visited[:, :3]))
    pickled = pickle.loads(pickle.dumps(first))  # mid-epoch
    for o in (first, pickled):
        o.observe(np.ascontiguousarray(visited[:, 3:]))
        o.end_epoch()
    np.testing.assert_array_equal(pickled.order, first.order)
    np.testing.assert_array_equal(drive(restored, grads[2:3], 2)[1], first.order)


def test_a_checkpoint_of_another_state_layout_is_refused(example):
    """The state's digest names its fields, dtypes and shapes: another layout (here one with a
    field more) is refused, even when the buffers happen to be of one size."""
    from ordersim.orderers._state import StateLayout, f64

    NormSort, _ = example

    class Wider(NormSort):
        state_layout = StateLayout(squared_norms=f64["m", "n"], spare=f64[()])

    saved = checkpoint.normalized(Wider(2, 8, 5, 3).checkpoint_state())
    expected = checkpoint.normalized(NormSort(2, 8, 5, 3).checkpoint_state())
    saved["state"] = expected["state"]  # the same size: only the digest differs
    assert re.fullmatch(r"its state_layout is '[0-9a-f]{16}', this ordersim's '[0-9a-f]{16}' \(the "
                        r"orderer's state has other fields\)", checkpoint.layout_mismatch(saved, expected))


# -- the other plug-in kinds: a problem, a data source, a straggler model, a coding scheme --------------
PLUG_INS = {"problem": "squared_hinge.py", "data source": "checkerboard.py",
            "straggler model": "slow_worker.py", "coding scheme": "drop_stragglers.py",
            "measurement": "model_norms.py"}


@pytest.fixture(scope="module")
def plug_in_files(tmp_path_factory):
    """The page's four blocks as the files its text names, in one directory."""
    folder = tmp_path_factory.mktemp("plug_ins")
    paths = {}
    for label, name in PLUG_INS.items():
        paths[label] = folder / name
        paths[label].write_text(example_block(label))
    return {label: str(path) for label, path in paths.items()}


def test_problem_example_by_path(plug_in_files):
    from ordersim.problems import PROBLEMS, make_problem as make

    problem = make(plug_in_files["problem"], 3, 2, lam=0.1)
    assert problem.name == "squared-hinge" and PROBLEMS.get_class("squared-hinge") is type(problem)
    assert "squared-hinge" not in PROBLEMS  # found by its name from now on, but not listed
    rng = np.random.default_rng(3)
    A, y, x = rng.normal(size=(9, 3)), rng.choice([-1.0, 1.0], 9), rng.normal(size=3)
    idx = np.arange(9, dtype=np.int64)
    slack = np.maximum(0.0, 1.0 - y * (A @ x))
    out = np.empty((9, 3))
    total = problem.batch_grads(x, A, y, idx, problem.params, out)
    assert total == pytest.approx(np.sum(0.5 * slack**2 + 0.05 * x @ x), rel=1e-12)
    np.testing.assert_allclose(out, -(slack * y)[:, None] * A + 0.1 * x, rtol=1e-12)
    g = np.empty(3)
    assert problem.full_grad(x, A, y, idx, problem.params, g) == pytest.approx(total / 9, rel=1e-12)
    np.testing.assert_allclose(g, out.mean(axis=0), rtol=1e-12)
    assert problem.accuracy(x, A, y, idx, problem.params) == np.mean(y * (A @ x) > 0)
    v = rng.normal(size=3)
    step = 1e-6 * v  # the Hessian along v from the gradients, away from a kink
    grads = [np.empty(3), np.empty(3)]
    for z, buffer in zip((x - step, x + step), grads):
        problem.full_grad(z, A, y, idx, problem.params, buffer)
    np.testing.assert_allclose(problem.hessp(x, v, A, y), (grads[1] - grads[0]) / 2e-6, rtol=1e-5, atol=1e-8)


def test_data_source_example_by_path(plug_in_files):
    from ordersim.data import load_dataset, streamed_source

    spec = f"{plug_in_files['data source']}:300?cells=3"
    data = load_dataset(spec, standardize=False, intercept=False, seed=4)
    assert data.X.shape == (300, 2) and data.info["kind"] == plug_in_files["data source"]
    cell_parity = np.floor(data.X * 3).astype(int).sum(axis=1) % 2
    np.testing.assert_array_equal(data.y, np.where(cell_parity == 0, 1.0, -1.0))
    assert data.classes == 2 and not streamed_source(spec)
    np.testing.assert_array_equal(load_dataset(spec, seed=4).y, load_dataset(spec, seed=4).y)
    assert not np.array_equal(load_dataset(spec, seed=5).y, data.y)
    with pytest.raises(ValueError, match=r"unknown option\(s\) size; allowed: cells"):
        load_dataset(f"{plug_in_files['data source']}:300?size=3")


def test_straggler_model_example_by_path(plug_in_files):
    from ordersim.stragglers import make_straggler_model

    path = plug_in_files["straggler model"]
    times = make_straggler_model(path, 4, seed=2, slow=1, factor=3.0).times_block(0, 600, load=2)
    scale = 2 * np.array([1.0, 3.0, 1.0, 1.0])
    assert np.all((times >= 0.9 * scale) & (times <= 1.1 * scale))
    assert times.std(axis=0).min() > 0  # jittered
    wider = make_straggler_model(path, 6, seed=2, slow=1, factor=3.0).times_block(0, 600, load=2)
    np.testing.assert_array_equal(wider[:, :4], times)  # per-worker streams: any number of workers
    with pytest.raises(ValueError, match=r"slow must be a worker id in 0\.\.3, got 4"):
        make_straggler_model(path, 4, slow=4)


def test_coding_scheme_example_by_path(plug_in_files):
    from ordersim.coding import make_scheme as make

    scheme = make(plug_in_files["coding scheme"], 5, 2)
    arrival = np.array([0.4, 0.1, 0.9, 0.3, 0.7])
    weights, time, responded = scheme.step_weights(arrival)
    np.testing.assert_array_equal(weights[:, 0], [1, 1, 0, 1, 0])  # the first n - s, unscaled
    assert time == 0.4 and responded.tolist() == [True, True, False, True, False]
    np.testing.assert_array_equal(scheme.step_times(np.stack([arrival, [1.0, 0.2, 0.5, 0.8, 0.3]])), [0.4, 0.5])
    assert not scheme.exact


def test_a_straggler_model_by_path_is_checked_as_a_config_field(plug_in_files):
    from ordersim.config import ConfigError, build_config, check_fields

    values = dict(stragglers=plug_in_files["straggler model"], workers=4, orderers=["rr"])
    assert check_fields(build_config(values), 1).stragglers == plug_in_files["straggler model"]
    with pytest.raises(ConfigError, match=r"^config field 'straggler_options': slow-worker: slow must be a "
                                          r"worker id in 0\.\.3, got 7$"):
        check_fields(build_config(dict(values, straggler_options={"slow": 7})), 1)


# A small run of the default problem and data (their kernels are compiled by the other tests).
MEASURED_RUN = ["--orderers", "rr", "--seeds", "0", "--epochs", "2", "--workers", "4", "--quiet"]


def test_measurement_example_by_path(plug_in_files, tmp_path):
    """The page's measurement, by path: its two datasets are in the trace, one number per measured
    epoch, with the values its text states (x_norm against the trace's own x* and dist_to_opt,
    worker_grad_max against grad_norm), and in analysis.load's frame; every other dataset is the
    one a run without it writes, bit for bit."""
    import h5py

    from ordersim.analysis.load import load_runs
    from ordersim.runner import main

    plain, measured = tmp_path / "plain.h5", tmp_path / "measured.h5"
    assert main([*MEASURED_RUN, "--out", str(plain)]) == 0
    assert main([*MEASURED_RUN, "--measurements", plug_in_files["measurement"], "--out", str(measured)]) == 0
    with h5py.File(plain, "r") as f:
        without = {name: data[()] for name, data in f["runs/rr/seed_0"].items() if name not in TIMING}
    with h5py.File(measured, "r") as f:
        run, x_star = f["runs/rr/seed_0"], f["x_star"][()]
        assert set(run) - set(without) - TIMING == {"x_norm", "worker_grad_max"}
        for name, values in without.items():
            assert run[name][()].tobytes() == values.tobytes(), name
        x_norm, grad_max = run["x_norm"][()], run["worker_grad_max"][()]
    assert x_norm.dtype == grad_max.dtype == np.float64 and x_norm.shape == grad_max.shape == (3,)
    assert x_norm[0] == 0 and np.all(x_norm[1:] > 0)  # the problem starts at x = 0
    # | ||x|| - ||x*|| | <= ||x - x*||, with equality at x = 0
    assert abs(x_norm[0] - np.linalg.norm(x_star)) == pytest.approx(without["dist_to_opt"][0], rel=1e-12)
    assert np.all(np.abs(x_norm - np.linalg.norm(x_star)) <= without["dist_to_opt"] * (1 + 1e-12))
    # the mean of the four workers' gradients is no longer than the longest of them
    assert np.all(grad_max >= without["grad_norm"] * (1 - 1e-12)) and np.all(grad_max > without["grad_norm"])
    frame = load_runs(measured)
    np.testing.assert_array_equal(frame["x_norm"], x_norm)
    np.testing.assert_array_equal(frame["worker_grad_max"], grad_max)
    assert frame.attrs["notes"] == []


BAD_MEASUREMENTS = {
    "wrong_shape.py": (
        "values = {'x_norm': np.ones(2)}",
        r"measurement 'bad' returned ndarray of shape \(2,\) for 'x_norm'; allowed: one number per "
        r"measured epoch \(or None\)"),
    "undeclared.py": ("values = {'x_norm': 1.0, 'other': 2.0}",
                      r"measurement 'bad' returned the dataset 'other', which it does not declare; allowed: x_norm"),
    "clash.py": ("values = {}", r"'{path}' declares the dataset 'train_loss', which "
                                r"ordersim\.simulate\.Run\.measure writes; allowed: a name no other"),
    "fails_to_import.py": ("raise ImportError('no such helper')",
                           r"measurement file '{path}' failed to import: ImportError: no such helper"),
    "nope": ("", r"'nope' is not allowed; allowed: dist-to-opt, held-out, suboptimality,.* or a path to a "
                 r"\.py file"),
}
BAD_SOURCE = """import numpy as np
from ordersim.measurements.base import Measurement
from ordersim.trace_schema import Dataset


class Bad(Measurement):
    name = "bad"
    datasets = (Dataset("{dataset}", "float64", "(T,)", "", ""),)

    def measure(self, view):
        {body}
        return values
"""


def bad_measurement(tmp_path, name: str) -> tuple[str, str]:
    """(the --measurements value, the error's pattern) of BAD_MEASUREMENTS[name]."""
    body, pattern = BAD_MEASUREMENTS[name]
    if not name.endswith(".py"):
        return name, pattern
    path = tmp_path / name
    if name == "fails_to_import.py":
        path.write_text(body)
    else:
        path.write_text(BAD_SOURCE.format(dataset="train_loss" if name == "clash.py" else "x_norm", body=body))
    return str(path), pattern.replace("{path}", re.escape(str(path)))


@pytest.mark.parametrize("name", list(BAD_MEASUREMENTS))
def test_a_bad_measurement_is_one_line_and_exit_2_before_the_trace(tmp_path, capsys, name):
    """An unknown name, a file that fails to import, a dataset that another per-epoch value has,
    and values that do not fit the declaration (found when the first run warms up): one line,
    exit 2, and no trace written."""
    from ordersim.runner import main

    value, pattern = bad_measurement(tmp_path, name)
    out = tmp_path / "bad.h5"
    capsys.readouterr()
    assert main([*MEASURED_RUN, "--measurements", value, "--out", str(out)]) == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("ordersim: error")]
    assert len(errors) == 1 and re.fullmatch(r"ordersim: error: config field 'measurements': " + pattern + ".*",
                                             errors[0]), errors
    assert not out.exists()


@pytest.mark.mpi
@pytest.mark.parametrize("ranks", [2, 4])
def test_a_measurement_is_the_same_on_any_number_of_ranks(plug_in_files, tmp_path, ranks, serial_reference):
    """The page's measurement (a gather over the workers) under MPI gives the serial trace bit for
    bit; values that do not fit (the wrong shape) end the job with one line and exit 2, on every
    rank (checked on 4 ranks only: the ranks agree on it in one collective whatever their count,
    and each mpiexec start costs CI seconds)."""
    args = [*MEASURED_RUN, "--measurements", plug_in_files["measurement"]]
    path = tmp_path / f"mpi{ranks}.h5"
    result = run_mpi(ranks, ["-m", "ordersim", *args, "--backend", "mpi", "--out", str(path)])
    assert result.returncode == 0, result.stderr
    expected = contents(serial_reference(args))
    assert ("rr", "seed_0", "worker_grad_max") in expected
    assert_bitwise_equal(expected, contents(path))
    if ranks != 4:
        return
    value, _ = bad_measurement(tmp_path, "wrong_shape.py")
    result = run_mpi(ranks, ["-m", "ordersim", *MEASURED_RUN, "--measurements", value, "--backend", "mpi",
                             "--out", str(tmp_path / "bad.h5")], timeout=120)
    assert result.returncode == 2, result.stderr
    assert result.stderr.count("config field 'measurements'") == 1, result.stderr  # by rank 0
    assert not (tmp_path / "bad.h5").exists()


@pytest.mark.mpi
def test_a_measurement_that_differs_between_ranks_is_refused(tmp_path):
    """A value of this rank's workers only (no view.gather_workers): serially it is what it
    should be, under MPI the trace would hold rank 0's. The warm-up compares the ranks' values:
    one line, exit 2, no trace."""
    path = tmp_path / "local.py"
    path.write_text(BAD_SOURCE.format(dataset="x_norm", body="values = {'x_norm': float(view.first)}"))
    out = tmp_path / "local.h5"
    result = run_mpi(2, ["-m", "ordersim", *MEASURED_RUN, "--measurements", str(path), "--backend", "mpi",
                         "--out", str(out)], timeout=120)
    assert result.returncode == 2, result.stderr
    errors = [line for line in result.stderr.splitlines() if "error" in line]
    assert len(errors) == 1 and "returned different values on different ranks" in errors[0], result.stderr
    assert not out.exists()


@pytest.fixture
def installed_plug_in(tmp_path, monkeypatch):
    """The page's entry points, installed as pip installs a package: the orderer and straggler model
    blocks as modules of a package, and a *.dist-info with its entry_points.txt beside it, on the
    path (of this process too; the registries read the entry points afresh)."""
    import tomllib

    from ordersim.measurements import MEASUREMENTS
    from ordersim.orderers import ORDERERS
    from ordersim.stragglers import STRAGGLER_MODELS

    site = tmp_path / "site"
    package = site / "ordersim_example_plugin"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "norm_sort.py").write_text(example_block("orderer"))
    (package / "slow_worker.py").write_text(example_block("straggler model"))
    (package / "model_norms.py").write_text(example_block("measurement"))
    page = (ROOT / "docs/adding.md").read_text()
    toml = re.search(r"<!-- example: entry points -->\n```toml\n(.*?)```", page, re.S).group(1)
    groups = tomllib.loads(toml)["project"]["entry-points"]
    assert set(groups) == {"ordersim.orderers", "ordersim.straggler_models", "ordersim.measurements"}
    info = site / "ordersim_example_plugin-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: ordersim-example-plugin\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("".join(
        f"[{group}]\n" + "".join(f"{name} = {target}\n" for name, target in points.items()) + "\n"
        for group, points in groups.items()))
    registries = (ORDERERS, STRAGGLER_MODELS, MEASUREMENTS)
    monkeypatch.syspath_prepend(str(site))
    for registry in registries:
        monkeypatch.setattr(registry, "_entries", None)  # read again, with the package
    yield site
    for registry in registries:
        registry._entries = None  # monkeypatch restores the built-in ones' cache: drop it too


def test_an_installed_package_adds_an_orderer_a_straggler_model_and_a_measurement(installed_plug_in,
                                                                                  plug_in_files, tmp_path):
    """The listing and --help of a fresh process name the installed classes; a run uses them by
    name, with the page's problem, data source and coding scheme by path: the slow worker (four
    times the others) is never among the first n - s = 3 of 4, and the measurement's datasets
    are in the trace and, as the schema's, in analysis.load's frame."""
    import os
    import subprocess

    import h5py

    from ordersim.runner import main

    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(installed_plug_in), str(ROOT)]))

    def ordersim(*args):
        result = subprocess.run([sys.executable, "-m", "ordersim", *args], capture_output=True, text=True,
                                env=env, cwd=tmp_path, timeout=600)
        assert result.returncode == 0, result.stderr
        return result.stdout

    assert re.search(r"^norm-sort +visit the examples with the largest gradients", ordersim("orderers"), re.M)
    assert re.search(r"^model-norms +.*\[x_norm, worker_grad_max\] \(only where --measurements names it\)$",
                     ordersim("measurements"), re.M)
    help_text = " ".join(ordersim("run", "--help").split())
    assert "slow-worker" in help_text and "measurements by name (model-norms;" in help_text
    out = tmp_path / "plug_ins.h5"
    assert main(["--orderers", "norm-sort", "--stragglers", "slow-worker", "--straggler-options", '{"slow": 2}',
                 "--problem", plug_in_files["problem"], "--data", f"{plug_in_files['data source']}:200?cells=2",
                 "--coding", plug_in_files["coding scheme"], "--coding-s", "1", "--workers", "4",
                 "--measurements", "model-norms",
                 "--seeds", "0", "--epochs", "2", "--no-herding", "--quiet", "--out", str(out)]) == 0
    with h5py.File(out, "r") as f:
        run = f["runs/norm-sort/seed_0"]
        assert run.attrs["straggler_model"] == "slow-worker" and run.attrs["coding"] == "drop-stragglers"
        assert run.attrs["status"] == "completed" and run["test_accuracy"][-1] > 0
        responded = run["stragglers/responded"][()]
        assert responded.shape[1] == 4 and not responded[:, 2].any() and responded[:, [0, 1, 3]].all()
        x_norm = run["x_norm"][()]
    from ordersim import trace_schema
    from ordersim.analysis.load import load_runs, per_epoch_names

    assert {"x_norm", "worker_grad_max"} <= set(per_epoch_names())
    assert trace_schema.switched_on({"measurements": ["model-norms"]}) == {"x_norm", "worker_grad_max"}
    np.testing.assert_array_equal(load_runs(out)["x_norm"], x_norm)


def test_a_wrong_order_found_in_the_warm_up_says_whose_n_it_names(tmp_path, capsys):
    """The warm-up trains on 16 examples of each worker's 40: "must have shape (4, 16)" read as
    a wrong n until the error said where it came from."""
    from ordersim.runner import main

    short = tmp_path / "short.py"
    short.write_text("from ordersim.orderers.base import Orderer\n\n\n"
                     "class Short(Orderer):\n    name = 'short-order'\n    description = 'a deliberate bug'\n\n"
                     "    def _next_order(self):\n        return self.order[:, :-1].copy()\n")
    with pytest.raises(SystemExit) as ended:
        main(["--orderers", str(short), "--data", "synthetic:regression?n=200&d=4", "--problem", "least-squares",
              "--workers", "4", "--epochs", "2", "--quiet", "--out", str(tmp_path / "x.h5")])
    err = capsys.readouterr().err
    assert ended.value.code == 1 and "must have shape (4, 16) (workers, examples), got shape (4, 15)" in err, err
    assert "(in the warm-up: an epoch on the first 16 of every worker's 40 examples, so n = 16 there)" in err, err
