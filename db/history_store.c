/* history_store.c: the SQL behind `precgate history` (see history_store.h). */
#include "history_store.h"

#include <stdio.h>
#include <stdlib.h>

#include "sql_util.h"

/* Length of the query with the metric's column spelled in. */
#define HISTORY_SQL_MAX 1024

/* The query, %s being the metric's column (pg_metric_name: a fixed table,
 * never user text). */
#define SQL_HISTORY_FMT                                                                           \
    "SELECT r.id, r.started_at, r.git_rev, r.label, lm.layer, lm.%s "                             \
    "FROM runs r JOIN layer_metrics lm ON lm.run_id = r.id "                                      \
    "WHERE r.status = 'complete' AND lm.head = -1 AND lm.variant = ?1 "                           \
    "AND (?2 IS NULL OR r.label = ?2) AND (?3 IS NULL OR lm.capture = ?3) "                       \
    "AND (?4 IS NULL OR lm.backend = ?4) AND (?5 IS NULL OR lm.layer = ?5) "                      \
    "ORDER BY r.started_at, r.id, lm.capture, lm.layer, lm.backend"

/* Fills one history_row from the query's row; 0 when out of memory. */
static int fill_history(sqlite3_stmt *st, void *row)
{
    history_row *r = row;
    int oom = 0;
    r->run_id = sqlite3_column_int64(st, 0);
    r->started_at = sql_col_dup(st, 1, &oom);
    r->git_rev = sql_col_dup(st, 2, &oom);
    r->label = sql_col_dup(st, 3, &oom);
    r->layer = sqlite3_column_int(st, 4);
    r->value = sql_col_real(st, 5);
    return !oom;
}

pg_status history_store_read(pg_store *s, const history_query *q, history_row **rows, size_t *n,
                             pg_err *err)
{
    if (q == NULL || q->variant == NULL || rows == NULL || n == NULL)
        return pg_fail(err, PG_ERR_INTERNAL,
                       "history_store_read: query, variant, rows or n is NULL");
    *rows = NULL;
    *n = 0;
    if ((int)q->metric < 0 || q->metric >= PG_METRIC_COUNT)
        return pg_fail(err, PG_ERR_INTERNAL, "history_store_read: metric %d is not a metric",
                       (int)q->metric);
    sqlite3 *db = sql_handle_or_fail(s, "history_store_read", err);
    if (db == NULL) return PG_ERR_INTERNAL;
    char sql[HISTORY_SQL_MAX];
    snprintf(sql, sizeof sql, SQL_HISTORY_FMT, pg_metric_name(q->metric));
    sqlite3_stmt *st = NULL;
    pg_status ps = sql_prepare(db, sql, &st, err);
    if (ps != PG_OK) return ps;
    sql_binder b = sql_bind_start(st);
    sql_bind_text(&b, q->variant);
    sql_bind_text(&b, q->label);
    sql_bind_text(&b, q->capture);
    sql_bind_text(&b, q->backend);
    if (q->layer >= 0) sql_bind_int64(&b, q->layer);
    else sql_bind_null(&b);
    void *v = NULL;
    if (b.rc != SQLITE_OK) ps = sql_fail(db, err, "read the layer_metrics history");
    else ps = sql_read_rows(db, st, sizeof **rows, &v, n, fill_history,
                            "read the layer_metrics history", err);
    *rows = v;
    sqlite3_finalize(st);
    return ps;
}

void history_rows_free(history_row *rows, size_t n)
{
    for (size_t i = 0; rows != NULL && i < n; i++) {
        free(rows[i].started_at);
        free(rows[i].git_rev);
        free(rows[i].label);
    }
    free(rows);
}
