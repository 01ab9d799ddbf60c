#!/usr/bin/env bash
# gpu_formats.sh: the GPU machine's check of the mode table (issue #29), in one
# call: gpu_check (every profile the GPU runs against the CPU specification),
# then a sweep on the GPU with the KV formats the GPU has no kernel for
# (fp8kv_e5m2, fp8kv_per_token_head, int8kv_per_token_head): they must run on
# the CPU specification and the run must say so. Build here first with bench/gpu_build.sh, carry
# .dev/gpu. Logs go to $OUT.
source "$(dirname "$0")/gpu_common.sh"
export PRECGATE_THREADS=${PRECGATE_THREADS:-$(nproc)}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/card.txt"
if [ "${SKIP_GPU_CHECK:-0}" != 1 ]; then  # bench/gpu.sh runs it too
  echo "== gpu_check"
  timeout 300 "$bin/gpu_check" > "$out/gpu_check.log" 2>&1
  echo "gpu_check exit $?"
  grep -E '^(FAIL|gpu_check)' "$out/gpu_check.log" | head -40
fi
echo "== a GPU sweep with the new formats"
"$bin/precgate" synth -o /tmp/f.safetensors --preset gpt-oss-120b --layers 2 --seqs 2 \
  --seq-len 512 --context 128 >/dev/null
timeout 240 "$bin/precgate" run --capture /tmp/f.safetensors --backend cuda --check-spec \
  --variants bf16,fp8kv,fp8qkv,fp8kv_e5m2,fp8kv_per_token_head,int8kv_per_token_head \
  --db /tmp/f.db --no-progress \
  > "$out/formats_run.log" 2>&1
echo "run exit $?"
grep -iE "does not run|CPU specification|warning|error" "$out/formats_run.log" | head -12
python3 - <<'PY' | tee -a "$out/formats_run.log"
import sqlite3
db = sqlite3.connect("/tmp/f.db")
for row in db.execute("SELECT layer, variant, backend, rel_l2 FROM layer_metrics WHERE head = -1 "
                      "ORDER BY layer, variant, backend"):
    print(row)
PY
