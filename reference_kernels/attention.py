"""Fused attention forward, softmax(Q K^T * sm_scale [+ causal mask]) V, FlashAttention-style.

A program owns BLOCK_M query rows of one (batch, head) and streams the keys and values past them
in BLOCK_N blocks, never writing the S x S score matrix: per row it keeps a running maximum m, a
running sum l of exp(score - m), and an accumulator rescaled by exp(m_old - m_new) whenever the
maximum grows (the online softmax), and accumulates P V in the tensor-core product itself. Scores
are scaled by sm_scale * log2(e) so that exp2, one instruction (MUFU.EX2), replaces exp; the scale
is folded into the subtraction of the maximum (one FMA per score).

Causal: a query block needs only the key blocks at or before its diagonal. The blocks wholly
below the diagonal need no mask and run in a first loop; only the few blocks on the diagonal
(and a sequence tail shorter than BLOCK_N) run in a second, masked loop; blocks above the
diagonal are skipped, and the query blocks with the most keys are launched first.

Removed: two hand-written inner-loop options, PIPELINE (FlashAttention-3's intra-warpgroup
overlap: block j's Q K^T, then block j-1's P V left in flight, then block j's softmax) and
LAZY_RESCALE (FlashAttention-4's conditional rescale of the accumulator). Each lost to the
default at every shape measured: Triton stages P through shared memory, whose single buffer
makes the compiler wait for each P V product at once (no overlap is left, and the extra wait
and copy cost speed), and the lazy rescale's cross-warp branch per block cost more than the
multiplies it skips. They were removed rather than kept off by default: no shape wanted them,
and they were most of the loop's code.

Also removed: Triton's automatic warp specialization of the key loop
(tl.range(warp_specialize=True), FlashAttention-3's producer/consumer structure chosen by the
compiler). With the host-side descriptors of the "tma" variant, warp-specialized configs
compiled and then never finished on the GPU (Triton's Hopper warp specialization partitions
data only with descriptors made in the kernel, triton-lang/triton#7658); with descriptors made
in the kernel (tl.make_tensor_descriptor) it ran and was right, and slower than the default.
No shape wanted it.
What limits the default at D 128, from its compiled schedule (bench/attention_schedule.py
shows it): in every step the wait after Q K^T lets no tensor-core product stay in flight
(warp_group_dot_wait with pendings = 0), so the previous block's P V and this block's Q K^T
both finish before its exponentials start, and a warpgroup's softmax never overlaps its tensor
cores; FlashAttention-3, behind SDPA on Hopper, overlaps them within a warpgroup and alternates
two warpgroups. Q and 3 stages of K and V already take all the shared memory a program may
have on Hopper: no deeper pipeline fits. Both ways to the overlap that Triton offers, by hand
(PIPELINE) and by the compiler (warp specialization), lost above. The measurements:
docs/kernels.md.
Not built: folding sm_scale * log2(e) into Q, which turns the per-score FMA (s * qk_scale - m)
into a subtraction of the same cost (one FFMA or one FADD a score) and rounds the scaled Q to
fp16/bf16.

Two variants of one algorithm: `_attention_kernel` loads through pointers (any strides);
`_attention_tma_kernel` (Hopper, Triton >= 3.4) loads Q, K and V blocks through host-side TMA
descriptors over their contiguous (B*H*S, D) views.

q, k, v: (B, H, S, D) of one dtype (fp16 or bf16), any strides (TMA: contiguous); D a power of
two from 16 to 128 (tuned for 64 and 128). Out: (B, H, S, D) contiguous, in q's dtype.
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from pytest_triton import autotune_configs

from ._checks import config_values, output, require_dtype, require_tensor
from ._gemm import TensorDescriptor, tma_available
from ._tuning import autotune_kwargs, launch_autotuned

DTYPES = (torch.float16, torch.bfloat16)
HEAD_DIMS = (16, 32, 64, 128)
LOG2E = 1.4426950408889634
VARIANTS = ("pointer", "tma")

# The variant `attention` uses when the operands allow TMA (Hopper or newer, contiguous) and when
# they do not. TMA loads of K and V free the warps of address arithmetic, which made them faster
# than pointer loads at the same tiles on every perf-test shape (measured in docs/kernels.md).
DEFAULT_VARIANT = "tma"
FALLBACK_VARIANT = "pointer"


def _set_tma_block_shapes(nargs: dict) -> None:
    """Autotuner pre-hook: a host-side descriptor's block shape is the tile of the config run."""
    q_desc = nargs.get("q_desc")
    if q_desc is None:  # the pointer kernel
        return
    d = nargs["HEAD_DIM"]
    q_desc.block_shape = [nargs["BLOCK_M"], d]
    nargs["k_desc"].block_shape = [nargs["BLOCK_N"], d]
    nargs["v_desc"].block_shape = [nargs["BLOCK_N"], d]


def _attention_configs() -> dict[int, list[triton.Config]]:
    """The candidate tiles for each tuned head dim, autotuned per (S, head dim, causal) between
    two: `_prune_configs` picks the call's head dim.

    Timed as the perf tests time, at every perf-test shape (docs/kernels.md): D 64 is best at
    128 x 64 with 4 stages over 8 warps (128 x 128 tiles spill the score tile's registers);
    D 128 at 128 x 128, 3 stages (3 x 2 x 32 KB of K and V blocks and the 32 KB Q tile just fit
    in 227 KB). 64 x 64 tiles over 4 warps win where the 128-row tiles leave work idle: causal at
    D 64 (whose diagonal blocks, half masked, are a large share of the work) and D 128 at
    S = 1024: the second candidate. Two candidates per head dim cost two compiles per head dim
    and causal flag in the 3-minute perf run.
    """
    def cfg(bm, bn, stages, warps):
        return triton.Config({"BLOCK_M": bm, "BLOCK_N": bn}, num_stages=stages,
                             num_warps=warps, pre_hook=_set_tma_block_shapes)

    return {64: [cfg(128, 64, 4, 8), cfg(64, 64, 3, 4)],
            128: [cfg(128, 128, 3, 8), cfg(64, 64, 3, 4)]}


_TUNED = _attention_configs()


# Sequences shorter than this take their head dim's first candidate untimed: they run for
# microseconds, and compiling the second candidate per head dim, causal flag and dtype would cost
# more than it could save them (the perf tests' sequences have 1024 keys or more).
TUNE_MIN_S = 512


def _prune_configs(configs, named_args, **kwargs):
    """The candidates tuned for this head dim (only the first below TUNE_MIN_S); for an untuned
    head dim, the next larger tuned head dim's (the largest one's if there is none)."""
    d = kwargs["HEAD_DIM"]
    tuned = min((t for t in _TUNED if t >= d), default=max(_TUNED))
    kept = [c for c in configs if any(c is t for t in _TUNED[tuned])] or configs[:1]
    return kept[:1] if named_args["S"] < TUNE_MIN_S else kept


# Under the interpreter: small blocks, so that the tests' short sequences span several of them,
# with BLOCK_M a multiple of BLOCK_N as the causal loop split needs.
INTERPRETER_CONFIG = triton.Config({"BLOCK_M": 32, "BLOCK_N": 16}, num_stages=1, num_warps=4,
                                   pre_hook=_set_tma_block_shapes)


@triton.jit
def _query_block(
    CAUSAL: tl.constexpr,
):
    # Causal query blocks late in the sequence do the most work: launching them first leaves
    # the short ones to fill the tail of the grid.
    if CAUSAL:
        block_m = tl.num_programs(0) - 1 - tl.program_id(0)
    else:
        block_m = tl.program_id(0)
    return block_m


@triton.jit
def _key_ranges(
    block_m,  # the query block
    S,  # the sequence length
    CAUSAL: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    # (unmasked_end, masked_end): keys [0, unmasked_end) need no mask; [unmasked_end,
    # masked_end) do. Causal: keys before the block's first query are visible to all its rows,
    # those up to its last query form the diagonal blocks, later ones are skipped.
    if CAUSAL:
        unmasked_end = block_m * BLOCK_M
        masked_end = tl.minimum((block_m + 1) * BLOCK_M, S)
    else:
        unmasked_end = (S // BLOCK_N) * BLOCK_N
        masked_end = S
    return unmasked_end, masked_end


@triton.jit
def _load_block(
    src,  # TMA: a descriptor over (B*H*S) x HEAD_DIM; else a BLOCK_N x HEAD_DIM pointer tile
    kv_row,  # TMA: the row of key 0 of this (batch, head) in the descriptor
    stride_n,  # pointers: the key stride
    start_n,  # the block's first key
    k_ok,  # BLOCK_N: the block's keys < S (pointers, MASKED)
    MASKED: tl.constexpr,
    TMA: tl.constexpr,
):
    if TMA:
        # Past S the 2-D view reads the next head's keys, or zeros past the tensor's end: their
        # scores are masked, so their p is 0 and their values add nothing.
        x = src.load([kv_row + start_n, 0])
    elif MASKED:
        x = tl.load(src + start_n * stride_n, mask=k_ok[:, None], other=0.0)
    else:
        x = tl.load(src + start_n * stride_n)
    return x


@triton.jit
def _online_softmax(
    s,  # BLOCK_M x BLOCK_N raw scores q k^T of the block's keys
    m_i, l_i,  # running row maximum (scaled, log2 units) and row sum (BLOCK_M)
    keys,  # BLOCK_N key positions
    offs_m,  # BLOCK_M query positions
    S,  # the sequence length
    qk_scale,  # sm_scale * log2(e)
    MASKED: tl.constexpr,  # mask keys >= S and, when CAUSAL, keys after the query
    CAUSAL: tl.constexpr,
):
    """(p, alpha, m, l): the block's probabilities against the new maximum m, the factor
    alpha = exp2(m_old - m) the accumulator needs, and the new row sum."""
    if MASKED:
        visible = (keys < S)[None, :]
        if CAUSAL:
            visible = visible & (keys[None, :] <= offs_m[:, None])
        s = tl.where(visible, s, float("-inf"))
    # qk_scale > 0, so the row maximum of the scaled scores is the scaled row maximum: one
    # multiply per row here and one FMA per score below (s * qk_scale - m), where scaling first
    # would cost a multiply per score more. Every row sees a finite score in its first block
    # (key 0 is visible to all queries), so m_new is finite from then on and a fully masked
    # block gives p = 0, alpha = 1.
    m_new = tl.maximum(m_i, tl.max(s, 1) * qk_scale)
    p = tl.math.exp2(s * qk_scale - m_new[:, None])
    alpha = tl.math.exp2(m_i - m_new)
    l_i = l_i * alpha + tl.sum(p, 1)
    return p, alpha, m_new, l_i


@triton.jit
def _attention_step(
    acc, m_i, l_i,  # running accumulator (BLOCK_M x HEAD_DIM), row maximum and row sum (BLOCK_M)
    q,  # BLOCK_M x HEAD_DIM query tile
    k_src, v_src,  # TMA: descriptors of K and V as (B*H*S) x HEAD_DIM; else BLOCK_N x HEAD_DIM
                   # pointer tiles at key 0 of this (batch, head)
    kv_row,  # TMA: the row of key 0 of this (batch, head) in the descriptors
    stride_kn, stride_vn,  # pointers: the key strides of K and V
    offs_m,  # BLOCK_M query positions
    offs_n,  # BLOCK_N key offsets within a block
    start_n,  # the block's first key
    S,  # the sequence length
    qk_scale,  # sm_scale * log2(e)
    MASKED: tl.constexpr,  # mask keys >= S and, when CAUSAL, keys after the query
    CAUSAL: tl.constexpr,
    TMA: tl.constexpr,
):
    keys = start_n + offs_n
    k_ok = keys < S
    k = _load_block(k_src, kv_row, stride_kn, start_n, k_ok, MASKED, TMA)
    v = _load_block(v_src, kv_row, stride_vn, start_n, k_ok, MASKED, TMA)
    s = tl.dot(q, tl.trans(k))  # raw scores: the scale is folded in below
    p, alpha, m_i, l_i = _online_softmax(s, m_i, l_i, keys, offs_m, S, qk_scale, MASKED, CAUSAL)
    # The accumulator rescaled to p's maximum, then the block's P V added in the tensor-core
    # product itself (no separate add of a BLOCK_M x HEAD_DIM product tile).
    acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None])
    return acc, m_i, l_i


@triton.jit
def _attention_block(
    acc, m_i, l_i,  # running accumulator (BLOCK_M x HEAD_DIM), row maximum and row sum (BLOCK_M)
    q,  # BLOCK_M x HEAD_DIM query tile
    k_src, v_src,  # as _attention_step's
    kv_row,  # TMA: the row of key 0 of this (batch, head) in the descriptors
    stride_kn, stride_vn,  # pointers: the key strides of K and V
    offs_m,  # BLOCK_M query positions
    offs_n,  # BLOCK_N key offsets within a block
    start, end,  # the keys [start, end) to visit, start a multiple of BLOCK_N
    S,  # the sequence length
    qk_scale,  # sm_scale * log2(e)
    MASKED: tl.constexpr,  # mask keys >= S and, when CAUSAL, keys after the query
    CAUSAL: tl.constexpr,
    TMA: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    for start_n in range(start, end, BLOCK_N):
        acc, m_i, l_i = _attention_step(acc, m_i, l_i, q, k_src, v_src, kv_row, stride_kn,
                                        stride_vn, offs_m, offs_n, start_n, S, qk_scale, MASKED,
                                        CAUSAL, TMA)
    return acc, m_i, l_i


@triton.jit
def _attend(
    q, k_src, v_src, kv_row, stride_kn, stride_vn, offs_m, offs_n,
    S, qk_scale,
    block_m,  # the query block
    CAUSAL: tl.constexpr,
    TMA: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    """(acc, l): the unnormalised output rows and their softmax sums, over every visible key."""
    m_i = tl.full((BLOCK_M,), float("-inf"), dtype=tl.float32)
    l_i = tl.zeros((BLOCK_M,), dtype=tl.float32)
    acc = tl.zeros((BLOCK_M, HEAD_DIM), dtype=tl.float32)
    unmasked_end, masked_end = _key_ranges(block_m, S, CAUSAL, BLOCK_M, BLOCK_N)
    acc, m_i, l_i = _attention_block(acc, m_i, l_i, q, k_src, v_src, kv_row, stride_kn,
                                     stride_vn, offs_m, offs_n, 0, unmasked_end, S, qk_scale,
                                     False, CAUSAL, TMA, BLOCK_N)
    acc, m_i, l_i = _attention_block(acc, m_i, l_i, q, k_src, v_src, kv_row, stride_kn,
                                     stride_vn, offs_m, offs_n, unmasked_end, masked_end, S,
                                     qk_scale, True, CAUSAL, TMA, BLOCK_N)
    return acc, l_i


@triton.jit
def _attention_kernel(
    q_ptr,  # *in* B x H x S x HEAD_DIM, strides (stride_qb, stride_qh, stride_qs, stride_qd)
    k_ptr,  # *in* B x H x S x HEAD_DIM
    v_ptr,  # *in* B x H x S x HEAD_DIM
    o_ptr,  # *out* B x H x S x HEAD_DIM
    H,  # heads
    S,  # sequence length (queries and keys)
    qk_scale,  # sm_scale * log2(e)
    stride_qb, stride_qh, stride_qs, stride_qd,
    stride_kb, stride_kh, stride_ks, stride_kd,
    stride_vb, stride_vh, stride_vs, stride_vd,
    stride_ob, stride_oh, stride_os, stride_od,
    HEAD_DIM: tl.constexpr,
    CAUSAL: tl.constexpr,
    BLOCK_M: tl.constexpr,  # query rows per program
    BLOCK_N: tl.constexpr,  # keys per step; BLOCK_M must be a multiple of it
):
    block_m = _query_block(CAUSAL)
    bh = tl.program_id(1)
    b = (bh // H).to(tl.int64)  # int64 offsets: tensors of 2**31 elements or more stay correct
    h = (bh % H).to(tl.int64)
    q_ptr += b * stride_qb + h * stride_qh
    k_ptr += b * stride_kb + h * stride_kh
    v_ptr += b * stride_vb + h * stride_vh
    o_ptr += b * stride_ob + h * stride_oh

    offs_m = block_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    m_ok = offs_m < S
    q = tl.load(q_ptr + offs_m[:, None] * stride_qs + offs_d[None, :] * stride_qd,
                mask=m_ok[:, None], other=0.0)
    k_ptrs = k_ptr + offs_n[:, None] * stride_ks + offs_d[None, :] * stride_kd
    v_ptrs = v_ptr + offs_n[:, None] * stride_vs + offs_d[None, :] * stride_vd

    acc, l_i = _attend(q, k_ptrs, v_ptrs, 0, stride_ks, stride_vs, offs_m, offs_n, S, qk_scale,
                       block_m, CAUSAL, False, HEAD_DIM, BLOCK_M, BLOCK_N)
    acc = acc / l_i[:, None]
    o_ptrs = o_ptr + offs_m[:, None] * stride_os + offs_d[None, :] * stride_od
    tl.store(o_ptrs, acc.to(o_ptr.dtype.element_ty), mask=m_ok[:, None])


@triton.jit
def _attention_tma_kernel(
    q_desc,  # descriptor of Q as (B*H*S) x HEAD_DIM (contiguous), block [BLOCK_M, HEAD_DIM]
    k_desc,  # descriptor of K as (B*H*S) x HEAD_DIM, block [BLOCK_N, HEAD_DIM]
    v_desc,  # descriptor of V as (B*H*S) x HEAD_DIM, block [BLOCK_N, HEAD_DIM]
    o_ptr,  # *out* B x H x S x HEAD_DIM, strides (stride_ob, stride_oh, stride_os, stride_od)
    H,  # heads
    S,  # sequence length (queries and keys)
    qk_scale,  # sm_scale * log2(e)
    stride_ob, stride_oh, stride_os, stride_od,
    HEAD_DIM: tl.constexpr,
    CAUSAL: tl.constexpr,
    BLOCK_M: tl.constexpr,  # query rows per program
    BLOCK_N: tl.constexpr,  # keys per step; BLOCK_M must be a multiple of it
):
    block_m = _query_block(CAUSAL)
    bh = tl.program_id(1)
    row0 = bh * S  # this (batch, head)'s first row in the (B*H*S) x HEAD_DIM views
    o_ptr += (bh // H).to(tl.int64) * stride_ob + (bh % H).to(tl.int64) * stride_oh

    offs_m = block_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    # Rows past S are the next head's queries (or zeros): computed, never stored.
    q = q_desc.load([row0 + block_m * BLOCK_M, 0])

    acc, l_i = _attend(q, k_desc, v_desc, row0, 0, 0, offs_m, offs_n, S, qk_scale, block_m,
                       CAUSAL, True, HEAD_DIM, BLOCK_M, BLOCK_N)
    acc = acc / l_i[:, None]
    # A pointer store, masked at S: a TMA store of the 2-D view would spill into the next head.
    o_ptrs = o_ptr + offs_m[:, None] * stride_os + offs_d[None, :] * stride_od
    tl.store(o_ptrs, acc.to(o_ptr.dtype.element_ty), mask=(offs_m < S)[:, None])


def _autotuned(kernel):
    return triton.autotune(configs=autotune_configs([c for cs in _TUNED.values() for c in cs],
                                                    interpreter=INTERPRETER_CONFIG),
                           key=["S", "HEAD_DIM", "CAUSAL"],
                           prune_configs_by={"early_config_prune": _prune_configs},
                           **autotune_kwargs())(kernel)


# The kernels by variant, for tools that compile or inspect them (bench/attention_schedule.py).
KERNELS = {"pointer": _attention_kernel, "tma": _attention_tma_kernel}

# One autotuner per variant, each with its own cache of chosen configs.
_AUTOTUNED = {"pointer": _autotuned(_attention_kernel),
              "tma": _autotuned(_attention_tma_kernel)}


def _check_operands(q, k, v, out, where: str):
    for name, t in (("q", q), ("k", k), ("v", v)):
        require_tensor(where, name, t)
    require_dtype(where, q.dtype, DTYPES)
    if k.dtype != q.dtype or v.dtype != q.dtype:
        raise TypeError(f"{where}: q, k and v must have one dtype, got {q.dtype}, {k.dtype}, "
                        f"{v.dtype}")
    if q.dim() != 4 or k.shape != q.shape or v.shape != q.shape:
        raise ValueError(f"{where}: q, k and v must all be (B, H, S, D), got {tuple(q.shape)}, "
                         f"{tuple(k.shape)}, {tuple(v.shape)}")
    if k.device != q.device or v.device != q.device:
        raise ValueError(f"{where}: q, k and v must be on one device, got {q.device}, {k.device}, "
                         f"{v.device}")
    if q.shape[3] not in HEAD_DIMS:
        raise ValueError(f"{where}: head dim {q.shape[3]} is not supported; expected one of "
                         f"{HEAD_DIMS}")
    # q may be out itself: a program reads its query rows before it writes them, and no
    # other program reads them
    return output(where, "out", out, q.shape, q.dtype, q.device, inputs={"k": k, "v": v})


def _tma_problem(q, k, v) -> str | None:
    """Why the TMA kernel cannot take these operands, or None when it can."""
    if not tma_available(q.device):
        return ("this Triton has no host-side tensor descriptors" if TensorDescriptor is None
                else "TMA needs a Hopper (sm_90) or newer GPU")
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not t.is_contiguous() or t.data_ptr() % 16:
            return f"{name} must be contiguous with a 16-byte aligned base"
    return None


def _choose_variant(q, k, v, variant: str | None) -> str:
    if variant is None:
        return DEFAULT_VARIANT if _tma_problem(q, k, v) is None else FALLBACK_VARIANT
    if variant not in VARIANTS:
        raise ValueError(f"attention: variant={variant!r}; expected one of {', '.join(VARIANTS)}")
    if variant == "tma":
        problem = _tma_problem(q, k, v)
        if problem is not None:
            raise ValueError(f"attention: variant='tma' cannot take these operands: {problem}")
    return variant


def attention_kernel_for(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *,
                         variant: str | None = None):
    """The autotuned kernel `attention(q, k, v, variant=variant)` launches (for its chosen
    config)."""
    return _AUTOTUNED[_choose_variant(q, k, v, variant)]


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool = False,
              sm_scale: float | None = None, out: torch.Tensor | None = None,
              variant: str | None = None, config: triton.Config | None = None) -> torch.Tensor:
    """softmax(q @ k^T * sm_scale, masked when causal) @ v over (B, H, S, D) tensors.

    sm_scale (> 0) defaults to 1/sqrt(D). variant: "pointer" or "tma" (default: DEFAULT_VARIANT
    where TMA can take the operands, else FALLBACK_VARIANT). config: a triton.Config (BLOCK_M,
    BLOCK_N; BLOCK_M a multiple of BLOCK_N) to launch instead of the tuned one.
    """
    out = _check_operands(q, k, v, out, "attention")
    chosen = _choose_variant(q, k, v, variant)
    B, H, S, D = q.shape
    if sm_scale is not None and (isinstance(sm_scale, bool)
                                 or not isinstance(sm_scale, (int, float))):
        raise TypeError(f"attention: sm_scale={sm_scale!r} must be a number (or None for "
                        f"1/sqrt(D))")
    scale = 1.0 / math.sqrt(D) if sm_scale is None else float(sm_scale)
    if not (math.isfinite(scale) and scale > 0):
        # The kernel takes the row maximum before scaling: right only for a positive scale.
        raise ValueError(f"attention: sm_scale={sm_scale!r} must be a positive finite number")
    if out.numel() == 0:
        return out
    if chosen == "tma":
        # Block shapes are placeholders until the config's pre-hook sets them.
        descs = [TensorDescriptor.from_tensor(t.view(B * H * S, D), [16, D]) for t in (q, k, v)]
        args = (*descs, out, H, S, scale * LOG2E, *out.stride())
    else:
        args = (q, k, v, out, H, S, scale * LOG2E, *q.stride(), *k.stride(), *v.stride(),
                *out.stride())
    meta = {"HEAD_DIM": D, "CAUSAL": bool(causal)}

    def grid(m):
        return (triton.cdiv(S, m["BLOCK_M"]), B * H)

    if config is None:
        launch_autotuned(_AUTOTUNED[chosen], grid, *args, **meta)
        return out
    if not isinstance(config, triton.Config):
        raise TypeError(f"attention: config must be a triton.Config, got "
                        f"{type(config).__name__}")
    kw = config.all_kwargs()
    missing = {"BLOCK_M", "BLOCK_N"} - set(kw)
    if missing:
        raise ValueError(f"attention: config lacks {sorted(missing)}")
    config_values("attention", kw, powers_of_two=("BLOCK_M", "BLOCK_N", "num_warps"),
                  at_least={"BLOCK_M": 16, "BLOCK_N": 16}, positive=("num_stages",))
    if kw["BLOCK_M"] % kw["BLOCK_N"]:
        raise ValueError(f"attention: BLOCK_M {kw['BLOCK_M']} must be a multiple of BLOCK_N "
                         f"{kw['BLOCK_N']}")
    if chosen == "tma":
        _set_tma_block_shapes({"q_desc": args[0], "k_desc": args[1], "v_desc": args[2],
                               **meta, **kw})
    kernel = _attention_tma_kernel if chosen == "tma" else _attention_kernel
    kernel[grid(kw)](*args, **meta, **kw)
    return out


def attention_reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *,
                        causal: bool = False, sm_scale: float | None = None) -> torch.Tensor:
    """The textbook softmax(q k^T * sm_scale) v, in the operands' dtype (float64 when given
    float64); causal masks key j > query i."""
    scale = 1.0 / math.sqrt(q.shape[-1]) if sm_scale is None else sm_scale
    scores = (q @ k.transpose(-2, -1)) * scale
    if causal:
        S = q.shape[-2]
        future = torch.ones(S, S, dtype=torch.bool, device=q.device).triu(1)
        scores = scores.masked_fill(future, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


def attention_flops(q: torch.Tensor, *, causal: bool = False) -> int:
    # two S x S x D GEMMs per (batch, head), 2 flops per multiply-add; causal computes half
    B, H, S, D = q.shape
    flops = 4 * B * H * S * S * D
    return flops // 2 if causal else flops


def attention_bytes(q: torch.Tensor) -> int:
    # read q, k and v once; write the output once
    return 4 * q.numel() * q.element_size()


def attention_inputs(make_tensor, b: int, h: int, s: int, d: int, *,
                     dtype: torch.dtype = torch.float16, **kwargs):
    """(q, k, v), each (b, h, s, d). Keyword arguments go to make_tensor."""
    return tuple(make_tensor((b, h, s, d), dtype, **kwargs) for _ in range(3))
