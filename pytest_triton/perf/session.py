"""--triton-perf: the perf session (device, settings, results gathered from reports), the
plugin's default hooks, measured ceilings, and whether perf bodies are timed, dry-run or skipped."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from .. import options, state
from ..env import nvml, runtime
from ..env.device import DeviceInfo, cuda_device_info, with_calibration
from . import calibrate, stats
from .timing import measure

MEASUREMENTS_KEY = pytest.StashKey[list]()  # per item: the Measurements its triton_bench took
UNCHECKED_KEY = pytest.StashKey[str]()  # per item: the target a missing GPU left unchecked
DRY_KEY = pytest.StashKey["dryrun.DryRun"]()  # per item whose body runs once untimed (no GPU)


GEOMEAN_KEY = pytest.StashKey["verdict.Check"]()  # per item: its geomean_speedup check
# per item: a perf test whose interpreter gap stops its body: triton_bench checks its arguments,
# then the test skips naming the gap (the dry run still checks what it can)
GAP_KEY = pytest.StashKey[str]()


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
    st = state.get(config)
    config.pluginmanager.register(_DefaultHooks(), "triton-perf-defaults")
    config.pluginmanager.register(_ReportCollector(config), "triton-perf-collector")
    xdist_controller = runtime.xdist_controller(config)
    info = None
    if not xdist_controller:  # the workers time; the controller must not start CUDA
        info = config.hook.pytest_triton_device_info(config=config)
        _check_device_info(info)
    if info is not None:
        info = with_calibration(
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
        controller=not hasattr(config, "workerinput") and not runtime.is_child(config),
    )
    if info is not None and options.get(config, "triton_perf_calibrate"):
        ensure_ceilings(config, force=True)


def _check_device_info(info) -> None:
    """What pytest_triton_device_info returned, checked once at start-up: every verdict of the
    run divides by these numbers."""
    if info is None:
        return
    def bad(what: str) -> None:
        raise pytest.UsageError(f"pytest_triton_device_info returned {what}")

    if not isinstance(info, DeviceInfo):
        bad(f"a {type(info).__name__}, not a pytest_triton.DeviceInfo")
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
        return cuda_device_info(rt.device)

    @pytest.hookimpl(trylast=True)
    def pytest_triton_calibrate(self, config, device):
        rt = state.get(config).runtime
        if rt.interpret:
            return None
        return calibrate.measure_ceilings(rt.device)

    @pytest.hookimpl(trylast=True)
    def pytest_triton_measure(self, config, request, fn, baseline, settings):
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


def nothing_measured(config: pytest.Config) -> str | None:
    """Why this --triton-perf run measured nothing (for the options that act on measurements:
    --triton-perf-explain, --triton-perf-profile), or None when it measured something."""
    ps = state.get(config).perf_session
    if ps is None or ps.results:
        return None
    if ps.unchecked:
        n = len(ps.unchecked)
        return (f"no GPU to time on: {n} perf test{'' if n == 1 else 's'} dry-ran untimed, "
                "nothing measured")
    return "no perf test was measured in this run"
