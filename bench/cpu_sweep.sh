#!/usr/bin/env bash
# cpu_sweep.sh: the CPU benchmark of bench/RESULTS.md: this machine's fp64
# peak, then the CPU specification on a gpt-oss-120b-shaped capture (4 layers
# x 2 sequences x 1,024 tokens: two sliding-window layers, two full), then the
# whole `precgate run` (load, reference, three modes, metrics, SQLite).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD:-build}
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" -j "$(nproc)" >/dev/null
cap="$build/bench-gptoss-4x2x1024.safetensors"
"$build/precgate" synth -o "$cap" --preset gpt-oss-120b --layers 4 --seqs 2 --seq-len 1024 --seed 1
echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc) CPUs"
"$build/fp64_peak"
"$build/cpu_sweep" "$cap" "$(nproc)" "${REPS:-3}"
db=$(mktemp -u /tmp/precgate-bench.XXXXXX.db)
start=$(date +%s%N)
"$build/precgate" run --capture "$cap" --db "$db" --backend cpu --no-progress >/dev/null
end=$(date +%s%N)
echo "precgate run (load, reference, 3 modes, metrics, SQLite): $(( (end - start) / 1000000 )) ms"
rm -f "$db" "$db-wal" "$db-shm"
