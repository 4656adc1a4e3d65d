"""assert_close(..., baseline=...): the kernel's max and mean errors against float64, relative to a
low-precision baseline's (FlashAttention's rule), with its report; its negative control is a
kernel exactly 3x worse than the baseline."""

import math
import re

import pytest
import torch

from pytest_triton import assert_close


def _case(kernel_factor: float, n: int = 1000):
    """(actual, expected, baseline): the baseline's error is a fixed pattern of about 1e-3; the
    kernel's is that pattern times kernel_factor (in float64, then rounded once to float32)."""
    g = torch.Generator().manual_seed(0)
    expected = torch.randn(n, generator=g, dtype=torch.float64)
    pattern = torch.randn(n, generator=g, dtype=torch.float64) * 1e-3
    return ((expected + kernel_factor * pattern).float(), expected,
            (expected + pattern).float())


@pytest.mark.parametrize("factor", [0.5, 1.0, 1.9])
def test_a_kernel_within_twice_the_baseline_error_passes(factor):
    actual, expected, baseline = _case(factor)
    assert_close(actual, expected, baseline=baseline)


def test_a_kernel_three_times_worse_than_the_baseline_fails_with_both_errors_and_ratios():
    actual, expected, baseline = _case(3.0)
    with pytest.raises(AssertionError) as info:
        assert_close(actual, expected, baseline=baseline)
    lines = str(info.value).splitlines()
    assert lines[0] == ("Kernel error exceeds 2x the baseline's (torch.float32, shape (1000,), on "
                        "cpu): max |error| 0.00942 > 0.00629; mean |error| 0.00236 > 0.00158.")
    assert lines[1].split() == ["max", "|error|", "at", "index", "mean", "|error|"]
    assert lines[2].split() == ["kernel", "0.00942", "(892,)", "0.00236"]
    assert lines[3].split() == ["baseline", "0.00314", "(892,)", "0.000785"]
    assert lines[4].split() == ["ratio", "3x", "3x"]
    assert lines[5].split() == ["allowed", "0.00629", "0.00158"]
    assert lines[6] == ("At the kernel's largest error, index (892,): actual 0.9672453, expected "
                        "0.9578269, baseline 0.9609664")
    assert lines[7] == ("Rule: max and mean |error| <= 2 x the baseline's + floor 1e-05 (table: "
                        "float32), each element's error also less half an ulp of its value in "
                        "torch.float32; errors against the float64 expected, over its finite "
                        "elements.")
    assert lines[8].startswith("Seed: ")
    # A larger factor lets the same kernel through.
    assert_close(actual, expected, baseline=baseline, baseline_factor=3.5)


def test_the_mean_catches_an_error_spread_thin_that_the_max_misses():
    # Every element 1.5x the baseline's typical error, no element beyond its largest: the max
    # rule passes it, the mean (3x the baseline's mean) does not.
    actual, expected, baseline = _case(1.0)
    spread = (baseline.double() - expected).abs().mean() * 3
    thin = (expected + spread * torch.sign(torch.randn(expected.shape, dtype=torch.float64))).float()
    with pytest.raises(AssertionError, match=r"mean \|error\| .* > ") as info:
        assert_close(thin, expected, baseline=baseline)
    assert "max |error|" not in str(info.value).splitlines()[0].split(": ", 1)[1]


def test_a_kernel_off_by_its_own_rounding_passes_where_the_baseline_was_luckier():
    # fp16 values near 1.5 (units of 2**-10): the baseline happens to round 1.5 + 2**-12 to 1.5
    # (error a quarter unit, its max); the kernel writes the next fp16 value up, 3x that error,
    # which is its own rounding (half a unit) plus a quarter unit: 2x the baseline's max error
    # alone would fail this correct kernel.
    expected = torch.tensor([1.5 + 2**-12, 0.3] * 50, dtype=torch.float64)
    baseline = expected.to(torch.float16)
    actual = baseline.clone()
    actual[0] = 1.5 + 2**-10
    assert_close(actual, expected, baseline=baseline)
    # Negative control: two units off at 1.5 is no rounding.
    actual[0] = 1.5 + 2 * 2**-10
    with pytest.raises(AssertionError, match="Kernel error exceeds 2x the baseline's"):
        assert_close(actual, expected, baseline=baseline)


def test_the_floor_lets_an_exact_baseline_through():
    expected = torch.linspace(-1, 1, 101, dtype=torch.float64)
    exact = expected.clone()
    assert_close(expected.float(), expected, baseline=exact)  # float32 rounding < 1e-5 floor
    with pytest.raises(AssertionError, match="Kernel error exceeds"):
        assert_close((expected + 1e-4).float(), expected, baseline=exact)
    assert_close((expected + 1e-4).float(), expected, baseline=exact, atol=2e-4)


def test_nonfinite_elements_must_match_and_a_broken_baseline_is_an_error():
    expected = torch.tensor([1.0, math.inf, math.nan, 2.0], dtype=torch.float64)
    good = expected.float()
    assert_close(good, expected, baseline=good, equal_nan=True)
    with pytest.raises(AssertionError, match="1 elements differ where expected is NaN or Inf"):
        assert_close(good, expected, baseline=good)  # NaN matches only with equal_nan
    bad = good.clone()
    bad[0] = math.nan
    with pytest.raises(AssertionError, match="1 NaN or Inf where expected is finite"):
        assert_close(bad, expected, baseline=good, equal_nan=True)
    with pytest.raises(AssertionError, match="the baseline has 1 NaN or Inf where expected is "
                                             "finite: it is no baseline"):
        assert_close(good, expected, baseline=bad, equal_nan=True)


@pytest.mark.parametrize("kwargs, error, match", [
    ({"baseline_factor": 3}, ValueError, "baseline_factor= needs baseline="),
    ({"baseline": torch.zeros(3), "rtol": 1e-3}, ValueError, "rtol= does not apply"),
    ({"baseline": torch.zeros(3), "baseline_factor": 0}, ValueError, "baseline_factor=0"),
    ({"baseline": torch.zeros(3), "baseline_factor": "2"}, ValueError, "baseline_factor='2'"),
    ({"baseline": torch.zeros(4)}, AssertionError, r"shape: baseline \(4,\) vs expected \(3,\)"),
    ({"baseline": [0.0, 0.0, 0.0]}, TypeError, "baseline must be a torch.Tensor"),
])
def test_bad_baseline_arguments_are_named(kwargs, error, match):
    with pytest.raises(error, match=match):
        assert_close(torch.ones(3), torch.ones(3, dtype=torch.float64), **kwargs)
    with pytest.raises(ValueError, match="compared exactly"):
        assert_close(torch.ones(3, dtype=torch.int32), torch.ones(3, dtype=torch.int32),
                     baseline=torch.ones(3, dtype=torch.int32))


def test_a_baseline_so_bad_that_zeros_pass_cannot_fail(outside_a_test):
    expected = torch.full((8,), 1e-3, dtype=torch.float64)
    with pytest.raises(AssertionError, match="this comparison cannot fail: an all-zeros output "
                                             "would pass it"):
        assert_close(expected.float(), expected, baseline=torch.zeros(8))


def test_a_passing_comparison_reports_its_ratios_in_the_test_section(pytester):
    pytester.makepyfile("""
        import torch
        from pytest_triton import assert_close
        def test_it():
            e = torch.linspace(1, 2, 64, dtype=torch.float64)
            assert_close((e + 2e-3).float(), e, baseline=(e + 1e-3).float())
            assert_close((e + 2e-3).float(), e, baseline=(e + 1e-3).float().double())
    """)
    result = pytester.runpytest("-rP", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines([
        "*- pytest-triton correctness -*",
        "assert_close against a baseline (float32 (64,)): passed. max |error| 0.002 = 2x the "
        "baseline's 0.001; less half an ulp of expected in float32 (rounding no float32 output "
        "avoids), 0.002 <= allowed 0.00201 (2x the baseline's + 1e-05). mean |error| 0.002 = 2x "
        "the baseline's 0.001 <= allowed 0.00201 (2x the baseline's + 1e-05)",
    ])


def test_a_pass_above_the_factor_shows_the_half_ulp_allowance_that_passed_it(outside_a_test):
    # An fp16 output whose only error is its own rounding (0.0005 at 3.0005, where fp16's ulp
    # is 0.002) against a float64 baseline off by 1e-4 everywhere: the kernel's max error is 5x
    # the baseline's and passes, as no fp16 output can beat rounding. The note said "max |error|
    # 0.0005 = 5x the baseline's 0.0001 (allowed 2x + 1e-05)": a pass that read as a failure.
    from pytest_triton.correctness import call_record

    sc = call_record.TestScope("t")
    token = call_record.CURRENT.set(sc)
    try:
        e = torch.tensor([0.01 + 1e-4 * i for i in range(99)] + [3.0005], dtype=torch.float64)
        assert_close(e.half(), e, baseline=e + 1e-4)
    finally:
        call_record.CURRENT.reset(token)
    (note,) = [n for n in sc.notes if n.startswith("assert_close against a baseline")]
    m = re.fullmatch(r"assert_close against a baseline \(float16 \(100,\)\): passed\. max \|error\| "
                     r"(\S+) = (\S+)x the baseline's (\S+); less half an ulp of expected in float16 "
                     r"\(rounding no float16 output avoids\), (\S+) <= allowed (\S+) \(2x the "
                     r"baseline's \+ 1e-05\)\. mean .*", note)
    assert m, note
    k_max, ratio, b_max, beyond, allowed = map(float, m.groups())
    assert ratio > 2 and k_max > allowed  # above the factor: the allowance is what passed it
    assert beyond <= allowed


def test_baseline_never_narrows_what_the_table_accepts(outside_a_test):
    # A bf16 kernel whose every element is one ulp from torch's (it rounds an intermediate to bf16
    # where torch rounds once): 3-4x the baseline's mean error, yet within bf16's own tolerance.
    # Seen with FlagGems' layer_norm weight gradient and Conch's fused_add_rms_norm on the H100:
    # correct library kernels failed with baseline= only.
    g = torch.Generator().manual_seed(3)
    x = torch.randn(64, 257, generator=g, dtype=torch.float64) * 3
    w = torch.rand(257, generator=g, dtype=torch.float64) + 0.5
    expected = x * w
    torch_once = expected.to(torch.bfloat16)
    twice = (torch_once.view(torch.int16) + 1).view(torch.bfloat16)  # one ulp further from zero
    with pytest.raises(AssertionError):  # the premise: 2x the baseline's error is exceeded...
        _strict(twice, expected, torch_once)
    assert_close(twice, expected, baseline=torch_once)  # ...and the table accepts it
    wrong = (twice.double() * 1.05).to(torch.bfloat16)  # 5% off: beyond bf16's tolerance
    with pytest.raises(AssertionError, match="exceeds 2x the baseline"):
        assert_close(wrong, expected, baseline=torch_once)


def _strict(actual, expected, baseline):
    """The baseline rule alone (what assert_close(baseline=) applied before): max and mean
    error <= 2x the baseline's."""
    a, e, b = (t.double() for t in (actual, expected, baseline))
    assert float((a - e).abs().max()) <= 2 * float((b - e).abs().max())
    assert float((a - e).abs().mean()) <= 2 * float((b - e).abs().mean())
