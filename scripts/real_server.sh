#!/usr/bin/env bash
# real_server.sh: builds llama.cpp's real llama-server and its tiny model into
# .cache/ (ignored), for the tests that run precgate against a real server
# (tests/diverge_llama.sh). The build script and the model maker are the
# shared peers' (../shared/peers/llama-server: the llama.cpp source ships in
# the npm package node-llama-cpp, so only the npm registry is needed); about
# 17 minutes on 2 cores, once: a second call finds the binary and returns.
set -euo pipefail
cd "$(dirname "$0")/.."
peer=${LLAMA_PEER_DIR:-../shared/peers/llama-server}
bin=.cache/llamacpp/build/bin/llama-server
model=.cache/tiny.gguf
need=()
for p in git g++ make npm python3-numpy; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${need[@]}"
fi
if [ ! -x "$bin" ]; then
  [ -x "$peer/build.sh" ] || { echo "real_server.sh: no $peer/build.sh" >&2; exit 1; }
  mkdir -p .cache
  "$peer/build.sh" .cache/llamacpp >/dev/null
fi
if [ ! -f "$model" ]; then
  # Peaked next-token distributions (OUT_STD 1.5), seed 5: the model the
  # closing notes measured (make_tiny_model.py's docstring).
  PYTHONPATH=.cache/llamacpp/gguf-py OUT_STD=1.5 /usr/bin/python3 "$peer/make_tiny_model.py" \
    .cache/llamacpp/models/ggml-vocab-phi-3.gguf "$model" 5 >&2
fi
echo "$bin"
