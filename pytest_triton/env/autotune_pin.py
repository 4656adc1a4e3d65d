"""One config per autotuner, untimed: what the interpreter's autotune fix and
--triton-autotune=heuristic|first both run on.

Every autotuner class's own `run` (Triton's Autotuner, and a library's subclass that overrides
it, such as FlagGems' LibTuner, defined before or after install) is wrapped. When a pin applies,
the autotuner's configs are narrowed to the chosen one for the call, so its run takes its own
single-config path: no timing, no tuning-cache entry, best_config set and config pre_hooks run
as usual. pin_config and assert_every_config narrow the configs to one themselves, so they pass
straight through.

A pin applies to a call when MODE says so (the running test's --triton-autotune), or, with the
interpreter's fix installed, to every interpreted kernel (it has no driver to time configs with).
The choice: "heuristic", the first config the autotuner's own pruning keeps
(early_config_prune, then its perf_model ranking where one is given and can run), or "first",
its first config.
"""

from __future__ import annotations

import contextlib
import contextvars

from .interpreter.base import Patches

# The running test's choice ("heuristic", "first"), None where autotuners time their configs.
MODE: contextvars.ContextVar[str | None] = contextvars.ContextVar("triton_autotune_pin",
                                                                  default=None)
# Where set, a list the pinned launches are recorded in: (kernel name, config text, how).
PINNED: contextvars.ContextVar[list | None] = contextvars.ContextVar("triton_autotune_pinned",
                                                                    default=None)

_users: set[str] = set()  # who asked for the wrapping: "interpreter", "option"
_patches: Patches | None = None


def kernel_name(tuner) -> str:
    base = getattr(tuner, "base_fn", None)
    return getattr(base, "__name__", type(tuner).__name__)


@contextlib.contextmanager
def one_config(tuner, config):
    """Inside, `config` is the autotuner's only config: its own run takes its single-config path
    (no timing, no tuning-cache entry; best_config set and the config's pre_hook run as usual).
    What pin_config, the interpreter's fix and --triton-autotune all pin with."""
    saved = tuner.configs
    tuner.configs = [config]
    try:
        yield config
    finally:
        tuner.configs = saved


def _interpreted(tuner) -> bool:
    from triton.runtime import interpreter as ti  # import time: triton

    fn = getattr(tuner, "fn", None)
    for _ in range(20):
        if fn is None:
            return False
        if isinstance(fn, ti.InterpretedFunction):
            return True
        fn = getattr(fn, "fn", None)
    return False


def _how(tuner) -> str | None:
    how = MODE.get()
    if how is not None:
        return how
    if "interpreter" in _users and _interpreted(tuner):
        return "heuristic"
    return None


def choose(tuner, args: tuple, kwargs: dict, how: str):
    """The config `tuner` runs for this launch when pinned `how`."""
    configs = tuner.configs
    if how == "first":
        return configs[0]
    tuner.nargs = dict(zip(tuner.arg_names, args))  # as run() sets it for its pruning
    try:
        pruned = tuner.prune_configs(kwargs)
    except Exception:  # noqa: BLE001 - a perf_model needs a GPU; early_config_prune's own errors are raised below
        prune = getattr(tuner, "early_config_prune", None)
        pruned = prune(configs, tuner.nargs, **kwargs) if prune else configs
    return pruned[0] if pruned else configs[0]


def _wrap(run):
    def pinned_run(self, *args, **kwargs):
        __tracebackhide__ = True  # the plugin's frame, not the kernel's: hidden from failures
        how = _how(self) if len(getattr(self, "configs", ())) > 1 else None
        if how is None:
            return run(self, *args, **kwargs)
        chosen = choose(self, args, kwargs, how)
        seen = PINNED.get()
        if seen is not None:
            entry = (kernel_name(self), str(chosen), how)
            if entry not in seen:
                seen.append(entry)
        with one_config(self, chosen):
            return run(self, *args, **kwargs)

    pinned_run._pytest_triton_pin = True
    pinned_run._pytest_triton_original = run
    pinned_run.__name__ = getattr(run, "__name__", "run")
    pinned_run.__doc__ = getattr(run, "__doc__", None)
    return pinned_run


def _wrap_own_run(cls, patches: Patches) -> None:
    own = vars(cls).get("run")
    if own is not None and not getattr(own, "_pytest_triton_pin", False):
        patches.set_attr(cls, "run", _wrap(own))


def _classes(base) -> list:
    out, todo = [], [base]
    while todo:
        cls = todo.pop()
        if cls not in out:
            out.append(cls)
            todo.extend(cls.__subclasses__())
    return out


def _patch() -> Patches:
    from triton.runtime.autotuner import Autotuner  # import time: triton

    p = Patches()
    for cls in _classes(Autotuner):
        _wrap_own_run(cls, p)

    def init_subclass(cls, **kwargs):
        # a library's autotuner class defined after install (imported by a test module)
        super(Autotuner, cls).__init_subclass__(**kwargs)
        if _patches is not None:
            _wrap_own_run(cls, _patches)

    p.set_attr(Autotuner, "__init_subclass__", classmethod(init_subclass))
    return p


def install(user: str) -> None:
    """Wrap the autotuners' runs (once, whoever asks first)."""
    global _patches
    if _patches is None:
        _patches = _patch()
    _users.add(user)


def uninstall(user: str) -> None:
    """`user` no longer needs the wrapping; the last one to leave restores Triton."""
    global _patches
    _users.discard(user)
    if not _users and _patches is not None:
        _patches.undo()
        _patches = None


def installed() -> bool:
    return _patches is not None
