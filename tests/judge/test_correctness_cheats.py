"""The judge's checks of correctness tests (docs/judging.md), on the cheats of cheats.py: each
caught, with a message naming its exploit; their honest twins pass. Inner runs under Triton's
interpreter (on a GPU machine in a process of their own: the kernels come from this package)."""

import pathlib

import pytest

ROOT = pathlib.Path(__file__).parents[2]

CHEATS = """
import torch
import pytest
from pytest_triton import assert_close, assert_deterministic, assert_grads_close
from tests.judge import cheats

def test_relu_mutating(make_tensor):
    x = make_tensor(1000)
    y = cheats.relu_mutating(x)
    assert_close(y, torch.relu(x))  # the reference sees the mutated x: this alone passes

def test_double_zeroing(make_tensor):
    x = make_tensor(1000)
    y = cheats.double_zeroing(x)
    assert_close(y, 2 * x.double(), allow_trivial=True)  # 0 == 2 * 0

def test_relu_mutating_determinism(make_tensor):
    x = make_tensor(1000)
    assert_deterministic(lambda: cheats.relu_mutating(x))

class Mutating(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return cheats.relu_mutating(x)
    @staticmethod
    def backward(ctx, g):
        return g

def test_relu_mutating_grads(make_tensor):
    x = make_tensor(64)
    assert_grads_close(Mutating.apply, lambda x: x, [x])

def test_relu_lazy(make_tensor):
    x = make_tensor(100)
    assert_close(cheats.relu_lazy(x), torch.relu(x))

def test_relu_overridden(make_tensor):
    x = make_tensor(100)
    assert_close(cheats.relu_overridden(x), torch.relu(x))

def test_copy_aliased(make_tensor):
    x = make_tensor(100)
    y = cheats.copy_aliased(x)
    cheats.relu(x)  # the kernel received x, and left it as it was
    assert_close(y, x.clone())

# --- honest twins ---

def test_relu(make_tensor):
    x = make_tensor(1000)
    assert_close(cheats.relu(x), torch.relu(x))

def test_relu_inplace_compared(make_tensor):
    x = make_tensor(1000)
    expected = torch.relu(x)
    cheats.relu_(x)  # in place by design: x is what the test compares
    assert_close(x, expected)

def test_relu_inplace_declared(make_tensor):
    x = make_tensor(1000)
    y = cheats.relu_(x)
    assert_close(y.clone(), torch.relu(x), inplace=["x"])

def test_setup_edits_its_inputs_before_any_kernel(make_tensor):
    x = make_tensor(1000)
    x[:10] = 0  # the test's own edit, before a kernel receives x: not a mutation
    assert_close(cheats.relu(x), torch.relu(x))

def test_inplace_determinism_declared(make_tensor):
    x = make_tensor(1000)
    assert_deterministic(lambda: cheats.relu_(x).clone(), inplace=[x])

def test_output_buffer_from_make_tensor(make_tensor):
    x = make_tensor(1000)
    out = make_tensor(1000)  # a buffer with values, written: compared as actual
    cheats.relu(x, out=out)
    assert_close(out, torch.relu(x))
"""


@pytest.fixture
def run(pytester, run_interpreted_fresh):
    def go(body, *args):
        pytester.makepyfile(test_k=body)
        return run_interpreted_fresh("-p", "no:cacheprovider", "--rootdir", str(pytester.path),
                                     "-o", f"pythonpath={ROOT}", "--triton-supervise=off", *args)
    return go


def test_each_correctness_cheat_is_caught_naming_its_exploit(run):
    result = run(CHEATS, "-rA")
    result.assert_outcomes(failed=7, passed=6)
    out = result.stdout.str()
    for test, lines in {
        "test_relu_mutating": ["*input mutation: 1 input changed after a kernel received it*",
                               "  x (float32 (1000,), made by make_tensor at test_k.py:*): * "
                               "elements changed; the first at index (*): * before, 0 after "
                               "(after a launch of _relu_kernel; found at assert_close (*",
                               "*declare it: inplace=[[]\"x\"[]]*"],
        "test_double_zeroing": ["*input mutation: 1 input changed*",
                                "  x (float32 (1000,)*: 1000 of 1000 elements changed*after a "
                                "launch of _scale_kernel*"],
        "test_relu_mutating_determinism": ["*assert_deterministic: input mutation, not a "
                                           "determinism failure*", "*  x (float32 (1000,)): *"],
        "test_relu_mutating_grads": ["*assert_grads_close: input mutation: fn's forward or "
                                     "backward wrote into its input:*"],
        "test_relu_lazy": ["*assert_close: lazy output: actual is a tests.judge.cheats.Lazy, a subclass of "
                           "torch.Tensor*"],
        "test_relu_overridden": ["*lazy output: actual overrides torch.Tensor's detach on the "
                                 "instance*"],
        "test_copy_aliased": ["*aliased output: actual is x (float32 (100,), made by make_tensor*"],
    }.items():
        assert f"FAILED test_k.py::{test}" in out, test
        result.stdout.fnmatch_lines(lines)
    for honest in ("test_relu", "test_relu_inplace_compared", "test_relu_inplace_declared",
                   "test_setup_edits_its_inputs_before_any_kernel",
                   "test_inplace_determinism_declared", "test_output_buffer_from_make_tensor"):
        assert f"PASSED test_k.py::{honest}" in out, honest


def test_without_the_judge_every_cheat_passes(run):
    # --triton-judge=off (what the checks cost is measured against): the cheats pass, the
    # issue's ReLU that stores into x among them, and its determinism check too
    result = run(CHEATS, "--triton-judge=off")
    result.assert_outcomes(passed=13)


JUDGED = """
import torch
import pytest
from pytest_triton import assert_close
from tests.judge import cheats

memo = cheats.Memo(key=lambda x: tuple(x.shape))

def test_relu_whole_blocks(make_tensor):
    x = make_tensor(1024)
    assert_close(cheats.relu_whole_blocks(x), torch.relu(x))

def test_relu_memorised(make_tensor):
    x = make_tensor(256)
    assert_close(memo.relu(x), torch.relu(x))

def test_relu_swallowing(make_tensor):
    x = make_tensor(256)
    assert_close(cheats.relu_swallowing(x), torch.relu(x))

@pytest.mark.triton_judge(sizes=False)
def test_relu_whole_blocks_at_its_own_sizes(make_tensor):
    x = make_tensor(1024)
    assert_close(cheats.relu_whole_blocks(x), torch.relu(x))

def test_relu(make_tensor):
    x = make_tensor(1024)
    assert_close(cheats.relu(x), torch.relu(x))

def test_fixed_size_buffer(make_tensor):
    x = make_tensor(1024)
    out = torch.empty(1024)  # the test fixes a size: at odd sizes it cannot run, a note
    assert_close(cheats.relu(x, out=out), torch.relu(x))

@pytest.mark.parametrize("n", [1024])
def test_relu_whole_blocks_parametrized(make_tensor, n):
    x = make_tensor(n)
    assert_close(cheats.relu_whole_blocks(x), torch.relu(x))

# its code follows its size parameters (as FlagGems' tests pass `(shape[-1],)`): at odd sizes they
# change, not make_tensor's dimensions under it
@pytest.mark.parametrize("rows, cols", [(4, 256)])
def test_relu_sized_by_its_parameters(make_tensor, rows, cols):
    x = make_tensor(rows * cols)
    assert_close(cheats.relu(x).view(rows, cols), torch.relu(x).view(rows, cols))
"""


def test_judge_mode_runs_correctness_tests_again_and_poisons_their_allocations(run):
    result = run(JUDGED, "--triton-judge", "-rA")
    result.assert_outcomes(failed=4, passed=4)
    out = result.stdout.str()
    result.stdout.fnmatch_lines([
        "*pytest-triton judge: special-cased sizes: the test passed with its own seed *, and "
        "fails with seed * at odd sizes (every make_tensor dimension >= 16 made 3 smaller), "
        "which it did not announce*",
        "*pytest-triton judge: special-cased values: the test passed with its own seed *, and "
        "fails with seed *",
        "*Replay: pytest *test_k.py::test_relu_memorised --triton-judge --triton-seed 0",
    ])
    # the swallowed launch: its output never written, poisoned, named
    assert "FAILED test_k.py::test_relu_swallowing" in out
    result.stdout.fnmatch_lines(["*NaN where the reference is finite: an unwritten element of a "
                                 "poisoned output*", "*a launch that failed silently*"])
    result.stdout.fnmatch_lines(["*judge: passed again with seed * (another seed and odd "
                                 "sizes), values and sizes it did not announce*",
                                 "*judge: not run again with odd sizes: the test cannot run at "
                                 "them (*"])
    for honest in ("test_relu_whole_blocks_at_its_own_sizes", "test_relu", "test_fixed_size_buffer",
                   "test_relu_sized_by_its_parameters[4-256]"):
        assert f"PASSED test_k.py::{honest}" in out, honest
    # a parametrized test at odd sizes: its parameters change, and its own code follows them
    result.stdout.fnmatch_lines(["*special-cased sizes: * at odd sizes (its size parameters made "
                                 "3 smaller: n=1021), which it did not announce*"])
    # test_relu and test_relu_sized_by_its_parameters (made at odd sizes by make_tensor beside its
    # (4, 256), it could not run there: a note)
    assert out.count("(another seed and odd sizes)") == 2, out


def test_without_judge_mode_the_special_cases_pass(run):
    result = run(JUDGED.replace("def test_relu_swallowing", "def _unused"))
    result.assert_outcomes(passed=7)


IN_PLACE = """
import torch
from pytest_triton import assert_close
from tests.judge import cheats

def test_relu_by_constant(make_tensor):
    x = make_tensor(1000)
    out = cheats.relu_by_constant(x)
    assert_close(out, torch.relu(x))  # the reference sees the ones the kernel wrote

def test_relu_inplace_undeclared(make_tensor):
    x = make_tensor(1000)
    expected = torch.relu(x)
    assert_close(cheats.relu_(x), expected)

# --- honest twins ---

def test_relu_inplace_declared(make_tensor):
    x = make_tensor(1000)
    expected = torch.relu(x)
    assert_close(cheats.relu_(x), expected, inplace=["x"])

def test_relu_into_a_buffer_declared(make_tensor):
    x, out = make_tensor(1000), make_tensor(1000)
    assert_close(cheats.relu(x, out=out), torch.relu(x), inplace=[out])
"""


def test_judge_mode_asks_an_input_compared_as_actual_to_be_declared_in_place(run):
    # A kernel that writes a constant over its input and hands the input back passed both the
    # default checks and the judge: the test compared x as assert_close's actual, which counted
    # as written on purpose, and its reference, computed afterwards from x, agreed
    result = run(IN_PLACE, "--triton-judge", "-rA")
    result.assert_outcomes(failed=2, passed=2)
    out = result.stdout.str()
    for test in ("test_relu_by_constant", "test_relu_inplace_undeclared"):
        assert f"FAILED test_k.py::{test}" in out, test
    result.stdout.fnmatch_lines([
        "*input mutation: * changed after a kernel received it, and the test never declared "
        "it in place (under --triton-judge an input compared as assert_close's actual counts as "
        "written on purpose only when declared):*",
        "  x (float32 (1000,), made by make_tensor at test_k.py:*): * elements changed*after a "
        "launch of _fill_kernel*",
        "*declare it: inplace=[[]\"x\"[]] (or the tensor) on assert_close, assert_grads_close, "
        "assert_deterministic or triton_bench."])
    for honest in ("test_relu_inplace_declared", "test_relu_into_a_buffer_declared"):
        assert f"PASSED test_k.py::{honest}" in out, honest


def test_without_judge_mode_an_input_compared_as_actual_is_written_on_purpose(run):
    # the default checks keep the rule that a compared actual is an output: an in-place op's
    # result needs no declaration there, and the constant cheat is the judge's to catch
    result = run(IN_PLACE)
    result.assert_outcomes(passed=4)


def test_a_changed_float4_input_is_named_by_its_bits():
    # torch has no scalar of float4_e2m1fn_x2 (.item() raises NotImplementedError): the message's
    # values raised inside the guard, which took it for a lost CUDA context and dropped every
    # input it watched, so a kernel writing into a float4 input passed unreported
    import torch

    from pytest_triton.correctness import inputs

    before = torch.zeros(4, dtype=torch.uint8).view(torch.float4_e2m1fn_x2)
    after = torch.tensor([0, 0, 0x35, 0], dtype=torch.uint8).view(torch.float4_e2m1fn_x2)
    assert inputs.difference(before, after) == (
        "1 of 4 elements changed; the first at index (2,): bits 0x00 before, bits 0x35 after")
    assert inputs.difference(before, before.clone()) is None
