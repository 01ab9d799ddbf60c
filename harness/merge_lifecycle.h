/*
 * merge_lifecycle.h: a merge's lifecycle, the use case behind `precgate
 * merge`: read the parts of sharded jobs (runs of `run`, `eval` or `diverge`
 * with --shard I/N) from their shard databases, check each job's set (every
 * part once, each finished and complete, one config but for the part's own
 * fields), and fold each job not merged before into one run of the database
 * merged into, all or nothing.
 *
 * It works on the store merged into, opened by the caller (the CLI:
 * cli_with_store), and writes one summary line per merged job to the
 * request's out once committed, and refusals beside the first to errs.
 */
#ifndef PG_MERGE_LIFECYCLE_H
#define PG_MERGE_LIFECYCLE_H

#include <stdio.h>

#include "base/status.h"
#include "db/store.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A merge to make. */
typedef struct merge_request {
    const char *const *files;  /* the shard databases (SHARD.db ...) */
    int n_files;
    FILE *out;                 /* the merged jobs' summaries; required */
    FILE *errs;                /* the faults beside the first, what was left; required */
} merge_request;

/* Merges rq's parts into s (db_path names it): PG_OK when every job was
 * merged or had been merged before from the same parts; PG_ERR_USAGE
 * naming the job and the fault when a set is not whole, a part is not
 * finished or complete, configs differ, or a file is the database merged
 * into (nothing written); any other code when a read or the write failed
 * (rolled back: s is left as it was). */
pg_status merge_lifecycle_run(pg_store *s, const char *db_path, const merge_request *rq,
                              pg_err *err);

#ifdef __cplusplus
}
#endif

#endif /* PG_MERGE_LIFECYCLE_H */
