"""The per-epoch metrics of a real trace against an independent recomputation.

A small convex run with --record-orders is replayed in plain NumPy (tests/reference/metrics.py):
plain SGD along the recorded orders gives the model x_t of every measured epoch (checked against
the trace's train_loss and dist_to_opt), and at x_t the definitions of docs/algorithms.md
("Metrics") give herding_inf, herding_2 and avg_grad_error of the order epoch t+1 visits
(orders[t]) and, at x*, shuffle_variance with its bounds at gamma = alpha_{t+1} / (m b). The
inv-epoch schedule makes every epoch's step differ, so a gamma of the wrong epoch shows.
"""

import json

import h5py
import numpy as np
import pytest

from reference.metrics import PER_EXAMPLE, measured_epoch, replay_sgd, step_size
from test_simulator import run_serial

RTOL = 1e-10
METRICS = ("train_loss", "dist_to_opt", "herding_inf", "herding_2", "avg_grad_error", "shuffle_variance",
           "shuffle_variance_upper", "shuffle_variance_lower")
ORDERERS = ("rr", "d-grab")


def trace_args(problem, workers, out):
    """3 epochs of 40 examples (4 features), b = 3 (a short last step), the inv-epoch schedule."""
    kind = "regression" if problem == "least-squares" else "classification"
    return ["--problem", problem, "--problem-options", '{"lam": 0.05}', "--data",
            f"synthetic:{kind}?n=40&d=4", "--test-fraction", "0", "--workers", str(workers), "--batch", "3",
            "--epochs", "3", "--schedule", "inv-epoch", "--lr", "0.2", "--lr-decay", "1", "--seeds", "0",
            "--orderers", *ORDERERS, "--record-orders", "--shuffle-variance", "--quiet", "--out", str(out)]


def training_rows(config_json):
    """(A, y) the simulator trained on, worker-major, and its shards, from the trace's config."""
    from ordersim.backend import SerialBackend
    from ordersim.config import build_config
    from ordersim.simulate import check_fields, prepare

    config = check_fields(build_config(json.loads(config_json)), 1)
    setup = prepare(config, SerialBackend(config.workers))
    return setup.A, setup.y, setup.shards


@pytest.fixture(scope="module", params=[("logistic", 1), ("least-squares", 4)], ids=lambda p: f"{p[0]}-m{p[1]}")
def trace(request, tmp_path_factory):
    problem, workers = request.param
    path = tmp_path_factory.mktemp("trace_metrics") / "trace.h5"
    result = run_serial(trace_args(problem, workers, path))
    assert result.returncode == 0, result.stderr
    return problem, path


def expected_records(problem, f, run):
    """Every measured epoch's metrics recomputed from the run's recorded orders."""
    config = json.loads(f.attrs["config"])
    A, y, shards = training_rows(f.attrs["config"])
    assert np.array_equal(shards, f["shards"][()])
    lam, b, m = config["problem_options"]["lam"], config["batch"], config["workers"]
    orders = run["orders"][()].astype(np.int64)  # orders[t]: the order of epoch t + 1
    steps = [step_size(config["schedule"], config["lr"], config["lr_decay"], t) for t in range(len(orders))]
    models = replay_sgd(PER_EXAMPLE[problem][1], A, y, lam, orders[:-1], steps, b)
    return [measured_epoch(problem, A, y, lam, x, f["x_star"][()], orders[t], b, steps[t] / (m * b),
                           run.attrs["L"], run.attrs["mu"]) for t, x in enumerate(models)]


@pytest.mark.parametrize("orderer", ORDERERS)
def test_traced_metrics_are_their_definitions(trace, orderer):
    problem, path = trace
    with h5py.File(path, "r") as f:
        run = f[f"runs/{orderer}/seed_0"]
        assert list(run["epoch"][()]) == [0, 1, 2, 3]
        expected = expected_records(problem, f, run)
        for name in METRICS:
            np.testing.assert_allclose(run[name][()], [record[name] for record in expected], rtol=RTOL,
                                       err_msg=f"{orderer} {name}")
