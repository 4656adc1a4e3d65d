"""Correctness under every config of an autotuned kernel, not only the one autotuning picks.

Autotuning runs one config per tuning key, the fastest on the shape at hand; a config that is
wrong at another shape (a BLOCK_K that does not divide K, a mask only some tiles exercise) ships
unseen until a user's shape picks it. These helpers run a test's check under each config:

- `assert_every_config(kernel, check, *, outputs=())`: `check()` once per config of the
  autotuned `kernel` (pruned ones included: pruning depends on the shape), the `outputs`
  re-poisoned before each (autotune candidates write into the same buffers, so one config's
  writes would hide another's missing ones). Every config runs; the failure names each one that
  failed, with its own report.
- `pin_config(kernel, config)`: a context manager inside which every launch of `kernel` uses
  `config`, untimed and unpruned (the autotuner's own single-config path).
- `config_params(kernel)`: `pytest.param`s, one per config with its name as the id, for
  `@pytest.mark.parametrize("config", config_params(kernel))` with `pin_config` in the test.

Under Triton's interpreter an autotuner built with `autotune_configs(configs, interpreter=cfg)`
holds only the interpreter's config, so by default that is the one checked there, and the test's
report section, the run's summary, the JUnit properties and the perf JSON say "checked 1 of N
configs (interpreter)". `all_configs=True` (or --triton-all-configs) checks every config it was
given: each is pinned in turn, and an autotuner holding one config times nothing, so no driver is
needed.
"""

from __future__ import annotations

import contextlib
import textwrap
from typing import TYPE_CHECKING

import pytest

from .. import options
from ..env import autotune_pin
from ..env.autotune_pin import kernel_name
from ..env.interpreter.base import interpreting
from ..options import Option
from . import call_record, pinning
from .poison import poison_allocations

OPTIONS = options.declare(
    Option("triton_all_configs", "bool", False,
           "under Triton's interpreter, assert_every_config checks every config of a kernel "
           "autotuned over autotune_configs(configs, interpreter=cfg), not only the interpreter's "
           "one (each pinned in turn: nothing is timed, so no GPU driver is needed; slower)"),
)

if TYPE_CHECKING:
    import triton

# Triton is imported inside the functions, never when pytest_triton is: @triton.jit reads
# TRITON_INTERPRET when triton.language is first imported, which the plugin must set first.


def _skippable() -> tuple[type[BaseException], ...]:
    """What makes Triton's autotuner skip a config (timed as inf, never chosen): not a bug."""
    kinds = []
    for module, name in (("triton.runtime.errors", "OutOfResources"),
                         ("triton.runtime.errors", "PTXASError"),
                         ("triton.compiler.errors", "CompileTimeAssertionFailure")):
        try:
            kinds.append(getattr(__import__(module, fromlist=[name]), name))
        except (ImportError, AttributeError):  # pragma: no cover - older Triton
            pass
    return tuple(kinds)


def autotuner_of(kernel, where: str = "pin_config"):
    """The triton Autotuner behind `kernel` (itself, or under @triton.heuristics wrappers)."""
    from triton.runtime.autotuner import Autotuner

    k = kernel
    while not isinstance(k, Autotuner) and hasattr(k, "fn"):
        k = k.fn
    if not isinstance(k, Autotuner):
        raise TypeError(f"{where}: kernel must be an @triton.autotune kernel (a "
                        f"triton.runtime.Autotuner), got {type(kernel).__name__}")
    return k


def config_id(config: triton.Config) -> str:
    """A config's name: its meta-parameters, then warps and stages (and ctas, maxnreg if set)."""
    parts = [f"{k}={v}" for k, v in config.kwargs.items()]
    parts.append(f"num_warps={config.num_warps}")
    parts.append(f"num_stages={config.num_stages}")
    if getattr(config, "num_ctas", 1) != 1:
        parts.append(f"num_ctas={config.num_ctas}")
    if getattr(config, "maxnreg", None) is not None:
        parts.append(f"maxnreg={config.maxnreg}")
    return ", ".join(parts)


@contextlib.contextmanager
def pin_config(kernel, config: triton.Config):
    """Inside, every launch of the autotuned `kernel` runs `config`: no timing, no pruning."""
    import triton

    tuner = autotuner_of(kernel)
    if not isinstance(config, triton.Config):
        raise TypeError(f"pin_config: config must be a triton.Config, got {type(config).__name__}")
    with autotune_pin.one_config(tuner, config):
        yield config


@contextlib.contextmanager
def _counting_launches(tuner):
    """Inside, launches of `tuner` are counted: yields a list whose length is the count."""
    launched: list = []
    own = tuner.__dict__.get("run")  # the class's run, unless something wrapped it already
    inner = tuner.run

    def run(*args, **kwargs):
        launched.append(1)
        return inner(*args, **kwargs)

    tuner.run = run
    try:
        yield launched
    finally:
        if own is None:
            del tuner.run
        else:
            tuner.run = own


def config_params(kernel) -> list:
    """One pytest.param per config of the autotuned `kernel`, named by config_id."""
    return [pytest.param(c, id=config_id(c).replace(", ", "-"))
            for c in autotuner_of(kernel, "config_params").configs]


def repoison(outputs) -> None:
    """Fill each output buffer with its dtype's poison again (views keep their guards)."""
    import torch

    from .tensors import poison_value  # import time: torch

    for t in outputs:
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"assert_every_config: outputs must be tensors, got {type(t).__name__}")
        t.detach().fill_(poison_value(t.dtype))


def _declared(tuner) -> list:
    """Every config the kernel is autotuned over on a GPU: autotune_configs remembers them under
    the interpreter, where the autotuner holds one; otherwise those the autotuner holds."""
    declared = getattr(tuner.configs, "declared", None)
    return list(declared) if declared is not None else list(tuner.configs)


def _todo(tuner, configs, all_configs) -> tuple[list, list, str]:
    """(configs to check, the N they are counted against, why those)."""
    declared = _declared(tuner)
    if configs is not None:
        return list(configs), declared, "configs="
    if all_configs is None:
        sc = call_record.CURRENT.get()
        all_configs = bool(sc and sc.all_configs)
    if all_configs:
        return declared, declared, "all_configs"
    return list(tuner.configs), declared, "held"


def _record(tuner, todo, declared, why, passed, failed, note) -> None:
    """'checked k of N configs (interpreter)' for the test's report, summary and JSON: one count,
    with one meaning. A config is checked when it ran, or when the interpreter cannot tell it
    from one that ran (`note` says which); N counts the configs the kernel is tuned over."""
    ran = [todo[i] for i in passed] + [cfg for _, cfg, _ in failed]
    ran_ids = {config_id(c) for c in ran}
    ids = list(dict.fromkeys(config_id(c) for c in declared))
    first = {config_id(c): c for c in reversed(declared)}
    # a declared config the interpreter cannot tell from one that ran is checked with it
    same = pinning.interpreter_duplicates(ran + [first[i] for i in ids])
    checked_ids = [i for k, i in enumerate(ids)
                   if i in ran_ids or same.get(len(ran) + k, len(ran)) < len(ran)]
    checked, total = len(checked_ids), len(ids)
    extra = len(ran_ids - set(ids))
    where = "interpreter" if interpreting() else "GPU"
    text = f"assert_every_config: checked {checked} of {total} configs of {kernel_name(tuner)} ({where})"
    if extra:
        text += f", and {extra} config{'s' if extra > 1 else ''} of its own (not among the {total})"
    if note:
        text += f": {note}"
    counted = [i for i in checked_ids if i not in ran_ids]
    if counted and not note:
        verb = "differ" if len(counted) > 1 else "differs"
        text += (f": {len(counted)} of them {verb} from the one that ran only in launch "
                 "parameters the interpreter ignores, and count as checked with it; a GPU runs "
                 "all of them")
    reason = None
    if checked < total:
        unchecked = [c for c in ids if c not in checked_ids]
        reason = "configs=" if why == "configs=" else \
            "interpreter config only" if why == "held" and where == "interpreter" else \
            "could not run"
        if why == "configs=":
            text += f"; configs= chose them; not checked: {'; '.join(unchecked[:4])}"
        elif why == "held" and where == "interpreter":
            text += ("; the autotuner holds only the interpreter's config here (autotune_configs); "
                     f"not checked: {'; '.join(unchecked[:4])}{' ...' if len(unchecked) > 4 else ''}"
                     ". all_configs=True or --triton-all-configs runs them here, or a GPU run")
        else:
            text += f"; could not run here: {'; '.join(unchecked[:4])}"
    call_record.note(text)
    sc = call_record.CURRENT.get()
    if sc is not None:
        sc.configs_checked.append({"kernel": kernel_name(tuner), "checked": checked, "total": total,
                                   "where": where, "unchecked": total - checked,
                                   "reason": reason})


def assert_every_config(kernel, check, *, outputs=(), configs=None, all_configs=None) -> None:
    """Run `check()` under each config of the autotuned `kernel`, re-poisoning `outputs` first.

    configs: the configs to check (default: all the autotuner holds, pruned ones included).
    all_configs: under the interpreter, every config autotune_configs was given, not only the one
    the autotuner holds there (default: --triton-all-configs).
    Fails if any config's check raised, naming each failing config with the start of its report;
    a config that cannot run here (out of shared memory or registers, as the autotuner skips it)
    is listed as skipped, and fails only if no config could run. The test's report section says
    how many of the kernel's configs were checked.
    """
    __tracebackhide__ = True
    tuner = autotuner_of(kernel, "assert_every_config")
    if not callable(check):
        raise TypeError(f"assert_every_config: check must be callable, got {type(check).__name__}")
    outputs = list(outputs)
    todo, declared, why = _todo(tuner, configs, all_configs)
    if not todo:
        raise ValueError("assert_every_config: no configs to check")
    skippable = _skippable()
    failed, skipped, passed = [], [], []
    same = pinning.interpreter_duplicates(todo)  # configs the interpreter cannot tell apart
    for i, cfg in enumerate(todo):
        if i in same:
            continue
        repoison(outputs)
        try:
            # what check allocates starts as poison too: a config cannot pass on a block the
            # previous config's correct output was freed from
            with pin_config(tuner, cfg), _counting_launches(tuner) as launched, poison_allocations():
                check()
            if not launched:
                # a check that never launches the kernel would pass every config vacuously
                raise AssertionError(f"check() never launched {kernel_name(tuner)}, so this config was "
                                     "not exercised: call the kernel (or the function that "
                                     "launches it) inside check")
        except skippable as exc:
            skipped.append((i, cfg, exc))
        except Exception as exc:  # noqa: BLE001 - every failure of a config is reported
            failed.append((i, cfg, exc))
        else:
            passed.append(i)
    note = pinning.duplicates_note(todo, same)
    _record(tuner, todo, declared, why, passed, failed, note)
    if not failed and passed:
        return
    text = _failure(tuner, todo, failed, skipped, passed)
    raise AssertionError(text + ("\n" + note if note else ""))


def _failure(tuner, todo, failed, skipped, passed) -> str:
    n = len(todo)
    name = kernel_name(tuner)
    if failed:
        lines = [f"{len(failed)} of {n} configs of {name} fail this check (every config the "
                 "autotuner holds, pruned ones included: any of them may be picked for some shape):"]
    else:
        lines = [f"none of the {n} configs of {name} could run here:"]
    for i, cfg, exc in failed:
        lines.append(f"config {i} of {n}: {config_id(cfg)}")
        text = f"{type(exc).__name__}: {exc}".splitlines()
        shown = text[:16] + ([f"... ({len(text) - 16} more lines)"] if len(text) > 16 else [])
        lines.append(textwrap.indent("\n".join(shown), "    "))
    for i, cfg, exc in skipped:
        first = str(exc).splitlines()[0] if str(exc) else ""
        lines.append(f"config {i} of {n}: {config_id(cfg)}: cannot run here, as the autotuner "
                     f"would skip it ({type(exc).__name__}: {first})")
    if passed:
        lines.append(f"passed: config{'s' if len(passed) > 1 else ''} "
                     f"{', '.join(map(str, passed))} of {n}")
    return "\n".join(lines)


RECORDS_KEY = pytest.StashKey[list]()  # the run's assert_every_config records, by test


class ConfigsSummary:
    """Gathers each test's assert_every_config records where reports arrive (in-process, on the
    xdist controller, in a supervising parent) and says at the end which tests left configs
    unchecked, so that a CPU run that checked 1 of N configs does not pass as if it checked N."""

    def __init__(self, config: pytest.Config):
        self.config = config
        config.stash[RECORDS_KEY] = []

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        for rec in getattr(report, "triton_configs", None) or ():
            self.config.stash[RECORDS_KEY].append({"nodeid": report.nodeid, **rec})

    def pytest_terminal_summary(self, terminalreporter) -> None:
        # configs= is the test's own choice, and its report section says so; what a run must
        # say is the silent case: the interpreter's one config standing in for all of them.
        # That is by design, not a fault of the suite: one plain line (the tests with -v; none
        # with -q), never a warning on a passing run.
        verbosity = self.config.get_verbosity()
        if verbosity < 0:
            return
        partial: dict[tuple, dict] = {}
        for r in records(self.config):
            if r["reason"] == "interpreter config only":
                # one line per test and kernel, however many calls checked it
                key = (r["nodeid"], r["kernel"])
                if key not in partial or r["checked"] > partial[key]["checked"]:
                    partial[key] = r
        if not partial:
            return
        rows = list(partial.values())
        n = sum(r["unchecked"] for r in rows)
        tests = len({r["nodeid"] for r in rows})
        kernels = len({r["kernel"] for r in rows})
        text = (f"pytest-triton: under Triton's interpreter assert_every_config checks the one "
                f"config autotune_configs holds there, by design: {n} config{'s' if n > 1 else ''} "
                f"of {kernels} kernel{'s' if kernels > 1 else ''} in {tests} "
                f"test{'s' if tests > 1 else ''} {'are' if n > 1 else 'is'} left to a GPU run or "
                "--triton-all-configs")
        if verbosity < 1:
            terminalreporter.write_line(f"{text} (-v lists them)")
            return
        shown = "; ".join(f"{r['nodeid']}: {r['kernel']} {r['checked']} of {r['total']} "
                          f"({r['where']})" for r in rows)
        terminalreporter.write_line(f"{text}: {shown}")


def records(config: pytest.Config) -> list[dict]:
    """The run's assert_every_config records: nodeid, kernel, checked, total, where, unchecked,
    reason (why some were not checked: 'configs=', 'interpreter config only', 'could not run')."""
    return config.stash.get(RECORDS_KEY, [])
