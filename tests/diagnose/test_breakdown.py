"""The timed call taken apart (diagnose/breakdown.py) on CPU: trace events shaped as
torch.profiler's Chrome trace records them on a GPU (kernel, gpu_memcpy, cuda_runtime,
cuda_driver, cpu_op, [memory]), for the three controls: a call that reads .item() between its
kernels, one clean Triton kernel, a chain of three torch ops. The GPU run of the same controls is
tests/diagnose/test_breakdown_gpu.py."""

import json
from pathlib import Path

import pytest

from pytest_triton.diagnose import breakdown

from . import _traces
from ._traces import ELEMENTWISE, REDUCE, SPIN, chain_call, clean_call, item_call


def test_short_names_of_cuda_kernels():
    assert breakdown.short_name(ELEMENTWISE) == "vectorized_elementwise_kernel"
    assert breakdown.short_name(REDUCE) == "reduce_kernel"
    assert breakdown.short_name(SPIN) == "spin_kernel"
    assert breakdown.short_name("_add_kernel") == "_add_kernel"


def test_a_call_that_reads_item_between_its_kernels():
    call = breakdown.analyze(item_call())
    assert [(k["name"], k["count"]) for k in call["kernels"]] == [
        ("aten::mul (vectorized_elementwise_kernel)", 2), ("aten::sum (reduce_kernel)", 1)]
    assert call["launches"] == 3 and call["copies"][0]["name"].startswith("Memcpy DtoH")
    assert call["syncs"] == [{"api": "cudaStreamSynchronize", "op": "aten::item", "what": ".item()"}]
    assert call["gpu_busy_ms"] == pytest.approx(0.132) and call["gpu_span_ms"] == pytest.approx(0.180)
    assert call["idle_frac"] == pytest.approx(48 / 180)
    assert call["allocations"] == {"cuda": 1, "cuda_bytes": 4 << 20, "cpu": 0, "cpu_bytes": 0,
                                   "cuda_malloc": 0}
    call, first, last = breakdown.assess(call, 0.134, False)
    assert [h.code for h in first] == ["host-bound", "host-sync", "fusion"] and last == []
    assert first[0].message.startswith("host-bound: the GPU was idle 27% of the call; 1 host sync "
                                       "per call (.item() (aten::item)): ")
    assert first[1].message.startswith("1 host sync per call (.item() (aten::item)): each makes the "
                                       "host wait for the GPU")
    assert first[2].message.startswith("3 kernels per call: fuse them")
    text = breakdown.lines(call)
    assert text[0] == ("  timed call (profiled once, after timing): 3 kernels, GPU busy 0.132 ms of "
                       "0.18 ms (idle 27%), host 1.04 ms; 1 host sync (.item() (aten::item)); 1 CUDA "
                       "allocation (4.19 MB)")
    assert text[1] == "     76%  0.1 ms  aten::mul (vectorized_elementwise_kernel) x2"
    assert text[-1] == ("  noise: 13.4% (interquartile range over median); likely cause: 1 host "
                        "sync per call (.item() (aten::item)): each sample waits for the host to wake")


@pytest.mark.parametrize("record_api", [True, False], ids=["driver-api-recorded", "not-recorded"])
def test_one_clean_kernel_gets_no_hint(record_api):
    call = breakdown.analyze(clean_call(record_api))
    assert [k["name"] for k in call["kernels"]] == ["_add_kernel"]  # not the spin before the call
    assert call["kernels"][0]["share"] == 1.0 and call["idle_frac"] == 0.0 and call["syncs"] == []
    call, first, last = breakdown.assess(call, 0.004, False)
    assert first == [] and last == []
    assert breakdown.lines(call)[-1] == "  noise: 0.4% (interquartile range over median)"


def test_a_chain_of_three_torch_ops_gets_the_fusion_hint():
    call = breakdown.analyze(chain_call())
    assert call["launches"] == 3 and call["idle_frac"] == 0.0 and call["syncs"] == []
    assert [round(k["share"], 3) for k in call["kernels"]] == [0.333] * 3
    assert call["allocations"]["cuda"] == 3
    call, first, last = breakdown.assess(call, 0.01, False)
    assert [h.code for h in first] == ["fusion"] and last == []
    assert first[0].evidence == ("GPU time per call: aten::add (vectorized_elementwise_kernel) 33%, "
                                 "aten::relu (vectorized_elementwise_kernel) 33%, aten::mul "
                                 "(vectorized_elementwise_kernel) 33%")
    # a Triton chain already named by the launch-level fusion hint gets no second one
    assert breakdown.assess(breakdown.analyze(chain_call()), None, True)[1] == []


def test_a_cuda_malloc_inside_the_call_is_named():
    call, first, last = breakdown.assess(breakdown.analyze(chain_call(malloc=True)), None, False)
    assert [h.code for h in last] == ["allocations"]
    assert last[0].evidence == "1 cudaMalloc call per call"


def test_a_trace_without_the_range_says_so():
    call = breakdown.analyze([])
    assert call == {"error": "the profiler recorded no 'pytest-triton timed call' range"}
    assert breakdown.lines(breakdown.assess(call, None, False)[0]) == [
        "  timed call: not taken apart (the profiler recorded no 'pytest-triton timed call' range)"]


# --- through the plugin: hints first when they dominate, the noise line, no verdict changed -------

CONFTEST = '''
from pytest_triton.env.device import DeviceInfo
from pytest_triton.perf.timing import Timings

def pytest_triton_device_info(config):
    return DeviceInfo(name="NVIDIA H100 80GB HBM3", sms=132, dram_gbps=3352.0, sku="H100 SXM",
                      tflops={"float16": 989.4}, fingerprint="fake-breakdown", regs_per_sm=65536,
                      smem_per_sm=233472, max_threads_per_sm=2048, max_blocks_per_sm=32)

def pytest_triton_calibrate(config, device):
    return {"dram_gbps": 3000.0, "tflops": {"float16": 700.0}}

def pytest_triton_measure(config, request, fn, baseline, settings):
    spread = request.module.SPREAD[request.node.name]  # a noisy measurement, or a steady one
    return Timings(ms=[1.0 + spread * (i % 4) for i in range(40)], method="events")
'''

TESTS = '''
from pytest_triton import perf_target
import breakdown_traces as traces

SPREAD = {"test_item": 0.1, "test_clean": 0.001, "test_chain": 0.001}

@perf_target(max_ms=10)
def test_item(triton_bench):
    triton_bench(traces.item_call)

@perf_target(max_ms=10)
def test_clean(triton_bench):
    triton_bench(traces.clean_call)

@perf_target(max_ms=10)
def test_chain(triton_bench):
    triton_bench(traces.chain_call)
'''


@pytest.fixture
def plugin_run(pytester, monkeypatch):
    """The plugin with the profiler replaced by the recorded traces: fn returns its trace."""
    profiled = []

    def profile(config, fn):
        profiled.append(1)
        return fn()

    monkeypatch.setattr(breakdown, "profile_call", profile)
    pytester.makeconftest(CONFTEST)
    pytester.syspathinsert()
    pytester.makepyfile(breakdown_traces=Path(_traces.__file__).read_text(), test_k=TESTS)

    def run(*args):
        out = pytester.path / "perf.json"
        result = pytester.runpytest("--triton-perf", "-p", "no:cacheprovider", "test_k.py",
                                    f"--triton-perf-json={out}", *args)
        doc = json.loads(out.read_text())
        return result, {r["nodeid"].split("::")[-1]: r["measurements"][0] for r in doc["results"]}

    run.profiled = profiled
    return run


def test_the_diagnosis_names_the_call_first_and_changes_no_verdict(plugin_run):
    result, by_test = plugin_run("--triton-perf-explain", "-rP")
    result.assert_outcomes(passed=3)  # every verdict a pass, host syncs or not
    assert all(m["verdict"] == "pass" for m in by_test.values())
    codes = {t: [h["code"] for h in m["explain"]["hints"]] for t, m in by_test.items()}
    assert codes == {"test_item": ["host-bound", "host-sync", "fusion"], "test_clean": [],
                     "test_chain": ["fusion"]}
    assert by_test["test_item"]["explain"]["timed_call"]["syncs"][0]["what"] == ".item()"
    result.stdout.fnmatch_lines([
        "test_item: pass",
        "  timed call (profiled once, after timing): 3 kernels, GPU busy 0.132 ms of 0.18 ms "
        "(idle 27%), host 1.04 ms; 1 host sync (.item() (aten::item)); 1 CUDA allocation (4.19 MB)",
        "*aten::mul (vectorized_elementwise_kernel) x2",
        "*aten::sum (reduce_kernel)",
        "    copy  0.002 ms  Memcpy DtoH (Device -> Pageable)",
        "  noise: 13.0% (interquartile range over median); likely cause: 1 host sync per call "
        "(.item() (aten::item)): each sample waits for the host to wake",
        "  kernel: no Triton launch seen in fn (*",
        "  hints:",
        "    [[]host-bound] host-bound: the GPU was idle 27% of the call; 1 host sync per call*",
        "*",
        "    [[]host-sync] 1 host sync per call (.item() (aten::item))*",
    ])
    result.stdout.fnmatch_lines(["test_k.py::test_item: pass: host-bound, host-sync, fusion",
                                 "test_k.py::test_clean: pass: no hints",
                                 "test_k.py::test_chain: pass: fusion"])


def test_without_explain_a_passing_measurement_is_not_profiled(plugin_run):
    result, by_test = plugin_run()
    result.assert_outcomes(passed=3)
    assert plugin_run.profiled == [] and "explain" not in by_test["test_item"]


def test_a_profiler_that_fails_is_a_note_not_a_failure(plugin_run, monkeypatch):
    def broken(config, fn):
        raise RuntimeError("CUPTI_ERROR_NOT_INITIALIZED")

    monkeypatch.setattr(breakdown, "profile_call", broken)
    result, by_test = plugin_run("--triton-perf-explain", "-rP")
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines(["  timed call: not taken apart (RuntimeError: "
                                 "CUPTI_ERROR_NOT_INITIALIZED)"])


def test_syncs_and_launches_are_given_to_their_op_whatever_thread_id_cupti_gives_them():
    events = item_call()
    for e in events:
        if e.get("cat") == "cuda_runtime":
            e["tid"] = 99  # CUPTI's thread id, not the profiler's
    call = breakdown.analyze(events)
    assert call["syncs"][0]["op"] == "aten::item"
    assert call["kernels"][0]["name"] == "aten::mul (vectorized_elementwise_kernel)"
