"""Fused softmax along the last dimension: float32, float16, bfloat16 in and out, float32 inside.

Rows up to SINGLE_PASS_MAX_COLS wide are held whole in registers, several rows per program when
they are narrow (one read, one write). Wider rows take an online, looped path: one pass keeps a
running max and a sum of exponentials rescaled to it, a second pass normalises (a 64K-wide fp16
row is 128 KB, so its second read is meant to hit L2). Rows may have any row stride; the columns
must be contiguous.

A row that is entirely -inf (fully masked) has no maximum to subtract: its result is NaN, as
torch.softmax gives. A row with some -inf gives 0 there, and large magnitudes (1e3) are safe: the
row's maximum is subtracted before exponentiating.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .vector_add import device_size, with_overrides

DTYPES = (torch.float32, torch.float16, torch.bfloat16)

# Held in fp32 registers whatever the input dtype: 16K columns is 64 KB per row, 32 values per
# thread at 16 warps. Wider rows would spill, so they loop.
SINGLE_PASS_MAX_COLS = 16384


@triton.jit
def _softmax_kernel(
    x_ptr,  # *in* n_rows x n_cols, row stride stride_xm, columns contiguous
    y_ptr,  # *out* n_rows x n_cols, row stride stride_ym, columns contiguous
    n_rows,  # number of rows
    n_cols,  # row width, <= BLOCK_N
    stride_xm,  # elements between rows of x
    stride_ym,  # elements between rows of y
    BLOCK_N: tl.constexpr,  # power of two >= n_cols: a whole row in one block
    ROWS: tl.constexpr,  # rows per tile: narrow rows are too little work for one program
    NUM_STAGES: tl.constexpr,  # pipelining of the tile loop; matters only on persistent grids
    EVICT: tl.constexpr,  # True: mark x evict_first, it is read exactly once
):
    cols = tl.arange(0, BLOCK_N)
    col_in = cols < n_cols
    n_tiles = tl.cdiv(n_rows, ROWS)
    for tile in tl.range(tl.program_id(0), n_tiles, tl.num_programs(0), num_stages=NUM_STAGES):
        rows = tl.cast(tile, tl.int64) * ROWS + tl.arange(0, ROWS)
        mask = (rows < n_rows)[:, None] & col_in[None, :]
        # Padding lanes read -inf: they add exp(-inf) = 0 to the sum and never win the max.
        x = tl.load(x_ptr + rows[:, None] * stride_xm + cols[None, :], mask=mask,
                    other=float("-inf"), eviction_policy="evict_first" if EVICT else "")
        x = x.to(tl.float32)
        row_max = tl.max(x, axis=1)
        # All -inf (a fully masked row, or a padding row of the tile): subtract 0 instead, so
        # that nothing computes -inf - -inf, and make the result NaN on purpose below.
        empty = row_max == float("-inf")
        e = tl.exp(x - tl.where(empty, 0.0, row_max)[:, None])
        row_sum = tl.sum(e, axis=1)
        # One division per row, then multiplies: a division per element costs ~10 instructions.
        inv_sum = tl.where(empty, float("nan"), 1.0 / tl.where(empty, 1.0, row_sum))
        y = e * inv_sum[:, None]
        tl.store(y_ptr + rows[:, None] * stride_ym + cols[None, :],
                 y.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _softmax_looped_kernel(
    x_ptr,  # *in* n_rows x n_cols, row stride stride_xm, columns contiguous
    y_ptr,  # *out* n_rows x n_cols, row stride stride_ym, columns contiguous
    n_rows,  # number of rows
    n_cols,  # row width, any size
    stride_xm,  # elements between rows of x
    stride_ym,  # elements between rows of y
    BLOCK_N: tl.constexpr,  # columns per step of the loops over a row
    NUM_STAGES: tl.constexpr,  # pipelining of the loops over a row
    EVICT: tl.constexpr,  # True: pass 1 keeps the row in L2 (evict_last), pass 2 frees it
):
    cols = tl.arange(0, BLOCK_N)
    n_blocks = tl.cdiv(n_cols, BLOCK_N)
    for row in tl.range(tl.program_id(0), n_rows, tl.num_programs(0)):
        x_row = x_ptr + tl.cast(row, tl.int64) * stride_xm
        y_row = y_ptr + tl.cast(row, tl.int64) * stride_ym
        # Pass 1, per lane: m = max so far, s = sum of exp(x - m) so far. Lanes reduce only at
        # the end, so the loop has no barrier.
        m = tl.full([BLOCK_N], float("-inf"), tl.float32)
        s = tl.zeros([BLOCK_N], tl.float32)
        for start in tl.range(0, n_cols, BLOCK_N, num_stages=NUM_STAGES):
            offs = start + cols
            x = tl.load(x_row + offs, mask=offs < n_cols, other=float("-inf"),
                        eviction_policy="evict_last" if EVICT else "").to(tl.float32)
            hi = tl.maximum(m, x)
            # One exponential serves either update: exp(lo - hi) rescales s when x is the new
            # maximum, and is x's own term otherwise. Both -inf (nothing seen yet): subtracting
            # 0 instead gives exp(-inf) = 0, no term, and no -inf - -inf.
            e = tl.exp(tl.minimum(m, x) - tl.where(hi == float("-inf"), 0.0, hi))
            s = tl.where(x > m, s * e + 1.0, s + e)
            m = hi
        row_max = tl.max(m, axis=0)
        # An all -inf row (fully masked) has nothing to normalise by: NaN, like torch.
        empty = row_max == float("-inf")
        row_max = tl.where(empty, 0.0, row_max)
        row_sum = tl.sum(s * tl.exp(m - row_max), axis=0)
        inv_sum = tl.where(empty, float("nan"), 1.0 / tl.where(empty, 1.0, row_sum))
        # Pass 2: normalise, last block first: the blocks read last in pass 1 are the likeliest
        # to still be in L2. y is written once and never read back: evict_first.
        for i in tl.range(0, n_blocks, num_stages=NUM_STAGES):
            offs = (n_blocks - 1 - i) * BLOCK_N + cols
            x = tl.load(x_row + offs, mask=offs < n_cols, other=float("-inf"),
                        eviction_policy="evict_first" if EVICT else "").to(tl.float32)
            y = tl.exp(x - row_max) * inv_sum
            tl.store(y_row + offs, y.to(y_ptr.dtype.element_ty), mask=offs < n_cols,
                     eviction_policy="evict_first" if EVICT else "")


def _softmax_config(n_rows: int, n_cols: int, dtype: torch.dtype) -> dict:
    """Launch parameters; `BLOCK_N < n_cols` selects the looped path.

    Single pass: tiles of ~8192 elements (several rows when rows are narrow: a 1K-wide fp16 row
    is 2 KB, too little for a program), 32 fp32 values per thread at 8 warps and 16 warps for
    16K-wide rows, so nothing spills. A plain one-row-per-program kernel with these warp counts
    ran fp32 softmax at 2940 GB/s on an H100 at 1K-16K columns. Persistent grids take half the
    SM's 64 warp slots (programs_per_sm) and pipeline the next tile's load behind the current
    tile's arithmetic (NUM_STAGES=2; non-persistent grids run one tile per program and ignore it).
    Looped: 4096-column steps over 16 warps, 8 values per thread (at 16 per thread, Triton 3.6's
    ptxas spills in the loop). programs_per_sm=None sizes the grid so that the rows in flight
    fill about half of L2, between 1 and 4 programs per SM: their second read then hits L2
    (264 rows of a 64K fp16 softmax would be 34 MB).
    """
    block = triton.next_power_of_2(max(n_cols, 1))
    if block <= SINGLE_PASS_MAX_COLS:
        rows = max(1, min(8192 // block, triton.next_power_of_2(max(n_rows, 1))))
        tile = rows * block
        num_warps = 4 if tile <= 2048 else 8 if tile <= 8192 else 16
        return {"BLOCK_N": block, "ROWS": rows, "num_warps": num_warps, "NUM_STAGES": 2,
                "EVICT": True, "programs_per_sm": max(1, 32 // num_warps)}
    return {"BLOCK_N": 4096, "ROWS": 1, "num_warps": 16, "NUM_STAGES": 1, "EVICT": True,
            "programs_per_sm": None}


def looped_grid(n_rows: int, row_bytes: int, device: torch.device,
                programs_per_sm: int | None) -> int:
    """Programs for a kernel that reads each row twice: programs_per_sm per SM if given, else as
    many as keep the rows in flight within half of L2 (1 to 4 per SM)."""
    sms, l2 = device_size(device)
    if programs_per_sm:
        return min(n_rows, programs_per_sm * sms)
    return min(n_rows, max(sms, min(4 * sms, (l2 // 2) // max(row_bytes, 1))))


def row_view(name: str, t: torch.Tensor, where: str) -> torch.Tensor:
    """t (..., n) as a 2-D (rows, n) view: columns contiguous, any row stride; leading
    dimensions that cannot be viewed as one row index are an error, not a silent copy."""
    if t.numel() == 0:  # nothing to launch on
        return t.new_empty((0, t.shape[-1] if t.dim() else 0))
    if t.shape[-1] > 1 and t.stride(-1) != 1:
        raise ValueError(f"{where}: {name} must have contiguous columns (stride 1 along the last "
                         f"dimension), got strides {t.stride()}")
    try:
        return t.view(-1, t.shape[-1])
    except RuntimeError:
        raise ValueError(f"{where}: the leading dimensions of {name} (strides {t.stride()}) "
                         "cannot be viewed as one row index; call .contiguous()") from None


def _as_rows(x: torch.Tensor, out: torch.Tensor | None, where: str):
    """Check x and out; return 2-D row views of both (out allocated when None) and out."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{where}: x must be a torch.Tensor, got {type(x).__name__}")
    if x.dtype not in DTYPES:
        raise TypeError(f"{where}: dtype {x.dtype} is not supported; expected one of "
                        f"{', '.join(str(d) for d in DTYPES)}")
    if x.dim() == 0:
        raise ValueError(f"{where}: x must have at least one dimension")
    if out is None:
        out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    elif out.shape != x.shape or out.dtype != x.dtype or out.device != x.device:
        raise ValueError(f"{where}: out must be {tuple(x.shape)} {x.dtype} on {x.device}, got "
                         f"{tuple(out.shape)} {out.dtype} on {out.device}")
    return row_view("x", x, where), row_view("out", out, where), out


def _launch(x2: torch.Tensor, y2: torch.Tensor, cfg: dict, persistent: bool) -> None:
    n_rows, n_cols = x2.shape
    if n_rows == 0 or n_cols == 0:
        return
    if cfg["BLOCK_N"] >= n_cols:
        n_tiles = triton.cdiv(n_rows, cfg["ROWS"])
        if persistent:
            grid = (min(n_tiles, (cfg["programs_per_sm"] or 1) * device_size(x2.device)[0]),)
        else:
            grid = (n_tiles,)
        _softmax_kernel[grid](x2, y2, n_rows, n_cols, x2.stride(0), y2.stride(0),
                              BLOCK_N=cfg["BLOCK_N"], ROWS=cfg["ROWS"],
                              NUM_STAGES=cfg["NUM_STAGES"] if persistent else 1,
                              EVICT=cfg["EVICT"], num_warps=cfg["num_warps"])
    else:
        # Capped on every grid, persistent or not, for L2's sake: see _softmax_config.
        grid = (looped_grid(n_rows, n_cols * x2.element_size(), x2.device,
                            cfg["programs_per_sm"]),)
        _softmax_looped_kernel[grid](x2, y2, n_rows, n_cols, x2.stride(0), y2.stride(0),
                                     BLOCK_N=cfg["BLOCK_N"], NUM_STAGES=cfg["NUM_STAGES"],
                                     EVICT=cfg["EVICT"], num_warps=cfg["num_warps"])


def softmax(x: torch.Tensor, *, out: torch.Tensor | None = None,
            config: dict | None = None) -> torch.Tensor:
    """softmax(x, dim=-1), one tile of rows per program.

    config: overrides of _softmax_config's launch parameters (BLOCK_N, ROWS, num_warps,
    NUM_STAGES, EVICT, programs_per_sm), for tuning sweeps; BLOCK_N below the row width forces
    the looped path. Single-pass tiles use NUM_STAGES and programs_per_sm only on persistent
    grids.
    """
    x2, y2, out = _as_rows(x, out, "softmax")
    cfg = with_overrides(_softmax_config(*x2.shape, x.dtype), config, "softmax",
                         powers_of_two=("BLOCK_N", "ROWS"))
    _launch(x2, y2, cfg, persistent=False)
    return out


def softmax_persistent(x: torch.Tensor, *, out: torch.Tensor | None = None,
                       config: dict | None = None) -> torch.Tensor:
    """softmax(x, dim=-1) on a persistent grid: programs_per_sm programs per SM loop over the
    tiles of rows (config as for softmax)."""
    x2, y2, out = _as_rows(x, out, "softmax_persistent")
    cfg = with_overrides(_softmax_config(*x2.shape, x.dtype), config, "softmax_persistent",
                         powers_of_two=("BLOCK_N", "ROWS"))
    _launch(x2, y2, cfg, persistent=True)
    return out


def softmax_reference(x: torch.Tensor) -> torch.Tensor:
    """torch.softmax over the last dimension, computed in x's dtype (float64 if given float64)."""
    return torch.softmax(x, dim=-1)


def softmax_bytes(x: torch.Tensor) -> int:
    # read x once; write y once
    return 2 * x.numel() * x.element_size()


def softmax_inputs(make_tensor, n_rows: int, n_cols: int, *, dtype: torch.dtype = torch.float32,
                   **kwargs):
    """(x,): an n_rows x n_cols input (keyword arguments go to make_tensor)."""
    return (make_tensor((n_rows, n_cols), dtype, **kwargs),)
