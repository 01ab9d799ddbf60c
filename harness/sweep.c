/* sweep.c: the per-layer precision sweep on the CPU specification (see sweep.h). */
#include "sweep.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../kernels/numerics.h"
#include "progress.h"

/* Longest variant name stored ("ext:" + the capture's NAME). */
#define SWEEP_VARIANT_NAME_MAX 128

static const struct {
    sweep_variant bit;
    const char *name;
} sweep_variant_table[] = {
    {SWEEP_BF16, "bf16"},
    {SWEEP_FP8KV, "fp8kv"},
    {SWEEP_FP8QKV, "fp8qkv"},
};
#define SWEEP_N_VARIANTS (sizeof sweep_variant_table / sizeof sweep_variant_table[0])

const char *sweep_variant_name(sweep_variant v)
{
    for (size_t i = 0; i < SWEEP_N_VARIANTS; i++)
        if (sweep_variant_table[i].bit == v) return sweep_variant_table[i].name;
    return "?";
}

pg_status sweep_variants_parse(const char *list, unsigned *out, pg_err *err)
{
    unsigned bits = 0;
    const char *p = list;
    while (*p != '\0') {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        size_t i = 0;
        for (; i < SWEEP_N_VARIANTS; i++)
            if (strlen(sweep_variant_table[i].name) == len &&
                strncmp(sweep_variant_table[i].name, p, len) == 0)
                break;
        if (i == SWEEP_N_VARIANTS)
            return pg_fail(err, PG_ERR_USAGE,
                           "--variants: '%.*s' is not one of bf16, fp8kv, fp8qkv", (int)len, p);
        bits |= sweep_variant_table[i].bit;
        p += len;
        if (*p == ',') {
            p++;
            if (*p == '\0')
                return pg_fail(err, PG_ERR_USAGE, "--variants: '%s' ends with a comma", list);
        }
    }
    if (bits == 0) return pg_fail(err, PG_ERR_USAGE, "--variants: the list is empty");
    *out = bits;
    return PG_OK;
}

/* One variant's metrics for one layer: [0] whole layer, [1 + h] head h. */
typedef struct variant_metrics {
    char name[SWEEP_VARIANT_NAME_MAX];
    attn_error_metrics *m;
} variant_metrics;

/* Fills vm->m for out against ref ([Tq, hq, d] both). */
static void compare_layer(const uint16_t *out, const double *ref, int64_t tq, int hq, int d,
                          double *scratch, attn_error_metrics *m)
{
    const size_t row = (size_t)hq * (size_t)d;
    metrics_compare_bf16(out, row, ref, row, (size_t)tq, row, scratch, &m[0]);
    for (int h = 0; h < hq; h++)
        metrics_compare_bf16(out + (size_t)h * (size_t)d, row, ref + (size_t)h * (size_t)d, row,
                             (size_t)tq, (size_t)d, scratch, &m[1 + h]);
}

/* One quantized tensor's statistics for quant_stats. */
typedef struct tensor_quant {
    const char *tensor;  /* "q", "k", "v" */
    float scale;
    fp8_quant_stats st;
    int present;
} tensor_quant;

/* Writes one layer's rows in one transaction. */
static pg_status store_layer(pg_store *store, int64_t run_id, const char *capture_name,
                             int layer, int hq, const variant_metrics *vm, int n_vm,
                             const tensor_quant *tq, const char *scale_source, pg_err *err)
{
    pg_status st = store_begin(store, err);
    for (int i = 0; st == PG_OK && i < n_vm; i++)
        for (int h = -1; st == PG_OK && h < hq; h++)
            st = store_put_layer_metrics(store, run_id, capture_name, layer, h, vm[i].name, "cpu",
                                         &vm[i].m[h + 1], err);
    for (int i = 0; st == PG_OK && i < 3; i++) {
        if (!tq[i].present) continue;
        const fp8_quant_stats *s = &tq[i].st;
        const double sat = s->n ? (double)s->n_saturated / (double)s->n : 0.0;
        const double under = s->n_nonzero ? (double)s->n_underflow / (double)s->n_nonzero : 0.0;
        st = store_put_quant_stats(store, run_id, capture_name, layer, tq[i].tensor,
                                   tq[i].scale, scale_source, sat, under, err);
    }
    if (st == PG_OK) st = store_commit(store, err);
    if (st != PG_OK) store_rollback(store);
    return st;
}

/* The reference, every selected mode and every external output of one layer. */
static pg_status sweep_layer(pg_store *store, int64_t run_id, const capture *cap,
                             const char *capture_name, int li, const sweep_options *opt,
                             progress *bar, int64_t *step, pg_err *err)
{
    const capture_layer *L = &cap->layers[li];
    const attn_batch b = {cap->n_seqs, cap->seq_q, cap->seq_kv, L->hq, L->hkv, L->d,
                          L->window, L->sm_scale, L->sinks};
    const size_t nq = (size_t)cap->tq * (size_t)L->hq * (size_t)L->d;
    const size_t nkv = (size_t)cap->tkv * (size_t)L->hkv * (size_t)L->d;
    const int n_vm_max = (int)SWEEP_N_VARIANTS + L->n_ext;
    double *ref = malloc(nq * sizeof *ref);
    double *scratch = malloc(nq * sizeof *scratch);
    uint16_t *out = malloc(nq * sizeof *out);
    variant_metrics *vm = calloc((size_t)n_vm_max, sizeof *vm);
    attn_error_metrics *mbuf = calloc((size_t)n_vm_max * (size_t)(L->hq + 1), sizeof *mbuf);
    pg_status st = PG_OK;
    if (!ref || !scratch || !out || !vm || !mbuf)
        st = pg_fail(err, PG_ERR_NOMEM, "layer %d: cannot allocate outputs for %zu elements", li,
                     nq);

    char what[64];
    snprintf(what, sizeof what, "layer %d reference", li);
    progress_update(bar, *step, what);
    if (st == PG_OK) st = attn_reference(&b, L->q, L->k, L->v, ref, opt->n_threads, err);

    /* Scales from the capture, else calibrated per tensor as amax / 448. */
    attn_fp8_options fo = {.quantize = 1, .p_rounding = opt->p_rounding,
                           .block_size = cap->block_size, .page_seed = opt->page_seed + (uint64_t)li};
    const char *scale_source = L->has_scales ? "capture" : "calibrated";
    if (L->has_scales) {
        fo.q_scale = L->q_scale;
        fo.k_scale = L->k_scale;
        fo.v_scale = L->v_scale;
    } else {
        fo.q_scale = fp8_e4m3_calibrated_scale(bf16_amax(L->q, nq));
        fo.k_scale = fp8_e4m3_calibrated_scale(bf16_amax(L->k, nkv));
        fo.v_scale = fp8_e4m3_calibrated_scale(bf16_amax(L->v, nkv));
    }
    tensor_quant tqs[3] = {{"q", fo.q_scale, {0}, 0}, {"k", fo.k_scale, {0}, 0},
                           {"v", fo.v_scale, {0}, 0}};

    int n_vm = 0;
    for (size_t i = 0; st == PG_OK && i < SWEEP_N_VARIANTS; i++) {
        const sweep_variant bit = sweep_variant_table[i].bit;
        if (!(opt->variants & bit)) continue;
        (*step)++;
        snprintf(what, sizeof what, "layer %d %s", li, sweep_variant_table[i].name);
        progress_update(bar, *step, what);
        attn_quant_report rep;
        if (bit == SWEEP_BF16)
            st = attn_variant_bf16(&b, L->q, L->k, L->v, out, opt->n_threads, err);
        else if (bit == SWEEP_FP8KV)
            st = attn_variant_fp8kv(&b, L->q, L->k, L->v, &fo, out, &rep, opt->n_threads, err);
        else
            st = attn_variant_fp8qkv(&b, L->q, L->k, L->v, &fo, out, &rep, opt->n_threads, err);
        if (st != PG_OK) break;
        if (bit != SWEEP_BF16) {
            tqs[1].st = rep.k;
            tqs[2].st = rep.v;
            tqs[1].present = tqs[2].present = 1;
        }
        if (bit == SWEEP_FP8QKV) {
            tqs[0].st = rep.q;
            tqs[0].present = 1;
        }
        snprintf(vm[n_vm].name, sizeof vm[n_vm].name, "%s", sweep_variant_table[i].name);
        vm[n_vm].m = mbuf + (size_t)n_vm * (size_t)(L->hq + 1);
        compare_layer(out, ref, cap->tq, L->hq, L->d, scratch, vm[n_vm].m);
        n_vm++;
    }
    for (int e = 0; st == PG_OK && e < L->n_ext; e++) {
        snprintf(vm[n_vm].name, sizeof vm[n_vm].name, "ext:%s", L->ext[e].name);
        vm[n_vm].m = mbuf + (size_t)n_vm * (size_t)(L->hq + 1);
        compare_layer(L->ext[e].out, ref, cap->tq, L->hq, L->d, scratch, vm[n_vm].m);
        n_vm++;
    }
    if (st == PG_OK)
        st = store_layer(store, run_id, capture_name, li, L->hq, vm, n_vm, tqs, scale_source, err);
    if (st != PG_OK && err != NULL && strncmp(err->msg, "layer ", 6) != 0) {
        /* Prefix the detail with where it happened, keeping the first failure's code. */
        char prefix[32];
        const size_t plen = (size_t)snprintf(prefix, sizeof prefix, "layer %d: ", li);
        size_t len = strlen(err->msg);
        if (plen + len >= sizeof err->msg) len = sizeof err->msg - plen - 1;
        memmove(err->msg + plen, err->msg, len);
        memcpy(err->msg, prefix, plen);
        err->msg[plen + len] = '\0';
    }
    free(ref);
    free(scratch);
    free(out);
    free(vm);
    free(mbuf);
    return st;
}

pg_status sweep_run_cpu(pg_store *store, int64_t run_id, const capture *cap,
                        const char *capture_name, const sweep_options *opt, pg_err *err)
{
    int per_layer = 0;
    for (size_t i = 0; i < SWEEP_N_VARIANTS; i++)
        if (opt->variants & sweep_variant_table[i].bit) per_layer++;
    progress bar;
    progress_start(&bar, (int64_t)cap->n_layers * per_layer);
    if (!opt->progress) bar.enabled = 0;
    int64_t step = 0;
    pg_status st = PG_OK;
    for (int li = 0; st == PG_OK && li < cap->n_layers; li++)
        st = sweep_layer(store, run_id, cap, capture_name, li, opt, &bar, &step, err);
    progress_finish(&bar);
    return st;
}
