/*
 * test_diff_cmd.c: `precgate runs`, `history` and `diff` end to end. Each
 * test builds its database with the lifecycles called directly
 * (lifecycle_util.h: synth + two sweeps, or eval replays of the shipped
 * demo), sets known numbers with SQL UPDATE and checks
 * the exact numbers and order printed, and the --json documents through
 * cJSON. The terminal helpers of reports/term.h are checked directly.
 */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <stdarg.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "reports/term.h"
#include "lifecycle_util.h"
#include "testutil.h"

/* Most whitespace-separated tokens kept of one output line. */
#define MAX_TOKENS 16
/* Size of a command line buffer. */
#define CMD_MAX 2048
/* Size of a path buffer. */
#define PATH_LEN 512

static char g_db[PATH_LEN];

/* Each test works in its own directory, so captures have short relative names. */
static void setup(void)
{
    tu_scratch_setup();
    snprintf(g_db, sizeof g_db, "%s/t.db", tu_dir);
    cr_assert_eq(chdir(tu_dir), 0);
}

TestSuite(diff_cmd, .init = setup, .fini = tu_scratch_teardown);

/* Executes sql on the test database. */
static void sql(const char *text)
{
    sqlite3 *db = NULL;
    cr_assert_eq(sqlite3_open(g_db, &db), SQLITE_OK);
    tu_sql_exec(db, text);
    sqlite3_close(db);
}

/* Writes a 2-layer synthetic capture name in the test's directory. */
static void synth(const char *name)
{
    lu_synth(name, (lu_synth_opts){.layers = 2, .seqs = 1, .seq_len = 24});
}

/* One sweep of capture cap (a relative name) into the test database,
 * labelled label (the run lifecycle called directly). */
static void sweep(const char *cap, const char *label)
{
    lu_sweep_ok(cap, g_db, &(lu_sweep_opts){.label = label});
}

/* Two nightly sweeps (runs 1 and 2) of one capture, every whole-layer
 * rel_l2 set to 0.01. */
static void two_sweeps(void)
{
    synth("cap.safetensors");
    sweep("cap.safetensors", "nightly");
    sweep("cap.safetensors", "nightly");
    sql("UPDATE layer_metrics SET rel_l2 = 0.01 WHERE head = -1");
}

/* One replay of the shipped demo traces into the test database. */
static void demo_replay(void)
{
    lu_replay_ok(PRECGATE_SOURCE_DIR "/evals/demo/aime-style-demo.jsonl", g_db, NULL, NULL);
}

/* The k-th (0-based) line of out that starts with prefix, split on blanks
 * into tok (pointers into a static copy); returns the token count. */
static int row(const char *out, const char *prefix, int k, char *tok[MAX_TOKENS])
{
    static char line[CMD_MAX];
    const size_t plen = strlen(prefix);
    for (const char *p = out; p != NULL && *p != '\0';) {
        const char *nl = strchr(p, '\n');
        const size_t len = nl != NULL ? (size_t)(nl - p) : strlen(p);
        if (len >= plen && strncmp(p, prefix, plen) == 0 && k-- == 0) {
            cr_assert_lt(len, sizeof line);
            memcpy(line, p, len);
            line[len] = '\0';
            int n = 0;
            char *save = NULL;
            for (char *s = strtok_r(line, " \t", &save); s != NULL && n < MAX_TOKENS;
                 s = strtok_r(NULL, " \t", &save))
                tok[n++] = s;
            return n;
        }
        p = nl != NULL ? nl + 1 : NULL;
    }
    cr_assert_fail("no line %d starting with '%s' in:\n%s", k, prefix, out);
    return 0;
}

/* Checks that tok holds exactly the n strings of want. */
static void expect_tokens(char *tok[], int n, const char *const want[], int n_want,
                          const char *out)
{
    cr_assert_eq(n, n_want, "line has %d tokens, expected %d:\n%s", n, n_want, out);
    for (int i = 0; i < n; i++)
        cr_expect_str_eq(tok[i], want[i], "token %d: '%s', expected '%s'\n%s", i, tok[i], want[i],
                         out);
}

/* The JSON number at key of o, failing when it is not a number. */
static double jnum(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    cr_assert(cJSON_IsNumber(v), "'%s' is not a number", key);
    return v->valuedouble;
}

/* The JSON string at key of o (NULL when null or absent). */
static const char *jstr(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* Run 2 against run 1 after UPDATEs: fp8kv layer 1 three times worse,
 * fp8qkv layer 0 1.5 times, bf16 layer 0 half (better), and run 2 lacks
 * fp8qkv layer 1. */
static void two_sweeps_with_changes(void)
{
    two_sweeps();
    sql("UPDATE layer_metrics SET rel_l2 = 0.03 WHERE run_id = 2 AND head = -1 AND layer = 1 "
        "AND variant = 'fp8kv@fixed';"
        "UPDATE layer_metrics SET rel_l2 = 0.015 WHERE run_id = 2 AND head = -1 AND layer = 0 "
        "AND variant = 'fp8qkv@fa3';"
        "UPDATE layer_metrics SET rel_l2 = 0.005 WHERE run_id = 2 AND head = -1 AND layer = 0 "
        "AND variant = 'bf16';"
        "DELETE FROM layer_metrics WHERE run_id = 2 AND layer = 1 AND variant = 'fp8qkv@fa3';");
}

Test(diff_cmd, two_runs_worst_first_with_exact_deltas)
{
    two_sweeps_with_changes();
    char *out = NULL;
    cr_assert_eq(tu_run_precgatef(&out, "diff 1 2 --db '%s'", g_db), 0, "%s", out);
    char *t[MAX_TOKENS];
    const char *cap = "cap.safetensors";
    /* Worst first: x3, x1.5, the two unchanged (by layer), x0.5, then only in A. */
    const char *r0[] = {cap, "1", "fp8kv@fixed", "1.0000e-02", "3.0000e-02", "+2.000e-02", "3"};
    const char *r1[] = {cap, "0", "fp8qkv@fa3", "1.0000e-02", "1.5000e-02", "+5.000e-03", "1.5"};
    const char *r2[] = {cap, "0", "fp8kv@fixed", "1.0000e-02", "1.0000e-02", "+0.000e+00", "1"};
    const char *r3[] = {cap, "1", "bf16", "1.0000e-02", "1.0000e-02", "+0.000e+00", "1"};
    const char *r4[] = {cap, "0", "bf16", "1.0000e-02", "5.0000e-03", "-5.000e-03", "0.5"};
    const char *r5[] = {cap, "1", "fp8qkv@fa3", "1.0000e-02", "-", "only", "in", "A", "-"};
    const char *const *rows[] = {r0, r1, r2, r3, r4, r5};
    const int lens[] = {7, 7, 7, 7, 7, 9};
    for (int k = 0; k < 6; k++) {
        const int n = row(out, cap, k, t);
        expect_tokens(t, n, rows[k], lens[k], out);
    }
    cr_expect(strstr(out, "5 layers compared: 2 worse, 1 better, 2 unchanged, 0 undefined; "
                          "1 only in A, 0 only in B") != NULL, "%s", out);
    cr_expect(strstr(out, "A: run 1") != NULL && strstr(out, "B: run 2") != NULL, "%s", out);
    cr_expect(strchr(out, '\033') == NULL, "colour written to a pipe:\n%s", out);
    free(out);

    /* The other way round, better and worse swap. */
    cr_assert_eq(tu_run_precgatef(&out, "diff 2 1 --db '%s'", g_db), 0, "%s", out);
    const char *first[] = {cap, "0", "bf16", "5.0000e-03", "1.0000e-02", "+5.000e-03", "2"};
    expect_tokens(t, row(out, cap, 0, t), first, 7, out);
    const char *last[] = {cap, "1", "fp8qkv@fa3", "-", "1.0000e-02", "only", "in", "B", "-"};
    expect_tokens(t, row(out, cap, 5, t), last, 9, out);
    free(out);
}

Test(diff_cmd, json_numbers_are_numbers_and_inf_is_null_with_a_flag)
{
    two_sweeps_with_changes();
    sql("UPDATE layer_metrics SET rel_l2 = 9e999 WHERE run_id = 2 AND head = -1 AND layer = 0 "
        "AND variant = 'fp8kv@fixed'");
    char *out = NULL;
    cr_assert_eq(tu_run_precgatef(&out, "diff 1 2 --json --db '%s'", g_db), 0, "%s", out);
    cJSON *doc = cJSON_Parse(out);
    cr_assert_not_null(doc, "not JSON:\n%s", out);
    cr_assert(cJSON_IsArray(doc));
    cr_assert_eq(cJSON_GetArraySize(doc), 6, "%s", out);
    /* An infinite error is the worst change of all. */
    const cJSON *o = cJSON_GetArrayItem(doc, 0);
    cr_expect_str_eq(jstr(o, "type"), "layer");
    cr_expect_str_eq(jstr(o, "variant_b"), "fp8kv@fixed");
    cr_expect_eq(jnum(o, "layer"), 0);
    cr_expect_eq(jnum(o, "a"), 0.01);
    cr_expect(cJSON_IsNull(cJSON_GetObjectItem(o, "b")));
    cr_expect_str_eq(jstr(o, "b_nonfinite"), "inf");
    cr_expect(cJSON_IsNull(cJSON_GetObjectItem(o, "ratio")));
    cr_expect_str_eq(jstr(o, "ratio_nonfinite"), "inf");
    cr_expect_str_eq(jstr(o, "change"), "worse");
    cr_expect_str_eq(jstr(o, "presence"), "both");
    /* Then x3 with exact numbers. */
    o = cJSON_GetArrayItem(doc, 1);
    cr_expect_eq(jnum(o, "layer"), 1);
    cr_expect_str_eq(jstr(o, "variant_a"), "fp8kv@fixed");
    cr_expect_eq(jnum(o, "a"), 0.01);
    cr_expect_eq(jnum(o, "b"), 0.03);
    cr_expect_float_eq(jnum(o, "delta"), 0.02, 1e-15);
    cr_expect_float_eq(jnum(o, "ratio"), 3.0, 1e-12);
    cr_expect_eq(jnum(o, "run_a"), 1);
    cr_expect_eq(jnum(o, "run_b"), 2);
    cr_expect_str_eq(jstr(o, "metric"), "rel_l2");
    /* The layer only in A is there, its B a plain null. */
    o = cJSON_GetArrayItem(doc, 5);
    cr_expect_str_eq(jstr(o, "presence"), "only_a");
    cr_expect_str_eq(jstr(o, "variant_a"), "fp8qkv@fa3");
    cr_expect_eq(jnum(o, "layer"), 1);
    cr_expect(cJSON_IsNull(cJSON_GetObjectItem(o, "b")));
    cr_expect_null(cJSON_GetObjectItem(o, "b_nonfinite"));
    cr_expect(cJSON_IsNull(cJSON_GetObjectItem(o, "variant_b")));
    cJSON_Delete(doc);
    free(out);
}

Test(diff_cmd, higher_is_better_metrics_order_by_the_error)
{
    two_sweeps();
    /* cos_sim: 1 - cos grows 10x in layer 1 (0.9999 -> 0.999) and 1.1x in
     * layer 0 (0.9 -> 0.89): layer 1 is worse although its drop is smaller. */
    sql("UPDATE layer_metrics SET cos_sim = 0.9 WHERE run_id = 1 AND layer = 0;"
        "UPDATE layer_metrics SET cos_sim = 0.89 WHERE run_id = 2 AND layer = 0;"
        "UPDATE layer_metrics SET cos_sim = 0.9999 WHERE run_id = 1 AND layer = 1;"
        "UPDATE layer_metrics SET cos_sim = 0.999 WHERE run_id = 2 AND layer = 1;"
        "DELETE FROM layer_metrics WHERE variant <> 'fp8kv@fixed'");
    char *out = NULL;
    cr_assert_eq(tu_run_precgatef(&out, "diff 1 2 --metric cos_sim --db '%s'", g_db), 0, "%s", out);
    char *t[MAX_TOKENS];
    const char *r0[] = {"cap.safetensors", "1", "fp8kv@fixed", "0.999900000", "0.999000000",
                        "-9.000e-04", "0.9991"};
    const char *r1[] = {"cap.safetensors", "0", "fp8kv@fixed", "0.900000000", "0.890000000",
                        "-1.000e-02", "0.9889"};
    expect_tokens(t, row(out, "cap.safetensors", 0, t), r0, 7, out);
    expect_tokens(t, row(out, "cap.safetensors", 1, t), r1, 7, out);
    cr_expect(strstr(out, "2 layers compared: 2 worse") != NULL, "%s", out);
    free(out);
}

Test(diff_cmd, runs_of_captures_with_different_names_are_matched_by_layer)
{
    synth("cap.safetensors");
    cr_assert_eq(system("cp cap.safetensors cap-copy.safetensors"), 0);
    sweep("cap.safetensors", "nightly");
    sweep("cap-copy.safetensors", "nightly");
    sql("UPDATE layer_metrics SET rel_l2 = 0.01 WHERE head = -1;"
        "UPDATE layer_metrics SET rel_l2 = 0.04 WHERE run_id = 2 AND head = -1 AND layer = 1 "
        "AND variant = 'fp8qkv@fa3'");
    char *out = NULL;
    cr_assert_eq(tu_run_precgatef(&out, "diff 1 2 --db '%s'", g_db), 0, "%s", out);
    cr_expect(strstr(out, "layers are matched by number") != NULL, "%s", out);
    cr_expect(strstr(out, "6 layers compared: 1 worse, 0 better, 5 unchanged, 0 undefined; "
                          "0 only in A, 0 only in B") != NULL, "%s", out);
    char *t[MAX_TOKENS];
    const char *r0[] = {"cap.safetensors", "1", "fp8qkv@fa3", "1.0000e-02", "4.0000e-02",
                        "+3.000e-02", "4"};
    expect_tokens(t, row(out, "cap.safetensors", 0, t), r0, 7, out);
    free(out);
}

Test(diff_cmd, modes_of_one_sweep_run)
{
    two_sweeps();
    sql("UPDATE layer_metrics SET rel_l2 = 0.002 WHERE run_id = 1 AND head = -1 AND layer = 0 "
        "AND variant = 'bf16';"
        "UPDATE layer_metrics SET rel_l2 = 0.001 WHERE run_id = 1 AND head = -1 AND layer = 1 "
        "AND variant = 'bf16';"
        "UPDATE layer_metrics SET rel_l2 = 0.05 WHERE run_id = 1 AND head = -1 AND layer = 0 "
        "AND variant = 'fp8kv@fixed';"
        "UPDATE layer_metrics SET rel_l2 = 0.04 WHERE run_id = 1 AND head = -1 AND layer = 1 "
        "AND variant = 'fp8kv@fixed'");
    char *out = NULL;
    cr_assert_eq(tu_run_precgatef(&out, "diff --run 1 --modes fp8kv,bf16 --db '%s'", g_db),
                 0, "%s", out);
    char *t[MAX_TOKENS];
    const char *r0[] = {"cap.safetensors", "1", "fp8kv@fixed/bf16", "1.0000e-03", "4.0000e-02",
                        "+3.900e-02", "40"};
    const char *r1[] = {"cap.safetensors", "0", "fp8kv@fixed/bf16", "2.0000e-03", "5.0000e-02",
                        "+4.800e-02", "25"};
    expect_tokens(t, row(out, "cap.safetensors", 0, t), r0, 7, out);
    expect_tokens(t, row(out, "cap.safetensors", 1, t), r1, 7, out);
    cr_expect(strstr(out, "A: run 1 mode bf16 (base)") != NULL, "%s", out);
    cr_expect(strstr(out, "B: run 1 mode fp8kv") != NULL, "%s", out);
    cr_expect(strstr(out, "2 layers compared: 2 worse") != NULL, "%s", out);
    free(out);
}

Test(diff_cmd, eval_runs_interval_from_two_standard_errors)
{
    demo_replay();
    demo_replay();
    sql("UPDATE eval_scores SET accuracy = 0.8, stderr = 0.03 WHERE run_id = 1 AND mode = 'fp8kv';"
        "UPDATE eval_scores SET accuracy = 0.7, stderr = 0.04 WHERE run_id = 2 AND mode = 'fp8kv';"
        "DELETE FROM eval_scores WHERE run_id = 2 AND mode = 'fp8qkv'");
    char *out = NULL;
    cr_assert_eq(tu_run_precgatef(&out, "diff 1 2 --db '%s'", g_db), 0, "%s", out);
    cr_expect(strstr(out, "assumes the two runs are independent") != NULL, "%s", out);
    cr_expect(strstr(out, "no layer metrics in run 1 or run 2") != NULL, "%s", out);
    char *t[MAX_TOKENS];
    /* 0.7 - 0.8 +- 1.96 * sqrt(0.03^2 + 0.04^2) = -0.1 +- 0.098; the largest drop first. */
    const char *r0[] = {"aime-style-demo", "medium", "fp8kv", "0.8000", "0.7000", "-0.1000",
                        "[-0.1980,", "-0.0020]", "12/12"};
    expect_tokens(t, row(out, "aime-style-demo", 0, t), r0, 9, out);
    /* bf16 unchanged: 0 +- 1.96 * sqrt(2) * 0.043519 = 0.1206. */
    const char *r1[] = {"aime-style-demo", "medium", "bf16", "0.9167", "0.9167", "+0.0000",
                        "[-0.1206,", "+0.1206]", "12/12"};
    expect_tokens(t, row(out, "aime-style-demo", 1, t), r1, 9, out);
    const char *r2[] = {"aime-style-demo", "medium", "fp8qkv", "0.7500", "-", "only", "in", "A",
                        "-", "12/-"};
    expect_tokens(t, row(out, "aime-style-demo", 2, t), r2, 10, out);
    free(out);

    cr_assert_eq(tu_run_precgatef(&out, "diff 1 2 --json --db '%s'", g_db), 0, "%s", out);
    cJSON *doc = cJSON_Parse(out);
    cr_assert_not_null(doc, "%s", out);
    cr_assert_eq(cJSON_GetArraySize(doc), 3);
    const cJSON *o = cJSON_GetArrayItem(doc, 0);
    cr_expect_str_eq(jstr(o, "type"), "eval");
    cr_expect_str_eq(jstr(o, "mode_b"), "fp8kv");
    cr_expect_eq(jnum(o, "accuracy_a"), 0.8);
    cr_expect_eq(jnum(o, "accuracy_b"), 0.7);
    cr_expect_float_eq(jnum(o, "delta"), -0.1, 1e-12);
    cr_expect_float_eq(jnum(o, "ci_low"), -0.198, 1e-12);
    cr_expect_float_eq(jnum(o, "ci_high"), -0.002, 1e-12);
    cr_expect_str_eq(jstr(o, "interval"), "independent");
    cJSON_Delete(doc);
    free(out);
}

Test(diff_cmd, modes_of_one_eval_run_carry_the_stored_pair)
{
    demo_replay();
    sql("UPDATE eval_scores SET accuracy = 0.9 WHERE mode = 'bf16';"
        "UPDATE eval_scores SET accuracy = 0.85 WHERE mode = 'fp8kv';"
        "UPDATE eval_pairs SET mean_diff = -0.05, stderr = 0.02, ci_low = -0.09, ci_high = -0.01, "
        "wins = 1, losses = 4, ties = 7, sign_p = 0.375, mde = 0.06 WHERE mode_a = 'fp8kv'");
    char *out = NULL;
    cr_assert_eq(tu_run_precgatef(&out, "diff --run 1 --modes fp8kv,bf16 --db '%s'", g_db),
                 0, "%s", out);
    char *t[MAX_TOKENS];
    const char *r0[] = {"aime-style-demo", "medium", "fp8kv-bf16", "0.9000", "0.8500", "-0.0500",
                        "[-0.0900,", "-0.0100]", "12/12"};
    expect_tokens(t, row(out, "aime-style-demo", 0, t), r0, 9, out);
    cr_expect(strstr(out, "  aime-style-demo medium fp8kv - bf16: -0.0500  SE 0.0200  "
                          "[-0.0900, -0.0100]  1/4/7  p 0.375  MDE 0.0600  (12 problems)") != NULL,
              "%s", out);
    free(out);

    /* Reversed: B - A is bf16 - fp8kv, the stored interval negated; the row itself verbatim. */
    cr_assert_eq(tu_run_precgatef(&out, "diff --run 1 --modes bf16,fp8kv --json --db '%s'", g_db),
                 0, "%s", out);
    cJSON *doc = cJSON_Parse(out);
    cr_assert_not_null(doc, "%s", out);
    cr_assert_eq(cJSON_GetArraySize(doc), 2, "%s", out);
    const cJSON *e = cJSON_GetArrayItem(doc, 0), *p = cJSON_GetArrayItem(doc, 1);
    cr_expect_str_eq(jstr(e, "type"), "eval");
    cr_expect_str_eq(jstr(e, "mode_a"), "fp8kv");
    cr_expect_str_eq(jstr(e, "mode_b"), "bf16");
    cr_expect_float_eq(jnum(e, "delta"), 0.05, 1e-12);
    cr_expect_eq(jnum(e, "ci_low"), 0.01);
    cr_expect_eq(jnum(e, "ci_high"), 0.09);
    cr_expect_str_eq(jstr(e, "interval"), "paired");
    cr_expect_str_eq(jstr(p, "type"), "eval_pair");
    cr_expect_str_eq(jstr(p, "mode_a"), "fp8kv");
    cr_expect_str_eq(jstr(p, "mode_b"), "bf16");
    cr_expect_eq(jnum(p, "mean_diff"), -0.05);
    cr_expect_eq(jnum(p, "wins"), 1);
    cr_expect_eq(jnum(p, "losses"), 4);
    cr_expect_eq(jnum(p, "ties"), 7);
    cr_expect_eq(jnum(p, "sign_p"), 0.375);
    cJSON_Delete(doc);
    free(out);
}

Test(diff_cmd, bad_metric_exits_2_naming_it)
{
    two_sweeps();
    char *out = NULL;
    cr_expect_eq(tu_run_precgatef(&out, "diff 1 2 --metric rel_l3 --db '%s'", g_db), 2, "%s", out);
    cr_expect(strstr(out, "'rel_l3'") != NULL && strstr(out, "sqnr_db") != NULL, "%s", out);
    free(out);
    cr_expect_eq(tu_run_precgatef(&out, "history --metric 'x; DROP TABLE runs' --db '%s'", g_db),
                 2, "%s", out);
    cr_expect(strstr(out, "'x; DROP TABLE runs'") != NULL, "%s", out);
    free(out);
    cr_expect_eq(tu_run_precgatef(&out, "history --variant fp9kv --db '%s'", g_db), 2, "%s", out);
    cr_expect(strstr(out, "'fp9kv'") != NULL, "%s", out);
    free(out);
    cr_expect_eq(tu_run_precgatef(&out, "diff 1 --db '%s'", g_db), 2, "%s", out);
    free(out);
    cr_expect_eq(tu_run_precgatef(&out, "diff --run 1 --modes fp8kv --db '%s'", g_db),
                 2, "%s", out);
    free(out);
    cr_expect_eq(tu_run_precgatef(&out, "diff 1 2 --run 1 --modes fp8kv,bf16 --db '%s'", g_db),
                 2, "%s", out);
    free(out);
    cr_expect_eq(tu_run_precgatef(&out, "runs --kind sweeps --db '%s'", g_db), 2, "%s", out);
    cr_expect(strstr(out, "'sweeps'") != NULL, "%s", out);
    free(out);
    /* The table survived. */
    cr_expect_eq(tu_run_precgatef(&out, "runs --db '%s'", g_db), 0, "%s", out);
    free(out);
}

Test(diff_cmd, unknown_run_exits_1_naming_it)
{
    two_sweeps();
    char *out = NULL;
    cr_expect_eq(tu_run_precgatef(&out, "diff 1 99 --db '%s'", g_db), 1, "%s", out);
    cr_expect(strstr(out, "no run 99") != NULL, "%s", out);
    free(out);
    cr_expect_eq(tu_run_precgatef(&out, "diff --run 42 --modes fp8kv,bf16 --db '%s'", g_db),
                 1, "%s", out);
    cr_expect(strstr(out, "no run 42") != NULL, "%s", out);
    free(out);
    /* Modes the run does not have: nothing to compare. */
    cr_expect_eq(tu_run_precgatef(&out, "diff --run 1 --modes fp4,fp2 --db '%s'", g_db),
                 1, "%s", out);
    cr_expect(strstr(out, "nothing to compare") != NULL, "%s", out);
    free(out);
    /* A mistyped database is an error and is not created. */
    char missing[PATH_LEN];
    snprintf(missing, sizeof missing, "%s/missing.db", tu_dir);
    cr_expect_eq(tu_run_precgatef(&out, "runs --db '%s'", missing), 1, "%s", out);
    cr_expect(strstr(out, "does not exist") != NULL, "%s", out);
    cr_expect_neq(access(missing, F_OK), 0);
    free(out);
}

Test(diff_cmd, history_newest_last_with_worst_and_mean)
{
    two_sweeps();
    synth("other.safetensors");
    sweep("other.safetensors", "adhoc"); /* run 3: another label */
    sql("UPDATE layer_metrics SET rel_l2 = 0.01 WHERE run_id = 1 AND layer = 0 AND head = -1 "
        "AND variant = 'fp8kv@fixed';"
        "UPDATE layer_metrics SET rel_l2 = 0.04 WHERE run_id = 1 AND layer = 1 AND head = -1 "
        "AND variant = 'fp8kv@fixed';"
        "UPDATE layer_metrics SET rel_l2 = 0.02 WHERE run_id = 2 AND layer = 0 AND head = -1 "
        "AND variant = 'fp8kv@fixed';"
        "UPDATE layer_metrics SET rel_l2 = 0.03 WHERE run_id = 2 AND layer = 1 AND head = -1 "
        "AND variant = 'fp8kv@fixed';"
        /* Run 1 started last: newest last is by time, not by id. */
        "UPDATE runs SET started_at = '2031-01-02T03:04:05.000Z', "
        "finished_at = '2031-01-02T03:04:06.000Z' WHERE id = 1;"
        "UPDATE runs SET started_at = '2030-06-07T08:09:10.000Z', git_rev = 'abc123def456' "
        "WHERE id = 2");
    char *out = NULL;
    cr_assert_eq(tu_run_precgatef(&out, "history --variant fp8kv --metric rel_l2 --label nightly "
                                        "--db '%s'", g_db),
                 0, "%s", out);
    char *t[MAX_TOKENS];
    const char *r0[] = {"2", "2030-06-07", "08:09:10", "abc123def456", "2", "3.0000e-02", "1",
                        "2.5000e-02"};
    const int n0 = row(out, "    2", 0, t);
    expect_tokens(t, n0, r0, 8, out);
    const int n1 = row(out, "    1", 0, t);
    cr_assert_eq(n1, 8, "%s", out);
    cr_expect_str_eq(t[1], "2031-01-02");
    cr_expect_str_eq(t[5], "4.0000e-02");
    cr_expect_str_eq(t[6], "1");
    cr_expect_str_eq(t[7], "2.5000e-02");
    cr_expect_lt(strstr(out, "    2  2030"), strstr(out, "    1  2031"), "%s", out);
    cr_expect_null(strstr(out, "    3  "), "run 3 is not nightly:\n%s", out);
    /* A bare mode is its default profile: the same history as the full name,
     * which the header names. */
    char *full = NULL;
    cr_assert_eq(tu_run_precgatef(&full, "history --variant fp8kv@fixed --metric rel_l2 --label "
                                         "nightly --db '%s'", g_db), 0, "%s", full);
    cr_expect_str_eq(out, full);
    cr_expect(strstr(out, "fp8kv@fixed") != NULL, "%s", out);
    free(full);
    free(out);
    /* Another profile of the mode is another variant: no run has it. */
    cr_assert_eq(tu_run_precgatef(&out, "history --variant fp8kv@vllm-24197 --label nightly "
                                        "--json --db '%s'", g_db), 0, "%s", out);
    cr_expect_str_eq(out, "[]\n", "%s", out);
    free(out);
    cr_assert_eq(tu_run_precgatef(&out, "history --variant fp8kv@nope --db '%s'", g_db), 2, "%s",
                 out);
    cr_expect(strstr(out, "history: --variant: 'fp8kv@nope' is not a variant (one of bf16, "
                          "fp8kv@fixed") != NULL, "%s", out);
    free(out);

    cr_assert_eq(tu_run_precgatef(&out, "history --layer 0 --label nightly --json --db '%s'", g_db),
                 0, "%s", out);
    cJSON *doc = cJSON_Parse(out);
    cr_assert_not_null(doc, "%s", out);
    cr_assert_eq(cJSON_GetArraySize(doc), 2, "%s", out);
    cr_expect_eq(jnum(cJSON_GetArrayItem(doc, 0), "run_id"), 2);
    cr_expect_eq(jnum(cJSON_GetArrayItem(doc, 0), "value"), 0.02);
    cr_expect_eq(jnum(cJSON_GetArrayItem(doc, 1), "run_id"), 1);
    cr_expect_eq(jnum(cJSON_GetArrayItem(doc, 1), "value"), 0.01);
    cr_expect_str_eq(jstr(cJSON_GetArrayItem(doc, 1), "label"), "nightly");
    cJSON_Delete(doc);
    free(out);

    /* sqnr_db: the worst is the minimum; a failed run is left out. */
    sql("UPDATE layer_metrics SET sqnr_db = 20 WHERE run_id = 2 AND variant = 'fp8kv@fixed' "
        "AND layer = 0;"
        "UPDATE layer_metrics SET sqnr_db = 30 WHERE run_id = 2 AND variant = 'fp8kv@fixed' "
        "AND layer = 1;"
        "UPDATE runs SET status = 'failed', error = 'boom' WHERE id = 1");
    cr_assert_eq(tu_run_precgatef(&out, "history --metric sqnr_db --json --db '%s'", g_db),
                 0, "%s", out);
    doc = cJSON_Parse(out);
    cr_assert_not_null(doc, "%s", out);
    cr_assert_eq(cJSON_GetArraySize(doc), 2, "%s", out);
    /* Run 3 started now, before run 2's 2030: it comes first. */
    cr_expect_eq(jnum(cJSON_GetArrayItem(doc, 0), "run_id"), 3);
    const cJSON *o = cJSON_GetArrayItem(doc, 1);
    cr_expect_eq(jnum(o, "run_id"), 2);
    cr_expect_eq(jnum(o, "worst"), 20);
    cr_expect_eq(jnum(o, "worst_layer"), 0);
    cr_expect_eq(jnum(o, "mean"), 25);
    cr_expect_eq(jnum(o, "n_rows"), 2);
    cJSON_Delete(doc);
    free(out);
}

Test(diff_cmd, runs_lists_newest_last_with_duration_and_error)
{
    two_sweeps();
    demo_replay();
    char long_error[400];
    memset(long_error, 'e', 300);
    long_error[300] = '\0';
    char q[CMD_MAX];
    snprintf(q, sizeof q,
             "UPDATE runs SET started_at = '2000-01-01T00:00:00.000Z', "
             "finished_at = '2000-01-01T00:02:05.000Z' WHERE id = 1;"
             "UPDATE runs SET status = 'failed', error = 'capture x: layers.1.q: bad\nshape %s' "
             "WHERE id = 2",
             long_error);
    sql(q);
    char *out = NULL;
    cr_assert_eq(tu_run_precgatef(&out, "runs --db '%s'", g_db), 0, "%s", out);
    char *t[MAX_TOKENS];
    const char *r1[] = {"1", "sweep", "complete", "2000-01-01", "00:00:00", "2m05s"};
    const int n1 = row(out, "    1", 0, t);
    cr_assert_geq(n1, 8, "%s", out);
    for (int i = 0; i < 6; i++) cr_expect_str_eq(t[i], r1[i], "%s", out);
    cr_expect_str_eq(t[7], "nightly");
    const int n2 = row(out, "    2", 0, t);
    cr_assert_geq(n2, 3, "%s", out);
    cr_expect_str_eq(t[2], "failed");
    const int n3 = row(out, "    3", 0, t);
    cr_assert_geq(n3, 3, "%s", out);
    cr_expect_str_eq(t[1], "eval");
    cr_expect_lt(strstr(out, "    1  sweep"), strstr(out, "    2  sweep"));
    cr_expect_lt(strstr(out, "    2  sweep"), strstr(out, "    3  eval"));
    /* The error: one line, the newline made a blank, cut at 100 characters. */
    const char *e = strstr(out, "error: capture x: layers.1.q: bad\\x0ashape eee");
    cr_assert_not_null(e, "%s", out);
    const char *end = strchr(e, '\n');
    cr_expect_eq(end - (e + strlen("error: ")), 100, "%s", out);
    cr_expect_eq(strncmp(end - 3, "...", 3), 0, "%s", out);
    free(out);

    cr_assert_eq(tu_run_precgatef(&out, "runs --kind eval --db '%s'", g_db), 0, "%s", out);
    cr_expect_not_null(strstr(out, "    3  eval"), "%s", out);
    cr_expect_null(strstr(out, "sweep"), "%s", out);
    free(out);

    cr_assert_eq(tu_run_precgatef(&out, "runs --limit 2 --db '%s'", g_db), 0, "%s", out);
    cr_expect_null(strstr(out, "    1  sweep"), "%s", out);
    cr_expect_not_null(strstr(out, "(the 2 newest of 3 runs; --limit 0 lists all)"), "%s", out);
    free(out);

    cr_assert_eq(tu_run_precgatef(&out, "runs --json --db '%s'", g_db), 0, "%s", out);
    cJSON *doc = cJSON_Parse(out);
    cr_assert_not_null(doc, "%s", out);
    cr_assert_eq(cJSON_GetArraySize(doc), 3);
    cr_expect_float_eq(jnum(cJSON_GetArrayItem(doc, 0), "duration_s"), 125.0, 1e-3);
    const char *full = jstr(cJSON_GetArrayItem(doc, 1), "error");
    cr_assert_not_null(full);
    cr_expect_eq(strlen(full), strlen("capture x: layers.1.q: bad\nshape ") + 300);
    cr_expect_str_eq(jstr(cJSON_GetArrayItem(doc, 2), "kind"), "eval");
    cr_expect(cJSON_IsNull(cJSON_GetObjectItem(cJSON_GetArrayItem(doc, 2), "label")));
    cJSON_Delete(doc);
    free(out);
}

/* The output of precgate args run on a pseudo-terminal by script(1), with
 * env_prefix (e.g. "NO_COLOR=1") in front; caller frees. */
static char *on_terminal(const char *env_prefix, const char *args)
{
    char cmd[CMD_MAX];
    snprintf(cmd, sizeof cmd, "env -u NO_COLOR %s script -qc \"'%s' %s\" /dev/null </dev/null",
             env_prefix, PRECGATE_BIN, args);
    FILE *p = popen(cmd, "r");
    cr_assert_not_null(p);
    size_t len = 0, cap = 1 << 16;
    char *buf = malloc(cap);
    cr_assert_not_null(buf);
    size_t got;
    while ((got = fread(buf + len, 1, cap - len - 1, p)) > 0) len += got;
    buf[len] = '\0';
    cr_assert_eq(pclose(p), 0, "%s:\n%s", cmd, buf);
    return buf;
}

Test(diff_cmd, colour_on_a_terminal_red_worse_green_better)
{
    if (access("/usr/bin/script", X_OK) != 0) cr_skip_test("no script(1) to make a terminal");
    two_sweeps_with_changes();
    char args[CMD_MAX];
    snprintf(args, sizeof args, "diff 1 2 --db '%s'", g_db);
    char *out = on_terminal("", args);
    cr_expect_not_null(strstr(out, TERM_RED "+2.000e-02" TERM_RESET), "%s", out);
    cr_expect_not_null(strstr(out, TERM_RED "3" TERM_RESET), "%s", out);
    cr_expect_not_null(strstr(out, TERM_GREEN "-5.000e-03" TERM_RESET), "%s", out);
    cr_expect_null(strstr(out, TERM_RED "+0.000e+00"), "unchanged is not coloured:\n%s", out);
    free(out);
    out = on_terminal("NO_COLOR=", args);
    cr_expect_null(strchr(out, '\033'), "NO_COLOR set, yet colour:\n%s", out);
    cr_expect_not_null(strstr(out, "+2.000e-02"), "%s", out);
    free(out);
}

Test(diff_cmd, colour_only_on_a_terminal_without_no_color)
{
    cr_expect_eq(term_colour_wanted(1, NULL), 1);
    cr_expect_eq(term_colour_wanted(0, NULL), 0);
    cr_expect_eq(term_colour_wanted(1, ""), 0);
    cr_expect_eq(term_colour_wanted(1, "1"), 0);
}

Test(diff_cmd, term_fit_cleans_and_cuts_text)
{
    char buf[64];
    term_fit(buf, sizeof buf, "a\nb\033[31mc", 0, 0);
    cr_expect_str_eq(buf, "a\\x0ab\\x1b[31mc");
    /* C1 controls (CSI U+009B), DEL, BEL and a backslash: each unambiguous. */
    term_fit(buf, sizeof buf, "\xc2\x9b" "2J\x7f\a\\", 0, 0);
    cr_expect_str_eq(buf, "\\u{9b}2J\\x7f\\x07\\\\");
    /* An escape counts its characters and is never split by a cut. */
    term_fit(buf, sizeof buf, "ab\033cdef", 8, 0);
    cr_expect_str_eq(buf, "ab...");
    term_fit(buf, sizeof buf, "ab\033cdef", 9, 0);
    cr_expect_str_eq(buf, "ab\\x1b...");
    term_fit(buf, sizeof buf, "abcdefghij", 6, 0);
    cr_expect_str_eq(buf, "abc...");
    term_fit(buf, sizeof buf, "/long/path/cap.safetensors", 10, 1);
    cr_expect_str_eq(buf, "...tensors");
    term_fit(buf, sizeof buf, "h\xc3\xa9llo w\xc3\xb6rld", 7, 0); /* UTF-8 is never split */
    cr_expect_str_eq(buf, "h\xc3\xa9ll...");
    cr_expect_eq(term_width(buf), 7);
    term_fit(buf, sizeof buf, "bad \xff byte", 0, 0);
    cr_expect_str_eq(buf, "bad \\xff byte");
    term_fit(buf, sizeof buf, NULL, 5, 0);
    cr_expect_str_eq(buf, "-");
    term_fit(buf, 4, "\xc3\xa9\xc3\xa9\xc3\xa9", 0, 0); /* too small: whole code points only */
    cr_expect_str_eq(buf, "\xc3\xa9");
}
