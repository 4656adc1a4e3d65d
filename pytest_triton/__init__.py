"""pytest-triton: is the kernel right, and is it fast enough."""

from .correctness.compare import TOLERANCES, assert_close, tolerance_for
from .correctness.configs import assert_every_config, config_id, config_params, pin_config
from .correctness.determinism import assert_deterministic
from .correctness.gradients import assert_grads_close
from .correctness.guards import check_guards
from .correctness.poison import poison_allocations
from .correctness.tensors import TensorFactory, poison_value
from .env.device import ARCH_LIMITS, DeviceInfo, arch_of, sm_limits
from .env.interpreter.base import interpreting
from .env.interpreter.gaps import INTERPRETER_GAPS, skip_interpreter_gap
from .env.runtime import autotune_configs
from .perf.calibrate import measure_ceilings
from .perf.compare import Change, compare_samples
from .perf.markers import PerfInconclusive, PerfInvalid, PerfTarget, PerfTargetMissed, perf_target
from .perf.record import Measurement, PerfRecord, Verdict
from .perf.timing import Settings as TimingSettings
from .perf.timing import Timings, do_bench, measure
from .process.gpufaults import GPUContextLost
from .process.oomretry import OutOfMemoryRetried

__version__ = "0.1.0"

__all__ = [
    "ARCH_LIMITS",
    "Change",
    "DeviceInfo",
    "GPUContextLost",
    "INTERPRETER_GAPS",
    "Measurement",
    "OutOfMemoryRetried",
    "PerfInconclusive",
    "PerfInvalid",
    "PerfRecord",
    "PerfTarget",
    "PerfTargetMissed",
    "TOLERANCES",
    "TensorFactory",
    "TimingSettings",
    "Timings",
    "Verdict",
    "__version__",
    "arch_of",
    "assert_close",
    "assert_deterministic",
    "assert_every_config",
    "assert_grads_close",
    "autotune_configs",
    "check_guards",
    "compare_samples",
    "compile_resources",
    "config_id",
    "config_params",
    "do_bench",
    "interpreting",
    "measure",
    "measure_ceilings",
    "perf_target",
    "pin_config",
    "poison_allocations",
    "poison_value",
    "real_resources",
    "skip_interpreter_gap",
    "sm_limits",
    "spec_of_call",
    "tolerance_for",
]


# Compiling a launch for an architecture without a GPU (env/archcompile.py): imported when first
# asked for, as the triton_resources gate does, not with the package.
_LAZY = {"compile_resources", "real_resources", "spec_of_call"}


def __getattr__(name: str):
    if name in _LAZY:
        from .env import archcompile  # import time: only where resources are compiled

        return getattr(archcompile, name)
    raise AttributeError(f"module 'pytest_triton' has no attribute {name!r}")
