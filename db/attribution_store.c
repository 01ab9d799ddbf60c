/* attribution_store.c: the attribution table's SQL (see attribution_store.h). */
#include "attribution_store.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sql_util.h"

const char *const attribution_tensors[ATTRIBUTION_N_TENSORS] = {"none", "q", "k", "v", "p",
                                                                "all"};

int attribution_tensor_index(const char *name)
{
    for (int i = 0; name != NULL && i < ATTRIBUTION_N_TENSORS; i++)
        if (strcmp(name, attribution_tensors[i]) == 0) return i;
    return -1;
}

static const char SQL_PUT[] =
    "INSERT INTO attribution (run_id, capture, layer, variant, tensor, rel_l2) "
    "VALUES (?1, ?2, ?3, ?4, ?5, ?6)";

static const char SQL_COUNT[] =
    "SELECT layer, count(*) FROM attribution WHERE run_id = ?1 AND capture = ?2 GROUP BY layer";

/* The order of attribution_tensors, spelled for ORDER BY. */
static const char SQL_LOAD[] =
    "SELECT capture, layer, variant, tensor, rel_l2 FROM attribution WHERE run_id = ?1 "
    "ORDER BY capture, layer, variant, "
    "CASE tensor WHEN 'none' THEN 0 WHEN 'q' THEN 1 WHEN 'k' THEN 2 WHEN 'v' THEN 3 "
    "WHEN 'p' THEN 4 ELSE 5 END";

pg_status attribution_store_put(pg_store *s, int64_t run_id, const char *capture, int layer,
                                const char *variant, const char *tensor, double rel_l2,
                                pg_err *err)
{
    sqlite3 *db = sql_handle_or_fail(s, "attribution_store_put", err);
    if (db == NULL) return PG_ERR_INTERNAL;
    if (capture == NULL || variant == NULL || tensor == NULL)
        return pg_fail(err, PG_ERR_INTERNAL, "attribution_store_put: capture, variant or tensor "
                                             "is NULL");
    if (isnan(rel_l2))
        return pg_fail(err, PG_ERR_NUMERIC,
                       "%s: attribution (run %" PRId64 ", capture '%s', layer %d, variant '%s', "
                       "tensor '%s'): rel_l2 is NaN", sql_db_path(db), run_id, capture, layer,
                       variant, tensor);
    sqlite3_stmt *st = NULL;
    pg_status ps = sql_cached(s, SQL_PUT, &st, err);
    if (ps != PG_OK) return ps;
    sql_binder b = sql_bind_start(st);
    sql_bind_int64(&b, run_id);
    sql_bind_text(&b, capture);
    sql_bind_int64(&b, layer);
    sql_bind_text(&b, variant);
    sql_bind_text(&b, tensor);
    sql_bind_double(&b, rel_l2);
    if (b.rc != SQLITE_OK || sqlite3_step(st) != SQLITE_DONE)
        ps = sql_fail(db, err,
                      "insert attribution (run %" PRId64 ", capture '%s', layer %d, variant "
                      "'%s', tensor '%s')", run_id, capture, layer, variant, tensor);
    sql_release(st);
    return ps;
}

pg_status attribution_store_layer_counts(pg_store *s, int64_t run_id, const char *capture,
                                         int n_layers, int64_t *counts, pg_err *err)
{
    sqlite3 *db = sql_handle_or_fail(s, "attribution_store_layer_counts", err);
    if (db == NULL) return PG_ERR_INTERNAL;
    if (capture == NULL || counts == NULL || n_layers < 0)
        return pg_fail(err, PG_ERR_INTERNAL,
                       "attribution_store_layer_counts: capture or counts missing");
    memset(counts, 0, (size_t)n_layers * sizeof *counts);
    sqlite3_stmt *st = NULL;
    pg_status ps = sql_cached(s, SQL_COUNT, &st, err);
    if (ps != PG_OK) return ps;
    sql_binder b = sql_bind_start(st);
    sql_bind_int64(&b, run_id);
    sql_bind_text(&b, capture);
    int rc = b.rc;
    while (ps == PG_OK && rc == SQLITE_OK && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        const int64_t layer = sqlite3_column_int64(st, 0);
        if (layer < 0 || layer >= n_layers) {
            ps = pg_fail(err, PG_ERR_DB,
                         "%s: run %" PRId64 " has attribution rows for layer %" PRId64
                         " of capture '%s', which has %d layers",
                         sql_db_path(db), run_id, layer, capture, n_layers);
            break;
        }
        counts[layer] = sqlite3_column_int64(st, 1);
        rc = SQLITE_OK;
    }
    if (ps == PG_OK && rc != SQLITE_DONE)
        ps = sql_fail(db, err, "count the attribution rows of run %" PRId64 ", capture '%s'",
                      run_id, capture);
    sql_release(st);
    return ps;
}

void attribution_rows_free(attribution_rows *r)
{
    if (r == NULL) return;
    for (size_t i = 0; i < r->n; i++) {
        free(r->rows[i].capture);
        free(r->rows[i].variant);
    }
    free(r->rows);
    *r = (attribution_rows){0};
}

/* A malloc'd copy of column i's text ("" for NULL), or NULL when out of memory. */
static char *column_dup(sqlite3_stmt *st, int i)
{
    const unsigned char *t = sqlite3_column_text(st, i);
    return strdup(t != NULL ? (const char *)t : "");
}

pg_status attribution_store_load(pg_store *s, int64_t run_id, attribution_rows *out,
                                 pg_err *err)
{
    sqlite3 *db = sql_handle_or_fail(s, "attribution_store_load", err);
    if (db == NULL) return PG_ERR_INTERNAL;
    if (out == NULL) return pg_fail(err, PG_ERR_INTERNAL, "attribution_store_load: out is NULL");
    *out = (attribution_rows){0};
    int has = 0;
    pg_status ps = sql_table_exists(db, "attribution", &has, err);
    if (ps != PG_OK || !has) return ps;  /* no table: older than migration 11 */
    sqlite3_stmt *st = NULL;
    if ((ps = sql_prepare(db, SQL_LOAD, &st, err)) != PG_OK) return ps;
    int rc = SQLITE_DONE;
    size_t cap = 0;
    sqlite3_bind_int64(st, 1, run_id);
    while (ps == PG_OK && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (out->n == cap) {
            const size_t grown = cap ? 2 * cap : 64;
            attribution_row *p = realloc(out->rows, grown * sizeof *p);
            if (p == NULL) {
                ps = pg_fail(err, PG_ERR_NOMEM, "attribution rows");
                break;
            }
            out->rows = p;
            cap = grown;
        }
        attribution_row *r = &out->rows[out->n];
        const char *tensor = (const char *)sqlite3_column_text(st, 3);
        *r = (attribution_row){.layer = sqlite3_column_int(st, 1),
                               .tensor = attribution_tensor_index(tensor),
                               .rel_l2 = sqlite3_column_double(st, 4)};
        r->capture = column_dup(st, 0);
        r->variant = column_dup(st, 2);
        out->n++;
        if (r->capture == NULL || r->variant == NULL)
            ps = pg_fail(err, PG_ERR_NOMEM, "attribution rows");
        else if (r->tensor < 0)
            ps = pg_fail(err, PG_ERR_DB, "%s: run %" PRId64 ": attribution tensor '%s' is none "
                         "of none, q, k, v, p, all", sql_db_path(db), run_id,
                         tensor ? tensor : "NULL");
    }
    if (ps == PG_OK && rc != SQLITE_DONE)
        ps = sql_fail(db, err, "read the attribution rows of run %" PRId64, run_id);
    sqlite3_finalize(st);
    return ps;
}
