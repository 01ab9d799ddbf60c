#!/usr/bin/env python3
"""fake_vllm.py: a loopback stand-in for one vLLM server, for bench/eval_servers.sh.

Answers GET /health, GET /v1/models (model "m") and POST /v1/chat/completions
with one fixed unstreamed completion ("\\boxed{7}") after a fixed latency. At
most --max-concurrency chat requests are served at once; the others wait in
line (a vLLM at its --max-num-seqs queues the rest). Python 3 stdlib only.

    fake_vllm.py --port P [--latency-ms 200] [--max-concurrency 4]
Prints "ready PORT" on stdout once it listens (PORT 0 picks a free one).
"""
import argparse
import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

REPLY = json.dumps({
    "id": "x", "object": "chat.completion", "model": "m",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "so \\boxed{7}"},
                 "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 5, "completion_tokens": 7},
}).encode()
MODELS = json.dumps({"object": "list", "data": [{"id": "m"}]}).encode()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--latency-ms", type=float, default=200.0)
    ap.add_argument("--max-concurrency", type=int, default=4)
    a = ap.parse_args()
    slots = threading.BoundedSemaphore(a.max_concurrency)

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):  # quiet
            pass

        def reply(self, code, body):
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):
            if self.path == "/health":
                self.reply(200, b"")
            elif self.path == "/v1/models":
                self.reply(200, MODELS)
            else:
                self.reply(404, b'{"detail":"Not Found"}')

        def do_POST(self):
            n = int(self.headers.get("Content-Length", "0"))
            self.rfile.read(n)
            if self.path != "/v1/chat/completions":
                self.reply(404, b'{"detail":"Not Found"}')
                return
            with slots:
                time.sleep(a.latency_ms / 1000.0)
            self.reply(200, REPLY)

    ThreadingHTTPServer.daemon_threads = True
    ThreadingHTTPServer.request_queue_size = 1024
    srv = ThreadingHTTPServer(("127.0.0.1", a.port), Handler)
    print("ready", srv.server_address[1], flush=True)
    srv.serve_forever()


if __name__ == "__main__":
    sys.exit(main())
