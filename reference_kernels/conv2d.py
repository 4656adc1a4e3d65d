"""2-D convolution (cross-correlation, as torch's conv2d) as an implicit GEMM, fp16 and bf16.

The GEMM is never materialised (no im2col buffer): a program computes a BLOCK_M x BLOCK_N tile of
output pixels x output channels, gathering each A tile straight from the input:

    M = N*P*Q output pixels      (row m -> image n, output row p, output column q)
    N = K output channels
    reduction over R*S*C         (tap (r, s) of the filter, input channel c; c fastest)

so that in channels_last (NHWC) memory, the layout torch's channels_last convention and cuDNN's
fast path use, every A row is BLOCK_K contiguous channels of one input pixel. One loop runs over
all R*S*(C/BLOCK_K) reduction steps, rather than three nested ones, so that the compiler pipelines
it even when C fits in one BLOCK_K.

Three kernels:

- `_conv2d_tma_kernel` (Hopper, Triton >= 3.4; the default where it applies): stride 1 and a
  same-size output (P = H, Q = W: ResNet's 3x3 pad 1 and 1x1 pad 0 layers), channels_last x, weight
  and out, C a multiple of 16. Then the input pixel of output row m under tap (r, s) is row
  m + (r*dil_h - pad_h)*W + (s*dil_w - pad_w) of the (N*H*W, C) matrix x is in memory: each A tile
  is one contiguous block of rows, and the weight, in channels_last memory, a (K, R*S*C) matrix
  that a TMA descriptor reads. Rows whose tap falls in the padding (or wraps into the next image
  row) must contribute zeros: A is gathered by masked asynchronous copies that zero-fill shared
  memory (or, A_TMA=True, TMA-loaded and masked in registers: slower, docs/kernels.md); a 1x1
  unpadded conv needs no mask and is a plain TMA GEMM. For late layers, whose few output tiles
  would leave SMs idle, the reduction can be split over several programs (split-K, summed by
  `_splitk_reduce_kernel`). Tiles and split are chosen per shape by timing a few candidates
  once, the way the perf tests time (`_plan`): these layers run for 10-40 us, where
  Triton's autotuner timing is dominated by host launch overhead, and a cost model ranked the
  candidates wrongly.
- `_conv2d_nhwc_kernel` (variant "tma_nhwc", Hopper; the default of a padded conv where its
  timed plan beats the TMA kernel's, see _faster_tma_variant): stride 1,
  any padding, dilation and output size, channels_last operands. Output tiles are TILE_H x
  TILE_W pixels of one image, and x is read through a 4-D (N, H, W, C) descriptor: the input
  pixels of a tile under one tap are one box, shifted by the tap, whose part outside the image
  the TMA engine fills with zeros. No masks and no per-element addresses, so large tiles (which
  cut the traffic from L2 that bounds the 3x3 layers) are cheap to feed; see _NHWC_TILES.
- `_conv2d_kernel`: pointer loads with masks, any stride, padding, dilation and layout (masked-out
  taps are the padding); autotuned.

Inputs: x an NCHW-shaped tensor (any strides; channels_last is the fast layout), weight
(K, C, R, S) (any strides; channels_last, C fastest, is the fast layout), optional bias (K,).
The output is NCHW-shaped in channels_last memory, like torch's for a channels_last input.
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl
from triton.runtime.errors import OutOfResources

from pytest_triton import autotune_configs, do_bench, interpreting

from ._checks import config_values, output, require_dtype, require_tensor
from ._device import sm_count
from ._gemm import TensorDescriptor, grouped_tile, tma_available
from ._tuning import autotune_kwargs, launch_autotuned
from .matmul import matmul, matmul_kernel_for

DTYPES = (torch.float16, torch.bfloat16)
VARIANTS = ("tma", "tma_nhwc", "implicit_gemm", "matmul")

# Convs of fewer flops than this are not tuned: they take the default TMA plan, or the pointer
# kernel's first config, untimed. Timing candidates costs their compiles (0.5-2 s each) and about
# 50 ms each, which a conv of a few microseconds does not repay (ResNet-50's layers at batch 32
# have 3-7 GFLOP).
TUNE_MIN_FLOPS = 2**30

# A 1x1, stride-1, unpadded conv over a channels_last input is also a plain GEMM, (N*H*W, C) @
# (C, K), which the matmul module can run: variant="matmul". It is not the default: its autotuned
# tiles are sized for LLM GEMMs (N in the thousands), not for N = K of 64-256 output channels.


def _conv2d_configs() -> list[triton.Config]:
    """Tile shapes of the pointer kernel, for M = N*P*Q in the tens of thousands and N = K output
    channels of 64-512.

    BLOCK_K 64 is one 128-byte fp16 line of channels per input pixel (every ResNet layer past
    the stem has C a multiple of 64). BLOCK_M of 128 or 256 rows feeds wgmma 64 rows per
    warpgroup (4 warps for 128 x 64, 8 for the larger tiles); BLOCK_N follows K, because a tile
    wider than the layer's output channels computes padding (`_prune_configs` drops those), and
    the 64-wide tiles keep the late layers (7 x 7 images: M = 1568 at batch 32) spread over more
    than a handful of SMs. 4 stages where 4 x (A + B) tiles fit in shared memory (96-128 KB), 3 for
    the 256-row and 256-wide tiles (120-144 KB; all measured by compiling for sm_90).
    """
    shapes = [(128, 64, 64, 4, 4), (256, 64, 64, 3, 8), (128, 128, 64, 4, 8),
              (128, 256, 64, 3, 8)]
    return [triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": 8},
                          num_stages=stages, num_warps=warps)
            for bm, bn, bk, stages, warps in shapes]


def _prune_configs(configs, named_args, **kwargs):
    """Drop the tiles wider than the output channels (there is always the 64-wide one); keep
    only the first under TUNE_MIN_FLOPS (see there)."""
    a = named_args
    k_out = a["K"]
    kept = [c for c in configs if c.kwargs["BLOCK_N"] <= max(64, k_out)] or configs[:1]
    flops = 2 * a["N"] * a["P"] * a["Q"] * k_out * a["C"] * a["R"] * a["S"]
    return kept[:1] if flops < TUNE_MIN_FLOPS else kept


# Under the interpreter: tiles small enough that the tests' few pixels and channels span several.
INTERPRETER_CONFIG = triton.Config({"BLOCK_M": 32, "BLOCK_N": 16, "BLOCK_K": 16, "GROUP_M": 2},
                                   num_stages=1, num_warps=4)


@triton.autotune(configs=autotune_configs(_conv2d_configs(), interpreter=INTERPRETER_CONFIG),
                 key=["N", "C", "H", "W", "K", "R", "S", "stride_h", "stride_w"],
                 prune_configs_by={"early_config_prune": _prune_configs}, **autotune_kwargs())
@triton.jit
def _conv2d_kernel(
    x_ptr,  # *in* N x C x H x W, strides (sxn, sxc, sxh, sxw); channels_last: sxc == 1
    w_ptr,  # *in* K x C x R x S, strides (swk, swc, swr, sws)
    bias_ptr,  # *in* K, or any pointer when HAS_BIAS is False
    y_ptr,  # *out* N x K x P x Q, strides (syn, syk, syp, syq)
    N, C, H, W,  # input batch, channels, height, width
    K, P, Q,  # output channels, height, width
    R, S,  # filter height, width
    stride_h, stride_w,
    pad_h, pad_w,
    dil_h, dil_w,
    sxn, sxc, sxh, sxw,
    swk, swc, swr, sws,
    syn, syk, syp, syq,
    HAS_BIAS: tl.constexpr,
    BLOCK_M: tl.constexpr,  # output pixels per tile
    BLOCK_N: tl.constexpr,  # output channels per tile
    BLOCK_K: tl.constexpr,  # input channels per reduction step
    GROUP_M: tl.constexpr,
):
    M = N * P * Q
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(K, BLOCK_N)
    pid_m, pid_n = grouped_tile(tl.program_id(0), num_pid_m, num_pid_n, GROUP_M)

    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    m_ok = offs_m < M
    img = offs_m // (P * Q)
    pq = offs_m % (P * Q)
    h0 = (pq // Q) * stride_h - pad_h  # input row of tap r = 0
    w0 = (pq % Q) * stride_w - pad_w  # input column of tap s = 0
    x_rows = x_ptr + img.to(tl.int64) * sxn  # int64: inputs of 2**31 elements stay correct

    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    n_ok = offs_n < K
    w_cols = w_ptr + offs_n.to(tl.int64) * swk

    offs_c = tl.arange(0, BLOCK_K)
    c_steps = tl.cdiv(C, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for step in range(0, R * S * c_steps):
        tap = step // c_steps
        c = (step - tap * c_steps) * BLOCK_K + offs_c
        r = tap // S
        s = tap - r * S
        h = h0 + r * dil_h
        w = w0 + s * dil_w
        # Taps in the padding read nothing and contribute zeros.
        row_ok = m_ok & (h >= 0) & (h < H) & (w >= 0) & (w < W)
        c_ok = c < C
        a_ptrs = x_rows[:, None] + (h * sxh + w * sxw)[:, None] + c[None, :] * sxc
        a = tl.load(a_ptrs, mask=row_ok[:, None] & c_ok[None, :], other=0.0)
        b_ptrs = w_cols[None, :] + (c * swc)[:, None] + r * swr + s * sws
        b = tl.load(b_ptrs, mask=c_ok[:, None] & n_ok[None, :], other=0.0)
        acc = tl.dot(a, b, acc)

    if HAS_BIAS:
        acc += tl.load(bias_ptr + offs_n, mask=n_ok, other=0.0).to(tl.float32)[None, :]
    y_rows = img.to(tl.int64) * syn + (pq // Q) * syp + (pq % Q) * syq
    y_ptrs = y_ptr + y_rows[:, None] + offs_n[None, :] * syk
    tl.store(y_ptrs, acc.to(y_ptr.dtype.element_ty), mask=m_ok[:, None] & n_ok[None, :])


@triton.jit
def _conv2d_tma_kernel(
    x_desc,  # descriptor of x as an (N*H*W) x C row-major matrix, block [BLOCK_M, BLOCK_K]
    x_ptr,  # *in* the same (N*H*W) x C matrix, read through pointers when A_TMA is False
    w_desc,  # descriptor of the weight as a K x (R*S*C) row-major matrix (tap-major, channel
             # fastest: channels_last memory), block [BLOCK_N, BLOCK_K]
    y_desc,  # descriptor of y as an (N*H*W) x K row-major matrix, block [BLOCK_M, BLOCK_N]
    ws_ptr,  # *out* split_k x M x K float32 partial sums when SPLIT, else unused
    bias_ptr,  # *in* K, read when HAS_BIAS and not SPLIT
    M,  # output pixels N*H*W (stride 1, same-size output: also the input pixels)
    C, H, W,  # input channels (a multiple of BLOCK_K), height, width
    K,  # output channels
    R, S,  # filter height, width
    pad_h, pad_w,
    dil_h, dil_w,
    split_k,  # programs sharing one output tile's reduction (program_id(1))
    HAS_BIAS: tl.constexpr,
    MASK_TAPS: tl.constexpr,  # False when no tap can fall outside the image (1x1, no padding)
    A_TMA: tl.constexpr,  # load A tiles through x_desc (else through x_ptr, masked)
    SPLIT: tl.constexpr,  # split_k > 1: write float32 partial sums to ws_ptr
    BLOCK_M: tl.constexpr,  # output pixels per tile
    BLOCK_N: tl.constexpr,  # output channels per tile
    BLOCK_K: tl.constexpr,  # input channels per reduction step
    GROUP_M: tl.constexpr,
):
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(K, BLOCK_N)
    pid_m, pid_n = grouped_tile(tl.program_id(0), num_pid_m, num_pid_n, GROUP_M)
    off_m = pid_m * BLOCK_M
    off_n = pid_n * BLOCK_N
    offs_m = off_m + tl.arange(0, BLOCK_M)
    pq = offs_m % (H * W)
    h0 = pq // W - pad_h  # input row of tap r = 0
    w0 = pq % W - pad_w  # input column of tap s = 0
    offs_k = tl.arange(0, BLOCK_K)

    c_steps = C // BLOCK_K
    steps = R * S * c_steps
    per_split = tl.cdiv(steps, split_k)
    first = tl.program_id(1) * per_split
    last = tl.minimum(first + per_split, steps)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for step in range(first, last):
        tap = step // c_steps
        c0 = (step - tap * c_steps) * BLOCK_K
        r = tap // S
        dh = r * dil_h
        dw = (tap - r * S) * dil_w
        shift = (dh - pad_h) * W + (dw - pad_w)  # input row of output row m: m + shift
        if A_TMA:
            # One block of rows for the whole tile. Past either end of x the descriptor reads
            # zeros (rows before 0 for the first tiles' upper taps); rows past M are never stored.
            a = x_desc.load([off_m + shift, c0])
            if MASK_TAPS:
                # A row whose tap lands in the padding read a neighbouring pixel (the previous
                # or next image row, or image): it must contribute zeros. tl.where, not a
                # product, so that an inf or NaN in that pixel cannot leak in as 0 * inf. (The
                # tile then reaches the tensor cores from registers.)
                h = h0 + dh
                w = w0 + dw
                inside = (h >= 0) & (h < H) & (w >= 0) & (w < W)
                a = tl.where(inside[:, None], a, 0.0)
        else:
            # The same rows gathered by masked asynchronous copies: padding rows are zero-filled
            # in shared memory, so the tile reaches the tensor cores from there.
            rows_ok = offs_m < M
            if MASK_TAPS:
                h = h0 + dh
                w = w0 + dw
                rows_ok = rows_ok & (h >= 0) & (h < H) & (w >= 0) & (w < W)
            a_ptrs = x_ptr + (offs_m + shift)[:, None].to(tl.int64) * C + (c0 + offs_k)[None, :]
            a = tl.load(a_ptrs, mask=rows_ok[:, None], other=0.0)
        b = w_desc.load([off_n, tap * C + c0])
        acc = tl.dot(a, tl.trans(b), acc)

    offs_n = off_n + tl.arange(0, BLOCK_N)
    if not SPLIT:
        if HAS_BIAS:
            acc += tl.load(bias_ptr + offs_n, mask=offs_n < K, other=0.0).to(tl.float32)[None, :]
        # The TMA store clips the rows and columns past M and K.
        y_desc.store([off_m, off_n], acc.to(y_desc.dtype))
    else:
        # Partial sums stay float32 (they mostly stay in L2 too) until the reduce kernel.
        ws = (ws_ptr + tl.program_id(1).to(tl.int64) * M * K
              + offs_m[:, None].to(tl.int64) * K + offs_n[None, :])
        tl.store(ws, acc, mask=(offs_m < M)[:, None] & (offs_n < K)[None, :])


@triton.jit
def _conv2d_nhwc_kernel(
    x_desc,  # 4-D descriptor of x as N x H x W x C (channels_last memory), block
             # [1, TILE_H, TILE_W, BLOCK_K]
    w_desc,  # descriptor of the weight as a K x (R*S*C) row-major matrix (tap-major, channel
             # fastest: channels_last memory), block [BLOCK_N, BLOCK_K]
    y_desc,  # 4-D descriptor of y as N x P x Q x K (channels_last memory), block
             # [1, TILE_H, TILE_W, BLOCK_N]
    bias_ptr,  # *in* K, read when HAS_BIAS
    N, C,  # batch, input channels (a multiple of BLOCK_K)
    P, Q,  # output height, width (stride 1)
    K,  # output channels
    R, S,  # filter height, width
    pad_h, pad_w,
    dil_h, dil_w,
    HAS_BIAS: tl.constexpr,
    TILE_H: tl.constexpr,  # output rows per tile
    TILE_W: tl.constexpr,  # output columns per tile: TILE_H x TILE_W pixels of one image
    BLOCK_N: tl.constexpr,  # output channels per tile
    BLOCK_K: tl.constexpr,  # input channels per reduction step
    GROUP_M: tl.constexpr,
):
    # Output tiles are TILE_H x TILE_W pixels of one image, so the input pixels tap (r, s)
    # needs are one box of x, TILE_H x TILE_W pixels shifted by (r*dil_h - pad_h, s*dil_w -
    # pad_w): one TMA copy per tap and channel step. The copy engine fills what lies outside
    # the image (the padding, negative coordinates too) with zeros, so no tap is masked and the
    # tile reaches the tensor cores from shared memory; the box of a tap overlaps its
    # neighbours', which L2 serves.
    BLOCK_M: tl.constexpr = TILE_H * TILE_W
    tiles_h = tl.cdiv(P, TILE_H)
    tiles_w = tl.cdiv(Q, TILE_W)
    num_pid_m = N * tiles_h * tiles_w
    num_pid_n = tl.cdiv(K, BLOCK_N)
    pid_m, pid_n = grouped_tile(tl.program_id(0), num_pid_m, num_pid_n, GROUP_M)
    img = pid_m // (tiles_h * tiles_w)
    in_img = pid_m % (tiles_h * tiles_w)
    p0 = (in_img // tiles_w) * TILE_H
    q0 = (in_img % tiles_w) * TILE_W
    off_n = pid_n * BLOCK_N

    c_steps = C // BLOCK_K
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for step in range(0, R * S * c_steps):
        tap = step // c_steps
        c0 = (step - tap * c_steps) * BLOCK_K
        r = tap // S
        s = tap - r * S
        a = x_desc.load([img, p0 + r * dil_h - pad_h, q0 + s * dil_w - pad_w, c0])
        b = w_desc.load([off_n, tap * C + c0])
        acc = tl.dot(a.reshape(BLOCK_M, BLOCK_K), tl.trans(b), acc)

    if HAS_BIAS:
        offs_n = off_n + tl.arange(0, BLOCK_N)
        acc += tl.load(bias_ptr + offs_n, mask=offs_n < K, other=0.0).to(tl.float32)[None, :]
    # The TMA store clips the pixels past P and Q and the channels past K.
    y_desc.store([img, p0, q0, off_n],
                 acc.to(y_desc.dtype).reshape(1, TILE_H, TILE_W, BLOCK_N))


@triton.jit
def _splitk_reduce_kernel(
    ws_ptr,  # *in* split_k x M x K float32 partial sums, contiguous
    bias_ptr,  # *in* K, or any pointer when HAS_BIAS is False
    y_ptr,  # *out* M x K row-major (the channels_last output's (N*P*Q, K) view)
    MK,  # M * K, the elements of one partial
    K,  # output channels
    split_k,  # partials to sum
    HAS_BIAS: tl.constexpr,
    BLOCK: tl.constexpr,  # elements per program
):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    ok = offs < MK
    acc = tl.load(ws_ptr + offs, mask=ok, other=0.0)
    for split in range(1, split_k):
        acc += tl.load(ws_ptr + split * MK + offs, mask=ok, other=0.0)
    if HAS_BIAS:
        acc += tl.load(bias_ptr + offs % K, mask=ok, other=0.0).to(tl.float32)
    tl.store(y_ptr + offs, acc.to(y_ptr.dtype.element_ty), mask=ok)


# Tiles of the TMA kernel: (BLOCK_M, BLOCK_N, num_warps, num_stages). wgmma takes 64 rows per
# warpgroup: 128- and 256-row tiles over 8 warps, 64-row tiles over 4. Stages: as many as fit in
# shared memory with the epilogue tile at BLOCK_K 64 (3 x 48 KB + 64 KB for the 256-wide and
# 256-row tiles; 4 x 32 KB + 32 KB for 128 x 128; 4 x 24 KB + 16 KB for 128 x 64 and 64 x 128,
# which then fit twice per SM). Each tile was the timed plan of some ResNet-50 layer (which ones:
# docs/kernels.md); 256 x 64 was never the best and is left out.
_TMA_TILES = ((64, 128, 4, 4), (128, 64, 4, 4), (128, 128, 8, 4), (128, 256, 8, 3),
              (256, 128, 8, 3))

# Under the interpreter: small tiles, so that the tests' few pixels and channels span several.
INTERPRETER_TMA_CONFIG = triton.Config({"BLOCK_M": 32, "BLOCK_N": 16, "BLOCK_K": 16,
                                        "GROUP_M": 2}, num_stages=1, num_warps=4)


# Tiles of the NHWC kernel (variant "tma_nhwc"): (TILE_H, TILE_W, BLOCK_N, num_warps, num_stages),
# TILE_H x TILE_W output pixels of one image by BLOCK_N output channels. What it is for: the TMA
# kernel's 3x3 layers, on their timed best 64 x 128 tiles, stay well behind cuDNN, and their
# traffic from L2 is what bounds them (docs/kernels.md): every tap reads its A tile again and
# every 64-row tile the layer's whole weight; a tile does 2 x BM x BN flops per BM + BN
# elements it loads, so only larger tiles cut that traffic, and with masked gathers
# (per-element addresses and predicates) larger tiles lost.
# Here A is one TMA box per tap, no address arithmetic, padding zero-filled by the copy engine,
# so 128- and 256-pixel tiles are cheap to feed. TILE_H = 1 keeps A in shared memory for the
# tensor cores (a box of one row reshapes in place); taller tiles reach them from registers
# (Triton 3.6, sm_90: one ldmatrix pass per step, no spills). Shared memory (Triton 3.6, sm_90,
# BLOCK_K 64): 8 x 16 x 128 in 4 stages 115 KB, 16 x 16 x 128 in 3 115 KB, 8 x 16 x 256 in 3
# 131 KB, 8 x 8 x 128 in 4 90 KB; registers 107-186.
# The tiles below came best, or within noise of it, at ResNet-50's 3x3 layers (1 x 64 x 64 at
# 56 x 56, 8 x 16 and 16 x 8 by 128 channels at 28 x 28, 8 x 8 at 14 x 14); at 7 x 7 the "tma"
# plan stays the default (_faster_tma_variant). Tiles never the best are not timed. Measured in
# docs/kernels.md.
_NHWC_TILES = ((8, 16, 128, 8, 4), (16, 8, 128, 8, 4), (8, 8, 128, 4, 4), (1, 64, 64, 4, 4))

# Under the interpreter: 4 x 4 pixels by 16 channels, so that the tests' small images span
# several tiles in each direction.
INTERPRETER_NHWC_CONFIG = triton.Config({"TILE_H": 4, "TILE_W": 4, "BLOCK_N": 16, "BLOCK_K": 16,
                                         "GROUP_M": 2}, num_stages=1, num_warps=4)


def _block_k(C: int) -> int:
    return next(b for b in (64, 32, 16) if C % b == 0)


def _tma_cfg(bm, bn, bk, split, a_tma, warps, stages) -> triton.Config:
    return triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": 8,
                          "SPLIT_K": split, "A_TMA": a_tma}, num_stages=stages, num_warps=warps)


def _tma_candidates(M: int, K: int, C: int, taps: int, masked: bool,
                    n_sms: int) -> list[triton.Config]:
    """The plans timed for a conv: every tile no wider than the layer's output channels; split-K
    by 2 or 4 only where the unsplit tiles leave SMs idle and each split keeps 8 or more
    reduction steps (late layers: 1568 x 512 outputs are 52 tiles of 128 x 128 over reductions of
    72 steps). Masked convs load A by masked copies, which beat TMA loads masked in registers on
    every tile of every 3x3 ResNet-50 layer measured (with A in registers each step's
    tensor-core work waits on the mask; docs/kernels.md); those stay available through
    config=."""
    bk = _block_k(C)
    steps = taps * C // bk
    out = []
    for bm, bn, warps, stages in _TMA_TILES:
        if bn > max(64, K):  # wider than the layer: computes padding
            continue
        tiles = triton.cdiv(M, bm) * triton.cdiv(K, bn)
        for split in [1] + [s for s in (2, 4) if tiles * s <= n_sms and steps >= 8 * s]:
            out.append(_tma_cfg(bm, bn, bk, split, not masked, warps, stages))
    return out


def conv2d_tma_candidates(x: torch.Tensor, weight: torch.Tensor, *, padding=0, dilation=1,
                          variant: str = "tma") -> list[triton.Config]:
    """The plans a TMA variant ("tma": stride 1, same-size output; "tma_nhwc": stride 1) times
    for this conv on x's device: each a config for conv2d(variant=variant, config=...)."""
    N, C, H, W = x.shape
    K, _, R, S = weight.shape
    if variant == "tma_nhwc":
        P, Q = conv2d_output_size(x.shape, weight.shape, 1, padding, dilation)
        return _nhwc_candidates(P, Q, K, C)
    if variant != "tma":
        raise ValueError(f"conv2d_tma_candidates: variant={variant!r}; expected 'tma' or "
                         "'tma_nhwc'")
    return _tma_candidates(N * H * W, K, C, R * S, _masked_taps(weight, padding),
                           sm_count(x.device))


def _masked_taps(weight: torch.Tensor, padding) -> bool:
    """Whether some tap of the filter can fall in the padding (anything but a 1x1 unpadded
    conv): the TMA kernel then gathers A by masked copies."""
    return tuple(weight.shape[2:]) != (1, 1) or _pair(padding, "padding") != (0, 0)


def _default_tma_config(C: int, K: int, masked: bool) -> triton.Config:
    """The plan of convs too small to time: 64 x 128 (128 x 64 for 64 output channels or
    fewer), the tiles that were best or near it on most ResNet-50 layers, unsplit; A through
    masked copies when taps can fall in the padding (tensor cores read it from shared memory)."""
    bm, bn = (128, 64) if K <= 64 else (64, 128)
    return _tma_cfg(bm, bn, _block_k(C), 1, not masked, 4, 4)


def _nhwc_cfg(th, tw, bn, bk, warps, stages) -> triton.Config:
    return triton.Config({"TILE_H": th, "TILE_W": tw, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": 8},
                         num_stages=stages, num_warps=warps)


def _nhwc_candidates(P: int, Q: int, K: int, C: int) -> list[triton.Config]:
    """The NHWC kernel's plans for a P x Q output of K channels: the tiles of _NHWC_TILES no
    wider than the layer's output channels and no taller or wider than the image (rounded up to
    a power of two: 7 x 7 takes 8 x 8 tiles, 56-wide rows 64-pixel ones), in that order; the
    64-row tile of 8 x 8 as the one left where none fits."""
    bk = _block_k(C)
    out = [_nhwc_cfg(th, tw, bn, bk, warps, stages) for th, tw, bn, warps, stages in _NHWC_TILES
           if bn <= max(64, K) and th <= triton.next_power_of_2(P)
           and tw <= triton.next_power_of_2(Q)]
    return out or [_nhwc_cfg(8, 8, 64, bk, 4, 4)]


_PLANS: dict = {}  # (variant, device, shapes, padding, dilation, dtype) -> the fastest
_PLAN_MS: dict = {}  # the same keys -> the fastest plan's median ms, where it was timed
_VARIANT_CHOICES: dict = {}  # (None, device, ...) -> the faster of "tma" and "tma_nhwc"


def _plan_key(variant, x, weight, padding, dilation):
    return (variant, str(x.device), tuple(x.shape), tuple(weight.shape),
            _pair(padding, "padding"), _pair(dilation, "dilation"), x.dtype)


def _plan(variant, x, weight, bias, out, padding, dilation) -> triton.Config:
    """The config of a TMA variant ("tma" or "tma_nhwc") for this conv: the interpreter's small
    tiles; the fastest of the variant's candidates, timed once per shape as the perf tests time
    (pytest_triton.do_bench: CUDA-graph replays, cold L2), for convs of TUNE_MIN_FLOPS or more;
    else the first candidate (for "tma" its default plan)."""
    if interpreting():
        return INTERPRETER_TMA_CONFIG if variant == "tma" else INTERPRETER_NHWC_CONFIG
    N, C, H, W = x.shape
    K, _, R, S = weight.shape
    key = _plan_key(variant, x, weight, padding, dilation)
    if key in _PLANS:
        return _PLANS[key]
    if variant == "tma":
        masked = _masked_taps(weight, padding)
        default = _default_tma_config(C, K, masked)
        candidates = _tma_candidates(N * H * W, K, C, R * S, masked, sm_count(x.device))
        launch = _conv2d_tma
    else:
        candidates = _nhwc_candidates(out.shape[2], out.shape[3], K, C)
        default = candidates[0]
        launch = _conv2d_nhwc
    if not _tunable(x, weight):
        return default  # (inside a graph capture nothing may be timed)
    timings = []
    for cfg in candidates:
        try:
            ms = do_bench(lambda cfg=cfg: launch(x, weight, bias, out, padding, dilation, cfg))
        except OutOfResources:  # more shared memory than this GPU has: not a plan here
            continue
        timings.append((ms, cfg))
    best = min(timings, key=lambda t: t[0]) if timings else None
    _PLANS[key] = best[1] if best else default
    if best:
        _PLAN_MS[key] = best[0]
    return _PLANS[key]


def _tunable(x, weight) -> bool:
    """Whether this conv's plans are timed (see _plan): on a GPU, outside a graph capture, of
    TUNE_MIN_FLOPS or more."""
    N, C, H, W = x.shape
    K, _, R, S = weight.shape
    return (not interpreting() and 2 * N * H * W * K * C * R * S >= TUNE_MIN_FLOPS
            and not torch.cuda.is_current_stream_capturing())


def _faster_tma_variant(x, weight, bias, out, padding, dilation) -> str:
    """The default of a masked conv both TMA kernels take (3x3 with padding 1, stride 1): the
    variant whose timed plan is the faster on this GPU, once per shape; "tma" where nothing is
    timed. The NHWC kernel's larger tiles won 3 of ResNet-50's four 3x3 layers and lost the
    7 x 7 one (64-pixel tiles of a 49-pixel image), so neither wins everywhere
    (docs/kernels.md)."""
    key = _plan_key(None, x, weight, padding, dilation)
    if key in _VARIANT_CHOICES:
        return _VARIANT_CHOICES[key]
    if not _tunable(x, weight):
        return "tma"
    ms = {v: _plan_ms(v, x, weight, bias, out, padding, dilation) for v in ("tma", "tma_nhwc")}
    _VARIANT_CHOICES[key] = min(ms, key=lambda v: (ms[v], v != "tma"))
    return _VARIANT_CHOICES[key]


def _plan_ms(variant, x, weight, bias, out, padding, dilation) -> float:
    """The median ms of the variant's plan for this conv (planned now if it never was); inf
    where none was timed."""
    _plan(variant, x, weight, bias, out, padding, dilation)
    return _PLAN_MS.get(_plan_key(variant, x, weight, padding, dilation), math.inf)


class _PlanReport:
    """What conv2d_kernel_for returns for a TMA variant: best_config is the plan in use (for
    reports; read after the first call, which times the candidates)."""

    def __init__(self, variant, x, weight, padding, dilation):
        self._args = (variant, x, weight, padding, dilation)

    @property
    def best_config(self):
        variant, x, weight, padding, dilation = self._args
        if variant is None:  # the default of a masked conv: whichever TMA variant it chose
            variant = _VARIANT_CHOICES.get(_plan_key(None, x, weight, padding, dilation), "tma")
        return _PLANS.get(_plan_key(variant, x, weight, padding, dilation))


def _pair(value, name: str) -> tuple[int, int]:
    try:
        pair = (value, value) if isinstance(value, int) else tuple(value)
    except TypeError:  # a float, None: nothing to unpack
        raise ValueError(f"conv2d: {name}={value!r}; expected an int or a pair of ints") from None
    if len(pair) != 2 or not all(isinstance(v, int) and not isinstance(v, bool) for v in pair):
        raise ValueError(f"conv2d: {name}={value!r}; expected an int or a pair of ints")
    return pair


def conv2d_output_size(x_shape, w_shape, stride=1, padding=0, dilation=1) -> tuple[int, int]:
    """(P, Q), the output height and width, as torch computes them."""
    (sh, sw), (ph, pw), (dh, dw) = _pair(stride, "stride"), _pair(padding, "padding"), \
        _pair(dilation, "dilation")
    H, W = x_shape[2], x_shape[3]
    R, S = w_shape[2], w_shape[3]
    return (H + 2 * ph - dh * (R - 1) - 1) // sh + 1, (W + 2 * pw - dw * (S - 1) - 1) // sw + 1


def _check_operands(x, weight, bias, stride, padding, dilation, out):
    for name, t, dims in (("x", x, "N, C, H, W"), ("weight", weight, "K, C, R, S")):
        require_tensor("conv2d", name, t)
        if t.dim() != 4:
            raise ValueError(f"conv2d: {name} must be 4-D ({dims}), got shape {tuple(t.shape)}")
    require_dtype("conv2d", x.dtype, DTYPES)
    if weight.dtype != x.dtype:
        raise TypeError(f"conv2d: x and weight must have one dtype, got {x.dtype} and "
                        f"{weight.dtype}")
    if weight.device != x.device:
        raise ValueError(f"conv2d: x and weight are on different devices ({x.device}, "
                         f"{weight.device})")
    if weight.shape[1] != x.shape[1]:
        raise ValueError(f"conv2d: weight {tuple(weight.shape)} expects {weight.shape[1]} input "
                         f"channels, x {tuple(x.shape)} has {x.shape[1]} (groups are not "
                         "supported)")
    for name, v in (("stride", stride), ("dilation", dilation)):
        if min(_pair(v, name)) < 1:
            raise ValueError(f"conv2d: {name}={v!r} must be >= 1")
    if min(_pair(padding, "padding")) < 0:
        raise ValueError(f"conv2d: padding={padding!r} must be >= 0")
    K = weight.shape[0]
    if bias is not None and (not isinstance(bias, torch.Tensor) or bias.shape != (K,)
                             or bias.device != x.device or not bias.dtype.is_floating_point):
        raise ValueError(f"conv2d: bias must be a floating-point tensor of shape ({K},) on "
                         f"{x.device}")
    P, Q = conv2d_output_size(x.shape, weight.shape, stride, padding, dilation)
    if P < 1 or Q < 1:
        raise ValueError(f"conv2d: the output would be {P} x {Q}: the (dilated) filter is larger "
                         f"than the padded input {tuple(x.shape[2:])}")
    shape = (x.shape[0], K, P, Q)
    return output("conv2d", "out", out, shape, x.dtype, x.device,
                  inputs={"x": x, "weight": weight}, memory_format=torch.channels_last)


def _is_gemm(x, weight, stride, padding) -> bool:
    """Whether this conv is a GEMM over views of x and weight: 1x1, stride 1, no padding,
    channels_last x (the output must be channels_last too)."""
    return (weight.shape[2:] == (1, 1) and _pair(stride, "stride") == (1, 1)
            and _pair(padding, "padding") == (0, 0)
            and x.is_contiguous(memory_format=torch.channels_last))


def _gemm_operands(x, weight):
    """(A, B) of the 1x1 conv as a GEMM: channels_last memory is (N, H, W, C) row-major, so A
    (N*H*W, C) is a view of x, and B (C, K) the .T of the weight's (K, C) view."""
    N, C, H, W = x.shape
    return x.permute(0, 2, 3, 1).reshape(N * H * W, C), weight.reshape(weight.shape[0], C).T


def _channels_last(t: torch.Tensor) -> bool:
    """Whether t is dense channels_last memory with a 16-byte aligned base (what TMA needs)."""
    return t.is_contiguous(memory_format=torch.channels_last) and t.data_ptr() % 16 == 0


def _tma_problem(x, weight, stride, padding, dilation, out) -> str | None:
    """Why the TMA kernel cannot take this conv, or None when it can."""
    if not tma_available(x.device):
        return ("this Triton has no host-side tensor descriptors" if TensorDescriptor is None
                else "TMA needs a Hopper (sm_90) or newer GPU")
    if _pair(stride, "stride") != (1, 1):
        return "it needs stride 1"
    if tuple(out.shape[2:]) != tuple(x.shape[2:]):
        return "it needs an output of the input's height and width (e.g. 3x3 with padding 1)"
    if not all(_channels_last(t) for t in (x, weight, out)):
        return "it needs channels_last x, weight and out with 16-byte aligned bases"
    if x.shape[1] % 16 or weight.shape[0] % 8:
        return "it needs C a multiple of 16 and K a multiple of 8 (16-byte rows)"
    return None


def _nhwc_problem(x, weight, stride, out) -> str | None:
    """Why the NHWC kernel cannot take this conv, or None when it can (any padding, dilation and
    output size: the boxes of x are shifted by each tap and zero-filled outside the image)."""
    if not tma_available(x.device):
        return ("this Triton has no host-side tensor descriptors" if TensorDescriptor is None
                else "TMA needs a Hopper (sm_90) or newer GPU")
    if _pair(stride, "stride") != (1, 1):
        return "it needs stride 1"
    if not all(_channels_last(t) for t in (x, weight, out)):
        return "it needs channels_last x, weight and out with 16-byte aligned bases"
    if x.shape[1] % 16 or weight.shape[0] % 8:
        return "it needs C a multiple of 16 and K a multiple of 8 (16-byte rows)"
    return None


def _nhwc_meta(config: triton.Config, C: int) -> dict:
    """The NHWC kernel's meta-parameters from a config, checked."""
    if not isinstance(config, triton.Config):
        raise TypeError(f"conv2d: config must be a triton.Config, got {type(config).__name__}")
    missing = {"TILE_H", "TILE_W", "BLOCK_N", "BLOCK_K", "GROUP_M"} - set(config.kwargs)
    if missing:
        raise ValueError(f"conv2d: variant='tma_nhwc' needs a config with {sorted(missing)}")
    meta = config_values("conv2d", dict(config.all_kwargs()),
                         powers_of_two=("TILE_H", "TILE_W", "BLOCK_N", "BLOCK_K", "num_warps"),
                         at_least={"BLOCK_N": 16, "BLOCK_K": 16},
                         positive=("GROUP_M", "num_stages"))
    if meta["TILE_H"] * meta["TILE_W"] < 16:  # tl.dot takes tiles of at least 16 rows
        raise ValueError(f"conv2d: config TILE_H x TILE_W = {meta['TILE_H']} x "
                         f"{meta['TILE_W']} must be at least 16 pixels")
    if C % meta["BLOCK_K"]:
        raise ValueError(f"conv2d: variant='tma_nhwc' needs BLOCK_K ({meta['BLOCK_K']}) to "
                         f"divide C ({C})")
    return meta


def _tma_meta(config: triton.Config, C: int, masked: bool) -> tuple[dict, int]:
    """(the TMA kernel's meta-parameters, split_k) from a config, checked. SPLIT_K defaults to 1;
    A_TMA to True for unmasked convs (a plain TMA GEMM), False for masked ones."""
    meta = _check_config(config)
    split = meta.pop("SPLIT_K", 1)
    meta.setdefault("A_TMA", not masked)
    if C % meta["BLOCK_K"]:
        raise ValueError(f"conv2d: variant='tma' needs BLOCK_K ({meta['BLOCK_K']}) to divide "
                         f"C ({C})")
    if not isinstance(split, int) or split < 1:
        raise ValueError(f"conv2d: SPLIT_K={split!r} must be an int >= 1")
    return {**meta, "SPLIT": split > 1}, split


def _check_config(config) -> dict:
    if not isinstance(config, triton.Config):
        raise TypeError(f"conv2d: config must be a triton.Config, got {type(config).__name__}")
    missing = {"BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M"} - set(config.kwargs)
    if missing:
        raise ValueError(f"conv2d: config lacks {sorted(missing)}")
    # tl.dot takes tiles of at least 16 in each dimension
    return config_values("conv2d", dict(config.all_kwargs()),
                         powers_of_two=("BLOCK_M", "BLOCK_N", "BLOCK_K", "num_warps"),
                         at_least={"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 16},
                         positive=("GROUP_M", "SPLIT_K", "num_stages"), flags=("A_TMA",))


def _choose_variant(x, weight, stride, padding, dilation, out, variant: str | None) -> str:
    if variant not in (None, *VARIANTS):
        raise ValueError(f"conv2d: variant={variant!r}; expected one of {', '.join(VARIANTS)}")
    if variant == "matmul" and not (_is_gemm(x, weight, stride, padding)
                                    and out.is_contiguous(memory_format=torch.channels_last)):
        raise ValueError("conv2d: variant='matmul' needs a 1x1 filter, stride 1, no padding and "
                         "channels_last x and out")
    problem = _tma_problem(x, weight, stride, padding, dilation, out)
    if variant == "tma" and problem is not None:
        raise ValueError(f"conv2d: variant='tma' cannot take this conv: {problem}")
    if variant == "tma_nhwc":
        nhwc_problem = _nhwc_problem(x, weight, stride, out)
        if nhwc_problem is not None:
            raise ValueError(f"conv2d: variant='tma_nhwc' cannot take this conv: {nhwc_problem}")
    if variant is None:
        return "tma" if problem is None else "implicit_gemm"
    return variant


def _either_tma(x, weight, stride, padding, out, variant, chosen) -> bool:
    """Whether the default (variant None) is the faster of the two TMA kernels: a masked conv
    (taps in the padding) that both take."""
    return (variant is None and chosen == "tma" and _masked_taps(weight, padding)
            and _nhwc_problem(x, weight, stride, out) is None)


def conv2d_kernel_for(x: torch.Tensor, weight: torch.Tensor, *, stride=1, padding=0,
                      dilation=1, variant: str | None = None):
    """What `conv2d(x, weight, ...)` launches, for reports: the autotuned kernel, or for the TMA
    variant an object whose best_config is the planned config."""
    P, Q = conv2d_output_size(x.shape, weight.shape, stride, padding, dilation)
    out = torch.empty((x.shape[0], weight.shape[0], P, Q), dtype=x.dtype, device=x.device,
                      memory_format=torch.channels_last)
    chosen = _choose_variant(x, weight, stride, padding, dilation, out, variant)
    if chosen == "matmul":
        return matmul_kernel_for(*_gemm_operands(x, weight))
    if _either_tma(x, weight, stride, padding, out, variant, chosen):
        return _PlanReport(None, x, weight, padding, dilation)
    if chosen in ("tma", "tma_nhwc"):
        return _PlanReport(chosen, x, weight, padding, dilation)
    return _conv2d_kernel


def _conv2d_tma(x, weight, bias, out, padding, dilation, config):
    N, C, H, W = x.shape
    K, _, R, S = weight.shape
    (ph, pw), (dh, dw) = _pair(padding, "padding"), _pair(dilation, "dilation")
    masked = _masked_taps(weight, padding)
    if config is None:
        config = _plan("tma", x, weight, bias, out, padding, dilation)
    meta, split = _tma_meta(config, C, masked)
    bm, bn, bk = meta["BLOCK_M"], meta["BLOCK_N"], meta["BLOCK_K"]
    M = N * H * W
    # Views, no copies: channels_last memory is (N, H, W, C) and (K, R, S, C) row-major.
    x2d = x.permute(0, 2, 3, 1).view(M, C)
    x_desc = TensorDescriptor.from_tensor(x2d, [bm, bk])
    w_desc = TensorDescriptor.from_tensor(weight.permute(0, 2, 3, 1).view(K, R * S * C), [bn, bk])
    y2d = out.permute(0, 2, 3, 1).view(M, K)
    y_desc = TensorDescriptor.from_tensor(y2d, [bm, bn])
    ws = torch.empty((split, M, K), dtype=torch.float32, device=x.device) if split > 1 else out
    bias_arg = bias if bias is not None else out
    grid = (triton.cdiv(M, bm) * triton.cdiv(K, bn), split)
    _conv2d_tma_kernel[grid](x_desc, x2d, w_desc, y_desc, ws, bias_arg, M, C, H, W, K, R, S,
                             ph, pw, dh, dw, split, HAS_BIAS=bias is not None,
                             MASK_TAPS=masked, **meta)
    if split > 1:
        block = 1024
        _splitk_reduce_kernel[(triton.cdiv(M * K, block),)](
            ws, bias_arg, y2d, M * K, K, split, HAS_BIAS=bias is not None, BLOCK=block,
            num_warps=4)
    return out


def _conv2d_nhwc(x, weight, bias, out, padding, dilation, config):
    N, C, H, W = x.shape
    K, _, R, S = weight.shape
    P, Q = out.shape[2], out.shape[3]
    (ph, pw), (dh, dw) = _pair(padding, "padding"), _pair(dilation, "dilation")
    if config is None:
        config = _plan("tma_nhwc", x, weight, bias, out, padding, dilation)
    meta = _nhwc_meta(config, C)
    th, tw, bn, bk = meta["TILE_H"], meta["TILE_W"], meta["BLOCK_N"], meta["BLOCK_K"]
    # Views, no copies: channels_last memory is (N, H, W, C), (K, R, S, C) and (N, P, Q, K)
    # row-major.
    x_desc = TensorDescriptor.from_tensor(x.permute(0, 2, 3, 1), [1, th, tw, bk])
    w_desc = TensorDescriptor.from_tensor(weight.permute(0, 2, 3, 1).view(K, R * S * C), [bn, bk])
    y_desc = TensorDescriptor.from_tensor(out.permute(0, 2, 3, 1), [1, th, tw, bn])
    grid = (N * triton.cdiv(P, th) * triton.cdiv(Q, tw) * triton.cdiv(K, bn),)
    _conv2d_nhwc_kernel[grid](x_desc, w_desc, y_desc, bias if bias is not None else out, N, C,
                              P, Q, K, R, S, ph, pw, dh, dw, HAS_BIAS=bias is not None, **meta)
    return out


def conv2d(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None, *,
           stride=1, padding=0, dilation=1, out: torch.Tensor | None = None,
           variant: str | None = None, config: triton.Config | None = None) -> torch.Tensor:
    """torch.nn.functional.conv2d(x, weight, bias, stride, padding, dilation), groups=1.

    x (N, C, H, W) and weight (K, C, R, S) of one dtype (fp16 or bf16), any strides (channels_last
    is the fast layout); stride, padding, dilation an int or a pair. Returns (N, K, P, Q) in
    channels_last memory. variant: "tma" (stride 1, same-size output, channels_last operands, C
    a multiple of 16, K of 8; Hopper), "tma_nhwc" (the same but any output size: stride 1,
    channels_last, C a multiple of 16, K of 8; Hopper), "implicit_gemm" (any conv), or "matmul"
    (1x1, stride 1, no padding, channels_last x and out); default "tma" where it applies (for a
    padded conv the NHWC kernel also takes, the faster on this GPU of "tma" and "tma_nhwc",
    timed once per shape), else "implicit_gemm". config: a triton.Config (BLOCK_M, BLOCK_N,
    BLOCK_K, GROUP_M; for "tma" optionally SPLIT_K and A_TMA; for "tma_nhwc" TILE_H, TILE_W,
    BLOCK_N, BLOCK_K, GROUP_M) to launch instead of the planned or autotuned one.
    """
    out = _check_operands(x, weight, bias, stride, padding, dilation, out)
    chosen = _choose_variant(x, weight, stride, padding, dilation, out, variant)
    if out.numel() == 0:
        return out
    if config is None and _either_tma(x, weight, stride, padding, out, variant, chosen):
        chosen = _faster_tma_variant(x, weight, bias, out, padding, dilation)
    N, C, H, W = x.shape
    K, _, R, S = weight.shape
    if chosen == "tma":
        return _conv2d_tma(x, weight, bias, out, padding, dilation, config)
    if chosen == "tma_nhwc":
        return _conv2d_nhwc(x, weight, bias, out, padding, dilation, config)
    if chosen == "matmul":
        a, b = _gemm_operands(x, weight)
        c = out.permute(0, 2, 3, 1).view(N * H * W, K)  # a view: the GEMM writes into out
        matmul(a, b, bias=bias, out=c, config=config)
        return out
    (sh, sw), (ph, pw), (dh, dw) = _pair(stride, "stride"), _pair(padding, "padding"), \
        _pair(dilation, "dilation")
    P, Q = out.shape[2], out.shape[3]
    args = (x, weight, bias if bias is not None else out, out, N, C, H, W, K, P, Q, R, S,
            sh, sw, ph, pw, dh, dw, *x.stride(), *weight.stride(), *out.stride())

    def grid(meta):
        return (triton.cdiv(N * P * Q, meta["BLOCK_M"]) * triton.cdiv(K, meta["BLOCK_N"]),)

    if config is None:
        launch_autotuned(_conv2d_kernel, grid, *args, HAS_BIAS=bias is not None)
    else:
        meta = {"HAS_BIAS": bias is not None, **_check_config(config)}
        _conv2d_kernel.fn[grid(meta)](*args, **meta)
    return out


def conv2d_reference(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None, *,
                     stride=1, padding=0, dilation=1) -> torch.Tensor:
    """torch's conv2d in the operands' dtype; float64 operands are convolved on the CPU.

    float64 on the CPU is exact enough to judge fp16 against; cuDNN's float32 may use TF32 and be
    4e-2 away, and its float64 support varies by version.
    """
    dev = x.device
    if x.dtype == torch.float64:
        x, weight = x.cpu(), weight.cpu()
        bias = bias.cpu() if bias is not None else None
    y = torch.nn.functional.conv2d(x, weight, bias, stride=stride, padding=padding,
                                   dilation=dilation)
    return y.to(dev)


def conv2d_flops(x: torch.Tensor, weight: torch.Tensor, stride=1, padding=0, dilation=1) -> int:
    # one multiply and one add per output element and filter tap: 2*N*P*Q*K*C*R*S
    P, Q = conv2d_output_size(x.shape, weight.shape, stride, padding, dilation)
    N, C = x.shape[:2]
    K, _, R, S = weight.shape
    return 2 * N * P * Q * K * C * R * S


def conv2d_bytes(x: torch.Tensor, weight: torch.Tensor, stride=1, padding=0, dilation=1) -> int:
    # read x and the weight once; write the output once
    P, Q = conv2d_output_size(x.shape, weight.shape, stride, padding, dilation)
    out = x.shape[0] * weight.shape[0] * P * Q
    return (x.numel() + weight.numel() + out) * x.element_size()


def conv2d_inputs(make_tensor, n: int, c: int, h: int, w: int, k: int, r: int, s: int, *,
                  dtype: torch.dtype = torch.float16, bias: bool = False, **kwargs):
    """(x, weight, bias): x (n, c, h, w) and weight (k, c, r, s), both channels_last, bias (k,)
    or None. Keyword arguments go to make_tensor."""
    cl = torch.channels_last
    x = make_tensor((n, c, h, w), dtype, **kwargs).contiguous(memory_format=cl)
    weight = make_tensor((k, c, r, s), dtype, **kwargs).contiguous(memory_format=cl)
    return x, weight, (make_tensor(k, dtype) if bias else None)
