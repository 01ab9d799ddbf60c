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

#include <stddef.h>
#include <stdint.h>

#include "base/metric.h"
#include "base/status.h"

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

/* How a store was opened. */
typedef enum store_access {
    STORE_READ_WRITE = 0, /* store_open: read, write, migrate */
    STORE_READ_ONLY,      /* SQLITE_OPEN_READONLY with mode=ro: a concurrent writer's commits
                           * are seen; every write fails (SQLITE_READONLY) */
    STORE_IMMUTABLE,      /* immutable=1 as well (no -shm could be made): the file is read as
                           * it was; changes a concurrent writer makes are not seen */
} store_access;

/* Opens path for a command that can do its work reading: store_open when
 * path does not exist, is not a plain file name, or it and its directory
 * are writable; else (a read-only file or directory, a read-only file
 * system) read-only, without migrating: mode=ro, and when that fails (no
 * -shm file, and none can be created) immutable=1, but only while the -wal
 * file is absent or empty (else PG_ERR_DB saying the WAL's changes would be
 * missed). A read-only open refuses a database older than this binary's
 * schema (it cannot be migrated: PG_ERR_DB naming both versions) as well
 * as a newer one. store_access_mode tells which open it was. */
pg_status store_open_reader(const char *path, pg_store **out, pg_err *err);

/* Opens the database at path with store_open_reader (read-only when it or
 * its directory is not writable), but only when the file exists: a
 * read-only command must not create an empty database out of a mistyped
 * path (PG_ERR_IO naming the path). Other failures as store_open_reader. */
pg_status store_open_existing(const char *path, pg_store **out, pg_err *err);

/* How s was opened; STORE_READ_WRITE for NULL. */
store_access store_access_mode(const pg_store *s);

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

/* Inserts a run with status 'running', started_at and heartbeat_at now (UTC
 * ISO 8601) and pid getpid(), committed at once; its id goes to *run_id.
 * PG_ERR_INTERNAL when info or info->kind is NULL or a transaction is open
 * (the row could not be committed at once). The strings are copied; the
 * caller keeps them. info->host should be this machine's gethostname() (the
 * liveness probe compares it with store_this_host()). */
pg_status store_run_begin(pg_store *s, const store_run_info *info, int64_t *run_id, pg_err *err);

/* Sets heartbeat_at of a 'running' run to now: the sign of life readers use
 * beside the pid (call it per stored batch of samples or layer, not per row;
 * it is one cached UPDATE). Inside a transaction it commits with it.
 * PG_ERR_DB when no running run has that id. */
pg_status store_run_heartbeat(pg_store *s, int64_t run_id, pg_err *err);

/* Sets a run's status ("complete", "incomplete", "failed" or "interrupted"),
 * its error (the failure's message for "failed", what stopped it for
 * "interrupted", e.g. "interrupted by SIGTERM"; stored only for those two;
 * may be NULL) and finished_at now. PG_ERR_INTERNAL for any other status
 * (nothing changed); PG_ERR_DB when no run has that id. Inside a transaction
 * it commits with it; otherwise at once. */
pg_status store_run_finish(pg_store *s, int64_t run_id, const char *status, const char *error,
                           pg_err *err);

/* Whether the process of a run is still there. */
typedef enum store_process {
    STORE_PROCESS_FINISHED = 0,  /* the run is not 'running': nothing to probe */
    STORE_PROCESS_ALIVE,         /* running, on this host, and its pid exists */
    STORE_PROCESS_GONE,          /* running, on this host, and its pid does not exist
                                    (killed -9, crashed, host rebooted): interrupted */
    STORE_PROCESS_UNKNOWN        /* running on another host, or no pid recorded
                                    (a run from before schema version 8): may be alive */
} store_process;

/* This machine's host name as store_run_begin's callers record it
 * (gethostname; "unknown" when that fails) into buf; returns buf. */
const char *store_this_host(char *buf, size_t len);

/* The liveness probe, the one place that decides it: for status "running",
 * GONE when host is this machine (store_this_host) and kill(pid, 0) fails
 * with ESRCH or pid is the caller's own (an earlier process's pid, reused),
 * ALIVE when it succeeds or fails otherwise (EPERM: someone
 * else's process; a reused pid reads as alive, the safe side), UNKNOWN when
 * host is another machine or NULL or pid <= 0. FINISHED for any other status.
 * Limitation: "this machine" is the host name; a process in another pid
 * namespace under the same host name (a container sharing it) would read as
 * GONE. Containers normally get their own host name. */
store_process store_probe_process(const char *status, const char *host, int64_t pid);

/* The status a reader should show: "interrupted" for a run whose process is
 * GONE, else the stored status. */
const char *store_effective_status(const char *status, store_process p);

/* Longest strings a store_run_state holds, NUL included. */
#define STORE_STATUS_MAX 16
#define STORE_KIND_MAX 32
#define STORE_HOST_MAX 256
#define STORE_TIME_MAX 32

/* One run as stored, with its probed process. */
typedef struct store_run_state {
    int64_t id;
    char kind[STORE_KIND_MAX];
    char status[STORE_STATUS_MAX];     /* as stored */
    char effective[STORE_STATUS_MAX];  /* store_effective_status() */
    char host[STORE_HOST_MAX];         /* "" when NULL */
    int64_t pid;                       /* 0 when NULL */
    char heartbeat_at[STORE_TIME_MAX]; /* "" when NULL */
    store_process process;
    char *config_json;                 /* malloc'd; NULL when NULL: store_run_state_free */
} store_run_state;

/* Reads run_id into *out and probes its process. PG_ERR_USAGE naming the
 * database and id when no run has that id; PG_ERR_DB when a read fails;
 * PG_ERR_INTERNAL when a stored string does not fit (nothing is cut). */
pg_status store_run_read(pg_store *s, int64_t run_id, store_run_state *out, pg_err *err);

/* Frees what store_run_read allocated in st (config_json); NULL-safe. */
void store_run_state_free(store_run_state *st);

/* PG_OK when store_run_reopen(s, rs->id, kind, force) would take the run
 * as read into rs; else its refusal (PG_ERR_USAGE, as store_run_reopen
 * words it). Lets a command refuse before it contacts anything. */
pg_status store_run_resumable(pg_store *s, const store_run_state *rs, const char *kind,
                              int force, pg_err *err);

/* Marks a run of the given kind 'running' again (for --resume): clears
 * finished_at and error, records this process (pid getpid(), host
 * store_this_host(), heartbeat_at now), committed at once. Taken: any
 * finished run (complete, incomplete, failed, interrupted) and a 'running'
 * run whose process is GONE (store_probe_process). A 'running' run whose
 * process is ALIVE or UNKNOWN is taken only with force (the caller's
 * --force: it may still be writing). PG_ERR_USAGE when no such run exists
 * (wrong id or another kind), when it needs force and force is 0 (the
 * message names its host, pid and last heartbeat), or when another process
 * reopened it between the read and the update. */
pg_status store_run_reopen(pg_store *s, int64_t run_id, const char *kind, int force,
                           pg_err *err);

/* Replaces a run's config_json (e.g. once the servers' model names are
 * known), committed with an open transaction or at once. PG_ERR_DB when no
 * run has that id. */
pg_status store_run_set_config(pg_store *s, int64_t run_id, const char *config_json,
                               pg_err *err);

/* Inserts one layer_metrics row (head -1 = whole layer) from m, every
 * pg_metric into the column of its name. PG_ERR_DB when a CHECK, NOT NULL,
 * UNIQUE or foreign-key constraint fails (bad variant/backend, duplicate
 * key, unknown run); PG_ERR_NUMERIC when a value other than cos_sim is NaN
 * (nothing stored). */
pg_status store_put_layer_metrics(pg_store *s, int64_t run_id, const char *capture, int layer,
                                  int head, const char *variant, const char *backend,
                                  const pg_metric_values *m, pg_err *err);

/* Inserts one quant_stats row; scale_source is a run --scales policy
 * ("capture", "amax", "vllm-dynamic" or "unit"), tensor "q", "k" or "v"
 * (else PG_ERR_DB from the CHECK). PG_ERR_NUMERIC when
 * scale is NaN; a NaN fraction is stored as NULL. */
pg_status store_put_quant_stats(pg_store *s, int64_t run_id, const char *capture, int layer,
                                const char *tensor, double scale, const char *scale_source,
                                double saturated_frac, double underflow_frac, pg_err *err);

/* One kv_format_stats row (schema version 18): what one mode's cache write
 * did to one layer's K or V. A NaN double is stored as NULL (nothing to
 * count, or no row scales). */
typedef struct store_kv_format_stats {
    const char *mode, *tensor, *format; /* tensor "k" or "v" */
    int64_t n_values;
    double saturated_frac, underflow_frac;
    int code_bits, codes_used;
    double code_entropy_bits;
    int64_t n_scales;
    double scale_floor_frac, scale_min, scale_mean, scale_max;
} store_kv_format_stats;

/* Inserts one kv_format_stats row. PG_ERR_DB when a CHECK, the UNIQUE (run,
 * capture, layer, mode, tensor) or the foreign key fails. */
pg_status store_put_kv_format_stats(pg_store *s, int64_t run_id, const char *capture, int layer,
                                    const store_kv_format_stats *r, pg_err *err);

/* One layer's attention shape, as a layer_shapes row (schema version 11). */
typedef struct store_layer_shape {
    int hq, hkv, d;  /* query heads, key/value heads, head dimension (> 0) */
    int window;      /* 0: full attention, else the keys each query sees (> 0) */
    int has_sinks;   /* 1: the layer has attention sinks, else 0 */
} store_layer_shape;

/* Inserts one layer_shapes row. PG_ERR_DB when a CHECK (a count <= 0, a
 * negative window, has_sinks not 0 or 1), the UNIQUE (run, capture, layer)
 * or the foreign key (unknown run) fails. */
pg_status store_put_layer_shape(pg_store *s, int64_t run_id, const char *capture, int layer,
                                const store_layer_shape *shape, pg_err *err);

/* Inserts one unsupported_cells row (schema version 19): variant, a kernel
 * profile's stored name (base/variant.h), cannot be computed on the layer,
 * for reason (kernels/attn_profile.h attn_profile_computes). PG_ERR_DB when
 * the name is not a profile's, reason is empty or NULL, or the UNIQUE (run,
 * capture, layer, variant) or the foreign key fails. */
pg_status store_put_unsupported_cell(pg_store *s, int64_t run_id, const char *capture,
                                     int layer, const char *variant, const char *reason,
                                     pg_err *err);

/* The rows a run holds for one layer of one capture. */
typedef struct store_layer_rows {
    int64_t metrics;  /* layer_metrics rows, per-head ones included */
    int64_t quant;    /* quant_stats rows */
    int64_t shapes;   /* layer_shapes rows: 1 for a layer swept at schema version 12 or
                         later, 0 before (the table did not exist) */
    int64_t attribution; /* attribution rows (db/attribution_store.h) */
    int64_t diagnosis;   /* ext_diagnosis rows (db/diagnosis_store.h) */
    int64_t kv_formats;  /* kv_format_stats rows (schema version 18) */
    int64_t unsupported; /* unsupported_cells rows (schema version 19) */
} store_layer_rows;

/* Counts run_id's layer_metrics, quant_stats, layer_shapes, kv_format_stats,
 * unsupported_cells, attribution and ext_diagnosis rows of capture, layer by layer, into rows[0 .. n_layers-1]
 * (zeroed first), for `run --resume`: the sweep writes each layer's rows in
 * one transaction, so a layer holds all of them or none. PG_ERR_DB when a
 * read fails or a row names a layer outside 0 .. n_layers-1 (the message
 * names the table, layer and capture). */
pg_status store_sweep_layer_rows(pg_store *s, int64_t run_id, const char *capture, int n_layers,
                                 store_layer_rows *rows, pg_err *err);

/* The status string of run_id into buf (PG_ERR_DB when no such run;
 * PG_ERR_INTERNAL when buf cannot hold it and its NUL). */
pg_status store_run_status(pg_store *s, int64_t run_id, char *buf, size_t buf_len, pg_err *err);

#endif /* PG_STORE_H */
