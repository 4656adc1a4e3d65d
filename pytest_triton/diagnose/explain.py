"""--triton-perf-explain: why a kernel is slow, from what Triton compiled and how it was launched.

For each measurement: the compiled kernel of the launch that was timed (registers, spills, shared
memory, warps, stages, constexpr block sizes, grid; launches.py), its theoretical occupancy and
waves against the device's per-SM limits, the autotune record, the roofline position against
the datasheet and the measured ceilings, and checklist hints, each naming its evidence.

Two kinds of hint:
- structural, raised whatever the speed: register spills, block sizes that are not powers of
  two, an operand with no unit-stride dimension (its loads cannot coalesce), a chain of
  element-wise launches handing buffers to each other (fusion candidates), an autotune space
  whose compilation dominates the test;
- speed, raised only when the measurement is below NEAR_CEILING of its binding ceiling (a
  kernel at 90% of the copy ceiling is not slow, whatever its occupancy): register- or
  block-limited occupancy, small blocks, too few programs or a large last-wave tail, num_stages
  outside 2-4 on a loop kernel, a fixed config (no autotune) or a single one.
Pure logic on JSON-ready dicts: the CPU suite drives it with fake launches and injected timings.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass

import pytest

from .. import options, state
from ..env import dtypes
from ..env import launches as launches_mod

CAPTURES_KEY = pytest.StashKey[dict]()  # per item: measurement index -> capture record
DIAGNOSES_KEY = pytest.StashKey[list]()  # per item: the diagnoses, in measurement order
NCU_KEY = pytest.StashKey[dict]()  # per item: measurement index -> ncu result

NEAR_CEILING = 0.8  # of the binding ceiling (measured where there is one): not slow
LOW_OCCUPANCY = 0.5  # of the SM's warp slots: too few bytes in flight for a memory-bound kernel
TAIL_IDLE = 0.25  # of the SM-time of the last wave left idle by a partial wave
STAGES = (2, 4)  # num_stages range the checklist asks loop kernels to be tuned in
SMALL_TILE = 256  # elements per program below which per-program overhead dominates
COMPILE_DOMINATES_S = 5.0  # seconds of compilation worth a hint, when they are most of the tuning
SMEM_RESERVED = 1024  # bytes the driver reserves per block on sm_80 and later
REG_UNIT = 256  # registers are allocated per warp in units of 256


@dataclass
class Hint:
    code: str  # spills, occupancy, block-size, small-block, waves, tail, num-stages, autotune,
    #            single-config, compile-time, coalescing, fusion
    message: str  # what to change
    evidence: str  # what in the compiled kernel, launch or record shows it
    kernel: str | None = None


def mode(config: pytest.Config) -> str:
    return options.get(config, "triton_perf_explain") or "off"


# --- occupancy and waves -----------------------------------------------------------------------

def occupancy(launch: dict, device) -> dict | None:
    """Theoretical resident blocks and warps per SM of `launch` on `device` (a DeviceInfo), the
    resource that limits them, and the waves its grid takes."""
    warps = launch.get("num_warps")
    if not warps or device is None or not device.max_threads_per_sm:
        return None
    ws = device.warp_size or 32
    max_warps = device.max_threads_per_sm // ws
    limits = {"warps": max_warps // warps}
    if device.max_blocks_per_sm:
        limits["blocks"] = device.max_blocks_per_sm
    regs = launch.get("n_regs")
    if regs and device.regs_per_sm:
        per_warp = math.ceil(regs * ws / REG_UNIT) * REG_UNIT
        limits["registers"] = (device.regs_per_sm // per_warp) // warps
    shared = launch.get("shared") or 0
    if shared and device.smem_per_sm:
        reserved = SMEM_RESERVED if tuple(device.cc) >= (8, 0) else 0
        limits["shared memory"] = device.smem_per_sm // (shared + reserved)
    blocks = min(limits.values())
    # The limiter named is the scarcest resource; on a tie the hardware's own limits (warps,
    # blocks per SM) are named: a kernel at them is not held back by its registers.
    order = ("warps", "blocks", "registers", "shared memory")
    limiter = next(k for k in order if k in limits and limits[k] == blocks)
    out = {"blocks_per_sm": blocks, "warps_per_sm": blocks * warps, "max_warps_per_sm": max_warps,
           "occupancy": blocks * warps / max_warps, "limiter": limiter, "limits": limits}
    programs = int(launch.get("programs") or 0)
    if blocks > 0 and programs:
        slots = device.sms * blocks
        waves = programs / slots
        full = math.ceil(waves)
        out.update({"waves": waves, "slots": slots,
                    "last_wave_fill": (programs - (full - 1) * slots) / slots,
                    "tail_idle": (full - waves) / full})
    return out


# --- the roofline position ---------------------------------------------------------------------

def roofline_position(m: dict, operand_bytes: int | None = None) -> dict:
    """Arithmetic intensity, the bound, and the achieved fraction of the binding ceiling, against
    the datasheet and the measured ceilings. Without bytes=, the intensity is taken over the
    operands' sizes (each tensor passed at launch moved once: the least traffic the kernel
    needs), where the launches were read."""
    peaks = m.get("peaks") or {}
    fl, by = m.get("flops"), m.get("bytes")
    gbps = m.get("gbps")
    source = "bytes=" if by else None
    if fl and not by and operand_bytes:
        by, source = operand_bytes, "operands"
        gbps = by / m["median_ms"] / 1e6 if m.get("median_ms") else None
    out = {"intensity": fl / by if fl and by else None, "intensity_from": source if fl else None,
           "bound": None, "datasheet": None, "measured": None}
    for src in ("datasheet", "measured"):
        bw, tf = peaks.get(f"dram_gbps_{src}"), peaks.get(f"tflops_{src}")
        pos = None
        if fl and by and bw and tf:
            ridge = tf * 1e3 / bw  # FLOP/byte where the two ceilings meet
            ai = fl / by
            if ai >= ridge:
                pos = {"bound": "compute", "ridge": ridge, "ceiling": f"{tf:.1f} TFLOP/s",
                       "fraction": m["tflops"] / tf}
            else:
                pos = {"bound": "memory", "ridge": ridge, "ceiling": f"{bw:.0f} GB/s",
                       "fraction": gbps / bw}
        elif by and bw:
            pos = {"bound": "memory", "ridge": None, "ceiling": f"{bw:.0f} GB/s",
                   "fraction": m["gbps"] / bw}
        elif fl and tf:
            pos = {"bound": "compute", "ridge": None, "ceiling": f"{tf:.1f} TFLOP/s",
                   "fraction": m["tflops"] / tf}
        out[src] = pos
        if pos and out["bound"] is None:
            out["bound"] = pos["bound"]
    binding = out["measured"] or out["datasheet"]
    out["binding"] = "measured" if out["measured"] else ("datasheet" if binding else None)
    out["fraction"] = binding["fraction"] if binding else None
    return out


# --- hints -------------------------------------------------------------------------------------

def _pow2(n) -> bool:
    return isinstance(n, int) and not isinstance(n, bool) and n > 0 and n & (n - 1) == 0


def _blocks(launch: dict) -> dict:
    return {k: v for k, v in (launch.get("constexprs") or {}).items()
            if isinstance(v, int) and not isinstance(v, bool)
            and ("BLOCK" in k.upper() or "TILE" in k.upper())}


def _blocks_text(n: int) -> str:
    return f"{n} block{'' if n == 1 else 's'}/SM"


def _kb(n: float) -> str:
    return f"{n / 1024:.1f} KB" if n >= 1024 else f"{int(n)} B"


def _launch_text(launch: dict) -> str:
    parts = [f"num_warps={launch.get('num_warps')}", f"num_stages={launch.get('num_stages')}"]
    parts += [f"{k}={v}" for k, v in _blocks(launch).items()]
    return ", ".join(parts)


def _structural(launch: dict, occ: dict | None, device) -> list[Hint]:
    k = launch.get("kernel")
    hints = []
    spill = launch.get("spill_bytes")
    if spill:
        hints.append(Hint("spills", "registers spill to local memory: give each thread fewer "
                          "values (a smaller block, or more num_warps over the same block) or keep "
                          "fewer of them live at once",
                          f"{k}: {_kb(spill)} of local memory per thread ({launch.get('n_regs')} "
                          f"registers/thread, {_launch_text(launch)})", k))
    odd = {n: v for n, v in _blocks(launch).items() if not _pow2(v)}
    if odd:
        hints.append(Hint("block-size", "block sizes are powers of two (tl.arange needs them; "
                          "other sizes leave lanes masked and loads unaligned)",
                          f"{k}: " + ", ".join(f"{n}={v}" for n, v in odd.items()), k))
    for op in launch.get("operands") or []:
        if not op.get("unit_stride") and not op.get("descriptor"):
            item = dtypes.itemsize(op["dtype"])
            step = min((s for s, n in zip(op["stride"], op["shape"]) if n > 1), default=0)
            gap = f" ({step * item} bytes)" if item and step else ""
            hints.append(Hint("coalescing", "a strided operand: neighbouring threads load "
                              "addresses far apart, so no load coalesces; pass a contiguous "
                              "tensor (.contiguous()) or index along its unit-stride dimension",
                              f"{k}: {op['arg']} is {op['dtype']} {tuple(op['shape'])} with "
                              f"stride {tuple(op['stride'])}: no dimension has stride 1, "
                              f"consecutive elements are {step} elements{gap} apart", k))
    return hints


def _speed(launch: dict, occ: dict | None, device, tuned: bool, n_configs: int | None) -> list[Hint]:
    k = launch.get("kernel")
    hints = []
    warps = launch.get("num_warps") or 0
    if occ and not launch.get("has_dot") and occ["occupancy"] <= LOW_OCCUPANCY \
            and occ["limiter"] in ("registers", "blocks"):
        if occ["limiter"] == "registers":
            why = (f"{launch.get('n_regs')} registers/thread x {warps * (device.warp_size or 32)}"
                   f" threads allow {_blocks_text(occ['blocks_per_sm'])}")
            fix = "fewer registers per thread (smaller blocks per program, fewer live values)"
        else:
            why = (f"blocks of {warps} warp{'s' if warps != 1 else ''}: at most "
                   f"{occ['limits']['blocks']} resident blocks/SM x {warps}")
            fix = "more warps per program (num_warps 4-8) with a block that gives each thread work"
        hints.append(Hint("occupancy", f"low occupancy for a kernel without tensor-core work: "
                          f"too few loads in flight to hide memory latency; {fix}",
                          f"{k}: {why} = {occ['warps_per_sm']} of {occ['max_warps_per_sm']} warps "
                          f"({100 * occ['occupancy']:.0f}%), limited by {occ['limiter']}", k))
    blocks = _blocks(launch)
    if blocks:
        tile = math.prod(blocks.values())
        threads = warps * (device.warp_size if device else 32) if warps else 0
        if tile < max(SMALL_TILE, threads):
            idle = f"; {threads - tile} of {threads} threads have no element" \
                if threads and tile < threads else ""
            hints.append(Hint("small-block", "blocks are too small: each program does little work "
                              "for its launch and index overhead; raise the block size (and autotune "
                              "it) so each thread handles several elements",
                              f"{k}: {' x '.join(f'{n}={v}' for n, v in blocks.items())} = {tile} "
                              f"elements per program{idle}", k))
    if occ and "waves" in occ and device is not None:
        programs = launch.get("programs") or 0
        if programs < device.sms:
            hints.append(Hint("waves", "fewer programs than SMs: most of the GPU is idle; split "
                              "the work into more programs (smaller blocks, or split-K/split-row)",
                              f"{k}: grid {tuple(launch['grid'])} = {programs} programs on "
                              f"{device.sms} SMs ({device.sms - programs} SMs idle)", k))
        elif occ["waves"] > 1 and occ["tail_idle"] >= TAIL_IDLE:
            hints.append(Hint("tail", "a large last-wave tail: the final wave runs partly empty; "
                              "pick a block size whose program count fills whole waves, or a "
                              "persistent grid of SMs x blocks/SM programs",
                              f"{k}: {programs} programs / ({device.sms} SMs x "
                              f"{occ['blocks_per_sm']} blocks/SM) = {occ['waves']:.2f} waves, the "
                              f"last {100 * occ['last_wave_fill']:.0f}% full: "
                              f"{100 * occ['tail_idle']:.0f}% of the SM-time idle", k))
    stages = launch.get("num_stages")
    if launch.get("has_loop") and stages is not None and not STAGES[0] <= stages <= STAGES[1]:
        hints.append(Hint("num-stages", "num_stages is tuned in 2-4 for loop kernels (software "
                          "pipelining of the loop's loads); autotune it over that range",
                          f"{k}: a loop kernel launched with num_stages={stages}", k))
    if not tuned:
        hints.append(Hint("autotune", "the kernel is not autotuned: its launch config is fixed; "
                          "autotune block sizes, num_warps and num_stages over a small named space "
                          "(@triton.autotune, and pass kernel= to triton_bench)",
                          f"{k}: no Autotuner chose this launch ({_launch_text(launch)})", k))
    elif n_configs == 1:
        hints.append(Hint("single-config", "the autotune space has a single config: nothing is "
                          "chosen; give it alternatives (block sizes, num_warps, num_stages)",
                          f"{k}: 1 config ({_launch_text(launch)})", k))
    return hints


def _fusion(launch_list: list[dict]) -> list[Hint]:
    """Consecutive element-wise launches of one call of fn that pass a buffer from one to the
    next: a chain a single kernel could do, without writing and re-reading the buffers."""
    hints = []
    chain: list[dict] = []
    shared_bufs: dict[int, int] = {}

    def close():
        if len(chain) >= 2:
            names = " -> ".join(c["kernel"] for c in chain)
            moved = sum(op["nbytes"] for c in chain for op in c.get("operands") or [])
            unique = {op["data_ptr"]: op["nbytes"] for c in chain for op in c.get("operands") or []}
            once = sum(unique.values())
            n = len(shared_bufs)
            hints.append(Hint("fusion", "element-wise kernels run one after another on each other's "
                              "buffers: fuse them into one kernel, which reads the inputs once, "
                              "keeps the intermediates in registers and writes the output once",
                              f"{len(chain)} element-wise launches in one call of fn ({names}) "
                              f"pass {n} buffer{'s' if n != 1 else ''} between them: they move "
                              f"{moved / 1e6:.1f} MB, {(moved - once) / 1e6:.1f} MB more than "
                              f"touching each of their {len(unique)} buffers once "
                              f"({once / 1e6:.1f} MB)", chain[0]["kernel"]))
        chain.clear()
        shared_bufs.clear()

    for launch in launch_list:
        if not launch.get("elementwise"):
            close()
            continue
        if chain:
            before = {op["data_ptr"]: op["nbytes"] for c in chain for op in c.get("operands") or []}
            linked = {op["data_ptr"]: op["nbytes"] for op in launch.get("operands") or []
                      if op["data_ptr"] in before}
            if not linked:
                close()
            else:
                shared_bufs.update(linked)
        chain.append(launch)
    close()
    return hints


def _compile_hint(record: dict) -> list[Hint]:
    comp = record.get("compiles") or {}
    tunes = [t for t in record.get("autotune") or [] if (t.get("configs") or 0) > 1]
    if not tunes or comp.get("count", 0) < 2:
        return []
    seconds, wall = comp.get("seconds", 0.0), comp.get("wall_s", 0.0)
    bench = sum(t.get("bench_s") or 0.0 for t in tunes)
    whole = bench or wall
    if seconds >= COMPILE_DOMINATES_S and whole and seconds >= 0.5 * whole:
        t = tunes[0]
        return [Hint("compile-time", "compiling the autotune space costs more than timing it: "
                     "prune it (prune_configs_by, fewer configs per key) or keep choices across "
                     "runs (TRITON_CACHE_AUTOTUNING=1)",
                     f"{t['kernel']}: {comp['count']} compilations took {seconds:.1f} s of "
                     f"{whole:.1f} s of {'autotuning' if bench else 'the measurement'} "
                     f"({t['configs']} configs)", t["kernel"])]
    return []


# --- one measurement's diagnosis -----------------------------------------------------------------

def _timed(record: dict) -> list[dict]:
    """The launches that were timed: those of kernel= where it names @triton.jit functions, else
    every launch fn made."""
    launches = record.get("launches") or []
    names = set(record.get("kernel_names") or ())
    picked = [la for la in launches if la.get("kernel") in names]
    return picked or launches


def _operand_bytes(launch_list: list[dict]) -> int | None:
    sizes = {op["data_ptr"]: op["nbytes"] for la in launch_list for op in la.get("operands") or []}
    return sum(sizes.values()) or None


def _distinct(launch_list: list[dict]) -> list[tuple[dict, int]]:
    out: list[tuple[dict, int]] = []
    for la in launch_list:
        key = {k: v for k, v in la.items() if k != "operands"}
        for i, (seen, n) in enumerate(out):
            if {k: v for k, v in seen.items() if k != "operands"} == key:
                out[i] = (seen, n + 1)
                break
        else:
            out.append((la, 1))
    return out


def diagnose(m: dict, record: dict | None, device, ncu: dict | None = None) -> dict:
    """The diagnosis of measurement `m` (Measurement.to_dict()), from its capture record."""
    record = record or {}
    timed = _timed(record)
    pos = roofline_position(m, _operand_bytes(timed))
    slow = pos["fraction"] is None or pos["fraction"] < NEAR_CEILING
    tuners = record.get("autotune") or []
    tuned = bool(tuners)
    n_configs = max((t.get("configs") or 0 for t in tuners), default=None) if tuners else None
    kernels = []
    hints: list[Hint] = []
    for launch, count in _distinct(timed):
        occ = occupancy(launch, device)
        kernels.append({**launch, "launches": count, "occupancy": occ})
        hints += _structural(launch, occ, device)
        if slow:
            hints += _speed(launch, occ, device, tuned or bool(launch.get("autotuner")), n_configs)
    hints += _fusion(record.get("launches") or [])
    hints += _compile_hint(record)
    unique: list[Hint] = []
    for h in hints:  # one hint of a kind; the same advice for several kernels lists each one's evidence
        same = next((u for u in unique if u.code == h.code and u.message == h.message), None)
        if same is None:
            unique.append(Hint(h.code, h.message, h.evidence, h.kernel))
        elif h.evidence not in same.evidence:
            same.evidence += "; " + h.evidence
    return {"nodeid": m.get("nodeid"), "name": m.get("name"), "verdict": m.get("verdict"),
            "roofline": pos, "near_ceiling": not slow, "kernels": kernels,
            "all_launches": len(record.get("launches") or []), "autotune": tuners,
            "compiles": record.get("compiles"), "errors": record.get("errors") or [],
            "note": record.get("note") or "", "ncu": ncu, "cost_s": record.get("cost_s", 0.0),
            "hints": [asdict(h) for h in unique]}


# --- text --------------------------------------------------------------------------------------

def _frac_text(pos: dict, src: str) -> str:
    p = pos.get(src)
    if not p:
        return f"{src}: none"
    return f"{100 * p['fraction']:.1f}% of {src} {p['ceiling']}"


def render(d: dict) -> str:
    """The diagnosis as the report section shows it."""
    label = d["nodeid"].split("::", 1)[-1] + (f" [{d['name']}]" if d.get("name") else "")
    lines = [f"{label}: {d['verdict']}"]
    pos = d["roofline"]
    if pos.get("bound"):
        over = " over the operands' sizes" if pos.get("intensity_from") == "operands" else ""
        ai = f"{pos['intensity']:.3g} FLOP/byte{over}" if pos.get("intensity") else (
            "no flops= given" if pos["bound"] == "memory" else "no bytes= given")
        ridge = (pos.get("measured") or pos.get("datasheet") or {}).get("ridge")
        ridge_text = f", ridge {ridge:.3g}" if ridge else ""
        lines.append(f"  roofline: {pos['bound']}-bound ({ai}{ridge_text}): "
                     f"{_frac_text(pos, 'datasheet')}, {_frac_text(pos, 'measured')}"
                     + ("; near its ceiling: speed hints not raised" if d.get("near_ceiling") else ""))
    if not d["kernels"]:
        lines.append("  kernel: no Triton launch seen in fn (" + (d.get("note") or
                     "it launched none, or replayed a CUDA graph") + ")")
    for k in d["kernels"][:6]:
        grid = tuple(k.get("grid") or ())
        times = f" x{k['launches']}" if k.get("launches", 1) > 1 else ""
        if k.get("source") == "hook only":  # a Triton whose launch frames could not be read
            lines.append(f"  kernel {k['kernel']}{times}: launched (its compiled metadata could "
                         "not be read from this Triton's launch path)")
            continue
        lines.append(f"  kernel {k['kernel']}{times}: grid {grid} = {k.get('programs')} programs; "
                     f"num_warps {k.get('num_warps')}, num_stages {k.get('num_stages')}, "
                     f"{k.get('n_regs') if k.get('n_regs') is not None else '?'} registers/thread, spills "
                     f"{_kb(k['spill_bytes']) if k.get('spill_bytes') is not None else '?'}, "
                     f"shared {_kb(k['shared']) if k.get('shared') is not None else '?'}"
                     + (f" [{k['source']}]" if k.get("source") not in (None, "launch hook") else ""))
        if k.get("constexprs"):
            lines.append("    constexprs: " + ", ".join(f"{n}={v}" for n, v in k["constexprs"].items()))
        occ = k.get("occupancy")
        if occ:
            waves = ""
            if "waves" in occ and occ["waves"] < 1:
                waves = (f"; {k.get('programs')} programs for {occ['slots']} slots (SMs x "
                         f"blocks/SM): {100 * occ['waves']:.0f}% of one wave")
            elif "waves" in occ:
                waves = (f"; {occ['waves']:.2f} waves of {occ['slots']} slots, last "
                         f"{100 * occ['last_wave_fill']:.0f}% full")
            lines.append(f"    occupancy: {_blocks_text(occ['blocks_per_sm'])} = {occ['warps_per_sm']}"
                         f" of {occ['max_warps_per_sm']} warps ({100 * occ['occupancy']:.0f}%), "
                         f"limited by {occ['limiter']}{waves}")
        else:
            lines.append("    occupancy: not computed (the device's per-SM limits are unknown)")
    if len(d["kernels"]) > 6:
        lines.append(f"  ... {len(d['kernels']) - 6} more kernels")
    for t in d["autotune"]:
        head = (f"  autotune {t['kernel']} ({t['kind']}): {t['configs']} configs"
                + (f", tuned in {t['bench_s']:.2f} s" if t.get("bench_s") else "")
                + f"; chosen: {t['chosen']}")
        lines.append(head)
        for row in t["timings"][:8]:
            ms = f"{row['ms']:.4f} ms" if row["ms"] is not None else "failed"
            lines.append(f"    {'*' if row['chosen'] else ' '} {ms}  {row['config']}")
        if len(t["timings"]) > 8:
            lines.append(f"      ... {len(t['timings']) - 8} more")
        if not t["timings"]:
            lines.append("    (no timings: the choice was not timed in this process)")
    comp = d.get("compiles") or {}
    if comp.get("count"):
        lines.append(f"  compiled: {comp['count']} kernels in {comp['seconds']:.2f} s during the "
                     f"measurement ({comp['wall_s']:.2f} s)")
    ncu = d.get("ncu")
    if ncu:
        lines.extend("  " + line for line in ncu_lines(ncu))
    for e in d.get("errors") or []:
        lines.append(f"  note: {e}")
    if d["hints"]:
        lines.append("  hints:")
        for h in d["hints"]:
            lines.append(f"    [{h['code']}] {h['message']}")
            lines.append(f"        evidence: {h['evidence']}")
    else:
        lines.append("  hints: none")
    return "\n".join(lines)


def ncu_lines(ncu: dict) -> list[str]:
    if ncu.get("unavailable"):
        return [f"ncu: not run: {ncu['unavailable']}"]
    out = []
    for k in ncu.get("kernels") or []:
        parts = [f"{label} {k[key]:.1f}%" for key, label in (
            ("dram_pct", "DRAM"), ("l2_pct", "L2"), ("sm_pct", "SM"),
            ("achieved_occupancy_pct", "achieved occupancy")) if k.get(key) is not None]
        if k.get("theoretical_occupancy_pct") is not None:
            parts.append(f"theoretical {k['theoretical_occupancy_pct']:.1f}%")
        stall = f"; dominant stall: {k['stall']} ({k['stall_ratio']:.2g} cycles/instr)" \
            if k.get("stall") else ""
        dur = f" {k['duration_us']:.1f} us" if k.get("duration_us") is not None else ""
        out.append(f"ncu {k['name']}{dur}: " + ", ".join(parts) + stall)
    if not out:
        out.append("ncu: profiled no kernel" + (f" ({ncu['note']})" if ncu.get("note") else ""))
    return out


# --- the test's life: capture after measuring, diagnose at the report -----------------------------

def after_measure(item: pytest.Item, m, fn, kernel, compiles, *, passed: bool) -> None:
    """After triton_bench measured `fn`: read the launches of one more (untimed) call, when the
    measurement will be diagnosed (--triton-perf-explain, or a verdict other than pass)."""
    if mode(item.config) == "off" and passed:
        return
    t0 = time.perf_counter()
    rt = state.get(item.config).runtime
    sync = None
    if not rt.interpret:
        import torch

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
    tuners = launches_mod.tuners_of(kernel)
    tuners += [t for t in cap.autotuners if all(t is not u for u in tuners)]
    from ..perf.session import MEASUREMENTS_KEY

    captures = item.stash.setdefault(CAPTURES_KEY, {})
    captures[len(item.stash[MEASUREMENTS_KEY]) - 1] = {
        "measurement": m.label, "launches": found, "kernel_names": sorted(launches_mod.names_of(kernel)),
        "autotune": [launches_mod.autotune_record(t) for t in tuners],
        "compiles": compiles.to_dict() if compiles is not None else None,
        "errors": cap.errors, "note": note, "cost_s": time.perf_counter() - t0}


def diagnoses(item: pytest.Item, payload: dict) -> list[dict]:
    """Diagnose the measurements of `payload` (perf.report_payload) that were captured."""
    from ..perf import session as perf

    device = perf.session(item.config).device
    captures = item.stash.get(CAPTURES_KEY, {})
    ncu = item.stash.get(NCU_KEY, {})
    out = []
    for i, m in enumerate(payload["measurements"]):
        if i in captures:
            out.append(diagnose(m, captures[i], device, ncu.get(i)))
        else:
            out.append(None)
    return out


def _wanted(item: pytest.Item, payload: dict, report: pytest.TestReport) -> bool:
    if mode(item.config) != "off":
        return True
    bad = ("fail", "inconclusive", "invalid")
    geo = payload.get("geomean") or {}
    return any(m["verdict"] in bad for m in payload["measurements"]) or geo.get("verdict") in bad


def configure(config: pytest.Config) -> None:
    """Check the options of this capability at start-up (the plot's matplotlib, among them);
    in an ncu child, take over timing."""
    from ..report import plot
    from . import ncu

    given = [opt for opt, on in (("--triton-perf-explain", mode(config) != "off"),
                                 ("--triton-perf-profile", options.get(config, "triton_perf_profile")),
                                 ("--triton-perf-plot", plot.path(config)),
                                 ("--triton-perf-json", options.get(config, "triton_perf_json")))
             if on]
    if given and not state.get(config).perf and not hasattr(config, "workerinput"):
        config.issue_config_time_warning(pytest.PytestConfigWarning(
            f"pytest-triton: {' and '.join(given)} {'act' if len(given) > 1 else 'acts'} on perf "
            "measurements, and there are none without --triton-perf: add --triton-perf"),
            stacklevel=2)
    plot.configure(config)
    ncu.configure(config)


def finish_call(item: pytest.Item) -> None:
    """After the test's body, before its verdict: with =ncu, profile its timed kernels."""
    captures = item.stash.get(CAPTURES_KEY, None)
    if mode(item.config) == "ncu" and captures:
        from . import ncu

        item.stash[NCU_KEY] = ncu.profile_item(item, captures)


def annotate_report(item: pytest.Item, report: pytest.TestReport) -> None:
    """On the call report of a perf test: the diagnosis as a report section (shown with its
    failure, or with -rP), in the payload (the JSON file) and as JUnit properties."""
    from . import profile

    profile.annotate_report(item, report)
    payload = getattr(report, "triton_perf", None)
    if report.when != "call" or not payload or not _wanted(item, payload, report):
        return
    diags = diagnoses(item, payload)
    texts = []
    for m, d in zip(payload["measurements"], diags):
        if d is None:
            continue
        m["explain"] = d
        texts.append(render(d))
        prefix = f"triton[{m['name']}]." if m.get("name") else "triton."
        item.user_properties.append((prefix + "explain.hints",
                                     ",".join(h["code"] for h in d["hints"]) or "none"))
        for k in d["kernels"][:1]:
            for key in ("n_regs", "spill_bytes", "num_warps", "num_stages", "shared", "programs"):
                if k.get(key) is not None:
                    item.user_properties.append((prefix + f"explain.{key}", str(k[key])))
            if k.get("occupancy"):
                item.user_properties.append((prefix + "explain.occupancy",
                                             f"{k['occupancy']['occupancy']:.3g}"))
        for k in (d.get("ncu") or {}).get("kernels") or []:
            for key in ("dram_pct", "l2_pct", "sm_pct", "achieved_occupancy_pct"):
                if k.get(key) is not None:
                    item.user_properties.append((prefix + f"ncu.{key}", f"{k[key]:.4g}"))
            break
    if texts:
        report.sections.append(("pytest-triton explain", "\n".join(texts)))


def terminal_summary(tr, config: pytest.Config) -> None:
    """Every diagnosed measurement's hints, one line each; where the plot went."""
    from ..perf import session as perf
    from ..report import plot

    ps = perf.session(config)
    if ps is None or not ps.controller:
        return
    results = ps.results
    diagnosed = [(r, m["explain"]) for r in results for m in r["measurements"] if m.get("explain")]
    plot.terminal_summary(tr, config)
    if mode(config) == "off" and not diagnosed:
        return
    spent_s = sum(d.get("cost_s", 0.0) for _, d in diagnosed)
    tr.section("pytest-triton explain")
    for _, d in diagnosed:
        label = d["nodeid"] + (f" [{d['name']}]" if d.get("name") else "")
        frac = d["roofline"].get("fraction")
        at = f" ({100 * frac:.0f}% of {d['roofline']['binding']} ceiling)" if frac is not None else ""
        codes = ", ".join(h["code"] for h in d["hints"]) or "no hints"
        tr.write_line(f"{label}: {d['verdict']}{at}: {codes}")
    tr.write_line(f"{len(diagnosed)} measurement{'s' if len(diagnosed) != 1 else ''} diagnosed; "
                  f"reading their launches took "
                  f"{spent_s:.2f} s (full diagnoses: the 'pytest-triton explain' section of each "
                  "test, shown with its failure or with -rP)")


def session_finish(config: pytest.Config) -> None:
    from ..report import plot

    plot.session_finish(config)
