/*
 * sql_util.h: the small SQLite helpers the table modules share (eval_store.c,
 * gate_store.c): where a connection's file is, one way to turn a SQLite
 * failure into a pg_err, and preparing a constant statement.
 */
#ifndef PG_SQL_UTIL_H
#define PG_SQL_UTIL_H

#include <sqlite3.h>
#include <stdint.h>

#include "../harness/status.h"
#include "store.h"

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

#endif /* PG_SQL_UTIL_H */
