/*
 * test_reference_sliced.c: the int8-sliced reference (kernels/attn_reference_sliced.h)
 * against the fp64 reference: exact where its grid holds the values, within
 * ATTN_SLICED_TARGET of it (issue #31 item 5: 1e-7 relative per layer) on
 * the data that stress it (outlier K channels, a massive first token,
 * sinks, windows, GQA, contexts, d 128), and past it once a slice, a pair
 * order or the peak key is dropped; each rounding and the peak key by known
 * answers; a configuration out of range is refused naming its field.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/attn.h"
#include "kernels/attn_reference_sliced.h"
#include "kernels/numerics.h"
#include "base/rng.h"
#include "harness/capture/capture.h"
#include "lifecycle_util.h"
#include "testutil.h"

/* Issue #31 item 5: the sliced reference within 1e-7 of fp64, relative, per layer. */
#define ATTN_SLICED_TARGET 1e-7

/* A layer whose data stress the grid. */
typedef struct layer {
    attn_batch b;
    int32_t sq[3], skv[3];
    float sinks[16];
    uint16_t *q, *k, *v;
    size_t nq, nkv;
} layer;

/* Tokens of the synthetic llama layer: long enough for peaked rows to show. */
#define SYNTH_TOKENS 512


/* n_seqs sequences of sq new tokens after ctx cached ones; K with two
 * channels 30x the others (outlier channels, as RoPE'd keys have), the
 * first key of each sequence 20x (a massive token) and Q correlated with
 * it; V gaussian with one large row. */
static void layer_make(layer *L, int n_seqs, int sq, int ctx, int hq, int hkv, int d, int window,
                       int sinks, uint64_t seed)
{
    memset(L, 0, sizeof *L);
    for (int i = 0; i < n_seqs; i++) {
        L->sq[i] = sq + 7 * i;
        L->skv[i] = L->sq[i] + ctx;
    }
    rng_xoshiro256 s;
    rng_xoshiro_seed(&s, seed);
    for (int h = 0; h < hq; h++) L->sinks[h] = (float)(2.0 * tu_gauss(&s));
    L->b = (attn_batch){n_seqs, L->sq, L->skv, hq, hkv, d, window, 1.0f / sqrtf((float)d),
                        sinks ? L->sinks : NULL};
    L->nq = (size_t)attn_batch_tq(&L->b) * hq * d;
    L->nkv = (size_t)attn_batch_tkv(&L->b) * hkv * d;
    L->q = malloc(L->nq * 2);
    L->k = malloc(L->nkv * 2);
    L->v = malloc(L->nkv * 2);
    for (size_t i = 0; i < L->nq; i++) {
        const int ch = (int)(i % (size_t)d);
        L->q[i] = bf16_from_f32((float)(tu_gauss(&s) + (ch < 2 ? 1.5 : 0.0)));
    }
    int64_t row = 0;
    for (int sqi = 0; sqi < n_seqs; sqi++)
        for (int t = 0; t < L->skv[sqi]; t++, row++)
            for (int g = 0; g < hkv; g++)
                for (int ch = 0; ch < d; ch++) {
                    const size_t i = ((size_t)row * (size_t)hkv + (size_t)g) * (size_t)d + (size_t)ch;
                    const double big = (ch < 2 ? 30.0 : 1.0) * (t == 0 ? 20.0 : 1.0);
                    L->k[i] = bf16_from_f32((float)(big * tu_gauss(&s)));
                    L->v[i] = bf16_from_f32((float)((t == 3 ? 40.0 : 1.0) * tu_gauss(&s)));
                }
}

static void layer_free(layer *L)
{
    free(L->q);
    free(L->k);
    free(L->v);
}

/* L's fp64 reference (L->nq values, the caller's to free). */
static double *reference_of(const layer *L)
{
    double *ref = malloc(L->nq * sizeof *ref);
    pg_err err = {0};
    cr_assert_eq(attn_reference(&L->b, L->q, L->k, L->v, ref, 2, &err), PG_OK, "%s", err.msg);
    return ref;
}

/* rel_l2 of the sliced reference under c against L's fp64 one, ref. */
static double distance(const layer *L, const double *ref, const attn_sliced_config *c)
{
    double *sl = malloc(L->nq * sizeof *sl);
    pg_err err = {0};
    cr_assert_eq(attn_reference_sliced(&L->b, L->q, L->k, L->v, c, sl, 2, &err), PG_OK, "%s",
                 err.msg);
    double num = 0, den = 0;
    for (size_t i = 0; i < L->nq; i++) {
        cr_assert(isfinite(sl[i]), "element %zu: %g", i, sl[i]);
        num += (sl[i] - ref[i]) * (sl[i] - ref[i]);
        den += ref[i] * ref[i];
    }
    free(sl);
    return sqrt(num / den);
}

TestSuite(reference_sliced, .timeout = 120);

/* One key: P = 1 exactly, so O is that key's value row, bit for bit, and on
 * integer inputs the scores are exact too (a second key of equal score
 * halves P exactly). */
Test(reference_sliced, exact_where_the_grid_holds_the_values)
{
    int32_t sq[1] = {2}, skv[1] = {2};
    const int d = 64;
    const attn_batch b = {1, sq, skv, 1, 1, d, 0, 0.125f, NULL};
    uint16_t q[2 * 64], k[2 * 64], v[2 * 64];
    for (int i = 0; i < 2 * d; i++) {
        q[i] = bf16_from_f32((float)((i % 5) - 2));
        k[i] = bf16_from_f32((float)(((i % d) % 3) - 1)); /* two equal key rows */
        v[i] = bf16_from_f32((float)(i - 40) * 0.375f);
    }
    double out[2 * 64], ref[2 * 64];
    pg_err err = {0};
    cr_assert_eq(attn_reference_sliced(&b, q, k, v, &ATTN_SLICED_DEFAULT, out, 1, &err), PG_OK,
                 "%s", err.msg);
    cr_assert_eq(attn_reference(&b, q, k, v, ref, 1, &err), PG_OK);
    for (int i = 0; i < d; i++)  /* row 0 sees key 0 alone */
        cr_assert_eq(out[i], (double)bf16_to_f32(v[i]), "row 0 element %d", i);
    for (int i = 0; i < d; i++)  /* row 1: both keys have the same score */
        cr_assert_eq(out[d + i], 0.5 * (bf16_to_f32(v[i]) + bf16_to_f32(v[d + i])), "row 1 %d", i);
    for (int i = 0; i < 2 * d; i++) cr_assert_eq(out[i], ref[i], "element %d", i);
}

/* The default scheme within the target on every shape that stresses it. */
Test(reference_sliced, within_1e7_of_fp64_with_outliers_sinks_windows_and_gqa)
{
    const struct {
        int n_seqs, sq, ctx, hq, hkv, d, window, sinks;
    } shapes[] = {
        {1, 160, 0, 4, 1, 64, 0, 1},     /* gpt-oss-like: sinks, GQA 4 */
        {2, 90, 40, 8, 2, 64, 48, 1},    /* contexts, a window */
        {3, 70, 25, 4, 4, 128, 0, 0},    /* llama-like d 128, no sinks */
        {1, 200, 0, 2, 1, 64, 17, 0},    /* a window shorter than a tile */
    };
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        layer L;
        layer_make(&L, shapes[i].n_seqs, shapes[i].sq, shapes[i].ctx, shapes[i].hq, shapes[i].hkv,
                   shapes[i].d, shapes[i].window, shapes[i].sinks, 100 + i);
        double *ref = reference_of(&L);
        const double dist = distance(&L, ref, &ATTN_SLICED_DEFAULT);
        cr_assert_leq(dist, ATTN_SLICED_TARGET, "shape %zu: %.3e", i, dist);
        free(ref);
        layer_free(&L);
    }
}

/* Each slice the default keeps is needed: with one fewer the distance leaves
 * the target. Q/K: two slices (notes-reference.md models 1.6e-5 to 6e-5).
 * V: two, where one value row is large. (P: below.) */
Test(reference_sliced, dropping_a_qk_or_v_slice_leaves_the_target)
{
    layer L;
    layer_make(&L, 1, 160, 0, 4, 1, 64, 0, 1, 7);
    double *ref = reference_of(&L);
    attn_sliced_config c = ATTN_SLICED_DEFAULT;
    c.qk_slices = 2;
    c.qk_max_order = 4;
    const double qk = distance(&L, ref, &c);
    c = ATTN_SLICED_DEFAULT;
    c.v_slices = 2;
    const double vv = distance(&L, ref, &c);
    free(ref);
    layer_free(&L);
    cr_assert_gt(qk, ATTN_SLICED_TARGET, "two Q/K slices: %.3e", qk);
    cr_assert_gt(vv, ATTN_SLICED_TARGET, "two V slices: %.3e", vv);
}

/* P, on the synthetic llama-3-8b layer (RoPE'd, a massive first token that
 * takes most rows' weight and has a small value row): the default within the
 * target; past it with the peak key left in the slices (the massive key sets
 * its tile's grid and the tile's other weights keep too few bits), with
 * three P slices, or with P.V order 4. */
Test(reference_sliced_synth, p_needs_four_slices_order_five_and_the_peak_key_out,
     .init = tu_scratch_setup, .fini = tu_scratch_teardown, .timeout = 300)
{
    const char *path = tu_in_dir("l.safetensors");
    lu_synth(path, (lu_synth_opts){.preset = "llama-3-8b", .layers = 1, .seqs = 1,
                                   .seq_len = SYNTH_TOKENS});
    capture *cap = NULL;
    pg_err err = {0};
    cr_assert_eq(capture_open(path, &cap, &err), PG_OK, "%s", err.msg);
    const capture_layer *cl = &cap->layers[0];
    layer L = {.b = {cap->n_seqs, cap->seq_q, cap->seq_kv, cl->hq, cl->hkv, cl->d, cl->window,
                     cl->sm_scale, cl->sinks},
               .q = (uint16_t *)cl->q, .k = (uint16_t *)cl->k, .v = (uint16_t *)cl->v};
    L.nq = (size_t)attn_batch_tq(&L.b) * cl->hq * cl->d;
    double *ref = reference_of(&L);
    const double full = distance(&L, ref, &ATTN_SLICED_DEFAULT);
    attn_sliced_config c = ATTN_SLICED_DEFAULT;
    c.peak_keys = 0;
    const double no_peak = distance(&L, ref, &c);
    c = ATTN_SLICED_DEFAULT;
    c.p_slices = 3;
    const double p = distance(&L, ref, &c);
    c = ATTN_SLICED_DEFAULT;
    c.pv_max_order = 4;
    const double order = distance(&L, ref, &c);
    free(ref);
    capture_close(cap);
    cr_assert_leq(full, ATTN_SLICED_TARGET, "the default: %.3e", full);
    cr_assert_gt(no_peak, ATTN_SLICED_TARGET, "the peak key in the slices: %.3e", no_peak);
    cr_assert_gt(p, ATTN_SLICED_TARGET, "three P slices: %.3e", p);
    cr_assert_gt(order, ATTN_SLICED_TARGET, "P.V order 4: %.3e", order);
}

/* One slice per operand and a 2-key tile, on two keys of equal score (P = 1
 * and 1, exact on any grid) with no peak key taken: V's channel 0 holds 1
 * and 0.625 * 2^-6, on the grid 2^1 with one 7-bit digit, 64 and 0.625.
 * Truncation drops the second (out (1 + 0) / 2), nearest rounds it to one
 * digit, 2^-6 (out (1 + 2^-6) / 2). Channel 1 holds 127.5 / 128 twice:
 * on the grid 2^0 that is the digit 127.5, which truncation makes 127 (out
 * 127 / 128) and nearest would round to 128 (ties to even), so nearest's
 * grid moves up one, to the digit 64 (out 1). */
Test(reference_sliced, each_rounding_gives_its_known_answer)
{
    int32_t sq[1] = {2}, skv[1] = {2};
    const int d = 64;
    const attn_batch b = {1, sq, skv, 1, 1, d, 0, 0.125f, NULL};
    uint16_t q[2 * 64] = {0}, k[2 * 64] = {0}, v[2 * 64] = {0};
    v[0] = bf16_from_f32(1.0f);
    v[d] = bf16_from_f32(0.625f / 64.0f);
    v[1] = bf16_from_f32(127.5f / 128.0f); /* 8 significant bits: exact in bf16 */
    v[d + 1] = bf16_from_f32(127.5f / 128.0f);
    attn_sliced_config c = {1, 2, 1, 1, 2, 2, ATTN_SLICE_TRUNCATE, 0};
    double out[2 * 64];
    pg_err err = {0};
    cr_assert_eq(attn_reference_sliced(&b, q, k, v, &c, out, 1, &err), PG_OK, "%s", err.msg);
    cr_assert_eq(out[d], 0.5, "truncation: %.17g", out[d]);
    cr_assert_eq(out[d + 1], 127.0 / 128.0, "truncation, the top value: %.17g", out[d + 1]);
    c.rounding = ATTN_SLICE_NEAREST;
    cr_assert_eq(attn_reference_sliced(&b, q, k, v, &c, out, 1, &err), PG_OK, "%s", err.msg);
    cr_assert_eq(out[d], 0.5 * (1.0 + 1.0 / 64.0), "nearest: %.17g", out[d]);
    cr_assert_eq(out[d + 1], 1.0, "nearest, the top value: %.17g", out[d + 1]);
    for (int i = 2; i < d; i++) cr_assert_eq(out[d + i], 0.0, "channel %d", i);
    /* Four slices and every pair: the digits of each rounding add back up to
     * the bf16 values exactly, at the top of the grid (where nearest moves
     * it), with mixed signs and with values far below a channel's largest. */
    const float pair[][2] = {{127.5f / 128, -127.5f / 128}, {-1.0f, 0.0078125f},
                             {1.9921875f, -1.984375f},     {-3.0f, 1.5e-5f},
                             {0.75f, 0.7421875f},          {-0.5f, -0.50390625f}};
    const int n_pairs = (int)(sizeof pair / sizeof pair[0]);
    for (int i = 0; i < n_pairs; i++) {
        v[i] = bf16_from_f32(pair[i][0]);
        v[d + i] = bf16_from_f32(pair[i][1]);
    }
    for (int r = 0; r < 2; r++) {
        c = (attn_sliced_config){1, 2, 4, 4, 8, 2, r ? ATTN_SLICE_NEAREST : ATTN_SLICE_TRUNCATE, 0};
        cr_assert_eq(attn_reference_sliced(&b, q, k, v, &c, out, 1, &err), PG_OK, "%s", err.msg);
        for (int i = 0; i < n_pairs; i++)
            cr_assert_eq(out[d + i], 0.5 * ((double)bf16_to_f32(v[i]) + bf16_to_f32(v[d + i])),
                         "rounding %d, channel %d: %.17g", r, i, out[d + i]);
    }
}

/* Two keys whose scores differ by 16 (x 0.125 scaled: P 1 and e^-2): with one
 * P slice on the tile's grid 2^1 the small weight, 0.135 * 64 = 8.66, keeps
 * one digit (8 by truncation, 9 to nearest); with the peak key (weight 1)
 * taken out in fp64 the small weight is alone on its grid 2^-2 (0.135 * 512
 * = 69.3: 69); with two peaks, or one per tile of one key, both are exact. Known answers for row 1, whose V rows are 1 and 0 (channel 0)
 * and 0 and 1 (channel 1), l = 1 + e^-2 exact in fp64 from the scores. */
Test(reference_sliced, the_peak_key_is_taken_exactly_and_out_of_the_slices)
{
    int32_t sq[1] = {2}, skv[1] = {2};
    const int d = 64;
    const attn_batch b = {1, sq, skv, 1, 1, d, 0, 0.125f, NULL};
    uint16_t q[2 * 64] = {0}, k[2 * 64] = {0}, v[2 * 64] = {0};
    q[d] = bf16_from_f32(4.0f);   /* row 1: scores 16 and 0 */
    k[0] = bf16_from_f32(4.0f);
    v[0] = bf16_from_f32(1.0f);
    v[d + 1] = bf16_from_f32(1.0f);
    const double p1 = exp(0.0 * 0.125 - 16.0 * 0.125), l = 1.0 + p1;
    attn_sliced_config c = {4, 5, 1, 1, 2, 64, ATTN_SLICE_TRUNCATE, 0};
    double out[2 * 64];
    pg_err err = {0};
    cr_assert_eq(attn_reference_sliced(&b, q, k, v, &c, out, 1, &err), PG_OK, "%s", err.msg);
    cr_assert_eq(out[d], 1.0 * (1.0 / l), "no peak, truncation, channel 0: %.17g", out[d]);
    cr_assert_eq(out[d + 1], 8.0 / 64.0 * (1.0 / l), "no peak, truncation: %.17g", out[d + 1]);
    c.rounding = ATTN_SLICE_NEAREST;
    cr_assert_eq(attn_reference_sliced(&b, q, k, v, &c, out, 1, &err), PG_OK, "%s", err.msg);
    cr_assert_eq(out[d + 1], 9.0 / 64.0 * (1.0 / l), "no peak, nearest: %.17g", out[d + 1]);
    c.peak_keys = 1;
    cr_assert_eq(attn_reference_sliced(&b, q, k, v, &c, out, 1, &err), PG_OK, "%s", err.msg);
    cr_assert_eq(out[d], 1.0 * (1.0 / l), "peak: channel 0 is the peak's, exact: %.17g", out[d]);
    cr_assert_eq(out[d + 1], 69.0 / 512.0 * (1.0 / l), "peak: %.17g", out[d + 1]);
    c.peak_keys = 2; /* both keys exact: the fp64 reference's weights */
    cr_assert_eq(attn_reference_sliced(&b, q, k, v, &c, out, 1, &err), PG_OK, "%s", err.msg);
    cr_assert_eq(out[d + 1], p1 * (1.0 / l), "two peaks: %.17g", out[d + 1]);
    c.peak_keys = 1; /* one key per tile: each is its tile's peak, exact */
    c.key_tile = 1;
    cr_assert_eq(attn_reference_sliced(&b, q, k, v, &c, out, 1, &err), PG_OK, "%s", err.msg);
    cr_assert_eq(out[d + 1], p1 * (1.0 / l), "a peak per tile: %.17g", out[d + 1]);
}

/* One key per tile and scaled scores 0, 300 and 1088 (q 16 on channel 0,
 * keys 0, 150 and 544, x 0.125): each rise passes the lazy maximum's margin,
 * so l and acc are rescaled (by e^-300, then e^-788 = 0 in fp64). Row 2's
 * output is key 2's value row exactly, as the fp64 reference's; without the
 * rescale its weight e^1088 overflows, and with l alone rescaled key 0's
 * and 1's value rows stay in it. */
Test(reference_sliced, scores_rising_past_the_margin_rescale_l_and_the_output)
{
    int32_t sq[1] = {3}, skv[1] = {3};
    const int d = 64;
    const attn_batch b = {1, sq, skv, 1, 1, d, 0, 0.125f, NULL};
    uint16_t q[3 * 64] = {0}, k[3 * 64] = {0}, v[3 * 64];
    const float key[3] = {0.0f, 150.0f, 544.0f};
    for (int r = 0; r < 3; r++) {
        q[r * d] = bf16_from_f32(16.0f);
        k[r * d] = bf16_from_f32(key[r]);
        for (int i = 0; i < d; i++) v[r * d + i] = bf16_from_f32((float)(r + 1) + 0.25f * (float)i);
    }
    const attn_sliced_config c = {4, 5, 4, 4, 5, 1, ATTN_SLICE_NEAREST, 0};
    double out[3 * 64], ref[3 * 64];
    pg_err err = {0};
    cr_assert_eq(attn_reference_sliced(&b, q, k, v, &c, out, 1, &err), PG_OK, "%s", err.msg);
    cr_assert_eq(attn_reference(&b, q, k, v, ref, 1, &err), PG_OK, "%s", err.msg);
    for (int i = 0; i < d; i++) {
        cr_assert_eq(out[2 * d + i], (double)bf16_to_f32(v[2 * d + i]), "row 2, %d: %.17g", i,
                     out[2 * d + i]);
        cr_assert_eq(out[2 * d + i], ref[2 * d + i], "row 2, %d", i);
        cr_assert_eq(out[d + i], ref[d + i], "row 1, %d: %.17g against %.17g", i, out[d + i],
                     ref[d + i]);
    }
}

Test(reference_sliced, a_configuration_out_of_range_is_refused_naming_its_field)
{
    const attn_slice_rounding n = ATTN_SLICE_NEAREST;
    const attn_sliced_config bad[] = {
        {0, 5, 4, 3, 5, 64, n, 1},  {6, 5, 4, 3, 5, 64, n, 1},
        {4, 1, 4, 3, 5, 64, n, 1},  {4, 5, 4, 3, 11, 64, n, 1},
        {4, 5, 4, 3, 5, 0, n, 1},   {4, 5, 4, 3, 5, ATTN_SLICED_MAX_KEY_TILE + 1, n, 1},
        {4, 5, 4, 3, 5, 64, (attn_slice_rounding)2, 1},
        {4, 5, 4, 3, 5, 64, n, -1}, {4, 5, 4, 3, 5, 64, n, ATTN_SLICED_MAX_PEAK_KEYS + 1},
    };
    const char *field[] = {"qk_slices", "qk_slices", "qk_max_order", "pv_max_order", "key_tile",
                           "key_tile", "rounding", "peak_keys", "peak_keys"};
    int32_t sq[1] = {1}, skv[1] = {1};
    const attn_batch b = {1, sq, skv, 1, 1, 64, 0, 0.125f, NULL};
    uint16_t x[64] = {0};
    double out[64];
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        pg_err err = {0};
        cr_assert_eq(attn_reference_sliced(&b, x, x, x, &bad[i], out, 1, &err), PG_ERR_USAGE,
                     "config %zu", i);
        cr_assert_not_null(strstr(err.msg, field[i]), "config %zu: %s", i, err.msg);
    }
    pg_err err = {0};
    cr_assert_eq(attn_reference_sliced(&b, x, x, x, NULL, out, 1, &err), PG_ERR_USAGE);
    /* an Inf or a NaN in any operand, alone among finite values */
    const uint16_t bad_value[2] = {0x7F80 /* +Inf */, 0x7FC0 /* NaN */};
    for (int w = 0; w < 3; w++)
        for (int i = 0; i < 2; i++) {
            uint16_t y[3][64];
            for (int j = 0; j < 64; j++) y[0][j] = y[1][j] = y[2][j] = bf16_from_f32(0.5f);
            y[w][5] = bad_value[i];
            pg_err e2 = {0};
            cr_assert_eq(attn_reference_sliced(&b, y[0], y[1], y[2], &ATTN_SLICED_DEFAULT, out, 1,
                                               &e2), PG_ERR_NUMERIC, "operand %d value %d", w, i);
            cr_assert_not_null(strstr(e2.msg, "Inf or NaN"), "%s", e2.msg);
        }
    const attn_batch no_heads = {1, sq, skv, 0, 1, 64, 0, 0.125f, NULL};
    cr_assert_neq(attn_reference_sliced(&no_heads, x, x, x, &ATTN_SLICED_DEFAULT, out, 1, &err),
                  PG_OK);
}
