"""From timings to verdicts: throughput, fractions of peak, targets checked against CIs, roofline.

Pure logic, no GPU: the CPU test suite drives it through the pytest_triton_measure hook.
A target passes only when its whole confidence interval clears it, fails only when the whole
interval misses it, and is otherwise inconclusive (measured again, then failed as such).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from ..env.device import DeviceInfo
from . import roofline as _roofline
from . import stats
from .markers import PerfTarget
from .timing import Timings

PASS, FAIL, INCONCLUSIVE, INVALID = "pass", "fail", "inconclusive", "invalid"
_ORDER = (INVALID, FAIL, INCONCLUSIVE, PASS)  # a measurement takes its worst check's verdict


@dataclass
class Check:
    target: str  # e.g. "bandwidth_frac"
    asked: float
    achieved: float
    ci: tuple[float, float]
    verdict: str
    message: str
    short: str = ""  # the target as the summary table shows it, in this device's numbers


@dataclass
class Measurement:
    nodeid: str
    name: str | None
    time: stats.Summary  # ms per call
    timings: Timings
    bytes: int | None = None
    flops: int | None = None
    dtype: str | None = None
    baseline: stats.Summary | None = None
    speedup: stats.Summary | None = None  # baseline / fn, paired per sample
    config: str | None = None
    device: dict = field(default_factory=dict)
    peaks: dict = field(default_factory=dict)
    checks: list[Check] = field(default_factory=list)
    roofline: str = ""
    rounds: int = 1

    @property
    def label(self) -> str:
        return f"{self.nodeid}[{self.name}]" if self.name else self.nodeid

    @property
    def median_ms(self) -> float:
        return self.time.median

    @property
    def bandwidth_frac(self) -> float | None:
        """Achieved fraction of the peak DRAM bandwidth fractions are taken against."""
        peak = self.peaks.get("dram_gbps")
        return self.gbps / peak if self.gbps is not None and peak else None

    @property
    def tflops_frac(self) -> float | None:
        """Achieved fraction of the dense tensor-core peak of the operands' dtype."""
        peak = self.peaks.get("tflops")
        return self.tflops / peak if self.tflops is not None and peak else None

    def fractions(self) -> dict:
        """{"bandwidth": {"datasheet": f, "measured": f}, "tflops": {...}}: what was achieved as a
        fraction of each kind of peak (None where there is no such peak or no bytes=/flops=)."""
        out = {}
        for kind, achieved in (("bandwidth", self.gbps), ("tflops", self.tflops)):
            key = "dram_gbps" if kind == "bandwidth" else "tflops"
            out[kind] = {src: (achieved / self.peaks[f"{key}_{src}"]
                               if achieved is not None and self.peaks.get(f"{key}_{src}") else None)
                         for src in ("datasheet", "measured")}
        return out

    @property
    def gbps(self) -> float | None:
        return self.bytes / self.time.median / 1e6 if self.bytes else None

    @property
    def tflops(self) -> float | None:
        return self.flops / self.time.median / 1e9 if self.flops else None

    @property
    def verdict(self) -> str:
        verdicts = {c.verdict for c in self.checks}
        for v in _ORDER:
            if v in verdicts:
                return v
        return "measured"

    def to_dict(self, samples: bool = True) -> dict:
        d = {
            "nodeid": self.nodeid, "name": self.name, "verdict": self.verdict,
            "median_ms": self.time.median, "time_ms": self.time.to_dict(),
            "gbps": self.gbps, "tflops": self.tflops, "bytes": self.bytes, "flops": self.flops,
            "dtype": self.dtype, "config": self.config, "method": self.timings.method,
            "l2": self.timings.l2, "calls_per_sample": self.timings.calls_per_sample,
            "rounds": self.rounds, "throttled": self.timings.throttled,
            "gpu_before": self.timings.gpu_before, "gpu_after": self.timings.gpu_after,
            "notes": self.timings.notes, "peaks": self.peaks, "roofline": self.roofline,
            "fractions": self.fractions(),
            "baseline_ms": self.baseline.to_dict() if self.baseline else None,
            "speedup": self.speedup.to_dict() if self.speedup else None,
            "checks": [asdict(c) for c in self.checks], "device": self.device,
        }
        if samples:
            d["samples_ms"] = self.timings.ms
            d["baseline_samples_ms"] = self.timings.baseline_ms
        return d


def _judge(asked: float, lo: float, hi: float, higher_is_better: bool = True) -> str:
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
    peak_bw, _ = device.peak_gbps()
    peak_tf, _ = device.peak_tflops(m.dtype) if m.dtype else (None, "")
    pos = _roofline.position(flops=m.flops, bytes=m.bytes, gbps=m.gbps, tflops=m.tflops,
                             peak_gbps=peak_bw, peak_tflops=peak_tf)
    if pos is None:
        return ""
    if pos["ridge"] is not None:
        where = f"{pos['intensity']:.3g} FLOP/byte, ridge {pos['ridge']:.3g}"
    else:
        where = "no bytes= given" if pos["bound"] == "compute" else "no flops= given"
    frac = pos["fraction"]
    of = "peak bandwidth" if pos["bound"] == "memory" else f"{m.dtype} peak"
    return (f"roofline: {pos['bound']}-bound ({where}): {_pct(frac)} of {of}, "
            f"{_roofline.grade(pos['bound'], frac)}")


def _peaks(device: DeviceInfo, dtype: str | None) -> dict:
    """The peaks a measurement is shown against: the run's (dram_gbps, tflops: what the roofline
    and the table's first fraction use) and both kinds, datasheet and measured (None where this
    device has no measured ceiling)."""
    out = {}
    out["dram_gbps"], out["dram_source"] = device.peak_gbps()
    out["dram_gbps_datasheet"] = device.peak_gbps("datasheet")[0]
    out["dram_gbps_measured"] = device.peak_gbps("measured")[0]
    if dtype:
        out["tflops"], out["tflops_source"] = device.peak_tflops(dtype)
        out["tflops_datasheet"] = device.peak_tflops(dtype, "datasheet")[0]
        out["tflops_measured"] = device.peak_tflops(dtype, "measured")[0]
    return out


def evaluate(m: Measurement, target: PerfTarget | None, device: DeviceInfo,
             checklist_note: str | None = None) -> None:
    """Fill m.checks, m.peaks and m.roofline for `target` on `device`."""
    t = m.time
    m.peaks.update(_peaks(device, m.dtype))
    m.roofline = roofline(m, device)
    m.checks = []
    note = f" [checklist {target.name!r}{': ' + checklist_note if checklist_note else ''}]" \
        if target is not None and target.name else ""

    if m.bytes:
        gbps, lo, hi = m.gbps, m.bytes / t.ci_hi / 1e6, m.bytes / t.ci_lo / 1e6
        datasheet = device.dram_gbps
        if lo > datasheet:
            m.checks.append(Check("bytes", datasheet, gbps, (lo, hi), INVALID,
                f"invalid measurement: {gbps:.0f} GB/s = {_pct(gbps / datasheet)} of "
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
        lo_tf = m.flops / t.ci_hi / 1e9
        if peak_tf and lo_tf > peak_tf:
            m.checks.append(Check("flops", peak_tf, m.tflops, (lo_tf, m.flops / t.ci_lo / 1e9),
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
        peak_bw, bw_src = device.peak_gbps(target.peak)
        f, flo, fhi = m.gbps / peak_bw, m.bytes / t.ci_hi / 1e6 / peak_bw, m.bytes / t.ci_lo / 1e6 / peak_bw
        add("bandwidth_frac", target.bandwidth_frac, f, flo, fhi,
            f"{m.gbps:.0f} GB/s = {_pct(f)} of {bw_src} {peak_bw:.0f} GB/s; target "
            f"{_pct(target.bandwidth_frac)} = {target.bandwidth_frac * peak_bw:.0f} GB/s "
            f"(bandwidth_frac={target.bandwidth_frac:g}); 99% CI {_pct(flo)}-{_pct(fhi)}",
            f"bw>={_pct(target.bandwidth_frac)}{' of copy' if 'measured' in bw_src else ''} "
            f"({target.bandwidth_frac * peak_bw:.0f} GB/s)")
    peak_bw, bw_src = device.peak_gbps()
    if target.gbps is not None:
        lo, hi = m.bytes / t.ci_hi / 1e6, m.bytes / t.ci_lo / 1e6
        add("gbps", target.gbps, m.gbps, lo, hi,
            f"{m.gbps:.0f} GB/s = {_pct(m.gbps / peak_bw)} of {bw_src} {peak_bw:.0f} GB/s; "
            f"target {target.gbps:g} GB/s (gbps={target.gbps:g}); 99% CI {lo:.0f}-{hi:.0f} GB/s",
            f">={target.gbps:g} GB/s")
    if target.tflops_frac is not None:
        peak_tf, tf_src = device.peak_tflops(m.dtype, target.peak)
        tf = m.tflops
        f, flo, fhi = tf / peak_tf, m.flops / t.ci_hi / 1e9 / peak_tf, m.flops / t.ci_lo / 1e9 / peak_tf
        add("tflops_frac", target.tflops_frac, f, flo, fhi,
            f"{tf:.1f} TFLOP/s = {_pct(f)} of {tf_src} {peak_tf:.1f} TFLOP/s; target "
            f"{_pct(target.tflops_frac)} = {target.tflops_frac * peak_tf:.1f} TFLOP/s "
            f"(tflops_frac={target.tflops_frac:.4g}); 99% CI {_pct(flo)}-{_pct(fhi)}",
            f"{m.dtype}>={_pct(target.tflops_frac)}{' of cuBLAS' if 'measured' in tf_src else ''} "
            f"({target.tflops_frac * peak_tf:.1f} TFLOP/s)")
    peak_tf, tf_src = device.peak_tflops(m.dtype) if m.dtype else (None, "")
    if target.tflops is not None:
        lo, hi = m.flops / t.ci_hi / 1e9, m.flops / t.ci_lo / 1e9
        of_peak = f" = {_pct(m.tflops / peak_tf)} of {tf_src} {peak_tf:.1f}" if peak_tf else ""
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
          config=None, device: DeviceInfo, rounds: int = 1) -> Measurement:
    time = stats.summarize(timings.ms)
    baseline = speedup = None
    if timings.baseline_ms is not None:
        baseline = stats.summarize(timings.baseline_ms)
        pairs = list(zip(timings.baseline_ms, timings.ms))
        speedup = stats.summarize([b / a for b, a in pairs if a > 0])
    return Measurement(nodeid=nodeid, name=name, time=time, timings=timings, bytes=bytes,
                       flops=flops, dtype=dtype, baseline=baseline, speedup=speedup,
                       config=config, rounds=rounds,
                       device={"name": device.name, "sku": device.sku, "sms": device.sms,
                               "driver": device.driver, "fingerprint": device.fingerprint})
