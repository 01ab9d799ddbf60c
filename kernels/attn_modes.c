/*
 * attn_modes.c: the variants (attn_profile.h) on the CPU. One fp32 core serves
 * all of them: it reads Q as bf16 or e4m3 elements and K/V packed or through
 * a paged cache; a row is taken with the final row max (bf16, fp8kv,
 * fp8qkv@ideal) or as FlashAttention-3 tiles it (fp8qkv@fa3*), with exact fp32
 * sums or the Hopper fp8 MMA rule (fp8_mma.h). The profile's knobs
 * (attn_profile_impl.h) become core_params here.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "attn.h"
#include "attn_layout.h"
#include "attn_profile_impl.h"
#include "fp8_mma.h"
#include "kv_cache.h"
#include "parallel.h"
#include "rht.h"

#define LOG2E_F64 ATTN_LOG2E_F64
#define LOG2E_F32 ((float)ATTN_LOG2E_F64)

/* Where the core reads K and V, each on its own: a paged cache when
 * paged_k / paged_v != NULL, else the packed bf16 tensors [Tkv, hkv, d]
 * (one of them kept bf16 by attn_quant_options.keep_bf16 while the other is
 * quantized reads the two from different places). */
typedef struct core_kv {
    const kv_paged *paged_k, *paged_v;
    const uint16_t *k, *v;
} core_kv;

/* The knobs that tell the variants apart (filled from the profile). */
typedef struct core_params {
    pg_number_format q_elem;           /* Q elements: bf16 bits or e4m3 bytes */
    int p_e4m3;               /* P rounded to e4m3 (else to bf16) */
    attn_softmax softmax;
    attn_accum accum;
    /* ATTN_SOFTMAX_FINAL_MAX: */
    float qk_scale;           /* multiplies the fp32 dot products */
    float v_scale;            /* multiplies the fp32 P.V sums before / l */
    /* the tiled softmaxes (row_tiled): */
    int block_n;              /* keys per tile (kBlockN) */
    float scale_log2;         /* softmax_scale_log2 with q/k descales folded in */
    float max_offset;         /* FA3 / TRT-LLM: P = 2^(... + max_offset) */
    float p_scale;            /* FlashInfer: P * p_scale before the cast */
    float v_descale;          /* O's final scale: FA3 v_descale, TRT-LLM bmm2_scale,
                               * FlashInfer pv_scale = v_scale / p_scale */
    /* ATTN_SOFTMAX_TRITON: how the per-token-head row scales are used, */
    attn_row_scaling row_scaling;
    int zero_points;          /* whether the rows' zero points are subtracted, */
    int pv_in_fp32;           /* and P x v scale kept fp32 for P.V (else bf16) */
    /* the tiled softmaxes: O rounded to e4m3 before it becomes bf16 (a kernel
     * with an fp8 output) */
    int out_e4m3;
} core_params;

/* Everything a work item needs; scratch is per thread. */
typedef struct core_job {
    const attn_batch *b;
    const attn_layout *lay;
    const void *q;
    const core_kv *kv;
    const core_params *par;
    uint16_t *out;
    float **scratch;          /* [n_threads] blocks of kt, v, s, qrow, acc, part, ks, vs,
                               * kz, vz */
} core_job;

/* Exact fp32 value of element i of an array of format e: bf16 and e4m3 (what
 * the cores read in their loops) inline, any other through its codec. */
static inline float elem_load(const void *base, size_t i, pg_number_format e)
{
    if (e == PG_FORMAT_BF16) return bf16_to_f32(((const uint16_t *)base)[i]);
    if (e == PG_FORMAT_E4M3) return fp8_e4m3_decode(((const uint8_t *)base)[i]);
    return fp_codec_of(e)->decode(((const uint8_t *)base)[i]);
}

/* One output element: bf16(x), or bf16(e4m3(x)) for a kernel whose output
 * is e4m3 (exact: every e4m3 value is a bf16 value). */
static inline uint16_t out_round(float x, int e4m3)
{
    return bf16_from_f32(e4m3 ? fp8_e4m3_decode(fp8_e4m3_encode(x)) : x);
}

/* P rounded for the P.V product: e4m3 (nearest even, saturating) or bf16. */
static inline float round_p(float p, int e4m3)
{
    return e4m3 ? fp8_e4m3_decode(fp8_e4m3_encode(p)) : bf16_to_f32(bf16_from_f32(p));
}

/* Key t of sequence s, kv head g, tensor which (0 = K, 1 = V): its row in
 * paged c when c != NULL, else at element offset packed of the bf16 array
 * flat; *e gets the row's element type. */
static inline const void *kv_row(const kv_paged *c, const uint16_t *flat, int which, int s,
                                 int g, int t, size_t packed, pg_number_format *e)
{
    if (c == NULL) {
        *e = PG_FORMAT_BF16;
        return flat + packed;
    }
    const int64_t page = c->block_table[(size_t)s * (size_t)c->pages_per_seq +
                                        (size_t)(t / c->block_size)];
    *e = c->elem;
    return kv_paged_row(c, page, which, g, t % c->block_size);
}

/* Key t's row scale in cache c into *scale and its zero point into *zero,
 * split as the format's reader splits them (1 and 0 without a per-token-head
 * cache). */
static inline void kv_row_scale(const kv_paged *c, int which, int s, int g, int t,
                                float *scale, float *zero)
{
    *scale = 1.0f;
    *zero = 0.0f;
    if (c == NULL || c->scales == NULL) return;
    const int64_t page = c->block_table[(size_t)s * (size_t)c->pages_per_seq +
                                        (size_t)(t / c->block_size)];
    const float stored = *kv_paged_scale_at(c, page, which, g, t % c->block_size);
    void (*split)(float, float *, float *) = fp_codec_of(c->elem)->split_scale;
    if (split != NULL) split(stored, scale, zero);
    else *scale = stored;
}

/* Decodes sequence s, kv head g into kt [d][n] (transposed) and vv [n][d],
 * and each key's K and V row scales into ks [n] and vs [n], their zero
 * points into kz [n] and vz [n]. */
static void gather_kv(const core_job *job, int s, int g, float *kt, float *vv, float *ks,
                      float *vs, float *kz, float *vz)
{
    const attn_batch *b = job->b;
    const int n = b->seq_kv[s], d = b->d;
    const core_kv *kv = job->kv;
    const size_t packed0 = (size_t)job->lay->kv_off[s] * (size_t)b->hkv + (size_t)g;
    for (int t = 0; t < n; t++) {
        const size_t packed = (packed0 + (size_t)t * (size_t)b->hkv) * (size_t)d;
        pg_number_format ek, ev;
        const void *kr = kv_row(kv->paged_k, kv->k, 0, s, g, t, packed, &ek);
        const void *vr = kv_row(kv->paged_v, kv->v, 1, s, g, t, packed, &ev);
        for (int i = 0; i < d; i++) {
            kt[(size_t)i * (size_t)n + (size_t)t] = elem_load(kr, (size_t)i, ek);
            vv[(size_t)t * (size_t)d + (size_t)i] = elem_load(vr, (size_t)i, ev);
        }
    }
    if (job->par->softmax != ATTN_SOFTMAX_TRITON) return; /* only its row reads ks, vs */
    const attn_row_scaling use = job->par->row_scaling;
    for (int t = 0; t < n; t++) {
        kv_row_scale(kv->paged_k, 0, s, g, t, &ks[t], &kz[t]);
        kv_row_scale(kv->paged_v, 1, s, g, t, &vs[t], &vz[t]);
        if (use == ATTN_ROW_SCALES_IGNORED) ks[t] = vs[t] = 1.0f;
        if (use != ATTN_ROW_SCALES_TWICE) continue;
        /* the codes dequantized on load too, bf16(code * scale) */
        for (int i = 0; i < d; i++) {
            float *kx = &kt[(size_t)i * (size_t)n + (size_t)t], *vx = &vv[(size_t)t * (size_t)d + (size_t)i];
            *kx = bf16_to_f32(bf16_from_f32(*kx * ks[t]));
            *vx = bf16_to_f32(bf16_from_f32(*vx * vs[t]));
        }
    }
}

/* One row's inputs and scratch: the query, its keys [lo, hi], the sink. */
typedef struct core_row {
    const float *qrow;        /* [d] */
    const float *kt;          /* [d][n] transposed keys of the sequence */
    const float *vv;          /* [n][d] values of the sequence */
    int n, lo, hi, d;
    const float *sink;        /* the head's sink logit, or NULL */
    float *sc;                /* [n] scores, then P */
    float *acc;               /* [d] the O accumulator */
    float *part;              /* [d] a tile's P.V partial (two-level) */
    const float *kscale;      /* [n] each key's K scale (per-token-head caches; else 1) */
    const float *vscale;      /* [n] each key's V scale (per-token-head caches; else 1) */
    const float *kzero;       /* [n] each key's K zero point, NULL: none subtracted */
    const float *vzero;       /* [n] each key's V zero point, NULL: none subtracted */
} core_row;

/* sc[t] = sum_d q_d k_td for t in [lo, hi]: exact fp32 products summed in d
 * order, or (accum = MMA) one wgmma chain of k = 32 steps over d from 0. */
static void row_scores(const core_row *r, attn_accum accum)
{
    const int len = r->hi - r->lo + 1;
    float *sc = r->sc + r->lo;
    for (int t = 0; t < len; t++) sc[t] = 0.0f;
    if (accum == ATTN_ACCUM_EXACT) {
        for (int i = 0; i < r->d; i++) {
            const float qd = r->qrow[i];
            const float *krow = r->kt + (size_t)i * (size_t)r->n + (size_t)r->lo;
            for (int t = 0; t < len; t++) sc[t] += qd * krow[t];
        }
        return;
    }
    for (int i0 = 0; i0 < r->d; i0 += FP8_MMA_K) {
        const int w = r->d - i0 < FP8_MMA_K ? r->d - i0 : FP8_MMA_K;
        fp8_mma_e4m3_accumulate_many(r->qrow + i0, w, r->kt + (size_t)i0 * (size_t)r->n + r->lo,
                                     (size_t)r->n, len, sc);
    }
}

/* The row with the final row max (two passes: all scores, then exponentials):
 * m = max(sink, S), P = exp(S * qk_scale - m) (attn_final_max_exp), exact
 * fp32 sums. */
static void row_final_max(const core_row *r, const core_params *par, uint16_t *o)
{
    const int d = r->d;
    float *sc = r->sc;
    row_scores(r, ATTN_ACCUM_EXACT);
    float m = r->sink != NULL ? *r->sink : -INFINITY;
    for (int t = r->lo; t <= r->hi; t++) {
        sc[t] *= par->qk_scale;
        m = fmaxf(m, sc[t]);
    }
    float l = r->sink != NULL ? attn_final_max_exp(*r->sink - m) : 0.0f;
    for (int t = r->lo; t <= r->hi; t++) {
        sc[t] = attn_final_max_exp(sc[t] - m);
        l += sc[t];
    }
    float *acc = r->acc;
    for (int i = 0; i < d; i++) acc[i] = 0.0f;
    for (int t = r->lo; t <= r->hi; t++) {
        const float p = round_p(sc[t], par->p_e4m3);
        const float *vrow = r->vv + (size_t)t * (size_t)d;
        for (int i = 0; i < d; i++) acc[i] += p * vrow[i];
    }
    for (int i = 0; i < d; i++) o[i] = bf16_from_f32((acc[i] * par->v_scale) / l);
}

/* acc += the P.V of keys [t0, t1] by the Hopper fp8 rule: k = 32 chunks of
 * keys from tile_start (keys outside [t0, t1] have P = 0: no term). */
static void pv_mma(const core_row *r, int tile_start, int t0, int t1, float *acc)
{
    for (int c0 = tile_start; c0 <= t1; c0 += FP8_MMA_K) {
        const int a = c0 > t0 ? c0 : t0;
        const int z = c0 + FP8_MMA_K - 1 < t1 ? c0 + FP8_MMA_K - 1 : t1;
        if (a > z) continue;
        fp8_mma_e4m3_accumulate_many(r->sc + a, z - a + 1, r->vv + (size_t)a * (size_t)r->d,
                                     (size_t)r->d, r->d, acc);
    }
}

/* fma(a, b, c) rounded toward zero, as PTX fma.rz.f32: the product is exact
 * in double and the sum rounded once there (a double rounding can differ from
 * the single one only within 2^-53 of a binary32 boundary), then truncated. */
static inline float fmaf_toward_zero(float a, float b, float c)
{
    const double exact = (double)a * (double)b + (double)c;
    float r = (float)exact;
    if (fabs((double)r) > fabs(exact)) r = nextafterf(r, 0.0f);
    return r;
}

/* P.V of one tile's keys [t0, t1] (P already rounded in sc) into acc. */
static void pv_tile(const core_row *r, attn_accum accum, int start, int t0, int t1, float *acc)
{
    const int d = r->d;
    switch (accum) {
    case ATTN_ACCUM_EXACT:
        for (int t = t0; t <= t1; t++) {
            const float *vrow = r->vv + (size_t)t * (size_t)d;
            for (int i = 0; i < d; i++) acc[i] += r->sc[t] * vrow[i];
        }
        break;
    case ATTN_ACCUM_MMA_1LEVEL: pv_mma(r, start, t0, t1, acc); break;
    case ATTN_ACCUM_MMA_2LEVEL:
        for (int i = 0; i < d; i++) r->part[i] = 0.0f;
        pv_mma(r, start, t0, t1, r->part);
        for (int i = 0; i < d; i++) acc[i] += r->part[i];
        break;
    }
}

/*
 * The row as a flash kernel computes it: raw S (q8 . k8), tiles of block_n
 * keys aligned at key 0, a running max m of raw S over the tiles seen (masked
 * keys excluded), l the fp32 sum of the unrounded P, the fp32 O rescaled by
 * exp2f((m_old - m_new) * s) when m grows; s = scale_log2. Where the kernels
 * differ (rules and sources: attn_profile.c):
 *   FA3 (hopper/softmax.h): tiles last to first; P = exp2f(S*s - (m*s - 8))
 *     with both a*b - c fused (nvcc contracts them to FFMA, the comment in
 *     scale_apply_exp2); sink added to l against the final m (finalize_aux);
 *     O = acc * ((1 / l) * v_descale).
 *   TRT-LLM (fmha_v2 warpspec/epilogue.h): tiles first to last; P =
 *     exp2f(fma.rz(S, s, -fma(m, s, -8))); l = fma(l_old, corr, tile sum);
 *     sink term exp2(sink*log2e - m*s + 8) in double then fp32; O =
 *     (acc * (1 / l)) * bmm2_scale.
 *   FlashInfer (hopper/attention_updater.cuh, variants.cuh): tiles last to
 *     first; P = exp2f(S*s - m*s) in [0, 1] summed, then P * p_scale rounded;
 *     O = acc * (pv_scale / l), pv_scale = v_scale / p_scale; no sinks.
 */
static void row_tiled(const core_row *r, const core_params *par, uint16_t *o)
{
    const int d = r->d, N = par->block_n;
    const attn_softmax kind = par->softmax;
    const float s = par->scale_log2;
    float *sc = r->sc, *acc = r->acc;
    row_scores(r, par->accum);
    float m = -INFINITY, l = 0.0f;
    for (int i = 0; i < d; i++) acc[i] = 0.0f;
    const int first = r->lo / N, last = r->hi / N;
    const int ascending = kind == ATTN_SOFTMAX_TRTLLM;
    for (int k = 0; k <= last - first; k++) {
        const int tile = ascending ? first + k : last - k;
        const int start = tile * N;
        const int t0 = start > r->lo ? start : r->lo;
        const int t1 = start + N - 1 < r->hi ? start + N - 1 : r->hi;
        float mt = -INFINITY;
        for (int t = t0; t <= t1; t++) mt = fmaxf(mt, sc[t]);
        float corr = 1.0f; /* the first tile: nothing to rescale */
        if (k > 0 && mt > m) {
            corr = exp2f((m - mt) * s);
            for (int i = 0; i < d; i++) acc[i] *= corr;
        }
        m = k == 0 || mt > m ? mt : m;
        float tile_sum = 0.0f;
        if (kind == ATTN_SOFTMAX_TRTLLM) {
            const float masked_max = fmaf(m, s, -par->max_offset);
            for (int t = t0; t <= t1; t++) {
                const float p = exp2f(fmaf_toward_zero(sc[t], s, -masked_max));
                tile_sum += p;
                sc[t] = round_p(p, par->p_e4m3);
            }
            l = k == 0 ? tile_sum : fmaf(l, corr, tile_sum);
        } else {
            l *= corr;
            const float max_scaled =
                kind == ATTN_SOFTMAX_FA3 ? fmaf(m, s, -par->max_offset) : m * s;
            for (int t = t0; t <= t1; t++) {
                const float p = exp2f(fmaf(sc[t], s, -max_scaled));
                l += p;
                sc[t] = round_p(kind == ATTN_SOFTMAX_FLASHINFER ? p * par->p_scale : p,
                                par->p_e4m3);
            }
        }
        pv_tile(r, par->accum, start, t0, t1, acc);
    }
    float scale;
    if (kind == ATTN_SOFTMAX_TRTLLM) {
        if (r->sink != NULL) /* add_attention_sink: against the final running max */
            l += exp2f((float)((double)*r->sink * LOG2E_F64 - (double)(m * s) +
                               (double)par->max_offset));
        const float inv = l == 0.0f ? 1.0f : 1.0f / l;
        for (int i = 0; i < d; i++) o[i] = out_round((acc[i] * inv) * par->v_descale, par->out_e4m3);
        return;
    }
    if (kind == ATTN_SOFTMAX_FA3) {
        if (r->sink != NULL) /* finalize_aux: against the final running max */
            l += exp2f(fmaf(LOG2E_F32, *r->sink, -fmaf(m, s, -par->max_offset)));
        const float inv = (l == 0.0f || l != l) ? 0.0f : 1.0f / l;
        scale = inv * par->v_descale;
    } else {
        scale = l > 0.0f ? par->v_descale / l : 0.0f;
    }
    for (int i = 0; i < d; i++) o[i] = out_round(acc[i] * scale, par->out_e4m3);
}


/*
 * The row as vLLM's Triton unified attention takes it with per-token-head
 * scales (vllm/v1/attention/ops/triton_unified_attention.py
 * kernel_unified_attention, KV_QUANT_MODE 3; softmax_step in
 * triton_attention_helpers.py): S_t = (q . k_t in fp32) * fp32(sm_scale *
 * ks_t); tiles of block_n keys aligned at key 0, first to last; M starts at
 * the sink (or -inf), L at 1; per tile m = max(M, tile max) (0 when -inf),
 * P = exp(S - m), l = sum P, alpha = exp(M - m), L = L * alpha + l, O = O *
 * alpha + sum_t bf16(P_t * vs_t) v_t in fp32; out = bf16(O / L). The sums
 * are in key order here (tl.sum and tl.dot order theirs inside a tile).
 * With zero points (the int4 kernel, int4_per_token_head.py _attn_packed):
 * S_t = fma(-sum(q), kz_t, q . code_t) * fp32(sm_scale * ks_t), and per tile
 * O = O * alpha + (sum_t p_t code_t - sum_t p_t vz_t), p_t = P_t * vs_t kept
 * fp32 when pv_in_fp32.
 */
static void row_triton(const core_row *r, const core_params *par, uint16_t *o)
{
    const int d = r->d, N = par->block_n;
    float *sc = r->sc, *acc = r->acc, *part = r->part;
    row_scores(r, ATTN_ACCUM_EXACT);
    if (r->kzero != NULL) {
        float qsum = 0.0f;
        for (int i = 0; i < d; i++) qsum += r->qrow[i];
        for (int t = r->lo; t <= r->hi; t++) sc[t] = fmaf(-qsum, r->kzero[t], sc[t]);
    }
    for (int t = r->lo; t <= r->hi; t++) sc[t] *= par->qk_scale * r->kscale[t];
    float m_run = r->sink != NULL ? *r->sink : -INFINITY, l_run = 1.0f;
    for (int i = 0; i < d; i++) acc[i] = 0.0f;
    for (int tile = r->lo / N; tile <= r->hi / N; tile++) {
        const int start = tile * N;
        const int t0 = start > r->lo ? start : r->lo;
        const int t1 = start + N - 1 < r->hi ? start + N - 1 : r->hi;
        float m = m_run;
        for (int t = t0; t <= t1; t++) m = fmaxf(m, sc[t]);
        if (m == -INFINITY) m = 0.0f; /* a row masked so far: softmax_step's clamp */
        float l = 0.0f;
        for (int t = t0; t <= t1; t++) {
            sc[t] = attn_triton_exp(sc[t] - m);
            l += sc[t];
        }
        const float alpha = attn_triton_exp(m_run - m);
        l_run = l_run * alpha + l;
        for (int i = 0; i < d; i++) acc[i] *= alpha;
        float *into = r->vzero != NULL ? part : acc;
        if (r->vzero != NULL)
            for (int i = 0; i < d; i++) part[i] = 0.0f;
        float zsum = 0.0f;
        for (int t = t0; t <= t1; t++) {
            const float pv = sc[t] * r->vscale[t];
            const float p = par->pv_in_fp32 ? pv : bf16_to_f32(bf16_from_f32(pv));
            const float *vrow = r->vv + (size_t)t * (size_t)d;
            for (int i = 0; i < d; i++) into[i] += p * vrow[i];
            if (r->vzero != NULL) zsum += p * r->vzero[t];
        }
        if (r->vzero != NULL)
            for (int i = 0; i < d; i++) acc[i] += part[i] - zsum;
        m_run = m;
    }
    for (int i = 0; i < d; i++) o[i] = bf16_from_f32(acc[i] / l_run);
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
    float *part = acc + d;
    float *ks = part + d;
    float *vs = ks + job->lay->max_kv;
    float *kz = vs + job->lay->max_kv;
    float *vz = kz + job->lay->max_kv;
    gather_kv(job, s, g, kt, vv, ks, vs, kz, vz);
    const int zp = par->softmax == ATTN_SOFTMAX_TRITON && par->zero_points;

    for (int hh = 0; hh < group; hh++) {
        const int h = g * group + hh;
        for (int j = 0; j < b->seq_q[s]; j++) {
            const size_t qi = ((size_t)(job->lay->q_off[s] + j) * (size_t)b->hq + (size_t)h) *
                              (size_t)d;
            for (int i = 0; i < d; i++) qrow[i] = elem_load(job->q, qi + (size_t)i, par->q_elem);
            core_row r = {qrow, kt, vv, n, 0, 0, d, b->sinks != NULL ? &b->sinks[h] : NULL,
                          sc, acc, part, ks, vs, zp ? kz : NULL, zp ? vz : NULL};
            attn_key_range(b, s, j, &r.lo, &r.hi);
            if (par->softmax == ATTN_SOFTMAX_TRITON)
                row_triton(&r, par, job->out + qi);
            else if (par->softmax != ATTN_SOFTMAX_FINAL_MAX)
                row_tiled(&r, par, job->out + qi);
            else
                row_final_max(&r, par, job->out + qi);
        }
    }
}

pg_status attn_scratch_alloc(int n_threads, size_t per, float ***out, pg_err *err)
{
    float **scratch = calloc((size_t)n_threads, sizeof *scratch);
    if (scratch == NULL) return pg_fail(err, PG_ERR_NOMEM, "attention: out of memory");
    for (int t = 0; t < n_threads; t++) {
        scratch[t] = malloc(per * sizeof(float));
        if (scratch[t] == NULL) {
            attn_scratch_free(scratch, n_threads);
            return pg_fail(err, PG_ERR_NOMEM, "attention: cannot allocate %zu floats of scratch",
                           per);
        }
    }
    *out = scratch;
    return PG_OK;
}

void attn_scratch_free(float **scratch, int n_threads)
{
    if (scratch != NULL)
        for (int t = 0; t < n_threads; t++) free(scratch[t]);
    free(scratch);
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
    /* kt, vv [max_kv][d]; sc, ks, vs, kz, vz [max_kv]; qrow, acc, part [d] */
    const size_t per = (size_t)lay.max_kv * (size_t)(2 * b->d + 5) + (size_t)(3 * b->d);
    float **scratch = NULL;
    st = attn_scratch_alloc(n_threads, per, &scratch, err);
    if (st == PG_OK) {
        core_job job = {b, &lay, q, kv, par, out, scratch};
        st = parallel_for(items, n_threads, core_item, &job, err);
    }
    attn_scratch_free(scratch, n_threads);
    attn_layout_free(&lay);
    return st;
}

/* The bf16 mode's knobs: bf16 Q and P, sm_scale, final row max, exact sums. */
static core_params bf16_params(const attn_batch *b)
{
    return (core_params){.q_elem = PG_FORMAT_BF16, .p_e4m3 = 0, .softmax = ATTN_SOFTMAX_FINAL_MAX,
                         .accum = ATTN_ACCUM_EXACT, .qk_scale = b->sm_scale, .v_scale = 1.0f};
}

pg_status attn_variant_bf16(const attn_batch *b, const uint16_t *q, const uint16_t *k,
                            const uint16_t *v, uint16_t *out, int n_threads, pg_err *err)
{
    pg_status st = attn_batch_check(b, err);
    if (st != PG_OK) return st;
    const core_kv kv = {NULL, NULL, k, v};
    const core_params par = bf16_params(b);
    return core_run(b, q, &kv, &par, out, n_threads, err);
}

pg_status attn_quant_options_check(const attn_quant_options *opt, pg_err *err)
{
    if (opt == NULL) return pg_fail(err, PG_ERR_USAGE, "fp8 variant run without fp8 options");
    if (opt->block_size != 16 && opt->block_size != 32 && opt->block_size != 64)
        return pg_fail(err, PG_ERR_USAGE, "block size %d is not 16, 32 or 64", opt->block_size);
    if ((opt->keep_bf16 & ~ATTN_TENSORS_ALL) != 0)
        return pg_fail(err, PG_ERR_USAGE, "keep_bf16 0x%x names no tensor (Q, K, V, P: 0x%x)",
                       opt->keep_bf16, ATTN_TENSORS_ALL);
    const float sc[3] = {opt->q_scale, opt->k_scale, opt->v_scale};
    const char *names[3] = {"q_scale", "k_scale", "v_scale"};
    for (int i = 0; i < 3; i++)
        if (!(isfinite(sc[i]) && sc[i] > 0))
            return pg_fail(err, PG_ERR_NUMERIC, "%s %g is not a finite positive number",
                           names[i], (double)sc[i]);
    return PG_OK;
}

pg_status attn_quant_run_begin(const attn_batch *b, const attn_quant_options *opt,
                               attn_quant_report *rep, pg_err *err)
{
    pg_status st = attn_batch_check(b, err);
    if (st == PG_OK) st = attn_quant_options_check(opt, err);
    if (st == PG_OK && rep != NULL) memset(rep, 0, sizeof *rep);
    return st;
}

/* The tensors opt leaves bf16: all of them without quantization (attn.h). */
static unsigned kept_bf16(const attn_quant_options *opt)
{
    return opt->quantize ? opt->keep_bf16 : ATTN_TENSORS_ALL;
}

/* The K/V sources of a run whose quantized tensors come from e4m3 (paged,
 * possibly NULL when neither is quantized) and whose kept ones are read
 * packed from k and v. */
static core_kv kv_sources(unsigned kept, const kv_paged *e4m3, const uint16_t *k,
                          const uint16_t *v)
{
    return (core_kv){(kept & ATTN_TENSOR_K) ? NULL : e4m3, (kept & ATTN_TENSOR_V) ? NULL : e4m3,
                     k, v};
}

/* The paged cache of k and v in format elem at granularity g
 * (kv_paged_write_mode with opt's per-tensor scales and paging); nothing
 * (cache->block_table NULL) when kept leaves both bf16; the counters of a
 * kept tensor stay zero. */
static pg_status fp8_cache_write(const attn_batch *b, const uint16_t *k, const uint16_t *v,
                                 const attn_quant_options *opt, unsigned kept, pg_number_format elem,
                                 pg_scale_granularity g, kv_paged *cache, attn_quant_report *rep,
                                 pg_err *err)
{
    memset(cache, 0, sizeof *cache);
    if ((kept & (ATTN_TENSOR_K | ATTN_TENSOR_V)) == (ATTN_TENSOR_K | ATTN_TENSOR_V)) return PG_OK;
    fp8_quant_stats *ks = rep ? &rep->k : NULL, *vs = rep ? &rep->v : NULL;
    pg_status st = kv_paged_write_mode(b, k, v, elem, g, opt->k_scale, opt->v_scale,
                                       opt->page_seed, opt->block_size, cache, ks, vs, err);
    if (st == PG_OK && rep != NULL) {
        if (kept & ATTN_TENSOR_K) memset(&rep->k, 0, sizeof rep->k);
        if (kept & ATTN_TENSOR_V) memset(&rep->v, 0, sizeof rep->v);
    }
    return st;
}

attn_kv_plumbing attn_kv_plumbing_of(const attn_profile *p)
{
    if (p->kv_scales == ATTN_KV_SCALES_TWICE) return (attn_kv_plumbing){1, 1, 1, 1};
    return (attn_kv_plumbing){1, 0, 0, 0};
}

pg_status attn_fp8kv_plumbed_run(const attn_kv_plumbing *pl, pg_number_format kv_format,
                                 const attn_batch *b, const uint16_t *q, const uint16_t *k,
                                 const uint16_t *v, const attn_quant_options *opt, uint16_t *out,
                                 attn_quant_report *rep, int n_threads, pg_err *err)
{
    if (kv_format == PG_FORMAT_BF16)
        return pg_fail(err, PG_ERR_INTERNAL, "fp8kv plumbing: no fp8 paged cache of %s",
                       pg_number_format_name(kv_format));
    pg_status st = attn_quant_run_begin(b, opt, rep, err);
    if (st != PG_OK) return st;
    const unsigned kept = kept_bf16(opt);
    const attn_kv_plumbing fixed = {1, 0, 0, 0};
    const attn_kv_plumbing *use = opt->quantize ? pl : &fixed;
    kv_paged cache, compact = {0};
    st = fp8_cache_write(b, k, v, opt, kept, kv_format, PG_SCALES_PER_TENSOR, &cache, rep,
                         err);
    if (st != PG_OK) return st;
    if (cache.block_table != NULL) {
        const float dk = use->dequant_scaled ? opt->k_scale : 1.0f,
                    dv = use->dequant_scaled ? opt->v_scale : 1.0f;
        st = kv_dequant_gather(&cache, dk, dv, &compact, err);
        kv_paged_free(&cache);
        if (st != PG_OK) return st;
    }
    const core_kv kv = kv_sources(kept, compact.block_table != NULL ? &compact : NULL, k, v);
    core_params par = bf16_params(b);
    par.qk_scale = attn_vllm_bmm1_scale(use->bmm1_q ? opt->q_scale : 1.0f,
                                        use->bmm1_k ? opt->k_scale : 1.0f, b->sm_scale);
    if (use->bmm2_v) par.v_scale = opt->v_scale;
    st = core_run(b, q, &kv, &par, out, n_threads, err);
    if (compact.block_table != NULL) kv_paged_free(&compact);
    return st;
}

pg_status attn_fp8_matmuls_run(const attn_profile *p, const attn_fp8_read *rd,
                               const attn_batch *b, const uint16_t *q, const uint16_t *k,
                               const uint16_t *v, const attn_quant_options *opt, uint16_t *out,
                               attn_quant_report *rep, int n_threads, pg_err *err)
{
    const pg_mode_traits *mt = pg_mode_traits_of(attn_profile_mode(p));
    const size_t nq = (size_t)attn_batch_tq(b) * (size_t)b->hq * (size_t)b->d;
    uint8_t *q8 = NULL;
    /* A tensor kept bf16 (quantize = 0: all of them) has its scale unused (attn.h). */
    const unsigned kept = kept_bf16(opt);
    const int kv_unscaled = opt->quantize && rd->kv_scales_dropped;
    const float qs = (kept & ATTN_TENSOR_Q) ? 1.0f : opt->q_scale,
                ks = (kept & ATTN_TENSOR_K) || kv_unscaled ? 1.0f : opt->k_scale,
                vs = (kept & ATTN_TENSOR_V) || kv_unscaled ? 1.0f : opt->v_scale;
    core_params par = {.q_elem = PG_FORMAT_BF16, .p_e4m3 = !(kept & ATTN_TENSOR_P),
                       .softmax = p->softmax, .accum = p->accum, .out_e4m3 = p->out_e4m3};
    attn_tiled_scales ts;
    if (attn_tiled_scales_of(p, b->sm_scale, qs, ks, vs, &ts)) {
        par.scale_log2 = ts.scale_log2;
        par.max_offset = ts.max_offset;
        par.p_scale = ts.p_scale;
        par.v_descale = ts.v_descale;
    } else if (p->softmax == ATTN_SOFTMAX_FINAL_MAX) {
        par.qk_scale = attn_vllm_bmm1_scale(qs, ks, b->sm_scale);
        par.v_scale = vs;
    } else {
        return pg_fail(err, PG_ERR_INTERNAL, "variant %s: the Triton row takes a bf16 Q "
                       "(attn_kv_per_token_head_run), not fp8 matmuls", attn_profile_variant(p));
    }
    par.block_n = attn_profile_block_n(p, b->d, b->window);
    const void *qin = q;
    if (!(kept & ATTN_TENSOR_Q)) {
        q8 = malloc(nq ? nq : 1);
        if (q8 == NULL) return pg_fail(err, PG_ERR_NOMEM, "fp8qkv: cannot allocate fp8 Q");
        (p->q_by_inverse ? fp8_e4m3_quantize_bf16_inverse : fp8_e4m3_quantize_bf16)(
            q, nq, opt->q_scale, q8, rep ? &rep->q : NULL);
        qin = q8;
        par.q_elem = PG_FORMAT_E4M3;
    }
    kv_paged cache;
    pg_status st = fp8_cache_write(b, k, v, opt, kept, mt->k_format, mt->kv_scales, &cache, rep,
                                   err);
    if (st == PG_OK && cache.block_table != NULL && cache.elem == PG_FORMAT_NVFP4) {
        /* the kernel converts the nvfp4 cache to its fp8 Q's type (kv_cache.h) */
        kv_paged e4m3;
        st = kv_nvfp4_to_e4m3(&cache, opt->quantize && rd->block_scales_dropped, &e4m3, err);
        kv_paged_free(&cache);
        cache = e4m3;
    }
    if (st == PG_OK) {
        const core_kv kv = kv_sources(kept, cache.block_table != NULL ? &cache : NULL, k, v);
        st = core_run(b, qin, &kv, &par, out, n_threads, err);
        if (cache.block_table != NULL) kv_paged_free(&cache);
    }
    free(q8);
    return st;
}

/* Copies of q, k and v rotated as vLLM rotates them for the int4 cache
 * (rht.h; *qr is NULL, Q read as it is, when rd leaves Q unrotated); free
 * with free(). */
static pg_status rotate_qkv(const attn_batch *b, const uint16_t *q, const uint16_t *k,
                            const uint16_t *v, const attn_row_read *rd, const float *signs,
                            uint16_t **qr, uint16_t **kr, uint16_t **vr, pg_err *err)
{
    const size_t nq = (size_t)attn_batch_tq(b) * (size_t)b->hq;
    const size_t nkv = (size_t)attn_batch_tkv(b) * (size_t)b->hkv;
    *qr = rd->q_unrotated ? NULL : rht_forward_bf16_copy(q, nq, b->d, signs);
    *kr = rht_forward_bf16_copy(k, nkv, b->d, signs);
    *vr = rht_forward_bf16_copy(v, nkv, b->d, signs);
    if ((*qr == NULL && !rd->q_unrotated) || *kr == NULL || *vr == NULL) {
        free(*qr);
        free(*kr);
        free(*vr);
        *qr = *kr = *vr = NULL;
        return pg_fail(err, PG_ERR_NOMEM, "rotation: cannot allocate copies of Q, K and V");
    }
    return PG_OK;
}

pg_status attn_kv_per_token_head_run(const attn_profile *p, const attn_row_read *rd,
                                     const attn_batch *b, const uint16_t *q, const uint16_t *k, const uint16_t *v,
                                     const attn_quant_options *opt, uint16_t *out,
                                     attn_quant_report *rep, int n_threads, pg_err *err)
{
    pg_status st = attn_quant_run_begin(b, opt, rep, err);
    if (st != PG_OK) return st;
    const pg_mode_traits *mt = pg_mode_traits_of(attn_profile_mode(p));
    const int rotates = mt->kv_rotation == PG_ROTATION_RHT;
    if (rotates && !rht_dim_ok(b->d))
        return pg_fail(err, PG_ERR_SHAPE, "variant %s: the Hadamard rotation needs a power-of-two "
                       "head dim up to %d, and this layer's d is %d (vLLM asserts it too)",
                       attn_profile_variant(p), RHT_MAX_DIM, b->d);
    const attn_row_read intended = ATTN_ROW_READ_INTENDED;
    const attn_row_read *use = opt->quantize ? rd : &intended;
    float signs[RHT_MAX_DIM];
    uint16_t *qr = NULL, *kr = NULL, *vr = NULL;
    attn_batch rb = *b;
    if (rotates) {
        rht_signs(RHT_SIGN_SEED, b->d, signs);
        st = rotate_qkv(b, q, k, v, use, signs, &qr, &kr, &vr, err);
        if (st != PG_OK) return st;
        if (qr != NULL) q = qr;
        k = kr;
        v = vr;
        /* the transform is unnormalized: softmax_scale / head_size (exact, d = 2^j) */
        rb.sm_scale = b->sm_scale / (float)b->d;
    }
    const unsigned kept = kept_bf16(opt);
    kv_paged cache;
    st = fp8_cache_write(&rb, k, v, opt, kept, mt->k_format, mt->kv_scales, &cache, rep, err);
    if (st == PG_OK) {
        const core_kv kv = kv_sources(kept, cache.block_table != NULL ? &cache : NULL, k, v);
        core_params par = bf16_params(&rb);
        par.softmax = ATTN_SOFTMAX_TRITON;
        par.block_n = ATTN_TRITON_PREFILL_TILE;
        par.row_scaling = use->scaling;
        par.zero_points = !use->zero_point_dropped;
        par.pv_in_fp32 = p->pv_in_fp32;
        st = core_run(&rb, q, &kv, &par, out, n_threads, err);
        if (cache.block_table != NULL) kv_paged_free(&cache);
    }
    if (st == PG_OK && rotates && !use->output_unrotated)
        rht_inverse_bf16_rows(out, (size_t)attn_batch_tq(b) * (size_t)b->hq, b->d, signs);
    free(qr);
    free(kr);
    free(vr);
    return st;
}

pg_status attn_variant_run(const attn_profile *p, const attn_batch *b, const uint16_t *q,
                           const uint16_t *k, const uint16_t *v, const attn_quant_options *opt,
                           uint16_t *out, attn_quant_report *rep, int n_threads, pg_err *err)
{
    const pg_mode_traits *mt = pg_mode_traits_of(attn_profile_mode(p));
    if (mt->kv_consumption == PG_KV_READ_AS_BF16)
        return attn_variant_bf16(b, q, k, v, out, n_threads, err);
    pg_status st = attn_quant_run_begin(b, opt, rep, err);
    if (st != PG_OK) return st;
    char why[ATTN_REFUSAL_MAX];
    if (!attn_profile_computes(p, b, why, sizeof why))
        return pg_fail(err, PG_ERR_UNSUPPORTED, "variant %s: %s", attn_profile_variant(p), why);
    switch (mt->kv_consumption) {
    case PG_KV_DEQUANT_TO_BF16_COPY: {
        /* A kept tensor has its scale unused everywhere, the bmm scales of
         * @vllm-24197 included (there Q's bit drops q_scale from bmm1; P's
         * bit changes nothing: fp8kv's P is bf16). */
        const attn_kv_plumbing pl = attn_kv_plumbing_of(p);
        attn_quant_options o = *opt;
        if (o.keep_bf16 & ATTN_TENSOR_Q) o.q_scale = 1.0f;
        if (o.keep_bf16 & ATTN_TENSOR_K) o.k_scale = 1.0f;
        if (o.keep_bf16 & ATTN_TENSOR_V) o.v_scale = 1.0f;
        return attn_fp8kv_plumbed_run(&pl, mt->k_format, b, q, k, v, &o, out, rep, n_threads,
                                      err);
    }
    case PG_KV_DEQUANT_IN_REGISTERS: {
        const attn_row_read rd = ATTN_ROW_READ_INTENDED;
        return attn_kv_per_token_head_run(p, &rd, b, q, k, v, opt, out, rep, n_threads, err);
    }
    case PG_KV_FP8_MATMULS: {
        const attn_fp8_read rd = {0, 0};
        return attn_fp8_matmuls_run(p, &rd, b, q, k, v, opt, out, rep, n_threads, err);
    }
    case PG_KV_CENTROID_SCORES: {
        const attn_tq_read rd = ATTN_TQ_READ_INTENDED;
        return attn_turboquant_run(p, &rd, b, q, k, v, opt, out, rep, n_threads, err);
    }
    case PG_KV_READ_AS_BF16: break;
    }
    return pg_fail(err, PG_ERR_INTERNAL, "variant %s: mode %s has no computation",
                   attn_profile_variant(p), pg_mode_name(attn_profile_mode(p)));
}

float attn_vllm_bmm1_scale(float q_scale, float k_scale, float sm_scale)
{
    return (float)((double)q_scale * (double)k_scale * (double)sm_scale);
}

float attn_fa3_scale_log2(float sm_scale, float q_descale, float k_descale)
{
    float s = (float)((double)sm_scale * LOG2E_F64);
    s *= q_descale * k_descale;
    return s;
}

int attn_tiled_scales_of(const attn_profile *p, float sm_scale, float q_scale, float k_scale,
                         float v_scale, attn_tiled_scales *out)
{
    memset(out, 0, sizeof *out);
    switch (p->softmax) {
    case ATTN_SOFTMAX_FA3:
        out->scale_log2 = attn_fa3_scale_log2(sm_scale, q_scale, k_scale);
        out->max_offset = p->p_exp_offset;
        out->v_descale = v_scale;
        return 1;
    case ATTN_SOFTMAX_TRTLLM:
        /* fmha_v2_run.cu: set_alpha(scale_bmm1, fused_scale_bmm1 * float(M_LOG2E)), fp32. */
        out->scale_log2 = attn_vllm_bmm1_scale(q_scale, k_scale, sm_scale) * LOG2E_F32;
        out->max_offset = p->p_exp_offset;
        out->v_descale = v_scale; /* bmm2_scale */
        return 1;
    case ATTN_SOFTMAX_FLASHINFER:
        /* variants.cuh StandardFP8Attention: q_scale * k_scale * sm_scale * math::log2e
         * and v_scale / p_scale, fp32 left to right. */
        out->scale_log2 = q_scale * k_scale * sm_scale * LOG2E_F32;
        out->p_scale = p->p_scale;
        out->v_descale = v_scale / p->p_scale;
        return 1;
    case ATTN_SOFTMAX_FINAL_MAX:
    case ATTN_SOFTMAX_TRITON: break;
    }
    return 0;
}
