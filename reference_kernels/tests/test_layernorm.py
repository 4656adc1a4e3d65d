"""layernorm (forward), layernorm_backward and layer_norm (autograd) against torch in float64,
on every path (single pass / rows split over programs / looped forward; whole-row / split
backward), and the control they reject."""

from __future__ import annotations

import pytest
import torch

from pytest_triton import assert_close, assert_grads_close, skip_interpreter_gap
from reference_kernels import _rows as rows
from reference_kernels import layernorm as ln
from reference_kernels.layernorm import (
    DTYPES,
    layer_norm,
    layernorm,
    layernorm_backward,
    layernorm_backward_reference,
    layernorm_inputs,
    layernorm_reference,
)

from . import controls

DTYPE_PARAMS = [pytest.param(d, id=str(d).removeprefix("torch.")) for d in DTYPES]
# Widths of 1 (y must be the bias) only in the forward: there dx and dw are exactly 0. Width 2
# is left out: its rows' variance is often ~eps, where rstd ~ 1/sqrt(eps) magnifies the float32
# rounding of x - mean past the table's tolerance, in torch's float32 layer_norm as in ours.
SHAPES = [(3, 127), (127, 129), (129, 127), (5, 1025), (2, 4097), (65536, 5)]
FWD_SHAPES = [(1, 1), (65536, 1), *SHAPES]
# Small steps so that small rows exercise the looped forward and the split backward: 129
# columns end in a 1-column block, and 37 rows make 5 chunks of 8, the last one short.
LOOPED_FWD = {"BLOCK_N": 32, "SPLIT": False}
# Rows split over 32-column programs that exchange statistics: GPU only, as in test_softmax (the
# interpreter runs one program at a time; there the split path runs with one chunk per row:
# SPLIT_ONE_FWD below, and the default for wide rows there).
SPLIT_FWD = {"BLOCK_N": 32, "SPLIT": True}
SPLIT_GAP = pytest.mark.interpreter_gap(
    "other", reason="split rows need their programs to run at once; the interpreter runs one "
                    "program at a time")
SPLIT_BWD = {"BLOCK_N": 32, "SUMS_BLOCK_N": 32, "rows_per_chunk": 8}
# w and b loaded after the statistics (after the exchange, split), not with x.
LATE_WB = {"LATE_WB": True}
# The split kernel with one chunk per row, which the interpreter can run.
SPLIT_ONE_FWD = {"BLOCK_N": 256, "SPLIT": True}
FWD_PATHS = [pytest.param(None, id="single"), pytest.param(LATE_WB, id="single-late-wb"),
             pytest.param(LOOPED_FWD, id="looped"),
             pytest.param(SPLIT_FWD, id="split", marks=SPLIT_GAP),
             pytest.param({**SPLIT_FWD, **LATE_WB, "RELOAD": True}, id="split-late-wb-reload",
                          marks=SPLIT_GAP),
             pytest.param(SPLIT_ONE_FWD, id="split-one-chunk"),
             pytest.param({**SPLIT_ONE_FWD, **LATE_WB, "RELOAD": True},
                          id="split-one-chunk-late-wb-reload")]
# The straggler candidates: row loops pipelined through shared memory (a no-op for
# the interpreter, which runs them in order), and the split path band by band: bands of
# 2 chunks of 8 rows (x and dy of 16 rows x 129 fp32 columns in 16.5 KB), so that 37 rows
# take 3 bands, the last one short.
STAGED_BWD = {"NUM_STAGES": 3}
BANDED_BWD = {**SPLIT_BWD, "NUM_STAGES": 2, "SUMS_NUM_STAGES": 3, "band_bytes": 17000}
BWD_PATHS = [pytest.param(None, id="whole-rows"), pytest.param(SPLIT_BWD, id="split"),
             pytest.param(STAGED_BWD, id="whole-rows-staged"),
             pytest.param(BANDED_BWD, id="split-banded")]


def _cfg(config):
    return {} if config is None else {"config": config}


def check_forward(make_tensor, shape, dtype, *, eps=1e-5, config=None, out_layout=False,
                  **input_kwargs):
    """layernorm into a poisoned output against float64 torch: y, and the statistics."""
    x, w, b = layernorm_inputs(make_tensor, *shape, dtype=dtype, **input_kwargs)
    out = make_tensor.poisoned_like(x, noncontiguous=out_layout)
    y, mean, rstd = layernorm(x, w, b, eps, out=out, **_cfg(config))
    assert y is out and mean.dtype == rstd.dtype == torch.float32
    y_ref, mean_ref, rstd_ref = layernorm_reference(x.double(), w.double(), b.double(), eps)
    assert_close(y, y_ref)
    n_cols = shape[-1]
    # mean and rstd are sums over the row. The mean of a zero-centred row is ~1/sqrt(n_cols),
    # which at 65536 columns sits inside the sqrt(n_cols)-widened atol: the check of y above is
    # what proves the mean was written and right.
    assert_close(mean, mean_ref, reduction_size=n_cols, allow_trivial=True)
    assert_close(rstd, rstd_ref, reduction_size=n_cols)
    return x, w, b, mean, rstd


def check_backward(make_tensor, shape, dtype, *, config=None, dx_kernel=None, layout=False,
                   **input_kwargs):
    """layernorm_backward (or dx_kernel) into poisoned outputs against float64 torch autograd."""
    x, w, b = layernorm_inputs(make_tensor, *shape, dtype=dtype, noncontiguous=layout,
                               **input_kwargs)
    _, mean, rstd = layernorm(x, w, b)
    dy = make_tensor.like(x, noncontiguous=layout)
    dx = make_tensor.poisoned_like(x, noncontiguous=layout)
    dx_ref, dw_ref, db_ref = layernorm_backward_reference(dy.double(), x.double(), w.double(),
                                                          b.double())
    n_rows, n_cols = x.numel() // shape[-1], shape[-1]
    # dx = rstd * (w*dy - xhat * c1 - c2) with xhat = (x - mean) * rstd: the rounding of the
    # row's float32 mean reaches dx multiplied by rstd**2. A 5-wide row whose values nearly agree
    # has rstd ~30, ~1000x the error of a typical row (float32 emulation, 400K 5-wide rows: max
    # error 25 ulp x rstd**2, 480 ulp unscaled; on an H100 2 of 327680 elements missed the
    # unscaled tolerance). So each row of dx is compared after dividing by its rstd**2 (at least
    # 1, rounded up to a power of two: the division is exact in every dtype; at most 2**14,
    # which float16 holds). Rows of typical spread (rstd ~1) are compared as they are, and a
    # dropped term stays O(1) after the division.
    rstd_ref = layernorm_reference(x.double(), w.double(), b.double())[2]
    row_scale = torch.exp2(torch.ceil(torch.log2(rstd_ref.clamp(min=1.0) ** 2))).clamp(max=2**14)
    row_scale = row_scale.to(x.dtype).unsqueeze(-1)
    if dx_kernel is not None:
        dx_kernel(dy, x, w, mean, rstd, dx=dx)
        assert_close(dx / row_scale, dx_ref / row_scale, reduction_size=n_cols)
        return
    dw, db = make_tensor.poisoned_like(w), make_tensor.poisoned_like(b)
    result = layernorm_backward(dy, x, w, mean, rstd, dx=dx, dw=dw, db=db, **_cfg(config))
    assert result[0] is dx and result[1] is dw and result[2] is db
    # dx holds row sums (mean of w * dy, and of xhat * w * dy); dw and db are column sums.
    assert_close(dx / row_scale, dx_ref / row_scale, reduction_size=n_cols)
    assert_close(dw, dw_ref, reduction_size=n_rows)
    assert_close(db, db_ref, reduction_size=n_rows)


@pytest.mark.parametrize("shape", FWD_SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("dtype", DTYPE_PARAMS)
def test_forward_matches_torch(dtype, shape, make_tensor):
    check_forward(make_tensor, shape, dtype)


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("dtype", DTYPE_PARAMS)
def test_backward_matches_torch(dtype, shape, make_tensor):
    check_backward(make_tensor, shape, dtype)


@pytest.mark.parametrize("config", [p for p in FWD_PATHS if p.id in ("single", "looped", "split",
                                                                      "split-one-chunk")])
@pytest.mark.parametrize("dist", ["normal", "heavy"])
@pytest.mark.parametrize("dtype", DTYPE_PARAMS)
def test_forward_no_worse_than_torch(dtype, dist, config, make_tensor):
    # FlashAttention's rule: y's max and mean errors against float64 at most 2x those of torch's
    # layer_norm in the same dtype, which like these kernels computes in float32 and rounds y
    # once (under the interpreter fp16 errors are 1.00-1.05x torch's, float32 ones under the
    # floor). A kernel that rounded an intermediate to the input dtype would fail.
    if dtype == torch.bfloat16:
        skip_interpreter_gap("bf16_rounding")
    x, w, b = layernorm_inputs(make_tensor, 9, 129, dtype=dtype, dist=dist)
    y = layernorm(x, w, b, out=make_tensor.poisoned_like(x), **_cfg(config))[0]
    y_ref = layernorm_reference(x.double(), w.double(), b.double())[0]
    assert_close(y, y_ref, baseline=layernorm_reference(x, w, b)[0])


@pytest.mark.parametrize("shape", [(1, 33), (9, 129), (4, 1000)], ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("dtype", DTYPE_PARAMS)
def test_looped_forward_matches_torch(dtype, shape, make_tensor):
    check_forward(make_tensor, shape, dtype, config=LOOPED_FWD)


@pytest.mark.parametrize("shape", [(1, 33), (37, 100), (9, 129)], ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("dtype", DTYPE_PARAMS)
def test_split_backward_matches_torch(dtype, shape, make_tensor):
    check_backward(make_tensor, shape, dtype, config=SPLIT_BWD)


@pytest.mark.parametrize("config", [STAGED_BWD, BANDED_BWD, {**BANDED_BWD, "band_bytes": 1}],
                         ids=["staged", "banded", "one-chunk-bands"])
@pytest.mark.parametrize("shape", [(1, 33), (37, 129), (65, 100)], ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("dtype", DTYPE_PARAMS)
def test_backward_candidates_match_torch(dtype, shape, config, make_tensor):
    # A band smaller than one chunk of rows still takes one chunk per band.
    check_backward(make_tensor, shape, dtype, config=config)


@SPLIT_GAP
@pytest.mark.parametrize("config", [pytest.param(SPLIT_FWD, id="early-wb"),
                                    pytest.param({**SPLIT_FWD, **LATE_WB}, id="late-wb"),
                                    pytest.param({**SPLIT_FWD, "RELOAD": True}, id="reload")])
@pytest.mark.parametrize("shape", [(1, 33), (9, 129), (4, 1000), (3, 8191)],
                         ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("dtype", DTYPE_PARAMS)
def test_split_forward_matches_torch(dtype, shape, config, make_tensor):
    check_forward(make_tensor, shape, dtype, config=config)


@pytest.mark.parametrize("dtype", DTYPE_PARAMS)
def test_wide_row_paths_by_default(dtype, make_tensor):
    # 65536 columns: the split forward, with the default configs (one chunk per row under the
    # interpreter, 4096 columns per program on a GPU); 16384: the single pass (w and b loaded
    # after the statistics in 16-bit dtypes).
    check_forward(make_tensor, (1, 65536), dtype)
    check_forward(make_tensor, (2, 16384), dtype)


def test_wide_row_backward_by_default(make_tensor):
    # 65536 columns: the split backward (row sums first), with the default config.
    check_backward(make_tensor, (1, 65536), torch.float32)


@pytest.mark.parametrize("config", FWD_PATHS)
@pytest.mark.parametrize("dtype", DTYPE_PARAMS)
def test_forward_row_stride_differs_from_width(dtype, config, make_tensor):
    check_forward(make_tensor, (7, 129), dtype, config=config, out_layout="rows",
                  noncontiguous="rows")


@pytest.mark.parametrize("config", BWD_PATHS)
@pytest.mark.parametrize("dtype", DTYPE_PARAMS)
def test_backward_row_stride_differs_from_width(dtype, config, make_tensor):
    check_backward(make_tensor, (7, 129), dtype, config=config, layout="rows")


@pytest.mark.parametrize("config", FWD_PATHS)
@pytest.mark.parametrize("dtype", DTYPE_PARAMS)
def test_forward_heavy_magnitudes(dtype, config, make_tensor):
    check_forward(make_tensor, (6, 129), dtype, config=config, dist="heavy")


@pytest.mark.parametrize("config", BWD_PATHS)
@pytest.mark.parametrize("dtype", DTYPE_PARAMS)
def test_backward_heavy_magnitudes(dtype, config, make_tensor):
    check_backward(make_tensor, (6, 129), dtype, config=config, dist="heavy")


@pytest.mark.parametrize("config", FWD_PATHS)
@pytest.mark.parametrize("dtype", DTYPE_PARAMS)
def test_constant_rows_give_bias(dtype, config, make_tensor):
    # Zero variance: rstd = 1/sqrt(eps), and y must be exactly the bias. 0.75 and its multiples
    # by small integers are exact in every dtype, so the mean is exact too.
    x, w, b, mean, rstd = check_forward(make_tensor, (3, 129), dtype, config=config,
                                        dist="constant", value=0.75)
    assert_close(rstd, torch.full_like(rstd, 1e-5 ** -0.5))


@pytest.mark.parametrize("eps", [1e-5, 0.5])
def test_eps_is_used(eps, make_tensor):
    check_forward(make_tensor, (5, 65), torch.float32, eps=eps, scale=0.5)


def _layer_norm_reference(x, weight, bias, eps):
    return torch.nn.functional.layer_norm(x, x.shape[-1:], weight, bias, eps)


@pytest.mark.parametrize("dtype", DTYPE_PARAMS)
def test_autograd_function(dtype, make_tensor):
    # 3-D x: the leading dimensions are rows (15 of them). Every input's gradient against float64
    # autograd: x's holds sums over its row (67 columns); weight's and bias's are sums over the
    # 15 rows (their broadcast count, the default).
    x = make_tensor((3, 5, 67), dtype)
    _, w, b = layernorm_inputs(make_tensor, 1, 67, dtype=dtype)
    y = assert_grads_close(layer_norm, _layer_norm_reference, (x, w, b, 1e-5),
                           reduction_sizes={"x": 67})
    assert_close(y, _layer_norm_reference(x.double(), w.double(), b.double(), 1e-5))


@pytest.mark.parametrize("dtype", DTYPE_PARAMS)
def test_autograd_function_no_worse_than_torch(dtype, make_tensor):
    # The gradients' max and mean errors at most 2x those of torch's own layer_norm backward in
    # the same dtype (which, like these kernels, accumulates in float32).
    if dtype == torch.bfloat16:
        skip_interpreter_gap("bf16_rounding")
    x = make_tensor((9, 129), dtype)
    _, w, b = layernorm_inputs(make_tensor, 1, 129, dtype=dtype)
    assert_grads_close(layer_norm, _layer_norm_reference, (x, w, b, 1e-5), baseline=True)


def test_autograd_control_with_a_wrong_dx_is_rejected_naming_x(make_tensor):
    # The negative control: dx drops the mean of w * dy; dw, db and y are right. The check must
    # fail on x's gradient, and only on it.
    x, w, b = layernorm_inputs(make_tensor, 7, 129)
    args = (x, w, b, 1e-5)
    with pytest.raises(AssertionError) as info:
        assert_grads_close(controls.LayerNormDropsTermFunction.apply, _layer_norm_reference,
                           args, reduction_sizes={"x": 129})
    lines = str(info.value).splitlines()
    assert lines[0] == "Gradients off for 1 of 3 inputs: x"
    assert lines[1] == "gradient of x (float32 (7, 129), reduction_size=129 (given)):"
    assert lines[2].startswith("    Tensors are not close (torch.float32, shape (7, 129)")
    assert lines[-1] == ("Gradients that match: weight (reduction_size=7 (broadcast)), "
                         "bias (reduction_size=7 (broadcast))")
    # The same check passes the real Function on the same inputs.
    assert_grads_close(layer_norm, _layer_norm_reference, args, reduction_sizes={"x": 129})


def test_empty_rows(make_tensor):
    x, w, b = layernorm_inputs(make_tensor, 0, 8)
    y, mean, rstd = layernorm(x, w, b)
    assert y.shape == (0, 8) and mean.shape == rstd.shape == (0,)
    dx, dw, db = layernorm_backward(x, x, w, mean, rstd)
    assert dx.shape == (0, 8)
    assert torch.equal(dw, torch.zeros_like(w)) and torch.equal(db, torch.zeros_like(b))


def test_rejects_bad_input(make_tensor):
    x, w, b = layernorm_inputs(make_tensor, 4, 9)
    with pytest.raises(ValueError, match="contiguous columns"):
        layernorm(make_tensor((4, 9), noncontiguous="elements"), w, b)
    with pytest.raises(ValueError, match=r"weight must be a contiguous \(9,\)"):
        layernorm(x, make_tensor(8), b)
    with pytest.raises(TypeError, match="bias must be torch.float32"):
        layernorm(x, w, b.half())
    with pytest.raises(TypeError, match="not supported"):
        layernorm(x.double(), w.double(), b.double())
    with pytest.raises(ValueError, match="last dimension is empty"):
        layernorm(make_tensor((4, 0)), make_tensor(0), make_tensor(0))
    with pytest.raises(ValueError, match="eps"):
        layernorm(x, w, b, -1.0)
    for eps in ("1e-5", None):
        with pytest.raises(ValueError, match=f"eps={eps!r} must be >= 0"):
            layernorm(x, w, b, eps)
    with pytest.raises(ValueError, match="unknown config key"):
        layernorm(x, w, b, config={"ROW": 2})
    with pytest.raises(ValueError, match="BLOCK_N=1 with SPLIT=True.*must be >= 2"):
        layernorm(x, w, b, config={"BLOCK_N": 1, "SPLIT": True})
    _, mean, rstd = layernorm(x, w, b)
    with pytest.raises(ValueError, match="mean must be a contiguous float32"):
        layernorm_backward(x, x, w, mean.half(), rstd)
    with pytest.raises(ValueError, match="dy must be like x"):
        layernorm_backward(x[:, :8], x, w, mean, rstd)
    with pytest.raises(ValueError, match="dw must be"):
        layernorm_backward(x, x, w, mean, rstd, dw=make_tensor(8))


# --- negative control: the backward check must reject a dx that drops a term -------------------

@pytest.mark.parametrize("dtype", DTYPE_PARAMS)
def test_rejects_dx_without_mean_term(dtype, make_tensor):
    with pytest.raises(AssertionError, match="Mismatched elements"):
        check_backward(make_tensor, (7, 129), dtype, dx_kernel=controls.layernorm_bwd_drops_term)


def test_drops_term_control_needs_the_term(make_tensor):
    # The same control is right when the dropped term is 0 (w * dy of zero mean per row): the
    # check above fails on the term itself, not on something else the control gets wrong.
    x, w, b = layernorm_inputs(make_tensor, 7, 129)
    _, mean, rstd = layernorm(x, w, b)
    dy = make_tensor.like(x)
    dy = (dy * w - (dy * w).mean(dim=-1, keepdim=True)) / w  # now mean(w * dy) == 0 per row
    dx = make_tensor.poisoned_like(x)
    controls.layernorm_bwd_drops_term(dy, x, w, mean, rstd, dx=dx)
    dx_ref, _, _ = layernorm_backward_reference(dy.double(), x.double(), w.double(), b.double())
    assert_close(dx, dx_ref, reduction_size=129)


# --- compiled resources -------------------------------------------------------------------------
# The launches a GPU makes at the perf tests' widths (layernorm_config's and
# layernorm_backward_config's heuristics, as on a GPU, register caps included), compiled for
# sm_80 and sm_90 by triton_resources, on CPU too. Split forward rows (65536 columns) are
# launched with one chunk (the interpreter runs one program at a time), so the split kernel
# compiles with MAX_CHUNKS=1 where a GPU's take 8 or 16. Limits that hold with Triton 3.6 and
# 3.9: shared memory within each architecture's limit, at least one program of 16 warps per SM
# (25%) or two of 4 (12.5%), and no spills, but where ptxas spills today: the 16-bit split rows'
# 8192-column chunks capped at 72 registers (tuned on an H100) spill 80 bytes per thread on
# sm_80 with Triton 3.9.
RESOURCES = pytest.mark.triton_resources(max_spills=0, min_occupancy=0.125,
                                         archs=("sm_80", "sm_90"))
RESOURCE_DTYPES = [pytest.param(torch.float32, id="float32"), pytest.param(torch.float16, id="float16")]
FORWARD_RESOURCE_CASES = [
    pytest.param(cols, dtype, id=f"{cols}-{str(dtype)[6:]}", marks=(
        pytest.mark.triton_resources(max_spills=80, min_occupancy=0.125, archs=("sm_80", "sm_90"))
        if (cols, dtype) == (65536, torch.float16) else RESOURCES))
    for cols in (1024, 4096, 16384, 65536) for dtype in (torch.float32, torch.float16)]


def _gpu_config(monkeypatch, config_fn, n_cols, dtype):
    with monkeypatch.context() as gpu:
        gpu.setattr(ln, "interpreting", lambda: False)
        return config_fn((1 << 27) // n_cols, n_cols, dtype)


@pytest.mark.parametrize("cols, dtype", FORWARD_RESOURCE_CASES)
def test_gpu_forward_compiles_within_limits(cols, dtype, make_tensor, monkeypatch):
    cfg = _gpu_config(monkeypatch, ln.layernorm_config, cols, dtype)
    monkeypatch.setattr(rows, "interpreting", lambda: False)  # maxnreg reaches the launch
    check_forward(make_tensor, (cfg["ROWS"], min(cols, cfg["BLOCK_N"])), dtype, config=cfg)


@RESOURCES
@pytest.mark.parametrize("dtype", RESOURCE_DTYPES)
@pytest.mark.parametrize("cols", [1024, 4096, 8208])  # 8208: wider than FUSED_BWD_MAX_COLS
def test_gpu_backward_compiles_within_limits(cols, dtype, make_tensor, monkeypatch):
    cfg = _gpu_config(monkeypatch, ln.layernorm_backward_config, cols, dtype)
    check_backward(make_tensor, (1, cols), dtype, config=cfg)
