/*
 * test_regress.c: the regression gate's pure logic on hand-made rows
 * (harness/regress.h): thresholds in each direction and exactly at the
 * boundary, NaN/Inf, a missing layer, mode pairs, eval verdicts (with the
 * shipped demo's numbers), the JSON config's validation
 * (harness/gate_config.h) and the JUnit writer (reports/junit.h).
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "evals/score.h"
#include "harness/gate_config.h"
#include "reports/junit.h"
#include "harness/regress.h"
#include "testutil.h"

/* An eval_scores row as the gate reads it, from its fields in this order. */
#define SCORE(e, m, ef, n, acc, se, nv, nt)                                              \
    {.eval = e, .mode = m, .effort = ef, .n_problems = n, .accuracy = acc, .stderr_ = se, \
     .n_valid = nv, .n_truncated = nt}
/* An eval_pairs row (A - B) as the gate reads it, from its fields in this order. */
#define PAIR(e, ef, ma, mb, n, md, lo, hi, mde_, w, l, sp)                                 \
    {.eval = e, .effort = ef, .mode_a = ma, .mode_b = mb, .n_problems = n, .mean_diff = md, \
     .ci_low = lo, .ci_high = hi, .mde = mde_, .wins = w, .losses = l, .sign_p = sp}

/* A row with every metric NaN except those set afterwards. */
static layer_metric_row row(const char *capture, int layer, const char *variant)
{
    layer_metric_row r = {.capture = capture, .layer = layer, .variant = variant};
    r.v = (pg_metric_values){.rel_l2 = NAN, .max_abs = NAN, .mean_abs = NAN, .p99_abs = NAN,
                             .cos_sim = NAN, .sqnr_db = NAN};
    return r;
}

/* The flag of (layer, variant, metric) in f; fails the test when absent. */
static const gate_flag *find(const gate_flags *f, gate_scope scope, int layer,
                                const char *variant, const char *metric)
{
    for (size_t i = 0; i < f->n; i++)
        if (f->v[i].scope == scope && f->v[i].layer == layer &&
            strcmp(f->v[i].variant, variant) == 0 && strcmp(f->v[i].metric, metric) == 0)
            return &f->v[i];
    cr_assert_fail("no %s flag for layer %d %s %s", gate_scope_name(scope), layer, variant,
                   metric);
    return NULL;
}

/* A config with only rel_l2 compared, tolerance tol, and no bounds at all. */
static gate_config bare_config(double tol)
{
    gate_config c;
    gate_config_default(&c);
    c.layer.rel_tol = tol;
    c.layer.metrics = 1u << PG_METRIC_REL_L2;
    for (int m = 0; m < PG_METRIC_VALUE_COUNT; m++) c.layer.abs[m].n = 0;
    c.mode_pair.abs.n = 0;
    c.mode_pair.ratio.n = 0;
    return c;
}

Test(regress, higher_is_worse_threshold_is_max_of_bound_and_relative_term)
{
    /* 0.5 * (1 + 0.25) = 0.625 exactly in binary. */
    cr_expect_eq(regress_threshold(PG_METRIC_REL_L2, 0.5, NAN, 0.25), 0.625);
    cr_expect_eq(regress_threshold(PG_METRIC_REL_L2, 0.5, 0.5, 0.25), 0.625);   /* bound below */
    cr_expect_eq(regress_threshold(PG_METRIC_REL_L2, 0.5, 0.75, 0.25), 0.75);   /* bound above */
    cr_expect_eq(regress_threshold(PG_METRIC_P99_ABS, NAN, 0.75, 0.25), 0.75);  /* no baseline */
    cr_expect_eq(regress_threshold(PG_METRIC_MAX_ABS, INFINITY, 0.75, 0.25), 0.75);
    cr_expect(isnan(regress_threshold(PG_METRIC_MAX_ABS, INFINITY, NAN, 0.25)));
    /* Exactly at the threshold passes; one ulp above regresses. */
    cr_expect_not(regress_worse(PG_METRIC_REL_L2, 0.625, 0.625));
    cr_expect(regress_worse(PG_METRIC_REL_L2, nextafter(0.625, 1.0), 0.625));
    cr_expect_not(regress_worse(PG_METRIC_REL_L2, nextafter(0.625, 0.0), 0.625));
    cr_expect(regress_worse(PG_METRIC_REL_L2, INFINITY, 0.625));
    cr_expect_not(regress_worse(PG_METRIC_REL_L2, NAN, 0.625));
}

Test(regress, lower_is_worse_threshold_is_min_of_bound_and_relative_term)
{
    cr_expect(pg_metric_higher_is_worse(PG_METRIC_MEAN_ABS));
    cr_expect_not(pg_metric_higher_is_worse(PG_METRIC_COS_SIM));
    cr_expect_not(pg_metric_higher_is_worse(PG_METRIC_SQNR_DB));
    /* cos_sim 0.5 * (1 - 0.25) = 0.375; with a bound 0.25 the min is 0.25. */
    cr_expect_eq(regress_threshold(PG_METRIC_COS_SIM, 0.5, NAN, 0.25), 0.375);
    cr_expect_eq(regress_threshold(PG_METRIC_COS_SIM, 0.5, 0.25, 0.25), 0.25);
    cr_expect_eq(regress_threshold(PG_METRIC_COS_SIM, 0.5, 0.5, 0.25), 0.375);
    /* A negative SQNR moves away from zero: -8 dB - |-8| * 0.25 = -10 dB. */
    cr_expect_eq(regress_threshold(PG_METRIC_SQNR_DB, -8.0, NAN, 0.25), -10.0);
    /* sqnr +inf (identical output) gives no relative term. */
    cr_expect(isnan(regress_threshold(PG_METRIC_SQNR_DB, INFINITY, NAN, 0.25)));
    cr_expect_not(regress_worse(PG_METRIC_COS_SIM, 0.375, 0.375));
    cr_expect(regress_worse(PG_METRIC_COS_SIM, nextafter(0.375, 0.0), 0.375));
    cr_expect_not(regress_worse(PG_METRIC_COS_SIM, 0.9, 0.375));  /* higher cosine is better */
    cr_expect(regress_worse(PG_METRIC_SQNR_DB, -INFINITY, -10.0));
}

Test(regress, layers_boundary_direction_nonfinite_missing_and_new)
{
    gate_config c = bare_config(0.25);
    c.layer.metrics |= 1u << PG_METRIC_COS_SIM;
    cr_assert_eq(gate_bound_set(&c.layer.abs[PG_METRIC_REL_L2], "fp8qkv@fa3", 0.75, NULL), PG_OK);
    layer_metric_row base[5], run[4];
    base[0] = row("a", 0, "bf16");  /* at the threshold exactly */
    base[1] = row("a", 0, "fp8kv@fixed"); /* one ulp above */
    base[2] = row("a", 1, "bf16");  /* NaN in the run */
    base[3] = row("a", 1, "fp8kv@fixed"); /* missing from the run */
    base[4] = row("a", 2, "bf16");  /* cosine drops */
    for (int i = 0; i < 5; i++) {
        base[i].v.rel_l2 = 0.5;
        base[i].v.cos_sim = 0.5;
    }
    /* Given out of order: regress sorts by (capture, layer, variant). */
    run[0] = base[1];
    run[0].v.rel_l2 = nextafter(0.625, 1.0);
    run[1] = base[0];
    run[1].v.rel_l2 = 0.625;
    run[2] = base[2];
    run[2].v.rel_l2 = INFINITY;
    run[2].v.cos_sim = NAN;
    run[2].v.nan_count = 3;
    run[3] = base[4];
    run[3].v.rel_l2 = 0.5;
    run[3].v.cos_sim = nextafter(0.375, 0.0);
    gate_flags f = {0};
    pg_err err = {0};
    cr_assert_eq(regress_layers(run, 4, base, 5, 7, &c, &f, &err), PG_OK, "%s", err.msg);

    const gate_flag *x = find(&f, GATE_SCOPE_LAYER, 0, "bf16", "rel_l2");
    cr_expect_eq(x->verdict, GATE_VERDICT_PASS, "%s", x->message);
    cr_expect_eq(x->threshold, 0.625);
    cr_expect_eq(x->baseline_value, 0.5);
    x = find(&f, GATE_SCOPE_LAYER, 0, "fp8kv@fixed", "rel_l2");
    cr_expect_eq(x->verdict, GATE_VERDICT_REGRESSION, "%s", x->message);
    cr_expect(strstr(x->message, "a layer 0 fp8kv@fixed: rel_l2") != NULL, "%s", x->message);
    cr_expect(strstr(x->message, "baseline run 7") != NULL, "%s", x->message);
    x = find(&f, GATE_SCOPE_LAYER, 1, "bf16", GATE_METRIC_NONFINITE);
    cr_expect_eq(x->verdict, GATE_VERDICT_REGRESSION);
    cr_expect_eq(x->value, 3.0);
    x = find(&f, GATE_SCOPE_LAYER, 1, "bf16", "rel_l2");
    cr_expect_eq(x->verdict, GATE_VERDICT_REGRESSION, "%s", x->message);
    x = find(&f, GATE_SCOPE_LAYER, 1, "bf16", "cos_sim");  /* NaN with NaN/Inf output */
    cr_expect_eq(x->verdict, GATE_VERDICT_REGRESSION, "%s", x->message);
    x = find(&f, GATE_SCOPE_LAYER, 1, "fp8kv@fixed", GATE_METRIC_PRESENT);
    cr_expect_eq(x->verdict, GATE_VERDICT_ERROR);
    cr_expect(strstr(x->message, "missing from this run") != NULL, "%s", x->message);
    x = find(&f, GATE_SCOPE_LAYER, 2, "bf16", "cos_sim");
    cr_expect_eq(x->verdict, GATE_VERDICT_REGRESSION, "%s", x->message);
    cr_expect_eq(x->threshold, 0.375);
    x = find(&f, GATE_SCOPE_LAYER, 2, "bf16", "rel_l2");
    cr_expect_eq(x->verdict, GATE_VERDICT_PASS, "%s", x->message);
    /* Keys in order: 4 run keys x 3 flags + 1 missing key. */
    cr_expect_eq(f.n, 13);
    for (size_t i = 1; i < f.n; i++) cr_expect_geq(f.v[i].layer, f.v[i - 1].layer);
    cr_expect_eq(regress_exit_status(&f), GATE_EXIT_ERROR);  /* error outranks regression */
    size_t counts[GATE_VERDICT_COUNT];
    regress_count(&f, counts);
    cr_expect_eq(counts[GATE_VERDICT_ERROR], 1);
    cr_expect_eq(counts[GATE_VERDICT_REGRESSION], 5);
    gate_flags_free(&f);

    /* Keys new in the run (baseline run 7 lacks them): the absolute bound
     * only; with no bound for the variant an error saying how to resolve it
     * (never an exit-0 inconclusive); ~spec and ext: variants are checked
     * like the modes. */
    layer_metric_row nk[3] = {row("a", 0, "fp8qkv@fa3"), row("a", 0, "ext:trt"),
                               row("a", 0, "fp8kv@fixed~spec")};
    nk[0].v.rel_l2 = 0.75;  /* exactly at its bound */
    nk[1].v.rel_l2 = 0.1;
    nk[2].v.rel_l2 = 0.1;
    layer_metric_row nb[1] = {row("a", 0, "fp8kv@fixed~spec")};
    nb[0].v.rel_l2 = 0.05;
    cr_assert_eq(regress_layers(nk, 3, nb, 1, 7, &c, &f, &err), PG_OK, "%s", err.msg);
    cr_expect_eq(find(&f, GATE_SCOPE_LAYER, 0, "fp8qkv@fa3", "rel_l2")->verdict, GATE_VERDICT_PASS);
    /* fp8qkv is bounded on rel_l2, so its unbounded cos_sim is only unjudged. */
    cr_expect_eq(find(&f, GATE_SCOPE_LAYER, 0, "fp8qkv@fa3", "cos_sim")->verdict,
                 GATE_VERDICT_INCONCLUSIVE);
    x = find(&f, GATE_SCOPE_LAYER, 0, "ext:trt", "rel_l2");
    cr_expect_eq(x->verdict, GATE_VERDICT_ERROR, "%s", x->message);
    cr_expect_str_eq(x->message, "a layer 0 ext:trt: rel_l2 0.1: not in baseline run 7 and no "
                     "absolute bound for ext:trt in the config: set a baseline run that has it "
                     "(precgate baseline set RUN) or bound it in --config (layer.abs.ext:trt)");
    x = find(&f, GATE_SCOPE_LAYER, 0, "ext:trt", "cos_sim");
    cr_expect_eq(x->verdict, GATE_VERDICT_ERROR, "%s", x->message);
    cr_expect(strstr(x->message, "(layer.metric_abs.cos_sim.ext:trt)") != NULL, "%s", x->message);
    x = find(&f, GATE_SCOPE_LAYER, 0, "fp8kv@fixed~spec", "rel_l2");
    cr_expect_eq(x->verdict, GATE_VERDICT_REGRESSION, "%s", x->message);  /* 0.1 > 0.0625 */
    cr_expect_eq(regress_exit_status(&f), GATE_EXIT_ERROR);
    gate_flags_free(&f);

    /* The same keys in a first run (no baseline run): gaps are expected there,
     * so the unbounded ext:trt is inconclusive and the gate passes. */
    cr_assert_eq(regress_layers(nk, 2, NULL, 0, -1, &c, &f, &err), PG_OK, "%s", err.msg);
    cr_expect_eq(f.n, 3, "ext:trt: nonfinite only; fp8qkv: nonfinite and its bounded rel_l2");
    cr_expect_eq(find(&f, GATE_SCOPE_LAYER, 0, "fp8qkv@fa3", "rel_l2")->verdict, GATE_VERDICT_PASS);
    cr_expect_eq(regress_exit_status(&f), GATE_EXIT_PASS);
    gate_flags_free(&f);
}

Test(regress, a_key_twice_is_refused)
{
    gate_config c = bare_config(0.1);
    layer_metric_row r[2] = {row("a", 0, "bf16"), row("a", 0, "bf16")};
    gate_flags f = {0};
    pg_err err = {0};
    cr_expect_eq(regress_layers(r, 2, NULL, 0, 1, &c, &f, &err), PG_ERR_SHAPE);
    cr_expect(strstr(err.msg, "a layer 0 bf16 twice") != NULL, "%s", err.msg);
    gate_flags_free(&f);
}

Test(regress, mode_pairs_judge_the_gap_to_bf16_against_the_baselines)
{
    gate_config c;
    gate_config_default(&c);  /* no bound in any map; mode_pair.rel_tol 0.10 */
    layer_metric_row base[4] = {row("a", 3, "bf16"), row("a", 3, "fp8kv@fixed"),
                                row("a", 3, "fp8qkv@fa3"), row("a", 3, "ext:x")};
    base[0].v.rel_l2 = 0.002;
    base[1].v.rel_l2 = 0.062;   /* gap 0.06: allowance 0.1 x 0.06 = 0.006 */
    base[2].v.rel_l2 = 0.072;   /* gap 0.07 */
    base[3].v.rel_l2 = 0.0021;  /* gap 1e-4: allowance 0.1 x bf16's 0.002 */
    layer_metric_row r[6] = {row("a", 3, "bf16"), row("a", 3, "fp8kv@fixed"),
                             row("a", 3, "fp8qkv@fa3"), row("a", 3, "fp8kv@fixed~spec"),
                             row("a", 3, "ext:x"), row("a", 4, "fp8kv@fixed")};
    r[0].v.rel_l2 = 0.003;               /* bf16 moved too: the gap is what counts */
    r[1].v.rel_l2 = 0.003 + 0.06 + 0.1 * 0.06;   /* exactly at the threshold */
    r[2].v.rel_l2 = nextafter(0.003 + 0.07 + 0.1 * 0.07, 1.0);  /* one ulp above */
    r[3].v.rel_l2 = 0.9;                 /* not against the reference: skipped */
    r[4].v.rel_l2 = 0.003 + 0.0001 + 0.00019;    /* within its floor allowance */
    r[5].v.rel_l2 = 0.05;                /* layer 4: not in the baseline */
    gate_flags f = {0};
    pg_err err = {0};
    cr_assert_eq(regress_mode_pairs(r, 6, base, 4, 9, &c, &f, &err), PG_OK, "%s", err.msg);
    cr_expect_eq(f.n, 5);
    const gate_flag *x = find(&f, GATE_SCOPE_MODE_PAIR, 3, "bf16", "rel_l2");
    cr_expect_eq(x->verdict, GATE_VERDICT_PASS, "%s", x->message);
    x = find(&f, GATE_SCOPE_MODE_PAIR, 3, "fp8kv@fixed-bf16", "rel_l2");
    cr_expect_eq(x->verdict, GATE_VERDICT_PASS, "%s", x->message);
    cr_expect(fabs(x->threshold - (0.003 + 0.06 + 0.006)) < 1e-15, "%.17g", x->threshold);
    cr_expect_eq(x->baseline_value, 0.003);
    cr_expect(strstr(x->message, "in baseline run 9") != NULL, "%s", x->message);
    x = find(&f, GATE_SCOPE_MODE_PAIR, 3, "fp8qkv@fa3-bf16", "rel_l2");
    cr_expect_eq(x->verdict, GATE_VERDICT_REGRESSION, "%s", x->message);
    x = find(&f, GATE_SCOPE_MODE_PAIR, 3, "ext:x-bf16", "rel_l2");
    cr_expect_eq(x->verdict, GATE_VERDICT_PASS, "%s", x->message);
    /* Layer 4 is not in baseline run 9 and no budget bounds fp8kv: an error. */
    x = find(&f, GATE_SCOPE_MODE_PAIR, 4, "fp8kv@fixed-bf16", "rel_l2");
    cr_expect_eq(x->verdict, GATE_VERDICT_ERROR, "%s", x->message);
    cr_expect_str_eq(x->message, "a layer 4 fp8kv@fixed-bf16: rel_l2 vs fp64 reference 0.05: baseline "
                     "run 9 has no fp8kv@fixed row in this layer and the config has no mode_pair "
                     "budget for fp8kv@fixed: set a baseline run that has it (precgate baseline set "
                     "RUN) or bound it in --config (mode_pair.abs.fp8kv@fixed or "
                     "mode_pair.ratio.fp8kv@fixed)");
    cr_expect_eq(regress_exit_status(&f), GATE_EXIT_ERROR);
    gate_flags_free(&f);
    /* A variant the baseline's layer has while it lacks that layer's bf16:
     * no gap to compare either, so the same error, naming bf16. */
    cr_assert_eq(regress_mode_pairs(r, 3, base + 1, 3, 9, &c, &f, &err), PG_OK, "%s", err.msg);
    x = find(&f, GATE_SCOPE_MODE_PAIR, 3, "fp8kv@fixed-bf16", "rel_l2");
    cr_expect_eq(x->verdict, GATE_VERDICT_ERROR, "%s", x->message);
    cr_expect(strstr(x->message, "baseline run 9 has no bf16 row in this layer") != NULL, "%s",
              x->message);
    gate_flags_free(&f);

    /* No baseline run: the gap is recorded (inconclusive), not judged against a
     * built-in bound; bf16 passes its finite, < 1 check. */
    cr_assert_eq(regress_mode_pairs(r, 3, NULL, 0, -1, &c, &f, &err), PG_OK, "%s", err.msg);
    cr_expect_eq(f.n, 3);
    x = find(&f, GATE_SCOPE_MODE_PAIR, 3, "fp8kv@fixed-bf16", "rel_l2");
    cr_expect_eq(x->verdict, GATE_VERDICT_INCONCLUSIVE, "%s", x->message);
    cr_expect(strstr(x->message, "no baseline run: gap fp8kv@fixed - bf16 0.066 recorded") != NULL,
              "%s", x->message);
    cr_expect_eq(find(&f, GATE_SCOPE_MODE_PAIR, 3, "bf16", "rel_l2")->verdict, GATE_VERDICT_PASS);
    gate_flags_free(&f);

    /* Budgets from a config apply from the first run: abs and ratio x bf16. */
    cr_assert_eq(gate_bound_set(&c.mode_pair.abs, "fp8kv@fixed", 0.05, &err), PG_OK);
    cr_assert_eq(gate_bound_set(&c.mode_pair.ratio, "fp8qkv@fa3", 30, &err), PG_OK);
    cr_assert_eq(regress_mode_pairs(r, 3, NULL, 0, -1, &c, &f, &err), PG_OK, "%s", err.msg);
    x = find(&f, GATE_SCOPE_MODE_PAIR, 3, "fp8kv@fixed-bf16", "rel_l2");
    cr_expect_eq(x->verdict, GATE_VERDICT_REGRESSION, "%s", x->message);  /* 0.069 > 0.05 */
    cr_expect_eq(x->threshold, 0.05);
    x = find(&f, GATE_SCOPE_MODE_PAIR, 3, "fp8qkv@fa3-bf16", "rel_l2");
    cr_expect_eq(x->verdict, GATE_VERDICT_PASS, "%s", x->message);        /* 0.080 <= 30 x 0.003 */
    cr_expect(fabs(x->threshold - 0.09) < 1e-15);
    gate_flags_free(&f);
    /* With a baseline, a looser abs bound wins over the gap term (max); layer
     * 4, new in the run, is judged by its abs bound alone (0.05 <= 0.05). */
    cr_assert_eq(regress_mode_pairs(r, 6, base, 4, 9, &c, &f, &err), PG_OK, "%s", err.msg);
    x = find(&f, GATE_SCOPE_MODE_PAIR, 3, "fp8kv@fixed-bf16", "rel_l2");
    cr_expect_eq(x->verdict, GATE_VERDICT_PASS, "%s", x->message);
    cr_expect(strstr(x->message, "max(abs 0.05, bf16 0.003 + baseline gap") != NULL, "%s",
              x->message);
    x = find(&f, GATE_SCOPE_MODE_PAIR, 4, "fp8kv@fixed-bf16", "rel_l2");
    cr_expect_eq(x->verdict, GATE_VERDICT_PASS, "%s", x->message);
    cr_expect_eq(x->threshold, 0.05);
    gate_flags_free(&f);
}

/* A uniform double in [lo, hi) from *state (xorshift64; fixed seeds keep
 * the tests reproducible). */
static double uniform(uint64_t *state, double lo, double hi)
{
    uint64_t x = *state;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    *state = x;
    return lo + (hi - lo) * (double)(x >> 11) * 0x1.0p-53;
}

/* Layers in each mode_pair test of many random values. */
#define PAIR_LAYERS 4000

/* Issue 14 section 5 (review): at mode_pair.rel_tol 0, a run whose gap to
 * bf16 is the baseline's, bit for bit, is not worse. */
Test(regress, a_gap_equal_to_the_baselines_passes_at_rel_tol_0)
{
    gate_config c;
    gate_config_default(&c);
    c.mode_pair.rel_tol = 0;
    c.layer.rel_tol = 0;
    static layer_metric_row base[2 * PAIR_LAYERS], run[2 * PAIR_LAYERS];
    uint64_t seed = 0x9e3779b97f4a7c15u;
    for (int i = 0; i < PAIR_LAYERS; i++) {
        base[2 * i] = row("a", i, "bf16");
        base[2 * i + 1] = row("a", i, "fp8kv");
        /* bf16 1e-4..1e-2; the variant 0.01x..30x of it (log-uniform): an
         * ext:NAME below bf16 is where r + (B - R) rounds away from B. */
        base[2 * i].v.rel_l2 = exp(uniform(&seed, log(1e-4), log(1e-2)));
        base[2 * i + 1].v.rel_l2 = base[2 * i].v.rel_l2 *
                                            exp(uniform(&seed, log(0.01), log(30.0)));
    }
    /* An identical rerun: v - r is B - R bit for bit. */
    gate_flags f = {0};
    pg_err err = {0};
    cr_assert_eq(regress_mode_pairs(base, 2 * PAIR_LAYERS, base, 2 * PAIR_LAYERS, 1, &c, &f, &err),
                 PG_OK, "%s", err.msg);
    size_t counts[GATE_VERDICT_COUNT];
    regress_count(&f, counts);
    cr_expect_eq(counts[GATE_VERDICT_PASS], 2 * PAIR_LAYERS, "%zu regressions of an identical rerun",
                 counts[GATE_VERDICT_REGRESSION]);
    gate_flags_free(&f);

    /* bf16 worse by up to half, the variant by the same amount, chosen so
     * that v - r == B - R exactly while r + (B - R) rounds below v: the gap
     * did not grow, although a threshold on v says it did. */
    size_t tricky = 0;
    for (int i = 0; i < PAIR_LAYERS; i++) {
        const double R = base[2 * i].v.rel_l2, B = base[2 * i + 1].v.rel_l2;
        const double gap = B - R, r = R * (1.0 + uniform(&seed, 0.05, 0.5));
        /* The largest v with v - r <= gap, as computed. */
        double v = r + gap;
        while (v - r > gap) v = nextafter(v, 0.0);
        while (nextafter(v, 1.0) - r <= gap) v = nextafter(v, 1.0);
        tricky += v > r + gap;  /* a threshold on v would call it worse */
        run[2 * i] = base[2 * i];
        run[2 * i].v.rel_l2 = r;
        run[2 * i + 1] = base[2 * i + 1];
        run[2 * i + 1].v.rel_l2 = v;
        cr_assert_gt(v, B * (1.0 + 1e-3), "layer %d: the variant's own error grew", i);
    }
    cr_assert_gt(tricky, PAIR_LAYERS / 100, "only %zu layers where the sum rounds", tricky);
    cr_assert_eq(regress_mode_pairs(run, 2 * PAIR_LAYERS, base, 2 * PAIR_LAYERS, 1, &c, &f, &err),
                 PG_OK, "%s", err.msg);
    regress_count(&f, counts);
    cr_expect_eq(counts[GATE_VERDICT_PASS], 2 * PAIR_LAYERS, "%zu regressions of %zu rounding cases",
                 counts[GATE_VERDICT_REGRESSION], tricky);
    gate_flags_free(&f);
}

/* Issue 14 section 5 (review): bf16 improving does not make an unchanged
 * variant a regression; the variant's own growth past the layer scope's
 * tolerance still does. */
Test(regress, a_variant_that_did_not_change_passes_when_bf16_improves)
{
    gate_config c;
    gate_config_default(&c);  /* layer.rel_tol and mode_pair.rel_tol 0.10 */
    layer_metric_row base[2] = {row("a", 0, "bf16"), row("a", 0, "ext:flash")};
    base[0].v.rel_l2 = 0.004;
    base[1].v.rel_l2 = 0.003;
    layer_metric_row run[2] = {base[0], base[1]};
    run[0].v.rel_l2 = 0.002;  /* the gap went from -0.001 to +0.001 */
    gate_flags f = {0};
    pg_err err = {0};
    cr_assert_eq(regress_mode_pairs(run, 2, base, 2, 5, &c, &f, &err), PG_OK, "%s", err.msg);
    const gate_flag *x = find(&f, GATE_SCOPE_MODE_PAIR, 0, "ext:flash-bf16", "rel_l2");
    cr_expect_eq(x->verdict, GATE_VERDICT_PASS, "%s", x->message);
    cr_expect_str_eq(x->message, "a layer 0 ext:flash-bf16: rel_l2 vs fp64 reference 0.003 <= "
                     "threshold 0.0033 = max(bf16 0.002 + baseline gap -0.001 + 0.1 x 0.004 (gap "
                     "0.001 vs -0.001 in baseline run 5), own baseline 0.003 + 0.1 x 0.003)");
    cr_expect_eq(x->threshold, 0.003 + 0.003 * 0.1);
    gate_flags_free(&f);
    /* At its own bound it passes; one ulp above, with the gap grown, it fails. */
    run[1].v.rel_l2 = 0.003 + 0.003 * 0.1;
    cr_assert_eq(regress_mode_pairs(run, 2, base, 2, 5, &c, &f, &err), PG_OK, "%s", err.msg);
    x = find(&f, GATE_SCOPE_MODE_PAIR, 0, "ext:flash-bf16", "rel_l2");
    cr_expect_eq(x->verdict, GATE_VERDICT_PASS, "%s", x->message);
    gate_flags_free(&f);
    run[1].v.rel_l2 = nextafter(0.003 + 0.003 * 0.1, 1.0);
    cr_assert_eq(regress_mode_pairs(run, 2, base, 2, 5, &c, &f, &err), PG_OK, "%s", err.msg);
    x = find(&f, GATE_SCOPE_MODE_PAIR, 0, "ext:flash-bf16", "rel_l2");
    cr_expect_eq(x->verdict, GATE_VERDICT_REGRESSION, "%s", x->message);
    gate_flags_free(&f);
}

Test(regress, mode_pairs_fail_nonfinite_and_all_zero_outputs_without_a_baseline)
{
    gate_config c;
    gate_config_default(&c);
    layer_metric_row r[5] = {row("a", 0, "bf16"), row("a", 0, "ext:nan"), row("a", 0, "ext:zeros"),
                              row("a", 0, "ext:far"), row("a", 0, "fp8kv@fixed~spec")};
    r[0].v.rel_l2 = 0.002;
    r[1].v.nan_count = 1;
    r[1].v.rel_l2 = INFINITY;
    r[2].v.rel_l2 = 1.0;                  /* an all-zero output */
    r[3].v.rel_l2 = nextafter(1.0, 0.0);  /* just closer than zeros */
    r[4].v.nan_count = 3;
    gate_flags f = {0};
    pg_err err = {0};
    cr_assert_eq(regress_mode_pairs(r, 5, NULL, 0, -1, &c, &f, &err), PG_OK, "%s", err.msg);
    cr_expect_eq(f.n, 4);
    const gate_flag *x = find(&f, GATE_SCOPE_MODE_PAIR, 0, "ext:nan-bf16", "rel_l2");
    cr_expect_eq(x->verdict, GATE_VERDICT_REGRESSION, "%s", x->message);
    x = find(&f, GATE_SCOPE_MODE_PAIR, 0, "ext:zeros-bf16", "rel_l2");
    cr_expect_eq(x->verdict, GATE_VERDICT_REGRESSION, "%s", x->message);
    cr_expect(strstr(x->message, "no closer to the reference than an all-zero output") != NULL,
              "%s", x->message);
    cr_expect_eq(x->threshold, 1.0);
    x = find(&f, GATE_SCOPE_MODE_PAIR, 0, "ext:far-bf16", "rel_l2");
    cr_expect_eq(x->verdict, GATE_VERDICT_INCONCLUSIVE, "%s", x->message);
    gate_flags_free(&f);
    /* The layer scope flags NaN/Inf of every variant on a first run, ~spec too,
     * and compares nothing else without a bound. */
    cr_assert_eq(regress_layers(r, 5, NULL, 0, -1, &c, &f, &err), PG_OK, "%s", err.msg);
    cr_expect_eq(f.n, 5);
    for (size_t i = 0; i < f.n; i++) {
        cr_expect_str_eq(f.v[i].metric, GATE_METRIC_NONFINITE);
        const int bad = f.v[i].value > 0;
        cr_expect_eq(f.v[i].verdict, bad ? GATE_VERDICT_REGRESSION : GATE_VERDICT_PASS, "%s",
                     f.v[i].message);
    }
    cr_expect_eq(find(&f, GATE_SCOPE_LAYER, 0, "fp8kv@fixed~spec", "nonfinite")->verdict,
                 GATE_VERDICT_REGRESSION);
    gate_flags_free(&f);
}

Test(regress, effect_verdicts_at_their_boundaries)
{
    const double e = 0.05;
    cr_expect_eq(regress_effect_verdict(-0.05, -0.08, -0.01, e), GATE_VERDICT_REGRESSION);
    cr_expect_eq(regress_effect_verdict(nextafter(-0.05, 0), -0.08, -0.01, e),
                 GATE_VERDICT_INCONCLUSIVE);  /* significant, smaller than min_effect, not within */
    cr_expect_eq(regress_effect_verdict(-0.05, -0.08, 0.0, e), GATE_VERDICT_INCONCLUSIVE);
    cr_expect_eq(regress_effect_verdict(0.05, 0.01, 0.08, e), GATE_VERDICT_IMPROVEMENT);
    cr_expect_eq(regress_effect_verdict(0.05, 0.0, 0.08, e), GATE_VERDICT_INCONCLUSIVE);
    cr_expect_eq(regress_effect_verdict(0.0, -0.05, 0.05, e), GATE_VERDICT_NO_CHANGE);
    cr_expect_eq(regress_effect_verdict(0.0, nextafter(-0.05, -1), 0.05, e), GATE_VERDICT_INCONCLUSIVE);
    cr_expect_eq(regress_effect_verdict(-0.02, -0.04, -0.01, e), GATE_VERDICT_NO_CHANGE);
    cr_expect_eq(regress_effect_verdict(NAN, -0.04, -0.01, e), GATE_VERDICT_INCONCLUSIVE);
    cr_expect_eq(regress_effect_verdict(0.0, NAN, NAN, e), GATE_VERDICT_INCONCLUSIVE);
    /* The demo's numbers (tests/test_eval_cmd.c): fp8qkv - bf16 = -6/36 with the
     * interval [-0.25, -0.0833]; fp8kv - bf16 = -2/36 with [-0.139, 0]. */
    cr_expect_eq(regress_effect_verdict(-6.0 / 36, -0.25, -3.0 / 36, e), GATE_VERDICT_REGRESSION);
    cr_expect_eq(regress_effect_verdict(-2.0 / 36, -5.0 / 36, 0.0, e), GATE_VERDICT_INCONCLUSIVE);
}

Test(regress, evals_pairs_baseline_two_sample_interval_and_missing_modes)
{
    gate_config c;
    gate_config_default(&c);
    const eval_pair_stored pairs[1] = {
        PAIR("aime", "medium", "fp8qkv", "bf16", 12, -6.0 / 36, -0.25, -3.0 / 36, 0.140784954343738, 0, 6, 0.03125)};
    /* 12 problems x 3 samples: 36 graded samples per score. */
    const eval_score_stored run[2] = {SCORE("aime", "bf16", "medium", 12, 0.90, 0.04, 36, 0),
                                       SCORE("aime", "fp8qkv", "medium", 12, 0.60, 0.03, 36, 0)};
    const eval_score_stored base[3] = {SCORE("aime", "bf16", "medium", 12, 0.90, 0.04, 36, 0),
                                        SCORE("aime", "fp8qkv", "medium", 12, 0.90, 0.04, 36, 0),
                                        SCORE("aime", "fp8kv", "medium", 12, 0.80, 0.05, 36, 0)};
    gate_flags f = {0};
    pg_err err = {0};
    cr_assert_eq(regress_evals(pairs, 1, run, 2, base, 3, NULL, 0, 4, &c, &f, &err), PG_OK, "%s", err.msg);
    cr_assert_eq(f.n, 6);
    /* One "samples" check per score of the run, both fine. */
    cr_expect_str_eq(f.v[0].metric, GATE_METRIC_SAMPLES);
    cr_expect_str_eq(f.v[0].mode, "bf16");
    cr_expect_eq(f.v[0].verdict, GATE_VERDICT_PASS, "%s", f.v[0].message);
    cr_expect_eq(f.v[1].verdict, GATE_VERDICT_PASS, "%s", f.v[1].message);
    cr_expect_str_eq(f.v[2].metric, "diff_vs_bf16");
    cr_expect_str_eq(f.v[2].mode, "fp8qkv");
    cr_expect_eq(f.v[2].verdict, GATE_VERDICT_REGRESSION);
    cr_expect(strstr(f.v[2].message, "MDE 0.141") != NULL, "%s", f.v[2].message);
    /* bf16 unchanged: d = 0; the observed se sqrt(2) 0.04 = 0.0566 is below the
     * design se: 65 of 72 correct, p~ = (65 + z^2/2)/(72 + z^2) = 0.88237,
     * sqrt(p~(1-p~) (1/36 + 1/36)) = 0.075934: interval +-0.1488, inconclusive. */
    cr_expect_str_eq(f.v[3].metric, GATE_METRIC_ACCURACY);
    cr_expect_eq(f.v[3].verdict, GATE_VERDICT_INCONCLUSIVE, "%s", f.v[3].message);
    cr_expect_eq(f.v[3].baseline_value, 0.90);
    cr_expect(strstr(f.v[3].message, "[-0.149, +0.149]") != NULL, "%s", f.v[3].message);
    cr_expect(strstr(f.v[3].message, "design SE 0.076") != NULL, "%s", f.v[3].message);
    /* fp8qkv: d = -0.30, design se (54 of 72 correct) 0.103728 > 0.05 observed:
     * [-0.503, -0.097], MDE 2.8016 x 0.103728 = 0.2906. */
    cr_expect_eq(f.v[4].verdict, GATE_VERDICT_REGRESSION, "%s", f.v[4].message);
    cr_expect(strstr(f.v[4].message, "MDE 0.291") != NULL, "%s", f.v[4].message);
    cr_expect(strstr(f.v[4].message, "[-0.503, -0.097]") != NULL, "%s", f.v[4].message);
    /* fp8kv was scored in the baseline and is missing from the run. */
    cr_expect_str_eq(f.v[5].mode, "fp8kv");
    cr_expect_eq(f.v[5].verdict, GATE_VERDICT_ERROR);
    gate_flags_free(&f);

    /* "no change" states that it is not proof of equality, and needs a design
     * that could have seen min_effect: MDE 0.02 can, MDE 0.08 cannot. */
    const eval_score_stored low[2] = {SCORE("aime", "bf16", "low", 400, 0.5, 0.02, 3200, 0),
                                       SCORE("aime", "fp8kv", "low", 400, 0.5, 0.02, 3200, 0)};
    eval_pair_stored tight[1] = {PAIR("aime", "low", "fp8kv", "bf16", 400, 0.0, -0.01, 0.01, 0.02, 10, 10, 1.0)};
    cr_assert_eq(regress_evals(tight, 1, low, 2, NULL, 0, NULL, 0, -1, &c, &f, &err), PG_OK, "%s", err.msg);
    cr_assert_eq(f.n, 3);
    cr_expect_eq(f.v[2].verdict, GATE_VERDICT_NO_CHANGE, "%s", f.v[2].message);
    cr_expect(strstr(f.v[2].message, "not proof of equality") != NULL, "%s", f.v[2].message);
    cr_expect(strstr(f.v[2].message, "MDE 0.020") != NULL, "%s", f.v[2].message);
    gate_flags_free(&f);
    tight[0].mde = 0.08;
    cr_assert_eq(regress_evals(tight, 1, low, 2, NULL, 0, NULL, 0, -1, &c, &f, &err), PG_OK, "%s", err.msg);
    cr_expect_eq(f.v[2].verdict, GATE_VERDICT_INCONCLUSIVE, "%s", f.v[2].message);
    cr_expect(strstr(f.v[2].message, "lacks the power") != NULL, "%s", f.v[2].message);
    cr_expect(strstr(f.v[2].message, "could only have seen a drop of 0.080 or more") != NULL,
              "%s", f.v[2].message);
    gate_flags_free(&f);
}

/* The degenerate evals of regress.h are errors whatever min_effect says. */
/* Issue 14 section 5 (review): the pair verdict of few problems needs the
 * sign test, not only the percentile bootstrap interval. */
Test(regress, a_pair_drop_or_gain_needs_a_significant_sign_test)
{
    gate_config c;
    gate_config_default(&c);
    /* 6 problems x 1 sample: bf16 right on 4, fp8kv on 1; fp8kv lost 3, won 0. */
    const eval_score_stored six[2] = {SCORE("e", "bf16", "m", 6, 4.0 / 6, 0.2, 6, 0),
                                       SCORE("e", "fp8kv", "m", 6, 1.0 / 6, 0.15, 6, 0)};
    eval_pair_stored p[1] = {PAIR("e", "m", "fp8kv", "bf16", 6, -0.5, -5.0 / 6, -1.0 / 6, 0.75, 0, 3,
                               0.25)};
    gate_flags f = {0};
    pg_err err = {0};
    cr_assert_eq(regress_evals(p, 1, six, 2, NULL, 0, NULL, 0, -1, &c, &f, &err), PG_OK, "%s", err.msg);
    cr_assert_eq(f.n, 3);
    cr_expect_eq(f.v[2].verdict, GATE_VERDICT_INCONCLUSIVE, "%s", f.v[2].message);
    cr_expect_str_eq(f.v[2].message, "e m fp8kv - bf16: mean paired difference -0.500, 95% CI "
                     "[-0.833, -0.167] over 6 problems; inconclusive: the interval is below 0, "
                     "but the exact sign test gives p 0.25 > 0.05 (0 problems better, 3 worse, "
                     "the rest tied), so the drop is not significant at this many problems (MDE "
                     "0.750 at 80% power)");
    cr_expect_eq(regress_exit_status(&f), GATE_EXIT_PASS);
    gate_flags_free(&f);
    /* All 6 lost: p = 2 x 0.5^6 = 0.03125 <= 0.05, a regression. */
    p[0].losses = 6;
    p[0].sign_p = 0.03125;
    cr_assert_eq(regress_evals(p, 1, six, 2, NULL, 0, NULL, 0, -1, &c, &f, &err), PG_OK, "%s", err.msg);
    cr_expect_eq(f.v[2].verdict, GATE_VERDICT_REGRESSION, "%s", f.v[2].message);
    gate_flags_free(&f);
    /* The mirror image: 3 won, none lost, p 0.25: no improvement either. */
    p[0] = (eval_pair_stored)PAIR("e", "m", "fp8kv", "bf16", 6, 0.5, 1.0 / 6, 5.0 / 6, 0.75, 3, 0,
                               0.25);
    cr_assert_eq(regress_evals(p, 1, six, 2, NULL, 0, NULL, 0, -1, &c, &f, &err), PG_OK, "%s", err.msg);
    cr_expect_eq(f.v[2].verdict, GATE_VERDICT_INCONCLUSIVE, "%s", f.v[2].message);
    cr_expect(strstr(f.v[2].message, "interval is above 0, but the exact sign test gives p 0.25 "
                     "> 0.05 (3 problems better, 0 worse") != NULL, "%s", f.v[2].message);
    gate_flags_free(&f);
    /* An unknown p (a zeroed row) never lets a drop through as significant. */
    p[0].sign_p = 0;
    cr_assert_eq(regress_evals(p, 1, six, 2, NULL, 0, NULL, 0, -1, &c, &f, &err), PG_OK, "%s", err.msg);
    cr_expect_eq(f.v[2].verdict, GATE_VERDICT_INCONCLUSIVE, "%s", f.v[2].message);
    gate_flags_free(&f);
}

Test(regress, degenerate_evals_are_errors_that_no_config_turns_into_a_pass)
{
    const double effects[] = {0.0, GATE_DEFAULT_MIN_EFFECT, 1.0};
    for (size_t k = 0; k < sizeof effects / sizeof effects[0]; k++) {
        gate_config c;
        gate_config_default(&c);
        c.eval.min_effect = effects[k];
        gate_flags f = {0};
        pg_err err = {0};
        /* 3 problems x 1 sample, every answer right in both modes: d = 0,
         * interval [0, 0]; the smallest sign-test p is 2 x 0.5^3 = 0.25. */
        const eval_score_stored three[2] = {SCORE("e", "bf16", "m", 3, 1.0, 0.0, 3, 0),
                                             SCORE("e", "fp8kv", "m", 3, 1.0, 0.0, 3, 0)};
        const eval_pair_stored p3[1] = {PAIR("e", "m", "fp8kv", "bf16", 3, 0.0, 0.0, 0.0, 0.9066, 0, 0, 1.0)};
        cr_assert_eq(regress_evals(p3, 1, three, 2, NULL, 0, NULL, 0, -1, &c, &f, &err), PG_OK);
        cr_assert_eq(f.n, 3);
        cr_expect_eq(f.v[0].verdict, GATE_VERDICT_PASS, "%s", f.v[0].message);
        cr_expect_eq(f.v[2].verdict, GATE_VERDICT_ERROR, "e=%g: %s", effects[k], f.v[2].message);
        cr_expect(strstr(f.v[2].message, "smallest two-sided sign-test p is 0.25 > 0.05, so this "
                                         "design cannot reach significance at all (it needs at "
                                         "least 6)") != NULL, "%s", f.v[2].message);
        cr_expect_eq(regress_exit_status(&f), GATE_EXIT_ERROR);
        gate_flags_free(&f);
        /* 6 problems: 2 x 0.5^6 = 0.03125 can reach 0.05, so no error. */
        const eval_score_stored six[2] = {SCORE("e", "bf16", "m", 6, 0.5, 0.2, 6, 0),
                                           SCORE("e", "fp8kv", "m", 6, 0.5, 0.2, 6, 0)};
        const eval_pair_stored p6[1] = {PAIR("e", "m", "fp8kv", "bf16", 6, 0.0, -0.3, 0.3, 0.9, 0, 0, 1.0)};
        cr_assert_eq(regress_evals(p6, 1, six, 2, NULL, 0, NULL, 0, -1, &c, &f, &err), PG_OK);
        cr_expect_neq(f.v[2].verdict, GATE_VERDICT_ERROR, "%s", f.v[2].message);
        gate_flags_free(&f);

        /* 30 problems x 2 samples, every sample truncated and wrong in both modes. */
        const eval_score_stored trunc[2] = {SCORE("e", "bf16", "m", 30, 0.0, 0.0, 60, 60),
                                             SCORE("e", "fp8kv", "m", 30, 0.0, 0.0, 60, 60)};
        const eval_pair_stored pt[1] = {PAIR("e", "m", "fp8kv", "bf16", 30, 0.0, 0.0, 0.0, 0.0632, 0, 0, 1.0)};
        cr_assert_eq(regress_evals(pt, 1, trunc, 2, trunc, 2, NULL, 0, 7, &c, &f, &err), PG_OK);
        cr_assert_eq(f.n, 5);
        for (size_t i = 0; i < f.n; i++)
            cr_expect_eq(f.v[i].verdict, GATE_VERDICT_ERROR, "flag %zu: %s", i, f.v[i].message);
        cr_expect(strstr(f.v[0].message, "bf16 m: no correct answer in 60 graded samples, 60 "
                                         "truncated at the token limit (over half") != NULL,
                  "%s", f.v[0].message);
        cr_expect(strstr(f.v[2].message, "fp8kv m: no correct answer") != NULL, "%s",
                  f.v[2].message);
        cr_expect(strstr(f.v[3].message, "(the baseline run's bf16 m)") != NULL, "%s",
                  f.v[3].message);
        gate_flags_free(&f);

        /* Right answers, but 31 of 60 samples truncated: more than half. */
        const eval_score_stored half[2] = {SCORE("e", "bf16", "m", 30, 0.5, 0.05, 60, 30),
                                            SCORE("e", "fp8kv", "m", 30, 0.5, 0.05, 60, 31)};
        cr_assert_eq(regress_evals(NULL, 0, half, 2, NULL, 0, NULL, 0, -1, &c, &f, &err), PG_OK);
        cr_expect_eq(f.v[0].verdict, GATE_VERDICT_PASS, "%s", f.v[0].message);
        cr_expect_eq(f.v[1].verdict, GATE_VERDICT_ERROR, "%s", f.v[1].message);
        cr_expect(strstr(f.v[1].message, "fp8kv m: 60 graded samples, 31 truncated") != NULL,
                  "%s", f.v[1].message);
        gate_flags_free(&f);

        /* A pair with no problem in common, and one whose mode was never scored. */
        const eval_pair_stored none[2] = {PAIR("e", "m", "fp8kv", "bf16", 0, NAN, NAN, NAN, NAN, 0, 0, 1.0),
                                           PAIR("e", "m", "fp8qkv", "bf16", 30, 0, -0.1, 0.1, 0.1, 0, 0, 1.0)};
        cr_assert_eq(regress_evals(none, 2, half, 1, NULL, 0, NULL, 0, -1, &c, &f, &err), PG_OK);
        cr_assert_eq(f.n, 3);
        cr_expect_eq(f.v[1].verdict, GATE_VERDICT_ERROR, "%s", f.v[1].message);
        cr_expect(strstr(f.v[1].message, "no pairs (no problem scored in both modes)") != NULL,
                  "%s", f.v[1].message);
        cr_expect(strstr(f.v[1].message, "fp8kv m: no eval_scores row") != NULL, "%s",
                  f.v[1].message);
        cr_expect_eq(f.v[2].verdict, GATE_VERDICT_ERROR, "%s", f.v[2].message);
        gate_flags_free(&f);
    }
}

/* Parses text as a config; returns the status and leaves the message in err. */
static pg_status parse(const char *text, gate_config *c, pg_err *err)
{
    pg_err_clear(err);
    return gate_config_parse(text, "g.json", c, err);
}

Test(regress, config_defaults_merge_and_removal)
{
    gate_config c;
    pg_err err = {0};
    cr_assert_eq(parse("{}", &c, &err), PG_OK, "%s", err.msg);
    cr_expect_eq(c.layer.rel_tol, GATE_DEFAULT_REL_TOL);
    cr_expect_eq(c.layer.metrics, GATE_DEFAULT_LAYER_METRICS);
    /* No built-in absolute budget anywhere (gate_config.h says why). */
    for (int m = 0; m < PG_METRIC_VALUE_COUNT; m++) cr_expect_eq(c.layer.abs[m].n, 0);
    cr_expect_eq(c.mode_pair.abs.n, 0);
    cr_expect_eq(c.mode_pair.ratio.n, 0);
    cr_expect_eq(c.mode_pair.rel_tol, GATE_DEFAULT_REL_TOL);
    cr_expect_eq(c.eval.min_effect, 0.05);
    cr_assert_eq(parse("{\"layer\": {\"rel_tol\": 0.2, \"metrics\": [\"cos_sim\", \"max_abs\"],"
                       " \"abs\": {\"fp8kv\": 0.08, \"bf16\": null, \"ext:trt\": 0.1},"
                       " \"metric_abs\": {\"p99_abs\": {\"fp8kv~spec\": 0.5}}},"
                       " \"mode_pair\": {\"rel_tol\": 0.3, \"ratio\": {\"fp8qkv\": 4, \"fp8kv\": 5}},"
                       " \"eval\": {\"min_effect\": 0}}", &c, &err), PG_OK, "%s", err.msg);
    cr_expect_eq(c.layer.rel_tol, 0.2);
    cr_expect_eq(c.layer.metrics, (1u << PG_METRIC_COS_SIM) | (1u << PG_METRIC_MAX_ABS));
    /* A bare mode key bounds its default profile, kept under the full name. */
    cr_expect_eq(gate_bound_find(&c.layer.abs[PG_METRIC_REL_L2], "fp8kv@fixed"), 0.08);
    cr_expect(isnan(gate_bound_find(&c.layer.abs[PG_METRIC_REL_L2], "fp8kv")));
    cr_expect(isnan(gate_bound_find(&c.layer.abs[PG_METRIC_REL_L2], "fp8kv@vllm-24197")));
    cr_expect(isnan(gate_bound_find(&c.layer.abs[PG_METRIC_REL_L2], "bf16")));
    cr_expect(isnan(gate_bound_find(&c.layer.abs[PG_METRIC_REL_L2], "fp8qkv@fa3")));  /* never set */
    cr_expect_eq(gate_bound_find(&c.layer.abs[PG_METRIC_REL_L2], "ext:trt"), 0.1);
    cr_expect_eq(gate_bound_find(&c.layer.abs[PG_METRIC_P99_ABS], "fp8kv@fixed~spec"), 0.5);
    cr_expect_eq(gate_bound_find(&c.mode_pair.ratio, "fp8qkv@fa3"), 4);
    cr_expect_eq(gate_bound_find(&c.mode_pair.ratio, "fp8kv@fixed"), 5);
    cr_expect_eq(c.mode_pair.rel_tol, 0.3);
    cr_expect_eq(c.eval.min_effect, 0.0);
    cr_expect_eq(c.eval.n_identical, 0);
    cr_expect_not(gate_config_expects_identical(&c, "bf16", "fp8kv"));
    /* Groups of modes expected to answer alike; a mode is in one group. */
    cr_assert_eq(parse("{\"eval\": {\"identical_modes\": [[\"bf16\", \"bf16-b\", \"bf16-c\"],"
                       " [\"fp8kv\", \"fp8kv-b\"]]}}", &c, &err), PG_OK, "%s", err.msg);
    cr_expect_eq(c.eval.n_identical, 5);
    cr_expect(gate_config_expects_identical(&c, "bf16", "bf16-c"));
    cr_expect(gate_config_expects_identical(&c, "bf16-c", "bf16-b"));
    cr_expect(gate_config_expects_identical(&c, "fp8kv-b", "fp8kv"));
    cr_expect_not(gate_config_expects_identical(&c, "bf16", "fp8kv"));
    cr_expect_not(gate_config_expects_identical(&c, "bf16", "bf16"));
    cr_expect_not(gate_config_expects_identical(&c, "bf16", "fp8qkv"));
    cr_expect_not(gate_config_expects_identical(&c, "fp8qkv", "fp8qkv-b"));
    cr_expect_not(gate_config_expects_identical(NULL, "bf16", "bf16-b"));
}

Test(regress, config_errors_name_the_key_or_path)
{
    static const struct {
        const char *json, *want;
    } cases[] = {
        {"{\"layr\": {}}", "g.json: layr: unknown key (expected layer, mode_pair, eval, divergence)"},
        {"{\"layer\": {\"tolerance\": 1}}", "g.json: layer.tolerance: unknown key"},
        {"{\"layer\": {\"abs\": {\"fp8kv\": \"4e-2\"}}}",
         "g.json: layer.abs.fp8kv: expected a number >= 0 or null"},
        {"{\"layer\": {\"abs\": {\"fp8kv\": -1}}}", "layer.abs.fp8kv: expected a number >= 0"},
        {"{\"layer\": {\"abs\": {\"fp9\": 1}}}", "layer.abs.fp9: unknown variant"},
        {"{\"layer\": {\"abs\": {\"ext:\": 1}}}", "layer.abs.ext:: unknown variant"},
        {"{\"layer\": {\"abs\": []}}", "layer.abs: expected an object"},
        {"{\"layer\": {\"rel_tol\": true}}", "layer.rel_tol: expected a number >= 0"},
        {"{\"layer\": {\"metrics\": [\"rel_l2\", \"l3\"]}}",
         "g.json: layer.metrics[1]: 'l3' is not one of rel_l2, max_abs, mean_abs, p99_abs, cos_sim, "
         "sqnr_db"},
        {"{\"layer\": {\"metric_abs\": {\"l3\": {}}}}",
         "g.json: layer.metric_abs.l3: 'l3' is not one of rel_l2, max_abs"},
        {"{\"layer\": {\"metrics\": \"rel_l2\"}}", "layer.metrics: expected an array"},
        {"{\"layer\": {\"metric_abs\": {\"rel_l2\": {}}}}", "layer.metric_abs.rel_l2: rel_l2's"},
        {"{\"layer\": {\"metric_abs\": {\"p99_abs\": {\"bf16\": null, \"x\": 1}}}}",
         "layer.metric_abs.p99_abs.x: unknown variant"},
        {"{\"mode_pair\": {\"ratio\": {\"bf16\": 2}}}", "mode_pair.ratio.bf16: bf16 is the reference"},
        {"{\"mode_pair\": {\"abs\": {\"fp8kv~spec\": 2}}}", "mode_pair.abs.fp8kv~spec: a ~spec"},
        /* keys follow the variant grammar: full names, bare modes, one each */
        {"{\"layer\": {\"abs\": {\"fp8kv@nope\": 1}}}",
         "layer.abs.fp8kv@nope: unknown variant (expected bf16, fp8kv@fixed, fp8kv@vllm-24197"},
        {"{\"layer\": {\"abs\": {\"fp8kv\": 1, \"fp8kv@fixed\": 2}}}",
         "layer.abs.fp8kv@fixed: the same variant as key 'fp8kv' (both are fp8kv@fixed)"},
        {"{\"mode_pair\": {\"ratio\": {\"fp8qkv@fa3~spec\": 2}}}",
         "mode_pair.ratio.fp8qkv@fa3~spec: a ~spec"},
        {"{\"eval\": {\"min_effect\": 2}}", "eval.min_effect: expected a number in [0, 1]"},
        {"{\"eval\": {\"min_effect\": 0.1, \"min_effect\": 0.2}}", "eval.min_effect: duplicate key"},
        {"{\"eval\": {\"identical_modes\": {}}}",
         "g.json: eval.identical_modes: expected an array of groups of mode names"},
        {"{\"eval\": {\"identical_modes\": [[\"bf16\"]]}}",
         "eval.identical_modes[0]: expected an array of at least 2 mode names"},
        {"{\"eval\": {\"identical_modes\": [\"bf16\", \"fp8kv\"]}}",
         "eval.identical_modes[0]: expected an array of at least 2 mode names"},
        {"{\"eval\": {\"identical_modes\": [[\"bf16\", \"\"]]}}",
         "eval.identical_modes[0][1]: expected a non-empty mode name"},
        {"{\"eval\": {\"identical_modes\": [[\"bf16\", 3]]}}",
         "eval.identical_modes[0][1]: expected a non-empty mode name"},
        {"{\"eval\": {\"identical_modes\": [[\"a\", \"b\", \"a\"]]}}",
         "eval.identical_modes[0][2]: 'a' twice in one group"},
        {"{\"eval\": {\"identical_modes\": [[\"a\", \"b\"], [\"c\", \"b\"]]}}",
         "eval.identical_modes[1][1]: 'b' is in an earlier group already"},
        {"{\"eval\": {\"identical\": []}}",
         "eval.identical: unknown key (expected min_effect, identical_modes)"},
        {"[1]", "g.json: (top level): expected an object"},
        {"{\"layer\": {}", "g.json: not valid JSON"},
        {"{} {}", "g.json: not valid JSON"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        gate_config c;
        pg_err err = {0};
        cr_expect_eq(parse(cases[i].json, &c, &err), PG_ERR_FORMAT, "%s", cases[i].json);
        cr_expect(strstr(err.msg, cases[i].want) != NULL, "%s: got '%s', want '%s'", cases[i].json,
                  err.msg, cases[i].want);
    }
}

/* Runs python3's minidom on path; returns its output, or NULL without python3. */
static char *minidom_summary(const char *path)
{
    if (system("command -v python3 >/dev/null 2>&1") != 0) return NULL;
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "python3 -c 'import xml.dom.minidom,sys; d=xml.dom.minidom.parse(sys.argv[1]); "
             "print(\" \".join(s.getAttribute(\"name\")+\"=\"+s.getAttribute(\"tests\")+\"/\"+"
             "s.getAttribute(\"failures\")+\"/\"+s.getAttribute(\"errors\") for s in "
             "d.getElementsByTagName(\"testsuite\"))); "
             "print(d.getElementsByTagName(\"failure\")[0].getAttribute(\"message\"))' '%s' 2>&1",
             path);
    FILE *p = popen(cmd, "r");
    cr_assert_not_null(p);
    char *buf = calloc(1, 4096);
    cr_assert_not_null(buf);
    size_t n = fread(buf, 1, 4095, p);
    buf[n] = '\0';
    cr_assert_eq(pclose(p), 0, "minidom refused %s: %s", path, buf);
    return buf;
}

Test(regress, junit_escapes_everything_and_is_well_formed)
{
    char *dir = tu_tempdir();
    char path[512];
    snprintf(path, sizeof path, "%s/r.xml", dir);
    gate_config c = bare_config(0.25);
    /* A capture name with every XML special, a control byte and bad UTF-8. */
    const char *nasty = "c&<>\"'\x01\xff\xc3\xa9.st";
    layer_metric_row base[2] = {row(nasty, 0, "fp8kv"), row(nasty, 1, "fp8kv")};
    base[0].v.rel_l2 = base[1].v.rel_l2 = 0.5;
    layer_metric_row run[1] = {base[0]};
    run[0].v.rel_l2 = 0.7;
    gate_flags f = {0};
    pg_err err = {0};
    cr_assert_eq(regress_layers(run, 1, base, 2, 1, &c, &f, &err), PG_OK, "%s", err.msg);
    const eval_pair_stored pairs[1] = {PAIR("e<1>", "hi", "fp8kv", "bf16", 12, -0.1, -0.2, -0.06, 0.1, 0, 6, 0.03125)};
    const eval_score_stored scores[2] = {SCORE("e<1>", "bf16", "hi", 12, 0.5, 0.1, 12, 0),
                                          SCORE("e<1>", "fp8kv", "hi", 12, 0.4, 0.1, 12, 0)};
    cr_assert_eq(regress_evals(pairs, 1, scores, 2, NULL, 0, NULL, 0, 1, &c, &f, &err), PG_OK, "%s",
                 err.msg);
    cr_assert_eq(junit_write(path, 2, 1, &f, &err), PG_OK, "%s", err.msg);

    FILE *in = fopen(path, "rb");
    cr_assert_not_null(in);
    char text[16384];
    const size_t n = fread(text, 1, sizeof text - 1, in);
    fclose(in);
    text[n] = '\0';
    cr_expect(strstr(text, "c&amp;&lt;&gt;&quot;&apos;??\xc3\xa9.st layer 0 fp8kv") != NULL, "%s", text);
    cr_expect(strstr(text, "\x01") == NULL && strstr(text, "\xff") == NULL);
    cr_expect(strstr(text, "<testsuites name=\"precgate gate run 2\" tests=\"4\" failures=\"2\" "
                           "errors=\"1\">") != NULL, "%s", text);
    char *summary = minidom_summary(path);
    if (summary == NULL) {
        cr_log_warn("python3 not found: the JUnit file's well-formedness is not checked");
    } else {
        cr_expect(strstr(summary, "layer=2/1/1 mode_pair=0/0/0 eval=2/1/0") != NULL, "%s", summary);
        cr_expect(strstr(summary, "rel_l2 0.7 > threshold 0.625") != NULL, "%s", summary);
        free(summary);
    }
    /* No temporary file is left beside it. */
    char cmd[600];
    snprintf(cmd, sizeof cmd, "test \"$(ls '%s' | wc -l)\" -eq 1", dir);
    cr_expect_eq(system(cmd), 0, "a temporary file was left in %s", dir);

    /* An unwritable place is PG_ERR_IO naming the path. */
    snprintf(path, sizeof path, "%s/no/such/dir/r.xml", dir);
    pg_err_clear(&err);
    cr_expect_eq(junit_write(path, 2, 1, &f, &err), PG_ERR_IO);
    cr_expect(strstr(err.msg, path) != NULL, "%s", err.msg);
    gate_flags_free(&f);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) cr_log_warn("could not remove %s", dir);
    free(dir);
}

/* Issue 27: an all-correct run against an all-correct baseline has observed
 * variance 0; its MDE is the rule of three, 3/n, never the shrinking design
 * MDE (30 x 8 all correct: 0.016, which called it "no change"). */
Test(regress, an_eval_without_variation_gets_the_rule_of_three_mde)
{
    gate_config c;
    gate_config_default(&c);
    const eval_score_stored run30[1] = {SCORE("e", "bf16", "m", 30, 1.0, 0.0, 240, 0)};
    gate_flags f = {0};
    pg_err err = {0};
    cr_assert_eq(regress_evals(NULL, 0, run30, 1, run30, 1, NULL, 0, 7, &c, &f, &err), PG_OK, "%s", err.msg);
    cr_assert_eq(f.n, 2);
    cr_expect_str_eq(f.v[1].metric, GATE_METRIC_ACCURACY);
    cr_expect_eq(f.v[1].verdict, GATE_VERDICT_INCONCLUSIVE, "%s", f.v[1].message);
    cr_expect(strstr(f.v[1].message, "drop of 0.100 or more") != NULL, "%s", f.v[1].message);
    cr_expect(strstr(f.v[1].message, "rule-of-three floor") != NULL, "%s", f.v[1].message);
    gate_flags_free(&f);
    /* 200 problems: 3/200 = 0.015 <= min_effect, "no change" with that MDE, said so. */
    const eval_score_stored run200[2] = {SCORE("e", "bf16", "m", 200, 1.0, 0.0, 1600, 0),
                                          SCORE("e", "fp8kv", "m", 200, 1.0, 0.0, 1600, 0)};
    cr_assert_eq(regress_evals(NULL, 0, run200, 1, run200, 1, NULL, 0, 7, &c, &f, &err), PG_OK, "%s",
                 err.msg);
    cr_expect_eq(f.v[1].verdict, GATE_VERDICT_NO_CHANGE, "%s", f.v[1].message);
    cr_expect(strstr(f.v[1].message, "MDE 0.015") != NULL, "%s", f.v[1].message);
    cr_expect(strstr(f.v[1].message, "rule-of-three floor") != NULL, "%s", f.v[1].message);
    gate_flags_free(&f);
    /* The pair of the run carries the floored MDE eval_pair_compute stored. */
    const eval_pair_stored pair[1] = {PAIR("e", "m", "fp8kv", "bf16", 200, 0.0, 0.0, 0.0,
                                           3.0 / 200, 0, 0, 1.0)};
    cr_assert_eq(regress_evals(pair, 1, run200, 2, NULL, 0, NULL, 0, -1, &c, &f, &err), PG_OK, "%s",
                 err.msg);
    cr_assert_eq(f.n, 3);
    cr_expect_eq(f.v[2].verdict, GATE_VERDICT_NO_CHANGE, "%s", f.v[2].message);
    cr_expect(strstr(f.v[2].message, "MDE 0.015") != NULL, "%s", f.v[2].message);
    cr_expect(strstr(f.v[2].message, "rule-of-three floor") != NULL, "%s", f.v[2].message);
    gate_flags_free(&f);
}

/* Problems of the paired-baseline test below. */
#define PAIRED_N 30

/* Issue 27: the accuracy against the baseline run is paired when both runs
 * ran the same problems. 30 problems x 1 sample: the baseline right on the
 * first 15, the run on the first 9, so the run lost 6 problems and won none.
 * Paired: d = -0.2, the exact sign test p = 2 x 0.5^6 = 0.03125, a
 * regression. Two-sample, the same scores are inconclusive: se = max(
 * sqrt(0.085096^2 + 0.092848^2) = 0.125945, design se sqrt(p~(1-p~) 2/30)
 * = 0.126798 with p~ = (24 + z^2/2)/(60 + z^2)), interval -0.2 -+ 1.96 x
 * 0.126798 = [-0.449, +0.049]. The MDE is the same design's in both:
 * 2.8016 x 0.126798 = 0.355 (the paired observed 2.8016 sd/sqrt(30) =
 * 0.208 is lower). */
Test(regress, the_baseline_comparison_is_paired_over_the_same_problems)
{
    gate_config c;
    gate_config_default(&c);
    eval_cell run_cells[PAIRED_N], base_cells[PAIRED_N];
    char ids[PAIRED_N][8];
    char *id_ptr[PAIRED_N];
    for (int i = 0; i < PAIRED_N; i++) {
        run_cells[i] = (eval_cell){EVAL_SAMPLE_OK, i < 9};
        base_cells[i] = (eval_cell){EVAL_SAMPLE_OK, i < 15};
        snprintf(ids[i], sizeof ids[i], "p%02d", i);
        id_ptr[i] = ids[i];
    }
    const eval_table run_t = {PAIRED_N, 1, run_cells, id_ptr};
    const eval_table base_t = {PAIRED_N, 1, base_cells, id_ptr};
    regress_base_pair bp = {.eval = "e", .mode = "fp8kv", .effort = "m", .paired = 1};
    pg_err err = {0};
    cr_assert_eq(eval_pair_compute(&run_t, &base_t, &bp.pair, &err), PG_OK, "%s", err.msg);
    cr_assert_eq(bp.pair.losses, 6);
    cr_assert_eq(bp.pair.wins, 0);
    cr_assert_lt(bp.pair.ci_high, 0.0);
    const eval_score_stored run[1] = {SCORE("e", "fp8kv", "m", PAIRED_N, 0.3, 0.0850963, 30, 0)};
    const eval_score_stored base[1] = {SCORE("e", "fp8kv", "m", PAIRED_N, 0.5, 0.0928477, 30, 0)};
    gate_flags f = {0};
    cr_assert_eq(regress_evals(NULL, 0, run, 1, base, 1, &bp, 1, 3, &c, &f, &err), PG_OK, "%s",
                 err.msg);
    cr_assert_eq(f.n, 2);
    cr_expect_str_eq(f.v[1].metric, GATE_METRIC_ACCURACY);
    cr_expect_eq(f.v[1].verdict, GATE_VERDICT_REGRESSION, "%s", f.v[1].message);
    cr_expect_eq(f.v[1].value, 0.3);
    cr_expect_eq(f.v[1].baseline_value, 0.5);
    char expect[REGRESS_MSG_MAX];
    snprintf(expect, sizeof expect, "e m fp8kv: accuracy 0.300 vs 0.500 in baseline run 3, paired "
             "over 30 problems: 0 won, 6 lost, 24 tied, sign test p=0.031; mean paired "
             "difference -0.200, 95%% CI [%+.3f, %+.3f]; regression: the interval is below 0 and "
             "the drop is at least min_effect 0.050 (MDE 0.355 at 80%% power)", bp.pair.ci_low,
             bp.pair.ci_high);
    cr_expect_str_eq(f.v[1].message, expect);
    cr_expect_eq(regress_exit_status(&f), GATE_EXIT_REGRESSION);
    gate_flags_free(&f);

    /* The pair's rules are the in-run pairs': 3 lost of 30, p = 0.25, is no
     * regression whatever the interval says. */
    regress_base_pair weak = bp;
    weak.pair.losses = 3;
    weak.pair.sign_p = 0.25;
    cr_assert_eq(regress_evals(NULL, 0, run, 1, base, 1, &weak, 1, 3, &c, &f, &err), PG_OK);
    cr_expect_eq(f.v[1].verdict, GATE_VERDICT_INCONCLUSIVE, "%s", f.v[1].message);
    cr_expect(strstr(f.v[1].message, "the exact sign test gives p 0.25 > 0.05 (0 problems "
                     "better, 3 worse") != NULL, "%s", f.v[1].message);
    gate_flags_free(&f);

    /* Unpaired (other problems, say), the same scores are two-sample and
     * inconclusive, the message saying so and why. */
    regress_base_pair other = {.eval = "e", .mode = "fp8kv", .effort = "m", .paired = 0};
    snprintf(other.unpaired, sizeof other.unpaired, "their problems differ");
    cr_assert_eq(regress_evals(NULL, 0, run, 1, base, 1, &other, 1, 3, &c, &f, &err), PG_OK);
    cr_expect_eq(f.v[1].verdict, GATE_VERDICT_INCONCLUSIVE, "%s", f.v[1].message);
    cr_expect_str_eq(f.v[1].message, "e m fp8kv: accuracy 0.300 vs 0.500 in baseline run 3, "
                     "unpaired (their problems differ): difference -0.200, 95% CI [-0.449, "
                     "+0.049] (two-sample, SEs 0.085 and 0.093, design SE 0.127); inconclusive "
                     "at min_effect 0.050: the interval is neither clear of 0 by that much nor "
                     "within +-0.050 (MDE 0.355 at 80% power)");
    cr_expect_eq(regress_exit_status(&f), GATE_EXIT_PASS);
    gate_flags_free(&f);
    /* No entry for the key is no silent pairing either: unpaired, said so. */
    cr_assert_eq(regress_evals(NULL, 0, run, 1, base, 1, NULL, 0, 3, &c, &f, &err), PG_OK);
    cr_expect_eq(f.v[1].verdict, GATE_VERDICT_INCONCLUSIVE, "%s", f.v[1].message);
    cr_expect(strstr(f.v[1].message, "unpaired (no problem-level comparison of the two runs' "
                     "samples was made)") != NULL, "%s", f.v[1].message);
    gate_flags_free(&f);

    /* A degenerate baseline score is an error of the paired comparison too,
     * named as the baseline's (no correct answer). */
    const eval_score_stored none[1] = {SCORE("e", "fp8kv", "m", PAIRED_N, 0.0, 0.0, 30, 0)};
    cr_assert_eq(regress_evals(NULL, 0, run, 1, none, 1, &bp, 1, 3, &c, &f, &err), PG_OK);
    cr_expect_eq(f.v[1].verdict, GATE_VERDICT_ERROR, "%s", f.v[1].message);
    cr_expect(strstr(f.v[1].message, "paired over 30 problems") != NULL, "%s", f.v[1].message);
    cr_expect(strstr(f.v[1].message, "error: fp8kv m: no correct answer in 30 graded samples; "
                     "(the baseline run's fp8kv m)") != NULL, "%s", f.v[1].message);
    gate_flags_free(&f);
}

/* Issue 27 section 3: two modes whose every shared sample has the same
 * outcome and text are one server or one recording: an error naming both
 * modes and where their samples came from, unless the config's
 * eval.identical_modes expects it; a pair with one differing sample, or
 * none shared, gets no flag. */
Test(regress, identical_modes_are_an_error_unless_the_config_expects_them)
{
    eval_mode_agreement rows[] = {
        {.eval = "aime", .effort = "high", .mode_a = "bf16", .mode_b = "fp8kv", .n_shared = 400,
         .n_same = 400, .n_no_text = 0, .n_problems = 200},
        {.eval = "aime", .effort = "high", .mode_a = "bf16", .mode_b = "fp8qkv", .n_shared = 400,
         .n_same = 399, .n_no_text = 0, .n_problems = 200},
        {.eval = "aime", .effort = "high", .mode_a = "fp8kv", .mode_b = "fp8qkv", .n_shared = 0,
         .n_same = 0, .n_no_text = 0, .n_problems = 0},
        {.eval = "aime", .effort = "low", .mode_a = "bf16", .mode_b = "fp8kv", .n_shared = 6,
         .n_same = 6, .n_no_text = 6, .n_problems = 6},
    };
    const regress_mode_source src[] = {{"bf16", "http://h:1"}, {"fp8qkv", "http://h:2"}};
    gate_config c;
    gate_config_default(&c);
    gate_flags f = {0};
    pg_err err = {0};
    cr_assert_eq(regress_identical_modes(rows, 4, NULL, src, 2, &c, &f, &err), PG_OK, "%s",
                 err.msg);
    cr_assert_eq(f.n, 2);
    cr_expect_eq(f.v[0].verdict, GATE_VERDICT_ERROR);
    cr_expect_eq(f.v[0].scope, GATE_SCOPE_EVAL);
    cr_expect_str_eq(f.v[0].metric, "identical_to_fp8kv");
    cr_expect_str_eq(f.v[0].mode, "bf16");
    cr_expect_str_eq(f.v[0].effort, "high");
    cr_expect_eq(f.v[0].value, 400);
    cr_expect(strstr(f.v[0].message, "aime high bf16 = fp8kv: all 400 graded samples over 200 "
                     "problems identical (same outcome, byte-identical completion) (endpoints "
                     "bf16=http://h:1, fp8kv=(not recorded)): one server or one recording under "
                     "two names") != NULL, "%s", f.v[0].message);
    cr_expect(strstr(f.v[0].message, "eval.identical_modes") != NULL, "%s", f.v[0].message);
    cr_expect_eq(f.v[1].verdict, GATE_VERDICT_ERROR);
    cr_expect_str_eq(f.v[1].effort, "low");
    cr_expect(strstr(f.v[1].message, "6 of them without completion text, so only their "
                     "outcomes were compared") != NULL, "%s", f.v[1].message);
    gate_flags_free(&f);

    /* A replay names its traces; the config's group makes it a pass. */
    cr_assert_eq(parse("{\"eval\": {\"identical_modes\": [[\"fp8kv\", \"bf16\"]]}}", &c, &err),
                 PG_OK, "%s", err.msg);
    cr_assert_eq(regress_identical_modes(rows, 1, "t.jsonl", NULL, 0, &c, &f, &err), PG_OK, "%s",
                 err.msg);
    cr_assert_eq(f.n, 1);
    cr_expect_eq(f.v[0].verdict, GATE_VERDICT_PASS);
    cr_expect(strstr(f.v[0].message, "all 400 graded samples over 200 problems identical "
                     "(replayed from traces t.jsonl), as the gate config's eval.identical_modes "
                     "expects") != NULL, "%s", f.v[0].message);
    cr_expect_eq(regress_exit_status(&f), GATE_EXIT_PASS);
    gate_flags_free(&f);

    cr_expect_eq(regress_identical_modes(NULL, 1, NULL, NULL, 0, &c, &f, &err), PG_ERR_INTERNAL);
    eval_mode_agreement nokey = {.eval = "aime", .n_shared = 1, .n_same = 1};
    cr_expect_eq(regress_identical_modes(&nokey, 1, NULL, NULL, 0, &c, &f, &err),
                 PG_ERR_INTERNAL);
    gate_flags_free(&f);
}

/* Each (capture, variant, reason) of unsupported cells is one skipped flag,
 * never a pass, keyed by its first layer, and the exit status stays a pass:
 * nothing was computed to judge. */
Test(regress, unsupported_cells_are_skipped_never_passed)
{
    unsupported_summary u[2] = {
        {.capture = "c", .variant = "turboquant_k8v4@triton", .reason = "no sinks",
         .n_layers = 3, .first_layer = 1, .layers = "1,3,5"},
        {.capture = "c", .variant = "fp8qkv@flashinfer-fa3", .reason = "no sinks",
         .n_layers = 1, .first_layer = 0, .layers = "0"}};
    gate_flags f = {0};
    pg_err err = {0};
    cr_assert_eq(regress_unsupported(u, 2, &f, &err), PG_OK, "%s", err.msg);
    cr_assert_eq(f.n, 2);
    cr_expect_eq(f.v[0].verdict, GATE_VERDICT_SKIPPED);
    cr_expect_eq(f.v[0].scope, GATE_SCOPE_LAYER);
    cr_expect_eq(f.v[0].layer, 1);
    cr_expect_eq(f.v[0].value, 3.0);
    cr_expect_str_eq(f.v[0].metric, GATE_METRIC_SUPPORTED);
    cr_expect_str_eq(f.v[0].message, "c turboquant_k8v4@triton layers 1,3,5: not computed, "
                                     "no sinks: skipped, never a pass");
    cr_expect_str_eq(f.v[1].message, "c fp8qkv@flashinfer-fa3 layer 0: not computed, no sinks: "
                                     "skipped, never a pass");
    cr_expect_str_eq(gate_verdict_name(f.v[1].verdict), "skipped");
    size_t counts[GATE_VERDICT_COUNT];
    regress_count(&f, counts);
    cr_expect_eq(counts[GATE_VERDICT_SKIPPED], 2);
    cr_expect_eq(counts[GATE_VERDICT_PASS], 0);
    cr_expect_eq(regress_exit_status(&f), GATE_EXIT_PASS);
    gate_flags_free(&f);
    cr_assert_eq(regress_unsupported(NULL, 1, &f, &err), PG_ERR_INTERNAL);
}
