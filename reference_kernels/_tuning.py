"""Launch configurations chosen on the GPU they run on.

A launcher names a small space of candidate configs (dicts of its launch parameters) beside its
kernel: the launch heuristic first, then the alternatives that won on some GPU. The first call on
a large problem times every candidate with the plugin's own timing (pytest_triton.perf.timing: cold
L2, CUDA graphs for short kernels, no launch overhead) and keeps the fastest for that device and
key for the rest of the process, as triton.autotune does for a kernel's configs. Under
pytest-xdist the workers of one run share each choice (pytest_triton.shared_choice): the first to
time a key on a GPU model writes its choice, and the others launch it untimed. A new GPU thus
picks what suits it among configs that each won somewhere, instead of inheriting the constants
of the GPU they were swept on.

Without timing (the space's first candidate): small problems (under TUNE_MIN_BYTES of traffic:
tuning would cost more than it saves, and correctness tests stay quick and deterministic),
Triton's interpreter, CUDA-graph capture (nothing may be timed inside one: a key timed before the
capture keeps its choice, so that a graph replays the launch the eager calls chose), and
PYTEST_TRITON_TUNE=0 (every launch on its heuristic).

The kernels tuned by triton.autotune instead (matmul, attention, conv2d) launch through
launch_autotuned, which times Triton's closest configs again, interleaved, where Triton tuned.
"""

from __future__ import annotations

import inspect
import math
import os

import torch
import triton

from pytest_triton import do_bench, do_bench_each, interpreting, shared_choice

# Traffic below which the heuristic is taken untimed: at 32 MB a launch takes microseconds, and
# tuning (a compile and tens of ms of timing per candidate) could not pay for itself
# (docs/kernels.md).
TUNE_MIN_BYTES = 32 * 2**20


def _cfg_text(cfg: dict) -> str:
    return ", ".join(f"{k}: {v}" for k, v in cfg.items())


class LaunchTuner:
    """The choices of one launcher, per (device, key). Mirrors the attributes of Triton's
    Autotuner that reports read: `best_config` (the last choice), `configs_timings` (the
    candidates of that choice and their median ms) and `cache` (every choice)."""

    def __init__(self, name: str):
        self.name = name
        self.cache: dict = {}  # (device name, SMs, key) -> chosen config
        self.timings: dict = {}  # same key -> [(config, ms)]
        self.best_config: str | None = None
        self.configs_timings: dict | None = None

    def choose(self, device: torch.device, key: tuple, space: list[dict], run, nbytes: int,
               restore: tuple = ()) -> dict:
        """The config to launch with: space[0] untimed (see the module doc), else the fastest
        candidate for (device, key), timed now if it never was. run(cfg) launches with cfg.
        `restore`: tensors run(cfg) writes, given their values back after timing (an output that
        is also an input, in place, would otherwise be computed on its own result many times
        over, as triton.autotune's restore_value does)."""
        if not space:
            raise ValueError(f"{self.name}: empty launch space")
        if len(space) == 1:
            return self._chosen(space[0], None)
        if not _may_time(device, nbytes):
            if _capturing(device):  # what the eager calls chose, if they timed this key
                k = self._key(device, key)
                if k in self.cache:
                    return self._chosen(self.cache[k], self.timings.get(k))
            return self._chosen(space[0], None)
        k = self._key(device, key)
        if k not in self.cache:
            # Under pytest-xdist the first worker of the run to time this key on this GPU model
            # shares its choice; the others take it untimed (one choice per key, as one process
            # makes it).
            found = shared_choice(f"launch-{self.name}", repr(k),
                                  lambda: _timed(space, run, device, restore))
            if found is None or len(found["ms"]) != len(space):
                return self._chosen(space[0], None)  # every candidate failed: let it raise
            self.timings[k] = list(zip(space, found["ms"]))
            self.cache[k] = space[found["index"]]
        return self._chosen(self.cache[k], self.timings.get(k))

    @staticmethod
    def _key(device, key: tuple) -> tuple:
        props = torch.cuda.get_device_properties(device)
        return (props.name, props.multi_processor_count, key)

    def _chosen(self, cfg: dict, timings) -> dict:
        self.best_config = _cfg_text(cfg)
        self.configs_timings = {_cfg_text(c): ms for c, ms in timings} if timings else None
        return cfg

    def __repr__(self) -> str:
        return f"LaunchTuner({self.name!r}, {len(self.cache)} choices)"


def _timed(space: list[dict], run, device, restore: tuple) -> dict | None:
    """{"index": the fastest candidate's, "ms": each candidate's median} timed now; None when
    every candidate failed to run."""
    saved = [t.clone() for t in restore]
    try:
        ms = _medians_ms(run, space, device)
    finally:
        for t, s in zip(restore, saved):
            t.copy_(s)
    timed = [(m, i) for i, m in enumerate(ms) if math.isfinite(m)]
    return {"index": min(timed)[1], "ms": ms} if timed else None


def _may_time(device: torch.device, nbytes: int) -> bool:
    if device.type != "cuda" or interpreting() or nbytes < TUNE_MIN_BYTES:
        return False
    if os.environ.get("PYTEST_TRITON_TUNE", "1").strip().lower() in ("0", "false", "off", "no"):
        return False
    return not torch.cuda.is_current_stream_capturing()


def _capturing(device) -> bool:
    return getattr(device, "type", None) == "cuda" and torch.cuda.is_current_stream_capturing()


def _medians_ms(run, space: list[dict], device: torch.device) -> list[float]:
    """Median ms of run(cfg) for every cfg of space, timed interleaved (do_bench_each: the GPU's
    drift over the seconds of tuning falls on every candidate alike, not on the ones timed last);
    inf for a candidate that cannot run here. Each candidate runs once first, alone, so that one
    that fails to compile or launch is set aside; if the interleaved timing itself fails, each
    is timed alone."""
    ms = [math.inf] * len(space)
    ok = []
    with torch.cuda.device(device):
        for i, cfg in enumerate(space):
            try:
                run(cfg)
                torch.cuda.synchronize(device)
                ok.append(i)
            except Exception:  # noqa: BLE001 - a candidate that cannot run here is not chosen
                torch.cuda.synchronize(device)
        try:
            for i, t in zip(ok, do_bench_each([lambda c=space[i]: run(c) for i in ok])):
                ms[i] = t
        except Exception:  # noqa: BLE001 - fall back to timing each alone
            torch.cuda.synchronize(device)
            for i in ok:
                ms[i] = _median_ms(run, space[i], device)
    return ms


def _median_ms(run, cfg: dict, device: torch.device) -> float:
    """Median ms of run(cfg); inf when the candidate cannot run here (too many registers or too
    much shared memory for this GPU, say): it is then never chosen."""
    try:
        with torch.cuda.device(device):  # do_bench times on the current device
            return do_bench(lambda: run(cfg))
    except Exception:  # noqa: BLE001 - a candidate that fails to compile or launch is not chosen
        torch.cuda.synchronize(device)
        return math.inf


def space(defaults: dict, *alternatives: dict) -> list[dict]:
    """[defaults, defaults | alternative, ...] without duplicates, in that order."""
    out = [dict(defaults)]
    for alt in alternatives:
        cfg = {**defaults, **alt}
        if cfg not in out:
            out.append(cfg)
    return out


def in_place_hooks(out: str, *inputs: str) -> dict:
    """triton.autotune's pre_hook and post_hook for a kernel whose output argument `out` may be
    one of its `inputs` (an in-place call, out=x): each timed launch then starts from the
    output's values before tuning, so the launch after tuning computes on the caller's data
    once. A launch whose output shares no storage with an input copies nothing: re-running it
    writes the same values, and tuning times the kernel's own traffic. Triton's restore_value
    clones and copies the output around every timed launch whatever it aliases, which more than
    doubles the bytes each timed launch moves and hides the differences between tiles of a
    streaming kernel."""
    saved: dict = {}

    def pre_hook(nargs: dict, reset_only: bool = False) -> None:
        # reset_only: the autotuner's call once tuning is done, before the real launch
        if reset_only:
            return
        dst = nargs[out]
        if any(_shares_storage(dst, nargs[name]) for name in inputs):
            saved[out] = dst.clone()

    def post_hook(nargs: dict, exception) -> None:
        if out in saved:
            nargs[out].copy_(saved.pop(out))

    return {"pre_hook": pre_hook, "post_hook": post_hook}


def _shares_storage(a, b) -> bool:
    return (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)
            and a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr())


def autotune_kwargs() -> dict:
    """triton.autotune's keyword arguments for every bundled kernel's autotuner: the plugin's
    timing (pytest_triton.do_bench: CUDA graphs, cold L2, as the perf tests time) where this
    Triton's autotune takes a do_bench (Triton >= 3.3), so that the config chosen is the one the
    perf gate finds fastest. Triton's default includes host launch overhead, which on 20-50 us
    kernels (M=128 GEMMs, ResNet layers) drowns the differences between configs, and it
    disagrees with the gate on which tile streams fastest."""
    if "do_bench" in inspect.signature(triton.autotune).parameters:
        return {"do_bench": do_bench}
    return {}  # pragma: no cover - older Triton: its default timing


# A triton.autotune choice is timed again where Triton timed a config within this fraction of its
# fastest: at most CONFIRM_MAX of them, the fastest first.
CONFIRM_BAND = 0.10
CONFIRM_MAX = 4


def launch_autotuned(tuner, grid, *args, **kwargs):
    """`tuner[grid](*args, **kwargs)` for a bundled kernel's triton.autotune, its choice confirmed.

    Triton's autotuner times its configs one after another and keeps the fastest. A GPU's clock
    moves over the seconds that takes (its power cap, a neighbour card's load), so a config timed
    at a higher clock can win over a faster one (docs/kernels.md, Tuning, has a case). Where this
    call tuned a new key, the configs Triton timed within CONFIRM_BAND of its fastest are timed
    again interleaved (do_bench_each, as LaunchTuner times its candidates), and the fastest of
    them becomes the key's choice. For kernels that write only their outputs: each timed launch
    writes them again, with the same values."""
    before, timed_before = set(tuner.cache), getattr(tuner, "configs_timings", None)
    result = tuner[grid](*args, **kwargs)
    new = [key for key in tuner.cache if key not in before]
    # A key Triton chose for untimed (its pruning left one config) keeps the last key's
    # configs_timings: only a new timing is confirmed.
    timed = getattr(tuner, "configs_timings", None)
    if len(new) == 1 and timed is not None and timed is not timed_before and not interpreting() \
            and _confirm(tuner, new[0], timed, grid, args, kwargs):
        # the timed launches left a finalist's output: the chosen config's writes the result
        result = tuner[grid](*args, **kwargs)
    return result


def _first_ms(timing) -> float:
    """Triton's timing of one config as a number: its median, the first of the quantiles."""
    value = timing[0] if isinstance(timing, (list, tuple)) else timing
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.inf


def finalists(configs_timings: dict) -> list:
    """The configs to time again: those within CONFIRM_BAND of the fastest, fastest first, at
    most CONFIRM_MAX; none where fewer than two are."""
    ranked = sorted(((ms, i, c) for i, (c, t) in enumerate(configs_timings.items())
                     if math.isfinite(ms := _first_ms(t))), key=lambda r: r[:2])
    if not ranked:
        return []
    near = [c for ms, _, c in ranked if ms <= ranked[0][0] * (1 + CONFIRM_BAND)][:CONFIRM_MAX]
    return near if len(near) > 1 else []


def _confirm(tuner, key, timings: dict, grid, args: tuple, kwargs: dict) -> bool:
    """Time the key's finalists (of Triton's `timings` for it) interleaved and keep the fastest;
    whether any launch ran."""
    near = finalists(timings)
    if not near:
        return False
    nargs = dict(zip(tuner.arg_names, args))

    def run(cfg):  # one launch with cfg, its hooks around it, as Triton's tuning launches it
        current = {**kwargs, **cfg.all_kwargs()}
        full = {**nargs, **current}
        if cfg.pre_hook is not None:
            cfg.pre_hook(full)
        tuner.pre_hook(full)
        try:
            tuner.fn.run(*args, grid=grid, warmup=False, **current)
        finally:
            tuner.post_hook(full, exception=None)

    device = next((a.device for a in args if isinstance(a, torch.Tensor)), None)
    if device is None:
        device = torch.device("cuda", torch.cuda.current_device())
    if _capturing(device):
        return False  # nothing may be timed inside a CUDA-graph capture
    ms = _medians_ms(run, near, device)
    best = min(range(len(near)), key=lambda i: (ms[i], i))
    if not math.isfinite(ms[best]):
        return True  # none ran to the end: Triton's choice stands
    tuner.cache[key] = tuner.best_config = near[best]
    # the finalists' interleaved medians in place of Triton's quantiles (median, 20%, 80%)
    tuner.configs_timings = {**timings, **{c: [m] * 3 for c, m in zip(near, ms)}}
    return True
