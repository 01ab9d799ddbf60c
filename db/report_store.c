/* report_store.c: the SQL behind the reports (see report_store.h). */
#include "report_store.h"

#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sql_util.h"

static const char SQL_RUN[] =
    "SELECT kind, label, status, started_at, finished_at, git_rev, host, device, error "
    "FROM runs WHERE id = ?1";

static const char SQL_VARIANTS_ALL[] = "SELECT DISTINCT variant FROM layer_metrics WHERE run_id = ?1";
static const char SQL_VARIANTS_WHOLE[] =
    "SELECT DISTINCT variant FROM layer_metrics WHERE run_id = ?1 AND head = -1";

static const char SQL_LAYERS[] =
    "SELECT capture, layer FROM layer_metrics WHERE run_id = ?1 "
    "UNION SELECT capture, layer FROM quant_stats WHERE run_id = ?1";

/* The columns of a layer_metric_row, in fill_layer_metric's order. */
#define LAYER_METRIC_COLUMNS                                                               \
    "SELECT capture, variant, backend, layer, head, rel_l2, max_abs, mean_abs, p99_abs, "   \
    "cos_sim, sqnr_db, nan_count, inf_count FROM layer_metrics "

static const char SQL_LAYER_METRICS[] = LAYER_METRIC_COLUMNS "WHERE run_id = ?1";
static const char SQL_WHOLE_LAYERS[] =
    LAYER_METRIC_COLUMNS "WHERE run_id = ?1 AND head = -1 AND (?2 IS NULL OR variant = ?2) "
    "ORDER BY capture, layer, variant, backend";

static const char SQL_QUANT[] =
    "SELECT capture, tensor, scale_source, layer, scale, saturated_frac, underflow_frac "
    "FROM quant_stats WHERE run_id = ?1";

/* Regressions first, then errors, then the other verdicts (report_store.h). */
static const char SQL_FLAGS[] =
    "SELECT baseline_run_id, scope, capture, layer, variant, eval, mode, effort, metric, "
    "value, baseline_value, threshold, verdict, message FROM flags WHERE run_id = ?1 "
    "ORDER BY CASE verdict WHEN 'regression' THEN 0 WHEN 'error' THEN 1 "
    "WHEN 'inconclusive' THEN 2 WHEN 'improvement' THEN 3 WHEN 'no change' THEN 4 "
    "WHEN 'pass' THEN 5 ELSE 6 END, id";

/* The runs of a trend, as a subquery over ?1 kind, ?2 label, ?3 last id, ?4 count. */
#define TREND_RUNS                                                                         \
    "SELECT id FROM runs WHERE kind = ?1 AND label IS ?2 AND status = 'complete' AND id <= ?3 " \
    "ORDER BY id DESC LIMIT ?4"

static const char SQL_TREND_RUNS[] =
    "SELECT id, started_at, git_rev FROM runs WHERE id IN (" TREND_RUNS ") ORDER BY id";

/* Both in fill_trend_value's column order. */
static const char SQL_TREND_REL_L2[] =
    "SELECT run_id, variant, NULL, NULL, rel_l2, nan_count + inf_count "
    "FROM layer_metrics WHERE head = -1 AND run_id IN (" TREND_RUNS ")";
static const char SQL_TREND_ACCURACY[] =
    "SELECT run_id, eval, mode, effort, accuracy, 0 FROM eval_scores "
    "WHERE run_id IN (" TREND_RUNS ")";

/* ---- reading ---------------------------------------------------------------- */

/* Reads every row of sql (?1 run_id and, when bind_variant, ?2 variant)
 * through fill (sql_read_run_rows); what names the rows in messages
 * ("read the <what> of run N"). */
static pg_status read_run_rows(pg_store *s, const char *fn, const char *sql, int64_t run_id,
                               int bind_variant, const char *variant, size_t elem, void **rows,
                               size_t *n, sql_row_fill fill, const char *what, pg_err *err)
{
    char phrase[SQL_WHAT_MAX];
    snprintf(phrase, sizeof phrase, "read the %s of run %" PRId64, what, run_id);
    return sql_read_run_rows(s, fn, sql, run_id, bind_variant, variant, elem, rows, n, fill,
                             phrase, err);
}

/* ---- runs ------------------------------------------------------------------- */

static int fill_run(sqlite3_stmt *st, void *row)
{
    run_row *r = row;
    char **cols[] = {&r->kind, &r->label, &r->status, &r->started_at, &r->finished_at,
                     &r->git_rev, &r->host, &r->device, &r->error};
    int oom = 0;
    for (int i = 0; i < (int)(sizeof cols / sizeof cols[0]); i++)
        *cols[i] = sql_col_dup(st, i, &oom);
    return !oom;
}

pg_status report_store_run(pg_store *s, int64_t id, run_row *out, int *found, pg_err *err)
{
    if (out == NULL || found == NULL)
        return pg_fail(err, PG_ERR_INTERNAL, "report_store_run: out or found is NULL");
    memset(out, 0, sizeof *out);
    *found = 0;
    /* id is the primary key: one row or none. */
    void *v = NULL;
    size_t n = 0;
    char what[SQL_WHAT_MAX];
    snprintf(what, sizeof what, "read run %" PRId64, id);
    const pg_status ps = sql_read_run_rows(s, "report_store_run", SQL_RUN, id, 0, NULL,
                                           sizeof *out, &v, &n, fill_run, what, err);
    run_row *rows = v;
    if (n > 0) {
        *out = rows[0];
        out->id = id;
        *found = 1;
    }
    free(rows);
    return ps;
}

void run_row_free(run_row *r)
{
    if (r == NULL) return;
    char *strs[] = {r->kind, r->label, r->status, r->started_at, r->finished_at,
                    r->git_rev, r->host, r->device, r->error};
    for (size_t i = 0; i < sizeof strs / sizeof strs[0]; i++) free(strs[i]);
    memset(r, 0, sizeof *r);
}

/* ---- variants and layers ---------------------------------------------------- */

/* Column 0 as a malloc'd name. */
static int fill_name(sqlite3_stmt *st, void *row)
{
    int oom = 0;
    *(char **)row = sql_col_dup(st, 0, &oom);
    return !oom;
}

pg_status report_store_variants(pg_store *s, int64_t run_id, report_variant_rows which,
                                char ***names, size_t *n, pg_err *err)
{
    void *v = NULL;
    const pg_status ps =
        read_run_rows(s, "report_store_variants",
                      which == REPORT_VARIANTS_WHOLE_LAYER ? SQL_VARIANTS_WHOLE : SQL_VARIANTS_ALL,
                      run_id, 0, NULL, sizeof **names, &v, n, fill_name, "layer_metrics variants",
                      err);
    *names = v;
    return ps;
}

void report_names_free(char **names, size_t n)
{
    for (size_t i = 0; names != NULL && i < n; i++) free(names[i]);
    free(names);
}

static int fill_layer(sqlite3_stmt *st, void *row)
{
    run_layer_row *r = row;
    int oom = 0;
    r->capture = sql_col_dup(st, 0, &oom);
    r->layer = sqlite3_column_int(st, 1);
    return !oom;
}

pg_status report_store_layers(pg_store *s, int64_t run_id, run_layer_row **rows, size_t *n,
                              pg_err *err)
{
    void *v = NULL;
    const pg_status ps = read_run_rows(s, "report_store_layers", SQL_LAYERS, run_id, 0, NULL,
                                       sizeof **rows, &v, n, fill_layer, "layers", err);
    *rows = v;
    return ps;
}

void run_layer_rows_free(run_layer_row *rows, size_t n)
{
    for (size_t i = 0; rows != NULL && i < n; i++) free(rows[i].capture);
    free(rows);
}

/* ---- layer metrics ------------------------------------------------------------ */

static int fill_layer_metric(sqlite3_stmt *st, void *row)
{
    layer_metric_row *r = row;
    int oom = 0;
    r->capture = sql_col_dup(st, 0, &oom);
    r->variant = sql_col_dup(st, 1, &oom);
    r->backend = sql_col_dup(st, 2, &oom);
    r->layer = sqlite3_column_int(st, 3);
    r->head = sqlite3_column_int64(st, 4);
    r->rel_l2 = sql_col_real(st, 5);
    r->max_abs = sql_col_real(st, 6);
    r->mean_abs = sql_col_real(st, 7);
    r->p99_abs = sql_col_real(st, 8);
    r->cos_sim = sql_col_real(st, 9);
    r->sqnr_db = sql_col_real(st, 10);
    r->nan_count = sqlite3_column_int64(st, 11);
    r->inf_count = sqlite3_column_int64(st, 12);
    return !oom;
}

pg_status report_store_layer_metrics(pg_store *s, int64_t run_id, layer_metric_row **rows,
                                     size_t *n, pg_err *err)
{
    void *v = NULL;
    const pg_status ps = read_run_rows(s, "report_store_layer_metrics", SQL_LAYER_METRICS, run_id,
                                       0, NULL, sizeof **rows, &v, n, fill_layer_metric,
                                       "layer_metrics rows", err);
    *rows = v;
    return ps;
}

pg_status report_store_whole_layers(pg_store *s, int64_t run_id, const char *variant,
                                    layer_metric_row **rows, size_t *n, pg_err *err)
{
    void *v = NULL;
    const pg_status ps = read_run_rows(s, "report_store_whole_layers", SQL_WHOLE_LAYERS, run_id,
                                       1, variant, sizeof **rows, &v, n, fill_layer_metric,
                                       "whole-layer layer_metrics rows", err);
    *rows = v;
    return ps;
}

/* The metric columns of a layer_metric_row: its REAL ones by offset. */
static const struct {
    const char *column;
    size_t offset;
} LAYER_METRIC_REALS[] = {
    {"rel_l2", offsetof(layer_metric_row, rel_l2)},
    {"max_abs", offsetof(layer_metric_row, max_abs)},
    {"mean_abs", offsetof(layer_metric_row, mean_abs)},
    {"p99_abs", offsetof(layer_metric_row, p99_abs)},
    {"cos_sim", offsetof(layer_metric_row, cos_sim)},
    {"sqnr_db", offsetof(layer_metric_row, sqnr_db)},
};

int layer_metric_value(const layer_metric_row *r, const char *column, double *out)
{
    if (column == NULL) return 0;
    for (size_t i = 0; i < sizeof LAYER_METRIC_REALS / sizeof LAYER_METRIC_REALS[0]; i++) {
        if (strcmp(column, LAYER_METRIC_REALS[i].column) != 0) continue;
        memcpy(out, (const char *)r + LAYER_METRIC_REALS[i].offset, sizeof *out);
        return 1;
    }
    if (strcmp(column, "nan_count") == 0) *out = (double)r->nan_count;
    else if (strcmp(column, "inf_count") == 0) *out = (double)r->inf_count;
    else return 0;
    return 1;
}

void layer_metric_rows_free(layer_metric_row *rows, size_t n)
{
    for (size_t i = 0; rows != NULL && i < n; i++) {
        free(rows[i].capture);
        free(rows[i].variant);
        free(rows[i].backend);
    }
    free(rows);
}

/* ---- quant stats ---------------------------------------------------------------- */

static int fill_quant(sqlite3_stmt *st, void *row)
{
    quant_stat_row *r = row;
    int oom = 0;
    r->capture = sql_col_dup(st, 0, &oom);
    r->tensor = sql_col_dup(st, 1, &oom);
    r->scale_source = sql_col_dup(st, 2, &oom);
    r->layer = sqlite3_column_int(st, 3);
    r->scale = sql_col_real(st, 4);
    r->saturated_frac = sql_col_real(st, 5);
    r->underflow_frac = sql_col_real(st, 6);
    return !oom;
}

pg_status report_store_quant(pg_store *s, int64_t run_id, quant_stat_row **rows, size_t *n,
                             pg_err *err)
{
    void *v = NULL;
    const pg_status ps = read_run_rows(s, "report_store_quant", SQL_QUANT, run_id, 0, NULL,
                                       sizeof **rows, &v, n, fill_quant, "quant_stats rows", err);
    *rows = v;
    return ps;
}

void quant_stat_rows_free(quant_stat_row *rows, size_t n)
{
    for (size_t i = 0; rows != NULL && i < n; i++) {
        free(rows[i].capture);
        free(rows[i].tensor);
        free(rows[i].scale_source);
    }
    free(rows);
}

/* ---- flags -------------------------------------------------------------------- */

/* Column i as an integer, dflt for SQL NULL. */
static int64_t col_int_or(sqlite3_stmt *st, int i, int64_t dflt)
{
    return sqlite3_column_type(st, i) == SQLITE_NULL ? dflt : sqlite3_column_int64(st, i);
}

static int fill_flag(sqlite3_stmt *st, void *row)
{
    flag_row *f = row;
    int oom = 0;
    f->baseline_run_id = col_int_or(st, 0, -1);
    f->layer = (int)col_int_or(st, 3, -1);
    f->value = sql_col_real(st, 9);
    f->baseline_value = sql_col_real(st, 10);
    f->threshold = sql_col_real(st, 11);
    const struct { int col; char **dst; } texts[] = {
        {1, &f->scope}, {2, &f->capture}, {4, &f->variant}, {5, &f->eval}, {6, &f->mode},
        {7, &f->effort}, {8, &f->metric}, {12, &f->verdict}, {13, &f->message},
    };
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++)
        *texts[i].dst = sql_col_dup(st, texts[i].col, &oom);
    return !oom;
}

pg_status report_store_flags(pg_store *s, int64_t run_id, flag_row **rows, size_t *n,
                             int *has_table, pg_err *err)
{
    *rows = NULL;
    *n = 0;
    *has_table = 0;
    sqlite3 *db = sql_handle_or_fail(s, "report_store_flags", err);
    if (db == NULL) return PG_ERR_INTERNAL;
    pg_status ps = sql_table_exists(db, "flags", has_table, err);
    if (ps != PG_OK || !*has_table) return ps;
    void *v = NULL;
    ps = read_run_rows(s, "report_store_flags", SQL_FLAGS, run_id, 0, NULL, sizeof **rows, &v, n,
                       fill_flag, "flags", err);
    *rows = v;
    return ps;
}

void flag_rows_free(flag_row *rows, size_t n)
{
    for (size_t i = 0; rows != NULL && i < n; i++) {
        flag_row *f = &rows[i];
        char *strs[] = {f->scope, f->capture, f->variant, f->eval, f->mode, f->effort, f->metric,
                        f->verdict, f->message};
        for (size_t j = 0; j < sizeof strs / sizeof strs[0]; j++) free(strs[j]);
    }
    free(rows);
}

/* ---- the trend ----------------------------------------------------------------- */

/* Prepares sql on s, binds q to the trend subquery's ?1 .. ?4 and reads
 * every row through fill. */
static pg_status read_trend_rows(pg_store *s, const char *fn, const char *sql,
                                 const trend_query *q, size_t elem, void **rows, size_t *n,
                                 sql_row_fill fill, const char *what, pg_err *err)
{
    *rows = NULL;
    *n = 0;
    sqlite3 *db = sql_handle_or_fail(s, fn, err);
    if (db == NULL) return PG_ERR_INTERNAL;
    if (q == NULL || q->kind == NULL)
        return pg_fail(err, PG_ERR_INTERNAL, "%s: no trend query or kind", fn);
    sqlite3_stmt *st = NULL;
    pg_status ps = sql_prepare(db, sql, &st, err);
    if (ps != PG_OK) return ps;
    char phrase[SQL_WHAT_MAX];
    snprintf(phrase, sizeof phrase, "read the %s of the trend up to run %" PRId64, what,
             q->last_id);
    sql_binder b = sql_bind_start(st);
    sql_bind_text(&b, q->kind);
    sql_bind_text(&b, q->label);
    sql_bind_int64(&b, q->last_id);
    sql_bind_int64(&b, q->n_runs);
    if (b.rc != SQLITE_OK) ps = sql_fail(db, err, "%s", phrase);
    else ps = sql_read_rows(db, st, elem, rows, n, fill, phrase, err);
    sqlite3_finalize(st);
    return ps;
}

static int fill_trend_run(sqlite3_stmt *st, void *row)
{
    trend_run_row *r = row;
    int oom = 0;
    r->id = sqlite3_column_int64(st, 0);
    r->started_at = sql_col_dup(st, 1, &oom);
    r->git_rev = sql_col_dup(st, 2, &oom);
    return !oom;
}

pg_status report_store_trend_runs(pg_store *s, const trend_query *q, trend_run_row **rows,
                                  size_t *n, pg_err *err)
{
    void *v = NULL;
    const pg_status ps = read_trend_rows(s, "report_store_trend_runs", SQL_TREND_RUNS, q,
                                         sizeof **rows, &v, n, fill_trend_run, "runs", err);
    *rows = v;
    return ps;
}

void trend_run_rows_free(trend_run_row *rows, size_t n)
{
    for (size_t i = 0; rows != NULL && i < n; i++) {
        free(rows[i].started_at);
        free(rows[i].git_rev);
    }
    free(rows);
}

static int fill_trend_value(sqlite3_stmt *st, void *row)
{
    trend_value_row *r = row;
    int oom = 0;
    r->run_id = sqlite3_column_int64(st, 0);
    r->name = sql_col_dup(st, 1, &oom);
    r->mode = sql_col_dup(st, 2, &oom);
    r->effort = sql_col_dup(st, 3, &oom);
    r->value = sql_col_real(st, 4);
    r->nonfinite = col_int_or(st, 5, 0);
    return !oom;
}

pg_status report_store_trend_values(pg_store *s, const trend_query *q, trend_source source,
                                    trend_value_row **rows, size_t *n, pg_err *err)
{
    const int rel = source == TREND_LAYER_REL_L2;
    void *v = NULL;
    const pg_status ps =
        read_trend_rows(s, "report_store_trend_values", rel ? SQL_TREND_REL_L2 : SQL_TREND_ACCURACY,
                        q, sizeof **rows, &v, n, fill_trend_value,
                        rel ? "layer_metrics rows" : "eval_scores rows", err);
    *rows = v;
    return ps;
}

void trend_value_rows_free(trend_value_row *rows, size_t n)
{
    for (size_t i = 0; rows != NULL && i < n; i++) {
        free(rows[i].name);
        free(rows[i].mode);
        free(rows[i].effort);
    }
    free(rows);
}
