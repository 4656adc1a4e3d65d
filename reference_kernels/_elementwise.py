"""What the streaming elementwise kernels share (vector_add, fused): their dtypes, the tile
space they autotune over, and the operand checks that flatten their tensors."""

from __future__ import annotations

import torch
import triton

from ._checks import output, require_tensor

DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def elementwise_configs() -> list[triton.Config]:
    """Tile sizes for a streaming elementwise kernel (each element read and written once).

    A tile of 1024-8192 elements over 4-8 warps gives every thread 8-32 elements: two to eight
    16-byte accesses per operand in flight, which is what it takes to keep HBM busy. An fp32 add
    with BLOCK_SIZE 1024 / 4 warps matched torch.add, a little ahead of 4096 / 8 warps
    (docs/kernels.md), so the small tiles come first; the larger ones are for 2-byte dtypes,
    whose tiles carry half the bytes.
    """
    return [
        triton.Config({"BLOCK_SIZE": 1024}, num_warps=4),
        triton.Config({"BLOCK_SIZE": 2048}, num_warps=4),
        triton.Config({"BLOCK_SIZE": 4096}, num_warps=8),
        triton.Config({"BLOCK_SIZE": 8192}, num_warps=8),
    ]


# Under the interpreter: small tiles, so that the tests' odd sizes (127, 129, ...) cross tile edges.
INTERPRETER_CONFIG = triton.Config({"BLOCK_SIZE": 256}, num_warps=4)


def elementwise_operands(where: str, out: torch.Tensor | None, **inputs: torch.Tensor):
    """Check the operands of an elementwise kernel (one dtype of DTYPES, one shape, one device;
    contiguous, or 1-D with any stride); return ([inputs as 1-D views], out as a 1-D view, out),
    out allocated when None."""
    first_name, first = next(iter(inputs.items()))
    for name, t in inputs.items():
        require_tensor(where, name, t)
        if t.dtype not in DTYPES:
            raise TypeError(f"{where}: {name} has dtype {t.dtype}, which is not supported; "
                            f"expected one of {', '.join(str(d) for d in DTYPES)}")
        if t.dtype != first.dtype:
            raise TypeError(f"{where}: {first_name} and {name} must have one dtype, got "
                            f"{first.dtype} and {t.dtype}")
        if t.shape != first.shape:
            raise ValueError(f"{where}: {first_name} and {name} must have one shape, got "
                             f"{tuple(first.shape)} and {tuple(t.shape)} (no broadcasting)")
        if t.device != first.device:
            raise ValueError(f"{where}: {first_name} and {name} are on different devices "
                             f"({first.device}, {t.device})")
    out = output(where, "out", out, first.shape, first.dtype, first.device, inputs=inputs,
                 same_place_ok=True)
    flat = []
    for name, t in (*inputs.items(), ("out", out)):
        if t.is_contiguous():
            flat.append(t.view(-1))
        elif t.dim() == 1:
            flat.append(t)
        else:
            raise ValueError(f"{where}: {name} is a non-contiguous {t.dim()}-D tensor; only 1-D "
                             "tensors may be strided (call .contiguous() first)")
    return flat[:-1], flat[-1], out
