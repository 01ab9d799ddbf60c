/* eval_writer.c: batched eval_samples writes on their own thread (see eval_writer.h). */
#include "eval_writer.h"

#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sql_util.h"
#include "base/clock.h"

/* One queued sample: the row, pointing into its own copy of the strings. */
typedef struct owned_row {
    eval_sample_row row;
    double queued_at;   /* monotonic seconds, for the batch_ms deadline */
    size_t text_bytes;  /* what the strings take, counted against queue_bytes */
    char text[];        /* the strings, NUL-terminated, one after another */
} owned_row;

struct eval_writer {
    pg_store *store;
    int64_t run_id;
    eval_writer_options opt;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t has_work;   /* the writer waits: a batch is due or closing */
    pthread_cond_t has_room;   /* eval_writer_put waits: queue full */
    /* Guarded by mu: */
    owned_row **ring;          /* queue_rows slots */
    size_t head, n_queued, queued_bytes;
    int closing;               /* eval_writer_finish was called */
    int failed;                /* the writer stopped on err */
    pg_err err;
    /* The writer thread's alone until it is joined: */
    owned_row **batch;         /* batch_rows slots */
    eval_writer_counts counts;
};

/* The CLOCK_MONOTONIC time t (seconds) as a timespec for pthread_cond_timedwait. */
static struct timespec to_timespec(double t)
{
    struct timespec ts;
    ts.tv_sec = (time_t)t;
    ts.tv_nsec = (long)((t - (double)ts.tv_sec) * 1e9);
    if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
    if (ts.tv_nsec < 0) ts.tv_nsec = 0;
    return ts;
}

/* Bytes a string field takes in an owned_row (0 for NULL). */
static size_t field_bytes(const char *s)
{
    return s != NULL ? strlen(s) + 1 : 0;
}

/* Copies s (NULL stays NULL) to *cursor and advances it. */
static const char *copy_field(char **cursor, const char *s)
{
    if (s == NULL) return NULL;
    const size_t n = strlen(s) + 1;
    char *dst = *cursor;
    memcpy(dst, s, n);
    *cursor += n;
    return dst;
}

/* A malloc'd copy of r with its strings in one block; NULL when out of memory. */
static owned_row *copy_row(const eval_sample_row *r)
{
    const char *const fields[] = {r->eval,          r->mode,    r->effort, r->problem_id,
                                  r->finish_reason, r->content, r->error,   r->server,
                                  r->token_ids_error};
    /* The token ids first: the block starts aligned (malloc), int32 arrays need it. */
    const size_t id_bytes[2] = {r->prompt_token_ids ? r->n_prompt_token_ids * sizeof(int32_t) : 0,
                                r->token_ids ? r->n_token_ids * sizeof(int32_t) : 0};
    size_t bytes = id_bytes[0] + id_bytes[1];
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) bytes += field_bytes(fields[i]);
    owned_row *o = malloc(sizeof *o + bytes);
    if (o == NULL) return NULL;
    o->row = *r;
    o->text_bytes = bytes;
    char *cursor = o->text;
    if (r->prompt_token_ids != NULL) {
        memcpy(cursor, r->prompt_token_ids, id_bytes[0]);
        o->row.prompt_token_ids = (const int32_t *)(void *)cursor;
        cursor += id_bytes[0];
    }
    if (r->token_ids != NULL) {
        memcpy(cursor, r->token_ids, id_bytes[1]);
        o->row.token_ids = (const int32_t *)(void *)cursor;
        cursor += id_bytes[1];
    }
    o->row.eval = copy_field(&cursor, r->eval);
    o->row.mode = copy_field(&cursor, r->mode);
    o->row.effort = copy_field(&cursor, r->effort);
    o->row.problem_id = copy_field(&cursor, r->problem_id);
    o->row.finish_reason = copy_field(&cursor, r->finish_reason);
    o->row.content = copy_field(&cursor, r->content);
    o->row.error = copy_field(&cursor, r->error);
    o->row.server = copy_field(&cursor, r->server);
    o->row.token_ids_error = copy_field(&cursor, r->token_ids_error);
    return o;
}

/* Stores batch[0 .. n) in one transaction, with the run's heartbeat
 * (store_run_heartbeat: the sign of life moves once per stored batch, in the
 * same commit, off the network thread); on failure rolls it back whole and
 * says so after the failure's own message. Counts what was committed. */
static pg_status write_batch(eval_writer *w, owned_row **batch, size_t n, pg_err *err)
{
    eval_writer_counts add = {0};
    pg_status st = store_begin(w->store, err);
    for (size_t i = 0; st == PG_OK && i < n; i++) {
        const eval_sample_row *r = &batch[i]->row;
        st = eval_store_put_sample(w->store, w->run_id, r, err);
        if (st != PG_OK) break;
        add.stored++;
        if (r->status == EVAL_SAMPLE_ERROR) add.errors++;
        else if (r->status == EVAL_SAMPLE_TRUNCATED) add.truncated++;
        else add.ok++;
    }
    if (st == PG_OK) st = store_run_heartbeat(w->store, w->run_id, err);
    if (st == PG_OK) st = store_commit(w->store, err);
    if (st != PG_OK) {
        store_rollback(w->store);
        const size_t len = strlen(err->msg);
        snprintf(err->msg + len, sizeof err->msg - len,
                 " (the batch of %zu samples being written was rolled back; --resume sends "
                 "them again)", n);
        return st;
    }
    w->counts.stored += add.stored;
    w->counts.ok += add.ok;
    w->counts.truncated += add.truncated;
    w->counts.errors += add.errors;
    w->counts.batches++;
    return PG_OK;
}

/* With mu held: frees every queued row (after a failure: they will not be
 * written) and wakes a waiting eval_writer_put. */
static void drop_queue_locked(eval_writer *w)
{
    const size_t cap = w->opt.queue_rows;
    for (size_t i = 0; i < w->n_queued; i++) free(w->ring[(w->head + i) % cap]);
    w->n_queued = 0;
    w->queued_bytes = 0;
    pthread_cond_broadcast(&w->has_room);
}

/* With mu held: waits until a batch is due and moves it to w->batch;
 * returns its size, 0 when closing with nothing left. */
static size_t take_batch_locked(eval_writer *w)
{
    for (;;) {
        if (w->n_queued >= w->opt.batch_rows || (w->closing && w->n_queued > 0)) break;
        if (w->closing) return 0;
        if (w->n_queued == 0) {
            pthread_cond_wait(&w->has_work, &w->mu);
            continue;
        }
        const double due = w->ring[w->head]->queued_at + w->opt.batch_ms / 1000.0;
        if (pg_clock_mono_s() >= due) break;
        const struct timespec ts = to_timespec(due);
        pthread_cond_timedwait(&w->has_work, &w->mu, &ts);
    }
    const size_t cap = w->opt.queue_rows;
    const size_t n = w->n_queued < w->opt.batch_rows ? w->n_queued : w->opt.batch_rows;
    for (size_t i = 0; i < n; i++) {
        owned_row *o = w->ring[w->head];
        w->batch[i] = o;
        w->queued_bytes -= o->text_bytes;
        w->head = (w->head + 1) % cap;
    }
    w->n_queued -= n;
    pthread_cond_broadcast(&w->has_room);
    return n;
}

static void *writer_main(void *arg)
{
    eval_writer *w = arg;
    pthread_mutex_lock(&w->mu);
    for (;;) {
        const size_t n = take_batch_locked(w);
        if (n == 0) break;
        pthread_mutex_unlock(&w->mu);
        pg_err e = {0};
        pg_status st = write_batch(w, w->batch, n, &e);
        for (size_t i = 0; i < n; i++) free(w->batch[i]);
        pthread_mutex_lock(&w->mu);
        if (st != PG_OK) {
            w->failed = 1;
            w->err = e;
            drop_queue_locked(w);
            break;
        }
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

/* Frees w's queue memory and synchronisation objects (the thread is gone). */
static void writer_free(eval_writer *w)
{
    free(w->ring);
    free(w->batch);
    pthread_cond_destroy(&w->has_work);
    pthread_cond_destroy(&w->has_room);
    pthread_mutex_destroy(&w->mu);
    free(w);
}

/* The options with zero fields defaulted, checked; PG_ERR_USAGE when they cannot work. */
static pg_status resolve_options(const eval_writer_options *in, eval_writer_options *o,
                                 pg_err *err)
{
    *o = in != NULL ? *in : (eval_writer_options){0};
    if (o->batch_rows == 0) o->batch_rows = EVAL_WRITER_BATCH_ROWS;
    if (o->batch_ms == 0) o->batch_ms = EVAL_WRITER_BATCH_MS;
    if (o->queue_rows == 0) o->queue_rows = EVAL_WRITER_QUEUE_ROWS;
    if (o->queue_bytes == 0) o->queue_bytes = EVAL_WRITER_QUEUE_BYTES;
    if (o->batch_rows > o->queue_rows)
        return pg_fail(err, PG_ERR_USAGE,
                       "eval writer: a batch of %zu samples cannot come from a queue of %zu",
                       o->batch_rows, o->queue_rows);
    if (!(o->batch_ms > 0) || !isfinite(o->batch_ms))
        return pg_fail(err, PG_ERR_USAGE, "eval writer: batch_ms %g is not a positive number",
                       o->batch_ms);
    return PG_OK;
}

pg_status eval_writer_start(pg_store *s, int64_t run_id, const eval_writer_options *o,
                            eval_writer **out, pg_err *err)
{
    if (out == NULL) return pg_fail(err, PG_ERR_INTERNAL, "eval_writer_start: out is NULL");
    *out = NULL;
    sqlite3 *db = sql_handle_or_fail(s, "eval_writer_start", err);
    if (db == NULL) return err != NULL ? err->code : PG_ERR_INTERNAL;
    eval_writer_options opt;
    pg_status st = resolve_options(o, &opt, err);
    if (st != PG_OK) return st;
    if (!sqlite3_threadsafe())
        return pg_fail(err, PG_ERR_DB,
                       "%s: this SQLite is built without thread support (SQLITE_THREADSAFE=0); "
                       "the eval writer stores samples on its own thread", sql_db_path(db));
    if (!sqlite3_get_autocommit(db))
        return pg_fail(err, PG_ERR_DB,
                       "%s: eval writer started inside an open transaction (it commits its own "
                       "batches)", sql_db_path(db));

    eval_writer *w = calloc(1, sizeof *w);
    if (w == NULL) return pg_fail(err, PG_ERR_NOMEM, "eval writer: out of memory");
    w->store = s;
    w->run_id = run_id;
    w->opt = opt;
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->has_work, &ca);
    pthread_cond_init(&w->has_room, NULL);
    pthread_condattr_destroy(&ca);
    w->ring = calloc(opt.queue_rows, sizeof *w->ring);
    w->batch = calloc(opt.batch_rows, sizeof *w->batch);
    if (w->ring == NULL || w->batch == NULL) {
        writer_free(w);
        return pg_fail(err, PG_ERR_NOMEM, "eval writer: out of memory for a queue of %zu samples",
                       opt.queue_rows);
    }
    /* The writer thread blocks the stop signals (it inherits the mask), so
     * SIGINT and SIGTERM reach the caller's thread, the one that stops
     * sending; the writer learns of the stop from eval_writer_finish. */
    sigset_t stop_signals, caller_mask;
    sigemptyset(&stop_signals);
    sigaddset(&stop_signals, SIGINT);
    sigaddset(&stop_signals, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop_signals, &caller_mask);
    const int rc = pthread_create(&w->thread, NULL, writer_main, w);
    pthread_sigmask(SIG_SETMASK, &caller_mask, NULL);
    if (rc != 0) {
        writer_free(w);
        return pg_fail(err, PG_ERR_NOMEM, "eval writer: cannot start its thread: %s",
                       strerror(rc));
    }
    *out = w;
    return PG_OK;
}

pg_status eval_writer_put(eval_writer *w, const eval_sample_row *row, pg_err *err)
{
    if (w == NULL || row == NULL)
        return pg_fail(err, PG_ERR_INTERNAL, "eval_writer_put: writer or row is NULL");
    owned_row *o = copy_row(row);
    if (o == NULL)
        return pg_fail(err, PG_ERR_NOMEM, "eval writer: out of memory copying a sample of "
                                          "problem '%s'", row->problem_id ? row->problem_id : "?");
    const size_t cap = w->opt.queue_rows;
    pthread_mutex_lock(&w->mu);
    while (!w->failed && (w->n_queued == cap || (w->n_queued > 0 &&
                                                 w->queued_bytes + o->text_bytes >
                                                     w->opt.queue_bytes)))
        pthread_cond_wait(&w->has_room, &w->mu);
    if (w->failed) {
        const pg_err failure = w->err;
        pthread_mutex_unlock(&w->mu);
        free(o);
        return pg_fail(err, failure.code, "%s", failure.msg);
    }
    o->queued_at = pg_clock_mono_s();
    w->ring[(w->head + w->n_queued) % cap] = o;
    w->n_queued++;
    w->queued_bytes += o->text_bytes;
    /* The writer sleeps until the first sample (to start the batch_ms clock)
     * and then until a full batch. */
    if (w->n_queued == 1 || w->n_queued == w->opt.batch_rows) pthread_cond_signal(&w->has_work);
    pthread_mutex_unlock(&w->mu);
    return PG_OK;
}

pg_status eval_writer_finish(eval_writer *w, eval_writer_counts *counts, pg_err *err)
{
    if (counts != NULL) *counts = (eval_writer_counts){0};
    if (w == NULL) return PG_OK;
    pthread_mutex_lock(&w->mu);
    w->closing = 1;
    pthread_cond_signal(&w->has_work);
    pthread_mutex_unlock(&w->mu);
    pthread_join(w->thread, NULL);
    if (counts != NULL) *counts = w->counts;
    const pg_status st = w->failed ? pg_fail(err, w->err.code, "%s", w->err.msg) : PG_OK;
    writer_free(w);
    return st;
}
