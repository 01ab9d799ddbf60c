/*
 * test_reference_sliced.c: the int8-sliced reference (kernels/attn_reference_sliced.h)
 * against the fp64 reference: exact where its grid holds the values, within
 * ATTN_SLICED_TARGET of it (issue #31 item 5: 1e-7 relative per layer) on
 * the data that stress it (outlier K channels, a massive first token,
 * sinks, windows, GQA, contexts, d 128), and past it once a slice is
 * dropped, as notes-reference.md models; a configuration out of range is
 * refused naming its field.
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

/* rel_l2 of the sliced reference under c against the fp64 one on L. */
static double distance(const layer *L, const attn_sliced_config *c)
{
    double *ref = malloc(L->nq * sizeof *ref), *sl = malloc(L->nq * sizeof *sl);
    pg_err err = {0};
    cr_assert_eq(attn_reference(&L->b, L->q, L->k, L->v, ref, 2, &err), PG_OK, "%s", err.msg);
    cr_assert_eq(attn_reference_sliced(&L->b, L->q, L->k, L->v, c, sl, 2, &err), PG_OK, "%s",
                 err.msg);
    double num = 0, den = 0;
    for (size_t i = 0; i < L->nq; i++) {
        cr_assert(isfinite(sl[i]), "element %zu: %g", i, sl[i]);
        num += (sl[i] - ref[i]) * (sl[i] - ref[i]);
        den += ref[i] * ref[i];
    }
    free(ref);
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
        const double dist = distance(&L, &ATTN_SLICED_DEFAULT);
        cr_assert_leq(dist, ATTN_SLICED_TARGET, "shape %zu: %.3e", i, dist);
        layer_free(&L);
    }
}

/* Each slice the default keeps is needed: with one fewer the distance leaves
 * the target. Q/K: two slices (notes-reference.md models 1.6e-5 to 6e-5).
 * V: three, where one value row is large. (P: below.) */
Test(reference_sliced, dropping_a_qk_or_v_slice_leaves_the_target)
{
    layer L;
    layer_make(&L, 1, 160, 0, 4, 1, 64, 0, 1, 7);
    attn_sliced_config c = ATTN_SLICED_DEFAULT;
    c.qk_slices = 2;
    c.qk_max_order = 4;
    const double qk = distance(&L, &c);
    c = ATTN_SLICED_DEFAULT;
    c.v_slices = 3;
    c.pv_max_order = 7;
    const double vv = distance(&L, &c);
    layer_free(&L);
    cr_assert_gt(qk, ATTN_SLICED_TARGET, "two Q/K slices: %.3e", qk);
    cr_assert_gt(vv, ATTN_SLICED_TARGET, "three V slices: %.3e", vv);
}

/* P's slices and the P.V order, on the synthetic llama-3-8b layer (RoPE'd,
 * queries correlated with keys: peaked rows, whose weights in one key tile
 * span many orders of magnitude): the default within the target, four P
 * slices or P.V order 5 past it. */
Test(reference_sliced_synth, p_needs_five_slices_and_order_six_on_peaked_rows,
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
    const double full = distance(&L, &ATTN_SLICED_DEFAULT);
    attn_sliced_config c = ATTN_SLICED_DEFAULT;
    c.p_slices = 4;
    const double p = distance(&L, &c);
    c = ATTN_SLICED_DEFAULT;
    c.pv_max_order = 5;
    const double order = distance(&L, &c);
    capture_close(cap);
    cr_assert_leq(full, ATTN_SLICED_TARGET, "the default: %.3e", full);
    cr_assert_gt(p, ATTN_SLICED_TARGET, "four P slices: %.3e", p);
    cr_assert_gt(order, ATTN_SLICED_TARGET, "P.V order 5: %.3e", order);
}

Test(reference_sliced, a_configuration_out_of_range_is_refused_naming_its_field)
{
    const attn_sliced_config bad[] = {
        {0, 5, 4, 3, 5, 64}, {6, 5, 4, 3, 5, 64}, {4, 1, 4, 3, 5, 64},
        {4, 5, 4, 3, 11, 64}, {4, 5, 4, 3, 5, 0},  {4, 5, 4, 3, 5, ATTN_SLICED_MAX_KEY_TILE + 1},
    };
    const char *field[] = {"qk_slices", "qk_slices", "qk_max_order", "pv_max_order", "key_tile",
                           "key_tile"};
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
    const attn_batch no_heads = {1, sq, skv, 0, 1, 64, 0, 0.125f, NULL};
    cr_assert_neq(attn_reference_sliced(&no_heads, x, x, x, &ATTN_SLICED_DEFAULT, out, 1, &err),
                  PG_OK);
}
