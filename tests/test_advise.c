/*
 * test_advise.c: per-layer KV cache policy advice (harness/advise.h) and
 * `precgate advise`: which layers keep bf16 (any capture, the metric's
 * direction, NaN and NaN/Inf outputs kept), the vLLM flag (sliding_window
 * or the indices), the memory saved, the worst fp8 layer, the JSON shape,
 * and the errors for missing evidence.
 */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "db/store.h"
#include "harness/advise.h"
#include "testutil.h"

TestSuite(advise, .init = tu_scratch_setup, .fini = tu_scratch_teardown, .timeout = 60);

/* gpt-oss-120b's attention: 8 kv heads of 64, a 128-token window on the even layers. */
#define GPT_OSS_HKV 8
#define GPT_OSS_D 64
#define GPT_OSS_WINDOW 128
#define N_LAYERS 4
#define BUDGET 0.08
#define VARIANT "fp8kv@fixed"
/* Bytes of a bf16 element (the known answer, independent of base/mode.c). */
#define BF16_BYTES_PER_ELEMENT 2

/* A whole-layer row of VARIANT in capture c with rel_l2 v, the other metrics
 * unremarkable (cos_sim cos). */
static layer_metric_row row(const char *c, int layer, double v, double cos)
{
    layer_metric_row r = {.capture = c, .layer = layer, .variant = VARIANT};
    r.v = (pg_metric_values){.rel_l2 = v, .max_abs = 0.01, .mean_abs = 0.01, .p99_abs = 0.01,
                             .cos_sim = cos, .sqnr_db = 30.0};
    return r;
}

/* gpt-oss-shaped layers 0 .. n-1 of capture c into s. */
static void gpt_oss_shapes(const char *c, int n, advise_shape *s)
{
    for (int l = 0; l < n; l++)
        s[l] = (advise_shape){c, l, GPT_OSS_HKV, GPT_OSS_D, l % 2 == 0 ? GPT_OSS_WINDOW : 0};
}

/* advise_compute on rows and shapes with VARIANT, metric m and budget b; asserts success. */
static advise_result advise_ok(const layer_metric_row *rows, size_t n_rows,
                               const advise_shape *shapes, size_t n_shapes, pg_metric m,
                               double b)
{
    const advise_request rq = {VARIANT, m, b};
    advise_result r;
    pg_err err = {0};
    cr_assert_eq(advise_compute(&rq, rows, n_rows, shapes, n_shapes, &r, &err), PG_OK, "%s",
                 err.msg);
    return r;
}

/* Asserts that r keeps exactly the layers of want (a 0/1 per layer). */
static void expect_kept(const advise_result *r, const int *want, size_t n)
{
    cr_assert_eq(r->n_layers, n);
    size_t n_keep = 0;
    for (size_t i = 0; i < n; i++) {
        cr_assert_eq(r->layers[i].layer, (int)i);
        cr_assert_eq(r->layers[i].reason != ADVISE_FP8, want[i], "layer %zu: reason %s", i,
                     advise_reason_text(r->layers[i].reason));
        n_keep += (size_t)want[i];
    }
    cr_assert_eq(r->n_keep, n_keep);
}

/* Asserts the vLLM flag of r. */
static void expect_flag(const advise_result *r, const char *want)
{
    int oom = 1;
    char *flag = advise_vllm_flag(r, &oom);
    cr_assert_eq(oom, 0);
    if (want == NULL) cr_assert_null(flag, "flag %s, want none", flag);
    else cr_assert_str_eq(flag, want);
    free(flag);
}

Test(advise, bad_sliding_window_layers_exactly_give_sliding_window)
{
    advise_shape s[N_LAYERS];
    gpt_oss_shapes("c", N_LAYERS, s);
    const layer_metric_row rows[N_LAYERS] = {row("c", 0, 0.09, 0.99), row("c", 1, 0.05, 0.99),
                                              row("c", 2, 0.12, 0.99), row("c", 3, 0.08, 0.99)};
    advise_result r = advise_ok(rows, N_LAYERS, s, N_LAYERS, PG_METRIC_REL_L2, BUDGET);
    const int want[N_LAYERS] = {1, 0, 1, 0};  /* layer 3 at the budget is within it */
    expect_kept(&r, want, N_LAYERS);
    cr_assert_eq(r.sliding_window, 1);
    expect_flag(&r, "--kv-cache-dtype-skip-layers sliding_window");
    /* the worst fp8 layer: 3 at 0.08 over 1 at 0.05 */
    cr_assert_eq(r.worst_fp8, 3);
    cr_assert_eq(r.layers[r.worst_fp8].value, 0.08);
    /* the worst value of a kept layer, and where it was */
    cr_assert_eq(r.layers[2].value, 0.12);
    cr_assert_eq(r.layers[2].reason, ADVISE_OVER_BUDGET);
    advise_result_free(&r);
}

Test(advise, an_arbitrary_subset_gives_the_indices_as_separate_words)
{
    advise_shape s[N_LAYERS];
    gpt_oss_shapes("c", N_LAYERS, s);
    /* layers 1 and 2: one full-attention, one sliding-window layer */
    const layer_metric_row rows[N_LAYERS] = {row("c", 0, 0.01, 0.99), row("c", 1, 0.2, 0.99),
                                              row("c", 2, 0.09, 0.99), row("c", 3, 0.07, 0.99)};
    advise_result r = advise_ok(rows, N_LAYERS, s, N_LAYERS, PG_METRIC_REL_L2, BUDGET);
    const int want[N_LAYERS] = {0, 1, 1, 0};
    expect_kept(&r, want, N_LAYERS);
    cr_assert_eq(r.sliding_window, 0);
    expect_flag(&r, "--kv-cache-dtype-skip-layers 1 2");
    advise_result_free(&r);
    /* the sliding-window layers and one more: the indices, not sliding_window */
    const layer_metric_row more[N_LAYERS] = {row("c", 0, 0.2, 0.99), row("c", 1, 0.2, 0.99),
                                              row("c", 2, 0.2, 0.99), row("c", 3, 0.07, 0.99)};
    r = advise_ok(more, N_LAYERS, s, N_LAYERS, PG_METRIC_REL_L2, BUDGET);
    expect_flag(&r, "--kv-cache-dtype-skip-layers 0 1 2");
    advise_result_free(&r);
    /* nothing kept: no flag, the whole fp8 saving */
    const layer_metric_row good[N_LAYERS] = {row("c", 0, 0.01, 0.99), row("c", 1, 0.02, 0.99),
                                              row("c", 2, 0.03, 0.99), row("c", 3, 0.04, 0.99)};
    r = advise_ok(good, N_LAYERS, s, N_LAYERS, PG_METRIC_REL_L2, BUDGET);
    cr_assert_eq(r.n_keep, 0);
    cr_assert_eq(r.sliding_window, 0);
    expect_flag(&r, NULL);
    cr_assert_eq(r.kv_bytes_saved_fraction, 0.5);
    cr_assert_eq(r.worst_fp8, 3);
    advise_result_free(&r);
}

Test(advise, a_layer_bad_in_any_capture_keeps_bf16)
{
    advise_shape s[2 * N_LAYERS];
    gpt_oss_shapes("a", N_LAYERS, s);
    gpt_oss_shapes("b", N_LAYERS, s + N_LAYERS);
    /* layer 1 is over the budget in capture b only; layer 3 is worst in b */
    const layer_metric_row rows[2 * N_LAYERS] = {
        row("a", 0, 0.01, 0.99), row("a", 1, 0.02, 0.99), row("a", 2, 0.03, 0.99),
        row("a", 3, 0.04, 0.99), row("b", 0, 0.01, 0.99), row("b", 1, 0.11, 0.99),
        row("b", 2, 0.03, 0.99), row("b", 3, 0.06, 0.99)};
    advise_result r = advise_ok(rows, 2 * N_LAYERS, s, 2 * N_LAYERS, PG_METRIC_REL_L2, BUDGET);
    const int want[N_LAYERS] = {0, 1, 0, 0};
    expect_kept(&r, want, N_LAYERS);
    cr_assert_eq(r.n_captures, 2);
    cr_assert_str_eq(r.layers[1].capture, "b");
    cr_assert_eq(r.layers[1].value, 0.11);
    cr_assert_eq(r.worst_fp8, 3);
    cr_assert_str_eq(r.layers[3].capture, "b");
    cr_assert_eq(r.layers[3].value, 0.06);
    /* the memory counts each layer once, not once per capture */
    cr_assert_eq(r.kv_bytes_bf16, N_LAYERS * 2 * GPT_OSS_HKV * GPT_OSS_D * BF16_BYTES_PER_ELEMENT);
    advise_result_free(&r);
}

Test(advise, a_lower_is_worse_metric_keeps_the_layers_below_the_budget)
{
    advise_shape s[N_LAYERS];
    gpt_oss_shapes("c", N_LAYERS, s);
    /* cos_sim: 0.98 is below 0.99 (kept), 0.99 is at it, 0.999 above */
    const layer_metric_row rows[N_LAYERS] = {row("c", 0, 0.5, 0.999), row("c", 1, 0.5, 0.98),
                                              row("c", 2, 0.5, 0.99), row("c", 3, 0.5, 0.995)};
    advise_result r = advise_ok(rows, N_LAYERS, s, N_LAYERS, PG_METRIC_COS_SIM, 0.99);
    const int want[N_LAYERS] = {0, 1, 0, 0};
    expect_kept(&r, want, N_LAYERS);
    expect_flag(&r, "--kv-cache-dtype-skip-layers 1");
    /* the worst layer left in fp8 is the lowest cosine: layer 2 at 0.99 */
    cr_assert_eq(r.worst_fp8, 2);
    cr_assert_eq(r.layers[2].value, 0.99);
    advise_result_free(&r);
}

Test(advise, an_undefined_metric_or_a_nonfinite_output_keeps_bf16)
{
    advise_shape s[N_LAYERS];
    gpt_oss_shapes("c", N_LAYERS, s);
    layer_metric_row rows[N_LAYERS] = {row("c", 0, 0.01, NAN), row("c", 1, NAN, 0.99),
                                        row("c", 2, 0.01, 0.99), row("c", 3, 0.01, 0.99)};
    rows[2].v.nan_count = 3;
    advise_result r = advise_ok(rows, N_LAYERS, s, N_LAYERS, PG_METRIC_REL_L2, BUDGET);
    const int want[N_LAYERS] = {0, 1, 1, 0};
    expect_kept(&r, want, N_LAYERS);
    cr_assert_eq(r.layers[1].reason, ADVISE_UNDEFINED);
    cr_assert(isnan(r.layers[1].value));
    cr_assert_eq(r.layers[2].reason, ADVISE_NONFINITE);
    advise_result_free(&r);
    /* on cos_sim, layer 0's NULL cosine keeps it */
    r = advise_ok(rows, N_LAYERS, s, N_LAYERS, PG_METRIC_COS_SIM, 0.9);
    const int want_cos[N_LAYERS] = {1, 0, 1, 0};
    expect_kept(&r, want_cos, N_LAYERS);
    cr_assert_eq(r.layers[0].reason, ADVISE_UNDEFINED);
    advise_result_free(&r);
}

Test(advise, the_memory_fraction_weighs_each_layer_by_its_kv_elements)
{
    /* 8 x 64 and 2 x 64 kv elements: all bf16 2 x (512 + 128) x 2 = 2560 bytes
     * a token; layer 0 kept: 2048 + 256 = 2304; saved 256 / 2560 = 0.1. */
    const advise_shape s[2] = {{"c", 0, 8, 64, 0}, {"c", 1, 2, 64, 0}};
    const layer_metric_row rows[2] = {row("c", 0, 0.5, 0.99), row("c", 1, 0.01, 0.99)};
    advise_result r = advise_ok(rows, 2, s, 2, PG_METRIC_REL_L2, BUDGET);
    cr_assert_eq(r.kv_bytes_bf16, 2560);
    cr_assert_eq(r.kv_bytes_mixed, 2304);
    cr_assert_eq(r.kv_bytes_saved_fraction, 0.1);
    advise_result_free(&r);
}

/* advise_compute's failure on rows and shapes: code and a message holding needle. */
static void expect_refused(const layer_metric_row *rows, size_t n_rows,
                           const advise_shape *shapes, size_t n_shapes, pg_status code,
                           const char *needle)
{
    const advise_request rq = {VARIANT, PG_METRIC_REL_L2, BUDGET};
    advise_result r;
    pg_err err = {0};
    cr_assert_eq(advise_compute(&rq, rows, n_rows, shapes, n_shapes, &r, &err), code, "%s",
                 err.msg);
    cr_assert_not_null(strstr(err.msg, needle), "'%s' lacks '%s'", err.msg, needle);
    cr_assert_null(r.layers);
}

Test(advise, missing_or_contradicting_evidence_is_refused_naming_it)
{
    advise_shape s[N_LAYERS];
    gpt_oss_shapes("c", N_LAYERS, s);
    layer_metric_row rows[N_LAYERS] = {row("c", 0, 0.01, 0.99), row("c", 1, 0.01, 0.99),
                                        row("c", 2, 0.01, 0.99), row("c", 3, 0.01, 0.99)};
    expect_refused(rows, N_LAYERS, s, 0, PG_ERR_USAGE, "no layer shapes");
    expect_refused(rows, N_LAYERS, s, N_LAYERS - 1, PG_ERR_USAGE,
                   "layer 3 of capture 'c' has rows of fp8kv@fixed but no stored shape");
    expect_refused(rows, N_LAYERS - 1, s, N_LAYERS, PG_ERR_USAGE,
                   "layer 3 of capture 'c' has a shape but no row of fp8kv@fixed");
    for (int l = 0; l < N_LAYERS; l++) rows[l].variant = "fp8qkv@fa3";
    expect_refused(rows, N_LAYERS, s, N_LAYERS, PG_ERR_USAGE,
                   "no whole-layer rows of variant fp8kv@fixed (the run holds: fp8qkv@fa3)");
    for (int l = 0; l < N_LAYERS; l++) rows[l].variant = VARIANT;
    advise_shape two[2 * N_LAYERS];
    gpt_oss_shapes("c", N_LAYERS, two);
    gpt_oss_shapes("d", N_LAYERS, two + N_LAYERS);
    two[N_LAYERS + 2].hkv = 4;
    layer_metric_row both[2 * N_LAYERS];
    for (int l = 0; l < N_LAYERS; l++) {
        both[l] = rows[l];
        both[N_LAYERS + l] = row("d", l, 0.01, 0.99);
    }
    expect_refused(both, 2 * N_LAYERS, two, 2 * N_LAYERS, PG_ERR_SHAPE,
                   "layer 2 has hkv 8, d 64, window 128 in capture 'c' but hkv 4");
}

/* ---- the command ----------------------------------------------------------- */

/* Creates the scratch database db with one complete sweep run (id 1) of
 * capture "c.safetensors": VARIANT and bf16 rows of N_LAYERS gpt-oss-shaped
 * layers, VARIANT's rel_l2 rel[l] and cos_sim cos[l] (NaN: NULL). */
static void make_run(const char *db, const double *rel, const double *cos)
{
    pg_store *s = NULL;
    pg_err err = {0};
    cr_assert_eq(store_open(tu_in_dir(db), &s, &err), PG_OK, "%s", err.msg);
    const store_run_info info = {.kind = "sweep", .label = "t"};
    int64_t run = 0;
    cr_assert_eq(store_run_begin(s, &info, &run, &err), PG_OK, "%s", err.msg);
    for (int l = 0; l < N_LAYERS; l++) {
        const pg_metric_values fp8 = {rel[l], 0.5, 0.01, 0.1, cos[l], 20.0, 0, 0};
        const pg_metric_values bf16 = {0.002, 0.01, 0.001, 0.005, 0.99999, 50.0, 0, 0};
        cr_assert_eq(store_put_layer_metrics(s, run, "c.safetensors", l, -1, VARIANT, "cpu", &fp8,
                                             &err), PG_OK, "%s", err.msg);
        cr_assert_eq(store_put_layer_metrics(s, run, "c.safetensors", l, -1, "bf16", "cpu", &bf16,
                                             &err), PG_OK, "%s", err.msg);
        const store_layer_shape shape = {64, GPT_OSS_HKV, GPT_OSS_D,
                                         l % 2 == 0 ? GPT_OSS_WINDOW : 0, 1};
        cr_assert_eq(store_put_layer_shape(s, run, "c.safetensors", l, &shape, &err), PG_OK,
                     "%s", err.msg);
    }
    cr_assert_eq(store_run_finish(s, run, "complete", NULL, &err), PG_OK, "%s", err.msg);
    store_close(s);
}

/* Runs `precgate advise --db db ARGS`; returns the exit status, output in *out. */
static int advise_cmd(const char *db, const char *args, char **out)
{
    return tu_run_precgatef(out, "advise --db '%s' %s", tu_in_dir(db), args);
}

/* Asserts that out holds needle. */
static void expect_has(const char *out, const char *needle)
{
    cr_assert_not_null(strstr(out, needle), "output lacks \"%s\":\n%s", needle, out);
}

static const double REL_SW_BAD[N_LAYERS] = {0.09, 0.05, 0.12, 0.07};
static const double COS_FINE[N_LAYERS] = {0.999, 0.999, 0.999, 0.999};

Test(advise, the_command_says_sliding_window_and_the_memory_and_the_worst_fp8_layer)
{
    make_run("a.db", REL_SW_BAD, COS_FINE);
    char *out = NULL;
    const int rc = advise_cmd("a.db", "--run 1 --variant fp8kv --budget 0.08", &out);
    cr_assert_eq(rc, 0, "%s", out);
    expect_has(out, "keep in bf16: 2 of 4 layers");
    expect_has(out, "  layer 0: rel_l2 0.09 in 'c.safetensors': worse than the budget");
    expect_has(out, "  layer 2: rel_l2 0.12 in 'c.safetensors': worse than the budget");
    expect_has(out, "vLLM: --kv-cache-dtype fp8 --kv-cache-dtype-skip-layers sliding_window  "
                    "(the kept layers are exactly the sliding-window layers)");
    /* 4 layers of 2 x 8 x 64 elements: 8192 bytes in bf16, 2 kept: 6144, 25% saved */
    expect_has(out, "KV cache saved against all-bf16: 25.0% (fraction 0.25: 2048 of 8192 bytes "
                    "per token)");
    expect_has(out, "16 bits in bf16, 8 (K, e4m3 codes) and 8 (V, e4m3 codes) in the fp8 "
                    "cache; not counted: the per-tensor scales");
    /* against all-fp8 (4096 bytes) the 2 kept bf16 layers cost 2048 more */
    expect_has(out, "KV cache against all-fp8 (per-tensor e4m3): 6144 bytes per token where "
                    "all-fp8 holds 4096, -50.0% saved (negative: more)");
    expect_has(out, "worst layer left in fp8: layer 3, rel_l2 0.07 in 'c.safetensors'");
    free(out);
}

Test(advise, the_json_has_exactly_the_documented_keys)
{
    make_run("a.db", REL_SW_BAD, COS_FINE);
    char *out = NULL;
    const int rc = advise_cmd("a.db", "--run 1 --variant fp8kv --budget 0.1 --json", &out);
    cr_assert_eq(rc, 0, "%s", out);
    cJSON *o = cJSON_Parse(out);
    cr_assert_not_null(o, "not JSON: %s", out);
    static const char *const keys[] = {"variant", "budget", "metric", "keep_bf16", "vllm_flag",
                                       "kv_bytes_saved_fraction",
                                       "kv_bytes_saved_vs_fp8_fraction", "worst_fp8_layer"};
    const size_t n_keys = sizeof keys / sizeof keys[0];
    cr_assert_eq((size_t)cJSON_GetArraySize(o), n_keys, "%s", out);
    for (size_t i = 0; i < n_keys; i++)
        cr_assert_not_null(cJSON_GetObjectItemCaseSensitive(o, keys[i]), "no %s: %s", keys[i], out);
    cr_assert_str_eq(cJSON_GetObjectItem(o, "variant")->valuestring, VARIANT);
    cr_assert_eq(cJSON_GetObjectItem(o, "budget")->valuedouble, 0.1);
    cr_assert_str_eq(cJSON_GetObjectItem(o, "metric")->valuestring, "rel_l2");
    const cJSON *keep = cJSON_GetObjectItem(o, "keep_bf16");
    cr_assert_eq(cJSON_GetArraySize(keep), 1);
    cr_assert_eq(cJSON_GetArrayItem(keep, 0)->valueint, 2);
    cr_assert_str_eq(cJSON_GetObjectItem(o, "vllm_flag")->valuestring,
                     "--kv-cache-dtype-skip-layers 2");
    cr_assert_eq(cJSON_GetObjectItem(o, "kv_bytes_saved_fraction")->valuedouble, 0.375);
    const cJSON *w = cJSON_GetObjectItem(o, "worst_fp8_layer");
    cr_assert_eq(cJSON_GetArraySize(w), 2);
    cr_assert_eq(cJSON_GetObjectItem(w, "layer")->valueint, 0);
    cr_assert_eq(cJSON_GetObjectItem(w, "value")->valuedouble, 0.09);
    cJSON_Delete(o);
    free(out);
    /* nothing kept: vllm_flag null; all kept: worst_fp8_layer null */
    cr_assert_eq(advise_cmd("a.db", "--run 1 --variant fp8kv --budget 1 --json", &out), 0);
    o = cJSON_Parse(out);
    cr_assert(cJSON_IsNull(cJSON_GetObjectItem(o, "vllm_flag")), "%s", out);
    cr_assert_eq(cJSON_GetObjectItem(o, "kv_bytes_saved_fraction")->valuedouble, 0.5);
    cJSON_Delete(o);
    free(out);
    cr_assert_eq(advise_cmd("a.db", "--run 1 --variant fp8kv --budget 0 --json", &out), 0);
    o = cJSON_Parse(out);
    cr_assert(cJSON_IsNull(cJSON_GetObjectItem(o, "worst_fp8_layer")), "%s", out);
    cr_assert_eq(cJSON_GetObjectItem(o, "kv_bytes_saved_fraction")->valuedouble, 0.0);
    cJSON_Delete(o);
    free(out);
}

Test(advise, the_command_keeps_a_null_cosine_and_reads_lower_as_worse)
{
    const double cos[N_LAYERS] = {0.999, NAN, 0.98, 0.995};
    make_run("a.db", REL_SW_BAD, cos);
    char *out = NULL;
    const int rc = advise_cmd("a.db", "--run 1 --variant fp8kv@fixed --budget 0.99 --metric cos_sim",
                              &out);
    cr_assert_eq(rc, 0, "%s", out);
    expect_has(out, "budget cos_sim >= 0.99 (lower is worse)");
    expect_has(out, "  layer 1: undefined (NULL/NaN) metric in 'c.safetensors': kept");
    expect_has(out, "  layer 2: cos_sim 0.98 in 'c.safetensors': worse than the budget");
    expect_has(out, "--kv-cache-dtype-skip-layers 1 2\n");
    expect_has(out, "worst layer left in fp8: layer 3, cos_sim 0.995");
    free(out);
}

Test(advise, the_budget_can_be_a_gate_configs_layer_bound)
{
    make_run("a.db", REL_SW_BAD, COS_FINE);
    const char *cfg = "{\"layer\": {\"abs\": {\"fp8kv\": 0.1}, "
                      "\"metric_abs\": {\"cos_sim\": {\"fp8kv@fixed\": 0.9995}}}}";
    tu_write_file(tu_in_dir("g.json"), cfg, strlen(cfg));
    char *out = NULL;
    char args[512];
    snprintf(args, sizeof args, "--run 1 --variant fp8kv --budget config:%s --json",
             tu_in_dir("g.json"));
    cr_assert_eq(advise_cmd("a.db", args, &out), 0, "%s", out);
    expect_has(out, "\"budget\":\t0.1,");
    expect_has(out, "\"keep_bf16\":\t[2]");
    free(out);
    snprintf(args, sizeof args, "--run 1 --variant fp8kv --metric cos_sim --budget config:%s",
             tu_in_dir("g.json"));
    cr_assert_eq(advise_cmd("a.db", args, &out), 0, "%s", out);
    expect_has(out, "budget cos_sim >= 0.9995");
    expect_has(out, "keep in bf16: 4 of 4 layers");
    free(out);
    /* no bound for that variant: said, not invented */
    snprintf(args, sizeof args, "--run 1 --variant fp8qkv --budget config:%s",
             tu_in_dir("g.json"));
    cr_assert_eq(advise_cmd("a.db", args, &out), 2, "%s", out);
    expect_has(out, "the config has no layer bound for fp8qkv@fa3 on rel_l2 (layer.abs.fp8qkv@fa3)");
    free(out);
}

/* Expects `advise ARGS` on db to fail with exit want_rc and a message holding needle. */
static void expect_fails(const char *db, const char *args, int want_rc, const char *needle)
{
    char *out = NULL;
    const int rc = advise_cmd(db, args, &out);
    cr_assert_eq(rc, want_rc, "advise %s: exit %d: %s", args, rc, out);
    expect_has(out, "precgate: error: ");
    expect_has(out, needle);
    free(out);
}

Test(advise, missing_evidence_exits_nonzero_naming_what_is_missing)
{
    make_run("a.db", REL_SW_BAD, COS_FINE);
    expect_fails("a.db", "--run 7 --variant fp8kv --budget 0.08", 2, "advise: no run 7 in ");
    expect_fails("a.db", "--run 1 --variant fp8qkv --budget 0.08", 2,
                 "advise: run 1: no whole-layer rows of variant fp8qkv@fa3 (the run holds: "
                 "bf16, fp8kv@fixed)");
    expect_fails("a.db", "--run 1 --variant bf16 --budget 0.08", 2,
                 "--variant: 'bf16' is not an fp8 kernel profile");
    expect_fails("a.db", "--run 1 --variant fp8kv --budget nan", 2,
                 "--budget: 'nan' is not a finite number");
    expect_fails("a.db", "--run 1 --variant fp8kv", 2, "--budget X or --budget config:FILE");
    expect_fails("nowhere.db", "--run 1 --variant fp8kv --budget 0.08", 1,
                 "advise: database ");
    /* a run swept before the table: its rows, no shapes */
    sqlite3 *db = NULL;
    cr_assert_eq(sqlite3_open(tu_in_dir("a.db"), &db), SQLITE_OK);
    tu_sql_exec(db, "DELETE FROM layer_shapes");
    sqlite3_close(db);
    expect_fails("a.db", "--run 1 --variant fp8kv --budget 0.08", 2,
                 "advise: run 1: no layer shapes (layer_shapes): the run was swept before schema "
                 "version 12");
    /* a run that is not complete */
    make_run("b.db", REL_SW_BAD, COS_FINE);
    cr_assert_eq(sqlite3_open(tu_in_dir("b.db"), &db), SQLITE_OK);
    tu_sql_exec(db, "UPDATE runs SET status = 'interrupted', error = 'interrupted by SIGTERM'");
    sqlite3_close(db);
    expect_fails("b.db", "--run 1 --variant fp8kv --budget 0.08", 2,
                 "run 1 is interrupted, not complete");
}

Test(advise, a_swept_capture_gives_its_stored_shapes_to_the_advice)
{
    char *out = NULL;
    cr_assert_eq(tu_run_precgatef(&out, "synth -o '%s' --layers 2 --seqs 1 --seq-len 16",
                                  tu_in_dir("c.safetensors")), 0, "%s", out);
    free(out);
    cr_assert_eq(tu_run_precgatef(&out, "run --capture '%s' --db '%s' --backend cpu --no-progress",
                                  tu_in_dir("c.safetensors"), tu_in_dir("s.db")), 0, "%s", out);
    free(out);
    /* gpt-oss-120b: 2 layers of 2 x 8 x 64 elements, 4096 bytes a token in bf16 */
    cr_assert_eq(advise_cmd("s.db", "--run 1 --variant fp8kv --budget 1", &out), 0, "%s", out);
    expect_has(out, "1 capture, 2 layers");
    expect_has(out, "KV cache saved against all-bf16: 50.0% (fraction 0.5: 2048 of 4096 bytes");
    free(out);
}
