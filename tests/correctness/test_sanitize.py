"""--triton-sanitize: each compute-sanitizer report attributed to its test. On the CPU: the parser,
the plumbing end to end with a stand-in sanitizer, and the 'not checked' message; on a GPU with
compute-sanitizer: a Triton store one past the end of a tensor reported on its test, a clean
kernel on none."""

import os
import shutil
import stat
import sys
import textwrap

import pytest
import torch

from pytest_triton.correctness import sanitize

REPORT = """\
========= Invalid __global__ write of size 4 bytes
=========     at _store_kernel+0x1d0
=========     by thread (104,0,0) in block (7,0,0)
=========     Address 0x7f0000000fa0 is out of bounds
=========     and is 1 bytes after the nearest allocation at 0x7f0000000000 of size 4000 bytes
========="""


def test_reports_are_attributed_to_the_test_between_whose_markers_they_lie():
    log = "\n".join([
        "========= COMPUTE-SANITIZER",
        "============================= test session starts ==============================",
        "========= Program hit cudaErrorInvalidValue on CUDA API call to cuInit.",  # before any test
        "=========",
        sanitize.BEGIN + "t.py::test_a",
        REPORT,
        REPORT.replace("(7,0,0)", "(8,0,0)"),
        "some output of the test",
        sanitize.END + "t.py::test_a",
        sanitize.BEGIN + "t.py::test_b",
        "========= 1 failed, 1 passed in 3.10s =========",  # pytest's, not the sanitizer's
        sanitize.END + "t.py::test_b",
        "========= ERROR SUMMARY: 3 errors",
    ])
    out = sanitize.parse(log, sanitize.Outcome("memcheck"))
    assert set(out.errors) == {"t.py::test_a"} and len(out.errors["t.py::test_a"]) == 2
    assert out.errors["t.py::test_a"][0] == REPORT.rsplit("\n", 1)[0]
    assert out.seen == {"t.py::test_a", "t.py::test_b"}
    assert out.stray == ["(before the first test began)\n========= Program hit "
                         "cudaErrorInvalidValue on CUDA API call to cuInit."]
    assert out.summary == "ERROR SUMMARY: 3 errors"


def test_without_a_gpu_the_run_says_nothing_was_checked(pytester, run_interpreted):
    pytester.makepyfile("def test_a(): pass")
    result = run_interpreted("--triton-sanitize", "memcheck", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines([
        "pytest-triton: --triton-sanitize memcheck: NOT CHECKED: kernels run under Triton's "
        "interpreter on the CPU (interpreter requested), which compute-sanitizer cannot see",
        "*= pytest-triton --triton-sanitize memcheck =*",
        "NOT CHECKED: kernels run under Triton's interpreter *. No test was run under compute-sanitizer; out-of-bounds "
        "accesses past the guard regions of poisoned buffers, races in shared memory and reads of "
        "uninitialised memory went unchecked.",
    ])


@pytest.mark.requires_plugin("pytest-xdist")
def test_it_cannot_run_under_xdist(pytester):
    pytester.makepyfile("def test_a(): pass")
    result = pytester.runpytest("--triton-sanitize", "racecheck", "-n", "2")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "drop -n (pytest-xdist)" in result.stdout.str() + result.stderr.str()


# A stand-in for compute-sanitizer: runs the command after its options and, right after the
# begin line of a test named "planted", prints a report as memcheck does.
FAKE_SANITIZER = '''\
import subprocess, sys
args = sys.argv[1:]
with open("sanitizer-args.txt", "w") as f:
    f.write(" ".join(args[:4]))
while args and args[0].startswith("--"):
    args = args[2:]
print("========= COMPUTE-SANITIZER", flush=True)
proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
n = 0
for line in proc.stdout:
    sys.stdout.write(line)
    if line.startswith("@@pytest-triton-sanitize begin ") and "planted" in line:
        n += 1
        sys.stdout.write(REPORT + "\\n")
    sys.stdout.flush()
proc.wait()
print(f"========= ERROR SUMMARY: {n} error" + ("s" if n != 1 else ""))
sys.exit(proc.returncode)
'''


def test_the_plumbing_end_to_end_with_a_stand_in_sanitizer(pytester, monkeypatch):
    # Everything but the sanitizer is real: the id file, the child pytest and its selection, the
    # markers, the parsing, the failing test and the summary.
    bin_dir = pytester.mkdir("bin")
    fake = bin_dir / "compute-sanitizer"
    fake.write_text(f"#!{sys.executable}\nREPORT = {REPORT!r}\n" + FAKE_SANITIZER)
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(sanitize, "why_unchecked", lambda config: None)
    monkeypatch.setenv("TRITON_INTERPRET", os.environ.get("TRITON_INTERPRET", "0"))
    pytester.makepyfile(test_kernels="""
        import os
        def test_planted():
            print("caching off:", os.environ.get("PYTORCH_NO_CUDA_MEMORY_CACHING"))
        def test_clean():
            pass
        def test_deselected():
            pass
    """)
    result = pytester.runpytest("--triton-sanitize", "memcheck", "-p", "no:cacheprovider", "-k",
                                "not deselected")
    result.assert_outcomes(passed=1, failed=1, deselected=1)
    assert (pytester.path / "sanitizer-args.txt").read_text() == (
        "--tool memcheck --destroy-on-device-error kernel")
    result.stdout.fnmatch_lines([
        "pytest-triton: running 2 tests under compute-sanitizer --tool memcheck ...",
        "*_ test_planted _*",
        "compute-sanitizer --tool memcheck reported 1 error while this test ran (in a run of the "
        "selected tests under the sanitizer, with PYTORCH_NO_CUDA_MEMORY_CACHING=1):",
        "========= Invalid __global__ write of size 4 bytes",
        "=========     at _store_kernel+0x1d0",
        "*= pytest-triton --triton-sanitize memcheck =*",
        "2 tests ran under compute-sanitizer --tool memcheck: 1 report on 1 test; the "
        "sanitizer's ERROR SUMMARY: 1 error",
    ])
    assert "test_clean FAILED" not in result.stdout.str()


GPU_TESTS = textwrap.dedent('''
    import torch
    import triton
    import triton.language as tl

    @triton.jit
    def _fill_kernel(out_ptr, n, EXTRA: tl.constexpr, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(out_ptr + offs, offs.to(tl.float32), mask=offs < n + EXTRA)

    def fill(out, extra):
        _fill_kernel[(triton.cdiv(out.numel() + extra, 128),)](out, out.numel(), EXTRA=extra,
                                                                BLOCK=128)
        torch.cuda.synchronize()

    def check_clean():
        out = torch.empty(1000, device="cuda")
        fill(out, extra=0)
        assert out[-1].item() == 999

    def test_clean_kernel():
        check_clean()

    def test_planted_one_past_the_end():
        fill(torch.empty(1000, device="cuda"), extra=1)

    def test_clean_kernel_after_the_error():
        # --destroy-on-device-error kernel: the context survives the error, later tests are
        # checked and clean.
        check_clean()
''')


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU: compute-sanitizer "
                    "checks CUDA kernels (the CPU tests above cover the plumbing)")
@pytest.mark.skipif(sanitize.find_sanitizer() is None, reason="needs NVIDIA compute-sanitizer")
def test_a_store_one_past_the_end_is_reported_on_its_test_and_a_clean_kernel_on_none(pytester):
    pytester.makepyfile(test_oob=GPU_TESTS)
    result = pytester.runpytest_subprocess("--triton-sanitize", "memcheck", "-p",
                                           "no:cacheprovider", timeout=600)
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines([
        "*_ test_planted_one_past_the_end _*",
        "compute-sanitizer --tool memcheck reported * while this test ran*",
        "========= Invalid __global__ write of size 4 bytes",
        "*= pytest-triton --triton-sanitize memcheck =*",
        "3 tests ran under compute-sanitizer --tool memcheck: * on 1 test*",
    ])
    assert "_ test_clean_kernel" not in result.stdout.str()
    assert shutil.which("compute-sanitizer") or sanitize.find_sanitizer()
