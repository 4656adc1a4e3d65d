"""A test that breaks its process fails alone, and the rest of the session runs: faults injected
through pytest_triton_synchronize (a fake sticky CUDA error), and a real segfault under Triton's
interpreter (an unmasked store far outside its tensor)."""

import json
import os
import sys
import textwrap
import types
import xml.etree.ElementTree as ET

import pytest
import torch

from pytest_triton.process.gpufaults import LaunchRecorder, classify

from ..perf.test_perf import FAKE_GPU

# Every fault here is injected or happens under the interpreter, in a run of its own: no test
# uses the GPU, and on a GPU machine they run while the tests that hold it alone do.
pytestmark = pytest.mark.triton_no_gpu

INJECT = '''
import pytest

def pytest_triton_synchronize(config, item):
    """Stands in for torch.cuda.synchronize(): the module's STICKY tests faulted asynchronously."""
    if item.name in getattr(item.module, "STICKY", ()):
        raise RuntimeError("CUDA error: an illegal memory access was encountered\\n"
                           "CUDA kernel errors might be asynchronously reported at some other API call")

@pytest.fixture
def breaks_in_teardown():
    yield
    raise RuntimeError("CUDA error: unspecified launch failure")
'''

# Under the interpreter a store 64 TB past a CPU tensor lands outside the address space: SIGSEGV.
STORE_FAR = '''
import triton
import triton.language as tl

@triton.jit
def _store_far(x_ptr, OFF: tl.constexpr):
    tl.store(x_ptr + OFF + tl.arange(0, 16), tl.zeros((16,), tl.float32))  # no mask
'''


@pytest.mark.parametrize("exc, expected", [
    (RuntimeError("CUDA error: an illegal memory access was encountered"), ("sticky", 700)),
    (RuntimeError("Triton Error [CUDA]: misaligned address"), ("sticky", 716)),
    (RuntimeError("CUDA error: unspecified launch failure"), ("sticky", 719)),
    (RuntimeError("CUDA error: device-side assert triggered"), ("sticky", 710)),
    (torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 1.00 TiB"), ("oom", 2)),
    (RuntimeError("CUDA error: invalid argument"), None),  # reported at the call, not sticky
    # Not CUDA errors: an exception that quotes one (e.g. an assertion about a log) is not one.
    (AssertionError("CUDA error: an illegal memory access was encountered"), None),
    (RuntimeError("expected 'CUDA error: misaligned address' in the log"), None),
])
def test_classify_tells_sticky_errors_from_others(exc, expected):
    err = classify(exc)
    assert (None if err is None else (err.kind, err.code)) == expected


def test_classify_follows_the_exception_chain():
    try:
        try:
            raise RuntimeError("CUDA error: an illegal instruction was encountered")
        except RuntimeError as inner:
            raise AssertionError("the output differs") from inner
    except AssertionError as outer:
        assert classify(outer).code == 715


def test_launch_recorder_names_the_last_launches_in_chains_and_single_hooks():
    from triton.knobs import HookChain

    chain_owner = types.SimpleNamespace(launch_enter_hook=HookChain())
    calls = []
    single_owner = types.SimpleNamespace(launch_enter_hook=calls.append)  # Triton 3.4: one callable
    launch = lambda name: types.SimpleNamespace(data={"name": name, "stream": 0})
    for owner in (chain_owner, single_owner):
        rec = LaunchRecorder()
        previous = owner.launch_enter_hook
        rec.install(owner)
        for i in range(7):
            owner.launch_enter_hook(launch(f"_k{i}"))
        assert rec.describe() == ("Triton launches in this test: 7; the last 5: _k2, _k3, _k4, "
                                  "_k5, _k6 (most recent last)")
        rec.uninstall()
        assert owner.launch_enter_hook is previous
    assert len(calls) == 7  # the hook that was there before still saw every launch
    rec.reset()
    assert rec.describe().startswith("no Triton launch was recorded")


def test_a_lost_context_fails_only_its_test_and_the_rest_runs_in_a_fresh_process(
        pytester, run_interpreted):
    pytester.makeconftest(INJECT + FAKE_GPU)
    pytester.makepyfile(test_k="""
        import os, warnings
        from pytest_triton import perf_target
        STICKY = ["test_bad"]
        FAKE = {"test_perf": (1.0, None)}
        def _pid(name):
            with open("pids.txt", "a") as f:
                f.write(f"{name} {os.getpid()}\\n")
        def test_a(): _pid("a")
        def test_bad(make_tensor): make_tensor(4)
        def test_c(): _pid("c")
        @perf_target(gbps=100)
        def test_perf(triton_bench): triton_bench(lambda: None, bytes=1e9)
        def test_warns(): warnings.warn(UserWarning("said in the continuation"))
        def test_fails(): assert 1 == 2
    """)
    result = run_interpreted("-p", "no:cacheprovider", "--triton-perf", "--junitxml=j.xml",
                             "--triton-perf-json=perf.json")
    result.assert_outcomes(passed=4, failed=2, warnings=1)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines([
        # on a GPU machine this (in-process) run may follow tests that left memory in this
        # process's allocator, which the line then adds: "(this process keeps the N GiB ...)"
        "pytest-triton: test_k.py::test_bad lost this process's CUDA context; the remaining 4 tests "
        "run in a fresh process*",
        "*_ test_bad _*",
        "GPUContextLost: CUDA error 700 in call: an illegal memory access was encountered. The "
        "error is sticky: this process's CUDA context is lost, and every later CUDA call in it "
        "would fail with the same error.",
        "It surfaced at pytest-triton's torch.cuda.synchronize() after the test's call: a kernel "
        "this test launched faulted asynchronously, and nothing in the test synchronised.",
        "*Any remaining tests run in a fresh process*",
        "Reproduce it alone: seed * (from --triton-seed 0 and the test id); replay (from any "
        "directory): pytest *test_k.py::test_bad --triton-seed 0:*. With CUDA_LAUNCH_BLOCKING=1 *",
        "*_ test_fails _*",
        "*said in the continuation*",
        "*= pytest-triton: 1 test broke the process it ran in =*",
        "test_k.py::test_bad: CUDA context lost in call (CUDA error 700, illegal address; no Triton "
        "launch recorded)",
    ])
    assert result.stdout.str().count("illegal memory access") == 1  # no cascade
    pids = dict(line.split() for line in (pytester.path / "pids.txt").read_text().splitlines())
    assert int(pids["a"]) == os.getpid() != int(pids["c"])  # in-process, then a child
    cases = {tc.get("name"): [c.tag for c in tc] for tc in ET.parse(pytester.path / "j.xml").iter("testcase")}
    assert cases == {"test_a": [], "test_bad": ["failure"], "test_c": [], "test_perf": ["properties"],
                     "test_warns": [], "test_fails": ["failure"]}
    doc = json.loads((pytester.path / "perf.json").read_text())
    assert [r["nodeid"] for r in doc["results"]] == ["test_k.py::test_perf"]
    assert [(f["nodeid"], f["kind"], f["when"]) for f in doc["faults"]] == [
        ("test_k.py::test_bad", "cuda_context_lost", "call")]


def test_out_of_memory_frees_the_failed_tests_tensors_before_the_next_test(pytester, run_interpreted):
    pytester.makepyfile("""
        import weakref, torch
        REF = []
        def test_oom():
            big = torch.empty(1 << 20)
            REF.append(weakref.ref(big))
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 1.00 TiB")
        def test_next():
            assert REF[0]() is None, "the failed test's tensor is still alive"
    """)
    result = run_interpreted("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*OutOfMemoryError: CUDA out of memory*"])
    # Negative control: without the plugin, pytest keeps the failed test's frame, and its tensor.
    result = pytester.runpytest("-p", "no:triton", "-p", "no:cacheprovider")
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines(["*the failed test's tensor is still alive*"])


def test_supervised_run_survives_a_segfault_under_the_interpreter(pytester, run_interpreted):
    pytester.makepyfile(test_seg=STORE_FAR + textwrap.dedent("""
        def test_before(): pass
        def test_segfaults(make_tensor):
            _store_far[(1,)](make_tensor(16), 1 << 44)
        def test_after(): pass
    """))
    result = run_interpreted("-p", "no:cacheprovider", "--triton-supervise")
    result.assert_outcomes(passed=2, failed=1)
    assert result.ret == pytest.ExitCode.TESTS_FAILED  # not 139
    result.stdout.fnmatch_lines([
        "pytest-triton: tests run in a supervised child process (--triton-supervise=on)*",
        "pytest-triton: the test process died in test_seg.py::test_segfaults (signal SIGSEGV, *); "
        "the remaining test runs in a fresh process",
        "ProcessCrashed: the process running this test died (signal SIGSEGV, *).",
        "Under Triton's interpreter this is almost always a tl.load or tl.store outside its tensor*",
        "Reproduce it alone: seed * replay (from any directory): pytest *test_seg.py::test_segfaults "
        "--triton-seed 0:*.",
        "Where it died (faulthandler, most recent call first):",
        '*File "*test_seg.py", line 6 in _store_far',
        '*File "*test_seg.py", line 10 in test_segfaults',
        "test_seg.py::test_segfaults: process crashed in call (signal SIGSEGV, *)",
    ])


SEGFAULTING = STORE_FAR + textwrap.dedent("""
    def test_before(): pass
    def test_segfaults(make_tensor):
        _store_far[(1,)](make_tensor(16), 1 << 44)
    def test_after(): pass
""")


def test_by_default_a_run_of_its_own_under_the_interpreter_is_supervised(pytester, monkeypatch):
    # A user's `pytest` on a CPU machine: a run of its own (this test's PYTEST_CURRENT_TEST
    # removed), in a subprocess, under the interpreter. The segfault fails its test alone.
    monkeypatch.delenv("PYTEST_CURRENT_TEST")
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    pytester.makepyfile(test_seg=SEGFAULTING)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--triton-interpret")
    result.assert_outcomes(passed=2, failed=1)
    assert result.ret == pytest.ExitCode.TESTS_FAILED  # not 139
    result.stdout.fnmatch_lines([
        "pytest-triton: tests run in a supervised child process (--triton-supervise=auto, under "
        "Triton's interpreter)*",
        "ProcessCrashed: the process running this test died (signal SIGSEGV, *).",
    ])
    # Negative control: switched off, the same run dies with the segfault and reports nothing.
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--triton-interpret",
                                           "--triton-supervise=off")
    assert result.ret not in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED)
    assert "supervised child" not in result.stdout.str()


def test_supervised_reports_keep_skips_junit_and_fixed_seeds(pytester, monkeypatch):
    # A supervised run's reports come back from its child as JSON: a skip's (path, line, reason)
    # must be a tuple again for -rs and --junitxml, and BASE:SEED must reach the child.
    monkeypatch.delenv("PYTEST_CURRENT_TEST")
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    pytester.makepyfile(test_s="""
        import pytest
        def test_skipped(): pytest.skip("not today")
        def test_seed(make_tensor):
            assert False, make_tensor.seed
    """)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--triton-interpret", "-ra",
                                           "--junitxml=j.xml", "--triton-seed", "0:12345")
    result.assert_outcomes(passed=0, failed=1, skipped=1)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines([
        "pytest-triton: tests run in a supervised child process*",
        "*AssertionError: 12345*",
        "SKIPPED [[]1[]] test_s.py:2: not today",
        "FAILED test_s.py::test_seed - AssertionError: 12345*",
    ])
    assert "INTERNALERROR" not in result.stdout.str() + result.stderr.str()
    suite = ET.parse(pytester.path / "j.xml").getroot().find("testsuite")
    assert (suite.get("tests"), suite.get("skipped"), suite.get("failures")) == ("2", "1", "1")


def test_a_crash_report_replays_from_anywhere_with_the_fixed_seed(pytester, monkeypatch):
    monkeypatch.delenv("PYTEST_CURRENT_TEST")
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    pytester.makepyfile(test_seg=SEGFAULTING)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--triton-interpret",
                                           "--triton-seed", "0:123")
    result.assert_outcomes(passed=2, failed=1)
    path = pytester.path / "test_seg.py"
    result.stdout.fnmatch_lines([
        f"Reproduce it alone: seed 123 (fixed by --triton-seed 0:123); replay (from any "
        f"directory): pytest {path}::test_segfaults --triton-seed 0:123."])


@pytest.mark.parametrize("args, env, why", [
    ((), {"PYTEST_CURRENT_TEST": "outer.py::test (call)"}, None),  # inside another test
    (("--pdb",), {}, None),
    (("--triton-supervise=off",), {}, None),
    (("--triton-supervise=on",), {"PYTEST_CURRENT_TEST": "outer.py::test (call)"},
     "--triton-supervise=on"),
])
def test_auto_supervision_stays_off_where_a_child_would_change_the_run(pytester, monkeypatch, args,
                                                                       env, why):
    monkeypatch.delenv("PYTEST_CURRENT_TEST")
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    pytester.makepyfile(test_ok="def test_ok(): pass")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--triton-interpret", *args)
    result.assert_outcomes(passed=1)
    if why is None:
        assert "supervised child" not in result.stdout.str()
    else:
        result.stdout.fnmatch_lines([f"pytest-triton: tests run in a supervised child process ({why})*"])


def test_auto_supervision_stays_off_for_plugin_objects_given_to_pytest_main(pytester, monkeypatch):
    # A script calling pytest.main(plugins=[...]): a child could not receive the objects.
    monkeypatch.delenv("PYTEST_CURRENT_TEST")
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    pytester.makepyfile(test_ok="def test_ok(): pass")
    pytester.makepyfile(run_main="""
        import sys, pytest
        class Seen:
            def pytest_sessionfinish(self, session):
                print("the plugin object saw", session.testscollected, "test")
        sys.exit(pytest.main(["-p", "no:cacheprovider", "--triton-interpret", "test_ok.py"],
                             plugins=[Seen()]))
    """)
    result = pytester.run(sys.executable, "run_main.py")
    assert result.ret == 0
    result.assert_outcomes(passed=1)
    assert "the plugin object saw 1 test" in result.stdout.str()
    assert "supervised child" not in result.stdout.str()


@pytest.mark.requires_plugin("pytest-benchmark")
def test_auto_supervision_leaves_pytest_benchmark_results_where_they_are(pytester, monkeypatch):
    monkeypatch.delenv("PYTEST_CURRENT_TEST")
    # pytest-benchmark switches itself off where PYTEST_XDIST_WORKER is set (this session may be
    # an xdist worker); the inner run is not one.
    for name in ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_XDIST_TESTRUNUID"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    pytester.makepyfile(test_b="""
        def test_plain(): pass
        def test_timed(benchmark): benchmark(sum, range(10))
    """)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--triton-interpret",
                                           "--benchmark-json", "b.json")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines([
        "pytest-triton: not supervised although under Triton's interpreter: 1 test uses "
        "pytest-benchmark's benchmark fixture*"])
    assert "supervised child" not in result.stdout.str()
    doc = json.loads((pytester.path / "b.json").read_text())
    assert [b["name"] for b in doc["benchmarks"]] == ["test_timed"]


@pytest.fixture
def top_level(pytester, monkeypatch):
    """Run pytest as a user's own `python -m pytest` on a CPU machine (a run of its own, under the
    interpreter: supervised by default); returns (result, its combined output)."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    for name in ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_XDIST_TESTRUNUID"):
        monkeypatch.delenv(name, raising=False)

    def run(*args):
        # here, in the test's call: pytest sets PYTEST_CURRENT_TEST again at each phase
        monkeypatch.delenv("PYTEST_CURRENT_TEST", raising=False)
        result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--triton-interpret", *args)
        return result, result.stdout.str() + result.stderr.str()

    return run


def test_supervised_pytest_exit_and_keyboard_interrupt_stop_the_run_as_in_process(pytester, top_level):
    pytester.makepyfile(test_exit="""
        import pytest
        def test_a(): pass
        def test_exit(): pytest.exit("stop here", returncode=3)
        def test_after(): pass
    """)
    result, out = top_level("test_exit.py")
    assert "supervised child" in out
    assert result.ret == 3
    assert "!!! _pytest.outcomes.Exit: stop here !!!" in out
    assert "ProcessCrashed" not in out and "test_after" not in out.split("collected")[1]
    pytester.makepyfile(test_kbi="""
        def test_a(): pass
        def test_kbi(): raise KeyboardInterrupt
        def test_after(): pass
    """)
    result, out = top_level("test_kbi.py")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    assert "ProcessCrashed" not in out and "KeyboardInterrupt" in out


def test_supervised_maxfail_lets_session_fixtures_tear_down(pytester, top_level):
    pytester.makepyfile(test_td="""
        import pathlib, time, pytest
        @pytest.fixture(scope="session")
        def res():
            yield 1
            time.sleep(0.5)
            pathlib.Path("teardown_ran.txt").write_text("done")
        def test_a(res): assert 0
        def test_b(res): pass
    """)
    result, out = top_level("-x")
    assert "supervised child" in out
    result.assert_outcomes(failed=1)
    assert (pytester.path / "teardown_ran.txt").read_text() == "done"


def test_supervised_collection_errors_count_once_and_files_are_closed(pytester, top_level):
    pytester.makepyfile(test_ok="def test_ok(): pass", test_bad="import nonexistent_module_xyz")
    result, out = top_level("--continue-on-collection-errors", "-W", "error")
    assert "supervised child" in out
    result.assert_outcomes(passed=1, errors=1)
    assert out.count("ERROR collecting test_bad.py") == 1
    assert "unclosed file" not in out


@pytest.mark.parametrize("args, files, why", [
    (("--setup-show",), {}, "--setup-show shows this process's fixtures"),
    (("-o", "log_cli=true"), {}, "live logging (log_cli)"),
    ((), {"test_prop": "def test_p(record_testsuite_property): record_testsuite_property('A', 1)"},
     "record_testsuite_property write to this process's --junitxml"),
])
def test_auto_supervision_stays_off_for_what_lives_in_this_process(pytester, top_level, args,
                                                                     files, why):
    pytester.makepyfile(test_ok="def test_ok(): pass", **files)
    result, out = top_level(*args)
    assert result.ret == pytest.ExitCode.OK, out
    assert "supervised child" not in out and "INTERNALERROR" not in out
    if files:
        assert f"not supervised although under Triton's interpreter: {why}" in out
    else:  # decided before collection: the header says nothing, and the run is in-process
        assert "ProcessCrashed" not in out


def test_auto_supervision_stays_off_for_pytest_main_from_a_program(pytester, monkeypatch):
    # The program's sys.path (a src/ layout put on it by hand) would not reach a child.
    monkeypatch.delenv("PYTEST_CURRENT_TEST")
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    pytester.mkdir("src").joinpath("mylib.py").write_text("VALUE = 42\n")
    pytester.mkdir("tests").joinpath("test_lib.py").write_text(
        "import mylib\ndef test_v(): assert mylib.VALUE == 42\n")
    pytester.makepyfile(run_main="""
        import os, sys, pytest
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "src"))
        sys.exit(pytest.main(["-q", "-p", "no:cacheprovider", "--triton-interpret", "tests"]))
    """)
    result = pytester.run(sys.executable, "run_main.py")
    assert result.ret == 0, result.stdout.str()
    assert "supervised child" not in result.stdout.str()


def test_supervise_takes_its_value_with_an_equals_sign(pytester):
    pytester.makepyfile(test_ok="def test_ok(): pass")
    result = pytester.runpytest_subprocess("--triton-supervise", "off", "test_ok.py")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--triton-supervise off: 'off' was read as a test path*"
                                 "--triton-supervise=off*"])
    result = pytester.runpytest_subprocess("--triton-supervise=sometimes", "test_ok.py")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--triton-supervise: ignored explicit argument 'sometimes'*"])


@pytest.mark.requires_plugin("pytest-xdist")
def test_xdist_workers_retire_without_using_the_restart_budget(pytester):
    pytester.makeconftest(INJECT)
    pytester.makepyfile(test_x=STORE_FAR + textwrap.dedent("""
        STICKY = ["test_bad_sync"]
        def test_1(): pass
        def test_bad_sync(): pass
        def test_2(): pass
        def test_bad_in_body():
            raise RuntimeError("CUDA error: misaligned address")
        def test_3(): pass
        def test_bad_teardown(breaks_in_teardown): pass
        def test_segfaults(make_tensor):
            _store_far[(1,)](make_tensor(16), 1 << 44)
        def test_4(): pass
    """))
    # Three retirements and one crash: with a budget of one restart, the run goes on only if the
    # retirements are not counted.
    result = pytester.runpytest_subprocess("-n", "2", "--max-worker-restart", "1", "--junitxml=j.xml",
                                           "-p", "no:cacheprovider", "--triton-interpret")
    result.assert_outcomes(passed=5, failed=3, errors=1)
    text = result.stdout.str()
    assert "maximum crashed workers" not in text
    result.stdout.fnmatch_lines_random([
        "*pytest-triton: retired after test_x.py::test_bad_sync lost its CUDA context; xdist "
        "replaces it (not counted against --max-worker-restart)",
        "*raise RuntimeError(\"CUDA error: misaligned address\")",
        "E * pytest_triton.GPUContextLost: CUDA error 716 in call: misaligned address. The error is sticky*",
        "E * pytest_triton.GPUContextLost: CUDA error 719 in teardown: unspecified launch failure. The error "
        "is sticky*",
        "ProcessCrashed: the process running this test died (xdist worker gw* went down*",
        "test_x.py::test_segfaults: process crashed in call (xdist worker gw* went down)",
        "*= pytest-triton: 4 tests broke the process they ran in =*",
    ])
    cases = {tc.get("name"): sorted(c.tag for c in tc) for tc in ET.parse(pytester.path / "j.xml").iter("testcase")}
    assert cases == {"test_1": [], "test_2": [], "test_3": [], "test_4": [], "test_bad_sync": ["failure"],
                     "test_bad_in_body": ["failure"], "test_bad_teardown": ["error"],
                     "test_segfaults": ["failure"]}


def test_an_explain_capture_keeps_the_fault_recorder_on_with_a_single_callable_hook():
    # Triton 3.4 keeps one callable as its launch hook: a capture that set its own recorder there
    # replaced the fault recorder for the capture's duration, so a fault then was blamed on no
    # launch. The one adapter chains instead, and unwinds in any order.
    from pytest_triton.env import launch_hooks

    seen = []
    owner = types.SimpleNamespace(launch_enter_hook=None)
    rec = LaunchRecorder()
    rec.install(owner)
    remove = launch_hooks.add_launch_hook(seen.append, owner)
    owner.launch_enter_hook(types.SimpleNamespace(data={"name": "_k"}))
    assert rec.count == 1 and len(seen) == 1
    rec.uninstall()  # removed first, though chained under the capture's hook
    owner.launch_enter_hook(types.SimpleNamespace(data={"name": "_k"}))
    assert rec.count == 1 and len(seen) == 2
    remove()
    assert owner.launch_enter_hook is None or owner.launch_enter_hook(
        types.SimpleNamespace(data={"name": "_k"})) is None and len(seen) == 2
