/*
 * test_hypothesis.c: the scale-plumbing hypotheses (kernels/attn_hypothesis.h)
 * and the per-tensor bf16 mask (attn_quant_options.keep_bf16), by known answers
 * and by identities the definitions state.
 *
 * Known answers use values on the e4m3 grid and power-of-two scales, so that
 * each expected output is exact and computed here from the hypothesis's
 * definition, never copied from the code.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/attn.h"
#include "kernels/attn_hypothesis.h"
#include "kernels/attn_profile.h"
#include "kernels/numerics.h"
#include "base/rng.h"
#include "testutil.h"

#define D 64

static const attn_hypothesis *hyp(const char *name)
{
    const attn_hypothesis *h = attn_hypothesis_find(name);
    cr_assert_not_null(h, "hypothesis %s", name);
    return h;
}

static const attn_profile *profile(const char *name)
{
    const attn_profile *p = NULL;
    pg_err err = {0};
    cr_assert_eq(attn_profile_find(name, &p, &err), PG_OK, "%s", err.msg);
    return p;
}

/* Calibrated scales of L (amax / 448), 16-token pages. */
static attn_quant_options calibrated(const tu_layer *L)
{
    return (attn_quant_options){1, fp8_e4m3_calibrated_scale(bf16_amax(L->q, L->nq)),
                              fp8_e4m3_calibrated_scale(bf16_amax(L->k, L->nkv)),
                              fp8_e4m3_calibrated_scale(bf16_amax(L->v, L->nkv)), 16, 5, 0};
}

/* L's batch as profile p's kernel takes it: without the sinks for a kernel
 * that has none (TurboQuant's decode kernel; test_kv_turboquant holds its
 * refusal). */
static attn_batch batch_for(const tu_layer *L, const attn_profile *p)
{
    attn_batch b = L->b;
    if (!attn_profile_takes_sinks(p)) b.sinks = NULL;
    return b;
}

static uint16_t *run_hyp(const char *name, const tu_layer *L, const attn_quant_options *o)
{
    uint16_t *out = malloc(L->nq * 2);
    pg_err err = {0};
    const attn_batch b = batch_for(L, profile(pg_mode_name(attn_hypothesis_mode(hyp(name)))));
    cr_assert_eq(attn_hypothesis_run(hyp(name), &b, L->q, L->k, L->v, o, out, 2, &err), PG_OK,
                 "%s: %s", name, err.msg);
    return out;
}

static uint16_t *run_prof(const char *name, const tu_layer *L, const attn_quant_options *o)
{
    uint16_t *out = malloc(L->nq * 2);
    pg_err err = {0};
    const attn_batch b = batch_for(L, profile(name));
    cr_assert_eq(attn_variant_run(profile(name), &b, L->q, L->k, L->v, o, out, NULL, 2, &err),
                 PG_OK, "%s: %s", name, err.msg);
    return out;
}

static int same_bits(const uint16_t *a, const uint16_t *b, size_t n)
{
    return memcmp(a, b, n * 2) == 0;
}

/* ------------------------------------------------------------ the table */

Test(hypothesis, table_names_intended_and_sources)
{
    static const char *const want[] = {"intended-bf16",     "intended-fp8kv",  "intended-fp8qkv",
                                       "kv-scales-twice",   "kv-scales-missing",
                                       "k-scale-on-bf16",   "q-scale-on-bf16-q",
                                       "q-cast-unscaled",   "intended-fp8kv_e5m2",
                                       "e5m2-kv-scales-twice", "e5m2-kv-scales-missing",
                                       "intended-fp8kv_pth", "pth-scales-missing",
                                       "pth-scales-twice", "intended-int8kv_pth",
                                       "int8-pth-scales-missing", "int8-pth-scales-twice",
                                       "intended-int4kv_pth", "int4-zero-point-dropped",
                                       "int4-q-unrotated", "int4-output-unrotated",
                                       "int4-pth-scales-missing", "intended-nvfp4kv",
                                       "nvfp4-block-scales-lost", "nvfp4-kv-scales-missing",
                                       "intended-tq_k8v4", "intended-tq_4bit_nc",
                                       "intended-tq_k3v4_nc", "intended-tq_3bit_nc",
                                       "tq-q-unrotated", "tq-key-norms-dropped",
                                       "tq-nc-skipped", "tq-value-min-dropped"};
    cr_assert_eq(attn_hypothesis_count(), sizeof want / sizeof want[0]);
    for (size_t i = 0; i < attn_hypothesis_count(); i++) {
        const attn_hypothesis *h = attn_hypothesis_at(i);
        cr_assert_str_eq(attn_hypothesis_name(h), want[i]);
        cr_assert_eq(attn_hypothesis_is_intended(h), strncmp(want[i], "intended-", 9) == 0);
        cr_assert_lt(strlen(want[i]), ATTN_HYPOTHESIS_NAME_MAX);
        cr_assert_null(strchr(attn_hypothesis_summary(h), '\n'));
        cr_assert_gt(strlen(attn_hypothesis_meaning(h)), 5);
    }
    cr_assert_null(attn_hypothesis_at(attn_hypothesis_count()));
    cr_assert_null(attn_hypothesis_find("kv-scales-thrice"));
    cr_assert_not_null(strstr(attn_hypothesis_summary(hyp("kv-scales-twice")), "47847"));
    cr_assert_not_null(strstr(attn_hypothesis_summary(hyp("k-scale-on-bf16")), "18396"));
    cr_assert_not_null(strstr(attn_hypothesis_summary(hyp("q-cast-unscaled")), "28144"));
}

/* ------------------------------------------- each one is its definition */

Test(hypothesis, intended_ones_and_twice_are_their_profiles_bit_for_bit)
{
    tu_layer L;
    tu_layer_init(&L, 11, 1.5);
    const attn_quant_options o = calibrated(&L);
    static const char *const pairs[][2] = {{"intended-bf16", "bf16"},
                                           {"intended-fp8kv", "fp8kv@fixed"},
                                           {"intended-fp8qkv", "fp8qkv@fa3"},
                                           {"kv-scales-twice", "fp8kv@vllm-24197"}};
    for (size_t i = 0; i < 4; i++) {
        uint16_t *a = run_hyp(pairs[i][0], &L, &o), *b = run_prof(pairs[i][1], &L, &o);
        cr_assert(same_bits(a, b, L.nq), "%s != %s", pairs[i][0], pairs[i][1]);
        free(a);
        free(b);
    }
    /* q-cast-unscaled is the default fp8qkv profile given q_scale 1. */
    attn_quant_options u = o;
    u.q_scale = 1.0f;
    uint16_t *a = run_hyp("q-cast-unscaled", &L, &o), *b = run_prof("fp8qkv@fa3", &L, &u);
    cr_assert(same_bits(a, b, L.nq));
    free(a);
    free(b);
    tu_layer_free(&L);
}

/* One query, keys on the e4m3 grid: the hypotheses' scale placement read off
 * the output. Two keys: k0 . q = a, k1 . q = 0 (q = e_0, k0 = a e_0), so the
 * softmax weight of key 0 is w = 1 / (1 + exp(-a c)), c the logit's scale. */
typedef struct two_keys {
    attn_batch b;
    int32_t sq, skv;
    uint16_t q[D], k[2 * D], v[2 * D];
} two_keys;

static void two_keys_init(two_keys *t, float a, float v0, float v1)
{
    memset(t, 0, sizeof *t);
    t->sq = 1;
    t->skv = 2;
    t->b = (attn_batch){1, &t->sq, &t->skv, 1, 1, D, 0, 0.5f, NULL};
    t->q[0] = bf16_from_f32(1.0f);
    t->k[0] = bf16_from_f32(a);
    for (int i = 0; i < D; i++) {
        t->v[i] = bf16_from_f32(v0);
        t->v[D + i] = bf16_from_f32(v1);
    }
}

static double two_keys_out(const char *name, const two_keys *t, const attn_quant_options *o)
{
    uint16_t out[D];
    pg_err err = {0};
    cr_assert_eq(attn_hypothesis_run(hyp(name), &t->b, t->q, t->k, t->v, o, out, 1, &err), PG_OK,
                 "%s: %s", name, err.msg);
    for (int i = 1; i < D; i++) cr_assert_eq(out[i], out[0]);
    return bf16_to_f32(out[0]);
}

/* bf16 of the two-key softmax average with logit scale c. */
static double expect_two(double a, double c, double v0, double v1)
{
    const double w = 1.0 / (1.0 + exp(-a * c));
    return bf16_to_f32(bf16_from_f32((float)(w * v0 + (1.0 - w) * v1)));
}

Test(hypothesis, known_answers_place_each_scale)
{
    /* a = 2, v0 = 4, v1 = 0; q/k/v scales 4, 2, 1/2: every value on the
     * e4m3 grid after division (k0 / 2 = 1, v0 / (1/2) = 8). */
    two_keys t;
    two_keys_init(&t, 2.0f, 4.0f, 0.0f);
    const attn_quant_options o = {1, 4.0f, 2.0f, 0.5f, 16, 1, 0};
    const double sm = 0.5;
    /* intended: the true values, logit scale sm. */
    cr_assert_float_eq(two_keys_out("intended-fp8kv", &t, &o), expect_two(2, sm, 4, 0), 1e-6);
    /* twice: K dequantized (2) then x k_scale again in bmm1 with q_scale: c =
     * q*k*sm = 4; V dequantized (4) then x v_scale (1/2). */
    cr_assert_float_eq(two_keys_out("kv-scales-twice", &t, &o),
                       expect_two(2, 4.0 * 2.0 * sm, 4.0 * 0.5, 0), 1e-6);
    /* missing: the codes (k0 = 1, v0 = 8) taken as values. */
    cr_assert_float_eq(two_keys_out("kv-scales-missing", &t, &o), expect_two(1, sm, 8, 0), 1e-6);
    /* k-scale-on-bf16: bf16 K (2) with c = k_scale * sm; output x v_scale. */
    cr_assert_float_eq(two_keys_out("k-scale-on-bf16", &t, &o),
                       expect_two(2, 2.0 * sm, 4.0 * 0.5, 0), 1e-6);
    /* q-scale-on-bf16-q: K and V dequantized (exact here), c = q_scale * sm. */
    cr_assert_float_eq(two_keys_out("q-scale-on-bf16-q", &t, &o), expect_two(2, 4.0 * sm, 4, 0),
                       1e-6);
}

Test(hypothesis, at_unit_scales_the_bugs_coincide_with_an_intended_one)
{
    tu_layer L;
    tu_layer_init(&L, 12, 1.0);
    attn_quant_options o = calibrated(&L);
    o.q_scale = o.k_scale = o.v_scale = 1.0f;
    uint16_t *kv = run_hyp("intended-fp8kv", &L, &o), *bf = run_hyp("intended-bf16", &L, &o),
             *qkv = run_hyp("intended-fp8qkv", &L, &o);
    static const char *const like_kv[] = {"kv-scales-twice", "kv-scales-missing",
                                          "q-scale-on-bf16-q"};
    for (size_t i = 0; i < 3; i++) {
        uint16_t *x = run_hyp(like_kv[i], &L, &o);
        cr_assert(same_bits(x, kv, L.nq), "%s", like_kv[i]);
        free(x);
    }
    uint16_t *x = run_hyp("k-scale-on-bf16", &L, &o);
    cr_assert(same_bits(x, bf, L.nq));
    free(x);
    x = run_hyp("q-cast-unscaled", &L, &o);
    cr_assert(same_bits(x, qkv, L.nq));
    free(x);
    /* ... and at calibrated scales every bug differs from every intended one. */
    const attn_quant_options c = calibrated(&L);
    uint16_t *ints[3] = {run_hyp("intended-bf16", &L, &c), run_hyp("intended-fp8kv", &L, &c),
                         run_hyp("intended-fp8qkv", &L, &c)};
    for (size_t i = 0; i < attn_hypothesis_count(); i++) {
        const attn_hypothesis *h = attn_hypothesis_at(i);
        if (attn_hypothesis_is_intended(h)) continue;
        uint16_t *y = run_hyp(attn_hypothesis_name(h), &L, &c);
        for (int j = 0; j < 3; j++)
            cr_assert_not(same_bits(y, ints[j], L.nq), "%s", attn_hypothesis_name(h));
        /* ... its own mode's intended one included */
        for (size_t k = 0; k < attn_hypothesis_count(); k++) {
            const attn_hypothesis *g = attn_hypothesis_at(k);
            if (!attn_hypothesis_is_intended(g) || attn_hypothesis_mode(g) != attn_hypothesis_mode(h))
                continue;
            uint16_t *z = run_hyp(attn_hypothesis_name(g), &L, &c);
            cr_assert_not(same_bits(y, z, L.nq), "%s = %s", attn_hypothesis_name(h),
                          attn_hypothesis_name(g));
            free(z);
        }
        free(y);
    }
    for (int j = 0; j < 3; j++) free(ints[j]);
    free(kv);
    free(bf);
    free(qkv);
    tu_layer_free(&L);
}

Test(hypothesis, refuses_options_that_do_not_quantize)
{
    tu_layer L;
    tu_layer_init(&L, 13, 1.0);
    attn_quant_options o = calibrated(&L);
    uint16_t *out = malloc(L.nq * 2);
    pg_err err = {0};
    o.keep_bf16 = ATTN_TENSOR_K;
    cr_assert_eq(attn_hypothesis_run(hyp("intended-fp8kv"), &L.b, L.q, L.k, L.v, &o, out, 1, &err),
                 PG_ERR_USAGE);
    cr_assert_not_null(strstr(err.msg, "intended-fp8kv"));
    o.keep_bf16 = 0;
    o.k_scale = -1.0f;
    err = (pg_err){0};
    cr_assert_eq(attn_hypothesis_run(hyp("kv-scales-missing"), &L.b, L.q, L.k, L.v, &o, out, 1,
                                     &err),
                 PG_ERR_NUMERIC);
    cr_assert_not_null(strstr(err.msg, "k_scale"));
    free(out);
    tu_layer_free(&L);
}

/* ------------------------------------------------- keep_bf16 (attribution) */

Test(keep_bf16, all_kept_is_no_quantization_and_none_kept_is_the_profile)
{
    tu_layer L;
    tu_layer_init(&L, 14, 2.0);
    const attn_quant_options o = calibrated(&L);
    attn_quant_options none = o, all = o;
    none.quantize = 0;
    all.keep_bf16 = ATTN_TENSORS_ALL;
    for (size_t i = 0; i < attn_profile_count(); i++) {
        const char *name = attn_profile_variant(attn_profile_at(i));
        uint16_t *a = run_prof(name, &L, &all), *b = run_prof(name, &L, &none);
        cr_assert(same_bits(a, b, L.nq), "%s: keep all != quantize 0", name);
        free(a);
        free(b);
    }
    tu_layer_free(&L);
}

/* rel_l2 of a against b (bf16 arrays). */
static double rel(const uint16_t *a, const uint16_t *b, size_t n)
{
    double e = 0, z = 0;
    for (size_t i = 0; i < n; i++) {
        const double x = bf16_to_f32(a[i]), y = bf16_to_f32(b[i]);
        e += (x - y) * (x - y);
        z += y * y;
    }
    return sqrt(e / z);
}

Test(keep_bf16, each_tensor_alone_moves_the_output)
{
    tu_layer L;
    tu_layer_init(&L, 15, 2.0);
    const attn_quant_options o = calibrated(&L);
    attn_quant_options none = o;
    none.quantize = 0;
    uint16_t *base = run_prof("fp8qkv@fa3", &L, &none), *joint = run_prof("fp8qkv@fa3", &L, &o);
    const unsigned t[4] = {ATTN_TENSOR_Q, ATTN_TENSOR_K, ATTN_TENSOR_V, ATTN_TENSOR_P};
    for (int i = 0; i < 4; i++) {
        attn_quant_options only = o;
        only.keep_bf16 = ATTN_TENSORS_ALL & ~t[i];
        uint16_t *x = run_prof("fp8qkv@fa3", &L, &only);
        const double r = rel(x, base, L.nq);
        /* one tensor's e4m3 rounding: far above bf16's 2^-9, below the joint */
        cr_assert_gt(r, 1e-3, "tensor %d alone: %g", i, r);
        cr_assert_lt(r, rel(joint, base, L.nq), "tensor %d alone: %g", i, r);
        free(x);
    }
    /* fp8kv@fixed quantizes neither Q nor P: keeping them changes nothing. */
    attn_quant_options kv = o;
    kv.keep_bf16 = ATTN_TENSOR_Q | ATTN_TENSOR_P;
    uint16_t *a = run_prof("fp8kv@fixed", &L, &kv), *b = run_prof("fp8kv@fixed", &L, &o);
    cr_assert(same_bits(a, b, L.nq), "fp8kv quantizes neither Q nor P");
    free(a);
    free(b);
    attn_quant_options bad = o;
    bad.keep_bf16 = 16;
    uint16_t *out = malloc(L.nq * 2);
    pg_err err = {0};
    cr_assert_eq(attn_variant_run(profile("fp8kv"), &L.b, L.q, L.k, L.v, &bad, out, NULL, 1, &err),
                 PG_ERR_USAGE);
    cr_assert_not_null(strstr(err.msg, "keep_bf16"));
    free(out);
    free(base);
    free(joint);
    tu_layer_free(&L);
}
