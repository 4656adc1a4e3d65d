"""Fused softmax along the last dimension: float32, float16, bfloat16 in and out, float32 inside.

Rows up to SINGLE_PASS_MAX_COLS wide are held whole in registers, several rows per program when
they are narrow (one read, one write). Wider rows are split: each of several programs holds one
chunk of the row in registers, publishes its chunk's (max, sum of exponentials), waits for the
other chunks' and normalises its own: still one read and one write, where one program per row
would have to read a row too wide for its registers twice. softmax_persistent runs a grid of a
few programs per SM: tiles of rows from a launch-wide counter, or for 16K-wide 16-bit rows a
grid-stride loop that Triton pipelines through shared memory; rows wider than 16K take the
older looped path there (one program per row in flight: a pass for the running max and sum, a
second to normalise, meant to find the row in L2). Rows may have any row stride; the columns
must be contiguous.

A row that is entirely -inf (fully masked) has no maximum to subtract: its result is NaN, as
torch.softmax gives. A row with some -inf gives 0 there, and large magnitudes (1e3) are safe: the
row's maximum is subtracted before exponentiating.
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
from ._tickets import SYNC_HEADER, sync_buffer, take_ticket

DTYPES = (torch.float32, torch.float16, torch.bfloat16)

# Held in fp32 registers whatever the input dtype: 16K columns is 64 KB per row, 32 values per
# thread at 16 warps. Wider rows would spill, so they are split over programs (or loop).
SINGLE_PASS_MAX_COLS = 16384


@triton.jit
def _softmax_rows(
    x,  # ROWS x BLOCK_N tile, -inf in padding lanes
):
    """softmax of each row of a tile, in float32."""
    x = x.to(tl.float32)
    row_max = tl.max(x, axis=1)
    # All -inf (a fully masked row, or a padding row of the tile): subtract 0 instead, so that
    # nothing computes -inf - -inf, and make the result NaN on purpose below.
    empty = row_max == float("-inf")
    e = tl.exp(x - tl.where(empty, 0.0, row_max)[:, None])
    row_sum = tl.sum(e, axis=1)
    # One division per row, then multiplies: a division per element costs ~10 instructions.
    inv_sum = tl.where(empty, float("nan"), 1.0 / tl.where(empty, 1.0, row_sum))
    return e * inv_sum[:, None]


@triton.jit
def _softmax_kernel(
    x_ptr,  # *in* n_rows x n_cols, row stride stride_xm, columns contiguous
    y_ptr,  # *out* n_rows x n_cols, row stride stride_ym, columns contiguous
    n_rows,  # number of rows
    n_cols,  # row width, <= BLOCK_N
    stride_xm,  # elements between rows of x
    stride_ym,  # elements between rows of y
    BLOCK_N: tl.constexpr,  # power of two >= n_cols: a whole row in one block
    ROWS: tl.constexpr,  # rows per program: narrow rows are too little work for one program
    EVICT: tl.constexpr,  # True: mark x evict_first, it is read exactly once
):
    cols = tl.arange(0, BLOCK_N)
    rows = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    mask = (rows < n_rows)[:, None] & (cols < n_cols)[None, :]
    # Padding lanes read -inf: they add exp(-inf) = 0 to the sum and never win the max.
    x = tl.load(x_ptr + rows[:, None] * stride_xm + cols[None, :], mask=mask,
                other=float("-inf"), eviction_policy="evict_first" if EVICT else "")
    tl.store(y_ptr + rows[:, None] * stride_ym + cols[None, :],
             _softmax_rows(x).to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _softmax_persistent_kernel(
    x_ptr,  # *in* n_rows x n_cols, row stride stride_xm, columns contiguous
    y_ptr,  # *out* n_rows x n_cols, row stride stride_ym, columns contiguous
    sync_ptr,  # *in/out* int64 launch-wide counter word (_tickets.sync_buffer): tiles are tickets
    n_rows,  # number of rows
    n_cols,  # row width, <= BLOCK_N
    stride_xm,  # elements between rows of x
    stride_ym,  # elements between rows of y
    BLOCK_N: tl.constexpr,  # power of two >= n_cols: a whole row in one block
    ROWS: tl.constexpr,  # rows per tile
    EVICT: tl.constexpr,  # True: mark x evict_first, it is read exactly once
):
    # Tiles are tickets, as in vector_add_persistent (an SM that streams faster takes more),
    # and each program holds two: while it normalises one, the next one's load is in flight,
    # and the ticket after that is being fetched.
    cols = tl.arange(0, BLOCK_N)
    col_in = cols < n_cols
    n_tiles = tl.cdiv(n_rows, ROWS)
    # Each program stops once its current ticket is past the last tile, holding one more: two
    # tickets per program past the tiles.
    n_tickets = n_tiles + 2 * tl.num_programs(0)
    tile, _ = take_ticket(sync_ptr, n_tickets)
    rows = tile * ROWS + tl.arange(0, ROWS)
    mask = (rows < n_rows)[:, None] & col_in[None, :]
    x = tl.load(x_ptr + rows[:, None] * stride_xm + cols[None, :], mask=mask,
                other=float("-inf"), eviction_policy="evict_first" if EVICT else "")
    next_tile, _ = take_ticket(sync_ptr, n_tickets)
    while tile < n_tiles:
        # A ticket past the last tile loads nothing: every lane is masked off.
        next_rows = next_tile * ROWS + tl.arange(0, ROWS)
        next_mask = (next_rows < n_rows)[:, None] & col_in[None, :]
        x_next = tl.load(x_ptr + next_rows[:, None] * stride_xm + cols[None, :],
                         mask=next_mask, other=float("-inf"),
                         eviction_policy="evict_first" if EVICT else "")
        after, _ = take_ticket(sync_ptr, n_tickets)
        tl.store(y_ptr + rows[:, None] * stride_ym + cols[None, :],
                 _softmax_rows(x).to(y_ptr.dtype.element_ty), mask=mask)
        tile, next_tile, rows, mask, x = next_tile, after, next_rows, next_mask, x_next


@triton.jit
def _softmax_strided_kernel(
    x_ptr,  # *in* n_rows x n_cols, row stride stride_xm, columns contiguous
    y_ptr,  # *out* n_rows x n_cols, row stride stride_ym, columns contiguous
    n_rows,  # number of rows
    n_cols,  # row width, <= BLOCK_N
    stride_xm,  # elements between rows of x
    stride_ym,  # elements between rows of y
    BLOCK_N: tl.constexpr,  # power of two >= n_cols: a whole row in one block
    ROWS: tl.constexpr,  # rows per tile
    NUM_STAGES: tl.constexpr,  # tiles in flight per program, through shared memory
    EVICT: tl.constexpr,  # True: mark x evict_first, it is read exactly once
):
    # Wide rows on a persistent grid: program p takes tiles p, p + grid, ...; Triton pipelines
    # the loop, copying the next tiles' x into shared memory (cp.async) while this one is
    # normalised, so a program keeps a whole wide row in flight without registers for it.
    cols = tl.arange(0, BLOCK_N)
    col_in = cols < n_cols
    for tile in tl.range(tl.program_id(0), tl.cdiv(n_rows, ROWS), tl.num_programs(0),
                         num_stages=NUM_STAGES):
        rows = tl.cast(tile, tl.int64) * ROWS + tl.arange(0, ROWS)
        mask = (rows < n_rows)[:, None] & col_in[None, :]
        x = tl.load(x_ptr + rows[:, None] * stride_xm + cols[None, :], mask=mask,
                    other=float("-inf"), eviction_policy="evict_first" if EVICT else "")
        tl.store(y_ptr + rows[:, None] * stride_ym + cols[None, :],
                 _softmax_rows(x).to(y_ptr.dtype.element_ty), mask=mask)


# --- rows split over programs: each chunk publishes two statistics, then reads everyone's ------


@triton.jit
def _exp_sum(
    x,  # a half chunk as loaded, -inf in padding lanes
    poison,  # True: NaN (the chunk's max is NaN)
    base,  # subtracted before exponentiating
):
    return tl.sum(tl.exp(reconvert(x, poison) - base), axis=0)


@triton.jit
def _normalise(
    x,  # a half chunk as loaded, or None: read it again (RELOAD)
    x_row,  # *in* the row of x
    y_row,  # *out* the row of y
    start,  # the half's first column
    n_cols,  # row width
    row_max,  # the row's max (0 for an empty row)
    inv_sum,  # 1 / the row's sum of exponentials (NaN: poison)
    poison,  # True: write NaN
    HALF: tl.constexpr,  # columns of the half
):
    # The columns are formed again here, not kept from before the exchange: a column tensor held
    # across it costs a register per element (sm_90, Triton 3.6: 8192-column fp16 chunks 95
    # registers with the columns held, 80 formed again).
    cols = start + tl.arange(0, HALF)
    inside = cols < n_cols
    if x is None:
        # Read microseconds after the first time: from this SM's L1 or from L2, not from DRAM.
        x = tl.load(x_row + cols, mask=inside, other=float("-inf"))
    y = tl.exp(reconvert(x, poison) - row_max) * inv_sum
    tl.store(y_row + cols, y.to(y_row.dtype.element_ty), mask=inside)


@triton.jit
def _softmax_split_kernel(
    x_ptr,  # *in* n_rows x n_cols, row stride stride_xm, columns contiguous
    y_ptr,  # *out* n_rows x n_cols, row stride stride_ym, columns contiguous
    sync_ptr,  # *in/out* int64 launch-wide counter word (_tickets.sync_buffer)
    words_ptr,  # *in/out* int64 n_rows x 2 x n_chunks words: each chunk's tagged statistics
    n_rows,  # number of rows (the grid is n_rows x n_chunks programs)
    n_cols,  # row width
    stride_xm,  # elements between rows of x
    stride_ym,  # elements between rows of y
    BLOCK_N: tl.constexpr,  # columns per chunk: one program's share of a row, >= 2
    MAX_CHUNKS: tl.constexpr,  # power of two >= cdiv(n_cols, BLOCK_N)
    RELOAD: tl.constexpr,  # True: read the chunk again after the exchange instead of holding it
):
    # The chunk is two halves, loaded together, summed and normalised one after the other: only
    # one half's exponentials are live at a time (as in layernorm's split kernel). sm_90, Triton
    # 3.6 (bench/regcount.py): 8192-column fp16 chunks on 4 warps take 80 registers where the
    # whole chunk took 96; 4096-column fp32 chunks 56 where they took 64; 4096 fp16 48 either way.
    HALF: tl.constexpr = BLOCK_N // 2
    n_chunks = tl.cdiv(n_cols, BLOCK_N)
    row, chunk, epoch = take_row_chunk(sync_ptr, n_rows, n_chunks)
    cols0 = chunk * BLOCK_N + tl.arange(0, HALF)
    cols1 = cols0 + HALF
    in0 = cols0 < n_cols
    in1 = cols1 < n_cols
    x_row = x_ptr + row.to(tl.int64) * stride_xm
    # Held as loaded (16-bit stays 16-bit) across the exchange, converted again for each use.
    x0 = tl.load(x_row + cols0, mask=in0, other=float("-inf"))
    x1 = tl.load(x_row + cols1, mask=in1, other=float("-inf"))
    # The chunk's max m and sum s of exp(x - m); an all -inf chunk subtracts 0 instead (s = 0).
    # m is NaN only if some x is: poisoning x then changes nothing.
    m = tl.maximum(tl.max(x0.to(tl.float32), axis=0), tl.max(x1.to(tl.float32), axis=0))
    base = tl.where(m == float("-inf"), 0.0, m)
    s = _exp_sum(x0, m != m, base) + _exp_sum(x1, m != m, base)
    words = words_ptr + row.to(tl.int64) * 2 * n_chunks
    publish_chunk(words, chunk, n_chunks, m, s, epoch)
    if RELOAD:
        x0 = None
        x1 = None
    ms, ss, valid, arrived = gather_chunks(words, n_chunks, epoch, MAX_CHUNKS)
    ms = tl.where(valid, ms, float("-inf"))
    row_max = tl.max(ms, axis=0)
    empty = row_max == float("-inf")  # fully masked: NaN, like torch
    row_max = tl.where(empty, 0.0, row_max)
    # Rescale every chunk's sum to the row's max. exp(m - row_max) <= 1: no overflow, and an
    # empty chunk (m = -inf) adds 0.
    row_sum = tl.sum(tl.where(ms == float("-inf"), 0.0, ss * tl.exp(ms - row_max)), axis=0)
    bad = empty | ~arrived
    inv_sum = tl.where(bad, float("nan"), 1.0 / tl.where(empty, 1.0, row_sum))
    y_row = y_ptr + row.to(tl.int64) * stride_ym
    first = chunk * BLOCK_N
    _normalise(x0, x_row, y_row, first, n_cols, row_max, inv_sum, bad, HALF)
    _normalise(x1, x_row, y_row, first + HALF, n_cols, row_max, inv_sum, bad, HALF)


# --- wide rows looped in one program (softmax_persistent) ---------------------------------

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


# The kernels by path, for tools that compile or inspect them (bench/regcount.py, the sweeps'
# register reports).
KERNELS = {"single": _softmax_kernel, "persistent": _softmax_persistent_kernel,
           "strided": _softmax_strided_kernel, "split": _softmax_split_kernel,
           "looped": _softmax_looped_kernel}


def softmax_config(n_rows: int, n_cols: int, dtype: torch.dtype, persistent: bool) -> dict:
    """Launch parameters. `BLOCK_N >= n_cols`: single pass; else SPLIT=True splits each row over
    cdiv(n_cols, BLOCK_N) programs, SPLIT=False loops over it in one program (two passes).

    What sets the speed of every path is how many bytes an SM has in flight: registers bound the
    programs per SM, and a program holds its tile. Single pass: 2048-element tiles over 4 warps
    for rows up to 1K wide (1-row tiles beat 8 rows on 8 warps), ~8192-element tiles over 8 warps
    above, 16 warps at 16K columns (2 programs per SM); no eviction hint (faster than
    evict_first at every width).
    Persistent (softmax_persistent): tiles are tickets and a program holds two (the next one's
    load in flight). Rows up to 1K wide, 16-bit dtypes: 8 KB tiles over 4 warps, 8 programs per
    SM. fp32 1K is torch's best case: 16 KB tiles (4 rows) over 2 warps, 4 programs per SM, the
    launch that came out ahead of torch (the former 8 KB tiles over 4 warps were level with
    it, inconclusive in the perf suite). The ticketed loop tops out a little below the one-tile
    programs of softmax at this width.
    4K: one row on 8 warps, 4 per SM.
    16K fp32: 32 warps, one program per SM (faster than the strided kernel).
    16K 16-bit rows are half the bytes for the same registers, and the ticketed kernel fell far
    behind there: they take the strided kernel (NUM_STAGES=2: the next row is copied into shared
    memory while this one is normalised), 16 warps, 2 programs per SM, evict_first.
    Wide rows, split: 4096-column chunks over 4 warps. Their GB/s follows the bytes an SM holds,
    so the chunk is held as loaded (reconvert) rather than as float32 exponentials across the
    exchange, which for 16-bit chunks takes fewer registers and so fits more programs per SM;
    fp32 chunks run faster capped at 56 registers (maxnreg; no spill), which fits one more
    program per SM. The measurements (sweeps, cold L2): docs/kernels.md. Under the interpreter,
    which runs programs one at a time, a chunk is the whole row: a program cannot wait for one
    that runs after it.
    softmax_persistent's rows wider than SINGLE_PASS_MAX_COLS take softmax's split rows too (no
    persistent grid: a row's chunks exchange their statistics). Its looped path (one program per
    row, two passes; config SPLIT=False, or BLOCK_N below the row) stayed far below the copy
    ceiling at 64K 16-bit columns, for the loop's few bytes in flight per SM: the split rows beat
    it however it was pipelined (measured in docs/kernels.md).
    """
    block = triton.next_power_of_2(max(n_cols, 1))
    base = {"EVICT": False, "SPLIT": False, "RELOAD": False, "NUM_STAGES": 1, "maxnreg": None}
    if block <= SINGLE_PASS_MAX_COLS:
        if persistent and block >= 16384 and dtype != torch.float32:
            return {**base, "BLOCK_N": block, "ROWS": 1, "num_warps": 16, "EVICT": True,
                    "NUM_STAGES": 2, "programs_per_sm": 2}
        if persistent and block <= 1024:
            fp32 = dtype == torch.float32
            tile_bytes = 16384 if fp32 else 8192
            rows = max(1, min(tile_bytes // dtype.itemsize // block,
                              triton.next_power_of_2(max(n_rows, 1))))
            return {**base, "BLOCK_N": block, "ROWS": rows, "num_warps": 2 if fp32 else 4,
                    "programs_per_sm": 4 if fp32 else 8}
        tile = 2048 if block <= 1024 or persistent else 8192
        rows = max(1, min(tile // block, triton.next_power_of_2(max(n_rows, 1))))
        tile = rows * block
        num_warps = 4 if tile <= 2048 else 8 if tile <= 8192 else 32 if persistent else 16
        return {**base, "BLOCK_N": block, "ROWS": rows, "num_warps": num_warps,
                "programs_per_sm": max(1, 32 // num_warps)}
    return {**base, "BLOCK_N": block if interpreting() else 4096, "ROWS": 1, "num_warps": 4,
            "SPLIT": True, "programs_per_sm": None}


def softmax_space(n_rows: int, n_cols: int, dtype: torch.dtype, persistent: bool) -> list[dict]:
    """The launch configs a GPU chooses among at first use (reference_kernels/_tuning.py): the
    heuristic of softmax_config first, then what won elsewhere. Single-pass tiles hold 8 to 32
    values per thread; which suits a GPU depends on how many bytes each SM must keep in flight
    (its bandwidth over its SM count) against what its registers hold. A GPU of more bandwidth
    per SM preferred smaller tiles where one of less preferred larger (float32 1K one row on 4
    warps over the heuristic's two rows; 4K one row on 16 warps; measured in docs/kernels.md).
    Split rows (64K): the held chunk's bytes per SM set the speed (fp32 4096-column chunks on 4
    warps: 9 programs x 16 KB; 16-bit 8192-column chunks capped at 80 registers: 6 x 16 KB,
    against 10 x 8 KB for 4096 columns)."""
    base = softmax_config(n_rows, n_cols, dtype, persistent)
    block = base["BLOCK_N"]
    if base["SPLIT"]:
        if dtype == torch.float32:
            return _tuning.space(base, {"BLOCK_N": 2048, "num_warps": 2})
        return _tuning.space(base, {"BLOCK_N": 8192, "num_warps": 4, "maxnreg": 80},
                             {"BLOCK_N": 8192, "num_warps": 4, "maxnreg": 72},
                             {"BLOCK_N": 8192, "num_warps": 8})
    if persistent:
        if block <= 1024 and base["NUM_STAGES"] == 1:
            return _tuning.space(base,
                                 {"ROWS": tile_rows(2048, block, n_rows), "num_warps": 2,
                                  "programs_per_sm": 8},
                                 {"ROWS": tile_rows(2048, block, n_rows), "num_warps": 2,
                                  "programs_per_sm": 16},
                                 {"ROWS": tile_rows(4096, block, n_rows), "num_warps": 4,
                                  "programs_per_sm": 8},
                                 # A grid-stride loop pipelined through shared memory instead
                                 # of tickets and a second tile in registers.
                                 {"ROWS": tile_rows(4096, block, n_rows), "num_warps": 4,
                                  "programs_per_sm": 4, "NUM_STAGES": 3})
        return [base]
    if block <= 1024:
        return _tuning.space(base, {"ROWS": tile_rows(1024, block, n_rows), "num_warps": 4},
                             {"ROWS": tile_rows(4096, block, n_rows), "num_warps": 8})
    if block <= 4096:
        # Two rows on the warps of one: 16 values per thread where the heuristic's two rows on
        # 8 warps hold 32, so more programs and more bytes in flight per SM (what a GPU of high
        # bandwidth per SM asks of 16-bit 4K rows; docs/kernels.md).
        return _tuning.space(base, {"ROWS": 1, "num_warps": min(32, block // 256)},
                             {"ROWS": tile_rows(2 * block, block, n_rows),
                              "num_warps": min(32, block // 256)},
                             {"ROWS": tile_rows(2 * block, block, n_rows),
                              "num_warps": min(32, block // 128)})
    return _tuning.space(base, {"ROWS": 1, "num_warps": 32})


def _as_rows(x: torch.Tensor, out: torch.Tensor | None, where: str):
    """Check x and out; return 2-D row views of both (out allocated when None) and out."""
    require_tensor(where, "x", x)
    require_dtype(where, x.dtype, DTYPES)
    if x.dim() == 0:
        raise ValueError(f"{where}: x must have at least one dimension")
    out = output(where, "out", out, x.shape, x.dtype, x.device, inputs={"x": x},
                 same_place_ok=True)
    return row_view("x", x, where), row_view("out", out, where), out


def _launch(x2: torch.Tensor, y2: torch.Tensor, cfg: dict, persistent: bool, where: str) -> None:
    n_rows, n_cols = x2.shape
    if n_rows == 0 or n_cols == 0:
        return
    args = (n_rows, n_cols, x2.stride(0), y2.stride(0))
    if cfg["BLOCK_N"] >= n_cols and not cfg["SPLIT"]:
        n_tiles = triton.cdiv(n_rows, cfg["ROWS"])
        meta = {"BLOCK_N": cfg["BLOCK_N"], "ROWS": cfg["ROWS"], "EVICT": cfg["EVICT"],
                "num_warps": cfg["num_warps"]}
        if persistent:
            grid = (min(n_tiles, (cfg["programs_per_sm"] or 1) * sm_count(x2.device)),)
            if cfg["NUM_STAGES"] > 1:
                _softmax_strided_kernel[grid](x2, y2, *args, NUM_STAGES=cfg["NUM_STAGES"], **meta)
            else:
                _softmax_persistent_kernel[grid](x2, y2, sync_buffer(x2.device), *args, **meta)
        else:
            _softmax_kernel[(n_tiles,)](x2, y2, *args, **meta)
    elif cfg["SPLIT"]:
        if cfg["BLOCK_N"] < 2:
            raise ValueError(f"{where}: config BLOCK_N={cfg['BLOCK_N']} with SPLIT=True: a split "
                             "chunk is handled in two halves, so BLOCK_N must be >= 2")
        n_chunks = split_chunks(n_cols, cfg["BLOCK_N"], where)
        sync = sync_buffer(x2.device, n_rows * 2 * n_chunks)
        _softmax_split_kernel[(n_rows * n_chunks,)](
            x2, y2, sync, sync[SYNC_HEADER:], *args, BLOCK_N=cfg["BLOCK_N"],
            MAX_CHUNKS=triton.next_power_of_2(n_chunks), RELOAD=cfg["RELOAD"],
            num_warps=cfg["num_warps"], **register_cap(cfg))
    else:
        # Capped on every grid, persistent or not, for L2's sake: see softmax_config.
        grid = (looped_grid(n_rows, n_cols * x2.element_size(), x2.device,
                            cfg["programs_per_sm"]),)
        _softmax_looped_kernel[grid](x2, y2, *args, BLOCK_N=cfg["BLOCK_N"],
                                     NUM_STAGES=cfg["NUM_STAGES"], EVICT=cfg["EVICT"],
                                     num_warps=cfg["num_warps"])


# The launch choices of each launcher on this process's GPUs (reports read best_config).
SOFTMAX_TUNER = _tuning.LaunchTuner("softmax")
SOFTMAX_PERSISTENT_TUNER = _tuning.LaunchTuner("softmax_persistent")


def _choose(x2: torch.Tensor, y2: torch.Tensor, config: dict | None, persistent: bool,
            where: str) -> dict:
    """The launch config: the caller's overrides of the heuristic, or the device's choice in
    softmax_space (timed at first use on a large problem)."""
    n_rows, n_cols = x2.shape
    if config:
        return with_overrides(softmax_config(n_rows, n_cols, x2.dtype, persistent), config,
                              where, powers_of_two=("BLOCK_N", "ROWS"))
    tuner = SOFTMAX_PERSISTENT_TUNER if persistent else SOFTMAX_TUNER
    key = (triton.next_power_of_2(max(n_cols, 1)), x2.element_size())
    return tuner.choose(x2.device, key, softmax_space(n_rows, n_cols, x2.dtype, persistent),
                        lambda c: _launch(x2, y2, c, persistent, where), softmax_bytes(x2),
                        restore=(y2,))


def softmax(x: torch.Tensor, *, out: torch.Tensor | None = None,
            config: dict | None = None) -> torch.Tensor:
    """softmax(x, dim=-1): one tile of rows per program, or one chunk of a wide row.

    Without config, the launch config is this GPU's choice in softmax_space, timed at the
    first call on a large problem (reference_kernels/_tuning.py).
    config: overrides of softmax_config's launch parameters (BLOCK_N, ROWS, num_warps, EVICT,
    SPLIT, RELOAD, NUM_STAGES, programs_per_sm), for tuning sweeps; BLOCK_N below the row width
    splits rows (SPLIT=True; RELOAD=True reads each chunk again after the exchange instead of
    holding it) or loops over them (SPLIT=False; NUM_STAGES and programs_per_sm apply).
    """
    x2, y2, out = _as_rows(x, out, "softmax")
    cfg = _choose(x2, y2, config, False, "softmax")
    _launch(x2, y2, cfg, False, "softmax")
    return out


def softmax_persistent(x: torch.Tensor, *, out: torch.Tensor | None = None,
                       config: dict | None = None) -> torch.Tensor:
    """softmax(x, dim=-1) on a persistent grid of programs_per_sm programs per SM.

    Tiles of rows come from a launch-wide counter (NUM_STAGES=1), or with NUM_STAGES > 1 from a
    grid-stride loop pipelined through shared memory; rows wider than SINGLE_PASS_MAX_COLS are
    split over programs as softmax splits them (faster than one looping program per row: see
    softmax_config), or with config SPLIT=False loop in one program each (config as for softmax).
    """
    x2, y2, out = _as_rows(x, out, "softmax_persistent")
    cfg = _choose(x2, y2, config, True, "softmax_persistent")
    _launch(x2, y2, cfg, True, "softmax_persistent")
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
