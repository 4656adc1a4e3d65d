"""Draw the roofline PNG of --triton-perf-plot from measurements shaped like the bundled suite's
run on an H100 (vector add, softmax, layernorm, fused elementwise, matmul, conv2d, attention:
~115 measurements), to look at the picture without a GPU:

    python bench/roofline_demo.py /tmp/roofline.png

The picture is drawn by the plugin itself: a pytest run (--triton-perf --triton-perf-plot) of
generated tests whose device and timings are injected through the plugin's hooks
(pytest_triton_device_info, pytest_triton_calibrate, pytest_triton_measure), as the CPU suite
injects them. The numbers are made up in the ranges BENCHMARKS.md reports; the verdicts include
the negative controls' failures and one inconclusive, as a real run has (each test's target is
set to give its verdict). A compute measurement gives its operands' bytes as bytes=, so it is
placed at their intensity.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import tempfile

CONFTEST = """
from pytest_triton import DeviceInfo, Timings

def pytest_triton_device_info(config):
    return DeviceInfo(name="NVIDIA H100 80GB HBM3", sms=132, dram_gbps=3352.0, sku="H100 SXM",
                      tflops={"tf32": 494.7, "float16": 989.4, "bfloat16": 989.4, "float8": 1978.9},
                      driver="demo", fingerprint="roofline-demo")

def pytest_triton_calibrate(config, device):
    return {"dram_gbps": 3001.0, "tflops": {"float16": 735.0, "bfloat16": 742.0, "tf32": 380.0}}

def pytest_triton_measure(config, request, fn, baseline, settings):
    ms = request.module.CASES[request.node.callspec.params["case"]]["ms"]
    return Timings(ms=[ms * (1 + 0.001 * ((i * 7) % 5 - 2)) for i in range(40)], method="injected",
                   l2=settings.l2)
"""
DTYPES = ("float32", "float16", "bfloat16")


def _mem(test: str, param: str | None, gbps: float, dtype: str, verdict: str = "pass",
         nbytes: float = 805e6) -> dict:
    nodeid = "reference_kernels/tests/test_memory_perf.py::" + test + (f"[{param}]" if param else "")
    return {"nodeid": nodeid, "name": None, "verdict": verdict, "gbps": gbps, "tflops": None,
            "bytes": nbytes, "flops": None, "dtype": dtype, "median_ms": nbytes / gbps / 1e6}


def _comp(test: str, name: str | None, tflops: float, dtype: str, flops: float,
          operand_bytes: float | None, verdict: str = "pass", param: str | None = None) -> dict:
    nodeid = "reference_kernels/tests/test_compute_perf.py::" + test + (f"[{param}]" if param else "")
    m = {"nodeid": nodeid, "name": name, "verdict": verdict, "gbps": None, "tflops": tflops,
         "bytes": None, "flops": flops, "dtype": dtype, "median_ms": flops / tflops / 1e9}
    m["bytes"] = operand_bytes
    return m


def measurements(seed: int = 0) -> list[dict]:
    rnd = random.Random(seed)
    out = []

    def j(x, spread=0.03):
        return x * (1 + rnd.uniform(-spread, spread))

    for dt in DTYPES:
        out.append(_mem("test_vector_add_speed", dt, j(2960, 0.01), dt))
        out.append(_mem("test_vector_add_persistent_speed", dt, j(2950, 0.01), dt))
    out.append(_mem("test_checklist_vector_add", None, j(2940, 0.01), "float32"))
    out.append(_mem("test_slow_vector_add_misses_target", None, 610.0, "float32", "fail"))
    for variant, base in (("test_softmax_speed", 2900), ("test_softmax_persistent_speed", 2860)):
        for dt in DTYPES:
            for cols in (1024, 4096, 16384, 65536):
                drop = {1024: 1.0, 4096: 0.99, 16384: 0.95, 65536: 0.8}[cols]
                v = "inconclusive" if (variant, dt, cols) == ("test_softmax_speed", "bfloat16", 16384) \
                    else "pass"
                out.append(_mem(variant, f"{dt}-{cols}", j(base * drop), dt, v, 537e6))
    out.append(_mem("test_checklist_softmax", None, j(2880, 0.01), "float32", nbytes=537e6))
    for variant, base in (("test_layernorm_forward_speed", 2850), ("test_layernorm_backward_speed", 2500)):
        for dt in DTYPES:
            for cols in (1024, 4096, 16384, 65536):
                drop = {1024: 1.0, 4096: 0.99, 16384: 0.93, 65536: 0.82}[cols]
                out.append(_mem(variant, f"{dt}-{cols}", j(base * drop), dt,
                                nbytes=537e6 if "forward" in variant else 1074e6))
    out.append(_mem("test_checklist_layernorm", None, j(2800, 0.01), "float32"))
    for dt in DTYPES:
        out.append(_mem("test_add_mul_speed", dt, j(2950, 0.01), dt, nbytes=1074e6))
        out.append(_mem("test_bias_gelu_residual_speed", dt, j(2900, 0.01), dt, nbytes=805e6))

    def mm(m, n, k, dt, **kw):
        flops = 2 * m * n * k
        return flops, 2 * (m * k + k * n + m * n)

    for dt, tag in (("float16", "fp16"), ("bfloat16", "bf16")):
        for size in (4096, 8192):
            f, b = mm(size, size, size, dt)
            out.append(_comp("test_matmul_square_speed", None, j(640 if size == 8192 else 590), dt,
                             f, b, param=f"{size}-{tag}"))
        for m in (128, 1024, 4096, 8192):
            for n, k in ((4096, 4096), (14336, 4096), (4096, 14336)):
                f, b = mm(m, n, k, dt)
                ai = f / b
                tf = min(j(560), ai * 3000 / 1e3 * 0.85)
                out.append(_comp("test_matmul_llm_shapes_speed", f"M{m}_N{n}_K{k}", tf, dt, f, b,
                                 param=tag))
    f, b = mm(2048, 2048, 2048, "float16")
    out.append(_comp("test_matmul_checklist", None, j(480), "float16", f, b))
    out.append(_comp("test_matmul_slow_control", None, 38.0, "float16", f, b, "fail"))
    for c, k, hw, rs in [(64, 64, 56, 3), (128, 128, 28, 3), (256, 256, 14, 3), (512, 512, 7, 3),
                         (256, 64, 56, 1), (64, 256, 56, 1), (512, 128, 28, 1), (1024, 256, 14, 1)]:
        flops = 2 * 32 * k * hw * hw * c * rs * rs
        nbytes = 2 * (32 * c * hw * hw + k * c * rs * rs + 32 * k * hw * hw)
        tf = min(j(420), flops / nbytes * 3000 / 1e3 * 0.8)
        out.append(_comp("test_conv2d_resnet50_speed", f"{rs}x{rs}_C{c}_K{k}_H{hw}", tf,
                         "float16", flops, nbytes))
    flops = 2 * 32 * 256 * 56 * 56 * 256 * 9
    out.append(_comp("test_conv2d_checklist", None, j(390), "float16", flops,
                     2 * (32 * 256 * 56 * 56 * 2 + 256 * 256 * 9)))
    for b, h, s in [(32, 16, 1024), (8, 16, 4096), (2, 16, 16384)]:
        for d in (64, 128):
            for causal in (0, 1):
                flops = 4 * b * h * s * s * d // (2 if causal else 1)
                nbytes = 4 * b * h * s * d * 2
                tf = j(330 if d == 64 else 470) * (0.85 if causal else 1.0)
                out.append(_comp("test_attention_speed", f"B{b}_H{h}_S{s}_D{d}_causal{causal}",
                                 tf, "float16", flops, nbytes if s < 16384 else None))
    return out



def _target(m: dict) -> str | None:
    """The perf_target that gives `m` its verdict: a target well under what it achieved (pass),
    well over (fail), or exactly at it (inconclusive: inside the 99% CI)."""
    key, achieved = ("gbps", m["gbps"]) if m["gbps"] else ("tflops", m["tflops"])
    factor = {"pass": 0.5, "fail": 2.0, "inconclusive": 1.0}.get(m["verdict"])
    return None if factor is None else f"perf_target({key}={achieved * factor!r})"


def test_module(ms: list[dict]) -> str:
    """The generated tests: one parametrized test per test of the suite, a case per measurement."""
    cases, tests = {}, {}
    for i, m in enumerate(ms):
        test, _, param = m["nodeid"].split("::")[-1].partition("[")
        shown = "-".join(p for p in (param.rstrip("]"), m["name"]) if p) or f"m{i}"
        case = f"{test}:{shown}"
        amount = m["bytes"] / m["gbps"] / 1e6 if m["gbps"] else m["flops"] / m["tflops"] / 1e9
        cases[case] = {"ms": amount, "bytes": m["bytes"], "flops": m["flops"], "dtype": m["dtype"]}
        target = _target(m)
        marks = f", marks=[{target}]" if target else ""
        tests.setdefault(test, []).append(f"pytest.param({case!r}, id={shown!r}{marks})")
    src = ["import pytest", "from pytest_triton import perf_target", f"CASES = {cases!r}", ""]
    for test, params in tests.items():
        src += ["@pytest.mark.parametrize('case', [" + ", ".join(params) + "])",
                f"def {test}(triton_bench, case):",
                "    c = CASES[case]",
                "    triton_bench(lambda: None, bytes=c['bytes'], flops=c['flops'], dtype=c['dtype'])",
                ""]
    return "\n".join(src)


if __name__ == "__main__":
    target = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "roofline.png")
    ms = measurements()
    with tempfile.TemporaryDirectory(prefix="roofline-demo-") as tmp:
        with open(os.path.join(tmp, "conftest.py"), "w") as f:
            f.write(CONFTEST)
        with open(os.path.join(tmp, "test_suite_demo.py"), "w") as f:
            f.write(test_module(ms))
        env = dict(os.environ, PYTEST_TRITON_CACHE_DIR=os.path.join(tmp, "cache"))
        done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                               "--triton-perf", "--triton-perf-retries", "0",
                               "--triton-perf-plot", target], cwd=tmp, env=env,
                              capture_output=True, text=True)
    print(done.stdout.strip().splitlines()[-1] if done.stdout.strip() else done.stderr[-2000:])
    print(f"{len(ms)} measurements; the plugin says: "
          + next((line for line in done.stdout.splitlines()
                  if line.startswith("pytest-triton: roofline")), "(nothing)"))
