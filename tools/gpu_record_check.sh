#!/usr/bin/env bash
# gpu_record_check.sh: the recorders end to end on the GPU machine.
#
# Run from the repository root on a machine with PyTorch (CUDA) and transformers,
# no network, and a prebuilt precgate in .dev/gpu (with its libraries beside it):
#
#   bash tools/gpu_record_check.sh
#
# 1. records a random-weight gpt-oss-architecture model (3 layers: 64 q heads,
#    8 kv heads, head_dim 64, sinks, window 128 on layers 0 and 2) and a small
#    Llama-architecture one (2 layers, 8/2 heads, head_dim 64) with
#    tools/record_hf.py on the GPU: demo traces (problem + recorded completion,
#    up to 512 tokens), chunked prefill (--chunk 192, so the recorded queries
#    have context), each layer's eager attention output as out.eager;
# 2. sweeps both captures with `precgate run --backend cuda` and prints, per
#    layer, the three modes and ext:eager (whole-layer rel_l2, max_abs, cos_sim);
# 3. runs the Python tests (tests/py), whose real-model tests run here since
#    torch and transformers are present (CPU backend of the same binary).
# ext:eager is the model's own bf16 eager attention on the recorded q/k/v; it must
# agree with precgate's fp64 reference to bf16 precision (rel_l2 < 0.05) if the
# capture is right (q/k after RoPE, keys aligned, window, sinks, sm_scale).
# Total runtime well under 3 minutes; a summary is printed last. Exit 0 = all passed.
#
# Environment: PRECGATE_GPU_BIN (default .dev/gpu/precgate), PYTHON (python3),
# OUT (where the databases and the log are copied, when set).
set -u -o pipefail

cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
BIN=${PRECGATE_GPU_BIN:-.dev/gpu/precgate}
export LD_LIBRARY_PATH="$(dirname "$BIN")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
WORK=$(mktemp -d /tmp/gpu-record-check.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
TRACES=evals/demo/aime-style-demo.jsonl
START=$(date +%s)
declare -a SUMMARY=()
FAILED=0

note() { SUMMARY+=("$1"); case "$1" in FAIL*) FAILED=1 ;; esac; }
step() { echo; echo "=== $* ($(( $(date +%s) - START )) s)"; }

step "environment"
"$PY" - <<'EOF' || note "FAIL environment: torch/transformers/CUDA not usable"
import torch, transformers
print(f"torch {torch.__version__} (CUDA {torch.version.cuda}, available: {torch.cuda.is_available()}), "
      f"transformers {transformers.__version__}")
print(torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU")
assert torch.cuda.is_available()
EOF
if [ ! -x "$BIN" ]; then
    note "FAIL precgate binary $BIN not found (build it with bench/gpu_build.sh)"
fi

# record MODEL LAYERS -> $WORK/MODEL
record() {
    local model=$1 layers=$2
    step "record $model ($layers layers) on cuda"
    if timeout 150 "$PY" tools/record_hf.py --random-weights --model "$model" --num-layers "$layers" \
            --traces "$TRACES" --limit 3 --with-completion --max-tokens 512 --chunk 192 \
            --outputs eager --device cuda --dtype bfloat16 --out "$WORK/$model" 2>&1; then
        note "ok   record $model: $(ls "$WORK/$model" | wc -l) shard(s)"
        return 0
    fi
    note "FAIL record $model (record_hf.py failed, see above)"
    return 1
}

# sweep MODEL -> $WORK/MODEL.db, prints the table, checks ext:eager
sweep() {
    local model=$1 db="$WORK/$1.db"
    step "precgate run --backend cuda on $model"
    if ! timeout 120 "$BIN" run --capture "$WORK/$model" --db "$db" --backend cuda --no-progress \
            --label "gpu_record_check $model" 2>&1; then
        note "FAIL precgate run on $model"
        return 1
    fi
    local verdict
    verdict=$("$PY" - "$db" "$model" <<'EOF'
import json, sqlite3, sys
db, model = sys.argv[1], sys.argv[2]
con = sqlite3.connect(db)
run_id = con.execute("SELECT MAX(id) FROM runs").fetchone()[0]
rows = con.execute("SELECT layer, variant, backend, rel_l2, max_abs, cos_sim FROM layer_metrics "
                   "WHERE run_id = ? AND head = -1 ORDER BY layer, variant", (run_id,)).fetchall()
print(f"{'layer':>5} {'variant':<10} {'backend':<7} {'rel_l2':>10} {'max_abs':>10} {'cos_sim':>10}",
      file=sys.stderr)
for layer, variant, backend, rel, mx, cos in rows:
    print(f"{layer:>5} {variant:<10} {backend:<7} {rel:>10.3e} {mx:>10.3e} {cos:>10.6f}", file=sys.stderr)
src = {s for (s,) in con.execute("SELECT DISTINCT scale_source FROM quant_stats WHERE run_id = ?", (run_id,))}
worst = {v: max(r for _, vv, _, r, _, _ in rows if vv == v) for v in {r[1] for r in rows}}
ext = worst.get("ext:eager")
ok = ext is not None and ext < 0.05 and all(r[2] == "cuda" for r in rows)
w = ", ".join(f"{v} {worst[v]:.2e}" for v in sorted(worst))
backends = ",".join(sorted({r[2] for r in rows}))
print(f"{'ok  ' if ok else 'FAIL'} sweep {model}: {len(rows)} layer rows on {backends}, worst rel_l2: {w} "
      f"(ext:eager must be < 0.05; scales {','.join(sorted(src))})")
EOF
    ) || verdict="FAIL sweep $model: reading the database failed"
    note "$verdict"
}

if [ "$FAILED" = 0 ]; then
    record gpt-oss 3 && sweep gpt-oss
    record llama 2 && sweep llama
fi

step "python tests (tests/py, CPU backend)"
if PRECGATE_BIN="$BIN" timeout 150 "$PY" -m unittest discover -s tests/py -v 2>&1 | tee "$WORK/unittest.log"; then
    note "ok   tests/py: $(grep -Eo '^Ran [0-9]+ tests?' "$WORK/unittest.log") ($(grep -Eo 'skipped=[0-9]+' "$WORK/unittest.log" || echo 'skipped=0'))"
else
    note "FAIL tests/py (see above)"
fi

if [ -n "${OUT:-}" ] && [ -d "${OUT:-}" ]; then
    cp "$WORK"/*.db "$WORK/unittest.log" "$OUT/" 2>/dev/null || true
fi

echo
echo "=== summary ($(( $(date +%s) - START )) s)"
printf '%s\n' "${SUMMARY[@]}"
[ "$FAILED" = 0 ] && echo "gpu_record_check: PASS" || echo "gpu_record_check: FAIL"
exit "$FAILED"
