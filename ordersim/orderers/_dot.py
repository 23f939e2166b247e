"""<s, a - b>, the dot product every balancing sign decision rests on, in explicit vector code.

The association is fixed, so that every orderer, backend and the references in
tests/reference/orderers.py (``lane_dot``) take the same sign decisions, exact ties included:

- 16 lanes: lane l adds the terms s_k (a_k - b_k) with k = l, l + 16, l + 32, ... in order, over
  the first 16 * (d // 16) coordinates;
- the lanes are added as v_l = (lane_l + lane_{4+l}) + (lane_{8+l} + lane_{12+l}) for l < 4, then
  (v_0 + v_1) + (v_2 + v_3);
- the last d mod 16 terms are added to that one at a time, in order.

Why vector code: Numba's scalar form of any lane count (4, 8 or 16 partial sums) stays in scalar
registers, and at d = 128 the dot product then costs more than the rest of a balancing step
(docs/performance.md). Here the lanes are four <4 x double> accumulators (LLVM IR, no fast-math
flags: each lane's additions are IEEE additions in the order above). Under NUMBA_DISABLE_JIT the
same association runs as plain Python.
"""

from llvmlite import ir
from numba import config, njit, types
from numba.core import cgutils
from numba.extending import intrinsic

LANES = 16
_VECTOR = 4  # doubles per vector register used (AVX2 and wider)


@intrinsic
def _lane_sums(typingctx, s_address, a_address, b_address, blocks):
    """The 16-lane part of <s, a - b> over `blocks` blocks of 16 doubles at the three addresses."""
    def codegen(context, builder, signature, args):
        double = ir.DoubleType()
        vector = ir.VectorType(double, _VECTOR)
        double_pointer = double.as_pointer()
        s, a, b = (builder.inttoptr(address, double_pointer) for address in args[:3])
        accumulators = [cgutils.alloca_once_value(builder, ir.Constant(vector, [0.0] * _VECTOR))
                        for _ in range(LANES // _VECTOR)]
        with cgutils.for_range(builder, args[3]) as loop:
            base = builder.mul(loop.index, ir.Constant(loop.index.type, LANES))
            for q, accumulator in enumerate(accumulators):
                offset = builder.add(base, ir.Constant(base.type, q * _VECTOR))

                def load(pointer):
                    element = builder.gep(pointer, [offset])
                    return builder.load(builder.bitcast(element, vector.as_pointer()), align=8)

                term = builder.fmul(load(s), builder.fsub(load(a), load(b)))
                builder.store(builder.fadd(builder.load(accumulator), term), accumulator)
        acc = [builder.load(accumulator) for accumulator in accumulators]
        v = builder.fadd(builder.fadd(acc[0], acc[1]), builder.fadd(acc[2], acc[3]))
        lane = [builder.extract_element(v, ir.Constant(ir.IntType(32), i)) for i in range(_VECTOR)]
        return builder.fadd(builder.fadd(lane[0], lane[1]), builder.fadd(lane[2], lane[3]))

    return types.float64(s_address, a_address, b_address, blocks), codegen


if config.DISABLE_JIT:
    def dot_with_difference(s, a, b):
        """<s, a - b> with the module's association, as plain Python."""
        d = s.shape[0]
        whole = d // LANES * LANES
        lanes = [0.0] * LANES
        for k in range(whole):
            lanes[k % LANES] += s[k] * (a[k] - b[k])
        v = [(lanes[i] + lanes[4 + i]) + (lanes[8 + i] + lanes[12 + i]) for i in range(_VECTOR)]
        total = (v[0] + v[1]) + (v[2] + v[3])
        for k in range(whole, d):
            total += s[k] * (a[k] - b[k])
        return total
else:
    @njit(inline="always", error_model="numpy")
    def dot_with_difference(s, a, b):
        """<s, a - b> with the module's association; s, a and b contiguous, of one length."""
        d = s.shape[0]
        total = _lane_sums(s.ctypes.data, a.ctypes.data, b.ctypes.data, d // LANES)
        for k in range(d // LANES * LANES, d):
            total += s[k] * (a[k] - b[k])
        return total
