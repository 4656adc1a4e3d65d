"""softmax and softmax_persistent against torch in float64, on every path (single pass, rows
split over programs, looped), and the controls they reject."""

from __future__ import annotations

import pytest
import torch

from pytest_triton import assert_close, interpreting
from reference_kernels import softmax as sm
from reference_kernels.softmax import (
    DTYPES,
    softmax,
    softmax_inputs,
    softmax_persistent,
    softmax_reference,
)

from . import controls

LAUNCHERS = [pytest.param(softmax, id="tiled"), pytest.param(softmax_persistent, id="persistent")]
DTYPE_PARAMS = [pytest.param(d, id=str(d).removeprefix("torch.")) for d in DTYPES]
# Odd widths and heights; 1 x 65536 takes the split path with the default config (one chunk per
# row under the interpreter), 65536 x 1 packs 8192 rows into each tile.
SHAPES = [(1, 1), (1, 127), (3, 129), (127, 129), (129, 127), (5, 1025), (2, 4097), (1, 65536),
          (65536, 1)]
# The looped path on small rows: 32-column steps, so 129 columns end in a 1-column block.
LOOPED = {"BLOCK_N": 32, "SPLIT": False}
# Rows split over programs of 32 columns each: 129 columns are 5 programs, the last with one
# column. Programs of a row wait for each other, which Triton's interpreter (one program at a
# time) cannot run: on the CPU the split path runs with one chunk per row (SPLIT_ONE below, and
# the default for wide rows there), on a GPU with many.
SPLIT = {"BLOCK_N": 32, "SPLIT": True}
SPLIT_GAP = pytest.mark.interpreter_gap(
    "other", reason="split rows need their programs to run at once; the interpreter runs one "
                    "program at a time")
# The split kernel with one chunk per row (a chunk as wide as the row), which the interpreter
# can run: the exchange with itself, the chunk held as loaded or read again.
SPLIT_ONE = {"BLOCK_N": 256, "SPLIT": True}
PATHS = [pytest.param(None, id="default"), pytest.param(LOOPED, id="looped"),
         pytest.param(SPLIT, id="split", marks=SPLIT_GAP),
         pytest.param(SPLIT_ONE, id="split-one-chunk"),
         pytest.param({**SPLIT_ONE, "RELOAD": True}, id="split-one-chunk-reload")]


def check_softmax(launcher, make_tensor, shape, dtype, *, config=None, out_layout=False,
                  **input_kwargs):
    """Run launcher into a poisoned output and compare with float64 torch (NaN where torch
    gives NaN: fully masked rows)."""
    (x,) = softmax_inputs(make_tensor, *shape, dtype=dtype, **input_kwargs)
    out = make_tensor.poisoned_like(x, noncontiguous=out_layout)
    kwargs = {} if config is None else {"config": config}
    assert launcher(x, out=out, **kwargs) is out
    assert_close(out, softmax_reference(x.double()), equal_nan=True)
    return x


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("dtype", DTYPE_PARAMS)
@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_matches_torch(launcher, dtype, shape, make_tensor):
    check_softmax(launcher, make_tensor, shape, dtype)


@pytest.mark.parametrize("shape", [(1, 33), (3, 129), (4, 1000)], ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("dtype", DTYPE_PARAMS)
@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_looped_path_matches_torch(launcher, dtype, shape, make_tensor):
    check_softmax(launcher, make_tensor, shape, dtype, config=LOOPED)


@SPLIT_GAP
@pytest.mark.parametrize("config", [pytest.param(SPLIT, id="hold"),
                                    pytest.param({**SPLIT, "RELOAD": True}, id="reload")])
@pytest.mark.parametrize("shape", [(1, 33), (37, 129), (4, 1000), (3, 8191)],
                         ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("dtype", DTYPE_PARAMS)
def test_split_rows_match_torch(dtype, shape, config, make_tensor):
    check_softmax(softmax, make_tensor, shape, dtype, config=config)


# softmax_persistent's grid-stride kernel (the default for 16K-wide 16-bit rows): one program
# per SM, so every program loops over several tiles of the tests' small shapes.
STRIDED = {"NUM_STAGES": 2, "programs_per_sm": 1}


@pytest.mark.parametrize("shape", [(1, 1), (3, 129), (129, 127), (65536, 1)],
                         ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("dtype", DTYPE_PARAMS)
def test_strided_persistent_matches_torch(dtype, shape, make_tensor):
    check_softmax(softmax_persistent, make_tensor, shape, dtype, config=STRIDED)


@pytest.mark.parametrize("dtype", DTYPE_PARAMS)
def test_strided_persistent_row_stride_and_masked_rows(dtype, make_tensor):
    x = check_softmax(softmax_persistent, make_tensor, (9, 129), dtype, config=STRIDED,
                      out_layout="rows", noncontiguous="rows")
    x[1] = float("-inf")
    x[2, ::3] = float("-inf")
    out = make_tensor.poisoned_like(x)
    softmax_persistent(x, out=out, config=STRIDED)
    assert_close(out, softmax_reference(x.double()), equal_nan=True)


@SPLIT_GAP
def test_split_rows_over_many_launches(make_tensor):
    # Launches of different sizes on one stream share the counters and words (each launch tags
    # its words with a new epoch): none may read another's statistics, whatever the order.
    for shape, block in [((300, 4097), 256), ((5, 129), 32), ((300, 4097), 256), ((2, 65), 64),
                         ((7, 3000), 128)]:
        check_softmax(softmax, make_tensor, shape, torch.float32,
                      config={"BLOCK_N": block, "SPLIT": True})


def test_split_rows_need_a_gpu(make_tensor):
    # Under the interpreter a row split over several programs would wait forever: refused.
    if not interpreting():
        pytest.skip("only the interpreter refuses split rows")
    with pytest.raises(ValueError, match="interpreter"):
        softmax(make_tensor((2, 129)), config=SPLIT)


@pytest.mark.parametrize("config", PATHS)
@pytest.mark.parametrize("dtype", DTYPE_PARAMS)
@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_row_stride_differs_from_width(launcher, dtype, config, make_tensor):
    # Input and output rows 3 elements longer than their width, the gaps poisoned.
    check_softmax(launcher, make_tensor, (7, 129), dtype, config=config, out_layout="rows",
                  noncontiguous="rows")


@pytest.mark.parametrize("config", PATHS)
@pytest.mark.parametrize("dtype", DTYPE_PARAMS)
def test_large_magnitudes(dtype, config, make_tensor):
    # |x| up to 1e3: exp overflows unless the row maximum is subtracted first.
    check_softmax(softmax, make_tensor, (6, 129), dtype, config=config, dist="heavy")


@pytest.mark.parametrize("config", PATHS)
@pytest.mark.parametrize("dtype", DTYPE_PARAMS)
def test_constant_rows(dtype, config, make_tensor):
    check_softmax(softmax, make_tensor, (3, 129), dtype, config=config, dist="constant", value=7.0)


@pytest.mark.parametrize("config", PATHS)
@pytest.mark.parametrize("dtype", DTYPE_PARAMS)
@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_masked_rows(launcher, dtype, config, make_tensor):
    # Row 1 fully masked (all -inf): NaN, as torch gives. Row 2 partly masked, including its
    # last column and a whole 32-column block of the looped path: 0 there.
    (x,) = softmax_inputs(make_tensor, 4, 129, dtype=dtype)
    x[1] = float("-inf")
    x[2, ::3] = float("-inf")
    x[2, 32:64] = float("-inf")
    x[2, -1] = float("-inf")
    out = make_tensor.poisoned_like(x)
    launcher(x, out=out, **({} if config is None else {"config": config}))
    expected = softmax_reference(x.double())
    assert torch.isnan(expected[1]).all()
    assert_close(out, expected, equal_nan=True)


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_leading_dimensions(launcher, make_tensor):
    x = make_tensor((2, 3, 65))
    assert_close(launcher(x), softmax_reference(x.double()))


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_empty(launcher, make_tensor):
    assert launcher(make_tensor((0, 5))).shape == (0, 5)
    assert launcher(make_tensor((4, 0))).shape == (4, 0)


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_rejects_bad_input(launcher, make_tensor):
    with pytest.raises(ValueError, match="contiguous columns"):
        launcher(make_tensor((4, 9), noncontiguous="elements"))
    with pytest.raises(TypeError, match="not supported"):
        launcher(make_tensor((4, 9), torch.float64))
    with pytest.raises(ValueError, match="out must be"):
        launcher(make_tensor((4, 9)), out=make_tensor((4, 8)))
    with pytest.raises(ValueError, match="at least one dimension"):
        launcher(make_tensor(()))
    with pytest.raises(ValueError, match="unknown config key"):
        launcher(make_tensor((4, 9)), config={"BLOCK": 8})
    with pytest.raises(ValueError, match="power of two"):
        launcher(make_tensor((4, 9)), config={"BLOCK_N": 24})


# --- negative controls: the same checks must reject these --------------------------------------

@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning",
                            "ignore:invalid value encountered:RuntimeWarning")
def test_rejects_softmax_without_max_subtraction(make_tensor):
    with pytest.raises(AssertionError, match="NaN"):
        check_softmax(controls.softmax_without_max, make_tensor, (6, 129), torch.float32,
                      dist="heavy")


@pytest.mark.parametrize("dtype", DTYPE_PARAMS)
def test_rejects_softmax_that_drops_last_block(dtype, make_tensor):
    # The dropped 22-column tail is ~15% of each row's sum: past every dtype's tolerance.
    with pytest.raises(AssertionError, match="Mismatched elements"):
        check_softmax(controls.softmax_drops_last_block, make_tensor, (3, 150), dtype)


# --- compiled resources -------------------------------------------------------------------------
# The launches a GPU makes at the perf tests' widths (softmax_config's heuristic, as on a GPU),
# compiled for sm_80 and sm_90 by triton_resources, on CPU too. Split rows (65536 columns) are
# launched with one 4096-column chunk (the interpreter runs one program at a time), so the split
# kernel compiles with MAX_CHUNKS=1 where a GPU's 65536-column rows take 16. Limits that hold
# with Triton 3.6 and 3.9: shared memory within each architecture's limit; at least 12.5%
# occupancy (the persistent 1024-column fp32 tiles: 4 programs of 2 warps per SM, as designed);
# no spills, but where ptxas spills today: the persistent kernel's 1024-column fp16 tiles of 4
# rows on sm_80 (Triton 3.6: 128 registers and 8 bytes per thread), and its 16384-column fp32
# rows on 32 warps on sm_90 (Triton 3.9: 64 registers, all 1024 threads may have, and 32 bytes).
def _softmax_resource_cases():
    cases = []
    for persistent in (False, True):
        for cols in (1024, 4096, 16384, 65536):
            for dtype in (torch.float32, torch.float16):
                spills = {(1024, torch.float16): 8, (16384, torch.float32): 32}.get(
                    (cols, dtype), 0) if persistent else 0
                cases.append(pytest.param(
                    persistent, cols, dtype,
                    id=f"{'persistent' if persistent else 'tiled'}-{cols}-{str(dtype)[6:]}",
                    marks=pytest.mark.triton_resources(max_spills=spills, min_occupancy=0.125,
                                                       archs=("sm_80", "sm_90"))))
    return cases


@pytest.mark.parametrize("persistent, cols, dtype", _softmax_resource_cases())
def test_gpu_launches_compile_within_limits(persistent, cols, dtype, make_tensor, monkeypatch):
    with monkeypatch.context() as gpu:
        gpu.setattr(sm, "interpreting", lambda: False)
        cfg = sm.softmax_config((1 << 27) // cols, cols, dtype, persistent)
    (x,) = softmax_inputs(make_tensor, cfg["ROWS"], min(cols, cfg["BLOCK_N"]), dtype=dtype)
    launcher = softmax_persistent if persistent else softmax
    assert_close(launcher(x, config=cfg), softmax_reference(x.double()))
