/* score.c: end-task eval statistics (see score.h): avg@K, pass@k, clustered SE, bootstrap, pairs.
 *
 * Sources:
 *  - Miller, "Adding Error Bars to Evals: A Statistical Approach to Language
 *    Model Evaluations", arXiv:2411.00640 (2024): report the standard error
 *    of the mean; cluster it by question when questions contribute several
 *    scores; with K samples per question, average them per question first
 *    (within-question variance then enters through Var(s_i)); compare
 *    models on paired per-question differences; power analysis. Its
 *    clustered SE sqrt(sum_c (sum_{j in c} (x_cj - xbar))^2) / N, with the
 *    C/(C-1) small-cluster factor that inspect_ai's stderr(cluster=...)
 *    applies, reduces for C problems of equal size K (N = CK, x_cj the
 *    samples, s_c their per-problem mean) to
 *        sqrt(C/(C-1) * sum_c K^2 (s_c - xbar)^2) / (CK)
 *      = sqrt(sum_c (s_c - xbar)^2 / (C (C-1)))  =  sqrt(var_s / C),
 *    which is what eval_score_compute reports (for unequal n_i it is the
 *    SE of the equally weighted mean of per-problem means, the estimand
 *    avg@K is defined as).
 *  - Chen et al., "Evaluating Large Language Models Trained on Code",
 *    arXiv:2107.03374 (2021), Figure 3: pass@k = 1 - C(n-c,k)/C(n,k)
 *    computed as 1 - prod_{i=n-c+1}^{n} (1 - k/i) to avoid huge binomials.
 *  - Efron & Tibshirani, "An Introduction to the Bootstrap" (1993), ch. 13:
 *    the percentile interval. Resampling problems (clusters), not samples,
 *    keeps the within-problem correlation (Field & Welsh, "Bootstrapping
 *    clustered data", JRSS B 69(3), 2007).
 *  - Wilson, "Probable inference, the law of succession, and statistical
 *    inference", JASA 22 (1927); recommended for small n by Brown, Cai &
 *    DasGupta, Statistical Science 16(2) (2001), and for LLM evals by
 *    Bowyer, Aitchison & Ivanova, arXiv:2503.01747 (2025).
 *  - Sign test: Conover, "Practical Nonparametric Statistics", 3rd ed.
 *    (1999), section 3.4: the exact binomial test with p = 1/2, ties dropped.
 *  - Minimum detectable effect: Bloom, "Minimum Detectable Effects",
 *    Evaluation Review 19(5) (1995): MDE = (z_{1-alpha/2} + z_{1-beta}) SE,
 *    2.8016 SE at alpha .05 two-sided and 80% power.
 *  - The design SE of a pair (eval_design_mde): Miller (2024), section on
 *    power: Var(d_i) = omega^2 + sigma_A^2/K_A + sigma_B^2/K_B, with omega^2
 *    = Var(x_A - x_B) taken as 0 (one model in two precision modes: the
 *    null of no mode effect) and sigma^2 = E[p_i (1 - p_i)], the mean
 *    within-problem Bernoulli variance. p(1-p) is concave, so by Jensen
 *    E[p_i (1 - p_i)] <= pbar (1 - pbar): the pooled accuracy's p(1-p) is
 *    the largest within-problem variance a design of that accuracy can have
 *    whatever the problems' spread of difficulty, and the MDE built on it
 *    never claims more power than the design has. pbar is estimated with
 *    Agresti & Coull's adjustment, "Approximate is better than 'exact' for
 *    interval estimation of binomial proportions", The American
 *    Statistician 52(2) (1998): (c + z^2/2)/(N + z^2), z = 1.96 (about two
 *    successes and two failures added), which keeps p(1-p) > 0 when every
 *    sample was wrong (or right) instead of reporting an MDE of 0.
 *  - The MDE floor of a design without variation (eval_mde_floor): the rule
 *    of three, Hanley & Lippman-Hand, "If nothing goes wrong, is everything
 *    all right? Interpreting zero numerators", JAMA 249(13):1743-1745
 *    (1983): with 0 events in n trials, 3/n is the one-sided 95% upper
 *    bound on the rate (exactly 1 - 0.05^(1/n), about 3/n).
 *  - Smallest reachable sign-test p: with n untied problems the most extreme
 *    outcome (all won or all lost) has two-sided p = 2 * 0.5^n (Conover,
 *    as above); for n <= 5 that is >= 0.0625 > 0.05.
 *  - Resampling draws: xoshiro256** seeded by splitmix64 (base/rng.h).
 */
#include "score.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/rng.h"

/* ---- allocation -------------------------------------------------------- */

/* calloc of count elements of size bytes; *ok cleared on failure. A zero
 * count gives NULL without failing (nothing to hold). */
static void *alloc_zeroed(size_t count, size_t size, int *ok)
{
    if (count == 0) return NULL;
    void *p = calloc(count, size);
    if (p == NULL) *ok = 0;
    return p;
}

/* ---- per-problem tallies ----------------------------------------------- */

/* Counts of one problem's row. */
typedef struct tally {
    size_t valid, correct, errors, truncated, missing;
} tally;

/* Tallies row i of t (what names the table for messages); PG_ERR_INTERNAL
 * for a status outside the enum or correct not 0/1 on a valid sample. */
static pg_status tally_row(const eval_table *t, size_t i, const char *what, tally *out,
                           pg_err *err)
{
    memset(out, 0, sizeof *out);
    const eval_cell *row = t->cells + i * t->k;
    for (size_t j = 0; j < t->k; j++) {
        const char *pid = t->problem_ids != NULL && t->problem_ids[i] != NULL
                              ? t->problem_ids[i] : "?";
        switch (row[j].status) {
        case EVAL_SAMPLE_OK:
        case EVAL_SAMPLE_TRUNCATED:
            if (row[j].correct != 0 && row[j].correct != 1)
                return pg_fail(err, PG_ERR_INTERNAL,
                               "%s: problem %zu ('%s') sample %zu: correct is %d, not 0 or 1",
                               what, i, pid, j, row[j].correct);
            out->valid++;
            out->correct += (size_t)row[j].correct;
            if (row[j].status == EVAL_SAMPLE_TRUNCATED) out->truncated++;
            break;
        case EVAL_SAMPLE_ERROR:
            out->errors++;
            break;
        case EVAL_SAMPLE_MISSING:
            out->missing++;
            break;
        default:
            return pg_fail(err, PG_ERR_INTERNAL,
                           "%s: problem %zu ('%s') sample %zu: status %d is not a sample status",
                           what, i, pid, j, (int)row[j].status);
        }
    }
    return PG_OK;
}

/* PG_ERR_INTERNAL unless t is a usable table. */
static pg_status check_table(const eval_table *t, const char *what, pg_err *err)
{
    if (t == NULL) return pg_fail(err, PG_ERR_INTERNAL, "%s: table is NULL", what);
    if (t->n_problems > 0 && t->k > 0 && t->cells == NULL)
        return pg_fail(err, PG_ERR_INTERNAL, "%s: %zu x %zu table without cells", what,
                       t->n_problems, t->k);
    if (t->k > 0 && t->n_problems > SIZE_MAX / t->k)
        return pg_fail(err, PG_ERR_INTERNAL, "%s: %zu x %zu table is too large", what,
                       t->n_problems, t->k);
    return PG_OK;
}

/* ---- small estimators -------------------------------------------------- */

double eval_pass_at_k(size_t n, size_t c, size_t k)
{
    if (k < 1 || k > n || c > n) return NAN;
    /* Every k-subset holds a correct sample when fewer than k are wrong. */
    if (n - c < k) return 1.0;
    /* pass@1 is the per-problem mean; c/n keeps it bit-equal to avg@K's term. */
    if (k == 1) return (double)c / (double)n;
    /* C(n-c,k)/C(n,k) = prod_{i=n-c+1}^{n} (i-k)/i (Chen et al. 2021, Fig. 3);
     * (i-k)/i is one correctly rounded division of exact integers. */
    double prod = 1.0;
    for (size_t i = n - c + 1; i <= n; i++) prod *= (double)(i - k) / (double)i;
    return 1.0 - prod;
}

double eval_sign_test_p(size_t wins, size_t losses)
{
    const size_t n = wins + losses;
    if (n == 0) return 1.0;
    const size_t m = wins < losses ? wins : losses;
    /* log P(X = i) = log C(n,i) - n log 2; the terms grow with i up to
     * n/2 >= m, so the largest is i = m: sum exp(t_i - t_m), then scale. */
    const double log_half_n = -(double)n * log(2.0);
    double log_c = 0.0;                     /* log C(n, m), by the ratio recurrence */
    for (size_t i = 0; i < m; i++) log_c += log((double)(n - i) / (double)(i + 1));
    const double t_m = log_c + log_half_n;
    /* Walk back down from m: t_{i-1} = t_i - log((n-i+1)/i); every ratio is <= 1. */
    double sum = 1.0, t = t_m;
    for (size_t i = m; i > 0; i--) {
        t -= log((double)(n - i + 1) / (double)i);
        sum += exp(t - t_m);
    }
    const double p = 2.0 * exp(t_m + log(sum));
    return p < 1.0 ? p : 1.0;
}

double eval_mde(double sd, size_t n)
{
    if (n == 0) return NAN;
    return (EVAL_Z_975 + EVAL_Z_80) * sd / sqrt((double)n);
}

double eval_sign_test_min_p(size_t n)
{
    if (n == 0) return 1.0;
    const double p = 2.0 * pow(0.5, (double)n);
    return p < 1.0 ? p : 1.0;
}

double eval_adjusted_proportion(size_t c, size_t n)
{
    if (c > n) return NAN;
    const double z2 = EVAL_Z_975 * EVAL_Z_975;
    return ((double)c + z2 / 2.0) / ((double)n + z2);
}

double eval_design_mde(size_t correct, size_t valid, double inv_sum, size_t n_problems)
{
    if (n_problems == 0 || !(inv_sum > 0.0) || correct > valid) return NAN;
    const double p = eval_adjusted_proportion(correct, valid);
    return (EVAL_Z_975 + EVAL_Z_80) * sqrt(p * (1.0 - p) * inv_sum) / (double)n_problems;
}

double eval_mde_floor(size_t correct, size_t valid, size_t n_problems)
{
    if (n_problems == 0 || correct > valid) return NAN;
    if (valid > 0 && (correct == 0 || correct == valid))
        return EVAL_MDE_RULE_OF_THREE / (double)n_problems;
    return 0.0;
}

void eval_wilson(size_t successes, size_t n, double z, double *lo, double *hi)
{
    if (n == 0 || successes > n) {
        if (lo != NULL) *lo = NAN;
        if (hi != NULL) *hi = NAN;
        return;
    }
    const double nn = (double)n, p = (double)successes / nn, z2 = z * z;
    const double denom = 1.0 + z2 / nn;
    const double center = (p + z2 / (2.0 * nn)) / denom;
    const double half = z * sqrt(p * (1.0 - p) / nn + z2 / (4.0 * nn * nn)) / denom;
    double l = center - half, h = center + half;
    /* Exact at the ends (the interval touches 0 at p = 0 and 1 at p = 1). */
    if (successes == 0 || l < 0.0) l = 0.0;
    if (successes == n || h > 1.0) h = 1.0;
    if (lo != NULL) *lo = l;
    if (hi != NULL) *hi = h;
}

/* ---- bootstrap --------------------------------------------------------- */

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The q-quantile of sorted v[0..n) with linear interpolation between order
 * statistics at h = (n-1) q (Hyndman & Fan type 7, numpy's default). */
static double quantile_sorted(const double *v, size_t n, double q)
{
    const double h = (double)(n - 1) * q;
    const size_t lo = (size_t)floor(h);
    if (lo + 1 >= n) return v[n - 1];
    return v[lo] + (h - (double)lo) * (v[lo + 1] - v[lo]);
}

pg_status eval_bootstrap_ci(const double *x, size_t n, size_t b, uint64_t seed, double level,
                            double *lo, double *hi, pg_err *err)
{
    if (lo == NULL || hi == NULL || (x == NULL && n > 0))
        return pg_fail(err, PG_ERR_INTERNAL, "eval_bootstrap_ci: x, lo or hi is NULL");
    if (!(level > 0.0 && level < 1.0))
        return pg_fail(err, PG_ERR_INTERNAL, "eval_bootstrap_ci: level %g is not in (0, 1)",
                       level);
    *lo = *hi = NAN;
    if (n < 2 || b < 2) return PG_OK;
    double *means = malloc(b * sizeof *means);
    if (means == NULL)
        return pg_fail(err, PG_ERR_NOMEM, "eval_bootstrap_ci: out of memory for %zu means", b);
    rng_xoshiro256 rng;
    rng_xoshiro_seed(&rng, seed);
    for (size_t r = 0; r < b; r++) {
        double sum = 0.0;
        for (size_t i = 0; i < n; i++) sum += x[rng_xoshiro_below_exact(&rng, (uint64_t)n)];
        means[r] = sum / (double)n;
    }
    qsort(means, b, sizeof *means, cmp_double);
    *lo = quantile_sorted(means, b, (1.0 - level) / 2.0);
    *hi = quantile_sorted(means, b, (1.0 + level) / 2.0);
    free(means);
    return PG_OK;
}

/* ---- mean and spread --------------------------------------------------- */

/* Mean of v[0..n) (NaN for n = 0) and, through *sd, the sample SD with
 * divisor n-1 (NaN for n < 2), by two passes. */
static double mean_and_sd(const double *v, size_t n, double *sd)
{
    *sd = NAN;
    if (n == 0) return NAN;
    double sum = 0.0;
    for (size_t i = 0; i < n; i++) sum += v[i];
    const double mean = sum / (double)n;
    if (n >= 2) {
        double ss = 0.0;
        for (size_t i = 0; i < n; i++) ss += (v[i] - mean) * (v[i] - mean);
        *sd = sqrt(ss / (double)(n - 1));
    }
    return mean;
}

/* ---- one (mode, effort) ------------------------------------------------ */

pg_status eval_score_compute(const eval_table *t, eval_score *out, pg_err *err)
{
    if (out == NULL) return pg_fail(err, PG_ERR_INTERNAL, "eval_score_compute: out is NULL");
    memset(out, 0, sizeof *out);
    pg_status ps = check_table(t, "eval_score_compute", err);
    if (ps != PG_OK) return ps;

    const size_t n = t->n_problems, k = t->k;
    out->n_problems = n;
    out->k = k;
    out->accuracy = out->se = out->ci_low = out->ci_high = NAN;
    out->wilson_low = out->wilson_high = NAN;
    out->ci_method = EVAL_CI_METHOD;

    int ok = 1;
    out->problem_mean = alloc_zeroed(n, sizeof *out->problem_mean, &ok);
    out->pass_at = alloc_zeroed(k, sizeof *out->pass_at, &ok);
    out->pass_at_n = alloc_zeroed(k, sizeof *out->pass_at_n, &ok);
    size_t *valid = alloc_zeroed(n, sizeof *valid, &ok);
    size_t *correct = alloc_zeroed(n, sizeof *correct, &ok);
    double *scored = alloc_zeroed(n, sizeof *scored, &ok);
    if (!ok) {
        ps = pg_fail(err, PG_ERR_NOMEM, "eval_score_compute: out of memory for %zu x %zu", n, k);
        goto done;
    }

    size_t m = 0, singles = 0, single_correct = 0;
    for (size_t i = 0; i < n; i++) {
        tally ty;
        ps = tally_row(t, i, "eval_score_compute", &ty, err);
        if (ps != PG_OK) goto done;
        valid[i] = ty.valid;
        correct[i] = ty.correct;
        out->n_valid += ty.valid;
        out->n_errors += ty.errors;
        out->n_truncated += ty.truncated;
        out->n_missing += ty.missing;
        if (ty.valid == 0) {
            out->problem_mean[i] = NAN;
            out->n_empty++;
            continue;
        }
        out->problem_mean[i] = (double)ty.correct / (double)ty.valid;
        scored[m++] = out->problem_mean[i];
        if (ty.valid == 1) {
            singles++;
            single_correct += ty.correct;
        }
    }
    out->n_scored = m;

    double sd;
    out->accuracy = mean_and_sd(scored, m, &sd);
    if (m >= 2) out->se = sd / sqrt((double)m);
    ps = eval_bootstrap_ci(scored, m, EVAL_BOOTSTRAP_B, EVAL_BOOTSTRAP_SEED, EVAL_CI_LEVEL,
                           &out->ci_low, &out->ci_high, err);
    if (ps != PG_OK) goto done;
    if (m > 0 && singles == m)
        eval_wilson(single_correct, m, EVAL_Z_975, &out->wilson_low, &out->wilson_high);

    for (size_t j = 0; j < k; j++) {
        const size_t kk = j + 1;
        double sum = 0.0;
        size_t used = 0;
        for (size_t i = 0; i < n; i++) {
            if (valid[i] < kk) continue;
            sum += eval_pass_at_k(valid[i], correct[i], kk);
            used++;
        }
        out->pass_at_n[j] = used;
        out->pass_at[j] = used > 0 ? sum / (double)used : NAN;
    }

done:
    free(valid);
    free(correct);
    free(scored);
    return ps;
}

/* ---- A vs B ------------------------------------------------------------ */

pg_status eval_pair_compute(const eval_table *a, const eval_table *b, eval_pair *out,
                            pg_err *err)
{
    if (out == NULL) return pg_fail(err, PG_ERR_INTERNAL, "eval_pair_compute: out is NULL");
    memset(out, 0, sizeof *out);
    out->mean_diff = out->sd = out->se = out->ci_low = out->ci_high = NAN;
    out->sign_p = out->min_sign_p = 1.0;
    out->mde = out->design_mde = NAN;
    pg_status ps = check_table(a, "eval_pair_compute (A)", err);
    if (ps == PG_OK) ps = check_table(b, "eval_pair_compute (B)", err);
    if (ps != PG_OK) return ps;
    if (a->n_problems != b->n_problems)
        return pg_fail(err, PG_ERR_SHAPE,
                       "eval_pair_compute: A has %zu problems, B has %zu (pairs need the same "
                       "problems)", a->n_problems, b->n_problems);
    const size_t n = a->n_problems;
    if (a->problem_ids != NULL && b->problem_ids != NULL) {
        for (size_t i = 0; i < n; i++) {
            const char *x = a->problem_ids[i], *y = b->problem_ids[i];
            if (x == NULL || y == NULL || strcmp(x, y) != 0)
                return pg_fail(err, PG_ERR_SHAPE,
                               "eval_pair_compute: problem %zu is '%s' in A but '%s' in B", i,
                               x != NULL ? x : "NULL", y != NULL ? y : "NULL");
        }
    }

    double *d = n > 0 ? malloc(n * sizeof *d) : NULL;
    if (n > 0 && d == NULL)
        return pg_fail(err, PG_ERR_NOMEM, "eval_pair_compute: out of memory for %zu problems",
                       n);
    size_t used = 0;
    double inv_sum = 0.0;  /* sum of 1/n_A,i + 1/n_B,i over the problems used */
    for (size_t i = 0; i < n; i++) {
        tally ta, tb;
        ps = tally_row(a, i, "eval_pair_compute (A)", &ta, err);
        if (ps == PG_OK) ps = tally_row(b, i, "eval_pair_compute (B)", &tb, err);
        if (ps != PG_OK) goto done;
        if (ta.valid == 0 || tb.valid == 0) {
            out->n_dropped++;
            continue;
        }
        /* Win/loss/tie from exact integers: c_A/n_A vs c_B/n_B. */
        const uint64_t lhs = (uint64_t)ta.correct * tb.valid, rhs = (uint64_t)tb.correct * ta.valid;
        if (lhs > rhs) out->wins++;
        else if (lhs < rhs) out->losses++;
        else out->ties++;
        d[used++] = (double)ta.correct / (double)ta.valid - (double)tb.correct / (double)tb.valid;
        out->pooled_correct += ta.correct + tb.correct;
        out->pooled_valid += ta.valid + tb.valid;
        inv_sum += 1.0 / (double)ta.valid + 1.0 / (double)tb.valid;
    }
    out->n_problems = used;
    out->mean_diff = mean_and_sd(d, used, &out->sd);
    out->design_mde = eval_design_mde(out->pooled_correct, out->pooled_valid, inv_sum, used);
    out->mde = out->design_mde;
    if (used >= 2) {
        out->se = out->sd / sqrt((double)used);
        /* A spread of the d_i above the design's (omega^2 > 0) only raises it. */
        const double observed = eval_mde(out->sd, used);
        if (observed > out->mde) out->mde = observed;
    }
    /* No variation at all: the design MDE alone would shrink towards 0. */
    const double floor = eval_mde_floor(out->pooled_correct, out->pooled_valid, used);
    if (floor > out->mde) out->mde = floor;
    out->sign_p = eval_sign_test_p(out->wins, out->losses);
    out->min_sign_p = eval_sign_test_min_p(used);
    ps = eval_bootstrap_ci(d, used, EVAL_BOOTSTRAP_B, EVAL_BOOTSTRAP_SEED, EVAL_CI_LEVEL,
                           &out->ci_low, &out->ci_high, err);
done:
    free(d);
    return ps;
}
