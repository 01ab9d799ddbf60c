# gpu_common.sh: what the bench/gpu*.sh scripts share, sourced by each of
# them (run from the repository root on the GPU machine):
#   $bin  the programs bench/gpu_build.sh gathers (BIN, default .dev/gpu), whose
#         libraries (libcjson) are looked up first;
#   $out  where logs go (OUT, default $out_default, else /tmp/precgate-gpu), created;
#   timed_run SECONDS LOG PROGRAM ARGS...: PROGRAM ARGS under timeout SECONDS,
#         stdout and stderr into LOG; sets rc (its exit status) and wall_ms
#         (the process's wall time in milliseconds).
set -uo pipefail
bin=${BIN:-.dev/gpu}
out=${OUT:-${out_default:-/tmp/precgate-gpu}}
mkdir -p "$out"
export LD_LIBRARY_PATH="$bin:${LD_LIBRARY_PATH:-}"

timed_run() {
  local limit=$1 log=$2 start end
  shift 2
  start=$(date +%s%N)
  timeout "$limit" "$@" > "$log" 2>&1
  rc=$?
  end=$(date +%s%N)
  wall_ms=$(( (end - start) / 1000000 ))
}
