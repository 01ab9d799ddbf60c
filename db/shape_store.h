/*
 * shape_store.h: reading a run's layer_shapes rows (schema version 11; the
 * sweep writes them, db/store.h store_put_layer_shape), for `precgate
 * advise` and the reports' advice. Statements prepared per call with bound
 * parameters; failures are PG_ERR_DB naming the database file, what failed
 * and SQLite's message; a NULL argument is PG_ERR_INTERNAL.
 */
#ifndef PG_SHAPE_STORE_H
#define PG_SHAPE_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "store.h"

/* One layer_shapes row. capture is owned (shape_rows_free). */
typedef struct shape_row {
    char *capture;
    int layer;
    store_layer_shape shape;
} shape_row;

/* Reads every layer_shapes row of run_id, by capture then layer, into
 * *out[0 .. *n) (NULL and 0 when it has none: a run swept before the table;
 * free with shape_rows_free, also after a failure). PG_ERR_NOMEM. */
pg_status shape_store_load(pg_store *s, int64_t run_id, shape_row **out, size_t *n, pg_err *err);

/* Frees n rows and the array; NULL is a no-op. */
void shape_rows_free(shape_row *rows, size_t n);

#endif /* PG_SHAPE_STORE_H */
