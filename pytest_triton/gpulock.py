"""Under pytest-xdist, a perf test never shares its GPU with another worker's tests.

Every test holds a shared lock on its GPU; a perf test holds it exclusively. A writer-preference
gate keeps a waiting perf test from being starved by a stream of short correctness tests: a test
passes through the gate (briefly, shared) before taking its lock, and a perf test holds the gate
exclusively while it waits for, and holds, the GPU.
"""

from __future__ import annotations

import contextlib
import os
import re
import tempfile

import pytest

from . import markers, state


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


@contextlib.contextmanager
def for_item(item: pytest.Item):
    rt = state.get(item.config).runtime
    if rt.interpret or rt.gpu_id is None or not os.environ.get("PYTEST_XDIST_WORKER") or os.name != "posix":
        yield
        return
    gate, lock = _lock_paths(rt.gpu_id)
    perf = state.get(item.config).perf and item.stash.get(markers.TARGET_KEY, None) is not None
    if perf:
        with _flock(gate, True), _flock(lock, True):
            yield
    else:
        with _flock(gate, False):
            pass
        with _flock(lock, False):
            yield
