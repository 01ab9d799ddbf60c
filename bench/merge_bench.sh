#!/usr/bin/env bash
# merge_bench.sh: the merge benchmark of bench/RESULTS.md (issue #18): a
# 36-layer capture (precgate synth, gpt-oss-120b preset, 1 sequence of
# SEQ_LEN tokens: small, so that the sweeps are quick), swept as SHARDS
# parts (run --shard I/N, one database each), then `precgate merge` of all
# of them into a fresh database, timed REPS times (best and median kept).
#
# What the databases hold: one part per database; with 36 layers and 100
# parts the greedy gives 36 parts one layer each (199 rows: 3 variants x 65
# layer_metrics rows, 3 quant_stats, 1 layer_shapes) and 64 parts none (a
# complete run with no rows). The merge still opens, checks (quick_check),
# digests and copies every one of the 100 files.
#
# Environment: SHARDS (default 100), SEQ_LEN (default 16), REPS (default 5),
# BUILD (default build: where precgate is), OUT (default a fresh temporary
# folder, removed at the end unless KEEP=1).
set -euo pipefail
cd "$(dirname "$0")/.."
SHARDS=${SHARDS:-100}
SEQ_LEN=${SEQ_LEN:-16}
REPS=${REPS:-5}
BUILD=${BUILD:-build}
bin=$(pwd)/$BUILD/precgate
[ -x "$bin" ] || { echo "merge_bench.sh: $bin missing (cmake --build $BUILD --target precgate)" >&2; exit 1; }
out=${OUT:-$(mktemp -d)}
mkdir -p "$out/shards"
[ "${KEEP:-0}" = 1 ] || trap 'rm -rf "$out"' EXIT

"$bin" synth -o "$out/cap.safetensors" --preset gpt-oss-120b --layers 36 --seqs 1 \
  --seq-len "$SEQ_LEN" >/dev/null
t0=$(date +%s.%N)
for ((i = 0; i < SHARDS; i++)); do
  "$bin" run --capture "$out/cap.safetensors" --db "$out/shards/s$i.db" --shard "$i/$SHARDS" \
    --backend cpu --threads 1 --no-progress >/dev/null 2>&1
done
t1=$(date +%s.%N)
bytes=$(du -cb "$out"/shards/*.db | tail -1 | cut -f1)
nonempty=$(for f in "$out"/shards/*.db; do sqlite3 "$f" 'SELECT count(*) FROM layer_shapes'; done |
           awk '$1 > 0 {n++} END {print n + 0}')
echo "sweep: $SHARDS parts in $(echo "$t1 - $t0" | bc) s (one process each, one after another);" \
     "$nonempty hold layers; $((bytes / 1024)) KiB of shard databases"

times=()
for ((r = 0; r < REPS; r++)); do
  rm -f "$out/merged.db"*
  s0=$(date +%s.%N)
  "$bin" merge --into "$out/merged.db" "$out"/shards/s*.db >"$out/merge.log"
  s1=$(date +%s.%N)
  times+=("$(echo "$s1 - $s0" | bc)")
done
rows=$(sqlite3 "$out/merged.db" 'SELECT count(*) FROM layer_metrics')
echo "merge: $SHARDS databases -> $(tail -1 "$out/merge.log")"
echo "merge: $rows layer_metrics rows; wall over $REPS runs (s): ${times[*]}"
printf '%s\n' "${times[@]}" | sort -n |
  awk '{a[NR] = $1} END {printf "merge: best %.3f s, median %.3f s\n", a[1], a[int((NR + 1) / 2)]}'
# Merging the same set again: every part is found merged, nothing written.
s0=$(date +%s.%N)
"$bin" merge --into "$out/merged.db" "$out"/shards/s*.db >/dev/null
s1=$(date +%s.%N)
echo "merge again (no-op): $(echo "$s1 - $s0" | bc) s"
echo "machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
