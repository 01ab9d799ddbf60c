/* diagnosis_store.c: the ext_diagnosis table (see diagnosis_store.h). */
#include "diagnosis_store.h"

#include "sql_util.h"

#include <inttypes.h>
#include <math.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* First capacity of the loaded row array. */
#define DIAGNOSIS_ROWS_INITIAL 64

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
    sqlite3 *db = sql_handle_or_fail(s, "diagnosis_store_count_layers", err);
    if (db == NULL) return PG_ERR_INTERNAL;
    if (capture == NULL || counts == NULL || n_layers < 0)
        return pg_fail(err, PG_ERR_INTERNAL, "diagnosis_store_count_layers: capture or counts "
                       "missing");
    memset(counts, 0, (size_t)n_layers * sizeof *counts);
    int has = 0;
    pg_status ps = diagnosis_store_has_table(s, &has, err);
    if (ps != PG_OK || !has) return ps;
    sqlite3_stmt *st = NULL;
    if ((ps = sql_cached(s, SQL_COUNT, &st, err)) != PG_OK) return ps;
    sql_binder b = sql_bind_start(st);
    sql_bind_int64(&b, run_id);
    sql_bind_text(&b, capture);
    int rc = b.rc;
    while (ps == PG_OK && rc == SQLITE_OK && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        const int64_t layer = sqlite3_column_int64(st, 0);
        if (layer < 0 || layer >= n_layers) {
            ps = pg_fail(err, PG_ERR_DB, "%s: run %" PRId64 " has ext_diagnosis rows for layer %"
                         PRId64 " of capture '%s', which has %d layers", sql_db_path(db), run_id,
                         layer, capture, n_layers);
            break;
        }
        counts[layer] = sqlite3_column_int64(st, 1);
        rc = SQLITE_OK;
    }
    if (ps == PG_OK && rc != SQLITE_DONE)
        ps = sql_fail(db, err, "count the ext_diagnosis rows of run %" PRId64 ", capture '%s'",
                      run_id, capture);
    sql_release(st);
    return ps;
}

void diagnosis_rows_free(diagnosis_row *rows, size_t n)
{
    if (rows == NULL) return;
    for (size_t i = 0; i < n; i++) {
        free(rows[i].capture);
        free(rows[i].ext_name);
        free(rows[i].hypothesis);
        free(rows[i].not_run);
    }
    free(rows);
}

pg_status diagnosis_store_load(pg_store *s, int64_t run_id, diagnosis_row **out, size_t *n,
                               pg_err *err)
{
    sqlite3 *db = sql_handle_or_fail(s, "diagnosis_store_load", err);
    if (db == NULL) return PG_ERR_INTERNAL;
    if (out == NULL || n == NULL)
        return pg_fail(err, PG_ERR_INTERNAL, "diagnosis_store_load: out or n is NULL");
    *out = NULL;
    *n = 0;
    int has = 0;
    pg_status ps = diagnosis_store_has_table(s, &has, err);
    if (ps != PG_OK || !has) return ps;
    sqlite3_stmt *st = NULL;
    if ((ps = sql_prepare(db, SQL_LOAD, &st, err)) != PG_OK) return ps;
    int rc = sqlite3_bind_int64(st, 1, run_id);
    size_t cap = 0;
    while (ps == PG_OK && rc == SQLITE_OK && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (*n == cap) {
            const size_t want = cap ? 2 * cap : DIAGNOSIS_ROWS_INITIAL;
            diagnosis_row *grown = realloc(*out, want * sizeof *grown);
            if (grown == NULL) {
                ps = pg_fail(err, PG_ERR_NOMEM, "ext_diagnosis of run %" PRId64 ": out of memory",
                             run_id);
                break;
            }
            *out = grown;
            cap = want;
        }
        diagnosis_row *r = &(*out)[*n];
        int oom = 0;
        *r = (diagnosis_row){.capture = sql_col_dup(st, 0, &oom),
                             .layer = sqlite3_column_int(st, 1),
                             .ext_name = sql_col_dup(st, 2, &oom),
                             .hypothesis = sql_col_dup(st, 3, &oom),
                             .rel_l2 = sql_col_real(st, 4),
                             .not_run = sql_col_dup(st, 5, &oom)};
        (*n)++;
        if (oom)
            ps = pg_fail(err, PG_ERR_NOMEM, "ext_diagnosis of run %" PRId64 ": out of memory",
                         run_id);
        rc = SQLITE_OK;
    }
    if (ps == PG_OK && rc != SQLITE_DONE)
        ps = sql_fail(db, err, "read the ext_diagnosis rows of run %" PRId64, run_id);
    sqlite3_finalize(st);
    return ps;
}
