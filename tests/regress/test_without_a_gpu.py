"""The regression gate where nothing is measured (no GPU: perf tests dry-run): the save is kept
and listed as a dry run, and the compare's Markdown report says that nothing was measured, and
why, instead of leaving no file (docs/without-a-gpu.md)."""

import re

from pytest_triton.regress.cli import main as cli

PERF_TEST = """
from pytest_triton import perf_target
@perf_target(gbps=100)
def test_copy(triton_bench): triton_bench(lambda: None, bytes=1e8)
"""


def _run(run_interpreted, *args):
    return run_interpreted("--triton-perf", "--triton-perf-allow-unchecked", "-p",
                           "no:cacheprovider", "-p", "no:randomly", *args)


def test_a_dry_run_is_saved_and_listed_as_a_dry_run(pytester, run_interpreted, capsys):
    pytester.makepyfile(test_k=PERF_TEST)
    result = _run(run_interpreted, "--triton-perf-save=main")
    result.assert_outcomes(skipped=1)
    # kept, as a pull request's run looks for main's, but the line says what it holds
    result.stdout.re_match_lines([r"saved this run: \S+-main-\S+\.json \(nothing measured; a "
                                  r"dry run: no GPU to time on, 1 perf target unchecked\)"])
    assert cli(["history", str(pytester.path / ".pytest-triton" / "history")]) == 0
    listing = capsys.readouterr().out
    assert re.search(r"  main +\S* +\S* +0 \(dry run: 1 unchecked\) ", listing), listing


def test_report_md_says_nothing_was_measured_and_why(pytester, run_interpreted):
    pytester.makepyfile(test_k=PERF_TEST)
    _run(run_interpreted, "--triton-perf-save=main").assert_outcomes(skipped=1)
    result = _run(run_interpreted, "--triton-perf-compare=main", "--triton-perf-fail-on=slow",
                  "--triton-perf-report-md=report.md")
    result.assert_outcomes(skipped=1)
    why = "a dry run: no GPU to time on, 1 perf target unchecked"
    result.stdout.fnmatch_lines([f"nothing measured in this run to compare with main, * ({why})"])
    text = (pytester.path / "report.md").read_text()
    assert text.startswith("### pytest-triton: against main, ")
    assert f"**Nothing measured** in this run to compare ({why})." in text
