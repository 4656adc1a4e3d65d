"""Sample statistics for timings: robust summaries and a distribution-free CI of the median."""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass, fields

# z for a two-sided 99% interval: a CI gate takes a verdict on every test of every run, so its
# intervals must be wide enough that a good kernel is almost never called slow by chance.
Z = 2.576
# Within one run samples agree more closely than runs do (clocks, placement, temperature), so no
# interval is allowed to be narrower than +-0.5% of the median: a kernel that sits within 0.5%
# of its target is inconclusive, not passed.
MIN_HALF_WIDTH = 0.005


@dataclass(frozen=True)
class Summary:
    n: int
    median: float
    q1: float
    q3: float
    mean: float
    stdev: float
    min: float
    max: float
    ci_lo: float  # 99% CI of the median, widened to at least +-MIN_HALF_WIDTH
    ci_hi: float

    @property
    def iqr(self) -> float:
        return self.q3 - self.q1

    @property
    def noise(self) -> float:
        """IQR over median: the spread of one sample."""
        return self.iqr / self.median if self.median else math.inf

    @property
    def rse(self) -> float:
        """Relative standard error of the median, from a robust sigma (IQR / 1.349)."""
        if self.n < 2 or not self.median:
            return math.inf
        return 1.2533 * (self.iqr / 1.349) / math.sqrt(self.n) / self.median

    def to_dict(self) -> dict:
        d = asdict(self)
        d.update(iqr=self.iqr, noise=self.noise, rse=self.rse)
        return d

    @classmethod
    def from_dict(cls, d: dict | None) -> Summary | None:
        """A summary read back from to_dict() (the derived iqr, noise and rse are dropped)."""
        return None if d is None else cls(**{f.name: d[f.name] for f in fields(cls)})


def positive_finite(value) -> bool:
    """Whether `value` is a number (not a bool) that is finite and > 0: a time, a rate, a size."""
    return (not isinstance(value, bool) and isinstance(value, (int, float))
            and math.isfinite(value) and value > 0)


def quantile(sorted_xs: list[float], q: float) -> float:
    """The q-quantile of sorted samples, interpolating linearly."""
    if len(sorted_xs) == 1:
        return sorted_xs[0]
    pos = q * (len(sorted_xs) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_xs) - 1)
    return sorted_xs[lo] + (sorted_xs[hi] - sorted_xs[lo]) * (pos - lo)


def median_ci(sorted_xs: list[float]) -> tuple[float, float]:
    """Order-statistic CI of the median: valid for any distribution of independent samples."""
    n = len(sorted_xs)
    half = Z * math.sqrt(n) / 2
    lo = max(0, math.floor(n / 2 - half) - 1)
    hi = min(n - 1, math.ceil(n / 2 + half))
    return sorted_xs[lo], sorted_xs[hi]


def summarize(samples: list[float]) -> Summary:
    if not samples:
        raise ValueError("no samples")
    xs = sorted(float(x) for x in samples)
    if any(not math.isfinite(x) for x in xs):
        raise ValueError(f"non-finite sample among {xs[:5]}...")
    med = statistics.median(xs)
    lo, hi = median_ci(xs)
    lo = min(lo, med * (1 - MIN_HALF_WIDTH))
    hi = max(hi, med * (1 + MIN_HALF_WIDTH))
    return Summary(
        n=len(xs), median=med, q1=quantile(xs, 0.25), q3=quantile(xs, 0.75),
        mean=statistics.fmean(xs), stdev=statistics.stdev(xs) if len(xs) > 1 else 0.0,
        min=xs[0], max=xs[-1], ci_lo=lo, ci_hi=hi,
    )


def geomean(values: list[float]) -> float:
    return math.exp(statistics.fmean(math.log(v) for v in values))


def geomean_ci(summaries: list[Summary]) -> tuple[float, float, float]:
    """Geometric mean of the medians and its CI, combining each median's CI in log space."""
    logs = [math.log(s.median) for s in summaries]
    # Each CI is ~symmetric in log space; its half-width stands for Z standard errors.
    var = sum(((math.log(s.ci_hi) - math.log(s.ci_lo)) / 2) ** 2 for s in summaries)
    center = statistics.fmean(logs)
    half = math.sqrt(var) / len(summaries)
    half = max(half, MIN_HALF_WIDTH)
    return math.exp(center), math.exp(center - half), math.exp(center + half)
