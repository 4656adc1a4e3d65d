"""--triton-order: under pytest-xdist, the tests go out longest first (their expected durations,
expected.py), so that no worker is left running the long tail alone while the others idle.

xdist's load scheduling (--dist load, the default of -n) gives each worker one block of
consecutive tests first, then refills a worker from the front of the queue as it frees. The
order is laid out for that: the first blocks are filled as longest-processing-time-first fills
bins (each next-longest test to the block with the least time in it), and every test after them
follows longest first; --maxschedchunk 1 is set where it was not given (as GPULock does on a
GPU), so the blocks hold two tests each and a refill is one test, handed to whichever worker
frees first. Within the GPU lock's groups (tests alone throughout, shared, no lock, timing:
gpuholds.order) each group is ordered this way, the groups keeping their order.

The order is computed once, on the controller (the saved durations it reads are handed to every
worker in its workerinput): xdist aborts a run whose workers collected different orders. Ties
keep the collection order. In a run of one process the collection order stays unless
--triton-order=longest-first asks otherwise: its verdicts are those of the order the user wrote.

What the order went by (how many of the tests a saved run holds, the rest estimated) is kept as
the run's basis(): under xdist the workers' section of the terminal summary says it (busy.py),
and the --triton-perf-json document has it as "order". A team that sees its tests ordered by
estimates learns that a saved history would order them by what they took.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from .. import options, state
from ..env import role
from ..process import gpuholds
from . import expected

OPTIONS = options.declare(
    options.Option(
        "triton_order", "string", "auto",
        "the order tests are handed out in: longest-first (by the durations the saved runs in "
        "--triton-perf-history hold, else an estimate from each test's perf target; under "
        "pytest-xdist laid out so that no worker is left with the long tail) or collection "
        "(the order pytest collected). auto: longest-first under pytest-xdist, collection in "
        "a run of one process", metavar="auto|longest-first|collection",
        choices=("auto", "longest-first", "collection")),
)

WORKERINPUT_KEY = "pytest_triton_order"  # {"durations", "dist", "maxschedchunk"}
BASIS_KEY = pytest.StashKey[dict]()  # config: what the order went by (basis())


def basis(config: pytest.Config) -> dict | None:
    """What this run's longest-first order went by: {"order": "longest-first", "tests": how many
    were ordered, "saved": how many of them a saved run holds (the rest were estimated),
    "history": the folder read}. None where the tests kept the collection order."""
    return config.stash.get(BASIS_KEY, None)


def basis_line(found: dict | None) -> str | None:
    """basis() in words, for the terminal: None where there is none."""
    if not found or not found.get("tests"):
        return None
    saved, tests = found["saved"], found["tests"]
    if saved == tests:
        how = f"all {tests} by the durations saved runs hold"
    elif saved:
        how = (f"{saved} of {tests} by the durations saved runs hold, {tests - saved} by an "
               "estimate from what each measures")
    else:
        how = (f"all {tests} by an estimate from what each measures: no saved run in "
               f"{found['history']} holds them")
    return f"tests handed out longest first: {how}"


def lay_out(items: list[pytest.Item], seconds: list[float], workers: int,
            first_block: int) -> list[pytest.Item]:
    """`items` longest first, where the first `workers` x `first_block` go to the workers' first
    blocks (worker k takes positions k*first_block ...) filled as LPT fills bins. Stable: ties
    keep their order in `items`."""
    ranked = sorted(range(len(items)), key=lambda i: -seconds[i])
    head = workers * first_block if workers > 1 else 0
    if head == 0 or len(ranked) < head:
        return [items[i] for i in ranked]
    blocks: list[list[int]] = [[] for _ in range(workers)]
    load = [0.0] * workers
    for i in ranked[:head]:
        k = min((k for k in range(workers) if len(blocks[k]) < first_block),
                key=lambda k: (load[k], k))
        blocks[k].append(i)
        load[k] += seconds[i]
    return [items[i] for b in blocks for i in b] + [items[i] for i in ranked[head:]]


def first_block(n_items: int, workers: int, maxschedchunk: int | None) -> int:
    """How many tests xdist's LoadScheduling.schedule sends each worker at first: one each,
    round robin, where there are fewer than two per worker; else a quarter of a worker's share,
    at most --maxschedchunk, at least 2."""
    if n_items < 2 * workers:
        return 1
    chunk = n_items if maxschedchunk is None else maxschedchunk
    return max(min(n_items // workers // 4, chunk), 2)


class LongestFirst:
    """The order, in the process that collects (an xdist worker, or a run of its own); the
    saved durations, read on the controller and handed to its workers. Registered where the
    order is longest first (plugin.ordering)."""

    def __init__(self, config: pytest.Config):
        self._config = config
        self._known: dict[str, float] | None = None
        self._history = Path(config.rootpath, options.get(config, "triton_perf_history"))
        opt = config.option
        if role.is_controller(config) and getattr(opt, "dist", "no") == "load" \
                and getattr(opt, "maxschedchunk", 0) is None:
            opt.maxschedchunk = 1

    def known(self) -> dict[str, float]:
        """The saved durations: those the controller handed over, else read here."""
        if self._known is None:
            handed = role.worker_input(self._config).get(WORKERINPUT_KEY)
            if handed is not None:
                self._known = handed["durations"]
            else:
                gpu = not state.get(self._config).runtime.interpret
                self._known = expected.saved(self._history, expected.of_kind(gpu))
        return self._known

    def _keep_basis(self, ids: list[str]) -> None:
        known = self.known()
        self._config.stash[BASIS_KEY] = {
            "order": "longest-first", "tests": len(ids),
            "saved": sum(1 for i in ids if i in known), "history": str(self._history)}

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node, ids: list[str]) -> None:
        # the controller: every worker collected the same tests (xdist checks), the first says
        if BASIS_KEY not in self._config.stash:
            self._keep_basis(list(ids))

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node) -> None:  # pytest-xdist's controller, per worker
        # a worker's own options do not hold what the controller decided (--maxschedchunk set
        # here or by GPULock, the --dist -n implies), and its first blocks follow them
        opt = self._config.option
        node.workerinput[WORKERINPUT_KEY] = {
            "durations": self.known(), "dist": getattr(opt, "dist", "no"),
            "maxschedchunk": getattr(opt, "maxschedchunk", None)}

    @pytest.hookimpl(wrapper=True)
    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]):
        # around every other implementation: the deselections (-m, -k, pytest-split's shard)
        # and the GPU lock's groups are in place
        result = yield
        if items:
            known = self.known()
            self._keep_basis([it.nodeid for it in items])
            workerinput = role.worker_input(config)
            workers = int(workerinput.get("workercount", 1))
            handed = workerinput.get(WORKERINPUT_KEY) or {}
            block = first_block(len(items), workers, handed.get("maxschedchunk")) \
                if workers > 1 and handed.get("dist") == "load" else 0
            ordered: list[pytest.Item] = []
            for group in _groups(items):
                seconds = [expected.expected(it, known) for it in group]
                ordered.extend(lay_out(group, seconds, workers, block if not ordered else 0))
            items[:] = ordered
        return result


def _groups(items: list[pytest.Item]) -> list[list[pytest.Item]]:
    """The GPU lock's groups, in its order (one group where it takes no lock)."""
    out: dict[int, list[pytest.Item]] = {}
    for it in items:
        out.setdefault(gpuholds.rank(it), []).append(it)
    return [out[k] for k in sorted(out)]
