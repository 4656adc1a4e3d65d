"""Operand checks the launchers share, so that every kernel words its errors the same way."""

from __future__ import annotations

import torch
import triton


def require_tensor(where: str, name: str, value) -> None:
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{where}: {name} must be a torch.Tensor, got {type(value).__name__}")


def require_dtype(where: str, dtype: torch.dtype, supported) -> None:
    if dtype not in supported:
        raise TypeError(f"{where}: dtype {dtype} is not supported; expected one of "
                        f"{', '.join(str(d) for d in supported)}")


def output(where: str, name: str, given, shape, dtype: torch.dtype, device: torch.device,
           *, inputs: dict | None = None, same_place_ok: bool = False, **alloc) -> torch.Tensor:
    """The output tensor `name`: `given` if it is `shape` `dtype` on `device` (else an error
    naming it), a new torch.empty(shape, **alloc) when None.

    A given output must not have elements that share memory (an expanded tensor: every program
    would write the same place), and must not overlap any of `inputs` (name: tensor), which the
    kernel may read after it has written there; same_place_ok allows an output that is exactly
    an input (an elementwise or row-wise kernel reads each place before writing it)."""
    shape = tuple(shape)
    if given is None:
        return torch.empty(shape, dtype=dtype, device=device, **alloc)
    require_tensor(where, name, given)
    if tuple(given.shape) != shape or given.dtype != dtype or given.device != device:
        raise ValueError(f"{where}: {name} must be {shape} {dtype} on {device}, got "
                         f"{tuple(given.shape)} {given.dtype} on {given.device}")
    if not _one_place_per_element(given):
        raise ValueError(f"{where}: {name} has elements that share memory (strides "
                         f"{given.stride()}, e.g. an expanded tensor); give a tensor with one "
                         "place per element")
    for other_name, t in (inputs or {}).items():
        if t is None or not _overlap(given, t):
            continue
        if same_place_ok and given.data_ptr() == t.data_ptr() and given.shape == t.shape \
                and given.stride() == t.stride():
            continue
        raise ValueError(f"{where}: {name} overlaps the memory of {other_name}; "
                         + ("give the same tensor for both, or one that does not overlap it"
                            if same_place_ok else "give an output that does not overlap it"))
    return given


def _span(t: torch.Tensor) -> tuple[int, int]:
    """The bytes [start, end) of t's storage its elements can touch."""
    start = t.data_ptr()
    if t.numel() == 0:
        return start, start
    last = sum((size - 1) * stride for size, stride in zip(t.shape, t.stride()))
    return start, start + (last + 1) * t.element_size()


def _overlap(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether a and b may touch the same bytes (by the ranges they span: conservative)."""
    if a.device != b.device or a.numel() == 0 or b.numel() == 0:
        return False
    (a0, a1), (b0, b1) = _span(a), _span(b)
    return a0 < b1 and b0 < a1


def config_values(where: str, cfg: dict, *, powers_of_two=(), at_least=None, positive=(),
                  flags=()) -> dict:
    """Check a launch config's values, naming the launcher and the key: `powers_of_two` keys are
    ints that are powers of two (at least at_least[key] where given), `positive` keys ints >= 1
    (None allowed where the key may be absent), `flags` bools."""
    at_least = at_least or {}
    for key in powers_of_two:
        value = cfg.get(key)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1 \
                or value & (value - 1):
            raise ValueError(f"{where}: config {key}={value!r} must be a power of two")
        if value < at_least.get(key, 1):
            raise ValueError(f"{where}: config {key}={value!r} must be at least "
                             f"{at_least[key]}")
    for key in positive:
        value = cfg.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                  or value < 1):
            raise ValueError(f"{where}: config {key}={value!r} must be an integer >= 1")
    for key in flags:
        value = cfg.get(key)
        if value is not None and not isinstance(value, bool):
            raise ValueError(f"{where}: config {key}={value!r} must be True or False")
    return cfg


def with_overrides(defaults: dict, overrides: dict | None, where: str, *,
                   powers_of_two: tuple[str, ...] = ()) -> dict:
    """A launcher's heuristic launch parameters, with a caller's overrides (tuning sweeps)."""
    if overrides is not None and not isinstance(overrides, dict):
        raise TypeError(f"{where}: config must be a dict of launch parameters, got "
                        f"{type(overrides).__name__}")
    if not overrides:
        return defaults
    unknown = sorted(set(overrides) - set(defaults))
    if unknown:
        raise ValueError(f"{where}: unknown config key(s) {unknown}; expected some of "
                         f"{sorted(defaults)}")
    cfg = {**defaults, **overrides}
    # the value's kind follows the default's: flags stay bools, counts are integers >= 1 (a
    # default of None is an optional count: programs_per_sm, maxnreg)
    flags = [k for k in overrides if isinstance(defaults[k], bool)]
    counts = [k for k in overrides if k not in powers_of_two and k not in flags
              and (defaults[k] is None or isinstance(defaults[k], int))]
    return config_values(where, cfg, powers_of_two=powers_of_two, positive=counts, flags=flags)


def launch_config(where: str, config, keys: tuple[str, ...]) -> dict:
    """A triton.Config a caller gives an autotuned launcher instead of its autotuning, as the
    launch's keyword arguments (meta-parameters, num_warps, num_stages): it must hold every
    meta-parameter of `keys`, each a power of two, as are its warps."""
    if not isinstance(config, triton.Config):
        raise TypeError(f"{where}: config must be a triton.Config, got {type(config).__name__}")
    missing = set(keys) - set(config.kwargs)
    if missing:
        raise ValueError(f"{where}: config lacks {sorted(missing)}")
    return config_values(where, dict(config.all_kwargs()), powers_of_two=(*keys, "num_warps"),
                         positive=("num_stages",))


def _one_place_per_element(t: torch.Tensor) -> bool:
    """No two elements of `t` share memory (no stride 0 over a dimension of more than one
    element, no overlap): a kernel may write every element of it."""
    dims = sorted((stride, size) for size, stride in zip(t.shape, t.stride()) if size > 1)
    extent = 1
    for stride, size in dims:
        if stride < extent:
            return False
        extent = stride * size
    return True
