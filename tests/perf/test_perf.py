"""--triton-perf decision logic, reports and the pytest-benchmark bridge, with timings injected
through the plugin's own hooks (pytest_triton_device_info, pytest_triton_measure)."""

import json
import xml.etree.ElementTree as ET

import pytest

FAKE_GPU = '''
import itertools
from pytest_triton.env.device import DeviceInfo
from pytest_triton.perf.timing import Timings

def pytest_triton_device_info(config):
    return DeviceInfo(name="NVIDIA H100 80GB HBM3", sms=132, dram_gbps=3352.0, sku="H100 SXM",
                      tflops={"tf32": 494.7, "float16": 989.4, "bfloat16": 989.4, "float8": 1978.9},
                      driver="580.0", fingerprint="fake")

def pytest_triton_calibrate(config, device):
    # A stand-in device has no ceilings to measure: "not measured", on a GPU machine as on a CPU
    # one (the default hook would time the real GPU for it, in every inner run).
    return None

CALLS = {}

def pytest_triton_measure(config, request, fn, baseline, settings):
    """The test module's FAKE[test name] gives (ms, baseline_ms) per round: a tuple or a list of them."""
    spec = request.module.FAKE[request.node.name]
    n = CALLS[request.node.nodeid] = CALLS.get(request.node.nodeid, 0) + 1
    if isinstance(spec, list):
        spec = spec[min(n, len(spec)) - 1]
    ms, base = spec
    jitter = [1 + 0.002 * ((i * 7) % 5 - 2) for i in range(40)]
    return Timings(ms=[ms * j for j in jitter],
                   baseline_ms=None if baseline is None else [base * j for j in reversed(jitter)],
                   method="injected", l2=settings.l2)
'''

N = 1 << 26  # elements of a vector add: 3 * 4 * N bytes = 805 MB


@pytest.fixture
def perf(pytester):
    pytester.makeconftest(FAKE_GPU)

    def run(body, *args):
        pytester.makepyfile(test_k=body)
        return pytester.runpytest("--triton-perf", "-p", "no:cacheprovider", *args)

    return run


def test_bandwidth_pass_fail_and_message_in_user_units(perf):
    result = perf(f"""
        from pytest_triton import perf_target
        FAKE = {{"test_fast": (0.28, None), "test_slow": (0.331, None)}}
        @perf_target(bandwidth_frac=0.8)
        def test_fast(triton_bench): triton_bench(lambda: None, bytes=3 * 4 * {N})
        @perf_target(bandwidth_frac=0.8)
        def test_slow(triton_bench): triton_bench(lambda: None, bytes=3 * 4 * {N})
    """)
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines([
        "*PerfTargetMissed: FAIL bandwidth_frac: 2433 GB/s = 72.6% of H100 SXM datasheet peak 3352 GB/s; "
        "target 80.0% = 2682 GB/s (bandwidth_frac=0.8); 99% CI *",
        "*roofline: memory-bound (no flops= given): 72.6% of peak bandwidth, good (>60.0%)",
    ])


def test_negative_control_slow_kernel_fails_and_xfail_strict_proves_it(perf, pytester):
    result = perf(f"""
        import pytest
        from pytest_triton import perf_target, PerfTargetMissed
        FAKE = {{"test_slow_control": (1.0, None), "test_wrongly_fast_control": (0.2, None)}}
        @pytest.mark.xfail(raises=PerfTargetMissed, strict=True, reason="negative control")
        @perf_target(bandwidth_frac=0.8)
        def test_slow_control(triton_bench): triton_bench(lambda: None, bytes=3 * 4 * {N})
        @pytest.mark.xfail(raises=PerfTargetMissed, strict=True, reason="negative control")
        @perf_target(gbps=1000)
        def test_wrongly_fast_control(triton_bench): triton_bench(lambda: None, bytes=1e9)
    """, "--triton-perf-json", "perf.json")
    result.assert_outcomes(xfailed=1, failed=1)  # the control that passes its target is caught
    doc = json.loads((pytester.path / "perf.json").read_text())
    outcomes = {r["nodeid"].split("::")[1]: r["outcome"] for r in doc["results"]}
    assert outcomes == {"test_slow_control": "xfailed", "test_wrongly_fast_control": "failed"}
    assert doc["settings"]["peak"] == "datasheet"


def test_speedup_is_judged_on_interleaved_pairs(perf):
    result = perf("""
        from pytest_triton import perf_target
        FAKE = {"test_faster": (0.9, 1.0), "test_slower": (1.1, 1.0), "test_tie": (1.0, 1.0)}
        @perf_target(speedup=1.0)
        def test_faster(triton_bench): triton_bench(lambda: None, baseline=lambda: None)
        @perf_target(speedup=1.0)
        def test_slower(triton_bench): triton_bench(lambda: None, baseline=lambda: None)
        @perf_target(speedup=1.0)
        def test_tie(triton_bench): triton_bench(lambda: None, baseline=lambda: None)
    """)
    result.assert_outcomes(passed=1, failed=2)
    result.stdout.fnmatch_lines([
        "*FAIL speedup: 0.909x the baseline (1.1 ms vs baseline 1 ms, measured interleaved); target 1x (speedup=1)*",
        "*PerfInconclusive: inconclusive after 3 rounds of measurement*",
        "*INCONCLUSIVE speedup: 1.000x the baseline*",
    ])


def test_inconclusive_is_measured_again_and_can_then_pass(perf):
    result = perf("""
        from pytest_triton import perf_target
        FAKE = {"test_k": [(1.0, 1.0), (0.8, 1.0)]}
        @perf_target(speedup=1.0)
        def test_k(triton_bench):
            m = triton_bench(lambda: None, baseline=lambda: None)
            assert m.rounds == 2
    """)
    result.assert_outcomes(passed=1)


def test_above_peak_bandwidth_is_an_invalid_measurement_never_a_pass(perf):
    result = perf("""
        from pytest_triton import perf_target
        FAKE = {"test_k": (0.1, None)}
        @perf_target(gbps=100)
        def test_k(triton_bench): triton_bench(lambda: None, bytes=1e9)
    """)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*PerfInvalid: INVALID bytes: invalid measurement: 10000 GB/s = 298.3% of H100 SXM "
                                 "peak 3352 GB/s, more than the DRAM can move*"])


def test_tflops_frac_uses_the_dtype_peak_and_the_checklist_scales(perf):
    flops = 2 * 4096**3
    result = perf(f"""
        import torch
        from pytest_triton import perf_target
        FAKE = {{"test_frac": (0.25, None), "test_checklist": (0.25, None), "test_too_slow": (2.0, None),
                 "test_bf16_checklist": (2.0, None), "test_conflict": (0.25, None)}}
        @perf_target(tflops_frac=0.5)
        def test_frac(triton_bench): triton_bench(lambda: None, flops={flops}, dtype=torch.bfloat16)
        @perf_target("matmul")
        def test_checklist(triton_bench): triton_bench(lambda: None, flops={flops})
        @perf_target("matmul")
        def test_too_slow(triton_bench): triton_bench(lambda: None, flops={flops})
        @perf_target("matmul")  # the entry's float16 is a default: bf16 operands take bf16's peak
        def test_bf16_checklist(triton_bench):
            triton_bench(lambda: None, flops={flops}, dtype=torch.bfloat16)
        @perf_target(tflops_frac=0.1, dtype="float16")  # a dtype the test states is no default
        def test_conflict(triton_bench):
            triton_bench(lambda: None, flops={flops}, dtype=torch.bfloat16)
    """)
    result.assert_outcomes(passed=2, failed=3)
    result.stdout.fnmatch_lines(["*_ test_bf16_checklist _*", "*FAIL tflops_frac: 68.7 TFLOP/s = 6.9% of "
                                 "H100 SXM bfloat16 datasheet peak*"])
    assert "test_k.py::test_conflict: dtype conflict: perf_target(dtype='float16') but " \
        "triton_bench(dtype='bfloat16')" in result.stdout.str()
    text = result.stdout.str()
    assert ("FAIL tflops_frac: 68.7 TFLOP/s = 6.9% of H100 SXM float16 datasheet peak 989.4 TFLOP/s; "
            "target 16.0% = 158.6 TFLOP/s (tflops_frac=0.1603)") in text
    assert ("[checklist 'matmul': FP16 matmul > 50 TFLOPS on A100, scaled by this device's FP16 "
            "tensor peak]") in text
    assert "roofline: compute-bound (no bytes= given): 6.9% of float16 peak, needs work (<50.0%)" in text


def test_max_ms_and_gbps(perf):
    result = perf("""
        from pytest_triton import perf_target
        FAKE = {"test_k": (2.0, None)}
        @perf_target(max_ms=1.5, gbps=400)
        def test_k(triton_bench): triton_bench(lambda: None, bytes=1e9)
    """)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*FAIL max_ms: 2 ms per call; target at most 1.5 ms (max_ms=1.5)*"])
    assert "FAIL gbps" not in result.stdout.str()  # 500 GB/s >= 400: that target held


def test_geomean_speedup_over_a_sweep(perf, pytester):
    result = perf("""
        from pytest_triton import perf_target
        FAKE = {"test_good": (0.8, 1.0), "test_bad": (1.0, 0.9)}
        @perf_target(geomean_speedup=1.1)
        def test_good(triton_bench):
            for n in (1, 2, 3):
                triton_bench(lambda: None, baseline=lambda: None, name=f"n{n}")
        @perf_target(geomean_speedup=1.1)
        def test_bad(triton_bench):
            for n in (1, 2):
                triton_bench(lambda: None, baseline=lambda: None, name=f"n{n}")
    """, "--triton-perf-json", "perf.json")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines([
        "*FAIL geomean_speedup: geometric mean speedup 0.900x over 2 shapes (n1 0.900x, n2 0.900x); target 1.1x*",
        "*test_good ?geomean?*1.250x*geomean>=1.1x baseline*pass*",
        # the footer counts the geomean targets too (the sweep's rows only say "measured")
        "5 measurements: 5 measured; 2 geomean targets: 1 pass, 1 fail",
    ])
    doc = json.loads((pytester.path / "perf.json").read_text())
    assert doc["geomean_summary"] == {"fail": 1, "pass": 1}


@pytest.mark.parametrize("body, needle", [
    ("@perf_target(bandwidth_frac=0.5)\ndef test_k(triton_bench): triton_bench(lambda: None)",
     "bandwidth_frac=0.5 needs triton_bench(..., bytes=...)"),
    ("@perf_target(tflops=1)\ndef test_k(triton_bench): triton_bench(lambda: None)",
     "tflops=1 needs triton_bench(..., flops=...)"),
    ("@perf_target(tflops_frac=0.5)\ndef test_k(triton_bench): triton_bench(lambda: None, flops=1)",
     "tflops_frac=0.5 needs the operands' dtype"),
    ("@perf_target(speedup=1)\ndef test_k(triton_bench): triton_bench(lambda: None)",
     "speedup=1 needs triton_bench(..., baseline=...)"),
    ("@perf_target(speedup=1)\ndef test_k(triton_bench): triton_bench(3, baseline=min)",
     "triton_bench(fn=3): fn must be a zero-argument callable"),
    ("@perf_target(gbps=1)\ndef test_k(triton_bench): triton_bench(lambda: None, bytes=-5)",
     "triton_bench(bytes=-5): expected a number > 0"),
    ("@perf_target(tflops_frac=0.5, dtype='float16')\ndef test_k(triton_bench): "
     "triton_bench(lambda: None, flops=1, dtype='bfloat16')", "dtype conflict"),
    ("@perf_target(tflops_frac=0.5)\ndef test_k(triton_bench): "
     "triton_bench(lambda: None, flops=1, dtype='fp17')",
     "triton_bench(dtype='fp17'): expected one of float32, tf32, float16"),
    ("@perf_target(max_ms=9)\ndef test_k(triton_bench):\n    triton_bench(lambda: None)\n"
     "    triton_bench(lambda: None)", "triton_bench called more than once: give each call a distinct name="),
    ("@perf_target(max_ms=9)\ndef test_k(triton_bench): pass",
     "has perf_target(max_ms=9.0) but never called triton_bench"),
])
def test_bad_use_is_an_error_naming_the_test_and_argument(perf, body, needle):
    result = perf("from pytest_triton import perf_target\nFAKE = {'test_k': (1.0, 1.0)}\n" + body)
    result.assert_outcomes(failed=1)
    assert "test_k.py::test_k" in result.stdout.str() and needle in result.stdout.str(), result.stdout.str()


@pytest.mark.parametrize("spec, needle", [
    ("([1.0, -1.0], None)", "Timings.ms[1]=-1.0: expected a finite number of milliseconds > 0"),
    ("([1.0, float('nan')], None)", "Timings.ms[1]=nan"),
    ("([], None)", "Timings.ms=[]: expected a non-empty list"),
    ("([1.0, 1.0, 1.0], [1.0])", "returned 3 samples of fn and 1 of the baseline"),
])
def test_timings_a_hook_returns_are_checked(pytester, spec, needle):
    pytester.makeconftest(FAKE_GPU + f"""
from pytest_triton.perf.timing import Timings as _T
def pytest_triton_measure(config, request, fn, baseline, settings):
    ms, base = {spec}
    return _T(ms=ms, baseline_ms=base, method="injected", l2=settings.l2)
""")
    baseline = "baseline=lambda: None" if "], [" in spec else "baseline=None"
    pytester.makepyfile(test_k=f"""
        from pytest_triton import perf_target
        @perf_target(max_ms=5)
        def test_k(triton_bench): triton_bench(lambda: None, {baseline})
    """)
    result = pytester.runpytest("--triton-perf", "-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    assert "test_k.py::test_k" in result.stdout.str() and needle in result.stdout.str(), \
        result.stdout.str()


def test_flops_beyond_the_tensor_cores_are_an_invalid_measurement(perf):
    result = perf("""
        import torch
        from pytest_triton import perf_target
        FAKE = {"test_k": (0.25, None), "test_ok": (0.25, None)}
        @perf_target(tflops=100)
        def test_k(triton_bench):  # 1600 TFLOP/s on an H100 (989 fp16): flops= overcounts
            triton_bench(lambda: None, flops=4e11, dtype=torch.float16)
        @perf_target(tflops=100)
        def test_ok(triton_bench): triton_bench(lambda: None, flops=2e11, dtype=torch.float16)
    """)
    result.assert_outcomes(failed=1, passed=1)
    result.stdout.fnmatch_lines(["*invalid measurement: 1600.0 TFLOP/s = 161.7% of H100 SXM "
                                 "float16 datasheet peak 989.4 TFLOP/s, more than the tensor cores*"])


def test_two_perf_target_markers_are_an_error_not_one_silently_dropped(perf):
    result = perf("""
        import pytest
        from pytest_triton import perf_target
        FAKE = {"test_k": (1.0, None)}
        pytestmark = perf_target(max_ms=0.5)
        @perf_target(gbps=100)
        def test_k(triton_bench): triton_bench(lambda: None, bytes=1e9)
    """)
    result.stdout.fnmatch_lines(["*test_k.py::test_k: 2 perf_target markers apply "
                                 "(perf_target(gbps=100); perf_target(max_ms=0.5), from the test, "
                                 "its class or its module's pytestmark): give one*"])
    assert result.ret != pytest.ExitCode.OK


def test_checklist_overrides_from_ini_and_toml(perf, pytester):
    pytester.makepyprojecttoml("""
        [tool.pytest.ini_options]
        triton_perf_checklist = ["layernorm: gbps=1600"]
        [tool.pytest-triton.checklist]
        softmax = {gbps = 2000}
    """)
    result = perf("""
        from pytest_triton import perf_target
        FAKE = {"test_s": (1.0, None), "test_l": (1.0, None)}
        @perf_target("softmax")
        def test_s(triton_bench): triton_bench(lambda: None, bytes=1.5e9)
        @perf_target("layernorm")
        def test_l(triton_bench): triton_bench(lambda: None, bytes=1.5e9)
    """)
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines(["*target 2000 GB/s (gbps=2000)*", "*target 1600 GB/s (gbps=1600)*"])


@pytest.mark.parametrize("toml, needle", [
    ('[tool.pytest.ini_options]\ntriton_perf_checklist = ["softmax: gbs=600"]',
     "triton_perf_checklist entry 'softmax': checklist entry 'softmax' has unknown key 'gbs'"),
    ('[tool.pytest-triton.checklist]\nmine = {gbps = "fast"}',
     "[tool.pytest-triton.checklist] entry 'mine': gbps='fast': expected a number"),
])
def test_a_bad_checklist_override_stops_the_run_at_start(pytester, toml, needle):
    # Even when no test names the entry: a typo must not wait for the first test that uses it.
    pytester.makepyprojecttoml(toml)
    pytester.makepyfile(test_k="def test_k(): pass")
    result = pytester.runpytest("-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert needle in result.stderr.str(), result.stderr.str()


def test_terminal_table_json_and_junit(perf, pytester):
    result = perf(f"""
        import torch
        from pytest_triton import perf_target
        FAKE = {{"test_add": (0.28, 0.29), "test_mm": (0.2, 0.21)}}
        @perf_target(bandwidth_frac=0.8, speedup=0.98)
        def test_add(triton_bench): triton_bench(lambda: None, bytes=3 * 4 * {N}, baseline=lambda: None)
        @perf_target(tflops=500)
        def test_mm(triton_bench): triton_bench(lambda: None, flops=2 * 4096**3, dtype=torch.float16)
    """, "--triton-perf-json", "perf.json", "--junitxml", "junit.xml")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines([
        "*= pytest-triton perf =*",
        "NVIDIA H100 80GB HBM3 (132 SMs), driver 580.0; torch *, triton *; clocks unknown (no NVML); L2 cold; peaks: H100 SXM datasheet peak*",
        "test * median ms * GB/s * TFLOP/s * of peak * speedup * target * verdict * noise * method*",
        "test_add * 0.2800 * 2876 * 85.8% bw*1.036x * bw>=80.0% (2682 GB/s), >=0.98x baseline * pass*",
        "test_mm * 0.2000 * 687.2 * 69.5% float16*>=500 TFLOP/s * pass*",
        "2 measurements: 2 pass",
    ])
    doc = json.loads((pytester.path / "perf.json").read_text())
    assert (doc["schema"], doc["schema_version"]) == ("pytest-triton-perf", 2)
    assert {"environment", "device", "settings", "results", "unchecked", "summary"} <= set(doc)
    assert doc["device"]["sku"] == "H100 SXM" and doc["summary"] == {"pass": 2}
    add = doc["results"][0]["measurements"][0]
    assert add["nodeid"] == "test_k.py::test_add" and add["verdict"] == "pass"
    assert len(add["samples_ms"]) == 40 and add["time_ms"]["n"] == 40
    assert {c["target"] for c in add["checks"]} == {"bandwidth_frac", "speedup"}
    props = {p.get("name"): p.get("value") for p in ET.parse(pytester.path / "junit.xml").iter("property")}
    assert props["triton.verdict"] == "pass" and float(props["triton.gbps"]) == pytest.approx(2876, rel=1e-3)


def test_measurement_returned_to_the_test(perf):
    result = perf("""
        import pytest, torch
        from pytest_triton import perf_target
        FAKE = {"test_k": (0.25, 0.5)}
        @perf_target(speedup=1.5)
        def test_k(triton_bench):
            m = triton_bench(lambda: None, bytes=5e8, flops=2e11, dtype=torch.float16, baseline=lambda: None)
            assert m.median_ms == pytest.approx(0.25, rel=0.01)
            assert m.gbps == pytest.approx(2000, rel=0.01)
            assert m.bandwidth_frac == pytest.approx(2000 / 3352, rel=0.01)
            assert m.tflops == pytest.approx(800, rel=0.01)
            assert m.tflops_frac == pytest.approx(800 / 989.4, rel=0.01)
            assert m.speedup.median == pytest.approx(2.0, rel=0.01)
            assert m.verdict == "pass"
    """)
    result.assert_outcomes(passed=1)


@pytest.mark.requires_plugin("pytest-xdist")
def test_results_are_gathered_from_xdist_workers(pytester):
    pytester.makeconftest(FAKE_GPU + """
import os
_fake_device_info = pytest_triton_device_info
def pytest_triton_device_info(config):
    with open(os.path.join(str(config.rootpath), "device_info_asked.txt"), "a") as f:
        f.write(os.environ.get("PYTEST_XDIST_WORKER", "controller") + "\\n")
    return _fake_device_info(config)
""")
    pytester.makepyfile(test_k="""
        import pytest
        from pytest_triton import perf_target
        FAKE = {f"test_k[{i}]": (0.3, None) for i in range(4)}
        @pytest.mark.parametrize("i", range(4))
        @perf_target(gbps=1000)
        def test_k(triton_bench, i): triton_bench(lambda: None, bytes=1e9)
    """)
    result = pytester.runpytest_subprocess("-n", "2", "--triton-perf", "-p", "no:cacheprovider",
                                           "--triton-perf-json", "perf.json")
    result.assert_outcomes(passed=4)
    result.stdout.fnmatch_lines(["*4 measurements: 4 pass*"])
    doc = json.loads((pytester.path / "perf.json").read_text())
    assert sorted(r["nodeid"] for r in doc["results"]) == [f"test_k.py::test_k[{i}]" for i in range(4)]
    assert doc["device"]["name"] == "NVIDIA H100 80GB HBM3"  # the workers' (the controller has none)
    # Only the workers, which time, asked for the device: the controller runs no test and must
    # not start CUDA (nor calibrate) on a GPU its workers share.
    asked = (pytester.path / "device_info_asked.txt").read_text().split()
    assert sorted(asked) == ["gw0", "gw1"], asked


@pytest.mark.requires_plugin("pytest-benchmark")
def test_pytest_benchmark_table_and_compare_catch_a_slower_kernel(perf, pytester):
    body = """
        import os
        from pytest_triton import perf_target
        FAKE = {"test_k": (float(os.environ["FAKE_MS"]), None)}
        @perf_target(max_ms=10)
        def test_k(triton_bench): triton_bench(lambda: None)
    """
    pytester.makepyfile(test_k=body)
    pytester.makeconftest(FAKE_GPU)
    args = ("--triton-perf", "--benchmark-storage", str(pytester.path / "bench"))
    with pytest.MonkeyPatch.context() as mp:
        # pytest-benchmark disables itself where PYTEST_XDIST_WORKER is set (this session may be
        # an xdist worker); the inner runs are not.
        mp.setenv("PYTEST_XDIST_WORKER", "")
        mp.delenv("PYTEST_XDIST_WORKER")
        mp.setenv("FAKE_MS", "1.0")
        first = pytester.runpytest(*args, "--benchmark-autosave")
        first.assert_outcomes(passed=1)
        first.stdout.fnmatch_lines(["*benchmark 'pytest-triton': 1 tests*", "test_k *"])
        saved = list((pytester.path / "bench").rglob("*.json"))
        assert len(saved) == 1
        info = json.loads(saved[0].read_text())
        assert info["machine_info"]["gpu"]["name"] == "NVIDIA H100 80GB HBM3"
        assert info["benchmarks"][0]["stats"]["median"] == pytest.approx(1e-3, rel=0.01)
        mp.setenv("FAKE_MS", "1.1")
        second = pytester.runpytest(*args, "--benchmark-compare", "--benchmark-compare-fail=median:5%")
    assert second.ret != 0
    text = second.stdout.str() + second.stderr.str()
    assert "Performance has regressed" in text
    assert "Field 'median' has failed PercentageRegressionCheck: 10.0" in text


@pytest.mark.parametrize("args, needle", [
    (("--triton-perf-retries", "inf"), "--triton-perf-retries 'inf': expected a whole number"),
    (("--triton-perf-retries", "1.5"), "--triton-perf-retries '1.5': expected a whole number"),
    (("--triton-perf-retries", "-1"), "--triton-perf-retries '-1': must be >= 0"),
    (("--triton-perf-max-time", "nan"), "--triton-perf-max-time 'nan': expected a finite number"),
    (("--triton-perf-max-time", "0"), "--triton-perf-max-time '0': must be >= 0.01"),
])
def test_bad_perf_options_are_usage_errors(perf, args, needle):
    result = perf("def test_k(): pass", *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert needle in result.stderr.str(), result.stderr.str()


@pytest.mark.parametrize("fields, needle", [
    ("dram_gbps=0.0", "pytest_triton_device_info returned dram_gbps=0.0: expected the datasheet DRAM"),
    ("dram_gbps=float('nan')", "dram_gbps=nan"),
    ("sms=0", "sms=0: expected the number of SMs"),
    ("tflops={'float16': -1.0}", "tflops['float16']=-1.0"),
])
def test_a_bad_device_from_the_hook_stops_the_run_naming_the_field(pytester, fields, needle):
    pytester.makeconftest(FAKE_GPU + f"""
import dataclasses as _dc
_fake = pytest_triton_device_info
def pytest_triton_device_info(config):
    return _dc.replace(_fake(config), {fields})
""")
    pytester.makepyfile(test_k="def test_k(): pass")
    result = pytester.runpytest("--triton-perf", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert needle in result.stderr.str(), result.stderr.str()


def test_a_miss_measured_while_throttled_in_every_round_is_inconclusive(pytester):
    # A hot GPU must not pass for a slow kernel: not PerfTargetMissed (which a negative control's
    # xfail would accept) but inconclusive, naming the throttling; a cool GPU's miss stays a miss.
    pytester.makeconftest(FAKE_GPU + """
from pytest_triton.perf.timing import Timings as _T
def pytest_triton_measure(config, request, fn, baseline, settings):
    hot = ({"throttled": True, "clock_reasons": ["hw_thermal_slowdown", "sw_power_cap"]}
           if request.node.name == "test_hot" else {})
    return _T(ms=[2.0 * (1 + 0.001 * (i % 3)) for i in range(40)], method="injected",
              l2=settings.l2, gpu_before=hot, gpu_after=hot)
""")
    pytester.makepyfile(test_k="""
        from pytest_triton import perf_target
        @perf_target(max_ms=1.5)
        def test_hot(triton_bench): triton_bench(lambda: None)
        @perf_target(max_ms=1.5)
        def test_cool(triton_bench): triton_bench(lambda: None)
    """)
    result = pytester.runpytest("--triton-perf", "-p", "no:cacheprovider")
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines([
        "*PerfInconclusive: inconclusive: the GPU was throttling in every round of measurement "
        "(hw_thermal_slowdown, sw_power_cap)*",
        "*PerfTargetMissed: FAIL max_ms*"])


def test_an_inconclusive_geomean_says_it_is_not_measured_again(perf):
    result = perf("""
        from pytest_triton import perf_target
        FAKE = {"test_geo": [(1.0, 1.1)] * 10}
        @perf_target(geomean_speedup=1.1)
        def test_geo(triton_bench):
            for n in (1, 2):
                triton_bench(lambda: None, baseline=lambda: None, name=f"n{n}")
    """)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*PerfInconclusive: inconclusive: the target lies inside the 99% CI "
                                 "of the geometric mean over 2 shapes, each measured once*"])


def test_a_compute_bound_measurement_samples_for_half_a_second(pytester):
    # Under the power cap the H100's clocks wander over longer than 50 ms: compute-bound
    # measurements that stopped after 50 ms were off their runs' median by up to 11.8%, and they
    # were a side of every false SLOW or FAST left in the perf suite against itself. flops= asks
    # for COMPUTE_MIN_TIME_S (nvbench's --min-time); the rest keep MIN_TIME_S; max time bounds both.
    from pytest_triton.perf import timing

    pytester.makeconftest(FAKE_GPU.replace(
        "    spec = request.module.FAKE[request.node.name]",
        "    print(f'MINTIME {request.node.name} {settings.min_time} {settings.max_time}')\n"
        "    spec = request.module.FAKE[request.node.name]"))
    pytester.makepyfile(test_k="""
        FAKE = {"test_mm": (1.0, None), "test_add": (0.3, None)}
        def test_mm(triton_bench): triton_bench(lambda: None, flops=2 * 4096 ** 3)
        def test_add(triton_bench): triton_bench(lambda: None, bytes=3 * 4 * 4096)
    """)
    result = pytester.runpytest("--triton-perf", "-p", "no:cacheprovider", "-s",
                                "--triton-perf-max-time", "3")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines([f"*MINTIME test_mm {timing.COMPUTE_MIN_TIME_S} 3.0*",
                                 f"*MINTIME test_add {timing.MIN_TIME_S} 3.0*"])
    assert timing.COMPUTE_MIN_TIME_S >= 0.5 > timing.MIN_TIME_S
