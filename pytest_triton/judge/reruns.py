"""--triton-judge: a correctness test passed at the values and sizes it announced; it runs again
at ones it did not.

robust-kbench re-ran KernelBench's kernels on shapes and inputs their authors had not seen, and
the mean "speedup" fell from 3.13x to 1.49x: kernels that special-cased the tested shapes or
values failed elsewhere. After a correctness test passes (one that uses make_tensor and does not
time), its body runs twice more in the same set-up, seeded from its own seed (so the run
replays: the same command with --triton-judge):
- with another seed: every make_tensor tensor holds other values, and any failure fails it;
- with that seed at odd sizes, each of SIZES_FROM or more made 3 smaller (1024 -> 1021, a
  multiple of no block size): the sizes among the test's parameters (an int, or a tuple of ints:
  `shape=(7, 37)`), which its own code then uses throughout (`(shape[-1],)` too); where it has
  none, every make_tensor dimension, the same for every tensor so that shapes still agree. (On an
  H100, FlagGems' layer_norm given make_tensor's (1, 61) beside the test's `(shape[-1],)` of 64
  read past the row and lost the CUDA context.) Only a comparison finding wrong values fails the
  test there: a test whose own code fixes a size (torch.empty(1024), a reshape) cannot run at
  other sizes, and is noted instead.
`@pytest.mark.triton_judge(sizes=False)` keeps a test at its own sizes (a kernel made for them).
"""

from __future__ import annotations

import hashlib
from dataclasses import replace

import pytest

from ..correctness import call_record, inputs
from ..env import seeding

SIZES_FROM = 16
VALUE_FAILURES = ("Tensors are not close", "Gradients off", "Not deterministic",
                  "out-of-bounds write", "input mutation")


def odd_sizes(shape: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(d - 3 if d >= SIZES_FROM else d for d in shape)


def _odd(value):
    """`value` at odd sizes where it is a size (an int, or a non-empty tuple or list of ints),
    else None."""
    if isinstance(value, int) and not isinstance(value, bool):
        return odd_sizes((value,))[0]
    if isinstance(value, (tuple, list)) and value and all(
            isinstance(d, int) and not isinstance(d, bool) for d in value):
        return type(value)(odd_sizes(tuple(value)))
    return None


def sized_params(item: pytest.Item) -> dict[str, object]:
    """The test's parametrized arguments that are sizes, at odd sizes (those that change)."""
    params = getattr(getattr(item, "callspec", None), "params", {})
    funcargs = getattr(item, "funcargs", {})
    return {name: new for name, value in params.items()
            if name in funcargs and (new := _odd(value)) is not None and new != value}


def other_seed(seed: int, variant: int) -> int:
    digest = hashlib.blake2b(f"judge\0{seed}\0{variant}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") % seeding.SEED_BOUND


def wanted(item: pytest.Item) -> bool:
    names = getattr(item, "fixturenames", ())
    return "make_tensor" in names and "triton_bench" not in names and hasattr(item, "runtest")


def _first_lines(exc: BaseException, n: int = 6) -> str:
    text = str(exc).strip().splitlines()
    return "\n    ".join(text[:n] + (["..."] if len(text) > n else []))


@inputs.costed("judge")
def run_again(item: pytest.Item) -> None:
    """Run `item`'s body at another seed, then at odd sizes too; fail it naming the run that
    fails (pytest.fail), note the runs that could not be made."""
    __tracebackhide__ = True
    factory = item.funcargs.get("make_tensor")
    seed = seeding.CURRENT.get()
    if factory is None or seed is None:
        return
    marker = item.get_closest_marker("triton_judge")
    sizes = marker.kwargs.get("sizes", True) if marker is not None else True
    new = other_seed(seed.seed, 1)
    # (what, make_tensor's resize, the test's parameters at odd sizes, which its code follows)
    variants = [("another seed", None, {})]
    if sizes:
        params = sized_params(item)
        variants.append(("odd sizes", None if params else odd_sizes, params))
    own = {name: item.funcargs[name] for name in variants[-1][2]}
    done, notes, failure = [], [], None
    try:
        for what, resize, params in variants:
            factory.reseed(new)
            factory.resize = resize
            item.funcargs.update(params)
            token = seeding.CURRENT.set(replace(seed, seed=new, fixed=True))
            try:
                item.runtest()
                done.append(what)
            except pytest.skip.Exception as exc:
                notes.append(f"{what}: skipped ({exc})")
            except Exception as exc:  # noqa: BLE001 - sorted: wrong values, or cannot run there
                if what == "odd sizes" and not any(k in str(exc) for k in VALUE_FAILURES):
                    notes.append(f"{what}: the test cannot run at them "
                                 f"({type(exc).__name__}: {_first_lines(exc, 1)})")
                    continue
                failure = (what, params, exc)
                break
            finally:
                seeding.CURRENT.reset(token)
    finally:
        factory.reseed(seed.seed)
        factory.resize = None
        item.funcargs.update(own)
    if failure is not None:
        what, params, exc = failure
        sized = what == "odd sizes"
        where = "" if not sized else (
            f" at odd sizes (its size parameters made 3 smaller: "
            f"{', '.join(f'{k}={v!r}' for k, v in params.items())})" if params
            else f" at odd sizes (every make_tensor dimension >= {SIZES_FROM} made 3 smaller)")
        pytest.fail(
            f"pytest-triton judge: special-cased {'sizes' if sized else 'values'}: the test "
            f"passed with its own seed {seed.seed}, and fails with seed {new}{where}, which it did "
            "not announce (robust-kbench: filtering out kernels that special-case the tested "
            "shapes and values took KernelBench's mean speedup from 3.13x to 1.49x):\n    "
            f"{type(exc).__name__}: {_first_lines(exc)}\nReplay: pytest "
            f"{seed.location or item.nodeid} --triton-judge --triton-seed {seed.base}",
            pytrace=False)
    if done:
        call_record.note(f"judge: passed again with seed {new} ({' and '.join(done)}), values and "
                   "sizes it did not announce")
    for n in notes:
        call_record.note(f"judge: not run again with {n}")
