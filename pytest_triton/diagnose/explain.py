"""--triton-perf-explain: why a kernel is slow, from what Triton compiled and how it was launched.

For each measurement: the compiled kernel of the launch that was timed (registers, spills, shared
memory, warps, stages, constexpr block sizes, grid; launch_hooks.py), its theoretical occupancy and
waves against the device's per-SM limits, the autotune record, the roofline position against
the datasheet and the measured ceilings, and checklist hints, each naming its evidence.

Two kinds of hint:
- structural, raised whatever the speed: register spills, block sizes that are not powers of
  two, an operand with no unit-stride dimension (its loads cannot coalesce), a chain of
  element-wise launches handing buffers to each other (fusion candidates), an autotune space
  whose compilation dominates the test;
- speed, raised only when the measurement is below roofline.NEAR_CEILING of its binding ceiling (a
  kernel at 90% of the copy ceiling is not slow, whatever its occupancy): register- or
  block-limited occupancy, small blocks, too few programs or a large last-wave tail, num_stages
  outside 2-4 on a loop kernel, a fixed config (no autotune) or a single one.
Pure logic on the launches' JSON-ready dicts, into a Diagnosis (perf/diagnosis.py): the CPU suite
drives it with fake launches and injected timings.
"""

from __future__ import annotations

# capture's names, not its module: a module that pytester's in-process runs drop from sys.modules
# and import again is then one module here (the package's attribute would be the old one)
from dataclasses import replace

import pytest

from ..env.occupancy import occupancy
from ..perf import rates, roofline
from ..perf import record as perf_record
from ..perf import session as perf_session
from ..perf.diagnosis import Against, Diagnosis, Roofline
from ..perf.peaks import SOURCES
from ..perf.record import Measurement, PerfRecord, Verdict, label
from . import breakdown
from .capture import CAPTURES_KEY, after_measure, mode, timed_launches
from .hints import Hint, blocks_text, compile_time, fusion, kb, speed, structural

NCU_KEY = pytest.StashKey[dict]()  # per item: measurement index -> ncu result


# --- the roofline position ---------------------------------------------------------------------

def roofline_position(m: Measurement, operand_bytes: int | None = None) -> Roofline:
    """Arithmetic intensity, the bound, and the achieved fraction of the binding ceiling, against
    the datasheet and the measured ceilings. Without bytes=, the intensity is taken over the
    operands' sizes (each tensor passed at launch moved once: the least traffic the kernel
    needs), where the launches were read. The fractions are the record's (perf/verdict.py took
    them), except a bandwidth over the operands' sizes, which only this diagnosis knows."""
    fl, by = m.flops, m.bytes
    source = "bytes=" if by else None
    from_operands = bool(fl and not by and operand_bytes)
    if from_operands:
        by, source = operand_bytes, "operands"
    against = {}
    for src in SOURCES:
        peak_gbps = m.peaks.of_kind("bandwidth", src)
        pos = roofline.position(flops=fl, bytes=by, peak_gbps=peak_gbps,
                                peak_tflops=m.peaks.of_kind("tflops", src))
        if pos is None:
            against[src] = None
            continue
        if pos.bound == "compute":
            fraction = m.fraction("tflops", src)
        elif from_operands:
            fraction = rates.gbps(by, m.median_ms) / peak_gbps if m.median_ms else None
        else:
            fraction = m.fraction("bandwidth", src)
        against[src] = Against(pos.bound, pos.ridge, pos.ceiling, fraction)
    binding = "measured" if against["measured"] else ("datasheet" if against["datasheet"] else None)
    bound = next((a.bound for a in against.values() if a is not None), None)
    return Roofline(intensity=fl / by if fl and by else None,
                    intensity_from=source if fl else None, bound=bound, **against,
                    binding=binding, fraction=against[binding].fraction if binding else None)

# --- one measurement's diagnosis -----------------------------------------------------------------

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


def diagnose(m: Measurement, record: dict | None, device, ncu: dict | None = None,
             call: dict | None = None) -> dict:
    """The diagnosis of measurement `m`, from its capture record and the breakdown of one timed
    call (breakdown.analyze)."""
    record = record or {}
    timed = timed_launches(record)
    pos = roofline_position(m, _operand_bytes(timed))
    slow = pos.fraction is None or pos.fraction < roofline.NEAR_CEILING
    tuners = record.get("autotune") or []
    tuned = bool(tuners)
    n_configs = max((t.get("configs") or 0 for t in tuners), default=None) if tuners else None
    kernels = []
    hints: list[Hint] = []
    for launch, count in _distinct(timed):
        occ = occupancy(launch, device)
        kernels.append({**launch, "launches": count, "occupancy": occ})
        hints += structural(launch, occ, device)
        if slow:
            hints += speed(launch, occ, device, tuned or bool(launch.get("autotuner")), n_configs)
    hints += fusion(record.get("launches") or [])
    hints += compile_time(record)
    call, first, last = breakdown.assess(call, m.time.noise, any(h.code == "fusion" for h in hints))
    hints = first + hints + last  # what dominates the call is named first
    unique: list[Hint] = []
    for h in hints:  # one hint of a kind; the same advice for several kernels lists each one's evidence
        same = next((u for u in unique if u.code == h.code and u.message == h.message), None)
        if same is None:
            unique.append(h)
        elif h.evidence not in same.evidence:
            unique[unique.index(same)] = replace(same, evidence=same.evidence + "; " + h.evidence)
    return Diagnosis(nodeid=m.nodeid, name=m.name, verdict=m.verdict.value, roofline=pos,
                     near_ceiling=not slow, kernels=kernels,
                     all_launches=len(record.get("launches") or []), autotune=tuners,
                     compiles=record.get("compiles"), errors=record.get("errors") or [],
                     note=record.get("note") or "", ncu=ncu, cost_s=record.get("cost_s", 0.0),
                     timed_call=call, hints=tuple(unique))


# --- text --------------------------------------------------------------------------------------

def _frac_text(pos: Roofline, src: str) -> str:
    p = getattr(pos, src)
    if not p:
        return f"{src}: none"
    return f"{100 * p.fraction:.1f}% of {src} {p.ceiling}"


def render(d: Diagnosis) -> str:
    """The diagnosis as the report section shows it."""
    lines = [f"{label(d.nodeid, d.name, short=True)}: {d.verdict}"]
    pos = d.roofline
    if pos.bound:
        over = " over the operands' sizes" if pos.intensity_from == "operands" else ""
        ai = f"{pos.intensity:.3g} FLOP/byte{over}" if pos.intensity else (
            "no flops= given" if pos.bound == "memory" else "no bytes= given")
        ridge = (pos.measured or pos.datasheet).ridge if (pos.measured or pos.datasheet) else None
        ridge_text = f", ridge {ridge:.3g}" if ridge else ""
        lines.append(f"  roofline: {pos.bound}-bound ({ai}{ridge_text}): "
                     f"{_frac_text(pos, 'datasheet')}, {_frac_text(pos, 'measured')}"
                     + ("; near its ceiling: speed hints not raised" if d.near_ceiling else ""))
    lines += breakdown.lines(d.timed_call)
    if not d.kernels:
        lines.append("  kernel: no Triton launch seen in fn (" + (d.note or
                     "it launched none, or replayed a CUDA graph") + ")")
    for k in d.kernels[:6]:
        grid = tuple(k.get("grid") or ())
        times = f" x{k['launches']}" if k.get("launches", 1) > 1 else ""
        if k.get("source") == "hook only":  # a Triton whose launch frames could not be read
            lines.append(f"  kernel {k['kernel']}{times}: launched (its compiled metadata could "
                         "not be read from this Triton's launch path)")
            continue
        lines.append(f"  kernel {k['kernel']}{times}: grid {grid} = {k.get('programs')} programs; "
                     f"num_warps {k.get('num_warps')}, num_stages {k.get('num_stages')}, "
                     f"{k.get('n_regs') if k.get('n_regs') is not None else '?'} registers/thread, spills "
                     f"{kb(k['spill_bytes']) if k.get('spill_bytes') is not None else '?'}, "
                     f"shared {kb(k['shared']) if k.get('shared') is not None else '?'}"
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
            lines.append(f"    occupancy: {blocks_text(occ['blocks_per_sm'])} = {occ['warps_per_sm']}"
                         f" of {occ['max_warps_per_sm']} warps ({100 * occ['occupancy']:.0f}%), "
                         f"limited by {occ['limiter']}{waves}")
        else:
            lines.append("    occupancy: not computed (the device's per-SM limits are unknown)")
    if len(d.kernels) > 6:
        lines.append(f"  ... {len(d.kernels) - 6} more kernels")
    for t in d.autotune:
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
    comp = d.compiles or {}
    if comp.get("count"):
        lines.append(f"  compiled: {comp['count']} kernels in {comp['seconds']:.2f} s during the "
                     f"measurement ({comp['wall_s']:.2f} s)")
    if d.ncu:
        lines.extend("  " + line for line in ncu_lines(d.ncu))
    for e in d.errors or []:
        lines.append(f"  note: {e}")
    if d.hints:
        lines.append("  hints:")
        for h in d.hints:
            lines.append(f"    [{h.code}] {h.message}")
            lines.append(f"        evidence: {h.evidence}")
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


# --- the test's life: capture after measuring, diagnose once judged --------------------------------

def _wanted(item: pytest.Item, record: PerfRecord) -> bool:
    if mode(item.config) != "off":
        return True
    bad = (Verdict.FAIL, Verdict.INCONCLUSIVE, Verdict.INVALID)
    geo = record.geomean.verdict if record.geomean is not None else None
    return any(m.verdict in bad for m in record.measurements) or geo in bad


def after_judged(item: pytest.Item, record: PerfRecord) -> None:
    """Once the test's measurements were judged: diagnose those that were captured, into the
    record (the JSON file, the report section and JUnit read it there). With =ncu, Nsight
    Compute profiles their timed kernels first."""
    captures = item.stash.get(CAPTURES_KEY, None)
    if not captures or not _wanted(item, record):
        return
    if mode(item.config) == "ncu":
        from . import ncu  # import time: only --triton-perf-explain=ncu runs Nsight Compute

        item.stash[NCU_KEY] = ncu.profile_item(item, captures)
    device = perf_session.session(item.config).device
    ncu_found = item.stash.get(NCU_KEY, {})
    calls = item.stash.get(breakdown.KEY, {})
    for i, m in enumerate(record.measurements):
        if i in captures:
            m.explain = diagnose(m, captures[i], device, ncu_found.get(i), calls.get(i))


def annotate_report(item: pytest.Item, report: pytest.TestReport) -> None:
    """On the call report of a perf test: its diagnoses as a report section (shown with its
    failure, or with -rP) and as JUnit properties."""
    record = perf_record.of(item)
    if report.when != "call" or record is None:
        return
    texts = []
    for m in record.measurements:
        d = m.explain
        if d is None:
            continue
        texts.append(render(d))
        prefix = m.junit_prefix
        item.user_properties.append((prefix + "explain.hints",
                                     ",".join(h.code for h in d.hints) or "none"))
        for k in d.kernels[:1]:
            for key in ("n_regs", "spill_bytes", "num_warps", "num_stages", "shared", "programs"):
                if k.get(key) is not None:
                    item.user_properties.append((prefix + f"explain.{key}", str(k[key])))
            if k.get("occupancy"):
                item.user_properties.append((prefix + "explain.occupancy",
                                             f"{k['occupancy']['occupancy']:.3g}"))
        for k in (d.ncu or {}).get("kernels") or []:
            for key in ("dram_pct", "l2_pct", "sm_pct", "achieved_occupancy_pct"):
                if k.get(key) is not None:
                    item.user_properties.append((prefix + f"ncu.{key}", f"{k[key]:.4g}"))
            break
    if texts:
        report.sections.append(("pytest-triton explain", "\n".join(texts)))


def terminal_summary(tr, config: pytest.Config) -> None:
    """Every diagnosed measurement's hints, one line each."""
    ps = perf_session.session(config)
    if ps is None or not ps.controller:
        return
    diagnosed = [(r, m.explain) for r in ps.records for m in r.measurements if m.explain]
    if mode(config) == "off" and not diagnosed:
        return
    idle = perf_session.nothing_measured(config)
    if idle:
        tr.section("pytest-triton explain")
        tr.write_line(f"--triton-perf-explain: nothing diagnosed: {idle}", yellow=True, bold=True)
        return
    spent_s = sum(d.cost_s for _, d in diagnosed)
    tr.section("pytest-triton explain")
    for _, d in diagnosed:
        frac = d.roofline.fraction
        at = f" ({100 * frac:.0f}% of {d.roofline.binding} ceiling)" if frac is not None else ""
        codes = ", ".join(h.code for h in d.hints) or "no hints"
        tr.write_line(f"{label(d.nodeid, d.name, spaced=True)}: {d.verdict}{at}: {codes}")
    tr.write_line(f"{len(diagnosed)} measurement{'s' if len(diagnosed) != 1 else ''} diagnosed; "
                  f"reading their launches took "
                  f"{spent_s:.2f} s (full diagnoses: the 'pytest-triton explain' section of each "
                  "test, shown with its failure or with -rP)")


class Explain:
    """--triton-perf: each measurement that will be diagnosed (--triton-perf-explain, or a
    verdict other than pass) is captured after timing, diagnosed once judged, and shown."""

    def __init__(self, config: pytest.Config):
        self._config = config

    def pytest_triton_measured(self, item: pytest.Item, measurement, fn, kernel, compiles) -> None:
        after_measure(item, measurement, fn, kernel, compiles)
        breakdown.after_measure(item, measurement, fn)

    def pytest_triton_judged(self, item: pytest.Item, record: PerfRecord) -> None:
        after_judged(item, record)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo):
        report = yield
        annotate_report(item, report)
        return report

    def pytest_terminal_summary(self, terminalreporter, exitstatus: int,
                                config: pytest.Config) -> None:
        terminal_summary(terminalreporter, config)
