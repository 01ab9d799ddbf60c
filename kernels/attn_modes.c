/*
 * attn_modes.c: the bf16, fp8kv and fp8qkv modes on the CPU (see attn.h for
 * where each rounds). One fp32 core serves all three: it reads Q as bf16 or
 * e4m3 elements and K/V packed or through a paged cache, so the modes differ
 * only in what they feed it and in three knobs (qk scale, v scale, P rounding).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "attn.h"
#include "attn_layout.h"
#include "kv_cache.h"
#include "parallel.h"

/* Where the core reads K and V: a paged cache when paged != NULL, else the
 * packed bf16 tensors [Tkv, hkv, d]. */
typedef struct core_kv {
    const kv_paged *paged;
    const uint16_t *k, *v;
} core_kv;

/* The knobs that tell the modes apart. */
typedef struct core_params {
    kv_elem q_elem;           /* Q elements: bf16 bits or e4m3 bytes */
    float qk_scale;           /* multiplies the fp32 dot products */
    float v_scale;            /* multiplies the fp32 P.V sums before / l */
    attn_p_rounding p_round;
} core_params;

/* Everything a work item needs; scratch is per thread. */
typedef struct core_job {
    const attn_batch *b;
    const attn_layout *lay;
    const void *q;
    const core_kv *kv;
    const core_params *par;
    uint16_t *out;
    float **scratch;          /* [n_threads] blocks of kt, v, s, qrow, acc */
} core_job;

/* Exact fp32 value of element i of a bf16 or e4m3 array. */
static inline float elem_load(const void *base, size_t i, kv_elem e)
{
    return e == KV_ELEM_E4M3 ? fp8_e4m3_decode(((const uint8_t *)base)[i])
                             : bf16_to_f32(((const uint16_t *)base)[i]);
}

/* P rounded as the mode says. */
static inline float round_p(float p, attn_p_rounding r)
{
    switch (r) {
    case ATTN_P_E4M3: return fp8_e4m3_decode(fp8_e4m3_encode(p));
    case ATTN_P_BF16: return bf16_to_f32(bf16_from_f32(p));
    case ATTN_P_NONE: break;
    }
    return p;
}

/* Decodes sequence s, kv head g into kt [d][n] (transposed) and vv [n][d]. */
static void gather_kv(const core_job *job, int s, int g, float *kt, float *vv)
{
    const attn_batch *b = job->b;
    const int n = b->seq_kv[s], d = b->d;
    const core_kv *kv = job->kv;
    for (int t = 0; t < n; t++) {
        const void *kr, *vr;
        kv_elem e;
        if (kv->paged != NULL) {
            const kv_paged *c = kv->paged;
            int64_t page = c->block_table[(size_t)s * (size_t)c->pages_per_seq +
                                          (size_t)(t / c->block_size)];
            kr = kv_paged_row(c, page, 0, g, t % c->block_size);
            vr = kv_paged_row(c, page, 1, g, t % c->block_size);
            e = c->elem;
        } else {
            size_t row = ((size_t)(job->lay->kv_off[s] + t) * (size_t)b->hkv + (size_t)g) *
                         (size_t)d;
            kr = kv->k + row;
            vr = kv->v + row;
            e = KV_ELEM_BF16;
        }
        for (int i = 0; i < d; i++) {
            kt[(size_t)i * (size_t)n + (size_t)t] = elem_load(kr, (size_t)i, e);
            vv[(size_t)t * (size_t)d + (size_t)i] = elem_load(vr, (size_t)i, e);
        }
    }
}

/* One work item: sequence s = item / hkv, kv head g = item % hkv, all its
 * query heads and query rows. */
static void core_item(void *ctx, int item, int thread)
{
    const core_job *job = ctx;
    const attn_batch *b = job->b;
    const core_params *par = job->par;
    const int s = item / b->hkv, g = item % b->hkv, d = b->d, n = b->seq_kv[s];
    const int group = b->hq / b->hkv;
    float *kt = job->scratch[thread];
    float *vv = kt + (size_t)job->lay->max_kv * (size_t)d;
    float *sc = vv + (size_t)job->lay->max_kv * (size_t)d;
    float *qrow = sc + job->lay->max_kv;
    float *acc = qrow + d;
    gather_kv(job, s, g, kt, vv);

    for (int hh = 0; hh < group; hh++) {
        const int h = g * group + hh;
        for (int j = 0; j < b->seq_q[s]; j++) {
            const size_t qi = ((size_t)(job->lay->q_off[s] + j) * (size_t)b->hq + (size_t)h) *
                              (size_t)d;
            for (int i = 0; i < d; i++) qrow[i] = elem_load(job->q, qi + (size_t)i, par->q_elem);
            int lo, hi;
            attn_key_range(b, s, j, &lo, &hi);
            const int len = hi - lo + 1;

            /* S = Q.K^T, fp32, summed over d in ascending order. */
            for (int t = 0; t < len; t++) sc[t] = 0.0f;
            for (int i = 0; i < d; i++) {
                const float qd = qrow[i];
                const float *krow = kt + (size_t)i * (size_t)n + (size_t)lo;
                for (int t = 0; t < len; t++) sc[t] += qd * krow[t];
            }
            float m = b->sinks != NULL ? b->sinks[h] : -INFINITY;
            for (int t = 0; t < len; t++) {
                sc[t] *= par->qk_scale;
                m = fmaxf(m, sc[t]);
            }
            /* Second pass: P = exp(S - m) with the final max; l in fp32. */
            float l = b->sinks != NULL ? expf(b->sinks[h] - m) : 0.0f;
            for (int t = 0; t < len; t++) {
                sc[t] = expf(sc[t] - m);
                l += sc[t];
            }
            for (int i = 0; i < d; i++) acc[i] = 0.0f;
            for (int t = 0; t < len; t++) {
                const float p = round_p(sc[t], par->p_round);
                const float *vrow = vv + (size_t)(lo + t) * (size_t)d;
                for (int i = 0; i < d; i++) acc[i] += p * vrow[i];
            }
            uint16_t *o = job->out + qi;
            for (int i = 0; i < d; i++) o[i] = bf16_from_f32((acc[i] * par->v_scale) / l);
        }
    }
    (void)n;
}

/* Runs the fp32 core over the whole batch into out (bf16 [Tq, hq, d]). */
static pg_status core_run(const attn_batch *b, const void *q, const core_kv *kv,
                          const core_params *par, uint16_t *out, int n_threads, pg_err *err)
{
    attn_layout lay;
    pg_status st = attn_layout_make(b, &lay, err);
    if (st != PG_OK) return st;
    const int items = b->n_seqs * b->hkv;
    if (n_threads > items) n_threads = items;
    if (n_threads < 1) n_threads = 1;
    float **scratch = calloc((size_t)n_threads, sizeof *scratch);
    const size_t per = (size_t)lay.max_kv * (size_t)(2 * b->d + 1) + (size_t)(2 * b->d);
    if (scratch == NULL) {
        st = pg_fail(err, PG_ERR_NOMEM, "attention: out of memory");
    } else {
        for (int t = 0; t < n_threads && st == PG_OK; t++) {
            scratch[t] = malloc(per * sizeof(float));
            if (scratch[t] == NULL)
                st = pg_fail(err, PG_ERR_NOMEM, "attention: cannot allocate %zu floats of scratch",
                             per);
        }
    }
    if (st == PG_OK) {
        core_job job = {b, &lay, q, kv, par, out, scratch};
        st = parallel_for(items, n_threads, core_item, &job, err);
    }
    if (scratch != NULL)
        for (int t = 0; t < n_threads; t++) free(scratch[t]);
    free(scratch);
    attn_layout_free(&lay);
    return st;
}

pg_status attn_variant_bf16(const attn_batch *b, const uint16_t *q, const uint16_t *k,
                            const uint16_t *v, uint16_t *out, int n_threads, pg_err *err)
{
    pg_status st = attn_batch_check(b, err);
    if (st != PG_OK) return st;
    core_kv kv = {NULL, k, v};
    core_params par = {KV_ELEM_BF16, b->sm_scale, 1.0f, ATTN_P_BF16};
    return core_run(b, q, &kv, &par, out, n_threads, err);
}

/* Checks the fp8 options: block size and finite positive scales. */
static pg_status fp8_options_check(const attn_fp8_options *opt, pg_err *err)
{
    if (opt->block_size != 16 && opt->block_size != 32 && opt->block_size != 64)
        return pg_fail(err, PG_ERR_USAGE, "block size %d is not 16, 32 or 64", opt->block_size);
    const float sc[3] = {opt->q_scale, opt->k_scale, opt->v_scale};
    const char *names[3] = {"q_scale", "k_scale", "v_scale"};
    for (int i = 0; i < 3; i++)
        if (!(isfinite(sc[i]) && sc[i] > 0))
            return pg_fail(err, PG_ERR_NUMERIC, "%s %g is not a finite positive number",
                           names[i], (double)sc[i]);
    return PG_OK;
}

/* What both fp8 modes check and clear before they start. */
static pg_status fp8_mode_begin(const attn_batch *b, const attn_fp8_options *opt,
                                attn_quant_report *rep, pg_err *err)
{
    pg_status st = attn_batch_check(b, err);
    if (st == PG_OK) st = fp8_options_check(opt, err);
    if (st == PG_OK && rep != NULL) memset(rep, 0, sizeof *rep);
    return st;
}

pg_status attn_variant_fp8kv(const attn_batch *b, const uint16_t *q, const uint16_t *k,
                             const uint16_t *v, const attn_fp8_options *opt, uint16_t *out,
                             attn_quant_report *rep, int n_threads, pg_err *err)
{
    pg_status st = fp8_mode_begin(b, opt, rep, err);
    if (st != PG_OK) return st;
    kv_paged cache, compact;
    const kv_elem elem = opt->quantize ? KV_ELEM_E4M3 : KV_ELEM_BF16;
    st = kv_paged_write(b, k, v, elem, opt->k_scale, opt->v_scale, opt->page_seed,
                        opt->block_size, &cache, rep ? &rep->k : NULL, rep ? &rep->v : NULL, err);
    if (st != PG_OK) return st;
    st = kv_dequant_gather(&cache, opt->k_scale, opt->v_scale, &compact, err);
    kv_paged_free(&cache);
    if (st != PG_OK) return st;
    core_kv kv = {&compact, NULL, NULL};
    core_params par = {KV_ELEM_BF16, b->sm_scale, 1.0f, ATTN_P_BF16};
    st = core_run(b, q, &kv, &par, out, n_threads, err);
    kv_paged_free(&compact);
    return st;
}

pg_status attn_variant_fp8qkv(const attn_batch *b, const uint16_t *q, const uint16_t *k,
                              const uint16_t *v, const attn_fp8_options *opt, uint16_t *out,
                              attn_quant_report *rep, int n_threads, pg_err *err)
{
    pg_status st = fp8_mode_begin(b, opt, rep, err);
    if (st != PG_OK) return st;
    const size_t nq = (size_t)attn_batch_tq(b) * (size_t)b->hq * (size_t)b->d;
    uint8_t *q8 = NULL;
    core_params par = {KV_ELEM_BF16, b->sm_scale, 1.0f, opt->p_rounding};
    const void *qin = q;
    if (opt->quantize) {
        q8 = malloc(nq ? nq : 1);
        if (q8 == NULL) return pg_fail(err, PG_ERR_NOMEM, "fp8qkv: cannot allocate fp8 Q");
        fp8_e4m3_quantize_bf16(q, nq, opt->q_scale, q8, rep ? &rep->q : NULL);
        qin = q8;
        /* vLLM: bmm1_scale = q_scale * k_scale * sm_scale, bmm2_scale = v_scale
         * (vllm/v1/attention/backends/flashinfer.py), products in double. */
        par = (core_params){KV_ELEM_E4M3,
                            (float)((double)opt->q_scale * opt->k_scale * b->sm_scale),
                            opt->v_scale, opt->p_rounding};
    }
    kv_paged cache;
    st = kv_paged_write(b, k, v, opt->quantize ? KV_ELEM_E4M3 : KV_ELEM_BF16, opt->k_scale,
                        opt->v_scale, opt->page_seed, opt->block_size, &cache,
                        rep ? &rep->k : NULL, rep ? &rep->v : NULL, err);
    if (st == PG_OK) {
        core_kv kv = {&cache, NULL, NULL};
        st = core_run(b, qin, &kv, &par, out, n_threads, err);
        kv_paged_free(&cache);
    }
    free(q8);
    return st;
}
