#!/usr/bin/env bash
# The GPU run behind BENCHMARKS.md. On the GPU machine, from the repo root:
#   bash bench/final_run.sh [perf|suite|checks|sweeps]...    (default: perf suite checks)
# Writes under $OUT: env.txt, perf.json + perf_cmd.txt + perf.log, suite.log, gpu_checks.json.
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
      # issue 12's candidates, not yet measured: split-K small-M matmul, attention PIPELINE
      python3 bench/sweep_matmul_smallm.py --budget 270 > "$OUT/sweep_matmul_smallm.log" 2>&1
      tail -25 "$OUT/sweep_matmul_smallm.log"
      python3 bench/sweep_attention.py --budget 240 > "$OUT/sweep_attention.log" 2>&1
      tail -25 "$OUT/sweep_attention.log" ;;
  esac
done
