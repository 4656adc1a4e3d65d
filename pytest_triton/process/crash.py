"""What a crash report says, and the run's list of tests that broke their process.

A test can leave its process unusable (a sticky CUDA error loses the CUDA context: gpufaults.py)
or kill it (a segfault: under Triton's interpreter an out-of-bounds tl.load or tl.store touches
host memory directly). The test that did it fails alone, with a message that says what happened
and how to reproduce it; the terminal summary and the perf JSON list these tests apart from the
ordinary failures.
"""

from __future__ import annotations

import os
import signal
import sys
import sysconfig

import pytest

from .. import state
from ..env import seeding

RECORDS_KEY = pytest.StashKey[list]()  # config: the tests that broke their process


def records(config: pytest.Config) -> list[dict]:
    """The tests that broke their process (lost the CUDA context, or crashed it), in run order."""
    return list(config.stash.get(RECORDS_KEY, []))


def crash_hint(config: pytest.Config) -> str:
    if state.get(config).runtime.interpret:
        return ("Under Triton's interpreter this is almost always a tl.load or tl.store outside its "
                "tensor (a missing or wrong mask): the interpreter reads and writes host memory "
                "directly, so the access crashes the process instead of raising.")
    return ("A crash, rather than a CUDA error, comes from native code: a C extension, Triton's "
            "launcher or the driver.")


def crash_message(config: pytest.Config, nodeid: str, how: str, after: str,
                  dump: list[str] | None) -> str:
    seed = seeding.for_nodeid(config, seeding.base(config), nodeid)
    lines = [f"ProcessCrashed: the process running this test died ({how}).", crash_hint(config),
             after, f"Reproduce it alone: {seed.describe()}."]
    if dump:
        lines += ["Where it died (faulthandler, most recent call first):", *dump]
    return "\n".join(lines)


def signal_text(returncode: int | None) -> str:
    if returncode is None:
        return "killed"
    if returncode < 0:
        try:
            sig = signal.Signals(-returncode)
            return f"signal {sig.name}, {signal.strsignal(sig) or sig.name}"
        except ValueError:
            return f"signal {-returncode}"
    return f"exit status {returncode}"


def faulthandler_frames(path: str, test_file: str) -> list[str]:
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
    path = frame_line.split('"')[1] if frame_line.count('"') >= 2 else frame_line
    stdlib = sysconfig.get_paths().get("stdlib") or "\0"
    return "site-packages" in path or "dist-packages" in path or path.startswith(stdlib)


class FaultSummary:
    """Collects the tests that broke their process from the reports (ours or a child's or a
    worker's) and lists them at the end."""

    def __init__(self, config: pytest.Config):
        self.config = config
        config.stash[RECORDS_KEY] = []

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


def hard_exit(status: int) -> None:
    """Leave now, without running the rest of the session here (nor torch's destructors, which
    would call into a lost CUDA context)."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    os._exit(status)
