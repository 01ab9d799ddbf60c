/*
 * score.h: statistics of end-task evals (AIME-style problems, K samples each).
 *
 * Pure functions: no I/O, no global state; the only side effect is memory
 * that the caller frees with the matching *_free.
 *
 * Input: a table of n problems x K samples for one (mode, effort). A sample
 * is ok, truncated (hit the token limit; graded like any answer, normally
 * wrong), error (no answer: the request failed) or missing (not run yet).
 * Errors and missing samples are excluded, not wrong: problem i's
 * denominator n_i counts its ok and truncated samples, c_i its correct ones.
 * A problem with n_i = 0 is left out of every mean and counted (n_empty).
 *
 * Formulas (s_i = c_i/n_i, the per-problem mean, over the m problems with
 * n_i > 0; sources in score.c):
 *   accuracy (avg@K)  = (1/m) sum_i s_i
 *   se (clustered by problem) = sqrt(var_s / m), var_s the sample variance
 *       (divisor m-1) of the s_i: the SE of a mean of per-problem means,
 *       which equals the cluster-robust SE of the per-sample mean with the
 *       C/(C-1) small-sample factor when every n_i is the same (Miller 2024).
 *   pass@k = mean over problems with n_i >= k of 1 - C(n_i-c_i, k)/C(n_i, k)
 *       (Chen et al. 2021's unbiased estimator, as a stable product).
 *   ci_low, ci_high: 95% percentile bootstrap over problems (the stored
 *       interval, all K): EVAL_BOOTSTRAP_B resamples of the m values s_i
 *       with replacement from a fixed seed, so it is deterministic.
 *   wilson_low, wilson_high: 95% Wilson score interval of c/m, given only
 *       when every scored problem has exactly one valid sample (K = 1).
 * Pairs (A vs B, same problems, d_i = s_A,i - s_B,i over problems scored
 * in both): mean_diff, sd (divisor n-1), se = sd/sqrt(n), 95% paired
 * percentile bootstrap interval (the same index resample for A and B), an
 * exact two-sided sign test on wins/losses (ties dropped) and the minimum
 * detectable effect at 80% power, alpha 0.05 two-sided, from the design
 * (eval_design_mde; never from an observed SD that can be 0):
 *   p~ = (c + z^2/2) / (N + z^2)   the pooled accuracy of both modes' N
 *        graded samples (c correct) with Agresti & Coull's adjustment, z =
 *        z_0.975: strictly inside (0, 1) whatever c is
 *   Var(d_i) <= p~(1-p~) (1/n_A,i + 1/n_B,i)   two independent means of
 *        n_A,i and n_B,i Bernoulli samples with no mode effect (omega^2 = 0)
 *   design mde = (z_0.975 + z_0.80) sqrt(p~(1-p~) sum_i (1/n_A,i + 1/n_B,i)) / n
 *   mde = max(design mde, (z_0.975 + z_0.80) sd / sqrt(n), floor)
 *   floor = EVAL_MDE_RULE_OF_THREE / n when the pooled variance is 0 (every
 *        graded sample of both modes correct, or every one wrong), else 0
 *        (eval_mde_floor): the rule of three, 3/n, the one-sided 95% bound
 *        on a rate never observed in n trials. Agresti & Coull's p~ keeps
 *        the design MDE above 0 there, but it shrinks with the samples (200
 *        problems x 8 all correct gave 0.002); a design that saw no
 *        variation at all cannot claim to resolve a change below 3/n.
 * and min_sign_p = 2 * 0.5^n, the smallest p the sign test can give with n
 * problems (eval_sign_test_min_p): above EVAL_ALPHA (n <= 5) the design
 * cannot reach significance at all.
 *
 * Undefined values are NaN: accuracy with m = 0, se/CI with m < 2 (the
 * bootstrap of one value would be a point), pass@k without a problem of
 * n_i >= k, mean_diff and mde with n = 0.
 */
#ifndef PG_SCORE_H
#define PG_SCORE_H

#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "db/eval_store.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Resamples of the percentile bootstrap. */
#define EVAL_BOOTSTRAP_B 10000
/* Seed of every bootstrap (xoshiro256** seeded through splitmix64). */
#define EVAL_BOOTSTRAP_SEED UINT64_C(0x9e3779b97f4a7c15)
/* Two-sided confidence level of every interval. */
#define EVAL_CI_LEVEL 0.95
/* What eval_scores.ci_method says the stored interval is (keep in step with
 * EVAL_BOOTSTRAP_B and EVAL_BOOTSTRAP_SEED). */
#define EVAL_CI_METHOD "bootstrap-percentile(problems,B=10000,seed=0x9e3779b97f4a7c15)"
/* Standard normal quantiles: z_0.975 (alpha 0.05 two-sided) and z_0.80 (power 80%). */
#define EVAL_Z_975 1.959963984540054
#define EVAL_Z_80 0.8416212335729143
/* Two-sided significance level every verdict is taken at (z_0.975 above). */
#define EVAL_ALPHA 0.05
/* The rule of three: with no event in n trials the one-sided 95% upper
 * bound on its rate is about 3/n (-ln 0.05 = 2.996; Hanley & Lippman-Hand,
 * "If nothing goes wrong, is everything all right?", JAMA 249(13), 1983).
 * The floor of the MDE of a design with no variation (eval_mde_floor). */
#define EVAL_MDE_RULE_OF_THREE 3.0



/* Scores t into *out (overwritten; free with eval_score_free even on
 * failure). PG_ERR_INTERNAL for a NULL argument, a table with cells NULL
 * while n_problems*k > 0, a status outside the enum or correct not 0/1 on
 * a valid sample; PG_ERR_NOMEM when an allocation fails. */
pg_status eval_score_compute(const eval_table *t, eval_score *out, pg_err *err);



/* Compares a with b into *out. PG_ERR_SHAPE when their n_problems differ
 * or both carry problem_ids that differ at some row; PG_ERR_INTERNAL and
 * PG_ERR_NOMEM as eval_score_compute. Tables of different K are allowed. */
pg_status eval_pair_compute(const eval_table *a, const eval_table *b, eval_pair *out,
                            pg_err *err);

/* Chen et al.'s unbiased pass@k for one problem with n valid samples of
 * which c are correct: 1 - C(n-c, k)/C(n, k); NaN unless 1 <= k <= n and
 * c <= n. */
double eval_pass_at_k(size_t n, size_t c, size_t k);

/* Exact two-sided sign-test p: min(1, 2 P(X <= min(w, l))), X ~ Bin(w+l, 1/2);
 * 1 when w + l = 0. Summed in log space (accurate for w + l in the millions). */
double eval_sign_test_p(size_t wins, size_t losses);

/* Minimum detectable effect (EVAL_Z_975 + EVAL_Z_80) * sd / sqrt(n); NaN
 * for n = 0 or sd NaN. */
double eval_mde(double sd, size_t n);

/* The smallest two-sided exact sign-test p reachable with n untied
 * problems, all won or all lost: min(1, 2 * 0.5^n); 1 for n = 0. */
double eval_sign_test_min_p(size_t n);

/* Agresti & Coull's adjusted proportion (c + z^2/2) / (n + z^2) at z =
 * EVAL_Z_975: in (0, 1) for every c <= n, n >= 0; NaN for c > n. */
double eval_adjusted_proportion(size_t c, size_t n);

/* The design MDE of a difference of means (the top of this file): (EVAL_Z_975 +
 * EVAL_Z_80) * sqrt(p~(1-p~) * inv_sum) / n_problems with p~ =
 * eval_adjusted_proportion(correct, valid) and inv_sum = sum over the
 * problems of 1/n_A,i + 1/n_B,i. NaN for n_problems = 0, inv_sum not > 0
 * or correct > valid. */
double eval_design_mde(size_t correct, size_t valid, double inv_sum, size_t n_problems);

/* The MDE floor of a pair over n_problems problems whose both modes'
 * valid graded samples hold correct right answers: EVAL_MDE_RULE_OF_THREE /
 * n_problems when the pooled variance is 0 (correct = 0 or correct =
 * valid, valid > 0), else 0; NaN for n_problems = 0 or correct > valid. */
double eval_mde_floor(size_t correct, size_t valid, size_t n_problems);

/* Wilson score interval of successes/n at normal quantile z into *lo, *hi
 * (NaN both for n = 0 or successes > n). */
void eval_wilson(size_t successes, size_t n, double z, double *lo, double *hi);

/* Percentile bootstrap interval (level, e.g. 0.95) of the mean of x[0..n):
 * b resamples of n indices drawn uniformly with replacement by xoshiro256**
 * seeded with seed; the bounds are the (1-level)/2 and (1+level)/2
 * quantiles of the b resample means, linearly interpolated between order
 * statistics (numpy's default). For a paired interval pass the differences.
 * NaN both for n < 2 or b < 2. PG_ERR_NOMEM when the b means cannot be
 * allocated; PG_ERR_INTERNAL for a NULL x with n > 0, NULL lo/hi, or a level
 * outside (0, 1). */
pg_status eval_bootstrap_ci(const double *x, size_t n, size_t b, uint64_t seed, double level,
                            double *lo, double *hi, pg_err *err);

#ifdef __cplusplus
}
#endif

#endif /* PG_SCORE_H */
