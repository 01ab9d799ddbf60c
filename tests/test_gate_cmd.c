/*
 * test_gate_cmd.c: `precgate gate` and `precgate baseline`: a small
 * synthetic capture swept twice passes against the automatic baseline with
 * the default thresholds, a layer worsened in the database is caught (exit 1, flags, JUnit), a layer deleted is an error
 * (exit 2), a first run passes on the defaults and is held to a config's
 * budgets, saturating fp8 scales fail against a baseline with calibrated
 * ones, NaN and all-zero external outputs fail a first run, named baselines
 * round-trip, bad configs and runs that are not complete are refused
 * (exit 2), and the shipped eval demo and degenerate evals get the verdicts
 * regress.h defines, the accuracy against the baseline run paired over the
 * same problems (live runs against loopback servers) and unpaired, saying
 * why, when the runs cannot show they are the same problems.
 *
 * The sweeps, replays and most gates are the lifecycles called directly
 * (lifecycle_util.h); the binary runs where the CLI is the point: the exit
 * statuses 0, 1 and 2 of a gate, --junit, --config files that do not load,
 * usage errors, `baseline`, `report` and `diff`, terminal escaping, live
 * evals, and a read-only database opened as another user.
 */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <math.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fake_openai_server.h"
#include "kernels/numerics.h"
#include "harness/capture/safetensors.h"
#include "harness/regress.h"
#include "lifecycle_util.h"
#include "testutil.h"

static char g_db[512], g_cap[512], g_cfg[512];

/* Makes the scratch directory and names the files in it. */
static void setup(void)
{
    tu_scratch_setup();
    snprintf(g_db, sizeof g_db, "%s/g.db", tu_dir);
    snprintf(g_cap, sizeof g_cap, "%s/cap.safetensors", tu_dir);
    snprintf(g_cfg, sizeof g_cfg, "%s/gate.json", tu_dir);
}

/* Writes text as the config file g_cfg. */
static void write_config(const char *text)
{
    tu_write_file(g_cfg, text, strlen(text));
}

TestSuite(gate_cmd, .init = setup, .fini = tu_scratch_teardown);

/* First column of the first row of sql as a double. */
static double db_num(const char *sql)
{
    sqlite3 *db = NULL;
    cr_assert_eq(sqlite3_open(g_db, &db), SQLITE_OK);
    const double v = tu_sql_double(db, "%s", sql);
    sqlite3_close(db);
    return v;
}

/* Runs sql (test setup: worsening, deleting, marking runs). */
static void db_exec(const char *sql)
{
    sqlite3 *db = NULL;
    cr_assert_eq(sqlite3_open(g_db, &db), SQLITE_OK);
    tu_sql_exec(db, sql);
    cr_assert_gt(sqlite3_changes(db), 0, "%s changed nothing", sql);
    sqlite3_close(db);
}

/* Synthesizes the small capture once per test (scales: with calibrated
 * q/k/v scales, synth --scales). */
static void synth_with(int scales)
{
    lu_synth(g_cap, (lu_synth_opts){.layers = 2, .seqs = 1, .seq_len = 24, .scales = scales});
}

static void synth(void)
{
    synth_with(0);
}

/* Scales a metadata array of numbers ("[a,b,...]") by factor into out. */
static void scale_array(const char *in, double factor, char *out, size_t len)
{
    cJSON *a = cJSON_Parse(in);
    cr_assert(cJSON_IsArray(a), "not an array: %s", in);
    size_t used = (size_t)snprintf(out, len, "[");
    for (const cJSON *e = a->child; e != NULL; e = e->next)
        used += (size_t)snprintf(out + used, len - used, "%s%.9g", e == a->child ? "" : ",",
                                 e->valuedouble * factor);
    snprintf(out + used, len - used, "]");
    cr_assert_lt(used + 1, len);
    cJSON_Delete(a);
}

/* Rewrites the capture g_cap in place: metadata k_scale and v_scale
 * multiplied by kv_scale_factor (1: kept), and external outputs added:
 * layers.L.out.zeros (all zero) in every layer when zeros, layers.0.out.nan
 * (zero but one NaN) when nan. */
static void rewrite_capture(double kv_scale_factor, int zeros, int nan)
{
    pg_err err = {0};
    st_file *f = NULL;
    cr_assert_eq(st_open(g_cap, &f, &err), PG_OK, "%s", err.msg);
    st_writer *w = NULL;
    cr_assert_eq(st_writer_create(&w, &err), PG_OK, "%s", err.msg);
    char scaled[16][256];
    for (int i = 0; i < f->n_meta && i < 16; i++) {
        const char *k = f->meta[i].key, *v = f->meta[i].value;
        if (kv_scale_factor != 1.0 && (strcmp(k, "k_scale") == 0 || strcmp(k, "v_scale") == 0)) {
            scale_array(v, kv_scale_factor, scaled[i], sizeof scaled[i]);
            v = scaled[i];
        }
        cr_assert_eq(st_writer_add_meta(w, k, v, &err), PG_OK, "%s", err.msg);
    }
    cr_assert_leq(f->n_meta, 16);
    for (int i = 0; i < f->n_tensors; i++) {
        const st_tensor *t = &f->tensors[i];
        cr_assert_eq(st_writer_add_tensor(w, t->name, t->dtype, t->ndim, t->shape, t->data, &err),
                     PG_OK, "%s", err.msg);
    }
    /* An output is shaped like its layer's q (tokens x query heads x head dim). */
    const st_tensor *q = st_find(f, "layers.0.q");
    cr_assert_not_null(q);
    uint16_t *zero = calloc((size_t)q->numel, sizeof *zero);
    uint16_t *one_nan = calloc((size_t)q->numel, sizeof *one_nan);
    cr_assert(zero != NULL && one_nan != NULL);
    one_nan[q->numel / 2] = bf16_from_f32(NAN);
    char name[64];
    for (int l = 0; zeros && st_find(f, (snprintf(name, sizeof name, "layers.%d.q", l), name));
         l++) {
        snprintf(name, sizeof name, "layers.%d.out.zeros", l);
        cr_assert_eq(st_writer_add_tensor(w, name, ST_BF16, q->ndim, q->shape, zero, &err), PG_OK,
                     "%s", err.msg);
    }
    if (nan)
        cr_assert_eq(st_writer_add_tensor(w, "layers.0.out.nan", ST_BF16, q->ndim, q->shape,
                                          one_nan, &err), PG_OK, "%s", err.msg);
    char tmp[600];
    snprintf(tmp, sizeof tmp, "%s.new", g_cap);
    cr_assert_eq(st_writer_write(w, tmp, &err), PG_OK, "%s", err.msg);
    st_writer_free(w);
    st_close(f);
    free(zero);
    free(one_nan);
    cr_assert_eq(rename(tmp, g_cap), 0);
}

/* Sweeps the capture into the database with label and more run options
 * o (the run lifecycle called directly); asserts success. */
static void sweep_with(const char *label, lu_sweep_opts o)
{
    o.label = label;
    lu_sweep_ok(g_cap, g_db, &o);
}

static void sweep(const char *label)
{
    sweep_with(label, (lu_sweep_opts){0});
}

/* Gates run in the database (the gate lifecycle called directly, o NULL:
 * no option), its report into *out; returns the exit status it decided. */
static int gate(long run, const lu_gate_opts *o, char **out)
{
    return lu_gate_exit(g_db, run, o, out);
}

/* Gates run with o, which must be refused before any verdict (what the
 * CLI turns into exit status 2); returns the refusal's message, malloc'd. */
static char *gate_refused(long run, const lu_gate_opts *o)
{
    gate_result res;
    pg_err err = {0};
    char *report = NULL;
    cr_assert_eq(lu_gate(g_db, run, o, &res, &report, &err), PG_ERR_USAGE,
                 "gate of run %ld not refused: %s\n%s", run, err.msg, report);
    cr_assert_eq(res.exit_status, GATE_EXIT_ERROR);
    free(report);
    char *msg = strdup(err.msg);
    cr_assert_not_null(msg);
    return msg;
}

/* The JUnit file through python3's minidom: "suite=tests/failures/errors ..."
 * per testsuite; NULL (and a warning) without python3. */
static char *junit_summary(const char *path)
{
    if (system("command -v python3 >/dev/null 2>&1") != 0) {
        cr_log_warn("python3 not found: the JUnit file's well-formedness is not checked");
        return NULL;
    }
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "python3 -c 'import xml.dom.minidom,sys; d=xml.dom.minidom.parse(sys.argv[1]); "
             "print(\" \".join(s.getAttribute(\"name\")+\"=\"+s.getAttribute(\"tests\")+\"/\"+"
             "s.getAttribute(\"failures\")+\"/\"+s.getAttribute(\"errors\") for s in "
             "d.getElementsByTagName(\"testsuite\")))' '%s' 2>&1", path);
    FILE *p = popen(cmd, "r");
    cr_assert_not_null(p);
    char *buf = calloc(1, 4096);
    cr_assert_not_null(buf);
    const size_t n = fread(buf, 1, 4095, p);
    buf[n] = '\0';
    cr_assert_eq(pclose(p), 0, "minidom refused %s: %s", path, buf);
    return buf;
}

Test(gate_cmd, passes_against_the_automatic_baseline_then_catches_a_worsened_layer)
{
    synth();
    sweep("nightly");
    sweep("nightly");
    /* A rerun identical to its baseline passes on the default thresholds. */
    char *out = NULL;
    int rc = tu_run_precgatef(&out, "gate --run 2 --db '%s'", g_db);
    cr_assert_eq(rc, 0, "%s", out);
    cr_expect(strstr(out, "baseline: run 1 (automatic") != NULL, "%s", out);
    cr_expect(strstr(out, "gate run 2: PASS") != NULL, "%s", out);
    free(out);
    /* 2 layers x 3 modes x (nonfinite, rel_l2, p99_abs) + 2 layers x 3 pairs. */
    cr_expect_eq(db_num("SELECT count(*) FROM flags WHERE run_id = 2 AND scope = 'layer'"), 18);
    cr_expect_eq(db_num("SELECT count(*) FROM flags WHERE run_id = 2 AND scope = 'mode_pair'"), 6);
    cr_expect_eq(db_num("SELECT count(*) FROM flags WHERE run_id = 2 AND verdict <> 'pass'"), 0);
    cr_expect_eq(db_num("SELECT count(DISTINCT baseline_run_id) FROM flags WHERE run_id = 2"), 1);
    cr_expect_eq(db_num("SELECT baseline_run_id FROM flags WHERE run_id = 2 LIMIT 1"), 1);

    /* Run 3: fp8kv's rel_l2 of layer 1 ten times worse. */
    sweep("nightly");
    db_exec("UPDATE layer_metrics SET rel_l2 = rel_l2 * 10 WHERE run_id = 3 AND layer = 1 "
            "AND variant = 'fp8kv@fixed' AND head = -1");
    char junit[600];
    snprintf(junit, sizeof junit, "%s/gate.xml", tu_dir);
    rc = tu_run_precgatef(&out, "gate --run 3 --db '%s' --junit '%s'", g_db, junit);
    cr_assert_eq(rc, 1, "%s", out);
    /* The baseline is run 2, the newest that passed its gate. */
    cr_expect(strstr(out, "baseline: run 2 (automatic: the newest older complete sweep run "
                          "labelled 'nightly' that passed its gate)") != NULL, "%s", out);
    const char *first = strstr(out, "REGRESSION layer");
    cr_assert_not_null(first, "%s", out);
    cr_expect(strstr(first, "layer 1 fp8kv@fixed: rel_l2") != NULL, "%s", out);
    cr_expect(strstr(out, "baseline run 2") != NULL, "%s", out);
    /* Regressions come before the counts. */
    const char *counts = strstr(out, "\nlayer ");
    cr_expect(counts != NULL && first < counts, "%s", out);
    cr_expect(strstr(out, "gate run 3: REGRESSION (2 regressions, 0 errors") != NULL, "%s", out);
    free(out);
    cr_expect_eq(db_num("SELECT count(*) FROM flags WHERE run_id = 3 AND verdict = 'regression' "
                        "AND scope = 'layer' AND layer = 1 AND variant = 'fp8kv@fixed' "
                        "AND metric = 'rel_l2' AND baseline_run_id = 2 "
                        "AND abs(value - 10 * baseline_value) <= 1e-12 * value"), 1);
    /* The same layer's gap to bf16 grows tenfold past the baseline's + 10%. */
    cr_expect_eq(db_num("SELECT count(*) FROM flags WHERE run_id = 3 AND verdict = 'regression' "
                        "AND scope = 'mode_pair' AND layer = 1 AND variant = 'fp8kv@fixed-bf16'"), 1);
    cr_expect_eq(db_num("SELECT count(*) FROM flags WHERE run_id = 3 AND verdict = 'regression'"), 2);
    char *sum = junit_summary(junit);
    if (sum != NULL) {
        /* One failing testcase in the layer suite (layer 1 fp8kv) and one in mode_pair. */
        cr_expect(strstr(sum, "layer=6/1/0 mode_pair=6/1/0 eval=0/0/0") != NULL, "%s", sum);
        free(sum);
    }
    const double n3 = db_num("SELECT count(*) FROM flags WHERE run_id = 3");
    /* Gating again replaces the flags instead of adding to them. */
    rc = gate(3, NULL, &out);
    cr_expect_eq(rc, 1, "%s", out);
    free(out);
    cr_expect_eq(db_num("SELECT count(*) FROM flags WHERE run_id = 3"), n3);
}

Test(gate_cmd, a_layer_missing_from_the_run_is_an_error)
{
    synth();
    sweep("x");
    sweep("x");
    db_exec("DELETE FROM layer_metrics WHERE run_id = 2 AND layer = 0 AND variant = 'fp8kv@fixed'");
    char *out = NULL;
    const int rc = gate(2, NULL, &out);
    cr_assert_eq(rc, 2, "%s", out);
    cr_expect(strstr(out, "ERROR      layer     ") != NULL, "%s", out);
    cr_expect(strstr(out, "layer 0 fp8kv@fixed: in baseline run 1, missing from this run") != NULL,
              "%s", out);
    /* The run's own config says so too, baseline or not (run_complete.h). */
    cr_expect(strstr(out, "run 2 lacks 1 of the 2 layers its config implies: layer 0 "
                          "(layer_metrics 130 of 195)") != NULL, "%s", out);
    free(out);
    cr_expect_eq(db_num("SELECT count(*) FROM flags WHERE run_id = 2 AND verdict = 'error' "
                        "AND layer = 0 AND variant = 'fp8kv@fixed' AND metric = 'present'"), 1);
    cr_expect_eq(db_num("SELECT count(*) FROM flags WHERE run_id = 2 AND verdict = 'error' "
                        "AND metric = 'complete' AND value = 1 AND baseline_value = 2"), 1);
    cr_expect_eq(db_num("SELECT count(*) FROM flags WHERE run_id = 2 AND verdict = 'error'"), 2);
}

Test(gate_cmd, a_first_run_passes_on_the_defaults_and_is_held_to_a_configs_budgets)
{
    /* No baseline: the fp8 modes' gaps to bf16 are recorded (inconclusive);
     * no built-in absolute budget fails a healthy capture. */
    synth();
    sweep("x");
    char *out = NULL;
    int rc = gate(1, NULL, &out);
    cr_assert_eq(rc, 0, "%s", out);
    cr_expect(strstr(out, "baseline: none") != NULL, "%s", out);
    cr_expect(strstr(out, "gate run 1: PASS") != NULL, "%s", out);
    free(out);
    cr_expect_eq(db_num("SELECT count(*) FROM flags WHERE run_id = 1 AND verdict = 'inconclusive' "
                        "AND scope = 'mode_pair' AND variant IN ('fp8kv@fixed-bf16', 'fp8qkv@fa3-bf16') "
                        "AND message LIKE '%no baseline run: gap%recorded%'"), 4);
    cr_expect_eq(db_num("SELECT count(*) FROM flags WHERE run_id = 1 AND variant = 'bf16' "
                        "AND scope = 'mode_pair' AND verdict = 'pass'"), 2);
    /* The layer scope checks NaN/Inf only: one flag per (layer, mode). */
    cr_expect_eq(db_num("SELECT count(*) FROM flags WHERE run_id = 1 AND scope = 'layer' "
                        "AND metric = 'nonfinite' AND verdict = 'pass'"), 6);
    cr_expect_eq(db_num("SELECT count(*) FROM flags WHERE run_id = 1 AND scope = 'layer'"), 6);
    cr_expect_eq(db_num("SELECT count(*) FROM flags WHERE baseline_run_id IS NOT NULL"), 0);

    /* Absolute budgets come from a config and apply from the first run: fp8kv
     * (about 0.055 on this capture) above 0.01 in both scopes. */
    write_config("{\"mode_pair\": {\"abs\": {\"fp8kv\": 0.01}}, "
                 "\"layer\": {\"abs\": {\"fp8qkv\": 0.02}}}");
    rc = gate(1, &(lu_gate_opts){.config = g_cfg}, &out);
    cr_assert_eq(rc, 1, "%s", out);
    cr_expect(strstr(out, "layer 0 fp8kv@fixed-bf16: rel_l2 vs fp64 reference") != NULL, "%s", out);
    free(out);
    cr_expect_eq(db_num("SELECT count(*) FROM flags WHERE run_id = 1 AND verdict = 'regression' "
                        "AND scope = 'mode_pair' AND variant = 'fp8kv@fixed-bf16' AND threshold = 0.01"),
                 2);
    cr_expect_eq(db_num("SELECT count(*) FROM flags WHERE run_id = 1 AND verdict = 'regression' "
                        "AND scope = 'layer' AND variant = 'fp8qkv@fa3' AND metric = 'rel_l2' "
                        "AND threshold = 0.02"), 2);
    cr_expect_eq(db_num("SELECT count(*) FROM flags WHERE run_id = 1 AND verdict = 'regression'"),
                 4);
}

Test(gate_cmd, the_demo_shaped_capture_passes_its_own_gate)
{
    /* scripts/demo.sh's capture, smaller: gpt-oss-120b shape, cached context. */
    lu_synth(g_cap, (lu_synth_opts){.preset = "gpt-oss-120b", .layers = 2, .seqs = 1,
                                    .seq_len = 64, .context = 32});
    sweep("demo");
    char *out = NULL;
    int rc = gate(1, NULL, &out);
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
    sweep("demo");
    rc = gate(2, NULL, &out);
    cr_assert_eq(rc, 0, "%s", out);
    cr_expect(strstr(out, "baseline: run 1 (automatic: the newest older complete sweep run "
                          "labelled 'demo' that passed its gate)") != NULL, "%s", out);
    free(out);
    cr_expect_eq(db_num("SELECT count(*) FROM flags WHERE run_id = 2 AND verdict <> 'pass'"), 0);
    cr_expect_eq(db_num("SELECT count(*) FROM flags WHERE run_id = 2 AND scope = 'mode_pair'"), 6);
}

Test(gate_cmd, saturating_scales_fail_against_a_baseline_with_calibrated_ones)
{
    synth_with(1);
    sweep("s");
    /* The same capture with its k and v scales halved: e4m3 saturates at 448 x
     * scale, so every value above half of a tensor's amax is clipped (rel_l2
     * about 0.26-0.31 against 0.054-0.068 calibrated). */
    rewrite_capture(0.5, 0, 0);
    sweep("s");
    /* The capture recorded again with new scales is other content under the
     * same name: it is compared with the automatic baseline (that is how a
     * serving stack's scale regression shows), and the gate says so. */
    char *out = NULL;
    const int rc = gate(2, NULL, &out);
    cr_assert_eq(rc, 1, "%s", out);
    cr_expect(strstr(out, "baseline: run 1 (automatic") != NULL, "%s", out);
    cr_expect(strstr(out, "note: baseline run 1 swept other capture content (capture_digest")
              != NULL, "%s", out);
    cr_expect(strstr(out, "REGRESSION mode_pair") != NULL, "%s", out);
    free(out);
    /* Both fp8 modes, both layers, in both scopes; bf16 is untouched. */
    cr_expect_eq(db_num("SELECT count(*) FROM flags WHERE run_id = 2 AND verdict = 'regression' "
                        "AND scope = 'mode_pair' AND variant IN ('fp8kv@fixed-bf16', 'fp8qkv@fa3-bf16')"), 4);
    cr_expect_eq(db_num("SELECT count(*) FROM flags WHERE run_id = 2 AND verdict = 'regression' "
                        "AND scope = 'layer' AND metric = 'rel_l2' "
                        "AND variant IN ('fp8kv@fixed', 'fp8qkv@fa3')"), 4);
    cr_expect_eq(db_num("SELECT count(*) FROM flags WHERE run_id = 2 AND verdict = 'regression' "
                        "AND variant LIKE 'bf16%'"), 0);
}

Test(gate_cmd, nan_and_all_zero_external_outputs_fail_a_first_run)
{
    synth();
    rewrite_capture(1.0, 1, 1);
    sweep("ext");
    char *out = NULL;
    const int rc = gate(1, NULL, &out);
    cr_assert_eq(rc, 1, "%s", out);
    cr_expect(strstr(out, "layer 0 ext:zeros-bf16: rel_l2 vs fp64 reference 1 >= 1: no closer to "
                          "the reference than an all-zero output") != NULL, "%s", out);
    cr_expect(strstr(out, "layer 0 ext:nan: 1 NaN/Inf output elements") != NULL, "%s", out);
    free(out);
    cr_expect_eq(db_num("SELECT count(*) FROM flags WHERE run_id = 1 AND verdict = 'regression' "
                        "AND scope = 'mode_pair' AND variant = 'ext:zeros-bf16'"), 2);
    cr_expect_eq(db_num("SELECT count(*) FROM flags WHERE run_id = 1 AND verdict = 'regression' "
                        "AND variant LIKE 'ext:nan%'"), 2);  /* layer nonfinite, mode_pair */
    cr_expect_eq(db_num("SELECT count(*) FROM flags WHERE run_id = 1 AND verdict = 'regression'"),
                 4);
}

Test(gate_cmd, baseline_set_and_list_round_trip)
{
    synth();
    sweep("x");
    sweep("x");
    sweep("y");
    char *out = NULL;
    int rc = tu_run_precgatef(&out, "baseline list --db '%s'", g_db);
    cr_assert_eq(rc, 0, "%s", out);
    cr_expect(strstr(out, "no baselines") != NULL, "%s", out);
    free(out);
    rc = tu_run_precgatef(&out, "baseline set 1 --db '%s'", g_db);  /* named after the label */
    cr_assert_eq(rc, 0, "%s", out);
    cr_expect(strstr(out, "baseline 'x' -> run 1") != NULL, "%s", out);
    free(out);
    rc = tu_run_precgatef(&out, "baseline set 2 --name golden --db '%s'", g_db);
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
    rc = tu_run_precgatef(&out, "baseline list --db '%s'", g_db);
    cr_assert_eq(rc, 0, "%s", out);
    const char *golden = strstr(out, "golden ");
    const char *x = strstr(out, "\nx ");
    cr_assert(golden != NULL && x != NULL, "%s", out);
    cr_expect(golden < x, "names in order: %s", out);
    cr_expect(strstr(golden, " 2  sweep") != NULL, "%s", out);
    cr_expect(strstr(x, " 1  sweep") != NULL, "%s", out);
    free(out);

    /* Run 3 (label y) against the named baseline of label x's run 2. */
    rc = gate(3, &(lu_gate_opts){.baseline = "golden"}, &out);
    cr_assert_eq(rc, 0, "%s", out);
    cr_expect(strstr(out, "baseline: run 2 (--baseline golden, by name)") != NULL, "%s", out);
    free(out);
    cr_expect_eq(db_num("SELECT min(baseline_run_id) = 2 AND max(baseline_run_id) = 2 "
                        "FROM flags WHERE run_id = 3 AND scope = 'layer'"), 1);
    /* A run id works too; the run itself does not. */
    rc = gate(3, &(lu_gate_opts){.baseline = "1"}, &out);
    cr_expect_eq(rc, 0, "%s", out);
    free(out);
    cr_expect_eq(db_num("SELECT max(baseline_run_id) FROM flags WHERE run_id = 3"), 1);
    char *why = gate_refused(3, &(lu_gate_opts){.baseline = "3"});
    cr_expect(strstr(why, "is run 3 itself") != NULL, "%s", why);
    free(why);
    why = gate_refused(3, &(lu_gate_opts){.baseline = "nosuch"});
    cr_expect(strstr(why, "--baseline nosuch: no baseline of that name") != NULL, "%s", why);
    free(why);

    /* Setting a name again moves it. */
    rc = tu_run_precgatef(&out, "baseline set 3 --name golden --db '%s'", g_db);
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
    cr_expect_eq(db_num("SELECT run_id FROM baselines WHERE name = 'golden'"), 3);
    cr_expect_eq(db_num("SELECT count(*) FROM baselines"), 2);
    /* Only a complete run can be a baseline. */
    db_exec("UPDATE runs SET status = 'failed', error = 'boom' WHERE id = 2");
    rc = tu_run_precgatef(&out, "baseline set 2 --db '%s'", g_db);
    cr_expect_eq(rc, 2, "%s", out);
    cr_expect(strstr(out, "run 2 is failed; only a complete run can be a baseline") != NULL,
              "%s", out);
    free(out);
    rc = tu_run_precgatef(&out, "baseline set 99 --db '%s'", g_db);
    cr_expect_neq(rc, 0, "%s", out);
    cr_expect(strstr(out, "no run 99") != NULL, "%s", out);
    free(out);
}

Test(gate_cmd, bad_configs_are_refused_naming_the_key)
{
    synth();
    sweep("x");
    static const struct {
        const char *json, *want;
    } cases[] = {
        {"{\"layer\": {\"rel_tol\": 0.1, \"tolerance\": 2}}", "layer.tolerance: unknown key"},
        {"{\"mode_pairs\": {}}", "mode_pairs: unknown key"},
        {"{\"layer\": {\"abs\": {\"fp8kv\": \"high\"}}}", "layer.abs.fp8kv: expected a number"},
    };
    char path[600];
    snprintf(path, sizeof path, "%s/bad.json", tu_dir);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        tu_write_file(path, cases[i].json, strlen(cases[i].json));
        char *out = NULL;
        const int rc = tu_run_precgatef(&out, "gate --run 1 --db '%s' --config '%s'", g_db, path);
        cr_expect_eq(rc, 2, "%s: %s", cases[i].json, out);
        cr_expect(strstr(out, cases[i].want) != NULL, "%s: %s", cases[i].json, out);
        cr_expect(strstr(out, "bad.json") != NULL, "%s", out);
        free(out);
    }
    char *out = NULL;
    const int rc = tu_run_precgatef(&out, "gate --run 1 --db '%s' --config '%s/none.json'", g_db,
                                    tu_dir);
    cr_expect_eq(rc, 2, "%s", out);
    free(out);
    cr_expect_eq(db_num("SELECT count(*) FROM flags"), 0);  /* nothing judged */
}

Test(gate_cmd, running_failed_and_unknown_runs_are_refused)
{
    synth();
    /* Run 1 fails: the capture does not exist. */
    run_sweep_result res;
    pg_err err = {0};
    cr_assert_neq(lu_sweep(tu_in_dir("none.safetensors"), g_db, NULL, &res, NULL, &err), PG_OK);
    cr_assert(res.run_id == 1 && res.finished, "run %lld", (long long)res.run_id);
    char *why = gate_refused(1, NULL);
    cr_expect(strstr(why, "run 1 failed (") != NULL, "%s", why);
    free(why);
    /* Run 2 marked running again (as if it were still going or was killed). */
    sweep("x");
    db_exec("UPDATE runs SET status = 'running', finished_at = NULL WHERE id = 2");
    why = gate_refused(2, NULL);
    cr_expect(strstr(why, "run 2 is still running") != NULL, "%s", why);
    free(why);
    /* The CLI: a run that does not exist, and no run, are exit status 2. */
    char *out = NULL;
    int rc = tu_run_precgatef(&out, "gate --run 7 --db '%s'", g_db);
    cr_expect_eq(rc, 2, "%s", out);
    cr_expect(strstr(out, "no run 7") != NULL, "%s", out);
    free(out);
    rc = tu_run_precgatef(&out, "gate --db '%s'", g_db);
    cr_expect_eq(rc, 2, "%s", out);
    cr_expect(strstr(out, "--run N is required") != NULL, "%s", out);
    free(out);
    cr_expect_eq(db_num("SELECT count(*) FROM flags"), 0);
}

Test(gate_cmd, eval_demo_verdicts_with_and_without_a_baseline)
{
    const char *traces = PRECGATE_SOURCE_DIR "/evals/demo/aime-style-demo.jsonl";
    lu_replay_ok(traces, g_db, &(lu_eval_opts){.label = "demo"}, NULL);
    char *out = NULL;
    char junit[600];
    snprintf(junit, sizeof junit, "%s/eval.xml", tu_dir);
    int rc = gate(1, &(lu_gate_opts){.junit = junit}, &out);
    /* fp8qkv - bf16 = -6/36, interval [-0.250, -0.083]: below 0, drop >= 0.05. */
    cr_assert_eq(rc, 1, "%s", out);
    cr_expect(strstr(out, "REGRESSION eval      aime-style-demo medium fp8qkv - bf16: mean paired "
                          "difference -0.167, 95% CI [-0.250, -0.083] over 12 problems") != NULL,
              "%s", out);
    /* The design MDE: 2.8016 sqrt(p~(1-p~) x 12 x 2/3) / 12 with p~ the
     * adjusted pooled accuracy of bf16 and fp8qkv (the observed 0.141 is lower). */
    cr_expect(strstr(out, "MDE 0.256") != NULL, "%s", out);
    /* fp8kv - bf16 = -2/36, interval [-0.139, +0.000]: touches 0, so inconclusive. */
    cr_expect(strstr(out, "inconclusive eval      aime-style-demo medium fp8kv - bf16") != NULL,
              "%s", out);
    free(out);
    cr_expect_eq(db_num("SELECT count(*) FROM flags WHERE run_id = 1 AND scope = 'eval' "
                        "AND mode = 'fp8qkv' AND effort = 'medium' AND metric = 'diff_vs_bf16' "
                        "AND verdict = 'regression' AND abs(value + 6.0 / 36) < 1e-12"), 1);
    cr_expect_eq(db_num("SELECT count(*) FROM flags WHERE run_id = 1 AND mode = 'fp8kv' "
                        "AND verdict = 'inconclusive'"), 1);
    char *sum = junit_summary(junit);
    if (sum != NULL) {
        /* bf16, fp8kv, fp8qkv: their "samples" checks and pairs, one failing. */
        cr_expect(strstr(sum, "layer=0/0/0 mode_pair=0/0/0 eval=3/1/0") != NULL, "%s", sum);
        free(sum);
    }

    /* A second replay: run 1 failed its gate, so it is the fallback baseline.
     * The same traces digest and problems: paired, every problem tied, d = 0
     * in [0, 0]; but the design's MDE (bf16: 0.202) is above 0.05, so it
     * cannot call that "no change" (inconclusive). */
    lu_replay_ok(traces, g_db, &(lu_eval_opts){.label = "demo"}, NULL);
    rc = gate(2, NULL, &out);
    cr_assert_eq(rc, 1, "%s", out);
    cr_expect(strstr(out, "baseline: run 1 (automatic: no older eval run labelled 'demo' passed "
                          "a gate") != NULL, "%s", out);
    cr_expect(strstr(out, "inconclusive eval      aime-style-demo medium bf16: accuracy 0.917 vs "
                          "0.917 in baseline run 1, paired over 12 problems: 0 won, 0 lost, 12 "
                          "tied, sign test p=1; mean paired difference +0.000, 95% CI [+0.000, "
                          "+0.000]; inconclusive: the interval lies within +-0.050, but this "
                          "design lacks the power to call it no change: it could only have seen "
                          "a drop of 0.202 or more") != NULL, "%s", out);
    cr_expect(strstr(out, "unpaired") == NULL, "%s", out);
    free(out);
    cr_expect_eq(db_num("SELECT count(*) FROM flags WHERE run_id = 2 AND metric = 'accuracy' "
                        "AND verdict = 'inconclusive' AND baseline_run_id = 1 "
                        "AND value = baseline_value"), 3);

    /* With min_effect 0.2, fp8kv's interval lies within +-0.2, but its design
     * MDE 0.223 is above 0.2: it lacks the power for "no change"
     * (inconclusive, with the drop it could have seen); fp8qkv's interval
     * reaches -0.25: inconclusive. With 0.3, fp8kv is "no change", stated as
     * no proof of equality. */
    char cfg[600];
    snprintf(cfg, sizeof cfg, "%s/wide.json", tu_dir);
    static const char wide[] = "{\"eval\": {\"min_effect\": 0.2}}";
    tu_write_file(cfg, wide, strlen(wide));
    rc = gate(1, &(lu_gate_opts){.config = cfg}, &out);
    cr_assert_eq(rc, 0, "%s", out);
    cr_expect(strstr(out, "inconclusive eval      aime-style-demo medium fp8kv - bf16") != NULL,
              "%s", out);
    cr_expect(strstr(out, "could only have seen a drop of 0.223 or more") != NULL, "%s", out);
    free(out);
    cr_expect_eq(db_num("SELECT count(*) FROM flags WHERE run_id = 1 AND mode = 'fp8kv' "
                        "AND verdict = 'inconclusive'"), 1);
    static const char wider[] = "{\"eval\": {\"min_effect\": 0.3}}";
    tu_write_file(cfg, wider, strlen(wider));
    rc = gate(1, &(lu_gate_opts){.config = cfg}, &out);
    cr_assert_eq(rc, 0, "%s", out);
    cr_expect(strstr(out, "no change  eval      aime-style-demo medium fp8kv - bf16") != NULL,
              "%s", out);
    cr_expect(strstr(out, "not proof of equality (MDE 0.223 at 80% power") != NULL, "%s", out);
    free(out);
    /* back to 0.2 for the fp8qkv check below */
    tu_write_file(cfg, wide, strlen(wide));
    rc = gate(1, &(lu_gate_opts){.config = cfg}, &out);
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
    cr_expect_eq(db_num("SELECT count(*) FROM flags WHERE run_id = 1 AND mode = 'fp8qkv' "
                        "AND verdict = 'inconclusive'"), 1);
}

/* Writes n problems x k samples of bf16 and fp8kv replay traces to path,
 * every sample right with finish_reason as given: content NULL writes null
 * content; else each sample's text is "\boxed{answer}", followed in fp8kv's
 * samples of problems >= differ_from by " (fp8kv)" (differ_from 0: the two
 * modes' texts all differ; n: the modes answer identically). */
static void write_traces(const char *path, int n, int k, const char *content,
                         const char *finish_reason, int differ_from)
{
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    static const char *const modes[] = {"bf16", "fp8kv"};
    for (int i = 0; i < n; i++) {
        fprintf(f, "{\"id\": \"p%d\", \"problem\": \"q%d\", \"answer\": %d, \"completions\": [", i,
                i, i + 1);
        for (int m = 0; m < 2; m++)
            for (int s = 0; s < k; s++) {
                fprintf(f, "%s{\"mode\": \"%s\", \"effort\": \"medium\", \"sample\": %d, ",
                        m || s ? ", " : "", modes[m], s);
                if (content == NULL) fprintf(f, "\"content\": null, ");
                else fprintf(f, "\"content\": \"\\\\boxed{%d}%s\", ", i + 1,
                             m == 1 && i >= differ_from ? " (fp8kv)" : "");
                fprintf(f, "\"finish_reason\": \"%s\"}", finish_reason);
            }
        fprintf(f, "]}\n");
    }
    fclose(f);
}

/* Issue 14 section 4: evals where no pair of samples differs cannot pass. */
Test(gate_cmd, degenerate_evals_are_errors_even_with_a_lenient_config)
{
    char traces[600], cfg[600];
    snprintf(traces, sizeof traces, "%s/three.jsonl", tu_dir);
    snprintf(cfg, sizeof cfg, "%s/lenient.json", tu_dir);
    static const char lenient[] = "{\"eval\": {\"min_effect\": 1}}";
    tu_write_file(cfg, lenient, strlen(lenient));
    /* 3 problems x 1 sample, every answer right in both modes. */
    write_traces(traces, 3, 1, "right", "stop", 0);
    char *out = NULL;
    lu_replay_ok(traces, g_db, &(lu_eval_opts){.label = "d3"}, &out);
    /* The table prints the MDE floored by the rule of three (3/3: no
     * sample varied), not 0.000, and says p < 0.05 is out of reach. */
    cr_expect(strstr(out, "MDE 1.000  (3 problems)  cannot reach p < 0.05: the smallest "
                          "sign-test p with 3 problems is 0.25") != NULL, "%s", out);
    free(out);
    int rc = gate(1, &(lu_gate_opts){.config = cfg}, &out);
    cr_assert_eq(rc, 2, "%s", out);
    cr_expect(strstr(out, "ERROR      eval      three medium fp8kv - bf16") != NULL, "%s", out);
    cr_expect(strstr(out, "cannot reach significance at all") != NULL, "%s", out);
    free(out);
    cr_expect_eq(db_num("SELECT count(*) FROM flags WHERE run_id = 1 AND verdict = 'error' "
                        "AND metric = 'diff_vs_bf16'"), 1);
    cr_expect_eq(db_num("SELECT round(mde, 6) FROM eval_pairs WHERE run_id = 1"), 1.0);

    /* 30 problems x 2 samples, all truncated at the token limit: both 0%. */
    snprintf(traces, sizeof traces, "%s/trunc.jsonl", tu_dir);
    write_traces(traces, 30, 2, NULL, "length", 30);
    lu_replay_ok(traces, g_db, &(lu_eval_opts){.label = "dt"}, &out);
    cr_expect(strstr(out, "MDE 0.100  (30 problems)") != NULL, "%s", out);  /* 3/30 */
    free(out);
    rc = gate(2, &(lu_gate_opts){.config = cfg}, &out);
    cr_assert_eq(rc, 2, "%s", out);
    cr_expect(strstr(out, "bf16 medium: no correct answer in 60 graded samples, 60 truncated at "
                          "the token limit (over half") != NULL, "%s", out);
    /* Both modes' samples alike (no text to tell them apart): also an error. */
    cr_expect(strstr(out, "trunc medium bf16 = fp8kv: all 60 graded samples over 30 problems "
                          "identical (same outcome, byte-identical completion; 60 of them "
                          "without completion text, so only their outcomes were compared)")
              != NULL, "%s", out);
    free(out);
    cr_expect_eq(db_num("SELECT count(*) FROM flags WHERE run_id = 2 AND verdict = 'error'"), 4);
    cr_expect_eq(db_num("SELECT count(*) FROM flags WHERE run_id = 2 AND verdict <> 'error'"), 0);

    /* bf16 answered only p0 and fp8kv only p1: no problem in common. */
    snprintf(traces, sizeof traces, "%s/apart.jsonl", tu_dir);
    static const char apart[] =
        "{\"id\": \"p0\", \"problem\": \"q\", \"answer\": 1, \"completions\": [{\"mode\": "
        "\"bf16\", \"effort\": \"medium\", \"sample\": 0, \"content\": \"\\\\boxed{1}\", "
        "\"finish_reason\": \"stop\"}]}\n"
        "{\"id\": \"p1\", \"problem\": \"q\", \"answer\": 1, \"completions\": [{\"mode\": "
        "\"fp8kv\", \"effort\": \"medium\", \"sample\": 0, \"content\": \"\\\\boxed{1}\", "
        "\"finish_reason\": \"stop\"}]}\n";
    tu_write_file(traces, apart, strlen(apart));
    lu_replay_ok(traces, g_db, &(lu_eval_opts){.label = "da"}, &out);
    cr_expect(strstr(out, "fp8kv - bf16: no pairs (no problem scored in both modes") != NULL,
              "%s", out);
    cr_expect(strstr(out, "nan") == NULL, "%s", out);
    cr_expect(strstr(out, "[  n/a,   n/a]    n/a") != NULL, "%s", out);
    free(out);
    rc = gate(3, &(lu_gate_opts){.config = cfg}, &out);
    cr_assert_eq(rc, 2, "%s", out);
    cr_expect(strstr(out, "ERROR      eval      apart medium fp8kv - bf16: no pairs") != NULL,
              "%s", out);
    free(out);
    /* The reports say so too, with no NaN and no sign p of 1 for the pair. */
    char md[600];
    snprintf(md, sizeof md, "%s/apart.md", tu_dir);
    rc = tu_run_precgatef(&out, "report --run 3 --db '%s' -o '%s'", g_db, md);
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
    FILE *f = fopen(md, "r");
    cr_assert_not_null(f);
    char text[16384];
    const size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = '\0';
    cr_expect(strstr(text, "| fp8kv − bf16 | no pairs (no problem scored in both modes) | | | | | "
                           "| 0 |") != NULL, "%s", text);
    rc = tu_run_precgatef(&out, "diff --run 3 --modes fp8kv,bf16 --db '%s'", g_db);
    cr_assert_eq(rc, 0, "%s", out);
    cr_expect(strstr(out, "fp8kv - bf16: no pairs (no problem scored in both modes)") != NULL,
              "%s", out);
    free(out);
}

/* Replays the shipped demo traces with label nightly, their first limit
 * problems (0: all). */
static void demo_eval(long limit)
{
    lu_replay_ok(PRECGATE_SOURCE_DIR "/evals/demo/aime-style-demo.jsonl", g_db,
                 &(lu_eval_opts){.label = "nightly", .limit = limit}, NULL);
}

/* Sets run 1's config fields (json_set arguments) and expects run 3 to
 * refuse run 1 as --baseline (exit 2, message what) and to gate without a
 * baseline automatically (run 2 differs from run 3 too). */
static void refused_as_content(const char *set, const char *what)
{
    char sql[256];
    snprintf(sql, sizeof sql, "UPDATE runs SET config_json = json_set(config_json, %s) WHERE id = 1",
             set);
    db_exec(sql);
    char *out = NULL;
    int rc = gate(3, &(lu_gate_opts){.baseline = "1"}, &out);
    cr_expect_eq(rc, 2, "%s", out);
    cr_expect(strstr(out, what) != NULL, "%s", out);
    free(out);
    rc = gate(3, NULL, &out);
    cr_expect(strstr(out, "baseline: none (") != NULL, "%s", out);
    free(out);
    cr_expect_eq(db_num("SELECT count(*) FROM flags WHERE run_id = 3 AND baseline_run_id IS NOT "
                        "NULL"), 0, "run 1 (%s) taken as run 3's baseline", set);
}

/* Issue 14 section 5 (review): runs of other traces, source or --limit are
 * never compared: not picked automatically, an error when named. */
Test(gate_cmd, runs_of_different_content_are_not_compared)
{
    demo_eval(0);            /* run 1: 12 problems */
    demo_eval(6);   /* run 2: the first 6 */
    char *out = NULL;
    int rc = gate(2, NULL, &out);
    cr_expect(strstr(out, "baseline: none (no older complete eval run labelled 'nightly' with "
                          "the same content: the newest, run 1, has limit none, run 2 has 6); ")
              != NULL, "%s", out);
    /* Its own pairs: fp8qkv lost 3 of 6 problems and won none; the bootstrap
     * interval is below 0, but the sign test p is 0.25: inconclusive. */
    cr_expect(strstr(out, "inconclusive eval      aime-style-demo medium fp8qkv - bf16: mean "
                          "paired difference -0.167, 95% CI [-0.278, -0.056] over 6 problems; "
                          "inconclusive: the interval is below 0, but the exact sign test gives "
                          "p 0.25 > 0.05 (0 problems better, 3 worse, the rest tied), so the drop "
                          "is not significant at this many problems (MDE 0.389 at 80% power)")
              != NULL, "%s", out);
    free(out);
    cr_expect_eq(rc, 0, "the 6-problem pairs alone");
    cr_expect_eq(db_num("SELECT count(*) FROM flags WHERE run_id = 2 AND (baseline_run_id IS NOT "
                        "NULL OR metric = 'accuracy')"), 0);

    /* Named, the other content is one error verdict naming field and values. */
    rc = gate(2, &(lu_gate_opts){.baseline = "1"}, &out);
    cr_expect_eq(rc, 2, "%s", out);
    cr_expect(strstr(out, "ERROR      eval      --baseline 1 is run 1, whose limit is none; run "
                          "2's is 6: runs of different content are not compared") != NULL,
              "%s", out);
    free(out);
    cr_expect_eq(db_num("SELECT count(*) FROM flags WHERE run_id = 2"), 1);
    cr_expect_eq(db_num("SELECT count(*) FROM flags WHERE run_id = 2 AND verdict = 'error' AND "
                        "metric = 'content' AND baseline_run_id = 1 AND mode = 'limit'"), 1);
    /* The digest alone differs too: the same traces file, other content. */
    db_exec("UPDATE runs SET config_json = json_set(config_json, '$.limit', 6) WHERE id = 1");
    rc = gate(2, &(lu_gate_opts){.baseline = "1"}, &out);
    cr_expect_eq(rc, 2, "%s", out);
    cr_expect(strstr(out, "whose traces_digest is fnv1a64-v1:12:") != NULL, "%s", out);
    cr_expect(strstr(out, "run 2's is fnv1a64-v1:6:") != NULL, "%s", out);
    free(out);
    db_exec("UPDATE runs SET config_json = json_remove(config_json, '$.limit') WHERE id = 1");

    /* Run 3 has run 1's content: run 1 is its baseline although run 2 is newer. */
    demo_eval(0);
    rc = gate(3, NULL, &out);
    cr_expect(strstr(out, "baseline: run 1 (automatic:") != NULL, "%s", out);
    free(out);
    cr_expect_eq(db_num("SELECT count(*) FROM flags WHERE run_id = 3 AND metric = 'accuracy' "
                        "AND baseline_run_id = 1"), 3);

    /* Source and limit are content of their own. */
    refused_as_content("'$.source', 'live'", "whose source is live; run 3's is replay");
    refused_as_content("'$.source', 'replay', '$.limit', 12", "whose limit is 12; run 3's is none");

    /* A run recorded before digests cannot baseline one that has a digest. */
    db_exec("UPDATE runs SET config_json = json_remove(config_json, '$.traces_digest', "
            "'$.limit') WHERE id IN (1, 2)");
    rc = gate(3, NULL, &out);
    cr_expect(strstr(out, "the newest, run 2, has no traces_digest in its config (recorded "
                          "before content digests), so it cannot be an automatic baseline for "
                          "run 3 (traces_digest fnv1a64-v1:12:") != NULL, "%s", out);
    free(out);
    cr_expect_eq(db_num("SELECT count(*) FROM flags WHERE run_id = 3 AND baseline_run_id IS NOT "
                        "NULL"), 0);
}

/* Issue 15 (scale policies): a sweep under --scales unit is another
 * measurement than one under amax scales: never its automatic baseline, an
 * error verdict naming scales when given as --baseline; a later amax run
 * takes the amax run although the unit run is newer. */
Test(gate_cmd, runs_under_other_scale_policies_are_not_compared)
{
    synth();
    sweep("s");                        /* run 1: the default without scales, amax */
    sweep_with("s", (lu_sweep_opts){.scales = "unit"});  /* run 2 */
    char *out = NULL;
    int rc = gate(2, NULL, &out);
    cr_expect(strstr(out, "baseline: none (") != NULL, "%s", out);
    cr_expect(strstr(out, "has scales amax, run 2 has unit") != NULL, "%s", out);
    free(out);
    cr_expect_eq(db_num("SELECT count(*) FROM flags WHERE run_id = 2 AND baseline_run_id IS NOT "
                        "NULL"), 0, "the amax run 1 was taken as the unit run's baseline");

    rc = gate(2, &(lu_gate_opts){.baseline = "1"}, &out);
    cr_expect_eq(rc, 2, "%s", out);
    cr_expect(strstr(out, "--baseline 1 is run 1, whose scales is amax; run 2's is unit: runs of "
                          "different content are not compared") != NULL, "%s", out);
    free(out);
    cr_expect_eq(db_num("SELECT count(*) FROM flags WHERE run_id = 2 AND baseline_run_id = 1 AND "
                        "verdict = 'error' AND metric = 'content' AND scope = 'layer' AND variant = 'scales'"), 1);

    sweep_with("s", (lu_sweep_opts){.scales = "amax"});  /* run 3 */
    rc = gate(3, NULL, &out);
    cr_expect_eq(rc, 0, "%s", out);
    cr_expect(strstr(out, "baseline: run 1 (automatic") != NULL, "%s", out);
    free(out);
}

/* Issue 14 section 5 (review): a mode the baseline run lacks is an error in
 * the layer and mode_pair scopes (exit 2), unless a bound in the config
 * judges it. */
Test(gate_cmd, a_mode_the_baseline_run_lacks_is_an_error_unless_bounded)
{
    synth();
    sweep_with("v", (lu_sweep_opts){.variants = "bf16,fp8kv"});
    sweep("v");  /* all three modes: fp8qkv@fa3 is new */
    /* Other profiles are other content to the automatic baseline: run 1 is
     * not chosen, and the gate says why. */
    char *out = NULL;
    int rc = gate(2, NULL, &out);
    cr_expect(strstr(out, "baseline: none (no older complete sweep run labelled 'v' with the same "
                          "content: the newest, run 1, has variants [\"bf16\",\"fp8kv@fixed\"], "
                          "run 2 has [\"bf16\",\"fp8kv@fixed\",\"fp8qkv@fa3\"])") != NULL,
              "%s", out);
    free(out);
    /* Given as the baseline, run 1 is compared, and what it lacks is an error. */
    rc = gate(2, &(lu_gate_opts){.baseline = "1"}, &out);
    cr_expect_eq(rc, 2, "%s", out);
    cr_expect(strstr(out, "cap.safetensors layer 0 fp8qkv@fa3: rel_l2 0.0")
              != NULL, "%s", out);
    cr_expect(strstr(out, ": not in baseline run 1 and no absolute bound for fp8qkv@fa3 in the "
                          "config: set a baseline run that has it (precgate baseline set RUN) or "
                          "bound it in --config (layer.abs.fp8qkv@fa3)") != NULL, "%s", out);
    cr_expect(strstr(out, "cap.safetensors layer 1 fp8qkv@fa3-bf16: rel_l2 vs "
                          "fp64 reference 0.0") != NULL, "%s", out);
    free(out);
    /* 2 layers x (rel_l2, p99_abs) in the layer scope, 2 layers in mode_pair. */
    cr_expect_eq(db_num("SELECT count(*) FROM flags WHERE run_id = 2 AND verdict = 'error' AND "
                        "scope = 'layer' AND variant = 'fp8qkv@fa3'"), 4);
    cr_expect_eq(db_num("SELECT count(*) FROM flags WHERE run_id = 2 AND verdict = 'error' AND "
                        "scope = 'mode_pair' AND variant = 'fp8qkv@fa3-bf16'"), 2);
    cr_expect_eq(db_num("SELECT count(*) FROM flags WHERE run_id = 2 AND verdict = 'error'"), 6);
    /* Bounded in both scopes, it is judged by the bounds and the gate passes. */
    write_config("{\"layer\": {\"abs\": {\"fp8qkv\": 0.5}}, \"mode_pair\": {\"abs\": "
                 "{\"fp8qkv\": 0.5}}}");
    rc = gate(2, &(lu_gate_opts){.baseline = "1", .config = g_cfg}, &out);
    cr_expect_eq(rc, 0, "%s", out);
    free(out);
    cr_expect_eq(db_num("SELECT count(*) FROM flags WHERE run_id = 2 AND verdict = 'error'"), 0);
}

/* Two runs of different profiles of one mode: never each other's automatic
 * baseline, and given as the baseline, the gate names the variant each side
 * lacks (an error, exit 2), never comparing fp8qkv@fa3 with fp8qkv@ideal. */
Test(gate_cmd, runs_of_different_profiles_report_the_missing_variant)
{
    synth();
    sweep_with("p", (lu_sweep_opts){.variants = "bf16,fp8qkv@ideal"});
    sweep_with("p", (lu_sweep_opts){.variants = "bf16,fp8qkv"});  /* fp8qkv@fa3 */
    char *out = NULL;
    int rc = gate(2, NULL, &out);
    cr_expect(strstr(out, "baseline: none (") != NULL, "%s", out);
    cr_expect(strstr(out, "run 1, has variants [\"bf16\",\"fp8qkv@ideal\"], run 2 has "
                          "[\"bf16\",\"fp8qkv@fa3\"]") != NULL, "%s", out);
    free(out);
    rc = gate(2, &(lu_gate_opts){.baseline = "1"}, &out);
    cr_expect_eq(rc, 2, "%s", out);
    cr_expect(strstr(out, "layer 0 fp8qkv@ideal: in baseline run 1, missing from this run") != NULL,
              "%s", out);
    cr_expect(strstr(out, ": not in baseline run 1 and no absolute bound for fp8qkv@fa3") != NULL,
              "%s", out);
    free(out);
    /* 2 layers: fp8qkv@ideal missing (one flag a layer), fp8qkv@fa3 new (rel_l2, p99_abs). */
    cr_expect_eq(db_num("SELECT count(*) FROM flags WHERE run_id = 2 AND verdict = 'error' AND "
                        "scope = 'layer' AND variant = 'fp8qkv@ideal' AND metric = 'present'"), 2);
    cr_expect_eq(db_num("SELECT count(*) FROM flags WHERE run_id = 2 AND verdict = 'error' AND "
                        "scope = 'layer' AND variant = 'fp8qkv@fa3'"), 4);
    /* Nothing compares one profile's rows with the other's: beside the errors
     * only the NaN/Inf check, which needs no baseline. */
    cr_expect_eq(db_num("SELECT count(*) FROM flags WHERE run_id = 2 AND scope = 'layer' AND "
                        "variant LIKE 'fp8qkv%' AND verdict <> 'error' AND "
                        "metric <> 'nonfinite'"), 0);
    /* bf16 is the same variant in both: compared (rel_l2, p99_abs, nonfinite), and it passes. */
    cr_expect_eq(db_num("SELECT count(*) FROM flags WHERE run_id = 2 AND scope = 'layer' AND "
                        "variant = 'bf16' AND verdict = 'pass' AND baseline_run_id = 1"), 6);
}

/* What gate prints (and JUnit carries) when a sweep passes with nothing to
 * compare with: the documented first-run default, said as such. */
#define PASS_WITHOUT_BASELINE_SWEEP                                                              \
    "PASS without a baseline: nothing was compared against an earlier run; only NaN/Inf, "     \
    "rel_l2 &gt;= 1, the scale diagnosis and configured bounds were checked "                   \
    "(--require-baseline makes this an error)"

/* Issue 27 section 4: a first sweep passes (the documented default), and the
 * terminal and the JUnit file say the PASS was reached without a baseline;
 * a run gated against one says nothing of the kind. */
Test(gate_cmd, a_pass_without_a_baseline_says_so_in_the_terminal_and_the_junit)
{
    synth();
    sweep("first");
    char junit[600];
    snprintf(junit, sizeof junit, "%s/first.xml", tu_dir);
    char *out = NULL;
    int rc = tu_run_precgatef(&out, "gate --run 1 --db '%s' --junit '%s'", g_db, junit);
    cr_assert_eq(rc, 0, "%s", out);
    cr_expect(strstr(out, "\ngate run 1: PASS without a baseline: nothing was compared against an "
                          "earlier run; only NaN/Inf, rel_l2 >= 1, the scale diagnosis and "
                          "configured bounds were checked (--require-baseline makes this an "
                          "error)\n") != NULL, "%s", out);
    free(out);
    char *xml = tu_slurp("first.xml");
    cr_expect(strstr(xml, "<testsuites name=\"precgate gate run 1\" tests=\"13\" failures=\"0\" "
                          "errors=\"0\" skipped=\"1\">") != NULL, "%s", xml);
    cr_expect(strstr(xml, "<testsuite name=\"layer\" tests=\"7\" failures=\"0\" errors=\"0\" "
                          "skipped=\"1\">") != NULL, "%s", xml);
    cr_expect(strstr(xml, "<property name=\"baseline\" value=\"none\"/>") != NULL, "%s", xml);
    cr_expect(strstr(xml, "<testcase classname=\"precgate.layer\" name=\"baseline comparison\">\n"
                          "      <skipped message=\"" PASS_WITHOUT_BASELINE_SWEEP "\"/>\n"
                          "      <system-out>skipped: " PASS_WITHOUT_BASELINE_SWEEP) != NULL,
              "%s", xml);
    free(xml);
    char *sum = junit_summary(junit);
    if (sum != NULL) {
        cr_expect(strstr(sum, "layer=7/0/0 mode_pair=6/0/0 eval=0/0/0") != NULL, "%s", sum);
        free(sum);
    }
    /* Nothing of it is stored: the flags are the verdicts alone. */
    cr_expect_eq(db_num("SELECT count(*) FROM flags WHERE run_id = 1 AND metric = 'baseline'"), 0);

    /* Against a baseline: no such line, no skipped testcase. */
    sweep("first");
    snprintf(junit, sizeof junit, "%s/second.xml", tu_dir);
    rc = gate(2, &(lu_gate_opts){.junit = junit}, &out);
    cr_assert_eq(rc, 0, "%s", out);
    cr_expect(strstr(out, "gate run 2: PASS (") != NULL, "%s", out);
    cr_expect(strstr(out, "without a baseline") == NULL, "%s", out);
    free(out);
    xml = tu_slurp("second.xml");
    cr_expect(strstr(xml, "skipped=\"1\"") == NULL, "%s", xml);
    cr_expect(strstr(xml, "<skipped") == NULL, "%s", xml);
    cr_expect(strstr(xml, "<property name=\"baseline_run_id\" value=\"1\"/>") != NULL, "%s", xml);
    free(xml);

    /* A first run that fails says why, not that it passed without a baseline. */
    write_config("{\"mode_pair\": {\"abs\": {\"fp8kv\": 0.01}}}");
    rc = gate(1, &(lu_gate_opts){.config = g_cfg, .junit = junit}, &out);
    cr_assert_eq(rc, 1, "%s", out);
    cr_expect(strstr(out, "without a baseline") == NULL, "%s", out);
    free(out);
    xml = tu_slurp("second.xml");
    cr_expect(strstr(xml, "<skipped") == NULL, "%s", xml);
    free(xml);
}

/* Issue 27 section 4, for CI: --require-baseline makes "no baseline run" one
 * error verdict (stored, printed, in JUnit, exit 2) for a sweep and for an
 * eval; the checks that need no baseline are still made beside it, and a
 * run that has a baseline is gated as without the option. */
Test(gate_cmd, require_baseline_makes_a_missing_baseline_an_error_of_every_kind)
{
    synth();
    sweep("ci");
    char junit[600];
    snprintf(junit, sizeof junit, "%s/ci.xml", tu_dir);
    char *out = NULL;
    int rc = tu_run_precgatef(&out, "gate --run 1 --require-baseline --db '%s' --junit '%s'", g_db,
                              junit);
    cr_assert_eq(rc, 2, "%s", out);
    cr_expect(strstr(out, "ERROR      layer     --require-baseline: run 1 has no baseline run (no "
                          "older complete sweep run of its label and content; the 'baseline:' line "
                          "says why), so nothing was compared against an earlier run") != NULL,
              "%s", out);
    cr_expect(strstr(out, "gate run 1: ERROR (0 regressions, 1 error;") != NULL, "%s", out);
    cr_expect(strstr(out, "without a baseline") == NULL, "%s", out);
    free(out);
    cr_expect_eq(db_num("SELECT count(*) FROM flags WHERE run_id = 1 AND scope = 'layer' AND "
                        "metric = 'baseline' AND verdict = 'error' AND baseline_run_id IS NULL AND "
                        "message LIKE '--require-baseline: run 1 has no baseline run%'"), 1);
    /* The NaN/Inf checks and the gaps are still there: 6 + 6 flags, and the error. */
    cr_expect_eq(db_num("SELECT count(*) FROM flags WHERE run_id = 1"), 13);
    char *xml = tu_slurp("ci.xml");
    cr_expect(strstr(xml, "<error type=\"error\" message=\"--require-baseline: run 1 has no "
                          "baseline run") != NULL, "%s", xml);
    cr_expect(strstr(xml, "<skipped") == NULL, "%s", xml);
    free(xml);
    char *sum = junit_summary(junit);
    if (sum != NULL) {
        cr_expect(strstr(sum, "layer=7/0/1 mode_pair=6/0/0 eval=0/0/0") != NULL, "%s", sum);
        free(sum);
    }

    /* With a baseline the option changes nothing. */
    sweep("ci");
    rc = gate(2, &(lu_gate_opts){.require_baseline = 1}, &out);
    cr_assert_eq(rc, 0, "%s", out);
    cr_expect(strstr(out, "baseline: run 1 (automatic") != NULL, "%s", out);
    free(out);
    cr_expect_eq(db_num("SELECT count(*) FROM flags WHERE run_id = 2 AND metric = 'baseline'"), 0);
    /* An explicit --baseline of other content stays its own error. */
    db_exec("UPDATE runs SET config_json = json_set(config_json, '$.scales', 'unit') WHERE id = 1");
    rc = gate(2, &(lu_gate_opts){.baseline = "1", .require_baseline = 1}, &out);
    cr_expect_eq(rc, 2, "%s", out);
    free(out);
    cr_expect_eq(db_num("SELECT count(*) FROM flags WHERE run_id = 2 AND metric = 'content' AND "
                        "verdict = 'error'"), 1);
    cr_expect_eq(db_num("SELECT count(*) FROM flags WHERE run_id = 2 AND metric = 'baseline'"), 0);

    /* An eval: the error is in the eval scope. */
    demo_eval(0);
    rc = gate(3, &(lu_gate_opts){.require_baseline = 1}, &out);
    cr_assert_eq(rc, 2, "%s", out);
    cr_expect(strstr(out, "ERROR      eval      --require-baseline: run 3 has no baseline run (no "
                          "older complete eval run of its label and content;") != NULL, "%s", out);
    free(out);
    cr_expect_eq(db_num("SELECT count(*) FROM flags WHERE run_id = 3 AND scope = 'eval' AND "
                        "metric = 'baseline' AND verdict = 'error'"), 1);
    demo_eval(0);
    rc = gate(4, &(lu_gate_opts){.require_baseline = 1}, &out);
    /* Run 3 is its baseline; the demo's fp8qkv drop against bf16 is a regression. */
    cr_expect_eq(rc, 1, "%s", out);
    free(out);
    cr_expect_eq(db_num("SELECT count(*) FROM flags WHERE run_id = 4 AND metric = 'baseline'"), 0);
}

/* A label of every kind of text a terminal would act on: OSC (set the
 * window title) ended by BEL, CSI "clear screen" by ESC [ and by the C1
 * control U+009B, a byte that is not UTF-8 (0xff) and a backslash. */
#define HOSTILE_LABEL_SQL                                                                     \
    "'x' || char(27) || ']0;OWNED' || char(7) || char(27) || '[2J' || char(155) || '1m' ||"   \
    " CAST(x'ff' AS TEXT) || '\\end'"
/* The same label as the terminal shows it (reports/term.h's escapes). */
#define HOSTILE_LABEL_TERM "x\\x1b]0;OWNED\\x07\\x1b[2J\\u{9b}1m\\xff\\\\end"
/* ... and as HTML shows it (as JUnit: '?' for each control and bad byte). */
#define HOSTILE_LABEL_HTML "x?]0;OWNED??[2J?1m?\\end"

/* Expects no raw ESC, BEL, C1 CSI (0xc2 0x9b) or 0xff byte in out (what). */
static void expect_no_raw_controls(const char *out, const char *what)
{
    cr_expect_null(strchr(out, '\033'), "%s: a raw ESC reached the output: %s", what, out);
    cr_expect_null(strchr(out, '\a'), "%s: a raw BEL reached the output: %s", what, out);
    cr_expect_null(strstr(out, "\xc2\x9b"), "%s: a raw CSI reached the output: %s", what, out);
    cr_expect_null(strchr(out, '\xff'), "%s: a raw 0xff byte reached the output: %s", what, out);
}

/* Writes run 1's report to name in the scratch directory (its format by the
 * extension) and returns the file's content, malloc'd. */
static char *report_of_run_1(const char *name)
{
    char *out = NULL;
    const int rc = tu_run_precgatef(&out, "report --run 1 --db '%s' -o '%s'", g_db,
                                    tu_in_dir(name));
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
    return tu_slurp(name);
}

Test(gate_cmd, stored_text_reaches_the_terminal_and_html_escaped)
{
    synth();
    sweep("plain");
    db_exec("UPDATE runs SET label = " HOSTILE_LABEL_SQL " WHERE id = 1");
    char *out = NULL;
    int rc = tu_run_precgatef(&out, "gate --run 1 --db '%s'", g_db);
    cr_expect_eq(rc, 0, "%s", out);
    expect_no_raw_controls(out, "gate");
    cr_expect(strstr(out, "gate run 1 (sweep, label '" HOSTILE_LABEL_TERM "')") != NULL, "%s",
              out);
    free(out);
    rc = tu_run_precgatef(&out, "baseline set 1 --db '%s'", g_db);
    cr_expect_eq(rc, 0, "%s", out);
    expect_no_raw_controls(out, "baseline set");
    cr_expect(strstr(out, "baseline '" HOSTILE_LABEL_TERM "' -> run 1") != NULL, "%s", out);
    free(out);
    rc = tu_run_precgatef(&out, "baseline list --db '%s'", g_db);
    cr_expect_eq(rc, 0, "%s", out);
    expect_no_raw_controls(out, "baseline list");
    cr_expect(strstr(out, "\n" HOSTILE_LABEL_TERM " ") != NULL, "%s", out);
    free(out);
    rc = tu_run_precgatef(&out, "runs --db '%s'", g_db);
    cr_expect_eq(rc, 0, "%s", out);
    expect_no_raw_controls(out, "runs");
    /* The label column is cut at a whole escape. */
    cr_expect(strstr(out, "  x\\x1b]0;OWNED\\x07\\x1b[2J...") != NULL, "%s", out);
    free(out);
    /* An error message through main's printer (here the name given, not stored). */
    rc = tu_run_precgatef(&out, "gate --run 1 --baseline \"$(printf 'n\\033]0;X\\007')\" --db '%s'",
                          g_db);
    cr_expect_eq(rc, 2, "%s", out);
    expect_no_raw_controls(out, "gate --baseline");
    cr_expect(strstr(out, "precgate: error: ") != NULL && strstr(out, "n\\x1b]0;X\\x07") != NULL,
              "%s", out);
    free(out);
    char *html = report_of_run_1("r.html");
    expect_no_raw_controls(html, "report (HTML)");
    cr_expect(strstr(html, HOSTILE_LABEL_HTML) != NULL, "the label is not in the report");
    free(html);
    char *md = report_of_run_1("r.md");
    expect_no_raw_controls(md, "report (Markdown)");
    cr_expect(strstr(md, "x\\x1b\\]0;OWNED\\x07\\x1b\\[2J\\u{9b}1m\\xff\\\\end") != NULL, "%s", md);
    free(md);
}

/* Runs precgate args (printf-style) under prefix (tu_run_precgate_as). */
__attribute__((format(printf, 3, 4)))
static int run_as(const char *prefix, char **out, const char *fmt, ...)
{
    char args[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    return tu_run_precgate_as(prefix, args, out);
}

/* Makes the scratch directory and the database read-only (ro non-zero) or
 * writable again; the directory stays open to every user (nobody reads it). */
static void set_read_only(int ro)
{
    cr_assert_eq(chmod(tu_dir, ro ? 0555 : 0755), 0);
    cr_assert_eq(chmod(g_db, ro ? 0444 : 0644), 0);
}

/* #27 5b: a WAL database in a read-only directory (as a user the permissions
 * bind: nobody, when the test runs as root) is read by every reading
 * command, which says it was opened read-only; gate prints its verdicts
 * without storing them; a write fails naming the database; an older schema
 * is refused, not migrated; a writer's uncheckpointed commit is seen. */
Test(gate_cmd, a_read_only_database_is_read_and_said_so)
{
    const char *as = tu_unprivileged_prefix();
    if (as == NULL) cr_skip_test("root without setpriv: cannot read as an unprivileged user");
    synth();
    sweep("ro");
    sweep("ro");
    char wal[600], reports[600];
    snprintf(wal, sizeof wal, "%s-wal", g_db);
    cr_assert_neq(access(wal, F_OK), 0, "the sweeps left %s", wal);
    snprintf(reports, sizeof reports, "%s/out", tu_dir);
    cr_assert_eq(mkdir(reports, 0777), 0);
    cr_assert_eq(chmod(reports, 0777), 0);
    set_read_only(1);
    char *out = NULL;
    int rc = run_as(as, &out, "runs --db '%s'", g_db);
    if (as[0] == '\0' && access(tu_dir, W_OK) == 0) {
        set_read_only(0);
        free(out);
        cr_skip_test("a read-only directory is writable to this user: nothing to reproduce");
    }
    cr_expect_eq(rc, 0, "%s", out);
    cr_expect(strstr(out, "is opened read-only (it or its directory is not writable)") != NULL &&
              strstr(out, "as immutable") != NULL, "%s", out);
    cr_expect(strstr(out, "  ro\n") != NULL, "%s", out);
    free(out);
    rc = run_as(as, &out, "gate --run 2 --db '%s'", g_db);
    cr_expect_eq(rc, 0, "%s", out);
    cr_expect(strstr(out, "baseline: run 1") != NULL, "%s", out);
    cr_expect(strstr(out, "gate run 2: PASS (0 regressions, 0 errors; 24 flags not stored: the "
                          "database is read-only)") != NULL, "%s", out);
    free(out);
    static const char *const readers[] = {"history --variant fp8kv@fixed", "diff 1 2",
                                          "baseline list"};
    for (size_t i = 0; i < sizeof readers / sizeof readers[0]; i++) {
        rc = run_as(as, &out, "%s --db '%s'", readers[i], g_db);
        cr_expect_eq(rc, 0, "%s: %s", readers[i], out);
        cr_expect(strstr(out, "is opened read-only") != NULL, "%s: %s", readers[i], out);
        free(out);
    }
    rc = run_as(as, &out, "report --run 2 --db '%s' -o '%s/r.html'", g_db, reports);
    cr_expect_eq(rc, 0, "%s", out);
    free(out);
    /* A write fails, naming the database. */
    rc = run_as(as, &out, "baseline set 1 --db '%s'", g_db);
    cr_expect_eq(rc, 1, "%s", out);
    cr_expect(strstr(out, "attempt to write a readonly database") != NULL, "%s", out);
    free(out);
    set_read_only(0);
    cr_expect_eq(db_num("SELECT count(*) FROM flags"), 0);
    cr_expect_eq(db_num("SELECT count(*) FROM baselines"), 0);

    /* A writer's commit still in its WAL (the -wal and -shm files exist): a
     * read-only open sees it, not as immutable. */
    sqlite3 *writer = NULL;
    cr_assert_eq(sqlite3_open(g_db, &writer), SQLITE_OK);
    tu_sql_exec(writer, "UPDATE runs SET label = 'fresh' WHERE id = 2");
    cr_assert_eq(access(wal, F_OK), 0);
    set_read_only(1);
    rc = run_as(as, &out, "runs --db '%s'", g_db);
    cr_expect_eq(rc, 0, "%s", out);
    cr_expect(strstr(out, "is opened read-only") != NULL && strstr(out, "immutable") == NULL,
              "%s", out);
    cr_expect(strstr(out, "  fresh\n") != NULL, "%s", out);
    free(out);
    set_read_only(0);
    sqlite3_close(writer);

    /* An older schema is refused read-only, not migrated. */
    char sql[64];
    const int older = (int)db_num("PRAGMA user_version") - 1;
    snprintf(sql, sizeof sql, "PRAGMA user_version = %d", older);  /* test setup only */
    sqlite3 *db = NULL;
    cr_assert_eq(sqlite3_open(g_db, &db), SQLITE_OK);
    tu_sql_exec(db, sql);
    sqlite3_close(db);
    set_read_only(1);
    rc = run_as(as, &out, "runs --db '%s'", g_db);
    cr_expect_eq(rc, 1, "%s", out);
    cr_expect(strstr(out, "is older than this precgate's") != NULL &&
              strstr(out, "cannot be migrated") != NULL, "%s", out);
    free(out);
    set_read_only(0);
    cr_expect_eq(db_num("PRAGMA user_version"), older);
}

/* Issue #27: the gate checks the rows a run's config implies itself,
 * whatever made the run (run_complete.h): a sweep lacking a quant row, an
 * eval lacking a problem or a sample, and a run whose config cannot say. */
Test(gate_cmd, a_run_lacking_rows_its_config_implies_is_an_error)
{
    synth();
    sweep("x");
    db_exec("DELETE FROM quant_stats WHERE run_id = 1 AND layer = 1 AND tensor = 'k'");
    char *out = NULL;
    int rc = gate(1, NULL, &out);
    cr_assert_eq(rc, 2, "%s", out);
    cr_expect(strstr(out, "ERROR      layer     run 1 lacks 1 of the 2 layers its config implies: "
                          "layer 1 (quant_stats 2 of 3)") != NULL, "%s", out);
    cr_expect(strstr(out, "resume it: precgate run --resume 1 --capture ") != NULL, "%s", out);
    free(out);
    cr_expect_eq(db_num("SELECT count(*) FROM flags WHERE run_id = 1 AND verdict = 'error' "
                        "AND scope = 'layer' AND metric = 'complete'"), 1);
    /* A config without layer_rows (an older run): an error, never a pass. */
    db_exec("UPDATE runs SET config_json = json_remove(config_json, '$.layer_rows') WHERE id = 1");
    rc = gate(1, NULL, &out);
    cr_assert_eq(rc, 2, "%s", out);
    cr_expect(strstr(out, "run 1: its config_json records no layer_rows") != NULL, "%s", out);
    free(out);

    const char *traces = PRECGATE_SOURCE_DIR "/evals/demo/aime-style-demo.jsonl";
    lu_replay_ok(traces, g_db, NULL, NULL);
    db_exec("DELETE FROM eval_samples WHERE run_id = 2 AND problem_id = 'demo-03'");
    rc = gate(2, NULL, &out);
    cr_assert_eq(rc, 2, "%s", out);
    cr_expect(strstr(out, "ERROR      eval      run 2 lacks 9 of the 108 samples its config "
                          "implies: 1 of the plan's 12 problems holds no sample") != NULL,
              "%s", out);
    free(out);
    db_exec("DELETE FROM eval_samples WHERE run_id = 2 AND problem_id = 'demo-04' AND "
            "mode = 'bf16' AND sample = 2");
    rc = gate(2, NULL, &out);
    cr_assert_eq(rc, 2, "%s", out);
    cr_expect(strstr(out, "lacks 10 of the 108 samples its config implies: problem demo-04 "
                          "(bf16, medium): sample 2 of 3;") != NULL, "%s", out);
    free(out);
    cr_expect_eq(db_num("SELECT count(*) FROM flags WHERE run_id = 2 AND verdict = 'error' "
                        "AND scope = 'eval' AND metric = 'complete' AND value = 10 "
                        "AND baseline_value = 108"), 1);
}

/* A sweep whose config predates layer_rows is an error until `run --resume`
 * records them from the capture (run_complete.h); then it passes. */
Test(gate_cmd, run_resume_records_the_layer_rows_of_an_older_run)
{
    synth();
    sweep("x");
    db_exec("UPDATE runs SET config_json = json_remove(config_json, '$.layer_rows') WHERE id = 1");
    char *out = NULL;
    int rc = gate(1, NULL, &out);
    cr_assert_eq(rc, 2, "%s", out);
    free(out);
    cr_assert_eq(lu_sweep_ok(g_cap, g_db, &(lu_sweep_opts){.resume = 1}), 1);
    cr_expect_eq(db_num("SELECT json_extract(config_json, '$.layer_rows.layer_metrics[1]') "
                        "FROM runs WHERE id = 1"), 195);
    rc = gate(1, NULL, &out);
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
}

/* Problems of the live paired-baseline test, and how many each run gets right. */
#define LIVE_PROBLEMS 30
#define LIVE_BASE_RIGHT 15
#define LIVE_RUN_RIGHT 9

/* A chat completion answering text. */
#define CHAT_REPLY(text)                                                                \
    "{\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":\"" text \
    "\"},\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":7}}"

/* Runs a live bf16 eval of traces (every answer 7) with label paired against
 * a loopback server that answers the first n_right requests right and the
 * rest wrong (one request at a time: in problem order). */
static void live_eval(const char *traces, int n_right)
{
    static const fs_reply right = {200, CHAT_REPLY("so \\\\boxed{7}"), NULL, NULL, 0, 0};
    static const fs_reply wrong = {200, CHAT_REPLY("so \\\\boxed{3}"), NULL, NULL, 0, 0};
    fs_reply replies[FS_MAX_REPLIES];
    cr_assert_lt(n_right, FS_MAX_REPLIES);
    for (int i = 0; i < n_right; i++) replies[i] = right;
    replies[n_right] = wrong;  /* repeated for every later request */
    fake_server s;
    fs_init(&s);
    fs_route_openai(&s, replies, n_right + 1);
    cr_assert(fs_start(&s));
    char url[128];
    fs_url(&s, url, sizeof url);
    char *out = NULL;
    const int rc = tu_run_precgatef(&out, "eval --traces '%s' --endpoint bf16=%s --samples 1 "
                                          "--concurrency 1 --label paired --db '%s' "
                                          "--no-progress --ready-timeout 10", traces, url, g_db);
    fs_stop(&s);
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
}

/* Issue 27: two live runs of the same problems (same traces digest, no
 * --limit) are compared problem by problem. The baseline answered the first
 * 15 of 30 right, the run the first 9: 6 lost, none won, sign test p =
 * 2 x 0.5^6 = 0.031, a regression. The same scores compared as two
 * independent samples are inconclusive (interval [-0.449, +0.049]: see
 * tests/test_regress.c), which the gate falls back to, saying why, once the
 * runs' configs no longer record the digest (runs recorded before digests). */
Test(gate_cmd, the_accuracy_against_the_baseline_is_paired_over_the_same_problems)
{
    char traces[600];
    snprintf(traces, sizeof traces, "%s/live.jsonl", tu_dir);
    FILE *f = fopen(traces, "w");
    cr_assert_not_null(f);
    for (int i = 0; i < LIVE_PROBLEMS; i++)
        fprintf(f, "{\"id\": \"q%02d\", \"problem\": \"%d + 7 - %d?\", \"answer\": 7}\n", i,
                i, i);
    fclose(f);
    live_eval(traces, LIVE_BASE_RIGHT);  /* run 1 */
    live_eval(traces, LIVE_RUN_RIGHT);   /* run 2 */
    cr_assert_eq(db_num("SELECT count(*) FROM eval_samples WHERE run_id = 1 AND correct = 1"),
                 LIVE_BASE_RIGHT);
    cr_assert_eq(db_num("SELECT count(*) FROM eval_samples WHERE run_id = 2 AND correct = 1 AND "
                        "problem_id < 'q09'"), LIVE_RUN_RIGHT);
    char *out = NULL;
    int rc = gate(2, NULL, &out);
    cr_expect_eq(rc, 1, "%s", out);
    cr_expect(strstr(out, "baseline: run 1 (automatic:") != NULL, "%s", out);
    cr_expect(strstr(out, "REGRESSION eval      ") != NULL, "%s", out);
    cr_expect(strstr(out, " medium bf16: accuracy 0.300 vs 0.500 in baseline run 1, paired over "
                          "30 problems: 0 won, 6 lost, 24 tied, sign test p=0.031; mean paired "
                          "difference -0.200, 95% CI [") != NULL, "%s", out);
    cr_expect(strstr(out, "regression: the interval is below 0 and the drop is at least "
                          "min_effect 0.050 (MDE 0.355 at 80% power)") != NULL, "%s", out);
    free(out);
    cr_expect_eq(db_num("SELECT count(*) FROM flags WHERE run_id = 2 AND metric = 'accuracy' AND "
                        "verdict = 'regression' AND baseline_run_id = 1 AND value = 0.3 AND "
                        "baseline_value = 0.5 AND message LIKE '%paired over 30 problems%'"), 1);

    /* Without the digest the same ids need not be the same problems. */
    db_exec("UPDATE runs SET config_json = json_remove(config_json, '$.traces_digest')");
    rc = gate(2, NULL, &out);
    cr_expect_eq(rc, 0, "%s", out);
    cr_expect(strstr(out, "baseline: run 1 (automatic:") != NULL, "%s", out);
    cr_expect(strstr(out, " medium bf16: accuracy 0.300 vs 0.500 in baseline run 1, unpaired (run "
                          "2's config records no traces_digest (recorded before content digests), "
                          "so the same problem ids need not be the same problems): difference "
                          "-0.200, 95% CI [-0.449, +0.049] (two-sample") != NULL, "%s", out);
    free(out);
    cr_expect_eq(db_num("SELECT count(*) FROM flags WHERE run_id = 2 AND metric = 'accuracy' AND "
                        "verdict = 'inconclusive' AND message LIKE '%unpaired (run 2''s config%'"),
                 1);
}

/* Issue 27 section 3: replayed identical recordings of two modes, at 6
 * problems and at 200 (where the pair alone would read "no change"), are an
 * error naming the modes and the traces; the config's eval.identical_modes
 * makes them a pass; one differing completion (same outcomes) is evidence
 * enough that they are two modes. */
Test(gate_cmd, identical_replayed_modes_are_an_error_unless_the_config_expects_them)
{
    char t6[600], t200[600], tdiff[600], cfg[600];
    snprintf(t6, sizeof t6, "%s/same6.jsonl", tu_dir);
    snprintf(t200, sizeof t200, "%s/same200.jsonl", tu_dir);
    snprintf(tdiff, sizeof tdiff, "%s/onediff.jsonl", tu_dir);
    snprintf(cfg, sizeof cfg, "%s/replica.json", tu_dir);
    write_traces(t6, 6, 1, "right", "stop", 6);
    write_traces(t200, 200, 1, "right", "stop", 200);
    write_traces(tdiff, 200, 1, "right", "stop", 199);
    char *out = NULL;
    const char *const files[] = {t6, t200, tdiff};
    for (int i = 0; i < 3; i++) {
        char label[16];
        snprintf(label, sizeof label, "same%d", i);
        lu_replay_ok(files[i], g_db, &(lu_eval_opts){.label = label}, NULL);
    }
    int rc = gate(1, NULL, &out);
    cr_expect_eq(rc, 2, "%s", out);
    char want[1400];
    snprintf(want, sizeof want, "ERROR      eval      same6 medium bf16 = fp8kv: all 6 graded "
             "samples over 6 problems identical (same outcome, byte-identical completion) "
             "(replayed from traces %s): one server or one recording under two names, not two "
             "precision modes", t6);
    cr_expect(strstr(out, want) != NULL, "%s", out);
    free(out);
    rc = gate(2, NULL, &out);
    cr_expect_eq(rc, 2, "%s", out);
    cr_expect(strstr(out, "same200 medium bf16 = fp8kv: all 200 graded samples over 200 "
                          "problems identical") != NULL, "%s", out);
    cr_expect(strstr(out, "gate run 2: ERROR (0 regressions, 1 error") != NULL, "%s", out);
    free(out);
    cr_expect_eq(db_num("SELECT count(*) FROM flags WHERE run_id = 2 AND verdict = 'error' AND "
                        "metric = 'identical_to_fp8kv' AND mode = 'bf16' AND value = 200"), 1);

    /* Expected by the config (a replica check): a pass that says why. */
    static const char replica[] = "{\"eval\": {\"identical_modes\": [[\"fp8kv\", \"bf16\"]]}}";
    tu_write_file(cfg, replica, strlen(replica));
    rc = gate(2, &(lu_gate_opts){.config = cfg}, &out);
    cr_expect_eq(rc, 0, "%s", out);
    cr_expect(strstr(out, "pass       eval      same200 medium bf16 = fp8kv: all 200 graded "
                          "samples over 200 problems identical (replayed from traces") != NULL,
              "%s", out);
    cr_expect(strstr(out, "as the gate config's eval.identical_modes expects") != NULL, "%s", out);
    free(out);

    /* One of 200 completions differs in text: two modes, no identical flag. */
    rc = gate(3, NULL, &out);
    cr_expect_eq(rc, 0, "%s", out);
    cr_expect(strstr(out, " = fp8kv") == NULL, "%s", out);
    free(out);
    cr_expect_eq(db_num("SELECT count(*) FROM flags WHERE run_id = 3 AND metric LIKE "
                        "'identical_to_%'"), 0);
}

/* Issue 27 section 3: three modes pointed at one live server answer alike;
 * the gate's error names the modes and the endpoints each was given. */
Test(gate_cmd, three_modes_on_one_live_server_are_an_error_naming_the_endpoints)
{
    char traces[600];
    snprintf(traces, sizeof traces, "%s/one.jsonl", tu_dir);
    FILE *f = fopen(traces, "w");
    cr_assert_not_null(f);
    for (int i = 0; i < 8; i++)
        fprintf(f, "{\"id\": \"q%d\", \"problem\": \"%d + 7 - %d?\", \"answer\": 7}\n", i, i, i);
    fclose(f);
    static const fs_reply right = {200, CHAT_REPLY("so \\\\boxed{7}"), NULL, NULL, 0, 0};
    fake_server s;
    fs_init(&s);
    fs_route_openai(&s, &right, 1);
    cr_assert(fs_start(&s));
    char url[128];
    fs_url(&s, url, sizeof url);
    char *out = NULL;
    int rc = tu_run_precgatef(&out, "eval --traces '%s' --endpoint bf16=%s --endpoint fp8kv=%s "
                                    "--endpoint fp8qkv=%s --samples 1 --db '%s' --no-progress "
                                    "--ready-timeout 10", traces, url, url, url, g_db);
    fs_stop(&s);
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
    rc = gate(1, NULL, &out);
    cr_expect_eq(rc, 2, "%s", out);
    char want[600];
    snprintf(want, sizeof want, "one medium fp8kv = fp8qkv: all 8 graded samples over 8 problems "
             "identical (same outcome, byte-identical completion) (endpoints fp8kv=%s, "
             "fp8qkv=%s)", url, url);
    cr_expect(strstr(out, want) != NULL, "%s", out);
    free(out);
    cr_expect_eq(db_num("SELECT count(*) FROM flags WHERE run_id = 1 AND verdict = 'error' AND "
                        "metric LIKE 'identical_to_%'"), 3);

    /* A mode given two servers names both, joined by '+', in their order. */
    db_exec("UPDATE runs SET config_json = json_set(config_json, '$.endpoints.fp8qkv', "
            "json_array(json_extract(config_json, '$.endpoints.fp8qkv'), 'http://other:9'))");
    rc = gate(1, NULL, &out);
    cr_expect_eq(rc, 2, "%s", out);
    snprintf(want, sizeof want, "(endpoints fp8kv=%s, fp8qkv=%s+http://other:9)", url, url);
    cr_expect(strstr(out, want) != NULL, "%s", out);
    free(out);
}
