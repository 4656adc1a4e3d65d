"""make_tensor: seeds, distributions, integer dtypes, layouts, poison, and its errors."""

import math

import pytest
import torch

from pytest_triton import TensorFactory, poison_value


def test_same_seed_same_tensors_other_seed_other_tensors():
    a, b, c = TensorFactory("cpu", 7), TensorFactory("cpu", 7), TensorFactory("cpu", 8)
    x, y, z = a((4, 5)), b((4, 5)), c((4, 5))
    assert torch.equal(x, y) and not torch.equal(x, z)
    assert not torch.equal(a((4, 5)), x)  # successive calls draw successive values


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.float16, torch.bfloat16,
                                   torch.float8_e4m3fn, torch.float8_e5m2])
def test_every_float_dtype(dtype):
    m = TensorFactory("cpu", 0)
    for dist in ("normal", "uniform", "heavy"):
        t = m((64, 33), dtype, dist=dist)
        assert t.dtype == dtype and t.shape == (64, 33) and torch.isfinite(t.float()).all()


def test_uniform_range_and_heavy_magnitudes():
    m = TensorFactory("cpu", 0)
    u = m(10_000, dist="uniform", low=-2, high=3)
    assert u.min() >= -2 and u.max() < 3 and u.std() > 1
    h = m(10_000, dist="heavy")
    mags = h.abs()
    assert mags.min() >= 1e-3 * 0.99 and mags.max() > 100 and (h < 0).any() and (h > 0).any()
    h16 = m(10_000, torch.float16, dist="heavy", scale=1e6)  # clipped to what float16 can hold?
    assert not torch.isfinite(h16).all() or h16.abs().max() <= 65504


@pytest.mark.parametrize("dtype", [torch.int8, torch.uint8, torch.int32, torch.int64])
def test_integers(dtype):
    m = TensorFactory("cpu", 0)
    t = m(1000, dtype)
    assert t.dtype == dtype and t.min() >= max(-9, torch.iinfo(dtype).min) and t.max() < 10
    wide = m(1000, dtype, dist="heavy")
    assert wide.abs().max() > 9 or dtype == torch.uint8
    ranged = m(1000, dtype, low=2, high=5)
    assert set(ranged.unique().tolist()) <= {2, 3, 4}
    assert m(100, torch.bool).dtype == torch.bool


def test_noncontiguous_layouts_hold_poison_in_their_gaps():
    m = TensorFactory("cpu", 0)
    rows = m((5, 7), noncontiguous=True)
    assert rows.shape == (5, 7) and rows.stride() == (10, 1) and not rows.is_contiguous()
    assert torch.isnan(rows.as_strided((5, 3), (10, 1), rows.storage_offset() + 7)).all()
    elems = m(9, noncontiguous=True)
    assert elems.stride() == (2,) and torch.isfinite(elems).all()
    ints = m((3, 4), torch.int32, noncontiguous="elements")
    assert ints.stride() == (8, 2)


def test_poisoned_outputs():
    m = TensorFactory("cpu", 0)
    assert torch.isnan(m((3, 3), poison=True)).all()
    assert (m(4, torch.int32, poison=True) == torch.iinfo(torch.int32).min).all()
    assert (m(4, torch.uint8, poison=True) == 255).all()
    x = m((2, 6), torch.float16)
    p = m.poisoned_like(x)
    assert p.shape == x.shape and p.dtype == x.dtype and torch.isnan(p).all()
    assert math.isnan(poison_value(torch.bfloat16))
    with pytest.raises(TypeError, match="bool buffer cannot be poisoned"):
        m(3, torch.bool, poison=True)


@pytest.mark.parametrize("args, kwargs, error, match", [
    (("3",), {}, TypeError, "shape"), (((2, -1),), {}, TypeError, "ints >= 0"),
    ((3, "float17"), {}, TypeError, "dtype=.float17.: expected a torch.dtype or its name"),
    ((3,), {"dist": "gauss"}, ValueError, "dist='gauss'"),
    ((3,), {"dist": "uniform", "low": 1, "high": 1}, ValueError, "empty range"),
    ((3,), {"dist": "constant"}, ValueError, "needs value="),
    ((3,), {"noncontiguous": "rows"}, ValueError, "at least 2 dimensions"),
    ((3,), {"noncontiguous": "diagonal"}, ValueError, "noncontiguous='diagonal'"),
    ((3,), {"value": 3.0}, ValueError, r"value=3.0 is used only by dist='constant' \(got dist='normal'\)"),
    ((3, torch.int8), {"low": 0, "high": 1000}, ValueError,
     r"\[low=0, high=1000\) lies outside torch.int8's range \[-128, 128\)"),
    ((3, torch.uint8), {"low": -1}, ValueError, r"outside torch.uint8's range \[0, 256\)"),
    ((3, torch.complex64), {}, TypeError, "torch.complex64 is not supported"),
])
def test_bad_arguments_are_named(args, kwargs, error, match):
    with pytest.raises(error, match=match):
        TensorFactory("cpu", 0)(*args, **kwargs)


def test_the_shape_may_be_separate_ints_as_torch_testing_make_tensor_takes_it():
    m = TensorFactory("cpu", 0)
    assert m(512, 1000).shape == (512, 1000) and m(512, 1000).dtype == torch.float32
    assert m(2, 3, 4, torch.float16).shape == (2, 3, 4)
    assert m(2, 3, torch.float16).dtype == torch.float16
    assert m(2, 3, dtype="bf16").dtype == torch.bfloat16
    assert m(torch.Size([2, 3])).shape == m([2, 3]).shape == m((2, 3)).shape == (2, 3)
    assert torch.equal(TensorFactory("cpu", 1)(4, 5), TensorFactory("cpu", 1)((4, 5)))


@pytest.mark.parametrize("args, kwargs, match", [
    ((4, "fp17"), {}, r"dtype='fp17': expected a torch.dtype or its name"),
    ((4, 5, 1.5), {}, r"dtype=1.5: expected a torch.dtype"),
    (((4, 5), 1000), {}, r"\(\(4, 5\), 1000\): give the shape as one sequence or as separate "
                        r"ints, not both"),
    ((4, torch.float16), {"dtype": torch.float32}, "dtype given twice"),
    ((4, torch.float16, torch.float32), {}, "after the shape"),
    ((), {}, r"missing the shape: make_tensor\(512, 1000\) or make_tensor\(\(512, 1000\)\)"),
])
def test_a_bad_dtype_after_the_shape_is_still_named(args, kwargs, match):
    with pytest.raises(TypeError, match=match):
        TensorFactory("cpu", 0)(*args, **kwargs)


def test_narrow_integer_dtypes_stay_in_their_range():
    m = TensorFactory("cpu", 0)
    full = m(5000, torch.uint8, low=0, high=256)
    assert full.min() == 0 and full.max() == 255
    default = m(5000, torch.uint8)  # the default [-9, 10), clipped to uint8's range
    assert default.min() == 0 and default.max() == 9


def test_fixture_seeds_are_deterministic_and_distinct(pytester):
    pytester.makepyfile("""
        import json, pathlib
        def save(name, t):
            pathlib.Path(name + ".json").write_text(json.dumps(t.tolist()))
        def test_a(make_tensor): save("a", make_tensor(4))
        def test_b(make_tensor): save("b", make_tensor(4))
    """)

    def run(*args):
        pytester.runpytest(*args).assert_outcomes(passed=2)
        return [(pytester.path / f"{n}.json").read_text() for n in "ab"]

    first, second, reseeded = run(), run(), run("--triton-seed", "5")
    assert first == second  # stable for a given test id
    assert first[0] != first[1]  # distinct between tests
    assert reseeded[0] != first[0] and reseeded[1] != first[1]


def test_random_base_seed_is_printed_in_the_header(pytester):
    pytester.makepyfile("def test_a(make_tensor): make_tensor(1)")
    result = pytester.runpytest("--triton-seed", "random")
    result.stdout.fnmatch_lines(["pytest-triton: seed base * (--triton-seed)*"])
    assert pytester.runpytest("--triton-seed", "x").ret == pytest.ExitCode.USAGE_ERROR
