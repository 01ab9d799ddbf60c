/*
 * merge_store.h: the SQL of `precgate merge` (harness/cmd_merge.c): reading
 * the parts of sharded jobs from shard databases, and copying their rows
 * into one merged run of the central database, recorded in merged_shards
 * (schema version 15).
 *
 * A part is a run whose config_json carries "job" and "shard" {"index",
 * "count"} (run/eval --shard I/N). A run whose config_json has either key,
 * or is no JSON object, or is NULL in a run that did not fail, is read as a
 * part too, for the merge to refuse (harness/cmd_merge.c): its job, index
 * or count then reads NULL or -1. Every value of a part's runs row and rows
 * is checked against what its column may hold (merge_store_read_parts). Its rows are those of the data tables
 * (merge_data_tables) under its run id; the derived tables (eval_scores,
 * eval_pairs, div_positions, div_summaries) are not copied: the caller
 * recomputes them from the merged rows. A part's digest is XXH3-128 over its rows, every column but run_id,
 * in the order of those columns: two parts with equal rows have equal
 * digests wherever and whenever they were stored.
 *
 * Shard databases are opened read-only and never changed.
 */
#ifndef PG_MERGE_STORE_H
#define PG_MERGE_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "store.h"

/* Room for a part's digest: "xxh3-128:", 32 hex digits and the NUL. */
#define MERGE_DIGEST_MAX 48

/* The tables whose rows a part carries into the merged run, NULL-terminated. */
extern const char *const merge_data_tables[];

/* One part of a sharded job as its shard database holds it. Strings are
 * malloc'd (merge_parts_free); a NULL column reads NULL. */
typedef struct merge_part {
    char *source;        /* the shard database's path, as given */
    int64_t run_id;      /* the part's run id there */
    char *kind, *status, *label, *git_rev, *device, *started_at, *finished_at;
    char *config_json;
    char *job;           /* config_json "job"; NULL when it is no string */
    int64_t index;       /* config_json "shard"."index"; -1 when it is no integer */
    int64_t count;       /* config_json "shard"."count"; -1 when it is no integer */
    char *error;         /* runs.error: why it failed or stopped; NULL when it finished */
    int64_t rows;        /* its rows in the data tables */
    char digest[MERGE_DIGEST_MAX];
} merge_part;

/* Opens the shard database at path read-only, checks it (PRAGMA
 * quick_check; its schema version must be store_latest_schema_version()),
 * and appends each of its parts (see above) to *parts (grown with realloc;
 * *n counts them), with its digest, once every value of the part's runs
 * row and of its rows in merge_data_tables is one its column may hold: of
 * the column's storage class (typeof: a text in an INTEGER or REAL column is
 * refused), in its range (metrics >= 0 or +inf, counts >= 0, fractions in
 * [0, 1], NULL only where it means NaN or nothing), names valid UTF-8, a
 * variant a full name of base/variant.h's grammar, and no column this
 * precgate's schema lacks. Failures name path: PG_ERR_DB for a file SQLite
 * cannot open or read ("file is not a database"), one quick_check finds
 * damaged, or of another schema version; PG_ERR_FORMAT for a value, naming
 * the run, the table, the row (rowid), the column, the value and what it
 * must be; PG_ERR_NOMEM. On failure the parts appended so far stay in
 * *parts (merge_parts_free them). */
pg_status merge_store_read_parts(const char *path, merge_part **parts, size_t *n, pg_err *err);

/* Frees n parts and the array; NULL is a no-op. */
void merge_parts_free(merge_part *parts, size_t n);

/* Frees what one part holds and zeroes it (a part dropped from the array). */
void merge_part_clear(merge_part *p);

/* One part already merged into a database (a merged_shards row). */
typedef struct merge_recorded {
    int64_t run_id;      /* the merged run */
    int64_t index, count;
    char *source;        /* as given to that merge */
    char *digest;
} merge_recorded;

/* The parts of job already merged into s, by index, into *rows (malloc'd;
 * NULL and *n 0 when none). PG_ERR_DB when the read fails. */
pg_status merge_store_recorded(pg_store *s, const char *job, merge_recorded **rows, size_t *n,
                               pg_err *err);

/* Frees n recorded rows and the array; NULL is a no-op. */
void merge_recorded_free(merge_recorded *rows, size_t n);

/* The runs row of a merged run; NULL strings are stored as NULL. */
typedef struct merge_run_info {
    const char *kind, *status, *label, *git_rev, *host, *device;
    const char *started_at, *finished_at;   /* required */
    const char *config_json;
} merge_run_info;

/* Inserts a finished run (status "complete" or "incomplete", no pid, no
 * heartbeat) with the given times; its id to *run_id. Commits with the
 * caller's transaction. PG_ERR_DB from a CHECK or when the insert fails. */
pg_status merge_store_add_run(pg_store *s, const merge_run_info *info, int64_t *run_id,
                              pg_err *err);

/* Copies part's rows from its shard database (merge_store_read_parts read
 * it) into run_id of s, and records the part in merged_shards: one call per
 * part, inside the caller's transaction (store_begin), so that a failure
 * leaves s as it was once the caller rolls back. PG_ERR_DB naming the
 * shard database or the table when a read or an insert fails (a UNIQUE
 * clash: two parts hold the same row). */
pg_status merge_store_copy_part(pg_store *s, const merge_part *part, int64_t run_id,
                                pg_err *err);

#endif /* PG_MERGE_STORE_H */
