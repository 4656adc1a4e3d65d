"""The tensors a function captures: what a checked `fn` (triton_bench's timed call,
assert_deterministic's) can read and write besides its arguments."""

from __future__ import annotations

import functools

import torch


def captured(fn, depth: int = 3) -> list[tuple[str, torch.Tensor]]:
    """(name, tensor) for every tensor `fn` captures: closure cells and default arguments (by
    their variable names), functools.partial's arguments, module globals it names, tensors in
    tuples, lists and dicts among them, and those of the functions it captures in turn."""
    found: list[tuple[str, torch.Tensor]] = []
    seen: set[int] = set()

    def add(name: str, value, level: int) -> None:
        if id(value) in seen:
            return
        seen.add(id(value))
        if isinstance(value, torch.Tensor):
            found.append((name, value))
        elif level > 0 and isinstance(value, (tuple, list)):
            for i, v in enumerate(value[:64]):
                add(f"{name}[{i}]", v, level - 1)
        elif level > 0 and isinstance(value, dict):
            for k, v in list(value.items())[:64]:
                add(f"{name}[{k!r}]", v, level - 1)
        elif level > 0 and callable(value) and not isinstance(value, type):
            visit(value, level - 1)

    def visit(f, level: int) -> None:
        if isinstance(f, functools.partial):
            add("partial", f.func, level)
            for i, v in enumerate(f.args):
                add(f"args[{i}]", v, level)
            for k, v in f.keywords.items():
                add(k, v, level)
            return
        f = getattr(f, "__func__", f)  # a bound method: its function
        code = getattr(f, "__code__", None)
        if code is None:
            return
        for name, cell in zip(code.co_freevars, getattr(f, "__closure__", None) or ()):
            try:
                add(name, cell.cell_contents, level)
            except ValueError:  # an empty cell
                pass
        for i, v in enumerate(getattr(f, "__defaults__", None) or ()):
            add(f"default[{i}]", v, level)
        for k, v in (getattr(f, "__kwdefaults__", None) or {}).items():
            add(k, v, level)
        g = getattr(f, "__globals__", {})
        for name in code.co_names:
            if isinstance(g.get(name), torch.Tensor):
                add(name, g[name], level)

    seen.add(id(fn))
    visit(fn, depth)
    return found
