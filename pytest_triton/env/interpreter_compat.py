"""Compatibility fixes that let Triton's interpreter (TRITON_INTERPRET=1) run real kernel libraries.

Kernel libraries (RMSNorm, RoPE, SwiGLU, cross-entropy, layer norm, ...) written for the GPU hit
gaps in Triton's interpreter that have nothing to do with their correctness: float arguments
arrive as Python floats, libdevice calls return None, bfloat16 arithmetic runs on the raw uint16
bits, `range()` loop indices are Python ints, a multi-config `@triton.autotune` tries to time its
configs on a driver that does not exist. This module patches the interpreter, in this process,
so such kernels run as they would on a GPU:

- `install() -> list[str]`: applies the fixes that the installed Triton needs (each is detected by
  probing the interpreter's behaviour, not by its version string) and returns their names.
  Idempotent; does nothing unless TRITON_INTERPRET=1 is set (Triton reads it when a kernel is
  decorated, so it must already be set, and install() must run before user kernels launch).
- `uninstall()`: undoes every fix (for tests).
- `installed()`, `status()`: which fixes are applied; why each other one is not.
- `FIXES`: each fix, what it fixes, which Triton versions need it, the upstream issue.
- `REMAINING_GAPS`: what still cannot run under the interpreter with the fixes applied, keyed as
  pytest_triton's interpreter gaps are.

Every patch touches only the interpreter's own classes and functions, Triton's libdevice modules
(whose replacements pass a GPU compilation's arguments through unchanged) and, for an autotuner,
only kernels that are interpreted; so a process that also compiles for a GPU is not affected.

Self-contained on purpose: it imports nothing from pytest_triton, so it can move with the package.
"""

from __future__ import annotations

import ast
import functools
import math
import os
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["FIXES", "REMAINING_GAPS", "Fix", "install", "installed", "status", "uninstall"]

_MISSING = object()


def interpreting() -> bool:
    """True when TRITON_INTERPRET asks for the interpreter (read as Triton reads it)."""
    return os.environ.get("TRITON_INTERPRET", "0").strip().lower() in ("1", "true", "on", "yes")


def _modules():
    """Triton's interpreter and language modules, imported only when a fix is probed or applied,
    so that importing this module imports no Triton (the plugin decides on the interpreter first)."""
    import numpy as np
    import triton.language as tl
    from triton.runtime import interpreter as ti

    return np, tl, ti


# --------------------------------------------------------------------------------------------
# Undo records


class _Patches:
    """Attribute and dict-entry replacements, undone in reverse order."""

    def __init__(self) -> None:
        self._undo: list[Callable[[], None]] = []

    def set_attr(self, obj, name: str, value) -> None:
        # vars(): a class's own entry, not an inherited one, so that undo deletes what was added
        old = vars(obj).get(name, _MISSING)
        setattr(obj, name, value)

        def undo():
            if old is _MISSING:
                delattr(obj, name)
            else:
                setattr(obj, name, old)

        self._undo.append(undo)

    def set_item(self, mapping: dict, key, value) -> None:
        old = mapping.get(key, _MISSING)
        mapping[key] = value

        def undo():
            if old is _MISSING:
                mapping.pop(key, None)
            else:
                mapping[key] = old

        self._undo.append(undo)

    def on_undo(self, fn: Callable[[], None]) -> None:
        self._undo.append(fn)

    def undo(self) -> None:
        while self._undo:
            self._undo.pop()()


def _clear_rewritten(ti) -> None:
    # The interpreter caches each kernel's rewritten source; a change to the rewriting must reach
    # kernels that already ran.
    cache = getattr(getattr(ti, "InterpretedFunction", None), "rewritten_fn", None)
    if isinstance(cache, dict):
        cache.clear()


# --------------------------------------------------------------------------------------------
# float_args: float scalar arguments as fp32 tensors


def _needs_float_args() -> bool:
    _, tl, ti = _modules()
    return not isinstance(ti._implicit_cvt(0.5), tl.tensor)


def _apply_float_args(p: _Patches) -> None:
    np, tl, ti = _modules()
    original = ti._implicit_cvt

    def implicit_cvt(arg):
        # A GPU launch passes a Python float as an fp32 scalar (Triton mangles it as "fp32");
        # the interpreter left it a Python float, which has no .to() and promotes differently.
        if isinstance(arg, float):
            return tl.tensor(ti.TensorHandle(np.array([arg], dtype=np.float32), tl.float32), tl.float32)
        return original(arg)

    # GridExecutor and the tuple case look _implicit_cvt up as a module global at each call
    p.set_attr(ti, "_implicit_cvt", implicit_cvt)


# --------------------------------------------------------------------------------------------
# annotated_scalar_args: a scalar argument takes its parameter's annotated type


def _annotated_type(annotation, tl):
    """The Triton scalar type an annotation names (tl.int64, "tl.int64" under postponed
    annotations, "i64"), or None (none, tl.constexpr, a pointer, anything else)."""
    if isinstance(annotation, tl.dtype):
        return None if isinstance(annotation, (tl.pointer_type, tl.block_type)) else annotation
    if not isinstance(annotation, str):
        return None
    name = annotation.strip()
    for prefix in ("triton.language.", "tl."):
        if name.startswith(prefix):
            name = name[len(prefix):]
    named = getattr(tl, name, None)
    if isinstance(named, tl.dtype) and not isinstance(named, (tl.pointer_type, tl.block_type)):
        return named
    short = {"i1": "int1", "i8": "int8", "i16": "int16", "i32": "int32", "i64": "int64", "u8": "uint8",
             "u16": "uint16", "u32": "uint32", "u64": "uint64", "fp16": "float16", "bf16": "bfloat16",
             "fp32": "float32", "fp64": "float64"}
    return getattr(tl, short[name]) if name in short else None


def _scalar_tensor(value, dtype):
    """A Python scalar as a GPU launch passes it for a parameter of type dtype."""
    np, tl, ti = _modules()
    if dtype == tl.bfloat16:
        bits = _bf16_helpers()[5](np.array([value], dtype=np.float32))
        return tl.tensor(ti.TensorHandle(bits, tl.bfloat16), tl.bfloat16)
    if isinstance(value, float):
        data = np.array([value], dtype=np.float64)
    else:
        data = np.array([value], dtype=np.uint64 if value >= 2**63 else np.int64)
    # integers wrap into the parameter's width as the launcher's C conversion does
    data = data.astype(ti._get_np_dtype(dtype))
    return tl.tensor(ti.TensorHandle(data, dtype), dtype)


def _needs_annotated_scalar_args() -> bool:
    np, tl, ti = _modules()
    seen: list = []
    namespace = {"tl": tl, "seen": seen}
    # exec'd, so the interpreter finds no source to rewrite and runs it as it is: enough to see
    # what an annotated int argument arrives as
    exec("def probe(n: tl.int64):\n    seen.append(n.dtype)\n", namespace)
    ti.InterpretedFunction(namespace["probe"])[(1, )](5)
    return seen[0] != tl.int64


def _apply_annotated_scalar_args(p: _Patches) -> None:
    import inspect

    np, tl, ti = _modules()
    original = ti.GridExecutor.__call__

    def call(self, *args, **kwargs):
        # Libraries annotate parameters (stride: tl.int64) so that products such as row * stride
        # do not overflow int32; the interpreter typed every int by its value (int32) and so
        # wrapped silently. Convert annotated Python scalars as a GPU launch would.
        try:
            annotations = inspect.get_annotations(self.fn)
        except (TypeError, AttributeError):
            annotations = getattr(self.fn, "__annotations__", {}) or {}
        types = {name: t for name, a in annotations.items() if (t := _annotated_type(a, tl)) is not None}
        if types:
            bound = inspect.signature(self.fn).bind_partial(*args, **kwargs)
            for name, dtype in types.items():
                value = bound.arguments.get(name)
                if isinstance(value, (bool, int, float)):
                    bound.arguments[name] = _scalar_tensor(value, dtype)
            args, kwargs = bound.args, bound.kwargs
        return original(self, *args, **kwargs)

    p.set_attr(ti.GridExecutor, "__call__", call)


# --------------------------------------------------------------------------------------------
# loop_index_tensors: range() / tl.range() loop indices as int32/int64 tensors

_LOOP_HELPER = "_pytest_triton_loop_indices"

_LOOP_PROBE = """
def probe(sink):
    for i in range(1):
        sink.append(i)
"""


def _needs_loop_index_tensors() -> bool:
    _, tl, ti = _modules()
    tree = ti.FunctionRewriter.ast_transformer.visit(ast.parse(_LOOP_PROBE))
    ast.fix_missing_locations(tree)
    namespace: dict = {}
    exec(compile(tree, "<pytest-triton loop probe>", "exec"), dict(vars(ti)), namespace)
    sink: list = []
    namespace["probe"](sink)
    return not isinstance(sink[0], tl.tensor)


def _is_range_call(node) -> bool:
    # range(...) and tl.range(...) loops are runtime loops on a GPU, whose index is a tensor;
    # tl.static_range(...) is unrolled there and its index stays a constexpr, so it is left alone.
    if not isinstance(node, ast.Call):
        return False
    func = node.func
    return (isinstance(func, ast.Name) and func.id == "range") or \
        (isinstance(func, ast.Attribute) and func.attr == "range")


def _apply_loop_index_tensors(p: _Patches) -> None:
    np, tl, ti = _modules()
    base = type(ti.FunctionRewriter.ast_transformer)

    class LoopIndexTransformer(base):
        def visit_For(self, node):
            node = self.generic_visit(node)
            if _is_range_call(node.iter):
                call = node.iter
                # interpreter_semantic is a global of every rewritten kernel (the interpreter puts
                # it there), so the helper hangs off it instead of a new global in user modules.
                helper = ast.Attribute(value=ast.Name(id="interpreter_semantic", ctx=ast.Load()),
                                       attr=_LOOP_HELPER, ctx=ast.Load())
                node.iter = ast.copy_location(
                    ast.Call(func=helper, args=[call.func, *call.args], keywords=call.keywords), call)
            return node

    def wide(value) -> bool:
        if isinstance(value, tl.tensor):
            return getattr(value.dtype, "int_bitwidth", 32) > 32
        return isinstance(value, int) and not -2**31 <= value < 2**31

    def loop_indices(range_fn, *args, **kwargs):
        # On a GPU the index has the bounds' type: int64 if any bound is, else int32.
        is_wide = any(wide(a) for a in (*args, kwargs.get("step")))
        np_type, tl_type = (np.int64, tl.int64) if is_wide else (np.int32, tl.int32)
        for i in range_fn(*args, **kwargs):
            if type(i) is int:
                yield tl.tensor(ti.TensorHandle(np.array([i], dtype=np_type), tl_type), tl_type)
            else:
                yield i

    p.set_attr(ti.FunctionRewriter, "ast_transformer", LoopIndexTransformer())
    p.set_attr(ti.interpreter_semantic, _LOOP_HELPER, loop_indices)
    _clear_rewritten(ti)
    p.on_undo(lambda: _clear_rewritten(ti))


# --------------------------------------------------------------------------------------------
# tensor_index_numpy2: tensor.__index__ (range() over a tensor bound) under NumPy >= 2.4


def _needs_tensor_index_numpy2() -> bool:
    np, tl, ti = _modules()

    class Probe:
        pass

    scope = ti._LangPatchScope()
    try:
        ti._patch_lang_tensor(Probe, scope)
        obj = Probe()
        obj.handle = ti.TensorHandle(np.array([3], dtype=np.int32), tl.int32)
        try:
            return Probe.__index__(obj) != 3
        except TypeError:  # NumPy >= 2.4: "only 0-dimensional arrays can be converted ..."
            return True
    finally:
        scope.restore()


def _apply_tensor_index_numpy2(p: _Patches) -> None:
    _, _, ti = _modules()
    original = ti._patch_lang_tensor

    def index(self):
        # Scalars are 1-element 1-d arrays here; int() of those is an error from NumPy 2.4 on,
        # .item() is not (and still refuses a block of several elements).
        return int(self.handle.data.item())

    def patch_lang_tensor(tensor, scope):
        original(tensor, scope)
        scope.set_attr(tensor, "__index__", index)

    p.set_attr(ti, "_patch_lang_tensor", patch_lang_tensor)


# --------------------------------------------------------------------------------------------
# bf16: compute in float32, round to nearest even
#
# The interpreter stores bfloat16 as its uint16 bit pattern (NumPy has no bfloat16) and most of
# its operations apply NumPy to that storage directly: 1.0 + 1.0 adds 0x3F80 + 0x3F80. A GPU
# computes bf16 arithmetic in float32 and rounds the result to bf16, to nearest even; so do these.


def _bf16_helpers():
    np, tl, ti = _modules()

    def is_bf16(handle) -> bool:
        # the storage too: the interpreter types a comparison's bool result as its operands
        dtype = getattr(handle, "dtype", None)
        data = getattr(handle, "data", None)
        return getattr(dtype, "scalar", dtype) == tl.bfloat16 and getattr(data, "dtype", None) == np.uint16

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
    np, tl, ti = _modules()
    builder = ti.InterpreterBuilder()
    one = ti.TensorHandle(np.array([0x3F80], dtype=np.uint16), tl.bfloat16)  # 1.0
    return np, tl, ti, builder, one


def _needs_bf16_arithmetic() -> bool:
    np, tl, ti, builder, one = _bf16_probe_handles()
    return int(builder.create_fadd(one, one).data[0]) != 0x4000  # 2.0


def _apply_bf16_arithmetic(p: _Patches) -> None:
    np, tl, ti, is_bf16, to_f32, to_bf16, value = _bf16_helpers()
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


def _needs_bf16_constants() -> bool:
    np, tl, ti, builder, _ = _bf16_probe_handles()
    try:
        return int(builder.get_bf16(1.5).data[0]) != 0x3FC0
    except AttributeError:  # the builder has no get_bf16 at all
        return True


def _apply_bf16_constants(p: _Patches) -> None:
    np, tl, ti, is_bf16, to_f32, to_bf16, value = _bf16_helpers()

    def get_bf16(self, value):
        # Triton's semantics ask the builder for a bf16 constant (x * 1.5 with x bf16)
        return ti.TensorHandle(to_bf16(np.array([value], dtype=np.float32)), tl.bfloat16)

    p.set_attr(ti.InterpreterBuilder, "get_bf16", get_bf16)


def _needs_bf16_casts() -> bool:
    np, tl, ti, builder, _ = _bf16_probe_handles()
    # 1 + 2^-8 + 2^-16 lies above the midpoint between two bf16 values: to nearest gives 0x3F81,
    # truncation 0x3F80; and int32 3 must become 3.0 (0x4040), not the bit pattern 3.
    f32 = ti.TensorHandle(np.array([0x3F808080], dtype=np.uint32).view(np.float32), tl.float32)
    i32 = ti.TensorHandle(np.array([3], dtype=np.int32), tl.int32)
    return int(builder.cast_impl(f32, tl.bfloat16).data[0]) != 0x3F81 or \
        int(builder.cast_impl(i32, tl.bfloat16).data[0]) != 0x4040


def _apply_bf16_casts(p: _Patches) -> None:
    np, tl, ti, is_bf16, to_f32, to_bf16, value = _bf16_helpers()
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
    rtz = getattr(getattr(ti._ir, "ROUNDING_MODE", None), "RTZ", _MISSING)
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


def _needs_bf16_reductions() -> bool:
    np, tl, ti, _, _ = _bf16_probe_handles()
    data = ti.TensorHandle(np.array([0x3F80, 0x3F80], dtype=np.uint16), tl.bfloat16)
    t = tl.tensor(data, tl.block_type(tl.bfloat16, [2]))
    out = ti.ReduceOps(0, tl.standard._sum_combine, False).sum(t)
    return int(np.asarray(out.handle.data).reshape(-1)[0]) != 0x4000


def _apply_bf16_reductions(p: _Patches) -> None:
    np, tl, ti, is_bf16, to_f32, to_bf16, value = _bf16_helpers()

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


def _needs_bf16_dot() -> bool:
    np, tl, ti, builder, one = _bf16_probe_handles()
    a = ti.TensorHandle(one.data.reshape(1, 1), tl.bfloat16)
    acc = ti.TensorHandle(np.zeros((1, 1), dtype=np.float32), tl.float32)
    return float(builder.create_dot(a, a, acc, None, 0).data[0, 0]) != 1.0


def _apply_bf16_dot(p: _Patches) -> None:
    np, tl, ti, is_bf16, to_f32, to_bf16, value = _bf16_helpers()
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


def _needs_bf16_atomics() -> bool:
    import torch

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


def _apply_bf16_atomics(p: _Patches) -> None:
    np, tl, ti, is_bf16, to_f32, to_bf16, value = _bf16_helpers()
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


# --------------------------------------------------------------------------------------------
# libdevice: extern math functions on the CPU


def _torch_fn(name: str):
    """A torch function over NumPy arrays (torch has the special functions NumPy lacks)."""
    def run(*arrays):
        import numpy as np
        import torch

        fn = torch
        for part in name.split("."):
            fn = getattr(fn, part)
        return fn(*[torch.from_numpy(np.ascontiguousarray(a)) for a in arrays]).numpy()
    return run


def _scalar_fn(fn):
    """A math-module function over arrays, computed in float64; domain errors give NaN or inf as
    the C library would."""
    def safe(*v):
        try:
            return fn(*v)
        except ValueError:
            return math.nan
        except OverflowError:
            return math.inf

    def run(*arrays):
        import numpy as np

        args = [np.asarray(a, dtype=np.float64) for a in arrays]
        return np.vectorize(safe, otypes=[np.float64])(*args)
    return run


def _gamma(v):
    if v == 0:
        return math.copysign(math.inf, v)
    return math.gamma(v)


def _np(name: str):
    def run(*arrays):
        import numpy as np

        return getattr(np, name)(*arrays)
    return run


def _extern_table() -> dict[str, Callable]:
    """libdevice (and ROCm ocml) functions by name, without the symbol's prefix and type suffix.
    Each takes NumPy arrays of the kernel's operands; the caller casts to the declared result."""
    import numpy as np

    def same_type(fn):
        # results in the operands' float type, as libdevice's f and non-f variants are
        def run(x, *rest):
            return np.asarray(fn(x, *rest)).astype(np.asarray(x).dtype, copy=False)
        return run

    def round_half_away(x):
        whole = np.trunc(x)
        return whole + np.where(np.abs(x - whole) >= 0.5, np.sign(x), 0).astype(x.dtype)

    def sinpi(x):
        r = np.remainder(np.asarray(x, dtype=np.float64), 2.0)
        finite = np.where(np.isfinite(x), 1.0, np.nan)
        return np.where(r == np.trunc(r), 0.0, np.sin(np.pi * r)) * finite

    def cospi(x):
        r = np.remainder(np.asarray(x, dtype=np.float64), 2.0)
        finite = np.where(np.isfinite(x), 1.0, np.nan)
        return np.where(r - np.trunc(r) == 0.5, 0.0, np.cos(np.pi * r)) * finite

    def ilogb(x):
        x = np.asarray(x)
        exponent = (np.frexp(x)[1] - 1).astype(np.int64)
        exponent = np.where(x == 0, -2**31, exponent)
        exponent = np.where(np.isinf(x), 2**31 - 1, exponent)
        return np.where(np.isnan(x), -2**31, exponent)

    def logb(x):
        x = np.asarray(x)
        out = (np.frexp(x)[1] - 1).astype(x.dtype)
        out = np.where(x == 0, -np.inf, out)
        return np.where(np.isfinite(x), out, np.abs(x))

    def fdim(x, y):
        return np.where(np.isnan(x) | np.isnan(y), np.nan, np.maximum(x - y, 0))

    def fma(x, y, z):
        x = np.asarray(x)
        if x.dtype == np.float32:  # a float32 product is exact in float64: one rounding to go
            return (x.astype(np.float64) * y + z).astype(np.float32)
        return x * y + z

    def powi(x, n):
        return np.power(np.asarray(x, dtype=np.float64), np.asarray(n, dtype=np.float64))

    def as_bits(dtype):
        return lambda x: np.ascontiguousarray(x).view(dtype)

    def from_bits(int_dtype, float_dtype):
        return lambda x: np.ascontiguousarray(np.asarray(x).astype(int_dtype)).view(float_dtype)

    def unsigned(x):
        x = np.asarray(x)
        return x.view(np.dtype(f"uint{x.dtype.itemsize * 8}"))

    def bit_length(u):
        return np.floor(np.log2(np.maximum(u, 1).astype(np.float64))).astype(np.int64) + 1

    def clz(x):
        u = unsigned(x).astype(np.uint64)
        bits = np.asarray(x).dtype.itemsize * 8
        length = np.where(u == 0, 0, bit_length(u))
        # log2 in float64 can round up just below a power of two: correct by checking the bit
        length = np.where((length > 0) & ((u >> np.maximum(length - 1, 0).astype(np.uint64)) == 0),
                          length - 1, length)
        return (bits - length).astype(np.int32)

    def popc(x):
        u = unsigned(x)
        count = np.zeros(u.shape, dtype=np.int32)
        for i in range(u.dtype.itemsize * 8):  # np.bitwise_count needs NumPy 2
            count += ((u >> u.dtype.type(i)) & u.dtype.type(1)).astype(np.int32)
        return count

    def ffs(x):
        u = unsigned(x).astype(np.uint64)
        low = u & (~u + np.uint64(1))  # the lowest set bit
        return np.where(u == 0, 0, bit_length(low)).astype(np.int32)

    def brev(x):
        u = unsigned(x)
        bits = u.dtype.itemsize * 8
        out = np.zeros_like(u)
        for i in range(bits):
            out |= ((u >> u.dtype.type(i)) & u.dtype.type(1)) << u.dtype.type(bits - 1 - i)
        return out.view(np.asarray(x).dtype)

    def mulhi(x, y):
        x, y = np.asarray(x), np.asarray(y)
        bits = x.dtype.itemsize * 8
        if bits == 32:
            wide = np.int64 if x.dtype.kind == "i" else np.uint64
            return ((x.astype(wide) * y.astype(wide)) >> bits).astype(x.dtype)
        mask = (1 << 64) - 1
        signed = x.dtype.kind == "i"

        def hi(a, b):
            product = int(a) * int(b) if signed else (int(a) & mask) * (int(b) & mask)
            return product >> 64
        return np.vectorize(hi, otypes=[x.dtype])(x, y)

    def halving(round_up):
        def run(x, y):
            x, y = np.asarray(x), np.asarray(y)
            wide = np.int64 if x.dtype.kind == "i" else np.uint64
            return ((x.astype(wide) + y.astype(wide) + (1 if round_up else 0)) >> 1).astype(x.dtype)
        return run

    def sad(x, y, z):
        x, y = np.asarray(x).astype(np.int64), np.asarray(y).astype(np.int64)
        return np.abs(x - y) + np.asarray(z)

    def saturate(x):
        return np.where(np.isnan(x), 0, np.clip(x, 0, 1))

    torch_special = {
        "erf": "erf", "erfc": "erfc", "erfinv": "erfinv", "erfcx": "special.erfcx",
        "normcdf": "special.ndtr", "normcdfinv": "special.ndtri", "lgamma": "lgamma",
        "j0": "special.bessel_j0", "j1": "special.bessel_j1", "y0": "special.bessel_y0",
        "y1": "special.bessel_y1", "cyl_bessel_i0": "special.i0", "cyl_bessel_i1": "special.i1",
        "i0": "special.i0", "i1": "special.i1",
    }
    table: dict[str, Callable] = {name: same_type(_torch_fn(fn)) for name, fn in torch_special.items()}
    numpy_same = {
        "sin": "sin", "cos": "cos", "tan": "tan", "asin": "arcsin", "acos": "arccos", "atan": "arctan",
        "sinh": "sinh", "cosh": "cosh", "tanh": "tanh", "asinh": "arcsinh", "acosh": "arccosh",
        "atanh": "arctanh", "exp": "exp", "exp2": "exp2", "expm1": "expm1", "log": "log", "log2": "log2",
        "log10": "log10", "log1p": "log1p", "sqrt": "sqrt", "cbrt": "cbrt", "floor": "floor",
        "ceil": "ceil", "trunc": "trunc", "rint": "rint", "nearbyint": "rint", "fabs": "abs",
        "abs": "abs", "llabs": "abs", "iabs": "abs", "atan2": "arctan2", "hypot": "hypot",
        "copysign": "copysign", "fmod": "fmod", "nextafter": "nextafter", "pow": "power",
        "fmin": "fmin", "fmax": "fmax", "add": "add", "sub": "subtract", "mul": "multiply",
        "div": "divide", "fdivide": "divide", "ldexp": "ldexp", "scalbn": "ldexp",
        "isnan": "isnan", "isinf": "isinf", "isfinite": "isfinite", "finite": "isfinite",
        "signbit": "signbit",
    }
    table.update({name: _np(fn) for name, fn in numpy_same.items()})
    table.update({
        "rsqrt": lambda x: np.asarray(1, dtype=np.asarray(x).dtype) / np.sqrt(x),
        "rcp": lambda x: np.asarray(1, dtype=np.asarray(x).dtype) / x,
        "rcbrt": lambda x: np.asarray(1, dtype=np.asarray(x).dtype) / np.cbrt(x),
        "exp10": lambda x: np.power(np.asarray(10, dtype=np.asarray(x).dtype), x),
        "rhypot": lambda x, y: np.asarray(1, dtype=np.asarray(x).dtype) / np.hypot(x, y),
        "norm3d": lambda x, y, z: np.sqrt(x * x + y * y + z * z),
        "rnorm3d": lambda x, y, z: 1 / np.sqrt(x * x + y * y + z * z),
        "norm4d": lambda x, y, z, w: np.sqrt(x * x + y * y + z * z + w * w),
        "rnorm4d": lambda x, y, z, w: 1 / np.sqrt(x * x + y * y + z * z + w * w),
        "erfcinv": lambda x: _torch_fn("erfinv")(1 - np.asarray(x, dtype=np.float64)),
        "tgamma": _scalar_fn(_gamma),
        "remainder": _scalar_fn(math.remainder),
        "round": round_half_away, "llround": round_half_away, "llrint": np.rint,
        "sinpi": sinpi, "cospi": cospi, "ilogb": ilogb, "logb": logb, "fdim": fdim, "fma": fma,
        "powi": powi, "pown": powi, "saturate": saturate,
        "float_as_int": as_bits(np.int32), "float_as_uint": as_bits(np.uint32),
        "double_as_longlong": as_bits(np.int64),
        "int_as_float": from_bits(np.int32, np.float32), "uint_as_float": from_bits(np.uint32, np.float32),
        "longlong_as_double": from_bits(np.int64, np.float64),
        "clz": clz, "clzll": clz, "popc": popc, "popcll": popc, "ffs": ffs, "ffsll": ffs,
        "brev": brev, "brevll": brev, "mulhi": mulhi, "umulhi": mulhi, "mul64hi": mulhi,
        "umul64hi": mulhi, "hadd": halving(False), "uhadd": halving(False),
        "rhadd": halving(True), "urhadd": halving(True), "sad": sad, "usad": sad,
    })
    # round-to-nearest conversions: the caller's cast to the declared result type does the rest
    for src in ("float", "double"):
        for dst in ("int", "uint", "ll", "ull"):
            table[f"{src}2{dst}"] = np.rint
    for name in ("double2float", "int2float", "uint2float", "ll2float", "ull2float", "int2double",
                 "uint2double", "ll2double", "ull2double"):
        table[name] = lambda x: x
    return table


_DIRECTED_ROUNDING = ("_rz", "_rd", "_ru")


def _extern_candidates(symbol: str) -> list[str]:
    """Names under which a libdevice/ocml symbol's function may be in the table, most specific
    first: __nv_tanhf -> tanhf, tanh; __nv_fdiv_rn -> fdiv, div; __ocml_pown_f32 -> pown."""
    name = symbol
    for prefix in ("__nv_", "__ocml_", "__triton_hip_"):
        if name.startswith(prefix):
            name = name[len(prefix):]
            break
    for suffix in ("_f16", "_f32", "_f64"):
        if name.endswith(suffix):
            name = name[:-len(suffix)]
    if name.endswith(_DIRECTED_ROUNDING):
        return []  # NumPy rounds to nearest only
    nearest = name.endswith("_rn")
    if nearest:
        name = name[:-3]
    if name.startswith("fast_"):
        name = name[5:]
    candidates = [name]
    if name[-1:] in ("f", "d"):
        candidates.append(name[:-1])
    if nearest and name[:1] in ("f", "d"):  # fdiv_rn, dsqrt_rn, fmaf_rn
        candidates.append(name[1:])
        if name[-1:] == "f":
            candidates.append(name[1:-1])
    return candidates


def _needs_libdevice() -> bool:
    np, tl, ti = _modules()
    arg = ti.TensorHandle(np.array([0.5], dtype=np.float32), tl.float32)
    try:
        ti.InterpreterBuilder().create_extern_elementwise("", "", "__nv_tanhf", [arg], tl.float32, True)
    except NotImplementedError:
        return True
    try:
        from triton.language.extra import libdevice
    except ImportError:
        return False
    # the backend-neutral module holds stubs that a GPU compilation swaps for the backend's
    # functions; the interpreter calls the stubs themselves, which return None
    tanh = getattr(libdevice, "tanh", None)
    return callable(tanh) and not getattr(tanh, "__triton_builtin__", False)


def _libdevice_modules():
    import importlib

    found = {}
    for key, name in (("stub", "triton.language.extra.libdevice"),
                      ("cuda", "triton.language.extra.cuda.libdevice"),
                      ("hip", "triton.language.extra.hip.libdevice")):
        try:
            found[key] = importlib.import_module(name)
        except ImportError:
            pass
    return found


def _apply_libdevice(p: _Patches) -> None:
    np, tl, ti = _modules()
    table = _extern_table()
    cls = ti.InterpreterBuilder

    def create_extern_elementwise(self, libName, libPath, symbol, argList, retType, isPure):
        for name in _extern_candidates(symbol):
            fn = table.get(name)
            if fn is not None:
                break
        else:
            raise NotImplementedError(
                f"interpreter gap 'libdevice': {symbol} has no CPU implementation under Triton's "
                "interpreter (pytest-triton's interpreter_compat implements libdevice's math "
                "functions rounding to nearest; directed-rounding variants, jn/yn, byte_perm and "
                "similar are not)")
        args = [a.data if hasattr(a, "data") else np.asarray(a) for a in argList]
        with np.errstate(all="ignore"):  # as on a GPU: inf and NaN, no warnings
            out = np.asarray(fn(*args))
            out = out.astype(ti._get_np_dtype(retType), copy=False)
        if out.shape != args[0].shape:
            out = np.broadcast_to(out, args[0].shape).copy()
        return ti.TensorHandle(out, retType.scalar)

    p.set_attr(cls, "create_extern_elementwise", create_extern_elementwise)

    semantic = ti.interpreter_semantic
    replacements: dict = {}

    def interpreted(fn):
        """A @builtin (it needs _semantic) callable from an interpreted kernel; a GPU
        compilation's call, which passes _semantic, goes through unchanged."""
        if fn in replacements:
            return replacements[fn]

        @functools.wraps(fn)
        def call(*args, **kwargs):
            if kwargs.get("_semantic") is None:
                kwargs["_semantic"] = semantic
            return fn(*args, **kwargs)

        call._pytest_triton_original = fn
        replacements[fn] = call
        return call

    modules = _libdevice_modules()
    backends = [modules[k] for k in ("cuda", "hip") if k in modules]
    for module in backends:
        for name, member in list(vars(module).items()):
            if tl.core.is_builtin(member):
                p.set_attr(module, name, interpreted(member))
    stub = modules.get("stub")
    if stub is not None:
        # The stubs say what exists; the interpreter runs CUDA's (its symbols are __nv_*), else
        # ROCm's where only that backend has the function.
        for name, member in list(vars(stub).items()):
            is_stub = callable(member) and getattr(member, "__module__", "") == stub.__name__
            if not is_stub or name.startswith("_"):
                continue
            for module in backends:
                impl = vars(module).get(name)
                if impl is not None:
                    p.set_attr(stub, name, impl)
                    replacements[member] = impl
                    break

    original_patch_lang = ti._patch_lang

    def patch_lang(fn):
        scope = original_patch_lang(fn)
        # Names a library bound with `from ...libdevice import tanh` (before install, or a stub),
        # and a library's own @core.extern builtins, live in its module globals, which the
        # interpreter does not patch: bind them there too. Kept until uninstall, as the
        # interpreter's own patches of helper functions are.
        namespace = getattr(fn, "__globals__", None)
        if isinstance(namespace, dict):
            for name, member in list(namespace.items()):
                if not callable(member) or not _hashable(member):
                    continue
                if member in replacements:
                    p.set_item(namespace, name, replacements[member])
                elif _foreign_builtin(tl, member):
                    p.set_item(namespace, name, interpreted(member))
        return scope

    p.set_attr(ti, "_patch_lang", patch_lang)


def _hashable(value) -> bool:
    try:
        hash(value)
    except TypeError:
        return False
    return True


def _foreign_builtin(tl, member) -> bool:
    """A @builtin defined outside triton.language's core modules (which the interpreter patches
    itself): a library's @core.extern function."""
    if not callable(member) or not tl.core.is_builtin(member) or hasattr(member, "_pytest_triton_original"):
        return False
    module = getattr(member, "__module__", "") or ""
    return not (module.startswith("triton.language") and not module.startswith("triton.language.extra"))


# --------------------------------------------------------------------------------------------
# autotune_one_config: a multi-config @triton.autotune runs one config under the interpreter


def _interpreted_kernel(tuner, ti) -> bool:
    fn = getattr(tuner, "fn", None)
    seen = 0
    while fn is not None and seen < 20:
        if isinstance(fn, ti.InterpretedFunction):
            return True
        fn = getattr(fn, "fn", None)
        seen += 1
    return False


def _needs_autotune_one_config() -> bool:
    import triton
    from triton.runtime.autotuner import Autotuner

    _, _, ti = _modules()

    def body(x, BLOCK):
        pass

    launches: list = []
    kernel = ti.InterpretedFunction(body)
    kernel.run = lambda *args, **kwargs: launches.append(kwargs)  # no kernel: count launches only
    tuner = Autotuner(kernel, ["x", "BLOCK"], [triton.Config({"BLOCK": 1}), triton.Config({"BLOCK": 2})],
                      key=[], reset_to_zero=None, restore_value=None)
    try:
        tuner.run(0, grid=(1,), warmup=False)
    except Exception:  # noqa: BLE001 - no driver to time configs with ("0 active drivers")
        return True
    return len(launches) != 1  # it timed the configs by launching each


def _apply_autotune_one_config(p: _Patches) -> None:
    from triton.runtime.autotuner import Autotuner

    _, _, ti = _modules()
    original = Autotuner.run

    def run(self, *args, **kwargs):
        if len(self.configs) <= 1 or not _interpreted_kernel(self, ti):
            return original(self, *args, **kwargs)
        # Nothing to time configs with: run one, as the autotuner runs a single config (untimed).
        # The library's own early_config_prune still applies (it says which configs suit the
        # shape); its perf model does not (it ranks by speed). pytest_triton's pin_config and
        # assert_every_config narrow self.configs to one themselves, so they pass straight through.
        chosen = self.configs[0]
        prune = getattr(self, "early_config_prune", None)
        if prune:
            self.nargs = dict(zip(self.arg_names, args))
            pruned = prune(self.configs, self.nargs, **kwargs)
            if pruned:
                chosen = pruned[0]
        saved = self.configs
        self.configs = [chosen]
        try:
            return original(self, *args, **kwargs)
        finally:
            self.configs = saved

    run._pytest_triton_original = original
    p.set_attr(Autotuner, "run", run)


# --------------------------------------------------------------------------------------------
# The table


@dataclass(frozen=True)
class Fix:
    name: str
    fixes: str  # what fails without it
    needed_by: str  # the Triton versions that need it, as tested; each install probes anew
    upstream: str  # the upstream Triton issue / PR, and its state
    closes_gap: str | None  # the pytest_triton interpreter gap it makes unnecessary, if any
    needed: Callable[[], bool]
    apply: Callable[[_Patches], None]


FIXES: dict[str, Fix] = {f.name: f for f in (
    Fix("float_args",
        "float scalar kernel arguments arrive as Python floats ('float' object has no attribute "
        "'to'; x_fp16 * eps stays fp16 where a GPU promotes to fp32): passed as fp32 scalars, as a "
        "GPU launch passes them",
        "3.6, 3.9",
        "triton-lang/triton#5965 (scalars in interpreter mode; the int half was fixed, floats are "
        "still not converted in 3.9)",
        None, _needs_float_args, _apply_float_args),
    Fix("annotated_scalar_args",
        "a scalar argument's annotation is ignored: stride: tl.int64 arrives as int32, so row * "
        "stride wraps silently past 2**31 (wrong addresses); scale: tl.float16 arrives as a "
        "Python float; on 3.6 flag: tl.int1 fails. Converted to the annotated type, as a GPU "
        "launch does",
        "3.6, 3.9",
        "none found",
        None, _needs_annotated_scalar_args, _apply_annotated_scalar_args),
    Fix("loop_index_tensors",
        "the index of a range()/tl.range() loop is a Python int ('int' object has no attribute "
        "'to'): an int32 tensor (int64 if a bound is), as on a GPU; tl.static_range is left alone",
        "3.6, 3.9",
        "none found (triton-lang/triton#5965 covers assigned ints, fixed by the interpreter's "
        "assignment rewrite; loop targets are not assignments)",
        None, _needs_loop_index_tensors, _apply_loop_index_tensors),
    Fix("tensor_index_numpy2",
        "with NumPy >= 2.4 any range() with a tensor bound fails (only 0-dimensional arrays can be "
        "converted to Python scalars); without this fix, pin numpy<2.4",
        "3.6 (3.9 has the upstream fix)",
        "triton-lang/triton#9171 (fixed upstream: __index__ squeezes the array)",
        None, _needs_tensor_index_numpy2, _apply_tensor_index_numpy2),
    Fix("bf16_arithmetic",
        "bf16 + - *, minimum/maximum, comparisons, negation, clamp and fma act on the raw uint16 bits "
        "(3e38, NaN, -4.0 for -1.0, wrong order for negatives): computed in float32, rounded to "
        "bf16 to nearest even",
        "3.6, 3.9",
        "triton-lang/triton#10919 (open for bf16); PR triton-lang/triton#10945 closed unmerged; "
        "the interpreter's documentation lists bf16 as unsupported (triton-lang/triton#4972)",
        None, _needs_bf16_arithmetic, _apply_bf16_arithmetic),
    Fix("bf16_constants",
        "a bf16 scalar constant (x * 1.5 with x bf16) fails: the interpreter's builder has no "
        "get_bf16 (AttributeError): made as float32 rounded to bf16 to nearest even",
        "3.6 (3.9 has get_bf16)",
        "none found (added upstream along with the builder's get_bf16, by 3.9)",
        None, _needs_bf16_constants, _apply_bf16_constants),
    Fix("bf16_casts",
        "float32 -> bf16 truncates instead of rounding to nearest even (1 ulp errors; this also "
        "rounds bf16 / and %, and tl.max/tl.min, which Triton computes in float32); int -> bf16 "
        "and fp64 -> bf16 copy the number into the bit pattern; bf16 <-> fp16 through float32",
        "3.6, 3.9",
        "none found for the rounding (PR triton-lang/triton#3811 added bf16 <-> fp32 by truncation)",
        "bf16_rounding", _needs_bf16_casts, _apply_bf16_casts),
    Fix("bf16_reductions",
        "tl.sum, tl.argmax/argmin, tl.cumsum/cumprod (and tl.reduce with max/min combines) of bf16 "
        "add or order the bit patterns: reduced in float32 (sums rounded once, as torch.sum does)",
        "3.6, 3.9",
        "triton-lang/triton#11604 (tl.sum of bf16 on bit patterns, closed without a fix in 3.9)",
        None, _needs_bf16_reductions, _apply_bf16_reductions),
    Fix("bf16_dot",
        "tl.dot of bf16 multiplies the bit patterns (values around 1e10): operands widened to "
        "float32, products exact, accumulated in float32",
        "3.6, 3.9",
        "triton-lang/triton#11584; PR triton-lang/triton#11585 closed ('we just don't support it yet')",
        "bf16_dot", _needs_bf16_dot, _apply_bf16_dot),
    Fix("bf16_atomics",
        "tl.atomic_add on bf16 (the one bf16 atomic Triton allows) fails (ValueError: Unsupported "
        "data type): done as an in-order read-modify-write in float32, rounded to bf16",
        "3.6, 3.9",
        "none found",
        None, _needs_bf16_atomics, _apply_bf16_atomics),
    Fix("libdevice",
        "libdevice / extern math (triton.language.extra.libdevice, tl.extra.cuda.libdevice, a "
        "library's own @core.extern): the stubs return None, the backend functions ask for "
        "@triton.jit, extern_elementwise is not implemented. Implemented with NumPy/torch on the "
        "CPU, dispatched by libdevice's own type tables",
        "3.6, 3.9",
        "triton-lang/triton#8825 (closed, not supported); PR triton-lang/triton#10366 closed unmerged",
        "libdevice", _needs_libdevice, _apply_libdevice),
    Fix("autotune_one_config",
        "a multi-config @triton.autotune cannot run (RuntimeError: 0 active drivers: it tries to "
        "time every config): an interpreted kernel runs one config, the first that the library's "
        "early_config_prune keeps (pin_config/assert_every_config choose their own)",
        "3.6, 3.9",
        "none found (PR triton-lang/triton#6678 only keeps the disk cache away from the interpreter)",
        "autotune", _needs_autotune_one_config, _apply_autotune_one_config),
)}

# What still does not run under the interpreter with every fix applied, as keys of
# pytest_triton's INTERPRETER_GAPS with their reasons.
REMAINING_GAPS: dict[str, str] = {
    "libdevice": "Triton's interpreter has no CPU version of this libdevice function (directed-rounding "
                 "_rz/_rd/_ru variants, jn/yn, byte_perm, double2hiint and the like)",
    "inline_asm": "Triton's interpreter cannot run inline assembly",
    "tensor_descriptor": "this Triton's interpreter does not support tensor descriptors (TMA)",
    "bf16_bit_exact": "bf16 under Triton's interpreter rounds as torch's CPU kernels do, which can differ "
                      "from a GPU in the last bit: tl.sum/tl.cumsum accumulate in float32 and round once "
                      "(a GPU rounds each partial sum to bf16, in its own order); tl.fma and int64/fp64 -> "
                      "bf16 round twice, through float32 (a GPU may round once)",
}

_applied: dict[str, _Patches] = {}
_skipped: dict[str, str] = {}


def install(exclude: tuple[str, ...] | list[str] = ()) -> list[str]:
    """Apply the fixes the installed Triton's interpreter needs; returns the names applied (those
    applied by an earlier call included). Nothing is applied unless TRITON_INTERPRET=1.
    exclude: names of fixes to leave out (tests use it to show that each one is needed)."""
    unknown = [name for name in exclude if name not in FIXES]
    if unknown:
        raise ValueError(f"interpreter_compat.install: unknown fix {', '.join(unknown)}; "
                         f"known: {', '.join(FIXES)}")
    if not interpreting():
        return installed()
    for name, fix in FIXES.items():
        if name in _applied or name in exclude:
            continue
        try:
            needed = fix.needed()
        except Exception as exc:  # noqa: BLE001 - an interpreter this fix does not know
            _skipped[name] = f"cannot tell on this Triton ({type(exc).__name__}: {exc})"
            continue
        if not needed:
            _skipped[name] = "not needed: this Triton's interpreter already behaves"
            continue
        patches = _Patches()
        try:
            fix.apply(patches)
        except Exception as exc:  # noqa: BLE001 - leave the interpreter as it was
            patches.undo()
            _skipped[name] = f"could not apply on this Triton ({type(exc).__name__}: {exc})"
            continue
        _applied[name] = patches
        _skipped.pop(name, None)
    return installed()


def uninstall() -> None:
    """Undo every applied fix, newest first."""
    for name in reversed(list(_applied)):
        _applied.pop(name).undo()
    _skipped.clear()


def installed() -> list[str]:
    """The fixes applied now, in table order."""
    return [name for name in FIXES if name in _applied]


def status() -> dict[str, str]:
    """Each fix: 'applied', or why it is not (not needed, not probed yet, or could not apply)."""
    return {name: "applied" if name in _applied else _skipped.get(name, "not installed")
            for name in FIXES}
