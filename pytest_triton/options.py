"""The plugin's options: how one is declared (its flag, its ini twin, its type and its help),
added to pytest's parser in one fixed order, and read. Its markers are declared the same way
(declare_markers, MARKER_ORDER).

Each feature declares its own options beside the code that reads them (`OPTIONS =
options.declare(...)` in its module), as pytest's cacheprovider does; this module declares only
those whose modules cannot be imported when --help is built (_HERE, below), and fixes the order
--help lists them all in (HELP_ORDER). Settings resolve here and only here, with one precedence:
command line > ini > default. (Markers come first where a marker can carry the setting;
markers.py applies that.)
"""

from __future__ import annotations

import argparse
import math
import re
from dataclasses import dataclass, replace
from typing import Any

import pytest

from . import flags


@dataclass(frozen=True)
class Option:
    name: str  # the dest / ini name, e.g. "triton_perf"
    kind: str  # "bool", "string", "linelist" or "flag" (a bare flag, or --flag=VALUE: flags.py)
    default: Any
    help: str
    metavar: str | None = None
    choices: tuple[str, ...] | None = None
    const: str | None = None  # kind "flag": the value of the bare flag
    # what the value is read as, and checked as at start-up (validate): "text", "number" (a finite
    # number >= minimum), "count" (a whole number >= minimum), "percent" or "words" (a comma list
    # of `words`, or off)
    value: str = "text"
    minimum: float = 0
    words: tuple[str, ...] = ()
    perf_only: bool = False  # acts on perf measurements, which only --triton-perf makes

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")


BY_NAME: dict[str, Option] = {}


def declare(*opts: Option) -> tuple[Option, ...]:
    """Declare a feature's options: each feature module does, at its import, beside the code that
    reads them. Declared again (a module imported anew by a nested pytest run), an option must be
    the same."""
    for opt in opts:
        if BY_NAME.setdefault(opt.name, opt) != opt:
            raise ValueError(f"option {opt.name} declared twice, differently")
    return opts


# The order --help lists the options in (and the ini file's help): fixed here, whichever
# module declares each.
HELP_ORDER: tuple[str, ...] = (
    "triton_perf",
    "triton_device",
    "triton_seed",
    "triton_interpret",
    "triton_perf_json",
    "triton_perf_calibrate",
    "triton_perf_peak",
    "triton_perf_l2",
    "triton_perf_max_time",
    "triton_perf_retries",
    "triton_perf_checklist",
    "triton_sanitize",
    "triton_gpu_wait",
    "triton_oom_retry",
    "triton_supervise",
    "triton_perf_allow_unchecked",
    "triton_perf_explain",
    "triton_perf_profile",
    "triton_perf_plot",
    "triton_all_configs",
    "triton_poison_allocations",
    "triton_perf_save",
    "triton_perf_history",
    "triton_order",
    "triton_perf_compare",
    "triton_perf_compare_by",
    "triton_perf_threshold",
    "triton_perf_fail_on",
    "triton_perf_report_md",
    "triton_judge",
    "triton_autotune",
    "triton_resources_archs",
)


@dataclass(frozen=True)
class Marker:
    line: str  # as `pytest --markers` shows it: "name(signature): what it does"

    @property
    def name(self) -> str:
        return re.split(r"[(:]", self.line, maxsplit=1)[0]


MARKERS_BY_NAME: dict[str, Marker] = {}


def declare_markers(*marks: Marker) -> tuple[Marker, ...]:
    """Declare a feature's markers, as declare() its options: beside the code that reads them."""
    for mark in marks:
        if MARKERS_BY_NAME.setdefault(mark.name, mark) != mark:
            raise ValueError(f"marker {mark.name} declared twice, differently")
    return marks


# The order `pytest --markers` lists the plugin's markers in, whichever module declares each.
MARKER_ORDER: tuple[str, ...] = (
    "poison_allocations",
    "perf_target",
    "interpreter_gap",
    "triton_exclusive",
    "triton_no_gpu",
    "triton_judge",
    "triton_resources",
)


def add_markers(config: pytest.Config) -> None:
    """Register every marker, in MARKER_ORDER (their modules imported by plugin.py)."""
    for name in MARKER_ORDER:
        config.addinivalue_line("markers", MARKERS_BY_NAME[name].line)


def all_options() -> tuple[Option, ...]:
    """Every option, in HELP_ORDER: those of each feature module that plugin.py imports, and
    this module's own."""
    missing = [name for name in HELP_ORDER if name not in BY_NAME]
    if missing:
        raise LookupError(f"options not declared (their modules not imported): {missing}")
    return tuple(BY_NAME[name] for name in HELP_ORDER)


# Every feature declares its options beside the code that reads them (OPTIONS in its module,
# imported by plugin.py), except those whose modules a plain run does not load, declared here
# so that building --help loads none of them: sanitize, explain, profile and plot (they import
# torch), the OOM retry (xdist workers only).
_HERE = declare(
    Option("triton_sanitize", "string", "off",
           "run the selected tests first under NVIDIA compute-sanitizer --tool TOOL (with "
           "PYTORCH_NO_CUDA_MEMORY_CACHING=1) and fail each test it reports errors on; needs a "
           "CUDA GPU and compute-sanitizer (without them the summary says nothing was checked)",
           metavar="TOOL", choices=("off", "memcheck", "racecheck", "initcheck")),
    Option("triton_oom_retry", "string", "auto",
           "under pytest-xdist on a GPU, a test that fails with CUDA out of memory while other "
           "processes hold GPU memory is run once more holding the GPU alone (the other workers' "
           "tests end first and give their cached memory back): passing alone, it passes with a "
           "warning naming what the others held; failing alone, it fails. auto: on under "
           "pytest-xdist on a GPU; off: the first failure stands",
           metavar="auto|off", choices=("auto", "off")),
    Option("triton_perf_explain", "flag", "off",
           "diagnose every perf test (failed and inconclusive ones are diagnosed anyway): the "
           "compiled kernel (registers, spills, shared memory, warps, stages, block sizes, "
           "grid), occupancy and waves, the autotune record, the roofline position and checklist "
           "hints. --triton-perf-explain=ncu adds Nsight Compute's speed-of-light figures "
           "(one ncu run per test). The value only with '=': on, ncu or off; the bare "
           "--triton-perf-explain means on",
           metavar="on|ncu|off", choices=("off", "on", "ncu"), const="on", perf_only=True),
    Option("triton_perf_profile", "string", None,
           "write a torch.profiler Chrome trace of each perf test's kernel (a few calls, after "
           "timing) to DIR, one file named after the test", metavar="DIR", perf_only=True),
    Option("triton_perf_plot", "string", None,
           "draw the run's roofline (every measurement against the device's datasheet and "
           "measured ceilings, coloured by verdict) to the PNG file PATH; needs matplotlib "
           "(pip install matplotlib)", metavar="PATH", perf_only=True),
)



def _help(opt: Option) -> str:
    if opt.perf_only and "with --triton-perf" not in opt.help:
        return opt.help + " (acts only with --triton-perf)"
    return opt.help


def add_options(parser: pytest.Parser) -> None:
    group = parser.getgroup("triton", "pytest-triton: correctness and speed of Triton kernels")
    for opt in all_options():
        opt = replace(opt, help=_help(opt))
        ini_help = f"default for {opt.flag}: {opt.help}"
        if opt.kind == "bool":
            group.addoption(opt.flag, action="store_true", dest=opt.name, default=None, help=opt.help)
            parser.addini(opt.name, ini_help, type="bool", default=opt.default)
        elif opt.kind == "flag":
            if opt.choices:
                flags.add_choice_flag(group, opt.flag, opt.name, opt.choices, opt.const,
                                      opt.metavar, opt.help)
            else:
                flags.add_name_flag(group, opt.flag, opt.name, opt.const, opt.metavar, opt.help)
            parser.addini(opt.name, ini_help, type="string", default=opt.default)
        elif opt.kind == "linelist":
            parser.addini(opt.name, opt.help, type="linelist", default=opt.default)
        else:
            group.addoption(opt.flag, action="store", dest=opt.name, default=None,
                            metavar=opt.metavar, choices=opt.choices, help=opt.help)
            parser.addini(opt.name, ini_help, type="string",
                          default=opt.default if opt.default is not None else "")
    # internal: a supervised child runs the test ids listed in DIR and reports there (process/)
    group.addoption("--triton-child", action="store", dest="triton_child", default=None,
                    metavar="DIR", help=argparse.SUPPRESS)


def get(config: pytest.Config, name: str) -> Any:
    """The setting `name`: command line > ini > default."""
    opt = BY_NAME[name]
    if opt.kind != "linelist":
        cli = config.getoption(name, default=None)
        if cli is not None:
            return cli
    value = config.getini(name)
    if opt.kind in ("string", "flag"):
        value = value or opt.default
        if opt.choices and value not in opt.choices:
            raise pytest.UsageError(
                f"ini option {name} = {value!r}: expected one of {', '.join(opt.choices)}")
    return value


def get_early(early_config: pytest.Config, name: str) -> Any:
    """Like get(), usable in pytest_load_initial_conftests, before config.option is filled."""
    opt = BY_NAME[name]
    cli = getattr(early_config.known_args_namespace, name, None)
    if cli is not None:
        return cli
    value = early_config.getini(name)
    if opt.kind in ("string", "flag"):
        value = value or opt.default
    return value


def _source(config: pytest.Config, name: str) -> str:
    """Where the value of `name` came from, for an error: its flag, or its ini line."""
    if config.getoption(name, default=None) is not None:
        return BY_NAME[name].flag
    return f"ini option {name} (default of {BY_NAME[name].flag})"


def get_float(config: pytest.Config, name: str, *, minimum: float | None = None) -> float:
    """An option that holds a number: a finite one >= minimum (default: its declared minimum)."""
    raw = get(config, name)
    minimum = BY_NAME[name].minimum if minimum is None else minimum
    try:
        value = float(raw)
    except (TypeError, ValueError):
        raise pytest.UsageError(f"{_source(config, name)} {raw!r}: expected a number") from None
    if not math.isfinite(value):
        raise pytest.UsageError(f"{_source(config, name)} {raw!r}: expected a finite number")
    if value < minimum:
        raise pytest.UsageError(f"{_source(config, name)} {raw!r}: must be >= {minimum:g}")
    return value


def get_count(config: pytest.Config, name: str, *, minimum: int | None = None) -> int:
    """An option that counts something: an integer >= minimum (default: its declared minimum)."""
    raw = get(config, name)
    minimum = int(BY_NAME[name].minimum) if minimum is None else minimum
    try:
        value = int(str(raw).strip())
    except (TypeError, ValueError):
        raise pytest.UsageError(f"{_source(config, name)} {raw!r}: expected a whole number") from None
    if value < minimum:
        raise pytest.UsageError(f"{_source(config, name)} {raw!r}: must be >= {minimum}")
    return value


class OptionError(pytest.UsageError):  # a bad value, named with where it came from
    """A bad value of an option or a command's argument."""

def get_percent(config: pytest.Config, name: str) -> float:
    return percent(get(config, name), _source(config, name))


def percent(raw, source: str) -> float:
    """A percentage, '3%' or '3' (or a fraction below 1, '0.03') -> 0.03, between 0 and 100%."""
    raw = str(raw).strip()
    value = float(raw.rstrip("%")) if re.fullmatch(r"\d+(\.\d*)?%?", raw) else None
    if value is not None and (raw.endswith("%") or value >= 1):
        value /= 100
    if value is None or not 0 < value < 1:
        raise OptionError(f"{source} {raw!r}: expected a percentage between 0 and 100, e.g. 3%")
    return value


def get_words(config: pytest.Config, name: str) -> frozenset[str]:
    return words(get(config, name), name, _source(config, name))


def words(raw, name: str, source: str) -> frozenset[str]:
    """A comma list of option `name`'s words ('off' or '': none)."""
    raw = str(raw or "")
    found = [w.strip().lower() for w in raw.split(",") if w.strip()]
    if found in ([], ["off"]):
        return frozenset()
    known = BY_NAME[name].words
    bad = [w for w in found if w not in known]
    if bad:
        raise OptionError(f"{source} {raw!r}: {', '.join(bad)} is not one of "
                          f"{', '.join(known)} (a comma list, or off)")
    return frozenset(found)


def validate(config: pytest.Config) -> None:
    """Every option's value, checked at start-up whether or not the run uses it (a perf option on a
    run without --triton-perf, an ini value that only one job reads): a bad value stops the run
    here, saying so, rather than passing unnoticed until the run that reads it. argparse has
    checked the command line's choices; this checks the ini file's, and every number."""
    for opt in all_options():
        if opt.kind == "flag" and opt.choices and config.getoption(opt.name) is not None:
            flags.check_choices_read_as_paths(config, opt.flag, opt.choices)
    for opt in all_options():
        if opt.kind == "linelist":
            continue
        read = {"number": get_float, "count": get_count, "percent": get_percent,
                "words": get_words}.get(opt.value, get)
        read(config, opt.name)


def _given(config: pytest.Config, opt: Option) -> bool:
    """Whether this run was given `opt`: on the command line, or in the ini file with a value other
    than its default ('off' turns an option off: not given)."""
    cli = config.getoption(opt.name, default=None)
    if cli is not None:
        return cli not in (False, "off", "")
    value = config.getini(opt.name)
    if opt.kind == "bool":
        return bool(value) != bool(opt.default)
    return value not in ("", "off", opt.default, None)


def perf_only_given(config: pytest.Config) -> list[str]:
    """The perf-only options this run was given (their flags), whether or not --triton-perf was."""
    return [opt.flag for opt in all_options() if opt.perf_only and _given(config, opt)]


def warn_without_perf(config: pytest.Config) -> None:
    """Perf-only options on a run without --triton-perf act on nothing: say so (plugin.py calls
    it once per run: not on xdist workers)."""
    given = perf_only_given(config)
    if given and not get(config, "triton_perf"):
        config.issue_config_time_warning(pytest.PytestConfigWarning(
            f"pytest-triton: {join_and(given)} {'act' if len(given) > 1 else 'acts'} on perf "
            "measurements, and there are none without --triton-perf: add --triton-perf"),
            stacklevel=2)


def join_and(names: list[str]) -> str:
    """'a', 'a and b', 'a, b and c'."""
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
