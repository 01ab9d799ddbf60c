/*
 * run_list.h: the rows behind `precgate runs`: the runs table listed, with
 * each run's duration and the process fields its liveness is probed from
 * (store_probe_process, db/store.h).
 *
 * Both functions read only, with fixed SQL and bound parameters, on an open
 * pg_store. Failures are PG_ERR_DB naming the database file, what failed
 * and SQLite's message (sql_fail); PG_ERR_NOMEM; a NULL store or argument
 * that must not be NULL is PG_ERR_INTERNAL.
 */
#ifndef PG_RUN_LIST_H
#define PG_RUN_LIST_H

#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "report_store.h"
#include "store.h"

/* Which runs are listed; a NULL field matches every run. */
typedef struct run_filter {
    const char *kind;   /* runs.kind ("sweep", "eval") */
    const char *label;  /* exactly this label */
} run_filter;

/* One listed run. Strings malloc'd, NULL where the column is NULL
 * (run_list_rows_free). */
typedef struct run_list_row {
    run_row run;            /* id, kind, label, status, times, git_rev, host, device, error */
    double duration_s;      /* finished_at - started_at in seconds; NaN while unfinished */
    int has_pid;            /* 0: pid is NULL (a run from before schema version 8) */
    int64_t pid;            /* 0 where NULL */
    char *heartbeat_at;     /* the last sign of life (UTC ISO 8601) */
} run_list_row;

/* The number of runs f matches into *n. */
pg_status run_list_count(pg_store *s, const run_filter *f, int64_t *n, pg_err *err);

/* The newest limit runs f matches (limit 0: every one; newest by started_at,
 * then id), oldest first, into *rows (*n of them, NULL when none; free with
 * run_list_rows_free, also after a failure). */
pg_status run_list_read(pg_store *s, const run_filter *f, int64_t limit, run_list_row **rows,
                        size_t *n, pg_err *err);

/* Frees n rows' strings and the array; NULL is a no-op. */
void run_list_rows_free(run_list_row *rows, size_t n);

#endif /* PG_RUN_LIST_H */
