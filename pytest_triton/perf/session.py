"""--triton-perf: the perf session (the device, the settings, the records gathered from reports),
whether this process times perf bodies, dry-runs or skips them, and the gate on unchecked ones."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import pytest

from .. import options, state
from ..env import nvml, role
from ..env.device import DeviceInfo, with_calibration
from ..options import Option
from . import calibrate
from .default_hooks import DefaultHooks, check_device_info
from .record import Mode, PerfRecord

OPTIONS = options.declare(
    Option("triton_perf", "bool", False,
           "time every test marked perf_target on the GPU and fail those that miss their target"),
    Option("triton_perf_json", "string", None,
           "write every measurement, its statistics, the environment and the verdicts to PATH",
           metavar="PATH", perf_only=True),
    Option("triton_perf_calibrate", "bool", False,
           "measure this device's real ceilings again (a 1 GiB copy; an 8192^3 cuBLAS matmul per "
           "dtype), replacing those cached for its fingerprint (they are measured once per "
           "device fingerprint anyway, at the first perf test)", perf_only=True),
    Option("triton_perf_peak", "string", "datasheet",
           "what fractions of peak are taken against where a perf_target does not say (peak=): "
           "the SKU's datasheet, or this device's measured ceilings",
           choices=("datasheet", "measured"), perf_only=True),
    Option("triton_perf_l2", "string", "cold",
           "L2 state while timing: cold (flushed before every sample) or warm",
           choices=("cold", "warm"), perf_only=True),
    Option("triton_perf_max_time", "string", "2.0",
           "seconds of GPU sampling allowed per kernel per round, before the verdict is taken "
           "on what was collected", metavar="SECONDS", value="number", minimum=0.01,
           perf_only=True),
    Option("triton_perf_retries", "string", "2",
           "how many times an inconclusive verdict is measured again before it fails",
           metavar="N", value="count", perf_only=True),
    Option("triton_perf_allow_unchecked", "bool", False,
           "with --triton-perf, let the run pass although perf targets were left unchecked (no "
           "GPU to time on: their bodies only dry-ran); without it such a run fails",
           perf_only=True),
)

@dataclass
class PerfSession:
    device: DeviceInfo | None
    settings_before: dict = field(default_factory=dict)
    settings_after: dict | None = None
    l2: str = "cold"
    max_time: float = 2.0
    retries: int = 2
    json_path: str | None = None
    records: list[PerfRecord] = field(default_factory=list)  # rebuilt from the tests' reports
    unchecked: list = field(default_factory=list)  # perf tests skipped for want of a GPU
    controller: bool = True  # writes the table and JSON (False on xdist workers)
    calibration: str = ""  # where the device's measured ceilings came from, once looked for
    calibration_s: float = 0.0  # seconds this process spent looking for them (measuring, mostly)


SESSION_KEY = pytest.StashKey[PerfSession]()  # config: made when --triton-perf is on


def session(config: pytest.Config) -> PerfSession | None:
    """This run's perf session; None without --triton-perf."""
    return config.stash.get(SESSION_KEY, None)


class Perf:
    """--triton-perf: the session, the plugin's default hooks, the records gathered where
    reports arrive (in-process, or on the xdist controller), and the gate at the end."""

    def __init__(self, config: pytest.Config):
        self._config = config
        config.pluginmanager.register(DefaultHooks(), "triton-perf-defaults")
        config.stash[SESSION_KEY] = _make_session(config)
        if session(config).device is not None and options.get(config, "triton_perf_calibrate"):
            ensure_ceilings(config, force=True)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        ps = session(self._config)
        payload = getattr(report, "triton_perf", None)
        if payload:
            # pytest reports an xfail as "skipped" (and an xpass as "passed") with wasxfail set
            outcome = report.outcome
            if hasattr(report, "wasxfail"):
                outcome = "xfailed" if report.skipped else "xpassed"
            ps.records.append(PerfRecord.from_dict({"nodeid": report.nodeid, "outcome": outcome,
                                                    **payload}))
        unchecked = getattr(report, "triton_unchecked", None)
        if unchecked:
            ps.unchecked.append({"nodeid": report.nodeid, "target": unchecked})

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        gate(session)


def _make_session(config: pytest.Config) -> PerfSession:
    st = state.get(config)
    info = None
    if not role.is_controller(config):  # the workers time; the controller must not start CUDA
        info = config.hook.pytest_triton_device_info(config=config)
        check_device_info(info)
    if info is not None:
        info = with_calibration(
            info, None, options.get(config, "triton_perf_peak") == "measured")
    real_gpu = info is not None and not st.runtime.interpret
    return PerfSession(
        device=info,
        settings_before=nvml.gpu_settings(st.runtime.device) if real_gpu else {},
        l2=options.get(config, "triton_perf_l2"),
        max_time=options.get_float(config, "triton_perf_max_time", minimum=0.01),
        retries=int(options.get_count(config, "triton_perf_retries")),
        json_path=options.get(config, "triton_perf_json"),
        # xdist workers and continuation children report to the process that writes the results
        controller=role.holds_the_session(config),
    )


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

    began = time.perf_counter()
    try:
        found, how = calibrate.ceilings(info.fingerprint or info.name, measure, force=force)
    except Exception as exc:  # noqa: BLE001 - a failed calibration must not lose the run
        found, how = None, f"calibration failed: {type(exc).__name__}: {exc}"
    ps.calibration_s += time.perf_counter() - began
    ps.calibration = how
    ps.device = with_calibration(info, found, info.use_measured)


def dry_run(config: pytest.Config) -> bool:
    """True where perf-test bodies run once untimed instead of being timed: there is no GPU to
    time on (Triton's interpreter; or --triton-perf without a device). On a GPU without
    --triton-perf they skip: their full-size bodies belong to the perf job."""
    st = state.get(config)
    if st.perf and not role.is_controller(config):
        ps = session(config)
        return ps is None or ps.device is None
    # Without --triton-perf; or on the xdist controller, which never looks for a device itself
    # (its workers do): what this process runs kernels on says.
    return st.runtime.interpret


def mode(config: pytest.Config) -> Mode:
    """How this process runs a perf test's body: the one decision, made at each test's setup."""
    if dry_run(config):
        return Mode.DRY_RUN
    return Mode.TIMED if state.get(config).perf else Mode.SKIPPED


def gate(run: pytest.Session) -> None:
    """--triton-perf asked for perf to be checked: unchecked targets fail a run that would
    otherwise pass, unless --triton-perf-allow-unchecked."""
    ps = session(run.config)
    if ps is None or not ps.controller or not ps.unchecked:
        return
    if options.get(run.config, "triton_perf_allow_unchecked"):
        return
    if run.exitstatus == pytest.ExitCode.OK:
        run.exitstatus = pytest.ExitCode.TESTS_FAILED


def unchecked_summary(config: pytest.Config) -> tuple[str, bool] | None:
    """The summary line of unchecked targets and whether they fail the run."""
    ps = session(config)
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
    ps = session(config)
    if ps is None or ps.records:
        return None
    if ps.unchecked:
        n = len(ps.unchecked)
        return (f"no GPU to time on: {n} perf test{'' if n == 1 else 's'} dry-ran untimed, "
                "nothing measured")
    return "no perf test was measured in this run"
