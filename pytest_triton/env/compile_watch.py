"""What a call compiled and autotuned: `watch_compiles()` counts compilations (and their time)
through Triton's compilation listener, for the whole triton_bench call (autotuning compiles every
config in its first call); `autotune_record()` reads what an autotuner timed and chose.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass

# --- the autotune record ---------------------------------------------------------------------

def tuner_name(tuner) -> str:
    fn = getattr(tuner, "fn", None)
    while fn is not None and not hasattr(fn, "__name__") and hasattr(fn, "fn"):
        fn = fn.fn
    return getattr(fn, "__name__", None) or getattr(tuner, "name", None) or type(tuner).__name__


def _ms(value) -> float | None:
    if isinstance(value, (list, tuple)):
        value = value[0] if value else None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def autotune_record(tuner) -> dict:
    """{"kernel", "kind", "configs": n, "timings": [{"config", "ms", "chosen"}], "chosen",
    "bench_s"} of an Autotuner (Triton's) or anything with its attributes (LaunchTuner)."""
    best = getattr(tuner, "best_config", None)
    timings = getattr(tuner, "configs_timings", None) or {}
    configs = getattr(tuner, "configs", None)
    rows = []
    for cfg, t in timings.items():
        rows.append({"config": str(cfg), "ms": _ms(t), "chosen": best is not None and
                     (cfg is best or str(cfg) == str(best))})
    rows.sort(key=lambda r: (r["ms"] is None, r["ms"] or 0.0))
    n = len(configs) if configs is not None else (len(timings) or None)
    return {"kernel": tuner_name(tuner), "kind": type(tuner).__name__, "configs": n,
            "timings": rows, "chosen": None if best is None else str(best),
            "bench_s": getattr(tuner, "bench_time", None)}


def tuners_of(kernel) -> list:
    """The autotuners (objects with best_config) among triton_bench's kernel= (one or a list)."""
    if kernel is None:
        return []
    kernels = kernel if isinstance(kernel, (list, tuple)) else [kernel]
    return [k for k in kernels if hasattr(k, "best_config") or hasattr(k, "configs_timings")]


def names_of(kernel) -> set[str]:
    """The @triton.jit function names behind kernel= (JITFunctions, Autotuners, Heuristics)."""
    out = set()
    kernels = kernel if isinstance(kernel, (list, tuple)) else [kernel]
    for k in kernels:
        fn, depth = k, 0
        while fn is not None and depth < 5:
            if hasattr(fn, "params") and hasattr(fn, "__name__"):
                out.add(fn.__name__)
                break
            fn, depth = getattr(fn, "fn", None), depth + 1
    return out


# --- compile time ----------------------------------------------------------------------------

@dataclass
class Compiles:
    count: int = 0  # compilations that missed Triton's cache
    seconds: float = 0.0  # their compile time
    cache_hits: int = 0
    wall_s: float = 0.0  # the whole watched call (measurement, autotuning included)
    available: bool = True

    def to_dict(self) -> dict:
        return asdict(self)


@contextmanager
def watch_compiles():
    """Count Triton compilations (and their time) while the block runs, chaining any listener
    that was installed before."""
    stats = Compiles()
    try:
        from triton import knobs

        comp = knobs.compilation
        before = comp.listener
    except Exception:  # noqa: BLE001 - no listener in this Triton: time is not attributed
        stats.available = False
        t0 = time.perf_counter()
        yield stats
        stats.wall_s = time.perf_counter() - t0
        return

    def listener(*args, **kwargs):
        try:
            if kwargs.get("cache_hit"):
                stats.cache_hits += 1
            else:
                stats.count += 1
                times = kwargs.get("times")
                stats.seconds += getattr(times, "total", 0) / 1e6  # microseconds
        finally:
            if before is not None:
                before(*args, **kwargs)

    comp.listener = listener
    t0 = time.perf_counter()
    try:
        yield stats
    finally:
        stats.wall_s = time.perf_counter() - t0
        comp.listener = before
