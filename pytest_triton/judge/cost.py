"""What the judge's checks cost: their own time, measured where they run, against the tests'.

Each check counts its time (correctness/checking.costed: SPENT["default"] for the cheap checks
that always run, SPENT["judge"] for --triton-judge's). Each test phase's report carries what was
spent during it, so that xdist's workers and a supervised child report to the process that
writes the summary, which adds them up against the tests' own durations:

  pytest-triton judge: the default checks took 1.93 s of the tests' 161 s (1.2%); ...

Shown under --triton-judge, and with --triton-judge=default given explicitly (a run that asks
what the default checks cost). Measured this way, the figure does not depend on a second run
of the suite, nor on how busy the machine was.
"""

from __future__ import annotations

import pytest

from .. import options
from ..correctness import checking


def wanted(config: pytest.Config) -> bool:
    return config.getoption("triton_judge", default=None) in ("on", "default") or \
        options.get(config, "triton_judge") == "on"


class Cost:
    def __init__(self):
        self.mark = dict(checking.SPENT)
        self.spent = {"default": 0.0, "judge": 0.0}
        self.tests_s = 0.0
        self.phases = 0

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo):
        report = yield
        now = dict(checking.SPENT)
        report.triton_judge_s = {k: now[k] - self.mark[k] for k in now}
        self.mark = now
        return report

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        spent = getattr(report, "triton_judge_s", None)
        if not isinstance(spent, dict):
            return
        for k in self.spent:
            self.spent[k] += float(spent.get(k, 0.0))
        self.tests_s += report.duration
        self.phases += 1

    def summary(self) -> str:
        judge = self.spent["judge"]
        base = max(self.tests_s - judge, 1e-9)  # the tests as they run without judge mode
        line = (f"pytest-triton judge: the default checks took {self.spent['default']:.3g} s of "
                f"the tests' {base:.3g} s ({100 * self.spent['default'] / base:.2g}%)")
        if judge:
            line += f"; --triton-judge's checks {judge:.3g} s more ({100 * judge / base:.2g}%)"
        return line

    def pytest_terminal_summary(self, terminalreporter, exitstatus: int, config: pytest.Config) -> None:
        if self.phases and wanted(config):
            terminalreporter.write_line(self.summary())
