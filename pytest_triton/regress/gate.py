"""The regression gate of a pytest run: --triton-perf-save keeps this run's measurements in the
history; --triton-perf-compare compares them with a saved run (rows.py), fails the run on
the verdicts --triton-perf-fail-on names, and shows the table in the terminal and in Markdown
(--triton-perf-report-md, $GITHUB_STEP_SUMMARY; render.py writes both)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from .. import options
from ..perf import session as perf_session
from ..report import summary
from . import provenance, storage, work_gate
from .render import describe_ref, lines, nothing_measured, write_markdown, write_markdown_text
from .rows import Outcome, compare_runs, spreads, timed


class RegressionGate:
    """--triton-perf-save / --triton-perf-compare on the process that writes the results."""

    def __init__(self, config: pytest.Config):
        self._config = config
        self._dir = Path(config.rootpath, options.get(config, "triton_perf_history"))
        save = options.get(config, "triton_perf_save")
        self._save = None if save in (None, "", "off") else save
        self._ref = options.get(config, "triton_perf_compare")
        self._by = options.get(config, "triton_perf_compare_by")
        self._threshold = options.get_percent(config, "triton_perf_threshold")
        self._fail_on = options.get_words(config, "triton_perf_fail_on")
        self._md = options.get(config, "triton_perf_report_md")
        self.outcome: Outcome | None = None
        self.saved: Path | None = None
        self.saved_note = ""
        self.note = ""
        self.seconds = 0.0  # what comparing and saving took, said in the summary
        if self._ref:  # a reference that cannot be found stops the run before it times anything
            try:  # (which device's latest is known once a test has measured)
                if self._ref != "latest":
                    storage.find(self._ref, self._dir, None)
                elif not (self._dir.is_dir() and storage.saved_runs(self._dir)):
                    raise storage.HistoryError(f"no run was saved in {self._dir}")
            except storage.HistoryError as exc:
                raise pytest.UsageError(f"--triton-perf-compare={self._ref}: {exc}") from None

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        ps = perf_session.session(self._config)
        if ps is None or not ps.controller:
            return
        t0 = time.perf_counter()
        doc = summary.document(self._config)
        if self._ref:
            self._compare(session, ps, doc)
        if self._save:
            name = None if self._save == "auto" else self._save
            saved = provenance.saved_document(self._config, name, doc)
            self.saved = storage.save(saved, self._dir)
            if not timed(ps.records):  # kept: a pull request's run finds main's dry run (.ci/run)
                self.saved_note = f" (nothing measured; {nothing_measured(doc)})"
        self.seconds = time.perf_counter() - t0

    def _compare(self, run: pytest.Session, ps, doc: dict) -> None:
        try:
            ref = storage.load(storage.find(self._ref, self._dir, doc.get("device")))
        except storage.HistoryError as exc:
            self.note = f"--triton-perf-compare={self._ref}: {exc}"
            run.exitstatus = pytest.ExitCode.USAGE_ERROR
            return
        if not timed(ps.records) and not work_gate.verdicts(ref.records, ps.records):
            why = nothing_measured(doc)
            self.note = f"nothing measured in this run to compare with {describe_ref(ref)} ({why})"
            write_markdown_text(f"### pytest-triton: against {describe_ref(ref)}\n\n**Nothing "
                                f"measured** in this run to compare ({why}).\n", self._md)
            return
        self.outcome = compare_runs(ref, ps.records, doc.get("device"), by=self._by,
                                    threshold=self._threshold, medians=spreads(ref, self._dir))
        self._report(run)

    def _report(self, run: pytest.Session) -> None:
        if self.outcome.failing(self._fail_on) and run.exitstatus == pytest.ExitCode.OK:
            run.exitstatus = pytest.ExitCode.TESTS_FAILED
        write_markdown(self.outcome, self._md)

    def pytest_terminal_summary(self, terminalreporter) -> None:
        if not (self.outcome or self.note or self.saved):
            return
        tr = terminalreporter
        tr.write_sep("=", "pytest-triton: regressions")
        if self.note:
            tr.write_line(self.note)
        if self.outcome:
            for line in lines(self.outcome, self._fail_on):
                tr.write_line(line, red=line.startswith(("SLOW", "the run FAILS", "REFUSED")),
                              green=line.startswith("FAST"))
        if self.saved:
            tr.write_line(f"saved this run: {self.saved}{self.saved_note}")
        tr.write_line(f"comparing and saving took {self.seconds:.2f} s")
