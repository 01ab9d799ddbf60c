/*
 * eval_writer.h: the batched eval_samples writer of a live eval run.
 *
 * The network thread (evals/openai_client.c's oa_run loop) must not wait on
 * SQLite. eval_writer_put() copies a finished sample into a bounded queue
 * and returns; a writer thread stores the queue in batches, each batch one
 * transaction (BEGIN IMMEDIATE .. COMMIT through db/eval_store.h), taken as
 * soon as batch_rows samples wait or the oldest waiting sample is batch_ms
 * old, whichever comes first. WAL checkpoints happen in the commits that
 * cross wal_autocheckpoint (SQLite's default, 1000 pages), so they run on
 * the writer thread too, never on the network thread.
 *
 * Threads: from eval_writer_start() until eval_writer_finish() returns, the
 * writer thread alone uses the store (its connection, its cached
 * statements); the caller must not touch it. The hand-over in both
 * directions goes through pthread_create/pthread_join, so SQLite's
 * "multi-thread" mode would do; precgate keeps the library's default
 * serialized mode (Debian builds SQLITE_THREADSAFE=1), whose uncontended
 * per-call mutex costs next to nothing and keeps a slip from corrupting
 * the connection. A single-threaded SQLite build is refused at start. The
 * writer thread blocks SIGINT and SIGTERM, so a stop signal is delivered to
 * the caller's (network) thread; eval_writer_finish then stores what the
 * writer holds.
 *
 * Memory: the queue holds at most queue_rows samples and queue_bytes of
 * their text (a single larger sample is let in when the queue is empty);
 * a full queue blocks eval_writer_put() until the writer has taken a
 * batch: backpressure on the network thread, not unbounded memory.
 *
 * Durability: a committed batch survives kill -9 (WAL, synchronous=NORMAL).
 * What a kill loses is what was not committed yet: the queue and the batch
 * being written, at most queue_rows + batch_rows samples and, while the
 * disk keeps up, under batch_ms of replies. They are simply absent from
 * eval_samples, so `eval --resume` (eval_store_missing) sends exactly them
 * again.
 *
 * Errors: a batch that fails (disk full, SQLITE_BUSY after the busy
 * timeout, a constraint) is rolled back whole, nothing later is written,
 * and the failure (PG_ERR_DB naming the file and SQLite's message) is
 * returned by the next eval_writer_put() and by eval_writer_finish(), so
 * the run stops with it. Batches committed before it are kept.
 */
#ifndef PG_EVAL_WRITER_H
#define PG_EVAL_WRITER_H

#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "eval_store.h"
#include "store.h"

/* Defaults taken by zero fields of eval_writer_options (issue #14,
 * section 7: batch by count, 256, or by about 100 ms, whichever first). */
#define EVAL_WRITER_BATCH_ROWS 256
#define EVAL_WRITER_BATCH_MS 100.0
/* Four batches of slack for a commit that waits on a checkpoint's fsync. */
#define EVAL_WRITER_QUEUE_ROWS (4 * EVAL_WRITER_BATCH_ROWS)
/* 256 MiB: four 64 MiB replies (openai_client.c's OA_MAX_BODY_BYTES). */
#define EVAL_WRITER_QUEUE_BYTES ((size_t)256 << 20)

/* How the writer batches; zero-initialise, then set what differs. */
typedef struct eval_writer_options {
    size_t batch_rows;    /* commit when this many samples wait */
    double batch_ms;      /* ... or when the oldest waiting sample is this old */
    size_t queue_rows;    /* eval_writer_put blocks while this many wait */
    size_t queue_bytes;   /* ... or while their text would pass this */
} eval_writer_options;

/* What the writer committed. */
typedef struct eval_writer_counts {
    int64_t stored, ok, truncated, errors;   /* samples, by stored status */
    int64_t batches;                         /* transactions committed */
} eval_writer_counts;

typedef struct eval_writer eval_writer;

/* Starts the writer thread for run_id on s (which it owns from now until
 * eval_writer_finish). o NULL means all defaults. PG_ERR_USAGE for a batch
 * larger than the queue or a negative or non-finite batch_ms; PG_ERR_DB for
 * a SQLite built without thread support or a transaction already open on s;
 * PG_ERR_NOMEM when the thread or queue cannot be made. On failure *out is
 * NULL and nothing was started. */
pg_status eval_writer_start(pg_store *s, int64_t run_id, const eval_writer_options *o,
                            eval_writer **out, pg_err *err);

/* Queues a copy of row (its strings are copied: they need only live for
 * the call), blocking while the queue is full. The writer's failure, once
 * it has one, is returned instead (row not queued); PG_ERR_NOMEM when the
 * copy cannot be made. Call from one thread at a time. */
pg_status eval_writer_put(eval_writer *w, const eval_sample_row *row, pg_err *err);

/* Stores everything still queued (also after a stop signal or a network
 * failure: the samples in hand are kept), joins the thread, gives s back to
 * the caller, fills *counts (may be NULL) and frees w. Returns the writer's
 * failure, if any. NULL w is a no-op returning PG_OK. */
pg_status eval_writer_finish(eval_writer *w, eval_writer_counts *counts, pg_err *err);

#endif /* PG_EVAL_WRITER_H */
