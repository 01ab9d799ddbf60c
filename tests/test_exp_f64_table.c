/*
 * test_exp_f64_table.c: kernels/exp_f64_table.h (the GPU reference's softmax
 * exp) against long double expl, over its whole range: a dense grid and
 * random points, the table's own points, and the range's ends. The same
 * header is compiled into the CUDA kernel, so this holds the device's
 * arithmetic too (fma and the bit moves are IEEE on both).
 */
#include "kernels/exp_f64_table.h"

#include <criterion/criterion.h>
#include <float.h>
#include <math.h>
#include <stdint.h>

#include "base/rng.h"

/* Dense grid points and random points over the range. */
#define EXP_TEST_GRID 2000000
#define EXP_TEST_RANDOM 1000000
#define EXP_TEST_SEED 20261202u

/* The table, as the kernel holds it. */
static const double exp_table[EXP_F64_TABLE_SIZE] = {EXP_F64_TABLE_VALUES};

/* Error of y in ulp of the exact value e (computed in long double). */
static double ulp_error(double y, long double e)
{
    const double ed = (double)e;
    const double ulp = ldexp(1.0, ilogb(ed) - (DBL_MANT_DIG - 1));
    return (double)(fabsl((long double)y - e) / ulp);
}

/* The larger of worst and exp_f64_table(x)'s ulp error; *at = x when it is x's. */
static double worst_ulp(double x, const double *t, double worst, double *at)
{
    const double err = ulp_error(exp_f64_table(x, t), expl((long double)x));
    if (err > worst) *at = x;
    return err > worst ? err : worst;
}

Test(exp_f64_table, within_max_ulp_over_the_range)
{
    const double *t = exp_table;
    double worst = 0, at = 0;
    const double span = EXP_F64_TABLE_MAX - EXP_F64_TABLE_MIN;
    for (int i = 0; i <= EXP_TEST_GRID; i++)
        worst = worst_ulp(EXP_F64_TABLE_MIN + span * i / EXP_TEST_GRID, t, worst, &at);
    rng_xoshiro256 r;
    rng_xoshiro_seed(&r, EXP_TEST_SEED);
    for (int i = 0; i < EXP_TEST_RANDOM; i++) {
        const double u = (double)(rng_xoshiro_next(&r) >> 11) * 0x1p-53; /* [0, 1) */
        /* Half over the whole range, half over [-40, 0] where softmax weights live. */
        const double x = (i % 2) ? EXP_F64_TABLE_MIN + span * u : -40.0 * u;
        worst = worst_ulp(x, t, worst, &at);
    }
    cr_log_info("exp_f64_table: largest error %.3f ulp at x = %.17g", worst, at);
    cr_expect(worst <= EXP_F64_TABLE_MAX_ULP, "%.3f ulp at x = %.17g (bound %.1f)", worst, at,
              EXP_F64_TABLE_MAX_ULP);
}

Test(exp_f64_table, table_is_2_to_the_j_over_64_correctly_rounded)
{
    const double *t = exp_table;
    for (int j = 0; j < EXP_F64_TABLE_SIZE; j++) {
        const long double e = exp2l((long double)j / EXP_F64_TABLE_SIZE);
        /* within half an ulp (long double's own error is 2^-11 of that) */
        cr_expect(ulp_error(t[j], e) <= 0.5 + 0x1p-10, "entry %d: %.3f ulp", j, ulp_error(t[j], e));
    }
}

Test(exp_f64_table, table_points_and_small_arguments)
{
    const double *t = exp_table;
    cr_expect_eq(exp_f64_table(0.0, t), 1.0, "exp(0) must be exactly 1");
    cr_expect_eq(exp_f64_table(-0.0, t), 1.0, "exp(-0) must be exactly 1");
    /* x = k ln2 / 64 for every table entry and a few octaves: r ~ 0. */
    double worst = 0, at = 0;
    for (int k = -64 * 20; k <= 64 * 20; k++) worst = worst_ulp(k * (M_LN2 / 64), t, worst, &at);
    /* Tiny arguments: e^x = 1 + x to within an ulp. */
    for (int e = -60; e <= -10; e++) {
        worst = worst_ulp(ldexp(1.0, e), t, worst, &at);
        worst = worst_ulp(-ldexp(1.0, e), t, worst, &at);
    }
    cr_expect(worst <= EXP_F64_TABLE_MAX_ULP, "%.3f ulp at x = %.17g", worst, at);
}

Test(exp_f64_table, ends_of_the_range_are_normal_and_accurate)
{
    const double *t = exp_table;
    const double lo = exp_f64_table(EXP_F64_TABLE_MIN, t), hi = exp_f64_table(EXP_F64_TABLE_MAX, t);
    cr_expect(isnormal(lo) && isnormal(hi), "exp(%g) = %g, exp(%g) = %g", EXP_F64_TABLE_MIN, lo,
              EXP_F64_TABLE_MAX, hi);
    cr_expect(ulp_error(lo, expl((long double)EXP_F64_TABLE_MIN)) <= EXP_F64_TABLE_MAX_ULP);
    cr_expect(ulp_error(hi, expl((long double)EXP_F64_TABLE_MAX)) <= EXP_F64_TABLE_MAX_ULP);
}
