"""softmax and softmax_persistent against torch in float64, on every path (single pass, rows
split over programs, looped), and the controls they reject."""

from __future__ import annotations

import pytest
import torch

from pytest_triton import assert_close, interpreting
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
