"""--triton-judge: what the timed call reads and writes, found by changing what it captures.

After the timing, untimed, each floating-point tensor fn captures (inputs.captured) is in turn
perturbed (its own values moved along by a random offset and scaled by 1 + u/16, u uniform in
[0, 1): the same signs and magnitudes, so no input becomes invalid, and no sum, maximum or sort
is left unchanged), and fn is called once:
- a tensor fn overwrote entirely (it holds what it held after the timing) is an output;
- a tensor fn left as perturbed is an input, unless the timing changed it (an idempotent
  in-place op: relu into x); then fn's outputs, what it returns and the captured outputs, must
  change: a call whose outputs stay the same whatever its inputs hold returns results kept from
  an earlier call (gpu-mode reference-kernels #104, #142, #160: caches keyed by pointer, shape or
  id);
- a tensor fn changed into something else is both read and written: an input it mutates, unless
  declared in place.
Outputs that stayed the same get a second look, the inputs read doubled (_moved_when_doubled).
A returned tensor that shares storage with an input is an aliased output. Everything is put back
as it was after the timing, so the test's own checks see the results of its own inputs.
"""

from __future__ import annotations

import torch

from ..correctness import inputs
from ..correctness.comparison_steps import bits
from .checks import Call

MAX_PROBED = 16  # tensors probed per call; the rest are left alone
SCALE = 1.0 / 16


def tensors(value) -> list[torch.Tensor]:
    """The tensors in a call's result (a tensor, or tuples, lists and dicts of them)."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (tuple, list)):
        return [t for v in value for t in tensors(v)]
    if isinstance(value, dict):
        return [t for v in value.values() for t in tensors(v)]
    return []


def _close(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal up to the last bits a float atomic's order of arrival changes."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    a, b = a.detach().double(), b.detach().to(a.device).double()
    same_nan = torch.isnan(a) == torch.isnan(b)
    if not bool(same_nan.all()):
        return False
    finite = torch.isfinite(a) & torch.isfinite(b)
    if not bool(((a == b) | finite).all()):
        return False
    a, b = torch.where(finite, a, 0.0), torch.where(finite, b, 0.0)
    rms = float(b.pow(2).mean().sqrt()) if b.numel() else 0.0
    return bool(((a - b).abs() <= 1e-2 * b.abs() + 1e-3 * rms + 1e-30).all())


def _perturbed(t: torch.Tensor, seed: int) -> torch.Tensor | None:
    """`t`'s values moved by a random offset and scaled by 1 + u/16 (u drawn on t's device: a
    tensor of 256 MB takes a pass, not a permutation on the host); None when that changes
    nothing (a constant tensor)."""
    g = torch.Generator(device=t.device).manual_seed(seed)
    flat = t.detach().reshape(-1)
    n = flat.numel()
    shift = int(torch.randint(1, n, (1,), generator=g, device=t.device))
    scale = 1 + SCALE * torch.rand(n, generator=g, dtype=torch.float32, device=t.device)
    new = (flat.roll(shift).float() * scale).to(t.dtype).reshape(t.shape)
    return None if torch.equal(bits(new), bits(t.detach())) else new


def _put(t: torch.Tensor, values: torch.Tensor) -> None:
    with torch.no_grad():
        t.copy_(values)


def _moved_when_doubled(fn, captured, read: list[str], out0, state: dict, sync) -> bool:
    """A second look before calling outputs cached: the inputs read, doubled (exact, signs kept),
    all at once. A reduction to a few low-precision numbers can stay within tolerance of itself
    under the first perturbation (on an H100, FlagGems' bf16 cross-entropy over 4096 random
    tokens of 128256 logits came out the same mean loss); doubled logits move it far. A cache
    keyed by pointer, shape or id returns the same outputs again."""
    by_name = dict(captured)
    try:
        for name in read:
            _put(by_name[name], state[name] * 2)
        ret = tensors(fn())
        sync()
        return any(not _close(r, r0) for r, r0 in zip(ret, out0)) or any(
            not _close(u, state[n]) for n, u in captured if n not in read)
    finally:
        for n, u in captured:
            _put(u, state[n])


def check(call: Call) -> str | None:
    """The watched call's check (checks.py), under --triton-judge: what fn reads and writes."""
    return "\n".join(run(call)) or None


def run(call: Call) -> list[str]:
    """The judge's findings for `call.fn` (its captured tensors, their values before the timing
    in `call.before_all`, name -> copy); an empty list when it reads and writes as an honest
    call does."""
    fn, captured, before, sync = call.fn, call.captured, call.before_all, call.sync
    declared_names, declared_storages, seed = call.declared_names, call.declared_storages, call.seed
    after = {name: inputs.snapshot(t) for name, t in captured}
    out0 = [inputs.snapshot(r) for r in tensors(fn())]
    sync()
    state = {name: inputs.snapshot(t) for name, t in captured}
    floats = [(n, t) for n, t in captured
              if t.dtype.is_floating_point and t.numel() > 1 and t.layout == torch.strided][:MAX_PROBED]
    read, written_too, outs, changed_by = [], [], [], {}
    try:
        for k, (name, t) in enumerate(floats):
            new = _perturbed(t, seed + k)
            if new is None:  # a constant tensor: shuffling changes nothing
                continue
            _put(t, new)
            ret = tensors(fn())
            sync()
            now = t.detach()
            timed_wrote = name in before and inputs.difference(before[name], after[name]) is not None
            if _close(now, state[name]):
                outs.append(name)
            elif torch.equal(bits(now.contiguous()), bits(new)) and not timed_wrote:
                read.append(name)
                moved = [r for r, r0 in zip(ret, out0) if not _close(r, r0)]
                moved += [n for n, u in captured if n != name and not _close(u, state[n])]
                changed_by[name] = bool(moved)
                for r in ret:
                    if inputs.storage_of(r) == inputs.storage_of(t):
                        return [f"aliased output: what the timed call returns is (a view of) its "
                                f"input {name}: nothing is computed into it (KernelBench #110)."]
            else:
                written_too.append(name)
            for n, u in captured:
                _put(u, state[n])
    finally:
        for n, u in captured:
            _put(u, state[n])
    problems = []
    mutated = [n for n in written_too if n not in declared_names and
               inputs.storage_of(dict(captured)[n]) not in declared_storages]
    if mutated:
        problems.append(
            f"input mutation: the timed call reads and writes {', '.join(mutated)}: with their "
            "values changed, it wrote something else into them than it had, so each call sees "
            "what the one before left (KernelBench PR #82's zero_out_kernel). "
            + inputs.HOW_TO_DECLARE.format(name=mutated[0]))
    has_outputs = bool(out0) or bool(outs)
    if read and has_outputs and not any(changed_by.values()) \
            and not _moved_when_doubled(fn, captured, read, out0, state, sync):
        problems.append(
            f"cached output: the timed call's outputs stayed the same when its inputs "
            f"({', '.join(read)}) were given other values: it returns results kept from an "
            "earlier call (gpu-mode reference-kernels #104, #142, #160 cached them by pointer, "
            "shape or id), and its time is that of a lookup.")
    return problems
