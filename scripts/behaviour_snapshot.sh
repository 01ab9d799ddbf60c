#!/usr/bin/env bash
# behaviour_snapshot.sh BINDIR OUTDIR: drives one build's precgate through the
# demo path (synth, a sweep with --attribute over a capture carrying an
# external output, a second sweep, two eval replays, gates, baselines,
# reports, diffs, history, runs, advise) and writes every output and a dump
# of the database into OUTDIR, with what differs between two runs of one
# build (clock times, durations, pids, the build's revision, host) masked.
# Two builds behave the same when `diff -r` of their OUTDIRs is empty: the
# guard for a change that must not change behaviour (issue #17).
set -uo pipefail
bin=$(cd "$1" && pwd); out=$2
mkdir -p "$out"; out=$(cd "$out" && pwd)
# A directory of its own whose last 30-odd characters are fixed: the outputs
# name it shortened to its tail, where a mask cannot see it.
top=$(mktemp -d)
work=$top/precgate-behaviour-snapshot-work
mkdir -p "$work"
trap 'rm -rf "$top"' EXIT
export PRECGATE_THREADS=2 PRECGATE_DB="$work/p.db"
root=$(cd "$(dirname "$0")/.." && pwd)
traces="$root/evals/demo/aime-style-demo.jsonl"
n=0
# step NAME CMD...: runs CMD in $work, keeping its stdout, stderr and status.
step() {
  local name=$1; shift
  n=$((n + 1))
  (cd "$work" && "$@") > "$out/$(printf %02d $n)-$name.out" 2> "$out/$(printf %02d $n)-$name.err"
  echo "exit $?" >> "$out/$(printf %02d $n)-$name.out"
}
mkdir -p "$work/cap"
step synth "$bin/precgate" synth -o "$work/cap/a.safetensors" --preset gpt-oss-120b --layers 2 \
  --seqs 2 --seq-len 256 --context 64
step diag_match "$bin/diag_match" "$work/cap/a.safetensors" 2 kv-scales-twice "$work/cap/b.safetensors"
step run1 "$bin/precgate" run --capture "$work/cap" --backend cpu --attribute --label snap --no-progress
step run2 "$bin/precgate" run --capture "$work/cap/a.safetensors" --backend cpu --seed 7 \
  --variants bf16,fp8kv,fp8kv@vllm-24197,fp8qkv --no-progress
step eval3 "$bin/precgate" eval --traces "$traces" --replay --label snap --output "$work/e3.json" --no-progress
step eval4 "$bin/precgate" eval --traces "$traces" --replay --limit 6 --no-progress
step gate1 "$bin/precgate" gate --run 1 --junit "$work/g1.xml"
step baseline "$bin/precgate" baseline set 1 --name base
step baselines "$bin/precgate" baseline list
step gate2 "$bin/precgate" gate --run 2 --baseline base --junit "$work/g2.xml"
step gate4 "$bin/precgate" gate --run 4 --baseline 3
step report1h "$bin/precgate" report --run 1 -o "$work/r1.html"
step report1m "$bin/precgate" report --run 1 -o "$work/r1.md"
step report2m "$bin/precgate" report --run 2 -o "$work/r2.md" --trend 2
step report3m "$bin/precgate" report --run 3 -o "$work/r3.md"
step report4h "$bin/precgate" report --run 4 -o "$work/r4.html"
step diff12 "$bin/precgate" diff 1 2
step diff12j "$bin/precgate" diff 1 2 --json --metric max_abs
step diffm "$bin/precgate" diff --run 1 --modes fp8qkv@fa3,bf16
step diff34 "$bin/precgate" diff 3 4 --json
step history "$bin/precgate" history --variant fp8kv@fixed
step runs "$bin/precgate" runs
step runsj "$bin/precgate" runs --json --kind sweep
step advise "$bin/precgate" advise --run 1 --variant fp8kv@fixed --budget 0.02 --json
step advise2 "$bin/precgate" advise --run 1 --variant fp8qkv@fa3 --budget 0.05
step bad1 "$bin/precgate" report --run 99 -o "$work/x.md"
step bad2 "$bin/precgate" gate --run 1 --baseline nosuch
step bad3 "$bin/precgate" diff 1 77
for f in e3.json g1.xml g2.xml r1.html r1.md r2.md r3.md r4.html; do cp "$work/$f" "$out/file-$f" 2>/dev/null; done
sqlite3 "$work/p.db" .dump > "$out/db.sql"
# The masks: ISO times, epoch seconds, durations, pids, hosts, the revision,
# the checkout's own path (two checkouts of two builds compare).
host=$(hostname)
rev=$(sqlite3 "$work/p.db" "SELECT git_rev FROM runs WHERE id = 1")
sed -i -E \
  -e 's/[0-9]{4}-[0-9]{2}-[0-9]{2}[T ][0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]+)?(Z|[+-][0-9:]+)?/<time>/g' \
  -e 's/[0-9]+(\.[0-9]+)? ?(s|ms|µs|us)\b/<dur>/g' \
  -e 's/"(pid|duration_s)":(\s*)[0-9.e+-]+/"\1":\2<n>/g' \
  -e "s/$rev/<rev>/g" \
  -e "s/,NULL,[0-9]+,'<time>'\);/,NULL,<pid>,'<time>');/" \
  -e "s#$work#<work>#g" -e "s#$host#<host>#g" -e "s#$root#<root>#g" \
  "$out"/*
echo "snapshot: $out"
