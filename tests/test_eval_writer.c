/*
 * test_eval_writer.c: the batched, threaded eval_samples writer
 * (db/eval_writer.h): batches by count and by time, every sample lands,
 * a full queue blocks the producer, and a failing batch (lock not granted,
 * disk full) stops the writer with the DB error while earlier batches stay.
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <signal.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "db/eval_store.h"
#include "db/eval_writer.h"
#include "db/sql_util.h"
#include "db/store.h"
#include "testutil.h"

/* Longest any poll below waits for the writer before failing the test. */
#define POLL_LIMIT_MS 5000
/* A batch_ms that never fires within a test: batches are then by count only. */
#define NEVER_MS 600000.0

/* A writer that never commits hangs its producer: fail such a test, do not wait. */
#define TEST_TIMEOUT_S 30
TestSuite(eval_writer, .init = tu_scratch_setup, .fini = tu_scratch_teardown,
          .timeout = TEST_TIMEOUT_S);

/* The test's database file, in its scratch directory. */
static const char *db_path(void)
{
    static char path[PATH_MAX + 16];
    snprintf(path, sizeof path, "%s/precgate.db", tu_dir);
    return path;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* A store with one eval run; *run gets its id. */
static pg_store *open_with_run(int64_t *run)
{
    pg_err err = {0};
    pg_store *s = NULL;
    cr_assert_eq(store_open(db_path(), &s, &err), PG_OK, "%s", err.msg);
    const store_run_info info = {.kind = "eval"};
    cr_assert_eq(store_run_begin(s, &info, run, &err), PG_OK, "%s", err.msg);
    return s;
}

/* Sample i: problem "p<i>", every field set, strings in a buffer that the
 * caller overwrites after the put (the writer must have copied them). */
static eval_sample_row sample(int i, char *id, size_t id_size, const char *content)
{
    snprintf(id, id_size, "p%05d", i);
    return (eval_sample_row){.eval = "aime25", .mode = "bf16", .effort = "medium",
                             .problem_id = id, .sample = 0,
                             .status = i % 7 == 0 ? EVAL_SAMPLE_ERROR
                                       : i % 5 == 0 ? EVAL_SAMPLE_TRUNCATED
                                                    : EVAL_SAMPLE_OK,
                             .attempts = 1, .latency_ms = 12.5, .finish_reason = "stop",
                             .prompt_tokens = 5, .completion_tokens = 7, .content = content,
                             .has_extracted = 1, .extracted = i, .correct = i % 2,
                             .error = i % 7 == 0 ? "HTTP 500" : NULL};
}

/* Rows in eval_samples, read through a connection of its own. */
static long long stored_rows(void)
{
    sqlite3 *db = NULL;
    cr_assert_eq(sqlite3_open(db_path(), &db), SQLITE_OK);
    sqlite3_busy_timeout(db, POLL_LIMIT_MS);
    const long long n = tu_sql_int(db, "SELECT count(*) FROM eval_samples");
    sqlite3_close(db);
    return n;
}

/* Waits until want rows are visible to another connection; false after POLL_LIMIT_MS. */
static int wait_rows(long long want)
{
    for (int ms = 0; ms < POLL_LIMIT_MS; ms += 5) {
        if (stored_rows() == want) return 1;
        sleep_ms(5);
    }
    return 0;
}

/* Commits seen by the commit hook, and how many ran on the test's thread
 * (a WAL checkpoint runs inside the commit that crosses wal_autocheckpoint,
 * so commits off this thread mean checkpoints off it too). */
typedef struct commit_log {
    pthread_t caller;
    atomic_int commits, on_caller;
} commit_log;

static int count_commit(void *arg)
{
    commit_log *log = arg;
    atomic_fetch_add(&log->commits, 1);
    if (pthread_equal(pthread_self(), log->caller)) atomic_fetch_add(&log->on_caller, 1);
    return 0; /* let it commit */
}

Test(eval_writer, batches_by_count_and_every_sample_lands)
{
    int64_t run = 0;
    pg_store *s = open_with_run(&run);
    commit_log commits = {.caller = pthread_self()};
    sqlite3_commit_hook(store_handle(s), count_commit, &commits);
    const eval_writer_options o = {.batch_rows = 10, .batch_ms = NEVER_MS, .queue_rows = 40};
    eval_writer *w = NULL;
    pg_err err = {0};
    cr_assert_eq(eval_writer_start(s, run, &o, &w, &err), PG_OK, "%s", err.msg);
    enum { N = 103 };
    int n_err = 0, n_trunc = 0;
    for (int i = 0; i < N; i++) {
        char id[16], content[64];
        snprintf(content, sizeof content, "answer \\boxed{%d}", i);
        const eval_sample_row r = sample(i, id, sizeof id, content);
        n_err += r.status == EVAL_SAMPLE_ERROR;
        n_trunc += r.status == EVAL_SAMPLE_TRUNCATED;
        cr_assert_eq(eval_writer_put(w, &r, &err), PG_OK, "%s", err.msg);
        memset(id, 'x', sizeof id - 1);          /* the writer kept its own copy */
        memset(content, 'y', sizeof content - 1);
    }
    eval_writer_counts c;
    cr_assert_eq(eval_writer_finish(w, &c, &err), PG_OK, "%s", err.msg);
    sqlite3_commit_hook(store_handle(s), NULL, NULL);
    /* 10 full batches, then the 3 left over at the flush. */
    cr_expect_eq(c.batches, 11);
    cr_expect_eq(atomic_load(&commits.commits), 11, "one transaction per batch");
    cr_expect_eq(atomic_load(&commits.on_caller), 0, "every commit on the writer thread");
    cr_expect_eq(c.stored, N);
    cr_expect_eq(c.errors, n_err);
    cr_expect_eq(c.truncated, n_trunc);
    cr_expect_eq(c.ok, N - n_err - n_trunc);
    sqlite3 *db = store_handle(s);
    cr_expect_eq(tu_sql_int(db, "SELECT count(*) FROM eval_samples"), N);
    cr_expect_eq(tu_sql_int(db, "SELECT count(DISTINCT problem_id) FROM eval_samples"), N);
    cr_expect_eq(tu_sql_int(db, "SELECT count(*) FROM eval_samples WHERE status = 'error' "
                                "AND error = 'HTTP 500' AND correct IS NULL"), n_err);
    cr_expect_eq(tu_sql_int(db, "SELECT count(*) FROM eval_samples WHERE content = "
                                "'answer \\boxed{' || extracted || '}'"), N);
    cr_expect_eq(tu_sql_int(db, "SELECT extracted FROM eval_samples WHERE problem_id = 'p00042'"),
                 42);
    /* The store is the caller's again. */
    cr_expect_eq(store_run_finish(s, run, "complete", NULL, &err), PG_OK, "%s", err.msg);
    store_close(s);
}

Test(eval_writer, a_partial_batch_commits_after_batch_ms)
{
    int64_t run = 0;
    pg_store *s = open_with_run(&run);
    const eval_writer_options o = {.batch_rows = 1000, .batch_ms = 20, .queue_rows = 1000};
    eval_writer *w = NULL;
    pg_err err = {0};
    cr_assert_eq(eval_writer_start(s, run, &o, &w, &err), PG_OK, "%s", err.msg);
    for (int i = 0; i < 3; i++) {
        char id[16];
        const eval_sample_row r = sample(i, id, sizeof id, "x");
        cr_assert_eq(eval_writer_put(w, &r, &err), PG_OK, "%s", err.msg);
    }
    /* Far fewer than a batch, and no flush yet: committed by the clock. */
    cr_expect(wait_rows(3), "3 samples not committed within %d ms", POLL_LIMIT_MS);
    eval_writer_counts c;
    cr_assert_eq(eval_writer_finish(w, &c, &err), PG_OK, "%s", err.msg);
    cr_expect_eq(c.stored, 3);
    cr_expect_eq(c.batches, 1);
    store_close(s);
}

/* A producer thread putting n samples, counting the puts that returned. */
typedef struct producer {
    eval_writer *w;
    int n;
    atomic_int done;
    pg_status last;
    pg_err err;
} producer;

static void *produce(void *arg)
{
    producer *p = arg;
    for (int i = 0; i < p->n; i++) {
        char id[16];
        const eval_sample_row r = sample(i, id, sizeof id, "some content");
        p->last = eval_writer_put(p->w, &r, &p->err);
        if (p->last != PG_OK) break;
        atomic_fetch_add(&p->done, 1);
    }
    return NULL;
}

/* Another connection that holds the write lock (BEGIN IMMEDIATE). */
static sqlite3 *hold_write_lock(void)
{
    sqlite3 *db = NULL;
    cr_assert_eq(sqlite3_open(db_path(), &db), SQLITE_OK);
    tu_sql_exec(db, "BEGIN IMMEDIATE");
    return db;
}

Test(eval_writer, a_full_queue_blocks_the_producer_until_the_writer_catches_up)
{
    int64_t run = 0;
    pg_store *s = open_with_run(&run);
    const eval_writer_options o = {.batch_rows = 2, .batch_ms = NEVER_MS, .queue_rows = 4};
    eval_writer *w = NULL;
    pg_err err = {0};
    cr_assert_eq(eval_writer_start(s, run, &o, &w, &err), PG_OK, "%s", err.msg);
    sqlite3 *locker = hold_write_lock();  /* the writer's first BEGIN waits on it */
    producer p = {.w = w, .n = 20};
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, produce, &p), 0);
    /* One batch of 2 taken (its BEGIN waiting), 4 queued, the 7th put blocked:
     * 6 puts return, and no more however long the writer is held up. */
    for (int ms = 0; ms < POLL_LIMIT_MS && atomic_load(&p.done) < 6; ms++) sleep_ms(1);
    sleep_ms(200);
    cr_expect_eq(atomic_load(&p.done), 6, "puts returned: %d", atomic_load(&p.done));
    tu_sql_exec(locker, "ROLLBACK");
    sqlite3_close(locker);
    pthread_join(t, NULL);
    cr_expect_eq(p.last, PG_OK, "%s", p.err.msg);
    eval_writer_counts c;
    cr_assert_eq(eval_writer_finish(w, &c, &err), PG_OK, "%s", err.msg);
    cr_expect_eq(c.stored, 20);
    cr_expect_eq(tu_sql_int(store_handle(s), "SELECT count(*) FROM eval_samples"), 20);
    store_close(s);
}

Test(eval_writer, a_lock_not_granted_stops_the_writer_and_keeps_earlier_batches)
{
    int64_t run = 0;
    pg_store *s = open_with_run(&run);
    /* Shorten the store's busy timeout so SQLITE_BUSY comes within the test. */
    sqlite3_busy_timeout(store_handle(s), 50);
    const eval_writer_options o = {.batch_rows = 10, .batch_ms = NEVER_MS, .queue_rows = 40};
    eval_writer *w = NULL;
    pg_err err = {0};
    cr_assert_eq(eval_writer_start(s, run, &o, &w, &err), PG_OK, "%s", err.msg);
    producer first = {.w = w, .n = 10};
    produce(&first);
    cr_assert(wait_rows(10), "the first batch was not committed");
    sqlite3 *locker = hold_write_lock();
    /* Backpressure bounds how far the producer gets before it sees the failure. */
    producer more = {.w = w, .n = 1000};
    produce(&more);
    cr_expect_eq(more.last, PG_ERR_DB, "the put after the failure returns it");
    cr_expect_lt(atomic_load(&more.done), 1000);
    cr_expect(strstr(more.err.msg, "database is locked") != NULL, "%s", more.err.msg);
    eval_writer_counts c;
    cr_expect_eq(eval_writer_finish(w, &c, &err), PG_ERR_DB);
    cr_expect(strstr(err.msg, db_path()) != NULL, "names the file: %s", err.msg);
    cr_expect(strstr(err.msg, "database is locked") != NULL, "%s", err.msg);
    cr_expect(strstr(err.msg, "rolled back") != NULL, "%s", err.msg);
    cr_expect_eq(c.stored, 10);
    tu_sql_exec(locker, "ROLLBACK");
    sqlite3_close(locker);
    cr_expect_eq(stored_rows(), 10, "the committed batch is kept");
    store_close(s);
}

Test(eval_writer, disk_full_stops_the_run_with_the_db_error)
{
    int64_t run = 0;
    pg_store *s = open_with_run(&run);
    sqlite3 *db = store_handle(s);
    /* A database that may grow by a few pages: SQLITE_FULL after ~2 batches. */
    const long long pages = tu_sql_int(db, "PRAGMA page_count");
    char sql[64];
    snprintf(sql, sizeof sql, "PRAGMA max_page_count = %lld", pages + 12);
    tu_sql_int(db, "%s", sql);
    const eval_writer_options o = {.batch_rows = 10, .batch_ms = NEVER_MS, .queue_rows = 40};
    eval_writer *w = NULL;
    pg_err err = {0};
    cr_assert_eq(eval_writer_start(s, run, &o, &w, &err), PG_OK, "%s", err.msg);
    static char content[2000];
    memset(content, 'c', sizeof content - 1);
    producer p = {.w = w, .n = 500};
    for (int i = 0; i < p.n; i++) {
        char id[16];
        const eval_sample_row r = sample(i, id, sizeof id, content);
        p.last = eval_writer_put(w, &r, &p.err);
        if (p.last != PG_OK) break;
        p.done++;
    }
    cr_expect_eq(p.last, PG_ERR_DB, "a put after the failure returns it");
    cr_expect_lt(atomic_load(&p.done), 500);
    eval_writer_counts c;
    cr_expect_eq(eval_writer_finish(w, &c, &err), PG_ERR_DB);
    cr_expect(strstr(err.msg, "database or disk is full") != NULL, "%s", err.msg);
    const long long kept = tu_sql_int(db, "SELECT count(*) FROM eval_samples");
    cr_expect_gt(kept, 0, "batches committed before the failure are kept");
    cr_expect_eq(kept % 10, 0, "whole batches only: %lld", kept);
    cr_expect_eq(kept, c.stored);
    store_close(s);
}

Test(eval_writer, options_that_cannot_work_are_refused)
{
    int64_t run = 0;
    pg_store *s = open_with_run(&run);
    eval_writer *w = (eval_writer *)s;
    pg_err err = {0};
    const eval_writer_options big = {.batch_rows = 100, .queue_rows = 10};
    cr_expect_eq(eval_writer_start(s, run, &big, &w, &err), PG_ERR_USAGE);
    cr_expect_null(w);
    pg_err_clear(&err);
    const eval_writer_options nan_ms = {.batch_ms = NAN};
    cr_expect_eq(eval_writer_start(s, run, &nan_ms, &w, &err), PG_ERR_USAGE);
    pg_err_clear(&err);
    cr_assert_eq(store_begin(s, &err), PG_OK, "%s", err.msg);
    cr_expect_eq(eval_writer_start(s, run, NULL, &w, &err), PG_ERR_DB, "inside a transaction");
    store_rollback(s);
    cr_expect_eq(eval_writer_finish(NULL, NULL, &err), PG_OK);
    store_close(s);
}

/* Threads of this process whose blocked-signal mask holds SIGINT and SIGTERM
 * (read from /proc/self/task/<tid>/status, "SigBlk:" in hex). */
static int threads_blocking_stop_signals(void)
{
    const unsigned long long want = (1ULL << (SIGINT - 1)) | (1ULL << (SIGTERM - 1));
    DIR *d = opendir("/proc/self/task");
    cr_assert_not_null(d);
    int n = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        if (e->d_name[0] == '.') continue;
        char path[PATH_MAX], line[256];
        snprintf(path, sizeof path, "/proc/self/task/%s/status", e->d_name);
        FILE *f = fopen(path, "r");
        if (f == NULL) continue; /* the thread ended meanwhile */
        unsigned long long mask = 0;
        while (fgets(line, sizeof line, f) != NULL)
            if (sscanf(line, "SigBlk: %llx", &mask) == 1) break;
        fclose(f);
        n += (mask & want) == want;
    }
    closedir(d);
    return n;
}

Test(eval_writer, stop_signals_go_to_the_callers_thread_not_the_writer)
{
    int64_t run = 0;
    pg_store *s = open_with_run(&run);
    const int before = threads_blocking_stop_signals();
    sigset_t mine;
    pthread_sigmask(SIG_BLOCK, NULL, &mine);
    eval_writer *w = NULL;
    pg_err err = {0};
    cr_assert_eq(eval_writer_start(s, run, NULL, &w, &err), PG_OK, "%s", err.msg);
    cr_expect_eq(threads_blocking_stop_signals(), before + 1, "the writer thread blocks them");
    sigset_t after;
    pthread_sigmask(SIG_BLOCK, NULL, &after);
    cr_expect_eq(sigismember(&after, SIGINT), sigismember(&mine, SIGINT),
                 "the caller's mask is as it was");
    cr_expect_eq(sigismember(&after, SIGTERM), sigismember(&mine, SIGTERM));
    cr_assert_eq(eval_writer_finish(w, NULL, &err), PG_OK, "%s", err.msg);
    store_close(s);
}
