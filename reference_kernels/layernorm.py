"""LayerNorm over the last dimension, forward and backward, with weight, bias and eps.

float32, float16 and bfloat16 in and out (weight and bias in x's dtype); statistics, sums and
the dw/db partial sums in float32. The forward returns (y, mean, rstd), float32 mean and 1/std
per row, which the backward reuses. `layer_norm(x, w, b, eps)` ties both into autograd.

Forward: rows up to SINGLE_PASS_MAX_COLS wide are held whole in registers (several rows per
program when narrow). Wider rows are split over programs that each hold one chunk in registers
and exchange the chunks' (mean, sum of squared deviations), merged by Chan et al.'s pairwise
formula (softmax's split rows, same protocol: _row_exchange.py): one read of x, one write of y.
A looped path stays for comparison and for tuning sweeps (config SPLIT=False): a first pass of per-lane
Welford updates (stable for any mean) and a second pass that normalises, meant to find the row
in L2.

Backward, deterministic (no atomics): each program owns a contiguous chunk of rows and one block
of columns, accumulates dw and db for its columns in float32 registers and writes one row of a
[n_chunks, n_cols] partial buffer; a small kernel then sums the partials in a fixed order. Rows
up to FUSED_BWD_MAX_COLS wide fit one block, so the row sums that dx needs are taken in place;
wider rows get those sums from a first, looped kernel and are then cut into column blocks.

RMSNorm is not here: it would need its own branches in every kernel and test.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from pytest_triton import interpreting

from . import _tuning
from ._checks import output, require_dtype, require_tensor, with_overrides
from ._device import sm_count
from ._row_exchange import gather_chunks, publish_chunk, reconvert, take_row_chunk
from ._rows import looped_grid, register_cap, row_view, split_chunks, tile_rows
from ._tickets import SYNC_HEADER, sync_buffer

DTYPES = (torch.float32, torch.float16, torch.bfloat16)

# Forward: a row in fp32 registers, 32 values per thread at 16 warps for 16K columns.
SINGLE_PASS_MAX_COLS = 16384
# Backward: five row-wide fp32 values per column (x, dy, w, and the dw, db accumulators); at
# 8K columns and 16 warps that is 80 registers per thread, at 16K it would spill.
FUSED_BWD_MAX_COLS = 8192


@triton.jit
def _layernorm_fwd_kernel(
    x_ptr,  # *in* n_rows x n_cols, row stride stride_xm, columns contiguous
    w_ptr,  # *in* n_cols
    b_ptr,  # *in* n_cols
    y_ptr,  # *out* n_rows x n_cols, row stride stride_ym, columns contiguous
    mean_ptr,  # *out* n_rows, float32
    rstd_ptr,  # *out* n_rows, float32: 1 / sqrt(var + eps)
    n_rows,  # number of rows
    n_cols,  # row width, <= BLOCK_N
    stride_xm,  # elements between rows of x
    stride_ym,  # elements between rows of y
    eps,  # added to the variance
    BLOCK_N: tl.constexpr,  # power of two >= n_cols: a whole row in one block
    ROWS: tl.constexpr,  # rows per tile
    EVICT: tl.constexpr,  # True: mark x evict_first (read once), w and b evict_last (every row)
    LATE_WB: tl.constexpr,  # True: load w and b after the statistics, not with x
):
    cols = tl.arange(0, BLOCK_N)
    col_in = cols < n_cols
    if not LATE_WB:
        w = tl.load(w_ptr + cols, mask=col_in, other=0.0).to(tl.float32)
        b = tl.load(b_ptr + cols, mask=col_in, other=0.0).to(tl.float32)
    rows = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    row_in = rows < n_rows
    mask = row_in[:, None] & col_in[None, :]
    x = tl.load(x_ptr + rows[:, None] * stride_xm + cols[None, :], mask=mask, other=0.0,
                eviction_policy="evict_first" if EVICT else "").to(tl.float32)
    mean = tl.sum(x, axis=1) / n_cols
    # Two passes over registers (mean, then squared deviations): no cancellation.
    xc = tl.where(mask, x - mean[:, None], 0.0)
    rstd = tl.rsqrt(tl.sum(xc * xc, axis=1) / n_cols + eps)
    if LATE_WB:
        # From L1 or L2 (every row reads them), in x's dtype: no registers while x is in flight.
        w = tl.load(w_ptr + cols, mask=col_in, other=0.0)
        b = tl.load(b_ptr + cols, mask=col_in, other=0.0)
    y = xc * rstd[:, None] * w.to(tl.float32)[None, :] + b.to(tl.float32)[None, :]
    tl.store(y_ptr + rows[:, None] * stride_ym + cols[None, :], y.to(y_ptr.dtype.element_ty),
             mask=mask)
    tl.store(mean_ptr + rows, mean, mask=row_in)
    tl.store(rstd_ptr + rows, rstd, mask=row_in)


@triton.jit
def _row_stats(
    words,  # *in* int64 2 x n_chunks words of the row (publish_chunk)
    n_cols,  # row width
    eps,  # added to the variance
    epoch,  # this launch's tag
    BLOCK_N: tl.constexpr,  # columns per chunk
    MAX_CHUNKS: tl.constexpr,  # power of two >= the chunks per row
):
    """(mean, rstd, arrived) of a row once every chunk has published its (mean, M2); rstd is NaN
    if some chunk never did (arrived False)."""
    n_chunks = tl.cdiv(n_cols, BLOCK_N)
    means, m2s, valid, arrived = gather_chunks(words, n_chunks, epoch, MAX_CHUNKS)
    # Chan et al.: mean = sum n_c mean_c / n, M2 = sum M2_c + n_c (mean_c - mean)^2.
    c = tl.arange(0, MAX_CHUNKS)
    counts = tl.where(valid, tl.minimum(n_cols - c * BLOCK_N, BLOCK_N), 0).to(tl.float32)
    mean = tl.sum(counts * tl.where(valid, means, 0.0), axis=0) / n_cols
    dev = tl.where(valid, means - mean, 0.0)
    var = tl.sum(tl.where(valid, m2s, 0.0) + counts * dev * dev, axis=0) / n_cols
    return mean, tl.where(arrived, tl.rsqrt(var + eps), float("nan")), arrived


@triton.jit
def _normalise_half(
    x,  # a half chunk as loaded, or None: read it again (RELOAD)
    x_row,  # *in* the row of x
    w_ptr,  # *in* n_cols
    b_ptr,  # *in* n_cols
    y_row,  # *out* the row of y
    cols,  # the half's columns
    inside,  # its lanes inside the row
    mean,  # the row's mean
    rstd,  # the row's 1 / std (NaN if the exchange timed out)
    poison,  # True: write NaN (the exchange timed out)
    w,  # w and b of the half, loaded before the exchange, or None: load them here
    b,
):
    # Pointers are formed where they are used: a pointer tensor made by the caller would be held
    # from the call on (sm_90, Triton 3.6: 72 registers instead of 64 for float32 4096 columns).
    if x is None:
        # Read microseconds after the first time: from this SM's L1 or from L2, not from DRAM.
        x = tl.load(x_row + cols, mask=inside, other=0.0)
    if w is None:
        # From L1 or L2: every row reads them. In x's dtype: no float32 copy held.
        w = tl.load(w_ptr + cols, mask=inside, other=0.0)
        b = tl.load(b_ptr + cols, mask=inside, other=0.0)
    y = (reconvert(x, poison) - mean) * rstd * w.to(tl.float32) + b.to(tl.float32)
    tl.store(y_row + cols, y.to(y_row.dtype.element_ty), mask=inside)


@triton.jit
def _layernorm_fwd_split_kernel(
    x_ptr,  # *in* n_rows x n_cols, row stride stride_xm, columns contiguous
    w_ptr,  # *in* n_cols
    b_ptr,  # *in* n_cols
    y_ptr,  # *out* n_rows x n_cols, row stride stride_ym, columns contiguous
    mean_ptr,  # *out* n_rows, float32
    rstd_ptr,  # *out* n_rows, float32: 1 / sqrt(var + eps)
    sync_ptr,  # *in/out* int64 launch-wide counter word (_tickets.sync_buffer)
    words_ptr,  # *in/out* int64 n_rows x 2 x n_chunks words: each chunk's tagged statistics
    n_rows,  # number of rows (the grid is n_rows x n_chunks programs)
    n_cols,  # row width
    stride_xm,  # elements between rows of x
    stride_ym,  # elements between rows of y
    eps,  # added to the variance
    BLOCK_N: tl.constexpr,  # columns per chunk: one program's share of a row, >= 2
    MAX_CHUNKS: tl.constexpr,  # power of two >= cdiv(n_cols, BLOCK_N)
    RELOAD: tl.constexpr,  # True: read the chunk again after the exchange instead of holding it
    LATE_WB: tl.constexpr,  # True: load w and b after the exchange, False: before it
):
    # The chunk is two halves, loaded together and normalised one after the other: after the
    # exchange, only one half's w and b are live beside x. sm_90, Triton 3.6: 64 registers per
    # thread for a 4096-column float32 chunk on 4 warps (8 programs per SM) where one whole
    # chunk took 80 (6); 8192-column 16-bit chunks 75 uncapped, no spill capped at 72.
    HALF: tl.constexpr = BLOCK_N // 2
    n_chunks = tl.cdiv(n_cols, BLOCK_N)
    row, chunk, epoch = take_row_chunk(sync_ptr, n_rows, n_chunks)
    cols0 = chunk * BLOCK_N + tl.arange(0, HALF)
    cols1 = cols0 + HALF
    in0 = cols0 < n_cols
    in1 = cols1 < n_cols
    x_row = x_ptr + row.to(tl.int64) * stride_xm
    # Held as loaded (16-bit stays 16-bit) across the exchange, converted again for each use
    # (_row_exchange.reconvert: the registers of a 16-bit chunk, not of a float32 copy).
    x0 = tl.load(x_row + cols0, mask=in0, other=0.0)
    x1 = tl.load(x_row + cols1, mask=in1, other=0.0)
    # The chunk's mean and sum of squared deviations from it: two passes over registers, no
    # cancellation. The mean is NaN only if some x is, and then so is everything: poisoning x
    # changes nothing.
    count = tl.minimum(n_cols - chunk * BLOCK_N, BLOCK_N).to(tl.float32)
    chunk_mean = (tl.sum(x0.to(tl.float32), axis=0) + tl.sum(x1.to(tl.float32), axis=0)) / count
    nan = chunk_mean != chunk_mean
    d0 = tl.where(in0, reconvert(x0, nan) - chunk_mean, 0.0)
    d1 = tl.where(in1, reconvert(x1, nan) - chunk_mean, 0.0)
    words = words_ptr + row.to(tl.int64) * 2 * n_chunks
    publish_chunk(words, chunk, n_chunks, chunk_mean,
                  tl.sum(d0 * d0, axis=0) + tl.sum(d1 * d1, axis=0), epoch)
    w0 = None
    b0 = None
    w1 = None
    b1 = None
    if not LATE_WB:
        # In flight while the other chunks' statistics arrive: the wait hides their latency.
        w0 = tl.load(w_ptr + cols0, mask=in0, other=0.0)
        b0 = tl.load(b_ptr + cols0, mask=in0, other=0.0)
        w1 = tl.load(w_ptr + cols1, mask=in1, other=0.0)
        b1 = tl.load(b_ptr + cols1, mask=in1, other=0.0)
    if RELOAD:
        x0 = None
        x1 = None
    mean, rstd, arrived = _row_stats(words, n_cols, eps, epoch, BLOCK_N, MAX_CHUNKS)
    y_row = y_ptr + row.to(tl.int64) * stride_ym
    _normalise_half(x0, x_row, w_ptr, b_ptr, y_row, cols0, in0, mean, rstd, ~arrived, w0, b0)
    _normalise_half(x1, x_row, w_ptr, b_ptr, y_row, cols1, in1, mean, rstd, ~arrived, w1, b1)
    tl.store(mean_ptr + row, tl.where(arrived, mean, float("nan")), mask=chunk == 0)
    tl.store(rstd_ptr + row, rstd, mask=chunk == 0)


@triton.jit
def _layernorm_fwd_looped_kernel(
    x_ptr,  # *in* n_rows x n_cols, row stride stride_xm, columns contiguous
    w_ptr,  # *in* n_cols
    b_ptr,  # *in* n_cols
    y_ptr,  # *out* n_rows x n_cols, row stride stride_ym, columns contiguous
    mean_ptr,  # *out* n_rows, float32
    rstd_ptr,  # *out* n_rows, float32: 1 / sqrt(var + eps)
    n_rows,  # number of rows
    n_cols,  # row width, any size
    stride_xm,  # elements between rows of x
    stride_ym,  # elements between rows of y
    eps,  # added to the variance
    BLOCK_N: tl.constexpr,  # columns per step of the loops over a row
    EVICT: tl.constexpr,  # True: first pass keeps the row in L2 (evict_last), second frees it
):
    cols = tl.arange(0, BLOCK_N)
    # Lane c sees column c + i * BLOCK_N for each step i that stays inside the row.
    count = ((n_cols - cols + BLOCK_N - 1) // BLOCK_N).to(tl.float32)
    for row in tl.range(tl.program_id(0), n_rows, tl.num_programs(0)):
        x_row = x_ptr + tl.cast(row, tl.int64) * stride_xm
        y_row = y_ptr + tl.cast(row, tl.int64) * stride_ym
        # Pass 1: Welford per lane. Every lane inside the row has seen i + 1 values at step i,
        # so the update's 1 / count is one scalar division per step, not one per element.
        mean_l = tl.zeros([BLOCK_N], tl.float32)
        m2_l = tl.zeros([BLOCK_N], tl.float32)
        for i in tl.range(0, tl.cdiv(n_cols, BLOCK_N)):
            offs = i * BLOCK_N + cols
            inside = offs < n_cols
            x = tl.load(x_row + offs, mask=inside, other=0.0,
                        eviction_policy="evict_last" if EVICT else "").to(tl.float32)
            delta = x - mean_l
            mean_l += tl.where(inside, delta * (1.0 / (i + 1)), 0.0)
            m2_l += tl.where(inside, delta * (x - mean_l), 0.0)
        # Merge the lanes (Chan et al.'s pairwise formula, all lanes at once).
        mean = tl.sum(count * mean_l, axis=0) / n_cols
        dev = mean_l - mean
        var = tl.sum(m2_l + count * dev * dev, axis=0) / n_cols
        rstd = tl.rsqrt(var + eps)
        tl.store(mean_ptr + row, mean)
        tl.store(rstd_ptr + row, rstd)
        # Pass 2: normalise, last block first (the likeliest still in L2; see softmax's looped
        # kernel). y is written once and never read back: evict_first.
        for i in tl.range(0, tl.cdiv(n_cols, BLOCK_N)):
            offs = (tl.cdiv(n_cols, BLOCK_N) - 1 - i) * BLOCK_N + cols
            inside = offs < n_cols
            x = tl.load(x_row + offs, mask=inside, other=0.0,
                        eviction_policy="evict_first" if EVICT else "").to(tl.float32)
            w = tl.load(w_ptr + offs, mask=inside, other=0.0,
                        eviction_policy="evict_last" if EVICT else "").to(tl.float32)
            b = tl.load(b_ptr + offs, mask=inside, other=0.0,
                        eviction_policy="evict_last" if EVICT else "").to(tl.float32)
            y = (x - mean) * rstd * w + b
            tl.store(y_row + offs, y.to(y_ptr.dtype.element_ty), mask=inside,
                     eviction_policy="evict_first" if EVICT else "")


@triton.jit
def _layernorm_bwd_row_sums_kernel(
    dy_ptr,  # *in* n_rows x n_cols, row stride stride_dym, columns contiguous
    x_ptr,  # *in* n_rows x n_cols, row stride stride_xm, columns contiguous
    w_ptr,  # *in* n_cols
    mean_ptr,  # *in* n_rows, float32
    rstd_ptr,  # *in* n_rows, float32
    c1_ptr,  # *out* n_rows, float32: mean over the row of xhat * w * dy
    c2_ptr,  # *out* n_rows, float32: mean over the row of w * dy
    n_rows,  # number of rows
    n_cols,  # row width, any size
    stride_dym,  # elements between rows of dy
    stride_xm,  # elements between rows of x
    BLOCK_N: tl.constexpr,  # columns per step of the loop over a row
    NUM_STAGES: tl.constexpr,  # steps in flight per program (through shared memory)
):
    cols = tl.arange(0, BLOCK_N)
    for row in tl.range(tl.program_id(0), n_rows, tl.num_programs(0)):
        mean = tl.load(mean_ptr + row)
        rstd = tl.load(rstd_ptr + row)
        acc1 = tl.zeros([BLOCK_N], tl.float32)
        acc2 = tl.zeros([BLOCK_N], tl.float32)
        for start in tl.range(0, n_cols, BLOCK_N, num_stages=NUM_STAGES):
            offs = start + cols
            inside = offs < n_cols
            x = tl.load(x_ptr + tl.cast(row, tl.int64) * stride_xm + offs, mask=inside,
                        other=0.0).to(tl.float32)
            dy = tl.load(dy_ptr + tl.cast(row, tl.int64) * stride_dym + offs, mask=inside,
                         other=0.0).to(tl.float32)
            w = tl.load(w_ptr + offs, mask=inside, other=0.0).to(tl.float32)
            wdy = w * dy
            acc1 += tl.where(inside, (x - mean) * rstd, 0.0) * wdy
            acc2 += wdy
        tl.store(c1_ptr + row, tl.sum(acc1, axis=0) / n_cols)
        tl.store(c2_ptr + row, tl.sum(acc2, axis=0) / n_cols)


@triton.jit
def _layernorm_bwd_kernel(
    dy_ptr,  # *in* n_rows x n_cols, row stride stride_dym, columns contiguous
    x_ptr,  # *in* n_rows x n_cols, row stride stride_xm, columns contiguous
    w_ptr,  # *in* n_cols
    mean_ptr,  # *in* n_rows, float32
    rstd_ptr,  # *in* n_rows, float32
    c1_ptr,  # *in* n_rows, float32, from the row-sums kernel (read only if ROW_SUMS_GIVEN)
    c2_ptr,  # *in* n_rows, float32, likewise
    dx_ptr,  # *out* n_rows x n_cols, row stride stride_dxm, columns contiguous
    dw_part_ptr,  # *out* n_chunks x n_cols, float32: this chunk's sum of dy * xhat
    db_part_ptr,  # *out* n_chunks x n_cols, float32: this chunk's sum of dy
    n_rows,  # number of rows
    n_cols,  # row width
    stride_dym,  # elements between rows of dy
    stride_xm,  # elements between rows of x
    stride_dxm,  # elements between rows of dx
    rows_per_chunk,  # rows each program owns (a multiple of ROWS)
    BLOCK_N: tl.constexpr,  # columns per program; >= n_cols unless ROW_SUMS_GIVEN
    ROWS: tl.constexpr,  # rows per step of the loop over the chunk
    ROW_SUMS_GIVEN: tl.constexpr,  # False: the block holds whole rows; take the sums here
    NUM_STAGES: tl.constexpr,  # row tiles in flight per program (through shared memory)
):
    chunk = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    col_in = cols < n_cols
    w = tl.load(w_ptr + cols, mask=col_in, other=0.0).to(tl.float32)
    # Accumulated per (row lane, column) and summed over the row lanes once, at the end.
    dw_acc = tl.zeros([ROWS, BLOCK_N], tl.float32)
    db_acc = tl.zeros([ROWS, BLOCK_N], tl.float32)
    first = chunk * rows_per_chunk
    for r0 in tl.range(first, tl.minimum(first + rows_per_chunk, n_rows), ROWS,
                       num_stages=NUM_STAGES):
        rows = tl.cast(r0, tl.int64) + tl.arange(0, ROWS)
        row_in = rows < n_rows
        mask = row_in[:, None] & col_in[None, :]
        x = tl.load(x_ptr + rows[:, None] * stride_xm + cols[None, :], mask=mask,
                    other=0.0).to(tl.float32)
        dy = tl.load(dy_ptr + rows[:, None] * stride_dym + cols[None, :], mask=mask,
                     other=0.0).to(tl.float32)
        mean = tl.load(mean_ptr + rows, mask=row_in, other=0.0)
        rstd = tl.load(rstd_ptr + rows, mask=row_in, other=0.0)
        xhat = tl.where(mask, (x - mean[:, None]) * rstd[:, None], 0.0)
        wdy = w[None, :] * dy
        if ROW_SUMS_GIVEN:
            c1 = tl.load(c1_ptr + rows, mask=row_in, other=0.0)
            c2 = tl.load(c2_ptr + rows, mask=row_in, other=0.0)
        else:
            c1 = tl.sum(xhat * wdy, axis=1) / n_cols
            c2 = tl.sum(wdy, axis=1) / n_cols
        dx = (wdy - (xhat * c1[:, None] + c2[:, None])) * rstd[:, None]
        tl.store(dx_ptr + rows[:, None] * stride_dxm + cols[None, :],
                 dx.to(dx_ptr.dtype.element_ty), mask=mask)
        dw_acc += dy * xhat
        db_acc += dy
    part = tl.cast(chunk, tl.int64) * n_cols + cols
    tl.store(dw_part_ptr + part, tl.sum(dw_acc, axis=0), mask=col_in)
    tl.store(db_part_ptr + part, tl.sum(db_acc, axis=0), mask=col_in)


@triton.jit
def _layernorm_bwd_dwdb_kernel(
    dw_part_ptr,  # *in* n_chunks x n_cols, float32
    db_part_ptr,  # *in* n_chunks x n_cols, float32
    dw_ptr,  # *out* n_cols
    db_ptr,  # *out* n_cols
    n_chunks,  # rows of the partial buffers
    n_cols,  # row width
    BLOCK_M: tl.constexpr,  # partial rows per step
    BLOCK_N: tl.constexpr,  # columns per program
):
    cols = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    col_in = cols < n_cols
    dw = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    db = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    for r0 in tl.range(0, n_chunks, BLOCK_M):
        rows = r0 + tl.arange(0, BLOCK_M)
        mask = (rows < n_chunks)[:, None] & col_in[None, :]
        offs = rows.to(tl.int64)[:, None] * n_cols + cols[None, :]
        dw += tl.load(dw_part_ptr + offs, mask=mask, other=0.0)
        db += tl.load(db_part_ptr + offs, mask=mask, other=0.0)
    tl.store(dw_ptr + cols, tl.sum(dw, axis=0).to(dw_ptr.dtype.element_ty), mask=col_in)
    tl.store(db_ptr + cols, tl.sum(db, axis=0).to(db_ptr.dtype.element_ty), mask=col_in)


# The kernels by path, for tools that compile or inspect them (bench/regcount.py, the sweeps'
# register reports).
KERNELS = {"forward": _layernorm_fwd_kernel, "forward_split": _layernorm_fwd_split_kernel,
           "forward_looped": _layernorm_fwd_looped_kernel,
           "backward_row_sums": _layernorm_bwd_row_sums_kernel, "backward": _layernorm_bwd_kernel,
           "backward_dwdb": _layernorm_bwd_dwdb_kernel}


def layernorm_config(n_rows: int, n_cols: int, dtype: torch.dtype) -> dict:
    """Forward launch parameters. `BLOCK_N >= n_cols`: single pass; else SPLIT=True splits each
    row over cdiv(n_cols, BLOCK_N) programs, SPLIT=False loops over it in one program.

    Single pass: float32 in ~8192-element tiles over 8 warps, 16 warps at 16K; 16-bit dtypes in
    4096-element tiles, 4 warps up to 2K columns and 8 above (narrow 16-bit rows several to a
    program on 8 warps ran slower: their w and b broadcast went through shared memory in a
    layout conversion; at 4K one row on 8 warps beat two). No eviction hint on x: faster than
    evict_first. As in softmax, the speed follows the bytes of x an SM holds, and registers
    bound it. A program that loads its w and b with x holds them in float32 too: a 16K-wide
    16-bit row on 16 warps then fits one program per SM; loaded after the statistics (LATE_WB,
    in x's dtype, from L1 or L2), two, and faster. Narrower 16-bit rows and float32 at 16K keep
    w and b early, which was as fast or faster there.
    Rows wider than 16K are split over programs of 4 warps, w and b loaded after the exchange,
    each chunk normalised in two halves (see the split kernel): float32 4096-column chunks;
    16-bit 8192-column chunks capped (maxnreg) at 72 registers, faster than a lower cap or none.
    Both beat chunks normalised whole. Also measured and dropped: the chunks on a persistent
    grid, each program loading its next chunk while it waits for the exchange: holding two
    chunks costs more registers than the wait.
    The measurements: docs/kernels.md.
    The looped path (sweeps only): 4096-column steps over 16 warps (Welford keeps 5 values per
    column live: 8 per thread), on a grid whose rows in flight fit in half of L2.
    """
    block = triton.next_power_of_2(max(n_cols, 1))
    base = {"EVICT": False, "SPLIT": False, "RELOAD": False, "LATE_WB": False,
            "programs_per_sm": None, "maxnreg": None}
    if block <= SINGLE_PASS_MAX_COLS:
        tile = 8192 if dtype == torch.float32 else 4096
        rows = max(1, min(tile // block, triton.next_power_of_2(max(n_rows, 1))))
        if dtype == torch.float32:
            num_warps = 8 if rows * block <= 8192 else 16
        else:
            num_warps = 4 if block <= 2048 else 8 if block <= 8192 else 16
        return {**base, "BLOCK_N": block, "ROWS": rows, "num_warps": num_warps,
                "LATE_WB": dtype != torch.float32 and block >= 16384}
    if interpreting():  # one chunk per row: see split_chunks
        return {**base, "BLOCK_N": block, "ROWS": 1, "num_warps": 4, "SPLIT": True}
    if dtype == torch.float32:
        return {**base, "BLOCK_N": 4096, "ROWS": 1, "num_warps": 4, "SPLIT": True,
                "LATE_WB": True}
    return {**base, "BLOCK_N": 8192, "ROWS": 1, "num_warps": 4, "SPLIT": True, "LATE_WB": True,
            "maxnreg": 72}


def layernorm_space(n_rows: int, n_cols: int, dtype: torch.dtype) -> list[dict]:
    """The launch configs a GPU chooses among at first use (reference_kernels/_tuning.py): the
    heuristic of layernorm_config first, then what won elsewhere (softmax.softmax_space says
    why they differ between GPUs), on a GPU of more bandwidth per SM: 1K rows one or two to a
    program on 4 warps; 4K 16-bit w and b loaded late; 16K float32 two rows on 32 warps, w and b
    late, or split in 2048-column chunks on 2 warps, 16-bit one row on 8 warps; 64K split rows
    in 2048-column chunks on 2 warps as the alternative to the heuristic's chunks. Measured in
    docs/kernels.md."""
    base = layernorm_config(n_rows, n_cols, dtype)
    block = base["BLOCK_N"]
    half = dtype != torch.float32
    if base["SPLIT"]:
        if half:
            return _tuning.space(base, {"BLOCK_N": 4096, "num_warps": 2, "maxnreg": None})
        return _tuning.space(base, {"BLOCK_N": 2048, "num_warps": 2})
    if block <= 1024:
        return _tuning.space(base, {"ROWS": tile_rows(1024, block, n_rows), "num_warps": 4},
                             {"ROWS": tile_rows(2048, block, n_rows), "num_warps": 4})
    if block <= 4096:
        if half:
            # One row with w and b late is no candidate: on a GPU of more bandwidth per SM it
            # times within the tuner's resolution of two rows late, then runs slower than them
            # in the perf test; elsewhere the heuristic's one row early wins outright
            # (docs/kernels.md).
            return _tuning.space(base, {"ROWS": tile_rows(2 * block, block, n_rows),
                                        "LATE_WB": True})
        return _tuning.space(base, {"ROWS": 1, "num_warps": 4})
    if half:
        return _tuning.space(base, {"num_warps": 8, "LATE_WB": True})
    return _tuning.space(base, {"ROWS": tile_rows(2 * block, block, n_rows), "num_warps": 32,
                                "LATE_WB": True}, {"num_warps": 32},
                         {"SPLIT": True, "BLOCK_N": 2048, "num_warps": 2, "LATE_WB": True})


def layernorm_backward_config(n_rows: int, n_cols: int, dtype: torch.dtype) -> dict:
    """Backward launch parameters; `BLOCK_N < n_cols` selects the split path (row sums first).

    Whole rows (up to FUSED_BWD_MAX_COLS): tiles of ~4096 elements (five fp32 values per
    element live at once), one chunk of rows per program on 2 programs per SM, so the partial
    buffer has 2 x SMs rows: ~1 MB at 1K columns, next to 256 MB of x.
    Wider rows: 1024-column blocks over chunks of rows_per_chunk=64 rows, which keeps the
    partial buffer at 1/64 of the rows (its write and read cost ~3% of the traffic) while
    giving every SM many programs; the row sums loop in 4096-column steps.

    Whole rows in 16-bit dtypes are pipelined over NUM_STAGES=3 (the tiles of the next rows
    copied into shared memory while this one is reduced: ~48 KB a program), which beat one and
    two stages and more programs per SM; float32 rows ran alike at 1, 2 or 3 stages, so they keep
    one. Wide rows (16K, 64K) read x and dy twice, once for the row sums and once for dx: 5
    tensor-sized transfers for the 3 counted, so they cannot pass 0.6 of the ceiling however
    fast they stream (pipelining the row sums, SUMS_NUM_STAGES=3, did not lift them; bands of
    half or a quarter of L2, so that the second read comes from L2, lost: two launches per band
    and their tails cost more than they save). Measured in docs/kernels.md.
    Rows read once, split over programs that exchange their row sums as the forward's do, are
    what would lift them: not built.
    """
    block = triton.next_power_of_2(max(n_cols, 1))
    if block <= FUSED_BWD_MAX_COLS:
        rows = max(1, min(4096 // block, triton.next_power_of_2(max(n_rows, 1))))
        tile = rows * block
        num_warps = 4 if tile <= 1024 else 8 if tile <= 4096 else 16
        return {"BLOCK_N": block, "ROWS": rows, "num_warps": num_warps, "programs_per_sm": 2,
                "rows_per_chunk": 64, "SUMS_BLOCK_N": 4096, "sums_num_warps": 8,
                "NUM_STAGES": 1 if dtype == torch.float32 else 3, "SUMS_NUM_STAGES": 1,
                "band_bytes": None}
    return {"BLOCK_N": 1024, "ROWS": 4, "num_warps": 8, "programs_per_sm": 2,
            "rows_per_chunk": 64, "SUMS_BLOCK_N": 4096, "sums_num_warps": 8, "NUM_STAGES": 1,
            "SUMS_NUM_STAGES": 1, "band_bytes": None}


def _check(where: str, x: torch.Tensor, **vectors: torch.Tensor) -> None:
    """x: (..., n) in a supported dtype; each of `vectors`: contiguous (n,), like x."""
    require_tensor(where, "x", x)
    require_dtype(where, x.dtype, DTYPES)
    if x.dim() == 0:
        raise ValueError(f"{where}: x must have at least one dimension")
    n = x.shape[-1]
    if n == 0:
        raise ValueError(f"{where}: x's last dimension is empty: no mean or variance to take")
    for name, v in vectors.items():
        require_tensor(where, name, v)
        if v.shape != (n,) or not v.is_contiguous():
            raise ValueError(f"{where}: {name} must be a contiguous ({n},) tensor (x's last "
                             f"dimension), got shape {tuple(v.shape)}, strides {v.stride()}")
        if v.dtype != x.dtype or v.device != x.device:
            raise TypeError(f"{where}: {name} must be {x.dtype} on {x.device} like x, got "
                            f"{v.dtype} on {v.device}")


def layernorm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float = 1e-5, *,
              out: torch.Tensor | None = None, config: dict | None = None):
    """LayerNorm of x over its last dimension: returns (y, mean, rstd).

    mean and rstd = 1 / sqrt(var + eps) are float32, one per row (shape x.shape[:-1]), as
    layernorm_backward takes them. config: overrides of layernorm_config's launch parameters
    (BLOCK_N, ROWS, num_warps, EVICT, SPLIT, RELOAD, LATE_WB, programs_per_sm, maxnreg), for
    tuning sweeps; BLOCK_N below the row width splits rows over programs (SPLIT=True; RELOAD=True
    reads each chunk again after the exchange) or loops over them (SPLIT=False).
    """
    where = "layernorm"
    _check(where, x, weight=weight, bias=bias)
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not eps >= 0:
        raise ValueError(f"{where}: eps={eps!r} must be >= 0")
    # in place is fine: each row is read before it is written, by the program that writes it
    y = output(where, "out", out, x.shape, x.dtype, x.device,
               inputs={"x": x, "weight": weight, "bias": bias}, same_place_ok=True)
    x2, y2 = row_view("x", x, where), row_view("out", y, where)
    n_rows, n_cols = x2.shape
    mean = torch.empty(x.shape[:-1], dtype=torch.float32, device=x.device)
    rstd = torch.empty(x.shape[:-1], dtype=torch.float32, device=x.device)
    if n_rows == 0:
        return y, mean, rstd
    args = (x2, weight, bias, y2, mean, rstd, n_rows, n_cols, x2.stride(0), y2.stride(0), eps)
    if config:
        cfg = with_overrides(layernorm_config(n_rows, n_cols, x.dtype), config, where,
                             powers_of_two=("BLOCK_N", "ROWS"))
    else:
        cfg = LAYERNORM_TUNER.choose(
            x.device, (triton.next_power_of_2(n_cols), x.element_size()),
            layernorm_space(n_rows, n_cols, x.dtype), lambda c: _forward(args, c, where),
            layernorm_bytes(x2), restore=(y2,))
    _forward(args, cfg, where)
    return y, mean, rstd


# The launch choices of the forward on this process's GPUs (reports read best_config).
LAYERNORM_TUNER = _tuning.LaunchTuner("layernorm")


def _forward(args: tuple, cfg: dict, where: str) -> None:
    """Launch the forward kernel that cfg selects (single pass, split rows or looped)."""
    x2 = args[0]
    n_rows, n_cols = args[6], args[7]
    if cfg["BLOCK_N"] >= n_cols and not cfg["SPLIT"]:
        grid = (triton.cdiv(n_rows, cfg["ROWS"]),)
        _layernorm_fwd_kernel[grid](*args, BLOCK_N=cfg["BLOCK_N"], ROWS=cfg["ROWS"],
                                    EVICT=cfg["EVICT"], LATE_WB=cfg["LATE_WB"],
                                    num_warps=cfg["num_warps"])
    elif cfg["SPLIT"]:
        if cfg["BLOCK_N"] < 2:
            raise ValueError(f"{where}: config BLOCK_N={cfg['BLOCK_N']} with SPLIT=True: a split "
                             "chunk is normalised in two halves, so BLOCK_N must be >= 2")
        n_chunks = split_chunks(n_cols, cfg["BLOCK_N"], where)
        sync = sync_buffer(x2.device, n_rows * 2 * n_chunks)
        _layernorm_fwd_split_kernel[(n_rows * n_chunks,)](
            *args[:6], sync, sync[SYNC_HEADER:], *args[6:], BLOCK_N=cfg["BLOCK_N"],
            MAX_CHUNKS=triton.next_power_of_2(n_chunks), RELOAD=cfg["RELOAD"],
            LATE_WB=cfg["LATE_WB"], num_warps=cfg["num_warps"], **register_cap(cfg))
    else:
        grid = (looped_grid(n_rows, n_cols * x2.element_size(), x2.device,
                            cfg["programs_per_sm"]),)
        _layernorm_fwd_looped_kernel[grid](*args, BLOCK_N=cfg["BLOCK_N"], EVICT=cfg["EVICT"],
                                           num_warps=cfg["num_warps"])


def layernorm_backward(dy: torch.Tensor, x: torch.Tensor, weight: torch.Tensor,
                       mean: torch.Tensor, rstd: torch.Tensor, *, dx: torch.Tensor | None = None,
                       dw: torch.Tensor | None = None, db: torch.Tensor | None = None,
                       config: dict | None = None):
    """Gradients (dx, dw, db) of LayerNorm, given dy and the forward's x, weight, mean, rstd.

    config: overrides of layernorm_backward_config's launch parameters, for tuning sweeps.
    """
    where = "layernorm_backward"
    _check(where, x, weight=weight)
    if not isinstance(dy, torch.Tensor) or dy.shape != x.shape or dy.dtype != x.dtype \
            or dy.device != x.device:
        raise ValueError(f"{where}: dy must be like x ({tuple(x.shape)} {x.dtype} on {x.device})")
    for name, s in (("mean", mean), ("rstd", rstd)):
        if not isinstance(s, torch.Tensor) or s.shape != x.shape[:-1] \
                or s.dtype != torch.float32 or s.device != x.device or not s.is_contiguous():
            raise ValueError(f"{where}: {name} must be a contiguous float32 tensor of shape "
                             f"{tuple(x.shape[:-1])} on {x.device}, as layernorm returns it")
    read = {"x": x, "dy": dy, "weight": weight}
    dx = output(where, "dx", dx, x.shape, x.dtype, x.device, inputs=read, same_place_ok=True)
    dw = output(where, "dw", dw, weight.shape, weight.dtype, x.device, inputs={**read, "dx": dx})
    db = output(where, "db", db, weight.shape, weight.dtype, x.device,
                inputs={**read, "dx": dx, "dw": dw})
    x2, dy2, dx2 = row_view("x", x, where), row_view("dy", dy, where), row_view("dx", dx, where)
    n_rows, n_cols = x2.shape
    if n_rows == 0:
        dw.zero_()
        db.zero_()
        return dx, dw, db
    cfg = with_overrides(layernorm_backward_config(n_rows, n_cols, x.dtype), config, where,
                         powers_of_two=("BLOCK_N", "ROWS", "SUMS_BLOCK_N"))
    rows = cfg["ROWS"]
    whole_rows = cfg["BLOCK_N"] >= n_cols
    if whole_rows:
        # One chunk per program of a grid of programs_per_sm x SMs.
        n_chunks = min(triton.cdiv(n_rows, rows),
                       cfg["programs_per_sm"] * sm_count(x.device))
        rows_per_chunk = triton.cdiv(triton.cdiv(n_rows, n_chunks), rows) * rows
    else:
        rows_per_chunk = triton.cdiv(cfg["rows_per_chunk"], rows) * rows
    n_chunks = triton.cdiv(n_rows, rows_per_chunk)
    mean1, rstd1 = mean.reshape(-1), rstd.reshape(-1)
    dw_part = torch.empty((n_chunks, n_cols), dtype=torch.float32, device=x.device)
    db_part = torch.empty((n_chunks, n_cols), dtype=torch.float32, device=x.device)
    if whole_rows:
        c1 = c2 = mean1  # not read
        band_rows = n_rows
    else:
        c1 = torch.empty(n_rows, dtype=torch.float32, device=x.device)
        c2 = torch.empty(n_rows, dtype=torch.float32, device=x.device)
        # band_bytes: the split path's two kernels run band by band, each band's x and dy
        # (whole chunks of rows) within band_bytes, so that the main kernel reads them again
        # from L2 rather than DRAM; None: one band.
        band = cfg["band_bytes"]
        row_bytes = 2 * n_cols * x.element_size()
        band_rows = n_rows if band is None else \
            max(1, band // (row_bytes * rows_per_chunk)) * rows_per_chunk
    for b0 in range(0, n_rows, band_rows):
        b1 = min(b0 + band_rows, n_rows)
        chunk0 = b0 // rows_per_chunk
        if not whole_rows:
            _layernorm_bwd_row_sums_kernel[(b1 - b0,)](
                dy2[b0:b1], x2[b0:b1], weight, mean1[b0:b1], rstd1[b0:b1], c1[b0:b1],
                c2[b0:b1], b1 - b0, n_cols, dy2.stride(0), x2.stride(0),
                BLOCK_N=cfg["SUMS_BLOCK_N"], NUM_STAGES=cfg["SUMS_NUM_STAGES"],
                num_warps=cfg["sums_num_warps"])
        grid = (triton.cdiv(b1 - b0, rows_per_chunk), triton.cdiv(n_cols, cfg["BLOCK_N"]))
        _layernorm_bwd_kernel[grid](
            dy2[b0:b1], x2[b0:b1], weight, mean1[b0:b1], rstd1[b0:b1], c1[b0:b1], c2[b0:b1],
            dx2[b0:b1], dw_part[chunk0:], db_part[chunk0:], b1 - b0, n_cols, dy2.stride(0),
            x2.stride(0), dx2.stride(0), rows_per_chunk, BLOCK_N=cfg["BLOCK_N"], ROWS=rows,
            ROW_SUMS_GIVEN=not whole_rows, NUM_STAGES=cfg["NUM_STAGES"],
            num_warps=cfg["num_warps"])
    # 64-column strips (256-byte rows of the partials) give even 1K-wide rows 16 programs;
    # 32 x 64 values over 2 warps are 32 per thread and accumulator, no spills. Its traffic is
    # 2 x n_chunks x n_cols x 4 bytes: ~1% of the main kernel's.
    _layernorm_bwd_dwdb_kernel[(triton.cdiv(n_cols, 64),)](
        dw_part, db_part, dw, db, n_chunks, n_cols, BLOCK_M=32, BLOCK_N=64, num_warps=2)
    return dx, dw, db


class LayerNormFunction(torch.autograd.Function):
    """LayerNorm with this module's forward and backward kernels."""

    @staticmethod
    def forward(ctx, x, weight, bias, eps):
        y, mean, rstd = layernorm(x, weight, bias, eps)
        ctx.save_for_backward(x, weight, mean, rstd)
        return y

    @staticmethod
    def backward(ctx, dy):
        x, weight, mean, rstd = ctx.saved_tensors
        dx, dw, db = layernorm_backward(dy.contiguous(), x, weight, mean, rstd)
        return dx, dw, db, None


def layer_norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor,
               eps: float = 1e-5) -> torch.Tensor:
    """torch.nn.functional.layer_norm(x, x.shape[-1:], weight, bias, eps) on these kernels,
    differentiable in x, weight and bias."""
    return LayerNormFunction.apply(x, weight, bias, eps)


def layernorm_reference(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor,
                        eps: float = 1e-5):
    """(y, mean, rstd) from torch: y in x's dtype (float64 if given float64); mean and rstd in
    float64 if given float64, else float32, like layernorm's."""
    y = torch.nn.functional.layer_norm(x, x.shape[-1:], weight, bias, eps)
    xs = x if x.dtype == torch.float64 else x.float()
    var, mean = torch.var_mean(xs, dim=-1, unbiased=False)
    return y, mean, torch.rsqrt(var + eps)


def layernorm_backward_reference(dy: torch.Tensor, x: torch.Tensor, weight: torch.Tensor,
                                 bias: torch.Tensor, eps: float = 1e-5):
    """(dx, dw, db) from torch autograd, in the inputs' dtype (float64 if given float64)."""
    x, weight, bias = (t.detach().requires_grad_(True) for t in (x, weight, bias))
    y = torch.nn.functional.layer_norm(x, x.shape[-1:], weight, bias, eps)
    return torch.autograd.grad(y, (x, weight, bias), dy)


def layernorm_bytes(x: torch.Tensor) -> int:
    # read x, weight, bias once; write y, and mean and rstd (float32, one each per row)
    n_cols = x.shape[-1]
    n_rows = x.numel() // max(n_cols, 1)
    return (2 * x.numel() + 2 * n_cols) * x.element_size() + 2 * n_rows * 4


def layernorm_backward_bytes(x: torch.Tensor) -> int:
    # read x, dy, weight, mean, rstd once; write dx, dw, db once
    n_cols = x.shape[-1]
    n_rows = x.numel() // max(n_cols, 1)
    return (3 * x.numel() + 3 * n_cols) * x.element_size() + 2 * n_rows * 4


def layernorm_inputs(make_tensor, n_rows: int, n_cols: int, *, dtype: torch.dtype = torch.float32,
                     **kwargs):
    """(x, weight, bias): x n_rows x n_cols (keyword arguments go to make_tensor for x), weight
    in [0.5, 1.5) so that no column is scaled to ~0, bias standard normal."""
    x = make_tensor((n_rows, n_cols), dtype, **kwargs)
    weight = make_tensor(n_cols, dtype, dist="uniform", low=0.5, high=1.5)
    bias = make_tensor(n_cols, dtype)
    return x, weight, bias
