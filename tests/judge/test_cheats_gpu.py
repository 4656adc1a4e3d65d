"""The cheats that need a GPU to cheat: work on a side stream the timing events do not cover, a
cuBLAS matmul timed as a Triton kernel, an output that holds the reference's freed result from
the caching allocator's recycled memory, and a CUDA error left unread. Each caught with a message
naming its exploit, beside an honest twin; they skip on CPU, where none of them can happen."""

import ctypes
import pathlib

import pytest
import torch

from pytest_triton import state

ROOT = pathlib.Path(__file__).parents[2]

pytestmark = pytest.mark.triton_exclusive  # they time: the GPU to themselves under xdist


@pytest.fixture(autouse=True)
def _cuda(request):
    if state.get(request.config).runtime.interpret or not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU: side streams, the profiler's view of them, cuBLAS and the "
                    "caching allocator's recycled memory do not exist under Triton's interpreter")


@pytest.fixture
def run(pytester):
    def go(body, *args):
        # no ceilings to measure in each inner run: the targets here are times
        pytester.makeconftest("def pytest_triton_calibrate(config, device):\n    return None\n")
        pytester.makepyfile(test_k=body)
        return pytester.runpytest("-p", "no:cacheprovider", "--rootdir", str(pytester.path),
                                  "-o", f"pythonpath={ROOT}", "--triton-perf",
                                  "--triton-perf-max-time", "0.05", "--triton-perf-retries", "0",
                                  "-rA", *args)
    return go


TIMED = """
import torch
from pytest_triton import perf_target
from tests.judge import cheats
from reference_kernels.matmul import matmul

N = 1 << 27  # 512 MB of float32: 1 GB moved, about 0.35 ms on an H100

@perf_target(max_ms=100)
def test_side_stream(make_tensor, triton_bench):
    x, side = make_tensor(N), torch.cuda.Stream()
    out = torch.empty_like(x)

    def fn():
        cheats.relu(x[:4096], out=out[:4096])  # what the timing events see
        with torch.cuda.stream(side):  # what they do not wait for
            cheats.relu(x, out=out)

    triton_bench(fn)

@perf_target(max_ms=100, triton_only=True)
def test_cublas_as_triton(make_tensor, triton_bench):
    a, b = make_tensor((2048, 2048), torch.float16), make_tensor((2048, 2048), torch.float16)
    triton_bench(lambda: (torch.mm(a, b), cheats.relu(a[:1])))

# --- honest twins ---

@perf_target(max_ms=100)
def test_side_stream_joined(make_tensor, triton_bench):
    x, side = make_tensor(N), torch.cuda.Stream()
    out = torch.empty_like(x)

    def fn():
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            cheats.relu(x, out=out)
        torch.cuda.current_stream().wait_stream(side)

    triton_bench(fn)

@perf_target(max_ms=100, triton_only=True)
def test_triton_matmul(make_tensor, triton_bench):
    a, b = make_tensor((2048, 2048), torch.float16), make_tensor((2048, 2048), torch.float16)
    c = torch.empty_like(a)
    triton_bench(lambda: matmul(a, b, out=c))
"""


def test_side_streams_and_cublas_fallbacks_are_caught(run):
    # judge mode: the side-stream check waits on the device after more calls (streams.py); the
    # profiled call (trace.py) catches it too where those calls' side work happened to finish
    # with the current stream's (the GPU schedules the two streams' kernels as it likes)
    result = run(TIMED, "--triton-judge")
    result.assert_outcomes(failed=2, passed=2)
    result.stdout.fnmatch_lines(["*pytest-triton judge: side stream: * ms*KernelBench's "
                                 "non_default_stream_kernel*"])
    result.stdout.fnmatch_lines(["*non-Triton fallback: *% of the timed call's GPU time is "
                                 "kernels no Triton launch made (aten::mm*"])
    out = result.stdout.str()
    assert "PASSED test_k.py::test_side_stream_joined" in out
    assert "PASSED test_k.py::test_triton_matmul" in out


def test_judge_mode_asks_every_timed_call_to_be_triton(run):
    result = run(TIMED.replace("triton_only=True", "triton_only=None").replace(
        "@perf_target(max_ms=100, triton_only=None)\ndef test_triton_matmul",
        "@perf_target(max_ms=100, triton_only=False)\ndef test_triton_matmul"), "--triton-judge")
    result.stdout.fnmatch_lines(["*non-Triton fallback*"])
    result.stdout.fnmatch_lines(["*side stream*"])
    assert "PASSED test_k.py::test_triton_matmul" in result.stdout.str()


RECYCLED = """
import torch
from pytest_triton import assert_close
from tests.judge import cheats

def test_recycled(make_tensor):
    x = make_tensor(1 << 20)
    expected = torch.relu(x)  # the reference, computed first...
    kept, freed = expected.clone(), expected.data_ptr()
    del expected  # ...and freed: its block goes back to the caching allocator
    y = cheats.relu_swallowing(x)  # its launch fails; empty_like got the freed block
    print("RECYCLED" if y.data_ptr() == freed else "NOT RECYCLED")
    assert_close(y, kept)
"""


def test_a_freed_reference_read_back_from_recycled_memory_passes_only_without_the_judge(run):
    result = run(RECYCLED, "-s")
    if "NOT RECYCLED" in result.stdout.str():
        pytest.skip("the caching allocator did not hand back the freed reference's block")
    result.assert_outcomes(passed=1)  # the exploit: the output is the freed reference
    judged = run(RECYCLED, "--triton-judge")
    judged.assert_outcomes(failed=1)
    judged.stdout.fnmatch_lines(["*NaN where the reference is finite: an unwritten element of a "
                                 "poisoned output*",
                                 "*a launch that failed silently, or a kernel that left the output "
                                 "to hold what recycled memory held*"])


def _a_runtime_on_disk():
    """A CUDA runtime library on this machine, loaded as a CUDA extension loads its own (where
    torch's is linked in statically, as on torch 2.11.0+cu130): its path, or None."""
    import glob
    import site
    import sys

    roots = [*site.getsitepackages(), site.getusersitepackages(), *sys.path]
    for pattern in ([f"{r}/nvidia/*/lib/libcudart.so*" for r in roots]
                    + [f"{r}/nvidia/cu*/lib/libcudart.so*" for r in roots]
                    + ["/usr/local/cuda/lib64/libcudart.so*", "/usr/local/cuda*/lib64/libcudart.so*"]):
        for path in sorted(glob.glob(pattern)):
            try:
                ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
                return path
            except OSError:
                continue
    return None


def test_a_cuda_error_left_unread_is_named():
    from pytest_triton.judge import launcherrors

    torch.cuda.synchronize()
    if not launcherrors.runtimes() and _a_runtime_on_disk() is None:
        pytest.skip("no CUDA runtime library loaded, nor one on this machine to load")
    lib = launcherrors.runtimes()[-1]
    assert launcherrors.unread("the call") is None  # nothing pending: the positive control
    pointer = ctypes.c_void_p()
    assert lib.cudaMalloc(ctypes.byref(pointer), ctypes.c_size_t(1 << 60)) != 0  # fails, unread
    message = launcherrors.unread("the timed call")
    assert message is not None and message.startswith("silent launch failure: the timed call "
                                                       "left a CUDA error that no one read: ")
    assert "(cudaError 2)" in message  # cudaErrorMemoryAllocation
    assert launcherrors.unread("the call") is None  # read once, cleared
