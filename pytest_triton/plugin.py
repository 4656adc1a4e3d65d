"""The pytest11 entry point: the options, the hook specs, the run's state, and the registration
of each feature, a plugin object of its own (FEATURES), whose module is imported only when the
feature is in use (as pytest-xdist defers its heavy module)."""

from __future__ import annotations

import importlib
import pkgutil

import pytest

from . import hookspec, options, state
from .correctness import configs, pinning, poison
from .env import role, runtime, seeding
from .env.role import Role
from .judge import identities, wiring
from .perf import checklist, markers, resource_gate, session
from .process import child, forked, gpuholds, supervise
from .regress import settings as regress_settings
from .report import order

# The modules that declare options or markers beside their feature (OPTIONS and MARKERS in each,
# declared as they are imported); options.py declares the other options. --help lists them all
# in options.HELP_ORDER, --markers in options.MARKER_ORDER.
DECLARING = (runtime, seeding, session, checklist, supervise, configs, poison, wiring, pinning,
             resource_gate, gpuholds, regress_settings, order, markers)


def pytest_addoption(parser: pytest.Parser) -> None:
    options.add_options(parser)


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    pluginmanager.add_hookspecs(hookspec)


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> None:
    child.prepare(config)  # a supervised child: silent, writes no report files


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config) -> None:
    # Before anything else runs (a CUDA driver, a conftest): a thread started after this rules
    # out a forked supervised child
    forked.note_threads(early_config)
    # Before any conftest or test module imports a kernel: @triton.jit reads TRITON_INTERPRET then.
    early_config.stash[state.RUNTIME_KEY] = runtime.decide(early_config)
    identities.note(early_config)  # the timer's functions, before a conftest can replace them


# --- when each feature is in use -------------------------------------------------------------------

def always(config: pytest.Config) -> bool:
    return True


def perf(config: pytest.Config) -> bool:  # --triton-perf
    return state.get(config).perf


def interpreting(config: pytest.Config) -> bool:
    return state.get(config).runtime.interpret


def not_a_worker(config: pytest.Config) -> bool:  # the controller, a plain run, a child
    return not role.is_worker(config)


def sanitizing(config: pytest.Config) -> bool:  # --triton-sanitize TOOL, or the run under it
    return options.get(config, "triton_sanitize") not in (None, "", "off") or role.under_sanitizer()


def pinning(config: pytest.Config) -> bool:  # --triton-autotune=heuristic|first
    return options.get(config, "triton_autotune") != "full"


def retrying_oom(config: pytest.Config) -> bool:  # --triton-oom-retry=auto, an xdist worker
    return role.is_worker(config) and options.get(config, "triton_oom_retry") == "auto"


def plotting(config: pytest.Config) -> bool:
    return bool(options.get(config, "triton_perf_plot"))


def profiling(config: pytest.Config) -> bool:
    return perf(config) and bool(options.get(config, "triton_perf_profile"))


def regression_gate(config: pytest.Config) -> bool:  # --triton-perf-save, --triton-perf-compare
    return perf(config) and any(options.get(config, name) not in (None, "", "off")
                                for name in ("triton_perf_save", "triton_perf_compare"))


def ordering(config: pytest.Config) -> bool:  # --triton-order: longest first, or auto under xdist
    chosen = options.get(config, "triton_order")
    return chosen == "longest-first" or chosen == "auto" and (
        role.of(config) in (Role.WORKER, Role.CONTROLLER))


def benchmarking(config: pytest.Config) -> bool:  # pytest-benchmark is active
    return perf(config) and hasattr(config.hook, "pytest_benchmark_update_machine_info")


def ncu_child(config: pytest.Config) -> bool:  # the run Nsight Compute profiles
    return perf(config) and role.under_ncu()


# (plugin name, in use when, module, plugin class: made with the config; None: the module itself).
# Registered in this order: their report-header lines print in it, their terminal summaries in
# its reverse, and hook wrappers of one priority nest with the later registered outside.
FEATURES = (
    ("triton-header", always, "pytest_triton.report.summary", "Header"),
    ("triton-sanitize", sanitizing, "pytest_triton.correctness.sanitize", "Sanitize"),
    ("triton-interpreter", interpreting, "pytest_triton.env.interpreter.feature", "Interpreter"),
    ("triton-autotune-pin", pinning, "pytest_triton.correctness.pinning", "Pinning"),
    ("triton-fixtures", always, "pytest_triton.fixtures", None),
    ("triton-scope", always, "pytest_triton.correctness.call_record", "Scope"),
    ("triton-poison", always, "pytest_triton.correctness.poison", "Poison"),
    ("triton-seed", always, "pytest_triton.env.seeding", "Seeding"),
    ("triton-perf-tests", always, "pytest_triton.perf.lifecycle", "PerfTests"),
    ("triton-perf", perf, "pytest_triton.perf.session", "Perf"),
    ("triton-perf-profile", profiling, "pytest_triton.diagnose.profile", "Profile"),
    ("triton-perf-explain", perf, "pytest_triton.diagnose.explain", "Explain"),
    ("triton-ncu-child", ncu_child, "pytest_triton.diagnose.ncu", "NcuChild"),
    ("triton-perf-plot", plotting, "pytest_triton.report.plot", "Plot"),
    ("triton-perf-summary", perf, "pytest_triton.report.summary", "PerfSummary"),
    ("triton-durations", perf, "pytest_triton.report.durations", "Durations"),
    ("triton-order", ordering, "pytest_triton.report.order", "LongestFirst"),
    ("triton-perf-regression", regression_gate, "pytest_triton.regress.gate", "RegressionGate"),
    ("triton-benchmark", benchmarking, "pytest_triton.report.benchbridge", "BenchBridge"),
    ("triton-configs-summary", not_a_worker, "pytest_triton.correctness.configs", "ConfigsSummary"),
    # every run: a bad triton_exclusive argument errors its test; the lock itself is taken under
    # xdist on a GPU only (gpuholds._wanted)
    ("triton-gpu-lock", always, "pytest_triton.process.gpuholds", "GPULock"),
    ("triton-lock-waits", always, "pytest_triton.process.lockwaits", "LockWaits"),
    # each xdist worker's busy and idle time: tallied where reports arrive, its GPU named by each worker
    ("triton-busy", role.holds_the_session, "pytest_triton.report.busy", "WorkerTimes"),
    ("triton-busy-gpu", role.is_worker, "pytest_triton.report.busy", "WorkerGpu"),
    ("triton-oom-retry", retrying_oom, "pytest_triton.process.oomretry", "OOMRetry"),
    # the judge: its cheap checks always, the costly ones with --triton-judge (it registers its parts)
    ("triton-judge", always, "pytest_triton.judge.wiring", "Judge"),
    # a GPU fault is blamed on the test that launched it, and the rest of the session runs on in
    # a fresh process: a child reports to its parent; an xdist worker retires and its controller
    # explains; otherwise this process supervises its own tests
    ("triton-gpufaults", always, "pytest_triton.process.gpufaults", "FaultWatch"),
    ("triton-child", role.is_child, "pytest_triton.process.child", "Reporter"),
    ("triton-xdist-worker", role.is_worker, "pytest_triton.process.xdistfaults", "Worker"),
    ("triton-fault-summary", role.holds_the_session, "pytest_triton.process.crash", "FaultSummary"),
    ("triton-xdist-controller", role.is_controller, "pytest_triton.process.xdistfaults", "Controller"),
    ("triton-supervisor", role.is_plain, "pytest_triton.process.supervise", "Supervisor"),
    ("triton-resources", always, "pytest_triton.perf.resource_gate", "ResourceGate"),
)


# The pytest_runtest_makereport wrappers, outermost first: each amends the report made inside it,
# and the report's sections come in the reverse of this order. Those of one priority nest by
# FEATURES' order (the later registered outside); tests/test_plugin.py holds the run to this list.
MAKEREPORT_ORDER = (
    "triton-resources",  # a resource gate's verdict replaces the traceback
    "triton-gpufaults",  # a lost context's report, and the OOM noted for the retry's message
    "triton-judge-cost",  # outside scope: the checks scope's report runs count in this phase
    "triton-oom-retry",  # outside the interpreter's: a gap's skip is not retried
    "triton-lock-waits",
    "triton-perf-explain",
    "triton-perf-profile",
    "triton-seed",  # outside the interpreter's: a gap's skip gets no seed line
    "triton-poison",
    "triton-scope",  # inside the judge's cost (above)
    "triton-autotune-pin",
    "triton-interpreter",  # trylast: a gap turns the failure into a skip before the others see it
    "triton-perf-tests",  # trylast, registered after: innermost, the perf record first
)


def _import_own_modules() -> None:
    """Every module of the package, where pytest runs are nested in this one's tests: one first
    imported inside such a run is dropped afterwards and imported anew by the next, and its
    classes and state then exist twice (a verdict enum that is not the other run's, a warning
    category a filter names that is not the one raised)."""
    package = __name__.rpartition(".")[0]
    for module in pkgutil.walk_packages(importlib.import_module(package).__path__, f"{package}."):
        if not module.name.endswith(".__main__"):
            importlib.import_module(module.name)


def pytest_configure(config: pytest.Config) -> None:
    options.validate(config)  # every option's value, used by this run or not
    options.add_markers(config)  # each declared beside its feature, as the options are
    role.decide(config)  # controller, worker, supervised child or plain: once, for every feature
    rt = config.stash.get(state.RUNTIME_KEY, None)
    if rt is None:  # registered after the initial conftests (pytest -p pytest_triton.plugin)
        rt = runtime.decide(config)
    elif rt.why == runtime.CONTROLLER_WHY and not role.is_controller(config):
        # the command line foretold a controller; xdist settled on no workers: this process
        # runs the tests, and asks torch for its device after all
        rt = config.stash[state.RUNTIME_KEY] = runtime.decide(config, may_control=False)
    config.add_cleanup(lambda: runtime.restore_environment(rt))
    if runtime.import_for_nested_runs(config):  # before a pytester run inside a test could
        _import_own_modules()
    seeding.configure(config)
    config.stash[state.STATE_KEY] = state.TritonState(
        runtime=rt, checklist=checklist.load(config), perf=bool(options.get(config, "triton_perf")))
    if not role.is_worker(config):  # the controller warns for its workers
        options.warn_without_perf(config)
    for name, in_use, module, cls in FEATURES:
        if in_use(config):
            feature = importlib.import_module(module)
            config.pluginmanager.register(feature if cls is None else getattr(feature, cls)(config),
                                          name)
