"""pytest-benchmark bridge: GPU-timed results in its table and JSON, so that its storage and
--benchmark-compare work on them, and its machine info names the GPU.

Each triton_bench call becomes one pytest-benchmark entry, built the way its own `benchmark`
fixture builds one (with the session's options), timed through its public `pedantic` API by a
virtual clock that replays the GPU samples.
"""

from __future__ import annotations

import pytest

from ..perf.session import session


class _ReplayClock:
    """A timer for pytest-benchmark whose clock advances by one GPU sample per call of `tick`."""

    def __init__(self, seconds: list[float]):
        self._samples = list(seconds)
        self._i = 0
        self._now = 0.0

    def __call__(self) -> float:
        return self._now

    def tick(self) -> None:
        s = self._samples
        self._now += s[self._i] if self._i < len(s) else s[len(s) // 2]
        self._i += 1

    __name__ = "gpu_events"  # shown by pytest-benchmark as the timer


def _session(config: pytest.Config):
    return getattr(config, "_benchmarksession", None)


def active(config: pytest.Config) -> bool:
    """Whether pytest-benchmark is active in this run."""
    return hasattr(config.hook, "pytest_benchmark_update_machine_info")


def record(item: pytest.Item, m) -> None:
    bs = _session(item.config)
    if bs is None or bs.skip or bs.disabled:
        return
    from pytest_benchmark.fixture import BenchmarkFixture
    from pytest_benchmark.utils import NameWrapper

    clock = _ReplayClock([ms / 1e3 for ms in m.timings.ms])
    options = dict(bs.options, timer=NameWrapper(clock))
    fixture = BenchmarkFixture(item, add_stats=bs.benchmarks.append, logger=bs.logger,
                               warner=item.warn, disabled=False, **options)
    if m.name:
        fixture.name = f"{item.name}[{m.name}]" if "[" not in item.name else f"{item.name[:-1]}-{m.name}]"
        fixture.fullname = f"{item.nodeid}::{m.name}"
    fixture.group = "pytest-triton"
    fixture.extra_info.update({
        "gbps": m.gbps, "tflops": m.tflops, "bytes": m.bytes, "flops": m.flops,
        "speedup": m.speedup.median if m.speedup else None,
        "baseline_median_s": m.baseline.median / 1e3 if m.baseline else None,
        "method": m.timings.method, "l2": m.timings.l2, "config": m.config,
        "gpu": m.device.name, "verdict": m.verdict.value,
    })
    fixture.pedantic(clock.tick, rounds=len(m.timings.ms), iterations=1, warmup_rounds=0)


class BenchBridge:
    """--triton-perf with pytest-benchmark active: each measurement is one of its entries, and
    its machine info names the GPU."""

    def __init__(self, config: pytest.Config):
        self._config = config

    def pytest_triton_measured(self, item: pytest.Item, measurement, fn, kernel, compiles) -> None:
        record(item, measurement)

    def pytest_benchmark_update_machine_info(self, config, machine_info):
        ps = session(config)
        if ps is not None and ps.device is not None:
            d = ps.device
            machine_info["gpu"] = {"name": d.name, "sku": d.sku, "sms": d.sms,
                                   "driver": d.driver, "fingerprint": d.fingerprint}

    def pytest_benchmark_compare_machine_info(self, config, benchmarksession, machine_info,
                                              compared_benchmark):
        now = (machine_info.get("gpu") or {}).get("name")
        then = (compared_benchmark.get("machine_info", {}).get("gpu") or {}).get("name")
        if now != then:
            benchmarksession.logger.warning(
                f"pytest-triton: comparing GPU timings from different GPUs: this run on {now!r}, "
                f"the saved run on {then!r}; the comparison says little about the kernel")
