"""The work counted under Triton's interpreter (env/work.py): masked lanes only, by element size,
atomics, tl.dot FLOPs, programs and launches; each launch's own; the same twice; and a dry run's
timed call counted into the JSON report and the terminal table."""

import json
import os

import pytest

from pytest_triton.env import work

pytestmark = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1",
                                reason="counts kernels only under Triton's interpreter")

KERNELS = """
import torch, triton, triton.language as tl


@triton.jit
def _add_kernel(x_ptr,  # *Pointer* to the first input, shape (n,)
                y_ptr,  # *Pointer* to the second input, shape (n,)
                out_ptr,  # *Pointer* to the output, shape (n,)
                n,
                BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask),
             mask=mask)


@triton.jit
def _dot_atomic_kernel(a_ptr,  # *Pointer* to A, shape (M, M), row-major
                       b_ptr,  # *Pointer* to B, shape (M, M), row-major
                       c_ptr,  # *Pointer* to C, shape (M, M), row-major
                       M: tl.constexpr):
    r = tl.arange(0, M)
    a = tl.load(a_ptr + r[:, None] * M + r[None, :])
    b = tl.load(b_ptr + r[:, None] * M + r[None, :])
    tl.store(c_ptr + r[:, None] * M + r[None, :], tl.dot(a, b))
    tl.atomic_add(c_ptr + r, 1.0, mask=r < 5)


def add(x, y, out, block=256):
    _add_kernel[(triton.cdiv(x.numel(), block),)](x, y, out, x.numel(), BLOCK=block)
    return out
"""


@pytest.fixture(scope="module")
def kernels(tmp_path_factory):
    path = tmp_path_factory.mktemp("work") / "work_kernels.py"
    path.write_text(KERNELS)
    namespace = {}
    exec(compile(KERNELS, str(path), "exec"), namespace)  # a real file: @triton.jit reads it
    return namespace


def test_only_the_lanes_a_mask_lets_through_are_counted(kernels):
    import torch

    x, y = torch.randn(1000), torch.randn(1000, dtype=torch.float16)
    out = torch.empty(1000)
    with work.counting() as w:
        kernels["add"](x, y, out)
    assert work.unavailable() is None
    # 4 programs of 256 lanes, 1000 active: 4000 + 2000 bytes loaded, 4000 stored
    assert (w.launches, w.programs) == (1, 4)
    assert w.loaded == {4: 4000, 2: 2000} and w.stored == {4: 4000}
    assert w.bytes == 10000 and w.flops == 0 and w.atomics == 0
    assert [k.kernel for k in w.kernels] == ["_add_kernel"]


def test_dot_flops_atomics_and_each_launch_are_counted(kernels):
    import torch

    a, b, c = torch.randn(16, 16), torch.randn(16, 16), torch.empty(16, 16)
    with work.counting() as w:
        kernels["_dot_atomic_kernel"][(2,)](a, b, c, M=16)
        kernels["add"](a.view(-1), b.view(-1), c.view(-1), block=128)
    one, two = w.kernels
    assert one.flops == 2 * 2 * 16 * 16 * 16  # two programs, one 16x16x16 dot each
    assert (one.atomics, one.atomic_bytes) == (2 * 5, 2 * 5 * 4)
    assert one.loaded == {4: 2 * 2 * 1024} and one.stored == {4: 2 * 1024}
    assert (two.programs, two.bytes) == (2, 3 * 1024)
    assert (w.launches, w.programs, w.flops) == (2, 4, one.flops)
    assert w.bytes == one.bytes + two.bytes


def test_counts_repeat_exactly_and_nothing_is_counted_outside(kernels):
    import torch

    x = torch.randn(777)
    out = torch.empty_like(x)
    counts = []
    for _ in range(2):
        with work.counting() as w:
            kernels["add"](x, x, out)
        counts.append(w.to_dict())
    kernels["add"](x, x, out)  # outside counting(): the last count is not changed
    assert counts[0] == counts[1] == w.to_dict()
    assert work.Work.from_dict(counts[0]).key() == w.key()


def test_torchs_own_ops_in_the_call_are_counted_beside_the_kernels(kernels):
    import torch

    x = torch.randn(1000)
    with work.counting() as w:
        out = torch.zeros(1000)  # a library's zero-filled output: 4000 bytes written
        scratch = torch.empty(1000)  # uninitialised: nothing moved
        kernels["add"](x, x, out)
        out.view(10, 100).add_(1.0)  # a view moves nothing; add_ reads and writes 4000
        scratch.copy_(out)  # an overwrite: reads its source, writes itself, 4000 each
    assert w.torch_ops == {"zeros": 1, "add_": 1, "copy_": 1}
    assert (w.torch_loaded, w.torch_stored) == (8000, 12000)
    assert (w.bytes, w.call_bytes) == (12000, 12000 + 20000)  # the kernel's; and torch's too
    assert w.kernels[0].torch_ops == {}  # a launch's own count holds its kernel's work only
    assert "torch ops (add_ x1, copy_ x1, zeros x1): 0.000008 GB read, 0.000012 GB written" \
        in w.describe()
    back = work.Work.from_dict(w.to_dict())
    assert back.key() == w.key() and back.call_bytes == w.call_bytes
    assert back.torch_ops == w.torch_ops
    with work.counting() as bare:
        kernels["add"](x, x, out)
    assert bare.torch_ops == {} and "torch" not in bare.to_dict()  # the negative control
    # torch's part is not compared between runs (a kept buffer's first fill comes and goes
    # with the order tests run in): the kernels' counts are
    assert bare.key() == w.key()


DRY = KERNELS + """
from pytest_triton import perf_target


@perf_target(bandwidth_frac=0.8)
def test_add_speed(triton_bench):
    x = torch.randn(1000)
    out = torch.empty_like(x)
    triton_bench(lambda: add(x, x, out), bytes=3 * x.nbytes, baseline=lambda: add(x, x, out))
"""


def test_a_dry_runs_timed_call_is_counted_into_the_report(pytester, run_interpreted):
    pytester.makepyfile(test_k=DRY)
    result = run_interpreted("-p", "no:cacheprovider", "--triton-perf",
                             "--triton-perf-allow-unchecked", "--triton-perf-json", "perf.json")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines([
        "work counted under Triton's interpreter*",
        "test*launches*programs*GB moved (logical)*GB loaded*GB stored*atomic lanes*GFLOP*declared",
        "test_add_speed*1*4*0.000012*0.000008*0.000004*0*0*bytes=0.000012 GB",
    ])
    (entry,) = json.loads((pytester.path / "perf.json").read_text())["results"]
    (call,) = entry["dry_calls"]
    # fn only: the baseline launches the same kernel, and is not counted
    assert call["work"]["launches"] == 1 and call["work"]["bytes"] == 12000
    assert call["bytes"] == 12000


DECLARED = KERNELS + """
import pytest
from pytest_triton import perf_target


@perf_target(bandwidth_frac=0.8)
@pytest.mark.parametrize("extra", [0, 8, 800])
def test_add_declares(triton_bench, extra):
    x = torch.randn(1000)
    out = torch.empty_like(x)
    triton_bench(lambda: add(x, x, out), bytes=3 * x.nbytes + extra)


@perf_target(tflops=1)
@pytest.mark.parametrize("flops", [2 * 2 * 16**3 // 2, 2 * 2 * 16**3 * 2])
def test_dot_declares(triton_bench, flops):
    a, b, c = torch.randn(16, 16), torch.randn(16, 16), torch.empty(16, 16)
    triton_bench(lambda: _dot_atomic_kernel[(2,)](a, b, c, M=16), flops=flops)


@perf_target(tflops=1)
def test_flops_of_a_kernel_without_dot_are_not_counted(triton_bench):
    x = torch.randn(1000)
    out = torch.empty_like(x)
    triton_bench(lambda: add(x, x, out), flops=10**9)


@perf_target(bandwidth_frac=0.8)
@pytest.mark.parametrize("fills", [1, 2])
def test_zero_filled_output_declares(triton_bench, fills):
    # as a library allocates an output it accumulates into: torch.zeros, then the kernel; the
    # declaration counts the fill once (passes) or twice (fails)
    x = torch.randn(1000)
    triton_bench(lambda: add(x, x, torch.zeros(1000)), bytes=3 * x.nbytes + fills * x.nbytes)


@perf_target(bandwidth_frac=0.8)
def test_add_reads_twice(triton_bench):
    x = torch.randn(1000)
    out = torch.empty_like(x)
    triton_bench(lambda: (add(x, x, out), add(x, x, out)), bytes=3 * x.nbytes)
"""


def test_declarations_above_the_count_fail_naming_both(pytester, run_interpreted):
    pytester.makepyfile(test_k=DECLARED)
    result = run_interpreted("-p", "no:cacheprovider", "-rs")
    # the exact declaration and 8 bytes over (0.07%, inside 1%) pass, 800 bytes over (6.7%)
    # fails; half the dot's FLOPs passes, twice them fails; a kernel without tl.dot is unchecked
    result.assert_outcomes(skipped=6, failed=3)
    result.stdout.fnmatch_lines([
        "*test_add_declares?800?: bytes=0.0000128 GB declared, but the timed call moved "
        "0.000012 GB (0.000008 GB loaded, 0.000004 GB stored): 6.7% more declared than done; "
        "every GB/s and fraction of peak bandwidth reported for it would be inflated*",
        "*test_dot_declares?32768?: flops=0.000032768 GFLOP declared, but the timed call's "
        "tl.dot did 0.000016384 GFLOP: 100.0% more declared than done; every TFLOP/s*",
        "*test_zero_filled_output_declares?2?: bytes=0.00002 GB declared, but the timed call "
        "moved 0.000016 GB (0.000008 GB loaded, 0.000004 GB stored; torch ops (zeros x1): 0 GB "
        "read, 0.000004 GB written): 25.0% more declared than done*",
    ])
    out = result.stdout.str()
    assert "test_add_declares[0]" not in out.split("short test summary")[-1].split("SKIPPED")[0]


def test_a_memory_bound_call_moving_much_more_than_declared_gets_a_note(pytester,
                                                                          run_interpreted):
    pytester.makepyfile(test_k=DECLARED)
    result = run_interpreted("-p", "no:cacheprovider", "-k", "reads_twice or dot_declares")
    result.stdout.fnmatch_lines([
        "*WorkNote: test_k.py::test_add_reads_twice: the timed call moved 0.000024 GB, 2.00x its "
        "bytes=0.000012 GB (0.000016 GB loaded, 0.000008 GB stored): redundant loads*",
    ])
    # the dot counted twice the FLOPs declared (as a matmul padded to its tiles does): no note
    assert "test_dot_declares[8192]" not in result.stdout.str()
    result.stdout.fnmatch_lines(["*1 failed, 2 skipped, 6 deselected, 1 warning*"])


def test_an_interpreter_without_a_counted_method_is_not_counted_and_says_why(monkeypatch):
    from triton.runtime import interpreter as ti

    monkeypatch.setattr(work, "_unavailable", [])
    monkeypatch.delattr(ti.InterpreterBuilder, "create_atomic_cas")
    with work.counting() as w:
        assert w is None
    assert work.unavailable() == "this Triton's interpreter has no InterpreterBuilder.create_atomic_cas"


def test_an_interpreter_whose_loads_bypass_the_counter_is_caught_by_the_probe(monkeypatch):
    import numpy as np
    from triton.runtime import interpreter as ti

    def create_load(self, ptr, cache_policy, is_volatile):  # straight to memory, as in old Tritons
        dtype = ti._get_np_dtype(ptr.get_element_ty())
        ones = np.ones_like(ptr.data, dtype=bool)
        return ti.TensorHandle(ti._interpreter.load(ptr.data, ones, np.zeros_like(ptr.data, dtype),
                                                    dtype), ptr.get_element_ty())

    monkeypatch.setattr(work, "_unavailable", [])
    monkeypatch.setattr(work, "_probed", [])
    monkeypatch.setattr(ti.InterpreterBuilder, "create_load", create_load)
    with work.counting() as w:
        assert w is None
    assert work.unavailable() == ("this Triton's interpreter loads past the counted methods (a "
                                  "probe of 20 bytes counted 8)")


BROKEN = KERNELS + """
import triton.language as tl
from pytest_triton import perf_target


@triton.jit
def _broken_kernel(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs) + undefined_name, mask=offs < n)


@perf_target(max_ms=1)
def test_a_counted_call(triton_bench):  # leaves the counter's wrappers on the interpreter
    x = torch.randn(100)
    triton_bench(lambda: add(x, x, torch.empty_like(x)))


@perf_target(max_ms=1)
def test_a_counted_kernel_error(triton_bench):
    triton_bench(lambda: _broken_kernel[(1,)](torch.randn(8), 8, BLOCK=8))


def test_a_kernel_error_after_counting():
    _broken_kernel[(1,)](torch.randn(8), 8, BLOCK=8)
"""


def test_a_kernel_error_shows_no_frame_of_the_counter(pytester, run_interpreted):
    pytester.makepyfile(test_k=BROKEN)
    result = run_interpreted("-p", "no:cacheprovider", "-p", "no:randomly")
    result.assert_outcomes(skipped=1, failed=2)
    assert result.stdout.str().count("name 'undefined_name' is not defined") >= 2
    assert "env/work.py" not in result.stdout.str()
