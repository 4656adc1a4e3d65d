"""The one record per perf test (perf/record.py): every output shows what it holds, and the JSON
report's per-test entry reads back into it exactly (old runs' files included)."""

import gzip
import json
import pathlib
import re

import pytest

from pytest_triton.perf.markers import PerfTarget
from pytest_triton.perf.record import PerfRecord, Verdict

ROOT = pathlib.Path(__file__).resolve().parents[2]

# An H100 with measured ceilings, so that every fraction has a datasheet and a measured value.
FAKE_GPU = '''
from pytest_triton.env.device import DeviceInfo
from pytest_triton.perf.timing import Timings

def pytest_triton_device_info(config):
    return DeviceInfo(name="NVIDIA H100 80GB HBM3", sms=132, dram_gbps=3352.0, sku="H100 SXM",
                      tflops={"tf32": 494.7, "float16": 989.4, "bfloat16": 989.4, "float8": 1978.9},
                      driver="580.0", fingerprint="fake-record")

def pytest_triton_calibrate(config, device):
    return {"dram_gbps": 3001.0, "tflops": {"float16": 735.0, "bfloat16": 742.0, "tf32": 380.0}}

def pytest_triton_measure(config, request, fn, baseline, settings):
    ms, base = request.module.FAKE[request.node.name]
    jitter = [1 + 0.003 * ((i * 7) % 5 - 2) for i in range(40)]
    return Timings(ms=[ms * j for j in jitter],
                   baseline_ms=None if baseline is None else [base * j for j in reversed(jitter)],
                   method="injected", l2=settings.l2, gpu_before={"sm_clock_mhz": 1980})
'''

TESTS = """
    import torch
    from pytest_triton import perf_target
    FAKE = {"test_add": (0.2871, None), "test_mm": (0.3, 0.33), "test_geo": (0.5, 0.52),
            "test_slow": (0.9, None), "test_plain": (0.1, None)}
    @perf_target(bandwidth_frac=0.6, peak="measured")
    def test_add(triton_bench): triton_bench(lambda: None, bytes=805306368)
    @perf_target(tflops_frac=0.4, speedup=1.05)
    def test_mm(triton_bench):
        triton_bench(lambda: None, flops=2 * 4096**3, dtype=torch.float16, baseline=lambda: None)
    @perf_target(geomean_speedup=1.1)
    def test_geo(triton_bench):
        for n in ("a", "b"):
            triton_bench(lambda: None, bytes=1e8, baseline=lambda: None, name=n)
    @perf_target(gbps=2000)
    def test_slow(triton_bench): triton_bench(lambda: None, bytes=805306368)
    def test_plain(triton_bench): triton_bench(lambda: None, bytes=1e8, flops=1e9, dtype="float16")
"""


@pytest.fixture
def run(pytester, tmp_path, monkeypatch):
    pytester.makeconftest(FAKE_GPU)
    pytester.makepyfile(test_k=TESTS)
    cache = tmp_path / "calibration"

    def go(*args):
        monkeypatch.setenv("PYTEST_TRITON_CACHE_DIR", str(cache))
        result = pytester.runpytest("--triton-perf", "-p", "no:cacheprovider", "--triton-perf-json",
                                    "perf.json", *args)
        doc = json.loads((pytester.path / "perf.json").read_text())
        return result, doc

    return go


def _table(result) -> dict:
    """{test [name]: the table's "of peak" cell} from the terminal table."""
    lines = result.stdout.lines
    head = next(i for i, line in enumerate(lines) if line.startswith("test ") and "of peak" in line)
    start = lines[head].index("of peak")
    end = lines[head].index("speedup", start)
    rows = {}
    for line in lines[head + 2:]:
        if not line.strip() or "measurement" in line:
            break
        test = re.split(r"\s{2,}", line)[0]
        rows[test] = line[start:end].strip()
    return rows


def test_a_fraction_in_the_table_is_the_one_in_the_json(run):
    result, doc = run()
    result.assert_outcomes(passed=3, failed=2)  # test_slow misses; test_geo's geomean misses
    cells = _table(result)
    seen = 0
    for r in doc["results"]:
        for m in r["measurements"]:
            test = m["nodeid"].split("::", 1)[-1] + (f" [{m['name']}]" if m["name"] else "")
            kind = "tflops" if m["tflops"] is not None else "bandwidth"
            shown = [float(x) for x in re.findall(r"([\d.]+)%", cells[test])]
            want = [round(100 * m["fractions"][kind][src], 1) for src in ("datasheet", "measured")]
            assert shown == want, (test, cells[test], m["fractions"])
            seen += 1
    assert seen == 6
    # and the check of a fraction target judged the same number the table shows
    add = next(r for r in doc["results"] if r["nodeid"].endswith("test_add"))["measurements"][0]
    check = add["checks"][0]
    assert check["target"] == "bandwidth_frac"
    assert check["achieved"] == add["fractions"]["bandwidth"]["measured"]
    assert f"{100 * check['achieved']:.1f}% of copy" in cells["test_add"]


def test_explain_reads_the_fraction_the_json_holds(run):
    result, doc = run("--triton-perf-explain")
    for r in doc["results"]:
        for m in r["measurements"]:
            pos = m["explain"]["roofline"]
            kind = "bandwidth" if pos["bound"] == "memory" else "tflops"
            assert pos["fraction"] == m["fractions"][kind][pos["binding"]], m["nodeid"]


def test_the_json_entry_reads_back_into_the_record_exactly(run):
    result, doc = run("--triton-perf-explain")
    assert doc["summary"] == {"fail": 1, "measured": 3, "pass": 2}
    assert doc["geomean_summary"] == {"fail": 1}
    for entry in doc["results"]:
        record = PerfRecord.from_dict(entry)
        assert record.to_dict() == entry
        assert json.loads(json.dumps(record.to_dict())) == entry
    slow = PerfRecord.from_dict(next(r for r in doc["results"] if r["nodeid"].endswith("test_slow")))
    assert slow.verdict is Verdict.FAIL and slow.outcome == "failed"
    assert slow.target == PerfTarget(gbps=2000.0)
    assert slow.device.fingerprint == "fake-record"
    m = slow.measurements[0]
    assert len(m.timings.ms) == 40 and m.timings.gpu_before == {"sm_clock_mhz": 1980}
    assert m.explain.verdict == "fail"
    geo = PerfRecord.from_dict(next(r for r in doc["results"] if r["nodeid"].endswith("test_geo")))
    assert geo.geomean.verdict is Verdict.FAIL and geo.verdict is Verdict.FAIL


@pytest.mark.parametrize("path", sorted((ROOT / "tests" / "data").glob("*perf.json.gz")),
                         ids=lambda p: p.name)
def test_a_gpu_runs_file_reads_back_into_records_exactly(path):
    doc = json.loads(gzip.decompress(path.read_bytes()))
    assert doc["results"]
    for entry in doc["results"]:
        assert PerfRecord.from_dict(entry).to_dict() == entry


def test_a_verdict_is_its_json_string():
    assert Verdict.PASS == "pass" and f"{Verdict.INCONCLUSIVE}" == "inconclusive"
    assert json.dumps({"v": Verdict.FAIL}) == '{"v": "fail"}'
    assert {"invalid": 1}[Verdict.INVALID] == 1
    assert Verdict.worst([Verdict.PASS, Verdict.INCONCLUSIVE, Verdict.FAIL]) is Verdict.FAIL
    assert Verdict.worst([]) is Verdict.MEASURED


@pytest.mark.parametrize("target", [
    PerfTarget(name="matmul", tflops_frac=50.0 / 312.0, dtype="float16", peak="datasheet"),
    PerfTarget(bandwidth_frac=0.8, l2="warm"),
    PerfTarget(speedup=1.05, max_ms=0.25),
])
def test_a_target_reads_back_from_its_description(target):
    assert PerfTarget.from_describe(target.describe()) == target
