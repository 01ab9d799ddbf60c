/*
 * sql_util.h: the small SQLite helpers the table modules share (eval_store.c,
 * gate_store.c): where a connection's file is, one way to turn a SQLite
 * failure into a pg_err, and preparing a constant statement.
 */
#ifndef PG_SQL_UTIL_H
#define PG_SQL_UTIL_H

#include <sqlite3.h>

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

#endif /* PG_SQL_UTIL_H */
