"""Vector add, out = x + y, elementwise, in float32, float16 and bfloat16.

Two launchers over the same arithmetic: `vector_add` (one tile per program, autotuned on
n_elements) and `vector_add_persistent` (a grid of a few programs per SM, each taking tiles from
a launch-wide counter until none are left). Both take tensors of one shape: contiguous of any
shape, or 1-D with any stride.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from pytest_triton import autotune_configs, interpreting

from . import _elementwise
from ._checks import launch_config, with_overrides
from ._device import sm_count
from ._elementwise import INTERPRETER_CONFIG, elementwise_configs, elementwise_operands
from ._tickets import sync_buffer, take_ticket
from ._tuning import autotune_kwargs, in_place_hooks

DTYPES = _elementwise.DTYPES


@triton.jit
def _add_rounded_once(x, y):
    # In float32, rounded once to the operands' dtype, as torch computes half and bfloat16
    # arithmetic (and Triton's interpreter adds bfloat16 tensors wrongly).
    return (x.to(tl.float32) + y.to(tl.float32)).to(x.dtype)


@triton.autotune(configs=autotune_configs(elementwise_configs(), interpreter=INTERPRETER_CONFIG),
                 key=["n_elements"],
                 # an in-place call (out is an input) must not add once per timed config
                 **in_place_hooks("out_ptr", "x_ptr", "y_ptr"), **autotune_kwargs())
@triton.jit
def _vector_add_kernel(
    x_ptr,  # *in* n_elements, element stride stride_x
    y_ptr,  # *in* n_elements, element stride stride_y
    out_ptr,  # *out* n_elements, element stride stride_out
    n_elements,  # number of elements
    stride_x,  # 1 when contiguous: Triton then specialises the loads to 16-byte vectors
    stride_y,
    stride_out,
    BLOCK_SIZE: tl.constexpr,  # elements per program
):
    # The tile's start in int64, applied to the scalar base pointers: tensors of 2**31 elements
    # or more stay correct, and the per-element offsets stay int32.
    start = tl.program_id(0).to(tl.int64) * BLOCK_SIZE
    offs = tl.arange(0, BLOCK_SIZE)
    mask = offs < n_elements - start
    x = tl.load(x_ptr + start * stride_x + offs * stride_x, mask=mask)
    y = tl.load(y_ptr + start * stride_y + offs * stride_y, mask=mask)
    tl.store(out_ptr + start * stride_out + offs * stride_out, _add_rounded_once(x, y), mask=mask)


@triton.jit
def _vector_add_persistent_kernel(
    x_ptr,  # *in* n_elements, element stride stride_x
    y_ptr,  # *in* n_elements, element stride stride_y
    out_ptr,  # *out* n_elements, element stride stride_out
    sync_ptr,  # *in/out* int64 launch-wide counter word (sync_buffer): tiles are tickets
    n_elements,  # number of elements
    stride_x,
    stride_y,
    stride_out,
    BLOCK_SIZE: tl.constexpr,  # elements per tile
    PREFETCH: tl.constexpr,  # True: load the next tile before storing this one
):
    # Tiles come from a counter, not from a fixed stride: an SM that streams faster takes more
    # of them, as the hardware scheduler does for a non-persistent grid. A fixed grid-stride
    # split ran below the one-tile-per-program kernel (docs/kernels.md).
    n_tiles = tl.cdiv(n_elements, BLOCK_SIZE)
    # Every program takes tickets until it gets one past the last tile: n_tiles + grid in all,
    # one more per program when it holds the next tile too.
    n_tickets = n_tiles + tl.num_programs(0) * (2 if PREFETCH else 1)
    offs = tl.arange(0, BLOCK_SIZE)
    tile, _ = take_ticket(sync_ptr, n_tickets)
    if PREFETCH:
        # Two tiles per program: while one is added and stored, the next one's loads are in
        # flight and the ticket after it is being fetched. A ticket past the last tile loads
        # nothing (every lane masked off).
        start = tile * BLOCK_SIZE
        mask = offs < n_elements - start
        x = tl.load(x_ptr + start * stride_x + offs * stride_x, mask=mask)
        y = tl.load(y_ptr + start * stride_y + offs * stride_y, mask=mask)
        next_tile, _ = take_ticket(sync_ptr, n_tickets)
        while tile < n_tiles:
            next_start = next_tile * BLOCK_SIZE
            next_mask = offs < n_elements - next_start
            x_next = tl.load(x_ptr + next_start * stride_x + offs * stride_x, mask=next_mask)
            y_next = tl.load(y_ptr + next_start * stride_y + offs * stride_y, mask=next_mask)
            after, _ = take_ticket(sync_ptr, n_tickets)
            tl.store(out_ptr + start * stride_out + offs * stride_out, _add_rounded_once(x, y),
                     mask=mask)
            tile, next_tile, start, mask = next_tile, after, next_start, next_mask
            x, y = x_next, y_next
    else:
        while tile < n_tiles:
            start = tile * BLOCK_SIZE
            mask = offs < n_elements - start
            x = tl.load(x_ptr + start * stride_x + offs * stride_x, mask=mask)
            y = tl.load(y_ptr + start * stride_y + offs * stride_y, mask=mask)
            # Asked for after this tile's loads are issued: the atomic's round trip (and the
            # barrier that hands its result to every warp) overlaps them instead of delaying
            # them.
            next_tile, _ = take_ticket(sync_ptr, n_tickets)
            tl.store(out_ptr + start * stride_out + offs * stride_out, _add_rounded_once(x, y),
                     mask=mask)
            tile = next_tile


def vector_add_persistent_config(n_elements: int, dtype: torch.dtype) -> dict:
    """Launch parameters of the persistent variant.

    4096-element tiles over 8 warps; 2 programs per SM in float32, 3 in 16-bit dtypes (whose
    tiles carry half the bytes): every SM has ~2 x 2 x 16 KB of loads outstanding, above the ~20
    KB per SM that HBM's latency times its bandwidth asks for (3 TB/s x ~1 us / 132 SMs).
    These ran level with torch.add and at least as fast as the other tile sizes and programs per
    SM tried. PREFETCH (a second tile held per program, its loads in flight while the first is
    stored) ran no faster. Measured in docs/kernels.md.
    The tile count is ~16K-32K per 256
    MB, so the ticket atomics (one per tile, on one address) stay far below what L2 serves.
    Under the interpreter: small tiles, so that one program takes several.
    """
    if interpreting():
        return {"BLOCK_SIZE": 256, "num_warps": 4, "programs_per_sm": 2, "PREFETCH": False}
    return {"BLOCK_SIZE": 4096, "num_warps": 8,
            "programs_per_sm": 2 if dtype == torch.float32 else 3, "PREFETCH": False}


def vector_add_configs() -> list[triton.Config]:
    """The tiles vector_add autotunes over (the streaming elementwise space, _elementwise.py)."""
    return elementwise_configs()


def vector_add(x: torch.Tensor, y: torch.Tensor, *, out: torch.Tensor | None = None,
               config: triton.Config | None = None) -> torch.Tensor:
    """x + y, one tile per program; the tile size is autotuned per n_elements and dtype.

    config: a triton.Config with BLOCK_SIZE (one of vector_add_configs(), say) to launch instead
    of autotuning, for tuning sweeps.
    """
    (xf, yf), of, out = elementwise_operands("vector_add", out, x=x, y=y)
    meta = None if config is None else launch_config("vector_add", config, ("BLOCK_SIZE",))
    n = xf.numel()
    if n:
        args = (xf, yf, of, n, xf.stride(0), yf.stride(0), of.stride(0))
        if meta is None:
            _vector_add_kernel[lambda m: (triton.cdiv(n, m["BLOCK_SIZE"]),)](*args)
        else:
            _vector_add_kernel.fn[(triton.cdiv(n, meta["BLOCK_SIZE"]),)](*args, **meta)
    return out


def vector_add_kernel_for():
    """The autotuned kernel `vector_add` launches (reports read its best_config)."""
    return _vector_add_kernel


def vector_add_persistent(x: torch.Tensor, y: torch.Tensor, *, out: torch.Tensor | None = None,
                          config: dict | None = None) -> torch.Tensor:
    """x + y on a persistent grid (programs_per_sm x the SM count) taking tiles from a
    launch-wide counter.

    config: overrides of the launch parameters (BLOCK_SIZE, num_warps, programs_per_sm,
    PREFETCH), for tuning sweeps.
    """
    (xf, yf), of, out = elementwise_operands("vector_add_persistent", out, x=x, y=y)
    n = xf.numel()
    cfg = with_overrides(vector_add_persistent_config(n, x.dtype), config, "vector_add_persistent",
                         powers_of_two=("BLOCK_SIZE",))
    if n:
        n_tiles = triton.cdiv(n, cfg["BLOCK_SIZE"])
        grid = (min(n_tiles, cfg["programs_per_sm"] * sm_count(x.device)),)
        _vector_add_persistent_kernel[grid](xf, yf, of, sync_buffer(x.device), n, xf.stride(0),
                                            yf.stride(0), of.stride(0),
                                            BLOCK_SIZE=cfg["BLOCK_SIZE"],
                                            PREFETCH=cfg["PREFETCH"], num_warps=cfg["num_warps"])
    return out


def vector_add_reference(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """torch's x + y (in float64 when given float64)."""
    return x + y


def vector_add_bytes(x: torch.Tensor, y: torch.Tensor) -> int:
    # read x and y once; write out once
    return 3 * x.numel() * x.element_size()


def vector_add_inputs(make_tensor, n: int, *, dtype: torch.dtype = torch.float32, **kwargs):
    """(x, y): two 1-D operands of n elements (keyword arguments go to make_tensor)."""
    return make_tensor(n, dtype, **kwargs), make_tensor(n, dtype, **kwargs)
