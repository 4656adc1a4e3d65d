"""The plugin's own implementations of its hooks (a conftest's implementation wins), and the check
of what a pytest_triton_device_info hook returned."""

from __future__ import annotations

import pytest

from .. import state
from ..env.device import DeviceInfo, cuda_device_info
from . import calibrate, stats
from .timing import measure


def check_device_info(info) -> None:
    """What pytest_triton_device_info returned, checked once at start-up: every verdict of the
    run divides by these numbers."""
    if info is None:
        return
    def bad(what: str) -> None:
        raise pytest.UsageError(f"pytest_triton_device_info returned {what}")

    if not isinstance(info, DeviceInfo):
        bad(f"a {type(info).__name__}, not a pytest_triton.DeviceInfo")
    if not isinstance(info.name, str) or not info.name:
        bad(f"name={info.name!r}: expected the device's name")
    if isinstance(info.sms, bool) or not isinstance(info.sms, int) or info.sms < 1:
        bad(f"sms={info.sms!r}: expected the number of SMs, an integer >= 1")
    if not stats.positive_finite(info.dram_gbps):
        bad(f"dram_gbps={info.dram_gbps!r}: expected the datasheet DRAM bandwidth, a finite "
            "number of GB/s > 0")
    if not isinstance(info.tflops, dict):
        bad(f"tflops={info.tflops!r}: expected a dict of dtype: TFLOP/s")
    for k, v in info.tflops.items():
        if v is not None and not stats.positive_finite(v):
            bad(f"tflops[{k!r}]={v!r}: expected a finite number of TFLOP/s > 0, or None")


class DefaultHooks:
    """The plugin's own implementations of its hooks; a conftest's implementation wins."""
    @pytest.hookimpl(trylast=True)
    def pytest_triton_device_info(self, config):
        rt = state.get(config).runtime
        if rt.interpret:
            return None
        return cuda_device_info(rt.device)

    @pytest.hookimpl(trylast=True)
    def pytest_triton_calibrate(self, config, device):
        rt = state.get(config).runtime
        if rt.interpret:
            return None
        return calibrate.measure_ceilings(rt.device)

    @pytest.hookimpl(trylast=True)
    def pytest_triton_measure(self, config, request, fn, baseline, settings):
        return measure(fn, baseline, settings, state.get(config).runtime.device)
