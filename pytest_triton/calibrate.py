"""--triton-perf-calibrate: this device's real ceilings, measured once and cached per fingerprint.

A large device-to-device copy gives the DRAM ceiling (bytes read plus bytes written); a large
cuBLAS matmul per dtype gives the tensor-core ceiling. Both are timed like any kernel (bench.py),
on random data: zeros can run faster than real data.
"""

from __future__ import annotations

import datetime
import statistics

COPY_BYTES = 1 << 30
MATMUL_N = 8192


def measure_ceilings(device) -> dict:
    import torch

    from .bench import Settings, measure

    settings = Settings(l2="cold", max_time=1.0)

    def median_ms(fn) -> float:
        return statistics.median(measure(fn, None, settings, device).ms)

    def copy_ms() -> float:
        src = torch.randn(COPY_BYTES // 4, device=device)
        dst = torch.empty_like(src)
        return median_ms(lambda: dst.copy_(src))

    def matmul_ms(dtype) -> float:
        a, b = (torch.randn(MATMUL_N, MATMUL_N, device=device, dtype=dtype) for _ in range(2))
        c = torch.empty_like(a)
        return median_ms(lambda: torch.matmul(a, b, out=c))

    dram = 2 * COPY_BYTES / copy_ms() / 1e6
    tflops = {}
    for key, dtype in (("float16", torch.float16), ("bfloat16", torch.bfloat16), ("tf32", torch.float32)):
        old = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = key == "tf32"
        try:
            tflops[key] = 2 * MATMUL_N**3 / matmul_ms(dtype) / 1e9
        finally:
            torch.backends.cuda.matmul.allow_tf32 = old
    torch.cuda.empty_cache()
    return {"dram_gbps": dram, "tflops": tflops,
            "measured_at": datetime.datetime.now(datetime.timezone.utc).isoformat(),
            "how": f"copy of {COPY_BYTES >> 20} MiB (read + write); torch.matmul {MATMUL_N}^3 per dtype"}
