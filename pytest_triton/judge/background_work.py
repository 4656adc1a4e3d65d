"""Who else works during a timed call: the Python threads and child processes alive after it that
were not before it.

A call that hands its work to a thread or a process it started (DeepReinforce's CUDA-L1 write-up
lists such kernels) is timed doing a fraction of the work, or none: the rest runs beside the
timed region, or before it. Counted with threading.enumerate() and, on Linux, the children each
thread of this process has (/proc/self/task/*/children); multiprocessing's children elsewhere.
Threads the interpreter's native libraries start (OpenMP, the CUDA driver) are not Python
threads and are not counted; a compile worker pool of torch's Inductor is let through by name.
"""

from __future__ import annotations

import glob
import os
import threading
import time
from dataclasses import dataclass

from .checks import Call

# torch.compile's worker pool and Triton's compile helpers: started by a first compilation and
# kept for the next, doing no work of the call's
ALLOWED_PROCESSES = ("compile_worker", "torch/_inductor", "ptxas", "cuobjdump", "nvdisasm")


@dataclass(frozen=True)
class Census:
    threads: frozenset
    processes: frozenset


def _children() -> set[int]:
    pids: set[int] = set()
    paths = glob.glob(f"/proc/{os.getpid()}/task/*/children")
    if not paths:
        import multiprocessing  # import time: only where /proc has no children lists

        return {p.pid for p in multiprocessing.active_children() if p.pid}
    for path in paths:
        try:
            with open(path) as f:
                pids.update(int(x) for x in f.read().split())
        except (OSError, ValueError):
            continue
    return pids


def take() -> Census:
    return Census(frozenset(t.ident for t in threading.enumerate()), frozenset(_children()))


def _cmdline(pid: int) -> str:
    """The child's command line; a child caught between fork and exec has none yet: asked again
    for up to 0.2 s, then its name."""
    for _ in range(20):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                text = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            return "?"
        if text:
            return text
        time.sleep(0.01)
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return "?"


def _thread_text(t: threading.Thread) -> str:
    target = getattr(t, "_target", None)
    what = f", running {getattr(target, '__qualname__', repr(target))}" if target else ""
    return f"thread {t.name!r}{' (daemon)' if t.daemon else ''}{what}"


def started_since(before: Census) -> list[str]:
    """The threads and child processes alive now that were not in `before`, described."""
    found = [_thread_text(t) for t in threading.enumerate()
             if t.ident not in before.threads and t.is_alive()]
    for pid in sorted(_children() - before.processes):
        cmd = _cmdline(pid)
        if not any(a in cmd for a in ALLOWED_PROCESSES):
            found.append(f"process {pid} ({cmd[:100]})")
    return found


def check(call: Call) -> str | None:
    """The watched call's check (checks.py): threads and processes it left running."""
    when = call.when
    found = started_since(call.census)
    if not found:
        return None
    return (f"extra workers: {when} started {len(found)} thread{'s' if len(found) > 1 else ''} or "
            f"process{'es' if len(found) > 1 else ''} still running after it: "
            + "; ".join(found) + ". Work done beside the timed call is not timed (a thread or "
            "process can compute ahead, or after the end event); keep the call's work in the "
            "call, and stop what it starts before it returns.")
