"""Training with ordersim.torch's samplers as the tests check it, in one process or as one rank of a
torch.distributed job (``python tests/torch_ranks.py RANK WORLD INIT_FILE OUT_DIR``, started by
tests/test_torch.py, gloo on CPU): a small two-layer network on the first rows of scikit-learn's
digits, its per-example gradients (a dict of four parameters), SGD along their mean (averaged over
the ranks), and what the sampler saw: the examples it yielded and the gradients observed, flattened
here on their own so the tests compare with the NumPy reference."""

import sys
import time
from datetime import timedelta
from pathlib import Path

import numpy as np
import torch
from torch.func import functional_call, grad, vmap
from torch.utils.data import DataLoader, TensorDataset

# (orderer, dtype, options) of every distributed case; one job runs them all (torch's import is
# seconds per process)
DISTRIBUTED_CASES = [
    ("cd-grab", "float32", {}),
    ("cd-grab", "float64", {"sign": "walk"}),
    ("d-grab", "float32", {"sign": "walk"}),
    ("d-grab", "float64", {}),
]
EXAMPLES_PER_WORKER, BATCH, EPOCHS, SEED = 11, 4, 3, 3  # n odd, n mod b = 3: a short last batch
PROCESS_GROUP_TIMEOUT = 60  # seconds a collective waits for a missing rank


def save_digits(path: Path, rows: int) -> None:
    """The first ``rows`` digits (features, labels) in an npz file, for the ranks: importing
    scikit-learn costs each of them seconds."""
    from sklearn.datasets import load_digits

    data = load_digits()
    np.savez(path, X=data.data[:rows] / 16.0, y=data.target[:rows])


def digits(path: Path, dtype) -> TensorDataset:
    """(features, label, index) of the digits save_digits() wrote."""
    data = np.load(path)
    rows = len(data["y"])
    return TensorDataset(torch.tensor(data["X"], dtype=dtype), torch.tensor(data["y"]), torch.arange(rows))


def per_example_autograd(loss, params, x, y):
    """loss's gradient at every example by torch.autograd, one example at a time, laid out as
    torch.func's vmap(grad(loss)) gives it ({name: (b, ...)}), without its first call's import of
    torch._dynamo (seconds per process)."""
    rows = []
    for j in range(len(x)):
        leaves = {name: p.detach().requires_grad_() for name, p in params.items()}
        rows.append(torch.autograd.grad(loss(leaves, x[j], y[j]), list(leaves.values())))
    return {name: torch.stack([row[i] for row in rows]) for i, name in enumerate(params)}


def flat_rows(grads: dict) -> np.ndarray:
    """(b, d) float64: the tensors of the dict, example by example (the test's own flattening)."""
    b = next(iter(grads.values())).shape[0]
    return torch.cat([g.reshape(b, -1) for g in grads.values()], dim=1).double().numpy()


def train(sampler_class, orderer, dtype, options, data_file, *, func=True, distributed=False):
    """Train for EPOCHS epochs on the digits in data_file, with per-example gradients from
    torch.func (func) or torch.autograd; returns (the global indices of every epoch's order and
    last the next epoch's, (E + 1, n); the observed gradients by local example (E, n, d) float64;
    the sampler)."""
    dtype = getattr(torch, dtype)
    torch.manual_seed(SEED)
    model = torch.nn.Sequential(torch.nn.Linear(64, 4), torch.nn.Tanh(), torch.nn.Linear(4, 10)).to(dtype)
    params = {name: p.detach() for name, p in model.named_parameters()}

    def loss(params, x, y):
        return torch.nn.functional.cross_entropy(functional_call(model, params, (x[None],)), y[None])

    if func:
        per_example = vmap(grad(loss), in_dims=(None, 0, 0))
    else:
        def per_example(params, x, y):
            return per_example_autograd(loss, params, x, y)
    data = digits(data_file, dtype)
    sampler = sampler_class(data, orderer, params=params, seed=SEED, **options)
    loader = DataLoader(data, batch_size=BATCH, sampler=sampler)
    n = len(sampler)
    orders, observed = [], []
    for epoch in range(EPOCHS):
        sampler.set_epoch(epoch)
        visited, rows = [], []
        for x, y, index in loader:
            grads = per_example(params, x, y)
            sampler.observe(grads)
            visited.append(index.numpy())
            rows.append(flat_rows(grads))
            for name, g in grads.items():
                step = g.mean(0)
                if distributed:
                    torch.distributed.all_reduce(step)
                    step /= sampler.workers
                params[name] -= 0.5 * step
        visited = np.concatenate(visited)
        by_local = np.empty((n, rows[0].shape[1]))
        by_local[visited - sampler.shard[0]] = np.concatenate(rows)
        orders.append(visited)
        observed.append(by_local)
    sampler.set_epoch(EPOCHS)
    orders.append(sampler.order)
    return np.stack(orders), np.stack(observed), sampler


def main(rank, world, init_file, out_dir):
    from ordersim.torch import DistributedOrderedSampler

    torch.distributed.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank,
                                         world_size=world, timeout=timedelta(seconds=PROCESS_GROUP_TIMEOUT))
    for case, (orderer, dtype, options) in enumerate(DISTRIBUTED_CASES):
        orders, grads, sampler = train(DistributedOrderedSampler, orderer, dtype, options,
                                       Path(out_dir) / "digits.npz", func=False, distributed=True)
        np.savez(Path(out_dir) / f"case{case}_rank{rank}.npz", orders=orders, grads=grads,
                 walk_c=sampler.orderer.walk_c)
    try:  # a centralized orderer is for one worker
        DistributedOrderedSampler(8 * world, "grab", params=torch.zeros(3))
    except ValueError as error:
        (Path(out_dir) / f"centralized_rank{rank}.txt").write_text(str(error))
    # ranks that disagree (here on the seed) all raise at the same observe(), none waits forever
    sampler = DistributedOrderedSampler(8 * world, "cd-grab", params=torch.zeros(3), seed=rank)
    iter(sampler)
    try:
        sampler.observe(torch.zeros(2, 3))
    except ValueError as error:
        (Path(out_dir) / f"disagreement_rank{rank}.txt").write_text(str(error))
    # gradients of the wrong shape on the last rank only: every rank raises the same error at that
    # observe(), in seconds (not after the process group's timeout in the all-gather)
    sampler = DistributedOrderedSampler(8 * world, "cd-grab", params=torch.zeros(3), seed=SEED)
    iter(sampler)
    start = time.monotonic()
    try:
        sampler.observe(torch.zeros(2, 4 if rank == world - 1 else 3))
    except ValueError as error:
        (Path(out_dir) / f"wrong_shape_rank{rank}.txt").write_text(f"{time.monotonic() - start}\n{error}")
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4])
