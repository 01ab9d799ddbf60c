/* run_list.c: the SQL behind `precgate runs` (see run_list.h). */
#include "run_list.h"

#include <stdlib.h>

#include "sql_util.h"

static const char SQL_COUNT[] =
    "SELECT count(*) FROM runs WHERE (?1 IS NULL OR kind = ?1) AND (?2 IS NULL OR label = ?2)";

/* The newest ?3, then put back in order: oldest first, newest last. */
static const char SQL_LIST[] =
    "SELECT * FROM (SELECT id, kind, label, status, started_at, finished_at, git_rev, host, "
    "device, error, (julianday(finished_at) - julianday(started_at)) * 86400.0, pid, "
    "heartbeat_at "
    "FROM runs WHERE (?1 IS NULL OR kind = ?1) AND (?2 IS NULL OR label = ?2) "
    "ORDER BY started_at DESC, id DESC LIMIT ?3) ORDER BY started_at, id";

/* SQLite's LIMIT for "no limit". */
#define RUN_LIST_NO_LIMIT (-1)

pg_status run_list_count(pg_store *s, const run_filter *f, int64_t *n, pg_err *err)
{
    if (f == NULL) return pg_fail(err, PG_ERR_INTERNAL, "run_list_count: filter is NULL");
    sqlite3 *db = sql_handle_or_fail(s, "run_list_count", err);
    if (db == NULL) return PG_ERR_INTERNAL;
    const sql_param params[] = {SQL_TEXT(f->kind), SQL_TEXT(f->label)};
    int found = 0;
    pg_status ps = sql_query_int64(db, SQL_COUNT, SQL_PARAMS(params), "count the runs", n, &found,
                                   err);
    if (ps == PG_OK && !found) ps = sql_fail(db, err, "count the runs");
    return ps;
}

/* SQL_LIST's columns: a run_row's, then the listing's own. */
static const sql_field LISTED_RUN_FIELDS[] = {
    SQL_FIELD(INT64, run_list_row, run.id),          SQL_FIELD(TEXT, run_list_row, run.kind),
    SQL_FIELD(TEXT, run_list_row, run.label),        SQL_FIELD(TEXT, run_list_row, run.status),
    SQL_FIELD(TEXT, run_list_row, run.started_at),   SQL_FIELD(TEXT, run_list_row, run.finished_at),
    SQL_FIELD(TEXT, run_list_row, run.git_rev),      SQL_FIELD(TEXT, run_list_row, run.host),
    SQL_FIELD(TEXT, run_list_row, run.device),       SQL_FIELD(TEXT, run_list_row, run.error),
    SQL_FIELD(REAL, run_list_row, duration_s),       SQL_FIELD(INT64, run_list_row, pid),
    SQL_FIELD(TEXT, run_list_row, heartbeat_at),
};

/* The column of pid in SQL_LIST. */
#define LIST_PID_COLUMN 11

/* has_pid: whether the pid column is set. */
static pg_status finish_listed_run(sqlite3_stmt *st, void *row, const char *what, pg_err *err)
{
    (void)what, (void)err;
    run_list_row *r = row;
    r->has_pid = sqlite3_column_type(st, LIST_PID_COLUMN) != SQLITE_NULL;
    return PG_OK;
}

static const sql_row_type LISTED_RUN_ROW =
    SQL_ROW_TYPE(run_list_row, LISTED_RUN_FIELDS, finish_listed_run);

pg_status run_list_read(pg_store *s, const run_filter *f, int64_t limit, run_list_row **rows,
                        size_t *n, pg_err *err)
{
    if (rows == NULL || n == NULL)
        return pg_fail(err, PG_ERR_INTERNAL, "run_list_read: rows or n is NULL");
    *rows = NULL;
    *n = 0;
    if (f == NULL) return pg_fail(err, PG_ERR_INTERNAL, "run_list_read: filter is NULL");
    const sql_param params[] = {SQL_TEXT(f->kind), SQL_TEXT(f->label),
                                SQL_INT64(limit == 0 ? RUN_LIST_NO_LIMIT : limit)};
    void *v = NULL;
    const pg_status ps = sql_read_all(s, "run_list_read", SQL_LIST, SQL_PARAMS(params),
                                      &LISTED_RUN_ROW, &v, n, "list the runs", err);
    *rows = v;
    return ps;
}

void run_list_rows_free(run_list_row *rows, size_t n)
{
    sql_rows_free(&LISTED_RUN_ROW, rows, n);
}
