/*
 * divergence.h: teacher-forced divergence between two servers' next-token
 * distributions (issue #28): per scored position, the KL divergence bound
 * from the top-K logprobs each server reports, top-1 agreement and the
 * change in the given token's probability; per mode, their summary over
 * all positions with uncertainty clustered by sequence.
 *
 * Pure functions: no I/O, no global state. P is the reference mode (bf16
 * by default), Q the mode compared with it; natural logarithms throughout.
 *
 * Per position (div_position_compute), with I the ids whose probability
 * both sides report (the ids in both top-K lists, plus the given token
 * when both sides report its logprob), r_P = 1 - sum_I p, r_Q = 1 - sum_I q:
 *   kld_lb = sum_I p ln(p/q) + r_P ln(r_P/r_Q)
 * the KL of P and Q coarsened to I plus one bucket for the rest. By the
 * log-sum inequality it never exceeds KL(P||Q), never decreases as K grows,
 * equals KL(P||Q) when the lists hold the whole vocabulary, and misses
 * exactly r_P KL(P|rest || Q|rest) (../shared/reference/notes-divergence.md,
 * "KL from top-K logprobs"). No epsilon is put in for an id one side does
 * not report: that inflated KL 6-10x in the notes' synthetic check.
 *   tail_p = 1 - (the top-K mass of P): how much the bound can miss.
 *   same_top: the highest-logprob ids of both lists agree (ties: the
 *       smaller id).
 *   dlogprob = lq - lp and dp = exp(lq) - exp(lp) of the given token, NaN
 *       when a side does not report it (llama-server's /completion reports
 *       the top-K only).
 * Servers report float32 log-softmax values, so a list's probabilities can
 * sum a little over 1: a sum up to 1 + DIV_MASS_TOL is rounding (r is
 * clamped to 0, and a clamped r_P makes the bucket term 0), more is
 * PG_ERR_NUMERIC. A bucket with r_P > DIV_MASS_TOL against r_Q = 0 would
 * make KL infinite: Q claims all its mass on I while P does not, which no
 * reply of a real softmax can: PG_ERR_NUMERIC. kld_lb below 0 by rounding
 * (a sum of terms of both signs) is clamped to 0; identical lists give
 * exactly 0.
 *
 * Per mode (div_summary_compute) over C sequences of n_s scored positions:
 *   kld_mean = sum of kld_lb / sum n_s (every position weighs the same),
 *   kld_mean_se clustered by sequence, the ratio estimator's
 *       sqrt(C/(C-1) sum_s (S_s - kld_mean n_s)^2) / sum n_s with S_s the
 *       sequence's sum (positions of one sequence are not independent;
 *       llama-perplexity's sqrt(var/(n-1)) treats them as if they were),
 *       95% interval kld_mean -+ z_0.975 se (NaN for C < 2);
 *   kld percentiles 50, 90, 95, 99, 99.9 and max by linear interpolation
 *       at fraction (n - 1), llama-perplexity's rule
 *       (tools/perplexity/perplexity.cpp);
 *   same_top (fraction) with its clustered SE as above;
 *   mean_dp, rms_dp, mean_dlogprob over the positions where both sides
 *       report the given token (n_given of them), and
 *       ppl_ratio = PPL(Q)/PPL(P) = exp(-mean_dlogprob);
 *   tail_mass_median (interpolated as the percentiles).
 * Undefined values are NaN (no position, C < 2 for an SE, n_given = 0).
 */
#ifndef PG_DIVERGENCE_H
#define PG_DIVERGENCE_H

#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "db/divergence_store.h"  /* div_position, div_summary: the rows as stored */

#ifdef __cplusplus
extern "C" {
#endif

/* How far a side's reported probabilities may sum over 1 and still be
 * float32 rounding: K = 20 values of relative error 2^-24 each, with a
 * wide margin (a real excess is a broken reply). */
#define DIV_MASS_TOL 1e-4
/* Standard normal quantile z_0.975 of the 95% intervals (as evals/score.h). */
#define DIV_Z_975 1.959963984540054


/* One side's report at one position. */
typedef struct div_side {
    const div_entry *top;   /* its top-K list (any order, ids distinct, K = n_top >= 1) */
    size_t n_top;
    int32_t given;          /* the token at this position */
    double given_logprob;   /* its logprob; NaN: not reported (then read from top if there) */
} div_side;

/* Computes one position of P against Q into *out (the top of this file).
 * PG_ERR_INTERNAL for a NULL argument or an empty list; PG_ERR_FORMAT for
 * an id twice in one list or a reported given logprob that differs from its
 * own list's entry; PG_ERR_NUMERIC for a logprob that is NaN, +inf or > 0
 * beyond rounding (DIV_MASS_TOL), a list whose mass is over 1 +
 * DIV_MASS_TOL, or the infinite bucket. Messages name the side (P or Q). */
pg_status div_position_compute(const div_side *p, const div_side *q, div_position *out,
                               pg_err *err);

/* Summarises pos[0..n) (every position of one mode, grouped by sequence:
 * seq[i] is position i's sequence index; positions of one sequence need
 * not be adjacent) into *out. PG_ERR_INTERNAL for a NULL argument with
 * n > 0; PG_ERR_NOMEM. */
pg_status div_summary_compute(const div_position *pos, const size_t *seq, size_t n,
                              div_summary *out, pg_err *err);

/* One sequence's totals over one mode's scored positions. */
typedef struct div_seq_total {
    size_t n;          /* scored positions */
    double kld_sum;    /* sum of kld_lb */
    double same_top;   /* positions whose top-1 ids agree */
} div_seq_total;

/* The totals of one sequence's positions pos[0..n). */
div_seq_total div_seq_total_of(const div_position *pos, size_t n);

/* One mode's change from a baseline run to a run over the same sequences
 * (div_paired_compute). Differences are run - baseline. */
typedef struct div_paired {
    size_t n_sequences, n_positions;
    double kld_run, kld_base;           /* each run's mean KLD over these positions */
    double kld_diff, kld_diff_se;       /* their difference and its SE, clustered by sequence */
    double kld_diff_low, kld_diff_high; /* its 95% interval */
    double same_top_run, same_top_base;
    double same_top_diff, same_top_diff_se, same_top_diff_low, same_top_diff_high;
} div_paired;

/* Pairs run[i] with base[i] (the same sequence in both runs) for
 * i in 0..n into *out: each run's position-weighted means, and their
 * difference with the SE of the ratio estimator clustered by sequence
 * (the top of this file) over the per-sequence differences, so what the
 * sequences share (their difficulty) cancels. SEs and intervals NaN for
 * n < 2. PG_ERR_INTERNAL for a NULL argument with n > 0; PG_ERR_FORMAT
 * when a pair's position counts differ (naming i: not the same sequence). */
pg_status div_paired_compute(const div_seq_total *run, const div_seq_total *base, size_t n,
                             div_paired *out, pg_err *err);

/* The value at fraction f in [0, 1] of sorted[0..n) by linear
 * interpolation at f (n - 1) (llama-perplexity's percentiles); NaN for n = 0. */
double div_interpolate(const double *sorted, size_t n, double f);

#ifdef __cplusplus
}
#endif

#endif /* PG_DIVERGENCE_H */
