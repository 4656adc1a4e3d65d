"""The pytest11 entry point: options, markers and hooks. Wiring only; the work is in the modules."""

from __future__ import annotations

import pytest

from . import options, state
from .correctness import sanitize, scope
from .env import interpreter, runtime, seeding
from .perf import markers
from .process import gpufaults
from .process import supervise as isolation


def pytest_addoption(parser: pytest.Parser) -> None:
    options.add_options(parser)
    isolation.add_options(parser)


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    from . import hookspec

    pluginmanager.add_hookspecs(hookspec)


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> None:
    isolation.prepare(config)  # a continuation child: silent, writes no report files


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config) -> None:
    # Before any conftest or test module imports a kernel: @triton.jit reads TRITON_INTERPRET then.
    early_config.stash[state.RUNTIME_KEY] = runtime.decide(early_config)


def pytest_configure(config: pytest.Config) -> None:
    from . import fixtures
    from .perf import checklist

    config.addinivalue_line("markers", markers.PERF_TARGET_HELP)
    config.addinivalue_line("markers", markers.INTERPRETER_GAP_HELP)
    config.addinivalue_line("markers", markers.EXCLUSIVE_HELP)
    rt = config.stash.get(state.RUNTIME_KEY, None)
    if rt is None:  # registered after the initial conftests (pytest -p pytest_triton.plugin)
        rt = runtime.decide(config)
    st = state.TritonState(runtime=rt, base_seed=seeding.base_seed(config),
                           checklist=checklist.load(config),
                           perf=bool(options.get(config, "triton_perf")))
    config.stash[state.STATE_KEY] = st
    config.pluginmanager.register(fixtures, "triton-fixtures")
    if rt.interpret:
        interpreter.install_debug_mode(config)
    sanitize.configure(config)
    gpufaults.configure(config)  # a GPU fault is blamed on the test that launched it
    isolation.configure(config)  # and the rest of the session runs on in a fresh process
    if st.perf:
        from .perf import session as perf
        from .report import benchbridge

        perf.configure(config)
        benchbridge.configure(config)
    from .diagnose import explain

    explain.configure(config)


def pytest_report_header(config: pytest.Config) -> list[str]:
    from .report import summary as report

    return report.header(config) + sanitize.header(config) + interpreter.header(config)


_BAD_MARKERS_KEY = pytest.StashKey[list]()


@pytest.hookimpl(wrapper=True)
def pytest_pycollect_makeitem(collector: pytest.Collector, name: str, obj: object):
    result = yield
    items = result if isinstance(result, list) else [result]
    for item in items:
        if isinstance(item, pytest.Item):
            try:
                markers.validate_item(item, state.get(collector.config).checklist)
            except markers.PerfTargetError as exc:
                # gathered: the module's collection fails once, naming every bad marker in it
                collector.stash.setdefault(_BAD_MARKERS_KEY, []).append(str(exc))
    return result


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector: pytest.Collector):
    report = yield
    bad = collector.stash.get(_BAD_MARKERS_KEY, None)
    if bad and report.outcome == "passed":
        report.outcome = "failed"
        report.longrepr = "\n".join(bad)
        report.result = []
    return report


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    sanitize.child_select(config, items)


def pytest_collection_finish(session: pytest.Session) -> None:
    sanitize.run_child(session)


def pytest_runtest_setup(item: pytest.Item) -> None:
    target = item.stash.get(markers.TARGET_KEY, None)
    if target is not None:  # first: a target the interpreter's gap skips is unchecked too
        from .perf import session as perf

        perf.setup_item(item, target)
    gap = item.stash.get(markers.GAP_KEY, None)
    if gap and state.get(item.config).runtime.interpret:
        # reported at the test's own line, as a skip marker is (not at this hook's), so that -rs
        # names each test rather than folding them all into one plugin line
        raise pytest.skip.Exception(gap, _use_item_location=True)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    from .process import gpulock

    token = seeding.CURRENT.set(seeding.for_item(item, state.get(item.config).base_seed))
    scope_token = scope.CURRENT.set(scope.TestScope(item.nodeid))
    try:
        with gpulock.for_item(item), sanitize.child_markers(item):
            return (yield)
    finally:
        scope.CURRENT.reset(scope_token)
        seeding.CURRENT.reset(token)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item):
    result = yield
    scope.finish_call(item)
    sanitize.finish_call(item)
    if "triton_bench" in getattr(item, "fixturenames", ()):
        from .diagnose import explain
        from .perf import session as perf

        if state.get(item.config).perf:
            explain.finish_call(item)
        perf.finish_call(item)  # also a dry run's: a triton_bench never called fails
    return result


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    report = yield
    scope.annotate_report(report)
    if state.get(item.config).runtime.interpret:
        interpreter.annotate_report(item, call, report)
    if report.failed and "make_tensor" in getattr(item, "fixturenames", ()):
        report.sections.append(("pytest-triton", seeding.CURRENT.get().describe()))
    if "triton_bench" in getattr(item, "fixturenames", ()):
        from .diagnose import explain
        from .perf import session as perf

        perf.annotate_dry_report(item, call, report)
        if state.get(item.config).perf:
            perf.annotate_report(item, call, report)
            explain.annotate_report(item, report)
    return report


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    sanitize.terminal_summary(terminalreporter, config)
    if state.get(config).perf:
        from .diagnose import explain
        from .report import summary as report

        report.terminal_summary(terminalreporter, config)
        explain.terminal_summary(terminalreporter, config)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    sanitize.session_finish(session)
    if state.get(session.config).perf:
        from .diagnose import explain
        from .perf import session as perf
        from .report import summary as report

        report.finish(session.config)
        explain.session_finish(session.config)
        perf.gate(session)
