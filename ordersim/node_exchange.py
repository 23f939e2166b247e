"""The step's exchange between ranks: through shared memory on one node, else MPI_Allgather.

The MPI backend's step ends with an all-to-all exchange of small buffers (every worker's gradient
sums, or its gradients for a coordinated orderer: a few KB), as long as the step's own work or
longer. When every rank runs on the same node, the ranks share one MPI-3 shared-memory window
(MPI_Win_allocate_shared) and exchange through it directly (4 KB a rank, 2 ranks: 1.1 µs against
1.6 µs for MPICH's MPI_Allgather called from jitted code, 2.3 µs through mpi4py):

    rank r, call number c:  publish: copy its buffer into slot (c mod 2, r), c into its flag;
                            collect: for each rank q, wait until flag q >= c, copy slot
                            (c mod 2, q) out.

Between the two halves a rank can do work that needs no other rank's data (the step loop runs
the orderer there) while the slower ranks catch up: with shared memory nothing waits on an MPI
progress engine, so that work overlaps the exchange.

Two slots per rank suffice: a rank reaches call c + 2, which overwrites slot (c mod 2, r), only
after every rank published c + 1, that is after every rank finished copying out call c. The flag
is written with release and read with acquire semantics (LLVM atomics), so the data a flag
announces is visible once the flag is.

A waiting rank spins on the flag, yielding the core every few hundred reads (sched_yield), and
after a number of reads goes to sleep in the kernel until the flag changes (Linux futex; the
publisher wakes the flag's sleepers, which it counts in the flag's cache line, so that a publish
nobody waits for makes no system call). How many reads: when the node's ranks outnumber the cores
they may run on, a few (a spinning rank would hold a core that the rank it waits for needs: at
`mpiexec -n 8` on 2 cores the default experiment took 6x the serial run's time); otherwise some
thousands, tens to hundreds of µs, far above a step's wait when every rank has a core, so that
only waits on a rank that lost its core (other jobs' load) sleep. If another rank fails, its
MPI_Abort (backend.abort_on_exception) ends the waiting ones too. At each yield and each wake-up
(a sleep lasts at most SLEEP_NANOSECONDS) the wait reads the clock, and gives up a wait longer than
the stall timeout (or, after SIGTERM or SIGUSR1, than the signal's grace; ordersim/stall.py):
collect() then returns STALLED, with the rank it waited for in the link's limits. The result is the
bytes MPI_Allgather would deliver, in the same rank order: the choice changes times, never values.

``exchange = "allgather"`` in the config, ranks on several nodes, or a platform without
sched_yield use MPI_Allgather (ordersim.jit_mpi) for every exchange. Without futexes (not Linux,
or without JIT) a wait spins and yields until it ends.
"""

import ctypes
import os
import platform
import sys

import numpy as np
from llvmlite import ir
from numba import config, njit, types
from numba.core import cgutils
from numba.extending import intrinsic

from ordersim import numba_cache  # before the cached kernels: stamps them
from ordersim.jit_clock import seconds
from ordersim.jit_mpi import ABI, allgather
from ordersim.stall import WAITED, WAITED_FOR, waited_too_long

AVAILABLE = hasattr(os, "sched_yield")  # POSIX; elsewhere every exchange is an MPI_Allgather
FLAG_STRIDE = 8  # int64s between two ranks' flags: one 64-byte cache line each, no false sharing
SLEEPERS = 1  # in a flag's cache line, after the flag: how many ranks sleep until it changes
SPINS_BEFORE_YIELD = 256
# Flag reads before a wait sleeps: with more ranks than cores on the node, or not.
SPINS_BEFORE_SLEEP_OVERSUBSCRIBED = 16
SPINS_BEFORE_SLEEP = 16 * SPINS_BEFORE_YIELD
SLEEP_NANOSECONDS = 10_000_000  # the longest sleep: the wait checks its time limit in between
STALLED = -1  # collect()'s result when it gave up waiting (MPI's error codes are > 0)
# This rank's ``calls`` array (SharedSlots): the exchange count, the sleep's timeout (a struct
# timespec: seconds, nanoseconds) and the flag reads before a wait sleeps.
COUNT, TIMEOUT, SPIN_LIMIT = 0, 1, 3

# futex(2) through the C library's syscall(): FUTEX_WAIT and FUTEX_WAKE on the low 32 bits of a
# flag (little-endian), shared between processes (no FUTEX_PRIVATE_FLAG).
_SYS_FUTEX = {"x86_64": 202, "amd64": 202, "aarch64": 98, "arm64": 98}.get(platform.machine().lower())
FUTEX_WAIT, FUTEX_WAKE = 0, 1
SLEEPS = (not config.DISABLE_JIT and AVAILABLE and sys.platform.startswith("linux")
          and sys.byteorder == "little" and _SYS_FUTEX is not None)


@intrinsic
def _load_acquire(typingctx, address):
    """The int64 at ``address``, read with acquire ordering."""
    if not isinstance(address, types.Integer):
        return None
    def codegen(context, builder, signature, args):
        pointer = builder.inttoptr(args[0], ir.IntType(64).as_pointer())
        return builder.load_atomic(pointer, ordering="acquire", align=8)
    return types.int64(address), codegen


@intrinsic
def _store_release(typingctx, address, value):
    """Write the int64 ``value`` at ``address`` with release ordering."""
    if not isinstance(address, types.Integer) or value != types.int64:
        return None
    def codegen(context, builder, signature, args):
        pointer = builder.inttoptr(args[0], ir.IntType(64).as_pointer())
        builder.store_atomic(args[1], pointer, ordering="release", align=8)
        return context.get_dummy_value()
    return types.void(address, value), codegen


@intrinsic
def _fetch_add(typingctx, address, value):
    """Add the int64 ``value`` to the int64 at ``address`` (sequentially consistent)."""
    if not isinstance(address, types.Integer) or value != types.int64:
        return None
    def codegen(context, builder, signature, args):
        pointer = builder.inttoptr(args[0], ir.IntType(64).as_pointer())
        builder.atomic_rmw("add", pointer, args[1], "seq_cst")
        return context.get_dummy_value()
    return types.void(address, value), codegen


@intrinsic
def _full_fence(typingctx):
    """A sequentially consistent fence: no later read passes an earlier write."""
    def codegen(context, builder, signature, args):
        builder.fence("seq_cst")
        return context.get_dummy_value()
    return types.void(), codegen


_SPIN_HINTS = {"x86_64": ("llvm.x86.sse2.pause", ()), "amd64": ("llvm.x86.sse2.pause", ()),
               "aarch64": ("llvm.aarch64.hint", (1,)), "arm64": ("llvm.aarch64.hint", (1,))}


@intrinsic
def _spin_hint(typingctx):
    """The CPU's spin-wait hint (x86 pause, Arm yield): the waiting core backs off, and leaves
    the loop without the pipeline flush that a changed flag otherwise costs. Nothing elsewhere."""
    def codegen(context, builder, signature, args):
        name, operands = _SPIN_HINTS.get(platform.machine().lower(), (None, ()))
        if name is not None:
            i32 = ir.IntType(32)
            hint = cgutils.get_or_insert_function(
                builder.module, ir.FunctionType(ir.VoidType(), [i32] * len(operands)), name)
            builder.call(hint, [ir.Constant(i32, value) for value in operands])
        return context.get_dummy_value()
    return types.void(), codegen


if config.DISABLE_JIT:
    # The interpreter neither caches nor reorders these reads and writes, and x86 and ARM keep a
    # single aligned 8-byte access whole.
    def load_acquire(address):
        return ctypes.c_int64.from_address(address).value

    def store_release(address, value):
        ctypes.c_int64.from_address(address).value = value

    def spin_hint():
        """Nothing to hint from the interpreter."""

    def full_fence():
        """Nothing to order: without JIT no wait sleeps, so nothing reads the sleepers."""
else:
    load_acquire, store_release, spin_hint = _load_acquire, _store_release, _spin_hint
    fetch_add, full_fence = _fetch_add, _full_fence


# The C functions are called by symbol name, resolved when the machine code is linked, not through
# ctypes function pointers (an address of this process in the code): the MPI loop that calls them
# is cached on disk (engine.problem_loop).
if config.DISABLE_JIT and AVAILABLE:
    yield_core = os.sched_yield
elif AVAILABLE:
    @intrinsic
    def yield_core(typingctx):
        """The C library's sched_yield()."""
        def codegen(context, builder, signature, args):
            i32 = ir.IntType(32)
            function = cgutils.get_or_insert_function(builder.module, ir.FunctionType(i32, []), "sched_yield")
            return builder.call(function, [])
        return types.int32(), codegen
else:
    @njit
    def yield_core():
        """Never called (no shared-memory exchange here), but collect() must still compile."""

if SLEEPS:
    @intrinsic
    def futex(typingctx, address, operation, value, timeout_address):
        """syscall(SYS_futex, address, operation, value, timeout_address, 0, 0): the C library's
        variadic ``long syscall(long number, ...)``, every argument a long."""
        if not all(isinstance(t, types.Integer) for t in (address, operation, value, timeout_address)):
            return None

        def codegen(context, builder, signature, args):
            long = ir.IntType(8 * ctypes.sizeof(ctypes.c_long))
            function = cgutils.get_or_insert_function(
                builder.module, ir.FunctionType(long, [long], var_arg=True), "syscall")
            longs = [context.cast(builder, value, of, types.long_) for value, of in zip(args, signature.args)]
            zero = ir.Constant(long, 0)
            return builder.call(function, [ir.Constant(long, _SYS_FUTEX), *longs, zero, zero])
        return types.long_(address, operation, value, timeout_address), codegen
else:
    @njit
    def futex(address, operation, value, timeout_address):
        """Never called (no wait sleeps here), but publish() and collect() must still compile."""
        return 0


@njit(error_model="numpy", _nrt=False)
def sleep_while(flag_address, seen, timeout_address):
    """Sleep until the flag at ``flag_address`` is no longer ``seen``, SLEEP_NANOSECONDS at most
    (or a signal). Counted among the flag's sleepers first, so that its publisher wakes us; the
    kernel sleeps only if the flag still holds ``seen``, so a publish just before is not missed."""
    sleepers_address = flag_address + SLEEPERS * 8
    fetch_add(sleepers_address, 1)
    if load_acquire(flag_address) == seen:
        futex(flag_address, FUTEX_WAIT, seen & 0xFFFFFFFF, timeout_address)
    fetch_add(sleepers_address, -1)


@njit(error_model="numpy", _nrt=False)
def publish(send, link):
    """The first half of an exchange: this rank's C-contiguous float64 ``send`` into its slot,
    announced to the other ranks. Nothing with MPI_Allgather, which sends at collect(). The
    rank may do other work before collect(), while the others catch up; ``send`` must not
    change until then. link = (mpi, rank, flags, slots, calls, limits) from
    MPIBackend.exchange_link, mpi = jit_mpi.handles(the communicator); calls[0] counts the
    exchanges (the stall watchdog's progress)."""
    mpi, rank, flags, slots, calls, limits = link
    calls[COUNT] += 1
    if slots.shape[0] == 0:
        return
    call, ranks = calls[COUNT], slots.shape[0] // 2
    source, mine = send.reshape(-1), slots[(call & 1) * ranks + rank]
    for i in range(source.size):
        mine[i] = source[i]
    flag_address = flags.ctypes.data + rank * FLAG_STRIDE * 8
    store_release(flag_address, call)
    if SLEEPS:
        full_fence()  # the flag is written before the sleepers are read (sleep_while's mirror)
        if load_acquire(flag_address + SLEEPERS * 8) > 0:
            futex(flag_address, FUTEX_WAKE, 0x7FFFFFFF, 0)


@njit(error_model="numpy", _nrt=False)
def collect(send, recv, link):
    """The second half: every rank's ``send`` in rank order into ``recv`` (ranks x send.size), as
    MPI_Allgather delivers it; waits for the ranks that have not published yet. With an empty
    ``slots`` this is the MPI_Allgather on the link's communicator. Returns 0, MPI's error code, or
    STALLED when a wait went on too long (limits[WAITED_FOR], limits[WAITED]: for whom, how long)."""
    mpi, rank, flags, slots, calls, limits = link
    if slots.shape[0] == 0:
        return allgather(send, recv, mpi)
    call, ranks, size = calls[COUNT], slots.shape[0] // 2, send.size
    target, parity = recv.reshape(-1), (call & 1) * ranks
    spin_limit = calls[SPIN_LIMIT] if SLEEPS else -1
    for q in range(ranks):
        flag_address = flags.ctypes.data + q * FLAG_STRIDE * 8
        spins = 0
        started = -1.0  # the clock at the wait's first yield: no clock read on the fast path
        seen = load_acquire(flag_address)
        while seen < call:
            spin_hint()
            spins += 1
            sleeps = spins >= spin_limit >= 0  # and from then on at every read
            if sleeps or spins % SPINS_BEFORE_YIELD == 0:
                now = seconds()
                if started < 0.0:
                    started = now
                elif waited_too_long(limits, started, now):
                    limits[WAITED_FOR], limits[WAITED] = q, now - started
                    return STALLED
                if sleeps:
                    sleep_while(flag_address, seen, calls.ctypes.data + TIMEOUT * 8)
                else:
                    yield_core()
            seen = load_acquire(flag_address)
        theirs, offset = slots[parity + q], q * size
        for i in range(size):
            target[offset + i] = theirs[i]
    return 0


@njit(error_model="numpy", _nrt=False)
def exchange(send, recv, link):
    """publish() then collect(): every rank's ``send`` in rank order into ``recv``, as
    MPI_Allgather. Returns collect()'s result."""
    publish(send, link)
    return collect(send, recv, link)


# exchange() called from Python (oversubscribed, the per-epoch gathers: MPIBackend._node_allgather),
# cached on disk under a name that carries jit_mpi.ABI: the MPI handles' sizes shape its
# MPI_Allgather call, while the argument types Numba's cache is keyed on are the same under MPICH
# and Open MPI (one cache directory serves both, as for the MPI epoch loop: engine.problem_loop).
exchange_from_python = exchange if config.DISABLE_JIT else njit(cache=True, error_model="numpy", _nrt=False)(
    numba_cache.function_copy(exchange.py_func, qualname=f"exchange_{ABI}"))


def usable_cores(comm) -> int:
    """How many cores the ranks of ``comm`` (one node's) may run on together: the union of their
    CPU affinities (each rank's own may be one core when ranks are bound). Collective."""
    mine = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else list(range(os.cpu_count() or 1))
    return len(set().union(*comm.allgather(mine)))


class SharedSlots:
    """The window of one node's ranks: a flag per rank and two slots of ``doubles`` per rank.

    Allocating and freeing are collective over ``comm``, whose ranks must all be on one node."""

    def __init__(self, comm, doubles: int):
        from mpi4py import MPI

        ranks = comm.Get_size()
        # a slot is whole cache lines: the window starts on one, so every slot does too and no
        # two slots share a line
        self.doubles = doubles = -(-doubles // 8) * 8
        flag_bytes = ranks * FLAG_STRIDE * 8
        size = flag_bytes + 2 * ranks * doubles * 8 if comm.Get_rank() == 0 else 0
        # One piece on rank 0, contiguous, which every rank addresses through Shared_query(0).
        self.window = MPI.Win.Allocate_shared(size, 1, comm=comm)
        memory, _ = self.window.Shared_query(0)
        raw = np.frombuffer(memory, dtype=np.uint8)
        self.flags = raw[:flag_bytes].view(np.int64)
        self.slots = raw[flag_bytes:].view(np.float64).reshape(2 * ranks, doubles)
        if comm.Get_rank() == 0:
            self.flags[:] = 0
        # the exchange count (as this rank's flag), the sleep's timeout, the reads before a sleep
        self.calls = np.zeros(4, dtype=np.int64)
        self.calls[TIMEOUT:TIMEOUT + 2] = divmod(SLEEP_NANOSECONDS, 1_000_000_000)
        self.oversubscribed = ranks > usable_cores(comm)
        self.calls[SPIN_LIMIT] = (SPINS_BEFORE_SLEEP_OVERSUBSCRIBED if self.oversubscribed
                                  else SPINS_BEFORE_SLEEP)
        comm.Barrier()  # the flags are zero before any rank publishes

    def free(self) -> None:
        self.flags = self.slots = None  # views into the window go before the window does
        self.window.Free()
