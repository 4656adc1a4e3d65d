"""Where a saved run came from: its "run" block (the name it was saved as, the git commit,
branch and dirty flag, the versions, the host), and this pytest run's document made a saved run.
storage.py reads and writes the result; this module alone reads the pytest run and git."""

from __future__ import annotations

import os
import platform
import subprocess
from pathlib import Path

import pytest

import pytest_triton

from ..report import summary
from . import schema
from .storage import check_name


def git_info(root: Path | str) -> dict:
    """{"commit", "branch", "dirty"} of the git checkout holding `root`; each None outside git
    (or without git installed), never an error."""
    def git(*args) -> str | None:
        try:
            done = subprocess.run(["git", "-C", str(root), *args], capture_output=True,
                                  text=True, timeout=30)
        except (OSError, subprocess.SubprocessError):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    if commit is None:
        return {"commit": None, "branch": None, "dirty": None}
    branch = git("rev-parse", "--abbrev-ref", "HEAD")
    if branch in (None, "HEAD"):
        # a detached checkout, as CI makes one: GitHub Actions names the branch in its variables
        branch = os.environ.get("GITHUB_HEAD_REF") or os.environ.get("GITHUB_REF_NAME") or None
    # untracked files do not count: the history directory itself is usually one
    status = git("status", "--porcelain", "--untracked-files=no")
    return {"commit": commit, "branch": branch, "dirty": None if status is None else bool(status)}


def run_block(config: pytest.Config, name: str | None, device: dict | None = None) -> dict:
    """The "run" block of this run's saved document; `device`: the document's, where the caller
    has it."""
    if name is not None:
        check_name(name)
    if device is None and summary.session(config):
        device = summary.measured_device(config)
    return {"name": name, **git_info(config.rootpath),
            "versions": {**summary.versions(), "pytest_triton": pytest_triton.__version__,
                         "driver": (device or {}).get("driver")},
            "host": platform.node() or None, "shards": []}


def saved_document(config: pytest.Config, name: str | None, doc: dict | None = None) -> dict:
    """This run's document (`doc`, where the caller built it) as a saved run (what save takes):
    --triton-perf's only."""
    doc = summary.document(config) if doc is None else doc
    return schema.stamp({**doc, "run": run_block(config, name, doc["device"])}, schema.HISTORY)
