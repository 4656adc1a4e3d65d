"""--triton-perf: the perf session, the verdicts, and what a perf test needs before it runs."""

from __future__ import annotations

import pytest

from . import state
from .markers import PerfTarget


def configure(config: pytest.Config) -> None:
    pass


def setup_item(item: pytest.Item, target: PerfTarget) -> None:
    st = state.get(item.config)
    if not st.perf:
        pytest.skip(f"perf test ({target.describe()}): run with --triton-perf to time it")
