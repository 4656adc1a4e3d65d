"""Run by bench/xdist_check.py under pytest-xdist on a machine with several GPUs. Not shipped."""

import json
import os
import time

import pytest
import torch

from pytest_triton import perf_target

LOG = os.environ.get("XDIST_LOG", "/tmp/xdist_log.jsonl")


def _log(kind, start, end):
    props = torch.cuda.get_device_properties(0)
    with open(LOG, "a") as f:
        f.write(json.dumps({"worker": os.environ.get("PYTEST_XDIST_WORKER"), "kind": kind,
                            "cvd": os.environ.get("CUDA_VISIBLE_DEVICES"),
                            "gpu": str(getattr(props, "uuid", "")), "start": start, "end": end}) + "\n")


@pytest.mark.parametrize("i", range(6))
@perf_target(max_ms=100)
def test_perf(triton_bench, make_tensor, i):
    start = time.time()
    x = make_tensor(1 << 24)
    y = torch.empty_like(x)
    triton_bench(lambda: y.copy_(x), bytes=2 * x.nbytes)
    _log("perf", start, time.time())


@pytest.mark.parametrize("i", range(24))
def test_correctness(make_tensor, i):
    start = time.time()
    x = make_tensor(1 << 20)
    for _ in range(50):
        x = x * 1.0001
    torch.cuda.synchronize()
    time.sleep(0.05)
    _log("plain", start, time.time())
