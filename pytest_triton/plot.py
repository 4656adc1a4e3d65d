"""--triton-perf-plot PATH: one picture of the run, a roofline PNG for a review.

Left panel, the roofline: every measurement with flops= and bytes= at its arithmetic intensity
(FLOP/byte) and achieved TFLOP/s, against the device's bandwidth slope and the tensor-core
ceiling of each dtype present; datasheet ceilings solid, measured ones (the copy, cuBLAS)
dashed. Right panel, the bandwidth-bound measurements (bytes= without flops=, which have no
intensity to place them at): achieved GB/s of each, grouped by kernel, against the datasheet and
the measured copy ceiling. Points are coloured by verdict and numbered; the key under the panels
gives each number's test. matplotlib is an optional extra (pip install 'pytest-triton[plot]').
"""

from __future__ import annotations

import math
import os

import pytest

from . import options, state

VERDICT_COLOURS = {"pass": "#2ca02c", "fail": "#d62728", "inconclusive": "#ff7f0e",
                   "invalid": "#9467bd", "measured": "#7f7f7f"}
DTYPE_MARKERS = {"float16": "o", "bfloat16": "s", "float32": "^", "tf32": "^", "float8": "D"}
WRITTEN_KEY = pytest.StashKey[str]()  # what the summary says about the plot


def path(config: pytest.Config) -> str | None:
    return options.get(config, "triton_perf_plot") or None


def configure(config: pytest.Config) -> None:
    """Fail at start-up, saying what to install, when the plot cannot be drawn."""
    if path(config) is None:
        return
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise pytest.UsageError(
            f"--triton-perf-plot {path(config)}: needs matplotlib, which is not installed: "
            "pip install 'pytest-triton[plot]' (or pip install matplotlib)") from None


def session_finish(config: pytest.Config) -> None:
    from . import perf

    target = path(config)
    ps = perf.session(config)
    if target is None or ps is None or not ps.controller:
        return
    points = [m for r in ps.results for m in r["measurements"]]
    if not points:
        config.stash[WRITTEN_KEY] = f"roofline not drawn: no measurement in this run ({target})"
        return
    draw(points, ps.device, target, title=_title(config, ps.device))
    config.stash[WRITTEN_KEY] = f"roofline of {len(points)} measurements written to {target}"


def terminal_summary(tr, config: pytest.Config) -> None:
    """The summary runs before session finish: announce where the plot goes."""
    target = path(config)
    if target is not None:
        tr.write_line(f"pytest-triton: roofline PNG of this run: {target}")


def _title(config: pytest.Config, device) -> str:
    import torch
    import triton

    name = device.name if device is not None else "no device"
    return (f"{name} — torch {torch.__version__}, triton {triton.__version__}"
            f" — L2 {state.get(config).perf_session.l2}")


def _short(m: dict) -> str:
    test = m["nodeid"].split("::")[-1]
    test = test.removeprefix("test_")
    for suffix in ("_speed", "_is_fast"):
        test = test.replace(suffix + "[", "[")
        test = test.removesuffix(suffix)
    return test + (f" [{m['name']}]" if m.get("name") else "")


def _family(m: dict) -> str:
    return _short(m).split("[", 1)[0].split(" ", 1)[0]


def _ceilings(device, dtypes: list[str]) -> dict:
    bw = {src: device.peak_gbps(src)[0] for src in ("datasheet", "measured")} if device else {}
    tf = {}
    for dt in dtypes:
        for src in ("datasheet", "measured"):
            value = device.peak_tflops(dt, src)[0] if device else None
            if value:
                tf[(dt, src)] = value
    return {"bw": bw, "tf": tf}


def draw(measurements: list[dict], device, target: str, *, title: str = "") -> None:
    """Draw the run's roofline PNG to `target` (see the module's doc)."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    compute = [m for m in measurements if m.get("flops") and m.get("bytes") and m.get("tflops")]
    memory = [m for m in measurements if m.get("bytes") and not m.get("flops") and m.get("gbps")]
    other = [m for m in measurements if m not in compute and m not in memory]
    numbered = compute + memory
    number = {id(m): i + 1 for i, m in enumerate(numbered)}

    fig = plt.figure(figsize=(17, 11), dpi=130)
    grid = fig.add_gridspec(2, 2, height_ratios=[3.2, 1.5], width_ratios=[1, 1.15],
                            hspace=0.28, wspace=0.16)
    ax_r, ax_b = fig.add_subplot(grid[0, 0]), fig.add_subplot(grid[0, 1])
    ax_key = fig.add_subplot(grid[1, :])
    ax_key.axis("off")

    _draw_roofline(ax_r, compute, device, number)
    _draw_bandwidth(ax_b, memory, device, number)

    counts = {}
    for m in measurements:
        counts[m["verdict"]] = counts.get(m["verdict"], 0) + 1
    handles = [Line2D([], [], marker="o", ls="", color=c, markersize=8,
                      label=f"{v} ({counts[v]})") for v, c in VERDICT_COLOURS.items() if v in counts]
    handles += [Line2D([], [], color="#333", ls="-", label="datasheet ceiling"),
                Line2D([], [], color="#333", ls="--", label="measured ceiling (copy, cuBLAS)")]
    fig.legend(handles=handles, loc="upper center", ncol=len(handles), frameon=False,
               bbox_to_anchor=(0.5, 0.955), fontsize=10)
    fig.suptitle(f"pytest-triton roofline: {len(measurements)} measurements — {title}",
                 fontsize=13, y=0.985)
    _draw_key(ax_key, numbered, number, other)
    os.makedirs(os.path.dirname(os.path.abspath(target)), exist_ok=True)
    fig.savefig(target, bbox_inches="tight")
    plt.close(fig)


def _draw_roofline(ax, points: list[dict], device, number: dict) -> None:
    ax.set_title("Compute: measurements with flops= and bytes=", fontsize=11)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP/byte)")
    ax.set_ylabel("achieved TFLOP/s")
    ax.grid(True, which="both", alpha=0.25)
    if not points:
        ax.text(0.5, 0.5, "no measurement gave both flops= and bytes=", ha="center",
                va="center", transform=ax.transAxes, color="#666")
        return
    ais = [m["flops"] / m["bytes"] for m in points]
    dtypes = sorted({m.get("dtype") or "float16" for m in points})
    ceil = _ceilings(device, dtypes)
    lo, hi = min(ais) / 4, max(ais) * 4
    xs = [lo * (hi / lo) ** (i / 200) for i in range(201)]
    ymax = max(m["tflops"] for m in points)
    labelled = set()
    for (dt, src), tf in sorted(ceil["tf"].items()):
        bw = ceil["bw"].get(src)
        if not bw or (dt, tf) in labelled:
            continue
        labelled.add((dt, tf))
        ys = [min(tf, x * bw / 1e3) for x in xs]
        ls = "-" if src == "datasheet" else "--"
        ax.plot(xs, ys, ls=ls, color="#333", lw=1.2, alpha=0.9 if src == "datasheet" else 0.7)
        what = "cuBLAS" if src == "measured" else "datasheet"
        ax.annotate(f"{dt} {what} {tf:.0f} TFLOP/s", (hi, tf), xytext=(-4, 3),
                    textcoords="offset points", ha="right", va="bottom", fontsize=8, color="#333")
        ymax = max(ymax, tf)
    for src, bw in ceil["bw"].items():
        if bw:
            x0 = lo * 1.5
            ax.annotate(f"{'copy' if src == 'measured' else 'HBM datasheet'} {bw:.0f} GB/s",
                        (x0, x0 * bw / 1e3), xytext=(4, 4 if src == "datasheet" else -10),
                        textcoords="offset points", fontsize=8, color="#333",
                        rotation=_slope_angle(ax), rotation_mode="anchor")
    for m, ai in zip(points, ais):
        ax.scatter([ai], [m["tflops"]], s=46, color=VERDICT_COLOURS.get(m["verdict"], "#000"),
                   marker=DTYPE_MARKERS.get(m.get("dtype") or "", "o"), edgecolor="black",
                   linewidths=0.5, zorder=3)
    _number_points(ax, [(m["flops"] / m["bytes"], m["tflops"], number[id(m)]) for m in points])
    ax.set_xlim(lo, hi)
    ymin = min(m["tflops"] for m in points) / 3
    ax.set_ylim(ymin, ymax * 1.6)
    dt_handles = _dtype_handles({m.get("dtype") for m in points})
    if dt_handles:
        ax.legend(handles=dt_handles, loc="lower right", fontsize=8, title="dtype",
                  title_fontsize=8, framealpha=0.85)


def _slope_angle(ax) -> float:
    # a 45-degree line in log-log data is drawn at the axes' aspect; the label follows loosely
    return 0.0


def _dtype_handles(dtypes: set) -> list:
    from matplotlib.lines import Line2D

    return [Line2D([], [], marker=DTYPE_MARKERS.get(d, "o"), ls="", color="#bbb",
                   markeredgecolor="black", label=d) for d in sorted(x for x in dtypes if x)]


def _draw_bandwidth(ax, points: list[dict], device, number: dict) -> None:
    ax.set_title("Memory: measurements with bytes= only (GB/s against the bandwidth ceilings)",
                 fontsize=11)
    ax.set_ylabel("achieved GB/s")
    ax.grid(True, axis="y", alpha=0.25)
    if not points:
        ax.text(0.5, 0.5, "no bandwidth-only measurement", ha="center", va="center",
                transform=ax.transAxes, color="#666")
        ax.set_xticks([])
        return
    families: dict[str, list[dict]] = {}
    for m in points:
        families.setdefault(_family(m), []).append(m)
    x, ticks, labels, placed = 0.0, [], [], []
    for fam, ms in families.items():
        start = x
        for m in ms:
            ax.scatter([x], [m["gbps"]], s=46, color=VERDICT_COLOURS.get(m["verdict"], "#000"),
                       marker=DTYPE_MARKERS.get(m.get("dtype") or "", "o"), edgecolor="black",
                       linewidths=0.5, zorder=3)
            placed.append((x, m["gbps"], number[id(m)]))
            x += 1
        ticks.append((start + x - 1) / 2)
        labels.append(fam)
        ax.axvspan(start - 0.5, x - 0.5, color="#000", alpha=0.03 if len(ticks) % 2 else 0.0)
        x += 1.5
    ax.set_xticks(ticks)
    ax.set_xticklabels(labels, rotation=25, ha="right", fontsize=9)
    ax.set_xlim(-1, x - 0.5)
    bw = _ceilings(device, [])["bw"]
    top = max(m["gbps"] for m in points)
    for src, value in bw.items():
        if value:
            ax.axhline(value, color="#333", ls="-" if src == "datasheet" else "--", lw=1.2)
            ax.annotate(f"{'HBM datasheet' if src == 'datasheet' else 'measured copy'} "
                        f"{value:.0f} GB/s", (x - 0.6, value), xytext=(0, 3),
                        textcoords="offset points", ha="right", fontsize=8)
            top = max(top, value)
    ax.set_ylim(0, top * 1.12)
    _number_points(ax, placed, log=False)
    dt_handles = _dtype_handles({m.get("dtype") for m in points})
    if dt_handles:
        ax.legend(handles=dt_handles, loc="lower left", fontsize=8, title="dtype",
                  title_fontsize=8, framealpha=0.85)


def _number_points(ax, pts: list[tuple], log: bool = True) -> None:
    """Each point's number beside it, nudged off labels already placed (in display space)."""
    fig = ax.figure
    fig.canvas.draw()
    taken = []
    offsets = [(5, 4), (5, -10), (-13, 4), (-13, -10), (0, 9), (0, -15), (9, -3), (-17, -3)]
    for x, y, n in sorted(pts, key=lambda p: (p[0], p[1])):
        px, py = ax.transData.transform((x, y))
        for dx, dy in offsets:
            box = (px + dx, py + dy, px + dx + 6 * len(str(n)), py + dy + 8)
            if not any(_overlap(box, t) for t in taken):
                break
        taken.append(box)
        ax.annotate(str(n), (x, y), xytext=(dx, dy), textcoords="offset points", fontsize=6.5,
                    color="#222")


def _overlap(a, b) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def _draw_key(ax, numbered: list[dict], number: dict, other: list[dict]) -> None:
    """The numbers' key: test, achieved and verdict, in columns."""
    lines = []
    for m in numbered:
        achieved = f"{m['tflops']:.0f} TFLOP/s" if m.get("flops") and m.get("tflops") \
            else f"{m['gbps']:.0f} GB/s"
        lines.append((f"{number[id(m)]:>3} {_short(m)}  {achieved}", m["verdict"]))
    if other:
        lines.append((f"not placed (neither bytes= nor flops=, or flops= without bytes=): "
                      f"{', '.join(_short(m) for m in other[:6])}"
                      + (" ..." if len(other) > 6 else ""), "measured"))
    if not lines:
        return
    cols = max(1, min(4, math.ceil(len(lines) / 22)))
    per = math.ceil(len(lines) / cols)
    for c in range(cols):
        chunk = lines[c * per:(c + 1) * per]
        for r, (text, verdict) in enumerate(chunk):
            ax.text(c / cols, 1 - r / max(per, 22), text, transform=ax.transAxes, fontsize=6.6,
                    family="monospace", va="top",
                    color="#222" if verdict == "pass" else VERDICT_COLOURS.get(verdict, "#222"))
