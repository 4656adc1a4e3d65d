"""The README's first kernel test runs as written."""

import pathlib
import re

from pytest_triton import interpreting


def test_readme_first_kernel_test_runs(pytester):
    readme = (pathlib.Path(__file__).parents[1] / "README.md").read_text()
    section = readme.split("## Your first kernel test", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    pytester.makepyfile(test_first=code)
    result = pytester.runpytest("-rs")
    result.assert_outcomes(passed=1, skipped=1)
    if interpreting():  # no GPU: the perf test's body dry-ran at its small size
        result.stdout.fnmatch_lines(["*dry run, nothing timed (no GPU): 1 triton_bench call checked "
                                     "and fn and baseline run once; targets unchecked: "
                                     "perf_target(bandwidth_frac=0.8)*"])
    else:
        result.stdout.fnmatch_lines(["*perf test (perf_target(bandwidth_frac=0.8)): run with "
                                     "--triton-perf*"])
