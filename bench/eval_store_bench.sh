#!/usr/bin/env bash
# eval_store_bench.sh: the eval hot-path benchmark of bench/RESULTS.md (issue
# #14, section 7). A stub OpenAI server (nginx, one worker, `return 200` with
# a fixed streamed chat completion) on loopback; `precgate eval` against it
# at several in-flight limits, for this checkout ("after") and for BEFORE_REV
# ("before", built from `git archive` in its own folder); and
# bench/aiohttp_client.py (one INSERT + commit per reply) at 256 in flight.
#
# Per run it prints the wall and CPU seconds (user + sys of the client
# process alone, from /usr/bin/time) of the whole command, and of the same
# command resumed on the finished run (nothing to send: start-up, the
# resume lookup and the scoring); the difference is the send-and-store
# phase. req/s = requests / wall; CPU/req = CPU seconds / requests.
#
# Environment: N (requests, default 50000), REPS (runs per point, best wall
# kept, default 3), CONC (precgate in-flight limits, default "16 64 256"),
# BEFORE_REV (default 3c7d53c; empty: skip), PORT (default: a free one).
# Needs Debian's nginx-light and python3-aiohttp:
#   apt-get install -y nginx-light python3-aiohttp
# The machine's 2 cores are shared by nginx, the client and its writer
# thread: nginx runs one worker to leave the client a core.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
N=${N:-50000}
REPS=${REPS:-3}
CONC=${CONC:-16 64 256}
BEFORE_REV=${BEFORE_REV-3c7d53c}
for tool in nginx /usr/bin/time /usr/bin/python3; do
  command -v "$tool" >/dev/null || { echo "eval_store_bench.sh: $tool missing (apt-get install -y nginx-light python3-aiohttp time)" >&2; exit 1; }
done
/usr/bin/python3 -c 'import aiohttp' 2>/dev/null ||
  { echo "eval_store_bench.sh: python3-aiohttp missing (apt-get install -y python3-aiohttp)" >&2; exit 1; }

# Both precgate builds alike: no CUDA, no tests (the eval path is host code).
build_precgate() {  # src dir, build dir
  cmake -S "$1" -B "$2" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPRECGATE_CUDA=OFF \
        -DPRECGATE_TESTS=OFF >/dev/null
  cmake --build "$2" -j "$(nproc)" --target precgate >/dev/null
}
build_precgate "$root" "$root/build-bench"
bins=("after=$root/build-bench/precgate")
if [ -n "$BEFORE_REV" ]; then
  src="$root/build-bench-before/src"
  if [ ! -x "$root/build-bench-before/build/precgate" ] ||
     [ "$(cat "$root/build-bench-before/rev" 2>/dev/null)" != "$BEFORE_REV" ]; then
    rm -rf "$root/build-bench-before"
    mkdir -p "$src"
    git archive "$BEFORE_REV" | tar -x -C "$src"
    build_precgate "$src" "$root/build-bench-before/build"
    echo "$BEFORE_REV" >"$root/build-bench-before/rev"
  fi
  bins=("before=$root/build-bench-before/build/precgate" "${bins[@]}")
fi

tmp=$(mktemp -d /tmp/precgate-evalbench.XXXXXX)
nginx_pid=
cleanup() {
  if [ -n "$nginx_pid" ]; then kill "$nginx_pid" 2>/dev/null || true; wait "$nginx_pid" 2>/dev/null || true; fi
  rm -rf "$tmp"
}
trap cleanup EXIT
PORT=${PORT:-$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')}
mkdir -p "$tmp/ngx"
# The reply: what a vLLM server streams for a short completion (role and
# content in one delta, then finish_reason and usage, then [DONE]).
cat >"$tmp/ngx/nginx.conf" <<EOF
worker_processes 1;
daemon off;
master_process off;
pid $tmp/ngx/nginx.pid;
error_log $tmp/ngx/error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  keepalive_requests 1000000;
  keepalive_timeout 60s;
  client_body_buffer_size 64k;
  client_body_temp_path $tmp/ngx/body;
  proxy_temp_path $tmp/ngx/proxy;
  fastcgi_temp_path $tmp/ngx/fastcgi;
  uwsgi_temp_path $tmp/ngx/uwsgi;
  scgi_temp_path $tmp/ngx/scgi;
  server {
    listen 127.0.0.1:$PORT backlog=4096;
    location = /health { default_type application/json; return 200 ''; }
    location = /v1/models { default_type application/json; return 200 '{"object":"list","data":[{"id":"stub"}]}'; }
    location = /v1/chat/completions {
      default_type text/event-stream;
      return 200 'data: {"choices":[{"index":0,"delta":{"role":"assistant","content":"so \\\\\\\\boxed{7}"},"finish_reason":null}]}\n\ndata: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":7}}\n\ndata: [DONE]\n\n';
    }
  }
}
EOF
nginx -c "$tmp/ngx/nginx.conf" -p "$tmp/ngx" &
nginx_pid=$!
url="http://127.0.0.1:$PORT"
for _ in $(seq 50); do curl -sf "$url/v1/models" >/dev/null 2>&1 && break; sleep 0.1; done
curl -sf "$url/v1/models" >/dev/null || { echo "eval_store_bench.sh: nginx did not come up on $url" >&2; exit 1; }

/usr/bin/python3 - "$tmp/t.jsonl" "$N" <<'EOF'
import json, sys
with open(sys.argv[1], "w") as f:
    for i in range(int(sys.argv[2])):
        f.write(json.dumps({"id": "p%07d" % i, "problem": "What is %d + 7 - %d?" % (i, i),
                            "answer": 7}) + "\n")
EOF

echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) CPUs; $N requests per run; best wall of $REPS"
echo "nginx $(nginx -v 2>&1 | sed 's/.*\///'), one worker, on $url"

# timed LABEL CMD...: runs CMD under /usr/bin/time; sets t_wall t_cpu.
timed() {
  local out="$tmp/time.txt"
  /usr/bin/time -f "%e %U %S" -o "$out" "$@" >"$tmp/cmd.log" 2>&1 ||
    { echo "failed: $*" >&2; cat "$tmp/cmd.log" >&2; exit 1; }
  read -r t_wall u s <"$out"
  t_cpu=$(echo "$u + $s" | bc -l)
}

printf '%-8s %5s | %8s %9s %10s | %8s %9s %10s\n' client conc "wall s" "req/s" "CPU ms/req" \
  "send s" "send/s" "sendCPU/rq"
for b in "${bins[@]}"; do
  name=${b%%=*}
  bin=${b#*=}
  for c in $CONC; do
    best=
    for _ in $(seq "$REPS"); do
      db="$tmp/e.db"
      rm -f "$db" "$db-wal" "$db-shm"
      timed "$bin" eval --traces "$tmp/t.jsonl" --endpoint "bf16=$url" --concurrency "$c" \
            --db "$db" --no-progress
      grep -q "complete: .*($N samples stored" "$tmp/cmd.log" ||
        { echo "$name: not every sample stored" >&2; cat "$tmp/cmd.log" >&2; exit 1; }
      w=$t_wall cpu=$t_cpu
      timed "$bin" eval --traces "$tmp/t.jsonl" --endpoint "bf16=$url" --concurrency "$c" \
            --db "$db" --no-progress --resume 1
      rw=$t_wall rcpu=$t_cpu
      if [ -z "$best" ] || [ "$(echo "$w < $best" | bc -l)" = 1 ]; then
        best=$w
        line=$(printf '%-8s %5s | %8.3f %9.0f %10.4f | %8.3f %9.0f %10.4f' "$name" "$c" "$w" \
          "$(echo "$N / $w" | bc -l)" "$(echo "1000 * $cpu / $N" | bc -l)" \
          "$(echo "$w - $rw" | bc -l)" "$(echo "$N / ($w - $rw)" | bc -l)" \
          "$(echo "1000 * ($cpu - $rcpu) / $N" | bc -l)")
      fi
    done
    echo "$line"
  done
done

best=
for _ in $(seq "$REPS"); do
  rm -f "$tmp/a.db" "$tmp/a.db-wal" "$tmp/a.db-shm"
  timed /usr/bin/python3 "$root/bench/aiohttp_client.py" --traces "$tmp/t.jsonl" --url "$url" \
        --db "$tmp/a.db" --concurrency 256
  if [ -z "$best" ] || [ "$(echo "$t_wall < $best" | bc -l)" = 1 ]; then
    best=$t_wall
    line=$(printf '%-8s %5s | %8.3f %9.0f %10.4f |' aiohttp 256 "$t_wall" \
      "$(echo "$N / $t_wall" | bc -l)" "$(echo "1000 * $t_cpu / $N" | bc -l)")
  fi
done
echo "$line"
