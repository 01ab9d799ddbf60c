/*
 * sql_util.h: the SQLite helpers every db/ module shares: where a
 * connection's file is, the one way a SQLite failure becomes a pg_err
 * (sql_fail), preparing and binding (sql_param, sql_binder), the one
 * reader of a statement's rows into a row struct described by its columns
 * (sql_row_type, sql_read_all, sql_rows_free), one-row, write and
 * per-layer count statements, and the store's cache of prepared statements
 * (sql_cached; the connection itself is db/store_conn.h's: store.c opens it,
 * this module reads it, so store.c depends on sql_util.c and not back).
 *
 * db/'s own header: only db/'s .c files and tests/ include it (the build's
 * include lint, CMakeLists.txt, refuses it anywhere else), so the raw
 * connection (store_handle) and SQLite's API stay inside the store.
 */
#ifndef PG_SQL_UTIL_H
#define PG_SQL_UTIL_H

#include <sqlite3.h>
#include <stddef.h>
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

/* sql_fail for a connection that did not open (SQLite knows no file for it
 * yet): "<path>: cannot open the database: <SQLite's message>", path as
 * given to sqlite3_open_v2. Returns the code err now holds. */
pg_status sql_fail_open(const char *path, sqlite3 *db, pg_err *err);

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

/* Finalizes every statement sql_cached prepared on s (store_close, before
 * the connection closes); NULL is a no-op. */
void sql_cache_clear(pg_store *s);

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
/* Binds n bytes at v (SQLITE_STATIC, as text; n 0 binds an empty blob) to the next parameter. */
void sql_bind_blob(sql_binder *b, const void *v, size_t n);

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

/* ---- the metric columns: layer_metrics' columns of base/metric.h ------ */

/* Room for sql_metric_columns' list, NUL included. */
#define SQL_METRIC_COLUMNS_MAX 512

/* Every pg_metric's column name, in the enum's order, joined by ", "
 * ("rel_l2, max_abs, ..."), into buf: the column list of a statement that
 * writes or reads a whole pg_metric_values. PG_ERR_INTERNAL when the list
 * does not fit in len bytes. */
pg_status sql_metric_columns(char *buf, size_t len, pg_err *err);

/* Binds every member of m, in the enum's order, to b's next parameters:
 * a count as an integer, a value as a double (NaN binds NULL). */
void sql_bind_metrics(sql_binder *b, const pg_metric_values *m);

/* Reads st's columns first .. first + PG_METRIC_COUNT - 1, in the enum's
 * order, into m: a value NaN where NULL, a count 0 where NULL. */
void sql_col_metrics(sqlite3_stmt *st, int first, pg_metric_values *m);

/* ---- parameters: what a statement's ?1, ?2, ... are bound to ---------- */

/* What one parameter holds. */
typedef enum sql_param_kind {
    SQL_PARAM_TEXT,   /* text (a NULL pointer binds SQL NULL) */
    SQL_PARAM_INT64,  /* an integer */
    SQL_PARAM_NULL    /* SQL NULL */
} sql_param_kind;

/* One parameter's value; build it with SQL_TEXT, SQL_INT64 or SQL_NULL. */
typedef struct sql_param {
    sql_param_kind kind;
    const char *text;   /* SQL_PARAM_TEXT: bound SQLITE_STATIC (outlives the statement's use) */
    int64_t int64;      /* SQL_PARAM_INT64 */
} sql_param;

#define SQL_TEXT(v) ((sql_param){.kind = SQL_PARAM_TEXT, .text = (v)})
#define SQL_INT64(v) ((sql_param){.kind = SQL_PARAM_INT64, .int64 = (v)})
#define SQL_NULL ((sql_param){.kind = SQL_PARAM_NULL})
/* An array of sql_param and its length, as the (params, n_params) arguments. */
#define SQL_PARAMS(a) (a), (sizeof(a) / sizeof((a)[0]))

/* Binds params[0 .. n-1] to b's next parameters (sql_bind_text,
 * sql_bind_int64, sql_bind_null). */
void sql_bind_params(sql_binder *b, const sql_param *params, size_t n);

/* Prepares constant sql into *st (sql_prepare) and binds params to ?1 ..
 * ?n; PG_ERR_DB through sql_fail ("<what>") when a bind fails. The caller
 * finalizes *st, also after a failure (NULL when the prepare failed). */
pg_status sql_prepare_bound(sqlite3 *db, const char *sql, const sql_param *params,
                            size_t n_params, sqlite3_stmt **st, const char *what, pg_err *err);

/* Prepares sql, binds params and steps it once: the integer in the first
 * column of its first row into *out and *found 1, or *found 0 (and *out
 * untouched) when it returns no row. The statement is finalized. PG_ERR_DB
 * through sql_fail: naming the SQL when it does not prepare, what when a
 * bind or the step fails. */
pg_status sql_query_int64(sqlite3 *db, const char *sql, const sql_param *params,
                          size_t n_params, const char *what, int64_t *out, int *found,
                          pg_err *err);

/* Prepares sql (a write: INSERT, UPDATE, DELETE), binds params and steps it
 * to its end; the statement is finalized. PG_ERR_DB through sql_fail:
 * naming the SQL when it does not prepare, what when a bind or the step
 * fails. */
pg_status sql_exec_bound(sqlite3 *db, const char *sql, const sql_param *params,
                         size_t n_params, const char *what, pg_err *err);

/* ---- row types: how a reader's result columns fill its row struct ------ */

/* What a result column is stored as. */
typedef enum sql_field_kind {
    SQL_FIELD_TEXT,   /* char *: a malloc'd copy (sql_col_dup), NULL for SQL NULL */
    SQL_FIELD_INT,    /* int; if_null for SQL NULL */
    SQL_FIELD_INT64,  /* int64_t; if_null for SQL NULL */
    SQL_FIELD_REAL    /* double; NaN for SQL NULL (sql_col_real) */
} sql_field_kind;

/* Where one result column goes in a row struct. */
typedef struct sql_field {
    sql_field_kind kind;
    size_t offset;     /* offsetof the member */
    int64_t if_null;   /* SQL_FIELD_INT, SQL_FIELD_INT64: the value SQL NULL reads as */
} sql_field;

/* Column-to-member entries: SQL_FIELD(TEXT, my_row, name); SQL_FIELD_OR
 * gives an integer member the value of SQL NULL. */
#define SQL_FIELD(kind, type, member) {SQL_FIELD_##kind, offsetof(type, member), 0}
#define SQL_FIELD_OR(kind, type, member, if_null) \
    {SQL_FIELD_##kind, offsetof(type, member), (if_null)}

/* A reader's row struct: result column i fills fields[i]; columns past
 * n_fields are read by finish only. */
typedef struct sql_row_type {
    size_t size;               /* sizeof the row struct */
    const sql_field *fields;
    size_t n_fields;
    /* NULL, or called on each row once its fields are filled (st still on
     * that row) to derive or check members; what names the read. PG_OK, or
     * the failure that stops the read. */
    pg_status (*finish)(sqlite3_stmt *st, void *row, const char *what, pg_err *err);
} sql_row_type;

/* The sql_row_type of struct type from the sql_field array fields (finish: NULL or a hook). */
#define SQL_ROW_TYPE(type, fields, finish) \
    {sizeof(type), (fields), sizeof(fields) / sizeof((fields)[0]), (finish)}

/* Prepares sql on s (PG_ERR_INTERNAL naming fn when s is NULL), binds
 * params, and reads every result row into *rows: an array of type->size
 * elements (malloc'd, zeroed, grown as it goes; NULL when there are none),
 * *n of them, filled through type. *n counts a row that failed part-way
 * too, so that sql_rows_free sees every copy. The statement is finalized.
 * PG_ERR_NOMEM "<what>: out of memory"; PG_ERR_DB through sql_fail
 * ("<what>") when a bind or a step fails; what finish returns. */
pg_status sql_read_all(pg_store *s, const char *fn, const char *sql, const sql_param *params,
                       size_t n_params, const sql_row_type *type, void **rows, size_t *n,
                       const char *what, pg_err *err);

/* sql_read_all on a connection of its own (a database that is no pg_store:
 * a shard database merge reads, db/merge_store.c). */
pg_status sql_read_all_db(sqlite3 *db, const char *sql, const sql_param *params, size_t n_params,
                          const sql_row_type *type, void **rows, size_t *n, const char *what,
                          pg_err *err);

/* Frees the SQL_FIELD_TEXT members of one row of type (not the row); NULL
 * is a no-op. */
void sql_row_clear(const sql_row_type *type, void *row);

/* Frees the SQL_FIELD_TEXT members of n rows of type, then the array; NULL
 * is a no-op. */
void sql_rows_free(const sql_row_type *type, void *rows, size_t n);

/* Steps st (a statement of (layer, count) rows over ?1 run_id, ?2 capture,
 * prepared or sql_cached by the caller, who finalizes or releases it),
 * binding run_id and capture, and stores each layer's count at
 * counts + layer * stride bytes (an int64_t array: stride sizeof(int64_t);
 * one member of an array of structs: the struct's size). Layers without a
 * row keep their value. PG_ERR_DB "<file>: run R has <table> rows for
 * layer L of capture 'C', which has N layers" for a layer outside 0 ..
 * n_layers-1; through sql_fail when a bind or step fails. */
pg_status sql_read_layer_counts(sqlite3 *db, sqlite3_stmt *st, int64_t run_id,
                                const char *capture, const char *table, int n_layers,
                                int64_t *counts, size_t stride, pg_err *err);

/* Steps b's statement (prepared by the caller, who finalizes or releases
 * it, and bound through b) once and puts the integer in the first column of
 * its one row into *out (a count(*) query). PG_ERR_DB through sql_fail
 * ("<what>") when a bind or the step failed or no row came back. */
pg_status sql_read_int64(sqlite3 *db, const sql_binder *b, const char *what, int64_t *out,
                         pg_err *err);

/* Whether db has a table named name into *has (0 for a schema older than
 * the migration that creates it). */
pg_status sql_table_exists(sqlite3 *db, const char *name, int *has, pg_err *err);

/* A table module's per-layer count for `run --resume`: zeroes counts[0 ..
 * n_layers-1], then (when the database has table: a schema older than its
 * migration counts 0) fills them from sql, a sql_cached (layer, count)
 * query over ?1 run_id, ?2 capture, as sql_read_layer_counts does.
 * PG_ERR_INTERNAL naming fn when s, capture or counts is NULL or n_layers
 * < 0. */
pg_status sql_count_layers(pg_store *s, const char *fn, const char *sql, const char *table,
                           int64_t run_id, const char *capture, int n_layers, int64_t *counts,
                           pg_err *err);

#endif /* PG_SQL_UTIL_H */
