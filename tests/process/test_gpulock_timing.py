"""The GPU held alone for the timed part only: a perf test shares the GPU while it compiles and
sets up, and holds it alone while triton_bench measures; a process started under a test's hold
(a pytester run, the ncu child) times alone in its place; the waits are reported per worker."""

import json
import os
import subprocess
import sys
import threading
import time
from types import SimpleNamespace as NS

import pytest

from pytest_triton.perf import timing
from pytest_triton.process import gpuholds, gpulock, lockfiles, lockwaits

from ..correctness import _fake_gpu

pytestmark = pytest.mark.skipif(os.name != "posix", reason="flock locks are POSIX only")


@pytest.fixture(autouse=True)
def _private_run(monkeypatch):
    monkeypatch.setenv("PYTEST_XDIST_TESTRUNUID", f"test-{os.getpid()}-{time.time_ns()}")
    monkeypatch.delenv(gpulock.HELD_ENV, raising=False)


def _timer(gpu, log, name, hold_s=0.0, alone_s=0.2):
    """A thread standing in for a worker's perf test: shared, then alone while it 'times'."""
    def run():
        with gpulock.hold(gpu, exclusive=False, timing=True, nodeid=name):
            time.sleep(hold_s)
            with gpulock.alone(wait_s=5, nodeid=name):
                log.append((name, "in", time.monotonic()))
                time.sleep(alone_s)
                log.append((name, "out", time.monotonic()))
    return run


def test_two_tests_that_time_wait_for_each_others_timing_not_for_their_shared_holds():
    # Each holds the GPU shared, and both go alone at once: each lends its shared hold while it
    # waits, so neither waits for the other's (a deadlock, were they counted), and their timed
    # parts never overlap.
    log: list = []
    threads = [threading.Thread(target=_timer("g2", log, n), daemon=True) for n in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert not any(t.is_alive() for t in threads), "deadlocked"
    spans = sorted((w, n) for n, e, w in log if e == "in")
    first, second = spans[0][1], spans[1][1]
    when = {(n, e): w for n, e, w in log}
    assert when[(second, "in")] >= when[(first, "out")], log


def test_a_timed_part_waits_for_a_shared_test_and_no_shared_test_starts_meanwhile():
    log: list = []
    ready = threading.Event()

    def plain():  # another worker's correctness test, 0.4 s on the GPU
        with gpulock.hold("g3", exclusive=False, nodeid="plain"):
            ready.set()
            log.append(("plain", "in", time.monotonic()))
            time.sleep(0.4)
            log.append(("plain", "out", time.monotonic()))

    def late():  # a test that starts while the timer waits: it waits for the timed part
        with gpulock.hold("g3", exclusive=False, nodeid="late"):
            log.append(("late", "in", time.monotonic()))

    threads = [threading.Thread(target=plain, daemon=True)]
    threads[0].start()
    assert ready.wait(5)
    threads.append(threading.Thread(target=_timer("g3", log, "timer"), daemon=True))
    threads[1].start()
    deadline = time.monotonic() + 5
    while not lockfiles.scan(lockfiles.folder_of("g3"))[1]:  # the timer waits to go alone
        assert time.monotonic() < deadline
        time.sleep(0.01)
    threads.append(threading.Thread(target=late, daemon=True))
    threads[2].start()
    for t in threads:
        t.join(10)
    when = {(n, e): w for n, e, w in log}
    assert when[("timer", "in")] >= when[("plain", "out")]
    assert when[("late", "in")] >= when[("timer", "out")]


CHILD = """
import json, sys
from pytest_triton.process import gpulock
print("ready", flush=True)
with gpulock.alone(wait_s=20, nodeid="child.py::test_timed"):
    print(json.dumps(gpulock.holders(sys.argv[1])), flush=True)
"""


def _in_a_thread(fn):
    """Run fn in a thread of its own (under xdist on a GPU this test's own thread holds the real
    GPU's lock, and a hold nested in it takes none), raising what it raised."""
    raised = []

    def run():
        try:
            fn()
        except BaseException as exc:  # noqa: BLE001 - raised again below
            raised.append(exc)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(60)
    assert not t.is_alive(), "it hung"
    if raised:
        raise raised[0]


def test_under_a_test_that_does_not_time_nothing_goes_alone():
    # A test of the plugin's logic runs perf tests in pytester with a stand-in measure hook:
    # their "timed parts" share the GPU, as the test does (they would stall every worker).
    def body():
        with gpulock.hold("g5", exclusive=False, nodeid="plain.py::test_logic"):
            assert not gpulock.sharing()
            with gpulock.alone(wait_s=1):
                assert [r["exclusive"] for r in gpulock.holders("g5")] == [False]
        with gpulock.hold("g5", exclusive=False, timing=True, nodeid="perf.py::test_timed"):
            assert gpulock.sharing()
            with gpulock.alone(wait_s=1):
                assert [r["exclusive"] for r in gpulock.holders("g5")] == [True]

    _in_a_thread(body)


def test_a_process_started_under_a_shared_hold_times_alone_in_its_place():
    _in_a_thread(_a_child_times_alone)


def _a_child_times_alone():
    # A perf test in a pytester run (or the ncu child) of a test that holds the GPU shared: it
    # lends the ancestor's hold, and goes alone once the other holders are done.
    gpu, ready, release = "g4", threading.Event(), threading.Event()

    def other():  # another worker's test, holding the GPU shared for a while
        with gpulock.hold(gpu, exclusive=False, nodeid="other.py::test_plain"):
            ready.set()
            release.wait(10)

    t = threading.Thread(target=other, daemon=True)
    t.start()
    assert ready.wait(5)
    with gpulock.hold(gpu, exclusive=False, timing=True, nodeid="outer.py::test_runs_a_child") \
            as held:
        proc = subprocess.Popen([sys.executable, "-c", CHILD, gpu], stdout=subprocess.PIPE,
                                text=True)
        assert proc.stdout.readline().strip() == "ready"
        time.sleep(0.5)
        assert proc.poll() is None, "the child went alone while another test held the GPU"
        release.set()
        out, _ = proc.communicate(timeout=30)  # the holders it saw, alone
        path = os.path.join(held.folder, f"waits.{held.token}.jsonl")
        waits = [json.loads(line) for line in open(path)]
    t.join(5)
    assert proc.returncode == 0
    recs = json.loads(out)
    assert [(r["nodeid"], r["exclusive"]) for r in recs if r["exclusive"]] == [
        ("child.py::test_timed", True)]
    assert [(w["kind"], w["nodeid"]) for w in waits] == [("alone", "child.py::test_timed")]
    assert waits[0]["wait_s"] >= 0.4 and waits[0]["held_s"] is not None


STAND_IN_GPU = """
import dataclasses
import pytest
from pytest_triton import state

@pytest.hookimpl(trylast=True)
def pytest_configure(config):
    st = state.get(config)
    st.runtime = dataclasses.replace(st.runtime, interpret=False, gpu_id="fake0")
"""

# The measure hook writes who holds the GPU while it times.
MEASURE = """
import json
from pytest_triton.process import gpulock
_measure = pytest_triton_measure

def pytest_triton_measure(config, request, fn, baseline, settings):
    with open("holders-while-timing.json", "w") as f:
        json.dump(gpulock.holders("fake0"), f)
    return _measure(config, request, fn, baseline, settings)
"""

TESTS = """
import json, os, time
from pytest_triton import perf_target
from pytest_triton.process import gpulock


def _wait_for(name):
    deadline = time.monotonic() + 15
    while not os.path.exists(name):
        assert time.monotonic() < deadline, f"{name} never came: the other test could not run"
        time.sleep(0.05)


@perf_target(max_ms=1.0)
def test_timed(triton_bench):
    # its compile and set-up: the GPU shared, and another worker's test runs meanwhile
    open("setting-up", "w").close()
    _wait_for("shared-ran")

    def fn():
        with open("fn-saw.json", "a") as f:
            f.write(json.dumps([r["exclusive"] for r in gpulock.holders("fake0")]) + "\\n")

    triton_bench(fn)


def test_shared():
    _wait_for("setting-up")
    open("shared-ran", "w").close()
"""


@pytest.mark.triton_no_gpu  # the inner run pretends a GPU; it runs under the interpreter
@pytest.mark.requires_plugin("pytest-xdist")
def test_a_perf_test_holds_the_gpu_alone_only_while_it_measures(pytester, monkeypatch):
    # On the H100 (-n 14) the first ~11 tests each waited 86 s in setup while the tests that hold
    # the GPU alone ran, from their setup to their teardown, child start-ups and compiles
    # included. Now a perf test shares the GPU until triton_bench measures.
    for name in ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_XDIST_TESTRUNUID"):
        monkeypatch.delenv(name, raising=False)
    pytester.makeconftest(_fake_gpu.CONFTEST + STAND_IN_GPU + MEASURE)
    pytester.makepyfile(test_k=TESTS)
    result = pytester.runpytest_subprocess("-n", "2", "-p", "no:cacheprovider", "--triton-perf",
                                           "--triton-interpret", "-p", "no:randomly")
    result.assert_outcomes(passed=2)
    timing_holders = json.loads((pytester.path / "holders-while-timing.json").read_text())
    assert [(r["nodeid"], r["exclusive"]) for r in timing_holders] == [
        ("test_k.py::test_timed", True)], timing_holders
    # fn ran first before the GPU was held alone (its kernels compile then), then while it was
    saw = [json.loads(line) for line in (pytester.path / "fn-saw.json").read_text().splitlines()]
    assert saw[0] and not any(saw[0]) and saw[-1] == [True], saw
    # the waits, per worker, in the terminal summary
    result.stdout.fnmatch_lines([
        f"*= {lockwaits.TITLE} =*",
        "gw0: waited * s in * takes, longest * s (*); held it alone * s in * parts",
        "gw1: waited * s in * takes, longest * s (*); held it alone * s in * parts",
        "longest wait * s: *; waits in all * s over 2 workers; the GPU held alone * s in 1 parts",
    ])


ONE_TIMED = """
import json
from pytest_triton import perf_target
from pytest_triton.process import gpulock


@perf_target(max_ms=1.0)
def test_timed(triton_bench):
    def fn():
        with open("fn-saw.json", "a") as f:
            f.write(json.dumps([r["exclusive"] for r in gpulock.holders("fake0")]) + "\\n")

    triton_bench(fn)
"""


@pytest.mark.triton_no_gpu  # the inner run pretends a GPU; it runs under the interpreter
@pytest.mark.requires_plugin("pytest-xdist")
@pytest.mark.parametrize("alone", [False, True], ids=["gpu-shared-by-workers", "gpu-of-its-own"])
def test_a_worker_with_a_gpu_of_its_own_compiles_and_tunes_once_holding_it_alone(
        pytester, monkeypatch, alone):
    # A first call while the GPU is shared tunes the autotuners, whose choices are then forgotten
    # and tuned again alone: wasted where no other worker of the run uses that GPU (measured in
    # docs/several-gpus.md). It still takes the lock (a worker started in place of a retired one
    # may come to share its GPU).
    for name in ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_XDIST_TESTRUNUID"):
        monkeypatch.delenv(name, raising=False)
    stand_in = STAND_IN_GPU.replace('gpu_id="fake0")', f'gpu_id="fake0", gpu_alone={alone})')
    pytester.makeconftest(_fake_gpu.CONFTEST + stand_in + MEASURE)
    pytester.makepyfile(test_k=ONE_TIMED)
    result = pytester.runpytest_subprocess("-n", "1", "-p", "no:cacheprovider", "--triton-perf",
                                           "--triton-interpret")
    result.assert_outcomes(passed=1)
    timing_holders = json.loads((pytester.path / "holders-while-timing.json").read_text())
    saw = [json.loads(line) for line in (pytester.path / "fn-saw.json").read_text().splitlines()]
    assert [r["exclusive"] for r in timing_holders] == [True]  # timed alone either way
    if alone:  # fn never ran before the GPU was held alone: one compile, one tuning
        assert saw and all(s == [True] for s in saw), saw
    else:  # the control: compiled first while shared (False), timed alone (True)
        assert saw[0] == [False] and saw[-1] == [True], saw


def test_a_bad_triton_exclusive_argument_errors_its_test_naming_it(pytester):
    pytester.makepyfile("""
        import pytest
        @pytest.mark.triton_exclusive(scope="sometimes")
        def test_bad(): pass
        def test_good(): pass
    """)
    result = pytester.runpytest("--triton-interpret", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(["*test_bad*: triton_exclusive(scope='sometimes'): expected "
                                 "triton_exclusive or triton_exclusive(scope=...) with scope one "
                                 "of 'test', 'timing'*"])


def test_the_summary_names_each_worker_and_the_longest_wait():
    waits = {"gw1": [{"test": "t.py::a", "kind": "shared", "wait_s": 0.5, "held_s": None},
                     {"test": "t.py::b", "kind": "alone", "wait_s": 2.0, "held_s": 1.5,
                      "nodeid": "inner.py::test_x"}],
             "gw0": [{"test": "t.py::c", "kind": "test", "wait_s": 0.0, "held_s": 3.0}]}
    assert lockwaits.summary_lines(waits) == [
        "gw0: waited 0.0 s in 1 takes, longest 0.0 s (t.py::c, to hold it alone); held it alone "
        "3.0 s in 1 parts",
        "gw1: waited 2.5 s in 2 takes, longest 2.0 s (t.py::b (its run's inner.py::test_x), to "
        "time alone); held it alone 1.5 s in 1 parts",
        "longest wait 2.0 s: t.py::b (its run's inner.py::test_x), to time alone; waits in all "
        "2.5 s over 2 workers; the GPU held alone 4.5 s in 2 parts",
    ]


class _Tuner:
    """Stands in for triton.autotune's Autotuner: benchmarks its configs on a key it has not seen."""
    def __init__(self, launch):
        self.configs, self.cache, self.fn, self.benched = [1, 2], {}, NS(), 0
        self._launch = launch

    def run(self, key):
        if key not in self.cache:
            for _ in self.configs:
                self._launch()
                self.benched += 1
            self.cache[key] = self.configs[0]
        self._launch()


def test_compiling_first_leaves_the_autotuning_to_the_timed_part(monkeypatch):
    # Outside the part held alone, the first call compiles, and an autotuner tunes: under other
    # workers' load, so its choice is forgotten and made again (its configs compiled by then)
    # once the GPU is held alone.
    hooks = []
    monkeypatch.setattr(timing.launch_hooks, "add_launch_hook", lambda h: hooks.append(h) or hooks.clear)

    def jit_run():  # what JITFunction.run's frame holds when Triton calls its launch hook
        grid_0, kernel = 1, NS(metadata=None)  # noqa: F841 - read from the frame
        for h in list(hooks):
            h(None)

    tuner, tuned_before = _Tuner(jit_run), _Tuner(jit_run)
    tuned_before.cache["k"] = 1  # tuned in an earlier test: its choice stays
    tuned = timing.compile_first([lambda: tuner.run("k"), lambda: tuned_before.run("k")])
    assert [(t is tuner, keys) for t, keys in tuned] == [(True, {"k"})]
    assert tuner.benched == 2 and not hooks  # the hook is removed
    timing.retune(tuned)
    tuner.run("k")
    assert tuner.benched == 4 and tuned_before.benched == 0


def test_holders_of_dead_processes_count_for_nothing(tmp_path):
    folder = str(tmp_path / "x.holders")
    os.makedirs(folder)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True).stdout.strip()
    lockfiles.record(folder, f"{dead}-1", "gone.py::test", False)
    lockfiles.touch(os.path.join(folder, f"want.{dead}-1-a"))
    lockfiles.record(folder, lockfiles.token(), "here.py::test", False)
    records, intents, lent = lockfiles.scan(folder)
    assert [r["nodeid"] for r in records.values()] == ["here.py::test"] and not intents and not lent


@pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="zombies are read from /proc")
def test_holders_that_exited_unwaited_for_count_for_nothing(tmp_path):
    # a zombie: exited (an xdist worker retiring with os._exit), its parent not yet waiting for it
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    folder = str(tmp_path / "z.holders")
    os.makedirs(folder)
    lockfiles.record(folder, f"{proc.pid}-1", "retired.py::test", False)
    lockfiles.touch(os.path.join(folder, f"want.{proc.pid}-1-a"))
    try:
        deadline = time.monotonic() + 20
        while lockfiles.scan(folder)[0]:
            assert time.monotonic() < deadline, "a zombie's hold still counts"
            time.sleep(0.05)
        with open(f"/proc/{proc.pid}/stat", "rb") as f:
            assert b") Z " in f.read()  # it was a zombie that stopped counting, not a reaped pid
        assert not lockfiles.scan(folder)[1]
    finally:
        proc.wait()
    # a live one counts (the control)
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        lockfiles.record(folder, f"{live.pid}-1", "live.py::test", False)
        assert [r["nodeid"] for r in lockfiles.scan(folder)[0].values()] == ["live.py::test"]
    finally:
        live.kill()
        live.wait()


def test_order_names_the_kinds(monkeypatch):
    # what order() sorts by comes from the markers and --triton-perf (the docstring's groups)
    state = NS(runtime=NS(interpret=False, gpu_id="0", gpu_alone=False), perf=True)
    monkeypatch.setattr(gpuholds.state, "get", lambda config: state)
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw0")

    def item(marks=(), target=None):
        found = {m.name: m for m in marks}
        stash = {gpuholds.record.RECORD_KEY: gpuholds.record.PerfRecord("t.py::x", target)} \
            if target else {}
        return NS(get_closest_marker=found.get, stash=stash, config=None, nodeid="t.py::x")

    exclusive = pytest.mark.triton_exclusive.mark
    assert gpuholds._wanted(item())[1] == "shared"
    assert gpuholds._wanted(item(target=object()))[1] == "timing"
    assert gpuholds._wanted(item([exclusive]))[1] == "test"
    assert gpuholds._wanted(item([exclusive.combined_with(
        pytest.mark.triton_exclusive(scope="timing").mark)]))[1] == "timing"
    assert gpuholds._wanted(item([pytest.mark.triton_no_gpu.mark]))[1] == "none"
