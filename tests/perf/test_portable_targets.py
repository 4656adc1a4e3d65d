"""Targets that mean the same on every GPU: fractions of this device's measured ceilings
(perf_target(peak="measured")), calibrated once per device fingerprint and cached on disk; both
fractions (datasheet, measured) in the table and the JSON. Devices and ceilings are injected
through pytest_triton_device_info and pytest_triton_calibrate."""

import json

import pytest

# Two devices whose datasheets differ more than their real ceilings do (as an H100's and an
# H200's: 3352 vs 4800 GB/s on paper, 3000 vs 4245 measured), and a kernel that reaches 95% of
# each device's measured copy ceiling.
DEVICES = '''
import os
from pytest_triton.env.device import DeviceInfo
from pytest_triton.perf.timing import Timings

DEVICES = {
    "a": dict(datasheet=1000.0, measured=900.0),
    "b": dict(datasheet=2000.0, measured=1500.0),
}
NAME = os.environ.get("FAKE_DEVICE", "a")
DEV = DEVICES[NAME]

def pytest_triton_device_info(config):
    return DeviceInfo(name=f"GPU {NAME}", sms=100, dram_gbps=DEV["datasheet"], sku=f"GPU {NAME}",
                      tflops={"float16": 100.0, "bfloat16": 100.0, "tf32": 50.0, "float8": None},
                      fingerprint=os.environ.get("FAKE_FINGERPRINT", f"fp-{NAME}"))

def pytest_triton_calibrate(config, device):
    with open(os.environ["CALIBRATION_LOG"], "a") as f:
        f.write(device.fingerprint + "\\n")
    if os.environ.get("NO_CEILINGS"):  # (None would hand over to the plugin's own measurement)
        raise RuntimeError("the copy did not run")
    if os.environ.get("BAD_CEILING"):
        return {"dram_gbps": float(os.environ["BAD_CEILING"]), "tflops": {"float16": 80.0}}
    if os.environ.get("BAD_COPIES"):
        return {"dram_gbps": DEV["measured"], "copy_gbps": {"1000000000": -1.0}, "tflops": {}}
    # SIZED: copies of two sizes, a copy of the tests' 1e9 bytes reaching 850/900 of the largest
    copies = {"copy_gbps": {"1000000000": DEV["measured"] * 850 / 900,
                            str(2 << 30): DEV["measured"]}} if os.environ.get("SIZED") else {}
    return {"dram_gbps": DEV["measured"], "tflops": {"float16": 80.0, "bfloat16": 80.0}, **copies}

def pytest_triton_measure(config, request, fn, baseline, settings):
    gbps = float(os.environ.get("KERNEL_FRAC", "0.95")) * DEV["measured"]
    ms = request.module.BYTES / gbps / 1e6
    jitter = [1 + 0.001 * ((i * 7) % 5 - 2) for i in range(40)]
    return Timings(ms=[ms * j for j in jitter], method="injected", l2=settings.l2)
'''

BODY = '''
from pytest_triton import perf_target
BYTES = 1e9

@perf_target(bandwidth_frac=0.9, peak="measured")
def test_of_measured(triton_bench): triton_bench(lambda: None, bytes=BYTES)

@perf_target(bandwidth_frac=0.8, peak="datasheet")
def test_of_datasheet(triton_bench): triton_bench(lambda: None, bytes=BYTES)
'''


@pytest.fixture
def run(pytester, monkeypatch, tmp_path):
    pytester.makeconftest(DEVICES)
    pytester.makepyfile(test_k=BODY)
    log = tmp_path / "calibrations.log"
    log.touch()
    monkeypatch.setenv("CALIBRATION_LOG", str(log))
    # the nested run is no worker of the outer run's xdist (whose forced calibration it would
    # otherwise take for its own): a test of one run's sharing gives a run id of its own
    monkeypatch.delenv("PYTEST_XDIST_TESTRUNUID", raising=False)

    def go(device, *args, fingerprint=None):
        monkeypatch.setenv("FAKE_DEVICE", device)
        if fingerprint:
            monkeypatch.setenv("FAKE_FINGERPRINT", fingerprint)
        else:
            monkeypatch.delenv("FAKE_FINGERPRINT", raising=False)
        result = pytester.runpytest("--triton-perf", "-p", "no:cacheprovider", *args)
        return result, log.read_text().split()

    return go


def test_a_measured_target_gives_one_verdict_on_devices_whose_datasheets_differ(run):
    # 95% of the measured ceiling on both devices: 855 GB/s on "a" is 85.5% of its datasheet,
    # 1425 GB/s on "b" is 71.2% of its. The measured target passes on both; the datasheet one
    # fails on "b" (the negative control: a datasheet fraction does not travel).
    a, _ = run("a")
    a.assert_outcomes(passed=2)
    b, _ = run("b")
    b.assert_outcomes(passed=1, failed=1)
    b.stdout.fnmatch_lines([
        "*FAIL bandwidth_frac: 1425 GB/s = 71.2% of GPU b datasheet peak 2000 GB/s; target 80.0%*"])
    for result, ceiling in ((a, 900), (b, 1500)):
        result.stdout.fnmatch_lines([f"*measured copy ceiling {ceiling} GB/s*",
                                     "*test_of_measured *95.0% of copy*bw>=90.0% of copy (* GB/s)*pass*"])


def test_ceilings_are_measured_once_per_fingerprint_and_again_when_it_changes(run):
    _, calls = run("a")
    assert calls == ["fp-a"]
    _, calls = run("a")  # cached on disk: not measured again
    assert calls == ["fp-a"]
    result, calls = run("a", fingerprint="fp-a-new-driver")
    assert calls == ["fp-a", "fp-a-new-driver"]
    result.assert_outcomes(passed=2)
    _, calls = run("a", "--triton-perf-calibrate", fingerprint="fp-a-new-driver")
    assert calls == ["fp-a", "fp-a-new-driver", "fp-a-new-driver"]  # asked for: measured again


def test_a_measured_target_without_ceilings_is_an_error_naming_the_test(run, monkeypatch):
    monkeypatch.setenv("NO_CEILINGS", "1")
    result, _ = run("a")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines([
        "*test_k.py::test_of_measured: bandwidth_frac with peak='measured': GPU a has no "
        "measured copy ceiling; calibration failed: RuntimeError: the copy did not run*"])


def test_a_run_asking_for_measured_peaks_without_them_says_so(run, monkeypatch):
    monkeypatch.setenv("NO_CEILINGS", "1")
    result, _ = run("a", "--triton-perf-peak", "measured")
    result.stdout.fnmatch_lines([
        "--triton-perf-peak measured: this device has no measured ceilings (calibration failed: "
        "RuntimeError: the copy did not run); fractions without a peak= of their own were taken "
        "of the datasheet"])


@pytest.mark.parametrize("bad", ["-2500", "0", "nan"])
def test_implausible_ceilings_are_neither_used_nor_cached(run, monkeypatch, bad):
    monkeypatch.setenv("BAD_CEILING", bad)
    result, calls = run("a")
    result.assert_outcomes(passed=1, failed=1)  # the measured target has no ceiling to use
    result.stdout.fnmatch_lines([f"*GPU a has no measured copy ceiling; not used: "
                                 f"pytest_triton_calibrate returned dram_gbps={float(bad)!r}*"])
    monkeypatch.delenv("BAD_CEILING")
    result, calls = run("a")  # nothing was cached: measured again, and now used
    assert len(calls) == 2
    result.assert_outcomes(passed=2)


def test_the_json_holds_both_fractions_and_the_run_default_can_be_measured(run, pytester):
    result, _ = run("b", "--triton-perf-peak", "measured", "--triton-perf-json", "perf.json")
    # The run's default is measured now, but the datasheet target keeps its datasheet meaning.
    result.assert_outcomes(passed=1, failed=1)
    doc = json.loads((pytester.path / "perf.json").read_text())
    m = {r["nodeid"]: r["measurements"][0] for r in doc["results"]}["test_k.py::test_of_measured"]
    assert m["fractions"]["bandwidth"]["datasheet"] == pytest.approx(0.7125, rel=1e-3)
    assert m["fractions"]["bandwidth"]["measured"] == pytest.approx(0.95, rel=1e-3)
    assert m["peaks"]["dram_gbps"] == 1500 and m["peaks"]["dram_gbps_datasheet"] == 2000
    assert doc["settings"]["calibration"].startswith("measured now, cached in ")


@pytest.mark.parametrize("marker, needle", [
    ('perf_target(bandwidth_frac=0.9, peak="nominal")', "peak='nominal': expected 'datasheet' or 'measured'"),
    ('perf_target(speedup=1.0, peak="measured")', "peak='measured' applies to bandwidth_frac and tflops_frac"),
])
def test_bad_peak_is_a_collection_error(pytester, marker, needle):
    pytester.makepyfile(test_k=f"""
        from pytest_triton import perf_target
        @{marker}
        def test_k(triton_bench): pass
    """)
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines([f"*test_k.py::test_k: {needle}*"])


def test_a_forced_calibration_is_measured_once_per_run_and_card(monkeypatch):
    # --triton-perf-calibrate under xdist: the first worker on a card measures, the other workers
    # of that run read it; another run measures again, and another card (fingerprint) its own
    from pytest_triton.perf import calibrate

    calls = []

    def measure():
        calls.append(1)
        return {"dram_gbps": 900.0 + len(calls), "tflops": {}}

    monkeypatch.setenv("PYTEST_XDIST_TESTRUNUID", "run-a")
    first, how = calibrate.ceilings("card-0", measure, force=True)
    again, how_again = calibrate.ceilings("card-0", measure, force=True)
    assert len(calls) == 1 and again["dram_gbps"] == first["dram_gbps"] == 901.0
    assert how.startswith("measured now") and how_again.startswith("cached in")
    assert calibrate.ceilings("card-1", measure, force=True)[0]["dram_gbps"] == 902.0
    monkeypatch.setenv("PYTEST_XDIST_TESTRUNUID", "run-b")
    assert calibrate.ceilings("card-0", measure, force=True)[0]["dram_gbps"] == 903.0
    monkeypatch.delenv("PYTEST_XDIST_TESTRUNUID")  # no run: forced means measured, every time
    calibrate.ceilings("card-0", measure, force=True)
    calibrate.ceilings("card-0", measure, force=True)
    assert len(calls) == 5


def test_a_kernel_is_judged_against_a_copy_of_its_own_bytes(run, monkeypatch):
    # A copy of the test's 1e9 bytes reaches 850 GB/s where the largest copy reaches 900 (as a
    # 512 MiB copy reaches 97% of a 2 GiB one on an H200). A kernel at 774 GB/s is 86% of the
    # largest copy but 91.1% of a copy of its own bytes: its 90% target passes (the positive
    # control; without the sized copies it fails, the case that false-failed); one at 720 GB/s
    # is 84.7% of the same-size copy and fails (the negative control).
    monkeypatch.setenv("SIZED", "1")
    monkeypatch.setenv("KERNEL_FRAC", "0.86")
    result, _ = run("a")
    result.assert_outcomes(passed=1, failed=1)  # the datasheet target: 77.4% of 1000 < 80%
    result.stdout.fnmatch_lines([
        "*measured copy ceiling 900 GB/s*",
        "*test_of_measured *91.1% of copy*bw>=90.0% of copy (765 GB/s)*pass*"])
    monkeypatch.setenv("KERNEL_FRAC", "0.80")
    result, _ = run("a", "--triton-perf-calibrate")
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines([
        "*FAIL bandwidth_frac: 720 GB/s = 84.7% of GPU a measured copy ceiling for 954 MiB "
        "850 GB/s; target 90.0%*"])
    monkeypatch.delenv("SIZED")
    monkeypatch.setenv("KERNEL_FRAC", "0.86")
    result, _ = run("a", "--triton-perf-calibrate")
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines(["*FAIL bandwidth_frac: 774 GB/s = 86.0% of GPU a measured copy "
                                 "ceiling 900 GB/s; target 90.0%*"])


def test_implausible_copy_sizes_are_neither_used_nor_cached(run, monkeypatch):
    monkeypatch.setenv("BAD_COPIES", "1")
    result, _ = run("a")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*GPU a has no measured copy ceiling; not used: pytest_triton_"
                                 "calibrate returned copy_gbps?'1000000000'?=-1.0*"])


@pytest.fixture
def card(monkeypatch, tmp_path):
    """calibrate.ceilings of one card over a cache of its own in tmp_path: (ceilings(), the
    measurements made so far, as a list), measure() returning copies of two sizes."""
    from pytest_triton.perf import calibrate

    monkeypatch.setenv("PYTEST_TRITON_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("PYTEST_XDIST_TESTRUNUID", raising=False)
    calls = []

    def measure():
        calls.append(1)
        return {"dram_gbps": 900.0, "copy_gbps": {"1000": 800.0, "2000": 900.0}, "tflops": {}}

    return (lambda: calibrate.ceilings("card-0", measure)), calls


def test_ceilings_an_older_version_cached_are_measured_again(card, tmp_path):
    # A file written before the copies of several sizes were measured has no "copy_gbps": every
    # measured bandwidth would be judged against the largest copy. It is measured again.
    from pytest_triton.perf import calibrate

    ceilings, calls = card
    found, _ = ceilings()
    path = next(tmp_path.rglob("*.json"))
    assert found["version"] == calibrate.CACHE_VERSION and len(calls) == 1
    assert ceilings()[1].startswith("cached in")
    old = {k: v for k, v in found.items() if k not in ("version", "copy_gbps")}
    path.write_text(json.dumps(old))
    again, how = ceilings()
    assert len(calls) == 2 and how.startswith("measured now") and "copy_gbps" in again


def test_a_cached_file_edited_into_nonsense_is_measured_again(card, tmp_path):
    # the cache is read as plausibility is checked when measured: a copy rate of 0 would divide
    # by zero where a kernel's ceiling is read from it
    from pytest_triton.perf import calibrate

    ceilings, calls = card
    found, _ = ceilings()
    path = next(tmp_path.rglob("*.json"))
    path.write_text(json.dumps({**found, "copy_gbps": {"1000": 0.0, "2000": 900.0}}))
    again, how = ceilings()
    assert len(calls) == 2 and how.startswith("measured now") and again["copy_gbps"]["1000"] == 800.0
    # bytes as numbers (a hook's) are sizes too; a size that is no number is not
    assert calibrate._implausible({"dram_gbps": 9.0, "copy_gbps": {1e9: 8.0, 2.0**31: 9.0}}) is None
    assert "copy_gbps['big']" in calibrate._implausible({"dram_gbps": 9.0, "copy_gbps": {"big": 8.0}})
