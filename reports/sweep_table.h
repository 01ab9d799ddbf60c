/*
 * sweep_table.h: the terminal table of a sweep run, read back from the store:
 * one row per layer, one column per variant, the layer's rel_l2 in each.
 */
#ifndef PG_SWEEP_TABLE_H
#define PG_SWEEP_TABLE_H

#include <stdint.h>
#include <stdio.h>

#include "db/store.h"
#include "base/status.h"

/* Width of the capture column (longer names keep their tail after "..."). */
#define TABLE_CAPTURE_WIDTH 32
/* Narrowest value column (a longer variant name widens its own). */
#define TABLE_COL_WIDTH 12

/* Prints run_id's layer x variant rel_l2 table (head = -1 rows), a
 * worst-layer summary and a "not computed" line per variant and reason of
 * its unsupported_cells to out; PG_ERR_DB on a query failure (nothing is
 * printed then); PG_ERR_NOMEM. */
pg_status report_sweep_table(pg_store *store, int64_t run_id, FILE *out, pg_err *err);

#endif /* PG_SWEEP_TABLE_H */
