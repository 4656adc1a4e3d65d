#!/usr/bin/env bash
# The GPU run behind BENCHMARKS.md. On the GPU machine, from the repo root:
#   bash bench/final_run.sh [perf|suite|checks|sweeps]...    (default: perf suite checks)
# Writes under $OUT: env.txt, perf.json + perf_cmd.txt + perf.log, suite.log, gpu_checks.json;
# sweeps: sweeps.log and sweeps.json (with env.txt, 3 files; under 4 minutes on one GPU).
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -1
{
  date -u +"date (UTC): %Y-%m-%d %H:%M"
  nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem,power.limit,temperature.gpu --format=csv
  python3 -c "import sys, torch, triton, pytest, pytest_benchmark; print('python', sys.version.split()[0], '| torch', torch.__version__, '| triton', triton.__version__, '| pytest', pytest.__version__, '| pytest-benchmark', pytest_benchmark.__version__)"
} > "$OUT/env.txt"
cat "$OUT/env.txt"
steps=${*:-perf suite checks}
for step in $steps; do
  case $step in
    perf)
      rm -rf ~/.triton/cache  # the 3-minute budget is for a cold Triton cache
      cmd="pytest --pyargs reference_kernels --triton-perf -m perf_target --triton-perf-json perf.json"
      echo "$cmd" > "$OUT/perf_cmd.txt"
      start=$(date +%s)
      (cd /tmp && python3 -m pytest --pyargs reference_kernels --triton-perf -m perf_target -p no:cacheprovider \
         --benchmark-disable --triton-perf-json "$OUT/perf.json" -rfE > "$OUT/perf.log" 2>&1)
      echo "perf rc=$? wall=$(( $(date +%s) - start ))s (cold Triton cache)" | tee -a "$OUT/perf_cmd.txt"
      grep -E "measurements:|GPU settings|passed|failed" "$OUT/perf.log" | tail -4 ;;
    suite)
      start=$(date +%s)
      # --timeout (pytest-timeout, on the GPU machines): a hung test dumps its stacks, not the run
      python3 -m pytest -q -p no:cacheprovider -n 8 --timeout 240 --durations 12 -rfE > "$OUT/suite.log" 2>&1
      echo "suite (pytest -n 8: tests/ and reference_kernels/ on CUDA) rc=$? wall=$(( $(date +%s) - start ))s" | tee -a "$OUT/suite.log"
      tail -3 "$OUT/suite.log" ;;
    checks)
      python3 bench/gpu_checks.py 2>&1 | tail -9 ;;
    sweeps)
      # Issue 23, one run (bench/sweep_final.py): the matmul's split-K default and 5-stage
      # large-M tile against cuBLAS, attention's warp specialization and tiles against SDPA,
      # conv2d's tma_nhwc against cuDNN and the tma plan, softmax_persistent 64K and the
      # layernorm backward candidates against same-byte baselines. 195 s of measurements
      # (compiles included; a cold Triton cache), then its tables; SIGINT at 230 s still writes
      # them, and sweeps.json is written after every phase.
      start=$(date +%s)
      timeout -s INT 230 python3 bench/sweep_final.py --budget 195 --max-time 0.15 \
        > "$OUT/sweeps.log" 2>&1
      echo "sweeps rc=$? wall=$(( $(date +%s) - start ))s" | tee -a "$OUT/sweeps.log"
      grep -A 200 "^Per candidate" "$OUT/sweeps.log" | head -80 ;;
  esac
done
