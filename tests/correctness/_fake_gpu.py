"""A conftest for inner runs with --triton-perf and no GPU: a stand-in device whose measure hook
calls fn once (so what fn does is seen) and returns 0.5 ms per call."""

CONFTEST = '''
from pytest_triton.env.device import DeviceInfo
from pytest_triton.perf.timing import Timings

def pytest_triton_device_info(config):
    return DeviceInfo(name="fake", sms=1, dram_gbps=1000.0, tflops={})

def pytest_triton_calibrate(config, device):
    return {"dram_gbps": 900.0, "tflops": {}}

def pytest_triton_measure(config, request, fn, baseline, settings):
    fn()
    return Timings(ms=[0.5] * 20)
'''
