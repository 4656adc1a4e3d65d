"""The real timing path, on a CUDA GPU (skipped, with the reason, elsewhere)."""

import pytest
import torch

from pytest_triton import do_bench
from pytest_triton.perf.timing import Settings, measure

pytestmark = [
    pytest.mark.skipif(not torch.cuda.is_available() or torch.version.cuda is None,
                       reason="needs a CUDA GPU: the timing path is CUDA events and graphs"),
    pytest.mark.triton_exclusive,  # under xdist, no other worker's kernels interleave with these
]


@pytest.fixture
def device(triton_device):
    if triton_device.type != "cuda":
        pytest.skip("needs a CUDA GPU (this run uses the interpreter)")
    return str(triton_device)


def test_short_kernels_go_through_graphs_long_ones_through_events(device):
    small = torch.randn(1 << 10, device=device)
    big = torch.randn(1 << 26, device=device)
    short = measure(lambda: small.mul_(1.0), None, Settings(max_time=0.3), device)
    long = measure(lambda: big.mul_(1.0), None, Settings(max_time=0.3), device)
    assert short.method == "graph" and short.calls_per_sample > 1
    assert long.method == "events" and long.calls_per_sample == 1
    assert sorted(short.ms)[len(short.ms) // 2] < 0.02 < sorted(long.ms)[len(long.ms) // 2]


def test_a_kernel_against_itself_is_a_speedup_of_one(device):
    x = torch.randn(1 << 24, device=device)
    y = torch.empty_like(x)
    t = measure(lambda: y.copy_(x), lambda: y.copy_(x), Settings(max_time=0.5), device)
    ratios = sorted(b / a for a, b in zip(t.ms, t.baseline_ms))
    assert ratios[len(ratios) // 2] == pytest.approx(1.0, abs=0.02)


def test_cold_l2_is_slower_than_warm_for_a_working_set_that_fits(device):
    x = torch.randn(1 << 20, device=device)  # 4 MiB: fits in any recent L2
    y = torch.empty_like(x)
    cold = measure(lambda: y.copy_(x), None, Settings(l2="cold", max_time=0.3), device)
    warm = measure(lambda: y.copy_(x), None, Settings(l2="warm", max_time=0.3), device)
    med = lambda t: sorted(t.ms)[len(t.ms) // 2]
    assert med(warm) < med(cold)


def test_do_bench_is_a_drop_in_for_autotuners(device):
    x = torch.randn(1 << 22, device=device)
    ms = do_bench(lambda: x.mul_(1.0))
    q = do_bench(lambda: x.mul_(1.0), quantiles=[0.5, 0.2, 0.8])
    assert 0 < ms < 1 and len(q) == 3 and q[1] <= q[0] <= q[2]


def test_the_ceilings_hold_copies_of_three_sizes_the_largest_the_ceiling(device):
    # calibrate.measure_ceilings on the GPU: a copy of each size, keyed by the bytes it moves;
    # the largest is dram_gbps; a smaller copy reaches no more than a few % above it (the
    # intervals of two medians), and the kernels' ceilings are read from them (copy_ceiling)
    from pytest_triton.env.device import copy_ceiling
    from pytest_triton.perf import calibrate

    found = calibrate.measure_ceilings(device)
    assert calibrate._implausible(found) is None
    copies = {int(k): v for k, v in found["copy_gbps"].items()}
    sizes = [2 * n for n in (*calibrate.SMALL_COPY_BYTES, calibrate.COPY_BYTES)]
    assert sorted(copies) == sizes and found["dram_gbps"] == copies[max(sizes)]
    assert all(copies[b] <= 1.03 * found["dram_gbps"] for b in sizes)
    assert copy_ceiling(found["copy_gbps"], sizes[1])[0] == copies[sizes[1]]
