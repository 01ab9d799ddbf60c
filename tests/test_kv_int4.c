/*
 * test_kv_int4.c: vLLM's int4_per_token_head cache (issue #30): the seeded
 * Hadamard rotation (kernels/rht.h), the int4 codec with its zero point in
 * the scale's mantissa (kernels/numerics.h), and the attention that reads
 * it (int4kv_per_token_head@triton), by known answers.
 *
 * Expected values come from outside the code under test: the C++
 * standard's MT19937 answers, Sylvester's matrix by its closed form
 * (-1)^popcount(i & j), the rounding rule of vLLM's kernel computed in
 * double on exact cases, and an attention taken in double from the decoded
 * cache. The signs of vLLM's generator are torch's own, printed on the GPU
 * machine (bench/gpu_formats.sh: torch.bernoulli with the seeded CPU
 * generator, d 16, 64, 128 and 256 all equal to rht_signs, 2026-12-07).
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/mode.h"
#include "kernels/attn.h"
#include "kernels/attn_hypothesis.h"
#include "kernels/attn_profile.h"
#include "kernels/kv_cache.h"
#include "kernels/numerics.h"
#include "kernels/rht.h"

/* The C++ standard's known answers for std::mt19937 ([rand.predef]): the
 * default seed and the 10000th output from it; the first output from the
 * default seed (the reference mt19937ar.c's init_genrand(5489)). */
#define MT_DEFAULT_SEED 5489u
#define MT_10000TH 4123659995u
#define MT_FIRST 3499211612u
#define D 64
/* vLLM's 64 signs as torch draws them (2 * bernoulli(0.5) - 1, generator
 * seeded 0x9E3779B9), printed by torch on the GPU machine. */
#define TORCH_SIGNS_D64 "+-++----+--++-+-++--+++-+-+--++-+---++-++-+-++---------+-------+"
/* int4's largest code and its zero-point bits (vLLM's kernel, written out). */
#define CODE_MAX 15
#define ZP_BITS 0xFu

/* ------------------------------------------------------------ rotation */

Test(kv_int4, mt19937_gives_the_standards_known_answers)
{
    static uint32_t out[10000];
    rht_mt19937(MT_DEFAULT_SEED, out, 10000);
    cr_expect_eq(out[0], MT_FIRST);
    cr_expect_eq(out[9999], MT_10000TH);
}

Test(kv_int4, each_sign_is_bit_23_of_its_draw_so_half_are_negative)
{
    /* u = (draw & (2^24 - 1)) * 2^-24 < 0.5 exactly when bit 23 is 0 */
    uint32_t draws[RHT_MAX_DIM];
    float signs[RHT_MAX_DIM];
    rht_mt19937(RHT_SIGN_SEED, draws, RHT_MAX_DIM);
    rht_signs(RHT_SIGN_SEED, RHT_MAX_DIM, signs);
    int neg = 0;
    for (int i = 0; i < RHT_MAX_DIM; i++) {
        const double u = (double)(draws[i] & 0xFFFFFFu) / 16777216.0;
        cr_assert_eq(signs[i], u < 0.5 ? 1.0f : -1.0f, "sign %d", i);
        neg += signs[i] < 0;
    }
    cr_expect(neg > RHT_MAX_DIM / 4 && neg < 3 * RHT_MAX_DIM / 4, "%d negative", neg);
    /* the signs of a smaller d are the first d of a larger one (one draw each) */
    float s64[D];
    rht_signs(RHT_SIGN_SEED, D, s64);
    cr_expect_arr_eq(s64, signs, sizeof s64);
    for (int i = 0; i < D; i++)
        cr_expect_eq(s64[i], TORCH_SIGNS_D64[i] == '+' ? 1.0f : -1.0f, "torch's sign %d", i);
}

Test(kv_int4, the_transform_is_sylvesters_matrix_and_twice_is_d_times_identity)
{
    for (int d = 2; d <= RHT_MAX_DIM; d *= 2) {
        float x[RHT_MAX_DIM], y[RHT_MAX_DIM];
        for (int i = 0; i < d; i++) x[i] = (float)((i * 7 + 3) % 11 - 5); /* small integers */
        memcpy(y, x, sizeof(float) * (size_t)d);
        rht_fwht_f32(y, d);
        for (int j = 0; j < d; j++) {
            double want = 0.0;
            for (int i = 0; i < d; i++)
                want += (__builtin_popcount((unsigned)(i & j)) & 1 ? -1.0 : 1.0) * x[i];
            cr_assert_eq((double)y[j], want, "d %d column %d", d, j);
        }
        rht_fwht_f32(y, d);
        for (int i = 0; i < d; i++) cr_assert_eq(y[i], (float)d * x[i], "d %d", d);
    }
    cr_expect(rht_dim_ok(64) && rht_dim_ok(128) && rht_dim_ok(256));
    cr_expect(!rht_dim_ok(96) && !rht_dim_ok(0) && !rht_dim_ok(1) && !rht_dim_ok(2 * RHT_MAX_DIM));
}

Test(kv_int4, forward_then_inverse_gives_the_rows_back_when_nothing_rounds)
{
    /* entries in {-1, 0, 1}: every sum is an integer of at most 64, exact in bf16 */
    float signs[D];
    rht_signs(RHT_SIGN_SEED, D, signs);
    uint16_t rows[2 * D], orig[2 * D];
    for (int i = 0; i < 2 * D; i++) orig[i] = rows[i] = bf16_from_f32((float)((i * 5) % 3 - 1));
    rht_forward_bf16_rows(rows, 2, D, signs);
    /* the forward row is fwht(x * signs): check one column by the closed form */
    double col3 = 0.0;
    for (int i = 0; i < D; i++)
        col3 += (__builtin_popcount((unsigned)(i & 3)) & 1 ? -1.0 : 1.0) * signs[i] *
                bf16_to_f32(orig[i]);
    cr_expect_eq((double)bf16_to_f32(rows[3]), col3);
    rht_inverse_bf16_rows(rows, 2, D, signs);
    for (int i = 0; i < 2 * D; i++) /* by value: a 0 may come back as -0 */
        cr_assert_eq(bf16_to_f32(rows[i]), bf16_to_f32(orig[i]), "element %d", i);
}

/* ------------------------------------------------------------ the codec */

/* The code vLLM's kernel gives for y = x / scale + zp exactly: round half
 * away from zero ((y + 0.5) truncated for y >= 0), clamped to 0 .. 15. */
static int want_code(double y)
{
    const double r = y >= 0 ? floor(y + 0.5) : ceil(y - 0.5);
    return r < 0 ? 0 : r > CODE_MAX ? CODE_MAX : (int)r;
}

Test(kv_int4, every_zero_point_and_every_code_is_written_as_the_kernel_rounds, .timeout = 60)
{
    /* For each zero point z a row whose min is -z/4 and max (15 - z)/4:
     * scale (max - min) / 15 = 1/4 exactly and -min / scale = z. Then every
     * bf16 x in [min, max] is written with the code want_code(4x + z): the
     * halves (y = c + 0.5) go up, which half-to-even would not do for even c. */
    const float scale = 0.25f;
    int halves_seen = 0;
    for (int z = 0; z <= CODE_MAX; z++) {
        const float lo = -(float)z * scale, hi = (float)(CODE_MAX - z) * scale;
        for (uint32_t h = 0; h < 0x10000u; h++) {
            const float xf = bf16_to_f32((uint16_t)h);
            if (!(xf >= lo && xf <= hi)) continue;
            const uint16_t row[3] = {bf16_from_f32(lo), bf16_from_f32(hi), (uint16_t)h};
            uint8_t codes[3];
            fp8_quant_stats st = {0};
            const float stored = int4_quantize_bf16_per_token_head(row, 3, codes, &st);
            float s, zp;
            int4_split_scale(stored, &s, &zp);
            cr_assert_eq(s, scale, "z %d", z);
            cr_assert_eq(zp, (float)z, "z %d", z);
            cr_assert_eq(f32_bits(stored), f32_bits(scale) | (uint32_t)z, "z %d", z);
            cr_assert_eq(codes[0], 0, "z %d: min -> 0", z);
            cr_assert_eq(codes[1], CODE_MAX, "z %d: max -> 15", z);
            const double y = (double)xf / scale + z;
            cr_assert_eq(codes[2], want_code(y), "z %d x %a: y %g", z, (double)xf, y);
            halves_seen += y - floor(y) == 0.5;
            cr_assert_eq(st.n_saturated, 0, "z %d", z);
        }
    }
    cr_expect_gt(halves_seen, 100);
}

Test(kv_int4, every_code_decodes_to_itself_and_the_codec_row_says_so)
{
    for (int c = 0; c <= CODE_MAX; c++) cr_assert_eq(int4_decode((uint8_t)c), (float)c);
    const fp_codec *k = fp_codec_of(PG_FORMAT_INT4_ZP);
    cr_expect(k->decode == int4_decode);
    cr_expect(k->split_scale == int4_split_scale);
    cr_expect_null(k->quantize_bf16, "no per-tensor int4 cache");
    cr_expect(k->nan_code > CODE_MAX, "an unwritten slot holds no code the write gives");
    cr_expect_null(fp_codec_of(PG_FORMAT_INT8)->split_scale, "int8 has no zero point");
}

Test(kv_int4, the_stored_scale_clears_its_low_bits_for_the_zero_point)
{
    /* min -1, max 2: scale fp32(3 / 15) = 0.2f, whose low 4 mantissa bits
     * are not all 0; zp = round(1 / 0.2f) = 5 */
    const uint16_t row[2] = {bf16_from_f32(-1.0f), bf16_from_f32(2.0f)};
    uint8_t codes[2];
    const float stored = int4_quantize_bf16_per_token_head(row, 2, codes, NULL);
    const float want_scale = 3.0f / 15.0f;
    cr_expect_eq(f32_bits(stored), (f32_bits(want_scale) & ~ZP_BITS) | 5u);
    float s, zp;
    int4_split_scale(stored, &s, &zp);
    cr_expect_eq(zp, 5.0f);
    cr_expect_eq(f32_bits(s), f32_bits(want_scale) & ~ZP_BITS);
    cr_expect_eq(codes[0], 0);
    cr_expect_eq(codes[1], CODE_MAX);
}

Test(kv_int4, a_row_above_zero_clamps_its_zero_point_and_saturates_its_top)
{
    /* min 1, max 16: scale 1, -min / scale = -1 clamps zp to 0, so 16 wants
     * code 16 and saturates at 15; 1 .. 15 are their own codes; the zero
     * row has scale 1e-6 and every code equal to zp (no underflow: x is 0) */
    uint16_t row[16];
    for (int i = 0; i < 16; i++) row[i] = bf16_from_f32((float)(i + 1));
    uint8_t codes[16];
    fp8_quant_stats st = {0};
    const float stored = int4_quantize_bf16_per_token_head(row, 16, codes, &st);
    cr_expect_eq(f32_bits(stored), f32_bits(1.0f));
    for (int i = 0; i < 15; i++) cr_expect_eq(codes[i], i + 1);
    cr_expect_eq(codes[15], CODE_MAX);
    cr_expect_eq(st.n_saturated, 1);
    cr_expect_eq(st.n, 16);
    cr_expect_eq(st.n_nonzero, 16);
    uint16_t zeros[4] = {0};
    fp8_quant_stats zst = {0};
    const float zs = int4_quantize_bf16_per_token_head(zeros, 4, codes, &zst);
    float s, zp;
    int4_split_scale(zs, &s, &zp);
    cr_expect_eq(zp, 0.0f);
    cr_expect_eq(f32_bits(s), f32_bits(1e-6f) & ~ZP_BITS, "the floor, low bits cleared");
    cr_expect_eq(zst.n_underflow, 0);
    /* a nonzero value that lands on the zero point is an underflow:
     * min -1, max 14: scale 1, zp 1; 0.25 -> round(1.25) = 1 = zp */
    const uint16_t uf[3] = {bf16_from_f32(-1.0f), bf16_from_f32(14.0f), bf16_from_f32(0.25f)};
    fp8_quant_stats ust = {0};
    int4_quantize_bf16_per_token_head(uf, 3, codes, &ust);
    cr_expect_eq(codes[2], 1);
    cr_expect_eq(ust.n_underflow, 1);
}

Test(kv_int4, the_paged_cache_keeps_each_rows_stored_scale_and_marks_unwritten_slots)
{
    static const int32_t sq[1] = {2};
    const attn_batch b = {1, sq, sq, 1, 1, D, 0, 0.125f, NULL};
    uint16_t k[2 * D], v[2 * D];
    for (int i = 0; i < 2 * D; i++) {
        k[i] = bf16_from_f32((float)(i % 16) - 4.0f); /* min -4, max 11: scale 1, zp 4 */
        v[i] = bf16_from_f32((float)(i % 16) * 0.5f); /* min 0, max 7.5: scale 0.5, zp 0 */
    }
    kv_paged c;
    pg_err err = {0};
    cr_assert_eq(kv_paged_write_per_token_head(&b, k, v, PG_FORMAT_INT4_ZP, 3, 16, &c, NULL, NULL,
                                               &err), PG_OK, "%s", err.msg);
    const int64_t page = c.block_table[0];
    for (int t = 0; t < 2; t++) {
        cr_expect_eq(f32_bits(*kv_paged_scale_at(&c, page, 0, 0, t)), f32_bits(1.0f) | 4u);
        cr_expect_eq(f32_bits(*kv_paged_scale_at(&c, page, 1, 0, t)), f32_bits(0.5f));
        const uint8_t *kc = kv_paged_row(&c, page, 0, 0, t), *vc = kv_paged_row(&c, page, 1, 0, t);
        for (int i = 0; i < D; i++) {
            cr_assert_eq(kc[i], i % 16, "token %d dim %d", t, i);
            cr_assert_eq(vc[i], i % 16, "token %d dim %d", t, i);
        }
    }
    for (int slot = 2; slot < 16; slot++) {
        cr_expect(isnan(*kv_paged_scale_at(&c, page, 0, 0, slot)), "slot %d", slot);
        cr_expect_eq(((const uint8_t *)kv_paged_row(&c, page, 0, 0, slot))[0],
                     fp_codec_of(PG_FORMAT_INT4_ZP)->nan_code);
    }
    kv_paged_free(&c);
}

/* ------------------------------------------------------------ attention */

enum { NQ = 3, NKV = 40 }; /* two Triton tiles of keys */

typedef struct int4_case {
    attn_batch b;
    int32_t sq, skv;
    uint16_t q[NQ * D], k[NKV * D], v[NKV * D];
} int4_case;

static void case_init(int4_case *c)
{
    memset(c, 0, sizeof *c);
    c->sq = NQ;
    c->skv = NKV;
    c->b = (attn_batch){1, &c->sq, &c->skv, 1, 1, D, 0, 0.125f, NULL};
    uint64_t s = 12345;
    for (int i = 0; i < NQ * D; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        c->q[i] = bf16_from_f32((float)((int)(s >> 40) % 2001 - 1000) / 400.0f);
    }
    for (int i = 0; i < NKV * D; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        c->k[i] = bf16_from_f32((float)((int)(s >> 40) % 2001 - 1000) / 300.0f + (i % D == 5 ? 3.0f : 0.0f));
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        c->v[i] = bf16_from_f32((float)((int)(s >> 40) % 2001 - 1000) / 500.0f);
    }
}

/* The attention of c taken in double from what the int4 cache holds:
 * rotate (rht.h), write each rotated K and V row with the codec, decode
 * (code - zp) x scale, causal softmax with sm_scale in double, rotate the
 * output back (x signs / d). skip_zp decodes code x scale; skip_q leaves Q
 * unrotated. Into out [NQ][D] as doubles. */
static void reference(const int4_case *c, int skip_zp, int skip_q, double *out)
{
    float signs[D];
    rht_signs(RHT_SIGN_SEED, D, signs);
    uint16_t q[NQ * D], k[NKV * D], v[NKV * D];
    memcpy(q, c->q, sizeof q);
    memcpy(k, c->k, sizeof k);
    memcpy(v, c->v, sizeof v);
    if (!skip_q) rht_forward_bf16_rows(q, NQ, D, signs);
    rht_forward_bf16_rows(k, NKV, D, signs);
    rht_forward_bf16_rows(v, NKV, D, signs);
    static double kh[NKV][D], vh[NKV][D];
    for (int t = 0; t < NKV; t++) {
        uint8_t kc[D], vc[D];
        float ks, kz, vs, vz;
        int4_split_scale(int4_quantize_bf16_per_token_head(k + t * D, D, kc, NULL), &ks, &kz);
        int4_split_scale(int4_quantize_bf16_per_token_head(v + t * D, D, vc, NULL), &vs, &vz);
        for (int i = 0; i < D; i++) {
            kh[t][i] = ((double)kc[i] - (skip_zp ? 0.0 : kz)) * ks;
            vh[t][i] = ((double)vc[i] - (skip_zp ? 0.0 : vz)) * vs;
        }
    }
    for (int j = 0; j < NQ; j++) {
        const int last = NKV - NQ + j; /* causal, queries at the end */
        double s[NKV], m = -INFINITY, l = 0.0, o[D] = {0};
        for (int t = 0; t <= last; t++) {
            s[t] = 0.0;
            for (int i = 0; i < D; i++) s[t] += (double)bf16_to_f32(q[j * D + i]) * kh[t][i];
            s[t] *= 0.125 / D;
            if (s[t] > m) m = s[t];
        }
        for (int t = 0; t <= last; t++) {
            const double p = exp(s[t] - m);
            l += p;
            for (int i = 0; i < D; i++) o[i] += p * vh[t][i];
        }
        float of[D];
        for (int i = 0; i < D; i++) of[i] = (float)(o[i] / l);
        rht_fwht_f32(of, D);
        for (int i = 0; i < D; i++) out[j * D + i] = (double)of[i] * signs[i] / D;
    }
}

/* Relative L2 distance of bf16 out [NQ * D] from doubles ref. */
static double rel_l2(const uint16_t *out, const double *ref)
{
    double num = 0.0, den = 0.0;
    for (int i = 0; i < NQ * D; i++) {
        const double e = bf16_to_f32(out[i]) - ref[i];
        num += e * e;
        den += ref[i] * ref[i];
    }
    return sqrt(num / den);
}

static void run_hypothesis(const char *name, const int4_case *c, uint16_t *out)
{
    const attn_hypothesis *h = attn_hypothesis_find(name);
    cr_assert_not_null(h, "%s", name);
    const attn_quant_options o = {.quantize = 1, .q_scale = 1, .k_scale = 1, .v_scale = 1,
                                  .block_size = 16, .page_seed = 1};
    pg_err err = {0};
    cr_assert_eq(attn_hypothesis_run(h, &c->b, c->q, c->k, c->v, &o, out, 1, &err), PG_OK,
                 "%s: %s", name, err.msg);
}

Test(kv_int4, the_attention_is_the_decoded_cache_in_the_rotated_basis_rotated_back)
{
    /* The profile's output against the double attention of the decoded
     * cache: they share the cache, so they differ only by the kernel's fp32
     * sums, bf16 P x v scale not being taken (pv_in_fp32) and the output's
     * two bf16 roundings, about 1e-3. A missing zero point, a Q left
     * unrotated, sm_scale not divided by d or no inverse rotation move the
     * output by far more (each hypothesis is measured against its own
     * reference, or against the intended one). */
    static int4_case c;
    case_init(&c);
    static double ref[NQ * D], ref_nozp[NQ * D], ref_noq[NQ * D];
    reference(&c, 0, 0, ref);
    reference(&c, 1, 0, ref_nozp);
    reference(&c, 0, 1, ref_noq);
    uint16_t out[NQ * D];
    const attn_profile *p = NULL;
    pg_err err = {0};
    cr_assert_eq(attn_profile_find("int4kv_per_token_head", &p, &err), PG_OK, "%s", err.msg);
    const attn_quant_options o = {.quantize = 1, .q_scale = 1, .k_scale = 1, .v_scale = 1,
                                  .block_size = 16, .page_seed = 1};
    cr_assert_eq(attn_variant_run(p, &c.b, c.q, c.k, c.v, &o, out, NULL, 1, &err), PG_OK, "%s",
                 err.msg);
    const double e = rel_l2(out, ref);
    cr_expect_lt(e, 4e-3, "intended: %g", e);
    cr_expect_gt(rel_l2(out, ref_nozp), 50 * e, "the zero point matters here");
    cr_expect_gt(rel_l2(out, ref_noq), 50 * e, "the rotation of Q matters here");

    run_hypothesis("int4-zero-point-dropped", &c, out);
    cr_expect_lt(rel_l2(out, ref_nozp), 4e-3, "zero points dropped: %g", rel_l2(out, ref_nozp));
    run_hypothesis("int4-q-unrotated", &c, out);
    cr_expect_lt(rel_l2(out, ref_noq), 4e-3, "Q unrotated: %g", rel_l2(out, ref_noq));
    run_hypothesis("int4-output-unrotated", &c, out);
    cr_expect_gt(rel_l2(out, ref), 0.5, "the rotated basis is far from the output");
    run_hypothesis("intended-int4kv_pth", &c, out);
    cr_expect_lt(rel_l2(out, ref), 4e-3);
}

Test(kv_int4, a_head_dim_that_is_no_power_of_two_is_refused_naming_it)
{
    enum { D96 = 96 };
    static uint16_t q[D96], k[D96], v[D96], out[D96];
    const int32_t one = 1;
    const attn_batch b = {1, &one, &one, 1, 1, D96, 0, 0.1f, NULL};
    const attn_profile *p = NULL;
    pg_err err = {0};
    cr_assert_eq(attn_profile_find("int4kv_per_token_head", &p, &err), PG_OK);
    const attn_quant_options o = {.quantize = 1, .q_scale = 1, .k_scale = 1, .v_scale = 1,
                                  .block_size = 16, .page_seed = 1};
    cr_expect_eq(attn_variant_run(p, &b, q, k, v, &o, out, NULL, 1, &err), PG_ERR_SHAPE);
    cr_expect(strstr(err.msg, "power-of-two") != NULL && strstr(err.msg, "96") != NULL, "%s",
              err.msg);
}
