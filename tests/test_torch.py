"""ordersim.torch: the samplers' orders, fed real per-example gradients of a small torch model (a
dict of four parameters, float32 and float64; from torch.func in this process, from
torch.autograd in the ranks, which thereby skip torch.func's seconds of imports), are the NumPy
reference's and the simulator's orderers' for the same gradients, in one process and across 2
and 4 torch.distributed processes (gloo on CPU, started here as real processes)."""

import os
import re
import subprocess
import sys
import time

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the torch extra is not installed: pip install torch==2.13.0 "
                                            "(a CPU build), then pytest tests/test_torch.py")

torch.set_num_threads(1)  # the tensors are tiny: more threads only wait for each other

import reference.orderers as reference  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402
from conftest import ROOT  # noqa: E402
from ordersim.orderers import make_orderer  # noqa: E402
from ordersim.torch import DistributedOrderedSampler, OrderedSampler, flatten_per_example  # noqa: E402
from reference.orderers import drive  # noqa: E402
from torch_ranks import (BATCH, DISTRIBUTED_CASES, EPOCHS, EXAMPLES_PER_WORKER, PROCESS_GROUP_TIMEOUT,  # noqa: E402
                         SEED, save_digits, train)


def reference_orders(name, m, n, d, grads, options):
    """The NumPy reference's orders, and the orders of ordersim's own orderer driven as the
    simulator's serial backend drives it, for grads (E, m, n, d) by local example."""
    ref = getattr(reference, name.replace("-", "_"))(m, n, d, SEED, list(grads), **options)
    kernel = drive(make_orderer(name, m, n, d, SEED, **options), list(grads), BATCH)
    return np.stack(ref), np.stack(kernel)


@pytest.mark.parametrize("name, dtype, options", [
    ("rr", "float32", {}),
    ("grab", "float32", {}),
    ("grab", "float64", {"sign": "walk"}),
    ("cd-grab", "float32", {"sign": "walk"}),
    ("cd-grab", "float64", {"tie": "minus"}),
])
def test_one_process_orders_are_the_references(name, dtype, options, tmp_path):
    n = 13  # odd, and 13 mod 4 = 1: a last batch of one example
    save_digits(tmp_path / "digits.npz", n)
    orders, grads, _ = train(OrderedSampler, name, dtype, options, tmp_path / "digits.npz")
    d = grads.shape[-1]
    want, kernel = reference_orders(name, 1, n, d, grads[:, None], options)
    assert orders.shape == (EPOCHS + 1, n)
    np.testing.assert_array_equal(orders, want[:, 0])
    np.testing.assert_array_equal(orders, kernel[:, 0])
    if name != "rr":
        assert len({tuple(o) for o in orders[1:]}) > 1, "the orders follow the gradients"


def test_orderer_options_give_the_simulators_orderer(tmp_path):
    """orderer_options (a projection to k = 3 and groups of 2 examples; n = 13 leaves one example
    out of the groups) build the orderer as the simulator's run_orderer builds it from the same
    config table: the same orders for the same gradients, and not those without the options."""
    from ordersim.backend import SerialBackend
    from ordersim.config import Config
    from ordersim.simulate import run_orderer

    n, table = 13, {"projection": "gaussian", "projection_dim": 3, "group": 2}
    save_digits(tmp_path / "digits.npz", n)
    orders, grads, sampler = train(OrderedSampler, "grab", "float64", {"orderer_options": table},
                                   tmp_path / "digits.npz")
    config = Config(workers=1, batch=BATCH, epochs=EPOCHS, orderer_options=table)
    simulators, _ = run_orderer(config, SerialBackend(1), "grab", n, grads.shape[-1], SEED)
    assert (sampler.orderer.projection, sampler.orderer.projection_dim, sampler.orderer.group) == ("gaussian", 3, 2)
    np.testing.assert_array_equal(orders, np.stack(drive(simulators, list(grads[:, None]), BATCH))[:, 0])
    plain, _, _ = train(OrderedSampler, "grab", "float64", {}, tmp_path / "digits.npz")
    assert not np.array_equal(orders, plain), "the options change the orders"


def test_a_nested_pytree_flattens_in_its_order_to_exact_float64():
    rng = torch.Generator().manual_seed(1)
    w, b, v = (torch.randn(3, *shape, generator=rng) for shape in ((2, 2), (1,), (3,)))
    flat = flatten_per_example({"layer": (w, b), "head": [v.double()]}, 8)
    assert flat.dtype == np.float64 and flat.flags.c_contiguous and flat.shape == (3, 8)
    want = np.concatenate([w.reshape(3, 4).numpy(), b.numpy(), v.numpy()], axis=1).astype(np.float64)
    np.testing.assert_array_equal(flat, want)


def test_rr_needs_no_observe_and_a_state_dict_continues_the_orders():
    sampler = OrderedSampler(10, "rr", seed=SEED)
    orders = [list(sampler) for _ in range(3)]  # every iteration is the next epoch
    np.testing.assert_array_equal(orders, np.stack(reference.rr(1, 10, 1, SEED, [None] * 2))[:, 0])
    params = {"w": torch.zeros(2, 3), "b": torch.zeros(2)}
    grads = {"w": torch.randn(10, 2, 3, generator=torch.Generator().manual_seed(0)), "b": torch.ones(10, 2)}
    first = OrderedSampler(10, "cd-grab", params=params, seed=SEED)
    for _ in range(2):
        iter(first)
        first.observe(grads)
    again = OrderedSampler(10, "cd-grab", params=params, seed=SEED)
    again.load_state_dict(first.state_dict())
    for sampler in (first, again):
        sampler.set_epoch(2)
        iter(sampler)
        sampler.observe(grads)
        sampler.set_epoch(3)
    np.testing.assert_array_equal(again.order, first.order)


def test_mistakes_are_named():
    params = {"w": torch.zeros(4, 3), "b": torch.zeros(4)}  # 16 values per example
    with pytest.raises(ValueError, match=r"OrderedSampler: cd-grab reads the gradients: pass params="):
        OrderedSampler(8, "cd-grab")
    with pytest.raises(ValueError, match=r"unknown option\(s\) bogus"):
        OrderedSampler(8, "grab", params=params, bogus=1)
    sampler = OrderedSampler(8, "grab", params=params)
    with pytest.raises(ValueError, match=r"set_epoch\(2\): the next epoch is 0"):
        sampler.set_epoch(2)
    iter(sampler)
    with pytest.raises(ValueError, match=r"hold 12 values per example; the sampler was made for params of 16"):
        sampler.observe({"w": torch.zeros(3, 4, 3)})
    with pytest.raises(ValueError, match=r"different numbers of examples \[2, 3\]"):
        sampler.observe({"w": torch.zeros(3, 4, 3), "b": torch.zeros(2, 4)})
    # a loader that drops the short last batch leaves examples unobserved
    sampler = OrderedSampler(8, "grab", params=params)
    loader = DataLoader(TensorDataset(torch.zeros(8)), batch_size=3, sampler=sampler, drop_last=True)
    for (x,) in loader:
        sampler.observe({"w": torch.zeros(len(x), 4, 3), "b": torch.zeros(len(x), 4)})
    with pytest.raises(ValueError, match=r"epoch 0 ended after observe\(\) saw 6 of its 8 examples"):
        sampler.set_epoch(1)
    with pytest.raises(ValueError, match=r"OrderedSampler: pass group, projection in orderer_options=\{\.\.\.\}"):
        OrderedSampler(8, "grab", params=params, projection="gaussian", group=2)
    with pytest.raises(ValueError, match=r"OrderedSampler: orderer_options \(group\) are options of the balancing "
                                         r"orderers; rr takes none of them"):
        OrderedSampler(8, "rr", orderer_options={"group": 2})
    with pytest.raises(ValueError, match=r"OrderedSampler: orderer_options: group must be an integer >= 1, got 0"):
        OrderedSampler(8, "grab", params=params, orderer_options={"group": 0})
    with pytest.raises(ValueError, match=r"torch.distributed is not initialized"):
        DistributedOrderedSampler(8, "cd-grab", params=params)


def launch(world, tmp_path):
    """Run tests/torch_ranks.py as `world` processes, which write their files to tmp_path; returns
    {case: (orders (m, E+1, n), grads (E, m, n, d), every rank's walk c)}."""
    save_digits(tmp_path / "digits.npz", EXAMPLES_PER_WORKER * world + 1)  # one left out
    env = dict(os.environ, OMP_NUM_THREADS="1", NUMBA_NUM_THREADS="1")
    ranks = [subprocess.Popen([sys.executable, str(ROOT / "tests/torch_ranks.py"), str(rank), str(world),
                               str(tmp_path / "init"), str(tmp_path)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)
             for rank in range(world)]
    deadline, failures = time.monotonic() + 240, []
    for rank, process in enumerate(ranks):
        try:
            _, err = process.communicate(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            for other in ranks:
                other.kill()
            pytest.fail(f"rank {rank} of {world} did not end within 240 s")
        if process.returncode:
            failures.append(f"rank {rank} exited {process.returncode}:\n{err}")
    assert not failures, "\n".join(failures)
    results = {}
    for case in range(len(DISTRIBUTED_CASES)):
        files = [np.load(tmp_path / f"case{case}_rank{rank}.npz") for rank in range(world)]
        results[case] = (np.stack([f["orders"] for f in files]), np.stack([f["grads"] for f in files], axis=1),
                         [float(f["walk_c"]) for f in files])
    return results


@pytest.fixture(scope="module", params=[2, 4], ids=lambda world: f"{world}-processes")
def distributed(request, tmp_path_factory):
    for name in ("cd-grab", "d-grab"):  # their kernels compile here (cached on disk), not in every rank
        orderer = make_orderer(name, 1, 2, 1)
        orderer.begin_epoch()
        orderer.observe(np.zeros((1, 2, 1)))
    folder = tmp_path_factory.mktemp(f"torch{request.param}")
    return request.param, launch(request.param, folder), folder


@pytest.mark.parametrize("case", range(len(DISTRIBUTED_CASES)),
                         ids=[f"{name}-{dtype}" for name, dtype, _ in DISTRIBUTED_CASES])
def test_distributed_orders_are_the_references(distributed, case):
    world, results, _ = distributed
    name, dtype, options = DISTRIBUTED_CASES[case]
    orders, grads, walk_c = results[case]
    n = EXAMPLES_PER_WORKER
    d = grads.shape[-1]
    assert orders.shape == (world, EPOCHS + 1, n)
    # rank r yields its shard r n .. (r + 1) n - 1, in its row's order; the last example is left out
    local = orders - (np.arange(world) * n)[:, None, None]
    want, kernel = reference_orders(name, world, n, d, grads, options)
    np.testing.assert_array_equal(local, want.transpose(1, 0, 2))
    np.testing.assert_array_equal(local, kernel.transpose(1, 0, 2))
    assert len({tuple(o) for o in local[0, 1:]}) > 1, "the orders follow the gradients"
    # the walk's c from all m n examples (the walk's decisions here hardly depend on c)
    assert walk_c == [reference.default_walk_c(world * n, d)] * world


def test_distributed_mistakes_raise_on_every_rank(distributed):
    world, _, folder = distributed
    for rank in range(world):
        assert (folder / f"centralized_rank{rank}.txt").read_text() == (
            f"DistributedOrderedSampler: grab is the centralized algorithm (one worker); with {world} workers "
            f"use d-grab or cd-grab")
    messages = [(folder / f"disagreement_rank{rank}.txt").read_text() for rank in range(world)]
    assert messages == [messages[0]] * world
    assert messages[0] == (f"DistributedOrderedSampler.observe(): the ranks disagree on seed (by rank: "
                           f"{list(range(world))}); every rank must observe the same step of the same run")
    # one rank's gradients of the wrong shape: every rank raised that rank's error, well before the
    # process group's timeout would have ended a rank waiting in the all-gather
    reports = [(folder / f"wrong_shape_rank{rank}.txt").read_text().split("\n", 1) for rank in range(world)]
    assert [message for _, message in reports] == [
        f"DistributedOrderedSampler.observe(): rank {world - 1}'s gradients: the per-example gradients hold 4 "
        f"values per example; the sampler was made for params of 3 (pass the same parameters' gradients)"] * world
    assert all(float(seconds) < PROCESS_GROUP_TIMEOUT / 2 for seconds, _ in reports), reports


def test_the_readme_example_is_the_files_and_runs():
    """README's training function is examples/torch_mnist.py's, and the example runs (a small size):
    both orderers start from the same first order, and training lowers the loss."""
    readme = (ROOT / "README.md").read_text()
    block = re.search(r"<!-- example: examples/torch_mnist.py -->\n```python\n(.*?)```", readme, re.S)
    assert block, "README has no examples/torch_mnist.py block"
    assert block.group(1) in (ROOT / "examples/torch_mnist.py").read_text()
    result = subprocess.run([sys.executable, "examples/torch_mnist.py", "--examples", "200", "--epochs", "3",
                             "--seeds", "1"], capture_output=True, text=True, timeout=300, cwd=ROOT,
                            env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[:2] == ["1 worker(s), 160 training digits, 1 seed(s): training loss",
                         "epoch         rr   cd-grab"]
    losses = np.array([[float(v) for v in line.split()[1:]] for line in lines[2:5]])
    assert losses[0, 0] == losses[0, 1], "the first epoch's order is the seed's for both"
    assert (losses[2] < losses[0]).all()
    assert lines[5].startswith("test accuracy rr ")


def test_cd_grab_is_below_rr_at_every_epoch_in_the_4_worker_example():
    """README: in `torchrun --standalone --nproc-per-node 4 examples/torch_mnist.py` (the mean of the
    training loss over seeds 0-2) "from then on [after the first epoch, the same order for both]
    cd-grab's loss is below rr's at every epoch". Run here at a small size: the same command on the
    first 600 digits (480 for training, 120 per worker), 5 epochs, the example's 3 seeds (about 17 s).
    Measured (the printed means): rr 2.2442 2.1662 2.0858 1.9980 1.9002, cd-grab 2.2442 2.1659 2.0853
    1.9972 1.8995, i.e. cd-grab 0.013-0.04 % lower from epoch 2 on (on seeds 3-5, with
    examples/torch_mnist.py's train(): 0.04-0.08 % lower). The gain is smaller than the spread between
    seeds: per seed it does not hold (seed 2: cd-grab above rr at every epoch here; at the documented
    size, 1437 digits, 3 of 6 seeds have cd-grab above rr at one of epochs 2-4, none from epoch 5 on).
    Checked: epoch 1 equal, then cd-grab's printed mean strictly below rr's at every epoch; and every
    rank exits 0. Ranks aborted in gloo's teardown ("terminate called without an active exception"):
    without the barrier before destroy_process_group in 5 of 7 runs; with it, still in one CI run
    and 3 of 30 runs at 200 digits, 1 epoch, 1 seed: a gloo thread that outlived
    destroy_process_group released tensors during Python's shutdown. The example now skips that
    shutdown: 0 of 40 runs aborted."""
    epochs = 5
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "4",
               "examples/torch_mnist.py", "--examples", "600", "--epochs", str(epochs)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=ROOT,
                            env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == epochs + 3 and lines[-1].startswith("test accuracy rr "), result.stdout
    assert lines[:2] == ["4 worker(s), 480 training digits, 3 seed(s): training loss", "epoch         rr   cd-grab"]
    losses = np.array([[float(v) for v in line.split()[1:]] for line in lines[2:2 + epochs]])
    assert losses[0, 0] == losses[0, 1], "the first epoch's order is the seed's for both"
    assert (losses[1:, 1] < losses[1:, 0]).all(), losses
