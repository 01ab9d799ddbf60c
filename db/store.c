/* store.c: precgate's SQLite store (see store.h): open and migrate, cached statements, inserts. */
#include "store.h"

#include "sql_util.h"
#include "store_conn.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include "attribution_store.h"
#include "diagnosis_store.h"
#include "schema.h"
#include "base/variant.h"

/* Longest journal_mode name read back from the PRAGMA, NUL included. */
#define STORE_JOURNAL_MODE_MAX 16
/* SQL for "now" as UTC ISO 8601 with milliseconds: 2024-05-01T12:34:56.789Z. */
#define STORE_NOW_SQL "strftime('%Y-%m-%dT%H:%M:%fZ', 'now')"

/* The statements a store prepares once at open and reuses. */
typedef enum stmt_id {
    ST_BEGIN,
    ST_COMMIT,
    ST_ROLLBACK,
    ST_USER_VERSION,
    ST_RUN_INSERT,
    ST_RUN_FINISH,
    ST_RUN_REOPEN,
    ST_RUN_STATUS,
    ST_RUN_HEARTBEAT,
    ST_RUN_READ,
    ST_RUN_SET_CONFIG,
    ST_LAYER_INSERT,
    ST_QUANT_INSERT,
    ST_KV_FORMAT_INSERT,
    ST_KV_FORMAT_ROWS,
    ST_LAYER_ROWS,
    ST_QUANT_ROWS,
    ST_SHAPE_INSERT,
    ST_SHAPE_ROWS,
    ST_UNSUPPORTED_INSERT,
    ST_UNSUPPORTED_ROWS,
    ST_COUNT
} stmt_id;

/* The SQL of each stmt_id; parameters are numbered in the order they are bound. */
static const char *const stmt_sql[ST_COUNT] = {
    [ST_BEGIN] = "BEGIN IMMEDIATE",
    [ST_COMMIT] = "COMMIT",
    [ST_ROLLBACK] = "ROLLBACK",
    [ST_USER_VERSION] = "PRAGMA user_version",
    [ST_RUN_INSERT] =
        "INSERT INTO runs (kind, label, git_rev, host, device, config_json, status, started_at,"
        " pid, heartbeat_at)"
        " VALUES (?1, ?2, ?3, ?4, ?5, ?6, 'running', " STORE_NOW_SQL ", ?7, " STORE_NOW_SQL ")",
    [ST_RUN_FINISH] =
        "UPDATE runs SET status = ?1, error = ?2, finished_at = " STORE_NOW_SQL " WHERE id = ?3",
    /* Compare-and-set on the state store_run_read saw: two resumes of one
     * run cannot both take it. */
    [ST_RUN_REOPEN] =
        "UPDATE runs SET status = 'running', error = NULL, finished_at = NULL, pid = ?4,"
        " host = ?5, heartbeat_at = " STORE_NOW_SQL
        " WHERE id = ?1 AND status = ?2 AND pid IS ?3",
    [ST_RUN_STATUS] = "SELECT status FROM runs WHERE id = ?1",
    [ST_RUN_HEARTBEAT] =
        "UPDATE runs SET heartbeat_at = " STORE_NOW_SQL " WHERE id = ?1 AND status = 'running'",
    [ST_RUN_READ] =
        "SELECT kind, status, host, pid, heartbeat_at, config_json FROM runs WHERE id = ?1",
    [ST_RUN_SET_CONFIG] = "UPDATE runs SET config_json = ?2 WHERE id = ?1",
    /* ST_LAYER_INSERT is built from the metric table (layer_insert_sql). */
    [ST_QUANT_INSERT] =
        "INSERT INTO quant_stats (run_id, capture, layer, tensor, scale, scale_source,"
        " saturated_frac, underflow_frac) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
    [ST_KV_FORMAT_INSERT] =
        "INSERT INTO kv_format_stats (run_id, capture, layer, mode, tensor, format, n_values,"
        " saturated_frac, underflow_frac, code_bits, codes_used, code_entropy_bits, n_scales,"
        " scale_floor_frac, scale_min, scale_mean, scale_max)"
        " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17)",
    /* Both walk the UNIQUE indexes, whose first columns are run_id, capture, layer. */
    [ST_LAYER_ROWS] =
        "SELECT layer, count(*) FROM layer_metrics WHERE run_id = ?1 AND capture = ?2"
        " GROUP BY layer",
    [ST_KV_FORMAT_ROWS] =
        "SELECT layer, count(*) FROM kv_format_stats WHERE run_id = ?1 AND capture = ?2"
        " GROUP BY layer",
    [ST_QUANT_ROWS] =
        "SELECT layer, count(*) FROM quant_stats WHERE run_id = ?1 AND capture = ?2"
        " GROUP BY layer",
    [ST_SHAPE_INSERT] =
        "INSERT INTO layer_shapes (run_id, capture, layer, hq, hkv, d, window, has_sinks)"
        " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
    [ST_SHAPE_ROWS] =
        "SELECT layer, count(*) FROM layer_shapes WHERE run_id = ?1 AND capture = ?2"
        " GROUP BY layer",
    [ST_UNSUPPORTED_INSERT] =
        "INSERT INTO unsupported_cells (run_id, capture, layer, variant, reason)"
        " VALUES (?1, ?2, ?3, ?4, ?5)",
    [ST_UNSUPPORTED_ROWS] =
        "SELECT layer, count(*) FROM unsupported_cells WHERE run_id = ?1 AND capture = ?2"
        " GROUP BY layer",
};


/* s (NULL-safe) as printable text: "NULL" for a NULL pointer. */
static const char *str_or_null(const char *s)
{
    return s != NULL ? s : "NULL";
}

/* Rolls back s's open transaction, if any; errors are dropped (the caller is
 * already reporting the failure that made it roll back). */
static void rollback_quietly(pg_store *s)
{
    if (s->db != NULL && !sqlite3_get_autocommit(s->db))
        sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
}

/* Runs sql, a constant text from this file or schema.c (never built from
 * input), with sqlite3_exec; PG_ERR_DB described by fmt on failure. Used only
 * while opening, before the cached statements exist. */
__attribute__((format(printf, 4, 5)))
static pg_status exec_const(pg_store *s, const char *sql, pg_err *err, const char *fmt, ...)
{
    if (sqlite3_exec(s->db, sql, NULL, NULL, NULL) == SQLITE_OK) return PG_OK;
    char what[SQL_WHAT_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return sql_fail(s->db, err, "%s", what);
}

/* Runs the constant query sql and puts the first column of its first row in
 * *out; PG_ERR_DB (what names it) on failure or when it returns no row. */
static pg_status query_int(pg_store *s, const char *sql, int *out, const char *what, pg_err *err)
{
    sqlite3_stmt *st = NULL;
    pg_status ps = PG_OK;
    if (sqlite3_prepare_v2(s->db, sql, -1, &st, NULL) != SQLITE_OK) {
        ps = sql_fail(s->db, err, "%s", what);
    } else if (sqlite3_step(st) != SQLITE_ROW) {
        ps = sql_fail(s->db, err, "%s", what);
    } else {
        *out = sqlite3_column_int(st, 0);
    }
    sqlite3_finalize(st);
    return ps;
}

/* PG_ERR_DB unless version is one this binary can open (0 .. latest). */
static pg_status check_version_known(const pg_store *s, int version, pg_err *err)
{
    if (version >= 0 && version <= schema_migration_count) return PG_OK;
    return pg_fail(err, PG_ERR_DB,
                   "%s: database schema version %d is newer than this precgate knows "
                   "(newest %d); use a newer precgate (database left unchanged)",
                   s->path, version, schema_migration_count);
}

/* Switches the database to WAL and checks that it took (an in-memory
 * database keeps "memory"); PG_ERR_DB otherwise. */
static pg_status set_wal(pg_store *s, pg_err *err)
{
    sqlite3_stmt *st = NULL;
    char mode[STORE_JOURNAL_MODE_MAX] = "";
    pg_status ps = PG_OK;
    if (sqlite3_prepare_v2(s->db, "PRAGMA journal_mode = WAL", -1, &st, NULL) != SQLITE_OK
        || sqlite3_step(st) != SQLITE_ROW) {
        ps = sql_fail(s->db, err, "set journal_mode=WAL");
    } else {
        const unsigned char *got = sqlite3_column_text(st, 0);
        snprintf(mode, sizeof mode, "%s", got != NULL ? (const char *)got : "");
    }
    sqlite3_finalize(st);
    if (ps != PG_OK) return ps;
    const char *file = sqlite3_db_filename(s->db, "main");
    int in_memory = file == NULL || file[0] == '\0';
    if (strcasecmp(mode, "wal") == 0 || (in_memory && strcasecmp(mode, "memory") == 0))
        return PG_OK;
    return pg_fail(err, PG_ERR_DB,
                   "%s: cannot switch to WAL journal mode (it stays '%s'; is the "
                   "directory writable?)", s->path, mode);
}

/* PG_ERR_DB when the open transaction leaves rows that break a foreign key. */
static pg_status check_foreign_keys(pg_store *s, int version, pg_err *err)
{
    sqlite3_stmt *st = NULL;
    pg_status ps = PG_OK;
    if (sqlite3_prepare_v2(s->db, "PRAGMA foreign_key_check", -1, &st, NULL) != SQLITE_OK) {
        ps = sql_fail(s->db, err, "check foreign keys after migrating to schema version %d",
                      version);
    } else {
        int rc = sqlite3_step(st);
        if (rc == SQLITE_ROW) {
            const unsigned char *table = sqlite3_column_text(st, 0);
            ps = pg_fail(err, PG_ERR_DB,
                         "%s: migrating to schema version %d leaves rows of %s that break "
                         "a foreign key (nothing changed)",
                         s->path, version, table != NULL ? (const char *)table : "?");
        } else if (rc != SQLITE_DONE) {
            ps = sql_fail(s->db, err, "check foreign keys after migrating to schema version %d",
                         version);
        }
    }
    sqlite3_finalize(st);
    return ps;
}

/* Applies the migration that follows the database's version, inside one
 * BEGIN IMMEDIATE transaction (so a concurrent opener waits, then sees the
 * new version); sets *done when the database is already at the newest
 * version. On failure everything this step did is rolled back. */
static pg_status migrate_one_step(pg_store *s, int *done, pg_err *err)
{
    *done = 0;
    pg_status ps = exec_const(s, "BEGIN IMMEDIATE", err, "begin a schema migration");
    if (ps != PG_OK) return ps;

    /* Read again under the write lock: another process may have migrated. */
    int version = 0;
    ps = query_int(s, "PRAGMA user_version", &version, "read the schema version", err);
    if (ps == PG_OK) ps = check_version_known(s, version, err);
    if (ps == PG_OK && version == schema_migration_count) {
        *done = 1;
        rollback_quietly(s);
        return PG_OK;
    }

    const schema_migration *m = ps == PG_OK ? &schema_migrations[version] : NULL;
    if (m != NULL && m->version != version + 1)
        ps = pg_fail(err, PG_ERR_INTERNAL,
                     "schema.c: migration at index %d has version %d, not %d",
                     version, m->version, version + 1);
    if (ps == PG_OK)
        ps = exec_const(s, m->sql, err, "migrate to schema version %d", m->version);
    if (ps == PG_OK)
        ps = exec_const(s, m->set_version, err, "record schema version %d", m->version);
    int recorded = 0;
    if (ps == PG_OK)
        ps = query_int(s, "PRAGMA user_version", &recorded, "read the schema version", err);
    if (ps == PG_OK && recorded != m->version)
        ps = pg_fail(err, PG_ERR_INTERNAL,
                     "schema.c: migration %d records user_version %d", m->version, recorded);
    if (ps == PG_OK) ps = check_foreign_keys(s, m->version, err);
    if (ps == PG_OK)
        ps = exec_const(s, "COMMIT", err, "commit the migration to schema version %d",
                        m->version);
    if (ps != PG_OK) rollback_quietly(s);
    return ps;
}

/* Brings a database at version up to the newest schema, one transaction per
 * migration, with foreign keys off while they run (as SQLite's table-rebuild
 * procedure needs; each step checks them before committing). */
static pg_status migrate(pg_store *s, int version, pg_err *err)
{
    if (version == schema_migration_count) return PG_OK;
    pg_status ps = exec_const(s, "PRAGMA foreign_keys = OFF", err, "turn foreign keys off");
    for (int done = 0; ps == PG_OK && !done;)
        ps = migrate_one_step(s, &done, err);
    return ps;
}

/* Sets the connection up: refuses a too-new database before changing
 * anything, then WAL, synchronous=NORMAL, migrations, foreign keys on. */
static pg_status configure(pg_store *s, pg_err *err)
{
    int version = 0;
    pg_status ps = query_int(s, "PRAGMA user_version", &version, "read the schema version", err);
    if (ps == PG_OK) ps = check_version_known(s, version, err);
    if (ps == PG_OK) ps = set_wal(s, err);
    if (ps == PG_OK)
        ps = exec_const(s, "PRAGMA synchronous = NORMAL", err, "set synchronous=NORMAL");
    if (ps == PG_OK) ps = migrate(s, version, err);
    if (ps == PG_OK)
        ps = exec_const(s, "PRAGMA foreign_keys = ON", err, "turn foreign keys on");
    int fk = 0;
    if (ps == PG_OK) ps = query_int(s, "PRAGMA foreign_keys", &fk, "read foreign_keys", err);
    if (ps == PG_OK && fk != 1)
        ps = pg_fail(err, PG_ERR_DB, "%s: this SQLite cannot enforce foreign keys", s->path);
    return ps;
}

/* The layer_metrics key columns ST_LAYER_INSERT binds before the metrics. */
#define LAYER_KEY_COLUMNS "run_id, capture, layer, head, variant, backend"
#define LAYER_KEY_COUNT 6
/* Room for ST_LAYER_INSERT's SQL. */
#define LAYER_INSERT_SQL_MAX 1024

/* ST_LAYER_INSERT: the key columns, then every pg_metric's column by name
 * (sql_metric_columns), ?1 .. ?N in that order, into buf. PG_ERR_INTERNAL
 * when it does not fit. */
static pg_status layer_insert_sql(char *buf, size_t len, pg_err *err)
{
    char cols[SQL_METRIC_COLUMNS_MAX];
    pg_status ps = sql_metric_columns(cols, sizeof cols, err);
    if (ps != PG_OK) return ps;
    size_t at = (size_t)snprintf(buf, len, "INSERT INTO layer_metrics (" LAYER_KEY_COLUMNS
                                           ", %s) VALUES (?1", cols);
    for (int i = 2; at < len && i <= LAYER_KEY_COUNT + PG_METRIC_COUNT; i++)
        at += (size_t)snprintf(buf + at, len - at, ", ?%d", i);
    if (at < len) at += (size_t)snprintf(buf + at, len - at, ")");
    if (at >= len)
        return pg_fail(err, PG_ERR_INTERNAL, "store: the layer_metrics insert needs more than "
                       "%zu bytes", len);
    return PG_OK;
}

/* Prepares every cached statement (after migration: they name the tables). */
static pg_status prepare_all(pg_store *s, pg_err *err)
{
    char layer_insert[LAYER_INSERT_SQL_MAX];
    pg_status ps = layer_insert_sql(layer_insert, sizeof layer_insert, err);
    for (int i = 0; ps == PG_OK && i < ST_COUNT; i++) {
        const char *sql = i == ST_LAYER_INSERT ? layer_insert : stmt_sql[i];
        if (sqlite3_prepare_v3(s->db, sql, -1, SQLITE_PREPARE_PERSISTENT, &s->stmt[i],
                               NULL) != SQLITE_OK)
            ps = sql_fail(s->db, err, "prepare \"%s\"", sql);
    }
    return ps;
}

/* 1 when path names a file (not "", ":memory:" or a "file:" URI, which are
 * left to SQLite). */
static int is_file_name(const char *path)
{
    return path[0] != '\0' && strcmp(path, ":memory:") != 0 && strncmp(path, "file:", 5) != 0;
}

/* The directory of path into *d: "." without a slash, "/" for a file in the
 * root, else the text before the last slash (in *dir, malloc'd: the caller
 * frees it). PG_ERR_NOMEM. */
static pg_status db_directory(const char *path, char **dir, const char **d, pg_err *err)
{
    *dir = strdup(path);
    if (*dir == NULL)
        return pg_fail(err, PG_ERR_NOMEM, "%s: out of memory opening the database", path);
    char *slash = strrchr(*dir, '/');
    *d = slash == NULL ? "." : slash == *dir ? "/" : *dir;
    if (slash != NULL && slash != *dir) *slash = '\0';
    return PG_OK;
}

/* Where a database that does not exist yet would be created: PG_OK when path
 * exists or its directory does and is writable; else PG_ERR_IO naming the
 * directory and what is wrong with it, which SQLite's own "unable to open
 * database file" does not say. In-memory and URI names are left to SQLite. */
static pg_status check_db_directory(const char *path, pg_err *err)
{
    struct stat st;
    if (!is_file_name(path) || stat(path, &st) == 0) return PG_OK;
    char *dir = NULL;
    const char *d = NULL;
    if (db_directory(path, &dir, &d, err) != PG_OK) return err->code;
    pg_status ps = PG_OK;
    if (stat(d, &st) != 0)
        ps = pg_fail(err, PG_ERR_IO, "%s: cannot create the database: the directory '%s' does not "
                                     "exist (create it, or give --db another path)",
                     path, d);
    else if (!S_ISDIR(st.st_mode))
        ps = pg_fail(err, PG_ERR_IO, "%s: cannot create the database: '%s' is not a directory",
                     path, d);
    else if (access(d, W_OK | X_OK) != 0)
        ps = pg_fail(err, PG_ERR_IO, "%s: cannot create the database: the directory '%s' is not "
                                     "writable",
                     path, d);
    free(dir);
    return ps;
}

/* A read-only connection's set-up: refuses a too-new database, and an older
 * one (it cannot be migrated without writing; the queries of this binary
 * need the newest schema), then foreign keys on. Nothing is written. */
static pg_status configure_read_only(pg_store *s, pg_err *err)
{
    int version = 0;
    pg_status ps = query_int(s, "PRAGMA user_version", &version, "read the schema version", err);
    if (ps == PG_OK) ps = check_version_known(s, version, err);
    if (ps == PG_OK && version < schema_migration_count)
        ps = pg_fail(err, PG_ERR_DB,
                     "%s: database schema version %d is older than this precgate's %d, and it "
                     "can only be opened read-only (it or its directory is not writable), so it "
                     "cannot be migrated: run a precgate command on it once where it is "
                     "writable (database left unchanged)",
                     s->path, version, schema_migration_count);
    if (ps == PG_OK) ps = exec_const(s, "PRAGMA foreign_keys = ON", err, "turn foreign keys on");
    return ps;
}

/* Opens name (path itself, or a URI naming it) with the sqlite3_open_v2
 * flags, set up as access says (configure, or configure_read_only), its
 * statements prepared. path names it in messages. */
static pg_status open_as(const char *path, const char *name, int flags, store_access access,
                         pg_store **out, pg_err *err)
{
    pg_store *s = calloc(1, sizeof *s);
    if (s == NULL || (s->path = strdup(path)) == NULL ||
        (s->stmt = calloc(ST_COUNT, sizeof *s->stmt)) == NULL) {
        if (s != NULL) free(s->path);
        free(s);
        return pg_fail(err, PG_ERR_NOMEM, "%s: out of memory opening the database", path);
    }
    s->access = access;
    pg_status ps = PG_OK;
    if (sqlite3_open_v2(name, &s->db, flags, NULL) != SQLITE_OK) {
        ps = sql_fail_open(path, s->db, err);
    } else {
        sqlite3_extended_result_codes(s->db, 1);
        sqlite3_busy_timeout(s->db, STORE_BUSY_TIMEOUT_MS);
        ps = access == STORE_READ_WRITE ? configure(s, err) : configure_read_only(s, err);
        if (ps == PG_OK) ps = prepare_all(s, err);
    }
    if (ps != PG_OK) {
        store_close(s);
        return ps;
    }
    *out = s;
    return PG_OK;
}

pg_status store_open(const char *path, pg_store **out, pg_err *err)
{
    if (out == NULL) return pg_fail(err, PG_ERR_INTERNAL, "store_open: out is NULL");
    *out = NULL;
    if (path == NULL) return pg_fail(err, PG_ERR_INTERNAL, "store_open: path is NULL");
    const pg_status dir_ok = check_db_directory(path, err);
    if (dir_ok != PG_OK) return dir_ok;
    return open_as(path, path, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, STORE_READ_WRITE, out,
                   err);
}

/* 1 when the existing file path could be written as SQLite writes a WAL
 * database: the file itself, and its directory (the -wal and -shm files are
 * created there). access(2) answers for the real user, and says EROFS on a
 * read-only file system. */
static int writable_in_place(const char *path, pg_err *err, pg_status *ps)
{
    char *dir = NULL;
    const char *d = NULL;
    if ((*ps = db_directory(path, &dir, &d, err)) != PG_OK) return 0;
    const int ok = access(path, W_OK) == 0 && access(d, W_OK | X_OK) == 0;
    free(dir);
    return ok;
}

/* The SQLite URI of file path with the query query ("mode=ro"): "file:"
 * and the path with '%', '?' and '#' percent-encoded (an absolute path
 * after an empty authority, "file:///..."), malloc'd; NULL when out of
 * memory. https://www.sqlite.org/uri.html */
static char *file_uri(const char *path, const char *query)
{
    const size_t n = strlen(path);
    /* "file://" + each byte as at most "%XX" + "?" + query + NUL. */
    char *uri = malloc(strlen("file://") + 3 * n + 1 + strlen(query) + 1);
    if (uri == NULL) return NULL;
    char *o = uri + sprintf(uri, "%s", path[0] == '/' ? "file://" : "file:");
    for (const char *p = path; *p != '\0'; p++)
        o += *p == '%' || *p == '?' || *p == '#' ? sprintf(o, "%%%02X", (unsigned char)*p)
                                                 : (*o = *p, 1);
    sprintf(o, "?%s", query);
    return uri;
}

/* Opens the existing file path read-only through a URI with query, as
 * access says. */
static pg_status open_read_only(const char *path, const char *query, store_access access,
                                pg_store **out, pg_err *err)
{
    char *uri = file_uri(path, query);
    if (uri == NULL)
        return pg_fail(err, PG_ERR_NOMEM, "%s: out of memory opening the database", path);
    const pg_status ps =
        open_as(path, uri, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI, access, out, err);
    free(uri);
    return ps;
}

/* The size of path's WAL file ("PATH-wal"), 0 when there is none; -1 when
 * it cannot be told (a stat failure other than ENOENT, or no memory). */
static long long wal_size(const char *path)
{
    const size_t n = strlen(path);
    char *wal = malloc(n + sizeof "-wal");
    if (wal == NULL) return -1;
    memcpy(wal, path, n);
    memcpy(wal + n, "-wal", sizeof "-wal");
    struct stat st;
    const int rc = stat(wal, &st);
    const int e = errno;
    free(wal);
    if (rc != 0) return e == ENOENT ? 0 : -1;
    return (long long)st.st_size;
}

pg_status store_open_reader(const char *path, pg_store **out, pg_err *err)
{
    if (out == NULL) return pg_fail(err, PG_ERR_INTERNAL, "store_open_reader: out is NULL");
    *out = NULL;
    if (path == NULL) return pg_fail(err, PG_ERR_INTERNAL, "store_open_reader: path is NULL");
    struct stat st;
    pg_status ps = PG_OK;
    if (!is_file_name(path) || stat(path, &st) != 0 || writable_in_place(path, err, &ps))
        return store_open(path, out, err);
    if (ps != PG_OK) return ps;
    /* Read-only WAL (https://www.sqlite.org/wal.html#readonly): works when
     * the -shm and -wal files exist or can be created. */
    ps = open_read_only(path, "mode=ro", STORE_READ_ONLY, out, err);
    if (ps != PG_OK && ps != PG_ERR_NOMEM) {
        /* No -shm, and none can be made: immutable=1 reads the database file
         * alone, which is all of it only while its WAL holds nothing. */
        const long long wal = wal_size(path);
        pg_err why = *err;
        pg_err_clear(err);
        if (wal != 0)
            return pg_fail(err, PG_ERR_DB,
                           "%s: cannot be opened read-only (%s), and its -wal file holds "
                           "changes not yet in the database (%lld bytes) that a read without "
                           "the -shm file would miss: open it once where its directory is "
                           "writable",
                           path, why.msg, wal);
        ps = open_read_only(path, "immutable=1", STORE_IMMUTABLE, out, err);
    }
    return ps;
}

pg_status store_open_existing(const char *path, pg_store **out, pg_err *err)
{
    *out = NULL;
    struct stat sb;
    if (path == NULL || stat(path, &sb) != 0)
        return pg_fail(err, PG_ERR_IO, "database '%s' does not exist (--db PATH or $%s)",
                       path != NULL ? path : "", STORE_PATH_ENV);
    return store_open_reader(path, out, err);
}

store_access store_access_mode(const pg_store *s)
{
    return s != NULL ? s->access : STORE_READ_WRITE;
}

void store_close(pg_store *s)
{
    if (s == NULL) return;
    for (int i = 0; i < ST_COUNT; i++) sqlite3_finalize(s->stmt[i]);
    sql_cache_clear(s);
    /* close_v2: a statement a caller left open on store_handle() delays the
     * close until it is finalized instead of leaking the connection. */
    sqlite3_close_v2(s->db);
    free(s->stmt);
    free(s->path);
    free(s);
}

int store_schema_version(pg_store *s)
{
    if (s == NULL) return -1;
    sqlite3_stmt *st = s->stmt[ST_USER_VERSION];
    int version = sqlite3_step(st) == SQLITE_ROW ? sqlite3_column_int(st, 0) : -1;
    sqlite3_reset(st);
    return version;
}

int store_latest_schema_version(void)
{
    return schema_migration_count;
}






/* sql_step_write on one of s's statements, what formatted from fmt. */
__attribute__((format(printf, 4, 5)))
static pg_status finish_write(pg_store *s, sql_binder *b, pg_err *err, const char *fmt, ...)
{
    char what[SQL_WHAT_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return sql_step_write(s->db, b, what, err);
}

/* Steps one of the parameterless transaction statements; PG_ERR_DB as what. */
static pg_status step_plain(pg_store *s, stmt_id id, const char *what, pg_err *err)
{
    sqlite3_stmt *st = s->stmt[id];
    pg_status ps = sqlite3_step(st) == SQLITE_DONE ? PG_OK : sql_fail(s->db, err, "%s", what);
    sqlite3_reset(st);
    return ps;
}

pg_status store_begin(pg_store *s, pg_err *err)
{
    if (s == NULL) return pg_fail(err, PG_ERR_INTERNAL, "store_begin: store is NULL");
    return step_plain(s, ST_BEGIN, "begin a transaction", err);
}

pg_status store_commit(pg_store *s, pg_err *err)
{
    if (s == NULL) return pg_fail(err, PG_ERR_INTERNAL, "store_commit: store is NULL");
    return step_plain(s, ST_COMMIT, "commit", err);
}

void store_rollback(pg_store *s)
{
    if (s == NULL || sqlite3_get_autocommit(s->db)) return;
    sqlite3_stmt *st = s->stmt[ST_ROLLBACK];
    sqlite3_step(st);
    sqlite3_reset(st);
}

pg_status store_run_begin(pg_store *s, const store_run_info *info, int64_t *run_id, pg_err *err)
{
    if (s == NULL || info == NULL || info->kind == NULL || run_id == NULL)
        return pg_fail(err, PG_ERR_INTERNAL, "store_run_begin: store, info, kind or run_id is NULL");
    if (!sqlite3_get_autocommit(s->db))
        return pg_fail(err, PG_ERR_INTERNAL,
                       "%s: store_run_begin inside a transaction (the run must be committed "
                       "at once)", s->path);
    sql_binder b = sql_bind_start(s->stmt[ST_RUN_INSERT]);
    sql_bind_text(&b, info->kind);
    sql_bind_text(&b, info->label);
    sql_bind_text(&b, info->git_rev);
    sql_bind_text(&b, info->host);
    sql_bind_text(&b, info->device);
    sql_bind_text(&b, info->config_json);
    sql_bind_int64(&b, (int64_t)getpid());
    pg_status ps = finish_write(s, &b, err, "insert a '%s' run", info->kind);
    if (ps == PG_OK) *run_id = sqlite3_last_insert_rowid(s->db);
    return ps;
}

pg_status store_run_heartbeat(pg_store *s, int64_t run_id, pg_err *err)
{
    if (s == NULL) return pg_fail(err, PG_ERR_INTERNAL, "store_run_heartbeat: store is NULL");
    sql_binder b = sql_bind_start(s->stmt[ST_RUN_HEARTBEAT]);
    sql_bind_int64(&b, run_id);
    pg_status ps = finish_write(s, &b, err, "heartbeat of run %" PRId64, run_id);
    if (ps == PG_OK && sqlite3_changes64(s->db) == 0)
        ps = pg_fail(err, PG_ERR_DB, "%s: heartbeat of run %" PRId64 ": no running run has that id",
                     s->path, run_id);
    return ps;
}

/* Whether status is one store_run_finish sets, and whether it keeps an error. */
static int finish_status_ok(const char *status, int *keeps_error)
{
    static const struct { const char *name; int keeps_error; } finished[] = {
        {"complete", 0}, {"incomplete", 0}, {"failed", 1}, {"interrupted", 1},
    };
    for (size_t i = 0; status != NULL && i < sizeof finished / sizeof finished[0]; i++)
        if (strcmp(status, finished[i].name) == 0) {
            *keeps_error = finished[i].keeps_error;
            return 1;
        }
    return 0;
}

pg_status store_run_finish(pg_store *s, int64_t run_id, const char *status, const char *error,
                           pg_err *err)
{
    if (s == NULL) return pg_fail(err, PG_ERR_INTERNAL, "store_run_finish: store is NULL");
    int keeps_error = 0;
    if (!finish_status_ok(status, &keeps_error))
        return pg_fail(err, PG_ERR_INTERNAL,
                       "store_run_finish: run %" PRId64 " status '%s' is not 'complete', "
                       "'incomplete', 'failed' or 'interrupted'", run_id, str_or_null(status));
    sql_binder b = sql_bind_start(s->stmt[ST_RUN_FINISH]);
    sql_bind_text(&b, status);
    sql_bind_text(&b, keeps_error ? error : NULL);
    sql_bind_int64(&b, run_id);
    pg_status ps = finish_write(s, &b, err, "finish run %" PRId64 " as '%s'", run_id, status);
    if (ps == PG_OK && sqlite3_changes64(s->db) == 0)
        ps = pg_fail(err, PG_ERR_DB, "%s: finish run %" PRId64 ": no such run", s->path, run_id);
    return ps;
}

const char *store_this_host(char *buf, size_t len)
{
    if (len == 0) return buf;
    if (gethostname(buf, len) != 0 || buf[0] == '\0') snprintf(buf, len, "unknown");
    buf[len - 1] = '\0';  /* gethostname need not terminate a truncated name */
    return buf;
}

store_process store_probe_process(const char *status, const char *host, int64_t pid)
{
    if (status == NULL || strcmp(status, "running") != 0) return STORE_PROCESS_FINISHED;
    char here[STORE_HOST_MAX];
    if (host == NULL || pid <= 0 || (int64_t)(pid_t)pid != pid ||
        strcmp(host, store_this_host(here, sizeof here)) != 0)
        return STORE_PROCESS_UNKNOWN;
    /* Our own pid recorded by another process: that process is gone (a
     * container restarted under the same host name reuses low pids). No
     * process probes a run it holds itself. */
    if ((pid_t)pid == getpid()) return STORE_PROCESS_GONE;
    if (kill((pid_t)pid, 0) == 0) return STORE_PROCESS_ALIVE;
    return errno == ESRCH ? STORE_PROCESS_GONE : STORE_PROCESS_ALIVE;
}

const char *store_effective_status(const char *status, store_process p)
{
    return p == STORE_PROCESS_GONE ? "interrupted" : status;
}

/* Copies column i of st (NULL reads "") into buf; 0 when it does not fit. */
static int column_copy(sqlite3_stmt *st, int i, char *buf, size_t len)
{
    const unsigned char *t = sqlite3_column_text(st, i);
    const size_t n = t != NULL ? (size_t)sqlite3_column_bytes(st, i) : 0;
    if (n >= len) return 0;
    memcpy(buf, t != NULL ? (const char *)t : "", n);
    buf[n] = '\0';
    return 1;
}

pg_status store_run_read(pg_store *s, int64_t run_id, store_run_state *out, pg_err *err)
{
    if (s == NULL || out == NULL)
        return pg_fail(err, PG_ERR_INTERNAL, "store_run_read: store or out is NULL");
    memset(out, 0, sizeof *out);
    out->id = run_id;
    sqlite3_stmt *st = s->stmt[ST_RUN_READ];
    pg_status ps = PG_OK;
    int rc = sqlite3_bind_int64(st, 1, run_id);
    if (rc == SQLITE_OK) rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        enum { R_KIND, R_STATUS, R_HOST, R_PID, R_HEARTBEAT, R_CONFIG };
        if (!column_copy(st, R_KIND, out->kind, sizeof out->kind) ||
            !column_copy(st, R_STATUS, out->status, sizeof out->status) ||
            !column_copy(st, R_HOST, out->host, sizeof out->host) ||
            !column_copy(st, R_HEARTBEAT, out->heartbeat_at, sizeof out->heartbeat_at)) {
            ps = pg_fail(err, PG_ERR_INTERNAL,
                         "%s: run %" PRId64 ": a stored kind, status, host or heartbeat is "
                         "longer than store_run_state holds", s->path, run_id);
        } else {
            out->pid = sqlite3_column_int64(st, R_PID);  /* NULL reads 0 */
            const unsigned char *cfg = sqlite3_column_text(st, R_CONFIG);
            if (cfg != NULL && (out->config_json = strdup((const char *)cfg)) == NULL)
                ps = pg_fail(err, PG_ERR_NOMEM, "%s: run %" PRId64 ": out of memory", s->path,
                             run_id);
        }
    } else if (rc == SQLITE_DONE) {
        ps = pg_fail(err, PG_ERR_USAGE, "%s: no run has id %" PRId64, s->path, run_id);
    } else {
        ps = sql_fail(s->db, err, "read run %" PRId64, run_id);
    }
    sql_release(st);
    if (ps != PG_OK) {
        store_run_state_free(out);
        return ps;
    }
    out->process = store_probe_process(out->status, out->host[0] ? out->host : NULL, out->pid);
    snprintf(out->effective, sizeof out->effective, "%s",
             store_effective_status(out->status, out->process));
    return PG_OK;
}

void store_run_state_free(store_run_state *st)
{
    if (st == NULL) return;
    free(st->config_json);
    st->config_json = NULL;
}

pg_status store_run_resumable(pg_store *s, const store_run_state *rs, const char *kind,
                              int force, pg_err *err)
{
    if (s == NULL || rs == NULL || kind == NULL)
        return pg_fail(err, PG_ERR_INTERNAL, "store_run_resumable: store, run or kind is NULL");
    if (strcmp(rs->kind, kind) != 0)
        return pg_fail(err, PG_ERR_USAGE, "%s: run %" PRId64 " is a '%s' run, not '%s'", s->path,
                       rs->id, rs->kind, kind);
    if (!force && (rs->process == STORE_PROCESS_ALIVE || rs->process == STORE_PROCESS_UNKNOWN))
        return pg_fail(err, PG_ERR_USAGE,
                       "%s: run %" PRId64 " is still marked running and may be alive "
                       "(host %s, pid %" PRId64 ", last heartbeat %s%s); --force takes it anyway",
                       s->path, rs->id, rs->host[0] ? rs->host : "unknown", rs->pid,
                       rs->heartbeat_at[0] ? rs->heartbeat_at : "never",
                       rs->process == STORE_PROCESS_ALIVE ? ": that process exists on this host"
                                                          : ": not this host, cannot be probed");
    return PG_OK;
}

pg_status store_run_reopen(pg_store *s, int64_t run_id, const char *kind, int force,
                           pg_err *err)
{
    if (s == NULL || kind == NULL)
        return pg_fail(err, PG_ERR_INTERNAL, "store_run_reopen: store or kind is NULL");
    store_run_state rs;
    pg_status ps = store_run_read(s, run_id, &rs, err);
    if (ps != PG_OK) return ps;
    store_run_state_free(&rs);  /* the config is not needed here */
    ps = store_run_resumable(s, &rs, kind, force, err);
    if (ps != PG_OK) return ps;
    char here[STORE_HOST_MAX];
    sql_binder b = sql_bind_start(s->stmt[ST_RUN_REOPEN]);
    sql_bind_int64(&b, run_id);
    sql_bind_text(&b, rs.status);
    if (rs.pid > 0) sql_bind_int64(&b, rs.pid);
    else sql_bind_null(&b);
    sql_bind_int64(&b, (int64_t)getpid());
    sql_bind_text(&b, store_this_host(here, sizeof here));
    ps = finish_write(s, &b, err, "reopen run %" PRId64, run_id);
    if (ps == PG_OK && sqlite3_changes64(s->db) == 0)
        ps = pg_fail(err, PG_ERR_USAGE,
                     "%s: run %" PRId64 " changed while it was being resumed (another precgate "
                     "took it?); nothing changed", s->path, run_id);
    return ps;
}

pg_status store_run_set_config(pg_store *s, int64_t run_id, const char *config_json,
                               pg_err *err)
{
    if (s == NULL) return pg_fail(err, PG_ERR_INTERNAL, "store_run_set_config: store is NULL");
    sql_binder b = sql_bind_start(s->stmt[ST_RUN_SET_CONFIG]);
    sql_bind_int64(&b, run_id);
    sql_bind_text(&b, config_json);
    pg_status ps = finish_write(s, &b, err, "store the config of run %" PRId64, run_id);
    if (ps == PG_OK && sqlite3_changes64(s->db) == 0)
        ps = pg_fail(err, PG_ERR_DB, "%s: config of run %" PRId64 ": no such run", s->path,
                     run_id);
    return ps;
}

/* 1 when variant is a name as stored (base/variant.h: a full name, a bare
 * mode expanded) and, with profile_only, a kernel profile's (not ext:NAME
 * or PROFILE~spec); else 0, *why (zeroed by the caller) saying what the
 * grammar refused, if it did. */
static int stored_variant_ok(const char *variant, int profile_only, pg_err *why)
{
    variant_name vn;
    return variant != NULL && variant_name_parse("variant", variant, &vn, why) == PG_OK &&
           strcmp(vn.full, variant) == 0 && (!profile_only || vn.kind == VARIANT_PROFILE);
}

pg_status store_put_layer_metrics(pg_store *s, int64_t run_id, const char *capture, int layer,
                                  int head, const char *variant, const char *backend,
                                  const pg_metric_values *m, pg_err *err)
{
    if (s == NULL || m == NULL)
        return pg_fail(err, PG_ERR_INTERNAL, "store_put_layer_metrics: store or metrics is NULL");
    /* The name is the grammar's, as stored (base/variant.h): the schema no
     * longer lists the modes (migration 17). */
    pg_err why = {0};
    if (!stored_variant_ok(variant, 0, &why))
        return pg_fail(err, PG_ERR_INTERNAL,
                       "%s: layer_metrics (run %" PRId64 ", capture '%s', layer %d): variant "
                       "'%s' is no stored variant name (%s)", s->path, run_id,
                       str_or_null(capture), layer, str_or_null(variant),
                       why.msg[0] ? why.msg : "a bare mode is stored by its full profile name");
    /* cos_sim is left out: NaN is one of its documented values (stored NULL). */
    for (int i = 0; i < PG_METRIC_COUNT; i++) {
        const pg_metric k = (pg_metric)i;
        if (pg_metric_kind_of(k) != PG_METRIC_KIND_COSINE && isnan(pg_metric_value(m, k)))
            return pg_fail(err, PG_ERR_NUMERIC,
                           "%s: layer_metrics (run %" PRId64 ", capture '%s', layer %d, head %d, "
                           "variant '%s', backend '%s'): %s is NaN (only cos_sim may be NaN)",
                           s->path, run_id, str_or_null(capture), layer, head,
                           str_or_null(variant), str_or_null(backend), pg_metric_name(k));
    }
    sql_binder b = sql_bind_start(s->stmt[ST_LAYER_INSERT]);
    sql_bind_int64(&b, run_id);
    sql_bind_text(&b, capture);
    sql_bind_int64(&b, layer);
    sql_bind_int64(&b, head);
    sql_bind_text(&b, variant);
    sql_bind_text(&b, backend);
    sql_bind_metrics(&b, m);
    return finish_write(s, &b, err,
                        "insert layer_metrics (run %" PRId64 ", capture '%s', layer %d, head %d, "
                        "variant '%s', backend '%s')",
                        run_id, str_or_null(capture), layer, head, str_or_null(variant),
                        str_or_null(backend));
}

pg_status store_put_quant_stats(pg_store *s, int64_t run_id, const char *capture, int layer,
                                const char *tensor, double scale, const char *scale_source,
                                double saturated_frac, double underflow_frac, pg_err *err)
{
    if (s == NULL) return pg_fail(err, PG_ERR_INTERNAL, "store_put_quant_stats: store is NULL");
    if (isnan(scale))
        return pg_fail(err, PG_ERR_NUMERIC,
                       "%s: quant_stats (run %" PRId64 ", capture '%s', layer %d, tensor '%s'): "
                       "scale is NaN", s->path, run_id, str_or_null(capture), layer,
                       str_or_null(tensor));
    sql_binder b = sql_bind_start(s->stmt[ST_QUANT_INSERT]);
    sql_bind_int64(&b, run_id);
    sql_bind_text(&b, capture);
    sql_bind_int64(&b, layer);
    sql_bind_text(&b, tensor);
    sql_bind_double(&b, scale);
    sql_bind_text(&b, scale_source);
    sql_bind_double(&b, saturated_frac);
    sql_bind_double(&b, underflow_frac);
    return finish_write(s, &b, err,
                        "insert quant_stats (run %" PRId64 ", capture '%s', layer %d, tensor '%s')",
                        run_id, str_or_null(capture), layer, str_or_null(tensor));
}

pg_status store_put_kv_format_stats(pg_store *s, int64_t run_id, const char *capture, int layer,
                                    const store_kv_format_stats *r, pg_err *err)
{
    if (s == NULL || r == NULL)
        return pg_fail(err, PG_ERR_INTERNAL, "store_put_kv_format_stats: store or row is NULL");
    sql_binder b = sql_bind_start(s->stmt[ST_KV_FORMAT_INSERT]);
    sql_bind_int64(&b, run_id);
    sql_bind_text(&b, capture);
    sql_bind_int64(&b, layer);
    sql_bind_text(&b, r->mode);
    sql_bind_text(&b, r->tensor);
    sql_bind_text(&b, r->format);
    sql_bind_int64(&b, r->n_values);
    sql_bind_double(&b, r->saturated_frac);
    sql_bind_double(&b, r->underflow_frac);
    sql_bind_int64(&b, r->code_bits);
    sql_bind_int64(&b, r->codes_used);
    sql_bind_double(&b, r->code_entropy_bits);
    sql_bind_int64(&b, r->n_scales);
    sql_bind_double(&b, r->scale_floor_frac);
    sql_bind_double(&b, r->scale_min);
    sql_bind_double(&b, r->scale_mean);
    sql_bind_double(&b, r->scale_max);
    return finish_write(s, &b, err,
                        "insert kv_format_stats (run %" PRId64 ", capture '%s', layer %d, mode "
                        "'%s', tensor '%s')", run_id, str_or_null(capture), layer,
                        str_or_null(r->mode), str_or_null(r->tensor));
}

pg_status store_put_unsupported_cell(pg_store *s, int64_t run_id, const char *capture,
                                     int layer, const char *variant, const char *reason,
                                     pg_err *err)
{
    if (s == NULL)
        return pg_fail(err, PG_ERR_INTERNAL, "store_put_unsupported_cell: store is NULL");
    pg_err why = {0};
    if (!stored_variant_ok(variant, 1, &why))
        return pg_fail(err, PG_ERR_DB,
                       "%s: unsupported_cells (run %" PRId64 ", capture '%s', layer %d): "
                       "variant '%s' is no kernel profile's name%s%s%s", s->path, run_id,
                       str_or_null(capture), layer, str_or_null(variant), why.msg[0] ? " (" : "",
                       why.msg, why.msg[0] ? ")" : "");
    sql_binder b = sql_bind_start(s->stmt[ST_UNSUPPORTED_INSERT]);
    sql_bind_int64(&b, run_id);
    sql_bind_text(&b, capture);
    sql_bind_int64(&b, layer);
    sql_bind_text(&b, variant);
    sql_bind_text(&b, reason);
    return finish_write(s, &b, err,
                        "insert unsupported_cells (run %" PRId64 ", capture '%s', layer %d, "
                        "variant '%s')", run_id, str_or_null(capture), layer, variant);
}

pg_status store_put_layer_shape(pg_store *s, int64_t run_id, const char *capture, int layer,
                                const store_layer_shape *shape, pg_err *err)
{
    if (s == NULL || shape == NULL)
        return pg_fail(err, PG_ERR_INTERNAL, "store_put_layer_shape: store or shape is NULL");
    sql_binder b = sql_bind_start(s->stmt[ST_SHAPE_INSERT]);
    sql_bind_int64(&b, run_id);
    sql_bind_text(&b, capture);
    sql_bind_int64(&b, layer);
    sql_bind_int64(&b, shape->hq);
    sql_bind_int64(&b, shape->hkv);
    sql_bind_int64(&b, shape->d);
    sql_bind_int64(&b, shape->window);
    sql_bind_int64(&b, shape->has_sinks);
    return finish_write(s, &b, err,
                        "insert layer_shapes (run %" PRId64 ", capture '%s', layer %d)", run_id,
                        str_or_null(capture), layer);
}

/* The per-layer row counts of one table, and where each lands in a store_layer_rows. */
typedef struct layer_count_query {
    stmt_id id;
    const char *table;
    size_t offset;  /* offsetof the store_layer_rows field */
} layer_count_query;

static const layer_count_query layer_count_queries[] = {
    {ST_LAYER_ROWS, "layer_metrics", offsetof(store_layer_rows, metrics)},
    {ST_QUANT_ROWS, "quant_stats", offsetof(store_layer_rows, quant)},
    {ST_SHAPE_ROWS, "layer_shapes", offsetof(store_layer_rows, shapes)},
    {ST_KV_FORMAT_ROWS, "kv_format_stats", offsetof(store_layer_rows, kv_formats)},
    {ST_UNSUPPORTED_ROWS, "unsupported_cells", offsetof(store_layer_rows, unsupported)},
};

pg_status store_sweep_layer_rows(pg_store *s, int64_t run_id, const char *capture, int n_layers,
                                 store_layer_rows *rows, pg_err *err)
{
    if (s == NULL || capture == NULL || rows == NULL || n_layers < 0)
        return pg_fail(err, PG_ERR_INTERNAL,
                       "store_sweep_layer_rows: store, capture or rows missing");
    memset(rows, 0, (size_t)n_layers * sizeof *rows);
    pg_status ps = PG_OK;
    for (size_t i = 0; ps == PG_OK && i < sizeof layer_count_queries / sizeof layer_count_queries[0];
         i++) {
        const layer_count_query *q = &layer_count_queries[i];
        ps = sql_read_layer_counts(s->db, s->stmt[q->id], run_id, capture, q->table, n_layers,
                                   (int64_t *)((char *)rows + q->offset), sizeof *rows, err);
        sql_release(s->stmt[q->id]);
    }
    /* The tables of other modules, counted into an array each. */
    static const struct {
        pg_status (*count)(pg_store *, int64_t, const char *, int, int64_t *, pg_err *);
        size_t offset;  /* offsetof the store_layer_rows field */
    } module_counts[] = {
        {attribution_store_layer_counts, offsetof(store_layer_rows, attribution)},
        {diagnosis_store_count_layers, offsetof(store_layer_rows, diagnosis)},
    };
    for (size_t i = 0; ps == PG_OK && i < sizeof module_counts / sizeof module_counts[0]; i++) {
        int64_t *counts = calloc((size_t)n_layers + 1, sizeof *counts);
        if (counts == NULL)
            return pg_fail(err, PG_ERR_NOMEM, "store_sweep_layer_rows: out of memory");
        ps = module_counts[i].count(s, run_id, capture, n_layers, counts, err);
        for (int l = 0; ps == PG_OK && l < n_layers; l++)
            *(int64_t *)((char *)&rows[l] + module_counts[i].offset) = counts[l];
        free(counts);
    }
    return ps;
}

pg_status store_run_status(pg_store *s, int64_t run_id, char *buf, size_t buf_len, pg_err *err)
{
    if (s == NULL || buf == NULL || buf_len == 0)
        return pg_fail(err, PG_ERR_INTERNAL, "store_run_status: store or buffer missing");
    sqlite3_stmt *st = s->stmt[ST_RUN_STATUS];
    pg_status ps = PG_OK;
    int rc = sqlite3_bind_int64(st, 1, run_id);
    if (rc == SQLITE_OK) rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        const unsigned char *text = sqlite3_column_text(st, 0);
        size_t len = (size_t)sqlite3_column_bytes(st, 0);
        if (text == NULL) {
            ps = sql_fail(s->db, err, "read the status of run %" PRId64, run_id);
        } else if (len >= buf_len) {
            ps = pg_fail(err, PG_ERR_INTERNAL,
                         "store_run_status: run %" PRId64 " status '%s' needs %zu bytes, "
                         "buffer has %zu", run_id, (const char *)text, len + 1, buf_len);
        } else {
            memcpy(buf, text, len + 1);
        }
    } else if (rc == SQLITE_DONE) {
        ps = pg_fail(err, PG_ERR_DB, "%s: status of run %" PRId64 ": no such run", s->path,
                     run_id);
    } else {
        ps = sql_fail(s->db, err, "read the status of run %" PRId64, run_id);
    }
    sql_release(st);
    return ps;
}
