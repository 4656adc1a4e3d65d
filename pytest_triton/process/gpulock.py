"""Under pytest-xdist, a test that times a kernel has the GPU to itself while it times.

Every test holds its GPU shared, from the start of its setup to the end of its teardown; one
marked triton_no_gpu (it does not use the GPU: its kernels run under the interpreter, in a
subprocess) holds nothing. The parts that time hold it *alone*: in a test that times (a perf
test, one using triton_bench under --triton-perf, or one marked triton_exclusive(scope="timing")),
triton_bench's measurement with the measured ceilings and the diagnoses that profile it, in the
test or in the pytest runs it starts; and the whole of a test marked triton_exclusive. Nothing
else does: a perf test's compiles, a child process's start-up, the rest of the test share the GPU.

How: each holder writes a record (a file) into a folder beside the lock's gate while it holds.
To go alone a thread announces itself (an intent: no shared holder starts while one is there),
then, through the gate (an flock) one at a time, waits until every other record is gone or lent,
and writes its own. A test lends its record while it waits to go alone, or while a process it
started does (it does nothing on the GPU meanwhile): two tests that time never wait for each
other's shared hold. A shared holder writes its record under the gate, so none is missed. The
records of dead processes do not count (lockfiles.py).

A process started under a hold (a pytester run, the ncu or compute-sanitizer child) runs under it
(HELD_ENV): its tests take no lock of their own, and where they time they lend the ancestor's
record and go alone in its place, their waits reported with the ancestor's test.

The tests' holds (when each test takes which, and the order tests run in) are gpuholds.py's.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import threading
import time
from dataclasses import asdict

from . import lockfiles
from .lockfiles import POLL_S, GPUWaitTimeout, Hold, holders

__all__ = ["GPUWaitTimeout", "HELD_ENV", "POLL_S", "alone", "hold", "holders", "nested",
           "sharing", "waits_to"]

HELD_ENV = "PYTEST_TRITON_GPU_LOCK_HELD"  # for the processes a holder starts: the hold, as JSON


def give_back_cached_memory() -> None:
    """Return this process's cached GPU memory to the device (a test waiting to go alone may need
    it: an out-of-memory re-run does). Nothing where CUDA never started here."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        torch.cuda.empty_cache()


def _note(kind: str, gpu_id: str, wait_s: float, nodeid: str | None) -> tuple[dict, bool]:
    """A wait for the lock, for the report: kept with the test this thread runs (True), else
    left to the caller to write for the test whose hold this process runs under (_to_ancestor).
    A hold alone fills in held_s when it ends (the dict is the one the report carries)."""
    entry = {"kind": kind, "wait_s": round(wait_s, 3), "held_s": None, "nodeid": nodeid,
             "gpu": gpu_id}
    sink = getattr(_THREAD, "sink", None)
    if sink is not None:
        sink.append(entry)
    return entry, sink is not None


def _to_ancestor(entry: dict, ancestor: Hold | None) -> None:
    """A wait of a process started under `ancestor`'s hold, for that hold's test (release())."""
    if ancestor is not None:
        with contextlib.suppress(OSError), \
                open(os.path.join(ancestor.folder, f"waits.{ancestor.token}.jsonl"), "a") as f:
            f.write(json.dumps(entry) + "\n")


@contextlib.contextmanager
def _shared(gpu_id: str, deadline: float | None, nodeid: str | None, timing: bool):
    folder = lockfiles.folder_of(gpu_id)
    os.makedirs(folder, exist_ok=True)
    token, start, gave_back = lockfiles.token(), time.monotonic(), False
    while True:
        if not lockfiles.scan(folder)[1]:
            # under the gate, shared: no thread goes alone without seeing this record
            with lockfiles.flock(lockfiles.gate_of(folder), False, deadline,
                                 lambda: lockfiles.timeout(gpu_id, start, False, holders(gpu_id))):
                if not lockfiles.scan(folder)[1]:
                    path = lockfiles.record(folder, token, nodeid, False)
                    break
        if not gave_back:  # another test waits to go alone: this worker's cache may be in its way
            give_back_cached_memory()
            gave_back = True
        if deadline is not None and time.monotonic() >= deadline:
            raise lockfiles.timeout(gpu_id, start, False, holders(gpu_id))
        time.sleep(POLL_S)
    _note("shared", gpu_id, time.monotonic() - start, nodeid)
    try:
        yield Hold(gpu_id, folder, token, False, timing)
    finally:
        if lockfiles.scan(folder)[1]:
            give_back_cached_memory()
        lockfiles.remove(path)


@contextlib.contextmanager
def _alone(gpu_id: str, deadline: float | None, nodeid: str | None, kind: str,
           lend: Hold | None = None, ancestor: Hold | None = None):
    """Hold GPU `gpu_id` alone; `lend`: the record this thread holds (or runs under) meanwhile."""
    folder = lockfiles.folder_of(gpu_id) if lend is None else lend.folder
    os.makedirs(folder, exist_ok=True)
    token, start = lockfiles.token("-a"), time.monotonic()
    made = [os.path.join(folder, f"want.{token}")]
    if lend is not None:
        made.append(os.path.join(folder, f"lent.{token}.{lend.token}"))

    def others() -> list[dict]:
        records, _, lent = lockfiles.scan(folder)
        return [r for t, r in records.items() if t not in lent and t != token]

    try:
        for path in made:
            lockfiles.touch(path, str(os.getpid()))
        # One at a time through the gate: a thread that finds no other record writes its own
        # (exclusive) before it lets the next one look.
        with lockfiles.flock(lockfiles.gate_of(folder), True, deadline,
                             lambda: lockfiles.timeout(gpu_id, start, True, others())):
            while blocking := others():
                if deadline is not None and time.monotonic() >= deadline:
                    raise lockfiles.timeout(gpu_id, start, True, blocking)
                time.sleep(POLL_S)
            record = lockfiles.record(folder, token, nodeid, True)
    except BaseException:
        entry, kept = _note(kind, gpu_id, time.monotonic() - start, nodeid)
        if not kept:
            _to_ancestor(entry, ancestor)
        for path in made:
            lockfiles.remove(path)
        raise
    got = time.monotonic()
    entry, kept = _note(kind, gpu_id, got - start, nodeid)
    try:
        yield Hold(gpu_id, folder, token, True)
    finally:
        lockfiles.remove(record)
        for path in made:
            lockfiles.remove(path)
        entry["held_s"] = round(time.monotonic() - got, 3)
        if not kept:
            _to_ancestor(entry, ancestor)


_THREAD = threading.local()  # .held: this thread's hold (a nested session runs under it); .sink


def _from_env() -> Hold | None:
    try:
        return Hold(**json.loads(os.environ[HELD_ENV]))
    except (KeyError, ValueError, TypeError):
        return None


# Set while a process holds a GPU's lock, for the processes it starts (a pytester subprocess, the
# compute-sanitizer run of --triton-sanitize): they run under their ancestor's hold, which they
# would otherwise wait for (and every other worker behind them). Read once, at import: other
# threads of the holding process are other holders (the tests use them so).
_ANCESTOR = _from_env()


@contextlib.contextmanager
def _as_held(hold: Hold):
    """This thread holds `hold` for the block: nested holds and its children run under it."""
    outer, outer_env = getattr(_THREAD, "held", None), os.environ.get(HELD_ENV)
    _THREAD.held = hold
    os.environ[HELD_ENV] = json.dumps(asdict(hold))
    try:
        yield
    finally:
        _THREAD.held = outer
        if outer_env is None:
            os.environ.pop(HELD_ENV, None)
        else:
            os.environ[HELD_ENV] = outer_env


@contextlib.contextmanager
def hold(gpu_id: str, exclusive: bool, *, timing: bool = False, wait_s: float | None = None,
         nodeid: str | None = None):
    """Hold GPU `gpu_id` (shared, or alone) and yield the hold; yield None, holding nothing new,
    nested in a hold of this thread or of an ancestor process. `timing`: shared by a test that
    times (alone() takes the GPU alone under it). Raises GPUWaitTimeout, naming the holders, after
    `wait_s` seconds of waiting (None: no bound)."""
    if nested(gpu_id):
        yield None
        return
    deadline = None if wait_s is None else time.monotonic() + wait_s
    taking = _alone(gpu_id, deadline, nodeid, "test") if exclusive else \
        _shared(gpu_id, deadline, nodeid, timing)
    with taking as held, _as_held(held):
        yield held


def nested(gpu_id: str) -> bool:
    """Whether a hold of GPU `gpu_id` here would run under one of this thread or an ancestor."""
    return getattr(_THREAD, "held", None) is not None or (
        _ANCESTOR is not None and _ANCESTOR.gpu_id == gpu_id)


def sharing() -> bool:
    """Whether this thread runs under the shared hold of a test that times (its own, or one of a
    test it runs inside: a pytest run that test started): alone() takes the GPU alone. Under the
    hold of a test that does not time (a test of the plugin's logic, with a stand-in measure
    hook, say) what it runs times as it would without xdist, sharing the GPU."""
    held = getattr(_THREAD, "held", None) or _ANCESTOR
    return held is not None and not held.exclusive and held.timing


@contextlib.contextmanager
def alone(*, wait_s: float | None = None, nodeid: str | None = None):
    """Hold the GPU alone for the block (a timed part) where this thread runs under the shared
    hold of a test that times (sharing()): the hold is lent meanwhile. Elsewhere (no lock, alone
    already, or in a test that does not time) it does nothing."""
    if not sharing():
        yield
        return
    own = getattr(_THREAD, "held", None)
    lend = own or _ANCESTOR
    deadline = None if wait_s is None else time.monotonic() + wait_s
    with _alone(lend.gpu_id, deadline, nodeid, "alone", lend, None if own else _ANCESTOR) as held, \
            _as_held(held):
        yield


def waits_sink() -> list | None:
    """Where this thread's waits for the lock go (a test's list of them), None if nowhere."""
    return getattr(_THREAD, "sink", None)


def waits_to(sink: list | None) -> None:
    """Send this thread's waits for the lock to `sink` (None: nowhere, the caller's ancestor)."""
    _THREAD.sink = sink
