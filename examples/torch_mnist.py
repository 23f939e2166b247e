"""rr against cd-grab in a PyTorch loop: a small MLP on scikit-learn's bundled digits (1797 8x8
images of handwritten digits, a small MNIST that needs no download), per-example gradients from
torch.func, the orders from ordersim.torch (README, "Using ordersim's orderers in PyTorch").

    python examples/torch_mnist.py                              # one worker
    torchrun --nproc-per-node 4 examples/torch_mnist.py         # 4 workers, one process each (gloo)

Prints, per epoch, the full training loss of each orderer (the mean over the seeds), then the test
accuracy after the last epoch."""

import argparse
import os
import sys

import numpy as np
import torch
import torch.distributed as dist
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from torch.func import functional_call, grad, vmap
from torch.utils.data import DataLoader, TensorDataset

from ordersim.torch import DistributedOrderedSampler, OrderedSampler


def train(orderer, seed, train_set, epochs, batch, lr):
    """SGD along the orders of `orderer`; the model's parameters and its training loss per epoch."""
    torch.manual_seed(seed)  # the same initial model on every rank
    model = torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.Tanh(), torch.nn.Linear(32, 10))
    params = {name: p.detach() for name, p in model.named_parameters()}

    def loss(params, x, y):
        return torch.nn.functional.cross_entropy(functional_call(model, params, (x,)), y)

    per_example_grads = vmap(grad(lambda p, x, y: loss(p, x[None], y[None])), in_dims=(None, 0, 0))
    distributed = dist.is_initialized()
    Sampler = DistributedOrderedSampler if distributed else OrderedSampler
    sampler = Sampler(train_set, orderer, params=params, seed=seed)
    loader = DataLoader(train_set, batch_size=batch, sampler=sampler)
    losses = []
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        for x, y in loader:
            grads = per_example_grads(params, x, y)  # a dict of (b, ...) tensors
            sampler.observe(grads)
            for name, g in grads.items():
                step = g.mean(0)
                if distributed:  # data parallel: the mean over every worker's batch
                    dist.all_reduce(step)
                    step /= dist.get_world_size()
                params[name] -= lr * step
        losses.append(loss(params, *train_set.tensors).item())
    return model, params, losses


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--examples", type=int, default=None, help="use only the first N digits")
    args = parser.parse_args(argv)
    if "RANK" in os.environ:  # started by torchrun
        dist.init_process_group("gloo")
    digits = load_digits()
    X = torch.tensor(digits.data[:args.examples] / 16.0, dtype=torch.float32)
    y = torch.tensor(digits.target[:args.examples])
    X_train, X_test, y_train, y_test = train_test_split(X, y, test_size=0.2, random_state=0)
    train_set = TensorDataset(X_train, y_train)
    rows = []
    for orderer in ("rr", "cd-grab"):
        losses, accuracies = [], []
        for seed in range(args.seeds):
            model, params, run_losses = train(orderer, seed, train_set, args.epochs, args.batch, args.lr)
            logits = functional_call(model, params, (X_test,))
            losses.append(run_losses)
            accuracies.append((logits.argmax(1) == y_test).float().mean().item())
        rows.append((orderer, np.mean(losses, axis=0), np.mean(accuracies)))
    if not dist.is_initialized() or dist.get_rank() == 0:
        workers = dist.get_world_size() if dist.is_initialized() else 1
        print(f"{workers} worker(s), {len(train_set)} training digits, {args.seeds} seed(s): training loss")
        print("epoch " + "".join(f"{orderer:>10}" for orderer, _, _ in rows))
        for epoch in range(args.epochs):
            print(f"{epoch + 1:5d} " + "".join(f"{losses[epoch]:10.4f}" for _, losses, _ in rows))
        print("test accuracy " + "  ".join(f"{orderer} {accuracy:.3f}" for orderer, _, accuracy in rows))
    if dist.is_initialized():
        dist.barrier()  # no rank tears gloo down while rank 0 prints: a peer gone aborted the others
        dist.destroy_process_group()
        # torch 2.13: once torch.func has imported torch._dynamo, destroy_process_group leaves gloo's
        # worker threads running, and one still releasing the last collective's tensors while Python
        # shuts down aborts the process (SIGABRT, "terminate called without an active exception").
        # Nothing is left to do, so leave without that shutdown.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


if __name__ == "__main__":
    main()
