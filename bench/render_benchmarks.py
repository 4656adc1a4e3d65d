"""Write BENCHMARKS.md from the files a GPU run left (never type a number into it by hand).

    python3 bench/render_benchmarks.py [--intro FILE] [--why TEXT] RUN_DIR [RUN_DIR ...] > BENCHMARKS.md

Each RUN_DIR may hold: perf.json or perf.json.gz (pytest --triton-perf-json; bench/slim_run.py
compresses it), perf_cmd.txt (the command),
gpu_checks.json (bench/gpu_checks.py), xdist_check.json (bench/xdist_check.py),
resources_check.json (bench/resources_check.py), judge.json (bench/judge_run.py), env.txt
(nvidia-smi and version lines), suite.log (bench/final_run.sh suite: its failures and last
lines are quoted), scaling.json (bench/scaling.py: the Several GPUs tables), and *.md tables
printed by other scripts, included verbatim. --intro: a file of prose placed under the title
(what the sections are).

It refuses (exit 2, naming the runs) to render runs of different commits, or a device without
both a perf run and a whole-suite run of that commit: the file must show that the commit timed is
the commit whose suite is green on that GPU. --why TEXT renders them anyway and prints TEXT under
the title, so the reader sees why.
"""

import glob
import gzip
import importlib.util
import json
import os
import sys
import tarfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from pytest_triton import Measurement  # noqa: E402


def _perf_files(d):
    """The run's perf reports: perf*.json, or compressed, perf*.json.gz."""
    return sorted(glob.glob(os.path.join(d, "perf*.json")) + glob.glob(os.path.join(d, "perf*.json.gz")))


def _load_json(path):
    with (gzip.open(path, "rt") if path.endswith(".gz") else open(path)) as f:
        return json.load(f)


def perf_section(path, cmd):
    doc = _load_json(path)
    env, dev = doc["environment"], doc["device"] or {}
    first, _, rest = cmd.partition("\n")
    title = first if first.startswith("`") else f"`{first}`"  # final_run.sh's lines quote it
    out = [f"### {title}" if first else "### perf run", ""]
    if rest.strip():
        out += [rest.strip(), ""]
    out.append(f"- device: {dev.get('name')} ({dev.get('sms')} SMs, {dev.get('sku')}), driver {dev.get('driver')}")
    out.append(f"- torch {env['torch']} (CUDA {env['cuda']}), triton {env['triton']}, pytest {env['pytest']}, Python {env['python']}")
    out.append(f"- date (UTC): {doc['created']}; L2 {doc['settings']['l2']}; verdicts: {doc['summary']}")
    gb, ga = doc.get("gpu_settings_before") or {}, doc.get("gpu_settings_after") or {}
    out.append(f"- GPU settings before: {gb}; after: {ga} ({'unchanged' if gb == ga else 'CHANGED'})")
    if dev.get("measured"):
        cal = doc["settings"].get("calibration") or "--triton-perf-calibrate"
        out.append(f"- measured ceilings ({cal}): {dev['measured']}")
    out.append("")
    out.append("| test | shape | ms | torch ms | speedup | GB/s | TFLOP/s | of peak (datasheet, measured) | target | verdict | method | config |")
    out.append("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in doc["results"]:
        for m in r["measurements"]:
            test = m["nodeid"].split("::")[-1]
            pct = Measurement.from_dict(m).fractions_text()
            base = m["baseline_ms"]["median"] if m["baseline_ms"] else None
            target = ", ".join(c.get("short") or c["target"] for c in m["checks"] if c["target"] != "bytes")
            verdict = m["verdict"]
            if r["outcome"] == "skipped":  # an xfail: a negative control that must miss its target
                verdict += " (xfail: negative control)"
            out.append("| {} | {} | {:.4f} | {} | {} | {} | {} | {} | {} | {} | {} | {} |".format(
                test, m["name"] or "", m["median_ms"], f"{base:.4f}" if base else "",
                f"{m['speedup']['median']:.3f}x" if m["speedup"] else "",
                f"{m['gbps']:.0f}" if m["gbps"] else "", f"{m['tflops']:.1f}" if m["tflops"] else "",
                pct, target, verdict, m["method"], (m["config"] or "").replace("|", "/")))
        if r.get("geomean"):
            g = r["geomean"]
            out.append(f"| {r['nodeid'].split('::')[-1]} | geomean | | | {g['achieved']:.3f}x | | | | "
                       f"{g.get('short') or 'geomean_speedup'} | {g['verdict']} | | |")
    if doc["unchecked"]:
        out.append(f"\nUnchecked: {len(doc['unchecked'])}")
    return out


def _read(d, name):
    """A run file: beside the others, or inside the run's logs.tar.gz (final_run.sh packs its
    logs so that a run comes back in few files)."""
    path = os.path.join(d, name)
    if os.path.exists(path):
        return open(path).read()
    tar = os.path.join(d, "logs.tar.gz")
    if os.path.exists(tar):
        with tarfile.open(tar) as t:
            try:
                return t.extractfile(name).read().decode()
            except KeyError:
                return None
    return None


def _runs(d):
    """The run lines final_run.sh wrote (`step: command` then `step rc=N wall=Ns`), by step."""
    text = _read(d, "runs.txt") or ""
    out = {}
    for line in text.splitlines():
        step, _, rest = line.partition(": ")
        if rest:
            out.setdefault(step, []).append(rest)
    return out


def suite_section(text, runs):
    lines = text.splitlines()
    failed = [ln for ln in lines if ln.startswith(("FAILED", "ERROR"))]
    tail = [ln for ln in lines[-3:] if ln.strip() and not ln.startswith("-- Docs")]
    slow = []
    if any("slowest" in ln for ln in lines):
        i = next(i for i, ln in enumerate(lines) if "slowest" in ln)
        slow = [ln for ln in lines[i + 1:i + 11] if ln.strip() and not ln.startswith("(")]
    head = runs.get("suite", ["`python3 -m pytest -q -n 8` on CUDA (tests/ and reference_kernels/)"])
    return ([f"### The whole suite on CUDA: {head[0]}", "", *[f"- {r}" for r in head[1:]], "", "```"] + failed + tail
            + ["```", "", "The 10 slowest phases:", "", "```"] + slow + ["```", ""]
            + lock_waits(lines))


def lock_waits(lines):
    """The run's waits for the GPU lock (pytest-xdist), as its terminal summary gave them: per
    worker, and the longest (issue 32 asks for the GPU-alone phase's waits, under 30 s)."""
    start = next((i for i, ln in enumerate(lines) if "waits for the GPU lock" in ln), None)
    if start is None:
        return []
    block = []
    for ln in lines[start + 1:]:
        block.append(ln)
        if ln.startswith("longest wait"):
            break
    longest = block[-1] if block and block[-1].startswith("longest wait") else ""
    return ["The waits for the GPU lock" + (f" ({longest.split(':')[0]})" if longest else "")
            + ":", "", "```", *block, "```", ""]


def thirdparty_section(text, runs):
    lines = text.splitlines()
    keep = [ln for ln in lines if ln.startswith(("FAILED", "ERROR", "XFAIL", "SKIPPED"))]
    tail = [ln for ln in lines[-2:] if ln.strip()]
    head = runs.get("thirdparty", ["the third-party suite (tests/thirdparty)"])
    table = []  # the plugin's perf table of the library kernels, as the run printed it
    if any("pytest-triton perf =" in ln for ln in lines):
        i = next(i for i, ln in enumerate(lines) if "pytest-triton perf =" in ln)
        for ln in lines[i + 1:]:
            if ln.startswith("GPU settings") or ln.startswith("==="):
                break
            table.append(ln)
    return ([f"### {head[0]}", "", *[f"- {r}" for r in head[1:]], "", "```"] + keep + tail
            + ["```", ""] + (["The library kernels' perf table:", "", "```"] + table + ["```", ""]
                             if table else []))


def geomean_section(doc):
    """Each geomean target: the achieved geomean speedup over torch, and the worst shape."""
    out = ["| test | shapes | geomean x torch | worst shape | worst x | target | verdict |",
           "|---|---|---|---|---|---|---|"]
    for r in doc["results"]:
        g = r.get("geomean")
        if not g:
            continue
        ms = [m for m in r["measurements"] if m.get("speedup")]
        worst = min(ms, key=lambda m: m["speedup"]["median"]) if ms else None
        out.append(f"| {r['nodeid'].split('::')[-1]} | {len(ms)} | {g['achieved']:.3f}x | "
                   f"{worst['name'] if worst else ''} | "
                   f"{worst['speedup']['median']:.3f}x | {g.get('short') or g['target']} | "
                   f"{g['verdict']} |" if worst else f"| {r['nodeid']} | 0 | | | | | |")
    return out if len(out) > 2 else []


def _env_field(d, prefix):
    """A line of the run's env.txt that starts with prefix, less the prefix; None if none."""
    text = _read(d, "env.txt") or ""
    for line in text.splitlines():
        if line.startswith(prefix):
            return line[len(prefix):].strip()
    return None


def _device(d):
    """The GPU a run was on: the nvidia-smi line of env.txt (its name), else perf.json's."""
    text = _read(d, "env.txt") or ""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("name, driver_version") and i + 1 < len(lines):
            return lines[i + 1].split(",")[0].strip()
    for path in _perf_files(d):
        return (_load_json(path).get("device") or {}).get("name")
    return None


def mismatches(dirs):
    """Why these runs cannot stand as one commit's perf and suite runs on each GPU ([] if they
    can): runs of several commits, or a device without a perf run or a whole-suite run."""
    problems = []
    commits = {d: _env_field(d, "commit:") for d in dirs}
    if len(set(commits.values())) > 1 or None in commits.values():
        problems.append("runs of different commits: " + ", ".join(
            f"{os.path.basename(os.path.normpath(d))} at {c or 'an unknown commit'}"
            for d, c in commits.items()))
    by_device = {}
    for d in dirs:
        by_device.setdefault(_device(d) or "an unknown device", []).append(d)
    for device, ds in by_device.items():
        perf = [d for d in ds if _perf_files(d)]
        suite = [d for d in ds if _read(d, "suite.log") is not None]
        if not perf:
            problems.append(f"{device}: no perf run (perf.json)")
        if not suite:
            problems.append(f"{device}: no whole-suite run (suite.log)")
        if perf and suite and not {commits[d] for d in perf} & {commits[d] for d in suite}:
            problems.append(f"{device}: the perf run and the suite run are of different commits")
    return problems


def resources_section(doc):
    """bench/resources_check.py: the CPU path's numbers for this GPU's architecture against the
    real compile's, per launch."""
    t = doc["arch_table"]
    out = ["### `python3 bench/resources_check.py` (triton_resources: the CPU compile against "
           "the real one)", "",
           f"{doc['equal']} of {doc['launches']} launches of the bundled kernels' triton_resources "
           f"tests read the same registers, spill bytes and shared memory on CPU (compiled for "
           f"{t['arch']} from the launch's arguments) as the {t['device']}'s compile reports; "
           f"env/device.py's {t['arch']} row {'matches' if t['ok'] else 'DIFFERS FROM'} "
           "torch.cuda.get_device_properties().", "",
           "| test | kernel | registers (real / CPU) | spilled bytes | shared bytes | same |",
           "|---|---|---|---|---|---|"]
    for r in doc["rows"]:
        real, cpu = r["real"], r["cpu"]
        cells = [f"{real.get(k)} / {cpu.get(k)}" for k in ("n_regs", "spill_bytes", "shared")]
        out.append(f"| {r['test'].split('::')[-1]} | {r['kernel']} | {' | '.join(cells)} | "
                   f"{'yes' if r['equal'] else 'NO'} |")
    return out + [""]


def judge_section(doc, runs):
    """bench/judge_run.py's judge.json: the cheat suite on CUDA, the perf suite under
    --triton-judge, and what the checks cost (as they measured themselves)."""
    head = runs.get("judge", ["`bench/judge_run.py`"])
    out = [f"### {head[0]}", "", *[f"- {r}" for r in head[1:]], ""]
    suite = doc.get("cheat_suite") or {}
    out += [f"The cheat suite (tests/judge: each cheat caught naming its exploit, each honest twin "
            f"passing): {suite.get('summary') or suite.get('rc')} in {suite.get('wall_s')} s", "",
            "| test | result |", "|---|---|"]
    out += [f"| {t['test']} | {t['outcome']} |" for t in suite.get("tests", [])]
    out.append("")
    for key, what in (("perf_judged", "The bundled perf suite with --triton-judge"),
                      ("perf_default", "The perf step (default checks only)")):
        run = doc.get(key)
        if not run:
            continue
        wall = f" in {run['wall_s']} s" if run.get("wall_s") is not None else ""
        out.append(f"- {what}: {run.get('summary') or run.get('rc')}{wall}")
        cost = run.get("cost")
        if cost:
            out.append(f"  - {cost['line'].removeprefix('pytest-triton judge: ')}")
        out += [f"  - {f}" for f in run.get("failures", [])]
    return out + [""]


def regression_section(d, runs):
    """Issue 29: bench/regression_check.py's planted slowdowns and the perf suite against itself
    (final_run.sh's regress and again steps)."""
    out = []
    p = os.path.join(d, "regression_check.json")
    if os.path.exists(p):
        doc = json.load(open(p))
        head = runs.get("regress", ["`bench/regression_check.py`"])
        out += [f"### {head[0]}", "", *[f"- {r}" for r in head[1:]], "",
                f"{doc['runs']} baseline and {doc['runs']} planted runs, each its own pytest "
                f"process (--triton-perf-max-time {doc['max_time_s']}), alternating; planted: "
                f"{doc['planted']}. Planted against baseline: a SLOW is a hit; baseline against "
                "baseline (each run against the next two): a SLOW or FAST is false.", "",
                "| case | test | hits or false verdicts | every verdict |", "|---|---|---|---|"]
        for c in doc["counts"]:
            verdicts = {k: v for k, v in c.items() if k not in ("case", "label")}
            n = sum(verdicts.values())
            bad = verdicts.get("slow", 0) if c["case"] == "planted" else \
                verdicts.get("slow", 0) + verdicts.get("fast", 0)
            what = "SLOW" if c["case"] == "planted" else "SLOW or FAST"
            out.append(f"| {c['case']} | {c['label']} | {what} {bad} of {n} | {verdicts} |")
        out.append("")
    p = os.path.join(d, "self_compare.json")
    if os.path.exists(p):
        doc = json.load(open(p))
        counts = {}
        for r in doc["rows"]:
            counts[r["verdict"]] = counts.get(r["verdict"], 0) + 1
        out += ["### The perf suite against itself (`python -m pytest_triton compare final again`)",
                "", "The perf step's run and a second run of the same commit (final_run.sh's "
                f"again step): {counts} (threshold {100 * doc['threshold']:g}%).", ""]
        for r in doc["rows"]:
            if r["verdict"] in ("slow", "fast"):
                out.append(f"- {r['verdict'].upper()} {r['label']}: {100 * r['change']:+.1f}% "
                           f"[{100 * r['lo']:+.1f}%, {100 * r['hi']:+.1f}%]")
        out.append("")
    p = os.path.join(d, "self_compare_pairs.json")
    if os.path.exists(p):
        out += self_pairs_section(json.load(open(p)), runs)
    return out


def self_pairs_section(doc, runs):
    """bench/self_compare.py: every pair of the perf suite's runs of one commit (the self step)."""
    head = runs.get("self", ["`bench/self_compare.py`"])
    per_test = doc["per_test"]
    bad = {label: c.get("slow", 0) + c.get("fast", 0) for label, c in per_test.items()}
    least = min((sum(c.values()) for c in per_test.values()), default=0)
    slow, fast = (sum(c.get(v, 0) for c in per_test.values()) for v in ("slow", "fast"))
    out = [f"### {head[0]}", "", *[f"- {r}" for r in head[1:]], "",
           f"{len(doc['runs'])} runs of the perf suite ({', '.join(doc['runs'])}), each its own "
           f"pytest process; {doc['pairs']} pairs compared, the older run the reference: "
           f"{len(per_test)} tests and shapes, each compared {least} times or more. SLOW "
           f"{slow} and FAST {fast} of "
           f"{sum(sum(c.values()) for c in per_test.values())} verdicts (a commit against "
           "itself: every one is false).", ""]
    worst = sorted((label for label in per_test if bad[label]), key=lambda k: -bad[k])
    if worst:
        out += ["| test | SLOW or FAST | every verdict |", "|---|---|---|"]
        out += [f"| {label} | {bad[label]} of {sum(per_test[label].values())} | "
                f"{dict(sorted(per_test[label].items()))} |" for label in worst]
        out.append("")
    return out


def _final_record(d, into):
    """The record `bench/final_run.sh perf` saved (history/DEVICE/*-final-*.json, in the run's
    logs.tar.gz), extracted under `into`: its path, or None where the run has none."""
    tar = os.path.join(d, "logs.tar.gz")
    if not os.path.exists(tar):
        return None
    with tarfile.open(tar) as t:
        found = sorted(m.name for m in t.getmembers() if m.isfile() and m.name.startswith(
            "history/") and m.name.endswith(".json") and "-final-" in os.path.basename(m.name))
        if not found:
            return None
        member = t.getmember(found[-1])
        member.name = os.path.join(os.path.basename(os.path.normpath(d)), found[-1])
        t.extract(member, into)
    return os.path.join(into, member.name)


def cross_device_section(dirs):
    """The first run's saved record compared with each other device's, as a CI job would compare
    an H100 history with an H200 run (issue 29: refused by time, compared by fraction). Computed
    here by the plugin's own command, never typed."""
    import tempfile

    from regression_check import command  # the public `python -m pytest_triton`, in-process

    out = []
    with tempfile.TemporaryDirectory() as tmp:
        records, seen = [], set()
        for d in dirs:  # a later step on a warm machine packs the same history again: once
            r = _final_record(d, tmp)
            if r is not None and os.path.basename(r) not in seen:
                seen.add(os.path.basename(r))
                records.append((d, r))
        for d, r in records[1:]:
            if _device(d) == _device(records[0][0]):
                continue
            ref_name, new_name = (os.path.basename(os.path.normpath(x)) for x in (records[0][0], d))
            out += [f"## Across GPUs: {ref_name}'s saved run against {new_name}'s", "",
                    "`python -m pytest_triton compare REF NEW` on the two runs' `final` records "
                    "(history/ in each run's logs.tar.gz), by time and `--by fraction`:", ""]
            for extra in ([], ["--by", "fraction"]):
                rc, printed = command(["compare", "--history", tmp, *extra, records[0][1], r])
                lines = printed.replace(tmp + os.sep, "").strip().splitlines()
                if extra:  # each test's row is in the runs' records: the counts say enough
                    lines = lines[-1:]
                out += ["```", " ".join(["$ python -m pytest_triton compare", *extra, "REF NEW"]),
                        *lines, f"(exit status {rc})", "```", ""]
    return out


def scaling_section(doc, runs):
    """bench/scaling.py's tables (its own markdown(), from scaling.json), under the step's line of
    runs.txt: the configurations' wall times and speedups, what differs from one GPU, and each
    worker's busy and idle time."""
    spec = importlib.util.spec_from_file_location(
        "scaling", os.path.join(os.path.dirname(os.path.abspath(__file__)), "scaling.py"))
    scaling = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(scaling)
    text = scaling.markdown(doc["configurations"], doc.get("dry", False),
                            doc.get("bytecode")).strip().splitlines()
    step = [f"- {r}" for r in runs.get("scaling", [])[1:]]
    return [*text[:2], *step, *([""] if step else []), *text[2:], ""]


def main(args):
    intro, why = [], None
    while args[:1] in (["--intro"], ["--why"]):
        if args[0] == "--intro":
            intro = [open(args[1]).read().strip(), ""]
        else:
            why = args[1]
        args = args[2:]
    dirs = args
    problems = mismatches(dirs)
    if problems and not why:
        print("render_benchmarks: refusing to render: " + "; ".join(problems) + ". Run perf and "
              "the whole suite of one commit on each GPU (bench/final_run.sh perf suite), or say "
              "why with --why TEXT.", file=sys.stderr)
        sys.exit(2)
    out = ["# Benchmarks", "",
           "Generated by `bench/render_benchmarks.py` from the files GPU runs left under `$OUT`; "
           "nothing here is typed by hand.", "", *intro]
    if problems:
        out += ["**These runs are not one commit's perf and suite runs on each GPU:** "
                + "; ".join(problems) + f". Why: {why}", ""]
    for d in dirs:
        out.append(f"## {os.path.basename(os.path.normpath(d))}")
        out.append("")
        if os.path.exists(os.path.join(d, "env.txt")):
            out += ["```", open(os.path.join(d, "env.txt")).read().strip(), "```", ""]
        runs = _runs(d)
        for path in _perf_files(d):
            cmd_file = path[:path.index(".json")] + "_cmd.txt"
            cmd = open(cmd_file).read().strip() if os.path.exists(cmd_file) else \
                "\n".join(runs.get("perf", []))
            geo = geomean_section(_load_json(path))
            if geo:
                out += ["### Against torch, per geomean target (the worst shape beside it)", ""] + geo + [""]
            out += perf_section(path, cmd) + [""]
        for name, title in (("gpu_checks.json", "`python3 bench/gpu_checks.py` (the --triton-perf done-when checks)"),
                            ("xdist_check.json", "`python3 bench/xdist_check.py` (pytest-xdist, one GPU per worker)")):
            p = os.path.join(d, name)
            if os.path.exists(p):
                rows = json.load(open(p))
                out += [f"### {title}", "", "| check | result | ok |", "|---|---|---|"]
                for r in rows:
                    c, res, ok = (r["check"], r["result"], r["ok"]) if isinstance(r, dict) else r
                    out.append(f"| {c} | {res} | {'yes' if ok else 'NO'} |")
                out.append("")
        p = os.path.join(d, "resources_check.json")
        if os.path.exists(p):
            out += resources_section(json.load(open(p)))
        text = _read(d, "suite.log")
        if text is not None:
            out += suite_section(text, runs)
        out += regression_section(d, runs)
        if os.path.exists(os.path.join(d, "judge.json")):
            out += judge_section(json.load(open(os.path.join(d, "judge.json"))), runs)
        text = _read(d, "thirdparty.log")
        if text is not None:
            out += thirdparty_section(text, runs)
        text = _read(d, "sweeps.log")
        if text is not None and "Per candidate" in text:
            head = runs.get("sweeps", ["`bench/sweep_final.py`"])
            out += [f"### {head[0]}", "", *[f"- {r}" for r in head[1:]], "", "```",
                    text[text.index("Per candidate"):].strip(), "```", ""]
        p = os.path.join(d, "scaling.json")
        if os.path.exists(p):
            out += scaling_section(json.load(open(p)), runs)
        for md in sorted(glob.glob(os.path.join(d, "*.md"))):
            if os.path.basename(md) != "scaling.md":  # rendered from scaling.json above
                out += [open(md).read().strip(), ""]
    out += cross_device_section(dirs)
    print("\n".join(out))


if __name__ == "__main__":
    main(sys.argv[1:])
