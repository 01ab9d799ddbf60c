/* advise.c: per-layer KV cache policy advice from a run's rows and shapes (see advise.h). */
#include "advise.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/variant.h"

/* Longest list of the run's variants a message names. */
#define ADVISE_VARIANTS_MSG_MAX 256


/* Bytes per token a layer's KV cache holds in mode m: hkv slots of
 * pg_mode_kv_bytes_per_token_head (base/mode.h). */
static int64_t kv_bytes_per_token(pg_mode m, int hkv, int d)
{
    return (int64_t)hkv * (int64_t)pg_mode_kv_bytes_per_token_head(m, d);
}

/* Whether capture c holds a row of variant among rows[0..n). */
static int capture_has_variant(const layer_metric_row *rows, size_t n, const char *variant,
                               const char *c)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(rows[i].variant, variant) == 0 && strcmp(rows[i].capture, c) == 0) return 1;
    return 0;
}

/* The distinct variants of rows[0..n), ", "-joined, into buf. */
static void list_variants(const layer_metric_row *rows, size_t n, char *buf, size_t len)
{
    size_t at = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < n && at < len; i++) {
        int seen = 0;
        for (size_t j = 0; j < i && !seen; j++) seen = strcmp(rows[j].variant, rows[i].variant) == 0;
        if (!seen)
            at += (size_t)snprintf(buf + at, len - at, "%s%s", at ? ", " : "", rows[i].variant);
    }
    if (at == 0) snprintf(buf, len, "none");
}

/* The fields advise_compute checks before it allocates anything. */
static pg_status check_request(const advise_request *rq, const layer_metric_row *rows,
                               size_t n_rows, const advise_shape *shapes, size_t n_shapes,
                               advise_result *out, pg_err *err)
{
    if (rq == NULL || rq->variant == NULL || out == NULL || (rows == NULL && n_rows > 0) ||
        (shapes == NULL && n_shapes > 0))
        return pg_fail(err, PG_ERR_INTERNAL, "advise_compute: NULL argument");
    if ((int)rq->metric < 0 || rq->metric >= PG_METRIC_VALUE_COUNT || !isfinite(rq->budget))
        return pg_fail(err, PG_ERR_INTERNAL, "advise_compute: metric %d, budget %g",
                       (int)rq->metric, rq->budget);
    /* summarise counts the bytes of the variant's mode: it must be a profile that quantizes */
    const variant_profile_id prof = variant_name_profile(rq->variant);
    if (prof == VARIANT_PROFILE_COUNT || !pg_mode_quantizes(variant_profile_mode(prof)))
        return pg_fail(err, PG_ERR_USAGE, "advise: '%s' is not a quantizing kernel profile",
                       rq->variant);
    size_t n_var = 0;
    for (size_t i = 0; i < n_rows; i++) n_var += strcmp(rows[i].variant, rq->variant) == 0;
    if (n_var == 0) {
        char have[ADVISE_VARIANTS_MSG_MAX];
        list_variants(rows, n_rows, have, sizeof have);
        return pg_fail(err, PG_ERR_USAGE, "no whole-layer rows of variant %s (the run holds: %s)",
                       rq->variant, have);
    }
    if (n_shapes == 0)
        return pg_fail(err, PG_ERR_USAGE, "no layer shapes (layer_shapes): the run was swept "
                       "before schema version 12 recorded them; `precgate run --resume RUN "
                       "--capture PATH` records them from the capture");
    return PG_OK;
}

/* Sets the shape of slot L from s, or checks that s agrees with it. */
static pg_status note_shape(advise_layer *L, unsigned char *have, const advise_shape *s,
                            const char **first_capture, pg_err *err)
{
    if (!*have) {
        *L = (advise_layer){.layer = s->layer, .hkv = s->hkv, .d = s->d, .window = s->window,
                            .value = NAN};
        *first_capture = s->capture;
        *have = 1;
        return PG_OK;
    }
    if (L->hkv != s->hkv || L->d != s->d || (L->window > 0) != (s->window > 0))
        return pg_fail(err, PG_ERR_SHAPE, "layer %d has hkv %d, d %d, window %d in capture '%s' "
                       "but hkv %d, d %d, window %d in capture '%s': one advice needs one model",
                       s->layer, L->hkv, L->d, L->window, *first_capture, s->hkv, s->d,
                       s->window, s->capture);
    return PG_OK;
}

/* The reason one row gives to keep its layer in bf16 (ADVISE_FP8: none). */
static advise_reason row_reason(const advise_request *rq, const layer_metric_row *r)
{
    const double v = pg_metric_value(&r->v, rq->metric);
    if (pg_metric_nonfinite(&r->v) > 0) return ADVISE_NONFINITE;
    if (isnan(v)) return ADVISE_UNDEFINED;
    return regress_worse(rq->metric, v, rq->budget) ? ADVISE_OVER_BUDGET : ADVISE_FP8;
}

/* Folds row r into its layer's slot L: the strongest reason, with the
 * capture that first gave it (*why_at), and the worst defined value, with
 * its capture (L->capture). */
static void note_row(const advise_request *rq, advise_layer *L, const layer_metric_row *r,
                     const char **why_at)
{
    const advise_reason why = row_reason(rq, r);
    if (why > L->reason || *why_at == NULL) {
        L->reason = why > L->reason ? why : L->reason;
        *why_at = r->capture;
    }
    const double v = pg_metric_value(&r->v, rq->metric);
    if (!isnan(v) && (isnan(L->value) || regress_worse(rq->metric, v, L->value))) {
        L->value = v;
        L->capture = r->capture;
    }
}

/* Whether rows[i] is the first row of variant in its capture. */
static int first_of_capture(const layer_metric_row *rows, size_t i, const char *variant)
{
    for (size_t j = 0; j < i; j++)
        if (strcmp(rows[j].variant, variant) == 0 && strcmp(rows[j].capture, rows[i].capture) == 0)
            return 0;
    return 1;
}

/* Whether shape s has a row of rq->variant among rows[0..n). */
static int shape_has_row(const advise_request *rq, const layer_metric_row *rows, size_t n,
                         const advise_shape *s)
{
    for (size_t i = 0; i < n; i++)
        if (rows[i].layer == s->layer && strcmp(rows[i].variant, rq->variant) == 0 &&
            strcmp(rows[i].capture, s->capture) == 0)
            return 1;
    return 0;
}

/* Whether row r has its shape among shapes[0..n). */
static int row_has_shape(const layer_metric_row *r, const advise_shape *shapes, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (shapes[i].layer == r->layer && strcmp(shapes[i].capture, r->capture) == 0) return 1;
    return 0;
}

/* The summary fields of out from its layers: kept count, the sliding-window
 * test, the memory, the worst layer left in fp8. */
static void summarise(const advise_request *rq, advise_result *out)
{
    int kept_is_windowed = 1;
    out->worst_fp8 = -1;
    /* the advised variant's mode (check_request: a quantizing profile) */
    const pg_mode rq_mode = variant_profile_mode(variant_name_profile(rq->variant));
    for (size_t i = 0; i < out->n_layers; i++) {
        const advise_layer *L = &out->layers[i];
        const int keep = L->reason != ADVISE_FP8;
        const int64_t base = kv_bytes_per_token(pg_mode_baseline(), L->hkv, L->d);
        out->n_keep += (size_t)keep;
        kept_is_windowed &= keep == (L->window > 0);
        out->kv_bytes_bf16 += base;
        out->kv_bytes_fp8 += kv_bytes_per_token(ADVISE_FP8_REFERENCE_MODE, L->hkv, L->d);
        out->kv_bytes_mixed += keep ? base : kv_bytes_per_token(rq_mode, L->hkv, L->d);
        if (!keep && (out->worst_fp8 < 0 ||
                      regress_worse(rq->metric, L->value, out->layers[out->worst_fp8].value)))
            out->worst_fp8 = (long)i;
    }
    out->sliding_window = out->n_keep > 0 && kept_is_windowed;
    out->kv_bytes_saved_fraction =
        (double)(out->kv_bytes_bf16 - out->kv_bytes_mixed) / (double)out->kv_bytes_bf16;
    out->kv_bytes_saved_vs_fp8_fraction =
        (double)(out->kv_bytes_fp8 - out->kv_bytes_mixed) / (double)out->kv_bytes_fp8;
}

pg_status advise_compute(const advise_request *rq, const layer_metric_row *rows, size_t n_rows,
                         const advise_shape *shapes, size_t n_shapes, advise_result *out,
                         pg_err *err)
{
    if (out != NULL) memset(out, 0, sizeof *out);
    pg_status st = check_request(rq, rows, n_rows, shapes, n_shapes, out, err);
    if (st != PG_OK) return st;
    /* Slots by layer index, over the captures that hold the variant. */
    int max_layer = -1;
    for (size_t i = 0; i < n_rows; i++)
        if (strcmp(rows[i].variant, rq->variant) == 0 && rows[i].layer > max_layer)
            max_layer = rows[i].layer;
    for (size_t i = 0; i < n_shapes; i++)
        if (shapes[i].layer > max_layer &&
            capture_has_variant(rows, n_rows, rq->variant, shapes[i].capture))
            max_layer = shapes[i].layer;
    const size_t n_slots = (size_t)max_layer + 1;
    advise_layer *slot = calloc(n_slots, sizeof *slot);
    unsigned char *have = calloc(n_slots, 1);
    const char **first = calloc(n_slots, sizeof *first), **why_at = calloc(n_slots, sizeof *why_at);
    if (!slot || !have || !first || !why_at) st = pg_fail(err, PG_ERR_NOMEM, "advise: out of memory");
    for (size_t i = 0; st == PG_OK && i < n_shapes; i++) {
        const advise_shape *s = &shapes[i];
        if (!capture_has_variant(rows, n_rows, rq->variant, s->capture)) continue;
        if (!shape_has_row(rq, rows, n_rows, s))
            st = pg_fail(err, PG_ERR_USAGE, "layer %d of capture '%s' has a shape but no row of "
                         "%s: the run does not hold that layer whole", s->layer, s->capture,
                         rq->variant);
        else st = note_shape(&slot[s->layer], &have[s->layer], s, &first[s->layer], err);
    }
    for (size_t i = 0; st == PG_OK && i < n_rows; i++) {
        const layer_metric_row *r = &rows[i];
        if (strcmp(r->variant, rq->variant) != 0) continue;
        if (!row_has_shape(r, shapes, n_shapes)) {
            st = pg_fail(err, PG_ERR_USAGE, "layer %d of capture '%s' has rows of %s but no "
                         "stored shape (layer_shapes)", r->layer, r->capture, rq->variant);
            break;
        }
        note_row(rq, &slot[r->layer], r, &why_at[r->layer]);
        out->n_captures += (size_t)first_of_capture(rows, i, rq->variant);
    }
    if (st == PG_OK && (out->layers = calloc(n_slots, sizeof *out->layers)) == NULL)
        st = pg_fail(err, PG_ERR_NOMEM, "advise: out of memory");
    for (size_t l = 0; st == PG_OK && l < n_slots; l++) {
        if (!have[l]) continue;
        advise_layer *L = &out->layers[out->n_layers++];
        *L = slot[l];
        /* Kept for an undefined metric or NaN/Inf: the capture that said so;
         * else the capture of the worst value (over the budget when kept). */
        if (L->reason > ADVISE_OVER_BUDGET || L->capture == NULL) L->capture = why_at[l];
    }
    if (st == PG_OK) summarise(rq, out);
    free(slot);
    free(have);
    free(first);
    free(why_at);
    if (st != PG_OK) advise_result_free(out);
    return st;
}

void advise_result_free(advise_result *r)
{
    if (r == NULL) return;
    free(r->layers);
    memset(r, 0, sizeof *r);
}

char *advise_vllm_flag(const advise_result *r, int *oom)
{
    *oom = 0;
    if (r == NULL || r->n_keep == 0) return NULL;
    /* The flag, and per kept layer a space and at most 11 digits and sign. */
    const size_t len = sizeof ADVISE_VLLM_FLAG + sizeof ADVISE_VLLM_SLIDING_WINDOW +
                       12 * r->n_keep + 1;
    char *s = malloc(len);
    if (s == NULL) {
        *oom = 1;
        return NULL;
    }
    size_t at = (size_t)snprintf(s, len, "%s", ADVISE_VLLM_FLAG);
    if (r->sliding_window) {
        snprintf(s + at, len - at, " %s", ADVISE_VLLM_SLIDING_WINDOW);
        return s;
    }
    for (size_t i = 0; i < r->n_layers; i++)
        if (r->layers[i].reason != ADVISE_FP8)
            at += (size_t)snprintf(s + at, len - at, " %d", r->layers[i].layer);
    return s;
}

const char *advise_reason_text(advise_reason r)
{
    switch (r) {
    case ADVISE_FP8: return "fp8";
    case ADVISE_OVER_BUDGET: return "worse than the budget";
    case ADVISE_UNDEFINED: return "undefined (NULL/NaN) metric";
    case ADVISE_NONFINITE: return "NaN/Inf in the output";
    }
    return "?";
}
