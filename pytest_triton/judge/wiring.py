"""--triton-judge and the triton_judge marker: which of the judge's checks run, and their wiring.

default: the cheap checks, for every test. on (--triton-judge, or the marker on one test): also
the costly ones. off: none, to measure what they cost. Which check is which: checks.py.

The checks in correctness/ (inputs, outputs, compare) are below the judge and cannot ask it: they
read the switch in correctness/checking.py, which configure() here sets for the run.
"""

from __future__ import annotations

import pytest

from .. import options
from ..correctness import call_record, checking, poison
from ..env import launch_args, role
from ..options import Option
from . import cost, identities, trace, verify

OPTIONS = options.declare(
    Option("triton_judge", "flag", "default",
           "judge kernels you do not trust (docs/judging.md): on adds the costly checks (fresh "
           "and shuffled inputs for the timed call, its GPU trace for side streams and non-Triton "
           "kernels, poisoned allocations and unannounced seeds and sizes for correctness tests, "
           "timing in a supervised child whose verdict this process recomputes); default keeps "
           "the cheap ones (inputs unchanged, plain outputs, timer identities, threads and "
           "processes, launch errors); off turns every one off, to measure what they cost. The "
           "value only with '=': on, default or off; the bare --triton-judge means on",
           metavar="on|default|off", choices=("default", "on", "off"), const="on"),
)

MARKER = "triton_judge"
MARKER_HELP = (
    "triton_judge(*, sizes=True): run this test's costly judge checks as --triton-judge does for "
    "every test (docs/judging.md): the timed call's probe and GPU trace, poisoned allocations, "
    "seeds and sizes the test did not announce (sizes=False: not the sizes)."
)
MARKERS = options.declare_markers(options.Marker(MARKER_HELP))


def mode(config: pytest.Config) -> str:
    return options.get(config, "triton_judge")


def judging(item: pytest.Item) -> bool:
    """Whether `item` gets the costly checks too."""
    m = mode(item.config)
    return m == "on" or (m == "default" and item.get_closest_marker(MARKER) is not None)


class JudgedTests:
    """The costly checks of correctness tests: poisoned allocations, and the body run again at
    values and sizes it did not announce (reruns.py)."""

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        for item in items:
            mark = item.get_closest_marker(MARKER)
            if mark is not None and (mark.args or set(mark.kwargs) - {"sizes"}):
                raise pytest.UsageError(
                    f"{item.nodeid}: triton_judge takes sizes= only (sizes=False: no run at odd "
                    f"sizes), got args={mark.args!r} kwargs={mark.kwargs!r}")
            if judging(item):  # poison.wanted leaves the perf tests it times alone
                item.add_marker(poison.MARKER)

    @pytest.hookimpl(wrapper=True, trylast=True)
    def pytest_runtest_call(self, item: pytest.Item):
        sc = call_record.CURRENT.get()
        if sc is not None and sc.nodeid == item.nodeid:
            sc.strict_inputs = judging(item)
        # innermost: the runs happen inside the test's scope and its poisoned allocations
        result = yield
        if judging(item):
            from . import reruns  # import time: torch, for the tests judged

            if reruns.wanted(item):
                reruns.run_again(item)
        return result


def _on_launch(kernel: str, args) -> None:
    from ..correctness import inputs  # import time: torch, once a kernel launches

    inputs.on_launch(kernel, args)


class TimedCallJudge:
    """The timed call's checks (timedcall.py), around triton_bench's timed call and the dry run's
    call; `judging(item)`: whether the costly checks run for the test too. Registered by
    configure unless --triton-judge=off."""

    def __init__(self, judging):
        self.judging = judging

    @pytest.hookimpl(wrapper=True)
    def pytest_triton_measure(self, config, request, fn, baseline, settings):
        from . import timedcall  # import time: torch, for the tests that time a call

        watch = timedcall.Watch(request.node, fn, "the timed call", self.judging(request.node))
        watch.before()
        try:
            timings = yield
        finally:
            watch.resume()
        watch.after(called=False)
        watch.probe()
        return timings

    @pytest.hookimpl(tryfirst=True)
    def pytest_triton_dry_call(self, item, fn, baseline, call):
        from . import timedcall  # import time: torch, for the tests that time a call

        watch = timedcall.Watch(item, fn, "the dry run's call", self.judging(item))
        watch.before()
        try:
            result = call()
        finally:
            watch.resume()
        watch.after(result)
        watch.probe()
        return True


class _Cleanup:
    def __init__(self, undo):
        self.undo = undo

    @pytest.hookimpl(trylast=True)
    def pytest_unconfigure(self, config: pytest.Config) -> None:
        for undo in reversed(self.undo):
            undo()


class Judge:
    """The judge as plugin.py's FEATURES registers it: it registers its parts (configure)."""

    def __init__(self, config: pytest.Config):
        configure(config)


def configure(config: pytest.Config) -> None:
    """Register the judge's plugin objects."""
    identities.note(config)  # where pytest_load_initial_conftests did not (-p registration)
    if mode(config) == "off":
        token = checking.ENABLED.set(False)
        config.pluginmanager.register(_Cleanup([lambda: checking.ENABLED.reset(token)]),
                                      "triton-judge-cleanup")
        return
    token = checking.ENABLED.set(True)
    undo = [lambda: checking.ENABLED.reset(token), launch_args.watch(_on_launch)]
    config.pluginmanager.register(_Cleanup(undo), "triton-judge-cleanup")
    config.pluginmanager.register(TimedCallJudge(judging), "triton-judge-timed-call")
    config.pluginmanager.register(JudgedTests(), "triton-judge-tests")
    config.pluginmanager.register(trace.TraceJudge(judging), "triton-judge-trace")
    config.pluginmanager.register(cost.Cost(), "triton-judge-cost")
    if mode(config) == "on" and role.holds_the_session(config):
        config.pluginmanager.register(verify.Verifier(config), "triton-judge-verify")
