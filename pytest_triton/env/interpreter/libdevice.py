"""Interpreter fix for libdevice and a library's own extern functions: each runs on the CPU
through NumPy or torch (see fixes.FIXES)."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

from .base import Patches, foreign_builtin, hashable, modules

# --------------------------------------------------------------------------------------------
# libdevice: extern math functions on the CPU


def _torch_fn(name: str):
    """A torch function over NumPy arrays (torch has the special functions NumPy lacks)."""
    def run(*arrays):
        import numpy as np
        import torch  # import time: called by a kernel, not when the plugin loads

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


def needs_libdevice() -> bool:
    np, tl, ti = modules()
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


def apply_libdevice(p: Patches) -> None:
    np, tl, ti = modules()
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
                "interpreter (pytest-triton's interpreter fixes implement libdevice's math "
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
            __tracebackhide__ = True  # the plugin's frame: hidden from failures
            if kwargs.get("_semantic") is None:
                kwargs["_semantic"] = semantic
            return fn(*args, **kwargs)

        call._pytest_triton_original = fn
        replacements[fn] = call
        return call

    found = _libdevice_modules()
    backends = [found[k] for k in ("cuda", "hip") if k in found]
    for module in backends:
        for name, member in list(vars(module).items()):
            if tl.core.is_builtin(member):
                p.set_attr(module, name, interpreted(member))
    stub = found.get("stub")
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
    # namespaces already bound, by id: (the namespace, kept so that its id is not reused, and its
    # number of names then): the interpreter patches a kernel's language at every launch, and a
    # module's globals, once bound, only change when a name is added
    scanned: dict[int, tuple[dict, int]] = {}
    p.on_undo(scanned.clear)

    def patch_lang(fn):
        scope = original_patch_lang(fn)
        # Names a library bound with `from ...libdevice import tanh` (before install, or a stub),
        # and a library's own @core.extern builtins, live in its module globals, which the
        # interpreter does not patch: bind them there too. Kept until uninstall, as the
        # interpreter's own patches of helper functions are.
        namespace = getattr(fn, "__globals__", None)
        if isinstance(namespace, dict) and scanned.get(id(namespace), (None, -1))[1] != len(namespace):
            scanned[id(namespace)] = (namespace, len(namespace))
            for name, member in list(namespace.items()):
                if not callable(member) or not hashable(member):
                    continue
                if member in replacements:
                    p.set_item(namespace, name, replacements[member])
                elif foreign_builtin(tl, member):
                    p.set_item(namespace, name, interpreted(member))
        return scope

    p.set_attr(ti, "_patch_lang", patch_lang)
