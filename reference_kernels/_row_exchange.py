"""Rows split over programs (softmax, layernorm): each program takes a chunk of a row by ticket,
publishes two float32 statistics of its chunk, and reads every chunk's once all are published.
Also `reconvert`, which keeps a chunk held across the exchange in its loaded dtype."""

from __future__ import annotations

import triton
import triton.language as tl

from ._tickets import take_ticket

# How long a program of a split row polls for the other chunks' statistics before it gives up and
# writes NaN: ~50 ms at an L2 round trip (<1 us) per poll, where a row's programs normally all
# publish within microseconds of each other. Only a bug gets there (a split launch never waits on
# a program that has not started: see take_row_chunk), and then a broken launch costs about a
# second instead of hanging the GPU, and its NaNs fail every check.
MAX_POLLS = tl.constexpr(1 << 16)


@triton.jit
def reconvert(
    x,  # a tensor as loaded, in its float dtype (float32, float16 or bfloat16)
    poison,  # scalar or like x: True gives NaN
):
    """x in float32, NaN where poison, as a conversion of its own.

    A split program holds its chunk as loaded and converts it once per use. Two plain
    x.to(tl.float32) of one x are one conversion to the compiler, which then keeps the float32
    copy live from the first use to the last: twice the registers of a 16-bit chunk, and fewer
    programs per SM. An integer OR with a value it cannot know (0 unless poison) makes each
    conversion its own. sm_90, Triton 3.6: a 4096-column fp16 chunk on 4 warps takes 48
    registers per thread this way (10 programs per SM), 64 with plain conversions (8)."""
    if x.dtype == tl.float32:  # nothing to convert
        y = tl.where(poison, float("nan"), x)
    else:
        # All ones is a NaN in float16 and bfloat16.
        bits = x.to(tl.int16, bitcast=True) | tl.where(poison, -1, 0).to(tl.int16)
        y = bits.to(x.dtype, bitcast=True).to(tl.float32)
    return y


@triton.jit
def take_row_chunk(
    sync_ptr,  # *in/out* int64 launch-wide counter word (_tickets.sync_buffer)
    n_rows,  # rows of the launch
    n_chunks,  # programs per row
):
    """(row, chunk, epoch) of this program. Rows and chunks follow tickets, i.e. the order in
    which programs start, not program ids: every program that a started program waits for has
    started too (or will, as soon as a slot frees), so a row's chunks never wait on a program
    that cannot be scheduled, whatever order the hardware launches programs in."""
    ticket, epoch = take_ticket(sync_ptr, n_rows * n_chunks)
    return ticket // n_chunks, ticket % n_chunks, epoch


@triton.jit
def _tagged(value, epoch):
    # One 64-bit word: the launch's epoch above the float's bits. A word is written whole, so a
    # reader that sees this launch's epoch sees this launch's value: no fence is needed.
    bits = tl.cast(value, tl.int32, bitcast=True).to(tl.int64) & 0xFFFFFFFF
    return (epoch.to(tl.int64) << 32) | bits


@triton.jit
def publish_chunk(
    words_ptr,  # *out* int64 2 x n_chunks words of this row
    chunk,  # this program's chunk of the row
    n_chunks,  # chunks per row
    a,  # first float32 statistic of the chunk
    b,  # second float32 statistic of the chunk
    epoch,  # this launch's tag (take_row_chunk)
):
    # Atomic exchanges rather than plain stores: performed at L2, where the other programs'
    # volatile loads look, with no write sitting in a store queue.
    tl.atomic_xchg(words_ptr + chunk, _tagged(a, epoch), sem="relaxed")
    tl.atomic_xchg(words_ptr + n_chunks + chunk, _tagged(b, epoch), sem="relaxed")


@triton.jit
def gather_chunks(
    words_ptr,  # *in* int64 2 x n_chunks words of this row
    n_chunks,  # chunks per row
    epoch,  # this launch's tag
    MAX_CHUNKS: tl.constexpr,  # power of two >= n_chunks
):
    """Every chunk's (a, b) once all are published: two float32 vectors of MAX_CHUNKS, the mask
    of real chunks, and whether they all arrived (False only after MAX_POLLS polls)."""
    c = tl.arange(0, MAX_CHUNKS)
    valid = c < n_chunks
    # volatile: read from L2 every time, never from this SM's L1.
    wa = tl.load(words_ptr + c, mask=valid, other=0, volatile=True)
    wb = tl.load(words_ptr + n_chunks + c, mask=valid, other=0, volatile=True)
    ready = tl.sum(((wa >> 32 == epoch) & (wb >> 32 == epoch) & valid).to(tl.int32), axis=0)
    polls = 0
    while (ready < n_chunks) & (polls < MAX_POLLS):
        wa = tl.load(words_ptr + c, mask=valid, other=0, volatile=True)
        wb = tl.load(words_ptr + n_chunks + c, mask=valid, other=0, volatile=True)
        ready = tl.sum(((wa >> 32 == epoch) & (wb >> 32 == epoch) & valid).to(tl.int32), axis=0)
        polls += 1
    a = tl.cast((wa & 0xFFFFFFFF).to(tl.int32), tl.float32, bitcast=True)
    b = tl.cast((wb & 0xFFFFFFFF).to(tl.int32), tl.float32, bitcast=True)
    return a, b, valid, ready == n_chunks
