"""Blame the right test for a GPU fault.

After each test's call and teardown on a CUDA GPU the device is synchronised, so a kernel's
asynchronous fault is reported on the test that launched it, never on a later one. CUDA errors are
classified: a *sticky* error (illegal or misaligned address, illegal instruction, launch failure or
trap, device-side assert) leaves the process's CUDA context unusable, so the test fails with
GPUContextLost, naming the error, where it surfaced, the test's last Triton launches and how to
reproduce it alone; isolation.py then runs the rest of the session in a fresh process. After an
out-of-memory failure the test's tensors are released and the caching allocator is emptied before
the next test.
"""

from __future__ import annotations

import atexit
import collections
import gc
import os
import sys
from dataclasses import dataclass

import pytest

from .. import state
from ..env import launch_hooks, role, seeding

# CUDA errors after which the context is unusable: the driver returns them from every later call.
# Code: (short name, the driver's text, which torch and Triton put in their messages).
STICKY_ERRORS = {
    700: ("illegal address", "an illegal memory access was encountered"),
    716: ("misaligned address", "misaligned address"),
    715: ("illegal instruction", "an illegal instruction was encountered"),
    719: ("launch failure", "unspecified launch failure"),  # also a kernel's trap instruction
    710: ("device-side assert", "device-side assert triggered"),
    714: ("hardware stack error", "hardware stack error"),
    717: ("invalid address space", "operation not supported on global/shared address space"),
    718: ("invalid program counter", "invalid program counter"),
    702: ("launch timeout", "the launch timed out and was terminated"),
    214: ("uncorrectable ECC error", "uncorrectable ECC error encountered"),
}
# How CUDA errors begin, as torch (RuntimeError, AcceleratorError) and Triton raise them. Other
# exceptions that merely quote such a text (an assertion about a log, say) are not CUDA errors.
_PREFIXES = ("CUDA error", "Triton Error [CUDA]", "CUDA driver error", "HIP error",
             "Triton Error [HIP]")
_OOM_TEXTS = ("CUDA out of memory", "HIP out of memory")


@dataclass(frozen=True)
class CudaError:
    kind: str  # "sticky" (the context is lost) or "oom"
    code: int | None
    name: str
    text: str


def classify(exc: BaseException | None) -> CudaError | None:
    """The CUDA error `exc` (or an exception it was raised from) reports, if it reports one."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, GPUContextLost):
            return exc.error
        if isinstance(exc, RuntimeError):
            text = str(exc).lstrip()
            code = getattr(exc, "error_code", None)
            cuda = text.startswith(_PREFIXES)
            for c, (name, driver_text) in STICKY_ERRORS.items():
                if code == c or (cuda and driver_text in text):
                    return CudaError("sticky", c, name, driver_text)
            torch = sys.modules.get("torch")
            oom_type = getattr(torch, "OutOfMemoryError", None) if torch is not None else None
            if ((oom_type is not None and isinstance(exc, oom_type)) or text.startswith(_OOM_TEXTS)
                    or (cuda and "out of memory" in text)):
                return CudaError("oom", 2, "out of memory", (text.splitlines() or [""])[0])
        exc = exc.__cause__ or exc.__context__
    return None


class GPUContextLost(Exception):
    """A test's kernel hit a sticky CUDA error: this process's CUDA context is unusable."""
    __module__ = "pytest_triton"  # where users import it from, and how reports name it

    def __init__(self, message: str, error: CudaError, surfaced: str):
        super().__init__(message)
        self.error = error
        self.surfaced = surfaced  # "test": raised inside the test; "sync": at the plugin's sync


class LaunchRecorder:
    """Triton's launch-enter hook: the names of the current test's last Triton launch_hooks."""
    KEEP = 5

    def __init__(self):
        self.names: collections.deque[str] = collections.deque(maxlen=self.KEEP)
        self.count = 0
        self._uninstall = None

    def __call__(self, metadata) -> None:
        # metadata is Triton's LazyDict; .data holds name/function/stream without evaluating the
        # kernel's own launch_metadata function (which .get() would run).
        data = getattr(metadata, "data", None)
        self.names.append((data.get("name") if isinstance(data, dict) else None) or "?")
        self.count += 1

    def reset(self) -> None:
        self.names.clear()
        self.count = 0

    def describe(self) -> str:
        if not self.count:
            return ("no Triton launch was recorded in this test (the fault may be in a torch "
                    "operation or a kernel launched by another library)")
        last = ", ".join(self.names)
        if self.count <= len(self.names):
            return f"Triton launches in this test: {last} (most recent last)"
        return (f"Triton launches in this test: {self.count}; the last {len(self.names)}: {last} "
                "(most recent last)")

    def install(self, owner=None) -> None:
        """Record every Triton launch from now on (launch_hooks.add_launch_hook; `owner`: where the hook
        lives, Triton's own by default)."""
        self._uninstall = launch_hooks.add_launch_hook(self, owner)

    def uninstall(self) -> None:
        if self._uninstall is not None:
            self._uninstall()
            self._uninstall = None


LOST_KEY = pytest.StashKey[dict]()  # config: the fault that lost this process's CUDA context
_OOM_KEY = pytest.StashKey[BaseException]()  # item: a phase ran out of memory, with this
_SESSIONS = [0]  # pytest sessions configured in this process (pytester nests them)


def lost(config: pytest.Config) -> dict | None:
    """The fault that lost this process's CUDA context, or None."""
    return config.stash.get(LOST_KEY, None)


def _mode_line(config: pytest.Config) -> str:
    if role.is_worker(config):
        return ("This xdist worker retires after this test; xdist starts a fresh one and the rest "
                "of the session carries on.")
    return "Any remaining tests run in a fresh process (pytest-triton continues the session there)."


class FaultWatch:
    """Synchronises after each test phase on the GPU and turns sticky CUDA errors into
    GPUContextLost on the test that caused them."""

    def __init__(self, config: pytest.Config):
        self.config = config
        self.launches = LaunchRecorder()
        # pytest-xdist's controller launches nothing (its workers do): no hook, no import of Triton
        self.real_gpu = not state.get(config).runtime.interpret and not role.is_controller(config)
        self.outermost = _SESSIONS[0] == 0
        self.session: pytest.Session | None = None
        _SESSIONS[0] += 1
        if self.real_gpu:
            self.launches.install()

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        self.launches.uninstall()
        _SESSIONS[0] -= 1

    @pytest.hookimpl(trylast=True)
    def pytest_triton_synchronize(self, config: pytest.Config, item: pytest.Item) -> bool:
        if self.real_gpu:
            torch = sys.modules.get("torch")
            if torch is not None and torch.cuda.is_initialized():
                torch.cuda.synchronize()
        return True

    def pytest_runtest_logstart(self, nodeid: str, location) -> None:
        self.launches.reset()

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item):
        __tracebackhide__ = True
        try:
            return (yield)
        except BaseException as exc:
            self._raise_if_sticky(item, "setup", exc)
            raise

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_call(self, item: pytest.Item):
        __tracebackhide__ = True
        try:
            result = yield
        except BaseException as exc:
            self._raise_if_sticky(item, "call", exc)
            if isinstance(exc, KeyboardInterrupt):
                raise
            self._synchronize(item, "call", failed=exc)
            raise
        self._synchronize(item, "call")
        return result

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_teardown(self, item: pytest.Item, nextitem: pytest.Item | None):
        __tracebackhide__ = True
        already_lost = lost(item.config) is not None
        try:
            result = yield
        except BaseException as exc:
            err = classify(exc)
            if already_lost and err is not None and err.kind == "sticky":
                return None  # a consequence of the loss already blamed on this test's setup/call
            self._raise_if_sticky(item, "teardown", exc)
            raise
        self._synchronize(item, "teardown")
        return result

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo):
        report = yield
        exc = call.excinfo.value if call.excinfo is not None else None
        if isinstance(exc, GPUContextLost):
            fault = lost(item.config)
            report.triton_fault = fault
            if exc.surfaced == "sync":  # the plugin's own frames would say nothing
                report.longrepr = f"GPUContextLost: {exc}"
        elif exc is not None:
            err = classify(exc)
            if err is not None and err.kind == "oom":
                item.stash[_OOM_KEY] = exc
        return report

    @pytest.hookimpl(wrapper=True)  # around whichever plugin runs the test (oomretry may)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None):
        self._item = item  # for pytest_runtest_logfinish, which is not given the item
        return (yield)

    @pytest.hookimpl(trylast=True)
    def pytest_runtest_logfinish(self, nodeid: str, location) -> None:
        # After the protocol has dropped the test's fixture values (item.funcargs).
        item = getattr(self, "_item", None)
        if item is not None and item.nodeid == nodeid and _OOM_KEY in item.stash:
            release_memory(item.stash[_OOM_KEY],
                           empty_cache=self.real_gpu and lost(item.config) is None)
            del item.stash[_OOM_KEY]
        self._item = None

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        self.session = session

    # -- internals ---------------------------------------------------------------------------

    def _synchronize(self, item: pytest.Item, when: str, failed: BaseException | None = None) -> None:
        if lost(item.config) is not None:
            return
        try:
            item.config.hook.pytest_triton_synchronize(config=item.config, item=item)
        except Exception as exc:
            err = classify(exc)
            if err is None or err.kind != "sticky":
                raise
            note = ""
            if isinstance(failed, Exception):  # not a skip or pytest.fail
                first = (str(failed).splitlines() or [""])[0]
                note = f" (the test had also failed: {type(failed).__name__}: {first})"
            raise self._lose(item, when, err, "sync", note) from None

    def _raise_if_sticky(self, item: pytest.Item, when: str, exc: BaseException) -> None:
        __tracebackhide__ = True
        if isinstance(exc, GPUContextLost) or lost(item.config) is not None:
            return
        err = classify(exc)
        if err is not None and err.kind == "sticky":
            lost_exc = self._lose(item, when, err, "test", "")
            # The test's own traceback shows where the error surfaced; the message is ours.
            raise lost_exc.with_traceback(exc.__traceback__) from None

    def _lose(self, item: pytest.Item, when: str, err: CudaError, surfaced: str,
              note: str) -> GPUContextLost:
        seed = seeding.CURRENT.get() or seeding.for_item(item, seeding.base(item.config))
        code = f"CUDA error {err.code} " if err.code is not None else ""
        if surfaced == "sync":
            where = (f"It surfaced at pytest-triton's torch.cuda.synchronize() after the test's {when}: "
                     f"a kernel this test launched faulted asynchronously, and nothing in the test "
                     f"synchronised{note}.")
        else:
            where = f"It surfaced in the test's {when}, at the line the traceback shows."
        launches = self.launches.describe()
        message = "\n".join([
            f"{code}in {when}: {err.text}. The "
            "error is sticky: this process's CUDA context is lost, and every later CUDA call in it "
            "would fail with the same error.",
            where,
            launches[:1].upper() + launches[1:] + ".",
            _mode_line(item.config),
            f"Reproduce it alone: {seed.describe()}. With CUDA_LAUNCH_BLOCKING=1 the faulting "
            "launch raises where it is called; compute-sanitizer --tool memcheck (with "
            "PYTORCH_NO_CUDA_MEMORY_CACHING=1) names the faulting access.",
        ])
        item.config.stash[LOST_KEY] = {
            "nodeid": item.nodeid, "when": when, "error": err.name, "code": err.code,
            "text": err.text, "surfaced": surfaced, "launches": list(self.launches.names),
            "launch_count": self.launches.count, "seed": seed.seed, "base_seed": seed.base,
        }
        if self.real_gpu and self.outermost and not role.is_worker(item.config):
            atexit.register(self._exit_without_cuda_teardown)
        return GPUContextLost(message, err, surfaced)

    def _exit_without_cuda_teardown(self) -> None:
        """At exit of a process whose CUDA context is lost: leave before torch's destructors call
        into the dead context (they can abort the process, turning exit status 1 into 134)."""
        try:
            import coverage  # a coverage run would lose its data to os._exit

            cov = coverage.Coverage.current()
            if cov is not None:
                cov.stop()
                cov.save()
        except Exception:
            pass
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        # The session's final status (sessionfinish hooks may have changed it); 1 if it never ended.
        os._exit(int(getattr(self.session, "exitstatus", 1)))


def release_memory(exc: BaseException, *, empty_cache: bool) -> None:
    """After an out-of-memory failure: free the test's tensors, which its finished frames still
    hold (through sys.last_traceback, kept for post-mortem debugging, and anything else that kept
    the exception), then return the caching allocator's blocks to the device, so the next test (or
    its re-run: oomretry.py) starts with the memory this one had."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        tb = exc.__traceback__
        while tb is not None:
            try:
                tb.tb_frame.clear()
            except RuntimeError:  # still executing
                pass
            else:
                tb.tb_frame.f_locals  # noqa: B018 - before 3.13 this drops a stale snapshot
            tb = tb.tb_next
        exc = exc.__cause__ or exc.__context__
    for name in ("last_type", "last_value", "last_traceback", "last_exc"):
        try:
            delattr(sys, name)
        except AttributeError:
            pass
    gc.collect()
    torch = sys.modules.get("torch")
    if empty_cache and torch is not None and torch.cuda.is_initialized():
        torch.cuda.empty_cache()
