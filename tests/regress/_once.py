"""A history folder made once per process and copied into each later project of the tests that
begin with the same saved run (each such run is a pytest process of a few seconds; a saved run is
a file, read the same from any folder)."""

import shutil
from collections.abc import Callable
from pathlib import Path

_MADE: dict[str, Path] = {}  # key: this process's copy of what make() saved


def history_once(key: str, pytester, folder: Path, make: Callable[[], None]) -> None:
    """`folder` (in pytester's project) holds what make() saves there: make() runs for the
    first project of this process that asks for `key`, and its folder, kept in the process's
    basetemp, is copied into each later one."""
    if key in _MADE:
        shutil.copytree(_MADE[key], folder)
        return
    make()
    keep = pytester.path.parent / f"saved-once-{key}"  # this process's basetemp, not the project
    shutil.rmtree(keep, ignore_errors=True)
    shutil.copytree(folder, keep)
    _MADE[key] = keep
