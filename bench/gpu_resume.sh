#!/usr/bin/env bash
# gpu_resume.sh: run --resume and SIGTERM on the GPU path (the same layer loop
# as the CPU's, with the upload ring skipping stored layers), on the GPU
# machine. Build here first (bench/gpu_build.sh), run there from the
# repository root with .dev/gpu carried; logs go to $OUT.
#   A: an uninterrupted --backend cuda sweep of a 36-layer capture;
#   C: a copy of A's database with layers 0, 5-9, 20-25 and 35 deleted,
#      resumed: the ring must skip the stored layers around the gaps;
#   B: a sweep sent SIGTERM once its first layer is stored: exit 143, run
#      interrupted, whole layers only; then resumed.
# B and C are compared with A row by row (bit-equal count, largest rel_l2 gap).
# BACKEND=cpu SEQ_LEN=48 BIN=build runs the same steps on the CPU (a check of
# the script itself).
source "$(dirname "$0")/gpu_common.sh"
backend=${BACKEND:-cuda}
cap=/tmp/resume.safetensors
"$bin/precgate" synth -o "$cap" --preset gpt-oss-120b --layers 36 --seqs 1 \
  --seq-len "${SEQ_LEN:-8192}" --seed 1 | tail -1
rm -f /tmp/resume_a.db* /tmp/resume_b.db* /tmp/resume_c.db*
run() { timeout 60 "$bin/precgate" run --no-progress "$@"; }

run --capture "$cap" --backend "$backend" --db /tmp/resume_a.db > "$out/resume_a.log" 2>&1
echo "A: uninterrupted, exit $?"; tail -1 "$out/resume_a.log"

python3 - <<'PY'
import shutil, sqlite3
src = sqlite3.connect("/tmp/resume_a.db")
dst = sqlite3.connect("/tmp/resume_c.db")
src.backup(dst)
gone = [0, *range(5, 10), *range(20, 26), 35]
q = ",".join(map(str, gone))
dst.execute(f"DELETE FROM layer_metrics WHERE layer IN ({q})")
dst.execute(f"DELETE FROM quant_stats WHERE layer IN ({q})")
dst.execute("UPDATE runs SET status = 'interrupted'")
dst.commit()
print(f"C: deleted layers {gone}")
PY
run --resume 1 --capture "$cap" --db /tmp/resume_c.db > "$out/resume_c.log" 2>&1
echo "C: resume exit $?"; grep -E "resumed|complete" "$out/resume_c.log"

"$bin/precgate" run --no-progress --capture "$cap" --backend "$backend" --db /tmp/resume_b.db \
  > "$out/resume_b.log" 2>&1 &
pid=$!
python3 - <<'PY'
import sqlite3, time
deadline = time.time() + 60
while time.time() < deadline:
    try:
        n = sqlite3.connect("file:/tmp/resume_b.db?mode=ro", uri=True).execute(
            "SELECT count(DISTINCT layer) FROM layer_metrics").fetchone()[0]
        if n > 0:
            break
    except sqlite3.Error:
        pass
    time.sleep(0.001)
PY
kill -TERM "$pid"
wait "$pid"
echo "B: SIGTERM after the first stored layer: exit $? (want 143)"; tail -3 "$out/resume_b.log"
python3 - <<'PY'
import sqlite3
db = sqlite3.connect("/tmp/resume_b.db")
print("B:", db.execute("SELECT status, error FROM runs WHERE id = 1").fetchone())
rows = db.execute("SELECT layer, count(*) FROM layer_metrics GROUP BY layer").fetchall()
print("B: stored layers", [l for l, _ in rows], "rows per layer", sorted({n for _, n in rows}))
PY
run --resume 1 --capture "$cap" --db /tmp/resume_b.db > "$out/resume_b2.log" 2>&1
echo "B: resume exit $?"; grep -E "resumed|complete" "$out/resume_b2.log"

python3 - <<'PY'
import sqlite3
for name in ("b", "c"):
    db = sqlite3.connect("/tmp/resume_a.db")
    db.execute(f"ATTACH '/tmp/resume_{name}.db' AS o")
    cols = "rel_l2, max_abs, mean_abs, p99_abs, cos_sim, sqnr_db, nan_count, inf_count"
    na = db.execute("SELECT count(*) FROM layer_metrics").fetchone()[0]
    nb = db.execute("SELECT count(*) FROM o.layer_metrics").fetchone()[0]
    eq = db.execute(
        "SELECT count(*) FROM layer_metrics x JOIN o.layer_metrics y USING (capture, layer, head,"
        " variant, backend) WHERE " + " AND ".join(f"x.{c} IS y.{c}" for c in cols.split(", "))
    ).fetchone()[0]
    gap = db.execute(
        "SELECT max(abs(x.rel_l2 - y.rel_l2) / x.rel_l2) FROM layer_metrics x JOIN o.layer_metrics y"
        " USING (capture, layer, head, variant, backend)").fetchone()[0]
    print(f"{name.upper()} against A: {nb} rows against {na}, {eq} bit-equal, "
          f"largest relative rel_l2 gap {gap}")
PY
