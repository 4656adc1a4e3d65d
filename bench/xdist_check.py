"""pytest -n N --triton-perf on a machine with several GPUs:
- with as many workers as GPUs, each worker has its own GPU (CUDA_VISIBLE_DEVICES);
- with more workers than GPUs, a perf test never overlaps another worker's test on its GPU.
Prints a table last; writes xdist_check.json under $OUT when set."""

import json
import os
import subprocess
import sys
import tempfile

import torch

OUT = os.environ.get("OUT") or tempfile.mkdtemp()
ngpu = torch.cuda.device_count()
uuids = [str(torch.cuda.get_device_properties(i).uuid) for i in range(ngpu)]
rows = []
# (workers, outer CUDA_VISIBLE_DEVICES): as many workers as GPUs, twice as many, and an outer
# CUDA_VISIBLE_DEVICES naming only the last GPU (every worker must then stay on it).
for workers, outer in ((ngpu, None), (2 * ngpu, None), (2, str(ngpu - 1))):
    log = os.path.join(OUT, f"xdist_{workers}_{outer}.jsonl")
    if os.path.exists(log):
        os.remove(log)
    env = {**os.environ, "XDIST_LOG": log}
    if outer is not None:
        env["CUDA_VISIBLE_DEVICES"] = outer
    p = subprocess.run([sys.executable, "-m", "pytest", "bench/gate/test_xdist.py", "-n", str(workers),
                        "--triton-perf", "-p", "no:cacheprovider", "-q"],
                       capture_output=True, text=True, env=env)
    with open(os.path.join(OUT, f"xdist_{workers}_{outer}.log"), "w") as f:
        f.write(p.stdout + p.stderr)
    recs = [json.loads(line) for line in open(log)]
    gpus = {}
    for r in recs:
        gpus.setdefault(r["worker"], set()).add(r["gpu"])
    distinct = len({g for s in gpus.values() for g in s})
    overlaps = 0
    for a in recs:
        if a["kind"] != "perf":
            continue
        for b in recs:
            if b is not a and b["gpu"] == a["gpu"] and b["worker"] != a["worker"] and b["start"] < a["end"] and a["start"] < b["end"]:
                overlaps += 1
    one_gpu_each = all(len(s) == 1 for s in gpus.values())
    if outer is None:
        ok = p.returncode == 0 and one_gpu_each and overlaps == 0 and (workers > ngpu or distinct == ngpu)
    else:
        ok = p.returncode == 0 and {g for s in gpus.values() for g in s} == {uuids[-1]} and overlaps == 0
    rows.append((f"-n {workers} on {ngpu} GPUs" + (f", outer CUDA_VISIBLE_DEVICES={outer}" if outer else ""), f"rc {p.returncode}; workers->GPU {{{', '.join(f'{w}: {sorted(s)[0][-8:]}' for w, s in sorted(gpus.items()))}}}; {distinct} distinct GPUs; perf tests overlapping another worker on their GPU: {overlaps}", ok))

with open(os.path.join(OUT, "xdist_check.json"), "w") as f:
    json.dump(rows, f, indent=1)
print("\n| run | result | ok |\n|---|---|---|")
for r in rows:
    print(f"| {r[0]} | {r[1]} | {'yes' if r[2] else 'NO'} |")
