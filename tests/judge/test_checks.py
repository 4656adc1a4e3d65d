"""The judge's list of checks (judge/checks.py) is the one the docs, the help and the code follow."""

import pathlib

import pytest

from pytest_triton.judge.checks import CHECKS
from pytest_triton.options import BY_NAME

ROOT = pathlib.Path(__file__).parents[2]
PKG = ROOT / "pytest_triton"


def _table_rows() -> list[list[str]]:
    """docs/judging.md's table of checks, each row's cells."""
    text = (ROOT / "docs" / "judging.md").read_text()
    section = text.split("## What is checked", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("|")]
    return [[cell.strip() for cell in row.strip("|").split("|")] for row in rows[2:]]


def test_the_docs_table_lists_the_checks_in_order():
    rows = _table_rows()
    assert [row[0] for row in rows] == [
        next((row[0] for row in rows if row[0].startswith(c.exploit)), c.exploit) for c in CHECKS]
    assert len(rows) == len(CHECKS)


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.exploit)
def test_the_docs_table_says_when_each_check_runs(check):
    row = next(row for row in _table_rows() if row[0].startswith(check.exploit))
    assert row[3] == check.when


@pytest.mark.parametrize("check", [c for c in CHECKS if c.findings], ids=lambda c: c.exploit)
def test_each_check_names_its_finding_where_it_lives(check):
    source = (PKG / check.module).read_text()
    for finding in check.findings:
        assert f"{finding}" in source, f"{check.module} never writes {finding!r}"


def test_the_judge_option_names_every_check_by_its_help_words():
    help_text = " ".join(BY_NAME["triton_judge"].help.split())
    costly, cheap = help_text.split("default keeps", 1)
    for check in CHECKS:
        if check.help:
            assert check.help in (costly if check.costly else cheap), check
