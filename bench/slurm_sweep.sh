#!/usr/bin/env bash
# slurm_sweep.sh: the wall time of a 4-shard sweep on a private single-node
# Slurm (tests/slurm_node.sh), from the first sbatch to the merge's
# merge.done, against one process sweeping the same capture; each REPS times,
# alternating. Needs root and slurm-wlm + munge (scripts/deps.sh).
#
#   bench/slurm_sweep.sh [BUILD_DIR [REPS]]     (default build, 3)
#
# Prints one line per measurement and the medians; bench/RESULTS.md has what
# it measured.
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:-$here/build}" && pwd)
reps=${2:-3}
precgate=$build/precgate
shards=4
# Bound on one sharded sweep, seconds.
wait_s=600
# The capture: gpt-oss-120b's shape, 36 layers of one 128-token sequence.
synth_opts=(--preset gpt-oss-120b --layers 36 --seqs 1 --seq-len 128)

. "$here/tests/slurm_node.sh"
if ! why=$(slurm_node_usable); then
  echo "slurm_sweep: cannot run a private Slurm here: $why" >&2
  exit 1
fi
w=$(mktemp -d "${TMPDIR:-/tmp}/pg-slurm-bench.XXXXXX")
trap 'slurm_node_stop; rm -rf "$w"' EXIT

echo "machine: $(nproc) CPUs, $(sed -n 's/^model name[^:]*: //p' /proc/cpuinfo | head -1)"
echo "capture: synth ${synth_opts[*]}"
"$precgate" synth -o "$w/cap.safetensors" "${synth_opts[@]}" >/dev/null
slurm_node_start "$w/slurm"
export TMPDIR=$w/node-tmp
mkdir -p "$TMPDIR"

now() { date +%s.%N; }
since() { echo "$(now) $1" | awk '{printf "%.2f", $1 - $2}'; }

one=() sharded=()
for ((r = 1; r <= reps; r++)); do
  t0=$(now)
  "$precgate" run --capture "$w/cap.safetensors" --backend cpu --no-progress \
    --db "$w/one-$r.db" >/dev/null
  one+=("$(since "$t0")")

  "$precgate" slurm sweep --capture "$w/cap.safetensors" --backend cpu --shards $shards \
    --into "$w/sharded-$r.db" --results "$w/job-$r.results" -o "$w/job-$r.sbatch" >/dev/null
  t0=$(now)
  jid=$(sbatch --parsable "$w/job-$r.sbatch")
  mid=$(sbatch --parsable --dependency=afterok:"$jid" "$w/job-$r.merge.sbatch")
  deadline=$((SECONDS + wait_s))
  done_file=$w/job-$r.results/merge.done
  until [ -e "$done_file" ]; do
    gone=$([ -z "$(squeue -h -j "$jid,$mid" 2>/dev/null)" ] && echo 1 || true)
    if [ $SECONDS -ge $deadline ] || { [ -n "$gone" ] && sleep 0.5 && [ ! -e "$done_file" ]; }; then
      echo "slurm_sweep: job $r did not merge: $(cat "$w/job-$r.results"/*.out)" >&2
      exit 1
    fi
    sleep 0.05
  done
  sharded+=("$(since "$t0")")
  compute=$(sed -n 's/.*compute \([0-9.]*\) s.*/\1/p' "$w/job-$r.results"/shard-*.out | tr '\n' ' ')
  echo "rep $r: one process ${one[-1]} s; $shards shards on Slurm ${sharded[-1]} s" \
       "(shards' compute: $compute s)"
  slurm_node_wait 30 "$jid" "$mid"
done

median() { printf '%s\n' "$@" | sort -g | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }
echo "median of $reps: one process $(median "${one[@]}") s; $shards shards on Slurm" \
     "$(median "${sharded[@]}") s (submit to merge.done)"
