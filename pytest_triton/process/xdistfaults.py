"""Under pytest-xdist: a worker whose CUDA context is lost retires, and a worker's crash is
explained.

A worker cannot leave cleanly while tests are assigned to it (the controller asserts that a
finishing worker has none pending, and a worker that sets shouldstop stops the whole run), so a
worker whose context is lost reports the test, leaves a note and exits. xdist treats the exit as a
crash: it gives the worker's pending tests to the others, starts a replacement, and reports the
test once more as "crashed". The controller side here turns that second report into the test's
missing teardown (so the terminal, JUnit XML and the counts see the test once) and takes the
retirement off the --max-worker-restart count, so that a run with a few bad kernels is never cut
short. A worker that really crashed (a segfault under Triton's interpreter) gets a report that
says what happened and how to reproduce it, instead of xdist's bare one.
"""

from __future__ import annotations

import json
import os
import re
import tempfile

import pytest

from ..env import role
from .crash import crash_message, hard_exit


def _note_path(testrunuid: str, workerid: str) -> str:
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", f"{testrunuid}-{workerid}")
    return os.path.join(tempfile.gettempdir(), f"pytest-triton-retired-{safe}.json")


class Worker:
    def __init__(self, config: pytest.Config):
        self.config = config
        self.session: pytest.Session | None = None

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        self.session = session

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport):
        fault = getattr(report, "triton_fault", None)
        if fault and report.when == "teardown":
            # Its own teardown reported the loss: keep the report back (the controller turns the
            # crash report into it), since a report after it would have no phase to stand for.
            self._retire(report, keep=True)
        result = yield
        if fault and report.when in ("setup", "call"):
            # Sent: the controller turns the crash report into the teardown this skips.
            self._teardown_fixtures()
            self._retire(report, keep=False)
        return result

    def _teardown_fixtures(self) -> None:
        setupstate = getattr(self.session, "_setupstate", None)
        if setupstate is not None:
            try:
                setupstate.teardown_exact(None)
            except Exception:  # the context is lost: its errors here say nothing new
                pass

    def _retire(self, report: pytest.TestReport, keep: bool) -> None:
        wi = role.worker_input(self.config)
        data = (self.config.hook.pytest_report_to_serializable(config=self.config, report=report)
                if keep else None)
        note = {"nodeid": report.nodeid, "when": report.when, "report": data}
        with open(_note_path(wi["testrunuid"], wi["workerid"]), "w", encoding="utf-8") as f:
            json.dump(note, f, default=repr)
        hard_exit(0)


class Controller:
    def __init__(self, config: pytest.Config):
        self.config = config
        self.retired: dict[str, dict] = {}  # crash item -> the retirement note
        self.seen: dict[str, dict[str, pytest.TestReport]] = {}  # running test -> its reports

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when not in ("setup", "call", "teardown"):
            return
        if report.when == "teardown":
            self.seen.pop(report.nodeid, None)
        else:
            self.seen.setdefault(report.nodeid, {})[report.when] = report

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node, error) -> None:
        if not error:
            return
        wi = getattr(node, "workerinput", None) or {}
        path = _note_path(str(wi.get("testrunuid")), str(wi.get("workerid")))
        try:
            with open(path, encoding="utf-8") as f:
                note = json.load(f)
            os.remove(path)
        except (OSError, ValueError):
            return  # a real crash
        note["worker"] = wi.get("workerid")
        self.retired[note["nodeid"]] = note
        # xdist counts every worker that goes down against --max-worker-restart, and has no
        # public way to take a deliberate exit off it; it counts right after this hook.
        dsession = self.config.pluginmanager.getplugin("dsession")
        count = getattr(dsession, "_failed_nodes_count", None)
        if isinstance(count, int):
            dsession._failed_nodes_count = count - 1
        tr = self.config.pluginmanager.get_plugin("terminalreporter")
        if tr is not None:
            tr.write_line(f"[{note['worker']}] pytest-triton: retired after {note['nodeid']} lost "
                          "its CUDA context; xdist replaces it (not counted against "
                          "--max-worker-restart)")

    @pytest.hookimpl(optionalhook=True)
    def pytest_handlecrashitem(self, crashitem: str, report: pytest.TestReport, sched) -> None:
        seen = self.seen.pop(crashitem, {})
        note = self.retired.pop(crashitem, None)
        if note is not None:
            self._as_teardown(report, note, seen)
        else:
            self._explain(crashitem, report, seen)

    def _as_teardown(self, report: pytest.TestReport, note: dict, seen: dict) -> None:
        if note.get("report") is not None:
            kept = self.config.hook.pytest_report_from_serializable(config=self.config,
                                                                    data=note["report"])
            report.__dict__.update(kept.__dict__)
            return
        last = seen.get("call") or seen.get("setup")
        report.when = "teardown"
        report.outcome = "passed"
        report.longrepr = None
        report.sections = []
        report.duration = 0.0
        if last is not None:
            report.location = last.location
            report.keywords = dict(last.keywords)
            report.user_properties = list(last.user_properties)
            for name in ("item_index", "worker_id", "testrun_uid"):
                if hasattr(last, name):
                    setattr(report, name, getattr(last, name))

    def _explain(self, crashitem: str, report: pytest.TestReport, seen: dict) -> None:
        node = getattr(report, "node", None)
        worker = getattr(getattr(node, "gateway", None), "id", None) or "a worker"
        phases = {when: rep.outcome for when, rep in seen.items()}
        when = "setup" if "setup" not in phases else (
            "call" if phases["setup"] == "passed" and "call" not in phases else "teardown")
        if "setup" in seen:
            report.location = seen["setup"].location
        report.when = when
        how = f"xdist worker {worker} went down; its faulthandler traceback, if any, is printed above"
        report.longrepr = crash_message(
            self.config, crashitem, how,
            "xdist replaces the worker, and the rest of the session carries on.", None)
        report.triton_crash = {"nodeid": crashitem, "when": when,
                               "how": f"xdist worker {worker} went down", "worker": worker}
