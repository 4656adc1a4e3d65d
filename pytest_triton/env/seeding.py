"""Per-test seeds: stable for a test id, distinct between tests, replayable from a failure report."""

from __future__ import annotations

import contextvars
import hashlib
import secrets
import shlex
from dataclasses import dataclass, replace

import pytest

from .. import options
from ..options import Option
from . import role

OPTIONS = options.declare(
    Option("triton_seed", "string", "0",
           "base seed of make_tensor; each test's seed is derived from it and the test id. "
           "'random' draws a new base seed (printed in the header, and in the summary under -q); "
           "BASE:SEED gives every selected test the seed SEED (the replay command a failure "
           "prints)",
           metavar="N|random|BASE:SEED"),
)

@dataclass(frozen=True)
class TestSeed:
    seed: int  # what make_tensor's generator was seeded with
    base: int  # --triton-seed
    nodeid: str
    fixed: bool = False  # set directly by --triton-seed BASE:SEED, not derived from the test id
    location: str | None = None  # the test's absolute path and name, runnable from anywhere

    def describe(self) -> str:
        how = (f"fixed by --triton-seed {self.base}:{self.seed}" if self.fixed
               else f"from --triton-seed {self.base} and the test id")
        where = self.location or self.nodeid
        return (f"seed {self.seed} ({how}); replay (from any directory): "
                f"pytest {shlex.quote(where)} --triton-seed {self.base}:{self.seed}")


# The seed of the test running now: assert_close reads it to print it in its failure report.
CURRENT: contextvars.ContextVar[TestSeed | None] = contextvars.ContextVar("triton_seed", default=None)

SEED_BOUND = 2**31  # test seeds lie in [0, SEED_BOUND)
_FIXED_KEY = pytest.StashKey["int | None"]()
_BASE_KEY = pytest.StashKey[int]()  # config: the run's base seed, decided once (configure)


def configure(config: pytest.Config) -> int:
    """Decide the run's base seed (once: 'random' draws it) and keep it; base() reads it."""
    config.stash[_BASE_KEY] = value = base_seed(config)
    return value


def base(config: pytest.Config) -> int:
    """The run's base seed (--triton-seed)."""
    return config.stash[_BASE_KEY]


def _split(config: pytest.Config) -> tuple[str, str, str | None]:
    """(the value as given, BASE, SEED or None)."""
    given = str(options.get(config, "triton_seed")).strip()
    if ":" in given:
        base, fixed = given.split(":", 1)
        return given, base.strip(), fixed.strip()
    return given, given, None


def _usage(given: str, problem: str) -> pytest.UsageError:
    return pytest.UsageError(f"--triton-seed {given!r}: {problem}")


_FORMS = ("expected N (an integer), 'random', or BASE:SEED (two integers, as a failure's replay "
          "command gives them)")


def base_seed(config: pytest.Config) -> int:
    """The base seed; --triton-seed BASE:SEED also fixes every test's seed to SEED (a replay of
    one test, independent of its test id, which changes with the rootdir). Under pytest-xdist a
    worker takes its controller's base, so that 'random' draws one base for the whole run."""
    given, raw, fixed = _split(config)
    config.stash[_FIXED_KEY] = None
    if fixed is not None:
        if not raw:
            raise _usage(given, f"BASE is missing before the ':'; {_FORMS}")
        if not fixed:
            raise _usage(given, f"SEED is missing after the ':'; {_FORMS}")
        try:
            value = int(fixed, 0)
        except ValueError:
            raise _usage(given, f"SEED {fixed!r} is not an integer: expected BASE:SEED, two "
                         "integers") from None
        if not 0 <= value < SEED_BOUND:
            raise _usage(given, "expected 0 <= SEED < 2**31")
        config.stash[_FIXED_KEY] = value
    if raw == "random":
        if fixed is not None:
            raise _usage(given, "a fixed test seed needs an integer base")
        inherited = role.worker_input(config).get(_WORKER_KEY)
        return int(inherited) if inherited is not None else secrets.randbelow(2**31)
    if not raw:
        raise _usage(given, _FORMS)
    try:
        value = int(raw, 0)
    except ValueError:
        raise _usage(given, _FORMS) from None
    if not 0 <= value < 2**63:
        raise _usage(given, "expected 0 <= N < 2**63")
    return value


def drawn_at_random(config: pytest.Config) -> bool:
    """Whether the base seed was drawn for this run (--triton-seed random)."""
    return _split(config)[1] == "random"


_WORKER_KEY = "triton_base_seed"


class RandomBaseToWorkers:
    """On the xdist controller: each worker gets the controller's base seed, so that
    --triton-seed random means one base for the run, the one the header and summary print."""

    def __init__(self, base: int):
        self.base = base

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node) -> None:
        node.workerinput[_WORKER_KEY] = self.base


def fixed_seed(config: pytest.Config) -> int | None:
    """SEED of --triton-seed BASE:SEED, else None."""
    return config.stash.get(_FIXED_KEY, None)


def option_value(config: pytest.Config, base: int) -> str:
    """--triton-seed's value as given (BASE or BASE:SEED), for a child pytest."""
    fixed = fixed_seed(config)
    return str(base) if fixed is None else f"{base}:{fixed}"


def test_seed(base: int, nodeid: str) -> TestSeed:
    digest = hashlib.blake2b(f"{base}\0{nodeid}".encode(), digest_size=8).digest()
    return TestSeed(int.from_bytes(digest, "little") % SEED_BOUND, base, nodeid)


def for_item(item: pytest.Item, base: int) -> TestSeed:
    """The seed of `item`: derived from the base and its test id, or fixed by --triton-seed
    BASE:SEED; with the location a replay command can use from any directory."""
    return _seed(item.config, base, item.nodeid, _location(item))


def for_nodeid(config: pytest.Config, base: int, nodeid: str) -> TestSeed:
    """The seed of the test `nodeid` where its item is not at hand (a crashed child's test, a
    dead xdist worker's): as for_item, with the path taken from the rootdir."""
    file_part, sep, rest = nodeid.partition("::")
    path = config.rootpath / file_part
    return _seed(config, base, nodeid, str(path) + sep + rest if path.exists() else None)


def _seed(config: pytest.Config, base: int, nodeid: str, location: str | None) -> TestSeed:
    derived = test_seed(base, nodeid)
    fixed = fixed_seed(config)
    return replace(derived, seed=derived.seed if fixed is None else fixed,
                   fixed=fixed is not None, location=location)


def _location(item: pytest.Item) -> str | None:
    path = getattr(item, "path", None)
    if path is None:
        return None
    _, sep, rest = item.nodeid.partition("::")
    return str(path) + (sep + rest if sep else "")


class Seeding:
    """Each test runs with its seed (CURRENT), a failure with make_tensor says how to replay it,
    and a base seed drawn at random is printed again at the end (the header is not shown under
    -q); under xdist the controller's drawn base goes to every worker."""

    def __init__(self, config: pytest.Config):
        self._base = base(config)
        if drawn_at_random(config) and role.is_controller(config):
            config.pluginmanager.register(RandomBaseToWorkers(self._base), "triton-seed-base")

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None):
        token = CURRENT.set(for_item(item, self._base))
        try:
            return (yield)
        finally:
            CURRENT.reset(token)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo):
        report = yield
        if report.failed and "make_tensor" in getattr(item, "fixturenames", ()):
            said = CURRENT.get().describe()
            # assert_close's failures end with the seed already: said once, not twice
            if call.excinfo is None or said not in str(call.excinfo.value):
                report.sections.append(("pytest-triton", said))
        return report

    def pytest_terminal_summary(self, terminalreporter, exitstatus: int, config: pytest.Config) -> None:
        if drawn_at_random(config):
            terminalreporter.write_line(
                f"pytest-triton: seed base {self._base} (drawn by --triton-seed random); replay "
                f"this run with --triton-seed {self._base}")
