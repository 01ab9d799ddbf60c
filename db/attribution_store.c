/* attribution_store.c: the attribution table's SQL (see attribution_store.h). */
#include "attribution_store.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sql_util.h"
#include "base/variant.h"

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
    /* A quantizing profile's full name (base/variant.h), as the schema's
     * CHECK required before migration 17. */
    const variant_profile_id prof = variant_name_profile(variant);
    if (prof == VARIANT_PROFILE_COUNT || strcmp(variant_profile_name(prof), variant) != 0 ||
        !pg_mode_quantizes(variant_profile_mode(prof)))
        return pg_fail(err, PG_ERR_INTERNAL,
                       "%s: attribution (run %" PRId64 ", capture '%s', layer %d): variant '%s' "
                       "is no quantizing profile's full name", sql_db_path(db), run_id, capture,
                       layer, variant);
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
    return sql_count_layers(s, "attribution_store_layer_counts", SQL_COUNT, "attribution",
                            run_id, capture, n_layers, counts, err);
}

/* SQL_LOAD's columns but the tensor and rel_l2, which finish_row reads. */
static const sql_field ROW_FIELDS[] = {SQL_FIELD(TEXT, attribution_row, capture),
                                       SQL_FIELD(INT, attribution_row, layer),
                                       SQL_FIELD(TEXT, attribution_row, variant)};

/* The columns of the tensor and of rel_l2 in SQL_LOAD. */
#define LOAD_TENSOR_COLUMN 3
#define LOAD_REL_L2_COLUMN 4

/* The tensor's index (PG_ERR_DB for a name this binary does not know) and rel_l2. */
static pg_status finish_row(sqlite3_stmt *st, void *row, const char *what, pg_err *err)
{
    attribution_row *r = row;
    const char *tensor = (const char *)sqlite3_column_text(st, LOAD_TENSOR_COLUMN);
    r->tensor = attribution_tensor_index(tensor);
    r->rel_l2 = sqlite3_column_double(st, LOAD_REL_L2_COLUMN);
    if (r->tensor >= 0) return PG_OK;
    return pg_fail(err, PG_ERR_DB, "%s: %s: attribution tensor '%s' is none of none, q, k, v, p, "
                   "all", sql_db_path(sqlite3_db_handle(st)), what, tensor ? tensor : "NULL");
}

static const sql_row_type ROW_TYPE = SQL_ROW_TYPE(attribution_row, ROW_FIELDS, finish_row);

void attribution_rows_free(attribution_rows *r)
{
    if (r == NULL) return;
    sql_rows_free(&ROW_TYPE, r->rows, r->n);
    *r = (attribution_rows){0};
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
    char what[SQL_WHAT_MAX];
    snprintf(what, sizeof what, "read the attribution rows of run %" PRId64, run_id);
    const sql_param params[] = {SQL_INT64(run_id)};
    void *v = NULL;
    ps = sql_read_all(s, "attribution_store_load", SQL_LOAD, SQL_PARAMS(params), &ROW_TYPE, &v,
                      &out->n, what, err);
    out->rows = v;
    return ps;
}
