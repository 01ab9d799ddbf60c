/*
 * test_run_resume.c: `precgate run --resume RUN --capture PATH`, and SIGINT,
 * SIGTERM and kill -9 in the middle of a sweep: what is stored stays whole,
 * a resume computes only the layers that are missing and ends with the rows
 * of a run that was never stopped, and a resume that would mix captures or
 * configurations is refused.
 *
 * The resume decisions are the run lifecycle's, called directly
 * (lifecycle_util.h); the binary runs where the CLI is the point: the
 * signals and the exit statuses they give, the resume hint and counts it
 * prints, and the options it refuses before any lifecycle.
 */
#include <criterion/criterion.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness/run_lifecycle.h"
#include "lifecycle_util.h"
#include "testutil.h"

TestSuite(run_resume, .init = tu_scratch_setup, .fini = tu_scratch_teardown, .timeout = 60);

/* A gpt-oss-shaped capture whose layers take about 10 ms each on the CPU. */
#define FAST_LAYERS 6
#define FAST_SYNTH ((lu_synth_opts){.layers = 6, .seqs = 1, .seq_len = 16})
/* About 40 ms a layer: a signal sent once layer 0 is stored lands while
 * layer 1 computes, far from the end. */
#define SLOW_LAYERS 10
#define SLOW_SYNTH ((lu_synth_opts){.layers = 10, .seqs = 1, .seq_len = 48})
/* gpt-oss-120b's query heads: a stored layer holds (heads + 1) rows per mode. */
#define HQ 64
#define N_MODES 3
#define ROWS_PER_LAYER (N_MODES * (HQ + 1))
/* quant_stats rows of a layer with all three modes: q, k, v. */
#define QUANT_PER_LAYER 3
/* How long the test waits for a background sweep to store its first layer. */
#define WAIT_ROWS_SECONDS 30
#define POLL_MS 2

/* Writes capture name into the scratch directory (synth options opts). */
static void synth(const char *name, lu_synth_opts opts)
{
    lu_synth(tu_in_dir(name), opts);
}

/* Opens the scratch database name. */
static sqlite3 *db_open(const char *name)
{
    sqlite3 *db = NULL;
    cr_assert_eq(sqlite3_open(tu_in_dir(name), &db), SQLITE_OK);
    sqlite3_busy_timeout(db, 5000);
    return db;
}

/* Asserts that run_a in database a and run_b in database b hold the same
 * rows, every metric bit for bit (REAL = REAL compares the doubles exactly;
 * IS where NULL is a stored value). */
static void expect_same_rows(const char *a, long long run_a, const char *b, long long run_b)
{
    sqlite3 *db = db_open(a);
    char *attach = sqlite3_mprintf("ATTACH %Q AS other", tu_in_dir(b));
    tu_sql_exec(db, attach);
    sqlite3_free(attach);
    static const struct { const char *table, *key, *equal; } tables[] = {
        {"layer_metrics", "capture, layer, head, variant, backend",
         "x.rel_l2 = y.rel_l2 AND x.max_abs = y.max_abs AND x.mean_abs = y.mean_abs"
         " AND x.p99_abs = y.p99_abs AND x.cos_sim IS y.cos_sim AND x.sqnr_db = y.sqnr_db"
         " AND x.nan_count = y.nan_count AND x.inf_count = y.inf_count"},
        {"quant_stats", "capture, layer, tensor",
         "x.scale = y.scale AND x.scale_source = y.scale_source"
         " AND x.saturated_frac IS y.saturated_frac AND x.underflow_frac IS y.underflow_frac"},
        {"layer_shapes", "capture, layer",
         "x.hq = y.hq AND x.hkv = y.hkv AND x.d = y.d AND x.window = y.window"
         " AND x.has_sinks = y.has_sinks"},
    };
    for (size_t i = 0; i < sizeof tables / sizeof tables[0]; i++) {
        const char *t = tables[i].table;
        const long long na = tu_sql_int(db, "SELECT count(*) FROM %s WHERE run_id = %lld", t, run_a);
        const long long nb =
            tu_sql_int(db, "SELECT count(*) FROM other.%s WHERE run_id = %lld", t, run_b);
        const long long same = tu_sql_int(db,
                                          "SELECT count(*) FROM %s x JOIN other.%s y USING (%s)"
                                          " WHERE x.run_id = %lld AND y.run_id = %lld AND %s",
                                          t, t, tables[i].key, run_a, run_b, tables[i].equal);
        cr_assert_gt(na, 0, "%s: no rows", t);
        cr_assert_eq(na, nb, "%s: %lld rows against %lld", t, na, nb);
        cr_assert_eq(same, na, "%s: %lld of %lld rows are bit-equal", t, same, na);
    }
    sqlite3_close(db);
}

/* Asserts that every layer of the run holds all its rows or none, and that
 * the stored ones are layers 0 .. k-1; returns k. */
static int whole_layers(sqlite3 *db, long long run, int n_layers)
{
    int stored = 0;
    for (int l = 0; l < n_layers; l++) {
        const long long m = tu_sql_int(db, "SELECT count(*) FROM layer_metrics WHERE run_id = %lld "
                                           "AND layer = %d", run, l);
        const long long q = tu_sql_int(db, "SELECT count(*) FROM quant_stats WHERE run_id = %lld "
                                           "AND layer = %d", run, l);
        const long long sh = tu_sql_int(db, "SELECT count(*) FROM layer_shapes WHERE run_id = "
                                            "%lld AND layer = %d", run, l);
        cr_assert((m == 0 && q == 0 && sh == 0) ||
                      (m == ROWS_PER_LAYER && q == QUANT_PER_LAYER && sh == 1),
                  "layer %d holds %lld layer_metrics, %lld quant_stats and %lld layer_shapes "
                  "rows: half stored", l, m, q, sh);
        if (m == 0) continue;
        cr_assert_eq(stored, l, "layer %d stored after a missing layer %d", l, stored);
        stored++;
    }
    return stored;
}

/* Asserts that out holds needle. */
static void expect_has(const char *out, const char *needle)
{
    cr_assert_not_null(strstr(out, needle), "output lacks \"%s\":\n%s", needle, out);
}

/* The counts a resume printed: "(S stored, C to compute)" and "C layers
 * computed, S were stored". */
static void expect_resume_counts(const char *out, int stored, int computed)
{
    char want[128];
    snprintf(want, sizeof want, "(%d stored, %d to compute)", stored, computed);
    expect_has(out, want);
    snprintf(want, sizeof want, "; %d layers computed, %d were stored)", computed, stored);
    expect_has(out, want);
}

/* Sweeps capture path cap into the scratch database db on the CPU (the
 * run lifecycle called directly; o: more run options); asserts success. */
static void sweep_into(const char *cap, const char *db, lu_sweep_opts o)
{
    lu_sweep_ok(cap, tu_in_dir(db), &o);
}

/* Resumes run 1 of the scratch database db from capture path cap (the run
 * lifecycle called directly; o: more run options) and asserts that it
 * completed, announced as resumed, with `stored` layers kept and
 * `computed` computed (what `run --resume` prints as "(S stored, C to
 * compute)" and "C layers computed, S were stored"); returns what it said. */
static char *resume_ok(const char *cap, const char *db, lu_sweep_opts o, int stored, int computed)
{
    o.resume = 1;
    run_sweep_result res;
    pg_err err = {0};
    char *said = NULL;
    cr_assert_eq(lu_sweep(cap, tu_in_dir(db), &o, &res, &said, &err), PG_OK, "resume: %s\n%s",
                 err.msg, said);
    cr_assert_eq(res.run_id, 1);
    cr_assert(res.finished);
    expect_has(said, "run 1 resumed: ");
    char want[128];
    snprintf(want, sizeof want, "(%d stored, %d to compute)", stored, computed);
    expect_has(said, want);
    cr_assert_eq(res.stats.layers_skipped, stored, "%s", said);
    cr_assert_eq(res.stats.layers_stored, computed, "%s", said);
    return said;
}

Test(run_resume, missing_last_layers_are_computed_and_equal_an_uninterrupted_run)
{
    synth("c.safetensors", FAST_SYNTH);
    char *cap = strdup(tu_in_dir("c.safetensors")); /* tu_in_dir's buffers are reused */
    sweep_into(cap, "ref.db", (lu_sweep_opts){0});
    sweep_into(cap, "r.db", (lu_sweep_opts){.threads = 2});
    /* The last two layers go missing, as after a kill between layers. */
    sqlite3 *db = db_open("r.db");
    tu_sql_exec(db, "DELETE FROM layer_metrics WHERE layer >= 4;"
                    "DELETE FROM quant_stats WHERE layer >= 4;"
                    "DELETE FROM kv_format_stats WHERE layer >= 4;"
                    "DELETE FROM layer_shapes WHERE layer >= 4;"
                    "UPDATE runs SET status = 'interrupted', error = 'interrupted by SIGTERM'");
    const long long kept_max = tu_sql_int(db, "SELECT max(rowid) FROM layer_metrics");
    const long long kept_min = tu_sql_int(db, "SELECT min(rowid) FROM layer_metrics");
    sqlite3_close(db);

    /* Another thread count is no other configuration: the CPU specification's
     * numbers do not depend on it (checked below, bit for bit). */
    free(resume_ok(cap, "r.db", (lu_sweep_opts){.threads = 1}, 4, 2));
    db = db_open("r.db");
    char *status = tu_sql_text(db, "SELECT status FROM runs WHERE id = 1");
    cr_assert_str_eq(status, "complete");
    free(status);
    /* Layers 0-3 kept their rows; 4 and 5 were written now, after them. */
    cr_assert_eq(tu_sql_int(db, "SELECT min(rowid) FROM layer_metrics WHERE layer < 4"), kept_min);
    cr_assert_eq(tu_sql_int(db, "SELECT max(rowid) FROM layer_metrics WHERE layer < 4"), kept_max);
    cr_assert_gt(tu_sql_int(db, "SELECT min(rowid) FROM layer_metrics WHERE layer >= 4"), kept_max);
    cr_assert_eq(whole_layers(db, 1, FAST_LAYERS), FAST_LAYERS);
    sqlite3_close(db);
    expect_same_rows("ref.db", 1, "r.db", 1);

    /* Resumed again, a whole run computes nothing and stays equal. */
    free(resume_ok(cap, "r.db", (lu_sweep_opts){0}, FAST_LAYERS, 0));
    expect_same_rows("ref.db", 1, "r.db", 1);
    free(cap);
}

/* The lifecycle called directly (harness/run_lifecycle.h): a resume that
 * gives no --seed takes the run's page seed, which the rows cannot show (the
 * numbers do not depend on where pages lie). */
Test(run_resume, the_lifecycle_resumes_with_the_runs_own_options)
{
    synth("c.safetensors", FAST_SYNTH);
    char *cap = strdup(tu_in_dir("c.safetensors"));
    sweep_into(cap, "ref.db", (lu_sweep_opts){.seed = 7, .given_seed = 1});
    sweep_into(cap, "r.db", (lu_sweep_opts){.seed = 7, .given_seed = 1});
    sqlite3 *db = db_open("r.db");
    tu_sql_exec(db, "DELETE FROM layer_metrics WHERE layer >= 4;"
                    "DELETE FROM quant_stats WHERE layer >= 4;"
                    "DELETE FROM kv_format_stats WHERE layer >= 4;"
                    "DELETE FROM layer_shapes WHERE layer >= 4;"
                    "UPDATE runs SET status = 'interrupted', error = 'interrupted by SIGTERM'");
    sqlite3_close(db);
    run_sweep_request rq = {.capture = cap, .db_path = tu_in_dir("r.db"), .threads = 1,
                            .scan_threads = 1, .resume = 1, .backend = "auto", .seed = 99};
    cr_assert_eq(sweep_variants_parse(SWEEP_DEFAULT_VARIANTS, &rq.variants, NULL), PG_OK);
    run_sweep_result res;
    pg_err err = {0};
    cr_assert_eq(run_lifecycle_sweep(&rq, &res, &err), PG_OK, "%s", err.msg);
    cr_assert_eq(res.run_id, 1);
    cr_assert(res.finished);
    cr_assert_eq(res.n_layers, FAST_LAYERS);
    cr_assert_eq(res.stats.layers_skipped, 4);
    cr_assert_eq(res.stats.layers_stored, 2);
    cr_assert_eq(rq.seed, 7ull, "the run's seed, not the request's default");
    cr_assert_str_eq(rq.backend, "cpu", "the backend the run ran on");
    expect_same_rows("ref.db", 1, "r.db", 1);
    free(cap);
}

Test(run_resume, a_run_swept_before_layer_shapes_counts_its_layers_and_gets_their_shapes)
{
    synth("c.safetensors", FAST_SYNTH);
    char *cap = strdup(tu_in_dir("c.safetensors")); /* tu_in_dir's buffers are reused */
    sweep_into(cap, "ref.db", (lu_sweep_opts){0});
    /* The reference holds gpt-oss-120b's shape: 64 q / 8 kv heads, D 64,
     * window 128 on the even layers, sinks. */
    sqlite3 *db = db_open("ref.db");
    cr_assert_eq(tu_sql_int(db, "SELECT count(*) FROM layer_shapes WHERE run_id = 1 AND hq = 64 "
                                "AND hkv = 8 AND d = 64 AND has_sinks = 1 AND "
                                "window = CASE layer %% 2 WHEN 0 THEN 128 ELSE 0 END"),
                 FAST_LAYERS);
    sqlite3_close(db);
    sweep_into(cap, "r.db", (lu_sweep_opts){0});
    /* Layers 0-3 stored before layer_shapes existed (no shape rows), 4 and 5 missing. */
    db = db_open("r.db");
    tu_sql_exec(db, "DELETE FROM layer_shapes;"
                    "DELETE FROM layer_metrics WHERE layer >= 4;"
                    "DELETE FROM quant_stats WHERE layer >= 4;"
                    "DELETE FROM kv_format_stats WHERE layer >= 4;"
                    "UPDATE runs SET status = 'interrupted', error = 'interrupted by SIGTERM'");
    sqlite3_close(db);
    char *out = resume_ok(cap, "r.db", (lu_sweep_opts){0}, 4, 2);
    expect_has(out, "recorded the shapes of 4 layers stored before schema version 12");
    free(out);
    db = db_open("r.db");
    cr_assert_eq(whole_layers(db, 1, FAST_LAYERS), FAST_LAYERS);
    sqlite3_close(db);
    expect_same_rows("ref.db", 1, "r.db", 1);
    free(cap);
}

/* A complete run 1 of c.safetensors in r.db, with layers 3.. deleted. */
static void run_with_missing_layers(void)
{
    synth("c.safetensors", FAST_SYNTH);
    sweep_into(tu_in_dir("c.safetensors"), "r.db", (lu_sweep_opts){0});
    sqlite3 *db = db_open("r.db");
    tu_sql_exec(db, "DELETE FROM layer_metrics WHERE layer >= 3;"
                    "DELETE FROM quant_stats WHERE layer >= 3;"
                    "DELETE FROM kv_format_stats WHERE layer >= 3;"
                    "DELETE FROM layer_shapes WHERE layer >= 3;"
                    "UPDATE runs SET status = 'failed', error = 'a failure'");
    sqlite3_close(db);
}

/* Run 1 of r.db as a refused resume must leave it: its rows counted, and
 * the fields a resume would change; malloc'd. */
static char *run_state(void)
{
    sqlite3 *db = db_open("r.db");
    char *state = tu_sql_text(db, "SELECT (SELECT count(*) FROM layer_metrics) || quote(status) || "
                                  "quote(error) || quote(heartbeat_at) || quote(finished_at) || "
                                  "quote(pid) FROM runs WHERE id = 1");
    sqlite3_close(db);
    return state;
}

/* Asserts that run 1 of r.db is as state (run_state's) says; frees it. */
static void expect_run_as(char *state)
{
    char *now = run_state();
    cr_assert_str_eq(now, state, "the refused resume changed the run");
    free(now);
    free(state);
}

/* Resumes run 1 of r.db from capture_file with the options o (the run
 * lifecycle called directly); expects a refusal of the CLI's exit status
 * want_exit (2: PG_ERR_USAGE; 1: any other failure) with a message holding
 * the needles, and the run exactly as it was. */
static void expect_refused(int want_exit, const char *capture_file, lu_sweep_opts o,
                           const char *n1, const char *n2, const char *n3)
{
    char *before = run_state();
    o.resume = 1;
    run_sweep_result res;
    pg_err err = {0};
    char *said = NULL;
    char *cap = strdup(tu_in_dir(capture_file));
    const pg_status st = lu_sweep(cap, tu_in_dir("r.db"), &o, &res, &said, &err);
    if (want_exit == 2) cr_assert_eq(st, PG_ERR_USAGE, "status %d: %s\n%s", st, err.msg, said);
    else cr_assert(st != PG_OK && st != PG_ERR_USAGE, "status %d: %s\n%s", st, err.msg, said);
    const char *needles[] = {n1, n2, n3};
    for (int i = 0; i < 3; i++)
        if (needles[i] != NULL) expect_has(err.msg, needles[i]);
    free(said);
    free(cap);
    expect_run_as(before);
}

/* Resumes run `run` of r.db from capture_file (the run lifecycle called
 * directly, no option given), which must be refused (PG_ERR_USAGE: the
 * CLI's exit 2); returns the refusal's message, malloc'd. */
static char *resume_refusal(long run, const char *capture_file)
{
    run_sweep_result res;
    pg_err err = {0};
    char *cap = strdup(tu_in_dir(capture_file));
    cr_assert_eq(lu_sweep(cap, tu_in_dir("r.db"), &(lu_sweep_opts){.resume = run}, &res, NULL,
                          &err), PG_ERR_USAGE, "%s", err.msg);
    free(cap);
    char *msg = strdup(err.msg);
    cr_assert_not_null(msg);
    return msg;
}

/* `run --resume 1 --capture c.safetensors` on r.db with extra options the
 * CLI refuses (exit 2, its error printer) before any lifecycle; the run
 * exactly as it was. */
static void expect_cli_refused(const char *extra, const char *needle)
{
    char *before = run_state();
    char *out = NULL;
    const int rc = tu_run_precgatef(&out, "run --resume 1 --capture '%s' --db '%s' --no-progress %s",
                                    tu_in_dir("c.safetensors"), tu_in_dir("r.db"), extra);
    cr_assert_eq(rc, 2, "resume %s: exit %d: %s", extra, rc, out);
    expect_has(out, "precgate: error: ");
    expect_has(out, needle);
    free(out);
    expect_run_as(before);
}

Test(run_resume, another_capture_of_the_same_shape_is_refused_naming_both_digests)
{
    run_with_missing_layers();
    sqlite3 *db = db_open("r.db");
    char *digest = tu_sql_text(db, "SELECT json_extract(config_json, '$.capture_digest') FROM runs");
    sqlite3_close(db);
    cr_assert_eq(strncmp(digest, "xxh3-128:", 9), 0, "config_json digest '%s'", digest);
    /* One bit of one value of layer 4's k: same shape, same metadata. */
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "cp '%s' '%s'", tu_in_dir("c.safetensors"), tu_in_dir("d.safetensors"));
    cr_assert_eq(system(cmd), 0);
    tu_flip_tensor_bit(tu_in_dir("d.safetensors"), "layers.4.k", 6);
    char stored[128];
    snprintf(stored, sizeof stored, "the run has \"%s\", this command gives \"xxh3-128:", digest);
    expect_refused(2, "d.safetensors", (lu_sweep_opts){0},
                   "run: --resume 1: capture_digest (--capture's content digest) differs", stored,
                   NULL);
    /* The same content under another path is the run's capture. */
    snprintf(cmd, sizeof cmd, "cp '%s' '%s'", tu_in_dir("c.safetensors"), tu_in_dir("moved.safetensors"));
    cr_assert_eq(system(cmd), 0);
    char *moved = strdup(tu_in_dir("moved.safetensors"));
    char *out = resume_ok(moved, "r.db", (lu_sweep_opts){0}, 3, 3);
    free(moved);
    expect_has(out, "holds the content of the run's capture");
    free(out);
    db = db_open("r.db");
    /* Its rows keep the run's capture name. */
    cr_assert_eq(tu_sql_int(db, "SELECT count(DISTINCT capture) FROM layer_metrics"), 1);
    char *name = tu_sql_text(db, "SELECT DISTINCT capture FROM layer_metrics");
    cr_assert_str_eq(name, tu_in_dir("c.safetensors"));
    free(name);
    sqlite3_close(db);
    free(digest);
}

Test(run_resume, another_configuration_is_refused_naming_the_field_and_both_values)
{
    run_with_missing_layers();
    expect_refused(2, "c.safetensors", (lu_sweep_opts){.variants = "bf16"}, "variants (--variants) differs",
                   "the run has [\"bf16\",\"fp8kv@fixed\",\"fp8qkv@fa3\"], this command gives "
                   "[\"bf16\"]", NULL);
    /* Another profile of a mode is another run. */
    expect_refused(2, "c.safetensors", (lu_sweep_opts){.variants = "fp8qkv@ideal,bf16,fp8kv"},
                   "variants (--variants) differs",
                   "this command gives [\"bf16\",\"fp8kv@fixed\",\"fp8qkv@ideal\"]", NULL);
    expect_refused(2, "c.safetensors", (lu_sweep_opts){.seed = 7, .given_seed = 1}, "page_seed_decimal (--seed) differs",
                   "the run has \"24301\", this command gives \"7\"", NULL);
    expect_refused(2, "c.safetensors", (lu_sweep_opts){.seed = 7, .given_seed = 1, .variants = "bf16"}, "variants (--variants)",
                   "(also differ: page_seed_decimal)", NULL);
    /* The CLI's own refusals: an option that does not exist, a label. */
    expect_cli_refused("--p-rounding e4m3", "unknown option '--p-rounding'");
    expect_cli_refused("--label other", "--label with --resume");
    /* A capture that does not load leaves the run alone too. */
    expect_refused(1, "missing.safetensors", (lu_sweep_opts){0}, "missing.safetensors", "cannot open", NULL);
    /* Only a sweep run continues as one. */
    cr_assert_eq(lu_replay_ok(PRECGATE_SOURCE_DIR "/evals/demo/aime-style-demo.jsonl",
                              tu_in_dir("r.db"), NULL, NULL), 2);
    char *why = resume_refusal(2, "c.safetensors");
    expect_has(why, "run 2 is a 'eval' run, not a sweep");
    free(why);
    /* The precgate build that made the rows is part of the configuration. */
    sqlite3 *db = db_open("r.db");
    tu_sql_exec(db, "UPDATE runs SET config_json = json_set(config_json, '$.git_rev', 'abc123')");
    sqlite3_close(db);
    expect_refused(2, "c.safetensors", (lu_sweep_opts){0},
                   "git_rev (the precgate build that computed the run) differs",
                   "the run has \"abc123\"", NULL);
    db = db_open("r.db");
    tu_sql_exec(db, "UPDATE runs SET config_json = json_remove(config_json, '$.capture_digest')");
    sqlite3_close(db);
    expect_refused(2, "c.safetensors", (lu_sweep_opts){0}, "does not record its capture digest",
                   "start a new run", NULL);
}

/* A run's scale policy is part of its configuration: another --scales is
 * refused naming it, the same one is accepted, and a resume without
 * --scales takes the run's (here not the capture's default). A run from
 * before --scales (no "scales" in its config) resumes under the default. */
Test(run_resume, another_scale_policy_is_refused_and_the_runs_is_kept)
{
    run_with_missing_layers();
    expect_refused(2, "c.safetensors", (lu_sweep_opts){.scales = "unit"}, "scales (--scales) differs",
                   "the run has \"amax\", this command gives \"unit\"", NULL);
    char *cap = strdup(tu_in_dir("c.safetensors"));
    free(resume_ok(cap, "r.db", (lu_sweep_opts){.scales = "amax"}, 3, 3));

    sweep_into(cap, "v.db", (lu_sweep_opts){.scales = "vllm-dynamic"});
    sqlite3 *db = db_open("v.db");
    tu_sql_exec(db, "DELETE FROM layer_metrics WHERE layer >= 3;"
                    "DELETE FROM quant_stats WHERE layer >= 3;"
                    "DELETE FROM kv_format_stats WHERE layer >= 3;"
                    "DELETE FROM layer_shapes WHERE layer >= 3;"
                    "UPDATE runs SET status = 'failed', error = 'a failure'");
    sqlite3_close(db);
    free(resume_ok(cap, "v.db", (lu_sweep_opts){0}, 3, 3));
    db = db_open("v.db");
    cr_assert_eq(tu_sql_int(db, "SELECT count(*) FROM quant_stats WHERE scale_source = "
                                "'vllm-dynamic'"), FAST_LAYERS * QUANT_PER_LAYER);
    cr_assert_eq(whole_layers(db, 1, FAST_LAYERS), FAST_LAYERS);
    sqlite3_close(db);

    db = db_open("r.db");
    tu_sql_exec(db, "DELETE FROM layer_metrics WHERE layer >= 3;"
                    "DELETE FROM quant_stats WHERE layer >= 3;"
                    "DELETE FROM kv_format_stats WHERE layer >= 3;"
                    "DELETE FROM layer_shapes WHERE layer >= 3;"
                    "UPDATE runs SET status = 'failed', error = 'a failure',"
                    " config_json = json_remove(config_json, '$.scales')");
    sqlite3_close(db);
    cr_assert_eq(lu_sweep_ok(cap, tu_in_dir("r.db"), &(lu_sweep_opts){.resume = 1}), 1);
    db = db_open("r.db");
    cr_assert_eq(tu_sql_int(db, "SELECT count(*) FROM quant_stats WHERE scale_source = 'amax'"),
                 FAST_LAYERS * QUANT_PER_LAYER);
    sqlite3_close(db);
    free(cap);
}

Test(run_resume, a_run_whose_process_may_be_alive_needs_force)
{
    run_with_missing_layers();
    /* Marked running by a process that exists on this host: the one that
     * started this test (the lifecycle runs in the test's own process). */
    char host[256] = "";
    cr_assert_eq(gethostname(host, sizeof host - 1), 0);
    sqlite3 *db = db_open("r.db");
    char *sql = sqlite3_mprintf("UPDATE runs SET status = 'running', error = NULL, "
                                "finished_at = NULL, host = %Q, pid = %lld", host,
                                (long long)getppid());
    tu_sql_exec(db, sql);
    sqlite3_free(sql);
    sqlite3_close(db);
    expect_refused(2, "c.safetensors", (lu_sweep_opts){0}, "may be alive", "--force", NULL);
    /* refused before the capture is even opened: a missing file is not named */
    char *why = resume_refusal(1, "no-such.safetensors");
    expect_has(why, "may be alive");
    cr_assert(strstr(why, "no-such.safetensors") == NULL, "the capture was opened first: %s", why);
    free(why);
    char *cap = strdup(tu_in_dir("c.safetensors"));
    free(resume_ok(cap, "r.db", (lu_sweep_opts){.force = 1}, 3, 3));
    free(cap);
    /* The CLI's own refusal: --force without --resume. */
    char *out = NULL;
    cr_assert_eq(tu_run_precgatef(&out, "run --force --capture '%s' --db '%s'",
                                  tu_in_dir("c.safetensors"), tu_in_dir("r.db")), 2, "%s", out);
    expect_has(out, "--force only goes with --resume RUN");
    free(out);
}

Test(run_resume, a_half_stored_layer_is_refused_not_overwritten)
{
    run_with_missing_layers();
    sqlite3 *db = db_open("r.db");
    tu_sql_exec(db, "DELETE FROM layer_metrics WHERE layer = 1 AND variant = 'fp8kv@fixed' AND head >= 0");
    sqlite3_close(db);
    char want[64];
    snprintf(want, sizeof want, "holds %d of its %d layer_metrics rows", ROWS_PER_LAYER - HQ,
             ROWS_PER_LAYER);
    expect_refused(1, "c.safetensors", (lu_sweep_opts){0}, "layer 1 of capture", want, "not a whole layer");
}

/* Waits until run 1 in database name has stored a layer (its rows are
 * committed together), polling a reader connection. */
static void wait_for_a_stored_layer(const char *name, pid_t pid)
{
    const time_t deadline = time(NULL) + WAIT_ROWS_SECONDS;
    for (;;) {
        sqlite3 *db = NULL;
        long long n = 0;
        if (sqlite3_open_v2(tu_in_dir(name), &db, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK) {
            sqlite3_stmt *st = NULL;
            if (sqlite3_prepare_v2(db, "SELECT count(*) FROM layer_metrics", -1, &st, NULL) ==
                    SQLITE_OK &&
                sqlite3_step(st) == SQLITE_ROW)
                n = sqlite3_column_int64(st, 0);
            sqlite3_finalize(st);
        }
        sqlite3_close(db);
        if (n > 0) return;
        int status;
        cr_assert_eq(waitpid(pid, &status, WNOHANG), 0, "the sweep ended before storing a layer");
        cr_assert_lt(time(NULL), deadline, "no layer stored within %d s", WAIT_ROWS_SECONDS);
        usleep(POLL_MS * 1000);
    }
}

/* A file of the scratch directory as a malloc'd string. */
static char *slurp(const char *name)
{
    FILE *f = fopen(tu_in_dir(name), "rb");
    cr_assert_not_null(f, "%s", name);
    char *buf = calloc(1, 1 << 16);
    cr_assert_not_null(buf);
    const size_t n = fread(buf, 1, (1 << 16) - 1, f);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

/* Sweeps s.safetensors into i.db in the background, sends sig once layer 0
 * is stored, checks what the stopped run left, resumes it (without --force)
 * and checks it against an uninterrupted sweep. */
static void stop_mid_sweep_and_resume(int sig)
{
    synth("s.safetensors", SLOW_SYNTH);
    char *cap = strdup(tu_in_dir("s.safetensors")), *dbp = strdup(tu_in_dir("i.db"));
    char args[1024];
    snprintf(args, sizeof args, "run --capture '%s' --db '%s' --backend cpu --threads 2 --no-progress",
             cap, tu_in_dir("i.db"));
    const pid_t pid = tu_spawn_precgate(args, tu_in_dir("run.out"), tu_in_dir("run.err"));
    wait_for_a_stored_layer("i.db", pid);
    cr_assert_eq(kill(pid, sig), 0);
    int status = 0;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    char *err = slurp("run.err");
    sqlite3 *db = db_open("i.db");
    char *run_status = tu_sql_text(db, "SELECT status FROM runs WHERE id = 1");
    if (sig == SIGKILL) {
        cr_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL, "status %#x", status);
        cr_assert_str_eq(run_status, "running", "a killed process cannot mark its run");
        char *runs = NULL;
        cr_assert_eq(tu_run_precgatef(&runs, "runs --db '%s'", dbp), 0, "%s", runs);
        expect_has(runs, "interrupted"); /* its pid is gone: runs says so */
        free(runs);
    } else {
        cr_assert(WIFEXITED(status), "killed by signal %d instead of stopping",
                  WIFSIGNALED(status) ? WTERMSIG(status) : 0);
        cr_assert_eq(WEXITSTATUS(status), 128 + sig, "exit %d: %s", WEXITSTATUS(status), err);
        cr_assert_str_eq(run_status, "interrupted");
        char *why = tu_sql_text(db, "SELECT error FROM runs WHERE id = 1");
        const char *name = sig == SIGTERM ? "interrupted by SIGTERM" : "interrupted by SIGINT";
        cr_assert_eq(strncmp(why, name, strlen(name)), 0, "error '%s'", why);
        free(why);
        char hint[1024];
        snprintf(hint, sizeof hint, "precgate run --resume 1 --capture %s --db %s", cap, dbp);
        expect_has(err, hint);
    }
    free(run_status);
    /* The stored layers are whole, and the signal landed mid-run. */
    const int stored = whole_layers(db, 1, SLOW_LAYERS);
    cr_assert(stored >= 1 && stored < SLOW_LAYERS, "%d of %d layers stored", stored, SLOW_LAYERS);
    /* The heartbeat moved past the start with the stored layers. */
    cr_assert_eq(tu_sql_int(db, "SELECT heartbeat_at > started_at FROM runs WHERE id = 1"), 1,
                 "heartbeat_at not after started_at");
    sqlite3_close(db);
    free(err);

    char *out = NULL;
    int rc = tu_run_precgatef(&out, "run --resume 1 --capture '%s' --db '%s' --no-progress", cap,
                              tu_in_dir("i.db"));
    cr_assert_eq(rc, 0, "resume: %s", out);
    expect_resume_counts(out, stored, SLOW_LAYERS - stored);
    free(out);
    sweep_into(cap, "ref.db", (lu_sweep_opts){0});
    expect_same_rows("ref.db", 1, "i.db", 1);
    db = db_open("i.db");
    char *final = tu_sql_text(db, "SELECT status FROM runs WHERE id = 1");
    cr_assert_str_eq(final, "complete");
    free(final);
    sqlite3_close(db);
    free(cap);
    free(dbp);
}

Test(run_resume, sigterm_mid_sweep_exits_143_keeps_whole_layers_and_resumes)
{
    stop_mid_sweep_and_resume(SIGTERM);
}

Test(run_resume, sigint_mid_sweep_exits_130)
{
    stop_mid_sweep_and_resume(SIGINT);
}

Test(run_resume, kill_9_mid_sweep_resumes_without_force)
{
    stop_mid_sweep_and_resume(SIGKILL);
}

/* A run from before profiles, as migration 10 left it: fp8qkv renamed
 * fp8qkv@ideal and "p_rounding" still in its config. With P in e4m3 it is
 * resumed as it was; with another rounding, which no profile has, it is
 * refused, naming the rounding. The same modes given bare are the default
 * profiles, another run. */
Test(run_resume, an_old_run_with_p_rounding_is_resumed_as_fp8qkv_ideal)
{
    synth("c.safetensors", FAST_SYNTH);
    sweep_into(tu_in_dir("c.safetensors"), "r.db",
               (lu_sweep_opts){.variants = "bf16,fp8kv,fp8qkv@ideal"});
    sqlite3 *db = db_open("r.db");
    tu_sql_exec(db, "DELETE FROM layer_metrics WHERE layer >= 3;"
                    "DELETE FROM quant_stats WHERE layer >= 3;"
                    "DELETE FROM kv_format_stats WHERE layer >= 3;"
                    "DELETE FROM layer_shapes WHERE layer >= 3;"
                    "UPDATE runs SET status = 'failed', error = 'a failure',"
                    " config_json = json_set(config_json, '$.p_rounding', 'bf16')");
    sqlite3_close(db);
    expect_refused(2, "c.safetensors", (lu_sweep_opts){0}, "the run rounded fp8qkv's P to bf16",
                   "start a new run", NULL);
    expect_refused(2, "c.safetensors", (lu_sweep_opts){.variants = "bf16,fp8kv,fp8qkv"},
                   "the run rounded fp8qkv's P to bf16", NULL, NULL);
    db = db_open("r.db");
    tu_sql_exec(db, "UPDATE runs SET config_json = json_set(config_json, '$.p_rounding', 'e4m3')");
    sqlite3_close(db);
    expect_refused(2, "c.safetensors", (lu_sweep_opts){.variants = "bf16,fp8kv,fp8qkv"},
                   "variants (--variants) differs", "[\"bf16\",\"fp8kv@fixed\",\"fp8qkv@fa3\"]",
                   NULL);
    char *cap = strdup(tu_in_dir("c.safetensors"));
    free(resume_ok(cap, "r.db", (lu_sweep_opts){0}, 3, 3));
    free(cap);
    db = db_open("r.db");
    cr_assert_eq(tu_sql_int(db, "SELECT count(DISTINCT layer) FROM layer_metrics WHERE variant = "
                                "'fp8qkv@ideal'"), 6);
    cr_assert_eq(tu_sql_int(db, "SELECT count(*) FROM layer_metrics WHERE variant NOT IN "
                                "('bf16', 'fp8kv@fixed', 'fp8qkv@ideal')"), 0);
    sqlite3_close(db);
}
