"""Poisoned allocations (correctness/poison.py): what the code under test allocates uninitialised
starts as poison, so an output element a library's kernel never writes is caught, and nothing
the code computes changes."""

from collections import Counter

import pytest
import torch
import triton
import triton.language as tl

from pytest_triton import assert_close, assert_every_config, pin_config, poison_allocations, poison_value

from . import _fake_gpu

FACTORIES = {
    "empty": lambda x: torch.empty(7, 5, dtype=x.dtype),
    "empty_like": lambda x: torch.empty_like(x),
    "new_empty": lambda x: x.new_empty((3, 4)),
    "empty_strided": lambda x: torch.empty_strided((4, 3), (1, 5), dtype=x.dtype),
    "new_empty_strided": lambda x: x.new_empty_strided((4, 3), (4, 1)),
    "empty_permuted": lambda x: torch.empty_permuted((2, 3, 4), (2, 0, 1), dtype=x.dtype),
    "legacy Tensor(n)": lambda x: x.new(9),
    "channels_last": lambda x: torch.empty(2, 3, 4, 5, dtype=x.dtype,
                                           memory_format=torch.channels_last),
}


def _storage(t):
    """Every element of t's storage, gaps included."""
    return t.as_strided((t.untyped_storage().nbytes() // t.element_size(),), (1,), 0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64,
                                   torch.int32, torch.int8, torch.uint8, torch.int64])
@pytest.mark.parametrize("make", FACTORIES.values(), ids=FACTORIES.keys())
def test_every_uninitialised_factory_starts_as_poison(make, dtype):
    x = torch.zeros(2, 3, dtype=dtype)
    with poison_allocations() as record:
        t = make(x)
    flat = _storage(t)
    if dtype.is_floating_point:
        assert torch.isnan(flat).all(), flat
    else:
        assert (flat == poison_value(dtype)).all(), flat
    assert record.tensors == 1 and record.bytes == flat.numel() * t.element_size()


def test_outside_the_block_and_for_other_ops_nothing_is_filled():
    x = torch.randn(4, 4)
    with poison_allocations() as record:
        made = [torch.zeros(5), torch.ones(5), torch.full((5,), 2.0), torch.randn(5), x.clone(),
                x + 1, torch.zeros_like(x), torch.tensor([1.0, 2.0]), torch.arange(4.0)]
        flags = torch.empty(6, dtype=torch.bool)  # bool has no value a kernel would never write
        c = torch.empty(3, dtype=torch.complex64)
    assert record.tensors == 1 and record.ops == {"empty": 1}  # the complex one; not the bool one
    assert torch.isnan(c.real).all() and torch.isnan(c.imag).all()
    assert not any(torch.isnan(t).any() for t in made)
    assert flags.dtype == torch.bool
    after = torch.empty(1000)
    after.fill_(1.0)  # the mode is gone: an empty outside is not poisoned (and not counted)
    assert record.tensors == 1


def test_resize_poisons_only_what_it_grows():
    with poison_allocations():
        t = torch.arange(4.0)
        t.resize_(10)
        assert t[:4].tolist() == [0.0, 1.0, 2.0, 3.0]
        assert torch.isnan(t[4:]).all()
        small = torch.arange(6.0)
        small.resize_(2)  # shrinking allocates nothing
        assert small.tolist() == [0.0, 1.0]


def test_nested_blocks_share_one_record_and_fill_once():
    with poison_allocations() as outer:
        with poison_allocations() as inner:
            torch.empty(3)
        torch.empty(2)
    assert inner is outer and outer.tensors == 2


def test_what_the_code_computes_is_unchanged():
    """The mode only fills uninitialised memory: every other op runs as it would, the same
    algorithms (no deterministic-algorithms switch) on the same values, bit for bit."""
    def compute():
        g = torch.Generator().manual_seed(3)
        a, b = torch.randn(64, 48, generator=g), torch.randn(48, 40, generator=g)
        idx = torch.randint(0, 64, (200,), generator=g)
        src = torch.randn(200, 48, generator=g)
        out = torch.empty(64, 40)
        torch.matmul(a, b, out=out)  # an out= buffer from empty, written whole
        return [out, torch.softmax(a, -1), torch.cumsum(a, 0), a.sort(dim=1).values,
                torch.zeros(64, 48).index_add_(0, idx, src),
                torch.zeros(64, 48).scatter_add_(0, idx[:, None].expand(200, 48), src),
                torch.nn.functional.layer_norm(a, (48,)), a.sum(), torch.randn(5, generator=g)]

    plain = compute()
    deterministic = torch.are_deterministic_algorithms_enabled()
    fill = torch.utils.deterministic.fill_uninitialized_memory
    with poison_allocations() as record:
        poisoned = compute()
        assert torch.are_deterministic_algorithms_enabled() == deterministic
    assert torch.utils.deterministic.fill_uninitialized_memory == fill
    assert record.ops == {"empty": 1}
    for p, q in zip(plain, poisoned):
        assert torch.equal(p, q)


# --- through pytest: a library that allocates its own output --------------------------------------

LIBRARY = '''
import torch
import triton
import triton.language as tl

@triton.jit
def _scale_kernel(x_ptr, out_ptr, n, SKIP_LAST: tl.constexpr, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    if SKIP_LAST and pid == tl.num_programs(0) - 1:
        return  # the bug: the last block is never written
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, 3.0 * tl.load(x_ptr + offs, mask=mask), mask=mask)


def scale(x, skip_last=False):
    out = torch.empty_like(x)  # the library allocates its own output
    _scale_kernel[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), SKIP_LAST=skip_last,
                                                   BLOCK=1024)
    return out
'''

TEST = '''
import pytest
import torch
from pytest_triton import assert_close
from library import scale

REUSED = []

{marker}
def test_scale(make_tensor):
    x = make_tensor(5000)
    expected = 3 * x.double()
    right = scale(x)  # a correct call first, its result freed ...
    freed = right.data_ptr()
    del right
    out = scale(x, skip_last={broken})  # ... and its block handed to the next allocation
    REUSED.append(out.data_ptr() == freed)
    with open("reused.txt", "w") as f:
        f.write(str(REUSED[-1]))
    assert_close(out, expected)
'''


ON = ["interpreter", pytest.param("gpu", marks=pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs a CUDA GPU: CUDA allocations, the caching allocator"))]


@pytest.fixture
def library(run_interpreted, pytester):
    pytester.makepyfile(library=LIBRARY)

    def run(on: str, marker: str, broken: bool, *args):
        pytester.makepyfile(test_lib=TEST.format(marker=marker, broken=broken))
        args = ("-p", "no:cacheprovider", "--triton-supervise=off", *args)
        result = run_interpreted(*args) if on == "interpreter" else pytester.runpytest(*args)
        reused = (pytester.path / "reused.txt").read_text() == "True"
        return result, reused

    return run


@pytest.mark.parametrize("on", ON)
def test_an_unwritten_block_of_a_library_allocated_output_fails(library, on):
    result, _ = library(on, "@pytest.mark.poison_allocations", True)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([
        "*Mismatched elements: 904 / 5000 (18.1%)*",
        # poison, not whatever the allocator's block held: every unwritten element is NaN
        "*Non-finite: 904 NaN and 0 Inf in actual where expected is finite*",
        "*- pytest-triton poisoned allocations -*",
        "*fresh allocations (*MB) filled with poison (empty_like x2)*NaN (or the integer "
        "sentinel) in an output is an element that no kernel or op wrote after it was allocated "
        "(a launch that failed silently, or a kernel that left the output to hold what recycled "
        "memory held: a freed reference's result)",
    ])


@pytest.mark.parametrize("on", ON)
def test_without_poisoning_the_freed_correct_block_hides_the_bug(library, on):
    # The premise: the allocator hands the broken call the block the correct result was freed
    # from (a GPU's caching allocator does, for a same-sized tensor), and the block's unwritten
    # part still holds the right numbers: the bug passes unseen.
    result, reused = library(on, "", True)
    if not reused:
        pytest.skip(f"the allocator ({'glibc' if on == 'interpreter' else 'CUDA caching'}) did "
                    "not hand the freed block back in this run")
    result.assert_outcomes(passed=1)


@pytest.mark.parametrize("on", ON)
@pytest.mark.parametrize("how", ["marker", "option", "ini"])
def test_the_correct_kernel_passes_and_the_option_and_ini_poison_every_test(library, pytester, how,
                                                                             on):
    marker = "@pytest.mark.poison_allocations" if how == "marker" else ""
    args = ("--triton-poison-allocations",) if how == "option" else ()
    if how == "ini":
        pytester.makeini("[pytest]\ntriton_poison_allocations = true\n")
    result, _ = library(on, marker, False, *args)
    result.assert_outcomes(passed=1)
    result, _ = library(on, marker, True, *args)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*904 NaN and 0 Inf in actual*",
                                 "*- pytest-triton poisoned allocations -*"])


def test_a_fixture_that_allocates_the_output_is_poisoned_too(run_interpreted, pytester):
    pytester.makepyfile(library=LIBRARY, test_fix='''
import pytest
import torch
from pytest_triton import assert_close
from library import _scale_kernel

@pytest.fixture
def out():
    return torch.empty(4099)

@pytest.mark.poison_allocations
def test_scale_into(make_tensor, out):
    x = make_tensor(4099)
    _scale_kernel[(5,)](x, out, 4099, SKIP_LAST=True, BLOCK=1024)
    assert_close(out, 3 * x.double())
''')
    result = run_interpreted("-p", "no:cacheprovider", "--triton-supervise=off")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*Mismatched elements: 3 / 4099*"])


def test_poisoned_allocations_are_off_for_perf_tests_that_are_timed(pytester):
    pytester.makeconftest(_fake_gpu.CONFTEST)
    pytester.makepyfile(test_p='''
import math
import torch
from pytest_triton import perf_target

SEEN = {}

@perf_target(max_ms=5)
def test_timed(triton_bench):
    from pytest_triton.correctness import poison
    triton_bench(lambda: SEEN.setdefault("timed", poison._ACTIVE.get()))
    assert SEEN["timed"] is None
    assert poison._ACTIVE.get() is None

def test_plain():
    from pytest_triton.correctness import poison
    assert poison._ACTIVE.get() is not None
    assert math.isnan(torch.empty(4)[0].item())
''')
    result = pytester.runpytest("--triton-perf", "--triton-poison-allocations", "-p",
                                "no:cacheprovider")
    result.assert_outcomes(passed=2)


# --- assert_every_config: each config's check starts with poisoned allocations --------------------

@triton.jit
def _scale_kernel(x_ptr, out_ptr, n, SKIP_LAST: tl.constexpr, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    if SKIP_LAST and pid == tl.num_programs(0) - 1:
        return  # the bug of the second config: its last block is never written
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, 3.0 * tl.load(x_ptr + offs, mask=mask), mask=mask)


CONFIGS = [triton.Config({"BLOCK": 1024, "SKIP_LAST": False}),
           triton.Config({"BLOCK": 1024, "SKIP_LAST": True})]
scale_kernel = triton.autotune(configs=CONFIGS, key=["n"])(_scale_kernel)


def scale(x):
    out = torch.empty_like(x)  # allocated by the launcher, as a library's are
    scale_kernel[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel())
    return out


def test_assert_every_config_poisons_what_each_check_allocates(make_tensor):
    x = make_tensor(5000)
    check = lambda: assert_close(scale(x), 3 * x.double())  # noqa: E731
    with pytest.raises(AssertionError) as info:
        assert_every_config(scale_kernel, check)
    text = str(info.value)
    assert text.startswith("1 of 2 configs of _scale_kernel fail this check")
    assert "config 1 of 2: BLOCK=1024, SKIP_LAST=True, num_warps=4, num_stages=3" in text
    assert "Mismatched elements: 904 / 5000 (18.1%)" in text
    assert "Non-finite mismatches: 904 of the 904" in text  # poison, not the freed block's values


def test_without_poisoning_a_broken_config_passes_on_the_block_the_one_before_freed(make_tensor):
    # The premise of the test above, as a GPU's caching allocator makes it: the second config's
    # output is the block the first config's correct output was freed from.
    x = make_tensor(5000)
    expected = 3 * x.double()
    with pin_config(scale_kernel, CONFIGS[0]):
        right = scale(x)
    freed = right.data_ptr()
    del right
    with pin_config(scale_kernel, CONFIGS[1]):
        out = scale(x)
    if out.data_ptr() != freed:
        pytest.skip("the allocator did not hand the freed block back in this run")
    assert_close(out, expected)


def test_entering_the_mode_imports_nothing_more():
    # torch's dispatch modes import torch._dynamo (900 modules) at their first op unless told not
    # to: that second of import time would be paid by every assert_every_config
    import subprocess
    import sys

    code = ("import sys, torch; from pytest_triton import poison_allocations; "
            "before = set(sys.modules)\n"
            "with poison_allocations():\n    torch.empty(3) + 1\n"
            "print(sorted(m for m in set(sys.modules) - before if m.startswith('torch')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def _workload(device):
    """Uninitialised allocations of every kind, a resize_ that grows one, and work on them."""
    x = torch.empty(1 << 20, device=device)
    y = torch.empty_like(x)
    z = x.new_empty((1 << 18,))
    w = torch.empty_strided((512, 512), (1024, 1), device=device)  # half its storage is gaps
    t = torch.empty(1000, device=device).resize_(1 << 16)
    y.copy_(x.fill_(1.0)).add_(2.0)
    return float(y[0]) + z.numel() + w.numel() + t.numel()


class _NewStorages:
    """A dispatch mode below the poisoning one: the bytes of every storage an op creates."""

    def __init__(self):
        from torch.utils._python_dispatch import TorchDispatchMode

        seen, ops = set(), []

        class Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                out = func(*args, **(kwargs or {}))
                for o in out if isinstance(out, (tuple, list)) else (out,):
                    if isinstance(o, torch.Tensor):
                        s = o.untyped_storage()
                        new = s.data_ptr() not in seen
                        seen.add(s.data_ptr())
                        ops.append((func.overloadpacket.__name__, s.nbytes() if new else 0))
                return out

        self.mode, self.ops = Mode(), ops

    def bytes_by_op(self) -> dict:
        out: dict = {}
        for name, n in self.ops:
            out[name] = out.get(name, 0) + n
        return out


def test_poisoning_allocates_nothing():
    # On the CPU there is no peak to read (torch.cuda.max_memory_allocated is the CUDA caching
    # allocator's; torch's CPU allocator keeps no such count, and torch.profiler's CPU memory
    # events saw 32 bytes of a 6 MB workload here), so this shows why the GPU's peak cannot move:
    # the ops the poisoning adds create no storage (a view of each new tensor, filled in place).
    plain, poisoned = _NewStorages(), _NewStorages()
    with plain.mode:
        _workload("cpu")
    with poisoned.mode, poison_allocations():  # the poisoning mode above: its ops pass below
        _workload("cpu")
    added = Counter(name for name, _ in poisoned.ops) - Counter(name for name, _ in plain.ops)
    assert added == {"as_strided": 6, "fill_": 6}, added  # 5 allocations, 1 growth: a view, filled
    assert poisoned.bytes_by_op() == {**plain.bytes_by_op(), "as_strided": 0, "fill_": 0}


@pytest.mark.skipif(not torch.cuda.is_available(),
                    reason="needs CUDA: the peak is the CUDA caching allocator's "
                           "(torch.cuda.max_memory_allocated); torch's CPU allocator keeps none "
                           "(test_poisoning_allocates_nothing shows on the CPU why it cannot move)")
def test_poisoning_uses_no_extra_gpu_memory(triton_device):
    # Issue 32: under --triton-poison-allocations, Liger-Kernel's tests used no extra memory that
    # could be seen. The peak of a workload of fresh allocations, with and without poisoning.
    def peak(poison: bool) -> int:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        if poison:
            with poison_allocations():
                _workload(triton_device)
        else:
            _workload(triton_device)
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated() - base

    # What the workload itself asks for, every block at once, in the allocator's 512-byte units:
    # x, y, z, w's whole storage (gaps too), t's first 1000 floats and the 2^16 it grows to.
    # Poisoning may add nothing to it. (The plain run's own peak is no fair bound: in a suite
    # worker on an H100 it came out 233 KB *under* this, the poisoned run's exactly this, as
    # both runs' did in a fresh process, step by step.)
    asked = sum(-(-n // 512) * 512 for n in (4 << 20, 4 << 20, 1 << 20, (511 * 1024 + 512) * 4,
                                              4000, 4 << 16))
    plain = peak(False)
    assert plain >= 4 * (1 << 20) * 2  # x and y at least: the workload did allocate
    assert plain <= asked
    assert min(peak(True) for _ in range(3)) <= asked  # the least of three: the peak is the
    # process's, and another thread of the worker may allocate meanwhile
