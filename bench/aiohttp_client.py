#!/usr/bin/env python3
"""aiohttp_client.py: the comparison client of bench/eval_store_bench.sh.

A simple asyncio eval runner in the lm-eval style: one aiohttp session,
N requests in flight, every reply read as the server streams it (SSE,
the same request body precgate sends), graded, and stored as one row in
SQLite with one INSERT and one commit per reply on the event loop. The
database gets the pragmas precgate's store uses (WAL, synchronous=NORMAL),
so both pay the same durability.

usage: aiohttp_client.py --traces FILE --url http://127.0.0.1:PORT --db PATH
                         [--concurrency 256] [--samples 1] [--model NAME]
Prints one line: requests, wall seconds, requests per second.
Needs Debian's python3-aiohttp (apt-get install -y python3-aiohttp).
"""
import argparse
import asyncio
import json
import re
import sqlite3
import sys
import time

try:
    import aiohttp
except ImportError:
    sys.exit("aiohttp_client.py: needs the aiohttp package (apt-get install -y python3-aiohttp)")

# The one user message of gpt-oss evals' AIME_TEMPLATE, as precgate sends it.
PROMPT_TAIL = "\nPlease reason step by step, and put your final answer within \\boxed{}.\n"
BOXED = re.compile(r"\\boxed\{([^{}]*)\}")


def body(model, problem, seed):
    return json.dumps({
        "model": model,
        "messages": [{"role": "user", "content": "\n" + problem + PROMPT_TAIL}],
        "temperature": 1.0,
        "seed": seed,
        "reasoning_effort": "medium",
        "stream": True,
        "stream_options": {"include_usage": True},
    })


async def one(session, url, item, db):
    pid, sample, answer, payload = item
    t0 = time.monotonic()
    content, finish, usage = [], None, {}
    async with session.post(url, data=payload,
                            headers={"Content-Type": "application/json"}) as resp:
        status = resp.status
        async for raw in resp.content:
            line = raw.strip()
            if not line.startswith(b"data:"):
                continue
            data = line[5:].strip()
            if data == b"[DONE]":
                break
            ev = json.loads(data)
            for ch in ev.get("choices") or []:
                piece = (ch.get("delta") or {}).get("content")
                if piece:
                    content.append(piece)
                finish = ch.get("finish_reason") or finish
            usage = ev.get("usage") or usage
    text = "".join(content)
    m = BOXED.findall(text)
    extracted = int(m[-1]) if m and m[-1].strip().isdigit() else None
    db.execute(
        "INSERT INTO eval_samples (problem_id, sample, status, latency_ms, finish_reason,"
        " prompt_tokens, completion_tokens, content, extracted, correct)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (pid, sample, "ok" if status == 200 else "error", (time.monotonic() - t0) * 1e3,
         finish, usage.get("prompt_tokens"), usage.get("completion_tokens"), text, extracted,
         int(extracted is not None and extracted == answer)))
    db.commit()


async def worker(session, url, queue, db):
    while True:
        try:
            item = queue.get_nowait()
        except asyncio.QueueEmpty:
            return
        await one(session, url, item, db)


async def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--traces", required=True)
    ap.add_argument("--url", required=True)
    ap.add_argument("--db", required=True)
    ap.add_argument("--concurrency", type=int, default=256)
    ap.add_argument("--samples", type=int, default=1)
    ap.add_argument("--model", default="stub")
    a = ap.parse_args()

    db = sqlite3.connect(a.db)
    db.execute("PRAGMA journal_mode = WAL")
    db.execute("PRAGMA synchronous = NORMAL")
    db.execute("CREATE TABLE IF NOT EXISTS eval_samples (problem_id TEXT NOT NULL,"
               " sample INTEGER NOT NULL, status TEXT NOT NULL, latency_ms REAL,"
               " finish_reason TEXT, prompt_tokens INTEGER, completion_tokens INTEGER,"
               " content TEXT, extracted INTEGER, correct INTEGER,"
               " PRIMARY KEY (problem_id, sample))")
    db.commit()
    queue = asyncio.Queue()
    with open(a.traces, encoding="utf-8") as f:
        for n, line in enumerate(f):
            p = json.loads(line)
            answer = int(p["answer"])
            for k in range(a.samples):
                queue.put_nowait((p["id"], k, answer, body(a.model, p["problem"], n * a.samples + k)))
    total = queue.qsize()
    url = a.url.rstrip("/") + "/v1/chat/completions"
    conn = aiohttp.TCPConnector(limit=a.concurrency)
    t0 = time.monotonic()
    async with aiohttp.ClientSession(connector=conn) as session:
        await asyncio.gather(*(worker(session, url, queue, db) for _ in range(a.concurrency)))
    wall = time.monotonic() - t0
    stored = db.execute("SELECT count(*) FROM eval_samples").fetchone()[0]
    db.close()
    print(f"aiohttp: {total} requests, {stored} rows, {wall:.3f} s, {total / wall:.0f} req/s")
    if stored != total:
        sys.exit(f"aiohttp_client.py: stored {stored} rows of {total}")


if __name__ == "__main__":
    asyncio.run(main())
