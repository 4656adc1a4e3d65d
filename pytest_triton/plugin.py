"""The pytest11 entry point: options, markers and hooks. Wiring only; the work is in the modules."""

from __future__ import annotations

import pytest

from . import markers, options, runtime, seeding, state

TARGET_KEY = pytest.StashKey["markers.PerfTarget | None"]()
GAP_KEY = pytest.StashKey["str | None"]()


def pytest_addoption(parser: pytest.Parser) -> None:
    options.add_options(parser)


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    from . import hookspec

    pluginmanager.add_hookspecs(hookspec)


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config) -> None:
    # Before any conftest or test module imports a kernel: @triton.jit reads TRITON_INTERPRET then.
    early_config.stash[state.RUNTIME_KEY] = runtime.decide(early_config)


def pytest_configure(config: pytest.Config) -> None:
    from . import checklist, fixtures

    config.addinivalue_line("markers", markers.PERF_TARGET_HELP)
    config.addinivalue_line("markers", markers.INTERPRETER_GAP_HELP)
    rt = config.stash.get(state.RUNTIME_KEY, None)
    if rt is None:  # the plugin was registered late (-p in a pytester run, say)
        rt = runtime.decide(config)
    config.stash[state.STATE_KEY] = state.TritonState(
        runtime=rt,
        base_seed=seeding.base_seed(config),
        checklist=checklist.load(config),
        perf=bool(options.get(config, "triton_perf")),
    )
    config.pluginmanager.register(fixtures, "triton-fixtures")
    if config.stash[state.STATE_KEY].perf:
        from . import perf

        perf.configure(config)


def pytest_report_header(config: pytest.Config) -> list[str]:
    from . import report

    return report.header(config)


@pytest.hookimpl(wrapper=True)
def pytest_pycollect_makeitem(collector: pytest.Collector, name: str, obj: object):
    result = yield
    items = result if isinstance(result, list) else [result]
    checklist = state.get(collector.config).checklist
    for item in items:
        if isinstance(item, pytest.Item):
            try:
                item.stash[TARGET_KEY] = markers.perf_target_of(item, checklist)
                item.stash[GAP_KEY] = markers.interpreter_gap_of(item)
            except markers.PerfTargetError as exc:
                raise collector.CollectError(str(exc)) from None
    return result


def pytest_runtest_setup(item: pytest.Item) -> None:
    st = state.get(item.config)
    gap = item.stash.get(GAP_KEY, None)
    if gap and st.runtime.interpret:
        pytest.skip(gap)
    target = item.stash.get(TARGET_KEY, None)
    if target is not None:
        from . import perf

        perf.setup_item(item, target)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    token = seeding.CURRENT.set(seeding.test_seed(state.get(item.config).base_seed, item.nodeid))
    try:
        return (yield)
    finally:
        seeding.CURRENT.reset(token)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    report = yield
    if report.failed and "make_tensor" in getattr(item, "fixturenames", ()):
        report.sections.append(("pytest-triton", seeding.CURRENT.get().describe()))
    return report
