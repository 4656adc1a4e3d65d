"""An out-of-memory caused by a neighbour is not the kernel's failure.

Under pytest-xdist every worker's tests share the GPU's memory: a test that fits alone can run out
while the tests of other workers hold theirs. A test that fails with CUDA out of memory (in its
setup or its call) while other processes hold GPU memory is therefore run once more, holding the
GPU alone (gpulock: the other workers' tests end first, and each gives its cached memory back as
it lets go). If it passes alone it is reported as passed, with an OutOfMemoryRetried warning
naming what the others held when it ran out; if it fails alone it fails as it would have, with a
note saying it was tried alone. The first attempt's failing report is never logged.

On by default under pytest-xdist on a GPU (--triton-oom-retry=off turns it off). Elsewhere the
first failure stands: without xdist no worker of this run is a neighbour, and a run nested in a
test (its workers under that test's hold) cannot hold the GPU alone apart from its siblings.
"""

from __future__ import annotations

import inspect
import os
import sys
from dataclasses import dataclass

import pytest

from .. import state
from ..env import nvml
from . import gpufaults, gpuholds, gpulock

GiB = 1 << 30
_OOM_KEY = pytest.StashKey["_OutOfMemory"]()  # item: this attempt ran out beside neighbours
_TRYING_KEY = pytest.StashKey[bool]()  # item: its first attempt is running (a re-run is not re-run)


class OutOfMemoryRetried(pytest.PytestWarning):
    """A test ran out of GPU memory while other processes held some, and passed when re-run with
    the GPU to itself."""
    __module__ = "pytest_triton"


@dataclass(frozen=True)
class Memory:
    """The GPU's memory as a test ran out: what processes other than the test's held."""
    others: int  # bytes
    total: int | None = None
    who: tuple[tuple[str, int], ...] = ()  # (a worker and its test, or a pid; bytes), largest first
    how: str = ""  # how `others` was found, where it is an estimate

    def describe(self) -> str:
        text = f"other processes held {self.others / GiB:.1f} GiB"
        if self.total:
            text += f" of the GPU's {self.total / GiB:.1f} GiB"
        if self.who:
            text += " (" + ", ".join(f"{w}: {b / GiB:.1f} GiB" for w, b in self.who[:6]) + \
                (", ..." if len(self.who) > 6 else "") + ")"
        return text + (f" ({self.how})" if self.how else "")


@dataclass
class _OutOfMemory:
    when: str
    exc: BaseException
    memory: Memory


def memory_of_others(device: str, gpu_id: str) -> Memory | None:
    """What processes other than this one held on `device` now: per process from NVML where it
    sees this process; else the device's memory in use less this process's reservation (which
    then counts this process's CUDA context as another's). None where CUDA has not started."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_initialized():
        return None
    free, total = torch.cuda.mem_get_info(device)
    procs = nvml.processes_memory(device) or {}
    if os.getpid() in procs:  # NVML's pids are this process's (not a container's host pids)
        names = {r.get("pid"): f"{r.get('worker') or 'pid ' + str(r.get('pid'))} "
                 f"({r.get('nodeid')})" for r in gpulock.holders(gpu_id)}
        who = sorted(((names.get(pid, f"pid {pid}"), b) for pid, b in procs.items()
                      if pid != os.getpid()), key=lambda wb: -wb[1])
        return Memory(sum(b for _, b in who), total, tuple(who))
    own = torch.cuda.memory_reserved(device)
    return Memory(max(0, total - free - own), total,
                  how=f"the GPU's {(total - free) / GiB:.1f} GiB in use less this process's "
                      f"{own / GiB:.1f} GiB of tensors and cache")


class OOMRetry:
    def __init__(self, config: pytest.Config):
        self.config = config

    def _applies(self, item: pytest.Item) -> bool:
        wanted = gpuholds._wanted(item)  # the GPU lock is on: a GPU, a worker, not nested
        return wanted is not None and wanted[1] != "none" and not gpulock.nested(wanted[0])

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo):
        report = yield
        if item.stash.get(_TRYING_KEY, False) and report.failed and call.when in ("setup", "call") \
                and call.excinfo is not None and _OOM_KEY not in item.stash:
            err = gpufaults.classify(call.excinfo.value)
            if err is not None and err.kind == "oom":
                rt = state.get(item.config).runtime
                memory = memory_of_others(rt.device, rt.gpu_id)
                if memory is not None and memory.others > 0:
                    item.stash[_OOM_KEY] = _OutOfMemory(call.when, call.excinfo.value, memory)
        return report

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None):
        if not self._applies(item):
            return None  # pytest runs it
        ihook = item.ihook
        ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
        item.stash[_TRYING_KEY] = True
        try:
            first = _run(item, nextitem, log=lambda report: _OOM_KEY not in item.stash)
        finally:
            item.stash[_TRYING_KEY] = False
        oom = item.stash.get(_OOM_KEY, None)
        if oom is not None:
            del item.stash[_OOM_KEY]
            self._again(item, nextitem, oom, first)
        ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
        return True

    def _again(self, item: pytest.Item, nextitem, oom: _OutOfMemory, first: list) -> None:
        """Run the test once more holding the GPU alone, and log what it gives (the first
        attempt's passing setup report, if it went out, standing for the re-run's)."""
        gpufaults.release_memory(oom.exc, empty_cache=True)  # the first attempt's tensors
        oom.exc = None
        logged = [r for r in first if r.when == "setup" and oom.when == "call"]
        try:
            with gpuholds.alone_for(item):
                again = _run(item, nextitem, log=lambda report: False)
        except gpulock.GPUWaitTimeout as exc:  # the first attempt's failure stands
            again = first
            for report in again:
                if report.failed:
                    report.sections.append(("pytest-triton", _note(oom, f"not re-run: {exc}")))
        else:
            failed = next((r for r in again if r.failed), None)
            if failed is not None:
                failed.sections.append(("pytest-triton", _note(
                    oom, "re-run with the GPU to itself, it failed again")))
            else:
                self._passed_alone(item, oom, again)
        for report in again:
            if not (logged and report.when == "setup" and report.passed):
                item.ihook.pytest_runtest_logreport(report=report)

    def _passed_alone(self, item: pytest.Item, oom: _OutOfMemory, reports: list) -> None:
        text = _note(oom, "re-run with the GPU to itself, it passed")
        call = next((r for r in reports if r.when == "call"), None)
        try:
            item.warn(OutOfMemoryRetried(text))
        except Warning as exc:  # -W error: the warning fails the test instead
            if call is not None:
                call.outcome, call.longrepr = "failed", f"{type(exc).__name__}: {exc}"
        if call is not None:
            call.sections.append(("pytest-triton", text))


def _note(oom: _OutOfMemory, outcome: str) -> str:
    return (f"pytest-triton: ran out of CUDA memory in its {oom.when} while "
            f"{oom.memory.describe()}; {outcome}")


def _run(item: pytest.Item, nextitem, *, log) -> list[pytest.TestReport]:
    """pytest's runtestprotocol, logging each report at once while log(report) says so; once it
    says not, that report and the rest are left to the caller. Returns every report."""
    from _pytest.runner import call_and_report, show_test_item

    hasrequest = hasattr(item, "_request")
    if hasrequest and not item._request:  # a re-run: a fresh fixture request
        item._initrequest()
    reports, logging = [], True

    def phase(when: str, **kwargs) -> pytest.TestReport:
        nonlocal logging
        report = call_and_report(item, when, log=False, **kwargs)
        reports.append(report)
        logging = logging and log(report)
        if logging:
            item.ihook.pytest_runtest_logreport(report=report)
        return report

    try:
        if phase("setup").passed:
            setup_only = item.config.getoption("setuponly", False)
            if item.config.getoption("setupshow", False):
                if "add_space" in inspect.signature(show_test_item).parameters:  # newer pytest
                    show_test_item(item, add_space=not setup_only)
                else:
                    show_test_item(item)
            if not setup_only:
                phase("call")
        if item.session.shouldfail or item.session.shouldstop:
            nextitem = None
        phase("teardown", nextitem=nextitem)
    finally:
        if hasrequest:
            item._request = False
            item.funcargs = None
    return reports
