"""What --triton-perf-explain diagnoses from: after triton_bench measured `fn`, the launches of one
more (untimed) call (each compiled kernel's metadata, its grid and operands), the autotune
records and what compiled while timing. Read in the process that timed; explain and ncu use it."""

from __future__ import annotations

import time

import pytest

from .. import options, state
from ..env import compile_watch
from ..env import launch_hooks as launches_mod
from ..perf import record as perf_record
from ..perf.record import Verdict

CAPTURES_KEY = pytest.StashKey[dict]()  # per item: measurement index -> capture record


def mode(config: pytest.Config) -> str:
    return options.get(config, "triton_perf_explain") or "off"


def timed_launches(record: dict) -> list[dict]:
    """The launches that were timed: those of kernel= where it names @triton.jit functions, else
    every launch fn made."""
    launches = record.get("launches") or []
    names = set(record.get("kernel_names") or ())
    picked = [la for la in launches if la.get("kernel") in names]
    return picked or launches


def after_measure(item: pytest.Item, m, fn, kernel, compiles) -> None:
    """After triton_bench measured `fn`: read the launches of one more (untimed) call, when the
    measurement will be diagnosed (--triton-perf-explain, or a verdict other than pass)."""
    if mode(item.config) == "off" and m.verdict == Verdict.PASS:
        return
    t0 = time.perf_counter()
    rt = state.get(item.config).runtime
    sync = None
    if not rt.interpret:
        import torch  # import time: a measured run has it; an xdist controller measures nothing

        def sync():
            torch.cuda.synchronize(rt.device)
    cap = launches_mod.capture(fn, sync)
    found = [la.to_dict() for la in cap.launches]
    note = ""
    if not found and kernel is not None:
        kernels = kernel if isinstance(kernel, (list, tuple)) else [kernel]
        for k in kernels:
            cached = launches_mod.from_cache(k)
            if cached is not None:
                found.append(cached.to_dict())
        note = "fn made no Triton launch the hook saw; kernel='s last compiled kernel shown"
    tuners = compile_watch.tuners_of(kernel)
    tuners += [t for t in cap.autotuners if all(t is not u for u in tuners)]
    captures = item.stash.setdefault(CAPTURES_KEY, {})
    captures[len(perf_record.of(item).measurements) - 1] = {
        "measurement": m.label, "launches": found, "kernel_names": sorted(compile_watch.names_of(kernel)),
        "autotune": [compile_watch.autotune_record(t) for t in tuners],
        "compiles": compiles.to_dict() if compiles is not None else None,
        "errors": cap.errors, "note": note, "cost_s": time.perf_counter() - t0}
