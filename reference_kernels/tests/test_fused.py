"""add_mul and bias_gelu_residual against their unfused torch sequences in float64."""

from __future__ import annotations

import pytest
import torch
import triton

from pytest_triton import assert_close
from reference_kernels.fused import (
    DTYPES,
    add_mul,
    add_mul_configs,
    add_mul_inputs,
    add_mul_reference,
    bias_gelu_residual,
    bias_gelu_residual_configs,
    bias_gelu_residual_inputs,
    bias_gelu_residual_reference,
)

DTYPE_PARAMS = [pytest.param(d, id=str(d).removeprefix("torch.")) for d in DTYPES]
SIZES = [1, 127, 129, 257, 4099, 65537]
# Around the interpreter's 16 x 64 tiles, a prime, one wide row and one tall column (65536
# long would be ~4000 programs here, seconds each test under the interpreter, for no new edge).
SHAPES = [(1, 1), (3, 127), (17, 65), (129, 63), (2, 4099), (1, 8191), (4097, 1)]


def check_add_mul(make_tensor, n, dtype, **input_kwargs):
    a, b, c = add_mul_inputs(make_tensor, n, dtype=dtype, **input_kwargs)
    out = make_tensor.poisoned_like(a)
    assert add_mul(a, b, c, out=out) is out
    assert_close(out, add_mul_reference(a.double(), b.double(), c.double()))


def check_bias_gelu_residual(make_tensor, shape, dtype, *, out_layout=False, **input_kwargs):
    x, bias, res = bias_gelu_residual_inputs(make_tensor, *shape, dtype=dtype, **input_kwargs)
    out = make_tensor.poisoned_like(x, noncontiguous=out_layout)
    assert bias_gelu_residual(x, bias, res, out=out) is out
    assert_close(out, bias_gelu_residual_reference(x.double(), bias.double(), res.double()))


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("dtype", DTYPE_PARAMS)
def test_add_mul_matches_torch(dtype, n, make_tensor):
    check_add_mul(make_tensor, n, dtype)


@pytest.mark.parametrize("dtype", DTYPE_PARAMS)
def test_add_mul_heavy_magnitudes(dtype, make_tensor):
    # a + b over 1e-3..1e3 with random signs (cancellations), times c in [-2, 2): the products
    # stay inside float16's range.
    a, b, _ = add_mul_inputs(make_tensor, 1031, dtype=dtype, dist="heavy")
    c = make_tensor(1031, dtype, dist="uniform", low=-2.0, high=2.0)
    out = add_mul(a, b, c, out=make_tensor.poisoned_like(a))
    assert_close(out, add_mul_reference(a.double(), b.double(), c.double()))


def test_add_mul_strided_1d(make_tensor):
    a, b, c = (make_tensor(515, noncontiguous="elements") for _ in range(3))
    out = add_mul(a, b, c, out=make_tensor(515, poison=True, noncontiguous="elements"))
    assert_close(out, add_mul_reference(a.double(), b.double(), c.double()))


def test_add_mul_rejects_bad_operands(make_tensor):
    a = make_tensor(64)
    with pytest.raises(ValueError, match="one shape"):
        add_mul(a, a, make_tensor(63))
    with pytest.raises(TypeError, match="one dtype"):
        add_mul(a, a, make_tensor(64, torch.bfloat16))
    with pytest.raises(ValueError, match="non-contiguous 2-D"):
        add_mul(*(make_tensor((4, 16), noncontiguous="rows") for _ in range(3)))


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("dtype", DTYPE_PARAMS)
def test_bias_gelu_residual_matches_torch(dtype, shape, make_tensor):
    check_bias_gelu_residual(make_tensor, shape, dtype)


@pytest.mark.parametrize("dtype", DTYPE_PARAMS)
def test_bias_gelu_residual_heavy_magnitudes(dtype, make_tensor):
    # |x + bias| up to 1e3: GELU's two tails (x, and 0) and its curved middle all show up.
    check_bias_gelu_residual(make_tensor, (7, 129), dtype, dist="heavy")


@pytest.mark.parametrize("dtype", DTYPE_PARAMS)
def test_bias_gelu_residual_row_stride_differs_from_width(dtype, make_tensor):
    check_bias_gelu_residual(make_tensor, (19, 67), dtype, out_layout="rows", noncontiguous="rows")


def test_bias_gelu_residual_leading_dimensions(make_tensor):
    x, res = make_tensor((2, 3, 65)), make_tensor((2, 3, 65))
    bias = make_tensor(65)
    assert_close(bias_gelu_residual(x, bias, res),
                 bias_gelu_residual_reference(x.double(), bias.double(), res.double()))


def test_bias_gelu_residual_rejects_bad_operands(make_tensor):
    x, bias, res = bias_gelu_residual_inputs(make_tensor, 4, 9)
    with pytest.raises(ValueError, match=r"bias must be a \(9,\)"):
        bias_gelu_residual(x, make_tensor(8), res)
    with pytest.raises(ValueError, match="residual must be"):
        bias_gelu_residual(x, bias, res.half())
    with pytest.raises(ValueError, match="contiguous columns"):
        bias_gelu_residual(make_tensor((4, 9), noncontiguous="elements"), bias, res)
    with pytest.raises(TypeError, match="not supported"):
        bias_gelu_residual(x.double(), bias.double(), res.double())


# Each tile of the autotune spaces compiled for sm_80 and sm_90 (triton_resources, on CPU too).
# Measured with Triton 3.6 and 3.9: at least one program of 8 warps per SM (12.5%; the 8192-
# element add_mul tile takes 123-152 registers per thread), no shared memory, and no spills but
# bias_gelu_residual's 16 x 1024 tile on 8 warps on sm_80: 64 values of each of x, the
# residual and the result per thread, 255 registers and 8 (3.9) to 16 (3.6) bytes spilled per
# thread; sm_90's ptxas fits it in 219-220.
RESOURCES = pytest.mark.triton_resources(max_spills=0, min_occupancy=0.125,
                                         archs=("sm_80", "sm_90"))
SPILLS_ON_SM80 = pytest.mark.triton_resources(max_spills=16, min_occupancy=0.125,
                                              archs=("sm_80", "sm_90"))


def _gelu_config_params():
    return [pytest.param(c, id=f"{c.kwargs['BLOCK_M']}x{c.kwargs['BLOCK_N']}",
                         marks=SPILLS_ON_SM80 if c.kwargs["BLOCK_M"] * c.kwargs["BLOCK_N"] >= 16384
                         else RESOURCES)
            for c in bias_gelu_residual_configs()]


@RESOURCES
@pytest.mark.parametrize("config", add_mul_configs(), ids=lambda c: f"block{c.kwargs['BLOCK_SIZE']}")
def test_add_mul_explicit_config(make_tensor, config):
    # The sweeps' path: each tile of the autotune space launched as given, at a size no tile
    # divides.
    a, b, c = add_mul_inputs(make_tensor, 8195, dtype=torch.float16)
    out = add_mul(a, b, c, out=make_tensor.poisoned_like(a), config=config)
    assert_close(out, add_mul_reference(a.double(), b.double(), c.double()))


@pytest.mark.parametrize("config", _gelu_config_params())
def test_bias_gelu_residual_explicit_config(make_tensor, config):
    x, bias, res = bias_gelu_residual_inputs(make_tensor, 19, 1027, dtype=torch.float16)
    out = bias_gelu_residual(x, bias, res, out=make_tensor.poisoned_like(x), config=config)
    assert_close(out, bias_gelu_residual_reference(x.double(), bias.double(), res.double()))


def test_explicit_config_is_checked(make_tensor):
    a, b, c = add_mul_inputs(make_tensor, 10)
    with pytest.raises(ValueError, match="add_mul: config lacks"):
        add_mul(a, b, c, config=triton.Config({"BLOCK_M": 16}))
    x, bias, res = bias_gelu_residual_inputs(make_tensor, 3, 10)
    with pytest.raises(ValueError, match="bias_gelu_residual: config BLOCK_N=48 must be a power"):
        bias_gelu_residual(x, bias, res, config=triton.Config({"BLOCK_M": 4, "BLOCK_N": 48}))
