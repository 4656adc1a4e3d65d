"""The record's own types (perf/peaks.py, perf/diagnosis.py, perf/rates.py, record.label): a
saved file reads back whatever fields were added since or before it was written, a rate is the
same float wherever it is taken, and a label is written one way."""

import copy
import gzip
import json
import pathlib

import pytest

from pytest_triton.env.device import DeviceInfo
from pytest_triton.perf import rates, verdict
from pytest_triton.perf.diagnosis import Diagnosis
from pytest_triton.perf.peaks import DeviceId, Fractions, Peaks
from pytest_triton.perf.record import Measurement, PerfRecord, label
from pytest_triton.perf.timing import Timings

ROOT = pathlib.Path(__file__).resolve().parents[2]
H100 = json.loads(gzip.decompress((ROOT / "tests" / "data" / "h100-perf.json.gz").read_bytes()))
GPU = DeviceInfo(name="NVIDIA H100 80GB HBM3", sms=132, dram_gbps=3352.0, sku="H100 SXM",
                 tflops={"float16": 989.4}, driver="580.0", fingerprint="f",
                 measured={"dram_gbps": 3001.0, "tflops": {"float16": 735.0}}, use_measured=True)


def _saved() -> dict:
    """A measurement as a GPU run saved it, with a diagnosis."""
    return copy.deepcopy(next(m for r in H100["results"] for m in r["measurements"]
                              if m.get("explain") and m["bytes"]))


def test_a_file_with_fields_this_version_does_not_know_reads_back():
    saved = _saved()
    later = copy.deepcopy(saved)
    later["power_w"] = 612.0  # a field a later version added, at every level
    for part in ("peaks", "device", "explain"):
        later[part]["added_later"] = 1
    later["fractions"]["bandwidth"]["added_later"] = 0.5
    later["explain"]["roofline"]["added_later"] = 2
    later["explain"]["hints"] = [{**h, "added_later": 3} for h in saved["explain"]["hints"]]
    assert Measurement.from_dict(later).to_dict() == saved
    record = {"nodeid": saved["nodeid"], "outcome": "passed", "measurements": [later],
              "target": None, "geomean": None, "added_later": True}
    assert PerfRecord.from_dict(record).measurements[0].to_dict() == saved


@pytest.mark.parametrize("key", sorted(set(_saved()) - {"nodeid", "time_ms"}))
def test_a_file_written_before_a_field_was_added_reads_back_with_its_default(key):
    saved = _saved()
    older = {k: v for k, v in saved.items() if k != key}
    m = Measurement.from_dict(older)
    assert m.nodeid == saved["nodeid"] and m.time.median == saved["median_ms"]
    fresh = Measurement(nodeid="t", name=None, time=m.time, timings=Timings(ms=[])).to_dict()
    if key in fresh and key not in ("samples_ms", "median_ms", "time_ms", "verdict", "nodeid"):
        assert m.to_dict()[key] == fresh[key]  # the default a new measurement has


def test_the_required_fields_are_named_when_missing():
    with pytest.raises(KeyError, match="time_ms"):
        Measurement.from_dict({k: v for k, v in _saved().items() if k != "time_ms"})


def test_peaks_and_fractions_write_the_keys_they_always_did():
    assert Peaks().to_dict() == {} and Fractions().to_dict() == {} and DeviceId().to_dict() == {}
    no_dtype = Peaks.of(GPU, None)
    assert list(no_dtype.to_dict()) == ["dram_gbps", "dram_source", "dram_gbps_datasheet",
                                        "dram_gbps_measured"]
    peaks = Peaks.of(GPU, "float16")
    assert peaks.to_dict()["tflops"] == 735.0 and peaks.to_dict()["tflops_datasheet"] == 989.4
    fr = Fractions.taken(peaks, 1500.0, None)
    assert fr.to_dict() == {"bandwidth": {"datasheet": 1500.0 / 3352.0, "measured": 1500.0 / 3001.0},
                            "tflops": {"datasheet": None, "measured": None}}
    assert Fractions.from_dict(fr.to_dict()) == fr and Peaks.from_dict(peaks.to_dict()) == peaks
    assert DeviceId.from_dict(DeviceId.of(GPU).to_dict()) == DeviceId.of(GPU)


def test_the_run_fraction_is_of_the_kind_of_peak_the_run_took_not_an_equal_number():
    # the measured ceiling equal to the datasheet's: the kind, not the value, picks the fraction
    same = DeviceInfo(name="g", sms=1, dram_gbps=2000.0, tflops={}, sku="G",
                      measured={"dram_gbps": 2000.0}, use_measured=True)
    m = verdict.build("t", None, Timings(ms=[1.0] * 20), bytes=10**9, device=same)
    verdict.evaluate(m, None, same)
    assert m.peaks.dram_source == "G measured copy ceiling"
    assert m.bandwidth_frac == m.fractions.bandwidth.measured == 0.5
    assert m.fraction("bandwidth", "datasheet") == 0.5 and m.fraction("bandwidth", None) is None
    assert m.tflops_frac is None


def test_a_measurement_made_by_hand_may_give_the_json_dicts():
    m = Measurement(nodeid="t", name="a", time=None, timings=Timings(ms=[1.0]),
                    peaks={"dram_gbps_datasheet": 3352.0}, device={"name": "g"},
                    fractions={"bandwidth": {"datasheet": 0.5}}, explain=_saved()["explain"])
    assert m.peaks.of_kind("bandwidth", "datasheet") == 3352.0 and m.device.name == "g"
    assert m.fraction("bandwidth", "datasheet") == 0.5 and m.fraction("tflops", "datasheet") is None
    assert isinstance(m.explain, Diagnosis) and m.explain.to_dict() == _saved()["explain"]


def test_a_rate_is_one_formula():
    assert rates.gbps(2e9, 1.0) == 2000.0 and rates.tflops(3e12, 2.0) == 1500.0
    # the same float as the division written out, so the judge's recomputation matches exactly
    for work, ms in ((805306368, 0.2871), (1e8, 0.5 * 1.003)):
        assert rates.gbps(work, ms) == work / ms / 1e6 and rates.tflops(work, ms) == work / ms / 1e9
    m = verdict.build("t", None, Timings(ms=[0.2871] * 20), bytes=805306368, flops=10**9,
                      device=GPU)
    assert m.gbps == rates.gbps(805306368, m.time.median)
    assert m.tflops == rates.tflops(10**9, m.time.median)


@pytest.mark.parametrize("kwargs, expected", [
    ({}, "tests/t.py::test_add[big]"),
    ({"short": True}, "test_add [big]"),
    ({"spaced": True}, "tests/t.py::test_add [big]"),
    ({"short": True, "spaced": False}, "test_add[big]"),
])
def test_a_label_is_written_one_way(kwargs, expected):
    assert label("tests/t.py::test_add", "big", **kwargs) == expected
    assert label("tests/t.py::test_add", None, **kwargs) == \
        ("test_add" if kwargs.get("short") else "tests/t.py::test_add")
    m = Measurement(nodeid="tests/t.py::test_add", name="big", time=None, timings=Timings(ms=[]))
    assert m.label == label(m.nodeid, m.name)
