"""FlagGems (flag-gems, BAAI's Triton operator library) through its own entry points: the fused
ops it exports (flag_gems.rms_norm, fused_add_rms_norm, silu_and_mul, cross_entropy_loss) and the
aten operators it replaces under flag_gems.use_gems() (softmax, layer_norm, mm), forward and
backward. Correctness at odd shapes in fp32/bf16/fp16 against float64, gradients, determinism,
and perf markers at LLM sizes.

FlagGems 5.0.2 runs only on a GPU (README.md beside this file): without one the module skips.
"""

from __future__ import annotations

import importlib.util

import pytest
import torch

from pytest_triton import (
    assert_close,
    assert_deterministic,
    assert_grads_close,
    interpreting,
    perf_target,
)

from .conftest import DTYPES, dtype_id, rms_norm_64

if importlib.util.find_spec("flag_gems") is None:
    pytest.skip("flag-gems is not installed (pip install -e '.[thirdparty]')",
                allow_module_level=True)
if interpreting():
    # Its import asks the GPU for its name (flag_gems.utils.libentry's tuning cache) and its
    # launcher (LibEntry) unwraps compiled JITFunctions, which the interpreter does not make.
    pytest.skip("FlagGems 5.0.2 cannot run under Triton's interpreter: importing it needs a GPU "
                "(documented limitation, tests/thirdparty/README.md)", allow_module_level=True)

import flag_gems  # noqa: E402

# The libraries allocate their outputs themselves: poisoned at birth, an element a kernel never
# writes fails as NaN (correctness/poison.py); perf tests timed under --triton-perf are left alone.
pytestmark = pytest.mark.poison_allocations

EPS = 1e-6


def _ids(shapes):
    return ["x".join(map(str, s)) for s in shapes]


def _low(dtype: torch.dtype) -> bool:
    return dtype != torch.float32


class UnderGems(torch.autograd.Function):
    """op(*tensors) with FlagGems' aten kernels registered (flag_gems.use_gems(include=...)) for
    its forward and its backward, as a model run under flag_gems.enable() gets them; the
    references run outside, on torch's own kernels."""

    @staticmethod
    def forward(ctx, op, include, *tensors):
        with flag_gems.use_gems(include=include), torch.enable_grad():
            leaves = [t.detach().requires_grad_(t.requires_grad) for t in tensors]
            out = op(*leaves)
        ctx.graph = (include, leaves, out)
        return out.detach()

    @staticmethod
    def backward(ctx, grad):
        include, leaves, out = ctx.graph
        wanted = [t for t in leaves if t.requires_grad]
        with flag_gems.use_gems(include=include):
            grads = iter(torch.autograd.grad(out, wanted, grad, allow_unused=True))
        return (None, None, *[next(grads) if t.requires_grad else None for t in leaves])


def under_gems(op, include):
    return lambda *tensors: UnderGems.apply(op, include, *tensors)


# -- RMSNorm (flag_gems.rms_norm: forward and backward kernels) -------------------------------

# One row; odd widths; the loop kernel (N > 4096); a 3-D batch.
NORM_SHAPES = [(1, 64), (7, 37), (13, 1000), (5, 5003), (3, 5, 129)]


def _torch_rms_norm(x, w):
    return torch.nn.functional.rms_norm(x, (x.shape[-1],), w, EPS)


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
@pytest.mark.parametrize("shape", NORM_SHAPES, ids=_ids(NORM_SHAPES))
def test_rms_norm(make_tensor, shape, dtype):
    x = make_tensor(shape, dtype, dist="heavy")
    w = make_tensor(shape[-1], dtype)
    n = shape[-1]
    out = assert_grads_close(lambda x, w: flag_gems.rms_norm(x, (n,), w, EPS), _torch_rms_norm,
                             (x, w), reduction_sizes={"x": n}, baseline=_low(dtype))
    assert_close(out, rms_norm_64(x, w, EPS),
                 baseline=_torch_rms_norm(x, w) if _low(dtype) else None)


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
@pytest.mark.parametrize("shape", NORM_SHAPES[1:], ids=_ids(NORM_SHAPES[1:]))
def test_fused_add_rms_norm(make_tensor, shape, dtype):
    x, residual = make_tensor(shape, dtype), make_tensor(shape, dtype)
    w = make_tensor(shape[-1], dtype)
    x_in, r_in = x.clone(), residual.clone()
    out, new_residual = flag_gems.fused_add_rms_norm(x_in, r_in, (shape[-1],), w, EPS)
    assert_close(new_residual, x.double() + residual.double())
    # The norm of the sum as stored in the dtype, as vLLM (which this op serves) defines it.
    assert_close(out, rms_norm_64(new_residual, w, EPS),
                 baseline=_torch_rms_norm(x + residual, w) if _low(dtype) else None)


def test_rms_norm_is_deterministic(make_tensor):
    x = make_tensor((333, 5003), torch.bfloat16, requires_grad=True)
    w = make_tensor(5003, torch.bfloat16, requires_grad=True)
    g = make_tensor((333, 5003), torch.bfloat16)

    def forward_and_backward():
        y = flag_gems.rms_norm(x, (5003,), w, EPS)
        return (y, *torch.autograd.grad(y, (x, w), g))

    assert_deterministic(forward_and_backward)


@perf_target(bandwidth_frac=0.5, peak="measured")
@pytest.mark.parametrize("dtype", (torch.bfloat16, torch.float16), ids=dtype_id)
def test_rms_norm_speed(make_tensor, triton_bench, dtype):
    tokens, hidden = 16384, 8192  # Llama-70B's hidden size
    x, w = make_tensor((tokens, hidden), dtype), make_tensor(hidden, dtype)
    triton_bench(lambda: flag_gems.rms_norm(x, (hidden,), w, EPS),
                 bytes=2 * x.nbytes + w.nbytes, baseline=lambda: _torch_rms_norm(x, w))


# -- SwiGLU's activation (flag_gems.silu_and_mul(a, b), forward and backward) -----------------

ACT_SHAPES = [(1, 1), (5, 37), (9, 1000), (2, 3, 129)]


def _torch_silu_and_mul(a, b):
    return torch.nn.functional.silu(a) * b


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
@pytest.mark.parametrize("shape", ACT_SHAPES, ids=_ids(ACT_SHAPES))
def test_silu_and_mul(make_tensor, shape, dtype):
    a, b = make_tensor(shape, dtype), make_tensor(shape, dtype)
    out = assert_grads_close(flag_gems.silu_and_mul, _torch_silu_and_mul, (a, b),
                             baseline=_low(dtype))
    assert_close(out, _torch_silu_and_mul(a.double(), b.double()),
                 baseline=_torch_silu_and_mul(a, b) if _low(dtype) else None)


@perf_target(bandwidth_frac=0.5, peak="measured")
def test_silu_and_mul_speed(make_tensor, triton_bench):
    a = make_tensor((16384, 14336), torch.bfloat16)  # Llama-3-8B's MLP
    b = make_tensor((16384, 14336), torch.bfloat16)
    triton_bench(lambda: flag_gems.silu_and_mul(a, b), bytes=3 * a.nbytes,
                 baseline=lambda: _torch_silu_and_mul(a, b))


# -- softmax (aten::_softmax and its backward under use_gems) --------------------------------

SOFTMAX_INCLUDE = ["softmax", "softmax_backward"]
# (shape, dim): rows of odd widths, the loop kernel's wide rows, a softmax over a non-inner dim.
SOFTMAX_CASES = [((1, 1), -1), ((7, 37), -1), ((5, 32003), -1), ((33, 5, 17), 0)]


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
@pytest.mark.parametrize("case", SOFTMAX_CASES, ids=[f"{_ids([s])[0]}-dim{d}" for s, d in SOFTMAX_CASES])
def test_softmax(make_tensor, case, dtype):
    shape, dim = case
    x = make_tensor(shape, dtype, dist="heavy", scale=0.01)  # logits up to 10: no overflow
    softmax = lambda x: torch.softmax(x, dim)
    out = assert_grads_close(under_gems(softmax, SOFTMAX_INCLUDE), softmax, (x,),
                             reduction_sizes={"x": shape[dim]}, baseline=_low(dtype))
    assert_close(out, softmax(x.double()), baseline=softmax(x) if _low(dtype) else None)


@perf_target(bandwidth_frac=0.5, peak="measured")
def test_softmax_speed(make_tensor, triton_bench):
    x = make_tensor((4096, 32000), torch.bfloat16)  # Llama-2's vocabulary
    with flag_gems.use_gems(include=SOFTMAX_INCLUDE):
        triton_bench(lambda: torch.softmax(x, -1), bytes=2 * x.nbytes)


# -- layer_norm (aten::native_layer_norm and its backward under use_gems) --------------------

LAYER_NORM_INCLUDE = ["layer_norm", "layer_norm_backward"]
LAYER_NORM_BACKWARD_ROWS_BUG = (
    "flag_gems 5.0.2 bug: layer_norm_backward takes input.shape[0] as the rows and the rest as "
    "the normalized size, whatever normalized_shape says (ops/layernorm.py: M = input.shape[0]): "
    "a (3, 5, 129) input normalized over its last 129 gets the gradients of 3 rows of 645, and "
    "dw, db of 129 elements are written 645 wide (README.md beside this file)")


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
@pytest.mark.parametrize("shape", NORM_SHAPES, ids=_ids(NORM_SHAPES))
def test_layer_norm(make_tensor, request, shape, dtype):
    if len(shape) > 2:  # the forward's rows are right; its backward's are not
        request.applymarker(pytest.mark.xfail(strict=True, reason=LAYER_NORM_BACKWARD_ROWS_BUG))
    n = shape[-1]
    x = make_tensor(shape, dtype, dist="heavy")
    w, b = make_tensor(n, dtype), make_tensor(n, dtype)
    layer_norm = lambda x, w, b: torch.nn.functional.layer_norm(x, (n,), w, b, EPS)
    out = assert_grads_close(under_gems(layer_norm, LAYER_NORM_INCLUDE), layer_norm, (x, w, b),
                             names=["x", "w", "b"], reduction_sizes={"x": n},
                             baseline=_low(dtype))
    assert_close(out, layer_norm(x.double(), w.double(), b.double()),
                 baseline=layer_norm(x, w, b) if _low(dtype) else None)


# -- cross-entropy loss (flag_gems.cross_entropy_loss, forward and backward) ------------------

CROSS_ENTROPY_IGNORED_READ_BUG = (
    "flag_gems 5.0.2 bug: celoss_indices_kernel loads the logit at target*D for an ignored target "
    "(-100) too (mask=tgt_mask, not the ignore mask): 100 rows before the token's, 400 bytes "
    "before the tensor for token 0. Discarded, so the loss is right where that address is mapped; "
    "under --triton-judge's poisoned allocations it was not, on an H100, and the CUDA context was "
    "lost (README.md). Not strict: whether it faults depends on where the allocator put the logits")

# (tokens, vocabulary): one token; odd vocabularies; a real one.
CE_CASES = [(1, 10), (7, 1001), (33, 32000)]


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
@pytest.mark.parametrize("case", CE_CASES, ids=_ids(CE_CASES))
def test_cross_entropy_loss(make_tensor, request, case, dtype):
    if request.config.getoption("triton_judge", default=None) == "on":  # poisoned allocations
        request.applymarker(pytest.mark.xfail(strict=False, reason=CROSS_ENTROPY_IGNORED_READ_BUG))
    tokens, vocab = case
    logits = make_tensor((tokens, vocab), dtype, scale=2.0)
    target = make_tensor(tokens, torch.int64, low=0, high=vocab)
    target[::3] = -100  # ignored tokens, as padding gives
    if tokens == 1:
        target[0] = vocab - 1
    ce = lambda logits: torch.nn.functional.cross_entropy(logits, target)
    loss = assert_grads_close(lambda logits: flag_gems.cross_entropy_loss(logits, target), ce,
                              (logits,), reduction_sizes={"logits": vocab}, baseline=_low(dtype))
    assert_close(loss, ce(logits.double()), reduction_size=vocab,
                 baseline=ce(logits) if _low(dtype) else None)


def test_cross_entropy_loss_is_deterministic(make_tensor):
    logits = make_tensor((333, 32000), torch.bfloat16, requires_grad=True)
    target = make_tensor(333, torch.int64, low=0, high=32000)

    def forward_and_backward():
        loss = flag_gems.cross_entropy_loss(logits, target)
        return loss, torch.autograd.grad(loss, logits)[0]

    assert_deterministic(forward_and_backward)


@perf_target(bandwidth_frac=0.5, peak="measured")
def test_cross_entropy_loss_speed(make_tensor, triton_bench):
    logits = make_tensor((4096, 128256), torch.bfloat16)  # Llama-3's vocabulary
    target = make_tensor(4096, torch.int64, low=0, high=128256)
    triton_bench(lambda: flag_gems.cross_entropy_loss(logits, target), bytes=logits.nbytes,
                 baseline=lambda: torch.nn.functional.cross_entropy(logits, target))


# -- mm (aten::mm under use_gems) -------------------------------------------------------------

MM_CASES = [(1, 1, 1), (17, 33, 65), (257, 200, 136), (1000, 4096, 1)]
HOPPER_GEMV_BUG = (
    "flag_gems 5.0.2 bug, Hopper: mm with one column (N=1) takes gemv_kernel "
    "(runtime/backend/_nvidia/hopper/ops/mm.py), which multiplies and sums the 16-bit operands in "
    "16 bits (tl.sum(a * b[None, :], axis=1) on fp16/bf16 tiles) before adding to its float32 "
    "accumulator: errors of a few units of 16-bit roundoff of the sum's scale at K=4096, where "
    "cuBLAS and FlagGems' own GEMM kernels accumulate every product in float32 (README.md)")


def _hopper_gemv(n: int, dtype: torch.dtype) -> bool:
    """Whether FlagGems' Hopper backend runs this mm through its 16-bit gemv (N=1)."""
    return (n == 1 and dtype in (torch.float16, torch.bfloat16) and torch.cuda.is_available()
            and torch.cuda.get_device_capability()[0] == 9)


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
@pytest.mark.parametrize("case", MM_CASES, ids=_ids(MM_CASES))
def test_mm(make_tensor, request, case, dtype):
    m, k, n = case
    if _hopper_gemv(n, dtype) and k > 1:  # one product per output (K=1) rounds once: exact
        request.applymarker(pytest.mark.xfail(strict=True, reason=HOPPER_GEMV_BUG))
    a, b = make_tensor((m, k), dtype), make_tensor((k, n), dtype)
    with flag_gems.use_gems(include=["mm"]):
        out = torch.mm(a, b)
    # fp32 operands: tensor-core dots in tf32, as FlagGems' kernels (and cuBLAS by default) do.
    assert_close(out, a.double() @ b.double(), reduction_size=k if k > 1 else None,
                 precision="tf32" if dtype == torch.float32 else None)


@perf_target(tflops_frac=0.5, peak="measured")
@pytest.mark.parametrize("dtype", (torch.bfloat16, torch.float16), ids=dtype_id)
def test_mm_speed(make_tensor, triton_bench, dtype):
    a, b = make_tensor((8192, 8192), dtype), make_tensor((8192, 8192), dtype)
    with flag_gems.use_gems(include=["mm"]):
        triton_bench(lambda: torch.mm(a, b), flops=2 * 8192**3, dtype=dtype)
