"""assert_grads_close: every input's gradient through a kernel's torch.autograd.Function against
float64 autograd of a reference, with the reduction-aware tolerances, naming the input whose
gradient is off.

A gradient is a sum wherever the forward broadcast its input: a weight of shape (N,) applied to
every row of a (M, N) output gets a gradient summed over M rows. So each input's reduction_size
defaults to its broadcast count (output elements per input element: M for that weight; None, the
elementwise tolerance, for an input the size of the output), counted per (output, input) pair and
summed over the differentiated outputs that depend on the input (found through the float64
reference's graph): an input that reaches only a small output is not given a large output's
count. Reductions inside the op (the row sums in a layernorm's dx) cannot be seen from shapes:
give them in reduction_sizes={"x": N}.
"""

from __future__ import annotations

import inspect
import textwrap

import torch

from ..env import dtypes, seeding
from . import baseline as _baseline
from . import closeness
from . import inputs as input_guard


def _names(reference, n: int, names) -> list[str]:
    if names is not None:
        names = list(names)
        if len(names) != n:
            raise ValueError(f"assert_grads_close: names has {len(names)} entries for {n} inputs")
        return [str(x) for x in names]
    try:
        params = [p for p in inspect.signature(reference).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        params = []
    if len(params) >= n:
        return [p.name for p in params[:n]]
    return [f"inputs[{i}]" for i in range(n)]


def _outputs(value, where: str) -> list[torch.Tensor | None]:
    """What `where` returned, as a list: tensors, and None entries (an autograd Function's outputs
    that are no tensors, `return y, None, None`), which are never differentiated."""
    outs = list(value) if isinstance(value, (tuple, list)) else [value]
    for j, o in enumerate(outs):
        if o is not None and not isinstance(o, torch.Tensor):
            at = f" at position {j} of its {len(outs)} outputs" if len(outs) > 1 else ""
            raise TypeError(f"assert_grads_close: {where} returned {type(o).__name__}{at}; "
                            "expected a tensor or a tuple of tensors (None entries are skipped)")
    if all(o is None for o in outs):
        raise TypeError(f"assert_grads_close: {where} returned no tensor "
                        f"({'None' if len(outs) == 1 else f'{len(outs)} None entries'})")
    return outs


def _chosen(outputs, outs: list) -> list[int]:
    """The indices of fn's outputs to differentiate (outputs=; default: every tensor)."""
    n = len(outs)
    if outputs is None:
        return [j for j, o in enumerate(outs) if o is not None]
    chosen = [outputs] if isinstance(outputs, int) else list(outputs)
    bad = [j for j in chosen if isinstance(j, bool) or not isinstance(j, int) or not -n <= j < n]
    if bad or not chosen or len({j % n for j in chosen}) != len(chosen):
        raise ValueError(f"assert_grads_close: outputs={tuple(chosen)}: fn returned {n} outputs; "
                         "give distinct indices of the outputs to differentiate")
    chosen = [j % n for j in chosen]
    none = [j for j in chosen if outs[j] is None]
    if none:
        raise ValueError(f"assert_grads_close: outputs={tuple(chosen)}: fn's output"
                         f"{'s' if len(none) > 1 else ''} {', '.join(map(str, none))} "
                         f"{'are' if len(none) > 1 else 'is'} None, nothing to differentiate")
    return chosen


def _reaches(outs, leaves, grad_outputs) -> list[list[bool]]:
    """reaches[j][k]: output j of the (float64) reference depends on leaf k."""
    reaches = []
    for o, g in zip(outs, grad_outputs):
        if not o.requires_grad:
            reaches.append([False] * len(leaves))
            continue
        grads = torch.autograd.grad(o, leaves, g.to(o.dtype), retain_graph=True,
                                    allow_unused=True)
        reaches.append([gr is not None for gr in grads])
    return reaches


def _differentiable(t) -> bool:
    return isinstance(t, torch.Tensor) and (t.dtype.is_floating_point or t.is_complex())


def _default_grad_outputs(outs: list[torch.Tensor]) -> list[torch.Tensor]:
    seed = seeding.CURRENT.get()
    g = torch.Generator(device=outs[0].device)
    g.manual_seed((seed.seed if seed else 0) ^ 0x5EED)
    return [torch.randn(o.shape, generator=g, device=o.device, dtype=torch.float32).to(o.dtype)
            for o in outs]


def _forward(fn, inputs, diff, dtype, where: str):
    """fn on fresh leaves copied from inputs (the differentiable ones in `dtype`, or their own
    when None): (outputs, leaves)."""
    leaves, args = [], []
    for t, d in zip(inputs, diff):
        if d:
            leaf = t.detach().to(dtype or t.dtype).clone().requires_grad_(True)
            leaves.append(leaf)
            args.append(leaf)
        else:
            args.append(t)
    return _outputs(fn(*args), where), leaves


def _backward(outs, leaves, grad_outputs, where: str) -> list:
    if len(grad_outputs) != len(outs):
        raise ValueError(f"assert_grads_close: {len(grad_outputs)} grad_outputs for {len(outs)} "
                         f"outputs of {where}")
    # Each backward gets its own copy of the incoming gradients: a kernel's backward may
    # overwrite its incoming gradient in place (RoPE and RMSNorm kernels do), which would
    # otherwise corrupt the reference's (and the caller's tensors).
    pairs = [(o, g.detach().to(o.dtype, copy=True)) for o, g in zip(outs, grad_outputs)
             if o.requires_grad]
    if not pairs:
        raise AssertionError(f"assert_grads_close: no output of {where} requires grad: is it a "
                             "torch.autograd.Function (or differentiable torch ops)?")
    return list(torch.autograd.grad([o for o, _ in pairs], leaves, [g for _, g in pairs],
                                    allow_unused=True))


def _torch_precision_note(name, got, want, own, reduction_size, precision, factor) -> str | None:
    """When the table rejects a gradient that is no further off than reference's own gradient
    in the inputs' dtype (torch's arithmetic at that precision), a note that says so and names
    baseline=True; None otherwise (the kernel is worse than torch at its precision)."""
    if own is None or got.dtype == torch.float64 or not got.dtype.is_floating_point:
        return None
    factor = _baseline.DEFAULT_FACTOR if factor is None else factor
    floor = closeness.tolerance_for(got.dtype, reduction_size=reduction_size,
                                  precision=precision).atol
    a, e, b = got.detach().double(), want.detach().double(), own.detach().double()
    finite = torch.isfinite(e)
    if not bool((finite & torch.isfinite(a)).eq(finite).all()) or not bool(
            (finite & torch.isfinite(b)).eq(finite).all()):
        return None
    k_max, _, k_mean = _baseline._error_stats(a, e, finite)
    b_max, _, b_mean = _baseline._error_stats(b, e, finite)
    beyond = torch.where(finite, (a - e).abs() - _baseline._half_ulp(e, got.dtype),
                         torch.zeros_like(e))
    if float(beyond.max()) > factor * b_max + floor or k_mean > factor * b_mean + floor:
        return None
    dtype = dtypes.name(got.dtype)
    return (f"Note: reference's own {dtype} gradient of {name} (reference run in {dtype}, as "
            f"torch computes it) is off by as much: max |error| {b_max:.3g}, mean {b_mean:.3g}; "
            f"this gradient's {k_max:.3g}, {k_mean:.3g} (within {factor:g}x + {floor:.3g}). The "
            f"table assumes a kernel that computes in float32 and rounds once; one that "
            f"computes in {dtype} as torch does passes with assert_grads_close(..., "
            f"baseline=True).")


@input_guard.costed()
def _mutated(inputs, diff, leaves, before, labels, inplace) -> str | None:
    """fn's forward and backward must leave its inputs as they were: the differentiable ones (fn
    got copies: compared with the originals) and the others (fn got them: compared with copies
    taken before), but those named in `inplace`."""
    names, storages = input_guard.declared(inplace)
    found, k = [], 0
    for i, (t, d) in enumerate(zip(inputs, diff)):
        if d:
            now, k = leaves[k], k + 1
            was = t.detach()
        elif i in before:
            now, was = t, before[i]
        else:
            continue
        if labels[i] in names or input_guard.storage_of(t) in storages:
            continue
        detail = input_guard.difference(was, now.detach())
        if detail is not None:
            found.append(f"  {labels[i]} ({input_guard.describe(t)}): {detail}")
    if not found:
        return None
    return "\n".join(["assert_grads_close: input mutation: fn's forward or backward wrote into its "
                      "input:", *found, "The reference ran on copies and did not see it; fn's "
                      "callers (and its own backward) do. " + input_guard.HOW_TO_DECLARE.format(
                          name=found[0].split()[0])])


def assert_grads_close(fn, reference, inputs, *, grad_outputs=None, outputs=None, names=None,
                       reduction_sizes=None, precision=None, baseline: bool = False,
                       baseline_factor: float | None = None, msg: str | None = None,
                       inplace=None):
    """Assert that fn's gradients match float64 autograd of `reference`, input by input.

    fn(*inputs): the kernel (e.g. MyFunction.apply); reference(*inputs): the same op in torch.
    Every floating-point tensor among inputs is differentiated; other inputs pass through as they
    are. outputs: the indices of the outputs to differentiate (default: all; e.g. (0,) for a
    kernel that also returns statistics it does not differentiate), the same for fn and
    reference. grad_outputs: the gradient fed to each differentiated output, in that order
    (default: standard normal, seeded by the test); each backward gets its own copy. names: one
    per input (default: reference's parameter names). reduction_sizes: {name: K} (or one per
    input), the terms summed into each element of that input's gradient (default: its broadcast
    count, summed over the differentiated outputs that depend on it; see the module doc).
    precision: as assert_close's ("tf32" for float32 inputs whose kernel uses tf32 dots).
    baseline=True: instead of the tolerance table, each gradient's error may be at most
    baseline_factor (default 2) times that of reference's own gradients computed in the inputs'
    dtype (FlashAttention's rule; assert_close(baseline=)). inplace: the inputs fn writes by
    design (names, or the tensors); any other input fn's forward or backward changes fails,
    naming it (correctness/inputs.py).

    Fails naming every input whose gradient is off, with assert_close's report for each. Returns
    fn's outputs (detached), for checking the forward too.
    """
    __tracebackhide__ = True
    if not callable(fn) or not callable(reference):
        raise TypeError("assert_grads_close: fn and reference must be callable")
    inputs = list(inputs)
    diff = [_differentiable(t) for t in inputs]
    if not any(diff):
        raise ValueError("assert_grads_close: no floating-point tensor among the inputs to "
                         "differentiate")
    labels = _names(reference, len(inputs), names)
    if isinstance(reduction_sizes, dict):
        unknown = set(reduction_sizes) - set(labels)
        if unknown:
            raise ValueError(f"assert_grads_close: reduction_sizes names {sorted(unknown)}, which "
                             f"are not inputs ({', '.join(labels)})")
        sizes = [reduction_sizes.get(n) for n in labels]
    elif reduction_sizes is None:
        sizes = [None] * len(inputs)
    else:
        sizes = list(reduction_sizes)
        if len(sizes) != len(inputs):
            raise ValueError(f"assert_grads_close: reduction_sizes has {len(sizes)} entries for "
                             f"{len(inputs)} inputs")

    guarded = input_guard.ENABLED.get()
    before = {i: input_guard.snapshot(t) for i, (t, d) in enumerate(zip(inputs, diff))
              if guarded and not d and isinstance(t, torch.Tensor)}
    all_outs, leaves = _forward(fn, inputs, diff, None, "fn")
    chosen = _chosen(outputs, all_outs)
    outs = [all_outs[j] for j in chosen]

    def pick(value, where):
        """reference's outputs that pair with fn's chosen ones: by position when it returned as
        many as fn; else, without outputs=, its tensors in order (a torch reference returns y
        where an autograd Function returns y, None, None)."""
        if len(value) == len(all_outs):
            picked = [value[j] for j in chosen]
        elif outputs is None and len([v for v in value if v is not None]) == len(chosen):
            picked = [v for v in value if v is not None]
        else:
            raise ValueError(f"assert_grads_close: {where} returned {len(value)} outputs, fn "
                             f"{len(all_outs)}; outputs={tuple(chosen)}")
        if any(v is None for v in picked):
            raise ValueError(f"assert_grads_close: {where} returned None where fn returned a "
                             f"tensor (outputs={tuple(chosen)})")
        return picked

    if grad_outputs is None:
        grad_outputs = _default_grad_outputs(outs)
    grad_outputs = list(grad_outputs) if isinstance(grad_outputs, (tuple, list)) \
        else [grad_outputs]
    got = _backward(outs, leaves, grad_outputs, "fn")
    if guarded:
        input_guard.declare(inplace)
        mutated = _mutated(inputs, diff, leaves, before, labels, inplace)
        if mutated:
            raise AssertionError("\n".join(([msg] if msg else []) + [mutated]))
    ref_outs, ref_leaves = _forward(reference, inputs, diff, torch.float64, "reference")
    ref_outs = pick(ref_outs, "reference")
    grad64 = [g.to(torch.float64) for g in grad_outputs]
    # Which differentiated outputs each input reaches, for its broadcast count: with one
    # output, all of them (an input it does not reach gets no gradient from either side).
    reaches = _reaches(ref_outs, ref_leaves, grad64) if len(ref_outs) > 1 else \
        [[True] * len(ref_leaves)]
    want = _backward(ref_outs, ref_leaves, grad64, "reference")
    own = []  # reference's gradients in the inputs' own dtype (torch at that precision)

    def torch_grads():
        if not own:
            base_outs, base_leaves = _forward(reference, inputs, diff, None, "reference")
            own.append(_backward(pick(base_outs, "reference"), base_leaves, grad_outputs,
                                 "reference"))
        return own[0]

    base = torch_grads() if baseline else None

    failures, off, passed = [], [], []
    k = 0
    for i, (t, d) in enumerate(zip(inputs, diff)):
        if not d:
            continue
        name, g, w = labels[i], got[k], want[k]
        b = base[k] if base is not None else None
        k += 1
        size, source = sizes[i], "given"
        if size is None and t.numel():
            # The gradient sums, over every differentiated output that depends on this input,
            # that output's elements per element of the input (at least 1).
            counts = [(j, max(1, o.numel() // t.numel()))
                      for j, o, r in zip(chosen, ref_outs, reaches) if r[k - 1]]
            total = sum(c for _, c in counts)
            if total > 1:
                size = total
                source = "broadcast" if len(counts) == 1 else (
                    f"broadcast: {' + '.join(str(c) for _, c in counts)} from outputs "
                    f"{', '.join(str(j) for j, _ in counts)}")
        how = f"reduction_size={size} ({source})" if size and size > 1 else "elementwise"
        label = f"gradient of {name} ({dtypes.name(t.dtype)} {tuple(t.shape)}, {how})"
        if g is None:
            if w is not None and bool((w != 0).any()):
                failures.append(f"{label}: fn gave none (its backward returned None), the "
                                "reference's is not zero")
                off.append(name)
            continue
        if w is None:
            w = torch.zeros_like(g, dtype=torch.float64)
        size_arg = size if size and size > 1 else None
        # This function measures torch's own error at the inputs' precision itself (below).
        token = closeness.ARITHMETIC_KEYWORD.set(None)
        try:
            closeness.assert_close(g, w, reduction_size=size_arg, precision=precision, baseline=b,
                                 baseline_factor=baseline_factor, allow_trivial=False)
        except AssertionError as exc:
            report = str(exc)
            if b is None:
                note = _torch_precision_note(name, g, w, torch_grads()[k - 1], size_arg,
                                             precision, baseline_factor)
                report += f"\n{note}" if note else ""
            failures.append(f"{label}:\n{textwrap.indent(report, '    ')}")
            off.append(name)
        else:
            passed.append(f"{name} ({how})")
        finally:
            closeness.ARITHMETIC_KEYWORD.reset(token)
    if failures:
        lines = [msg] if msg else []
        lines.append(f"Gradients off for {len(off)} of {sum(diff)} inputs: {', '.join(off)}")
        lines += failures
        if passed:
            lines.append(f"Gradients that match: {', '.join(passed)}")
        raise AssertionError("\n".join(lines))
    if len(all_outs) == 1:
        return all_outs[0].detach()
    return [o.detach() if o is not None else None for o in all_outs]
