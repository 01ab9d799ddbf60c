/* diagnosis_store.c: the ext_diagnosis table (see diagnosis_store.h). */
#include "diagnosis_store.h"

#include "sql_util.h"

#include <inttypes.h>
#include <math.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char SQL_PUT[] =
    "INSERT INTO ext_diagnosis (run_id, capture, layer, ext_name, hypothesis, rel_l2, not_run)"
    " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)";
static const char SQL_COUNT[] =
    "SELECT layer, count(*) FROM ext_diagnosis WHERE run_id = ?1 AND capture = ?2 GROUP BY layer";
static const char SQL_LOAD[] =
    "SELECT capture, layer, ext_name, hypothesis, rel_l2, not_run FROM ext_diagnosis"
    " WHERE run_id = ?1 ORDER BY capture, ext_name, layer, rowid";

pg_status diagnosis_store_put(pg_store *s, int64_t run_id, const char *capture, int layer,
                              const char *ext_name, const char *hypothesis, double rel_l2,
                              const char *not_run, pg_err *err)
{
    sqlite3 *db = sql_handle_or_fail(s, "diagnosis_store_put", err);
    if (db == NULL) return PG_ERR_INTERNAL;
    if (capture == NULL || ext_name == NULL || hypothesis == NULL)
        return pg_fail(err, PG_ERR_INTERNAL, "diagnosis_store_put: capture, ext or hypothesis "
                       "missing");
    char what[SQL_WHAT_MAX];
    snprintf(what, sizeof what, "ext_diagnosis (run %" PRId64 ", capture '%s', layer %d, ext:%s, "
             "%s)", run_id, capture, layer, ext_name, hypothesis);
    if (not_run == NULL && !(rel_l2 >= 0))
        return pg_fail(err, PG_ERR_NUMERIC, "%s: %s: rel_l2 is %g (a hypothesis that ran has a "
                       "distance >= 0)", sql_db_path(db), what, rel_l2);
    sqlite3_stmt *st = NULL;
    pg_status ps = sql_cached(s, SQL_PUT, &st, err);
    if (ps != PG_OK) return ps;
    sql_binder b = sql_bind_start(st);
    sql_bind_int64(&b, run_id);
    sql_bind_text(&b, capture);
    sql_bind_int64(&b, layer);
    sql_bind_text(&b, ext_name);
    sql_bind_text(&b, hypothesis);
    if (not_run == NULL) sql_bind_double(&b, rel_l2);
    else sql_bind_null(&b);
    sql_bind_text(&b, not_run);
    return sql_step_write(db, &b, what, err);
}

pg_status diagnosis_store_has_table(pg_store *s, int *has, pg_err *err)
{
    sqlite3 *db = sql_handle_or_fail(s, "diagnosis_store_has_table", err);
    if (db == NULL) return PG_ERR_INTERNAL;
    if (has == NULL) return pg_fail(err, PG_ERR_INTERNAL, "diagnosis_store_has_table: has is NULL");
    return sql_table_exists(db, "ext_diagnosis", has, err);
}

pg_status diagnosis_store_count_layers(pg_store *s, int64_t run_id, const char *capture,
                                       int n_layers, int64_t *counts, pg_err *err)
{
    return sql_count_layers(s, "diagnosis_store_count_layers", SQL_COUNT, "ext_diagnosis",
                            run_id, capture, n_layers, counts, err);
}

/* SQL_LOAD's columns. */
static const sql_field ROW_FIELDS[] = {
    SQL_FIELD(TEXT, diagnosis_row, capture),  SQL_FIELD(INT, diagnosis_row, layer),
    SQL_FIELD(TEXT, diagnosis_row, ext_name), SQL_FIELD(TEXT, diagnosis_row, hypothesis),
    SQL_FIELD(REAL, diagnosis_row, rel_l2),   SQL_FIELD(TEXT, diagnosis_row, not_run),
};
static const sql_row_type ROW_TYPE = SQL_ROW_TYPE(diagnosis_row, ROW_FIELDS, NULL);

void diagnosis_rows_free(diagnosis_row *rows, size_t n)
{
    sql_rows_free(&ROW_TYPE, rows, n);
}

pg_status diagnosis_store_load(pg_store *s, int64_t run_id, diagnosis_row **out, size_t *n,
                               pg_err *err)
{
    if (out == NULL || n == NULL)
        return pg_fail(err, PG_ERR_INTERNAL, "diagnosis_store_load: out or n is NULL");
    *out = NULL;
    *n = 0;
    int has = 0;
    pg_status ps = diagnosis_store_has_table(s, &has, err);
    if (ps != PG_OK || !has) return ps;
    char what[SQL_WHAT_MAX];
    snprintf(what, sizeof what, "read the ext_diagnosis rows of run %" PRId64, run_id);
    const sql_param params[] = {SQL_INT64(run_id)};
    void *v = NULL;
    ps = sql_read_all(s, "diagnosis_store_load", SQL_LOAD, SQL_PARAMS(params), &ROW_TYPE, &v, n,
                      what, err);
    *out = v;
    return ps;
}
