"""Under pytest-xdist, a perf test never shares its GPU with another worker's tests.

Every test holds a shared lock on its GPU; a perf test (or one marked triton_exclusive, such as
a test of timing code) holds it exclusively. A writer-preference
gate keeps a waiting perf test from being starved by a stream of short correctness tests: a test
passes through the gate (briefly, shared) before taking its lock, and a perf test holds the gate
exclusively while it waits for, and holds, the GPU.

A thread holds at most one of these locks: a pytest session nested in a test (pytester) runs
under the outer test's lock, since flock would make it wait for itself.
"""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
import threading

import pytest

from .. import state
from ..perf import markers


def _lock_paths(gpu_id: str) -> tuple[str, str]:
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID", "run")
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", f"{run}-{gpu_id}")
    base = os.path.join(tempfile.gettempdir(), f"pytest-triton-gpu-{safe}")
    return base + ".gate", base + ".lock"


@contextlib.contextmanager
def _flock(path: str, exclusive: bool):
    import fcntl

    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


_THREAD = threading.local()  # .held: the lock this thread holds now (a nested session runs in it)

# Set while a process holds a GPU's lock, for the processes it starts (a pytester subprocess, the
# compute-sanitizer run of --triton-sanitize): they run under their ancestor's lock, which flock
# would make them wait for forever (and every other worker behind them, at the gate). Read once,
# at import: other threads of the holding process are other holders (the tests use them so).
HELD_ENV = "PYTEST_TRITON_GPU_LOCK_HELD"
_ANCESTOR_HOLDS = os.environ.get(HELD_ENV)


@contextlib.contextmanager
def hold(gpu_id: str, exclusive: bool):
    """Hold GPU `gpu_id`: shared by correctness tests, exclusively by perf tests."""
    if getattr(_THREAD, "held", None) or _ANCESTOR_HOLDS == gpu_id:
        yield  # nested in a test (of this process or an ancestor) that holds it already
        return
    gate, lock = _lock_paths(gpu_id)
    _THREAD.held = gpu_id
    outer = os.environ.get(HELD_ENV)
    os.environ[HELD_ENV] = gpu_id
    try:
        if exclusive:
            with _flock(gate, True), _flock(lock, True):
                yield
        else:
            with _flock(gate, False):
                pass
            with _flock(lock, False):
                yield
    finally:
        _THREAD.held = None
        if outer is None:
            os.environ.pop(HELD_ENV, None)
        else:
            os.environ[HELD_ENV] = outer


@contextlib.contextmanager
def for_item(item: pytest.Item):
    rt = state.get(item.config).runtime
    if rt.interpret or rt.gpu_id is None or not os.environ.get("PYTEST_XDIST_WORKER") or os.name != "posix":
        yield
        return
    perf = state.get(item.config).perf and item.stash.get(markers.TARGET_KEY, None) is not None
    exclusive = perf or item.get_closest_marker("triton_exclusive") is not None
    with hold(rt.gpu_id, exclusive=exclusive):
        yield
