/*
 * attn_turboquant.c: the TurboQuant presets' attention on the CPU
 * (attn_profile_impl.h attn_turboquant_run): vLLM's decode kernel
 * (vllm/v1/attention/ops/triton_turboquant_decode.py _tq_decode_stage1 and
 * triton_decode_attention.py _fwd_kernel_stage2) over the cache that
 * turboquant.h writes. Every query row of a capture is taken as the decode
 * step that sees its keys [0, hi]; rules and what is inferred:
 * kernels/attn_profile.c (rules_turboquant).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "attn.h"
#include "attn_layout.h"
#include "attn_profile_impl.h"
#include "parallel.h"
#include "turboquant.h"

/* DECODE stage 1: c_inv_norm = 1 / sqrt(sum c^2 + 1e-16). */
#define TQ_NORM_CORRECTION_EPS 1e-16f

/* What every work item reads. */
typedef struct tq_job {
    const attn_batch *b;
    const attn_layout *lay;
    const uint16_t *q, *k, *v;  /* packed bf16 (k, v: for the tensors kept bf16) */
    const tq_cache *cache;      /* NULL when both are kept */
    int k_kept, v_kept;
    int rotate_q;               /* MSE keys scored against q . Pi^T */
    attn_tq_read rd;
    uint16_t *out;
    float **scratch;            /* [n_threads] kc, vv [max_kv][d], norm [max_kv], qrow,
                                 * qrot, acc, tile [d], mid [splits][d + 1] */
} tq_job;

/* Decodes sequence s, kv head g: each key's scoring vector kc[t][d] (its
 * centroids, re-normalized for "_nc"; its e4m3 values; or its bf16 row)
 * with its norm (1 but for MSE keys), and each value row vv[t][d]. */
static void tq_gather(const tq_job *job, int s, int g, float *kc, float *norm, float *vv)
{
    const attn_batch *b = job->b;
    const int n = b->seq_kv[s], d = b->d;
    const tq_cache *c = job->cache;
    uint8_t codes[TQ_MAX_DIM];
    for (int t = 0; t < n; t++) {
        const size_t row = (size_t)(job->lay->kv_off[s] + t) * (size_t)b->hkv + (size_t)g;
        float *kr = kc + (size_t)t * (size_t)d, *vr = vv + (size_t)t * (size_t)d;
        if (job->k_kept) {
            for (int i = 0; i < d; i++) kr[i] = bf16_to_f32(job->k[row * (size_t)d + (size_t)i]);
            norm[t] = 1.0f;
        } else {
            const float nk = tq_read_key(&c->lay, tq_cache_slot(c, row), codes);
            norm[t] = job->rd.key_norms_dropped ? 1.0f : nk;
            if (c->lay.key_fp8) {
                for (int i = 0; i < d; i++) kr[i] = fp8_e4m3_decode(codes[i]);
            } else {
                float sq = 0.0f;
                for (int i = 0; i < d; i++) {
                    kr[i] = c->cb.centroids[codes[i]];
                    sq += kr[i] * kr[i];
                }
                if (c->lay.norm_correction && !job->rd.norm_correction_skipped) {
                    const float inv = 1.0f / sqrtf(sq + TQ_NORM_CORRECTION_EPS);
                    for (int i = 0; i < d; i++) kr[i] *= inv;
                }
            }
        }
        if (job->v_kept) {
            for (int i = 0; i < d; i++) vr[i] = bf16_to_f32(job->v[row * (size_t)d + (size_t)i]);
        } else {
            float scale, min;
            tq_read_value(&c->lay, tq_cache_slot(c, row), codes, &scale, &min);
            if (job->rd.value_min_dropped) min = 0.0f;
            for (int i = 0; i < d; i++) vr[i] = fmaf((float)codes[i], scale, min);
        }
    }
}

/* Key t's score: norm * (q . kc_t) * sm_scale for MSE keys, (q . kc_t) *
 * sm_scale otherwise (DECODE: `vec_norms * term1 * ATTN_SCALE`). */
static inline float tq_score(const float *qv, const float *kr, float norm, int mse, int d,
                             float sm_scale)
{
    float dot = 0.0f;
    for (int i = 0; i < d; i++) dot += qv[i] * kr[i];
    return mse ? norm * dot * sm_scale : dot * sm_scale;
}

/* One query row as the decode kernel takes it: keys [0, n_keys) split into
 * ATTN_TQ_DECODE_KV_SPLITS ranges of cdiv(n_keys, splits), each an online
 * softmax over tiles of ATTN_TQ_DECODE_BLOCK_KV keys into (acc / l, m +
 * log l), then the log-sum-exp merge of the splits into o. */
static void tq_row(const tq_job *job, const float *qv, int mse, const float *kc,
                   const float *norm, const float *vv, int n_keys, float *acc, float *tile,
                   float *mid, uint16_t *o)
{
    const int d = job->b->d, S = ATTN_TQ_DECODE_KV_SPLITS, N = ATTN_TQ_DECODE_BLOCK_KV;
    const float sm = job->b->sm_scale;
    const int split_len = (n_keys + S - 1) / S;
    for (int sid = 0; sid < S; sid++) {
        const int start = split_len * sid;
        const int end = start + split_len < n_keys ? start + split_len : n_keys;
        if (start >= end) continue;
        float m = -INFINITY, l = 0.0f;
        for (int i = 0; i < d; i++) acc[i] = 0.0f;
        for (int t0 = start; t0 < end; t0 += N) {
            const int t1 = t0 + N < end ? t0 + N : end;
            float sc[ATTN_TQ_DECODE_BLOCK_KV];
            float mt = m;
            for (int t = t0; t < t1; t++) {
                sc[t - t0] = tq_score(qv, kc + (size_t)t * (size_t)d, norm[t], mse, d, sm);
                mt = fmaxf(mt, sc[t - t0]);
            }
            const float re = attn_triton_exp(m - mt);
            float psum = 0.0f;
            for (int i = 0; i < d; i++) tile[i] = 0.0f;
            for (int t = t0; t < t1; t++) {
                const float p = attn_triton_exp(sc[t - t0] - mt);
                psum += p;
                const float *vr = vv + (size_t)t * (size_t)d;
                for (int i = 0; i < d; i++) tile[i] += p * vr[i];
            }
            for (int i = 0; i < d; i++) acc[i] = fmaf(acc[i], re, tile[i]);
            l = fmaf(l, re, psum);
            m = mt;
        }
        const float safe_l = l > 0.0f ? l : 1.0f;
        float *mo = mid + (size_t)sid * (size_t)(d + 1);
        for (int i = 0; i < d; i++) mo[i] = acc[i] / safe_l;
        mo[d] = m + logf(safe_l);
    }
    /* stage 2 */
    float e_sum = 0.0f, e_max = -INFINITY;
    for (int i = 0; i < d; i++) acc[i] = 0.0f;
    for (int sid = 0; sid < S; sid++) {
        const int start = split_len * sid;
        const int end = start + split_len < n_keys ? start + split_len : n_keys;
        if (start >= end) continue;
        const float *mo = mid + (size_t)sid * (size_t)(d + 1);
        const float mx = fmaxf(mo[d], e_max);
        const float old = attn_triton_exp(e_max - mx), ex = attn_triton_exp(mo[d] - mx);
        for (int i = 0; i < d; i++) acc[i] = fmaf(ex, mo[i], acc[i] * old);
        e_sum = fmaf(e_sum, old, ex);
        e_max = mx;
    }
    for (int i = 0; i < d; i++) o[i] = bf16_from_f32(acc[i] / e_sum);
}

static void tq_item(void *ctx, int item, int thread)
{
    const tq_job *job = ctx;
    const attn_batch *b = job->b;
    const int s = item / b->hkv, g = item % b->hkv, d = b->d;
    const int group = b->hq / b->hkv, max_kv = job->lay->max_kv;
    float *kc = job->scratch[thread];
    float *vv = kc + (size_t)max_kv * (size_t)d;
    float *norm = vv + (size_t)max_kv * (size_t)d;
    float *qrow = norm + max_kv, *qrot = qrow + d, *acc = qrot + d, *tile = acc + d;
    float *mid = tile + d;
    tq_gather(job, s, g, kc, norm, vv);
    const int mse = !job->k_kept && !job->cache->lay.key_fp8;
    for (int hh = 0; hh < group; hh++) {
        const int h = g * group + hh;
        for (int j = 0; j < b->seq_q[s]; j++) {
            const size_t qi = ((size_t)(job->lay->q_off[s] + j) * (size_t)b->hq + (size_t)h) *
                              (size_t)d;
            for (int i = 0; i < d; i++) qrow[i] = bf16_to_f32(job->q[qi + (size_t)i]);
            const float *qv = qrow;
            if (mse && job->rotate_q) {
                tq_rotate_row(qrow, d, qrot); /* q.float() @ PiT */
                qv = qrot;
            }
            int lo, hi;
            attn_key_range(b, s, j, &lo, &hi);
            tq_row(job, qv, mse, kc, norm, vv, hi + 1, acc, tile, mid, job->out + qi);
        }
    }
}

pg_status attn_turboquant_run(const attn_profile *p, const attn_tq_read *rd, const attn_batch *b,
                              const uint16_t *q, const uint16_t *k, const uint16_t *v,
                              const attn_quant_options *opt, uint16_t *out,
                              attn_quant_report *rep, int n_threads, pg_err *err)
{
    pg_status st = attn_quant_run_begin(b, opt, rep, err);
    if (st != PG_OK) return st;
    const pg_mode m = attn_profile_mode(p);
    char why[ATTN_REFUSAL_MAX];
    if (!attn_profile_computes(p, b, why, sizeof why))
        return pg_fail(err, PG_ERR_UNSUPPORTED, "variant %s: %s", attn_profile_variant(p), why);
    tq_layout lay;
    st = tq_layout_of(m, b->d, &lay, err);
    if (st != PG_OK) return st;
    const unsigned kept = opt->quantize ? opt->keep_bf16 : ATTN_TENSORS_ALL;
    const attn_tq_read intended = ATTN_TQ_READ_INTENDED;
    tq_job job = {.b = b, .q = q, .k = k, .v = v, .k_kept = (kept & ATTN_TENSOR_K) != 0,
                  .v_kept = (kept & ATTN_TENSOR_V) != 0, .rd = opt->quantize ? *rd : intended,
                  .out = out};
    job.rotate_q = !job.rd.q_unrotated;
    tq_cache cache = {0};
    if (!job.k_kept || !job.v_kept) {
        st = tq_cache_write(m, b, k, v, &cache, rep ? &rep->k : NULL, rep ? &rep->v : NULL, err);
        if (st != PG_OK) return st;
        if (rep != NULL && job.k_kept) memset(&rep->k, 0, sizeof rep->k);
        if (rep != NULL && job.v_kept) memset(&rep->v, 0, sizeof rep->v);
        job.cache = &cache;
    }
    attn_layout al;
    st = attn_layout_make(b, &al, err);
    if (st != PG_OK) {
        tq_cache_free(&cache);
        return st;
    }
    job.lay = &al;
    const int items = b->n_seqs * b->hkv;
    if (n_threads > items) n_threads = items;
    if (n_threads < 1) n_threads = 1;
    const size_t per = (size_t)al.max_kv * (size_t)(2 * b->d + 1) + (size_t)(4 * b->d) +
                       (size_t)ATTN_TQ_DECODE_KV_SPLITS * (size_t)(b->d + 1);
    st = attn_scratch_alloc(n_threads, per, &job.scratch, err);
    if (st == PG_OK) st = parallel_for(items, n_threads, tq_item, &job, err);
    attn_scratch_free(job.scratch, n_threads);
    attn_layout_free(&al);
    tq_cache_free(&cache);
    return st;
}
