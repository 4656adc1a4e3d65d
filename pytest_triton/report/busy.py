"""Each pytest-xdist worker's busy and idle time, and the GPU it had: where a run of N workers
loses against N times one process (a worker that ends early and waits, a slow start).

The controller reads every test's reports as they arrive: a worker's busy time is the sum of its
tests' setup, call and teardown durations; its idle time is the session's wall time (from the
controller's session start to its end) less that; its tail is the time from its last test's end
to the session's end (the wait for the slowest worker). Each worker names its GPU in xdist's
workeroutput, which the controller reads when the worker finishes.

Under xdist the terminal summary has a section of one line per worker, a line saying what the
longest-first order went by (order.py), and a line more where every worker compiles torch's or
Triton's Python from source at its start (env/bytecode.py);
the --triton-perf-json document has a "workers" list (one entry per worker, "this process"
without xdist, so that scripts read one shape). Without xdist the terminal gets nothing: one
process is busy for the whole session but collection, which pytest's own last line states.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass

import pytest

from .. import state
from ..env import bytecode
from ..perf.session import session as perf_session
from . import order

TITLE = "pytest-triton: each worker's busy and idle time (pytest-xdist)"
GPU_OUTPUT = "pytest_triton_gpu"  # the worker's workeroutput key: the GPU it ran on
CALIBRATION_OUTPUT = "pytest_triton_calibration_s"  # its key: seconds spent on the ceilings
THIS_PROCESS = "this process"


@dataclass
class WorkerTime:
    """One worker's tests and time, in seconds of the controller's session."""

    worker: str
    gpu: str | None = None  # the physical GPU (CUDA_VISIBLE_DEVICES' id), or "cpu"
    tests: int = 0  # tests run to their teardown
    busy_s: float = 0.0  # setup + call + teardown of its tests
    setup_s: float = 0.0  # of busy: its tests' setups (fixtures, the GPU lock's wait)
    teardown_s: float = 0.0  # of busy: their teardowns
    first_start: float | None = None  # epoch seconds: its first test's setup began
    last_stop: float | None = None  # epoch seconds: its last test's teardown ended
    calibration_s: float | None = None  # of busy: looking for its GPU's ceilings (measuring them)

    def row(self, start: float, end: float) -> dict:
        """The JSON entry: busy, idle (wall less busy), start (until its first test) and tail
        (after its last test), against the session from `start` to `end`."""
        wall = max(end - start, 0.0)
        out = asdict(self)
        for key in ("first_start", "last_stop"):
            out.pop(key)
        for key in ("busy_s", "setup_s", "teardown_s"):
            out[key] = round(out[key], 3)
        out["idle_s"] = round(max(wall - self.busy_s, 0.0), 3)
        out["start_s"] = round(self.first_start - start, 3) if self.first_start else None
        out["tail_s"] = round(end - self.last_stop, 3) if self.last_stop else None
        out["busy_frac"] = round(self.busy_s / wall, 4) if wall > 0 else None
        if self.calibration_s is not None:
            out["calibration_s"] = round(self.calibration_s, 3)
        return out


BUSY_KEY = pytest.StashKey["WorkerTimes"]()  # config: the controller's (or a lone process's) tally


def worker_of(report) -> str:
    """The xdist worker that ran the report's test ("gw0"), else "this process"."""
    node = getattr(report, "node", None)
    return getattr(report, "worker_id", None) or getattr(getattr(node, "gateway", None), "id", None) \
        or THIS_PROCESS


class WorkerTimes:
    """The tally of one run, filled where reports arrive (the xdist controller, or the process
    running its own tests), read by the terminal summary and the JSON document."""

    def __init__(self, config: pytest.Config):
        self._config = config
        config.stash[BUSY_KEY] = self
        self.start = time.time()
        self.end: float | None = None
        self.by_worker: dict[str, WorkerTime] = {}
        self.xdist = False

    def _entry(self, worker: str) -> WorkerTime:
        if worker not in self.by_worker:
            self.by_worker[worker] = WorkerTime(worker)
        return self.by_worker[worker]

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        self.start = time.time()

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        worker = worker_of(report)
        self.xdist = self.xdist or worker != THIS_PROCESS
        entry = self._entry(worker)
        entry.busy_s += report.duration
        if report.when in ("setup", "teardown"):
            setattr(entry, f"{report.when}_s", getattr(entry, f"{report.when}_s") + report.duration)
        start, stop = getattr(report, "start", None), getattr(report, "stop", None)
        if start is not None:
            entry.first_start = start if entry.first_start is None else min(entry.first_start, start)
        if stop is not None:
            entry.last_stop = stop if entry.last_stop is None else max(entry.last_stop, stop)
        if report.when == "teardown":
            entry.tests += 1

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node, error) -> None:
        out = getattr(node, "workeroutput", None) or {}
        self.xdist = True
        worker = getattr(getattr(node, "gateway", None), "id", None)
        if worker:
            self._entry(worker).gpu = out.get(GPU_OUTPUT)
            self._entry(worker).calibration_s = out.get(CALIBRATION_OUTPUT)

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        self.end = time.time()  # before the JSON is written (report/summary, later)

    def pytest_terminal_summary(self, terminalreporter) -> None:
        if self.xdist and self.by_worker:
            terminalreporter.write_sep("=", TITLE)
            for line in summary_lines(self.rows(), self.wall_s()):
                terminalreporter.write_line(line)
            ordered = order.basis_line(order.basis(self._config))
            if ordered:
                terminalreporter.write_line(ordered)
            slow_start = bytecode.hint()  # of the environment the workers inherit
            if slow_start:
                terminalreporter.write_line(slow_start)

    def wall_s(self) -> float:
        return (self.end or time.time()) - self.start

    def rows(self) -> list[dict]:
        """Each worker's JSON entry, gw0 first; without xdist the one entry of this process, its
        GPU this process's own."""
        end = self.end or time.time()
        if not self.xdist:
            rt = state.get(self._config).runtime
            self._entry(THIS_PROCESS).gpu = rt.gpu_id or rt.device
            self._entry(THIS_PROCESS).calibration_s = _calibration_s(self._config)
        return [self.by_worker[w].row(self.start, end)
                for w in sorted(self.by_worker, key=lambda w: (len(w), w))]


def summary_lines(rows: list[dict], wall_s: float) -> list[str]:
    """One line per worker, then the run's: what BENCHMARKS.md quotes."""
    lines = []
    for r in rows:
        gpu = f" (GPU {r['gpu']})" if r.get("gpu") not in (None, "cpu") else ""
        start = f", {r['start_s']:.1f} s to its first test" if r.get("start_s") is not None else ""
        tail = f", {r['tail_s']:.1f} s after its last" if r.get("tail_s") is not None else ""
        tests = f"{r['tests']} test{'s' if r['tests'] != 1 else ''}"
        lines.append(f"{r['worker']}{gpu}: {tests}, busy {r['busy_s']:.1f} s, idle "
                     f"{r['idle_s']:.1f} s{start}{tail}")
    busy = sum(r["busy_s"] for r in rows)
    if rows and wall_s > 0:
        lines.append(f"session {wall_s:.1f} s over {len(rows)} workers: busy {busy:.1f} s of "
                     f"{wall_s * len(rows):.1f} s ({busy / (wall_s * len(rows)):.0%})")
    return lines


def session_times(config: pytest.Config) -> dict | None:
    """The session's start and end, epoch seconds, where a tally is kept: a script that timed the
    whole process finds what came before the session (start-up, collection) and after it."""
    tally = config.stash.get(BUSY_KEY, None)
    if tally is None:
        return None
    return {"start": round(tally.start, 3), "end": round(tally.end or time.time(), 3)}


def rows(config: pytest.Config) -> list[dict]:
    """The run's "workers" entries for the JSON document; [] where no tally is kept (a worker, a
    supervised child)."""
    tally = config.stash.get(BUSY_KEY, None)
    return tally.rows() if tally is not None else []


class WorkerGpu:
    """On an xdist worker: names the worker's GPU in workeroutput, which the controller reads when
    the worker finishes."""

    def __init__(self, config: pytest.Config):
        self._config = config
        rt = state.get(config).runtime
        config.workeroutput[GPU_OUTPUT] = rt.gpu_id or rt.device

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        self._config.workeroutput[CALIBRATION_OUTPUT] = _calibration_s(self._config)


def _calibration_s(config: pytest.Config) -> float | None:
    """Seconds this process spent on its GPU's ceilings; None without --triton-perf."""
    ps = perf_session(config)
    return None if ps is None else ps.calibration_s
