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

/* The query's columns. */
static const sql_field HISTORY_FIELDS[] = {
    SQL_FIELD(INT64, history_row, run_id), SQL_FIELD(TEXT, history_row, started_at),
    SQL_FIELD(TEXT, history_row, git_rev), SQL_FIELD(TEXT, history_row, label),
    SQL_FIELD(INT, history_row, layer),    SQL_FIELD(REAL, history_row, value),
};
static const sql_row_type HISTORY_ROW = SQL_ROW_TYPE(history_row, HISTORY_FIELDS, NULL);

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
    char sql[HISTORY_SQL_MAX];
    snprintf(sql, sizeof sql, SQL_HISTORY_FMT, pg_metric_name(q->metric));
    const sql_param params[] = {SQL_TEXT(q->variant), SQL_TEXT(q->label), SQL_TEXT(q->capture),
                                SQL_TEXT(q->backend),
                                q->layer >= 0 ? SQL_INT64(q->layer) : SQL_NULL};
    void *v = NULL;
    const pg_status ps = sql_read_all(s, "history_store_read", sql, SQL_PARAMS(params),
                                      &HISTORY_ROW, &v, n, "read the layer_metrics history", err);
    *rows = v;
    return ps;
}

void history_rows_free(history_row *rows, size_t n)
{
    sql_rows_free(&HISTORY_ROW, rows, n);
}
