"""The judge's reading of a profiled timed call (judge/trace.py), on recorded traces: work on a
side stream that the events did not time, a call whose GPU time is mostly not Triton's, and a
time shorter than any launch. The profiles themselves need a GPU (test_cheats_gpu.py)."""

from types import SimpleNamespace

from pytest_triton.diagnose import breakdown
from pytest_triton.judge import trace
from tests.diagnose._traces import Trace

CUBLAS = "void cutlass::Kernel2<cutlass_80_wmma_tensorop_f16_s161616gemm_f16_32x32_128x2_tn_align8>(Params)"


def _call(side_stream: bool) -> dict:
    """One call: a Triton kernel of 0.2 ms, enqueued while the call's range is open."""
    t = Trace()
    t.range(1000, 1010)
    t.launch(1002, 1004, "_relu_kernel", gpu=(1950, 2150))
    if side_stream:
        t.events[-1]["args"]["stream"] = 9
    return breakdown.analyze(t.events)


def test_gpu_work_the_events_did_not_time_is_a_side_stream():
    call = _call(side_stream=True)
    assert call["gpu_busy_ms"] == 0.2
    [problem] = trace.trace_problems(call, median_ms=0.004, triton={"_relu_kernel"},
                                     check_triton=True)
    assert problem.startswith("side stream: one call keeps the GPU busy 0.2 ms (every stream, "
                              "profiled), but was timed at 0.004 ms: work on a stream the timing "
                              "events do not wait for")
    # the honest twin: timed at what the GPU did (a cold L2 makes the timed call the slower)
    assert trace.trace_problems(_call(False), median_ms=0.21, triton={"_relu_kernel"},
                                check_triton=True) == []


def _mixed(triton_ms: float, cublas_ms: float) -> dict:
    t = Trace()
    t.range(1000, 1100)
    t.op("aten::mm", 1001, 1050)
    t.launch(1002, 1004, CUBLAS, gpu=(1950, 1950 + 1000 * cublas_ms))
    t.launch(1060, 1062, "_relu_kernel", gpu=(3000, 3000 + 1000 * triton_ms))
    return breakdown.analyze(t.events)


def test_a_call_mostly_of_kernels_no_triton_launch_made_is_a_fallback():
    [problem] = trace.trace_problems(_mixed(0.01, 0.5), median_ms=0.6, triton={"_relu_kernel"},
                                     check_triton=True)
    assert problem.startswith("non-Triton fallback: 98% of the timed call's GPU time is kernels "
                              "no Triton launch made (aten::mm (Kernel2) 98%; the Triton kernels: "
                              "_relu_kernel)")
    assert trace.trace_problems(_mixed(0.01, 0.5), 0.6, {"_relu_kernel"}, check_triton=False) == []
    # the honest twin: torch's share is the glue around a Triton kernel
    assert trace.trace_problems(_mixed(0.5, 0.1), 0.7, {"_relu_kernel"}, check_triton=True) == []


def _measurement(median_ms, bytes=None, flops=None):
    return SimpleNamespace(time=SimpleNamespace(median=median_ms), bytes=bytes, flops=flops,
                           label="test_k[64]")


def test_a_time_below_one_launch_collapses_a_geomean():
    problem = trace.floor_problem(_measurement(2e-7), geomean=True, judged=False)
    assert problem.startswith("geomean collapse: test_k[64] measured 0.0002 us per call, less "
                              "than launching one kernel takes (0.5 us)")
    assert trace.floor_problem(_measurement(0.003), geomean=True, judged=False) is None
    assert "gives bytes= or flops=" in trace.floor_problem(_measurement(0.003), True, True)
    assert trace.floor_problem(_measurement(0.003, bytes=8), True, True) is None
