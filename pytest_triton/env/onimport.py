"""Run a function the moment a package is first imported (a post-import hook).

The plugin loads without torch, Triton or numpy. What must happen as soon as one of them is
imported (the interpreter's fixes installed before a conftest's first kernel is decorated, the
threads an import starts counted) is hooked onto that import here: a finder on sys.meta_path
wraps the package's loader, and the functions run once the package's own `__init__` has run,
before the statement that imported it goes on.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable
from types import ModuleType

# package name -> [(before, after)]: each runs once, around the package's first import
_PENDING: dict[str, list[tuple[Callable[[], None] | None, Callable[[ModuleType], None]]]] = {}
_FINDING: set[str] = set()  # the packages whose real spec is being looked up (by the other finders)


def when_imported(name: str, after: Callable[[ModuleType], None],
                  before: Callable[[], None] | None = None) -> Callable[[], None]:
    """Call after(module) once the top-level package `name` is imported: now, if it already is;
    else right after its first import (and before() just before that import starts). Returns a
    function that cancels whichever of the two has not run yet."""
    module = sys.modules.get(name)
    if module is not None:
        after(module)
        return lambda: None
    entry = (before, after)
    _PENDING.setdefault(name, []).append(entry)
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())

    def cancel() -> None:
        waiting = _PENDING.get(name, [])
        if entry in waiting:
            waiting.remove(entry)
        if not waiting:
            _PENDING.pop(name, None)
        if not _PENDING:
            sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, _Finder)]

    return cancel


class _Finder:
    """Finds nothing itself: for a watched package it asks the other finders, and hands back
    their spec with the loader wrapped."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in _PENDING or fullname in _FINDING:
            return None
        _FINDING.add(fullname)
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            _FINDING.discard(fullname)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        spec.loader = _Loader(spec.loader, fullname)
        return spec

    def invalidate_caches(self) -> None:
        pass


class _Loader:
    """The package's own loader, with the waiting functions run around its exec_module."""

    def __init__(self, loader, name: str):
        self._loader = loader
        self._name = name

    def __getattr__(self, attr):
        return getattr(self._loader, attr)

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        waiting = _PENDING.pop(self._name, [])
        if not _PENDING:
            sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, _Finder)]
        for before, _after in waiting:
            if before is not None:
                before()
        self._loader.exec_module(module)
        # the package keeps its real loader, as it would have without the hook
        module.__loader__ = self._loader
        if module.__spec__ is not None:
            module.__spec__.loader = self._loader
        for _before, after in waiting:
            after(module)
