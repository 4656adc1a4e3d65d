"""Every Triton launch's arguments, before its kernel runs: for checks that must see an input as it
was before a kernel could write into it (correctness/inputs.py keeps a copy then).

On a GPU, through Triton's launch-enter hook (launch_hooks.add_launch_hook; the arguments are read
from the launching frame, as launch_hooks.capture reads them). The interpreter calls no launch hook:
its GridExecutor, which runs every interpreted launch, is wrapped instead (the method that
copies a launch's arguments, which no interpreter fix replaces). Both are installed by
the first watcher (once Triton is imported: no kernel launches before) and removed with the
last, so that a run without watchers pays nothing.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

from . import launch_hooks, onimport

_WATCHERS: list[Callable] = []
_INSTALLED: list[Callable[[], None]] = []  # the removers of what is installed


def watch(callback: Callable) -> Callable[[], None]:
    """Call `callback(name, arguments)` before every Triton launch, until the returned function
    is called: the kernel's name, and a function that returns its arguments' values (tensors
    among them; read only when asked: on a GPU it walks the launching frames)."""
    _WATCHERS.append(callback)
    if len(_WATCHERS) == 1:
        _install()

    def remove() -> None:
        if callback in _WATCHERS:
            _WATCHERS.remove(callback)
            if not _WATCHERS:
                _uninstall()
    return remove


def _notify(name: str, args) -> None:
    for callback in list(_WATCHERS):
        callback(name, args)


def _on_gpu_launch(metadata=None) -> None:
    try:
        frame = sys._getframe(1)
        data = getattr(metadata, "data", None)
        name = data.get("name") if isinstance(data, dict) else None
        _notify(str(name or "?"), lambda: list((launch_hooks.launch_arguments(frame) or {}).values()))
    except Exception:  # noqa: BLE001 - a check must never break the kernel's launch
        pass


def _install() -> None:
    _INSTALLED.append(onimport.when_imported("triton", _install_hooks))


def _install_hooks(_triton) -> None:
    _INSTALLED.append(launch_hooks.add_launch_hook(_on_gpu_launch))
    try:
        from triton.runtime import interpreter as ti  # import time: Triton, once a watcher exists
    except Exception:  # noqa: BLE001 - no interpreter in this Triton: GPU launches only
        return
    # Its _init_args_hst, which every interpreted launch calls first with the launch's own
    # arguments (Triton 3.x), rather than __call__, which interpreter fixes wrap and put back
    name = "_init_args_hst" if hasattr(ti.GridExecutor, "_init_args_hst") else "__call__"
    original = getattr(ti.GridExecutor, name)

    def call(self, *args, **kwargs):
        try:
            values = (lambda: list(args[0]) + list(args[1].values())) if name != "__call__" \
                else (lambda: list(args) + list(kwargs.values()))
            _notify(getattr(self.fn, "__name__", "?"), values)
        except Exception:  # noqa: BLE001 - as above
            pass
        return original(self, *args, **kwargs)

    setattr(ti.GridExecutor, name, call)

    def remove() -> None:
        # Only while nothing wrapped it since (what wrapped it would be lost): otherwise it
        # stays, calling no one
        if vars(ti.GridExecutor).get(name) is call:
            setattr(ti.GridExecutor, name, original)
    _INSTALLED.append(remove)


def _uninstall() -> None:
    while _INSTALLED:
        _INSTALLED.pop()()
