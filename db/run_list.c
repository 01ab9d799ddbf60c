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

/* SQL_LIST's result columns. */
enum { C_ID, C_KIND, C_LABEL, C_STATUS, C_STARTED, C_FINISHED, C_GIT, C_HOST, C_DEVICE, C_ERROR,
       C_DURATION, C_PID, C_HEARTBEAT };

/* SQLite's LIMIT for "no limit". */
#define RUN_LIST_NO_LIMIT (-1)

/* Prepares sql on s and binds f's kind and label to ?1, ?2; the caller
 * finalizes *st (also after a failure). */
static pg_status prepare_filtered(pg_store *s, const char *fn, const char *sql,
                                  const run_filter *f, sqlite3 **db, sqlite3_stmt **st,
                                  sql_binder *b, pg_err *err)
{
    *st = NULL;
    if (f == NULL) return pg_fail(err, PG_ERR_INTERNAL, "%s: filter is NULL", fn);
    if ((*db = sql_handle_or_fail(s, fn, err)) == NULL) return PG_ERR_INTERNAL;
    const pg_status ps = sql_prepare(*db, sql, st, err);
    if (ps != PG_OK) return ps;
    *b = sql_bind_start(*st);
    sql_bind_text(b, f->kind);
    sql_bind_text(b, f->label);
    return PG_OK;
}

pg_status run_list_count(pg_store *s, const run_filter *f, int64_t *n, pg_err *err)
{
    sqlite3 *db = NULL;
    sqlite3_stmt *st = NULL;
    sql_binder b;
    pg_status ps = prepare_filtered(s, "run_list_count", SQL_COUNT, f, &db, &st, &b, err);
    if (ps == PG_OK) ps = sql_read_int64(db, &b, "count the runs", n, err);
    sqlite3_finalize(st);
    return ps;
}

/* Fills one run_list_row from SQL_LIST's row; 0 when out of memory. */
static int fill_listed_run(sqlite3_stmt *st, void *row)
{
    run_list_row *r = row;
    char **text[] = {&r->run.kind, &r->run.label, &r->run.status, &r->run.started_at,
                     &r->run.finished_at, &r->run.git_rev, &r->run.host, &r->run.device,
                     &r->run.error};
    int oom = 0;
    r->run.id = sqlite3_column_int64(st, C_ID);
    for (int i = 0; i < (int)(sizeof text / sizeof text[0]); i++)
        *text[i] = sql_col_dup(st, C_KIND + i, &oom);
    r->duration_s = sql_col_real(st, C_DURATION);
    r->has_pid = sqlite3_column_type(st, C_PID) != SQLITE_NULL;
    r->pid = sqlite3_column_int64(st, C_PID);
    r->heartbeat_at = sql_col_dup(st, C_HEARTBEAT, &oom);
    return !oom;
}

pg_status run_list_read(pg_store *s, const run_filter *f, int64_t limit, run_list_row **rows,
                        size_t *n, pg_err *err)
{
    if (rows == NULL || n == NULL)
        return pg_fail(err, PG_ERR_INTERNAL, "run_list_read: rows or n is NULL");
    *rows = NULL;
    *n = 0;
    sqlite3 *db = NULL;
    sqlite3_stmt *st = NULL;
    sql_binder b;
    pg_status ps = prepare_filtered(s, "run_list_read", SQL_LIST, f, &db, &st, &b, err);
    if (ps == PG_OK) {
        sql_bind_int64(&b, limit == 0 ? RUN_LIST_NO_LIMIT : limit);
        void *v = NULL;
        if (b.rc != SQLITE_OK) ps = sql_fail(db, err, "list the runs");
        else ps = sql_read_rows(db, st, sizeof **rows, &v, n, fill_listed_run, "list the runs",
                                err);
        *rows = v;
    }
    sqlite3_finalize(st);
    return ps;
}

void run_list_rows_free(run_list_row *rows, size_t n)
{
    for (size_t i = 0; rows != NULL && i < n; i++) {
        run_row_free(&rows[i].run);
        free(rows[i].heartbeat_at);
    }
    free(rows);
}
