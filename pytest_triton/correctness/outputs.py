"""Output form: what a kernel hands back is a plain tensor holding values, not a promise of them.

gpu-mode reference-kernels #161: a submission returned placeholders (a tensor subclass, or a
tensor whose methods were overridden on the instance) and did the real work when the checker read
them, outside the timed call. KernelBench #110: an output that is a view of the input costs
nothing to "compute". Checked on assert_close's actual and on what a timed fn returns
(judge/timedcall.py): the type must be torch.Tensor itself (or nn.Parameter), no method may be
overridden on the instance, and it may not be a make_tensor input that no kernel changed.
"""

from __future__ import annotations

import torch

from . import inputs

PLAIN = (torch.Tensor, torch.nn.Parameter)


@inputs.costed()
def problem(t, what: str) -> str | None:
    """Why `t` is not a tensor a kernel computed (None when it is one); `what` names it."""
    if not isinstance(t, torch.Tensor):
        return None
    kind = type(t)
    if kind not in PLAIN:
        return (f"lazy output: {what} is a {kind.__module__}.{kind.__qualname__}, a subclass of "
                "torch.Tensor, whose values can be made when they are read (by the comparison, "
                "outside the timed call) rather than by the kernel (gpu-mode reference-kernels "
                "#161). Return a plain torch.Tensor; where the subclass is the library's own, "
                "compare t.as_subclass(torch.Tensor) after materialising it.")
    shadowed = sorted(k for k in vars(t) if hasattr(torch.Tensor, k))
    if shadowed:
        return (f"lazy output: {what} overrides torch.Tensor's {', '.join(shadowed)} on the "
                "instance, so reading it runs code of its own (gpu-mode reference-kernels #161)")
    return None


@inputs.costed()
def alias_problem(t: torch.Tensor, what: str) -> str | None:
    """`t` shares storage with a make_tensor input of the running test that a kernel received
    and never changed: nothing was computed into it."""
    g = inputs.guard()
    ptr = inputs.storage_of(t) if isinstance(t, torch.Tensor) else None
    if g is None or ptr is None or ptr in g.storages:
        return None
    for entry in g.inputs:
        x = entry.ref()
        if x is None or inputs.storage_of(x) != ptr or entry.name in g.names:
            continue
        if not entry.seen or entry.changed or (
                entry.copy is not None and inputs.difference(entry.copy, x) is not None):
            return None  # no kernel received it, or one wrote it: an in-place op's result
        return (f"aliased output: {what} is {entry.title()} or a view of it, unchanged: no "
                "kernel computed it, and a comparison with a reference made from that input "
                "passes whatever the kernel does (KernelBench #110). "
                + inputs.HOW_TO_DECLARE.format(name=entry.name or "x"))
    return None
