"""assert_deterministic: bit-identical outputs across runs. Negative controls: a float sum whose
order follows a work counter left over from the previous launch; programs atomically adding into
one value, a split-K row sum by atomic_add, and tiles whose writes overlap (under the interpreter
these show because the runs take the programs in launch, reversed and shuffled order; on a GPU
because the programs' order varies). Positive controls: the same sums reduced in a fixed order,
tiles that do not overlap."""

import pytest
import torch
import triton
import triton.language as tl

from pytest_triton import assert_deterministic, interpreting


@triton.jit
def _chunk_sums_kernel(
    x_ptr,  # *in* n elements
    partial_ptr,  # *out* one float32 per program
    n,
    BLOCK: tl.constexpr,
):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
    tl.store(partial_ptr + tl.program_id(0), tl.sum(x, 0))


def tree_sum(x, block=256):
    """Deterministic: each program its own partial sum, then one fixed-order sum."""
    partial = torch.empty(triton.cdiv(x.numel(), block), dtype=torch.float32, device=x.device)
    _chunk_sums_kernel[(partial.numel(),)](x, partial, x.numel(), BLOCK=block)
    return partial.sum()


@triton.jit
def _atomic_sum_kernel(
    x_ptr,  # *in* n elements
    out_ptr,  # *out* one float32, zeroed: every program adds its block's sum into it
    n,
    BLOCK: tl.constexpr,
):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
    # The race: float addition is not associative, and the programs' order of arrival varies.
    tl.atomic_add(out_ptr, tl.sum(x, 0))


def atomic_sum(x, block=256):
    out = torch.zeros(1, dtype=torch.float32, device=x.device)
    _atomic_sum_kernel[(triton.cdiv(x.numel(), block),)](x, out, x.numel(), BLOCK=block)
    return out


@triton.jit
def _ticket_sum_kernel(
    x_ptr,  # *in* n_chunks * BLOCK elements
    out_ptr,  # *out* one float32
    ticket_ptr,  # *inout* int32 work counter: the first chunk this launch starts at
    n_chunks,
    BLOCK: tl.constexpr,
):
    start = tl.atomic_add(ticket_ptr, 1)
    acc = 0.0
    for i in range(0, n_chunks):
        chunk = (start + i) % n_chunks
        acc += tl.sum(tl.load(x_ptr + chunk * BLOCK + tl.arange(0, BLOCK)), 0)
    tl.store(out_ptr, acc)


def ticket_sum(x, ticket, *, reset: bool, block=32):
    """The sum of x, chunk by chunk from the chunk `ticket` names. The bug (reset=False): the
    counter is never reset, so each launch starts one chunk later and sums in another order."""
    if reset:
        ticket.zero_()
    out = torch.empty(1, dtype=torch.float32, device=x.device)
    _ticket_sum_kernel[(1,)](x, out, ticket, x.numel() // block, BLOCK=block)
    return out


def test_a_deterministic_kernel_passes_and_its_result_is_returned(make_tensor):
    x = make_tensor(10_000, dist="heavy")
    total = assert_deterministic(lambda: tree_sum(x))
    assert torch.equal(total, tree_sum(x))
    ticket = torch.zeros(1, dtype=torch.int32, device=x.device)
    cancelling = _cancelling(make_tensor)
    assert_deterministic(lambda: ticket_sum(cancelling, ticket, reset=True), runs=4)


def _cancelling(make_tensor):
    """16 chunks of 32 values of order one, and two that cancel, 8 chunks apart: the values summed
    between them are absorbed (1e8 + 1 == 1e8 in float32), so which ones those are, which the
    order decides, changes the sum by O(10), not by an ulp."""
    x = make_tensor(16 * 32)
    x[0], x[8 * 32] = 1e8, -1e8
    return x


def test_an_order_left_to_stale_state_is_caught(make_tensor):
    # Shows under the interpreter too: the order changes with the counter, not with scheduling.
    x = _cancelling(make_tensor)
    ticket = torch.zeros(1, dtype=torch.int32, device=x.device)
    with pytest.raises(AssertionError) as info:
        assert_deterministic(lambda: ticket_sum(x, ticket, reset=False))
    lines = str(info.value).splitlines()
    assert lines[0] == (
        "Not deterministic: 2 of 2 repeated runs of the same call on the same inputs differ from "
        "the first, bit for bit (a race between programs, an order-dependent atomic sum, or stale "
        "or uninitialised memory read):")
    # One program per launch: under the interpreter its runs name their (trivial) program order.
    runs = (["run 2 (programs in reverse order)", "run 1 (programs in launch order)",
             "run 3 (programs in shuffled order)"] if interpreting() else ["run 2", "run 1", "run 3"])
    assert lines[1] == f"{runs[0]} differs from {runs[1]}:"
    assert lines[2] == "  result (float32, shape (1,)): 1 / 1 elements differ (100%)"
    assert lines[3].startswith("    farthest apart at index (0,): run 1 ")
    assert "(|difference| " in lines[3]
    assert lines[4] == "    first differing indices: (0,)"
    assert lines[5] == f"{runs[2]} differs from run 1 too: result: 1 / 1 elements differ"
    assert lines[-1].startswith("Seed: seed ")
    # The same bug with the program order fixed (reorder_programs=False) is still caught: it is
    # stale state, not order.
    with pytest.raises(AssertionError, match="run 2 .*differs from run 1"):
        assert_deterministic(lambda: ticket_sum(x, ticket, reset=False), reorder_programs=False)


def test_programs_racing_on_one_atomic_sum_are_caught(make_tensor):
    # Every program adds its block's sum into one float32, in the order the programs run: on a
    # GPU the order of arrival, under the interpreter the order each run takes them in.
    x = make_tensor(1 << 14 if interpreting() else 1 << 20, dist="heavy")
    with pytest.raises(AssertionError, match=r"Not deterministic: \d+ of 9 repeated runs"):
        assert_deterministic(lambda: atomic_sum(x), runs=10)
    assert_deterministic(lambda: tree_sum(x), runs=10)


def test_outputs_are_repoisoned_so_an_unwritten_element_differs(make_tensor):
    x = make_tensor((3, 4))
    out = torch.empty_like(x)
    calls = []

    def fn():  # the second call forgets row 1
        calls.append(1)
        for r in range(3):
            if not (len(calls) == 2 and r == 1):
                out[r] = x[r] * 2
    with pytest.raises(AssertionError) as info:
        assert_deterministic(fn, outputs=[out])
    text = str(info.value)
    assert "Not deterministic: 1 of 2 repeated runs" in text
    assert "  outputs[0] (float32, shape (3, 4)): 4 / 12 elements differ (33.3%)" in text
    assert "    4 of them NaN or Inf in one run and not the other, or NaNs with different bits" in text
    assert "    first differing indices: (1, 0), (1, 1), (1, 2), (1, 3)" in text


def test_several_outputs_are_named_and_integers_compared(make_tensor):
    x = make_tensor(16, torch.int32)
    state = {"n": 0}

    def fn():
        state["n"] += 1
        return {"same": x.clone(), "pair": (x.clone(), x + state["n"])}
    with pytest.raises(AssertionError) as info:
        assert_deterministic(fn, runs=2)
    text = str(info.value)
    assert "  result['pair'][1] (int32, shape (16,)): 16 / 16 elements differ (100%)" in text
    assert "result['same']" not in text and "result['pair'][0]" not in text
    assert "    farthest apart at index (0,): run 1 " in text


@pytest.mark.parametrize("kwargs, error, match", [
    ({"runs": 1}, ValueError, "runs=1 must be an int >= 2"),
    ({"outputs": [1]}, TypeError, "outputs must be tensors"),
])
def test_bad_arguments_are_named(kwargs, error, match):
    with pytest.raises(error, match=match):
        assert_deterministic(lambda: torch.zeros(1), **kwargs)
    with pytest.raises(TypeError, match="fn returned str at result"):
        assert_deterministic(lambda: "x")
    with pytest.raises(TypeError, match="nothing to compare"):
        assert_deterministic(lambda: None)


@triton.jit
def _split_k_row_sum_kernel(
    x_ptr,  # *in* (M, K) row-major
    out_ptr,  # *out* M float32, zeroed: each of a row's split programs adds its chunk's sum
    K,
    stride_m,
    BLOCK_K: tl.constexpr,
):
    row, split = tl.program_id(0), tl.program_id(1)
    k = split * BLOCK_K + tl.arange(0, BLOCK_K)
    x = tl.load(x_ptr + row * stride_m + k, mask=k < K, other=0.0)
    tl.atomic_add(out_ptr + row, tl.sum(x, 0))  # the race: float sums in the programs' order


@triton.jit
def _split_k_partials_kernel(
    x_ptr,  # *in* (M, K) row-major
    partial_ptr,  # *out* (M, SPLITS) float32: one partial sum per program, no atomics
    K,
    stride_m,
    SPLITS,
    BLOCK_K: tl.constexpr,
):
    row, split = tl.program_id(0), tl.program_id(1)
    k = split * BLOCK_K + tl.arange(0, BLOCK_K)
    x = tl.load(x_ptr + row * stride_m + k, mask=k < K, other=0.0)
    tl.store(partial_ptr + row * SPLITS + split, tl.sum(x, 0))


def split_k_row_sum(x, *, atomic: bool, block_k=64):
    m, k = x.shape
    splits = triton.cdiv(k, block_k)
    if atomic:
        out = torch.zeros(m, dtype=torch.float32, device=x.device)
        _split_k_row_sum_kernel[(m, splits)](x, out, k, x.stride(0), BLOCK_K=block_k)
        return out
    partial = torch.empty((m, splits), dtype=torch.float32, device=x.device)
    _split_k_partials_kernel[(m, splits)](x, partial, k, x.stride(0), splits, BLOCK_K=block_k)
    return partial.sum(1)  # a fixed order


@triton.jit
def _prefix_tiles_kernel(
    x_ptr,  # *in* n elements
    out_ptr,  # *out* n elements
    n,
    STEP: tl.constexpr,  # where each program's tile starts; STEP < BLOCK: tiles overlap
    BLOCK: tl.constexpr,
):
    offs = tl.program_id(0) * STEP + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
    # Each tile writes its own running sum: where tiles overlap, two programs write different
    # values into one element, and the last to run wins.
    tl.store(out_ptr + offs, tl.cumsum(x, 0), mask=offs < n)


def prefix_tiles(x, out, *, step, block=32):
    _prefix_tiles_kernel[(triton.cdiv(x.numel(), step),)](x, out, x.numel(), STEP=step, BLOCK=block)
    return out


def test_a_split_k_atomic_row_sum_is_caught_and_its_fixed_order_twin_passes(make_tensor):
    x = make_tensor((16, 1024), dist="heavy")
    with pytest.raises(AssertionError) as info:
        assert_deterministic(lambda: split_k_row_sum(x, atomic=True))
    text = str(info.value)
    assert "Not deterministic: " in text and "result (float32, shape (16,)): " in text
    if interpreting():
        assert "run 2 (programs in reverse order) differs from run 1 (programs in launch order):" in text
        assert "a repeat in launch order matches run 1: the result depends on the order the " \
               "programs run in" in text
    assert_deterministic(lambda: split_k_row_sum(x, atomic=False))


def test_overlapping_writes_are_caught_and_tiles_that_do_not_overlap_pass(make_tensor):
    x = make_tensor(1000)
    out = make_tensor.poisoned_like(x)
    with pytest.raises(AssertionError, match=r"outputs\[0\] \(float32, shape \(1000,\)\): \d+ / 1000 "
                                             r"elements differ"):
        assert_deterministic(lambda: prefix_tiles(x, out, step=24), outputs=[out])
    assert_deterministic(lambda: prefix_tiles(x, out, step=32), outputs=[out])


@pytest.mark.skipif(not interpreting(), reason="the interpreter's program orders")
def test_under_the_interpreter_the_order_is_what_exposes_them(make_tensor):
    # With the programs in launch order every run (reorder_programs=False), as the interpreter
    # runs them by itself, both races pass: the program orders are what catch them on CPU.
    x = make_tensor((16, 1024), dist="heavy")
    assert_deterministic(lambda: split_k_row_sum(x, atomic=True), reorder_programs=False)
    y = make_tensor(1000)
    out = make_tensor.poisoned_like(y)
    assert_deterministic(lambda: prefix_tiles(y, out, step=24), outputs=[out], reorder_programs=False)


def test_a_passing_check_says_what_the_interpreter_could_not_check(pytester, run_interpreted_fresh):
    # fresh: test_k imports tree_sum from this module
    pytester.makepyfile(test_k="""
        import torch
        from pytest_triton import assert_deterministic
        from tests.correctness.test_determinism import tree_sum

        def test_k(make_tensor):
            x = make_tensor(4096)
            assert_deterministic(lambda: tree_sum(x))

        def test_no_kernel(make_tensor):
            x = make_tensor(8)
            assert_deterministic(lambda: x * 2, runs=2)
    """)
    import pathlib
    result = run_interpreted_fresh("-rP", "-p", "no:cacheprovider", "--rootdir", str(pytester.path),
                             "-o", f"pythonpath={pathlib.Path(__file__).parents[2]}")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines([
        "*- pytest-triton correctness -*",
        "assert_deterministic: 3 runs bit-identical, each launch's programs run in launch, "
        "reverse and shuffled order (Triton's interpreter runs them one at a time); races "
        "between programs running at the same time cannot be checked on CPU (each program runs "
        "whole before the next): a GPU run checks them",
    ])
    result.stdout.fnmatch_lines([
        "assert_deterministic: 2 runs bit-identical, no interpreted kernel launch was seen, so no "
        "program order was varied; races between programs*"])
