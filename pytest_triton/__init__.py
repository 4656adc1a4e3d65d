"""pytest-triton: is the kernel right, and is it fast enough."""

from .bench import do_bench
from .compare import TOLERANCES, assert_close, tolerance_for
from .configs import assert_every_config, config_id, config_params, pin_config
from .determinism import assert_deterministic
from .gpufaults import GPUContextLost
from .gradients import assert_grads_close
from .guards import check_guards
from .markers import PerfInconclusive, PerfInvalid, PerfTarget, PerfTargetMissed, perf_target
from .runtime import INTERPRETER_GAPS, autotune_configs, interpreting, skip_interpreter_gap
from .tensors import TensorFactory, poison_value

__version__ = "0.1.0"

__all__ = [
    "GPUContextLost",
    "INTERPRETER_GAPS",
    "PerfInconclusive",
    "PerfInvalid",
    "PerfTarget",
    "PerfTargetMissed",
    "TOLERANCES",
    "TensorFactory",
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
    "perf_target",
    "pin_config",
    "poison_value",
    "skip_interpreter_gap",
    "tolerance_for",
]
