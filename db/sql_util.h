/*
 * sql_util.h: the small SQLite helpers the table modules share (eval_store.c,
 * gate_store.c): where a connection's file is, one way to turn a SQLite
 * failure into a pg_err, preparing a constant statement, and the store's
 * cache of prepared statements (sql_cached, implemented in store.c, which
 * owns the cache).
 *
 * db/'s own header: only db/'s .c files and tests/ include it (the build's include
 * lint, CMakeLists.txt, refuses it anywhere else), so the raw connection
 * (store_handle) and SQLite's API stay inside the store.
 */
#ifndef PG_SQL_UTIL_H
#define PG_SQL_UTIL_H

#include <sqlite3.h>
#include <stdint.h>

#include "base/status.h"
#include "store.h"

/* The raw connection of s, for db/'s table modules and for tests that
 * inspect the file; owned by s (do not close it; finalize statements before
 * store_close). NULL when s is NULL. */
sqlite3 *store_handle(pg_store *s);

/* Longest "what failed" phrase kept before SQLite's message is appended. */
#define SQL_WHAT_MAX 384

/* The file of db's main database, or ":memory:"; never NULL. */
const char *sql_db_path(sqlite3 *db);

/* Records PG_ERR_DB as "<file>: <what>: <SQLite's message>"; call it before
 * anything else touches the connection. Returns the code err now holds. */
pg_status sql_fail(sqlite3 *db, pg_err *err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* The handle of s, or NULL after recording PG_ERR_INTERNAL (fn names the caller). */
sqlite3 *sql_handle_or_fail(pg_store *s, const char *fn, pg_err *err);

/* Prepares constant sql into *st; PG_ERR_DB naming it on failure. */
pg_status sql_prepare(sqlite3 *db, const char *sql, sqlite3_stmt **st, pg_err *err);

/* The statement for constant sql prepared once per store (the first call
 * prepares it, later calls hand back the same statement, reset with its
 * bindings cleared); it stays owned by s and is finalized by store_close.
 * Call sql_release after each use. sql must outlive s (a string literal or
 * static array: the cache keeps the pointer). PG_ERR_DB naming the SQL when
 * it does not prepare; PG_ERR_INTERNAL when the cache is full. */
pg_status sql_cached(pg_store *s, const char *sql, sqlite3_stmt **st, pg_err *err);

/* Resets st and clears its bindings (done with a sql_cached statement until
 * its next use: no read left open, no caller string still bound); NULL is a
 * no-op. */
void sql_release(sqlite3_stmt *st);

/* Binds a statement's parameters left to right (?1, ?2, ...), keeping the
 * first failure in rc. Text is bound SQLITE_STATIC: the caller's strings
 * need only outlive the step (callers reset and clear the statement). */
typedef struct sql_binder {
    sqlite3_stmt *st;
    int next;   /* the parameter the next bind fills */
    int rc;     /* SQLITE_OK until a bind fails */
} sql_binder;

/* A binder for st, starting at its first parameter. */
sql_binder sql_bind_start(sqlite3_stmt *st);
/* Binds v (NULL binds SQL NULL) to the next parameter. */
void sql_bind_text(sql_binder *b, const char *v);
/* Binds v to the next parameter. */
void sql_bind_int64(sql_binder *b, int64_t v);
/* Binds v to the next parameter; SQLite stores NaN as NULL, +-inf as REAL. */
void sql_bind_double(sql_binder *b, double v);
/* Binds SQL NULL to the next parameter. */
void sql_bind_null(sql_binder *b);

/* Steps b's statement (a sql_cached one) once expecting no rows; PG_ERR_DB
 * described by what when a bind or the step fails, PG_ERR_INTERNAL when the
 * parameters were not all bound. Releases the statement in every case (it
 * stays cached). */
pg_status sql_step_write(sqlite3 *db, sql_binder *b, const char *what, pg_err *err);

/* A malloc'd copy of column i's text, NULL for SQL NULL; sets *oom when the
 * copy fails. */
char *sql_col_dup(sqlite3_stmt *st, int i, int *oom);

/* Column i as a double, NaN for SQL NULL. */
double sql_col_real(sqlite3_stmt *st, int i);

/* Fills one zeroed row of a reader's array from st's current row; returns 0
 * when a copy ran out of memory (the row keeps what it copied). */
typedef int (*sql_row_fill)(sqlite3_stmt *st, void *row);

/* Steps st (prepared and bound by the caller, who finalizes or releases it)
 * to its end, appending one zeroed element of elem bytes per row to *rows
 * (malloc'd, grown as it goes; *rows and *n are reset first) and filling it
 * through fill. *n counts the rows filled, a failed one included, so that
 * the caller's free sees every copy. PG_ERR_NOMEM "<what>: out of memory";
 * PG_ERR_DB through sql_fail ("<what>") when a step fails. */
pg_status sql_read_rows(sqlite3 *db, sqlite3_stmt *st, size_t elem, void **rows, size_t *n,
                        sql_row_fill fill, const char *what, pg_err *err);

/* Prepares sql on s (PG_ERR_INTERNAL naming fn when s is NULL), binds
 * run_id to ?1 and, when bind_text, text to ?2 (NULL binds SQL NULL), and
 * reads every row as sql_read_rows does, what naming the read in messages;
 * the statement is finalized. */
pg_status sql_read_run_rows(pg_store *s, const char *fn, const char *sql, int64_t run_id,
                            int bind_text, const char *text, size_t elem, void **rows, size_t *n,
                            sql_row_fill fill, const char *what, pg_err *err);

/* Steps b's statement (prepared by the caller, who finalizes or releases
 * it, and bound through b) once and puts the integer in the first column of
 * its one row into *out (a count(*) query). PG_ERR_DB through sql_fail
 * ("<what>") when a bind or the step failed or no row came back. */
pg_status sql_read_int64(sqlite3 *db, const sql_binder *b, const char *what, int64_t *out,
                         pg_err *err);

/* Whether db has a table named name into *has (0 for a schema older than
 * the migration that creates it). */
pg_status sql_table_exists(sqlite3 *db, const char *name, int *has, pg_err *err);

#endif /* PG_SQL_UTIL_H */
