"""pytest_triton.env.interpreter.program_order: under Triton's interpreter, each launch's programs run once
each, in launch, reversed or shuffled order; the interpreter is left as it was."""

import pytest
import torch
import triton
import triton.language as tl

from pytest_triton import interpreting
from pytest_triton.env.interpreter.program_order import program_order

pytestmark = pytest.mark.skipif(not interpreting(), reason="the interpreter's grid loop")


@triton.jit
def _log_order_kernel(
    log_ptr,  # *out* one int32 per program: the linear program id, in the order programs ran
    counter_ptr,  # *inout* int32, zeroed: the next free slot of log
):
    pid = (tl.program_id(0) * tl.num_programs(1) + tl.program_id(1)) * tl.num_programs(2) \
        + tl.program_id(2)
    tl.store(log_ptr + tl.atomic_add(counter_ptr, 1), pid)


def ran(grid):
    n = grid[0] * grid[1] * grid[2]
    log = torch.full((n,), -1, dtype=torch.int32)
    _log_order_kernel[grid](log, torch.zeros(1, dtype=torch.int32))
    return log.tolist()


def test_each_order_runs_every_program_once():
    grid = (3, 4, 5)
    n = 60
    assert ran(grid) == list(range(n))  # the interpreter's own order
    with program_order("launch") as rec:
        assert ran(grid) == list(range(n))
    assert (rec.launches, rec.programs) == (1, n)
    with program_order("reversed") as rec:
        assert ran(grid) == list(range(n))[::-1]
        assert ran((2, 1, 1)) == [1, 0]
    assert (rec.launches, rec.programs) == (2, n + 2)
    with program_order("shuffled", seed=1):
        first, second = ran(grid), ran(grid)
    assert sorted(first) == sorted(second) == list(range(n))
    assert first != list(range(n)) and first != second  # another permutation per launch
    with program_order("shuffled", seed=1):
        assert ran(grid) == first  # the same seed, the same orders
    assert ran(grid) == list(range(n))  # and the interpreter is as it was


def test_the_interpreter_is_restored_after_an_error_and_bad_orders_are_refused():
    from triton.runtime import interpreter as ti

    before = ti.InterpreterBuilder.set_grid_idx
    with pytest.raises(RuntimeError, match="inside"), program_order("reversed"):
        raise RuntimeError("inside")
    assert ti.InterpreterBuilder.set_grid_idx is before
    with pytest.raises(ValueError, match="order 'backwards' is not one of launch, reversed, shuffled"):
        with program_order("backwards"):
            pass
