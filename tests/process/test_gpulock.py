"""GPU locks under pytest-xdist: perf tests exclusive, others shared, nesting never self-deadlocks."""

import os
import subprocess
import sys
import threading
import time

import pytest

from pytest_triton.process import gpulock

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
