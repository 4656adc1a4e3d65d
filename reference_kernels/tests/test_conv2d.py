"""conv2d against a float64 reference: filter sizes, stride, padding, dilation, bias, odd sizes,
input and weight layouts, the TMA kernel (row masks, split-K, its plan), the 1x1-as-GEMM path,
poisoned outputs and bad arguments."""

from __future__ import annotations

import pytest
import torch
import triton

from pytest_triton import assert_close, assert_every_config, interpreting, skip_interpreter_gap
from reference_kernels import conv2d as cv
from reference_kernels.conv2d import conv2d, conv2d_inputs, conv2d_reference
from reference_kernels.matmul import tma_available

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


# Convs the TMA kernel takes (stride 1, same-size output, C a multiple of 16, K of 8):
# (n, c, h, w, k, r, s, padding, dilation, bias). Images narrower than the filter (every tap but
# the centre in the padding), a 5x3 filter, dilation 2, one pixel, and enough pixels (2 x 9 x 7
# = 126 under 32-row tiles) that tiles straddle image rows and images.
TMA_CASES = {
    "3x3_p1": (2, 16, 9, 7, 24, 3, 3, 1, 1, True),
    "3x3_dil2_p2": (1, 32, 7, 6, 8, 3, 3, 2, 2, False),
    "5x3_p2x1": (1, 16, 6, 5, 16, 5, 3, (2, 1), 1, True),
    "3x3_tiny_image": (2, 16, 1, 2, 8, 3, 3, 1, 1, True),
    "1x1": (2, 32, 5, 7, 40, 1, 1, 0, 1, True),
    "1x1_one_pixel": (3, 16, 1, 1, 8, 1, 1, 0, 1, False),
}
if not interpreting():
    TMA_CASES.update({
        "resnet_3x3_128": (3, 128, 28, 28, 128, 3, 3, 1, 1, True),
        "resnet_3x3_512": (2, 512, 7, 7, 512, 3, 3, 1, 1, False),
        "odd_3x3_48": (3, 48, 13, 11, 72, 3, 3, 1, 1, True),
    })


def _dot_dtype(dtype: torch.dtype) -> None:
    if dtype == torch.bfloat16:
        skip_interpreter_gap("bf16_dot")


def _need_tma(device: torch.device) -> None:
    if not tma_available(device):
        if interpreting():
            skip_interpreter_gap("tensor_descriptor")
        pytest.skip("TMA needs Triton >= 3.4 and a Hopper (sm_90) or newer GPU")


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


def _tma_case(make_tensor, name, dtype):
    n, c, h, w, k, r, s, padding, dilation, bias = TMA_CASES[name]
    x, weight, b = conv2d_inputs(make_tensor, n, c, h, w, k, r, s, dtype=dtype, bias=bias)
    return x, weight, b, dict(padding=padding, dilation=dilation)


def _a_load_config(a_load: str):
    """None for the plan; else small tiles with A loaded by TMA (masked in registers) or by
    masked copies."""
    if a_load == "plan":
        return None
    return triton.Config({"BLOCK_M": 32, "BLOCK_N": 16, "BLOCK_K": 16, "GROUP_M": 2,
                          "A_TMA": a_load == "tma"}, num_warps=4, num_stages=1)


@pytest.mark.parametrize("a_load", ["plan", "tma", "copies"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", list(TMA_CASES))
def test_conv2d_tma_matches_reference(make_tensor, triton_device, name, dtype, a_load):
    _dot_dtype(dtype)
    _need_tma(triton_device)
    x, weight, bias, conv = _tma_case(make_tensor, name, dtype)
    out = make_tensor.poisoned_like(conv2d_reference(x, weight, **conv)).contiguous(
        memory_format=CL)
    y = conv2d(x, weight, bias, out=out, variant="tma", config=_a_load_config(a_load), **conv)
    _check(y, x, weight, bias, **conv)


@pytest.mark.parametrize("split_k", [2, 3, 5, 40])
def test_conv2d_tma_split_k(make_tensor, triton_device, split_k):
    # 3 x 3 taps x 3 channel steps of 16 = 27 reduction steps: 3 divides them, 2 and 5 do not,
    # and of 40 splits 13 have no step at all (their partial sums must be zeros, not garbage).
    _need_tma(triton_device)
    x, weight, bias = conv2d_inputs(make_tensor, 2, 48, 5, 6, 24, 3, 3, dtype=torch.float16,
                                    bias=True)
    cfg = triton.Config({"BLOCK_M": 32, "BLOCK_N": 16, "BLOCK_K": 16, "GROUP_M": 2,
                         "SPLIT_K": split_k}, num_warps=4, num_stages=1)
    _check(conv2d(x, weight, bias, padding=1, variant="tma", config=cfg), x, weight, bias,
           padding=1)


# The interpreter's numpy warns about the inf - inf of the outputs that do read the inf pixel.
@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
@pytest.mark.parametrize("a_load", ["tma", "copies"])
def test_conv2d_tma_padding_taps_read_nothing(make_tensor, triton_device, a_load):
    # The TMA kernel reads a whole block of rows per tap; for output pixels at an image's left
    # edge, tap s = 0 reads the previous image row's last pixel, which the row mask must zero.
    # With that pixel inf, a mask applied as a product (0 * inf = NaN) would poison outputs two
    # rows down, whose true taps never touch it.
    _need_tma(triton_device)
    x, weight, _ = conv2d_inputs(make_tensor, 1, 16, 6, 5, 8, 3, 3, dtype=torch.float16)
    x[0, 3, 0, -1] = float("inf")  # row 0, last column
    y = conv2d(x, weight, padding=1, variant="tma", config=_a_load_config(a_load))
    ref = conv2d_reference(x.double(), weight.double(), padding=1)
    # Rows 0-1 use input row 0 and so hold inf or NaN; rows 2-5 do not.
    assert_close(y[:, :, 2:], ref[:, :, 2:], reduction_size=16 * 9)


def test_conv2d_tma_candidates():
    # The plans timed for each ResNet-50 layer (batch 32) on 132 SMs keep to the kernel's
    # constraints: BLOCK_K divides C, no tile wider than the layer's output channels, 8 or more
    # reduction steps per split, no more split programs than SMs; A by masked copies where
    # taps can fall in the padding, by TMA where none can.
    # The late layers, with fewer 128 x 128 tiles than SMs and the longest reductions, try
    # splitting them.
    for c, k, hw, rs in [(64, 64, 56, 3), (128, 128, 28, 3), (256, 256, 14, 3),
                         (512, 512, 7, 3), (256, 64, 56, 1), (64, 256, 56, 1),
                         (512, 128, 28, 1), (1024, 256, 14, 1)]:
        m = 32 * hw * hw
        cands = cv._tma_candidates(m, k, c, rs * rs, rs > 1, 132)
        assert cands
        for cfg in cands:
            kw = cfg.kwargs
            bm, bn, bk, split = kw["BLOCK_M"], kw["BLOCK_N"], kw["BLOCK_K"], kw["SPLIT_K"]
            assert c % bk == 0 and bn <= max(64, k)
            tiles = -(-m // bm) * -(-k // bn)
            assert split == 1 or (rs * rs * c // bk >= 8 * split and tiles * split <= 132)
        assert {c.kwargs["A_TMA"] for c in cands} == ({False} if rs > 1 else {True})
    late = cv._tma_candidates(32 * 7 * 7, 512, 512, 9, True, 132)
    assert any(c.kwargs["SPLIT_K"] > 1 for c in late)


# --- the NHWC kernel (variant "tma_nhwc"): spatial tiles, 4-D TMA boxes -----------------------

# Convs it takes (stride 1, channels_last, C a multiple of 16, K of 8), any output size:
# (n, c, h, w, k, r, s, padding, dilation, bias). Under the interpreter its tiles are 4 x 4
# pixels by 16 channels: images of 5-10 pixels leave partial tiles in both directions, K = 24
# a partial channel tile, C = 48 three channel steps; outputs smaller than the input (no
# padding, dilation), a 7x7 filter wider than the image, taps entirely in the padding.
NHWC_CASES = {
    "3x3_p1": (2, 16, 9, 7, 24, 3, 3, 1, 1, True),
    "3x3_p0_valid": (1, 48, 7, 10, 8, 3, 3, 0, 1, False),
    "3x3_dil2_p1": (1, 16, 9, 8, 16, 3, 3, 1, 2, True),
    "5x3_p2x0": (2, 16, 6, 9, 8, 5, 3, (2, 0), 1, True),
    "7x7_p3": (1, 16, 5, 6, 8, 7, 7, 3, 1, False),
    "3x3_tiny_image": (2, 16, 1, 2, 8, 3, 3, 1, 1, True),
    "1x1": (2, 32, 5, 7, 40, 1, 1, 0, 1, True),
}
if not interpreting():
    NHWC_CASES.update({
        "resnet_3x3_64": (2, 64, 56, 56, 64, 3, 3, 1, 1, False),
        "resnet_3x3_512": (2, 512, 7, 7, 512, 3, 3, 1, 1, True),
        "odd_3x3_48": (3, 48, 13, 11, 72, 3, 3, 1, 1, True),
    })


def _nhwc_config(tile):
    """None for the plan; else (TILE_H, TILE_W) tiles by 16 channels, 16 per step."""
    if tile is None:
        return None
    return triton.Config({"TILE_H": tile[0], "TILE_W": tile[1], "BLOCK_N": 16, "BLOCK_K": 16,
                          "GROUP_M": 2}, num_warps=4, num_stages=1)


@pytest.mark.parametrize("tile", [None, (1, 16), (2, 8)], ids=["plan", "1x16", "2x8"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", list(NHWC_CASES))
def test_conv2d_nhwc_matches_reference(make_tensor, triton_device, name, dtype, tile):
    _dot_dtype(dtype)
    _need_tma(triton_device)
    n, c, h, w, k, r, s, padding, dilation, with_bias = NHWC_CASES[name]
    x, weight, bias = conv2d_inputs(make_tensor, n, c, h, w, k, r, s, dtype=dtype, bias=with_bias)
    conv = dict(padding=padding, dilation=dilation)
    out = make_tensor.poisoned_like(conv2d_reference(x, weight, **conv)).contiguous(
        memory_format=CL)
    y = conv2d(x, weight, bias, out=out, variant="tma_nhwc", config=_nhwc_config(tile), **conv)
    assert y is out
    _check(y, x, weight, bias, **conv)


# The interpreter's numpy warns about the inf - inf of the outputs that do read the inf pixel.
@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
def test_conv2d_nhwc_padding_taps_read_nothing(make_tensor, triton_device):
    # A box of a tile at the image's left edge starts left of column 0: the copy engine must
    # fill it with zeros, not read the previous row's last pixel (here inf, which would poison
    # outputs two rows down, whose true taps never touch it).
    _need_tma(triton_device)
    x, weight, _ = conv2d_inputs(make_tensor, 1, 16, 6, 5, 8, 3, 3, dtype=torch.float16)
    x[0, 3, 0, -1] = float("inf")  # row 0, last column
    y = conv2d(x, weight, padding=1, variant="tma_nhwc", config=_nhwc_config((2, 8)))
    ref = conv2d_reference(x.double(), weight.double(), padding=1)
    assert_close(y[:, :, 2:], ref[:, :, 2:], reduction_size=16 * 9)


def test_conv2d_nhwc_candidates():
    # The plans for each ResNet-50 3x3 layer (batch 32): BLOCK_K divides C, no tile wider than
    # the layer's output channels, none taller or wider than the image rounded up to a power of
    # two (7 x 7 takes 8 x 8 tiles), each at least 16 pixels.
    for c, k, hw in [(64, 64, 56), (128, 128, 28), (256, 256, 14), (512, 512, 7)]:
        cands = cv._nhwc_candidates(hw, hw, k, c)
        assert cands
        for cfg in cands:
            kw = cfg.kwargs
            assert c % kw["BLOCK_K"] == 0 and kw["BLOCK_N"] <= max(64, k)
            assert kw["TILE_H"] <= triton.next_power_of_2(hw)
            assert kw["TILE_W"] <= triton.next_power_of_2(hw)
            assert kw["TILE_H"] * kw["TILE_W"] >= 16
    assert {(c.kwargs["TILE_H"], c.kwargs["TILE_W"]) for c in cv._nhwc_candidates(7, 7, 512, 512)} \
        == {(8, 8)}


@pytest.mark.parametrize("call, match", [
    (lambda x, w: conv2d(x, w, padding=1, stride=2, variant="tma_nhwc"), "stride 1"),
    (lambda x, w: conv2d(x.contiguous(), w, padding=1, variant="tma_nhwc"), "channels_last"),
    (lambda x, w: conv2d(x[:, :8].contiguous(memory_format=CL),
                         w[:, :8].contiguous(memory_format=CL), padding=1, variant="tma_nhwc"),
     "multiple of 16"),
    (lambda x, w: conv2d(x, w, padding=1, variant="tma_nhwc", config=triton.Config(
        {"BLOCK_M": 32, "BLOCK_N": 16, "BLOCK_K": 16, "GROUP_M": 1})), "TILE_H"),
    (lambda x, w: conv2d(x, w, padding=1, variant="tma_nhwc", config=triton.Config(
        {"TILE_H": 2, "TILE_W": 4, "BLOCK_N": 16, "BLOCK_K": 16, "GROUP_M": 1})), "16 pixels"),
    (lambda x, w: conv2d(x, w, padding=1, variant="tma_nhwc", config=triton.Config(
        {"TILE_H": 4, "TILE_W": 4, "BLOCK_N": 16, "BLOCK_K": 64, "GROUP_M": 1})), "divide C"),
    (lambda x, w: conv2d(x, w, padding=1, variant="tma_nhwc", config=triton.Config(
        {"TILE_H": 3, "TILE_W": 8, "BLOCK_N": 16, "BLOCK_K": 16, "GROUP_M": 1})), "power of two"),
], ids=["stride", "layout", "channels", "config_keys", "config_small", "block_k", "tile_pow2"])
def test_conv2d_nhwc_rejects_bad_arguments(make_tensor, triton_device, call, match):
    _need_tma(triton_device)
    x, weight, _ = conv2d_inputs(make_tensor, 1, 32, 6, 6, 8, 3, 3, dtype=torch.float16)
    with pytest.raises(ValueError, match=match):
        call(x, weight)


@pytest.mark.parametrize("variant", ["tma", "implicit_gemm", "matmul"])
@pytest.mark.parametrize("with_bias", [False, True], ids=["no_bias", "bias"])
def test_conv2d_1x1_variants(make_tensor, triton_device, variant, with_bias):
    # A 1x1 stride-1 conv is a GEMM over channels_last views; C a multiple of 16 and K of 8 so
    # that the TMA kernel, and the matmul's TMA path, can take it where there is TMA.
    if variant == "tma":
        _need_tma(triton_device)
    x, weight, bias = conv2d_inputs(make_tensor, 2, 32, 5, 7, 40, 1, 1, dtype=torch.float16,
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


@pytest.mark.parametrize("name", ["3x3_s1_p1", "3x1_mixed"])
def test_conv2d_every_config(make_tensor, name):
    # Autotuning tests one config per shape; each config of the pointer kernel's autotuner (on a
    # GPU all four of _conv2d_configs, pruned ones included; under the interpreter its one config)
    # must be right here, into a re-poisoned output. 17-33 channels and a few hundred output
    # pixels leave partial tiles in M, N and the channel steps of every config.
    x, weight, bias, conv = _case(make_tensor, name, torch.float16)
    shape = conv2d_reference(x, weight, **conv).shape
    out = make_tensor(tuple(shape), torch.float16, poison=True).contiguous(memory_format=CL)
    assert_every_config(
        cv._conv2d_kernel,
        lambda: _check(conv2d(x, weight, bias, out=out, variant="implicit_gemm", **conv), x,
                       weight, bias, **conv),
        outputs=[out])


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
    (lambda x, w: conv2d(x, w, padding=1, stride=2, variant="tma"), ValueError, "stride 1"),
    (lambda x, w: conv2d(x, w, variant="tma"), ValueError, "height and width"),
    (lambda x, w: conv2d(x.contiguous(), w, padding=1, variant="tma"), ValueError,
     "channels_last"),
    (lambda x, w: conv2d(x, w, torch.zeros(2, dtype=x.dtype, device=x.device)), ValueError,
     "bias"),
    (lambda x, w: conv2d(x, w, stride=1.5), ValueError, r"conv2d: stride=1.5; expected an int"),
    (lambda x, w: conv2d(x, w, config=triton.Config({"BLOCK_M": 32, "BLOCK_N": 16, "BLOCK_K": 16,
                                                     "GROUP_M": -1})),
     ValueError, "conv2d: config GROUP_M=-1 must be an integer >= 1"),
], ids=["groups", "float32", "mixed_dtype", "3d", "stride", "padding", "too_small", "matmul_3x3",
        "variant", "tma_stride", "tma_size", "tma_layout", "bias", "stride_float", "config_group"])
def test_conv2d_rejects_bad_arguments(make_tensor, call, error, match):
    x, weight, _ = conv2d_inputs(make_tensor, 1, 4, 6, 6, 3, 3, 3, dtype=torch.float16)
    with pytest.raises(error, match=match):
        call(x, weight)


@pytest.mark.parametrize("call, match", [
    (lambda x, w: conv2d(x[:, :8].contiguous(memory_format=CL),
                         w[:, :8].contiguous(memory_format=CL), padding=1, variant="tma"),
     "multiple of 16"),
    (lambda x, w: conv2d(x, w, padding=1, variant="tma", config=triton.Config(
        {"BLOCK_M": 32, "BLOCK_N": 16, "BLOCK_K": 64, "GROUP_M": 1})), "divide C"),
    (lambda x, w: conv2d(x, w, padding=1, variant="tma", config=triton.Config(
        {"BLOCK_M": 32, "BLOCK_N": 16, "BLOCK_K": 16, "GROUP_M": 1, "SPLIT_K": 0})), "SPLIT_K"),
], ids=["channels", "block_k", "split_k"])
def test_conv2d_tma_rejects_bad_arguments(make_tensor, triton_device, call, match):
    _need_tma(triton_device)
    x, weight, _ = conv2d_inputs(make_tensor, 1, 32, 6, 6, 8, 3, 3, dtype=torch.float16)
    with pytest.raises(ValueError, match=match):
        call(x, weight)


# --- the default of a padded conv: the faster of the two TMA kernels, timed once per shape ------

@pytest.mark.parametrize("faster", ["tma", "tma_nhwc"])
def test_conv2d_default_takes_the_faster_tma_variant(make_tensor, triton_device, monkeypatch,
                                                     faster):
    # Timings stand in for the GPU's (the interpreter times nothing): the default must launch
    # the variant whose plan was faster, and only that one, with a correct result; a 1x1
    # unpadded conv (no masks) stays on the TMA kernel without timing anything. On a GPU the
    # chosen variant still plans its config for real (_plan times its candidates, launching the
    # kernel many times): those launches are the plan's, not the default's, and are not counted.
    _need_tma(triton_device)
    ms = {"tma": 1.0, "tma_nhwc": 2.0} if faster == "tma" else {"tma": 2.0, "tma_nhwc": 1.0}
    timed, launched, planning = [], [], []
    monkeypatch.setattr(cv, "_VARIANT_CHOICES", {})
    monkeypatch.setattr(cv, "_PLANS", {})
    monkeypatch.setattr(cv, "_PLAN_MS", {})
    monkeypatch.setattr(cv, "_tunable", lambda x, w: True)
    monkeypatch.setattr(cv, "_plan_ms", lambda variant, *args: timed.append(variant) or ms[variant])
    real_plan = cv._plan

    def plan(*args):
        planning.append(True)
        try:
            return real_plan(*args)
        finally:
            planning.pop()

    monkeypatch.setattr(cv, "_plan", plan)
    def recording(name, real):
        def launch(*args):
            if not planning:
                launched.append(name)
            return real(*args)
        return launch

    for name in ("_conv2d_tma", "_conv2d_nhwc"):
        monkeypatch.setattr(cv, name, recording(name, getattr(cv, name)))
    x, weight, bias = conv2d_inputs(make_tensor, 2, 16, 9, 7, 24, 3, 3, dtype=torch.float16,
                                    bias=True)
    y = conv2d(x, weight, bias, padding=1)
    _check(y, x, weight, bias, padding=1)
    assert sorted(timed) == ["tma", "tma_nhwc"]
    assert launched == ["_conv2d_" + ("tma" if faster == "tma" else "nhwc")]
    conv2d(x, weight, bias, padding=1)  # the choice is kept: nothing timed again
    assert len(timed) == 2
    timed.clear()
    x1, w1, _ = conv2d_inputs(make_tensor, 2, 32, 5, 6, 16, 1, 1, dtype=torch.float16)
    _check(conv2d(x1, w1), x1, w1, None)
    assert timed == [] and launched[-1] == "_conv2d_tma"


# --- compiled resources -------------------------------------------------------------------------
# The pointer kernel's tiles (_conv2d_configs) on a 3x3 conv of 64 channels, and the TMA
# kernels' default plans (A by masked copies for a 3x3 conv, by TMA for a 1x1 one; the NHWC
# kernel's first tile), launched as given and compiled by triton_resources for sm_80 and sm_90
# (the TMA kernels: sm_90), on CPU too. Limits that hold with Triton 3.6 and 3.9: shared memory
# within each limit, one program of 4 warps per SM at least (6.25%), no spills on sm_90; on
# sm_80 the pointer kernel's tiles (sized for wgmma) reach 255 registers and spill up to 32 bytes
# per thread (Triton 3.6: three tiles of four; 3.9: 128 x 256).
RESOURCES = {
    "implicit_gemm": pytest.mark.triton_resources(max_spills=32, min_occupancy=0.0625,
                                                  archs=("sm_80", "sm_90")),
    "tma": pytest.mark.triton_resources(max_spills=0, min_occupancy=0.0625, archs=("sm_90",)),
}


@pytest.mark.parametrize("variant", [pytest.param(v, marks=m) for v, m in RESOURCES.items()])
def test_conv2d_configs_compile_within_limits(make_tensor, triton_device, variant):
    x, weight, _ = conv2d_inputs(make_tensor, 1, 64, 4, 4, 64, 3, 3, dtype=torch.float16)
    if variant == "implicit_gemm":
        for cfg in cv._conv2d_configs():
            _check(conv2d(x, weight, padding=1, variant=variant, config=cfg), x, weight, None,
                   padding=1)
        return
    _need_tma(triton_device)
    x1, w1, _ = conv2d_inputs(make_tensor, 1, 64, 8, 8, 64, 1, 1, dtype=torch.float16)
    for xx, ww, pad in ((x, weight, 1), (x1, w1, 0)):
        cfg = cv._default_tma_config(64, ww.shape[0], cv._masked_taps(ww, pad))
        _check(conv2d(xx, ww, padding=pad, variant="tma", config=cfg), xx, ww, None, padding=pad)
    cfg = cv._nhwc_candidates(4, 4, 64, 64)[0]
    _check(conv2d(x, weight, padding=1, variant="tma_nhwc", config=cfg), x, weight, None, padding=1)
