"""The balancing kernels' per-example vector work, in explicit vector code: the dot product
<s, a - b> every sign decision rests on, the squared norm <a - b, a - b> (the scale of the
kernel-halving and sbw walks), the update s += eps (a - b) with ||s||_inf, and the update and the
dot product in one pass (the shared walk's update followed by its next pair's dot product).

Every function takes b = None for a vector v = a that is already the difference (the pair walk
over differences formed as the gradients come, engine.epoch_loop): then a alone is read, and
the results are bitwise those for (a, zeros), as a - 0.0 = a.

The dot product's association is fixed, so that every orderer, backend and the references in
tests/reference/orderers.py (``lane_dot``; the squared norm is lane_dot(a - b, a - b)) take the
same sign decisions, exact ties included:

- 16 lanes: lane l adds the terms s_k (a_k - b_k) with k = l, l + 16, l + 32, ... in order, over
  the first 16 * (d // 16) coordinates;
- the lanes are added as v_l = (lane_l + lane_{4+l}) + (lane_{8+l} + lane_{12+l}) for l < 4, then
  (v_0 + v_1) + (v_2 + v_3);
- the last d mod 16 terms are added to that one at a time, in order.

The update computes every s_k + eps (a_k - b_k) with the same IEEE operations as a plain loop
(no fast-math flags, so no fused multiply-add), and keeps the largest |s_k| in a vector register:
the epoch's balancing discrepancy needs only max_k |s_k| after each step, and a maximum is exact in
any order.

Why vector code: Numba's scalar form of the dot product (4, 8 or 16 partial sums) stays in scalar
registers, and at d = 128 it then cost more than the rest of a balancing step; the running
maximum, written as a loop, cannot be vectorized by LLVM without fast-math (docs/performance.md).
Vectors are <8 x double> (one AVX-512 register, two AVX2 ones) in mean balance and <4 x double>
in the pair walk (WIDE, NARROW below). Under NUMBA_DISABLE_JIT the same operations run as plain
Python.
"""

from llvmlite import ir
from numba import config, njit, types
from numba.core import cgutils
from numba.extending import intrinsic, overload

LANES = 16
# Doubles per vector: 8 (one AVX-512 register) where the rows are independent (mean balance);
# 4 in the pair walk, a chain of dependent passes whose 512-bit multiplies slowed the steps run
# between its calls by more than they saved (docs/performance.md).
WIDE, NARROW = 8, 4
_I32 = ir.IntType(32)
_DOUBLE = ir.DoubleType()


def _vector_type(width):
    return ir.VectorType(_DOUBLE, width)


def _vector_at(builder, address, offset, width):
    """Pointer to the vector of `width` doubles starting at double `offset` after `address`."""
    element = builder.gep(builder.inttoptr(address, _DOUBLE.as_pointer()), [offset])
    return builder.bitcast(element, _vector_type(width).as_pointer())


def _half(builder, vector, upper):
    """The lower or upper four lanes of an 8-lane vector."""
    lanes = ir.Constant(ir.VectorType(_I32, 4), [4, 5, 6, 7] if upper else [0, 1, 2, 3])
    return builder.shuffle_vector(vector, vector, lanes)


def _splat(builder, value, width):
    """A vector of `width` copies of the double `value`."""
    undefined = ir.Constant(_vector_type(width), ir.Undefined)
    lanes = builder.insert_element(undefined, value, ir.Constant(_I32, 0))
    return builder.shuffle_vector(lanes, lanes, ir.Constant(ir.VectorType(_I32, width), [0] * width))


def _zero_vector(builder, width):
    """A vector variable, on the stack, starting at zero."""
    return cgutils.alloca_once_value(builder, ir.Constant(_vector_type(width), [0.0] * width))


def _add_lanes(builder, accumulators):
    """The 16 lanes of the accumulator vectors (lanes 0-7 and 8-15, or four of 4) added in the
    module's order."""
    vectors = [builder.load(accumulator) for accumulator in accumulators]
    if len(vectors) == 2:
        vectors = [_half(builder, vector, upper) for vector in vectors for upper in (False, True)]
    v = builder.fadd(builder.fadd(vectors[0], vectors[1]), builder.fadd(vectors[2], vectors[3]))
    lane = [builder.extract_element(v, ir.Constant(_I32, i)) for i in range(4)]
    return builder.fadd(builder.fadd(lane[0], lane[1]), builder.fadd(lane[2], lane[3]))


def _largest_lane(builder, largest, width):
    """The largest lane of the vector variable `largest` (all lanes >= 0)."""
    vector = builder.load(largest)
    result = builder.extract_element(vector, ir.Constant(_I32, 0))
    for i in range(1, width):
        lane = builder.extract_element(vector, ir.Constant(_I32, i))
        result = builder.select(builder.fcmp_ordered(">", lane, result), lane, result)
    return result


def _difference(builder, a_value, b, offset, width):
    """a_value - (the vector of b at `offset`); a_value itself when b is None."""
    if b is None:
        return a_value
    return builder.fsub(a_value, builder.load(_vector_at(builder, b, offset, width), align=8))


def _addresses(signature, args, *positions):
    """args, with None for each of the given positions whose argument is None (no vector b)."""
    return [None if i in positions and signature.args[i] == types.none else arg
            for i, arg in enumerate(args)]


def _accumulate_dot(builder, accumulator, s_value, a, b, offset, width):
    """accumulator += s_value (a - b) for the vector of a and b at `offset` (b None: s_value a)."""
    a_value = builder.load(_vector_at(builder, a, offset, width), align=8)
    difference = _difference(builder, a_value, b, offset, width)
    builder.store(builder.fadd(builder.load(accumulator), builder.fmul(s_value, difference)), accumulator)


def _update_vector(builder, s, a, b, eps_vector, offset, largest, width, sums=None):
    """s += eps (a - b) (b None: s += eps a) for the vector at `offset`, its largest |s_k| into
    the vector variable `largest` and, with `sums`, sums += a; returns the new vector of s."""
    vector = _vector_type(width)
    fabs = cgutils.get_or_insert_function(builder.module, ir.FunctionType(vector, [vector]),
                                          f"llvm.fabs.v{width}f64")
    s_here = _vector_at(builder, s, offset, width)
    a_value = builder.load(_vector_at(builder, a, offset, width), align=8)
    difference = _difference(builder, a_value, b, offset, width)
    value = builder.fadd(builder.load(s_here, align=8), builder.fmul(eps_vector, difference))
    builder.store(value, s_here, align=8)
    magnitude, so_far = builder.call(fabs, [value]), builder.load(largest)
    builder.store(builder.select(builder.fcmp_ordered(">", magnitude, so_far), magnitude, so_far), largest)
    if sums is not None:
        sums_here = _vector_at(builder, sums, offset, width)
        builder.store(builder.fadd(builder.load(sums_here, align=8), a_value), sums_here, align=8)
    return value


@intrinsic
def _lane_sums(typingctx, s_address, a_address, b_address, blocks):
    """The 16-lane part of <s, a - b> over `blocks` blocks of 16 doubles at the three addresses."""
    def codegen(context, builder, signature, args):
        s, a, b, count = _addresses(signature, args, 2)
        accumulators = [_zero_vector(builder, NARROW) for _ in range(LANES // NARROW)]
        with cgutils.for_range(builder, count) as loop:
            base = builder.mul(loop.index, ir.Constant(loop.index.type, LANES))
            for q, accumulator in enumerate(accumulators):
                offset = builder.add(base, ir.Constant(base.type, q * NARROW))
                s_value = builder.load(_vector_at(builder, s, offset, NARROW), align=8)
                _accumulate_dot(builder, accumulator, s_value, a, b, offset, NARROW)
        return _add_lanes(builder, accumulators)

    return types.float64(s_address, a_address, b_address, blocks), codegen


@intrinsic
def _lane_squares(typingctx, a_address, b_address, blocks):
    """The 16-lane part of <a - b, a - b> over `blocks` blocks of 16 doubles at the two addresses."""
    def codegen(context, builder, signature, args):
        a, b, count = _addresses(signature, args, 1)
        accumulators = [_zero_vector(builder, NARROW) for _ in range(LANES // NARROW)]
        with cgutils.for_range(builder, count) as loop:
            base = builder.mul(loop.index, ir.Constant(loop.index.type, LANES))
            for q, accumulator in enumerate(accumulators):
                offset = builder.add(base, ir.Constant(base.type, q * NARROW))
                a_value = builder.load(_vector_at(builder, a, offset, NARROW), align=8)
                difference = _difference(builder, a_value, b, offset, NARROW)
                builder.store(builder.fadd(builder.load(accumulator), builder.fmul(difference, difference)),
                              accumulator)
        return _add_lanes(builder, accumulators)

    return types.float64(a_address, b_address, blocks), codegen


def _signed_update_codegen(accumulate, width):
    """Code of s += eps (a - b) over `count` blocks of `width` doubles, returning the largest
    |s_k| of them; with ``accumulate`` also sums += a (GraB's epoch sum of the gradients, same
    pass)."""
    def codegen(context, builder, signature, args):
        s, a, b, eps, count = _addresses(signature, args, 2)[:5]
        eps_vector, largest = _splat(builder, eps, width), _zero_vector(builder, width)
        with cgutils.for_range(builder, count) as loop:
            offset = builder.mul(loop.index, ir.Constant(loop.index.type, width))
            _update_vector(builder, s, a, b, eps_vector, offset, largest, width,
                           args[5] if accumulate else None)
        return _largest_lane(builder, largest, width)
    return codegen


@intrinsic
def _add_signed_blocks(typingctx, s_address, a_address, b_address, eps, blocks):
    """s += eps (a - b) over `blocks` blocks of NARROW doubles; returns the largest |s_k| of them."""
    return types.float64(s_address, a_address, b_address, eps, blocks), _signed_update_codegen(False, NARROW)


@intrinsic
def _add_signed_blocks_and_sum(typingctx, s_address, a_address, b_address, eps, blocks, sums_address):
    """s += eps (a - b) and sums += a over `blocks` blocks of WIDE doubles; returns the largest
    |s_k| of them."""
    return (types.float64(s_address, a_address, b_address, eps, blocks, sums_address),
            _signed_update_codegen(True, WIDE))


def _update_then_dot_codegen(accumulate, width):
    """Code of s += eps (a - b) (with ``accumulate`` also sums += a), then the 16-lane part of
    <s, next_a - next_b> with the new s, in one pass over `count` blocks of 16 doubles in vectors
    of `width`; returns (the largest |s_k| of them, the lanes added)."""
    def codegen(context, builder, signature, args):
        s, a, b, eps, next_a, next_b, count = _addresses(signature, args, 2, 5)[:7]
        eps_vector, largest = _splat(builder, eps, width), _zero_vector(builder, width)
        accumulators = [_zero_vector(builder, width) for _ in range(LANES // width)]
        with cgutils.for_range(builder, count) as loop:
            base = builder.mul(loop.index, ir.Constant(loop.index.type, LANES))
            for q, accumulator in enumerate(accumulators):
                offset = builder.add(base, ir.Constant(base.type, q * width))
                value = _update_vector(builder, s, a, b, eps_vector, offset, largest, width,
                                       args[7] if accumulate else None)
                _accumulate_dot(builder, accumulator, value, next_a, next_b, offset, width)
        result = (_largest_lane(builder, largest, width), _add_lanes(builder, accumulators))
        return context.make_tuple(builder, signature.return_type, result)
    return codegen


@intrinsic
def _add_signed_blocks_then_lane_sums(typingctx, s_address, a_address, b_address, eps, next_a_address,
                                      next_b_address, blocks):
    """s += eps (a - b), then the 16-lane part of <s, next_a - next_b> on the new s, over `blocks`
    blocks of 16 doubles in one pass; returns (the largest |s_k| of them, the lanes added)."""
    return (types.UniTuple(types.float64, 2)(s_address, a_address, b_address, eps, next_a_address,
                                             next_b_address, blocks), _update_then_dot_codegen(False, NARROW))


@intrinsic
def _add_signed_blocks_and_sum_then_lane_sums(typingctx, s_address, a_address, b_address, eps, next_a_address,
                                              next_b_address, blocks, sums_address):
    """_add_signed_blocks_then_lane_sums, and sums += a in the same pass."""
    return (types.UniTuple(types.float64, 2)(s_address, a_address, b_address, eps, next_a_address,
                                             next_b_address, blocks, sums_address),
            _update_then_dot_codegen(True, WIDE))


def _component(a, b, k):
    """(a - b)[k], or a[k] when b is None."""
    return a[k] if b is None else a[k] - b[k]


def _address(v):
    """Where the vector v starts (None stays None: no vector b)."""
    return None if v is None else v.ctypes.data


@overload(_component, inline="always")
def _component_jitted(a, b, k):
    if b == types.none:
        return lambda a, b, k: a[k]
    return lambda a, b, k: a[k] - b[k]


@overload(_address, inline="always")
def _address_jitted(v):
    if v == types.none:
        return lambda v: None
    return lambda v: v.ctypes.data


if config.DISABLE_JIT:
    def dot_with_difference(s, a, b):
        """<s, a - b> (b None: <s, a>) with the module's association, as plain Python."""
        d = s.shape[0]
        whole = d // LANES * LANES
        lanes = [0.0] * LANES
        for k in range(whole):
            lanes[k % LANES] += s[k] * _component(a, b, k)
        v = [(lanes[i] + lanes[4 + i]) + (lanes[8 + i] + lanes[12 + i]) for i in range(4)]
        total = (v[0] + v[1]) + (v[2] + v[3])
        for k in range(whole, d):
            total += s[k] * _component(a, b, k)
        return total

    def squared_norm_of_difference(a, b):
        """<a - b, a - b> (b None: <a, a>) with the module's association, as plain Python."""
        d = a.shape[0]
        whole = d // LANES * LANES
        lanes = [0.0] * LANES
        for k in range(whole):
            lanes[k % LANES] += _component(a, b, k) * _component(a, b, k)
        v = [(lanes[i] + lanes[4 + i]) + (lanes[8 + i] + lanes[12 + i]) for i in range(4)]
        total = (v[0] + v[1]) + (v[2] + v[3])
        for k in range(whole, d):
            total += _component(a, b, k) * _component(a, b, k)
        return total

    def add_signed_difference(s, a, b, eps):
        """s += eps (a - b) (b None: s += eps a); returns max_k |s_k| afterwards (plain Python)."""
        largest = 0.0
        for k in range(s.shape[0]):
            s[k] = s[k] + eps * _component(a, b, k)
            largest = max(largest, abs(s[k]))
        return largest

    def add_signed_difference_and_sum(s, a, b, eps, sums):
        """add_signed_difference(s, a, b, eps), and sums += a (plain Python)."""
        sums += a
        return add_signed_difference(s, a, b, eps)

    def add_signed_difference_then_dot(s, a, b, eps, next_a, next_b):
        """add_signed_difference(s, a, b, eps), then dot_with_difference(s, next_a, next_b)
        (plain Python)."""
        return add_signed_difference(s, a, b, eps), dot_with_difference(s, next_a, next_b)

    def add_signed_difference_and_sum_then_dot(s, a, b, eps, sums, next_a, next_b):
        """add_signed_difference_and_sum(s, a, b, eps, sums), then dot_with_difference(s, next_a,
        next_b) (plain Python)."""
        return add_signed_difference_and_sum(s, a, b, eps, sums), dot_with_difference(s, next_a, next_b)
else:
    # The vector intrinsics cover the first whole blocks of each row; these finish its tail one
    # coordinate at a time, with the same operations.
    @njit(inline="always", error_model="numpy")
    def _dot_tail(s, a, b, start, total):
        for k in range(start, s.shape[0]):
            total += s[k] * _component(a, b, k)
        return total

    @njit(inline="always", error_model="numpy")
    def _signed_tail(s, a, b, eps, start, largest):
        for k in range(start, s.shape[0]):
            value = s[k] + eps * _component(a, b, k)
            s[k] = value
            largest = max(largest, abs(value))
        return largest

    @njit(inline="always", error_model="numpy")
    def _sum_tail(sums, a, start):
        for k in range(start, sums.shape[0]):
            sums[k] += a[k]

    @njit(inline="always", error_model="numpy")
    def dot_with_difference(s, a, b):
        """<s, a - b> (b None: <s, a>) with the module's association; s, a and b contiguous, of
        one length."""
        whole = s.shape[0] // LANES
        return _dot_tail(s, a, b, whole * LANES,
                         _lane_sums(s.ctypes.data, a.ctypes.data, _address(b), whole))

    @njit(inline="always", error_model="numpy")
    def squared_norm_of_difference(a, b):
        """<a - b, a - b> (b None: <a, a>) with the module's association; a and b contiguous, of
        one length."""
        whole = a.shape[0] // LANES
        total = _lane_squares(a.ctypes.data, _address(b), whole)
        for k in range(whole * LANES, a.shape[0]):
            total += _component(a, b, k) * _component(a, b, k)
        return total

    @njit(inline="always", error_model="numpy")
    def add_signed_difference(s, a, b, eps):
        """s += eps (a - b) (b None: s += eps a); returns max_k |s_k| afterwards. s, a and b
        contiguous, of one length."""
        whole = s.shape[0] // NARROW
        largest = _add_signed_blocks(s.ctypes.data, a.ctypes.data, _address(b), eps, whole)
        return _signed_tail(s, a, b, eps, whole * NARROW, largest)

    @njit(inline="always", error_model="numpy")
    def add_signed_difference_and_sum(s, a, b, eps, sums):
        """add_signed_difference(s, a, b, eps), and sums += a in the same pass (all of one length)."""
        whole = s.shape[0] // WIDE
        largest = _add_signed_blocks_and_sum(s.ctypes.data, a.ctypes.data, _address(b), eps, whole,
                                             sums.ctypes.data)
        _sum_tail(sums, a, whole * WIDE)
        return _signed_tail(s, a, b, eps, whole * WIDE, largest)

    @njit(inline="always", error_model="numpy")
    def add_signed_difference_then_dot(s, a, b, eps, next_a, next_b):
        """add_signed_difference(s, a, b, eps), then dot_with_difference(s, next_a, next_b), in
        one pass over s (the walk's next dot product starts on the new s while it is in
        registers); returns (max_k |s_k|, the dot product). All contiguous, of one length."""
        whole = s.shape[0] // LANES
        largest, total = _add_signed_blocks_then_lane_sums(s.ctypes.data, a.ctypes.data, _address(b), eps,
                                                           next_a.ctypes.data, _address(next_b), whole)
        largest = _signed_tail(s, a, b, eps, whole * LANES, largest)
        return largest, _dot_tail(s, next_a, next_b, whole * LANES, total)

    @njit(inline="always", error_model="numpy")
    def add_signed_difference_and_sum_then_dot(s, a, b, eps, sums, next_a, next_b):
        """add_signed_difference_and_sum(s, a, b, eps, sums), then dot_with_difference(s, next_a,
        next_b), in one pass over s; returns (max_k |s_k|, the dot product)."""
        whole = s.shape[0] // LANES
        largest, total = _add_signed_blocks_and_sum_then_lane_sums(
            s.ctypes.data, a.ctypes.data, _address(b), eps, next_a.ctypes.data, _address(next_b),
            whole, sums.ctypes.data)
        _sum_tail(sums, a, whole * LANES)
        largest = _signed_tail(s, a, b, eps, whole * LANES, largest)
        return largest, _dot_tail(s, next_a, next_b, whole * LANES, total)
