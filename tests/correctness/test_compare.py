"""assert_close: the tolerance table, NaN/Inf, trivial comparisons, mismatches and the report."""

import math

import pytest
import torch

from pytest_triton import TOLERANCES, assert_close, tolerance_for

FLOATS = [torch.float64, torch.float32, torch.float16, torch.bfloat16]


@pytest.mark.parametrize("dtype", FLOATS)
def test_table_tolerance_accepts_rounding_and_rejects_a_few_ulps_more(dtype):
    expected = torch.linspace(-3, 3, 1001, dtype=torch.float64)
    actual = expected.to(dtype)  # one rounding: must pass
    assert_close(actual, expected)
    rtol, atol, _ = TOLERANCES[str(dtype).removeprefix("torch.")]
    worse = (expected * (1 + 4 * rtol) + 4 * atol).to(dtype)
    with pytest.raises(AssertionError, match="Mismatched elements"):
        assert_close(worse, expected)


def test_tolerance_sources_and_reduction_rule():
    tol = tolerance_for(torch.float16)
    assert (tol.rtol, tol.atol) == TOLERANCES["float16"][:2]
    assert tol.rtol_source == "table: float16"
    wide = tolerance_for(torch.float16, reduction_size=4096)
    assert wide.atol == pytest.approx(TOLERANCES["float16"][2] * 64)
    assert "sqrt(reduction_size=4096)" in wide.atol_source
    given = tolerance_for(torch.float32, rtol=0.5, reduction_size=100)
    assert given.rtol == 0.5 and given.rtol_source == "argument"
    assert tolerance_for(torch.float32, precision="tf32").rtol == TOLERANCES["tf32"][0]
    assert tolerance_for(torch.float32, precision=torch.float16).atol == TOLERANCES["float16"][1]
    assert tolerance_for(torch.int32).rtol == 0 and tolerance_for(torch.bool).atol == 0


@pytest.mark.parametrize("kwargs, match", [
    ({"rtol": -1}, "rtol=-1"), ({"atol": "x"}, "atol='x'"), ({"reduction_size": 0}, "reduction_size=0"),
    ({"reduction_size": 2.5}, "reduction_size=2.5"), ({"precision": "fp7"}, "precision='fp7'"),
])
def test_bad_tolerance_arguments_name_the_argument(kwargs, match):
    x = torch.ones(3)
    with pytest.raises(ValueError, match=match):
        assert_close(x, x, **kwargs)


def test_reduction_size_widens_atol_enough_for_a_dot_product_and_no_more():
    g = torch.Generator().manual_seed(0)
    k = 4096
    a = torch.randn(64, k, generator=g).half()
    b = torch.randn(k, 64, generator=g).half()
    ref = a.double() @ b.double()
    out = (a.float() @ b.float()).half()  # fp32 accumulation, fp16 output
    assert_close(out, ref, reduction_size=k)
    dropped = (a[:, :-64].float() @ b[:-64].float()).half()  # a kernel that drops the last K tile
    with pytest.raises(AssertionError):
        assert_close(dropped, ref, reduction_size=k)


def test_tf32_precision_accepts_tensor_core_rounding():
    g = torch.Generator().manual_seed(1)
    k = 1024
    a, b = torch.randn(128, k, generator=g), torch.randn(k, 128, generator=g)

    def to_tf32(x):  # keep 10 explicit mantissa bits, as a tensor core does
        return (x.view(torch.int32) & ~0x1FFF).view(torch.float32)

    out = to_tf32(a) @ to_tf32(b)
    ref = a.double() @ b.double()
    with pytest.raises(AssertionError):
        assert_close(out, ref, reduction_size=k)  # plain float32 is too strict for tf32
    assert_close(out, ref, reduction_size=k, precision="tf32")


def test_nan_and_inf_handling():
    e = torch.tensor([1.0, 2.0, math.inf, -math.inf, math.nan], dtype=torch.float64)
    assert_close(e.clone().float(), e, equal_nan=True)
    with pytest.raises(AssertionError, match="1 NaN in expected where actual is not|Mismatched elements: 1 / 5"):
        assert_close(e.clone().float(), e)  # NaN never matches NaN unless equal_nan
    a = e.clone().float()
    a[0], a[1], a[2] = math.nan, math.inf, -math.inf
    with pytest.raises(AssertionError) as info:
        assert_close(a, e, equal_nan=True)
    text = str(info.value)
    assert "Mismatched elements: 3 / 5 (60%)" in text
    assert "1 NaN and 1 Inf in actual where expected is finite" in text


def test_outside_a_test_a_comparison_zeros_would_pass_fails_at_once(outside_a_test):
    # Plain function use (a script): no test to judge as a whole, so each call is judged alone.
    # Inside a test the rule applies to the test (test_trivial.py).
    tiny = torch.full((16,), 1e-7, dtype=torch.float64)
    with pytest.raises(AssertionError, match="cannot fail: an all-zeros output would pass"):
        assert_close(tiny.float(), tiny)
    with pytest.raises(AssertionError, match="cannot fail"):
        assert_close(torch.zeros(4, dtype=torch.int32), torch.zeros(4, dtype=torch.int32))
    assert_close(tiny.float(), tiny, allow_trivial=True)
    assert_close(torch.empty(0), torch.empty(0, dtype=torch.float64))  # nothing to write: fine


def test_shape_device_and_kind_mismatches_are_errors_not_broadcasts():
    with pytest.raises(AssertionError, match=r"shape: actual \(3, 1\) vs expected \(3,\)"):
        assert_close(torch.ones(3, 1), torch.ones(3))
    with pytest.raises(AssertionError, match="dtype kind: actual torch.int32"):
        assert_close(torch.ones(3, dtype=torch.int32), torch.ones(3))
    with pytest.raises(TypeError, match="expected must be a torch.Tensor"):
        assert_close(torch.ones(3), [1.0, 1.0, 1.0])
    meta = torch.ones(3, device="meta")
    with pytest.raises(AssertionError, match="device: actual on cpu vs expected on meta"):
        assert_close(torch.ones(3), meta)


def test_integers_compare_exactly():
    e = torch.arange(1, 11, dtype=torch.int64)
    assert_close(e.to(torch.int16), e)
    bad = e.clone()
    bad[7] += 1
    with pytest.raises(AssertionError, match=r"Mismatched elements: 1 / 10.*\n.*at index \(7,\)"):
        assert_close(bad, e)


def test_failure_report_reads_like_torch_testing():
    e = torch.arange(1, 65, dtype=torch.float64).reshape(8, 8)
    a = e.clone().float()
    a[2, 3] += 0.5
    a[5, 1] = math.nan
    with pytest.raises(AssertionError) as info:
        assert_close(a, e)
    text = str(info.value)
    for needle in ["Mismatched elements: 2 / 64 (3.12%)",
                   "Greatest absolute difference: 0.5 at index (2, 3)",
                   "Greatest relative difference: 0.025 at index (2, 3)",
                   "1 NaN and 0 Inf in actual where expected is finite",
                   "index  actual  expected  abs diff", "(2, 3)    20.5        20",
                   "Tolerance: rtol=1.3e-06 (table: float32), atol=1e-05 (table: float32)",
                   "Seed:"]:
        assert needle in text, f"{needle!r} not in\n{text}"


def test_failure_report_names_the_seed_inside_a_test(pytester):
    pytester.makepyfile("""
        from pytest_triton import assert_close
        def test_x(make_tensor):
            x = make_tensor(10)
            assert_close(x + 1, x.double())
        def test_plain(make_tensor):
            assert make_tensor(3).sum() > 1e9
    """)
    result = pytester.runpytest("-p", "no:randomly")
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines([
        "*Seed: seed * (from --triton-seed 0 and the test id); replay (from any directory): pytest */test_failure_report_names_the_seed_inside_a_test.py::test_x --triton-seed 0:*",
        "*test_failure_report_names_the_seed_inside_a_test.py:4: AssertionError",
        # a failure whose message has no seed gets it in a section of its own
        "*- pytest-triton -*", "seed * (from --triton-seed 0*::test_plain --triton-seed 0:*",
    ])
    # each failure says its seed and replay line once (assert_close's said it twice)
    assert result.stdout.str().count("replay (from any directory)") == 2


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_a_failure_of_the_size_low_precision_arithmetic_gives_names_baseline(dtype):
    # A weight gradient as torch computes it in fp16/bf16: products rounded, then summed.
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2048, 128, generator=g).to(dtype)
    gy = torch.randn(2048, 128, generator=g).to(dtype)
    expected = (x.double() * gy.double()).sum(0)
    torch_result = (x * gy).sum(0)
    kernel = (x * gy).float().view(32, 64, 128).sum(1).to(dtype).sum(0)  # partial sums rounded
    name = str(dtype).removeprefix("torch.")
    for actual in (torch_result, kernel):
        with pytest.raises(AssertionError) as info:
            assert_close(actual, expected, reduction_size=2048)
        note = str(info.value).splitlines()[-2]
        assert note.startswith(f"Note: every error is of the size {name} arithmetic gives (")
        assert note.endswith("is judged against torch at the same precision with "
                             "assert_close(..., baseline=torch_result), torch_result being "
                             "torch's own result at that precision.")
        assert_close(actual, expected, reduction_size=2048, baseline=torch_result)
    # Negative controls: a dropped term, an error 4x the baseline's; no note for the first,
    # and the baseline rejects both.
    dropped = (x[1:] * gy[1:]).float().sum(0).to(dtype)
    worse = (expected + 4 * (torch_result.double() - expected)).to(dtype)
    with pytest.raises(AssertionError) as info:
        assert_close(dropped, expected, reduction_size=2048)
    assert "Note:" not in str(info.value)
    for wrong in (dropped, worse):
        with pytest.raises(AssertionError, match="Kernel error exceeds 2x the baseline's"):
            assert_close(wrong, expected, reduction_size=2048, baseline=torch_result)
    # An error a 16-bit intermediate gives in a float32 output, and exact dtypes, get no note.
    with pytest.raises(AssertionError) as info:
        assert_close(torch.ones(4) + 1e-3, torch.ones(4, dtype=torch.float64))
    assert "Note:" not in str(info.value)


def test_a_float32_failure_of_the_size_float32_transcendentals_give_names_baseline():
    # issue 32: a correct float32 GeGLU (tanh) failed the float32 row on 12 of 8194 elements,
    # errors 1e-5 to 4e-5 on values 1e-4 to 2.4, and got no note; torch's own float32 result
    # errs as much on a GPU. Such errors get the note; a bf16 intermediate does not.
    g = torch.Generator().manual_seed(1)
    a, b = torch.randn(8194, generator=g), torch.randn(8194, generator=g)
    expected = torch.nn.functional.gelu(a.double(), approximate="tanh") * b.double()
    actual = expected.float()
    actual[::700] += torch.tensor(2e-5).float() * torch.sign(actual[::700])  # 12 elements
    with pytest.raises(AssertionError) as info:
        assert_close(actual, expected)
    text = str(info.value)
    assert "Mismatched elements: 12 / 8194" in text
    assert "Note: every error is of the size float32 arithmetic gives (" in text
    assert "compare with torch's own float32 result instead: assert_close(..., " \
           "baseline=torch_result)" in text
    for low in (torch.float16, torch.bfloat16):  # a 16-bit intermediate is a bug: no note
        inside = torch.nn.functional.gelu(a.to(low), approximate="tanh").float() * b
        with pytest.raises(AssertionError) as info:
            assert_close(inside, expected)
        assert "Note:" not in str(info.value)


def test_a_reference_coarser_than_actual_is_named_as_the_cause():
    # float32 actual against a float16 reference failed 894 of 1000 elements, saying nothing of
    # why: float16's own rounding is far above float32's tolerance.
    exact = torch.linspace(-3, 3, 1000, dtype=torch.float64)
    with pytest.raises(AssertionError) as failed:
        assert_close(exact.float(), exact.half())
    text = str(failed.value)
    assert ("expected is torch.float16, coarser than actual's torch.float32, whose tolerance "
            "applies (rtol 1.3e-06)") in text
    assert "compute the reference in float64" in text
    # The other order passes by design: the tolerance follows actual (float16's).
    assert_close(exact.half(), exact.float())
    # A reference as fine as actual, or finer, is not blamed.
    with pytest.raises(AssertionError) as failed:
        assert_close((exact * 1.01).float(), exact)
    assert "coarser than actual" not in str(failed.value)
