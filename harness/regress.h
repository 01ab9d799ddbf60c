/*
 * regress.h: the regression gate's verdicts, as pure functions of the rows
 * a gate pass reads (db/gate_store.h loads them; `precgate gate` stores the
 * verdicts in the flags table, schema version 6). No I/O, no global state.
 *
 * Three scopes, one flag (a verdict with its numbers and a message) per
 * comparison:
 *
 * layer: a run against its baseline run, per (capture, layer, variant) of
 *   the whole-layer rows (head = -1), variants PROFILE~spec and ext:NAME
 *   included and checked like the modes.
 *   - metric "nonfinite" (always checked): value = nan_count + inf_count;
 *     regression when > 0, whatever the baseline had.
 *   - each configured metric M (gate_config.layer.metrics), with b the
 *     baseline's value, a the variant's absolute bound for M (if any) and
 *     tol = rel_tol:
 *        higher is worse (rel_l2, max_abs, mean_abs, p99_abs):
 *            threshold = max(a, b + |b| tol), regression when value > threshold
 *        lower is worse (cos_sim, sqnr_db):
 *            threshold = min(a, b - |b| tol), regression when value < threshold
 *     A value exactly at the threshold passes. A term that is undefined
 *     (no bound configured; b absent, NULL or infinite) is left out; with
 *     neither term the verdict is inconclusive. A run value that is NaN
 *     (stored NULL) is a regression when the output had NaN/Inf, else
 *     inconclusive (undefined, e.g. the cosine of an all-zero output).
 *   - a key in the baseline and missing from the run: one flag, metric
 *     "present", verdict error (never a pass). A key new in the run is
 *     checked against the absolute bounds only; when no configured metric
 *     has a bound for its variant, each configured metric is an error (the
 *     message: set a baseline run that has the key, or bound it in the
 *     config), since a baseline run exists and nothing judges the key.
 *
 * layer, metric "supported": one flag per (capture, variant, reason) of the
 *   run's unsupported_cells (a cell the variant's kernel cannot compute:
 *   kernels/attn_profile.h attn_profile_computes), verdict skipped, keyed by
 *   the first such layer, the message naming the layers and the reason:
 *   never a pass, and no exit status of its own (nothing was computed).
 *
 * completeness (every run, with or without a baseline run, whatever the
 *   config says): one error flag, metric "complete" (regress_incomplete),
 *   when the run lacks a row its config implies (harness/run_complete.h:
 *   a sweep's layer_rows per owned layer, an eval's plan), or its config
 *   records neither (a run made before them): never a pass.
 *
 * layer without a baseline run (the first run): the "nonfinite" flag of
 *   every key, and each metric that has an absolute bound in the config;
 *   a metric without one gets no flag (nothing was compared).
 *
 * mode_pair: each variant other than PROFILE~spec, per (capture, layer) of the
 *   run, on rel_l2 against the fp64 reference; with or without a baseline
 *   run, and whatever the config says:
 *   - NaN/Inf in the output is a regression (ext:NAME included);
 *   - rel_l2 >= REGRESS_ZERO_OUTPUT_REL_L2 (1: no closer to the reference
 *     than an all-zero output) is a regression.
 *   Then, with v = rel_l2(V), r = rel_l2(bf16) in the run and B, R the same
 *   in the baseline run (same capture and layer), the gap of V to bf16 may
 *   not grow past the relative tolerance tol = mode_pair.rel_tol:
 *        gap term  = r + (B - R) + tol * max(|B - R|, R)
 *   i.e. v - r <= (B - R) + tol * max(|B - R|, R): the allowance is tol of
 *   the baseline's gap, and never less than tol of bf16's own error (a
 *   variant as close to the reference as bf16 has a gap near 0 and would
 *   otherwise have none). The variant's own term, with the layer scope's
 *   tolerance ltol = layer.rel_tol,
 *        own term  = B + |B| ltol
 *   passes a variant whose own rel_l2 did not grow past ltol, whatever bf16
 *   did: the gap also grows when bf16 improves and V stays put, and the
 *   baseline has the same inputs (db/gate_store.h), so V's own error against
 *   the same reference is the direct measure. Both are defined together.
 *   With the config's bounds (none by default):
 *        threshold = max(abs[V], ratio[V] x r, gap term, own term)
 *   regression when v is above every defined term (a value at a term
 *   passes), the gap term compared as v - r <= (B - R) + allowance, never as
 *   v <= r + ..., whose sum rounds (an identical rerun at tol 0 would fail
 *   where r + (B - R) rounds below B); a term
 *   that is undefined is left out. With no term at all and no budget
 *   configured: with a baseline run whose layer lacks V's or bf16's row, an
 *   error (set a baseline that has it, or bound it in the config); else
 *   (the first run, a bf16 row missing from the run, a baseline row that
 *   is not usable) inconclusive, the message recording the gap; for bf16
 *   itself pass (it is the reference; its change is the layer scope's
 *   check). A flag is named "bf16" or "V-bf16" and carries
 *   bf16's rel_l2 in the run as baseline_value.
 *
 * layer, metric "scale_bug": the scale-plumbing diagnosis of each external
 *   output (ext_diagnosis, harness/diag_verdict.h), one flag per span of
 *   consecutive layers of one (capture, ext:NAME) with the same verdict and
 *   hypothesis, keyed by the span's first layer, its message naming the
 *   layers (diag_span_message); with or without a baseline run, whatever the
 *   config says. value = the matched hypothesis's largest distance over the
 *   span, baseline_value = the other side's smallest (the nearest intended-*
 *   of a bug, the nearest bug of an intended output), threshold =
 *   DIAG_MATCH_REL_L2:
 *     bug                regression, naming the hypothesis and what it means
 *     intended           pass
 *     indistinguishable  inconclusive (the hypotheses coincide or lie within
 *                        DIAG_MARGIN of each other: never a bug)
 *     unexplained        inconclusive (no hypothesis within DIAG_MATCH_REL_L2)
 *     no evidence        inconclusive (no hypothesis could run; each says why)
 *   An ext:NAME variant the run has (its whole-layer layer_metrics rows)
 *   without ext_diagnosis rows for a layer (swept before the diagnosis
 *   existed, schema < 12) is an error per span of such layers (never a pass
 *   on missing evidence), the message saying to sweep again.
 *
 * eval: per (eval, mode, effort), with e = gate_config.eval.min_effect, d a
 *   difference of accuracies (0..1), [lo, hi] its 95% interval and mde the
 *   smallest drop the design detects at 80% power (evals/score.h):
 *        regression    hi < 0 and d <= -e
 *        improvement   lo > 0 and d >= e
 *        no change     -e <= lo and hi <= e and mde <= e
 *        inconclusive  otherwise (a run that merely lacks power: mde > e,
 *                      stated with the drop it could have seen), or when d,
 *                      lo, hi or mde is undefined.
 *   Checked in this order (with e = 0 an interval [0, 0] is "no change" only
 *   for mde 0, which a design MDE never is).
 *   Before any of these, a comparison is an error (never a pass, whatever
 *   the config says: no threshold below is configurable) when
 *   (regress_eval_degenerate):
 *     - a mode it involves has no correct answer (accuracy 0) or nothing
 *       graded (accuracy undefined), at that effort;
 *     - more than half of such a mode's graded samples were truncated at
 *       the token limit (the eval measured the limit, not the mode);
 *     - the design cannot reach significance at all: with n problems the
 *       smallest two-sided sign-test p, 2 * 0.5^n, is above EVAL_ALPHA
 *       (n <= 5), n the problems scored in both sides;
 *     - (pairs) a mode of the pair has no eval_scores row.
 *   - metric "samples" per score of the run: error as above, else pass (the
 *     graded, correct and truncated counts in the message).
 *   - metric "diff_vs_B" from the run's eval_pairs (mode A vs mode B, bf16
 *     when the run has it): d = mean paired difference A - B, the stored
 *     paired bootstrap interval and the stored MDE (the design MDE of
 *     evals/score.h, raised to the observed one where that is larger).
 *     A regression or improvement also needs the stored exact two-sided
 *     sign test p <= EVAL_ALPHA (else inconclusive, with p, wins and
 *     losses stated): at a few problems the percentile bootstrap interval
 *     is far too narrow (6 problems, 3 lost, none won: the bootstrap says
 *     "below 0", p = 0.25). The sign test is exact for paired data at any
 *     n, ties dropped. Widening the interval with the design SE (MDE /
 *     (z_0.975 + z_0.80)) instead was rejected: that SE is unpaired
 *     (two independent binomials), so it ignores that both modes answer
 *     the same problems and would call the shipped demo's fp8qkv drop
 *     (12 problems: 6 lost, 0 won, p = 0.031) inconclusive.
 *   - metric "accuracy" against the baseline run's score of the same
 *     (eval, mode, effort), value = acc_run and baseline_value = acc_base
 *     of the eval_scores rows. Paired when both runs ran the same problems
 *     (regress_base_pair, made by the gate from both runs' samples: both
 *     configs record the traces digest, equal by the baseline's content
 *     rule with --limit and the source, and the samples' problem ids are
 *     the same): the run is mode A and the baseline mode B of a pair as
 *     above (evals/score.h, eval_pair_compute: mean paired difference,
 *     paired bootstrap interval, exact sign test, the design MDE and its
 *     rule-of-three floor; K may differ), judged by exactly the rules of
 *     "diff_vs_B" (degenerate checks of both scores, the baseline's
 *     named as such, n the problems scored in both; the sign test; the
 *     floor note), and the message says "paired over n problems: W won, L
 *     lost, T tied, sign test p=..." (won: better in this run). The same
 *     answers in both runs (a replay of the same traces) tie every
 *     problem: d = 0 and interval [0, 0], "no change" only when the MDE
 *     <= e. Otherwise (a run recorded before digests, samples of other
 *     problems, no regress_base_pair for the key) two-sample, the message
 *     saying "unpaired" and why: se = max(sqrt(se_run^2 + se_base^2),
 *     design se) with design se = sqrt(p~(1-p~) (1/N_run + 1/N_base)), p~
 *     the adjusted pooled accuracy of both runs' N graded samples (the
 *     runs are treated as independent, as only their clustered SEs are
 *     stored), interval d -+ z_0.975 se, MDE = (z_0.975 + z_0.80) se,
 *     raised to the rule-of-three floor 3/n (evals/score.h,
 *     eval_mde_floor) when both scores are all correct or both all wrong
 *     (no variation: the SEs say nothing about power), n the fewer
 *     problems of the two, with the degenerate checks at that n. Every
 *     message whose MDE is that floor says so (pairs included). A key the
 *     baseline has and the run lacks is an error.
 *   Every eval message states the MDE, so "no change" reads as "no change
 *   larger than min_effect, which this design could have seen", never as
 *   proven equality.
 *   - metric "identical_to_B" (regress_identical_modes), per pair of modes
 *     A < B of one (eval, effort) of the run whose samples are identical:
 *     every sample graded in both modes (same problem, same sample index)
 *     has the same outcome and a byte-identical completion (both without
 *     text counts as identical; the message says only outcomes could be
 *     compared). Two precision modes do not write the same reasoning trace
 *     over every problem and sample: such modes are one server (three
 *     modes pointed at one URL, a seeded or temperature-0 server answering
 *     each mode alike) or one recording replayed under several names, and
 *     nothing they are compared on is evidence. Verdict error, naming the
 *     modes and where their samples came from (the endpoints each mode was
 *     given, or the replayed traces), whatever min_effect says; pass when
 *     the config's eval.identical_modes puts both in one group (meant to
 *     be one server, e.g. a replica check). value = n_same samples. A pair
 *     with any differing sample gets no flag. The rule needs identical
 *     text, not only identical outcomes, on purpose: a strong model can
 *     be right on all of 200 problems in both modes (a legitimate "no
 *     change" whose MDE is the rule-of-three floor), and outcomes alone
 *     would call that one server. One server answering each mode with
 *     different text (sampling unseeded) is not caught here; eval's
 *     same-server warning (/v1/models and the server identity) catches it
 *     when the run is made.
 */
#ifndef PG_REGRESS_H
#define PG_REGRESS_H

#include <stddef.h>
#include <stdint.h>

#include "diag_verdict.h"
#include "gate_config.h"
#include "db/divergence_store.h"
#include "evals/diverge_run.h"
#include "db/eval_store.h"
#include "db/report_store.h"
#include "db/gate_store.h"
#include "base/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* `precgate gate` exit statuses. */
#define GATE_EXIT_PASS 0        /* no regression, no error */
#define GATE_EXIT_REGRESSION 1  /* at least one regression, no error */
#define GATE_EXIT_ERROR 2       /* an error verdict, or the gate could not run */

/* rel_l2 of an all-zero output against any nonzero reference: ||0 - y|| / ||y||
 * = 1. An output at or above it carries no information about the reference. */
#define REGRESS_ZERO_OUTPUT_REL_L2 1.0

/* Longest flag message, NUL included. */
#define REGRESS_MSG_MAX 1024









/* The layer threshold of metric m as the top of this file defines it, from
 * baseline value b, absolute bound a and relative tolerance tol; NaN b or a
 * (and infinite b) leave their term out; NaN when neither term is defined. */
double regress_threshold(pg_metric m, double b, double a, double tol);

/* 1 when value is strictly worse than threshold in m's direction, else 0
 * (also 0 when either is NaN). */
int regress_worse(pg_metric m, double value, double threshold);

/* The eval verdict of difference d with interval [lo, hi] at min_effect e
 * (the top of this file). */
gate_verdict regress_effect_verdict(double d, double lo, double hi, double e);

/* Appends the layer-scope flags of run[0..n_run) against base[0..n_base)
 * (baseline_run_id names it in messages; -1: no baseline run, as the top of
 * this file says) to out, in (capture, layer, variant) order. PG_ERR_SHAPE
 * when one side holds a key twice; PG_ERR_INTERNAL for a NULL argument
 * (base may be NULL when n_base is 0);
 * PG_ERR_NOMEM. On failure out keeps what was appended. */
pg_status regress_layers(const layer_metric_row *run, size_t n_run,
                         const layer_metric_row *base, size_t n_base, int64_t baseline_run_id,
                         const gate_config *c, gate_flags *out, pg_err *err);

/* Appends the mode_pair flags of run[0..n) to out, in (capture, layer,
 * variant) order, with the gaps of base[0..n_base) (baseline_run_id; -1 and
 * n_base 0: no baseline run). Errors as regress_layers. */
pg_status regress_mode_pairs(const layer_metric_row *run, size_t n,
                             const layer_metric_row *base, size_t n_base,
                             int64_t baseline_run_id, const gate_config *c, gate_flags *out,
                             pg_err *err);

/* Why score x cannot support a verdict (no correct answer, nothing graded,
 * more than half truncated; the top of this file) into buf, "; "-joined
 * after what buf holds; returns 1 when x is degenerate, else 0 (buf kept). */
int regress_eval_degenerate(const eval_score_stored *x, char *buf, size_t len);

/* Longest reason a comparison with the baseline run is unpaired, NUL included. */
#define REGRESS_UNPAIRED_MAX 240

/* How one (eval, mode, effort) of a run compares with the same key of its
 * baseline run problem by problem (the gate makes it from both runs'
 * samples; the top of this file says when it is paired). */
typedef struct regress_base_pair {
    const char *eval, *mode, *effort;     /* the key (borrowed) */
    int paired;                            /* 1: pair holds the comparison */
    eval_pair pair;                        /* paired: eval_pair_compute(run's table, baseline's) */
    char unpaired[REGRESS_UNPAIRED_MAX];   /* not paired: why, for the message */
} regress_base_pair;

/* Appends the eval flags to out: per score of the run ("samples"), per pair
 * of the run, then per score of the run with a baseline score of the same
 * key (paired where base_pairs[0..n_base_pairs) holds the key with paired
 * 1, else two-sample saying why: its unpaired text, or that no problem-level
 * comparison was given), then an error per baseline score the run lacks.
 * base may be NULL (no baseline run: baseline_run_id -1), base_pairs NULL
 * with n_base_pairs 0. PG_ERR_INTERNAL for a NULL argument with a count
 * > 0 or a NULL key string; PG_ERR_NOMEM. */
pg_status regress_evals(const eval_pair_stored *pairs, size_t n_pairs,
                        const eval_score_stored *run, size_t n_run,
                        const eval_score_stored *base, size_t n_base,
                        const regress_base_pair *base_pairs, size_t n_base_pairs,
                        int64_t baseline_run_id, const gate_config *c, gate_flags *out,
                        pg_err *err);

/* Where one mode's samples of a run came from, for the messages of
 * regress_identical_modes (strings borrowed). */
typedef struct regress_mode_source {
    const char *mode;
    const char *served;   /* e.g. its endpoint URLs, "+"-joined (NULL: not recorded) */
} regress_mode_source;

/* Appends the "identical_to_B" flags (the top of this file) of the pairs
 * rows[0..n) (eval_store_read_mode_agreement of the run) whose n_shared > 0
 * samples are all the same (n_same == n_shared). replayed: the traces file
 * the run replayed (NULL for a live run, whose modes' servers are looked up
 * in sources[0..n_sources); a mode without one is said to be unrecorded).
 * PG_ERR_INTERNAL for a NULL argument with a count > 0 or a NULL key
 * string; PG_ERR_NOMEM. */
pg_status regress_identical_modes(const eval_mode_agreement *rows, size_t n,
                                  const char *replayed, const regress_mode_source *sources,
                                  size_t n_sources, const gate_config *c, gate_flags *out,
                                  pg_err *err);

/* Appends the one flag of a run whose explicit baseline measured other
 * content (field differs: run_value in run run_id, base_value in
 * baseline_run_id, which --baseline spec named): verdict error, metric
 * "content", in scope (eval for eval runs, layer otherwise; its key strings
 * name the field); nothing is compared. PG_ERR_NOMEM. */
pg_status regress_content_mismatch(gate_scope scope, const char *field, const char *run_value,
                                   const char *base_value, int64_t run_id,
                                   int64_t baseline_run_id, const char *spec, gate_flags *out,
                                   pg_err *err);

/* Appends the one flag of a run gated with --require-baseline that has no
 * baseline run (none automatic; an explicit one always resolves or the
 * gate refuses): verdict error, metric "baseline", in scope (eval for eval
 * runs, layer otherwise: the scopes that compare with a baseline run; key
 * strings "baseline" / "none"). The comparisons that need no baseline run
 * are made beside it. PG_ERR_NOMEM; PG_ERR_INTERNAL for a NULL argument. */
pg_status regress_no_baseline(gate_scope scope, const char *kind, int64_t run_id, gate_flags *out,
                              pg_err *err);

/* Appends the one flag of a run that lacks rows its config implies
 * (harness/run_complete.h; whatever made the run, and also when its config
 * does not record them: unverifiable): verdict error, metric "complete", in
 * scope (eval for eval runs, layer otherwise; key strings "run" and "rows"),
 * value n_missing of n_expected units (layers or samples, named by unit),
 * the message naming the missing units (list) and remedy. PG_ERR_NOMEM. */
pg_status regress_incomplete(gate_scope scope, int64_t run_id, int unverifiable,
                             int64_t n_missing, int64_t n_expected, const char *unit,
                             const char *list, const char *remedy, gate_flags *out,
                             pg_err *err);

/* Appends the divergence-scope flags of a `precgate diverge` run (its
 * div_summaries rows sm[0..n): role "mode" rows are judged, the "floor"
 * row is the noise floor), per mode M, key (variant = mode = M), against
 * cfg->divergence:
 *   - "sequences": error when M's summary holds fewer than min_sequences
 *     sequences (the SE is clustered by sequence);
 *   - "tail_mass": error when M's median tail mass is above max_tail_mass
 *     (the top-K bound no longer measures the KL: raise --top-k);
 *   - "kld_mean" with a budget b (kld_mean.M): regression when the 95%
 *     interval's low end is above b, pass when its high end is at most b,
 *     else inconclusive; each message states the MDE, 2.80 SE (80% power at
 *     alpha .05); an error when the noise floor is missing or not below b
 *     (the gate cannot tell M from serving noise at that budget);
 *   - "same_top" with a least fraction m (same_top_min.M): regression when
 *     same_top + z SE < m, pass when same_top - z SE >= m, else inconclusive;
 *   - "budget": error when M has neither budget and there is no baseline
 *     run (nothing judges it);
 *   - with a baseline run base_id >= 0 (pairs[0..n_pairs): one per mode,
 *     diverge_pair_runs' result), paired over the same sequences, d the
 *     change run - baseline with its 95% interval [lo, hi] and SE (both
 *     clustered by sequence):
 *     "kld_mean_vs_baseline": min effect e = kld_rel_effect x the
 *       baseline's mean KLD, raised to the run's noise floor when that is
 *       larger (a change below serving noise is none); regression when
 *       lo > 0 and d >= e, improvement when hi < 0 and d <= -e, no change
 *       when [lo, hi] lies in [-e, e] and the MDE (2.80 SE) is at most e,
 *       else inconclusive; an error when the pair was not made (its reason:
 *       the baseline lacks the mode or a sequence, or tokenized one
 *       otherwise), never a pass;
 *     "same_top_vs_baseline": the same at min effect same_top_effect,
 *       lower being worse.
 * PG_ERR_INTERNAL for a NULL argument; PG_ERR_NOMEM. */

/* One mode's comparison with the baseline run (harness/cmd_gate.c makes
 * it with diverge_pair_runs). */
typedef struct regress_div_pair {
    const char *mode;                   /* borrowed */
    char unpaired[DIV_UNPAIRED_MAX];    /* "" when p holds the pair, else why not */
    div_paired p;
} regress_div_pair;

pg_status regress_divergence(const div_summary_stored *sm, size_t n,
                             const regress_div_pair *pairs, size_t n_pairs, int64_t base_id,
                             const gate_config *cfg, gate_flags *out, pg_err *err);

/* Appends the layer-scope "scale_bug" flags (the top of this file) of the
 * diagnosis spans[0..n_spans) (diag_spans of the run's ext_diagnosis rows)
 * and the error flags of run[0..n_run)'s ext:NAME whole-layer rows that no
 * span covers, in that order. PG_ERR_INTERNAL for a NULL argument with a
 * count > 0; PG_ERR_NOMEM. */
pg_status regress_diagnosis(const diag_span *spans, size_t n_spans, const layer_metric_row *run,
                            size_t n_run, gate_flags *out, pg_err *err);

/* Appends one layer-scope flag per row of u[0..n) (report_store_unsupported
 * of the run: a variant's cells its kernel cannot compute, for one reason):
 * metric "supported", verdict skipped (never a pass, never a regression:
 * nothing was computed), keyed by the first such layer, value the number of
 * layers, the message naming the layers and the reason. PG_ERR_INTERNAL for
 * a NULL argument with n > 0; PG_ERR_NOMEM. */
pg_status regress_unsupported(const unsupported_summary *u, size_t n, gate_flags *out,
                              pg_err *err);

/* counts[v] = flags of f with verdict v (counts has GATE_VERDICT_COUNT entries). */
void regress_count(const gate_flags *f, size_t *counts);

/* GATE_EXIT_ERROR when f holds an error verdict, else GATE_EXIT_REGRESSION
 * when it holds a regression, else GATE_EXIT_PASS. */
int regress_exit_status(const gate_flags *f);

#ifdef __cplusplus
}
#endif

#endif /* PG_REGRESS_H */
