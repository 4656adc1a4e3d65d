"""Under pytest-xdist on a GPU: how long the tests waited for the GPU lock (gpulock), and how long
they held it alone, per worker, in the terminal summary (the tests that time hold it alone; the
others wait for them). A worker's test sends its waits with its teardown report, those of the
processes it started included."""

from __future__ import annotations

import pytest

from . import gpuholds

TITLE = "pytest-triton: waits for the GPU lock (pytest-xdist)"
_KINDS = {"shared": "to share it", "alone": "to time alone", "test": "to hold it alone"}


def _worker(report: pytest.TestReport) -> str:
    node = getattr(report, "node", None)
    return getattr(report, "worker_id", None) or getattr(getattr(node, "gateway", None), "id", None) \
        or "this process"


class LockWaits:
    """Each test's waits for the GPU lock, on its teardown report; per worker at the end."""

    def __init__(self, config: pytest.Config):
        self.by_worker: dict[str, list[dict]] = {}

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo):
        report = yield
        waits = item.stash.get(gpuholds.WAITS_KEY, None)
        if call.when == "teardown" and waits:
            report.triton_gpu_lock = list(waits)
        return report

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        for entry in getattr(report, "triton_gpu_lock", None) or ():
            self.by_worker.setdefault(_worker(report), []).append({"test": report.nodeid, **entry})

    def pytest_terminal_summary(self, terminalreporter) -> None:
        if self.by_worker:
            terminalreporter.write_sep("=", TITLE)
            for line in summary_lines(self.by_worker):
                terminalreporter.write_line(line)


def _who(entry: dict) -> str:
    who = entry["test"]
    if entry.get("nodeid") and entry["nodeid"] != entry["test"]:
        who += f" (its run's {entry['nodeid']})"
    return f"{who}, {_KINDS.get(entry['kind'], entry['kind'])}"


def summary_lines(by_worker: dict[str, list[dict]]) -> list[str]:
    """One line per worker (its tests' waits in all, the longest, the time they held the GPU
    alone), then the longest wait of all and the totals: what BENCHMARKS.md quotes."""
    lines = []
    every = [e for entries in by_worker.values() for e in entries]
    for worker in sorted(by_worker, key=lambda w: (len(w), w)):
        entries = by_worker[worker]
        longest = max(entries, key=lambda e: e["wait_s"])
        alone = [e["held_s"] for e in entries if e.get("held_s") is not None]
        lines.append(f"{worker}: waited {sum(e['wait_s'] for e in entries):.1f} s in {len(entries)} "
                     f"takes, longest {longest['wait_s']:.1f} s ({_who(longest)}); held it alone "
                     f"{sum(alone):.1f} s in {len(alone)} parts")
    longest = max(every, key=lambda e: e["wait_s"])
    alone = [e["held_s"] for e in every if e.get("held_s") is not None]
    lines.append(f"longest wait {longest['wait_s']:.1f} s: {_who(longest)}; waits in all "
                 f"{sum(e['wait_s'] for e in every):.1f} s over {len(by_worker)} workers; the GPU "
                 f"held alone {sum(alone):.1f} s in {len(alone)} parts")
    return lines
