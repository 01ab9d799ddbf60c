/* regress.c: the regression gate's verdicts (see regress.h). */
#include "regress.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "evals/score.h"
#include "base/variant.h"

/* Longest "capture layer L variant" prefix of a message. */
#define REGRESS_WHERE_MAX 320
/* Longest pair variant name: "MODE-bf16". */
#define REGRESS_PAIR_MAX (GATE_VARIANT_MAX + 8)
/* Why a comparison with the baseline run without a regress_base_pair is unpaired. */
#define REGRESS_NO_BASE_PAIR "no problem-level comparison of the two runs' samples was made"

/* strdup that keeps NULL; sets *oom when a copy fails. */
static char *dup_or_null(const char *s, int *oom)
{
    if (s == NULL) return NULL;
    char *d = strdup(s);
    if (d == NULL) *oom = 1;
    return d;
}

/* What a new flag says; strings are copied by push(). */
typedef struct flag_spec {
    gate_scope scope;
    const char *capture;
    int layer;
    const char *variant, *eval, *mode, *effort, *metric;
    double value, baseline_value, threshold;
    gate_verdict verdict;
} flag_spec;

/* Appends a flag from s with the printf-style message; PG_ERR_NOMEM. */
__attribute__((format(printf, 4, 5)))
static pg_status push(gate_flags *out, const flag_spec *s, pg_err *err, const char *fmt, ...)
{
    if (out->n == out->cap) {
        const size_t cap = out->cap ? 2 * out->cap : 64;
        gate_flag *v = realloc(out->v, cap * sizeof *v);
        if (v == NULL) return pg_fail(err, PG_ERR_NOMEM, "gate: out of memory for flags");
        out->v = v;
        out->cap = cap;
    }
    char msg[REGRESS_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    int oom = 0;
    gate_flag f = {
        .scope = s->scope, .layer = s->layer, .value = s->value,
        .baseline_value = s->baseline_value, .threshold = s->threshold, .verdict = s->verdict,
    };
    f.capture = dup_or_null(s->capture, &oom);
    f.variant = dup_or_null(s->variant, &oom);
    f.eval = dup_or_null(s->eval, &oom);
    f.mode = dup_or_null(s->mode, &oom);
    f.effort = dup_or_null(s->effort, &oom);
    f.metric = dup_or_null(s->metric, &oom);
    f.message = dup_or_null(msg, &oom);
    if (oom) {
        gate_flag_free(&f);
        return pg_fail(err, PG_ERR_NOMEM, "gate: out of memory for flags");
    }
    out->v[out->n++] = f;
    return PG_OK;
}

double regress_threshold(pg_metric m, double b, double a, double tol)
{
    const int higher = pg_metric_higher_is_worse(m);
    const double rel = isfinite(b) ? (higher ? b + fabs(b) * tol : b - fabs(b) * tol) : NAN;
    if (isnan(a)) return rel;
    if (isnan(rel)) return a;
    return higher ? fmax(a, rel) : fmin(a, rel);
}

int regress_worse(pg_metric m, double value, double threshold)
{
    if (isnan(value) || isnan(threshold)) return 0;
    return pg_metric_higher_is_worse(m) ? value > threshold : value < threshold;
}

gate_verdict regress_effect_verdict(double d, double lo, double hi, double e)
{
    if (isnan(d) || isnan(lo) || isnan(hi) || isnan(e)) return GATE_VERDICT_INCONCLUSIVE;
    if (hi < 0 && d <= -e) return GATE_VERDICT_REGRESSION;
    if (lo > 0 && d >= e) return GATE_VERDICT_IMPROVEMENT;
    if (lo >= -e && hi <= e) return GATE_VERDICT_NO_CHANGE;
    return GATE_VERDICT_INCONCLUSIVE;
}

/* ---- layer and mode_pair --------------------------------------------- */

/* Orders rows by (capture, layer, variant). */
static int row_cmp(const layer_metric_row *x, const layer_metric_row *y)
{
    int c = strcmp(x->capture, y->capture);
    if (c != 0) return c;
    if (x->layer != y->layer) return x->layer < y->layer ? -1 : 1;
    return strcmp(x->variant, y->variant);
}

/* qsort comparator over pointers to rows: row_cmp of what they point to. */
static int row_ptr_cmp(const void *a, const void *b)
{
    return row_cmp(*(const layer_metric_row *const *)a, *(const layer_metric_row *const *)b);
}

/* Sorted pointers to rows[0..n) into *out (caller frees); PG_ERR_SHAPE naming
 * side when a key repeats, PG_ERR_INTERNAL for a NULL string. */
static pg_status sort_rows(const layer_metric_row *rows, size_t n, const char *side,
                           const layer_metric_row ***out, pg_err *err)
{
    *out = NULL;
    if (n == 0) return PG_OK;
    const layer_metric_row **p = malloc(n * sizeof *p);
    if (p == NULL) return pg_fail(err, PG_ERR_NOMEM, "gate: out of memory sorting layer rows");
    for (size_t i = 0; i < n; i++) {
        if (rows[i].capture == NULL || rows[i].variant == NULL) {
            free(p);
            return pg_fail(err, PG_ERR_INTERNAL, "gate: %s layer row %zu has a NULL string",
                           side, i);
        }
        p[i] = &rows[i];
    }
    qsort(p, n, sizeof *p, row_ptr_cmp);
    for (size_t i = 1; i < n; i++)
        if (row_cmp(p[i - 1], p[i]) == 0) {
            pg_status st = pg_fail(err, PG_ERR_SHAPE, "gate: the %s holds %s layer %d %s twice",
                                   side, p[i]->capture, p[i]->layer, p[i]->variant);
            free(p);
            return st;
        }
    *out = p;
    return PG_OK;
}

/* "capture layer L variant" into buf. */
static void where(char *buf, size_t len, const layer_metric_row *r, const char *variant)
{
    snprintf(buf, len, "%s layer %d %s", r->capture, r->layer, variant);
}

/* Formats the threshold's terms ("max(abs A, baseline B x (1 + tol))"). */
static void describe_threshold(char *buf, size_t len, pg_metric m, double b, double a,
                               double tol)
{
    const int higher = pg_metric_higher_is_worse(m);
    char rel[96] = "", ab[48] = "";
    if (isfinite(b)) snprintf(rel, sizeof rel, "baseline %.4g %s %.4g", b, higher ? "+" : "-",
                              fabs(b) * tol);
    if (!isnan(a)) snprintf(ab, sizeof ab, "abs %.4g", a);
    if (rel[0] && ab[0]) snprintf(buf, len, "%s(%s, %s)", higher ? "max" : "min", ab, rel);
    else snprintf(buf, len, "%s", rel[0] ? rel : ab);
}

/* The flags of one key present in the run (b: its baseline row or NULL). */
static pg_status layer_key(const layer_metric_row *r, const layer_metric_row *b,
                           int64_t base_id, const gate_config *c, gate_flags *out, pg_err *err)
{
    char at[REGRESS_WHERE_MAX];
    where(at, sizeof at, r, r->variant);
    flag_spec s = {.scope = GATE_SCOPE_LAYER, .capture = r->capture, .layer = r->layer,
                   .variant = r->variant, .metric = GATE_METRIC_NONFINITE,
                   .value = (double)pg_metric_nonfinite(&r->v),
                   .baseline_value = b != NULL ? (double)pg_metric_nonfinite(&b->v) : NAN,
                   .threshold = 0,
                   .verdict = pg_metric_nonfinite(&r->v) > 0 ? GATE_VERDICT_REGRESSION : GATE_VERDICT_PASS};
    pg_status st = push(out, &s, err, "%s: %lld NaN/Inf output elements%s", at,
                        (long long)pg_metric_nonfinite(&r->v),
                        pg_metric_nonfinite(&r->v) > 0 ? " (any non-finite output is a regression)" : "");
    /* A key the baseline run lacks is judged by the config's absolute bounds
     * alone; with none for any metric it has nothing to be judged by, and a
     * baseline run exists, so that gap is an error (never an exit-0
     * inconclusive). Without a baseline run (the first run) it is expected. */
    int bounded = 0;
    for (int m = 0; m < PG_METRIC_VALUE_COUNT; m++)
        if ((c->layer.metrics & (1u << m)) && !isnan(gate_bound_find(&c->layer.abs[m], r->variant)))
            bounded = 1;
    const int unjudged = b == NULL && base_id >= 0 && !bounded;
    for (int m = 0; st == PG_OK && m < PG_METRIC_VALUE_COUNT; m++) {
        if (!(c->layer.metrics & (1u << m))) continue;
        const char *name = pg_metric_name((pg_metric)m);
        const double a = gate_bound_find(&c->layer.abs[m], r->variant);
        if (base_id < 0 && isnan(a)) continue;  /* no baseline run, no bound: nothing to compare */
        const double bv = b != NULL ? pg_metric_value(&b->v, (pg_metric)m) : NAN;
        const double t = regress_threshold((pg_metric)m, bv, a, c->layer.rel_tol);
        const double v = pg_metric_value(&r->v, (pg_metric)m);
        char terms[192];
        describe_threshold(terms, sizeof terms, (pg_metric)m, bv, a, c->layer.rel_tol);
        char base[64];
        if (b != NULL) snprintf(base, sizeof base, "baseline run %lld", (long long)base_id);
        else if (base_id < 0) snprintf(base, sizeof base, "no baseline run");
        else snprintf(base, sizeof base, "not in baseline run %lld", (long long)base_id);
        s.metric = name;
        s.value = v;
        s.baseline_value = bv;
        s.threshold = t;
        if (pg_metric_nonfinite(&r->v) > 0) {
            s.verdict = GATE_VERDICT_REGRESSION;
            st = push(out, &s, err, "%s: %s %.4g: the output had %lld NaN/Inf elements (%s)", at,
                      name, v, (long long)pg_metric_nonfinite(&r->v), base);
        } else if (unjudged) {
            s.verdict = GATE_VERDICT_ERROR;
            st = push(out, &s, err, "%s: %s %.4g: %s and no absolute bound for %s in the "
                      "config: set a baseline run that has it (precgate baseline set RUN) or "
                      "bound it in --config (layer.%s%s%s%s)", at, name, v, base, r->variant,
                      m == PG_METRIC_REL_L2 ? "abs." : "metric_abs.",
                      m == PG_METRIC_REL_L2 ? "" : name, m == PG_METRIC_REL_L2 ? "" : ".",
                      r->variant);
        } else if (isnan(v)) {
            s.verdict = GATE_VERDICT_INCONCLUSIVE;
            st = push(out, &s, err, "%s: %s undefined in this run (stored NULL; %s)", at, name,
                      base);
        } else if (isnan(t)) {
            s.verdict = GATE_VERDICT_INCONCLUSIVE;
            st = push(out, &s, err, "%s: %s %.4g: nothing to compare with (%s%s and no "
                      "absolute bound for %s)", at, name, v, base,
                      b != NULL ? " value is not finite" : "", r->variant);
        } else {
            const int bad = regress_worse((pg_metric)m, v, t);
            const int higher = pg_metric_higher_is_worse((pg_metric)m);
            s.verdict = bad ? GATE_VERDICT_REGRESSION : GATE_VERDICT_PASS;
            st = push(out, &s, err, "%s: %s %.4g %s threshold %.4g = %s (%s)", at, name, v,
                      bad ? (higher ? ">" : "<") : (higher ? "<=" : ">="), t, terms, base);
        }
    }
    return st;
}

pg_status regress_layers(const layer_metric_row *run, size_t n_run,
                         const layer_metric_row *base, size_t n_base, int64_t baseline_run_id,
                         const gate_config *c, gate_flags *out, pg_err *err)
{
    if ((run == NULL && n_run > 0) || (base == NULL && n_base > 0) || c == NULL || out == NULL)
        return pg_fail(err, PG_ERR_INTERNAL, "regress_layers: NULL argument");
    const layer_metric_row **r = NULL, **b = NULL;
    pg_status st = sort_rows(run, n_run, "run", &r, err);
    if (st == PG_OK) st = sort_rows(base, n_base, "baseline", &b, err);
    size_t i = 0, j = 0;
    while (st == PG_OK && (i < n_run || j < n_base)) {
        const int cmp = i == n_run ? 1 : j == n_base ? -1 : row_cmp(r[i], b[j]);
        if (cmp <= 0) {
            st = layer_key(r[i], cmp == 0 ? b[j] : NULL, baseline_run_id, c, out, err);
            i++;
            if (cmp == 0) j++;
            continue;
        }
        char at[REGRESS_WHERE_MAX];
        where(at, sizeof at, b[j], b[j]->variant);
        const flag_spec s = {.scope = GATE_SCOPE_LAYER, .capture = b[j]->capture,
                             .layer = b[j]->layer, .variant = b[j]->variant,
                             .metric = GATE_METRIC_PRESENT, .value = NAN,
                             .baseline_value = NAN, .threshold = NAN, .verdict = GATE_VERDICT_ERROR};
        st = push(out, &s, err, "%s: in baseline run %lld, missing from this run", at,
                  (long long)baseline_run_id);
        j++;
    }
    free(r);
    free(b);
    return st;
}

/* The rows of one (capture, layer): [*g, *e) of sorted rows p[0..n) from *g. */
static void layer_group(const layer_metric_row *const *p, size_t n, size_t g, size_t *e)
{
    size_t k = g;
    while (k < n && strcmp(p[k]->capture, p[g]->capture) == 0 && p[k]->layer == p[g]->layer) k++;
    *e = k;
}

/* The row of variant in p[g..e), or NULL. */
static const layer_metric_row *group_find(const layer_metric_row *const *p, size_t g, size_t e,
                                           const char *variant)
{
    for (size_t k = g; k < e; k++)
        if (strcmp(p[k]->variant, variant) == 0) return p[k];
    return NULL;
}

/* rel_l2 of row x when it is usable as a reference value (finite, no NaN/Inf
 * in the output), else NaN; NaN for NULL. */
static double usable_rel_l2(const layer_metric_row *x)
{
    return x != NULL && pg_metric_nonfinite(&x->v) == 0 && isfinite(x->v.rel_l2) ? x->v.rel_l2
                                                                              : NAN;
}

/* What the mode_pair check of one variant compares with. */
typedef struct pair_terms {
    double a, ratio, ref_v;         /* config bound, config ratio, bf16's rel_l2 in the run */
    double base_v, base_ref;        /* the variant's and bf16's rel_l2 in the baseline run */
    double gap_limit;               /* baseline gap + allowance: the most v - ref_v may be, or NaN */
    double gap_term;                /* ref_v + gap_limit (as a threshold on v), or NaN */
    double own_term;                /* base_v x (1 + layer.rel_tol) where gap_term is, or NaN */
    double t;                       /* max of the defined terms, or NaN */
    char terms[400];                /* how t is made (fits ab, ra, gp and ow below) */
    char missing[160];              /* why there is no gap term (empty when there is one) */
} pair_terms;

/* Fills pt for variant x of a run layer (ref: the run's bf16 row; bref, bx:
 * the baseline's bf16 and x rows, NULL when absent; has_base: a baseline
 * run exists), as the top of regress.h defines the threshold. */
static void mode_pair_terms(const layer_metric_row *x, const layer_metric_row *ref,
                            const layer_metric_row *bref, const layer_metric_row *bx,
                            int has_base, int64_t base_id, const gate_config *c, pair_terms *pt)
{
    const int is_ref = x == ref;
    pt->a = gate_bound_find(&c->mode_pair.abs, x->variant);
    pt->ratio = is_ref ? NAN : gate_bound_find(&c->mode_pair.ratio, x->variant);
    pt->ref_v = usable_rel_l2(ref);
    pt->base_v = usable_rel_l2(bx);
    pt->base_ref = usable_rel_l2(bref);
    pt->gap_limit = NAN;
    pt->gap_term = NAN;
    pt->own_term = NAN;
    pt->missing[0] = '\0';
    char gp[160] = "", ow[80] = "";
    const double gap_run = x->v.rel_l2 - pt->ref_v;
    if (is_ref) {
        snprintf(pt->missing, sizeof pt->missing, "bf16 is the reference of every pair; its "
                 "change against the baseline is the layer scope's check");
    } else if (isnan(pt->ref_v)) {
        snprintf(pt->missing, sizeof pt->missing, "no usable bf16 row in this layer, so no gap");
    } else if (!has_base) {
        snprintf(pt->missing, sizeof pt->missing, "no baseline run: gap %s - bf16 %.4g recorded; "
                 "a later run is judged against it", x->variant, gap_run);
    } else if (isnan(pt->base_v) || isnan(pt->base_ref)) {
        snprintf(pt->missing, sizeof pt->missing, "baseline run %lld has no usable %s row in "
                 "this layer: gap %.4g recorded", (long long)base_id,
                 isnan(pt->base_ref) ? PG_MODE_BASELINE_NAME : x->variant, gap_run);
    } else {
        const double gap_b = pt->base_v - pt->base_ref;
        const double scale = fmax(fabs(gap_b), pt->base_ref);
        pt->gap_limit = gap_b + c->mode_pair.rel_tol * scale;
        pt->gap_term = pt->ref_v + pt->gap_limit;
        snprintf(gp, sizeof gp, "bf16 %.4g + baseline gap %.4g + %.3g x %.4g (gap %.4g vs "
                 "%.4g in baseline run %lld)", pt->ref_v, gap_b, c->mode_pair.rel_tol, scale,
                 gap_run, gap_b, (long long)base_id);
        /* The gap grows when bf16 improves and the variant stays put (baseline
         * bf16 0.004, ext:flash 0.003; run bf16 0.002, ext:flash 0.003). The
         * baseline has the same inputs (gate_store.h: same content), so the
         * variant's own rel_l2 against the same fp64 reference measures its
         * accuracy directly: within the layer scope's tolerance of its own
         * baseline value it did not get worse, whatever bf16 did. (Raising
         * the allowance's scale to max(|B - R|, R, r) would not help there:
         * -0.001 + 0.1 x 0.004 is still below the gap 0.001.) */
        pt->own_term = regress_threshold(PG_METRIC_REL_L2, pt->base_v, NAN, c->layer.rel_tol);
        snprintf(ow, sizeof ow, "own baseline %.4g + %.3g x %.4g", pt->base_v, c->layer.rel_tol,
                 pt->base_v);
    }
    const double rel = pt->ratio * pt->ref_v;  /* NaN unless both are defined */
    pt->t = NAN;
    const double terms[4] = {pt->a, rel, pt->gap_term, pt->own_term};
    for (int k = 0; k < 4; k++)
        if (!isnan(terms[k])) pt->t = isnan(pt->t) ? terms[k] : fmax(pt->t, terms[k]);
    char ab[48] = "", ra[64] = "";
    if (!isnan(pt->a)) snprintf(ab, sizeof ab, "abs %.4g", pt->a);
    if (!isnan(rel)) snprintf(ra, sizeof ra, "%.4g x bf16 %.4g", pt->ratio, pt->ref_v);
    const char *const parts[4] = {ab, ra, gp, ow};
    int n_terms = 0;
    for (int k = 0; k < 4; k++) n_terms += parts[k][0] != 0;
    size_t used = (size_t)snprintf(pt->terms, sizeof pt->terms, "%s", n_terms > 1 ? "max(" : "");
    for (int k = 0, put = 0; k < 4 && used < sizeof pt->terms; k++)
        if (parts[k][0])
            used += (size_t)snprintf(pt->terms + used, sizeof pt->terms - used, "%s%s",
                                     put++ ? ", " : "", parts[k]);
    if (n_terms > 1 && used < sizeof pt->terms)
        snprintf(pt->terms + used, sizeof pt->terms - used, ")");
}

/* 1 when rel_l2 v of the variant of pt is within one of its defined terms.
 * The gap term is compared in the gap domain, (v - r) <= gap_b + allowance,
 * never as v <= r + (gap_b + allowance): the sum rounds, so an identical
 * rerun at rel_tol 0 (v - r == gap_b bit for bit) failed about 1% of its
 * layers when r + gap_b rounded below v. */
static int pair_within(const pair_terms *pt, double v)
{
    const double rel = pt->ratio * pt->ref_v;
    return (!isnan(pt->a) && v <= pt->a) || (!isnan(rel) && v <= rel) ||
           (!isnan(pt->gap_limit) && v - pt->ref_v <= pt->gap_limit) ||
           (!isnan(pt->own_term) && v <= pt->own_term);
}

pg_status regress_mode_pairs(const layer_metric_row *run, size_t n,
                             const layer_metric_row *base, size_t n_base,
                             int64_t baseline_run_id, const gate_config *c, gate_flags *out,
                             pg_err *err)
{
    if ((run == NULL && n > 0) || (base == NULL && n_base > 0) || c == NULL || out == NULL)
        return pg_fail(err, PG_ERR_INTERNAL, "regress_mode_pairs: NULL argument");
    const layer_metric_row **r = NULL, **b = NULL;
    pg_status st = sort_rows(run, n, "run", &r, err);
    if (st == PG_OK) st = sort_rows(base, n_base, "baseline", &b, err);
    const int has_base = baseline_run_id >= 0;
    size_t bg = 0;  /* the baseline's groups are walked alongside */
    for (size_t g = 0; st == PG_OK && g < n;) {
        size_t e;
        layer_group(r, n, g, &e);
        const layer_metric_row *ref = group_find(r, g, e, PG_MODE_BASELINE_NAME);
        /* The baseline's group of the same (capture, layer), if any. */
        size_t be = bg;
        while (bg < n_base) {
            layer_group(b, n_base, bg, &be);
            const int cmp = strcmp(b[bg]->capture, r[g]->capture);
            if (cmp > 0 || (cmp == 0 && b[bg]->layer >= r[g]->layer)) break;
            bg = be;
        }
        const int same = bg < n_base && strcmp(b[bg]->capture, r[g]->capture) == 0 &&
                         b[bg]->layer == r[g]->layer;
        if (!same) be = bg;
        const layer_metric_row *bref = same ? group_find(b, bg, be, PG_MODE_BASELINE_NAME) : NULL;
        for (size_t k = g; st == PG_OK && k < e; k++) {
            const layer_metric_row *x = r[k];
            if (variant_name_is_spec(x->variant)) continue;
            const int is_ref = x == ref;
            pair_terms pt;
            const layer_metric_row *bx = same ? group_find(b, bg, be, x->variant) : NULL;
            mode_pair_terms(x, ref, bref, bx, has_base, baseline_run_id, c, &pt);
            /* A baseline run exists but lacks this variant (or bf16) here: with no
             * budget either, nothing judges the variant, which is an error. */
            const int unjudged = has_base && !is_ref && (bx == NULL || bref == NULL);
            char name[REGRESS_PAIR_MAX], at[REGRESS_WHERE_MAX];
            if (is_ref) snprintf(name, sizeof name, "%s", x->variant);
            else snprintf(name, sizeof name, "%s-%s", x->variant, PG_MODE_BASELINE_NAME);
            where(at, sizeof at, x, name);
            const double v = x->v.rel_l2;
            flag_spec s = {.scope = GATE_SCOPE_MODE_PAIR, .capture = x->capture,
                           .layer = x->layer, .variant = name,
                           .metric = pg_metric_name(PG_METRIC_REL_L2), .value = v,
                           .baseline_value = is_ref ? NAN : pt.ref_v, .threshold = pt.t};
            if (pg_metric_nonfinite(&x->v) > 0) {
                s.verdict = GATE_VERDICT_REGRESSION;
                st = push(out, &s, err, "%s: rel_l2 %.4g: the output had %lld NaN/Inf elements "
                          "(any non-finite output is a regression)", at, v,
                          (long long)pg_metric_nonfinite(&x->v));
            } else if (isnan(v)) {
                s.verdict = GATE_VERDICT_INCONCLUSIVE;
                st = push(out, &s, err, "%s: rel_l2 undefined (stored NULL)", at);
            } else if (v >= REGRESS_ZERO_OUTPUT_REL_L2) {
                s.verdict = GATE_VERDICT_REGRESSION;
                s.threshold = REGRESS_ZERO_OUTPUT_REL_L2;
                st = push(out, &s, err, "%s: rel_l2 vs fp64 reference %.4g >= %g: no closer to "
                          "the reference than an all-zero output", at, v,
                          REGRESS_ZERO_OUTPUT_REL_L2);
            } else if (isnan(pt.t) && unjudged) {
                s.verdict = GATE_VERDICT_ERROR;
                st = push(out, &s, err, "%s: rel_l2 vs fp64 reference %.4g: baseline run %lld "
                          "has no %s row in this layer and the config has no mode_pair budget "
                          "for %s: set a baseline run that has it (precgate baseline set RUN) "
                          "or bound it in --config (mode_pair.abs.%s or mode_pair.ratio.%s)",
                          at, v, (long long)baseline_run_id,
                          bx == NULL ? x->variant : PG_MODE_BASELINE_NAME, x->variant, x->variant,
                          x->variant);
            } else if (isnan(pt.t)) {
                /* Finite and below the all-zero bound is all that was checked. */
                s.verdict = is_ref ? GATE_VERDICT_PASS : GATE_VERDICT_INCONCLUSIVE;
                st = push(out, &s, err, "%s: rel_l2 vs fp64 reference %.4g (finite, < %g); %s; "
                          "no mode_pair budget in the config", at, v, REGRESS_ZERO_OUTPUT_REL_L2,
                          pt.missing);
            } else {
                const int bad = !pair_within(&pt, v);
                s.verdict = bad ? GATE_VERDICT_REGRESSION : GATE_VERDICT_PASS;
                st = push(out, &s, err, "%s: rel_l2 vs fp64 reference %.4g %s threshold %.4g = "
                          "%s%s%s", at, v, bad ? ">" : "<=", pt.t, pt.terms,
                          pt.missing[0] && !is_ref ? "; " : "", is_ref ? "" : pt.missing);
            }
        }
        g = e;
    }
    free(r);
    free(b);
    return st;
}

/* ---- eval ------------------------------------------------------------- */

/* The MDE clause of a message. */
static void mde_clause(char *buf, size_t len, double mde)
{
    if (isnan(mde)) snprintf(buf, len, "MDE undefined");
    else snprintf(buf, len, "MDE %.3f at 80%% power", mde);
}

/* Why an eval verdict is what it is; the MDE is always stated. */
static void explain(char *buf, size_t len, gate_verdict v, double e, double mde)
{
    char m[64];
    mde_clause(m, sizeof m, mde);
    switch (v) {
    case GATE_VERDICT_REGRESSION:
        snprintf(buf, len, "regression: the interval is below 0 and the drop is at least "
                           "min_effect %.3f (%s)", e, m);
        break;
    case GATE_VERDICT_IMPROVEMENT:
        snprintf(buf, len, "improvement: the interval is above 0 and the gain is at least "
                           "min_effect %.3f (%s)", e, m);
        break;
    case GATE_VERDICT_NO_CHANGE:
        snprintf(buf, len, "no change larger than min_effect %.3f: the interval lies within "
                           "+-%.3f; not proof of equality (%s: smaller changes go undetected)",
                 e, e, m);
        break;
    default:
        snprintf(buf, len, "inconclusive at min_effect %.3f: the interval is neither clear of "
                           "0 by that much nor within +-%.3f (%s)", e, e, m);
        break;
    }
}

/* The verdict of d in [lo, hi] with the design's mde at min_effect e, and
 * its explanation: "no change" only when the design could have seen e. */
static gate_verdict eval_verdict(double d, double lo, double hi, double mde, double e,
                                    char *why, size_t len)
{
    gate_verdict v = regress_effect_verdict(d, lo, hi, e);
    if (v == GATE_VERDICT_NO_CHANGE && !(mde <= e)) {
        if (isnan(mde))
            snprintf(why, len, "inconclusive: the interval lies within +-%.3f, but this design's "
                               "smallest detectable drop is undefined, so it cannot call that no "
                               "change", e);
        else
            snprintf(why, len, "inconclusive: the interval lies within +-%.3f, but this design "
                               "lacks the power to call it no change: it could only have seen a "
                               "drop of %.3f or more (MDE at 80%% power), above min_effect %.3f",
                     e, mde, e);
        return GATE_VERDICT_INCONCLUSIVE;
    }
    explain(why, len, v, e, mde);
    return v;
}

/* The verdict of pair p at min_effect e and its explanation: eval_verdict
 * of the stored interval, a regression or improvement held back to
 * inconclusive unless the exact sign test reaches EVAL_ALPHA (regress.h). */
static gate_verdict pair_verdict(const eval_pair_stored *p, double e, char *why, size_t len)
{
    gate_verdict v = eval_verdict(p->mean_diff, p->ci_low, p->ci_high, p->mde, e, why, len);
    if (v != GATE_VERDICT_REGRESSION && v != GATE_VERDICT_IMPROVEMENT) return v;
    const int known = p->sign_p > 0 && p->sign_p <= 1;
    if (known && p->sign_p <= EVAL_ALPHA) return v;
    char m[64];
    mde_clause(m, sizeof m, p->mde);
    if (known)
        snprintf(why, len, "inconclusive: the interval is %s 0, but the exact sign test gives p "
                 "%.3g > %.2f (%lld problems better, %lld worse, the rest tied), so the %s is "
                 "not significant at this many problems (%s)",
                 v == GATE_VERDICT_REGRESSION ? "below" : "above", p->sign_p, EVAL_ALPHA,
                 (long long)p->wins, (long long)p->losses,
                 v == GATE_VERDICT_REGRESSION ? "drop" : "gain", m);
    else
        snprintf(why, len, "inconclusive: the interval is %s 0, but the sign test p is unknown "
                 "(%g), so significance cannot be checked (%s)",
                 v == GATE_VERDICT_REGRESSION ? "below" : "above", p->sign_p, m);
    return GATE_VERDICT_INCONCLUSIVE;
}

/* Appends "; " (unless buf is empty) and the formatted text to buf. */
__attribute__((format(printf, 3, 4)))
static void add_reason(char *buf, size_t len, const char *fmt, ...)
{
    const size_t used = strlen(buf);
    if (used + 3 >= len) return;
    if (used > 0) snprintf(buf + used, len - used, "; ");
    const size_t at = strlen(buf);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf + at, len - at, fmt, ap);
    va_end(ap);
}

int regress_eval_degenerate(const eval_score_stored *x, char *buf, size_t len)
{
    if (isnan(x->accuracy) || x->n_valid <= 0) {
        add_reason(buf, len, "%s %s: no graded sample", x->mode, x->effort);
        return 1;
    }
    /* "More than half" in exact integers: 2 t > v. */
    const int none_correct = x->accuracy == 0.0, truncated = 2 * x->n_truncated > x->n_valid;
    if (!none_correct && !truncated) return 0;
    char t[96] = "";
    if (truncated)
        snprintf(t, sizeof t, ", %lld truncated at the token limit (over half: raise "
                 "--max-tokens)", (long long)x->n_truncated);
    add_reason(buf, len, "%s %s: %s%lld graded samples%s", x->mode, x->effort,
               none_correct ? "no correct answer in " : "", (long long)x->n_valid, t);
    return 1;
}

/* Adds the reason a design of n problems cannot reach significance; 1 when so. */
static int unreachable_design(int64_t n, char *buf, size_t len)
{
    const double p = eval_sign_test_min_p(n > 0 ? (size_t)n : 0);
    if (p <= EVAL_ALPHA) return 0;
    size_t need = 1;  /* the fewest problems whose smallest p reaches alpha */
    while (eval_sign_test_min_p(need) > EVAL_ALPHA) need++;
    add_reason(buf, len, "%lld problems: the smallest two-sided sign-test p is %.4g > %.2f, so "
               "this design cannot reach significance at all (it needs at least %zu)",
               (long long)n, p, EVAL_ALPHA, need);
    return 1;
}

/* 1 when score x is of (eval, mode, effort). */
static int score_has_key(const eval_score_stored *x, const char *eval, const char *mode,
                         const char *effort)
{
    return strcmp(x->eval, eval) == 0 && strcmp(x->mode, mode) == 0 &&
           strcmp(x->effort, effort) == 0;
}

/* 1 when the two scores have the same (eval, mode, effort). */
static int same_score_key(const eval_score_stored *x, const eval_score_stored *y)
{
    return score_has_key(x, y->eval, y->mode, y->effort);
}

/* The score of (eval, mode, effort) in s[0..n), or NULL. */
static const eval_score_stored *find_score(const eval_score_stored *s, size_t n,
                                            const char *eval, const char *mode,
                                            const char *effort)
{
    for (size_t i = 0; i < n; i++)
        if (score_has_key(&s[i], eval, mode, effort)) return &s[i];
    return NULL;
}

/* Adds to buf why scores a (of mode_a) and b (of mode_b; the baseline
 * run's when b_in_baseline) of effort, compared over n problems, cannot
 * support a verdict: a missing score (NULL), regress_eval_degenerate of
 * each, a design of n problems that cannot reach significance (the top of
 * regress.h); 1 when any. */
static int sides_degenerate(const eval_score_stored *a, const char *mode_a,
                            const eval_score_stored *b, const char *mode_b, int b_in_baseline,
                            const char *effort, int64_t n, char *buf, size_t len)
{
    int bad = 0;
    const eval_score_stored *side[2] = {a, b};
    const char *modes[2] = {mode_a, mode_b};
    for (int k = 0; k < 2; k++) {
        if (side[k] == NULL) {
            add_reason(buf, len, "%s %s: no eval_scores row", modes[k], effort);
            bad = 1;
        } else if (regress_eval_degenerate(side[k], buf, len)) {
            if (k == 1 && b_in_baseline)
                add_reason(buf, len, "(the baseline run's %s %s)", modes[k], effort);
            bad = 1;
        }
    }
    bad |= unreachable_design(n, buf, len);
    return bad;
}

/* The design SE of acc_x - acc_y from both scores' graded samples (the top
 * of regress.h); NaN when either has none. */
static double design_se(const eval_score_stored *x, const eval_score_stored *y)
{
    if (x->n_valid <= 0 || y->n_valid <= 0) return NAN;
    const double nx = (double)x->n_valid, ny = (double)y->n_valid;
    /* Correct counts as avg@K x graded samples, rounded: exact for equal n_i. */
    const double c = nearbyint(x->accuracy * nx + y->accuracy * ny);
    if (!(c >= 0) || c > nx + ny) return NAN;
    const double p = eval_adjusted_proportion((size_t)c, (size_t)(nx + ny));
    return sqrt(p * (1.0 - p) * (1.0 / nx + 1.0 / ny));
}

/* The rule-of-three MDE floor (evals/score.h, eval_mde_floor) of scores x
 * and y over n problems: 3/n when every graded sample of both was correct
 * (or every one wrong), else 0; 0 when either has nothing graded. */
static double scores_mde_floor(const eval_score_stored *x, const eval_score_stored *y, int64_t n)
{
    if (x == NULL || y == NULL || n <= 0 || x->n_valid <= 0 || y->n_valid <= 0) return 0.0;
    const int all_right = x->accuracy == 1.0 && y->accuracy == 1.0;
    const int all_wrong = x->accuracy == 0.0 && y->accuracy == 0.0;
    if (!all_right && !all_wrong) return 0.0;
    const size_t valid = (size_t)(x->n_valid + y->n_valid);
    return eval_mde_floor(all_right ? valid : 0, valid, (size_t)n);
}

/* Adds to why, when mde is floor (> 0), that the MDE is the rule of three's. */
static void add_floor_note(char *why, size_t len, double floor, double mde)
{
    if (floor > 0.0 && mde == floor)
        add_reason(why, len, "the MDE is the rule-of-three floor 3/n (no sample varied in either "
                   "side, so the observed variance is 0 and says nothing about the power)");
}

/* The verdict of paired comparison p (side A minus side B) at min_effect e
 * into why, a and b the scores of its sides (sides_degenerate): an error
 * ("error: " and every reason) when a side or the design cannot support a
 * verdict, else pair_verdict with the rule-of-three note. The run's mode
 * pairs and its paired comparison with the baseline run both take it. */
static gate_verdict judge_pair(const eval_pair_stored *p, const char *effort,
                               const eval_score_stored *a, const char *mode_a,
                               const eval_score_stored *b, const char *mode_b, int b_in_baseline,
                               double e, char *why, size_t len)
{
    char reasons[REGRESS_MSG_MAX / 2] = "error: ";
    const size_t at = strlen(reasons);
    if (sides_degenerate(a, mode_a, b, mode_b, b_in_baseline, effort, p->n_problems,
                         reasons + at, sizeof reasons - at)) {
        snprintf(why, len, "%s", reasons);
        return GATE_VERDICT_ERROR;
    }
    const gate_verdict v = pair_verdict(p, e, why, len);
    add_floor_note(why, len, scores_mde_floor(a, b, p->n_problems), p->mde);
    return v;
}

/* The numbers of computed pair p as pair_verdict reads them (the key
 * strings NULL), as eval_store_put_pair would store them. */
static eval_pair_stored pair_numbers(const eval_pair *p)
{
    return (eval_pair_stored){
        .n_problems = (int64_t)p->n_problems, .wins = (int64_t)p->wins,
        .losses = (int64_t)p->losses, .ties = (int64_t)p->ties, .mean_diff = p->mean_diff,
        .stderr_ = p->se, .ci_low = p->ci_low, .ci_high = p->ci_high, .sign_p = p->sign_p,
        .mde = p->mde,
    };
}

/* The entry of x's key in bp[0..n), or NULL. */
static const regress_base_pair *find_base_pair(const regress_base_pair *bp, size_t n,
                                               const eval_score_stored *x)
{
    for (size_t i = 0; i < n; i++)
        if (score_has_key(x, bp[i].eval, bp[i].mode, bp[i].effort)) return &bp[i];
    return NULL;
}

/* Appends the two-sample "accuracy" flag of run score x against baseline
 * score y (the top of regress.h), the message saying it is unpaired and
 * why (unpaired). */
static pg_status two_sample_flag(const eval_score_stored *x, const eval_score_stored *y,
                                 const char *unpaired, int64_t baseline_run_id, double e,
                                 gate_flags *out, pg_err *err)
{
    const double d = x->accuracy - y->accuracy;
    const double se_obs = sqrt(x->stderr_ * x->stderr_ + y->stderr_ * y->stderr_);
    const double se_design = design_se(x, y);
    const double se = se_obs > se_design ? se_obs : se_design;  /* NaN design: NaN */
    const double lo = d - EVAL_Z_975 * se, hi = d + EVAL_Z_975 * se;
    const int64_t n = x->n_problems < y->n_problems ? x->n_problems : y->n_problems;
    const double floor = scores_mde_floor(x, y, n);
    const double mde_se = (EVAL_Z_975 + EVAL_Z_80) * se;
    const double mde = floor > mde_se ? floor : mde_se;  /* NaN se: NaN */
    char reasons[REGRESS_MSG_MAX / 2] = "error: ", why[REGRESS_MSG_MAX / 2];
    const size_t at = strlen(reasons);
    gate_verdict v = GATE_VERDICT_ERROR;
    if (sides_degenerate(x, x->mode, y, y->mode, 1, x->effort, n, reasons + at,
                         sizeof reasons - at))
        snprintf(why, sizeof why, "%s", reasons);
    else {
        v = eval_verdict(d, lo, hi, mde, e, why, sizeof why);
        add_floor_note(why, sizeof why, floor, mde);
    }
    const flag_spec s = {.scope = GATE_SCOPE_EVAL, .layer = -1, .eval = x->eval,
                         .mode = x->mode, .effort = x->effort, .metric = GATE_METRIC_ACCURACY,
                         .value = x->accuracy, .baseline_value = y->accuracy, .threshold = e,
                         .verdict = v};
    return push(out, &s, err, "%s %s %s: accuracy %.3f vs %.3f in baseline run %lld, unpaired "
                "(%s): difference %+.3f, 95%% CI [%+.3f, %+.3f] (two-sample, SEs %.3f and "
                "%.3f, design SE %.3f); %s", x->eval, x->effort, x->mode, x->accuracy,
                y->accuracy, (long long)baseline_run_id, unpaired, d, lo, hi, x->stderr_,
                y->stderr_, se_design, why);
}

/* Appends the paired "accuracy" flag of run score x against baseline score
 * y from their pair bp (run minus baseline; the top of regress.h). */
static pg_status paired_flag(const eval_score_stored *x, const eval_score_stored *y,
                             const eval_pair *bp, int64_t baseline_run_id, double e,
                             gate_flags *out, pg_err *err)
{
    const eval_pair_stored p = pair_numbers(bp);
    char why[REGRESS_MSG_MAX / 2];
    const gate_verdict v = judge_pair(&p, x->effort, x, x->mode, y, y->mode, 1, e, why,
                                      sizeof why);
    const flag_spec s = {.scope = GATE_SCOPE_EVAL, .layer = -1, .eval = x->eval,
                         .mode = x->mode, .effort = x->effort, .metric = GATE_METRIC_ACCURACY,
                         .value = x->accuracy, .baseline_value = y->accuracy, .threshold = e,
                         .verdict = v};
    if (p.n_problems == 0)
        return push(out, &s, err, "%s %s %s: accuracy %.3f vs %.3f in baseline run %lld, "
                    "paired: no pairs (no problem scored in both runs); %s", x->eval, x->effort,
                    x->mode, x->accuracy, y->accuracy, (long long)baseline_run_id, why);
    return push(out, &s, err, "%s %s %s: accuracy %.3f vs %.3f in baseline run %lld, paired "
                "over %lld problems: %lld won, %lld lost, %lld tied, sign test p=%.2g; mean "
                "paired difference %+.3f, 95%% CI [%+.3f, %+.3f]; %s", x->eval, x->effort,
                x->mode, x->accuracy, y->accuracy, (long long)baseline_run_id,
                (long long)p.n_problems, (long long)p.wins, (long long)p.losses,
                (long long)p.ties, p.sign_p, p.mean_diff, p.ci_low, p.ci_high, why);
}

pg_status regress_evals(const eval_pair_stored *pairs, size_t n_pairs,
                        const eval_score_stored *run, size_t n_run,
                        const eval_score_stored *base, size_t n_base,
                        const regress_base_pair *base_pairs, size_t n_base_pairs,
                        int64_t baseline_run_id, const gate_config *c, gate_flags *out,
                        pg_err *err)
{
    if ((pairs == NULL && n_pairs > 0) || (run == NULL && n_run > 0) ||
        (base == NULL && n_base > 0) || (base_pairs == NULL && n_base_pairs > 0) ||
        c == NULL || out == NULL)
        return pg_fail(err, PG_ERR_INTERNAL, "regress_evals: NULL argument");
    for (size_t i = 0; i < n_base_pairs; i++)
        if (!base_pairs[i].eval || !base_pairs[i].mode || !base_pairs[i].effort)
            return pg_fail(err, PG_ERR_INTERNAL, "regress_evals: baseline pair %zu has a NULL "
                           "key", i);
    for (size_t i = 0; i < n_pairs + n_run + n_base; i++) {
        const eval_pair_stored *p = i < n_pairs ? &pairs[i] : NULL;
        const eval_score_stored *x = !p && i < n_pairs + n_run ? &run[i - n_pairs] : NULL;
        const eval_score_stored *y = !p && !x ? &base[i - n_pairs - n_run] : NULL;
        if ((p && (!p->eval || !p->effort || !p->mode_a || !p->mode_b)) ||
            (x && (!x->eval || !x->mode || !x->effort)) ||
            (y && (!y->eval || !y->mode || !y->effort)))
            return pg_fail(err, PG_ERR_INTERNAL, "regress_evals: eval row %zu has a NULL key", i);
    }
    const double e = c->eval.min_effect;
    pg_status st = PG_OK;
    char why[REGRESS_MSG_MAX / 2];
    for (size_t i = 0; st == PG_OK && i < n_run; i++) {
        const eval_score_stored *x = &run[i];
        why[0] = '\0';
        const int bad = regress_eval_degenerate(x, why, sizeof why);
        const flag_spec s = {.scope = GATE_SCOPE_EVAL, .layer = -1, .eval = x->eval,
                             .mode = x->mode, .effort = x->effort,
                             .metric = GATE_METRIC_SAMPLES, .value = x->accuracy,
                             .baseline_value = NAN, .threshold = NAN,
                             .verdict = bad ? GATE_VERDICT_ERROR : GATE_VERDICT_PASS};
        if (bad)
            st = push(out, &s, err, "%s %s %s: cannot support a verdict: %s", x->eval, x->effort,
                      x->mode, why);
        else
            st = push(out, &s, err, "%s %s %s: %lld graded samples over %lld problems, accuracy "
                      "%.3f, %lld truncated", x->eval, x->effort, x->mode, (long long)x->n_valid,
                      (long long)x->n_problems, x->accuracy, (long long)x->n_truncated);
    }
    for (size_t i = 0; st == PG_OK && i < n_pairs; i++) {
        const eval_pair_stored *p = &pairs[i];
        char metric[REGRESS_PAIR_MAX + 16];
        snprintf(metric, sizeof metric, "%s%s", GATE_METRIC_DIFF_PREFIX, p->mode_b);
        const gate_verdict v =
            judge_pair(p, p->effort, find_score(run, n_run, p->eval, p->mode_a, p->effort),
                       p->mode_a, find_score(run, n_run, p->eval, p->mode_b, p->effort),
                       p->mode_b, 0, e, why, sizeof why);
        const flag_spec s = {.scope = GATE_SCOPE_EVAL, .layer = -1, .eval = p->eval,
                             .mode = p->mode_a, .effort = p->effort, .metric = metric,
                             .value = p->mean_diff, .baseline_value = NAN, .threshold = e,
                             .verdict = v};
        if (p->n_problems == 0)
            st = push(out, &s, err, "%s %s %s - %s: no pairs (no problem scored in both modes); "
                      "%s", p->eval, p->effort, p->mode_a, p->mode_b, why);
        else
            st = push(out, &s, err, "%s %s %s - %s: mean paired difference %+.3f, 95%% CI "
                      "[%+.3f, %+.3f] over %lld problems; %s", p->eval, p->effort, p->mode_a,
                      p->mode_b, p->mean_diff, p->ci_low, p->ci_high, (long long)p->n_problems,
                      why);
    }
    for (size_t i = 0; st == PG_OK && i < n_run; i++) {
        const eval_score_stored *x = &run[i];
        const eval_score_stored *y = NULL;
        for (size_t j = 0; j < n_base && y == NULL; j++)
            if (same_score_key(x, &base[j])) y = &base[j];
        if (y == NULL) continue;
        const regress_base_pair *bp = find_base_pair(base_pairs, n_base_pairs, x);
        if (bp != NULL && bp->paired)
            st = paired_flag(x, y, &bp->pair, baseline_run_id, e, out, err);
        else
            st = two_sample_flag(x, y, bp != NULL ? bp->unpaired : REGRESS_NO_BASE_PAIR,
                                 baseline_run_id, e, out, err);
    }
    for (size_t j = 0; st == PG_OK && j < n_base; j++) {
        const eval_score_stored *y = &base[j];
        int found = 0;
        for (size_t i = 0; i < n_run && !found; i++) found = same_score_key(&run[i], y);
        if (found) continue;
        const flag_spec s = {.scope = GATE_SCOPE_EVAL, .layer = -1, .eval = y->eval,
                             .mode = y->mode, .effort = y->effort,
                             .metric = GATE_METRIC_ACCURACY, .value = NAN,
                             .baseline_value = y->accuracy, .threshold = e,
                             .verdict = GATE_VERDICT_ERROR};
        st = push(out, &s, err, "%s %s %s: scored in baseline run %lld, missing from this run",
                  y->eval, y->effort, y->mode, (long long)baseline_run_id);
    }
    return st;
}

/* The servers sources records for mode, or NULL. */
static const char *mode_served(const regress_mode_source *sources, size_t n, const char *mode)
{
    for (size_t i = 0; i < n; i++)
        if (sources[i].mode != NULL && strcmp(sources[i].mode, mode) == 0) return sources[i].served;
    return NULL;
}

pg_status regress_identical_modes(const eval_mode_agreement *rows, size_t n,
                                  const char *replayed, const regress_mode_source *sources,
                                  size_t n_sources, const gate_config *c, gate_flags *out,
                                  pg_err *err)
{
    if ((rows == NULL && n > 0) || (sources == NULL && n_sources > 0) || c == NULL ||
        out == NULL)
        return pg_fail(err, PG_ERR_INTERNAL, "regress_identical_modes: NULL argument");
    pg_status st = PG_OK;
    for (size_t i = 0; st == PG_OK && i < n; i++) {
        const eval_mode_agreement *r = &rows[i];
        if (!r->eval || !r->effort || !r->mode_a || !r->mode_b)
            return pg_fail(err, PG_ERR_INTERNAL, "regress_identical_modes: row %zu has a NULL "
                           "key", i);
        if (r->n_shared <= 0 || r->n_same != r->n_shared) continue;
        char metric[GATE_VARIANT_MAX + 32];
        snprintf(metric, sizeof metric, "%s%s", GATE_METRIC_IDENTICAL_PREFIX, r->mode_b);
        const int expected = gate_config_expects_identical(c, r->mode_a, r->mode_b);
        const flag_spec s = {.scope = GATE_SCOPE_EVAL, .layer = -1, .eval = r->eval,
                             .mode = r->mode_a, .effort = r->effort, .metric = metric,
                             .value = (double)r->n_same, .baseline_value = NAN,
                             .threshold = NAN,
                             .verdict = expected ? GATE_VERDICT_PASS : GATE_VERDICT_ERROR};
        char where[REGRESS_MSG_MAX / 2];
        if (replayed != NULL) {
            snprintf(where, sizeof where, "replayed from traces %s", replayed);
        } else {
            const char *sa = mode_served(sources, n_sources, r->mode_a);
            const char *sb = mode_served(sources, n_sources, r->mode_b);
            snprintf(where, sizeof where, "endpoints %s=%s, %s=%s", r->mode_a,
                     sa ? sa : "(not recorded)", r->mode_b, sb ? sb : "(not recorded)");
        }
        char text[96] = "";
        if (r->n_no_text > 0)
            snprintf(text, sizeof text, "; %lld of them without completion text, so only their "
                     "outcomes were compared", (long long)r->n_no_text);
        if (expected)
            st = push(out, &s, err, "%s %s %s = %s: all %lld graded samples over %lld problems "
                      "identical%s (%s), as the gate config's eval.identical_modes expects",
                      r->eval, r->effort, r->mode_a, r->mode_b, (long long)r->n_shared,
                      (long long)r->n_problems, text, where);
        else
            st = push(out, &s, err, "%s %s %s = %s: all %lld graded samples over %lld problems "
                      "identical (same outcome, byte-identical completion%s) (%s): one server "
                      "or one recording under two names, not two precision modes, so no "
                      "comparison of them is evidence (give each mode its own server, or list "
                      "both in the gate config's eval.identical_modes if they are meant to be "
                      "one)", r->eval, r->effort, r->mode_a, r->mode_b, (long long)r->n_shared,
                      (long long)r->n_problems, text, where);
    }
    return st;
}

pg_status regress_content_mismatch(gate_scope scope, const char *field, const char *run_value,
                                   const char *base_value, int64_t run_id,
                                   int64_t baseline_run_id, const char *spec, gate_flags *out,
                                   pg_err *err)
{
    if (field == NULL || run_value == NULL || base_value == NULL || spec == NULL || out == NULL)
        return pg_fail(err, PG_ERR_INTERNAL, "regress_content_mismatch: NULL argument");
    const int is_eval = scope == GATE_SCOPE_EVAL;
    const flag_spec s = {.scope = scope, .layer = -1, .capture = is_eval ? NULL : "content",
                         .variant = is_eval ? NULL : field, .eval = is_eval ? "content" : NULL,
                         .mode = is_eval ? field : NULL, .effort = is_eval ? "-" : NULL,
                         .metric = GATE_METRIC_CONTENT, .value = NAN, .baseline_value = NAN,
                         .threshold = NAN, .verdict = GATE_VERDICT_ERROR};
    return push(out, &s, err, "--baseline %s is run %lld, whose %s is %s; run %lld's is %s: runs "
                "of different content are not compared (choose a baseline with the same %s, or "
                "drop --baseline for the automatic one)", spec, (long long)baseline_run_id, field,
                base_value, (long long)run_id, run_value, field);
}

pg_status regress_no_baseline(gate_scope scope, const char *kind, int64_t run_id, gate_flags *out,
                              pg_err *err)
{
    if (kind == NULL || out == NULL)
        return pg_fail(err, PG_ERR_INTERNAL, "regress_no_baseline: NULL argument");
    const int is_eval = scope == GATE_SCOPE_EVAL;
    const flag_spec s = {.scope = scope, .layer = -1, .capture = is_eval ? NULL : "baseline",
                         .variant = is_eval ? NULL : "none", .eval = is_eval ? "baseline" : NULL,
                         .mode = is_eval ? "none" : NULL, .effort = is_eval ? "-" : NULL,
                         .metric = GATE_METRIC_BASELINE, .value = NAN, .baseline_value = NAN,
                         .threshold = NAN, .verdict = GATE_VERDICT_ERROR};
    return push(out, &s, err, "--require-baseline: run %lld has no baseline run (no older complete "
                "%s run of its label and content; the 'baseline:' line says why), so nothing was "
                "compared against an earlier run (name one with --baseline B, or precgate "
                "baseline set RUN)", (long long)run_id, kind);
}

pg_status regress_incomplete(gate_scope scope, int64_t run_id, int unverifiable,
                             int64_t n_missing, int64_t n_expected, const char *unit,
                             const char *list, const char *remedy, gate_flags *out,
                             pg_err *err)
{
    if (unit == NULL || list == NULL || remedy == NULL || out == NULL)
        return pg_fail(err, PG_ERR_INTERNAL, "regress_incomplete: NULL argument");
    const int is_eval = scope == GATE_SCOPE_EVAL;
    const flag_spec s = {.scope = scope, .layer = -1, .capture = is_eval ? NULL : "run",
                         .variant = is_eval ? NULL : "rows", .eval = is_eval ? "run" : NULL,
                         .mode = is_eval ? "rows" : NULL, .effort = is_eval ? "-" : NULL,
                         .metric = GATE_METRIC_COMPLETE,
                         .value = unverifiable ? NAN : (double)n_missing,
                         .baseline_value = unverifiable ? NAN : (double)n_expected,
                         .threshold = 0, .verdict = GATE_VERDICT_ERROR};
    if (unverifiable)
        return push(out, &s, err, "run %lld: %s: an error, never a pass (%s)",
                    (long long)run_id, list, remedy);
    return push(out, &s, err, "run %lld lacks %lld of the %lld %s its config implies: %s; "
                "no verdict passes on missing rows (%s)", (long long)run_id,
                (long long)n_missing, (long long)n_expected, unit, list, remedy);
}

pg_status regress_unsupported(const unsupported_summary *u, size_t n, gate_flags *out,
                              pg_err *err)
{
    if ((u == NULL && n > 0) || out == NULL)
        return pg_fail(err, PG_ERR_INTERNAL, "regress_unsupported: NULL argument");
    pg_status st = PG_OK;
    for (size_t i = 0; st == PG_OK && i < n; i++) {
        const flag_spec s = {.scope = GATE_SCOPE_LAYER, .capture = u[i].capture,
                             .layer = u[i].first_layer, .variant = u[i].variant,
                             .metric = GATE_METRIC_SUPPORTED, .value = (double)u[i].n_layers,
                             .baseline_value = NAN, .threshold = NAN,
                             .verdict = GATE_VERDICT_SKIPPED};
        st = push(out, &s, err, "%s %s layer%s %s: not computed, %s: skipped, never a pass",
                  u[i].capture, u[i].variant, u[i].n_layers == 1 ? "" : "s", u[i].layers,
                  u[i].reason);
    }
    return st;
}

/* The gate verdict of a diagnosis verdict (regress.h). */
static gate_verdict diagnosis_verdict(diag_verdict v)
{
    switch (v) {
    case DIAG_BUG: return GATE_VERDICT_REGRESSION;
    case DIAG_INTENDED: return GATE_VERDICT_PASS;
    default: return GATE_VERDICT_INCONCLUSIVE;
    }
}

/* Whether a span of spans[0..n) covers layer `layer` of (capture, ext). */
static int diagnosed(const diag_span *spans, size_t n, const char *capture, const char *ext,
                     int layer)
{
    for (size_t i = 0; i < n; i++)
        if (layer >= spans[i].first_layer && layer <= spans[i].last_layer &&
            strcmp(spans[i].capture, capture) == 0 && strcmp(spans[i].ext_name, ext) == 0)
            return 1;
    return 0;
}

/* Whether run row r is an ext:NAME whole-layer row no span covers. */
static int undiagnosed(const layer_metric_row *r, const diag_span *spans, size_t n)
{
    const char *ext = variant_name_ext_name(r->variant);
    return ext != NULL && !diagnosed(spans, n, r->capture, ext, r->layer);
}

/* qsort comparator over row pointers: capture, variant, then layer. */
static int ext_row_ptr_cmp(const void *a, const void *b)
{
    const layer_metric_row *x = *(const layer_metric_row *const *)a,
                            *y = *(const layer_metric_row *const *)b;
    int c = strcmp(x->capture, y->capture);
    if (c == 0) c = strcmp(x->variant, y->variant);
    if (c == 0 && x->layer != y->layer) c = x->layer < y->layer ? -1 : 1;
    return c;
}

pg_status regress_diagnosis(const diag_span *spans, size_t n_spans, const layer_metric_row *run,
                            size_t n_run, gate_flags *out, pg_err *err)
{
    if (out == NULL || (spans == NULL && n_spans > 0) || (run == NULL && n_run > 0))
        return pg_fail(err, PG_ERR_INTERNAL, "regress_diagnosis: NULL argument");
    pg_status st = PG_OK;
    for (size_t i = 0; st == PG_OK && i < n_spans; i++) {
        const diag_span *d = &spans[i];
        char variant[VARIANT_NAME_MAX], msg[REGRESS_MSG_MAX];
        variant_name_ext(d->ext_name, variant, sizeof variant);
        diag_span_message(d, msg, sizeof msg);
        const flag_spec f = {.scope = GATE_SCOPE_LAYER, .capture = d->capture,
                             .layer = d->first_layer, .variant = variant,
                             .metric = GATE_METRIC_SCALE_BUG, .value = d->d_max,
                             .baseline_value = d->d_other_min, .threshold = DIAG_MATCH_REL_L2,
                             .verdict = diagnosis_verdict(d->verdict)};
        st = push(out, &f, err, "%s%s", d->verdict == DIAG_BUG ? "scale bug: " : "", msg);
    }
    /* The undiagnosed ext rows, by (capture, variant, layer), in spans of
     * consecutive layers. */
    const layer_metric_row **u = n_run > 0 ? malloc(n_run * sizeof *u) : NULL;
    if (n_run > 0 && u == NULL) return pg_fail(err, PG_ERR_NOMEM, "gate: out of memory");
    size_t nu = 0;
    for (size_t i = 0; i < n_run; i++)
        if (undiagnosed(&run[i], spans, n_spans)) u[nu++] = &run[i];
    if (nu > 1) qsort(u, nu, sizeof *u, ext_row_ptr_cmp);
    for (size_t i = 0; st == PG_OK && i < nu;) {
        size_t k = i + 1;
        while (k < nu && u[k]->layer == u[k - 1]->layer + 1 &&
               strcmp(u[k]->capture, u[i]->capture) == 0 &&
               strcmp(u[k]->variant, u[i]->variant) == 0)
            k++;
        char layers[48];
        diag_layers_text(u[i]->layer, u[k - 1]->layer, layers, sizeof layers);
        const flag_spec f = {.scope = GATE_SCOPE_LAYER, .capture = u[i]->capture,
                             .layer = u[i]->layer, .variant = u[i]->variant,
                             .metric = GATE_METRIC_SCALE_BUG, .value = NAN,
                             .baseline_value = NAN, .threshold = DIAG_MATCH_REL_L2,
                             .verdict = GATE_VERDICT_ERROR};
        st = push(out, &f, err, "%s, %s: no ext_diagnosis rows (swept before the scale-plumbing "
                  "diagnosis existed?): nothing says whether the output has a scale bug; sweep "
                  "the capture again (precgate run --capture %s) and gate that run",
                  u[i]->variant, layers, u[i]->capture);
        i = k;
    }
    free(u);
    return st;
}

void regress_count(const gate_flags *f, size_t *counts)
{
    for (int v = 0; v < GATE_VERDICT_COUNT; v++) counts[v] = 0;
    for (size_t i = 0; f != NULL && i < f->n; i++)
        if ((unsigned)f->v[i].verdict < GATE_VERDICT_COUNT) counts[f->v[i].verdict]++;
}

int regress_exit_status(const gate_flags *f)
{
    size_t counts[GATE_VERDICT_COUNT];
    regress_count(f, counts);
    if (counts[GATE_VERDICT_ERROR] > 0) return GATE_EXIT_ERROR;
    if (counts[GATE_VERDICT_REGRESSION] > 0) return GATE_EXIT_REGRESSION;
    return GATE_EXIT_PASS;
}

/* The MDE of a one-sample comparison with standard error se: the smallest
 * true exceedance found at 80% power, alpha .05 two-sided (evals/score.h). */
static double mde_of(double se)
{
    return (EVAL_Z_975 + EVAL_Z_80) * se;
}

/* The verdict of a change d (run - baseline, higher is worse when
 * worse_up) with interval [lo, hi] at min effect e, "no change" only when
 * the design's MDE (of se) is at most e; why says which and why. */
static gate_verdict change_verdict(double d, double lo, double hi, double se, double e,
                                   int worse_up, char *why, size_t len)
{
    const double mde = mde_of(se);
    /* regress_effect_verdict reads a negative difference as the worse one. */
    gate_verdict v = worse_up ? regress_effect_verdict(-d, -hi, -lo, e)
                              : regress_effect_verdict(d, lo, hi, e);
    if (v == GATE_VERDICT_NO_CHANGE && !(mde <= e)) v = GATE_VERDICT_INCONCLUSIVE;
    const char *dir = worse_up ? "increase" : "drop";
    switch (v) {
    case GATE_VERDICT_REGRESSION:
        snprintf(why, len, "a regression: the interval excludes 0 and the %s is at least the "
                 "min effect %.3g (MDE %.3g)", dir, e, mde);
        break;
    case GATE_VERDICT_IMPROVEMENT:
        snprintf(why, len, "an improvement: the interval excludes 0 and the change is at least "
                 "the min effect %.3g (MDE %.3g)", e, mde);
        break;
    case GATE_VERDICT_NO_CHANGE:
        snprintf(why, len, "no change larger than the min effect %.3g: the interval lies within "
                 "+-%.3g (MDE %.3g; not proof of equality)", e, e, mde);
        break;
    default:
        snprintf(why, len, "inconclusive at the min effect %.3g (MDE %.3g%s)", e, mde,
                 isnan(mde) ? ": no SE" : mde > e ? ": too few sequences to see that change"
                                                  : "");
        break;
    }
    return v;
}

/* The flags of mode m against its baseline run base_id (pair p; NULL:
 * none made), with the run's noise floor (NULL: none measured). */
static pg_status divergence_vs_baseline(const div_summary_stored *m,
                                        const div_summary_stored *floor,
                                        const regress_div_pair *p, int64_t base_id,
                                        const gate_config *cfg, gate_flags *out, pg_err *err)
{
    flag_spec s = {.scope = GATE_SCOPE_DIVERGENCE, .layer = -1, .variant = m->mode,
                   .mode = m->mode, .value = NAN, .baseline_value = NAN, .threshold = NAN,
                   .metric = GATE_METRIC_KLD_VS_BASELINE};
    if (p == NULL || p->unpaired[0] != '\0') {
        s.verdict = GATE_VERDICT_ERROR;
        return push(out, &s, err, "%s against baseline run %" PRId64 ": not compared (%s): an "
                    "error, never a pass", m->mode, base_id,
                    p != NULL ? p->unpaired : "no pair was made");
    }
    const div_paired *d = &p->p;
    /* The min effect: a fraction of the baseline's divergence, and never
     * below the serving noise this run measured. */
    double e = cfg->divergence.kld_rel_effect * d->kld_base;
    if (floor != NULL && floor->s.kld_mean > e) e = floor->s.kld_mean;
    char why[REGRESS_MSG_MAX / 2];
    s.verdict = change_verdict(d->kld_diff, d->kld_diff_low, d->kld_diff_high, d->kld_diff_se, e,
                               1, why, sizeof why);
    s.value = d->kld_run;
    s.baseline_value = d->kld_base;
    s.threshold = e;
    pg_status st = push(out, &s, err, "%s against baseline run %" PRId64 ": mean KLD %.6g vs "
                        "%.6g, change %+.4g, 95%% CI [%+.4g, %+.4g] paired over %zu sequences "
                        "(%zu positions): %s", m->mode, base_id, d->kld_run, d->kld_base,
                        d->kld_diff, d->kld_diff_low, d->kld_diff_high, d->n_sequences,
                        d->n_positions, why);
    if (st != PG_OK) return st;
    const double et = cfg->divergence.same_top_effect;
    s.metric = GATE_METRIC_SAME_TOP_VS_BASELINE;
    s.verdict = change_verdict(d->same_top_diff, d->same_top_diff_low, d->same_top_diff_high,
                               d->same_top_diff_se, et, 0, why, sizeof why);
    s.value = d->same_top_run;
    s.baseline_value = d->same_top_base;
    s.threshold = et;
    return push(out, &s, err, "%s against baseline run %" PRId64 ": same top %.4f vs %.4f, "
                "change %+.4f, 95%% CI [%+.4f, %+.4f] paired over %zu sequences: %s", m->mode,
                base_id, d->same_top_run, d->same_top_base, d->same_top_diff,
                d->same_top_diff_low, d->same_top_diff_high, d->n_sequences, why);
}

/* The budget flags of one mode m against floor (NULL: none measured). */
static pg_status divergence_budgets(const div_summary_stored *m, const div_summary_stored *floor,
                                    int has_baseline, const gate_config *cfg, gate_flags *out,
                                    pg_err *err)
{
    const div_summary *d = &m->s;
    const double b = gate_bound_find(&cfg->divergence.kld_mean, m->mode);
    const double st_min = gate_bound_find(&cfg->divergence.same_top_min, m->mode);
    flag_spec s = {.scope = GATE_SCOPE_DIVERGENCE, .layer = -1, .variant = m->mode,
                   .mode = m->mode, .value = NAN, .baseline_value = NAN, .threshold = NAN};
    pg_status st = PG_OK;
    if (isnan(b) && isnan(st_min) && !has_baseline) {
        s.metric = GATE_METRIC_BUDGET;
        s.verdict = GATE_VERDICT_ERROR;
        return push(out, &s, err, "%s against %s: no budget in the gate config (divergence."
                    "kld_mean.%s, divergence.same_top_min.%s) and no baseline run, so nothing "
                    "judges its mean KLD %.6g: an error, never a pass (bound it, or gate "
                    "against an earlier diverge run of the same sequences)", m->mode,
                    m->reference, m->mode, m->mode, d->kld_mean);
    }
    if (!isnan(b)) {
        s.metric = GATE_METRIC_KLD_MEAN;
        s.value = d->kld_mean;
        s.threshold = b;
        s.baseline_value = floor ? floor->s.kld_mean : NAN;
        const double mde = mde_of(d->kld_mean_se);
        if (floor == NULL || !(floor->s.kld_mean < b)) {
            s.verdict = GATE_VERDICT_ERROR;
            st = floor == NULL
                     ? push(out, &s, err, "%s against %s: mean KLD %.6g against budget %.6g, but "
                            "no noise floor was measured (diverge --no-noise-floor): the budget "
                            "cannot be told from serving noise", m->mode, m->reference,
                            d->kld_mean, b)
                     : push(out, &s, err, "%s against %s: the noise floor (%s scored again: mean "
                            "KLD %.6g) is not below the budget %.6g: at this budget the gate "
                            "cannot tell %s from batching noise (equal server flags, "
                            "--no-enable-prefix-caching, or a larger budget)", m->mode,
                            m->reference, floor->mode, floor->s.kld_mean, b, m->mode);
        } else if (isnan(d->kld_ci_low)) {
            s.verdict = GATE_VERDICT_ERROR;
            st = push(out, &s, err, "%s against %s: mean KLD %.6g has no interval (%zu "
                      "sequences): no verdict against budget %.6g", m->mode, m->reference,
                      d->kld_mean, d->n_sequences, b);
        } else {
            s.verdict = d->kld_ci_low > b    ? GATE_VERDICT_REGRESSION
                        : d->kld_ci_high <= b ? GATE_VERDICT_PASS
                                              : GATE_VERDICT_INCONCLUSIVE;
            st = push(out, &s, err, "%s against %s: mean KLD %.6g, 95%% CI [%.6g, %.6g] over "
                      "%zu sequences, %s the budget %.6g (MDE %.3g; noise floor %.3g)", m->mode,
                      m->reference, d->kld_mean, d->kld_ci_low, d->kld_ci_high, d->n_sequences,
                      s.verdict == GATE_VERDICT_REGRESSION ? "above"
                      : s.verdict == GATE_VERDICT_PASS     ? "within"
                                                           : "straddling",
                      b, mde, floor->s.kld_mean);
        }
    }
    if (st == PG_OK && !isnan(st_min)) {
        s.metric = GATE_METRIC_SAME_TOP;
        s.value = d->same_top;
        s.threshold = st_min;
        s.baseline_value = floor ? floor->s.same_top : NAN;
        const double se = isnan(d->same_top_se) ? NAN : d->same_top_se;
        if (isnan(se) || isnan(d->same_top)) {
            s.verdict = GATE_VERDICT_ERROR;
            st = push(out, &s, err, "%s against %s: same top %.4g has no SE (%zu sequences): no "
                      "verdict against its least %.4g", m->mode, m->reference, d->same_top,
                      d->n_sequences, st_min);
        } else {
            s.verdict = d->same_top + EVAL_Z_975 * se < st_min    ? GATE_VERDICT_REGRESSION
                        : d->same_top - EVAL_Z_975 * se >= st_min ? GATE_VERDICT_PASS
                                                                  : GATE_VERDICT_INCONCLUSIVE;
            st = push(out, &s, err, "%s against %s: same top %.4f ± %.4f (SE) %s the least "
                      "%.4f (MDE %.3g)", m->mode, m->reference, d->same_top, se,
                      s.verdict == GATE_VERDICT_REGRESSION ? "below"
                      : s.verdict == GATE_VERDICT_PASS     ? "at or above"
                                                           : "straddling",
                      st_min, mde_of(se));
        }
    }
    return st;
}

pg_status regress_divergence(const div_summary_stored *sm, size_t n,
                             const regress_div_pair *pairs, size_t n_pairs, int64_t base_id,
                             const gate_config *cfg, gate_flags *out, pg_err *err)
{
    if ((sm == NULL && n > 0) || (pairs == NULL && n_pairs > 0) || cfg == NULL || out == NULL)
        return pg_fail(err, PG_ERR_INTERNAL, "regress_divergence: NULL argument");
    const div_summary_stored *floor = NULL;
    for (size_t i = 0; i < n; i++)
        if (strcmp(sm[i].role, div_role_name(DIV_ROLE_FLOOR)) == 0) floor = &sm[i];
    pg_status st = PG_OK;
    for (size_t i = 0; st == PG_OK && i < n; i++) {
        const div_summary_stored *m = &sm[i];
        if (m == floor) continue;
        flag_spec s = {.scope = GATE_SCOPE_DIVERGENCE, .layer = -1, .variant = m->mode,
                       .mode = m->mode, .value = NAN, .baseline_value = NAN, .threshold = NAN};
        if ((int64_t)m->s.n_sequences < cfg->divergence.min_sequences) {
            s.metric = GATE_METRIC_SEQUENCES;
            s.value = (double)m->s.n_sequences;
            s.threshold = cfg->divergence.min_sequences;
            s.verdict = GATE_VERDICT_ERROR;
            st = push(out, &s, err, "%s against %s: %zu sequences, fewer than the %d a verdict "
                      "needs (divergence.min_sequences; the SE is clustered by sequence)",
                      m->mode, m->reference, m->s.n_sequences, cfg->divergence.min_sequences);
            continue;
        }
        if (!(m->s.tail_mass_median <= cfg->divergence.max_tail_mass)) {
            s.metric = GATE_METRIC_TAIL_MASS;
            s.value = m->s.tail_mass_median;
            s.threshold = cfg->divergence.max_tail_mass;
            s.verdict = GATE_VERDICT_ERROR;
            st = push(out, &s, err, "%s against %s: median tail mass %.4g is above %.4g "
                      "(divergence.max_tail_mass): the top-%lld KL bound may miss most of the "
                      "KL, so it judges nothing (score again with a larger --top-k)", m->mode,
                      m->reference, m->s.tail_mass_median, cfg->divergence.max_tail_mass,
                      (long long)m->top_k);
            continue;
        }
        st = divergence_budgets(m, floor, base_id >= 0, cfg, out, err);
        const regress_div_pair *p = NULL;
        for (size_t j = 0; j < n_pairs && p == NULL; j++)
            if (strcmp(pairs[j].mode, m->mode) == 0) p = &pairs[j];
        if (st == PG_OK && base_id >= 0)
            st = divergence_vs_baseline(m, floor, p, base_id, cfg, out, err);
    }
    return st;
}
