/* test_score.c: Criterion tests of the end-task eval statistics (evals/score.h) against hand values. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "evals/score.h"

/* Tolerance for values computed in a few floating operations. */
#define TIGHT 1e-12

/* Shorthands for cells. */
#define OK1 {EVAL_SAMPLE_OK, 1}
#define OK0 {EVAL_SAMPLE_OK, 0}
#define TR0 {EVAL_SAMPLE_TRUNCATED, 0}
#define TR1 {EVAL_SAMPLE_TRUNCATED, 1}
#define ERR {EVAL_SAMPLE_ERROR, 0}
#define MIS {EVAL_SAMPLE_MISSING, 0}

/* |got - want| <= tol * max(1, |want|). */
static void expect_close(double got, double want, double tol, const char *what)
{
    double scale = fabs(want) > 1.0 ? fabs(want) : 1.0;
    cr_expect(fabs(got - want) <= tol * scale, "%s: got %.17g, want %.17g", what, got, want);
}

/*
 * The hand table: 4 problems x K = 4.
 *   P0: 1 1 1 1          n=4 c=4  s=1
 *   P1: 1 0 0 0          n=4 c=1  s=1/4
 *   P2: 0 0 0 0          n=4 c=0  s=0
 *   P3: 1 1 err trunc0   n=3 c=2  s=2/3  (the error is left out, the truncation counts)
 */
static eval_cell hand_cells[] = {
    OK1, OK1, OK1, OK1,
    OK1, OK0, OK0, OK0,
    OK0, OK0, OK0, OK0,
    OK1, OK1, ERR, TR0,
};

static eval_table hand_table(void)
{
    return (eval_table){.n_problems = 4, .k = 4, .cells = hand_cells, .problem_ids = NULL};
}

Test(score, avg_at_k_is_mean_of_problem_means_with_errors_excluded)
{
    eval_table t = hand_table();
    eval_score sc;
    pg_err err = {0};
    cr_assert_eq(eval_score_compute(&t, &sc, &err), PG_OK, "%s", err.msg);
    /* (1 + 1/4 + 0 + 2/3) / 4 = 23/48; pooled over samples it would be 7/15,
     * and counting the error as wrong would give P3 = 1/2 and 0.4375. */
    expect_close(sc.accuracy, 23.0 / 48.0, TIGHT, "accuracy");
    cr_expect_eq(sc.n_problems, 4);
    cr_expect_eq(sc.n_scored, 4);
    cr_expect_eq(sc.n_empty, 0);
    cr_expect_eq(sc.k, 4);
    cr_expect_eq(sc.n_valid, 15);
    cr_expect_eq(sc.n_errors, 1);
    cr_expect_eq(sc.n_truncated, 1);
    cr_expect_eq(sc.n_missing, 0);
    expect_close(sc.problem_mean[0], 1.0, TIGHT, "s0");
    expect_close(sc.problem_mean[1], 0.25, TIGHT, "s1");
    expect_close(sc.problem_mean[2], 0.0, TIGHT, "s2");
    expect_close(sc.problem_mean[3], 2.0 / 3.0, TIGHT, "s3");
    eval_score_free(&sc);
    cr_expect_null(sc.pass_at);
}

Test(score, clustered_se_by_hand)
{
    eval_table t = hand_table();
    eval_score sc;
    pg_err err = {0};
    cr_assert_eq(eval_score_compute(&t, &sc, &err), PG_OK, "%s", err.msg);
    /* Deviations from 23/48 in 48ths: 25, -11, -23, 9; squares sum 1356/48^2.
     * var = 1356/2304/3, SE = sqrt(var/4) = sqrt(1356/(2304*12)) = sqrt(452)/96. */
    expect_close(sc.se, sqrt(452.0) / 96.0, TIGHT, "se");
    expect_close(sc.se, 0.22146, 1e-5, "se (decimal)");
    eval_score_free(&sc);
}

Test(score, clustered_se_equals_cluster_robust_se_for_equal_k)
{
    /* Miller (2024)'s clustered SE on the 3 x 2 samples, with the C/(C-1)
     * factor: sqrt(C/(C-1) * sum_c (sum_j (x_cj - xbar))^2) / N. */
    eval_cell cells[] = {OK1, OK1, OK1, OK0, OK0, OK0};
    eval_table t = {.n_problems = 3, .k = 2, .cells = cells};
    eval_score sc;
    pg_err err = {0};
    cr_assert_eq(eval_score_compute(&t, &sc, &err), PG_OK, "%s", err.msg);
    const double x[3][2] = {{1, 1}, {1, 0}, {0, 0}};
    const double xbar = 0.5, C = 3, N = 6;
    double ss = 0;
    for (int c = 0; c < 3; c++) {
        double r = (x[c][0] - xbar) + (x[c][1] - xbar);
        ss += r * r;
    }
    expect_close(sc.se, sqrt(C / (C - 1) * ss) / N, TIGHT, "se vs cluster-robust");
    expect_close(sc.se, sqrt(1.0 / 12.0), TIGHT, "se by hand");
    eval_score_free(&sc);
}

Test(score, pass_at_k_by_hand)
{
    eval_table t = hand_table();
    eval_score sc;
    pg_err err = {0};
    cr_assert_eq(eval_score_compute(&t, &sc, &err), PG_OK, "%s", err.msg);
    /* pass@1 = avg@K (bit for bit) when every problem has a valid sample. */
    expect_close(sc.pass_at[0], 23.0 / 48.0, TIGHT, "pass@1");
    cr_expect_eq(sc.pass_at[0], sc.accuracy);
    /* pass@2: P0 1, P1 1 - C(3,2)/C(4,2) = 1/2, P2 0, P3 (n-c = 1 < 2) 1. */
    expect_close(sc.pass_at[1], 2.5 / 4.0, TIGHT, "pass@2");
    /* pass@3: P1 1 - C(3,3)/C(4,3) = 3/4. */
    expect_close(sc.pass_at[2], 2.75 / 4.0, TIGHT, "pass@3");
    /* pass@4: P3 (n = 3) cannot enter; P1 (n-c = 3 < 4) 1. */
    expect_close(sc.pass_at[3], 2.0 / 3.0, TIGHT, "pass@4");
    cr_expect_eq(sc.pass_at_n[0], 4);
    cr_expect_eq(sc.pass_at_n[2], 4);
    cr_expect_eq(sc.pass_at_n[3], 3);
    eval_score_free(&sc);
}

/* The fraction of k-subsets of n samples (the first c correct) holding a correct one. */
static double brute_pass_at_k(unsigned n, unsigned c, unsigned k)
{
    unsigned long total = 0, hit = 0;
    const unsigned correct_mask = (1u << c) - 1u;
    for (unsigned m = 0; m < (1u << n); m++) {
        if ((unsigned)__builtin_popcount(m) != k) continue;
        total++;
        if (m & correct_mask) hit++;
    }
    return (double)hit / (double)total;
}

Test(score, pass_at_k_matches_brute_force_over_subsets)
{
    for (unsigned n = 1; n <= 12; n++)
        for (unsigned c = 0; c <= n; c++)
            for (unsigned k = 1; k <= n; k++) {
                char what[64];
                snprintf(what, sizeof what, "pass@%u n=%u c=%u", k, n, c);
                expect_close(eval_pass_at_k(n, c, k), brute_pass_at_k(n, c, k), 1e-13, what);
            }
    cr_expect(isnan(eval_pass_at_k(3, 1, 4)), "k > n is undefined");
    cr_expect(isnan(eval_pass_at_k(3, 1, 0)), "k = 0 is undefined");
    cr_expect(isnan(eval_pass_at_k(3, 4, 1)), "c > n is undefined");
    /* Stable where the binomials overflow: n = 2000, c = 1, k = 1000 -> 1/2. */
    expect_close(eval_pass_at_k(2000, 1, 1000), 0.5, 1e-12, "pass@1000 of 2000");
}

Test(score, problems_without_valid_samples_are_excluded_and_counted)
{
    eval_cell cells[] = {
        OK1, OK0, ERR,   /* 1/2 */
        ERR, ERR, MIS,   /* nothing valid: excluded */
        TR1, OK1, OK1,   /* 3/3: a truncated sample graded correct counts */
    };
    eval_table t = {.n_problems = 3, .k = 3, .cells = cells};
    eval_score sc;
    pg_err err = {0};
    cr_assert_eq(eval_score_compute(&t, &sc, &err), PG_OK, "%s", err.msg);
    expect_close(sc.accuracy, 0.75, TIGHT, "accuracy over the 2 scored problems");
    cr_expect_eq(sc.n_scored, 2);
    cr_expect_eq(sc.n_empty, 1);
    cr_expect_eq(sc.n_errors, 3);
    cr_expect_eq(sc.n_missing, 1);
    cr_expect_eq(sc.n_truncated, 1);
    cr_expect(isnan(sc.problem_mean[1]));
    /* pass@3 only from the problem with 3 valid samples. */
    cr_expect_eq(sc.pass_at_n[2], 1);
    expect_close(sc.pass_at[2], 1.0, TIGHT, "pass@3");
    expect_close(sc.pass_at[1], (1.0 + 1.0) / 2.0, TIGHT, "pass@2");   /* 1/2 has n-c = 1 < 2 */
    eval_score_free(&sc);
}

Test(score, all_errors_give_nan_not_zero)
{
    eval_cell cells[] = {ERR, ERR};
    eval_table t = {.n_problems = 2, .k = 1, .cells = cells};
    eval_score sc;
    pg_err err = {0};
    cr_assert_eq(eval_score_compute(&t, &sc, &err), PG_OK, "%s", err.msg);
    cr_expect(isnan(sc.accuracy));
    cr_expect(isnan(sc.se));
    cr_expect(isnan(sc.ci_low) && isnan(sc.ci_high));
    cr_expect(isnan(sc.pass_at[0]));
    cr_expect_eq(sc.n_empty, 2);
    eval_score_free(&sc);
}

Test(score, bootstrap_ci_is_deterministic_and_contains_the_mean)
{
    eval_table t = hand_table();
    eval_score a, b;
    pg_err err = {0};
    cr_assert_eq(eval_score_compute(&t, &a, &err), PG_OK, "%s", err.msg);
    cr_assert_eq(eval_score_compute(&t, &b, &err), PG_OK, "%s", err.msg);
    cr_expect_eq(memcmp(&a.ci_low, &b.ci_low, sizeof a.ci_low), 0, "same bits");
    cr_expect_eq(memcmp(&a.ci_high, &b.ci_high, sizeof a.ci_high), 0, "same bits");
    cr_expect_lt(a.ci_low, a.accuracy);
    cr_expect_gt(a.ci_high, a.accuracy);
    cr_expect_geq(a.ci_low, 0.0);
    cr_expect_leq(a.ci_high, 1.0);
    /* 4 problems: the smallest resample mean is 0 (all P2) w.p. 4^-4, well
     * inside the 2.5% tail, so the bound sits above it. */
    cr_expect_gt(a.ci_low, 0.0);
    eval_score_free(&a);
    eval_score_free(&b);
}

Test(score, bootstrap_two_values_has_known_quantiles)
{
    /* Resample means of {0, 1} are 0, 1/2, 1 w.p. 1/4, 1/2, 1/4: the 2.5%
     * and 97.5% quantiles are 0 and 1 for any seed. */
    const double x[] = {0.0, 1.0};
    double lo, hi;
    pg_err err = {0};
    cr_assert_eq(eval_bootstrap_ci(x, 2, EVAL_BOOTSTRAP_B, 1, 0.95, &lo, &hi, &err), PG_OK);
    cr_expect_eq(lo, 0.0);
    cr_expect_eq(hi, 1.0);
    /* A 40% interval lies strictly inside: its quantiles are both 1/2. */
    cr_assert_eq(eval_bootstrap_ci(x, 2, EVAL_BOOTSTRAP_B, 1, 0.40, &lo, &hi, &err), PG_OK);
    cr_expect_eq(lo, 0.5);
    cr_expect_eq(hi, 0.5);
    /* Fewer than 2 values: undefined. */
    cr_assert_eq(eval_bootstrap_ci(x, 1, EVAL_BOOTSTRAP_B, 1, 0.95, &lo, &hi, &err), PG_OK);
    cr_expect(isnan(lo) && isnan(hi));
    cr_expect_eq(eval_bootstrap_ci(x, 2, 100, 1, 1.5, &lo, &hi, &err), PG_ERR_INTERNAL);
}

Test(score, bootstrap_width_matches_normal_theory_for_large_n)
{
    /* n = 400 values: the percentile interval is close to mean +- 1.96 SE
     * with the plug-in SE sqrt(sum (x - mean)^2 / n) / sqrt(n). */
    enum { N = 400 };
    double x[N];
    double sum = 0;
    for (int i = 0; i < N; i++) {
        x[i] = (double)(i % 5) / 4.0;
        sum += x[i];
    }
    const double mean = sum / N;
    double ss = 0;
    for (int i = 0; i < N; i++) ss += (x[i] - mean) * (x[i] - mean);
    const double se = sqrt(ss / N) / sqrt((double)N);
    double lo, hi;
    pg_err err = {0};
    cr_assert_eq(eval_bootstrap_ci(x, N, EVAL_BOOTSTRAP_B, EVAL_BOOTSTRAP_SEED, 0.95, &lo, &hi,
                                   &err), PG_OK);
    const double ratio = (hi - lo) / (2.0 * EVAL_Z_975 * se);
    cr_expect(ratio > 0.95 && ratio < 1.05, "width / normal width = %g", ratio);
    cr_expect(fabs((lo + hi) / 2.0 - mean) < 0.1 * se, "centre %g vs mean %g", (lo + hi) / 2, mean);
}

Test(score, wilson_for_k1_only)
{
    eval_cell cells[] = {OK1, OK1, OK1, OK1, OK1, OK1, OK1, OK0, OK0, OK0};
    eval_table t = {.n_problems = 10, .k = 1, .cells = cells};
    eval_score sc;
    pg_err err = {0};
    cr_assert_eq(eval_score_compute(&t, &sc, &err), PG_OK, "%s", err.msg);
    /* Wilson 95% for 7/10 (exact rational arithmetic in Python). */
    expect_close(sc.wilson_low, 0.39677814746114537, 1e-12, "wilson low");
    expect_close(sc.wilson_high, 0.8922087325936989, 1e-12, "wilson high");
    eval_score_free(&sc);

    eval_table t2 = hand_table();
    cr_assert_eq(eval_score_compute(&t2, &sc, &err), PG_OK, "%s", err.msg);
    cr_expect(isnan(sc.wilson_low) && isnan(sc.wilson_high), "K = 4: no Wilson interval");
    eval_score_free(&sc);

    double lo, hi;
    eval_wilson(0, 10, EVAL_Z_975, &lo, &hi);
    cr_expect_eq(lo, 0.0);
    expect_close(hi, 0.2775327998628892, 1e-12, "wilson 0/10 high");
}

Test(score, sign_test_exact_p_values)
{
    /* 2 P(X <= m), X ~ Bin(n, 1/2), summed exactly with Python fractions. */
    expect_close(eval_sign_test_p(8, 1), 0.0390625, 1e-13, "8-1");
    expect_close(eval_sign_test_p(1, 8), 0.0390625, 1e-13, "1-8");
    expect_close(eval_sign_test_p(10, 3), 0.09228515625, 1e-13, "10-3");
    expect_close(eval_sign_test_p(0, 10), 0.001953125, 1e-13, "0-10");
    expect_close(eval_sign_test_p(40, 60), 0.05688793364098079, 1e-11, "40-60");
    expect_close(eval_sign_test_p(520, 480), 0.21744829320414094, 1e-11, "520-480");
    const double p = eval_sign_test_p(1100, 900);
    cr_expect(fabs(p - 8.457089535503927e-06) <= 1e-10 * 8.457089535503927e-06,
              "1100-900: %.17g", p);
    cr_expect_eq(eval_sign_test_p(5, 5), 1.0);
    cr_expect_eq(eval_sign_test_p(0, 0), 1.0);
    cr_expect_eq(eval_sign_test_p(1, 0), 1.0);
}

Test(score, mde_formula)
{
    expect_close(EVAL_Z_975 + EVAL_Z_80, 2.8015852181129683, 1e-15, "multiplier");
    expect_close(eval_mde(0.5, 30), 0.2557485701222506, 1e-14, "mde(0.5, 30)");
    /* The notes' AIME case: n = 30, Var(d) = 0.025 -> about 8 points. */
    expect_close(eval_mde(sqrt(0.025), 30), 0.08087479899175994, 1e-14, "mde aime");
    cr_expect(isnan(eval_mde(0.5, 0)));
}

/* A: s = 1, 1/2, 0, 1, 1/2; B: s = 1/2, 1/2, 0, 0, 1 (K = 2). */
static eval_cell pair_a[] = {OK1, OK1, OK1, OK0, OK0, OK0, OK1, OK1, OK0, OK1};
static eval_cell pair_b[] = {OK0, OK1, OK1, OK0, OK0, OK0, OK0, OK0, OK1, OK1};

Test(score, paired_difference_se_sign_test_and_mde)
{
    eval_table a = {.n_problems = 5, .k = 2, .cells = pair_a};
    eval_table b = {.n_problems = 5, .k = 2, .cells = pair_b};
    eval_pair p;
    pg_err err = {0};
    cr_assert_eq(eval_pair_compute(&a, &b, &p, &err), PG_OK, "%s", err.msg);
    /* d = 1/2, 0, 0, 1, -1/2: mean 1/5; squares of deviations sum 1.3;
     * sd = sqrt(1.3/4), se = sqrt(1.3/20) = sqrt(0.065). */
    cr_expect_eq(p.n_problems, 5);
    cr_expect_eq(p.n_dropped, 0);
    expect_close(p.mean_diff, 0.2, TIGHT, "mean_diff");
    expect_close(p.sd, sqrt(0.325), TIGHT, "sd");
    expect_close(p.se, sqrt(0.065), TIGHT, "se");
    cr_expect_eq(p.wins, 2);
    cr_expect_eq(p.losses, 1);
    cr_expect_eq(p.ties, 2);
    expect_close(p.sign_p, 1.0, TIGHT, "sign p (2 P(X <= 1), n = 3 = 1)");
    /* The observed spread is above the design's, so it sets the MDE: 2.8016
     * sqrt(0.325/5). The design MDE: 10 of 20 correct, p~ = (10 + z^2/2)/(20 +
     * z^2) = 1/2, sum 1/n_i = 5 x (1/2 + 1/2): 2.8016 sqrt(0.25 x 5) / 5. */
    expect_close(p.mde, 0.7142668848075563, 1e-13, "mde");
    expect_close(p.design_mde, 0.6264534992459173, 1e-13, "design mde");
    cr_expect_eq(p.pooled_correct, 10);
    cr_expect_eq(p.pooled_valid, 20);
    expect_close(p.min_sign_p, 0.0625, TIGHT, "2 x 0.5^5");
    cr_expect_lt(p.ci_low, p.mean_diff);
    cr_expect_gt(p.ci_high, p.mean_diff);
    cr_expect_geq(p.ci_low, -0.5);
    cr_expect_leq(p.ci_high, 1.0);

    /* B vs A mirrors everything. */
    eval_pair q;
    cr_assert_eq(eval_pair_compute(&b, &a, &q, &err), PG_OK, "%s", err.msg);
    expect_close(q.mean_diff, -0.2, TIGHT, "mirrored mean");
    cr_expect_eq(q.wins, 1);
    cr_expect_eq(q.losses, 2);
    expect_close(q.se, p.se, TIGHT, "mirrored se");
}

Test(score, pair_drops_unscored_problems_and_ties_across_k)
{
    /* A (K = 2) vs B (K = 4): 1/2 vs 2/4 is a tie; problem 1 has no valid
     * sample in B and is dropped; 1 vs 2/3 (one error in B) is a win. */
    eval_cell ca[] = {OK1, OK0, OK1, OK1, OK1, OK1};
    eval_cell cb[] = {OK1, OK0, OK1, OK0, ERR, ERR, ERR, MIS, OK1, OK1, ERR, OK0};
    char *ids[] = {"p1", "p2", "p3"};
    eval_table a = {.n_problems = 3, .k = 2, .cells = ca, .problem_ids = ids};
    eval_table b = {.n_problems = 3, .k = 4, .cells = cb, .problem_ids = ids};
    eval_pair p;
    pg_err err = {0};
    cr_assert_eq(eval_pair_compute(&a, &b, &p, &err), PG_OK, "%s", err.msg);
    cr_expect_eq(p.n_problems, 2);
    cr_expect_eq(p.n_dropped, 1);
    cr_expect_eq(p.ties, 1);
    cr_expect_eq(p.wins, 1);
    cr_expect_eq(p.losses, 0);
    expect_close(p.mean_diff, (0.0 + 1.0 / 3.0) / 2.0, TIGHT, "mean_diff");
    /* Design MDE over unequal counts: 7 of 11 correct, sum of 1/n_i = (1/2 +
     * 1/4) + (1/2 + 1/3), n = 2 (Python, double precision). */
    expect_close(p.design_mde, 0.8631200743108877, 1e-13, "design mde, unequal n_i");
    cr_expect_eq(p.pooled_correct, 7);
    cr_expect_eq(p.pooled_valid, 11);

    char *other[] = {"p1", "p2", "p4"};
    eval_table c = {.n_problems = 3, .k = 4, .cells = cb, .problem_ids = other};
    pg_err e2 = {0};
    cr_expect_eq(eval_pair_compute(&a, &c, &p, &e2), PG_ERR_SHAPE);
    cr_expect_not_null(strstr(e2.msg, "p4"), "%s", e2.msg);
    eval_table d = {.n_problems = 2, .k = 4, .cells = cb};
    cr_expect_eq(eval_pair_compute(&a, &d, &p, &err), PG_ERR_SHAPE);
}

Test(score, design_mde_and_smallest_sign_p_by_hand)
{
    /* Agresti-Coull: (c + z^2/2)/(n + z^2) with z = 1.959963984540054. */
    expect_close(eval_adjusted_proportion(0, 6), 0.19516714395108267, 1e-15, "0 of 6");
    expect_close(eval_adjusted_proportion(6, 6), 0.8048328560489173, 1e-15, "6 of 6");
    expect_close(eval_adjusted_proportion(0, 0), 0.5, 1e-15, "0 of 0");
    cr_expect(isnan(eval_adjusted_proportion(3, 2)));
    /* n = 30 problems, K = 8 in both modes, 240 of 480 right: p~ = 1/2,
     * sum 1/n_i = 30 x 2/8: 2.8016 sqrt(0.25 x 7.5) / 30 (Python). */
    expect_close(eval_design_mde(240, 480, 7.5, 30), 0.1278742850611253, 1e-13, "30 x 8");
    cr_expect(isnan(eval_design_mde(0, 0, 0.0, 0)));
    cr_expect(isnan(eval_design_mde(1, 2, 0.0, 1)));
    expect_close(eval_sign_test_min_p(0), 1.0, 0, "n 0");
    expect_close(eval_sign_test_min_p(1), 1.0, 0, "n 1");
    expect_close(eval_sign_test_min_p(5), 0.0625, 0, "n 5");
    expect_close(eval_sign_test_min_p(6), 0.03125, 0, "n 6");
    /* The smallest p is what the sign test gives for n wins and no loss. */
    for (size_t n = 1; n < 12; n++)
        expect_close(eval_sign_test_min_p(n), eval_sign_test_p(n, 0), 1e-14, "min p = p(n, 0)");
}

/* The degenerate pairs of issue 14: no sample differs, so the observed SD
 * is 0; the MDE comes from the design, floored by the rule of three (issue
 * 27: no variation at all, so never below 3/n). */
Test(score, degenerate_pairs_get_the_design_mde_not_zero)
{
    eval_cell right[] = {OK1, OK1, OK1}, wrong[] = {OK0, OK0, OK0};
    eval_table a = {.n_problems = 3, .k = 1, .cells = right};
    eval_table b = {.n_problems = 3, .k = 1, .cells = right};
    eval_pair p;
    pg_err err = {0};
    cr_assert_eq(eval_pair_compute(&a, &b, &p, &err), PG_OK, "%s", err.msg);
    cr_expect_eq(p.sd, 0.0);
    cr_expect_eq(p.ties, 3);
    /* 6 of 6: p~ = 0.80483, sum 1/n_i = 6, n = 3: 2.8016 sqrt(p~(1-p~) 6)/3
     * = 0.9066 is the design MDE; the floor 3/3 = 1 is larger. */
    expect_close(p.design_mde, 0.9065972761244595, 1e-13, "3 x 1, all right");
    expect_close(p.mde, 1.0, TIGHT, "3 x 1, all right: floor 3/3");
    expect_close(p.min_sign_p, 0.25, TIGHT, "2 x 0.5^3");
    a.cells = b.cells = wrong;
    cr_assert_eq(eval_pair_compute(&a, &b, &p, &err), PG_OK, "%s", err.msg);
    expect_close(p.design_mde, 0.9065972761244595, 1e-13, "3 x 1, all wrong (p~ mirrored)");
    expect_close(p.mde, 1.0, TIGHT, "3 x 1, all wrong: floor 3/3");

    /* 30 problems x 2 samples, every one truncated and wrong, in both modes. */
    eval_cell trunc[60];
    for (size_t i = 0; i < 60; i++) trunc[i] = (eval_cell)TR0;
    eval_table ta = {.n_problems = 30, .k = 2, .cells = trunc};
    cr_assert_eq(eval_pair_compute(&ta, &ta, &p, &err), PG_OK, "%s", err.msg);
    expect_close(p.design_mde, 0.06320464843714475, 1e-13, "30 x 2 truncated");
    expect_close(p.mde, 0.1, TIGHT, "30 x 2 truncated: floor 3/30");
    cr_expect_eq(p.pooled_correct, 0);
    cr_expect_eq(p.pooled_valid, 120);

    /* No problem in common: nothing is defined, and the sign test cannot reach anything. */
    eval_cell errs[] = {ERR, ERR, ERR};
    eval_table e = {.n_problems = 3, .k = 1, .cells = errs};
    a.cells = right;
    cr_assert_eq(eval_pair_compute(&a, &e, &p, &err), PG_OK, "%s", err.msg);
    cr_expect_eq(p.n_problems, 0);
    cr_expect(isnan(p.mde) && isnan(p.mean_diff));
    cr_expect_eq(p.min_sign_p, 1.0);
}

/* Issue 27: 200 problems x 8 samples, all correct in both modes. The
 * design MDE is 0.0024 (p~ = 0.9994 from 3200 samples), which the gate
 * read as "no change, MDE 0.002"; the rule of three floors it at 3/200. */
Test(score, mde_of_a_design_without_variation_is_the_rule_of_three)
{
    enum { N = 200, K = 8 };
    static eval_cell all_right[N * K];
    for (size_t i = 0; i < N * K; i++) all_right[i] = (eval_cell)OK1;
    eval_table a = {.n_problems = N, .k = K, .cells = all_right};
    eval_pair p;
    pg_err err = {0};
    cr_assert_eq(eval_pair_compute(&a, &a, &p, &err), PG_OK, "%s", err.msg);
    cr_expect(p.design_mde < 0.003, "design mde %g", p.design_mde);
    expect_close(p.mde, 3.0 / N, TIGHT, "200 x 8 all right: 3/200");
    expect_close(eval_mde_floor(1600 * 2, 1600 * 2, N), 0.015, TIGHT, "all right");
    expect_close(eval_mde_floor(0, 10, 5), 0.6, TIGHT, "all wrong");
    expect_close(eval_mde_floor(9, 10, 5), 0.0, 0, "variation: no floor");
    expect_close(eval_mde_floor(0, 0, 5), 0.0, 0, "nothing graded: no floor");
    cr_expect(isnan(eval_mde_floor(0, 0, 0)));
    cr_expect(isnan(eval_mde_floor(3, 2, 1)));
    /* One wrong sample among 3200: variation, the design MDE stands. */
    all_right[0] = (eval_cell)OK0;
    cr_assert_eq(eval_pair_compute(&a, &a, &p, &err), PG_OK, "%s", err.msg);
    cr_expect(p.mde < 0.01, "mde %g with one wrong sample", p.mde);
}

Test(score, invalid_cells_are_refused)
{
    eval_cell cells[] = {OK1, {EVAL_SAMPLE_OK, 2}};
    eval_table t = {.n_problems = 1, .k = 2, .cells = cells};
    eval_score sc;
    pg_err err = {0};
    cr_expect_eq(eval_score_compute(&t, &sc, &err), PG_ERR_INTERNAL);
    cr_expect_not_null(strstr(err.msg, "correct is 2"), "%s", err.msg);
    eval_score_free(&sc);
    eval_cell bad[] = {{(eval_sample_status)9, 0}};
    eval_table t2 = {.n_problems = 1, .k = 1, .cells = bad};
    pg_err e2 = {0};
    cr_expect_eq(eval_score_compute(&t2, &sc, &e2), PG_ERR_INTERNAL);
    eval_score_free(&sc);
    eval_table t3 = {.n_problems = 2, .k = 2, .cells = NULL};
    cr_expect_eq(eval_score_compute(&t3, &sc, &e2), PG_ERR_INTERNAL);
    eval_score_free(&sc);
}
