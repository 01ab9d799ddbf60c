#!/usr/bin/env bash
# gpu.sh: the GPU checks and benchmarks of bench/RESULTS.md, in one call on the
# GPU machine (which has no cJSON and no Criterion). Build here first:
#   bench/gpu_build.sh            -> .dev/gpu/{precgate,gpu_check,gpu_kernels,libcjson.so.1}
# then run this script there from the repository root with .dev/gpu carried.
# Writes logs to $OUT (or /tmp/precgate-gpu) and prints a summary last.
source "$(dirname "$0")/gpu_common.sh"
export PRECGATE_THREADS=${PRECGATE_THREADS:-$(nproc)}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,memory.total --format=csv | tee "$out/card.txt"

echo "== matrix instructions in the kernels (SASS): wgmma fp8 QGMMA, fp64 DMMA, mma.sync HMMA"
cuobjdump --dump-sass "$bin/precgate" 2>/dev/null | grep -oE "QGMMA|HGMMA|DMMA|HMMA" | sort | uniq -c

echo "== agreement: every kernel against the CPU specification"
timeout 240 "$bin/gpu_check" ${GPU_CHECK_ARGS:-} > "$out/gpu_check.log" 2>&1
echo "gpu_check exit $?"
grep -E '^(FAIL|gpu_check)' "$out/gpu_check.log" | head -40

echo "== the sweep with --check-spec on a small capture"
"$bin/precgate" synth -o /tmp/small.safetensors --layers 4 --seqs 2 --seq-len 1024 --context 256 >/dev/null
timeout 30 "$bin/precgate" run --capture /tmp/small.safetensors --backend cuda --check-spec --db /tmp/small.db \
  --no-progress > "$out/check_spec.log" 2>&1
echo "run exit $?"; tail -8 "$out/check_spec.log"
python3 - <<'PY' >> "$out/check_spec.log"
import sqlite3
db = sqlite3.connect("/tmp/small.db")
for row in db.execute("SELECT layer, variant, rel_l2, max_abs FROM layer_metrics WHERE head = -1 "
                      "AND variant LIKE '%~spec' ORDER BY layer, variant"):
    print(row)
PY
grep -E "~spec" "$out/check_spec.log" | head -12

if [ "${SKIP_BENCH:-0}" != 1 ]; then
  echo "== benchmark: gpt-oss-120b-shaped capture, 36 layers x 8192 tokens"
  "$bin/precgate" synth -o /tmp/bench.safetensors --preset gpt-oss-120b --layers 36 --seqs 1 \
    --seq-len 8192 --seed 1 | tail -1
  timeout 120 "$bin/gpu_kernels" /tmp/bench.safetensors 5 2>&1 | tee "$out/gpu_kernels.log"
  for i in 1 2 3; do
    timed_run 30 "$out/bench_run$i.log" "$bin/precgate" run --capture /tmp/bench.safetensors \
      --backend cuda --db /tmp/bench$i.db --no-progress
    echo "precgate run --backend cuda #$i (load, reference, 3 modes, metrics, SQLite): exit $rc, process wall $wall_ms ms"
    tail -1 "$out/bench_run$i.log"
  done
  [ "${SKIP_TORCH:-0}" = 1 ] || PYTHONUNBUFFERED=1 timeout 150 python3 bench/torch_sweep.py /tmp/bench.safetensors 5 2>&1 | tee "$out/torch.log"
fi
