"""A perf test's outcome: after its body, the test fails unless every target of every measurement
held; its call report carries the measurements to the controller, the table, the JSON file and
JUnit XML."""

from __future__ import annotations

from dataclasses import asdict

import pytest

from . import verdict
from .markers import TARGET_KEY, PerfInconclusive, PerfInvalid, PerfTarget, PerfTargetError, PerfTargetMissed
from .session import DRY_KEY, GEOMEAN_KEY, MEASUREMENTS_KEY, UNCHECKED_KEY


def finish_call(item: pytest.Item) -> None:
    """After a perf test's body: the test fails unless every target of every measurement held."""
    __tracebackhide__ = True
    target: PerfTarget | None = item.stash.get(TARGET_KEY, None)
    if DRY_KEY in item.stash:
        return  # dryrun.finish judges a dry run
    measurements = item.stash.get(MEASUREMENTS_KEY, None)
    if target is None or measurements is None:
        return
    if not measurements:
        raise PerfTargetError(f"{item.nodeid}: has {target.describe()} but never called "
                              "triton_bench, so nothing was measured")
    geo = verdict.evaluate_geomean(measurements, target)
    checks = [(m, c) for m in measurements for c in m.checks]
    if geo is not None:
        checks.append((None, geo))
        item.stash[GEOMEAN_KEY] = geo
    failed = [(m, c) for m, c in checks if c.verdict in (verdict.FAIL, verdict.INVALID)]
    unsure = [(m, c) for m, c in checks if c.verdict == verdict.INCONCLUSIVE]
    if not failed and not unsure:
        return
    lines = []
    for m, c in failed + unsure:
        where = f"[{m.name}] " if m is not None and m.name else ""
        tag = c.verdict.upper()
        lines.append(f"{tag} {where}{c.target}: {c.message}")
        if m is not None and m.roofline:
            lines.append(f"    {m.roofline}")
    if any(c.verdict == verdict.INVALID for _, c in failed):
        raise PerfInvalid("\n".join(lines))
    hot = [m for m, _ in failed if m is not None and m.timings.throttled]
    if hot:
        # measured again while throttled (_measure), and throttled to the last round: the miss
        # may be the GPU's, not the kernel's, so it proves nothing either way (nor a negative
        # control's xfail(raises=PerfTargetMissed))
        reasons = {r for m in hot for g in (m.timings.gpu_before, m.timings.gpu_after)
                   for r in (g.get("clock_reasons") or [])}
        why = ", ".join(sorted(reasons)) or "NVML reports throttling"
        raise PerfInconclusive(
            f"inconclusive: the GPU was throttling in every round of measurement ({why}), so "
            "this miss may be the GPU's, not the kernel's; let it cool or find what holds its "
            "clocks down (nvidia-smi -q -d PERFORMANCE)\n" + "\n".join(lines))
    if failed:
        raise PerfTargetMissed("\n".join(lines))
    if all(m is None for m, _ in unsure):
        # only the geomean: its shapes are measured by the test's body, which runs once, so
        # --triton-perf-retries cannot measure them again
        raise PerfInconclusive(
            f"inconclusive: the target lies inside the 99% CI of the geometric mean over "
            f"{len(measurements)} shapes, each measured once (a geomean is not re-measured: the "
            "test's body runs once; --triton-perf-max-time narrows each shape's CI)\n"
            + "\n".join(lines))
    rounds = max(m.rounds for m in measurements)
    raise PerfInconclusive("inconclusive after " + f"{rounds} round{'s' if rounds != 1 else ''} "
                           "of measurement: the target lies "
                           "inside the measurement's 99% CI\n" + "\n".join(lines))


def report_payload(item: pytest.Item) -> dict | None:
    """What the call report carries to the controller (and to xdist's): JSON-ready."""
    measurements = item.stash.get(MEASUREMENTS_KEY, None)
    if not measurements:
        return None
    geo = item.stash.get(GEOMEAN_KEY, None)
    target = item.stash.get(TARGET_KEY, None)
    return {
        "measurements": [m.to_dict() for m in measurements],
        "target": target.describe() if target else None,
        "geomean": None if geo is None else asdict(geo),
    }


def junit_properties(item: pytest.Item) -> list[tuple[str, object]]:
    props = []
    for m in item.stash.get(MEASUREMENTS_KEY, None) or []:
        prefix = f"triton[{m.name}]." if m.name else "triton."
        props.append((prefix + "median_ms", f"{m.time.median:.6g}"))
        if m.gbps is not None:
            props.append((prefix + "gbps", f"{m.gbps:.6g}"))
        if m.tflops is not None:
            props.append((prefix + "tflops", f"{m.tflops:.6g}"))
        if m.speedup is not None:
            props.append((prefix + "speedup", f"{m.speedup.median:.4g}"))
        props.append((prefix + "verdict", m.verdict))
    return props


CLEAN_ERRORS = (PerfTargetMissed, PerfInconclusive, PerfInvalid, PerfTargetError)


def annotate_report(item: pytest.Item, call: pytest.CallInfo, report: pytest.TestReport) -> None:
    """Attach what this phase measured (or left unchecked) to its report, for the controller,
    the terminal table, the JSON file and JUnit XML."""
    if report.when in ("setup", "call") and report.skipped and UNCHECKED_KEY in item.stash:
        report.triton_unchecked = item.stash[UNCHECKED_KEY]
    if report.when == "call":
        # A verdict is a message, not a bug in the plugin: show it without the plugin's frames.
        if report.failed and call.excinfo is not None and isinstance(call.excinfo.value, CLEAN_ERRORS):
            exc = call.excinfo.value
            report.longrepr = f"{type(exc).__name__}: {exc}"
        payload = report_payload(item)
        if payload:
            report.triton_perf = payload
            # JUnit XML reads the teardown report's properties, which come from the item.
            item.user_properties.extend(junit_properties(item))
