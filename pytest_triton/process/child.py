"""The supervised child: a pytest process that runs the test ids its parent lists and reports
every event (collection, reports, warnings, its own end) to the parent as JSON lines, which the
parent replays into its session (continuation.py). A child writes none of the run's outputs and
shows nothing on the terminal: the parent does both, with every result. The child is either a
fresh `python -m pytest` (configured here through --triton-child) or a fork of the parent made
after collection (forked.py), which registers the same Reporter."""

from __future__ import annotations

import json
import os

import pytest

from ..env import role
from . import gpufaults
from .crash import hard_exit

# Outputs a child must not write: the process that started it writes them, with every result.
_OUTPUT_OPTIONS = ("xmlpath", "report_log", "triton_perf_json", "benchmark_json", "benchmark_save",
                   "benchmark_autosave", "benchmark_histogram", "benchmark_cprofile_dump")


def prepare(config: pytest.Config) -> None:
    """In a child, before plugins configure: no terminal output, no files the parent writes."""
    if not role.is_child(config):
        return
    config.pluginmanager.set_blocked("terminalreporter")
    for dest in _OUTPUT_OPTIONS:
        if getattr(config.option, dest, None):
            setattr(config.option, dest, None)
    # --setup-show writes through the terminal reporter, which a child has not
    config.option.setupshow = False


class Reporter:
    """In a child (--triton-child DIR): report to the parent through DIR. `pending`: the test
    ids to run, given by a forked child; a fresh one reads them from DIR."""

    def __init__(self, config: pytest.Config, child_dir: str | None = None,
                 pending: list[str] | None = None):
        self.config = config
        self.dir = child_dir = child_dir or config.getoption("triton_child")
        if pending is None:
            with open(os.path.join(child_dir, "pending.txt"), encoding="utf-8") as f:
                pending = [line for line in f.read().splitlines() if line]
        self.pending = pending
        self._out = open(os.path.join(child_dir, "events.jsonl"), "a", encoding="utf-8")
        self._faults = None

    def _emit(self, **event) -> None:
        self._out.write(json.dumps(event, default=repr) + "\n")
        self._out.flush()

    @pytest.hookimpl(trylast=True)
    def pytest_sessionstart(self, session: pytest.Session) -> None:
        # After pytest's own faulthandler set-up (a forked child calls it itself)
        self.watch_faults()

    def watch_faults(self) -> None:
        """A crash's traceback goes to a file, which the parent puts in the test's report."""
        import faulthandler

        self._faults = open(os.path.join(self.dir, "faulthandler.txt"), "w")
        faulthandler.enable(file=self._faults, all_threads=False)

    def collected(self, nodeids: list[str]) -> None:
        self._emit(event="collected", ids=nodeids)

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, session: pytest.Session, config: pytest.Config,
                                      items: list[pytest.Item]) -> None:
        order = {nodeid: i for i, nodeid in enumerate(self.pending)}
        keep = sorted((it for it in items if it.nodeid in order), key=lambda it: order[it.nodeid])
        dropped = [it for it in items if it.nodeid not in order]
        items[:] = keep
        if dropped:
            config.hook.pytest_deselected(items=dropped)
        self.collected([it.nodeid for it in keep])

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.failed:
            self._emit(event="collectreport",
                       data=self.config.hook.pytest_report_to_serializable(config=self.config,
                                                                           report=report))

    def pytest_runtest_logstart(self, nodeid: str, location) -> None:
        self._emit(event="logstart", nodeid=nodeid, location=location)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self._emit(event="report",
                   data=self.config.hook.pytest_report_to_serializable(config=self.config,
                                                                       report=report))

    @pytest.hookimpl(trylast=True)
    def pytest_runtest_logfinish(self, nodeid: str, location) -> None:
        self._emit(event="logfinish", nodeid=nodeid, location=location)
        if gpufaults.lost(self.config) is not None:
            # This process can run no more GPU tests: the parent starts the next child.
            self._emit(event="retire", nodeid=nodeid)
            hard_exit(0)

    def pytest_keyboard_interrupt(self, excinfo) -> None:
        """pytest.exit() and KeyboardInterrupt both end here (wrap_session): tell the parent, so
        that it stops as this process does instead of taking the exit for a crash."""
        self.interrupted(excinfo.value)

    def interrupted(self, value: BaseException) -> None:
        if isinstance(value, pytest.exit.Exception):
            self._emit(event="interrupted", kind="exit", message=value.msg,
                       returncode=value.returncode)
        else:
            self._emit(event="interrupted", kind="keyboard", message=str(value), returncode=None)

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        import faulthandler

        if self._faults is not None:
            faulthandler.disable()
            self._faults.close()
        self._out.close()

    def pytest_warning_recorded(self, warning_message, when: str, nodeid: str, location) -> None:
        if when != "runtest":  # collection and config warnings: the parent has its own
            return
        category = warning_message.category or UserWarning
        self._emit(event="warning", message=str(warning_message.message),
                   category_module=category.__module__, category_name=category.__qualname__,
                   filename=warning_message.filename, lineno=warning_message.lineno, when=when,
                   nodeid=nodeid, location=location)
