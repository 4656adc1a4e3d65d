"""Per-test seeds: stable for a test id, distinct between tests, replayable from a failure report."""

from __future__ import annotations

import contextvars
import hashlib
import secrets
from dataclasses import dataclass

import pytest

from . import options


@dataclass(frozen=True)
class TestSeed:
    seed: int  # what make_tensor's generator was seeded with
    base: int  # --triton-seed
    nodeid: str

    def describe(self) -> str:
        return (f"seed {self.seed} (from --triton-seed {self.base} and the test id); "
                f"replay: pytest '{self.nodeid}' --triton-seed {self.base}")


# The seed of the test running now: assert_close reads it to print it in its failure report.
CURRENT: contextvars.ContextVar[TestSeed | None] = contextvars.ContextVar("triton_seed", default=None)


def base_seed(config: pytest.Config) -> int:
    raw = str(options.get(config, "triton_seed")).strip()
    if raw == "random":
        return secrets.randbelow(2**31)
    try:
        value = int(raw, 0)
    except ValueError:
        raise pytest.UsageError(f"--triton-seed {raw!r}: expected an integer or 'random'") from None
    if not 0 <= value < 2**63:
        raise pytest.UsageError(f"--triton-seed {raw!r}: expected 0 <= N < 2**63")
    return value


def test_seed(base: int, nodeid: str) -> TestSeed:
    digest = hashlib.blake2b(f"{base}\0{nodeid}".encode(), digest_size=8).digest()
    return TestSeed(int.from_bytes(digest, "little") % 2**31, base, nodeid)
