"""The launch-wide counter word that persistent and row-split kernels share: programs take
tiles (or row chunks) as tickets from it, in the order they start (vector_add_persistent,
softmax, layernorm)."""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def take_ticket(
    sync_ptr,  # *in/out* int64 launch-wide counter word (sync_buffer)
    n_tickets,  # tickets this launch takes in all
):
    """(ticket, epoch): the next ticket of this launch (0, 1, 2, ... in the order programs ask)
    and the launch's epoch. The program that takes the last ticket leaves the word as the next
    launch on the stream needs it: no ticket taken, epoch advanced."""
    # One word holds the epoch (high 32 bits) and the tickets taken (low 32 bits): one atomic
    # gives both, and once the last ticket is out nobody in this launch reads the word again, so
    # its taker can reset it with a plain store. Relaxed: a ticket orders nothing but itself, and
    # a fence per ticket would stall the loads in flight.
    word = tl.atomic_add(sync_ptr, 1, sem="relaxed")
    ticket = word & 0xFFFFFFFF
    epoch = word >> 32
    if ticket == n_tickets - 1:
        # Epochs cycle through 1 .. 2**31 - 1: never 0, the tag of words nobody wrote yet.
        tl.store(sync_ptr, (epoch % 0x7FFFFFFF + 1) << 32)
    return ticket, epoch


# int64 words of sync_buffer before a kernel's own: [0] the counter word (take_ticket); 16 words,
# so that a kernel's own words start on another 128-byte line.
SYNC_HEADER = 16
_SYNC_BUFFERS: dict = {}


def sync_buffer(device: torch.device, n_words: int = 0) -> torch.Tensor:
    """The launch-wide counter word of the current stream on `device` (in SYNC_HEADER int64
    words), followed by at least n_words int64 words for a kernel's own use.

    Kept per (device, stream) and reused: every kernel that uses it leaves the counter word as
    the next launch needs it (take_ticket), so no memset runs before a launch, and a replayed
    CUDA graph works too. Two streams get two buffers: their launches could overlap. Grown
    (zeroed, epoch 1) when a kernel needs more words. A CUDA graph capture (on its own stream)
    cannot allocate one: it borrows the device's last buffer, so run the kernel once, eagerly,
    before capturing it.
    """
    device = torch.device(device)
    stream = torch.cuda.current_stream(device).cuda_stream if device.type == "cuda" else None
    key = (str(device), stream)
    buf = _SYNC_BUFFERS.get(key)
    if buf is not None and buf.numel() >= SYNC_HEADER + n_words:
        return buf
    if device.type == "cuda" and torch.cuda.is_current_stream_capturing():
        last = _SYNC_BUFFERS.get((str(device), "last"))
        if last is None or last.numel() < SYNC_HEADER + n_words:
            raise RuntimeError("sync_buffer: run the kernel once outside CUDA graph capture "
                               "first: its counters cannot be allocated inside a capture")
        return last
    # Grown in powers of two, so that a sweep over sizes does not reallocate every call. An
    # outgrown buffer is kept, never freed: a captured CUDA graph may still use it.
    if buf is not None:
        _SYNC_BUFFERS.setdefault("outgrown", []).append(buf)
    buf = torch.zeros(SYNC_HEADER + triton.next_power_of_2(max(n_words, 1024)),
                      dtype=torch.int64, device=device)
    buf[0] = 1 << 32  # epoch 1, no ticket taken
    _SYNC_BUFFERS[key] = _SYNC_BUFFERS[(str(device), "last")] = buf
    return buf
