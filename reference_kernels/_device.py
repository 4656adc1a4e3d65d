"""The device properties launches are sized by: SMs, L2 and the shared memory one program may
use, from torch and Triton's driver; stand-ins where kernels run under Triton's interpreter."""

from __future__ import annotations

import functools

import torch
import triton

# Under the interpreter, which runs programs one by one: 3 SMs (fewer than the tests' tiles and
# rows, and dividing none of their counts) make every persistent program loop over an uneven
# share; an L2 of 50 MB sizes the looped row kernels' grids as on a Hopper.
INTERPRETER_SMS = 3
INTERPRETER_L2_BYTES = 50 * 2**20
# Shared memory one program may use where the device does not say (the interpreter, a driver
# without the query): Hopper's 227 KB.
DEFAULT_SMEM_PER_BLOCK = 227 * 1024


@functools.cache
def sm_count(device: torch.device) -> int:
    """Streaming multiprocessors of `device`: what persistent grids and wave models count."""
    if device.type != "cuda":
        return INTERPRETER_SMS
    return torch.cuda.get_device_properties(device).multi_processor_count


@functools.cache
def l2_bytes(device: torch.device) -> int:
    """L2 cache of `device`, in bytes."""
    if device.type != "cuda":
        return INTERPRETER_L2_BYTES
    props = torch.cuda.get_device_properties(device)
    return getattr(props, "L2_cache_size", INTERPRETER_L2_BYTES)


@functools.cache
def smem_per_block(device: torch.device) -> int:
    """The shared memory one program may opt into on `device` (Triton's driver query)."""
    if device.type != "cuda":
        return DEFAULT_SMEM_PER_BLOCK
    try:
        index = device.index if device.index is not None else torch.cuda.current_device()
        props = triton.runtime.driver.active.utils.get_device_properties(index)
        return int(props["max_shared_mem"])
    except Exception:  # pragma: no cover - a driver without the query
        return DEFAULT_SMEM_PER_BLOCK
