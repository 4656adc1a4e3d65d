"""Operand checks the launchers share, so that every kernel words its errors the same way."""

from __future__ import annotations

import torch


def require_tensor(where: str, name: str, value) -> None:
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{where}: {name} must be a torch.Tensor, got {type(value).__name__}")


def require_dtype(where: str, dtype: torch.dtype, supported) -> None:
    if dtype not in supported:
        raise TypeError(f"{where}: dtype {dtype} is not supported; expected one of "
                        f"{', '.join(str(d) for d in supported)}")


def output(where: str, name: str, given, shape, dtype: torch.dtype, device: torch.device,
           **alloc) -> torch.Tensor:
    """The output tensor `name`: `given` if it is `shape` `dtype` on `device` (else an error
    naming it), a new torch.empty(shape, **alloc) when None."""
    shape = tuple(shape)
    if given is None:
        return torch.empty(shape, dtype=dtype, device=device, **alloc)
    if tuple(given.shape) != shape or given.dtype != dtype or given.device != device:
        raise ValueError(f"{where}: {name} must be {shape} {dtype} on {device}, got "
                         f"{tuple(given.shape)} {given.dtype} on {given.device}")
    return given
