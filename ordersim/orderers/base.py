"""The Orderer contract shared by every ordering algorithm.

An orderer owns the visit orders of m workers, each over its own n local examples. One epoch:

    order = o.begin_epoch()   # int64 (m, n)
    o.observe(grads)          # float64 (m, b, d), the next b examples of every row, in visit order
    ...                       # until all n examples of every row were observed
    o.end_epoch()             # builds the order that the next begin_epoch() returns

Subclasses set ``name`` and ``description`` and implement ``_next_order`` (and ``_begin``
when an epoch needs resetting). Those that need the gradients derive from ``GradientOrderer``
(``orderers/_state.py``) instead: they declare their state's fields, and a Numba kernel
``kernel(grads, state)`` does all per-example work, callable from Python (observe) and from the
backends' jitted epoch loops (docs/adding.md). This class validates arguments and every order
an orderer builds (``_checked_order``), and keeps the epoch bookkeeping; for the others observe()
only counts.
"""

import math

import numpy as np
from numba import njit

from ordersim import numba_cache  # noqa: F401  (before the cached kernel below: stamps it)
from ordersim.streams import stream

SIGNS = ("deterministic", "walk")
PROJECTIONS = ("none", "gaussian", "sparse")
TIES = ("plus", "minus")
FIRST_ORDERS = ("random", "identity")


def default_walk_c(total_examples: int, dim: int, delta: float = 0.01) -> float:
    """The self-balancing walk's c = 30 log(N d / delta), the theory's choice for ||v||_2 <= 1."""
    return 30.0 * math.log(total_examples * dim / delta)


def _is_int(value) -> bool:
    return not isinstance(value, bool) and isinstance(value, (int, np.integer))


def check_projection_and_group(name, projection, projection_dim, group, examples=None) -> None:
    """The options projection, projection_dim and group (docs/algorithms.md, "Random projection
    before balancing", "Grouped balancing"); a ValueError names the option, the value and what is
    allowed. ``examples`` None: group is not checked against n."""
    if projection not in PROJECTIONS:
        raise ValueError(f"{name}: projection must be one of {PROJECTIONS}, got {projection!r}")
    if projection_dim is not None:
        if projection == "none":
            raise ValueError(f"{name}: projection_dim needs projection = 'gaussian' or 'sparse', "
                             f"got projection_dim={projection_dim!r} with projection='none'")
        if not _is_int(projection_dim) or projection_dim < 1:
            raise ValueError(f"{name}: projection_dim must be an integer >= 1 (or None: the "
                             f"Johnson-Lindenstrauss default), got {projection_dim!r}")
    if not _is_int(group) or group < 1 or (examples is not None and group > examples):
        allowed = "an integer >= 1" if examples is None else f"an integer in 1..{examples} (the examples per worker)"
        raise ValueError(f"{name}: group must be {allowed}, got {group!r}")


@njit(cache=True, error_model="numpy")
def first_non_permutation(orders):
    """(row, position) of the first entry that breaks row being a permutation of 0..n-1, else (-1, -1)."""
    m, n = orders.shape
    seen = np.zeros(n, dtype=np.bool_)
    for i in range(m):
        seen[:] = False
        for t in range(n):
            e = orders[i, t]
            if e < 0 or e >= n or seen[e]:
                return i, t
            seen[e] = True
    return -1, -1


BALANCE_OPTIONS = ("projection", "projection_dim", "group")


def balance_options(table: dict, batch: int | None, field: str = "config field 'orderer_options'") -> dict:
    """The BALANCE_OPTIONS entries of the config's ``orderer_options`` table as keyword arguments
    of the balancing orderers: projection, projection_dim (0: the default k) and group, which must
    divide the step's ``batch`` (a step's b examples are cut into b/r groups; None: no fixed step,
    not checked). ValueError names ``field`` and the bad entry; the table's other entries are the
    orderers' own options (ordersim.orderers.table_options)."""
    options = {"projection": table.get("projection", "none"), "group": table.get("group", 1)}
    dim = table.get("projection_dim", 0)
    options["projection_dim"] = None if dim == 0 and not isinstance(dim, bool) else dim
    check_projection_and_group(field, **options)
    if batch is not None and batch % options["group"]:
        raise ValueError(f"{field}: group must divide batch ({batch}), got {options['group']!r}")
    return options


class Orderer:
    name: str = ""
    description: str = ""
    needs_gradients: bool = False  # True for GradientOrderers, whose kernel observes them
    # Pair orderers also take pair differences g_2k - g_2k+1 through this kernel (the serial
    # backend forms them as the gradients come: half the rows to keep, one vector per pair).
    pair_difference_kernel = None
    # Coordinated orderers need every worker's gradients on every rank (one shared walk); the others
    # run independently per worker, so an MPI rank builds only its own workers' orders.
    coordinated: bool = False
    # Centralized algorithms are defined for one worker only; they name their distributed versions.
    centralized_alternatives: tuple[str, ...] = ()
    # Options of this orderer beside the common ones (make_orderer's OPTIONS), keyword arguments
    # of its __init__, and those of them that must be given (kh-sgd's epochs).
    extra_options: tuple[str, ...] = ()
    required_options: tuple[str, ...] = ()
    # Balancing orderers whose signs follow a rule of their own, not the sign options.
    own_sign_rule: bool = False
    # Every row of every order is a permutation of 0..n-1; False: any example ids in 0..n-1 (wr's
    # draws with replacement). end_epoch() refuses an order that breaks this.
    permutes: bool = True
    # Orderers that read the gradients and take the options projection and group (UnitOrderer,
    # orderers/_units.py: every built-in one); other gradient orderers (a user's) refuse them, the
    # gradient-free ones ignore them.
    takes_projection_and_group: bool = False
    # Set by begin_epoch() and end_epoch() (GradientOrderers keep both in their state header).
    in_epoch: bool = False
    observed: int = 0  # examples of every row observed in the current epoch
    # What __init__ sets on every orderer (named here so that a GradientOrderer's state fields are
    # checked against them when its class is defined: orderers/_state.py).
    workers: int
    examples: int
    dim: int
    seed: int
    first_worker: int
    sign: str
    tie: str
    first_order: str
    walk_c: float
    projection: str
    projection_dim: int
    group: int
    projected_input: bool
    epoch: int
    order: np.ndarray

    def __init__(
        self,
        workers: int,
        examples: int,
        dim: int,
        seed: int = 0,
        *,
        first_worker: int = 0,
        sign: str = "deterministic",
        walk_c: float | None = None,
        tie: str = "plus",
        first_order: str = "random",
        projection: str = "none",
        projection_dim: int | None = None,
        group: int = 1,
        projected_input: bool = False,
    ):
        for field, value, low in (
            ("workers", workers, 1),
            ("examples", examples, 1),
            ("dim", dim, 1),
            ("seed", seed, 0),
            ("first_worker", first_worker, 0),
        ):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
                raise ValueError(f"{self.name}: {field} must be an integer >= {low}, got {value!r}")
        if self.centralized_alternatives and workers != 1:
            raise ValueError(
                f"{self.name} is the centralized algorithm and takes workers=1, got workers={workers}; "
                f"for several workers use {' or '.join(self.centralized_alternatives)}"
            )
        if sign not in SIGNS:
            raise ValueError(f"{self.name}: sign must be one of {SIGNS}, got {sign!r}")
        if tie not in TIES:
            raise ValueError(f"{self.name}: tie must be one of {TIES}, got {tie!r}")
        if first_order not in FIRST_ORDERS:
            raise ValueError(f"{self.name}: first_order must be one of {FIRST_ORDERS}, got {first_order!r}")
        check_projection_and_group(self.name, projection, projection_dim, group, examples)
        self.check_takes_projection_and_group(projection, group)
        if not isinstance(projected_input, bool) or (projected_input and projection == "none"):
            raise ValueError(f"{self.name}: projected_input must be True or False, and True only with "
                             f"a projection, got projected_input={projected_input!r} with projection={projection!r}")
        if walk_c is None:
            walk_c = default_walk_c(workers * examples, dim)
        if not (isinstance(walk_c, (int, float, np.floating)) and math.isfinite(walk_c) and walk_c > 0):
            raise ValueError(f"{self.name}: walk_c must be a finite number > 0, got {walk_c!r}")

        self.workers, self.examples, self.dim = int(workers), int(examples), int(dim)
        self.seed, self.first_worker = int(seed), int(first_worker)
        self.sign, self.tie, self.first_order = sign, tie, first_order
        self.walk_c = float(walk_c)
        self.projection, self.group, self.projected_input = projection, int(group), projected_input
        self.projection_dim = 0 if projection_dim is None else int(projection_dim)  # 0: the default
        self.epoch = 0  # index of the epoch that begin_epoch() starts next (or is inside)
        self.order = self._checked_order(np.stack([self._first_row(i) for i in range(self.workers)]),
                                         "the first order (_first_row)")
        self._setup()

    @classmethod
    def check_options(cls, options: dict) -> None:
        """Refuse a bad value among ``options``, entries of the orderer's own ``extra_options``
        (only those present), with a ValueError naming the option, the value and what is allowed.
        The one place for the rule: __init__ calls it, and so does config.check_fields (through
        table_options), so a bad value is refused before any data is read. Subclasses with
        extra_options override it, calling super()."""

    @classmethod
    def check_takes_projection_and_group(cls, projection: str, group: int) -> None:
        """A gradient orderer that is no UnitOrderer (a user's) refuses projection and group with a
        ValueError, rather than ignoring them; the gradient-free orderers ignore them."""
        if cls.needs_gradients and not cls.takes_projection_and_group and (projection != "none" or group != 1):
            raise ValueError(f"{cls.name}: projection and group are options of the balancing orderers; "
                             f"{cls.name} takes neither (docs/algorithms.md, \"Random projection before "
                             f"balancing\"), got projection={projection!r}, group={group!r}")

    # -- helpers for subclasses -------------------------------------------------------------------
    def stream(self, purpose: str, row: int, epoch: int) -> np.random.Generator:
        """The random stream of local row ``row`` (global worker first_worker + row) in ``epoch``."""
        return stream(self.seed, purpose, self.first_worker + row, epoch)

    def random_row(self, row: int, epoch: int) -> np.ndarray:
        return self.stream("order", row, epoch).permutation(self.examples).astype(np.int64)

    def _first_row(self, row: int) -> np.ndarray:
        if self.first_order == "identity":
            return np.arange(self.examples, dtype=np.int64)
        return self.random_row(row, 0)

    def walk_uniforms(self) -> np.ndarray:
        """Uniforms for this epoch's sign decisions: u[i, k] serves worker i's k-th decision."""
        u = np.empty((self.workers, self.examples))
        for i in range(self.workers):
            u[i] = self.stream("walk", i, self.epoch).random(self.examples)
        return u

    def _checked_order(self, order, what: str) -> np.ndarray:
        """``order`` as the int64 (m, n) C-contiguous array the backends index with (no copy when
        it is one), or a ValueError naming the orderer, ``what`` and the first fault: the kernels
        index the gradients with it unchecked (a short row reads past the data). O(m n)."""
        order = np.asarray(order)
        m, n = self.workers, self.examples
        if order.shape != (m, n):
            raise ValueError(f"{self.name}: {what} must have shape ({m}, {n}) (workers, examples), "
                             f"got shape {order.shape}")
        if not np.issubdtype(order.dtype, np.integer):
            raise ValueError(f"{self.name}: {what} must hold integers (int64 example ids), got dtype {order.dtype}")
        order = np.ascontiguousarray(order, dtype=np.int64)
        if self.permutes:
            i, t = first_non_permutation(order)
            allowed = f"a permutation of 0..{n - 1} in every row"
        else:
            bad = np.flatnonzero((order < 0) | (order >= n))
            i, t = divmod(int(bad[0]), n) if bad.size else (-1, -1)
            allowed = f"example ids in 0..{n - 1}"
        if i >= 0:
            e = order[i, t]
            fault = "repeats an example of the row" if 0 <= e < n else "is out of range"
            raise ValueError(f"{self.name}: {what} must be {allowed}, but order[{i}, {t}] = {e} {fault}")
        return order

    # -- hooks --------------------------------------------------------------------------------------
    def _setup(self) -> None:
        """Allocate per-run state (called once, after the first order is set)."""

    def _open_epoch(self) -> None:
        """What every epoch of this kind of orderer starts with, before _begin (GradientOrderer
        loads the epoch's order into its state)."""

    def _begin(self) -> None:
        """Reset per-epoch state before the epoch's first observe()."""

    def _next_order(self) -> np.ndarray:
        """The order of the next epoch (m, n), built from what this epoch observed."""
        raise NotImplementedError

    # -- public API ---------------------------------------------------------------------------------
    def begin_epoch(self) -> np.ndarray:
        if self.in_epoch:
            raise ValueError(f"{self.name}: begin_epoch() called twice; call end_epoch() first")
        self.in_epoch = True
        self.observed = 0
        self._open_epoch()
        self._begin()
        return self.order.copy()

    def observe(self, grads: np.ndarray) -> None:
        self.observed += self._check_observe(grads)

    def _check_observe(self, grads) -> int:
        """Raise the ValueError that names what is wrong with observe(grads); returns b."""
        if not self.in_epoch:
            raise ValueError(f"{self.name}: observe() outside an epoch; call begin_epoch() first")
        if not isinstance(grads, np.ndarray) or grads.dtype != np.float64:
            raise ValueError(
                f"{self.name}: observe() expects a float64 numpy array of shape "
                f"({self.workers}, b, {self.dim}), got {getattr(grads, 'dtype', type(grads).__name__)}"
            )
        if grads.ndim != 3 or grads.shape[0] != self.workers or grads.shape[2] != self.dim:
            raise ValueError(
                f"{self.name}: observe() expects shape ({self.workers}, b, {self.dim}), got {grads.shape}"
            )
        b = grads.shape[1]
        left = self.examples - self.observed
        if left == 0:
            raise ValueError(
                f"{self.name}: observe() after all {self.examples} examples of the epoch were observed; "
                f"call end_epoch() first"
            )
        if b < 1 or b > left:
            raise ValueError(
                f"{self.name}: observe() got {b} examples per row but the epoch has {left} of "
                f"{self.examples} left (b must be 1..{left})"
            )
        return b

    def end_epoch(self) -> None:
        if not self.in_epoch:
            raise ValueError(f"{self.name}: end_epoch() without begin_epoch()")
        if self.needs_gradients and self.observed != self.examples:
            raise ValueError(
                f"{self.name}: end_epoch() after {self.observed} of {self.examples} examples per row; "
                f"this orderer needs the gradients of every example before it can build the next order"
            )
        self.epoch += 1
        self.order = self._checked_order(self._next_order(), f"the order _next_order() built after epoch "
                                                             f"{self.epoch}")
        self.in_epoch = False

    # -- checkpoints ----------------------------------------------------------------------------------
    def checkpoint_state(self) -> dict:
        """Everything that changes as the orderer runs, with its settings: every attribute, as
        arrays, numbers and strings (a checkpoint stores nothing else, so that loading one runs no
        code; ordersim.checkpoint refuses to save any other value, naming it)."""
        return dict(vars(self), in_epoch=bool(self.in_epoch), observed=int(self.observed))

    def restore_state(self, state: dict) -> None:
        """Take the state checkpoint_state() returned (of an orderer made with the same settings)."""
        state = dict(state)
        in_epoch, observed = state.pop("in_epoch"), state.pop("observed")
        self.__dict__.update(state)
        self._restored()
        self.in_epoch, self.observed = in_epoch, observed

    def _restored(self) -> None:
        """Rebuild what restore_state() does not set (views of restored arrays)."""

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(name={self.name!r}, workers={self.workers}, examples={self.examples}, "
            f"dim={self.dim}, seed={self.seed}, epoch={self.epoch})"
        )
