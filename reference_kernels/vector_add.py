"""Vector add, out = x + y, elementwise, in float32, float16 and bfloat16.

Two launchers over the same arithmetic: `vector_add` (one tile per program, autotuned on
n_elements) and `vector_add_persistent` (a grid of a few programs per SM, each taking tiles from
a launch-wide counter until none are left). Both take tensors of one shape: contiguous of any
shape, or 1-D with any stride.

Also here, for every kernel module: the launch-wide counter (`sync_buffer`, `take_ticket`) that
persistent and row-split kernels share, and the helpers that size grids and apply config
overrides.
"""

from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl

from pytest_triton import autotune_configs, interpreting

from ._checks import config_values, output, require_tensor

DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def elementwise_configs() -> list[triton.Config]:
    """Tile sizes for a streaming elementwise kernel (each element read and written once).

    A tile of 1024-8192 elements over 4-8 warps gives every thread 8-32 elements: two to eight
    16-byte accesses per operand in flight, which is what it takes to keep HBM busy. An fp32 add
    with BLOCK_SIZE 1024 / 4 warps reached 3040 GB/s on an H100 (= torch.add; 4096 / 8 warps:
    3000 GB/s), so the small tiles come first; the larger ones are for 2-byte dtypes, whose tiles
    carry half the bytes.
    """
    return [
        triton.Config({"BLOCK_SIZE": 1024}, num_warps=4),
        triton.Config({"BLOCK_SIZE": 2048}, num_warps=4),
        triton.Config({"BLOCK_SIZE": 4096}, num_warps=8),
        triton.Config({"BLOCK_SIZE": 8192}, num_warps=8),
    ]


# Under the interpreter: small tiles, so that the tests' odd sizes (127, 129, ...) cross tile edges.
INTERPRETER_CONFIG = triton.Config({"BLOCK_SIZE": 256}, num_warps=4)


@triton.jit
def _add_rounded_once(x, y):
    # In float32, rounded once to the operands' dtype, as torch computes half and bfloat16
    # arithmetic (and Triton's interpreter adds bfloat16 tensors wrongly).
    return (x.to(tl.float32) + y.to(tl.float32)).to(x.dtype)


@triton.autotune(configs=autotune_configs(elementwise_configs(), interpreter=INTERPRETER_CONFIG),
                 key=["n_elements"])
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
    # split ran 3.5% below the one-tile-per-program kernel on an H100 (2875 vs 2988 GB/s fp32).
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


def _persistent_config(n_elements: int, dtype: torch.dtype) -> dict:
    """Launch parameters of the persistent variant.

    4096-element tiles over 8 warps; 2 programs per SM in float32, 3 in 16-bit dtypes (whose
    tiles carry half the bytes): every SM has ~2 x 2 x 16 KB of loads outstanding, above the ~20
    KB per SM that HBM's latency times its bandwidth asks for (3 TB/s x ~1 us / 132 SMs).
    Measured on an H100 (do_bench, torch.add 2978-3008 GB/s): fp32 2972 and 2996 GB/s (runs 8
    and 9) vs 2948 with 4 programs per SM, 2973 with 3, 2928 with 8192-element tiles; fp16 3002
    with 3 per SM vs 2970-2972 with 2, 2976-2981 with 2048-element tiles on 4 warps, 8 per SM
    (run 9). PREFETCH (a second tile held per program, its loads in flight while the first is
    stored) ran no faster: fp32 2992, fp16 2948-2998 (run 9). The tile count is ~16K-32K per 256
    MB, so the ticket atomics (one per tile, on one address) stay far below what L2 serves.
    Under the interpreter: small tiles, so that one program takes several.
    """
    if interpreting():
        return {"BLOCK_SIZE": 256, "num_warps": 4, "programs_per_sm": 2, "PREFETCH": False}
    return {"BLOCK_SIZE": 4096, "num_warps": 8,
            "programs_per_sm": 2 if dtype == torch.float32 else 3, "PREFETCH": False}


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


@functools.cache
def device_size(device: torch.device) -> tuple[int, int]:
    """(SM count, L2 bytes) of `device`, for sizing persistent grids."""
    if device.type != "cuda":
        return 4, 50 * 2**20  # the interpreter runs programs one by one: stand-ins for a grid
    props = torch.cuda.get_device_properties(device)
    return props.multi_processor_count, getattr(props, "L2_cache_size", 50 * 2**20)


def with_overrides(defaults: dict, overrides: dict | None, where: str, *,
                   powers_of_two: tuple[str, ...] = ()) -> dict:
    """A launcher's heuristic launch parameters, with a caller's overrides (tuning sweeps)."""
    if overrides is not None and not isinstance(overrides, dict):
        raise TypeError(f"{where}: config must be a dict of launch parameters, got "
                        f"{type(overrides).__name__}")
    if not overrides:
        return defaults
    unknown = sorted(set(overrides) - set(defaults))
    if unknown:
        raise ValueError(f"{where}: unknown config key(s) {unknown}; expected some of "
                         f"{sorted(defaults)}")
    cfg = {**defaults, **overrides}
    # the value's kind follows the default's: flags stay bools, counts are integers >= 1 (a
    # default of None is an optional count: programs_per_sm, maxnreg)
    flags = [k for k in overrides if isinstance(defaults[k], bool)]
    counts = [k for k in overrides if k not in powers_of_two and k not in flags
              and (defaults[k] is None or isinstance(defaults[k], int))]
    return config_values(where, cfg, powers_of_two=powers_of_two, positive=counts, flags=flags)


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


def vector_add(x: torch.Tensor, y: torch.Tensor, *,
               out: torch.Tensor | None = None) -> torch.Tensor:
    """x + y, one tile per program; the tile size is autotuned per n_elements and dtype."""
    (xf, yf), of, out = elementwise_operands("vector_add", out, x=x, y=y)
    n = xf.numel()
    if n:
        grid = lambda meta: (triton.cdiv(n, meta["BLOCK_SIZE"]),)  # noqa: E731
        _vector_add_kernel[grid](xf, yf, of, n, xf.stride(0), yf.stride(0), of.stride(0))
    return out


def vector_add_persistent(x: torch.Tensor, y: torch.Tensor, *, out: torch.Tensor | None = None,
                          config: dict | None = None) -> torch.Tensor:
    """x + y on a persistent grid (programs_per_sm x the SM count) taking tiles from a
    launch-wide counter.

    config: overrides of the launch parameters (BLOCK_SIZE, num_warps, programs_per_sm,
    PREFETCH), for tuning sweeps.
    """
    (xf, yf), of, out = elementwise_operands("vector_add_persistent", out, x=x, y=y)
    n = xf.numel()
    cfg = with_overrides(_persistent_config(n, x.dtype), config, "vector_add_persistent",
                         powers_of_two=("BLOCK_SIZE",))
    if n:
        n_tiles = triton.cdiv(n, cfg["BLOCK_SIZE"])
        grid = (min(n_tiles, cfg["programs_per_sm"] * device_size(x.device)[0]),)
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
