"""The plugin's fixtures: triton_device, make_tensor, assert_close."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from . import state
from .env import seeding

if TYPE_CHECKING:
    import torch

    from .correctness.tensors import TensorFactory
    from .perf.fixture import TritonBench

# The modules behind the fixtures import torch: each is imported when its fixture is first used,
# so that registering the fixtures imports none of them.


@pytest.fixture(scope="session")
def triton_device(pytestconfig: pytest.Config) -> torch.device:
    """The device this test's kernels run on: cuda:N, or cpu under Triton's interpreter."""
    import torch

    return torch.device(state.get(pytestconfig).runtime.device)


@pytest.fixture
def make_tensor(request: pytest.FixtureRequest, triton_device: torch.device) -> TensorFactory:
    """make_tensor(shape, dtype=torch.float32, *, dist=..., noncontiguous=..., poison=...):
    tensors on triton_device from a generator seeded for this test (see TensorFactory). The
    shape may also be separate ints: make_tensor(512, 1000)."""
    from .correctness.tensors import TensorFactory  # import time: torch

    seed = seeding.for_item(request.node, seeding.base(request.config))
    return TensorFactory(triton_device, seed.seed)


@pytest.fixture(name="assert_close")
def assert_close_fixture():
    """pytest_triton.assert_close, as a fixture."""
    from .correctness import closeness  # import time: torch

    return closeness.assert_close


@pytest.fixture
def triton_bench(request: pytest.FixtureRequest) -> TritonBench:
    """triton_bench(fn, *, bytes=None, flops=None, baseline=None, dtype=None, kernel=None,
    name=None, inplace=None) -> Measurement: time `fn` on the GPU (with --triton-perf); the
    test's perf_target is checked against what it measured."""
    from .perf.fixture import TritonBench  # import time: torch

    return TritonBench(request)
