"""The files of a GPU's lock under pytest-xdist (gpulock.py takes and gives it): per GPU and run,
a gate (an flock) and a folder of records, one file each:

- hold.<token>.json: a holder (its pid, xdist worker, test, shared or alone, since when);
- want.<token>: a thread waiting to go alone, or alone (no shared holder starts meanwhile);
- lent.<lender token>.<record token>: a record lent while its holder (or a process it started)
  waits to go alone;
- waits.<record token>.jsonl: the waits of processes started under that record, for its test.

A token is <pid>-<thread id>, -a for a thread's hold alone; what a dead process left counts for
nothing.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import tempfile
import threading
import time
from dataclasses import dataclass

POLL_S = 0.02  # between looks at a lock another worker holds


class GPUWaitTimeout(Exception):
    """A test waited longer than --triton-gpu-wait for its GPU."""


@dataclass(frozen=True)
class Hold:
    gpu_id: str
    folder: str  # the records of this GPU's lock in this run
    token: str  # the holder's record: <pid>-<thread>[-a]
    exclusive: bool
    timing: bool = False  # shared by a test that times: its timed parts (and its runs') go alone


def folder_of(gpu_id: str) -> str:
    """The records' folder of GPU `gpu_id`'s lock in this run; its gate is beside it (gate_of)."""
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID", "run")
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", f"{run}-{gpu_id}")
    return os.path.join(tempfile.gettempdir(), f"pytest-triton-gpu-{safe}.holders")


def gate_of(folder: str) -> str:
    return folder.removesuffix(".holders") + ".gate"


def _alive(pid: int) -> bool:
    """Whether process `pid` runs. A zombie (exited, not yet waited for by its parent) does not:
    an xdist worker that retires after losing its CUDA context leaves with os._exit, holding the
    GPU shared, and its parent waits for it later (on an H100 the hold of an inner run's retired
    worker, alive to os.kill, kept a test waiting to go alone, and every test behind it, 240 s)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return True  # no /proc (macOS): os.kill's answer
    return stat[stat.rfind(b")") + 2:][:1] != b"Z"


def token(suffix: str = "") -> str:
    return f"{os.getpid()}-{threading.get_ident()}{suffix}"


def _live(token: str) -> bool:
    try:
        return _alive(int(token.split("-", 1)[0]))
    except ValueError:
        return False


def touch(path: str, text: str = "") -> None:
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def remove(path: str) -> None:
    with contextlib.suppress(OSError):
        os.remove(path)


def scan(folder: str) -> tuple[dict[str, dict], set[str], set[str]]:
    """(records by token, intents' tokens, lent records' tokens), of live processes only."""
    records, intents, lent = {}, set(), set()
    try:
        names = sorted(os.listdir(folder))
    except OSError:
        return records, intents, lent
    for name in names:
        kind, _, rest = name.partition(".")
        if kind == "hold" and rest.endswith(".json") and _live(rest[:-5]):
            try:
                with open(os.path.join(folder, name), encoding="utf-8") as f:
                    records[rest[:-5]] = json.load(f)
            except (OSError, ValueError):
                continue  # gone meanwhile, or being written: its writer is still at the gate
        elif kind == "want" and _live(rest):
            intents.add(rest)
        elif kind == "lent":
            lender, _, record = rest.partition(".")
            if _live(lender):
                lent.add(record)
    return records, intents, lent


def holders(gpu_id: str) -> list[dict]:
    """The tests that hold GPU `gpu_id` now (the records of live processes, but those lent)."""
    records, _, lent = scan(folder_of(gpu_id))
    return [r for t, r in records.items() if t not in lent]


def _describe(recs: list[dict]) -> str:
    if not recs:
        return "no holder recorded (it may have just let go, or held it from outside pytest-triton)"
    now = time.time()
    return "; ".join(f"{r.get('nodeid') or '?'} ({r.get('worker') or 'pid ' + str(r.get('pid'))}, "
                     f"{'exclusively' if r.get('exclusive') else 'shared'}, for "
                     f"{now - r.get('since', now):.0f} s)" for r in recs)


def timeout(gpu_id: str, start: float, alone: bool, recs: list[dict]) -> GPUWaitTimeout:
    return GPUWaitTimeout(
        f"waited {time.monotonic() - start:.0f} s for GPU {gpu_id} "
        f"({'alone' if alone else 'shared'}), held by: {_describe(recs)}. --triton-gpu-wait sets "
        "how long a test waits")


@contextlib.contextmanager
def flock(path: str, exclusive: bool, deadline: float | None, on_timeout):
    import fcntl

    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        mode = fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH
        while True:
            try:
                fcntl.flock(fd, mode | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if deadline is not None and time.monotonic() >= deadline:
                    raise on_timeout() from None
                time.sleep(POLL_S)
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def record(folder: str, token: str, nodeid: str | None, exclusive: bool) -> str:
    path = os.path.join(folder, f"hold.{token}.json")
    tmp = path + ".tmp"  # written whole, then renamed: a reader never sees half of it
    touch(tmp, json.dumps({"pid": os.getpid(), "worker": os.environ.get("PYTEST_XDIST_WORKER"),
                            "nodeid": nodeid, "exclusive": exclusive, "since": time.time()}))
    os.replace(tmp, path)
    return path
