"""The explain diagnosis's hints: checklist rules, each naming its evidence in the compiled kernel,
the launch or the autotune record. Structural hints hold whatever the speed; speed hints are
offered only for a measurement below its ceiling (explain.diagnose decides)."""

from __future__ import annotations

import math

from ..env import dtypes
from ..perf.diagnosis import Hint

LOW_OCCUPANCY = 0.5  # of the SM's warp slots: too few bytes in flight for a memory-bound kernel
TAIL_IDLE = 0.25  # of the SM-time of the last wave left idle by a partial wave
STAGES = (2, 4)  # num_stages range the checklist asks loop kernels to be tuned in
SMALL_TILE = 256  # elements per program below which per-program overhead dominates
COMPILE_DOMINATES_S = 5.0  # seconds of compilation worth a hint, when they are most of the tuning



def _pow2(n) -> bool:
    return isinstance(n, int) and not isinstance(n, bool) and n > 0 and n & (n - 1) == 0


def _blocks(launch: dict) -> dict:
    return {k: v for k, v in (launch.get("constexprs") or {}).items()
            if isinstance(v, int) and not isinstance(v, bool)
            and ("BLOCK" in k.upper() or "TILE" in k.upper())}


def blocks_text(n: int) -> str:
    return f"{n} block{'' if n == 1 else 's'}/SM"


def kb(n: float) -> str:
    return f"{n / 1024:.1f} KB" if n >= 1024 else f"{int(n)} B"


def _launch_text(launch: dict) -> str:
    parts = [f"num_warps={launch.get('num_warps')}", f"num_stages={launch.get('num_stages')}"]
    parts += [f"{k}={v}" for k, v in _blocks(launch).items()]
    return ", ".join(parts)


def structural(launch: dict, occ: dict | None, device) -> list[Hint]:
    k = launch.get("kernel")
    hints = []
    spill = launch.get("spill_bytes")
    if spill:
        hints.append(Hint("spills", "registers spill to local memory: give each thread fewer "
                          "values (a smaller block, or more num_warps over the same block) or keep "
                          "fewer of them live at once",
                          f"{k}: {kb(spill)} of local memory per thread ({launch.get('n_regs')} "
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


def speed(launch: dict, occ: dict | None, device, tuned: bool, n_configs: int | None) -> list[Hint]:
    k = launch.get("kernel")
    hints = []
    warps = launch.get("num_warps") or 0
    if occ and not launch.get("has_dot") and occ["occupancy"] <= LOW_OCCUPANCY \
            and occ["limiter"] in ("registers", "blocks"):
        if occ["limiter"] == "registers":
            why = (f"{launch.get('n_regs')} registers/thread x {warps * (device.warp_size or 32)}"
                   f" threads allow {blocks_text(occ['blocks_per_sm'])}")
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


def fusion(launch_list: list[dict]) -> list[Hint]:
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


def compile_time(record: dict) -> list[Hint]:
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
