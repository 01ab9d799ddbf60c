#!/usr/bin/env bash
# capture_open.sh: times capture_open (validation, NaN/Inf/amax scan and the
# content digest in one pass) on a gpt-oss-120b-shaped capture, warm page
# cache; with BASE_REV=<git rev> also the same program built from that
# revision (before the digest existed: bench/capture_open.c is copied in),
# alternating, for an A/B on the same machine in the same minute.
# usage: [SEQ_LEN=2048] [BASE_REV=rev] bench/capture_open.sh
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD:-build}
seq_len=${SEQ_LEN:-2048}
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" -j "$(nproc)" --target precgate capture_open >/dev/null
cap="$build/bench-gptoss-36x2x$seq_len.safetensors"
[ -f "$cap" ] || "$build/precgate" synth -o "$cap" --preset gpt-oss-120b --layers 36 --seq-len "$seq_len"
echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc) CPUs"
echo "capture: $cap, $(stat -c %s "$cap") bytes"
bins=("$build/capture_open")
if [ -n "${BASE_REV:-}" ]; then
  base=$(mktemp -d /tmp/precgate-base.XXXXXX)
  git archive "$BASE_REV" | tar -x -C "$base"
  cp bench/capture_open.c "$base/bench/"
  grep -q capture_open "$base/CMakeLists.txt" || cat >>"$base/CMakeLists.txt" <<'CM'
add_executable(capture_open bench/capture_open.c)
target_link_libraries(capture_open PRIVATE precgate_core)
CM
  cmake -S "$base" -B "$base/build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPRECGATE_CUDA=OFF \
    -DPRECGATE_TESTS=OFF >/dev/null
  cmake --build "$base/build" -j "$(nproc)" --target capture_open >/dev/null
  bins=("$base/build/capture_open" "$build/capture_open")
fi
for round in 1 2 3; do
  for b in "${bins[@]}"; do
    echo "$b: $("$b" "$cap" "${REPS:-7}" | tail -1)"
  done
done
[ -z "${base:-}" ] || rm -rf "$base"
