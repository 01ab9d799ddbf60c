#!/usr/bin/env bash
# gpu_formats.sh: the GPU machine's check of the mode table (issue #29), in one
# call: gpu_check (every profile the GPU runs against the CPU specification),
# then a sweep on the GPU with the KV formats the GPU has no kernel for
# (fp8kv_e5m2 and the per-token-head formats): they must run on the CPU
# specification and the run must say so. Then the int4 rotation's signs
# (kernels/rht.h) against torch's own generator, as vLLM draws them. Build here first with bench/gpu_build.sh, carry
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
  --variants bf16,fp8kv,fp8qkv,fp8kv_e5m2,fp8kv_per_token_head,int8kv_per_token_head,int4kv_per_token_head \
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
echo "== the int4 rotation's signs against torch (vLLM _hadamard.py)"
"$bin/rht_signs" 16 64 128 256 > /tmp/rht_c.txt
python3 - <<'PY' | tee "$out/rht_signs.log"
import torch
seed = 0x9E3779B9  # 0x9E3779B9 + round_idx * 0x517CC1B7, round_idx 0
mine = dict(l.split(": ") for l in open("/tmp/rht_c.txt").read().split("\n") if l)
bad = 0
for d in (16, 64, 128, 256):
    gen = torch.Generator("cpu")
    gen.manual_seed(seed)
    s = 2.0 * torch.bernoulli(torch.full((d,), 0.5), generator=gen) - 1.0
    want = "".join("+" if x > 0 else "-" for x in s.tolist())
    ok = mine[str(d)] == want
    bad += not ok
    print(f"d {d}: {'same' if ok else 'DIFFERENT'} torch {want[:32]}... precgate {mine[str(d)][:32]}...")
print("rht signs:", "all equal to torch's" if bad == 0 else f"{bad} head dims differ")
PY
if [ "${LONG:-0}" = 1 ]; then
  # The long-context capture of issue #30's table: llama-3-8b shape, 512 new
  # tokens after 32,256 cached ones (32,768 keys), every KV format.
  # LONG_LAYERS and LONG_VARIANTS narrow it (layer 0 is the same at any count):
  # the TurboQuant presets run on the CPU specification, about 20 s a layer each.
  echo "== every format on a 32k-key llama-3-8b capture"
  "$bin/precgate" synth -o /tmp/long.safetensors --preset llama-3-8b --layers "${LONG_LAYERS:-2}" \
    --seqs 1 --seq-len 512 --context 32256 >/dev/null
  /usr/bin/time -f "long run: %e s wall" timeout 500 "$bin/precgate" run \
    --capture /tmp/long.safetensors --backend cuda --db /tmp/long.db --no-progress \
    --variants "${LONG_VARIANTS:-bf16,fp8kv,fp8qkv,fp8kv_e5m2,fp8kv_per_token_head,int8kv_per_token_head,int4kv_per_token_head,nvfp4kv}" \
    > "$out/long_run.log" 2>&1
  echo "long run exit $?"
  tail -8 "$out/long_run.log"
fi
