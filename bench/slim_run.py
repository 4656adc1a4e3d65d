"""Shrink a GPU run's folder to what BENCHMARKS.md renders, before it is committed under bench/runs
(which keeps a few MB: the run as it came back stays in the call's $OUT, and git history keeps
earlier runs).

    python bench/slim_run.py RUN_DIR [RUN_DIR ...]

In each RUN_DIR:
- perf*.json become perf*.json.gz (render_benchmarks.py reads either);
- self_compare_pairs.json keeps its counts (runs, pairs, per_test) and drops the row of every
  comparison (render_benchmarks.py reads the counts);
- logs.tar.gz keeps the logs (a series' runs' output too) and, of the saved runs under history/,
  the perf step's `final` record (render_benchmarks.py compares it across GPUs) where the run has
  a perf step of its own (a perf*.json): a call that made none, on a machine an earlier call left
  warm, packs that call's record, which that call's folder keeps. The other saved runs (a
  series' reports among them: series.json keeps what they showed) leave it.
Prints each file's size before and after.
"""

from __future__ import annotations

import gzip
import io
import json
import sys
import tarfile
from pathlib import Path


def _gzip(path: Path) -> Path:
    out = path.with_name(path.name + ".gz")
    with gzip.GzipFile(out, "wb", compresslevel=9, mtime=0) as f:
        f.write(path.read_bytes())
    path.unlink()
    return out


def _pairs(path: Path) -> None:
    doc = json.loads(path.read_text())
    doc.pop("comparisons", None)
    path.write_text(json.dumps(doc, indent=1))


def _keep(name: str, has_perf: bool) -> bool:
    """A logs.tar.gz member that stays: every log (a series' runs' output and exit status
    too), and of the saved runs the `final` one, where the run made it (has_perf)."""
    if "history/" not in name or name.endswith((".log", ".status")):
        return True
    return has_perf and name.endswith(".json") and "-final-" in name.rsplit("/", 1)[-1]


def _logs(path: Path) -> None:
    has_perf = any(p.name.startswith("perf") and ".json" in p.name for p in path.parent.iterdir())
    buf = io.BytesIO()
    with tarfile.open(path) as src, tarfile.open(fileobj=buf, mode="w:gz") as dst:
        for member in src.getmembers():  # files only: extracting one makes its folders
            if member.isfile() and _keep(member.name, has_perf):
                dst.addfile(member, src.extractfile(member))
    path.write_bytes(buf.getvalue())


def slim(run: Path) -> list[tuple[str, int, int]]:
    done = []
    for path in sorted(run.iterdir()):
        before = path.stat().st_size
        if path.name.startswith("perf") and path.suffix == ".json":
            path = _gzip(path)
        elif path.name == "self_compare_pairs.json":
            _pairs(path)
        elif path.name == "logs.tar.gz":
            _logs(path)
        else:
            continue
        done.append((path.name, before, path.stat().st_size))
    return done


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    for run in map(Path, argv):
        for name, before, after in slim(run):
            print(f"{run}/{name}: {before / 1e6:.2f} MB -> {after / 1e6:.2f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
