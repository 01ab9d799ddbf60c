#!/usr/bin/env bash
# gpu_build.sh: builds the GPU programs here for the GPU machine (x86-64-v3 so
# the binary runs on its CPU; CUDA sm_90a) and gathers them with the shared
# libraries that machine lacks (libcjson) into .dev/gpu for bench/gpu.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DPRECGATE_MARCH=x86-64-v3 \
  -DPRECGATE_TESTS=OFF >/dev/null
cmake --build build-gpu -j "$(nproc)" --target precgate gpu_check gpu_kernels gpu_fp64_peak wgmma_fp8_accum diag_match rht_signs >/dev/null
mkdir -p .dev/gpu
cp build-gpu/precgate build-gpu/gpu_check build-gpu/gpu_kernels build-gpu/gpu_fp64_peak build-gpu/wgmma_fp8_accum build-gpu/diag_match build-gpu/rht_signs .dev/gpu/
cp -L "$(ldconfig -p | awk '/libcjson.so.1 /{print $NF; exit}')" .dev/gpu/libcjson.so.1
rm -f .dev/gpu/libyajl.so.2  # no longer linked: evals/json_stream replaced yajl
ls -la .dev/gpu
