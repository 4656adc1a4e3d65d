"""make_tensor: seeded, reproducible test tensors, including nasty inputs and poisoned outputs."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from ..env import dtypes
from . import guards, inputs

DISTRIBUTIONS = ("normal", "uniform", "heavy", "constant")
LAYOUTS = ("rows", "elements")

# Integers get small values by default (like torch.testing.make_tensor) so that sums and
# products of a few of them stay exact in every integer dtype.
_INT_RANGE = (-9, 10)


def as_torch_dtype(value, where: str) -> torch.dtype:
    """A torch.dtype, or its name in the one vocabulary (env/dtypes.py: "float16", "fp16",
    "half", "bf16", ...), as the torch.dtype; else a TypeError naming `where` and the names."""
    __tracebackhide__ = True
    if isinstance(value, torch.dtype):
        return value
    if isinstance(value, str):
        n = dtypes.name(value)
        if n == "tf32":
            raise TypeError(f"{where}: dtype={value!r}: tf32 is how float32 dots compute on tensor "
                            "cores, not a dtype a tensor holds: give torch.float32 (and "
                            "precision='tf32' to assert_close)")
        found = getattr(torch, n, None) if dtypes.known(n) else None
        if isinstance(found, torch.dtype):
            return found
    raise TypeError(f"{where}: dtype={value!r}: expected a torch.dtype or its name (float32, "
                    "float16, bfloat16, float64, int32, ...; also fp32, fp16, bf16, half)")


def poison_value(dtype: torch.dtype) -> float | int:
    """What a poisoned buffer of `dtype` holds: NaN for floats, the least likely integer otherwise."""
    if dtype.is_floating_point:
        return math.nan
    if dtype == torch.bool:
        raise TypeError("make_tensor: a bool buffer cannot be poisoned: no value is one a kernel "
                        "would never write")
    info = torch.iinfo(dtype)
    return info.min if info.min < 0 else info.max


class TensorFactory:
    """The `make_tensor` fixture: `make_tensor(shape, dtype=torch.float32, *, ...)`; the shape
    is a sequence (`make_tensor((512, 1000))`) or separate ints (`make_tensor(512, 1000)`, as
    torch.testing.make_tensor takes it).

    Every call draws from one torch.Generator seeded for the test, so a test's tensors are the
    same on every run (for the same device) and differ between tests.
    """

    def __init__(self, device: torch.device, seed: int):
        self.device = torch.device(device)
        self.seed = seed
        self._generator = torch.Generator(device=self.device)
        self._generator.manual_seed(seed)
        # --triton-judge runs a test again at sizes it did not announce: shape -> shape
        self.resize = None

    def reseed(self, seed: int) -> None:
        """Draw from `seed` from now on (--triton-judge runs a test again with other values)."""
        self.seed = seed
        self._generator.manual_seed(seed)

    def __call__(self, *shape_and_dtype: int | Sequence[int] | torch.dtype | str,
                 dtype: torch.dtype | str | None = None,
                 dist: str | None = None, low: float | None = None, high: float | None = None,
                 scale: float = 1.0, value: float | None = None,
                 noncontiguous: bool | str = False, poison: bool = False,
                 requires_grad: bool = False) -> torch.Tensor:
        """A tensor of `shape` and `dtype` (default torch.float32) on the test's device.

        shape_and_dtype: the shape, as one sequence or as separate ints, then optionally the
          dtype: make_tensor((4, 5)), make_tensor(4, 5), make_tensor(4, 5, torch.float16).

        dist: "normal" (mean 0, std `scale`; the default), "uniform" ([low, high), default
          [0, 1); the default when low= or high= is given),
          "heavy" (random signs, magnitudes log-uniform over 1e-3..1e3 times `scale`, clipped to
          the dtype's range: a kernel that drops a term or returns zeros cannot pass by luck),
          "constant" (every element `value`). Integer dtypes draw uniform integers in [low, high),
          default [-9, 10); "heavy" spreads them over a quarter of the dtype's range.
        noncontiguous: True or "rows" gives rows whose stride exceeds their width (1-D tensors:
          "elements"); "elements" gives an innermost stride of 2. The gaps hold poison, so a
          kernel that reads past a row reads NaN.
        poison: an output buffer filled with NaN (floats) or a sentinel (integers), so elements
          a kernel never writes are caught by assert_close; inside an allocation with poisoned
          guard regions before and after it (guards.py), so writes past either end are caught.
        """
        __tracebackhide__ = True
        shape, dtype = _shape_and_dtype(shape_and_dtype, dtype)
        shape = self._check_shape(shape)
        if self.resize is not None:
            shape = self.resize(shape)
        dtype = as_torch_dtype(dtype, "make_tensor")
        if dtype.is_complex:
            raise TypeError(f"make_tensor: {dtype} is not supported (real floating-point, integer "
                            "and bool dtypes are); build a complex tensor from two real ones")
        dist = self._dist(dist, low, high, dtype)
        if dist == "constant" and value is None and not poison:
            raise ValueError("make_tensor: dist='constant' needs value=")
        if value is not None and dist != "constant":
            raise ValueError(f"make_tensor: value={value!r} is used only by dist='constant' (got "
                             f"dist={dist!r}); pass dist='constant' for a constant tensor")
        layout = self._layout(noncontiguous, shape)

        if poison:
            out = guards.allocate(shape, dtype, self.device, poison_value(dtype), layout)
        else:
            out = self._values(shape, dtype, dist, low, high, scale, value)
            if layout is not None:
                out = self._strided_copy(out, layout)
            inputs.track(out)  # a kernel must not write into it (inputs.py)
        if requires_grad:
            out.requires_grad_(True)
        return out

    def like(self, t: torch.Tensor, **kwargs) -> torch.Tensor:
        """A new tensor with the shape, dtype and layout of `t` (keyword arguments as for
        make_tensor). The layout is t's strides, gaps included (they hold poison, as
        noncontiguous= gives them): a transposed, channels-last or row-padded `t` gives a tensor
        laid out the same. noncontiguous= given explicitly chooses the layout instead
        (noncontiguous=False: contiguous). A `t` whose elements overlap (a stride of 0, as
        expand() makes) gives a contiguous tensor."""
        __tracebackhide__ = True
        dtype = as_torch_dtype(kwargs.pop("dtype", t.dtype), "make_tensor.like")
        shape = tuple(t.shape)
        if "noncontiguous" in kwargs or t.is_contiguous() or not distinct_elements(t):
            return self._as_given(shape, dtype, **kwargs)
        strides = tuple(t.stride())
        requires_grad = kwargs.pop("requires_grad", False)
        if kwargs.pop("poison", False):
            out = guards.allocate(shape, dtype, self.device, poison_value(dtype), strides)
        else:
            dense = self._as_given(shape, dtype, **kwargs)
            fill = poison_value(dtype) if dtype != torch.bool else False
            out = torch.full((guards.span_of(shape, strides),), fill, dtype=dtype,
                             device=self.device).as_strided(shape, strides)
            out.copy_(dense)
            inputs.track(out)
        if requires_grad:
            out.requires_grad_(True)
        return out

    def poisoned_like(self, t: torch.Tensor, **kwargs) -> torch.Tensor:
        """An output buffer shaped and laid out like `t` (see like()), poisoned: NaN for floats,
        a sentinel for integers; guarded against writes past its ends and into its gaps (see
        make_tensor's poison)."""
        __tracebackhide__ = True
        return self.like(t, poison=True, **kwargs)

    def _as_given(self, shape, dtype, **kwargs) -> torch.Tensor:
        """make_tensor at `shape` itself (like(t)'s shape is t's, already resized)."""
        resize, self.resize = self.resize, None
        try:
            return self(shape, dtype, **kwargs)
        finally:
            self.resize = resize

    @staticmethod
    def check_guards(t: torch.Tensor) -> None:
        """Raise AssertionError if a kernel wrote outside the poisoned buffer `t` (past either
        end, or into the gaps of a non-contiguous layout)."""
        __tracebackhide__ = True
        guards.check_guards(t)

    # --- helpers ---------------------------------------------------------------------------

    @staticmethod
    def _check_shape(shape) -> tuple[int, ...]:
        __tracebackhide__ = True
        if isinstance(shape, int) and not isinstance(shape, bool):
            shape = (shape,)
        try:
            dims = tuple(shape)
        except TypeError:
            raise TypeError(
                f"make_tensor: shape must be an int or a sequence of ints, got {shape!r}") from None
        for d in dims:
            if isinstance(d, bool) or not isinstance(d, int) or d < 0:
                raise TypeError(f"make_tensor: shape {shape!r} must hold ints >= 0")
        return dims

    @staticmethod
    def _dist(dist, low, high, dtype) -> str:
        """The distribution to draw from: low=/high= without dist= mean uniform; with a float
        dist that does not use them they are an error, never silently ignored."""
        __tracebackhide__ = True
        bounds = low is not None or high is not None
        if dist is None:
            return "uniform" if bounds and dtype.is_floating_point else "normal"
        if dist not in DISTRIBUTIONS:
            raise ValueError(f"make_tensor: dist={dist!r}; expected one of {', '.join(DISTRIBUTIONS)}")
        if bounds and dtype.is_floating_point and dist != "uniform":
            given = ", ".join(f"{k}={v!r}" for k, v in (("low", low), ("high", high)) if v is not None)
            raise ValueError(f"make_tensor: {given} with dist={dist!r}: only dist='uniform' draws "
                             "from [low, high) (leave dist out to get it)")
        return dist

    @staticmethod
    def _layout(noncontiguous, shape) -> str | None:
        if noncontiguous is False or noncontiguous is None:
            return None
        layout = noncontiguous
        if noncontiguous is True:
            layout = "rows" if len(shape) >= 2 else "elements"
        if layout not in LAYOUTS:
            raise ValueError(f"make_tensor: noncontiguous={noncontiguous!r}; expected True, False, "
                             f"{' or '.join(map(repr, LAYOUTS))}")
        if len(shape) == 0:
            raise ValueError("make_tensor: a 0-d tensor cannot be non-contiguous")
        if layout == "rows" and len(shape) < 2:
            raise ValueError("make_tensor: noncontiguous='rows' needs at least 2 dimensions")
        return layout

    def _values(self, shape, dtype, dist, low, high, scale, value) -> torch.Tensor:
        g, dev = self._generator, self.device
        if dist == "constant":
            return torch.full(shape, value, dtype=dtype, device=dev)
        if dtype == torch.bool:
            return torch.randint(0, 2, shape, generator=g, device=dev).bool()
        if not dtype.is_floating_point:
            info = torch.iinfo(dtype)
            if dist == "heavy" and low is None and high is None:
                lo, hi = info.min // 4, info.max // 4
            else:
                if (low is not None and int(low) < info.min) or \
                        (high is not None and int(high) > info.max + 1):
                    raise ValueError(f"make_tensor: [low={low}, high={high}) lies outside {dtype}'s "
                                     f"range [{info.min}, {info.max + 1})")
                lo = _INT_RANGE[0] if low is None else int(low)
                hi = _INT_RANGE[1] if high is None else int(high)
                lo, hi = max(lo, info.min), min(hi, info.max + 1)  # the defaults, for uint8
            if hi <= lo:
                raise ValueError(f"make_tensor: empty integer range [{lo}, {hi})")
            return torch.randint(lo, hi, shape, generator=g, device=dev, dtype=torch.int64).to(dtype)
        # Floats are drawn in float32 and rounded once, so every float dtype (float8 too) works.
        if dist == "normal":
            x = torch.randn(shape, generator=g, device=dev) * scale
        elif dist == "uniform":
            lo = 0.0 if low is None else float(low)
            hi = 1.0 if high is None else float(high)
            if not hi > lo:
                default = " (low defaults to 0)" if low is None else \
                    " (high defaults to 1)" if high is None else ""
                raise ValueError(f"make_tensor: empty range [low={lo}, high={hi}){default}")
            x = torch.rand(shape, generator=g, device=dev) * (hi - lo) + lo
        else:  # heavy
            top = min(3.0, math.log10(torch.finfo(dtype).max / 16))
            exponent = torch.rand(shape, generator=g, device=dev) * (top + 3.0) - 3.0
            sign = torch.randint(0, 2, shape, generator=g, device=dev) * 2 - 1
            x = sign * torch.pow(10.0, exponent) * scale
        if dtype == torch.float64:
            return x.to(torch.float64)
        return x.to(dtype)

    def _strided_copy(self, dense: torch.Tensor, layout: str) -> torch.Tensor:
        shape = dense.shape
        fill = poison_value(dense.dtype) if dense.dtype != torch.bool else False
        if layout == "rows":
            # 3 extra elements: the row stride is then no multiple of 16 bytes, the case a
            # kernel that assumes contiguous, aligned rows gets wrong.
            base = torch.full((*shape[:-1], shape[-1] + 3), fill, dtype=dense.dtype, device=self.device)
            view = base[..., : shape[-1]]
        else:
            base = torch.full((*shape[:-1], shape[-1] * 2), fill, dtype=dense.dtype, device=self.device)
            view = base[..., ::2]
        view.copy_(dense)
        return view


def _is_dim(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _shape_and_dtype(args: tuple, dtype) -> tuple:
    """make_tensor's positional arguments as (shape, dtype): leading ints are the shape's
    dimensions (torch.testing.make_tensor's form); otherwise the first argument is the shape.
    One more argument is the dtype; anything else there is reported as a dtype, so a misspelt
    dtype is named as one."""
    __tracebackhide__ = True
    if not args:
        raise TypeError("make_tensor: missing the shape: make_tensor(512, 1000) or "
                        "make_tensor((512, 1000))")
    if _is_dim(args[0]):
        n = next((i for i, a in enumerate(args) if not _is_dim(a)), len(args))
        shape, rest = args[:n], args[n:]
    else:
        shape, rest = args[0], args[1:]
        if rest and _is_dim(rest[0]):
            raise TypeError(f"make_tensor{args!r}: give the shape as one sequence or as separate "
                            "ints, not both")
    if len(rest) > 1:
        raise TypeError(f"make_tensor: {rest!r} after the shape {tuple(shape)!r}: expected at "
                        "most a dtype there")
    if rest:
        if dtype is not None:
            raise TypeError(f"make_tensor: dtype given twice ({rest[0]!r} and dtype={dtype!r})")
        dtype = rest[0]
    return shape, torch.float32 if dtype is None else dtype


def distinct_elements(t: torch.Tensor) -> bool:
    """True when no two elements of `t` share memory (no stride 0 over a dimension of more than
    one element, no overlap): its layout can be made again."""
    dims = sorted((stride, size) for size, stride in zip(t.shape, t.stride()) if size > 1)
    extent = 1
    for stride, size in dims:
        if stride < extent:
            return False
        extent = stride * size
    return True
