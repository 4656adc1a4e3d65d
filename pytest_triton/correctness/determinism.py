"""assert_deterministic: the same inputs, run after run, give bit-identical outputs.

Races (two programs writing one tile), order-dependent atomics (a float sum whose order follows
the programs' arrival) and reads of stale or uninitialised memory all show up as outputs that
differ between runs of the same call, usually in the last bits, where assert_close's tolerance
hides them.

Under Triton's interpreter programs run one at a time, in a fixed order: repeating a call there
shows stale state, but not a result that depends on the order programs run in. So the runs there
take each launch's programs in different orders (env/interpreter/program_order.py): the first in launch
order, the second reversed, the rest shuffled. A float atomic sum or two programs writing one
element then differ between runs, as they would between runs on a GPU. Races between programs
running at the same time cannot show on CPU (each program runs whole before the next): the
test's report section says so, and a GPU run checks them.
"""

from __future__ import annotations

import math

import torch

from ..env import dtypes, seeding
from ..env.interpreter import program_order
from ..env.interpreter.base import interpreting
from . import call_record, inputs
from .comparison_steps import bits, index_of
from .tensors import poison_value

MAX_LISTED = 8


def _collect(value, name: str, into: list) -> None:
    """(name, tensor) for every tensor in fn's result (tensors, tuples, lists, dicts of them)."""
    if isinstance(value, torch.Tensor):
        into.append((name, value))
    elif isinstance(value, (tuple, list)):
        for i, v in enumerate(value):
            _collect(v, f"{name}[{i}]", into)
    elif isinstance(value, dict):
        for k, v in value.items():
            _collect(v, f"{name}[{k!r}]", into)
    elif value is not None:
        raise TypeError(f"assert_deterministic: fn returned {type(value).__name__} at {name}; "
                        "expected tensors (or tuples, lists, dicts of them, or None with outputs=)")


def _tensors(result) -> list[torch.Tensor]:
    found: list = []
    _collect(result, "result", found)
    return [t for _, t in found]


def _snapshot(result, outputs) -> list[tuple[str, torch.Tensor]]:
    found: list = []
    _collect(result, "result", found)
    for i, t in enumerate(outputs):
        found.append((f"outputs[{i}]", t))
    return [(name, t.detach().clone(memory_format=torch.contiguous_format)) for name, t in found]


def _ulps(a: torch.Tensor, b: torch.Tensor) -> int | None:
    """Units in the last place between two floats of the same sign (their bit patterns' distance)."""
    if not a.dtype.is_floating_point or not (torch.isfinite(a) & torch.isfinite(b)):
        return None
    if bool(torch.signbit(a)) != bool(torch.signbit(b)):
        return None
    return abs(int(bits(a.reshape(1))[0]) - int(bits(b.reshape(1))[0]))


def _describe_difference(name: str, first: torch.Tensor, other: torch.Tensor, run: int,
                         detail: bool) -> list[str]:
    shape = tuple(first.shape)
    dtype = dtypes.name(first.dtype)
    differ = (bits(first) != bits(other)).reshape(-1) if first.dim() else \
        (bits(first) != bits(other)).reshape(1)
    if differ.dim() > 1:  # complex: real and imaginary parts
        differ = differ.any(-1)
    n = int(differ.sum())
    total = first.numel()
    lines = [f"  {name} ({dtype}, shape {shape}): {n} / {total} elements differ "
             f"({100.0 * n / max(total, 1):.3g}%)"]
    if not detail:
        return [f"{name}: {n} / {total} elements differ"]
    idx = torch.nonzero(differ).flatten()
    a = first.reshape(-1)
    b = other.reshape(-1)
    if a.dtype.is_floating_point or a.is_complex():
        da, db = a[idx].to(torch.complex128 if a.is_complex() else torch.float64), \
            b[idx].to(torch.complex128 if a.is_complex() else torch.float64)
        gap = (da - db).abs()
        finite = torch.isfinite(gap)
        if bool(finite.any()):
            k = int(torch.argmax(torch.where(finite, gap, torch.zeros_like(gap))))
            i = int(idx[k])
            rel = float(gap[k]) / abs(complex(da[k])) if complex(da[k]) != 0 else math.inf
            ulps = _ulps(a[i], b[i])
            far = f", {ulps} ulp" if ulps is not None else ""
            lines.append(f"    farthest apart at index {index_of(i, shape)}: run 1 {a[i].item():.9g}, "
                         f"run {run} {b[i].item():.9g} (|difference| {float(gap[k]):.3g}, "
                         f"relative {rel:.3g}{far})")
        n_nan = int((~finite).sum())
        if n_nan:
            lines.append(f"    {n_nan} of them NaN or Inf in one run and not the other, or NaNs "
                         "with different bits")
    elif a.dtype != torch.bool:
        gap = (a[idx].to(torch.int64) - b[idx].to(torch.int64)).abs()
        k = int(torch.argmax(gap))
        i = int(idx[k])
        lines.append(f"    farthest apart at index {index_of(i, shape)}: run 1 {a[i].item()}, "
                     f"run {run} {b[i].item()}")
    shown = [str(index_of(int(i), shape)) for i in idx[:MAX_LISTED]]
    more = ", ..." if n > MAX_LISTED else ""
    lines.append(f"    first differing indices: {', '.join(shown)}{more}")
    return lines


def _orders(runs: int, reorder: bool) -> list[str] | None:
    """The program order of each run under the interpreter (None: not interpreting)."""
    if not interpreting():
        return None
    if not reorder:
        return ["launch"] * runs
    return ["launch", "reversed"] + ["shuffled"] * (runs - 2)


def _run(fn, outputs, order: str | None, seed: int):
    for t in outputs:
        t.detach().fill_(poison_value(t.dtype))
    if order is None:
        return fn(), None
    with program_order.program_order(order, seed) as record:
        return fn(), record


def assert_deterministic(fn, *, runs: int = 3, outputs=(), msg: str | None = None,
                         reorder_programs: bool = True, inplace=None):
    """Run `fn()` `runs` times on the same inputs and assert bit-identical outputs.

    fn returns a tensor, or tuples, lists or dicts of tensors (or None when it writes only into
    `outputs`). outputs: buffers fn writes into; refilled with poison before each run, so that an
    element one run leaves unwritten shows as a difference. Returns the first run's result.
    Under Triton's interpreter the runs take each launch's programs in launch, reversed and
    shuffled order (reorder_programs=False: launch order only, for kernels whose programs wait
    on programs launched before them, which would wait forever when run first).
    inplace: the tensors fn captures and writes by design (their names, or the tensors): each run
    starts from their values before the first. Any other input fn writes into (a make_tensor
    input it captures) fails at once, naming it: its runs would see different inputs.
    """
    __tracebackhide__ = True
    if isinstance(runs, bool) or not isinstance(runs, int) or runs < 2:
        raise ValueError(f"assert_deterministic: runs={runs!r} must be an int >= 2")
    if not callable(fn):
        raise TypeError(f"assert_deterministic: fn must be callable, got {type(fn).__name__}")
    outputs = list(outputs)
    for t in outputs:
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"assert_deterministic: outputs must be tensors, got {type(t).__name__}")
    orders = _orders(runs, reorder_programs)
    watched = inputs.Watched(fn, outputs, inplace)
    snapshots, records, first_result = [], [], None
    for r in range(runs):
        watched.restore()
        result, record = _run(fn, outputs, orders and orders[r], r)
        if r == 0:
            first_result = result
            mutated = watched.changed(_tensors(result), tracked_only=True)
            if mutated:
                raise AssertionError("\n".join(([msg] if msg else []) + [
                    "assert_deterministic: input mutation, not a determinism failure: the first "
                    "run of fn wrote into its input, so each run would see what the run before "
                    "left:"] + [f"  {m}" for m in mutated] + [
                    "A kernel that writes into a tensor it reads hands its next caller (and the "
                    "reference) altered data. If fn is in place by design, pass inplace=[...] "
                    "(names or tensors): each run then starts from the values before the first."]))
        snapshots.append(_snapshot(result, outputs))
        records.append(record)
    if not snapshots[0]:
        raise TypeError("assert_deterministic: fn returned no tensors and no outputs= were given: "
                        "nothing to compare")

    def run(i: int) -> str:
        if orders is None or not records[i].programs:
            return f"run {i + 1}"
        return f"run {i + 1} (programs {program_order.describe(orders[i])})"

    problems, differing_runs = _compare(snapshots, run)
    if not problems:
        if orders is not None:
            call_record.note(_interpreter_note(runs, orders, records))
        return first_result
    head = [msg] if msg else []
    head.append(f"Not deterministic: {len(differing_runs)} of {runs - 1} repeated runs of the same "
                "call on the same inputs differ from the first, bit for bit (a race between "
                "programs, an order-dependent atomic sum, or stale or uninitialised memory read):")
    changed = watched.changed(_tensors(first_result))
    if changed:
        problems.append("fn also changed tensors it captures, so the runs did not see the same "
                        "values: " + "; ".join(changed) + " (an input it writes into: pass "
                        "inplace=[...] to start each run from the values before the first)")
    if orders is not None and any(rec.programs for rec in records) and len(set(orders)) > 1:
        problems.append(_order_diagnosis(fn, outputs, snapshots, runs))
    seed = seeding.CURRENT.get()
    tail = [f"Seed: {seed.describe()}" if seed else "Seed: none (not inside a pytest-triton test)"]
    raise AssertionError("\n".join(head + problems + tail))


def _order_diagnosis(fn, outputs, snapshots, runs: int) -> str:
    """Under the interpreter, after a failure: one more run in launch order tells a result that
    depends on the programs' order (the repeat matches run 1) from one that changes whatever the
    order (stale state, uninitialised memory: the repeat differs too)."""
    result, _ = _run(fn, outputs, "launch", runs)
    again = _snapshot(result, outputs)
    first = snapshots[0]
    same = [n for n, _ in again] == [n for n, _ in first] and all(
        a.shape == b.shape and a.dtype == b.dtype and torch.equal(bits(a), bits(b))
        for (_, a), (_, b) in zip(first, again))
    if same:
        return ("Under Triton's interpreter programs run one at a time; the runs took each "
                "launch's programs in different orders, and a repeat in launch order matches run "
                "1: the result depends on the order the programs run in (a float atomic_add, "
                "programs writing one element, a program reading what another wrote), which on a "
                "GPU varies from run to run.")
    return ("A repeat in launch order differs from run 1 too: the result changes from call to "
            "call whatever the programs' order (state left by an earlier call, uninitialised "
            "memory read).")


def _compare(snapshots, run) -> tuple[list[str], list[int]]:
    first = snapshots[0]
    problems: list[str] = []
    differing_runs = []
    for r in range(1, len(snapshots)):
        other = snapshots[r]
        if [n for n, _ in other] != [n for n, _ in first]:
            problems.append(f"{run(r)} returned {[n for n, _ in other]}, {run(0)} "
                            f"{[n for n, _ in first]}")
            differing_runs.append(r + 1)
            continue
        detail = not differing_runs  # the first run that differs in full, later ones in brief
        lines = []
        for (name, a), (_, b) in zip(first, other):
            if a.shape != b.shape or a.dtype != b.dtype:
                lines.append(f"  {name}: run 1 gave {a.dtype} {tuple(a.shape)}, run {r + 1} "
                             f"{b.dtype} {tuple(b.shape)}")
            elif not torch.equal(bits(a), bits(b)):
                lines += _describe_difference(name, a, b, r + 1, detail)
        if lines:
            differing_runs.append(r + 1)
            if detail:
                problems.append(f"{run(r)} differs from {run(0)}:")
                problems += lines
            else:
                problems.append(f"{run(r)} differs from run 1 too: "
                                + "; ".join(ln.strip() for ln in lines))
    return problems, differing_runs


def _interpreter_note(runs: int, orders: list[str], records) -> str:
    """A passing check under the interpreter: what it covered, and what it could not."""
    if not any(rec.programs for rec in records):
        how = "no interpreted kernel launch was seen, so no program order was varied"
    elif len(set(orders)) == 1:
        how = "each launch's programs in launch order only (reorder_programs=False)"
    else:
        kinds = list(dict.fromkeys(program_order.describe(o).split()[1] for o in orders))
        how = (f"each launch's programs run in {', '.join(kinds[:-1])} and {kinds[-1]} order "
               "(Triton's interpreter runs them one at a time)")
    return (f"assert_deterministic: {runs} runs bit-identical, {how}; races between programs "
            "running at the same time cannot be checked on CPU (each program runs whole before "
            "the next): a GPU run checks them")
