"""The ptxas Triton compiles with for an architecture, whether it knows that architecture, and
what a cubin it wrote uses (cuobjdump --dump-resource-usage: REG, STACK, SHARED)."""

from __future__ import annotations

import contextlib
import functools
import os
import re
import subprocess
import tempfile

from .device import arch_limits


def capability(arch: str) -> int:
    """90 for "sm_90" (UnknownArch for an architecture not in the limits table)."""
    cc = arch_limits(arch).cc
    return cc[0] * 10 + cc[1]


def for_arch(cc: int):
    """Triton's NvidiaTool (path, version) of the ptxas it compiles compute capability `cc` with:
    its wheel's, or TRITON_PTXAS_PATH / TRITON_PTXAS_BLACKWELL_PATH."""
    from triton.backends.nvidia.compiler import get_ptxas  # import time: triton

    return get_ptxas(cc)


@functools.cache
def _ptxas_archs(path: str) -> frozenset:
    text = subprocess.run([path, "--help"], capture_output=True, text=True, timeout=60).stdout
    return frozenset(re.findall(r"'(sm_\d+[af]?)'", text))


def unsupported(arch: str) -> str | None:
    """Why `arch` cannot be compiled for here (the ptxas Triton would use does not know it),
    or None."""
    cc = capability(arch)
    try:
        tool = for_arch(cc)
    except Exception as exc:  # noqa: BLE001 - no ptxas at all: say so
        return f"no ptxas for {arch}: {type(exc).__name__}: {exc}"
    if tool is None:
        return f"no ptxas for {arch} (set TRITON_PTXAS_PATH)"
    wanted = f"sm_{cc}a" if cc >= 90 else f"sm_{cc}"  # Triton compiles sm_90 and later as "a"
    try:
        archs = _ptxas_archs(tool.path)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"ptxas {tool.path} did not run: {exc}"
    if wanted not in archs:
        return f"ptxas {tool.version} ({tool.path}) cannot compile for {arch}"
    return None


def toolchain(cc: int) -> str:
    """'ptxas 12.9, Triton 3.9.0': what a compile for `cc` is made with."""
    import triton  # import time: triton

    tool = for_arch(cc)
    return f"ptxas {tool.version}, Triton {triton.__version__}"


def cuobjdump_usage(cubin: bytes, name: str) -> dict:
    from triton import knobs  # import time: triton

    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        text = subprocess.run([knobs.nvidia.cuobjdump.path, "--dump-resource-usage", f.name],
                              capture_output=True, text=True, timeout=60, check=True).stdout
    block = text.split(f"Function {name}:", 1)[-1]
    return {k: int(v) for k, v in re.findall(r"\b(REG|STACK|SHARED|LOCAL):(\d+)", block)}


@contextlib.contextmanager
def captured_output():
    """The compiler's own output (MLIR diagnostics on fd 2, a failed ptxas's dump on stdout),
    kept out of the test's output and returned for the error message."""
    out: list[str] = []
    with tempfile.TemporaryFile(mode="w+") as sink:
        saved = os.dup(1), os.dup(2)
        os.dup2(sink.fileno(), 1)
        os.dup2(sink.fileno(), 2)
        try:
            yield out
        finally:
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])
            sink.seek(0)
            out.append(sink.read())
