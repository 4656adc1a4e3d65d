"""--triton-perf-plot PATH: one picture of the run, a roofline PNG for a review.

Left panel, the roofline: every measurement with flops= and bytes= at its arithmetic intensity
(FLOP/byte) and achieved TFLOP/s, against the device's bandwidth slope and the tensor-core
ceiling of each dtype present; datasheet ceilings solid, measured ones (the copy, cuBLAS)
dashed. Right panel, the bandwidth-bound measurements (bytes= without flops=, which have no
intensity to place them at): achieved GB/s of each, grouped by kernel, against the datasheet and
the measured copy ceiling. Points are coloured by verdict and numbered; the key under the panels
gives each number's test. matplotlib is optional (pip install matplotlib; the plugin's plot extra names it).
"""

from __future__ import annotations

import math
import os

import pytest

from .. import options
from ..env import dtypes, versions
from ..perf import roofline
from ..perf import session as perf
from ..perf.record import Measurement, label

VERDICT_COLOURS = {"pass": "#2ca02c", "fail": "#d62728", "inconclusive": "#ff7f0e",
                   "invalid": "#9467bd", "measured": "#7f7f7f"}
DTYPE_MARKERS = {"float16": "o", "bfloat16": "s", "tf32": "^", "float8": "D"}  # by dtypes.PEAK_KEYS


def _marker(dtype) -> str:
    return DTYPE_MARKERS.get(dtypes.peak_key(dtype), "o") if dtype else "o"
WRITTEN_KEY = pytest.StashKey[str]()  # what the summary says about the plot


def path(config: pytest.Config) -> str | None:
    return options.get(config, "triton_perf_plot") or None


class Plot:
    """--triton-perf-plot PATH: the roofline drawn at the end of a --triton-perf run."""

    def __init__(self, config: pytest.Config):
        _check_matplotlib(config)
        self._perf = bool(options.get(config, "triton_perf"))

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if self._perf:
            session_finish(session.config)

    def pytest_terminal_summary(self, terminalreporter, exitstatus: int,
                                config: pytest.Config) -> None:
        if self._perf:
            terminal_summary(terminalreporter, config)


def _check_matplotlib(config: pytest.Config) -> None:
    """Fail at start-up, saying what to install, when the plot cannot be drawn."""
    if path(config) is None:
        return
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise pytest.UsageError(
            f"--triton-perf-plot {path(config)}: needs matplotlib, which is not installed: "
            "pip install matplotlib") from None


def session_finish(config: pytest.Config) -> None:

    target = path(config)
    ps = perf.session(config)
    if target is None or ps is None or not ps.controller:
        return
    points = [m for r in ps.records for m in r.measurements]
    if not points:
        config.stash[WRITTEN_KEY] = f"roofline not drawn: no measurement in this run ({target})"
        return
    try:
        draw(points, ps.device, target, title=_title(config, ps.device, points))
    except Exception as exc:  # noqa: BLE001 - a picture must not lose the run's results
        config.stash[WRITTEN_KEY] = f"roofline NOT drawn to {target}: {type(exc).__name__}: {exc}"
        return
    config.stash[WRITTEN_KEY] = f"roofline of {len(points)} measurements written to {target}"


def terminal_summary(tr, config: pytest.Config) -> None:
    """Where the plot went (session finish, which draws it, runs before the summary)."""
    target = path(config)
    if target is not None:
        tr.write_line("pytest-triton: " + config.stash.get(WRITTEN_KEY, f"roofline PNG: {target}"))


def _title(config: pytest.Config, device, points: list[dict]) -> str:
    name = device.name if device is not None else \
        (points[0].device.name or "no device")
    # the versions as installed, read without importing torch or Triton (an xdist controller)
    return (f"{name} — torch {versions.torch_version()}, triton {versions.triton_version()}"
            f" — L2 {perf.session(config).l2}")


def _short(m: Measurement) -> str:
    test = m.nodeid.split("::")[-1]
    test = test.removeprefix("test_")
    for suffix in ("_speed", "_is_fast"):
        test = test.replace(suffix + "[", "[")
        test = test.removesuffix(suffix)
    return label(test, m.name, spaced=True)


def _family(m: Measurement) -> str:
    return _short(m).split("[", 1)[0].split(" ", 1)[0]


def _ceilings(device, dtypes: list[str], measurements: list[Measurement] = ()) -> dict:
    """{"bw": {src: GB/s}, "tf": {(dtype, src): TFLOP/s}}: from the device where this process
    has one, else from the peaks each measurement carries (an xdist controller has no device)."""
    bw, tf = {}, {}
    for src in ("datasheet", "measured"):
        value = device.peak_gbps(src)[0] if device else None
        for m in measurements:  # a copy of one measurement's bytes is no line for all
            value = value or (m.peaks.one_size_measured() if src == "measured"
                              else m.peaks.of_kind("bandwidth", src))
        if value:
            bw[src] = value
        for dt in dtypes:
            value = device.peak_tflops(dt, src)[0] if device else None
            for m in measurements:
                if (m.dtype or "float16") == dt:
                    value = value or m.peaks.of_kind("tflops", src)
            if value:
                tf[(dt, src)] = value
    return {"bw": bw, "tf": tf}


def draw(measurements: list[Measurement], device, target: str, *, title: str = "") -> None:
    """Draw the run's roofline PNG to `target` (see the module's doc)."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    compute = [m for m in measurements if m.flops and m.tflops]
    memory = [m for m in measurements if m.bytes and not m.flops and m.gbps]
    other = [m for m in measurements if all(m is not x for x in compute + memory)]
    numbered = compute + memory
    number = {id(m): i + 1 for i, m in enumerate(numbered)}

    n_lines = len(numbered) + (1 if other else 0)
    key_h = 0.3 + 0.125 * math.ceil(n_lines / _key_columns(n_lines))  # inches: the key's rows
    fig = plt.figure(figsize=(17, 7.8 + key_h), dpi=130)
    grid = fig.add_gridspec(2, 2, height_ratios=[7.0, key_h], width_ratios=[1, 1.15],
                            hspace=0.3, wspace=0.16)
    ax_r, ax_b = fig.add_subplot(grid[0, 0]), fig.add_subplot(grid[0, 1])
    ax_key = fig.add_subplot(grid[1, :])
    ax_key.axis("off")

    _draw_roofline(ax_r, compute, device, number)
    _draw_bandwidth(ax_b, memory, device, number)

    counts = {}
    for m in measurements:
        counts[m.verdict] = counts.get(m.verdict, 0) + 1
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


def intensity(m: Measurement) -> tuple[float | None, str | None]:
    """A measurement's FLOP/byte and where it came from: bytes=, or the operands' sizes read by
    --triton-perf-explain."""
    if m.flops and m.bytes:
        return m.flops / m.bytes, "bytes="
    pos = m.explain.roofline if m.explain is not None else None
    if m.flops and pos is not None and pos.intensity:
        return pos.intensity, pos.intensity_from or "operands"
    return None, None


def _scatter(ax, x, y, m: Measurement, hollow: bool = False) -> None:
    colour = VERDICT_COLOURS.get(m.verdict, "#000")
    ax.scatter([x], [y], s=44, marker=_marker(m.dtype),
               facecolor="white" if hollow else colour, edgecolor=colour if hollow else "black",
               linewidths=1.4 if hollow else 0.5, zorder=3)


def _draw_roofline(ax, points: list[Measurement], device, number: dict) -> None:
    ax.set_title("Compute: measurements with flops=, at their arithmetic intensity", fontsize=11)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP/byte)")
    ax.set_ylabel("achieved TFLOP/s")
    ax.grid(True, which="both", alpha=0.25)
    if not points:
        ax.text(0.5, 0.5, "no measurement gave flops=", ha="center", va="center",
                transform=ax.transAxes, color="#666")
        return
    placed = [(m, *intensity(m)) for m in points]
    known = [(m, ai, src) for m, ai, src in placed if ai]
    unknown = [m for m, ai, _ in placed if not ai]
    dtypes = sorted({m.dtype or "float16" for m in points})
    ceil = _ceilings(device, dtypes, points)
    ais = [ai for _, ai, _ in known] or [1.0]
    ridges = [roofline.ridge(tf, ceil["bw"][src]) for (dt, src), tf in ceil["tf"].items()
              if ceil["bw"].get(src)]
    lo = min(min(ais), *(ridges or [ais[0]])) / 6
    hi = max(max(ais), *(ridges or [ais[0]])) * 3
    band = hi * 4 if unknown else hi  # a strip right of the roofline for unknown intensities
    xs = [lo * (hi / lo) ** (i / 200) for i in range(201)]
    tops = [m.tflops for m in points]
    seen = set()
    for (_, src), tf in sorted(ceil["tf"].items(), key=lambda kv: (kv[0][1], kv[0][0])):
        bw = ceil["bw"].get(src)
        if not bw or (round(tf), src) in seen:
            continue
        seen.add((round(tf), src))
        ys = [min(tf, x * bw / 1e3) for x in xs]
        ax.plot(xs + ([band] if unknown else []), ys + ([tf] if unknown else []),
                ls="-" if src == "datasheet" else "--", color="#333", lw=1.2,
                alpha=0.9 if src == "datasheet" else 0.7)
        tops.append(tf)
    for m, ai, src in known:
        _scatter(ax, ai, m.tflops, m, hollow=src != "bytes=")
    pts = [(ai, m.tflops, number[id(m)]) for m, ai, _ in known]
    if unknown:
        ax.axvspan(hi * 1.2, band, color="#000", alpha=0.05)
        ax.text((hi * 1.2 * band) ** 0.5, min(tops) / 2.2, "intensity\nunknown\n(no bytes=)",
                ha="center", va="bottom", fontsize=7.5, color="#555")
        for i, m in enumerate(unknown):
            x = hi * 1.2 * (band / (hi * 1.2)) ** ((i + 0.5) / len(unknown))
            _scatter(ax, x, m.tflops, m)
            pts.append((x, m.tflops, number[id(m)]))
    _number_points(ax, pts)
    ax.set_xlim(lo, band)
    ax.set_ylim(min(tops) / 3, max(tops) * 1.8)
    from matplotlib.lines import Line2D

    handles = []
    for src in ("datasheet", "measured"):  # the ceilings' values, in the legend: no label on a line
        mine = sorted(((tf, dt) for (dt, s2), tf in ceil["tf"].items() if s2 == src), reverse=True)
        bw = ceil["bw"].get(src)
        if not bw:
            continue
        what = "datasheet" if src == "datasheet" else "measured (copy; cuBLAS)"
        text = f"{what}: {bw:.0f} GB/s" + (
            "; " + ", ".join(f"{dt} {tf:.0f}" for tf, dt in mine) + " TFLOP/s" if mine else "")
        handles.append(Line2D([], [], color="#333", ls="-" if src == "datasheet" else "--",
                              label=text))
    handles += _dtype_handles({m.dtype for m in points})
    if any(src != "bytes=" for _, _, src in known):
        handles.append(Line2D([], [], marker="o", ls="", markerfacecolor="white",
                              markeredgecolor="#555", markeredgewidth=1.4,
                              label="hollow: intensity over the\noperands' sizes (no bytes=)"))
    if handles:
        ax.legend(handles=handles, loc="lower right", fontsize=7.5, framealpha=0.95,
                  bbox_to_anchor=(0.84 if unknown else 1.0, 0.0))


def _dtype_handles(dtypes: set) -> list:
    from matplotlib.lines import Line2D

    return [Line2D([], [], marker=DTYPE_MARKERS.get(d, "o"), ls="", color="#bbb",
                   markeredgecolor="black", label=d) for d in sorted(x for x in dtypes if x)]


def _draw_bandwidth(ax, points: list[Measurement], device, number: dict) -> None:
    ax.set_title("Memory: measurements with bytes= only (GB/s against the bandwidth ceilings)",
                 fontsize=11)
    ax.set_ylabel("achieved GB/s")
    ax.grid(True, axis="y", alpha=0.25)
    if not points:
        ax.text(0.5, 0.5, "no bandwidth-only measurement", ha="center", va="center",
                transform=ax.transAxes, color="#666")
        ax.set_xticks([])
        return
    families: dict[str, list[Measurement]] = {}
    for m in points:
        families.setdefault(_family(m), []).append(m)
    x, spans, placed = 0.0, [], []
    for fam, ms in families.items():
        start = x
        for m in ms:
            ax.scatter([x], [m.gbps], s=46, color=VERDICT_COLOURS.get(m.verdict, "#000"),
                       marker=_marker(m.dtype), edgecolor="black",
                       linewidths=0.5, zorder=3)
            placed.append((x, m.gbps, number[id(m)]))
            x += 1
        spans.append((start, x - 1, fam))
        x += 1.5
    ax.set_xticks([])
    ax.set_xlim(-1, max(x - 0.5, 8))
    ax.set_xlabel("measurements, grouped by test")
    for i, (a, b, fam) in enumerate(spans):  # the group's name, upright inside the plot
        ax.axvspan(a - 0.6, b + 0.6, color="#000", alpha=0.045 if i % 2 == 0 else 0.0)
        ax.text((a + b) / 2, 0.02, fam, rotation=90, ha="center", va="bottom", fontsize=8,
                color="#333", transform=ax.get_xaxis_transform())
    from matplotlib.lines import Line2D

    bw = _ceilings(device, [], points)["bw"]
    top = max(m.gbps for m in points)
    handles = []
    for src, value in bw.items():
        if value:
            ls = "-" if src == "datasheet" else "--"
            ax.axhline(value, color="#333", ls=ls, lw=1.2)
            handles.append(Line2D([], [], color="#333", ls=ls, label=(
                f"{'HBM datasheet' if src == 'datasheet' else 'measured copy'} {value:.0f} GB/s")))
            top = max(top, value)
    ax.set_ylim(0, top * 1.1)
    _number_points(ax, placed, log=False)
    handles += _dtype_handles({m.dtype for m in points})
    if handles:
        ax.legend(handles=handles, loc="lower center", fontsize=7.5, framealpha=0.95,
                  bbox_to_anchor=(0.5, 0.33), ncol=2)


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


def _key_columns(n_lines: int) -> int:
    return max(1, min(4, math.ceil(n_lines / 22)))


def _draw_key(ax, numbered: list[Measurement], number: dict, other: list[Measurement]) -> None:
    """The numbers' key: test, achieved and verdict, in columns."""
    lines = []
    for m in numbered:
        achieved = f"{m.tflops:.0f} TFLOP/s" if m.flops and m.tflops else f"{m.gbps:.0f} GB/s"
        lines.append((f"{number[id(m)]:>3} {_short(m)}  {achieved}", m.verdict))
    if other:
        lines.append((f"not placed (neither bytes= nor flops=, or flops= without bytes=): "
                      f"{', '.join(_short(m) for m in other[:6])}"
                      + (" ..." if len(other) > 6 else ""), "measured"))
    if not lines:
        return
    cols = _key_columns(len(lines))
    per = math.ceil(len(lines) / cols)
    for c in range(cols):
        chunk = lines[c * per:(c + 1) * per]
        for r, (text, verdict) in enumerate(chunk):
            ax.text(c / cols, 1 - r / per, text, transform=ax.transAxes, fontsize=6.6,
                    family="monospace", va="top",
                    color="#222" if verdict == "pass" else VERDICT_COLOURS.get(verdict, "#222"))
