"""MPI calls from Numba-compiled code: the MPI backend's epoch loop runs inside one jitted function.

mpi4py has already loaded and initialized the MPI library, privately (RTLD_LOCAL): its symbols are
not the process's. Importing this module looks ``MPI_Allgather`` up through the mpi4py extension
module (the dynamic linker searches a library's dependencies, libmpi among them) and registers its
address with LLVM (``llvmlite.binding.add_symbol``); jitted code calls it by that name from LLVM
IR, as jit_clock calls ``clock_gettime``. The machine code holds the symbol, not the address, so
Numba caches the loop on disk, and each process links the cached code to its own library when
it loads it. The call is direct: an Allgather from jitted code skips the ~1 µs that every
Python-level call costs.

Nothing per process is frozen into the code either: the communicator's and the datatype's handles
are arguments (``handles(comm)``, passed in the exchange's link). They come from mpi4py
(``MPI._handleof``): for MPICH a C int (the same in every process), for Open MPI a pointer to the
library's object (``&ompi_mpi_double``, ``&ompi_mpi_comm_world``: another address in each process,
with address-space randomization), passed as an integer of the same size either way. The sizes do
shape the code (the C types of the call's arguments): ``ABI`` names them, and the cached loop's
name carries it (engine.problem_loop), so code compiled against MPICH's 4-byte handles is never
loaded under Open MPI's 8-byte ones. tests/test_numba_cache.py runs a cached loop in fresh
processes, with MPICH and with Open MPI.
"""

import ctypes

from llvmlite import binding, ir
from mpi4py import MPI
from numba import config, njit, types
from numba.core import cgutils
from numba.extending import intrinsic


def _handle_type(cls):
    return {4: ctypes.c_int32, 8: ctypes.c_int64}[MPI._sizeof(cls)]


_COMM, _DATATYPE = _handle_type(MPI.Comm), _handle_type(MPI.Datatype)
ABI = f"c{ctypes.sizeof(_COMM)}d{ctypes.sizeof(_DATATYPE)}"  # the handles' bytes: comm, datatype

_library_allgather = ctypes.CDLL(MPI.__file__).MPI_Allgather
# before any loop is compiled or loaded from the cache: either resolves the symbol then
binding.add_symbol("MPI_Allgather", ctypes.cast(_library_allgather, ctypes.c_void_p).value)


def _handle(obj, ctype) -> int:
    # MPICH's handles are C ints with the high bit set (0x84000000...): as signed values
    return ctype(MPI._handleof(obj)).value


def handles(comm) -> tuple[int, int]:
    """(the communicator's handle, MPI_DOUBLE's handle) of this process, as allgather takes them."""
    return _handle(comm, _COMM), _handle(MPI.DOUBLE, _DATATYPE)


if config.DISABLE_JIT:
    _library_allgather.restype = ctypes.c_int
    _library_allgather.argtypes = [ctypes.c_void_p, ctypes.c_int, _DATATYPE, ctypes.c_void_p,
                                   ctypes.c_int, _DATATYPE, _COMM]

    def _mpi_allgather(send_address, count, datatype, recv_address, comm):
        return _library_allgather(send_address, count, datatype, recv_address, count, datatype, comm)
else:
    @intrinsic
    def _mpi_allgather(typingctx, send_address, count, datatype, recv_address, comm):
        """MPI_Allgather(send, count, datatype, recv, count, datatype, comm), called by symbol."""
        arguments = (send_address, count, datatype, recv_address, comm)
        if not all(isinstance(t, types.Integer) for t in arguments):
            return None
        # the C types: void *, int, MPI_Datatype, void *, int, MPI_Datatype, MPI_Comm
        pointer, c_int = types.voidptr, types.int32
        datatype_t, comm_t = ({4: types.int32, 8: types.int64}[ctypes.sizeof(c)] for c in (_DATATYPE, _COMM))

        def codegen(context, builder, signature, args):
            send, n, dtype, recv, handle = (context.cast(builder, value, of, to) for value, of, to in zip(
                args, signature.args, (types.uintp, c_int, datatype_t, types.uintp, comm_t)))
            c_types = [context.get_value_type(t) for t in (pointer, c_int, datatype_t, pointer, c_int,
                                                           datatype_t, comm_t)]
            function = cgutils.get_or_insert_function(
                builder.module, ir.FunctionType(context.get_value_type(c_int), c_types), "MPI_Allgather")
            send, recv = (builder.inttoptr(address, c_types[0]) for address in (send, recv))
            return builder.call(function, [send, n, dtype, recv, n, dtype, handle])
        return types.int32(*arguments), codegen


@njit(inline="always", error_model="numpy")
def allgather(send, recv, mpi):
    """MPI_Allgather of C-contiguous float64 arrays: every rank's ``send`` in rank order into
    ``recv`` (size ranks x send.size), on mpi = handles(comm). Returns the MPI error code (0:
    success)."""
    comm, double = mpi
    return _mpi_allgather(send.ctypes.data, send.size, double, recv.ctypes.data, comm)
