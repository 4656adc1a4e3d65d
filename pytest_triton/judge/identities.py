"""The timer's functions are the timer's own: noted before any conftest or test module runs, and
checked before and after every timed call.

gpu-mode reference-kernels #162: a submission left its kernel honest and replaced
`Event.elapsed_time` and the harness's statistics with versions reporting a hundredth of the
time, and topped the leaderboard. What is noted here: torch.cuda's events, streams, graphs and
synchronize; time's clocks; statistics; triton.testing's benchmarks; every function and method
of the plugin's own timing, statistics, verdict and outcome modules. A replacement found fails
the test, naming each replaced function and where its replacement was defined; the originals
are put back, so that the rest of the run times with them.
"""

from __future__ import annotations

import inspect
import sys
import types

import pytest

from ..env import onimport
from .checks import Call

KEY = pytest.StashKey[dict]()  # config: label -> (owner, attribute, the object noted)
# the plugin's modules whose functions a verdict rests on
OWN = ("pytest_triton.perf.timing", "pytest_triton.perf.stats", "pytest_triton.perf.verdict",
       "pytest_triton.perf.record", "pytest_triton.perf.lifecycle", "pytest_triton.perf.default_hooks",
       "pytest_triton.perf.session", "pytest_triton.perf.fixture")
_TORCH = (("torch.cuda", ("Event", "Stream", "CUDAGraph", "synchronize", "current_stream",
                          "stream", "graph", "_sleep", "elapsed_time")),
          ("torch.cuda.Event", ("record", "elapsed_time", "synchronize", "query", "wait")),
          ("torch.cuda.Stream", ("synchronize", "wait_stream", "wait_event", "record_event")),
          ("torch.cuda.CUDAGraph", ("replay", "capture_begin", "capture_end")),
          ("torch._C", ("_cuda_synchronize",)),
          ("time", ("perf_counter", "perf_counter_ns", "monotonic", "monotonic_ns", "time",
                    "time_ns")),
          ("statistics", ("median", "mean", "quantiles")),
          ("triton.testing", ("do_bench", "do_bench_cudagraph")))


def _resolve(path: str):
    obj = sys.modules.get(path.split(".")[0])
    for part in path.split(".")[1:]:
        obj = getattr(obj, part, None)
    return obj


def _members(owner) -> list[str]:
    """The functions (and descriptors of them) a module or class defines itself."""
    found = []
    for name, value in vars(owner).items():
        if isinstance(value, (types.FunctionType, staticmethod, classmethod, property)):
            found.append(name)
        elif isinstance(value, type) and inspect.getmodule(value) is inspect.getmodule(owner) \
                and value is not owner:
            found.append(name)
    return found


def _targets() -> list[tuple[str, object, str]]:
    """(label, owner, attribute) of everything noted."""
    out = []
    for path, names in _TORCH:
        owner = _resolve(path)
        if owner is not None:
            out += [(f"{path}.{n}", owner, n) for n in names if n in vars(owner)]
    for path in OWN:
        module = sys.modules.get(path)
        if module is None:
            continue
        for name in _members(module):
            out.append((f"{path}.{name}", module, name))
            value = vars(module)[name]
            if isinstance(value, type):
                out += [(f"{path}.{name}.{m}", value, m) for m in _members(value)
                        if not isinstance(vars(value)[m], type)]
    return out


def note(config: pytest.Config) -> None:
    """Note the identities, once per run, before any conftest or test module is imported: those
    of the modules imported now, and each other's the moment it is first imported (the plugin
    loads without torch and Triton), before the code that imported it goes on."""
    if KEY in config.stash:
        return
    noted = config.stash[KEY] = {}
    _note(noted)
    for name in ("torch", "triton", *OWN):
        if name not in sys.modules:
            config.add_cleanup(onimport.when_imported(name, lambda _module: _note(noted)))


def _note(noted: dict) -> None:
    if "triton" in sys.modules:
        try:
            import triton.testing  # noqa: F401 - import time: noted, as the timing modules are
        except Exception:  # noqa: BLE001 - no triton.testing to note
            pass
    for label, owner, name in _targets():
        if label not in noted:
            noted[label] = (owner, name, vars(owner)[name])


def _where(value) -> str:
    fn = getattr(value, "__func__", value)
    code = getattr(fn, "__code__", None)
    if code is not None:
        return f"{getattr(fn, '__qualname__', '?')} at {code.co_filename}:{code.co_firstlineno}"
    return repr(value)[:80]


def replaced(config: pytest.Config) -> list[str]:
    """Each noted function that is no longer the one noted (put back), described."""
    noted = config.stash.get(KEY, None) or {}
    found = []
    for label, (owner, name, value) in noted.items():
        now = vars(owner).get(name, None)
        if now is not value:
            found.append(f"{label} is {_where(now)}")
            setattr(owner, name, value)
    return found


def check(call: Call) -> str | None:
    """The watched call's check (checks.py): a noted function replaced before or during it."""
    return tampering(call.config, call.when)


def tampering(config: pytest.Config, when: str) -> str | None:
    """The failure message when a noted function was replaced (then put back); else None."""
    found = replaced(config)
    if not found:
        return None
    return (f"timer tampering: {len(found)} function{'s' if len(found) > 1 else ''} the timing or "
            f"its statistics rely on {'were' if len(found) > 1 else 'was'} replaced ({when}):\n  "
            + "\n  ".join(found) + "\nA replaced timer or statistic reports whatever its author "
            "chooses (gpu-mode reference-kernels #162 reported a hundredth of the time). The "
            "originals are restored for the rest of the run; this test's timings are void.")
