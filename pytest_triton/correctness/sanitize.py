"""--triton-sanitize {memcheck,racecheck,initcheck}: the selected tests, run again under NVIDIA's
compute-sanitizer, each error attributed to the test that was running.

Once collection is done, the plugin runs the selected tests in a child pytest under
`compute-sanitizer --tool TOOL`, with PYTORCH_NO_CUDA_MEMORY_CACHING=1 (under PyTorch's caching
allocator a tensor is a slice of a larger cached block, so a store 37 elements past a 1000-element
tensor lands in memory the sanitizer counts as allocated, and it reports nothing). The child
writes a begin and an end line around each test to the stream the sanitizer reports on, after
synchronising the device, so every report between them belongs to that test. Then the tests run
here as usual, and each one the sanitizer reported on fails with the reports.

One sanitizer process for the whole selection, not one per test: CUDA start-up and Triton's
compilation under the sanitizer cost seconds each, which a per-test process would pay per test.
The child uses `--destroy-on-device-error kernel`, so that after an error the context survives
and later tests are still checked.

Without a CUDA GPU (kernels then run under Triton's interpreter, on the CPU) or without
compute-sanitizer, nothing is checked, and the header and the summary say so.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field

import pytest
import torch

from .. import options, state
from ..env import pytest_child, role, seeding
from ..env.runtime import find_cuda_tool

CHILD_ENV = pytest_child.SANITIZE_CHILD_ENV  # set in the child: the tool it runs under
IDS_ENV = "PYTEST_TRITON_SANITIZE_IDS"  # set in the child: the file of node ids to run
BEGIN = "@@pytest-triton-sanitize begin "
END = "@@pytest-triton-sanitize end "
PREFIX = "========="
# Sanitizer lines that are not reports of an error.
_NOT_ERRORS = ("COMPUTE-SANITIZER", "ERROR SUMMARY", "RACECHECK SUMMARY", "LEAK SUMMARY",
               "Target application returned")
MAX_LINES = 14  # per report, in a test's failure


@dataclass
class Outcome:
    tool: str
    unchecked: str | None = None  # why nothing was checked
    errors: dict[str, list[str]] = field(default_factory=dict)  # node id -> reports
    seen: set[str] = field(default_factory=set)  # node ids whose end line came
    stray: list[str] = field(default_factory=list)  # reports outside any test
    summary: str = ""  # the sanitizer's ERROR SUMMARY line
    returncode: int | None = None
    log: str = ""


KEY = pytest.StashKey[Outcome]()


def tool(config: pytest.Config) -> str | None:
    value = options.get(config, "triton_sanitize")
    return None if value in (None, "", "off") else value


def find_sanitizer() -> str | None:
    return find_cuda_tool("compute-sanitizer")


def configure(config: pytest.Config) -> None:
    """Validate --triton-sanitize and decide whether it can run here."""
    t = tool(config)
    if t is None or role.under_sanitizer():
        return
    if config.getoption("numprocesses", None):
        raise pytest.UsageError("--triton-sanitize runs the tests serially in one process under "
                                "compute-sanitizer: drop -n (pytest-xdist)")
    config.stash[KEY] = Outcome(t, unchecked=why_unchecked(config))


def why_unchecked(config: pytest.Config) -> str | None:
    """Why the sanitizer cannot run here, or None when it can."""
    rt = state.get(config).runtime
    if rt.interpret:
        return (f"kernels run under Triton's interpreter on the CPU ({rt.why}), which "
                "compute-sanitizer cannot see")
    if find_sanitizer() is None:
        return "compute-sanitizer was not found (PATH, $CUDA_HOME/bin, /usr/local/cuda/bin)"
    return None


def header(config: pytest.Config) -> list[str]:
    outcome = config.stash.get(KEY, None)
    if outcome is None:
        return []
    if outcome.unchecked:
        return [f"pytest-triton: --triton-sanitize {outcome.tool}: NOT CHECKED: "
                f"{outcome.unchecked}"]
    return [f"pytest-triton: --triton-sanitize {outcome.tool}: the selected tests run first under "
            f"compute-sanitizer --tool {outcome.tool} (PYTORCH_NO_CUDA_MEMORY_CACHING=1)"]


# --- the parent: run the child, read its output ---------------------------------------------

def _child_command(config: pytest.Config, sanitizer: str, t: str) -> list[str]:
    pyargs = ["--pyargs"] if getattr(config.option, "pyargs", False) else []
    return [sanitizer, "--tool", t, "--destroy-on-device-error", "kernel",
            *pytest_child.pytest_command(config, seed=seeding.option_value(config, seeding.base(config)),
                                     args=list(config.args),
                                     options=["-s", "-p", "no:cacheprovider", *pyargs])]


def run_child(session: pytest.Session) -> None:
    """After collection: run the selected tests under compute-sanitizer and keep what it said."""
    config = session.config
    outcome = config.stash.get(KEY, None)
    if outcome is None or outcome.unchecked or config.option.collectonly or not session.items:
        return
    sanitizer = find_sanitizer()
    with tempfile.TemporaryDirectory(prefix="pytest-triton-sanitize-") as tmp:
        ids = os.path.join(tmp, "ids.txt")
        with open(ids, "w") as f:
            f.write("\n".join(item.nodeid for item in session.items) + "\n")
        env = dict(os.environ, PYTORCH_NO_CUDA_MEMORY_CACHING="1", **{CHILD_ENV: outcome.tool,
                                                                      IDS_ENV: ids})
        cmd = _child_command(config, sanitizer, outcome.tool)
        reporter = config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_line(f"pytest-triton: running {len(session.items)} tests under "
                                f"compute-sanitizer --tool {outcome.tool} ...")
        proc = subprocess.run(cmd, cwd=str(config.invocation_params.dir), env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              errors="replace")
    outcome.returncode = proc.returncode
    outcome.log = proc.stdout
    parse(proc.stdout, outcome)


def _flush(block: list[str], current: str | None, outcome: Outcome, last: str | None) -> None:
    if not block:
        return
    text = "\n".join(block[:MAX_LINES] + ([f"{PREFIX}     ... ({len(block) - MAX_LINES} more "
                                            "lines)"] if len(block) > MAX_LINES else []))
    if current is not None:
        outcome.errors.setdefault(current, []).append(text)
    else:
        where = f"after {last} ended" if last else "before the first test began"
        outcome.stray.append(f"({where})\n{text}")
    block.clear()


def parse(output: str, outcome: Outcome) -> Outcome:
    """Attribute each report in the child's output to the test between whose markers it lies."""
    current, last = None, None
    block: list[str] = []
    for raw in output.splitlines():
        line = raw.rstrip("\n")
        if BEGIN in line:
            _flush(block, current, outcome, last)
            current = line.split(BEGIN, 1)[1].strip()
            continue
        if END in line:
            _flush(block, current, outcome, last)
            nodeid = line.split(END, 1)[1].strip()
            outcome.seen.add(nodeid)
            current, last = None, nodeid
            continue
        body = line[len(PREFIX):]
        if not line.startswith(PREFIX) or (body.strip() and not body.startswith(" ")) \
                or line.rstrip().endswith("="):  # not the sanitizer's (pytest's "=== x ===")
            _flush(block, current, outcome, last)
            continue
        if not body.strip():  # a bare prefix: the end of a report
            _flush(block, current, outcome, last)
        elif not body.startswith("  "):  # a report's first line
            _flush(block, current, outcome, last)
            head = body.strip()
            if head.startswith("ERROR SUMMARY") or head.startswith("RACECHECK SUMMARY"):
                outcome.summary = head
            elif not head.startswith(_NOT_ERRORS):
                block.append(line)
        elif block:  # an indented continuation line
            block.append(line)
    _flush(block, current, outcome, last)
    return outcome


# --- the child: select the tests, mark their boundaries ------------------------------------

def child_select(config: pytest.Config, items: list[pytest.Item]) -> None:
    path = os.environ.get(IDS_ENV)
    if not path:
        return
    with open(path) as f:
        wanted = {line.strip() for line in f if line.strip()}
    keep = [i for i in items if i.nodeid in wanted]
    dropped = [i for i in items if i.nodeid not in wanted]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = keep


def _mark(text: str) -> None:
    # On a line of its own: pytest's progress dots have no newline of their own yet.
    sys.stdout.flush()
    os.write(1, ("\n" + text + "\n").encode())


class child_markers:
    """In the child: a begin line before the test, and after it (the device synchronised, so that
    the sanitizer has reported on every kernel the test launched) an end line."""

    def __init__(self, item: pytest.Item):
        self.nodeid = item.nodeid if role.under_sanitizer() else None

    def __enter__(self):
        if self.nodeid:
            _mark(BEGIN + self.nodeid)

    def __exit__(self, *exc):
        if not self.nodeid:
            return False
        try:
            if torch.cuda.is_available() and torch.cuda.is_initialized():
                torch.cuda.synchronize()
        except Exception:  # noqa: BLE001 - a broken context is the sanitizer's to report
            pass
        _mark(END + self.nodeid)
        return False


# --- the parent: each test's verdict, the summary --------------------------------------------

def finish_call(item: pytest.Item) -> None:
    """After the test's body here: fail it if the sanitizer reported errors while it ran there."""
    __tracebackhide__ = True
    outcome = item.config.stash.get(KEY, None)
    if outcome is None or outcome.unchecked or outcome.returncode is None:
        return
    reports = outcome.errors.get(item.nodeid)
    if reports:
        n = len(reports)
        pytest.fail(f"compute-sanitizer --tool {outcome.tool} reported {n} error"
                    f"{'s' if n != 1 else ''} while this test ran (in a run of the selected tests "
                    "under the sanitizer, with PYTORCH_NO_CUDA_MEMORY_CACHING=1):\n"
                    + "\n".join(reports), pytrace=False)
    if item.nodeid not in outcome.seen:
        pytest.fail(f"compute-sanitizer --tool {outcome.tool} did not check this test: its run "
                    f"ended before the test did (exit status {outcome.returncode}); its last "
                    "lines:\n" + "\n".join(outcome.log.splitlines()[-15:]), pytrace=False)


def _n(count: int, what: str) -> str:
    return f"{count} {what}{'' if count == 1 else 's'}"


def terminal_summary(terminalreporter, config: pytest.Config) -> None:
    outcome = config.stash.get(KEY, None)
    if outcome is None:
        return
    tr = terminalreporter
    tr.section(f"pytest-triton --triton-sanitize {outcome.tool}")
    if outcome.unchecked:
        tr.write_line(f"NOT CHECKED: {outcome.unchecked}. No test was run under compute-sanitizer; "
                      "out-of-bounds accesses past the guard regions of poisoned buffers, races "
                      "in shared memory and reads of uninitialised memory went unchecked.")
        return
    if outcome.returncode is None:
        tr.write_line("no test was selected: nothing ran under compute-sanitizer")
        return
    n_tests = len(outcome.errors)
    n_reports = sum(len(v) for v in outcome.errors.values())
    tr.write_line(f"{_n(len(outcome.seen), 'test')} ran under compute-sanitizer --tool "
                  f"{outcome.tool}: {_n(n_reports, 'report')} on {_n(n_tests, 'test')}"
                  + (f"; the sanitizer's {outcome.summary}" if outcome.summary else ""))
    for report in outcome.stray:
        tr.write_line(f"reported outside any test {report}")


def session_finish(session: pytest.Session) -> None:
    """Reports that belong to no test fail the run (they are errors nonetheless)."""
    outcome = session.config.stash.get(KEY, None)
    if outcome is not None and outcome.stray and session.exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


class Sanitize:
    """--triton-sanitize TOOL: in the parent, the selected tests run first under
    compute-sanitizer and each test takes its verdict from that run; in that run (the child),
    only the selected tests run, each between a begin and an end line."""

    def __init__(self, config: pytest.Config):
        configure(config)

    def pytest_report_header(self, config: pytest.Config) -> list[str]:
        return header(config)

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        child_select(config, items)

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        run_child(session)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None):
        with child_markers(item):
            return (yield)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item: pytest.Item):
        result = yield
        finish_call(item)
        return result

    def pytest_terminal_summary(self, terminalreporter, exitstatus: int,
                                config: pytest.Config) -> None:
        terminal_summary(terminalreporter, config)

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        session_finish(session)


def wanted(config: pytest.Config) -> bool:
    """Whether this run sanitizes (--triton-sanitize), or is the run under the sanitizer."""
    return tool(config) is not None or role.under_sanitizer()
