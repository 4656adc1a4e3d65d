"""The regression gate's statistics (regress/change.py) on synthetic samples: two draws of one
distribution are never SLOW (the negative control), a 5% shift in 1% noise is never missed
(the positive one), and the rules around them."""

import math
import random
import statistics

import pytest

from pytest_triton.perf.stats import summarize
from pytest_triton.regress import change as cmp
from pytest_triton.regress.change import Change, Side


def draw(rng: random.Random, n: int, median: float, noise: float) -> list[float]:
    """n lognormal samples around `median` whose spread (sigma) is `noise`, with the long right
    tail GPU timings have (a few slow samples)."""
    xs = [median * math.exp(rng.gauss(0, noise)) for _ in range(n)]
    return [x * (1.3 if rng.random() < 0.03 else 1.0) for x in xs]


def verdict(a, b, kind="memory", ca=None, cb=None, medians=()):
    spread, src = cmp.spread_of(list(medians), kind)
    return cmp.compare(Side(summarize(a), ca), Side(summarize(b), cb), spread=spread,
                       spread_from=src)


@pytest.mark.parametrize("noise", [0.002, 0.01, 0.05])
@pytest.mark.parametrize("n", [10, 40, 400])
def test_two_draws_of_one_distribution_are_never_slow(n, noise):
    rng = random.Random(f"{n}-{noise}")
    for kind in ("memory", "compute"):
        for _ in range(100):
            r = verdict(draw(rng, n, 0.25, noise), draw(rng, n, 0.25, noise), kind)
            assert r.verdict not in (Change.SLOW, Change.FAST), (r, kind)


@pytest.mark.parametrize("n", [40, 200])
def test_a_5_percent_shift_in_1_percent_noise_is_never_missed(n):
    rng = random.Random(n)
    for _ in range(100):
        r = verdict(draw(rng, n, 0.25, 0.01), draw(rng, n, 0.25 * 1.05, 0.01))
        assert r.verdict is Change.SLOW, r
        assert r.lo > 0 and r.lo < 0.05 < r.hi
        r = verdict(draw(rng, n, 0.25 * 1.05, 0.01), draw(rng, n, 0.25, 0.01))
        assert r.verdict is Change.FAST, r


def test_a_3_percent_slowdown_of_a_quiet_memory_bound_kernel_is_slow():
    rng = random.Random(3)
    hits = sum(verdict(draw(rng, 80, 0.27, 0.004), draw(rng, 80, 0.27 * 1.03, 0.004)).verdict
               is Change.SLOW for _ in range(100))
    assert hits >= 95


def test_the_compute_prior_wants_a_larger_change_than_the_memory_prior():
    rng = random.Random(7)
    a, b = draw(rng, 200, 1.0, 0.01), draw(rng, 200, 1.05, 0.01)
    assert verdict(a, b, "memory").verdict is Change.SLOW
    r = verdict(a, b, "compute")
    assert r.verdict is Change.UNCERTAIN
    assert "run-to-run spread" in r.why and "save more runs" in r.why
    # a 10% slowdown clears the compute prior
    assert verdict(a, [x * 1.10 / 1.05 * 1.05 for x in draw(rng, 200, 1.05, 0.01)],
                   "compute").verdict is Change.SLOW


def test_saved_runs_replace_the_prior():
    # how far two runs may differ: 2.576 * sqrt(2) * the runs' standard deviation in log space
    runs = [1.0, 1.02, 0.99, 1.005]
    spread, src = cmp.spread_of(runs, "compute")
    assert src == "4 saved runs"
    sd = statistics.stdev(math.log(r) for r in runs)
    assert spread == pytest.approx(math.expm1(2.5758 * math.sqrt(2) * sd), rel=1e-4)
    # one of 120 comparisons made together: each at 1 - 1%/120
    wide, _ = cmp.spread_of(runs, "compute", 120)
    assert wide == pytest.approx(math.expm1(cmp.z_of(120) * math.sqrt(2) * sd), rel=1e-4)
    assert cmp.z_of(120) == pytest.approx(statistics.NormalDist().inv_cdf(1 - 0.01 / 240))
    spread, src = cmp.spread_of([1.0, 1.0, 1.0], "compute")
    assert spread == cmp.MIN_HALF_WIDTH
    assert cmp.spread_of([1.0, 1.2], "compute") == (cmp.PRIOR_SPREAD["compute"],
                                                    "the prior for compute-bound kernels")
    rng = random.Random(5)
    a, b = draw(rng, 200, 1.0, 0.01), draw(rng, 200, 1.05, 0.01)
    assert verdict(a, b, "compute", medians=[1.0, 1.004, 0.998]).verdict is Change.SLOW


def _runs_against_each_other(rng, run_noise: float, shift: float, trials: int = 300):
    """The verdicts of one run (its median shifted by `shift`) against another, each of ten
    runs off the true time by `run_noise` (lognormal sigma), the spread from the other nine
    (as `python -m pytest_triton compare` takes it: the history without the new run)."""
    for _ in range(trials):
        medians = [math.exp(rng.gauss(0, run_noise)) for _ in range(10)]
        spread, src = cmp.spread_of([medians[0], *medians[2:]], "compute")
        yield cmp.compare(Side(summarize(draw(rng, 100, medians[0], 0.005))),
                          Side(summarize(draw(rng, 100, medians[1] * shift, 0.005))),
                          spread=spread, spread_from=src).verdict


def test_runs_of_unchanged_code_are_rarely_slow_or_fast_against_each_other():
    # The negative control of the spread: runs of a 4096^3 matmul moved 1.6% (a standard
    # deviation) from process to process on the H200. One run's distance from the runs' median
    # (the spread before) made 18% of such pairs SLOW or FAST, as 4 of 17 were on the GPU.
    verdicts = list(_runs_against_each_other(random.Random(11), 0.016, 1.0))
    false = sum(v in (Change.SLOW, Change.FAST) for v in verdicts)
    assert false <= 0.03 * len(verdicts), false


def test_a_10_percent_slowdown_clears_the_spread_of_runs():
    # the positive control: quiet runs catch it always, runs 1.6% apart nine times in ten
    assert set(_runs_against_each_other(random.Random(12), 0.003, 1.10)) == {Change.SLOW}
    verdicts = list(_runs_against_each_other(random.Random(13), 0.016, 1.10))
    assert sum(v is Change.SLOW for v in verdicts) >= 0.9 * len(verdicts)


def test_same_when_the_interval_stays_within_the_threshold():
    rng = random.Random(11)
    r = verdict(draw(rng, 200, 1.0, 0.005), draw(rng, 200, 1.01, 0.005))
    assert r.verdict is Change.SAME and -0.03 < r.lo < r.hi < 0.03


def test_a_noisy_pair_is_uncertain_and_says_what_would_settle_it():
    rng = random.Random(13)
    r = verdict(draw(rng, 8, 1.0, 0.2), draw(rng, 8, 1.04, 0.2), medians=[1, 1, 1])
    assert r.verdict is Change.UNCERTAIN
    assert r.why.startswith("ran 8 samples; noise") and "--triton-perf-max-time" in r.why


def test_a_change_the_clock_explains_is_uncertain():
    rng = random.Random(17)
    a, b = draw(rng, 200, 1.0, 0.005), draw(rng, 200, 1.08, 0.005)
    r = verdict(a, b, "compute", ca=1980, cb=1830, medians=[1, 1.001, 0.999])
    assert r.verdict is Change.UNCERTAIN
    assert "SM clock ran -7.6%" in r.why and "1980 -> 1830 MHz" in r.why
    # the same change at the same clock is SLOW; a clock that explains little leaves it SLOW
    assert verdict(a, b, "compute", ca=1980, cb=1980, medians=[1, 1.001, 0.999]).verdict \
        is Change.SLOW
    assert verdict(a, b, "compute", ca=1980, cb=1950, medians=[1, 1.001, 0.999]).verdict \
        is Change.SLOW


def test_a_throttled_run_is_refused_by_name():
    s = summarize([1.0] * 20)
    r = cmp.compare(Side(s), Side(s, throttled=True), spread=0.01, spread_from="x")
    assert r.verdict is Change.REFUSED and "this run" in r.why and "throttled" in r.why


@pytest.mark.parametrize("lo, hi, expected", [
    (0.001, 0.03, Change.SLOW), (0.001, 0.029, Change.SAME), (-0.001, 0.05, Change.UNCERTAIN),
    (-0.03, -0.001, Change.FAST), (-0.029, -0.001, Change.SAME), (-0.05, 0.05, Change.UNCERTAIN),
    (0.04, 0.06, Change.SLOW)])
def test_the_rule(lo, hi, expected):
    assert cmp.verdict_of(lo, hi, 0.03) is expected


def test_shapes_as_a_whole():
    rng = random.Random(19)
    parts = [verdict(draw(rng, 100, m, 0.005), draw(rng, 100, m * f, 0.005), medians=[1, 1, 1])
             for m, f in ((0.1, 1.06), (0.2, 1.05), (0.3, 1.0))]
    whole = cmp.combine(parts, 0.03)
    assert whole.change == pytest.approx((1.06 * 1.05) ** (1 / 3) - 1, abs=0.01)
    assert whole.verdict is Change.SLOW
    same = cmp.combine([verdict(draw(rng, 100, 1, 0.005), draw(rng, 100, 1, 0.005))
                        for _ in range(3)], 0.03)
    assert same.verdict is Change.SAME


def test_the_public_compare_samples_judges_as_the_gate_does():
    from pytest_triton import Change as PublicChange
    from pytest_triton import compare_samples
    rng = random.Random(23)
    a, b = draw(rng, 100, 0.27, 0.004), draw(rng, 100, 0.27 * 1.05, 0.004)
    assert compare_samples(a, b).verdict is PublicChange.SLOW
    assert compare_samples(a, b, kind="compute").verdict is Change.UNCERTAIN
    assert compare_samples(a, b, kind="compute", ref_medians=[0.27, 0.2701, 0.2699]).verdict \
        is Change.SLOW
    with pytest.raises(ValueError, match="kind='disk': expected one of memory, compute"):
        compare_samples(a, b, kind="disk")


def _suite_against_itself(rng, comparisons: int, tests: int = 120, runs: int = 7):
    """The perf suite against itself as bench/self_compare.py makes it: `runs` runs of `tests`
    tests, each test's runs off its true time by its own run-to-run noise (0.1-2%, lognormal),
    every pair compared, the older the reference, the spread from the runs other than the new
    one. Yields every verdict."""
    noise = [rng.uniform(0.001, 0.02) for _ in range(tests)]
    medians = [[math.exp(rng.gauss(0, s)) for _ in range(runs)] for s in noise]
    for i in range(runs):
        for j in range(i + 1, runs):
            for t in range(tests):
                spread, src = cmp.spread_of([m for k, m in enumerate(medians[t]) if k != j],
                                            "compute", comparisons)
                yield cmp.compare(Side(summarize(draw(rng, 60, medians[t][i], 0.005))),
                                  Side(summarize(draw(rng, 60, medians[t][j], 0.005))),
                                  spread=spread, spread_from=src,
                                  comparisons=comparisons).verdict


def test_a_suite_against_itself_is_rarely_slow_at_the_runs_level():
    # The negative control of the level: 120 tests, 11 runs (the gate's ten saved and the new
    # one), 55 pairs, 6600 comparisons. Each at 99% on its own, about 1% of them are SLOW or FAST
    # (the H100's perf suite against itself: 21 of 2499); at 99% for the run as a whole (each at
    # 1 - 1%/120), a few in a thousand at most: what is left comes from the deviations that ten
    # runs estimate (docs/regressions.md).
    alone = list(_suite_against_itself(random.Random(21), 1, runs=11))
    together = list(_suite_against_itself(random.Random(21), 120, runs=11))
    assert sum(v in (Change.SLOW, Change.FAST) for v in alone) >= 0.005 * len(alone)
    assert sum(v in (Change.SLOW, Change.FAST) for v in together) <= 0.001 * len(together)


def test_a_10_percent_slowdown_among_120_comparisons_is_slow():
    # the positive control of the level: one compute-bound test of a 120-test run, its runs 1%
    # apart (a quiet matmul), ten saved; and a quiet memory-bound kernel 3% slower
    rng = random.Random(22)
    hits = 0
    for _ in range(200):
        medians = [math.exp(rng.gauss(0, 0.01)) for _ in range(10)]
        spread, src = cmp.spread_of(medians[1:], "compute", 120)
        hits += cmp.compare(Side(summarize(draw(rng, 100, medians[0], 0.005))),
                            Side(summarize(draw(rng, 100, 1.10 * math.exp(rng.gauss(0, 0.01)),
                                                0.005))),
                            spread=spread, spread_from=src, comparisons=120).verdict is Change.SLOW
    assert hits >= 0.95 * 200, hits
    quiet = sum(cmp.compare_samples(draw(rng, 80, 0.27, 0.004), draw(rng, 80, 0.27 * 1.03, 0.004),
                                    comparisons=120).verdict is Change.SLOW for _ in range(100))
    assert quiet >= 95, quiet


def test_the_samples_intervals_widen_from_the_level_summarize_builds_them_at():
    # summarize() builds each median's interval at stats.Z; one of m comparisons widens it to
    # z_of(m) / stats.Z of that (a constant of its own here drifted from stats.Z)
    from pytest_triton.perf import stats

    rng = random.Random(3)
    a, b = summarize(draw(rng, 40, 1.0, 0.01)), summarize(draw(rng, 40, 1.0, 0.01))
    r = cmp.compare(Side(a), Side(b), spread=0.0, spread_from="none", comparisons=7)
    expected = math.hypot(cmp._log_half(a), cmp._log_half(b)) * cmp.z_of(7) / stats.Z
    assert math.isclose(r.samples_half, expected, rel_tol=1e-12)
