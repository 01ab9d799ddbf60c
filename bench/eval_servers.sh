#!/usr/bin/env bash
# eval_servers.sh: eval throughput for ONE mode with 1 server against 3
# servers (issue #18, several servers per mode), for bench/RESULTS.md.
#
# Each server is bench/fake_vllm.py on loopback: a fixed LATENCY_MS per reply
# and at most PER_SERVER chat requests served at once (the rest queue, as in
# a vLLM at its --max-num-seqs). precgate keeps --concurrency PER_SERVER in
# flight per server, so one server serves PER_SERVER / latency requests a
# second and three should serve three times that. The same PROBLEMS x
# SAMPLES samples in both runs; samples/s = samples / wall seconds of the
# whole `precgate eval` (start-up, readiness probes, storing and scoring
# included). REPS runs per point, the best (shortest) kept.
#
# Environment: PROBLEMS (default 40), SAMPLES (default 6), LATENCY_MS
# (default 200), PER_SERVER (default 4), REPS (default 3), BIN (default
# build/precgate).
set -euo pipefail
cd "$(dirname "$0")/.."
PROBLEMS=${PROBLEMS:-40}
SAMPLES=${SAMPLES:-6}
LATENCY_MS=${LATENCY_MS:-200}
PER_SERVER=${PER_SERVER:-4}
REPS=${REPS:-3}
BIN=${BIN:-build/precgate}
[ -x "$BIN" ] || { echo "eval_servers.sh: $BIN missing (cmake --build build --target precgate)" >&2; exit 1; }
work=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT

for ((i = 0; i < PROBLEMS; i++)); do
  printf '{"id":"p%d","problem":"%d+%d?","answer":7}\n' "$i" "$i" "$((7 - i))"
done > "$work/t.jsonl"

urls=()
for k in 0 1 2; do
  python3 bench/fake_vllm.py --latency-ms "$LATENCY_MS" --max-concurrency "$PER_SERVER" \
    > "$work/srv$k.out" &
  pids+=($!)
done
for k in 0 1 2; do
  for _ in $(seq 50); do grep -q ready "$work/srv$k.out" 2>/dev/null && break; sleep 0.1; done
  urls+=("http://127.0.0.1:$(awk '/ready/ {print $2}' "$work/srv$k.out")")
done

n=$((PROBLEMS * SAMPLES))
echo "one mode, $n samples ($PROBLEMS problems x $SAMPLES), ${LATENCY_MS} ms per reply, $PER_SERVER at once per server"
echo "machine: $(nproc) CPUs, $(awk -F': ' '/model name/ {print $2; exit}' /proc/cpuinfo)"
for n_srv in 1 3; do
  eps=""
  for ((k = 0; k < n_srv; k++)); do eps+=" --endpoint bf16=${urls[$k]}"; done
  best=""
  for ((r = 0; r < REPS; r++)); do
    rm -f "$work/e.db"*
    t0=$(date +%s.%N)
    "$BIN" eval --traces "$work/t.jsonl" $eps --samples "$SAMPLES" --concurrency "$PER_SERVER" \
      --db "$work/e.db" --no-progress > "$work/run.out" 2>&1 || { cat "$work/run.out" >&2; exit 1; }
    t1=$(date +%s.%N)
    wall=$(echo "$t1 - $t0" | bc -l)
    if [ -z "$best" ] || [ "$(echo "$wall < $best" | bc -l)" = 1 ]; then best=$wall; fi
  done
  per=$(sqlite3 "$work/e.db" "SELECT group_concat(c, '/') FROM (SELECT count(*) AS c FROM eval_samples GROUP BY server ORDER BY server)")
  printf '%d server(s): best wall %.2f s of %d, %.1f samples/s, samples per server %s\n' \
    "$n_srv" "$best" "$REPS" "$(echo "$n / $best" | bc -l)" "$per"
done
