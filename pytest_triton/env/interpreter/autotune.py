"""Interpreter fix for multi-config autotuners: an interpreted @triton.autotune runs one config
(the first its pruning keeps, or the pinned one) instead of timing them on a driver that does not
exist (see fixes.FIXES). The wrapping itself is autotune_pin's."""

from __future__ import annotations

from .. import autotune_pin
from .base import Patches, modules


def needs_autotune_one_config() -> bool:
    import triton
    from triton.runtime.autotuner import Autotuner

    _, _, ti = modules()

    def body(x, BLOCK):
        pass

    launches: list = []
    kernel = ti.InterpretedFunction(body)
    kernel.run = lambda *args, **kwargs: launches.append(kwargs)  # no kernel: count launches only

    def timer(kernel_call, quantiles):
        # Stands in for the driver's timer, which on a GPU machine would initialise CUDA in this
        # process (and a supervised child could no longer be forked from it).
        kernel_call()
        return [1.0] * len(quantiles)

    tuner = Autotuner(kernel, ["x", "BLOCK"], [triton.Config({"BLOCK": 1}), triton.Config({"BLOCK": 2})],
                      key=[], reset_to_zero=None, restore_value=None, do_bench=timer)
    try:
        tuner.run(0, grid=(1,), warmup=False)
    except Exception:  # noqa: BLE001 - an autotuner that cannot run without a driver
        return True
    return len(launches) != 1  # it would time the configs by launching each


def apply_autotune_one_config(p: Patches) -> None:
    # Nothing to time configs with: an interpreted kernel runs one config, as the autotuner runs a
    # single config (untimed): the first its own pruning keeps (the library's early_config_prune
    # says which configs suit the shape; a perf_model that needs a GPU is passed over). The
    # wrapping is shared with --triton-autotune (autotune_pin.py).
    autotune_pin.install("interpreter")
    p.on_undo(lambda: autotune_pin.uninstall("interpreter"))
