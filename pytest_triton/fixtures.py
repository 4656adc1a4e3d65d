"""The plugin's fixtures: triton_device, make_tensor, assert_close."""

from __future__ import annotations

import pytest
import torch

from . import state
from .correctness import compare
from .correctness.tensors import TensorFactory
from .env import seeding
from .perf.fixture import TritonBench


@pytest.fixture(scope="session")
def triton_device(pytestconfig: pytest.Config) -> torch.device:
    """The device this test's kernels run on: cuda:N, or cpu under Triton's interpreter."""
    return torch.device(state.get(pytestconfig).runtime.device)


@pytest.fixture
def make_tensor(request: pytest.FixtureRequest, triton_device: torch.device) -> TensorFactory:
    """make_tensor(shape, dtype=torch.float32, *, dist=..., noncontiguous=..., poison=...):
    tensors on triton_device from a generator seeded for this test (see TensorFactory)."""
    seed = seeding.for_item(request.node, seeding.base(request.config))
    return TensorFactory(triton_device, seed.seed)


@pytest.fixture(name="assert_close")
def assert_close_fixture():
    """pytest_triton.assert_close, as a fixture."""
    return compare.assert_close


@pytest.fixture
def triton_bench(request: pytest.FixtureRequest):
    """triton_bench(fn, *, bytes=None, flops=None, baseline=None, dtype=None, kernel=None,
    name=None, inplace=None) -> Measurement: time `fn` on the GPU (with --triton-perf); the
    test's perf_target is checked against what it measured."""
    return TritonBench(request)
