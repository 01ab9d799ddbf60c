/*
 * test_eval_servers.c: `precgate eval` with several servers per mode (issue
 * #18) end to end against loopback servers: a server answering 503 is taken
 * out while the others answer every sample, each sample stores the server
 * that answered (NULL for a replay), config_json records the servers per
 * mode, a mode whose servers all fail ends 'incomplete' without hanging, a
 * MODE=URL pair given twice is a usage error, and --resume of a multi-server
 * run may change the servers but not the modes.
 */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fake_openai_server.h"
#include "testutil.h"

TestSuite(eval_servers, .init = tu_scratch_setup, .fini = tu_scratch_teardown);

#define CHAT "/v1/chat/completions"
/* Servers of mode bf16 in these tests. */
#define N_BF16 3
/* Consecutive failures that take a server out (openai_client.h's
 * OA_SERVER_FAIL_LIMIT, which this CLI test does not include). */
#define FAIL_LIMIT 3
/* Problems in the traces and samples per problem. */
#define N_PROBLEMS 6
#define SAMPLES 2
/* Flags of every live run here: quick retries, one request per server at a
 * time, a server taken out stays out longer than any run here. */
#define FLAGS "--samples 2 --concurrency 1 --backoff 0.01 --no-progress --ready-timeout 10"

#define REPLY(text)                                                                     \
    "{\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":\"" text \
    "\"},\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":7}}"
static const fs_reply k_right = {200, REPLY("so \\\\boxed{7}"), NULL, NULL, 20, 0};
static const fs_reply k_503 = {503, "{\"error\":{\"message\":\"overloaded\"}}", NULL, NULL, 0, 0};
static const fs_reply k_400 = {400, "{\"error\":{\"message\":\"bad prompt\"}}", NULL, NULL, 0, 0};

/* Writes N_PROBLEMS problems a, b, ..., each answered 7; returns the path. */
static const char *write_traces(void)
{
    return tu_write_sevens(N_PROBLEMS);
}

/* Starts s answering chat[0..n-1]; its URL into url. */
static void start(fake_server *s, const fs_reply *chat, int n, char *url, size_t size)
{
    fs_init(s);
    fs_route_openai(s, chat, n);
    cr_assert(fs_start(s));
    fs_url(s, url, size);
}

/* The integer result of sqlite3_mprintf-formatted query (one %Q argument). */
static long long q_int(const char *fmt, const char *arg)
{
    sqlite3 *db = tu_db_open("e.db");
    const long long v = tu_sql_int(db, fmt, arg);
    sqlite3_close(db);
    return v;
}

/* The text result of the constant query, malloc'd (NULL for NULL). */
static char *q_text(const char *sql)
{
    sqlite3 *db = tu_db_open("e.db");
    char *v = tu_sql_text(db, "%s", sql);
    sqlite3_close(db);
    return v;
}

Test(eval_servers, a_503_server_is_taken_out_and_each_sample_names_its_server)
{
    const char *traces = write_traces();
    fake_server bf[N_BF16], fp;
    char ub[N_BF16][64], uf[64];
    for (int k = 0; k < N_BF16; k++) start(&bf[k], &k_right, 1, ub[k], sizeof ub[k]);
    fs_route(&bf[1], CHAT, &k_503, 1);
    start(&fp, &k_right, 1, uf, sizeof uf);
    char *out = NULL;
    const int rc = tu_run_precgatef(
        &out, "eval --traces '%s' --endpoint bf16=%s --endpoint bf16=%s --endpoint bf16=%s "
              "--endpoint fp8kv=%s --server-backoff 60 --db '%s' --output '%s' " FLAGS,
        traces, ub[0], ub[1], ub[2], uf, tu_in_dir("e.db"), tu_in_dir("r.json"));
    cr_assert_eq(rc, 0, "every sample answered by the live servers: %s", out);
    cr_assert(strstr(out, "taken out") != NULL && strstr(out, ub[1]) != NULL,
              "the taking-out is said: %s", out);
    char line[256];
    snprintf(line, sizeof line, "bf16       %s  %d answered, 0 errors", ub[0],
             fs_hits(&bf[0], CHAT));
    cr_assert(strstr(out, line) != NULL, "the summary counts per server: %s", out);
    snprintf(line, sizeof line, "%s  ", ub[1]);
    cr_assert(strstr(out, line) == NULL, "the 503 server answered nothing: %s", out);
    free(out);
    /* The results file says how many samples each server answered. */
    char *text = tu_slurp("r.json");
    cJSON *doc = cJSON_Parse(text);
    const cJSON *sv = cJSON_GetObjectItemCaseSensitive(doc, "servers"), *row;
    int rows = 0, answered = 0;
    cJSON_ArrayForEach(row, sv)
    {
        const char *url = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(row, "server"));
        const int a = (int)cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(row, "answered"));
        cr_assert(url != NULL && strcmp(url, ub[1]) != 0, "%s", text);
        if (strcmp(url, uf) == 0) cr_assert_eq(a, N_PROBLEMS * SAMPLES, "%s", text);
        answered += a;
        rows++;
    }
    cr_assert_eq(rows, 3, "bf16's two live servers and fp8kv's: %s", text);
    cr_assert_eq(answered, 2 * N_PROBLEMS * SAMPLES);
    cJSON_Delete(doc);
    free(text);
    cr_assert_eq(fs_hits(&bf[1], CHAT), FAIL_LIMIT, "out after %d failures", FAIL_LIMIT);
    const int n = N_PROBLEMS * SAMPLES;
    cr_assert_eq(q_int("SELECT count(*) FROM eval_samples WHERE status = 'ok' AND mode = %Q",
                       "bf16"), n);
    cr_assert_eq(q_int("SELECT count(*) FROM eval_samples WHERE server IS NULL%s", ""), 0);
    cr_assert_eq(q_int("SELECT count(*) FROM eval_samples WHERE server = %Q", ub[1]), 0);
    cr_assert_eq(q_int("SELECT count(*) FROM eval_samples WHERE server = %Q", uf), n);
    for (int k = 0; k < N_BF16; k += 2) {
        const long long got = q_int("SELECT count(*) FROM eval_samples WHERE server = %Q", ub[k]);
        cr_assert_eq(got, fs_hits(&bf[k], CHAT), "server %d: stored what it answered", k);
        cr_assert_gt(got, n / N_BF16 - 2, "server %d carried its share", k);
    }
    /* The config lists a mode once, its several servers as an array, and a
     * single server as the string every older run recorded. */
    char *modes = q_text("SELECT json_extract(config_json, '$.modes') FROM runs WHERE id = 1");
    cr_assert_str_eq(modes, "[\"bf16\",\"fp8kv\"]");
    free(modes);
    char *eps = q_text("SELECT json_extract(config_json, '$.endpoints') FROM runs WHERE id = 1");
    char want[512];
    snprintf(want, sizeof want, "{\"bf16\":[\"%s\",\"%s\",\"%s\"],\"fp8kv\":\"%s\"}", ub[0],
             ub[1], ub[2], uf);
    cr_assert_str_eq(eps, want);
    free(eps);
    for (int k = 0; k < N_BF16; k++) fs_stop(&bf[k]);
    fs_stop(&fp);
}

Test(eval_servers, every_server_of_a_mode_failing_leaves_errors_and_an_incomplete_run,
     .timeout = 30)
{
    const char *traces = write_traces();
    fake_server bf[2], fp;
    char ub[2][64], uf[64];
    for (int k = 0; k < 2; k++) start(&bf[k], &k_503, 1, ub[k], sizeof ub[k]);
    start(&fp, &k_right, 1, uf, sizeof uf);
    char *out = NULL;
    const int rc = tu_run_precgatef(
        &out, "eval --traces '%s' --endpoint bf16=%s --endpoint bf16=%s --endpoint fp8kv=%s "
              "--max-attempts 3 --server-backoff 0.02 --db '%s' " FLAGS,
        traces, ub[0], ub[1], uf, tu_in_dir("e.db"));
    cr_assert_eq(rc, 1, "%s", out);
    cr_assert(strstr(out, "incomplete") != NULL, "%s", out);
    free(out);
    const int n = N_PROBLEMS * SAMPLES;
    cr_assert_eq(q_int("SELECT count(*) FROM eval_samples WHERE mode = %Q AND status = 'error'"
                       " AND error LIKE '%%HTTP 503: overloaded (after 3 attempts)'",
                       "bf16"),
                 n, "every bf16 sample ends an error with its reason");
    cr_assert_eq(fs_hits(&bf[0], CHAT) + fs_hits(&bf[1], CHAT), 3 * n,
                 "max_attempts bounds each sample");
    cr_assert_eq(q_int("SELECT count(*) FROM eval_samples WHERE mode = %Q AND status = 'ok'",
                       "fp8kv"), n);
    char *status = q_text("SELECT status FROM runs WHERE id = 1");
    cr_assert_str_eq(status, "incomplete");
    free(status);
    for (int k = 0; k < 2; k++) fs_stop(&bf[k]);
    fs_stop(&fp);
}

Test(eval_servers, a_replay_stores_no_server_and_a_pair_twice_is_a_usage_error)
{
    char *out = NULL;
    int rc = tu_run_precgatef(&out, "eval --traces '%s/evals/demo/aime-style-demo.jsonl' --replay "
                                    "--db '%s' --no-progress",
                              PRECGATE_SOURCE_DIR, tu_in_dir("e.db"));
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
    cr_assert_eq(q_int("SELECT count(*) FROM eval_samples WHERE server IS NOT NULL%s", ""), 0);
    cr_assert_gt(q_int("SELECT count(*) FROM eval_samples%s", ""), 0);

    rc = tu_run_precgate("eval --traces x.jsonl --endpoint bf16=http://h:1 --endpoint "
                         "bf16=http://h:2 --endpoint bf16=http://h:1 --no-progress",
                         &out);
    cr_assert_eq(rc, 2, "%s", out);
    cr_assert(strstr(out, "--endpoint bf16=http://h:1 is given twice") != NULL, "%s", out);
    free(out);
}

Test(eval_servers, resume_of_a_multi_server_run_may_change_its_servers)
{
    const char *traces = write_traces();
    fake_server bf[N_BF16], fp;
    char ub[N_BF16][64], uf[64];
    for (int k = 0; k < N_BF16; k++) start(&bf[k], &k_right, 1, ub[k], sizeof ub[k]);
    const fs_reply first[2] = {k_400, k_right};  /* one fp8kv sample fails, not retried */
    start(&fp, first, 2, uf, sizeof uf);
    char *out = NULL;
    int rc = tu_run_precgatef(&out, "eval --traces '%s' --endpoint bf16=%s --endpoint bf16=%s "
                                    "--endpoint fp8kv=%s --db '%s' " FLAGS,
                              traces, ub[0], ub[1], uf, tu_in_dir("e.db"));
    cr_assert_eq(rc, 1, "%s", out);
    free(out);
    cr_assert_eq(q_int("SELECT count(*) FROM eval_samples WHERE status = %Q", "error"), 1);
    const int hits0 = fs_hits(&bf[0], CHAT), hits1 = fs_hits(&bf[1], CHAT);
    cr_assert_eq(hits0 + hits1, N_PROBLEMS * SAMPLES);

    /* Other bf16 servers (one gone, one new) and a second fp8kv server: the
     * eval is the same, so the resume sends only the failed sample. */
    fake_server fp2;
    char uf2[64];
    start(&fp2, &k_right, 1, uf2, sizeof uf2);
    rc = tu_run_precgatef(&out, "eval --traces '%s' --endpoint bf16=%s --endpoint bf16=%s "
                                "--endpoint fp8kv=%s --endpoint fp8kv=%s --db '%s' --resume 1 " FLAGS,
                          traces, ub[0], ub[2], uf, uf2, tu_in_dir("e.db"));
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
    cr_assert_eq(fs_hits(&bf[0], CHAT) + fs_hits(&bf[1], CHAT) + fs_hits(&bf[2], CHAT),
                 hits0 + hits1, "nothing was missing for bf16");
    cr_assert_eq(q_int("SELECT count(*) FROM eval_samples WHERE status = %Q", "error"), 0);
    cr_assert_eq(q_int("SELECT count(*) FROM eval_samples WHERE mode = 'fp8kv' AND server = %Q",
                       uf) + q_int("SELECT count(*) FROM eval_samples WHERE mode = 'fp8kv' AND "
                                   "server = %Q", uf2),
                 N_PROBLEMS * SAMPLES, "each fp8kv sample names one of its two servers");
    char *status = q_text("SELECT status FROM runs WHERE id = 1");
    cr_assert_str_eq(status, "complete");
    free(status);
    char *eps = q_text("SELECT json_extract(config_json, '$.endpoints.fp8kv') FROM runs WHERE id = 1");
    char want[256];
    snprintf(want, sizeof want, "[\"%s\",\"%s\"]", uf, uf2);
    cr_assert_str_eq(eps, want, "the config says where the resume sent");
    free(eps);

    /* A resume that drops a mode is still refused. */
    rc = tu_run_precgatef(&out, "eval --traces '%s' --endpoint bf16=%s --endpoint bf16=%s --db "
                                "'%s' --resume 1 " FLAGS,
                          traces, ub[0], ub[2], tu_in_dir("e.db"));
    cr_assert_eq(rc, 2, "%s", out);
    cr_assert(strstr(out, "modes") != NULL, "%s", out);
    free(out);
    for (int k = 0; k < N_BF16; k++) fs_stop(&bf[k]);
    fs_stop(&fp);
    fs_stop(&fp2);
}
