/*
 * test_eval_hotpath.c: `precgate eval` with its batched sample writer, end to
 * end against a loopback fake server: a DB failure mid-run fails the run
 * with the DB error and keeps the batches committed before it; kill -9
 * mid-run loses only what was not committed, and --resume sends exactly
 * those samples again, leaving every planned sample stored once.
 */
#include <criterion/criterion.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "db/eval_writer.h"
#include "fake_openai_server.h"
#include "db/sql_util.h"
#include "db/store.h"
#include "testutil.h"

/* Requests in flight per server in these runs. */
#define CONCURRENCY 16
/* Longest wait for the child to reach the point where it is killed. */
#define KILL_WAIT_MS 30000
/* Quiet time after which the fake server has counted every request sent. */
#define IDLE_MS (5 * FS_ACCEPT_POLL_MS)

/* A run whose writer never commits hangs: fail it instead. */
#define TEST_TIMEOUT_S 60
TestSuite(eval_hotpath, .init = tu_scratch_setup, .fini = tu_scratch_teardown,
          .timeout = TEST_TIMEOUT_S);

static const fs_reply g_models = {200, "{\"object\":\"list\",\"data\":[{\"id\":\"m\"}]}", NULL,
                                  NULL, 0, 0};
static const fs_reply g_health = {200, "", NULL, NULL, 0, 0};
static const fs_reply g_right = {
    200,
    "{\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":\"so "
    "\\\\boxed{7}\"},\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":5,"
    "\"completion_tokens\":7}}",
    NULL, NULL, 0, 0};

/* Starts a fake server that answers every chat request right; url gets its base. */
static void start_server(fake_server *s, char *url, size_t url_size)
{
    fs_init(s);
    fs_route(s, "/health", &g_health, 1);
    fs_route(s, "/v1/models", &g_models, 1);
    fs_route(s, "/v1/chat/completions", &g_right, 1);
    cr_assert(fs_start(s));
    fs_url(s, url, url_size);
}

/* Writes n problems p00000 .. (answer 7) to tu_dir/t.jsonl; returns the path. */
static const char *write_traces(int n)
{
    static char path[512];
    snprintf(path, sizeof path, "%s/t.jsonl", tu_dir);
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    for (int i = 0; i < n; i++)
        fprintf(f, "{\"id\":\"p%05d\",\"problem\":\"%d+7-%d?\",\"answer\":7}\n", i, i, i);
    cr_assert_eq(fclose(f), 0);
    return path;
}

/* The integer answer of sql on the database at path (its own connection). */
static long long db_int(const char *path, const char *sql)
{
    sqlite3 *db = NULL;
    cr_assert_eq(sqlite3_open(path, &db), SQLITE_OK);
    sqlite3_busy_timeout(db, 5000);
    const long long v = tu_sql_int(db, "%s", sql);
    sqlite3_close(db);
    return v;
}

/* Asserts run 1's status is want. */
static void expect_status(const char *db, const char *want)
{
    sqlite3 *h = NULL;
    cr_assert_eq(sqlite3_open(db, &h), SQLITE_OK);
    sqlite3_stmt *st = NULL;
    cr_assert_eq(sqlite3_prepare_v2(h, "SELECT status FROM runs WHERE id = 1", -1, &st, NULL),
                 SQLITE_OK);
    cr_assert_eq(sqlite3_step(st), SQLITE_ROW);
    cr_expect_str_eq((const char *)sqlite3_column_text(st, 0), want);
    sqlite3_finalize(st);
    sqlite3_close(h);
}

Test(eval_hotpath, a_db_failure_mid_run_fails_it_and_keeps_the_committed_batches)
{
    enum { PLANNED = 2000, FAIL_AT = 300 };
    const char *traces = write_traces(PLANNED);
    char db[512], url[128];
    snprintf(db, sizeof db, "%s/e.db", tu_dir);
    /* The schema first, then a trigger that fails insert FAIL_AT + 1 the way
     * a full disk fails a write: mid-run, after some batches committed. */
    pg_store *s = NULL;
    pg_err err = {0};
    cr_assert_eq(store_open(db, &s, &err), PG_OK, "%s", err.msg);
    tu_sql_exec(store_handle(s),
                "CREATE TRIGGER fail_late BEFORE INSERT ON eval_samples "
                "WHEN (SELECT count(*) FROM eval_samples) >= 300 "
                "BEGIN SELECT RAISE(ABORT, 'simulated disk full'); END");
    store_close(s);
    fake_server srv;
    start_server(&srv, url, sizeof url);
    char *out = NULL;
    const int rc = tu_run_precgatef(&out,
                                    "eval --traces '%s' --endpoint bf16=%s --concurrency %d "
                                    "--db '%s' --no-progress --ready-timeout 10",
                                    traces, url, CONCURRENCY, db);
    const int sent = fs_hits(&srv, "/v1/chat/completions");
    fs_stop(&srv);
    cr_expect_eq(rc, 1, "%s", out);
    cr_expect(strstr(out, "precgate: error:") != NULL, "%s", out);
    cr_expect(strstr(out, "simulated disk full") != NULL, "the DB's own message: %s", out);
    cr_expect(strstr(out, db) != NULL, "names the database: %s", out);
    cr_expect(strstr(out, "rolled back") != NULL, "%s", out);
    free(out);
    expect_status(db, "failed");
    const long long kept = db_int(db, "SELECT count(*) FROM eval_samples");
    cr_log_info("failing insert %d: %d requests sent, %lld samples kept", FAIL_AT + 1, sent, kept);
    cr_expect_gt(kept, 0, "batches committed before the failure are kept");
    cr_expect_leq(kept, FAIL_AT);
    cr_expect_eq(db_int(db, "SELECT count(*) FROM runs WHERE error LIKE '%simulated disk full%'"),
                 1);
    /* The run stopped: the full queue held the network back (backpressure),
     * so it sent at most a queue, a batch and the requests in flight past
     * the failing insert. */
    cr_expect_lt(sent, PLANNED, "sent %d", sent);
    cr_expect_leq(sent, FAIL_AT + EVAL_WRITER_QUEUE_ROWS + 2 * EVAL_WRITER_BATCH_ROWS +
                            CONCURRENCY, "sent %d", sent);
}

/* Waits until s has served no connection for IDLE_MS, longer than its
 * accept poll (a killed client's requests may still be accepted from the
 * backlog, read from their sockets and counted after it died). */
static void wait_server_idle(fake_server *s)
{
    for (int ms = 0, idle = 0; ms < KILL_WAIT_MS; ms++) {
        pthread_mutex_lock(&s->mu);
        const int threads = s->threads;
        pthread_mutex_unlock(&s->mu);
        idle = threads == 0 ? idle + 1 : 0;
        if (idle >= IDLE_MS) return;
        const struct timespec one_ms = {0, 1000000L};
        nanosleep(&one_ms, NULL);
    }
    cr_assert_fail("the fake server still serves connections after %d ms", KILL_WAIT_MS);
}

Test(eval_hotpath, kill_9_mid_run_then_resume_sends_exactly_the_lost_samples)
{
    enum { PLANNED = 3000, KILL_AFTER = 1500 };
    const char *traces = write_traces(PLANNED);
    char db[512], url[128], args[2048], log[512];
    snprintf(db, sizeof db, "%s/e.db", tu_dir);
    snprintf(log, sizeof log, "%s/run.log", tu_dir);
    fake_server srv;
    start_server(&srv, url, sizeof url);
    snprintf(args, sizeof args,
             "eval --traces '%s' --endpoint bf16=%s --concurrency %d --db '%s' --no-progress "
             "--ready-timeout 10",
             traces, url, CONCURRENCY, db);
    const pid_t pid = tu_spawn_precgate(args, log, NULL);
    int waited = 0;
    while (fs_hits(&srv, "/v1/chat/completions") < KILL_AFTER && waited < KILL_WAIT_MS) {
        const struct timespec ms = {0, 1000000L};
        nanosleep(&ms, NULL);
        waited++;
    }
    cr_assert_eq(kill(pid, SIGKILL), 0);
    int wst = 0;
    cr_assert_eq(waitpid(pid, &wst, 0), pid);
    cr_assert(WIFSIGNALED(wst) && WTERMSIG(wst) == SIGKILL, "the run ended before the kill");
    wait_server_idle(&srv);
    const int sent = fs_hits(&srv, "/v1/chat/completions");
    cr_assert_geq(sent, KILL_AFTER);

    /* Committed batches survive; what is lost is at most the unflushed
     * queue and batch (plus the replies still in flight). */
    const long long kept = db_int(db, "SELECT count(*) FROM eval_samples");
    cr_log_info("killed after %d requests sent: %lld samples committed", sent, kept);
    cr_expect_gt(kept, 0, "batches committed while the run went on");
    cr_expect_leq(kept, sent);
    cr_expect_leq(sent - kept, EVAL_WRITER_QUEUE_ROWS + EVAL_WRITER_BATCH_ROWS + CONCURRENCY,
                  "lost %lld", sent - kept);
    expect_status(db, "running");

    /* --resume (--force: the killed run is still marked running) sends exactly the rest. */
    char *out = NULL;
    const int rc = tu_run_precgatef(&out, "%s --resume 1 --force", args);
    const int resent = fs_hits(&srv, "/v1/chat/completions") - sent;
    fs_stop(&srv);
    cr_expect_eq(rc, 0, "%s", out);
    free(out);
    cr_expect_eq(resent, PLANNED - kept, "resent %d, missing %lld", resent, PLANNED - kept);
    cr_expect_eq(db_int(db, "SELECT count(*) FROM eval_samples"), PLANNED);
    cr_expect_eq(db_int(db, "SELECT count(*) FROM (SELECT DISTINCT run_id, eval, mode, effort, "
                            "problem_id, sample FROM eval_samples)"),
                 PLANNED, "no duplicates");
    cr_expect_eq(db_int(db, "SELECT count(*) FROM eval_samples WHERE status = 'ok' "
                            "AND correct = 1"), PLANNED);
    expect_status(db, "complete");
}
