/*
 * store_conn.h: what a pg_store is, inside db/: the connection, the file it
 * was opened as, the statements store.c prepares at open, and the cache of
 * the table modules' statements. store.c opens and closes it; sql_util.c
 * reads it (store_handle, sql_cached), so the two files depend one way only:
 * store.c on sql_util.c. db/'s private header, like sql_util.h: the include
 * lint (cmake/include_lint.cmake) refuses it outside db/ and tests/.
 */
#ifndef PG_STORE_CONN_H
#define PG_STORE_CONN_H

#include <sqlite3.h>

#include "store.h"

/* Most distinct statements the table modules keep prepared through
 * sql_cached() (eval_store.c has 8; room for gate_store.c and more). */
#define STORE_STMT_CACHE_MAX 32

struct pg_store {
    sqlite3 *db;
    char *path;                     /* as given to store_open, for messages */
    store_access access;            /* how it was opened (store_open_reader) */
    sqlite3_stmt **stmt;            /* store.c's statements, prepared at open and
                                     * reset after every use ([its ST_COUNT]) */
    /* sql_cached(): the table modules' statements, prepared on first use,
     * found by the caller's SQL pointer, else by the statement's own text. */
    struct {
        const char *sql;
        sqlite3_stmt *st;
    } cache[STORE_STMT_CACHE_MAX];
    int n_cache;
};

#endif /* PG_STORE_CONN_H */
