/* shape_store.c: a run's layer_shapes rows (see shape_store.h). */
#include "shape_store.h"

#include <inttypes.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>

#include "sql_util.h"

static const char SQL_SHAPES[] =
    "SELECT capture, layer, hq, hkv, d, window, has_sinks FROM layer_shapes WHERE run_id = ?1"
    " ORDER BY capture, layer";

pg_status shape_store_load(pg_store *s, int64_t run_id, shape_row **out, size_t *n, pg_err *err)
{
    if (out == NULL || n == NULL) return pg_fail(err, PG_ERR_INTERNAL, "shape_store_load: NULL out");
    *out = NULL;
    *n = 0;
    sqlite3 *db = sql_handle_or_fail(s, "shape_store_load", err);
    if (db == NULL) return PG_ERR_INTERNAL;
    sqlite3_stmt *st = NULL;
    pg_status ps = sql_prepare(db, SQL_SHAPES, &st, err);
    int rc = ps == PG_OK ? sqlite3_bind_int64(st, 1, run_id) : SQLITE_OK;
    size_t cap = 0;
    while (ps == PG_OK && rc == SQLITE_OK && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (*n == cap) {
            const size_t grown = cap ? 2 * cap : 64;
            shape_row *more = realloc(*out, grown * sizeof *more);
            if (more == NULL) {
                ps = pg_fail(err, PG_ERR_NOMEM, "layer_shapes of run %" PRId64 ": out of memory",
                             run_id);
                break;
            }
            *out = more;
            cap = grown;
        }
        const unsigned char *capture = sqlite3_column_text(st, 0);
        shape_row *r = &(*out)[*n];
        *r = (shape_row){.capture = strdup(capture != NULL ? (const char *)capture : ""),
                         .layer = sqlite3_column_int(st, 1),
                         .shape = {.hq = sqlite3_column_int(st, 2),
                                   .hkv = sqlite3_column_int(st, 3),
                                   .d = sqlite3_column_int(st, 4),
                                   .window = sqlite3_column_int(st, 5),
                                   .has_sinks = sqlite3_column_int(st, 6)}};
        (*n)++;
        if (r->capture == NULL)
            ps = pg_fail(err, PG_ERR_NOMEM, "layer_shapes of run %" PRId64 ": out of memory",
                         run_id);
        rc = SQLITE_OK;
    }
    if (ps == PG_OK && rc != SQLITE_DONE)
        ps = sql_fail(db, err, "read the layer_shapes of run %" PRId64, run_id);
    sqlite3_finalize(st);
    return ps;
}

void shape_rows_free(shape_row *rows, size_t n)
{
    if (rows == NULL) return;
    for (size_t i = 0; i < n; i++) free(rows[i].capture);
    free(rows);
}
