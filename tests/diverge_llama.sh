#!/usr/bin/env bash
# diverge_llama.sh: precgate diverge against two real llama.cpp llama-servers
# of one tiny model, one with an f16 KV cache and one with q4_0: two precision
# modes of a real server. precgate's mean KLD and same-top are checked
# against an independent computation (tests/py/kl_from_llama.py: the same
# positions asked of the same servers, the partition bound computed there),
# a q4_0 KV cache must diverge more than the f16 server's noise floor, and the
# gate must fail a tight kld_mean budget for it and pass an identical pair.
#
#   diverge_llama.sh PRECGATE SOURCE_DIR
#
# The server is built once into SOURCE_DIR/.cache (README: "A real server");
# without it, or without python3, the test is skipped (exit 77), never passed.
set -euo pipefail
PRECGATE=${1:?usage: diverge_llama.sh PRECGATE SOURCE_DIR}
SRC=${2:?usage: diverge_llama.sh PRECGATE SOURCE_DIR}
BIN=${LLAMA_SERVER:-$SRC/.cache/llamacpp/build/bin/llama-server}
MODEL=${LLAMA_MODEL:-$SRC/.cache/tiny.gguf}
[ -x "$BIN" ] || { echo "SKIP: no llama-server at $BIN (build it: README, 'A real server')"; exit 77; }
[ -f "$MODEL" ] || { echo "SKIP: no model at $MODEL (README, 'A real server')"; exit 77; }
command -v python3 >/dev/null || { echo "SKIP: no python3 for the independent check"; exit 77; }
command -v curl >/dev/null || { echo "SKIP: no curl"; exit 77; }

WORK=$(mktemp -d)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$WORK"; }
trap cleanup EXIT

# Two free ports: the kernel's choice, through python3.
read -r P1 P2 < <(python3 -c 'import socket
s=[socket.socket() for _ in range(2)]
[x.bind(("127.0.0.1",0)) for x in s]
print(*[x.getsockname()[1] for x in s])')
start() {  # PORT ARGS...: a llama-server in the background, waiting for /health
  local port=$1; shift
  "$BIN" -m "$MODEL" --host 127.0.0.1 --port "$port" -c 2048 --parallel 2 --alias tiny \
    --no-webui "$@" >"$WORK/server-$port.log" 2>&1 &
  PIDS+=($!)
  for _ in $(seq 1 600); do
    curl -sf -o /dev/null "http://127.0.0.1:$port/health" && return 0
    sleep 0.1
  done
  echo "llama-server on $port did not come up:"; tail -20 "$WORK/server-$port.log"; exit 1
}
start "$P1"
start "$P2" -fa on -ctk q4_0 -ctv q4_0
U1=http://127.0.0.1:$P1
U2=http://127.0.0.1:$P2

# Sequences the f16 server generates itself (greedy), so the given tokens
# are in the top K and dp and the PPL ratio are defined.
python3 "$SRC/tests/py/kl_from_llama.py" sequences "$U1" >"$WORK/seqs.jsonl"

# "same" is the f16 server again under another name: an identical pair.
"$PRECGATE" diverge --endpoint "bf16=$U1" --endpoint "q4kv=$U2" --endpoint "same=$U1" --sequences "$WORK/seqs.jsonl" \
  --db "$WORK/d.db" --no-progress --output "$WORK/out.json" --concurrency 2

python3 "$SRC/tests/py/kl_from_llama.py" check "$U1" "$U2" "$WORK/seqs.jsonl" "$WORK/out.json"

# The gate: a tight kld_mean budget fails q4_0 KV (exit 1) and passes the identical pair.
echo '{"divergence": {"kld_mean": {"q4kv": 0.001, "same": 0.001}}}' >"$WORK/gate.json"
set +e
"$PRECGATE" gate --run 1 --db "$WORK/d.db" --config "$WORK/gate.json" >"$WORK/gate.out" 2>&1
rc=$?
set -e
cat "$WORK/gate.out"
[ "$rc" = 1 ] || { echo "FAIL: gate exit $rc, want 1 (q4_0 KV over a 0.001 budget)"; exit 1; }
grep -q "^REGRESSION divergence q4kv against bf16" "$WORK/gate.out" ||
  { echo "FAIL: no q4kv regression"; exit 1; }
grep -q "^pass       divergence same against bf16" "$WORK/gate.out" ||
  { echo "FAIL: the identical pair did not pass"; exit 1; }
echo "diverge_llama: ok"
