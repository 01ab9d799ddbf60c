/*
 * test_eval_output.c: `precgate eval --limit N` (the first N problems, for
 * smoke tests) and `--output FILE.json` (the run's stored scores and pairs as
 * a results file), end to end on the shipped demo traces.
 */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <math.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "evals/eval_run.h"
#include "db/sql_util.h"
#include "db/store.h"
#include "testutil.h"
#include "evals/traces.h"

TestSuite(eval_output, .init = tu_scratch_setup, .fini = tu_scratch_teardown);

/* The shipped demo traces. */
#define DEMO_TRACES PRECGATE_SOURCE_DIR "/evals/demo/aime-style-demo.jsonl"
/* Its problems, and recorded samples per (problem, mode). */
#define DEMO_PROBLEMS 12
#define DEMO_SAMPLES 3

/* Opens the database at path, asserting success. */
static sqlite3 *open_db(const char *path)
{
    sqlite3 *db = NULL;
    cr_assert_eq(sqlite3_open(path, &db), SQLITE_OK);
    return db;
}

/* The file at path parsed as JSON (asserting it is). */
static cJSON *read_json(const char *path)
{
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f, "%s was not written", path);
    static char buf[1 << 16];
    const size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    cJSON *j = cJSON_Parse(buf);
    cr_assert_not_null(j, "%s is not JSON:\n%s", path, buf);
    return j;
}

/* The member name of o as a number (asserting it is one). */
static double num(const cJSON *o, const char *name)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    cr_assert(cJSON_IsNumber(v), "member %s is not a number", name);
    return v->valuedouble;
}

/* The element of array a whose string member key equals want. */
static const cJSON *find(const cJSON *a, const char *key, const char *want)
{
    const cJSON *e;
    cJSON_ArrayForEach(e, a)
    {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(e, key);
        if (cJSON_IsString(v) && strcmp(v->valuestring, want) == 0) return e;
    }
    cr_assert_fail("no element with %s = %s", key, want);
    return NULL;
}

Test(eval_output, limit_runs_the_first_n_problems)
{
    const char *db = tu_in_dir("l.db");
    char *out = NULL;
    const int rc = tu_run_precgatef(&out, "eval --traces '%s' --replay --limit 2 --db '%s' "
                                          "--no-progress", DEMO_TRACES, db);
    cr_assert_eq(rc, 0, "%s", out);
    cr_assert(strstr(out, "2 problems (first 2 of 12)") != NULL, "%s", out);
    free(out);
    eval_traces *t = NULL;
    pg_err err = {0};
    cr_assert_eq(traces_load(DEMO_TRACES, &t, &err), PG_OK, "%s", err.msg);
    sqlite3 *h = open_db(db);
    cr_assert_eq(tu_sql_int(h, "SELECT count(DISTINCT problem_id) FROM eval_samples"), 2);
    cr_assert_eq(tu_sql_int(h, "SELECT count(*) FROM eval_samples"), 2 * 3 * DEMO_SAMPLES);
    for (int i = 0; i < DEMO_PROBLEMS; i++)
        cr_assert_eq(tu_sql_int(h, "SELECT count(*) FROM eval_samples WHERE problem_id = %Q",
                                t->problems[i].id),
                     i < 2 ? 3 * DEMO_SAMPLES : 0, "problem %d (%s)", i, t->problems[i].id);
    cr_assert_eq(tu_sql_int(h, "SELECT n_problems FROM eval_scores WHERE mode = 'bf16'"), 2);
    cr_assert_eq(tu_sql_int(h, "SELECT json_extract(config_json, '$.limit') FROM runs"), 2);
    sqlite3_close(h);
    traces_free(t);

    /* traces_keep_first past the end keeps everything */
    cr_assert_eq(traces_load(DEMO_TRACES, &t, &err), PG_OK, "%s", err.msg);
    traces_keep_first(t, DEMO_PROBLEMS + 5);
    cr_assert_eq(t->n, DEMO_PROBLEMS);
    traces_keep_first(t, 1);
    cr_assert_eq(t->n, 1);
    traces_free(t);
}

Test(eval_output, output_json_holds_the_stored_scores_and_pairs)
{
    const char *db = tu_in_dir("o.db"), *json = tu_in_dir("results.json");
    char *out = NULL;
    const int rc = tu_run_precgatef(&out, "eval --traces '%s' --replay --output '%s' --db '%s' "
                                          "--no-progress", DEMO_TRACES, json, db);
    cr_assert_eq(rc, 0, "%s", out);
    cr_assert(strstr(out, "results: wrote") != NULL, "%s", out);
    free(out);
    cJSON *j = read_json(json);
    cr_assert_str_eq(cJSON_GetObjectItem(j, "format")->valuestring, "precgate.eval-results.v1");
    cr_assert_str_eq(cJSON_GetObjectItem(j, "status")->valuestring, "complete");
    cr_assert_eq(num(j, "run_id"), 1);
    cr_assert_str_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "config"), "source")->valuestring,
                     "replay");
    const cJSON *scores = cJSON_GetObjectItem(j, "scores"), *pairs = cJSON_GetObjectItem(j, "pairs");
    cr_assert_eq(cJSON_GetArraySize(scores), 3);
    cr_assert_eq(cJSON_GetArraySize(pairs), 2);
    /* 33, 31 and 27 of 36 correct (as test_eval_cmd pins), and every number
     * equal to the stored row */
    const char *modes[] = {"bf16", "fp8kv", "fp8qkv"};
    const double correct[] = {33, 31, 27};
    sqlite3 *h = open_db(db);
    for (int m = 0; m < 3; m++) {
        const cJSON *s = find(scores, "mode", modes[m]);
        cr_assert_float_eq(num(s, "accuracy"), correct[m] / 36.0, 1e-12);
        cr_assert_eq(num(s, "accuracy"), tu_sql_double(h, "SELECT accuracy FROM eval_scores "
                                                          "WHERE mode = %Q", modes[m]));
        cr_assert_eq(num(s, "stderr"), tu_sql_double(h, "SELECT stderr FROM eval_scores "
                                                        "WHERE mode = %Q", modes[m]));
        cr_assert_eq(num(s, "k"), DEMO_SAMPLES);
        cr_assert_eq(num(s, "n_problems"), DEMO_PROBLEMS);
        cr_assert_eq(num(cJSON_GetObjectItem(s, "pass_at"), "1"), num(s, "accuracy"));
    }
    const cJSON *p = find(pairs, "mode_a", "fp8qkv");
    cr_assert_str_eq(cJSON_GetObjectItem(p, "mode_b")->valuestring, "bf16");
    cr_assert_float_eq(num(p, "mean_diff"), 27.0 / 36.0 - 33.0 / 36.0, 1e-12);
    cr_assert_eq(num(p, "sign_p"), tu_sql_double(h, "SELECT sign_p FROM eval_pairs "
                                                    "WHERE mode_a = 'fp8qkv'"));
    cr_assert_eq(num(p, "wins") + num(p, "losses") + num(p, "ties"), DEMO_PROBLEMS);
    sqlite3_close(h);
    cJSON_Delete(j);
}

Test(eval_output, unwritable_output_fails_the_command_not_the_run)
{
    const char *db = tu_in_dir("u.db"), *json = tu_in_dir("no-such-dir/results.json");
    char *out = NULL;
    const int rc = tu_run_precgatef(&out, "eval --traces '%s' --replay --output '%s' --db '%s' "
                                          "--no-progress", DEMO_TRACES, json, db);
    cr_assert_eq(rc, 1, "%s", out);
    cr_assert(strstr(out, json) != NULL, "the message names the file: %s", out);
    free(out);
    cr_assert_neq(access(json, F_OK), 0);
    sqlite3 *h = open_db(db);
    cr_assert_eq(tu_sql_int(h, "SELECT count(*) FROM eval_samples"), 3 * DEMO_PROBLEMS * DEMO_SAMPLES);
    cr_assert_eq(tu_sql_int(h, "SELECT count(*) FROM runs WHERE status = 'complete'"), 1);
    sqlite3_close(h);
}

/* A recorded completion with no answer and no truncation is an error in a
 * replay, never a wrong answer: stored as 'error' naming file:line, left out
 * of the score, and the run ends incomplete with exit 1. */
Test(eval_output, replay_of_a_completion_without_content_is_an_error)
{
    const char *traces = tu_in_dir("t.jsonl"), *db = tu_in_dir("r.db");
    static const char text[] =
        "{\"id\":\"p1\",\"problem\":\"1+1?\",\"answer\":2,\"completions\":["
        "{\"mode\":\"bf16\",\"effort\":\"low\",\"sample\":0,\"content\":\"\\\\boxed{2}\","
        "\"finish_reason\":\"stop\"},"
        "{\"mode\":\"bf16\",\"effort\":\"low\",\"sample\":1,\"content\":null,"
        "\"finish_reason\":\"stop\"}]}\n"
        "{\"id\":\"p2\",\"problem\":\"2+2?\",\"answer\":4,\"completions\":["
        "{\"mode\":\"bf16\",\"effort\":\"low\",\"sample\":0,\"content\":\"\\\\boxed{5}\","
        "\"finish_reason\":\"stop\"},"
        "{\"mode\":\"bf16\",\"effort\":\"low\",\"sample\":1,\"content\":null,"
        "\"finish_reason\":\"length\"}]}\n";
    tu_write_file(traces, text, sizeof text - 1);
    char *out = NULL;
    const int rc = tu_run_precgatef(&out, "eval --traces '%s' --replay --db '%s'", traces, db);
    cr_assert_eq(rc, 1, "%s", out);
    cr_assert(strstr(out, "1 recorded completions have no answer") != NULL, "%s", out);
    free(out);
    sqlite3 *h = open_db(db);
    cr_assert_eq(tu_sql_int(h, "SELECT count(*) FROM eval_samples WHERE status = 'error' AND "
                               "problem_id = 'p1' AND sample = 1 AND correct IS NULL AND "
                               "error LIKE '%%t.jsonl:1: the recorded completion (bf16, low, "
                               "sample 1) had no content and finish_reason ''stop'''"), 1);
    /* the truncation is graded (wrong), the error is excluded: p1's mean is
     * 1 (one valid sample, right), p2's 0 (wrong, truncated): avg@K 0.5 */
    cr_assert_eq(tu_sql_int(h, "SELECT n_errors FROM eval_scores"), 1);
    cr_assert_eq(tu_sql_int(h, "SELECT n_truncated FROM eval_scores"), 1);
    cr_assert_float_eq(tu_sql_double(h, "SELECT accuracy FROM eval_scores"), 0.5, 1e-12);
    cr_assert_eq(tu_sql_int(h, "SELECT count(*) FROM runs WHERE status = 'incomplete'"), 1);
    sqlite3_close(h);
}

/* A stop signal during a replay (SIGINT/SIGTERM set the client's stop flag):
 * nothing of it is stored and the caller gets PG_ERR_INTERRUPTED, so the run
 * is marked interrupted instead of ending complete. */
Test(eval_output, replay_observes_the_stop_flag)
{
    eval_traces *t = NULL;
    pg_err err = {0};
    cr_assert_eq(traces_load(DEMO_TRACES, &t, &err), PG_OK, "%s", err.msg);
    pg_store *s = NULL;
    cr_assert_eq(store_open(tu_in_dir("stop.db"), &s, &err), PG_OK, "%s", err.msg);
    const store_run_info info = {.kind = "eval", .config_json = "{}"};
    int64_t run = -1;
    cr_assert_eq(store_run_begin(s, &info, &run, &err), PG_OK, "%s", err.msg);
    static volatile sig_atomic_t stop = 0;
    eval_run_options o = {.eval_name = "demo", .extractor = GRADE_DEFAULT};
    o.client.stop = &stop;
    eval_run_counts c;
    cr_assert_eq(eval_replay(s, run, t, &o, &c, &err), PG_OK, "%s", err.msg);  /* flag clear */
    cr_assert_eq(c.stored, 3 * DEMO_PROBLEMS * DEMO_SAMPLES);
    o.eval_name = "demo-again";
    stop = SIGTERM;
    pg_err_clear(&err);
    cr_assert_eq(eval_replay(s, run, t, &o, &c, &err), PG_ERR_INTERRUPTED);
    cr_assert(strstr(err.msg, "interrupted") != NULL, "%s", err.msg);
    cr_assert_eq(tu_sql_int(store_handle(s), "SELECT count(*) FROM eval_samples WHERE eval = "
                                             "'demo-again'"), 0);
    store_close(s);
    traces_free(t);
}
