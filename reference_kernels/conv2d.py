"""2-D convolution (cross-correlation, as torch's conv2d) as an implicit GEMM, fp16 and bf16.

The GEMM is never materialised (no im2col buffer): a program computes a BLOCK_M x BLOCK_N tile of
output pixels x output channels, gathering each A tile straight from the input:

    M = N*P*Q output pixels      (row m -> image n, output row p, output column q)
    N = K output channels
    reduction over R*S*C         (tap (r, s) of the filter, input channel c; c fastest)

so that in channels_last (NHWC) memory, the layout torch's channels_last convention and cuDNN's
fast path use, every A row is BLOCK_K contiguous channels of one input pixel. Padding is the
masked-out taps that fall outside the image. One loop runs over all R*S*ceil(C/BLOCK_K) reduction
steps, rather than three nested ones, so that the compiler pipelines it even when C fits in one
BLOCK_K (a 3x3 conv over 64 channels would otherwise have an inner loop of one iteration).

Inputs: x an NCHW-shaped tensor (any strides; channels_last is the fast layout), weight
(K, C, R, S) (any strides; channels_last, C fastest, is the fast layout), optional bias (K,).
The output is NCHW-shaped in channels_last memory, like torch's for a channels_last input.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from pytest_triton import autotune_configs

from .matmul import _grouped_tile, matmul, matmul_kernel_for

DTYPES = (torch.float16, torch.bfloat16)
VARIANTS = ("implicit_gemm", "matmul")

# A 1x1, stride-1, unpadded conv over a channels_last input is a plain GEMM, (N*H*W, C) @ (C, K),
# which the matmul module can run (its TMA path included). Whether that beats the implicit GEMM
# on the ResNet-50 1x1 layers (N = K of 64-256 columns) is for bench/sweep_compute.py to say; the
# implicit GEMM is the default until it has.
ONE_BY_ONE_VARIANT = "implicit_gemm"


def _conv2d_configs() -> list[triton.Config]:
    """Tile shapes for M = N*P*Q in the tens of thousands and N = K output channels of 64-512.

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
    """Drop the tiles wider than the output channels (there is always the 64-wide one)."""
    k_out = named_args["K"]
    kept = [c for c in configs if c.kwargs["BLOCK_N"] <= max(64, k_out)]
    return kept or configs[:1]


# Under the interpreter: tiles small enough that the tests' few pixels and channels span several.
INTERPRETER_CONFIG = triton.Config({"BLOCK_M": 32, "BLOCK_N": 16, "BLOCK_K": 16, "GROUP_M": 2},
                                   num_stages=1, num_warps=4)


@triton.autotune(configs=autotune_configs(_conv2d_configs(), interpreter=INTERPRETER_CONFIG),
                 key=["N", "C", "H", "W", "K", "R", "S", "stride_h", "stride_w"],
                 prune_configs_by={"early_config_prune": _prune_configs})
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
    pid_m, pid_n = _grouped_tile(tl.program_id(0), num_pid_m, num_pid_n, GROUP_M)

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


def _pair(value, name: str) -> tuple[int, int]:
    pair = (value, value) if isinstance(value, int) else tuple(value)
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
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"conv2d: {name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() != 4:
            raise ValueError(f"conv2d: {name} must be 4-D ({dims}), got shape {tuple(t.shape)}")
    if x.dtype not in DTYPES:
        raise TypeError(f"conv2d: dtype {x.dtype} is not supported; expected one of "
                        f"{', '.join(str(d) for d in DTYPES)}")
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
    if out is None:
        return torch.empty(shape, dtype=x.dtype, device=x.device,
                           memory_format=torch.channels_last)
    if out.shape != shape or out.dtype != x.dtype or out.device != x.device:
        raise ValueError(f"conv2d: out must be {shape} {x.dtype} on {x.device}, got "
                         f"{tuple(out.shape)} {out.dtype} on {out.device}")
    return out


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


def conv2d_kernel_for(x: torch.Tensor, weight: torch.Tensor, *, stride=1, padding=0,
                      variant: str | None = None):
    """The autotuned kernel `conv2d(x, weight, ...)` launches (for its chosen config)."""
    if variant is None:
        variant = ONE_BY_ONE_VARIANT if _is_gemm(x, weight, stride, padding) else "implicit_gemm"
    if variant == "matmul":
        return matmul_kernel_for(*_gemm_operands(x, weight))
    return _conv2d_kernel


def conv2d(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None, *,
           stride=1, padding=0, dilation=1, out: torch.Tensor | None = None,
           variant: str | None = None, config: triton.Config | None = None) -> torch.Tensor:
    """torch.nn.functional.conv2d(x, weight, bias, stride, padding, dilation), groups=1.

    x (N, C, H, W) and weight (K, C, R, S) of one dtype (fp16 or bf16), any strides (channels_last
    is the fast layout); stride, padding, dilation an int or a pair. Returns (N, K, P, Q) in
    channels_last memory. variant: "implicit_gemm", or "matmul" (1x1, stride 1, no padding,
    channels_last x and out only); default ONE_BY_ONE_VARIANT for such convs, else
    "implicit_gemm". config: a triton.Config (BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M) to launch
    instead of autotuning.
    """
    out = _check_operands(x, weight, bias, stride, padding, dilation, out)
    if variant not in (None, *VARIANTS):
        raise ValueError(f"conv2d: variant={variant!r}; expected one of {', '.join(VARIANTS)}")
    gemm_ok = (_is_gemm(x, weight, stride, padding)
               and out.is_contiguous(memory_format=torch.channels_last))
    if variant == "matmul" and not gemm_ok:
        raise ValueError("conv2d: variant='matmul' needs a 1x1 filter, stride 1, no padding and "
                         "channels_last x and out")
    if variant is None:
        variant = ONE_BY_ONE_VARIANT if gemm_ok else "implicit_gemm"
    if out.numel() == 0:
        return out
    N, C, H, W = x.shape
    K, _, R, S = weight.shape
    if variant == "matmul":
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
        _conv2d_kernel[grid](*args, HAS_BIAS=bias is not None)
    else:
        if not isinstance(config, triton.Config):
            raise TypeError(f"conv2d: config must be a triton.Config, got {type(config).__name__}")
        meta = {"HAS_BIAS": bias is not None, **config.all_kwargs()}
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
