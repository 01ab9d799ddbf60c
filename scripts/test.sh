#!/usr/bin/env bash
# test.sh: the README's second command: installs what is missing, builds and
# runs the whole test suite through CTest. SANITIZE=1 builds with ASan/UBSan
# (into build-asan).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
# PRECGATE_REAL_SERVER=1: build the real llama-server first (scripts/real_server.sh),
# so that the real-server tests run instead of being skipped.
if [ "${PRECGATE_REAL_SERVER:-0}" = 1 ]; then scripts/real_server.sh >/dev/null; fi
dir=build
flags=(-DCMAKE_BUILD_TYPE=RelWithDebInfo)
if [ "${SANITIZE:-0}" = 1 ]; then
  dir=build-asan
  flags=(-DCMAKE_BUILD_TYPE=Debug -DSANITIZE=ON)
fi
cmake -S . -B "$dir" "${flags[@]}"
cmake --build "$dir" -j "$(nproc)"
ctest --test-dir "$dir" --output-on-failure -j "$(nproc)"
