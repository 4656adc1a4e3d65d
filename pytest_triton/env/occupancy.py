"""Theoretical occupancy and waves of a launch on a device: how many of its blocks fit on an SM,
which resource limits them (warps, blocks, registers, shared memory), and how its grid fills the
SMs, from the compiled kernel's metadata and the per-SM limits of a device (DeviceInfo) or of an
architecture (ArchLimits: no SM count, so no waves). Read by --triton-perf-explain's diagnosis
and by the triton_resources gate, which also asks what would fit (registers_for, shared_for)."""

from __future__ import annotations

import math

SMEM_RESERVED = 1024  # bytes the driver reserves per block on sm_80 and later
REG_UNIT = 256  # registers are allocated per warp in units of 256


def occupancy(launch: dict, device) -> dict | None:
    """Theoretical resident blocks and warps per SM of `launch` on `device` (a DeviceInfo), the
    resource that limits them, and the waves its grid takes."""
    warps = launch.get("num_warps")
    if not warps or device is None or not device.max_threads_per_sm:
        return None
    ws = device.warp_size or 32
    max_warps = device.max_threads_per_sm // ws
    limits = {"warps": max_warps // warps}
    if device.max_blocks_per_sm:
        limits["blocks"] = device.max_blocks_per_sm
    regs = launch.get("n_regs")
    if regs and device.regs_per_sm:
        per_warp = math.ceil(regs * ws / REG_UNIT) * REG_UNIT
        limits["registers"] = (device.regs_per_sm // per_warp) // warps
    shared = launch.get("shared") or 0
    if shared and device.smem_per_sm:
        reserved = SMEM_RESERVED if tuple(device.cc) >= (8, 0) else 0
        limits["shared memory"] = device.smem_per_sm // (shared + reserved)
    blocks = min(limits.values())
    # The limiter named is the scarcest resource; on a tie the hardware's own limits (warps,
    # blocks per SM) are named: a kernel at them is not held back by its registers.
    order = ("warps", "blocks", "registers", "shared memory")
    limiter = next(k for k in order if k in limits and limits[k] == blocks)
    out = {"blocks_per_sm": blocks, "warps_per_sm": blocks * warps, "max_warps_per_sm": max_warps,
           "occupancy": blocks * warps / max_warps, "limiter": limiter, "limits": limits}
    programs = int(launch.get("programs") or 0)
    if blocks > 0 and programs and getattr(device, "sms", None):
        slots = device.sms * blocks
        waves = programs / slots
        full = math.ceil(waves)
        out.update({"waves": waves, "slots": slots,
                    "last_wave_fill": (programs - (full - 1) * slots) / slots,
                    "tail_idle": (full - waves) / full})
    return out


def registers_for(blocks: int, warps: int, device) -> int | None:
    """The most registers per thread with which `blocks` blocks of `warps` warps fit on one SM
    of `device` (None when none would: the warps alone exceed the register file)."""
    ws = device.warp_size or 32
    per_warp = device.regs_per_sm // (blocks * warps)  # registers one warp may be given
    per_thread = (per_warp // REG_UNIT) * REG_UNIT // ws
    cap = getattr(device, "max_regs_per_thread", None) or 255
    return min(per_thread, cap) if per_thread > 0 else None


def shared_for(blocks: int, device) -> int:
    """The most shared memory per block (bytes) with which `blocks` blocks fit on one SM, within
    what one block may have."""
    reserved = SMEM_RESERVED if tuple(device.cc) >= (8, 0) else 0
    fit = device.smem_per_sm // blocks - reserved
    return max(0, min(fit, device.smem_per_block or fit))
