/* diff.c: per-layer and end-task deltas between two runs or two modes (see diff.h). */
#include "diff.h"
#include "json_out.h"

#include <cjson/cJSON.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "db/divergence_store.h"
#include "db/report_store.h"
#include "term.h"

/* Table widths (columns of the terminal). */
#define DIFF_CAPTURE_WIDTH 32
/* Wide enough for the longest profile name with ~spec or /bf16 ("fp8qkv@flashinfer-fa3/bf16"). */
#define DIFF_VARIANT_WIDTH 26
#define DIFF_VALUE_WIDTH 13
#define DIFF_RATIO_WIDTH 9
#define DIFF_EVAL_WIDTH 20
#define DIFF_EFFORT_WIDTH 8
#define DIFF_ACC_WIDTH 8
#define DIFF_EVAL_DELTA_WIDTH 10
#define DIFF_CI_WIDTH 20
#define DIFF_LABEL_WIDTH 40
/* Size of a formatted cell's buffer (a fitted field may hold 4 bytes per code point). */
#define DIFF_CELL_MAX 256
/* Length of the list of metric names in a message. */
#define DIFF_METRIC_LIST_MAX 512
/* Characters of an ISO 8601 time shown: "YYYY-MM-DDTHH:MM:SS". */
#define DIFF_TIME_CHARS 19
/* Decibels per factor 10 of power. */
#define DIFF_DB_PER_DECADE 10.0
/* Initial capacity of a growing array. */
#define DIFF_INITIAL_CAP 16

/* The display formats of a value and of a signed difference, by what a
 * metric's numbers are (base/metric.h): an error, a cosine, decibels, a
 * count. A new metric of a known kind needs no entry here. */
const char *diff_metric_value_fmt(pg_metric m)
{
    if ((unsigned)m >= PG_METRIC_COUNT) return "%g";
    if (pg_metric_is_count(m)) return "%.0f";
    switch (pg_metric_kind_of(m)) {
    case PG_METRIC_KIND_COSINE: return "%.9f";
    case PG_METRIC_KIND_DB: return "%.3f";
    case PG_METRIC_KIND_ERROR: break;
    }
    return "%.4e";
}

const char *diff_metric_delta_fmt(pg_metric m)
{
    if ((unsigned)m >= PG_METRIC_COUNT) return "%+g";
    if (pg_metric_is_count(m)) return "%+.0f";
    return pg_metric_kind_of(m) == PG_METRIC_KIND_DB ? "%+.3f" : "%+.3e";
}

pg_status diff_metric_parse(const char *cmd, const char *name, pg_metric *out, pg_err *err)
{
    if (pg_metric_parse(cmd, name, PG_METRIC_COUNT, out, NULL) == PG_OK) return PG_OK;
    char list[DIFF_METRIC_LIST_MAX];
    pg_metric_list(list, sizeof list, PG_METRIC_COUNT);
    return pg_fail(err, PG_ERR_USAGE, "%s: --metric '%s' is not a metric (one of: %s)", cmd,
                   name != NULL ? name : "", list);
}

/* Grows *arr (elements of size bytes, *cap of them) to hold n + 1; 0 when out of memory. */
static int grow(void **arr, size_t *cap, size_t n, size_t size)
{
    if (n < *cap) return 1;
    const size_t ncap = *cap == 0 ? DIFF_INITIAL_CAP : *cap * 2;
    void *p = realloc(*arr, ncap * size);
    if (p == NULL) return 0;
    *arr = p;
    *cap = ncap;
    return 1;
}

/* src (NULL reads as "") copied into buf, cut to its len bytes. */
static void copy_field(char *buf, size_t len, const char *src)
{
    snprintf(buf, len, "%s", src != NULL ? src : "");
}

pg_status diff_run_read(pg_store *s, const char *cmd, const char *db_path, int64_t id,
                        diff_run *run, pg_err *err)
{
    memset(run, 0, sizeof *run);
    run_row row;
    int found = 0;
    pg_status rc = report_store_run(s, id, &row, &found, err);
    if (rc == PG_OK && !found)
        rc = pg_fail(err, PG_ERR_DB, "%s: no run %lld in %s", cmd, (long long)id,
                     db_path != NULL ? db_path : "the database");
    if (rc == PG_OK) {
        run->id = row.id;
        copy_field(run->kind, sizeof run->kind, row.kind);
        copy_field(run->status, sizeof run->status, row.status);
        copy_field(run->started_at, sizeof run->started_at, row.started_at);
        copy_field(run->git_rev, sizeof run->git_rev, row.git_rev);
        run->label = row.label;  /* the run takes it */
        row.label = NULL;
    }
    run_row_free(&row);
    return rc;
}

/* ---- reading one side ---- */

/* A side's rows: whole-layer rows ordered by capture, layer, variant,
 * backend, and eval_scores rows ordered by eval, effort, mode. The first n
 * (n_scores) are compared; all n_read (n_scores_read) are freed. */
typedef struct side {
    layer_metric_row *rows;
    size_t n, n_read;
    eval_score_stored *scores;
    size_t n_scores, n_scores_read;
} side;

static void side_free(side *sd)
{
    layer_metric_rows_free(sd->rows, sd->n_read);
    eval_store_scores_free(sd->scores, sd->n_scores_read);
    memset(sd, 0, sizeof *sd);
}

/* The value of metric m in row x (NaN where stored NULL; a count widened). */
static double metric_of(pg_metric m, const layer_metric_row *x)
{
    return pg_metric_value(&x->v, m);
}

/* Reads run's whole-layer rows (only variant, when not NULL) into sd. */
static pg_status read_layers(pg_store *s, int64_t run, const char *variant, pg_metric m,
                             side *sd, pg_err *err)
{
    if ((unsigned)m >= PG_METRIC_COUNT)
        return pg_fail(err, PG_ERR_INTERNAL, "diff: '%s' is no layer_metrics column",
                       pg_metric_name(m));
    const pg_status rc = report_store_whole_layers(s, run, variant, &sd->rows, &sd->n_read, err);
    sd->n = sd->n_read;
    return rc;
}

/* Reads run's eval_scores rows (only mode, when not NULL) into sd, ordered
 * by eval, effort, mode: the store's order, with the other modes' rows
 * moved behind the first sd->n_scores. */
static pg_status read_scores(pg_store *s, int64_t run, const char *mode, side *sd, pg_err *err)
{
    const pg_status rc = eval_store_read_scores(s, run, NULL, &sd->scores, &sd->n_scores_read, err);
    size_t kept = 0;
    for (size_t i = 0; i < sd->n_scores_read; i++) {
        if (mode != NULL && (sd->scores[i].mode == NULL || strcmp(sd->scores[i].mode, mode) != 0))
            continue;
        const eval_score_stored row = sd->scores[i];
        sd->scores[i] = sd->scores[kept];
        sd->scores[kept++] = row;
    }
    sd->n_scores = kept;
    return rc;
}

/* ---- matching ---- */

/* Which fields identify "the same layer" on both sides. */
typedef struct match_rule {
    int capture;  /* 0 when each run has one capture under different names */
    int variant;  /* two runs: the same variant */
    int backend;  /* two modes of one run: the same backend */
} match_rule;

/* Orders two rows by rule's key, in the SQL order's sense (strcmp is
 * SQLite's BINARY collation). */
static int key_cmp(const layer_metric_row *x, const layer_metric_row *y, const match_rule *rule)
{
    int c;
    if (rule->capture && (c = strcmp(x->capture, y->capture)) != 0) return c;
    if (x->layer != y->layer) return x->layer < y->layer ? -1 : 1;
    if (rule->variant && (c = strcmp(x->variant, y->variant)) != 0) return c;
    if (rule->backend && (c = strcmp(x->backend, y->backend)) != 0) return c;
    return 0;
}

/* Drops rows whose key equals the previous row's (the same layer stored for
 * a second backend; the first, 'cpu' < 'cuda', is kept) behind the first
 * sd->n, keeping the others' order; returns how many. */
static size_t dedupe(side *sd, const match_rule *rule)
{
    size_t out = 0;
    for (size_t i = 0; i < sd->n; i++) {
        if (out > 0 && key_cmp(&sd->rows[out - 1], &sd->rows[i], rule) == 0) continue;
        const layer_metric_row row = sd->rows[i];
        sd->rows[i] = sd->rows[out];
        sd->rows[out++] = row;
    }
    const size_t dropped = sd->n - out;
    sd->n = out;
    return dropped;
}

/* How many times larger B's error is than A's under metric m (diff.h). */
static double worsening(pg_metric m, double a, double b)
{
    if (isnan(a) || isnan(b)) return NAN;
    const pg_metric_kind kind = pg_metric_kind_of(m);
    if (kind == PG_METRIC_KIND_DB) {
        if (a == b) return 1.0;
        return pow(10.0, (a - b) / DIFF_DB_PER_DECADE);
    }
    double ea = a, eb = b;
    if (kind == PG_METRIC_KIND_COSINE) {
        ea = fmax(0.0, 1.0 - a);
        eb = fmax(0.0, 1.0 - b);
    }
    if (ea == eb) return 1.0;
    if (ea == 0.0) return INFINITY;
    return eb / ea;
}

/* The change a worsening factor means. */
static diff_change change_of(double w)
{
    if (isnan(w)) return DIFF_UNDEFINED;
    if (w > 1.0) return DIFF_WORSE;
    if (w < 1.0) return DIFF_BETTER;
    return DIFF_SAME;
}

/* strdup of s, NULL for NULL; sets *oom when an allocation fails. */
static char *dup_or_null(const char *s, int *oom)
{
    if (s == NULL) return NULL;
    char *d = strdup(s);
    if (d == NULL) *oom = 1;
    return d;
}

/* Appends the layer row for x (side A, may be NULL) and y (side B, may be
 * NULL) to r; 0 when out of memory. */
static int add_layer(diff_result *r, size_t *cap, const layer_metric_row *x,
                     const layer_metric_row *y)
{
    if (!grow((void **)&r->layers, cap, r->n_layers, sizeof r->layers[0])) return 0;
    diff_layer *l = &r->layers[r->n_layers++];
    memset(l, 0, sizeof *l);
    int oom = 0;
    const layer_metric_row *any = x != NULL ? x : y;
    l->capture = dup_or_null(any->capture, &oom);
    if (x != NULL && y != NULL && strcmp(x->capture, y->capture) != 0)
        l->capture_b = dup_or_null(y->capture, &oom);
    l->layer = any->layer;
    l->variant_a = dup_or_null(x != NULL ? x->variant : NULL, &oom);
    l->variant_b = dup_or_null(y != NULL ? y->variant : NULL, &oom);
    l->backend_a = dup_or_null(x != NULL ? x->backend : NULL, &oom);
    l->backend_b = dup_or_null(y != NULL ? y->backend : NULL, &oom);
    l->presence = x != NULL && y != NULL ? DIFF_BOTH : x != NULL ? DIFF_ONLY_A : DIFF_ONLY_B;
    l->a = x != NULL ? metric_of(r->metric, x) : NAN;
    l->b = y != NULL ? metric_of(r->metric, y) : NAN;
    l->delta = l->b - l->a;
    l->ratio = l->b / l->a;
    l->worsening = l->presence == DIFF_BOTH ? worsening(r->metric, l->a, l->b) : NAN;
    l->change = l->presence == DIFF_BOTH ? change_of(l->worsening) : DIFF_UNDEFINED;
    return !oom;
}

/* NULL-safe strcmp (NULL first). */
static int str_cmp(const char *x, const char *y)
{
    if (x == NULL || y == NULL) return (x != NULL) - (y != NULL);
    return strcmp(x, y);
}

/* Worst first: both sides before one side (A, then B); among both, worse,
 * undefined, same, better, each by worsening (largest first); then by name. */
static int layer_order(const void *p, const void *q)
{
    const diff_layer *x = p, *y = q;
    if (x->presence != y->presence) return (int)x->presence - (int)y->presence;
    if (x->presence == DIFF_BOTH) {
        if (x->change != y->change) return (int)x->change - (int)y->change;
        if (!isnan(x->worsening) && x->worsening != y->worsening)
            return x->worsening > y->worsening ? -1 : 1;
    }
    int c = strcmp(x->capture, y->capture);
    if (c != 0) return c;
    if (x->layer != y->layer) return x->layer < y->layer ? -1 : 1;
    if ((c = str_cmp(x->variant_b != NULL ? x->variant_b : x->variant_a,
                     y->variant_b != NULL ? y->variant_b : y->variant_a)) != 0)
        return c;
    return str_cmp(x->backend_b != NULL ? x->backend_b : x->backend_a,
                   y->backend_b != NULL ? y->backend_b : y->backend_a);
}

/* Distinct captures of a side (rows are sorted by capture): 0, 1 or 2 for "more". */
static int capture_count(const side *sd)
{
    int n = 0;
    for (size_t i = 0; i < sd->n && n < 2; i++)
        if (i == 0 || strcmp(sd->rows[i].capture, sd->rows[i - 1].capture) != 0) n++;
    return n;
}

/* Merges the two sides' layer rows into r->layers and sorts them. */
static pg_status match_layers(diff_result *r, side *a, side *b, pg_err *err)
{
    match_rule rule = {1, !r->modes, r->modes};
    if (!r->modes && capture_count(a) == 1 && capture_count(b) == 1 &&
        strcmp(a->rows[0].capture, b->rows[0].capture) != 0) {
        rule.capture = 0;
        r->captures_mapped = 1;
    }
    if (!r->modes) {
        r->dup_a = dedupe(a, &rule);
        r->dup_b = dedupe(b, &rule);
    }
    size_t i = 0, j = 0, cap = 0;
    while (i < a->n || j < b->n) {
        int c = i >= a->n ? 1 : j >= b->n ? -1 : key_cmp(&a->rows[i], &b->rows[j], &rule);
        const int ok = c < 0   ? add_layer(r, &cap, &a->rows[i++], NULL)
                       : c > 0 ? add_layer(r, &cap, NULL, &b->rows[j++])
                               : add_layer(r, &cap, &a->rows[i++], &b->rows[j++]);
        if (!ok) return pg_fail(err, PG_ERR_NOMEM, "diff: out of memory");
    }
    if (r->n_layers > 1) qsort(r->layers, r->n_layers, sizeof r->layers[0], layer_order);
    return PG_OK;
}

/* Orders eval rows: (eval, effort), then mode unless two modes are compared. */
static int score_cmp(const eval_score_stored *x, const eval_score_stored *y, int modes)
{
    int c = strcmp(x->eval, y->eval);
    if (c != 0) return c;
    if ((c = strcmp(x->effort, y->effort)) != 0) return c;
    return modes ? 0 : strcmp(x->mode, y->mode);
}

/* Appends the end-task row of x (A) and y (B), either may be NULL. */
static int add_eval(diff_result *r, size_t *cap, const eval_score_stored *x,
                    const eval_score_stored *y)
{
    if (!grow((void **)&r->evals, cap, r->n_evals, sizeof r->evals[0])) return 0;
    diff_eval *e = &r->evals[r->n_evals++];
    memset(e, 0, sizeof *e);
    int oom = 0;
    const eval_score_stored *any = x != NULL ? x : y;
    e->eval = dup_or_null(any->eval, &oom);
    e->effort = dup_or_null(any->effort, &oom);
    e->mode_a = dup_or_null(x != NULL ? x->mode : NULL, &oom);
    e->mode_b = dup_or_null(y != NULL ? y->mode : NULL, &oom);
    e->presence = x != NULL && y != NULL ? DIFF_BOTH : x != NULL ? DIFF_ONLY_A : DIFF_ONLY_B;
    e->acc_a = x != NULL ? x->accuracy : NAN;
    e->acc_b = y != NULL ? y->accuracy : NAN;
    e->se_a = x != NULL ? x->stderr_ : NAN;
    e->se_b = y != NULL ? y->stderr_ : NAN;
    e->n_a = x != NULL ? (long)x->n_problems : -1;
    e->n_b = y != NULL ? (long)y->n_problems : -1;
    e->delta = e->acc_b - e->acc_a;
    e->ci_low = e->ci_high = NAN;
    e->interval = DIFF_INTERVAL_NONE;
    if (!r->modes && e->presence == DIFF_BOTH && isfinite(e->delta) && isfinite(e->se_a) &&
        isfinite(e->se_b)) {
        const double half = DIFF_Z95 * sqrt(e->se_a * e->se_a + e->se_b * e->se_b);
        e->ci_low = e->delta - half;
        e->ci_high = e->delta + half;
        e->interval = DIFF_INTERVAL_INDEPENDENT;
    }
    return !oom;
}

/* Largest drop first among both-sided rows (undefined deltas after), then
 * rows only in A, only in B; then by eval, effort, mode. */
static int eval_order(const void *p, const void *q)
{
    const diff_eval *x = p, *y = q;
    if (x->presence != y->presence) return (int)x->presence - (int)y->presence;
    if (x->presence == DIFF_BOTH) {
        const int xn = isnan(x->delta), yn = isnan(y->delta);
        if (xn != yn) return xn - yn;
        if (!xn && x->delta != y->delta) return x->delta < y->delta ? -1 : 1;
    }
    int c = strcmp(x->eval, y->eval);
    if (c != 0) return c;
    if ((c = strcmp(x->effort, y->effort)) != 0) return c;
    return str_cmp(x->mode_b != NULL ? x->mode_b : x->mode_a,
                   y->mode_b != NULL ? y->mode_b : y->mode_a);
}

/* Merges the two sides' eval_scores rows into r->evals. */
static pg_status match_scores(diff_result *r, const side *a, const side *b, pg_err *err)
{
    size_t i = 0, j = 0, cap = 0;
    while (i < a->n_scores || j < b->n_scores) {
        int c = i >= a->n_scores   ? 1
                : j >= b->n_scores ? -1
                                   : score_cmp(&a->scores[i], &b->scores[j], r->modes);
        const int ok = c < 0   ? add_eval(r, &cap, &a->scores[i++], NULL)
                       : c > 0 ? add_eval(r, &cap, NULL, &b->scores[j++])
                               : add_eval(r, &cap, &a->scores[i++], &b->scores[j++]);
        if (!ok) return pg_fail(err, PG_ERR_NOMEM, "diff: out of memory");
    }
    return PG_OK;
}

/* Whether stored pair p compares the two modes of r (either orientation). */
static int pair_of_modes(const diff_result *r, const eval_pair_stored *p)
{
    if (p->mode_a == NULL || p->mode_b == NULL) return 0;
    return (strcmp(p->mode_a, r->mode_b) == 0 && strcmp(p->mode_b, r->mode_a) == 0) ||
           (strcmp(p->mode_a, r->mode_a) == 0 && strcmp(p->mode_b, r->mode_b) == 0);
}

/* Reads the stored eval_pairs rows of the two modes (either orientation),
 * ordered by eval, effort, mode_a, and gives each both-sided end-task row
 * its paired interval, as B - A. */
static pg_status read_pairs(pg_store *s, diff_result *r, pg_err *err)
{
    eval_pair_stored *all = NULL;
    size_t n_all = 0;
    pg_status rc = eval_store_read_pairs(s, r->run_a.id, NULL, &all, &n_all, err);
    if (rc == PG_OK && n_all > 0 && (r->pairs = calloc(n_all, sizeof *r->pairs)) == NULL)
        rc = pg_fail(err, PG_ERR_NOMEM, "diff: out of memory");
    /* The rows r takes are moved out; the rest are freed with the array. */
    for (size_t i = 0; rc == PG_OK && i < n_all; i++) {
        if (!pair_of_modes(r, &all[i])) continue;
        r->pairs[r->n_pairs++] = all[i];
        memset(&all[i], 0, sizeof all[i]);
    }
    eval_store_pairs_free(all, n_all);
    for (size_t i = 0; rc == PG_OK && i < r->n_evals; i++) {
        diff_eval *e = &r->evals[i];
        if (e->presence != DIFF_BOTH) continue;
        for (size_t k = 0; k < r->n_pairs; k++) {
            const eval_pair_stored *p = &r->pairs[k];
            if (strcmp(p->eval, e->eval) != 0 || strcmp(p->effort, e->effort) != 0) continue;
            /* Stored as mode_a - mode_b; B - A is that when mode_a is B's mode. */
            const int as_b_minus_a = strcmp(p->mode_a, r->mode_b) == 0;
            const double lo = as_b_minus_a ? p->ci_low : -p->ci_high;
            const double hi = as_b_minus_a ? p->ci_high : -p->ci_low;
            if (isfinite(lo) && isfinite(hi)) {
                e->ci_low = lo;
                e->ci_high = hi;
                e->interval = DIFF_INTERVAL_PAIRED;
            }
            break;
        }
    }
    return rc;
}

/* Sets r->divergence when both runs are diverge runs; PG_ERR_USAGE naming
 * both kinds when only one is, and for a modes diff of a diverge run. */
static pg_status check_kinds(diff_result *r, pg_err *err)
{
    const int da = strcmp(r->run_a.kind, DIV_RUN_KIND) == 0;
    const int db = strcmp(r->run_b.kind, DIV_RUN_KIND) == 0;
    if (da != db)
        return pg_fail(err, PG_ERR_USAGE, "diff: run %lld is of kind %s and run %lld of kind %s: a "
                       DIV_RUN_KIND " run is compared only with another " DIV_RUN_KIND " run",
                       (long long)r->run_a.id, r->run_a.kind, (long long)r->run_b.id,
                       r->run_b.kind);
    if (da && r->modes)
        return pg_fail(err, PG_ERR_USAGE, "diff: --modes compares two modes of a sweep or eval "
                       "run; run %lld is a " DIV_RUN_KIND " run, whose modes are each against its "
                       "reference (precgate report --run %lld, or diff it with another "
                       DIV_RUN_KIND " run)", (long long)r->run_a.id, (long long)r->run_a.id);
    r->divergence = da;
    return PG_OK;
}

pg_status diff_compute(pg_store *s, const diff_request *req, diff_result **out, pg_err *err)
{
    *out = NULL;
    if (req == NULL || (unsigned)req->metric >= PG_METRIC_COUNT || (req->mode_a == NULL) != (req->mode_b == NULL))
        return pg_fail(err, PG_ERR_INTERNAL, "diff_compute: malformed request");
    diff_result *r = calloc(1, sizeof *r);
    if (r == NULL) return pg_fail(err, PG_ERR_NOMEM, "diff: out of memory");
    r->metric = req->metric;
    r->modes = req->mode_a != NULL;
    side a = {0}, b = {0};
    pg_status rc = PG_OK;
    if (r->modes && ((r->mode_a = strdup(req->mode_a)) == NULL ||
                     (r->mode_b = strdup(req->mode_b)) == NULL ||
                     (r->variant_a = strdup(req->variant_a != NULL ? req->variant_a
                                                                   : req->mode_a)) == NULL ||
                     (r->variant_b = strdup(req->variant_b != NULL ? req->variant_b
                                                                   : req->mode_b)) == NULL))
        rc = pg_fail(err, PG_ERR_NOMEM, "diff: out of memory");
    if (rc == PG_OK) rc = diff_run_read(s, "diff", req->db_path, req->run_a, &r->run_a, err);
    if (rc == PG_OK) rc = diff_run_read(s, "diff", req->db_path, req->run_b, &r->run_b, err);
    if (rc == PG_OK) rc = check_kinds(r, err);
    if (rc == PG_OK) rc = read_layers(s, req->run_a, r->variant_a, req->metric, &a, err);
    if (rc == PG_OK) rc = read_layers(s, req->run_b, r->variant_b, req->metric, &b, err);
    if (rc == PG_OK) rc = read_scores(s, req->run_a, req->mode_a, &a, err);
    if (rc == PG_OK) rc = read_scores(s, req->run_b, req->mode_b, &b, err);
    if (rc == PG_OK) rc = match_layers(r, &a, &b, err);
    if (rc == PG_OK) rc = match_scores(r, &a, &b, err);
    if (rc == PG_OK && r->modes) rc = read_pairs(s, r, err);
    if (rc == PG_OK) rc = diff_attribution_match(s, req, r, err);
    if (rc == PG_OK && r->divergence) rc = diff_divergence_match(s, r, err);
    if (rc == PG_OK && r->n_evals > 1) qsort(r->evals, r->n_evals, sizeof r->evals[0], eval_order);
    side_free(&a);
    side_free(&b);
    if (rc != PG_OK) {
        diff_result_free(r);
        return rc;
    }
    *out = r;
    return PG_OK;
}

void diff_result_free(diff_result *r)
{
    if (r == NULL) return;
    for (size_t i = 0; i < r->n_layers; i++) {
        diff_layer *l = &r->layers[i];
        free(l->capture);
        free(l->capture_b);
        free(l->variant_a);
        free(l->variant_b);
        free(l->backend_a);
        free(l->backend_b);
    }
    for (size_t i = 0; i < r->n_evals; i++) {
        free(r->evals[i].eval);
        free(r->evals[i].effort);
        free(r->evals[i].mode_a);
        free(r->evals[i].mode_b);
    }
    eval_store_pairs_free(r->pairs, r->n_pairs);
    diff_attribution_free(r);
    diff_divergence_free(r);
    free(r->layers);
    free(r->evals);
    free(r->run_a.label);
    free(r->run_b.label);
    free(r->mode_a);
    free(r->mode_b);
    free(r->variant_a);
    free(r->variant_b);
    free(r);
}

/* ---- terminal ---- */

/* Formats v with fmt into buf; "nan" for any NaN (glibc would print "-nan"). */
static void fmt_num(char *buf, size_t len, const char *fmt, double v)
{
    if (isnan(v)) snprintf(buf, len, "nan");
    else snprintf(buf, len, fmt, v);
}

/* The run's start as "YYYY-MM-DD HH:MM:SS" (the stored text when shorter). */
static void fmt_time(char *buf, size_t len, const char *iso)
{
    snprintf(buf, len, "%.*s", DIFF_TIME_CHARS, iso);
    char *t = strchr(buf, 'T');
    if (t != NULL) *t = ' ';
}

/* One line describing side A or B. */
static void print_run(FILE *out, const char *side_name, const diff_run *run, const char *mode,
                      int is_base)
{
    char when[DIFF_RUN_FIELD_MAX], label[DIFF_CELL_MAX];
    fmt_time(when, sizeof when, run->started_at);
    term_fit(label, sizeof label, run->label, DIFF_LABEL_WIDTH, 0);
    fprintf(out, "%s: run %lld", side_name, (long long)run->id);
    if (mode != NULL) {
        char m[DIFF_CELL_MAX];
        term_fit(m, sizeof m, mode, DIFF_VARIANT_WIDTH, 0);
        fprintf(out, " mode %s%s", m, is_base ? " (base)" : "");
    }
    char kind[DIFF_CELL_MAX], status[DIFF_CELL_MAX], git[DIFF_CELL_MAX], at[DIFF_CELL_MAX];
    term_fit(kind, sizeof kind, run->kind, 0, 0); /* stored text: escaped */
    term_fit(status, sizeof status, run->status, 0, 0);
    term_fit(git, sizeof git, run->git_rev[0] != '\0' ? run->git_rev : "-", 0, 0);
    term_fit(at, sizeof at, when, 0, 0);
    fprintf(out, "  %s %s  started %s UTC  git %s  label %s\n", kind, status, at, git, label);
    if (strcmp(run->status, "complete") != 0)
        fprintf(out, "   note: run %lld is %s; only what it stored is compared\n",
                (long long)run->id, run->status);
}

/* The variant cell of a layer row: the variant, or "B/A" for two modes. */
static void variant_cell(char *buf, size_t len, const diff_result *r, const diff_layer *l)
{
    char raw[DIFF_CELL_MAX];
    if (r->modes) snprintf(raw, sizeof raw, "%s/%s", r->variant_b, r->variant_a);
    else snprintf(raw, sizeof raw, "%s", l->variant_a != NULL ? l->variant_a : l->variant_b);
    term_fit(buf, len, raw, DIFF_VARIANT_WIDTH, 0);
}

/* The colour of a change (NULL when colour is off or for none). */
static const char *change_colour(int colour, diff_change c)
{
    if (!colour) return NULL;
    return c == DIFF_WORSE ? TERM_RED : c == DIFF_BETTER ? TERM_GREEN : NULL;
}

/* The layer table, its summary and notes. */
static void print_layers(const diff_result *r, FILE *out, int colour)
{
    const pg_metric m = r->metric;
    const pg_metric_kind kind = pg_metric_kind_of(m);
    if (r->n_layers == 0) {
        if (r->modes)
            fprintf(out, "\nno %s layer metrics for %s or %s in run %lld\n", pg_metric_name(m),
                    r->variant_b, r->variant_a, (long long)r->run_a.id);
        else
            fprintf(out, "\nno layer metrics in run %lld or run %lld\n", (long long)r->run_a.id,
                    (long long)r->run_b.id);
        return;
    }
    const char *order = kind == PG_METRIC_KIND_COSINE ? "(1 - cos B) / (1 - cos A)"
                        : kind == PG_METRIC_KIND_DB    ? "the drop in dB"
                                                       : "B/A";
    fprintf(out, "\n%s per layer (whole layer), worst first by %s:\n", pg_metric_name(m), order);
    if (r->captures_mapped) {
        char ca[DIFF_CELL_MAX], cb[DIFF_CELL_MAX];
        const diff_layer *l = &r->layers[0];
        for (size_t i = 0; i < r->n_layers; i++)
            if (r->layers[i].capture_b != NULL) l = &r->layers[i];
        term_fit(ca, sizeof ca, l->capture, 0, 0);
        term_fit(cb, sizeof cb, l->capture_b != NULL ? l->capture_b : l->capture, 0, 0);
        fprintf(out, "note: each run has one capture, under different names (A: %s, B: %s); "
                     "layers are matched by number\n", ca, cb);
    }
    term_cell(out, NULL, -DIFF_CAPTURE_WIDTH, "capture");
    fprintf(out, " %5s ", "layer");
    term_cell(out, NULL, -DIFF_VARIANT_WIDTH, "variant");
    term_cell(out, NULL, DIFF_VALUE_WIDTH, "A");
    term_cell(out, NULL, DIFF_VALUE_WIDTH, "B");
    term_cell(out, NULL, DIFF_VALUE_WIDTH, "B-A");
    term_cell(out, NULL, DIFF_RATIO_WIDTH, "B/A");
    fputc('\n', out);
    size_t n_change[DIFF_BETTER + 1] = {0}, only_a = 0, only_b = 0;
    for (size_t i = 0; i < r->n_layers; i++) {
        const diff_layer *l = &r->layers[i];
        char cap[DIFF_CELL_MAX], var[DIFF_CELL_MAX], a[DIFF_CELL_MAX], b[DIFF_CELL_MAX],
            d[DIFF_CELL_MAX], q[DIFF_CELL_MAX];
        term_fit(cap, sizeof cap, l->capture, DIFF_CAPTURE_WIDTH, 1);
        variant_cell(var, sizeof var, r, l);
        snprintf(a, sizeof a, "-");
        snprintf(b, sizeof b, "-");
        snprintf(q, sizeof q, "-");
        if (l->presence != DIFF_ONLY_B) fmt_num(a, sizeof a, diff_metric_value_fmt(m), l->a);
        if (l->presence != DIFF_ONLY_A) fmt_num(b, sizeof b, diff_metric_value_fmt(m), l->b);
        if (l->presence == DIFF_BOTH) {
            fmt_num(d, sizeof d, diff_metric_delta_fmt(m), l->delta);
            fmt_num(q, sizeof q, "%.4g", l->ratio);
            n_change[l->change]++;
        } else {
            snprintf(d, sizeof d, "only in %c", l->presence == DIFF_ONLY_A ? 'A' : 'B');
            if (l->presence == DIFF_ONLY_A) only_a++;
            else only_b++;
        }
        const char *c = l->presence == DIFF_BOTH ? change_colour(colour, l->change) : NULL;
        term_cell(out, NULL, -DIFF_CAPTURE_WIDTH, cap);
        fprintf(out, " %5d ", l->layer);
        term_cell(out, NULL, -DIFF_VARIANT_WIDTH, var);
        term_cell(out, NULL, DIFF_VALUE_WIDTH, a);
        term_cell(out, NULL, DIFF_VALUE_WIDTH, b);
        term_cell(out, c, DIFF_VALUE_WIDTH, d);
        term_cell(out, c, DIFF_RATIO_WIDTH, q);
        fputc('\n', out);
    }
    fprintf(out,
            "%zu layers compared: %zu worse, %zu better, %zu unchanged, %zu undefined; "
            "%zu only in A, %zu only in B\n",
            n_change[DIFF_WORSE] + n_change[DIFF_BETTER] + n_change[DIFF_SAME] +
                n_change[DIFF_UNDEFINED],
            n_change[DIFF_WORSE], n_change[DIFF_BETTER], n_change[DIFF_SAME],
            n_change[DIFF_UNDEFINED], only_a, only_b);
    if (r->dup_a + r->dup_b > 0)
        fprintf(out, "note: %zu rows of A and %zu of B repeat a layer for a second backend; "
                     "the cpu rows are compared\n", r->dup_a, r->dup_b);
}

/* The end-task rows and, for two modes, the stored pairs. */
static void print_evals(const diff_result *r, FILE *out, int colour)
{
    if (r->n_evals == 0 && r->n_pairs == 0) return;
    if (r->modes)
        fprintf(out, "\nend-task accuracy (eval_scores), B-A = %s - %s in run %lld; 95%% interval: "
                     "the stored paired one (eval_pairs, same problems)\n",
                r->mode_b, r->mode_a, (long long)r->run_a.id);
    else
        fprintf(out, "\nend-task accuracy (eval_scores); 95%% interval of B-A: "
                     "(B-A) +/- %.2f*sqrt(seA^2 + seB^2), which assumes the two runs are "
                     "independent\n", DIFF_Z95);
    term_cell(out, NULL, -DIFF_EVAL_WIDTH, "eval");
    fputc(' ', out);
    term_cell(out, NULL, -DIFF_EFFORT_WIDTH, "effort");
    fputc(' ', out);
    term_cell(out, NULL, -DIFF_VARIANT_WIDTH, "mode");
    term_cell(out, NULL, DIFF_ACC_WIDTH, "A");
    term_cell(out, NULL, DIFF_ACC_WIDTH, "B");
    term_cell(out, NULL, DIFF_EVAL_DELTA_WIDTH, "B-A");
    fputs("  ", out);
    term_cell(out, NULL, -DIFF_CI_WIDTH, "95% interval");
    fputs(" problems A/B\n", out);
    for (size_t i = 0; i < r->n_evals; i++) {
        const diff_eval *e = &r->evals[i];
        char ev[DIFF_CELL_MAX], ef[DIFF_CELL_MAX], mo[DIFF_CELL_MAX], raw[DIFF_CELL_MAX],
            a[DIFF_CELL_MAX], b[DIFF_CELL_MAX], d[DIFF_CELL_MAX], ci[DIFF_CELL_MAX];
        term_fit(ev, sizeof ev, e->eval, DIFF_EVAL_WIDTH, 0);
        term_fit(ef, sizeof ef, e->effort, DIFF_EFFORT_WIDTH, 0);
        if (r->modes) snprintf(raw, sizeof raw, "%s-%s", r->mode_b, r->mode_a);
        else snprintf(raw, sizeof raw, "%s", e->mode_a != NULL ? e->mode_a : e->mode_b);
        term_fit(mo, sizeof mo, raw, DIFF_VARIANT_WIDTH, 0);
        snprintf(a, sizeof a, "-");
        snprintf(b, sizeof b, "-");
        snprintf(ci, sizeof ci, "-");
        if (e->presence != DIFF_ONLY_B) fmt_num(a, sizeof a, "%.4f", e->acc_a);
        if (e->presence != DIFF_ONLY_A) fmt_num(b, sizeof b, "%.4f", e->acc_b);
        const char *c = NULL;
        if (e->presence == DIFF_BOTH) {
            fmt_num(d, sizeof d, "%+.4f", e->delta);
            if (e->interval != DIFF_INTERVAL_NONE) {
                snprintf(ci, sizeof ci, "[%+.4f, %+.4f]", e->ci_low, e->ci_high);
                /* Colour only a change the interval says is real. */
                if (colour && e->ci_high < 0) c = TERM_RED;
                else if (colour && e->ci_low > 0) c = TERM_GREEN;
            }
        } else {
            snprintf(d, sizeof d, "only in %c", e->presence == DIFF_ONLY_A ? 'A' : 'B');
        }
        term_cell(out, NULL, -DIFF_EVAL_WIDTH, ev);
        fputc(' ', out);
        term_cell(out, NULL, -DIFF_EFFORT_WIDTH, ef);
        fputc(' ', out);
        term_cell(out, NULL, -DIFF_VARIANT_WIDTH, mo);
        term_cell(out, NULL, DIFF_ACC_WIDTH, a);
        term_cell(out, NULL, DIFF_ACC_WIDTH, b);
        term_cell(out, c, DIFF_EVAL_DELTA_WIDTH, d);
        fputs("  ", out);
        term_cell(out, c, -DIFF_CI_WIDTH, ci);
        char na[DIFF_CELL_MAX], nb[DIFF_CELL_MAX];
        snprintf(na, sizeof na, e->n_a >= 0 ? "%ld" : "-", e->n_a);
        snprintf(nb, sizeof nb, e->n_b >= 0 ? "%ld" : "-", e->n_b);
        fprintf(out, " %s/%s\n", na, nb);
    }
    if (!r->modes) return;
    if (r->n_pairs == 0) {
        fprintf(out, "no eval_pairs row for %s and %s in run %lld: no interval\n", r->mode_b,
                r->mode_a, (long long)r->run_a.id);
        return;
    }
    fprintf(out, "stored eval_pairs rows (mode_a - mode_b over the same problems: mean, SE, "
                 "95%% bootstrap CI, wins/losses/ties of mode_a, exact sign test, smallest "
                 "detectable drop at 80%% power):\n");
    for (size_t i = 0; i < r->n_pairs; i++) {
        const eval_pair_stored *p = &r->pairs[i];
        char ev[DIFF_CELL_MAX], ef[DIFF_CELL_MAX], ma[DIFF_CELL_MAX], mb[DIFF_CELL_MAX],
            mean[DIFF_CELL_MAX], se[DIFF_CELL_MAX], lo[DIFF_CELL_MAX], hi[DIFF_CELL_MAX],
            sp[DIFF_CELL_MAX], mde[DIFF_CELL_MAX];
        term_fit(ev, sizeof ev, p->eval, DIFF_EVAL_WIDTH, 0);
        term_fit(ef, sizeof ef, p->effort, DIFF_EFFORT_WIDTH, 0);
        term_fit(ma, sizeof ma, p->mode_a, DIFF_VARIANT_WIDTH, 0);
        term_fit(mb, sizeof mb, p->mode_b, DIFF_VARIANT_WIDTH, 0);
        if (p->n_problems == 0) {  /* nothing to pair: no NaN and no sign p of 1 */
            fprintf(out, "  %s %s %s - %s: no pairs (no problem scored in both modes)\n", ev, ef,
                    ma, mb);
            continue;
        }
        fmt_num(mean, sizeof mean, "%+.4f", p->mean_diff);
        fmt_num(se, sizeof se, "%.4f", p->stderr_);
        fmt_num(lo, sizeof lo, "%+.4f", p->ci_low);
        fmt_num(hi, sizeof hi, "%+.4f", p->ci_high);
        fmt_num(sp, sizeof sp, "%.4g", p->sign_p);
        fmt_num(mde, sizeof mde, "%.4f", p->mde);
        fprintf(out, "  %s %s %s - %s: %s  SE %s  [%s, %s]  %" PRId64 "/%" PRId64 "/%" PRId64
                     "  p %s  MDE %s  (%" PRId64 " problems)\n",
                ev, ef, ma, mb, mean, se, lo, hi, p->wins, p->losses, p->ties, sp, mde,
                p->n_problems);
    }
}

void diff_print_table(const diff_result *r, FILE *out, int colour)
{
    fprintf(out, "diff %s: A is the baseline, B the candidate\n",
            r->divergence ? "divergence" : pg_metric_name(r->metric));
    print_run(out, "A", &r->run_a, r->mode_a, 1);
    print_run(out, "B", &r->run_b, r->mode_b, 0);
    if (!r->divergence) print_layers(r, out, colour);  /* a diverge run has no layers */
    diff_attribution_print(r, out);
    print_evals(r, out, colour);
    diff_divergence_print(r, out);
}

/* ---- JSON ---- */

const char *diff_presence_name(diff_presence p)
{
    return p == DIFF_BOTH ? "both" : p == DIFF_ONLY_A ? "only_a" : "only_b";
}

static const char *change_name(diff_change c)
{
    switch (c) {
    case DIFF_WORSE: return "worse";
    case DIFF_BETTER: return "better";
    case DIFF_SAME: return "same";
    case DIFF_UNDEFINED: break;
    }
    return "undefined";
}

static const char *interval_name(diff_interval i)
{
    return i == DIFF_INTERVAL_INDEPENDENT ? "independent"
           : i == DIFF_INTERVAL_PAIRED    ? "paired"
                                          : "none";
}

/* o when ok, else NULL with o freed (a row object whose fields did not all fit). */
static cJSON *json_row_done(cJSON *o, int ok)
{
    if (ok) return o;
    cJSON_Delete(o);
    return NULL;
}

/* The JSON object of a layer row; NULL when out of memory. */
static cJSON *layer_json(const diff_result *r, const diff_layer *l)
{
    cJSON *o = report_json_row("layer", r->run_a.id, r->run_b.id);
    const int both = l->presence == DIFF_BOTH;
    int ok = o != NULL &&
             report_json_string(o, "metric", pg_metric_name(r->metric)) && report_json_string(o, "capture", l->capture);
    if (ok && l->capture_b != NULL) ok = report_json_string(o, "capture_b", l->capture_b);
    ok = ok && cJSON_AddNumberToObject(o, "layer", l->layer) != NULL &&
         report_json_string(o, "variant_a", r->modes ? r->variant_a : l->variant_a) &&
         report_json_string(o, "variant_b", r->modes ? r->variant_b : l->variant_b) &&
         report_json_string(o, "backend_a", l->backend_a) && report_json_string(o, "backend_b", l->backend_b) &&
         report_json_string(o, "presence", diff_presence_name(l->presence)) &&
         report_json_side_number(o, "a", l->a, l->presence != DIFF_ONLY_B) &&
         report_json_side_number(o, "b", l->b, l->presence != DIFF_ONLY_A) &&
         report_json_side_number(o, "delta", l->delta, both) && report_json_side_number(o, "ratio", l->ratio, both) &&
         report_json_side_number(o, "worsening", l->worsening, both) &&
         report_json_string(o, "change", both ? change_name(l->change) : NULL);
    return json_row_done(o, ok);
}

/* The JSON object of an end-task row; NULL when out of memory. */
static cJSON *eval_json(const diff_result *r, const diff_eval *e)
{
    cJSON *o = report_json_row("eval", r->run_a.id, r->run_b.id);
    const int has_a = e->presence != DIFF_ONLY_B, has_b = e->presence != DIFF_ONLY_A;
    const int iv = e->interval != DIFF_INTERVAL_NONE;
    int ok = o != NULL && report_json_string(o, "eval", e->eval) && report_json_string(o, "effort", e->effort) &&
             report_json_string(o, "mode_a", r->modes ? r->mode_a : e->mode_a) &&
             report_json_string(o, "mode_b", r->modes ? r->mode_b : e->mode_b) &&
             report_json_string(o, "presence", diff_presence_name(e->presence)) &&
             report_json_side_number(o, "accuracy_a", e->acc_a, has_a) &&
             report_json_side_number(o, "accuracy_b", e->acc_b, has_b) &&
             report_json_side_number(o, "stderr_a", e->se_a, has_a) &&
             report_json_side_number(o, "stderr_b", e->se_b, has_b) &&
             report_json_side_number(o, "n_problems_a", (double)e->n_a, has_a) &&
             report_json_side_number(o, "n_problems_b", (double)e->n_b, has_b) &&
             report_json_side_number(o, "delta", e->delta, has_a && has_b) &&
             report_json_side_number(o, "ci_low", e->ci_low, iv) &&
             report_json_side_number(o, "ci_high", e->ci_high, iv) &&
             report_json_string(o, "interval", interval_name(e->interval));
    return json_row_done(o, ok);
}

/* The JSON object of a stored pair; NULL when out of memory. */
static cJSON *pair_json(const diff_result *r, const eval_pair_stored *p)
{
    cJSON *o = cJSON_CreateObject();
    int ok = o != NULL && report_json_string(o, "type", "eval_pair") &&
             cJSON_AddNumberToObject(o, "run", (double)r->run_a.id) != NULL &&
             report_json_string(o, "eval", p->eval) && report_json_string(o, "effort", p->effort) &&
             report_json_string(o, "mode_a", p->mode_a) && report_json_string(o, "mode_b", p->mode_b) &&
             cJSON_AddNumberToObject(o, "n_problems", (double)p->n_problems) != NULL &&
             report_json_number(o, "mean_diff", p->mean_diff) &&
             report_json_number(o, "stderr", p->stderr_) &&
             report_json_number(o, "ci_low", p->ci_low) &&
             report_json_number(o, "ci_high", p->ci_high) &&
             cJSON_AddNumberToObject(o, "wins", (double)p->wins) != NULL &&
             cJSON_AddNumberToObject(o, "losses", (double)p->losses) != NULL &&
             cJSON_AddNumberToObject(o, "ties", (double)p->ties) != NULL &&
             report_json_number(o, "sign_p", p->sign_p) && report_json_number(o, "mde", p->mde);
    return json_row_done(o, ok);
}

/* Appends o (may be NULL: out of memory) to arr; 0 on failure, o then freed. */
static int add_item(cJSON *arr, cJSON *o)
{
    if (o == NULL) return 0;
    if (cJSON_AddItemToArray(arr, o)) return 1;
    cJSON_Delete(o);
    return 0;
}

pg_status diff_print_json(const diff_result *r, FILE *out, pg_err *err)
{
    cJSON *arr = cJSON_CreateArray();
    int ok = arr != NULL;
    for (size_t i = 0; ok && i < r->n_layers; i++) {
        ok = add_item(arr, layer_json(r, &r->layers[i]));
    }
    if (ok) ok = diff_attribution_json(r, arr);
    for (size_t i = 0; ok && i < r->n_evals; i++) {
        ok = add_item(arr, eval_json(r, &r->evals[i]));
    }
    for (size_t i = 0; ok && i < r->n_pairs; i++) {
        ok = add_item(arr, pair_json(r, &r->pairs[i]));
    }
    if (ok) ok = diff_divergence_json(r, arr);
    char *text = ok ? cJSON_Print(arr) : NULL;
    cJSON_Delete(arr);
    if (text == NULL) return pg_fail(err, PG_ERR_NOMEM, "diff: out of memory building JSON");
    fputs(text, out);
    fputc('\n', out);
    free(text);
    return PG_OK;
}
