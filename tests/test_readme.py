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
        # docs/without-a-gpu.md quotes this skip line (as test_add.py): the same line of the
        # same file
        page = (pathlib.Path(__file__).parents[1] / "docs" / "without-a-gpu.md").read_text()
        quoted = re.search(r"^SKIPPED \[1\] test_add\.py:(\d+): (.*)$", page, re.M)
        result.stdout.fnmatch_lines([f"SKIPPED [[]1[]] test_first.py:{quoted.group(1)}: "
                                     f"{quoted.group(2)}"])
    else:
        result.stdout.fnmatch_lines(["*perf test (perf_target(bandwidth_frac=0.8)): run with "
                                     "--triton-perf*"])


ROOT = pathlib.Path(__file__).parents[1]


def _readme() -> str:
    return (ROOT / "README.md").read_text()


def _doc(name: str) -> str:
    return (ROOT / "docs" / name).read_text()


def test_readme_lists_every_field_of_the_hook_types():
    import dataclasses

    from pytest_triton.env.device import DeviceInfo
    from pytest_triton.perf.timing import Settings, Timings

    hooks = _doc("hooks.md")
    for cls in (DeviceInfo, Timings, Settings):
        missing = [f.name for f in dataclasses.fields(cls) if f"`{f.name}`" not in hooks]
        assert not missing, f"README's Hooks section lacks {cls.__name__} fields {missing}"


def test_every_option_the_user_sections_name_exists():
    from pytest_triton.options import all_options

    sections = [_readme().split("## Use it in your kernel project", 1)[1].split("\n## ", 1)[0],
                _doc("without-a-gpu.md")]
    flags = {o.flag for o in all_options()}
    named = {f for text in sections for f in re.findall(r"--triton-[a-z-]*[a-z]", text)}
    assert named and named <= flags, named - flags
