"""What a measurement is judged against: the device it ran on, the peaks of that device (the
datasheet's and the measured ceilings), and the fraction of each that it achieved.

Frozen: perf/verdict.py makes them once per measurement and everything after reads them by
name. to_dict() writes the JSON report's keys and from_dict() reads them back, ignoring keys it
does not know (a file from a later version loads) and giving a field the file lacks its default
(as does a file from an earlier one).
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from ..env.device import DeviceInfo

SOURCES = ("datasheet", "measured")  # the two kinds of peak a fraction is taken of


def known(cls, d: dict) -> dict:
    """The entries of `d` that name a field of dataclass `cls`: what from_dict() reads of a
    file written by a version with more (or fewer) fields than this one."""
    names = {f.name for f in fields(cls)}
    return {k: v for k, v in d.items() if k in names}


@dataclass(frozen=True)
class DeviceId:
    """The device a measurement ran on, as its record and the JSON report name it."""
    name: str | None = None
    sku: str | None = None
    sms: int | None = None
    driver: str | None = None
    fingerprint: str | None = None

    @classmethod
    def of(cls, device: DeviceInfo) -> DeviceId:
        return cls(device.name, device.sku, device.sms, device.driver, device.fingerprint)

    def __bool__(self) -> bool:
        return any(getattr(self, f.name) is not None for f in fields(self))

    def to_dict(self) -> dict:
        """Its five keys; {} for no device (a measurement not yet built on one)."""
        return {f.name: getattr(self, f.name) for f in fields(self)} if self else {}

    @classmethod
    def from_dict(cls, d: dict | None) -> DeviceId:
        return cls(**known(cls, d or {}))


@dataclass(frozen=True)
class Peaks:
    """The peaks one measurement is shown and judged against. dram_gbps and tflops are the run's
    (--triton-perf-peak: what the roofline and the table's first fraction use), the others each
    kind's; a measured one is None where this device has no measured ceiling, and the tflops
    ones are absent where the measurement gave no dtype."""
    dram_gbps: float | None = None
    dram_source: str | None = None  # the run's DRAM peak in words: 'H100 SXM datasheet peak'
    dram_gbps_datasheet: float | None = None
    dram_gbps_measured: float | None = None
    # the bytes moved by the copy dram_gbps_measured is of (copies of several sizes measured:
    # DeviceInfo.peak_gbps); None where it is the device's one ceiling for every size, as every
    # record saved before the sizes were measured has it
    dram_measured_for: float | None = None
    tflops: float | None = None
    tflops_source: str | None = None
    tflops_datasheet: float | None = None
    tflops_measured: float | None = None

    @classmethod
    def of(cls, device: DeviceInfo, dtype: str | None, nbytes: float | None = None) -> Peaks:
        """The peaks of a measurement of `dtype` moving `nbytes` (the measured copy ceiling is
        that of a copy of those bytes: DeviceInfo.peak_gbps)."""
        dram, dram_source = device.peak_gbps(nbytes=nbytes)
        sized = device.measured_copy(nbytes)
        out = dict(dram_gbps=dram, dram_source=dram_source,
                   dram_gbps_datasheet=device.peak_gbps("datasheet")[0],
                   dram_gbps_measured=device.peak_gbps("measured", nbytes)[0],
                   dram_measured_for=sized[1] if sized else None)
        if dtype:
            tf, tf_source = device.peak_tflops(dtype)
            out.update(tflops=tf, tflops_source=tf_source,
                       tflops_datasheet=device.peak_tflops(dtype, "datasheet")[0],
                       tflops_measured=device.peak_tflops(dtype, "measured")[0])
        return cls(**out)

    def one_size_measured(self) -> float | None:
        """The measured bandwidth ceiling where it is the device's one for every size (not a
        copy of this measurement's bytes), else None."""
        return self.dram_gbps_measured if self.dram_measured_for is None else None

    def of_kind(self, kind: str, src: str) -> float | None:
        """The peak of `kind` ("bandwidth" or "tflops") from `src` ("datasheet", "measured")."""
        if kind == "bandwidth":
            return self.dram_gbps_datasheet if src == "datasheet" else self.dram_gbps_measured
        return self.tflops_datasheet if src == "datasheet" else self.tflops_measured

    def to_dict(self) -> dict:
        """The keys each group was given: {} before the measurement is judged, no tflops keys
        without a dtype, no dram_measured_for for a one-size ceiling."""
        out = {}
        for group in (fields(self)[:5], fields(self)[5:]):
            values = {f.name: getattr(self, f.name) for f in group}
            if any(v is not None for v in values.values()):
                out.update(values)
        if out.get("dram_measured_for", 0) is None:  # a one-size ceiling: the keys of old
            del out["dram_measured_for"]
        return out

    @classmethod
    def from_dict(cls, d: dict | None) -> Peaks:
        return cls(**known(cls, d or {}))


@dataclass(frozen=True)
class Pair:
    """One kind's fraction of the datasheet peak and of the measured ceiling (None where there
    is no such peak)."""
    datasheet: float | None = None
    measured: float | None = None


@dataclass(frozen=True)
class Fractions:
    """What was achieved as a fraction of each kind of peak, datasheet and measured: bandwidth
    (of GB/s) and tflops (of TFLOP/s); a pair of Nones where the measurement gave no bytes= or
    flops=, None (and no key in the JSON) before it is judged."""
    bandwidth: Pair | None = None
    tflops: Pair | None = None

    @classmethod
    def taken(cls, peaks: Peaks, gbps: float | None, tflops: float | None) -> Fractions:
        def pair(kind: str, achieved: float | None) -> Pair:
            peak = {src: peaks.of_kind(kind, src) for src in SOURCES}
            return Pair(**{src: achieved / peak[src] if achieved is not None and peak[src]
                           else None for src in SOURCES})
        return cls(pair("bandwidth", gbps), pair("tflops", tflops))

    def of(self, kind: str, src: str | None) -> float | None:
        """The fraction of `kind`'s peak from `src`; None for no such peak (src None)."""
        pair = getattr(self, kind)
        return getattr(pair, src) if pair is not None and src in SOURCES else None

    def to_dict(self) -> dict:
        return {f.name: {src: getattr(getattr(self, f.name), src) for src in SOURCES}
                for f in fields(self) if getattr(self, f.name) is not None}

    @classmethod
    def from_dict(cls, d: dict | None) -> Fractions:
        return cls(**{k: Pair(**known(Pair, v or {})) for k, v in known(cls, d or {}).items()})
