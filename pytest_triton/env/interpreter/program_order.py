"""Under Triton's interpreter, run each launch's programs in another order.

The interpreter runs a launch's programs one at a time, always in the same order: program ids
(0, 0, 0), (0, 0, 1), ..., the last axis fastest. A result that depends on the order programs
run in (a float tl.atomic_add whose sum follows the order of arrival, two programs writing one
element, a program reading what another wrote) is therefore the same on every run there, and
repeating a call cannot show it; a GPU runs the programs concurrently, in no fixed order.

`program_order(order, seed)` drives the interpreter's grid loop in another order for the launches
made inside it: "launch" (the interpreter's own), "reversed" (the last program first) or
"shuffled" (a permutation drawn from `seed`, another for each launch). The loop itself is
Triton's; what changes is the program id each step of it runs: the builder's set_grid_idx, which
the loop calls before each program, maps the step to the program of that position in the order.

What no order can show: races between programs running at the same time (a read of an element
another program is writing, an atomic that is not), since each program still runs whole before
the next starts. Those need a GPU.
"""

from __future__ import annotations

import contextlib
import random
from dataclasses import dataclass

from .base import Patches

ORDERS = ("launch", "reversed", "shuffled")


@dataclass
class Reordered:
    """What ran inside program_order: interpreted launches and programs."""
    order: str
    launches: int = 0
    programs: int = 0


def describe(order: str) -> str:
    return {"launch": "in launch order", "reversed": "in reverse order",
            "shuffled": "in shuffled order"}[order]


@contextlib.contextmanager
def program_order(order: str, seed: int = 0):
    """Inside, every interpreted launch runs its programs in `order`; yields a Reordered record.
    Nothing changes for kernels compiled for a GPU (their launches do not pass through here)."""
    if order not in ORDERS:
        raise ValueError(f"program_order: order {order!r} is not one of {', '.join(ORDERS)}")
    from triton.runtime import interpreter as ti

    record = Reordered(order)
    original = ti.InterpreterBuilder.set_grid_idx
    state: dict = {"perm": None}

    def set_grid_idx(self, x, y, z):
        nx, ny, nz = self.grid_dim
        step = (x * ny + y) * nz + z
        total = nx * ny * nz
        if step == 0:  # the loop starts a launch
            record.launches += 1
            state["perm"] = None
        if order == "shuffled" and (state["perm"] is None or len(state["perm"]) != total):
            perm = list(range(total))
            random.Random(f"{seed}:{record.launches}").shuffle(perm)
            state["perm"] = perm
        record.programs += 1
        if order == "launch":
            target = step
        elif order == "reversed":
            target = total - 1 - step
        else:
            target = state["perm"][step]
        return original(self, target // (ny * nz), (target // nz) % ny, target % nz)

    patches = Patches()
    patches.set_attr(ti.InterpreterBuilder, "set_grid_idx", set_grid_idx)
    try:
        yield record
    finally:
        patches.undo()
