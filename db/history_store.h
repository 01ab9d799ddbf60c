/*
 * history_store.h: the rows behind `precgate history`: one whole-layer
 * (head -1) metric of one variant over the complete runs, oldest first.
 *
 * Reads only, with bound parameters, on an open pg_store. Failures are
 * PG_ERR_DB naming the database file, what failed and SQLite's message
 * (sql_fail); PG_ERR_NOMEM; a NULL store or argument that must not be NULL,
 * or a metric outside base/metric.h's table, is PG_ERR_INTERNAL.
 */
#ifndef PG_HISTORY_STORE_H
#define PG_HISTORY_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "base/metric.h"
#include "base/status.h"
#include "store.h"

/* Which layer_metrics rows are followed; a NULL filter matches every row. */
typedef struct history_query {
    pg_metric metric;     /* the column read */
    const char *variant;  /* the full variant name (required) */
    const char *label;    /* the run's label */
    const char *capture;  /* as stored */
    const char *backend;  /* "cpu" or "cuda" */
    long layer;           /* < 0: every layer */
} history_query;

/* One matching row with its run. Strings malloc'd, NULL where the column
 * is NULL (history_rows_free). */
typedef struct history_row {
    int64_t run_id;
    char *started_at, *git_rev, *label;  /* the run's */
    int layer;
    double value;                        /* the metric; NaN where NULL */
} history_row;

/* The rows q matches of complete runs, ordered by the run's started_at,
 * run id, then capture, layer, backend, into *rows (*n of them, NULL when
 * none; free with history_rows_free, also after a failure). */
pg_status history_store_read(pg_store *s, const history_query *q, history_row **rows, size_t *n,
                             pg_err *err);

/* Frees n rows' strings and the array; NULL is a no-op. */
void history_rows_free(history_row *rows, size_t n);

#endif /* PG_HISTORY_STORE_H */
