#!/usr/bin/env bash
# gpu_profiles.sh: issue #15 on the GPU machine, one call: the agreement test
# (tests/gpu_check.c: every profile the GPU runs against the CPU
# specification's output), the default sweep's wall time on the 36-layer x
# 8,192-token gpt-oss capture, and the layer rel_l2 of every profile on a
# small gpt-oss capture and a long-context one (32,768 keys). Build here first
# (bench/gpu_build.sh), run there from the repository root with .dev carried.
source "$(dirname "$0")/gpu_common.sh"
export PRECGATE_THREADS=${PRECGATE_THREADS:-$(nproc)}
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv | tee "$out/card.txt"
# fp8qkv@flashinfer-fa3 has no attention sinks: it cannot run gpt-oss layers
all=bf16,fp8kv@fixed,fp8kv@vllm-24197,fp8qkv@fa3,fp8qkv@fa3-1level,fp8qkv@trtllm,fp8qkv@ideal

if [ "${TABLES_ONLY:-0}" != 1 ]; then
echo "== agreement: gpu_check"
timeout 200 "$bin/gpu_check" ${GPU_CHECK_ARGS:-} > "$out/gpu_check.log" 2>&1
echo "gpu_check exit $?"
grep -E '^(FAIL|gpu_check)' "$out/gpu_check.log" | head -30

echo "== default sweep: gpt-oss-120b-shaped, 36 layers x 8192 tokens"
"$bin/precgate" synth -o /tmp/bench.safetensors --preset gpt-oss-120b --layers 36 --seqs 1 \
  --seq-len 8192 --seed 1 | tail -1
for i in 1 2 3; do
  timed_run 60 "$out/bench_run$i.log" "$bin/precgate" run --capture /tmp/bench.safetensors \
    --backend cuda --db /tmp/bench$i.db --no-progress
  echo "run #$i: exit $rc, process wall $wall_ms ms"
  grep -E "runs on|timing|s in all" "$out/bench_run$i.log" | head -6
done


echo "== placement: a head-dim-128 capture (the GPU's fa3 kernel takes d 64) and --check-spec"
"$bin/precgate" synth -o /tmp/llama.safetensors --preset llama-3-8b --layers 2 --seqs 1 --seq-len 512 \
  --seed 2 >/dev/null
timeout 120 "$bin/precgate" run --capture /tmp/llama.safetensors --db /tmp/llama.db --no-progress \
  > "$out/llama_run.log" 2>&1; echo "exit $?"; grep -E "backend|runs on|does not run" "$out/llama_run.log"
"$bin/precgate" synth -o /tmp/spec.safetensors --layers 2 --seqs 2 --seq-len 512 --seed 4 >/dev/null
timeout 120 "$bin/precgate" run --capture /tmp/spec.safetensors --backend cuda --check-spec \
  --db /tmp/spec.db --no-progress > "$out/spec_run.log" 2>&1; echo "exit $?"
python3 - <<'PY'
import sqlite3
for db in ("/tmp/llama.db", "/tmp/spec.db"):
    c = sqlite3.connect(db)
    for r in c.execute("SELECT layer, variant, backend, rel_l2 FROM layer_metrics WHERE head = -1 "
                       "ORDER BY layer, variant"):
        print(db, "%d %-22s %-5s %.4e" % r)
PY
fi
[ "${SKIP_TABLES:-0}" = 1 ] && exit 0

table() {  # capture db label
  python3 - "$2" "$3" <<'PY'
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
rows = db.execute("SELECT layer, variant, backend, rel_l2 FROM layer_metrics WHERE head = -1 "
                  "AND variant NOT LIKE '%~spec' ORDER BY layer, variant").fetchall()
print("-- " + sys.argv[2])
for r in rows: print("%3d %-24s %-5s %.4e" % r)
PY
}
echo "== profiles on a small gpt-oss capture (4 layers x 2 x 1024)"
"$bin/precgate" synth -o /tmp/small.safetensors --layers 4 --seqs 2 --seq-len 1024 --seed 3 >/dev/null
timeout 200 "$bin/precgate" run --capture /tmp/small.safetensors --variants "$all" --db /tmp/small.db \
  --no-progress > "$out/small_run.log" 2>&1; echo "exit $?"; grep -E "runs on" "$out/small_run.log"
table /tmp/small.safetensors /tmp/small.db "gpt-oss synthetic, 4 layers x 2 x 1024" | tee "$out/table_small.txt"

echo "== profiles on a long-context gpt-oss capture (2 layers, 1024 new + 31744 cached = 32768 keys)"
"$bin/precgate" synth -o /tmp/long.safetensors --layers 2 --seqs 1 --seq-len 1024 --context 31744 \
  --seed 5 >/dev/null
timeout 300 "$bin/precgate" run --capture /tmp/long.safetensors --variants "$all" --db /tmp/long.db \
  --no-progress > "$out/long_run.log" 2>&1; echo "exit $?"; tail -3 "$out/long_run.log"
table /tmp/long.safetensors /tmp/long.db "gpt-oss synthetic long context, 32768 keys" | tee "$out/table_long.txt"
