"""Units: grouped balancing and the random projection (docs/algorithms.md, "Random projection
before balancing", "Grouped balancing"), for every orderer that takes the options projection,
projection_dim and group (``UnitOrderer``: the balancing orderers of ``_balance.py``, greedy and
recursive-pair).

Such an orderer balances units (a group of r consecutive visit positions, as the mean of its
gradients, or a single example), each as its image under Pi (k x d, ``_projection.py``) when a
projection is set. With ``projected_input`` it is handed Pi g (k values per example) instead of
g, and balances what it is handed: the simulator forms Pi g from the data rows projected once
per run for a linear model (``input_projection``; docs/algorithms.md). Its state layout starts
with ``UNITS``' fields (``StateLayout(**UNITS.fields, ...)``), so that ``UNITS``' accessors read
them in its state.
"""

import numpy as np
from numba import njit

from ordersim.orderers import _projection
from ordersim.orderers._state import GradientOrderer, StateLayout, f64, i64

UNITS = StateLayout(
    # 0 wide when not used
    group_size=i64[()],  # r
    # per row, the sum of its open group's gradients; once the group is complete, in place, its mean (d)
    group_sum=f64["m", "group_dim"],
    unit_vectors=f64["m", "unit_dim"],  # per row, the vector its unit (or pair) is balanced as
    projection_kind=i64[()],  # _projection.NONE, GAUSSIAN or SPARSE
    dense_projection=f64["dense_rows", "dense_cols"],  # gaussian Pi (k, d)
    sparse_columns=i64["sparse_entries"],  # sparse Pi: every row's + columns, then its - columns
    sparse_bounds=i64["sparse_bound_slots"],  # where they start: 2k + 1 offsets
    sparse_scale=f64[()],  # sigma
)
group_size, group_sum, unit_vectors = UNITS.group_size, UNITS.group_sum, UNITS.unit_vectors
projection_kind, dense_projection, sparse_columns = UNITS.projection_kind, UNITS.dense_projection, UNITS.sparse_columns
sparse_bounds, sparse_scale = UNITS.sparse_bounds, UNITS.sparse_scale


@njit(inline="always", error_model="numpy")
def projection_of(state):
    """Pi as _projection.project takes it: (kind, dense, columns, bounds, sigma)."""
    return (projection_kind(state), dense_projection(state), sparse_columns(state), sparse_bounds(state),
            sparse_scale(state))


@njit(inline="always", error_model="numpy")
def add_to_group(sums, g, opens):
    """sums += g, from 0.0 when g opens the group (the sum in visit order)."""
    for c in range(sums.shape[0]):
        sums[c] = (0.0 if opens else sums[c]) + g[c]


@njit(inline="always", error_model="numpy")
def close_group(sums, g, r):
    """sums += g, the group's last gradient, then sums /= r in place: the group's mean (the next
    group's first gradient overwrites it, add_to_group)."""
    for c in range(sums.shape[0]):
        sums[c] = (sums[c] + g[c]) / r


class UnitOrderer(GradientOrderer):
    """A GradientOrderer that takes projection, projection_dim and group. Its layout starts with
    UNITS' fields; with either option set (``balances_units``) its kernels are ``unit_kernels``
    (of the gradients, of pair differences: None where it has none), or, with ``unit_kernels``
    None, its own kernels, which then balance units as they are. Shapes it may use:
    ``units``, ``balanced_dim``, and the UNITS fields' ``group_dim`` and ``unit_dim`` (set here,
    0 when unused; a subclass that does not use a field sets its width to 0 after _setup)."""

    takes_projection_and_group = True
    unit_kernels = None

    @property
    def units(self) -> int:
        """Units per row and epoch: the whole groups of r visit positions (n with r = 1)."""
        return self.examples // self.group

    @property
    def gradient_dim(self) -> int:
        """d, the dimension of the gradients (dim is k when the orderer is handed Pi g)."""
        return self._gradient_dim

    @property
    def balanced_dim(self) -> int:
        """The dimension of the balanced vectors: k, or d without a projection."""
        return self.projection_dim if self.projection != "none" else self.dim

    @property
    def units_per_sum(self) -> int:
        """The vectors one running sum balances in an epoch (the default k's N_s): a row's units."""
        return self.units

    def _setup(self):
        super()._setup()
        self._gradient_dim = self.dim
        if self.projection != "none" and self.projection_dim == 0:  # the Johnson-Lindenstrauss default
            self.projection_dim = _projection.johnson_lindenstrauss_dim(max(self.units_per_sum, 1), self.dim)
        k, d = self.projection_dim, self.dim
        if self.projected_input:  # it is handed Pi g: the k values it observes are what it balances
            self.dim = k
        applies = self.projection != "none" and not self.projected_input  # Pi in the kernels
        self.balances_units = applies or self.group > 1
        gaussian, sparse = applies and self.projection == "gaussian", applies and self.projection == "sparse"
        self.group_dim = self.dim if self.group > 1 else 0
        self.unit_dim = self.balanced_dim if self.balances_units else 0
        self.dense_rows, self.dense_cols = (k, d) if gaussian else (0, 0)
        self._sparse = _projection.sparse_projection(self.seed, k, d) if sparse else None
        self.sparse_entries = len(self._sparse[0]) if sparse else 0
        self.sparse_bound_slots = 2 * k + 1 if sparse else 0

    def _setup_state(self):
        super()._setup_state()
        self.group_size[...] = self.group
        self.projection_kind[...] = _projection.KINDS["none" if self.projected_input else self.projection]
        if self.dense_rows:
            self.dense_projection[...] = _projection.gaussian_projection(self.seed, self.projection_dim, self.dim)
        if self._sparse is not None:
            self.sparse_columns[:], self.sparse_bounds[:], self.sparse_scale[...] = self._sparse
        del self._sparse  # kept in the state
        self._bind_kernels()

    def input_projection(self) -> tuple:
        """Pi as _projection.project takes it, (kind, dense, columns, bounds, sigma), drawn as the
        kernels draw it: what an engine that hands this orderer Pi g projects with."""
        k, d = self.projection_dim, self.gradient_dim
        dense, columns, bounds, sigma = np.zeros((0, 0)), np.zeros(0, dtype=np.int64), np.zeros(1, dtype=np.int64), 0.0
        if self.projection == "gaussian":
            dense = _projection.gaussian_projection(self.seed, k, d)
        elif self.projection == "sparse":
            columns, bounds, sigma = _projection.sparse_projection(self.seed, k, d)
        return _projection.KINDS[self.projection], dense, columns, bounds, sigma

    def _bind_kernels(self):
        """The unit kernels as this orderer's, when it balances units. A grouped pair walk has no
        kernel of pair differences: its pairs are of group means, which example differences do
        not give."""
        if self.balances_units and self.unit_kernels is not None:
            self.kernel, difference_kernel = self.unit_kernels
            self.pair_difference_kernel = difference_kernel if self.group == 1 else None

    # The kernels are functions, which a checkpoint does not keep: they are bound again.
    def checkpoint_state(self) -> dict:
        state = super().checkpoint_state()
        for name in ("kernel", "pair_difference_kernel"):
            state.pop(name, None)
        return state

    def _restored(self):
        super()._restored()
        self._bind_kernels()

    def expand_units(self, unit_order: np.ndarray) -> np.ndarray:
        """The next order (m, n) from every row's next unit order (m, units) of this epoch's unit
        positions: each unit's r examples in their order, then the positions after the last whole
        group, which stay last."""
        m, units, r = self.workers, self.units, self.group
        slots = (unit_order[:, :, None] * r + np.arange(r)).reshape(m, units * r)
        return np.concatenate([np.take_along_axis(self.epoch_order, slots, axis=1),
                               self.epoch_order[:, units * r:]], axis=1)
