"""The one dtype vocabulary: a dtype's name, its kind, the tensor-core peak it runs at, its size.

Everything in the plugin speaks of dtypes by these names (torch's, without "torch."), whether the
user gave a torch.dtype or a string: the tolerance table, perf targets, device peaks, reports.
Nothing here imports torch, so the plugin's start-up never pays for it.
"""

from __future__ import annotations

# What perf_target(dtype=...) and triton_bench(dtype=...) accept: the operands' dtype, which
# names the tensor-core peak a tflops_frac is taken of ("tf32": float32 operands on tensor cores).
PERF_DTYPES = ("float32", "tf32", "float16", "bfloat16", "float8_e4m3fn", "float8_e5m2")

# The tensor-core peaks a device has, one per family of operand dtypes (datasheets give one rate
# for every float8 format, and float32 matmuls run as tf32).
PEAK_KEYS = ("tf32", "float16", "bfloat16", "float8")

_ITEMSIZE = {"float64": 8, "float32": 4, "tf32": 4, "float16": 2, "bfloat16": 2, "int64": 8,
             "int32": 4, "int16": 2, "int8": 1, "uint8": 1, "bool": 1, "float8_e4m3fn": 1,
             "float8_e5m2": 1, "float8_e4m3fnuz": 1, "float8_e5m2fnuz": 1, "uint16": 2,
             "uint32": 4, "uint64": 8, "complex64": 8, "complex128": 16}


# Other names users write for the same dtypes (numpy's, C's, the short ones of kernel libraries):
# every API that takes a dtype takes these too, and speaks torch's names back.
ALIASES = {
    "fp64": "float64", "f64": "float64", "double": "float64",
    "fp32": "float32", "f32": "float32", "float": "float32", "single": "float32",
    "fp16": "float16", "f16": "float16", "half": "float16",
    "bf16": "bfloat16",
    "fp8_e4m3": "float8_e4m3fn", "fp8e4m3": "float8_e4m3fn", "e4m3": "float8_e4m3fn",
    "fp8_e5m2": "float8_e5m2", "fp8e5m2": "float8_e5m2", "e5m2": "float8_e5m2",
    "int": "int64", "long": "int64", "i64": "int64", "i32": "int32", "i16": "int16", "i8": "int8",
    "u8": "uint8",
}


def name(dtype) -> str:
    """torch.float16, "float16", "torch.float16", "fp16" or "half" -> "float16"."""
    n = str(dtype).removeprefix("torch.")
    return ALIASES.get(n.lower(), n) if isinstance(dtype, str) else n


def known(n: str) -> bool:
    """Whether `n` (a name() result) is a dtype this vocabulary knows."""
    return n in _ITEMSIZE


def kind(dtype) -> str:
    """"float", "int", "bool" or "complex"."""
    n = name(dtype)
    if n == "bool":
        return "bool"
    if n.startswith("complex"):
        return "complex"
    if n.startswith(("float", "bfloat")) or n == "tf32":
        return "float"
    return "int"


def peak_key(dtype) -> str:
    """The tensor-core peak of PEAK_KEYS an operand dtype runs at."""
    n = name(dtype)
    if n.startswith("float8"):
        return "float8"
    return "tf32" if n == "float32" else n


def same_peak(a, b) -> bool:
    """Whether two operand dtypes are timed against the same tensor-core peak."""
    return peak_key(a) == peak_key(b)


def itemsize(dtype) -> int | None:
    """Bytes per element, or None for a name this table does not know."""
    return _ITEMSIZE.get(name(dtype))
