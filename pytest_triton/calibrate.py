"""--triton-perf-calibrate: this device's real ceilings, measured once and cached per fingerprint.

A large device-to-device copy gives the DRAM ceiling (bytes read plus bytes written); a large
cuBLAS matmul per dtype gives the tensor-core ceiling. Both are timed like any kernel (bench.py),
on random data: zeros can run faster than real data.
"""

from __future__ import annotations

import datetime

COPY_BYTES = 1 << 30
MATMUL_N = 8192


def measure_ceilings(device) -> dict:
    import torch

    from .bench import Settings, measure

    settings = Settings(l2="cold", max_time=1.0)
    src = torch.randn(COPY_BYTES // 4, device=device)
    dst = torch.empty_like(src)
    t = measure(lambda: dst.copy_(src), None, settings, device)
    ms = sorted(t.ms)[len(t.ms) // 2]
    dram = 2 * COPY_BYTES / ms / 1e6
    del src, dst
    tflops = {}
    n = MATMUL_N
    for key, dtype in (("float16", torch.float16), ("bfloat16", torch.bfloat16), ("tf32", torch.float32)):
        a = torch.randn(n, n, device=device, dtype=dtype)
        b = torch.randn(n, n, device=device, dtype=dtype)
        c = torch.empty(n, n, device=device, dtype=dtype)
        old = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = key == "tf32"
        try:
            t = measure(lambda: torch.matmul(a, b, out=c), None, settings, device)
        finally:
            torch.backends.cuda.matmul.allow_tf32 = old
        ms = sorted(t.ms)[len(t.ms) // 2]
        tflops[key] = 2 * n**3 / ms / 1e9
        del a, b, c
    torch.cuda.empty_cache()
    return {"dram_gbps": dram, "tflops": tflops,
            "measured_at": datetime.datetime.now(datetime.timezone.utc).isoformat(),
            "how": f"copy of {COPY_BYTES >> 20} MiB (read + write); torch.matmul {n}^3 per dtype"}
