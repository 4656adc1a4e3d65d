"""Interpreter fix for multi-config autotuners: an interpreted @triton.autotune runs one config
(the first its pruning keeps, or the pinned one) instead of timing them on a driver that does not
exist (see interpreter_compat.FIXES)."""

from __future__ import annotations

from .compat_base import Patches, modules


def _interpreted_kernel(tuner, ti) -> bool:
    fn = getattr(tuner, "fn", None)
    seen = 0
    while fn is not None and seen < 20:
        if isinstance(fn, ti.InterpretedFunction):
            return True
        fn = getattr(fn, "fn", None)
        seen += 1
    return False


def needs_autotune_one_config() -> bool:
    import triton
    from triton.runtime.autotuner import Autotuner

    _, _, ti = modules()

    def body(x, BLOCK):
        pass

    launches: list = []
    kernel = ti.InterpretedFunction(body)
    kernel.run = lambda *args, **kwargs: launches.append(kwargs)  # no kernel: count launches only
    tuner = Autotuner(kernel, ["x", "BLOCK"], [triton.Config({"BLOCK": 1}), triton.Config({"BLOCK": 2})],
                      key=[], reset_to_zero=None, restore_value=None)
    try:
        tuner.run(0, grid=(1,), warmup=False)
    except Exception:  # noqa: BLE001 - no driver to time configs with ("0 active drivers")
        return True
    return len(launches) != 1  # it timed the configs by launching each


def apply_autotune_one_config(p: Patches) -> None:
    from triton.runtime.autotuner import Autotuner

    _, _, ti = modules()
    original = Autotuner.run

    def run(self, *args, **kwargs):
        if len(self.configs) <= 1 or not _interpreted_kernel(self, ti):
            return original(self, *args, **kwargs)
        # Nothing to time configs with: run one, as the autotuner runs a single config (untimed).
        # The library's own early_config_prune still applies (it says which configs suit the
        # shape); its perf model does not (it ranks by speed). pytest_triton's pin_config and
        # assert_every_config narrow self.configs to one themselves, so they pass straight through.
        chosen = self.configs[0]
        prune = getattr(self, "early_config_prune", None)
        if prune:
            self.nargs = dict(zip(self.arg_names, args))
            pruned = prune(self.configs, self.nargs, **kwargs)
            if pruned:
                chosen = pruned[0]
        saved = self.configs
        self.configs = [chosen]
        try:
            return original(self, *args, **kwargs)
        finally:
            self.configs = saved

    run._pytest_triton_original = original
    p.set_attr(Autotuner, "run", run)
