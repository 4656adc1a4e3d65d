"""conv2d against a float64 reference: filter sizes, stride, padding, dilation, bias, odd sizes,
input and weight layouts, the 1x1-as-GEMM path, poisoned outputs and bad arguments."""

from __future__ import annotations

import pytest
import torch
import triton

from pytest_triton import assert_close, interpreting, skip_interpreter_gap
from reference_kernels.conv2d import conv2d, conv2d_inputs, conv2d_reference

DTYPES = [pytest.param(torch.float16, id="fp16"), pytest.param(torch.bfloat16, id="bf16")]
CL = torch.channels_last

# (n, c, h, w, k, r, s, stride, padding, dilation, bias). Under the interpreter (32 x 16 x 16
# tiles) a few pixels and channels already span several tiles; channel counts 1, 3, 17, 33 leave
# partial BLOCK_K and BLOCK_N tiles.
CASES = {
    "3x3_s1_p1": (2, 17, 9, 8, 33, 3, 3, 1, 1, 1, True),
    "3x3_s2_p1": (1, 16, 11, 10, 20, 3, 3, 2, 1, 1, False),
    "3x3_s1_p0_dil2": (1, 20, 11, 10, 7, 3, 3, 1, 0, 2, True),
    "3x3_s1_p2_dil2": (1, 3, 7, 9, 5, 3, 3, 1, 2, 2, False),
    "1x1": (2, 32, 6, 7, 16, 1, 1, 1, 0, 1, True),
    "1x1_s2": (1, 33, 9, 9, 17, 1, 1, 2, 0, 1, False),
    "5x5_p2": (1, 5, 5, 5, 3, 5, 5, 1, 2, 1, True),
    "3x1_mixed": (1, 6, 10, 7, 9, 3, 1, (2, 1), (1, 0), (1, 2), False),
    "one_pixel": (3, 8, 1, 1, 4, 1, 1, 1, 0, 1, False),
    "one_channel": (1, 1, 5, 6, 1, 3, 3, 1, 1, 1, True),
}
if not interpreting():
    CASES.update({
        "resnet_3x3_64": (2, 64, 56, 56, 64, 3, 3, 1, 1, 1, False),
        "resnet_3x3_s2": (2, 128, 28, 28, 256, 3, 3, 2, 1, 1, True),
        "resnet_1x1_1024": (2, 1024, 14, 14, 256, 1, 1, 1, 0, 1, False),
        "odd_7x7_s2_p3": (3, 3, 33, 31, 65, 7, 7, 2, 3, 1, True),
    })


def _dot_dtype(dtype: torch.dtype) -> None:
    if dtype == torch.bfloat16:
        skip_interpreter_gap("bf16_dot")


def _check(y, x, weight, bias, **conv):
    ref = conv2d_reference(x.double(), weight.double(), None if bias is None else bias.double(),
                           **conv)
    assert_close(y, ref, reduction_size=weight.shape[1] * weight.shape[2] * weight.shape[3])


def _case(make_tensor, name, dtype):
    n, c, h, w, k, r, s, stride, padding, dilation, bias = CASES[name]
    x, weight, b = conv2d_inputs(make_tensor, n, c, h, w, k, r, s, dtype=dtype, bias=bias)
    return x, weight, b, dict(stride=stride, padding=padding, dilation=dilation)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", list(CASES))
def test_conv2d_matches_reference(make_tensor, name, dtype):
    _dot_dtype(dtype)
    x, weight, bias, conv = _case(make_tensor, name, dtype)
    y = conv2d(x, weight, bias, **conv)
    assert y.is_contiguous(memory_format=CL)
    _check(y, x, weight, bias, **conv)


@pytest.mark.parametrize("layout", ["x_nchw", "weight_kcrs", "x_sliced"])
def test_conv2d_any_strides(make_tensor, layout):
    # channels_last is only the fast layout: others must give the same result.
    x, weight, bias, conv = _case(make_tensor, "3x3_s1_p1", torch.float16)
    if layout == "x_nchw":
        x = x.contiguous()
    elif layout == "weight_kcrs":
        weight = weight.contiguous()
    else:  # a window of a larger channels_last image: strides that no dense tensor has
        big = make_tensor((2, 17, 12, 11), torch.float16).contiguous(memory_format=CL)
        x = big[:, :, 2:11, 1:9]
    _check(conv2d(x, weight, bias, **conv), x, weight, bias, **conv)


@pytest.mark.parametrize("variant", ["implicit_gemm", "matmul"])
@pytest.mark.parametrize("with_bias", [False, True], ids=["no_bias", "bias"])
def test_conv2d_1x1_variants(make_tensor, variant, with_bias):
    # A 1x1 stride-1 conv is a GEMM over channels_last views; C and K multiples of 8 so that the
    # matmul may take its TMA path where there is one.
    x, weight, bias = conv2d_inputs(make_tensor, 2, 24, 5, 7, 40, 1, 1, dtype=torch.float16,
                                    bias=with_bias)
    out = make_tensor((2, 40, 5, 7), torch.float16, poison=True).contiguous(memory_format=CL)
    y = conv2d(x, weight, bias, out=out, variant=variant)
    assert y is out
    _check(y, x, weight, bias)


def test_conv2d_poisoned_output(make_tensor):
    x, weight, bias, conv = _case(make_tensor, "3x3_s2_p1", torch.float16)
    ref_shape = conv2d_reference(x.double(), weight.double(), **conv).shape
    out = make_tensor(tuple(ref_shape), torch.float16, poison=True).contiguous(memory_format=CL)
    _check(conv2d(x, weight, bias, out=out, **conv), x, weight, bias, **conv)


def test_conv2d_heavy_tailed_inputs(make_tensor):
    # Magnitudes over six decades (scaled by 1e-2 to keep sums of products under fp16's 65504):
    # a tap read from the wrong pixel, or a padding tap read as data, shows.
    x, weight, bias = conv2d_inputs(make_tensor, 1, 16, 7, 7, 16, 3, 3, dtype=torch.float16,
                                    dist="heavy", scale=1e-2)
    _check(conv2d(x, weight, padding=1), x, weight, None, padding=1)


def test_conv2d_explicit_config(make_tensor):
    x, weight, bias, conv = _case(make_tensor, "3x3_s1_p1", torch.float16)
    cfg = triton.Config({"BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_K": 16, "GROUP_M": 1},
                        num_warps=4, num_stages=1)
    _check(conv2d(x, weight, bias, config=cfg, **conv), x, weight, bias, **conv)


@pytest.mark.parametrize("call, error, match", [
    (lambda x, w: conv2d(x, w[:, :3]), ValueError, "groups"),
    (lambda x, w: conv2d(x.float(), w.float()), TypeError, "not supported"),
    (lambda x, w: conv2d(x, w.to(torch.bfloat16)), TypeError, "one dtype"),
    (lambda x, w: conv2d(x[0], w), ValueError, "4-D"),
    (lambda x, w: conv2d(x, w, stride=0), ValueError, "stride"),
    (lambda x, w: conv2d(x, w, padding=(1, 2, 3)), ValueError, "padding"),
    (lambda x, w: conv2d(x, w, dilation=9), ValueError, "larger than the padded input"),
    (lambda x, w: conv2d(x, w, variant="matmul"), ValueError, "1x1"),
    (lambda x, w: conv2d(x, w, variant="winograd"), ValueError, "variant"),
    (lambda x, w: conv2d(x, w, torch.zeros(2, dtype=x.dtype, device=x.device)), ValueError,
     "bias"),
], ids=["groups", "float32", "mixed_dtype", "3d", "stride", "padding", "too_small", "matmul_3x3",
        "variant", "bias"])
def test_conv2d_rejects_bad_arguments(make_tensor, call, error, match):
    x, weight, _ = conv2d_inputs(make_tensor, 1, 4, 6, 6, 3, 3, 3, dtype=torch.float16)
    with pytest.raises(error, match=match):
        call(x, weight)
