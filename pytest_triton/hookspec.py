"""The plugin's own hooks. Implement them in a conftest.py or a plugin."""

from __future__ import annotations

import pytest


@pytest.hookspec(firstresult=True)
def pytest_triton_device_info(config):
    """Return the pytest_triton.DeviceInfo to time on, or None for no GPU (perf tests then
    dry-run, and --triton-perf counts their targets unchecked)."""


@pytest.hookspec(firstresult=True)
def pytest_triton_measure(config, request, fn, baseline, settings):
    """Time `fn` (and `baseline`, interleaved, if given) and return a pytest_triton.Timings
    (`settings` is a pytest_triton.TimingSettings)."""


@pytest.hookspec(firstresult=True)
def pytest_triton_calibrate(config, device):
    """Measure `device`'s (a DeviceInfo) ceilings: {"dram_gbps": float, "tflops": {"float16": ...,
    "bfloat16": ..., "tf32": ...}}, optionally "copy_gbps": {bytes moved: GB/s} (copies of
    several sizes: a measurement is then judged against a copy of its own bytes), or None when
    there is nothing to measure on. Called at most once per device fingerprint (the result is
    cached on disk: calibrate.cache_dir())."""


@pytest.hookspec(firstresult=True)
def pytest_triton_synchronize(config, item):
    """After a test's call and teardown: wait for the device work it queued, raising the device's
    pending error if there is one. Return True when done."""


@pytest.hookspec
def pytest_triton_measured(item, measurement, fn, kernel, compiles):
    """triton_bench timed `fn` for `item` and judged it: `measurement` (a Measurement: timings,
    rates, verdict), `kernel` as the test passed it, `compiles` (what compiled while timing).
    Called in the process that timed it, before the test's verdict; fn may be called again."""


@pytest.hookspec
def pytest_triton_judged(item, record):
    """After a perf test's body, for a test that measured something: `record` (a PerfRecord) holds
    its measurements, each judged, and its geomean check when the body ran through. Called in
    the process that timed them, before the test's failure (if any) is raised; what a listener
    adds to the record (an explanation) reaches every output."""


@pytest.hookspec
def pytest_triton_resources_checked(item, recorded, lines):
    """The triton_resources gate judged `item`, before raising its verdict: `recorded` (each
    distinct launch: its CompileSpec, and on a GPU the CompiledKernel that ran), `lines` (each
    verdict, in words)."""


@pytest.hookspec(firstresult=True)
def pytest_triton_dry_call(item, fn, baseline, call):
    """triton_bench's dry run (no GPU to time on) calls fn, then baseline, once each, untimed:
    `call()` does it and returns what fn returned. An implementation that checks around the call
    calls `call()` itself and returns True; with none, triton_bench calls it."""
