"""Elementwise fusion: chains that torch runs as several kernels, in one pass over memory.

- `add_mul(a, b, c)` = (a + b) * c. torch: an add and a mul, 2 kernels, 6 tensor-sized
  transfers (read a, b; write t; read t, c; write out); fused: 4 (read a, b, c; write out).
- `bias_gelu_residual(x, bias, residual)` = gelu(x + bias) + residual, exact (erf) GELU, bias
  broadcast over the rows: the epilogue of a transformer MLP. torch: add, gelu, add, 3 kernels,
  7 transfers (read x, write t; read t, write g; read g, residual, write out); fused: 3.

Each reference is the unfused torch sequence, which is also the perf tests' baseline. float32,
float16 and bfloat16; computed in float32 and rounded once at the end.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from pytest_triton import autotune_configs

from . import _elementwise
from ._checks import launch_config, output, require_dtype, require_tensor
from ._elementwise import INTERPRETER_CONFIG, elementwise_configs, elementwise_operands
from ._rows import row_view
from ._tuning import autotune_kwargs, in_place_hooks

DTYPES = _elementwise.DTYPES


@triton.autotune(configs=autotune_configs(elementwise_configs(), interpreter=INTERPRETER_CONFIG),
                 key=["n_elements"],
                 # an in-place call (out is an input) must not add once per timed config
                 **in_place_hooks("out_ptr", "a_ptr", "b_ptr", "c_ptr"), **autotune_kwargs())
@triton.jit
def _add_mul_kernel(
    a_ptr,  # *in* n_elements, element stride stride_a
    b_ptr,  # *in* n_elements, element stride stride_b
    c_ptr,  # *in* n_elements, element stride stride_c
    out_ptr,  # *out* n_elements, element stride stride_out
    n_elements,  # number of elements
    stride_a,  # 1 when contiguous: Triton then specialises the loads to 16-byte vectors
    stride_b,
    stride_c,
    stride_out,
    BLOCK_SIZE: tl.constexpr,  # elements per program
):
    # The tile's start in int64 on the scalar base pointers, as in vector_add.
    start = tl.program_id(0).to(tl.int64) * BLOCK_SIZE
    offs = tl.arange(0, BLOCK_SIZE)
    mask = offs < n_elements - start
    a = tl.load(a_ptr + start * stride_a + offs * stride_a, mask=mask).to(tl.float32)
    b = tl.load(b_ptr + start * stride_b + offs * stride_b, mask=mask).to(tl.float32)
    c = tl.load(c_ptr + start * stride_c + offs * stride_c, mask=mask).to(tl.float32)
    tl.store(out_ptr + start * stride_out + offs * stride_out,
             ((a + b) * c).to(out_ptr.dtype.element_ty), mask=mask)


def bias_gelu_residual_configs() -> list[triton.Config]:
    """2-D tiles of 4096-8192 elements, as elementwise_configs (same streaming reasoning),
    shaped so that a row segment is 512-2048 columns: whole 16-byte vectors and whole 128-byte
    lines per row, and the bias segment loaded once per tile and reused by every row in it."""
    return [
        triton.Config({"BLOCK_M": 8, "BLOCK_N": 512}, num_warps=4),
        triton.Config({"BLOCK_M": 4, "BLOCK_N": 1024}, num_warps=4),
        triton.Config({"BLOCK_M": 8, "BLOCK_N": 1024}, num_warps=8),
        triton.Config({"BLOCK_M": 4, "BLOCK_N": 2048}, num_warps=8),
        # 16-bit tiles carry half the bytes of float32 ones: the same bytes in flight take
        # twice the elements.
        triton.Config({"BLOCK_M": 16, "BLOCK_N": 1024}, num_warps=8),
    ]


# Under the interpreter: tiles small enough that the tests' odd shapes cross tile edges.
_BIAS_GELU_INTERPRETER_CONFIG = triton.Config({"BLOCK_M": 16, "BLOCK_N": 64}, num_warps=4)


@triton.autotune(configs=autotune_configs(bias_gelu_residual_configs(),
                                          interpreter=_BIAS_GELU_INTERPRETER_CONFIG),
                 key=["n_rows", "n_cols"],
                 # an in-place call (out is an input) must not add once per timed config
                 **in_place_hooks("out_ptr", "x_ptr", "bias_ptr", "res_ptr"),
                 **autotune_kwargs())
@triton.jit
def _bias_gelu_residual_kernel(
    x_ptr,  # *in* n_rows x n_cols, row stride stride_xm, columns contiguous
    bias_ptr,  # *in* n_cols
    res_ptr,  # *in* n_rows x n_cols, row stride stride_rm, columns contiguous
    out_ptr,  # *out* n_rows x n_cols, row stride stride_om, columns contiguous
    n_rows,  # number of rows
    n_cols,  # row width
    stride_xm,  # elements between rows of x
    stride_rm,  # elements between rows of residual
    stride_om,  # elements between rows of out
    BLOCK_M: tl.constexpr,  # rows per tile
    BLOCK_N: tl.constexpr,  # columns per tile
):
    # 2-D tiles rather than one flat index: the bias column is then a tile coordinate, not a
    # per-element modulo (an integer division per element, which would cost more than the
    # memory traffic at HBM speed).
    rows = tl.program_id(0).to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    col_in = cols < n_cols
    mask = (rows < n_rows)[:, None] & col_in[None, :]
    x = tl.load(x_ptr + rows[:, None] * stride_xm + cols[None, :], mask=mask).to(tl.float32)
    bias = tl.load(bias_ptr + cols, mask=col_in).to(tl.float32)
    res = tl.load(res_ptr + rows[:, None] * stride_rm + cols[None, :], mask=mask).to(tl.float32)
    t = x + bias[None, :]
    gelu = 0.5 * t * (1.0 + tl.erf(t * 0.7071067811865476))  # exact GELU: t * Phi(t)
    tl.store(out_ptr + rows[:, None] * stride_om + cols[None, :],
             (gelu + res).to(out_ptr.dtype.element_ty), mask=mask)


def add_mul_configs() -> list[triton.Config]:
    """The tiles add_mul autotunes over (the streaming elementwise space, _elementwise.py)."""
    return elementwise_configs()


def add_mul(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, *,
            out: torch.Tensor | None = None, config: triton.Config | None = None) -> torch.Tensor:
    """(a + b) * c in one pass. Operands of one shape and dtype: contiguous, or 1-D strided.

    config: a triton.Config with BLOCK_SIZE (one of add_mul_configs(), say) to launch instead of
    autotuning, for tuning sweeps."""
    (af, bf, cf), of, out = elementwise_operands("add_mul", out, a=a, b=b, c=c)
    meta = None if config is None else launch_config("add_mul", config, ("BLOCK_SIZE",))
    n = af.numel()
    if n:
        args = (af, bf, cf, of, n, af.stride(0), bf.stride(0), cf.stride(0), of.stride(0))
        if meta is None:
            _add_mul_kernel[lambda m: (triton.cdiv(n, m["BLOCK_SIZE"]),)](*args)
        else:
            _add_mul_kernel.fn[(triton.cdiv(n, meta["BLOCK_SIZE"]),)](*args, **meta)
    return out


def bias_gelu_residual(x: torch.Tensor, bias: torch.Tensor, residual: torch.Tensor, *,
                       out: torch.Tensor | None = None,
                       config: triton.Config | None = None) -> torch.Tensor:
    """gelu(x + bias) + residual (exact GELU) in one pass; bias has x's last dimension, rows of
    x, residual and out may have any row stride.

    config: a triton.Config with BLOCK_M and BLOCK_N (one of bias_gelu_residual_configs(), say)
    to launch instead of autotuning, for tuning sweeps."""
    where = "bias_gelu_residual"
    require_tensor(where, "x", x)
    require_dtype(where, x.dtype, DTYPES)
    if x.dim() == 0:
        raise ValueError(f"{where}: x must have at least one dimension")
    for name, t, shape in (("residual", residual, x.shape), ("bias", bias, x.shape[-1:])):
        if not isinstance(t, torch.Tensor) or t.shape != shape or t.dtype != x.dtype \
                or t.device != x.device:
            raise ValueError(f"{where}: {name} must be a {tuple(shape)} {x.dtype} tensor on "
                             f"{x.device}, got {getattr(t, 'shape', type(t).__name__)} "
                             f"{getattr(t, 'dtype', '')}")
    if not bias.is_contiguous():
        raise ValueError(f"{where}: bias must be contiguous")
    out = output(where, "out", out, x.shape, x.dtype, x.device,
                 inputs={"x": x, "residual": residual, "bias": bias}, same_place_ok=True)
    meta = None if config is None else launch_config(where, config, ("BLOCK_M", "BLOCK_N"))
    x2, r2, o2 = (row_view(n, t, where) for n, t in (("x", x), ("residual", residual),
                                                     ("out", out)))
    n_rows, n_cols = x2.shape
    if n_rows and n_cols:
        def grid(m):
            return triton.cdiv(n_rows, m["BLOCK_M"]), triton.cdiv(n_cols, m["BLOCK_N"])

        args = (x2, bias, r2, o2, n_rows, n_cols, x2.stride(0), r2.stride(0), o2.stride(0))
        if meta is None:
            _bias_gelu_residual_kernel[grid](*args)
        else:
            _bias_gelu_residual_kernel.fn[grid(meta)](*args, **meta)
    return out



def add_mul_reference(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    """The unfused torch sequence: an add, then a mul (in float64 if given float64)."""
    return torch.mul(torch.add(a, b), c)


def bias_gelu_residual_reference(x: torch.Tensor, bias: torch.Tensor,
                                 residual: torch.Tensor) -> torch.Tensor:
    """The unfused torch sequence: add the bias, exact GELU, add the residual."""
    return torch.add(torch.nn.functional.gelu(torch.add(x, bias)), residual)


# The best speedup fusion can give over the unfused torch sequence when both run at the same
# bandwidth: the ratio of their transfers (module docstring).
ADD_MUL_IDEAL_SPEEDUP = 6 / 4
BIAS_GELU_RESIDUAL_IDEAL_SPEEDUP = 7 / 3


def add_mul_bytes(a: torch.Tensor) -> int:
    # read a, b, c once; write out once
    return 4 * a.numel() * a.element_size()


def bias_gelu_residual_bytes(x: torch.Tensor) -> int:
    # read x, residual once and bias (one row); write out once
    return (3 * x.numel() + x.shape[-1]) * x.element_size()


def add_mul_inputs(make_tensor, n: int, *, dtype: torch.dtype = torch.float32, **kwargs):
    """(a, b, c): three 1-D operands of n elements (keyword arguments go to make_tensor)."""
    return tuple(make_tensor(n, dtype, **kwargs) for _ in range(3))


def bias_gelu_residual_inputs(make_tensor, n_rows: int, n_cols: int, *,
                              dtype: torch.dtype = torch.float32, **kwargs):
    """(x, bias, residual): x and residual n_rows x n_cols (keyword arguments go to make_tensor
    for both), bias (n_cols,) standard normal."""
    x = make_tensor((n_rows, n_cols), dtype, **kwargs)
    bias = make_tensor(n_cols, dtype)
    residual = make_tensor((n_rows, n_cols), dtype, **kwargs)
    return x, bias, residual

