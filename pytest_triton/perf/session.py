"""--triton-perf: the perf session, the triton_bench fixture, and each perf test's final verdict."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import pytest

from .. import options, state
from ..env import dtypes, nvml, runtime
from ..env.device import DeviceInfo
from ..process import supervise as isolation
from . import stats, verdict
from .markers import (
    TARGET_KEY,
    PerfInconclusive,
    PerfInvalid,
    PerfTarget,
    PerfTargetError,
    PerfTargetMissed,
)
from .timing import Timings

MEASUREMENTS_KEY = pytest.StashKey[list]()  # per item: the Measurements its triton_bench took
UNCHECKED_KEY = pytest.StashKey[str]()  # per item: the target a missing GPU left unchecked
DRY_KEY = pytest.StashKey["DryRun"]()  # per item whose body runs once untimed (no GPU)


@dataclass
class PerfSession:
    device: DeviceInfo | None
    settings_before: dict = field(default_factory=dict)
    settings_after: dict | None = None
    l2: str = "cold"
    max_time: float = 2.0
    retries: int = 2
    json_path: str | None = None
    results: list = field(default_factory=list)  # measurement dicts, gathered from reports
    unchecked: list = field(default_factory=list)  # perf tests skipped for want of a GPU
    controller: bool = True  # writes the table and JSON (False on xdist workers)
    calibration: str = ""  # where the device's measured ceilings came from, once looked for


def configure(config: pytest.Config) -> None:
    from ..env import device as device_mod

    st = state.get(config)
    config.pluginmanager.register(_DefaultHooks(), "triton-perf-defaults")
    config.pluginmanager.register(_ReportCollector(config), "triton-perf-collector")
    xdist_controller = runtime.xdist_controller(config)
    info = None
    if not xdist_controller:  # the workers time; the controller must not start CUDA
        info = config.hook.pytest_triton_device_info(config=config)
        _check_device_info(info)
    if info is not None:
        info = device_mod.with_calibration(
            info, None, options.get(config, "triton_perf_peak") == "measured")
    retries = options.get_count(config, "triton_perf_retries")
    real_gpu = info is not None and not st.runtime.interpret
    st.perf_session = PerfSession(
        device=info,
        settings_before=nvml.gpu_settings(st.runtime.device) if real_gpu else {},
        l2=options.get(config, "triton_perf_l2"),
        max_time=options.get_float(config, "triton_perf_max_time", minimum=0.01),
        retries=int(retries),
        json_path=options.get(config, "triton_perf_json"),
        # xdist workers and continuation children report to the process that writes the results
        controller=not hasattr(config, "workerinput") and not isolation.is_child(config),
    )
    if info is not None and options.get(config, "triton_perf_calibrate"):
        ensure_ceilings(config, force=True)


def _check_device_info(info) -> None:
    """What pytest_triton_device_info returned, checked once at start-up: every verdict of the
    run divides by these numbers."""
    if info is None:
        return
    from ..env.device import DeviceInfo

    def bad(what: str) -> None:
        raise pytest.UsageError(f"pytest_triton_device_info returned {what}")

    if not isinstance(info, DeviceInfo):
        bad(f"a {type(info).__name__}, not a pytest_triton.device.DeviceInfo")
    if not isinstance(info.name, str) or not info.name:
        bad(f"name={info.name!r}: expected the device's name")
    if isinstance(info.sms, bool) or not isinstance(info.sms, int) or info.sms < 1:
        bad(f"sms={info.sms!r}: expected the number of SMs, an integer >= 1")
    if not stats.positive_finite(info.dram_gbps):
        bad(f"dram_gbps={info.dram_gbps!r}: expected the datasheet DRAM bandwidth, a finite "
            "number of GB/s > 0")
    if not isinstance(info.tflops, dict):
        bad(f"tflops={info.tflops!r}: expected a dict of dtype: TFLOP/s")
    for k, v in info.tflops.items():
        if v is not None and not stats.positive_finite(v):
            bad(f"tflops[{k!r}]={v!r}: expected a finite number of TFLOP/s > 0, or None")


class _DefaultHooks:
    """The plugin's own implementations of its hooks; a conftest's implementation wins."""

    @pytest.hookimpl(trylast=True)
    def pytest_triton_device_info(self, config):
        rt = state.get(config).runtime
        if rt.interpret:
            return None
        from ..env.device import cuda_device_info

        return cuda_device_info(rt.device)

    @pytest.hookimpl(trylast=True)
    def pytest_triton_calibrate(self, config, device):
        rt = state.get(config).runtime
        if rt.interpret:
            return None
        from .calibrate import measure_ceilings

        return measure_ceilings(rt.device)

    @pytest.hookimpl(trylast=True)
    def pytest_triton_measure(self, config, request, fn, baseline, settings):
        from .timing import measure

        return measure(fn, baseline, settings, state.get(config).runtime.device)


class _ReportCollector:
    """Gathers measurements where reports arrive: in-process, or on the xdist controller."""

    def __init__(self, config: pytest.Config):
        self._config = config

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        ps = session(self._config)
        payload = getattr(report, "triton_perf", None)
        if payload:
            # pytest reports an xfail as "skipped" (and an xpass as "passed") with wasxfail set
            outcome = report.outcome
            if hasattr(report, "wasxfail"):
                outcome = "xfailed" if report.skipped else "xpassed"
            ps.results.append({"nodeid": report.nodeid, "outcome": outcome, **payload})
        unchecked = getattr(report, "triton_unchecked", None)
        if unchecked:
            ps.unchecked.append({"nodeid": report.nodeid, "target": unchecked})


def ensure_ceilings(config: pytest.Config, *, force: bool = False) -> None:
    """Give the session's device its measured ceilings: from the disk cache of its fingerprint,
    else measured now (pytest_triton_calibrate). Once per process; a failure is kept as a note
    and only an error for the targets that ask for measured ceilings."""
    from ..env.device import with_calibration
    from . import calibrate

    ps = session(config)
    if ps.device is None or (ps.calibration and not force):
        return
    info = ps.device

    def measure():
        return config.hook.pytest_triton_calibrate(config=config, device=info)

    try:
        found, how = calibrate.ceilings(info.fingerprint or info.name, measure, force=force)
    except Exception as exc:  # noqa: BLE001 - a failed calibration must not lose the run
        found, how = None, f"calibration failed: {type(exc).__name__}: {exc}"
    ps.calibration = how
    ps.device = with_calibration(info, found, info.use_measured)


def session(config: pytest.Config) -> PerfSession:
    return state.get(config).perf_session


@dataclass
class DryCall:
    """One triton_bench call of a dry run: its arguments were checked, fn (and baseline) ran once."""
    name: str | None
    baseline: bool


@dataclass
class DryRun:
    """A perf test's body run once without timing, where there is no GPU to time on."""
    calls: list = field(default_factory=list)  # DryCall
    unverifiable: list = field(default_factory=list)  # checks that need the device, not made


def dry_run(config: pytest.Config) -> bool:
    """True where perf-test bodies run once untimed instead of being timed: there is no GPU to
    time on (Triton's interpreter; or --triton-perf without a device). On a GPU without
    --triton-perf they skip: their full-size bodies belong to the perf job."""
    st = state.get(config)
    if st.perf and not runtime.xdist_controller(config):
        ps = session(config)
        return ps is None or ps.device is None
    # Without --triton-perf; or on the xdist controller, which never looks for a device itself
    # (its workers do): what this process runs kernels on says.
    return st.runtime.interpret


def setup_item(item: pytest.Item, target: PerfTarget) -> None:
    st = state.get(item.config)
    if dry_run(item.config):
        item.stash[DRY_KEY] = DryRun()
        if st.perf:  # asked for, not done: gate() counts it
            item.stash[UNCHECKED_KEY] = target.describe()
        return
    if not st.perf:
        pytest.skip(f"perf test ({target.describe()}): run with --triton-perf to time it")
    item.stash[MEASUREMENTS_KEY] = []


class TritonBench:
    """The triton_bench fixture: triton_bench(fn, *, bytes=None, flops=None, baseline=None,
    dtype=None, kernel=None, name=None) -> Measurement."""

    def __init__(self, request: pytest.FixtureRequest):
        self._request = request
        self._item = request.node
        self._config = request.config
        self._target: PerfTarget | None = self._item.stash.get(TARGET_KEY, None)
        #: True when this run has no GPU to time on: each call checks its arguments against the
        #: test's targets and calls fn (and baseline) once, untimed, and returns None. A test
        #: picks a small size with it (`n = 4096 if triton_bench.dry_run else 1 << 26`).
        self.dry_run = dry_run(self._config)
        if self.dry_run:
            self._item.stash.setdefault(DRY_KEY, DryRun())
            return
        if not state.get(self._config).perf:
            pytest.skip("triton_bench times kernels only with --triton-perf")
        self._item.stash.setdefault(MEASUREMENTS_KEY, [])

    def _error(self, text: str) -> PerfTargetError:
        return PerfTargetError(f"{self._item.nodeid}: {text}")

    def _calibration_note(self) -> str:
        how = session(self._config).calibration
        # "not measured" is what the peak's own text already says
        return f"; {how}" if how and how != "not measured" else ""

    def _check_args(self, fn, bytes, flops, baseline, dtype, name) -> str | None:
        if not callable(fn):
            raise self._error(f"triton_bench(fn={fn!r}): fn must be a zero-argument callable")
        if baseline is not None and not callable(baseline):
            raise self._error(f"triton_bench(baseline={baseline!r}): must be a zero-argument callable")
        for arg, value in (("bytes", bytes), ("flops", flops)):
            if value is not None and not stats.positive_finite(value):
                raise self._error(f"triton_bench({arg}={value!r}): expected a number > 0")
        t = self._target
        target_dtype = t.dtype if t else None
        call_dtype = dtypes.name(dtype) if dtype is not None else None
        if call_dtype is not None and call_dtype not in dtypes.PERF_DTYPES:
            raise self._error(f"triton_bench(dtype={dtype!r}): expected one of "
                              f"{', '.join(dtypes.PERF_DTYPES)} (a torch.dtype or its name)")
        if target_dtype and call_dtype and t.name and \
                "dtype" in state.get(self._config).checklist.get(t.name, {}):
            # a checklist entry's dtype is its default (the "matmul" entry's float16): the
            # operands' own dtype names the peak the same fraction is taken of
            target_dtype = None
        # float32 operands run on the tensor cores as tf32: one peak, so no conflict
        if target_dtype and call_dtype and not dtypes.same_peak(target_dtype, call_dtype):
            raise self._error(f"dtype conflict: perf_target(dtype={target_dtype!r}) but "
                              f"triton_bench(dtype={call_dtype!r})")
        dt = target_dtype or call_dtype
        if t is not None:
            for key in ("bandwidth_frac", "gbps"):
                if getattr(t, key) is not None and bytes is None:
                    raise self._error(f"{key}={getattr(t, key):g} needs triton_bench(..., bytes=...)")
            for key in ("tflops_frac", "tflops"):
                if getattr(t, key) is not None and flops is None:
                    raise self._error(f"{key}={getattr(t, key):g} needs triton_bench(..., flops=...)")
            if t.tflops_frac is not None and dt is None:
                raise self._error(f"tflops_frac={t.tflops_frac:g} needs the operands' dtype: "
                                  "triton_bench(..., dtype=torch.float16) or perf_target(dtype=...)")
            for key in ("speedup", "geomean_speedup"):
                if getattr(t, key) is not None and baseline is None:
                    raise self._error(f"{key}={getattr(t, key):g} needs triton_bench(..., baseline=...)")
            if self.dry_run:
                self._note_unverifiable(t, dt)
            else:
                ps = session(self._config)
                if t.tflops_frac is not None:
                    peak, what = ps.device.peak_tflops(dt, t.peak)
                    if not peak:
                        raise self._error(f"tflops_frac: {ps.device.label} has no {dt} "
                                          f"tensor-core peak ({what}{self._calibration_note()})")
                if t.bandwidth_frac is not None and not ps.device.peak_gbps(t.peak)[0]:
                    raise self._error(f"bandwidth_frac with peak={t.peak!r}: {ps.device.label} has "
                                      f"no measured copy ceiling{self._calibration_note()}")
        calls = self._item.stash[DRY_KEY].calls if self.dry_run \
            else self._item.stash[MEASUREMENTS_KEY]
        names = [m.name for m in calls]
        if names and (name is None or name in names or None in names):
            raise self._error(f"triton_bench called more than once: give each call a distinct "
                              f"name= (got {name!r} after {names!r})")
        return dt

    def _note_unverifiable(self, t: PerfTarget, dt: str | None) -> None:
        """The checks a dry run cannot make: they look the device up."""
        peak = t.peak or options.get(self._config, "triton_perf_peak")
        ceiling = "measured ceilings" if peak == "measured" else "datasheet"
        found = self._item.stash[DRY_KEY].unverifiable
        for key, what in (("tflops_frac", f"the device's {dt} tensor-core peak ({ceiling})"),
                          ("bandwidth_frac", f"the device's DRAM bandwidth ({ceiling})")):
            text = f"{key}: {what}"
            if getattr(t, key) is not None and text not in found:
                found.append(text)

    def _dry_call(self, fn, baseline, name) -> None:
        """Call fn, then baseline, once each: what raises fails the test, as on the GPU."""
        __tracebackhide__ = True
        for what, f in (("fn", fn), ("baseline", baseline)):
            if f is None:
                continue
            try:
                f()
                if state.get(self._config).runtime.device.startswith("cuda"):
                    import torch

                    torch.cuda.synchronize()
            except Exception as exc:
                if hasattr(exc, "add_note"):  # Python 3.11+
                    exc.add_note(f"pytest-triton: raised by triton_bench's {what} in a dry run "
                                 "(no GPU to time on: called once, untimed)")
                raise
        self._item.stash[DRY_KEY].calls.append(DryCall(name, baseline is not None))

    def __call__(self, fn, *, bytes=None, flops=None, baseline=None, dtype=None, kernel=None,
                 name=None):
        __tracebackhide__ = True
        if self.dry_run:
            self._check_args(fn, bytes, flops, baseline, dtype, name)
            self._dry_call(fn, baseline, name)
            return None
        ensure_ceilings(self._config)  # both fractions are reported: of the datasheet, measured
        dt = self._check_args(fn, bytes, flops, baseline, dtype, name)
        ps = session(self._config)
        from .timing import Settings

        l2 = (self._target.l2 if self._target and self._target.l2 else None) or ps.l2
        settings = Settings(l2=l2, max_time=ps.max_time)
        note = _checklist_note(self._config, self._target)
        from ..diagnose import explain
        from ..env import launches

        with launches.watch_compiles() as compiles:
            m = self._measure(fn, bytes, flops, baseline, dt, kernel, name, settings, note)
        self._item.stash[MEASUREMENTS_KEY].append(m)
        explain.after_measure(self._item, m, fn, kernel, compiles, passed=m.verdict == verdict.PASS)
        from ..diagnose import profile
        from ..report import benchbridge

        profile.after_measure(self._item, m, fn)
        benchbridge.record(self._item, m)
        return m

    def _measure(self, fn, bytes, flops, baseline, dt, kernel, name, settings, note):
        __tracebackhide__ = True
        ps = session(self._config)
        m = None
        timings = None
        for rounds in range(1, ps.retries + 2):
            new = self._config.hook.pytest_triton_measure(
                config=self._config, request=self._request, fn=fn, baseline=baseline,
                settings=settings)
            if not isinstance(new, Timings):
                raise self._error(f"pytest_triton_measure returned {type(new).__name__}, not Timings")
            if baseline is not None and new.baseline_ms is None:
                raise self._error("pytest_triton_measure returned no baseline timings")
            self._check_timings(new)
            # Throttled rounds are measured again rather than merged: their samples are not the
            # card's normal behaviour.
            timings = new if timings is None or timings.throttled else timings.merged(new)
            m = verdict.build(self._item.nodeid, name, timings, bytes=bytes, flops=flops,
                              dtype=dt, config=_config_of(kernel), device=ps.device, rounds=rounds)
            verdict.evaluate(m, self._target, ps.device, note)
            if m.verdict not in (verdict.INCONCLUSIVE,) and not (m.verdict == verdict.FAIL
                                                                 and timings.throttled):
                break
        return m

    def _check_timings(self, t: Timings) -> None:
        """Timings a hook returned are samples of a real run: finite, positive milliseconds, the
        baseline's paired one to one with fn's; anything else would be judged as if it were."""
        for name in ("ms", "baseline_ms"):
            samples = getattr(t, name)
            if samples is None and name == "baseline_ms":
                continue
            if not isinstance(samples, (list, tuple)) or not samples:
                raise self._error(f"pytest_triton_measure returned Timings.{name}={samples!r}: "
                                  "expected a non-empty list of per-call milliseconds")
            for i, v in enumerate(samples):
                if not stats.positive_finite(v):
                    raise self._error(f"pytest_triton_measure returned Timings.{name}[{i}]="
                                      f"{v!r}: expected a finite number of milliseconds > 0")
        if t.baseline_ms is not None and len(t.baseline_ms) != len(t.ms):
            raise self._error(f"pytest_triton_measure returned {len(t.ms)} samples of fn and "
                              f"{len(t.baseline_ms)} of the baseline: they are paired, one each "
                              "per round of interleaved timing")


def _checklist_note(config: pytest.Config, target: PerfTarget | None) -> str | None:
    from .checklist import NOTES

    if target is None or not target.name:
        return None
    return NOTES.get(target.name)


def _config_of(kernel) -> str | None:
    """The autotuned config(s) chosen for `kernel` (an Autotuner, or a list of them)."""
    if kernel is None:
        return None
    kernels = kernel if isinstance(kernel, (list, tuple)) else [kernel]
    chosen = []
    for k in kernels:
        best = getattr(k, "best_config", None)
        if best is not None:
            chosen.append(str(best))
    return "; ".join(chosen) or None


def finish_call(item: pytest.Item) -> None:
    """After a perf test's body: the test fails unless every target of every measurement held."""
    __tracebackhide__ = True
    target: PerfTarget | None = item.stash.get(TARGET_KEY, None)
    dry = item.stash.get(DRY_KEY, None)
    if dry is not None:
        _finish_dry_run(item, target, dry)
        return
    measurements = item.stash.get(MEASUREMENTS_KEY, None)
    if target is None or measurements is None:
        return
    if not measurements:
        raise PerfTargetError(f"{item.nodeid}: has {target.describe()} but never called "
                              "triton_bench, so nothing was measured")
    geo = verdict.evaluate_geomean(measurements, target)
    checks = [(m, c) for m in measurements for c in m.checks]
    if geo is not None:
        checks.append((None, geo))
        item.stash[GEOMEAN_KEY] = geo
    failed = [(m, c) for m, c in checks if c.verdict in (verdict.FAIL, verdict.INVALID)]
    unsure = [(m, c) for m, c in checks if c.verdict == verdict.INCONCLUSIVE]
    if not failed and not unsure:
        return
    lines = []
    for m, c in failed + unsure:
        where = f"[{m.name}] " if m is not None and m.name else ""
        tag = c.verdict.upper()
        lines.append(f"{tag} {where}{c.target}: {c.message}")
        if m is not None and m.roofline:
            lines.append(f"    {m.roofline}")
    if any(c.verdict == verdict.INVALID for _, c in failed):
        raise PerfInvalid("\n".join(lines))
    hot = [m for m, _ in failed if m is not None and m.timings.throttled]
    if hot:
        # measured again while throttled (_measure), and throttled to the last round: the miss
        # may be the GPU's, not the kernel's, so it proves nothing either way (nor a negative
        # control's xfail(raises=PerfTargetMissed))
        reasons = {r for m in hot for g in (m.timings.gpu_before, m.timings.gpu_after)
                   for r in (g.get("clock_reasons") or [])}
        why = ", ".join(sorted(reasons)) or "NVML reports throttling"
        raise PerfInconclusive(
            f"inconclusive: the GPU was throttling in every round of measurement ({why}), so "
            "this miss may be the GPU's, not the kernel's; let it cool or find what holds its "
            "clocks down (nvidia-smi -q -d PERFORMANCE)\n" + "\n".join(lines))
    if failed:
        raise PerfTargetMissed("\n".join(lines))
    if all(m is None for m, _ in unsure):
        # only the geomean: its shapes are measured by the test's body, which runs once, so
        # --triton-perf-retries cannot measure them again
        raise PerfInconclusive(
            f"inconclusive: the target lies inside the 99% CI of the geometric mean over "
            f"{len(measurements)} shapes, each measured once (a geomean is not re-measured: the "
            "test's body runs once; --triton-perf-max-time narrows each shape's CI)\n"
            + "\n".join(lines))
    rounds = max(m.rounds for m in measurements)
    raise PerfInconclusive("inconclusive after " + f"{rounds} round{'s' if rounds != 1 else ''} "
                           "of measurement: the target lies "
                           "inside the measurement's 99% CI\n" + "\n".join(lines))


def _finish_dry_run(item: pytest.Item, target: PerfTarget | None, dry: DryRun) -> None:
    """A dry run that went through ends as a skip naming what stayed unchecked; a perf test
    that never called triton_bench fails, as it would on the GPU."""
    __tracebackhide__ = True
    if not dry.calls:
        if target is None:
            return  # triton_bench requested, never called, nothing asked of it
        raise PerfTargetError(f"{item.nodeid}: has {target.describe()} but never called "
                              "triton_bench, so nothing would be measured")
    n = len(dry.calls)
    ran = "fn and baseline" if any(c.baseline for c in dry.calls) else "fn"
    text = (f"dry run, nothing timed (no GPU): {n} triton_bench call{'s' if n > 1 else ''} "
            f"checked and {ran} run once; targets unchecked: "
            + (target.describe() if target is not None else "none (no perf_target)"))
    if dry.unverifiable:
        text += "; needs the device, not checked: " + ", ".join(dry.unverifiable)
    pytest.skip(text)


GEOMEAN_KEY = pytest.StashKey[verdict.Check]()


def report_payload(item: pytest.Item) -> dict | None:
    """What the call report carries to the controller (and to xdist's): JSON-ready."""
    measurements = item.stash.get(MEASUREMENTS_KEY, None)
    if not measurements:
        return None
    geo = item.stash.get(GEOMEAN_KEY, None)
    target = item.stash.get(TARGET_KEY, None)
    return {
        "measurements": [m.to_dict() for m in measurements],
        "target": target.describe() if target else None,
        "geomean": None if geo is None else asdict(geo),
    }


def junit_properties(item: pytest.Item) -> list[tuple[str, object]]:
    props = []
    for m in item.stash.get(MEASUREMENTS_KEY, None) or []:
        prefix = f"triton[{m.name}]." if m.name else "triton."
        props.append((prefix + "median_ms", f"{m.time.median:.6g}"))
        if m.gbps is not None:
            props.append((prefix + "gbps", f"{m.gbps:.6g}"))
        if m.tflops is not None:
            props.append((prefix + "tflops", f"{m.tflops:.6g}"))
        if m.speedup is not None:
            props.append((prefix + "speedup", f"{m.speedup.median:.4g}"))
        props.append((prefix + "verdict", m.verdict))
    return props


_CLEAN = (PerfTargetMissed, PerfInconclusive, PerfInvalid, PerfTargetError)


def annotate_report(item: pytest.Item, call: pytest.CallInfo, report: pytest.TestReport) -> None:
    """Attach what this phase measured (or left unchecked) to its report, for the controller,
    the terminal table, the JSON file and JUnit XML."""
    if report.when in ("setup", "call") and report.skipped and UNCHECKED_KEY in item.stash:
        report.triton_unchecked = item.stash[UNCHECKED_KEY]
    if report.when == "call":
        # A verdict is a message, not a bug in the plugin: show it without the plugin's frames.
        if report.failed and call.excinfo is not None and isinstance(call.excinfo.value, _CLEAN):
            exc = call.excinfo.value
            report.longrepr = f"{type(exc).__name__}: {exc}"
        payload = report_payload(item)
        if payload:
            report.triton_perf = payload
            # JUnit XML reads the teardown report's properties, which come from the item.
            item.user_properties.extend(junit_properties(item))


def annotate_dry_report(item: pytest.Item, call: pytest.CallInfo,
                        report: pytest.TestReport) -> None:
    """A dry run's errors read as on the GPU (the message, without the plugin's frames); its
    skip is reported at the test's location, not at the plugin's line."""
    if DRY_KEY not in item.stash or report.when != "call":
        return
    if report.failed and call.excinfo is not None and isinstance(call.excinfo.value, _CLEAN) \
            and not state.get(item.config).perf:  # (with --triton-perf annotate_report does it)
        exc = call.excinfo.value
        report.longrepr = f"{type(exc).__name__}: {exc}"
    if (report.skipped
            and isinstance(report.longrepr, tuple) and len(report.longrepr) == 3
            and "dry run, nothing timed" in str(report.longrepr[2])):
        path, line = item.reportinfo()[:2]
        if line is not None:
            report.longrepr = (str(path), line + 1, report.longrepr[2])


def gate(session: pytest.Session) -> None:
    """--triton-perf asked for perf to be checked: unchecked targets fail a run that would
    otherwise pass, unless --triton-perf-allow-unchecked."""
    ps = state.get(session.config).perf_session
    if ps is None or not ps.controller or not ps.unchecked:
        return
    if options.get(session.config, "triton_perf_allow_unchecked"):
        return
    if session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def unchecked_summary(config: pytest.Config) -> tuple[str, bool] | None:
    """The summary line of unchecked targets and whether they fail the run."""
    ps = state.get(config).perf_session
    if ps is None or not ps.unchecked:
        return None
    n = len(ps.unchecked)
    names = ", ".join(u["nodeid"] for u in ps.unchecked[:10]) + (" ..." if n > 10 else "")
    what = f"{n} perf target{'' if n == 1 else 's'} UNCHECKED (needs a CUDA GPU)"
    if options.get(config, "triton_perf_allow_unchecked"):
        return f"{what}, accepted by --triton-perf-allow-unchecked: {names}", False
    return (f"{what}: the run FAILS, as --triton-perf asks for perf to be checked "
            f"(--triton-perf-allow-unchecked accepts it): {names}", True)
