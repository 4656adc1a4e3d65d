"""A choice the workers of one pytest-xdist run make once and share (a launch tuner's config, say):
the first worker to make it writes it; the others read it instead of making it again.

The run's folder is under the system temp dir, named by xdist's run id (PYTEST_XDIST_TESTRUNUID,
which every worker of a run has, and the processes its tests start inherit); one JSON file per
choice, named by a hash of its key. A file is written whole under a name of its own, then linked
into place: a reader never sees half of one, and the first one linked stands (a worker that made
the same choice meanwhile takes the one that stands, so every worker of the run launches the
same). Two workers may both make a choice that neither found yet: a duplicate, never a conflict.

A choice made while the GPU is shared by a test that times (triton_bench's first call, before it
holds the GPU alone: perf/fixture.py) is not written: it is made again once the GPU is held alone,
and that one is shared. Outside xdist nothing is shared: one process keeps its choices itself.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import tempfile
import threading
from collections.abc import Callable

from . import gpulock

RUN_ENV = "PYTEST_XDIST_TESTRUNUID"


def folder() -> str | None:
    """This xdist run's folder of shared choices; None outside a run of xdist workers."""
    run = os.environ.get(RUN_ENV)
    if not run:
        return None
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", run)
    return os.path.join(tempfile.gettempdir(), f"pytest-triton-run-{safe}")


def _path(where: str, kind: str, key: str) -> str:
    digest = hashlib.sha256(f"{kind}\0{key}".encode()).hexdigest()[:24]
    return os.path.join(where, f"{re.sub(r'[^A-Za-z0-9_.-]', '_', kind)}-{digest}.json")


def _read(path: str):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)["value"]
    except (OSError, ValueError, KeyError, TypeError):
        return None


def shared_choice(kind: str, key: str, make: Callable[[], object]):
    """The run's choice for (kind, key): the one a worker of this run wrote, else make()'s (a
    JSON-able value; None is not shared), written for the others. `key` names everything the
    choice depends on (a launcher, a device model, a problem's shape)."""
    where = folder()
    if where is None:
        return make()
    path = _path(where, kind, key)
    found = _read(path)
    if found is not None:
        return found
    value = make()
    if value is None or gpulock.sharing():
        return value
    os.makedirs(where, exist_ok=True)
    tmp = f"{path}.{os.getpid()}-{threading.get_ident()}.tmp"
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump({"kind": kind, "key": key, "value": value}, f)
        os.link(tmp, path)  # fails where another worker's stands: theirs is the run's
    except FileExistsError:
        value = _read(path) or value
    except OSError:  # no hard links here: the last write stands, still never half a file
        with contextlib.suppress(OSError):
            os.replace(tmp, path)
    finally:
        with contextlib.suppress(OSError):
            os.remove(tmp)
    return value
