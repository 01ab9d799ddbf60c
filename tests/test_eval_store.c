/* test_eval_store.c: Criterion tests of the eval tables (migration 4, db/eval_store.h). */
#include <criterion/criterion.h>
#include <dirent.h>
#include <limits.h>
#include <math.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "db/eval_store.h"
#include "db/schema.h"
#include "evals/score.h"
#include "db/sql_util.h"
#include "db/store.h"
#include "testutil.h"

/* The schema version that adds the eval tables. */
#define EVAL_SCHEMA_VERSION 4 /* the migration that adds the eval tables */

/* The database file in the test's scratch directory. */
static char g_db[PATH_MAX + 16];

/* Makes the scratch directory and names the database in it. */
static void setup(void)
{
    tu_scratch_setup();
    snprintf(g_db, sizeof g_db, "%s/precgate.db", tu_dir);
}

TestSuite(eval_store, .init = setup, .fini = tu_scratch_teardown);

static pg_store *open_ok(void)
{
    pg_err err = {0};
    pg_store *s = NULL;
    cr_assert_eq(store_open(g_db, &s, &err), PG_OK, "store_open: %s", err.msg);
    return s;
}

/* The integer in the first column of sql's first row (NULL reads -999). */
static int64_t q_int(sqlite3 *db, const char *sql)
{
    sqlite3_stmt *st = NULL;
    cr_assert_eq(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK, "%s: %s", sql,
                 sqlite3_errmsg(db));
    cr_assert_eq(sqlite3_step(st), SQLITE_ROW, "%s returned no row", sql);
    int64_t v = sqlite3_column_type(st, 0) == SQLITE_NULL ? -999 : sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    return v;
}

static double q_double(sqlite3 *db, const char *sql)
{
    sqlite3_stmt *st = NULL;
    cr_assert_eq(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK, "%s: %s", sql,
                 sqlite3_errmsg(db));
    cr_assert_eq(sqlite3_step(st), SQLITE_ROW, "%s returned no row", sql);
    double v = sqlite3_column_type(st, 0) == SQLITE_NULL ? NAN : sqlite3_column_double(st, 0);
    sqlite3_finalize(st);
    return v;
}

/* The text of sql's first row, malloc'd ("(null)" for NULL). */
static char *q_text(sqlite3 *db, const char *sql)
{
    sqlite3_stmt *st = NULL;
    cr_assert_eq(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK, "%s: %s", sql,
                 sqlite3_errmsg(db));
    cr_assert_eq(sqlite3_step(st), SQLITE_ROW, "%s returned no row", sql);
    const unsigned char *t = sqlite3_column_text(st, 0);
    char *v = strdup(t ? (const char *)t : "(null)");
    sqlite3_finalize(st);
    return v;
}

static int64_t begin_run(pg_store *s)
{
    store_run_info info = {.kind = "eval"};
    int64_t id = -1;
    pg_err err = {0};
    cr_assert_eq(store_run_begin(s, &info, &id, &err), PG_OK, "%s", err.msg);
    return id;
}

/* A minimal row of aime25/effort high; attempts, tokens, latency not known. */
static eval_sample_row row(const char *mode, const char *problem, int sample,
                           eval_sample_status status, int correct)
{
    return (eval_sample_row){.eval = "aime25", .mode = mode, .effort = "high",
                             .problem_id = problem, .sample = sample, .status = status,
                             .attempts = -1, .latency_ms = NAN, .prompt_tokens = -1,
                             .completion_tokens = -1, .correct = correct};
}

static void put_ok(pg_store *s, int64_t run, eval_sample_row r)
{
    pg_err err = {0};
    cr_assert_eq(eval_store_put_sample(s, run, &r, &err), PG_OK, "%s", err.msg);
}

/* The names of table's columns, comma-joined, malloc'd. */
static char *columns(sqlite3 *db, const char *table)
{
    char sql[256];
    snprintf(sql, sizeof sql, "SELECT group_concat(name, ',') FROM "
             "(SELECT name FROM pragma_table_info('%s') ORDER BY cid)", table);  /* test only */
    return q_text(db, sql);
}

/* Asserts the three eval tables exist with their columns and run FK. */
static void check_eval_tables(sqlite3 *db)
{
    char *c = columns(db, "eval_samples");
    cr_expect_str_eq(c, "run_id,eval,mode,effort,problem_id,sample,status,attempts,latency_ms,"
                        "finish_reason,prompt_tokens,completion_tokens,content,extracted,"
                        "correct,error,server,prompt_token_ids,token_ids,token_ids_error");
    /* server: migration 14; the token ids: migration 16 */
    free(c);
    c = columns(db, "eval_scores");
    cr_expect_str_eq(c, "run_id,eval,mode,effort,n_problems,k,accuracy,stderr,ci_low,ci_high,"
                        "n_errors,n_truncated,ci_method,pass_at_json,n_empty,n_missing");
    free(c);
    c = columns(db, "eval_pairs");
    cr_expect_str_eq(c, "run_id,eval,effort,mode_a,mode_b,n_problems,mean_diff,stderr,ci_low,"
                        "ci_high,wins,losses,ties,sign_p,mde");
    free(c);
    const char *tables[] = {"eval_samples", "eval_scores", "eval_pairs"};
    for (size_t i = 0; i < 3; i++) {
        char sql[256];
        snprintf(sql, sizeof sql, "SELECT count(*) FROM pragma_foreign_key_list('%s') WHERE "
                 "\"table\" = 'runs' AND \"from\" = 'run_id' AND \"to\" = 'id'", tables[i]);
        cr_expect_eq(q_int(db, sql), 1, "%s -> runs", tables[i]);
    }
}

Test(eval_store, fresh_db_is_at_version_4_with_eval_tables)
{
    pg_store *s = open_ok();
    sqlite3 *db = store_handle(s);
    cr_assert_geq(store_latest_schema_version(), EVAL_SCHEMA_VERSION);
    cr_assert_eq(q_int(db, "PRAGMA user_version"), store_latest_schema_version());
    cr_assert_eq(store_schema_version(s), store_latest_schema_version());
    check_eval_tables(db);
    store_close(s);
}

Test(eval_store, version_3_db_migrates_to_4_keeping_rows)
{
    /* Build a version-3 database from the first three migrations. */
    sqlite3 *raw = NULL;
    cr_assert_eq(sqlite3_open(g_db, &raw), SQLITE_OK);
    tu_sql_exec(raw, "BEGIN");
    for (int i = 0; i < 3; i++) {
        tu_sql_exec(raw, schema_migrations[i].sql);
        tu_sql_exec(raw, schema_migrations[i].set_version);
    }
    tu_sql_exec(raw, "INSERT INTO runs (kind, status, started_at) VALUES "
                     "('sweep', 'running', '2025-01-01T00:00:00.000Z')");
    tu_sql_exec(raw, "COMMIT");
    cr_assert_eq(q_int(raw, "PRAGMA user_version"), 3);
    cr_assert_eq(q_int(raw, "SELECT count(*) FROM sqlite_schema WHERE name = 'eval_samples'"), 0);
    sqlite3_close(raw);

    pg_store *s = open_ok();
    sqlite3 *db = store_handle(s);
    cr_assert_eq(q_int(db, "PRAGMA user_version"), store_latest_schema_version());
    cr_expect_eq(q_int(db, "SELECT count(*) FROM runs"), 1);
    check_eval_tables(db);
    put_ok(s, 1, row("bf16", "p1", 0, EVAL_SAMPLE_OK, 1));   /* the old run takes samples */
    cr_expect_eq(q_int(db, "SELECT count(*) FROM eval_samples WHERE run_id = 1"), 1);
    store_close(s);

    /* Reopening does not migrate again. */
    s = open_ok();
    cr_expect_eq(store_schema_version(s), store_latest_schema_version());
    store_close(s);
}

Test(eval_store, sample_round_trip_every_column)
{
    pg_store *s = open_ok();
    sqlite3 *db = store_handle(s);
    int64_t run = begin_run(s);
    eval_sample_row r = {.eval = "aime25", .mode = "fp8kv", .effort = "medium",
                         .problem_id = "2025-I-7", .sample = 3, .status = EVAL_SAMPLE_TRUNCATED,
                         .attempts = 2, .latency_ms = 1234.5, .finish_reason = "length",
                         .prompt_tokens = 211, .completion_tokens = 32768,
                         .content = "so the answer is \\boxed{070}", .has_extracted = 1,
                         .extracted = 70, .correct = 1, .error = NULL};
    pg_err err = {0};
    cr_assert_eq(eval_store_put_sample(s, run, &r, &err), PG_OK, "%s", err.msg);
    sqlite3_stmt *st = NULL;
    cr_assert_eq(sqlite3_prepare_v2(db, "SELECT run_id, eval, mode, effort, problem_id, sample,"
                                    " status, attempts, latency_ms, finish_reason, prompt_tokens,"
                                    " completion_tokens, content, extracted, correct, error"
                                    " FROM eval_samples", -1, &st, NULL), SQLITE_OK);
    cr_assert_eq(sqlite3_step(st), SQLITE_ROW);
    cr_expect_eq(sqlite3_column_int64(st, 0), run);
    cr_expect_str_eq((const char *)sqlite3_column_text(st, 1), "aime25");
    cr_expect_str_eq((const char *)sqlite3_column_text(st, 2), "fp8kv");
    cr_expect_str_eq((const char *)sqlite3_column_text(st, 3), "medium");
    cr_expect_str_eq((const char *)sqlite3_column_text(st, 4), "2025-I-7");
    cr_expect_eq(sqlite3_column_int(st, 5), 3);
    cr_expect_str_eq((const char *)sqlite3_column_text(st, 6), "truncated");
    cr_expect_eq(sqlite3_column_int(st, 7), 2);
    cr_expect_eq(sqlite3_column_double(st, 8), 1234.5);
    cr_expect_str_eq((const char *)sqlite3_column_text(st, 9), "length");
    cr_expect_eq(sqlite3_column_int64(st, 10), 211);
    cr_expect_eq(sqlite3_column_int64(st, 11), 32768);
    cr_expect_str_eq((const char *)sqlite3_column_text(st, 12), "so the answer is \\boxed{070}");
    cr_expect_eq(sqlite3_column_int64(st, 13), 70);
    cr_expect_eq(sqlite3_column_int(st, 14), 1);
    cr_expect_eq(sqlite3_column_type(st, 15), SQLITE_NULL);
    cr_expect_eq(sqlite3_step(st), SQLITE_DONE);
    sqlite3_finalize(st);

    /* An error row: unknowns and correct are NULL, the message is kept. */
    eval_sample_row e = row("fp8kv", "2025-I-8", 0, EVAL_SAMPLE_ERROR, 1 /* ignored */);
    e.error = "HTTP 500 after 3 attempts";
    cr_assert_eq(eval_store_put_sample(s, run, &e, &err), PG_OK, "%s", err.msg);
    cr_expect_eq(q_int(db, "SELECT correct FROM eval_samples WHERE problem_id = '2025-I-8'"), -999);
    cr_expect_eq(q_int(db, "SELECT attempts FROM eval_samples WHERE problem_id = '2025-I-8'"), -999);
    cr_expect_eq(q_int(db, "SELECT extracted FROM eval_samples WHERE problem_id = '2025-I-8'"), -999);
    cr_expect(isnan(q_double(db, "SELECT latency_ms FROM eval_samples WHERE problem_id = '2025-I-8'")));
    char *msg = q_text(db, "SELECT error FROM eval_samples WHERE problem_id = '2025-I-8'");
    cr_expect_str_eq(msg, "HTTP 500 after 3 attempts");
    free(msg);
    store_close(s);
}

Test(eval_store, sample_commits_at_once_or_with_the_callers_transaction)
{
    pg_store *s = open_ok();
    int64_t run = begin_run(s);
    put_ok(s, run, row("bf16", "p1", 0, EVAL_SAMPLE_OK, 1));
    /* Another connection sees it: it was committed before the call returned. */
    sqlite3 *other = NULL;
    cr_assert_eq(sqlite3_open(g_db, &other), SQLITE_OK);
    cr_expect_eq(q_int(other, "SELECT count(*) FROM eval_samples"), 1);

    pg_err err = {0};
    cr_assert_eq(store_begin(s, &err), PG_OK, "%s", err.msg);
    put_ok(s, run, row("bf16", "p1", 1, EVAL_SAMPLE_OK, 0));
    cr_expect_eq(q_int(other, "SELECT count(*) FROM eval_samples"), 1, "not yet committed");
    store_rollback(s);
    cr_expect_eq(q_int(store_handle(s), "SELECT count(*) FROM eval_samples"), 1);
    sqlite3_close(other);
    store_close(s);
}

/* The statements open on db whose SQL starts with prefix: how many, and how
 * often the last one found has run (SQLITE_STMTSTATUS_RUN). */
static int open_statements(sqlite3 *db, const char *prefix, int *runs)
{
    int n = 0;
    *runs = 0;
    for (sqlite3_stmt *st = sqlite3_next_stmt(db, NULL); st != NULL; st = sqlite3_next_stmt(db, st)) {
        if (strncmp(sqlite3_sql(st), prefix, strlen(prefix)) != 0) continue;
        n++;
        *runs = sqlite3_stmt_status(st, SQLITE_STMTSTATUS_RUN, 0);
    }
    return n;
}

Test(eval_store, statements_are_prepared_once_per_store_and_reused)
{
    pg_store *s = open_ok();
    sqlite3 *db = store_handle(s);
    int64_t run = begin_run(s);
    enum { N = 50 };
    char ids[N][8];
    for (int i = 0; i < N; i++) {
        snprintf(ids[i], sizeof ids[i], "p%02d", i);
        put_ok(s, run, row("bf16", ids[i], 0, EVAL_SAMPLE_OK, i % 3 == 0));
    }
    /* A refused duplicate goes through the same statement, then the status query. */
    eval_sample_row dup = row("bf16", "p07", 0, EVAL_SAMPLE_OK, 1);
    pg_err err = {0};
    cr_expect_eq(eval_store_put_sample(s, run, &dup, &err), PG_ERR_DB);
    cr_expect(strstr(err.msg, "already stored with status 'ok'") != NULL, "%s", err.msg);
    int runs = 0;
    cr_expect_eq(open_statements(db, "INSERT INTO eval_samples", &runs), 1,
                 "one upsert statement kept for the store");
    cr_expect_eq(runs, N + 1, "the kept upsert ran for every put, %d", runs);
    cr_expect_eq(open_statements(db, "SELECT status FROM eval_samples", &runs), 1);
    cr_expect_eq(runs, 1);
    /* Same results as statements prepared per call: every row, values intact. */
    cr_expect_eq(q_int(db, "SELECT count(*) FROM eval_samples"), N);
    cr_expect_eq(q_int(db, "SELECT sum(correct) FROM eval_samples"), (N + 2) / 3);
    cr_expect_eq(q_int(db, "SELECT correct FROM eval_samples WHERE problem_id = 'p07'"), 0,
                 "the refused duplicate changed nothing");

    /* Reads reuse theirs too, and leave no read open (a write still goes through). */
    eval_key keys[2] = {{"bf16", "high", "p01", 0}, {"bf16", "high", "zz", 0}};
    size_t missing[2], n_missing = 0;
    for (int pass = 0; pass < 3; pass++) {
        cr_assert_eq(eval_store_missing(s, run, "aime25", keys, 2, missing, &n_missing, &err),
                     PG_OK, "%s", err.msg);
        cr_expect_eq(n_missing, 1);
        cr_expect_eq(missing[0], 1);
        eval_table t;
        cr_assert_eq(eval_store_load(s, run, "aime25", "bf16", "high", 0, &t, &err), PG_OK, "%s",
                     err.msg);
        cr_expect_eq(t.n_problems, N);
        eval_table_free(&t);
    }
    cr_expect_eq(open_statements(db, "SELECT 1 FROM eval_samples", &runs), 1);
    cr_expect_eq(runs, 3 * 2);
    cr_expect_eq(open_statements(db, "SELECT problem_id, sample", &runs), 1);
    cr_expect_eq(runs, 3);
    for (sqlite3_stmt *st = sqlite3_next_stmt(db, NULL); st; st = sqlite3_next_stmt(db, st))
        cr_expect(!sqlite3_stmt_busy(st), "left mid-step: %s", sqlite3_sql(st));
    put_ok(s, run, row("bf16", "zz", 0, EVAL_SAMPLE_OK, 1));
    store_close(s);
}

Test(eval_store, uniqueness_and_error_rows_replaced)
{
    pg_store *s = open_ok();
    sqlite3 *db = store_handle(s);
    int64_t run = begin_run(s);
    put_ok(s, run, row("bf16", "p1", 0, EVAL_SAMPLE_OK, 1));

    /* The same key again is refused and leaves the stored row alone. */
    eval_sample_row again = row("bf16", "p1", 0, EVAL_SAMPLE_OK, 0);
    pg_err err = {0};
    cr_expect_eq(eval_store_put_sample(s, run, &again, &err), PG_ERR_DB);
    cr_expect_not_null(strstr(err.msg, "already stored with status 'ok'"), "%s", err.msg);
    cr_expect_eq(q_int(db, "SELECT correct FROM eval_samples"), 1);
    /* An error does not overwrite a good sample either. */
    eval_sample_row worse = row("bf16", "p1", 0, EVAL_SAMPLE_ERROR, 0);
    pg_err e2 = {0};
    cr_expect_eq(eval_store_put_sample(s, run, &worse, &e2), PG_ERR_DB);
    cr_expect_eq(q_int(db, "SELECT count(*) FROM eval_samples WHERE status = 'ok'"), 1);

    /* Plain SQL meets the UNIQUE constraint. */
    cr_expect_neq(sqlite3_exec(db, "INSERT INTO eval_samples (run_id, eval, mode, effort,"
                               " problem_id, sample, status, correct) VALUES"
                               " (1, 'aime25', 'bf16', 'high', 'p1', 0, 'ok', 0)",
                               NULL, NULL, NULL), SQLITE_OK);
    /* Other key parts make other rows. */
    put_ok(s, run, row("bf16", "p1", 1, EVAL_SAMPLE_OK, 0));
    put_ok(s, run, row("fp8kv", "p1", 0, EVAL_SAMPLE_OK, 0));

    /* An error row is retried: first another error, then a success replaces it. */
    eval_sample_row e = row("bf16", "p2", 0, EVAL_SAMPLE_ERROR, 0);
    e.attempts = 3;
    put_ok(s, run, e);
    e.attempts = 4;
    put_ok(s, run, e);
    cr_expect_eq(q_int(db, "SELECT attempts FROM eval_samples WHERE problem_id = 'p2'"), 4);
    put_ok(s, run, row("bf16", "p2", 0, EVAL_SAMPLE_OK, 1));
    cr_expect_eq(q_int(db, "SELECT count(*) FROM eval_samples WHERE problem_id = 'p2'"), 1);
    char *st = q_text(db, "SELECT status || ',' || correct FROM eval_samples WHERE problem_id = 'p2'");
    cr_expect_str_eq(st, "ok,1");
    free(st);
    cr_expect_eq(q_int(db, "SELECT count(*) FROM eval_samples"), 4);

    /* CHECKs, the run FK and the contract's refusals. */
    cr_expect_neq(sqlite3_exec(db, "INSERT INTO eval_samples (run_id, eval, mode, effort,"
                               " problem_id, sample, status) VALUES"
                               " (1, 'aime25', 'bf16', 'high', 'p9', 0, 'pending')",
                               NULL, NULL, NULL), SQLITE_OK);
    cr_expect_neq(sqlite3_exec(db, "INSERT INTO eval_samples (run_id, eval, mode, effort,"
                               " problem_id, sample, status, correct) VALUES"
                               " (1, 'aime25', 'bf16', 'high', 'p9', 0, 'ok', 2)",
                               NULL, NULL, NULL), SQLITE_OK);
    eval_sample_row orphan = row("bf16", "p3", 0, EVAL_SAMPLE_OK, 1);
    pg_err e3 = {0};
    cr_expect_eq(eval_store_put_sample(s, run + 100, &orphan, &e3), PG_ERR_DB, "unknown run");
    eval_sample_row ungraded = row("bf16", "p3", 0, EVAL_SAMPLE_OK, -1);
    pg_err e4 = {0};
    cr_expect_eq(eval_store_put_sample(s, run, &ungraded, &e4), PG_ERR_INTERNAL);
    eval_sample_row missing = row("bf16", "p3", 0, EVAL_SAMPLE_MISSING, 0);
    pg_err e5 = {0};
    cr_expect_eq(eval_store_put_sample(s, run, &missing, &e5), PG_ERR_INTERNAL);
    eval_sample_row inf = row("bf16", "p3", 0, EVAL_SAMPLE_OK, 0);
    inf.latency_ms = INFINITY;
    pg_err e6 = {0};
    cr_expect_eq(eval_store_put_sample(s, run, &inf, &e6), PG_ERR_NUMERIC);
    cr_expect_eq(q_int(db, "SELECT count(*) FROM eval_samples"), 4, "nothing else stored");
    store_close(s);
}

Test(eval_store, missing_keys_for_resume)
{
    pg_store *s = open_ok();
    int64_t run = begin_run(s);
    put_ok(s, run, row("bf16", "p1", 0, EVAL_SAMPLE_OK, 1));
    put_ok(s, run, row("bf16", "p1", 1, EVAL_SAMPLE_TRUNCATED, 0));
    put_ok(s, run, row("bf16", "p2", 0, EVAL_SAMPLE_ERROR, 0));
    put_ok(s, run, row("fp8kv", "p1", 0, EVAL_SAMPLE_OK, 0));
    /* Another run's and another eval's rows do not count. */
    int64_t run2 = begin_run(s);
    put_ok(s, run2, row("fp8kv", "p2", 1, EVAL_SAMPLE_OK, 1));
    eval_sample_row other_eval = row("fp8kv", "p2", 0, EVAL_SAMPLE_OK, 1);
    other_eval.eval = "aime24";
    put_ok(s, run, other_eval);

    const eval_key planned[] = {
        {"bf16", "high", "p1", 0},   /* 0 ok: done */
        {"bf16", "high", "p1", 1},   /* 1 truncated: done */
        {"bf16", "high", "p2", 0},   /* 2 error: retry */
        {"bf16", "high", "p2", 1},   /* 3 absent */
        {"fp8kv", "high", "p1", 0},  /* 4 ok: done */
        {"fp8kv", "high", "p1", 1},  /* 5 absent */
        {"fp8kv", "high", "p2", 0},  /* 6 only under aime24 */
        {"fp8kv", "high", "p2", 1},  /* 7 only in run2 */
        {"bf16", "low", "p1", 0},    /* 8 other effort: absent */
    };
    const size_t n = sizeof planned / sizeof planned[0];
    size_t missing[sizeof planned / sizeof planned[0]];
    size_t n_missing = 99;
    pg_err err = {0};
    cr_assert_eq(eval_store_missing(s, run, "aime25", planned, n, missing, &n_missing, &err),
                 PG_OK, "%s", err.msg);
    const size_t want[] = {2, 3, 5, 6, 7, 8};
    cr_assert_eq(n_missing, sizeof want / sizeof want[0]);
    for (size_t i = 0; i < n_missing; i++) cr_expect_eq(missing[i], want[i], "missing[%zu]", i);

    /* After the retry succeeds, key 2 is done. */
    put_ok(s, run, row("bf16", "p2", 0, EVAL_SAMPLE_OK, 0));
    cr_assert_eq(eval_store_missing(s, run, "aime25", planned, n, missing, &n_missing, &err),
                 PG_OK, "%s", err.msg);
    cr_expect_eq(n_missing, 5);
    cr_expect_eq(missing[0], 3);
    store_close(s);
}

Test(eval_store, load_lines_up_problems_and_scores)
{
    pg_store *s = open_ok();
    int64_t run = begin_run(s);
    /* bf16: p1 = 1,0 ; p2 = 1,1 ; p3 absent. fp8kv: p1 = 0,error ; p3 = 1,(missing). */
    put_ok(s, run, row("bf16", "p2", 1, EVAL_SAMPLE_OK, 1));
    put_ok(s, run, row("bf16", "p1", 0, EVAL_SAMPLE_OK, 1));
    put_ok(s, run, row("bf16", "p1", 1, EVAL_SAMPLE_TRUNCATED, 0));
    put_ok(s, run, row("bf16", "p2", 0, EVAL_SAMPLE_OK, 1));
    put_ok(s, run, row("fp8kv", "p1", 0, EVAL_SAMPLE_OK, 0));
    put_ok(s, run, row("fp8kv", "p1", 1, EVAL_SAMPLE_ERROR, 0));
    put_ok(s, run, row("fp8kv", "p3", 0, EVAL_SAMPLE_OK, 1));

    eval_table a, b;
    pg_err err = {0};
    cr_assert_eq(eval_store_load(s, run, "aime25", "bf16", "high", 0, &a, &err), PG_OK, "%s",
                 err.msg);
    cr_assert_eq(eval_store_load(s, run, "aime25", "fp8kv", "high", 0, &b, &err), PG_OK, "%s",
                 err.msg);
    cr_assert_eq(a.n_problems, 3);
    cr_assert_eq(a.k, 2);
    cr_assert_eq(b.n_problems, 3);
    cr_expect_str_eq(a.problem_ids[0], "p1");
    cr_expect_str_eq(a.problem_ids[1], "p2");
    cr_expect_str_eq(a.problem_ids[2], "p3");
    cr_expect_str_eq(b.problem_ids[2], "p3");
    cr_expect_eq(a.cells[0].status, EVAL_SAMPLE_OK);
    cr_expect_eq(a.cells[0].correct, 1);
    cr_expect_eq(a.cells[1].status, EVAL_SAMPLE_TRUNCATED);
    cr_expect_eq(a.cells[1].correct, 0);
    cr_expect_eq(a.cells[4].status, EVAL_SAMPLE_MISSING);
    cr_expect_eq(b.cells[1].status, EVAL_SAMPLE_ERROR);
    cr_expect_eq(b.cells[5].status, EVAL_SAMPLE_MISSING);

    eval_score sa;
    cr_assert_eq(eval_score_compute(&a, &sa, &err), PG_OK, "%s", err.msg);
    cr_expect_eq(sa.n_scored, 2);
    cr_expect_eq(sa.n_empty, 1);
    cr_expect_eq(sa.n_missing, 2);
    cr_expect_eq(sa.n_truncated, 1);
    cr_expect(fabs(sa.accuracy - 0.75) < 1e-15, "%g", sa.accuracy);   /* (1/2 + 1) / 2 */
    eval_pair p;
    cr_assert_eq(eval_pair_compute(&a, &b, &p, &err), PG_OK, "%s", err.msg);
    cr_expect_eq(p.n_problems, 1);   /* only p1 is scored in both */
    cr_expect(fabs(p.mean_diff - 0.5) < 1e-15);
    cr_expect_eq(p.wins, 1);
    eval_score_free(&sa);
    eval_table_free(&b);

    /* A given K pads; one below the stored samples is refused. */
    eval_table c;
    cr_assert_eq(eval_store_load(s, run, "aime25", "bf16", "high", 4, &c, &err), PG_OK, "%s",
                 err.msg);
    cr_expect_eq(c.k, 4);
    cr_expect_eq(c.cells[2].status, EVAL_SAMPLE_MISSING);
    cr_expect_eq(c.cells[4].status, EVAL_SAMPLE_OK);
    eval_table_free(&c);
    pg_err e2 = {0};
    cr_expect_eq(eval_store_load(s, run, "aime25", "bf16", "high", 1, &c, &e2), PG_ERR_SHAPE);
    eval_table_free(&c);

    /* An unknown eval loads an empty table. */
    cr_assert_eq(eval_store_load(s, run, "gpqa", "bf16", "high", 0, &c, &err), PG_OK);
    cr_expect_eq(c.n_problems, 0);
    cr_expect_eq(c.k, 0);
    eval_table_free(&c);

    /* An ungraded ok row (written behind the store's back) is malformed. */
    tu_sql_exec(store_handle(s), "INSERT INTO eval_samples (run_id, eval, mode, effort, problem_id,"
                                 " sample, status) VALUES (1, 'aime25', 'bf16', 'high', 'p3', 0, 'ok')");
    pg_err e3 = {0};
    cr_expect_eq(eval_store_load(s, run, "aime25", "bf16", "high", 0, &c, &e3), PG_ERR_FORMAT);
    cr_expect_not_null(strstr(e3.msg, "not graded"), "%s", e3.msg);
    eval_table_free(&c);
    eval_table_free(&a);
    store_close(s);
}

/* A K = 2 table: p1 = 1,0 ; p2 = 1,1 ; p3 = 0,error -> means 1/2, 1, 0. */
static eval_cell score_cells[] = {
    {EVAL_SAMPLE_OK, 1}, {EVAL_SAMPLE_OK, 0},
    {EVAL_SAMPLE_OK, 1}, {EVAL_SAMPLE_OK, 1},
    {EVAL_SAMPLE_OK, 0}, {EVAL_SAMPLE_ERROR, 0},
};

Test(eval_store, scores_upsert_is_idempotent)
{
    pg_store *s = open_ok();
    sqlite3 *db = store_handle(s);
    int64_t run = begin_run(s);
    eval_table t = {.n_problems = 3, .k = 2, .cells = score_cells};
    eval_score sc;
    pg_err err = {0};
    cr_assert_eq(eval_score_compute(&t, &sc, &err), PG_OK, "%s", err.msg);
    cr_assert_eq(eval_store_put_score(s, run, "aime25", "bf16", "high", &sc, &err), PG_OK, "%s",
                 err.msg);
    cr_assert_eq(eval_store_put_score(s, run, "aime25", "bf16", "high", &sc, &err), PG_OK, "%s",
                 err.msg);
    cr_expect_eq(q_int(db, "SELECT count(*) FROM eval_scores"), 1);
    cr_expect_eq(q_int(db, "SELECT n_problems FROM eval_scores"), 3);
    cr_expect_eq(q_int(db, "SELECT k FROM eval_scores"), 2);
    cr_expect_eq(q_double(db, "SELECT accuracy FROM eval_scores"), 0.5);
    cr_expect_eq(q_double(db, "SELECT stderr FROM eval_scores"), sc.se);
    cr_expect_eq(q_double(db, "SELECT ci_low FROM eval_scores"), sc.ci_low);
    cr_expect_eq(q_double(db, "SELECT ci_high FROM eval_scores"), sc.ci_high);
    cr_expect_eq(q_int(db, "SELECT n_errors FROM eval_scores"), 1);
    cr_expect_eq(q_int(db, "SELECT n_truncated FROM eval_scores"), 0);
    cr_expect_eq(q_int(db, "SELECT n_empty FROM eval_scores"), 0);
    cr_expect_eq(q_int(db, "SELECT n_missing FROM eval_scores"), 0);
    char *m = q_text(db, "SELECT ci_method FROM eval_scores");
    cr_expect_str_eq(m, EVAL_CI_METHOD);
    free(m);
    /* pass@1 = 1/2; pass@2 over p1, p2 (p3 has one valid sample) = (1 + 1)/2. */
    char *j = q_text(db, "SELECT pass_at_json FROM eval_scores");
    cr_expect_str_eq(j, "{\"1\":0.5,\"2\":1}");
    free(j);
    cr_expect_eq(q_double(db, "SELECT json_extract(pass_at_json, '$.\"1\"') FROM eval_scores"), 0.5);

    /* Re-scoring other data replaces the row; another mode adds one. */
    eval_cell k1[] = {{EVAL_SAMPLE_OK, 1}, {EVAL_SAMPLE_ERROR, 0}, {EVAL_SAMPLE_OK, 0}};
    eval_table t1 = {.n_problems = 3, .k = 1, .cells = k1};
    eval_score s1;
    cr_assert_eq(eval_score_compute(&t1, &s1, &err), PG_OK, "%s", err.msg);
    cr_assert_eq(eval_store_put_score(s, run, "aime25", "bf16", "high", &s1, &err), PG_OK, "%s",
                 err.msg);
    cr_expect_eq(q_int(db, "SELECT count(*) FROM eval_scores"), 1);
    cr_expect_eq(q_int(db, "SELECT n_empty FROM eval_scores"), 1);
    cr_expect_eq(q_int(db, "SELECT n_problems FROM eval_scores"), 2);
    cr_assert_eq(eval_store_put_score(s, run, "aime25", "fp8kv", "high", &sc, &err), PG_OK, "%s",
                 err.msg);
    cr_expect_eq(q_int(db, "SELECT count(*) FROM eval_scores"), 2);

    /* Undefined statistics are NULL; pass@k undefined is JSON null. */
    eval_cell lone[] = {{EVAL_SAMPLE_OK, 1}, {EVAL_SAMPLE_ERROR, 0}};
    eval_table tl = {.n_problems = 1, .k = 2, .cells = lone};
    eval_score sl;
    cr_assert_eq(eval_score_compute(&tl, &sl, &err), PG_OK, "%s", err.msg);
    cr_assert_eq(eval_store_put_score(s, run, "aime25", "bf16", "low", &sl, &err), PG_OK, "%s",
                 err.msg);
    cr_expect_eq(q_int(db, "SELECT stderr IS NULL AND ci_low IS NULL AND ci_high IS NULL"
                           " FROM eval_scores WHERE effort = 'low'"), 1);
    j = q_text(db, "SELECT pass_at_json FROM eval_scores WHERE effort = 'low'");
    cr_expect_str_eq(j, "{\"1\":1,\"2\":null}");
    free(j);

    /* A pass@k that needs 17 digits (1/3) reads back to the same double. */
    eval_cell third[] = {{EVAL_SAMPLE_OK, 1}, {EVAL_SAMPLE_OK, 0}, {EVAL_SAMPLE_OK, 0}};
    eval_table tt = {.n_problems = 1, .k = 3, .cells = third};
    eval_score st3;
    cr_assert_eq(eval_score_compute(&tt, &st3, &err), PG_OK, "%s", err.msg);
    cr_assert_eq(eval_store_put_score(s, run, "aime25", "bf16", "medium", &st3, &err), PG_OK);
    j = q_text(db, "SELECT pass_at_json FROM eval_scores WHERE effort = 'medium'");
    const double got = q_double(db, "SELECT json_extract(pass_at_json, '$.\"1\"')"
                                    " FROM eval_scores WHERE effort = 'medium'");
    cr_expect_eq(got, 1.0 / 3.0, "%s read back as %.17g", j, got);
    free(j);

    /* An infinite statistic is refused. */
    sl.se = INFINITY;
    pg_err e2 = {0};
    cr_expect_eq(eval_store_put_score(s, run, "aime25", "bf16", "low", &sl, &e2), PG_ERR_NUMERIC);
    eval_score_free(&sc);
    eval_score_free(&s1);
    eval_score_free(&sl);
    eval_score_free(&st3);
    store_close(s);
}

Test(eval_store, pairs_upsert_is_idempotent)
{
    pg_store *s = open_ok();
    sqlite3 *db = store_handle(s);
    int64_t run = begin_run(s);
    eval_pair p = {.n_problems = 30, .mean_diff = -0.05, .sd = 0.2, .se = 0.2 / sqrt(30.0),
                   .ci_low = -0.12, .ci_high = 0.01, .wins = 3, .losses = 8, .ties = 19,
                   .sign_p = 0.2265625, .mde = eval_mde(0.2, 30)};
    pg_err err = {0};
    for (int i = 0; i < 2; i++)
        cr_assert_eq(eval_store_put_pair(s, run, "aime25", "high", "fp8kv", "bf16", &p, &err),
                     PG_OK, "%s", err.msg);
    cr_expect_eq(q_int(db, "SELECT count(*) FROM eval_pairs"), 1);
    cr_expect_eq(q_double(db, "SELECT mean_diff FROM eval_pairs"), -0.05);
    cr_expect_eq(q_double(db, "SELECT stderr FROM eval_pairs"), 0.2 / sqrt(30.0));
    cr_expect_eq(q_double(db, "SELECT mde FROM eval_pairs"), eval_mde(0.2, 30));
    cr_expect_eq(q_int(db, "SELECT wins * 10000 + losses * 100 + ties FROM eval_pairs"), 30819);
    cr_expect_eq(q_double(db, "SELECT sign_p FROM eval_pairs"), 0.2265625);

    p.wins = 4;
    p.mde = NAN;
    cr_assert_eq(eval_store_put_pair(s, run, "aime25", "high", "fp8kv", "bf16", &p, &err), PG_OK);
    cr_expect_eq(q_int(db, "SELECT count(*) FROM eval_pairs"), 1);
    cr_expect_eq(q_int(db, "SELECT wins FROM eval_pairs"), 4);
    cr_expect_eq(q_int(db, "SELECT mde IS NULL FROM eval_pairs"), 1);
    /* The reverse order is another pair. */
    cr_assert_eq(eval_store_put_pair(s, run, "aime25", "high", "bf16", "fp8kv", &p, &err), PG_OK);
    cr_expect_eq(q_int(db, "SELECT count(*) FROM eval_pairs"), 2);

    pg_err e2 = {0};
    cr_expect_eq(eval_store_put_pair(s, run, "aime25", "high", "bf16", "bf16", &p, &e2),
                 PG_ERR_DB, "a mode against itself");
    p.sign_p = NAN;
    pg_err e3 = {0};
    cr_expect_eq(eval_store_put_pair(s, run, "aime25", "high", "fp8kv", "bf16", &p, &e3),
                 PG_ERR_NUMERIC);
    cr_expect_eq(q_int(db, "SELECT count(*) FROM eval_pairs"), 2);
    store_close(s);
}

Test(eval_store, errors_counted_and_groups_listed_by_effort_then_mode)
{
    pg_store *s = open_ok();
    pg_err err = {0};
    const int64_t run = begin_run(s);
    put_ok(s, run, row("fp8kv", "p1", 0, EVAL_SAMPLE_OK, 1));
    put_ok(s, run, row("bf16", "p1", 0, EVAL_SAMPLE_OK, 0));
    eval_sample_row e = row("fp8kv", "p2", 0, EVAL_SAMPLE_ERROR, 0);
    e.error = "timeout";
    put_ok(s, run, e);
    eval_sample_row low = row("bf16", "p1", 0, EVAL_SAMPLE_ERROR, 0);
    low.effort = "low";
    low.error = "refused";
    put_ok(s, run, low);
    eval_sample_row other = row("bf16", "p1", 0, EVAL_SAMPLE_OK, 1);
    other.eval = "gpqa";
    put_ok(s, run, other);

    int64_t n_err = -1;
    cr_assert_eq(eval_store_count_errors(s, run, "aime25", &n_err, &err), PG_OK, "%s", err.msg);
    cr_expect_eq(n_err, 2);
    cr_assert_eq(eval_store_count_errors(s, run, "gpqa", &n_err, &err), PG_OK, "%s", err.msg);
    cr_expect_eq(n_err, 0);
    cr_assert_eq(eval_store_count_errors(s, run + 1, "aime25", &n_err, &err), PG_OK, "%s",
                 err.msg);
    cr_expect_eq(n_err, 0);

    eval_group_stored *g = NULL;
    size_t n = 0;
    cr_assert_eq(eval_store_read_groups(s, run, "aime25", &g, &n, &err), PG_OK, "%s", err.msg);
    cr_assert_eq(n, 3);
    const char *want[][2] = {{"bf16", "high"}, {"fp8kv", "high"}, {"bf16", "low"}};
    for (size_t i = 0; i < n; i++) {
        cr_expect_str_eq(g[i].mode, want[i][0], "group %zu", i);
        cr_expect_str_eq(g[i].effort, want[i][1], "group %zu", i);
    }
    eval_store_groups_free(g, n);
    cr_assert_eq(eval_store_read_groups(s, run, "nosuch", &g, &n, &err), PG_OK, "%s", err.msg);
    cr_expect_eq(n, 0);
    cr_expect_null(g);

    cr_expect_eq(eval_store_count_errors(s, run, NULL, &n_err, &err), PG_ERR_INTERNAL);
    cr_expect_eq(eval_store_count_errors(NULL, run, "aime25", &n_err, &err), PG_ERR_INTERNAL);
    cr_expect_eq(eval_store_read_groups(s, run, NULL, &g, &n, &err), PG_ERR_INTERNAL);
    eval_store_groups_free(NULL, 0);
    store_close(s);
}

/* Stores an ok sample of (eval aime25, effort) with content text (NULL: none). */
static void put_text(pg_store *s, int64_t run, const char *mode, const char *effort,
                     const char *problem, int sample, int correct, const char *text)
{
    eval_sample_row r = row(mode, problem, sample, EVAL_SAMPLE_OK, correct);
    r.effort = effort;
    r.content = text;
    put_ok(s, run, r);
}

/* Issue 27: per pair of modes of one effort, the samples graded in both,
 * how many have the same outcome and text (NULL = NULL), how many have no
 * text, and over how many problems. */
Test(eval_store, mode_agreement_counts_shared_and_identical_samples)
{
    pg_store *s = open_ok();
    pg_err err = {0};
    const int64_t run = begin_run(s);
    for (int p = 0; p < 3; p++)
        for (int k = 0; k < 2; k++) {
            char id[8];
            snprintf(id, sizeof id, "p%d", p);
            put_text(s, run, "bf16", "high", id, k, 1, "x");
            put_text(s, run, "fp8kv", "high", id, k, 1, "x");
            /* fp8qkv: one sample of text y, one wrong answer of text x */
            put_text(s, run, "fp8qkv", "high", id, k, !(p == 2 && k == 1),
                     p == 0 && k == 0 ? "y" : "x");
        }
    /* an error sample is not shared; a sample of bf16 alone is not either */
    eval_sample_row e = row("fp8kv", "p3", 0, EVAL_SAMPLE_ERROR, 0);
    e.error = "timeout";
    put_ok(s, run, e);
    put_text(s, run, "bf16", "high", "p3", 0, 1, "x");
    /* effort low: no text in either mode, and one sample only in bf16 */
    put_text(s, run, "bf16", "low", "p0", 0, 0, NULL);
    put_text(s, run, "fp8kv", "low", "p0", 0, 0, NULL);
    put_text(s, run, "bf16", "low", "p1", 0, 0, NULL);
    /* another run is never mixed in */
    const int64_t other = begin_run(s);
    put_text(s, other, "bf16", "high", "p0", 0, 0, "z");

    eval_mode_agreement *a = NULL;
    size_t n = 0;
    cr_assert_eq(eval_store_read_mode_agreement(s, run, "aime25", &a, &n, &err), PG_OK, "%s",
                 err.msg);
    cr_assert_eq(n, 4);
    static const struct {
        const char *effort, *ma, *mb;
        int64_t shared, same, no_text, problems;
    } want[] = {{"high", "bf16", "fp8kv", 6, 6, 0, 3},
                {"high", "bf16", "fp8qkv", 6, 4, 0, 3},
                {"high", "fp8kv", "fp8qkv", 6, 4, 0, 3},
                {"low", "bf16", "fp8kv", 1, 1, 1, 1}};
    for (size_t i = 0; i < n; i++) {
        cr_expect_str_eq(a[i].eval, "aime25", "row %zu", i);
        cr_expect_str_eq(a[i].effort, want[i].effort, "row %zu", i);
        cr_expect_str_eq(a[i].mode_a, want[i].ma, "row %zu", i);
        cr_expect_str_eq(a[i].mode_b, want[i].mb, "row %zu", i);
        cr_expect_eq(a[i].n_shared, want[i].shared, "row %zu", i);
        cr_expect_eq(a[i].n_same, want[i].same, "row %zu", i);
        cr_expect_eq(a[i].n_no_text, want[i].no_text, "row %zu", i);
        cr_expect_eq(a[i].n_problems, want[i].problems, "row %zu", i);
    }
    eval_store_mode_agreement_free(a, n);
    /* NULL eval: every eval of the run (here the same rows) */
    cr_assert_eq(eval_store_read_mode_agreement(s, run, NULL, &a, &n, &err), PG_OK, "%s",
                 err.msg);
    cr_expect_eq(n, 4);
    eval_store_mode_agreement_free(a, n);
    cr_assert_eq(eval_store_read_mode_agreement(s, other, NULL, &a, &n, &err), PG_OK, "%s",
                 err.msg);
    cr_expect_eq(n, 0);
    cr_expect_null(a);
    cr_expect_eq(eval_store_read_mode_agreement(s, run, NULL, NULL, &n, &err), PG_ERR_INTERNAL);
    cr_expect_eq(eval_store_read_mode_agreement(NULL, run, NULL, &a, &n, &err), PG_ERR_INTERNAL);
    eval_store_mode_agreement_free(NULL, 0);
    store_close(s);
}

