"""This device's real ceilings, measured once per device fingerprint and cached on disk.

A large device-to-device copy gives the DRAM ceiling (bytes read plus bytes written), and copies
of two smaller sizes what a copy of fewer bytes reaches (a kernel's bandwidth is taken against a
copy of its own bytes: env/device.py copy_ceiling); a large cuBLAS matmul per dtype gives the
tensor-core ceiling. Both are timed like any kernel (bench.py),
on random data: zeros can run faster than real data.

The cache is one JSON file per fingerprint (device name, SMs, memory, UUID, driver, CUDA) in
$PYTEST_TRITON_CACHE_DIR, else $XDG_CACHE_HOME/pytest-triton, else ~/.cache/pytest-triton:
independent of pytest's cache plugin (so `-p no:cacheprovider` runs reuse it too), shared by
pytest-xdist workers (the first to need it measures, under a file lock, the others read it).
A new driver or CUDA is a new fingerprint, measured again, and so is a file an older version of
this module wrote (CACHE_VERSION); --triton-perf-calibrate measures
again regardless, once per run and card: the first xdist worker on a card measures, the others
of that run read it (the file names its run). The UUID in the fingerprint keeps cards of one
model apart: each worker on its own GPU measures its own card.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import statistics
from dataclasses import replace
from pathlib import Path

from . import rates
from .stats import positive_finite
from .timing import Settings, measure

COPY_BYTES = 1 << 30
# The smaller copies: the sizes a perf test's tensors commonly have (the bundled memory-bound
# tests move 512-768 MiB), and one below; a kernel moving fewer bytes than the smallest is judged
# against the smallest.
SMALL_COPY_BYTES = (64 << 20, 256 << 20)
MATMUL_N = 8192
# 2: "copy_gbps" added; a file without it (or of another version) is measured again
CACHE_VERSION = 2


def measure_ceilings(device) -> dict:
    import torch

    settings = Settings(l2="cold", max_time=1.0)

    def median_ms(fn, how: Settings = settings) -> float:
        return statistics.median(measure(fn, None, how, device).ms)

    def copy_ms(nbytes: int) -> float:
        src = torch.randn(nbytes // 4, device=device)
        dst = torch.empty_like(src)
        # the smaller copies take many samples in less time
        return median_ms(lambda: dst.copy_(src),
                         settings if nbytes == COPY_BYTES else replace(settings, max_time=0.5))

    def matmul_ms(dtype) -> float:
        a, b = (torch.randn(MATMUL_N, MATMUL_N, device=device, dtype=dtype) for _ in range(2))
        c = torch.empty_like(a)
        return median_ms(lambda: torch.matmul(a, b, out=c))

    # read and written once: a copy of N bytes moves 2N
    copies = {str(2 * n): rates.gbps(2 * n, copy_ms(n)) for n in (*SMALL_COPY_BYTES, COPY_BYTES)}
    dram = copies[str(2 * COPY_BYTES)]
    tflops = {}
    for key, dtype in (("float16", torch.float16), ("bfloat16", torch.bfloat16), ("tf32", torch.float32)):
        old = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = key == "tf32"
        try:
            tflops[key] = rates.tflops(2 * MATMUL_N**3, matmul_ms(dtype))
        finally:
            torch.backends.cuda.matmul.allow_tf32 = old
    torch.cuda.empty_cache()
    sizes = ", ".join(f"{n >> 20}" for n in SMALL_COPY_BYTES)
    return {"dram_gbps": dram, "copy_gbps": copies, "tflops": tflops,
            "measured_at": datetime.datetime.now(datetime.timezone.utc).isoformat(),
            "how": f"copy of {COPY_BYTES >> 20} MiB (read + write; also of {sizes} MiB); "
                   f"torch.matmul {MATMUL_N}^3 per dtype"}


def cache_dir() -> Path:
    explicit = os.environ.get("PYTEST_TRITON_CACHE_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "pytest-triton"


def _path(fingerprint: str) -> Path:
    return cache_dir() / f"ceilings-{fingerprint}.json"


@contextlib.contextmanager
def _locked(path: Path):
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        import fcntl
    except ImportError:  # not POSIX: no lock, at worst two processes both measure
        yield
        return
    fd = os.open(str(path) + ".lock", os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def _implausible(found) -> str | None:
    """What is wrong with measured ceilings, or None: every rate a finite number > 0."""
    if not isinstance(found, dict):
        return f"{type(found).__name__}, not a dict"
    if found.get("dram_gbps") is not None and not positive_finite(found["dram_gbps"]):
        return f"dram_gbps={found['dram_gbps']!r} (expected a finite number of GB/s > 0)"
    copies = found.get("copy_gbps")
    if copies is not None:
        if not isinstance(copies, dict) or not copies:
            return f"copy_gbps={copies!r} (expected a dict of bytes moved: GB/s)"
        for k, v in copies.items():
            try:
                size = float(k)
            except (TypeError, ValueError):
                size = None
            if not positive_finite(size) or not positive_finite(v):
                return f"copy_gbps[{k!r}]={v!r} (expected bytes moved > 0: a finite GB/s > 0)"
    tflops = found.get("tflops") or {}
    if not isinstance(tflops, dict):
        return f"tflops={tflops!r} (expected a dict of dtype: TFLOP/s)"
    for k, v in tflops.items():
        if v is not None and not positive_finite(v):
            return f"tflops[{k!r}]={v!r} (expected a finite number of TFLOP/s > 0)"
    return None


def ceilings(fingerprint: str, measure, *, force: bool = False) -> tuple[dict | None, str]:
    """(ceilings, where they came from) for the device `fingerprint`: the cached ones, or
    measure() (which may return None: nothing to measure on) stored for the next run."""
    path = _path(fingerprint)
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID")  # the workers of one xdist run share it
    with _locked(path):
        if path.is_file():
            try:
                found = json.loads(path.read_text())
                # forced: measured again once per run, by its first worker on this card
                # an older version's file, or one edited into nonsense: measured again
                current = found.get("version") == CACHE_VERSION and not _implausible(found)
                if current and (not force or (run and found.get("run") == run)):
                    return found, f"cached in {path}"
            except (OSError, ValueError, AttributeError):
                pass  # unreadable: measure again
        found = measure()
        if found is None:
            return None, "not measured"
        bad = _implausible(found)
        if bad:  # neither used nor cached: the next run measures again
            return None, f"not used: pytest_triton_calibrate returned {bad}"
        found = {**found, "fingerprint": fingerprint, "run": run, "version": CACHE_VERSION}
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(found, indent=1))
        tmp.replace(path)
        return found, f"measured now, cached in {path}"
