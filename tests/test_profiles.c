/*
 * test_profiles.c: the kernel profiles (kernels/attn_profile.h) and the
 * Hopper fp8 MMA rule (kernels/fp8_mma.h), by known answers.
 *
 * Every expected value is computed here by hand or in fp64 from the rule the
 * profile states (attn_profile.c), never copied from the code's output. The
 * inputs are chosen on the e4m3 grid with scales 1.0 unless a test says
 * otherwise, so quantization does not blur the answer.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/attn.h"
#include "kernels/attn_profile.h"
#include "kernels/fp8_mma.h"
#include "kernels/numerics.h"
#include "base/rng.h"

/* kBlockN for head dim 64 (FORK = vllm-project/flash-attention @ 617264c1,
 * UP = Dao-AILab/flash-attention @ 0251105a; hopper/tile_size.h
 * tile_size_fwd_sm90, fp8 rows): what @fa3 and @fa3-1level must use. */
#define FORK_BLOCK_N_D64 128
#define UP_BLOCK_N_D64 160
/* TensorRT-LLM fmha_v2 sm90 e4m3: kv_loop_step 256 for head sizes up to 128
 * (NVIDIA/TensorRT-LLM cpp/kernels/fmha_v2/setup.py
 * enumerate_qgmma_flash_warpspec_kernels). */
#define TRTLLM_BLOCK_N_D64 256
/* FlashInfer's FA3 fp8 batch prefill with paged KV, head dim 64: CTA_KV 128
 * (flashinfer include/flashinfer/attention/hopper/quantization/prefill_sm90.cuh). */
#define FLASHINFER_BLOCK_N_D64 128
/* One bf16 ulp relative (8 significand bits): the output's own rounding. */
#define BF16_REL 0x1p-8
#define D 64

/* A single-sequence, single-head case built by hand: n keys, one query (the
 * last token), rows of D elements. */
typedef struct hcase {
    attn_batch b;
    int32_t sq, skv;
    float sink;
    uint16_t q[D], *k, *v;
} hcase;

static void hcase_init(hcase *c, int n_keys, int with_sink)
{
    memset(c, 0, sizeof *c);
    c->sq = 1;
    c->skv = n_keys;
    c->k = calloc((size_t)n_keys * D, sizeof(uint16_t));
    c->v = calloc((size_t)n_keys * D, sizeof(uint16_t));
    c->b = (attn_batch){1, &c->sq, &c->skv, 1, 1, D, 0, 0.125f, with_sink ? &c->sink : NULL};
}

static void hcase_free(hcase *c)
{
    free(c->k);
    free(c->v);
}

static void set(uint16_t *row, int i, float x) { row[i] = bf16_from_f32(x); }

/* Unit scales, 16-token pages. */
static const attn_quant_options unit_opt = {1, 1.0f, 1.0f, 1.0f, 16, 3, 0};

static const attn_profile *profile(const char *name)
{
    const attn_profile *p = NULL;
    pg_err err = {0};
    cr_assert_eq(attn_profile_find(name, &p, &err), PG_OK, "%s", err.msg);
    return p;
}

/* Runs variant name on c; out [D]. */
static void run(const char *name, const hcase *c, const attn_quant_options *opt, uint16_t *out)
{
    pg_err err = {0};
    cr_assert_eq(attn_variant_run(profile(name), &c->b, c->q, c->k, c->v, opt, out, NULL, 1, &err),
                 PG_OK, "%s: %s", name, err.msg);
}

static double out_at(const uint16_t *o, int i) { return bf16_to_f32(o[i]); }

/* The exact value of x rounded to e4m3 (the rounding the rules name). */
static double e4m3(double x) { return fp8_e4m3_decode(fp8_e4m3_encode((float)x)); }

/* What the tiled profiles' rules say, for head dim 64 (attn_profile.c). */
typedef struct tiled_profile {
    const char *name;
    int block_n;     /* keys per tile */
    int ascending;   /* tiles visited first to last (else last to first) */
    int two_level;   /* each tile's P.V from 0, then an fp32 add */
    double p_scale;  /* P's scale before the e4m3 cast: 2^8 or 448 */
    int sinks;       /* the kernel takes attention sinks */
} tiled_profile;

static const tiled_profile tiled[] = {
    {"fp8qkv@fa3", FORK_BLOCK_N_D64, 0, 1, 256.0, 1},
    {"fp8qkv@fa3-1level", UP_BLOCK_N_D64, 0, 0, 256.0, 1},
    {"fp8qkv@trtllm", TRTLLM_BLOCK_N_D64, 1, 0, 256.0, 1},
    {"fp8qkv@flashinfer-fa3", FLASHINFER_BLOCK_N_D64, 0, 0, FP8_E4M3_MAX, 0},
};
#define N_TILED (sizeof tiled / sizeof tiled[0])

/* ------------------------------------------------------------ the table */

Test(profiles, table_order_names_and_defaults)
{
    static const char *const want[] = {
        "bf16",          "fp8kv@fixed",           "fp8kv@vllm-24197", "fp8qkv@fa3",
        "fp8qkv@fa3-1level", "fp8qkv@trtllm", "fp8qkv@flashinfer-fa3", "fp8qkv@ideal",
        "fp8kv_e5m2@fixed", "fp8kv_per_token_head@triton", "int8kv_per_token_head@triton",
        "int4kv_per_token_head@triton", "nvfp4kv@trtllm-gen", "turboquant_k8v4@triton",
        "turboquant_4bit_nc@triton", "turboquant_k3v4_nc@triton", "turboquant_3bit_nc@triton"};
    cr_assert_eq(attn_profile_count(), sizeof want / sizeof want[0]);
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        cr_assert_str_eq(attn_profile_variant(attn_profile_at(i)), want[i]);
    cr_assert_null(attn_profile_at(attn_profile_count()));
    cr_assert_str_eq(attn_profile_variant(profile("fp8kv")), "fp8kv@fixed");
    cr_assert_str_eq(attn_profile_variant(profile("fp8qkv")), "fp8qkv@fa3");
    cr_assert_str_eq(attn_profile_variant(profile("fp8kv_e5m2")), "fp8kv_e5m2@fixed");
    cr_assert_str_eq(attn_profile_variant(profile("fp8kv_per_token_head")),
                     "fp8kv_per_token_head@triton");
    cr_assert_str_eq(attn_profile_variant(profile("int8kv_per_token_head")),
                     "int8kv_per_token_head@triton");
    cr_assert_str_eq(attn_profile_variant(profile("bf16")), "bf16");
    cr_assert_eq(attn_profile_mode(profile("fp8kv@vllm-24197")), PG_MODE_FP8KV);
    cr_assert_eq(attn_profile_mode(profile("fp8qkv@ideal")), PG_MODE_FP8QKV);
    cr_assert(attn_profile_is_default(profile("fp8qkv@fa3")));
    cr_assert_not(attn_profile_is_default(profile("fp8qkv@ideal")));
    /* One default per mode. */
    int defaults[PG_MODE_COUNT] = {0};
    for (size_t i = 0; i < attn_profile_count(); i++) {
        const attn_profile *p = attn_profile_at(i);
        defaults[attn_profile_mode(p)] += attn_profile_is_default(p);
        cr_assert_gt(strlen(attn_profile_summary(p)), 10);
        cr_assert_null(strchr(attn_profile_summary(p), '\n'), "summary is one line");
        const char *r = attn_profile_rules(p);
        cr_assert_gt(strlen(r), 40);
        cr_assert_eq(r[strlen(r) - 1], '\n');
    }
    for (int m = 0; m < 3; m++) cr_assert_eq(defaults[m], 1, "mode %d", m);
    /* The rules cite their sources. */
    cr_assert_not_null(strstr(attn_profile_rules(profile("fp8qkv@fa3")), "hopper/softmax.h"));
    cr_assert_not_null(strstr(attn_profile_rules(profile("fp8qkv@fa3")), "hopper/utils.h"));
    cr_assert_not_null(strstr(attn_profile_rules(profile("fp8qkv@fa3")), "tile_size.h"));
    cr_assert_not_null(strstr(attn_profile_rules(profile("fp8kv@vllm-24197")), "flashinfer.py"));
}

Test(profiles, unknown_names_are_refused_with_the_choices)
{
    static const char *const bad[] = {"fp8qkv@nope", "bf16@fa3", "fp8", "", "fp8kv@", "FP8KV"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const attn_profile *p = NULL;
        pg_err err = {0};
        cr_assert_eq(attn_profile_find(bad[i], &p, &err), PG_ERR_USAGE, "'%s'", bad[i]);
        char quoted[64];
        snprintf(quoted, sizeof quoted, "'%s'", bad[i]);
        cr_assert_not_null(strstr(err.msg, quoted), "%s", err.msg);
        cr_assert_not_null(strstr(err.msg, "fp8qkv@fa3-1level"), "%s", err.msg);
        cr_assert_not_null(strstr(err.msg, "fp8kv@vllm-24197"), "%s", err.msg);
    }
}

/* ------------------------------------------------------------ fp8 MMA rule
 * (known answers: tests/test_fp8_mma.c) */

/* A random e4m3 value with a wide exponent spread (never NaN). */
static float rand_e4m3(uint64_t *s)
{
    uint8_t b;
    do b = (uint8_t)rng_splitmix64(s);
    while ((b & 0x7F) == 0x7F);
    return fp8_e4m3_decode(b);
}

Test(fp8_mma, the_batched_form_is_the_scalar_rule)
{
    /* The CPU core calls fp8_mma_e4m3_accumulate_many; it must be the same rule. */
    uint64_t s = 99;
    enum { N = 32, M = 70 };
    float a[N], b[N * M], acc[M], bcol[N];
    for (int rep = 0; rep < 200; rep++) {
        const int n = 1 + (int)(rng_splitmix64(&s) % N);
        for (int k = 0; k < n; k++) a[k] = rand_e4m3(&s);
        for (int i = 0; i < n * M; i++) b[i] = rand_e4m3(&s);
        for (int j = 0; j < M; j++)
            acc[j] = (rng_splitmix64(&s) & 3) ? ldexpf((float)(int32_t)rng_splitmix64(&s),
                                                        (int)(rng_splitmix64(&s) % 40) - 50)
                                              : 0.0f;
        float want[M];
        for (int j = 0; j < M; j++) {
            for (int k = 0; k < n; k++) bcol[k] = b[k * M + j];
            want[j] = fp8_mma_e4m3_accumulate(a, bcol, n, acc[j]);
        }
        fp8_mma_e4m3_accumulate_many(a, n, b, M, M, acc);
        for (int j = 0; j < M; j++) cr_assert_eq(acc[j], want[j], "rep %d j %d", rep, j);
    }
}

/* ------------------------------------------------------------ Q quantization */

Test(profiles, vllm_quantizes_q_by_multiplying_with_the_inverse_scale)
{
    /* 10.9375 / 7 = 1.5625 exactly: an e4m3 tie between 1.5 and 1.625, to even:
     * 1.5. 10.9375 * fp32(1/7) = 1.5625000119 (fp32(1/7) is above 1/7): 1.625. */
    const uint16_t x = bf16_from_f32(10.9375f);
    uint8_t by_div, by_inv;
    fp8_e4m3_quantize_bf16(&x, 1, 7.0f, &by_div, NULL);
    fp8_e4m3_quantize_bf16_inverse(&x, 1, 7.0f, &by_inv, NULL);
    cr_assert_eq(fp8_e4m3_decode(by_div), 1.5f);
    cr_assert_eq(fp8_e4m3_decode(by_inv), 1.625f);

    /* In attention: q = (10.9375, 0, ...), q_scale 7; key A = (1, 0, ...), key
     * B = 0; v_A = (1, 0, ...), v_B = (0, 1, ...). The FA3 profiles see q8 =
     * 1.625 (raw S_A = 1.625); @ideal (x / scale) sees q8 = 1.5. */
    hcase c;
    hcase_init(&c, 2, 0);
    c.q[0] = x;
    set(c.k, 0, 1.0f);
    set(c.v, 0, 1.0f);
    set(c.v + D, 1, 1.0f);
    attn_quant_options opt = unit_opt;
    opt.q_scale = 7.0f;
    uint16_t o[D];
    const double s = (double)(float)(0.125 * M_LOG2E) * 7.0; /* scale_log2 with q_descale 7 */
    const double b = exp2(-1.625 * s);                        /* key B against key A */
    run("fp8qkv@fa3", &c, &opt, o);
    cr_assert_float_eq(out_at(o, 0), 1.0 / (1.0 + b), BF16_REL, "%g", out_at(o, 0));
    cr_assert_float_eq(out_at(o, 1), e4m3(256.0 * b) / 256.0 / (1.0 + b), BF16_REL);
    run("fp8qkv@ideal", &c, &opt, o);
    const double bi = exp(-1.5 * 0.125 * 7.0); /* S_A = q8 * k * sm_scale * q_scale */
    cr_assert_float_eq(out_at(o, 0), 1.0 / (1.0 + bi), BF16_REL, "%g", out_at(o, 0));
    cr_assert_gt(fabs(bi / b - 1.0), 0.1, "the two quantizers must be told apart");
    hcase_free(&c);
}

/* ------------------------------------------------------------ one key */

/* Whether p's mode keeps K and V on the e4m3 grid with per-tensor scales
 * (bf16 too): the one-key identity below holds for those; the e5m2 and
 * per-token-head formats have their own known answers (test_kv_formats.c). */
static int e4m3_per_tensor(const attn_profile *p)
{
    const pg_mode_traits *t = pg_mode_traits_of(attn_profile_mode(p));
    return t->k_format == PG_FORMAT_BF16 ||
           (t->k_format == PG_FORMAT_E4M3 && t->kv_scales == PG_SCALES_PER_TENSOR);
}

Test(profiles, one_key_returns_its_value_row)
{
    /* O = P v / l with one key: v itself for every profile (the row is on the
     * e4m3 grid and the scales are 1, so no quantization moves it). */
    hcase c;
    hcase_init(&c, 1, 0);
    for (int i = 0; i < D; i++) {
        set(c.q, i, (float)((i % 5) - 2));
        set(c.k, i, 0.5f * (float)((i % 3) - 1));
        set(c.v, i, (float)e4m3(0.37 * (i - 31)));
    }
    uint16_t o[D];
    for (size_t p = 0; p < attn_profile_count(); p++) {
        if (!e4m3_per_tensor(attn_profile_at(p))) continue;
        const char *name = attn_profile_variant(attn_profile_at(p));
        run(name, &c, &unit_opt, o);
        for (int i = 0; i < D; i++)
            cr_assert_eq(o[i], c.v[i], "%s dim %d: %g for %g", name, i, out_at(o, i),
                         (double)bf16_to_f32(c.v[i]));
    }
    /* With scales: v / v_scale is still on the e4m3 grid (v_scale = 2), so every
     * profile that applies v_scale once returns v again; vllm-24197 applies it
     * twice and returns 2 v. q_scale and k_scale cannot show with one key. */
    attn_quant_options scaled = unit_opt;
    scaled.q_scale = 0.5f;
    scaled.k_scale = 0.25f;
    scaled.v_scale = 2.0f;
    for (size_t p = 0; p < attn_profile_count(); p++) {
        if (!e4m3_per_tensor(attn_profile_at(p))) continue;
        const char *name = attn_profile_variant(attn_profile_at(p));
        const double times = strcmp(name, "fp8kv@vllm-24197") == 0 ? 2.0 : 1.0;
        run(name, &c, &scaled, o);
        for (int i = 0; i < D; i++)
            cr_assert_eq(out_at(o, i), times * bf16_to_f32(c.v[i]), "%s dim %d: %g for %g", name,
                         i, out_at(o, i), times * bf16_to_f32(c.v[i]));
    }
    hcase_free(&c);
}

/* ------------------------------------------------------------ P below 2^-9 */

Test(profiles, probabilities_below_2_to_minus_9_survive_only_with_p_scaled)
{
    /* Key 0: S = 8 (q0 k0 = 8 * 8, sm_scale 1/8); keys 1..8: S = 8 * 0.375 / 8
     * = 0.375, so each weighs exp(-7.625) = 2^-11.0006 of key 0. Unscaled
     * e4m3 rounds 2^-11 to 0 (the smallest subnormal is 2^-9); x 2^8 it is
     * about 2^-3, kept. V: key 0 is (0, 1, 0 ...), keys 1..8 (1, 0, ...). */
    enum { SMALL = 8 };
    hcase c;
    hcase_init(&c, 1 + SMALL, 0);
    set(c.q, 0, 8.0f);
    set(c.k, 0, 8.0f);
    set(c.v, 1, 1.0f);
    for (int t = 1; t <= SMALL; t++) {
        set(c.k + t * D, 0, 0.375f);
        set(c.v + t * D, 0, 1.0f);
    }
    const double w = exp(-7.625); /* weight of a small key against key 0 */
    cr_assert_lt(w, 0x1p-10);     /* below half the smallest e4m3 subnormal */
    const double l = 1.0 + SMALL * w;

    uint16_t o[D];
    /* @ideal: P = e4m3(w) = 0, so dim 0 is exactly 0 and dim 1 is 1 / l. */
    run("fp8qkv@ideal", &c, &unit_opt, o);
    cr_assert_eq(out_at(o, 0), 0.0);
    cr_assert_float_eq(out_at(o, 1), 1.0 / l, BF16_REL);
    /* The tiled profiles: P = e4m3(p_scale w) (one tile: 9 keys), l over the
     * unrounded P; the sum is exact here (few, coarse terms). */
    cr_assert_eq(e4m3(256.0 * w), 0.125);
    cr_assert_eq(e4m3(448.0 * w), 0.21875);
    for (size_t i = 0; i < N_TILED; i++) {
        const double ps = tiled[i].p_scale, want0 = SMALL * e4m3(ps * w) / (ps * l);
        run(tiled[i].name, &c, &unit_opt, o);
        cr_assert_float_eq(out_at(o, 0), want0, want0 * BF16_REL, "%s: %g for %g", tiled[i].name,
                           out_at(o, 0), want0);
        cr_assert_float_eq(out_at(o, 1), 1.0 / l, BF16_REL, "%s", tiled[i].name);
    }
    /* bf16 keeps them too (bf16 has the range): dim 0 is 8 w / l. */
    run("bf16", &c, &unit_opt, o);
    cr_assert_float_eq(out_at(o, 0), SMALL * w / l, SMALL * w / l * 2 * BF16_REL);
    hcase_free(&c);
}

/* ------------------------------------------------------------ sinks */

Test(profiles, a_sink_that_takes_most_of_the_mass)
{
    /* One key with S = 0 (q = 0), sink logit ln(700): the key weighs 1/701.
     * Final-max profiles: m = sink, P = round(exp(-sink)) = round(1/700).
     *   e4m3: 1/700 = 0.731 * 2^-9 rounds up to 2^-9: @ideal gives 1.4 x O.
     *   bf16: 1/700 to 8 bits: O within 2^-8 of v/701.
     * FA3: the sink is not in the max (hopper/softmax.h finalize_aux): m = 0,
     *   P = 2^8 exactly, l = 2^8 + 2^8 * 700: O = v / 701 up to rounding. With
     *   the sink in the max, P would be e4m3(256/700 = 0.366) = 0.375: 2.5% off. */
    hcase c;
    hcase_init(&c, 1, 1);
    c.sink = (float)log(700.0);
    for (int i = 0; i < D; i++) {
        set(c.k, i, 1.0f);
        set(c.v, i, (float)e4m3(1.0 + 0.25 * (i % 8)));
    }
    const double e = exp(-(double)c.sink); /* 1/700 up to the sink's fp32 rounding */
    uint16_t o[D];
    run("fp8qkv@ideal", &c, &unit_opt, o);
    cr_assert_eq(e4m3(e), 0x1p-9);
    for (int i = 0; i < D; i++) {
        const double v = bf16_to_f32(c.v[i]), want = 0x1p-9 * v / (1.0 + e);
        cr_assert_float_eq(out_at(o, i), want, want * BF16_REL, "ideal dim %d", i);
    }
    static const char *const others[] = {"bf16", "fp8kv@fixed", "fp8qkv@fa3", "fp8qkv@fa3-1level",
                                         "fp8qkv@trtllm"};
    for (size_t p = 0; p < sizeof others / sizeof others[0]; p++) {
        run(others[p], &c, &unit_opt, o);
        for (int i = 0; i < D; i++) {
            const double v = bf16_to_f32(c.v[i]), want = e * v / (1.0 + e);
            cr_assert_float_eq(out_at(o, i), want, want * 2 * BF16_REL, "%s dim %d: %g for %g",
                               others[p], i, out_at(o, i), want);
        }
    }
    /* A kernel without sinks refuses the layer rather than drop its sink:
     * unsupported (a failed run, exit 1), not a usage error. */
    for (size_t p = 0; p < N_TILED; p++) {
        if (tiled[p].sinks) continue;
        pg_err err = {0};
        cr_assert_eq(attn_variant_run(profile(tiled[p].name), &c.b, c.q, c.k, c.v, &unit_opt, o,
                                      NULL, 1, &err),
                     PG_ERR_UNSUPPORTED, "%s", tiled[p].name);
        cr_assert_not_null(strstr(err.msg, tiled[p].name), "%s", err.msg);
        cr_assert_not_null(strstr(err.msg, "sinks"), "%s", err.msg);
    }
    hcase_free(&c);
}

/* ------------------------------------------------------------ accumulation */

Test(profiles, qk_products_below_the_13_bit_grid_vanish_in_the_fa3_profiles)
{
    /* Two keys, q = (448 at dim 0, 1 at dim 32): q.k_A = 448 * 448 = 200704 (2^17.6),
     * q.k_B = 200704 + 8. The wgmma chain over d (two k = 32 steps) aligns
     * the second step's product 8 to the accumulator's grid q = 2^(17 - 13) =
     * 16: trunc(8 / 16) = 0, both scores equal and O = (v_A + v_B) / 2.
     * Exact sums (@ideal) keep the 8: S differs by 8 / 8 = 1, weights 1 : e. */
    hcase c;
    hcase_init(&c, 2, 0);
    set(c.q, 0, 448.0f);
    set(c.q, 32, 1.0f);
    set(c.k, 0, 448.0f);
    set(c.k + D, 0, 448.0f);
    set(c.k + D, 32, 8.0f);
    set(c.v, 0, 1.0f);     /* v_A = (1, 0, ...) */
    set(c.v + D, 1, 1.0f); /* v_B = (0, 1, ...) */
    uint16_t o[D];
    for (size_t p = 0; p < N_TILED; p++) {
        run(tiled[p].name, &c, &unit_opt, o);
        cr_assert_eq(out_at(o, 0), 0.5, "%s: %g", tiled[p].name, out_at(o, 0));
        cr_assert_eq(out_at(o, 1), 0.5, "%s: %g", tiled[p].name, out_at(o, 1));
    }
    run("fp8qkv@ideal", &c, &unit_opt, o);
    const double pa = e4m3(exp(-1.0)), l = exp(-1.0) + 1.0; /* P_A = e4m3(0.368) = 0.375 */
    cr_assert_float_eq(out_at(o, 0), pa / l, pa / l * BF16_REL);
    cr_assert_float_eq(out_at(o, 1), 1.0 / l, BF16_REL);
    hcase_free(&c);
}

Test(profiles, two_level_accumulation_keeps_what_one_level_drops)
{
    /* q = 0: every S is 0, every P is p_scale exactly, l = p_scale * keys
     * (unscaled for FlashInfer: its 448 cancels in pv_scale). Dim 0 of V:
     * the first 32 keys of the first-visited tile: 448; of the second-visited
     * tile, its first k = 32 step: 0.5, its second: -448; others 0.
     * One level: O after the first tile is 32 * ps * 448 >= 2^21.8, its grid
     * >= 2^(21 - 13) = 256 > ps * 0.5, so each 0.5 term truncates to 0, and the
     * -448s then cancel exactly: O_0 = 0. Two levels: the second tile's
     * partial starts from 0 and keeps 32 * ps * 0.5 exactly: O_0 = 16 / keys. */
    for (size_t p = 0; p < N_TILED; p++) {
        const int N = tiled[p].block_n;
        const int keys = tiled[p].ascending ? N + 64 : N + 32;
        const int first = tiled[p].ascending ? 0 : N, second = tiled[p].ascending ? N : 0;
        hcase c;
        hcase_init(&c, keys, 0);
        for (int t = 0; t < 32; t++) {
            set(c.v + (size_t)(first + t) * D, 0, 448.0f);
            set(c.v + (size_t)(second + t) * D, 0, 0.5f);
            set(c.v + (size_t)(second + 32 + t) * D, 0, -448.0f);
        }
        uint16_t o[D];
        run(tiled[p].name, &c, &unit_opt, o);
        const double want = tiled[p].two_level ? 16.0 / keys : 0.0;
        cr_assert_float_eq(out_at(o, 0), want, want * BF16_REL, "%s: %g for %g", tiled[p].name,
                           out_at(o, 0), want);
        /* Exact sums agree with two levels here. */
        run("fp8qkv@ideal", &c, &unit_opt, o);
        cr_assert_float_eq(out_at(o, 0), 16.0 / keys, 16.0 / keys * BF16_REL);
        hcase_free(&c);
    }
}

/* ------------------------------------------------------------ tiles */

Test(profiles, running_max_changes_at_a_tile_boundary)
{
    /* 2N keys in two tiles; the query (last token) sees all. The tile visited
     * second holds the big key B (raw S = 8 * 6.5 = 52: key 0 when tiles go
     * last to first, key 2N - 1 when first to last); every other S is 0.
     * The first-visited tile is rounded against its own max 0: P = p_scale
     * exactly; when B raises the max, the fp32 O and l are rescaled by r =
     * exp2(-52 s), s = log2(e) / 8. So its keys weigh r exactly, while the
     * other keys of B's tile weigh e4m3(p_scale r) / p_scale.
     * V: dim 0 = 1 on the first-visited tile's keys, dim 1 = 1 on B, dim 2 = 1
     * on B's tile's key next to the boundary, dim 3 = 1 on the first-visited
     * tile's key next to it: the boundary must sit exactly between them. */
    for (size_t p = 0; p < N_TILED; p++) {
        const int N = tiled[p].block_n, keys = 2 * N, asc = tiled[p].ascending;
        const int first = asc ? 0 : N, big = asc ? keys - 1 : 0;
        const int near_big = asc ? N : N - 1, near_first = asc ? N - 1 : N;
        const double ps = tiled[p].p_scale;
        hcase c;
        hcase_init(&c, keys, 0);
        set(c.q, 0, 8.0f);
        set(c.k + (size_t)big * D, 0, 6.5f);
        set(c.v + (size_t)big * D, 1, 1.0f);
        for (int t = first; t < first + N; t++) set(c.v + (size_t)t * D, 0, 1.0f);
        set(c.v + (size_t)near_big * D, 2, 1.0f);
        set(c.v + (size_t)near_first * D, 3, 1.0f);
        const double r = exp2(-52.0 * 0.125 * M_LOG2E);
        const double l = 1.0 + (keys - 1) * r;
        const double tiled_want = N * r / l, final_max = N * e4m3(ps * r) / ps / l;
        cr_assert_gt(fabs(final_max / tiled_want - 1.0), 4 * BF16_REL, "the test must separate");
        uint16_t o[D];
        run(tiled[p].name, &c, &unit_opt, o);
        cr_assert_float_eq(out_at(o, 0), tiled_want, tiled_want * BF16_REL,
                           "%s: %g for %g (final max %g)", tiled[p].name, out_at(o, 0), tiled_want,
                           final_max);
        cr_assert_float_eq(out_at(o, 1), 1.0 / l, BF16_REL, "%s", tiled[p].name);
        cr_assert_float_eq(out_at(o, 2), e4m3(ps * r) / ps / l, r / l * BF16_REL, "%s",
                           tiled[p].name);
        cr_assert_float_eq(out_at(o, 3), r / l, r / l * BF16_REL, "%s", tiled[p].name);
        hcase_free(&c);
    }
}

/* ------------------------------------------------------------ vLLM PR #24197 */

/* A gpt-oss-like random layer: q ~ N(0, 2^2), k, v ~ N(0, 1), sinks. */
typedef struct rcase {
    attn_batch b;
    int32_t sq[2], skv[2];
    float sinks[8];
    uint16_t *q, *k, *v;
    size_t nq, nkv;
} rcase;

static double gauss(uint64_t *s)
{
    double u1 = ((double)(rng_splitmix64(s) >> 11) + 0.5) / 9007199254740992.0;
    double u2 = (double)(rng_splitmix64(s) >> 11) / 9007199254740992.0;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

static void rcase_make(rcase *c, uint64_t seed)
{
    memset(c, 0, sizeof *c);
    c->sq[0] = 40;
    c->skv[0] = 40;
    c->sq[1] = 24;
    c->skv[1] = 300;
    const int hq = 8, hkv = 2;
    c->nq = (size_t)(40 + 24) * hq * D;
    c->nkv = (size_t)(40 + 300) * hkv * D;
    c->q = malloc(c->nq * 2);
    c->k = malloc(c->nkv * 2);
    c->v = malloc(c->nkv * 2);
    uint64_t s = seed;
    for (size_t i = 0; i < c->nq; i++) c->q[i] = bf16_from_f32((float)(2.0 * gauss(&s)));
    for (size_t i = 0; i < c->nkv; i++) c->k[i] = bf16_from_f32((float)gauss(&s));
    for (size_t i = 0; i < c->nkv; i++) c->v[i] = bf16_from_f32((float)gauss(&s));
    for (int h = 0; h < hq; h++) c->sinks[h] = (float)gauss(&s);
    c->b = (attn_batch){2, c->sq, c->skv, hq, hkv, D, 0, 0.125f, c->sinks};
}

static void rcase_free(rcase *c)
{
    free(c->q);
    free(c->k);
    free(c->v);
}

static void rrun(const char *name, const rcase *c, const attn_quant_options *opt, uint16_t *out)
{
    pg_err err = {0};
    cr_assert_eq(attn_variant_run(profile(name), &c->b, c->q, c->k, c->v, opt, out, NULL, 2, &err),
                 PG_OK, "%s: %s", name, err.msg);
}

static double rel_l2_u16(const uint16_t *a, const uint16_t *r, size_t n)
{
    double e = 0, z = 0;
    for (size_t i = 0; i < n; i++) {
        const double x = bf16_to_f32(a[i]), y = bf16_to_f32(r[i]);
        e += (x - y) * (x - y);
        z += y * y;
    }
    return sqrt(e / z);
}

Test(profiles, vllm_24197_is_fixed_at_unit_scales_and_far_from_it_calibrated)
{
    rcase c;
    rcase_make(&c, 24197);
    uint16_t *fixed = malloc(c.nq * 2), *merged = malloc(c.nq * 2);
    attn_quant_options opt = unit_opt;
    rrun("fp8kv@fixed", &c, &opt, fixed);
    rrun("fp8kv@vllm-24197", &c, &opt, merged);
    cr_assert_arr_eq(merged, fixed, c.nq * 2, "at scale 1.0 the double scaling cannot show");

    /* Calibrated: amax / 448 per tensor, as precgate's default scales. */
    opt.q_scale = fp8_e4m3_calibrated_scale(bf16_amax(c.q, c.nq));
    opt.k_scale = fp8_e4m3_calibrated_scale(bf16_amax(c.k, c.nkv));
    opt.v_scale = fp8_e4m3_calibrated_scale(bf16_amax(c.v, c.nkv));
    cr_assert_lt(opt.k_scale, 0.05f); /* typical activations: scales far below 1 */
    rrun("fp8kv@fixed", &c, &opt, fixed);
    rrun("fp8kv@vllm-24197", &c, &opt, merged);
    const double d = rel_l2_u16(merged, fixed, c.nq);
    cr_assert_gt(d, 0.5, "rel_l2 %.3f", d);
    /* Predicted size: logits scaled by q_scale * k_scale ~ 1e-4 flatten the
     * softmax, and v_scale shrinks O by ~1/100: O_merged ~ v_scale * mean(v)
     * is nearly 0 against O_fixed, so the distance is close to 1. */
    cr_assert_lt(d, 1.01, "rel_l2 %.3f", d);
    free(fixed);
    free(merged);
    rcase_free(&c);
}

Test(profiles, fa3_profiles_stay_close_to_ideal_on_random_layers)
{
    /* Not a known answer: a guard that the tiled core is the same attention.
     * fp8 rounding of P is ~2^-4 per element; the profiles differ from each
     * other by that order, not by O(1). */
    rcase c;
    rcase_make(&c, 15);
    attn_quant_options opt = unit_opt;
    opt.q_scale = fp8_e4m3_calibrated_scale(bf16_amax(c.q, c.nq));
    opt.k_scale = fp8_e4m3_calibrated_scale(bf16_amax(c.k, c.nkv));
    opt.v_scale = fp8_e4m3_calibrated_scale(bf16_amax(c.v, c.nkv));
    uint16_t *ideal = malloc(c.nq * 2), *o = malloc(c.nq * 2), *prev = malloc(c.nq * 2);
    for (int with_sinks = 1; with_sinks >= 0; with_sinks--) {
        c.b.sinks = with_sinks ? c.sinks : NULL;
        rrun("fp8qkv@ideal", &c, &opt, ideal);
        for (size_t p = 0; p < N_TILED; p++) {
            if (with_sinks && !tiled[p].sinks) continue;
            rrun(tiled[p].name, &c, &opt, o);
            const double d = rel_l2_u16(o, ideal, c.nq);
            cr_assert_lt(d, 0.06, "%s vs ideal %.4f", tiled[p].name, d);
            cr_assert_gt(d, 1e-3, "%s must differ from ideal: %.4f", tiled[p].name, d);
            if (p > 0 && (!with_sinks || tiled[p - 1].sinks))
                cr_assert_neq(memcmp(o, prev, c.nq * 2), 0, "%s = %s", tiled[p].name,
                              tiled[p - 1].name);
            memcpy(prev, o, c.nq * 2);
        }
    }
    free(ideal);
    free(o);
    free(prev);
    rcase_free(&c);
}
