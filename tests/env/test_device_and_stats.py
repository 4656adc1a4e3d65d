"""Peak lookup by SKU, the fallback estimate, and the statistics behind the verdicts."""

from dataclasses import replace

import pytest

from pytest_triton.env.device import (
    DeviceInfo,
    ceiling_kind,
    copy_ceiling,
    estimate_peaks,
    flush_bytes,
    match_sku,
)
from pytest_triton.perf import stats


@pytest.mark.parametrize("name, sms, label, gbps, fp16", [
    ("NVIDIA H100 80GB HBM3", 132, "H100 SXM", 3352, 989.4),
    ("NVIDIA H100 PCIe", 114, "H100 PCIe", 2039, 756),
    ("NVIDIA H100 NVL", 132, "H100 NVL", 3938, 835.5),
    ("NVIDIA H200", 132, "H200 SXM", 4800, 989.4),
    ("NVIDIA A100-SXM4-40GB", 108, "A100 SXM4 40GB", 1555, 312),
    ("NVIDIA A100-SXM4-80GB", 108, "A100 SXM4 80GB", 2039, 312),
    ("NVIDIA A100 80GB PCIe", 108, "A100 PCIe 80GB", 1935, 312),
    ("NVIDIA A100-PCIE-40GB", 108, "A100 PCIe 40GB", 1555, 312),
    ("NVIDIA L4", 58, "L4", 300, 121),
    ("NVIDIA L40S", 142, "L40S", 864, 362.05),
    ("NVIDIA A10", 72, "A10", 600, 125),
    ("NVIDIA GeForce RTX 4090", 128, "RTX 4090", 1008, 165.2),
    ("NVIDIA GeForce RTX 3090", 82, "RTX 3090", 936, 71),
    ("NVIDIA H20", 78, "H20", 4000, 148),
    ("NVIDIA B200", 148, "B200", 8000, 2250),
    ("NVIDIA GB200", 148, "GB200", 8000, 2500),
    ("NVIDIA B300 SXM6 AC", 148, "B300", 8000, 2250),
    ("NVIDIA GeForce RTX 5090", 170, "RTX 5090", 1792, 209.5),
    ("NVIDIA RTX PRO 6000 Blackwell Server Edition", 188, "RTX PRO 6000 Blackwell", 1792, 250),
    # ROCm: torch reports the marketing name and the CU count.
    ("AMD Instinct MI300X", 304, "MI300X", 5300, 1307.4),
    ("AMD Instinct MI325X", 304, "MI325X", 6000, 1307.4),
    ("AMD Instinct MI355X", 256, "MI355X", 8000, 2516.6),
])
def test_sku_table(name, sms, label, gbps, fp16):
    sku = match_sku(name, sms)
    assert sku is not None and sku.label == label
    assert sku.dram_gbps == gbps and sku.tflops["float16"] == fp16


def test_name_and_sm_count_must_both_match():
    assert match_sku("NVIDIA H100 80GB HBM3", 114) is None  # a cut-down part is not an SXM
    assert match_sku("NVIDIA A100X", 108) is None
    assert match_sku("NVIDIA GeForce RTX 5090 D", 170).label == "RTX 5090"
    assert match_sku("NVIDIA GeForce RTX 5090 Laptop GPU", 82) is None  # another chip, same name
    assert match_sku("NVIDIA H200", 114) is None


def test_the_l2_flush_covers_amds_infinity_cache():
    # torch's L2_cache_size on an MI300X counts its L2 (4 MB), not the 256 MB Infinity Cache
    # behind it: a flush of twice the L2 would leave the kernel's data there.
    assert flush_bytes("AMD Instinct MI300X", 304, 4 * 2**20) == 512 * 2**20
    assert flush_bytes("NVIDIA H100 80GB HBM3", 132, 50 * 2**20) == 100 * 2**20
    assert flush_bytes("Some small GPU", 8, 2 * 2**20) == 64 * 2**20


def test_estimate_for_unknown_devices_matches_the_datasheet_of_known_ones():
    # H100 SXM: 2619 MHz HBM3 x 5120 bits, 132 SMs at 1830 MHz.
    dram, tflops = estimate_peaks((9, 0), 132, 1_830_000, 2_619_000, 5120)
    assert dram == pytest.approx(3352, rel=0.001)
    assert tflops["float16"] == pytest.approx(989.4, rel=0.01)
    assert estimate_peaks((7, 0), 80, 1_530_000, 877_000, 4096)[1]["float16"] is None


def test_peaks_measured_or_datasheet():
    d = DeviceInfo(name="X", sms=1, dram_gbps=100.0, tflops={"float16": 10.0, "tf32": 5.0},
                   sku="X", measured={"dram_gbps": 90.0, "tflops": {"float16": 8.0}},
                   use_measured=True)
    assert d.peak_gbps() == (90.0, "X measured copy ceiling")
    assert d.peak_tflops("float16") == (8.0, "X float16 measured cuBLAS ceiling")
    # The run's default falls back to the datasheet where nothing was measured; a target that
    # asks for measured explicitly gets None (and its test an error), never the datasheet.
    assert d.peak_tflops("float32") == (5.0, "X tf32 datasheet peak")  # float32 dots run as tf32
    assert d.peak_tflops("float32", "measured") == (None, "X tf32 measured cuBLAS ceiling (not measured)")
    assert d.peak_gbps("datasheet") == (100.0, "X datasheet peak")
    unmeasured = DeviceInfo(name="X", sms=1, dram_gbps=100.0, tflops={}, sku="X")
    assert unmeasured.peak_gbps("measured")[0] is None and unmeasured.peak_gbps()[0] == 100.0


# Copies measured as an H200 measured them (tensors of 64 MiB, 256 MiB and 1 GiB: bytes moved).
H200_COPIES = {str(128 << 20): 3953.0, str(512 << 20): 4106.0, str(2 << 30): 4228.0}


def test_the_copy_ceiling_of_a_size_is_that_of_a_copy_of_those_bytes():
    # At a measured size: that copy's rate; between two: the time interpolated in bytes.
    assert copy_ceiling(H200_COPIES, 512 << 20) == (4106.0, 512 << 20)
    gbps, size = copy_ceiling(H200_COPIES, 768 << 20)
    t = (512 << 20) / 4106.0 + (256 << 20) * ((2 << 30) / 4228.0 - (512 << 20) / 4106.0) / (1536 << 20)
    assert size == 768 << 20 and gbps == pytest.approx((768 << 20) / t)
    assert 4106.0 < gbps < 4228.0
    # Outside them the nearest measured size stands: never a copy smaller (slower) than measured.
    assert copy_ceiling(H200_COPIES, 1 << 20) == (3953.0, 128 << 20)
    assert copy_ceiling(H200_COPIES, 8 << 30) == (4228.0, 2 << 30)


def test_at_a_measured_size_the_ceiling_is_that_copy_exactly():
    # A rate whose time does not round-trip (bytes / (bytes / GB/s) differs in the last bit),
    # as an H200's 512 MiB copy measured once: the measured size gives back the measured rate,
    # not one recomputed from its time.
    copies = {str(128 << 20): 3953.0, str(512 << 20): 4091.0063006739056, str(2 << 30): 4228.0}
    assert copy_ceiling(copies, 512 << 20) == (4091.0063006739056, 512 << 20)
    odd = {"1000": 2020.2761029576868, "271041746": 2020.2761029576868, "4000000000": 3000.0}
    assert copy_ceiling(odd, 271041746) == (2020.2761029576868, 271041746)


def test_a_measured_bandwidth_ceiling_follows_the_bytes_moved():
    d = DeviceInfo(name="X", sms=1, dram_gbps=4800.0, tflops={}, sku="X", use_measured=True,
                   measured={"dram_gbps": 4228.0, "copy_gbps": H200_COPIES, "tflops": {}})
    assert d.peak_gbps() == (4228.0, "X measured copy ceiling")  # no bytes: the largest copy
    assert d.peak_gbps("measured", 512 << 20) == (4106.0, "X measured copy ceiling for 512 MiB")
    assert d.peak_gbps(nbytes=3 << 30) == (4228.0, "X measured copy ceiling for 2 GiB")
    assert d.peak_gbps("datasheet", 512 << 20) == (4800.0, "X datasheet peak")
    assert ceiling_kind(d.peak_gbps(nbytes=512 << 20)[1]) == "measured"
    assert ceiling_kind("X measured copy ceiling (not measured)") == "datasheet"
    # Ceilings of one size only (a pytest_triton_calibrate hook's, say): that one, at any size.
    flat = replace(d, measured={"dram_gbps": 4228.0, "tflops": {}})
    assert flat.peak_gbps(nbytes=512 << 20) == (4228.0, "X measured copy ceiling")


def test_median_ci_covers_the_median_and_narrows_with_samples():
    few = stats.summarize([1.0, 1.1, 0.9, 1.05, 0.95] * 2)
    many = stats.summarize([1.0, 1.1, 0.9, 1.05, 0.95] * 40)
    assert few.ci_lo <= few.median <= few.ci_hi
    assert (many.ci_hi - many.ci_lo) < (few.ci_hi - few.ci_lo)
    assert few.ci_lo == 0.9 and few.ci_hi == 1.1  # ten samples: the 99% CI spans them all


def test_ci_is_never_narrower_than_the_noise_floor():
    s = stats.summarize([2.0] * 100)
    assert s.ci_lo == pytest.approx(2.0 * (1 - stats.MIN_HALF_WIDTH))
    assert s.ci_hi == pytest.approx(2.0 * (1 + stats.MIN_HALF_WIDTH))
    assert s.noise == 0 and s.rse == 0


def test_geomean_ci():
    a, b = stats.summarize([2.0] * 50), stats.summarize([0.5] * 50)
    g, lo, hi = stats.geomean_ci([a, b])
    assert g == pytest.approx(1.0) and lo < 1.0 < hi


def test_summaries_reject_bad_samples():
    with pytest.raises(ValueError):
        stats.summarize([])
    with pytest.raises(ValueError):
        stats.summarize([1.0, float("nan")])


def test_nvml_readings_and_throttle_reasons(monkeypatch):
    """The NVML reader against a stand-in pynvml (the real one needs a GPU)."""
    import sys
    import types

    from pytest_triton.env import nvml

    fake = types.SimpleNamespace(
        NVML_CLOCK_SM=0, NVML_CLOCK_MEM=1, NVML_TEMPERATURE_GPU=0,
        nvmlInit=lambda: None,
        nvmlDeviceGetHandleByUUID=lambda uuid: "h",
        nvmlDeviceGetClockInfo=lambda h, which: (1980, 2619)[which],
        nvmlDeviceGetMaxClockInfo=lambda h, which: 1980,
        nvmlDeviceGetTemperature=lambda h, which: 61,
        nvmlDeviceGetPowerUsage=lambda h: 650_000,
        nvmlDeviceGetCurrentClocksEventReasons=lambda h: 0x4 | 0x40,  # power cap + HW thermal
        nvmlDeviceGetApplicationsClock=lambda h, which: (1980, 2619)[which],
        nvmlDeviceGetPowerManagementLimit=lambda h: 700_000,
        nvmlDeviceGetPersistenceMode=lambda h: 1,
        nvmlDeviceGetComputeMode=lambda h: 0,
    )  # no nvmlDeviceGetEccMode: a reading NVML cannot give is left out, not an error
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    monkeypatch.setattr(nvml, "_NVML", {})
    monkeypatch.setattr(nvml, "_find_handle", lambda nv, dev: "h")
    state = nvml.gpu_state("cuda:0")
    assert state == {"sm_clock_mhz": 1980, "mem_clock_mhz": 2619, "max_sm_clock_mhz": 1980,
                     "temperature_c": 61, "power_w": 650.0,
                     "clock_reasons": ["hw_thermal_slowdown", "sw_power_cap"], "throttled": True}
    assert nvml.gpu_settings("cuda:0") == {
        "applications_sm_clock_mhz": 1980, "applications_mem_clock_mhz": 2619,
        "power_limit_w": 700.0, "persistence_mode": 1, "compute_mode": 0}


def test_a_measurement_records_the_size_of_the_copy_its_ceiling_is_of():
    from pytest_triton.env.device import unsized
    from pytest_triton.perf.peaks import Peaks

    d = DeviceInfo(name="X", sms=1, dram_gbps=4800.0, tflops={}, sku="X", use_measured=True,
                   measured={"dram_gbps": 4228.0, "copy_gbps": H200_COPIES, "tflops": {}})
    sized = Peaks.of(d, None, 768 << 20)
    assert sized.dram_measured_for == 768 << 20 and sized.one_size_measured() is None
    assert Peaks.from_dict(sized.to_dict()) == sized
    assert unsized(sized.dram_source) == "X measured copy ceiling"
    one = Peaks.of(replace(d, measured={"dram_gbps": 4228.0, "tflops": {}}), None, 768 << 20)
    assert "dram_measured_for" not in one.to_dict() and one.one_size_measured() == 4228.0
    # the size in the words: whole MiB below 1 GiB (not 1e+03), GiB above
    assert [d.peak_gbps(nbytes=n)[1].rsplit(" for ", 1)[1]
            for n in (1000 << 20, 512 << 20, 3 << 29, 8 << 30)] == \
        ["1000 MiB", "512 MiB", "1.5 GiB", "2 GiB"]
