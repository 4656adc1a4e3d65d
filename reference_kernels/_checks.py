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
