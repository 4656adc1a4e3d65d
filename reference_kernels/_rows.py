"""Row-wise kernels' host side (softmax, layernorm, the fused bias kernel): 2-D row views of
their tensors, and the sizes of their tiles, split rows and looped grids."""

from __future__ import annotations

import torch
import triton

from pytest_triton import interpreting

from ._device import l2_bytes, sm_count


def row_view(name: str, t: torch.Tensor, where: str) -> torch.Tensor:
    """t (..., n) as a 2-D (rows, n) view: columns contiguous, any row stride; leading
    dimensions that cannot be viewed as one row index are an error, not a silent copy."""
    if t.numel() == 0:  # nothing to launch on
        return t.new_empty((0, t.shape[-1] if t.dim() else 0))
    if t.shape[-1] > 1 and t.stride(-1) != 1:
        raise ValueError(f"{where}: {name} must have contiguous columns (stride 1 along the last "
                         f"dimension), got strides {t.stride()}")
    try:
        return t.view(-1, t.shape[-1])
    except RuntimeError:
        raise ValueError(f"{where}: the leading dimensions of {name} (strides {t.stride()}) "
                         "cannot be viewed as one row index; call .contiguous()") from None


def tile_rows(tile: int, block: int, n_rows: int) -> int:
    """Rows of a tile of about `tile` elements of `block`-wide rows (at least one, at most the
    rows there are)."""
    return max(1, min(tile // block, triton.next_power_of_2(max(n_rows, 1))))


def register_cap(cfg: dict) -> dict:
    """Launch options for cfg's maxnreg: a cap on registers per thread (more programs per SM,
    where ptxas would take more than it needs), none when None or under the interpreter."""
    return {"maxnreg": cfg["maxnreg"]} if cfg["maxnreg"] and not interpreting() else {}


def split_chunks(n_cols: int, block_n: int, where: str) -> int:
    """Programs per row of a split launch; under the interpreter only 1 can work."""
    n_chunks = triton.cdiv(n_cols, block_n)
    if n_chunks > 1 and interpreting():
        raise ValueError(f"{where}: a row split over {n_chunks} programs cannot run under Triton's "
                         "interpreter, which runs one program at a time while split programs "
                         "wait for each other; use BLOCK_N >= the row width, or SPLIT=False")
    return n_chunks


def looped_grid(n_rows: int, row_bytes: int, device: torch.device,
                programs_per_sm: int | None) -> int:
    """Programs for a kernel that reads each row twice: programs_per_sm per SM if given, else as
    many as keep the rows in flight within half of L2 (1 to 4 per SM)."""
    sms, l2 = sm_count(device), l2_bytes(device)
    if programs_per_sm:
        return min(n_rows, programs_per_sm * sms)
    return min(n_rows, max(sms, min(4 * sms, (l2 // 2) // max(row_bytes, 1))))
