"""Declared state for orderers that read the gradients, and the fast observe() it allows.

An orderer that needs the gradients declares its state as named, typed fields with shapes:

    STATE = StateLayout(table=f64["m", "n", "d"], seen=i64["m"], bound=f64[()])

A shape names its dimensions: "m", "n", "d" are the orderer's workers, examples and dim; any
other name is an attribute of the orderer, read when the state is allocated (an int is itself;
``()`` declares a scalar). Every layout also holds ``epoch_order`` (i64["m", "n"], the epoch's
order, loaded at begin_epoch()). From the declaration follow:

- the buffer: one int64 array, header first (sizes, whether an epoch is open, the examples
  observed so far, then per field where it starts and its shape), every field on its own cache
  line after it (ordersim/aligned.py); float and byte fields are read through float64 and uint8
  views of the same memory;
- the views: the orderer has an attribute per field (a numpy view of the buffer; scalars 0-d);
  jitted code gets a field with its accessor, ``STATE.table(state)``, an (m, n, d) float64 view
  (a scalar: its value); bind it to a module-level name for kernels (``table = STATE.table``);
- pickling and checkpoints: the buffer and the orderer's settings, and ``state_layout``, a digest
  of every field's name, dtype and shape, which a checkpoint must match (ordersim/checkpoint.py).

The kernel does all per-example work and is written as a body for the ``observer`` decorator:

    @observer
    def store(grads, state, start):   # grads (m, b, d): visit positions start..start+b-1
        ...

``observer`` compiles it into ``kernel(grads, state)``, which returns b, or -1 when grads do not
fit (no open epoch, wrong m or d, rows not contiguous, more examples than the epoch has left),
changing nothing: that check and the count of observed examples are the wrapper's. The kernel is
called from Python (``observe``) and from the backends' jitted epoch loops. Numba's dispatch
costs about 50 ns per argument: the balancing kernels' fifteen arrays and options as separate
arguments would cost more in dispatch than the balancing itself when a call carries one example. docs/adding.md walks through writing one.
"""

import hashlib
import inspect
import types as pytypes

import numpy as np
from numba import config, njit, types
from numba.core.dispatcher import Dispatcher

from ordersim import aligned
from ordersim.declared_jit import njit_declared
from ordersim.orderers.base import Orderer

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

# The header's fixed slots; each field's start and shape follow from FIRST_FIELD_SLOT on.
M, N, D, IN_EPOCH, OBSERVED = range(5)
FIRST_FIELD_SLOT = 5
SLOTS_PER_LINE = aligned.CACHE_LINE // 8
DIMENSIONS = {"m": "workers", "n": "examples", "d": "dim"}  # the shape names every orderer has


class Field:
    """A declared field: its dtype and shape (dimension names or ints)."""

    def __init__(self, dtype, shape):
        self.dtype, self.shape = np.dtype(dtype), tuple(shape)

    def __repr__(self):
        return f"{self.dtype.name}[{', '.join(map(str, self.shape))}]"


class _FieldType:
    """f64, i64, u8: ``f64["m", "d"]`` declares an (m, d) float64 field, ``f64[()]`` a scalar."""

    def __init__(self, dtype):
        self.dtype = dtype

    def __getitem__(self, shape):
        return Field(self.dtype, shape if isinstance(shape, tuple) else (shape,))


f64, i64, u8 = _FieldType(np.float64), _FieldType(np.int64), _FieldType(np.uint8)


def _accessor(slot, field):
    """The jitted (state) -> view of the field whose start is in header slot `slot` (followed by
    its shape): a view of the buffer's memory of the field's dtype, or a scalar's value."""
    dtype, ndim = field.dtype.type, len(field.shape)
    per_slot = 8 // field.dtype.itemsize
    if ndim == 0:
        def view(state):
            return state.view(dtype)[state[slot] * per_slot]
    elif ndim == 1:
        def view(state):
            start = state[slot] * per_slot
            return state.view(dtype)[start:start + state[slot + 1]]
    elif ndim == 2:
        def view(state):
            start, rows, cols = state[slot] * per_slot, state[slot + 1], state[slot + 2]
            return state.view(dtype)[start:start + rows * cols].reshape((rows, cols))
    elif ndim == 3:
        def view(state):
            start, a, b, c = state[slot] * per_slot, state[slot + 1], state[slot + 2], state[slot + 3]
            return state.view(dtype)[start:start + a * b * c].reshape((a, b, c))
    else:
        raise ValueError(f"state field {field!r}: at most 3 dimensions")
    return njit(inline="always", error_model="numpy")(view)


class StateLayout:
    """An orderer state's declared fields (see the module's docstring); ``layout.NAME`` is field
    NAME's accessor for jitted code."""

    def __init__(self, **fields):
        fields = {"epoch_order": i64["m", "n"], **fields}
        self.fields, self.slots = {}, {}
        slot = FIRST_FIELD_SLOT
        for name, field in fields.items():
            if not isinstance(field, Field):
                raise TypeError(f"state field {name!r}: declare it as f64[...], i64[...] or u8[...], "
                                f"got {field!r}")
            if name in _RESERVED or name.startswith("_"):
                raise ValueError(f"state field {name!r}: the name is taken by StateLayout")
            self.fields[name], self.slots[name] = field, slot
            setattr(self, name, _accessor(slot, field))
            slot += 1 + len(field.shape)
        self.header_slots = slot

    def shapes(self, orderer) -> dict[str, tuple[int, ...]]:
        """Every field's shape for this orderer (its dimension names resolved)."""
        def size(name, dim):
            if isinstance(dim, int):
                return dim
            attribute = DIMENSIONS.get(dim, dim)
            if not hasattr(orderer, attribute):
                raise TypeError(f"{orderer.name}: state field {name!r} has the dimension {dim!r}, which is "
                                f"no attribute of the orderer; allowed: 'm', 'n', 'd', an int, or an "
                                f"attribute set in _setup (or a class attribute or property)")
            return int(getattr(orderer, attribute))
        return {name: tuple(size(name, dim) for dim in field.shape) for name, field in self.fields.items()}

    def digest(self, shapes) -> str:
        """What a checkpoint's state must match: every field's name, dtype and shape, in order."""
        text = ";".join(f"{name}:{field.dtype.str}{shapes[name]}" for name, field in self.fields.items())
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def allocate(self, orderer) -> np.ndarray:
        """A zeroed buffer for this orderer: the header written, every field on a cache line."""
        shapes = self.shapes(orderer)
        starts, end = {}, self.header_slots
        for name, field in self.fields.items():
            starts[name] = -(-end // SLOTS_PER_LINE) * SLOTS_PER_LINE
            end = starts[name] + -(-int(np.prod(shapes[name], dtype=np.int64)) * field.dtype.itemsize // 8)
        state = aligned.zeros(end, dtype=np.int64)
        state[[M, N, D]] = orderer.workers, orderer.examples, orderer.dim
        for name, slot in self.slots.items():
            state[slot] = starts[name]
            state[slot + 1:slot + 1 + len(shapes[name])] = shapes[name]
        return state

    def views(self, state: np.ndarray) -> dict[str, np.ndarray]:
        """Every field as a numpy view of `state` (a scalar as a 0-d view)."""
        out = {}
        for name, field in self.fields.items():
            slot, ndim = self.slots[name], len(field.shape)
            shape = tuple(int(size) for size in state[slot + 1:slot + 1 + ndim])
            buffer = state.view(field.dtype)
            start = int(state[slot]) * (8 // field.dtype.itemsize)
            out[name] = buffer[start:start + int(np.prod(shape, dtype=np.int64))].reshape(shape)
        return out


_RESERVED = {*vars(StateLayout), "fields", "slots", "header_slots"}
epoch_order = StateLayout().epoch_order  # every layout's first field: (m, n) int64


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


def _observed_kernel(grads, state):
    """observer's kernel: the check, the body (``_body``, bound per kernel), the count."""
    if not fits(grads, state):
        return -1
    start = state[OBSERVED]
    _body(grads, state, start)  # noqa: F821  (a global of each kernel's own copy)
    b = grads.shape[1]
    state[OBSERVED] = start + b
    return b


def observer(body):
    """The ``state_kernel`` (grads, state) -> b or -1 around body(grads, state, start): checks
    that grads fit (``fits``; else -1, nothing changed), calls the body with the epoch's first
    visit position not yet observed, counts the b examples.

    The kernel is a copy of one template function whose global ``_body`` is this body (not a
    closure: Numba's cache cannot key a closure over a jitted function, and these kernels must
    load from the cache); the copy carries the body's name and file, so that Numba caches it
    beside the body's module and invalidates it with that file."""
    try:  # a body of other arguments failed deep in Numba's inlining, naming neither
        inspect.signature(body).bind("grads", "state", "start")
    except TypeError:
        raise TypeError(f"@observer: {body.__qualname__}{inspect.signature(body)} must take the "
                        f"arguments (grads, state, start)") from None
    inner = njit(inline="always", error_model="numpy", _nrt=False)(body)
    code = _observed_kernel.__code__.replace(co_name=body.__name__, co_qualname=body.__qualname__,
                                             co_filename=body.__code__.co_filename,
                                             co_firstlineno=body.__code__.co_firstlineno)
    kernel = pytypes.FunctionType(code, dict(_observed_kernel.__globals__, _body=inner), body.__name__)
    kernel.__qualname__, kernel.__module__, kernel.__doc__ = body.__qualname__, body.__module__, body.__doc__
    return state_kernel(kernel)


class GradientOrderer(Orderer):
    """An Orderer whose ``kernel`` (made by ``observer``, or a ``state_kernel`` that keeps the
    same contract) observes the gradients into the state its ``state_layout`` declares. The
    buffer is allocated after ``_setup`` (set the attributes the shapes name there) and the
    epoch's order is loaded into ``epoch_order`` before ``_begin``."""

    needs_gradients = True
    kernel = None
    state_layout: StateLayout = StateLayout()
    state: np.ndarray  # the buffer

    def __init_subclass__(cls, **kwargs):
        # when the class is defined, so that a plug-in's file fails to load with this one line
        super().__init_subclass__(**kwargs)
        name = cls.name or cls.__qualname__
        if not isinstance(cls.state_layout, StateLayout):
            raise TypeError(f"orderer {name!r} state_layout must be a StateLayout, got "
                            f"{type(cls.state_layout).__name__}")
        cls._refuse_hidden_attributes(name, ())
        error = cls.name and cls._contract_error()  # an orderer, not an intermediate base class
        if error:
            raise TypeError(f"orderer {name!r} {error} (docs/adding.md, \"Orderers that read the gradients\")")

    @classmethod
    def _contract_error(cls) -> str | None:
        """What breaks the contract: no layout of its own (the kernel's accessors would read another
        layout's slots: a segfault once a run observed), or a kernel that is missing, not jitted
        or not (grads, state)."""
        if cls.state_layout is GradientOrderer.state_layout:
            return "sets no state_layout; set it to the StateLayout its kernel's fields come from"
        kernel = cls.kernel
        if kernel is None:
            return "defines no kernel; set kernel = staticmethod(body), body decorated with @observer"
        if JITTED and not isinstance(kernel, Dispatcher):
            return f"kernel is not Numba-jitted ({type(kernel).__name__}); decorate its body with @observer"
        try:
            inspect.signature(getattr(kernel, "py_func", kernel)).bind("grads", "state")
        except TypeError:
            return (f"kernel{inspect.signature(getattr(kernel, 'py_func', kernel))} does not take "
                    f"(grads, state); decorate a body(grads, state, start) with @observer")
        return None

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._refuse_hidden_attributes(self.name, vars(self))  # and what this class's own code set
        self.state = self.state_layout.allocate(self)
        self._bind_views()
        self._setup_state()

    @classmethod
    def _refuse_hidden_attributes(cls, name: str, attributes) -> None:
        """TypeError for the state fields whose views would hide an attribute of the orderer: one
        of its class, one that every orderer has (annotated on the classes) or in ``attributes``."""
        annotated = {key for klass in cls.__mro__ for key in vars(klass).get("__annotations__", {})}
        taken = [field for field in cls.state_layout.fields
                 if field in attributes or field in annotated or hasattr(cls, field)]
        if taken:
            raise TypeError(f"{name}: state field(s) {', '.join(taken)} would hide an attribute of the "
                            f"orderer; name them otherwise")

    def _setup_state(self) -> None:
        """Fill the state's settings (called once, after the buffer is allocated)."""

    def _bind_views(self) -> None:
        for name, view in self.state_layout.views(self.state).items():
            setattr(self, name, view)

    def _open_epoch(self) -> None:
        # Kernels read the epoch's order from the buffer; self.order stays a fresh array every
        # epoch, so that a caller may keep a previous epoch's order.
        self.epoch_order[...] = self.order

    # The views are not state of their own: checkpoints (and pickles) keep the buffer and the
    # layout's digest, and the views are bound again to the restored buffer.
    def checkpoint_state(self) -> dict:
        views = self.state_layout.fields
        state = {key: value for key, value in super().checkpoint_state().items() if key not in views}
        state["state_layout"] = self.state_layout.digest(self.state_layout.shapes(self))
        return state

    def restore_state(self, state: dict) -> None:
        state = dict(state)
        state.pop("state_layout", None)  # compared before restoring (Run.restore, layout_mismatch)
        super().restore_state(state)

    def _restored(self) -> None:
        self.state = aligned.on_cache_line(self.state)  # a restored buffer starts anywhere
        self._bind_views()

    def __getstate__(self):
        return self.checkpoint_state()

    def __setstate__(self, state):
        self.restore_state(state)

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
