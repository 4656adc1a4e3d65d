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

import dataclasses
import math

import pytest

from ..perf import rates, verdict
from ..perf.record import Measurement, Verdict
from . import identities

RTOL = 1e-9  # recomputed in the same float arithmetic: any difference is not rounding


def _differs(a, b) -> bool:
    if a is None or b is None:
        return a is not b
    return not math.isclose(float(a), float(b), rel_tol=RTOL, abs_tol=1e-15)


def recheck(m: dict) -> list[str]:
    """What the report of one measurement says that its own samples do not: the measurement is
    read back (Measurement.from_dict) and built again from its samples (verdict.build), and
    each figure of the two compared."""
    try:
        said = Measurement.from_dict(m)
    except (KeyError, TypeError, ValueError, AttributeError) as e:  # a part of the wrong shape
        return [f"{m.get('nodeid', '?')}: its report cannot be read back ({e!r})"]
    label = said.label
    if not said.timings.ms:
        return [f"{label}: the report carries no raw samples to recompute its verdict from"]
    timings = dataclasses.replace(said.timings, baseline_ms=said.timings.baseline_ms or None)
    again = verdict.build(said.nodeid, said.name, timings, bytes=said.bytes, flops=said.flops,
                          dtype=said.dtype, config=said.config, device=said.device,
                          rounds=said.rounds)
    found = []
    t = again.time
    for key in ("median", "ci_lo", "ci_hi"):
        if _differs(getattr(t, key), getattr(said.time, key)):
            found.append(f"{label}: the reported {key} {getattr(said.time, key)!r} ms is not its "
                         f"samples' {getattr(t, key)!r} ms")
    if said.bytes:
        if _differs(again.gbps, said.gbps):
            found.append(f"{label}: the reported {said.gbps!r} GB/s is not its samples' "
                         f"{again.gbps:.6g} GB/s")
        peak = said.peaks.dram_gbps_datasheet
        reported = m.get("verdict")  # what the report says, whatever its checks hold
        if peak and rates.gbps(said.bytes, t.ci_hi) > peak and reported != Verdict.INVALID:
            found.append(f"{label}: its samples give more than the datasheet's {peak:.0f} GB/s "
                         f"(invalid), and it was reported {reported!r}")
    if again.speedup is not None and said.speedup is not None:
        if _differs(again.speedup.median, said.speedup.median):
            found.append(f"{label}: the reported speedup {said.speedup.median!r}x is not "
                         f"its samples' {again.speedup.median:.6g}x")
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
