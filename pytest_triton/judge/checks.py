"""The judge's checks, listed once: what each catches, the name its failure starts with, where it
lives, when it runs and what its time counts as. docs/judging.md's table, the --triton-judge
help and the judge's modules are checked against this list (tests/judge/test_checks.py).

The checks of one watched call (timedcall.py) share one interface: `check(call) -> str | None`,
the failure's message (starting with one of the check's `findings`) or None, given the `Call`, which
holds what was seen of the call before it ran.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import pytest


@dataclass
class Call:
    """One watched call of `fn` (the timed call, or the dry run's): what its checks are given.
    `when` names the moment in a failure ("before the timed call"); `result` is what the last
    call of fn returned (streams.check, which calls fn again, leaves its own there)."""

    config: pytest.Config
    fn: Callable[[], Any]
    when: str
    judging: bool = False  # the costly checks too (--triton-judge, the triton_judge marker)
    census: Any = None  # workers.Census taken before the call
    captured: list = field(default_factory=list)  # (name, tensor) that fn captures
    before_all: dict = field(default_factory=dict)  # name -> copy, before the call (judging)
    declared_names: set = field(default_factory=set)  # inplace= names
    declared_storages: set = field(default_factory=set)  # inplace= tensors' storages
    seed: int = 0
    sync: Callable[[], None] = lambda: None
    result: Any = None

    def at(self, when: str) -> Call:
        """The same call, named by another moment (a failure before it, during it, after it)."""
        return replace(self, when=when)


class CallCheck(Protocol):
    def __call__(self, call: Call) -> str | None: ...


@dataclass(frozen=True)
class Check:
    exploit: str  # what the kernel does, as docs/judging.md's table begins its row
    findings: tuple[str, ...]  # its failures' first words, "timer tampering" (none: a note)
    module: str  # where it lives, under pytest_triton/
    when: str  # when it runs, as the table says
    costly: bool  # run only under --triton-judge (or the triton_judge marker)
    help: str | None = None  # the words --triton-judge's help names it by


# In docs/judging.md's order.
CHECKS: tuple[Check, ...] = (
    Check("mutates its inputs", ("input mutation",), "correctness/inputs.py", "always", False,
          "inputs unchanged"),
    Check("... any tensor the timed call captures", ("input mutation", "aliased output"), "judge/probe.py",
          "`--triton-judge`", True, "fresh and shuffled inputs for the timed call"),
    Check("reads a freed reference or output from recycled memory", (),
          "correctness/poison.py",
          "`--triton-judge` (always with `--triton-poison-allocations` or the "
          "`poison_allocations` marker)", True, "poisoned allocations"),
    Check("caches its output across timed calls", ("cached output",), "judge/probe.py",
          "`--triton-judge`", True, "fresh and shuffled inputs for the timed call"),
    Check("does work on a side stream", ("side stream",), "judge/streams.py",
          "`--triton-judge`, on a GPU", True, "side streams"),
    Check("returns a lazy or subclassed tensor, or a view of its input", ("lazy output", "aliased output"),
          "correctness/outputs.py", "always", False, "plain outputs"),
    Check("monkeypatches the timer", ("timer tampering",), "judge/identities.py", "always", False,
          "timer identities"),
    Check("... including by code that silences the checks in its own process", ("timer tampering",),
          "judge/verify.py", "`--triton-judge`", True,
          "timing in a supervised child whose verdict this process recomputes"),
    Check("special-cases the tested shapes or values", ("special-cased",), "judge/reruns.py",
          "`--triton-judge`", True, "unannounced seeds and sizes"),
    Check("falls back to torch, cuBLAS or cuDNN", ("non-Triton fallback",), "judge/trace.py",
          "`perf_target(triton_only=True)`; the default under `--triton-judge`", True,
          "non-Triton kernels"),
    Check("extra threads or processes doing the work", ("extra workers",), "judge/background_work.py",
          "always", False, "threads and processes"),
    Check("a launch fails silently", ("silent launch failure",), "judge/launcherrors.py", "always",
          False, "launch errors"),
    Check("declares more bytes= or flops= than the kernel does", (), "perf/work_check.py",
          "always, on CPU (the dry run)", False),
    Check("one shape's near-zero time collapses a geomean", ("geomean collapse",), "judge/trace.py",
          "always for `geomean_speedup` tests; under `--triton-judge` every test, and each "
          "geomean shape must give `bytes=` or `flops=`", False),
)
