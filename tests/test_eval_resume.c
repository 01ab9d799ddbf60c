/*
 * test_eval_resume.c: `precgate eval --resume` continues the same eval or
 * refuses (every defining field, before anything is sent), and interrupted
 * runs: real SIGTERM / SIGINT / SIGKILL sent to a precgate eval talking to
 * loopback fake servers, what the run says afterwards, and resuming it.
 * The refusals and --force are the eval lifecycle's, called directly
 * (lifecycle_util.h); the signals, usage errors and `runs` use the binary.
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

#include "fake_openai_server.h"
#include "db/store.h"
#include "evals/traces.h"
#include "evals/grade.h"
#include "lifecycle_util.h"
#include "testutil.h"

TestSuite(eval_resume, .init = tu_scratch_setup, .fini = tu_scratch_teardown);

#define CHAT "/v1/chat/completions"
#define REPLY7                                                                                \
    "{\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":"            \
    "\"so \\\\boxed{7}\"},\"finish_reason\":\"stop\"}],"                                       \
    "\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":7}}"
/* Problems of the signal tests, and the delay of each reply there: long
 * enough that a signal lands mid-run, short enough for a quick suite. */
#define SIG_PROBLEMS 16
#define SIG_REPLY_MS 150
/* Problems of the heartbeat test: a run of several of the writer's batches,
 * so a heartbeat is due after the test has aged the stored one (it is
 * stopped as soon as one is seen). */
#define HEARTBEAT_PROBLEMS 60
/* How long a test waits for a spawned precgate to reach a state. */
#define WAIT_S 10.0
/* Poll interval while waiting. */
#define POLL_MS 10

/* The number in the first column of sql on the database at path, or -1
 * while the database or table does not exist yet. */
static long long db_int(const char *path, const char *sql)
{
    sqlite3 *db = NULL;
    long long v = -1;
    if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK) {
        sqlite3_busy_timeout(db, 1000);
        sqlite3_stmt *st = NULL;
        if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW)
            v = sqlite3_column_int64(st, 0);
        sqlite3_finalize(st);
    }
    sqlite3_close(db);
    return v;
}

/* The text in the first column of sql's first row, malloc'd ("(none)" when none). */
static char *db_str(const char *path, const char *sql)
{
    sqlite3 *db = NULL;
    cr_assert_eq(sqlite3_open(path, &db), SQLITE_OK);
    sqlite3_stmt *st = NULL;
    cr_assert_eq(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK, "%s", sqlite3_errmsg(db));
    const unsigned char *t = sqlite3_step(st) == SQLITE_ROW ? sqlite3_column_text(st, 0) : NULL;
    char *v = strdup(t != NULL ? (const char *)t : "(none)");
    sqlite3_finalize(st);
    sqlite3_close(db);
    return v;
}

/* Runs constant sql on the database at path. */
static void db_exec(const char *path, const char *sql)
{
    sqlite3 *db = NULL;
    cr_assert_eq(sqlite3_open(path, &db), SQLITE_OK);
    tu_sql_exec(db, sql);
    sqlite3_close(db);
}

/* A server answering /health, /v1/models (serving model) and every chat
 * request with REPLY7 after delay_ms. */
static void serve(fake_server *s, const char *model_json, int delay_ms)
{
    fs_init(s);
    const fs_reply health = {200, "", NULL, NULL, 0, 0};
    const fs_reply models = {200, model_json, NULL, NULL, 0, 0};
    const fs_reply chat = {200, REPLY7, NULL, NULL, delay_ms, 0};
    fs_route(s, "/health", &health, 1);
    fs_route(s, "/v1/models", &models, 1);
    fs_route(s, CHAT, &chat, 1);
    cr_assert(fs_start(s));
}
#define MODEL_M "{\"object\":\"list\",\"data\":[{\"id\":\"m\"}]}"
#define MODEL_M2 "{\"object\":\"list\",\"data\":[{\"id\":\"m2\"}]}"

/* Writes n problems "p0".."p<n-1>" (answer 7) to name in tu_dir, in order
 * or reversed; returns its path (static, one of tu_in_dir's buffers). */
static const char *write_traces(const char *name, int n, int reversed, int answer_of_p0)
{
    char *text = malloc((size_t)n * 80 + 1);
    cr_assert_not_null(text);
    size_t len = 0;
    for (int k = 0; k < n; k++) {
        const int i = reversed ? n - 1 - k : k;
        len += (size_t)sprintf(text + len, "{\"id\":\"p%d\",\"problem\":\"%d+%d?\",\"answer\":%d}\n",
                               i, i, 7 - i, i == 0 ? answer_of_p0 : 7);
    }
    const char *path = tu_in_dir(name);
    tu_write_file(path, text, len);
    free(text);
    return path;
}

/* Total chat requests of servers a and b. */
static int chats(fake_server *a, fake_server *b)
{
    return fs_hits(a, CHAT) + (b != NULL ? fs_hits(b, CHAT) : 0);
}

/* The live eval of the refusal test as the run was made (the lifecycle
 * called directly): traces into db, bf16 at u16 and fp8kv at u8, one
 * sample, effort low, seed 5, temperature 0.5, top-p 0.9, 100 tokens at
 * most, eval aime (the traces' file name would change it), a 5 s ready
 * deadline; resume: run 1 continued. */
static void pinned_eval(eval_lifecycle_request *rq, const char *traces, const char *db,
                        const char *u16, const char *u8, int resume)
{
    lu_eval_request(rq, traces, db);
    rq->o.modes[0] = "bf16";
    rq->o.urls[0] = u16;
    rq->o.modes[1] = "fp8kv";
    rq->o.urls[1] = u8;
    rq->o.n_endpoints = 2;
    rq->o.efforts[0] = "low";
    rq->o.seed_base = 5;
    rq->o.sampling.temperature = 0.5;
    rq->o.sampling.top_p = 0.9;
    rq->o.sampling.max_tokens = 100;
    rq->o.eval_name = "aime";
    rq->o.ready_deadline_s = 5;
    if (resume) rq->resume = 1;
}

/* Runs the resume rq and asserts its refusal (PG_ERR_USAGE: the CLI's exit
 * 2) naming needle, and that run 1 was left as it was. */
static void expect_refused(eval_lifecycle_request *rq, const char *needle)
{
    eval_lifecycle_result res;
    pg_err err = {0};
    char *said = NULL;
    const pg_status st = lu_eval(rq, &res, &said, &err);
    cr_assert_eq(st, PG_ERR_USAGE, "want the refusal naming '%s', got %d: %s\n%s", needle, st,
                 err.msg, said);
    cr_assert_not_null(strstr(err.msg, needle), "'%s' not named: %s", needle, err.msg);
    cr_assert_not_null(strstr(said, "run 1 left as it was"), "%s", said);
    free(said);
}

/* Runs rq and asserts that it completed with every sample answered (the
 * CLI's exit 0). */
static void expect_complete(eval_lifecycle_request *rq)
{
    eval_lifecycle_result res;
    pg_err err = {0};
    char *said = NULL;
    cr_assert_eq(lu_eval(rq, &res, &said, &err), PG_OK, "%s\n%s", err.msg, said);
    cr_assert_eq(res.stored_errors, 0, "%s", said);
    cr_assert_str_eq(res.status, "complete", "%s", said);
    free(said);
}

Test(eval_resume, every_defining_field_that_differs_is_refused_before_sending)
{
    char db[512], u16[64], u8[64], u8b[64], u8m2[64];
    snprintf(db, sizeof db, "%s/e.db", tu_dir);
    fake_server s16, s8, s8b, s8m2;
    serve(&s16, MODEL_M, 0);
    serve(&s8, MODEL_M, 0);
    serve(&s8b, MODEL_M, 0);    /* the same mode and model, on another port */
    serve(&s8m2, MODEL_M2, 0);  /* the same mode, another model */
    fs_url(&s16, u16, sizeof u16);
    fs_url(&s8, u8, sizeof u8);
    fs_url(&s8b, u8b, sizeof u8b);
    fs_url(&s8m2, u8m2, sizeof u8m2);
    char traces[512], changed[512], reordered[512];
    snprintf(traces, sizeof traces, "%s", write_traces("t.jsonl", 3, 0, 7));
    snprintf(changed, sizeof changed, "%s", write_traces("changed.jsonl", 3, 0, 8));
    snprintf(reordered, sizeof reordered, "%s", write_traces("reordered.jsonl", 3, 1, 7));
    eval_lifecycle_request rq;
    pinned_eval(&rq, traces, db, u16, u8, 0);
    expect_complete(&rq);
    cr_assert_eq(chats(&s16, &s8), 6);
    char *models = db_str(db, "SELECT json_extract(config_json, '$.models') FROM runs");
    cr_assert_str_eq(models, "{\"bf16\":\"m\",\"fp8kv\":\"m\"}");
    free(models);
    /* One sample goes missing, so every resume below has something to send. */
    db_exec(db, "DELETE FROM eval_samples WHERE mode = 'fp8kv' AND problem_id = 'p1'");

    /* Each option changed alone: what --samples 2, --seed 6, --temperature
     * 0.6, --top-p 0.8, --max-tokens 101, --effort medium, --effort
     * low,high, --extractor gpt-oss, --eval other and --limit 2 give. */
    static const char *const fields[] = {"samples", "seed", "temperature", "top_p",
                                         "max_tokens", "efforts", "efforts", "extractor",
                                         "eval", "limit"};
    const int hits_before = chats(&s16, &s8);
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
        pinned_eval(&rq, traces, db, u16, u8, 1);
        pg_err err = {0};
        switch (i) {
        case 0: rq.o.samples = 2; break;
        case 1: rq.o.seed_base = 6; break;
        case 2: rq.o.sampling.temperature = 0.6; break;
        case 3: rq.o.sampling.top_p = 0.8; break;
        case 4: rq.o.sampling.max_tokens = 101; break;
        case 5: rq.o.efforts[0] = "medium"; break;
        case 6:
            rq.o.efforts[1] = "high";
            rq.o.n_efforts = 2;
            break;
        case 7:
            cr_assert_eq(grade_extractor_parse("gpt-oss", &rq.o.extractor, &err), PG_OK, "%s",
                         err.msg);
            break;
        case 8: rq.o.eval_name = "other"; break;
        default: rq.limit = 2; break;
        }
        char needle[64];
        snprintf(needle, sizeof needle, ": %s (", fields[i]);
        expect_refused(&rq, needle);
    }
    /* Another mode set. */
    pinned_eval(&rq, traces, db, u16, u8, 1);
    rq.o.modes[1] = "fp8qkv";
    expect_refused(&rq, ": modes (");
    /* The traces' content (one answer changed in a copy of the file). */
    pinned_eval(&rq, changed, db, u16, u8, 1);
    expect_refused(&rq, "traces_digest");
    cr_assert_eq(chats(&s16, &s8), hits_before, "a refused resume sent requests");

    /* A server that now serves another model: refused after /v1/models,
     * before any chat request. */
    pinned_eval(&rq, traces, db, u16, u8m2, 1);
    expect_refused(&rq, "models.fp8kv");
    pinned_eval(&rq, traces, db, u16, u8m2, 1);
    expect_refused(&rq, "\"m2\"");
    cr_assert_eq(fs_hits(&s8m2, CHAT), 0);
    cr_assert_gt(fs_hits(&s8m2, "/v1/models"), 0);

    /* A template change (the stored template is not today's) and a config
     * from before the checks are refused too. */
    db_exec(db, "UPDATE runs SET config_json = json_set(config_json, '$.prompt_template', 'old')");
    pinned_eval(&rq, traces, db, u16, u8, 1);
    expect_refused(&rq, "prompt_template");
    db_exec(db, "UPDATE runs SET config_json = json_remove(config_json, '$.config_version')");
    pinned_eval(&rq, traces, db, u16, u8, 1);
    expect_refused(&rq, "config_version");
    db_exec(db, "UPDATE runs SET config_json = json_set(config_json, '$.config_version', 2)");
    cr_assert_eq(chats(&s16, &s8) + fs_hits(&s8m2, CHAT), hits_before);
    /* Nothing was stored or changed by the refusals. */
    cr_assert_eq(db_int(db, "SELECT count(*) FROM eval_samples"), 5);
    char *status = db_str(db, "SELECT status FROM runs");
    cr_assert_str_eq(status, "complete");
    free(status);
    fs_stop(&s8m2);

    /* Restore the template the tamper replaced, then resume for real: the
     * same eval from a reordered copy of the traces, fp8kv on a new port. */
    char *tmpl_sql = sqlite3_mprintf("UPDATE runs SET config_json = json_set(config_json,"
                                     " '$.prompt_template', %Q)",
                                     "\n{problem}\nPlease reason step by step, and put your final "
                                     "answer within \\boxed{}.\n");
    db_exec(db, tmpl_sql);
    sqlite3_free(tmpl_sql);
    pinned_eval(&rq, reordered, db, u16, u8b, 1);
    expect_complete(&rq);
    cr_assert_eq(fs_hits(&s8b, CHAT), 1, "exactly the missing sample is sent");
    cr_assert_eq(chats(&s16, &s8), hits_before);
    cr_assert_eq(db_int(db, "SELECT count(*) FROM eval_samples"), 6);
    status = db_str(db, "SELECT status FROM runs");
    cr_assert_str_eq(status, "complete");
    free(status);
    /* The stored config names where fp8kv was served last; bf16 unchanged. */
    char *where = db_str(db, "SELECT json_extract(config_json, '$.endpoints.fp8kv') FROM runs");
    cr_assert_str_eq(where, u8b);
    free(where);
    where = db_str(db, "SELECT json_extract(config_json, '$.endpoints.bf16') FROM runs");
    cr_assert_str_eq(where, u16);
    free(where);
    fs_stop(&s16);
    fs_stop(&s8);
    fs_stop(&s8b);
}

/* A mode may have several servers (issue #18), but one server given twice
 * for a mode is a slip, refused like an effort given twice. */
Test(eval_resume, a_server_or_effort_given_twice_is_a_usage_error_before_anything)
{
    fake_server s;
    serve(&s, MODEL_M, 0);
    char u[64], db[512];
    fs_url(&s, u, sizeof u);
    snprintf(db, sizeof db, "%s/e.db", tu_dir);
    const char *traces = write_traces("t.jsonl", 2, 0, 7);
    char *out = NULL;
    int rc = tu_run_precgatef(&out, "eval --traces '%s' --endpoint bf16=%s --endpoint bf16=%s "
                              "--db '%s' --no-progress", traces, u, u, db);
    cr_assert_eq(rc, 2, "%s", out);
    char want[128];
    snprintf(want, sizeof want, "--endpoint bf16=%s is given twice", u);
    cr_assert_not_null(strstr(out, want), "%s", out);
    free(out);
    rc = tu_run_precgatef(&out, "eval --traces '%s' --endpoint bf16=%s --effort low,medium,low "
                          "--db '%s' --no-progress", traces, u, db);
    cr_assert_eq(rc, 2, "%s", out);
    cr_assert_not_null(strstr(out, "'low' is given twice"), "%s", out);
    free(out);
    cr_assert_eq(fs_hits(&s, "/health") + fs_hits(&s, "/v1/models") + fs_hits(&s, CHAT), 0);
    cr_assert_eq(access(db, F_OK), -1, "no database was even created");
    fs_stop(&s);
}

/* Monotonic seconds. */
static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* Waits until sql on db reads at least want (WAIT_S at most). */
static void wait_for(const char *db, const char *sql, long long want)
{
    const double end = now_s() + WAIT_S;
    long long v = -1;
    while ((v = db_int(db, sql)) < want && now_s() < end) usleep(POLL_MS * 1000);
    cr_assert_geq(v, want, "waited %.0f s for '%s' to reach %lld (%lld)", WAIT_S, sql, want, v);
}

/* The whole of the file at path, malloc'd. */
static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f, "%s", path);
    char *buf = calloc(1, 1 << 16);
    cr_assert_not_null(buf);
    fread(buf, 1, (1 << 16) - 1, f);
    fclose(f);
    return buf;
}

/* A slow live eval of SIG_PROBLEMS problems running in the background. */
typedef struct slow_eval {
    fake_server s;
    char db[512], log[512], args[1400];
    pid_t pid;
} slow_eval;

/* Starts a slow eval of n problems against a fresh server; returns once 2
 * samples are stored. */
static void slow_eval_start(slow_eval *se, int n)
{
    serve(&se->s, MODEL_M, SIG_REPLY_MS);
    snprintf(se->db, sizeof se->db, "%s/e.db", tu_dir);
    snprintf(se->log, sizeof se->log, "%s/eval.log", tu_dir);
    char u[64];
    fs_url(&se->s, u, sizeof u);
    const char *traces = write_traces("t.jsonl", n, 0, 7);
    snprintf(se->args, sizeof se->args, "eval --traces '%s' --endpoint bf16=%s --concurrency 2 "
             "--db '%s' --no-progress --ready-timeout 5", traces, u, se->db);
    se->pid = tu_spawn_precgate(se->args, se->log, NULL);
    wait_for(se->db, "SELECT count(*) FROM eval_samples", 2);
}

/* Sends sig to the eval and reaps it; returns its wait status. */
static int slow_eval_signal(slow_eval *se, int sig)
{
    cr_assert_eq(kill(se->pid, sig), 0);
    int wst = 0;
    cr_assert_eq(waitpid(se->pid, &wst, 0), se->pid);
    return wst;
}

/* Sends sig to a slow eval once it has stored samples and checks the
 * interrupted run; then resumes it (no --force) and checks it completes
 * with exactly the samples that were missing sent. */
static void interrupt_then_resume(int sig, int want_exit, const char *sig_name)
{
    slow_eval se;
    slow_eval_start(&se, SIG_PROBLEMS);
    const char *db = se.db;
    const int wst = slow_eval_signal(&se, sig);
    char *text = slurp(se.log);
    cr_assert(WIFEXITED(wst) && WEXITSTATUS(wst) == want_exit, "%s: want exit %d, got %s %d: %s",
              sig_name, want_exit, WIFEXITED(wst) ? "exit" : "signal",
              WIFEXITED(wst) ? WEXITSTATUS(wst) : WTERMSIG(wst), text);
    char expect[64];
    snprintf(expect, sizeof expect, "interrupted by %s", sig_name);
    cr_assert_not_null(strstr(text, expect), "%s", text);
    cr_assert_not_null(strstr(text, "--resume 1"), "%s", text);
    free(text);
    char *row = db_str(db, "SELECT status || '|' || error || '|' || (finished_at IS NOT NULL)"
                           " FROM runs WHERE id = 1");
    char want_row[96];
    snprintf(want_row, sizeof want_row, "interrupted|%s|1", expect);
    cr_assert_str_eq(row, want_row);
    free(row);
    /* What was received is kept, nothing was scored, and the samples the
     * stop dropped were really not stored. */
    const long long kept = db_int(db, "SELECT count(*) FROM eval_samples WHERE status = 'ok'");
    cr_assert(kept >= 2 && kept < SIG_PROBLEMS, "%lld samples kept", kept);
    cr_assert_eq(db_int(db, "SELECT count(*) FROM eval_samples"), kept);
    cr_assert_eq(db_int(db, "SELECT count(*) FROM eval_scores"), 0);

    /* runs says interrupted; --resume takes it without --force. */
    char *out = NULL;
    cr_assert_eq(tu_run_precgatef(&out, "runs --db '%s'", db), 0);
    cr_assert_not_null(strstr(out, "interrupted"), "%s", out);
    free(out);
    const int hits = fs_hits(&se.s, CHAT);
    fs_route(&se.s, CHAT, (fs_reply[]){{200, REPLY7, NULL, NULL, 0, 0}}, 1);
    const int rc = tu_run_precgatef(&out, "%s --resume 1", se.args);
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
    cr_assert_eq(fs_hits(&se.s, CHAT) - hits, SIG_PROBLEMS - kept, "exactly the missing are sent");
    cr_assert_eq(db_int(db, "SELECT count(*) FROM eval_samples WHERE status = 'ok'"), SIG_PROBLEMS);
    row = db_str(db, "SELECT status || '|' || ifnull(error, '-') FROM runs WHERE id = 1");
    cr_assert_str_eq(row, "complete|-");
    free(row);
    fs_stop(&se.s);
}

Test(eval_resume, sigterm_stops_stores_marks_interrupted_exits_143_and_resumes)
{
    interrupt_then_resume(SIGTERM, 143, "SIGTERM");
}

Test(eval_resume, sigint_exits_130)
{
    interrupt_then_resume(SIGINT, 130, "SIGINT");
}

Test(eval_resume, heartbeat_moves_while_samples_are_stored)
{
    slow_eval se;
    slow_eval_start(&se, HEARTBEAT_PROBLEMS);
    cr_assert_eq(db_int(se.db, "SELECT pid FROM runs WHERE id = 1"), (long long)se.pid);
    db_exec(se.db, "UPDATE runs SET heartbeat_at = '2000-01-01T00:00:00.000Z'");
    wait_for(se.db, "SELECT heartbeat_at > '2000-01-01T00:00:00.000Z' FROM runs", 1);
    slow_eval_signal(&se, SIGTERM);
    fs_stop(&se.s);
}

Test(eval_resume, killed_run_shows_interrupted_and_resumes_without_force)
{
    slow_eval se;
    slow_eval_start(&se, SIG_PROBLEMS);
    const char *db = se.db;
    const int wst = slow_eval_signal(&se, SIGKILL);
    cr_assert(WIFSIGNALED(wst) && WTERMSIG(wst) == SIGKILL);
    /* The row still says running: only a reader's probe knows better. */
    char *row = db_str(db, "SELECT status FROM runs WHERE id = 1");
    cr_assert_str_eq(row, "running");
    free(row);
    char *out = NULL;
    cr_assert_eq(tu_run_precgatef(&out, "runs --db '%s'", db), 0);
    cr_assert_not_null(strstr(out, "interrupted"), "%s", out);
    cr_assert_not_null(strstr(out, "process gone"), "%s", out);
    free(out);
    cr_assert_eq(tu_run_precgatef(&out, "runs --json --db '%s'", db), 0);
    cr_assert_not_null(strstr(out, "\"status\":\t\"interrupted\""), "%s", out);
    cr_assert_not_null(strstr(out, "\"stored_status\":\t\"running\""), "%s", out);
    cr_assert_not_null(strstr(out, "\"process\":\t\"gone\""), "%s", out);
    free(out);
    const long long kept = db_int(db, "SELECT count(*) FROM eval_samples");
    fs_route(&se.s, CHAT, (fs_reply[]){{200, REPLY7, NULL, NULL, 0, 0}}, 1);
    const int hits = fs_hits(&se.s, CHAT);
    cr_assert_eq(tu_run_precgatef(&out, "%s --resume 1", se.args), 0, "%s", out);
    free(out);
    cr_assert_eq(fs_hits(&se.s, CHAT) - hits, SIG_PROBLEMS - kept);
    row = db_str(db, "SELECT status FROM runs WHERE id = 1");
    cr_assert_str_eq(row, "complete");
    free(row);
    fs_stop(&se.s);
}
Test(eval_resume, a_run_that_may_be_alive_needs_force)
{
    fake_server s;
    serve(&s, MODEL_M, 0);
    char u[64], db[512];
    fs_url(&s, u, sizeof u);
    snprintf(db, sizeof db, "%s/e.db", tu_dir);
    const char *traces = write_traces("t.jsonl", 2, 0, 7);
    /* The eval lifecycle called directly: bf16 at u. */
    eval_lifecycle_request rq;
    lu_eval_request(&rq, traces, db);
    rq.o.modes[0] = "bf16";
    rq.o.urls[0] = u;
    rq.o.n_endpoints = 1;
    expect_complete(&rq);
    db_exec(db, "DELETE FROM eval_samples WHERE problem_id = 'p1'");
    char here[STORE_HOST_MAX];
    store_this_host(here, sizeof here);
    /* Marked running by a live process on this host (the one that started
     * this test: the lifecycle runs in the test's own), then by one on
     * another host: both refused without --force, nothing sent. */
    const char *hosts[] = {here, "elsewhere.example"};
    for (int i = 0; i < 2; i++) {
        char *sql = sqlite3_mprintf("UPDATE runs SET status = 'running', finished_at = NULL,"
                                    " host = %Q, pid = %d, heartbeat_at ="
                                    " '2026-03-04T05:06:07.000Z'", hosts[i], (int)getppid());
        db_exec(db, sql);
        sqlite3_free(sql);
        const int contacted = fs_hits(&s, CHAT) + fs_hits(&s, "/health") +
                              fs_hits(&s, "/v1/models");
        rq.resume = 1;
        rq.force = 0;
        eval_lifecycle_result res;
        pg_err err = {0};
        cr_assert_eq(lu_eval(&rq, &res, NULL, &err), PG_ERR_USAGE, "%s", err.msg);
        cr_assert_not_null(strstr(err.msg, "--force"), "%s", err.msg);
        cr_assert_not_null(strstr(err.msg, hosts[i]), "%s", err.msg);
        cr_assert_eq(fs_hits(&s, CHAT) + fs_hits(&s, "/health") + fs_hits(&s, "/v1/models"),
                     contacted, "a refused resume contacted the server");
        char *out = NULL;
        cr_assert_eq(tu_run_precgatef(&out, "runs --db '%s'", db), 0);
        cr_assert_null(strstr(out, "interrupted"), "%s", out);
        if (i == 1)
            cr_assert_not_null(strstr(out, "host elsewhere.example, pid"), "%s", out);
        free(out);
    }
    rq.force = 1;
    expect_complete(&rq);
    char *row = db_str(db, "SELECT status || '|' || host FROM runs WHERE id = 1");
    char want[STORE_HOST_MAX + 16];
    snprintf(want, sizeof want, "complete|%s", here);
    cr_assert_str_eq(row, want);
    free(row);
    fs_stop(&s);
}

/* The digest of the traces text written to name. */
static void digest_of(const char *name, const char *text, char *out)
{
    const char *path = tu_in_dir(name);
    tu_write_file(path, text, strlen(text));
    eval_traces *t = NULL;
    pg_err err = {0};
    cr_assert_eq(traces_load(path, &t, &err), PG_OK, "%s", err.msg);
    cr_assert_eq(traces_digest(t, out, TRACES_DIGEST_MAX, &err), PG_OK, "%s", err.msg);
    traces_free(t);
}

Test(eval_resume, traces_digest_covers_content_not_order_or_path)
{
    static const char base[] = "{\"id\":\"a\",\"problem\":\"1+1?\",\"answer\":2}\n"
                               "{\"id\":\"b\",\"problem\":\"2+2?\",\"answer\":4}\n";
    char d0[TRACES_DIGEST_MAX], d[TRACES_DIGEST_MAX];
    digest_of("base.jsonl", base, d0);
    cr_assert_eq(strncmp(d0, TRACES_DIGEST_SCHEME ":2:", strlen(TRACES_DIGEST_SCHEME) + 3), 0,
                 "%s", d0);
    /* The same problems reordered, with keys in another order, blank lines,
     * recorded completions and a string answer, under another name: equal. */
    digest_of("other.jsonl",
              "\n{\"answer\":\"004\",\"problem\":\"2+2?\",\"id\":\"b\"}\n\n"
              "{\"id\":\"a\",\"problem\":\"1+1?\",\"answer\":2,\"completions\":[{\"mode\":"
              "\"bf16\",\"effort\":\"low\",\"sample\":0,\"content\":\"2\"}]}\n", d);
    cr_assert_str_eq(d, d0);
    /* Any change of what is sent or graded: different. */
    const char *changed[] = {
        "{\"id\":\"a\",\"problem\":\"1+1?\",\"answer\":3}\n"
        "{\"id\":\"b\",\"problem\":\"2+2?\",\"answer\":4}\n",
        "{\"id\":\"a\",\"problem\":\"1+1 ?\",\"answer\":2}\n"
        "{\"id\":\"b\",\"problem\":\"2+2?\",\"answer\":4}\n",
        "{\"id\":\"c\",\"problem\":\"1+1?\",\"answer\":2}\n"
        "{\"id\":\"b\",\"problem\":\"2+2?\",\"answer\":4}\n",
        "{\"id\":\"a\",\"problem\":\"1+1?\",\"answer\":2}\n",
        "{\"id\":\"a\",\"problem\":\"1+1?\",\"answer\":2,\"messages\":[{\"role\":\"user\","
        "\"content\":\"1+1?\"}]}\n{\"id\":\"b\",\"problem\":\"2+2?\",\"answer\":4}\n",
        /* Field boundaries cannot shift: id "a1" + "+1?" is not "a" + "1+1?". */
        "{\"id\":\"a1\",\"problem\":\"+1?\",\"answer\":2}\n"
        "{\"id\":\"b\",\"problem\":\"2+2?\",\"answer\":4}\n",
    };
    for (size_t i = 0; i < sizeof changed / sizeof changed[0]; i++) {
        digest_of("changed.jsonl", changed[i], d);
        cr_assert_str_neq(d, d0, "change %zu kept the digest", i);
    }
}
