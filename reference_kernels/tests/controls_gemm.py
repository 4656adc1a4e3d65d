"""Negative controls for the GEMM-like kernels: deliberately wrong kernels the tests prove
assert_close rejects, and a deliberately slow matmul config the perf suite proves it rejects.

Each wrong kernel is a plain version of the real one with a `BUG` switch, so that the same kernel
without its bug is also tested and passes: the failure then comes from the bug alone, not from
some other difference between the control and the kernel it stands in for.
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

MATMUL_BUGS = (None, "drops_last_k_tile", "writes_nothing")
ATTENTION_BUGS = (None, "no_max_subtraction", "unmasked_diagonal")
# A bug of precision, not of logic: its error is several times torch's at the same precision, yet
# inside a fixed atol for most inputs. Only the comparison with a baseline rejects it.
ATTENTION_PRECISION_BUGS = ("p_in_bfloat16",)

# 16 x 16 x 16 tiles, one stage, one warp: every tile is re-read from L2 for each 16 columns and
# nothing overlaps the loads; on an H100 at 4096^3 this is an order of magnitude under cuBLAS.
SLOW_MATMUL_CONFIG = triton.Config({"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 16, "GROUP_M": 1},
                                   num_stages=1, num_warps=1)


@triton.jit
def _control_matmul_kernel(
    a_ptr,  # *in* M x K, strides (stride_am, stride_ak)
    b_ptr,  # *in* K x N, strides (stride_bk, stride_bn)
    c_ptr,  # *out* M x N, strides (stride_cm, stride_cn)
    M, N, K,
    stride_am, stride_ak,
    stride_bk, stride_bn,
    stride_cm, stride_cn,
    BUG: tl.constexpr,  # "", "drops_last_k_tile", "writes_nothing" or "k_tail_dropped"
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    k_tiles = tl.cdiv(K, BLOCK_K)
    if BUG == "drops_last_k_tile":
        k_tiles -= 1
    if BUG == "k_tail_dropped":  # whole tiles only: right exactly when BLOCK_K divides K
        k_tiles = K // BLOCK_K
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for kt in range(0, k_tiles):
        k = kt * BLOCK_K + offs_k
        a = tl.load(a_ptr + offs_m[:, None] * stride_am + k[None, :] * stride_ak,
                    mask=(offs_m[:, None] < M) & (k[None, :] < K), other=0.0)
        b = tl.load(b_ptr + k[:, None] * stride_bk + offs_n[None, :] * stride_bn,
                    mask=(k[:, None] < K) & (offs_n[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc)
    if BUG != "writes_nothing":
        tl.store(c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn,
                 acc.to(c_ptr.dtype.element_ty), mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


def control_matmul(a: torch.Tensor, b: torch.Tensor, *, bug: str | None,
                   out: torch.Tensor | None = None) -> torch.Tensor:
    """a @ b with `bug` (one of MATMUL_BUGS; None: the correct plain kernel)."""
    if bug not in MATMUL_BUGS:
        raise ValueError(f"control_matmul: bug={bug!r}; expected one of {MATMUL_BUGS}")
    M, K = a.shape
    N = b.shape[1]
    if out is None:
        out = torch.empty((M, N), dtype=a.dtype, device=a.device)
    grid = (triton.cdiv(M, 32), triton.cdiv(N, 32))
    _control_matmul_kernel[grid](a, b, out, M, N, K, a.stride(0), a.stride(1), b.stride(0),
                                 b.stride(1), out.stride(0), out.stride(1), BUG=bug or "",
                                 BLOCK_M=32, BLOCK_N=32, BLOCK_K=32)
    return out


# A config wrong only at some shapes: the kernel drops the K tail that a BLOCK_K not dividing K
# leaves. With K = 64 both configs are right; with K = 48 the BLOCK_K=32 one drops 16 of 48 terms,
# and autotuning, which times one config per shape, may well ship it unseen.
K_TAIL_CONFIGS = [triton.Config({"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": bk}, num_warps=4,
                                num_stages=1) for bk in (16, 32)]
control_matmul_k_tail_kernel = triton.autotune(configs=K_TAIL_CONFIGS, key=["M", "N", "K"])(
    _control_matmul_kernel)


def control_matmul_k_tail(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """a @ b through the autotuned control_matmul_k_tail_kernel, whose BLOCK_K=32 config is wrong
    when 32 does not divide K."""
    M, K = a.shape
    N = b.shape[1]
    grid = lambda meta: (triton.cdiv(M, meta["BLOCK_M"]), triton.cdiv(N, meta["BLOCK_N"]))
    control_matmul_k_tail_kernel[grid](a, b, out, M, N, K, a.stride(0), a.stride(1), b.stride(0),
                                       b.stride(1), out.stride(0), out.stride(1),
                                       BUG="k_tail_dropped")
    return out


@triton.jit
def _control_attention_kernel(
    q_ptr,  # *in* (B*H) x S x HEAD_DIM, contiguous
    k_ptr,  # *in* (B*H) x S x HEAD_DIM, contiguous
    v_ptr,  # *in* (B*H) x S x HEAD_DIM, contiguous
    o_ptr,  # *out* (B*H) x S x HEAD_DIM, contiguous
    S,  # sequence length
    qk_scale,  # sm_scale * log2(e)
    HEAD_DIM: tl.constexpr,
    CAUSAL: tl.constexpr,
    BUG: tl.constexpr,  # "", "no_max_subtraction", "unmasked_diagonal" or "p_in_bfloat16"
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    base = tl.program_id(1) * S * HEAD_DIM
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    q = tl.load(q_ptr + base + offs_m[:, None] * HEAD_DIM + offs_d[None, :],
                mask=offs_m[:, None] < S, other=0.0)
    m_i = tl.full((BLOCK_M,), float("-inf"), dtype=tl.float32)
    l_i = tl.zeros((BLOCK_M,), dtype=tl.float32)
    acc = tl.zeros((BLOCK_M, HEAD_DIM), dtype=tl.float32)
    end = S
    if CAUSAL:
        end = tl.minimum((tl.program_id(0) + 1) * BLOCK_M, S)
    for start_n in range(0, end, BLOCK_N):
        keys = start_n + offs_n
        kv_off = base + keys[:, None] * HEAD_DIM + offs_d[None, :]
        k = tl.load(k_ptr + kv_off, mask=keys[:, None] < S, other=0.0)
        v = tl.load(v_ptr + kv_off, mask=keys[:, None] < S, other=0.0)
        s = tl.dot(q, tl.trans(k)) * qk_scale
        visible = keys[None, :] < S
        if CAUSAL and BUG != "unmasked_diagonal":
            visible = visible & (keys[None, :] <= offs_m[:, None])
        s = tl.where(visible, s, float("-inf"))
        if BUG == "no_max_subtraction":
            p = tl.math.exp2(s)
            l_i += tl.sum(p, 1)
            acc += tl.dot(p.to(v.dtype), v)
        else:
            m_new = tl.maximum(m_i, tl.max(s, 1))
            p = tl.math.exp2(s - m_new[:, None])
            alpha = tl.math.exp2(m_i - m_new)
            l_i = l_i * alpha + tl.sum(p, 1)
            if BUG == "p_in_bfloat16":  # P rounded to 8 mantissa bits, not 11, before P @ V
                p = p.to(tl.bfloat16)
            acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
            m_i = m_new
    tl.store(o_ptr + base + offs_m[:, None] * HEAD_DIM + offs_d[None, :],
             (acc / l_i[:, None]).to(o_ptr.dtype.element_ty), mask=offs_m[:, None] < S)


def control_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool,
                      bug: str | None) -> torch.Tensor:
    """softmax(q k^T / sqrt(D)) v with `bug` (one of ATTENTION_BUGS or ATTENTION_PRECISION_BUGS;
    None: the correct plain kernel)."""
    if bug not in ATTENTION_BUGS + ATTENTION_PRECISION_BUGS:
        raise ValueError(f"control_attention: bug={bug!r}; expected one of "
                         f"{ATTENTION_BUGS + ATTENTION_PRECISION_BUGS}")
    B, H, S, D = q.shape
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    out = torch.empty_like(q)
    grid = (triton.cdiv(S, 32), B * H)
    _control_attention_kernel[grid](q, k, v, out, S, 1.4426950408889634 / math.sqrt(D),
                                    HEAD_DIM=D, CAUSAL=causal, BUG=bug or "", BLOCK_M=32,
                                    BLOCK_N=16)
    return out
