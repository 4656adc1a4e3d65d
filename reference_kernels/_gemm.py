"""What the tensor-core kernels share (matmul, conv2d, attention): host-side TMA descriptors
where this Triton and GPU have them, and the grouped order in which programs walk output tiles."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from pytest_triton import interpreting

try:  # Triton >= 3.4: host-side TMA descriptors (the interpreter supports them too)
    from triton.tools.tensor_descriptor import TensorDescriptor
except ImportError:  # pragma: no cover - older Triton
    TensorDescriptor = None


@triton.jit
def grouped_tile(
    tile_id,  # index of the tile in launch order
    num_pid_m,  # tiles along M
    num_pid_n,  # tiles along N
    GROUP_M: tl.constexpr,  # rows of tiles walked together
):
    # Column by column through a band of GROUP_M tile rows: the band's A rows and a few B
    # columns stay in L2 while its tiles run, instead of streaming all of B once per tile row.
    tiles_per_group = GROUP_M * num_pid_n
    first_m = (tile_id // tiles_per_group) * GROUP_M
    rows = tl.minimum(num_pid_m - first_m, GROUP_M)
    in_group = tile_id % tiles_per_group
    return first_m + in_group % rows, in_group // rows


def tma_available(device: torch.device) -> bool:
    """Whether this Triton offers host-side tensor descriptors on `device` (Hopper+, or the
    interpreter)."""
    if TensorDescriptor is None:
        return False
    if device.type != "cuda":
        return interpreting()
    return torch.cuda.get_device_capability(device)[0] >= 9
