/*
 * test_metrics.c: harness/metrics.c against values computed here.
 *
 *   Closed forms for small hand cases; for the percentile, sorting a copy
 *   with qsort and taking the nearest rank ceil(0.99 n) computed in integer
 *   arithmetic ((99 n + 99) / 100), so neither the selection algorithm nor
 *   the floating-point rank of the code is reused.
 */
#include "kernels/metrics.h"

#include <criterion/criterion.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/numerics.h"

/* Relative tolerance for closed forms that the code evaluates in a different
 * order of operations than the test (a few ulps of double). */
#define REL_TOL 1e-14

/* ---- helpers ------------------------------------------------------------ */

/* Advances *s (xorshift64*, Vigna 2016) and returns 64 random bits; *s != 0. */
static uint64_t t_rand(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *s = x;
    return x * 0x2545F4914F6CDD1Dull;
}

/* A uniform double in [-1, 1). */
static double t_sym(uint64_t *s)
{
    return (double)(t_rand(s) >> 11) * 0x1.0p-52 - 1.0;
}

/* |got - want| <= REL_TOL * |want| (or exact equality, for infinities). */
static int t_close(double got, double want)
{
    if (got == want) return 1;
    return fabs(got - want) <= REL_TOL * fabs(want);
}

/* qsort comparator of doubles (no NaN expected). */
static int t_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The nearest-rank 99th percentile of e[0..n) (n >= 1): sorts a copy and
 * returns its ceil(0.99 n)-th smallest, rank computed in integers. */
static double t_p99(const double *e, size_t n)
{
    double *c = malloc(n * sizeof *c);
    cr_assert_not_null(c);
    memcpy(c, e, n * sizeof *c);
    qsort(c, n, sizeof *c, t_cmp_double);
    size_t rank = (99 * n + 99) / 100; /* ceil(99 n / 100) */
    double r = c[rank - 1];
    free(c);
    return r;
}

/* Runs metrics_compare_bf16 on contiguous out/ref of n elements (one row)
 * with a fresh scratch buffer. */
static pg_metric_values t_metrics(const uint16_t *out, const double *ref, size_t n)
{
    pg_metric_values m;
    memset(&m, 0xA5, sizeof m); /* garbage: every field must be written */
    double *scratch = malloc((n ? n : 1) * sizeof *scratch);
    cr_assert_not_null(scratch);
    metrics_compare_bf16(out, n, ref, n, n ? 1 : 0, n, scratch, &m);
    free(scratch);
    return m;
}

/* Checks m against the errors e[i] = |bf16(out_i) - ref_i| of n finite
 * elements, computed by the caller: max, mean (tolerance), p99 exact, no
 * non-finite counts. */
static void t_check_abs(const pg_metric_values *m, const double *e, size_t n)
{
    double mx = 0, sum = 0;
    for (size_t i = 0; i < n; i++) {
        if (e[i] > mx) mx = e[i];
        sum += e[i];
    }
    cr_assert_eq(m->nan_count, 0);
    cr_assert_eq(m->inf_count, 0);
    cr_assert_eq(m->max_abs, mx, "n %zu: max_abs %.17g, expected %.17g", n, m->max_abs, mx);
    cr_assert(t_close(m->mean_abs, sum / (double)n), "n %zu: mean_abs %.17g, expected %.17g", n,
              m->mean_abs, sum / (double)n);
    double p = t_p99(e, n);
    cr_assert_eq(m->p99_abs, p, "n %zu: p99_abs %.17g, expected %.17g (rank %zu)", n, m->p99_abs,
                 p, (99 * n + 99) / 100);
}

/* n random finite bf16 outputs and fp64 references near them (ref = out +
 * noise of scale `noise`, so errors are distinct doubles); e gets the
 * errors. */
static void t_random_case(uint16_t *out, double *ref, double *e, size_t n, uint64_t seed,
                          double noise)
{
    uint64_t s = seed;
    for (size_t i = 0; i < n; i++) {
        out[i] = bf16_from_f32((float)(4.0 * t_sym(&s)));
        ref[i] = (double)bf16_to_f32(out[i]) + noise * t_sym(&s);
        e[i] = fabs((double)bf16_to_f32(out[i]) - ref[i]);
    }
}

/* ---- exact match ---------------------------------------------------------- */

Test(metrics, identical_output_is_perfect)
{
    const size_t n = 777;
    uint16_t *out = malloc(n * sizeof *out);
    double *ref = malloc(n * sizeof *ref);
    cr_assert(out && ref);
    uint64_t s = 42;
    for (size_t i = 0; i < n; i++) {
        out[i] = bf16_from_f32((float)(10.0 * t_sym(&s)));
        ref[i] = bf16_to_f32(out[i]); /* bf16-representable */
    }
    pg_metric_values m = t_metrics(out, ref, n);
    cr_assert_eq(m.rel_l2, 0.0);
    cr_assert_eq(m.max_abs, 0.0);
    cr_assert_eq(m.mean_abs, 0.0);
    cr_assert_eq(m.p99_abs, 0.0);
    /* <O,R> / (|O| |R|) with |O| = |R| = sqrt(sum x^2): rounding of the two
     * square roots leaves it within a couple of ulps of 1. */
    cr_assert(fabs(m.cos_sim - 1.0) <= 4 * DBL_EPSILON, "cos_sim %.17g", m.cos_sim);
    cr_assert(isinf(m.sqnr_db) && m.sqnr_db > 0, "sqnr_db %g", m.sqnr_db);
    cr_assert_eq(m.nan_count, 0);
    cr_assert_eq(m.inf_count, 0);
    free(out);
    free(ref);
}

/* ---- hand-computed -------------------------------------------------------- */

Test(metrics, hand_computed_1234_vs_1235)
{
    const double ref[4] = {1, 2, 3, 4};
    uint16_t out[4];
    const float o[4] = {1, 2, 3, 5};
    for (int i = 0; i < 4; i++) out[i] = bf16_from_f32(o[i]);
    pg_metric_values m = t_metrics(out, ref, 4);
    /* |R|^2 = 30, |O|^2 = 1+4+9+25 = 39, <O,R> = 1+4+9+20 = 34, |O-R|^2 = 1. */
    const double rel = 1.0 / sqrt(30.0);
    const double sqnr = 20.0 * log10(sqrt(30.0));
    const double cosv = 34.0 / (sqrt(30.0) * sqrt(39.0));
    cr_assert(t_close(m.rel_l2, rel), "rel_l2 %.17g, expected %.17g", m.rel_l2, rel);
    cr_assert_eq(m.max_abs, 1.0);
    cr_assert_eq(m.mean_abs, 0.25);
    cr_assert_eq(m.p99_abs, 1.0, "p99 of {0,0,0,1} (rank 4) is %g", m.p99_abs);
    cr_assert(t_close(m.sqnr_db, sqnr), "sqnr_db %.17g, expected %.17g", m.sqnr_db, sqnr);
    cr_assert(t_close(m.cos_sim, cosv), "cos_sim %.17g, expected %.17g", m.cos_sim, cosv);
    cr_assert_eq(m.nan_count, 0);
    cr_assert_eq(m.inf_count, 0);
}

Test(metrics, hand_computed_signs_and_fractions)
{
    /* out = bf16 exact values; ref off by -0.5, +0.25, 0, +2. */
    const float o[4] = {-1.5f, 0.75f, -2.0f, 8.0f};
    const double ref[4] = {-2.0, 1.0, -2.0, 10.0};
    uint16_t out[4];
    for (int i = 0; i < 4; i++) out[i] = bf16_from_f32(o[i]);
    pg_metric_values m = t_metrics(out, ref, 4);
    const double e2 = 0.25 + 0.0625 + 0 + 4.0, r2 = 4 + 1 + 4 + 100;
    const double o2 = 2.25 + 0.5625 + 4 + 64, dot = 3 + 0.75 + 4 + 80;
    cr_assert(t_close(m.rel_l2, sqrt(e2) / sqrt(r2)), "rel_l2 %.17g", m.rel_l2);
    cr_assert_eq(m.max_abs, 2.0);
    cr_assert_eq(m.mean_abs, 2.75 / 4);
    cr_assert_eq(m.p99_abs, 2.0);
    cr_assert(t_close(m.cos_sim, dot / (sqrt(o2) * sqrt(r2))), "cos_sim %.17g", m.cos_sim);
    cr_assert(t_close(m.sqnr_db, 20 * log10(sqrt(r2) / sqrt(e2))), "sqnr %.17g", m.sqnr_db);
}

/* ---- percentile ----------------------------------------------------------- */

/* Random case of n elements: p99, max and mean against sorting a copy. */
static void t_p99_random(size_t n, uint64_t seed)
{
    uint16_t *out = malloc(n * sizeof *out);
    double *ref = malloc(n * sizeof *ref), *e = malloc(n * sizeof *e);
    cr_assert(out && ref && e);
    t_random_case(out, ref, e, n, seed, 0.01);
    pg_metric_values m = t_metrics(out, ref, n);
    t_check_abs(&m, e, n);
    free(out);
    free(ref);
    free(e);
}

Test(metrics, p99_random_1000)
{
    t_p99_random(1000, 1);
    t_p99_random(1000, 2);
}

Test(metrics, p99_random_12345)
{
    t_p99_random(12345, 3);
}

Test(metrics, p99_many_sizes)
{
    /* Every n from 1 to 400: ranks on and around every multiple of 100. */
    for (size_t n = 1; n <= 400; n++) t_p99_random(n, 1000 + n);
}

Test(metrics, p99_n1_is_the_error)
{
    uint16_t out[1] = {bf16_from_f32(3.0f)};
    double ref[1] = {2.75};
    pg_metric_values m = t_metrics(out, ref, 1);
    cr_assert_eq(m.p99_abs, 0.25);
    cr_assert_eq(m.max_abs, 0.25);
    cr_assert_eq(m.mean_abs, 0.25);
}

Test(metrics, p99_n100_is_99th_smallest)
{
    /* Errors 1..100 (out = 0, ref = -k) shuffled: the 99th smallest is 99. */
    uint16_t out[100];
    double ref[100];
    uint64_t s = 9;
    for (int i = 0; i < 100; i++) {
        out[i] = 0;
        ref[i] = -(double)(i + 1);
    }
    for (int i = 99; i > 0; i--) {
        int j = (int)(t_rand(&s) % (uint64_t)(i + 1));
        double t = ref[i];
        ref[i] = ref[j];
        ref[j] = t;
    }
    pg_metric_values m = t_metrics(out, ref, 100);
    cr_assert_eq(m.p99_abs, 99.0, "p99 of 1..100 is %g, expected 99", m.p99_abs);
    cr_assert_eq(m.max_abs, 100.0);
    cr_assert_eq(m.mean_abs, 50.5);
}

/* n errors drawn from `levels` values 0, 0.5, 1, ...; pattern 0 random,
 * 1 ascending, 2 descending, 3 all equal, 4 organ pipe: p99 etc. exact. */
static void t_p99_ties(size_t n, int levels, int pattern, uint64_t seed)
{
    uint16_t *out = malloc(n * sizeof *out);
    double *ref = malloc(n * sizeof *ref), *e = malloc(n * sizeof *e);
    cr_assert(out && ref && e);
    uint64_t s = seed;
    for (size_t i = 0; i < n; i++) {
        size_t lv;
        switch (pattern) {
        case 0: lv = (size_t)(t_rand(&s) % (uint64_t)levels); break;
        case 1: lv = i * (size_t)levels / n; break;
        case 2: lv = (n - 1 - i) * (size_t)levels / n; break;
        case 3: lv = 1; break;
        default: lv = (i < n / 2 ? i : n - 1 - i) * (size_t)levels / n; break;
        }
        out[i] = bf16_from_f32((float)(0.5 * (double)lv));
        ref[i] = 0.0;
        e[i] = 0.5 * (double)lv;
    }
    pg_metric_values m = t_metrics(out, ref, n);
    t_check_abs(&m, e, n);
    free(out);
    free(ref);
    free(e);
}

Test(metrics, p99_many_ties)
{
    static const size_t ns[] = {1, 2, 3, 99, 100, 101, 199, 200, 1000, 4097, 12345};
    static const int levels[] = {1, 2, 3, 7, 50};
    uint64_t seed = 77;
    for (size_t a = 0; a < sizeof ns / sizeof ns[0]; a++)
        for (size_t b = 0; b < sizeof levels / sizeof levels[0]; b++)
            for (int pat = 0; pat < 5; pat++) t_p99_ties(ns[a], levels[b], pat, seed++);
}

/* ---- strides -------------------------------------------------------------- */

Test(metrics, strided_head_equals_manual_gather)
{
    enum { T = 37, H = 5, D = 24, RPAD = 3 };
    /* out [T, H, D] bf16; ref [T, H, D + RPAD] fp64 (a different stride, to
     * catch out_stride and ref_stride mixed up). */
    uint16_t *out = malloc((size_t)T * H * D * sizeof *out);
    double *ref = malloc((size_t)T * H * (D + RPAD) * sizeof *ref);
    cr_assert(out && ref);
    uint64_t s = 5;
    for (size_t i = 0; i < (size_t)T * H * D; i++) out[i] = bf16_from_f32((float)t_sym(&s));
    for (int t = 0; t < T; t++)
        for (int h = 0; h < H; h++)
            for (int j = 0; j < D + RPAD; j++) {
                size_t ri = ((size_t)t * H + h) * (D + RPAD) + j;
                /* Pads are huge so that reading one shows. */
                ref[ri] = j < D ? (double)bf16_to_f32(out[((size_t)t * H + h) * D + j]) +
                                      0.001 * (double)(h + 1) * t_sym(&s)
                                : 1e30;
            }
    double *scratch = malloc((size_t)T * D * sizeof *scratch);
    uint16_t *go = malloc((size_t)T * D * sizeof *go);
    double *gr = malloc((size_t)T * D * sizeof *gr);
    cr_assert(scratch && go && gr);
    for (int h = 0; h < H; h++) {
        for (int t = 0; t < T; t++)
            for (int j = 0; j < D; j++) {
                go[(size_t)t * D + j] = out[((size_t)t * H + h) * D + j];
                gr[(size_t)t * D + j] = ref[((size_t)t * H + h) * (D + RPAD) + j];
            }
        pg_metric_values ms, mg;
        metrics_compare_bf16(out + (size_t)h * D, (size_t)H * D, ref + (size_t)h * (D + RPAD),
                             (size_t)H * (D + RPAD), T, D, scratch, &ms);
        metrics_compare_bf16(go, D, gr, D, T, D, scratch, &mg);
        /* Same elements in the same order: bit-identical results. */
        cr_assert_eq(ms.rel_l2, mg.rel_l2, "head %d rel_l2 %.17g vs %.17g", h, ms.rel_l2,
                     mg.rel_l2);
        cr_assert_eq(ms.max_abs, mg.max_abs, "head %d", h);
        cr_assert_eq(ms.mean_abs, mg.mean_abs, "head %d", h);
        cr_assert_eq(ms.p99_abs, mg.p99_abs, "head %d", h);
        cr_assert_eq(ms.cos_sim, mg.cos_sim, "head %d", h);
        cr_assert_eq(ms.sqnr_db, mg.sqnr_db, "head %d", h);
        cr_assert_eq(ms.nan_count, 0);
        cr_assert_eq(ms.inf_count, 0);
        /* And the gathered errors against this file's own percentile. */
        double e[T * D];
        for (size_t i = 0; i < (size_t)T * D; i++) e[i] = fabs((double)bf16_to_f32(go[i]) - gr[i]);
        t_check_abs(&ms, e, (size_t)T * D);
        cr_assert_lt(ms.max_abs, 1.0, "head %d: a pad element was read", h);
    }
    free(out);
    free(ref);
    free(scratch);
    free(go);
    free(gr);
}

/* ---- non-finite output ---------------------------------------------------- */

Test(metrics, nan_and_inf_in_output)
{
    const size_t n = 500;
    uint16_t *out = malloc(n * sizeof *out);
    double *ref = malloc(n * sizeof *ref), *e = malloc(n * sizeof *e);
    cr_assert(out && ref && e);
    t_random_case(out, ref, e, n, 11, 0.01);
    out[3] = 0x7FC0;   /* +qNaN */
    out[100] = 0xFFC1; /* -NaN with payload */
    out[499] = 0x7F81; /* sNaN pattern */
    out[7] = 0x7F80;   /* +inf */
    out[250] = 0xFF80; /* -inf */
    pg_metric_values m = t_metrics(out, ref, n);
    cr_assert_eq(m.nan_count, 3, "nan_count %lld", (long long)m.nan_count);
    cr_assert_eq(m.inf_count, 2, "inf_count %lld", (long long)m.inf_count);
    cr_assert(isinf(m.rel_l2) && m.rel_l2 > 0, "rel_l2 %g", m.rel_l2);
    cr_assert(isinf(m.max_abs) && m.max_abs > 0, "max_abs %g", m.max_abs);
    cr_assert(isinf(m.mean_abs) && m.mean_abs > 0, "mean_abs %g", m.mean_abs);
    cr_assert(isinf(m.p99_abs) && m.p99_abs > 0, "p99_abs %g", m.p99_abs);
    cr_assert(isinf(m.sqnr_db) && m.sqnr_db < 0, "sqnr_db %g", m.sqnr_db);
    cr_assert(isnan(m.cos_sim), "cos_sim %g", m.cos_sim);

    /* A single NaN alone (no inf) still poisons everything. */
    t_random_case(out, ref, e, n, 12, 0.01);
    out[0] = 0x7FC0;
    m = t_metrics(out, ref, n);
    cr_assert_eq(m.nan_count, 1);
    cr_assert_eq(m.inf_count, 0);
    cr_assert(isinf(m.rel_l2) && isinf(m.p99_abs) && isinf(m.max_abs) && isinf(m.mean_abs));
    cr_assert(isinf(m.sqnr_db) && m.sqnr_db < 0);
    cr_assert(isnan(m.cos_sim));

    /* A single inf alone, where the reference is inf too (inf - inf = NaN). */
    t_random_case(out, ref, e, n, 13, 0.01);
    out[5] = 0x7F80;
    ref[5] = INFINITY;
    m = t_metrics(out, ref, n);
    cr_assert_eq(m.nan_count, 0);
    cr_assert_eq(m.inf_count, 1);
    cr_assert(isinf(m.rel_l2) && m.rel_l2 > 0 && isinf(m.p99_abs) && m.p99_abs > 0);
    cr_assert(isinf(m.max_abs) && m.max_abs > 0, "max_abs %g", m.max_abs);
    cr_assert(isinf(m.mean_abs) && m.mean_abs > 0, "mean_abs %g", m.mean_abs);
    cr_assert(isinf(m.sqnr_db) && m.sqnr_db < 0);
    cr_assert(isnan(m.cos_sim));
    free(out);
    free(ref);
    free(e);
}

/* ---- zero reference ------------------------------------------------------- */

Test(metrics, zero_reference_zero_output)
{
    uint16_t out[64];
    double ref[64];
    for (int i = 0; i < 64; i++) {
        out[i] = (i & 1) ? 0x8000 : 0x0000; /* -0 and +0 */
        ref[i] = (i & 2) ? -0.0 : 0.0;
    }
    pg_metric_values m = t_metrics(out, ref, 64);
    cr_assert_eq(m.rel_l2, 0.0, "rel_l2 %g", m.rel_l2);
    cr_assert_eq(m.max_abs, 0.0);
    cr_assert_eq(m.mean_abs, 0.0);
    cr_assert_eq(m.p99_abs, 0.0);
    cr_assert(isinf(m.sqnr_db) && m.sqnr_db > 0, "sqnr_db %g", m.sqnr_db);
    cr_assert(!isnan(m.cos_sim), "cos_sim NaN for a finite output");
    cr_assert_eq(m.nan_count, 0);
    cr_assert_eq(m.inf_count, 0);
}

Test(metrics, zero_reference_nonzero_output)
{
    uint16_t out[10];
    double ref[10];
    for (int i = 0; i < 10; i++) {
        out[i] = 0;
        ref[i] = 0.0;
    }
    out[4] = bf16_from_f32(0.5f);
    out[9] = bf16_from_f32(-2.0f);
    pg_metric_values m = t_metrics(out, ref, 10);
    cr_assert(isinf(m.rel_l2) && m.rel_l2 > 0, "rel_l2 %g", m.rel_l2);
    cr_assert_eq(m.max_abs, 2.0);
    cr_assert_eq(m.mean_abs, 0.25);
    cr_assert_eq(m.p99_abs, 2.0);
    cr_assert(isinf(m.sqnr_db) && m.sqnr_db < 0, "sqnr_db %g", m.sqnr_db);
    cr_assert(!isnan(m.cos_sim), "cos_sim NaN for a finite output");
    cr_assert_eq(m.nan_count, 0);
    cr_assert_eq(m.inf_count, 0);
}

Test(metrics, empty_input)
{
    pg_metric_values m = t_metrics(NULL, NULL, 0);
    cr_assert_eq(m.nan_count, 0);
    cr_assert_eq(m.inf_count, 0);
    cr_assert_eq(m.rel_l2, 0.0);
    cr_assert_eq(m.max_abs, 0.0);
    cr_assert_eq(m.p99_abs, 0.0);
}

/* rel_l2 of one bf16 output against another (the diagnosis's distance), by
 * hand: x = (3, 0), y = (0, 4) gives |x - y| / |y| = 5 / 4; x = y gives 0;
 * a zero y gives +inf unless x is zero too (0); any NaN or Inf on either
 * side gives +inf. */
Test(metrics, rel_l2_bf16_known_answers_and_non_finite_sides)
{
    const uint16_t x[2] = {bf16_from_f32(3.0f), bf16_from_f32(0.0f)};
    const uint16_t y[2] = {bf16_from_f32(0.0f), bf16_from_f32(4.0f)};
    const uint16_t zero[2] = {0, 0};
    cr_assert_eq(metrics_rel_l2_bf16(x, y, 2), 1.25);
    cr_assert_eq(metrics_rel_l2_bf16(y, y, 2), 0.0);
    cr_assert_eq(metrics_rel_l2_bf16(x, zero, 2), INFINITY);
    cr_assert_eq(metrics_rel_l2_bf16(zero, zero, 2), 0.0);
    cr_assert_eq(metrics_rel_l2_bf16(x, y, 0), 0.0);
    const uint16_t special[3] = {bf16_from_f32(NAN), bf16_from_f32(INFINITY),
                                 bf16_from_f32(-INFINITY)};
    for (int i = 0; i < 3; i++) {
        const uint16_t bad[2] = {special[i], y[1]};
        cr_assert_eq(metrics_rel_l2_bf16(bad, y, 2), INFINITY, "x special %d", i);
        cr_assert_eq(metrics_rel_l2_bf16(y, bad, 2), INFINITY, "y special %d", i);
    }
    cr_assert_eq(metrics_rel_l2_of(25.0, 16.0, 0), 1.25);
    cr_assert_eq(metrics_rel_l2_of(25.0, 16.0, 1), INFINITY);
}
