"""The linear models' route to a projecting orderer (docs/algorithms.md, "Random projection
before balancing"): a problem that declares grad f_i = s_i a_i + grad R (batch_grads_slopes,
regularizer_gradient) has its rows projected once per run, and the epoch loop hands the
orderer Pi g_i = s_i (Pi a_i) + Pi grad R(x) (engine.Projection) instead of g_i."""

import json
from pathlib import Path

import h5py
import numpy as np
import pytest

from ordersim import engine
from ordersim.orderers import make_orderer, orderer_class
from ordersim.orderers._projection import project_rows
from ordersim.orderers.base import default_walk_c
from ordersim.problems import available_problems, make_problem
from reference.orderers import REFERENCES, drive, random_projection, required_options
from test_simulator import run_serial
from test_trace_metrics import training_rows

FIXED_SLOPE = str(Path(__file__).parent / "reference" / "fixed_slope_problem.py")
UNIT_ORDERERS = ("d-grab", "cd-grab", "d-grab-pair", "greedy", "recursive-pair", "cd-kh")
LINEAR = [name for name in sorted(available_problems()) if make_problem(name, 3, 2 if name != "least-squares"
                                                                        else 0).linear]


def test_the_linear_built_in_problems_declare_it():
    assert LINEAR == ["least-squares", "logistic", "nonconvex-logistic", "robust-regression"]
    assert not make_problem("softmax", 3, 3).linear and not make_problem("mlp", 3, 3).linear


@pytest.mark.parametrize("name", LINEAR)
def test_a_linear_model_s_gradients_are_its_slopes_times_its_rows(name):
    """batch_grads_slopes gives batch_grads' loss and gradients, and out[r] = s_r a_i + grad R(x)."""
    problem = make_problem(name, 6, 0 if name in ("least-squares", "robust-regression") else 2)
    rng = np.random.default_rng(3)
    A, x = rng.standard_normal((20, 6)), rng.standard_normal(6)
    y = np.sign(rng.standard_normal(20))
    idx = rng.integers(0, 20, 7).astype(np.int64)
    grads, with_slopes, slopes, regularizer = np.empty((7, 6)), np.empty((7, 6)), np.empty(7), np.empty(6)
    loss = problem.batch_grads(x, A, y, idx, problem.params, grads)
    assert problem.batch_grads_slopes(x, A, y, idx, problem.params, with_slopes, slopes) == loss
    np.testing.assert_allclose(with_slopes, grads, rtol=1e-14, atol=1e-300)
    problem.regularizer_gradient(x, problem.params, regularizer)
    np.testing.assert_allclose(grads, slopes[:, None] * A[idx] + regularizer, rtol=1e-12)


@pytest.mark.parametrize("name", LINEAR)
def test_untraced_steps_leave_the_loss_out_of_the_slopes_kernel(name):
    """gradients_kernel of batch_grads_slopes: its gradients and slopes bit for bit, 0.0 for the loss."""
    from numba import config

    problem = make_problem(name, 5, 0 if name in ("least-squares", "robust-regression") else 2)
    rng = np.random.default_rng(8)
    A, x, y = rng.standard_normal((9, 5)), rng.standard_normal(5), np.sign(rng.standard_normal(9))
    idx = np.array([4, 0, 7], dtype=np.int64)
    kernel = engine.gradients_kernel(problem.batch_grads_slopes, engine.slopes_loss_dropped,
                                     engine.SLOPES_KERNEL_ARGS)
    expected, out, expected_slopes, slopes = np.empty((3, 5)), np.empty((3, 5)), np.empty(3), np.empty(3)
    problem.batch_grads_slopes(x, A, y, idx, problem.params, expected, expected_slopes)
    loss = kernel(x, A, y, idx, problem.params, out, slopes)
    assert np.array_equal(out, expected) and np.array_equal(slopes, expected_slopes)
    assert config.DISABLE_JIT or loss == 0.0, "the loss is left out"


@pytest.mark.parametrize("kind", ["gaussian", "sparse"])
def test_the_rows_are_projected_as_the_reference_projects(kind):
    rng = np.random.default_rng(4)
    A = rng.standard_normal((30, 40))
    orderer = make_orderer("cd-grab", 2, 15, 40, seed=5, projection=kind, projection_dim=6, projected_input=True)
    rows = project_rows(A, *orderer.input_projection(), np.empty((30, 6)))
    apply = random_projection(5, kind, 6, 40)
    assert np.array_equal(rows, np.array([apply(a) for a in A]))


@pytest.mark.parametrize("name", UNIT_ORDERERS)
def test_an_orderer_handed_projected_gradients_is_the_orderer_at_k(name):
    """projected_input: the k values it is handed are balanced as they are, with the orderer's
    settings for d (walk_c), k from the projection options."""
    m, n, d, k, group = 2, 12, 50, 5, 2
    vectors = [np.random.default_rng(e).standard_normal((m, n, k)) for e in range(3)]
    handed = make_orderer(name, m, n, d, seed=1, projection="sparse", projection_dim=k, group=group,
                          projected_input=True, **required_options(name))
    assert (handed.dim, handed.gradient_dim) == (k, d)
    plain = make_orderer(name, m, n, k, seed=1, walk_c=default_walk_c(m * n, d), group=group,
                         **required_options(name))
    assert all(np.array_equal(a, b) for a, b in zip(drive(handed, vectors, 4), drive(plain, vectors, 4)))
    with pytest.raises(ValueError, match=r"projected_input must be True or False, and True only with a "
                                         r"projection, got projected_input=True with projection='none'"):
        make_orderer(name, m, n, d, projected_input=True, **required_options(name))


def fixed_slope_args(options, out):
    return ["--problem", FIXED_SLOPE, "--problem-options", "{}", "--data", "synthetic:regression?n=48&d=7", "--test-fraction", "0",
            "--workers", "4", "--batch", "2", "--epochs", "3", "--lr", "0.01", "--seeds", "0",
            "--orderers", *UNIT_ORDERERS, "--orderer-options", json.dumps(options), "--record-orders",
            "--quiet", "--out", str(out)]


@pytest.mark.parametrize("options, env", [({"projection": "sparse", "projection_dim": 4}, {}),
                                          ({"projection": "gaussian", "projection_dim": 3, "group": 2}, {}),
                                          ({"projection": "sparse", "projection_dim": 4}, {"NUMBA_DISABLE_JIT": "1"})],
                         ids=["sparse", "gaussian-grouped", "sparse-no-jit"])
def test_the_simulator_hands_the_orderers_slopes_times_projected_rows(tmp_path, options, env):
    """With slopes that do not depend on x, Pi g_i = y_i (Pi a_i) at every step: every recorded
    order is the reference orderer's at k, handed those vectors, exactly (also in plain Python)."""
    path = tmp_path / "fixed.h5"
    result = run_serial(fixed_slope_args(options, path), env=env)
    assert result.returncode == 0, result.stderr
    with h5py.File(path, "r") as f:
        config = json.loads(f.attrs["config"])
        A, y, _ = training_rows(f.attrs["config"])
        m, n, d = config["workers"], A.shape[0] // config["workers"], A.shape[1]
        k = options["projection_dim"]
        apply = random_projection(0, options["projection"], k, d)
        vectors = (y[:, None] * np.array([apply(a) for a in A])).reshape(m, n, k)
        for name in UNIT_ORDERERS:
            recorded = f[f"runs/{name}/seed_0/orders"][()].astype(np.int64)
            run_epochs = {"epochs": 3} if "epochs" in orderer_class(name).extra_options else {}
            expected = REFERENCES[name](m, n, k, 0, [vectors] * (len(recorded) - 1), group=options.get("group", 1),
                                        walk_c=default_walk_c(m * n, d), **run_epochs)
            for epoch, (got, want) in enumerate(zip(recorded, expected)):
                assert np.array_equal(got, want), f"{name}, epoch {epoch + 1}"


def test_a_linear_problem_s_run_projects_its_rows_once_and_a_nonlinear_one_does_not():
    from ordersim.backend import SerialBackend
    from ordersim.config import build_config
    from ordersim.simulate import Run, check_fields, prepare

    for problem, linear in (("logistic", True), ("softmax", False)):
        config = check_fields(build_config({"problem": problem, "workers": 2, "orderers": ["cd-grab"],
                                            "orderer_options": {"projection": "sparse", "projection_dim": 3},
                                            "data": "synthetic:classification?n=40&d=5&classes=3"
                                            if problem == "softmax" else "synthetic:classification?n=40&d=5"}), 1)
        setup = prepare(config, SerialBackend(2))
        run = Run(setup, "cd-grab", 0)
        assert run.orderer.projected_input is linear and run.orderer.balanced_dim == 3
        assert (run.projected_rows is not None) is linear
        if linear:
            assert run.projected_rows.shape == (setup.A.shape[0], 3)
            assert run.orderer.dim == 3 and run.orderer.gradient_dim == setup.problem.dim


def test_a_projected_step_forms_slopes_times_rows_plus_the_projected_regularizer():
    rng = np.random.default_rng(6)
    rows, slopes, regularizer = rng.standard_normal((9, 4)), rng.standard_normal(3), rng.standard_normal(4)
    idx = np.array([7, 0, 7], dtype=np.int64)
    vectors = np.empty((3, 4))
    engine.projected_gradients(vectors, rows, idx, slopes, regularizer, 3)
    assert np.array_equal(vectors, slopes[:, None] * rows[idx] + regularizer)


@pytest.mark.parametrize("projection", ["sparse", "gaussian"])
def test_the_projected_route_takes_the_orders_of_pi_applied_to_each_gradient(projection):
    """With a regularizer that moves the gradients (logistic, lam = 1), the orders of the route
    (s_i P_i + Pi grad R(x), formed in the loop) are those of Pi applied to each full gradient by
    the orderer: the same vectors up to rounding, which flips no sign here. The regularizer's
    part, Pi grad R at every step's model, is what a pair difference or a stale mean does not
    cancel."""
    from ordersim.backend import SerialBackend
    from ordersim.config import build_config
    from ordersim.simulate import Run, check_fields, learning_rate, prepare

    config = check_fields(build_config({
        "problem_options": {"lam": 1.0}, "data": "synthetic:classification?n=96&d=9", "test_fraction": 0.0,
        "workers": 2, "batch": 2, "orderers": ["d-grab", "cd-grab"],
        "orderer_options": {"projection": projection, "projection_dim": 3}}), 1)
    setup = prepare(config, SerialBackend(2))
    lr = learning_rate(config, 0, setup)
    orders = {}
    for route in ("rows", "gradients"):
        if route == "gradients":  # the same problem, its gradients projected one by one by the orderer
            setup.problem.batch_grads_slopes = None
        for name in config.orderers:
            run = Run(setup, name, 0)
            assert run.orderer.projected_input is (route == "rows")
            epochs = []
            for epoch in range(1, 5):
                assert run.train_epoch(epoch, lr)
                epochs.append(run.orderer.order.copy())
            orders[route, name] = epochs
    for name in config.orderers:
        for epoch, (rows, gradients) in enumerate(zip(orders["rows", name], orders["gradients", name])):
            assert np.array_equal(rows, gradients), f"{name}, epoch {epoch + 1}"
