"""Work the timing events do not cover: a side stream, or work left running past the end event
(KernelBench's non_default_stream_kernel; mlx-benchmark #21). Checked after each timed call
under --triton-judge.

The timing's events are recorded on the current stream, so they end when the current stream's
work ends. After one more call of fn, an event recorded on the current stream is waited for, and
then the whole device: an honest call (its work on the current stream, or on side streams it
joins back) leaves nothing running by then, and the device's synchronize takes what it takes on
an idle device (0.05-0.09 ms on an H100 machine here: measured first, the least of several, and
subtracted); work left on another stream makes it wait longer. The median wait of three calls is
taken: a host hiccup in one call is not read as GPU work, and one call whose side-stream work
happened to be done early does not hide it (on an H100 the cheat suite's side stream left
0.014 ms in one call and 0.61 ms in the next). Under Triton's interpreter there is no device.
(Subtracting a second synchronize right after the first instead missed that side stream.)

An honest call that keeps the current stream busy long waits longer after it too (on an H100 the
bundled attention, 0.2-2 ms a call, left 0.105 ms over the idle synchronize, a false flag): each
call is paired with a control, the timing's spin kernel (perf.timing.keep_busy) on the current
stream for as long as the call's current-stream work took, and the control's median wait is
subtracted instead of the idle one's.
"""

from __future__ import annotations

import sys
import time

from ..perf import timing
from .checks import Call

OUTSTANDING_MS = 0.1  # GPU work left running, over the synchronize's own cost
CALLS = 3
IDLE_SYNCS = 5


def _timed_sync(torch) -> float:
    t0 = time.perf_counter()
    torch.cuda.synchronize()
    return time.perf_counter() - t0


def _wait_after(torch, call) -> tuple[float, object]:
    """(s the device's synchronize took once `call`'s current-stream work was done, its result)"""
    result = call()
    done = torch.cuda.Event()
    done.record()  # on the current stream, where the timing's end event is recorded
    done.synchronize()
    return _timed_sync(torch), result


def _elapsed_ms(torch, call) -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    call()
    end.record()
    end.synchronize()
    return start.elapsed_time(end)


def _control(torch, fn):
    """An honest call as long as `fn`'s current-stream work: the timing's spin kernel for as long
    (the idle synchronize stays the floor where the control waits less)."""
    ms, device = _elapsed_ms(torch, fn), torch.cuda.current_device()
    return lambda: timing.keep_busy(device, ms)


def outstanding_ms(fn) -> tuple[float | None, object]:
    """(ms the device stayed busy after the current stream was done, beyond what it does after an
    honest call as long, fn's last result); None ms where there is no CUDA device."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_available() or not torch.cuda.is_initialized():
        return None, fn()
    torch.cuda.synchronize()
    idle = min(_timed_sync(torch) for _ in range(IDLE_SYNCS))
    control = _control(torch, fn)
    waits, controls, result = [], [], None
    for _ in range(CALLS):
        wait, result = _wait_after(torch, fn)
        waits.append(wait)
        controls.append(_wait_after(torch, control)[0])
    floor = max(idle, sorted(controls)[len(controls) // 2])
    return 1e3 * (sorted(waits)[len(waits) // 2] - floor), result


def check(call: Call) -> str | None:
    """The watched call's check (checks.py): work left on the GPU past the current stream's, over
    more calls of fn (the last one's result left in call.result)."""
    when = call.when
    ms, call.result = outstanding_ms(call.fn)
    if ms is None or ms < OUTSTANDING_MS:
        return None
    return (f"side stream: after {when}'s work on the current stream was done, the GPU stayed "
            f"busy {ms:.3g} ms more: work on a stream the timing events do not wait for, or "
            "left running past the end event (KernelBench's non_default_stream_kernel). Launch "
            "on the current stream, or make it wait for the side stream "
            "(torch.cuda.current_stream().wait_stream(side)) before returning.")
