/* sql_util.c: SQLite helpers shared by the table modules (see sql_util.h). */
#include "sql_util.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *sql_db_path(sqlite3 *db)
{
    const char *f = sqlite3_db_filename(db, "main");
    return f != NULL && f[0] != '\0' ? f : ":memory:";
}

pg_status sql_fail(sqlite3 *db, pg_err *err, const char *fmt, ...)
{
    char what[SQL_WHAT_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return pg_fail(err, PG_ERR_DB, "%s: %s: %s", sql_db_path(db), what, sqlite3_errmsg(db));
}

sqlite3 *sql_handle_or_fail(pg_store *s, const char *fn, pg_err *err)
{
    sqlite3 *db = store_handle(s);
    if (db == NULL) pg_fail(err, PG_ERR_INTERNAL, "%s: store is NULL", fn);
    return db;
}

pg_status sql_prepare(sqlite3 *db, const char *sql, sqlite3_stmt **st, pg_err *err)
{
    if (sqlite3_prepare_v2(db, sql, -1, st, NULL) == SQLITE_OK) return PG_OK;
    return sql_fail(db, err, "prepare \"%s\"", sql);
}

sql_binder sql_bind_start(sqlite3_stmt *st)
{
    return (sql_binder){.st = st, .next = 1, .rc = SQLITE_OK};
}

void sql_bind_text(sql_binder *b, const char *v)
{
    if (b->rc == SQLITE_OK) b->rc = sqlite3_bind_text(b->st, b->next, v, -1, SQLITE_STATIC);
    b->next++;
}

void sql_bind_int64(sql_binder *b, int64_t v)
{
    if (b->rc == SQLITE_OK) b->rc = sqlite3_bind_int64(b->st, b->next, v);
    b->next++;
}

void sql_bind_double(sql_binder *b, double v)
{
    if (b->rc == SQLITE_OK) b->rc = sqlite3_bind_double(b->st, b->next, v);
    b->next++;
}

void sql_bind_null(sql_binder *b)
{
    if (b->rc == SQLITE_OK) b->rc = sqlite3_bind_null(b->st, b->next);
    b->next++;
}

pg_status sql_step_write(sqlite3 *db, sql_binder *b, const char *what, pg_err *err)
{
    pg_status ps = PG_OK;
    const int expected = sqlite3_bind_parameter_count(b->st);
    if (b->rc != SQLITE_OK) {
        ps = sql_fail(db, err, "%s", what);
    } else if (b->next - 1 != expected) {
        ps = pg_fail(err, PG_ERR_INTERNAL, "%s: \"%s\" has %d parameters, %d bound",
                     sql_db_path(db), sqlite3_sql(b->st), expected, b->next - 1);
    } else if (sqlite3_step(b->st) != SQLITE_DONE) {
        ps = sql_fail(db, err, "%s", what);
    }
    sql_release(b->st);
    b->st = NULL;
    return ps;
}

char *sql_col_dup(sqlite3_stmt *st, int i, int *oom)
{
    const unsigned char *t = sqlite3_column_text(st, i);
    if (t == NULL) {
        if (sqlite3_column_type(st, i) != SQLITE_NULL) *oom = 1;  /* text conversion failed */
        return NULL;
    }
    char *d = strdup((const char *)t);
    if (d == NULL) *oom = 1;
    return d;
}

double sql_col_real(sqlite3_stmt *st, int i)
{
    return sqlite3_column_type(st, i) == SQLITE_NULL ? NAN : sqlite3_column_double(st, i);
}

/* First capacity of a reader's row array. */
#define SQL_ROWS_INITIAL 16

pg_status sql_read_rows(sqlite3 *db, sqlite3_stmt *st, size_t elem, void **rows, size_t *n,
                        sql_row_fill fill, const char *what, pg_err *err)
{
    *rows = NULL;
    *n = 0;
    size_t cap = 0;
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (*n == cap) {
            const size_t want = cap ? 2 * cap : SQL_ROWS_INITIAL;
            void *grown = realloc(*rows, want * elem);
            if (grown == NULL) return pg_fail(err, PG_ERR_NOMEM, "%s: out of memory", what);
            memset((char *)grown + cap * elem, 0, (want - cap) * elem);
            *rows = grown;
            cap = want;
        }
        const int filled = fill(st, (char *)*rows + *n * elem);
        (*n)++;
        if (!filled) return pg_fail(err, PG_ERR_NOMEM, "%s: out of memory", what);
    }
    return rc == SQLITE_DONE ? PG_OK : sql_fail(db, err, "%s", what);
}

pg_status sql_read_run_rows(pg_store *s, const char *fn, const char *sql, int64_t run_id,
                            int bind_text, const char *text, size_t elem, void **rows, size_t *n,
                            sql_row_fill fill, const char *what, pg_err *err)
{
    *rows = NULL;
    *n = 0;
    sqlite3 *db = sql_handle_or_fail(s, fn, err);
    if (db == NULL) return PG_ERR_INTERNAL;
    sqlite3_stmt *st = NULL;
    pg_status ps = sql_prepare(db, sql, &st, err);
    if (ps != PG_OK) return ps;
    sql_binder b = sql_bind_start(st);
    sql_bind_int64(&b, run_id);
    if (bind_text) sql_bind_text(&b, text);
    if (b.rc != SQLITE_OK) ps = sql_fail(db, err, "%s", what);
    else ps = sql_read_rows(db, st, elem, rows, n, fill, what, err);
    sqlite3_finalize(st);
    return ps;
}

pg_status sql_read_int64(sqlite3 *db, const sql_binder *b, const char *what, int64_t *out,
                         pg_err *err)
{
    if (b->rc != SQLITE_OK || sqlite3_step(b->st) != SQLITE_ROW)
        return sql_fail(db, err, "%s", what);
    *out = sqlite3_column_int64(b->st, 0);
    return PG_OK;
}

static const char SQL_TABLE_EXISTS[] =
    "SELECT 1 FROM sqlite_schema WHERE type = 'table' AND name = ?1";

pg_status sql_table_exists(sqlite3 *db, const char *name, int *has, pg_err *err)
{
    sqlite3_stmt *st = NULL;
    pg_status ps = sql_prepare(db, SQL_TABLE_EXISTS, &st, err);
    if (ps != PG_OK) return ps;
    int rc = sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
    if (rc == SQLITE_OK) rc = sqlite3_step(st);
    if (rc == SQLITE_ROW || rc == SQLITE_DONE) *has = rc == SQLITE_ROW;
    else ps = sql_fail(db, err, "look for the %s table", name);
    sqlite3_finalize(st);
    return ps;
}
