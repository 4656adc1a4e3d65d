"""pytest-triton: is the kernel right, and is it fast enough."""

from .correctness.compare import TOLERANCES, assert_close, tolerance_for
from .correctness.configs import assert_every_config, config_id, config_params, pin_config
from .correctness.determinism import assert_deterministic
from .correctness.gradients import assert_grads_close
from .correctness.guards import check_guards
from .correctness.poison import poison_allocations
from .correctness.tensors import TensorFactory, poison_value
from .env.device import DeviceInfo
from .env.runtime import INTERPRETER_GAPS, autotune_configs, interpreting, skip_interpreter_gap
from .perf.markers import PerfInconclusive, PerfInvalid, PerfTarget, PerfTargetMissed, perf_target
from .perf.timing import Settings as TimingSettings
from .perf.timing import Timings, do_bench, measure
from .process.gpufaults import GPUContextLost
from .process.oomretry import OutOfMemoryRetried

__version__ = "0.1.0"

__all__ = [
    "DeviceInfo",
    "GPUContextLost",
    "INTERPRETER_GAPS",
    "OutOfMemoryRetried",
    "PerfInconclusive",
    "PerfInvalid",
    "PerfTarget",
    "PerfTargetMissed",
    "TOLERANCES",
    "TensorFactory",
    "TimingSettings",
    "Timings",
    "__version__",
    "assert_close",
    "assert_deterministic",
    "assert_every_config",
    "assert_grads_close",
    "autotune_configs",
    "check_guards",
    "config_id",
    "config_params",
    "do_bench",
    "interpreting",
    "measure",
    "perf_target",
    "pin_config",
    "poison_allocations",
    "poison_value",
    "skip_interpreter_gap",
    "tolerance_for",
]
