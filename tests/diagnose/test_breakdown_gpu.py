"""The timed-call breakdown on a CUDA GPU (skipped elsewhere): the three controls of
tests/diagnose/test_breakdown.py, profiled for real. A call that reads .item() between its kernels
must get the host-sync hint, one clean Triton kernel none of the breakdown's hints, a chain of three
torch ops the fusion hint. They run through the plugin in a child pytest (--triton-perf
--triton-perf-explain), its JSON report read back; about 15 s on an H100.

    pytest tests/diagnose/test_breakdown_gpu.py -v -s     # -s prints each control's diagnosis
"""

import json

import pytest
import torch

pytestmark = [
    pytest.mark.skipif(not torch.cuda.is_available() or torch.version.cuda is None,
                       reason="needs a CUDA GPU: the controls are profiled on it (CUPTI)"),
    # the child's timed parts hold the GPU alone (lending this test's hold); its start-up and
    # compiles share it
    pytest.mark.triton_exclusive(scope="timing"),
]

# Ceilings given, not measured: calibrating them (an 8192^3 matmul per dtype) would be most of the
# test's time, and no control's verdict depends on them.
CONFTEST = '''
def pytest_triton_calibrate(config, device):
    return {"dram_gbps": 0.9 * device.dram_gbps, "tflops": {}}
'''

CONTROLS = '''
import pytest
import torch
import triton
import triton.language as tl

from pytest_triton import perf_target

N = 1 << 24  # float32: 64 MB per tensor; each torch op of a control takes tens of microseconds


@triton.jit
def _add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask),
             mask=mask)


@pytest.fixture
def xyz():
    return (torch.randn(N, device="cuda"), torch.randn(N, device="cuda"),
            torch.empty(N, device="cuda"))


@perf_target(max_ms=1000)
def test_item(xyz, triton_bench):
    x, y, out = xyz

    def scaled():
        s = (x * 2).sum().item()  # the host waits for the GPU between the kernels
        torch.mul(y, s, out=out)

    triton_bench(scaled, bytes=3 * x.nbytes)


@perf_target(max_ms=1000)
def test_clean(xyz, triton_bench):
    x, y, out = xyz
    triton_bench(lambda: _add_kernel[(N // 1024,)](x, y, out, N, BLOCK=1024), bytes=3 * x.nbytes,
                 kernel=_add_kernel)


@perf_target(max_ms=1000)
def test_chain(xyz, triton_bench):
    a, b, out = xyz
    triton_bench(lambda: torch.mul(torch.relu(a + b), b, out=out), bytes=3 * a.nbytes)
'''

BREAKDOWN_HINTS = {"host-sync", "host-bound", "fusion", "allocations"}


def test_the_three_controls_get_their_hints(pytester):
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_controls=CONTROLS)
    out = pytester.path / "breakdown.json"
    result = pytester.runpytest_subprocess("--triton-perf", "--triton-perf-explain", "-rP",
                                           "-p", "no:cacheprovider", "--triton-perf-max-time=0.2",
                                           f"--triton-perf-json={out}")
    print(result.stdout.str())
    result.assert_outcomes(passed=3)  # no verdict changed: every control is within max_ms
    doc = json.loads(out.read_text())
    by_test = {r["nodeid"].split("::")[-1]: r["measurements"][0]["explain"] for r in doc["results"]}
    codes = {t: {h["code"] for h in d["hints"]} for t, d in by_test.items()}

    item = by_test["test_item"]["timed_call"]
    assert "host-sync" in codes["test_item"], codes["test_item"]
    assert [s["what"] for s in item["syncs"]] == [".item()"], item["syncs"]
    assert item["launches"] >= 3 and item["copies"], item  # mul, sum (its memset aside), mul

    clean = by_test["test_clean"]["timed_call"]
    assert not codes["test_clean"] & BREAKDOWN_HINTS, codes["test_clean"]
    names = [k["name"] for k in clean["kernels"]]  # launched by no torch op: its own name
    assert len(names) == 1 and names[0].startswith("_add_kernel"), clean
    assert clean["launches"] == 1 and clean["idle_frac"] == 0.0, clean
    assert clean["syncs"] == [] and clean["allocations"]["cuda"] == 0, clean

    chain = by_test["test_chain"]["timed_call"]
    assert "fusion" in codes["test_chain"], codes["test_chain"]
    ops = sorted(k["name"].split(" ")[0] for k in chain["kernels"])  # each kernel's torch op
    assert ops == ["aten::add", "aten::mul", "aten::relu"], chain
    assert chain["launches"] == 3 and chain["syncs"] == [], chain
    assert chain["allocations"]["cuda"] == 2, chain  # a + b and relu's result
