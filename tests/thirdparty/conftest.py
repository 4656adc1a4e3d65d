"""Shared by the third-party conformance suite (README.md beside this file)."""

from __future__ import annotations

import torch

# Every correctness case runs in these: the low-precision ones are what LLM kernels ship.
DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def dtype_id(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def rms_norm_64(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm in float64: x / sqrt(mean(x^2) + eps) * w over the last dimension."""
    x, w = x.double(), w.double()
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def silu_and_mul_64(x: torch.Tensor) -> torch.Tensor:
    """SwiGLU's activation in float64: silu(x[..., :d]) * x[..., d:], d = the last dim / 2."""
    x = x.double()
    d = x.shape[-1] // 2
    return torch.nn.functional.silu(x[..., :d]) * x[..., d:]


def gelu_tanh_and_mul_64(x: torch.Tensor) -> torch.Tensor:
    x = x.double()
    d = x.shape[-1] // 2
    return torch.nn.functional.gelu(x[..., :d], approximate="tanh") * x[..., d:]
