"""The saved documents' format: which kind a document is, the integer version it was written at,
and the steps that bring an older document up to this version (as asv's result files carry an
`api_version` that `asv update` raises).

Two kinds share one format: a --triton-perf-json report ("schema": REPORT) and a saved run
("schema": HISTORY: the report with a "run" block). Each is written with "schema_version":
VERSION. Files written before the version was an integer say both in one string,
"pytest-triton-history/1"; they read as version 1.

Reading upgrades: load() passes every document through upgrade(), one step per version, so the
code past it sees this version only. A document of a newer version than this code knows is
refused, naming the file and both versions: a field it added may matter, and guessing would
judge a run on data half read. `python -m pytest_triton upgrade` rewrites files in place at
this version.

A new version is a new entry in UPGRADES, from the one before, that changes the document as
the writer now writes it; fields a reader does not know are kept, not refused.
"""

from __future__ import annotations

from collections.abc import Callable

REPORT = "pytest-triton-perf"  # what --triton-perf-json writes
HISTORY = "pytest-triton-history"  # a saved run: the report and its "run" block
VERSION = 2
KINDS = {HISTORY: "history", REPORT: "perf report"}


class HistoryError(Exception):
    """A history file or directory that cannot be used; the message names it and the reason."""


def stamp(doc: dict, kind: str) -> dict:
    """`doc` as a document of `kind` at this version: "schema" and "schema_version" first."""
    rest = {k: v for k, v in doc.items() if k not in ("schema", "schema_version")}
    return {"schema": kind, "schema_version": VERSION, **rest}


def read_version(doc: dict, where: str) -> tuple[str, int]:
    """(kind, version) of a document: its "schema" and "schema_version", or the older single
    string "kind/N". HistoryError for a document that is not ours, or that is of a newer version
    than this code reads."""
    if not isinstance(doc, dict):
        raise HistoryError(f"{where}: a JSON {type(doc).__name__}, not a pytest-triton "
                           "history document (a JSON object)")
    schema = doc.get("schema")
    if schema is None:
        raise HistoryError(f"{where}: no \"schema\" field: not a pytest-triton history file")
    kind, slash, legacy = str(schema).partition("/")
    if kind not in KINDS:
        raise HistoryError(f"{where}: schema {schema!r}: not a pytest-triton history file "
                           f"({HISTORY})")
    if "schema_version" in doc or not slash:
        raw = version = doc.get("schema_version")
    else:  # the single string of version 1
        raw, version = legacy, int(legacy) if legacy.isdigit() else None
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise HistoryError(f"{where}: schema version {raw!r}: not a version (a positive "
                           "integer)")
    if version > VERSION:
        raise HistoryError(f"{where}: written by pytest-triton {KINDS[kind]} schema version "
                           f"{version}; this version reads {VERSION} and older: upgrade "
                           "pytest-triton to read it")
    return kind, version


def _from_1(doc: dict) -> dict:
    """Version 1 said its kind and version in one string ("pytest-triton-history/1"); version 2
    says the kind in "schema" and the version in "schema_version", an integer."""
    rest = {k: v for k, v in doc.items() if k != "schema"}
    return {"schema": str(doc["schema"]).partition("/")[0], "schema_version": 2, **rest}


# {version: the step from it to the next}
UPGRADES: dict[int, Callable[[dict], dict]] = {1: _from_1}


def upgrade(doc: dict, where: str) -> tuple[dict, int]:
    """(the document at this version, the version it was written at); HistoryError as
    read_version says."""
    found = version = read_version(doc, where)[1]
    while version < VERSION:
        doc = UPGRADES[version](doc)
        version += 1
    return doc, found
