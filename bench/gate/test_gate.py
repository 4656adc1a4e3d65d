"""Perf tests the GPU checks in bench/gpu_checks.py run in separate processes. Not shipped."""

import os

import pytest
import torch
import triton
import triton.language as tl

from pytest_triton import PerfTargetMissed, perf_target


@triton.jit
def _add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


@triton.jit
def _read_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    # A wasted pass: reads x and keeps one partial sum per program, so the loads cannot be elided.
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + tl.program_id(0), tl.sum(tl.load(x_ptr + offs, mask=offs < n, other=0.0)))


@triton.jit
def _one_block_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs) * 2.0 + 1.0)


def add(x, y, out):
    n = x.numel()
    _add_kernel[(triton.cdiv(n, 4096),)](x, y, out, n, BLOCK=4096, num_warps=8)


def slow_add(x, y, out, waste, partial):
    # 15% more DRAM traffic than add: a pass over `waste`, 0.45 x the size of x.
    add(x, y, out)
    n = waste.numel()
    _read_kernel[(triton.cdiv(n, 4096),)](waste, partial, n, BLOCK=4096, num_warps=8)


N = 1 << 25  # 3 x 128 MiB moved: ~130 us on an H100


def _buffers(make_tensor):
    x, y = make_tensor(N), make_tensor(N)
    waste = make_tensor(int(N * 0.45))
    return x, y, torch.empty_like(x), waste, torch.empty(triton.cdiv(waste.numel(), 4096), device=x.device)


@perf_target(max_ms=100)
def test_stable(make_tensor, triton_bench):
    x, y, out, _, _ = _buffers(make_tensor)
    triton_bench(lambda: add(x, y, out), bytes=3 * x.nbytes)


@perf_target(max_ms=1)
def test_one_block(make_tensor, triton_bench):
    x = make_tensor(1024)
    out = torch.empty_like(x)
    triton_bench(lambda: _one_block_kernel[(1,)](x, out, BLOCK=1024, num_warps=4), bytes=2 * x.nbytes)


GBPS = float(os.environ.get("GATE_GBPS", "1"))
REPS = int(os.environ.get("GATE_REPS", "10"))


@pytest.mark.parametrize("rep", range(REPS))
@perf_target(gbps=GBPS)
def test_good(make_tensor, triton_bench, rep):
    x, y, out, _, _ = _buffers(make_tensor)
    triton_bench(lambda: add(x, y, out), bytes=3 * x.nbytes)


@pytest.mark.parametrize("rep", range(REPS))
@pytest.mark.xfail(raises=PerfTargetMissed, strict=True, reason="15% slower on purpose: must fail")
@perf_target(gbps=GBPS)
def test_slow(make_tensor, triton_bench, rep):
    x, y, out, waste, partial = _buffers(make_tensor)
    triton_bench(lambda: slow_add(x, y, out, waste, partial), bytes=3 * x.nbytes)


@perf_target(max_ms=100)
def test_compare(make_tensor, triton_bench):
    # pytest-benchmark storage/compare check: GATE_SLOW=1 makes the kernel ~15% slower.
    x, y, out, waste, partial = _buffers(make_tensor)
    if os.environ.get("GATE_SLOW"):
        triton_bench(lambda: slow_add(x, y, out, waste, partial), bytes=3 * x.nbytes)
    else:
        triton_bench(lambda: add(x, y, out), bytes=3 * x.nbytes)
