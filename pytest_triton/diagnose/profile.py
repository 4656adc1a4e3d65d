"""--triton-perf-profile DIR: a Chrome trace of each perf measurement, for a person to open.

After triton_bench has timed `fn`, a few more calls run under torch.profiler (CPU activity, and
CUDA activity on a GPU) inside a record_function range named after the test, and the trace is
written to DIR/<test id>.json (chrome://tracing, ui.perfetto.dev). torch.profiler rather than
proton: it is there wherever torch is, its traces open in any browser, and it sees the torch
ops around a Triton launch too. The calls are not timed and change no verdict.
"""

from __future__ import annotations

import hashlib
import os
import re

import pytest

from .. import options, state
from ..perf import record
from ..perf.session import nothing_measured, session

CALLS = 3  # calls traced: the first may still show one-time work (allocations), the rest steady


def directory(config: pytest.Config) -> str | None:
    return options.get(config, "triton_perf_profile") or None


def filename(label: str) -> str:
    """A file name for a test id: path separators and brackets become '_' and '-', long ids are
    cut and keep a hash so two tests never share a file."""
    name = label.replace("::", "__").replace("/", ".")
    name = re.sub(r"[^\w.\-]+", "-", name).strip("-.")
    if len(name) > 150:
        name = name[:140] + "-" + hashlib.sha1(label.encode()).hexdigest()[:8]
    return name + ".json"


def after_measure(item: pytest.Item, m, fn) -> None:
    out = directory(item.config)
    if not out:
        return
    rt = state.get(item.config).runtime
    import torch  # import time: a measured run has it; an xdist controller profiles nothing
    from torch.profiler import ProfilerActivity, profile, record_function

    activities = [ProfilerActivity.CPU]
    if not rt.interpret:
        activities.append(ProfilerActivity.CUDA)
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, filename(m.label))
    with profile(activities=activities, record_shapes=True) as prof:
        with record_function(m.label):
            for _ in range(CALLS):
                fn()
            if not rt.interpret:
                torch.cuda.synchronize(rt.device)
    prof.export_chrome_trace(path)
    m.trace = path  # in the record: the JSON file has it too


def annotate_report(item: pytest.Item, report: pytest.TestReport) -> None:
    """Each trace's path as a JUnit property."""
    rec = record.of(item)
    if report.when != "call" or rec is None:
        return
    for m in rec.measurements:
        if m.trace is not None:
            prefix = m.junit_prefix
            item.user_properties.append((prefix + "trace", m.trace))


def terminal_summary(tr, config: pytest.Config) -> None:
    """Say so when the run wrote no trace because it measured nothing (no GPU: dry runs)."""
    out = directory(config)
    idle = nothing_measured(config) if out else None
    ps = session(config)
    if idle and ps is not None and ps.controller:
        tr.write_line(f"--triton-perf-profile {out}: no trace written: {idle}", yellow=True,
                      bold=True)


class Profile:
    """--triton-perf-profile DIR: a Chrome trace of each measurement."""

    def __init__(self, config: pytest.Config):
        self._config = config

    def pytest_triton_measured(self, item: pytest.Item, measurement, fn, kernel, compiles) -> None:
        after_measure(item, measurement, fn)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo):
        report = yield
        annotate_report(item, report)
        return report

    def pytest_terminal_summary(self, terminalreporter, exitstatus: int,
                                config: pytest.Config) -> None:
        terminal_summary(terminalreporter, config)
