"""Under pytest-xdist on a GPU, each test holds its GPU through gpulock.py: shared from the start
of its setup to the end of its teardown, alone where it times (or throughout, marked
triton_exclusive), nothing where it is marked triton_no_gpu. And the tests run in the order that
keeps the others' waits short (order).

The lock is taken at the start of the test's setup and given back after its teardown, inside the
test's own phases: a wait that fails (longer than --triton-gpu-wait, or stopped by pytest-timeout)
is that test's error, which names the tests holding the GPU, never an error of the worker (which
xdist would report as a crash, and its controller as an INTERNALERROR).
"""

from __future__ import annotations

import contextlib
import json
import os

import pytest

from .. import options, state
from ..env import role
from ..perf import record
from . import gpulock

OPTIONS = options.declare(
    options.Option("triton_gpu_wait", "string", "900",
                   "under pytest-xdist, the longest a test waits for its GPU (held by other "
                   "workers' tests: a perf test holds it alone) before it fails, naming who holds it",
                   metavar="SECONDS", value="number"),
)

_EXCLUSIVE_HELP = (
    "triton_exclusive(scope='test'): under pytest-xdist, this test has its GPU to itself (no other "
    "worker's test runs on it meanwhile): from its setup to its teardown, or with scope='timing' "
    "only while it times (triton_bench's measurement, in it or in the pytest runs it starts), as "
    "a perf test does; for tests that time things. Such tests run after the others."
)

_NO_GPU_HELP = (
    "triton_no_gpu: the test does not use the GPU (say, it runs kernels under the interpreter in "
    "a subprocess): under pytest-xdist it takes no GPU lock, so it runs while a test that times "
    "has the GPU to itself; it is ordered after the tests that share the GPU, before those that "
    "time."
)
MARKERS = options.declare_markers(options.Marker(_EXCLUSIVE_HELP), options.Marker(_NO_GPU_HELP))

SCOPES = ("test", "timing")  # triton_exclusive(scope=...)
_HELD_KEY = pytest.StashKey[contextlib.ExitStack]()  # item: its hold, from setup to teardown
_HOLD_KEY = pytest.StashKey["gpulock.Hold"]()  # item: its own record (not one it runs under)
WAITS_KEY = pytest.StashKey[list]()  # item: its waits for the lock (lockwaits.py reports them)


def exclusive_scope(item: pytest.Item) -> str | None:
    """The test's triton_exclusive scope ("test" or "timing"), None without the marker. A bad
    argument raises ValueError naming the test and the argument."""
    mark = item.get_closest_marker("triton_exclusive")
    if mark is None:
        return None
    scope = mark.kwargs.get("scope", "test")
    if scope not in SCOPES or mark.args or set(mark.kwargs) - {"scope"}:
        given = ", ".join([repr(a) for a in mark.args]
                          + [f"{k}={v!r}" for k, v in mark.kwargs.items()])
        raise ValueError(f"{item.nodeid}: triton_exclusive({given}): expected triton_exclusive "
                         f"or triton_exclusive(scope=...) with scope one of "
                         f"{', '.join(map(repr, SCOPES))}")
    return scope


def _wanted(item: pytest.Item) -> tuple[str, str] | None:
    """(GPU id, kind) where the lock is on (under xdist, on a GPU), else None. kind: "none" (a test
    marked triton_no_gpu takes no lock), "shared", "timing" (shared, alone where it times: perf
    tests, triton_exclusive(scope="timing")) or "test" (alone throughout: triton_exclusive)."""
    rt = state.get(item.config).runtime
    if rt.interpret or rt.gpu_id is None or not os.environ.get("PYTEST_XDIST_WORKER") \
            or os.name != "posix":
        return None
    if item.get_closest_marker("triton_no_gpu") is not None:
        return rt.gpu_id, "none"
    try:
        scope = exclusive_scope(item)
    except ValueError:
        scope = "test"  # its setup fails, saying why (acquire)
    if scope is not None:
        return rt.gpu_id, scope
    rec = record.of(item)
    perf = state.get(item.config).perf and (rec is not None and rec.target is not None
                                            or "triton_bench" in getattr(item, "fixturenames", ()))
    return rt.gpu_id, "timing" if perf else "shared"


def order(items: list[pytest.Item]) -> None:
    """Under xdist on a GPU: the tests that hold the GPU alone throughout (triton_exclusive)
    first, then those that share it, then those that do not use it, then those that time (each
    group in its own order). A test going alone waits for every test in flight on the GPU to end,
    while the others wait for it: first, the tests in flight are the first shared tests, short
    ones, and the tests alone throughout go one after another (about 13 s in all on the H100).
    Amid the shared tests each timed part would cost every worker the rest of the longest test
    in flight, so the tests that time go last, beside the tests that take no lock. Next to them
    the tests alone throughout waited for their holds between timed parts (a minute where one
    runs a pytest run of its own, as the project's diagnose tests do), and every worker waited
    behind: on the H100 at bf866f6 a test's setup waited 55.9 s. (xdist's first batch once gave
    the tests alone throughout to one worker, and the others waited 86 s: under the lock it sends
    tests two to a worker first, then one at a time; see GPULock.)"""
    items.sort(key=rank)  # stable: each group keeps its order (one group where no lock is taken)

def rank(item: pytest.Item) -> int:  # order()'s group: alone (or no lock), shared, none, timing
    return {None: 0, "test": 0, "shared": 1, "none": 2, "timing": 3}[(_wanted(item) or ("", None))[1]]


def acquire(item: pytest.Item) -> None:
    """At the start of the test's setup: take its GPU. A failed wait fails the test's setup."""
    try:
        exclusive_scope(item)
    except ValueError as exc:
        pytest.fail(str(exc), pytrace=False)
    wanted = _wanted(item)
    if wanted is None or wanted[1] == "none":
        return
    gpu_id, kind = wanted
    wait_s = options.get_float(item.config, "triton_gpu_wait", minimum=0.0)
    stack = contextlib.ExitStack()
    waits = item.stash.setdefault(WAITS_KEY, [])  # a re-run's add to its first run's
    if gpulock.waits_sink() is None and not gpulock.nested(gpu_id):  # its own hold: its waits
        gpulock.waits_to(waits)
        stack.callback(gpulock.waits_to, None)
    waited = None
    try:
        held = stack.enter_context(gpulock.hold(gpu_id, kind == "test", timing=kind == "timing",
                                        wait_s=wait_s, nodeid=item.nodeid))
    except gpulock.GPUWaitTimeout as exc:
        waited = str(exc)
    except BaseException:  # pytest-timeout's Failed, KeyboardInterrupt: not held, let it raise
        stack.close()
        raise
    if waited is not None:
        stack.close()
        pytest.fail(f"pytest-triton: {waited}", pytrace=False)
    if held is not None:
        item.stash[_HOLD_KEY] = held
    item.stash[_HELD_KEY] = stack


@contextlib.contextmanager
def alone_for(item: pytest.Item):
    """Hold the test's GPU alone across a whole run of it (an out-of-memory re-run, oomretry.py):
    its setup's acquire runs under this hold, and the wait is reported with the test's. Raises
    GPUWaitTimeout after --triton-gpu-wait seconds of waiting."""
    gpu_id = _wanted(item)[0]
    wait_s = options.get_float(item.config, "triton_gpu_wait", minimum=0.0)
    outer = gpulock.waits_sink()
    gpulock.waits_to(item.stash.setdefault(WAITS_KEY, []))
    try:
        with gpulock.hold(gpu_id, True, wait_s=wait_s, nodeid=item.nodeid):
            yield
    finally:
        gpulock.waits_to(outer)


def release(item: pytest.Item) -> None:
    """After the test's teardown: give its GPU back, and gather the waits of the processes that
    ran under its hold."""
    stack = item.stash.get(_HELD_KEY, None)
    if stack is None:
        return
    del item.stash[_HELD_KEY]
    stack.close()
    held = item.stash.get(_HOLD_KEY, None)
    if held is not None:
        path = os.path.join(held.folder, f"waits.{held.token}.jsonl")
        with contextlib.suppress(OSError):
            with open(path, encoding="utf-8") as f:
                item.stash[WAITS_KEY].extend(json.loads(line) for line in f if line.strip())
            os.remove(path)


class GPULock:
    """Under pytest-xdist on a GPU: each test holds its GPU shared from its setup to its teardown
    (alone where it times, or throughout with triton_exclusive); tests alone throughout run first,
    tests that time last (order). In every run a bad triton_exclusive argument errors its test.

    xdist's load scheduling hands a worker a quarter of its share at once: a file of slow tests
    ran on one worker to the session's end, beside the tests going alone (on the H100 the 15
    tests of tests/regress/test_regression.py). Unless --maxschedchunk is given, tests go out
    one at a time as workers free (xdist keeps two queued): the order above holds."""

    def __init__(self, config: pytest.Config):
        self._config = config
        opt = config.option
        if role.is_controller(config) and getattr(opt, "dist", "") == "load" and not \
                state.get(config).runtime.interpret and getattr(opt, "maxschedchunk", 0) is None:
            opt.maxschedchunk = 1

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        order(items)

    @pytest.hookimpl(wrapper=True, trylast=True)
    def pytest_runtest_setup(self, item: pytest.Item):
        # Taken inside the test's phases (after the other wrappers began the phase, before any
        # fixture): a wait that fails is this test's setup error, not the worker's. Given back
        # after the whole teardown.
        acquire(item)
        return (yield)

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_teardown(self, item: pytest.Item, nextitem: pytest.Item | None):
        try:
            return (yield)
        finally:
            release(item)
