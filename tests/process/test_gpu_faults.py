"""Real GPU faults on a CUDA GPU (skipped, with the reason, elsewhere): a Triton kernel that stores
far outside any allocation loses the CUDA context; exactly that test fails, in-process and under
pytest-xdist, and the rest of the suite passes. Each run is a subprocess: a fault in this process
would lose the context of the suite running it.

    python3 -m pytest tests/process/test_gpu_faults.py -p no:cacheprovider -v
"""

import pytest
import torch

pytestmark = [
    pytest.mark.skipif(not torch.cuda.is_available() or torch.version.cuda is None,
                       reason="needs a CUDA GPU: the faults are real CUDA errors"),
]

KERNELS = '''
import torch
import triton
import triton.language as tl


@triton.jit
def _add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask),
             mask=mask)


@triton.jit
def _store_far_kernel(out_ptr, BLOCK: tl.constexpr, FAR: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(out_ptr + FAR + offs, tl.zeros((BLOCK,), tl.float32))  # 16 TB past the tensor


def add(x, y):
    out = torch.full_like(x, float("nan"))
    _add_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, out, x.numel(), BLOCK=1024)
    return out


def store_far(out):
    _store_far_kernel[(1,)](out, BLOCK=1024, FAR=1 << 42)
'''

# The five tests: out of memory, innocent, illegal access, two innocents.
FIVE = KERNELS + '''
from pytest_triton import assert_close, perf_target


@perf_target(bandwidth_frac=0.5)
def test_1_perf_runs_out_of_memory(triton_device, triton_bench):
    total = torch.cuda.get_device_properties(triton_device).total_memory
    x = torch.empty(2 * total, dtype=torch.uint8, device=triton_device)  # more than the GPU has
    triton_bench(lambda: x.zero_(), bytes=x.nbytes)


def test_2_innocent(make_tensor):
    x, y = make_tensor(4099), make_tensor(4099)
    assert_close(add(x, y), x.double() + y.double())


def test_3_illegal_access(make_tensor):
    out = make_tensor(1024)
    store_far(out)
    assert_close(out, torch.zeros(1024, dtype=torch.float64, device=out.device), allow_trivial=True)


def test_4_innocent(make_tensor):
    x, y = make_tensor(129), make_tensor(129, dist="heavy")
    assert_close(add(x, y), x.double() + y.double())


def test_5_innocent(make_tensor):
    x = make_tensor(1 << 20)
    assert_close(add(x, x), 2 * x.double())
'''


@pytest.fixture
def run(pytester, monkeypatch):
    """runpytest_subprocess outside any outer xdist run (whose GPU locks an inner run would share)."""
    for name in ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_XDIST_TESTRUNUID"):
        monkeypatch.delenv(name, raising=False)

    def go(*args):
        return pytester.runpytest_subprocess("-p", "no:cacheprovider", *args)

    return go


def _failed(result) -> list[str]:
    return sorted(line.split()[1] for line in result.stdout.lines if line.startswith("FAILED "))


@pytest.mark.parametrize("workers", [None] + [pytest.param(n, marks=pytest.mark.requires_plugin("pytest-xdist"))
                                     for n in (2, 4)])
def test_illegal_access_fails_only_its_test(pytester, run, workers):
    pytester.makepyfile(test_five=FIVE)
    result = run("--triton-perf", "-rf", *(["-n", str(workers)] if workers else []))
    result.assert_outcomes(passed=3, failed=2)
    assert result.ret == pytest.ExitCode.TESTS_FAILED  # not an abort at exit (134)
    assert _failed(result) == ["test_five.py::test_1_perf_runs_out_of_memory",
                               "test_five.py::test_3_illegal_access"]
    # under xdist the two failures are reported in the order their workers finish: each alone
    result.stdout.fnmatch_lines(["*OutOfMemoryError: CUDA out of memory*"])
    result.stdout.fnmatch_lines([
        "*GPUContextLost: CUDA error 700 in call: an illegal memory access was encountered. The "
        "error is sticky: this process's CUDA context is lost*",
        "*Triton launches in this test: *_store_far_kernel*",
        "*= pytest-triton: 1 test broke the process it ran in =*",
        "test_five.py::test_3_illegal_access: CUDA context lost in call (CUDA error 700, illegal "
        "address; last Triton launch: *)",
    ])
    if workers:
        result.stdout.fnmatch_lines(["*pytest-triton: retired after test_five.py::test_3_illegal_access "
                                     "lost its CUDA context*"])
    else:
        result.stdout.fnmatch_lines(["pytest-triton: test_five.py::test_3_illegal_access lost this "
                                     "process's CUDA context; the remaining 2 tests run in a fresh process*"])


def test_an_asynchronous_fault_is_blamed_on_the_test_that_launched_it(pytester, run):
    pytester.makepyfile(test_async=KERNELS + '''
def test_launches_and_returns():
    store_far(torch.empty(1024, device="cuda"))  # nothing synchronises in this test


def test_next():
    assert torch.ones(4, device="cuda").sum().item() == 4
''')
    result = run()
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines([
        "*_ test_launches_and_returns _*",
        "GPUContextLost: CUDA error 700 in call: an illegal memory access was encountered*",
        "It surfaced at pytest-triton's torch.cuda.synchronize() after the test's call: a kernel this "
        "test launched faulted asynchronously, and nothing in the test synchronised.",
        "Triton launches in this test: *_store_far_kernel (most recent last).",
    ])
    # Negative control: without the plugin the fault surfaces in, and is blamed on, the next test.
    result = run("-p", "no:triton")
    result.assert_outcomes(passed=1, failed=1)
    assert _failed(result) == ["test_async.py::test_next"]
    result.stdout.fnmatch_lines(["*illegal memory access*"])


# It shares the GPU: what it holds while it fails (2 GiB, twice what test_next allows to stay
# reserved) leaves the other workers' tests room. Held alone, with 40% of the free memory, it kept
# every other worker waiting for it. The faults of the other tests are their subprocesses' own (a
# lost context is its process's), so they share the GPU too.
def test_out_of_memory_empties_the_allocator_before_the_next_test(pytester, run):
    pytester.makepyfile(test_oom='''
import torch


def test_oom():
    free, total = torch.cuda.mem_get_info()
    held = torch.empty(min(2 << 30, free // 4), dtype=torch.uint8, device="cuda")  # its frame holds it
    torch.empty(2 * total, dtype=torch.uint8, device="cuda")


def test_next_starts_with_the_memory():
    reserved = torch.cuda.memory_reserved()
    assert reserved < 1 << 30, f"{reserved / 2**30:.1f} GiB still reserved after the failed test"
''')
    result = run()
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*OutOfMemoryError: CUDA out of memory*"])
    # Negative control: without the plugin the failed test's tensor, and its cache, stay.
    result = run("-p", "no:triton")
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines(["*GiB still reserved after the failed test*"])
