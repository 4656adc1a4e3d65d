"""The device: its fingerprint, its datasheet peaks, measured ceilings, and its clocks (NVML)."""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import asdict, dataclass, field, replace

from . import dtypes
from .nvml import nvml_driver_version


@dataclass(frozen=True)
class Sku:
    label: str
    pattern: str  # regex searched in the device name (torch.cuda.get_device_properties().name)
    sms: int | None  # SMs (CUs on AMD) the name must come with; None: the name alone decides
    dram_gbps: float
    tflops: dict  # dense tensor-core TFLOP/s by dtypes.PEAK_KEYS (fp32 accumulation); None: no such unit
    cache_mb: int | None = None  # a last-level cache beyond L2 (AMD's Infinity Cache) to flush


# Datasheet numbers, dense (the vendor's sparse figures halved), tensor cores accumulating in FP32
# (GeForce and RTX PRO Blackwell parts run FP16/BF16 at half rate with FP32 accumulation; that is
# the rate given). Order matters: the first match wins, so longer names come before their
# prefixes. Each row says where its numbers come from.
SKUS: tuple[Sku, ...] = (
    # NVIDIA H100 datasheet (SXM5, PCIe, NVL columns).
    Sku("H100 NVL", r"H100 NVL", 132, 3938.0,
        {"tf32": 417.5, "float16": 835.5, "bfloat16": 835.5, "float8": 1670.5}),
    Sku("H100 PCIe", r"H100 PCIe", 114, 2039.0,
        {"tf32": 378.0, "float16": 756.0, "bfloat16": 756.0, "float8": 1513.0}),
    Sku("H100 SXM", r"H100( 80GB HBM3| SXM)", 132, 3352.0,
        {"tf32": 494.7, "float16": 989.4, "bfloat16": 989.4, "float8": 1978.9}),
    # NVIDIA H200 datasheet (SXM, NVL): H100's compute, 4.8 TB/s of HBM3e.
    Sku("H200 NVL", r"H200 NVL", 132, 4800.0,
        {"tf32": 417.5, "float16": 835.5, "bfloat16": 835.5, "float8": 1670.5}),
    Sku("H200 SXM", r"H200", 132, 4800.0,
        {"tf32": 494.7, "float16": 989.4, "bfloat16": 989.4, "float8": 1978.9}),
    # NVIDIA H20 (export part of the Hopper die, 78 SMs): 4.0 TB/s, FP16/BF16 148 TFLOPS dense,
    # TF32 74, FP8 296 (NVIDIA's H20 product brief).
    Sku("H20", r"\bH20\b", None, 4000.0,
        {"tf32": 74.0, "float16": 148.0, "bfloat16": 148.0, "float8": 296.0}),
    # NVIDIA GB200 NVL72 datasheet, per GPU (1200 W): 8 TB/s; FP16/BF16 2.5 PFLOPS dense (5
    # sparse), TF32 1.25, FP8 5.
    Sku("GB200", r"GB200", None, 8000.0,
        {"tf32": 1250.0, "float16": 2500.0, "bfloat16": 2500.0, "float8": 5000.0}),
    # NVIDIA HGX B300 datasheet, per GPU (Blackwell Ultra, 288 GB): 8 TB/s; FP16/BF16 2.25
    # PFLOPS dense, TF32 1.1, FP8 4.5 (its added throughput is FP4, which no target here uses).
    Sku("B300", r"B300", None, 8000.0,
        {"tf32": 1100.0, "float16": 2250.0, "bfloat16": 2250.0, "float8": 4500.0}),
    # NVIDIA HGX B200 datasheet, per GPU (1000 W, 148 SMs): 8 TB/s; FP16/BF16 2.25 PFLOPS
    # dense (4.5 sparse), TF32 1.1, FP8 4.5.
    Sku("B200", r"B200", None, 8000.0,
        {"tf32": 1100.0, "float16": 2250.0, "bfloat16": 2250.0, "float8": 4500.0}),
    # NVIDIA A100 datasheet (SXM4 and PCIe, 40 and 80 GB).
    Sku("A100 SXM4 80GB", r"A100-SXM4?-80GB", 108, 2039.0,
        {"tf32": 156.0, "float16": 312.0, "bfloat16": 312.0, "float8": None}),
    Sku("A100 SXM4 40GB", r"A100-SXM4?-40GB", 108, 1555.0,
        {"tf32": 156.0, "float16": 312.0, "bfloat16": 312.0, "float8": None}),
    Sku("A100 PCIe 80GB", r"A100 80GB PCIe|A100-PCIE-80GB", 108, 1935.0,
        {"tf32": 156.0, "float16": 312.0, "bfloat16": 312.0, "float8": None}),
    Sku("A100 PCIe 40GB", r"A100-PCIE-40GB|A100 PCIe", 108, 1555.0,
        {"tf32": 156.0, "float16": 312.0, "bfloat16": 312.0, "float8": None}),
    # NVIDIA L40S, L4 and A10 datasheets.
    Sku("L40S", r"L40S", 142, 864.0,
        {"tf32": 183.0, "float16": 362.05, "bfloat16": 362.05, "float8": 733.0}),
    Sku("L4", r"\bL4\b", 58, 300.0,
        {"tf32": 60.0, "float16": 121.0, "bfloat16": 121.0, "float8": 242.5}),
    Sku("A10", r"\bA10\b", 72, 600.0,
        {"tf32": 62.5, "float16": 125.0, "bfloat16": 125.0, "float8": None}),
    # NVIDIA RTX PRO 6000 Blackwell (188 SMs, 96 GB GDDR7 at 1792 GB/s): its datasheet gives 4000
    # AI TOPS (FP4, sparse); FP8 dense is a quarter of that, FP16 with FP32 accumulation a
    # quarter of FP8 dense (as on every RTX Blackwell part), TF32 half of FP16.
    Sku("RTX PRO 6000 Blackwell", r"RTX PRO 6000 Blackwell", None, 1792.0,
        {"tf32": 125.0, "float16": 250.0, "bfloat16": 250.0, "float8": 1000.0}),
    # NVIDIA RTX Blackwell GPU architecture whitepaper, GeForce RTX 5090 (170 SMs, 1792 GB/s):
    # FP16 tensor with FP32 accumulation 209.5 TFLOPS dense, TF32 104.8, FP8 419 (FP32 acc).
    Sku("RTX 5090", r"RTX 5090", 170, 1792.0,
        {"tf32": 104.8, "float16": 209.5, "bfloat16": 209.5, "float8": 419.0}),
    # NVIDIA Ada and Ampere GeForce whitepapers.
    Sku("RTX 4090", r"RTX 4090", 128, 1008.0,
        {"tf32": 82.6, "float16": 165.2, "bfloat16": 165.2, "float8": 330.3}),
    Sku("RTX 3090", r"RTX 3090\b", 82, 936.0,
        {"tf32": 35.6, "float16": 71.0, "bfloat16": 71.0, "float8": None}),
    # AMD Instinct datasheets; "SMs" are compute units, as torch reports them on ROCm. Each
    # has a 256 MB Infinity Cache behind its L2, which the L2 flush must cover too.
    # MI355X (CDNA 4, 256 CUs): 8 TB/s HBM3E; FP16/BF16 2.5 PFLOPS dense, FP8 5.0; its
    # datasheet lists no TF32 matrix rate.
    Sku("MI355X", r"MI355X", None, 8000.0,
        {"tf32": None, "float16": 2516.6, "bfloat16": 2516.6, "float8": 5033.2}, cache_mb=256),
    # MI325X (CDNA 3, 304 CUs): 6 TB/s HBM3E, MI300X's compute.
    Sku("MI325X", r"MI325X", None, 6000.0,
        {"tf32": 653.7, "float16": 1307.4, "bfloat16": 1307.4, "float8": 2614.9}, cache_mb=256),
    # MI300X (CDNA 3, 304 CUs): 5.3 TB/s HBM3; FP16/BF16 1307.4 TFLOPS dense, TF32 653.7, FP8
    # 2614.9.
    Sku("MI300X", r"MI300X", None, 5300.0,
        {"tf32": 653.7, "float16": 1307.4, "bfloat16": 1307.4, "float8": 2614.9}, cache_mb=256),
)

# Dense FP16 tensor FLOP per SM per clock by compute capability (FP32 accumulation), for devices
# not in SKUS: A100 (8.0) 312e12 / (108 SMs * 1.41 GHz) = 2048; H100 (9.0) 989e12 / (132 * 1.83
# GHz) = 4096; Ada/Ampere workstation parts (8.6, 8.9) ~1024. TF32 is half, FP8 double (sm 8.9+).
_FP16_FLOP_PER_SM_CLK = {(8, 0): 2048, (8, 6): 1024, (8, 7): 1024, (8, 9): 1024, (9, 0): 4096,
                         (10, 0): 8192, (12, 0): 1024}


# How peak_gbps and peak_tflops name a measured ceiling (--triton-perf-calibrate); every other
# peak they return is the datasheet's (or an estimate standing for it).
MEASURED_COPY = "measured copy ceiling"
MEASURED_CUBLAS = "measured cuBLAS ceiling"
_SIZED_COPY = f"{MEASURED_COPY} for "  # the copy of a measurement's bytes: "... for 512 MiB"


def ceiling_kind(words: str | None) -> str:
    """Which kind of peak the words peak_gbps or peak_tflops returned with it name: "measured"
    or "datasheet". The words are what a saved record keeps of which peak it was judged on."""
    words = words or ""
    measured = words.endswith((MEASURED_COPY, MEASURED_CUBLAS)) or _SIZED_COPY in words
    return "measured" if measured else "datasheet"


def _size(nbytes: float) -> str:
    mib = nbytes / 2**20
    if mib >= 1024:
        return f"{mib / 1024:.4g} GiB"
    return f"{mib:.0f} MiB" if mib >= 10 else f"{mib:.3g} MiB"


def unsized(words: str | None) -> str | None:
    """The words peak_gbps names a peak with, without the copy's size ("... measured copy
    ceiling for 512 MiB" -> "... measured copy ceiling"): the device's kind of peak."""
    return words.split(_SIZED_COPY)[0] + MEASURED_COPY if words and _SIZED_COPY in words \
        else words


def copy_ceiling(copies: dict, nbytes: float) -> tuple[float, float]:
    """(GB/s, bytes) a device-to-device copy moving `nbytes` reaches, from the copies measured
    at a few sizes (`copies`: {bytes moved: GB/s}, calibrate.measure_ceilings).

    A copy's time is a fixed part (its ramp up and down, the timing's own) plus its bytes over
    the bandwidth, so a smaller copy reaches less of the largest one's rate; how much less
    grows with the bandwidth (on an H200 a 512 MiB copy reaches about 97% of a 2 GiB one's).
    Between two measured sizes the time is interpolated linearly in bytes; outside them the
    nearest measured size stands, so a kernel is never judged against a copy smaller, and so
    slower, than one that was measured. Returns the size that stood in as the second item."""
    points = sorted((float(b), float(g)) for b, g in copies.items())
    if nbytes <= points[0][0]:
        return points[0][1], points[0][0]
    for (b0, g0), (b1, g1) in zip(points, points[1:]):
        if nbytes == b0:  # a measured size: its rate as measured, not recomputed from a time
            return g0, b0
        if nbytes < b1:
            t0, t1 = b0 / g0, b1 / g1
            return nbytes / (t0 + (nbytes - b0) * (t1 - t0) / (b1 - b0)), nbytes
    return points[-1][1], points[-1][0]  # at the largest measured size or above it


@dataclass(frozen=True)
class DeviceInfo:
    """What a perf verdict needs to know about the GPU. Construct one in a
    pytest_triton_device_info hook to run the perf logic against a device of your choosing."""
    name: str
    sms: int
    dram_gbps: float  # datasheet (or estimated) peak DRAM bandwidth, GB/s
    tflops: dict  # datasheet dense tensor peaks by dtypes.PEAK_KEYS, TFLOP/s
    sku: str | None = None  # the SKUS label matched, None when estimated
    l2_bytes: int = 50 * 2**20
    cc: tuple[int, int] = (9, 0)
    driver: str = "unknown"
    fingerprint: str = ""
    # {"dram_gbps": ..., "copy_gbps": {bytes: GB/s}, "tflops": {...}} (calibrate.py)
    measured: dict | None = None
    use_measured: bool = False  # take fractions against `measured`
    notes: tuple[str, ...] = field(default_factory=tuple)
    # Per-SM limits that bound occupancy (--triton-perf-explain); None where unknown.
    regs_per_sm: int | None = None  # 32-bit registers per SM
    smem_per_sm: int | None = None  # shared memory per SM, bytes
    smem_per_block: int | None = None  # the most one block may opt in to, bytes
    max_threads_per_sm: int | None = None
    max_blocks_per_sm: int | None = None
    warp_size: int = 32

    @property
    def label(self) -> str:
        return self.sku or self.name

    def _kind(self, peak: str | None) -> str:
        if peak is None:
            return "measured" if self.use_measured and self.measured else "datasheet"
        return peak

    def peak_gbps(self, peak: str | None = None,
                  nbytes: float | None = None) -> tuple[float | None, str]:
        """The DRAM bandwidth fractions are taken against, and what it is. peak: "datasheet",
        "measured" (None when this device has no measured ceilings), or None for the run's
        setting (--triton-perf-peak, which falls back to the datasheet where nothing was
        measured). nbytes: the bytes a measurement moves; the measured ceiling is then that of
        a copy of those bytes (copy_ceiling), where copies of several sizes were measured."""
        if self._kind(peak) == "measured":
            if self.measured and self.measured.get("dram_gbps"):
                sized = self.measured_copy(nbytes)
                if sized:
                    return sized[0], f"{self.label} {_SIZED_COPY}{_size(sized[1])}"
                return self.measured["dram_gbps"], f"{self.label} {MEASURED_COPY}"
            if peak == "measured":
                return None, f"{self.label} {MEASURED_COPY} (not measured)"
        return self.dram_gbps, f"{self.label} {'datasheet' if self.sku else 'estimated'} peak"

    def measured_copy(self, nbytes: float | None) -> tuple[float, float] | None:
        """(GB/s, bytes) of the measured copy a measurement moving `nbytes` is judged against
        (copy_ceiling), or None where there is none of its own size: no bytes, no measured
        ceiling, or one ceiling for every size."""
        copies = (self.measured or {}).get("copy_gbps")
        if not (nbytes and copies and self.measured.get("dram_gbps")):
            return None
        return copy_ceiling(copies, nbytes)

    def peak_tflops(self, dtype: str, peak: str | None = None) -> tuple[float | None, str]:
        """The dense tensor-core rate of `dtype` fractions are taken against, and what it is."""
        key = dtypes.peak_key(dtype)
        if self._kind(peak) == "measured":
            got = (self.measured or {}).get("tflops", {}).get(key)
            if got:
                return got, f"{self.label} {key} {MEASURED_CUBLAS}"
            if peak == "measured":
                return None, f"{self.label} {key} {MEASURED_CUBLAS} (not measured)"
        kind = "datasheet" if self.sku else "estimated"
        return self.tflops.get(key), f"{self.label} {key} {kind} peak"

    def to_dict(self) -> dict:
        return asdict(self)


def match_sku(name: str, sms: int) -> Sku | None:
    for sku in SKUS:
        if re.search(sku.pattern, name, re.IGNORECASE) and sku.sms in (None, sms):
            return sku
    return None


def flush_bytes(name: str, sms: int, l2_bytes: int) -> int:
    """Bytes to overwrite between timed samples so that nothing a kernel read stays cached:
    twice the L2, or twice a larger last-level cache the device has (AMD's Infinity Cache,
    which torch's L2_cache_size does not count), at least 64 MB."""
    sku = match_sku(name, sms)
    cache = max(l2_bytes, (sku.cache_mb or 0) * 2**20 if sku else 0)
    return max(2 * cache, 64 * 2**20)


def estimate_peaks(cc: tuple[int, int], sms: int, sm_clock_khz: int, mem_clock_khz: int,
                   bus_width_bits: int) -> tuple[float, dict]:
    """Peaks for a device not in SKUS: DRAM from memory clock x bus width (double data rate),
    tensor rate from SM count x clock x the architecture's FLOP per SM per clock."""
    dram = 2 * mem_clock_khz * 1e3 * bus_width_bits / 8 / 1e9
    per_clk = _FP16_FLOP_PER_SM_CLK.get(tuple(cc))
    if per_clk is None:
        return dram, {k: None for k in dtypes.PEAK_KEYS}
    fp16 = sms * sm_clock_khz * 1e3 * per_clk / 1e12
    return dram, {"tf32": fp16 / 2, "float16": fp16, "bfloat16": fp16,
                  "float8": fp16 * 2 if tuple(cc) >= (8, 9) else None}


def fingerprint(fields_: dict) -> str:
    return hashlib.sha1(json.dumps(fields_, sort_keys=True).encode()).hexdigest()[:16]


# Resident blocks per SM by compute capability: CUDA C++ Programming Guide, "Technical
# Specifications per Compute Capability" (torch does not expose it).
MAX_BLOCKS_PER_SM = {(7, 0): 32, (7, 5): 16, (8, 0): 32, (8, 6): 16, (8, 7): 16, (8, 9): 24,
                     (9, 0): 32, (10, 0): 32, (10, 3): 32, (12, 0): 32}


@dataclass(frozen=True)
class ArchLimits:
    """The per-SM limits of a GPU architecture, for a kernel compiled for it on a machine that
    does not have it: the attributes occupancy() reads from a DeviceInfo, under the same names."""
    arch: str  # "sm_90"
    cc: tuple[int, int]
    regs_per_sm: int  # 32-bit registers per SM
    max_regs_per_thread: int
    smem_per_sm: int  # shared memory per SM, bytes
    smem_per_block: int  # the most one block may opt in to, bytes
    max_threads_per_sm: int
    max_blocks_per_sm: int
    warp_size: int = 32
    sms: int | None = None  # an architecture has no SM count: occupancy without waves

    @property
    def max_warps_per_sm(self) -> int:
        return self.max_threads_per_sm // self.warp_size


_KB = 1024
# CUDA C++ Programming Guide, "Technical Specifications per Compute Capability" (compute
# capabilities 8.0 to 12.0):
# - 64 K 32-bit registers per SM, at most 255 per thread, on all of them;
# - resident threads per SM: 2048 on 8.0, 9.0 and 10.0; 1536 on 8.6, 8.9 and 12.0;
# - resident blocks per SM: as MAX_BLOCKS_PER_SM;
# - shared memory per SM / the most one block may opt in to: 164 / 163 KB (8.0), 100 / 99 KB
#   (8.6, 8.9), 228 / 227 KB (9.0, 10.0), 128 / 99 KB (12.0).
# torch.cuda.get_device_properties() reports the same on an A100 and an H100
# (shared_memory_per_multiprocessor, shared_memory_per_block_optin: what sm_limits() reads);
# bench/resources_check.py compares the sm_90 row with the H100 it runs on.
ARCH_LIMITS: dict[str, ArchLimits] = {
    a.arch: a for a in (
        ArchLimits("sm_80", (8, 0), 65536, 255, 164 * _KB, 163 * _KB, 2048, 32),
        ArchLimits("sm_86", (8, 6), 65536, 255, 100 * _KB, 99 * _KB, 1536, 16),
        ArchLimits("sm_89", (8, 9), 65536, 255, 100 * _KB, 99 * _KB, 1536, 24),
        ArchLimits("sm_90", (9, 0), 65536, 255, 228 * _KB, 227 * _KB, 2048, 32),
        ArchLimits("sm_100", (10, 0), 65536, 255, 228 * _KB, 227 * _KB, 2048, 32),
        ArchLimits("sm_120", (12, 0), 65536, 255, 128 * _KB, 99 * _KB, 1536, 32),
    )
}


class UnknownArch(ValueError):
    """An architecture name that is not in ARCH_LIMITS."""


def arch_limits(arch: str) -> ArchLimits:
    """The limits of `arch` ("sm_90"; "sm_90a" reads as "sm_90"); UnknownArch names the known."""
    name = re.sub(r"^(sm_\d+)[af]$", r"\1", str(arch).strip().lower())
    if name not in ARCH_LIMITS:
        raise UnknownArch(f"unknown GPU architecture {arch!r}: expected one of "
                          f"{', '.join(ARCH_LIMITS)}")
    return ARCH_LIMITS[name]


def arch_of(cc: tuple[int, int]) -> str:
    """The architecture name of a compute capability: (9, 0) -> "sm_90"."""
    return f"sm_{cc[0]}{cc[1]}"


def sm_limits(props, cc: tuple[int, int]) -> dict:
    """The per-SM limits of torch.cuda.get_device_properties(), as DeviceInfo fields."""
    def get(name):
        value = getattr(props, name, None)
        return int(value) if value else None

    return {"regs_per_sm": get("regs_per_multiprocessor"),
            "smem_per_sm": get("shared_memory_per_multiprocessor"),
            "smem_per_block": get("shared_memory_per_block_optin"),
            "max_threads_per_sm": get("max_threads_per_multi_processor"),
            "max_blocks_per_sm": MAX_BLOCKS_PER_SM.get(tuple(cc)),
            "warp_size": get("warp_size") or 32}


def cuda_device_info(device) -> DeviceInfo:
    """DeviceInfo of a real CUDA device (initialises CUDA in this process)."""
    import torch
    import triton

    props = torch.cuda.get_device_properties(device)
    index = torch.device(device).index or 0
    cc = (props.major, props.minor)
    name, sms = props.name, props.multi_processor_count
    driver = nvml_driver_version() or "unknown"
    notes = []
    sku = match_sku(name, sms)
    if sku is not None:
        dram, tflops = sku.dram_gbps, dict(sku.tflops)
    else:
        dp = triton.runtime.driver.active.utils.get_device_properties(index)
        dram, tflops = estimate_peaks(cc, sms, dp.get("sm_clock_rate", 0),
                                      dp.get("mem_clock_rate", 0), dp.get("mem_bus_width", 0))
        notes.append(f"{name} ({sms} SMs) is not in the peak table: peaks estimated from clocks "
                     "and bus width; run --triton-perf-calibrate for measured ones")
    uuid = str(getattr(props, "uuid", ""))
    fp = fingerprint({"name": name, "sms": sms, "cc": cc, "mem": props.total_memory,
                      "uuid": uuid, "driver": driver, "cuda": torch.version.cuda})
    return DeviceInfo(name=name, sms=sms, dram_gbps=dram, tflops=tflops,
                      sku=sku.label if sku else None, l2_bytes=props.L2_cache_size, cc=cc,
                      driver=driver, fingerprint=fp, notes=tuple(notes), **sm_limits(props, cc))


def with_calibration(info: DeviceInfo, measured: dict | None, use_measured: bool) -> DeviceInfo:
    return replace(info, measured=measured, use_measured=use_measured)
