"""Conch (conch-triton-kernels, Stack AV's Triton library of vLLM's operators) through its own
entry points (conch.ops.*): RMSNorm and its fused residual add, SwiGLU's and GeGLU's activations,
NeoX rotary embedding, static int8 quantization, and BEV pooling with its backward (wrapped in an
autograd.Function as BEVFusion's users wrap it). Correctness at odd shapes in fp32/bf16/fp16
against float64, determinism, and perf markers at LLM sizes. Findings: README.md beside this
file.
"""

from __future__ import annotations

import pytest
import torch

from pytest_triton import (
    assert_close,
    assert_deterministic,
    assert_grads_close,
    perf_target,
)

from .conftest import (
    DTYPES,
    dtype_id,
    gelu_tanh_and_mul_64,
    rms_norm_64,
    silu_and_mul_64,
)

pytest.importorskip("conch", reason="conch-triton-kernels is not installed (pip install -e "
                                    "'.[thirdparty]')")

from conch.ops.activation.gelu_tanh_and_mul import gelu_tanh_and_mul  # noqa: E402
from conch.ops.activation.silu_and_mul import silu_and_mul  # noqa: E402
from conch.ops.embedding.rotary_embedding import rotary_embedding  # noqa: E402
from conch.ops.normalization.rms_norm import fused_add_rms_norm, rms_norm  # noqa: E402
from conch.ops.quantization.int8 import static_scaled_int8_quant  # noqa: E402
from conch.ops.vision.bev_pool import bev_pool, bev_pool_backward  # noqa: E402

# The libraries allocate their outputs themselves: poisoned at birth, an element a kernel never
# writes fails as NaN (correctness/poison.py); perf tests timed under --triton-perf are left alone.
pytestmark = pytest.mark.poison_allocations

EPS = 1e-6
# (tokens, hidden): one token; odd widths around a power of two; a 3-D batch of sequences.
NORM_SHAPES = [(1, 64), (7, 37), (13, 1000), (3, 5, 129)]


def _ids(shapes):
    return ["x".join(map(str, s)) for s in shapes]


# -- RMSNorm ---------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
@pytest.mark.parametrize("shape", NORM_SHAPES, ids=_ids(NORM_SHAPES))
def test_rms_norm(make_tensor, shape, dtype):
    x = make_tensor(shape, dtype, dist="heavy")
    w = make_tensor(shape[-1], dtype)
    out = rms_norm(x, w, EPS)
    # vLLM's semantics, which conch keeps: x * rsqrt(...) rounded to the dtype, then times w in
    # the dtype (two roundings); torch's own result at that precision is the baseline.
    torch_out = torch.nn.functional.rms_norm(x, (shape[-1],), w, EPS)
    assert_close(out, rms_norm_64(x, w, EPS), baseline=None if dtype == torch.float32 else torch_out)


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
@pytest.mark.parametrize("shape", NORM_SHAPES[1:], ids=_ids(NORM_SHAPES[1:]))
def test_fused_add_rms_norm(make_tensor, shape, dtype):
    x, residual = make_tensor(shape, dtype), make_tensor(shape, dtype)
    w = make_tensor(shape[-1], dtype)
    added = x.double() + residual.double()
    x_in, r_in = x.clone(), residual.clone()
    out, new_residual = fused_add_rms_norm(x_in, r_in, w, EPS)  # in place: x and residual
    assert out.data_ptr() == x_in.data_ptr() and new_residual.data_ptr() == r_in.data_ptr()
    assert_close(new_residual, added)
    # The norm is taken of the sum as stored (rounded to the dtype), as vLLM defines it.
    torch_out = torch.nn.functional.rms_norm(x + residual, (shape[-1],), w, EPS)
    assert_close(out, rms_norm_64(new_residual, w, EPS),
                 baseline=None if dtype == torch.float32 else torch_out)


def test_rms_norm_is_deterministic(make_tensor):
    x, w = make_tensor((33, 1000), torch.float16), make_tensor(1000, torch.float16)
    assert_deterministic(lambda: rms_norm(x, w, EPS))


@perf_target(bandwidth_frac=0.5, peak="measured")
@pytest.mark.parametrize("dtype", (torch.bfloat16, torch.float16), ids=dtype_id)
def test_rms_norm_speed(make_tensor, triton_bench, dtype):
    tokens, hidden = (4, 256) if triton_bench.dry_run else (16384, 8192)  # Llama-70B's hidden
    x, w = make_tensor((tokens, hidden), dtype), make_tensor(hidden, dtype)
    triton_bench(lambda: rms_norm(x, w, EPS), bytes=2 * x.nbytes + w.nbytes,
                 baseline=lambda: torch.nn.functional.rms_norm(x, (hidden,), w, EPS))


# -- SwiGLU / GeGLU activations --------------------------------------------------------------

ACT_SHAPES = [(1, 2), (5, 74), (9, 2000), (2, 3, 258)]


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
@pytest.mark.parametrize("shape", ACT_SHAPES, ids=_ids(ACT_SHAPES))
def test_silu_and_mul(make_tensor, shape, dtype):
    x = make_tensor(shape, dtype)
    d = shape[-1] // 2
    out = silu_and_mul(x)
    # silu is rounded to the dtype before the product (vLLM's parity choice): two roundings.
    torch_out = torch.nn.functional.silu(x[..., :d]) * x[..., d:]
    assert_close(out, silu_and_mul_64(x), baseline=None if dtype == torch.float32 else torch_out)


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
@pytest.mark.parametrize("shape", ACT_SHAPES[1:3], ids=_ids(ACT_SHAPES[1:3]))
def test_gelu_tanh_and_mul(make_tensor, shape, dtype):
    x = make_tensor(shape, dtype)
    if dtype != torch.float32:
        # A library bug (on the GPU and under the interpreter alike): conch 1.3 calls
        # libdevice.tanh on 16-bit values, for which libdevice has no function (Triton 3.6 and 3.9
        # refuse to compile it: KeyError (triton.language.float16) in the extern dispatch).
        # Checked, not assumed: once conch casts to float32 first, this raises no more and fails.
        with pytest.raises(Exception, match=r"float16|bfloat16"):
            gelu_tanh_and_mul(x)
        pytest.xfail("conch 1.3 bug: libdevice.tanh on a 16-bit tensor does not compile")
    d = shape[-1] // 2
    torch_out = torch.nn.functional.gelu(x[..., :d], approximate="tanh") * x[..., d:]
    assert_close(gelu_tanh_and_mul(x), gelu_tanh_and_mul_64(x),
                 baseline=None if dtype == torch.float32 else torch_out)


@perf_target(bandwidth_frac=0.5, peak="measured")
@pytest.mark.parametrize("dtype", (torch.bfloat16,), ids=dtype_id)
def test_silu_and_mul_speed(make_tensor, triton_bench, dtype):
    tokens, inter = (4, 128) if triton_bench.dry_run else (16384, 14336)  # Llama-3-8B's MLP
    x = make_tensor((tokens, 2 * inter), dtype)
    triton_bench(lambda: silu_and_mul(x), bytes=x.nbytes * 3 // 2,
                 baseline=lambda: torch.nn.functional.silu(x[:, :inter]) * x[:, inter:])


# -- NeoX rotary embedding -------------------------------------------------------------------


def _cos_sin_cache(max_pos: int, rot_dim: int, base: float = 10000.0) -> torch.Tensor:
    inv_freq = 1.0 / base ** (torch.arange(0, rot_dim, 2, dtype=torch.float64) / rot_dim)
    freqs = torch.arange(max_pos, dtype=torch.float64)[:, None] * inv_freq[None, :]
    return torch.cat((freqs.cos(), freqs.sin()), dim=-1)


def _rope_64(positions, x, cache, head_size):
    """NeoX rotation of each head's first rot_dim features, in float64; the rest pass."""
    rot = cache.shape[-1]
    cos, sin = cache.double()[positions].chunk(2, dim=-1)
    x = x.double().view(x.shape[0], -1, head_size).clone()
    x1, x2 = x[..., : rot // 2].clone(), x[..., rot // 2: rot].clone()
    x[..., : rot // 2] = x1 * cos[:, None] - x2 * sin[:, None]
    x[..., rot // 2: rot] = x2 * cos[:, None] + x1 * sin[:, None]
    return x.flatten(1)


# (tokens, query heads, kv heads, head size, rotary dim): GQA, a partial rotary dim (GPT-NeoX's
# 25%), head sizes of Llama and of small models.
ROPE_CASES = [(1, 1, 1, 64, 64), (7, 4, 2, 64, 64), (13, 8, 1, 128, 32), (5, 3, 3, 80, 80)]


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
@pytest.mark.parametrize("case", ROPE_CASES, ids=_ids(ROPE_CASES))
def test_rotary_embedding(make_tensor, case, dtype):
    tokens, heads, kv_heads, head_size, rot_dim = case
    cache = _cos_sin_cache(4096, rot_dim).float()
    positions = torch.randint(0, 4096, (tokens,), generator=torch.Generator().manual_seed(tokens))
    positions = positions.to(make_tensor.device)
    cache = cache.to(make_tensor.device)
    q = make_tensor((tokens, heads * head_size), dtype)
    k = make_tensor((tokens, kv_heads * head_size), dtype)
    q_in, k_in = q.clone(), k.clone()
    q_out, k_out = rotary_embedding(positions, q_in, k_in, head_size, cache)  # in place
    assert q_out.data_ptr() == q_in.data_ptr()
    assert_close(q_out, _rope_64(positions, q, cache, head_size))
    assert_close(k_out, _rope_64(positions, k, cache, head_size))


def test_rotary_embedding_is_deterministic(make_tensor):
    cache = _cos_sin_cache(512, 64).float().to(make_tensor.device)
    positions = torch.arange(9, device=make_tensor.device) * 37
    q, k = make_tensor((9, 4 * 64), torch.bfloat16), make_tensor((9, 2 * 64), torch.bfloat16)
    assert_deterministic(lambda: rotary_embedding(positions, q.clone(), k.clone(), 64, cache))


# Against torch's own rotary embedding, timed in the same run. Its bandwidth does not carry
# from one GPU to another: 55% of the measured copy ceiling on an H100, 45% on an H200 (commit
# d3795db, BENCHMARKS.md), where a bandwidth_frac=0.5 target failed; the speedup over torch was
# 7.0x on both.
@perf_target(speedup=2.0)
def test_rotary_embedding_speed(make_tensor, triton_bench):
    # Llama-3-8B: 32 query heads, 8 kv heads of 128.
    tokens = 4 if triton_bench.dry_run else 16384
    cache = _cos_sin_cache(8192, 128).float().to(make_tensor.device)
    positions = torch.arange(tokens, device=make_tensor.device) % 8192
    q = make_tensor((tokens, 32 * 128), torch.bfloat16)
    k = make_tensor((tokens, 8 * 128), torch.bfloat16)
    cos, sin = cache[positions].chunk(2, dim=-1)

    def torch_rope(t):
        t = t.view(tokens, -1, 128)
        t1, t2 = t[..., :64], t[..., 64:]
        c, s = cos[:, None], sin[:, None]
        return torch.cat((t1 * c - t2 * s, t2 * c + t1 * s), dim=-1)

    # rotary_embedding rotates q and k in place, by design: declared, or the judge would call
    # them mutated inputs (docs/judging.md)
    triton_bench(lambda: rotary_embedding(positions, q, k, 128, cache),
                 bytes=2 * (q.nbytes + k.nbytes) + tokens * cache.stride(0) * cache.element_size(),
                 baseline=lambda: (torch_rope(q), torch_rope(k)), inplace=["q", "k"])


# -- static int8 quantization ----------------------------------------------------------------


@pytest.mark.xfail(strict=True, reason="conch 1.3 bug: static_scaled_int8_quant truncates toward "
                                       "zero instead of rounding to nearest as vLLM's op does "
                                       "(README.md beside this file)")
@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
def test_static_scaled_int8_quant_rounds_to_nearest(make_tensor, dtype):
    x = make_tensor((11, 300), dtype, scale=2.0)
    scale = torch.tensor([1 / 32], dtype=torch.float32, device=x.device)  # exact reciprocal
    out = torch.empty_like(x, dtype=torch.int8)
    static_scaled_int8_quant(out, x, scale)
    # vLLM: round half to even (nearbyint), then clamp to [-128, 127].
    want = torch.round(x.double() / scale.double()).clamp(-128, 127).to(torch.int8)
    assert_close(out, want)


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
def test_static_scaled_int8_quant_saturates(make_tensor, dtype):
    # Whole multiples of the scale (no rounding to disagree on) and values beyond int8's range.
    steps = torch.arange(-300, 301, 7, dtype=torch.float64)
    x = (steps / 32).to(dtype).to(make_tensor.device)
    scale = torch.tensor([1 / 32], dtype=torch.float32, device=x.device)
    out = torch.empty_like(x, dtype=torch.int8)
    static_scaled_int8_quant(out.view(1, -1), x.view(1, -1), scale)
    assert_close(out, steps.clamp(-128, 127).to(torch.int8).to(out.device))


# -- BEV pooling (forward and backward) ------------------------------------------------------


class BevPool(torch.autograd.Function):
    """conch's bev_pool and bev_pool_backward as BEVFusion wraps its QuickCumsum op."""

    @staticmethod
    def forward(ctx, feats, geom, starts, lengths, shape):
        ctx.save_for_backward(geom, starts, lengths)
        return bev_pool(feats, geom, starts, lengths, *shape)

    @staticmethod
    def backward(ctx, grad):
        geom, starts, lengths = ctx.saved_tensors
        return bev_pool_backward(grad.contiguous(), geom, starts, lengths), None, None, None, None


def _bev_inputs(make_tensor, points, channels, shape, dtype):
    """Points sorted by cell (B, Z, X, Y), as BEVFusion sorts them, with the intervals of equal
    cells; geom rows are (x, y, z, b)."""
    b, z, x, y = shape
    g = torch.Generator().manual_seed(points)
    cells = torch.randint(0, b * z * x * y, (points,), generator=g).sort().values
    geom = torch.stack([(cells // y) % x, cells % y, (cells // (x * y)) % z, cells // (z * x * y)],
                       dim=1).to(torch.int32)
    new = torch.ones(points, dtype=torch.bool)
    new[1:] = cells[1:] != cells[:-1]
    starts = torch.nonzero(new).flatten()
    lengths = torch.diff(torch.cat([starts, torch.tensor([points])]))
    dev = make_tensor.device
    feats = make_tensor((points, channels), dtype)
    return feats, geom.to(dev), starts.to(torch.int32).to(dev), lengths.to(torch.int32).to(dev)


def _bev_pool_64(feats, geom, starts, lengths, shape):
    b, z, x, y = shape
    out = torch.zeros((b, z, x, y, feats.shape[1]), dtype=torch.float64, device=feats.device)
    g = geom.long()
    return out.index_put((g[:, 3], g[:, 2], g[:, 0], g[:, 1]), feats.double(), accumulate=True)


# (points, channels, (batch, z, x, y)): crowded cells (long intervals), sparse cells, one point,
# channels not a power of two.
BEV_CASES = [(1, 3, (1, 1, 2, 2)), (200, 80, (2, 1, 5, 7)), (97, 17, (1, 2, 30, 30))]


BEV_IDS = _ids([(p, c, *s) for p, c, s in BEV_CASES])


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
@pytest.mark.parametrize("case", BEV_CASES, ids=BEV_IDS)
def test_bev_pool(make_tensor, case, dtype):
    points, channels, shape = case
    feats, geom, starts, lengths = _bev_inputs(make_tensor, points, channels, shape, dtype)
    out = bev_pool(feats, geom, starts, lengths, *shape)
    longest = int(lengths.max())
    # torch's own sum at the dtype's precision (index_put with accumulate) is the baseline.
    assert_close(out, _bev_pool_64(feats, geom, starts, lengths, shape),
                 reduction_size=longest if longest > 1 else None,
                 baseline=None if dtype == torch.float32 else _torch_bev_pool(feats, geom, shape))


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
@pytest.mark.parametrize("case", BEV_CASES, ids=BEV_IDS)
def test_bev_pool_gradient(make_tensor, case, dtype):
    points, channels, shape = case
    feats, geom, starts, lengths = _bev_inputs(make_tensor, points, channels, shape, dtype)
    # Each point's gradient is its cell's incoming gradient: a gather, no arithmetic (bf16 too).
    assert_grads_close(lambda f: BevPool.apply(f, geom, starts, lengths, shape),
                       lambda f: _torch_bev_pool(f, geom, shape), [feats], names=["feats"])


def test_bev_pool_is_deterministic(make_tensor):
    shape = (2, 1, 5, 7)
    feats, geom, starts, lengths = _bev_inputs(make_tensor, 200, 80, shape, torch.float32)
    assert_deterministic(lambda: bev_pool(feats, geom, starts, lengths, *shape))
    grad = make_tensor((*shape, 80))
    assert_deterministic(lambda: bev_pool_backward(grad, geom, starts, lengths))


# Against torch's index_put_ with accumulate, timed in the same run. bandwidth_frac=0.3 held on
# an H100 (39% of copy) and not on an H200 (22%, its samples bimodal: 80% noise); the speedup
# over torch was 2.7x and 4.6x (commit d3795db, BENCHMARKS.md).
@perf_target(speedup=2.0)
def test_bev_pool_speed(make_tensor, triton_bench):
    # BEVFusion's camera branch: ~ 6 cameras x 118 depth bins x 32 x 88 points, 80 channels,
    # onto a 1 x 360 x 360 grid; here a tenth of the points.
    points, shape = (300, (1, 1, 16, 16)) if triton_bench.dry_run else (200_000, (1, 1, 360, 360))
    feats, geom, starts, lengths = _bev_inputs(make_tensor, points, 80, shape, torch.float32)
    # What the call moves: bev_pool zero-fills its output (torch.zeros, one write of the grid),
    # then its kernel reads every point's features, each interval's start, length and the
    # coordinates of its first point (one geom row: the cell it pools into), and writes each
    # occupied cell once (one per interval).
    zero_fill = 80 * 4 * shape[2] * shape[3]
    intervals = starts.numel()
    cells_written = intervals * 80 * 4
    geom_read = intervals * geom.stride(0) * geom.element_size()
    triton_bench(lambda: bev_pool(feats, geom, starts, lengths, *shape),
                 bytes=feats.nbytes + geom_read + starts.nbytes + lengths.nbytes + zero_fill
                 + cells_written,
                 baseline=lambda: _torch_bev_pool(feats, geom, shape))


def _torch_bev_pool(feats, geom, shape):
    b, z, x, y = shape
    out = torch.zeros((b, z, x, y, feats.shape[1]), dtype=feats.dtype, device=feats.device)
    g = geom.long()
    return out.index_put_((g[:, 3], g[:, 2], g[:, 0], g[:, 1]), feats, accumulate=True)
