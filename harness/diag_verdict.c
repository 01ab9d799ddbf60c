/* diag_verdict.c: the scale-plumbing diagnosis verdicts (see diag_verdict.h). */
#include "diag_verdict.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/attn_hypothesis.h"

/* Longest joined list of hypotheses or not-run reasons a span keeps. */
#define DIAG_LIST_MAX 512

static const char *const verdict_names[DIAG_VERDICT_COUNT] = {
    "intended", "bug", "indistinguishable", "unexplained", "no evidence"};

const char *diag_verdict_name(diag_verdict v)
{
    return (unsigned)v < DIAG_VERDICT_COUNT ? verdict_names[v] : "?";
}

/* Whether entry e ran. */
static int ran(const diag_entry *e)
{
    return !isnan(e->rel_l2);
}

diag_judgement diag_judge(const diag_entry *e, size_t n)
{
    diag_judgement j = {DIAG_NO_EVIDENCE, -1, -1, -1, 0, 0, 0};
    if (n > DIAG_MAX_HYPOTHESES) n = DIAG_MAX_HYPOTHESES;
    for (size_t i = 0; i < n; i++) {
        if (!ran(&e[i])) {
            j.not_run |= (uint64_t)1 << i;
            continue;
        }
        int *side = e[i].intended ? &j.intended : &j.bug;
        if (*side < 0 || e[i].rel_l2 < e[*side].rel_l2) *side = (int)i;
        if (j.nearest < 0 || e[i].rel_l2 < e[j.nearest].rel_l2) j.nearest = (int)i;
    }
    if (j.nearest < 0) return j;
    const double dn = e[j.nearest].rel_l2;
    j.coincide = 1;
    for (size_t i = 0; i < n; i++)
        if (ran(&e[i]) && e[i].rel_l2 <= DIAG_MARGIN * dn) {
            j.within |= (uint64_t)1 << i;
            if (e[i].rel_l2 != dn) j.coincide = 0;
        }
    if (dn > DIAG_MATCH_REL_L2) {
        j.verdict = DIAG_UNEXPLAINED;
        return j;
    }
    j.verdict = DIAG_INDISTINGUISHABLE;
    if (j.intended < 0 || j.bug < 0) return j;
    const double di = e[j.intended].rel_l2, db = e[j.bug].rel_l2;
    if (db * DIAG_MARGIN <= di && db < di && db <= DIAG_MATCH_REL_L2) j.verdict = DIAG_BUG;
    else if (di * DIAG_MARGIN <= db && di < db && di <= DIAG_MATCH_REL_L2)
        j.verdict = DIAG_INTENDED;
    return j;
}

void diag_layers_text(int first, int last, char *buf, size_t len)
{
    if (first == last) snprintf(buf, len, "layer %d", first);
    else snprintf(buf, len, "layers %d-%d", first, last);
}

void diag_spans_free(diag_span *s, size_t n)
{
    if (s == NULL) return;
    for (size_t i = 0; i < n; i++) {
        free(s[i].capture);
        free(s[i].ext_name);
        free(s[i].hypothesis);
        free(s[i].other);
        free(s[i].within);
        free(s[i].not_run);
    }
    free(s);
}

/* Appends printf text to buf (len bytes, NUL-terminated), "; "/", " chosen by the caller. */
static void append(char *buf, size_t len, const char *fmt, ...)
{
    const size_t at = strlen(buf);
    if (at + 1 >= len) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf + at, len - at, fmt, ap);
    va_end(ap);
}

/* One layer's judgement with the texts a span compares and keeps. */
typedef struct layer_judged {
    diag_judgement j;
    diag_entry e[DIAG_MAX_HYPOTHESES];
    size_t n;
    char within[DIAG_LIST_MAX], not_run[DIAG_LIST_MAX];
} layer_judged;

/* Whether layer x continues span s (same key, the next layer). */
static int continues(const diag_span *s, const layer_judged *x, const char *capture,
                     const char *ext, int layer)
{
    if (strcmp(s->capture, capture) != 0 || strcmp(s->ext_name, ext) != 0) return 0;
    if (layer != s->last_layer + 1 || x->j.verdict != s->verdict) return 0;
    const char *h = x->j.nearest >= 0 ? x->e[x->j.nearest].hypothesis : NULL;
    if ((h == NULL) != (s->hypothesis == NULL) || (h != NULL && strcmp(h, s->hypothesis) != 0))
        return 0;
    if (s->verdict == DIAG_INDISTINGUISHABLE && strcmp(s->within, x->within) != 0) return 0;
    const char *nr = s->not_run != NULL ? s->not_run : "";
    return strcmp(nr, x->not_run) == 0;
}

/* The side opposite the verdict's hypothesis: the nearest intended-* of a
 * bug, the nearest bug of an intended output; -1 otherwise. */
static int other_side(const diag_judgement *j)
{
    if (j->verdict == DIAG_BUG) return j->intended;
    if (j->verdict == DIAG_INTENDED) return j->bug;
    return -1;
}

/* Folds layer x into span s (a new span when fresh). */
static int fold(diag_span *s, const layer_judged *x, int fresh)
{
    const int o = other_side(&x->j);
    const double dn = x->j.nearest >= 0 ? x->e[x->j.nearest].rel_l2 : NAN;
    if (fresh) {
        s->hypothesis = x->j.nearest >= 0 ? strdup(x->e[x->j.nearest].hypothesis) : NULL;
        s->d_max = dn;
        s->other = o >= 0 ? strdup(x->e[o].hypothesis) : NULL;
        s->d_other_min = o >= 0 ? x->e[o].rel_l2 : NAN;
        s->within = strdup(x->within);
        s->coincide = x->j.coincide;
        s->not_run = x->not_run[0] != '\0' ? strdup(x->not_run) : NULL;
        return (x->j.nearest >= 0 && s->hypothesis == NULL) || (o >= 0 && s->other == NULL) ||
               s->within == NULL || (x->not_run[0] != '\0' && s->not_run == NULL);
    }
    if (dn > s->d_max) s->d_max = dn;
    s->coincide &= x->j.coincide;
    if (o >= 0 && !(x->e[o].rel_l2 >= s->d_other_min)) {
        char *name = strdup(x->e[o].hypothesis);
        if (name == NULL) return 1;
        free(s->other);
        s->other = name;
        s->d_other_min = x->e[o].rel_l2;
    }
    return 0;
}

/* Judges the rows of one (capture, ext, layer) r[0..m) into *x against the
 * hypothesis table. */
static pg_status judge_layer(const diagnosis_row *r, size_t m, layer_judged *x, pg_err *err)
{
    memset(x, 0, sizeof *x);
    x->n = attn_hypothesis_count();
    if (x->n > DIAG_MAX_HYPOTHESES)
        return pg_fail(err, PG_ERR_INTERNAL, "the hypothesis table holds %zu; a diagnosis "
                       "takes at most %d (DIAG_MAX_HYPOTHESES)", x->n, DIAG_MAX_HYPOTHESES);
    for (size_t i = 0; i < m; i++)
        if (attn_hypothesis_find(r[i].hypothesis) == NULL)
            return pg_fail(err, PG_ERR_DB, "ext_diagnosis: capture '%s' layer %d ext:%s names "
                           "hypothesis '%s', which this precgate does not know (written by "
                           "a newer one?)", r[i].capture, r[i].layer, r[i].ext_name,
                           r[i].hypothesis);
    /* The hypotheses judged: every one an always-diagnosed mode's (a missing
     * row is named, never skipped), and the others' that the run asked for
     * (they have stored rows: attn_hypothesis_is_asked). */
    size_t n_judged = 0;
    for (size_t h = 0; h < x->n; h++) {
        const attn_hypothesis *hy = attn_hypothesis_at(h);
        int stored = 0;
        for (size_t i = 0; i < m && !stored; i++)
            stored = strcmp(r[i].hypothesis, attn_hypothesis_name(hy)) == 0;
        if (!stored && !attn_hypothesis_is_asked(hy, 0)) continue;
        diag_entry *e = &x->e[n_judged++];
        *e = (diag_entry){attn_hypothesis_name(hy), attn_hypothesis_is_intended(hy), NAN,
                          "no stored row"};
        for (size_t i = 0; i < m; i++)
            if (strcmp(r[i].hypothesis, e->hypothesis) == 0) {
                e->rel_l2 = r[i].rel_l2;
                e->not_run = r[i].not_run;
                if (isnan(e->rel_l2) && e->not_run == NULL) e->not_run = "no distance stored";
            }
    }
    x->n = n_judged;
    x->j = diag_judge(x->e, x->n);
    for (size_t h = 0; h < x->n; h++) {
        if (x->j.within & ((uint64_t)1 << h))
            append(x->within, sizeof x->within, "%s%s", x->within[0] ? ", " : "",
                   x->e[h].hypothesis);
        if (x->j.not_run & ((uint64_t)1 << h))
            append(x->not_run, sizeof x->not_run, "%s%s (%s)", x->not_run[0] ? "; " : "",
                   x->e[h].hypothesis, x->e[h].not_run);
    }
    return PG_OK;
}

pg_status diag_spans(const diagnosis_row *rows, size_t n, diag_span **out, size_t *n_out,
                     pg_err *err)
{
    *out = NULL;
    *n_out = 0;
    if (n == 0) return PG_OK;
    if (rows == NULL) return pg_fail(err, PG_ERR_INTERNAL, "diag_spans: rows is NULL");
    diag_span *s = calloc(n, sizeof *s);  /* at most one span per row */
    layer_judged *x = malloc(sizeof *x);
    if (s == NULL || x == NULL) {
        free(s);
        free(x);
        return pg_fail(err, PG_ERR_NOMEM, "diagnosis: out of memory");
    }
    *out = s;
    pg_status st = PG_OK;
    for (size_t i = 0; st == PG_OK && i < n;) {
        size_t k = i + 1;
        while (k < n && rows[k].layer == rows[i].layer &&
               strcmp(rows[k].capture, rows[i].capture) == 0 &&
               strcmp(rows[k].ext_name, rows[i].ext_name) == 0)
            k++;
        st = judge_layer(rows + i, k - i, x, err);
        if (st != PG_OK) break;
        diag_span *last = *n_out > 0 ? &s[*n_out - 1] : NULL;
        int oom;
        if (last != NULL && continues(last, x, rows[i].capture, rows[i].ext_name, rows[i].layer)) {
            last->last_layer = rows[i].layer;
            oom = fold(last, x, 0);
        } else {
            diag_span *ns = &s[(*n_out)++];
            ns->capture = strdup(rows[i].capture);
            ns->ext_name = strdup(rows[i].ext_name);
            ns->first_layer = ns->last_layer = rows[i].layer;
            ns->verdict = x->j.verdict;
            oom = fold(ns, x, 1) || ns->capture == NULL || ns->ext_name == NULL;
        }
        if (oom) st = pg_fail(err, PG_ERR_NOMEM, "diagnosis: out of memory");
        i = k;
    }
    free(x);
    return st;
}

/* The meaning of hypothesis name (attn_hypothesis_meaning), "" when unknown. */
static const char *meaning_of(const char *name)
{
    const attn_hypothesis *h = name != NULL ? attn_hypothesis_find(name) : NULL;
    return h != NULL ? attn_hypothesis_meaning(h) : "";
}

void diag_span_message(const diag_span *s, char *buf, size_t len)
{
    char layers[48];
    diag_layers_text(s->first_layer, s->last_layer, layers, sizeof layers);
    snprintf(buf, len, "ext:%s, %s: ", s->ext_name, layers);
    switch (s->verdict) {
    case DIAG_BUG:
    case DIAG_INTENDED:
        append(buf, len, "matches %s (rel_l2 %.2g), not %s (%.2g): %s", s->hypothesis, s->d_max,
               s->other != NULL ? s->other : "?", s->d_other_min, meaning_of(s->hypothesis));
        break;
    case DIAG_INDISTINGUISHABLE:
        if (s->coincide)
            append(buf, len, "indistinguishable: %s all at rel_l2 %.2g; the hypotheses "
                   "coincide at these scales; record with calibrated scales to tell them "
                   "apart (not a bug verdict)", s->within, s->d_max);
        else
            append(buf, len, "indistinguishable: %s lie within %gx of the nearest, %s (rel_l2 "
                   "%.2g): no hypothesis is %gx nearer than the other side (not a bug "
                   "verdict)", s->within, DIAG_MARGIN, s->hypothesis, s->d_max, DIAG_MARGIN);
        break;
    case DIAG_UNEXPLAINED:
        append(buf, len, "unexplained: no hypothesis matches within rel_l2 %.2g; the nearest is "
               "%s (rel_l2 %.2g)", DIAG_MATCH_REL_L2, s->hypothesis, s->d_max);
        break;
    case DIAG_NO_EVIDENCE:
    default:
        append(buf, len, "no evidence: no hypothesis ran");
        break;
    }
    if (s->not_run != NULL) append(buf, len, "; not run: %s", s->not_run);
}
