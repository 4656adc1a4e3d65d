"""Lose nothing when a test breaks the process it runs in.

A test can leave its process unusable (a sticky CUDA error loses the CUDA context: gpufaults.py)
or kill it (a segfault: under Triton's interpreter an out-of-bounds tl.load or tl.store touches
host memory directly). The test that did it fails alone, with a message that says what happened,
and the rest of the session runs on:

- Without pytest-xdist, after a lost CUDA context the remaining tests run in a fresh pytest
  process: the same command line, told which test ids remain (a child). Its reports are replayed
  into this session as they arrive, so the terminal, --junitxml, the perf table and JSON, and the
  exit status cover the whole run. --triton-supervise runs every test in such a child from the
  start, so that a crash is contained too: the test that was running when the child died fails
  with the signal, and a new child runs the rest.
- Under pytest-xdist, xdistfaults.py retires a worker whose context is lost, and explains a
  worker's crash.

The terminal summary and the perf JSON list the tests that broke their process, apart from the
ordinary failures.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import pytest

from .. import options, state
from ..env import runtime, seeding
from . import gpufaults

RECORDS_KEY = pytest.StashKey[list]()  # config: the tests that broke their process
COLLECT_FAILED_KEY = pytest.StashKey[set]()  # config: node ids whose collection failed here
_CHILD_KEY = pytest.StashKey[str]()  # config: this process is a child; its exchange directory

# Outputs a child must not write: the process that started it writes them, with every result.
_OUTPUT_OPTIONS = ("xmlpath", "report_log", "triton_perf_json", "benchmark_json", "benchmark_save",
                   "benchmark_autosave", "benchmark_histogram", "benchmark_cprofile_dump")


def add_options(parser: pytest.Parser) -> None:
    parser.getgroup("triton").addoption(
        "--triton-child", action="store", dest="triton_child", default=None, metavar="DIR",
        help=argparse.SUPPRESS)  # internal: run the test ids listed in DIR, report there


def is_child(config: pytest.Config) -> bool:
    return bool(config.getoption("triton_child", default=None))


def prepare(config: pytest.Config) -> None:
    """In a child, before plugins configure: no terminal output, no files the parent writes."""
    if not is_child(config):
        return
    config.pluginmanager.set_blocked("terminalreporter")
    for dest in _OUTPUT_OPTIONS:
        if getattr(config.option, dest, None):
            setattr(config.option, dest, None)
    # --setup-show writes through the terminal reporter, which a child has not
    config.option.setupshow = False


def configure(config: pytest.Config) -> None:
    child_dir = config.getoption("triton_child", default=None)
    if child_dir:
        config.pluginmanager.register(_Child(config, child_dir), "triton-child")
        return
    if hasattr(config, "workerinput"):
        from . import xdistfaults

        xdistfaults.configure_worker(config)
        return
    config.stash[RECORDS_KEY] = []
    config.pluginmanager.register(_Summary(config), "triton-fault-summary")
    if runtime.xdist_controller(config):
        from . import xdistfaults

        xdistfaults.configure_controller(config)
    else:
        config.pluginmanager.register(_Supervisor(config), "triton-supervisor")


def records(config: pytest.Config) -> list[dict]:
    """The tests that broke their process (lost the CUDA context, or crashed it), in run order."""
    return list(config.stash.get(RECORDS_KEY, []))


# -- what a crash report says ---------------------------------------------------------------

def crash_hint(config: pytest.Config) -> str:
    if state.get(config).runtime.interpret:
        return ("Under Triton's interpreter this is almost always a tl.load or tl.store outside its "
                "tensor (a missing or wrong mask): the interpreter reads and writes host memory "
                "directly, so the access crashes the process instead of raising.")
    return ("A crash, rather than a CUDA error, comes from native code: a C extension, Triton's "
            "launcher or the driver.")


def crash_message(config: pytest.Config, nodeid: str, how: str, after: str,
                  dump: list[str] | None) -> str:
    seed = seeding.for_nodeid(config, state.get(config).base_seed, nodeid)
    lines = [f"ProcessCrashed: the process running this test died ({how}).", crash_hint(config),
             after, f"Reproduce it alone: {seed.describe()}."]
    if dump:
        lines += ["Where it died (faulthandler, most recent call first):", *dump]
    return "\n".join(lines)


def _signal_text(returncode: int | None) -> str:
    if returncode is None:
        return "killed"
    if returncode < 0:
        try:
            sig = signal.Signals(-returncode)
            return f"signal {sig.name}, {signal.strsignal(sig) or sig.name}"
        except ValueError:
            return f"signal {-returncode}"
    return f"exit status {returncode}"


def _faulthandler_frames(path: str, test_file: str) -> list[str]:
    """The crashing thread's frames from a faulthandler dump, innermost first, down to the test's
    own frame: the innermost frame and the frames in the user's files, library frames elided."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
    except OSError:
        return []
    frames, inside = [], False
    for line in text.splitlines():
        if line.startswith(("Current thread", "Thread 0x", "Stack (most recent call first)")):
            if frames:
                break
            inside = True
        elif inside and line.startswith("  File "):
            frames.append(line)
        elif inside and frames:
            break
    in_test = [i for i, ln in enumerate(frames) if f'"{test_file}"' in ln]
    if in_test:  # the outermost frame in the test's file is the test function
        frames = frames[:in_test[-1] + 1]
    shown: list[str] = []
    for i, line in enumerate(frames):
        if i == 0 or not _is_library(line):
            shown.append(line)
        elif shown[-1] != "  ...":
            shown.append("  ...")
    return shown


def _is_library(frame_line: str) -> bool:
    import sysconfig

    path = frame_line.split('"')[1] if frame_line.count('"') >= 2 else frame_line
    stdlib = sysconfig.get_paths().get("stdlib") or "\0"
    return "site-packages" in path or "dist-packages" in path or path.startswith(stdlib)


# -- the summary ----------------------------------------------------------------------------

class _Summary:
    """Collects the tests that broke their process from the reports (ours or a child's or a
    worker's) and lists them at the end."""

    def __init__(self, config: pytest.Config):
        self.config = config

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        fault = getattr(report, "triton_fault", None)
        if fault:
            self.config.stash[RECORDS_KEY].append({"kind": "cuda_context_lost", **fault})
        crash = getattr(report, "triton_crash", None)
        if crash:
            self.config.stash[RECORDS_KEY].append({"kind": "process_crash", **crash})

    def pytest_terminal_summary(self, terminalreporter) -> None:
        recs = records(self.config)
        if not recs:
            return
        tr = terminalreporter
        n = len(recs)
        tr.write_sep("=", f"pytest-triton: {n} test{'s' if n > 1 else ''} broke the process "
                          f"{'they' if n > 1 else 'it'} ran in", red=True, bold=True)
        for r in recs:
            if r["kind"] == "cuda_context_lost":
                code = f"CUDA error {r['code']}, " if r.get("code") is not None else ""
                launch = (f"last Triton launch: {r['launches'][-1]}" if r.get("launches")
                          else "no Triton launch recorded")
                what = f"CUDA context lost in {r['when']} ({code}{r['error']}; {launch})"
            else:
                what = f"process crashed in {r['when']} ({r['how']})"
            tr.write_line(f"{r['nodeid']}: {what}")
        tr.write_line("They are counted among the failures; the tests after them ran in fresh "
                      "processes.")


# -- the parent: continue (or run) the session in child processes ---------------------------

def supervision(config: pytest.Config) -> tuple[bool, str]:
    """(whether the tests run in a supervised child from the start, why). --triton-supervise=auto
    turns it on where a crash is likely and a child changes nothing the user relies on: kernels
    under Triton's interpreter (whose out-of-bounds accesses touch host memory), in a run of its
    own. Not inside another test (a pytester run: PYTEST_CURRENT_TEST is set), not for a debugger
    on this terminal, not for plugin objects given to pytest.main (a child cannot receive them);
    xdist runs never get here (a dead worker is replaced anyway)."""
    mode = options.get(config, "triton_supervise")
    if mode in ("on", "off"):
        return mode == "on", f"--triton-supervise={mode}"
    if not state.get(config).runtime.interpret:
        return False, "auto: kernels run on a GPU, whose faults are contained without it"
    if os.environ.get("PYTEST_CURRENT_TEST"):
        return False, "auto: this run is inside another test"
    if config.getoption("usepdb", False) or config.getoption("trace", False):
        return False, "auto: a debugger needs this process"
    if config.invocation_params.plugins:
        return False, "auto: pytest.main was given plugin objects, which a child cannot get"
    if not _started_as_pytest():
        return False, ("auto: pytest.main() was called from a program, whose state (sys.path, "
                       "imports) a child would not have")
    for opt in ("setupshow", "setuponly", "setupplan"):
        if config.getoption(opt, False):
            return False, f"auto: --{opt.replace('setup', 'setup-')} shows this process's fixtures"
    if config.getoption("log_cli_level", None) is not None or config.getini("log_cli"):
        return False, "auto: live logging (log_cli) writes to this process's terminal"
    return True, "--triton-supervise=auto, under Triton's interpreter"


def _held_here(items: list[pytest.Item]) -> str | None:
    """What the tests keep in the process that runs them, which a child (told not to write the
    run's outputs) would lose: junit properties of the whole suite, pytest-benchmark's results."""
    def using(fixture: str) -> int:
        return sum(fixture in getattr(it, "fixturenames", ()) for it in items)

    kept = [f for f in ("record_testsuite_property", "record_xml_attribute") if using(f)]
    if kept:
        return f"{' and '.join(kept)} write to this process's --junitxml"
    timed = using("benchmark")
    if timed:
        return (f"{timed} test{'s use' if timed > 1 else ' uses'} pytest-benchmark's benchmark "
                "fixture, whose results stay in the process that runs it")
    return None


def _started_as_pytest() -> bool:
    """Whether this process is the pytest command (`pytest`, `py.test`, `python -m pytest`),
    which a child can repeat, rather than a program that called pytest.main()."""
    argv0 = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    if argv0 in ("pytest", "py.test", "pytest.exe", "py.test.exe"):
        return True
    return argv0 == "__main__.py" and os.path.basename(os.path.dirname(sys.argv[0])) == "pytest"


class _Supervisor:
    """Without xdist: once this process's context is lost (or from the first test, with
    --triton-supervise), the remaining tests run in child processes instead of here."""

    def __init__(self, config: pytest.Config):
        self.config = config
        self.supervise, self.why = supervision(config)
        self.auto = options.get(config, "triton_supervise") == "auto"
        self.took_over = False

    def _line(self) -> str:
        return (f"pytest-triton: tests run in a supervised child process ({self.why}): a test "
                "that crashes it fails alone, and a new child runs the rest")

    def pytest_report_header(self, config: pytest.Config) -> list[str]:
        # auto decides once the tests are known (pytest_collection_finish)
        return [self._line()] if self.supervise and not self.auto else []

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.failed:
            self.config.stash.setdefault(COLLECT_FAILED_KEY, set()).add(report.nodeid)

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        if not (self.supervise and self.auto) or not session.items:
            return
        tr = self.config.pluginmanager.get_plugin("terminalreporter")
        held = _held_here(session.items)
        if held:
            self.supervise = False
        if tr is not None:
            tr.write_line(self._line() if not held else
                          f"pytest-triton: not supervised although under Triton's interpreter: "
                          f"{held} (--triton-supervise=on supervises anyway, without them)")

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None):
        if self.took_over:
            return True  # run, or reported, by a child
        fault = gpufaults.lost(item.config)
        if fault is None and not self.supervise:
            return None
        self.took_over = True
        session = item.session
        rest = session.items[session.items.index(item):] if item in session.items else [item]
        tr = self.config.pluginmanager.get_plugin("terminalreporter")
        if fault is not None:
            _teardown_all(session)
            if tr is not None:
                tr.write_line(f"pytest-triton: {fault['nodeid']} lost this process's CUDA context; "
                              f"{_the_remaining(len(rest))} in a fresh process{_held_memory()}")
        _Continuation(self.config, session, rest).run()
        return True


def _held_memory() -> str:
    """What this process keeps on the GPU while the children run: a lost context frees nothing
    until the process ends (read from the allocator's own counters, not from the device)."""
    torch = sys.modules.get("torch")
    try:
        reserved = torch.cuda.memory_reserved() if torch is not None and torch.cuda.is_initialized() else 0
    except Exception:
        return ""
    if reserved < 1 << 30:
        return ""
    return f" (this process keeps the {reserved / 2**30:.1f} GiB its allocator held until the run ends)"


def _teardown_all(session: pytest.Session) -> None:
    """Tear down the fixtures this process still holds before a child sets up its own (a module
    or session fixture may hold a port or a file). Errors of a lost context are expected here."""
    setupstate = getattr(session, "_setupstate", None)
    if setupstate is None:
        return
    try:
        setupstate.teardown_exact(None)
    except Exception as exc:
        err = gpufaults.classify(exc)
        if err is None or err.kind != "sticky":
            tr = session.config.pluginmanager.get_plugin("terminalreporter")
            if tr is not None:
                tr.write_line(f"pytest-triton: tearing down fixtures before continuing: "
                              f"{type(exc).__name__}: {exc}", yellow=True)


class _Continuation:
    """Runs `items` (in order) in child pytest processes until each has a result: a child that
    dies takes one test with it, and the next child starts after that test."""

    def __init__(self, config: pytest.Config, session: pytest.Session, items: list[pytest.Item]):
        self.config = config
        self.session = session
        self.items = {it.nodeid: it for it in items}
        self.pending = [it.nodeid for it in items]

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
        args = [str(a) for a in self.config.invocation_params.args]
        extra = [f"--triton-child={child_dir}",
                 # the same seeds as here, even with --triton-seed random or BASE:SEED
                 f"--triton-seed={seeding.option_value(self.config, state.get(self.config).base_seed)}"]
        maxfail = self.config.getoption("maxfail", 0) or 0
        if maxfail:
            extra.append(f"--maxfail={max(1, maxfail - self.session.testsfailed)}")
        return [sys.executable, "-m", "pytest", *args, *extra]

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
            how = _signal_text(child.returncode)
            item = self.items[nodeid]
            remaining = len(self.pending) - len(done) - 1
            after = ("The remaining tests run in a fresh process." if remaining > 0
                     else "No tests remained after it.")
            dump = _faulthandler_frames(child.faulthandler_path, str(item.path))
            when = _crashed_phase(child.phases)
            self._report(nodeid, when, crash_message(self.config, nodeid, how, after, dump),
                         started=True, triton_crash={"nodeid": nodeid, "when": when, "how": how,
                                                     "exit_status": child.returncode})
            done.add(nodeid)
            if tr is not None and remaining > 0:
                tr.write_line(f"pytest-triton: the test process died in {nodeid} ({how}); "
                              f"{_the_remaining(remaining)} in a fresh process")
        if child.collected is not None:
            for nodeid in self.pending:
                if nodeid not in done and nodeid not in child.collected:
                    self._report(nodeid, "setup", "not run: the continuation process did not "
                                 "collect this test id (its collection differs from this one's)")
                    done.add(nodeid)
        remaining = [n for n in self.pending if n not in done]
        if len(remaining) == len(self.pending):
            status = _signal_text(child.returncode)
            for nodeid in remaining:
                self._report(nodeid, "setup", "not run: the continuation process (pytest-triton) "
                             f"ended ({status}) before running this test; what it printed is above. "
                             f"Its command: {shlex.join(child.cmd)}")
            self.pending = []
            return False
        self.pending = remaining
        return True

    def _report(self, nodeid: str, when: str, longrepr: str, started: bool = False, **extra) -> None:
        item = self.items[nodeid]
        hook = self.config.hook
        if not started:
            hook.pytest_runtest_logstart(nodeid=nodeid, location=item.location)
        rep = pytest.TestReport(nodeid, item.location, {k: 1 for k in item.keywords}, "failed",
                                longrepr, when, sections=[], duration=0.0, user_properties=[],
                                **extra)
        hook.pytest_runtest_logreport(report=rep)
        hook.pytest_runtest_logfinish(nodeid=nodeid, location=item.location)


def _the_remaining(n: int) -> str:
    return "the remaining test runs" if n == 1 else f"the remaining {n} tests run"


def _crashed_phase(phases: dict[str, str]) -> str:
    if "setup" not in phases:
        return "setup"
    if phases["setup"] == "passed" and "call" not in phases:
        return "call"
    return "teardown"


class _ChildRun:
    """One child process: started on the pending test ids, its events replayed as they come."""

    def __init__(self, parent: _Continuation, child_dir: str):
        self.parent = parent
        self.dir = child_dir
        os.makedirs(child_dir)
        self.events_path = os.path.join(child_dir, "events.jsonl")
        self.faulthandler_path = os.path.join(child_dir, "faulthandler.txt")
        self.cmd = parent.command(child_dir)
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
        with open(os.path.join(self.dir, "pending.txt"), "w", encoding="utf-8") as f:
            f.write("\n".join(self.parent.pending) + "\n")
        open(self.events_path, "wb").close()
        proc = subprocess.Popen(self.cmd, cwd=str(self.parent.config.invocation_params.dir))
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


# -- the child: run the listed tests, report each event to the parent -----------------------

class _Child:
    def __init__(self, config: pytest.Config, child_dir: str):
        self.config = config
        self.dir = child_dir
        with open(os.path.join(child_dir, "pending.txt"), encoding="utf-8") as f:
            self.pending = [line for line in f.read().splitlines() if line]
        self._out = open(os.path.join(child_dir, "events.jsonl"), "a", encoding="utf-8")
        self._faults = None

    def _emit(self, **event) -> None:
        self._out.write(json.dumps(event, default=repr) + "\n")
        self._out.flush()

    @pytest.hookimpl(trylast=True)
    def pytest_sessionstart(self, session: pytest.Session) -> None:
        import faulthandler

        # After pytest's own faulthandler set-up: a crash's traceback goes to the parent's report.
        self._faults = open(os.path.join(self.dir, "faulthandler.txt"), "w")
        faulthandler.enable(file=self._faults, all_threads=False)

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, session: pytest.Session, config: pytest.Config,
                                      items: list[pytest.Item]) -> None:
        order = {nodeid: i for i, nodeid in enumerate(self.pending)}
        keep = sorted((it for it in items if it.nodeid in order), key=lambda it: order[it.nodeid])
        dropped = [it for it in items if it.nodeid not in order]
        items[:] = keep
        if dropped:
            config.hook.pytest_deselected(items=dropped)
        self._emit(event="collected", ids=[it.nodeid for it in keep])

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
        value = excinfo.value
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


def hard_exit(status: int) -> None:
    """Leave now, without running the rest of the session here (nor torch's destructors, which
    would call into a lost CUDA context)."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    os._exit(status)
