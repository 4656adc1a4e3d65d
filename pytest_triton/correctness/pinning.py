"""Correctness runs that do not pay for autotuning, and configs the interpreter cannot tell apart.

A library's autotuners time every config at every new shape and dtype before the first
comparison can be made (minutes on a GPU for a library's suite). `--triton-autotune=heuristic`
(ini `triton_autotune`) runs each autotuner of a correctness test with one config, untimed: the
first its own pruning keeps (early_config_prune, then its perf_model where given);
`--triton-autotune=first` its first config. Perf tests (perf_target, triton_bench) autotune as
always, and assert_every_config checks every config (it pins each in turn). The mechanism is the
one the interpreter's autotune fix uses (env/autotune_pin.py).

Under Triton's interpreter num_warps, num_stages, num_ctas, maxnreg and ir_override change
nothing a kernel computes: assert_every_config checks configs that differ only in those once
(interpreter_duplicates), and says so.
"""

from __future__ import annotations

import contextlib

import pytest

from .. import options
from ..env import autotune_pin
from ..env.interpreter.base import interpreting
from ..options import Option

OPTIONS = options.declare(
    Option("triton_autotune", "string", "full",
           "how @triton.autotune kernels pick their config in correctness tests: full (time every "
           "config, as Triton does), heuristic (one config, untimed: the first the autotuner's "
           "own pruning keeps) or first (its first config). Perf tests (perf_target, "
           "triton_bench) always autotune; assert_every_config checks every config",
           metavar="MODE", choices=("full", "heuristic", "first")),
)

PINNED_KEY = pytest.StashKey[list]()  # per item: (kernel, config, how) of each pinned autotuner
# Config fields the interpreter ignores (they only shape the compiled GPU code).
LAUNCH_ONLY = ("num_warps", "num_stages", "num_ctas", "maxnreg", "ir_override")


def how(config: pytest.Config) -> str:
    return options.get(config, "triton_autotune")


def configure(config: pytest.Config) -> None:
    if how(config) != "full":
        autotune_pin.install("option")
        config.add_cleanup(lambda: autotune_pin.uninstall("option"))


def _perf_test(item: pytest.Item) -> bool:
    return item.get_closest_marker("perf_target") is not None or \
        "triton_bench" in getattr(item, "fixturenames", ())


@contextlib.contextmanager
def during_test(item: pytest.Item):
    """The test's setup, call and teardown, with its autotuners pinned where asked for."""
    chosen = how(item.config)
    if chosen == "full" or _perf_test(item):
        yield
        return
    pinned = item.stash.setdefault(PINNED_KEY, [])
    mode_token = autotune_pin.MODE.set(chosen)
    seen_token = autotune_pin.PINNED.set(pinned)
    try:
        yield
    finally:
        autotune_pin.PINNED.reset(seen_token)
        autotune_pin.MODE.reset(mode_token)


def header(config: pytest.Config) -> list[str]:
    chosen = how(config)
    if chosen == "full":
        return []
    which = ("the first config its own pruning keeps" if chosen == "heuristic"
             else "its first config")
    return [f"pytest-triton: --triton-autotune={chosen}: in correctness tests each autotuner "
            f"runs {which}, untimed; perf tests autotune; assert_every_config checks every config"]


def annotate_report(item: pytest.Item, report: pytest.TestReport) -> None:
    """A failed test says which config each pinned autotuner ran: the one to reproduce with."""
    pinned = item.stash.get(PINNED_KEY, None)
    if not pinned or report.when != "call" or not report.failed:
        return
    lines = [f"{kernel}: {config} ({chosen})" for kernel, config, chosen in pinned]
    report.sections.append(("pytest-triton autotune", "autotuners ran one config, untimed "
                            f"(--triton-autotune={pinned[0][2]}):\n" + "\n".join(lines)))


class Pinning:
    """--triton-autotune=heuristic|first: correctness tests' autotuners run one config."""

    def __init__(self, config: pytest.Config):
        configure(config)

    def pytest_report_header(self, config: pytest.Config) -> list[str]:
        return header(config)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None):
        with during_test(item):
            return (yield)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo):
        report = yield
        annotate_report(item, report)
        return report


# --- assert_every_config under the interpreter -----------------------------------------------------

def _computes(config) -> tuple:
    """What of a config the interpreter's result depends on."""
    kwargs = tuple(sorted((k, repr(v)) for k, v in config.kwargs.items()))
    return kwargs, id(config.pre_hook) if config.pre_hook is not None else None


def interpreter_duplicates(configs: list) -> dict[int, int]:
    """{index: the earlier index it repeats} for the configs that, under Triton's interpreter,
    differ from an earlier one only in launch parameters it ignores; {} on a GPU."""
    if not interpreting():
        return {}
    first: dict[tuple, int] = {}
    same: dict[int, int] = {}
    for i, cfg in enumerate(configs):
        key = _computes(cfg)
        if key in first:
            same[i] = first[key]
        else:
            first[key] = i
    return same


def duplicates_note(configs: list, same: dict[int, int]) -> str | None:
    """The report's words for interpreter_duplicates' result: how many configs ran, and which
    count as checked with a config that ran."""
    if not same:
        return None
    n = len(configs)
    groups: dict[int, list[int]] = {}
    for i, j in same.items():
        groups.setdefault(j, []).append(i)
    differ = sorted({name for i, j in same.items() for name in LAUNCH_ONLY
                     if getattr(configs[i], name, None) != getattr(configs[j], name, None)})
    parts = "; ".join(f"config{'s' if len(dups) > 1 else ''} {', '.join(map(str, dups))} as "
                      f"config {j}" for j, dups in sorted(groups.items()))
    d = len(same)
    return (f"{n - d} of the {n} ran under Triton's interpreter; the other {d} "
            f"{'differ' if d > 1 else 'differs'} from one that ran only in "
            f"{', '.join(differ) or 'launch parameters'}, which the interpreter ignores, and "
            f"{'count' if d > 1 else 'counts'} as checked with it ({parts}); a GPU runs all {n}")
