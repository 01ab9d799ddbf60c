/* test_gate_divergence.c: Criterion tests of the gate's divergence scope
 * (harness/regress.h, regress_divergence) and its config (gate_config.h,
 * "divergence"). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "harness/gate_config.h"
#include "harness/regress.h"

/* A mode's summary: kld mean m with SE se over n sequences, same top st ± sse. */
static div_summary_stored mode_row(const char *mode, double m, double se, size_t n, double st,
                                   double sse, double tail)
{
    div_summary_stored r = {.mode = (char *)mode, .role = "mode", .reference = "bf16",
                            .top_k = 20};
    r.s.n_sequences = n;
    r.s.n_positions = 100 * n;
    r.s.kld_mean = m;
    r.s.kld_mean_se = se;
    r.s.kld_ci_low = n >= 2 ? m - 1.959963984540054 * se : NAN;
    r.s.kld_ci_high = n >= 2 ? m + 1.959963984540054 * se : NAN;
    r.s.same_top = st;
    r.s.same_top_se = sse;
    r.s.tail_mass_median = tail;
    return r;
}

static div_summary_stored floor_row(double m)
{
    div_summary_stored r = mode_row("bf16", m, m / 4, 8, 1.0, 0.0, 0.001);
    r.role = "floor";
    return r;
}

static gate_config config(const char *json)
{
    gate_config c;
    pg_err err = {0};
    cr_assert_eq(gate_config_parse(json, "g.json", &c, &err), PG_OK, "%s", err.msg);
    return c;
}

/* The verdict of the one flag of metric for mode in f (asserted to exist). */
static gate_verdict verdict_of(const gate_flags *f, const char *mode, const char *metric)
{
    for (size_t i = 0; i < f->n; i++)
        if (strcmp(f->v[i].mode, mode) == 0 && strcmp(f->v[i].metric, metric) == 0) {
            cr_assert_eq(f->v[i].scope, GATE_SCOPE_DIVERGENCE);
            return f->v[i].verdict;
        }
    cr_assert_fail("no %s flag of %s", metric, mode);
    return GATE_VERDICT_COUNT;
}

static gate_flags judge(const div_summary_stored *rows, size_t n, const gate_config *c)
{
    gate_flags f = {0};
    pg_err err = {0};
    cr_assert_eq(regress_divergence(rows, n, NULL, 0, -1, c, &f, &err), PG_OK, "%s", err.msg);
    return f;
}

/* The gate of rows against baseline run 7 by pairs[0..n_pairs). */
static gate_flags judge_vs(const div_summary_stored *rows, size_t n, const regress_div_pair *pairs,
                           size_t n_pairs, const gate_config *c)
{
    gate_flags f = {0};
    pg_err err = {0};
    cr_assert_eq(regress_divergence(rows, n, pairs, n_pairs, 7, c, &f, &err), PG_OK, "%s",
                 err.msg);
    return f;
}

/* A pair of mode whose mean KLD went from base to base + d with SE se
 * over 8 sequences, same top from 0.95 by dt with SE tse. */
static regress_div_pair pair_of(const char *mode, double base, double d, double se, double dt,
                                double tse)
{
    regress_div_pair p = {.mode = mode};
    p.p.n_sequences = 8;
    p.p.n_positions = 800;
    p.p.kld_base = base;
    p.p.kld_run = base + d;
    p.p.kld_diff = d;
    p.p.kld_diff_se = se;
    p.p.kld_diff_low = d - 1.959963984540054 * se;
    p.p.kld_diff_high = d + 1.959963984540054 * se;
    p.p.same_top_base = 0.95;
    p.p.same_top_run = 0.95 + dt;
    p.p.same_top_diff = dt;
    p.p.same_top_diff_se = tse;
    p.p.same_top_diff_low = dt - 1.959963984540054 * tse;
    p.p.same_top_diff_high = dt + 1.959963984540054 * tse;
    return p;
}

Test(gate_divergence, kld_budget_passes_fails_and_straddles_by_the_interval)
{
    const gate_config c = config("{\"divergence\":{\"kld_mean\":{\"ok\":0.01,\"bad\":0.01,"
                                 "\"edge\":0.01,\"over\":0.01,\"same\":0.01}}}");
    const div_summary_stored rows[] = {
        floor_row(1e-6),
        mode_row("ok", 0.004, 0.001, 8, 0.99, 0.01, 0.01),    /* CI high 0.00596 <= 0.01 */
        mode_row("bad", 0.02, 0.002, 8, 0.9, 0.01, 0.01),     /* CI low 0.0161 > 0.01 */
        mode_row("edge", 0.009, 0.002, 8, 0.9, 0.01, 0.01),   /* [0.0051, 0.0129] */
        mode_row("over", 0.011, 0.002, 8, 0.9, 0.01, 0.01),   /* above b, CI [0.0071, 0.0149] */
        mode_row("same", 0.0, 0.0, 8, 1.0, 0.0, 0.01),        /* an identical pair */
    };
    gate_flags f = judge(rows, 6, &c);
    cr_assert_eq(verdict_of(&f, "ok", GATE_METRIC_KLD_MEAN), GATE_VERDICT_PASS);
    /* A mean over the budget within its noise is not a regression, nor one under it a pass. */
    cr_assert_eq(verdict_of(&f, "over", GATE_METRIC_KLD_MEAN), GATE_VERDICT_INCONCLUSIVE);
    cr_assert_eq(verdict_of(&f, "bad", GATE_METRIC_KLD_MEAN), GATE_VERDICT_REGRESSION);
    cr_assert_eq(verdict_of(&f, "edge", GATE_METRIC_KLD_MEAN), GATE_VERDICT_INCONCLUSIVE);
    cr_assert_eq(verdict_of(&f, "same", GATE_METRIC_KLD_MEAN), GATE_VERDICT_PASS);
    cr_assert_eq(f.n, 5, "one flag per mode, none for the floor");
    for (size_t i = 0; i < f.n; i++)
        cr_assert(strstr(f.v[i].message, "MDE") != NULL, "states the MDE: %s", f.v[i].message);
    cr_assert_eq(regress_exit_status(&f), GATE_EXIT_REGRESSION);
    gate_flags_free(&f);
}

Test(gate_divergence, same_top_minimum_by_its_interval)
{
    const gate_config c = config("{\"divergence\":{\"same_top_min\":{\"ok\":0.95,\"bad\":0.95,"
                                 "\"edge\":0.95}}}");
    const div_summary_stored rows[] = {
        floor_row(1e-6),
        mode_row("ok", 0.004, 0.001, 8, 0.99, 0.01, 0.01),    /* 0.99 - 0.0196 >= 0.95 */
        mode_row("bad", 0.004, 0.001, 8, 0.90, 0.01, 0.01),   /* 0.90 + 0.0196 < 0.95 */
        mode_row("edge", 0.004, 0.001, 8, 0.96, 0.01, 0.01),
    };
    gate_flags f = judge(rows, 4, &c);
    cr_assert_eq(verdict_of(&f, "ok", GATE_METRIC_SAME_TOP), GATE_VERDICT_PASS);
    cr_assert_eq(verdict_of(&f, "bad", GATE_METRIC_SAME_TOP), GATE_VERDICT_REGRESSION);
    cr_assert_eq(verdict_of(&f, "edge", GATE_METRIC_SAME_TOP), GATE_VERDICT_INCONCLUSIVE);
    gate_flags_free(&f);
}

Test(gate_divergence, missing_evidence_is_an_error_never_a_pass)
{
    const gate_config c = config("{\"divergence\":{\"kld_mean\":{\"fp8kv\":0.01,\"tail\":0.01,"
                                 "\"few\":0.01}}}");
    /* no budget; a meaningless bound; too few sequences; no floor */
    const div_summary_stored rows[] = {
        mode_row("unbudgeted", 0.004, 0.001, 8, 0.99, 0.01, 0.01),
        mode_row("tail", 0.004, 0.001, 8, 0.99, 0.01, 0.2),
        mode_row("few", 0.004, NAN, 1, 0.99, NAN, 0.01),
        mode_row("fp8kv", 0.004, 0.001, 8, 0.99, 0.01, 0.01),
    };
    gate_flags f = judge(rows, 4, &c);
    cr_assert_eq(verdict_of(&f, "unbudgeted", GATE_METRIC_BUDGET), GATE_VERDICT_ERROR);
    cr_assert_eq(verdict_of(&f, "tail", GATE_METRIC_TAIL_MASS), GATE_VERDICT_ERROR);
    cr_assert_eq(verdict_of(&f, "few", GATE_METRIC_SEQUENCES), GATE_VERDICT_ERROR);
    /* Without a noise floor a budget cannot be told from serving noise. */
    cr_assert_eq(verdict_of(&f, "fp8kv", GATE_METRIC_KLD_MEAN), GATE_VERDICT_ERROR);
    cr_assert_eq(regress_exit_status(&f), GATE_EXIT_ERROR);
    gate_flags_free(&f);
}

Test(gate_divergence, a_floor_not_below_the_budget_is_an_error)
{
    const gate_config c = config("{\"divergence\":{\"kld_mean\":{\"fp8kv\":0.001}}}");
    const div_summary_stored rows[] = {floor_row(0.002),
                                       mode_row("fp8kv", 0.0005, 0.0001, 8, 1, 0, 0.01)};
    gate_flags f = judge(rows, 2, &c);
    cr_assert_eq(verdict_of(&f, "fp8kv", GATE_METRIC_KLD_MEAN), GATE_VERDICT_ERROR);
    cr_assert(strstr(f.v[0].message, "noise floor") != NULL, "%s", f.v[0].message);
    gate_flags_free(&f);
}

Test(gate_divergence, the_config_is_validated_by_name)
{
    gate_config c;
    pg_err err = {0};
    cr_assert_eq(gate_config_parse("{\"divergence\":{\"kld\":{}}}", "g.json", &c, &err),
                 PG_ERR_FORMAT);
    cr_assert(strstr(err.msg, "divergence.kld") && strstr(err.msg, "kld_mean"), "%s", err.msg);
    cr_assert_eq(gate_config_parse("{\"divergence\":{\"same_top_min\":{\"q4\":1.5}}}", "g.json",
                                   &c, &err), PG_ERR_FORMAT);
    cr_assert(strstr(err.msg, "same_top_min"), "%s", err.msg);
    cr_assert_eq(gate_config_parse("{\"divergence\":{\"kld_mean\":{\"q4\":-1}}}", "g.json", &c,
                                   &err), PG_ERR_FORMAT);
    cr_assert_eq(gate_config_parse("{\"divergence\":{\"min_sequences\":1}}", "g.json", &c, &err),
                 PG_ERR_FORMAT);
    c = config("{\"divergence\":{\"kld_mean\":{\"q4kv\":0.02},\"max_tail_mass\":0.1,"
               "\"min_sequences\":5}}");
    cr_assert_eq(gate_bound_find(&c.divergence.kld_mean, "q4kv"), 0.02);
    cr_assert_eq(c.divergence.max_tail_mass, 0.1);
    cr_assert_eq(c.divergence.min_sequences, 5);
    gate_config_default(&c);
    cr_assert_eq(c.divergence.max_tail_mass, GATE_DEFAULT_MAX_TAIL_MASS);
    cr_assert_eq(c.divergence.min_sequences, GATE_DEFAULT_MIN_SEQUENCES);
}

Test(gate_divergence, each_mode_against_the_baseline_run_paired_over_sequences)
{
    gate_config c;
    gate_config_default(&c);  /* no budget: the baseline run judges */
    const div_summary_stored rows[] = {
        floor_row(1e-6),
        mode_row("worse", 0.015, 0.001, 8, 0.9, 0.01, 0.01),
        mode_row("same", 0.010, 0.001, 8, 0.95, 0.01, 0.01),
        mode_row("noisy", 0.011, 0.004, 8, 0.95, 0.01, 0.01),
        mode_row("better", 0.005, 0.001, 8, 0.97, 0.01, 0.01),
        mode_row("gone", 0.010, 0.001, 8, 0.95, 0.01, 0.01),
    };
    regress_div_pair pairs[] = {
        /* +0.005 on 0.01, CI [0.0045, 0.0055]: above 0 and past e = 0.0025 */
        pair_of("worse", 0.010, 0.005, 0.00025, -0.05, 0.005),
        /* an identical rerun: exactly 0 with SE 0 */
        pair_of("same", 0.010, 0.0, 0.0, 0.0, 0.0),
        /* +0.001 with SE 0.002: MDE 0.0056 > e, interval straddles */
        pair_of("noisy", 0.010, 0.001, 0.002, 0.0, 0.001),
        pair_of("better", 0.010, -0.005, 0.00025, 0.02, 0.002),
        {.mode = "gone"},
    };
    snprintf(pairs[4].unpaired, sizeof pairs[4].unpaired, "baseline run 7 did not compare mode gone");
    gate_flags f = judge_vs(rows, 6, pairs, 5, &c);
    cr_assert_eq(verdict_of(&f, "worse", GATE_METRIC_KLD_VS_BASELINE), GATE_VERDICT_REGRESSION);
    cr_assert_eq(verdict_of(&f, "worse", GATE_METRIC_SAME_TOP_VS_BASELINE),
                 GATE_VERDICT_REGRESSION);
    cr_assert_eq(verdict_of(&f, "same", GATE_METRIC_KLD_VS_BASELINE), GATE_VERDICT_NO_CHANGE);
    cr_assert_eq(verdict_of(&f, "same", GATE_METRIC_SAME_TOP_VS_BASELINE), GATE_VERDICT_NO_CHANGE);
    cr_assert_eq(verdict_of(&f, "noisy", GATE_METRIC_KLD_VS_BASELINE), GATE_VERDICT_INCONCLUSIVE);
    cr_assert_eq(verdict_of(&f, "better", GATE_METRIC_KLD_VS_BASELINE), GATE_VERDICT_IMPROVEMENT);
    cr_assert_eq(verdict_of(&f, "better", GATE_METRIC_SAME_TOP_VS_BASELINE),
                 GATE_VERDICT_IMPROVEMENT);
    cr_assert_eq(verdict_of(&f, "gone", GATE_METRIC_KLD_VS_BASELINE), GATE_VERDICT_ERROR);
    /* With a baseline run, a mode without a budget is judged by it: no budget error. */
    for (size_t i = 0; i < f.n; i++) {
        cr_assert_str_neq(f.v[i].metric, GATE_METRIC_BUDGET, "%s", f.v[i].message);
        if (strcmp(f.v[i].mode, "worse") == 0 &&
            strcmp(f.v[i].metric, GATE_METRIC_KLD_VS_BASELINE) == 0) {
            cr_assert_float_eq(f.v[i].threshold, 0.0025, 1e-15, "e = 0.25 x the baseline's");
            cr_assert(strstr(f.v[i].message, "paired over 8 sequences"), "%s", f.v[i].message);
        }
    }
    cr_assert_eq(regress_exit_status(&f), GATE_EXIT_ERROR);
    gate_flags_free(&f);
}

Test(gate_divergence, the_min_effect_is_never_below_the_noise_floor)
{
    gate_config c = config("{\"divergence\":{\"kld_rel_effect\":0.1}}");
    /* +0.0015 on 0.01 is past 0.1 x 0.01, but within a floor of 0.002. */
    const div_summary_stored rows[] = {floor_row(0.002),
                                       mode_row("m", 0.0115, 0.0001, 8, 0.95, 0.01, 0.01)};
    const regress_div_pair pairs[] = {pair_of("m", 0.010, 0.0015, 0.0001, 0.0, 0.0)};
    gate_flags f = judge_vs(rows, 2, pairs, 1, &c);
    cr_assert_eq(verdict_of(&f, "m", GATE_METRIC_KLD_VS_BASELINE), GATE_VERDICT_NO_CHANGE);
    gate_flags_free(&f);
    c = config("{\"divergence\":{\"kld_rel_effect\":0.1}}");
    const div_summary_stored low_floor[] = {floor_row(1e-6), rows[1]};
    f = judge_vs(low_floor, 2, pairs, 1, &c);
    cr_assert_eq(verdict_of(&f, "m", GATE_METRIC_KLD_VS_BASELINE), GATE_VERDICT_REGRESSION);
    gate_flags_free(&f);
    cr_assert_eq(c.divergence.kld_rel_effect, 0.1);
    gate_config_default(&c);
    cr_assert_eq(c.divergence.kld_rel_effect, GATE_DEFAULT_KLD_REL_EFFECT);
    cr_assert_eq(c.divergence.same_top_effect, GATE_DEFAULT_SAME_TOP_EFFECT);
    pg_err err = {0};
    cr_assert_eq(gate_config_parse("{\"divergence\":{\"same_top_effect\":2}}", "g.json", &c,
                                   &err), PG_ERR_FORMAT);
    cr_assert(strstr(err.msg, "same_top_effect"), "%s", err.msg);
}
