"""Guard regions around poisoned buffers: a kernel writing one element past either end (or into
the gaps of a strided buffer) is caught, with the offsets and what it wrote; a correct kernel is
not; the view keeps the alignment kernels rely on."""

import inspect
import os
import textwrap

import pytest
import torch

from pytest_triton import TensorFactory, assert_close, check_guards, poison_value
from pytest_triton.correctness.guards import GUARD_BYTES


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64,
                                   torch.int8, torch.uint8, torch.int32, torch.int64,
                                   torch.float8_e4m3fn])
def test_the_buffer_is_a_view_into_a_poisoned_allocation(dtype):
    m = TensorFactory("cpu", 0)
    out = m((5, 7), dtype, poison=True)
    flat = torch.empty(0, dtype=dtype).set_(out.untyped_storage())
    guard = GUARD_BYTES // dtype.itemsize
    assert out.is_contiguous() and out.shape == (5, 7) and out.storage_offset() == guard
    assert flat.numel() == 2 * guard + 35
    # As aligned as the allocation itself: torch's CPU allocator gives 64 bytes, CUDA's 512.
    assert out.data_ptr() - flat.data_ptr() == GUARD_BYTES and out.data_ptr() % 64 == 0
    bits = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[dtype.itemsize]
    poison = torch.full((1,), poison_value(dtype), dtype=dtype).view(bits)
    assert (flat.view(bits) == poison).all()
    check_guards(out)  # intact


def test_strided_layouts_are_guarded_too():
    m = TensorFactory("cpu", 0)
    rows = m((4, 5), poison=True, noncontiguous="rows")
    assert rows.stride() == (8, 1) and torch.isnan(rows).all()
    elems = m(6, torch.int16, poison=True, noncontiguous="elements")
    assert elems.stride() == (2,) and (elems == poison_value(torch.int16)).all()


def _clobber(t, offset, value=1):
    """Write `value` at `offset` elements from t's first element (a kernel's stray store)."""
    torch.as_strided(t, (1,), (1,), t.storage_offset() + offset).fill_(value)


def test_outside_a_test_check_guards_and_assert_close_find_the_write(outside_a_test):
    m = TensorFactory("cpu", 0)
    out, line = m(10, poison=True), inspect.currentframe().f_lineno
    out.copy_(torch.arange(10.0))
    assert_close(out, torch.arange(10.0, dtype=torch.float64))
    _clobber(out, 10, 7.5)
    with pytest.raises(AssertionError) as info:
        check_guards(out)
    assert str(info.value).splitlines() == [
        "out-of-bounds write: 1 element outside the poisoned buffer (float32, shape (10,)) made at "
        f"{os.path.relpath(__file__)}:{line} no longer holds poison: a kernel wrote past the "
        "buffer.",
        "  after its end: 1 element at offset +0 past the last element (+0 = element 10, byte 40 "
        "from the start); written: 7.5",
        "  (guards: 128 elements = 512 bytes of poison on each side, in the same allocation; "
        "writes farther out: not checked on CPU, where one may crash the process (a supervised "
        "run fails the test that crashed); on a GPU, --triton-sanitize memcheck finds them)",
    ]
    ints = m(4, torch.int32, poison=True)
    _clobber(ints, -3, 0)
    with pytest.raises(AssertionError, match=r"before its start: 1 element at offset -3 .*written: 0"):
        assert_close(ints, torch.full((4,), poison_value(torch.int32)), allow_trivial=True)
    with pytest.raises(ValueError, match="has no guard regions"):
        check_guards(torch.zeros(3))


KERNELS = '''
import torch
import triton
import triton.language as tl

from pytest_triton import assert_close


@triton.jit
def _copy_kernel(
    x_ptr,  # *in* n elements
    out_ptr,  # *out* n elements (the bugs write elsewhere)
    n,
    SHIFT: tl.constexpr,  # the bug: store to out_ptr + SHIFT + i
    EXTRA: tl.constexpr,  # the bug: store EXTRA elements past n
    BLOCK: tl.constexpr,
):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=-1)
    tl.store(out_ptr + SHIFT + offs, x, mask=offs < n + EXTRA)


def copy(x, out, shift=0, extra=0):
    _copy_kernel[(triton.cdiv(x.numel() + extra, 64),)](x, out, x.numel(), SHIFT=shift,
                                                         EXTRA=extra, BLOCK=64)
    return out


@triton.jit
def _copy_rows_kernel(
    x_ptr,  # *in* rows x cols, row stride stride_x
    out_ptr,  # *out* rows x cols, row stride stride_out
    cols, stride_x, stride_out,
    EXTRA: tl.constexpr,  # the bug: write EXTRA columns past the row's end
    BLOCK: tl.constexpr,
):
    row = tl.program_id(0)
    c = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * stride_x + c, mask=c < cols, other=0.0)
    tl.store(out_ptr + row * stride_out + c, x, mask=c < cols + EXTRA)


def copy_rows(x, out, extra=0):
    _copy_rows_kernel[(x.shape[0],)](x, out, x.shape[1], x.stride(0), out.stride(0),
                                     EXTRA=extra, BLOCK=64)
    return out
'''


def test_kernels_writing_past_an_end_fail_and_a_correct_one_passes(pytester, run_interpreted):
    source = KERNELS + textwrap.dedent("""

        def test_correct(make_tensor):
            for n in (1, 1000):
                x = make_tensor(n)
                assert_close(copy(x, make_tensor.poisoned_like(x)), x.double())
            x = make_tensor((3, 5))
            out = make_tensor.poisoned_like(x, noncontiguous="rows")
            assert_close(copy_rows(x, out), x.double())

        def test_one_past_the_end(make_tensor):
            x = make_tensor(1000)
            out = make_tensor.poisoned_like(x)
            assert_close(copy(x, out, extra=1), x.double())

        def test_one_before_the_start_never_compared(make_tensor):
            x = make_tensor(100, torch.int32)
            out = make_tensor.poisoned_like(x)
            copy(x, out, shift=-1)

        def test_into_the_row_gaps(make_tensor):
            x = make_tensor((3, 5))
            out = make_tensor.poisoned_like(x, noncontiguous="rows")
            copy_rows(x, out, extra=1)
            assert_close(out, x.double())

        def test_fails_anyway(make_tensor):
            x = make_tensor(10, torch.int64)
            copy(x, make_tensor.poisoned_like(x), extra=2)
            assert False, "its own failure"
    """)
    pytester.makepyfile(test_oob=source)
    lines = source.lstrip("\n").splitlines()

    def made_at(test):  # the line of the poisoned_like call in `test`
        start = lines.index(f"def {test}(make_tensor):")
        return next(i + 1 for i in range(start, len(lines)) if "poisoned_like" in lines[i])

    result = run_interpreted("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=4)
    result.stdout.fnmatch_lines([
        "*_ test_one_past_the_end _*",
        "E       AssertionError: assert_close: out-of-bounds write: 1 element outside the poisoned "
        f"buffer (float32, shape (1000,)) made at test_oob.py:{made_at('test_one_past_the_end')} no longer holds poison: a "
        "kernel wrote past the buffer.",
        "E         after its end: 1 element at offset +0 past the last element (+0 = element "
        "1000, byte 4000 from the start); written: -1",
    ])
    result.stdout.fnmatch_lines([
        "*_ test_one_before_the_start_never_compared _*",
        "pytest-triton: out-of-bounds write: 1 element outside the poisoned buffer (int32, shape "
        f"(100,)) made at test_oob.py:{made_at('test_one_before_the_start_never_compared')} no "
        "longer holds poison: a kernel wrote past the buffer.",
        "  before its start: 1 element at offset -1 (-1 = the element just before the first); "
        "written: *",
    ])
    result.stdout.fnmatch_lines([
        "*_ test_into_the_row_gaps _*",
        "E       AssertionError: assert_close: out-of-bounds write: 3 elements outside the "
        "poisoned buffer (float32, shape (3, 5), strides (8, 1)) made at "
        f"test_oob.py:{made_at('test_into_the_row_gaps')} no "
        "longer hold poison: a kernel wrote past the buffer.",
        "E         in the gaps of its strided layout (strides (8, 1)): 3 elements at offsets +5, "
        "+13, +21 from its first element; written: 0, 0, 0",
    ])
    result.stdout.fnmatch_lines([
        "*_ test_fails_anyway _*", "E       AssertionError: its own failure*",
        "*- pytest-triton correctness -*",
        "out-of-bounds write: 2 elements outside the poisoned buffer (int64, shape (10,)) *",
        "  after its end: 2 elements at offsets +0, +1 past the last element *; written: -1, -1",
    ])


def test_the_hint_for_writes_beyond_the_guards_names_what_can_run_where_the_buffer_lives():
    # On CPU the hint named --triton-sanitize memcheck, which needs a CUDA GPU.
    from pytest_triton.correctness import guards

    def hint(device):
        g = guards.Guarded(torch.empty(8, device=device), 2, 4, (4,), (1,), 0, "here")
        return guards._farther_out(g)

    assert hint("cpu").startswith("not checked on CPU")
    assert "memcheck" in hint("cpu") and "on a GPU" in hint("cpu")
    if torch.cuda.is_available():
        assert hint("cuda") == "--triton-sanitize memcheck"
