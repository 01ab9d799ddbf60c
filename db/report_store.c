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

/* The readers of layer_metric_rows: "SELECT <LAYER_METRIC_KEYS>, <every
 * metric column> FROM layer_metrics " and one of these (layer_metric_sql). */
static const char SQL_LAYER_METRICS_WHERE[] = "WHERE run_id = ?1";
static const char SQL_WHOLE_LAYERS_WHERE[] =
    "WHERE run_id = ?1 AND head = -1 AND (?2 IS NULL OR variant = ?2) "
    "ORDER BY capture, layer, variant, backend";

static const char SQL_QUANT[] =
    "SELECT capture, tensor, scale_source, layer, scale, saturated_frac, underflow_frac "
    "FROM quant_stats WHERE run_id = ?1";

/* kv_format_stats per mode and tensor over the run's layers (report_store.h),
 * in the order the sweep stored them; the scale mean weighs each layer by
 * its scales. */
static const char SQL_KV_FORMATS[] =
    "SELECT mode, tensor, format, code_bits, count(*), sum(n_values), avg(saturated_frac),"
    " max(saturated_frac), avg(underflow_frac), max(underflow_frac), max(codes_used),"
    " avg(code_entropy_bits), sum(n_scales), avg(scale_floor_frac), min(scale_min),"
    " sum(scale_mean * n_scales) / nullif(sum(n_scales), 0), max(scale_max)"
    " FROM kv_format_stats WHERE run_id = ?1 GROUP BY mode, tensor ORDER BY min(rowid)";

/* unsupported_cells per (capture, variant, reason) (report_store.h), in the
 * order stored; the layers ascending, comma-separated. */
static const char SQL_UNSUPPORTED[] =
    "SELECT capture, variant, reason, count(*), min(layer),"
    " (SELECT group_concat(layer, ',') FROM (SELECT u2.layer FROM unsupported_cells u2"
    "   WHERE u2.run_id = u.run_id AND u2.capture = u.capture AND u2.variant = u.variant"
    "   AND u2.reason = u.reason ORDER BY u2.layer))"
    " FROM unsupported_cells u WHERE run_id = ?1 GROUP BY capture, variant, reason"
    " ORDER BY min(rowid)";

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
static const char SQL_TREND_DIV_KLD[] =
    "SELECT run_id, mode, NULL, NULL, kld_mean, 0 FROM div_summaries "
    "WHERE role = 'mode' AND run_id IN (" TREND_RUNS ")";

/* ---- reading ---------------------------------------------------------------- */

/* Reads every row of sql (?1 run_id and, when bind_variant, ?2 variant) as
 * type (sql_read_all); what names the rows in messages ("read the <what>
 * of run N"). */
static pg_status read_run_rows(pg_store *s, const char *fn, const char *sql, int64_t run_id,
                               int bind_variant, const char *variant, const sql_row_type *type,
                               void **rows, size_t *n, const char *what, pg_err *err)
{
    char phrase[SQL_WHAT_MAX];
    snprintf(phrase, sizeof phrase, "read the %s of run %" PRId64, what, run_id);
    const sql_param params[] = {SQL_INT64(run_id), SQL_TEXT(variant)};
    return sql_read_all(s, fn, sql, params, bind_variant ? 2 : 1, type, rows, n, phrase, err);
}

/* ---- runs ------------------------------------------------------------------- */

static const sql_field RUN_FIELDS[] = {
    SQL_FIELD(TEXT, run_row, kind),       SQL_FIELD(TEXT, run_row, label),
    SQL_FIELD(TEXT, run_row, status),     SQL_FIELD(TEXT, run_row, started_at),
    SQL_FIELD(TEXT, run_row, finished_at), SQL_FIELD(TEXT, run_row, git_rev),
    SQL_FIELD(TEXT, run_row, host),       SQL_FIELD(TEXT, run_row, device),
    SQL_FIELD(TEXT, run_row, error),
};
static const sql_row_type RUN_ROW = SQL_ROW_TYPE(run_row, RUN_FIELDS, NULL);

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
    const sql_param params[] = {SQL_INT64(id)};
    const pg_status ps = sql_read_all(s, "report_store_run", SQL_RUN, SQL_PARAMS(params), &RUN_ROW,
                                      &v, &n, what, err);
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
    sql_row_clear(&RUN_ROW, r);
    memset(r, 0, sizeof *r);
}

/* ---- variants and layers ---------------------------------------------------- */

/* A names array is an array of one-member rows: column 0, malloc'd. */
static const sql_field NAME_FIELDS[] = {{SQL_FIELD_TEXT, 0, 0}};
static const sql_row_type NAME_ROW = {sizeof(char *), NAME_FIELDS, 1, NULL};

pg_status report_store_variants(pg_store *s, int64_t run_id, report_variant_rows which,
                                char ***names, size_t *n, pg_err *err)
{
    void *v = NULL;
    const pg_status ps =
        read_run_rows(s, "report_store_variants",
                      which == REPORT_VARIANTS_WHOLE_LAYER ? SQL_VARIANTS_WHOLE : SQL_VARIANTS_ALL,
                      run_id, 0, NULL, &NAME_ROW, &v, n, "layer_metrics variants", err);
    *names = v;
    return ps;
}

void report_names_free(char **names, size_t n)
{
    sql_rows_free(&NAME_ROW, names, n);
}

static const sql_field LAYER_FIELDS[] = {SQL_FIELD(TEXT, run_layer_row, capture),
                                         SQL_FIELD(INT, run_layer_row, layer)};
static const sql_row_type LAYER_ROW = SQL_ROW_TYPE(run_layer_row, LAYER_FIELDS, NULL);

pg_status report_store_layers(pg_store *s, int64_t run_id, run_layer_row **rows, size_t *n,
                              pg_err *err)
{
    void *v = NULL;
    const pg_status ps = read_run_rows(s, "report_store_layers", SQL_LAYERS, run_id, 0, NULL,
                                       &LAYER_ROW, &v, n, "layers", err);
    *rows = v;
    return ps;
}

void run_layer_rows_free(run_layer_row *rows, size_t n)
{
    sql_rows_free(&LAYER_ROW, rows, n);
}

/* ---- layer metrics ------------------------------------------------------------ */

/* The key columns of a layer_metric_row, in LAYER_METRIC_FIELDS' order; the
 * metric columns follow them (read by finish_layer_metric). */
#define LAYER_METRIC_KEYS "capture, variant, backend, layer, head"
static const sql_field LAYER_METRIC_FIELDS[] = {
    SQL_FIELD(TEXT, layer_metric_row, capture), SQL_FIELD(TEXT, layer_metric_row, variant),
    SQL_FIELD(TEXT, layer_metric_row, backend), SQL_FIELD(INT, layer_metric_row, layer),
    SQL_FIELD(INT64, layer_metric_row, head),
};
#define LAYER_METRIC_FIRST ((int)(sizeof LAYER_METRIC_FIELDS / sizeof LAYER_METRIC_FIELDS[0]))
/* Room for a reader's SQL. */
#define LAYER_METRIC_SQL_MAX 1024

/* Reads the metric columns, which follow the key columns, into the row. */
static pg_status finish_layer_metric(sqlite3_stmt *st, void *row, const char *what, pg_err *err)
{
    (void)what, (void)err;
    layer_metric_row *r = row;
    sql_col_metrics(st, LAYER_METRIC_FIRST, &r->v);
    return PG_OK;
}

static const sql_row_type LAYER_METRIC_ROW =
    SQL_ROW_TYPE(layer_metric_row, LAYER_METRIC_FIELDS, finish_layer_metric);

/* The SELECT of layer_metric_rows with where (its WHERE and ORDER BY) into
 * buf: the key columns, then every metric column by name. PG_ERR_INTERNAL
 * when it does not fit. */
static pg_status layer_metric_sql(char *buf, size_t len, const char *where, pg_err *err)
{
    char cols[SQL_METRIC_COLUMNS_MAX];
    pg_status ps = sql_metric_columns(cols, sizeof cols, err);
    if (ps != PG_OK) return ps;
    const int w = snprintf(buf, len, "SELECT " LAYER_METRIC_KEYS ", %s FROM layer_metrics %s",
                           cols, where);
    if (w < 0 || (size_t)w >= len)
        return pg_fail(err, PG_ERR_INTERNAL, "report_store: a layer_metrics read needs more "
                       "than %zu bytes", len);
    return PG_OK;
}

/* read_run_rows of layer_metric_rows: the SELECT with where. */
static pg_status read_layer_metric_rows(pg_store *s, const char *fn, const char *where,
                                        int64_t run_id, int bind_variant, const char *variant,
                                        layer_metric_row **rows, size_t *n, const char *what,
                                        pg_err *err)
{
    char sql[LAYER_METRIC_SQL_MAX];
    void *v = NULL;
    *n = 0;
    pg_status ps = layer_metric_sql(sql, sizeof sql, where, err);
    if (ps == PG_OK)
        ps = read_run_rows(s, fn, sql, run_id, bind_variant, variant, &LAYER_METRIC_ROW, &v, n,
                           what, err);
    *rows = v;
    return ps;
}

pg_status report_store_layer_metrics(pg_store *s, int64_t run_id, layer_metric_row **rows,
                                     size_t *n, pg_err *err)
{
    return read_layer_metric_rows(s, "report_store_layer_metrics", SQL_LAYER_METRICS_WHERE,
                                  run_id, 0, NULL, rows, n, "layer_metrics rows", err);
}

pg_status report_store_whole_layers(pg_store *s, int64_t run_id, const char *variant,
                                    layer_metric_row **rows, size_t *n, pg_err *err)
{
    return read_layer_metric_rows(s, "report_store_whole_layers", SQL_WHOLE_LAYERS_WHERE,
                                  run_id, 1, variant, rows, n, "whole-layer layer_metrics rows",
                                  err);
}

void layer_metric_row_clear(layer_metric_row *r)
{
    sql_row_clear(&LAYER_METRIC_ROW, r);
}

void layer_metric_rows_free(layer_metric_row *rows, size_t n)
{
    sql_rows_free(&LAYER_METRIC_ROW, rows, n);
}

/* ---- quant stats ---------------------------------------------------------------- */

static const sql_field QUANT_FIELDS[] = {
    SQL_FIELD(TEXT, quant_stat_row, capture),      SQL_FIELD(TEXT, quant_stat_row, tensor),
    SQL_FIELD(TEXT, quant_stat_row, scale_source), SQL_FIELD(INT, quant_stat_row, layer),
    SQL_FIELD(REAL, quant_stat_row, scale),        SQL_FIELD(REAL, quant_stat_row, saturated_frac),
    SQL_FIELD(REAL, quant_stat_row, underflow_frac),
};
static const sql_row_type QUANT_ROW = SQL_ROW_TYPE(quant_stat_row, QUANT_FIELDS, NULL);

pg_status report_store_quant(pg_store *s, int64_t run_id, quant_stat_row **rows, size_t *n,
                             pg_err *err)
{
    void *v = NULL;
    const pg_status ps = read_run_rows(s, "report_store_quant", SQL_QUANT, run_id, 0, NULL,
                                       &QUANT_ROW, &v, n, "quant_stats rows", err);
    *rows = v;
    return ps;
}

void quant_stat_rows_free(quant_stat_row *rows, size_t n)
{
    sql_rows_free(&QUANT_ROW, rows, n);
}

/* ---- kv format stats ---------------------------------------------------------- */

static const sql_field KV_FORMAT_FIELDS[] = {
    SQL_FIELD(TEXT, kv_format_summary, mode),
    SQL_FIELD(TEXT, kv_format_summary, tensor),
    SQL_FIELD(TEXT, kv_format_summary, format),
    SQL_FIELD(INT, kv_format_summary, code_bits),
    SQL_FIELD(INT, kv_format_summary, n_layers),
    SQL_FIELD(INT64, kv_format_summary, n_values),
    SQL_FIELD(REAL, kv_format_summary, saturated_mean),
    SQL_FIELD(REAL, kv_format_summary, saturated_max),
    SQL_FIELD(REAL, kv_format_summary, underflow_mean),
    SQL_FIELD(REAL, kv_format_summary, underflow_max),
    SQL_FIELD(INT, kv_format_summary, codes_used),
    SQL_FIELD(REAL, kv_format_summary, entropy_bits),
    SQL_FIELD(INT64, kv_format_summary, n_scales),
    SQL_FIELD(REAL, kv_format_summary, scale_floor_frac),
    SQL_FIELD(REAL, kv_format_summary, scale_min),
    SQL_FIELD(REAL, kv_format_summary, scale_mean),
    SQL_FIELD(REAL, kv_format_summary, scale_max),
};
static const sql_row_type KV_FORMAT_ROW = SQL_ROW_TYPE(kv_format_summary, KV_FORMAT_FIELDS, NULL);

pg_status report_store_kv_formats(pg_store *s, int64_t run_id, kv_format_summary **rows,
                                  size_t *n, pg_err *err)
{
    void *v = NULL;
    const pg_status ps = read_run_rows(s, "report_store_kv_formats", SQL_KV_FORMATS, run_id, 0,
                                       NULL, &KV_FORMAT_ROW, &v, n, "kv_format_stats rows", err);
    *rows = v;
    return ps;
}

void kv_format_summaries_free(kv_format_summary *rows, size_t n)
{
    sql_rows_free(&KV_FORMAT_ROW, rows, n);
}

/* ---- unsupported cells ------------------------------------------------------- */

static const sql_field UNSUPPORTED_FIELDS[] = {
    SQL_FIELD(TEXT, unsupported_summary, capture),
    SQL_FIELD(TEXT, unsupported_summary, variant),
    SQL_FIELD(TEXT, unsupported_summary, reason),
    SQL_FIELD(INT, unsupported_summary, n_layers),
    SQL_FIELD(INT, unsupported_summary, first_layer),
    SQL_FIELD(TEXT, unsupported_summary, layers),
};
static const sql_row_type UNSUPPORTED_ROW =
    SQL_ROW_TYPE(unsupported_summary, UNSUPPORTED_FIELDS, NULL);

pg_status report_store_unsupported(pg_store *s, int64_t run_id, unsupported_summary **rows,
                                   size_t *n, pg_err *err)
{
    void *v = NULL;
    const pg_status ps = read_run_rows(s, "report_store_unsupported", SQL_UNSUPPORTED, run_id, 0,
                                       NULL, &UNSUPPORTED_ROW, &v, n, "unsupported_cells rows",
                                       err);
    *rows = v;
    return ps;
}

void unsupported_summaries_free(unsupported_summary *rows, size_t n)
{
    sql_rows_free(&UNSUPPORTED_ROW, rows, n);
}

/* ---- flags -------------------------------------------------------------------- */

/* SQL_FLAGS' columns; an integer's NULL reads as -1. */
static const sql_field FLAG_FIELDS[] = {
    SQL_FIELD_OR(INT64, flag_row, baseline_run_id, -1), SQL_FIELD(TEXT, flag_row, scope),
    SQL_FIELD(TEXT, flag_row, capture),     SQL_FIELD_OR(INT, flag_row, layer, -1),
    SQL_FIELD(TEXT, flag_row, variant),     SQL_FIELD(TEXT, flag_row, eval),
    SQL_FIELD(TEXT, flag_row, mode),        SQL_FIELD(TEXT, flag_row, effort),
    SQL_FIELD(TEXT, flag_row, metric),      SQL_FIELD(REAL, flag_row, value),
    SQL_FIELD(REAL, flag_row, baseline_value), SQL_FIELD(REAL, flag_row, threshold),
    SQL_FIELD(TEXT, flag_row, verdict),     SQL_FIELD(TEXT, flag_row, message),
};
static const sql_row_type FLAG_ROW = SQL_ROW_TYPE(flag_row, FLAG_FIELDS, NULL);

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
    ps = read_run_rows(s, "report_store_flags", SQL_FLAGS, run_id, 0, NULL, &FLAG_ROW, &v, n,
                       "flags", err);
    *rows = v;
    return ps;
}

void flag_rows_free(flag_row *rows, size_t n)
{
    sql_rows_free(&FLAG_ROW, rows, n);
}

/* ---- the trend ----------------------------------------------------------------- */

/* Reads every row of sql, q bound to the trend subquery's ?1 .. ?4, as type. */
static pg_status read_trend_rows(pg_store *s, const char *fn, const char *sql,
                                 const trend_query *q, const sql_row_type *type, void **rows,
                                 size_t *n, const char *what, pg_err *err)
{
    *rows = NULL;
    *n = 0;
    if (q == NULL || q->kind == NULL)
        return pg_fail(err, PG_ERR_INTERNAL, "%s: no trend query or kind", fn);
    char phrase[SQL_WHAT_MAX];
    snprintf(phrase, sizeof phrase, "read the %s of the trend up to run %" PRId64, what,
             q->last_id);
    const sql_param params[] = {SQL_TEXT(q->kind), SQL_TEXT(q->label), SQL_INT64(q->last_id),
                                SQL_INT64(q->n_runs)};
    return sql_read_all(s, fn, sql, SQL_PARAMS(params), type, rows, n, phrase, err);
}

static const sql_field TREND_RUN_FIELDS[] = {SQL_FIELD(INT64, trend_run_row, id),
                                             SQL_FIELD(TEXT, trend_run_row, started_at),
                                             SQL_FIELD(TEXT, trend_run_row, git_rev)};
static const sql_row_type TREND_RUN_ROW = SQL_ROW_TYPE(trend_run_row, TREND_RUN_FIELDS, NULL);

pg_status report_store_trend_runs(pg_store *s, const trend_query *q, trend_run_row **rows,
                                  size_t *n, pg_err *err)
{
    void *v = NULL;
    const pg_status ps = read_trend_rows(s, "report_store_trend_runs", SQL_TREND_RUNS, q,
                                         &TREND_RUN_ROW, &v, n, "runs", err);
    *rows = v;
    return ps;
}

void trend_run_rows_free(trend_run_row *rows, size_t n)
{
    sql_rows_free(&TREND_RUN_ROW, rows, n);
}

static const sql_field TREND_VALUE_FIELDS[] = {
    SQL_FIELD(INT64, trend_value_row, run_id), SQL_FIELD(TEXT, trend_value_row, name),
    SQL_FIELD(TEXT, trend_value_row, mode),    SQL_FIELD(TEXT, trend_value_row, effort),
    SQL_FIELD(REAL, trend_value_row, value),   SQL_FIELD(INT64, trend_value_row, nonfinite),
};
static const sql_row_type TREND_VALUE_ROW =
    SQL_ROW_TYPE(trend_value_row, TREND_VALUE_FIELDS, NULL);

pg_status report_store_trend_values(pg_store *s, const trend_query *q, trend_source source,
                                    trend_value_row **rows, size_t *n, pg_err *err)
{
    const char *sql = source == TREND_LAYER_REL_L2 ? SQL_TREND_REL_L2
                      : source == TREND_DIV_KLD    ? SQL_TREND_DIV_KLD
                                                   : SQL_TREND_ACCURACY;
    const char *what = source == TREND_LAYER_REL_L2 ? "layer_metrics rows"
                       : source == TREND_DIV_KLD    ? "div_summaries rows"
                                                    : "eval_scores rows";
    void *v = NULL;
    const pg_status ps = read_trend_rows(s, "report_store_trend_values", sql, q,
                                         &TREND_VALUE_ROW, &v, n, what, err);
    *rows = v;
    return ps;
}

void trend_value_rows_free(trend_value_row *rows, size_t n)
{
    sql_rows_free(&TREND_VALUE_ROW, rows, n);
}
