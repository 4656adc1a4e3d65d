"""What .ci/run takes from the README, verbatim, so that CI runs what a user reads.

    python .ci/readme.py setup        the commands of "Set up and test", one per line
    python .ci/readme.py first-test   the test file of "Your first kernel test"
    python .ci/readme.py job cpu      the `run:` steps of the CI recipe's cpu job, one per line
    python .ci/readme.py job gpu      ... of its gpu job, less `nvidia-smi` (no GPU here)
    python .ci/readme.py perf-addopts pull_request|push
                                      the PYTEST_ADDOPTS its perf step gets on that event
    python .ci/readme.py sharded gpu-shard|gpu-gate
                                      the `run:` steps of the GPU matrix variant's job, one per
                                      line (`${{ ... }}` left for the caller to fill in)

Each fails loudly when the README no longer has what it looks for.
"""

from __future__ import annotations

import pathlib
import re
import sys

README = pathlib.Path(__file__).resolve().parents[1] / "README.md"


def section(text: str, heading: str) -> str:
    start = text.index(heading)
    end = text.find("\n## ", start + len(heading))
    return text[start:] if end < 0 else text[start:end]


def fenced(text: str, lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", text, re.S)


def setup(text: str) -> list[str]:
    block = fenced(section(text, "## Set up and test"), "bash")[0]
    return [line for line in block.splitlines() if line.strip() and not line.startswith("#")]


def first_test(text: str) -> str:
    return fenced(section(text, "## Your first kernel test"), "python")[0]


def job(text: str, name: str) -> list[str]:
    recipe = fenced(section(text, "## Use it in your kernel project"), "yaml")[0]
    jobs = re.split(r"^  (\w+):\n", recipe.split("\njobs:\n", 1)[1], flags=re.M)
    steps = dict(zip(jobs[1::2], jobs[2::2]))[name]
    runs = re.findall(r"^      - run: (.*)$", steps, re.M)
    if not runs:
        raise SystemExit(f"README: the CI recipe's {name} job has no run steps")
    return [r for r in runs if r.strip() != "nvidia-smi"]


def sharded(text: str, name: str) -> list[str]:
    recipes = fenced(section(text, "## Use it in your kernel project"), "yaml")
    matrix = [r for r in recipes if "\n  gpu-shard:\n" in "\n" + r]
    if not matrix:
        raise SystemExit("README: no GPU matrix variant (a gpu-shard job) in the CI recipes")
    jobs = re.split(r"^  ([\w-]+):\n", "\n" + matrix[0], flags=re.M)
    steps = dict(zip(jobs[1::2], jobs[2::2])).get(name)
    runs = re.findall(r"^      - run: (.*)$", steps or "", re.M)
    if not runs:
        raise SystemExit(f"README: the GPU matrix variant's {name} job has no run steps")
    return runs


def perf_addopts(text: str, event: str) -> str:
    recipe = fenced(section(text, "## Use it in your kernel project"), "yaml")[0]
    m = re.search(r"PYTEST_ADDOPTS: \$\{\{ github\.event_name == 'pull_request' && '([^']*)' "
                  r"\|\| '([^']*)' \}\}", recipe)
    if not m:
        raise SystemExit("README: the CI recipe's perf step sets no PYTEST_ADDOPTS per event")
    return m.group(1) if event == "pull_request" else m.group(2)


def main(argv: list[str]) -> None:
    text = README.read_text()
    if argv[:1] == ["setup"]:
        print("\n".join(setup(text)))
    elif argv[:1] == ["first-test"]:
        sys.stdout.write(first_test(text))
    elif argv[:1] == ["job"] and len(argv) == 2:
        print("\n".join(job(text, argv[1])))
    elif argv[:1] == ["sharded"] and len(argv) == 2:
        print("\n".join(sharded(text, argv[1])))
    elif argv[:1] == ["perf-addopts"] and len(argv) == 2:
        print(perf_addopts(text, argv[1]))
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
