/*
 * test_eval_cmd.c: `precgate eval` end to end: replay of the shipped demo
 * traces, and a live run against two loopback OpenAI-compatible servers
 * where one sample fails (run 'incomplete', exit 1) and --resume sends only
 * that sample again.
 */
#include <criterion/criterion.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fake_openai_server.h"
#include "testutil.h"

TestSuite(eval_cmd, .init = tu_scratch_setup, .fini = tu_scratch_teardown);

/* First column of the first row of sql on the database at path. */
static double db_num(const char *path, const char *sql)
{
    sqlite3 *db = NULL;
    cr_assert_eq(sqlite3_open(path, &db), SQLITE_OK);
    const double v = tu_sql_double(db, "%s", sql);
    sqlite3_close(db);
    return v;
}

/* The text of the first column of the first row, malloc'd. */
static char *db_text(const char *path, const char *sql)
{
    sqlite3 *db = NULL;
    cr_assert_eq(sqlite3_open(path, &db), SQLITE_OK);
    sqlite3_stmt *st = NULL;
    cr_assert_eq(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK, "%s", sqlite3_errmsg(db));
    cr_assert_eq(sqlite3_step(st), SQLITE_ROW, "%s: no row", sql);
    char *v = strdup((const char *)sqlite3_column_text(st, 0));
    sqlite3_finalize(st);
    sqlite3_close(db);
    return v;
}

Test(eval_cmd, replay_of_the_demo_scores_every_mode)
{
    char db[512], args[1024];
    snprintf(db, sizeof db, "%s/e.db", tu_dir);
    snprintf(args, sizeof args,
             "eval --traces '%s/evals/demo/aime-style-demo.jsonl' --replay --db '%s' --no-progress",
             PRECGATE_SOURCE_DIR, db);
    char *out = NULL;
    const int rc = tu_run_precgate(args, &out);
    cr_assert_eq(rc, 0, "%s", out);
    cr_assert(strstr(out, "fp8qkv - bf16") != NULL, "%s", out);
    free(out);
    cr_assert_eq(db_num(db, "SELECT count(*) FROM eval_samples WHERE run_id = 1"), 108);
    /* 33, 31 and 27 of 36 correct (tests/test_traces.c pins the same counts). */
    cr_assert_float_eq(db_num(db, "SELECT accuracy FROM eval_scores WHERE mode = 'bf16'"),
                       33.0 / 36.0, 1e-12);
    cr_assert_float_eq(db_num(db, "SELECT accuracy FROM eval_scores WHERE mode = 'fp8kv'"),
                       31.0 / 36.0, 1e-12);
    cr_assert_float_eq(db_num(db, "SELECT accuracy FROM eval_scores WHERE mode = 'fp8qkv'"),
                       27.0 / 36.0, 1e-12);
    cr_assert_eq(db_num(db, "SELECT n_truncated FROM eval_scores WHERE mode = 'fp8qkv'"), 1);
    cr_assert_eq(db_num(db, "SELECT count(*) FROM eval_pairs WHERE mode_b = 'bf16'"), 2);
    /* The per-problem means are what avg@K averages. */
    cr_assert_eq(db_num(db, "SELECT count(*) FROM eval_problem_means WHERE mode = 'bf16'"), 12);
    cr_assert_float_eq(db_num(db, "SELECT avg(mean) FROM eval_problem_means WHERE mode = 'fp8kv'"),
                       31.0 / 36.0, 1e-12);
    cr_assert_eq(db_num(db, "SELECT sum(n_valid) FROM eval_problem_means WHERE mode = 'fp8qkv'"), 36);
    cr_assert_float_eq(db_num(db, "SELECT mean_diff FROM eval_pairs WHERE mode_a = 'fp8qkv'"),
                       27.0 / 36.0 - 33.0 / 36.0, 1e-12);
    char *status = db_text(db, "SELECT status FROM runs WHERE id = 1");
    cr_assert_str_eq(status, "complete");
    free(status);
}

/* Routes a server for mode answering chat completions with replies. */
static void route_server(fake_server *s, const fs_reply *chat, int n)
{
    static const fs_reply models = {200, "{\"object\":\"list\",\"data\":[{\"id\":\"m\"}]}", NULL,
                                    NULL, 0, 0};
    static const fs_reply health = {200, "", NULL, NULL, 0, 0};
    fs_route(s, "/health", &health, 1);
    fs_route(s, "/v1/models", &models, 1);
    fs_route(s, "/v1/chat/completions", chat, n);
}

#define REPLY(text)                                                                     \
    "{\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":\"" text \
    "\"},\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":7}}"

Test(eval_cmd, live_run_with_a_failed_sample_is_incomplete_and_resumes)
{
    /* Three problems, every answer 7. */
    char traces[512], db[512];
    snprintf(traces, sizeof traces, "%s/t.jsonl", tu_dir);
    snprintf(db, sizeof db, "%s/e.db", tu_dir);
    const char *lines = "{\"id\":\"a\",\"problem\":\"3+4?\",\"answer\":7}\n"
                        "{\"id\":\"b\",\"problem\":\"14/2?\",\"answer\":\"007\"}\n"
                        "{\"id\":\"c\",\"problem\":\"10-3?\",\"answer\":7}\n";
    tu_write_file(traces, lines, strlen(lines));

    static const fs_reply right = {200, REPLY("so \\\\boxed{7}"), NULL, NULL, 0, 0};
    static const fs_reply wrong = {200, REPLY("so \\\\boxed{3}"), NULL, NULL, 0, 0};
    static const fs_reply bad = {400, "{\"error\":{\"message\":\"bad prompt\"}}", NULL, NULL, 0, 0};
    fake_server s16, s8;
    fs_init(&s16);
    fs_init(&s8);
    route_server(&s16, &right, 1);
    const fs_reply first[2] = {bad, wrong};
    route_server(&s8, first, 2);
    cr_assert(fs_start(&s16) && fs_start(&s8));
    char u16[128], u8[128], args[2048];
    fs_url(&s16, u16, sizeof u16);
    fs_url(&s8, u8, sizeof u8);
    snprintf(args, sizeof args,
             "eval --traces '%s' --endpoint bf16=%s --endpoint fp8kv=%s --samples 1 "
             "--concurrency 1 --db '%s' --no-progress --ready-timeout 10",
             traces, u16, u8, db);
    char *out = NULL;
    int rc = tu_run_precgate(args, &out);
    cr_assert_eq(rc, 1, "a failed sample must fail the command: %s", out);
    cr_assert(strstr(out, "incomplete") != NULL, "%s", out);
    free(out);
    char *status = db_text(db, "SELECT status FROM runs WHERE id = 1");
    cr_assert_str_eq(status, "incomplete");
    free(status);
    cr_assert_eq(db_num(db, "SELECT count(*) FROM eval_samples WHERE status = 'error'"), 1);
    cr_assert_eq(db_num(db, "SELECT n_errors FROM eval_scores WHERE mode = 'fp8kv'"), 1);
    /* The error is excluded, not counted wrong: 0 of the 2 answered are right. */
    cr_assert_float_eq(db_num(db, "SELECT accuracy FROM eval_scores WHERE mode = 'fp8kv'"), 0.0,
                       1e-12);
    cr_assert_float_eq(db_num(db, "SELECT accuracy FROM eval_scores WHERE mode = 'bf16'"), 1.0,
                       1e-12);
    const int hits8 = fs_hits(&s8, "/v1/chat/completions");
    cr_assert_eq(hits8, 3);

    /* A resume that leaves the failing mode out is another eval (its mode
     * set differs): refused before anything is sent, the run untouched. */
    snprintf(args, sizeof args,
             "eval --traces '%s' --endpoint bf16=%s --samples 1 --db '%s' --no-progress "
             "--resume 1",
             traces, u16, db);
    rc = tu_run_precgate(args, &out);
    cr_assert_eq(rc, 2, "%s", out);
    cr_assert(strstr(out, "modes") != NULL, "%s", out);
    free(out);
    status = db_text(db, "SELECT status FROM runs WHERE id = 1");
    cr_assert_str_eq(status, "incomplete");
    free(status);
    cr_assert_eq(fs_hits(&s16, "/v1/chat/completions"), 3, "nothing was missing for bf16");

    /* The server is fixed; --resume sends only the failed sample. */
    route_server(&s8, &right, 1);
    snprintf(args, sizeof args,
             "eval --traces '%s' --endpoint bf16=%s --endpoint fp8kv=%s --samples 1 "
             "--db '%s' --no-progress --resume 1",
             traces, u16, u8, db);
    rc = tu_run_precgate(args, &out);
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
    cr_assert_eq(fs_hits(&s8, "/v1/chat/completions"), hits8 + 1);
    cr_assert_eq(fs_hits(&s16, "/v1/chat/completions"), 3);
    status = db_text(db, "SELECT status FROM runs WHERE id = 1");
    cr_assert_str_eq(status, "complete");
    free(status);
    cr_assert_eq(db_num(db, "SELECT count(*) FROM eval_samples WHERE status = 'error'"), 0);
    cr_assert_float_eq(db_num(db, "SELECT accuracy FROM eval_scores WHERE mode = 'fp8kv'"),
                       1.0 / 3.0, 1e-12);
    fs_stop(&s16);
    fs_stop(&s8);
}

Test(eval_cmd, dead_server_is_a_clear_error_and_a_failed_run)
{
    char traces[512], db[512], args[2048];
    snprintf(traces, sizeof traces, "%s/t.jsonl", tu_dir);
    snprintf(db, sizeof db, "%s/e.db", tu_dir);
    const char *lines = "{\"id\":\"a\",\"problem\":\"3+4?\",\"answer\":7}\n";
    tu_write_file(traces, lines, strlen(lines));
    snprintf(args, sizeof args,
             "eval --traces '%s' --endpoint bf16=http://127.0.0.1:%d --db '%s' --no-progress "
             "--ready-timeout 1",
             traces, fs_dead_port(), db);
    char *out = NULL;
    const int rc = tu_run_precgate(args, &out);
    cr_assert_eq(rc, 1, "%s", out);
    cr_assert(strstr(out, "precgate: error:") != NULL && strstr(out, "127.0.0.1") != NULL, "%s",
              out);
    free(out);
    char *status = db_text(db, "SELECT status FROM runs WHERE id = 1");
    cr_assert_str_eq(status, "failed");
    free(status);
}

Test(eval_cmd, usage_errors_exit_2)
{
    const char *bad[] = {"eval", "eval --traces x.jsonl", "eval --traces x.jsonl --replay --endpoint a=b",
                         "eval --traces x.jsonl --replay --resume 1",
                         "eval --traces x.jsonl --endpoint a=http://x --force",
                         "eval --traces x.jsonl --endpoint nourl", "eval --traces x --replay --samples 0",
                         "eval --traces x --replay --extractor nope"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char *out = NULL;
        const int rc = tu_run_precgate(bad[i] + 0, &out);
        cr_assert_eq(rc, 2, "'%s' gave %d: %s", bad[i], rc, out);
        cr_assert(strstr(out, "precgate: error:") != NULL, "%s", out);
        free(out);
    }
}

Test(eval_cmd, convert_aime_writes_loadable_traces)
{
    char in[512], outp[512], args[1200];
    snprintf(in, sizeof in, "%s/aime.jsonl", tu_dir);
    snprintf(outp, sizeof outp, "%s/t.jsonl", tu_dir);
    const char *lines = "{\"ID\":\"2025-I-1\",\"problem\":\"p1\",\"answer\":\"070\"}\n"
                        "{\"ID\":\"2025-I-2\",\"problem\":\"p2\",\"answer\":588}\n";
    tu_write_file(in, lines, strlen(lines));
    snprintf(args, sizeof args, "convert-aime '%s' '%s'", in, outp);
    char *out = NULL;
    cr_assert_eq(tu_run_precgate(args, &out), 0, "%s", out);
    cr_assert(strstr(out, "2 problems") != NULL, "%s", out);
    free(out);
    FILE *f = fopen(outp, "r");
    cr_assert_not_null(f);
    char line[256];
    cr_assert_not_null(fgets(line, sizeof line, f));
    cr_assert(strstr(line, "\"id\":\"2025-I-1\"") && strstr(line, "\"answer\":70"), "%s", line);
    fclose(f);
    /* A malformed input names its line and leaves no output behind. */
    const char *badl = "{\"problem\":\"p1\"}\n";
    tu_write_file(in, badl, strlen(badl));
    snprintf(outp, sizeof outp, "%s/u.jsonl", tu_dir);
    snprintf(args, sizeof args, "convert-aime '%s' '%s'", in, outp);
    cr_assert_eq(tu_run_precgate(args, &out), 1, "%s", out);
    cr_assert(strstr(out, "aime.jsonl:1") != NULL, "%s", out);
    free(out);
    cr_assert_null(fopen(outp, "r"));
}
