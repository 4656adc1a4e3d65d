"""Interpreter fixes for scalar arguments and loop indices: float and annotated scalar arguments
become typed scalars, `range()` loop indices become tensors, and NumPy >= 2.4 accepts a tensor as
a loop bound (see fixes.FIXES)."""

from __future__ import annotations

import ast

from .base import Patches, clear_rewritten, modules
from .bf16 import bf16_helpers

# --------------------------------------------------------------------------------------------
# float_args: float scalar arguments as fp32 tensors


def needs_float_args() -> bool:
    _, tl, ti = modules()
    return not isinstance(ti._implicit_cvt(0.5), tl.tensor)


def apply_float_args(p: Patches) -> None:
    np, tl, ti = modules()
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
    np, tl, ti = modules()
    if dtype == tl.bfloat16:
        bits = bf16_helpers()[5](np.array([value], dtype=np.float32))
        return tl.tensor(ti.TensorHandle(bits, tl.bfloat16), tl.bfloat16)
    if isinstance(value, float):
        data = np.array([value], dtype=np.float64)
    else:
        data = np.array([value], dtype=np.uint64 if value >= 2**63 else np.int64)
    # integers wrap into the parameter's width as the launcher's C conversion does
    data = data.astype(ti._get_np_dtype(dtype))
    return tl.tensor(ti.TensorHandle(data, dtype), dtype)


def needs_annotated_scalar_args() -> bool:
    np, tl, ti = modules()
    seen: list = []
    namespace = {"tl": tl, "seen": seen}
    # exec'd, so the interpreter finds no source to rewrite and runs it as it is: enough to see
    # what an annotated int argument arrives as
    exec("def probe(n: tl.int64):\n    seen.append(n.dtype)\n", namespace)
    ti.InterpretedFunction(namespace["probe"])[(1, )](5)
    return seen[0] != tl.int64


def apply_annotated_scalar_args(p: Patches) -> None:
    import inspect

    np, tl, ti = modules()
    original = ti.GridExecutor.__call__

    def call(self, *args, **kwargs):
        __tracebackhide__ = True  # the plugin's frame, not the kernel's: hidden from failures
        # Libraries annotate parameters (stride: tl.int64) so that products such as row * stride
        # do not overflow int32; the interpreter typed every int by its value (int32) and so
        # wrapped silently. Convert annotated Python scalars as a GPU launch would.
        try:
            annotations = inspect.get_annotations(self.fn)
        except (TypeError, AttributeError):
            annotations = getattr(self.fn, "__annotations__", {}) or {}
        types = {name: t for name, a in annotations.items() if (t := _annotated_type(a, tl)) is not None}
        if types:
            sig = inspect.signature(self.fn)
            # launch options (num_warps=, num_stages=, an autotuned config's) come as keywords
            # beside the kernel's own arguments: the executor takes them; only ours are bound
            options = {k: v for k, v in kwargs.items() if k not in sig.parameters}
            bound = sig.bind_partial(*args, **{k: v for k, v in kwargs.items() if k not in options})
            for name, dtype in types.items():
                value = bound.arguments.get(name)
                if isinstance(value, (bool, int, float)):
                    bound.arguments[name] = _scalar_tensor(value, dtype)
            args, kwargs = bound.args, {**bound.kwargs, **options}
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


def needs_loop_index_tensors() -> bool:
    _, tl, ti = modules()
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


def apply_loop_index_tensors(p: Patches) -> None:
    np, tl, ti = modules()
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
    clear_rewritten(ti)
    p.on_undo(lambda: clear_rewritten(ti))


# --------------------------------------------------------------------------------------------
# tensor_index_numpy2: tensor.__index__ (range() over a tensor bound) under NumPy >= 2.4


def needs_tensor_index_numpy2() -> bool:
    np, tl, ti = modules()

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


def apply_tensor_index_numpy2(p: Patches) -> None:
    _, _, ti = modules()
    original = ti._patch_lang_tensor

    def index(self):
        # Scalars are 1-element 1-d arrays here; int() of those is an error from NumPy 2.4 on,
        # .item() is not (and still refuses a block of several elements).
        return int(self.handle.data.item())

    def patch_lang_tensor(tensor, scope):
        original(tensor, scope)
        scope.set_attr(tensor, "__index__", index)

    p.set_attr(ti, "_patch_lang_tensor", patch_lang_tensor)
