"""The judge's checks of the timed call (judge/timedcall.py, trace.py's floor, probe.py), on the
cheats of cheats.py: each caught with a message naming its exploit; honest twins pass. Inner runs
with a stand-in GPU whose measure hook calls fn (so the plugin's hookwrapper watches the call as
it watches a real one), and dry runs (no GPU: one untimed call, through pytest_triton_dry_call)."""

import pathlib

import pytest

from tests.correctness import _fake_gpu

ROOT = pathlib.Path(__file__).parents[2]


CHEATS = """
import time
import torch
import pytest
from pytest_triton import perf_target
from tests.judge import cheats

MS = {"test_geomean_collapse[100]": 1e-7}

@pytest.fixture
def helper():
    h = cheats.Helper()
    yield h
    h.close()

@perf_target(max_ms=10)
def test_relu_mutating(make_tensor, triton_bench):
    x = make_tensor(1000)
    out = torch.empty_like(x)
    triton_bench(lambda: cheats.relu_mutating(x, out=out))

@perf_target(max_ms=10)
def test_patching_timer(make_tensor, triton_bench):
    x = make_tensor(100)
    out = torch.empty_like(x)
    triton_bench(lambda: cheats.relu_patching_timer(x, out))

@perf_target(max_ms=10)
def test_patching_stats(make_tensor, triton_bench):
    x = make_tensor(100)
    out = torch.empty_like(x)
    triton_bench(lambda: cheats.relu_patching_stats(x, out))

@perf_target(max_ms=10)
def test_thread(make_tensor, triton_bench, helper):
    x = make_tensor(100)
    out = torch.empty_like(x)
    triton_bench(lambda: helper.relu_in_thread(x, out))

@perf_target(max_ms=10)
def test_process(make_tensor, triton_bench, helper):
    x = make_tensor(100)
    out = torch.empty_like(x)
    triton_bench(lambda: helper.relu_with_process(x, out))

@perf_target(max_ms=10)
def test_lazy(make_tensor, triton_bench):
    x = make_tensor(100)
    triton_bench(lambda: cheats.relu_lazy(x))

@perf_target(max_ms=10)
def test_aliased(make_tensor, triton_bench):
    x = make_tensor(100)
    triton_bench(lambda: cheats.copy_aliased(x))

@perf_target(geomean_speedup=1.0)
@pytest.mark.parametrize("n", [100])
def test_geomean_collapse(make_tensor, triton_bench, n):
    x = make_tensor(n)
    triton_bench(lambda: cheats.relu(x), baseline=lambda: torch.relu(x), name=str(n))

# --- honest twins ---

@perf_target(max_ms=10)
def test_relu(make_tensor, triton_bench):
    x = make_tensor(1000)
    out = torch.empty_like(x)
    triton_bench(lambda: cheats.relu(x, out=out), baseline=lambda: torch.relu(x))
    torch.testing.assert_close(out, torch.relu(x))

@perf_target(max_ms=10)
def test_relu_inplace_declared(make_tensor, triton_bench):
    x = make_tensor(1000)
    triton_bench(lambda: cheats.relu_(x), inplace=["x"])

@perf_target(max_ms=10)
def test_relu_returning_its_output(make_tensor, triton_bench):
    x = make_tensor(1000)
    triton_bench(lambda: cheats.relu(x))
"""

IMPORT_PATCH = """
import time
import torch
from pytest_triton import perf_target
from tests.judge import cheats

time.perf_counter = lambda: 0.0  # replaced when the test module is imported

@perf_target(max_ms=10)
def test_k(make_tensor, triton_bench):
    x = make_tensor(100)
    triton_bench(lambda: cheats.relu(x))
"""


@pytest.fixture(autouse=True)
def _restore_what_cheats_replace(monkeypatch):
    """The inner runs share this process: what a cheat replaced where no judge put it back
    (--triton-judge=off) is put back for the next test here."""
    import time

    import torch

    from pytest_triton.perf import stats

    for owner, name in ((stats, "summarize"), (torch.cuda.Event, "elapsed_time"),
                        (time, "perf_counter")):
        monkeypatch.setattr(owner, name, getattr(owner, name))


@pytest.fixture
def run(pytester, run_interpreted_fresh):
    def go(body, *args, gpu=True):
        if gpu:
            pytester.makeconftest(_fake_gpu.CONFTEST)
        pytester.makepyfile(test_k=body)
        return run_interpreted_fresh("-p", "no:cacheprovider", "--rootdir", str(pytester.path),
                                     "-o", f"pythonpath={ROOT}", "--triton-supervise=off",
                                     *(["--triton-perf"] if gpu else []), "-rA", *args)
    return go


EXPECTED = {
    "test_relu_mutating": ["*input mutation: 1 input changed after a kernel received it*",
                           "  x (float32 (1000,), made by make_tensor at test_k.py:*): * elements "
                           "changed; the first at * (after the timed call; found at the end of "
                           "the timed call)"],
    "test_patching_timer": ["*timer tampering: 1 function the timing or its statistics rely on was "
                            "replaced (during the timed call):*",
                            "*torch.cuda.Event.elapsed_time is relu_patching_timer.<locals>.<lambda> "
                            "at *cheats.py:*"],
    "test_patching_stats": ["*timer tampering: 1 function*",
                            "*pytest_triton.perf.stats.summarize is relu_patching_stats.<locals>."
                            "summarize at *"],
    "test_thread": ["*extra workers: the timed call started 1 thread or process still running "
                    "after it: thread 'cheat-worker' (daemon), running *work*"],
    "test_process": ["*extra workers: the timed call started 1 thread or process still running "
                     "after it: process * (* -c import time; time.sleep(60))*"],
    "test_lazy": ["*lazy output: what the timed call's fn returns is a tests.judge.cheats.Lazy*"],
    "test_aliased": ["*aliased output: what the timed call's fn returns is (a view of) its input x, "
                     "unchanged*"],
    "test_geomean_collapse": ["*geomean collapse: *test_geomean_collapse[[]100[]][[]100[]] measured "
                              "0.0001 us per call, less than launching one kernel takes (0.5 us)*"],
}
HONEST = ("test_relu", "test_relu_inplace_declared", "test_relu_returning_its_output")


def test_each_timed_call_cheat_is_caught_naming_its_exploit(run):
    result = run(CHEATS)
    result.assert_outcomes(failed=len(EXPECTED), passed=len(HONEST))
    out = result.stdout.str()
    for test, lines in EXPECTED.items():
        assert f"FAILED test_k.py::{test}" in out, test
        result.stdout.fnmatch_lines(lines)
    for honest in HONEST:
        assert f"PASSED test_k.py::{honest}" in out, honest


def test_without_the_judge_every_timed_call_cheat_passes(run):
    result = run(CHEATS, "--triton-judge=off")
    result.assert_outcomes(passed=len(EXPECTED) + len(HONEST))


def test_a_timer_replaced_when_the_module_was_imported_is_found_before_the_timed_call(run):
    result = run(IMPORT_PATCH)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*timer tampering: 1 function * was replaced (before the timed "
                                 "call):*", "*time.perf_counter is <lambda> at *test_k.py:6*"])


def test_the_dry_run_call_is_watched_too(run):
    # no GPU to time on: triton_bench calls fn once, through pytest_triton_dry_call
    result = run(CHEATS.replace('MS = {"test_geomean_collapse[100]": 1e-7}', "MS = {}"), gpu=False)
    # a dry run passes as a skip (its targets unchecked); the floor needs a time, which it has not
    result.assert_outcomes(failed=len(EXPECTED) - 1, skipped=len(HONEST) + 1)
    result.stdout.fnmatch_lines(["*input mutation*", "*x (float32 (1000,)*(after the dry run's "
                                 "call; found at the end of the dry run's call)"])


JUDGED = """
import torch
import pytest
from pytest_triton import perf_target
from tests.judge import cheats

memo = cheats.Memo()

@perf_target(max_ms=10)
def test_cached(make_tensor, triton_bench):
    x = make_tensor(1000)
    out = torch.empty_like(x)
    triton_bench(lambda: memo.relu(x, out=out))

@perf_target(max_ms=10)
def test_loss_like(make_tensor, triton_bench):
    # honest: FlagGems' bf16 cross-entropy on an H100 was called cached before the second look
    x = make_tensor(4096)
    triton_bench(lambda: cheats.loss_like(x))

@perf_target(max_ms=10)
def test_mutating_an_input_it_did_not_make(triton_bench):
    x = torch.randn(1000)  # not make_tensor's: only the probe sees what the call writes
    out = torch.empty_like(x)
    triton_bench(lambda: cheats.relu_mutating(x, out=out))

@perf_target(geomean_speedup=1.0)
def test_geomean_without_bytes(make_tensor, triton_bench):
    x = make_tensor(100)
    triton_bench(lambda: cheats.relu(x), baseline=lambda: torch.relu(x))

@perf_target(max_ms=10)
def test_relu(triton_bench):
    x = torch.randn(1000)
    out = torch.empty_like(x)
    triton_bench(lambda: cheats.relu(x, out=out))

@perf_target(max_ms=10)
def test_relu_inplace_declared(triton_bench):
    x = torch.randn(1000)
    triton_bench(lambda: cheats.relu_(x), inplace=["x"])

@perf_target(geomean_speedup=1.0)
def test_geomean_with_bytes(make_tensor, triton_bench):
    x = make_tensor(100)
    triton_bench(lambda: cheats.relu(x), baseline=lambda: torch.relu(x), bytes=800)
"""


@pytest.mark.parametrize("gpu", [True, False], ids=["timed", "dry-run"])
def test_judge_mode_probes_what_the_timed_call_reads_and_writes(run, gpu):
    result = run(JUDGED, "--triton-judge", gpu=gpu)
    out = result.stdout.str()
    result.stdout.fnmatch_lines([
        "*cached output: the timed call's outputs stayed the same when its inputs (x) were given "
        "other values: it returns results kept from an earlier call*"])
    result.stdout.fnmatch_lines(["*input mutation: the timed call reads and writes x*"])
    assert "FAILED test_k.py::test_cached" in out and \
        "FAILED test_k.py::test_mutating_an_input_it_did_not_make" in out
    if gpu:  # a dry run measures nothing: there is no time to take a mean of
        result.stdout.fnmatch_lines(["*geomean collapse: under --triton-judge each shape of a "
                                     "geomean_speedup test gives bytes= or flops=*"])
        result.assert_outcomes(failed=3, passed=4)
        for honest in ("test_relu", "test_relu_inplace_declared", "test_geomean_with_bytes",
                       "test_loss_like"):
            assert f"PASSED test_k.py::{honest}" in out, honest
    else:  # passing dry runs are skips: their targets are unchecked
        result.assert_outcomes(failed=2, skipped=5)
        assert "FAILED test_k.py::test_loss_like" not in out
