"""--triton-perf-explain on a CUDA GPU (skipped elsewhere): deliberately slow kernels whose
diagnoses must name their real causes, and a good kernel that must get no hint. Each runs through
the plugin in a child pytest (--triton-perf --triton-perf-explain), its JSON report read back.

    pytest tests/diagnose/test_explain_gpu.py -v -s     # -s prints every control's diagnosis
"""

import json
import shutil

import pytest
import torch

pytestmark = [
    pytest.mark.skipif(not torch.cuda.is_available() or torch.version.cuda is None,
                       reason="needs a CUDA GPU: the controls are compiled and timed on it"),
    # the child's timed parts hold the GPU alone (lending this test's hold); its start-up and
    # compiles share it
    pytest.mark.triton_exclusive(scope="timing"),
]

CONTROLS = '''
import pytest
import torch
import triton
import triton.language as tl

from pytest_triton import PerfTargetMissed, perf_target

N = 1 << 26  # float32 elements: 256 MB per tensor, five times an H100's L2
ROWS, COLS = 8192, 8192  # the softmax control: 256 MB
slow = pytest.mark.xfail(raises=PerfTargetMissed, strict=True, reason="negative control")


@triton.jit
def _add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask),
             mask=mask)


@triton.jit
def _mul_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * tl.load(y_ptr + offs, mask=mask),
             mask=mask)


@triton.jit
def _relu_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.maximum(tl.load(x_ptr + offs, mask=mask), 0.0), mask=mask)


@triton.jit
def _strided_scale_kernel(x_ptr, out_ptr, n, stride, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, 2.0 * tl.load(x_ptr + offs * stride, mask=mask), mask=mask)


@triton.jit
def _few_programs_kernel(x_ptr, y_ptr, out_ptr, n, per_program, BLOCK: tl.constexpr):
    start = tl.program_id(0) * per_program
    for i in range(0, per_program, BLOCK):
        offs = start + i + tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask),
                 mask=mask)


@triton.jit
def _row_softmax_kernel(x_ptr, out_ptr, n_cols, BLOCK: tl.constexpr):
    # A whole 8192-wide row in one warp: 256 floats per thread, live across two reductions.
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < n_cols
    x = tl.load(x_ptr + row * n_cols + offs, mask=mask, other=-float("inf"))
    e = tl.exp(x - tl.max(x, axis=0))
    tl.store(out_ptr + row * n_cols + offs, e / tl.sum(e, axis=0), mask=mask)


def add(x, y, out, block=1024, warps=4):
    _add_kernel[(triton.cdiv(x.numel(), block),)](x, y, out, x.numel(), BLOCK=block, num_warps=warps)


@pytest.fixture
def xyz():
    return (torch.randn(N, device="cuda"), torch.randn(N, device="cuda"),
            torch.empty(N, device="cuda"))


@perf_target(bandwidth_frac=0.7, peak="measured")
def test_good(xyz, triton_bench):
    x, y, out = xyz
    triton_bench(lambda: add(x, y, out), bytes=3 * x.nbytes, kernel=_add_kernel)


@slow
@perf_target(bandwidth_frac=0.9, peak="measured")  # it spills yet streams at ~71% (H100)
def test_spilling(triton_bench):
    x = torch.randn(ROWS, COLS, device="cuda")
    out = torch.empty_like(x)
    triton_bench(lambda: _row_softmax_kernel[(ROWS,)](x, out, COLS, BLOCK=COLS, num_warps=1),
                 bytes=2 * x.nbytes, kernel=_row_softmax_kernel)


@slow
@perf_target(bandwidth_frac=0.7, peak="measured")
def test_tiny_blocks(xyz, triton_bench):
    x, y, out = xyz
    triton_bench(lambda: add(x, y, out, block=16, warps=1), bytes=3 * x.nbytes, kernel=_add_kernel)


@slow
@perf_target(bandwidth_frac=0.7, peak="measured")
def test_few_programs(xyz, triton_bench):
    x, y, out = xyz
    per = N // 8
    triton_bench(lambda: _few_programs_kernel[(8,)](x, y, out, N, per, BLOCK=1024),
                 bytes=3 * x.nbytes, kernel=_few_programs_kernel)


@slow
@perf_target(bandwidth_frac=0.7, peak="measured")
def test_strided(triton_bench):
    x = torch.randn(4 * N, device="cuda")[::4]  # stride 4: every load 16 bytes from the last
    out = torch.empty(N, device="cuda")
    triton_bench(lambda: _strided_scale_kernel[(N // 1024,)](x, out, N, 4, BLOCK=1024),
                 bytes=2 * out.nbytes, kernel=_strided_scale_kernel)


@slow
@perf_target(bandwidth_frac=0.7, peak="measured")
def test_chain(xyz, triton_bench):
    a, b, out = xyz
    t1, t2 = torch.empty_like(a), torch.empty_like(a)
    grid = (N // 1024,)

    def chain():  # relu(a + b) * b, as three launches
        _add_kernel[grid](a, b, t1, N, BLOCK=1024)
        _relu_kernel[grid](t1, t2, N, BLOCK=1024)
        _mul_kernel[grid](t2, b, out, N, BLOCK=1024)

    triton_bench(chain, bytes=3 * a.nbytes)  # what one fused kernel would move
'''

EXPECTED = {  # each control's hint, by its real cause
    "test_spilling": {"spills"},
    "test_tiny_blocks": {"occupancy", "small-block"},
    "test_few_programs": {"waves"},
    "test_strided": {"coalescing"},
    "test_chain": {"fusion"},
}


def _run(pytester, *args):
    pytester.makepyfile(test_controls=CONTROLS)
    out = pytester.path / "explain.json"
    result = pytester.runpytest_subprocess("--triton-perf", "-p", "no:cacheprovider", "-rP",
                                           f"--triton-perf-json={out}", *args)
    print(result.stdout.str())
    doc = json.loads(out.read_text())
    return result, {r["nodeid"].split("::")[-1]: r["measurements"][0] for r in doc["results"]}


def test_controls_name_their_causes_and_the_good_kernel_gets_no_hint(pytester):
    result, by_test = _run(pytester, "--triton-perf-explain")
    result.assert_outcomes(passed=1, xfailed=len(EXPECTED))
    for test, codes in EXPECTED.items():
        d = by_test[test]["explain"]
        found = {h["code"] for h in d["hints"]}
        assert codes <= found, f"{test}: expected hints {codes}, got {found}"
    good = by_test["test_good"]["explain"]
    assert good["hints"] == [], good["hints"]
    k = good["kernels"][0]
    assert k["kernel"] == "_add_kernel" and k["n_regs"] > 0 and k["spill_bytes"] == 0
    assert k["constexprs"] == {"BLOCK": 1024} and k["programs"] == (1 << 26) // 1024
    assert by_test["test_spilling"]["explain"]["kernels"][0]["spill_bytes"] > 0
    assert [la["kernel"] for la in by_test["test_chain"]["explain"]["kernels"]] == [
        "_add_kernel", "_relu_kernel", "_mul_kernel"]
    text = result.stdout.str()
    assert "pytest-triton explain" in text and "reading their launches took" in text


@pytest.mark.skipif(shutil.which("ncu") is None, reason="needs Nsight Compute (ncu) on PATH")
def test_ncu_reads_the_speed_of_light_of_the_timed_kernel(pytester):
    result, by_test = _run(pytester, "--triton-perf-explain=ncu", "-k", "test_good or test_strided")
    result.assert_outcomes(passed=1, xfailed=1, deselected=len(EXPECTED) - 1)
    ncu = by_test["test_good"]["explain"]["ncu"]
    if "ERR_NVGPUCTRPERM" in (ncu.get("unavailable") or ""):
        pytest.skip(ncu["unavailable"])
    assert not ncu.get("unavailable"), ncu
    k = ncu["kernels"][0]
    assert k["name"].startswith("_add_kernel"), k
    assert 0 < k["dram_pct"] <= 100 and k["achieved_occupancy_pct"] > 0, k
    strided = by_test["test_strided"]["explain"]["ncu"]["kernels"][0]
    assert strided["name"].startswith("_strided_scale_kernel"), strided
