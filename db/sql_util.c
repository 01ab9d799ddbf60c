/* sql_util.c: SQLite helpers shared by the table modules (see sql_util.h). */
#include "sql_util.h"
#include "store_conn.h"

#include <inttypes.h>
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

/* The one wording of a SQLite failure: "<path>: <what>: <SQLite's message>". */
static pg_status fail_at(const char *path, sqlite3 *db, const char *what, pg_err *err)
{
    return pg_fail(err, PG_ERR_DB, "%s: %s: %s", path, what, sqlite3_errmsg(db));
}

pg_status sql_fail(sqlite3 *db, pg_err *err, const char *fmt, ...)
{
    char what[SQL_WHAT_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return fail_at(sql_db_path(db), db, what, err);
}

pg_status sql_fail_open(const char *path, sqlite3 *db, pg_err *err)
{
    return fail_at(path, db, "cannot open the database", err);
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

void sql_bind_blob(sql_binder *b, const void *v, size_t n)
{
    if (b->rc == SQLITE_OK)
        b->rc = n == 0 ? sqlite3_bind_zeroblob(b->st, b->next, 0)
                       : sqlite3_bind_blob64(b->st, b->next, v, (sqlite3_uint64)n, SQLITE_STATIC);
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

pg_status sql_metric_columns(char *buf, size_t len, pg_err *err)
{
    size_t at = 0;
    for (int m = 0; m < PG_METRIC_COUNT; m++) {
        const int w = snprintf(buf + at, at < len ? len - at : 0, "%s%s", m ? ", " : "",
                               pg_metric_name((pg_metric)m));
        at += w > 0 ? (size_t)w : 0;
        if (at >= len)
            return pg_fail(err, PG_ERR_INTERNAL,
                           "sql_metric_columns: the metric columns need more than %zu bytes", len);
    }
    return PG_OK;
}

void sql_bind_metrics(sql_binder *b, const pg_metric_values *m)
{
    for (int i = 0; i < PG_METRIC_COUNT; i++) {
        if (pg_metric_is_count((pg_metric)i)) sql_bind_int64(b, pg_metric_count(m, (pg_metric)i));
        else sql_bind_double(b, pg_metric_value(m, (pg_metric)i));
    }
}

void sql_col_metrics(sqlite3_stmt *st, int first, pg_metric_values *m)
{
    for (int i = 0; i < PG_METRIC_COUNT; i++) {
        if (pg_metric_is_count((pg_metric)i))
            pg_metric_set_count(m, (pg_metric)i, sqlite3_column_int64(st, first + i));
        else
            pg_metric_set_value(m, (pg_metric)i, sql_col_real(st, first + i));
    }
}

void sql_bind_params(sql_binder *b, const sql_param *params, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        switch (params[i].kind) {
        case SQL_PARAM_TEXT: sql_bind_text(b, params[i].text); break;
        case SQL_PARAM_INT64: sql_bind_int64(b, params[i].int64); break;
        case SQL_PARAM_NULL: sql_bind_null(b); break;
        }
    }
}

pg_status sql_prepare_bound(sqlite3 *db, const char *sql, const sql_param *params,
                            size_t n_params, sqlite3_stmt **st, const char *what, pg_err *err)
{
    *st = NULL;
    const pg_status ps = sql_prepare(db, sql, st, err);
    if (ps != PG_OK) return ps;
    sql_binder b = sql_bind_start(*st);
    sql_bind_params(&b, params, n_params);
    return b.rc == SQLITE_OK ? PG_OK : sql_fail(db, err, "%s", what);
}

pg_status sql_query_int64(sqlite3 *db, const char *sql, const sql_param *params,
                          size_t n_params, const char *what, int64_t *out, int *found,
                          pg_err *err)
{
    *found = 0;
    sqlite3_stmt *st = NULL;
    pg_status ps = sql_prepare_bound(db, sql, params, n_params, &st, what, err);
    if (ps == PG_OK) {
        const int rc = sqlite3_step(st);
        if (rc == SQLITE_ROW) {
            *found = 1;
            *out = sqlite3_column_int64(st, 0);
        } else if (rc != SQLITE_DONE) {
            ps = sql_fail(db, err, "%s", what);
        }
    }
    sqlite3_finalize(st);
    return ps;
}

pg_status sql_exec_bound(sqlite3 *db, const char *sql, const sql_param *params,
                         size_t n_params, const char *what, pg_err *err)
{
    sqlite3_stmt *st = NULL;
    pg_status ps = sql_prepare_bound(db, sql, params, n_params, &st, what, err);
    if (ps == PG_OK && sqlite3_step(st) != SQLITE_DONE) ps = sql_fail(db, err, "%s", what);
    sqlite3_finalize(st);
    return ps;
}

/* Fills the zeroed row from st's current row through type; 0 when a copy
 * ran out of memory (the row keeps what it copied). */
static int fill_row(sqlite3_stmt *st, const sql_row_type *type, char *row)
{
    int oom = 0;
    for (size_t i = 0; i < type->n_fields; i++) {
        const sql_field *f = &type->fields[i];
        const int col = (int)i;
        const int is_null = sqlite3_column_type(st, col) == SQLITE_NULL;
        void *at = row + f->offset;
        switch (f->kind) {
        case SQL_FIELD_TEXT: *(char **)at = sql_col_dup(st, col, &oom); break;
        case SQL_FIELD_INT:
            *(int *)at = is_null ? (int)f->if_null : sqlite3_column_int(st, col);
            break;
        case SQL_FIELD_INT64:
            *(int64_t *)at = is_null ? f->if_null : sqlite3_column_int64(st, col);
            break;
        case SQL_FIELD_REAL: *(double *)at = sql_col_real(st, col); break;
        }
    }
    return !oom;
}

/* First capacity of a reader's row array. */
#define SQL_ROWS_INITIAL 16

/* Steps st to its end, appending one row of type per result row to *rows. */
static pg_status read_rows(sqlite3 *db, sqlite3_stmt *st, const sql_row_type *type, void **rows,
                           size_t *n, const char *what, pg_err *err)
{
    size_t cap = 0;
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (*n == cap) {
            const size_t want = cap ? 2 * cap : SQL_ROWS_INITIAL;
            void *grown = want <= SIZE_MAX / type->size ? realloc(*rows, want * type->size) : NULL;
            if (grown == NULL) return pg_fail(err, PG_ERR_NOMEM, "%s: out of memory", what);
            memset((char *)grown + cap * type->size, 0, (want - cap) * type->size);
            *rows = grown;
            cap = want;
        }
        char *row = (char *)*rows + *n * type->size;
        const int filled = fill_row(st, type, row);
        (*n)++;
        if (!filled) return pg_fail(err, PG_ERR_NOMEM, "%s: out of memory", what);
        if (type->finish != NULL) {
            const pg_status ps = type->finish(st, row, what, err);
            if (ps != PG_OK) return ps;
        }
    }
    return rc == SQLITE_DONE ? PG_OK : sql_fail(db, err, "%s", what);
}

pg_status sql_read_all(pg_store *s, const char *fn, const char *sql, const sql_param *params,
                       size_t n_params, const sql_row_type *type, void **rows, size_t *n,
                       const char *what, pg_err *err)
{
    *rows = NULL;
    *n = 0;
    sqlite3 *db = sql_handle_or_fail(s, fn, err);
    if (db == NULL) return PG_ERR_INTERNAL;
    return sql_read_all_db(db, sql, params, n_params, type, rows, n, what, err);
}

pg_status sql_read_all_db(sqlite3 *db, const char *sql, const sql_param *params, size_t n_params,
                          const sql_row_type *type, void **rows, size_t *n, const char *what,
                          pg_err *err)
{
    *rows = NULL;
    *n = 0;
    sqlite3_stmt *st = NULL;
    pg_status ps = sql_prepare_bound(db, sql, params, n_params, &st, what, err);
    if (ps == PG_OK) ps = read_rows(db, st, type, rows, n, what, err);
    sqlite3_finalize(st);
    return ps;
}

void sql_row_clear(const sql_row_type *type, void *row)
{
    for (size_t j = 0; row != NULL && j < type->n_fields; j++)
        if (type->fields[j].kind == SQL_FIELD_TEXT)
            free(*(char **)((char *)row + type->fields[j].offset));
}

void sql_rows_free(const sql_row_type *type, void *rows, size_t n)
{
    for (size_t i = 0; rows != NULL && i < n; i++)
        sql_row_clear(type, (char *)rows + i * type->size);
    free(rows);
}

pg_status sql_read_layer_counts(sqlite3 *db, sqlite3_stmt *st, int64_t run_id,
                                const char *capture, const char *table, int n_layers,
                                int64_t *counts, size_t stride, pg_err *err)
{
    sql_binder b = sql_bind_start(st);
    sql_bind_int64(&b, run_id);
    sql_bind_text(&b, capture);
    int rc = b.rc;
    while (rc == SQLITE_OK && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        const int64_t layer = sqlite3_column_int64(st, 0);
        if (layer < 0 || layer >= n_layers)
            return pg_fail(err, PG_ERR_DB,
                           "%s: run %" PRId64 " has %s rows for layer %" PRId64 " of capture "
                           "'%s', which has %d layers",
                           sql_db_path(db), run_id, table, layer, capture, n_layers);
        *(int64_t *)((char *)counts + (size_t)layer * stride) = sqlite3_column_int64(st, 1);
        rc = SQLITE_OK;
    }
    if (rc == SQLITE_DONE) return PG_OK;
    return sql_fail(db, err, "count the %s rows of run %" PRId64 ", capture '%s'", table, run_id,
                    capture);
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

pg_status sql_count_layers(pg_store *s, const char *fn, const char *sql, const char *table,
                           int64_t run_id, const char *capture, int n_layers, int64_t *counts,
                           pg_err *err)
{
    sqlite3 *db = sql_handle_or_fail(s, fn, err);
    if (db == NULL) return PG_ERR_INTERNAL;
    if (capture == NULL || counts == NULL || n_layers < 0)
        return pg_fail(err, PG_ERR_INTERNAL, "%s: capture or counts missing", fn);
    memset(counts, 0, (size_t)n_layers * sizeof *counts);
    int has = 0;
    pg_status ps = sql_table_exists(db, table, &has, err);
    if (ps != PG_OK || !has) return ps;
    sqlite3_stmt *st = NULL;
    if ((ps = sql_cached(s, sql, &st, err)) != PG_OK) return ps;
    ps = sql_read_layer_counts(db, st, run_id, capture, table, n_layers, counts, sizeof *counts,
                               err);
    sql_release(st);
    return ps;
}

/* ---- the store's connection and statement cache (store_conn.h) ---------- */

pg_status sql_cached(pg_store *s, const char *sql, sqlite3_stmt **st, pg_err *err)
{
    if (s == NULL || sql == NULL || st == NULL)
        return pg_fail(err, PG_ERR_INTERNAL, "sql_cached: store, sql or st is NULL");
    *st = NULL;
    /* By pointer first (every caller passes a static string: no text is
     * compared on the per-sample path), then by text. */
    int hit = -1;
    for (int i = 0; i < s->n_cache && hit < 0; i++)
        if (s->cache[i].sql == sql) hit = i;
    for (int i = 0; i < s->n_cache && hit < 0; i++)
        if (strcmp(sqlite3_sql(s->cache[i].st), sql) == 0) hit = i;
    if (hit >= 0) {
        /* A caller that returned early may have left it mid-step. */
        sqlite3_reset(s->cache[hit].st);
        sqlite3_clear_bindings(s->cache[hit].st);
        *st = s->cache[hit].st;
        return PG_OK;
    }
    if (s->n_cache == STORE_STMT_CACHE_MAX)
        return pg_fail(err, PG_ERR_INTERNAL,
                       "%s: more than %d distinct cached statements (raise "
                       "STORE_STMT_CACHE_MAX) preparing \"%s\"",
                       s->path, STORE_STMT_CACHE_MAX, sql);
    sqlite3_stmt *fresh = NULL;
    if (sqlite3_prepare_v3(s->db, sql, -1, SQLITE_PREPARE_PERSISTENT, &fresh, NULL) != SQLITE_OK)
        return sql_fail(s->db, err, "prepare \"%s\"", sql);
    s->cache[s->n_cache].sql = sql;
    s->cache[s->n_cache].st = fresh;
    s->n_cache++;
    *st = fresh;
    return PG_OK;
}

void sql_release(sqlite3_stmt *st)
{
    if (st == NULL) return;
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
}

void sql_cache_clear(pg_store *s)
{
    if (s == NULL) return;
    for (int i = 0; i < s->n_cache; i++) sqlite3_finalize(s->cache[i].st);
    s->n_cache = 0;
}

sqlite3 *store_handle(pg_store *s)
{
    return s != NULL ? s->db : NULL;
}
