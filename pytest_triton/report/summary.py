"""What the plugin prints and writes: the header, the perf summary table and the JSON file."""

from __future__ import annotations

import datetime
import math
import platform
import sys
from dataclasses import astuple, dataclass

import pytest

from .. import options, state
from ..correctness import configs
from ..env import nvml, seeding
from ..env import versions as _versions
from ..env.device import unsized
from ..env.seeding import fixed_seed
from ..perf.record import PerfRecord, Verdict, label
from ..perf.session import dry_run, session, unchecked_summary
from ..process import crash
from ..regress import jsonfile, schema
from . import busy, durations, order, work_table


def versions() -> dict:
    """The versions the run used, read without importing torch or Triton where neither is."""
    return {"python": platform.python_version(), "torch": _versions.torch_version(),
            "triton": _versions.triton_version(), "pytest": pytest.__version__,
            "cuda": _versions.torch_cuda()}


def header(config: pytest.Config) -> list[str]:
    st = state.get(config)
    rt = st.runtime
    v = versions()
    if rt.interpret:
        where = f"cpu under Triton's interpreter ({rt.why})"
    else:
        where = f"{rt.device} ({rt.why})"

    if st.perf:
        accepted = options.get(config, "triton_perf_allow_unchecked")
        perf = "on" if not dry_run(config) else (
            "on, but no GPU to time on: perf_target bodies dry-run untimed and their targets are "
            + ("UNCHECKED, accepted by --triton-perf-allow-unchecked" if accepted else
               "UNCHECKED, which fails the run unless --triton-perf-allow-unchecked"))
    elif rt.interpret:
        perf = "off (no GPU: perf_target bodies dry-run once, untimed)"
    else:
        perf = "off (perf_target tests skip; --triton-perf times them)"
    lines = [f"pytest-triton: {where}; torch {v['torch']}, triton {v['triton']}",
             f"pytest-triton: seed base {seeding.base(config)} (--triton-seed){_fixed_seed(config)}; "
             f"perf {perf}"]
    ps = session(config)
    if ps is not None and ps.device is not None:
        d = ps.device
        bw, bw_src = d.peak_gbps()
        fp16, fp16_src = d.peak_tflops("float16")
        lines.append(f"pytest-triton perf: {d.name} ({d.sms} SMs, L2 {d.l2_bytes >> 20} MiB), driver "
                     f"{d.driver}; peaks: {bw:.0f} GB/s ({bw_src}), fp16 "
                     f"{fp16 or 0:.1f} TFLOP/s ({fp16_src}); L2 {ps.l2}")
        if ps.calibration:
            lines.append(f"pytest-triton perf: measured ceilings {ps.calibration}")
        lines.extend(f"pytest-triton perf: note: {n}" for n in d.notes)
    return lines


def _fixed_seed(config: pytest.Config) -> str:
    fixed = fixed_seed(config)
    if fixed is None:
        return ""
    return f", every test's seed fixed to {fixed} (--triton-seed {seeding.base(config)}:{fixed})"


def ms_text(ms: float) -> str:
    """A median in ms with 4 significant digits, never rounded to 0.0000 (a 2 us kernel is
    0.002000, not 0.0020)."""
    if not ms > 0 or ms >= 0.1 or not math.isfinite(ms):
        return f"{ms:.4f}"
    return f"{ms:.{3 - math.floor(math.log10(ms))}f}"


def _fmt(x, spec: str) -> str:
    return "" if x is None else format(x, spec)


@dataclass(frozen=True)
class Row:
    """One line of the perf summary table, its cells as shown, in the columns' order."""
    test: str
    median_ms: str = ""
    gbps: str = ""
    tflops: str = ""
    of_peak: str = ""
    speedup: str = ""
    target: str = ""
    verdict: str = ""
    noise: str = ""
    method: str = ""
    sm_mhz: str = ""
    config: str = ""


HEADERS = ("test", "median ms", "GB/s", "TFLOP/s", "of peak (datasheet, measured)", "speedup",
           "target", "verdict",
           "noise", "method", "SM MHz", "config")


def _rows(records: list[PerfRecord]) -> list[Row]:
    rows = []
    for r in records:
        for m in r.measurements:
            t = m.timings
            noise = f"{100 * m.time.noise:.1f}%"
            if t.throttled:
                noise += " THROTTLED"
            rows.append(Row(
                test=label(m.nodeid, m.name, short=True), median_ms=ms_text(m.median_ms),
                gbps=_fmt(m.gbps, ".0f"), tflops=_fmt(m.tflops, ".1f"),
                of_peak=m.fractions_text(),
                speedup=f"{m.speedup.median:.3f}x" if m.speedup else "",
                target=", ".join(c.short for c in m.checks if c.target != "bytes"),
                verdict=m.verdict.value, noise=noise,
                method=f"{t.method}x{t.calls_per_sample}" if t.method == "graph" else t.method,
                sm_mhz=str(t.gpu_before.get("sm_clock_mhz", "")), config=m.config or ""))
        if r.geomean is not None:
            g = r.geomean
            rows.append(Row(test=label(r.nodeid, "geomean", short=True),
                            speedup=f"{g.achieved:.3f}x",
                            target=f"geomean>={g.asked:g}x baseline", verdict=g.verdict.value))
    return rows


def table(records: list[PerfRecord]) -> list[str]:
    rows = [astuple(r) for r in _rows(records)]
    if not rows:
        return []
    widths = [max(len(str(r[i])) for r in rows + [HEADERS]) for i in range(len(HEADERS))]
    out = ["  ".join(h.ljust(w) for h, w in zip(HEADERS, widths)).rstrip()]
    out.append("  ".join("-" * w for w in widths))
    for r in rows:
        out.append("  ".join(str(v).ljust(w) for v, w in zip(r, widths)).rstrip())
    return out


def _environment(config: pytest.Config) -> dict:
    ps = session(config)
    devices = {}
    for r in ps.records:
        for m in r.measurements:
            devices[m.device.fingerprint or ""] = m.device.to_dict()
    return {**versions(), "platform": platform.platform(), "argv": sys.argv,
            "devices": list(devices.values())}


def terminal_summary(tr, config: pytest.Config) -> None:
    ps = session(config)
    if ps is None or not ps.controller:
        return
    tr.section("pytest-triton perf")
    env = _environment(config)
    dev = env["devices"][0] if env["devices"] else None
    if dev:
        first = ps.records[0].measurements[0]
        gpu = first.timings.gpu_before
        clocks = (f"SM {gpu.get('sm_clock_mhz', '?')} MHz, memory {gpu.get('mem_clock_mhz', '?')} "
                  f"MHz, {gpu.get('temperature_c', '?')} C" if gpu else "clocks unknown (no NVML)")
        peaks = first.peaks
        # the device's largest copy, not a measurement's copy of its own bytes: where this
        # process has no device (an xdist controller), a measurement's one-size ceiling only
        measured = ((ps.device.measured or {}).get("dram_gbps") if ps.device is not None
                    else None) or peaks.one_size_measured()
        tr.write_line(f"{dev['name']} ({dev['sms']} SMs), driver {dev['driver']}; torch "
                      f"{env['torch']}, triton {env['triton']}; {clocks}; L2 {ps.l2}; peaks: "
                      f"{unsized(peaks.dram_source) or '?'}"
                      + (f"; measured copy ceiling {measured:.0f} GB/s" if measured else ""))
    if options.get(config, "triton_perf_peak") == "measured" and ps.device is not None \
            and not (ps.device.measured or {}).get("dram_gbps"):
        tr.write_line(f"--triton-perf-peak measured: this device has no measured ceilings "
                      f"({ps.calibration or 'not measured'}); fractions without a peak= of their "
                      "own were taken of the datasheet", yellow=True, bold=True)
    for line in table(ps.records) + work_table.table(ps.records):
        tr.write_line(line)
    verdicts, geo = _verdicts(ps.records)
    counts = ", ".join(f"{verdicts.count(v)} {v}" for v in Verdict if v in verdicts)
    geo_counts = ", ".join(f"{geo.count(v)} {v}" for v in Verdict if v in geo)
    tr.write_line(f"{len(verdicts)} measurement{'s' if len(verdicts) != 1 else ''}: "
                  f"{counts or 'none'}"
                  + (f"; {len(geo)} geomean target{'s' if len(geo) != 1 else ''}: {geo_counts}"
                     if geo else ""))

    unchecked = unchecked_summary(config)
    if unchecked:
        line, fails = unchecked
        tr.write_line(line, red=fails, yellow=not fails, bold=True)
    changed = settings_changed(config)
    if changed:
        tr.write_line("GPU settings CHANGED during the run: " + "; ".join(changed), red=True)
    elif ps.settings_before:
        tr.write_line("GPU settings unchanged (application clocks, power limit, persistence, "
                      "compute and ECC mode)")


def _verdicts(records: list[PerfRecord]) -> tuple[list[Verdict], list[Verdict]]:
    """The measurements' verdicts, and those of the tests' geomean targets."""
    return ([m.verdict for r in records for m in r.measurements],
            [r.geomean.verdict for r in records if r.geomean is not None])


def settings_changed(config: pytest.Config) -> list[str]:
    ps = session(config)
    if not ps.settings_before or ps.settings_after is None:
        return []
    return [f"{k}: {ps.settings_before[k]} -> {ps.settings_after.get(k)}"
            for k in ps.settings_before if ps.settings_after.get(k) != ps.settings_before[k]]


def finish(config: pytest.Config) -> None:
    """At session end: read the GPU's settings again, then write the JSON file."""
    st = state.get(config)
    ps = session(config)
    if ps is None:
        return
    if ps.settings_before:
        ps.settings_after = nvml.gpu_settings(st.runtime.device)
    if ps.controller and ps.json_path:
        write_json(config)


def measured_device(config: pytest.Config, environment: dict | None = None) -> dict | None:
    """The device this run measured on; None when nothing was measured, or several devices were.
    `environment`: the run's, where the caller has it already."""
    ps = session(config)
    if ps.device is not None:
        return ps.device.to_dict()
    devices = (environment or _environment(config))["devices"]
    # the xdist controller looks up no device: its workers measured on this one
    return devices[0] if len(devices) == 1 else None


def document(config: pytest.Config) -> dict:
    """The run's JSON document: --triton-perf-json writes it; a saved run adds its "run" block."""
    ps = session(config)
    env = _environment(config)
    return {
        "schema": schema.REPORT,
        "schema_version": schema.VERSION,
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(),
        "environment": env,
        "device": measured_device(config, env),
        "settings": {"l2": ps.l2, "peak": options.get(config, "triton_perf_peak"),
                     "max_time_s": ps.max_time, "retries": ps.retries,
                     "base_seed": seeding.base(config), "calibration": ps.calibration},
        "gpu_settings_before": ps.settings_before,
        "gpu_settings_after": ps.settings_after,
        "results": [r.to_dict() for r in ps.records],
        "unchecked": ps.unchecked,
        "faults": crash.records(config),  # tests that lost the CUDA context or crashed
        # assert_every_config: how many of each kernel's configs each test checked, and where
        "configs_checked": configs.records(config),
        "workers": busy.rows(config),  # each xdist worker's busy and idle time (report/busy.py)
        "session": busy.session_times(config),  # its start and end, epoch seconds
        # each test's setup + call + teardown, seconds: what a later run orders and splits by
        "durations": durations.of(config),
        # what the longest-first order went by: saved durations or estimates (report/order.py)
        "order": order.basis(config),
        **verdict_counts(ps.records),
    }


def verdict_counts(records: list[PerfRecord]) -> dict:
    """The document's "summary" ({verdict: how many measurements have it}) and its
    "geomean_summary" (the same of the tests judged on the geometric mean of their measurements,
    whose rows say "measured")."""
    verdicts, geo = _verdicts(records)
    return {"summary": {v.value: verdicts.count(v) for v in sorted(set(verdicts))},
            "geomean_summary": {v.value: geo.count(v) for v in sorted(set(geo))}}


def write_json(config: pytest.Config) -> None:
    """--triton-perf-json's file, replaced whole (a reader never sees half of it)."""
    jsonfile.write_atomic(document(config), session(config).json_path)


class Header:
    """The report header's lines: where kernels run, the seed, whether perf is measured."""

    def __init__(self, config: pytest.Config):
        self._config = config

    def pytest_report_header(self, config: pytest.Config) -> list[str]:
        return header(config)


class PerfSummary:
    """--triton-perf: the table at the end, and the JSON file (read from the records)."""

    def __init__(self, config: pytest.Config):
        self._config = config

    def pytest_terminal_summary(self, terminalreporter, exitstatus: int,
                                config: pytest.Config) -> None:
        terminal_summary(terminalreporter, config)

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        finish(session.config)
