"""The commands of `python -m pytest_triton` on saved runs: merge the shards of a CI run, list
the history, compare two runs, write the durations, plot the trend, upgrade old files. Each is a
subparser whose `run` takes the parsed arguments; __main__.py only calls main()."""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
from pathlib import Path

from .. import options
from ..report import expected
from . import jsonfile, render, rows, schema, settings, shards, storage, trend


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
                       help="saved runs, or directories of them (a history directory: each "
                            "device folder's runs)")
    merge.set_defaults(run=_merge)

    listing = commands.add_parser("history", help="list the saved runs of each device")
    listing.add_argument("directory", nargs="?", default=storage.DEFAULT_DIR, metavar="DIR",
                         help=f"the history directory (default {storage.DEFAULT_DIR})")
    listing.set_defaults(run=_history)
    comparing = commands.add_parser(
        "compare", help="compare two saved runs, as --triton-perf-compare does",
        description="NEW's measurements against REF's: FAST, SLOW, SAME or UNCERTAIN per test; "
                    "where both counted work under the interpreter, MORE-WORK, LESS-WORK or "
                    "SAME-WORK. "
                    "Exit status 1 when a verdict --fail-on names is found.")
    comparing.add_argument("ref", metavar="REF",
                           help="a saved run: a file, a name saved in --history, or latest")
    comparing.add_argument("new", metavar="NEW", help="the run to judge: a file or a name")
    comparing.add_argument("--history", default=storage.DEFAULT_DIR, metavar="DIR",
                           help="where names are looked up and run-to-run spreads are taken "
                                f"from (default {storage.DEFAULT_DIR})")
    comparing.add_argument("--by", choices=("time", "fraction"), default="time",
                           help="compare times (one GPU model), or fractions of each GPU's "
                                "measured ceiling, else datasheet peak (any two GPUs; default "
                                "time)")
    comparing.add_argument("--threshold", default="3%", metavar="PERCENT",
                           help="the least change called SLOW or FAST; within it, SAME "
                                "(default 3%%)")
    comparing.add_argument("--fail-on", default="off", metavar="VERDICTS",
                           help="slow, or a comma list of slow, uncertain, missing, refused, "
                                "more-work")
    comparing.add_argument("--spread", choices=("history", "prior"), default="history",
                           help="the run-to-run spread: from the reference GPU's saved runs "
                                "(NEW left out), or the prior alone (a first comparison)")
    comparing.add_argument("--md", metavar="FILE", help="write the Markdown table to FILE ('-': "
                           "standard output, instead of the table)")
    comparing.add_argument("--json", metavar="FILE", help="write the verdicts as JSON ('-': "
                           "standard output, instead of the table)")
    comparing.set_defaults(run=_compare)

    timing = commands.add_parser(
        "durations", help="write each test's duration from the saved runs, for pytest-split",
        description="Each test's duration (setup + call + teardown, seconds) from the newest "
                    "saved run that holds it (runs of --device first), as pytest-split's "
                    "--durations-path file: {node id: seconds}. A directory with no runs gives "
                    "{} (pytest-split then splits by count).")
    timing.add_argument("directory", nargs="?", default=storage.DEFAULT_DIR, metavar="DIR",
                        help=f"the history directory (default {storage.DEFAULT_DIR})")
    timing.add_argument("-o", "--output", default=".test_durations", metavar="FILE",
                        help="the file to write ('-': standard output; default .test_durations)")
    timing.add_argument("--device", help="prefer the runs of this device folder, or of the GPU "
                                         "model it starts (e.g. H100-SXM); default: none first")
    timing.set_defaults(run=_durations)

    trending = commands.add_parser(
        "trend", help="plot each test's median over the saved runs of one GPU model")
    trending.add_argument("directory", nargs="?", default=storage.DEFAULT_DIR, metavar="DIR",
                          help=f"the history directory (default {storage.DEFAULT_DIR})")
    trending.add_argument("-o", "--output", default="perf-trend", metavar="OUT_DIR",
                          help="the folder the pictures go to, one PNG per test")
    trending.add_argument("--device", help="a device folder, or its start (e.g. H100-SXM); "
                                           "default: the one with the most runs")
    trending.add_argument("-k", dest="match", help="only the tests whose label contains this")
    trending.set_defaults(run=_trend)

    upgrading = commands.add_parser(
        "upgrade", help=f"rewrite saved runs of an older schema at this one ({schema.VERSION})",
        description="Rewrite each saved run (and --triton-perf-json report) written at an older "
                    f"schema version at this one, {schema.VERSION}, in place: each file is "
                    "replaced whole, never half-written. Files at this version are left alone; "
                    "one of a newer version stops the command, naming it.")
    upgrading.add_argument("paths", nargs="*", default=[storage.DEFAULT_DIR], metavar="PATH",
                           help="history directories (each device folder's runs) or files "
                                f"(default {storage.DEFAULT_DIR})")
    upgrading.set_defaults(run=_upgrade)
    return p


def main(argv: list[str] | None = None) -> int:
    p = parser()
    args = p.parse_args(argv)
    try:
        return args.run(args) or 0
    except (storage.HistoryError, options.OptionError) as exc:
        p.exit(2, f"{p.prog} {args.command}: error: {exc}\n")


def _files(names: list[str]) -> list[Path]:
    """The files named, a folder standing for its .json files and its folders' (a history
    directory: a folder per device); HistoryError where there are none."""
    paths = []
    for name in names:
        path = Path(name)
        paths.extend(sorted(path.glob("*.json")) + sorted(path.glob("*/*.json"))
                     if path.is_dir() else [path])
    if not paths:
        raise storage.HistoryError(f"no .json files in {', '.join(names)}")
    return paths


def _merge(args: argparse.Namespace) -> None:
    paths = _files(args.files)
    doc = shards.merge([storage.load(p, allow_report=True) for p in paths])
    out = Path(args.output)
    if out.is_dir():  # stamped with the run's own time: an import keeps each run's date
        written = storage.save(doc, out, when=storage.created_at(doc))
    else:
        tmp = jsonfile.write_temp(doc, out.parent, out.name)
        try:
            if not jsonfile.link_new(tmp, out):
                raise storage.HistoryError(f"{out} exists: merge writes a new file, never over "
                                           "one")
        finally:
            tmp.unlink(missing_ok=True)
        written = out
    print(f"merged {len(paths)} files ({len(doc['results'])} tests) into {written}")


def _history(args: argparse.Namespace) -> None:
    directory = Path(args.directory)
    if not directory.is_dir():
        raise storage.HistoryError(f"{directory}: no such history directory")
    found = storage.saved_runs(directory)
    if not found:
        print(f"{directory}: no saved runs")
    for key, entries in found.items():
        print(f"{key}: {len(entries)} run{'s' if len(entries) != 1 else ''}")
        rows = [("created (UTC)", "name", "commit", "branch", "tests", "file")]
        for e in entries:
            run = storage.load(e.path)
            commit = (run.commit or "")[:12] + ("+dirty" if run.dirty else "")
            unchecked = len(run.rest.get("unchecked") or [])
            tests = f"0 (dry run: {unchecked} unchecked)" if unchecked and not run.records \
                else str(len(run.records))
            rows.append((_when(e.stamp), run.name or "", commit, run.branch or "", tests,
                         os.path.relpath(e.path)))
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        for r in rows:
            print("  " + "  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip())


def _when(stamp: str) -> str:
    return datetime.datetime.strptime(stamp, "%Y%m%dT%H%M%S%fZ").strftime("%Y-%m-%d %H:%M:%S")


def _compare(args: argparse.Namespace) -> int:
    threshold = options.percent(args.threshold, "--threshold")
    if args.md == "-" and args.json == "-":
        raise options.OptionError("--md - and --json -: only one of them can write to standard "
                                  "output")
    fail_on = options.words(args.fail_on, settings.FAIL_ON.name, "--fail-on")
    loaded = []
    for ref in (args.ref, args.new):
        path = storage.find(ref, args.history, None)
        loaded.append(storage.load(path, allow_report=True))
    ref, new = loaded
    medians = {} if args.spread == "prior" else rows.spreads(ref, Path(args.history),
                                                                  skip=new.path)
    out = rows.compare_runs(ref, new.records, new.device, by=args.by, threshold=threshold,
                                  medians=medians, by_fraction="--by fraction")
    if args.md:
        render.write_markdown(out, None if args.md == "-" else args.md)
    if args.json and args.json != "-":
        Path(args.json).write_text(json.dumps(render.to_json(out), indent=1))
    if args.json == "-":
        json.dump(render.to_json(out), sys.stdout, indent=1)
    elif args.md == "-":
        print(render.markdown(out))
    else:
        print("\n".join(render.lines(out, fail_on, "--fail-on")))
    return 1 if out.failing(fail_on) else 0


def _durations(args: argparse.Namespace) -> None:
    prefer = expected.of_model(args.device) if args.device else (lambda key: False)
    found = expected.saved(args.directory, prefer)
    text = json.dumps(found, indent=1, sort_keys=True) + "\n"
    if args.output == "-":
        sys.stdout.write(text)
        return
    Path(args.output).write_text(text)
    print(f"{len(found)} tests' durations from {args.directory} into {args.output}",
          file=sys.stderr)


def _trend(args: argparse.Namespace) -> None:
    written = trend.plot(args.directory, args.output, device=args.device, match=args.match)
    print(f"{len(written)} pictures in {args.output}")


def _upgrade(args: argparse.Namespace) -> None:
    """Every file is read and checked before any is rewritten: a file that cannot be read (or
    is of a newer version) stops the command with nothing changed."""
    paths = _files(args.paths)
    stale = []
    for path in paths:
        doc, found = schema.upgrade(storage.read_document(path), str(path))
        if found < schema.VERSION:
            stale.append((path, doc, found))
    for path, doc, found in stale:
        jsonfile.write_atomic(doc, path)
        print(f"{os.path.relpath(path)}: schema version {found} -> {schema.VERSION}")
    print(f"{len(stale)} of {len(paths)} files upgraded to schema version {schema.VERSION}")

