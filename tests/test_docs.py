"""The README and docs/ as a reader finds them (issue 32): a short README that links every page,
links and anchors that resolve, Python snippets that parse, options that exist, and no counts or
times typed in by hand (those come from BENCHMARKS.md, rendered from runs)."""

import ast
import pathlib
import re

import pytest

from pytest_triton.options import all_options

OPTIONS = all_options()

ROOT = pathlib.Path(__file__).parents[1]
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
PAGES = [README, *DOCS]
MAX_README_LINES = 350


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to dashes."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _prose_and_code(text: str) -> tuple[list[str], list[tuple[str, str]]]:
    """The lines outside code fences, and each fenced block as (language, code)."""
    prose, blocks, fence, lang, code = [], [], False, "", []
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("```"):
            if fence:
                blocks.append((lang, "\n".join(code)))
                code = []
            else:
                lang = stripped[3:].strip()
            fence = not fence
        elif fence:
            code.append(line)
        else:
            prose.append(line)
    return prose, blocks


def _anchors(path: pathlib.Path) -> set[str]:
    prose, _ = _prose_and_code(path.read_text())
    return {_slug(line.lstrip("#")) for line in prose if line.startswith("#")}


def _ids(paths):
    return [str(p.relative_to(ROOT)) for p in paths]


def test_the_readme_is_short():
    n = len(README.read_text().splitlines())
    assert n <= MAX_README_LINES, f"README.md has {n} lines; the reference belongs in docs/"


def test_every_docs_page_is_linked_from_the_readme():
    readme = README.read_text()
    missing = [p.name for p in DOCS if f"(docs/{p.name})" not in readme
               and f"(docs/{p.name}#" not in readme]
    assert DOCS and not missing, f"docs pages the README does not link: {missing}"


@pytest.mark.parametrize("page", PAGES, ids=_ids(PAGES))
def test_every_relative_link_and_anchor_resolves(page):
    prose, _ = _prose_and_code(page.read_text())
    bad = []
    for target in re.findall(r"\]\(([^)\s]+)\)", "\n".join(prose)):
        if re.match(r"https?:|mailto:", target):
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            bad.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
            bad.append(f"{target}: no heading #{anchor} in {dest.name}")
    assert not bad, bad


@pytest.mark.parametrize("page", PAGES, ids=_ids(PAGES))
def test_every_python_snippet_parses(page):
    for lang, code in _prose_and_code(page.read_text())[1]:
        if lang == "python":
            ast.parse(code)  # a SyntaxError names the snippet's line


@pytest.mark.parametrize("page", PAGES, ids=_ids(PAGES))
def test_every_option_named_exists(page):
    flags = {o.flag for o in OPTIONS}
    named = set(re.findall(r"--triton-[a-z0-9-]*[a-z0-9]", page.read_text()))
    assert named <= flags, f"options that do not exist: {sorted(named - flags)}"


def test_every_option_is_documented_in_the_options_page():
    page = (ROOT / "docs" / "options.md").read_text()
    missing = [o.flag if o.kind != "linelist" else o.name for o in OPTIONS
               if (o.flag if o.kind != "linelist" else o.name) not in page]  # linelist: ini only
    assert not missing, f"docs/options.md does not name {missing}"


STALE = [
    (r"\b\d+ (passed|failed|skipped|tests)\b", "a test count"),
    (r"\b\d+(\.\d+)? s (wall|on an? [A-Z])", "a run's time"),
    (r"\bcommit [0-9a-f]{7,}\b", "a commit"),
    (r"\blent machines?\b", "this project's own machines"),
]


def test_the_readme_types_in_no_count_or_time_of_a_run():
    # they go stale at the next commit: BENCHMARKS.md renders them from the run's own files
    text = " ".join(README.read_text().split())
    found = [f"{what}: {m.group(0)!r}" for pattern, what in STALE
             for m in re.finditer(pattern, text)]
    assert not found, found
