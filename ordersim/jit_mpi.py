"""MPI calls from Numba-compiled code: the MPI backend's epoch loop runs inside one jitted function.

mpi4py has already loaded and initialized the MPI library. Its C functions are looked up through
the mpi4py extension module (the dynamic linker searches a library's dependencies, libmpi among
them) and declared as ctypes functions, which Numba compiles into direct calls: an Allgather from
jitted code skips the ~1 µs that every Python-level call costs. Handles come from mpi4py
(``MPI._handleof``): an int for MPICH, a pointer for Open MPI, passed as an integer of the same
size either way.
"""

import ctypes

from mpi4py import MPI
from numba import njit


def _handle_type(cls):
    return {4: ctypes.c_int32, 8: ctypes.c_int64}[MPI._sizeof(cls)]


_library = ctypes.CDLL(MPI.__file__)
_allgather = _library.MPI_Allgather
_allgather.restype = ctypes.c_int
_allgather.argtypes = [ctypes.c_void_p, ctypes.c_int, _handle_type(MPI.Datatype),
                       ctypes.c_void_p, ctypes.c_int, _handle_type(MPI.Datatype), _handle_type(MPI.Comm)]

def _handle(obj, cls) -> int:
    # MPICH's handles are C ints with the high bit set (0x84000000...): as signed values
    return _handle_type(cls)(MPI._handleof(obj)).value


DOUBLE = _handle(MPI.DOUBLE, MPI.Datatype)


def comm_handle(comm) -> int:
    """The communicator's handle, as the jitted functions take it."""
    return _handle(comm, MPI.Comm)


@njit(inline="always", error_model="numpy")
def allgather(send, recv, comm):
    """MPI_Allgather of C-contiguous float64 arrays: every rank's ``send`` in rank order into
    ``recv`` (size ranks x send.size). Returns the MPI error code (0: success)."""
    return _allgather(send.ctypes.data, send.size, DOUBLE, recv.ctypes.data, send.size, DOUBLE, comm)
