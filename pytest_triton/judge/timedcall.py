"""The timed call, watched: a plugin object around pytest_triton_measure (a hookwrapper, so that
whoever times fn, the plugin or a conftest, is watched the same) and pytest_triton_dry_call (the
one untimed call of a run without a GPU).

The checks of the call are the judge's (checks.py lists them, with when each runs; their costs
are in docs/judging.md), each `check(call) -> str | None` on the one `Call`: before and after it
the cheap ones, then under --triton-judge (or the triton_judge marker) the probe. The make_tensor
inputs fn captures are compared here too (correctness/inputs.py judges them when the test's call
ends), and what fn returns (correctness/outputs.py).
"""

from __future__ import annotations

import pytest

from ..correctness import checking, inputs, outputs
from ..env import seeding
from . import background_work, identities, launcherrors, probe, streams
from .checks import Call


class Watch:
    """One call (the timed call, or the dry run's) of `fn`, watched from before to after."""

    def __init__(self, item: pytest.Item, fn, when: str, judging: bool):
        self.item, self.fn, self.when = item, fn, when
        self.config = item.config
        self.judging = judging
        self.guard = inputs.guard()
        self.call = Call(self.config, fn, when, judging=judging, sync=_sync)

    def fail(self, why: str | None) -> None:
        __tracebackhide__ = True
        if why:
            pytest.fail(f"pytest-triton judge: {why}", pytrace=False)

    @checking.costed()
    def before(self) -> None:
        __tracebackhide__ = True
        self.fail(identities.check(self.call.at(f"before {self.when}")))
        self.call.census = background_work.take()
        self.captured = self.call.captured = inputs.captured(self.fn)
        tracked = {}
        if self.guard is not None:
            for entry in self.guard.inputs:
                t = entry.ref()
                if t is not None:
                    tracked[inputs.storage_of(t)] = entry
            self.guard.paused = True
        self.inputs = [(name, t, tracked[inputs.storage_of(t)]) for name, t in self.captured
                       if inputs.storage_of(t) in tracked]
        self.copies = [inputs.snapshot(t) for _, t, _ in self.inputs]
        self.call.before_all = {name: inputs.snapshot(t) for name, t in self.captured} \
            if self.judging else {}

    def resume(self) -> None:
        if self.guard is not None:
            self.guard.paused = False

    @checking.costed()
    def after(self, result=None, called: bool = True) -> None:
        __tracebackhide__ = True
        call = self.call
        self.fail(launcherrors.check(call))
        self.fail(identities.check(call.at(f"during {self.when}")))
        self.fail(background_work.check(call))
        if not called:  # the timed call's result: more calls, untimed, to look at it
            like = call.at(f"a call like {self.when}")
            problem = streams.check(like) if self.judging else None
            result = like.result if self.judging else self.fn()
            self.fail(launcherrors.check(call.at(f"a call after {self.when}")))
            self.fail(problem)
        self._check_inputs()
        self._check_result(result)

    @checking.costed("judge")
    def probe(self) -> None:
        """--triton-judge: what the call reads and writes (probe.py)."""
        __tracebackhide__ = True
        if self.judging:
            seed = seeding.CURRENT.get()
            call = self.call
            call.declared_names, call.declared_storages = self._declared()
            call.seed = seed.seed if seed else 0
            self.fail(probe.check(call))

    def _declared(self) -> tuple[set, set]:
        g = self.guard
        return (g.names, g.storages) if g is not None else (set(), set())

    def _check_inputs(self) -> None:
        if self.guard is None:
            return
        for (name, t, entry), copy in zip(self.inputs, self.copies):
            detail = inputs.difference(copy, t)
            if detail is not None:
                entry.changed = True
                title = f"{name} ({entry.label}, made by make_tensor at {entry.where})"
                self.guard.changes.append(inputs.Change(
                    title, (name, entry.name), inputs.storage_of(t), detail, self.when,
                    f"the end of {self.when}"))

    def _check_result(self, result) -> None:
        __tracebackhide__ = True
        names, storages = self._declared()
        for r in probe.tensors(result):
            self.fail(outputs.problem(r, f"what {self.when}'s fn returns"))
            ptr = inputs.storage_of(r)
            for name, t, entry in self.inputs:
                if inputs.storage_of(t) == ptr and not entry.changed and name not in names \
                        and entry.name not in names and ptr not in storages:
                    self.fail(f"aliased output: what {self.when}'s fn returns is (a view of) its "
                              f"input {name}, unchanged: nothing is computed into it, and the "
                              "call times nothing (KernelBench #110). "
                              + inputs.HOW_TO_DECLARE.format(name=name))


def _sync() -> None:
    launcherrors.pending()
