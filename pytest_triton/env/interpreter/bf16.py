"""Interpreter fixes for bfloat16: arithmetic, constants, casts, reductions, tl.dot and atomics
computed in float32 and rounded to bfloat16 to nearest even, as a GPU computes them (see
fixes.FIXES)."""

from __future__ import annotations

from .base import MISSING, Patches, modules

# --------------------------------------------------------------------------------------------
# bf16: compute in float32, round to nearest even
#
# The interpreter stores bfloat16 as its uint16 bit pattern (NumPy has no bfloat16) and most of
# its operations apply NumPy to that storage directly: 1.0 + 1.0 adds 0x3F80 + 0x3F80. A GPU
# computes bf16 arithmetic in float32 and rounds the result to bf16, to nearest even; so do these.


def bf16_helpers():
    np, tl, ti = modules()

    uint16 = np.dtype(np.uint16)

    def is_bf16(handle) -> bool:
        # the storage too: the interpreter types a comparison's bool result as its operands. The
        # storage first: it is the cheaper test, and it rules out nearly every operand (this runs
        # for every operation of every interpreted program).
        if getattr(getattr(handle, "data", None), "dtype", None) != uint16:
            return False
        dtype = getattr(handle, "dtype", None)
        return getattr(dtype, "scalar", dtype) == tl.bfloat16

    def to_f32(bits):
        return (np.asarray(bits).astype(np.uint32) << np.uint32(16)).view(np.float32)

    def to_bf16(values):
        x = np.asarray(values, dtype=np.float32)
        nan = np.isnan(x)
        bits = np.where(nan, np.uint32(0), x.view(np.uint32))
        # round to nearest even: add 0x7FFF plus the lowest bit that is kept, then drop 16 bits
        rounded = (bits + (np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1)))) >> np.uint32(16)
        # NaN: the GPU's canonical bf16 NaN
        return np.where(nan, np.uint32(0x7FFF), rounded).astype(np.uint16)

    def value(handle):
        return to_f32(handle.data) if is_bf16(handle) else handle.data

    return np, tl, ti, is_bf16, to_f32, to_bf16, value


def _bf16_probe_handles():
    np, tl, ti = modules()
    builder = ti.InterpreterBuilder()
    one = ti.TensorHandle(np.array([0x3F80], dtype=np.uint16), tl.bfloat16)  # 1.0
    return np, tl, ti, builder, one


def needs_bf16_arithmetic() -> bool:
    np, tl, ti, builder, one = _bf16_probe_handles()
    return int(builder.create_fadd(one, one).data[0]) != 0x4000  # 2.0


def apply_bf16_arithmetic(p: Patches) -> None:
    np, tl, ti, is_bf16, to_f32, to_bf16, value = bf16_helpers()
    cls = ti.InterpreterBuilder
    bitwise = (np.bitwise_and, np.bitwise_or, np.bitwise_xor, np.left_shift, np.right_shift)

    def result(out):
        out = np.asarray(out)
        if out.dtype == np.bool_:  # comparisons
            return ti.TensorHandle(out, tl.int1)
        return ti.TensorHandle(to_bf16(out), tl.bfloat16)

    original_binary = cls.binary_op

    def binary_op(self, lhs, rhs, op):
        if op in bitwise or not (is_bf16(lhs) or is_bf16(rhs)):
            return original_binary(self, lhs, rhs, op)
        return result(op(value(lhs), value(rhs)))

    original_unary = cls.unary_op

    def unary_op(self, arg, op):
        if not is_bf16(arg):
            return original_unary(self, arg, op)
        return result(op(value(arg)))

    original_ternary = cls.ternary_op

    def ternary_op(self, lhs, rhs, other, op):
        # select (np.where) only moves bit patterns, which is right as it is
        if op is np.where or not any(is_bf16(h) for h in (lhs, rhs, other)):
            return original_ternary(self, lhs, rhs, other, op)
        return result(op(value(lhs), value(rhs), value(other)))

    original_fma = cls.create_fma

    def create_fma(self, x, y, z):
        if not any(is_bf16(h) for h in (x, y, z)):
            return original_fma(self, x, y, z)
        # a product of two bf16 values is exact in float32, so this rounds once to float32
        return result(value(x) * value(y) + value(z))

    p.set_attr(cls, "binary_op", binary_op)
    p.set_attr(cls, "unary_op", unary_op)
    p.set_attr(cls, "ternary_op", ternary_op)
    p.set_attr(cls, "create_fma", create_fma)


def needs_bf16_constants() -> bool:
    np, tl, ti, builder, _ = _bf16_probe_handles()
    try:
        return int(builder.get_bf16(1.5).data[0]) != 0x3FC0
    except AttributeError:  # the builder has no get_bf16 at all
        return True


def apply_bf16_constants(p: Patches) -> None:
    np, tl, ti, is_bf16, to_f32, to_bf16, value = bf16_helpers()

    def get_bf16(self, value):
        # Triton's semantics ask the builder for a bf16 constant (x * 1.5 with x bf16)
        return ti.TensorHandle(to_bf16(np.array([value], dtype=np.float32)), tl.bfloat16)

    p.set_attr(ti.InterpreterBuilder, "get_bf16", get_bf16)


def needs_bf16_casts() -> bool:
    np, tl, ti, builder, _ = _bf16_probe_handles()
    # 1 + 2^-8 + 2^-16 lies above the midpoint between two bf16 values: to nearest gives 0x3F81,
    # truncation 0x3F80; and int32 3 must become 3.0 (0x4040), not the bit pattern 3.
    f32 = ti.TensorHandle(np.array([0x3F808080], dtype=np.uint32).view(np.float32), tl.float32)
    i32 = ti.TensorHandle(np.array([3], dtype=np.int32), tl.int32)
    return int(builder.cast_impl(f32, tl.bfloat16).data[0]) != 0x3F81 or \
        int(builder.cast_impl(i32, tl.bfloat16).data[0]) != 0x4040


def apply_bf16_casts(p: Patches) -> None:
    np, tl, ti, is_bf16, to_f32, to_bf16, value = bf16_helpers()
    cls = ti.InterpreterBuilder
    original_cast = cls.cast_impl

    def cast_impl(self, src, dst_type):
        src_ty, dst_ty = src.dtype.scalar, dst_type.scalar
        unchanged = src_ty == dst_ty or tl.bfloat16 not in (src_ty, dst_ty)
        if unchanged or (src_ty == tl.bfloat16 and not is_bf16(src)):
            return original_cast(self, src, dst_type)
        if src_ty == tl.bfloat16:
            widened = ti.TensorHandle(to_f32(src.data), tl.float32)
            return widened if dst_ty == tl.float32 else original_cast(self, widened, dst_type)
        # to bf16 through float32 (exact from fp16 and small ints; torch rounds twice from fp64
        # and large ints the same way), then to nearest even
        return ti.TensorHandle(to_bf16(np.asarray(src.data).astype(np.float32)), tl.bfloat16)

    original_fp_to_fp = cls.create_fp_to_fp
    rtz = getattr(getattr(ti._ir, "ROUNDING_MODE", None), "RTZ", MISSING)
    plain_floats = (tl.float16, tl.float32, tl.float64)

    def create_fp_to_fp(self, src, dst_type, rounding_mode):
        src_ty, dst_ty = src.dtype.scalar, dst_type.scalar
        other = dst_ty if src_ty == tl.bfloat16 else src_ty
        if tl.bfloat16 not in (src_ty, dst_ty) or other not in plain_floats:
            return original_fp_to_fp(self, src, dst_type, rounding_mode)  # fp8 and others
        if dst_ty == tl.bfloat16 and rounding_mode == rtz:
            x = np.asarray(src.data).astype(np.float32)
            bits = (x.view(np.uint32) >> np.uint32(16)).astype(np.uint16)
            return ti.TensorHandle(np.where(np.isnan(x), np.uint16(0x7FFF), bits), tl.bfloat16)
        return self.cast_impl(src, dst_type)

    p.set_attr(cls, "cast_impl", cast_impl)
    p.set_attr(cls, "create_fp_to_fp", create_fp_to_fp)


def needs_bf16_reductions() -> bool:
    np, tl, ti, _, _ = _bf16_probe_handles()
    data = ti.TensorHandle(np.array([0x3F80, 0x3F80], dtype=np.uint16), tl.bfloat16)
    t = tl.tensor(data, tl.block_type(tl.bfloat16, [2]))
    out = ti.ReduceOps(0, tl.standard._sum_combine, False).sum(t)
    return int(np.asarray(out.handle.data).reshape(-1)[0]) != 0x4000


def apply_bf16_reductions(p: Patches) -> None:
    np, tl, ti, is_bf16, to_f32, to_bf16, value = bf16_helpers()

    original_sum = ti.ReduceOps.sum

    def reduce_sum(self, input):
        if input.dtype != tl.bfloat16:
            return original_sum(self, input)
        # accumulated in float32, rounded once, as torch.sum does for bf16
        total = np.sum(to_f32(input.handle.data), axis=self.axis, keepdims=self.keep_dims, dtype=np.float32)
        return self.to_tensor(to_bf16(total), input.dtype)

    original_min_max = ti.ReduceOps.min_max

    def min_max(self, input, val_reduce_op, idx_reduce_op=None):
        tensor = input[0] if isinstance(input, tuple) else input
        if tensor.dtype != tl.bfloat16:
            return original_min_max(self, input, val_reduce_op, idx_reduce_op)
        # bf16 is sign-magnitude: its bit patterns do not order as its values do
        values = to_f32(tensor.handle.data)
        val = idx = None
        if val_reduce_op:
            val = self.to_tensor(to_bf16(val_reduce_op(values, axis=self.axis, keepdims=self.keep_dims)),
                                 tensor.dtype)
        if idx_reduce_op:
            idx = self.to_tensor(idx_reduce_op(values, axis=self.axis, keepdims=self.keep_dims), tl.int32)
        if val is not None and idx is not None:
            return val, idx
        return val if val is not None else idx

    def scan(original, numpy_op):
        def run(self, input):
            if input.dtype != tl.bfloat16:
                return original(self, input)
            out = numpy_op(to_f32(input.handle.data), axis=self.axis, dtype=np.float32)
            return [self.to_tensor(to_bf16(out), input.dtype)]
        return run

    p.set_attr(ti.ReduceOps, "sum", reduce_sum)
    p.set_attr(ti.ReduceOps, "min_max", min_max)
    p.set_attr(ti.ScanOps, "cumsum", scan(ti.ScanOps.cumsum, np.cumsum))
    p.set_attr(ti.ScanOps, "cumprod", scan(ti.ScanOps.cumprod, np.cumprod))


def needs_bf16_dot() -> bool:
    np, tl, ti, builder, one = _bf16_probe_handles()
    a = ti.TensorHandle(one.data.reshape(1, 1), tl.bfloat16)
    acc = ti.TensorHandle(np.zeros((1, 1), dtype=np.float32), tl.float32)
    return float(builder.create_dot(a, a, acc, None, 0).data[0, 0]) != 1.0


def apply_bf16_dot(p: Patches) -> None:
    np, tl, ti, is_bf16, to_f32, to_bf16, value = bf16_helpers()
    cls = ti.InterpreterBuilder
    original = cls.create_dot

    def widen(h):
        return ti.TensorHandle(to_f32(h.data), tl.float32) if is_bf16(h) else h

    def create_dot(self, a, b, d, input_precision, max_num_imprecise_acc):
        if not any(is_bf16(h) for h in (a, b, d)):
            return original(self, a, b, d, input_precision, max_num_imprecise_acc)
        # products of bf16 values are exact in float32; the sum is accumulated in float32
        out = original(self, widen(a), widen(b), widen(d), input_precision, max_num_imprecise_acc)
        return ti.TensorHandle(to_bf16(out.data), tl.bfloat16) if is_bf16(d) else out

    p.set_attr(cls, "create_dot", create_dot)


def needs_bf16_atomics() -> bool:
    import torch  # import time: probed when the fixes install, not when the plugin loads

    np, tl, ti, builder, one = _bf16_probe_handles()
    target = torch.zeros(1, dtype=torch.bfloat16)
    ptr = ti.TensorHandle(np.array([target.data_ptr()], dtype=np.uint64), tl.pointer_type(tl.bfloat16))
    mask = ti.TensorHandle(np.array([True]), tl.int1)
    sem = ti._ir.MEM_SEMANTIC.ACQUIRE_RELEASE
    try:
        builder.create_atomic_rmw(ti._ir.ATOMIC_OP.FADD, ptr, one, mask, sem, None)
    except (ValueError, TypeError, RuntimeError):
        return True
    return target.item() != 1.0


def apply_bf16_atomics(p: Patches) -> None:
    np, tl, ti, is_bf16, to_f32, to_bf16, value = bf16_helpers()
    cls = ti.InterpreterBuilder
    original = cls.create_atomic_rmw
    fadd = ti._ir.ATOMIC_OP.FADD  # Triton's semantics allow bf16 atomics for add only

    def create_atomic_rmw(self, rmwOp, ptr, val, mask, sem, scope):
        if not is_bf16(val) or rmwOp != fadd:
            return original(self, rmwOp, ptr, val, mask, sem, scope)
        # Triton's native atomics have no 16-bit float case. Programs run one at a time under the
        # interpreter, so a read-modify-write per element, in order, is atomic; element by element
        # so that lanes hitting the same address all count.
        ptrs = np.broadcast_to(ptr.data, val.data.shape)
        active = np.broadcast_to(mask.data, val.data.shape)
        old = np.zeros(val.data.shape, dtype=np.uint16)
        new_values = to_f32(val.data)
        for index in np.ndindex(val.data.shape):
            if not active[index]:
                continue
            address = np.array([ptrs[index]], dtype=np.uint64)
            yes = np.array([True])
            current = ti._interpreter.load(address, yes, np.zeros(1, dtype=np.uint16), np.dtype(np.uint16))
            old[index] = current[0]
            updated = to_bf16(to_f32(current) + new_values[index])
            ti._interpreter.store(address, updated, yes)
        return ti.TensorHandle(old, tl.bfloat16)

    p.set_attr(cls, "create_atomic_rmw", create_atomic_rmw)
