/*
 * diagnosis_store.h: the ext_diagnosis table (schema migration 12): per
 * (run, capture, layer, external output, hypothesis), the distance of a
 * recorded external output (ext:NAME) to one scale-plumbing hypothesis
 * (kernels/attn_hypothesis.h), or why that hypothesis could not run on the
 * layer. The sweep writes them inside each layer's transaction; the gate,
 * `precgate run`'s summary and the reports read them (harness/diag_verdict.h
 * judges them).
 *
 * Every function works on an open pg_store; writes use statements prepared
 * once per store (sql_cached). Failures are
 * PG_ERR_DB naming the database file, what failed and SQLite's message,
 * except where a contract says otherwise; a NULL argument that must not be
 * NULL is PG_ERR_INTERNAL.
 */
#ifndef PG_DIAGNOSIS_STORE_H
#define PG_DIAGNOSIS_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "store.h"

/* One ext_diagnosis row. Strings owned by the array that holds it
 * (diagnosis_rows_free). */
typedef struct diagnosis_row {
    char *capture;
    int layer;
    char *ext_name;     /* NAME of ext:NAME */
    char *hypothesis;
    double rel_l2;      /* NaN when the hypothesis did not run (stored NULL) */
    char *not_run;      /* why it did not run; NULL when it ran */
} diagnosis_row;

/* Inserts one row: rel_l2 >= 0 (or +inf) with not_run NULL, or not_run
 * (the reason) with rel_l2 ignored and stored NULL. PG_ERR_NUMERIC when a
 * hypothesis that ran has a NaN or negative rel_l2 (nothing stored);
 * PG_ERR_DB on a duplicate key or an unknown run. */
pg_status diagnosis_store_put(pg_store *s, int64_t run_id, const char *capture, int layer,
                              const char *ext_name, const char *hypothesis, double rel_l2,
                              const char *not_run, pg_err *err);

/* Counts run_id's ext_diagnosis rows of capture per layer into
 * counts[0 .. n_layers-1] (zeroed first), for `run --resume`; a database
 * without the table (older schema) counts 0. PG_ERR_DB when a row names a
 * layer outside 0 .. n_layers-1. */
pg_status diagnosis_store_count_layers(pg_store *s, int64_t run_id, const char *capture,
                                       int n_layers, int64_t *counts, pg_err *err);

/* Whether db has the ext_diagnosis table into *has (0: a schema older
 * than migration 12, opened read-only by a report). */
pg_status diagnosis_store_has_table(pg_store *s, int *has, pg_err *err);

/* Every ext_diagnosis row of run_id into *out (n rows; free with
 * diagnosis_rows_free, also after a failure), ordered by capture, ext_name,
 * layer, then insertion order (the sweep inserts in hypothesis table
 * order). No table: no rows. PG_ERR_NOMEM. */
pg_status diagnosis_store_load(pg_store *s, int64_t run_id, diagnosis_row **out, size_t *n,
                               pg_err *err);

/* Frees n rows' strings and the array; NULL is a no-op. */
void diagnosis_rows_free(diagnosis_row *rows, size_t n);

#endif /* PG_DIAGNOSIS_STORE_H */
