/*
 * test_kv_turboquant.c: vLLM's TurboQuant presets (issue #30): binary16,
 * the Lloyd-Max codebook, the slot layout and its packing, the cache write
 * and the decode kernel's attention (kernels/turboquant.h,
 * kernels/attn_turboquant.c), by known answers.
 *
 * Expected values come from outside the code under test: the codebooks are
 * the float32 bits that vLLM's centroids.py solve_lloyd_max prints when run
 * as it is (torch.tensor replaced by a float32 cast, 2026-12-07); the slot
 * sizes are vLLM's tests/quantization/test_turboquant.py's; binary16 is
 * held to a brute-force nearest; the attention to a double computation of
 * the decoded cache.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/mode.h"
#include "kernels/attn.h"
#include "kernels/attn_hypothesis.h"
#include "kernels/attn_profile.h"
#include "kernels/kv_cache.h"
#include "kernels/numerics.h"
#include "kernels/turboquant.h"
#include "testutil.h"

#define D 128

/* ------------------------------------------------------------ binary16 */

/* Every finite binary16 value, ascending (the negatives mirrored). */
static float f16_value(unsigned h) { return fp16_to_f32((uint16_t)h); }

Test(kv_turboquant, binary16_decodes_by_its_definition_and_round_trips_every_code)
{
    cr_expect_eq(f16_value(0x3C00), 1.0f);
    cr_expect_eq(f16_value(0x7BFF), 65504.0f);
    cr_expect_eq(f16_value(0x0001), ldexpf(1.0f, -24));
    cr_expect_eq(f16_value(0x0400), ldexpf(1.0f, -14));
    cr_expect_eq(f16_value(0xC000), -2.0f);
    cr_expect(isinf(f16_value(0x7C00)) && f16_value(0x7C00) > 0);
    cr_expect(isnan(f16_value(0x7E00)));
    for (unsigned h = 0; h < 0x10000u; h++) {
        const float x = f16_value(h);
        if (isnan(x)) {
            cr_assert(isnan(fp16_to_f32(fp16_from_f32(x))), "%04x", h);
            continue;
        }
        cr_assert_eq(fp16_from_f32(x), h, "%04x", h);
    }
}

Test(kv_turboquant, binary16_rounds_every_bf16_value_to_the_nearest_even)
{
    /* the finite nonnegative binary16 values in order: code h is value h */
    for (unsigned b = 0; b < 0x8000u; b++) {
        const float x = bf16_to_f32((uint16_t)b);
        if (isnan(x)) continue;
        unsigned want;
        if (x >= 65520.0f) {
            want = 0x7C00; /* half-way to 2^16 and above: inf */
        } else {
            unsigned lo = 0, hi = 0x7BFF;
            while (lo < hi) { /* the last code <= x */
                const unsigned mid = (lo + hi + 1) / 2;
                if (f16_value(mid) <= x) lo = mid;
                else hi = mid - 1;
            }
            want = lo;
            if (f16_value(lo) != x && lo < 0x7BFF) {
                const double dl = (double)x - f16_value(lo), du = (double)f16_value(lo + 1) - x;
                if (du < dl || (du == dl && (lo & 1))) want = lo + 1;
            } else if (f16_value(lo) != x) {
                want = 0x7BFF; /* between 65504 and 65520 */
            }
        }
        cr_assert_eq(fp16_from_f32(x), want, "bf16 %04x = %a", b, (double)x);
        cr_assert_eq(fp16_from_f32(-x), want | 0x8000u, "bf16 -%04x", b);
    }
}

/* ------------------------------------------------------------ codebook */

/* solve_lloyd_max(d, bits)[0] as vLLM computes it, as float32 bits. */
static const struct {
    int d, bits;
    uint32_t c[16];
} vllm_centroids[] = {
    {64, 3, {0xbe899f54, 0xbe2bed53, 0xbdc171fc, 0xbcfadcfb, 0x3cfadcfb, 0x3dc171fc, 0x3e2bed53,
             0x3e899f54}},
    {64, 4, {0xbeaec76e, 0xbe846170, 0xbe4f16c0, 0xbe20cd0c, 0xbdf1444a, 0xbda82948, 0xbd46b9ff,
             0xbc83828a, 0x3c83828a, 0x3d46b9ff, 0x3da82948, 0x3df1444a, 0x3e20cd0c, 0x3e4f16c0,
             0x3e846170, 0x3eaec76e}},
    {128, 3, {0xbe42a09f, 0xbdf3243d, 0xbd88c955, 0xbcb16317, 0x3cb16317, 0x3d88c955,
              0x3df3243d, 0x3e42a09f}},
    {128, 4, {0xbe772cc4, 0xbe3b36e7, 0xbe126f17, 0xbde3682b, 0xbdaa99f2, 0xbd6dd0e1,
              0xbd0c8559, 0xbc39fbae, 0x3c39fbae, 0x3d0c8559, 0x3d6dd0e1, 0x3daa99f2,
              0x3de3682b, 0x3e126f17, 0x3e3b36e7, 0x3e772cc4}},
};

Test(kv_turboquant, the_codebooks_are_vllms_bit_for_bit)
{
    for (size_t r = 0; r < sizeof vllm_centroids / sizeof vllm_centroids[0]; r++) {
        tq_codebook cb;
        pg_err err = {0};
        cr_assert_eq(tq_codebook_solve(vllm_centroids[r].d, vllm_centroids[r].bits, &cb, &err),
                     PG_OK, "%s", err.msg);
        cr_assert_eq(cb.n, 1 << vllm_centroids[r].bits);
        for (int i = 0; i < cb.n; i++)
            cr_expect_eq(f32_bits(cb.centroids[i]), vllm_centroids[r].c[i], "d %d bits %d c%d: %a",
                         cb.d, cb.bits, i, (double)cb.centroids[i]);
        for (int i = 0; i + 1 < cb.n; i++) {
            const float mid = (cb.centroids[i] + cb.centroids[i + 1]) / 2.0f;
            cr_expect_eq(cb.midpoints[i], mid);
            /* the store's binary search sends a value on a midpoint up */
            cr_expect_eq(tq_codebook_index(&cb, mid), i + 1);
            cr_expect_eq(tq_codebook_index(&cb, nextafterf(mid, -INFINITY)), i);
        }
    }
    tq_codebook cb;
    pg_err err = {0};
    cr_expect_eq(tq_codebook_solve(128, 5, &cb, &err), PG_ERR_USAGE);
}

/* ------------------------------------------------------------ layout */

Test(kv_turboquant, the_slot_sizes_are_vllms)
{
    /* tests/quantization/test_turboquant.py: D 128 slots of 196, 134, 118, 102 */
    static const struct {
        pg_mode m;
        int slot, kps;
    } want[] = {{PG_MODE_TURBOQUANT_K8V4, 196, 128}, {PG_MODE_TURBOQUANT_4BIT_NC, 134, 66},
                {PG_MODE_TURBOQUANT_K3V4_NC, 118, 50}, {PG_MODE_TURBOQUANT_3BIT_NC, 102, 50}};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        tq_layout lay;
        pg_err err = {0};
        cr_assert_eq(tq_layout_of(want[i].m, D, &lay, &err), PG_OK, "%s", err.msg);
        cr_expect_eq(lay.slot_bytes, want[i].slot, "%s", pg_mode_name(want[i].m));
        cr_expect_eq(lay.kps, want[i].kps, "%s", pg_mode_name(want[i].m));
    }
    /* the memory advise and the report count is the slot, at every head dim */
    for (int d = 16; d <= TQ_MAX_DIM; d *= 2)
        for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
            tq_layout l;
            pg_err e = {0};
            cr_assert_eq(tq_layout_of(want[i].m, d, &l, &e), PG_OK, "%s", e.msg);
            cr_expect_eq(pg_mode_kv_bytes_per_token_head(want[i].m, d), l.slot_bytes, "%s d %d",
                         pg_mode_name(want[i].m), d);
        }
    /* beside the others at d 128: bf16 2 x 256, fp8 2 x 128, int8 per token head 2 x
     * (128 + 4), int4 2 x (64 + 4), nvfp4 2 x (64 + 8 block scales) */
    cr_expect_eq(pg_mode_kv_bytes_per_token_head(PG_MODE_BF16, D), 512);
    cr_expect_eq(pg_mode_kv_bytes_per_token_head(PG_MODE_FP8KV, D), 256);
    cr_expect_eq(pg_mode_kv_bytes_per_token_head(PG_MODE_INT8KV_PER_TOKEN_HEAD, D), 264);
    cr_expect_eq(pg_mode_kv_bytes_per_token_head(PG_MODE_INT4KV_PER_TOKEN_HEAD, D), 136);
    cr_expect_eq(pg_mode_kv_bytes_per_token_head(PG_MODE_NVFP4KV, D), 144);
    tq_layout lay;
    pg_err err = {0};
    cr_expect_eq(tq_layout_of(PG_MODE_TURBOQUANT_4BIT_NC, 96, &lay, &err), PG_ERR_SHAPE);
    cr_expect(strstr(err.msg, "d is 96") != NULL, "%s", err.msg);
    err = (pg_err){0};
    cr_expect_eq(tq_layout_of(PG_MODE_INT4KV_PER_TOKEN_HEAD, D, &lay, &err), PG_ERR_USAGE);
}

Test(kv_turboquant, codes_pack_from_bit_0_eight_3_bit_codes_in_3_bytes)
{
    tq_layout lay;
    pg_err err = {0};
    cr_assert_eq(tq_layout_of(PG_MODE_TURBOQUANT_3BIT_NC, D, &lay, &err), PG_OK, "%s", err.msg);
    /* a value row 0, 1, .., 7 repeated with min 0, max 7: scale 1, codes = values */
    uint16_t v[D];
    for (int i = 0; i < D; i++) v[i] = bf16_from_f32((float)(i % 8));
    uint8_t slot[256] = {0};
    tq_store_value(&lay, v, slot, NULL);
    const uint8_t *data = slot + lay.kps;
    /* sum_j j << 3j = 0xFAC688, little endian */
    cr_expect_eq(data[0], 0x88);
    cr_expect_eq(data[1], 0xC6);
    cr_expect_eq(data[2], 0xFA);
    cr_expect_eq(data[47], 0xFA, "the 16th group");
    uint8_t codes[D];
    float scale, min;
    tq_read_value(&lay, slot, codes, &scale, &min);
    for (int i = 0; i < D; i++) cr_assert_eq(codes[i], i % 8, "dim %d", i);
    cr_expect_eq(scale, 1.0f);
    cr_expect_eq(min, 0.0f);
    /* 4-bit: pairs, the even element in the low nibble */
    tq_layout l4;
    cr_assert_eq(tq_layout_of(PG_MODE_TURBOQUANT_4BIT_NC, D, &l4, &err), PG_OK, "%s", err.msg);
    for (int i = 0; i < D; i++) v[i] = bf16_from_f32((float)(i % 16));
    memset(slot, 0, sizeof slot);
    tq_store_value(&l4, v, slot, NULL);
    cr_expect_eq(slot[l4.kps], 0x10);
    cr_expect_eq(slot[l4.kps + 7], 0xFE);
    /* every code at every position survives the packing */
    for (int bits = 3; bits <= 4; bits++) {
        for (int j = 0; j < D; j++) {
            for (unsigned code = 0; code < (1u << bits); code++) {
                uint8_t packed[D] = {0};
                tq_layout lb = lay;
                lb.v_bits = bits;
                lb.kps = 0;
                lb.val_data_bytes = D * bits / 8;
                uint16_t row[D];
                for (int i = 0; i < D; i++)
                    row[i] = bf16_from_f32(i == j ? (float)code : i == (j + 1) % D ? (float)((1 << bits) - 1) : 0.0f);
                tq_store_value(&lb, row, packed, NULL);
                cr_assert_eq(tq_unpack(packed, bits, j), code, "bits %d j %d code %u", bits, j, code);
            }
        }
    }
}

/* ------------------------------------------------------------ cache write */

Test(kv_turboquant, values_round_half_up_with_the_fp32_scale_and_keep_an_fp16_scale)
{
    tq_layout lay;
    pg_err err = {0};
    cr_assert_eq(tq_layout_of(PG_MODE_TURBOQUANT_4BIT_NC, D, &lay, &err), PG_OK, "%s", err.msg);
    uint16_t v[D];
    /* min 0, max 15: scale 1; 4.5 -> 5 (half up, not to even), 4.25 -> 4 */
    for (int i = 0; i < D; i++) v[i] = bf16_from_f32(i == 0 ? 15.0f : 0.0f);
    v[1] = bf16_from_f32(4.5f);
    v[2] = bf16_from_f32(4.25f);
    v[3] = bf16_from_f32(14.75f);
    uint8_t slot[256] = {0}, codes[D];
    float scale, min;
    fp8_quant_stats st = {0};
    tq_store_value(&lay, v, slot, &st);
    tq_read_value(&lay, slot, codes, &scale, &min);
    cr_expect_eq(codes[1], 5);
    cr_expect_eq(codes[2], 4);
    cr_expect_eq(codes[3], 15);
    cr_expect_eq(st.n, D);
    cr_expect_eq(st.n_saturated, 0);
    /* min 0, max 1: scale fp32(1/15); code of 1 is trunc(15.5) = 15, read
     * back with fp16(1/15) = 0.066650390625 */
    for (int i = 0; i < D; i++) v[i] = bf16_from_f32(i == 0 ? 1.0f : 0.0f);
    tq_store_value(&lay, v, slot, NULL);
    tq_read_value(&lay, slot, codes, &scale, &min);
    cr_expect_eq(codes[0], 15);
    cr_expect_eq(scale, 0.066650390625f);
    cr_expect_eq(fmaf((float)codes[0], scale, min), 0.999755859375f);
    /* a constant row: the 1e-8 floor, every code 0 */
    for (int i = 0; i < D; i++) v[i] = bf16_from_f32(-3.0f);
    tq_store_value(&lay, v, slot, NULL);
    tq_read_value(&lay, slot, codes, &scale, &min);
    cr_expect_eq(scale, fp16_to_f32(fp16_from_f32(1e-8f)));
    cr_expect_eq(min, -3.0f);
    cr_expect_eq(codes[7], 0);
}

Test(kv_turboquant, a_one_hot_key_rotates_to_a_flat_row_and_keeps_its_norm)
{
    /* k = 3 e_0: norm 3, k / norm = e_0, whose rotation is row 0 of H / sqrt(d):
     * every y = 1/sqrt(128) = 0.0884, between the 3-bit midpoints 0.0443 and
     * 0.0928: index 5 everywhere; the norm 3 is exact in fp16 */
    tq_layout lay;
    pg_err err = {0};
    cr_assert_eq(tq_layout_of(PG_MODE_TURBOQUANT_K3V4_NC, D, &lay, &err), PG_OK, "%s", err.msg);
    tq_codebook cb;
    cr_assert_eq(tq_codebook_solve(D, 3, &cb, &err), PG_OK, "%s", err.msg);
    uint16_t k[D] = {0};
    k[0] = bf16_from_f32(3.0f);
    uint8_t slot[256] = {0}, idx[D];
    fp8_quant_stats st = {0};
    tq_store_key(&lay, &cb, k, slot, &st);
    cr_expect_eq(tq_read_key(&lay, slot, idx), 3.0f);
    for (int i = 0; i < D; i++) cr_assert_eq(idx[i], 5, "dim %d", i);
    cr_expect_eq(st.n, D);
    cr_expect_eq(st.n_nonzero, 1);
    cr_expect_eq(st.n_saturated, 0);
    /* k = e_0 + e_1: y_i = (1 + (-1)^i) / 16 = 0.125 or 0, so even dims sit
     * above the last midpoint (index 6: 0.1187 < 0.125 < 0.1544) and odd ones on 0, which
     * the search sends up (index 4) */
    k[1] = bf16_from_f32(3.0f);
    tq_store_key(&lay, &cb, k, slot, NULL);
    const float n = tq_read_key(&lay, slot, idx);
    cr_expect_eq(n, fp16_to_f32(fp16_from_f32(sqrtf(18.0f))));
    for (int i = 0; i < D; i++) cr_assert_eq(idx[i], i % 2 ? 4 : 6, "dim %d", i);
    /* the 1e-8 of k / (norm + 1e-8) on tiny keys: k = 1e-8 e_0 gives a unit row
     * of about 0.5, y = 0.0442 just under the midpoint 0.0443 (index 4, where a
     * bare k / norm gives 5); k = 1e-7 e_0 gives 0.91, y = 0.080 (index 5) */
    memset(k, 0, sizeof k);
    k[0] = bf16_from_f32(1e-8f);
    tq_store_key(&lay, &cb, k, slot, NULL);
    tq_read_key(&lay, slot, idx);
    cr_expect_eq(idx[0], 4);
    cr_expect_eq(idx[D - 1], 4);
    k[0] = bf16_from_f32(1e-7f);
    tq_store_key(&lay, &cb, k, slot, NULL);
    tq_read_key(&lay, slot, idx);
    cr_expect_eq(idx[0], 5);
    cr_expect_eq(idx[D - 1], 5);
}

Test(kv_turboquant, round_trips_meet_vllms_own_cosine_bounds)
{
    /* tests/quantization/test_turboquant.py: cosine > 0.95 for fp8 keys and
     * > 0.85 for MSE keys; Gaussian rows here give far better (3-bit ~0.98) */
    static const pg_mode modes[] = {PG_MODE_TURBOQUANT_K8V4, PG_MODE_TURBOQUANT_4BIT_NC,
                                    PG_MODE_TURBOQUANT_3BIT_NC};
    static const double floor_cos[] = {0.999, 0.98, 0.95};
    uint64_t s = 99;
    for (size_t mi = 0; mi < 3; mi++) {
        tq_layout lay;
        tq_codebook cb = {0};
        pg_err err = {0};
        cr_assert_eq(tq_layout_of(modes[mi], D, &lay, &err), PG_OK, "%s", err.msg);
        if (!lay.key_fp8) cr_assert_eq(tq_codebook_solve(D, lay.k_bits, &cb, &err), PG_OK);
        double worst = 1.0;
        for (int r = 0; r < 64; r++) {
            uint16_t k[D];
            float kf[D], y[D], c[D];
            for (int i = 0; i < D; i++) {
                double g = 0.0; /* a sum of 12 uniforms less 6: about N(0, 1) */
                for (int u = 0; u < 12; u++) {
                    s = s * 6364136223846793005ull + 1442695040888963407ull;
                    g += (double)(s >> 11) / 9007199254740992.0;
                }
                k[i] = bf16_from_f32((float)(g - 6.0));
                kf[i] = bf16_to_f32(k[i]);
            }
            uint8_t slot[256] = {0}, idx[D];
            tq_store_key(&lay, &cb, k, slot, NULL);
            const float norm = tq_read_key(&lay, slot, idx);
            if (lay.key_fp8) {
                for (int i = 0; i < D; i++) c[i] = fp8_e4m3_decode(idx[i]), y[i] = kf[i];
            } else {
                tq_rotate_row(kf, D, y); /* compare in the rotated basis */
                for (int i = 0; i < D; i++) c[i] = norm * cb.centroids[idx[i]];
            }
            double dot = 0, a = 0, b = 0;
            for (int i = 0; i < D; i++) dot += (double)y[i] * c[i], a += (double)y[i] * y[i], b += (double)c[i] * c[i];
            const double cs = dot / sqrt(a * b);
            if (cs < worst) worst = cs;
        }
        cr_expect_gt(worst, floor_cos[mi], "%s: worst cosine %g", pg_mode_name(modes[mi]), worst);
        cr_expect_gt(worst, lay.key_fp8 ? 0.95 : 0.85, "vLLM's bound");
    }
}

/* ------------------------------------------------------------ attention */

enum { NQ = 3, NKV = 150 }; /* 150 keys: 32 splits of 5, tiles of 4 and 1 */

typedef struct tq_case {
    attn_batch b;
    int32_t sq, skv;
    uint16_t q[NQ * D], k[NKV * D], v[NKV * D];
} tq_case;

static void case_init(tq_case *c)
{
    memset(c, 0, sizeof *c);
    c->sq = NQ;
    c->skv = NKV;
    c->b = (attn_batch){1, &c->sq, &c->skv, 1, 1, D, 0, 0.0883883476f, NULL};
    uint64_t s = 4242;
    for (int i = 0; i < NQ * D; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        c->q[i] = bf16_from_f32((float)((int)(s >> 40) % 2001 - 1000) / 250.0f);
    }
    for (int i = 0; i < NKV * D; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        c->k[i] = bf16_from_f32((float)((int)(s >> 40) % 2001 - 1000) / 300.0f + (i % D == 5 ? 4.0f : 0.0f));
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        c->v[i] = bf16_from_f32((float)((int)(s >> 40) % 2001 - 1000) / 500.0f);
    }
}

/* How a reference reads the cache (the hypotheses' points, 0 = intended). */
typedef struct ref_read {
    int q_unrotated, norms_dropped, nc_skipped, min_dropped;
} ref_read;

/* The attention of c in double from what mode m's cache holds: scores
 * norm * (q . Pi^T) . c (c re-normalized for _nc) * sm_scale, or q . k8 for
 * fp8 keys; values code x scale + min; a causal softmax in double. Into out
 * [NQ * D]. */
static void reference(pg_mode m, const tq_case *c, ref_read rr, double *out)
{
    tq_cache cache;
    pg_err err = {0};
    cr_assert_eq(tq_cache_write(m, &c->b, c->k, c->v, &cache, NULL, NULL, &err), PG_OK, "%s",
                 err.msg);
    static double kh[NKV][D], vh[NKV][D], nrm[NKV];
    uint8_t codes[D];
    for (int t = 0; t < NKV; t++) {
        const float n = tq_read_key(&cache.lay, tq_cache_slot(&cache, (size_t)t), codes);
        nrm[t] = rr.norms_dropped ? 1.0 : n;
        double sq = 0;
        for (int i = 0; i < D; i++) {
            kh[t][i] = cache.lay.key_fp8 ? fp8_e4m3_decode(codes[i]) : cache.cb.centroids[codes[i]];
            sq += kh[t][i] * kh[t][i];
        }
        if (cache.lay.norm_correction && !rr.nc_skipped)
            for (int i = 0; i < D; i++) kh[t][i] /= sqrt(sq);
        float scale, min;
        tq_read_value(&cache.lay, tq_cache_slot(&cache, (size_t)t), codes, &scale, &min);
        for (int i = 0; i < D; i++) vh[t][i] = (double)codes[i] * scale + (rr.min_dropped ? 0 : min);
    }
    const int mse = !cache.lay.key_fp8;
    tq_cache_free(&cache);
    for (int j = 0; j < NQ; j++) {
        double qv[D];
        for (int i = 0; i < D; i++) {
            qv[i] = bf16_to_f32(c->q[j * D + i]);
        }
        if (mse && !rr.q_unrotated) { /* q . H / sqrt(d) in double */
            double r[D];
            for (int i = 0; i < D; i++) {
                r[i] = 0;
                for (int a = 0; a < D; a++)
                    r[i] += qv[a] * (__builtin_popcount((unsigned)(a & i)) & 1 ? -1.0 : 1.0);
                r[i] /= sqrt((double)D);
            }
            memcpy(qv, r, sizeof qv);
        }
        const int hi = NKV - NQ + j;
        double s[NKV], mx = -INFINITY, l = 0, o[D] = {0};
        for (int t = 0; t <= hi; t++) {
            s[t] = 0;
            for (int i = 0; i < D; i++) s[t] += qv[i] * kh[t][i];
            s[t] *= (mse ? nrm[t] : 1.0) * (double)c->b.sm_scale;
            if (s[t] > mx) mx = s[t];
        }
        for (int t = 0; t <= hi; t++) {
            const double p = exp(s[t] - mx);
            l += p;
            for (int i = 0; i < D; i++) o[i] += p * vh[t][i];
        }
        for (int i = 0; i < D; i++) out[j * D + i] = o[i] / l;
    }
}

/* Relative L2 distance of bf16 out from ref rounded to bf16 as the kernel
 * rounds its output (so that the output's own rounding does not count). */
static double rel_l2(const uint16_t *out, const double *ref)
{
    double num = 0.0, den = 0.0;
    for (int i = 0; i < NQ * D; i++) {
        const double e = bf16_to_f32(out[i]) - bf16_to_f32(bf16_from_f32((float)ref[i]));
        num += e * e;
        den += ref[i] * ref[i];
    }
    return sqrt(num / den);
}

static void run_named(const char *variant, const char *hypothesis, const tq_case *c,
                      unsigned keep, uint16_t *out)
{
    const attn_quant_options o = {.quantize = 1, .q_scale = 1, .k_scale = 1, .v_scale = 1,
                                  .block_size = 16, .page_seed = 1, .keep_bf16 = keep};
    pg_err err = {0};
    if (hypothesis != NULL) {
        const attn_hypothesis *h = attn_hypothesis_find(hypothesis);
        cr_assert_not_null(h, "%s", hypothesis);
        cr_assert_eq(attn_hypothesis_run(h, &c->b, c->q, c->k, c->v, &o, out, 1, &err), PG_OK,
                     "%s: %s", hypothesis, err.msg);
        return;
    }
    const attn_profile *p = NULL;
    cr_assert_eq(attn_profile_find(variant, &p, &err), PG_OK, "%s", err.msg);
    cr_assert_eq(attn_variant_run(p, &c->b, c->q, c->k, c->v, &o, out, NULL, 2, &err), PG_OK,
                 "%s: %s", variant, err.msg);
}

/* The fp32 kernel against the double attention of the same cache, both
 * rounded to bf16: apart only where fp32 sums move an output across a bf16
 * rounding boundary (none on these cases: equal bit for bit, 2026-12-07);
 * each misread moves the output by 1e-2 or far more. */
#define TQ_KERNEL_AGREEMENT 5e-4

Test(kv_turboquant, each_preset_is_the_double_attention_of_its_decoded_cache)
{
    static tq_case c;
    case_init(&c);
    static const pg_mode modes[] = {PG_MODE_TURBOQUANT_K8V4, PG_MODE_TURBOQUANT_4BIT_NC,
                                    PG_MODE_TURBOQUANT_K3V4_NC, PG_MODE_TURBOQUANT_3BIT_NC};
    static double ref[NQ * D], alt[NQ * D];
    uint16_t out[NQ * D];
    for (size_t i = 0; i < 4; i++) {
        reference(modes[i], &c, (ref_read){0, 0, 0, 0}, ref);
        run_named(pg_mode_name(modes[i]), NULL, &c, 0, out);
        const double e = rel_l2(out, ref);
        cr_expect_lt(e, TQ_KERNEL_AGREEMENT, "%s: %g", pg_mode_name(modes[i]), e);
        if (modes[i] == PG_MODE_TURBOQUANT_K8V4) continue;
        reference(modes[i], &c, (ref_read){1, 0, 0, 0}, alt);
        cr_expect_gt(rel_l2(out, alt), 10 * TQ_KERNEL_AGREEMENT, "Q's rotation matters");
        reference(modes[i], &c, (ref_read){0, 0, 1, 0}, alt);
        cr_expect_gt(rel_l2(out, alt), 10 * TQ_KERNEL_AGREEMENT, "%s: norm correction matters",
                     pg_mode_name(modes[i]));
    }
}

Test(kv_turboquant, each_misread_is_its_own_reference)
{
    static tq_case c;
    case_init(&c);
    static const struct {
        const char *name;
        pg_mode m;
        ref_read rr;
    } hyps[] = {
        {"tq-q-unrotated", PG_MODE_TURBOQUANT_4BIT_NC, {1, 0, 0, 0}},
        {"tq-key-norms-dropped", PG_MODE_TURBOQUANT_K3V4_NC, {0, 1, 0, 0}},
        {"tq-nc-skipped", PG_MODE_TURBOQUANT_3BIT_NC, {0, 0, 1, 0}},
        {"tq-value-min-dropped", PG_MODE_TURBOQUANT_K8V4, {0, 0, 0, 1}},
    };
    static double ref[NQ * D], intended[NQ * D];
    uint16_t out[NQ * D];
    for (size_t i = 0; i < sizeof hyps / sizeof hyps[0]; i++) {
        reference(hyps[i].m, &c, hyps[i].rr, ref);
        reference(hyps[i].m, &c, (ref_read){0, 0, 0, 0}, intended);
        run_named(NULL, hyps[i].name, &c, 0, out);
        const double e = rel_l2(out, ref), away = rel_l2(out, intended);
        cr_expect_lt(e, TQ_KERNEL_AGREEMENT, "%s: %g", hyps[i].name, e);
        cr_expect_gt(away, 10 * TQ_KERNEL_AGREEMENT, "%s: %g from the intended one", hyps[i].name,
                     away);
    }
}

Test(kv_turboquant, keeping_k_or_v_bf16_reads_that_tensor_unquantized)
{
    /* K kept: its bf16 rows scored with the unrotated Q; V kept: bf16 values.
     * Both kept is the decode kernel on bf16 K and V: the bf16 attention but
     * for the fp32 split merge (within 1e-3 of the double softmax). */
    static tq_case c;
    case_init(&c);
    uint16_t kept_k[NQ * D], kept_v[NQ * D], both[NQ * D], none[NQ * D];
    run_named("turboquant_3bit_nc", NULL, &c, ATTN_TENSOR_K, kept_k);
    run_named("turboquant_3bit_nc", NULL, &c, ATTN_TENSOR_V, kept_v);
    run_named("turboquant_3bit_nc", NULL, &c, ATTN_TENSOR_K | ATTN_TENSOR_V, both);
    run_named("turboquant_3bit_nc", NULL, &c, 0, none);
    static double exact[NQ * D];
    for (int j = 0; j < NQ; j++) {
        const int hi = NKV - NQ + j;
        double s[NKV], mx = -INFINITY, l = 0, o[D] = {0};
        for (int t = 0; t <= hi; t++) {
            s[t] = 0;
            for (int i = 0; i < D; i++)
                s[t] += (double)bf16_to_f32(c.q[j * D + i]) * bf16_to_f32(c.k[t * D + i]);
            s[t] *= c.b.sm_scale;
            if (s[t] > mx) mx = s[t];
        }
        for (int t = 0; t <= hi; t++) {
            const double p = exp(s[t] - mx);
            l += p;
            for (int i = 0; i < D; i++) o[i] += p * bf16_to_f32(c.v[t * D + i]);
        }
        for (int i = 0; i < D; i++) exact[j * D + i] = o[i] / l;
    }
    const double e_both = rel_l2(both, exact), e_k = rel_l2(kept_k, exact),
                 e_v = rel_l2(kept_v, exact), e_none = rel_l2(none, exact);
    cr_expect_lt(e_both, TQ_KERNEL_AGREEMENT, "both kept: %g", e_both);
    cr_expect_gt(e_k, 10 * TQ_KERNEL_AGREEMENT, "K kept, V quantized: %g", e_k);
    cr_expect_gt(e_v, 10 * TQ_KERNEL_AGREEMENT, "V kept, K quantized: %g", e_v);
    cr_expect_gt(e_none, e_k, "both quantized: %g", e_none);
    cr_expect_gt(e_none, e_v, "both quantized: %g", e_none);
}

Test(kv_turboquant, one_key_gives_its_dequantized_value)
{
    static const int32_t one = 1;
    const attn_batch b = {1, &one, &one, 1, 1, D, 0, 0.088f, NULL};
    uint16_t q[D], k[D], v[D], out[D];
    for (int i = 0; i < D; i++) {
        q[i] = bf16_from_f32((float)(i % 7) - 3.0f);
        k[i] = bf16_from_f32((float)(i % 5) - 2.0f);
        v[i] = bf16_from_f32((float)(i % 16) * 0.25f - 1.0f); /* min -1, max 2.75: scale 0.25 */
    }
    const attn_profile *p = NULL;
    pg_err err = {0};
    cr_assert_eq(attn_profile_find("turboquant_4bit_nc", &p, &err), PG_OK);
    const attn_quant_options o = {.quantize = 1, .q_scale = 1, .k_scale = 1, .v_scale = 1,
                                  .block_size = 16, .page_seed = 1};
    cr_assert_eq(attn_variant_run(p, &b, q, k, v, &o, out, NULL, 1, &err), PG_OK, "%s", err.msg);
    for (int i = 0; i < D; i++) cr_assert_eq(out[i], v[i], "dim %d", i);
}

Test(kv_turboquant, sinks_windows_and_odd_head_dims_are_refused_by_name)
{
    static tq_case c;
    case_init(&c);
    const attn_quant_options o = {.quantize = 1, .q_scale = 1, .k_scale = 1, .v_scale = 1,
                                  .block_size = 16, .page_seed = 1};
    const attn_profile *p = NULL;
    pg_err err = {0};
    cr_assert_eq(attn_profile_find("turboquant_k8v4", &p, &err), PG_OK);
    uint16_t out[NQ * D];
    attn_batch w = c.b;
    w.window = 64;
    cr_expect_eq(attn_variant_run(p, &w, c.q, c.k, c.v, &o, out, NULL, 1, &err),
                 PG_ERR_UNSUPPORTED);
    cr_expect(strstr(err.msg, "sliding window") != NULL, "%s", err.msg);
    const float sinks[1] = {0.5f};
    err = (pg_err){0};
    attn_batch s = c.b;
    s.sinks = sinks;
    const attn_hypothesis *h = attn_hypothesis_find("tq-value-min-dropped");
    cr_expect_eq(attn_hypothesis_run(h, &s, c.q, c.k, c.v, &o, out, 1, &err), PG_ERR_UNSUPPORTED);
    cr_expect(strstr(err.msg, "sinks") != NULL, "%s", err.msg);
}

/* ------------------------------------------------------------ a sweep */

TestSuite(kv_turboquant_cli, .init = tu_scratch_setup, .fini = tu_scratch_teardown);

Test(kv_turboquant_cli, a_sweep_stores_rows_formats_memory_and_advice, .timeout = 120)
{
    char cap[512], sinks[512], db[512], md[512];
    snprintf(cap, sizeof cap, "%s/c.safetensors", tu_dir);
    snprintf(sinks, sizeof sinks, "%s/s.safetensors", tu_dir);
    snprintf(db, sizeof db, "%s/p.db", tu_dir);
    snprintf(md, sizeof md, "%s/r.md", tu_dir);
    char *out = NULL;
    /* gpt-oss's shape (8 KV heads, d 64) without its sinks and windows, which the
     * TurboQuant kernel does not have */
    cr_assert_eq(tu_run_precgatef(&out, "synth -o '%s' --preset gpt-oss-120b --layers 1 --seqs 1 "
                                        "--seq-len 64 --context 16 --no-sinks --window 0", cap),
                 0, "%s", out);
    free(out);
    cr_assert_eq(tu_run_precgatef(&out, "run --capture '%s' --db '%s' --backend cpu --attribute "
                                        "--variants bf16,turboquant_k8v4,turboquant_3bit_nc "
                                        "--no-progress", cap, db), 0, "%s", out);
    free(out);
    sqlite3 *h = tu_db_open("p.db");
    cr_expect_eq(tu_sql_int(h, "SELECT count(*) FROM layer_metrics WHERE head = -1 AND variant "
                               "LIKE 'turboquant_%%@triton' AND rel_l2 > 0"), 2);
    /* attribution: K alone, V alone, none and all */
    cr_expect_eq(tu_sql_int(h, "SELECT count(*) FROM attribution WHERE variant = "
                               "'turboquant_3bit_nc@triton'"), 4);
    const double k_alone = tu_sql_double(h, "SELECT rel_l2 FROM attribution WHERE variant = "
                                            "'turboquant_3bit_nc@triton' AND tensor = 'k'");
    const double v_alone = tu_sql_double(h, "SELECT rel_l2 FROM attribution WHERE variant = "
                                            "'turboquant_3bit_nc@triton' AND tensor = 'v'");
    cr_expect_gt(k_alone, 0.0);
    cr_expect_gt(v_alone, 0.0);
    cr_expect_neq(k_alone, v_alone);
    /* the formats, each tensor its own */
    cr_expect_eq(tu_sql_int(h, "SELECT count(*) FROM kv_format_stats WHERE mode = "
                               "'turboquant_3bit_nc' AND tensor = 'k' AND format = 'lloyd-max' "
                               "AND code_bits = 3 AND codes_used = 8 AND n_scales = 80 * 8"), 1);
    cr_expect_eq(tu_sql_int(h, "SELECT count(*) FROM kv_format_stats WHERE mode = "
                               "'turboquant_3bit_nc' AND tensor = 'v' AND format = 'uint-minmax' "
                               "AND code_bits = 3"), 1);
    cr_expect_eq(tu_sql_int(h, "SELECT count(*) FROM kv_format_stats WHERE mode = "
                               "'turboquant_k8v4' AND tensor = 'k' AND format = 'e4m3' AND "
                               "code_bits = 8 AND n_scales = 0"), 1);
    cr_expect_eq(tu_sql_int(h, "SELECT count(*) FROM kv_format_stats WHERE mode = "
                               "'turboquant_k8v4' AND tensor = 'v' AND format = 'uint-minmax' "
                               "AND code_bits = 4"), 1);
    sqlite3_close(h);
    /* the report: memory per token of the 8 heads (d 64: slots of 100 and 54 bytes) */
    cr_assert_eq(tu_run_precgatef(&out, "report --run 1 --db '%s' -o '%s'", db, md), 0, "%s", out);
    free(out);
    char *mdt = tu_slurp("r.md");
    cr_expect(strstr(mdt, "| turboquant\\_k8v4 | 800 | 60.9% | 21.9% |") != NULL, "%s", mdt);
    cr_expect(strstr(mdt, "| turboquant\\_3bit\\_nc | 432 | 78.9% | 57.8% |") != NULL, "%s", mdt);
    cr_expect(strstr(mdt, "| turboquant\\_k8v4 | k | e4m3 |") != NULL, "%s", mdt);
    cr_expect(strstr(mdt, "| none | - | - |") != NULL, "k8v4's keys have no scales: %s", mdt);
    free(mdt);
    cr_assert_eq(tu_run_precgatef(&out, "advise --run 1 --db '%s' --variant turboquant_3bit_nc "
                                        "--budget 10", db), 0, "%s", out);
    cr_expect(strstr(out, "every layer can keep the turboquant_3bit_nc cache") != NULL, "%s", out);
    cr_expect(strstr(out, "3 (K, lloyd-max codes) and 3 (V, uint-minmax codes) in the "
                          "turboquant_3bit_nc cache, and per token and KV head 2 bytes beside "
                          "K's codes and 4 beside V's") != NULL, "%s", out);
    cr_expect(strstr(out, "432 bytes per token where all-fp8 holds 1024, 57.8% saved") != NULL,
              "%s", out);
    free(out);
    /* a capture with sinks: the cell is stored as not computed, naming what
     * the kernel lacks, and the run completes */
    cr_assert_eq(tu_run_precgatef(&out, "synth -o '%s' --preset gpt-oss-120b --layers 1 --seqs 1 "
                                        "--seq-len 16 --window 0", sinks), 0, "%s", out);
    free(out);
    cr_expect_eq(tu_run_precgatef(&out, "run --capture '%s' --db '%s' --backend cpu --variants "
                                        "bf16,turboquant_k8v4 --no-progress", sinks, db), 0);
    cr_expect(strstr(out, "turboquant_k8v4@triton cannot compute 1 of the 1 layers (every layer: "
                          "the kernel has no attention sinks, and this layer has them)") != NULL,
              "%s", out);
    free(out);
}
