"""Under pytest-xdist, a perf test never shares its GPU with another worker's tests.

Every test holds a shared lock on its GPU; a perf test (or one marked triton_exclusive, such as
a test of timing code) holds it exclusively, and one marked triton_no_gpu (it does not use the
GPU: its kernels run under the interpreter, in a subprocess) holds none. A writer-preference
gate keeps a waiting perf test from being starved by a stream of short correctness tests: a test
passes through the gate (briefly, shared) before taking its lock, and a perf test holds the gate
exclusively while it waits for, and holds, the GPU.

The lock is taken at the start of the test's setup and given back after its teardown, inside the
test's own phases: a wait that fails (longer than --triton-gpu-wait, or stopped by
pytest-timeout) is that test's setup error, which names the tests holding the GPU, never an
error of the worker (which xdist would report as a crash, and its controller as an
INTERNALERROR). Holders are listed in a folder beside the lock files while they hold it.

A thread holds at most one of these locks: a pytest session nested in a test (pytester) runs
under the outer test's lock, since flock would make it wait for itself.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import tempfile
import threading
import time

import pytest

from .. import options, state
from ..perf import record

POLL_S = 0.02  # between tries of a lock another worker holds
_HELD_KEY = pytest.StashKey[contextlib.ExitStack]()  # item: its hold, from setup to teardown


class GPUWaitTimeout(Exception):
    """A test waited longer than --triton-gpu-wait for its GPU."""


def _lock_paths(gpu_id: str) -> tuple[str, str]:
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID", "run")
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", f"{run}-{gpu_id}")
    base = os.path.join(tempfile.gettempdir(), f"pytest-triton-gpu-{safe}")
    return base + ".gate", base + ".lock"


def _holders_dir(lock: str) -> str:
    return lock + ".holders"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def holders(gpu_id: str) -> list[dict]:
    """The tests that hold GPU `gpu_id` now (from the holder records of live processes)."""
    folder = _holders_dir(_lock_paths(gpu_id)[1])
    found = []
    try:
        names = sorted(os.listdir(folder))
    except OSError:
        return []
    for name in names:
        try:
            with open(os.path.join(folder, name), encoding="utf-8") as f:
                rec = json.load(f)
        except (OSError, ValueError):
            continue
        if _alive(int(rec.get("pid", 0))):
            found.append(rec)
    return found


def _describe_holders(gpu_id: str) -> str:
    now = time.time()
    recs = holders(gpu_id)
    if not recs:
        return "no holder recorded (it may have just let go, or held it from outside pytest-triton)"
    return "; ".join(f"{r.get('nodeid') or '?'} ({r.get('worker') or 'pid ' + str(r.get('pid'))}, "
                     f"{'exclusively' if r.get('exclusive') else 'shared'}, for "
                     f"{now - r.get('since', now):.0f} s)" for r in recs)


@contextlib.contextmanager
def _flock(path: str, exclusive: bool, deadline: float | None, gpu_id: str):
    import fcntl

    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        mode = fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH
        start = time.monotonic()
        while True:
            try:
                fcntl.flock(fd, mode | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if deadline is not None and time.monotonic() >= deadline:
                    raise GPUWaitTimeout(
                        f"waited {time.monotonic() - start:.0f} s for GPU {gpu_id} "
                        f"({'alone' if exclusive else 'shared'}), held by: "
                        f"{_describe_holders(gpu_id)}. --triton-gpu-wait sets how long a test "
                        "waits") from None
                time.sleep(POLL_S)
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


@contextlib.contextmanager
def _recorded(lock: str, nodeid: str | None, exclusive: bool):
    folder = _holders_dir(lock)
    path = os.path.join(folder, f"{os.getpid()}-{threading.get_ident()}.json")
    try:
        os.makedirs(folder, exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            json.dump({"pid": os.getpid(), "worker": os.environ.get("PYTEST_XDIST_WORKER"),
                       "nodeid": nodeid, "exclusive": exclusive, "since": time.time()}, f)
    except OSError:
        path = None  # the record is for messages only: holding the GPU matters more
    try:
        yield
    finally:
        if path is not None:
            with contextlib.suppress(OSError):
                os.remove(path)


_THREAD = threading.local()  # .held: the lock this thread holds now (a nested session runs in it)

# Set while a process holds a GPU's lock, for the processes it starts (a pytester subprocess, the
# compute-sanitizer run of --triton-sanitize): they run under their ancestor's lock, which flock
# would make them wait for forever (and every other worker behind them, at the gate). Read once,
# at import: other threads of the holding process are other holders (the tests use them so).
HELD_ENV = "PYTEST_TRITON_GPU_LOCK_HELD"
_ANCESTOR_HOLDS = os.environ.get(HELD_ENV)


@contextlib.contextmanager
def hold(gpu_id: str, exclusive: bool, *, wait_s: float | None = None, nodeid: str | None = None):
    """Hold GPU `gpu_id`: shared by correctness tests, exclusively by perf tests. Raises
    GPUWaitTimeout, naming the holders, after `wait_s` seconds of waiting (None: no bound)."""
    if getattr(_THREAD, "held", None) or _ANCESTOR_HOLDS == gpu_id:
        yield  # nested in a test (of this process or an ancestor) that holds it already
        return
    gate, lock = _lock_paths(gpu_id)
    deadline = None if wait_s is None else time.monotonic() + wait_s
    _THREAD.held = gpu_id
    outer = os.environ.get(HELD_ENV)
    os.environ[HELD_ENV] = gpu_id
    try:
        if exclusive:
            with _flock(gate, True, deadline, gpu_id), _flock(lock, True, deadline, gpu_id), \
                    _recorded(lock, nodeid, True):
                yield
        else:
            with _flock(gate, False, deadline, gpu_id):
                pass
            with _flock(lock, False, deadline, gpu_id), _recorded(lock, nodeid, False):
                yield
    finally:
        _THREAD.held = None
        if outer is None:
            os.environ.pop(HELD_ENV, None)
        else:
            os.environ[HELD_ENV] = outer


def _wanted(item: pytest.Item) -> tuple[str, bool | None] | None:
    """(GPU id, exclusive) where the lock is on (under xdist, on a GPU), else None. exclusive is
    None for a test marked triton_no_gpu: it takes no lock at all."""
    rt = state.get(item.config).runtime
    if rt.interpret or rt.gpu_id is None or not os.environ.get("PYTEST_XDIST_WORKER") \
            or os.name != "posix":
        return None
    if item.get_closest_marker("triton_no_gpu") is not None:
        return rt.gpu_id, None
    rec = record.of(item)
    perf = state.get(item.config).perf and rec is not None and rec.target is not None
    return rt.gpu_id, perf or item.get_closest_marker("triton_exclusive") is not None


def order(items: list[pytest.Item]) -> None:
    """Under xdist on a GPU: the tests that hold the GPU alone first, then those that do not use
    it, each group in its own order. Taken later, a test that holds the GPU alone waits for every
    test in flight to end (the slowest of up to N workers' tests) while every other worker waits
    behind it at the gate: a convoy that, with two such tests in the project's own suite, left 8
    workers idle for minutes on an H100. First, they wait for the workers' first tests only, and
    the tests that take no lock keep the other workers busy meanwhile."""
    if not items or _wanted(items[0]) is None:
        return
    rank = {True: 0, None: 1, False: 2}
    items.sort(key=lambda it: rank[_wanted(it)[1]])  # stable: each group keeps its order


def acquire(item: pytest.Item) -> None:
    """At the start of the test's setup: take its GPU. A failed wait fails the test's setup."""
    wanted = _wanted(item)
    if wanted is None or wanted[1] is None:
        return
    gpu_id, exclusive = wanted
    wait_s = options.get_float(item.config, "triton_gpu_wait", minimum=0.0)
    stack = contextlib.ExitStack()
    waited = None
    try:
        stack.enter_context(hold(gpu_id, exclusive, wait_s=wait_s, nodeid=item.nodeid))
    except GPUWaitTimeout as exc:
        waited = str(exc)
    except BaseException:  # pytest-timeout's Failed, KeyboardInterrupt: not held, let it raise
        stack.close()
        raise
    if waited is not None:
        stack.close()
        pytest.fail(f"pytest-triton: {waited}", pytrace=False)
    item.stash[_HELD_KEY] = stack


def release(item: pytest.Item) -> None:
    """After the test's teardown: give its GPU back."""
    stack = item.stash.get(_HELD_KEY, None)
    if stack is not None:
        del item.stash[_HELD_KEY]
        stack.close()


class GPULock:
    """Under pytest-xdist on a GPU: each test holds its GPU (a perf test alone) from its setup
    to its teardown, and the tests that hold it alone run first."""

    def __init__(self, config: pytest.Config):
        self._config = config

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        order(items)

    @pytest.hookimpl(wrapper=True, trylast=True)
    def pytest_runtest_setup(self, item: pytest.Item):
        # Taken inside the test's phases (after the other wrappers began the phase, before any
        # fixture): a wait that fails is this test's setup error, not the worker's. Given back
        # after the whole teardown.
        acquire(item)
        return (yield)

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_teardown(self, item: pytest.Item, nextitem: pytest.Item | None):
        try:
            return (yield)
        finally:
            release(item)
