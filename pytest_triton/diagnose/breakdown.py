"""The timed call taken apart: what one call of a perf test's `fn` did on the GPU and the host,
for timed code the user did not write (a library's op that launches torch kernels, syncs, and
allocates around its Triton kernel).

After triton_bench measured `fn` (its verdict already taken, nothing timed here), `fn` is called
once more under torch.profiler (CPU and CUDA activity, allocations), behind a spin kernel as the
timed samples are (timing.py), so the host runs ahead of the GPU as it did there and any gap
between the call's kernels is one the host forced. analyze() reads the profiler's trace events
(the Chrome trace format: kernel, gpu_memcpy, gpu_memset, cuda_runtime, cuda_driver, cpu_op,
[memory]) and gives, per call: every GPU kernel, Triton or not, with its share of GPU time and
the torch op that launched it; copies and memsets; host synchronisations and the op that made
each; allocations; the GPU's idle time between the call's first and last activity. assess()
turns that into hints (host-sync, host-bound, fusion, allocations), named before the kernel's
own hints when they dominate the call, and into the noise line. Pure logic on trace-event dicts
(the CPU suite feeds recorded events); only profile_call() needs a GPU.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
import time

import pytest

from .. import options, state
from ..perf import record, timing
from ..perf.record import Verdict
from .hints import Hint

RANGE = "pytest-triton timed call"
KEY = pytest.StashKey[dict]()  # per item: measurement index -> analyze() result (or error)

IDLE_DOMINATES = 0.2  # of the call's GPU span idle: the host, not the GPU, sets the time
FUSE_LARGEST_BELOW = 0.75  # several kernels, none this much of the GPU time: fusion pays
FUSION_FIRST_BELOW = 0.5  # ... and none half of it: fusion is the first thing to do
NOISY = 0.02  # interquartile range over median: a noise line names its likely cause above this
_GPU = ("kernel", "gpu_memcpy", "gpu_memset")
_API = ("cuda_runtime", "cuda_driver")
SYNC_APIS = {"cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventSynchronize", "cudaMemcpy",
             "cudaMemcpy2D", "cudaMemcpyFromSymbol", "cudaFree", "cuCtxSynchronize",
             "cuStreamSynchronize", "cuEventSynchronize", "cuMemcpyDtoH", "cuMemcpyDtoH_v2",
             "cuMemFree", "cuMemFree_v2"}
MALLOC_APIS = {"cudaMalloc", "cudaMallocAsync", "cuMemAlloc", "cuMemAlloc_v2"}
GLOSS = {"aten::item": ".item()", "aten::_local_scalar_dense": ".item()",
         "aten::is_nonzero": "bool(tensor)", "aten::nonzero": "torch.nonzero",
         "aten::to": ".to()/.cpu()", "aten::_to_copy": ".to()/.cpu()", "aten::cpu": ".cpu()",
         "aten::copy_": "a copy to the host", "aten::masked_select": "masked_select",
         "aten::unique": "torch.unique", "aten::_unique2": "torch.unique",
         "aten::repeat_interleave": "repeat_interleave"}


# --- the trace ----------------------------------------------------------------------------------

def short_name(kernel: str) -> str:
    """A CUDA kernel's name without return type, namespaces, template and parameters."""
    name = re.sub(r"^void\s+", "", kernel.strip()).replace("(anonymous namespace)", "anon")
    depth, cut = 0, len(name)
    for i, ch in enumerate(name):  # the first '<' or '(' outside the name itself
        if ch in "<(" and depth == 0:
            cut = i
            break
    name = name[:cut]
    return name.rsplit("::", 1)[-1] or kernel


def _inside(e: dict, start: float, end: float) -> bool:
    return e["ts"] >= start - 0.01 and e["ts"] + e.get("dur", 0.0) <= end + 0.01


def _outermost(e: dict, ops: list[dict]) -> str | None:
    """The outermost torch op of the call that encloses event `e` in time (the call runs on one
    thread; CUPTI's and the profiler's thread ids need not agree)."""
    best = None
    for op in ops:
        if _inside(e, op["ts"], op["ts"] + op["dur"]):
            if best is None or op["dur"] > best["dur"]:
                best = op
    return best["name"] if best else None


def _corr(e: dict):
    return (e.get("args") or {}).get("correlation")


def _union(intervals: list[tuple[float, float]]) -> float:
    total, end = 0.0, None
    for s, e in sorted(intervals):
        if end is None or s > end:
            total += e - s
            end = e
        elif e > end:
            total += e - end
            end = e
    return total


def analyze(events: list[dict], range_name: str = RANGE) -> dict:
    """One profiled call, from its trace events: kernels, copies, syncs, allocations, idle time."""
    ranges = [e for e in events if e.get("ph") == "X" and e.get("name") == range_name
              and not str(e.get("cat", "")).startswith("gpu")]
    if not ranges:
        return {"error": f"the profiler recorded no '{range_name}' range"}
    call = ranges[0]
    start, end = call["ts"], call["ts"] + call["dur"]
    spans = [e for e in events if e.get("ph") == "X" and "dur" in e and "ts" in e]
    ops = [e for e in spans if e.get("cat") == "cpu_op" and _inside(e, start, end)]
    apis = [e for e in spans if e.get("cat") in _API and _inside(e, start, end)]
    mine = {_corr(e) for e in apis} - {None}
    known = {_corr(e) for e in spans if e.get("cat") in _API} - {None}
    launched_by = {_corr(e): _outermost(e, ops) for e in apis}
    # The call's GPU work: launched from inside the range (the spin kernel before it is not), or
    # with no launch recorded at all and started after the range opened.
    gpu = [e for e in spans if e.get("cat") in _GPU and
           (_corr(e) in mine or (_corr(e) not in known and e["ts"] >= start))]
    kernels: dict[str, dict] = {}
    copies: dict[str, dict] = {}
    for e in gpu:
        if e["cat"] == "kernel":
            op = launched_by.get(_corr(e))
            name = f"{op} ({short_name(e['name'])})" if op else short_name(e["name"])
            into = kernels
        else:
            name, into = e["name"], copies
        row = into.setdefault(name, {"name": name, "count": 0, "ms": 0.0})
        row["count"] += 1
        row["ms"] += e["dur"] / 1e3
    busy = _union([(e["ts"], e["ts"] + e["dur"]) for e in gpu]) / 1e3
    span = (max(e["ts"] + e["dur"] for e in gpu) - min(e["ts"] for e in gpu)) / 1e3 if gpu else 0.0
    for row in kernels.values():
        row["share"] = row["ms"] / busy if busy else 0.0
    longest = max((e["dur"] for e in gpu if e["cat"] == "kernel"), default=0.0) / 1e3
    syncs = []
    for e in apis:
        if e["name"] in SYNC_APIS:
            op = _outermost(e, ops)
            what = GLOSS.get(op or "", op) or ("torch.cuda.synchronize()" if "Device" in e["name"]
                                               or "Ctx" in e["name"] else e["name"])
            syncs.append({"api": e["name"], "op": op, "what": what})
    allocs = {"cuda": 0, "cuda_bytes": 0, "cpu": 0, "cpu_bytes": 0,
              "cuda_malloc": sum(1 for e in apis if e["name"] in MALLOC_APIS)}
    for e in events:
        args = e.get("args") or {}
        if e.get("name") == "[memory]" and start <= e.get("ts", -1) <= end and args.get("Bytes", 0) > 0:
            kind = "cuda" if args.get("Device Type") == 1 else "cpu"
            allocs[kind] += 1
            allocs[f"{kind}_bytes"] += args["Bytes"]
    return {"host_ms": call["dur"] / 1e3, "gpu_busy_ms": busy, "gpu_span_ms": span,
            "idle_frac": 1 - busy / span if span > 0 else 0.0,
            "launches": sum(r["count"] for r in kernels.values()),
            "largest_launch_share": longest / busy if busy else 0.0,
            "kernels": sorted(kernels.values(), key=lambda r: -r["ms"]),
            "copies": sorted(copies.values(), key=lambda r: -r["ms"]), "syncs": syncs,
            "allocations": allocs}


# --- what it means ---------------------------------------------------------------------------------

def _n(count: int, what: str) -> str:
    return f"{count} {what}{'' if count == 1 else 's'}"


def _syncs_text(syncs: list[dict]) -> str:
    named: dict[str, int] = {}
    for s in syncs:
        label = s["what"] + (f" ({s['op']})" if s["op"] and s["what"] != s["op"] else "")
        named[label] = named.get(label, 0) + 1
    return ", ".join(f"{k} x{v}" if v > 1 else k for k, v in named.items())


def assess(call: dict | None, noise: float | None, triton_fusion: bool) -> tuple[dict | None, list, list]:
    """(the breakdown with the measurement's noise, the hints named first, the hints named last)."""
    if not call:
        return None, [], []
    call = {**call, "noise": noise}
    if call.get("error"):
        return call, [], []
    first, last = [], []
    idle, syncs = call["idle_frac"], call["syncs"]
    host_bound = idle >= IDLE_DOMINATES
    per_call = f"{_n(len(syncs), 'host sync')} per call ({_syncs_text(syncs)})" if syncs else ""
    if host_bound:
        first.append(Hint("host-bound", f"host-bound: the GPU was idle {100 * idle:.0f}% of the call"
                          + (f"; {per_call}" if syncs else "") + ": between its kernels the GPU "
                          "waits for the host; remove what makes the host wait, or capture the "
                          "call in a CUDA graph",
                          f"GPU busy {call['gpu_busy_ms']:.4g} ms of the {call['gpu_span_ms']:.4g} ms "
                          f"from the call's first GPU activity to its last"))
    if syncs:
        (first if host_bound else last).append(Hint(
            "host-sync", f"{per_call}: each makes the host wait for the GPU to finish, and the GPU "
            "idles while the host wakes and launches the rest (the timing varies with it); keep "
            "the value on the GPU (a tensor argument, a mask instead of a branch) or read it "
            "outside the timed call",
            f"{', '.join(s['api'] for s in syncs)} inside the timed call"))
    kernels = call["kernels"]
    largest = call["largest_launch_share"]  # of one launch: the same kernel launched thrice fuses too
    if call["launches"] >= 2 and largest < FUSE_LARGEST_BELOW and not triton_fusion:
        shares = ", ".join(f"{k['name']} {100 * k['share']:.0f}%" for k in kernels[:4])
        (first if largest < FUSION_FIRST_BELOW else last).append(Hint(
            "fusion", f"{call['launches']} kernels per call: fuse them (each writes its result to "
            "memory for the next to read back; one kernel keeps the intermediates in registers)",
            f"GPU time per call: {shares}" + (" ..." if len(kernels) > 4 else "")))
    if call["allocations"]["cuda_malloc"]:
        last.append(Hint("allocations", "cudaMalloc inside the timed call: the caching allocator "
                         "grew (it synchronises and takes milliseconds); allocate the outputs "
                         "once, outside the timed call",
                         f"{_n(call['allocations']['cuda_malloc'], 'cudaMalloc call')} per call"))
    return call, first, last


def lines(call: dict | None) -> list[str]:
    """The breakdown's lines in the explain section."""
    if not call:
        return []
    if call.get("error"):
        return [f"  timed call: not taken apart ({call['error']})"]
    a = call["allocations"]
    mem = ", ".join(f"{_n(a[k], k.upper() + ' allocation')} ({a[k + '_bytes'] / 1e6:.3g} MB)"
                    for k in ("cuda", "cpu") if a[k])
    syncs = f" ({_syncs_text(call['syncs'])})" if call["syncs"] else ""
    out = [f"  timed call (profiled once, after timing): {_n(call['launches'], 'kernel')}, GPU busy "
           f"{call['gpu_busy_ms']:.4g} ms of {call['gpu_span_ms']:.4g} ms (idle "
           f"{100 * call['idle_frac']:.0f}%), host {call['host_ms']:.4g} ms; "
           f"{_n(len(call['syncs']), 'host sync')}{syncs}; {mem or 'no allocation'}"]
    for k in call["kernels"][:6]:
        times = f" x{k['count']}" if k["count"] > 1 else ""
        out.append(f"    {100 * k['share']:3.0f}%  {k['ms']:.4g} ms  {k['name']}{times}")
    if len(call["kernels"]) > 6:
        out.append(f"    ... {len(call['kernels']) - 6} more kernels")
    for c in call["copies"][:3]:
        out.append(f"    copy  {c['ms']:.4g} ms  {c['name']}" + (f" x{c['count']}" if c["count"] > 1 else ""))
    noise = call.get("noise")
    if noise is not None:
        cause = ""
        if noise >= NOISY and call["syncs"]:
            cause = (f"; likely cause: {_n(len(call['syncs']), 'host sync')} per call "
                     f"({_syncs_text(call['syncs'])}): each sample waits for the host to wake")
        out.append(f"  noise: {100 * noise:.1f}% (interquartile range over median){cause}")
    return out


# --- the test's life --------------------------------------------------------------------------------

def profile_call(config: pytest.Config, fn) -> list[dict] | None:
    """Trace events of one call of fn on the GPU (None under the interpreter: no GPU to trace)."""
    rt = state.get(config).runtime
    if rt.interpret:
        return None
    import torch  # import time: only a measured run profiles, and an xdist controller measures none
    from torch.profiler import ProfilerActivity, profile, record_function

    torch.cuda.synchronize(rt.device)
    t0 = time.perf_counter()
    fn()  # warm, and how long the host takes to issue one call
    host_ms = (time.perf_counter() - t0) * 1e3
    torch.cuda.synchronize(rt.device)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], profile_memory=True) as prof:
        timing.keep_busy(rt.device, min(200.0, 3 * host_ms + 2.0))  # the host runs ahead, as timed
        with record_function(RANGE):
            fn()
        torch.cuda.synchronize(rt.device)
    with tempfile.TemporaryDirectory(prefix="pytest-triton-breakdown-") as tmp:
        path = os.path.join(tmp, "trace.json")
        prof.export_chrome_trace(path)
        with open(path) as f:
            return json.load(f).get("traceEvents") or []


def after_measure(item: pytest.Item, m, fn) -> None:
    """Take one call of the measured fn apart, when the measurement will be diagnosed."""
    explain_mode = options.get(item.config, "triton_perf_explain") or "off"
    if (explain_mode == "off" and m.verdict == Verdict.PASS) or m.timings.method == "ncu-child":
        return
    try:
        events = profile_call(item.config, fn)
        if events is None:
            return
        call = analyze(events)
    except Exception as exc:  # noqa: BLE001 - a diagnosis must not fail the test
        call = {"error": f"{type(exc).__name__}: {exc}"}
    item.stash.setdefault(KEY, {})[len(record.of(item).measurements) - 1] = call
