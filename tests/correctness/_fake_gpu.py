"""A conftest for inner runs with --triton-perf and no GPU: a stand-in device whose measure hook
calls fn once (so what fn does is seen) and returns 0.5 ms per call, or the test module's
MS[test name] (and 1 ms per call of a baseline)."""

CONFTEST = '''
from pytest_triton.env.device import DeviceInfo
from pytest_triton.perf.timing import Timings

def pytest_triton_device_info(config):
    return DeviceInfo(name="fake", sms=1, dram_gbps=1000.0, tflops={})

def pytest_triton_calibrate(config, device):
    return {"dram_gbps": 900.0, "tflops": {}}

def pytest_triton_measure(config, request, fn, baseline, settings):
    fn()
    ms = getattr(request.module, "MS", {}).get(request.node.name, 0.5)
    return Timings(ms=[ms] * 20, baseline_ms=None if baseline is None else [1.0] * 20)
'''
