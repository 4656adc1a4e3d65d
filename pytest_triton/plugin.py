"""The pytest11 entry point: options, markers and hooks. Wiring only; the work is in the modules."""

from __future__ import annotations

import pytest

from . import fixtures, hookspec, options, state
from .correctness import configs, pinning, poison, sanitize, scope
from .diagnose import breakdown, explain, ncu, profile
from .env import interpreter, runtime, seeding
from .judge import identities
from .judge import mode as judge
from .perf import checklist, dryrun, markers, outcome, resources
from .perf import session as perf
from .process import child, crash, forked, gpufaults, gpulock, lockwaits, oomretry, supervise, xdistfaults
from .report import benchbridge, plot, summary


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


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", markers.PERF_TARGET_HELP)
    config.addinivalue_line("markers", markers.INTERPRETER_GAP_HELP)
    config.addinivalue_line("markers", markers.EXCLUSIVE_HELP)
    config.addinivalue_line("markers", markers.NO_GPU_HELP)
    config.addinivalue_line("markers", poison.MARKER_HELP)
    options.validate(config)  # every option's value, used by this run or not
    rt = config.stash.get(state.RUNTIME_KEY, None)
    if rt is None:  # registered after the initial conftests (pytest -p pytest_triton.plugin)
        rt = runtime.decide(config)
    st = state.TritonState(runtime=rt, base_seed=seeding.base_seed(config),
                           checklist=checklist.load(config),
                           perf=bool(options.get(config, "triton_perf")))
    config.stash[state.STATE_KEY] = st
    if seeding.drawn_at_random(config) and runtime.xdist_controller(config):
        config.pluginmanager.register(seeding.RandomBaseToWorkers(st.base_seed), "triton-seed-base")
    config.pluginmanager.register(fixtures, "triton-fixtures")
    if not hasattr(config, "workerinput"):
        config.pluginmanager.register(configs.ConfigsSummary(config), "triton-configs-summary")
    if rt.interpret:
        interpreter.install_debug_mode(config)
    sanitize.configure(config)
    pinning.configure(config)  # --triton-autotune: one config per autotuner in correctness tests
    gpufaults.configure(config)  # a GPU fault is blamed on the test that launched it
    lockwaits.configure(config)  # under xdist: the waits for the GPU lock, per worker
    oomretry.configure(config)  # under xdist: out of memory beside neighbours, re-run alone
    judge.configure(config)  # the cheap checks always, the costly ones with --triton-judge
    _configure_processes(config)  # and the rest of the session runs on in a fresh process
    if st.perf:
        perf.configure(config)
        benchbridge.configure(config)
    given = options.perf_only_given(config)
    if given and not st.perf and not hasattr(config, "workerinput"):
        config.issue_config_time_warning(pytest.PytestConfigWarning(
            f"pytest-triton: {options.join_and(given)} {'act' if len(given) > 1 else 'acts'} on perf "
            "measurements, and there are none without --triton-perf: add --triton-perf"),
            stacklevel=2)
    plot.configure(config)
    ncu.configure(config)
    resources.configure(config)  # triton_resources: compile-resource gates


def _configure_processes(config: pytest.Config) -> None:
    """Who contains a broken process: a child reports to its parent; an xdist worker retires and
    its controller explains; otherwise this process supervises its own tests."""
    if runtime.is_child(config):
        child.configure(config)
        return
    if hasattr(config, "workerinput"):
        xdistfaults.configure_worker(config)
        return
    config.stash[crash.RECORDS_KEY] = []
    config.pluginmanager.register(crash.FaultSummary(config), "triton-fault-summary")
    if runtime.xdist_controller(config):
        xdistfaults.configure_controller(config)
    else:
        supervise.configure(config)


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    st = config.stash.get(state.STATE_KEY, None)
    if st is not None:
        runtime.restore_environment(st.runtime)


def pytest_report_header(config: pytest.Config) -> list[str]:
    return (summary.header(config) + sanitize.header(config) + interpreter.header(config)
            + pinning.header(config))


@pytest.hookimpl(wrapper=True)
def pytest_pycollect_makeitem(collector: pytest.Collector, name: str, obj: object):
    result = yield
    items = result if isinstance(result, list) else [result]
    for item in items:
        if isinstance(item, pytest.Item):
            markers.validate_item(item, state.get(collector.config).checklist)
    return result


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    sanitize.child_select(config, items)
    gpulock.order(items)


def pytest_collection_finish(session: pytest.Session) -> None:
    sanitize.run_child(session)


@pytest.hookimpl(wrapper=True, trylast=True)
def pytest_runtest_setup(item: pytest.Item):
    # The GPU lock, taken inside the test's phases (after the other wrappers began the phase,
    # before any fixture): a wait that fails is this test's setup error, not the worker's. Given
    # back after the whole teardown (below).
    gpulock.acquire(item)
    markers.raise_marker_error(item)  # a bad marker errors this test alone
    target = item.stash.get(markers.TARGET_KEY, None)
    if target is not None:  # first: a target the interpreter's gap skips is unchecked too
        dryrun.setup_item(item, target)
    gap = item.stash.get(markers.GAP_KEY, None)
    if gap and state.get(item.config).runtime.interpret:
        if target is not None and "triton_bench" in getattr(item, "fixturenames", ()):
            item.stash[perf.GAP_KEY] = gap  # the body's triton_bench still checks its arguments
        else:
            # reported at the test's own line, as a skip marker is (not at this hook's), so
            # that -rs names each test rather than folding them all into one plugin line
            raise pytest.skip.Exception(gap, _use_item_location=True)
    with poison.during(item):  # fixtures that allocate outputs too
        return (yield)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None):
    try:
        return (yield)
    finally:
        gpulock.release(item)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    token = seeding.CURRENT.set(seeding.for_item(item, state.get(item.config).base_seed))
    scope_token = scope.CURRENT.set(scope.TestScope(
        item.nodeid, all_configs=bool(options.get(item.config, "triton_all_configs"))))
    try:
        with sanitize.child_markers(item), pinning.during_test(item):
            return (yield)
    finally:
        scope.CURRENT.reset(scope_token)
        seeding.CURRENT.reset(token)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item):
    with poison.during(item):
        result = yield
    scope.finish_call(item)
    sanitize.finish_call(item)
    if "triton_bench" in getattr(item, "fixturenames", ()):
        if state.get(item.config).perf:
            ncu.finish_call(item)
        dryrun.finish_call(item)  # a dry run's triton_bench never called fails too
        outcome.finish_call(item)
    return result


def pytest_triton_measured(item: pytest.Item, measurement, fn, kernel, compiles) -> None:
    explain.after_measure(item, measurement, fn, kernel, compiles)
    profile.after_measure(item, measurement, fn)
    breakdown.after_measure(item, measurement, fn)
    benchbridge.record(item, measurement)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    report = yield
    scope.annotate_report(report, item)
    poison.annotate_report(item, report)
    pinning.annotate_report(item, report)
    if state.get(item.config).runtime.interpret:
        interpreter.annotate_report(item, call, report, item.stash.get(perf.GAP_KEY, None))
    if report.failed and "make_tensor" in getattr(item, "fixturenames", ()):
        report.sections.append(("pytest-triton", seeding.CURRENT.get().describe()))
    if "triton_bench" in getattr(item, "fixturenames", ()):
        dryrun.annotate_report(item, call, report)
        if state.get(item.config).perf:
            outcome.annotate_report(item, call, report)
            profile.annotate_report(item, report)
            explain.annotate_report(item, report)
    return report


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    summary.seed_summary(terminalreporter, config)
    sanitize.terminal_summary(terminalreporter, config)
    if state.get(config).perf:
        summary.terminal_summary(terminalreporter, config)
        plot.terminal_summary(terminalreporter, config)
        explain.terminal_summary(terminalreporter, config)
        profile.terminal_summary(terminalreporter, config)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    sanitize.session_finish(session)
    if state.get(session.config).perf:
        summary.finish(session.config)
        plot.session_finish(session.config)
        perf.gate(session)
