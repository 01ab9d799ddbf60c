/*
 * test_sweep.c: harness/sweep.c through the library: the per-layer
 * transactions (a failing layer rolls back alone), the --variants parser,
 * and external outputs (layers.L.out.NAME) stored next to the modes.
 */
#include "harness/sweep.h"

#include <criterion/criterion.h>
#include <dirent.h>
#include <limits.h>
#include <signal.h>
#include <math.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/attn.h"
#include "harness/capture/capture.h"
#include "harness/cli/cli.h"
#include "kernels/numerics.h"
#include "kernels/parallel.h"
#include "harness/capture/safetensors.h"
#include "db/sql_util.h"
#include "db/store.h"
#include "harness/capture/synth.h"
#include "testutil.h"

/* Modes of a full sweep. */
#define N_MODES 3
/* The metrics columns of layer_metrics compared bit for bit. */
#define N_METRIC_COLS 8

TestSuite(sweep, .init = tu_scratch_setup, .fini = tu_scratch_teardown, .timeout = 60);

/* ---- helpers -------------------------------------------------------------- */

/* Opens (creating) the database name in the scratch directory, asserting success. */
static pg_store *open_store(const char *name)
{
    pg_store *s = NULL;
    pg_err err = {0};
    cr_assert_eq(store_open(tu_in_dir(name), &s, &err), PG_OK, "store_open: %s", err.msg);
    return s;
}

/* Starts a 'sweep' run in s and returns its id. */
static int64_t begin_run(pg_store *s)
{
    const store_run_info info = {"sweep", "test_sweep", NULL, NULL, NULL, NULL};
    int64_t id = -1;
    pg_err err = {0};
    cr_assert_eq(store_run_begin(s, &info, &id, &err), PG_OK, "store_run_begin: %s", err.msg);
    cr_assert_gt(id, 0);
    return id;
}

/* Opens the capture at path through the library, asserting success. */
static capture *open_capture(const char *path)
{
    capture *c = NULL;
    pg_err err = {0};
    cr_assert_eq(capture_open(path, &c, &err), PG_OK, "capture_open: %s", err.msg);
    return c;
}

/* Sweep options: the profiles of list (run --variants), 2 threads, no
 * progress bar, the CPU specification. */
static sweep_options options(const char *list)
{
    sweep_options so = {.n_threads = 2, .page_seed = 0x5EEDull, .scales = SWEEP_SCALES_DEFAULT};
    pg_err err = {0};
    cr_assert_eq(sweep_variants_parse(list, &so.variants, &err), PG_OK, "%s: %s", list, err.msg);
    return so;
}

/* ---- a failing layer rolls back alone --------------------------------- */

/* A small gpt-oss-shaped capture c.safetensors in the scratch directory:
 * n_layers layers of 4 q / 2 kv heads, D 16, window 8 on even layers,
 * n_seqs x (context + seq_len) tokens; opened. */
static capture *small_capture(int n_layers, int n_seqs, int seq_len, int context)
{
    synth_config cfg;
    pg_err err = {0};
    cr_assert_eq(synth_preset("gpt-oss-120b", &cfg, &err), PG_OK, "%s", err.msg);
    cfg.n_layers = n_layers;
    cfg.hq = 4;
    cfg.hkv = 2;
    cfg.d = 16;
    cfg.window = 8;
    cfg.n_seqs = n_seqs;
    cfg.seq_len = seq_len;
    cfg.context = context;
    cr_assert_eq(synth_write(&cfg, tu_in_dir("c.safetensors"), parallel_default_threads(), &err),
                 PG_OK, "%s", err.msg);
    return open_capture(tu_in_dir("c.safetensors"));
}

/* Sweeps cap with every mode into a new store d.db (*s, run *run) where
 * inserting layer's rows into table fails ('injected failure'). */
static pg_status sweep_failing_at(const capture *cap, const char *table, int layer, pg_store **s,
                                  int64_t *run, pg_err *serr)
{
    *s = open_store("d.db");
    *run = begin_run(*s);
    char sql[256];
    snprintf(sql, sizeof sql,
             "CREATE TEMP TRIGGER inject BEFORE INSERT ON main.%s WHEN NEW.layer = %d "
             "BEGIN SELECT RAISE(ABORT, 'injected failure'); END",
             table, layer);
    tu_sql_exec(store_handle(*s), sql);
    const sweep_options so = options(SWEEP_DEFAULT_VARIANTS);
    return sweep_run(*s, *run, cap, "c.safetensors", &so, serr);
}

/* The GPU's upload ring: sweep_stage_open copies the first two layers' q, k,
 * v (needs no GPU); a one-layer capture stages just that one. */
Test(sweep, stage_holds_the_first_layers_copies)
{
    for (int n_layers = 1; n_layers <= 4; n_layers += 3) {
        capture *cap = small_capture(n_layers, 2, 40, 9);
        sweep_stage *st = sweep_stage_open(cap, NULL);
        cr_assert_not_null(st, "sweep_stage_open on a small capture");
        for (int l = 0; l < n_layers && l < 3; l++) { /* the first three are copied */
            const capture_layer *L = &cap->layers[l];
            const size_t nq = (size_t)cap->tq * (size_t)L->hq * (size_t)L->d;
            const size_t nkv = (size_t)cap->tkv * (size_t)L->hkv * (size_t)L->d;
            const uint16_t *qkv[3];
            sweep_stage_layer(st, l, qkv);
            cr_expect_eq(memcmp(qkv[0], L->q, nq * 2), 0, "layer %d q staged", l);
            cr_expect_eq(memcmp(qkv[1], L->k, nkv * 2), 0, "layer %d k staged", l);
            cr_expect_eq(memcmp(qkv[2], L->v, nkv * 2), 0, "layer %d v staged", l);
            if (l > 0) {
                const uint16_t *prev[3];
                sweep_stage_layer(st, l - 1, prev);
                cr_expect(qkv[0] >= prev[2] + nkv, "layers %d and %d in separate slots", l - 1, l);
            }
        }
        sweep_stage_close(st);
        capture_close(cap);
    }
}

Test(sweep, failure_mid_run_keeps_earlier_layers)
{
    capture *cap = small_capture(3, 2, 12, 4);
    pg_err err = {0};
    cr_assert_eq(cap->n_layers, 3);
    const int hq = cap->layers[0].hq;
    cr_assert_eq(hq, 4);

    pg_store *s;
    int64_t run;
    pg_err serr = {0};
    const pg_status st = sweep_failing_at(cap, "layer_metrics", 2, &s, &run, &serr);
    sqlite3 *db = store_handle(s);
    cr_assert_eq(st, PG_ERR_DB, "sweep_run returned %d (%s)", st, serr.msg);
    cr_assert_eq(serr.code, PG_ERR_DB);
    cr_assert_eq(strncmp(serr.msg, "layer 2: ", 9), 0, "message '%s'", serr.msg);
    cr_assert_not_null(strstr(serr.msg, "injected failure"), "message '%s'", serr.msg);

    /* layers 0 and 1 whole, layer 2 nothing */
    cr_assert_eq(tu_sql_int(db, "SELECT count(*) FROM layer_metrics WHERE run_id = %lld", (long long)run),
                 2 * N_MODES * (hq + 1));
    for (int l = 0; l < 2; l++) {
        cr_assert_eq(tu_sql_int(db, "SELECT count(*) FROM layer_metrics WHERE layer = %d", l),
                     N_MODES * (hq + 1), "layer %d incomplete", l);
        cr_assert_eq(tu_sql_int(db, "SELECT count(*) FROM quant_stats WHERE layer = %d", l), 3,
                     "layer %d quant_stats", l);
    }
    cr_assert_eq(tu_sql_int(db, "SELECT count(*) FROM layer_metrics WHERE layer = 2"), 0);
    cr_assert_eq(tu_sql_int(db, "SELECT count(*) FROM quant_stats WHERE layer = 2"), 0);
    /* the run itself is the caller's to finish */
    char status[16];
    cr_assert_eq(store_run_status(s, run, status, sizeof status, &err), PG_OK, "%s", err.msg);
    cr_assert_str_eq(status, "running");
    /* no transaction was left open: a new one starts, and the run can be failed */
    cr_assert_eq(sqlite3_get_autocommit(db), 1, "a transaction is still open");
    cr_assert_eq(store_run_finish(s, run, "failed", serr.msg, &err), PG_OK, "%s", err.msg);
    cr_assert_eq(tu_sql_int(db, "SELECT count(*) FROM layer_metrics"), 2 * N_MODES * (hq + 1));

    store_close(s);
    capture_close(cap);
}

/* Layer 1 of 4 fails to store while layer 2 computes: layer 0 stays, layers
 * 1..3 are not stored, and the error names layer 1 (not the layer computing). */
Test(sweep, store_failure_stops_the_layers_after_it)
{
    capture *cap = small_capture(4, 1, 16, 0);
    const int hq = cap->layers[0].hq;
    pg_store *s;
    int64_t run;
    pg_err serr = {0};
    cr_assert_eq(sweep_failing_at(cap, "quant_stats", 1, &s, &run, &serr), PG_ERR_DB, "%s",
                 serr.msg);
    sqlite3 *db = store_handle(s);
    cr_assert_eq(strncmp(serr.msg, "layer 1: ", 9), 0, "message '%s'", serr.msg);
    cr_assert_not_null(strstr(serr.msg, "injected failure"), "message '%s'", serr.msg);
    cr_assert_eq(tu_sql_int(db, "SELECT count(*) FROM layer_metrics WHERE layer = 0"),
                 N_MODES * (hq + 1));
    cr_assert_eq(tu_sql_int(db, "SELECT count(*) FROM quant_stats WHERE layer = 0"), 3);
    cr_assert_eq(tu_sql_int(db, "SELECT count(*) FROM layer_metrics WHERE layer >= 1"), 0,
                 "layer 1 rolled back, layers 2 and 3 never stored");
    cr_assert_eq(tu_sql_int(db, "SELECT count(*) FROM quant_stats WHERE layer >= 1"), 0);
    cr_assert_eq(sqlite3_get_autocommit(db), 1, "a transaction is still open");
    store_close(s);
    capture_close(cap);
}

/* ---- --variants ------------------------------------------------------- */

/* Parses list expecting PG_ERR_USAGE with a message containing needle, and
 * *out left alone. */
static void expect_variants_error(const char *list, const char *needle)
{
    sweep_variants v = {.n = -1};
    pg_err err = {0};
    cr_assert_eq(sweep_variants_parse(list, &v, &err), PG_ERR_USAGE, "'%s' accepted", list);
    cr_assert_eq(err.code, PG_ERR_USAGE);
    cr_assert_not_null(strstr(err.msg, needle), "'%s': message '%s' lacks '%s'", list, err.msg,
                       needle);
    cr_assert_eq(strncmp(err.msg, "--variants: ", 12), 0, "'%s': message '%s'", list, err.msg);
    cr_assert_eq(v.n, -1, "'%s': out written on failure", list);
}

/* Parses list expecting success with exactly the profiles of want
 * (comma-separated full names, in the table's order). */
static void expect_variants(const char *list, const char *want)
{
    sweep_variants v = {.n = -1};
    pg_err err = {0};
    cr_assert_eq(sweep_variants_parse(list, &v, &err), PG_OK, "'%s': %s", list, err.msg);
    char got[512] = "";
    size_t at = 0;
    for (int i = 0; i < v.n; i++)
        at += (size_t)snprintf(got + at, sizeof got - at, "%s%s", i ? "," : "",
                               attn_profile_variant(v.p[i]));
    cr_assert_str_eq(got, want, "'%s'", list);
    cr_assert_eq(err.code, PG_OK);
}

Test(sweep, variants_parse)
{
    /* bare modes expand to their default profiles */
    expect_variants(SWEEP_DEFAULT_VARIANTS, "bf16,fp8kv@fixed,fp8qkv@fa3");
    expect_variants("fp8kv", "fp8kv@fixed");
    expect_variants("fp8qkv", "fp8qkv@fa3");
    /* any profile of the table, kept in the table's order */
    expect_variants("fp8qkv@ideal,fp8qkv@fa3", "fp8qkv@fa3,fp8qkv@ideal");
    expect_variants("fp8qkv,bf16", "bf16,fp8qkv@fa3");
    expect_variants("fp8qkv@ideal,fp8kv@vllm-24197,fp8qkv@fa3-1level",
                    "fp8kv@vllm-24197,fp8qkv@fa3-1level,fp8qkv@ideal");
    char all[512] = "";
    size_t at = 0;
    for (size_t i = 0; i < attn_profile_count(); i++)
        at += (size_t)snprintf(all + at, sizeof all - at, "%s%s", i ? "," : "",
                               attn_profile_variant(attn_profile_at(i)));
    expect_variants(all, all);

    /* duplicates after expansion name both entries and the profile */
    expect_variants_error("bf16,bf16", "'bf16' and 'bf16' are both bf16");
    expect_variants_error("fp8kv,fp8kv@fixed", "'fp8kv' and 'fp8kv@fixed' are both fp8kv@fixed");
    expect_variants_error("fp8qkv@fa3,bf16,fp8qkv", "'fp8qkv@fa3' and 'fp8qkv' are both "
                                                    "fp8qkv@fa3");
    expect_variants_error("", "the list is empty");
    expect_variants_error("bf16,,fp8kv", "has an empty entry");
    expect_variants_error(",bf16", "has an empty entry");
    expect_variants_error("bf16,", "ends with a comma");
    /* unknown names are named, with the choices */
    expect_variants_error("fp8kv@nope", "'fp8kv@nope' is not a kernel profile (one of bf16, "
                                        "fp8kv@fixed, fp8kv@vllm-24197, fp8qkv@fa3");
    expect_variants_error("fp8kv@nope", "fp8kv = fp8kv@fixed, fp8qkv = fp8qkv@fa3");
    expect_variants_error("bf16@fixed", "'bf16@fixed'");
    expect_variants_error("FP8KV", "'FP8KV'");
    expect_variants_error("bf16,fp8", "'fp8'");
    expect_variants_error("fp8kvx", "'fp8kvx'");
    expect_variants_error("bf1", "'bf1'");
    expect_variants_error("bf16 ", "'bf16 '");
    /* the other forms of the grammar are no profile to run */
    expect_variants_error("fp8kv~spec", "'fp8kv~spec' is not a kernel profile");
    expect_variants_error("ext:vllm", "'ext:vllm' is not a kernel profile");
}


/* ---- external outputs ----------------------------------------------------- */

/* Shape of the hand-written capture. */
#define EXT_HQ 4
#define EXT_HKV 2
#define EXT_D 16
#define EXT_SEQS 2
#define EXT_TQ 8   /* seq_q [5, 3] */
#define EXT_TKV 10 /* seq_kv [7, 3]: 2 context tokens on sequence 0 */
#define EXT_LAYERS 2

/* A deterministic bf16 in about [-3, 3) for element i of stream k. */
static uint16_t gen_bf16(uint64_t k, uint64_t i)
{
    uint64_t x = (k * 0x9E3779B97F4A7C15ull) ^ (i + 0x632BE59BD9B4E019ull);
    x ^= x >> 33;
    x *= 0xFF51AFD7ED558CCDull;
    x ^= x >> 33;
    x *= 0xC4CEB9FE1A85EC53ull;
    x ^= x >> 33;
    const double u = (double)(x >> 11) / (double)(1ull << 53);
    return bf16_from_f32((float)(6.0 * u - 3.0));
}

/* Reads every metric column of one layer_metrics row into v (NULL as NaN)
 * and its NULL-ness into is_null; asserts the row exists. */
static void read_metrics(sqlite3 *db, int64_t run, int layer, int head, const char *variant,
                         double v[N_METRIC_COLS], int is_null[N_METRIC_COLS])
{
    char *sql = sqlite3_mprintf("SELECT rel_l2, max_abs, mean_abs, p99_abs, cos_sim, sqnr_db, "
                                "nan_count, inf_count FROM layer_metrics WHERE run_id = %lld AND "
                                "layer = %d AND head = %d AND variant = %Q AND backend = 'cpu'",
                                (long long)run, layer, head, variant);
    sqlite3_stmt *s = NULL;
    cr_assert_eq(sqlite3_prepare_v2(db, sql, -1, &s, NULL), SQLITE_OK, "%s", sqlite3_errmsg(db));
    cr_assert_eq(sqlite3_step(s), SQLITE_ROW, "no row: layer %d head %d %s", layer, head, variant);
    for (int c = 0; c < N_METRIC_COLS; c++) {
        is_null[c] = sqlite3_column_type(s, c) == SQLITE_NULL;
        v[c] = is_null[c] ? NAN : sqlite3_column_double(s, c);
    }
    cr_assert_eq(sqlite3_step(s), SQLITE_DONE, "two rows: layer %d head %d %s", layer, head, variant);
    sqlite3_finalize(s);
    sqlite3_free(sql);
}

/* Asserts that sweep_layer_rows says what the sweep of cap under so stored
 * for each layer (store_sweep_layer_rows): what run --resume counts as whole. */
static void expect_layer_rows_as_stored(pg_store *s, int64_t run, const capture *cap,
                                        const char *name, const sweep_options *so)
{
    store_layer_rows got[8];
    cr_assert_leq(cap->n_layers, 8);
    pg_err err = {0};
    cr_assert_eq(store_sweep_layer_rows(s, run, name, cap->n_layers, got, &err), PG_OK, "%s",
                 err.msg);
    for (int l = 0; l < cap->n_layers; l++) {
        store_layer_rows want;
        sweep_layer_rows(cap, l, so, &want);
        cr_assert_gt(want.metrics, 0);
        cr_assert_eq(got[l].metrics, want.metrics, "layer %d: %lld layer_metrics rows stored, "
                     "sweep_layer_rows says %lld", l, (long long)got[l].metrics,
                     (long long)want.metrics);
        cr_assert_eq(got[l].quant, want.quant, "layer %d: %lld quant_stats rows stored, "
                     "sweep_layer_rows says %lld", l, (long long)got[l].quant,
                     (long long)want.quant);
        cr_assert_eq(want.shapes, 1);
        cr_assert_eq(got[l].shapes, want.shapes, "layer %d: %lld layer_shapes rows stored", l,
                     (long long)got[l].shapes);
        const capture_layer *L = &cap->layers[l];
        cr_assert_eq(tu_sql_int(store_handle(s), "SELECT count(*) FROM layer_shapes WHERE "
                                "run_id = %lld AND capture = %Q AND layer = %d AND hq = %d AND "
                                "hkv = %d AND d = %d AND window = %d AND has_sinks = %d",
                                (long long)run, name, l, L->hq, L->hkv, L->d, L->window,
                                L->sinks != NULL), 1, "layer %d: the stored shape differs", l);
    }
}

Test(sweep, external_output_equal_to_bf16_gets_bf16s_metrics)
{
    static const int32_t seq_q[EXT_SEQS] = {5, 3}, seq_kv[EXT_SEQS] = {7, 3};
    static uint16_t q[EXT_LAYERS][EXT_TQ * EXT_HQ * EXT_D];
    static uint16_t k[EXT_LAYERS][EXT_TKV * EXT_HKV * EXT_D];
    static uint16_t v[EXT_LAYERS][EXT_TKV * EXT_HKV * EXT_D];
    static uint16_t ext[EXT_TQ * EXT_HQ * EXT_D];
    static const float sinks[EXT_HQ] = {0.5f, -1.0f, 2.0f, 0.25f};
    for (int l = 0; l < EXT_LAYERS; l++) {
        for (size_t i = 0; i < sizeof q[l] / sizeof q[l][0]; i++) q[l][i] = gen_bf16(3 * l + 1, i);
        for (size_t i = 0; i < sizeof k[l] / sizeof k[l][0]; i++) k[l][i] = gen_bf16(3 * l + 2, i);
        for (size_t i = 0; i < sizeof v[l] / sizeof v[l][0]; i++) v[l][i] = gen_bf16(3 * l + 3, i);
    }
    /* layer 0's bf16-mode output, the "external implementation" */
    const attn_batch b = {EXT_SEQS, seq_q, seq_kv, EXT_HQ, EXT_HKV, EXT_D, 0, 0.25f, sinks};
    pg_err err = {0};
    cr_assert_eq(attn_variant_bf16(&b, q[0], k[0], v[0], ext, 1, &err), PG_OK, "%s", err.msg);

    st_writer *w = NULL;
    cr_assert_eq(st_writer_create(&w, &err), PG_OK, "%s", err.msg);
    cr_assert_eq(st_writer_add_meta(w, "format", CAPTURE_FORMAT_V1, &err), PG_OK);
    cr_assert_eq(st_writer_add_meta(w, "model", "ext-test", &err), PG_OK);
    cr_assert_eq(st_writer_add_meta(w, "seq_q", "[5, 3]", &err), PG_OK);
    cr_assert_eq(st_writer_add_meta(w, "seq_kv", "[7, 3]", &err), PG_OK);
    cr_assert_eq(st_writer_add_meta(w, "sm_scale", "0.25", &err), PG_OK);
    const int64_t qshape[3] = {EXT_TQ, EXT_HQ, EXT_D}, kvshape[3] = {EXT_TKV, EXT_HKV, EXT_D},
                  sshape[1] = {EXT_HQ};
    char name[64];
    for (int l = 0; l < EXT_LAYERS; l++) {
        snprintf(name, sizeof name, "layers.%d.q", l);
        cr_assert_eq(st_writer_add_tensor(w, name, ST_BF16, 3, qshape, q[l], &err), PG_OK, "%s",
                     err.msg);
        snprintf(name, sizeof name, "layers.%d.k", l);
        cr_assert_eq(st_writer_add_tensor(w, name, ST_BF16, 3, kvshape, k[l], &err), PG_OK, "%s",
                     err.msg);
        snprintf(name, sizeof name, "layers.%d.v", l);
        cr_assert_eq(st_writer_add_tensor(w, name, ST_BF16, 3, kvshape, v[l], &err), PG_OK, "%s",
                     err.msg);
    }
    cr_assert_eq(st_writer_add_tensor(w, "layers.0.sinks", ST_F32, 1, sshape, sinks, &err), PG_OK);
    cr_assert_eq(st_writer_add_tensor(w, "layers.0.out.vllm", ST_BF16, 3, qshape, ext, &err), PG_OK);
    cr_assert_eq(st_writer_write(w, tu_in_dir("ext.safetensors"), &err), PG_OK, "%s", err.msg);
    st_writer_free(w);

    capture *cap = open_capture(tu_in_dir("ext.safetensors"));
    cr_assert_eq(cap->n_layers, EXT_LAYERS);
    cr_assert_eq(cap->layers[0].sm_scale, 0.25f);
    cr_assert_eq(cap->layers[0].n_ext, 1);
    cr_assert_eq(cap->layers[1].n_ext, 0);
    cr_assert_str_eq(cap->layers[0].ext[0].name, "vllm");
    cr_assert_eq(memcmp(cap->layers[0].ext[0].out, ext, sizeof ext), 0);

    pg_store *s = open_store("d.db");
    const int64_t run = begin_run(s);
    const sweep_options so = options(SWEEP_DEFAULT_VARIANTS);
    cr_assert_eq(sweep_run(s, run, cap, "ext.safetensors", &so, &err), PG_OK, "%s", err.msg);
    sqlite3 *db = store_handle(s);

    cr_assert_eq(tu_sql_int(db, "SELECT count(*) FROM layer_metrics WHERE variant = 'ext:vllm'"),
                 EXT_HQ + 1);
    cr_assert_eq(tu_sql_int(db, "SELECT count(*) FROM layer_metrics WHERE variant = 'ext:vllm' AND "
                                "layer = 0 AND head BETWEEN -1 AND %d",
                            EXT_HQ - 1),
                 EXT_HQ + 1);
    cr_assert_eq(tu_sql_int(db, "SELECT count(*) FROM layer_metrics"),
                 EXT_LAYERS * N_MODES * (EXT_HQ + 1) + EXT_HQ + 1);
    for (int h = -1; h < EXT_HQ; h++) {
        double mb[N_METRIC_COLS], me[N_METRIC_COLS];
        int nb[N_METRIC_COLS], ne[N_METRIC_COLS];
        read_metrics(db, run, 0, h, "bf16", mb, nb);
        read_metrics(db, run, 0, h, "ext:vllm", me, ne);
        cr_assert(isfinite(mb[0]) && mb[0] > 0, "head %d: bf16 rel_l2 %g", h, mb[0]);
        for (int c = 0; c < N_METRIC_COLS; c++) {
            cr_assert_eq(nb[c], ne[c], "head %d column %d: NULL-ness differs", h, c);
            cr_assert_eq(memcmp(&mb[c], &me[c], sizeof mb[c]), 0,
                         "head %d column %d: bf16 %.17g vs ext %.17g", h, c, mb[c], me[c]);
        }
    }
    expect_layer_rows_as_stored(s, run, cap, "ext.safetensors", &so);
    /* and the ext output differs from the fp8 modes */
    double mk[N_METRIC_COLS], me[N_METRIC_COLS];
    int nk[N_METRIC_COLS], ne[N_METRIC_COLS];
    read_metrics(db, run, 0, -1, "fp8kv@fixed", mk, nk);
    read_metrics(db, run, 0, -1, "ext:vllm", me, ne);
    cr_assert_neq(mk[0], me[0]);

    store_close(s);
    capture_close(cap);

    /* A NaN in an external output is recorded, not refused: head 1 of the
     * second token of layer 0 is NaN in a copy of the capture. */
    ext[(1 * EXT_HQ + 1) * EXT_D] = 0x7FC0;
    cr_assert_eq(st_writer_create(&w, &err), PG_OK, "%s", err.msg);
    cr_assert_eq(st_writer_add_meta(w, "format", CAPTURE_FORMAT_V1, &err), PG_OK);
    cr_assert_eq(st_writer_add_meta(w, "seq_q", "[5, 3]", &err), PG_OK);
    cr_assert_eq(st_writer_add_meta(w, "seq_kv", "[7, 3]", &err), PG_OK);
    cr_assert_eq(st_writer_add_tensor(w, "layers.0.q", ST_BF16, 3, qshape, q[0], &err), PG_OK);
    cr_assert_eq(st_writer_add_tensor(w, "layers.0.k", ST_BF16, 3, kvshape, k[0], &err), PG_OK);
    cr_assert_eq(st_writer_add_tensor(w, "layers.0.v", ST_BF16, 3, kvshape, v[0], &err), PG_OK);
    cr_assert_eq(st_writer_add_tensor(w, "layers.0.out.nan", ST_BF16, 3, qshape, ext, &err), PG_OK);
    cr_assert_eq(st_writer_write(w, tu_in_dir("nan.safetensors"), &err), PG_OK, "%s", err.msg);
    st_writer_free(w);
    cap = open_capture(tu_in_dir("nan.safetensors"));
    s = open_store("n.db");
    const int64_t run2 = begin_run(s);
    cr_assert_eq(sweep_run(s, run2, cap, "nan.safetensors", &so, &err), PG_OK, "%s", err.msg);
    db = store_handle(s);
    cr_assert_eq(tu_sql_int(db, "SELECT nan_count FROM layer_metrics WHERE variant = 'ext:nan' AND "
                                "head = -1"), 1);
    cr_assert_eq(tu_sql_int(db, "SELECT nan_count FROM layer_metrics WHERE variant = 'ext:nan' AND "
                                "head = 1"), 1);
    cr_assert_eq(tu_sql_int(db, "SELECT nan_count FROM layer_metrics WHERE variant = 'ext:nan' AND "
                                "head = 0"), 0);
    cr_assert_eq(tu_sql_int(db, "SELECT count(*) FROM layer_metrics WHERE variant = 'ext:nan' AND "
                                "head = 1 AND rel_l2 > 1e308"), 1);
    store_close(s);
    capture_close(cap);
}

/* ---- fp8 calibration ------------------------------------------------------ */

/* A capture whose q spans two of capture_open's 4 MiB scan work items (2^21
 * bf16 each), which also read the amax: 1,100 x 32 x 64 = 2,252,800 values,
 * as CAL_SEQS sequences of CAL_SEQ_LEN tokens so that the attention stays
 * cheap (under the sanitizers too). */
#define CAL_SEQS 100
#define CAL_SEQ_LEN 11
#define CAL_T (CAL_SEQS * CAL_SEQ_LEN)
#define CAL_HQ 32
#define CAL_HKV 4
#define CAL_D 64
#define CAL_LAYERS 2
#define CAL_NQ ((size_t)CAL_T * CAL_HQ * CAL_D)
#define CAL_NKV ((size_t)CAL_T * CAL_HKV * CAL_D)

/* Planted magnitudes per layer of the scales captures: q, k, v (above
 * gen_bf16's 3), so that each tensor's amax is known exactly. */
static const float cal_big[CAL_LAYERS][3] = {{40.0f, -24.0f, 12.5f}, {-7.5f, 96.0f, -5.0f}};
/* The q/k/v_scale metadata of cal_capture's with_scales capture, per layer. */
static const float cal_meta[3][CAL_LAYERS] = {{0.5f, 0.375f}, {0.25f, 0.0625f}, {2.0f, 0.125f}};

/* A capture file of CAL_LAYERS layers in the scratch directory with each
 * tensor's largest magnitude (cal_big) planted in a different work item
 * (the last element of q, in its second item; k and v at other places);
 * with_scales: also q/k/v_scale metadata (cal_meta). Opened. */
static capture *cal_capture(const char *file, int with_scales)
{
    static uint16_t q[CAL_LAYERS][CAL_NQ], k[CAL_LAYERS][CAL_NKV], v[CAL_LAYERS][CAL_NKV];
    const size_t at[3] = {CAL_NQ - 1, CAL_NKV / 2, 0};
    pg_err err = {0};
    st_writer *w = NULL;
    cr_assert_eq(st_writer_create(&w, &err), PG_OK, "%s", err.msg);
    cr_assert_eq(st_writer_add_meta(w, "format", CAPTURE_FORMAT_V1, &err), PG_OK);
    char seqs[CAL_SEQS * 4 + 2] = "[";
    for (int i = 0; i < CAL_SEQS; i++)
        snprintf(seqs + strlen(seqs), sizeof seqs - strlen(seqs), "%s%d", i ? "," : "",
                 CAL_SEQ_LEN);
    strcat(seqs, "]");
    cr_assert_eq(st_writer_add_meta(w, "seq_q", seqs, &err), PG_OK);
    cr_assert_eq(st_writer_add_meta(w, "seq_kv", seqs, &err), PG_OK);
    static const char *const keys[3] = {"q_scale", "k_scale", "v_scale"};
    for (int x = 0; with_scales && x < 3; x++) {
        char list[64];
        snprintf(list, sizeof list, "[%.9g,%.9g]", (double)cal_meta[x][0], (double)cal_meta[x][1]);
        cr_assert_eq(st_writer_add_meta(w, keys[x], list, &err), PG_OK, "%s", err.msg);
    }
    const int64_t qshape[3] = {CAL_T, CAL_HQ, CAL_D}, kvshape[3] = {CAL_T, CAL_HKV, CAL_D};
    for (int l = 0; l < CAL_LAYERS; l++) {
        uint16_t *t[3] = {q[l], k[l], v[l]};
        const size_t n[3] = {CAL_NQ, CAL_NKV, CAL_NKV};
        for (int x = 0; x < 3; x++) {
            for (size_t i = 0; i < n[x]; i++) t[x][i] = gen_bf16(10 * l + x, i);
            t[x][at[x]] = bf16_from_f32(cal_big[l][x]);
        }
        char name[64];
        snprintf(name, sizeof name, "layers.%d.q", l);
        cr_assert_eq(st_writer_add_tensor(w, name, ST_BF16, 3, qshape, q[l], &err), PG_OK);
        snprintf(name, sizeof name, "layers.%d.k", l);
        cr_assert_eq(st_writer_add_tensor(w, name, ST_BF16, 3, kvshape, k[l], &err), PG_OK);
        snprintf(name, sizeof name, "layers.%d.v", l);
        cr_assert_eq(st_writer_add_tensor(w, name, ST_BF16, 3, kvshape, v[l], &err), PG_OK);
    }
    cr_assert_eq(st_writer_write(w, tu_in_dir(file), &err), PG_OK, "%s", err.msg);
    st_writer_free(w);
    return open_capture(tu_in_dir(file));
}

/* Sweeps cap (fp8kv and fp8qkv: q's row comes from fp8qkv) under policy
 * into a new database db_name and asserts every layer's q, k and v
 * quant_stats row: scale exactly want[layer][tensor] as a float, and
 * scale_source source. */
static void assert_stored_scales(const capture *cap, sweep_scales policy, const char *db_name,
                                 const float want[CAL_LAYERS][3], const char *source)
{
    pg_err err = {0};
    pg_store *s = open_store(db_name);
    const int64_t run = begin_run(s);
    sweep_options so = options("fp8kv,fp8qkv");
    so.scales = policy;
    cr_assert_eq(sweep_run(s, run, cap, "cal.safetensors", &so, &err), PG_OK, "%s", err.msg);
    sqlite3 *db = store_handle(s);
    static const char *const names[3] = {"q", "k", "v"};
    for (int l = 0; l < CAL_LAYERS; l++)
        for (int x = 0; x < 3; x++) {
            char *sql = sqlite3_mprintf("SELECT scale, scale_source FROM quant_stats WHERE "
                                        "run_id = %lld AND layer = %d AND tensor = %Q",
                                        (long long)run, l, names[x]);
            sqlite3_stmt *st = NULL;
            cr_assert_eq(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK);
            cr_assert_eq(sqlite3_step(st), SQLITE_ROW, "no quant_stats for layer %d %s", l,
                         names[x]);
            cr_assert_eq((float)sqlite3_column_double(st, 0), want[l][x],
                         "%s: layer %d %s: scale %.9g, want %.9g", source, l, names[x],
                         sqlite3_column_double(st, 0), (double)want[l][x]);
            cr_assert_str_eq((const char *)sqlite3_column_text(st, 1), source);
            sqlite3_finalize(st);
            sqlite3_free(sql);
        }
    store_close(s);
}

/* amax / 448 of every layer's q, k and v (the default without scales), from
 * the amax the capture scan read. */
Test(sweep, amax_scales_are_each_tensors_amax_over_448)
{
    capture *cap = cal_capture("cal.safetensors", 0);
    float want[CAL_LAYERS][3];
    for (int l = 0; l < CAL_LAYERS; l++)
        for (int x = 0; x < 3; x++) want[l][x] = fabsf(cal_big[l][x]) / 448.0f;
    assert_stored_scales(cap, SWEEP_SCALES_AMAX, "amax.db", want, "amax");
    assert_stored_scales(cap, SWEEP_SCALES_DEFAULT, "default.db", want, "amax");
    capture_close(cap);
}

/* vLLM's calc_kv_scales: amax / 200 for q and k, amax / 100 for v, each one
 * fp32 division. */
Test(sweep, vllm_dynamic_scales_are_amax_over_200_200_100)
{
    capture *cap = cal_capture("cal.safetensors", 0);
    float want[CAL_LAYERS][3];
    for (int l = 0; l < CAL_LAYERS; l++) {
        want[l][0] = fabsf(cal_big[l][0]) / 200.0f;
        want[l][1] = fabsf(cal_big[l][1]) / 200.0f;
        want[l][2] = fabsf(cal_big[l][2]) / 100.0f;
    }
    assert_stored_scales(cap, SWEEP_SCALES_VLLM_DYNAMIC, "vllm.db", want, "vllm-dynamic");
    capture_close(cap);
}

/* unit: 1.0 for every tensor, whatever the capture holds. */
Test(sweep, unit_scales_are_one)
{
    capture *cap = cal_capture("cal.safetensors", 1);
    float want[CAL_LAYERS][3];
    for (int l = 0; l < CAL_LAYERS; l++)
        for (int x = 0; x < 3; x++) want[l][x] = 1.0f;
    assert_stored_scales(cap, SWEEP_SCALES_UNIT, "unit.db", want, "unit");
    capture_close(cap);
}

/* A capture with scales: capture (and the default) stores its metadata;
 * amax overrides it with amax / 448. */
Test(sweep, capture_scales_are_the_metadata_and_the_default_when_present)
{
    capture *cap = cal_capture("cal.safetensors", 1);
    float meta[CAL_LAYERS][3], amax[CAL_LAYERS][3];
    for (int l = 0; l < CAL_LAYERS; l++)
        for (int x = 0; x < 3; x++) {
            meta[l][x] = cal_meta[x][l];
            amax[l][x] = fabsf(cal_big[l][x]) / 448.0f;
        }
    assert_stored_scales(cap, SWEEP_SCALES_CAPTURE, "capture.db", meta, "capture");
    assert_stored_scales(cap, SWEEP_SCALES_DEFAULT, "default.db", meta, "capture");
    assert_stored_scales(cap, SWEEP_SCALES_AMAX, "amax.db", amax, "amax");
    capture_close(cap);
}

/* capture on a capture without scales is a usage error naming it; nothing
 * is stored. */
Test(sweep, capture_scales_without_metadata_are_refused)
{
    capture *cap = cal_capture("cal.safetensors", 0);
    pg_err err = {0};
    pg_store *s = open_store("refused.db");
    const int64_t run = begin_run(s);
    sweep_options so = options("fp8kv");
    so.scales = SWEEP_SCALES_CAPTURE;
    cr_assert_eq(sweep_run(s, run, cap, "cal.safetensors", &so, &err), PG_ERR_USAGE);
    cr_assert_not_null(strstr(err.msg, "capture 'cal.safetensors' has no q_scale"), "%s", err.msg);
    cr_assert_eq(tu_sql_int(store_handle(s), "SELECT (SELECT count(*) FROM quant_stats) +"
                                             " (SELECT count(*) FROM layer_metrics)"), 0);
    store_close(s);
    capture_close(cap);
}

/* A profile whose kernel cannot take a layer (fp8qkv@flashinfer-fa3 and
 * TurboQuant have no attention sinks; this capture has them on both layers)
 * is a cell stored as not supported with the reason, not a failure: the
 * sweep completes with bf16's rows, and each layer holds exactly the rows
 * sweep_layer_rows says (what --resume counts). */
Test(sweep, a_cell_its_kernel_cannot_compute_is_stored_with_the_reason_and_the_run_goes_on)
{
    capture *cap = small_capture(2, 1, 12, 3);
    pg_store *s = open_store("unsupported.db");
    const int64_t run = begin_run(s);
    const sweep_options so = options("bf16,fp8qkv@flashinfer-fa3,turboquant_k8v4");
    pg_err err = {0};
    cr_assert_eq(sweep_run(s, run, cap, "c.safetensors", &so, &err), PG_OK, "%d: %s", err.code,
                 err.msg);
    sqlite3 *db = store_handle(s);
    cr_assert_eq(tu_sql_int(db, "SELECT count(*) FROM unsupported_cells"), 4);
    cr_assert_eq(tu_sql_int(db, "SELECT count(*) FROM unsupported_cells WHERE reason = 'the kernel "
                                "has no attention sinks, and this layer has them'"), 4);
    cr_assert_eq(tu_sql_int(db, "SELECT count(*) FROM layer_metrics WHERE variant <> 'bf16'"), 0);
    cr_assert_eq(tu_sql_int(db, "SELECT count(*) FROM layer_metrics WHERE head = -1"), 2);
    store_layer_rows have[2], want;
    cr_assert_eq(store_sweep_layer_rows(s, run, "c.safetensors", 2, have, &err), PG_OK, "%s",
                 err.msg);
    for (int l = 0; l < 2; l++) {
        sweep_layer_rows(cap, l, &so, &want);
        cr_expect_eq(want.unsupported, 2);
        cr_expect_eq(have[l].unsupported, want.unsupported);
        cr_expect_eq(have[l].metrics, want.metrics);
        cr_expect_eq(have[l].kv_formats, want.kv_formats);
    }
    store_close(s);
    capture_close(cap);
}

/* A window refuses TurboQuant as sinks do, with its own reason; a layer
 * without either is computed. */
Test(sweep, a_window_refuses_turboquant_with_its_reason)
{
    const attn_profile *tq = NULL, *fi = NULL;
    pg_err err = {0};
    cr_assert_eq(attn_profile_find("turboquant_3bit_nc", &tq, &err), PG_OK, "%s", err.msg);
    cr_assert_eq(attn_profile_find("fp8qkv@flashinfer-fa3", &fi, &err), PG_OK, "%s", err.msg);
    const float sinks[1] = {0};
    attn_batch b = {.n_seqs = 1, .hq = 1, .hkv = 1, .d = 16, .window = 8};
    char why[ATTN_REFUSAL_MAX];
    cr_assert_eq(attn_profile_computes(tq, &b, why, sizeof why), 0);
    cr_assert_str_eq(why, "the kernel has no sliding window, and this layer has a window of 8 keys");
    cr_assert_eq(attn_profile_computes(fi, &b, why, sizeof why), 1);
    cr_assert_str_eq(why, "");
    b.window = 0;
    cr_assert_eq(attn_profile_computes(tq, &b, NULL, 0), 1);
    b.sinks = sinks;
    cr_assert_eq(attn_profile_computes(tq, &b, why, sizeof why), 0);
    cr_assert_str_eq(why, "the kernel has no attention sinks, and this layer has them");
}

/* ---- resume and stop ------------------------------------------------------ */

Test(sweep, stored_layers_are_skipped_and_rows_are_what_sweep_layer_rows_says)
{
    capture *cap = small_capture(4, 1, 12, 3);
    /* ... and every profile of the table at once, but those whose kernel has
     * no attention sinks (fp8qkv@flashinfer-fa3, TurboQuant's): this capture has them. */
    char all[512] = "";
    for (size_t i = 0, at = 0; i < attn_profile_count(); i++)
        if (attn_profile_takes_sinks(attn_profile_at(i)))
            at += (size_t)snprintf(all + at, sizeof all - at, "%s%s", at ? "," : "",
                                   attn_profile_variant(attn_profile_at(i)));
    const char *const modes[] = {"fp8kv", "bf16,fp8qkv@ideal,fp8kv@vllm-24197",
                                 SWEEP_DEFAULT_VARIANTS, all};
    for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++) {
        char db_name[32];
        snprintf(db_name, sizeof db_name, "m%zu.db", i);
        pg_store *s = open_store(db_name);
        const int64_t run = begin_run(s);
        sweep_stats stats = {0};
        sweep_options so = options(modes[i]);
        so.stats = &stats;
        pg_err err = {0};
        cr_assert_eq(sweep_run(s, run, cap, "c.safetensors", &so, &err), PG_OK, "%s", err.msg);
        cr_assert_eq(stats.layers_stored, 4);
        cr_assert_eq(stats.layers_skipped, 0);
        expect_layer_rows_as_stored(s, run, cap, "c.safetensors", &so);
        store_close(s);
    }
    /* Layers 0 and 2 marked stored: only 1 and 3 are computed and written. */
    pg_store *s = open_store("skip.db");
    const int64_t run = begin_run(s);
    const unsigned char stored[4] = {1, 0, 1, 0};
    sweep_stats stats = {0};
    sweep_options so = options(SWEEP_DEFAULT_VARIANTS);
    so.stats = &stats;
    so.stored = stored;
    pg_err err = {0};
    cr_assert_eq(sweep_run(s, run, cap, "c.safetensors", &so, &err), PG_OK, "%s", err.msg);
    cr_assert_eq(stats.layers_stored, 2);
    cr_assert_eq(stats.layers_skipped, 2);
    sqlite3 *db = store_handle(s);
    cr_assert_eq(tu_sql_int(db, "SELECT count(DISTINCT layer) FROM layer_metrics"), 2);
    cr_assert_eq(tu_sql_int(db, "SELECT count(*) FROM layer_metrics WHERE layer IN (0, 2)"), 0);
    cr_assert_eq(tu_sql_int(db, "SELECT count(*) FROM quant_stats WHERE layer IN (0, 2)"), 0);
    store_close(s);
    capture_close(cap);
}

Test(sweep, a_set_stop_flag_starts_no_layer_and_says_interrupted)
{
    capture *cap = small_capture(3, 1, 12, 3);
    pg_store *s = open_store("stop.db");
    const int64_t run = begin_run(s);
    volatile sig_atomic_t stop = SIGTERM;
    sweep_stats stats = {0};
    sweep_options so = options(SWEEP_DEFAULT_VARIANTS);
    so.stats = &stats;
    so.stop = &stop;
    pg_err err = {0};
    cr_assert_eq(sweep_run(s, run, cap, "c.safetensors", &so, &err), PG_ERR_INTERRUPTED);
    cr_assert_str_eq(err.msg, "stopped before layer 0: 0 of the capture's 3 layers are stored");
    cr_assert_eq(stats.layers_stored, 0);
    cr_assert_eq(tu_sql_int(store_handle(s), "SELECT count(*) FROM layer_metrics"), 0);
    /* Stored layers do not count as started: with 0 and 1 stored, it stops before 2. */
    const unsigned char stored[3] = {1, 1, 0};
    so.stored = stored;
    pg_err_clear(&err);
    cr_assert_eq(sweep_run(s, run, cap, "c.safetensors", &so, &err), PG_ERR_INTERRUPTED);
    cr_assert_str_eq(err.msg, "stopped before layer 2: 2 of the capture's 3 layers are stored");
    store_close(s);
    capture_close(cap);
}

/* Two profiles of one mode are two variants: each stored under its full
 * name with its own numbers, the layer's quant_stats once. */
Test(sweep, two_profiles_of_one_mode_are_stored_apart)
{
    capture *cap = small_capture(2, 1, 12, 3);
    pg_store *s = open_store("two.db");
    const int64_t run = begin_run(s);
    sweep_options so = options("fp8qkv@ideal,fp8qkv@fa3");
    pg_err err = {0};
    cr_assert_eq(sweep_run(s, run, cap, "c.safetensors", &so, &err), PG_OK, "%s", err.msg);
    sqlite3 *db = store_handle(s);
    const int hq = cap->layers[0].hq;
    cr_assert_eq(tu_sql_int(db, "SELECT count(DISTINCT variant) FROM layer_metrics"), 2);
    for (int l = 0; l < 2; l++) {
        cr_assert_eq(tu_sql_int(db, "SELECT count(*) FROM layer_metrics WHERE layer = %d AND "
                                    "variant = 'fp8qkv@ideal'", l), hq + 1, "layer %d", l);
        cr_assert_eq(tu_sql_int(db, "SELECT count(*) FROM layer_metrics WHERE layer = %d AND "
                                    "variant = 'fp8qkv@fa3'", l), hq + 1, "layer %d", l);
        cr_assert_eq(tu_sql_int(db, "SELECT count(*) FROM quant_stats WHERE layer = %d", l), 3);
    }
    cr_assert_eq(tu_sql_int(db, "SELECT count(*) FROM layer_metrics WHERE variant NOT LIKE "
                                "'fp8qkv@%%'"), 0, "a bare or other name was stored");
    expect_layer_rows_as_stored(s, run, cap, "c.safetensors", &so);
    store_close(s);
    capture_close(cap);
}
