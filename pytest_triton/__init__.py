"""pytest-triton: is the kernel right, and is it fast enough.

The public names are imported from their modules when first asked for (PEP 562), not with the
package: most of them import torch or Triton, and the pytest plugin (plugin.py), which imports
this package, must load without either.
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

# Each public name and the module that defines it (a name differing there: "module:name").
_PUBLIC = {
    "TOLERANCES": "correctness.closeness",
    "assert_close": "correctness.closeness",
    "tolerance_for": "correctness.closeness",
    "assert_every_config": "correctness.configs",
    "config_id": "correctness.configs",
    "config_params": "correctness.configs",
    "pin_config": "correctness.configs",
    "assert_deterministic": "correctness.determinism",
    "assert_grads_close": "correctness.gradients",
    "check_guards": "correctness.guards",
    "poison_allocations": "correctness.poison",
    "TensorFactory": "correctness.tensors",
    "poison_value": "correctness.tensors",
    "ARCH_LIMITS": "env.device",
    "DeviceInfo": "env.device",
    "arch_of": "env.device",
    "sm_limits": "env.device",
    "interpreting": "env.interpreter.base",
    "INTERPRETER_GAPS": "env.interpreter.gaps",
    "skip_interpreter_gap": "env.interpreter.gaps",
    "autotune_configs": "env.runtime",
    # Compiling a launch for an architecture without a GPU, as the triton_resources gate does.
    "compile_resources": "env.archcompile",
    "real_resources": "env.archcompile",
    "spec_of_call": "env.archcompile",
    "measure_ceilings": "perf.calibrate",
    "Change": "regress.change",
    "compare_samples": "regress.change",
    "PerfInconclusive": "perf.markers",
    "PerfInvalid": "perf.markers",
    "PerfTarget": "perf.markers",
    "PerfTargetMissed": "perf.markers",
    "perf_target": "perf.markers",
    "Measurement": "perf.record",
    "PerfRecord": "perf.record",
    "Verdict": "perf.record",
    "TimingSettings": "perf.timing:Settings",
    "Timings": "perf.timing",
    "do_bench": "perf.timing",
    "do_bench_each": "perf.timing",
    "measure": "perf.timing",
    "GPUContextLost": "process.gpufaults",
    "OutOfMemoryRetried": "process.oomretry",
    "shared_choice": "process.runshare",
}

__all__ = sorted([*_PUBLIC, "__version__"])


def __getattr__(name: str):
    where = _PUBLIC.get(name)
    if where is None:
        raise AttributeError(f"module 'pytest_triton' has no attribute {name!r}")
    module, _, attr = where.partition(":")
    # import time: the module is imported on first use of one of its names
    value = getattr(importlib.import_module(f".{module}", __name__), attr or name)
    globals()[name] = value  # asked for once: later lookups find it without this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_PUBLIC})
