"""triton_resources: kernels compiled for sm_80 and sm_90 on CPU, held to their limits. The
negative controls (a kernel that spills under a low maxnreg, shared memory over sm_80's limit but
within sm_90's, occupancy under the floor, an fp8 dot sm_80 cannot compile) fail with their
numbers; the same kernels within their limits pass; bad input is named."""

from __future__ import annotations

import re

import pytest

from pytest_triton.env import archcompile
from pytest_triton.env.device import ARCH_LIMITS
from pytest_triton.env.occupancy import occupancy

KERNELS = '''
import torch
import triton
import triton.language as tl


@triton.jit
def spilly(x_ptr, y_ptr, BLOCK: tl.constexpr):
    # BLOCK / (32 * num_warps) values per thread, all live across the row sum
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    a = x * 1.5 + 0.25
    b = tl.exp(a) + x
    c = tl.sum(b * a, 0)
    tl.store(y_ptr + offs, b * c + a)


@triton.jit
def mm(a_ptr, b_ptr, c_ptr, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    # a (BM, K) @ b (K, BN), one program: num_stages K tiles of a and b in flight
    rm = tl.arange(0, BM)
    rn = tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), tl.float32)
    for k in range(0, K, BK):
        a = tl.load(a_ptr + rm[:, None] * K + (k + rk)[None, :])
        b = tl.load(b_ptr + (k + rk)[:, None] * BN + rn[None, :])
        acc += tl.dot(a, b)
    tl.store(c_ptr + rm[:, None] * BN + rn[None, :], acc)


@triton.jit
def dot(a_ptr, b_ptr, c_ptr, B: tl.constexpr):
    r = tl.arange(0, B)
    a = tl.load(a_ptr + r[:, None] * B + r[None, :])
    b = tl.load(b_ptr + r[:, None] * B + r[None, :])
    tl.store(c_ptr + r[:, None] * B + r[None, :], tl.dot(a, b))


def run_spilly(**opts):
    x = torch.randn(1024)
    y = torch.empty_like(x)
    spilly[(1,)](x, y, BLOCK=1024, num_warps=1, **opts)


def run_mm(stages):
    a = torch.randn(128, 64, dtype=torch.float16)
    b = torch.randn(64, 128, dtype=torch.float16)
    c = torch.empty(128, 128)
    mm[(1,)](a, b, c, 64, BM=128, BN=128, BK=64, num_warps=8, num_stages=stages)
    torch.testing.assert_close(c, a.float() @ b.float(), rtol=1e-2, atol=1e-2)


def run_dot(dtype):
    a = torch.randn(32, 32).to(dtype)
    b = torch.randn(32, 32).to(dtype)
    c = torch.empty(32, 32)
    dot[(1,)](a, b, c, B=32)
'''


@pytest.fixture
def resources_run(pytester, run_interpreted_fresh):
    # fresh: on a GPU machine triton.language was imported for the compiler in this process, and
    # an in-process interpreted run of the kernels would call its @jit functions directly
    pytester.makepyfile(kernels=KERNELS)

    def run(body: str, *args):
        pytester.makepyfile(test_k="import pytest\nimport torch\nimport kernels\n\n" + body)
        return run_interpreted_fresh("-p", "no:randomly", "-rA", *args)

    return run


def _section(text: str) -> list[str]:
    return [ln for ln in text.splitlines() if re.search(r" on sm_\d+: ", ln)]


def test_marker_is_registered_signature_first(pytester):
    result = pytester.runpytest("--markers")
    result.stdout.fnmatch_lines(["@pytest.mark.triton_resources([*], max_registers=None, max_spills=0,"
                                 " max_shared_memory='per-device', min_occupancy=None, archs=None):*"])


def test_spills_under_a_low_maxnreg_fail_and_without_it_pass(resources_run):
    result = resources_run("""
@pytest.mark.triton_resources(max_spills=0)
def test_capped():
    kernels.run_spilly(maxnreg=32)

@pytest.mark.triton_resources(max_spills=0)
def test_free():
    kernels.run_spilly()
""")
    result.assert_outcomes(passed=1, failed=1)
    text = result.stdout.str()
    lines = [ln for ln in _section(text) if "maxnreg=32" in ln and "spilled" in ln]
    for arch in ("sm_80", "sm_90"):
        got = [ln for ln in lines if f" on {arch}: " in ln]
        assert got, text
        m = re.search(r"32 registers/thread and ([\d,]+) bytes spilled per thread \(max_spills=0\)",
                      got[0])
        assert m and int(m.group(1).replace(",", "")) > 0, got[0]
    assert "spilly (BLOCK=1024, num_warps=1) on sm_90: " in text  # the free one's line
    # the compiler's own hint: the same launch without the cap, compiled, does not spill
    assert re.search(r"hint: fits without maxnreg: \d+ registers/thread, 0 bytes spilled", text)
    assert "ResourceLimitExceeded: triton_resources(archs=('sm_80', 'sm_90'))" in text


def test_shared_memory_over_sm80s_limit_but_within_sm90s(resources_run):
    result = resources_run("""
@pytest.mark.triton_resources(archs=("sm_80", "sm_90"))
def test_both():
    kernels.run_mm(7)

@pytest.mark.triton_resources(archs=("sm_90",))
def test_hopper_only():
    kernels.run_mm(7)
""")
    result.assert_outcomes(passed=1, failed=1)
    text = result.stdout.str()
    failure = text.split("ResourceLimitExceeded: ", 1)[1].split("\n---", 1)[0]
    assert "mm (BM=128, BN=128, BK=64, num_warps=8, num_stages=7) on sm_80: 196,608 bytes " \
           "(192.0 KB) of shared memory per program, over sm_80's most per block: 166,912 bytes " \
           "(163.0 KB)." in failure, failure
    assert "on sm_90" not in failure.split("hint:")[0]
    # the compiler's own hint: one stage fewer fits sm_80
    assert "hint: fits with num_stages=6:" in failure, failure
    sm90 = [ln for ln in _section(text) if "on sm_90: " in ln]
    assert sm90 and all("229,376 bytes (224.0 KB) of shared memory" in ln for ln in sm90), sm90


def test_occupancy_under_the_floor_fails_with_its_number(resources_run):
    result = resources_run("""
@pytest.mark.triton_resources(min_occupancy=0.5)
def test_floor():
    kernels.run_mm(2)

@pytest.mark.triton_resources(min_occupancy=0.125)
def test_low_floor():
    kernels.run_mm(2)
""")
    result.assert_outcomes(passed=1, failed=1)
    text = result.stdout.str()
    failure = text.split("ResourceLimitExceeded: ", 1)[1].split("\n---", 1)[0]
    for arch in ("sm_80", "sm_90"):
        line = next(ln for ln in failure.splitlines() if f" on {arch}: occupancy" in ln)
        # the number is the occupancy arithmetic's, from the registers ptxas allocated
        regs = int(re.search(rf" on {arch}: (\d+) registers/thread",
                             text.split("PASSES", 1)[1]).group(1))
        shared = int(re.search(rf" on {arch}: .*?([\d,]+) bytes(?: \([\d.]+ KB\))? of shared",
                               text.split("PASSES", 1)[1]).group(1).replace(",", ""))
        occ = occupancy({"num_warps": 8, "n_regs": regs, "shared": shared}, ARCH_LIMITS[arch])
        assert f"occupancy {100 * occ['occupancy']:.0f}% (min 50%)" in line, (line, occ)
        assert occ["occupancy"] < 0.5 and "limited by registers" in line, line
    assert "hint:" in failure


def test_a_kernel_that_cannot_compile_for_an_arch_fails_with_the_compilers_message(resources_run):
    result = resources_run("""
@pytest.mark.triton_resources(archs=("sm_80", "sm_90"))
def test_fp8():
    kernels.run_dot(torch.float8_e4m3fn)

@pytest.mark.triton_resources(archs=("sm_89", "sm_90"))
def test_fp8_where_it_compiles():
    kernels.run_dot(torch.float8_e4m3fn)
""")
    result.assert_outcomes(passed=1, failed=1)
    failure = result.stdout.str().split("ResourceLimitExceeded: ", 1)[1].split("\n---", 1)[0]
    assert "dot (B=32) on sm_80: cannot be compiled: CompilationError" in failure
    assert "type fp8e4nv not supported in this architecture" in failure
    assert " on sm_90" not in failure


@pytest.mark.parametrize("marker, needle", [
    ("triton_resources(archs=('sm_75',))", "archs=('sm_75',): unknown GPU architecture 'sm_75'"),
    ("triton_resources(archs=())", "archs=(): expected a tuple of architecture names"),
    ("triton_resources(max_regs=64)", "triton_resources can't have 'max_regs' keyword argument"),
    ("triton_resources(max_registers=300)", "max_registers=300: expected a whole number >= 1 and <= 255"),
    ("triton_resources(max_spills=-4)", "max_spills=-4: expected a whole number >= 0"),
    ("triton_resources(max_shared_memory='48KB')", "max_shared_memory='48KB': expected a whole number"),
    ("triton_resources(min_occupancy=1.5)", "min_occupancy=1.5: expected a fraction in (0, 1]"),
    ("triton_resources(64)", "takes keyword arguments only, got (64,)"),
])
def test_bad_marker_is_an_error_naming_test_and_argument(resources_run, marker, needle):
    result = resources_run(f"""
@pytest.mark.{marker}
def test_kernel():
    kernels.run_spilly()
""")
    result.assert_outcomes(errors=1)
    text = result.stdout.str()
    assert "test_k.py::test_kernel: triton_resources: " in text and needle in text, text


def test_a_marked_test_that_launches_no_kernel_is_an_error_naming_it(resources_run):
    result = resources_run("""
@pytest.mark.triton_resources()
def test_nothing():
    torch.ones(3).sum()
""")
    result.assert_outcomes(failed=1)
    assert "TritonResourcesError: test_k.py::test_nothing: triton_resources(archs=('sm_80', " \
           "'sm_90')), but the test launched no Triton kernel: nothing to check" in result.stdout.str()


def test_a_ptxas_that_does_not_know_the_arch_skips_naming_it(resources_run, pytester, monkeypatch):
    fake = pytester.path / "old-ptxas"
    fake.write_text("#!/bin/sh\n"
                    "if [ \"$1\" = --version ]; then echo 'Cuda compilation tools, release 11.0, "
                    "V11.0.1'; else echo \"Allowed values for this option:  'sm_70','sm_75',"
                    "'sm_80'.\"; fi\n")
    fake.chmod(0o755)
    for var in ("TRITON_PTXAS_PATH", "TRITON_PTXAS_BLACKWELL_PATH"):
        monkeypatch.setenv(var, str(fake))
    result = resources_run("""
@pytest.mark.triton_resources(archs=("sm_90",))
def test_hopper():
    kernels.run_spilly()
""")
    result.assert_outcomes(skipped=1)
    assert f"sm_90 not checked: ptxas 11.0 ({fake}) cannot compile for sm_90" in result.stdout.str()


def test_the_default_archs_come_from_the_option(resources_run):
    result = resources_run("""
@pytest.mark.triton_resources()
def test_k():
    kernels.run_spilly()
""", "--triton-resources-archs=sm_89")
    result.assert_outcomes(passed=1)
    lines = _section(result.stdout.str())
    assert lines and all(" on sm_89: " in ln for ln in lines), lines


def test_an_unknown_default_arch_stops_the_run(pytester):
    result = pytester.runpytest("--triton-resources-archs=sm_80,sm_7x")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "--triton-resources-archs (or ini triton_resources_archs): unknown GPU architecture " \
           "'sm_7x'" in result.stderr.str()


def test_perf_target_takes_the_same_keywords(resources_run):
    result = resources_run("""
from pytest_triton import perf_target

@perf_target(max_ms=1.0, max_spills=0, archs=("sm_90",))
def test_capped(triton_bench):
    triton_bench(lambda: kernels.run_spilly(maxnreg=32))

@perf_target(max_ms=1.0, max_spills=0, archs=("sm_90",))
def test_free(triton_bench):
    triton_bench(lambda: kernels.run_spilly())
""")
    # the capped one fails its resources on CPU; the free one ends as the dry run's skip
    result.assert_outcomes(failed=1, skipped=1)
    text = result.stdout.str()
    assert "ResourceLimitExceeded: perf_target(archs=('sm_90',)):" in text
    assert "dry run, nothing timed" in text


LIBRARY = '''
import torch
import triton
import triton.language as tl
from triton.language.extra import libdevice


@triton.autotune(configs=[triton.Config({"BLOCK": 128}, num_warps=4),
                          triton.Config({"BLOCK": 1024}, num_warps=8)], key=["n"])
@triton.jit
def _gelu_fwd(x_ptr, y_ptr, n, scale, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m).to(tl.float32)
    y = 0.5 * x * (1 + libdevice.erf(x * scale))
    tl.store(y_ptr + offs, y.to(y_ptr.dtype.element_ty), mask=m)


@triton.jit
def _gelu_bwd(x_ptr, dy_ptr, dx_ptr, n, scale, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m).to(tl.float32)
    dy = tl.load(dy_ptr + offs, mask=m).to(tl.float32)
    cdf = 0.5 * (1 + libdevice.erf(x * scale))
    pdf = libdevice.exp(-0.5 * x * x) * 0.3989422804014327
    tl.store(dx_ptr + offs, (dy * (cdf + x * pdf)).to(dx_ptr.dtype.element_ty), mask=m)


class Gelu(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        y = torch.empty_like(x)
        n = x.numel()
        _gelu_fwd[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, y, n, 0.7071067811865476)
        ctx.save_for_backward(x)
        return y

    @staticmethod
    def backward(ctx, dy):
        (x,) = ctx.saved_tensors
        dx = torch.empty_like(x)
        n = x.numel()
        _gelu_bwd[(triton.cdiv(n, 256),)](x, dy.contiguous(), dx, n, 0.7071067811865476, BLOCK=256)
        return dx
'''


def test_a_library_kernel_autotuned_through_its_autograd_function_passes(resources_run,
                                                                       pytester):
    pytester.makepyfile(library=LIBRARY)
    body = """
import library

@pytest.mark.triton_resources(max_registers=128)
def test_gelu():
    x = torch.randn(3000, requires_grad=True)
    y = library.Gelu.apply(x)
    y.sum().backward()
    ref = torch.nn.functional.gelu(x.detach())
    torch.testing.assert_close(y.detach(), ref, rtol=1e-4, atol=1e-5)
"""
    result = resources_run(body)
    result.assert_outcomes(passed=1)
    lines = _section(result.stdout.str())
    for arch in ("sm_80", "sm_90"):
        # every config of the autotuner (the interpreter ran one), and the backward's kernel
        assert f"_gelu_fwd (BLOCK=128, num_warps=4, num_stages=3) on {arch}: " in "\n".join(lines)
        assert f"_gelu_fwd (BLOCK=1024, num_warps=8, num_stages=3) on {arch}: " in "\n".join(lines)
        assert f"_gelu_bwd (BLOCK=256, num_warps=4) on {arch}: " in "\n".join(lines)
    # with --triton-autotune=heuristic, the config it picks only
    result = resources_run(body, "--triton-autotune=heuristic")
    result.assert_outcomes(passed=1)
    text = "\n".join(_section(result.stdout.str()))
    assert "BLOCK=128" in text and "BLOCK=1024" not in text, text


def test_k_of_n_autotune_configs_over_the_limit(resources_run, pytester):
    pytester.makepyfile(tuned='''
import torch
import triton
import kernels

tuned = triton.autotune(configs=[triton.Config({}, num_stages=2, num_warps=8),
                                 triton.Config({}, num_stages=7, num_warps=8),
                                 triton.Config({}, num_stages=3, num_warps=8)],
                        key=["K"])(kernels.mm)
''')
    result = resources_run("""
import tuned

@pytest.mark.triton_resources(archs=("sm_80",))
def test_tuned():
    a = torch.randn(128, 64, dtype=torch.float16)
    b = torch.randn(64, 128, dtype=torch.float16)
    c = torch.empty(128, 128)
    tuned.tuned[(1,)](a, b, c, 64, BM=128, BN=128, BK=64)
""")
    result.assert_outcomes(failed=1)
    failure = result.stdout.str().split("ResourceLimitExceeded: ", 1)[1]
    assert "mm: 3 configs on sm_80: 1 of 3 configs over the limit" in failure, failure
    assert "num_stages=7) on sm_80: 196,608 bytes" in failure


def test_compiles_are_cached_on_disk(resources_run, monkeypatch):
    body = """
@pytest.mark.triton_resources()
def test_k():
    kernels.run_spilly()
"""
    monkeypatch.setattr(archcompile, "_memo", {})
    first = resources_run(body)
    first.assert_outcomes(passed=1)
    assert re.search(r"triton_resources checked 1 test: 2 compiles \(0 from the cache",
                     first.stdout.str()), first.stdout.str()
    monkeypatch.setattr(archcompile, "_memo", {})  # a new process: only the disk remembers
    again = resources_run(body)
    again.assert_outcomes(passed=1)
    assert "2 compiles (2 from the cache" in again.stdout.str()


def test_a_gpu_launch_is_recorded_from_its_compiled_kernel(pytester, run_interpreted):
    # On a GPU the launch hook sees JITFunction.run's frame: its CompiledKernel (source, metadata,
    # and the driver's n_regs / n_spills) is the record, and the GPU's own arch takes its numbers.
    # Here a real compile for sm_90 stands in for the launch, in a frame shaped as run's.
    pytester.makepyfile(kernels=KERNELS)
    pytester.makepyfile(test_k='''
import torch
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

import kernels
from pytest_triton.env import archcompile, native_jit
from pytest_triton.env.compile_specs import Recorder


def test_hook():
    x = torch.randn(1024)
    spec = archcompile.spec_of_call(kernels.spilly, (x, torch.empty_like(x)),
                                    {"BLOCK": 1024, "num_warps": 1})
    with native_jit.language_for_compile():
        compiled = triton.compile(ASTSource(spec.fn, spec.signature, spec.constexprs, spec.attrs),
                                  target=GPUTarget("cuda", 90, 32), options=spec.options)
    compiled.n_regs, compiled.n_spills = 77, 3  # what the driver would fill in at load
    recorder = Recorder()

    def run(self, *args, grid, warmup, **kwargs):  # JITFunction.run's locals
        grid_0, kernel = 1, compiled
        recorder(None)
        recorder(None)  # launched again: counted, not recorded twice

    run(spec.fn, x, x, grid=(1,), warmup=False, BLOCK=1024, num_warps=1)
    assert recorder.errors == []
    (rec,) = recorder.kernels.values()
    assert rec.launches == 2 and rec.compiled is compiled and rec.tuner is None
    assert rec.spec.signature == spec.signature and rec.spec.constexprs == spec.constexprs
    assert rec.spec.options["num_warps"] == 1 and rec.kwargs == {"BLOCK": 1024, "num_warps": 1}
    real = archcompile.real_resources(compiled, "sm_90")
    assert (real.n_regs, real.spill_bytes, real.shared) == (77, 12, compiled.metadata.shared)
    cpu = archcompile.compile_resources(rec.spec, "sm_90")
    assert cpu.error is None and cpu.num_warps == 1 and cpu.n_regs > 0
''')
    run_interpreted("-p", "no:randomly").assert_outcomes(passed=1)
