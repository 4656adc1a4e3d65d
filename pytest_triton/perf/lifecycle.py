"""A perf test's life in the process that runs it: its record made at collection (with every
marker checked), its mode decided once at setup, its outcome judged after its body
(perf/verdict.py), and its call report carrying the record to the process that writes the
results (the terminal table, the JSON file) and to JUnit XML."""

from __future__ import annotations

import pytest

from .. import state
from ..env.interpreter.gaps import INTERPRETER_GAP_KEY
from . import markers, verdict
from .markers import PerfInconclusive, PerfInvalid, PerfTargetError, PerfTargetMissed
from .record import RECORD_KEY, Mode, PerfRecord, of
from .session import mode

CLEAN_ERRORS = (PerfTargetMissed, PerfInconclusive, PerfInvalid, PerfTargetError)


class PerfTests:
    """The perf_target and interpreter_gap markers, and the record of every perf test."""

    def __init__(self, config: pytest.Config):
        self._config = config

    @pytest.hookimpl(wrapper=True)
    def pytest_pycollect_makeitem(self, collector: pytest.Collector, name: str, obj: object):
        result = yield
        items = result if isinstance(result, list) else [result]
        checklist = state.get(collector.config).checklist
        for item in items:
            if isinstance(item, pytest.Item):
                # what is wrong with its markers errors this test alone, at its setup
                target = markers.validate_item(item, checklist)
                if target is not None or "triton_bench" in getattr(item, "fixturenames", ()):
                    item.stash[RECORD_KEY] = PerfRecord(item.nodeid, target)
        return result

    @pytest.hookimpl(wrapper=True, trylast=True)
    def pytest_runtest_setup(self, item: pytest.Item):
        markers.raise_marker_error(item)  # a bad or misspelt marker errors this test alone
        record = of(item)
        if record is not None:  # first: a target the interpreter's gap skips is unchecked too
            record.mode = mode(item.config)
            if record.mode is Mode.SKIPPED and record.target is not None:
                pytest.skip(f"perf test ({record.target.describe()}): run with --triton-perf to "
                            "time it")
        gap = item.stash.get(INTERPRETER_GAP_KEY, None)
        if gap and state.get(item.config).runtime.interpret:
            if record is not None and record.target is not None:
                record.gap_stops_body = gap  # the body's triton_bench still checks its arguments
            else:
                # reported at the test's own line, as a skip marker is (not at this hook's), so
                # that -rs names each test rather than folding them all into one plugin line
                raise pytest.skip.Exception(gap, _use_item_location=True)
        return (yield)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item: pytest.Item):
        __tracebackhide__ = True
        record = of(item)
        if record is None:
            return (yield)
        try:
            result = yield
        except BaseException:
            if record.measurements:  # what was measured before the body failed is diagnosed too
                item.config.hook.pytest_triton_judged(item=item, record=record)
            raise
        failure = verdict.judge(record)
        if record.measurements:
            item.config.hook.pytest_triton_judged(item=item, record=record)
        if failure is not None:
            raise failure
        return result

    @pytest.hookimpl(wrapper=True, trylast=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo):
        report = yield
        record = of(item)
        if record is not None:
            annotate_report(item, call, report, record)
        return report


def junit_properties(record: PerfRecord) -> list[tuple[str, object]]:
    props = []
    for m in record.measurements:
        prefix = m.junit_prefix
        props.append((prefix + "median_ms", f"{m.time.median:.6g}"))
        if m.gbps is not None:
            props.append((prefix + "gbps", f"{m.gbps:.6g}"))
        if m.tflops is not None:
            props.append((prefix + "tflops", f"{m.tflops:.6g}"))
        if m.speedup is not None:
            props.append((prefix + "speedup", f"{m.speedup.median:.4g}"))
        props.append((prefix + "verdict", m.verdict.value))
    return props


def annotate_report(item: pytest.Item, call: pytest.CallInfo, report: pytest.TestReport,
                    record: PerfRecord) -> None:
    """Attach what this phase measured (or left unchecked) to its report, for the process that
    writes the results, and JUnit XML."""
    if report.when in ("setup", "call") and report.skipped and record.target is not None \
            and record.mode is Mode.DRY_RUN and state.get(item.config).perf:
        report.triton_unchecked = record.target.describe()  # asked for, not done: gate() counts it
    if report.when != "call":
        return
    # A verdict is a message, not a bug in the plugin: show it without the plugin's frames.
    if report.failed and call.excinfo is not None and isinstance(call.excinfo.value, CLEAN_ERRORS):
        exc = call.excinfo.value
        report.longrepr = f"{type(exc).__name__}: {exc}"
    if record.measurements or record.counted:
        report.triton_perf = record.payload()
        # JUnit XML reads the teardown report's properties, which come from the item.
        item.user_properties.extend(junit_properties(record))
