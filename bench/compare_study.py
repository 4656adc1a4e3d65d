"""Which statistic the regression gate uses, measured on saved GPU runs (not a test).

    python bench/compare_study.py RUN_A/perf.json RUN_B/perf.json [--unchanged PATTERN...]

Two perf runs of one GPU, from separate pytest processes (bench/runs/ keeps several): each
measurement whose kernel did not change between their commits (--unchanged names the test
files or kernels whose code is the same in both) is compared three ways:

- self: B against A as they are: any SLOW or FAST is a false verdict;
- planted: B's samples made 3% slower (memory-bound kernels) and 10% slower (compute-bound:
  a flops= target): anything but SLOW is a miss;

under four rules: this plugin's (regress/change.py, with the prior run-to-run spread, as a
first comparison has no history: by kind, and wider for kernels under 0.1 ms), asv's
(Mann-Whitney U, p < 0.002, and a factor: 1.1 as asv
ships and 1.03 as our threshold), nvbench's robust compare ([min, q3] intervals apart by at
least 0.5%) and pytest-benchmark's (the means differ by 3%). Prints the counts per rule.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys

from pytest_triton import Change, compare_samples


def measurements(path: str) -> dict:
    doc = json.load(open(path))
    return {m["nodeid"] + (f"[{m['name']}]" if m["name"] else ""): m
            for r in doc["results"] for m in r["measurements"]}


def clock(m: dict) -> float | None:
    c = [m[k].get("sm_clock_mhz") for k in ("gpu_before", "gpu_after") if m.get(k)]
    c = [x for x in c if x]
    return statistics.fmean(c) if c else None


def ours(a: list, b: list, kind: str, ca, cb) -> str:
    return compare_samples(a, b, kind=kind, ref_clock_mhz=ca, new_clock_mhz=cb).verdict.value


def quantile(xs: list, q: float) -> float:
    """The q-quantile of sorted samples, interpolated."""
    pos = q * (len(xs) - 1)
    lo = int(pos)
    return xs[lo] + (xs[min(lo + 1, len(xs) - 1)] - xs[lo]) * (pos - lo)


def mann_whitney_p(a: list, b: list) -> float:
    """Two-sided p of the Mann-Whitney U test, normal approximation with the tie correction."""
    pooled = sorted([(x, 0) for x in a] + [(x, 1) for x in b])
    ranks, i, ties = [0.0] * len(pooled), 0, 0.0
    while i < len(pooled):
        j = i
        while j + 1 < len(pooled) and pooled[j + 1][0] == pooled[i][0]:
            j += 1
        for k in range(i, j + 1):
            ranks[k] = (i + j) / 2 + 1
        t = j - i + 1
        ties += t ** 3 - t
        i = j + 1
    n1, n2 = len(a), len(b)
    r1 = sum(r for r, (_, g) in zip(ranks, pooled) if g == 0)
    u = r1 - n1 * (n1 + 1) / 2
    mu = n1 * n2 / 2
    n = n1 + n2
    var = n1 * n2 / 12 * ((n + 1) - ties / (n * (n - 1)))
    if var <= 0:
        return 1.0
    z = (abs(u - mu) - 0.5) / math.sqrt(var)
    return math.erfc(z / math.sqrt(2))


def asv(a: list, b: list, factor: float) -> str:
    ratio = statistics.median(b) / statistics.median(a)
    if mann_whitney_p(a, b) >= 0.002:
        return "same"
    return "slow" if ratio > factor else "fast" if ratio < 1 / factor else "same"


def nvbench(a: list, b: list) -> str:
    sa, sb = sorted(a), sorted(b)
    amin, aq3, bmin, bq3 = sa[0], quantile(sa, 0.75), sb[0], quantile(sb, 0.75)
    if bmin > aq3 * 1.005:
        return "slow"
    if amin > bq3 * 1.005:
        return "fast"
    return "uncertain"


def pytest_benchmark(a: list, b: list) -> str:
    r = statistics.fmean(b) / statistics.fmean(a)
    return "slow" if r > 1.03 else "fast" if r < 1 / 1.03 else "same"


RULES = {"pytest-triton": None, "asv (x1.1)": lambda a, b: asv(a, b, 1.1),
         "asv (x1.03)": lambda a, b: asv(a, b, 1.03), "nvbench robust": nvbench,
         "pytest-benchmark (mean 3%)": pytest_benchmark}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("a")
    p.add_argument("b")
    p.add_argument("--unchanged", nargs="*", default=None,
                   help="substrings of the measurements to use (default: all)")
    args = p.parse_args()
    ma, mb = measurements(args.a), measurements(args.b)
    keys = [k for k in sorted(set(ma) & set(mb))
            if args.unchanged is None or any(u in k for u in args.unchanged)]
    counts = {rule: {"self": {}, "planted": {}} for rule in RULES}
    for k in keys:
        a, b = ma[k]["samples_ms"], mb[k]["samples_ms"]
        kind = "compute" if ma[k].get("flops") else "memory"
        factor = 1.10 if kind == "compute" else 1.03
        if ma[k]["median_ms"] < 0.1:
            kind = "short"
        for case, bb in (("self", b), ("planted", [x * factor for x in b])):
            for rule, fn in RULES.items():
                v = ours(a, bb, kind, clock(ma[k]), clock(mb[k])) if fn is None else fn(a, bb)
                counts[rule][case][v] = counts[rule][case].get(v, 0) + 1
                if rule == "pytest-triton" and ((case == "self" and v in ("slow", "fast"))
                                                or (case == "planted" and v != "slow")):
                    print(f"  {rule} {case}: {v}: {k}", file=sys.stderr)
    print(f"{len(keys)} measurements of unchanged kernels")
    print(f"{'rule':28s} {'self: false SLOW/FAST':>22s} {'planted: SLOW':>14s}   (all verdicts)")
    for rule, c in counts.items():
        false = c["self"].get("slow", 0) + c["self"].get("fast", 0)
        print(f"{rule:28s} {false:>16d} of {len(keys):<3d} {c['planted'].get('slow', 0):>8d} of "
              f"{len(keys):<3d}  self {dict(sorted(c['self'].items()))} planted "
              f"{dict(sorted(c['planted'].items()))}")
    assert {v.value for v in Change} >= {'slow', 'fast', 'same', 'uncertain'}


if __name__ == "__main__":
    main()
