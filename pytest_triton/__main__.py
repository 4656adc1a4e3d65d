"""python -m pytest_triton: commands on saved runs (merge the shards of a CI run, list the history)."""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
from pathlib import Path

from .report import history


def parser() -> argparse.ArgumentParser:
    """The command line; each command is a subparser whose `run` takes the parsed arguments."""
    p = argparse.ArgumentParser(prog="python -m pytest_triton",
                                description="pytest-triton's saved runs (docs/regressions.md)")
    commands = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    merge = commands.add_parser(
        "merge", help="join the saved runs of one CI run's shards (several hosts or GPUs)",
        description="Join the saved runs of one CI run's shards: the same commit and GPU "
                    "model, each test in one shard. --triton-perf-json reports are read too "
                    "(as runs of unknown commit).")
    merge.add_argument("-o", "--output", required=True, metavar="OUT",
                       help="the file to write (never over an existing one), or a history "
                            "directory to save the merged run into")
    merge.add_argument("files", nargs="+", metavar="FILE",
                       help="saved runs, or directories of them")
    merge.set_defaults(run=_merge)

    listing = commands.add_parser("history", help="list the saved runs of each device")
    listing.add_argument("directory", nargs="?", default=history.DEFAULT_DIR, metavar="DIR",
                         help=f"the history directory (default {history.DEFAULT_DIR})")
    listing.set_defaults(run=_history)
    # compare: added with the regression gate
    return p


def main(argv: list[str] | None = None) -> int:
    p = parser()
    args = p.parse_args(argv)
    try:
        args.run(args)
    except history.HistoryError as exc:
        p.exit(1, f"{p.prog} {args.command}: error: {exc}\n")
    return 0


def _merge(args: argparse.Namespace) -> None:
    paths = []
    for name in args.files:
        path = Path(name)
        paths.extend(sorted(path.glob("*.json")) if path.is_dir() else [path])
    if not paths:
        raise history.HistoryError(f"no .json files in {', '.join(args.files)}")
    doc = history.merge([history.load(p, allow_report=True) for p in paths])
    out = Path(args.output)
    if out.is_dir():
        written = history.save(doc, out)
    else:
        try:
            with open(out, "x") as f:
                json.dump(doc, f, indent=1, default=str)
        except FileExistsError:
            raise history.HistoryError(f"{out} exists: merge writes a new file, never over "
                                       "one") from None
        written = out
    print(f"merged {len(paths)} files ({len(doc['results'])} tests) into {written}")


def _history(args: argparse.Namespace) -> None:
    directory = Path(args.directory)
    if not directory.is_dir():
        raise history.HistoryError(f"{directory}: no such history directory")
    found = history.saved_runs(directory)
    if not found:
        print(f"{directory}: no saved runs")
    for key, entries in found.items():
        print(f"{key}: {len(entries)} run{'s' if len(entries) != 1 else ''}")
        rows = [("created (UTC)", "name", "commit", "branch", "tests", "file")]
        for e in entries:
            run = history.load(e.path)
            commit = (run.commit or "")[:12] + ("+dirty" if run.dirty else "")
            rows.append((_when(e.stamp), run.name or "", commit, run.branch or "",
                         str(len(run.records)), os.path.relpath(e.path)))
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        for r in rows:
            print("  " + "  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip())


def _when(stamp: str) -> str:
    return datetime.datetime.strptime(stamp, "%Y%m%dT%H%M%S%fZ").strftime("%Y-%m-%d %H:%M:%S")


if __name__ == "__main__":
    sys.exit(main())
