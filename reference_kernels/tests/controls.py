"""Negative controls: deliberately wrong kernels, and a deliberately slow one.

Each wrong kernel makes a mistake real kernels make; the test modules run them through the same
checks as the real kernels and prove those checks fail (`pytest.raises(AssertionError)`). A
check that passes a control is a check that cannot catch that mistake. The slow kernel is the
perf suite's control: it must miss its bandwidth target (test_memory_perf.py).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _add_off_by_one_kernel(
    x_ptr,  # *in* n_elements, contiguous
    y_ptr,  # *in* n_elements, contiguous
    out_ptr,  # *out* n_elements, contiguous
    n_elements,  # number of elements
    BLOCK_SIZE: tl.constexpr,  # elements per program
):
    offs = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offs < n_elements - 1  # the mistake: the last element is never written
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, x + y, mask=mask)


@triton.jit
def _add_writes_nothing_kernel(
    x_ptr,  # *in* n_elements, contiguous
    y_ptr,  # *in* n_elements, contiguous
    out_ptr,  # *out* n_elements, contiguous: left as it was
    n_elements,  # number of elements
    BLOCK_SIZE: tl.constexpr,  # elements per program
):
    offs = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offs < n_elements
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    x + y  # the mistake: computed, never stored  # noqa: B018


@triton.jit
def _add_slow_kernel(
    x_ptr,  # *in* n_elements, contiguous
    y_ptr,  # *in* n_elements, contiguous
    out_ptr,  # *out* n_elements, contiguous
    n_elements,  # number of elements
    BLOCK_SIZE: tl.constexpr,  # elements per program: launched with 32, one per thread
):
    offs = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offs < n_elements
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask),
             mask=mask)


@triton.jit
def _softmax_without_max_kernel(
    x_ptr,  # *in* n_rows x n_cols, contiguous
    y_ptr,  # *out* n_rows x n_cols, contiguous
    n_cols,  # row width, <= BLOCK_N
    BLOCK_N: tl.constexpr,  # power of two >= n_cols
):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=float("-inf")).to(tl.float32)
    e = tl.exp(x)  # the mistake: no max subtracted, so exp(1e3) = inf and inf / inf = NaN
    y = e / tl.sum(e, axis=0)
    tl.store(y_ptr + row * n_cols + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _softmax_drops_last_block_kernel(
    x_ptr,  # *in* n_rows x n_cols, contiguous
    y_ptr,  # *out* n_rows x n_cols, contiguous
    n_cols,  # row width, > BLOCK_N
    BLOCK_N: tl.constexpr,  # columns per step
):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    m = tl.full([BLOCK_N], float("-inf"), tl.float32)
    s = tl.zeros([BLOCK_N], tl.float32)
    # The mistake: the first pass stops one block early, so the sum misses the row's tail.
    # The second pass writes every element, so only the values are wrong.
    for start in range(0, n_cols - BLOCK_N, BLOCK_N):
        x = tl.load(x_ptr + row * n_cols + start + cols, mask=start + cols < n_cols,
                    other=float("-inf")).to(tl.float32)
        hi = tl.maximum(m, x)
        s = s * tl.exp(m - hi) + tl.exp(x - hi)
        m = hi
    row_max = tl.max(m, axis=0)
    row_sum = tl.sum(s * tl.exp(m - row_max), axis=0)
    for start in range(0, n_cols, BLOCK_N):
        x = tl.load(x_ptr + row * n_cols + start + cols, mask=start + cols < n_cols,
                    other=float("-inf")).to(tl.float32)
        y = tl.exp(x - row_max) / row_sum
        tl.store(y_ptr + row * n_cols + start + cols, y.to(y_ptr.dtype.element_ty),
                 mask=start + cols < n_cols)


@triton.jit
def _layernorm_bwd_drops_term_kernel(
    dy_ptr,  # *in* n_rows x n_cols, contiguous
    x_ptr,  # *in* n_rows x n_cols, contiguous
    w_ptr,  # *in* n_cols
    mean_ptr,  # *in* n_rows, float32
    rstd_ptr,  # *in* n_rows, float32
    dx_ptr,  # *out* n_rows x n_cols, contiguous
    n_cols,  # row width, <= BLOCK_N
    BLOCK_N: tl.constexpr,  # power of two >= n_cols
):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
    dy = tl.load(dy_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    rstd = tl.load(rstd_ptr + row)
    xhat = tl.where(mask, (x - tl.load(mean_ptr + row)) * rstd, 0.0)
    wdy = w * dy
    c1 = tl.sum(xhat * wdy, axis=0) / n_cols
    dx = (wdy - xhat * c1) * rstd  # the mistake: the mean of w * dy (c2) is not subtracted
    tl.store(dx_ptr + row * n_cols + cols, dx.to(dx_ptr.dtype.element_ty), mask=mask)


def _checked(*tensors: torch.Tensor) -> None:
    for t in tensors:
        if not t.is_contiguous():
            raise ValueError("the negative controls take contiguous tensors only")


def add_off_by_one(x: torch.Tensor, y: torch.Tensor, *, out: torch.Tensor) -> torch.Tensor:
    """x + y, except the last element, which it never writes."""
    _checked(x, y, out)
    n = x.numel()
    _add_off_by_one_kernel[(triton.cdiv(n, 256),)](x, y, out, n, BLOCK_SIZE=256)
    return out


def add_writes_nothing(x: torch.Tensor, y: torch.Tensor, *, out: torch.Tensor) -> torch.Tensor:
    """Reads x and y, computes x + y, and leaves out untouched."""
    _checked(x, y, out)
    n = x.numel()
    _add_writes_nothing_kernel[(triton.cdiv(n, 256),)](x, y, out, n, BLOCK_SIZE=256)
    return out


def add_slow(x: torch.Tensor, y: torch.Tensor, *, out: torch.Tensor) -> torch.Tensor:
    """A correct x + y, launched so as to be slow: 32 elements per program and 1 warp, so each
    access is 4 bytes per thread and the grid has n / 32 programs. It reaches a fraction of the
    bandwidth a streaming kernel needs: far more than 2x below the vector_add target."""
    _checked(x, y, out)
    n = x.numel()
    _add_slow_kernel[(triton.cdiv(n, 32),)](x, y, out, n, BLOCK_SIZE=32, num_warps=1)
    return out


def softmax_without_max(x: torch.Tensor, *, out: torch.Tensor) -> torch.Tensor:
    """softmax that exponentiates x directly: right for small inputs, NaN once exp overflows."""
    _checked(x, out)
    n_rows, n_cols = x.shape
    _softmax_without_max_kernel[(n_rows,)](x, out, n_cols,
                                           BLOCK_N=triton.next_power_of_2(n_cols))
    return out


def softmax_drops_last_block(x: torch.Tensor, *, out: torch.Tensor,
                             block_n: int = 32) -> torch.Tensor:
    """Looped softmax whose sum leaves out the last block of every row (rows wider than
    block_n)."""
    _checked(x, out)
    n_rows, n_cols = x.shape
    if n_cols <= block_n:
        raise ValueError("softmax_drops_last_block needs rows wider than block_n")
    _softmax_drops_last_block_kernel[(n_rows,)](x, out, n_cols, BLOCK_N=block_n)
    return out


def layernorm_bwd_drops_term(dy: torch.Tensor, x: torch.Tensor, weight: torch.Tensor,
                             mean: torch.Tensor, rstd: torch.Tensor, *,
                             dx: torch.Tensor) -> torch.Tensor:
    """LayerNorm's dx without the mean of weight * dy: wrong whenever that mean is not ~0."""
    _checked(dy, x, weight, mean, rstd, dx)
    n_rows, n_cols = x.shape
    _layernorm_bwd_drops_term_kernel[(n_rows,)](dy, x, weight, mean, rstd, dx, n_cols,
                                                BLOCK_N=triton.next_power_of_2(n_cols))
    return dx


class LayerNormDropsTermFunction(torch.autograd.Function):
    """layer_norm whose backward's dx drops the mean of weight * dy (layernorm_bwd_drops_term);
    its dw and db, and its forward, are the real kernels': only x's gradient is wrong."""

    @staticmethod
    def forward(ctx, x, weight, bias, eps):
        from reference_kernels.layernorm import layernorm

        y, mean, rstd = layernorm(x, weight, bias, eps)
        ctx.save_for_backward(x, weight, mean, rstd)
        return y

    @staticmethod
    def backward(ctx, dy):
        from reference_kernels.layernorm import layernorm_backward

        x, weight, mean, rstd = ctx.saved_tensors
        dy = dy.contiguous()
        _, dw, db = layernorm_backward(dy, x, weight, mean, rstd)
        dx = layernorm_bwd_drops_term(dy, x, weight, mean, rstd, dx=torch.empty_like(x))
        return dx, dw, db, None
