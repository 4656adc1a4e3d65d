"""`python -m pytest_triton trend`: each test's median time over the saved runs of one GPU
model, with its 99% interval, one picture per test (matplotlib, as the roofline plot)."""

from __future__ import annotations

import re
from pathlib import Path

from . import storage


def series(directory: Path | str, device: str | None, match: str | None
           ) -> tuple[str, dict[str, list[tuple[str, str, float, float, float]]]]:
    """(the GPU model plotted, {label: [(saved at, name or commit, median, ci_lo, ci_hi)]}),
    oldest run first, over every card and driver of that model. `device` is the model's folder
    name or its start (e.g. 'H100'); None: the model with the most runs. `match` keeps the
    labels containing it."""
    found: dict[str, list] = {}
    for key, entries in storage.saved_runs(directory).items():  # by GPU model: each card and
        found.setdefault(storage.model_of(key), []).extend(entries)  # driver has a key
    models = [k for k in found if device is None or k.startswith(device)]
    if not models:
        raise storage.HistoryError(f"no saved runs for {device or 'any device'} in {directory} "
                                   f"(it holds: {', '.join(found) or 'nothing'})")
    key = max(models, key=lambda k: len(found[k]))
    out: dict[str, list] = {}
    for entry in sorted(found[key], key=lambda e: e.stamp):
        run = storage.load(entry.path)
        when = storage.created_at({"created": run.created})
        tag = run.name or (run.commit or "")[:8] or \
            (when.strftime("%Y-%m-%d %H:%M") if when else entry.stamp[:13])
        for r in run.records:
            for m in r.measurements:
                if match is None or match in m.label:
                    out.setdefault(m.label, []).append(
                        (entry.stamp, tag, m.time.median, m.time.ci_lo, m.time.ci_hi))
    return key, out


def plot(directory: Path | str, out_dir: Path | str, *, device: str | None = None,
         match: str | None = None) -> list[Path]:
    """One PNG per test under `out_dir`; returns their paths."""
    try:
        import matplotlib
    except ImportError:
        raise storage.HistoryError("the trend plot needs matplotlib, which is not installed: "
                                   "pip install matplotlib") from None
    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    key, data = series(directory, device, match)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for label, points in sorted(data.items()):
        fig, ax = plt.subplots(figsize=(max(6.0, 0.5 * len(points) + 2), 3.5))
        xs = range(len(points))
        med = [p[2] for p in points]
        ax.errorbar(xs, med, yerr=[[p[2] - p[3] for p in points], [p[4] - p[2] for p in points]],
                    fmt="o-", capsize=3)
        ax.set_xticks(list(xs), [p[1] for p in points], rotation=45, ha="right", fontsize=7)
        ax.set_ylabel("median ms (99% interval)")
        ax.set_title(f"{label}\n{key}", fontsize=8)
        fig.tight_layout()
        path = out_dir / (re.sub(r"[^A-Za-z0-9._-]+", "_", label).strip("_")[:150] + ".png")
        fig.savefig(path, dpi=100)
        plt.close(fig)
        written.append(path)
    return written
