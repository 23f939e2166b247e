"""Software prefetch of data rows that coming SGD steps will read.

A step reads one randomly placed row of A per example; once the data set is larger than the
caches each of those reads waits on memory (~200 ns for a 1 KB row here, a third of a logistic
regression step at d = 128). The order of an epoch is known before it starts, so the step loop
asks the CPU to start fetching the rows it will read engine.ROWS_AHEAD rows later (or at the
next step, if that is later) into L2 (LLVM's ``llvm.prefetch``: a hint, never a fault, no effect
on any result) while it computes the current ones.
"""

from llvmlite import ir
from numba import config, njit, types
from numba.core import cgutils
from numba.extending import intrinsic

CACHE_LINE = 64  # bytes; a longer line only means some hints are redundant


@intrinsic
def _prefetch(typingctx, address):
    """Prefetch the cache line at ``address`` (an integer) for reading, into L2 and beyond."""
    def codegen(context, builder, signature, args):
        byte_pointer, i32 = ir.IntType(8).as_pointer(), ir.IntType(32)
        signature_ir = ir.FunctionType(ir.VoidType(), [byte_pointer, i32, i32, i32])
        fn = cgutils.get_or_insert_function(builder.module, signature_ir, "llvm.prefetch.p0i8")
        # rw = 0 (read), locality = 1 (x86: prefetcht2, not into L1), cache type = 1 (data).
        # Measured: rr's serial epoch 5-15 % faster than with locality 3 (prefetcht0, into L1),
        # likely because a step's 128 lines in flight to L1 hold its few fill buffers, which the
        # step's own loads and stores need.
        builder.call(fn, [builder.inttoptr(args[0], byte_pointer), ir.Constant(i32, 0),
                          ir.Constant(i32, 1), ir.Constant(i32, 1)])
        return context.get_dummy_value()
    return types.void(address), codegen


if config.DISABLE_JIT:
    def prefetch_row(A, i):
        """Without the JIT nothing can be prefetched (and nothing needs to be)."""
else:
    @njit(inline="always", error_model="numpy")
    def prefetch_row(A, i):
        """Hint the CPU to fetch row i of the C-contiguous 2-d array A into the caches: every
        line the row touches (a row that does not start on a line touches one more)."""
        start = A.ctypes.data + i * A.strides[0]
        first = start - start % CACHE_LINE
        for line in range(first, start + A.shape[1] * A.itemsize, CACHE_LINE):
            _prefetch(line)
