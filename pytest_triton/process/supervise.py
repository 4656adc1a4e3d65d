"""Lose nothing when a test breaks the process it runs in: the parent's side.

Without pytest-xdist, after a lost CUDA context the remaining tests run in a fresh pytest process
(continuation.py), told which test ids remain (child.py). --triton-supervise runs every test in
a child from the start, so that a crash is contained too: the test that was running when the
child died fails with the signal, and a new child runs the rest. Under Triton's interpreter that
child is a fork of this process made after collection (forked.py: supervision then costs
milliseconds, not a second start-up); elsewhere a fresh process. Under pytest-xdist,
xdistfaults.py retires a worker whose context is lost, and explains a worker's crash.
"""

from __future__ import annotations

import os
import sys

import pytest

from .. import options, state
from ..options import Option
from . import forked, gpufaults
from .continuation import COLLECT_FAILED_KEY, Continuation, the_remaining

OPTIONS = options.declare(
    Option("triton_supervise", "flag", "auto",
           "run the tests in a child process that is replaced when it dies, so that a test which "
           "crashes it (a segfault under Triton's interpreter) fails alone and the rest runs; "
           "under the interpreter the child is forked after collection (nearly free), elsewhere "
           "a fresh pytest process. auto (the default): on under "
           "Triton's interpreter in a run of its own, started as pytest or python -m pytest (not "
           "under -n, --pdb, --trace, --setup-*, log_cli, inside another test, nor when a test "
           "uses pytest-benchmark or record_testsuite_property/record_xml_attribute). The value "
           "only with '=': on, off or auto; the bare --triton-supervise means on",
           metavar="auto|on|off", choices=("auto", "on", "off"), const="on"),
)

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
    # --triton-judge: this process, which then runs no test, recomputes the perf verdicts
    judged = options.get(config, "triton_judge") == "on"
    if not state.get(config).runtime.interpret and not judged:
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
    return True, ("--triton-supervise=auto, under --triton-judge: this process recomputes every "
                  "perf verdict" if judged else "--triton-supervise=auto, under Triton's interpreter")


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


class Supervisor:
    """In the process that runs the tests itself (not a child, a worker or xdist's controller):
    once this process's context is lost (or from the first test, when supervised), the
    remaining tests run in child processes instead of here."""

    def __init__(self, config: pytest.Config):
        forked.note_threads(config)  # if pytest_load_initial_conftests did not (-p registration)
        self.config = config
        self.supervise, self.why = supervision(config)
        self.auto = options.get(config, "triton_supervise") == "auto"
        self.handed_over: list[pytest.Item] = []  # after a lost context: the tests a child runs

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

    # The children run from pytest_runtestloop, outside every test's hook wrappers: run from the
    # protocol of the test where they take over, that test's wrappers (a pytest-timeout timer,
    # the warnings catcher) would stay open around the whole rest of the run, and the timer
    # would fail it.

    @pytest.hookimpl(tryfirst=True, specname="pytest_runtestloop")
    def pytest_runtestloop_supervised(self, session: pytest.Session):
        """Supervised from the start: by fork where it is safe (the children are forked from
        here, after collection, and this process runs no test), else in fresh processes."""
        config = self.config
        if not self.supervise or not session.items or config.option.collectonly or (
                session.testsfailed and not config.option.continue_on_collection_errors):
            return None  # pytest's own loop: nothing to run, or it stops the run
        why_not = forked.unusable(config, own_process=_started_as_pytest() and not os.environ.get(
            "PYTEST_CURRENT_TEST"))
        tr = config.pluginmanager.get_plugin("terminalreporter")
        if why_not is not None and tr is not None and state.get(config).runtime.interpret:
            tr.write_line(f"pytest-triton: the supervised child is a fresh pytest process, not a "
                          f"fork of this one: {why_not}")
        if why_not is None:
            forked.prepare(session)
        Continuation(config, session, list(session.items), fork=why_not is None).run()
        _stop_if_asked(session)
        return True

    @pytest.hookimpl(wrapper=True)
    def pytest_runtestloop(self, session: pytest.Session):
        done = yield
        if self.handed_over:  # a test lost the CUDA context: the rest runs in fresh processes
            Continuation(self.config, session, self.handed_over).run()
            _stop_if_asked(session)
        return done

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None):
        if self.handed_over:
            return True  # to be run by a child, after pytest's loop
        fault = gpufaults.lost(item.config)
        if fault is None:
            return None
        session = item.session
        rest = session.items[session.items.index(item):] if item in session.items else [item]
        self.handed_over = rest
        _teardown_all(session)
        tr = self.config.pluginmanager.get_plugin("terminalreporter")
        if tr is not None:
            tr.write_line(f"pytest-triton: {fault['nodeid']} lost this process's CUDA context; "
                          f"{the_remaining(len(rest))} in a fresh process{_held_memory()}")
        return True


def _stop_if_asked(session: pytest.Session) -> None:
    """As pytest's own loop ends after a test that stopped the run (-x, --maxfail, --sw)."""
    if session.shouldfail:
        raise session.Failed(session.shouldfail)
    if session.shouldstop:
        raise session.Interrupted(session.shouldstop)


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
