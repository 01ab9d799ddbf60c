/*
 * test_kv_formats.c: the mode table (base/mode.h) and the two KV formats it
 * added (issue #29): vLLM's fp8_e5m2 cache (fp8kv_e5m2@fixed) and its
 * fp8_per_token_head cache (fp8kv_per_token_head@triton), by known answers.
 *
 * Expected values are derived here from the rules the profiles cite
 * (kernels/attn_profile.c), with inputs chosen so that the answer is exact
 * (power-of-two scales, equal scores), or computed by brute force (the
 * nearest e5m2 code over all 256), never copied from the code's output.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/mode.h"
#include "base/variant.h"
#include "db/attribution_store.h"
#include "db/store.h"
#include "harness/advise.h"
#include "kernels/attn.h"
#include "kernels/attn_backend.h"
#include "kernels/attn_hypothesis.h"
#include "kernels/attn_profile.h"
#include "kernels/kv_cache.h"
#include "kernels/numerics.h"
#include "testutil.h"

#define D 64
/* Room for a path in the scratch directory. */
#define PATH_MAX_T 512
/* e4m3's and e5m2's largest finite values (OCP spec), written out. */
#define E4M3_MAX 448.0
#define E5M2_MAX 57344.0
/* vLLM's per-token-head floor on the scale (its tl.maximum with 1e-6). */
#define PTH_MIN_SCALE 1e-6f
/* Bytes of one fp32 scale, and bits of bf16, fp8, int8 and int4 elements
 * (known answers). */
#define F32_BYTES 4
#define BF16_BITS 16
#define FP8_BITS 8
#define INT8_BITS 8
#define INT4_BITS 4
#define INT3_BITS 3
#define F16_BYTES 2

TestSuite(kv_formats, .init = tu_scratch_setup, .fini = tu_scratch_teardown);

/* ------------------------------------------------------------ the table */

Test(kv_formats, the_mode_table_says_what_each_mode_is)
{
    struct want {
        const char *name, *vllm;
        unsigned quantized;
        pg_number_format kv;
        pg_scale_granularity scales;
        pg_kv_consumption use;
        int elem_bits, scale_bytes, baseline;
        /* V where it differs from K (TurboQuant): format, bits, row bytes; the slot's
         * alignment and norm correction */
        pg_number_format v;
        int v_bits, v_scale_bytes, align, nc;
    } want[] = {
        {"bf16", "auto", 0, PG_FORMAT_BF16, PG_SCALES_NONE, PG_KV_READ_AS_BF16, BF16_BITS, 0, 1,
         PG_FORMAT_BF16, BF16_BITS, 0, 0, 0},
        {"fp8kv", "fp8", PG_TENSOR_K | PG_TENSOR_V, PG_FORMAT_E4M3, PG_SCALES_PER_TENSOR,
         PG_KV_DEQUANT_TO_BF16_COPY, FP8_BITS, 0, 0, PG_FORMAT_E4M3, FP8_BITS, 0, 0, 0},
        {"fp8qkv", "fp8", PG_TENSOR_Q | PG_TENSOR_K | PG_TENSOR_V | PG_TENSOR_P, PG_FORMAT_E4M3,
         PG_SCALES_PER_TENSOR, PG_KV_FP8_MATMULS, FP8_BITS, 0, 0, PG_FORMAT_E4M3, FP8_BITS, 0, 0,
         0},
        {"fp8kv_e5m2", "fp8_e5m2", PG_TENSOR_K | PG_TENSOR_V, PG_FORMAT_E5M2,
         PG_SCALES_PER_TENSOR, PG_KV_DEQUANT_TO_BF16_COPY, FP8_BITS, 0, 0, PG_FORMAT_E5M2,
         FP8_BITS, 0, 0, 0},
        {"fp8kv_per_token_head", "fp8_per_token_head", PG_TENSOR_K | PG_TENSOR_V,
         PG_FORMAT_E4M3, PG_SCALES_PER_TOKEN_HEAD, PG_KV_DEQUANT_IN_REGISTERS, FP8_BITS,
         F32_BYTES, 0, PG_FORMAT_E4M3, FP8_BITS, F32_BYTES, 0, 0},
        {"int8kv_per_token_head", "int8_per_token_head", PG_TENSOR_K | PG_TENSOR_V,
         PG_FORMAT_INT8, PG_SCALES_PER_TOKEN_HEAD, PG_KV_DEQUANT_IN_REGISTERS, INT8_BITS,
         F32_BYTES, 0, PG_FORMAT_INT8, INT8_BITS, F32_BYTES, 0, 0},
        {"int4kv_per_token_head", "int4_per_token_head", PG_TENSOR_K | PG_TENSOR_V,
         PG_FORMAT_INT4_ZP, PG_SCALES_PER_TOKEN_HEAD, PG_KV_DEQUANT_IN_REGISTERS, INT4_BITS,
         F32_BYTES, 0, PG_FORMAT_INT4_ZP, INT4_BITS, F32_BYTES, 0, 0},
        {"nvfp4kv", "nvfp4", PG_TENSOR_Q | PG_TENSOR_K | PG_TENSOR_V | PG_TENSOR_P,
         PG_FORMAT_NVFP4, PG_SCALES_PER_BLOCK_AND_TENSOR, PG_KV_FP8_MATMULS, INT4_BITS, 0, 0,
         PG_FORMAT_NVFP4, INT4_BITS, 0, 0, 0},
        /* TurboQuant (config.py TQ_PRESETS): fp16 norm 2 bytes, fp16 scale + min 4 */
        {"turboquant_k8v4", "turboquant_k8v4", PG_TENSOR_K | PG_TENSOR_V, PG_FORMAT_E4M3,
         PG_SCALES_PER_TOKEN_HEAD, PG_KV_CENTROID_SCORES, FP8_BITS, 0, 0, PG_FORMAT_UINT_MINMAX,
         INT4_BITS, 2 * F16_BYTES, 2, 0},
        {"turboquant_4bit_nc", "turboquant_4bit_nc", PG_TENSOR_K | PG_TENSOR_V,
         PG_FORMAT_LLOYD_MAX, PG_SCALES_PER_TOKEN_HEAD, PG_KV_CENTROID_SCORES, INT4_BITS,
         F16_BYTES, 0, PG_FORMAT_UINT_MINMAX, INT4_BITS, 2 * F16_BYTES, 2, 1},
        {"turboquant_k3v4_nc", "turboquant_k3v4_nc", PG_TENSOR_K | PG_TENSOR_V,
         PG_FORMAT_LLOYD_MAX, PG_SCALES_PER_TOKEN_HEAD, PG_KV_CENTROID_SCORES, INT3_BITS,
         F16_BYTES, 0, PG_FORMAT_UINT_MINMAX, INT4_BITS, 2 * F16_BYTES, 2, 1},
        {"turboquant_3bit_nc", "turboquant_3bit_nc", PG_TENSOR_K | PG_TENSOR_V,
         PG_FORMAT_LLOYD_MAX, PG_SCALES_PER_TOKEN_HEAD, PG_KV_CENTROID_SCORES, INT3_BITS,
         F16_BYTES, 0, PG_FORMAT_UINT_MINMAX, INT3_BITS, 2 * F16_BYTES, 2, 1},
    };
    cr_assert_eq(PG_MODE_COUNT, sizeof want / sizeof want[0]);
    cr_expect_eq(pg_mode_baseline(), PG_MODE_BF16);
    for (int m = 0; m < PG_MODE_COUNT; m++) {
        const pg_mode_traits *t = pg_mode_traits_of((pg_mode)m);
        cr_expect_str_eq(t->name, want[m].name);
        cr_expect_str_eq(t->vllm_kv_cache_dtype, want[m].vllm, "%s", t->name);
        cr_expect_eq(t->quantized, want[m].quantized, "%s", t->name);
        cr_expect_eq(t->k_format, want[m].kv, "%s", t->name);
        cr_expect_eq(t->kv_scales, want[m].scales, "%s", t->name);
        cr_expect_eq(t->kv_consumption, want[m].use, "%s", t->name);
        cr_expect_eq(t->k_element_bits, want[m].elem_bits, "%s", t->name);
        cr_expect_eq(t->k_row_scale_bytes, want[m].scale_bytes, "%s", t->name);
        cr_expect_eq(t->is_baseline, want[m].baseline, "%s", t->name);
        cr_expect_eq(t->v_format, want[m].v, "%s", t->name);
        cr_expect_eq(t->v_element_bits, want[m].v_bits, "%s", t->name);
        cr_expect_eq(t->v_row_scale_bytes, want[m].v_scale_bytes, "%s", t->name);
        cr_expect_eq(t->kv_slot_align_bytes, want[m].align, "%s", t->name);
        cr_expect_eq(t->kv_norm_correction, want[m].nc, "%s", t->name);
        pg_mode found;
        pg_err err = {0};
        cr_expect_eq(pg_mode_find(want[m].name, &found, &err), PG_OK, "%s", err.msg);
        cr_expect_eq(found, (pg_mode)m);
    }
    pg_mode found;
    pg_err err = {0};
    cr_expect_eq(pg_mode_find("fp8_e5m2", &found, &err), PG_ERR_USAGE);
    cr_expect(strstr(err.msg, "fp8kv_per_token_head") != NULL, "the choices: %s", err.msg);
    /* each new mode's bare name is its one profile */
    variant_profile_id id;
    cr_expect_eq(variant_profile_find("fp8kv_e5m2", &id, &err), PG_OK);
    cr_expect_str_eq(variant_profile_name(id), "fp8kv_e5m2@fixed");
    cr_expect_eq(variant_profile_find("fp8kv_per_token_head", &id, &err), PG_OK);
    cr_expect_str_eq(variant_profile_name(id), "fp8kv_per_token_head@triton");
    cr_expect_eq(variant_profile_find("int8kv_per_token_head", &id, &err), PG_OK);
    cr_expect_str_eq(variant_profile_name(id), "int8kv_per_token_head@triton");
    cr_expect_eq(variant_profile_find("int4kv_per_token_head", &id, &err), PG_OK);
    cr_expect_str_eq(variant_profile_name(id), "int4kv_per_token_head@triton");
    /* only int4 rotates by the seeded transform, TurboQuant's Lloyd-Max keys by H / sqrt(d) */
    for (int m = 0; m < PG_MODE_COUNT; m++)
        cr_expect_eq(pg_mode_traits_of((pg_mode)m)->kv_rotation,
                     m == PG_MODE_INT4KV_PER_TOKEN_HEAD                          ? PG_ROTATION_RHT
                     : pg_mode_traits_of((pg_mode)m)->k_format == PG_FORMAT_LLOYD_MAX
                         ? PG_ROTATION_HADAMARD_K
                         : PG_ROTATION_NONE,
                     "%s", pg_mode_name((pg_mode)m));
    cr_expect_eq(variant_profile_find("turboquant_3bit_nc", &id, &err), PG_OK);
    cr_expect_str_eq(variant_profile_name(id), "turboquant_3bit_nc@triton");
}

/* ------------------------------------------------------------ e5m2 */

/* The nearest finite e5m2 code to y by brute force over the magnitude codes
 * of y's sign, ties to the even code, |y| past the largest saturating to it
 * (__NV_SATFINITE); NaN gives 0x7F. */
static uint8_t nearest_e5m2(float y)
{
    if (y != y) return FP8_NAN_BITS;
    const double mag = fabs((double)y);
    if (mag >= E5M2_MAX) return (uint8_t)(0x7B | (signbit(y) ? 0x80 : 0));
    uint8_t best = 0;
    double best_d = INFINITY;
    for (int c = 0; c <= 0x7B; c++) { /* 0x7B: the largest finite, 57344 */
        const double dd = fabs((double)fp8_e5m2_decode((uint8_t)c) - mag);
        if (dd < best_d || (dd == best_d && (c & 1) == 0)) {
            best = (uint8_t)c;
            best_d = dd;
        }
    }
    return (uint8_t)(best | (signbit(y) ? 0x80 : 0));
}

Test(kv_formats, the_e5m2_cache_write_divides_by_the_scale_and_saturates, .timeout = 120)
{
    /* Every finite bf16 value, with a scale that is no power of two: the code
     * is the nearest e5m2 to fp32(x / scale), and the saturation counter
     * counts |x / scale| > 57344. */
    const float scale = 0.3f;
    uint64_t want_sat = 0, n = 0;
    fp8_quant_stats st = {0};
    for (uint32_t h = 0; h < 0x10000u; h++) {
        const uint16_t x = (uint16_t)h;
        const float xf = bf16_to_f32(x);
        if (!isfinite(xf)) continue;
        uint8_t code;
        fp8_e5m2_quantize_bf16(&x, 1, scale, &code, &st);
        const float y = xf / scale;
        cr_assert_eq(code, nearest_e5m2(y), "x %a: code 0x%02x, want 0x%02x", (double)xf, code,
                     nearest_e5m2(y));
        want_sat += fabsf(y) > (float)E5M2_MAX;
        n++;
    }
    cr_expect_eq(st.n, n);
    cr_expect_eq(st.n_saturated, want_sat);
    cr_expect_gt(want_sat, 0);
}

/* One sequence of n tokens, one head of D, q/k/v filled by the caller. */
typedef struct kcase {
    attn_batch b;
    int32_t sq, skv;
    float sink;
    uint16_t q[D], *k, *v;
} kcase;

static void kcase_init(kcase *c, int n, int with_sink)
{
    memset(c, 0, sizeof *c);
    c->sq = 1;
    c->skv = n;
    c->k = calloc((size_t)n * D, 2);
    c->v = calloc((size_t)n * D, 2);
    c->b = (attn_batch){1, &c->sq, &c->skv, 1, 1, D, 0, 0.125f, with_sink ? &c->sink : NULL};
}

static void kcase_free(kcase *c)
{
    free(c->k);
    free(c->v);
}

static const attn_profile *profile(const char *name)
{
    const attn_profile *p = NULL;
    pg_err err = {0};
    cr_assert_eq(attn_profile_find(name, &p, &err), PG_OK, "%s", err.msg);
    return p;
}

static void run(const char *name, const kcase *c, const attn_quant_options *o, uint16_t *out)
{
    pg_err err = {0};
    cr_assert_eq(attn_variant_run(profile(name), &c->b, c->q, c->k, c->v, o, out, NULL, 1, &err),
                 PG_OK, "%s: %s", name, err.msg);
}

Test(kv_formats, one_key_through_the_e5m2_cache_is_its_rounded_value_times_the_scale)
{
    /* O = bf16(e5m2(v / v_scale) * v_scale) for one key: with v_scale 0.75
     * (no power of two) the e5m2 rounding shows; e4m3 (fp8kv) rounds
     * differently, so the two modes' outputs differ. */
    kcase c;
    kcase_init(&c, 1, 0);
    for (int i = 0; i < D; i++) {
        c.q[i] = bf16_from_f32(0.25f * (float)(i % 3));
        c.k[i] = bf16_from_f32(0.5f);
        c.v[i] = bf16_from_f32(0.37f * (float)(i - 31));
    }
    const attn_quant_options o = {1, 1.0f, 1.25f, 0.75f, 16, 3, 0};
    uint16_t e5[D], e4[D];
    run("fp8kv_e5m2", &c, &o, e5);
    run("fp8kv", &c, &o, e4);
    int differ = 0;
    for (int i = 0; i < D; i++) {
        const float y = bf16_to_f32(c.v[i]) / 0.75f;
        const uint16_t want = bf16_from_f32(fp8_e5m2_decode(nearest_e5m2(y)) * 0.75f);
        cr_assert_eq(e5[i], want, "dim %d: %a for %a", i, (double)bf16_to_f32(e5[i]),
                     (double)bf16_to_f32(want));
        differ += e5[i] != e4[i];
    }
    cr_expect_gt(differ, 0, "e5m2 and e4m3 round alike everywhere: the format is not used");
    kcase_free(&c);
}

/* ------------------------------------------------------------ per token head */

Test(kv_formats, the_per_token_head_scale_is_each_rows_absmax_over_448)
{
    /* Two KV heads of different absmax, two tokens: each (token, head) row has
     * its own scale fp32(absmax / 448), floored at 1e-6 (the zero row). */
    static const int32_t sq[1] = {2};
    const attn_batch b = {1, sq, sq, 2, 2, D, 0, 0.125f, NULL};
    uint16_t k[2 * 2 * D], v[2 * 2 * D];
    const float amax[2][2] = {{3.5f, 1.0f}, {0.0f, 200.0f}}; /* [token][head] */
    for (int t = 0; t < 2; t++)
        for (int h = 0; h < 2; h++)
            for (int i = 0; i < D; i++) {
                const float frac = (float)(i + 1) / (float)D; /* the last is 1: the absmax */
                k[(t * 2 + h) * D + i] = bf16_from_f32(amax[t][h] * frac * (i % 2 ? -1 : 1));
                v[(t * 2 + h) * D + i] = bf16_from_f32(0.5f * amax[t][h] * frac);
            }
    kv_paged c;
    fp8_quant_stats ks = {0}, vs = {0};
    pg_err err = {0};
    cr_assert_eq(kv_paged_write_per_token_head(&b, k, v, PG_FORMAT_E4M3, 7, 16, &c, &ks, &vs, &err), PG_OK, "%s",
                 err.msg);
    cr_assert_not_null(c.scales);
    for (int t = 0; t < 2; t++)
        for (int h = 0; h < 2; h++) {
            const int64_t page = c.block_table[0];
            float want_k = amax[t][h] / (float)E4M3_MAX, want_v = 0.5f * amax[t][h] / (float)E4M3_MAX;
            if (want_k < PTH_MIN_SCALE) want_k = PTH_MIN_SCALE;
            if (want_v < PTH_MIN_SCALE) want_v = PTH_MIN_SCALE;
            cr_expect_eq(*kv_paged_scale_at(&c, page, 0, h, t), want_k, "k token %d head %d", t, h);
            cr_expect_eq(*kv_paged_scale_at(&c, page, 1, h, t), want_v, "v token %d head %d", t, h);
            /* the codes: e4m3(x * fp32(1 / scale)) */
            const uint8_t *kc = kv_paged_row(&c, page, 0, h, t);
            const float inv = 1.0f / want_k;
            for (int i = 0; i < D; i++)
                cr_assert_eq(kc[i], fp8_e4m3_encode(bf16_to_f32(k[(t * 2 + h) * D + i]) * inv),
                             "token %d head %d dim %d", t, h, i);
        }
    /* 3.5 / 448 = 2^-7 exactly: the row's absmax (-3.5) encodes to -448 exactly (0xFE) */
    cr_expect_eq(((const uint8_t *)kv_paged_row(&c, c.block_table[0], 0, 0, 0))[D - 1], 0xFE);
    cr_expect_eq(ks.n, (uint64_t)(4 * D));
    kv_paged_free(&c);
}

/* The one-key case of the per-token-head tests, run through variant into
 * out: one key of 0.25s, a q of small multiples of 1/8, and a V row of
 * (i - 31) / 32, whose absmax 1.0 (at i = 63) makes v_scale 1 / the
 * format's max. */
static void one_key_run(const char *variant, kcase *c, uint16_t *out)
{
    kcase_init(c, 1, 0);
    for (int i = 0; i < D; i++) {
        c->q[i] = bf16_from_f32(0.125f * (float)(i % 4));
        c->k[i] = bf16_from_f32(0.25f);
        c->v[i] = bf16_from_f32((float)(i - 31) / 32.0f);
    }
    const attn_quant_options o = {1, 1.0f, 1.0f, 1.0f, 16, 3, 0};
    run(variant, c, &o, out);
}

Test(kv_formats, one_key_per_token_head_gives_bf16_of_bf16_p_times_scale_times_code)
{
    /* One key, no sink: m = S, P = exp(0) = 1, L = 1 * exp(-inf) + 1 = 1, so
     * O = bf16(bf16(1 * v_scale) * code). With the V row's absmax 1.0 the
     * scale fp32(1 / 448) is no bf16: bf16(P * v_scale) rounds it, which a
     * kernel scaling V (not P) would not. */
    kcase c;
    uint16_t out[D];
    one_key_run("fp8kv_per_token_head", &c, out);
    const float vs = 1.0f / (float)E4M3_MAX;
    const float p_v = bf16_to_f32(bf16_from_f32(1.0f * vs));
    cr_assert_neq(p_v, vs, "the case needs a scale that bf16 rounds");
    int differs_from_v_scaled = 0;
    for (int i = 0; i < D; i++) {
        const float code = fp8_e4m3_decode(fp8_e4m3_encode(bf16_to_f32(c.v[i]) * (1.0f / vs)));
        const uint16_t want = bf16_from_f32(p_v * code);
        cr_assert_eq(out[i], want, "dim %d: %a for %a", i, (double)bf16_to_f32(out[i]),
                     (double)bf16_to_f32(want));
        differs_from_v_scaled += want != bf16_from_f32(code * vs);
    }
    cr_expect_gt(differs_from_v_scaled, 0, "the case cannot tell P x v_scale from V x v_scale");
    kcase_free(&c);
}

Test(kv_formats, equal_scores_over_two_tiles_average_the_values_and_a_sink_is_one_more_key)
{
    /* 33 keys with one K row (equal scores S) fill Triton's 32-key tile and
     * one more: P = 1 everywhere, alpha = 1 at the second tile, so L = 32 + 1
     * and O = bf16(sum v / 33). A sink equal to S adds exactly one to L. The
     * V rows are the scale's multiples (absmax 3.5: scale 2^-7, exact). */
    enum { N = 33 };
    for (int with_sink = 0; with_sink < 2; with_sink++) {
        kcase c;
        kcase_init(&c, N, with_sink);
        for (int i = 0; i < D; i++) c.q[i] = bf16_from_f32(i == 0 ? 1.0f : 0.0f);
        double sum[D] = {0};
        for (int t = 0; t < N; t++)
            for (int i = 0; i < D; i++) {
                c.k[t * D + i] = bf16_from_f32(i == 0 ? 2.0f : 0.0f);
                /* e4m3 values / 128, the row's absmax 448 / 128 = 3.5 (at i = 0):
                 * the scale is 3.5 / 448 = 2^-7 exactly and every code exact */
                const uint8_t code = i == 0 ? 0x7E : (uint8_t)(((t * 7 + i * 3) % 0x7E) |
                                                               ((t + i) % 2 ? 0x80 : 0));
                const float x = fp8_e4m3_decode(code) / 128.0f;
                c.v[t * D + i] = bf16_from_f32(x);
                sum[i] += x;
            }
        /* Every key has the same S = q . code * fp32(sm_scale * k_scale): K's
         * row absmax 2 gives k_scale fp32(2 / 448), its code e4m3(2 * fp32(1 /
         * k_scale)); the sink is set to that S, so every P is exp(0) = 1. */
        const float ks = 2.0f / (float)E4M3_MAX;
        const float k_code = fp8_e4m3_decode(fp8_e4m3_encode(2.0f * (1.0f / ks)));
        c.sink = k_code * (0.125f * ks);
        const attn_quant_options o = {1, 1.0f, 1.0f, 1.0f, 16, 3, 0};
        uint16_t out[D];
        run("fp8kv_per_token_head", &c, &o, out);
        const double l = N + with_sink;
        for (int i = 0; i < D; i++) {
            /* the sum of exact multiples of 2^-7 below 2^24 units is exact in fp32 */
            const uint16_t want = bf16_from_f32((float)sum[i] / (float)l);
            cr_assert_eq(out[i], want, "sink %d dim %d: %a for %a", with_sink, i,
                         (double)bf16_to_f32(out[i]), (double)bf16_to_f32(want));
        }
        kcase_free(&c);
    }
}

/* Each per-token-head format's hypotheses on one layer: the intended one is
 * its profile bit for bit; missing and doubled row scales are neither it
 * nor each other; the int8 cache is not the e4m3 one. */
Test(kv_formats, the_per_token_head_hypotheses_miss_and_double_the_row_scales)
{
    static const struct {
        const char *profile, *intended, *missing, *twice;
    } fmt[2] = {
        {"fp8kv_per_token_head@triton", "intended-fp8kv_pth", "pth-scales-missing",
         "pth-scales-twice"},
        {"int8kv_per_token_head@triton", "intended-int8kv_pth", "int8-pth-scales-missing",
         "int8-pth-scales-twice"},
    };
    tu_layer L;
    tu_layer_init(&L, 11, 1.0);
    const attn_quant_options o = {1, 1.0f, 1.0f, 1.0f, 16, 5, 0};
    uint16_t *out[2][4];
    pg_err err = {0};
    for (int f = 0; f < 2; f++) {
        for (int j = 0; j < 4; j++) out[f][j] = malloc(L.nq * 2);
        const char *hyp[3] = {fmt[f].intended, fmt[f].missing, fmt[f].twice};
        for (int j = 0; j < 3; j++)
            cr_assert_eq(attn_hypothesis_run(attn_hypothesis_find(hyp[j]), &L.b, L.q, L.k, L.v, &o,
                                             out[f][j], 2, &err), PG_OK, "%s: %s", hyp[j], err.msg);
        cr_assert_eq(attn_variant_run(profile(fmt[f].profile), &L.b, L.q, L.k, L.v, &o,
                                      out[f][3], NULL, 2, &err), PG_OK, "%s", err.msg);
        cr_expect_eq(memcmp(out[f][0], out[f][3], L.nq * 2), 0, "%s: intended is the profile",
                     fmt[f].profile);
        cr_expect_neq(memcmp(out[f][0], out[f][1], L.nq * 2), 0, "%s", fmt[f].missing);
        cr_expect_neq(memcmp(out[f][0], out[f][2], L.nq * 2), 0, "%s", fmt[f].twice);
        cr_expect_neq(memcmp(out[f][1], out[f][2], L.nq * 2), 0, "%s", fmt[f].twice);
    }
    cr_expect_neq(memcmp(out[0][0], out[1][0], L.nq * 2), 0, "int8 codes are not e4m3 codes");
    for (int f = 0; f < 2; f++)
        for (int j = 0; j < 4; j++) free(out[f][j]);
    tu_layer_free(&L);
}

Test(kv_formats, quantize_0_keeps_the_new_formats_equal_to_bf16_bit_for_bit)
{
    tu_layer L;
    tu_layer_init(&L, 3, 1.0);
    const attn_quant_options off = {0, 1.0f, 1.0f, 1.0f, 16, 5, 0};
    uint16_t *ref = malloc(L.nq * 2), *out = malloc(L.nq * 2);
    pg_err err = {0};
    cr_assert_eq(attn_variant_bf16(&L.b, L.q, L.k, L.v, ref, 2, &err), PG_OK, "%s", err.msg);
    /* the e5m2 dequant path is bf16 attention: equal. The Triton row is not
     * the final-max bf16 rule (tiles, exp2): only the e5m2 one is equal. */
    cr_assert_eq(attn_variant_run(profile("fp8kv_e5m2"), &L.b, L.q, L.k, L.v, &off, out, NULL, 2,
                                  &err), PG_OK, "%s", err.msg);
    cr_expect_eq(memcmp(ref, out, L.nq * 2), 0);
    free(ref);
    free(out);
    tu_layer_free(&L);
}

/* ------------------------------------------------------------ int8 per token head */

/* int8 codes by two's complement, written out: code b is b below 0x80,
 * else b - 256. */
#define INT8_NEG_FROM 0x80
#define INT8_CODES 256
/* int8_per_token_head's clamp (vLLM _per_token_head_core.py _INT8_QUANT_MAX). */
#define INT8_QMAX 127
/* A row's absmax 127 / 16: scale = 127/16 / 127 = 2^-4 exactly, 1 / scale
 * = 16 exactly, so y = 16 x with no rounding anywhere. */
#define INT8_KA_SHIFT 16.0f

Test(kv_formats, every_int8_code_decodes_to_its_twos_complement_value)
{
    for (int b = 0; b < INT8_CODES; b++) {
        const float want = b < INT8_NEG_FROM ? (float)b : (float)(b - INT8_CODES);
        cr_assert_eq(int8_decode((uint8_t)b), want, "code 0x%02x", b);
        cr_assert_eq(fp_codec_of(PG_FORMAT_INT8)->decode((uint8_t)b), want);
    }
    cr_expect_eq(fp_codec_of(PG_FORMAT_INT8)->bytes, (size_t)(INT8_BITS / 8));
    cr_expect_null(fp_codec_of(PG_FORMAT_INT8)->quantize_bf16, "no per-tensor int8 cache");
}

Test(kv_formats, the_int8_cache_write_truncates_every_code_toward_zero)
{
    /* Row: the absmax 127/16 first, then for every code c in -127 .. 127 the
     * value c/16 (y = c exactly) and, inside +-126, c/16 + sign(c)/32 (y =
     * c +- 0.5): both must store c. Rounding half away would store c +- 1 for the second,
     * rounding half to even would for every odd c. Then y = +-0.75 and
     * +-0.25: nonzero values truncated to 0, the underflows. */
    enum { N = 1 + 255 + 252 + 4 };
    uint16_t x[N];
    int want[N];
    size_t n = 0;
    x[n] = bf16_from_f32((float)INT8_QMAX / INT8_KA_SHIFT);
    want[n++] = INT8_QMAX;
    int half_way = 0;
    for (int c = -INT8_QMAX; c <= INT8_QMAX; c++) {
        x[n] = bf16_from_f32((float)c / INT8_KA_SHIFT);
        want[n++] = c;
        if (c == 0 || c == INT8_QMAX || c == -INT8_QMAX) continue; /* +-127.5: a new absmax */
        const float y = (float)c + (c > 0 ? 0.5f : -0.5f);
        x[n] = bf16_from_f32(y / INT8_KA_SHIFT);
        cr_assert_eq(bf16_to_f32(x[n]) * INT8_KA_SHIFT, y, "c %d: the case needs y exact", c);
        want[n++] = c;
        half_way++;
    }
    static const float small[4] = {0.75f, -0.75f, 0.25f, -0.25f};
    for (int i = 0; i < 4; i++) {
        x[n] = bf16_from_f32(small[i] / INT8_KA_SHIFT);
        want[n++] = 0;
    }
    cr_assert_eq(n, (size_t)N);
    uint8_t codes[N];
    fp8_quant_stats st = {0};
    const float scale = int8_quantize_bf16_per_token_head(x, n, codes, &st);
    cr_assert_eq(scale, 1.0f / INT8_KA_SHIFT);
    for (size_t i = 0; i < n; i++)
        cr_assert_eq(int8_decode(codes[i]), (float)want[i], "value %zu (%a): code %g, want %d",
                     i, (double)bf16_to_f32(x[i]), (double)int8_decode(codes[i]), want[i]);
    cr_expect_eq(half_way, 2 * (INT8_QMAX - 1));
    cr_expect_eq(st.n, (uint64_t)n);
    cr_expect_eq(st.n_saturated, 0);
    cr_expect_eq(st.n_nonzero, (uint64_t)n - 1);  /* c = 0 once */
    cr_expect_eq(st.n_underflow, 4);
    /* an all-zero row: the scale's floor, codes 0, no underflow */
    const uint16_t zeros[4] = {0};
    fp8_quant_stats z = {0};
    cr_expect_eq(int8_quantize_bf16_per_token_head(zeros, 4, codes, &z), PTH_MIN_SCALE);
    cr_expect_eq(z.n_underflow, 0);
    cr_expect_eq(codes[0], 0);
}

Test(kv_formats, the_int8_per_token_head_cache_keeps_each_rows_scale_and_marks_unwritten_slots)
{
    /* Two tokens, two KV heads, block 16: each row's scale fp32(absmax /
     * 127) and codes trunc(x * fp32(1 / scale)); the 14 unwritten slots of
     * the page hold 0x80 codes and NaN scales. */
    static const int32_t sq[1] = {2};
    const attn_batch b = {1, sq, sq, 2, 2, D, 0, 0.125f, NULL};
    uint16_t k[2 * 2 * D], v[2 * 2 * D];
    const float amax[2][2] = {{3.0f, 0.5f}, {100.0f, 0.0f}}; /* [token][head] */
    for (int t = 0; t < 2; t++)
        for (int h = 0; h < 2; h++)
            for (int i = 0; i < D; i++) {
                const float frac = (float)(i + 1) / (float)D;
                k[(t * 2 + h) * D + i] = bf16_from_f32(amax[t][h] * frac * (i % 3 ? 1 : -1));
                v[(t * 2 + h) * D + i] = bf16_from_f32(0.25f * amax[t][h] * frac);
            }
    kv_paged c;
    fp8_quant_stats ks = {0}, vs = {0};
    pg_err err = {0};
    cr_assert_eq(kv_paged_write_per_token_head(&b, k, v, PG_FORMAT_INT8, 7, 16, &c, &ks, &vs,
                                               &err), PG_OK, "%s", err.msg);
    const int64_t page = c.block_table[0];
    for (int t = 0; t < 2; t++)
        for (int h = 0; h < 2; h++) {
            float want_k = amax[t][h] / (float)INT8_QMAX;
            if (want_k < PTH_MIN_SCALE) want_k = PTH_MIN_SCALE;
            cr_expect_eq(*kv_paged_scale_at(&c, page, 0, h, t), want_k, "token %d head %d", t, h);
            const uint8_t *kc = kv_paged_row(&c, page, 0, h, t);
            const float inv = 1.0f / want_k;
            for (int i = 0; i < D; i++) {
                float y = bf16_to_f32(k[(t * 2 + h) * D + i]) * inv;
                if (y > INT8_QMAX) y = INT8_QMAX;
                const double want = y < 0 ? ceil(y) : floor(y);
                cr_assert_eq(int8_decode(kc[i]), want, "token %d head %d dim %d", t, h, i);
            }
        }
    for (int slot = 2; slot < 16; slot++)
        for (int h = 0; h < 2; h++) {
            cr_expect(isnan(*kv_paged_scale_at(&c, page, 1, h, slot)), "slot %d", slot);
            cr_expect_eq(((const uint8_t *)kv_paged_row(&c, page, 1, h, slot))[0], 0x80);
        }
    cr_expect_eq(ks.n, (uint64_t)(4 * D));
    /* every nonzero |y| >= 127 / 64 here: none truncates to 0 */
    cr_expect_eq(ks.n_underflow, 0);
    cr_expect_eq(ks.n_nonzero, (uint64_t)(3 * D));  /* the zero row counts none */
    kv_paged_free(&c);
}

Test(kv_formats, one_key_int8_per_token_head_gives_bf16_of_bf16_p_times_scale_times_truncated_code)
{
    /* As the fp8 case: one key, P = 1, O = bf16(bf16(v_scale) * code), now
     * with code = trunc(v * fp32(1 / v_scale)) and v_scale = fp32(1 / 127)
     * (the V row's absmax 1.0), which bf16 rounds. Some codes differ from
     * the rounded ones, so the case tells truncation from rounding. */
    kcase c;
    uint16_t out[D];
    one_key_run("int8kv_per_token_head", &c, out);
    const float vs = 1.0f / (float)INT8_QMAX;
    const float p_v = bf16_to_f32(bf16_from_f32(1.0f * vs));
    cr_assert_neq(p_v, vs, "the case needs a scale that bf16 rounds");
    int differs_from_rounded = 0;
    for (int i = 0; i < D; i++) {
        const float y = bf16_to_f32(c.v[i]) * (1.0f / vs);
        const float code = y < 0 ? ceilf(y) : floorf(y);
        const uint16_t want = bf16_from_f32(p_v * code);
        cr_assert_eq(out[i], want, "dim %d: %a for %a", i, (double)bf16_to_f32(out[i]),
                     (double)bf16_to_f32(want));
        differs_from_rounded += want != bf16_from_f32(p_v * roundf(y));
    }
    cr_expect_gt(differs_from_rounded, 0, "the case cannot tell truncation from rounding");
    kcase_free(&c);
}

/* ------------------------------------------------------------ the other paths */

Test(kv_formats, the_stored_quant_rows_fold_only_the_e4m3_per_tensor_caches)
{
    cr_expect(attn_quant_fold_takes_kv(profile("fp8kv")));
    cr_expect(attn_quant_fold_takes_kv(profile("fp8qkv")));
    cr_expect(attn_quant_fold_takes_q(profile("fp8qkv")));
    cr_expect(!attn_quant_fold_takes_q(profile("fp8kv")));
    cr_expect(!attn_quant_fold_takes_kv(profile("bf16")));
    cr_expect(!attn_quant_fold_takes_kv(profile("fp8kv_e5m2")));
    cr_expect(!attn_quant_fold_takes_kv(profile("fp8kv_per_token_head")));
}

Test(kv_formats, advise_counts_the_per_token_head_scales_carved_from_the_page)
{
    /* Two full-attention layers of hkv 8, d 64, both left in fp8: per token
     * 2 x 8 x 64 bf16 elements against 2 x 8 x (64 codes + 4 scale bytes). */
    enum { HKV = 8, DD = 64 };
    const advise_shape s[2] = {{"c", 0, HKV, DD, 0}, {"c", 1, HKV, DD, 0}};
    layer_metric_row rows[2];
    for (int l = 0; l < 2; l++) {
        rows[l] = (layer_metric_row){.capture = "c", .layer = l,
                                     .variant = "fp8kv_per_token_head@triton"};
        for (int m = 0; m < PG_METRIC_VALUE_COUNT; m++)
            pg_metric_set_value(&rows[l].v, (pg_metric)m, 0.01);
    }
    const advise_request rq = {"fp8kv_per_token_head@triton", PG_METRIC_REL_L2, 0.5};
    advise_result r;
    pg_err err = {0};
    cr_assert_eq(advise_compute(&rq, rows, 2, s, 2, &r, &err), PG_OK, "%s", err.msg);
    cr_expect_eq(r.n_keep, 0);
    cr_expect_eq(r.kv_bytes_bf16, 2 * (2 * HKV * DD * BF16_BITS / 8));
    cr_expect_eq(r.kv_bytes_mixed, 2 * (2 * HKV * (DD * FP8_BITS / 8 + F32_BYTES)));
    /* against an all-fp8 (per-tensor e4m3) cache the scales cost 4 of 64 bytes more */
    cr_expect_eq(r.kv_bytes_fp8, 2 * (2 * HKV * DD * FP8_BITS / 8));
    cr_expect_float_eq(r.kv_bytes_saved_vs_fp8_fraction, -(double)F32_BYTES / DD, 1e-12);
    advise_result_free(&r);
    /* the e5m2 cache has no inline scales: half the bf16 bytes */
    for (int l = 0; l < 2; l++) rows[l].variant = "fp8kv_e5m2@fixed";
    const advise_request rq5 = {"fp8kv_e5m2@fixed", PG_METRIC_REL_L2, 0.5};
    cr_assert_eq(advise_compute(&rq5, rows, 2, s, 2, &r, &err), PG_OK, "%s", err.msg);
    cr_expect_eq(r.kv_bytes_mixed, 2 * (2 * HKV * DD * FP8_BITS / 8));
    advise_result_free(&r);
    /* int4: two codes per byte and a 4-byte scale (its zero point inside) per row:
     * 32 + 4 bytes per row against fp8's 64 */
    for (int l = 0; l < 2; l++) rows[l].variant = "int4kv_per_token_head@triton";
    const advise_request rq4 = {"int4kv_per_token_head@triton", PG_METRIC_REL_L2, 0.5};
    cr_assert_eq(advise_compute(&rq4, rows, 2, s, 2, &r, &err), PG_OK, "%s", err.msg);
    cr_expect_eq(r.kv_bytes_mixed, 2 * (2 * HKV * (DD * INT4_BITS / 8 + F32_BYTES)));
    cr_expect_float_eq(r.kv_bytes_saved_vs_fp8_fraction,
                       1.0 - (double)(DD / 2 + F32_BYTES) / DD, 1e-12);
    cr_expect_float_eq(r.kv_bytes_saved_fraction,
                       1.0 - (double)(DD / 2 + F32_BYTES) / (2 * DD), 1e-12);
    advise_result_free(&r);
    /* nvfp4: two codes per byte and one e4m3 byte per 16 elements: 32 + 4 per row */
    for (int l = 0; l < 2; l++) rows[l].variant = "nvfp4kv@trtllm-gen";
    const advise_request rqn = {"nvfp4kv@trtllm-gen", PG_METRIC_REL_L2, 0.5};
    cr_assert_eq(advise_compute(&rqn, rows, 2, s, 2, &r, &err), PG_OK, "%s", err.msg);
    cr_expect_eq(r.kv_bytes_mixed, 2 * (2 * HKV * (DD / 2 + DD / 16)));
    advise_result_free(&r);
}

Test(kv_formats, a_sweep_stores_the_new_formats_and_says_where_they_ran, .timeout = 120)
{
    char cap[PATH_MAX_T], db[PATH_MAX_T];
    snprintf(cap, sizeof cap, "%s/c.safetensors", tu_dir);
    snprintf(db, sizeof db, "%s/p.db", tu_dir);
    char *out = NULL;
    cr_assert_eq(tu_run_precgatef(&out, "synth -o '%s' --preset gpt-oss-120b --layers 1 --seqs 1 "
                                        "--seq-len 64 --context 16", cap), 0, "%s", out);
    free(out);
    cr_assert_eq(tu_run_precgatef(&out, "run --capture '%s' --db '%s' --backend cpu --attribute "
                                        "--variants bf16,fp8kv_e5m2,fp8kv_per_token_head,"
                                        "int8kv_per_token_head "
                                        "--no-progress", cap, db), 0, "%s", out);
    free(out);
    sqlite3 *h = tu_db_open("p.db");
    cr_expect_eq(tu_sql_int(h, "SELECT count(DISTINCT variant) FROM layer_metrics WHERE head = -1"),
                 4);
    cr_expect_eq(tu_sql_int(h, "SELECT count(*) FROM layer_metrics WHERE head = -1 AND variant = "
                               "'int8kv_per_token_head@triton' AND rel_l2 > 0"), 1);
    cr_expect_eq(tu_sql_int(h, "SELECT count(*) FROM layer_metrics WHERE head = -1 AND variant = "
                               "'fp8kv_per_token_head@triton' AND rel_l2 > 0"), 1);
    /* attribution: K and V of each new format, and its floor (none) and joint (all) */
    cr_expect_eq(tu_sql_int(h, "SELECT count(*) FROM attribution WHERE variant = "
                               "'fp8kv_e5m2@fixed'"), 4);
    cr_expect_gt(tu_sql_double(h, "SELECT rel_l2 FROM attribution WHERE variant = "
                                  "'fp8kv_per_token_head@triton' AND tensor = 'k'"), 0.0);
    /* no stored quant rows: they describe the e4m3 per-tensor cache */
    cr_expect_eq(tu_sql_int(h, "SELECT count(*) FROM quant_stats"), 0);
    /* the format statistics: K and V of each of the three quantizing modes */
    cr_expect_eq(tu_sql_int(h, "SELECT count(*) FROM kv_format_stats"), 6);
    cr_expect_eq(tu_sql_int(h, "SELECT count(*) FROM kv_format_stats WHERE mode = "
                               "'int8kv_per_token_head' AND format = 'int8' AND n_scales > 0 "
                               "AND codes_used > 100 AND code_bits = 8"), 2);
    cr_expect_eq(tu_sql_int(h, "SELECT count(*) FROM kv_format_stats WHERE mode = "
                               "'fp8kv_e5m2' AND n_scales = 0 AND scale_min IS NULL"), 2);
    sqlite3_close(h);
    /* advise names the mode's own --kv-cache-dtype and counts its inline scales */
    cr_assert_eq(tu_run_precgatef(&out, "advise --run 1 --db '%s' --variant "
                                        "int8kv_per_token_head --budget 1", db), 0, "%s", out);
    cr_expect(strstr(out, "every layer can keep the int8_per_token_head cache") != NULL, "%s",
              out);
    cr_expect(strstr(out, "8 (K, int8 codes) and 8 (V, int8 codes) in the int8_per_token_head "
                          "cache, and per token and KV head 4 bytes beside K's codes and 4 beside "
                          "V's") != NULL, "%s", out);
    cr_expect(strstr(out, "worst layer left in int8_per_token_head: layer 0") != NULL, "%s", out);
    free(out);
    cr_assert_eq(tu_run_precgatef(&out, "advise --run 1 --db '%s' --variant fp8kv_e5m2 "
                                        "--budget 0", db), 0, "%s", out);
    cr_expect(strstr(out, "vLLM: --kv-cache-dtype fp8_e5m2 --kv-cache-dtype-skip-layers") != NULL,
              "%s", out);
    free(out);
}

/* ------------------------------------------------ saturation of a row scale */

Test(kv_formats, a_row_scale_never_saturates_its_own_absmax)
{
    /* Rows whose absmax x lands just past the format's max, x * fp32(1 / fp32(x
     * / max)) > max by rounding alone: the code is the max either way, so it is
     * no saturation (the counter once counted them: 0.3% of fp8 values and
     * 0.2% of int8 values on the synthetic gpt-oss capture). */
    int found_fp8 = 0, found_int8 = 0;
    for (uint32_t h = 0x3F80u; h < 0x4780u; h++) {
        const float x = bf16_to_f32((uint16_t)h);
        const float s8 = x / FP8_E4M3_MAX, si = x / INT8_PER_TOKEN_HEAD_QUANT_MAX;
        const uint16_t row[2] = {(uint16_t)h, bf16_from_f32(-x * 0.5f)};
        uint8_t codes[2];
        fp8_quant_stats st = {0};
        if (x * (1.0f / s8) > FP8_E4M3_MAX) {
            found_fp8++;
            fp8_e4m3_quantize_bf16_per_token_head(row, 2, codes, &st);
            cr_assert_eq(st.n_saturated, 0, "x %a", (double)x);
            cr_assert_eq(fp8_e4m3_decode(codes[0]), FP8_E4M3_MAX);
        }
        if (x * (1.0f / si) > INT8_PER_TOKEN_HEAD_QUANT_MAX) {
            found_int8++;
            memset(&st, 0, sizeof st);
            int8_quantize_bf16_per_token_head(row, 2, codes, &st);
            cr_assert_eq(st.n_saturated, 0, "x %a", (double)x);
            cr_assert_eq(int8_decode(codes[0]), INT8_PER_TOKEN_HEAD_QUANT_MAX);
        }
    }
    cr_assert_gt(found_fp8, 0, "no bf16 absmax rounds past 448: the test is empty");
    cr_assert_gt(found_int8, 0, "no bf16 absmax rounds past 127: the test is empty");
}
