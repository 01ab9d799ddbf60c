/* cmd_advise.c: `precgate advise`: which layers keep a bf16 KV cache, and the vLLM flag. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "db/store.h"
#include "harness/advise.h"
#include "harness/advise_evidence.h"
#include "harness/cli/cli.h"
#include "reports/term.h"
#include "harness/gate_config.h"
#include "base/variant.h"

/* The --budget form that takes a gate config's bound. */
#define ADVISE_BUDGET_CONFIG_PREFIX "config:"
/* The metric advised on unless --metric says otherwise: the gate's first. */
#define ADVISE_DEFAULT_METRIC PG_METRIC_REL_L2

const char cmd_advise_usage[] =
    "usage: precgate advise --run N --variant V --budget X|config:FILE [--metric M] [--json]\n"
    "                       [--db PATH]\n\n"
    "Which layers must keep a bf16 KV cache so that every layer left in fp8 is within\n"
    "the budget? From run N's whole-layer rows of variant V: a layer keeps bf16 when,\n"
    "in any capture of the run, its metric is worse than the budget (rel_l2, max_abs,\n"
    "mean_abs, p99_abs: higher is worse; cos_sim, sqnr_db: lower is worse; a value at\n"
    "the budget is within it), the metric is undefined (NULL/NaN: no evidence), or the\n"
    "output had NaN/Inf. Prints the layers, the vLLM option that keeps them in bf16,\n"
    "--kv-cache-dtype-skip-layers (vLLM PR #33695): the indices as separate words, or\n"
    "sliding_window when the kept layers are exactly the sliding-window ones; the KV\n"
    "cache memory saved against all-bf16, and the worst layer left in fp8.\n\n"
    "The memory counts K and V per token from the stored shapes: 2 x hkv x d elements a\n"
    "layer, 2 bytes in bf16 and the mode's element bytes quantized (1 in fp8 e4m3), with\n"
    "the inline scales of a per-token-head cache. Not counted: per-tensor scales, block\n"
    "padding, and that vLLM keeps only the window's tokens of a sliding-window layer.\n\n"
    "  --run N              the run (required; complete, swept at schema version 12 or\n"
    "                       later, or resumed since, which records the layer shapes)\n"
    "  --variant V          a quantized kernel profile of the run (fp8kv@fixed,\n"
    "                       fp8qkv@fa3, ...; a mode alone is its default profile)\n"
    "  --budget X           the bound on the metric: a number, or config:FILE for the\n"
    "                       layer bound of a gate config (precgate gate --config FILE):\n"
    "                       layer.abs.V for rel_l2, layer.metric_abs.M.V for the others\n"
    "  --metric M           rel_l2 (default), max_abs, mean_abs, p99_abs, cos_sim, sqnr_db\n"
    "  --json               print {\"variant\", \"budget\", \"metric\", \"keep_bf16\",\n"
    "                       \"vllm_flag\" (null: none needed), \"kv_bytes_saved_fraction\",\n"
    "                       \"kv_bytes_saved_vs_fp8_fraction\",\n"
    "                       \"worst_fp8_layer\": {\"layer\", \"value\"} (null: none left in fp8)}\n"
    "  --db PATH            database (default $PRECGATE_DB, else ./precgate.db)\n\n"
    "exit status: 0 on success; 2 on a usage error, an unknown run, a variant the run\n"
    "lacks, a run without layer shapes or one not complete; 1 on any other failure (a\n"
    "database that is not there included).\n";

/* Parsed command line. */
typedef struct advise_args {
    long run;
    const char *variant_text, *budget_text;
    variant_name variant;
    pg_metric metric;
    double budget;
    int json;
} advise_args;

/* --budget X: a finite number, or config:FILE's layer bound for a's
 * variant and metric (advise_config_budget). */
static pg_status parse_budget(advise_args *a, pg_err *err)
{
    const char *text = a->budget_text;
    const size_t plen = strlen(ADVISE_BUDGET_CONFIG_PREFIX);
    if (strncmp(text, ADVISE_BUDGET_CONFIG_PREFIX, plen) == 0) {
        const char *path = text + plen;
        gate_config cfg;
        pg_status st = gate_config_load(path, &cfg, err);
        if (st != PG_OK) return st;
        a->budget = advise_config_budget(&cfg, a->variant.full, a->metric);
        if (isnan(a->budget))
            return pg_fail(err, PG_ERR_USAGE, "--budget %s: the config has no layer bound for %s "
                           "on %s (%s%s.%s)", text, a->variant.full,
                           pg_metric_name(a->metric),
                           a->metric == PG_METRIC_REL_L2 ? "layer.abs" : "layer.metric_abs.",
                           a->metric == PG_METRIC_REL_L2 ? "" : pg_metric_name(a->metric),
                           a->variant.full);
        return PG_OK;
    }
    char *end = NULL;
    errno = 0;
    a->budget = strtod(text, &end);
    if (end == text || *end != '\0' || errno != 0 || !isfinite(a->budget))
        return pg_fail(err, PG_ERR_USAGE, "--budget: '%s' is not a finite number or "
                       ADVISE_BUDGET_CONFIG_PREFIX "FILE", text);
    return PG_OK;
}

/* --metric M into the pg_metric to (a cli_option parse). */
static pg_status parse_metric(char *value, void *to, pg_err *err)
{
    return pg_metric_parse("--metric", value, PG_METRIC_VALUE_COUNT, to, err);
}

/* Parses argv into the advise_args args; PG_ERR_USAGE on anything unknown, missing or malformed. */
static pg_status advise_parse(int argc, char **argv, void *args, const char **db_option,
                              pg_err *err)
{
    advise_args *a = args;
    *a = (advise_args){.run = -1, .metric = ADVISE_DEFAULT_METRIC};
    const cli_option opts[] = {
        {"run", CLI_LONG, .to = &a->run, .min = 1, .max = LONG_MAX},
        {"variant", CLI_TEXT, .to = &a->variant_text},
        {"budget", CLI_TEXT, .to = &a->budget_text},
        {"metric", CLI_CALL, .to = &a->metric, .parse = parse_metric},
        {"json", CLI_FLAG, .to = &a->json},
        {"db", CLI_TEXT, .to = db_option},
        {NULL},
    };
    if (cli_parse_options("advise", argc, argv, opts, NULL, err) != PG_OK) return err->code;
    if (a->run < 0) return pg_fail(err, PG_ERR_USAGE, "advise: --run N is required");
    if (a->variant_text == NULL) return pg_fail(err, PG_ERR_USAGE, "advise: --variant V is required");
    if (a->budget_text == NULL)
        return pg_fail(err, PG_ERR_USAGE, "advise: --budget X or --budget config:FILE is required");
    if (variant_name_parse("--variant", a->variant_text, &a->variant, err) != PG_OK)
        return err->code;
    if (a->variant.kind != VARIANT_PROFILE ||
        !pg_mode_quantizes(variant_profile_mode(a->variant.profile)))
        return pg_fail(err, PG_ERR_USAGE, "--variant: '%s' is not an fp8 kernel profile (the "
                       "advice is which layers keep bf16 instead of fp8; one of %s)",
                       a->variant_text, variant_name_profile_choices());
    return parse_budget(a, err);
}

/* The advice as the JSON object cmd_advise_usage names; NULL when out of memory. */
static cJSON *advice_json(const advise_args *a, const advise_result *r, const char *flag)
{
    cJSON *o = cJSON_CreateObject(), *keep = cJSON_CreateArray();
    int ok = o != NULL && keep != NULL;
    ok = ok && cJSON_AddStringToObject(o, "variant", a->variant.full) != NULL;
    ok = ok && cJSON_AddNumberToObject(o, "budget", a->budget) != NULL;
    ok = ok && cJSON_AddStringToObject(o, "metric", pg_metric_name(a->metric)) != NULL;
    for (size_t i = 0; ok && i < r->n_layers; i++)
        if (r->layers[i].reason != ADVISE_FP8)
            ok = cJSON_AddItemToArray(keep, cJSON_CreateNumber(r->layers[i].layer));
    ok = ok && cJSON_AddItemToObject(o, "keep_bf16", keep);
    if (!ok) cJSON_Delete(keep);
    keep = NULL;
    ok = ok && (flag != NULL ? cJSON_AddStringToObject(o, "vllm_flag", flag)
                             : cJSON_AddNullToObject(o, "vllm_flag")) != NULL;
    ok = ok && cJSON_AddNumberToObject(o, "kv_bytes_saved_fraction",
                                       r->kv_bytes_saved_fraction) != NULL;
    ok = ok && cJSON_AddNumberToObject(o, "kv_bytes_saved_vs_fp8_fraction",
                                       r->kv_bytes_saved_vs_fp8_fraction) != NULL;
    if (ok && r->worst_fp8 >= 0) {
        const advise_layer *w = &r->layers[r->worst_fp8];
        cJSON *wo = cJSON_AddObjectToObject(o, "worst_fp8_layer");
        ok = wo != NULL && cJSON_AddNumberToObject(wo, "layer", w->layer) != NULL &&
             cJSON_AddNumberToObject(wo, "value", w->value) != NULL;
    } else if (ok) {
        ok = cJSON_AddNullToObject(o, "worst_fp8_layer") != NULL;
    }
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

/* The advice as text. */
static void advice_text(FILE *out, const advise_args *a, const advise_result *r, const char *flag)
{
    /* what the variant's mode caches, as its row says (base/mode.h) */
    const pg_mode_traits *t = pg_mode_traits_of(variant_profile_mode(a->variant.profile));
    const char *dtype = t->vllm_kv_cache_dtype;
    const char *m = pg_metric_name(a->metric);
    const int higher = pg_metric_higher_is_worse(a->metric);
    term_printf(out, "advise: run %ld, %s, budget %s %s %.6g (%s is worse), %zu capture%s, %zu "
                 "layers\n", a->run, a->variant.full, m, higher ? "<=" : ">=", a->budget,
           higher ? "higher" : "lower", r->n_captures, r->n_captures == 1 ? "" : "s",
           r->n_layers);
    if (r->n_keep == 0) {
        term_printf(out, "keep in bf16: none: every layer is within the budget in every capture\n");
        term_printf(out, "vLLM: no %s needed: every layer can keep the %s cache\n",
                    ADVISE_VLLM_FLAG, dtype);
    } else {
        term_printf(out, "keep in bf16: %zu of %zu layers\n", r->n_keep, r->n_layers);
        for (size_t i = 0; i < r->n_layers; i++) {
            const advise_layer *L = &r->layers[i];
            if (L->reason == ADVISE_FP8) continue;
            term_printf(out, "  layer %d: ", L->layer);
            if (L->reason == ADVISE_OVER_BUDGET)
                term_printf(out, "%s %.4g in '%s': worse than the budget\n", m, L->value, L->capture);
            else
                term_printf(out, "%s in '%s': kept, since nothing shows it is within the budget\n",
                        advise_reason_text(L->reason), L->capture);
        }
        term_printf(out, "vLLM: --kv-cache-dtype %s %s%s\n", dtype, flag,
                r->sliding_window ? "  (the kept layers are exactly the sliding-window layers)"
                                  : "");
    }
    term_printf(out, "KV cache saved against all-bf16: %.1f%% (fraction %.6g: %" PRId64 " of %" PRId64
                 " bytes per token)\n",
            100.0 * r->kv_bytes_saved_fraction, r->kv_bytes_saved_fraction,
            r->kv_bytes_bf16 - r->kv_bytes_mixed, r->kv_bytes_bf16);
    term_printf(out, "KV cache against all-fp8 (per-tensor e4m3): %" PRId64 " bytes per token "
                 "where all-fp8 holds %" PRId64 ", %.1f%% saved (negative: more)\n",
                 r->kv_bytes_mixed, r->kv_bytes_fp8, 100.0 * r->kv_bytes_saved_vs_fp8_fraction);
    char scales[192] = "";
    if (t->k_row_scale_bytes > 0 || t->v_row_scale_bytes > 0)
        snprintf(scales, sizeof scales, ", and per token and KV head %d bytes beside K's codes "
                 "and %d beside V's (scales, zero points, norms, carved from the page)%s",
                 t->k_row_scale_bytes, t->v_row_scale_bytes,
                 t->kv_slot_align_bytes > 1 ? ", the slot rounded up to even bytes" : "");
    else if (t->kv_block_elements > 0)
        snprintf(scales, sizeof scales, ", and a %d-byte scale per %d elements of each row (in "
                 "the page)", t->kv_block_scale_bytes, t->kv_block_elements);
    term_printf(out, "  counted: K and V, 2 x hkv x d elements per layer and token, 16 bits in bf16, "
                 "%d (K, %s codes) and %d (V, %s codes) in the %s cache%s; not counted: %sblock "
                 "padding, and vLLM keeping only the window's tokens of a sliding-window layer\n",
                 t->k_element_bits, pg_number_format_name(t->k_format), t->v_element_bits,
                 pg_number_format_name(t->v_format), dtype, scales,
                 t->kv_scales == PG_SCALES_PER_TENSOR ? "the per-tensor scales, " : "");
    if (r->worst_fp8 >= 0) {
        const advise_layer *w = &r->layers[r->worst_fp8];
        term_printf(out, "worst layer left in %s: layer %d, %s %.4g in '%s'\n", dtype, w->layer, m,
                w->value, w->capture);
    } else {
        term_printf(out, "worst layer left in %s: none: every layer keeps bf16\n", dtype);
    }
}

/* cli_store_job: loads the evidence of the advise_args ctx's run, decides
 * and prints. */
static pg_status advise_job(pg_store *store, const char *db_path, void *ctx, pg_err *err)
{
    (void)db_path;
    const advise_args *a = ctx;
    advise_evidence ev;
    advise_result r = {0};
    const advise_request rq = {a->variant.full, a->metric, a->budget};
    pg_status st = advise_evidence_load(store, (int64_t)a->run, &ev, err);
    if (st == PG_OK) st = advise_evidence_compute(&ev, &rq, &r, err);
    if (st != PG_OK) {  /* say whose evidence is missing */
        const pg_err why = *err;
        pg_err_clear(err);
        if (strncmp(why.msg, "no run ", 7) == 0) pg_fail(err, why.code, "advise: %s", why.msg);
        else pg_fail(err, why.code, "advise: run %ld: %s", a->run, why.msg);
    }
    int oom = 0;
    char *flag = st == PG_OK ? advise_vllm_flag(&r, &oom) : NULL;
    if (oom) st = pg_fail(err, PG_ERR_NOMEM, "advise: out of memory");
    if (st == PG_OK && a->json) {
        cJSON *o = advice_json(a, &r, flag);
        char *text = o != NULL ? cJSON_Print(o) : NULL;
        if (text == NULL) st = pg_fail(err, PG_ERR_NOMEM, "advise: out of memory");
        else printf("%s\n", text);
        free(text);
        cJSON_Delete(o);
    } else if (st == PG_OK) {
        advice_text(stdout, a, &r, flag);
    }
    free(flag);
    advise_result_free(&r);
    advise_evidence_free(&ev);
    return st;
}

/* `precgate advise`: the cli_commands row runs it. */
const cli_store_command cmd_advise_store = {CLI_STORE_EXISTING_CMD, sizeof(advise_args),
                                            advise_parse, advise_job};
