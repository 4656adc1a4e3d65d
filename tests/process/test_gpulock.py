"""GPU locks under pytest-xdist: a test marked triton_exclusive holds its GPU alone, the others share it; nesting never self-deadlocks."""

import contextlib
import os
import subprocess
import sys
import threading
import time

import pytest

from pytest_triton.process import gpuholds, gpulock

pytestmark = pytest.mark.skipif(os.name != "posix", reason="flock locks are POSIX only")


@pytest.fixture(autouse=True)
def _private_run(monkeypatch):
    monkeypatch.setenv("PYTEST_XDIST_TESTRUNUID", f"test-{os.getpid()}-{time.time_ns()}")
    # Threads stand in for workers here, and each sets the variable a holder's children read:
    # their overlapping holds leave it behind, which no one-thread worker does.
    monkeypatch.delenv(gpulock.HELD_ENV, raising=False)


def _in_thread(fn, timeout=5.0) -> bool:
    """Run fn in another thread (another lock holder); True if it finished within timeout."""
    t = threading.Thread(target=fn, daemon=True)
    t.start()
    t.join(timeout)
    return not t.is_alive()


def _take(exclusive, log, name, hold_s=0.0):
    def run():
        # a thread stands in for another worker: flock from its own descriptor conflicts
        with gpulock.hold("0", exclusive):
            log.append((name, "in", time.monotonic()))
            time.sleep(hold_s)
            log.append((name, "out", time.monotonic()))
    return run


def test_a_nested_session_runs_under_the_outer_lock():
    def nested():  # a pytester session inside a test: flock would wait for itself forever
        with gpulock.hold("0", exclusive=False), gpulock.hold("0", exclusive=True):
            pass

    assert _in_thread(nested), "nested hold() deadlocked"


def test_perf_waits_for_shared_holders_and_excludes_them():
    log: list = []
    shared = threading.Thread(target=_take(False, log, "plain", hold_s=0.3))
    shared.start()
    time.sleep(0.05)
    perf = threading.Thread(target=_take(True, log, "perf", hold_s=0.2))
    perf.start()
    time.sleep(0.05)
    late = threading.Thread(target=_take(False, log, "late"))  # arrives while perf waits
    late.start()
    for t in (shared, perf, late):
        t.join(5)
    when = {(n, e): t for n, e, t in log}
    assert when[("perf", "in")] >= when[("plain", "out")]  # exclusive: after the shared holder
    assert when[("late", "in")] >= when[("perf", "out")]  # the gate: no starving the perf test


def test_a_process_started_under_the_lock_runs_under_it():
    # A pytester subprocess or the --triton-sanitize child of a test that holds the GPU
    # exclusively takes the same lock files: it must not wait for its own ancestor (it would
    # forever, and every other worker behind it at the gate).
    child = ("from pytest_triton.process import gpulock\n"
             "with gpulock.hold('0', exclusive=False):\n"
             "    print('in')\n")
    with gpulock.hold("0", exclusive=True):
        out = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True,
                             timeout=20)
    assert out.returncode == 0 and out.stdout.strip() == "in", out.stderr
    assert gpulock.HELD_ENV not in os.environ  # restored after the hold


def test_tests_alone_throughout_go_first_and_tests_that_time_last(monkeypatch):
    # Going alone, a test waits for every test in flight on the GPU while the other workers wait
    # for it: amid the shared tests, each timed part would cost every worker the rest of the
    # longest test in flight. Last, beside the tests that take no lock, no shared test is left.
    # Tests alone throughout go first, when the tests in flight are the first shared ones: beside
    # the tests that time they waited for their holds between timed parts (55.9 s on the H100).
    from types import SimpleNamespace as NS

    names = ("a", "perf1", "cpu1", "b", "alone1", "c", "perf2", "alone2", "cpu2")
    kinds = {"perf1": "timing", "perf2": "timing", "alone1": "test", "alone2": "test",
             "cpu1": "none", "cpu2": "none"}
    items = [NS(name=n, kind=kinds.get(n, "shared")) for n in names]
    monkeypatch.setattr(gpuholds, "_wanted", lambda it: ("0", it.kind))
    gpuholds.order(items)
    assert [it.name for it in items] == ["alone1", "alone2", "a", "b", "c", "cpu1", "cpu2",
                                         "perf1", "perf2"]
    monkeypatch.setattr(gpuholds, "_wanted", lambda it: None)  # no GPU lock (CPU, no xdist): as is
    items.reverse()
    gpuholds.order(items)
    assert [it.name for it in items] == ["perf2", "perf1", "cpu2", "cpu1", "c", "b", "a",
                                         "alone2", "alone1"]


def test_a_wait_past_its_bound_names_who_holds_the_gpu():
    # Both sides in threads of their own, on a GPU id of their own: under xdist on a GPU, this
    # test's thread holds the real GPU's lock, and a hold nested in it does not wait.
    gpu = "fake-wait-bound"
    ready = threading.Event()
    release = threading.Event()

    def holder():  # another worker's perf test, holding the GPU alone
        with gpulock.hold(gpu, exclusive=True, nodeid="tests/test_k.py::test_perf_holder"):
            ready.set()
            release.wait(5)

    raised = []

    def waiter():
        try:
            with gpulock.hold(gpu, exclusive=False, wait_s=0.3):
                pass
        except gpulock.GPUWaitTimeout as exc:
            raised.append(exc)

    t = threading.Thread(target=holder, daemon=True)
    t.start()
    assert ready.wait(5)
    start = time.monotonic()
    w = threading.Thread(target=waiter, daemon=True)
    w.start()
    w.join(5)
    release.set()
    t.join(5)
    assert 0.3 <= time.monotonic() - start < 3
    assert len(raised) == 1, "the wait did not time out"
    assert "held by: tests/test_k.py::test_perf_holder" in str(raised[0])
    assert "exclusively" in str(raised[0]) and "--triton-gpu-wait" in str(raised[0])
    assert gpulock.holders(gpu) == []  # the holder's record went with its hold


# Under xdist on a CPU machine the lock is off (no GPU); the inner runs pretend a GPU for it.
LOCK_ON = """
from pytest_triton.process import gpuholds
gpuholds._wanted = lambda item: ("fake0", "shared")
"""
HOLDER = """
import os, sys, time
os.environ["PYTEST_XDIST_TESTRUNUID"] = sys.argv[1]
from pytest_triton.process import gpulock
with gpulock.hold("fake0", True, nodeid="elsewhere.py::test_holding_the_gpu"):
    print("holding", flush=True)
    time.sleep(60)
"""


@contextlib.contextmanager
def process_beside(script: str, *args: str):
    """A process running `script` (once it printed 'holding'), killed after the block: one of its
    own, not under this test's lock nor an xdist worker of the outer run."""
    env = {k: v for k, v in os.environ.items()
           if k != gpulock.HELD_ENV and not k.startswith("PYTEST_XDIST")}
    proc = subprocess.Popen([sys.executable, "-c", script, *args], stdout=subprocess.PIPE,
                            text=True, env=env)
    try:
        assert proc.stdout.readline().strip() == "holding"
        yield proc
    finally:
        proc.kill()
        proc.wait()


@pytest.fixture
def gpu_held_elsewhere(pytester):
    """A process holding the inner run's GPU lock for the whole test: a stand-in worker whose
    perf test never ends. Yields the --testrunuid the inner run must use."""
    uid = f"locktest-{os.getpid()}-{time.time_ns()}"
    with process_beside(HOLDER, uid):
        yield uid


@pytest.mark.requires_plugin("pytest-xdist")
@pytest.mark.parametrize("bound", ["--triton-gpu-wait", pytest.param(
    "--timeout", marks=pytest.mark.requires_plugin("pytest-timeout"))])
def test_a_failed_wait_for_the_gpu_fails_its_test_not_the_run(pytester, gpu_held_elsewhere, bound):
    # Seen on the H100 with -n 12 --timeout 150: pytest-timeout fired while a worker waited for
    # the lock inside the plugin's runtest hook, xdist took the worker for crashed and its
    # controller stopped with an INTERNALERROR. The wait now happens in the test's setup.
    pytester.makeconftest(LOCK_ON)
    pytester.makepyfile("def test_a(): pass\ndef test_b(): pass\n")
    limits = ["--triton-gpu-wait", "1"] if bound == "--triton-gpu-wait" else \
        ["--timeout", "2", "--triton-gpu-wait", "60"]
    result = pytester.runpytest_subprocess("-n", "2", f"--testrunuid={gpu_held_elsewhere}",
                                           "-p", "no:cacheprovider", "-rE", *limits)
    assert "INTERNALERROR" not in result.stdout.str() + result.stderr.str()
    result.assert_outcomes(errors=2)
    if bound == "--triton-gpu-wait":
        result.stdout.fnmatch_lines([
            "*pytest-triton: waited * s for GPU fake0 (shared), held by: "
            "elsewhere.py::test_holding_the_gpu (pid *, exclusively, for * s)*"])
    else:
        result.stdout.fnmatch_lines(["*Timeout (>2.0s) from pytest-timeout*"])


# The real gpuholds._wanted, with the run's runtime made a GPU's (a stand-in id): the inner tests
# use no fixture, so nothing else reads it.
STAND_IN_GPU = """
import dataclasses
import pytest
from pytest_triton import state

@pytest.hookimpl(trylast=True)
def pytest_configure(config):
    st = state.get(config)
    st.runtime = dataclasses.replace(st.runtime, interpret=False, gpu_id="fake0")
"""


@pytest.mark.requires_plugin("pytest-xdist")
def test_a_test_marked_triton_no_gpu_takes_no_lock(pytester, gpu_held_elsewhere):
    # While another worker's perf test has the GPU to itself, a test that does not use the GPU
    # runs; an unmarked one waits (here past its bound): the negative control.
    pytester.makeconftest(STAND_IN_GPU)
    pytester.makepyfile("import pytest\n"
                        "@pytest.mark.triton_no_gpu\ndef test_cpu(): pass\n"
                        "def test_gpu(): pass\n")
    result = pytester.runpytest_subprocess("-n", "2", f"--testrunuid={gpu_held_elsewhere}",
                                           "-p", "no:cacheprovider", "-rE", "--triton-gpu-wait", "1")
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(["*ERROR at setup of test_gpu*",
                                 "pytest-triton: waited * s for GPU fake0 (shared)*"])


@pytest.mark.parametrize("given, interpret, expected", [
    (None, False, 1),  # on a GPU, unless given: tests go out one at a time
    (8, False, 8),  # the user's --maxschedchunk stands
    (None, True, None),  # under the interpreter there is no lock: xdist's default
])
def test_on_a_gpu_xdist_sends_tests_one_at_a_time(monkeypatch, given, interpret, expected):
    # xdist's first batches gave tests/regress/test_regression.py's 15 slow tests to one worker,
    # which ran them to the session's end beside the tests going alone
    from types import SimpleNamespace as NS

    config = NS(option=NS(dist="load", maxschedchunk=given))
    monkeypatch.setattr(gpuholds.role, "is_controller", lambda c: True)
    monkeypatch.setattr(gpuholds.state, "get", lambda c: NS(runtime=NS(interpret=interpret)))
    gpuholds.GPULock(config)
    assert config.option.maxschedchunk == expected
