/* report_data.c: a run's numbers from SQLite into structs (see report_data.h). */
#include "report_data.h"

#include "../db/diagnosis_store.h"
#include "../harness/diag_verdict.h"
#include "base/variant.h"
#include "../kernels/attn_hypothesis.h"

#include <math.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* First capacity of a growing array. */
#define GROW_FIRST 16

/* Chart colours: each mode's default profile (and an eval mode) fixed,
 * anything else from the palette. */
#define COLOUR_BF16 "#1f77b4"
#define COLOUR_FP8KV "#ff7f0e"
#define COLOUR_FP8QKV "#d62728"
static const char *const PALETTE[] = {"#2ca02c", "#9467bd", "#8c564b", "#e377c2",
                                      "#7f7f7f", "#bcbd22", "#17becf", "#393b79"};
#define PALETTE_N (sizeof PALETTE / sizeof PALETTE[0])
/* FNV-1a, for picking a palette colour from a name. */
#define FNV_OFFSET 2166136261u
#define FNV_PRIME 16777619u

/* ---- small helpers -------------------------------------------------------- */

/* Orders two variant or eval mode names: the profiles in the table's order
 * (an eval mode as its default profile), then others by name, NULL last. */
static int mode_cmp(const char *x, const char *y)
{
    if (x == NULL || y == NULL) return (x == NULL) - (y == NULL);
    return variant_name_cmp(x, y);
}

/* qsort comparator over char* names in mode order. */
static int name_ptr_cmp(const void *a, const void *b)
{
    return mode_cmp(*(const char *const *)a, *(const char *const *)b);
}

/* Order of a reasoning effort: low, medium, high, then others. */
static int effort_rank(const char *e)
{
    if (e == NULL) return 3;
    if (strcmp(e, "low") == 0) return 0;
    if (strcmp(e, "medium") == 0) return 1;
    if (strcmp(e, "high") == 0) return 2;
    return 3;
}

/* strcmp that orders NULL first. */
static int str_cmp_null(const char *x, const char *y)
{
    if (x == NULL || y == NULL) return (x != NULL) - (y != NULL);
    return strcmp(x, y);
}

/* Orders eval_scores rows by eval, effort, mode. */
static int score_cmp(const void *a, const void *b)
{
    const report_score *x = a, *y = b;
    int c = str_cmp_null(x->eval, y->eval);
    if (c != 0) return c;
    c = effort_rank(x->effort) - effort_rank(y->effort);
    if (c != 0) return c;
    c = str_cmp_null(x->effort, y->effort);
    return c != 0 ? c : mode_cmp(x->mode, y->mode);
}

/* Orders eval_pairs rows by eval, effort, mode_a. */
static int pair_cmp(const void *a, const void *b)
{
    const report_pair *x = a, *y = b;
    int c = str_cmp_null(x->eval, y->eval);
    if (c != 0) return c;
    c = effort_rank(x->effort) - effort_rank(y->effort);
    if (c != 0) return c;
    c = str_cmp_null(x->effort, y->effort);
    if (c != 0) return c;
    c = mode_cmp(x->mode_a, y->mode_a);
    return c != 0 ? c : mode_cmp(x->mode_b, y->mode_b);
}

/* Orders layers by capture, then layer index. */
static int layer_cmp(const void *a, const void *b)
{
    const report_layer *x = a, *y = b;
    const int c = strcmp(x->capture, y->capture);
    return c != 0 ? c : (x->layer > y->layer) - (x->layer < y->layer);
}

/* Makes room for need elements of size elem in *p (capacity *cap); PG_ERR_NOMEM. */
static pg_status grow(void **p, size_t *cap, size_t need, size_t elem, pg_err *err)
{
    if (need <= *cap) return PG_OK;
    size_t n = *cap > 0 ? *cap : GROW_FIRST;
    while (n < need) n *= 2;
    void *q = realloc(*p, n * elem);
    if (q == NULL) return pg_fail(err, PG_ERR_NOMEM, "report: out of memory");
    memset((char *)q + *cap * elem, 0, (n - *cap) * elem);
    *p = q;
    *cap = n;
    return PG_OK;
}

/* Zeroed array of n elements of size elem (n may be 0: then NULL); PG_ERR_NOMEM. */
static pg_status alloc_zero(void **p, size_t n, size_t elem, pg_err *err)
{
    *p = NULL;
    if (n == 0) return PG_OK;
    *p = calloc(n, elem);
    return *p != NULL ? PG_OK : pg_fail(err, PG_ERR_NOMEM, "report: out of memory");
}

/* A copy of s (NULL stays NULL) into *out; PG_ERR_NOMEM. */
static pg_status dup_str(const char *s, char **out, pg_err *err)
{
    *out = NULL;
    if (s == NULL) return PG_OK;
    *out = strdup(s);
    return *out != NULL ? PG_OK : pg_fail(err, PG_ERR_NOMEM, "report: out of memory");
}

/* Column i as a malloc'd string, NULL for SQL NULL; PG_ERR_NOMEM. */
static pg_status col_text(sqlite3_stmt *st, int i, char **out, pg_err *err)
{
    *out = NULL;
    if (sqlite3_column_type(st, i) == SQLITE_NULL) return PG_OK;
    const unsigned char *t = sqlite3_column_text(st, i);
    if (t == NULL) return pg_fail(err, PG_ERR_NOMEM, "report: out of memory");
    return dup_str((const char *)t, out, err);
}

/* Column i as a double, NaN for SQL NULL. */
static double col_real(sqlite3_stmt *st, int i)
{
    return sqlite3_column_type(st, i) == SQLITE_NULL ? NAN : sqlite3_column_double(st, i);
}

/* Column i as an integer, dflt for SQL NULL. */
static int64_t col_int(sqlite3_stmt *st, int i, int64_t dflt)
{
    return sqlite3_column_type(st, i) == SQLITE_NULL ? dflt : sqlite3_column_int64(st, i);
}

/* Prepares sql; PG_ERR_DB naming db_name and what on failure. */
static pg_status prep(sqlite3 *db, const char *db_name, const char *what, const char *sql,
                      sqlite3_stmt **st, pg_err *err)
{
    if (sqlite3_prepare_v2(db, sql, -1, st, NULL) == SQLITE_OK) return PG_OK;
    return pg_fail(err, PG_ERR_DB, "report: %s: cannot read %s: %s", db_name, what,
                   sqlite3_errmsg(db));
}

/* Steps st: 1 for a row, 0 when done, -1 after recording PG_ERR_DB. */
static int step(sqlite3 *db, const char *db_name, const char *what, sqlite3_stmt *st, pg_err *err)
{
    const int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) return 1;
    if (rc == SQLITE_DONE) return 0;
    pg_fail(err, PG_ERR_DB, "report: %s: reading %s: %s", db_name, what, sqlite3_errmsg(db));
    return -1;
}

/* Index of name in names[0 .. n), or -1. */
static long find_name(char *const *names, size_t n, const char *name)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(names[i], name) == 0) return (long)i;
    return -1;
}

/* Index of (capture, layer) in d->layers, or -1. */
static long find_layer(const report_data *d, const char *capture, int layer)
{
    const report_layer key = {(char *)capture, layer};
    const report_layer *hit =
        d->n_layers == 0 ? NULL : bsearch(&key, d->layers, d->n_layers, sizeof key, layer_cmp);
    return hit != NULL ? (long)(hit - d->layers) : -1;
}

/* ---- the pieces ------------------------------------------------------------ */

/* The runs row of run_id; PG_ERR_USAGE when there is none. */
static pg_status load_run(sqlite3 *db, const char *dbn, int64_t run_id, report_run *r, pg_err *err)
{
    sqlite3_stmt *st = NULL;
    pg_status s = prep(db, dbn, "runs",
                       "SELECT kind, label, status, started_at, finished_at, git_rev, host, "
                       "device, error FROM runs WHERE id = ?1",
                       &st, err);
    if (s != PG_OK) return s;
    sqlite3_bind_int64(st, 1, run_id);
    const int row = step(db, dbn, "runs", st, err);
    if (row < 0) s = err->code;
    else if (row == 0) s = pg_fail(err, PG_ERR_USAGE, "report: %s has no run %lld", dbn, (long long)run_id);
    else {
        r->id = run_id;
        char **cols[] = {&r->kind, &r->label, &r->status, &r->started_at, &r->finished_at,
                         &r->git_rev, &r->host, &r->device, &r->error};
        for (int i = 0; s == PG_OK && i < (int)(sizeof cols / sizeof cols[0]); i++)
            s = col_text(st, i, cols[i], err);
    }
    sqlite3_finalize(st);
    return s;
}

/* The distinct variants and (capture, layer) pairs of the run. */
static pg_status load_axes(sqlite3 *db, const char *dbn, int64_t run_id, report_data *d, pg_err *err)
{
    sqlite3_stmt *st = NULL;
    size_t cap = 0;
    pg_status s = prep(db, dbn, "layer_metrics",
                       "SELECT DISTINCT variant FROM layer_metrics WHERE run_id = ?1", &st, err);
    if (s != PG_OK) return s;
    sqlite3_bind_int64(st, 1, run_id);
    int row;
    while (s == PG_OK && (row = step(db, dbn, "layer_metrics", st, err)) != 0) {
        if (row < 0 || (s = grow((void **)&d->variants, &cap, d->n_variants + 1, sizeof(char *),
                                 err)) != PG_OK) {
            s = err->code;
            break;
        }
        if ((s = col_text(st, 0, &d->variants[d->n_variants], err)) == PG_OK &&
            d->variants[d->n_variants] != NULL)
            d->n_variants++;
    }
    sqlite3_finalize(st);
    if (s != PG_OK) return s;
    if (d->n_variants > 1) qsort(d->variants, d->n_variants, sizeof(char *), name_ptr_cmp);

    cap = 0;
    s = prep(db, dbn, "layers",
             "SELECT capture, layer FROM layer_metrics WHERE run_id = ?1 "
             "UNION SELECT capture, layer FROM quant_stats WHERE run_id = ?1",
             &st, err);
    if (s != PG_OK) return s;
    sqlite3_bind_int64(st, 1, run_id);
    while (s == PG_OK && (row = step(db, dbn, "layers", st, err)) != 0) {
        if (row < 0 || (s = grow((void **)&d->layers, &cap, d->n_layers + 1, sizeof(report_layer),
                                 err)) != PG_OK) {
            s = err->code;
            break;
        }
        report_layer *l = &d->layers[d->n_layers];
        l->layer = sqlite3_column_int(st, 1);
        if ((s = col_text(st, 0, &l->capture, err)) == PG_OK && l->capture != NULL) d->n_layers++;
    }
    sqlite3_finalize(st);
    if (s == PG_OK && d->n_layers > 0) qsort(d->layers, d->n_layers, sizeof(report_layer), layer_cmp);
    return s;
}

/* Whole-layer and per-head rows into d->cells and d->head_*. */
static pg_status load_metrics(sqlite3 *db, const char *dbn, int64_t run_id, report_data *d,
                              pg_err *err)
{
    const size_t n_cells = d->n_layers * d->n_variants;
    pg_status s = alloc_zero((void **)&d->cells, n_cells, sizeof(report_cell), err);
    if (s != PG_OK) return s;
    sqlite3_stmt *st = NULL;
    s = prep(db, dbn, "layer_metrics",
             "SELECT capture, layer, variant, head, rel_l2, max_abs, cos_sim, sqnr_db, "
             "nan_count, inf_count FROM layer_metrics WHERE run_id = ?1 ",
             &st, err);
    if (s != PG_OK) return s;
    sqlite3_bind_int64(st, 1, run_id);

    /* The head arrays are sized from the largest head index before the rows are read. */
    sqlite3_stmt *mx = NULL;
    s = prep(db, dbn, "layer_metrics", "SELECT max(head) FROM layer_metrics WHERE run_id = ?1", &mx,
             err);
    if (s == PG_OK) {
        sqlite3_bind_int64(mx, 1, run_id);
        const int row = step(db, dbn, "layer_metrics", mx, err);
        const int64_t max_head = row == 1 ? col_int(mx, 0, -1) : -1;
        if (row < 0) s = err->code;
        else if (max_head >= REPORT_MAX_HEADS)
            s = pg_fail(err, PG_ERR_FORMAT, "report: %s: run %lld has head %lld (at most %d heads)",
                        dbn, (long long)run_id, (long long)max_head, REPORT_MAX_HEADS);
        else if (max_head >= 0) {
            d->n_heads = (int)max_head + 1;
            const size_t n = n_cells * (size_t)d->n_heads;
            s = alloc_zero((void **)&d->head_rel_l2, n, sizeof(double), err);
            if (s == PG_OK) s = alloc_zero((void **)&d->head_present, n, 1, err);
        }
    }
    sqlite3_finalize(mx);

    int row;
    while (s == PG_OK && (row = step(db, dbn, "layer_metrics", st, err)) != 0) {
        if (row < 0) {
            s = err->code;
            break;
        }
        const char *cap = (const char *)sqlite3_column_text(st, 0);
        const char *var = (const char *)sqlite3_column_text(st, 2);
        if (cap == NULL || var == NULL) continue;
        const long l = find_layer(d, cap, sqlite3_column_int(st, 1));
        const long v = find_name(d->variants, d->n_variants, var);
        if (l < 0 || v < 0) continue;
        const size_t ci = (size_t)l * d->n_variants + (size_t)v;
        const int64_t head = sqlite3_column_int64(st, 3);
        if (head < 0) {
            report_cell *c = &d->cells[ci];
            c->present = 1;
            c->rel_l2 = col_real(st, 4);
            c->max_abs = col_real(st, 5);
            c->cos_sim = col_real(st, 6);
            c->sqnr_db = col_real(st, 7);
            c->nan_count = col_int(st, 8, 0);
            c->inf_count = col_int(st, 9, 0);
        } else if (head < d->n_heads) {
            d->head_rel_l2[ci * (size_t)d->n_heads + (size_t)head] = col_real(st, 4);
            d->head_present[ci * (size_t)d->n_heads + (size_t)head] = 1;
        }
    }
    sqlite3_finalize(st);
    return s;
}

/* quant_stats rows into d->quant. */
static pg_status load_quant(sqlite3 *db, const char *dbn, int64_t run_id, report_data *d, pg_err *err)
{
    pg_status s = alloc_zero((void **)&d->quant, d->n_layers * REPORT_N_TENSORS,
                             sizeof(report_quant), err);
    if (s != PG_OK) return s;
    sqlite3_stmt *st = NULL;
    s = prep(db, dbn, "quant_stats",
             "SELECT capture, layer, tensor, scale, scale_source, saturated_frac, underflow_frac "
             "FROM quant_stats WHERE run_id = ?1",
             &st, err);
    if (s != PG_OK) return s;
    sqlite3_bind_int64(st, 1, run_id);
    static const char tensors[REPORT_N_TENSORS] = {'q', 'k', 'v'};
    int row;
    while ((row = step(db, dbn, "quant_stats", st, err)) != 0) {
        if (row < 0) {
            s = err->code;
            break;
        }
        const char *cap = (const char *)sqlite3_column_text(st, 0);
        const char *ten = (const char *)sqlite3_column_text(st, 2);
        const char *src = (const char *)sqlite3_column_text(st, 4);
        if (cap == NULL || ten == NULL) continue;
        const long l = find_layer(d, cap, sqlite3_column_int(st, 1));
        const char *t = ten[0] != '\0' && ten[1] == '\0' ? memchr(tensors, ten[0], sizeof tensors)
                                                          : NULL;
        if (l < 0 || t == NULL) continue;
        report_quant *q = &d->quant[(size_t)l * REPORT_N_TENSORS + (size_t)(t - tensors)];
        q->present = 1;
        q->scale = col_real(st, 3);
        snprintf(q->source, sizeof q->source, "%s", src != NULL ? src : "");
        q->saturated_frac = col_real(st, 5);
        q->underflow_frac = col_real(st, 6);
        d->has_quant = 1;
    }
    sqlite3_finalize(st);
    return s;
}

/* eval_scores and eval_pairs rows of the run. */
static pg_status load_evals(sqlite3 *db, const char *dbn, int64_t run_id, report_data *d,
                            pg_err *err)
{
    sqlite3_stmt *st = NULL;
    size_t cap = 0;
    pg_status s = prep(db, dbn, "eval_scores",
                       "SELECT eval, mode, effort, n_problems, k, accuracy, stderr, ci_low, "
                       "ci_high, n_errors, n_truncated FROM eval_scores WHERE run_id = ?1",
                       &st, err);
    if (s != PG_OK) return s;
    sqlite3_bind_int64(st, 1, run_id);
    int row;
    while (s == PG_OK && (row = step(db, dbn, "eval_scores", st, err)) != 0) {
        if (row < 0 || grow((void **)&d->scores, &cap, d->n_scores + 1, sizeof(report_score),
                            err) != PG_OK) {
            s = err->code;
            break;
        }
        report_score *r = &d->scores[d->n_scores++];
        if ((s = col_text(st, 0, &r->eval, err)) != PG_OK ||
            (s = col_text(st, 1, &r->mode, err)) != PG_OK ||
            (s = col_text(st, 2, &r->effort, err)) != PG_OK)
            break;
        r->n_problems = col_int(st, 3, 0);
        r->k = col_int(st, 4, 0);
        r->accuracy = col_real(st, 5);
        r->se = col_real(st, 6);
        r->ci_low = col_real(st, 7);
        r->ci_high = col_real(st, 8);
        r->n_errors = col_int(st, 9, 0);
        r->n_truncated = col_int(st, 10, 0);
    }
    sqlite3_finalize(st);
    if (s != PG_OK) return s;
    if (d->n_scores > 0) qsort(d->scores, d->n_scores, sizeof(report_score), score_cmp);

    cap = 0;
    s = prep(db, dbn, "eval_pairs",
             "SELECT eval, effort, mode_a, mode_b, n_problems, mean_diff, stderr, ci_low, ci_high, "
             "wins, losses, ties, sign_p, mde FROM eval_pairs WHERE run_id = ?1",
             &st, err);
    if (s != PG_OK) return s;
    sqlite3_bind_int64(st, 1, run_id);
    while (s == PG_OK && (row = step(db, dbn, "eval_pairs", st, err)) != 0) {
        if (row < 0 || grow((void **)&d->pairs, &cap, d->n_pairs + 1, sizeof(report_pair), err) !=
                           PG_OK) {
            s = err->code;
            break;
        }
        report_pair *p = &d->pairs[d->n_pairs++];
        if ((s = col_text(st, 0, &p->eval, err)) != PG_OK ||
            (s = col_text(st, 1, &p->effort, err)) != PG_OK ||
            (s = col_text(st, 2, &p->mode_a, err)) != PG_OK ||
            (s = col_text(st, 3, &p->mode_b, err)) != PG_OK)
            break;
        p->n_problems = col_int(st, 4, 0);
        p->mean_diff = col_real(st, 5);
        p->se = col_real(st, 6);
        p->ci_low = col_real(st, 7);
        p->ci_high = col_real(st, 8);
        p->wins = col_int(st, 9, 0);
        p->losses = col_int(st, 10, 0);
        p->ties = col_int(st, 11, 0);
        p->sign_p = col_real(st, 12);
        p->mde = col_real(st, 13);
    }
    sqlite3_finalize(st);
    if (s == PG_OK && d->n_pairs > 0) qsort(d->pairs, d->n_pairs, sizeof(report_pair), pair_cmp);
    return s;
}

/* The gate's flags of the run, when the flags table exists. */
static pg_status load_flags(sqlite3 *db, const char *dbn, int64_t run_id, report_data *d, pg_err *err)
{
    sqlite3_stmt *st = NULL;
    pg_status s = prep(db, dbn, "sqlite_schema",
                       "SELECT 1 FROM sqlite_schema WHERE type = 'table' AND name = 'flags'", &st,
                       err);
    if (s != PG_OK) return s;
    const int row = step(db, dbn, "sqlite_schema", st, err);
    sqlite3_finalize(st);
    if (row < 0) return err->code;
    d->flags_table = row == 1;
    if (!d->flags_table) return PG_OK;

    size_t cap = 0;
    s = prep(db, dbn, "flags",
             "SELECT baseline_run_id, scope, capture, layer, variant, eval, mode, effort, metric, "
             "value, baseline_value, threshold, verdict, message FROM flags WHERE run_id = ?1 "
             "ORDER BY CASE verdict WHEN 'regression' THEN 0 WHEN 'error' THEN 1 "
             "WHEN 'inconclusive' THEN 2 WHEN 'improvement' THEN 3 WHEN 'no change' THEN 4 "
             "WHEN 'pass' THEN 5 ELSE 6 END, id",
             &st, err);
    if (s != PG_OK) return s;
    sqlite3_bind_int64(st, 1, run_id);
    int r;
    while (s == PG_OK && (r = step(db, dbn, "flags", st, err)) != 0) {
        if (r < 0 || grow((void **)&d->flags, &cap, d->n_flags + 1, sizeof(report_flag), err) !=
                         PG_OK) {
            s = err->code;
            break;
        }
        report_flag *f = &d->flags[d->n_flags++];
        f->baseline_run_id = col_int(st, 0, -1);
        f->layer = (int)col_int(st, 3, -1);
        f->value = col_real(st, 9);
        f->baseline_value = col_real(st, 10);
        f->threshold = col_real(st, 11);
        const struct { int col; char **dst; } texts[] = {
            {1, &f->scope}, {2, &f->capture}, {4, &f->variant}, {5, &f->eval}, {6, &f->mode},
            {7, &f->effort}, {8, &f->metric}, {12, &f->verdict}, {13, &f->message},
        };
        for (size_t i = 0; s == PG_OK && i < sizeof texts / sizeof texts[0]; i++)
            s = col_text(st, texts[i].col, texts[i].dst, err);
    }
    sqlite3_finalize(st);
    d->gated = s == PG_OK && d->n_flags > 0;
    return s;
}

/* Index of name among the trend's series, appended when new; -1 after PG_ERR_NOMEM. */
static long trend_series(report_trend *t, size_t *cap, const char *name, pg_err *err)
{
    const long i = find_name(t->series, t->n_series, name);
    if (i >= 0) return i;
    if (grow((void **)&t->series, cap, t->n_series + 1, sizeof(char *), err) != PG_OK) return -1;
    if (dup_str(name, &t->series[t->n_series], err) != PG_OK) return -1;
    return (long)t->n_series++;
}

/* Index of run id among the trend's runs, or -1. */
static long trend_run(const report_trend *t, int64_t id)
{
    for (size_t i = 0; i < t->n_runs; i++)
        if (t->runs[i].id == id) return (long)i;
    return -1;
}

/* The runs of the trend, as a subquery over ?1 kind, ?2 label, ?3 id, ?4 count. */
#define TREND_RUNS_SQL                                                                     \
    "SELECT id FROM runs WHERE kind = ?1 AND label IS ?2 AND status = 'complete' AND id <= ?3 " \
    "ORDER BY id DESC LIMIT ?4"

/* Binds the trend subquery's parameters of d to st. */
static void trend_bind(sqlite3_stmt *st, const report_data *d, int trend_n)
{
    sqlite3_bind_text(st, 1, d->run.kind, -1, SQLITE_STATIC);
    if (d->run.label != NULL) sqlite3_bind_text(st, 2, d->run.label, -1, SQLITE_STATIC);
    else sqlite3_bind_null(st, 2);
    sqlite3_bind_int64(st, 3, d->run.id);
    sqlite3_bind_int(st, 4, trend_n);
}

/* The series name of a trend row: the variant (rel_l2), or "mode effort",
 * prefixed with the eval when the trend holds several evals. */
static void trend_name(char *buf, size_t len, int rel, int several_evals, sqlite3_stmt *st)
{
    const char *a = (const char *)sqlite3_column_text(st, 1);
    const char *mode = (const char *)sqlite3_column_text(st, 2);
    const char *effort = (const char *)sqlite3_column_text(st, 3);
    if (a == NULL) a = "";
    if (mode == NULL) mode = "";
    if (effort == NULL) effort = "";
    if (rel) snprintf(buf, len, "%s", a);
    else if (several_evals) snprintf(buf, len, "%s %s %s", a, mode, effort);
    else snprintf(buf, len, "%s %s", mode, effort);
}

/* Longest trend series name kept. */
#define TREND_NAME_MAX 256

/* The trend: the runs, then the per-run value of each series (two passes
 * over the rows: the series names, then the sums). */
static pg_status load_trend(sqlite3 *db, const char *dbn, int trend_n, report_data *d, pg_err *err)
{
    report_trend *t = &d->trend;
    /* What the run holds decides; a run that holds nothing (failed early) follows its kind. */
    const int eval_kind = d->run.kind != NULL && strcmp(d->run.kind, "eval") == 0;
    t->metric = d->n_layers > 0 ? REPORT_TREND_REL_L2
                : d->n_scores > 0 || eval_kind ? REPORT_TREND_ACCURACY : REPORT_TREND_REL_L2;
    sqlite3_stmt *st = NULL;
    pg_status s = prep(db, dbn, "runs",
                       "SELECT id, started_at, git_rev FROM runs WHERE id IN (" TREND_RUNS_SQL
                       ") ORDER BY id",
                       &st, err);
    if (s != PG_OK) return s;
    trend_bind(st, d, trend_n);
    size_t cap = 0;
    int row;
    while (s == PG_OK && (row = step(db, dbn, "runs", st, err)) != 0) {
        if (row < 0 || grow((void **)&t->runs, &cap, t->n_runs + 1, sizeof(report_trend_run),
                            err) != PG_OK) {
            s = err->code;
            break;
        }
        report_trend_run *r = &t->runs[t->n_runs++];
        r->id = sqlite3_column_int64(st, 0);
        if ((s = col_text(st, 1, &r->started_at, err)) == PG_OK) s = col_text(st, 2, &r->git_rev, err);
    }
    sqlite3_finalize(st);
    if (s != PG_OK || t->n_runs == 0) return s;

    const int rel = t->metric == REPORT_TREND_REL_L2;
    int several_evals = 0;
    if (!rel) {
        s = prep(db, dbn, "eval_scores",
                 "SELECT count(DISTINCT eval) FROM eval_scores WHERE run_id IN (" TREND_RUNS_SQL ")",
                 &st, err);
        if (s != PG_OK) return s;
        trend_bind(st, d, trend_n);
        row = step(db, dbn, "eval_scores", st, err);
        several_evals = row == 1 && sqlite3_column_int64(st, 0) > 1;
        sqlite3_finalize(st);
        if (row < 0) return err->code;
    }
    s = prep(db, dbn, rel ? "layer_metrics" : "eval_scores",
             rel ? "SELECT run_id, variant, NULL, NULL, rel_l2, nan_count + inf_count "
                   "FROM layer_metrics WHERE head = -1 AND run_id IN (" TREND_RUNS_SQL ")"
                 : "SELECT run_id, eval, mode, effort, accuracy, 0 FROM eval_scores "
                   "WHERE run_id IN (" TREND_RUNS_SQL ")",
             &st, err);
    if (s != PG_OK) return s;
    trend_bind(st, d, trend_n);
    char name[TREND_NAME_MAX];
    size_t scap = 0;
    while (s == PG_OK && (row = step(db, dbn, "trend", st, err)) != 0) {
        if (row < 0) {
            s = err->code;
            break;
        }
        trend_name(name, sizeof name, rel, several_evals, st);
        if (trend_series(t, &scap, name, err) < 0) s = err->code;
    }
    if (s == PG_OK && t->n_series > 1) qsort(t->series, t->n_series, sizeof(char *), name_ptr_cmp);

    const size_t n = t->n_series * t->n_runs;
    double *sum = NULL;
    size_t *count = NULL;
    unsigned char *bad = NULL;
    if (s == PG_OK && (alloc_zero((void **)&sum, n, sizeof(double), err) != PG_OK ||
                       alloc_zero((void **)&count, n, sizeof(size_t), err) != PG_OK ||
                       alloc_zero((void **)&bad, n, 1, err) != PG_OK ||
                       alloc_zero((void **)&t->values, n, sizeof(double), err) != PG_OK ||
                       alloc_zero((void **)&t->present, n, 1, err) != PG_OK))
        s = err->code;
    if (s == PG_OK) sqlite3_reset(st);
    while (s == PG_OK && (row = step(db, dbn, "trend", st, err)) != 0) {
        if (row < 0) {
            s = err->code;
            break;
        }
        trend_name(name, sizeof name, rel, several_evals, st);
        const long r = trend_run(t, sqlite3_column_int64(st, 0));
        const long si = find_name(t->series, t->n_series, name);
        const double v = col_real(st, 4);
        /* An accuracy that is NULL means nothing was scored: no data, not a failure. */
        if (r < 0 || si < 0 || (!rel && isnan(v))) continue;
        const size_t k = (size_t)si * t->n_runs + (size_t)r;
        if (!isfinite(v) || col_int(st, 5, 0) > 0) bad[k] = 1;
        else sum[k] += v;
        count[k]++;
    }
    sqlite3_finalize(st);
    for (size_t k = 0; s == PG_OK && k < n; k++) {
        t->present[k] = count[k] > 0;
        t->values[k] = count[k] == 0 ? NAN : bad[k] ? INFINITY : sum[k] / (double)count[k];
    }
    free(sum);
    free(count);
    free(bad);
    return s;
}

const char report_attribution_caption[] =
    "Each fp8 variant run again on the CPU specification with one tensor alone quantized "
    "(the others kept bf16, the profile's other roundings kept): the bar of a tensor is the "
    "layer's rel_l2 when only it is fp8. \"none\" (every tensor bf16) is the profile's "
    "arithmetic alone, the floor every part includes; \"joint\" is the variant itself. The "
    "parts are not shares of the joint error and are not additive when the tensors interact: "
    "independent errors add roughly in quadrature (the joint near the root-sum-square, \"rss\"), "
    "so the sum overstates the joint; the saturation of one tensor can mask another's rounding "
    "or compound it, so the joint can also exceed the sum. Read the parts as \"which tensor "
    "alone would cost this much\": the largest is the tensor to keep in bf16 or rescale first.";

/* The attribution rows (attribution_store_load), grouped by capture, layer
 * and variant, with each group's sum, root-sum-square and dominant tensor. */
static pg_status load_attribution(sqlite3 *db, const char *dbn, int64_t run_id, report_data *d,
                                  pg_err *err)
{
    pg_status s = attribution_store_load(db, dbn, run_id, &d->attribution_rows, err);
    const attribution_rows *r = &d->attribution_rows;
    if (s == PG_OK && r->n > 0) s = alloc_zero((void **)&d->attribution, r->n, sizeof *d->attribution, err);
    for (size_t i = 0; s == PG_OK && i < r->n; i++) {
        const attribution_row *row = &r->rows[i];
        report_attribution *g = d->n_attribution ? &d->attribution[d->n_attribution - 1] : NULL;
        if (g == NULL || g->layer != row->layer || strcmp(g->capture, row->capture) != 0 ||
            strcmp(g->variant, row->variant) != 0) {
            g = &d->attribution[d->n_attribution++];
            *g = (report_attribution){.capture = row->capture, .variant = row->variant,
                                      .layer = row->layer, .dominant = -1};
            for (int t = 0; t < ATTRIBUTION_N_TENSORS; t++) g->rel_l2[t] = NAN;
        }
        g->rel_l2[row->tensor] = row->rel_l2;
    }
    for (size_t i = 0; i < d->n_attribution; i++) {
        report_attribution *g = &d->attribution[i];
        double sq = 0;
        for (int t = ATTRIBUTION_NONE + 1; t < ATTRIBUTION_ALL; t++) {
            const double v = g->rel_l2[t];
            if (isnan(v)) continue;
            g->sum += v;
            sq += v * v;
            if (g->dominant < 0 || v > g->rel_l2[g->dominant]) g->dominant = t;
        }
        g->rss = sqrt(sq);
    }
    return s;
}

/* ---- public --------------------------------------------------------------- */

const char *report_diag_hypothesis(size_t h)
{
    return attn_hypothesis_name(attn_hypothesis_at(h));
}

/* The run's diagnosis spans and, per span and hypothesis, the largest
 * distance over its layers. */
static pg_status load_diagnosis(sqlite3 *db, int64_t run_id, report_data *d, pg_err *err)
{
    diagnosis_row *rows = NULL;
    size_t n = 0;
    pg_status s = diagnosis_store_load(db, run_id, &rows, &n, err);
    if (s == PG_OK) s = diag_spans(rows, n, &d->diag, &d->n_diag, err);
    d->n_diag_hyp = attn_hypothesis_count();
    if (s == PG_OK && d->n_diag > 0 &&
        (d->diag_dist = malloc(d->n_diag * d->n_diag_hyp * sizeof *d->diag_dist)) == NULL)
        s = pg_fail(err, PG_ERR_NOMEM, "report: out of memory");
    for (size_t i = 0; s == PG_OK && i < d->n_diag * d->n_diag_hyp; i++) d->diag_dist[i] = NAN;
    for (size_t i = 0; s == PG_OK && i < n; i++) {
        const diagnosis_row *r = &rows[i];
        for (size_t k = 0; k < d->n_diag; k++) {
            const diag_span *sp = &d->diag[k];
            if (r->layer < sp->first_layer || r->layer > sp->last_layer ||
                strcmp(r->capture, sp->capture) != 0 || strcmp(r->ext_name, sp->ext_name) != 0)
                continue;
            for (size_t h = 0; h < d->n_diag_hyp; h++) {
                double *cell = &d->diag_dist[k * d->n_diag_hyp + h];
                if (strcmp(r->hypothesis, report_diag_hypothesis(h)) == 0 &&
                    !isnan(r->rel_l2) && !(*cell >= r->rel_l2))
                    *cell = r->rel_l2;
            }
        }
    }
    for (size_t k = 0; s == PG_OK && k < d->n_diag; k++)
        d->n_diag_bugs += d->diag[k].verdict == DIAG_BUG;
    diagnosis_rows_free(rows, n);
    return s;
}

pg_status report_data_load(struct sqlite3 *db, const char *db_name, int64_t run_id, int trend_n,
                           report_data *out, pg_err *err)
{
    memset(out, 0, sizeof *out);
    if (db == NULL || db_name == NULL)
        return pg_fail(err, PG_ERR_INTERNAL, "report: no database handle or name");
    if (trend_n < 1 || trend_n > REPORT_TREND_MAX)
        return pg_fail(err, PG_ERR_USAGE, "report: --trend %d is outside [1, %d]", trend_n,
                       REPORT_TREND_MAX);
    /* The loaders read the failure's code back, so they get an err that is never NULL. */
    pg_err local = {0};
    pg_status s = dup_str(db_name, &out->db_name, &local);
    if (s == PG_OK) s = load_run(db, db_name, run_id, &out->run, &local);
    if (s == PG_OK) s = load_axes(db, db_name, run_id, out, &local);
    if (s == PG_OK) s = load_metrics(db, db_name, run_id, out, &local);
    if (s == PG_OK) s = load_quant(db, db_name, run_id, out, &local);
    if (s == PG_OK) s = load_evals(db, db_name, run_id, out, &local);
    if (s == PG_OK) s = load_flags(db, db_name, run_id, out, &local);
    if (s == PG_OK) s = load_diagnosis(db, run_id, out, &local);
    if (s == PG_OK) s = load_trend(db, db_name, trend_n, out, &local);
    if (s == PG_OK) s = load_attribution(db, db_name, run_id, out, &local);
    if (s != PG_OK) pg_fail(err, local.code, "%s", local.msg);
    return s;
}

const char report_advice_counts[] =
    "NaN/Inf outputs and undefined metrics keep bf16. The saving counts K and V per token from "
    "the stored shapes (2 x hkv x d elements a layer, 2 bytes in bf16, 1 in fp8 e4m3), not the "
    "fp8 scales, block padding, or vLLM keeping only the window's tokens of a sliding-window "
    "layer.";

void report_data_free(report_data *d)
{
    if (d == NULL) return;
    free(d->db_name);
    report_run *r = &d->run;
    char *run_strs[] = {r->kind, r->label, r->status, r->started_at, r->finished_at,
                        r->git_rev, r->host, r->device, r->error};
    for (size_t i = 0; i < sizeof run_strs / sizeof run_strs[0]; i++) free(run_strs[i]);
    for (size_t i = 0; i < d->n_variants; i++) free(d->variants[i]);
    free(d->variants);
    for (size_t i = 0; i < d->n_layers; i++) free(d->layers[i].capture);
    free(d->layers);
    free(d->cells);
    free(d->head_rel_l2);
    free(d->head_present);
    free(d->quant);
    free(d->attribution);
    attribution_rows_free(&d->attribution_rows);
    for (size_t i = 0; i < d->n_scores; i++) {
        free(d->scores[i].eval);
        free(d->scores[i].mode);
        free(d->scores[i].effort);
    }
    free(d->scores);
    for (size_t i = 0; i < d->n_pairs; i++) {
        free(d->pairs[i].eval);
        free(d->pairs[i].effort);
        free(d->pairs[i].mode_a);
        free(d->pairs[i].mode_b);
    }
    free(d->pairs);
    for (size_t i = 0; i < d->n_flags; i++) {
        report_flag *f = &d->flags[i];
        char *fs[] = {f->scope, f->capture, f->variant, f->eval, f->mode, f->effort, f->metric,
                      f->verdict, f->message};
        for (size_t j = 0; j < sizeof fs / sizeof fs[0]; j++) free(fs[j]);
    }
    free(d->flags);
    diag_spans_free(d->diag, d->n_diag);
    free(d->diag_dist);
    report_trend *t = &d->trend;
    for (size_t i = 0; i < t->n_runs; i++) {
        free(t->runs[i].started_at);
        free(t->runs[i].git_rev);
    }
    free(t->runs);
    for (size_t i = 0; i < t->n_series; i++) free(t->series[i]);
    free(t->series);
    free(t->values);
    free(t->present);
    for (size_t i = 0; i < d->n_advice; i++) {
        report_advice *a = &d->advice[i];
        char *as[] = {a->variant, a->metric, a->note, a->keep, a->flag};
        for (size_t j = 0; j < sizeof as / sizeof as[0]; j++) free(as[j]);
    }
    free(d->advice);
    free(d->advice_note);
    free(d->advice_config);
    memset(d, 0, sizeof *d);
}

int report_flag_fails(const report_flag *f)
{
    return f->verdict != NULL &&
           (strcmp(f->verdict, "regression") == 0 || strcmp(f->verdict, "error") == 0);
}

double report_variant_mean(const report_data *d, size_t v)
{
    double sum = 0.0;
    size_t n = 0;
    for (size_t l = 0; l < d->n_layers; l++) {
        const report_cell *c = &d->cells[l * d->n_variants + v];
        if (!c->present) continue;
        if (!isfinite(c->rel_l2) || c->nan_count + c->inf_count > 0) return INFINITY;
        sum += c->rel_l2;
        n++;
    }
    return n > 0 ? sum / (double)n : NAN;
}

int report_worst_fp8_variant(const report_data *d)
{
    int worst = -1;
    double worst_mean = -INFINITY;
    for (size_t v = 0; v < d->n_variants; v++) {
        const variant_profile_id p = variant_name_profile(d->variants[v]);
        if (p == VARIANT_PROFILE_COUNT || variant_profile_mode(p) == PG_MODE_BF16) continue;
        const double m = report_variant_mean(d, v);
        if (isnan(m)) continue;
        if (worst < 0 || m > worst_mean) {
            worst = (int)v;
            worst_mean = m;
        }
    }
    return worst;
}

/* The sort key of a cell: +inf when it or its output is non-finite. */
static double cell_badness(const report_cell *c)
{
    return !isfinite(c->rel_l2) || c->nan_count + c->inf_count > 0 ? INFINITY : c->rel_l2;
}

size_t report_worst_layers(const report_data *d, size_t v, size_t *out, size_t max)
{
    size_t n = 0;
    for (size_t l = 0; l < d->n_layers; l++) {
        const report_cell *c = &d->cells[l * d->n_variants + v];
        if (!c->present) continue;
        const double b = cell_badness(c);
        /* Insertion into the top list, worst first, earlier layers ahead on ties. */
        size_t pos = n;
        while (pos > 0 && cell_badness(&d->cells[out[pos - 1] * d->n_variants + v]) < b) pos--;
        if (pos >= max) continue;
        const size_t end = n < max ? n : max - 1;
        for (size_t k = end; k > pos; k--) out[k] = out[k - 1];
        out[pos] = l;
        if (n < max) n++;
    }
    return n;
}

const char *report_colour(const char *name)
{
    if (name == NULL) return PALETTE[0];
    const variant_profile_id prof = variant_name_profile(name);
    const pg_mode mode = variant_profile_mode(prof);
    if (prof != VARIANT_PROFILE_COUNT && (mode == PG_MODE_BF16 || variant_profile_is_default(prof)))
        return mode == PG_MODE_BF16 ? COLOUR_BF16 : mode == PG_MODE_FP8KV ? COLOUR_FP8KV
                                                                              : COLOUR_FP8QKV;
    unsigned h = FNV_OFFSET;
    for (const unsigned char *p = (const unsigned char *)name; *p != '\0'; p++) h = (h ^ *p) * FNV_PRIME;
    return PALETTE[h % PALETTE_N];
}

void report_flag_where(FILE *out, const report_flag *f,
                       void (*put_escaped)(FILE *out, const char *s))
{
    const char *parts[] = {f->capture, f->variant, f->eval, f->mode, f->effort};
    int first = 1;
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) {
        if (i == 1 && f->layer >= 0) {
            fprintf(out, "%slayer %d", first ? "" : " / ", f->layer);
            first = 0;
        }
        if (parts[i] == NULL) continue;
        if (!first) fputs(" / ", out);
        put_escaped(out, parts[i]);
        first = 0;
    }
    if (first) fputc('-', out);
}
