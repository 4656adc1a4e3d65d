"""--triton-judge: perf verdicts recomputed from the raw samples by the process that runs no test
(judge/verify.py). Negative control: a cheat that replaces the plugin's statistics and silences
the identity checks of the process it runs in; positive control: an honest kernel."""

import json
import pathlib

from pytest_triton.judge import verify
from tests.correctness import _fake_gpu

ROOT = pathlib.Path(__file__).parents[2]


TESTS = """
# the honest test first: the cheat's replaced statistics stay in the process it ran in
import torch
from pytest_triton import perf_target
from tests.judge import cheats

@perf_target(max_ms=1.0)
def test_honest(make_tensor, triton_bench):
    x = make_tensor(100)
    out = torch.empty_like(x)
    triton_bench(lambda: cheats.relu(x, out=out), bytes=800)

@perf_target(max_ms=0.01)  # 0.5 ms per call misses it: only a hundredth of the time passes
def test_unseen(make_tensor, triton_bench):
    x = make_tensor(100)
    out = torch.empty_like(x)
    triton_bench(lambda: cheats.relu_patching_stats_unseen(x, out), bytes=800)
"""


def test_a_cheat_that_silences_its_own_process_is_caught_by_the_one_that_runs_no_test(pytester):
    pytester.makeconftest(_fake_gpu.CONFTEST)
    pytester.makepyfile(test_k=TESTS)
    args = ("-p", "no:cacheprovider", "--rootdir", str(pytester.path), "-o", f"pythonpath={ROOT}",
            "--triton-interpret", "--triton-perf", "--triton-perf-json", "perf.json", "-rA")
    # in one process the cheat reaches every check, the judge's too: it passes
    plain = pytester.runpytest_subprocess(*args, "--triton-judge", "--triton-supervise=off")
    plain.assert_outcomes(passed=2)
    # the tests in a child, the verdicts recomputed by this process: caught
    judged = pytester.runpytest_subprocess(*args, "--triton-judge", "--triton-supervise=on")
    judged.assert_outcomes(failed=1, passed=1)
    judged.stdout.fnmatch_lines([
        "*tests run in a supervised child process (--triton-supervise=on)*",
        "*pytest-triton judge: timer tampering: the verdict recomputed from the raw samples, in a "
        "process that ran no test, disagrees with the test's own:*",
        "*test_k.py::test_unseen: the reported median 0.005* ms is not its samples' 0.5 ms*"])
    assert "PASSED test_k.py::test_honest" in judged.stdout.str()
    results = json.loads((pytester.path / "perf.json").read_text())["results"]
    assert {r["nodeid"].split("::")[-1]: r["outcome"] for r in results} == {
        "test_unseen": "failed", "test_honest": "passed"}


def test_a_report_agreeing_with_its_samples_passes_and_each_figure_is_rechecked():
    samples = [1.0, 1.1, 0.9, 1.0, 1.2] * 4
    from pytest_triton.perf import stats

    s = stats.summarize(samples)
    m = {"nodeid": "t", "name": None, "samples_ms": samples, "time_ms": s.to_dict(), "bytes": 1e6,
         "gbps": 1e6 / s.median / 1e6, "peaks": {"dram_gbps_datasheet": 3000.0}, "verdict": "pass"}
    assert verify.recheck(m) == []
    assert verify.recheck({**m, "gbps": 2.0}) == ["t: the reported 2.0 GB/s is not its samples' "
                                                  "1 GB/s"]
    fast = {**m, "samples_ms": [1e-6] * 20, "time_ms": stats.summarize([1e-6] * 20).to_dict(),
            "gbps": 1e6}
    assert verify.recheck(fast) == ["t: its samples give more than the datasheet's 3000 GB/s "
                                    "(invalid), and it was reported 'pass'"]
    assert verify.recheck({**m, "samples_ms": None}) == [
        "t: the report carries no raw samples to recompute its verdict from"]
    # a part of the wrong shape is a report that cannot be read back, not an internal error
    [problem] = verify.recheck({**m, "peaks": "x"})
    assert problem.startswith("t: its report cannot be read back (AttributeError"), problem
