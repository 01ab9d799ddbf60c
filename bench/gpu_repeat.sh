#!/usr/bin/env bash
# gpu_repeat.sh: two uninterrupted GPU sweeps of the same capture, compared row
# by row: is the GPU path bit-reproducible from run to run (independent of
# --resume)? Build here first (bench/gpu_build.sh), run there from the
# repository root with .dev/gpu carried.
source "$(dirname "$0")/gpu_common.sh"
cap=/tmp/rep.safetensors
"$bin/precgate" synth -o "$cap" --preset gpt-oss-120b --layers 36 --seqs 1 --seq-len 8192 --seed 1 | tail -1
for i in 1 2; do
  rm -f /tmp/rep$i.db*
  "$bin/precgate" run --no-progress --capture "$cap" --backend cuda --db /tmp/rep$i.db | tail -1
done
python3 - <<'PY'
import sqlite3
db = sqlite3.connect("/tmp/rep1.db")
db.execute("ATTACH '/tmp/rep2.db' AS o")
cols = "rel_l2, max_abs, mean_abs, p99_abs, cos_sim, sqnr_db, nan_count, inf_count"
n = db.execute("SELECT count(*) FROM layer_metrics").fetchone()[0]
eq = db.execute("SELECT count(*) FROM layer_metrics x JOIN o.layer_metrics y USING (capture, layer, head,"
                " variant, backend) WHERE " + " AND ".join(f"x.{c} IS y.{c}" for c in cols.split(", "))).fetchone()[0]
gap = db.execute("SELECT max(abs(x.rel_l2 - y.rel_l2) / x.rel_l2) FROM layer_metrics x JOIN o.layer_metrics y"
                 " USING (capture, layer, head, variant, backend)").fetchone()[0]
per = db.execute("SELECT x.variant, sum(x.rel_l2 IS y.rel_l2), count(*) FROM layer_metrics x JOIN o.layer_metrics y"
                 " USING (capture, layer, head, variant, backend) GROUP BY x.variant").fetchall()
print(f"run 2 against run 1: {n} rows, {eq} bit-equal in every metric, largest relative rel_l2 gap {gap}")
print("rel_l2 bit-equal per variant:", per)
PY
