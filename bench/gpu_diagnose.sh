#!/usr/bin/env bash
# gpu_diagnose.sh: issue #16 on the GPU machine, in one call: a sweep on the
# cuda backend of a capture carrying an external output with a seeded scale
# bug (kv-scales-twice, written by bench/diag_match), with --attribute; the
# diagnosis and the attribution run on the CPU specification beside the GPU.
# Then the gate (exit 1 expected: scale_bug), JUnit and the report, and the
# same sweep on the CPU backend for the rows to agree. Build here first with
# bench/gpu_build.sh; run there from the repository root with .dev carried.
source "$(dirname "$0")/gpu_common.sh"
export PRECGATE_THREADS=${PRECGATE_THREADS:-$(nproc)}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
work=$(mktemp -d)
mkdir -p "$work/cap"
"$bin/precgate" synth -o "$work/cap/a.safetensors" --preset gpt-oss-120b --layers ${LAYERS:-4} \
  --seqs 2 --seq-len 512 --context 128 | tail -1
"$bin/diag_match" "$work/cap/a.safetensors" "$PRECGATE_THREADS" kv-scales-twice \
  "$work/cap/b.safetensors" > "$out/diag_match.log" 2>&1
echo "diag_match exit $?"; tail -6 "$out/diag_match.log"
for be in ${BACKENDS:-cuda cpu}; do
  echo "== run --backend $be --attribute (capture + ext:kv-scales-twice)"
  /usr/bin/time -f "wall %e s" "$bin/precgate" run --capture "$work/cap" --backend $be --attribute \
    --db "$work/$be.db" --no-progress > "$out/run_$be.log" 2>&1
  echo "run exit $?"; grep -E "SCALE BUG|matches|attribut|complete|wall|precgate:" "$out/run_$be.log" | head -12
done
echo "== gate on the GPU run (expect exit 1, a scale_bug flag)"
"$bin/precgate" gate --run 1 --db "$work/${GATE_BACKEND:-cuda}.db" --junit "$out/gate.xml" > "$out/gate.log" 2>&1
echo "gate exit $?"; grep -iE "scale_bug|scale bug" "$out/gate.log" | head -4
grep -c "<failure" "$out/gate.xml"
"$bin/precgate" report --run 1 --db "$work/${GATE_BACKEND:-cuda}.db" -o "$out/report.md" > /dev/null 2>&1
echo "report exit $?"; head -12 "$out/report.md"
[ -f "$work/cuda.db" ] && python3 - "$work/cuda.db" "$work/cpu.db" <<'PY'
import sqlite3, sys
g, c = (sqlite3.connect(p) for p in sys.argv[1:3])
q = "SELECT layer, ext_name, hypothesis, rel_l2 FROM ext_diagnosis ORDER BY 1, 2, 3"
a, b = g.execute(q).fetchall(), c.execute(q).fetchall()
print("ext_diagnosis rows", len(a), len(b), "identical" if a == b else "DIFFER")
q = "SELECT layer, variant, tensor, rel_l2 FROM attribution ORDER BY 1, 2, 3"
a, b = g.execute(q).fetchall(), c.execute(q).fetchall()
print("attribution rows", len(a), len(b), "identical" if a == b else "DIFFER")
for r in a[:12]: print(r)
PY
rm -rf "$work"
