/* shape_store.c: a run's layer_shapes rows (see shape_store.h). */
#include "shape_store.h"

#include <inttypes.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sql_util.h"

static const char SQL_SHAPES[] =
    "SELECT capture, layer, hq, hkv, d, window, has_sinks FROM layer_shapes WHERE run_id = ?1"
    " ORDER BY capture, layer";

/* SQL_SHAPES' columns. */
static const sql_field SHAPE_FIELDS[] = {
    SQL_FIELD(TEXT, shape_row, capture),   SQL_FIELD(INT, shape_row, layer),
    SQL_FIELD(INT, shape_row, shape.hq),   SQL_FIELD(INT, shape_row, shape.hkv),
    SQL_FIELD(INT, shape_row, shape.d),    SQL_FIELD(INT, shape_row, shape.window),
    SQL_FIELD(INT, shape_row, shape.has_sinks),
};
static const sql_row_type SHAPE_ROW = SQL_ROW_TYPE(shape_row, SHAPE_FIELDS, NULL);

pg_status shape_store_load(pg_store *s, int64_t run_id, shape_row **out, size_t *n, pg_err *err)
{
    if (out == NULL || n == NULL) return pg_fail(err, PG_ERR_INTERNAL, "shape_store_load: NULL out");
    char what[SQL_WHAT_MAX];
    snprintf(what, sizeof what, "read the layer_shapes of run %" PRId64, run_id);
    const sql_param params[] = {SQL_INT64(run_id)};
    void *v = NULL;
    const pg_status ps = sql_read_all(s, "shape_store_load", SQL_SHAPES, SQL_PARAMS(params),
                                      &SHAPE_ROW, &v, n, what, err);
    *out = v;
    return ps;
}

void shape_rows_free(shape_row *rows, size_t n)
{
    sql_rows_free(&SHAPE_ROW, rows, n);
}
