"""The process's role in the run, decided once: pytest-xdist's controller, one of its workers, a
supervised child reporting to its parent, or a plain run of its own.

Every feature that behaves differently by role asks here (`is_worker(config)`, as pytest-xdist
asks `is_xdist_worker`) instead of testing `config.workerinput` or the child's option itself, so
the four roles are told apart in one place, with one precedence: a supervised child first (it
reports to its parent whatever else it is), then an xdist worker, then the controller.

The role is stored on the config in pytest_configure (`decide`). Asked earlier it is worked out
without being stored: then CHILD and WORKER are already right (an option, an attribute xdist
sets before pytest_cmdline_main), CONTROLLER not yet (xdist settles -n in its tryfirst
pytest_cmdline_main). A child forked after collection (process/forked.py) keeps the role of the
plain run it was forked from: its features were registered there, and it registers its Reporter
itself.

The runs a tool wraps (compute-sanitizer, Nsight Compute) are pytest processes started by this
one with an environment variable that names the tool: `under_sanitizer` and `under_ncu` read it.
"""

from __future__ import annotations

import enum
import os
from typing import Any

import pytest

from .pytest_child import NCU_CHILD_ENV, SANITIZE_CHILD_ENV


class Role(enum.Enum):
    CONTROLLER = "controller"  # pytest-xdist's controller: hands tests out, runs none
    WORKER = "worker"  # a pytest-xdist worker: runs tests, reports them to the controller
    CHILD = "child"  # a supervised child (--triton-child): runs tests, reports to its parent
    PLAIN = "plain"  # a run of its own: runs its tests and writes the run's outputs


ROLE_KEY = pytest.StashKey[Role]()


def _work_out(config: pytest.Config) -> Role:
    if config.getoption("triton_child", default=None):
        return Role.CHILD
    if hasattr(config, "workerinput"):
        return Role.WORKER
    if not config.getoption("collectonly", False) \
            and getattr(config.option, "dist", "no") != "no" and getattr(config.option, "tx", None):
        return Role.CONTROLLER
    return Role.PLAIN


def will_control(early_config: pytest.Config) -> bool:
    """Whether this process will be pytest-xdist's controller, as its command line says before
    xdist settles -n (usable from pytest_load_initial_conftests on): -n (not 0), or --tx with a
    --dist; not under --pdb (xdist then starts no workers: -n auto becomes 0), not with
    PYTEST_XDIST_AUTO_NUM_WORKERS=0 behind -n auto, and not a worker (xdist names each in
    PYTEST_XDIST_WORKER before its config exists). A conftest's pytest_xdist_auto_num_workers
    can still make -n auto 0: pytest_configure then finds the role plain and decides again."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        return False
    ns = early_config.known_args_namespace
    if getattr(ns, "collectonly", False) or getattr(ns, "usepdb", False):
        return False
    workers = getattr(ns, "numprocesses", None)
    if workers in ("auto", "logical") and \
            os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS", "").strip() == "0":
        return False
    if workers not in (None, 0, "0"):
        return True
    return bool(getattr(ns, "tx", None)) and getattr(ns, "dist", "no") != "no"


def decide(config: pytest.Config) -> Role:
    """Work the role out and store it on the config (from pytest_configure on)."""
    config.stash[ROLE_KEY] = role = _work_out(config)
    return role


def of(config: pytest.Config) -> Role:
    """This process's role: the one stored by decide(), else worked out now."""
    role = config.stash.get(ROLE_KEY, None)
    return role if role is not None else _work_out(config)


def is_controller(config: pytest.Config) -> bool:
    """pytest-xdist's controller, which runs no tests (its workers do)."""
    return of(config) is Role.CONTROLLER


def is_worker(config: pytest.Config) -> bool:
    """A pytest-xdist worker."""
    return of(config) is Role.WORKER


def is_child(config: pytest.Config) -> bool:
    """A supervised child (process/child.py), reporting to its parent."""
    return of(config) is Role.CHILD


def is_plain(config: pytest.Config) -> bool:
    """A run of its own, neither xdist's nor a child (the process that may supervise its tests)."""
    return of(config) is Role.PLAIN


def holds_the_session(config: pytest.Config) -> bool:
    """The controller or a plain run: the process that writes the run's outputs and summaries."""
    return of(config) in (Role.CONTROLLER, Role.PLAIN)


def worker_input(config: pytest.Config) -> dict[str, Any]:
    """What the controller handed this worker (xdist's workerinput); empty elsewhere."""
    return (getattr(config, "workerinput", None) or {}) if is_worker(config) else {}


def under_sanitizer() -> bool:
    """Whether this process is the run compute-sanitizer wraps (correctness/sanitize.py)."""
    return bool(os.environ.get(SANITIZE_CHILD_ENV))


def under_ncu() -> bool:
    """Whether this process is the run Nsight Compute profiles (diagnose/ncu.py)."""
    return bool(os.environ.get(NCU_CHILD_ENV))
