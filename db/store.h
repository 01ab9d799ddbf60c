/*
 * store.h: precgate's SQLite store: runs, per-layer metrics, quantization stats.
 *
 * The schema is a list of numbered migrations (db/schema.c) applied on open
 * inside one transaction each; PRAGMA user_version records the applied
 * version. The database runs in WAL mode with foreign keys on; every
 * statement is prepared with bound parameters. A database newer than this
 * binary is refused.
 *
 * Floating values: a REAL column round-trips a finite double bit for bit
 * (except -0.0, which SQLite reads back as +0.0) and +-inf as REAL inf.
 * SQLite turns a bound NaN into NULL, so the store lets NaN through only
 * where it means "undefined" (cos_sim, saturated_frac, underflow_frac: read
 * NULL as NaN) and refuses it, PG_ERR_NUMERIC, everywhere else.
 *
 * A pg_store is one connection: use it from one thread at a time. Failures
 * are PG_ERR_DB naming the database path, what failed and SQLite's message,
 * except where a contract says otherwise; a NULL store or argument that
 * must not be NULL is PG_ERR_INTERNAL.
 */
#ifndef PG_STORE_H
#define PG_STORE_H

#include <stdint.h>

#include "../harness/metrics.h"
#include "../harness/status.h"

/* Default database file, in the working directory. */
#define STORE_DEFAULT_PATH "precgate.db"
/* Environment variable that overrides the default path. */
#define STORE_PATH_ENV "PRECGATE_DB"
/* How long a statement waits for another connection's lock before SQLITE_BUSY. */
#define STORE_BUSY_TIMEOUT_MS 5000

typedef struct pg_store pg_store;

/* Opens (creating if needed) the database at path and migrates it to the
 * newest schema; PG_ERR_DB naming the path on failure, PG_ERR_IO naming the
 * directory when a new database's directory is missing or unwritable. A database whose
 * user_version is newer than store_latest_schema_version() is refused
 * (PG_ERR_DB naming both versions) before anything in it is changed. On
 * success *out owns the store (free with store_close); on failure *out is
 * NULL and a failed migration leaves the database at its last whole version. */
pg_status store_open(const char *path, pg_store **out, pg_err *err);

/* Finalizes statements and closes the database; NULL is a no-op. An open
 * transaction is rolled back. */
void store_close(pg_store *s);

/* The schema version recorded in the open database (PRAGMA user_version,
 * read now); -1 when s is NULL or the read fails. */
int store_schema_version(pg_store *s);

/* The newest schema version this binary knows. */
int store_latest_schema_version(void);

/* Starts a transaction (BEGIN IMMEDIATE: takes the write lock now, waiting up
 * to STORE_BUSY_TIMEOUT_MS); PG_ERR_DB when one is already open or the lock
 * is not granted. */
pg_status store_begin(pg_store *s, pg_err *err);
/* Commits the open transaction; PG_ERR_DB when none is open or the commit
 * fails (the transaction then stays open: roll it back). */
pg_status store_commit(pg_store *s, pg_err *err);
/* Rolls back the open transaction; safe to call when none is open (or s is
 * NULL). Rows committed earlier are untouched. */
void store_rollback(pg_store *s);

/* What a new run records about itself; NULL strings are stored as NULL. */
typedef struct store_run_info {
    const char *kind;        /* "sweep", "eval", ... (required) */
    const char *label;
    const char *git_rev;
    const char *host;
    const char *device;
    const char *config_json;
} store_run_info;

/* Inserts a run with status 'running' and started_at now (UTC ISO 8601),
 * committed at once; its id goes to *run_id. PG_ERR_INTERNAL when info or
 * info->kind is NULL or a transaction is open (the row could not be
 * committed at once). The strings are copied; the caller keeps them. */
pg_status store_run_begin(pg_store *s, const store_run_info *info, int64_t *run_id, pg_err *err);

/* Sets a run's status ("complete", "incomplete" or "failed"), its error (the failure's
 * message, stored only for "failed"; may be NULL) and finished_at now.
 * PG_ERR_INTERNAL for any other status (nothing changed); PG_ERR_DB when no
 * run has that id. Inside a transaction it commits with it; otherwise at once. */
pg_status store_run_finish(pg_store *s, int64_t run_id, const char *status, const char *error,
                           pg_err *err);

/* Marks a finished run of the given kind 'running' again (for --resume):
 * clears finished_at and error, committed at once. A run still marked
 * 'running' (a killed process) is taken only with allow_running. PG_ERR_USAGE
 * when no such run exists (wrong id, another kind, or running without allow_running). */
pg_status store_run_reopen(pg_store *s, int64_t run_id, const char *kind, int allow_running,
                           pg_err *err);

/* Inserts one layer_metrics row (head -1 = whole layer) from m (m->n is not
 * stored). PG_ERR_DB when a CHECK, NOT NULL, UNIQUE or foreign-key constraint
 * fails (bad variant/backend, duplicate key, unknown run); PG_ERR_NUMERIC
 * when a metric other than cos_sim is NaN (nothing stored). */
pg_status store_put_layer_metrics(pg_store *s, int64_t run_id, const char *capture, int layer,
                                  int head, const char *variant, const char *backend,
                                  const attn_error_metrics *m, pg_err *err);

/* Inserts one quant_stats row; scale_source is "capture" or "calibrated",
 * tensor "q", "k" or "v" (else PG_ERR_DB from the CHECK). PG_ERR_NUMERIC when
 * scale is NaN; a NaN fraction is stored as NULL. */
pg_status store_put_quant_stats(pg_store *s, int64_t run_id, const char *capture, int layer,
                                const char *tensor, double scale, const char *scale_source,
                                double saturated_frac, double underflow_frac, pg_err *err);

/* The status string of run_id into buf (PG_ERR_DB when no such run;
 * PG_ERR_INTERNAL when buf cannot hold it and its NUL). */
pg_status store_run_status(pg_store *s, int64_t run_id, char *buf, size_t buf_len, pg_err *err);

/* The raw handle, for tests and read-only queries by reports; owned by s
 * (do not close it; finalize your statements before store_close). NULL when
 * s is NULL. */
struct sqlite3 *store_handle(pg_store *s);

#endif /* PG_STORE_H */
