"""--triton-judge: every perf verdict recomputed by a process that runs no test.

Under --triton-judge the tests run in a supervised child (process/supervise.py: a fresh pytest
process on a GPU, a fork of this one under the interpreter) or in pytest-xdist's workers. This
process runs no test body: it takes each perf test's report, checks its own timer functions
against those noted at start-up (identities.py; putting back any a test module replaced when it
was imported here), and recomputes every measurement from its raw samples with perf/stats.py: a
median, a 99% CI, a throughput, a speedup or a validity that differs from its own samples' came
from a process whose statistics were replaced (gpu-mode reference-kernels #162), and the test
fails. What no check in this process can see: samples that were false when they were taken (a
test that replaced the timer and the child's own identity checks alike, with full knowledge of
the plugin); the child's identity checks stand there.
"""

from __future__ import annotations

import math

import pytest

from ..perf import stats
from . import identities

RTOL = 1e-9  # recomputed in the same float arithmetic: any difference is not rounding


def _differs(a, b) -> bool:
    if a is None or b is None:
        return a is not b
    return not math.isclose(float(a), float(b), rel_tol=RTOL, abs_tol=1e-15)


def recheck(m: dict) -> list[str]:
    """What the report of one measurement says that its own samples do not."""
    label = f"{m.get('nodeid')}[{m['name']}]" if m.get("name") else m.get("nodeid", "?")
    samples = m.get("samples_ms")
    if not samples:
        return [f"{label}: the report carries no raw samples to recompute its verdict from"]
    found = []
    t = stats.summarize(list(samples))
    said = m.get("time_ms") or {}
    for key in ("median", "ci_lo", "ci_hi"):
        if _differs(getattr(t, key), said.get(key)):
            found.append(f"{label}: the reported {key} {said.get(key)!r} ms is not its samples' "
                         f"{getattr(t, key)!r} ms")
    if m.get("bytes"):
        gbps = m["bytes"] / t.median / 1e6
        if _differs(gbps, m.get("gbps")):
            found.append(f"{label}: the reported {m.get('gbps')!r} GB/s is not its samples' "
                         f"{gbps:.6g} GB/s")
        peak = (m.get("peaks") or {}).get("dram_gbps_datasheet")
        if peak and m["bytes"] / t.ci_hi / 1e6 > peak and m.get("verdict") != "invalid":
            found.append(f"{label}: its samples give more than the datasheet's {peak:.0f} GB/s "
                         f"(invalid), and it was reported {m.get('verdict')!r}")
    base = m.get("baseline_samples_ms")
    if base and m.get("speedup"):
        ratios = [b / a for b, a in zip(base, samples) if a > 0]
        s = stats.summarize(ratios)
        if _differs(s.median, m["speedup"].get("median")):
            found.append(f"{label}: the reported speedup {m['speedup'].get('median')!r}x is not "
                         f"its samples' {s.median:.6g}x")
    return found


class Verifier:
    """Registered under --triton-judge in the process that runs no test (a supervisor, xdist's
    controller): first of the report's listeners, so that every output sees the verdict."""

    def __init__(self, config: pytest.Config):
        self.config = config

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        payload = getattr(report, "triton_perf", None)
        if not payload or report.when != "call":
            return
        problems = []
        replaced = identities.tampering(self.config, "in the process that judges the reports")
        if replaced:
            problems.append(replaced)
        for m in payload.get("measurements", ()):
            problems += recheck(m)
        if problems:
            report.outcome = "failed"
            report.longrepr = ("pytest-triton judge: timer tampering: the verdict recomputed "
                               "from the raw samples, in a process that ran no test, disagrees "
                               "with the test's own:\n  " + "\n  ".join(problems))
