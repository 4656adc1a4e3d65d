"""--triton-perf-explain, --triton-perf-profile, --triton-perf-plot on CPU: the diagnosis logic
driven by injected timings (pytest_triton_measure), an injected H100 (pytest_triton_device_info,
pytest_triton_calibrate) and fake compiled kernels launched the way JITFunction.run launches
(the Triton launch hook is called with run's frame below it: kernel, grid_0..2, bound_args)."""

import json
import sys
import xml.etree.ElementTree as ET

import pytest
import torch

FAKE_GPU = '''
import os
import triton
from pytest_triton.env.device import DeviceInfo
from pytest_triton.perf.timing import Timings

def pytest_triton_device_info(config):
    return DeviceInfo(name="NVIDIA H100 80GB HBM3", sms=132, dram_gbps=3352.0, sku="H100 SXM",
                      tflops={"tf32": 494.7, "float16": 989.4, "bfloat16": 989.4, "float8": 1978.9},
                      driver="580.0", fingerprint="fake-explain", regs_per_sm=65536,
                      smem_per_sm=233472, smem_per_block=232448, max_threads_per_sm=2048,
                      max_blocks_per_sm=32)

def pytest_triton_calibrate(config, device):
    return {"dram_gbps": 3000.0, "tflops": {"float16": 700.0, "bfloat16": 700.0}}

class FakeTimes:
    def __init__(self, us): self.total = us

def pytest_triton_measure(config, request, fn, baseline, settings):
    """FAKE[test name] = ms per call; COMPILES[test name] = seconds of compilation to report
    to Triton's compilation listener (as an autotuner's first call would)."""
    for s in getattr(request.module, "COMPILES", {}).get(request.node.originalname, []):
        triton.knobs.compilation.listener(src=None, metadata={}, metadata_group={},
                                          times=FakeTimes(s * 1e6), cache_hit=False)
    ms = request.module.FAKE[request.node.originalname]
    jitter = [1 + 0.002 * ((i * 7) % 5 - 2) for i in range(40)]
    return Timings(ms=[ms * j for j in jitter],
                   baseline_ms=None if baseline is None else [ms * j for j in jitter],
                   method="injected", l2=settings.l2)
'''

# Stand-ins for a CompiledKernel, a JITFunction and an Autotuner, with the attributes the
# diagnosis reads, launching through triton.knobs.runtime.launch_enter_hook as Triton does.
FAKE_TRITON = '''
import collections
import torch
import triton
from triton.compiler import LazyDict

Meta = collections.namedtuple("Meta", "name num_warps num_stages num_ctas shared")
ELEMENTWISE = "tt.func @k { tt.load tt.store }"
LOOP = "tt.func @k { scf.for { tt.load } tt.store }"
DOT = "tt.func @k { scf.for { tt.dot } tt.store }"


class FakeCompiled:
    def __init__(self, name, *, warps=4, stages=3, shared=0, regs=32, spills=0, ttir=ELEMENTWISE):
        self.metadata = Meta(name, warps, stages, 1, shared)
        self.name, self.n_regs, self.n_spills = name, regs, spills // 4
        self.asm = {"ttir": ttir}


class Param:
    def __init__(self, name):
        self.name, self.is_constexpr = name, name.isupper()


class FakeJit:
    def __init__(self, name, params, **compiled):
        self.__name__ = name
        self.params = [Param(p) for p in params]
        self.compiled = FakeCompiled(name, **compiled)

    def run(self, *, grid, **bound_args):
        kernel = self.compiled
        grid_0, grid_1, grid_2 = (tuple(grid) + (1, 1))[:3]
        triton.knobs.runtime.launch_enter_hook(LazyDict({"name": kernel.name}))
        return kernel


class FakeConfig:
    def __init__(self, **kw):
        self.kw = kw

    def __str__(self):
        return ", ".join(f"{k}: {v}" for k, v in self.kw.items())


class FakeTuner:
    def __init__(self, fn, timings, bench_time=0.5):
        self.fn, self.cache = fn, {}
        self.configs = [FakeConfig(**c) for c, _ in timings]
        self.configs_timings = {cfg: [ms, ms, ms] for cfg, (_, ms) in zip(self.configs, timings)}
        self.best_config = min(self.configs_timings, key=lambda c: self.configs_timings[c][0])
        self.bench_time = bench_time

    def run(self, **kwargs):
        return self.fn.run(**kwargs)


N = 1 << 26  # a vector add of float32: 3 * 4 * N bytes = 805 MB
x = torch.empty(4096)
'''


@pytest.fixture
def explain(pytester):
    pytester.makeconftest(FAKE_GPU)
    pytester.makepyfile(fake_triton=FAKE_TRITON)

    def run(body, *args):
        pytester.makepyfile(test_k=body)
        return pytester.runpytest("--triton-perf", "-p", "no:cacheprovider", *args)

    return run


GOOD = """
from pytest_triton import perf_target
from fake_triton import FakeJit, FakeTuner, N, x
add = FakeJit("_add_kernel", ["x_ptr", "y_ptr", "out_ptr", "n", "BLOCK"], warps=4, regs=26)
tuner = FakeTuner(add, [({"BLOCK": 1024, "num_warps": 4}, 0.281),
                        ({"BLOCK": 2048, "num_warps": 8}, 0.284),
                        ({"BLOCK": 512, "num_warps": 2}, 0.297)])
FAKE = {"test_good": 0.28}

@perf_target(bandwidth_frac=0.8)
def test_good(triton_bench):
    triton_bench(lambda: tuner.run(grid=(N // 1024,), x_ptr=x, y_ptr=x, out_ptr=x, n=N, BLOCK=1024),
                 bytes=3 * 4 * N, kernel=tuner)
"""


def test_good_kernel_gets_the_diagnosis_and_no_false_alarm(explain):
    result = explain(GOOD, "--triton-perf-explain", "-rP")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines([
        "*- pytest-triton explain -*",
        "test_good: pass",
        "  roofline: memory-bound (no flops= given): 85.8% of datasheet 3352 GB/s, 95.9% of "
        "measured 3000 GB/s; near its ceiling: speed hints not raised",
        "  kernel _add_kernel: grid (65536, 1, 1) = 65536 programs; num_warps 4, num_stages 3, "
        "26 registers/thread, spills 0 B, shared 0 B",
        "    constexprs: BLOCK=1024",
        "    occupancy: 16 blocks/SM = 64 of 64 warps (100%), limited by warps; 31.03 waves of "
        "2112 slots, last 3% full",
        "  autotune _add_kernel (FakeTuner): 3 configs, tuned in 0.50 s; chosen: BLOCK: 1024, num_warps: 4",
        "    * 0.2810 ms  BLOCK: 1024, num_warps: 4",
        "      0.2840 ms  BLOCK: 2048, num_warps: 8",
        "      0.2970 ms  BLOCK: 512, num_warps: 2",
        "  hints: none",
        "*= pytest-triton explain =*",
        "test_k.py::test_good: pass (96% of measured ceiling): no hints",
        "1 measurement diagnosed; reading their launches took * s*",
    ])


def test_passing_test_is_not_diagnosed_without_the_flag(explain):
    result = explain(GOOD, "-rP")
    result.assert_outcomes(passed=1)
    assert "pytest-triton explain" not in result.stdout.str()


SPILLS = """
import pytest
from pytest_triton import perf_target
from fake_triton import FakeJit, N, x
# 255 registers and 1 KB of spills per thread, 8 warps: one block per SM
fat = FakeJit("_fat_kernel", ["x_ptr", "n", "BLOCK"], warps=8, regs=255, spills=1024)
FAKE = {"test_spilling": 1.0}

@perf_target(bandwidth_frac=0.8)
def test_spilling(triton_bench):
    triton_bench(lambda: fat.run(grid=(N // 4096,), x_ptr=x, n=N, BLOCK=4096), bytes=3 * 4 * N)
"""


def test_failed_target_is_diagnosed_without_the_flag_spills_and_register_occupancy(explain):
    result = explain(SPILLS)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([
        "*PerfTargetMissed: FAIL bandwidth_frac: 805 GB/s = 24.0% of H100 SXM datasheet peak*",
        "*- pytest-triton explain -*",
        "test_spilling: fail",
        "  roofline: memory-bound (no flops= given): 24.0% of datasheet 3352 GB/s, 26.8% of measured 3000 GB/s",
        "  kernel _fat_kernel: grid (16384, 1, 1) = 16384 programs; num_warps 8, num_stages 3, "
        "255 registers/thread, spills 1.0 KB, shared 0 B",
        "    occupancy: 1 block/SM = 8 of 64 warps (12%), limited by registers; 124.12 waves of 132 slots, last 12% full",
        "  hints:",
        "    [[]spills] registers spill to local memory*",
        "        evidence: _fat_kernel: 1.0 KB of local memory per thread (255 registers/thread, "
        "num_warps=8, num_stages=3, BLOCK=4096)",
        "    [[]occupancy] low occupancy for a kernel without tensor-core work*",
        "        evidence: _fat_kernel: 255 registers/thread x 256 threads allow 1 block/SM = 8 of 64 warps (12%), limited by registers",
        "    [[]autotune] the kernel is not autotuned*",
    ])


TINY = """
from pytest_triton import perf_target
from fake_triton import FakeJit, N, x
tiny = FakeJit("_tiny_kernel", ["x_ptr", "n", "BLOCK"], warps=1, regs=16)
few = FakeJit("_few_kernel", ["x_ptr", "n", "BLOCK"], warps=4, regs=32)
FAKE = {"test_tiny": 2.0, "test_few": 2.0}

@perf_target(bandwidth_frac=0.8)
def test_tiny(triton_bench):
    triton_bench(lambda: tiny.run(grid=(N // 16,), x_ptr=x, n=N, BLOCK=16), bytes=3 * 4 * N)

@perf_target(bandwidth_frac=0.8)
def test_few(triton_bench):
    triton_bench(lambda: few.run(grid=(8,), x_ptr=x, n=N, BLOCK=8192), bytes=3 * 4 * N)
"""


def test_one_warp_tiny_blocks_and_a_grid_of_few_programs(explain):
    result = explain(TINY)
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines([
        "test_tiny: fail",
        "*occupancy: 32 blocks/SM = 32 of 64 warps (50%), limited by blocks*",
        "    [[]occupancy] *",
        "        evidence: _tiny_kernel: blocks of 1 warp: at most 32 resident blocks/SM x 1 = 32 of 64 warps (50%), limited by blocks",
        "    [[]small-block] blocks are too small*",
        "        evidence: _tiny_kernel: BLOCK=16 = 16 elements per program; 16 of 32 threads have no element",
    ])
    result.stdout.fnmatch_lines([
        "test_few: fail",
        "    [[]waves] fewer programs than SMs*",
        "        evidence: _few_kernel: grid (8, 1, 1) = 8 programs on 132 SMs (124 SMs idle)",
    ])
    assert "[waves]" not in result.stdout.str().split("test_few: fail")[0]
    assert "[occupancy]" not in result.stdout.str().split("test_few: fail")[1]


STRUCTURE = """
import torch
from pytest_triton import perf_target
from fake_triton import FakeJit, FakeTuner, LOOP, N, x
FAKE = {"test_strided": 2.0, "test_chain": 2.0, "test_odd_block": 2.0, "test_stages": 2.0,
        "test_single_config": 2.0, "test_chain_good": 0.28}
strided = torch.empty(4 * 4096)[::4]
copy = FakeJit("_copy_kernel", ["x_ptr", "out_ptr", "n", "BLOCK"])
add = FakeJit("_add_kernel", ["a_ptr", "b_ptr", "out_ptr", "n", "BLOCK"])
mul = FakeJit("_mul_kernel", ["a_ptr", "b_ptr", "out_ptr", "n", "BLOCK"])
relu = FakeJit("_relu_kernel", ["a_ptr", "out_ptr", "n", "BLOCK"])
a, b, t1, t2, out = (torch.empty(1 << 20) for _ in range(5))
tile = FakeJit("_tile_kernel", ["x_ptr", "BLOCK_M", "BLOCK_N"])
loop = FakeJit("_row_kernel", ["x_ptr", "BLOCK"], ttir=LOOP, stages=1)
one = FakeTuner(FakeJit("_one_kernel", ["x_ptr", "BLOCK"]), [({"BLOCK": 1024}, 0.3)])

@perf_target(bandwidth_frac=0.8)
def test_strided(triton_bench):
    triton_bench(lambda: copy.run(grid=(4,), x_ptr=strided, out_ptr=x, n=4096, BLOCK=1024),
                 bytes=3 * 4 * N)

def chain():
    add.run(grid=(1024,), a_ptr=a, b_ptr=b, out_ptr=t1, n=1 << 20, BLOCK=1024)
    mul.run(grid=(1024,), a_ptr=t1, b_ptr=b, out_ptr=t2, n=1 << 20, BLOCK=1024)
    relu.run(grid=(1024,), a_ptr=t2, out_ptr=out, n=1 << 20, BLOCK=1024)

@perf_target(bandwidth_frac=0.8)
def test_chain(triton_bench):
    triton_bench(chain, bytes=3 * 4 * N)

@perf_target(bandwidth_frac=0.8)
def test_chain_good(triton_bench):  # structural: the fusion hint stands at any speed
    triton_bench(chain, bytes=3 * 4 * N)

@perf_target(bandwidth_frac=0.8)
def test_odd_block(triton_bench):
    triton_bench(lambda: tile.run(grid=(4096,), x_ptr=x, BLOCK_M=48, BLOCK_N=64), bytes=3 * 4 * N)

@perf_target(bandwidth_frac=0.8)
def test_stages(triton_bench):
    triton_bench(lambda: loop.run(grid=(4096,), x_ptr=x, BLOCK=1024), bytes=3 * 4 * N)

@perf_target(bandwidth_frac=0.8)
def test_single_config(triton_bench):
    triton_bench(lambda: one.run(grid=(4096,), x_ptr=x, BLOCK=1024), bytes=3 * 4 * N, kernel=one)
"""


def _section(result, test: str) -> str:
    text = result.stdout.str()
    start = text.index(f"\n{test}: ")
    return text[start:text.index("\n  hints", start) + 2000].split("\n\n")[0].split("____")[0]


def test_structural_and_checklist_hints_name_their_evidence(explain):
    result = explain(STRUCTURE, "--triton-perf-explain", "-rP")
    result.assert_outcomes(failed=5, passed=1)
    strided = _section(result, "test_strided")
    assert "[coalescing] a strided operand" in strided
    assert ("evidence: _copy_kernel: x_ptr is float32 (4096,) with stride (4,): no dimension has "
            "stride 1, consecutive elements are 4 elements (16 bytes) apart") in strided
    chain = _section(result, "test_chain")
    assert "kernel _add_kernel: grid (1024, 1, 1)" in chain and "kernel _relu_kernel" in chain
    assert ("[fusion] element-wise kernels run one after another on each other's buffers" in chain)
    assert ("evidence: 3 element-wise launches in one call of fn (_add_kernel -> _mul_kernel -> "
            "_relu_kernel) pass 3 buffers between them: they move 33.6 MB, 12.6 MB more than "
            "touching each of their 5 buffers once (21.0 MB)") in chain
    assert chain.count("[autotune]") == 1  # one hint, the evidence of each kernel
    assert "_add_kernel: no Autotuner chose this launch" in chain and \
        "; _relu_kernel: no Autotuner chose this launch" in chain
    good_chain = _section(result, "test_chain_good")
    assert "near its ceiling" in good_chain and "[fusion]" in good_chain
    assert "[autotune]" not in good_chain  # a speed hint: not raised near the ceiling
    odd = _section(result, "test_odd_block")
    assert "[block-size] block sizes are powers of two" in odd
    assert "evidence: _tile_kernel: BLOCK_M=48" in odd
    stages = _section(result, "test_stages")
    assert "evidence: _row_kernel: a loop kernel launched with num_stages=1" in stages
    single = _section(result, "test_single_config")
    assert "[single-config]" in single and "[autotune]" not in single
    for name in ("test_strided", "test_odd_block", "test_stages"):
        assert "[fusion]" not in _section(result, name)


COMPILE = """
from pytest_triton import perf_target
from fake_triton import FakeJit, FakeTuner, N, x
k = FakeJit("_k", ["x_ptr", "BLOCK"])
space = [({"BLOCK": 2 ** i}, 0.3 + i / 100) for i in range(8, 14)]
slow_tuner = FakeTuner(k, space, bench_time=9.0)
quick_tuner = FakeTuner(FakeJit("_q", ["x_ptr", "BLOCK"]), space, bench_time=9.0)
FAKE = {"test_compile_heavy": 2.0, "test_compile_light": 2.0}
COMPILES = {"test_compile_heavy": [1.4] * 6, "test_compile_light": [0.1] * 6}

@perf_target(bandwidth_frac=0.8)
def test_compile_heavy(triton_bench):
    triton_bench(lambda: slow_tuner.run(grid=(4096,), x_ptr=x, BLOCK=1024), bytes=3 * 4 * N,
                 kernel=slow_tuner)

@perf_target(bandwidth_frac=0.8)
def test_compile_light(triton_bench):
    triton_bench(lambda: quick_tuner.run(grid=(4096,), x_ptr=x, BLOCK=1024), bytes=3 * 4 * N,
                 kernel=quick_tuner)
"""


def test_autotune_space_whose_compile_time_dominates(explain):
    result = explain(COMPILE)
    result.assert_outcomes(failed=2)
    heavy = _section(result, "test_compile_heavy")
    assert "  compiled: 6 kernels in 8.40 s during the measurement" in heavy
    assert ("[compile-time] compiling the autotune space costs more than timing it" in heavy)
    assert "evidence: _k: 6 compilations took 8.4 s of 9.0 s of autotuning (6 configs)" in heavy
    assert "[compile-time]" not in _section(result, "test_compile_light")


def test_json_and_junit_carry_the_diagnosis(explain, pytester):
    result = explain(SPILLS, f"--triton-perf-json={pytester.path / 'r.json'}",
                     f"--junitxml={pytester.path / 'j.xml'}")
    result.assert_outcomes(failed=1)
    doc = json.loads((pytester.path / "r.json").read_text())
    m = doc["results"][0]["measurements"][0]
    d = m["explain"]
    assert [h["code"] for h in d["hints"]] == ["spills", "occupancy", "autotune"]
    k = d["kernels"][0]
    assert (k["n_regs"], k["spill_bytes"], k["num_warps"], k["programs"]) == (255, 1024, 8, 16384)
    assert k["occupancy"]["limiter"] == "registers" and k["occupancy"]["blocks_per_sm"] == 1
    assert d["roofline"]["bound"] == "memory" and d["roofline"]["binding"] == "measured"
    assert doc["device"]["regs_per_sm"] == 65536
    props = {p.get("name"): p.get("value") for p in ET.parse(pytester.path / "j.xml").iter("property")}
    assert props["triton.explain.hints"] == "spills,occupancy,autotune"
    assert props["triton.explain.n_regs"] == "255" and props["triton.explain.spill_bytes"] == "1024"


@pytest.mark.skipif(torch.cuda.is_available(), reason="the no-GPU path; on a GPU ncu runs "
                    "(tests/diagnose/test_explain_gpu.py)")
def test_ncu_without_a_gpu_says_why_and_carries_on(explain):
    result = explain(GOOD, "--triton-perf-explain=ncu", "-rP")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["  ncu: not run: kernels run under Triton's interpreter on the CPU (*)"])


def test_bare_flag_does_not_swallow_a_test_path(explain, pytester):
    pytester.makepyfile(test_k=GOOD, test_other="def test_other(): pass")
    result = pytester.runpytest("--triton-perf", "--triton-perf-explain", "test_k.py", "-rP")
    result.assert_outcomes(passed=1)  # test_k.py alone, explained
    assert "hints: none" in result.stdout.str()
    pytester.makeini("[pytest]\ntriton_perf_explain = on\n")
    result = pytester.runpytest("--triton-perf", "-p", "no:cacheprovider", "test_k.py", "-rP")
    result.assert_outcomes(passed=1)
    assert "hints: none" in result.stdout.str()


@pytest.fixture
def profiler_imported():
    """torch.profiler imports torch._inductor (and with it torch.distributed) at its first use:
    imported here, before pytester snapshots sys.modules, it stays; imported first inside the inner
    run, it is dropped after it, and the next import of torch.distributed (torch.testing's
    assert_close makes one) registers its operator library twice and raises."""
    import torch._inductor  # noqa: F401


def test_profile_writes_a_trace_named_after_each_test(profiler_imported, explain, pytester):
    out = pytester.path / "traces"
    result = explain(GOOD, f"--triton-perf-profile={out}", f"--triton-perf-json={pytester.path / 'r.json'}")
    result.assert_outcomes(passed=1)
    traces = sorted(p.name for p in out.iterdir())
    assert traces == ["test_k.py__test_good.json"]
    trace = json.loads((out / traces[0]).read_text())
    assert any(e.get("name") == "test_k.py::test_good" for e in trace["traceEvents"])
    doc = json.loads((pytester.path / "r.json").read_text())
    assert doc["results"][0]["measurements"][0]["trace"] == str(out / traces[0])


def test_plot_needs_matplotlib_and_says_what_to_install(explain, monkeypatch, pytester):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    result = explain(GOOD, f"--triton-perf-plot={pytester.path / 'r.png'}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    # It said pip install 'pytest-triton[plot]': pytest-triton is on no package index.
    result.stderr.fnmatch_lines(["*--triton-perf-plot *r.png: needs matplotlib, which is not "
                                 "installed: pip install matplotlib"])
    assert "pytest-triton[" not in result.stderr.str()


def test_plot_draws_the_runs_roofline(explain, pytester):
    pytest.importorskip("matplotlib", reason="matplotlib is the [plot] extra")
    result = explain(GOOD + SPILLS.split("fat = ", 1)[0].replace("import pytest", "") + """
fat = FakeJit("_fat_kernel", ["x_ptr", "n", "BLOCK"], warps=8, regs=255, spills=1024)
FAKE["test_spilling"] = 1.0

@perf_target(bandwidth_frac=0.8)
def test_spilling(triton_bench):
    triton_bench(lambda: fat.run(grid=(N // 4096,), x_ptr=x, n=N, BLOCK=4096), bytes=3 * 4 * N)

@perf_target(tflops=100, dtype="float16")
def test_mm(triton_bench):
    triton_bench(lambda: None, flops=2 * 4096 ** 3, bytes=3 * 2 * 4096 ** 2)
FAKE["test_mm"] = 0.25
""", f"--triton-perf-plot={pytester.path / 'out' / 'roof.png'}")
    result.assert_outcomes(passed=2, failed=1)
    png = (pytester.path / "out" / "roof.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 20000
    result.stdout.fnmatch_lines([f"pytest-triton: roofline of 3 measurements written to {pytester.path / 'out' / 'roof.png'}"])


# --- ncu: the command, its CSV, and what it says when it cannot profile ---------------------------

NCU_CSV = '''==PROF== Connected to process 4242 (/usr/bin/python3.12)
==PROF== Profiling "_add_kernel": 0%....50%....100% - 9 passes
"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC","gpu__time_duration.sum","gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed","lts__throughput.avg.pct_of_peak_sustained_elapsed","sm__throughput.avg.pct_of_peak_sustained_elapsed","sm__warps_active.avg.pct_of_peak_sustained_active","sm__maximum_warps_per_active_cycle_pct","smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio","smsp__average_warps_issue_stalled_selected_per_issue_active.ratio","smsp__average_warps_issue_stalled_wait_per_issue_active.ratio"
"","","","","","","","","","","","usecond","%","%","%","%","%","ratio","ratio","ratio"
"0","4242","python3.12","127.0.0.1","_add_kernel","1","7","(128, 1, 1)","(65536, 1, 1)","0","9.0","281.57","91.42","38.10","12.05","87.31","100","11.2","1.0","0.8"
"1","4242","python3.12","127.0.0.1","_relu_kernel","1","7","(128, 1, 1)","(65536, 1, 1)","0","9.0","190.1","90.1","35.0","9.1","85.2","100","9.1","1.0","0.7"
'''


def test_ncu_csv_is_read_and_given_to_its_measurement():
    from pytest_triton.diagnose import explain, ncu

    kernels = ncu.parse(NCU_CSV)
    assert [k["name"] for k in kernels] == ["_add_kernel", "_relu_kernel"]
    k = kernels[0]
    assert (k["duration_us"], k["dram_pct"], k["l2_pct"], k["sm_pct"]) == (281.57, 91.42, 38.10, 12.05)
    assert (k["achieved_occupancy_pct"], k["theoretical_occupancy_pct"]) == (87.31, 100.0)
    assert (k["stall"], k["stall_ratio"]) == ("long_scoreboard", 11.2)  # 'selected' is no stall
    captures = {0: {"launches": [{"kernel": "_add_kernel", "name": "_add_kernel"}]},
                1: {"launches": [{"kernel": "_relu_kernel", "name": "_relu_kernel"}]}}
    order = [{"index": 0, "launches": ["_add_kernel"]}, {"index": 1, "launches": ["_relu_kernel"]}]
    got = ncu.attribute(kernels, order, captures, ["_add_kernel", "_relu_kernel"], "")
    assert [k["name"] for k in got[0]["kernels"]] == ["_add_kernel"]
    assert [k["name"] for k in got[1]["kernels"]] == ["_relu_kernel"]
    assert explain.ncu_lines(got[0]) == [
        "ncu _add_kernel 281.6 us: DRAM 91.4%, L2 38.1%, SM 12.1%, achieved occupancy 87.3%, "
        "theoretical 100.0%; dominant stall: long_scoreboard (11 cycles/instr)"]


def test_ncu_without_counter_permission_says_so():
    from pytest_triton.diagnose import ncu

    out = ("==PROF== Connected to process 1\n==ERROR== ERR_NVGPUCTRPERM - The user does not have "
           "permission to access NVIDIA GPU Performance Counters on the target device 0.\n")
    got = ncu.attribute([], [], {0: {"launches": []}}, ["_k"], out)
    assert got[0]["unavailable"].startswith("ncu cannot read the GPU's performance counters "
                                            "(ERR_NVGPUCTRPERM)")
    assert ncu.unavailable_reason("==WARNING== No kernels were profiled.\n") == \
        "ncu: No kernels were profiled."


def test_the_triton_frames_the_launch_hook_reads_are_still_there():
    """launch_hooks.py reads JITFunction.run's locals (kernel, grid_0..2, bound_args) from the launch
    hook: a Triton release that renames them must fail here, not diagnose nothing on a GPU."""
    import inspect

    import triton
    from triton.compiler import CompiledKernel
    from triton.runtime.jit import JITFunction

    run = inspect.getsource(JITFunction.run)
    for name in ("grid_0", "grid_1", "grid_2", "bound_args", "kernel.run(", "launch_enter_hook"):
        assert name in run, f"triton {triton.__version__}: JITFunction.run has no {name}"
    assert "self.n_spills" in inspect.getsource(CompiledKernel), "CompiledKernel.n_spills is gone"
    assert hasattr(triton.knobs.runtime.launch_enter_hook, "add")
    assert hasattr(triton.knobs.compilation, "listener")


def test_occupancy_limits_and_the_roofline_position_from_operand_sizes():
    import torch
    from triton.tools.tensor_descriptor import TensorDescriptor

    from pytest_triton.diagnose import explain
    from pytest_triton.env import launch_hooks
    from pytest_triton.env.device import DeviceInfo
    from pytest_triton.perf.record import Measurement
    from pytest_triton.perf.stats import summarize
    from pytest_triton.perf.timing import Timings

    h100 = DeviceInfo(name="H100", sms=132, dram_gbps=3352.0, tflops={"float16": 989.4},
                      regs_per_sm=65536, smem_per_sm=233472, max_threads_per_sm=2048,
                      max_blocks_per_sm=32)
    # A pipelined matmul tile: 8 warps, 168 registers, 96 KB of shared memory per program.
    mm = {"num_warps": 8, "n_regs": 168, "shared": 96 * 1024, "programs": 1024}
    occ = explain.occupancy(mm, h100)
    assert occ["limits"] == {"warps": 8, "blocks": 32, "registers": 1, "shared memory": 2}
    assert (occ["blocks_per_sm"], occ["limiter"], occ["occupancy"]) == (1, "registers", 0.125)
    assert round(occ["waves"], 3) == round(1024 / 132, 3) and occ["last_wave_fill"] == (1024 - 7 * 132) / 132
    assert explain.occupancy(mm, DeviceInfo(name="X", sms=1, dram_gbps=1.0, tflops={})) is None

    a, b, c = torch.empty(256, 512, dtype=torch.float16), torch.empty(512, 128, dtype=torch.float16), \
        torch.empty(256, 128, dtype=torch.float16)
    desc = TensorDescriptor(a, list(a.shape), list(a.stride()), [64, 64])

    class Jit:
        __name__ = "_mm"
        params = []

    la = launch_hooks.describe(None, (4, 2), Jit(), {"a_desc": desc, "b_ptr": b.t(), "c_ptr": c})
    ops = {op["arg"]: op for op in la.operands}
    assert ops["a_desc"]["descriptor"] and ops["a_desc"]["nbytes"] == a.nbytes
    assert ops["b_ptr"]["unit_stride"] and not ops["b_ptr"]["contiguous"]  # a transpose coalesces
    assert la.programs == 8
    flops = 2 * 256 * 512 * 128
    ms = flops / 100.0 / 1e9
    m = Measurement(nodeid="t", name=None, time=summarize([ms]), timings=Timings(ms=[ms]),
                    flops=flops, tflops=100.0,
                    peaks={"dram_gbps_datasheet": 3352.0, "tflops_datasheet": 989.4})
    pos = explain.roofline_position(m, explain._operand_bytes([la.to_dict()]))
    assert pos.intensity_from == "operands"
    assert pos.intensity == flops / (a.nbytes + b.nbytes + c.nbytes)
    assert pos.bound == "memory" and pos.binding == "datasheet"  # 73 FLOP/byte < ridge 295


@pytest.mark.parametrize("given", ["7", "7:12345"])
def test_ncu_child_profiles_the_inputs_the_parent_timed(pytester, given):
    # The child gets the test's own seed, fixed (BASE:SEED): its inputs are the parent's whatever
    # node id the child gives the test and whether the parent was given BASE or BASE:SEED.
    pytester.makepyfile(test_k="""
        from pytest_triton.diagnose import ncu
        from pytest_triton.env import seeding
        def test_k(request, make_tensor):
            cmd = ncu.command(request.config, request.node, "ncu", ["_k"], "log.csv")
            value = next(a.split("=", 1)[1] for a in cmd if a.startswith("--triton-seed="))
            seed = seeding.for_item(request.node, seeding.base(request.config))
            assert value == f"7:{seed.seed}", value
            with open("seed.txt", "w") as f:
                f.write(value)
    """)
    result = pytester.runpytest("--triton-interpret", "--triton-seed", given, "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    value = (pytester.path / "seed.txt").read_text()
    if ":" in given:
        assert value == given
    else:
        assert value.startswith("7:") and value != "7:7"


def test_explain_without_triton_perf_says_it_does_nothing(pytester):
    pytester.makepyfile(test_k="def test_k(): pass")
    result = pytester.runpytest("-p", "no:cacheprovider", "--triton-perf-explain=on")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*PytestConfigWarning: pytest-triton: --triton-perf-explain acts on "
                                 "perf measurements, and there are none without --triton-perf: add "
                                 "--triton-perf*"])
    quiet = pytester.runpytest("-p", "no:cacheprovider", "--triton-perf-explain=off")
    assert "PytestConfigWarning" not in quiet.stdout.str()


def test_perf_json_without_triton_perf_says_it_writes_nothing(pytester):
    pytester.makepyfile(test_k="def test_k(): pass")
    result = pytester.runpytest("-p", "no:cacheprovider", "--triton-perf-json", "perf.json")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*PytestConfigWarning: pytest-triton: --triton-perf-json acts on "
                                 "perf measurements, and there are none without --triton-perf*"])
    assert not (pytester.path / "perf.json").exists()
