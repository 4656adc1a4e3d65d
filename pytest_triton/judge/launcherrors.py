"""A launch that failed leaves an error nobody read: checked after every timed call.

Wafer's write-up of a 104x "speedup": the kernel's launch failed, nothing checked, and the output
buffer held what an earlier run left there. torch.cuda.synchronize() raises an asynchronous
error (a fault in a kernel); an error of a launch itself (an invalid configuration, too many
resources) stays in the CUDA runtime's last-error state until someone asks, and a launcher that
does not ask returns as if it ran. After each timed call this asks (cudaGetLastError, through
the runtime torch loaded) and names the error. Under Triton's interpreter there is no device.
"""

from __future__ import annotations

import ctypes
import sys

_RUNTIME: list = []  # [the loaded libcudart, or None]


def _loaded_runtimes() -> list[str]:
    """The paths of the CUDA runtime libraries this process has loaded (/proc/self/maps): a wheel's
    may carry a name the list below lacks (on the H100's torch 2.11.0+cu130 none of those was
    found, and the check read nothing)."""
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as f:
            return sorted({path for line in f if "/libcudart" in (path := line.split()[-1])})
    except OSError:
        return []


def _cudart():
    if not _RUNTIME:
        lib = None
        for name in ("libcudart.so.13", "libcudart.so.12", "libcudart.so.11.0", "libcudart.so",
                     *_loaded_runtimes()):
            try:
                lib = ctypes.CDLL(name, mode=ctypes.RTLD_NOLOAD | ctypes.RTLD_GLOBAL)
                break
            except (OSError, AttributeError):
                continue
        if lib is not None:
            lib.cudaGetLastError.restype = ctypes.c_int
            lib.cudaGetErrorString.restype = ctypes.c_char_p
            lib.cudaGetErrorString.argtypes = [ctypes.c_int]
        _RUNTIME.append(lib)
    return _RUNTIME[0]


def pending() -> str | None:
    """Synchronise the device, then read (and clear) the runtime's last error; its name, or None.
    A fault in a kernel raises from the synchronize, as everywhere else."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_available() or not torch.cuda.is_initialized():
        return None
    torch.cuda.synchronize()
    lib = _cudart()
    if lib is None:
        return None
    code = lib.cudaGetLastError()
    if code == 0:
        return None
    return f"{lib.cudaGetErrorString(code).decode(errors='replace')} (cudaError {code})"


def check(when: str) -> str | None:
    error = pending()
    if error is None:
        return None
    return (f"silent launch failure: {when} left a CUDA error that no one read: {error}. A launch "
            "that failed leaves its outputs as they were (Wafer's 104x case read a previous "
            "run's result); check each launch, or let the launcher raise.")
