"""PyTorch samplers whose orders come from ordersim's orderers (the optional ``torch`` extra).

One process:

    params = {name: p.detach() for name, p in model.named_parameters()}
    sampler = OrderedSampler(train_set, "cd-grab", params=params, seed=0)
    loader = DataLoader(train_set, batch_size=16, sampler=sampler)
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        for x, y in loader:
            grads = vmap(grad(loss), in_dims=(None, 0, 0))(params, x, y)  # per example, a dict
            sampler.observe(grads)  # in the order the loader gave the examples
            ...                     # your update

Under torch.distributed every process is one worker: DistributedOrderedSampler shards the data
(rank r gets examples r n .. (r + 1) n - 1, n = len(data) // world size, as the simulator's
contiguous partition; the last len(data) mod world size are left out) and yields the rank's
examples. Orderers that run per worker (rr, d-grab, ...) need no communication; a coordinated one
(cd-grab) runs the one shared walk on every rank over all ranks' gradients, all-gathered at every
observe(). Either way a rank's orders are those of ordersim's simulator with the same gradients
(the same kernels, streams and options: docs/torch.md).

The core never imports this module: only ``import ordersim.torch`` needs torch.
"""

from collections.abc import Iterable, Mapping

import numpy as np
import torch
import torch.distributed as dist
from torch.utils.data import Sampler

from ordersim.orderers import build_orderer, orderer_class, table_options
from ordersim.orderers.base import BALANCE_OPTIONS


def tensor_leaves(tree) -> list[torch.Tensor]:
    """The tensors of a pytree of mappings, lists and tuples (any iterable), in order, a mapping's
    in its own order: as torch.func.vmap(grad(f)) returns the per-example gradients of the dict
    (or tuple) of parameters f takes."""
    if isinstance(tree, torch.Tensor):
        return [tree]
    if isinstance(tree, Mapping):
        tree = tree.values()
    if isinstance(tree, (str, bytes)) or not isinstance(tree, Iterable):
        raise TypeError(f"expected tensors in dicts, lists or tuples, got a {type(tree).__name__}")
    return [leaf for item in tree for leaf in tensor_leaves(item)]


def parameter_count(params) -> int:
    """The values per example of the flattened gradients of ``params`` (a pytree of tensors)."""
    return sum(leaf.numel() for leaf in tensor_leaves(params))


def batch_size_of(per_example) -> int:
    """The number of examples b of per-example tensors, each (b, ...); ValueError if they disagree."""
    leaves = tensor_leaves(per_example)
    if not leaves or any(leaf.dim() == 0 for leaf in leaves):
        raise ValueError("observe() expects per-example tensors, each (b, ...) with b examples")
    sizes = {leaf.shape[0] for leaf in leaves}
    if len(sizes) != 1:
        raise ValueError(f"observe(): the tensors hold different numbers of examples {sorted(sizes)}; "
                         f"each must be (b, ...) for the same b")
    return sizes.pop()


def flatten_per_example(per_example, dim: int) -> np.ndarray:
    """Per-example tensors (a pytree, each (b, ...), any float dtype or device) as one C-contiguous
    float64 array (b, dim): example j's values of every tensor, in the pytree's order."""
    b = batch_size_of(per_example)
    leaves = tensor_leaves(per_example)
    total = sum(leaf.numel() for leaf in leaves) // b
    if total != dim:
        raise ValueError(f"observe(): the per-example gradients hold {total} values per example; the sampler "
                         f"was made for params of {dim} (pass the same parameters' gradients)")
    flat = np.empty((b, dim))
    target, at = torch.from_numpy(flat), 0
    for leaf in leaves:
        size = leaf.numel() // b
        target[:, at:at + size].copy_(leaf.detach().reshape(b, size))  # converts float32 exactly
        at += size
    return flat


def _copied(state: dict) -> dict:
    """An orderer's checkpoint_state() with arrays of its own (the orderer's are its live buffers)."""
    return {key: value.copy() if isinstance(value, np.ndarray) else value for key, value in state.items()}


class OrderedSampler(Sampler[int]):
    """A torch Sampler over ``data_source`` (a dataset or its length) whose order every epoch is
    ordersim orderer ``orderer``'s for one worker (m = 1).

    ``params``: the parameters whose per-example gradients observe() gets, a pytree of tensors
    (e.g. ``dict(model.named_parameters())``); needed by the orderers that read gradients, and
    only their sizes are used. ``orderer_options``: the balancing orderers' projection,
    projection_dim and group, the simulator's config table of that name. ``options`` go to
    ordersim.orderers.make_orderer (sign, tie, walk_c, first_order, run_epochs and the orderer's
    own options). The orderer is built as the simulator builds it (ordersim.orderers.build_orderer), so
    an orderer's options work here as there.

    Every iteration is one epoch: it builds the next order from the gradients observed (the
    first epoch's order is a random permutation from the seed). Call observe() after every step
    with that step's per-example gradients; rr and the other orderers that ignore gradients need
    no observe() calls.
    """

    def __init__(self, data_source, orderer: str = "rr", *, params=None, seed: int = 0, orderer_options=None,
                 **options):
        super().__init__()
        self._build(data_source, orderer, params, seed, orderer_options, options, workers=1, worker=0)

    def _build(self, data_source, name, params, seed, orderer_options, options, workers, worker):
        kind = type(self).__name__
        total = data_source if isinstance(data_source, (int, np.integer)) else len(data_source)
        examples = int(total) // workers
        if examples < 1:
            raise ValueError(f"{kind}: {total} examples cannot be shared by {workers} workers (need >= 1 each)")
        cls = orderer_class(name)
        if cls.centralized_alternatives and workers != 1:
            raise ValueError(f"{kind}: {name} is the centralized algorithm (one worker); with {workers} "
                             f"workers use {' or '.join(cls.centralized_alternatives)}")
        if "first_worker" in options:
            raise ValueError(f"{kind}: first_worker is not an option here: a process's worker is its rank")
        passed = sorted(set(options) & set(BALANCE_OPTIONS))
        if passed:
            raise ValueError(f"{kind}: pass {', '.join(passed)} in orderer_options={{...}}, as the simulator's "
                             f"config table orderer_options")
        orderer_options = dict(orderer_options or {})
        if orderer_options and not cls.takes_projection_and_group:
            raise ValueError(f"{kind}: orderer_options ({', '.join(map(str, orderer_options))}) are options of "
                             f"the balancing orderers; {name} takes none of them")
        table_options([cls], orderer_options, None, f"{kind}: orderer_options")  # refuses what it does not take
        if cls.needs_gradients:
            if params is None:
                raise ValueError(f"{kind}: {name} reads the gradients: pass params=, the parameters whose "
                                 f"per-example gradients observe() gets (e.g. dict(model.named_parameters()))")
            dim = parameter_count(params)
        else:
            dim = 1  # observe() only counts the examples
        # one process per worker; group need not divide a batch: the orders do not depend on how
        # the epoch is cut into observe() calls (docs/algorithms.md, "Grouped balancing")
        self.orderer, coordinated = build_orderer(
            name, workers, examples, dim, seed, ranks=workers, first=worker, local=1,
            orderer_options=orderer_options, batch=None, options_field=f"{kind}: orderer_options", **options)
        self.workers, self.worker, self.examples = workers, worker, examples
        self._row = worker if coordinated else 0  # this worker's row of the orderer's orders
        self._coordinated = coordinated
        # the global index of local example j (the order's entries are local)
        self.shard = np.arange(worker * examples, (worker + 1) * examples, dtype=np.int64)

    def __len__(self) -> int:
        return self.examples

    def __iter__(self):
        if self.orderer.in_epoch:
            self._end_epoch()
        local = self.orderer.begin_epoch()[self._row]
        return iter(self.shard[local].tolist())

    @property
    def epoch(self) -> int:
        """The current epoch; between epochs (before the first iteration, after set_epoch()) the next."""
        return self.orderer.epoch

    @property
    def order(self) -> np.ndarray:
        """The global indices of the current epoch (or, between epochs, of the next), in visit order."""
        return self.shard[self.orderer.order[self._row]]

    def set_epoch(self, epoch: int) -> None:
        """torch's DistributedSampler's call before each epoch. An order follows from the gradients
        of every epoch before it, so epochs cannot be skipped or repeated: ``epoch`` must be the
        next one (ending the current epoch, whose examples must all have been observed)."""
        upcoming = self.orderer.epoch + self.orderer.in_epoch
        if epoch != upcoming:
            raise ValueError(f"{type(self).__name__}.set_epoch({epoch!r}): the next epoch is {upcoming}; "
                             f"an order is built from every epoch before it, so none can be skipped or repeated")
        if self.orderer.in_epoch:
            self._end_epoch()

    def _end_epoch(self) -> None:
        o = self.orderer
        if o.needs_gradients and o.observed != o.examples:
            raise ValueError(
                f"{type(self).__name__}: epoch {o.epoch} ended after observe() saw {o.observed} of its "
                f"{o.examples} examples; {o.name} builds the next order from the gradients of every example: "
                f"call observe() after every step (a DataLoader with drop_last=True skips the last batch)")
        o.end_epoch()

    def observe(self, per_example_grads) -> None:
        """The per-example gradients of this step's b examples, in the order the sampler yielded
        them: a pytree of tensors (dicts, lists, tuples), each (b, ...), float32 or float64, as
        ``torch.func.vmap(grad(loss))`` returns them for a pytree of parameters; flattened to
        (b, d) float64 in the pytree's order. The last batch of an epoch may be shorter."""
        o = self.orderer
        if not o.needs_gradients:
            o.observe(np.zeros((o.workers, batch_size_of(per_example_grads), 1)))
            return
        o.observe(self._rows(per_example_grads))

    def _rows(self, per_example_grads) -> np.ndarray:
        """The (rows, b, d) gradients the orderer observes: this worker's own."""
        return flatten_per_example(per_example_grads, self.orderer.dim)[None]

    def state_dict(self) -> dict:
        """The orderer's state (arrays, numbers and strings), for a checkpoint of the training run:
        a copy, which the sampler's later epochs leave as it is."""
        return _copied(self.orderer.checkpoint_state())

    def load_state_dict(self, state: dict) -> None:
        """Continue from state_dict() of a sampler made with the same arguments (copying it)."""
        self.orderer.restore_state(_copied(state))


class DistributedOrderedSampler(OrderedSampler):
    """OrderedSampler for torch.distributed: every process of ``group`` (default: the default
    process group, which must be initialized) is one worker, its rank the worker's index, and
    yields its shard's examples (global indices of ``data_source``). Every rank makes the sampler
    with the same arguments and, for a coordinated orderer (cd-grab), calls observe() at every
    step: there every rank all-gathers every rank's (b, d) float64 gradients (a CPU tensor; with
    NCCL pass a gloo group, ``dist.new_group(backend="gloo")``) and runs the same walk."""

    def __init__(self, data_source, orderer: str = "rr", *, params=None, seed: int = 0, group=None,
                 orderer_options=None, **options):
        Sampler.__init__(self)
        if not dist.is_available() or not dist.is_initialized():
            raise ValueError("DistributedOrderedSampler: torch.distributed is not initialized; call "
                             "torch.distributed.init_process_group first (or use OrderedSampler)")
        self.group = group
        self._build(data_source, orderer, params, seed, orderer_options, options,
                    workers=dist.get_world_size(group), worker=dist.get_rank(group))

    def _rows(self, per_example_grads) -> np.ndarray:
        if not self._coordinated:
            return super()._rows(per_example_grads)
        # checked before any collective, raised only after the header's: a rank that raised
        # alone would leave the others waiting in the all-gather, whatever the exception
        try:
            local, error = super()._rows(per_example_grads)[0], None
        except Exception as err:  # noqa: BLE001 (told to every rank, then raised on each)
            local, error = None, str(err) if isinstance(err, (TypeError, ValueError)) else f"{type(err).__name__}: {err}"
        self._check_agreement(0 if local is None else local.shape[0], error)
        gathered = torch.empty((self.workers, *local.shape), dtype=torch.float64)
        dist.all_gather(list(gathered.unbind(0)), torch.from_numpy(local), group=self.group)
        return gathered.numpy()

    def _check_agreement(self, batch: int, error: str | None) -> None:
        """Every rank's step must be the same step of the same walk, with gradients of the right
        shape; if not, every rank raises the same error here (rather than waiting in, or
        mismatching buffers of, the all-gather). `error`: what is wrong with this rank's gradients."""
        o = self.orderer
        mine = torch.tensor([error is None, batch, o.dim, o.examples, o.seed, o.epoch, o.in_epoch, o.observed],
                            dtype=torch.int64)
        every = torch.empty((self.workers, len(mine)), dtype=torch.int64)
        dist.all_gather(list(every.unbind(0)), mine, group=self.group)
        if not every[:, 0].all():  # every rank knows: every rank takes part in gathering the errors
            errors = [None] * self.workers
            dist.all_gather_object(errors, error, group=self.group)
            rank = next(r for r, message in enumerate(errors) if message is not None)
            raise ValueError(f"DistributedOrderedSampler.observe(): rank {rank}'s gradients: "
                             f"{errors[rank].removeprefix('observe(): ')}")
        fields = ("b", "d", "examples per rank", "seed", "epoch", "in epoch", "observed")
        for column, field in enumerate(fields, start=1):
            values = every[:, column].tolist()
            if len(set(values)) > 1:
                raise ValueError(f"DistributedOrderedSampler.observe(): the ranks disagree on {field} "
                                 f"(by rank: {values}); every rank must observe the same step of the same run")
