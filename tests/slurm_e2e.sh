#!/usr/bin/env bash
# slurm_e2e.sh: `precgate slurm`'s scripts on a real single-node Slurm (issue
# #18). Starts its own munged, slurmctld and slurmd (tests/slurm_node.sh),
# then:
#   1. writes the scripts with `precgate slurm` (a sweep and an eval);
#   2. submits a 4-shard sweep of a synthetic capture and a 3-shard eval
#      against two loopback OpenAI-compatible servers, each with its merge
#      job after it (--dependency=afterok);
#   3. waits for them (squeue, bounded: a job left queued fails the test);
#   4. checks each merged run equals an unsharded run of the same options,
#      row for row in every table (run ids, times, hosts, pids, config and
#      latencies aside), that a second merge is a no-op and that the merged
#      job's array submitted again fails (a new run needs new scripts);
#   5. submits the sweep again, cancels one running shard (scancel), checks
#      that the merge was cancelled (kill_invalid_depend) and left no
#      marker or partial database, runs the resubmission script and checks
#      the merge comes out whole.
# Exit 77 (CTest: skipped, never passed) where it cannot run: not root, or
# slurm-wlm / munge not installed (scripts/deps.sh installs them).
#
#   tests/slurm_e2e.sh PRECGATE FAKE_OPENAI_SERVE
set -euo pipefail

PRECGATE=$1
SERVE=$2
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/slurm_node.sh
. "$here/slurm_node.sh"

# Seconds any one wait for the scheduler may take before the test fails.
WAIT_S=60
SKIP=77

if ! why=$(slurm_node_usable); then
  echo "SKIPPED: slurm_e2e needs a private Slurm: $why"
  exit $SKIP
fi

w=$(mktemp -d "${TMPDIR:-/tmp}/pg-slurm-e2e.XXXXXX")
servers=()
cleanup() {
  local rc=$?
  slurm_node_stop
  local pid
  for pid in "${servers[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${servers[@]}"; do wait "$pid" 2>/dev/null || true; done
  if [ $rc -eq 0 ] && [ -z "${KEEP:-}" ]; then rm -rf "$w"; else echo "slurm_e2e: files kept in $w" >&2; fi
}
trap cleanup EXIT
trap 'exit 143' TERM
trap 'exit 130' INT

fail() {
  echo "slurm_e2e: FAIL: $*" >&2
  exit 1
}
step() { echo "slurm_e2e: [$SECONDS s] $*"; }

step "starting munged, slurmctld, slurmd in $w/slurm"
slurm_node_start "$w/slurm" || fail "Slurm did not start (logs: $w/slurm/log)"
# The jobs' node-local disk: every shard database must be gone from it.
mkdir -p "$w/node-tmp"
export TMPDIR=$w/node-tmp

# Inputs: a small synthetic capture (a path with a space), 6 problems.
mkdir -p "$w/in put"
"$PRECGATE" synth -o "$w/in put/cap.safetensors" --preset gpt-oss-120b --layers 8 --seqs 1 \
  --seq-len 64 >/dev/null
: >"$w/t.jsonl"
for p in "a 7" "b 7" "c 3" "d 7" "e 5" "f 3"; do
  set -- $p
  printf '{"id":"%s","problem":"What is %s?","answer":%s}\n' "$1" "$2" "$2" >>"$w/t.jsonl"
done
# Two loopback servers: bf16 answers 7, fp8kv answers 3.
"$SERVE" 7 "$w/port16" & servers+=($!)
"$SERVE" 3 "$w/port8" & servers+=($!)
for ((i = 0; i < 100; i++)); do [ -s "$w/port16" ] && [ -s "$w/port8" ] && break; sleep 0.05; done
[ -s "$w/port16" ] && [ -s "$w/port8" ] || fail "the loopback servers did not start"
u16=http://127.0.0.1:$(cat "$w/port16")
u8=http://127.0.0.1:$(cat "$w/port8")

sweep_opts=(--capture "$w/in put/cap.safetensors" --variants bf16,fp8kv,fp8qkv --backend cpu
            --label e2e)
eval_opts=(--traces "$w/t.jsonl" --endpoint "bf16=$u16" --endpoint "fp8kv=$u8" --samples 2
           --concurrency 4 --ready-timeout 10 --label e2e)

# --- 1. the scripts ---
step "writing the scripts"
mkdir -p "$w/jobs"
"$PRECGATE" slurm sweep "${sweep_opts[@]}" --shards 4 --time 5 --into "$w/sweep.db" \
  -o "$w/jobs/sweep.sbatch" >"$w/sweep.hint"
grep -q -- "--dependency=afterok:\$jid" "$w/sweep.hint" || fail "no submit line: $(cat "$w/sweep.hint")"
"$PRECGATE" slurm eval "${eval_opts[@]}" --shards 3 --partition debug --into "$w/eval.db" \
  -o "$w/jobs/eval.sbatch" >"$w/eval.hint"
grep -q '^#SBATCH --array=0-3$' "$w/jobs/sweep.sbatch" || fail "sweep: not an array of 4"
grep -q '^#SBATCH --partition=debug$' "$w/jobs/eval.sbatch" || fail "eval: no partition line"
grep -q '^#SBATCH --array=0-2$' "$w/jobs/eval.sbatch" || fail "eval: not an array of 3"

# The results directory of jobs/$1.sbatch: by default JOB.results/KEY.
rd() { echo "$w/jobs/$1.results/$(sed -n 's/^job=//p' "$w/jobs/$1.sbatch")"; }
[ -d "$(rd sweep)" ] && [ -d "$(rd eval)" ] || fail "no per-job results directories: $(ls -R "$w/jobs")"

# Submits an array script and its merge the way the printed hint says;
# sets aj and mj.
submit() {
  aj=$(sbatch --parsable "$1.sbatch")
  mj=$(sbatch --parsable --dependency=afterok:"$aj" "$1.merge.sbatch")
}

# --- 2. submit ---
step "submitting the 4-shard sweep and the 3-shard eval, each with its merge"
submit "$w/jobs/sweep"
sweep_aj=$aj sweep_mj=$mj
submit "$w/jobs/eval"
eval_aj=$aj eval_mj=$mj

# The same work in one process each, for the comparison (meanwhile).
"$PRECGATE" run "${sweep_opts[@]}" --no-progress --db "$w/sweep-whole.db" >"$w/sweep-whole.out"
"$PRECGATE" eval "${eval_opts[@]}" --no-progress --db "$w/eval-whole.db" >"$w/eval-whole.out"

# --- 3. wait ---
step "waiting for the arrays and merges"
slurm_node_wait $WAIT_S "$sweep_aj" "$sweep_mj" "$eval_aj" "$eval_mj" || fail "jobs still queued"
for j in "$sweep_mj" "$eval_mj"; do
  st=$(slurm_job_state "$j")
  [ "$st" = COMPLETED ] || fail "merge job $j is $st: $(cat "$w"/jobs/*.results/*/merge.*.out 2>/dev/null)"
done
for r in sweep eval; do
  [ -e "$(rd $r)/merge.done" ] || fail "$r: no merge.done"
  [ ! -e "$w/$r.db.merge.lock" ] || fail "$r: $r.db.merge.lock left behind"
done
# Each shard wrote its database on node-local disk ($TMPDIR), and removed it.
for i in 0 1 2 3; do
  grep -q "complete: $w/node-tmp/precgate-" "$(rd sweep)/shard-$i".*.out ||
    fail "shard $i did not write its database under \$TMPDIR: $(cat "$(rd sweep)/shard-$i".*.out)"
done
[ -z "$(ls -A "$w/node-tmp")" ] || fail "shard databases left on node-local disk: $(ls -A "$w/node-tmp")"

# --- 4. compare, row for row ---
# Every row of every table of $1, without what differs between two runs of
# the same work (ids, times, hosts, pids, config, latencies), sorted, each
# value as quote() writes it (a REAL to the last bit); not
# merged_shards, the merge's own record of the parts it took.
rows() {
  local db=$1 t cols
  for t in $(sqlite3 "$db" "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' AND name <> 'merged_shards' ORDER BY name"); do
    cols=$(sqlite3 "$db" "SELECT group_concat('quote(\"' || name || '\")', ', ') FROM pragma_table_info('$t') WHERE name NOT IN ('id', 'run_id', 'baseline_run_id', 'started_at', 'finished_at', 'heartbeat_at', 'set_at', 'host', 'pid', 'config_json', 'latency_ms', 'git_rev')")
    echo "== $t"
    sqlite3 "$db" "SELECT $cols FROM \"$t\" ORDER BY $cols"
  done
}
same_rows() {
  rows "$1" >"$1.rows"
  rows "$2" >"$2.rows"
  diff -u "$2.rows" "$1.rows" >"$1.diff" || fail "$1 differs from the unsharded $2: $(head -40 "$1.diff")"
  local n
  n=$(grep -cv '^==' "$1.rows")
  step "$(basename "$1"): $n rows, equal to the unsharded run's"
}
[ "$(sqlite3 "$w/sweep.db" "SELECT count(*) FROM runs")" = 1 ] || fail "sweep.db: not one run"
[ "$(sqlite3 "$w/sweep.db" "SELECT count(*) FROM layer_metrics")" -gt 0 ] || fail "sweep.db: no rows"
[ "$(sqlite3 "$w/sweep.db" "SELECT count(*) FROM merged_shards")" = 4 ] || fail "sweep.db: not 4 parts merged"
[ "$(sqlite3 "$w/eval.db" "SELECT count(*) FROM eval_samples")" = 24 ] || fail "eval.db: not 6 x 2 x 2 samples"
same_rows "$w/sweep.db" "$w/sweep-whole.db"
same_rows "$w/eval.db" "$w/eval-whole.db"

# A second merge is a no-op that says so.
again=$(sbatch --parsable "$w/jobs/sweep.merge.sbatch")
slurm_node_wait $WAIT_S "$again" || fail "second merge still queued"
# (the script's own guard, before precgate merge, which would be a no-op too)
grep -q "^precgate slurm: job .* is already merged into .*; nothing to do$" \
  "$(rd sweep)/merge.$again.out" ||
  fail "second merge did not stop at merge.done: $(cat "$(rd sweep)/merge.$again.out")"
rows "$w/sweep.db" | cmp -s - "$w/sweep.db.rows" || fail "a second merge changed sweep.db"
# The merged job's array submitted again fails loudly (a new run needs new
# scripts) instead of leaving results no merge would take.
again=$(sbatch --parsable --array=0 "$w/jobs/sweep.sbatch")
slurm_node_wait $WAIT_S "$again" || fail "the re-submitted array still queued"
[ "$(slurm_job_state "${again}_0")" = FAILED ] || fail "a merged job's array ran: $(slurm_job_state "${again}_0")"
grep -q "is already merged into $w/sweep.db; a new run needs new scripts: precgate slurm sweep" \
  "$(rd sweep)/shard-0.$again.out" || fail "re-submitted array: $(cat "$(rd sweep)/shard-0.$again.out")"

# --- 5. a shard cancelled once, then resubmitted ---
step "cancelling one shard of a new sweep submission"
# Shard 1 of this submission waits while $w/hold exists (at most WAIT_S).
cat >"$w/hold-precgate" <<EOF
#!/bin/bash
for a in "\$@"; do
  if [ "\$a" = 1/4 ]; then
    for ((i = 0; i < $WAIT_S * 10; i++)); do [ -e '$w/hold' ] || break; sleep 0.1; done
  fi
done
exec '$PRECGATE' "\$@"
EOF
chmod +x "$w/hold-precgate"
touch "$w/hold"
"$PRECGATE" slurm sweep "${sweep_opts[@]}" --shards 4 --into "$w/sweep2.db" \
  --precgate "$w/hold-precgate" -o "$w/jobs/sweep2.sbatch" >/dev/null
submit "$w/jobs/sweep2"
r2=$(rd sweep2)
deadline=$((SECONDS + WAIT_S))
until [ -e "$r2/shard-0.done" ] && [ -e "$r2/shard-2.done" ] && [ -e "$r2/shard-3.done" ] &&
      [ "$(squeue -h -j "${aj}_1" -o %T 2>/dev/null)" = RUNNING ]; do
  [ $SECONDS -lt $deadline ] || fail "shards 0, 2, 3 did not finish with 1 running"
  sleep 0.1
done
scancel "${aj}_1"
slurm_node_wait $WAIT_S "$aj" "$mj" || fail "the cancelled job's merge still queued"
[ "$(slurm_job_state "${aj}_1")" = CANCELLED ] || fail "shard 1 is $(slurm_job_state "${aj}_1")"
[ "$(slurm_job_state "$mj")" = CANCELLED ] || fail "merge $mj is $(slurm_job_state "$mj"), not cancelled by kill_invalid_depend"
[ ! -e "$r2/shard-1.done" ] && [ ! -e "$r2/shard-1.db" ] || fail "a cancelled shard left a marker or a database"
[ -z "$(ls -A "$r2" | grep -E '\.part|\.tmp')" ] || fail "partial copies left: $(ls -A "$r2")"
[ ! -e "$r2/merge.done" ] && [ ! -e "$w/sweep2.db" ] || fail "merged without shard 1"
[ -z "$(ls -A "$w/node-tmp")" ] || fail "the cancelled shard left its local database: $(ls -A "$w/node-tmp")"

step "resubmitting the missing shard"
rm "$w/hold"
out=$("$w/jobs/sweep2.resubmit.sh")
echo "  $out"
[[ "$out" =~ resubmitted\ shards\ 1\ of\ 4\ .*array\ job\ ([0-9]+),\ and\ merge\ job\ ([0-9]+) ]] ||
  fail "resubmit said: $out"
slurm_node_wait $WAIT_S "${BASH_REMATCH[1]}" "${BASH_REMATCH[2]}" || fail "resubmitted jobs still queued"
[ -e "$r2/merge.done" ] || fail "no merge after the resubmission: $(cat "$r2"/merge.*.out)"
same_rows "$w/sweep2.db" "$w/sweep-whole.db"
out=$("$w/jobs/sweep2.resubmit.sh")
[[ "$out" == *"nothing to resubmit"* ]] || fail "resubmit after the merge said: $out"

step "passed"
