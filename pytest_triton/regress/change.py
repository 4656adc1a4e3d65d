"""This run's timings against a reference run's, one test at a time: FAST, SLOW, SAME or
UNCERTAIN, with the change and its interval (the regression gate's statistics; the saved runs,
the rows of a comparison and the gate are storage.py, rows.py and gate.py beside it).

The statistic, and why (docs/regressions.md has the measurements behind it):
- The change is the ratio of the two runs' medians, in log space. Its interval combines each
  median's 99% order-statistic interval (rank-based: valid for any distribution of samples,
  the one perf/stats.py gives every measurement) with the **run-to-run spread**: two pytest
  processes of one commit on one GPU differ by more than their samples say (clocks under a
  power cap, placement, the autotuner's pick). Saved H100 and H200 runs of unchanged kernels
  differed by up to 0.5% for memory-bound kernels and up to 6.4% for large matmuls, while
  their samples' intervals were +-0.5%. So a test's spread (how far two runs may differ)
  comes from the saved runs of its device when there are at least MIN_RUNS_FOR_SPREAD of them,
  else from a prior by kind.
  asv's Mann-Whitney U test and nvbench's legacy compare treat the two runs' samples as the
  only noise, which is how they call identical code SLOW (warp #1142, nvbench #316).
- The level is the run's, not each comparison's: a run compares every perf test at once, and a
  99% interval each gave the H100's perf suite against itself (119 measurements) a false SLOW
  or FAST in one comparison of 120. Each of m comparisons is made at 1 - 1%/m (Bonferroni,
  FAMILY_ALPHA), so a run of unchanged code gets any SLOW or FAST about once in 100.
- SLOW needs the interval above zero and reaching the threshold; SAME needs it within
  +-threshold; FAST mirrors SLOW; anything else is UNCERTAIN, which says what would settle it.
- Clocks: where both runs read the SM clock, a SLOW or FAST must hold in cycle space too
  (time x clock, as nvbench's robust compare asks): a change the clock explains is UNCERTAIN.
"""

from __future__ import annotations

import enum
import math
import statistics
from dataclasses import dataclass

from ..perf.stats import MIN_HALF_WIDTH, Summary, Z, summarize

DEFAULT_THRESHOLD = 0.03
# The run-to-run spread (a 99% half-width, relative) assumed where the history has fewer than
# MIN_RUNS_FOR_SPREAD runs of a test: measured between saved runs of unchanged kernels on the
# H100 and the H200 (docs/regressions.md): memory-bound kernels within 0.5%, compute-bound ones
# (a flops= target) up to 6.4%, and kernels shorter than SHORT_MS up to 25.7%, whatever they do
# (two pytest processes, one commit, one config, one clock).
PRIOR_SPREAD = {"memory": 0.01, "compute": 0.07, "short": 0.35}
SHORT_MS = 0.1
MIN_RUNS_FOR_SPREAD = 3
CLOCK_TOLERANCE = 0.01  # clocks within 1% of each other explain nothing
# The chance that a run of unchanged code gets any SLOW or FAST, over all the comparisons of the
# run: each of m comparisons is made at 1 - FAMILY_ALPHA / m (Bonferroni). At 99% each, the H100's
# perf suite against itself (119 measurements, 21 pairs of runs) got 21 false verdicts in 2499,
# 0.8%: what 99% intervals give, one test in five over 20 comparisons.
FAMILY_ALPHA = 0.01


def z_of(comparisons: int) -> float:
    """The normal quantile of each of `comparisons` two-sided intervals (99% as a whole)."""
    return statistics.NormalDist().inv_cdf(1 - FAMILY_ALPHA / (2 * max(1, comparisons)))


class Change(str, enum.Enum):
    """A test's verdict against the reference run; its value is what the files say."""
    FAST = "fast"
    SLOW = "slow"
    SAME = "same"
    UNCERTAIN = "uncertain"
    NEW = "new"  # measured here, not in the reference
    MISSING = "missing"  # in the reference, not measured here
    REFUSED = "refused"  # not comparable (another GPU, a throttled run, no peak to take)
    # the work counted under the interpreter, compared exactly (work_gate.py)
    MORE_WORK = "more-work"
    LESS_WORK = "less-work"
    SAME_WORK = "same-work"

    __hash__ = str.__hash__

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)


@dataclass(frozen=True)
class Side:
    """One run's view of one measurement: what compare() needs of it."""
    summary: Summary  # ms per call (or, by fraction, scaled to the reference's peak)
    clock_mhz: float | None = None  # the SM clock: the mean of the readings around the timing
    throttled: bool = False


@dataclass(frozen=True)
class Result:
    verdict: Change
    change: float  # relative change in time: +0.05 is 5% slower (by fraction: of the fraction)
    lo: float  # its interval
    hi: float
    spread: float  # the run-to-run half-width used
    spread_from: str  # "5 saved runs" or "the prior for memory-bound kernels"
    clock_change: float | None = None  # this run's SM clock against the reference's
    why: str = ""  # why UNCERTAIN or REFUSED, and what would settle it
    samples_half: float = math.nan  # the two medians' part of the half-width, in log space
    advice: str = ""  # the end of an UNCERTAIN's why: what would settle it, often shared by many

    @property
    def interval_text(self) -> str:
        return f"[{100 * self.lo:+.1f}%, {100 * self.hi:+.1f}%]"


def _log_half(s: Summary) -> float:
    """The half-width of a median's interval, in log space."""
    return (math.log(s.ci_hi) - math.log(s.ci_lo)) / 2


def verdict_of(lo: float, hi: float, threshold: float) -> Change:
    """The rule, on an interval of the relative change in time (positive: slower)."""
    if lo > 0 and hi >= threshold:
        return Change.SLOW
    if hi < 0 and lo <= -threshold:
        return Change.FAST
    if -threshold < lo and hi < threshold:
        return Change.SAME
    return Change.UNCERTAIN


def compare(ref: Side, new: Side, *, threshold: float = DEFAULT_THRESHOLD, spread: float,
            spread_from: str, comparisons: int = 1) -> Result:
    """`new` against `ref` (see the module's docstring for the rule), as one of `comparisons`
    made together (the measurements of a run): the samples' 99% intervals widen to each
    comparison's level; `spread` is spread_of()'s for as many."""
    if ref.throttled or new.throttled:
        which = "both runs" if ref.throttled and new.throttled else \
            ("the reference run" if ref.throttled else "this run")
        return Result(Change.REFUSED, math.nan, math.nan, math.nan, spread, spread_from,
                      why=f"the GPU throttled in {which} (power, heat or an application clock "
                          "limit): its times are not its kernel's")
    d = math.log(new.summary.median / ref.summary.median)
    samples_half = math.hypot(_log_half(ref.summary), _log_half(new.summary)) \
        * z_of(comparisons) / Z
    half = math.hypot(samples_half, math.log1p(spread))
    lo, hi = math.expm1(d - half), math.expm1(d + half)
    verdict = verdict_of(lo, hi, threshold)
    clock_change, why = None, ""
    if ref.clock_mhz and new.clock_mhz:
        clock_change = new.clock_mhz / ref.clock_mhz - 1
        if verdict in (Change.SLOW, Change.FAST) and abs(clock_change) > CLOCK_TOLERANCE:
            dc = d + math.log1p(clock_change)  # in cycles: time x clock
            in_cycles = verdict_of(math.expm1(dc - half), math.expm1(dc + half), threshold)
            if in_cycles is not verdict:
                why = (f"the SM clock ran {100 * clock_change:+.1f}% against the reference "
                       f"({ref.clock_mhz:.0f} -> {new.clock_mhz:.0f} MHz); in cycles the change "
                       f"is {100 * math.expm1(dc):+.1f}%: the clock explains it")
                verdict = Change.UNCERTAIN
    advice = ""
    if verdict is Change.UNCERTAIN and not why:
        said, advice = settle(new.summary, samples_half, math.log1p(spread), spread_from,
                              threshold)
        why = f"{said}; {advice}"
    return Result(verdict, math.expm1(d), lo, hi, spread, spread_from, clock_change, why,
                  samples_half, advice)


def settle(s: Summary, samples_half: float, spread_half: float, spread_from: str,
           threshold: float) -> tuple[str, str]:
    """(what was measured, what would settle an UNCERTAIN): more samples where the samples'
    interval is the wider part, more saved reference runs where the run-to-run spread is."""
    said = f"ran {s.n} samples; noise {100 * s.noise:.1f}%"
    if samples_half >= spread_half:
        return said, "rerun with a longer --triton-perf-max-time (e.g. twice this run's)"
    return said, (f"the run-to-run spread ({100 * math.expm1(spread_half):.1f}%, "
                  f"{spread_from}) is wider than the threshold's {100 * threshold:.0f}% allows: "
                  f"save more runs of the reference branch on this GPU (at least "
                  f"{MIN_RUNS_FOR_SPREAD}), or raise --triton-perf-threshold")


def kind_of(median_ms: float, flops: int | None) -> str:
    """Which prior a measurement takes: "short" under SHORT_MS, else "compute" with flops=,
    else "memory"."""
    if median_ms < SHORT_MS:
        return "short"
    return "compute" if flops else "memory"


def spread_of(medians: list[float], kind: str, comparisons: int = 1) -> tuple[float, str]:
    """The run-to-run half-width of a test: how far two runs of unchanged code may differ, from
    its medians in the saved runs of one device, at least MIN_HALF_WIDTH; or the prior for its
    kind where there are fewer than MIN_RUNS_FOR_SPREAD. Each of `comparisons` made together is
    at 1 - FAMILY_ALPHA / comparisons (z_of).

    The comparison sets one run against another, each off the kernel's true time by its own
    run-to-run error, so the half-width is that of a difference of two runs: z * sqrt(2) * s,
    with s the runs' standard deviation in log space. The largest distance of one run from the
    runs' median, used before, is one run's error, not two: on the H200 at bf866f6 ten runs of a
    4096^3 matmul spread 5.2% with a 1.6% standard deviation, the old spread was 3.1%, and the
    runs against each other got SLOW or FAST in 4 of 17 comparisons. (Student's t for the
    deviation of a few runs, at the family's level, widened it so far that on the H100's perf
    suite against itself 77% of the verdicts were UNCERTAIN and the H200's planted 10% matmul
    slowdown was SLOW in 3 of 6: docs/regressions.md.)"""
    if len(medians) >= MIN_RUNS_FOR_SPREAD:
        sd = statistics.stdev(math.log(m) for m in medians)
        return max(math.expm1(z_of(comparisons) * math.sqrt(2) * sd), MIN_HALF_WIDTH), \
            f"{len(medians)} saved runs"
    what = f"kernels under {SHORT_MS:g} ms" if kind == "short" else f"{kind}-bound kernels"
    return PRIOR_SPREAD[kind], f"the prior for {what}"


def combine(results: list[Result], threshold: float) -> Result:
    """Several measurements of one test (its shapes) judged as a whole: the geometric mean of
    their changes, with their intervals combined as perf/stats.geomean_ci combines medians'."""
    ok = [r for r in results if r.verdict not in (Change.REFUSED,) and math.isfinite(r.change)]
    if not ok:
        return Result(Change.REFUSED, math.nan, math.nan, math.nan, math.nan, "",
                      why="no shape of it could be compared")
    d = statistics.fmean(math.log1p(r.change) for r in ok)
    # the spread is shared by the shapes of one run (one process, one clock): it does not
    # average out, so it stays whole; the samples' parts do
    spread = max(r.spread for r in ok)
    samples = math.sqrt(sum(r.samples_half ** 2 for r in ok)) / len(ok)
    half = math.hypot(samples, math.log1p(spread))
    lo, hi = math.expm1(d - half), math.expm1(d + half)
    verdict = verdict_of(lo, hi, threshold)
    why = "" if verdict is not Change.UNCERTAIN else (
        f"the geometric mean of {len(ok)} shapes; {sum(r.verdict is Change.SLOW for r in ok)} "
        "of them SLOW on their own")
    return Result(verdict, math.expm1(d), lo, hi, spread, ok[0].spread_from, None, why)


def compare_samples(ref_ms: list[float], new_ms: list[float], *, kind: str | None = None,
                    threshold: float = DEFAULT_THRESHOLD, ref_clock_mhz: float | None = None,
                    new_clock_mhz: float | None = None, ref_medians: list[float] = (),
                    comparisons: int = 1) -> Result:
    """Two runs' samples (ms per call) of one kernel judged as --triton-perf-compare judges
    them: `kind` "memory", "compute" or "short" picks the prior run-to-run spread (None: "short"
    where the reference's median is under SHORT_MS, else "memory"), which `ref_medians` (the
    kernel's medians in earlier runs of the reference, at least MIN_RUNS_FOR_SPREAD) replace.
    `comparisons`: how many are judged together (a run's perf tests), 99% for all of them."""
    ref = summarize(ref_ms)
    kind = kind or kind_of(ref.median, None)
    if kind not in PRIOR_SPREAD:
        raise ValueError(f"kind={kind!r}: expected one of {', '.join(PRIOR_SPREAD)}")
    if not isinstance(comparisons, int) or isinstance(comparisons, bool) or comparisons < 1:
        raise ValueError(f"comparisons={comparisons!r}: expected a whole number >= 1")
    spread, source = spread_of(list(ref_medians), kind, comparisons)
    return compare(Side(ref, ref_clock_mhz), Side(summarize(new_ms), new_clock_mhz),
                   threshold=threshold, spread=spread, spread_from=source,
                   comparisons=comparisons)
