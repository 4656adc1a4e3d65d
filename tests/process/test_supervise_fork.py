"""Supervision under Triton's interpreter forks its children after collection (no second start-up),
and falls back to a fresh process where a fork is not safe."""

import json
import os
import shutil
import signal
import textwrap
import time
import xml.etree.ElementTree as ET

import pytest

from .test_faults import INJECT, STORE_FAR

pytestmark = pytest.mark.triton_no_gpu  # every run here is under the interpreter, of its own

# Each import of the test module and each test's process, written down: a forked child imports
# nothing again; a fresh `python -m pytest` child imports and collects the module once more.
PIDS = '''
import os
with open("imports.txt", "a") as _f:
    _f.write(f"{os.getpid()}\\n")

def _ran(name):
    with open("ran.txt", "a") as f:
        f.write(f"{name} {os.getpid()} {os.getppid()}\\n")
'''


@pytest.fixture
def top_level(pytester, monkeypatch):
    """A user's own `python -m pytest` on a CPU machine: supervised by default. Returns (result,
    its combined output)."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    for name in ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_XDIST_TESTRUNUID"):
        monkeypatch.delenv(name, raising=False)

    def run(*args, timeout=None):
        monkeypatch.delenv("PYTEST_CURRENT_TEST", raising=False)
        result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--triton-interpret", *args,
                                               timeout=timeout)
        return result, result.stdout.str() + result.stderr.str()

    return run


def _ran(pytester):
    return {name: (int(pid), int(ppid)) for name, pid, ppid in
            (line.split() for line in (pytester.path / "ran.txt").read_text().splitlines())}


def test_the_supervised_children_are_forked_after_collection(pytester, top_level):
    pytester.makeconftest(INJECT)
    pytester.makepyfile(test_f=STORE_FAR + PIDS + textwrap.dedent("""
        STICKY = ["test_loses_context"]
        def test_a(): _ran("a")
        def test_segfaults(make_tensor):
            _ran("segfaults")
            _store_far[(1,)](make_tensor(16), 1 << 44)
        def test_b(): _ran("b")
        def test_loses_context(): _ran("loses_context")
        def test_c(): _ran("c")
    """))
    result, out = top_level("--junitxml=j.xml")
    result.assert_outcomes(passed=3, failed=2)
    assert "fresh pytest process" not in out
    ran = _ran(pytester)
    parent = int((pytester.path / "imports.txt").read_text().split()[0])
    # collected once, in the parent; every test ran in a child of it
    assert (pytester.path / "imports.txt").read_text().split() == [str(parent)]
    assert {ppid for _, ppid in ran.values()} == {parent}
    assert parent not in {pid for pid, _ in ran.values()}
    # a new child after the crash, and after the lost context (the child retired)
    assert ran["a"][0] == ran["segfaults"][0] != ran["b"][0] == ran["loses_context"][0] != ran["c"][0]
    cases = {tc.get("name"): [c.tag for c in tc]
             for tc in ET.parse(pytester.path / "j.xml").iter("testcase")}
    assert cases == {"test_a": [], "test_segfaults": ["failure"], "test_b": [],
                     "test_loses_context": ["failure"], "test_c": []}


def test_a_crashed_tests_output_is_in_its_report_and_not_the_next_tests(pytester, top_level):
    pytester.makepyfile(test_out=STORE_FAR + textwrap.dedent("""
        def test_segfaults(make_tensor):
            print("printed before the crash")
            _store_far[(1,)](make_tensor(16), 1 << 44)
        def test_next():
            print("printed by the next test")
            assert False
    """))
    result, out = top_level()
    result.assert_outcomes(failed=2)
    crash, nxt = out.split("_ test_next _")
    assert "Captured stdout call" in crash and "printed before the crash" in crash
    assert "printed by the next test" in nxt and "printed before the crash" not in nxt


def test_every_child_puts_tmp_path_under_the_one_base_directory(pytester, top_level):
    pytester.makepyfile(test_tmp=STORE_FAR + textwrap.dedent("""
        def test_a(tmp_path):
            (tmp_path / "a").write_text("kept")
            with open("tmp_paths.txt", "a") as f:
                f.write(f"{tmp_path}\\n")
        def test_segfaults(make_tensor):
            _store_far[(1,)](make_tensor(16), 1 << 44)
        def test_b(tmp_path):
            with open("tmp_paths.txt", "a") as f:
                f.write(f"{tmp_path}\\n")
    """))
    base = pytester.path / "base"
    result, out = top_level(f"--basetemp={base}")
    result.assert_outcomes(passed=2, failed=1)
    paths = (pytester.path / "tmp_paths.txt").read_text().split()
    assert [os.path.dirname(p) for p in paths] == [str(base.resolve())] * 2
    # the child after the crash did not make the base directory again, wiping test_a's
    assert (base / os.path.basename(paths[0]) / "a").read_text() == "kept"


def test_a_thread_started_before_the_tests_makes_the_child_a_fresh_process(pytester, top_level):
    # torch's OpenMP pool, started by a large CPU op at collection, does not survive fork: a
    # forked child's own parallel op would hang. The run must finish, in a fresh child.
    pytester.makepyfile(test_omp=PIDS + textwrap.dedent("""
        import threading, time, torch
        threading.Thread(target=time.sleep, args=(60,), daemon=True).start()
        X = torch.randn(2000, 2000)
        torch.exp(X)
        def test_parallel_op():
            _ran("op")
            torch.exp(X)
    """))
    result, out = top_level(timeout=120)
    result.assert_outcomes(passed=1)
    assert ("pytest-triton: the supervised child is a fresh pytest process, not a fork of this "
            "one: this process started ") in out
    assert len((pytester.path / "imports.txt").read_text().split()) == 2  # collected again


def test_supervised_stepwise_stops_as_in_process(pytester, monkeypatch):
    # --sw stops the run (shouldstop) after a failure: the same exit status and message supervised.
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    pytester.makepyfile(test_sw="""
        def test_a(): pass
        def test_b(): assert False
        def test_c(): pass
    """)
    runs = {}
    for mode in ("auto", "off"):
        monkeypatch.delenv("PYTEST_CURRENT_TEST", raising=False)
        result = pytester.runpytest_subprocess("--triton-interpret", "--sw",
                                               f"--triton-supervise={mode}")
        runs[mode] = result
        result.assert_outcomes(passed=1, failed=1)
        shutil.rmtree(pytester.path / ".pytest_cache", ignore_errors=True)  # stepwise's memory
    assert runs["auto"].ret == runs["off"].ret == pytest.ExitCode.INTERRUPTED
    assert "supervised child" in runs["auto"].stdout.str()
    for result in runs.values():
        result.stdout.fnmatch_lines(["*Interrupted: Test failed, continuing from this test next run*"])


def test_a_forked_child_ends_when_its_parent_is_killed(pytester, top_level):
    # A CI job's timeout kills pytest: the child it forked must not run on, unwatched.
    pytester.makepyfile(test_orphan="""
        import os, signal, time
        def test_kills_its_parent():
            with open("child.pid", "w") as f:
                f.write(str(os.getpid()))
            os.kill(os.getppid(), signal.SIGKILL)
            time.sleep(60)
    """)
    result, out = top_level(timeout=60)
    assert result.ret == -signal.SIGKILL
    child = int((pytester.path / "child.pid").read_text())
    deadline = time.monotonic() + 10
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.1)
    alive = _alive(child)
    if alive:
        os.kill(child, signal.SIGKILL)
    assert not alive, "the forked child outlived its parent"


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ", 1)[1][0] != "Z"  # a zombie has ended
    except OSError:
        return False


SLOW = """
    import time
    def test_1(): _ran("1"); time.sleep(1)
    def test_2(): _ran("2"); time.sleep(1)
    def test_3(): _ran("3"); time.sleep(1)
"""


@pytest.mark.requires_plugin("pytest-timeout")
def test_a_per_test_timeout_times_each_test_not_the_supervised_run(pytester, top_level):
    # Run from the first test's protocol, the children ran inside its pytest-timeout timer,
    # which failed the whole run (INTERNALERROR) once the run outlasted one test's limit.
    pytester.makepyfile(test_slow=PIDS + textwrap.dedent(SLOW))
    result, out = top_level("--timeout=2")
    result.assert_outcomes(passed=3)
    assert "INTERNALERROR" not in out and "Timeout" not in out
    parent = int((pytester.path / "imports.txt").read_text())
    assert {ppid for _, ppid in _ran(pytester).values()} == {parent}  # supervised: in a child


@pytest.mark.requires_plugin("pytest-timeout")
def test_a_per_test_timeout_times_each_test_after_a_lost_context(pytester, top_level):
    # The same after a (faked) lost CUDA context, in a run of its own that is not supervised:
    # the rest runs in a fresh process after pytest's loop, not inside test_1's timer.
    pytester.makeconftest(INJECT)
    pytester.makepyfile(test_lost=PIDS + "STICKY = ['test_bad']\ndef test_bad(): pass\n"
                        + textwrap.dedent(SLOW))
    result, out = top_level("--timeout=2", "--triton-supervise=off")
    result.assert_outcomes(passed=3, failed=1)
    parent = int((pytester.path / "imports.txt").read_text().split()[0])
    assert parent not in {pid for pid, _ in _ran(pytester).values()}  # in the fresh process
    result.stdout.fnmatch_lines(["pytest-triton: test_lost.py::test_bad lost this process's CUDA "
                                 "context; the remaining 3 tests run in a fresh process"])
    assert "INTERNALERROR" not in out and "Timeout" not in out


@pytest.mark.requires_plugin("pytest-reportlog")
def test_report_log_has_each_report_once(pytester, top_level):
    # pytest-reportlog writes each report as it arrives: a forked child has its plugin too, and
    # must not write the reports the parent writes again when it replays them.
    pytester.makepyfile(test_rl=STORE_FAR + textwrap.dedent("""
        def test_before(): pass
        def test_segfaults(make_tensor):
            _store_far[(1,)](make_tensor(16), 1 << 44)
        def test_after(): pass
    """))
    result, out = top_level("--report-log=log.jsonl")
    result.assert_outcomes(passed=2, failed=1)
    reports = [(r["nodeid"], r["when"]) for r in map(json.loads, (pytester.path / "log.jsonl")
               .read_text().splitlines()) if r["$report_type"] == "TestReport"]
    assert reports == [("test_rl.py::test_before", w) for w in ("setup", "call", "teardown")] + [
        ("test_rl.py::test_segfaults", "setup"), ("test_rl.py::test_segfaults", "call")] + [
        ("test_rl.py::test_after", w) for w in ("setup", "call", "teardown")]
