"""Kernels written as third-party Triton libraries write them, for GPUs, with no thought of the
interpreter: float eps arguments, libdevice math, loops whose index is cast to int64, bf16 tensors
in and out, multi-config autotuning. tests/env/test_interpreter_compat.py runs them under Triton's
interpreter with and without pytest_triton.env.interpreter.fixes."""

import torch
import triton
import triton.language as tl
from triton.language import core
from triton.language.extra import libdevice
from triton.language.extra.cuda.libdevice import tanh as cuda_tanh  # bound here, at import


# A library's own extern function, as some define them next to their kernels.
@core.extern
def fast_tanh(x, _semantic=None):
    return core.extern_elementwise("", "", [x], {
        (core.dtype("fp32"), ): ("__nv_tanhf", core.dtype("fp32")),
    }, is_pure=True, _semantic=_semantic)


# ---- one behaviour per kernel ------------------------------------------------------------------


@triton.jit
def scale_kernel(x_ptr, out_ptr, n, scale, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, x * scale.to(tl.float32), mask=mask)


@triton.jit
def softplus_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    # exp overflows to inf for large x, which the where() then discards: correct on a GPU, silent
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)
    tl.store(out_ptr + offs, tl.where(x > 20.0, x, tl.log(1.0 + tl.exp(x))), mask=offs < n)


@triton.jit
def promote_kernel(x_ptr, out_ptr, scale):
    tl.store(out_ptr, tl.load(x_ptr) * scale)


@triton.jit
def strided_kernel(offset_ptr, scale_ptr, row, stride: tl.int64, scale: tl.float16, flag: tl.int1):
    # stride is int64 so that row * stride cannot overflow, as libraries annotate it
    tl.store(offset_ptr, row * stride)
    if flag:
        tl.store(scale_ptr, scale.to(tl.float32))


@triton.jit
def blocks_sum_kernel(x_ptr, out_ptr, NUM_BLOCKS: tl.constexpr, BLOCK: tl.constexpr):
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for i in range(0, NUM_BLOCKS):
        offs = i.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        acc += tl.load(x_ptr + offs)
    for j in tl.range(0, NUM_BLOCKS):
        acc += j.to(tl.float32)
    for k in tl.static_range(2):
        # a static_range index is a constexpr on a GPU: usable as a shape
        acc += tl.sum(tl.zeros([BLOCK * (k + 1)], dtype=tl.float32))
    tl.store(out_ptr + tl.arange(0, BLOCK), acc)


@triton.jit
def wide_index_kernel(out_ptr, start):
    for i in range(start, start + 2):
        tl.store(out_ptr + (i - start), i)


@triton.jit
def row_sum_kernel(x_ptr, out_ptr, n_cols, BLOCK: tl.constexpr):
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, n_cols, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        acc += tl.load(x_ptr + offs, mask=offs < n_cols, other=0.0)
    tl.store(out_ptr, tl.sum(acc))


@triton.jit
def binary_kernel(x_ptr, y_ptr, out_ptr, n, OP: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    if OP == "add":
        r = x + y
    elif OP == "sub":
        r = x - y
    elif OP == "mul":
        r = x * y
    elif OP == "div":
        r = x / y
    elif OP == "rem":
        r = x % y
    elif OP == "maximum":
        r = tl.maximum(x, y)
    elif OP == "minimum":
        r = tl.minimum(x, y)
    elif OP == "lt":
        r = x < y
    elif OP == "scalar_mul":
        r = x * 1.5 + 0.25
    else:
        r = tl.where(x > y, x, y)
    tl.store(out_ptr + offs, r, mask=mask)


@triton.jit
def unary_kernel(x_ptr, out_ptr, n, OP: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    if OP == "neg":
        r = -x
    elif OP == "abs":
        r = tl.abs(x)
    elif OP == "clamp":
        r = tl.clamp(x, -0.5, 0.75)
    else:
        # math on bf16 goes through float32, as libraries write it
        xf = x.to(tl.float32)
        if OP == "exp":
            rf = tl.exp(xf)
        elif OP == "sqrt":
            rf = tl.sqrt(tl.abs(xf))
        elif OP == "sigmoid":
            rf = tl.sigmoid(xf)
        else:
            rf = tl.log(tl.abs(xf) + 1.0)
        r = rf.to(tl.bfloat16)
    tl.store(out_ptr + offs, r, mask=mask)


@triton.jit
def fma_kernel(x_ptr, y_ptr, z_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    z = tl.load(z_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, tl.fma(x, y, z), mask=mask)


@triton.jit
def reduce_kernel(x_ptr, out_ptr, OP: tl.constexpr, ROWS: tl.constexpr, COLS: tl.constexpr):
    rows = tl.arange(0, ROWS)
    cols = tl.arange(0, COLS)
    x = tl.load(x_ptr + rows[:, None] * COLS + cols[None, :])
    if OP == "cumsum":
        tl.store(out_ptr + rows[:, None] * COLS + cols[None, :], tl.cumsum(x, axis=1))
    else:
        if OP == "sum":
            r = tl.sum(x, axis=1)
        elif OP == "max":
            r = tl.max(x, axis=1)
        elif OP == "min":
            r = tl.min(x, axis=1)
        elif OP == "argmax":
            r = tl.argmax(x, axis=1)
        else:
            r = tl.argmin(x, axis=1)
        tl.store(out_ptr + rows, r)


@triton.jit
def cast_kernel(x_ptr, out_ptr, n, ROUNDING: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    if ROUNDING == "rtz":
        r = x.to(tl.bfloat16, fp_downcast_rounding="rtz")
    else:
        r = x.to(out_ptr.dtype.element_ty)
    tl.store(out_ptr + offs, r, mask=mask)


@triton.jit
def dot_kernel(a_ptr, b_ptr, c_ptr, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr):
    rm = tl.arange(0, M)
    rn = tl.arange(0, N)
    rk = tl.arange(0, K)
    a = tl.load(a_ptr + rm[:, None] * K + rk[None, :])
    b = tl.load(b_ptr + rk[:, None] * N + rn[None, :])
    acc = tl.dot(a, b)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc.to(c_ptr.dtype.element_ty))


@triton.jit
def atomic_kernel(x_ptr, out_ptr, n, BINS: tl.constexpr, OP: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    if OP == "add":
        tl.atomic_add(out_ptr + offs % BINS, x, mask=mask)


@triton.jit
def libdevice_kernel(x_ptr, y_ptr, out_ptr, n, FN: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    if FN == "tanh":
        r = libdevice.tanh(x)
    elif FN == "erf":
        r = libdevice.erf(x)
    elif FN == "rsqrt":
        r = libdevice.rsqrt(tl.abs(x) + 0.5)
    elif FN == "pow":
        r = libdevice.pow(tl.abs(x) + 0.5, y)
    elif FN == "exp":
        r = libdevice.exp(x)
    elif FN == "log1p":
        r = libdevice.log1p(tl.abs(x))
    elif FN == "atan2":
        r = libdevice.atan2(x, y)
    elif FN == "erfinv":
        r = libdevice.erfinv(x * 0.5)
    elif FN == "isnan":
        r = libdevice.isnan(x / x).to(tl.float32)
    elif FN == "cuda_module":
        r = tl.extra.cuda.libdevice.tanh(x)
    elif FN == "imported_function":
        r = cuda_tanh(x)
    else:
        r = fast_tanh(x)
    tl.store(out_ptr + offs, r, mask=mask)


@triton.jit
def float64_libdevice_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, libdevice.tanh(tl.load(x_ptr + offs, mask=mask)), mask=mask)


def _prune_small(configs, named_args, **kwargs):
    # as libraries prune: drop blocks larger than the problem
    return [c for c in configs if c.kwargs["BLOCK"] <= max(16, named_args["n"])]


@triton.autotune(
    configs=[triton.Config({"BLOCK": 128}, num_warps=4), triton.Config({"BLOCK": 32}, num_warps=2),
             triton.Config({"BLOCK": 16}, num_warps=1)],
    key=["n"],
    prune_configs_by={"early_config_prune": _prune_small},
)
@triton.jit
def tuned_add_kernel(x_ptr, y_ptr, out_ptr, block_seen_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)
    if pid == 0:
        tl.store(block_seen_ptr, BLOCK)


@triton.autotune(
    configs=[triton.Config({"BLOCK": 2}, num_warps=2), triton.Config({"BLOCK": 4}, num_warps=4)],
    key=["row"],
)
@triton.jit
def tuned_strided_kernel(offset_ptr, row, stride: tl.int64, BLOCK: tl.constexpr):
    # an annotated scalar of an autotuned kernel: the pinned config's num_warps reaches the
    # launch as a keyword, beside the kernel's own arguments (Conch's nms launches so)
    tl.store(offset_ptr + tl.arange(0, BLOCK), row * stride + tl.arange(0, BLOCK))


def tuned_add(x, y, out, block_seen):
    n = x.numel()
    tuned_add_kernel[lambda meta: (triton.cdiv(n, meta["BLOCK"]), )](x, y, out, block_seen, n)


# ---- whole library kernels ---------------------------------------------------------------------


@triton.autotune(
    configs=[triton.Config({"BLOCK": 64}, num_warps=4), triton.Config({"BLOCK": 32}, num_warps=2)],
    key=["n_cols"],
)
@triton.jit
def rmsnorm_kernel(x_ptr, w_ptr, out_ptr, stride, n_cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    row_start = row.to(tl.int64) * stride
    sq = tl.zeros([BLOCK], dtype=tl.float32)
    for off in range(0, n_cols, BLOCK):
        cols = off + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row_start + cols, mask=cols < n_cols, other=0.0).to(tl.float32)
        sq += x * x
    rstd = libdevice.rsqrt(tl.sum(sq) / n_cols + eps.to(tl.float32))
    for off in range(0, n_cols, BLOCK):
        cols = off + tl.arange(0, BLOCK)
        mask = cols < n_cols
        x = tl.load(x_ptr + row_start + cols, mask=mask, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + cols, mask=mask, other=0.0)
        y = (x * rstd).to(tl.bfloat16) * w
        tl.store(out_ptr + row_start + cols, y, mask=mask)


def rmsnorm(x, w, eps=1e-6):
    out = x.new_empty(x.shape)
    rmsnorm_kernel[(x.shape[0], )](x, w, out, x.stride(0), x.shape[1], eps)
    return out


@triton.jit
def swiglu_kernel(gate_ptr, up_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    gate = tl.load(gate_ptr + offs, mask=mask).to(tl.float32)
    up = tl.load(up_ptr + offs, mask=mask)
    silu = (gate * tl.sigmoid(gate)).to(tl.bfloat16)
    tl.store(out_ptr + offs, silu * up, mask=mask)


def swiglu(gate, up):
    out = torch.empty_like(gate)
    n = gate.numel()
    swiglu_kernel[(triton.cdiv(n, 64), )](gate, up, out, n, BLOCK=64)
    return out


@triton.jit
def rope_kernel(x_ptr, cos_ptr, sin_ptr, out_ptr, seq_stride, HALF: tl.constexpr):
    pos = tl.program_id(0)
    base = pos.to(tl.int64) * seq_stride
    d = tl.arange(0, HALF)
    x1 = tl.load(x_ptr + base + d)
    x2 = tl.load(x_ptr + base + HALF + d)
    cos = tl.load(cos_ptr + pos * HALF + d)
    sin = tl.load(sin_ptr + pos * HALF + d)
    # bf16 arithmetic throughout, as a library that keeps activations in bf16 writes it
    tl.store(out_ptr + base + d, x1 * cos - x2 * sin)
    tl.store(out_ptr + base + HALF + d, x2 * cos + x1 * sin)


def rope(x, cos, sin):
    out = torch.empty_like(x)
    rope_kernel[(x.shape[0], )](x, cos, sin, out, x.stride(0), HALF=x.shape[1] // 2)
    return out


@triton.jit
def cross_entropy_kernel(logits_ptr, target_ptr, loss_ptr, n_cols, stride, label_smoothing,
                         BLOCK: tl.constexpr):
    row = tl.program_id(0)
    base = logits_ptr + row.to(tl.int64) * stride
    m = float("-inf")
    s = 0.0
    total = 0.0
    for off in range(0, n_cols, BLOCK):
        cols = off + tl.arange(0, BLOCK)
        x = tl.load(base + cols, mask=cols < n_cols, other=float("-inf")).to(tl.float32)
        new_m = tl.maximum(m, tl.max(x))
        s = s * tl.exp(m - new_m) + tl.sum(tl.exp(x - new_m))
        total += tl.sum(tl.where(cols < n_cols, x, 0.0))
        m = new_m
    lse = m + libdevice.log(s)
    target = tl.load(target_ptr + row)
    x_t = tl.load(base + target).to(tl.float32)
    eps = label_smoothing.to(tl.float32)
    loss = (1.0 - eps) * (lse - x_t) + eps * (lse - total / n_cols)
    tl.store(loss_ptr + row, loss)


def cross_entropy(logits, target, label_smoothing=0.0):
    loss = torch.empty(logits.shape[0], dtype=torch.float32)
    cross_entropy_kernel[(logits.shape[0], )](logits, target, loss, logits.shape[1], logits.stride(0),
                                              label_smoothing, BLOCK=32)
    return loss
