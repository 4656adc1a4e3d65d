"""Options at start-up (issue 20): every value checked whether or not the run uses it, perf-only
options named when given without --triton-perf, --help that says what each does, seed errors
that quote what was given, a random base seed printed under -q."""

import re

import pytest

from pytest_triton import options

PERF_TEST = """
from pytest_triton import perf_target

def test_plain():
    pass

@perf_target(max_ms=1.0)
def test_perf(triton_bench):
    triton_bench(lambda: None)
"""


@pytest.mark.parametrize("args, ini, message", [
    (["--triton-perf-max-time", "-1"], "", "--triton-perf-max-time '-1': must be >= 0.01"),
    (["--triton-perf-max-time", "inf"], "", "--triton-perf-max-time 'inf': expected a finite number"),
    (["--triton-perf-retries", "x"], "", "--triton-perf-retries 'x': expected a whole number"),
    (["--triton-gpu-wait", "soon"], "", "--triton-gpu-wait 'soon': expected a number"),
    ([], "triton_perf_l2 = hot", "ini option triton_perf_l2 = 'hot': expected one of cold, warm"),
    ([], "triton_perf_peak = best", "ini option triton_perf_peak = 'best': expected one of "
                                    "datasheet, measured"),
    ([], "triton_perf_retries = -2", "ini option triton_perf_retries (default of "
                                     "--triton-perf-retries) '-2': must be >= 0"),
    ([], "triton_supervise = sometimes", "ini option triton_supervise = 'sometimes'"),
])
def test_every_option_value_is_checked_at_start_up_without_triton_perf(pytester, args, ini, message):
    # These gave exit status 0 on CPU: they were read only under --triton-perf.
    pytester.makepyfile(test_k=PERF_TEST)
    if ini:
        pytester.makeini(f"[pytest]\n{ini}\n")
    result = pytester.runpytest("-p", "no:cacheprovider", *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str()
    assert f"ERROR: {message}" in result.stderr.str(), result.stderr.str()


def test_good_values_and_defaults_pass(pytester):
    pytester.makepyfile(test_k=PERF_TEST)
    pytester.makeini("[pytest]\ntriton_perf_l2 = warm\ntriton_perf_max_time = 0.5\n")
    result = pytester.runpytest("-p", "no:cacheprovider", "-W", "ignore::pytest.PytestConfigWarning",
                                "--triton-perf-retries", "0", "--triton-gpu-wait", "0")
    result.assert_outcomes(passed=1, skipped=1)


PERF_ONLY_VALUES = {
    "triton_perf_explain": ["--triton-perf-explain=on"],
    "triton_perf_profile": ["--triton-perf-profile", "traces"],
    "triton_perf_plot": ["--triton-perf-plot", "roofline.png"],
    "triton_perf_json": ["--triton-perf-json", "perf.json"],
    "triton_perf_calibrate": ["--triton-perf-calibrate"],
    "triton_perf_peak": ["--triton-perf-peak", "measured"],
    "triton_perf_l2": ["--triton-perf-l2", "warm"],
    "triton_perf_max_time": ["--triton-perf-max-time", "5"],
    "triton_perf_retries": ["--triton-perf-retries", "4"],
    "triton_perf_allow_unchecked": ["--triton-perf-allow-unchecked"],
    "triton_perf_save": ["--triton-perf-save=main"],
    "triton_perf_history": ["--triton-perf-history", "hist"],
    "triton_perf_compare": ["--triton-perf-compare", "latest"],
    "triton_perf_compare_by": ["--triton-perf-compare-by", "fraction"],
    "triton_perf_threshold": ["--triton-perf-threshold", "5%"],
    "triton_perf_fail_on": ["--triton-perf-fail-on", "slow"],
    "triton_perf_report_md": ["--triton-perf-report-md", "pr.md"],
}


@pytest.mark.parametrize("name", list(PERF_ONLY_VALUES))
def test_each_perf_only_option_without_triton_perf_warns_naming_itself(pytester, name):
    if name == "triton_perf_plot":
        pytest.importorskip("matplotlib")  # without it the option stops the run, saying so
    pytester.makepyfile(test_k="def test_k(): pass")
    flag = options.BY_NAME[name].flag
    result = pytester.runpytest("-p", "no:cacheprovider", *PERF_ONLY_VALUES[name])
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines([f"*PytestConfigWarning: pytest-triton: {flag} acts on perf "
                                 "measurements, and there are none without --triton-perf: add "
                                 "--triton-perf*"])
    with_perf = pytester.runpytest("-p", "no:cacheprovider", "--triton-perf",
                                   "--triton-perf-allow-unchecked", *PERF_ONLY_VALUES[name])
    assert "acts on perf measurements" not in with_perf.stdout.str()


def test_every_perf_option_is_covered_and_an_ini_value_counts_when_not_the_default(pytester):
    perf_named = {o.name for o in options.all_options() if o.name.startswith("triton_perf_")}
    assert perf_named - {"triton_perf_checklist"} == set(PERF_ONLY_VALUES)  # the checklist
    # also names the targets that collection validates, in every run
    pytester.makepyfile(test_k="def test_k(): pass")
    pytester.makeini("[pytest]\ntriton_perf_l2 = warm\ntriton_perf_retries = 2\n")
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.stdout.fnmatch_lines(["*pytest-triton: --triton-perf-l2 acts on perf measurements*"])
    pytester.makeini("[pytest]\ntriton_perf_l2 = cold\ntriton_perf_explain = off\n")  # defaults
    assert "acts on perf" not in pytester.runpytest("-p", "no:cacheprovider").stdout.str()


def test_several_are_named_in_one_warning(pytester):
    pytester.makepyfile(test_k="def test_k(): pass")
    result = pytester.runpytest("-p", "no:cacheprovider", "--triton-perf-l2", "warm",
                                "--triton-perf-retries", "3", "--triton-perf-json", "p.json")
    result.stdout.fnmatch_lines(["*pytest-triton: --triton-perf-json, --triton-perf-l2 and "
                                 "--triton-perf-retries act on perf measurements*"])


def test_explain_and_profile_on_cpu_say_that_nothing_was_measured(pytester, run_interpreted):
    # With --triton-perf on CPU they did nothing and said nothing.
    pytester.makepyfile(test_k=PERF_TEST)
    result = run_interpreted("-p", "no:cacheprovider", "--triton-perf", "--triton-perf-allow-unchecked",
                             "--triton-perf-explain=on", "--triton-perf-profile", "traces")
    result.assert_outcomes(passed=1, skipped=1)
    result.stdout.fnmatch_lines([
        "--triton-perf-explain: nothing diagnosed: no GPU to time on: 1 perf test dry-ran untimed, "
        "nothing measured",
        "--triton-perf-profile traces: no trace written: no GPU to time on: 1 perf test dry-ran "
        "untimed, nothing measured"])
    assert not (pytester.path / "traces").exists()


def test_help_says_what_bare_flags_mean_the_seed_forms_and_what_needs_triton_perf(pytester):
    raw = pytester.runpytest("--help").stdout.str()
    entries = {e.split()[0].split("=")[0]: " ".join(e.split())
               for e in re.split(r"\n  (?=--)", raw) if e.startswith("--")}
    text = " ".join(raw.split())
    # It showed --triton-supervise=[off], while the bare flag means on.
    assert "--triton-supervise [=auto|on|off]" in text
    assert "the bare --triton-supervise means on" in text
    assert "--triton-perf-explain [=on|ncu|off]" in text
    assert "--triton-judge [=on|default|off]" in text
    assert "the bare --triton-perf-explain means on" in text
    assert "--triton-seed=N|random|BASE:SEED" in text
    assert "BASE:SEED gives every selected test the seed SEED" in text
    for name in ("json", "explain", "profile", "plot", "calibrate", "peak", "l2", "max-time",
                 "retries"):
        entry = entries[f"--triton-perf-{name}"]
        assert entry.endswith("(acts only with --triton-perf)"), entry
    assert "with --triton-perf, let the run pass" in entries["--triton-perf-allow-unchecked"]
    assert "pytest-triton[plot]" not in text  # an install command that cannot work


@pytest.mark.parametrize("value, message", [
    (":4", "--triton-seed ':4': BASE is missing before the ':'"),
    ("3:", "--triton-seed '3:': SEED is missing after the ':'"),
    ("abc", "--triton-seed 'abc': expected N (an integer), 'random', or BASE:SEED"),
    ("1:x", "--triton-seed '1:x': SEED 'x' is not an integer: expected BASE:SEED, two integers"),
])
def test_seed_errors_quote_what_was_given(pytester, value, message):
    # ':4' quoted the empty base (''), '3:' printed "--triton-seed 3::".
    pytester.makepyfile(test_k="def test_k(): pass")
    result = pytester.runpytest("-p", "no:cacheprovider", "--triton-seed", value)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert f"ERROR: {message}" in result.stderr.str(), result.stderr.str()
    assert "::" not in result.stderr.str()


SEED_FILE = """
from pytest_triton.env import seeding

def test_a(request):
    wi = getattr(request.config, "workerinput", None)
    name = wi["workerid"] if wi else "main"
    with open(f"base-{name}.txt", "w") as f:
        f.write(str(seeding.base(request.config)))

def test_b(request):
    test_a(request)
"""


def test_a_random_base_seed_is_printed_under_q_and_is_the_one_the_tests_used(pytester):
    pytester.makepyfile(test_k=SEED_FILE)
    result = pytester.runpytest("-q", "-p", "no:cacheprovider", "--triton-seed", "random")
    result.assert_outcomes(passed=2)
    used = (pytester.path / "base-main.txt").read_text()
    result.stdout.fnmatch_lines([f"pytest-triton: seed base {used} (drawn by --triton-seed random); "
                                 f"replay this run with --triton-seed {used}"])
    assert "seed base" not in pytester.runpytest("-q", "-p", "no:cacheprovider").stdout.str()


@pytest.mark.requires_plugin("pytest-xdist")
def test_under_xdist_every_worker_takes_the_controllers_random_base(pytester):
    pytester.makepyfile(test_k=SEED_FILE)
    result = pytester.runpytest_subprocess("-q", "-p", "no:cacheprovider", "-n", "2",
                                           "--triton-seed", "random")
    result.assert_outcomes(passed=2)
    printed = re.search(r"seed base (\d+) \(drawn by --triton-seed random\)", result.stdout.str())
    assert printed, result.stdout.str()
    used = {p.read_text() for p in pytester.path.glob("base-gw*.txt")}
    assert used == {printed.group(1)}


RECORD_FLAGS = """
import pathlib
from pytest_triton import options

def test_b(request):
    values = {n: options.get(request.config, n)
              for n in ("triton_judge", "triton_supervise", "triton_perf_explain")}
    pathlib.Path("seen.txt").write_text(repr(values))
"""


@pytest.mark.parametrize("args, name, value", [
    (["--triton-judge", "test_b.py"], "triton_judge", "on"),
    (["--triton-judge=off", "test_b.py"], "triton_judge", "off"),
    (["test_b.py", "--triton-judge"], "triton_judge", "on"),
    (["--triton-supervise", "test_b.py"], "triton_supervise", "on"),
    (["--triton-perf", "--triton-perf-explain", "test_b.py"], "triton_perf_explain", "on"),
    (["--triton-perf", "--triton-perf-explain=ncu", "test_b.py"], "triton_perf_explain", "ncu"),
])
def test_a_bare_flag_leaves_the_test_path_after_it_a_test_path(pytester, args, name, value):
    # --triton-judge tests/x.py took tests/x.py as the judge's value (and refused it).
    pytester.makepyfile(test_a="def test_a(): pass", test_b=RECORD_FLAGS)
    result = pytester.runpytest_subprocess("-p", "no:randomly", *args)
    result.assert_outcomes(passed=1)  # test_b.py alone: the path was taken as a path
    assert eval((pytester.path / "seen.txt").read_text())[name] == value


def test_a_value_after_a_space_is_a_test_path_and_the_error_says_so(pytester):
    pytester.makepyfile(test_b=RECORD_FLAGS)
    result = pytester.runpytest_subprocess("--triton-judge", "on", "test_b.py")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--triton-judge on: 'on' was read as a test path (there is "
                                 "none): --triton-judge takes its value only with '=': "
                                 "--triton-judge=on*"])
    result = pytester.runpytest_subprocess("--triton-judge=sometimes", "test_b.py")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*argument --triton-judge: ignored explicit argument "
                                 "'sometimes'*"])
