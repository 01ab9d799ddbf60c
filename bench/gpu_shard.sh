#!/usr/bin/env bash
# gpu_shard.sh: issue #18 on the GPU machine: a 36-layer gpt-oss-shaped
# capture swept on the GPU whole, and as 4 shards (run --shard I/4, one
# after another on the one GPU, as 4 array tasks on 4 nodes would), merged
# (precgate merge) and compared row by row with the whole sweep. GPU sweeps
# are not bit-reproducible run to run (bench/gpu_repeat.sh: relative rel_l2
# gaps up to 6e-16 from the fp64 reference's summation order), so the check
# is: every row present on both sides, and the largest relative gap within
# that run-to-run spread. Build here first (bench/gpu_build.sh), run there
# from the repository root with .dev/gpu carried.
source "$(dirname "$0")/gpu_common.sh"
cap=/tmp/shard.safetensors
rm -f /tmp/shard_*.db* /tmp/shard_merged.db*
"$bin/precgate" synth -o "$cap" --preset gpt-oss-120b --layers 36 --seqs 1 --seq-len 8192 --seed 1 | tail -1
timed_run 120 "$out/shard_full.log" "$bin/precgate" run --no-progress --capture "$cap" --backend cuda \
  --db /tmp/shard_full.db
echo "whole sweep: exit $rc, ${wall_ms} ms"
for i in 0 1 2 3; do
  timed_run 120 "$out/shard_$i.log" "$bin/precgate" run --no-progress --capture "$cap" --backend cuda \
    --shard "$i/4" --db "/tmp/shard_$i.db"
  echo "shard $i/4: exit $rc, ${wall_ms} ms; $(grep -o 'compute [0-9.]* s' "$out/shard_$i.log" | head -1)"
done
timed_run 60 "$out/shard_merge.log" "$bin/precgate" merge --into /tmp/shard_merged.db \
  /tmp/shard_0.db /tmp/shard_1.db /tmp/shard_2.db /tmp/shard_3.db
echo "merge: exit $rc, ${wall_ms} ms: $(tail -1 "$out/shard_merge.log")"
python3 - <<'PY'
import sqlite3
db = sqlite3.connect("/tmp/shard_full.db")
db.execute("ATTACH '/tmp/shard_merged.db' AS m")
full = db.execute("SELECT id FROM runs").fetchone()[0]
merged = db.execute("SELECT id FROM m.runs").fetchone()[0]
cols = ["rel_l2", "max_abs", "mean_abs", "p99_abs", "cos_sim", "sqnr_db", "nan_count", "inf_count"]
key = "capture, layer, head, variant, backend"
n_full = db.execute("SELECT count(*) FROM layer_metrics WHERE run_id = ?", (full,)).fetchone()[0]
n_merged = db.execute("SELECT count(*) FROM m.layer_metrics WHERE run_id = ?", (merged,)).fetchone()[0]
joined = f"FROM layer_metrics x JOIN m.layer_metrics y USING ({key}) WHERE x.run_id = ? AND y.run_id = ?"
n_join = db.execute("SELECT count(*) " + joined, (full, merged)).fetchone()[0]
eq = db.execute("SELECT count(*) " + joined + " AND " + " AND ".join(f"x.{c} IS y.{c}" for c in cols),
                (full, merged)).fetchone()[0]
gap = db.execute("SELECT max(abs(x.rel_l2 - y.rel_l2) / x.rel_l2) " + joined, (full, merged)).fetchone()[0]
print(f"layer_metrics: whole {n_full} rows, merged {n_merged}, joined {n_join}; {eq} bit-equal in every "
      f"metric; largest relative rel_l2 gap {gap}")
for t, k in [("quant_stats", "capture, layer, tensor"), ("layer_shapes", "capture, layer")]:
    a = db.execute(f"SELECT count(*) FROM {t} WHERE run_id = ?", (full,)).fetchone()[0]
    b = db.execute(f"SELECT count(*) FROM m.{t} WHERE run_id = ?", (merged,)).fetchone()[0]
    cols_t = [r[1] for r in db.execute(f"PRAGMA table_info({t})") if r[1] not in ("run_id",)]
    same = db.execute(f"SELECT count(*) FROM {t} x JOIN m.{t} y USING ({k}) WHERE x.run_id = ? AND "
                      f"y.run_id = ? AND " + " AND ".join(f"x.{c} IS y.{c}" for c in cols_t),
                      (full, merged)).fetchone()[0]
    print(f"{t}: whole {a} rows, merged {b}, {same} equal in every column")
PY
