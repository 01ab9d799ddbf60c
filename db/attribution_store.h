/*
 * attribution_store.h: the attribution table (schema migration 11): per
 * layer and fp8 variant of a sweep run with --attribute, the whole-layer
 * rel_l2 with one tensor alone quantized (harness/attribute.h computes them).
 *
 * Writes go through the store's cached statements (sql_cached) and join the
 * caller's open transaction (the sweep's per-layer one); reads see the
 * committed state. Failures are PG_ERR_DB naming the database file, what
 * failed and SQLite's message; a NULL store or argument that must not be
 * NULL is PG_ERR_INTERNAL.
 */
#ifndef PG_ATTRIBUTION_STORE_H
#define PG_ATTRIBUTION_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "store.h"

/* The stored tensor names, in the order every reader shows them: "none"
 * (every tensor bf16: the profile's arithmetic alone, the floor), "q", "k",
 * "v", "p" (that tensor alone quantized), "all" (the variant itself: the
 * joint error). */
#define ATTRIBUTION_N_TENSORS 6
extern const char *const attribution_tensors[ATTRIBUTION_N_TENSORS];
/* Indices into attribution_tensors of the two ends. */
#define ATTRIBUTION_NONE 0
#define ATTRIBUTION_ALL (ATTRIBUTION_N_TENSORS - 1)

/* The index of name in attribution_tensors, or -1 (also for NULL). */
int attribution_tensor_index(const char *name);

/* Inserts one attribution row. PG_ERR_NUMERIC when rel_l2 is NaN (nothing
 * stored); PG_ERR_DB when a CHECK, UNIQUE or foreign-key constraint fails
 * (a variant that is no fp8 profile, an unknown tensor, a duplicate key). */
pg_status attribution_store_put(pg_store *s, int64_t run_id, const char *capture, int layer,
                                const char *variant, const char *tensor, double rel_l2,
                                pg_err *err);

/* Counts run_id's attribution rows of capture layer by layer into
 * counts[0 .. n_layers-1] (zeroed first), for run --resume
 * (store_sweep_layer_rows). PG_ERR_DB when a read fails or a row names a
 * layer outside 0 .. n_layers-1. */
pg_status attribution_store_layer_counts(pg_store *s, int64_t run_id, const char *capture,
                                         int n_layers, int64_t *counts, pg_err *err);

/* One stored row; strings malloc'd, owned by the attribution_rows. */
typedef struct attribution_row {
    char *capture, *variant;
    int layer;
    int tensor;       /* index into attribution_tensors */
    double rel_l2;
} attribution_row;

/* A run's rows ordered by capture, layer, variant, then tensor in
 * attribution_tensors' order. */
typedef struct attribution_rows {
    attribution_row *rows;
    size_t n;
} attribution_rows;

/* Loads every attribution row of run_id from s into *out (zeroed first;
 * free with attribution_rows_free, also after a failure). A database
 * without the table (older than migration 11) gives no rows. PG_ERR_DB on
 * a failed read or a stored tensor name this binary does not know;
 * PG_ERR_NOMEM. */
pg_status attribution_store_load(pg_store *s, int64_t run_id, attribution_rows *out,
                                 pg_err *err);

/* Frees what attribution_store_load allocated in r and zeroes it; NULL-safe. */
void attribution_rows_free(attribution_rows *r);

#endif /* PG_ATTRIBUTION_STORE_H */
