"""An xdist worker with a GPU of its own warms CUDA, cuBLAS and Triton up while it collects; one
that shares its GPU with other workers does not (its launches could fall inside their timing);
the first test waits for the warm-up to end."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

import pytest
import torch

from pytest_triton import plugin
from pytest_triton.env import runtime
from pytest_triton.process import warmup


def _decide_as_worker(monkeypatch, index: int, count: int, gpus: list[str]):
    """runtime's choice in xdist worker `index` of `count` on a host whose driver lists `gpus`
    (torch and CUDA stand-ins: no GPU here)."""
    monkeypatch.setenv("PYTEST_XDIST_WORKER", f"gw{index}")
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", str(count))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.delenv(runtime.INTERPRET_ENV, raising=False)
    monkeypatch.setattr(runtime, "_driver_gpu_ids", lambda: list(gpus))
    monkeypatch.setattr(runtime, "_cuda_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "set_device", lambda index: None)
    monkeypatch.setattr(runtime.options, "get_early", lambda config, name: None)
    return runtime._decide(SimpleNamespace(), may_control=False)


@pytest.mark.parametrize("index, count, gpus, alone", [
    (0, 2, ["0", "1"], True),  # one worker per GPU
    (3, 4, ["0", "1", "2", "3"], True),
    (1, 2, ["0", "1", "2", "3"], True),  # fewer workers than GPUs
    (0, 3, ["0", "1"], False),  # gw0 and gw2 share GPU 0
    (1, 3, ["0", "1"], False),  # gw1 is alone on GPU 1, but the run shares GPUs: no warm-up
    (0, 14, ["0"], False),  # the CUDA suite: 14 workers on one GPU
])
def test_a_worker_is_alone_on_its_gpu_only_with_no_more_workers_than_gpus(monkeypatch, index,
                                                                          count, gpus, alone):
    rt = _decide_as_worker(monkeypatch, index, count, gpus)
    assert rt.gpu_id == gpus[index % len(gpus)]
    assert rt.gpu_alone is alone




@pytest.mark.parametrize("worker, interpret, alone, warms", [
    (True, False, True, True),
    (True, False, False, False),  # shares its GPU
    (True, True, True, False),  # under the interpreter: no GPU to warm
    (False, False, True, False),  # a plain run, the controller: its first test pays once
])
def test_only_a_worker_alone_on_a_gpu_warms_up(monkeypatch, worker, interpret, alone, warms):
    rt = runtime.Runtime("cpu" if interpret else "cuda:0", interpret, "test", "0", gpu_alone=alone)
    monkeypatch.setattr(plugin.state, "get", lambda config: SimpleNamespace(runtime=rt))
    monkeypatch.setattr(plugin.role, "is_worker", lambda config: worker)
    assert plugin.warming(object()) is warms


def test_the_first_test_waits_for_the_warm_up_and_no_later_one_does(monkeypatch):
    done = threading.Event()
    started = threading.Event()

    def slow_warm(device):
        started.set()
        time.sleep(0.3)
        done.set()

    monkeypatch.setattr(warmup, "warm", slow_warm)
    monkeypatch.setattr(warmup.state, "get",
                        lambda config: SimpleNamespace(runtime=SimpleNamespace(device="cuda:0")))
    feature = warmup.WarmUp(object())
    assert started.wait(5)
    assert not done.is_set()
    feature.pytest_runtest_setup(item=None)
    assert done.is_set()  # the first test's setup returned only once the warm-up had ended
    t0 = time.perf_counter()
    feature.pytest_runtest_setup(item=None)
    assert time.perf_counter() - t0 < 0.05


def test_a_failing_warm_up_is_left_for_the_tests_to_meet(monkeypatch):
    def broken(device):
        raise RuntimeError("CUDA error: no device")

    monkeypatch.setattr(warmup, "warm", broken)
    monkeypatch.setattr(warmup.state, "get",
                        lambda config: SimpleNamespace(runtime=SimpleNamespace(device="cuda:0")))
    feature = warmup.WarmUp(object())
    feature.pytest_runtest_setup(item=None)  # no error here: the tests report the device's


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU: it warms one up")
def test_the_warm_up_runs_on_a_gpu():
    warmup.warm("cuda:0")
