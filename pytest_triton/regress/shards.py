"""The shards of one CI run (several hosts or GPUs, each saving the tests it ran) merged into one
saved run: `python -m pytest_triton merge`."""

from __future__ import annotations

from ..report import durations, summary
from .storage import HistoryError, SavedRun, run_device, sku_of


def merge(runs: list[SavedRun]) -> dict:
    """One saved-run document from the shards of one CI run (several hosts or GPUs): the same
    commit and SKU, each test in one shard only; "shards" lists each file merged in, and
    "durations" holds every shard's tests."""
    if not runs:
        raise HistoryError("nothing to merge")

    def where(r: SavedRun) -> str:
        return str(r.path) if r.path is not None else "<document>"

    commits = {r.commit for r in runs}
    if len(commits) > 1:
        raise HistoryError("shards of one run must share a commit: " + ", ".join(
            f"{where(r)} at {r.commit or 'no commit'}" for r in runs))
    skus = {_sku(r) for r in runs}
    if len(skus) > 1:
        raise HistoryError("shards of one run must share a GPU model: " + ", ".join(
            f"{where(r)} on {_sku(r) or 'no device'}" for r in runs))
    seen: dict[str, SavedRun] = {}
    records, shards, devices = [], [], {}
    for r in runs:
        for rec in r.records:
            if rec.nodeid in seen:
                raise HistoryError(f"{rec.nodeid} is in two shards: {where(seen[rec.nodeid])} and "
                                   f"{where(r)}")
            seen[rec.nodeid] = r
        records.extend(r.records)
        # a merged file's own shards are listed, not the file itself
        shards.extend(r.shards or [{"file": where(r), "host": r.host, "device": r.key,
                                    "created": r.created, "tests": len(r.records),
                                    "versions": r.versions}])
        for d in r.environment.get("devices") or []:
            devices.setdefault(d.get("fingerprint", ""), d)
    first = runs[0]
    dirty = [r.dirty for r in runs if r.dirty is not None]
    rest = {**first.rest, **summary.verdict_counts(records)}
    for k in ("unchecked", "faults", "configs_checked"):
        rest[k] = [x for r in runs for x in r.rest.get(k) or []]
    rest["durations"] = durations.union([r.rest.get("durations") for r in runs])
    merged = SavedRun(
        name=first.name, commit=first.commit, branch=first.branch,
        dirty=any(dirty) if dirty else None, versions=first.versions, host=first.host,
        shards=shards, created=first.created, device=first.device, settings=first.settings,
        environment={**first.environment, "devices": list(devices.values())},
        records=records, rest=rest)
    return merged.to_document()


def _sku(r: SavedRun) -> str | None:
    return sku_of(run_device({"device": r.device, "environment": r.environment}))
