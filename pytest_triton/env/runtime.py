"""Where kernels run: a CUDA device, or Triton's interpreter on the CPU.

Decided once per process, before conftest files and test modules are imported, because
`@triton.jit` picks interpreter or compiler when the decorator runs. Under pytest-xdist,
each worker is given its own GPU here too, through CUDA_VISIBLE_DEVICES, before CUDA starts.

The choice asks torch (torch.cuda.is_available()) only where a GPU could be there: a CPU-only
build of torch, or a Linux machine with no GPU driver loaded, has none, and then neither torch
nor Triton is imported until a conftest or a test imports them (see surely_no_gpu).
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import pytest

from .. import options
from ..options import Option
from . import onimport, role, versions
from .interpreter.base import INTERPRET_ENV, interpreting

OPTIONS = options.declare(
    Option("triton_device", "string", None,
           "CUDA device to run on, e.g. cuda:1 (default: cuda:0, or the worker's own GPU under "
           "pytest-xdist; cpu with Triton's interpreter when no GPU is visible)",
           metavar="DEVICE"),
    Option("triton_interpret", "bool", False,
           "run kernels under Triton's interpreter (TRITON_INTERPRET=1) on CPU tensors even when "
           "a GPU is present"),
)

@dataclass(frozen=True)
class Runtime:
    device: str  # "cuda:N" or "cpu"
    interpret: bool
    why: str  # how the choice was made, for the report header
    gpu_id: str | None = None  # the physical GPU as the outer CUDA_VISIBLE_DEVICES names it
    # An xdist worker that no other worker of its run shares its GPU with (as many workers as
    # GPUs, or fewer, say): its perf tests need not compile before they hold the GPU alone.
    gpu_alone: bool = False
    # The environment variables the choice set, with their values before (None: unset), put back
    # when the session ends (restore_environment): a pytest run nested in a test (pytester) must
    # not leave TRITON_INTERPRET=1 behind, or every later child process of a GPU session (a perf
    # child, a supervised child) runs its kernels under the interpreter.
    env_before: dict = field(default_factory=dict, compare=False)
    # Undoes what waits for Triton's first import (the interpreter's fixes), at the session's end.
    cancel: Callable[[], None] = field(default=lambda: None, compare=False, repr=False)


class InterpreterConfigs(list):
    """autotune_configs' one config under the interpreter, which remembers every config it was
    given (`declared`): assert_every_config counts them, and checks them all when asked to."""

    def __init__(self, chosen, declared):
        super().__init__([chosen])
        self.declared = list(declared)


def autotune_configs(configs: list, *, interpreter=None) -> list:
    """The configs to autotune over: all of them on a GPU; under Triton's interpreter, which has
    no driver to time them with, one: `interpreter` if given (a small one keeps the CPU suite
    fast), else the first."""
    if not configs:
        raise ValueError("autotune_configs: no configs")
    if interpreting():
        return InterpreterConfigs(interpreter if interpreter is not None else configs[0], configs)
    return list(configs)


def find_cuda_tool(name: str) -> str | None:
    """The path of a CUDA toolkit program (ncu, compute-sanitizer): on PATH, else in the bin of
    $CUDA_HOME, $CUDA_PATH or /usr/local/cuda; None when there is none."""
    found = shutil.which(name)
    if found:
        return found
    for root in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if root:
            path = os.path.join(root, "bin", name)
            if os.access(path, os.X_OK):
                return path
    return None


def restore_environment(rt: Runtime) -> None:
    """Put back the environment variables decide() set, and drop what still waits for Triton's
    import (at the end of the session)."""
    rt.cancel()
    for key, value in rt.env_before.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


def _visible_gpu_ids() -> list[str]:
    """The GPUs this process may use, as CUDA_VISIBLE_DEVICES would name them, without starting CUDA."""
    outer = _outer_visible()
    return outer if outer is not None else _driver_gpu_ids()


def _outer_visible() -> list[str] | None:
    """The GPU ids an outer CUDA_VISIBLE_DEVICES names ([] for "" or -1); None where it is unset."""
    outer = os.environ.get("CUDA_VISIBLE_DEVICES")
    if outer is None:
        return None
    return [g.strip() for g in outer.split(",") if g.strip() and g.strip() != "-1"]


def _driver_gpu_ids() -> list[str]:
    """The GPUs the driver lists (NVML, else nvidia-smi), whatever CUDA_VISIBLE_DEVICES says."""
    try:
        import pynvml  # nvidia-ml-py

        pynvml.nvmlInit()
        try:
            return [str(i) for i in range(pynvml.nvmlDeviceGetCount())]
        finally:
            pynvml.nvmlShutdown()
    except Exception:
        pass
    if shutil.which("nvidia-smi"):
        try:
            out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30)
            lines = [ln for ln in out.stdout.splitlines() if ln.startswith("GPU ")]
            return [str(i) for i in range(len(lines))]
        except (OSError, subprocess.SubprocessError):
            pass
    return []


CONTROLLER_WHY = "pytest-xdist's controller: each worker takes a GPU"


def _gpus_without_torch() -> bool:
    """A torch built for CUDA, a GPU driver, and at least one GPU the driver lists (NVML, else
    nvidia-smi) that CUDA_VISIBLE_DEVICES leaves visible, found without importing torch or
    starting CUDA. A CUDA_VISIBLE_DEVICES alone, without a driver that lists a GPU, is not one."""
    build = versions.torch_build() or {}
    if build.get("cuda") is None or surely_no_gpu():
        return False
    return _outer_visible() != [] and bool(_driver_gpu_ids())


def _xdist_worker() -> tuple[int, int] | None:
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    count = os.environ.get("PYTEST_XDIST_WORKER_COUNT")
    if not worker or not count or not worker.startswith("gw"):
        return None
    return int(worker[2:]), int(count)


def decide(early_config: pytest.Config, *, may_control: bool = True) -> Runtime:
    """Choose interpreter or GPU for this process; set the environment that choice needs.
    may_control=False: this process runs its tests, whatever its command line foretold (xdist
    settled -n to no workers after the first choice was made)."""
    before = {k: os.environ.get(k) for k in (INTERPRET_ENV, "CUDA_VISIBLE_DEVICES")}
    rt = _decide(early_config, may_control)
    rt = replace(rt, env_before={k: v for k, v in before.items() if os.environ.get(k) != v})
    if not rt.interpret and rt.why != CONTROLLER_WHY:
        # On a GPU torch is imported already; Triton is imported here too, in the outermost run
        # (see import_for_nested_runs).
        import triton  # noqa: F401
    else:
        # Before any conftest or test module defines or launches a kernel: now if Triton is
        # imported already, else the moment something first imports it.
        rt = replace(rt, cancel=onimport.when_imported("triton", _install_interpreter_fixes))
    return rt


def _install_interpreter_fixes(_triton) -> None:
    from .interpreter import fixes  # import time: it probes Triton's interpreter

    fixes.install()


def import_for_nested_runs(config: pytest.Config) -> bool:
    """Import torch and Triton now where pytest runs may be nested in this one's tests (the
    pytester plugin is active), and say whether it did: a module first imported inside a
    pytester run is dropped from sys.modules afterwards, and a second import of Triton's or
    torch's native extension breaks the process (Triton's aborts it at exit)."""
    if not config.pluginmanager.has_plugin("pytester"):
        return False
    import torch  # noqa: F401
    import triton  # noqa: F401

    return True


# Where a GPU driver shows itself on Linux: NVIDIA's (loaded, or its device files), ROCm's, WSL's.
_GPU_DRIVER_PATHS = ("/proc/driver/nvidia", "/dev/nvidiactl", "/dev/nvidia0", "/dev/kfd", "/dev/dxg")


def surely_no_gpu() -> bool:
    """Whether torch.cuda.is_available() would surely say False, found without importing torch
    (a second or two): torch built for neither CUDA nor ROCm, or a Linux machine with no GPU
    driver (none loaded, no device files, and no nvidia-modprobe to load one on demand).
    Anywhere else torch is asked, as it always was."""
    build = versions.torch_build()
    if build is not None and "cuda" in build and "hip" in build and \
            build["cuda"] is None and build["hip"] is None:
        return True
    if not sys.platform.startswith("linux"):
        return False
    return not (any(os.path.exists(p) for p in _GPU_DRIVER_PATHS) or glob.glob("/dev/nvidia*")
                or shutil.which("nvidia-modprobe") or os.path.exists("/usr/bin/nvidia-modprobe"))


def _cuda_available() -> bool:
    if surely_no_gpu():
        return False
    import torch  # import time: only where a GPU may be there

    return torch.cuda.is_available()


def _decide(early_config: pytest.Config, may_control: bool = True) -> Runtime:
    requested = options.get_early(early_config, "triton_device")
    if options.get_early(early_config, "triton_interpret") or interpreting():
        if requested and requested != "cpu":
            raise pytest.UsageError(
                f"--triton-device {requested}: the interpreter was asked for "
                f"(--triton-interpret or {INTERPRET_ENV}=1), which runs kernels on cpu")
        os.environ[INTERPRET_ENV] = "1"
        return Runtime("cpu", True, "interpreter requested")

    if may_control and not requested and role.will_control(early_config) and _gpus_without_torch():
        # The controller runs no test; its workers each take a GPU (below). It neither imports
        # torch nor starts CUDA here: that would hold back the start of every worker.
        return Runtime("cuda", False, CONTROLLER_WHY)

    gpu_id = None
    worker = _xdist_worker()
    ids = _visible_gpu_ids()
    if worker is not None and not requested and ids:
        index, _count = worker
        gpu_id = ids[index % len(ids)]
        # Before CUDA initialises in this process, so that the worker sees only its own GPU.
        os.environ["CUDA_VISIBLE_DEVICES"] = gpu_id

    if requested == "cpu" or not _cuda_available():
        if requested and requested != "cpu":
            raise pytest.UsageError(f"--triton-device {requested}: no CUDA GPU is visible here")
        os.environ[INTERPRET_ENV] = "1"
        why = "cpu requested" if requested == "cpu" else "no CUDA GPU visible"
        return Runtime("cpu", True, why)

    import torch  # import time: a GPU is there

    device = requested or "cuda:0"
    try:
        dev = torch.device(device)
    except RuntimeError as exc:
        raise pytest.UsageError(f"--triton-device {device!r}: {exc}") from None
    if dev.type != "cuda":
        raise pytest.UsageError(f"--triton-device {device!r}: expected cuda:N or cpu")
    index = dev.index or 0
    if index >= torch.cuda.device_count():
        raise pytest.UsageError(
            f"--triton-device {device}: only {torch.cuda.device_count()} CUDA device(s) visible")
    if gpu_id is None:
        gpu_id = ids[index] if index < len(ids) else str(index)
    torch.cuda.set_device(index)
    why = f"xdist worker {worker[0]} -> GPU {gpu_id}" if worker and not requested else "CUDA GPU"
    # alone: no other worker of the run gets this GPU. Workers take the visible GPUs in turn, so
    # worker i of `count` has GPU i to itself when i < len(ids) and i + len(ids) >= count (a
    # worker xdist started in place of a retired one is numbered from the count up: not alone).
    alone = worker is not None and not requested and worker[0] < min(worker[1], len(ids)) \
        and worker[0] + len(ids) >= worker[1]
    return Runtime(f"cuda:{index}", False, why, gpu_id, gpu_alone=alone)
