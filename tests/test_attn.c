/*
 * test_attn.c: known-answer and specification tests of the CPU attention modes.
 *
 * The naive implementations here are written from attn.h's text, row by row
 * with scalar loops, independently of kernels/attn_*.c; the blocked reference
 * must agree with the naive fp64 one to 1e-12, and the fp32 modes must match
 * their naive statements bit for bit.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/mode.h"
#include "kernels/attn.h"
#include "kernels/attn_profile.h"
#include "kernels/numerics.h"
#include "base/rng.h"

/* Agreement required between the blocked and the naive fp64 reference. */
#define REF_AGREEMENT 1e-12

/* A test case: shape, data and the batch over it. */
typedef struct tcase {
    attn_batch b;
    int32_t seq_q[8], seq_kv[8];
    float sinks[128];
    uint16_t *q, *k, *v;
    size_t nq, nkv;
} tcase;

static double gauss(uint64_t *s)
{
    double u1 = ((double)(rng_splitmix64(s) >> 11) + 0.5) / 9007199254740992.0;
    double u2 = (double)(rng_splitmix64(s) >> 11) / 9007199254740992.0;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

/* Builds a random case; q_amp scales the queries (peakier softmax when larger). */
static void tcase_make(tcase *c, int n_seqs, const int *sq, const int *skv, int hq, int hkv, int d,
                       int window, int sinks, double q_amp, uint64_t seed)
{
    memset(c, 0, sizeof *c);
    int64_t tq = 0, tkv = 0;
    for (int s = 0; s < n_seqs; s++) {
        c->seq_q[s] = sq[s];
        c->seq_kv[s] = skv[s];
        tq += sq[s];
        tkv += skv[s];
    }
    c->nq = (size_t)tq * (size_t)hq * (size_t)d;
    c->nkv = (size_t)tkv * (size_t)hkv * (size_t)d;
    c->q = malloc(c->nq * 2);
    c->k = malloc(c->nkv * 2);
    c->v = malloc(c->nkv * 2);
    uint64_t st = seed;
    for (size_t i = 0; i < c->nq; i++) c->q[i] = bf16_from_f32((float)(q_amp * gauss(&st)));
    for (size_t i = 0; i < c->nkv; i++) c->k[i] = bf16_from_f32((float)gauss(&st));
    for (size_t i = 0; i < c->nkv; i++) c->v[i] = bf16_from_f32((float)gauss(&st));
    for (int h = 0; h < hq; h++) c->sinks[h] = (float)gauss(&st);
    c->b = (attn_batch){n_seqs, c->seq_q, c->seq_kv, hq, hkv, d, window,
                        (float)(1.0 / sqrt((double)d)), sinks ? c->sinks : NULL};
}

static void tcase_free(tcase *c)
{
    free(c->q);
    free(c->k);
    free(c->v);
}

/* Index of (token row, head) in a [T, H, d] tensor. */
static size_t at(int64_t row, int h, int H, int d)
{
    return ((size_t)row * (size_t)H + (size_t)h) * (size_t)d;
}

/* Naive fp64 attention straight from the definition. */
static void naive_reference(const attn_batch *b, const uint16_t *q, const uint16_t *k,
                            const uint16_t *v, double *out)
{
    int64_t qo = 0, ko = 0;
    const int G = b->hq / b->hkv, d = b->d;
    for (int s = 0; s < b->n_seqs; s++) {
        const int ctx = b->seq_kv[s] - b->seq_q[s];
        for (int j = 0; j < b->seq_q[s]; j++) {
            const int hi = ctx + j;
            const int lo = b->window > 0 ? (hi - b->window + 1 > 0 ? hi - b->window + 1 : 0) : 0;
            for (int h = 0; h < b->hq; h++) {
                const int g = h / G;
                double *sc = malloc(sizeof(double) * (size_t)(hi + 1));
                double m = b->sinks ? b->sinks[h] : -INFINITY;
                for (int t = lo; t <= hi; t++) {
                    double dot = 0;
                    for (int i = 0; i < d; i++)
                        dot += (double)bf16_to_f32(q[at(qo + j, h, b->hq, d) + i]) *
                               bf16_to_f32(k[at(ko + t, g, b->hkv, d) + i]);
                    sc[t] = dot * b->sm_scale;
                    if (sc[t] > m) m = sc[t];
                }
                double l = b->sinks ? exp(b->sinks[h] - m) : 0;
                for (int t = lo; t <= hi; t++) l += (sc[t] = exp(sc[t] - m));
                for (int i = 0; i < d; i++) {
                    double o = 0;
                    for (int t = lo; t <= hi; t++)
                        o += sc[t] * bf16_to_f32(v[at(ko + t, g, b->hkv, d) + i]);
                    out[at(qo + j, h, b->hq, d) + i] = o / l;
                }
                free(sc);
            }
        }
        qo += b->seq_q[s];
        ko += b->seq_kv[s];
    }
}

/* Exact value of e4m3(x / scale) (the fp8 modes' quantization). */
static float q8(uint16_t x, float scale)
{
    return fp8_e4m3_decode(fp8_e4m3_encode_scaled(bf16_to_f32(x), scale));
}

/* Naive statement of the final-max variants: fp8 = 0 is bf16, fp8 = 1 is
 * fp8qkv@ideal (P rounded to e4m3 unscaled), fp8 = 2 is fp8kv@fixed
 * (bf16(fp8*scale) K/V), fp8 = 3 is fp8kv@vllm-24197 (the same K/V, then
 * S * fp32(qs*ks*sm) and O * vs, vLLM's bmm1/bmm2 scales in double). */
static void naive_mode(const attn_batch *b, const uint16_t *q, const uint16_t *k,
                       const uint16_t *v, int fp8, float qs, float ks, float vs, uint16_t *out)
{
    int64_t qo = 0, ko = 0;
    const int G = b->hq / b->hkv, d = b->d;
    const float qk_scale =
        fp8 == 1 || fp8 == 3 ? (float)((double)qs * ks * b->sm_scale) : b->sm_scale;
    const float o_scale = fp8 == 1 || fp8 == 3 ? vs : 1.0f;
    for (int s = 0; s < b->n_seqs; s++) {
        const int ctx = b->seq_kv[s] - b->seq_q[s];
        for (int j = 0; j < b->seq_q[s]; j++) {
            const int hi = ctx + j;
            const int lo = b->window > 0 ? (hi - b->window + 1 > 0 ? hi - b->window + 1 : 0) : 0;
            for (int h = 0; h < b->hq; h++) {
                const int g = h / G;
                float *sc = malloc(sizeof(float) * (size_t)(hi + 1));
                for (int t = lo; t <= hi; t++) {
                    float dot = 0;
                    for (int i = 0; i < d; i++) {
                        uint16_t qx = q[at(qo + j, h, b->hq, d) + i];
                        uint16_t kx = k[at(ko + t, g, b->hkv, d) + i];
                        float a = fp8 == 1 ? q8(qx, qs) : bf16_to_f32(qx);
                        float c = fp8 == 1   ? q8(kx, ks)
                                  : fp8 >= 2 ? bf16_to_f32(bf16_from_f32(q8(kx, ks) * ks))
                                             : bf16_to_f32(kx);
                        dot += a * c;
                    }
                    sc[t] = dot * qk_scale;
                }
                float m = b->sinks ? b->sinks[h] : -INFINITY;
                for (int t = lo; t <= hi; t++) m = fmaxf(m, sc[t]);
                float l = b->sinks ? expf(b->sinks[h] - m) : 0.0f;
                for (int t = lo; t <= hi; t++) {
                    sc[t] = expf(sc[t] - m);
                    l += sc[t];
                }
                for (int i = 0; i < d; i++) {
                    float o = 0;
                    for (int t = lo; t <= hi; t++) {
                        uint16_t vx = v[at(ko + t, g, b->hkv, d) + i];
                        float p = fp8 == 1 ? fp8_e4m3_decode(fp8_e4m3_encode(sc[t]))
                                           : bf16_to_f32(bf16_from_f32(sc[t]));
                        float c = fp8 == 1   ? q8(vx, vs)
                                  : fp8 >= 2 ? bf16_to_f32(bf16_from_f32(q8(vx, vs) * vs))
                                             : bf16_to_f32(vx);
                        o += p * c;
                    }
                    out[at(qo + j, h, b->hq, d) + i] = bf16_from_f32((o * o_scale) / l);
                }
                free(sc);
            }
        }
        qo += b->seq_q[s];
        ko += b->seq_kv[s];
    }
}

/* Relative L2 distance of two fp64 arrays. */
static double rel_l2_d(const double *a, const double *r, size_t n)
{
    double e = 0, z = 0;
    for (size_t i = 0; i < n; i++) {
        e += (a[i] - r[i]) * (a[i] - r[i]);
        z += r[i] * r[i];
    }
    return sqrt(e / z);
}

/* Relative L2 distance of a bf16 array from an fp64 one. */
static double rel_l2_bf16(const uint16_t *a, const double *r, size_t n)
{
    double e = 0, z = 0;
    for (size_t i = 0; i < n; i++) {
        double x = bf16_to_f32(a[i]);
        e += (x - r[i]) * (x - r[i]);
        z += r[i] * r[i];
    }
    return sqrt(e / z);
}

static const attn_quant_options fp8_default = {1, 1.0f, 1.0f, 1.0f, 16, 42, 0};

/* Runs variant name ("fp8kv@fixed", ...) on case c into out. */
static pg_status run_variant(const char *name, const tcase *c, const attn_quant_options *opt,
                             uint16_t *out, attn_quant_report *rep, pg_err *err)
{
    const attn_profile *p;
    pg_status st = attn_profile_find(name, &p, err);
    return st == PG_OK ? attn_variant_run(p, &c->b, c->q, c->k, c->v, opt, out, rep, 2, err) : st;
}

/* A batch shape of the specification tests, with the fp8 block size to use. */
typedef struct shape {
    int n_seqs, sq[3], skv[3], hq, hkv, d, window, sinks, block;
} shape;

/* The shapes the specification tests sweep. */
static const shape shapes[] = {
    {1, {1}, {1}, 1, 1, 64, 0, 0, 16},
    {2, {5, 9}, {5, 9}, 4, 4, 64, 0, 1, 16},           /* GQA ratio 1 */
    {3, {7, 1, 20}, {19, 33, 20}, 8, 2, 64, 0, 1, 32}, /* context, GQA 4 */
    {2, {30, 12}, {40, 12}, 8, 1, 128, 6, 1, 64},      /* window, GQA 8, d 128 */
    {1, {37}, {37}, 2, 1, 72, 0, 0, 16},               /* d not a multiple of the tiles */
};

/* tcase_make on shape sh. */
static void tcase_make_shape(tcase *c, const shape *sh, double q_amp, uint64_t seed)
{
    tcase_make(c, sh->n_seqs, sh->sq, sh->skv, sh->hq, sh->hkv, sh->d, sh->window, sh->sinks, q_amp,
               seed);
}

Test(attn, blocked_reference_matches_naive_reference)
{
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        tcase c;
        tcase_make_shape(&c, &shapes[i], 2.0, 100 + i);
        double *r = malloc(c.nq * sizeof(double)), *n = malloc(c.nq * sizeof(double));
        pg_err err = {0};
        cr_assert_eq(attn_reference(&c.b, c.q, c.k, c.v, r, 2, &err), PG_OK, "%s", err.msg);
        naive_reference(&c.b, c.q, c.k, c.v, n);
        double e = rel_l2_d(r, n, c.nq);
        cr_assert_lt(e, REF_AGREEMENT, "shape %zu: blocked vs naive reference rel_l2 %.3e", i, e);
        free(r);
        free(n);
        tcase_free(&c);
    }
}

Test(attn, modes_match_their_naive_statements_bit_for_bit)
{
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        tcase c;
        tcase_make_shape(&c, &shapes[i], 2.0, 200 + i);
        uint16_t *o = malloc(c.nq * 2), *n = malloc(c.nq * 2);
        pg_err err = {0};
        attn_quant_options opt = fp8_default;
        opt.block_size = shapes[i].block;
        opt.q_scale = 0.011f; /* != 1: a scale applied twice or not at all shows */
        opt.k_scale = 0.013f;
        opt.v_scale = 0.017f;

        cr_assert_eq(attn_variant_bf16(&c.b, c.q, c.k, c.v, o, 2, &err), PG_OK, "%s", err.msg);
        naive_mode(&c.b, c.q, c.k, c.v, 0, 1, 1, 1, n);
        cr_assert_arr_eq(o, n, c.nq * 2, "shape %zu: bf16 differs from its statement", i);

        cr_assert_eq(run_variant("fp8qkv@ideal", &c, &opt, o, NULL, &err), PG_OK, "%s", err.msg);
        naive_mode(&c.b, c.q, c.k, c.v, 1, opt.q_scale, opt.k_scale, opt.v_scale, n);
        cr_assert_arr_eq(o, n, c.nq * 2, "shape %zu: fp8qkv@ideal differs from its statement", i);

        cr_assert_eq(run_variant("fp8kv@fixed", &c, &opt, o, NULL, &err), PG_OK, "%s", err.msg);
        naive_mode(&c.b, c.q, c.k, c.v, 2, opt.q_scale, opt.k_scale, opt.v_scale, n);
        cr_assert_arr_eq(o, n, c.nq * 2, "shape %zu: fp8kv@fixed differs from its statement", i);

        cr_assert_eq(run_variant("fp8kv@vllm-24197", &c, &opt, o, NULL, &err), PG_OK, "%s",
                     err.msg);
        naive_mode(&c.b, c.q, c.k, c.v, 3, opt.q_scale, opt.k_scale, opt.v_scale, n);
        cr_assert_arr_eq(o, n, c.nq * 2, "shape %zu: fp8kv@vllm-24197 differs from its statement",
                         i);
        free(o);
        free(n);
        tcase_free(&c);
    }
}

Test(attn, quantization_off_equals_bf16_bit_for_bit)
{
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        tcase c;
        tcase_make_shape(&c, &shapes[i], 1.0, 300 + i);
        uint16_t *ob = malloc(c.nq * 2), *o = malloc(c.nq * 2);
        pg_err err = {0};
        attn_quant_options opt = fp8_default;
        opt.quantize = 0;
        opt.block_size = shapes[i].block;
        /* Scales != 1: unused without quantization (attn.h), so they must not show. */
        opt.q_scale = 0.5f;
        opt.k_scale = 0.25f;
        opt.v_scale = 2.0f;
        cr_assert_eq(attn_variant_bf16(&c.b, c.q, c.k, c.v, ob, 1, &err), PG_OK);
        static const char *const same[] = {"fp8kv@fixed", "fp8kv@vllm-24197", "fp8qkv@ideal"};
        for (size_t v = 0; v < sizeof same / sizeof same[0]; v++) {
            opt.quantize = 0;
            cr_assert_eq(run_variant(same[v], &c, &opt, o, NULL, &err), PG_OK, "%s", err.msg);
            cr_assert_arr_eq(o, ob, c.nq * 2, "shape %zu: %s without quantization != bf16", i,
                             same[v]);
            /* And the property is not vacuous: with quantization the result moves. */
            opt.quantize = 1;
            cr_assert_eq(run_variant(same[v], &c, &opt, o, NULL, &err), PG_OK, "%s", err.msg);
            cr_assert_neq(memcmp(o, ob, c.nq * 2), 0, "shape %zu: %s", i, same[v]);
        }
        free(ob);
        free(o);
        tcase_free(&c);
    }
}

Test(attn, one_token_returns_its_value)
{
    int sq[1] = {1}, skv[1] = {1};
    tcase c;
    tcase_make(&c, 1, sq, skv, 2, 1, 64, 0, 0, 1.0, 7);
    double *r = malloc(c.nq * sizeof(double));
    uint16_t *o = malloc(c.nq * 2);
    pg_err err = {0};
    cr_assert_eq(attn_reference(&c.b, c.q, c.k, c.v, r, 1, &err), PG_OK);
    cr_assert_eq(attn_variant_bf16(&c.b, c.q, c.k, c.v, o, 1, &err), PG_OK);
    for (int h = 0; h < 2; h++)
        for (int i = 0; i < 64; i++) {
            cr_assert_eq(r[h * 64 + i], (double)bf16_to_f32(c.v[i]));
            cr_assert_eq(o[h * 64 + i], c.v[i]);
        }
    free(r);
    free(o);
    tcase_free(&c);
}

Test(attn, identical_keys_average_the_values)
{
    int sq[1] = {1}, skv[1] = {6};
    tcase c;
    tcase_make(&c, 1, sq, skv, 1, 1, 64, 0, 0, 1.0, 8);
    for (int t = 1; t < 6; t++) memcpy(c.k + t * 64, c.k, 64 * 2);
    double *r = malloc(c.nq * sizeof(double));
    pg_err err = {0};
    cr_assert_eq(attn_reference(&c.b, c.q, c.k, c.v, r, 1, &err), PG_OK);
    for (int i = 0; i < 64; i++) {
        double mean = 0;
        for (int t = 0; t < 6; t++) mean += bf16_to_f32(c.v[t * 64 + i]);
        mean /= 6;
        cr_assert_float_eq(r[i], mean, 1e-15 * (1 + fabs(mean)));
    }
    free(r);
    tcase_free(&c);
}

Test(attn, dominant_sink_takes_almost_all_the_mass)
{
    int sq[1] = {4}, skv[1] = {4};
    tcase c;
    tcase_make(&c, 1, sq, skv, 1, 1, 64, 0, 1, 0.1, 9);
    c.sinks[0] = 40.0f; /* scores are O(1): weights e^-40 of the sink's */
    double *r = malloc(c.nq * sizeof(double));
    uint16_t *o = malloc(c.nq * 2);
    pg_err err = {0};
    cr_assert_eq(attn_reference(&c.b, c.q, c.k, c.v, r, 1, &err), PG_OK);
    cr_assert_eq(attn_variant_bf16(&c.b, c.q, c.k, c.v, o, 1, &err), PG_OK);
    for (size_t i = 0; i < c.nq; i++) {
        cr_assert_lt(fabs(r[i]), 1e-15, "element %zu: %g", i, r[i]);
        cr_assert_lt(fabs(bf16_to_f32(o[i])), 1e-15);
    }
    /* The weights are tiny but not zero: the reference keeps them. */
    double any = 0;
    for (size_t i = 0; i < c.nq; i++) any += fabs(r[i]);
    cr_assert_gt(any, 0.0);
    free(r);
    free(o);
    tcase_free(&c);
}

Test(attn, window_of_one_sees_only_itself)
{
    int sq[2] = {3, 5}, skv[2] = {7, 5};
    tcase c;
    tcase_make(&c, 2, sq, skv, 4, 2, 64, 1, 1, 3.0, 10);
    double *r = malloc(c.nq * sizeof(double));
    uint16_t *o = malloc(c.nq * 2);
    pg_err err = {0};
    cr_assert_eq(attn_reference(&c.b, c.q, c.k, c.v, r, 2, &err), PG_OK);
    cr_assert_eq(attn_variant_bf16(&c.b, c.q, c.k, c.v, o, 2, &err), PG_OK);
    /* Without the sink the output would be v itself; with it, v * w, w = 1/(1+e^(sink-s)). */
    const int64_t qoff[2] = {0, 3}, koff[2] = {0, 7};
    for (int s = 0; s < 2; s++)
        for (int j = 0; j < sq[s]; j++)
            for (int h = 0; h < 4; h++) {
                const int64_t kt = koff[s] + (skv[s] - sq[s]) + j;
                double dot = 0;
                for (int i = 0; i < 64; i++)
                    dot += (double)bf16_to_f32(c.q[at(qoff[s] + j, h, 4, 64) + i]) *
                           bf16_to_f32(c.k[at(kt, h / 2, 2, 64) + i]);
                const double sc = dot * c.b.sm_scale;
                const double w = 1.0 / (1.0 + exp((double)c.sinks[h] - sc));
                for (int i = 0; i < 64; i++) {
                    const double want = w * bf16_to_f32(c.v[at(kt, h / 2, 2, 64) + i]);
                    cr_assert_float_eq(r[at(qoff[s] + j, h, 4, 64) + i], want,
                                       1e-14 * (1 + fabs(want)));
                }
            }
    free(r);
    free(o);
    tcase_free(&c);
}

Test(attn, gqa_maps_query_head_to_its_kv_head)
{
    int sq[1] = {3}, skv[1] = {3};
    tcase c;
    tcase_make(&c, 1, sq, skv, 8, 2, 64, 0, 0, 1.0, 11);
    /* kv head g holds the constant value g + 1 everywhere, and one key for
     * every token: all scores of a row are equal, so every P is exactly 1
     * (2^8 in the FA3 profiles), exact in e4m3, and O is exactly g + 1. */
    for (int t = 1; t < 3; t++) memcpy(c.k + at(t, 0, 2, 64), c.k, 2 * 64 * 2);
    for (int t = 0; t < 3; t++)
        for (int g = 0; g < 2; g++)
            for (int i = 0; i < 64; i++) c.v[at(t, g, 2, 64) + i] = bf16_from_f32((float)(g + 1));
    double *r = malloc(c.nq * sizeof(double));
    uint16_t *o = malloc(c.nq * 2);
    pg_err err = {0};
    attn_quant_options opt = fp8_default;
    cr_assert_eq(attn_reference(&c.b, c.q, c.k, c.v, r, 2, &err), PG_OK);
    for (size_t variant = 0; variant < attn_profile_count(); variant++) {
        const attn_profile *p = attn_profile_at(variant);
        const int rotates =
            pg_mode_traits_of(attn_profile_mode(p))->kv_rotation != PG_ROTATION_NONE;
        cr_assert_eq(attn_variant_run(p, &c.b, c.q, c.k, c.v, &opt, o, NULL, 2, &err), PG_OK,
                     "%s", err.msg);
        for (int t = 0; t < 3; t++)
            for (int h = 0; h < 8; h++)
                for (int i = 0; i < 64; i++) {
                    const double want = h / 4 + 1;
                    cr_assert_float_eq(r[at(t, h, 8, 64) + i], want, 1e-14);
                    /* a rotating mode's int4 cache cannot hold the rotated
                     * constant rows exactly (steps of about 1/5 of their range,
                     * back-rotated: about 0.12 rms per element here): the
                     * head's own value within 30%, which no other head's is */
                    const double got = bf16_to_f32(o[at(t, h, 8, 64) + i]);
                    if (rotates)
                        cr_assert(fabs(got - want) < 0.3 * want, "%s token %d head %d: %g",
                                  attn_profile_variant(p), t, h, got);
                    else
                        cr_assert_eq(got, want, "%s token %d head %d", attn_profile_variant(p),
                                     t, h);
                }
    }
    free(r);
    free(o);
    tcase_free(&c);
}

Test(attn, context_tokens_are_attended_causally)
{
    /* Two sequences with context; changing a key beyond a query's causal limit
     * must not change that query's output, changing one inside must. */
    int sq[2] = {2, 3}, skv[2] = {6, 4};
    tcase c;
    tcase_make(&c, 2, sq, skv, 2, 1, 64, 0, 0, 2.0, 12);
    double *r0 = malloc(c.nq * sizeof(double)), *r1 = malloc(c.nq * sizeof(double));
    pg_err err = {0};
    cr_assert_eq(attn_reference(&c.b, c.q, c.k, c.v, r0, 1, &err), PG_OK);
    /* Sequence 0: context 4; its query 0 sees keys 0..4, query 1 sees 0..5. Change key 5. */
    for (int i = 0; i < 64; i++) c.k[at(5, 0, 1, 64) + i] = bf16_from_f32(3.0f);
    cr_assert_eq(attn_reference(&c.b, c.q, c.k, c.v, r1, 1, &err), PG_OK);
    for (int h = 0; h < 2; h++) {
        cr_assert_arr_eq(r0 + at(0, h, 2, 64), r1 + at(0, h, 2, 64), 64 * sizeof(double));
        cr_assert_neq(memcmp(r0 + at(1, h, 2, 64), r1 + at(1, h, 2, 64), 64 * sizeof(double)), 0);
    }
    /* Sequence 1 is untouched. */
    cr_assert_arr_eq(r0 + at(2, 0, 2, 64), r1 + at(2, 0, 2, 64), 3 * 2 * 64 * sizeof(double));
    free(r0);
    free(r1);
    tcase_free(&c);
}

Test(attn, modes_order_by_precision)
{
    int sq[2] = {64, 32}, skv[2] = {64, 96};
    tcase c;
    tcase_make(&c, 2, sq, skv, 8, 2, 64, 0, 1, 2.0, 13);
    double *r = malloc(c.nq * sizeof(double));
    uint16_t *o = malloc(c.nq * 2);
    pg_err err = {0};
    attn_quant_options opt = fp8_default;
    opt.q_scale = 4.5f / FP8_E4M3_MAX * 2; /* roughly amax / 448 for these tensors */
    opt.k_scale = opt.v_scale = 4.5f / FP8_E4M3_MAX;
    cr_assert_eq(attn_reference(&c.b, c.q, c.k, c.v, r, 2, &err), PG_OK);
    cr_assert_eq(attn_variant_bf16(&c.b, c.q, c.k, c.v, o, 2, &err), PG_OK);
    const double e_bf16 = rel_l2_bf16(o, r, c.nq);
    attn_quant_report rep;
    cr_assert_eq(run_variant("fp8kv", &c, &opt, o, &rep, &err), PG_OK, "%s", err.msg);
    const double e_kv = rel_l2_bf16(o, r, c.nq);
    cr_assert_eq(rep.k.n, c.nkv);
    cr_assert_eq(rep.q.n, 0);
    cr_assert_eq(run_variant("fp8qkv", &c, &opt, o, &rep, &err), PG_OK, "%s", err.msg);
    const double e_qkv = rel_l2_bf16(o, r, c.nq);
    cr_assert_eq(rep.q.n, c.nq);
    /* bf16 output rounding alone is ~2^-9 relative; fp8 (3 mantissa bits) is ~2^-5. */
    cr_assert_lt(e_bf16, 4e-3, "bf16 %.3e", e_bf16);
    cr_assert_gt(e_kv, 2 * e_bf16, "fp8kv %.3e vs bf16 %.3e", e_kv, e_bf16);
    cr_assert_gt(e_qkv, e_kv, "fp8qkv %.3e vs fp8kv %.3e", e_qkv, e_kv);
    cr_assert_lt(e_qkv, 0.1);
    free(r);
    free(o);
    tcase_free(&c);
}

Test(attn, bad_shapes_are_refused)
{
    int sq[1] = {4}, skv[1] = {3};
    tcase c;
    tcase_make(&c, 1, sq, skv, 6, 4, 64, 0, 0, 1.0, 14);
    double r[1];
    pg_err err = {0};
    cr_assert_eq(attn_reference(&c.b, c.q, c.k, c.v, r, 1, &err), PG_ERR_SHAPE);
    cr_assert(strstr(err.msg, "multiple") != NULL, "%s", err.msg);
    c.b.hkv = 2;
    pg_err_clear(&err);
    cr_assert_eq(attn_reference(&c.b, c.q, c.k, c.v, r, 1, &err), PG_ERR_SHAPE);
    cr_assert(strstr(err.msg, "seq_kv") != NULL, "%s", err.msg);
    tcase_free(&c);
}

Test(attn, flop_count_counts_attended_pairs)
{
    int sq[2] = {3, 2}, skv[2] = {3, 5};
    int32_t q32[2] = {3, 2}, kv32[2] = {3, 5};
    (void)sq;
    (void)skv;
    attn_batch b = {2, q32, kv32, 2, 1, 64, 0, 0.125f, NULL};
    /* Pairs: seq 0: 1+2+3 = 6; seq 1 (context 3): 4+5 = 9. */
    cr_assert_float_eq(attn_batch_flops(&b), 4.0 * 64 * 2 * 15, 1e-9);
    b.window = 2; /* seq 0: 1+2+2, seq 1: 2+2 */
    cr_assert_float_eq(attn_batch_flops(&b), 4.0 * 64 * 2 * 9, 1e-9);
}
