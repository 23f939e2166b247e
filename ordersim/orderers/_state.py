"""One flat state buffer per gradient-observing orderer, and the fast observe() it allows.

An orderer that needs the gradients keeps its whole state in one int64 buffer; its float and
byte arrays are read through float64 and uint8 views of the same memory. Its kernel takes just
(grads, state) and can be called from Python (``observe``) or from other jitted code (the MPI
backend's epoch loop).
Numba's dispatch costs about 50 ns per argument: with the fifteen separate arrays and options the
balancing kernels used to take, dispatch cost more than the balancing itself when a call carries
one example.

The buffer starts with a header: the sizes, whether an epoch is open, the examples observed so
far in it and, in the slots an orderer names, its options and where each of its arrays starts.
Python sees the arrays as named numpy views; kernels as 1-d slices indexed by row (row i of an
(m, n) array is [i n, (i + 1) n)). A kernel returns b, the examples per row it took, or -1 when grads do not fit
(no open epoch, wrong m or d, or more examples than the epoch has left), changing nothing;
observe() then names the problem.
"""

import numpy as np
from numba import config, njit, types

from ordersim import aligned
from ordersim.declared_jit import njit_declared

# Explicit signatures: a kernel admits only 3-d float64 gradients (C-contiguous or strided) and an
# int64 state, so anything else raises TypeError at dispatch instead of compiling a new version,
# and observe() needs no Python-level checks on its fast path. They compile at a kernel's first
# use, not at import (listing the orderers compiles nothing). No reference counting (_nrt=False):
# the views a kernel takes of its state per example would each cost two atomic operations, more
# than the arithmetic; a kernel therefore allocates nothing (its arrays live in the state buffer).
OBSERVE_ARGS = (types.float64[:, :, ::1], types.int64[::1])  # the C-contiguous one
state_kernel = njit_declared([types.int64(*OBSERVE_ARGS), types.int64(types.float64[:, :, :], types.int64[::1])],
                             cache=True, error_model="numpy", _nrt=False)
JITTED = not config.DISABLE_JIT

# Header slots every state buffer has; an orderer's own slots follow from FIRST_OWN_SLOT on.
M, N, D, IN_EPOCH, OBSERVED, ORDER = range(6)  # ORDER: where the epoch's (m, n) order starts
FIRST_OWN_SLOT = 6
SLOTS_PER_LINE = aligned.CACHE_LINE // 8


@njit(inline="always", error_model="numpy")
def block(buffer, slot, state, length):
    """The array that starts at state[slot] (a slot index), as a 1-d slice of ``buffer``: the
    state or its float64 or uint8 view."""
    start = state[slot] * (8 // buffer.itemsize)
    return buffer[start:start + length]


@njit(inline="always", error_model="numpy")
def open_for(vectors, state):
    """An epoch is open and vectors is (m, ·, d) with contiguous rows (the vector code reads a
    row as d consecutive doubles; rows of an empty array have no stride to check)."""
    return (state[IN_EPOCH] != 0 and vectors.shape[0] == state[M] and vectors.shape[2] == state[D]
            and (vectors.strides[2] == 8 or vectors.size == 0))


@njit(inline="always", error_model="numpy")
def fits(grads, state):
    """open_for(grads, state), and grads holds 1 <= b <= the examples left in the epoch."""
    b = grads.shape[1]
    return open_for(grads, state) and b >= 1 and state[OBSERVED] + b <= state[N]


class StateBuffer:
    """Mixin for Orderer subclasses whose ``kernel`` (a ``state_kernel``: (grads, state) -> b or -1)
    does all per-example work. They describe their arrays in ``_state_layout`` and call
    ``_allocate_state`` from ``_setup``; every array is then an attribute (a view of the buffer)."""

    needs_gradients = True
    kernel = None
    header_slots = FIRST_OWN_SLOT

    def _state_layout(self) -> dict[str, tuple[int, type, tuple[int, ...]]]:
        """name -> (header slot of its start, np.int64, np.float64 or np.uint8, shape)."""
        return {"epoch_order": (ORDER, np.int64, (self.workers, self.examples))}

    def _allocate_state(self) -> None:
        # Every array starts on a cache line (8 slots), so that the vector code's rows do not
        # straddle two lines (ordersim/aligned.py).
        layout = self._state_layout()
        starts, end = {}, self.header_slots
        for slot, dtype, shape in layout.values():
            starts[slot] = -(-end // SLOTS_PER_LINE) * SLOTS_PER_LINE
            end = starts[slot] + -(-int(np.prod(shape)) * np.dtype(dtype).itemsize // 8)
        self.state = aligned.zeros(end, dtype=np.int64)
        for slot, start in starts.items():
            self.state[slot] = start
        self.state[[M, N, D]] = self.workers, self.examples, self.dim
        self._bind_views()

    def _bind_views(self) -> None:
        for name, (slot, dtype, shape) in self._state_layout().items():
            buffer = self.state.view(dtype)
            start = int(self.state[slot]) * (8 // buffer.itemsize)
            setattr(self, name, buffer[start:start + int(np.prod(shape))].reshape(shape))

    # The views are not state of their own: checkpoints (and pickles) keep the buffer, and the
    # views are bound again to the restored buffer.
    def checkpoint_state(self) -> dict:
        views = self._state_layout()
        return {key: value for key, value in super().checkpoint_state().items() if key not in views}

    def _restored(self) -> None:
        self.state = aligned.on_cache_line(self.state)  # a restored buffer starts anywhere
        self._bind_views()

    def __getstate__(self):
        return self.checkpoint_state()

    def __setstate__(self, state):
        self.restore_state(state)

    def _load_epoch_order(self) -> None:
        # Kernels read the epoch's order from the buffer; self.order stays a fresh array every
        # epoch, so that a caller may keep a previous epoch's order.
        self.epoch_order[...] = self.order

    @property
    def in_epoch(self) -> bool:
        return bool(self.state[IN_EPOCH])

    @in_epoch.setter
    def in_epoch(self, value: bool) -> None:
        self.state[IN_EPOCH] = value

    @property
    def observed(self) -> int:
        """Examples of every row observed in the current epoch (kept by the kernel)."""
        return int(self.state[OBSERVED])

    @observed.setter
    def observed(self, value: int) -> None:
        self.state[OBSERVED] = value

    def observe(self, grads: np.ndarray) -> None:
        # Whatever the kernel's signatures refuse (TypeError) or its size checks refuse (-1) goes
        # through the validation that names the problem. Without JIT, validation comes first.
        if JITTED:
            try:
                if self.kernel(grads, self.state) > 0:
                    return
            except TypeError:
                pass
        self._check_observe(grads)
        grads = np.asarray(grads)
        # A C-contiguous copy of read-only gradients (e.g. from JAX or broadcast_to: the kernels
        # only read, but their signatures name writable arrays) and of rows that are not
        # contiguous (a strided view's rows: the kernels read a row as consecutive doubles).
        if not grads.flags.writeable or grads.strides[2] != grads.itemsize:
            grads = np.ascontiguousarray(grads) if grads.flags.writeable else grads.copy()
        self.kernel(grads, self.state)
