"""The work gate on CPU: a dry run's counted work saved with the run, compared exactly with a
later run's. A held-back kernel that moves 1% more bytes is MORE-WORK (and fails the run under
--triton-perf-fail-on=more-work); the unchanged code is SAME-WORK, its counts identical; the
command line's compare says the same of the two saved files."""

import json
import os
import subprocess
import sys

import pytest

from tests.perf.test_work import KERNELS

pytestmark = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1",
                                reason="work is counted only under Triton's interpreter")

TEST = KERNELS + """

@triton.jit
def _add_rereads_kernel(x_ptr,  # *Pointer* to the first input, shape (n,)
                        y_ptr,  # *Pointer* to the second input, shape (n,)
                        out_ptr,  # *Pointer* to the output, shape (n,)
                        n,
                        BLOCK: tl.constexpr):
    # the held-back change: 3% of x read twice, 1% more bytes than x + y + out (12 per element)
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    again = tl.load(x_ptr + offs, mask=mask & (offs < 3 * n // 100), other=0.0)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask)
             + 0.0 * again, mask=mask)


KERNEL = KERNEL_CHOICE

from pytest_triton import perf_target


@perf_target(bandwidth_frac=0.8)
def test_add_speed(triton_bench):
    x, y = torch.randn(10000), torch.randn(10000)
    out = torch.empty_like(x)
    triton_bench(lambda: KERNEL[(triton.cdiv(10000, 1024),)](x, y, out, 10000, BLOCK=1024),
                 bytes=3 * x.nbytes)
"""


@pytest.fixture
def runs(pytester, run_interpreted):
    def run(kernel, *args):
        pytester.makepyfile(test_k=TEST.replace("KERNEL_CHOICE", kernel))
        return run_interpreted("-p", "no:cacheprovider", "--triton-perf",
                               "--triton-perf-allow-unchecked", *args)

    return run


def _history(pytester) -> list:
    return sorted((pytester.path / ".pytest-triton" / "history").rglob("*.json"))


def test_one_percent_more_traffic_is_more_work_and_fails_the_run(runs, pytester):
    runs("_add_kernel", "--triton-perf-save=main").assert_outcomes(skipped=1)
    result = runs("_add_rereads_kernel", "--triton-perf-compare=main",
                  "--triton-perf-fail-on=more-work")
    result.stdout.fnmatch_lines([
        "MORE-WORK test_k.py::test_add_speed",
        "*work counted under the interpreter: GB moved 0.00012 -> 0.0001212 (+1.00%)",
        "1 more-work (threshold*",
        "the run FAILS: --triton-perf-fail-on=more-work, and 1 is MORE-WORK",
    ])
    assert result.ret == pytest.ExitCode.TESTS_FAILED


def test_unchanged_code_is_same_work_counted_identically(runs, pytester):
    runs("_add_kernel", "--triton-perf-save=main").assert_outcomes(skipped=1)
    result = runs("_add_kernel", "--triton-perf-compare=main", "--triton-perf-fail-on=more-work",
                  "--triton-perf-save=again")
    result.stdout.fnmatch_lines(["1 same-work (threshold*"])
    assert "MORE-WORK" not in result.stdout.str() and result.ret == pytest.ExitCode.OK
    first, second = (json.loads(p.read_text())["results"] for p in _history(pytester))
    assert first[0]["dry_calls"] == second[0]["dry_calls"]  # every count, each launch's too


def test_the_command_line_compare_gives_the_work_verdicts(runs, pytester):
    runs("_add_kernel", "--triton-perf-save=main")
    runs("_add_rereads_kernel", "--triton-perf-save=planted")
    ref, new = _history(pytester)
    if json.loads(ref.read_text())["run"]["name"] != "main":
        ref, new = new, ref
    cli = [sys.executable, "-m", "pytest_triton", "compare", str(ref), str(new)]
    done = subprocess.run(cli + ["--fail-on", "more-work"], capture_output=True, text=True)
    assert done.returncode == 1, done.stderr
    assert "MORE-WORK test_k.py::test_add_speed" in done.stdout
    back = subprocess.run(cli[:4] + [str(new), str(ref), "--json", "-"], capture_output=True,
                          text=True)
    (row,) = json.loads(back.stdout)["rows"]
    assert (row["verdict"], back.returncode) == ("less-work", 0)


def test_a_cpu_run_against_a_gpu_run_compares_nothing_and_fails_nothing(runs, pytester):
    from ._docs import H100

    runs("_add_kernel", "--triton-perf-save=cpu")
    (cpu,) = _history(pytester)
    done = subprocess.run([sys.executable, "-m", "pytest_triton", "compare", str(H100), str(cpu),
                           "--fail-on", "slow,missing,refused,more-work", "--json", "-"],
                          capture_output=True, text=True)
    # the dry run timed nothing: no test of the GPU run is MISSING, no GPU model REFUSED
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr
    out = json.loads(done.stdout)
    assert (out["rows"], out["refusal"]) == ([], "")
