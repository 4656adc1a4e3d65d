"""A perf test's body run once, untimed, where there is no GPU to time on: its triton_bench calls
check their arguments against the test's targets and call fn (and baseline) once, and the test
ends as a skip naming what stayed unchecked."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from .. import state
from .markers import TARGET_KEY, PerfTarget, PerfTargetError
from .outcome import CLEAN_ERRORS
from .session import DRY_KEY, MEASUREMENTS_KEY, UNCHECKED_KEY, dry_run


@dataclass
class DryCall:
    """One triton_bench call of a dry run: its arguments were checked, fn (and baseline) ran once."""
    name: str | None
    baseline: bool


@dataclass
class DryRun:
    """A perf test's body run once without timing, where there is no GPU to time on."""
    calls: list = field(default_factory=list)  # DryCall
    unverifiable: list = field(default_factory=list)  # checks that need the device, not made


def finish_call(item: pytest.Item) -> None:
    """After a dry run's body (outcome.finish_call judges measured ones)."""
    __tracebackhide__ = True
    dry = item.stash.get(DRY_KEY, None)
    if dry is not None:
        _finish(item, item.stash.get(TARGET_KEY, None), dry)


def _finish(item: pytest.Item, target: PerfTarget | None, dry: DryRun) -> None:
    """A dry run that went through ends as a skip naming what stayed unchecked; a perf test
    that never called triton_bench fails, as it would on the GPU."""
    __tracebackhide__ = True
    if not dry.calls:
        if target is None:
            return  # triton_bench requested, never called, nothing asked of it
        raise PerfTargetError(f"{item.nodeid}: has {target.describe()} but never called "
                              "triton_bench, so nothing would be measured")
    n = len(dry.calls)
    ran = "fn and baseline" if any(c.baseline for c in dry.calls) else "fn"
    text = (f"dry run, nothing timed (no GPU): {n} triton_bench call{'s' if n > 1 else ''} "
            f"checked and {ran} run once; targets unchecked: "
            + (target.describe() if target is not None else "none (no perf_target)"))
    if dry.unverifiable:
        text += "; needs the device, not checked: " + ", ".join(dry.unverifiable)
    pytest.skip(text)


def annotate_report(item: pytest.Item, call: pytest.CallInfo,
                        report: pytest.TestReport) -> None:
    """A dry run's errors read as on the GPU (the message, without the plugin's frames); its
    skip is reported at the test's location, not at the plugin's line."""
    if DRY_KEY not in item.stash or report.when != "call":
        return
    if report.failed and call.excinfo is not None and isinstance(call.excinfo.value, CLEAN_ERRORS) \
            and not state.get(item.config).perf:  # (with --triton-perf outcome.annotate_report does it)
        exc = call.excinfo.value
        report.longrepr = f"{type(exc).__name__}: {exc}"
    if (report.skipped
            and isinstance(report.longrepr, tuple) and len(report.longrepr) == 3
            and "dry run, nothing timed" in str(report.longrepr[2])):
        path, line = item.reportinfo()[:2]
        if line is not None:
            report.longrepr = (str(path), line + 1, report.longrepr[2])


def setup_item(item: pytest.Item, target: PerfTarget) -> None:
    st = state.get(item.config)
    if dry_run(item.config):
        item.stash[DRY_KEY] = DryRun()
        if st.perf:  # asked for, not done: gate() counts it
            item.stash[UNCHECKED_KEY] = target.describe()
        return
    if not st.perf:
        pytest.skip(f"perf test ({target.describe()}): run with --triton-perf to time it")
    item.stash[MEASUREMENTS_KEY] = []
