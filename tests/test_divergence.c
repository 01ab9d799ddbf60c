/* test_divergence.c: known answers of the top-K KL bound and the per-mode
 * summary (evals/divergence.h). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "evals/divergence.h"

/* Largest vocabulary of the tests' full distributions. */
#define T_VOCAB 64

/* The exact KL(p || q) of two full distributions over v tokens. */
static double exact_kl(const double *p, const double *q, size_t v)
{
    double kl = 0;
    for (size_t i = 0; i < v; i++)
        if (p[i] > 0) kl += p[i] * log(p[i] / q[i]);
    return kl;
}

/* The top k of full distribution d over v tokens into out (largest first,
 * ties by id), as a server reports them. */
static void top_k(const double *d, size_t v, size_t k, div_entry *out)
{
    int used[T_VOCAB] = {0};
    for (size_t j = 0; j < k; j++) {
        size_t best = v;
        for (size_t i = 0; i < v; i++)
            if (!used[i] && (best == v || d[i] > d[best])) best = i;
        used[best] = 1;
        out[j] = (div_entry){(int32_t)best, log(d[best])};
    }
}

/* kld_lb of full p against full q reported at top k, given token g (reported by both). */
static double bound_at(const double *p, const double *q, size_t v, size_t k, int32_t g)
{
    div_entry tp[T_VOCAB], tq[T_VOCAB];
    top_k(p, v, k, tp);
    top_k(q, v, k, tq);
    const div_side sp = {tp, k, g, log(p[g])}, sq = {tq, k, g, log(q[g])};
    div_position x;
    pg_err err = {0};
    cr_assert_eq(div_position_compute(&sp, &sq, &x, &err), PG_OK, "%s", err.msg);
    return x.kld_lb;
}

/* A normalised distribution over v tokens from a fixed recipe (seeded). */
static void make_dist(double *d, size_t v, unsigned seed, double sharp)
{
    double z = 0;
    unsigned s = seed;
    for (size_t i = 0; i < v; i++) {
        s = s * 1103515245u + 12345u;
        const double u = (double)((s >> 8) & 0xffff) / 65536.0;
        d[i] = exp(sharp * u);
        z += d[i];
    }
    for (size_t i = 0; i < v; i++) d[i] /= z;
}

Test(divergence, identical_distributions_give_exactly_zero)
{
    const div_entry top[] = {{7, log(0.5)}, {3, log(0.3)}, {9, log(0.1)}};
    const div_side p = {top, 3, 3, log(0.3)}, q = {top, 3, 3, NAN};
    div_position x;
    pg_err err = {0};
    cr_assert_eq(div_position_compute(&p, &q, &x, &err), PG_OK, "%s", err.msg);
    cr_expect_eq(x.kld_lb, 0.0);
    cr_expect_eq(x.dp, 0.0);
    cr_expect_eq(x.dlogprob, 0.0);
    cr_expect(x.same_top);
    cr_expect_eq(x.top_p, 7);
    cr_expect_float_eq(x.tail_p, 0.1, 1e-15);
}

/* With the whole vocabulary listed the bound is the exact KL: P = (1/2,
 * 1/4, 1/8, 1/8), Q uniform: 1/2 ln 2 - 2 (1/8) ln 2 = ln(2)/4. */
Test(divergence, the_whole_vocabulary_gives_the_exact_kl)
{
    const div_entry tp[] = {{0, log(0.5)}, {1, log(0.25)}, {2, log(0.125)}, {3, log(0.125)}};
    const div_entry tq[] = {{3, log(0.25)}, {2, log(0.25)}, {1, log(0.25)}, {0, log(0.25)}};
    const div_side p = {tp, 4, 1, NAN}, q = {tq, 4, 1, NAN};
    div_position x;
    pg_err err = {0};
    cr_assert_eq(div_position_compute(&p, &q, &x, &err), PG_OK, "%s", err.msg);
    cr_expect_float_eq(x.kld_lb, log(2.0) / 4, 1e-15);
    cr_expect_float_eq(x.tail_p, 0.0, 1e-15);
    cr_expect_float_eq(x.lp, log(0.25), 1e-15);   /* read from the lists */
    cr_expect_float_eq(x.dp, 0.0, 1e-15);
    cr_expect_eq(x.top_p, 0);
    cr_expect_eq(x.top_q, 0);  /* four equal: the smallest id */
    cr_expect(x.same_top);

    /* A full random pair over 64 tokens: the bound grows with K, never
     * passes the exact KL, and reaches it at K = 64. */
    double fp[T_VOCAB], fq[T_VOCAB];
    make_dist(fp, T_VOCAB, 1, 4.0);
    make_dist(fq, T_VOCAB, 2, 4.0);
    const double kl = exact_kl(fp, fq, T_VOCAB);
    cr_assert_gt(kl, 0.05);
    double last = 0;
    for (size_t k = 1; k <= T_VOCAB; k++) {
        const double b = bound_at(fp, fq, T_VOCAB, k, 5);
        cr_expect_leq(b, kl + 1e-12, "K=%zu: %g > %g", k, b, kl);
        cr_expect_geq(b, last - 1e-12, "K=%zu: %g < %g at K-1", k, b, last);
        last = b;
    }
    cr_expect_float_eq(last, kl, 1e-12);
}

/* Disjoint top-K lists: only the given token (when both report it) and the
 * rest bucket: given 0.1 in P, 0.2 in Q: 0.1 ln(1/2) + 0.9 ln(0.9/0.8). */
Test(divergence, disjoint_top_k_lists_use_the_given_token_and_the_bucket)
{
    const div_entry tp[] = {{0, log(0.6)}, {1, log(0.2)}};
    const div_entry tq[] = {{2, log(0.5)}, {3, log(0.2)}};
    div_side p = {tp, 2, 4, log(0.1)}, q = {tq, 2, 4, log(0.2)};
    div_position x;
    pg_err err = {0};
    cr_assert_eq(div_position_compute(&p, &q, &x, &err), PG_OK, "%s", err.msg);
    cr_expect_float_eq(x.kld_lb, 0.1 * log(0.5) + 0.9 * log(0.9 / 0.8), 1e-15);
    cr_expect_float_eq(x.dp, 0.1, 1e-15);
    cr_expect_float_eq(x.dlogprob, log(2.0), 1e-15);
    cr_expect_not(x.same_top);
    cr_expect_float_eq(x.tail_p, 0.2, 1e-15);
    /* Neither reports the given token (llama-server's top-K only): nothing
     * is known on both sides, the bound is 0, the token's change undefined. */
    p.given_logprob = q.given_logprob = NAN;
    cr_assert_eq(div_position_compute(&p, &q, &x, &err), PG_OK, "%s", err.msg);
    cr_expect_eq(x.kld_lb, 0.0);
    cr_expect(isnan(x.dp));
    cr_expect(isnan(x.dlogprob));
}

/* P = (0.5, 0.2, 0.19 rest...), Q moves 0.02 from token 1 to token 2 so
 * that token 1 leaves Q's top 2: the true KL is small; putting in q = 1e-6
 * for token 1 (missing from Q's list) is more than 6x too large, while the
 * bound stays below the true KL. */
Test(divergence, no_epsilon_is_put_in_for_a_token_one_side_omits)
{
    double fp[8] = {0.5, 0.2, 0.19, 0.05, 0.03, 0.02, 0.006, 0.004};
    double fq[8] = {0.5, 0.18, 0.21, 0.05, 0.03, 0.02, 0.006, 0.004};
    const double kl = exact_kl(fp, fq, 8);
    /* given token 3 (the same in both): I = {0, 3}, equal there, bound 0 */
    cr_expect_eq(bound_at(fp, fq, 8, 2, 3), 0.0);
    /* given token 1: 0.2 ln(0.2/0.18) + 0.3 ln(0.3/0.32), above 0, below KL */
    const double b = bound_at(fp, fq, 8, 2, 1);
    cr_expect_float_eq(b, 0.2 * log(0.2 / 0.18) + 0.3 * log(0.3 / 0.32), 1e-15);
    cr_expect_gt(b, 0);
    cr_expect_leq(b, kl);
    /* what epsilon-imputation would say, from the same top-2 lists */
    const double eps = 1e-6;
    const double imputed = fp[0] * log(fp[0] / fq[0]) + fp[1] * log(fp[1] / eps);
    cr_expect_gt(imputed, 6 * kl, "imputed %g, exact %g", imputed, kl);
}

Test(divergence, bad_lists_are_refused_naming_the_side)
{
    const div_entry ok[] = {{0, log(0.5)}, {1, log(0.3)}};
    const div_entry twice[] = {{0, log(0.5)}, {0, log(0.3)}};
    const div_entry nan_lp[] = {{0, NAN}, {1, log(0.3)}};
    const div_entry over[] = {{0, log(0.7)}, {1, log(0.4)}};
    const div_entry pos[] = {{0, 0.5}, {1, log(0.3)}};
    const div_entry all_q[] = {{0, log(0.5)}, {1, log(0.5)}};
    const struct {
        const div_entry *p, *q;
        double given_p;
        pg_status want;
        const char *msg;
    } cases[] = {
        {ok, twice, NAN, PG_ERR_FORMAT, "side Q lists token 0 twice"},
        {nan_lp, ok, NAN, PG_ERR_NUMERIC, "side P: a top-K logprob nan"},
        {ok, over, NAN, PG_ERR_NUMERIC, "side Q's reported probabilities sum to 1.1"},
        {pos, ok, NAN, PG_ERR_NUMERIC, "side P: a top-K logprob 0.5"},
        {ok, ok, log(0.2), PG_ERR_FORMAT, "side P reports token 1 at logprob"},
        {ok, all_q, NAN, PG_ERR_NUMERIC, "infinite KL"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const div_side p = {cases[i].p, 2, 1, cases[i].given_p}, q = {cases[i].q, 2, 1, NAN};
        div_position x;
        pg_err err = {0};
        cr_expect_eq(div_position_compute(&p, &q, &x, &err), cases[i].want, "case %zu", i);
        cr_expect(strstr(err.msg, cases[i].msg) != NULL, "case %zu: '%s'", i, err.msg);
    }
    const div_side empty = {ok, 0, 1, NAN}, p = {ok, 2, 1, NAN};
    div_position x;
    pg_err err = {0};
    cr_expect_eq(div_position_compute(&empty, &p, &x, &err), PG_ERR_INTERNAL);
    cr_expect_eq(div_position_compute(&p, NULL, &x, &err), PG_ERR_INTERNAL);
}

/* Two sequences, kld (0.1, 0.2) and (0.6): mean 0.3; sequence sums minus
 * mean x count are -0.3 and +0.3, so the clustered SE is sqrt(2 x 0.18)/3
 * = 0.2; percentiles by interpolation at f (n - 1) of (0.1, 0.2, 0.6). */
Test(divergence, the_summary_is_clustered_by_sequence)
{
    const div_position pos[] = {
        {.kld_lb = 0.1, .tail_p = 0.01, .dp = 0.02, .dlogprob = 0.1, .same_top = 1},
        {.kld_lb = 0.6, .tail_p = 0.05, .dp = -0.04, .dlogprob = -0.4, .same_top = 0},
        {.kld_lb = 0.2, .tail_p = 0.03, .dp = NAN, .dlogprob = NAN, .same_top = 1},
    };
    const size_t seq[] = {0, 1, 0};
    div_summary s;
    pg_err err = {0};
    cr_assert_eq(div_summary_compute(pos, seq, 3, &s, &err), PG_OK, "%s", err.msg);
    cr_expect_eq(s.n_sequences, 2);
    cr_expect_eq(s.n_positions, 3);
    cr_expect_eq(s.n_given, 2);
    cr_expect_float_eq(s.kld_mean, 0.3, 1e-15);
    cr_expect_float_eq(s.kld_mean_se, 0.2, 1e-15);
    cr_expect_float_eq(s.kld_ci_low, 0.3 - DIV_Z_975 * 0.2, 1e-15);
    cr_expect_float_eq(s.kld_percentile[0], 0.2, 1e-15);            /* median */
    cr_expect_float_eq(s.kld_percentile[1], 0.2 + 0.8 * 0.4, 1e-15);  /* 90%: x = 1.8 */
    cr_expect_float_eq(s.kld_percentile[4], 0.2 + 0.998 * 0.4, 1e-14);  /* 99.9% */
    cr_expect_eq(s.kld_percentile[5], 0.6);                         /* max */
    cr_expect_float_eq(s.same_top, 2.0 / 3, 1e-15);
    /* same-top sums (2, 0) against 2/3 x (2, 1): +2/3, -2/3 */
    cr_expect_float_eq(s.same_top_se, sqrt(2 * (8.0 / 9)) / 3, 1e-15);
    cr_expect_float_eq(s.mean_dp, -0.01, 1e-15);
    cr_expect_float_eq(s.rms_dp, sqrt((0.0004 + 0.0016) / 2), 1e-15);
    cr_expect_float_eq(s.mean_dlogprob, -0.15, 1e-15);
    cr_expect_float_eq(s.ppl_ratio, exp(0.15), 1e-15);
    cr_expect_float_eq(s.tail_mass_median, 0.03, 1e-15);

    /* One sequence: no SE; no positions: all undefined. */
    const size_t one[] = {0, 0, 0};
    cr_assert_eq(div_summary_compute(pos, one, 3, &s, &err), PG_OK, "%s", err.msg);
    cr_expect_eq(s.n_sequences, 1);
    cr_expect(isnan(s.kld_mean_se));
    cr_expect(isnan(s.kld_ci_high));
    cr_assert_eq(div_summary_compute(NULL, NULL, 0, &s, &err), PG_OK, "%s", err.msg);
    cr_expect(isnan(s.kld_mean));
    cr_expect(isnan(s.kld_percentile[5]));
    cr_expect_eq(s.n_sequences, 0);
    const size_t far[] = {0, 7, 0};
    cr_expect_eq(div_summary_compute(pos, far, 3, &s, &err), PG_ERR_INTERNAL);
}

Test(divergence, the_paired_change_cancels_what_sequences_share)
{
    /* Three sequences of 10, 20 and 10 positions; the run adds 0.1, 0.2
     * and 0.3 KLD per sequence and loses one top-1 agreement in the first. */
    const div_seq_total base[] = {{10, 1.0, 9}, {20, 4.0, 20}, {10, 0.5, 10}};
    const div_seq_total run[] = {{10, 1.1, 8}, {20, 4.2, 20}, {10, 0.8, 10}};
    div_paired p;
    pg_err err = {0};
    cr_assert_eq(div_paired_compute(run, base, 3, &p, &err), PG_OK, "%s", err.msg);
    cr_assert_eq(p.n_sequences, 3);
    cr_assert_eq(p.n_positions, 40);
    cr_assert_float_eq(p.kld_base, 5.5 / 40, 1e-15);
    cr_assert_float_eq(p.kld_run, 6.1 / 40, 1e-15);
    const double d = 0.6 / 40;
    cr_assert_float_eq(p.kld_diff, d, 1e-15);
    /* Clustered SE of the ratio estimator over D_s = 0.1, 0.2, 0.3 with n_s = 10, 20, 10. */
    const double r1 = 0.1 - d * 10, r2 = 0.2 - d * 20, r3 = 0.3 - d * 10;
    const double se = sqrt(3.0 / 2.0 * (r1 * r1 + r2 * r2 + r3 * r3)) / 40;
    cr_assert_float_eq(p.kld_diff_se, se, 1e-15);
    cr_assert_float_eq(p.kld_diff_low, d - DIV_Z_975 * se, 1e-15);
    cr_assert_float_eq(p.same_top_diff, -1.0 / 40, 1e-15);
    cr_assert_float_eq(p.same_top_base, 39.0 / 40, 1e-15);
    /* A run equal to its baseline changes by exactly 0, with SE 0. */
    cr_assert_eq(div_paired_compute(base, base, 3, &p, &err), PG_OK);
    cr_assert_eq(p.kld_diff, 0.0);
    cr_assert_eq(p.kld_diff_se, 0.0);
    cr_assert_eq(p.same_top_diff, 0.0);
    /* One sequence: no SE. Other position counts: not the same sequence. */
    cr_assert_eq(div_paired_compute(run, base, 1, &p, &err), PG_OK);
    cr_assert(isnan(p.kld_diff_se) && isnan(p.kld_diff_low));
    const div_seq_total other[] = {{11, 1.0, 9}};
    cr_assert_eq(div_paired_compute(other, base, 1, &p, &err), PG_ERR_FORMAT);
    cr_assert(strstr(err.msg, "not the same sequence"), "%s", err.msg);
}
