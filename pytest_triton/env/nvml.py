"""NVML readings of a GPU: clocks, temperature, power, throttling and the settings a benchmark must
never change. Read only: nothing here sets anything. Without nvidia-ml-py every reading is {}."""

from __future__ import annotations

_THROTTLE_BITS = {  # nvmlClocksEventReason* values
    0x1: "gpu_idle", 0x2: "applications_clocks_setting", 0x4: "sw_power_cap",
    0x8: "hw_slowdown", 0x10: "sync_boost", 0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown", 0x80: "hw_power_brake_slowdown", 0x100: "display_clock_setting",
}
# Reasons that mean the samples ran slower than the card's normal boost behaviour.
THROTTLING = {"hw_slowdown", "sw_thermal_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown"}


_NVML: dict = {}  # the pynvml module (or None) and a handle per device, found once per process


def _nvml():
    if "module" not in _NVML:
        try:
            import pynvml

            pynvml.nvmlInit()
            _NVML["module"] = pynvml
        except Exception:
            _NVML["module"] = None
    return _NVML["module"]


def nvml_driver_version() -> str | None:
    nv = _nvml()
    if nv is None:
        return None
    try:
        v = nv.nvmlSystemGetDriverVersion()
        return v.decode() if isinstance(v, bytes) else v
    except Exception:
        return None


def _find_handle(nv, device):
    import torch

    props = torch.cuda.get_device_properties(device)
    uuid = getattr(props, "uuid", None)
    if uuid is not None:
        try:
            return nv.nvmlDeviceGetHandleByUUID(f"GPU-{uuid}")
        except Exception:
            pass
    try:
        bus = f"{props.pci_domain_id:08x}:{props.pci_bus_id:02x}:{props.pci_device_id:02x}.0"
        return nv.nvmlDeviceGetHandleByPciBusId(bus)
    except Exception:
        return None


def _read(device, readings) -> dict:
    """{key: value} for each (key, call(nv, handle)) that NVML answers; {} without NVML."""
    nv = _nvml()
    if nv is None:
        return {}
    key = str(device)
    if key not in _NVML:
        _NVML[key] = _find_handle(nv, device)
    h = _NVML[key]
    if h is None:
        return {}
    out: dict = {}
    for name, call in readings:
        try:
            out[name] = call(nv, h)
        except Exception:
            pass
    return out


def _clock_reasons(nv, h) -> list[str]:
    fn = getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None) or \
        nv.nvmlDeviceGetCurrentClocksThrottleReasons
    bits = fn(h)
    return sorted(n for b, n in _THROTTLE_BITS.items() if bits & b)


_STATE = (
    ("sm_clock_mhz", lambda nv, h: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM)),
    ("mem_clock_mhz", lambda nv, h: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_MEM)),
    ("max_sm_clock_mhz", lambda nv, h: nv.nvmlDeviceGetMaxClockInfo(h, nv.NVML_CLOCK_SM)),
    ("temperature_c", lambda nv, h: nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU)),
    ("power_w", lambda nv, h: nv.nvmlDeviceGetPowerUsage(h) / 1000.0),
    ("clock_reasons", _clock_reasons),
)

_SETTINGS = (
    ("applications_sm_clock_mhz", lambda nv, h: nv.nvmlDeviceGetApplicationsClock(h, nv.NVML_CLOCK_SM)),
    ("applications_mem_clock_mhz", lambda nv, h: nv.nvmlDeviceGetApplicationsClock(h, nv.NVML_CLOCK_MEM)),
    ("power_limit_w", lambda nv, h: nv.nvmlDeviceGetPowerManagementLimit(h) / 1000.0),
    ("persistence_mode", lambda nv, h: nv.nvmlDeviceGetPersistenceMode(h)),
    ("compute_mode", lambda nv, h: nv.nvmlDeviceGetComputeMode(h)),
    ("ecc_mode", lambda nv, h: nv.nvmlDeviceGetEccMode(h)[0]),
)


def gpu_state(device) -> dict:
    """SM/memory clocks, temperature, power and active throttle reasons; {} without NVML."""
    out = _read(device, _STATE)
    if "clock_reasons" in out:
        out["throttled"] = bool(THROTTLING & set(out["clock_reasons"]))
    return out


def gpu_settings(device) -> dict:
    """The settings a benchmark must never change: application clocks, power limit, modes."""
    return _read(device, _SETTINGS)


def processes_memory(device) -> dict[int, int] | None:
    """{pid: bytes of GPU memory it holds} of the processes using `device` (pids as NVML sees them:
    a container's own pids may differ); None without NVML."""
    out = _read(device, (("procs", lambda nv, h: nv.nvmlDeviceGetComputeRunningProcesses(h)),))
    if "procs" not in out:
        return None
    return {p.pid: p.usedGpuMemory for p in out["procs"] if isinstance(p.usedGpuMemory, int)}
