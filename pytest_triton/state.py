"""The plugin's per-run state, kept in config.stash (never in private config attributes)."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from .env.runtime import Runtime


@dataclass
class TritonState:
    runtime: Runtime
    checklist: dict[str, dict] = field(default_factory=dict)
    perf: bool = False  # --triton-perf (its session: perf.session.session(config))


STATE_KEY = pytest.StashKey[TritonState]()
RUNTIME_KEY = pytest.StashKey[Runtime]()  # decided in pytest_load_initial_conftests


def get(config: pytest.Config) -> TritonState:
    return config.stash[STATE_KEY]
