"""Without a GPU: perf-test bodies dry-run (arguments checked, fn and baseline called once,
nothing timed), and --triton-perf fails a run that left targets unchecked (issue 14)."""

import textwrap

import pytest

BODIES = """
import pytest, torch
from pytest_triton import perf_target

@perf_target(bandwidth_frac=0.8, speedup=1.0)
def test_clean(triton_bench, make_tensor):
    n = 1000 if triton_bench.dry_run else 1 << 26
    x = make_tensor(n)
    out = torch.empty_like(x)
    assert triton_bench(lambda: torch.mul(x, 2, out=out), bytes=2 * x.nbytes,
                        baseline=lambda: x * 2) is None
    assert out.shape == (1000,)

@perf_target(gbps=100)
def test_missing_bytes(triton_bench):
    triton_bench(lambda: None)

@perf_target(tflops_frac=0.5)
def test_tflops_frac_without_dtype(triton_bench):
    triton_bench(lambda: None, flops=1e9)

@perf_target(max_ms=1)
def test_never_calls(triton_bench):
    pass

@perf_target(max_ms=1)
def test_lambda_raises(triton_bench):
    triton_bench(lambda: 1 / 0)

@perf_target(speedup=1.0)
def test_baseline_raises(triton_bench):
    triton_bench(lambda: None, baseline=lambda: torch.zeros(3) + torch.zeros(4))
"""


@pytest.fixture
def dry(pytester, run_interpreted):
    def run(body, *args):
        pytester.makepyfile(test_k=body)
        return run_interpreted("-p", "no:cacheprovider", "-rs", *args)

    return run


def test_a_plain_cpu_run_dry_runs_perf_bodies_and_catches_their_mistakes(dry):
    result = dry(BODIES)
    result.assert_outcomes(skipped=1, failed=5)
    out = result.stdout.str()
    result.stdout.fnmatch_lines([
        "SKIPPED [[]1[]] test_k.py:4: dry run, nothing timed (no GPU): 1 triton_bench call checked "
        "and fn and baseline run once; targets unchecked: perf_target(bandwidth_frac=0.8, "
        "speedup=1.0); needs the device, not checked: bandwidth_frac: the device's DRAM bandwidth "
        "(datasheet)",
    ])
    for needle in [
        "test_k.py::test_missing_bytes: gbps=100 needs triton_bench(..., bytes=...)",
        "test_k.py::test_tflops_frac_without_dtype: tflops_frac=0.5 needs the operands' dtype",
        "test_k.py::test_never_calls: has perf_target(max_ms=1.0) but never called triton_bench",
        "ZeroDivisionError: division by zero",
        "pytest-triton: raised by triton_bench's fn in a dry run",
        "pytest-triton: raised by triton_bench's baseline in a dry run",
    ]:
        assert needle in out, needle
    assert result.ret == pytest.ExitCode.TESTS_FAILED


def test_a_dtype_the_gpu_run_would_refuse_fails_the_dry_run_too(dry):
    result = dry("""
        import torch
        from pytest_triton import perf_target
        @perf_target(tflops_frac=0.5)
        def test_bad(triton_bench): triton_bench(lambda: None, flops=10, dtype=torch.float64)
        @perf_target(tflops_frac=0.5, dtype="tf32")
        def test_float32_is_tf32(triton_bench): triton_bench(lambda: None, flops=10, dtype=torch.float32)
    """)
    result.assert_outcomes(failed=1, skipped=1)
    result.stdout.fnmatch_lines(["*test_k.py::test_bad: triton_bench(dtype=torch.float64): expected "
                                 "one of float32, tf32, float16*"])


def test_tflops_frac_and_measured_peaks_are_named_as_not_checkable_without_a_gpu(dry):
    result = dry("""
        import torch
        from pytest_triton import perf_target
        @perf_target(tflops_frac=0.5, bandwidth_frac=0.9, peak="measured", dtype="float16")
        def test_k(triton_bench):
            triton_bench(lambda: None, flops=1e9, bytes=1e9, name="a")
            triton_bench(lambda: None, flops=1e9, bytes=1e9, name="b")
    """)
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines([
        "*dry run, nothing timed (no GPU): 2 triton_bench calls checked and fn run once; targets "
        "unchecked: perf_target(bandwidth_frac=0.9, tflops_frac=0.5, dtype='float16', "
        "peak='measured'); needs the device, not checked: tflops_frac: the device's float16 "
        "tensor-core peak (measured ceilings), bandwidth_frac: the device's DRAM bandwidth "
        "(measured ceilings)",
    ])
    assert result.ret == pytest.ExitCode.OK  # no --triton-perf: nothing was asked to be timed


def test_triton_perf_without_a_gpu_fails_the_run_naming_the_unchecked_targets(dry):
    body = """
        from pytest_triton import perf_target
        @perf_target(gbps=100)
        def test_a(triton_bench): triton_bench(lambda: None, bytes=1)
        @perf_target("softmax")
        def test_b(triton_bench): triton_bench(lambda: None, bytes=1)
        def test_plain(): pass
    """
    result = dry(body, "--triton-perf")
    result.assert_outcomes(passed=1, skipped=2)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines([
        "2 perf targets UNCHECKED (needs a CUDA GPU): the run FAILS, as --triton-perf asks for "
        "perf to be checked (--triton-perf-allow-unchecked accepts it): test_k.py::test_a, "
        "test_k.py::test_b",
    ])
    accepted = dry(body, "--triton-perf", "--triton-perf-allow-unchecked")
    accepted.assert_outcomes(passed=1, skipped=2)
    assert accepted.ret == pytest.ExitCode.OK
    accepted.stdout.fnmatch_lines(["2 perf targets UNCHECKED (needs a CUDA GPU), accepted by "
                                   "--triton-perf-allow-unchecked: test_k.py::test_a, *"])


def test_the_ini_twin_accepts_unchecked_targets_and_failures_keep_their_status(dry, pytester):
    pytester.makeini("[pytest]\ntriton_perf_allow_unchecked = true\n")
    body = """
        import pytest
        from pytest_triton import perf_target
        @perf_target(gbps=100)
        def test_a(triton_bench): triton_bench(lambda: None, bytes=1)
        @pytest.mark.interpreter_gap("bf16_dot")
        @perf_target(gbps=100)
        def test_gap(triton_bench): triton_bench(lambda: None, bytes=1)
    """
    result = dry(body, "--triton-perf")
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(["*their targets are UNCHECKED, accepted by --triton-perf-allow-unchecked",
                                 "2 perf targets UNCHECKED *accepted by --triton-perf-allow-unchecked*"])
    assert "fails the run unless" not in result.stdout.str()
    pytester.makeini("[pytest]\n")
    failing = dry(textwrap.dedent(body) + "\ndef test_broken(): assert False\n", "--triton-perf")
    assert failing.ret == pytest.ExitCode.TESTS_FAILED
    failing.stdout.fnmatch_lines(["2 perf targets UNCHECKED (needs a CUDA GPU): the run FAILS*"])


@pytest.mark.requires_plugin("pytest-xdist")
def test_the_gate_holds_under_xdist(pytester):
    pytester.makepyfile(test_k="""
        import pytest
        from pytest_triton import perf_target
        @pytest.mark.parametrize("i", range(3))
        @perf_target(gbps=100)
        def test_k(triton_bench, i): triton_bench(lambda: None, bytes=1)
    """)
    result = pytester.runpytest_subprocess("-n", "1", "--triton-perf", "--triton-interpret",
                                           "-p", "no:cacheprovider")
    result.assert_outcomes(skipped=3)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["3 perf targets UNCHECKED (needs a CUDA GPU): the run FAILS*"])


def test_a_perf_test_with_an_interpreter_gap_still_checks_its_triton_bench_arguments(dry):
    # It was skipped at setup, so a wrong triton_bench call in it waited for the GPU job.
    body = """
        import pytest
        from pytest_triton import perf_target
        @pytest.mark.interpreter_gap("inline_asm")
        @perf_target(gbps=100)
        def test_gap(triton_bench):
            triton_bench(lambda: 1 / 0, bytes=1)  # fn would meet the gap: never called
        @pytest.mark.interpreter_gap("inline_asm")
        @perf_target(gbps=100)
        def test_gap_wrong(triton_bench): triton_bench(lambda: None)  # no bytes= for gbps
        @pytest.mark.interpreter_gap("inline_asm")
        @perf_target(gbps=100)
        def test_gap_body(triton_bench):
            raise RuntimeError("the body itself needs inline asm")
    """
    result = dry(body, "-rsf")
    result.assert_outcomes(skipped=2, failed=1)
    result.stdout.fnmatch_lines([
        "SKIPPED [[]1[]] test_k.py:*: interpreter gap: Triton's interpreter cannot run inline "
        "assembly (its triton_bench arguments were checked; fn was not run)",
        "SKIPPED [[]1[]] test_k.py:*: interpreter gap: Triton's interpreter cannot run inline "
        "assembly (the body stopped before triton_bench: RuntimeError)",
        "FAILED test_k.py::test_gap_wrong - PerfTargetError*"])
    assert "test_gap_wrong: gbps=100 needs triton_bench(..., bytes=...)" in result.stdout.str()
