"""A monotonic clock for jitted code: both epoch loops time their steps, orderer and collectives.

Numba has no clock in nopython mode. ``seconds()`` calls the C library's ``clock_gettime`` with
the platform's CLOCK_MONOTONIC (the clock behind Python's ``time.perf_counter`` on Linux) through
LLVM IR; the JIT resolves the symbol in the running process, which has the C library loaded.
A call costs ~20 ns: twice per chunk of steps in the serial loop, a few times per step in the
MPI loop. Where the C library has no clock_gettime (Windows), seconds() is 0 and the traces'
compute/ordering/communication times read 0.
"""

import ctypes
import time

from llvmlite import ir
from numba import config, njit, types
from numba.core import cgutils
from numba.extending import intrinsic


@intrinsic
def _monotonic(typingctx):
    """clock_gettime(CLOCK_MONOTONIC) in seconds, as a float64."""
    def codegen(context, builder, signature, args):
        long = ir.IntType(8 * ctypes.sizeof(ctypes.c_long))  # struct timespec: time_t, long
        timespec = ir.LiteralStructType([ir.IntType(8 * ctypes.sizeof(ctypes.c_int64)), long])
        i32 = ir.IntType(32)
        clock_gettime = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(i32, [i32, timespec.as_pointer()]), "clock_gettime")
        spec = cgutils.alloca_once(builder, timespec)
        builder.call(clock_gettime, [ir.Constant(i32, time.CLOCK_MONOTONIC), spec])
        zero = ir.Constant(i32, 0)
        whole = builder.load(builder.gep(spec, [zero, zero]))
        nanos = builder.load(builder.gep(spec, [zero, ir.Constant(i32, 1)]))
        double = ir.DoubleType()
        return builder.fadd(builder.sitofp(whole, double),
                            builder.fmul(builder.sitofp(nanos, double), ir.Constant(double, 1e-9)))
    return types.float64(), codegen


# The same clock for Python code (CPython's perf_counter is clock_gettime(CLOCK_MONOTONIC) on
# Linux): calling the jitted seconds() from Python would compile it in every process, starting
# Numba's compiler in a warm run that loads everything else from the cache (~0.5 s a rank).
python_seconds = time.perf_counter

if config.DISABLE_JIT:
    seconds = time.perf_counter
elif hasattr(time, "CLOCK_MONOTONIC"):
    @njit(inline="always")
    def seconds():
        """Seconds on a monotonic clock (differences only are meaningful)."""
        return _monotonic()
else:
    @njit(inline="always")
    def seconds():
        """No clock_gettime here (Windows): the serial backend's compute/ordering split reads 0."""
        return 0.0
