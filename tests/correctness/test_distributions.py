"""Which make_tensor distributions catch which bug classes: the README's table, shown on torch
stand-ins of buggy kernels (a correct version of each passes on every distribution)."""

import pytest
import torch

from pytest_triton import TensorFactory, assert_close

K, TILE = 256, 64  # a row sum over 4 tiles of 64: an fp16 accumulator rounds 4 times


def _rowsum_fp16_accumulator(x):
    """The bug: the running sum is kept in fp16 between tiles."""
    acc = torch.zeros(x.shape[0], dtype=torch.float16)
    for tile in x.split(TILE, dim=1):
        acc = (acc.float() + tile.float().sum(1)).half()
    return acc


def _softmax_without_max(x):
    """The bug: exp(x) / sum(exp(x)) without subtracting the row's max first. Computed in float64
    and rounded once, so that only the bug's own failure (overflow of exp) can fail it: in float32
    its rounding alone sat at the tolerance's edge, and whether "normal" caught it depended on
    torch's thread count (it did under pytest-xdist)."""
    e = torch.exp(x.double())
    return (e / e.sum(-1, keepdim=True)).to(x.dtype)


BUGS = {
    # name: (shape, dtype, correct kernel, buggy kernel, reference, reduction_size)
    "fp16 accumulator": ((512, K), torch.float16, lambda x: x.float().sum(1).half(),
                         _rowsum_fp16_accumulator, lambda x: x.double().sum(1), K),
    "softmax without max subtraction": (
        (64, 100), torch.float32, lambda x: torch.softmax(x, -1), _softmax_without_max,
        lambda x: torch.softmax(x.double(), -1), None),
    "sign dropped": ((64, 100), torch.float32, lambda x: x * 2, lambda x: x.abs() * 2,
                     lambda x: x.double() * 2, None),
    "elements permuted": ((64, 100), torch.float32, lambda x: x * 2, lambda x: x.flip(-1) * 2,
                          lambda x: x.double() * 2, None),
}

# What each distribution does with each bug (True: assert_close fails the buggy kernel).
CAUGHT = {
    "fp16 accumulator": {"normal": True, "uniform": False, "heavy": True, "constant": False},
    "softmax without max subtraction": {"normal": False, "uniform": False, "heavy": True,
                                        "constant": False},
    "sign dropped": {"normal": True, "uniform": False, "heavy": True, "constant": False},
    "elements permuted": {"normal": True, "uniform": True, "heavy": True, "constant": False},
}


def _draw(dist, shape, dtype):
    m = TensorFactory("cpu", 1)
    return m(shape, dtype, dist=dist, value=1.0 if dist == "constant" else None)


@pytest.mark.parametrize("bug", list(BUGS))
def test_which_distribution_catches_which_bug(bug, outside_a_test):
    shape, dtype, correct, buggy, reference, k = BUGS[bug]
    caught = {}
    for dist in ("normal", "uniform", "heavy", "constant"):
        x = _draw(dist, shape, dtype)
        assert_close(correct(x), reference(x), reduction_size=k)  # the positive control
        try:
            assert_close(buggy(x), reference(x), reduction_size=k)
            caught[dist] = False
        except AssertionError:
            caught[dist] = True
    assert caught == CAUGHT[bug]
