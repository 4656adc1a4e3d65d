"""The regression gate's options: read by the gate (gate.py) and, as defaults and checks, by the
command line (cli.py); apart from gate.py so that building --help, and the command line, load
none of the gate."""

from __future__ import annotations

from .. import options

OPTIONS = options.declare(
    options.Option(
        "triton_perf_save", "flag", "off",
        "save this run (samples, clocks, verdicts, commit, versions, device) in the history "
        "for a later --triton-perf-compare; NAME only with '=': --triton-perf-save=main",
        metavar="NAME", const="auto", perf_only=True),
    options.Option(
        "triton_perf_history", "string", ".pytest-triton/history",
        "where runs are saved and looked up, a folder per device (under the rootdir)",
        metavar="DIR", perf_only=True),
    options.Option(
        "triton_perf_compare", "string", None,
        "compare each measurement with a saved run: latest (this device's newest), a name "
        "saved with --triton-perf-save, or a file: FAST, SLOW, SAME or UNCERTAIN", metavar="REF",
        perf_only=True),
    options.Option(
        "triton_perf_compare_by", "string", "time",
        "compare times (one GPU model), or fractions of the measured ceiling (any two GPUs)",
        choices=("time", "fraction"), perf_only=True),
    options.Option(
        "triton_perf_threshold", "string", "3%",
        "the least change called SLOW or FAST; within it, SAME", metavar="PERCENT",
        value="percent", perf_only=True),
    FAIL_ON := options.Option(
        "triton_perf_fail_on", "string", "off",
        "fail the run on these verdicts of the compare: slow, or a comma list of slow, "
        "uncertain, missing, refused, more-work", metavar="VERDICTS",
        value="words", words=("slow", "uncertain", "missing", "refused", "more-work"),
        perf_only=True),
    options.Option(
        "triton_perf_report_md", "string", None,
        "write the compare's table as Markdown to PATH (and to $GITHUB_STEP_SUMMARY if set)",
        metavar="PATH", perf_only=True),
)
