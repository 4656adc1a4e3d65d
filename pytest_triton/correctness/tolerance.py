"""The tolerance table: how close a kernel's output must be, by the precision it computed in.

reduction_size=K sets atol to the table's reduction atol times sqrt(K). Rounding errors of a
K-term sum behave like a random walk: their typical size grows as sqrt(K)*u (Higham & Mary,
"A New Approach to Probabilistic Rounding Error Analysis", 2019), not as the worst-case K*u,
which random data never reaches and which would make the check too loose to catch a dropped
term. The table's atol assumes operands of order one, as make_tensor draws them; for other
scales pass atol yourself.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..env import dtypes


@dataclass(frozen=True)
class Tolerance:
    rtol: float
    atol: float
    rtol_source: str
    atol_source: str

    def describe(self) -> str:
        return f"rtol={self.rtol:.3g} ({self.rtol_source}), atol={self.atol:.3g} ({self.atol_source})"


# precision -> (rtol, atol, reduction atol per sqrt(K)). Where the numbers come from:
# float64/32, float16, bfloat16 rtol/atol: torch.testing.assert_close's defaults, which the
#   PyTorch test suite has calibrated over years of kernels.
# tf32 (float32 tl.dot / matmul on tensor cores): inputs are rounded to 10 mantissa bits
#   (u = 2**-11); the product error of unit normals then has a standard deviation of about
#   0.8*u*sqrt(K), and 3e-3*sqrt(K) sits above the largest of a million such elements.
# float8: rtol is two units of roundoff (e4m3: 3 mantissa bits, e5m2: 2); atol one subnormal
#   step (2**-9, 2**-16), the absolute spacing below the smallest normal.
# integers and bool: exact.
# The third column is the atol of a K-term reduction, divided by sqrt(K). For 16-bit operands it
#   is set by the tensor cores, whose float32 accumulation is not IEEE float32: on an H100
#   the largest error over 16.7M fp16 outputs of a K=4096 matmul was 6.7e-4 =
#   1.05e-5*sqrt(K); 3e-5 leaves a 3x margin and still fails a matmul that drops a 64-wide K tile
#   (errors near sqrt(64) = 8). Elsewhere it is the elementwise atol.
TOLERANCES: dict[str, tuple[float, float, float]] = {
    "float64": (1e-7, 1e-7, 1e-7),
    "float32": (1.3e-6, 1e-5, 1e-5),
    "tf32": (1e-3, 3e-3, 3e-3),
    "float16": (1e-3, 1e-5, 3e-5),
    "bfloat16": (1.6e-2, 1e-5, 3e-5),
    "float8_e4m3fn": (0.125, 2.0**-9, 2.0**-9),
    "float8_e4m3fnuz": (0.125, 2.0**-9, 2.0**-9),
    "float8_e5m2": (0.25, 2.0**-16, 2.0**-16),
    "float8_e5m2fnuz": (0.25, 2.0**-16, 2.0**-16),
    "exact": (0.0, 0.0, 0.0),
}

def precision_name(dtype) -> str:
    """The table's row for an output of `dtype`: its name, or "exact" for integers and bool."""
    if dtypes.kind(dtype) in ("int", "bool"):
        return "exact"
    return dtypes.name(dtype)


def tolerance_for(dtype, *, rtol: float | None = None, atol: float | None = None,
                  reduction_size: int | None = None, precision=None) -> Tolerance:
    """The tolerance assert_close uses for an output of `dtype`, and where each number came from."""
    __tracebackhide__ = True
    # precision: a torch.dtype, a table row's name ("tf32", "fp16": the one dtype vocabulary), or
    # None for the output's own dtype
    name = precision_name(dtype if precision is None else precision) \
        if precision is None or not isinstance(precision, str) else dtypes.name(precision)
    if name not in TOLERANCES:
        raise ValueError(f"assert_close: precision={precision!r} is not in the tolerance table "
                         f"({', '.join(TOLERANCES)}; torch.dtypes and short names such as fp16, "
                         "bf16 and fp32 are accepted too)")
    table_rtol, table_atol, reduction_atol = TOLERANCES[name]
    for arg, value in (("rtol", rtol), ("atol", atol)):
        if value is not None and (not isinstance(value, (int, float)) or value < 0
                                  or math.isnan(value)):
            raise ValueError(f"assert_close: {arg}={value!r} must be a number >= 0")
    if reduction_size is not None and (isinstance(reduction_size, bool)
                                       or not isinstance(reduction_size, int)
                                       or reduction_size < 1):
        raise ValueError(f"assert_close: reduction_size={reduction_size!r} must be an int >= 1")

    rtol_src = f"table: {name}" if rtol is None else "argument"
    if atol is not None:
        atol_src = "argument"
    elif reduction_size is not None and reduction_size > 1:
        atol = reduction_atol * math.sqrt(reduction_size)
        atol_src = f"table: {name} reduction {reduction_atol:.3g} x sqrt(reduction_size={reduction_size})"
    else:
        atol_src = f"table: {name}"
    return Tolerance(float(table_rtol if rtol is None else rtol),
                     float(table_atol if atol is None else atol), rtol_src, atol_src)
