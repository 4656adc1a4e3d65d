"""An xdist worker with a GPU of its own starts CUDA, cuBLAS and Triton's compiler while it
collects its tests, instead of in its first test.

A process pays these once, in its first test that uses the GPU. Under xdist each worker pays
them, and its first test is its longest (report/order.py): they land on the run's critical path,
once per worker. A thread started as the worker configures does the same work beside the
collection and the wait for the first test, then ends; the first test waits for it, so no test
runs beside it. Only a worker that shares its GPU with no other worker of the run warms up: a
launch outside any test's hold of the GPU (process/gpuholds.py) could fall inside another
worker's timing. Whatever fails here is left for the tests to meet: the thread says nothing.
"""

from __future__ import annotations

import threading

import pytest
import torch
import triton
import triton.language as tl

from .. import state

WAIT_S = 120.0  # the first test waits at most this long for the thread, then goes on


@triton.jit
def _touch(ptr, n, BLOCK: tl.constexpr):
    """A kernel small enough to compile in moments: its compile and launch load Triton's
    compiler, build its driver helpers into the cache and load the launch path."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(ptr + offs, tl.load(ptr + offs, mask=mask) + 1, mask=mask)


def warm(device: str) -> None:
    """CUDA's context, a cuBLAS handle, a Triton compile and launch on `device`."""
    dev = torch.device(device)
    with torch.cuda.device(dev):
        a = torch.ones(64, 64, device=dev, dtype=torch.float16)
        torch.mm(a, a)
        _touch[(1,)](a, a.numel(), BLOCK=64)
        torch.cuda.synchronize(dev)


def _quietly(device: str) -> None:
    try:
        warm(device)
    except Exception:  # noqa: BLE001 - the tests meet the same failure and report it
        pass


class WarmUp:
    """Starts the thread at configure; the first test's setup waits for it."""

    def __init__(self, config: pytest.Config):
        rt = state.get(config).runtime
        self._thread = threading.Thread(target=_quietly, args=(rt.device,),
                                        name="pytest-triton-warmup", daemon=True)
        self._thread.start()

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        if self._thread is not None:
            self._thread.join(WAIT_S)
            self._thread = None
