#!/usr/bin/env bash
# gpu_scales.sh: the fp8 scale policies (run --scales) on the GPU machine. For
# each policy, the same small gpt-oss-shaped capture (with scale metadata, so
# `capture` applies) is swept with --backend cuda --check-spec and with
# --backend cpu; the chosen scales (quant_stats) must be bit-identical, each
# mode's rel_l2 close, and the GPU kernels close to the CPU specification at
# the new scale ranges (~spec rows; unit puts small values in e4m3's
# subnormals). Build here first (bench/gpu_build.sh), run there from the
# repository root with .dev/gpu carried.
source "$(dirname "$0")/gpu_common.sh"
cap=/tmp/scales.safetensors
"$bin/precgate" synth -o "$cap" --preset gpt-oss-120b --layers 2 --seqs 2 --seq-len 512 \
  --context 128 --scales --seed 3 | tail -1
for p in capture amax vllm-dynamic unit; do
  rm -f /tmp/sc_g_$p.db* /tmp/sc_c_$p.db*
  "$bin/precgate" run --no-progress --capture "$cap" --backend cuda --check-spec --scales "$p" \
    --db /tmp/sc_g_$p.db > /tmp/sc_g_$p.log 2>&1; g=$?
  "$bin/precgate" run --no-progress --capture "$cap" --backend cpu --scales "$p" \
    --db /tmp/sc_c_$p.db > /tmp/sc_c_$p.log 2>&1; c=$?
  echo "== --scales $p: cuda exit $g, cpu exit $c"
  [ $g = 0 ] || tail -3 /tmp/sc_g_$p.log
  [ $c = 0 ] || tail -3 /tmp/sc_c_$p.log
  python3 - "$p" <<'PY'
import sqlite3, sys
p = sys.argv[1]
g = sqlite3.connect(f"/tmp/sc_g_{p}.db")
g.execute(f"ATTACH '/tmp/sc_c_{p}.db' AS c")
n, same = g.execute("SELECT count(*), sum(x.scale IS y.scale AND x.scale_source IS y.scale_source)"
                    " FROM quant_stats x JOIN c.quant_stats y USING (capture, layer, tensor)").fetchone()
src = g.execute("SELECT DISTINCT scale_source FROM quant_stats").fetchall()
print(f"  quant_stats: {same} of {n} scales bit-identical GPU vs CPU; scale_source {src}")
for v, gap, rg, rc in g.execute(
        "SELECT x.variant, max(abs(x.rel_l2 - y.rel_l2) / y.rel_l2), max(x.rel_l2), max(y.rel_l2)"
        " FROM layer_metrics x JOIN c.layer_metrics y USING (capture, layer, head, variant)"
        " WHERE x.head = -1 GROUP BY x.variant"):
    print(f"  {v:8s} rel_l2 gpu max {rg:.4e}, cpu max {rc:.4e}, largest relative gap {gap:.3e}")
for v, r in g.execute("SELECT variant, max(rel_l2) FROM layer_metrics WHERE head = -1 AND"
                      " variant LIKE '%~spec' GROUP BY variant"):
    print(f"  {v:12s} max rel_l2 against the CPU specification {r:.4e}")
PY
done
