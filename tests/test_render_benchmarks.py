"""bench/render_benchmarks.py refuses runs that are not one commit's perf and suite runs on each
GPU (issue 32: the landed head was red on the GPU because kernels changed after the last suite
run, and BENCHMARKS.md showed perf runs of one commit beside suite runs of another)."""

import gzip
import io
import json
import pathlib
import subprocess
import sys

import pytest

from pytest_triton.regress import schema

ROOT = pathlib.Path(__file__).parents[1]
RENDER = ROOT / "bench" / "render_benchmarks.py"
DATA = ROOT / "tests" / "data"


def _run_dir(tmp_path, name, commit, device, *, perf=True, suite=True):
    d = tmp_path / name
    d.mkdir()
    (d / "env.txt").write_text(
        f"date (UTC): 2026-11-26 10:00\ncommit: {commit}\n"
        "name, driver_version, clocks.max.sm [MHz]\n"
        f"{device}, 580.159.04, 1980 MHz\n")
    runs = []
    if perf:
        (d / "perf.json").write_bytes(gzip.decompress((DATA / "h100-perf.json.gz").read_bytes()))
        runs += ["perf: `pytest --pyargs reference_kernels --triton-perf`", "perf: rc=0 wall=140s"]
    if suite:
        (d / "suite.log").write_text("1800 passed, 86 skipped in 300.00s\n")
        runs += ["suite: `python3 -m pytest -n 14`", "suite: rc=0 wall=300s"]
    (d / "runs.txt").write_text("\n".join(runs) + "\n")
    return d


def _render(*args):
    return subprocess.run([sys.executable, str(RENDER), *map(str, args)], capture_output=True,
                          text=True, cwd=ROOT)


def test_one_commits_perf_and_suite_on_each_gpu_renders(tmp_path):
    h100 = _run_dir(tmp_path, "a-H100", "abc1234", "NVIDIA H100 80GB HBM3")
    h200 = _run_dir(tmp_path, "a-H200", "abc1234", "NVIDIA H200")
    done = _render(h100, h200)
    assert done.returncode == 0, done.stderr
    assert "### The whole suite on CUDA: `python3 -m pytest -n 14`" in done.stdout
    assert "not one commit's" not in done.stdout


@pytest.mark.parametrize("case, needle", [
    ("commits", "runs of different commits: a-H100 at abc1234, a-H200 at def5678"),
    ("no suite", "NVIDIA H200: no whole-suite run (suite.log)"),
    ("no perf", "NVIDIA H200: no perf run (perf.json)"),
])
def test_runs_that_are_not_one_commits_perf_and_suite_are_refused(tmp_path, case, needle):
    h100 = _run_dir(tmp_path, "a-H100", "abc1234", "NVIDIA H100 80GB HBM3")
    h200 = _run_dir(tmp_path, "a-H200", "def5678" if case == "commits" else "abc1234",
                    "NVIDIA H200", suite=case != "no suite", perf=case != "no perf")
    refused = _render(h100, h200)
    assert refused.returncode == 2 and needle in refused.stderr, refused.stderr
    assert refused.stdout == ""
    said = _render("--why", "the H200 was not lent", h100, h200)
    assert said.returncode == 0
    assert needle in said.stdout and "Why: the H200 was not lent" in said.stdout


def test_the_self_comparisons_name_each_false_verdict(tmp_path):
    # bench/self_compare.py's every pair of one commit's perf-suite runs (issue 29: SLOW in 0 of
    # 20 comparisons per test): the counts, and each test that got a SLOW or FAST
    d = _run_dir(tmp_path, "a-H100", "abc1234", "NVIDIA H100 80GB HBM3")
    with open(d / "runs.txt", "a") as f:
        f.write("self: `bench/self_compare.py --runs 5 --names final again`\nself: rc=0 wall=430s\n")
    per_test = {"t.py::test_add": {"same": 20, "uncertain": 1},
                "t.py::test_mm": {"same": 18, "slow": 2, "fast": 1}}
    (d / "self_compare_pairs.json").write_text(json.dumps(
        {"runs": ["final", "again", *(f"self-{i}" for i in range(5))], "pairs": 21,
         "per_test": per_test, "comparisons": []}))
    done = _render("--why", "one GPU", d)
    assert done.returncode == 0, done.stderr
    assert "### `bench/self_compare.py --runs 5 --names final again`" in done.stdout
    assert ("21 pairs compared, the older run the reference: 2 tests and shapes, each compared 21 "
            "times or more. SLOW 2 and FAST 1 of 42 verdicts") in done.stdout
    assert "| t.py::test_mm | 3 of 21 |" in done.stdout and "| t.py::test_add |" not in done.stdout


def test_the_suites_waits_for_the_gpu_lock_are_quoted(tmp_path):
    # issue 32: the GPU-alone phase's waits reported beside the suite's result
    d = _run_dir(tmp_path, "a-H100", "abc1234", "NVIDIA H100 80GB HBM3")
    (d / "suite.log").write_text(
        "==== pytest-triton: waits for the GPU lock (pytest-xdist) ====\n"
        "gw0: waited 3.4 s in 52 takes, longest 3.3 s (t.py::test_a, to share it); held it alone "
        "0.0 s in 0 parts\n"
        "longest wait 39.8 s: t.py::test_b, to share it; waits in all 278.1 s over 14 workers; the "
        "GPU held alone 29.5 s in 21 parts\n"
        "1800 passed, 86 skipped in 300.00s\n")
    done = _render("--why", "one GPU", d)
    assert done.returncode == 0, done.stderr
    assert "The waits for the GPU lock (longest wait 39.8 s):" in done.stdout
    assert "gw0: waited 3.4 s in 52 takes" in done.stdout


def _with_saved_run(d, report):
    """Give run dir `d` a `final` record saved from tests/data's REPORT (a real GPU run's
    --triton-perf-json), packed in logs.tar.gz as final_run.sh packs the perf step's history."""
    import tarfile

    doc = json.loads(gzip.decompress((DATA / report).read_bytes()))
    doc = schema.stamp(doc, schema.HISTORY)
    doc["run"] = {"name": "final", "commit": None, "branch": None, "dirty": None,
                  "versions": {}, "host": "vm", "shards": []}
    key = f"{doc['device']['sku'].replace(' ', '-')}-{doc['device']['fingerprint'][:8]}"
    data = json.dumps(doc).encode()
    member = tarfile.TarInfo(f"history/{key}/20261127T034618560181Z-nocommit-final-{key[-8:]}.json")
    member.size = len(data)
    with tarfile.open(d / "logs.tar.gz", "w:gz") as dst:
        dst.addfile(member, io.BytesIO(data))


def _render_saved(tmp_path, *runs):
    """Render run dirs of one commit, each (name, GPU, the tests/data report whose saved record
    it gets); the output."""
    dirs = []
    for name, device, saved in runs:
        dirs.append(_run_dir(tmp_path, name, "abc1234", device))
        _with_saved_run(dirs[-1], saved)
    done = _render(*dirs)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_another_gpus_saved_run_is_refused_by_time_and_compared_by_fraction(tmp_path):
    # Issue 29: an H100 history against an H200 run, the real records of one commit's perf runs
    out = _render_saved(tmp_path, ("a-H100", "NVIDIA H100 80GB HBM3", "h100-perf.json.gz"),
                        ("a-H200", "NVIDIA H200", "h200-perf.json.gz"))
    section = out[out.index("## Across GPUs: a-H100's saved run against a-H200's"):]
    by_time, by_fraction = section.split("$ python -m pytest_triton compare")[1:]
    assert "REFUSED: H100 SXM vs H200 SXM: not comparable; compare fractions of the measured " \
           "ceiling with --by fraction" in by_time  # the flag of the command shown
    assert "refused (threshold 3%, by time" in by_time
    assert by_fraction.startswith(" --by fraction REF NEW") and "by fraction;" in by_fraction
    assert "refused" not in by_fraction and str(tmp_path) not in section


def test_runs_of_one_gpu_get_no_comparison_across_gpus(tmp_path):
    out = _render_saved(tmp_path, ("a-H100", "NVIDIA H100 80GB HBM3", "h100-perf.json.gz"),
                        ("b-H100", "NVIDIA H100 80GB HBM3", "h100-perf.json.gz"))
    assert "Across GPUs" not in out


def test_the_several_gpus_section_is_rendered_from_scaling_json(tmp_path):
    d = _run_dir(tmp_path, "h100x4", "abc1234", "NVIDIA H100 80GB HBM3")
    worker = {"worker": "gw1", "gpu": "1", "tests": 30, "busy_s": 70.25, "idle_s": 9.5,
              "start_s": 6.0, "tail_s": 3.5, "busy_frac": 0.881, "setup_s": 1.5, "teardown_s": 0.3,
              "calibration_s": 4.0}
    doc = {"dry": False, "gpus": 2, "configurations": [
        {"gpus": 1, "wall_s": 156.0, "rc": 0, "speedup": 1.0, "of_linear": 1.0,
         "counts": {"passed": 60}, "differences": [], "worker_times": [], "device": "H100"},
        {"gpus": 2, "wall_s": 84.0, "rc": 0, "speedup": 1.857, "of_linear": 0.929,
         "before_s": 9.1, "after_s": 2.0, "counts": {"passed": 59, "failed": 1}, "worker_times": [worker], "device": "H100",
         "order": {"order": "longest-first", "tests": 60, "saved": 58},
         "differences": ["outcome t.py::a: passed on 1 GPU, failed here"]}]}
    (d / "scaling.json").write_text(json.dumps(doc))
    (d / "scaling.md").write_text("### Several GPUs: a stale copy\n")
    done = _render(d)
    assert done.returncode == 0, done.stderr
    text = done.stdout
    assert text.count("### Several GPUs") == 1 and "a stale copy" not in text
    assert "| 2 | 84.0 | 1.86x | 93% | 9.1 | 2.0 | estimates for 2 of 60 | 1 failed, 59 passed | 0 " \
           "| **no, 1 differ** |" in text
    # a run before the split, and before the reports said their order
    assert "| 1 | 156.0 | 1.00x | 100% |  |  | not recorded | 60 passed | 0 | yes |" in text
    assert "- outcome t.py::a: passed on 1 GPU, failed here" in text
    assert "| 2 | gw1 | 1 | 30 | 70.2 | 1.5 | 0.3 | 4.0 | 9.5 | 6.0 | 3.5 | 88% |" in text
