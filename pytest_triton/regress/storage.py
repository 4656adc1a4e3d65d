"""Saved runs: one JSON file per run, in a directory per device, found again by name or as the
latest (the shards of one CI run are merged into one by shards.py).

A saved run is the run's JSON document (report/summary.document, what --triton-perf-json
writes) with "schema" set to schema.HISTORY and a "run" block (provenance.py): the name, the git
commit, branch and dirty flag, the versions, the host and the shards merged in. Every document
read passes through schema.upgrade first. docs/regressions.md describes the layout.

Files are written once and never replaced: a temporary file in the same directory, then a hard
link to a name no other file has (so a concurrent save cannot lose a file; jsonfile.py). Nothing
here deletes; `python -m pytest_triton upgrade` alone rewrites a file, at the same name.
"""

from __future__ import annotations

import datetime
import json
import os
import re
import secrets
from dataclasses import dataclass, field
from pathlib import Path

from ..perf.record import PerfRecord
from . import jsonfile, schema
from .schema import HistoryError

DEFAULT_DIR = ".pytest-triton/history"
NO_DEVICE = "no-device"  # runs that measured nothing on a GPU (dry runs on CPU, hand-made records)
RUN_FIELDS = ("name", "commit", "branch", "dirty", "versions", "host", "shards")
# <UTC stamp>-<commit or nocommit>-<name or run>-<random>.json; names may contain dashes
_FILE = re.compile(r"^(\d{8}T\d{12}Z)-([0-9a-f]+|nocommit)-(.+)-([0-9a-f]{8})\.json$")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


@dataclass
class SavedRun:
    """One saved run: its run block, its device and settings, and a PerfRecord per perf test."""
    name: str | None
    commit: str | None  # None outside git, and for a plain --triton-perf-json report
    branch: str | None
    dirty: bool | None
    versions: dict
    host: str | None
    shards: list[dict]  # one entry per file merged in; empty for a run saved by one process
    created: str | None
    device: dict | None  # None when nothing was measured, or several devices were
    settings: dict
    environment: dict
    records: list[PerfRecord]
    path: Path | None = None
    rest: dict = field(default_factory=dict)  # the document's other fields, kept as they were

    @property
    def key(self) -> str:
        """The directory its device's runs are saved in (device_key)."""
        return device_key(run_device({"device": self.device, "environment": self.environment}))

    @classmethod
    def from_document(cls, doc, path: Path | str | None = None, *,
                      allow_report: bool = False) -> SavedRun:
        """Read a saved run (or, with allow_report, a plain --triton-perf-json report as a run of
        unknown commit); HistoryError names `path` and what is wrong."""
        where = str(path) if path is not None else "<document>"
        doc, _ = schema.upgrade(doc, where)
        kind = schema.read_version(doc, where)[0]
        for k in ("device", "settings", "environment"):
            if doc.get(k) is not None and not isinstance(doc[k], dict):
                raise HistoryError(f"{where}: \"{k}\" is a JSON {type(doc[k]).__name__}, not an "
                                   "object")
        if kind == schema.REPORT:
            if not allow_report:
                raise HistoryError(
                    f"{where}: a --triton-perf-json report, not a saved run: it has no \"run\" "
                    "block (no commit, branch or versions)")
            env = doc.get("environment") or {}
            run = {"versions": {**{k: env.get(k) for k in ("python", "torch", "triton", "pytest",
                                                           "cuda")},
                                "pytest_triton": None,
                                "driver": (run_device(doc) or {}).get("driver")}}
        else:
            run = doc.get("run")
            if not isinstance(run, dict):
                raise HistoryError(f"{where}: no \"run\" block")
            missing = [k for k in RUN_FIELDS if k not in run]
            if missing:
                raise HistoryError(f"{where}: the \"run\" block lacks {', '.join(missing)}")
        results = doc.get("results")
        if not isinstance(results, list):
            raise HistoryError(f"{where}: no \"results\" list")
        records = []
        for i, r in enumerate(results):
            try:
                records.append(PerfRecord.from_dict(r))
            except (KeyError, TypeError, ValueError, AttributeError) as exc:
                nodeid = r.get("nodeid", "?") if isinstance(r, dict) else "?"
                raise HistoryError(f"{where}: result {i} ({nodeid}) cannot be read: "
                                   f"{type(exc).__name__}: {exc}") from None
        taken = {"schema", "schema_version", "run", "created", "device", "settings",
                 "environment", "results"}
        return cls(name=run.get("name"), commit=run.get("commit"), branch=run.get("branch"),
                   dirty=run.get("dirty"), versions=run.get("versions") or {},
                   host=run.get("host"), shards=list(run.get("shards") or []),
                   created=doc.get("created"), device=doc.get("device"),
                   settings=doc.get("settings") or {}, environment=doc.get("environment") or {},
                   records=records, path=Path(path) if path is not None else None,
                   rest={k: v for k, v in doc.items() if k not in taken})

    def to_document(self) -> dict:
        """The saved-run document (what save writes and from_document reads)."""
        return {"schema": schema.HISTORY, "schema_version": schema.VERSION,
                "created": self.created,
                "run": {k: getattr(self, k) for k in RUN_FIELDS},
                "environment": self.environment, "device": self.device,
                "settings": self.settings, **self.rest,
                "results": [r.to_dict() for r in self.records]}


def created_at(doc: dict) -> datetime.datetime | None:
    """When a document's run was made (its "created", with a time zone), or None."""
    try:
        when = datetime.datetime.fromisoformat(str(doc.get("created")))
    except ValueError:
        return None
    return when if when.tzinfo is not None else None


def check_name(name: str) -> str:
    """A run's name as given to save: letters, digits, '.', '_' and '-' (it is part of the file
    name), at most 64 characters; not 'latest' nor 'run'."""
    if not _NAME.match(name) or name in ("latest", "run"):
        raise HistoryError(f"run name {name!r}: use letters, digits, '.', '_' and '-' (at most "
                           "64, starting with a letter or digit), and not 'latest' or 'run' "
                           "(find's word for the newest run, and an unnamed run's file name)")
    return name


def run_device(doc: dict) -> dict | None:
    """The device a document's runs are keyed by: its device, or the first of several."""
    devices = (doc.get("environment") or {}).get("devices") or [None]
    return doc.get("device") or devices[0]


def device_key(device: dict | None) -> str:
    """A directory name for a device: its SKU (else its name) and its fingerprint's first 8
    characters, e.g. 'H100-SXM-e53cef81'; 'no-device' for a run that measured nothing."""
    if not device:
        return NO_DEVICE
    model = re.sub(r"[^A-Za-z0-9.]+", "-", str(device.get("sku") or device.get("name") or
                                               "unknown")).strip("-.") or "unknown"
    fp = re.sub(r"[^A-Za-z0-9]", "", str(device.get("fingerprint") or ""))[:8]
    return f"{model}-{fp}" if fp else model


def model_of(key: str) -> str:
    """A device key less its fingerprint: the folder name every card of that GPU model shares
    ('H100-SXM-e53cef81' -> 'H100-SXM')."""
    return re.sub(r"-[0-9a-f]{8}$", "", key)


def sku_of(device: dict | None) -> str | None:
    """A device's SKU, else its name; None for no device."""
    return (device or {}).get("sku") or (device or {}).get("name")


def save(doc: dict, directory: Path | str, *, when: datetime.datetime | None = None) -> Path:
    """Write a saved-run document into <directory>/<device_key>/ under a new name, atomically;
    never replaces or deletes a file. Returns the new file's path. `when` stamps the name (the
    order runs are found and plotted in); default now, the end of the run being saved."""
    run = SavedRun.from_document(doc)  # refuse to save what load would refuse
    doc = schema.upgrade(doc, "<document>")[0]  # written at this version, whatever it was given
    if run.name is not None:
        check_name(run.name)
    folder = Path(directory) / device_key(run_device(doc))
    folder.mkdir(parents=True, exist_ok=True)
    when = when or datetime.datetime.now(datetime.timezone.utc)
    stamp = when.astimezone(datetime.timezone.utc).strftime("%Y%m%dT%H%M%S%fZ")
    stem = f"{stamp}-{(run.commit or 'nocommit')[:12]}-{run.name or 'run'}"
    tmp = jsonfile.write_temp(doc, folder, stem)
    try:
        while True:
            final = folder / f"{stem}-{secrets.token_hex(4)}.json"
            if jsonfile.link_new(tmp, final):
                return final
    finally:
        tmp.unlink(missing_ok=True)


def load(path: Path | str, *, allow_report: bool = False) -> SavedRun:
    """Read a saved run; allow_report=True also reads a --triton-perf-json report (a run of
    unknown commit). A file whose name ends in .gz is read through gzip (a run kept compressed).
    HistoryError names the file and the reason."""
    return SavedRun.from_document(read_document(path), path, allow_report=allow_report)


def read_document(path: Path | str) -> dict:
    """A file's JSON document, as written (load upgrades it); HistoryError names the file."""
    path = Path(path)
    try:
        text = jsonfile.read_text(path)
    except FileNotFoundError:
        raise HistoryError(f"{path}: no such file") from None
    except OSError as exc:
        raise HistoryError(f"{path}: cannot be read: {exc.strerror or exc}") from None
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise HistoryError(f"{path}: not JSON ({exc})") from None
    return doc


@dataclass(frozen=True)
class Entry:
    """A saved run as its file name tells it (no file is read)."""
    path: Path
    key: str
    stamp: str  # UTC, e.g. 20261125T091418632742Z: file names sort by it
    commit: str | None
    name: str | None  # None for an unnamed run


def saved_runs(directory: Path | str) -> dict[str, list[Entry]]:
    """{device key: its saved runs, newest first} in a history directory."""
    out = {}
    for folder in sorted(p for p in Path(directory).iterdir() if p.is_dir()):
        entries = []
        for p in folder.glob("*.json"):
            m = _FILE.match(p.name)
            if m:
                stamp, commit, name, _ = m.groups()
                entries.append(Entry(p, folder.name, stamp, None if commit == "nocommit" else
                                     commit, None if name == "run" else name))
        if entries:
            out[folder.name] = sorted(entries, key=lambda e: e.path.name, reverse=True)
    return out


def find(ref: str, directory: Path | str, device: dict | None, *,
         exclude: Path | str | None = None) -> Path:
    """The file `ref` names: a path to a file; 'latest', this device's newest saved run (else
    the newest of another GPU of its SKU); or a saved name, its newest run on this device, else
    on any other (the compare then refuses it by name). `exclude` is a file never returned (the
    one this run just saved). HistoryError lists what the directory holds."""
    directory = Path(directory)
    if ref != "latest" and (Path(ref).is_file() or ref.endswith(".json") or os.sep in ref):
        if not Path(ref).is_file():
            raise HistoryError(f"{ref}: no such file")
        return Path(ref)
    if not directory.is_dir():
        raise HistoryError(f"no saved run {ref!r}: {directory} does not exist (no run was saved "
                           "there)")
    found = saved_runs(directory)
    key = device_key(device)
    skip = Path(exclude).resolve() if exclude is not None else None

    def newest(keys) -> Path | None:
        entries = [e for k in keys for e in found.get(k, []) if e.path.resolve() != skip
                   and (ref == "latest" or e.name == ref)]
        return max(entries, key=lambda e: e.stamp).path if entries else None

    if ref == "latest":
        # another GPU of the same SKU (its fingerprint differs) is the next best: CI runners
        # rarely get the same card twice
        model = device_key({**device, "fingerprint": None}) if device else None
        same_sku = [k for k in found if model and k != model and model_of(k) == model]
        hit = newest([key]) or newest(same_sku)
        what = f"no saved run for this device ({key}) or another of its SKU"
    else:
        hit = newest([key]) or newest(found)
        what = f"no saved run named {ref!r}"
    if hit is None:
        raise HistoryError(f"{what} in {directory}; it holds: {_holdings(found)}")
    return hit


def _holdings(found: dict[str, list[Entry]]) -> str:
    if not found:
        return "nothing"
    parts = []
    for key, entries in found.items():
        names = sorted({e.name for e in entries if e.name})
        unnamed = sum(e.name is None for e in entries)
        shown = ", ".join(names[:5]) + (f", {len(names) - 5} more names" if len(names) > 5 else "")
        shown += (", " if shown and unnamed else "") + (f"{unnamed} unnamed" if unnamed else "")
        parts.append(f"{key} ({len(entries)} run{'s' if len(entries) != 1 else ''}: {shown})")
    return "; ".join(parts)
