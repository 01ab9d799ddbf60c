#!/usr/bin/env bash
# demo.sh: the README's first command: installs what is missing, builds,
# synthesizes a gpt-oss-120b-shaped demo capture and sweeps it through every
# precision mode into ./precgate.db (CPU backend when no GPU), ending in the
# layer x mode report.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo
cmake --build build -j "$(nproc)"
build/precgate synth -o build/demo.safetensors --preset gpt-oss-120b --layers 4 \
  --seqs 2 --seq-len 512 --context 128
build/precgate run --capture build/demo.safetensors --label demo "$@"
