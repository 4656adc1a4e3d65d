"""What each test took in this run: the wall time of its setup, call and teardown, in seconds, per
node id. The run's JSON document keeps it ("durations"), and so does every saved run, so that a
later run can order its tests longest first and a CI matrix can split them by time (expected.py).

Every test of the session is timed, not only the perf tests: a shard's length is all of its
tests'. Reports are gathered where they arrive (in-process, on the xdist controller, in a
supervising parent), as configs.py gathers its records."""

from __future__ import annotations

import pytest

DURATIONS_KEY = pytest.StashKey[dict]()


def of(config: pytest.Config) -> dict[str, float]:
    """{node id: seconds} of the tests this run reported, sorted by node id (stable files)."""
    return {k: round(v, 4) for k, v in sorted(config.stash.get(DURATIONS_KEY, {}).items())}


def union(maps: list[dict]) -> dict[str, float]:
    """The durations of several runs' shards as one map; where two hold a test, the first."""
    out: dict[str, float] = {}
    for m in maps:
        for nodeid, seconds in (m or {}).items():
            out.setdefault(nodeid, seconds)
    return dict(sorted(out.items()))


class Durations:
    """Adds each phase's duration to its test's total (a re-run's phases add to its first run's:
    the time the test cost the run)."""

    def __init__(self, config: pytest.Config):
        self._config = config
        config.stash[DURATIONS_KEY] = {}

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        totals = self._config.stash[DURATIONS_KEY]
        totals[report.nodeid] = totals.get(report.nodeid, 0.0) + float(report.duration or 0.0)
