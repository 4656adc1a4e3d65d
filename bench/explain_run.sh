#!/usr/bin/env bash
# The GPU checks of --triton-perf-explain (issue 10). On the GPU machine, from the repo root:
#   bash bench/explain_run.sh [controls|suite|ncu]...    (default: all three)
# Writes under $OUT: controls.log, explain.log + explain.json + roofline.png, ncu.log + ncu.json.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -1
steps=${*:-controls suite ncu}
for step in $steps; do
  case $step in
    controls)  # the deliberately slow kernels name their causes; the good one gets no hint
      python3 -m pytest tests/plugin/test_explain_gpu.py -v -s -p no:cacheprovider -p no:randomly \
        > "$OUT/controls.log" 2>&1
      echo "controls rc=$?"; grep -E "PASSED|FAILED|SKIPPED|passed|failed" "$OUT/controls.log" | tail -4 ;;
    suite)  # the bundled suite diagnosed; the explain cost against the run's wall time
      start=$(date +%s)
      (cd /tmp && python3 -m pytest --pyargs reference_kernels --triton-perf -m perf_target \
         -p no:cacheprovider --benchmark-disable --triton-perf-explain \
         --triton-perf-plot "$OUT/roofline.png" --triton-perf-json "$OUT/explain.json" -rfE \
         > "$OUT/explain.log" 2>&1)
      echo "suite rc=$? wall=$(( $(date +%s) - start ))s" | tee -a "$OUT/explain.log"
      grep -E "measurements diagnosed|roofline|measurements:|passed|failed" "$OUT/explain.log" | tail -5 ;;
    ncu)  # Nsight Compute on one kernel of the bundled suite
      (cd /tmp && python3 -m pytest --pyargs reference_kernels --triton-perf -p no:cacheprovider \
         --benchmark-disable -k "test_vector_add_speed and float32" --triton-perf-explain=ncu -rP \
         --triton-perf-json "$OUT/ncu.json" > "$OUT/ncu.log" 2>&1)
      echo "ncu rc=$?"; grep -E "^  ncu|passed|failed" "$OUT/ncu.log" | tail -4 ;;
  esac
done
