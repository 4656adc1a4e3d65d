"""From timings to verdicts, in one place: throughput and fractions of peak (computed once, kept
in the record), targets checked against CIs, the roofline line, the geomean, and the test's
outcome (judge) from its record.

Pure logic, no GPU: the CPU test suite drives it through the pytest_triton_measure hook.
A target passes only when its whole confidence interval clears it, fails only when the whole
interval misses it, and is otherwise inconclusive (measured again, then failed as such).
"""

from __future__ import annotations

import pytest

from ..env.device import DeviceInfo, ceiling_kind
from . import roofline as _roofline
from . import stats
from .markers import PerfInconclusive, PerfInvalid, PerfTarget, PerfTargetError, PerfTargetMissed
from .peaks import DeviceId, Fractions, Peaks
from .rates import gbps as _gbps
from .rates import tflops as _tflops
from .record import Check, Measurement, Mode, PerfRecord, Verdict
from .timing import Timings

PASS, FAIL, INCONCLUSIVE, INVALID = Verdict.PASS, Verdict.FAIL, Verdict.INCONCLUSIVE, Verdict.INVALID

def _judge(asked: float, lo: float, hi: float, higher_is_better: bool = True) -> Verdict:
    if not higher_is_better:
        lo, hi, asked = -hi, -lo, -asked
    if lo >= asked:
        return PASS
    if hi < asked:
        return FAIL
    return INCONCLUSIVE


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def roofline(m: Measurement, device: DeviceInfo) -> str:
    """Where the kernel sits, in one line (roofline.py: the bound, the fraction, its grade)."""
    peak_bw, bw_src = device.peak_gbps(nbytes=m.bytes)
    peak_tf, tf_src = device.peak_tflops(m.dtype) if m.dtype else (None, "")
    pos = _roofline.position(flops=m.flops, bytes=m.bytes, peak_gbps=peak_bw,
                             peak_tflops=peak_tf)
    if pos is None:
        return ""
    if pos.ridge is not None:
        where = f"{pos.intensity:.3g} FLOP/byte, ridge {pos.ridge:.3g}"
    else:
        where = "no bytes= given" if pos.bound == "compute" else "no flops= given"
    memory = pos.bound == "memory"
    frac = m.fraction("bandwidth", ceiling_kind(bw_src)) if memory \
        else m.fraction("tflops", ceiling_kind(tf_src))
    of = "peak bandwidth" if memory else f"{m.dtype} peak"
    return f"roofline: {pos.bound}-bound ({where}): {_pct(frac)} of {of}, " \
        f"{_roofline.grade(pos.bound, frac)}"


def evaluate(m: Measurement, target: PerfTarget | None, device: DeviceInfo,
             checklist_note: str | None = None) -> None:
    """Fill m.peaks, m.fractions, m.checks and m.roofline for `target` on `device`."""
    t = m.time
    m.peaks = Peaks.of(device, m.dtype, m.bytes)
    m.fractions = Fractions.taken(m.peaks, m.gbps, m.tflops)
    m.roofline = roofline(m, device)
    m.checks = []
    note = f" [checklist {target.name!r}{': ' + checklist_note if checklist_note else ''}]" \
        if target is not None and target.name else ""

    if m.bytes:
        gbps, lo, hi = m.gbps, _gbps(m.bytes, t.ci_hi), _gbps(m.bytes, t.ci_lo)
        datasheet = device.dram_gbps
        if lo > datasheet:
            m.checks.append(Check("bytes", datasheet, gbps, (lo, hi), INVALID,
                f"invalid measurement: {gbps:.0f} GB/s = {_pct(m.fraction('bandwidth', 'datasheet'))} of "
                f"{device.label} peak {datasheet:.0f} GB/s, more than the DRAM can move: the data "
                "stayed in L2, the kernel skipped work, or bytes= overcounts"))
            return
    if m.flops:
        # the same for compute: faster than the tensor cores can go (of the dtype, or of the
        # device's fastest dtype when none is given) is a flops= overcount or skipped work
        if m.dtype:
            peak_tf, what = device.peak_tflops(m.dtype, "datasheet")
        else:
            rates = [v for v in (device.tflops or {}).values() if v]
            peak_tf, what = (max(rates), f"{device.label} fastest tensor-core peak") if rates \
                else (None, "")
        lo_tf = _tflops(m.flops, t.ci_hi)
        if peak_tf and lo_tf > peak_tf:
            m.checks.append(Check("flops", peak_tf, m.tflops, (lo_tf, _tflops(m.flops, t.ci_lo)),
                                  INVALID,
                f"invalid measurement: {m.tflops:.1f} TFLOP/s = {_pct(m.tflops / peak_tf)} of "
                f"{what} {peak_tf:.1f} TFLOP/s, more than the tensor cores can do: flops= "
                "overcounts, or the kernel skipped work"))
            return
    if target is None:
        return

    def add(key: str, asked: float, achieved: float, lo: float, hi: float, text: str,
            short: str, higher: bool = True) -> None:
        verdict = _judge(asked, lo, hi, higher)
        m.checks.append(Check(key, asked, achieved, (lo, hi), verdict, text + note, short))

    if target.bandwidth_frac is not None:
        peak_bw, bw_src = device.peak_gbps(target.peak, m.bytes)
        f = m.fraction("bandwidth", ceiling_kind(bw_src) if peak_bw else None)
        flo, fhi = _gbps(m.bytes, t.ci_hi) / peak_bw, _gbps(m.bytes, t.ci_lo) / peak_bw
        add("bandwidth_frac", target.bandwidth_frac, f, flo, fhi,
            f"{m.gbps:.0f} GB/s = {_pct(f)} of {bw_src} {peak_bw:.0f} GB/s; target "
            f"{_pct(target.bandwidth_frac)} = {target.bandwidth_frac * peak_bw:.0f} GB/s "
            f"(bandwidth_frac={target.bandwidth_frac:g}); 99% CI {_pct(flo)}-{_pct(fhi)}",
            f"bw>={_pct(target.bandwidth_frac)}"
            f"{' of copy' if ceiling_kind(bw_src) == 'measured' else ''} "
            f"({target.bandwidth_frac * peak_bw:.0f} GB/s)")
    peak_bw, bw_src = device.peak_gbps(nbytes=m.bytes)
    if target.gbps is not None:
        lo, hi = _gbps(m.bytes, t.ci_hi), _gbps(m.bytes, t.ci_lo)
        of_peak = _pct(m.fraction("bandwidth", ceiling_kind(bw_src)))
        add("gbps", target.gbps, m.gbps, lo, hi,
            f"{m.gbps:.0f} GB/s = {of_peak} of {bw_src} {peak_bw:.0f} GB/s; "
            f"target {target.gbps:g} GB/s (gbps={target.gbps:g}); 99% CI {lo:.0f}-{hi:.0f} GB/s",
            f">={target.gbps:g} GB/s")
    if target.tflops_frac is not None:
        peak_tf, tf_src = device.peak_tflops(m.dtype, target.peak)
        tf = m.tflops
        f = m.fraction("tflops", ceiling_kind(tf_src) if peak_tf else None)
        flo, fhi = _tflops(m.flops, t.ci_hi) / peak_tf, _tflops(m.flops, t.ci_lo) / peak_tf
        add("tflops_frac", target.tflops_frac, f, flo, fhi,
            f"{tf:.1f} TFLOP/s = {_pct(f)} of {tf_src} {peak_tf:.1f} TFLOP/s; target "
            f"{_pct(target.tflops_frac)} = {target.tflops_frac * peak_tf:.1f} TFLOP/s "
            f"(tflops_frac={target.tflops_frac:.4g}); 99% CI {_pct(flo)}-{_pct(fhi)}",
            f"{m.dtype}>={_pct(target.tflops_frac)}"
            f"{' of cuBLAS' if ceiling_kind(tf_src) == 'measured' else ''} "
            f"({target.tflops_frac * peak_tf:.1f} TFLOP/s)")
    peak_tf, tf_src = device.peak_tflops(m.dtype) if m.dtype else (None, "")
    if target.tflops is not None:
        lo, hi = _tflops(m.flops, t.ci_hi), _tflops(m.flops, t.ci_lo)
        of_peak = f" = {_pct(m.fraction('tflops', ceiling_kind(tf_src)))} of {tf_src} " \
            f"{peak_tf:.1f}" if peak_tf else ""
        add("tflops", target.tflops, m.tflops, lo, hi,
            f"{m.tflops:.1f} TFLOP/s{of_peak}; target {target.tflops:g} TFLOP/s "
            f"(tflops={target.tflops:g}); 99% CI {lo:.1f}-{hi:.1f}", f">={target.tflops:g} TFLOP/s")
    if target.max_ms is not None:
        add("max_ms", target.max_ms, t.median, t.ci_lo, t.ci_hi,
            f"{t.median:.4g} ms per call; target at most {target.max_ms:g} ms (max_ms="
            f"{target.max_ms:g}); 99% CI {t.ci_lo:.4g}-{t.ci_hi:.4g} ms", f"<={target.max_ms:g} ms",
            higher=False)
    if target.speedup is not None:
        s = m.speedup
        add("speedup", target.speedup, s.median, s.ci_lo, s.ci_hi,
            f"{s.median:.3f}x the baseline ({t.median:.4g} ms vs baseline {m.baseline.median:.4g} "
            f"ms, measured interleaved); target {target.speedup:g}x (speedup={target.speedup:g}); "
            f"99% CI {s.ci_lo:.3f}-{s.ci_hi:.3f}x", f">={target.speedup:g}x baseline")


def evaluate_geomean(measurements: list[Measurement], target: PerfTarget) -> Check | None:
    """The geomean_speedup check of a test, over all its triton_bench calls."""
    if target.geomean_speedup is None:
        return None
    summaries = [m.speedup for m in measurements]
    g, lo, hi = stats.geomean_ci(summaries)
    parts = ", ".join(f"{m.name or '#' + str(i)} {m.speedup.median:.3f}x"
                      for i, m in enumerate(measurements))
    return Check("geomean_speedup", target.geomean_speedup, g, (lo, hi),
                 _judge(target.geomean_speedup, lo, hi),
                 f"geometric mean speedup {g:.3f}x over {len(measurements)} shapes ({parts}); "
                 f"target {target.geomean_speedup:g}x (geomean_speedup={target.geomean_speedup:g}); "
                 f"99% CI {lo:.3f}-{hi:.3f}x", f"geomean>={target.geomean_speedup:g}x baseline")


def build(nodeid: str, name: str | None, timings: Timings, *, bytes=None, flops=None, dtype=None,
          config=None, device: DeviceInfo | DeviceId, rounds: int = 1) -> Measurement:
    """A measurement of `timings`: its summaries and rates, on `device` (the judge rebuilds one
    from a report, which names its device by a DeviceId). Judged by evaluate()."""
    time = stats.summarize(timings.ms)
    baseline = speedup = None
    if timings.baseline_ms is not None:
        baseline = stats.summarize(timings.baseline_ms)
        pairs = list(zip(timings.baseline_ms, timings.ms))
        speedup = stats.summarize([b / a for b, a in pairs if a > 0])
    # the rates, once: everything shown or judged is taken from these
    gbps = _gbps(bytes, time.median) if bytes else None
    tflops = _tflops(flops, time.median) if flops else None
    return Measurement(nodeid=nodeid, name=name, time=time, timings=timings, bytes=bytes,
                       flops=flops, dtype=dtype, baseline=baseline, speedup=speedup,
                       config=config, rounds=rounds, gbps=gbps, tflops=tflops,
                       device=device if isinstance(device, DeviceId) else DeviceId.of(device))


# --- the test's outcome ---------------------------------------------------------------------------

def judge(record: PerfRecord) -> BaseException | None:
    """After a perf test's body: what it ends with, from its record. A timed test fails unless
    every target of every measurement held (its geomean check is made here, into the record); a
    dry run ends as a skip naming what stayed unchecked; a test with a target that never called
    triton_bench fails. None: the test's own outcome stands."""
    target = record.target
    if record.mode is Mode.DRY_RUN:
        return _dry_run_outcome(record)
    if record.mode is not Mode.TIMED or target is None:
        return None
    measurements = record.measurements
    if not measurements:
        return _never_called(record)
    record.geomean = evaluate_geomean(measurements, target)
    checks = [(m, c) for m in measurements for c in m.checks]
    if record.geomean is not None:
        checks.append((None, record.geomean))
    failed = [(m, c) for m, c in checks if c.verdict in (FAIL, INVALID)]
    unsure = [(m, c) for m, c in checks if c.verdict == INCONCLUSIVE]
    if not failed and not unsure:
        return None
    lines = []
    for m, c in failed + unsure:
        where = f"[{m.name}] " if m is not None and m.name else ""
        lines.append(f"{c.verdict.value.upper()} {where}{c.target}: {c.message}")
        if m is not None and m.roofline:
            lines.append(f"    {m.roofline}")
    if any(c.verdict == INVALID for _, c in failed):
        return PerfInvalid("\n".join(lines))
    hot = [m for m, _ in failed if m is not None and m.timings.throttled]
    if hot:
        # measured again while throttled (fixture._measure), and throttled to the last round: the
        # miss may be the GPU's, not the kernel's, so it proves nothing either way (nor a
        # negative control's xfail(raises=PerfTargetMissed))
        reasons = {r for m in hot for g in (m.timings.gpu_before, m.timings.gpu_after)
                   for r in (g.get("clock_reasons") or [])}
        why = ", ".join(sorted(reasons)) or "NVML reports throttling"
        return PerfInconclusive(
            f"inconclusive: the GPU was throttling in every round of measurement ({why}), so "
            "this miss may be the GPU's, not the kernel's; let it cool or find what holds its "
            "clocks down (nvidia-smi -q -d PERFORMANCE)\n" + "\n".join(lines))
    if failed:
        return PerfTargetMissed("\n".join(lines))
    if all(m is None for m, _ in unsure):
        # only the geomean: its shapes are measured by the test's body, which runs once, so
        # --triton-perf-retries cannot measure them again
        return PerfInconclusive(
            f"inconclusive: the target lies inside the 99% CI of the geometric mean over "
            f"{len(measurements)} shapes, each measured once (a geomean is not re-measured: the "
            "test's body runs once; --triton-perf-max-time narrows each shape's CI)\n"
            + "\n".join(lines))
    rounds = max(m.rounds for m in measurements)
    return PerfInconclusive("inconclusive after " + f"{rounds} round{'s' if rounds != 1 else ''} "
                            "of measurement: the target lies "
                            "inside the measurement's 99% CI\n" + "\n".join(lines))


def _never_called(record: PerfRecord) -> PerfTargetError:
    would = "would be" if record.mode is Mode.DRY_RUN else "was"
    return PerfTargetError(f"{record.nodeid}: has {record.target.describe()} but never called "
                           f"triton_bench, so nothing {would} measured")


def _dry_run_outcome(record: PerfRecord) -> BaseException | None:
    """A dry run that went through ends as a skip naming what stayed unchecked; a perf test
    that never called triton_bench fails, as it would on the GPU."""
    target = record.target
    if not record.dry_calls:
        return None if target is None else _never_called(record)
    n = len(record.dry_calls)
    ran = "fn and baseline" if any(c.baseline for c in record.dry_calls) else "fn"
    text = (f"dry run, nothing timed (no GPU): {n} triton_bench call{'s' if n > 1 else ''} "
            f"checked and {ran} run once; targets unchecked: "
            + (target.describe() if target is not None else "none (no perf_target)"))
    if record.unverifiable:
        text += "; needs the device, not checked: " + ", ".join(record.unverifiable)
    # reported at the test's own line, not at the plugin's
    return pytest.skip.Exception(text, _use_item_location=True)
