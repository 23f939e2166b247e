"""docs/adding.md's worked example runs: the orderer module and its reference, as the page gives
them, agree; the orderer works inside the serial backend's jitted epoch loop and through a
checkpoint file and a pickle; and a checkpoint of another state layout is refused."""

import importlib.util
import pickle
import re
import sys
from pathlib import Path

import numpy as np
import pytest

import reference.orderers as reference_module
from ordersim import checkpoint, engine
from problems import make_problem
from reference.orderers import drive
from test_engine import M, N_LOCAL, P, epoch_from_zero, least_squares_data

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


@pytest.mark.parametrize("b", [1, 2])
def test_worked_example_observes_inside_the_serial_epoch_loop(example, b):
    """The kernel, handed chunks of three steps from inside engine.serial_epoch, builds the order
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
