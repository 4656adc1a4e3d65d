"""Matrix multiply, C = activation(A @ B + bias), fp16 and bf16 in, fp32 accumulation, out in the
operands' dtype.

One tile per program or persistent, with pointer loads or (on Hopper) TMA tensor descriptors:

- `_matmul_kernel` loads through pointers with masks, so any M, N, K and any strides work (B
  row-major, or the .T view of an (N, K) tensor).
- `_matmul_tma_kernel` loads and stores through host-side tensor descriptors
  (`triton.tools.tensor_descriptor.TensorDescriptor`, Triton >= 3.4): the TMA engine copies whole
  tiles into shared memory and fills what lies past an edge with zeros, so the kernel has no masks.
  It needs 16-byte aligned base pointers and row strides and a unit inner stride.

Both walk their tiles in a loop `for tile in range(program_id, n_tiles, n_programs)`: launched with
one program per tile that is the classic kernel; launched on one program per SM it is persistent.
Tiles are visited in grouped order (GROUP_M rows of tiles at a time) so that programs running at
the same time share A and B tiles through L2.

For small M (decode-like GEMMs that stream B from DRAM) the TMA kernel can also split each tile's
reduction over SPLIT_K programs (variant "tma_splitk"): float32 partials in a workspace, summed
in split order, with the bias and activation applied once to the sum, by `_splitk_reduce_kernel`
or by the tile's last program (FIXUP). Deterministic either way.

`matmul(a, b)` picks the variant (TMA where the operands allow it; persistent for large M; for
M <= SMALL_M split-K where the wave model says the unsplit tiles leave SMs idle, else one tile per
program) and the tile configuration (autotuned per (M, N, K); for split-K, the tile and split
timed among a few launches per shape class on the GPU it runs on); `variant=` and `config=`
override both.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from pytest_triton import autotune_configs, interpreting

from . import _tuning
from ._checks import config_values, output, require_dtype, require_tensor
from ._device import sm_count, smem_per_block
from ._gemm import TensorDescriptor, grouped_tile, tma_available

DTYPES = (torch.float16, torch.bfloat16)
ACTIVATIONS = (None, "relu", "gelu")
VARIANTS = ("pointer", "pointer_persistent", "tma", "tma_persistent", "tma_splitk")

# The variants `matmul` uses when the operands allow TMA (Hopper or newer, aligned): persistent
# TMA for M > SMALL_M (faster than one tile per program at large square GEMMs); for M <= SMALL_M,
# whose GEMMs stream B from DRAM, one tile per program ("tma"): two 112 KB programs share each SM
# and keep twice the bytes in flight that one persistent program does (measured in
# docs/kernels.md) - unless the unsplit tiles leave SMs idle and K is long enough to split
# (_splitk_pays): then SPLITK_VARIANT, each tile's reduction split over programs (see "split-K"
# below). And when TMA cannot take the operands, pointer loads.
DEFAULT_VARIANT = "tma_persistent"
SMALL_M_VARIANT = "tma"
SPLITK_VARIANT = "tma_splitk"
FALLBACK_VARIANT = "pointer"


def _matmul_configs() -> list[triton.Config]:
    """Tile shapes in two groups; `_prune_configs` keeps one group per shape.

    Large M (> 256): 128 x 256 x 64, 3 stages, 8 warps is the wgmma-friendly Hopper tile (two
    warpgroups of 64 x 256 each; 3 stages x 48 KB of A and B tiles plus a 64 KB epilogue tile fit
    in the 227 KB of shared memory). 128 x 128 x 64 with 4 stages has half the registers per
    tile, and 256 x 128 the transposed aspect ratio, for shapes where N is the short side.
    Small M (<= 256, decode-like): a 128-row tile leaves most of 132 SMs idle (M=128, N=4096 gives
    32 tiles of 128 x 128), so 64-row tiles with one warpgroup double or quadruple the tile count.
    These shapes stream B from DRAM and their speed is the bytes each SM keeps in flight: 3 stages
    ahead of 16 KB (64 x 64 x 64) are not enough to cover DRAM latency at 3 TB/s over 128 tiles,
    64 x 64 x 128 tiles double them, and 64 x 128 x 64 suits N=14336, whose 224 tiles already
    fill the SMs. 128 x 128 x 64 in 5 stages (160 KB of A and B tiles in flight, one program per
    SM) is the large group's pick where 128 x 256 tiles leave a ragged last wave (M=1024,
    N=14336, K=4096: 448 tiles of 128 x 256 on 132 SMs), while 128 x 256 stays the best at
    N=4096. Measured in docs/kernels.md.
    """
    big = [(128, 256, 64, 3, 8), (128, 128, 64, 4, 8), (256, 128, 64, 3, 8),
           (128, 128, 64, 5, 8)]
    small = [(64, 64, 128, 4, 4), (64, 128, 64, 4, 4), (64, 64, 64, 4, 4)]
    return [
        triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": 8},
                      num_stages=stages, num_warps=warps, pre_hook=_set_tma_block_shapes)
        for bm, bn, bk, stages, warps in big + small
    ]


# M at or below which the 64-row tiles are tried instead of the big ones (see _matmul_configs).
SMALL_M = 256


# GEMMs of fewer flops take their group's first config untimed: they run for microseconds, and
# compiling and timing the others (0.5-2 s of compiles per config and dtype) would cost more than
# any config could save them (the perf tests' GEMMs have 4 GFLOP or more).
TUNE_MIN_FLOPS = 2**30


def _prune_configs(configs, named_args, **kwargs):
    """Keep the big-tile group for M > SMALL_M, the 64-row group otherwise (never empty); only
    its first config under TUNE_MIN_FLOPS."""
    M, N, K = named_args["M"], named_args["N"], named_args["K"]
    small = M <= SMALL_M
    kept = [c for c in configs if (c.kwargs["BLOCK_M"] <= 64) == small] or configs[:1]
    return kept[:1] if 2 * M * N * K < TUNE_MIN_FLOPS else kept


def _set_tma_block_shapes(nargs: dict) -> None:
    """Autotuner pre-hook: a host-side descriptor's block shape is the tile of the config run."""
    if "a_desc" not in nargs:  # the pointer kernel
        return
    bm, bn, bk = nargs["BLOCK_M"], nargs["BLOCK_N"], nargs["BLOCK_K"]
    nargs["a_desc"].block_shape = [bm, bk]
    nargs["b_desc"].block_shape = [bn, bk] if nargs["B_TRANS"] else [bk, bn]
    nargs["c_desc"].block_shape = [bm, bn]


# Under the interpreter: small tiles, so that the tests' odd sizes cross tile edges in M, N and K,
# and a GROUP_M of 2 so that the grouped order differs from row-major order.
INTERPRETER_CONFIG = triton.Config({"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32, "GROUP_M": 2},
                                   num_stages=1, num_warps=4, pre_hook=_set_tma_block_shapes)


@triton.jit
def _epilogue(
    acc,  # BLOCK_M x BLOCK_N float32 accumulator
    bias_ptr,  # *in* N, read when HAS_BIAS
    offs_n,  # BLOCK_N column indices of the tile
    N,  # columns of C
    HAS_BIAS: tl.constexpr,
    ACTIVATION: tl.constexpr,  # "", "relu" or "gelu"
):
    # Applied to the fp32 accumulator before the one rounding to the output dtype: fusing here
    # saves a full read and write of C per elementwise op (vertical fusion).
    if HAS_BIAS:
        bias = tl.load(bias_ptr + offs_n, mask=offs_n < N, other=0.0)
        acc = acc + bias.to(tl.float32)[None, :]
    if ACTIVATION == "relu":
        acc = tl.maximum(acc, 0.0)
    elif ACTIVATION == "gelu":
        # The exact (erf) GELU, torch's default, not the tanh approximation.
        acc = 0.5 * acc * (1.0 + tl.erf(acc * 0.7071067811865476))
    return acc


@triton.jit
def _matmul_kernel(
    a_ptr,  # *in* M x K, strides (stride_am, stride_ak)
    b_ptr,  # *in* K x N, strides (stride_bk, stride_bn): row-major, or an (N, K) tensor's .T
    c_ptr,  # *out* M x N, strides (stride_cm, stride_cn)
    bias_ptr,  # *in* N (any dtype), or any pointer when HAS_BIAS is False
    M,  # rows of A and C
    N,  # columns of B and C
    K,  # the reduction length
    stride_am, stride_ak,
    stride_bk, stride_bn,
    stride_cm, stride_cn,
    HAS_BIAS: tl.constexpr,
    ACTIVATION: tl.constexpr,  # "", "relu" or "gelu"
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
):
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    num_tiles = num_pid_m * num_pid_n
    offs_k = tl.arange(0, BLOCK_K)
    for tile_id in tl.range(tl.program_id(0), num_tiles, tl.num_programs(0)):
        pid_m, pid_n = grouped_tile(tile_id, num_pid_m, num_pid_n, GROUP_M)
        offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        m_ok = offs_m < M
        n_ok = offs_n < N
        # Row and column offsets in int64: operands of 2**31 elements or more stay correct.
        a_ptrs = a_ptr + offs_m[:, None].to(tl.int64) * stride_am + offs_k[None, :] * stride_ak
        b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :].to(tl.int64) * stride_bn
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k0 in range(0, K, BLOCK_K):
            # Masks, not index wrapping, on the edges: they keep the loads' contiguity visible
            # to the compiler, which then issues 16-byte vector loads.
            k_ok = offs_k < K - k0
            a = tl.load(a_ptrs, mask=m_ok[:, None] & k_ok[None, :], other=0.0)
            b = tl.load(b_ptrs, mask=k_ok[:, None] & n_ok[None, :], other=0.0)
            acc = tl.dot(a, b, acc)
            a_ptrs += BLOCK_K * stride_ak
            b_ptrs += BLOCK_K * stride_bk
        acc = _epilogue(acc, bias_ptr, offs_n, N, HAS_BIAS, ACTIVATION)
        c_ptrs = c_ptr + offs_m[:, None].to(tl.int64) * stride_cm + offs_n[None, :] * stride_cn
        tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=m_ok[:, None] & n_ok[None, :])


@triton.jit
def _matmul_tma_kernel(
    a_desc,  # descriptor of A, M x K row-major, block [BLOCK_M, BLOCK_K]
    b_desc,  # descriptor of B, K x N row-major, block [BLOCK_K, BLOCK_N]; when B_TRANS, of the
             # (N, K) row-major tensor whose .T is B, block [BLOCK_N, BLOCK_K]
    c_desc,  # descriptor of C, M x N row-major, block [BLOCK_M, BLOCK_N]
    ws_ptr,  # *out* split_k x M x N float32 partial sums when SPLIT, else any pointer
    counts_ptr,  # *inout* int32 per tile, zeros, when FIXUP (left zeros), else any pointer
    bias_ptr,  # *in* N (any dtype), or any pointer when HAS_BIAS is False
    M,  # rows of A and C
    N,  # columns of B and C
    K,  # the reduction length
    split_k,  # programs sharing one tile's reduction (program_id(1)); 1 unless SPLIT
    OPERAND_DTYPE: tl.constexpr,  # the operands' dtype name: descriptors carry no dtype the
                                  # autotuner can key on, so fp16 and bf16 would share a config
    B_TRANS: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    ACTIVATION: tl.constexpr,  # "", "relu" or "gelu"
    SPLIT: tl.constexpr,  # split_k > 1: reduce one K-slice, write float32 partials to ws_ptr
    FIXUP: tl.constexpr,  # with SPLIT: the last program of a tile sums its partials (no reduce
                          # kernel)
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
):
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    num_tiles = num_pid_m * num_pid_n
    if SPLIT:
        # Whole BLOCK_K steps per slice, the last slice shorter (or empty: its partial is zeros);
        # the descriptor's zero padding covers a K that no step divides.
        per_split = tl.cdiv(tl.cdiv(K, BLOCK_K), split_k) * BLOCK_K
        k_first = tl.program_id(1) * per_split
        k_last = tl.minimum(k_first + per_split, K)
    else:
        k_first = 0
        k_last = K
    for tile_id in tl.range(tl.program_id(0), num_tiles, tl.num_programs(0)):
        pid_m, pid_n = grouped_tile(tile_id, num_pid_m, num_pid_n, GROUP_M)
        off_m = pid_m * BLOCK_M
        off_n = pid_n * BLOCK_N
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k0 in range(k_first, k_last, BLOCK_K):
            a = a_desc.load([off_m, k0])
            if B_TRANS:
                b = tl.trans(b_desc.load([off_n, k0]))
            else:
                b = b_desc.load([k0, off_n])
            acc = tl.dot(a, b, acc)
        offs_n = off_n + tl.arange(0, BLOCK_N)
        if SPLIT:
            # Partial sums stay float32 (and mostly in L2) until _splitk_reduce_kernel or the
            # fixup below sums them and applies the epilogue once to the sum.
            offs_m = off_m + tl.arange(0, BLOCK_M)
            rows = offs_m[:, None].to(tl.int64)  # int64: split x M x N may pass 2**31 elements
            ok = (offs_m < M)[:, None] & (offs_n < N)[None, :]
            tl.store(ws_ptr + (rows + tl.program_id(1) * M) * N + offs_n[None, :], acc, mask=ok)
            if FIXUP:
                # The tile's programs count themselves in once their partial is stored (the
                # barrier: every thread's stores before the one atomic; acq_rel at GPU scope:
                # they are visible to whoever counts in after). The last to arrive sums all the
                # partials in split order, as the reduce kernel would (the same bits whichever
                # program is last), through L2 (.cg: no stale L1 line), and resets the count.
                tl.debug_barrier()
                arrived = tl.atomic_add(counts_ptr + tile_id, 1, sem="acq_rel", scope="gpu")
                if arrived == split_k - 1:
                    ws = ws_ptr + rows * N + offs_n[None, :]
                    acc = tl.load(ws, mask=ok, other=0.0, cache_modifier=".cg")
                    for split in range(1, split_k):
                        acc += tl.load(ws_ptr + (rows + split * M) * N + offs_n[None, :],
                                       mask=ok, other=0.0, cache_modifier=".cg")
                    acc = _epilogue(acc, bias_ptr, offs_n, N, HAS_BIAS, ACTIVATION)
                    c_desc.store([off_m, off_n], acc.to(c_desc.dtype))
                    tl.atomic_xchg(counts_ptr + tile_id, 0, sem="relaxed", scope="gpu")
        else:
            acc = _epilogue(acc, bias_ptr, offs_n, N, HAS_BIAS, ACTIVATION)
            # The TMA store clips the rows and columns past M and N.
            c_desc.store([off_m, off_n], acc.to(c_desc.dtype))


@triton.jit
def _splitk_reduce_kernel(
    ws_ptr,  # *in* SPLIT_K x M x N float32 partial sums, contiguous
    bias_ptr,  # *in* N (any dtype), or any pointer when HAS_BIAS is False
    c_ptr,  # *out* M x N, strides (stride_cm, stride_cn)
    M,  # rows of C
    N,  # columns of C
    stride_cm, stride_cn,
    HAS_BIAS: tl.constexpr,
    ACTIVATION: tl.constexpr,  # "", "relu" or "gelu"
    SPLIT_K: tl.constexpr,  # partials to sum: a constexpr, so that all their loads issue at once
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    # Sums the partials in split order (deterministic: the same bits every run), then the
    # epilogue on the fp32 sum and the one rounding to C's dtype, as the unsplit kernel does.
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    ok = (offs_m < M)[:, None] & (offs_n < N)[None, :]
    rows = offs_m[:, None].to(tl.int64)  # int64: split x M x N may pass 2**31 elements
    acc = tl.load(ws_ptr + rows * N + offs_n[None, :], mask=ok, other=0.0)
    for split in tl.static_range(1, SPLIT_K):
        acc += tl.load(ws_ptr + (rows + split * M) * N + offs_n[None, :], mask=ok, other=0.0)
    acc = _epilogue(acc, bias_ptr, offs_n, N, HAS_BIAS, ACTIVATION)
    c_ptrs = c_ptr + offs_m[:, None].to(tl.int64) * stride_cm + offs_n[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=ok)


# --- split-K (variant "tma_splitk") -------------------------------------------------------------
#
# A small-M GEMM reads B (K x N, 32-112 MB in the LLM shapes) once from DRAM; its speed is the
# bytes each SM keeps in flight. At M=128, N=4096 the 64 x 64 tiles are 128 programs, one per SM
# on 132 SMs, and a deeper pipeline per program is capped by shared memory. Splitting each tile's
# reduction over SPLIT_K programs (program_id(1)) multiplies the programs without shrinking the
# tiles: more SMs busy, or two programs per SM, each streaming its own K-slice of B. Each writes
# a float32 partial tile to a split x M x N workspace (M=128, N=4096: 2 MB per split, which stays
# in the 50 MB L2); _splitk_reduce_kernel (or, FIXUP, the tile's last program) sums the partials
# in split order, applies bias and activation once and rounds once (deterministic, unlike
# float32 atomics). Its cost, a read of split x M x N x 4 bytes and a second launch (or a
# zeroed count per tile), is what the split must win back, so the choice is timed on the GPU it
# runs on (reference_kernels/_tuning.py) among a few candidates, once per shape class.
#
# The rule (_splitk_pays), from the device's SM count and shared memory, the tile counts and K:
# split where the unsplit path's finest grid (its 64 x 64 tiles) gives fewer programs than the
# GPU has SMs, and the wave model (_wave_split) finds a split that keeps one wave of resident
# programs, each over at least twice its pipeline's depth of K steps. So M=128, N=4096 (128 tiles
# of 64 x 64 for 132 SMs) splits, at K=4096 and K=14336 alike, and M=128, N=14336 (448 tiles)
# does not: there every split lost to the unsplit tiles (measured in docs/kernels.md).
# Summing the partials in the tile's last program (FIXUP) lost to the reduce kernel on every
# split launch measured, so SPLITK_FIXUP stays False.

# Tiles of the split-K path: (BLOCK_M, BLOCK_N, BLOCK_K, num_stages, num_warps), the sweep's
# best first (the untimed pick of every class whose M allows it, at its wave-model split):
# 128 x 64 x 128 (208 KB: one per SM) reads each B tile once for M=128 (64-row tiles read it
# twice) in 16 KB steps; 128 x 64 x 64 in 6 stages the same B bytes in flight in half-size steps;
# 64 x 128 x 64 (112 KB, two per SM) the tile for M <= 64 and the best on some GPUs at long K.
# The other tiles swept were never the best (docs/kernels.md lists them).
SPLITK_TILES = ((128, 64, 128, 4, 4), (128, 64, 64, 6, 4), (64, 128, 64, 4, 4))
# Splits tried. A split keeps at least twice its pipeline's depth (num_stages) of BLOCK_K steps:
# fewer leave the pipeline's prologue and the partial's store a large share of each program.
SPLITS = (2, 4, 8)
# Shared memory CUDA reserves per resident program besides what the program asks for (1 KB on
# sm_80 and newer: cudaDevAttrReservedSharedMemoryPerBlock).
SMEM_RESERVED_PER_BLOCK = 1024

# Under the interpreter: INTERPRETER_CONFIG's tiles split 2 first (the default of the small
# TMA tests whose 64 x 64 tiles leave the interpreter's 3 stand-in SMs idle: the workspace, the
# reduce, and K-slices that are empty at K <= 32), then an uneven split of 3 and the unsplit
# launch.
INTERPRETER_SPLITK_SPACE = [{**INTERPRETER_CONFIG.all_kwargs(), "SPLIT_K": split}
                            for split in (2, 3, 1)]


def _tile_smem(bm: int, bn: int, bk: int, stages: int) -> int:
    """Shared memory of one program: `stages` A and B tiles plus the epilogue's C tile, 2 bytes
    an element (64 x 64 x 128 in 4 stages: 136 KB; 64 x 128 x 64 in 4: 112 KB)."""
    return stages * (bm * bk + bk * bn) * 2 + bm * bn * 2


def _resident(bm: int, bn: int, bk: int, stages: int, smem_per_block: int) -> int:
    """Programs of this tile one SM holds at once, by shared memory (0: it does not fit)."""
    smem = _tile_smem(bm, bn, bk, stages)
    if smem > smem_per_block:
        return 0
    return (smem_per_block + SMEM_RESERVED_PER_BLOCK) // (smem + SMEM_RESERVED_PER_BLOCK)


def _wave_split(tiles: int, k_steps: int, slots: int, stages: int, waves: int = 1) -> int:
    """The largest split of SPLITS (or 1) whose tiles x split programs fit `waves` waves of the
    GPU's `slots` (SMs x programs resident per SM), each split keeping 2 x stages steps: every
    SM then streams B with all the programs it can hold (M=128, N=4096 on 132 SMs: 64 tiles of
    128 x 64, one per SM, split 2 into 128 programs)."""
    ok = [s for s in SPLITS if tiles * s <= waves * slots and k_steps >= 2 * stages * s]
    return max(ok, default=1)


def _splitk_cfg(bm, bn, bk, stages, warps, split) -> dict:
    return {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": 8, "SPLIT_K": split,
            "num_stages": stages, "num_warps": warps}


def _shape_class(M: int) -> int:
    """The rows the split-K path plans for: M rounded up to 64. Every M of one 64-row band has
    the same tile grids for every tile of SPLITK_TILES (64 and 128 rows), hence the same wave
    model and the same DRAM traffic of B, which these GEMMs are bound by: one timed choice
    serves them all (decode batches of 65-128 rows share one)."""
    return 64 * triton.cdiv(max(M, 1), 64)


def _splitk_plan(M: int, N: int, K: int, n_sms: int, smem_per_block: int, *,
                 every_split: bool = False, tiles=SPLITK_TILES) -> list[dict]:
    """The wave model's launches for an (M, N, K) GEMM on n_sms SMs of smem_per_block bytes of
    shared memory per program (dicts of meta-parameters, SPLIT_K, num_stages, num_warps): each
    tile that fits at its wave-model split, in the order of `tiles`, then each unsplit; tiles
    taller than M's shape class are left out (their MMA would be mostly padding). The first is
    the untimed pick. every_split: every split of SPLITS within two waves (for sweeps)."""
    rows = _shape_class(M)
    split, unsplit = [], []
    for bm, bn, bk, stages, warps in tiles:
        resident = _resident(bm, bn, bk, stages, smem_per_block)
        if bm > rows or not resident:
            continue
        n_tiles = triton.cdiv(rows, bm) * triton.cdiv(N, bn)
        steps = triton.cdiv(K, bk)
        slots = n_sms * resident
        if every_split:
            splits = [s for s in SPLITS if n_tiles * s <= 2 * slots and steps >= 2 * stages * s]
        else:
            splits = [_wave_split(n_tiles, steps, slots, stages)]
        split += [_splitk_cfg(bm, bn, bk, stages, warps, s) for s in splits if s > 1]
        unsplit.append(_splitk_cfg(bm, bn, bk, stages, warps, 1))
    return split + unsplit


def _unsplit_programs(M: int, N: int) -> int:
    """Programs of the unsplit small-M path's finest grid (its smallest tiles in
    _matmul_configs): the most SMs it can keep busy."""
    small = [c.kwargs for c in _matmul_configs() if c.kwargs["BLOCK_M"] <= 64]
    return max(triton.cdiv(M, c["BLOCK_M"]) * triton.cdiv(N, c["BLOCK_N"]) for c in small)


def _splitk_pays(M: int, N: int, K: int, n_sms: int, smem_per_block: int) -> bool:
    """Whether a small-M GEMM takes the split-K path by default: its unsplit tiles leave SMs
    idle (fewer programs than SMs) and the wave model splits some tile (K has the steps)."""
    if M > SMALL_M or _unsplit_programs(M, N) >= n_sms:
        return False
    plan = _splitk_plan(M, N, K, n_sms, smem_per_block)
    return bool(plan) and plan[0]["SPLIT_K"] > 1


def _splitk_space(M: int, N: int, K: int, device: torch.device) -> list[dict]:
    """The launches the split-K path times on `device` (the interpreter's small tiles there)."""
    if interpreting():
        return [dict(c) for c in INTERPRETER_SPLITK_SPACE]
    space = _splitk_plan(M, N, K, sm_count(device), smem_per_block(device))
    if not space:
        raise ValueError(f"matmul: no split-K tile fits in the {smem_per_block(device)} bytes of "
                         f"shared memory a program may use on {device}")
    return space


def matmul_splitk_space(M: int, N: int, K: int, device: torch.device, *,
                        every_split: bool = False, tiles=None) -> list[dict]:
    """The split-K launches (dicts for matmul(variant="tma_splitk", config=triton.Config(...)):
    meta-parameters, SPLIT_K, num_stages, num_warps) that an (M, N, K) GEMM on `device` times
    at first use, the untimed pick first; every_split: every split within two waves, for sweeps;
    tiles: (BLOCK_M, BLOCK_N, BLOCK_K, num_stages, num_warps) tuples instead of SPLITK_TILES.
    Under the interpreter, unless tiles are given: its small tiles' launches."""
    if tiles is None and (not every_split or interpreting()):
        return _splitk_space(M, N, K, device)
    return _splitk_plan(M, N, K, sm_count(device), smem_per_block(device),
                        every_split=every_split, tiles=SPLITK_TILES if tiles is None else tiles)


# The split-K launches chosen on this process's GPUs (reports read best_config).
SPLITK_TUNER = _tuning.LaunchTuner("matmul_splitk")

# How split partials are summed when a launch does not say (its FIXUP): False, by
# _splitk_reduce_kernel (a second launch, which reads split x M x N x 4 bytes: at M=128, N=4096
# split 2, 4 MB from L2, about a microsecond plus the launch gap of a CUDA graph); True, by the
# last of each tile's programs to finish (FIXUP in _matmul_tma_kernel: no second launch, a
# zeroed int32 count per tile instead). Both are deterministic; the reduce kernel won every
# measured split launch (see above).
SPLITK_FIXUP = False

# Elements per program of the reduce: 16 x 128 float32 per partial (8 KB), 4 warps; M=128,
# N=4096 gives 256 programs, two per SM.
REDUCE_BLOCK = (16, 128)


def _splitk_meta(config: dict, where: str) -> tuple[dict, int]:
    """(the TMA kernel's meta-parameters, split) from a launch dict, checked; FIXUP stays in the
    meta-parameters when given."""
    meta = dict(config)
    split = meta.pop("SPLIT_K", 1)
    if not isinstance(split, int) or isinstance(split, bool) or split < 1:
        raise ValueError(f"{where}: SPLIT_K={split!r} must be an int >= 1")
    if not isinstance(meta.get("FIXUP", False), bool):
        raise ValueError(f"{where}: FIXUP={meta['FIXUP']!r} must be a bool")
    return meta, split


def _matmul_splitk(a, b, bias, activation, out, cfg: dict) -> None:
    """Launch the TMA kernel one tile per program with its reduction split cfg["SPLIT_K"] ways,
    then (split > 1, no FIXUP) the reduce that applies the epilogue."""
    M, K = a.shape
    N = b.shape[1]
    meta, split = _splitk_meta(cfg, "matmul")
    bm, bn, bk = meta["BLOCK_M"], meta["BLOCK_N"], meta["BLOCK_K"]
    b_trans = _tma_layout(b) == "cols"
    a_desc = TensorDescriptor.from_tensor(a, [bm, bk])
    b_desc = TensorDescriptor.from_tensor(b.T if b_trans else b, [bn, bk] if b_trans else [bk, bn])
    c_desc = TensorDescriptor.from_tensor(out, [bm, bn])
    bias_arg = bias if bias is not None else out
    ws = torch.empty((split, M, N), dtype=torch.float32, device=a.device) if split > 1 else out
    common = dict(HAS_BIAS=bias is not None, ACTIVATION=activation or "")
    tiles = triton.cdiv(M, bm) * triton.cdiv(N, bn)
    fixup = meta.pop("FIXUP", SPLITK_FIXUP) and split > 1
    # Zeros per call (a memset, not a cached buffer): launches on two streams cannot share counts.
    counts = torch.zeros(tiles, dtype=torch.int32, device=a.device) if fixup else ws
    _matmul_tma_kernel[(tiles, split)](a_desc, b_desc, c_desc, ws, counts, bias_arg, M, N, K,
                                       split, OPERAND_DTYPE=str(a.dtype).removeprefix("torch."),
                                       B_TRANS=b_trans, SPLIT=split > 1, FIXUP=fixup, **common,
                                       **meta)
    if split > 1 and not fixup:
        rm, rn = REDUCE_BLOCK
        _splitk_reduce_kernel[(triton.cdiv(M, rm), triton.cdiv(N, rn))](
            ws, bias_arg, out, M, N, out.stride(0), out.stride(1), **common,
            SPLIT_K=split, BLOCK_M=rm, BLOCK_N=rn, num_warps=4)


def _autotuned(kernel, key):
    configs = autotune_configs(_matmul_configs(), interpreter=INTERPRETER_CONFIG)
    return triton.autotune(configs=configs, key=key,
                           prune_configs_by={"early_config_prune": _prune_configs},
                           **_tuning.autotune_kwargs())(kernel)


# One autotuner per variant, each with its own cache of chosen configs (the best tile of a
# persistent launch is not that of a one-tile-per-program launch); the persistent and the
# one-tile-per-program launches of a kernel share its compiled binaries.
_AUTOTUNED = {
    "pointer": _autotuned(_matmul_kernel, ["M", "N", "K"]),
    "pointer_persistent": _autotuned(_matmul_kernel, ["M", "N", "K"]),
    "tma": _autotuned(_matmul_tma_kernel, ["M", "N", "K", "OPERAND_DTYPE", "B_TRANS"]),
    "tma_persistent": _autotuned(_matmul_tma_kernel, ["M", "N", "K", "OPERAND_DTYPE", "B_TRANS"]),
}


def _tma_layout(t: torch.Tensor) -> str | None:
    """'rows' if t is row-major as TMA needs it, 'cols' if t.T is, else None."""
    item = t.element_size()
    if t.data_ptr() % 16 or min(t.shape) == 0:
        return None
    if t.stride(1) == 1 and (t.stride(0) * item) % 16 == 0:
        return "rows"
    if t.stride(0) == 1 and (t.stride(1) * item) % 16 == 0:
        return "cols"
    return None


def _tma_problem(a, b, out) -> str | None:
    """Why the TMA kernel cannot take these operands, or None when it can (out None: a new
    row-major output)."""
    if not tma_available(a.device):
        return ("this Triton has no host-side tensor descriptors" if TensorDescriptor is None
                else "TMA needs a Hopper (sm_90) or newer GPU")
    if _tma_layout(a) != "rows":
        return "A must be row-major with 16-byte aligned rows and base"
    if _tma_layout(b) is None:
        return "B (or B.T) must be row-major with 16-byte aligned rows and base"
    if out is None:
        if (b.shape[1] * a.element_size()) % 16:
            return "the output's rows (N elements) must be a multiple of 16 bytes"
    elif _tma_layout(out) != "rows":
        return "out must be row-major with 16-byte aligned rows and base"
    return None


def _check_operands(a, b, bias, activation, out, where: str):
    for name, t in (("a", a), ("b", b)):
        require_tensor(where, name, t)
        if t.dim() != 2:
            raise ValueError(f"{where}: {name} must be 2-D, got shape {tuple(t.shape)}")
    require_dtype(where, a.dtype, DTYPES)
    if b.dtype != a.dtype:
        raise TypeError(f"{where}: a and b must have one dtype, got {a.dtype} and {b.dtype}")
    if a.shape[1] != b.shape[0]:
        raise ValueError(f"{where}: inner dimensions differ: a is {tuple(a.shape)}, b is "
                         f"{tuple(b.shape)}")
    if b.device != a.device:
        raise ValueError(f"{where}: a and b are on different devices ({a.device}, {b.device})")
    M, N = a.shape[0], b.shape[1]
    if bias is not None and (not isinstance(bias, torch.Tensor) or bias.shape != (N,)
                             or bias.device != a.device or not bias.dtype.is_floating_point):
        raise ValueError(f"{where}: bias must be a floating-point tensor of shape ({N},) on "
                         f"{a.device}, got {bias!r:.80}")
    if activation not in ACTIVATIONS:
        raise ValueError(f"{where}: activation={activation!r}; expected one of {ACTIVATIONS}")
    return output(where, "out", out, (M, N), a.dtype, a.device,
                  inputs={"a": a, "b": b, "bias": bias})


def _choose_variant(a, b, out, variant: str | None) -> str:
    if variant is None:
        if _tma_problem(a, b, out) is not None:
            return FALLBACK_VARIANT
        (M, K), N = a.shape, b.shape[1]
        if M > SMALL_M:
            return DEFAULT_VARIANT
        dev = a.device
        return SPLITK_VARIANT if _splitk_pays(M, N, K, sm_count(dev), smem_per_block(dev)) \
            else SMALL_M_VARIANT
    if variant not in VARIANTS:
        raise ValueError(f"matmul: variant={variant!r}; expected one of {', '.join(VARIANTS)}")
    if variant.startswith("tma"):
        problem = _tma_problem(a, b, out)
        if problem is not None:
            raise ValueError(f"matmul: variant={variant!r} cannot take these operands: {problem}")
    return variant


def _check_config(config, where: str) -> dict:
    if not isinstance(config, triton.Config):
        raise TypeError(f"{where}: config must be a triton.Config, got {type(config).__name__}")
    missing = {"BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M"} - set(config.kwargs)
    if missing:
        raise ValueError(f"{where}: config lacks {sorted(missing)}")
    # tl.dot takes tiles of at least 16 in each dimension
    return config_values(where, config.all_kwargs(),
                         powers_of_two=("BLOCK_M", "BLOCK_N", "BLOCK_K", "num_warps"),
                         at_least={"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 16},
                         positive=("GROUP_M", "SPLIT_K", "num_stages"), flags=("FIXUP",))


def matmul_variant(a: torch.Tensor, b: torch.Tensor, *, out: torch.Tensor | None = None) -> str:
    """The variant `matmul(a, b, out=out)` launches (one of VARIANTS)."""
    return _choose_variant(a, b, out, None)


def matmul_kernel_for(a: torch.Tensor, b: torch.Tensor, *, variant: str | None = None,
                      out: torch.Tensor | None = None):
    """The autotuned kernel `matmul(a, b, variant=variant, out=out)` launches (for its chosen
    config); for "tma_splitk" the LaunchTuner whose best_config is the launch last chosen."""
    chosen = _choose_variant(a, b, out, variant)
    return SPLITK_TUNER if chosen == "tma_splitk" else _AUTOTUNED[chosen]


def matmul(a: torch.Tensor, b: torch.Tensor, *, bias: torch.Tensor | None = None,
           activation: str | None = None, out: torch.Tensor | None = None,
           variant: str | None = None, config: triton.Config | None = None) -> torch.Tensor:
    """activation(a @ b + bias): a (M, K), b (K, N) of one dtype (fp16 or bf16), any strides.

    Accumulates in fp32; bias (N,) and the activation (None, "relu", "gelu") are applied to the
    fp32 accumulator, then rounded once to the output dtype (a's). variant: one of VARIANTS
    (default, where TMA can take the operands: DEFAULT_VARIANT for M > SMALL_M, SPLITK_VARIANT
    where the unsplit tiles leave SMs idle and K can be split (_splitk_pays), else
    SMALL_M_VARIANT; FALLBACK_VARIANT where TMA cannot take them). config: a
    triton.Config with BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M (and for "tma_splitk" optionally
    SPLIT_K, default 1, and FIXUP, default SPLITK_FIXUP) to launch instead of autotuning.
    """
    out = _check_operands(a, b, bias, activation, out, "matmul")
    M, K = a.shape
    N = b.shape[1]
    if M == 0 or N == 0:
        return out
    chosen = _choose_variant(a, b, out, variant)
    if config is not None:
        cfg = _check_config(config, "matmul")
        if {"SPLIT_K", "FIXUP"} & set(cfg) and chosen != "tma_splitk":
            raise ValueError(f"matmul: SPLIT_K and FIXUP are parameters of variant 'tma_splitk', "
                             f"not of {chosen!r}")
    if chosen == "tma_splitk":
        if config is None:
            # One choice per shape class (_shape_class: M's 64-row band), timed on the first
            # GEMM of the class large enough to time.
            b_trans = _tma_layout(b) == "cols"
            key = (_shape_class(M), N, K, a.dtype, b_trans)
            cfg = SPLITK_TUNER.choose(
                a.device, key, _splitk_space(M, N, K, a.device),
                lambda c: _matmul_splitk(a, b, bias, activation, out, c), matmul_bytes(a, b),
                restore=(out,))
        _matmul_splitk(a, b, bias, activation, out, cfg)
        return out
    persistent = chosen.endswith("persistent")
    n_sms = sm_count(a.device)

    def grid(meta):
        tiles = triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"])
        return (min(tiles, n_sms) if persistent else tiles,)

    common = dict(HAS_BIAS=bias is not None, ACTIVATION=activation or "")
    bias_arg = bias if bias is not None else out
    if chosen.startswith("tma"):
        b_trans = _tma_layout(b) == "cols"
        # Block shapes are placeholders until the config's pre-hook sets them.
        a_desc = TensorDescriptor.from_tensor(a, [16, 16])
        b_desc = TensorDescriptor.from_tensor(b.T if b_trans else b, [16, 16])
        c_desc = TensorDescriptor.from_tensor(out, [16, 16])
        args = (a_desc, b_desc, c_desc, out, out, bias_arg, M, N, K, 1)
        common.update(OPERAND_DTYPE=str(a.dtype).removeprefix("torch."), B_TRANS=b_trans,
                      SPLIT=False, FIXUP=False)
        kernel = _matmul_tma_kernel
    else:
        args = (a, b, out, bias_arg, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                out.stride(0), out.stride(1))
        kernel = _matmul_kernel
    if config is None:
        _tuning.launch_autotuned(_AUTOTUNED[chosen], grid, *args, **common)
    else:
        meta = {**common, **cfg}
        if chosen.startswith("tma"):
            _set_tma_block_shapes({"a_desc": args[0], "b_desc": args[1], "c_desc": args[2], **meta})
        kernel[grid(meta)](*args, **meta)
    return out


def matmul_reference(a: torch.Tensor, b: torch.Tensor, *, bias: torch.Tensor | None = None,
                     activation: str | None = None) -> torch.Tensor:
    """torch's activation(a @ b + bias), in the operands' dtype (float64 when given float64)."""
    c = a @ b
    if bias is not None:
        c = c + bias.to(c.dtype)
    if activation == "relu":
        c = torch.relu(c)
    elif activation == "gelu":
        c = torch.nn.functional.gelu(c)
    return c


def matmul_flops(a: torch.Tensor, b: torch.Tensor) -> int:
    # one multiply and one add per (m, n, k)
    return 2 * a.shape[0] * b.shape[1] * a.shape[1]


def matmul_bytes(a: torch.Tensor, b: torch.Tensor) -> int:
    # read A and B once; write C once
    return (a.numel() + b.numel() + a.shape[0] * b.shape[1]) * a.element_size()


def matmul_inputs(make_tensor, m: int, n: int, k: int, *, dtype: torch.dtype = torch.float16,
                  b_transposed: bool = False, bias: bool = False, **kwargs):
    """(a, b, bias): a (m, k), b (k, n) (the .T of an (n, k) tensor when b_transposed), bias (n,)
    or None. Keyword arguments go to make_tensor."""
    a = make_tensor((m, k), dtype, **kwargs)
    b = (make_tensor((n, k), dtype, **kwargs).T if b_transposed
         else make_tensor((k, n), dtype, **kwargs))
    return a, b, (make_tensor(n, dtype) if bias else None)
