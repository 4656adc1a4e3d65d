"""A launch that failed leaves an error nobody read: checked after every timed call.

Wafer's write-up of a 104x "speedup": the kernel's launch failed, nothing checked, and the output
buffer held what an earlier run left there. torch.cuda.synchronize() raises an asynchronous
error (a fault in a kernel); an error of a launch itself (an invalid configuration, too many
resources) stays in the CUDA runtime's last-error state until someone asks, and a launcher that
does not ask returns as if it ran. After each timed call this asks (cudaGetLastError) every CUDA
runtime the process has loaded, and names the error: each runtime keeps its own last error, and
a CUDA extension may bring one of its own beside torch's. A runtime linked statically into a
library cannot be asked. Under Triton's interpreter there is no device.
"""

from __future__ import annotations

import ctypes
import os
import sys

from .checks import Call

SONAMES = ("libcudart.so.13", "libcudart.so.12", "libcudart.so.11.0", "libcudart.so")
_OPENED: dict[str, ctypes.CDLL | None] = {}  # a soname or path -> its runtime (None: not loaded)


def _loaded_runtimes() -> list[str]:
    """The paths of the CUDA runtime libraries this process has loaded (/proc/self/maps): a wheel's
    may carry a name SONAMES lacks."""
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as f:
            return sorted({path for line in f if "/libcudart" in (path := line.split()[-1])})
    except OSError:
        return []


def _open(name: str) -> ctypes.CDLL | None:
    """The runtime `name` names where this process has loaded it (never loads one): None else,
    once per name (a runtime loaded later, by an extension, is found by its path in the maps)."""
    if name not in _OPENED:
        try:
            # os's flag: ctypes has none, and `ctypes.RTLD_NOLOAD` raised AttributeError, which
            # this caught as "not loaded" for every name, so the check never read any runtime
            lib = ctypes.CDLL(name, mode=os.RTLD_NOLOAD | ctypes.RTLD_GLOBAL)
            lib.cudaGetLastError.restype = ctypes.c_int
            lib.cudaGetErrorString.restype = ctypes.c_char_p
            lib.cudaGetErrorString.argtypes = [ctypes.c_int]
        except (OSError, AttributeError):
            lib = None
        _OPENED[name] = lib
    return _OPENED[name]


def runtimes() -> list[ctypes.CDLL]:
    """Every CUDA runtime this process has loaded, each once (a soname and a path may name one)."""
    found, seen = [], set()
    for name in (*SONAMES, *_loaded_runtimes()):
        lib = _open(name)
        if lib is not None and lib._handle not in seen:
            seen.add(lib._handle)
            found.append(lib)
    return found


def read(libs: list) -> str | None:
    """Read (and clear) each runtime's last error; the first one's name, or None."""
    first = None
    for lib in libs:
        code = lib.cudaGetLastError()
        if code != 0 and first is None:
            first = f"{lib.cudaGetErrorString(code).decode(errors='replace')} (cudaError {code})"
    return first


def pending() -> str | None:
    """Synchronise the device, then read (and clear) the runtimes' last errors; the first one's
    name, or None. A fault in a kernel raises from the synchronize, as everywhere else."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_available() or not torch.cuda.is_initialized():
        return None
    torch.cuda.synchronize()
    return read(runtimes())


def check(call: Call) -> str | None:
    """The watched call's check (checks.py): a CUDA error it left unread."""
    return unread(call.when)


def unread(when: str) -> str | None:
    """The failure message when a CUDA error is pending (read, and so cleared); else None."""
    error = pending()
    if error is None:
        return None
    return (f"silent launch failure: {when} left a CUDA error that no one read: {error}. A launch "
            "that failed leaves its outputs as they were (Wafer's 104x case read a previous "
            "run's result); check each launch, or let the launcher raise.")
