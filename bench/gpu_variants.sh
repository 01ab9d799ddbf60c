#!/usr/bin/env bash
# gpu_variants.sh: issue #31 items 1 and 4 on the GPU machine, one call:
# gpu_check (every variant the GPU runs at a quarter of its own error, per
# case and per element; the e4m3 / e5m2 cache writes and gathers bit for
# bit), each deliberately broken kernel of bench/gpu_breaks_build.sh (each
# must fail it), the demo capture with every profile on --backend cuda (the
# cells a kernel refuses stored as such), and the 36-layer x 8,192-token
# gpt-oss-120b-shaped capture: the default sweep against the sweep of every
# GPU profile and format, and PyTorch's sweep of the same contract. Build
# here first (bench/gpu_build.sh, bench/gpu_breaks_build.sh), run there from
# the repository root with .dev/gpu carried.
source "$(dirname "$0")/gpu_common.sh"
export PRECGATE_THREADS=${PRECGATE_THREADS:-$(nproc)}
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv | tee "$out/card.txt"
gpu_all=bf16,fp8kv@fixed,fp8kv@vllm-24197,fp8kv_e5m2@fixed,fp8qkv@fa3,fp8qkv@fa3-1level,fp8qkv@trtllm,fp8qkv@flashinfer-fa3,fp8qkv@ideal

echo "== gpu_check"
timed_run 300 "$out/gpu_check.log" "$bin/gpu_check" ${GPU_CHECK_ARGS:-}
echo "gpu_check: exit $rc in $wall_ms ms"
grep -E '^gpu_check' "$out/gpu_check.log"
grep -E '^FAIL' "$out/gpu_check.log" | head -12
echo "failed checks by kind:"
grep -E '^FAIL' "$out/gpu_check.log" | sed -E 's/^FAIL [^:]*: //; s/: got.*//; s/[0-9.]+e[-+][0-9]+/N/g' |
  sort | uniq -c | sort -rn | head -12

echo "== breaks (each must fail gpu_check --quick)"
for b in "$bin"/gpu_check_break_*; do
  [ -e "$b" ] || continue
  name=${b##*/gpu_check_break_}
  timed_run 200 "$out/break_$name.log" "$b" --quick
  echo "break $name: exit $rc, $(grep -c '^FAIL' "$out/break_$name.log") failed checks," \
    "e.g. $(grep -m1 '^FAIL' "$out/break_$name.log" | cut -c1-160)"
done

echo "== demo capture, every profile on --backend cuda"
"$bin/precgate" synth --preset gpt-oss-120b --layers 4 --seqs 2 --seq-len 512 --context 128 \
  -o /tmp/demo4.safetensors --seed 1 >/dev/null
all=$("$bin/precgate" help profiles | grep -E '^[a-z0-9_]+(@[a-z0-9.-]+)?( \(default\))?$' |
  sed 's/ (default)//' | paste -sd,)
timed_run 300 "$out/demo_all.log" "$bin/precgate" run --capture /tmp/demo4.safetensors \
  --variants "$all" --backend cuda --db /tmp/demo_all.db --no-progress
echo "demo, all profiles: exit $rc in $wall_ms ms"
grep -E "runs on|not computed|beside" "$out/demo_all.log" | head -12
timed_run 300 "$out/demo_spec.log" "$bin/precgate" run --capture /tmp/demo4.safetensors \
  --variants "$gpu_all" --backend cuda --check-spec --db /tmp/demo_spec.db --no-progress
echo "demo, GPU profiles with --check-spec: exit $rc in $wall_ms ms"
python3 - <<'PY'
import sqlite3
c = sqlite3.connect("/tmp/demo_spec.db")
rows = c.execute("SELECT layer, variant, rel_l2 FROM layer_metrics WHERE head = -1").fetchall()
by = {}
for layer, var, r in rows: by[(layer, var)] = r
for (layer, var), r in sorted(by.items()):
    if var.endswith("~spec"): continue
    s = by.get((layer, var + "~spec"))
    print("%d %-24s gpu %.5e spec %s" % (layer, var, r, "%.5e" % s if s is not None else "-"))
PY

echo "== 36 x 8192 gpt-oss-120b-shaped capture"
"$bin/precgate" synth -o /tmp/bench.safetensors --preset gpt-oss-120b --layers 36 --seqs 1 \
  --seq-len 8192 --seed 1 | tail -1
for i in $(seq 1 "${BIG_REPS:-2}"); do
  timed_run 120 "$out/big_default$i.log" "$bin/precgate" run --capture /tmp/bench.safetensors \
    --backend cuda --db /tmp/big_default$i.db --no-progress
  echo "default #$i: exit $rc, wall $wall_ms ms"
  timed_run 300 "$out/big_all$i.log" "$bin/precgate" run --capture /tmp/bench.safetensors \
    --backend cuda --variants "$gpu_all" --db /tmp/big_all$i.db --no-progress
  echo "GPU profiles and formats #$i: exit $rc, wall $wall_ms ms"
done
grep -E "runs on|s in all|not computed" "$out/big_all${BIG_REPS:-2}.log" | head -6
# --attribute where every row runs on the GPU (fp8kv, @ideal), against its plain sweep
attr_vars=bf16,fp8kv@fixed,fp8qkv@ideal
timed_run 120 "$out/big_plain3.log" "$bin/precgate" run --capture /tmp/bench.safetensors \
  --backend cuda --variants "$attr_vars" --db /tmp/big_plain3.db --no-progress
echo "plain $attr_vars: exit $rc, wall $wall_ms ms"
timed_run 300 "$out/big_attr3.log" "$bin/precgate" run --capture /tmp/bench.safetensors \
  --backend cuda --variants "$attr_vars" --attribute --db /tmp/big_attr3.db --no-progress
echo "--attribute $attr_vars: exit $rc, wall $wall_ms ms"
grep -E "attribution|s in all" "$out/big_attr3.log" | head -4
timed_run 300 "$out/demo_attr.log" "$bin/precgate" run --capture /tmp/demo4.safetensors \
  --backend cuda --attribute --db /tmp/demo_attr.db --no-progress
echo "demo --attribute, default variants: exit $rc, wall $wall_ms ms"
grep -E "attribution" "$out/demo_attr.log" | head -4
if [ "${SKIP_TORCH:-0}" != 1 ] && python3 -c 'import torch' 2>/dev/null; then
  timeout 200 python3 bench/torch_sweep.py /tmp/bench.safetensors 3 > "$out/torch.log" 2>&1
  echo "torch_sweep: exit $?"; tail -4 "$out/torch.log"
fi

[ "${SKIP_DIAGNOSE:-0}" = 1 ] && exit 0
echo "== diagnosis and attribution on the GPU against the CPU (bench/gpu_diagnose.sh, 4 layers)"
LAYERS=4 BACKENDS="cuda cpu" OUT="$out/diagnose" bash bench/gpu_diagnose.sh 2>&1 | tail -30
