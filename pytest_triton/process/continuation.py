"""Continue (or run) a session in child pytest processes: a child that dies takes one test with
it, its report says how, and the next child starts after that test. Each child's events are
replayed into this session as they arrive, so the terminal, --junitxml, the perf table and JSON,
and the exit status cover the whole run."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time

import pytest

from ..env import pytest_child, seeding
from . import forked
from .crash import crash_message, faulthandler_frames, signal_text

COLLECT_FAILED_KEY = pytest.StashKey[set]()  # config: node ids whose collection failed here


class Continuation:
    """Runs `items` (in order) in child pytest processes until each has a result: a child that
    dies takes one test with it, and the next child starts after that test. With fork=True each
    child is a fork of this process (forked.py), else a fresh `python -m pytest`."""

    def __init__(self, config: pytest.Config, session: pytest.Session, items: list[pytest.Item],
                 fork: bool = False):
        self.config = config
        self.session = session
        self.items = {it.nodeid: it for it in items}
        self.pending = [it.nodeid for it in items]
        self.fork = fork

    def run(self) -> None:
        workdir = tempfile.mkdtemp(prefix="pytest-triton-")
        try:
            rounds = 0
            while self.pending and not (self.session.shouldfail or self.session.shouldstop):
                rounds += 1
                child = _ChildRun(self, os.path.join(workdir, f"child{rounds}"))
                child.run()
                if not self._settle(child):
                    break
        finally:
            shutil.rmtree(workdir, ignore_errors=True)

    def command(self, child_dir: str) -> list[str]:
        extra = [f"--triton-child={child_dir}"]
        maxfail = self.config.getoption("maxfail", 0) or 0
        if maxfail:
            extra.append(f"--maxfail={max(1, maxfail - self.session.testsfailed)}")
        # this session's own command line, with the same seeds as here (even with --triton-seed
        # random or BASE:SEED)
        return pytest_child.pytest_command(
            self.config, seed=seeding.option_value(self.config, seeding.base(self.config)),
            options=extra)

    def _settle(self, child: _ChildRun) -> bool:
        """Report what the child left without a result; False when it made no progress."""
        done = set(child.finished)
        if child.interrupted is not None:
            # pytest.exit() or KeyboardInterrupt in the child: the run stops here as it would
            # in-process, with the same message and exit status (not a crash)
            self.pending = []
            ev = child.interrupted
            if ev["kind"] == "exit":
                raise pytest.exit.Exception(ev["message"], returncode=ev["returncode"])
            raise KeyboardInterrupt(ev["message"])
        if child.stopped:  # -x / --maxfail reached: the rest stays unrun, as it would in-process
            self.pending = []
            return False
        tr = self.config.pluginmanager.get_plugin("terminalreporter")
        if child.current is not None and child.retired is None:
            nodeid = child.current
            how = signal_text(child.returncode)
            item = self.items[nodeid]
            remaining = len(self.pending) - len(done) - 1
            after = ("The remaining tests run in a fresh process." if remaining > 0
                     else "No tests remained after it.")
            dump = faulthandler_frames(child.faulthandler_path, str(item.path))
            when = _crashed_phase(child.phases)
            # what the test printed before it died (a forked child's capture is readable here)
            sections = [(f"Captured {name} {when}", text)
                        for name, text in zip(("stdout", "stderr"), child.captured) if text]
            self._report(nodeid, when, crash_message(self.config, nodeid, how, after, dump),
                         started=True, sections=sections,
                         triton_crash={"nodeid": nodeid, "when": when, "how": how,
                                       "exit_status": child.returncode})
            done.add(nodeid)
            if tr is not None and remaining > 0:
                tr.write_line(f"pytest-triton: the test process died in {nodeid} ({how}); "
                              f"{the_remaining(remaining)} in a fresh process")
        if child.collected is not None:
            for nodeid in self.pending:
                if nodeid not in done and nodeid not in child.collected:
                    self._report(nodeid, "setup", "not run: the continuation process did not "
                                 "collect this test id (its collection differs from this one's)")
                    done.add(nodeid)
        remaining = [n for n in self.pending if n not in done]
        if len(remaining) == len(self.pending):
            status = signal_text(child.returncode)
            how = ("It was forked from this process after collection." if child.cmd is None
                   else f"Its command: {shlex.join(child.cmd)}")
            for nodeid in remaining:
                self._report(nodeid, "setup", "not run: the continuation process (pytest-triton) "
                             f"ended ({status}) before running this test; what it printed is above. "
                             f"{how}")
            self.pending = []
            return False
        self.pending = remaining
        return True

    def _report(self, nodeid: str, when: str, longrepr: str, started: bool = False,
                sections: list[tuple[str, str]] | None = None, **extra) -> None:
        item = self.items[nodeid]
        hook = self.config.hook
        if not started:
            hook.pytest_runtest_logstart(nodeid=nodeid, location=item.location)
        rep = pytest.TestReport(nodeid, item.location, {k: 1 for k in item.keywords}, "failed",
                                longrepr, when, sections=sections or [], duration=0.0,
                                user_properties=[], **extra)
        hook.pytest_runtest_logreport(report=rep)
        hook.pytest_runtest_logfinish(nodeid=nodeid, location=item.location)


def the_remaining(n: int) -> str:
    return "the remaining test runs" if n == 1 else f"the remaining {n} tests run"


def _crashed_phase(phases: dict[str, str]) -> str:
    if "setup" not in phases:
        return "setup"
    if phases["setup"] == "passed" and "call" not in phases:
        return "call"
    return "teardown"


class _ChildRun:
    """One child process: started on the pending test ids, its events replayed as they come."""

    def __init__(self, parent: Continuation, child_dir: str):
        self.parent = parent
        self.dir = child_dir
        os.makedirs(child_dir)
        self.events_path = os.path.join(child_dir, "events.jsonl")
        self.faulthandler_path = os.path.join(child_dir, "faulthandler.txt")
        self.cmd = None if parent.fork else parent.command(child_dir)
        self.captured = ("", "")  # stdout, stderr a forked child captured and left unread
        self.collected: set[str] | None = None
        self.finished: list[str] = []
        self.current: str | None = None  # started, not finished
        self.phases: dict[str, str] = {}  # the current test's reported phases: outcome
        self.retired: str | None = None
        self.stopped = False
        self.interrupted: dict | None = None  # the child's pytest.exit() or KeyboardInterrupt
        self.returncode: int | None = None
        self._read = 0  # bytes of events.jsonl replayed

    def run(self) -> None:
        open(self.events_path, "wb").close()
        parent = self.parent
        if parent.fork:
            proc = forked.start(parent.config, parent.session,
                                [parent.items[n] for n in parent.pending], self.dir)
        else:
            with open(os.path.join(self.dir, "pending.txt"), "w", encoding="utf-8") as f:
                f.write("\n".join(parent.pending) + "\n")
            proc = subprocess.Popen(self.cmd, cwd=str(parent.config.invocation_params.dir))
        try:
            self._follow(proc)
        except KeyboardInterrupt:
            # Ctrl-C reached the child too: let it finish, and replay what it reported since
            try:
                proc.wait(timeout=10)
                self._follow(proc)
            except (KeyboardInterrupt, subprocess.TimeoutExpired):
                pass
            raise
        finally:
            if proc.poll() is None:
                proc.kill()
            self.returncode = proc.wait()
            if parent.fork:
                self.captured = forked.take_capture(parent.config)

    def _follow(self, proc: subprocess.Popen) -> None:
        """Replay the child's events as it writes them, until it exits (from where an earlier
        call stopped reading)."""
        session = self.parent.session
        with open(self.events_path, "rb") as f:
            f.seek(self._read)
            buf = b""
            while True:
                chunk = f.read()
                if chunk:
                    buf += chunk
                    *lines, buf = buf.split(b"\n")
                    for line in lines:
                        self._read += len(line) + 1
                        if not line.strip():
                            continue
                        ev = json.loads(line)
                        if self.stopped and ev["event"] == "logstart":
                            # -x / --maxfail reached here: the child was told the same limit
                            # (command()), so it should not start another test; if it does, stop it
                            proc.terminate()
                            return
                        self._event(ev)
                    if session.shouldfail or session.shouldstop:
                        # The child stops by itself and tears its fixtures down (their output
                        # and the last test's teardown report come through): wait for it.
                        self.stopped = True
                    continue
                if proc.poll() is not None:
                    return  # everything it wrote has been read (a torn last line is dropped)
                time.sleep(0.01)

    def _event(self, ev: dict) -> None:
        config = self.parent.config
        hook = config.hook
        kind = ev["event"]
        if kind == "collected":
            self.collected = set(ev["ids"])
        elif kind == "logstart":
            self.current, self.phases = ev["nodeid"], {}
            hook.pytest_runtest_logstart(nodeid=ev["nodeid"], location=tuple(ev["location"]))
        elif kind == "report":
            rep = _with_tuples(hook.pytest_report_from_serializable(config=config, data=ev["data"]))
            self.phases[rep.when] = rep.outcome
            hook.pytest_runtest_logreport(report=rep)
        elif kind == "logfinish":
            hook.pytest_runtest_logfinish(nodeid=ev["nodeid"], location=tuple(ev["location"]))
            self.finished.append(ev["nodeid"])
            self.current = None
        elif kind == "collectreport":
            if ev["data"].get("nodeid") in config.stash.get(COLLECT_FAILED_KEY, set()):
                return  # this process collected the same file and reported its error already
            rep = _with_tuples(hook.pytest_report_from_serializable(config=config, data=ev["data"]))
            hook.pytest_collectreport(report=rep)
        elif kind == "interrupted":
            self.interrupted = ev
        elif kind == "warning":
            _replay_warning(config, ev)
        elif kind == "retire":
            self.retired = ev["nodeid"]


def _with_tuples(rep):
    """A report read back from JSON, with the tuples JSON turned into lists made tuples again:
    a skip's longrepr (path, line, reason), which -rs and --junitxml assert is a tuple, and the
    location."""
    if isinstance(rep.longrepr, list):
        rep.longrepr = tuple(rep.longrepr)
    if isinstance(getattr(rep, "location", None), list):
        rep.location = tuple(rep.location)
    return rep


def _replay_warning(config: pytest.Config, ev: dict) -> None:
    import warnings

    category = UserWarning
    module = sys.modules.get(ev.get("category_module") or "")
    found = getattr(module, ev.get("category_name") or "", None)
    if isinstance(found, type) and issubclass(found, Warning):
        category = found
    try:
        message = category(ev["message"])
    except Exception:
        message = UserWarning(ev["message"])
    wm = warnings.WarningMessage(message, category, ev.get("filename") or "", ev.get("lineno") or 0)
    location = tuple(ev["location"]) if ev.get("location") else None
    config.hook.pytest_warning_recorded.call_historic(
        kwargs={"warning_message": wm, "when": ev["when"], "nodeid": ev["nodeid"],
                "location": location})
