"""Each xdist worker's busy and idle time (report/busy.py): a sleeping test makes its worker busy,
the worker that ends first shows its tail; without xdist the terminal gets no section."""

import re

import pytest

from pytest_triton.report import busy

SUITE = "import time\ndef test_sleeps(): time.sleep(1.2)\ndef test_a(): pass\ndef test_b(): pass\n"


@pytest.mark.requires_plugin("pytest-xdist")
def test_each_worker_shows_its_busy_idle_and_tail_time(pytester):
    pytester.makepyfile(SUITE)
    result = pytester.runpytest_subprocess("-n", "2", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=3)
    out = result.stdout.str()
    assert busy.TITLE in out
    lines = {m[0]: (float(m[1]), float(m[2]), float(m[3])) for m in re.findall(
        r"^(gw\d)(?: \(GPU [^)]*\))?: \d+ tests?, busy ([\d.]+) s, idle ([\d.]+) s, .* ([\d.]+) s "
        r"after its last$",
        out, re.M)}
    assert sorted(lines) == ["gw0", "gw1"]
    sleeper = max(lines.values())
    other = min(lines.values())
    assert sleeper[0] >= 1.2  # the sleeping test's worker was busy
    assert other[0] < 0.5 and other[1] >= 1.0 and other[2] >= 1.0  # the other idled at its end
    result.stdout.fnmatch_lines(["session * s over 2 workers: busy * s of * s (*%)"])


def test_without_xdist_no_section(pytester):
    pytester.makepyfile(SUITE)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=3)
    assert busy.TITLE not in result.stdout.str()
