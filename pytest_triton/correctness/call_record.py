"""One test's correctness record, judged when its call ends.

While a test runs, assert_close records each comparison here and make_tensor each poisoned buffer
it guards. When the call ends the test fails if no comparison it made could have failed (every
one would have passed an all-zeros output: a kernel that writes nothing would pass the test), or
if a kernel wrote into a guard region. A tiny comparison among informative ones is not a failure:
it is noted in the test's report section.

Outside a pytest test (plain function use, a script) there is no scope: assert_close then judges
each call on its own, and raises on a comparison that cannot fail.
"""

from __future__ import annotations

import contextvars
import os
import sys
from dataclasses import dataclass, field
from typing import Any

import pytest

from .. import options

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))


@dataclass
class Trivial:
    where: str  # file:line of the call in the test's code
    what: str  # the comparison and why zeros would pass it


@dataclass
class TestScope:
    nodeid: str
    informative: int = 0  # comparisons that could fail (passed, or failed)
    trivial: list[Trivial] = field(default_factory=list)  # could not fail, not allowed to
    allowed_trivial: int = 0  # could not fail, allow_trivial=True
    guarded: list = field(default_factory=list)  # guards.Guarded, checked when the call ends
    notes: list[str] = field(default_factory=list)  # for the report section
    all_configs: bool = False  # --triton-all-configs: assert_every_config checks every config
    configs_checked: list[dict] = field(default_factory=list)  # assert_every_config's records
    inputs: Any = None  # inputs.Guard: the test's inputs, their copies, what changed in them
    # --triton-judge: an input a kernel changed counts as written on purpose only when declared
    # in place, not because the test compared it as assert_close's actual
    strict_inputs: bool = False
    problems: list[str] | None = None  # set by evaluate()


# The scope of the test running now; None outside a test.
CURRENT: contextvars.ContextVar[TestScope | None] = contextvars.ContextVar("triton_scope",
                                                                          default=None)


_INSIDE: dict[str, bool] = {}  # a code file: whether it lies in this package


def _inside(filename: str) -> bool:
    if filename not in _INSIDE:  # once per file: make_tensor asks at every tensor it makes
        _INSIDE[filename] = os.path.dirname(os.path.abspath(filename)) == _PACKAGE_DIR
    return _INSIDE[filename]


def caller(absolute: bool = False) -> str:
    """file:line of the innermost frame outside pytest_triton (the test's own call), the file
    relative to the working directory unless `absolute` (to read the line: a relative name can
    stand for another file once the working directory changes, as between pytester runs)."""
    frame = sys._getframe(1)
    while frame is not None and _inside(frame.f_code.co_filename):
        frame = frame.f_back
    if frame is None:
        return "?"
    where = f"{frame.f_code.co_filename}:{frame.f_lineno}"
    return where if absolute else relative(where)


def relative(where: str) -> str:
    """caller(absolute=True)'s file:line with the file relative to the working directory."""
    path, _, line = where.rpartition(":")
    if not path:  # "?": no frame outside the package
        return where
    try:
        path = os.path.relpath(path)
    except ValueError:  # another drive (Windows)
        pass
    return f"{path}:{line}"


def note(text: str) -> None:
    """Add a line to the running test's report section (nothing outside a test)."""
    sc = CURRENT.get()
    if sc is not None:
        sc.notes.append(text)


def _trivial_message(sc: TestScope) -> str:
    n = len(sc.trivial)
    each = "its only assert_close comparison" if n == 1 else f"each of its {n} assert_close comparisons"
    lines = [f"this test cannot fail: an all-zeros output would pass {each} (every |expected| "
             "<= atol + rtol*|expected|), so a kernel that writes nothing would pass the test:"]
    lines += [f"  {t.where}: {t.what}" for t in sc.trivial[:8]]
    if n > 8:
        lines.append(f"  ... and {n - 8} more")
    lines.append("Make at least one comparison able to fail: inputs whose reference is not ~0, or "
                 "a smaller atol; or pass allow_trivial=True where a trivial comparison is intended.")
    return "\n".join(lines)


def evaluate(sc: TestScope) -> list[str]:
    """What makes this test fail, beyond its own assertions (computed once)."""
    if sc.problems is not None:
        return sc.problems
    problems = []
    if sc.trivial and sc.informative == 0:
        problems.append(_trivial_message(sc))
    elif sc.trivial:
        n = len(sc.trivial)
        sc.notes.append(
            f"assert_close: {n} of {n + sc.informative + sc.allowed_trivial} comparisons could "
            "not fail on their own (an all-zeros output would pass them); the test's other "
            "comparisons can, so the test can:")
        sc.notes.extend(f"  {t.where}: {t.what}" for t in sc.trivial[:8])
    for g in sc.guarded:
        report = g.check()  # a guards.Guarded
        if report:
            problems.append(report)
    sc.guarded.clear()
    if sc.inputs is not None:
        problems += sc.inputs.problems(strict=sc.strict_inputs)
    sc.problems = problems
    return problems


def finish_call(item: pytest.Item) -> None:
    """After the test's body passed: fail it for what only the whole test shows."""
    __tracebackhide__ = True
    sc = CURRENT.get()
    if sc is None or sc.nodeid != item.nodeid:
        return
    problems = evaluate(sc)
    if problems:
        pytest.fail("pytest-triton: " + "\n\n".join(problems), pytrace=False)


def annotate_report(report: pytest.TestReport, item: pytest.Item | None = None) -> None:
    """The call report's section: notes, and problems a test that failed anyway also had; the
    configs assert_every_config checked, as JUnit properties of `item`."""
    sc = CURRENT.get()
    if sc is None or report.when != "call" or sc.nodeid != report.nodeid:
        return
    lines = list(sc.notes)
    if report.failed:
        already_shown = sc.problems is not None and bool(sc.problems)
        problems = evaluate(sc)
        if problems and not already_shown:
            lines += problems
    if lines:
        report.sections.append(("pytest-triton correctness", "\n".join(lines)))
    if sc.configs_checked:  # for the run's summary and the perf JSON (serialised under xdist)
        report.triton_configs = list(sc.configs_checked)
        for c in sc.configs_checked if item is not None else ():
            item.user_properties.append(
                ("triton.configs_checked", f"{c['kernel']}: {c['checked']} of {c['total']} "
                                           f"({c['where']})"))


class Scope:
    """Each test's correctness record: opened with the test, judged when its call ends, its notes
    in the call report."""

    def __init__(self, config: pytest.Config):
        self._all_configs = bool(options.get(config, "triton_all_configs"))

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None):
        token = CURRENT.set(TestScope(item.nodeid, all_configs=self._all_configs))
        try:
            return (yield)
        finally:
            CURRENT.reset(token)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item: pytest.Item):
        result = yield
        finish_call(item)
        return result

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo):
        report = yield
        annotate_report(report, item)
        return report
