"""A supervised child forked from this process, after collection.

A fresh `python -m pytest` child starts the interpreter, imports torch and triton and collects
again: about 2 s on a 2-core CPU machine, twice the cost of a one-test run (bench/startup.py).
A fork of this process, made once the tests are collected, has all of that already; it costs a
few milliseconds (5 ms measured, torch and triton loaded), and after a crash the next child is
forked from this process again, whose state is still the one right after collection (it never
runs a test itself). The other way to cheap supervision, a parent that never imports torch or
triton, still pays pytest's own start-up before its child starts (0.23 s with -p no:triton, a
tenth of a one-test run's 2.0 s on that machine) and cannot collect; the fork pays neither.

Fork is used only where it is known to be safe, else the child is a fresh process as before:
- kernels run under Triton's interpreter and this process holds no CUDA context (a CUDA
  context cannot be used across fork: on a GPU, and to continue after a lost context, the
  child must be a fresh process);
- on Linux, where the threads of this process can be counted (/proc); on macOS the system
  libraries are not fork-safe (CPython's multiprocessing defaults to spawn there);
- in a process with no more threads than it had when pytest-triton was loaded, before any
  conftest ran, and than the first imports of numpy, torch and triton started since (the plugin
  no longer imports them itself; what their import starts is counted around it). A thread
  started otherwise may hold a lock the child
  needs, and one kind is certain to break it: torch's OpenMP pool (GNU libgomp), started by the
  first parallel CPU op, does not survive fork, and a child that runs a parallel op after the
  parent ran one hangs (measured with torch 2.13's CPU build: a 4000x4000 exp in the parent,
  then in the child). The thread there from the start, numpy's OpenBLAS server, is fork-safe:
  OpenBLAS stops and restarts it around fork.
"""

from __future__ import annotations

import gc
import os
import signal
import subprocess
import sys
import time
import warnings

import pytest

from .. import state
from ..env import onimport
from .child import Reporter
from .crash import hard_exit

THREADS_KEY = pytest.StashKey[int]()  # config: this process's threads once the plugin loaded
# config: the threads started by the first imports of numpy, torch and triton since then
IMPORT_THREADS_KEY = pytest.StashKey[list]()
_COUNTED_IMPORTS = ("numpy", "torch", "triton")
_TMP_FIXTURES = frozenset(("tmp_path", "tmpdir", "tmp_path_factory", "tmpdir_factory"))


def _threads() -> int | None:
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return None


def note_threads(config: pytest.Config) -> None:
    """Count this process's threads before any conftest or test module runs, and those that the
    first imports of numpy, torch and triton start later (numpy's OpenBLAS server, which is
    fork-safe): as many as if the plugin had imported them before counting."""
    if THREADS_KEY in config.stash:
        return
    n = _threads()
    if n is None:
        return
    config.stash[THREADS_KEY] = n
    started = config.stash[IMPORT_THREADS_KEY] = [0]
    outer: list[int] = []  # the count before the outermost counted import (torch imports numpy)

    def before() -> None:
        outer.append(_threads() or 0)

    def after(_module) -> None:
        at = outer.pop()
        if not outer:
            started[0] += max(0, (_threads() or 0) - at)

    for name in _COUNTED_IMPORTS:
        config.add_cleanup(onimport.when_imported(name, after, before) if name not in sys.modules
                           else (lambda: None))


def unusable(config: pytest.Config, own_process: bool) -> str | None:
    """Why the supervised child cannot be a fork of this process now; None when it can.
    `own_process`: this pytest run is the process's own (the pytest command, not inside another
    test nor pytest.main() in a program, whose earlier work may have left threads that the
    count at load time already includes)."""
    if not state.get(config).runtime.interpret:
        return "kernels run on a GPU, and a CUDA context does not survive fork"
    if not own_process:
        return "this pytest run shares its process with other work, which a fork would copy"
    if not hasattr(os, "fork") or not sys.platform.startswith("linux"):
        return f"no safe fork on {sys.platform}"
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        return "this process has initialised CUDA, which does not survive fork"
    at_start, now = config.stash.get(THREADS_KEY, None), _threads()
    if at_start is None or now is None:
        return "this process's threads cannot be counted"
    at_start += config.stash.get(IMPORT_THREADS_KEY, [0])[0]
    if now > at_start:
        return (f"this process started {now - at_start} thread{'s' if now - at_start > 1 else ''} "
                "since start-up (torch's OpenMP pool, after a large CPU op, or a library's), "
                "which a fork could deadlock on")
    return None


def prepare(session: pytest.Session) -> None:
    """Before the first fork: make the run's base temporary directory here, so that every child
    puts its tests' tmp_path under the one directory (a child would make its own: a numbered one
    per child, or, with --basetemp, one that wipes the previous child's)."""
    factory = getattr(session.config, "_tmp_path_factory", None)
    if factory is None:
        return
    if any(_TMP_FIXTURES.intersection(getattr(it, "fixturenames", ())) for it in session.items):
        factory.getbasetemp()


class ForkedProcess:
    """The parent's handle on a forked child: what continuation.py uses of subprocess.Popen."""

    def __init__(self, pid: int):
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)  # -N: killed by signal N
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(f"forked child {self.pid}", timeout)
            time.sleep(0.01)
        return self.returncode

    def terminate(self) -> None:
        self._signal(signal.SIGTERM)

    def kill(self) -> None:
        self._signal(signal.SIGKILL)

    def _signal(self, sig: int) -> None:
        if self.poll() is None:
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                pass


def start(config: pytest.Config, session: pytest.Session, items: list[pytest.Item],
          child_dir: str) -> ForkedProcess:
    """Fork a child that runs `items` (in order) and reports to `child_dir`, as a fresh child
    would; it never returns into this session: it leaves with os._exit."""
    # else the child inherits this process's buffered output and prints it too
    tr = config.pluginmanager.get_plugin("terminalreporter")
    for stream in (tr, sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except Exception:
            pass
    parent = os.getpid()
    # The child's garbage collector would otherwise walk (and so write, page by page) every
    # object this process made, copying the pages fork shares: frozen, they are left alone
    # (CPython's advice for forking servers).
    gc.freeze()
    with warnings.catch_warnings():
        # Python 3.12+ warns on fork in a process with threads; unusable() let only the threads
        # there at start-up through, which are fork-safe (see above).
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid:
        gc.unfreeze()  # this process collects its own garbage as before
        return ForkedProcess(pid)
    status = 3  # pytest's INTERNAL_ERROR, unless the run below ends
    try:
        _die_with(parent)
        status = _run(config, session, items, child_dir)
    finally:
        hard_exit(status)


def _die_with(parent: int) -> None:
    """A child whose parent is killed (a CI job's timeout, SIGKILL) ends too, rather than run on
    unwatched, its results read by no one (Linux's PR_SET_PDEATHSIG)."""
    import ctypes

    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # 1: PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # it died before the request was made
        os._exit(1)


def _run(config: pytest.Config, session: pytest.Session, items: list[pytest.Item],
         child_dir: str) -> int:
    """In the child: pytest's own run loop over `items`, its events reported to the parent."""
    # Silent, as a fresh child is (child.prepare): the parent shows every result. The plugins
    # that write the run's files do so at the session's end, which this process never reaches.
    config.pluginmanager.set_blocked("terminalreporter")
    config.option.setupshow = False
    # pytest-reportlog writes each report as it comes: here, and again when it is replayed
    report_log = getattr(config, "_report_log_plugin", None)
    if report_log is not None:
        config.pluginmanager.unregister(report_log)
    supervisor = config.pluginmanager.get_plugin("triton-supervisor")
    if supervisor is not None:  # this process is the child now: it runs the tests itself
        config.pluginmanager.unregister(supervisor)
    reporter = Reporter(config, child_dir, pending=[it.nodeid for it in items])
    config.pluginmanager.register(reporter, "triton-child")
    reporter.watch_faults()
    reporter.collected([it.nodeid for it in items])
    try:
        for i, item in enumerate(items):
            nextitem = items[i + 1] if i + 1 < len(items) else None
            config.hook.pytest_runtest_protocol(item=item, nextitem=nextitem)
            if session.shouldfail or session.shouldstop:
                break  # -x, --maxfail, --sw: the parent, given the same reports, stops too
    except (pytest.exit.Exception, KeyboardInterrupt) as exc:
        reporter.interrupted(exc)
    except Exception:
        config.notify_exception(pytest.ExceptionInfo.from_current(), config.option)
        return 3
    finally:
        _teardown(config, session)
    return 0


def _teardown(config: pytest.Config, session: pytest.Session) -> None:
    """What pytest's session end does for fixtures: a run stopped early (-x, pytest.exit(),
    Ctrl-C) tears down the module and session fixtures still set up."""
    try:
        session._setupstate.teardown_exact(None)
    except Exception:
        config.notify_exception(pytest.ExceptionInfo.from_current(), config.option)


def take_capture(config: pytest.Config) -> tuple[str, str]:
    """After a forked child ended: what it captured and did not read back (the output of the
    test it died in). pytest's capture files are shared with the children through fork, so
    reading them here also keeps that output out of the next child's first test."""
    capman = config.pluginmanager.get_plugin("capturemanager")
    try:
        out, err = capman.read_global_capture()
    except Exception:  # no capture manager, or capture already stopped
        return "", ""
    return out, err
