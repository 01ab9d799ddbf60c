#!/usr/bin/env bash
# gpu_ab.sh: this build (.dev/gpu/*) against an earlier one (.dev/gpu/*_base)
# on the GPU machine, in one call: the full agreement check of this build,
# then the kernel timings and `precgate run` of both, interleaved, and how
# far apart their stored metrics are. Build with bench/gpu_build.sh after
# copying the earlier build's binaries to *_base.
out_default=/tmp/precgate-ab
source "$(dirname "$0")/gpu_common.sh"
export PRECGATE_THREADS=${PRECGATE_THREADS:-$(nproc)}
if [ "${SKIP_CHECK:-0}" != 1 ]; then
  timeout 300 "$bin/gpu_check" ${GPU_CHECK_ARGS:-} > "$out/gpu_check.log" 2>&1
  echo "gpu_check exit $?"; grep -E '^(FAIL|gpu_check)' "$out/gpu_check.log" | head -20
  grep -E "reference" "$out/gpu_check.log" | sort -t' ' -k2 | tail -3
fi
"$bin/precgate" synth -o /tmp/bench.safetensors --preset gpt-oss-120b --layers 36 --seqs 1 \
  --seq-len 8192 --seed 1 | tail -1
for b in "" _base ""; do
  timeout 120 "$bin/gpu_kernels$b" /tmp/bench.safetensors 3 > "$out/kernels$b.log" 2>&1
  echo "gpu_kernels$b: $(grep -E 'reference|sweep' "$out/kernels$b.log" | tr '\n' ' ')"
done
for b in _base "" _base ""; do
  rm -f /tmp/ab$b.db
  timed_run 60 "$out/run$b.log" "$bin/precgate$b" run --capture /tmp/bench.safetensors \
    --backend cuda --db /tmp/ab$b.db --no-progress
  echo "precgate$b run: exit $rc, process wall $wall_ms ms; $(tail -1 "$out/run$b.log")"
done
python3 - <<'PY'
import sqlite3
a = sqlite3.connect("/tmp/ab.db"); b = sqlite3.connect("/tmp/ab_base.db")
q = "SELECT layer, variant, head, rel_l2, max_abs, p99_abs FROM layer_metrics WHERE run_id = 1 ORDER BY layer, variant, head"
ra, rb = a.execute(q).fetchall(), b.execute(q).fetchall()
worst = 0.0
for x, y in zip(ra, rb):
    assert x[:3] == y[:3], (x, y)
    for u, v in zip(x[3:], y[3:]):
        if v: worst = max(worst, abs(u - v) / abs(v))
print(f"metrics of the two builds: {len(ra)} / {len(rb)} rows, largest relative difference {worst:.2e}")
PY
