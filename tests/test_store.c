/* test_store.c: Criterion tests of the SQLite store (db/store.h): schema, migrations, round trips, constraints. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <signal.h>
#include <sys/wait.h>

#include "db/history_store.h"
#include "db/run_list.h"
#include "db/schema.h"
#include "db/sql_util.h"
#include "db/store.h"
#include "testutil.h"

/* Seconds in a day, to turn julianday differences into seconds. */
#define SECONDS_PER_DAY 86400.0
/* How far started_at may lie from the test's "now" and still count as now. */
#define NOW_TOLERANCE_S 60.0
/* Length of "YYYY-MM-DDTHH:MM:SS.sssZ". */
#define ISO_MS_LEN 24
/* Big enough for any status string the store writes, NUL included. */
#define STATUS_BUF 16

/* The database file in the test's scratch directory. */
static char g_db[PATH_MAX + 16];

/* Makes the scratch directory and names the database in it. */
static void setup(void)
{
    tu_scratch_setup();
    snprintf(g_db, sizeof g_db, "%s/precgate.db", tu_dir);
}

TestSuite(store, .init = setup, .fini = tu_scratch_teardown);

/* Opens the test's database through the store, asserting success. */
static pg_store *open_ok(void)
{
    pg_err err = {0};
    pg_store *s = NULL;
    pg_status st = store_open(g_db, &s, &err);
    cr_assert_eq(st, PG_OK, "store_open: %s", err.msg);
    cr_assert_not_null(s);
    return s;
}

/* Opens path with plain SQLite (no store), asserting success. */
static sqlite3 *raw_open(const char *path)
{
    sqlite3 *db = NULL;
    cr_assert_eq(sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL),
                 SQLITE_OK);
    return db;
}

/* The text in the first column of sql's first row, in a malloc'd string. */
static char *q_text(sqlite3 *db, const char *sql)
{
    sqlite3_stmt *st = NULL;
    cr_assert_eq(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK, "%s: %s", sql,
                 sqlite3_errmsg(db));
    cr_assert_eq(sqlite3_step(st), SQLITE_ROW, "%s returned no row", sql);
    const unsigned char *t = sqlite3_column_text(st, 0);
    char *v = strdup(t ? (const char *)t : "(null)");
    sqlite3_finalize(st);
    return v;
}

/* The whole of path, malloc'd; its length in *len. */
static unsigned char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f, "cannot read %s", path);
    cr_assert_eq(fseek(f, 0, SEEK_END), 0);
    long size = ftell(f);
    cr_assert_geq(size, 0);
    rewind(f);
    unsigned char *buf = malloc((size_t)size + 1);
    cr_assert_not_null(buf);
    cr_assert_eq(fread(buf, 1, (size_t)size, f), (size_t)size);
    fclose(f);
    *len = (size_t)size;
    return buf;
}

/* Whether path exists. */
static int exists(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0;
}

/* Bitwise equality of two doubles (tells -0 from 0, compares infs exactly). */
static int same_bits(double a, double b)
{
    return memcmp(&a, &b, sizeof a) == 0;
}

/* Metrics with every field set from the arguments. */
static pg_metric_values mk_metrics(double rel_l2, double max_abs, double mean_abs,
                                     double p99_abs, double cos_sim, double sqnr_db,
                                     int64_t nan_count, int64_t inf_count)
{
    pg_metric_values m = {.rel_l2 = rel_l2, .max_abs = max_abs, .mean_abs = mean_abs,
                         .p99_abs = p99_abs, .cos_sim = cos_sim, .sqnr_db = sqnr_db,
                         .nan_count = nan_count, .inf_count = inf_count};
    return m;
}

/* A committed run of kind "sweep"; returns its id. */
static int64_t begin_run(pg_store *s)
{
    store_run_info info = {.kind = "sweep"};
    int64_t id = -1;
    pg_err err = {0};
    cr_assert_eq(store_run_begin(s, &info, &id, &err), PG_OK, "%s", err.msg);
    cr_assert_gt(id, 0);
    return id;
}

/* Inserts a plain finite bf16/cpu row for (run, "cap0", layer, head), asserting success. */
static void put_plain(pg_store *s, int64_t run, int layer, int head)
{
    pg_metric_values m = mk_metrics(1e-3, 2e-2, 3e-4, 1e-2, 0.999, 60.0, 0, 0);
    pg_err err = {0};
    cr_assert_eq(store_put_layer_metrics(s, run, "cap0", layer, head, "bf16", "cpu", &m, &err),
                 PG_OK, "%s", err.msg);
}

/* Expected shape of one column, as PRAGMA table_info reports it. */
typedef struct col_spec {
    const char *name, *type;
    int notnull, pk;
} col_spec;

/* Asserts that table's columns are exactly cols, in order. */
static void check_columns(sqlite3 *db, const char *table, const col_spec *cols, size_t n)
{
    sqlite3_stmt *st = NULL;
    cr_assert_eq(sqlite3_prepare_v2(db, "SELECT name, type, \"notnull\", pk FROM pragma_table_info(?1)"
                                    " ORDER BY cid", -1, &st, NULL), SQLITE_OK);
    sqlite3_bind_text(st, 1, table, -1, SQLITE_STATIC);
    size_t i = 0;
    while (sqlite3_step(st) == SQLITE_ROW) {
        cr_assert_lt(i, n, "%s has more columns than expected", table);
        cr_expect_str_eq((const char *)sqlite3_column_text(st, 0), cols[i].name, "%s col %zu", table, i);
        cr_expect_str_eq((const char *)sqlite3_column_text(st, 1), cols[i].type, "%s.%s type", table, cols[i].name);
        cr_expect_eq(sqlite3_column_int(st, 2), cols[i].notnull, "%s.%s notnull", table, cols[i].name);
        cr_expect_eq(sqlite3_column_int(st, 3), cols[i].pk, "%s.%s pk", table, cols[i].name);
        i++;
    }
    sqlite3_finalize(st);
    cr_assert_eq(i, n, "%s has %zu columns, expected %zu", table, i, n);
}

Test(store, fresh_db_has_schema_wal_and_pragmas)
{
    pg_store *s = open_ok();
    sqlite3 *db = store_handle(s);
    cr_assert_geq(store_latest_schema_version(), 1);
    cr_assert_eq(store_schema_version(s), store_latest_schema_version());
    cr_assert_eq(tu_sql_int(db, "PRAGMA user_version"), store_latest_schema_version());
    char *mode = q_text(db, "PRAGMA journal_mode");
    cr_assert_str_eq(mode, "wal");
    free(mode);
    cr_assert_eq(tu_sql_int(db, "PRAGMA foreign_keys"), 1);
    cr_assert_eq(tu_sql_int(db, "PRAGMA busy_timeout"), STORE_BUSY_TIMEOUT_MS);
    cr_assert_eq(tu_sql_int(db, "PRAGMA synchronous"), 1 /* NORMAL */);

    const col_spec runs[] = {
        {"id", "INTEGER", 0, 1},     {"kind", "TEXT", 1, 0},       {"label", "TEXT", 0, 0},
        {"status", "TEXT", 1, 0},    {"started_at", "TEXT", 1, 0}, {"finished_at", "TEXT", 0, 0},
        {"git_rev", "TEXT", 0, 0},   {"host", "TEXT", 0, 0},       {"device", "TEXT", 0, 0},
        {"config_json", "TEXT", 0, 0}, {"error", "TEXT", 0, 0},  {"pid", "INTEGER", 0, 0},
        {"heartbeat_at", "TEXT", 0, 0},
    };
    const col_spec layer_metrics[] = {
        {"run_id", "INTEGER", 1, 0}, {"capture", "TEXT", 1, 0},  {"layer", "INTEGER", 1, 0},
        {"head", "INTEGER", 1, 0},   {"variant", "TEXT", 1, 0},  {"backend", "TEXT", 1, 0},
        {"rel_l2", "REAL", 0, 0},    {"max_abs", "REAL", 0, 0},  {"mean_abs", "REAL", 0, 0},
        {"p99_abs", "REAL", 0, 0},   {"cos_sim", "REAL", 0, 0},  {"sqnr_db", "REAL", 0, 0},
        {"nan_count", "INTEGER", 1, 0}, {"inf_count", "INTEGER", 1, 0},
    };
    const col_spec quant_stats[] = {
        {"run_id", "INTEGER", 1, 0},     {"capture", "TEXT", 1, 0},
        {"layer", "INTEGER", 1, 0},      {"tensor", "TEXT", 1, 0},
        {"scale", "REAL", 1, 0},         {"scale_source", "TEXT", 1, 0},
        {"saturated_frac", "REAL", 0, 0}, {"underflow_frac", "REAL", 0, 0},
    };
    check_columns(db, "runs", runs, sizeof runs / sizeof runs[0]);
    check_columns(db, "layer_metrics", layer_metrics, sizeof layer_metrics / sizeof layer_metrics[0]);
    check_columns(db, "quant_stats", quant_stats, sizeof quant_stats / sizeof quant_stats[0]);

    /* The (run_id, variant) index, and foreign keys from both child tables. */
    char *cols = q_text(db, "SELECT group_concat(name, ',') FROM "
                            "(SELECT name FROM pragma_index_info('layer_metrics_run_variant') ORDER BY seqno)");
    cr_assert_str_eq(cols, "run_id,variant");
    free(cols);
    cr_assert_eq(tu_sql_int(db, "SELECT count(*) FROM pragma_foreign_key_list('layer_metrics') "
                                "WHERE \"table\" = 'runs' AND \"from\" = 'run_id' AND \"to\" = 'id'"), 1);
    cr_assert_eq(tu_sql_int(db, "SELECT count(*) FROM pragma_foreign_key_list('quant_stats') "
                                "WHERE \"table\" = 'runs' AND \"from\" = 'run_id' AND \"to\" = 'id'"), 1);
    store_close(s);
}

Test(store, reopen_keeps_data_and_does_not_migrate_again)
{
    pg_store *s = open_ok();
    int64_t run = begin_run(s);
    put_plain(s, run, 3, -1);
    int64_t cookie = tu_sql_int(store_handle(s), "PRAGMA schema_version");
    store_close(s);

    s = open_ok();
    sqlite3 *db = store_handle(s);
    /* schema_version (the schema cookie) moves on any DDL: unchanged means no
     * migration ran again; the migrations' plain CREATE would also fail. */
    cr_assert_eq(tu_sql_int(db, "PRAGMA schema_version"), cookie);
    cr_assert_eq(store_schema_version(s), store_latest_schema_version());
    cr_assert_eq(tu_sql_int(db, "SELECT count(*) FROM runs"), 1);
    cr_assert_eq(tu_sql_int(db, "SELECT count(*) FROM layer_metrics WHERE layer = 3 AND head = -1"), 1);
    char status[STATUS_BUF];
    pg_err err = {0};
    cr_assert_eq(store_run_status(s, run, status, sizeof status, &err), PG_OK, "%s", err.msg);
    cr_assert_str_eq(status, "running");
    put_plain(s, run, 4, -1);   /* the cached statements work after a reopen */
    cr_assert_eq(tu_sql_int(db, "SELECT count(*) FROM layer_metrics"), 2);
    store_close(s);
}

/* Opens a database whose user_version is beyond this binary's and asserts
 * the refusal: PG_ERR_DB naming the version and path, and no byte changed. */
static void expect_newer_refused(int version)
{
    size_t len_before = 0, len_after = 0;
    unsigned char *before = slurp(g_db, &len_before);
    pg_err err = {0};
    pg_store *s = (pg_store *)&err;   /* must be overwritten with NULL */
    cr_assert_eq(store_open(g_db, &s, &err), PG_ERR_DB);
    cr_assert_null(s);
    cr_assert_eq(err.code, PG_ERR_DB);
    char needle[64];
    snprintf(needle, sizeof needle, "version %d", version);
    cr_assert_not_null(strstr(err.msg, needle), "message lacks '%s': %s", needle, err.msg);
    cr_assert_not_null(strstr(err.msg, g_db), "message lacks the path: %s", err.msg);
    unsigned char *after = slurp(g_db, &len_after);
    cr_assert_eq(len_after, len_before);
    cr_assert_eq(memcmp(before, after, len_before), 0, "the database file changed");
    free(before);
    free(after);
}

Test(store, newer_rollback_journal_db_refused_unchanged)
{
    /* A rollback-journal database: opening must not even switch it to WAL. */
    int newer = store_latest_schema_version() + 1;
    sqlite3 *db = raw_open(g_db);
    tu_sql_exec(db, "CREATE TABLE future (x); INSERT INTO future VALUES (42);");
    char sql[64];
    snprintf(sql, sizeof sql, "PRAGMA user_version = %d", newer);   /* test setup only */
    tu_sql_exec(db, sql);
    sqlite3_close(db);

    expect_newer_refused(newer);
    char wal[sizeof g_db + 8];
    snprintf(wal, sizeof wal, "%s-wal", g_db);
    cr_assert(!exists(wal), "a -wal file was left behind");
    db = raw_open(g_db);
    char *mode = q_text(db, "PRAGMA journal_mode");
    cr_assert_str_eq(mode, "delete");
    free(mode);
    cr_assert_eq(tu_sql_int(db, "PRAGMA user_version"), newer);
    cr_assert_eq(tu_sql_int(db, "SELECT x FROM future"), 42);
    sqlite3_close(db);
}

Test(store, newer_wal_db_refused_unchanged)
{
    pg_store *s = open_ok();
    begin_run(s);
    store_close(s);
    int newer = store_latest_schema_version() + 7;
    sqlite3 *db = raw_open(g_db);
    char sql[64];
    snprintf(sql, sizeof sql, "PRAGMA user_version = %d", newer);   /* test setup only */
    tu_sql_exec(db, sql);
    sqlite3_close(db);   /* last connection: checkpoints the WAL into the file */

    expect_newer_refused(newer);
    db = raw_open(g_db);
    cr_assert_eq(tu_sql_int(db, "SELECT count(*) FROM runs"), 1);
    sqlite3_close(db);
}

Test(store, failed_migration_rolls_back_whole_step)
{
    /* A version-0 database that already has an unrelated "runs" table: the
     * first migration fails part-way and must leave nothing behind. */
    sqlite3 *db = raw_open(g_db);
    tu_sql_exec(db, "CREATE TABLE runs (x); INSERT INTO runs VALUES ('keep me');");
    sqlite3_close(db);

    pg_err err = {0};
    pg_store *s = NULL;
    cr_assert_eq(store_open(g_db, &s, &err), PG_ERR_DB);
    cr_assert_null(s);
    cr_assert_not_null(strstr(err.msg, "schema version 1"), "%s", err.msg);
    cr_assert_not_null(strstr(err.msg, "already exists"), "%s", err.msg);
    cr_assert_not_null(strstr(err.msg, g_db), "%s", err.msg);

    db = raw_open(g_db);
    cr_assert_eq(tu_sql_int(db, "PRAGMA user_version"), 0);
    cr_assert_eq(tu_sql_int(db, "SELECT count(*) FROM sqlite_schema WHERE name IN "
                                "('layer_metrics', 'quant_stats', 'runs_kind_started')"), 0);
    char *x = q_text(db, "SELECT x FROM runs");
    cr_assert_str_eq(x, "keep me");
    free(x);
    sqlite3_close(db);
}

Test(store, round_trip_every_column)
{
    pg_store *s = open_ok();
    pg_err err = {0};
    store_run_info full = {.kind = "sweep", .label = "nightly fp8", .git_rev = "0123abcd",
                           .host = "gpu-07", .device = "NVIDIA H200",
                           .config_json = "{\"layers\":[0,1],\"note\":\"it's \\\"quoted\\\"\"}"};
    store_run_info bare = {.kind = "eval"};
    int64_t run = 0, run2 = 0;
    cr_assert_eq(store_run_begin(s, &full, &run, &err), PG_OK, "%s", err.msg);
    cr_assert_eq(store_run_begin(s, &bare, &run2, &err), PG_OK, "%s", err.msg);
    cr_assert_neq(run, run2);

    /* head -1 with a non-finite output: +inf errors, NaN cos_sim, -inf sqnr. */
    pg_metric_values bad = mk_metrics(INFINITY, INFINITY, INFINITY, INFINITY, NAN, -INFINITY,
                                        3, 5);
    /* Awkward finite doubles: must come back bit for bit. */
    pg_metric_values odd = mk_metrics(0.1, DBL_MAX, 5e-324, 1.0 / 3.0, -0.999999999999,
                                        INFINITY /* identical output */, 0, 0);
    pg_metric_values plain = mk_metrics(1.25e-3, 0.0625, 2.5e-4, 1e-2, 0.9999871, 57.125, 0, 0);

    cr_assert_eq(store_begin(s, &err), PG_OK, "%s", err.msg);
    cr_assert_eq(store_put_layer_metrics(s, run, "llama-8b/p0", 31, -1, "fp8qkv@fa3", "cuda", &bad, &err),
                 PG_OK, "%s", err.msg);
    cr_assert_eq(store_put_layer_metrics(s, run, "llama-8b/p0", 0, 7, "ext:my_kernel-v2", "cpu",
                                         &odd, &err), PG_OK, "%s", err.msg);
    cr_assert_eq(store_put_layer_metrics(s, run, "llama-8b/p0", 0, 7, "bf16", "cpu", &plain, &err),
                 PG_OK, "%s", err.msg);
    cr_assert_eq(store_put_quant_stats(s, run, "llama-8b/p0", 31, "k", 0.0223214286, "amax",
                                       0.001953125, 1.0 / 3.0, &err), PG_OK, "%s", err.msg);
    cr_assert_eq(store_put_quant_stats(s, run, "llama-8b/p0", 31, "q", 1.0, "capture",
                                       0.0, NAN, &err), PG_OK, "%s", err.msg);
    cr_assert_eq(store_commit(s, &err), PG_OK, "%s", err.msg);
    cr_assert_eq(store_run_finish(s, run, "complete", NULL, &err), PG_OK, "%s", err.msg);
    cr_assert_eq(store_run_finish(s, run2, "failed", "injected: layer 3 failed", &err), PG_OK, "%s", err.msg);
    store_close(s);

    s = open_ok();
    sqlite3 *db = store_handle(s);
    char status[STATUS_BUF];
    cr_assert_eq(store_run_status(s, run, status, sizeof status, &err), PG_OK, "%s", err.msg);
    cr_assert_str_eq(status, "complete");
    cr_assert_eq(store_run_status(s, run2, status, sizeof status, &err), PG_OK, "%s", err.msg);
    cr_assert_str_eq(status, "failed");

    /* runs: every column, and the timestamps' format and time zone. */
    sqlite3_stmt *st = NULL;
    cr_assert_eq(sqlite3_prepare_v2(db,
        "SELECT id, kind, label, status, started_at, finished_at, git_rev, host, device,"
        " config_json, (julianday('now') - julianday(started_at)) * ?1,"
        " finished_at >= started_at FROM runs ORDER BY id", -1, &st, NULL), SQLITE_OK);
    sqlite3_bind_double(st, 1, SECONDS_PER_DAY);
    cr_assert_eq(sqlite3_step(st), SQLITE_ROW);
    cr_assert_eq(sqlite3_column_int64(st, 0), run);
    cr_assert_str_eq((const char *)sqlite3_column_text(st, 1), "sweep");
    cr_assert_str_eq((const char *)sqlite3_column_text(st, 2), full.label);
    cr_assert_str_eq((const char *)sqlite3_column_text(st, 3), "complete");
    for (int c = 4; c <= 5; c++) {
        const char *ts = (const char *)sqlite3_column_text(st, c);
        cr_assert_not_null(ts);
        cr_assert_eq(strlen(ts), ISO_MS_LEN, "timestamp %s", ts);
        const char *shape = "dddd-dd-ddTdd:dd:dd.dddZ";
        for (int i = 0; i < ISO_MS_LEN; i++)
            cr_assert(shape[i] == 'd' ? (ts[i] >= '0' && ts[i] <= '9') : ts[i] == shape[i],
                      "timestamp %s is not UTC ISO 8601 with milliseconds", ts);
    }
    cr_assert_str_eq((const char *)sqlite3_column_text(st, 6), full.git_rev);
    cr_assert_str_eq((const char *)sqlite3_column_text(st, 7), full.host);
    cr_assert_str_eq((const char *)sqlite3_column_text(st, 8), full.device);
    cr_assert_str_eq((const char *)sqlite3_column_text(st, 9), full.config_json);
    double age = sqlite3_column_double(st, 10);
    cr_assert(age >= 0.0 && age < NOW_TOLERANCE_S, "started_at is %g s from UTC now", age);
    cr_assert_eq(sqlite3_column_int(st, 11), 1);
    cr_assert_eq(sqlite3_step(st), SQLITE_ROW);
    cr_assert_eq(sqlite3_column_int64(st, 0), run2);
    cr_assert_str_eq((const char *)sqlite3_column_text(st, 1), "eval");
    cr_assert_str_eq((const char *)sqlite3_column_text(st, 3), "failed");
    cr_assert_not_null(sqlite3_column_text(st, 5));
    for (int c = 2; c <= 9; c++) {
        if (c == 3 || c == 4 || c == 5) continue;
        cr_assert_eq(sqlite3_column_type(st, c), SQLITE_NULL, "column %d of the bare run", c);
    }
    cr_assert_eq(sqlite3_step(st), SQLITE_DONE);
    sqlite3_finalize(st);

    /* layer_metrics: every column of every row. */
    cr_assert_eq(sqlite3_prepare_v2(db,
        "SELECT run_id, capture, layer, head, variant, backend, rel_l2, max_abs, mean_abs,"
        " p99_abs, cos_sim, sqnr_db, nan_count, inf_count FROM layer_metrics"
        " ORDER BY layer DESC, variant DESC", -1, &st, NULL), SQLITE_OK);
    const struct { int layer, head; const char *variant, *backend; const pg_metric_values *m; }
        want[] = {{31, -1, "fp8qkv@fa3", "cuda", &bad},
                  {0, 7, "ext:my_kernel-v2", "cpu", &odd},
                  {0, 7, "bf16", "cpu", &plain}};
    for (size_t r = 0; r < sizeof want / sizeof want[0]; r++) {
        cr_assert_eq(sqlite3_step(st), SQLITE_ROW, "row %zu", r);
        cr_assert_eq(sqlite3_column_int64(st, 0), run);
        cr_assert_str_eq((const char *)sqlite3_column_text(st, 1), "llama-8b/p0");
        cr_assert_eq(sqlite3_column_int(st, 2), want[r].layer);
        cr_assert_eq(sqlite3_column_int(st, 3), want[r].head);
        cr_assert_str_eq((const char *)sqlite3_column_text(st, 4), want[r].variant);
        cr_assert_str_eq((const char *)sqlite3_column_text(st, 5), want[r].backend);
        const double expect[] = {want[r].m->rel_l2, want[r].m->max_abs, want[r].m->mean_abs,
                                 want[r].m->p99_abs, want[r].m->cos_sim, want[r].m->sqnr_db};
        for (int c = 0; c < 6; c++) {
            if (isnan(expect[c])) {
                cr_assert_eq(sqlite3_column_type(st, 6 + c), SQLITE_NULL,
                             "row %zu col %d: NaN must read back as NULL", r, 6 + c);
                continue;
            }
            cr_assert_eq(sqlite3_column_type(st, 6 + c), SQLITE_FLOAT, "row %zu col %d", r, 6 + c);
            double got = sqlite3_column_double(st, 6 + c);
            cr_assert(same_bits(got, expect[c]), "row %zu col %d: got %a, stored %a", r, 6 + c,
                      got, expect[c]);
        }
        cr_assert_eq(sqlite3_column_int64(st, 12), want[r].m->nan_count);
        cr_assert_eq(sqlite3_column_int64(st, 13), want[r].m->inf_count);
    }
    cr_assert_eq(sqlite3_step(st), SQLITE_DONE);
    sqlite3_finalize(st);
    /* Users can find the non-finite rows with plain SQL. */
    cr_assert_eq(tu_sql_int(db, "SELECT count(*) FROM layer_metrics WHERE rel_l2 = 9e999 "
                                "AND sqnr_db = -9e999 AND cos_sim IS NULL"), 1);

    /* quant_stats: every column of both rows. */
    cr_assert_eq(sqlite3_prepare_v2(db,
        "SELECT run_id, capture, layer, tensor, scale, scale_source, saturated_frac,"
        " underflow_frac FROM quant_stats ORDER BY tensor", -1, &st, NULL), SQLITE_OK);
    cr_assert_eq(sqlite3_step(st), SQLITE_ROW);
    cr_assert_eq(sqlite3_column_int64(st, 0), run);
    cr_assert_str_eq((const char *)sqlite3_column_text(st, 1), "llama-8b/p0");
    cr_assert_eq(sqlite3_column_int(st, 2), 31);
    cr_assert_str_eq((const char *)sqlite3_column_text(st, 3), "k");
    cr_assert(same_bits(sqlite3_column_double(st, 4), 0.0223214286));
    cr_assert_str_eq((const char *)sqlite3_column_text(st, 5), "amax");
    cr_assert(same_bits(sqlite3_column_double(st, 6), 0.001953125));
    cr_assert(same_bits(sqlite3_column_double(st, 7), 1.0 / 3.0));
    cr_assert_eq(sqlite3_step(st), SQLITE_ROW);
    cr_assert_str_eq((const char *)sqlite3_column_text(st, 3), "q");
    cr_assert(same_bits(sqlite3_column_double(st, 4), 1.0));
    cr_assert_str_eq((const char *)sqlite3_column_text(st, 5), "capture");
    cr_assert_eq(sqlite3_column_type(st, 6), SQLITE_FLOAT);
    cr_assert(same_bits(sqlite3_column_double(st, 6), 0.0));
    cr_assert_eq(sqlite3_column_type(st, 7), SQLITE_NULL, "a NaN fraction reads back as NULL");
    cr_assert_eq(sqlite3_step(st), SQLITE_DONE);
    sqlite3_finalize(st);
    store_close(s);
}

Test(store, run_begin_commits_at_once)
{
    pg_store *s = open_ok();
    int64_t run = begin_run(s);
    /* A second connection sees the row while the store is still open, as it
     * would after the process was killed. */
    sqlite3 *other = raw_open(g_db);
    char *status = q_text(other, "SELECT status || '/' || ifnull(finished_at, 'NULL') FROM runs");
    cr_assert_str_eq(status, "running/NULL");
    free(status);
    cr_assert_eq(tu_sql_int(other, "SELECT id FROM runs"), run);
    sqlite3_close(other);

    /* Inside an explicit transaction the promise cannot be kept: refused. */
    pg_err err = {0};
    cr_assert_eq(store_begin(s, &err), PG_OK, "%s", err.msg);
    store_run_info info = {.kind = "sweep"};
    int64_t id = -1;
    cr_assert_eq(store_run_begin(s, &info, &id, &err), PG_ERR_INTERNAL);
    cr_assert_eq(id, -1);
    store_rollback(s);
    cr_assert_eq(tu_sql_int(store_handle(s), "SELECT count(*) FROM runs"), 1);
    store_close(s);
}

Test(store, run_finish_and_status_errors)
{
    pg_store *s = open_ok();
    int64_t run = begin_run(s);
    const char *bad[] = {"running", "Complete", "done", "", NULL};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        pg_err err = {0};
        cr_assert_eq(store_run_finish(s, run, bad[i], NULL, &err), PG_ERR_INTERNAL, "status %s",
                     bad[i] ? bad[i] : "NULL");
    }
    char status[STATUS_BUF];
    pg_err err = {0};
    cr_assert_eq(store_run_status(s, run, status, sizeof status, &err), PG_OK, "%s", err.msg);
    cr_assert_str_eq(status, "running");
    cr_assert_eq(tu_sql_int(store_handle(s), "SELECT finished_at IS NULL FROM runs"), 1);

    pg_err e2 = {0};
    cr_assert_eq(store_run_finish(s, run + 100, "complete", NULL, &e2), PG_ERR_DB);
    cr_assert_not_null(strstr(e2.msg, "no such run"), "%s", e2.msg);
    cr_assert_not_null(strstr(e2.msg, g_db), "%s", e2.msg);
    pg_err e3 = {0};
    cr_assert_eq(store_run_status(s, run + 100, status, sizeof status, &e3), PG_ERR_DB);
    char exact[sizeof "running"];
    pg_err e4 = {0};   /* one byte short of "running" and its NUL */
    cr_assert_eq(store_run_status(s, run, exact, sizeof exact - 1, &e4), PG_ERR_INTERNAL);
    pg_err e5 = {0};
    cr_assert_eq(store_run_status(s, run, exact, sizeof exact, &e5), PG_OK, "%s", e5.msg);
    cr_assert_str_eq(exact, "running");

    cr_assert_eq(store_run_finish(s, run, "failed", "second failure", &err), PG_OK, "%s", err.msg);
    cr_assert_eq(store_run_status(s, run, status, sizeof status, &err), PG_OK, "%s", err.msg);
    cr_assert_str_eq(status, "failed");
    cr_assert_eq(tu_sql_int(store_handle(s), "SELECT finished_at IS NOT NULL FROM runs"), 1);
    store_close(s);
}

Test(store, duplicate_key_rejected)
{
    pg_store *s = open_ok();
    int64_t run = begin_run(s);
    put_plain(s, run, 2, -1);
    pg_metric_values m = mk_metrics(0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0, 0);
    pg_err err = {0};
    cr_assert_eq(store_put_layer_metrics(s, run, "cap0", 2, -1, "bf16", "cpu", &m, &err), PG_ERR_DB);
    cr_assert_not_null(strstr(err.msg, "UNIQUE constraint failed"), "%s", err.msg);
    cr_assert_not_null(strstr(err.msg, g_db), "%s", err.msg);
    /* The first row is untouched; a row differing only in backend is fine. */
    cr_assert_eq(tu_sql_int(store_handle(s), "SELECT count(*) FROM layer_metrics WHERE rel_l2 = 1e-3"), 1);
    pg_err e2 = {0};
    cr_assert_eq(store_put_layer_metrics(s, run, "cap0", 2, -1, "bf16", "cuda", &m, &e2), PG_OK,
                 "%s", e2.msg);
    pg_err e3 = {0};
    cr_assert_eq(store_put_quant_stats(s, run, "cap0", 2, "v", 1.0, "capture", 0, 0, &e3), PG_OK, "%s", e3.msg);
    cr_assert_eq(store_put_quant_stats(s, run, "cap0", 2, "v", 2.0, "capture", 0, 0, &e3), PG_ERR_DB);
    cr_assert_eq(tu_sql_int(store_handle(s), "SELECT count(*) FROM layer_metrics"), 2);
    cr_assert_eq(tu_sql_int(store_handle(s), "SELECT count(*) FROM quant_stats"), 1);
    store_close(s);
}

Test(store, rollback_keeps_committed_rows)
{
    pg_store *s = open_ok();
    int64_t run = begin_run(s);
    pg_err err = {0};
    cr_assert_eq(store_begin(s, &err), PG_OK, "%s", err.msg);
    put_plain(s, run, 0, -1);
    cr_assert_eq(store_commit(s, &err), PG_OK, "%s", err.msg);

    cr_assert_eq(store_begin(s, &err), PG_OK, "%s", err.msg);
    pg_err nested = {0};
    cr_assert_eq(store_begin(s, &nested), PG_ERR_DB, "BEGIN inside a transaction must fail");
    put_plain(s, run, 1, -1);
    pg_metric_values m = mk_metrics(9, 9, 9, 9, 9, 9, 0, 0);
    pg_err dup = {0};
    cr_assert_eq(store_put_layer_metrics(s, run, "cap0", 0, -1, "bf16", "cpu", &m, &dup), PG_ERR_DB);
    store_rollback(s);
    store_rollback(s);      /* nothing open: a no-op */
    store_rollback(NULL);

    sqlite3 *db = store_handle(s);
    cr_assert_eq(tu_sql_int(db, "SELECT count(*) FROM layer_metrics"), 1);
    cr_assert_eq(tu_sql_int(db, "SELECT count(*) FROM layer_metrics WHERE layer = 0 AND rel_l2 = 1e-3"), 1);
    cr_assert_eq(tu_sql_int(db, "SELECT count(*) FROM runs"), 1);
    pg_err none = {0};
    cr_assert_eq(store_commit(s, &none), PG_ERR_DB, "COMMIT without a transaction must fail");

    /* The store is usable afterwards; the rolled-back row can be written again. */
    cr_assert_eq(store_begin(s, &err), PG_OK, "%s", err.msg);
    put_plain(s, run, 1, -1);
    cr_assert_eq(store_commit(s, &err), PG_OK, "%s", err.msg);
    store_close(s);
    s = open_ok();
    cr_assert_eq(tu_sql_int(store_handle(s), "SELECT count(*) FROM layer_metrics"), 2);
    store_close(s);
}

Test(store, begin_takes_the_write_lock_at_once)
{
    pg_store *s = open_ok();
    pg_err err = {0};
    cr_assert_eq(store_begin(s, &err), PG_OK, "%s", err.msg);
    /* BEGIN IMMEDIATE holds the write lock before any write: another writer
     * (not waiting) is refused at once; WAL readers still read. */
    sqlite3 *other = raw_open(g_db);
    cr_assert_eq(sqlite3_exec(other, "BEGIN IMMEDIATE", NULL, NULL, NULL), SQLITE_BUSY);
    cr_assert_eq(tu_sql_int(other, "SELECT count(*) FROM runs"), 0);
    store_rollback(s);
    cr_assert_eq(sqlite3_exec(other, "BEGIN IMMEDIATE; ROLLBACK;", NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(other);
    store_close(s);
}

Test(store, bad_strings_rejected_by_check)
{
    pg_store *s = open_ok();
    int64_t run = begin_run(s);
    pg_metric_values m = mk_metrics(0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0, 0);
    /* Bare fp8 modes are no stored name since migration 10: the full name is;
     * since migration 17 the grammar (base/variant.h) refuses them, not a CHECK. */
    const char *bad_variants[] = {"fp16", "BF16", "ext:", "EXT:foo", "ext", " bf16", "",
                                  "fp8kv", "fp8qkv", "fp8kv@", "fp8qkv~spec", "fp8kv~spec",
                                  "bf16@x"};
    for (size_t i = 0; i < sizeof bad_variants / sizeof bad_variants[0]; i++) {
        pg_err err = {0};
        cr_assert_eq(store_put_layer_metrics(s, run, "c", 0, 0, bad_variants[i], "cpu", &m, &err),
                     PG_ERR_INTERNAL, "variant '%s' accepted", bad_variants[i]);
        cr_assert_not_null(strstr(err.msg, "is no stored variant name"), "%s", err.msg);
    }
    const char *bad_backends[] = {"gpu", "CUDA", "rocm", ""};
    for (size_t i = 0; i < sizeof bad_backends / sizeof bad_backends[0]; i++) {
        pg_err err = {0};
        cr_assert_eq(store_put_layer_metrics(s, run, "c", 0, 0, "bf16", bad_backends[i], &m, &err),
                     PG_ERR_DB, "backend '%s' accepted", bad_backends[i]);
        cr_assert_not_null(strstr(err.msg, "CHECK constraint failed"), "%s", err.msg);
    }
    pg_err err = {0};
    cr_assert_eq(store_put_layer_metrics(s, run, "c", 0, -2, "bf16", "cpu", &m, &err), PG_ERR_DB);
    pg_err e1 = {0};
    cr_assert_eq(store_put_layer_metrics(s, run, "c", -1, 0, "bf16", "cpu", &m, &e1), PG_ERR_DB);
    pg_err e2 = {0};
    cr_assert_eq(store_put_layer_metrics(s, run, "c", 0, 0, NULL, "cpu", &m, &e2),
                 PG_ERR_INTERNAL);
    pg_err e3 = {0};
    cr_assert_eq(store_put_quant_stats(s, run, "c", 0, "x", 1.0, "capture", 0, 0, &e3), PG_ERR_DB);
    pg_err e4 = {0};
    cr_assert_eq(store_put_quant_stats(s, run, "c", 0, "q", 1.0, "guess", 0, 0, &e4), PG_ERR_DB);
    cr_assert_eq(tu_sql_int(store_handle(s), "SELECT count(*) FROM layer_metrics"), 0);
    cr_assert_eq(tu_sql_int(store_handle(s), "SELECT count(*) FROM quant_stats"), 0);

    /* Every legal spelling goes in. */
    const char *good[] = {"bf16", "fp8kv@fixed", "fp8qkv@fa3", "ext:x", "bf16~spec",
                          "fp8qkv@fa3~spec", "fp8kv@vllm-24197"};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        pg_err ok = {0};
        cr_assert_eq(store_put_layer_metrics(s, run, "c", 0, 0, good[i], "cuda", &m, &ok), PG_OK,
                     "%s", ok.msg);
    }
    cr_assert_eq(tu_sql_int(store_handle(s), "SELECT count(*) FROM layer_metrics"), 7);
    store_close(s);
}

Test(store, unknown_run_rejected_by_foreign_key)
{
    pg_store *s = open_ok();
    int64_t run = begin_run(s);
    pg_metric_values m = mk_metrics(0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0, 0);
    pg_err err = {0};
    cr_assert_eq(store_put_layer_metrics(s, run + 1, "c", 0, 0, "bf16", "cpu", &m, &err), PG_ERR_DB);
    cr_assert_not_null(strstr(err.msg, "FOREIGN KEY"), "%s", err.msg);
    pg_err e2 = {0};
    cr_assert_eq(store_put_quant_stats(s, run + 1, "c", 0, "q", 1.0, "capture", 0, 0, &e2), PG_ERR_DB);
    store_close(s);
}

Test(store, nan_rejected_where_it_would_be_lost)
{
    pg_store *s = open_ok();
    int64_t run = begin_run(s);
    for (int field = 0; field < 5; field++) {
        pg_metric_values m = mk_metrics(0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0, 0);
        double *slot[] = {&m.rel_l2, &m.max_abs, &m.mean_abs, &m.p99_abs, &m.sqnr_db};
        *slot[field] = NAN;
        pg_err err = {0};
        cr_assert_eq(store_put_layer_metrics(s, run, "c", field, 0, "bf16", "cpu", &m, &err),
                     PG_ERR_NUMERIC, "NaN in field %d accepted", field);
        cr_assert_not_null(strstr(err.msg, "NaN"), "%s", err.msg);
    }
    pg_err err = {0};
    cr_assert_eq(store_put_quant_stats(s, run, "c", 0, "q", NAN, "capture", 0, 0, &err),
                 PG_ERR_NUMERIC);
    cr_assert_eq(tu_sql_int(store_handle(s), "SELECT count(*) FROM layer_metrics"), 0);
    cr_assert_eq(tu_sql_int(store_handle(s), "SELECT count(*) FROM quant_stats"), 0);
    store_close(s);
}

Test(store, not_a_database_refused_unchanged)
{
    const char junk[] = "this is not an SQLite database, just some text that is long enough\n";
    FILE *f = fopen(g_db, "wb");
    cr_assert_not_null(f);
    cr_assert_eq(fwrite(junk, 1, sizeof junk - 1, f), sizeof junk - 1);
    fclose(f);
    pg_err err = {0};
    pg_store *s = NULL;
    cr_assert_eq(store_open(g_db, &s, &err), PG_ERR_DB);
    cr_assert_null(s);
    cr_assert_not_null(strstr(err.msg, g_db), "%s", err.msg);
    size_t len = 0;
    unsigned char *after = slurp(g_db, &len);
    cr_assert_eq(len, sizeof junk - 1);
    cr_assert_eq(memcmp(after, junk, len), 0);
    free(after);
}

Test(store, null_arguments_are_safe)
{
    store_close(NULL);
    store_rollback(NULL);
    cr_assert_null(store_handle(NULL));
    cr_assert_eq(store_schema_version(NULL), -1);
    pg_err err = {0};
    cr_assert_eq(store_begin(NULL, &err), PG_ERR_INTERNAL);
    pg_store *s = open_ok();
    pg_err e2 = {0};
    int64_t id = 0;
    cr_assert_eq(store_run_begin(s, NULL, &id, &e2), PG_ERR_INTERNAL);
    pg_err e3 = {0};
    store_run_info no_kind = {.label = "x"};
    cr_assert_eq(store_run_begin(s, &no_kind, &id, &e3), PG_ERR_INTERNAL);
    pg_err e4 = {0};
    cr_assert_eq(store_put_layer_metrics(s, 1, "c", 0, 0, "bf16", "cpu", NULL, &e4), PG_ERR_INTERNAL);
    cr_assert_eq(tu_sql_int(store_handle(s), "SELECT count(*) FROM runs"), 0);
    store_close(s);
}

Test(store, failed_run_keeps_its_error_and_complete_run_none)
{
    pg_store *s = open_ok();
    pg_err err = {0};
    int64_t ok = begin_run(s), bad = begin_run(s);
    cr_assert_eq(store_run_finish(s, ok, "complete", "ignored for complete runs", &err), PG_OK,
                 "%s", err.msg);
    cr_assert_eq(store_run_finish(s, bad, "failed", "layer 2: injected", &err), PG_OK, "%s",
                 err.msg);
    store_close(s);
    sqlite3 *db = raw_open(g_db);
    cr_assert_eq(tu_sql_int(db, "SELECT count(*) FROM runs WHERE id = 1 AND error IS NULL"), 1);
    char *msg = q_text(db, "SELECT error FROM runs WHERE id = 2");
    cr_assert_str_eq(msg, "layer 2: injected");
    free(msg);
    sqlite3_close(db);
    (void)ok;
    (void)bad;
}

Test(store, incomplete_is_a_finished_status)
{
    pg_store *s = open_ok();
    pg_err err = {0};
    int64_t run = begin_run(s);
    cr_assert_eq(store_run_finish(s, run, "incomplete", "ignored", &err), PG_OK, "%s", err.msg);
    char status[STATUS_BUF];
    cr_assert_eq(store_run_status(s, run, status, sizeof status, &err), PG_OK, "%s", err.msg);
    cr_assert_str_eq(status, "incomplete");
    store_close(s);
    sqlite3 *db = raw_open(g_db);
    cr_assert_eq(tu_sql_int(db, "SELECT count(*) FROM runs WHERE finished_at IS NOT NULL AND error IS NULL"), 1);
    sqlite3_close(db);
}

/* A new database in a directory that does not exist (or is a file): PG_ERR_IO
 * naming that directory, not SQLite's "unable to open database file"; nothing
 * is created. */
Test(store, missing_directory_named)
{
    char path[PATH_MAX + 64], dir[PATH_MAX + 32];
    snprintf(dir, sizeof dir, "%s/no-such-dir", tu_dir);
    snprintf(path, sizeof path, "%s/sub/x.db", dir);
    pg_err err = {0};
    pg_store *s = NULL;
    cr_assert_eq(store_open(path, &s, &err), PG_ERR_IO);
    cr_assert_null(s);
    char want[PATH_MAX + 96];
    snprintf(want, sizeof want, "the directory '%s/sub' does not exist", dir);
    cr_assert(strstr(err.msg, want) != NULL, "message: %s", err.msg);
    cr_assert(strncmp(err.msg, path, strlen(path)) == 0, "message lacks the path: %s", err.msg);
    struct stat st;
    cr_assert_neq(stat(dir, &st), 0, "store_open created %s", dir);

    /* a regular file where the directory should be */
    char file[PATH_MAX + 32];
    snprintf(file, sizeof file, "%s/plain-file", tu_dir);
    tu_write_file(file, "x", 1);
    snprintf(path, sizeof path, "%s/x.db", file);
    pg_err_clear(&err);
    cr_assert_eq(store_open(path, &s, &err), PG_ERR_IO);
    cr_assert(strstr(err.msg, "is not a directory") != NULL, "message: %s", err.msg);

    /* the CLI says the same, exit 1 */
    char *out = NULL;
    snprintf(path, sizeof path, "%s/sub/x.db", dir);
    const int rc = tu_run_precgatef(&out, "eval --replay --traces %s/evals/demo/aime-style-demo.jsonl "
                                          "--db '%s'", PRECGATE_SOURCE_DIR, path);
    cr_assert_eq(rc, 1, "exit %d: %s", rc, out);
    cr_assert(strstr(out, "does not exist (create it") != NULL, "output: %s", out);
    free(out);
}

/* g_db opened raw and migrated by the real migrations 1..version. */
static sqlite3 *raw_db_at_version(int version)
{
    sqlite3 *db = raw_open(g_db);
    for (int i = 0; i < version; i++) {
        tu_sql_exec(db, schema_migrations[i].sql);
        tu_sql_exec(db, schema_migrations[i].set_version);
    }
    return db;
}

/* A database at schema version 7 built from the real migrations 1..7, with
 * a run in every status that version allowed (and samples and a gate row
 * pointing at them), as a precgate of that version left it. */
static void make_v7_db(void)
{
    sqlite3 *db = raw_db_at_version(7);
    tu_sql_exec(db,
                "INSERT INTO runs (id, kind, status, started_at, finished_at, host, config_json,"
                " error) VALUES"
                " (1, 'sweep', 'complete', '2026-01-01T00:00:00.000Z', '2026-01-01T00:01:00.000Z',"
                "  'h', '{}', NULL),"
                " (2, 'eval', 'incomplete', '2026-01-02T00:00:00.000Z', '2026-01-02T00:01:00.000Z',"
                "  'h', '{\"samples\":1}', NULL),"
                " (3, 'sweep', 'failed', '2026-01-03T00:00:00.000Z', '2026-01-03T00:01:00.000Z',"
                "  'h', NULL, 'layer 2: boom'),"
                " (4, 'eval', 'running', '2026-01-04T00:00:00.000Z', NULL, 'h', NULL, NULL);"
                "INSERT INTO eval_samples (run_id, eval, mode, effort, problem_id, sample, status,"
                " correct) VALUES (2, 'e', 'bf16', 'low', 'a', 0, 'ok', 1);"
                "INSERT INTO baselines VALUES ('default', 1, '2026-01-05T00:00:00.000Z');");
    cr_assert_eq(tu_sql_int(db, "PRAGMA user_version"), 7);
    sqlite3_close(db);
}

Test(store, migration_8_keeps_v7_rows_and_adds_pid_heartbeat_interrupted)
{
    make_v7_db();
    pg_store *s = open_ok();
    sqlite3 *db = store_handle(s);
    cr_assert_eq(store_schema_version(s), store_latest_schema_version());
    char *rows = q_text(db, "SELECT group_concat(id || ':' || kind || ':' || status || ':' ||"
                            " ifnull(finished_at, '-') || ':' || ifnull(error, '-') || ':' ||"
                            " ifnull(pid, '-') || ':' || ifnull(heartbeat_at, '-'), '|')"
                            " FROM (SELECT * FROM runs ORDER BY id)");
    cr_assert_str_eq(rows,
                     "1:sweep:complete:2026-01-01T00:01:00.000Z:-:-:-|"
                     "2:eval:incomplete:2026-01-02T00:01:00.000Z:-:-:-|"
                     "3:sweep:failed:2026-01-03T00:01:00.000Z:layer 2: boom:-:-|"
                     "4:eval:running:-:-:-:-");
    free(rows);
    char *cfg = q_text(db, "SELECT config_json FROM runs WHERE id = 2");
    cr_assert_str_eq(cfg, "{\"samples\":1}");
    free(cfg);
    /* The rows pointing at runs still do, and the foreign keys still hold. */
    cr_assert_eq(tu_sql_int(db, "SELECT count(*) FROM eval_samples WHERE run_id = 2"), 1);
    cr_assert_eq(tu_sql_int(db, "SELECT count(*) FROM pragma_foreign_key_check"), 0);
    cr_assert_eq(tu_sql_int(db, "SELECT count(*) FROM pragma_index_info('runs_kind_started')"), 2);
    /* The new status is allowed, finished only; anything else still refused. */
    pg_err err = {0};
    cr_assert_eq(store_run_finish(s, 2, "interrupted", "interrupted by SIGTERM", &err), PG_OK,
                 "%s", err.msg);
    char *e = q_text(db, "SELECT status || '/' || error || '/' || (finished_at IS NOT NULL) FROM runs"
                         " WHERE id = 2");
    cr_assert_str_eq(e, "interrupted/interrupted by SIGTERM/1");
    free(e);
    cr_assert_neq(sqlite3_exec(db, "UPDATE runs SET status = 'interrupted', finished_at = NULL"
                                   " WHERE id = 1", NULL, NULL, NULL), SQLITE_OK);
    cr_assert_neq(sqlite3_exec(db, "UPDATE runs SET status = 'paused' WHERE id = 1", NULL, NULL,
                               NULL), SQLITE_OK);
    /* A v7 'running' run has no pid: it cannot be probed, so it needs force. */
    store_run_state rs;
    cr_assert_eq(store_run_read(s, 4, &rs, &err), PG_OK, "%s", err.msg);
    cr_assert_eq(rs.process, STORE_PROCESS_UNKNOWN);
    cr_assert_str_eq(rs.effective, "running");
    store_run_state_free(&rs);
    pg_err e2 = {0};
    cr_assert_eq(store_run_reopen(s, 4, "eval", 0, &e2), PG_ERR_USAGE);
    cr_assert_not_null(strstr(e2.msg, "--force"), "%s", e2.msg);
    pg_err e3 = {0};
    cr_assert_eq(store_run_reopen(s, 4, "eval", 1, &e3), PG_OK, "%s", e3.msg);
    cr_assert_eq(tu_sql_int(db, "SELECT pid FROM runs WHERE id = 4"), (long long)getpid());
    store_close(s);
}

Test(store, run_begin_records_pid_and_heartbeat_moves)
{
    pg_store *s = open_ok();
    sqlite3 *db = store_handle(s);
    int64_t run = begin_run(s);
    cr_assert_eq(tu_sql_int(db, "SELECT pid FROM runs WHERE id = %lld", (long long)run),
                 (long long)getpid());
    char *hb = q_text(db, "SELECT heartbeat_at FROM runs");
    cr_assert_eq(strlen(hb), ISO_MS_LEN, "%s", hb);
    free(hb);
    /* An old heartbeat is moved to now. */
    tu_sql_exec(db, "UPDATE runs SET heartbeat_at = '2000-01-01T00:00:00.000Z'");
    pg_err err = {0};
    cr_assert_eq(store_run_heartbeat(s, run, &err), PG_OK, "%s", err.msg);
    const double age_s = tu_sql_double(db, "SELECT (julianday('now') - julianday(heartbeat_at))"
                                           " * 86400.0 FROM runs");
    cr_assert_lt(fabs(age_s), NOW_TOLERANCE_S);
    /* A finished run has no heartbeat to move. */
    cr_assert_eq(store_run_finish(s, run, "complete", NULL, &err), PG_OK, "%s", err.msg);
    pg_err e2 = {0};
    cr_assert_eq(store_run_heartbeat(s, run, &e2), PG_ERR_DB);
    cr_assert_not_null(strstr(e2.msg, "no running run"), "%s", e2.msg);
    store_close(s);
}

/* The pid of a child process that has exited and been reaped (so it is gone). */
static pid_t dead_pid(void)
{
    pid_t p = fork();
    cr_assert_geq(p, 0);
    if (p == 0) _exit(0);
    int wst = 0;
    cr_assert_eq(waitpid(p, &wst, 0), p);
    return p;
}

Test(store, probe_tells_gone_alive_and_unknown)
{
    char here[STORE_HOST_MAX];
    store_this_host(here, sizeof here);
    cr_assert_neq(here[0], '\0');
    cr_assert_eq(store_probe_process("running", here, getppid()), STORE_PROCESS_ALIVE);
    cr_assert_eq(store_probe_process("running", here, dead_pid()), STORE_PROCESS_GONE);
    /* the prober's own pid, recorded by an earlier process (a container
     * restarted with the same host name): that one is gone */
    cr_assert_eq(store_probe_process("running", here, getpid()), STORE_PROCESS_GONE);
    cr_assert_eq(store_probe_process("running", "another-host.example", dead_pid()),
                 STORE_PROCESS_UNKNOWN);
    cr_assert_eq(store_probe_process("running", NULL, getpid()), STORE_PROCESS_UNKNOWN);
    cr_assert_eq(store_probe_process("running", here, 0), STORE_PROCESS_UNKNOWN);
    cr_assert_eq(store_probe_process("complete", here, dead_pid()), STORE_PROCESS_FINISHED);
    cr_assert_str_eq(store_effective_status("running", STORE_PROCESS_GONE), "interrupted");
    cr_assert_str_eq(store_effective_status("running", STORE_PROCESS_UNKNOWN), "running");
    cr_assert_str_eq(store_effective_status("failed", STORE_PROCESS_FINISHED), "failed");
}

/* A 'running' eval run recorded as on host with pid; returns its id. */
static int64_t running_eval(pg_store *s, const char *host, long long pid)
{
    store_run_info info = {.kind = "eval", .host = host, .config_json = "{\"x\":1}"};
    int64_t id = -1;
    pg_err err = {0};
    cr_assert_eq(store_run_begin(s, &info, &id, &err), PG_OK, "%s", err.msg);
    char sql[256];
    snprintf(sql, sizeof sql, "UPDATE runs SET pid = %lld, heartbeat_at ="
             " '2026-02-03T04:05:06.789Z' WHERE id = %lld", pid, (long long)id);
    tu_sql_exec(store_handle(s), sql);
    return id;
}

Test(store, reopen_takes_a_dead_run_and_refuses_a_live_or_remote_one)
{
    pg_store *s = open_ok();
    sqlite3 *db = store_handle(s);
    char here[STORE_HOST_MAX];
    store_this_host(here, sizeof here);
    const int64_t dead = running_eval(s, here, dead_pid());
    const int64_t live = running_eval(s, here, getppid());
    const int64_t remote = running_eval(s, "another-host.example", getpid());

    store_run_state rs;
    pg_err err = {0};
    cr_assert_eq(store_run_read(s, dead, &rs, &err), PG_OK, "%s", err.msg);
    cr_assert_str_eq(rs.status, "running");
    cr_assert_str_eq(rs.effective, "interrupted");
    cr_assert_str_eq(rs.kind, "eval");
    cr_assert_str_eq(rs.config_json, "{\"x\":1}");
    cr_assert_str_eq(rs.heartbeat_at, "2026-02-03T04:05:06.789Z");
    store_run_state_free(&rs);

    /* Dead on this host: taken without force, and now this process's. */
    cr_assert_eq(store_run_reopen(s, dead, "eval", 0, &err), PG_OK, "%s", err.msg);
    cr_assert_eq(tu_sql_int(db, "SELECT pid FROM runs WHERE id = %lld", (long long)dead),
                 (long long)getpid());
    cr_assert_eq(tu_sql_int(db, "SELECT heartbeat_at > '2026-02-03T04:05:06.789Z' FROM runs"
                                " WHERE id = %lld", (long long)dead), 1);
    /* Alive here, or on a host that cannot be probed: refused without force,
     * naming host, pid and heartbeat; nothing changed. */
    const int64_t refused[] = {live, remote};
    for (size_t i = 0; i < 2; i++) {
        pg_err e = {0};
        cr_assert_eq(store_run_reopen(s, refused[i], "eval", 0, &e), PG_ERR_USAGE);
        cr_assert_not_null(strstr(e.msg, "--force"), "%s", e.msg);
        cr_assert_not_null(strstr(e.msg, "2026-02-03T04:05:06.789Z"), "%s", e.msg);
        cr_assert_eq(tu_sql_int(db, "SELECT heartbeat_at = '2026-02-03T04:05:06.789Z' FROM runs"
                                    " WHERE id = %lld", (long long)refused[i]), 1);
    }
    pg_err e4 = {0};
    cr_assert_eq(store_run_reopen(s, remote, "eval", 0, &e4), PG_ERR_USAGE);
    cr_assert_not_null(strstr(e4.msg, "another-host.example"), "%s", e4.msg);
    pg_err e5 = {0};
    cr_assert_eq(store_run_reopen(s, remote, "eval", 1, &e5), PG_OK, "%s", e5.msg);
    char sql[128];
    snprintf(sql, sizeof sql, "SELECT host FROM runs WHERE id = %lld", (long long)remote);
    char *h = q_text(db, sql);
    cr_assert_str_eq(h, here);
    free(h);
    /* Wrong kind or id. */
    pg_err e6 = {0};
    cr_assert_eq(store_run_reopen(s, live, "sweep", 1, &e6), PG_ERR_USAGE);
    cr_assert_not_null(strstr(e6.msg, "not 'sweep'"), "%s", e6.msg);
    pg_err e7 = {0};
    cr_assert_eq(store_run_reopen(s, 999, "eval", 1, &e7), PG_ERR_USAGE);
    /* A finished run, interrupted ones included, is taken without force. */
    cr_assert_eq(store_run_finish(s, live, "interrupted", "interrupted by SIGINT", &err), PG_OK);
    cr_assert_eq(store_run_reopen(s, live, "eval", 0, &err), PG_OK, "%s", err.msg);
    cr_assert_eq(tu_sql_int(db, "SELECT count(*) FROM runs WHERE id = %lld AND status = 'running'"
                                " AND error IS NULL AND finished_at IS NULL", (long long)live), 1);
    store_close(s);
}

Test(store, interrupted_keeps_its_error_and_set_config_replaces)
{
    pg_store *s = open_ok();
    pg_err err = {0};
    int64_t run = begin_run(s);
    cr_assert_eq(store_run_set_config(s, run, "{\"models\":{}}", &err), PG_OK, "%s", err.msg);
    cr_assert_eq(store_run_finish(s, run, "interrupted", "interrupted by SIGTERM", &err), PG_OK,
                 "%s", err.msg);
    char status[STATUS_BUF];
    cr_assert_eq(store_run_status(s, run, status, sizeof status, &err), PG_OK, "%s", err.msg);
    cr_assert_str_eq(status, "interrupted");
    char *v = q_text(store_handle(s), "SELECT error || ' ' || config_json FROM runs");
    cr_assert_str_eq(v, "interrupted by SIGTERM {\"models\":{}}");
    free(v);
    pg_err e2 = {0};
    cr_assert_eq(store_run_set_config(s, run + 1, "{}", &e2), PG_ERR_DB);
    store_close(s);
}

/* A database at schema version 8 built from the real migrations 1..8 with
 * sweep runs and their quant_stats rows as a precgate of that version left
 * them: run 1 calibrated (amax / 448), run 2 the capture's scales, run 3
 * both (edited by hand), run 4 bf16 only (no rows), run 5 an eval. */
static void make_v8_db(void)
{
    sqlite3 *db = raw_db_at_version(8);
    tu_sql_exec(db,
                "INSERT INTO runs (id, kind, status, started_at, finished_at, host, config_json)"
                " VALUES"
                " (1, 'sweep', 'complete', '2026-01-01T00:00:00.000Z', '2026-01-01T00:01:00.000Z',"
                "  'h', '{\"capture\":\"a\",\"p_rounding\":\"e4m3\"}'),"
                " (2, 'sweep', 'complete', '2026-01-02T00:00:00.000Z', '2026-01-02T00:01:00.000Z',"
                "  'h', '{\"capture\":\"b\"}'),"
                " (3, 'sweep', 'complete', '2026-01-03T00:00:00.000Z', '2026-01-03T00:01:00.000Z',"
                "  'h', '{\"capture\":\"c\"}'),"
                " (4, 'sweep', 'complete', '2026-01-04T00:00:00.000Z', '2026-01-04T00:01:00.000Z',"
                "  'h', '{\"capture\":\"d\"}'),"
                " (5, 'eval', 'complete', '2026-01-05T00:00:00.000Z', '2026-01-05T00:01:00.000Z',"
                "  'h', '{\"samples\":1}');"
                "INSERT INTO quant_stats VALUES"
                " (1, 'a', 0, 'k', 0.125, 'calibrated', 0.0, 0.5),"
                " (1, 'a', 0, 'v', 0.25, 'calibrated', NULL, 0.25),"
                " (2, 'b', 0, 'k', 0.5, 'capture', 0.001, NULL),"
                " (3, 'c', 0, 'k', 0.5, 'capture', 0.0, 0.0),"
                " (3, 'c', 1, 'k', 0.75, 'calibrated', 0.0, 0.0);");
    cr_assert_eq(tu_sql_int(db, "PRAGMA user_version"), 8);
    sqlite3_close(db);
}

Test(store, migration_9_renames_calibrated_to_amax_and_records_each_sweeps_scales)
{
    make_v8_db();
    pg_store *s = open_ok();
    sqlite3 *db = store_handle(s);
    cr_assert_eq(store_schema_version(s), store_latest_schema_version());
    /* Every row kept, every column; 'calibrated' (amax / 448) is now 'amax'. */
    char *rows = q_text(db, "SELECT group_concat(run_id || ':' || capture || ':' || layer || ':' ||"
                            " tensor || ':' || scale || ':' || scale_source || ':' ||"
                            " ifnull(saturated_frac, '-') || ':' || ifnull(underflow_frac, '-'), '|')"
                            " FROM (SELECT * FROM quant_stats ORDER BY run_id, layer, tensor)");
    cr_assert_str_eq(rows, "1:a:0:k:0.125:amax:0.0:0.5|1:a:0:v:0.25:amax:-:0.25|"
                           "2:b:0:k:0.5:capture:0.001:-|3:c:0:k:0.5:capture:0.0:0.0|"
                           "3:c:1:k:0.75:amax:0.0:0.0");
    free(rows);
    /* A sweep's config gets the one policy its rows name; none when there
     * are no rows or several policies; other kinds are left alone. */
    char *cfg = q_text(db, "SELECT group_concat(id || '=' || ifnull(json_extract(config_json,"
                           " '$.scales'), '-'), ',') FROM (SELECT * FROM runs ORDER BY id)");
    cr_assert_str_eq(cfg, "1=amax,2=capture,3=-,4=-,5=-");
    free(cfg);
    char *one = q_text(db, "SELECT config_json FROM runs WHERE id = 1");
    cr_assert_str_eq(one, "{\"capture\":\"a\",\"p_rounding\":\"e4m3\",\"scales\":\"amax\"}");
    free(one);
    char *ev = q_text(db, "SELECT config_json FROM runs WHERE id = 5");
    cr_assert_str_eq(ev, "{\"samples\":1}");
    free(ev);
    cr_assert_eq(tu_sql_int(db, "SELECT count(*) FROM pragma_foreign_key_check"), 0);
    /* The new policies are allowed, the old name and anything else refused;
     * the UNIQUE key still holds. */
    pg_err err = {0};
    cr_assert_eq(store_begin(s, &err), PG_OK, "%s", err.msg);
    cr_assert_eq(store_put_quant_stats(s, 4, "d", 0, "q", 0.5, "vllm-dynamic", 0.0, 0.0, &err),
                 PG_OK, "%s", err.msg);
    cr_assert_eq(store_put_quant_stats(s, 4, "d", 0, "k", 1.0, "unit", 0.0, 0.0, &err), PG_OK,
                 "%s", err.msg);
    cr_assert_eq(store_commit(s, &err), PG_OK, "%s", err.msg);
    cr_assert_neq(sqlite3_exec(db, "INSERT INTO quant_stats VALUES (4, 'd', 0, 'v', 1.0,"
                                   " 'calibrated', 0.0, 0.0)", NULL, NULL, NULL), SQLITE_OK);
    cr_assert_neq(sqlite3_exec(db, "INSERT INTO quant_stats VALUES (1, 'a', 0, 'k', 1.0,"
                                   " 'amax', 0.0, 0.0)", NULL, NULL, NULL), SQLITE_OK);
    cr_assert_neq(sqlite3_exec(db, "INSERT INTO quant_stats VALUES (99, 'a', 0, 'k', 1.0,"
                                   " 'amax', 0.0, 0.0)", NULL, NULL, NULL), SQLITE_OK);
    store_close(s);
}

/* A database at schema version 9 built from the real migrations 1..9, as a
 * precgate of that version left it: run 1 a sweep of the three modes (P in
 * e4m3) with --check-spec rows and a gate's flags, run 2 a sweep with
 * --p-rounding bf16, run 3 one recorded before p_rounding was in the config,
 * run 4 an eval (its modes are the serving stack's, not profiles). */
static void make_v9_db(void)
{
    sqlite3 *db = raw_db_at_version(9);
    tu_sql_exec(db,
                "INSERT INTO runs (id, kind, status, started_at, finished_at, host, config_json)"
                " VALUES"
                " (1, 'sweep', 'complete', '2026-01-01T00:00:00.000Z', '2026-01-01T00:01:00.000Z',"
                "  'h', '{\"variants\":[\"bf16\",\"fp8kv\",\"fp8qkv\"],\"p_rounding\":\"e4m3\","
                "\"scales\":\"amax\"}'),"
                " (2, 'sweep', 'complete', '2026-01-02T00:00:00.000Z', '2026-01-02T00:01:00.000Z',"
                "  'h', '{\"variants\":[\"fp8qkv\",\"fp8kv\"],\"p_rounding\":\"bf16\"}'),"
                " (3, 'sweep', 'complete', '2026-01-03T00:00:00.000Z', '2026-01-03T00:01:00.000Z',"
                "  'h', '{\"capture\":\"c\"}'),"
                " (4, 'eval', 'complete', '2026-01-04T00:00:00.000Z', '2026-01-04T00:01:00.000Z',"
                "  'h', '{\"modes\":[\"fp8kv\"]}');"
                "INSERT INTO layer_metrics (run_id, capture, layer, head, variant, backend, rel_l2,"
                " nan_count, inf_count) VALUES"
                " (1, 'a', 0, -1, 'bf16', 'cuda', 0.01, 0, 0),"
                " (1, 'a', 0, -1, 'fp8kv', 'cuda', 0.02, 0, 0),"
                " (1, 'a', 0, 0, 'fp8kv', 'cuda', 0.021, 0, 0),"
                " (1, 'a', 0, -1, 'fp8qkv', 'cuda', 0.03, 0, 0),"
                " (1, 'a', 0, -1, 'fp8kv~spec', 'cuda', 0.004, 0, 0),"
                " (1, 'a', 0, -1, 'fp8qkv~spec', 'cuda', 0.005, 0, 0),"
                " (1, 'a', 0, -1, 'bf16~spec', 'cuda', 0.001, 0, 0),"
                " (1, 'a', 0, -1, 'ext:vllm', 'cuda', 0.011, 0, 0),"
                " (2, 'b', 0, -1, 'fp8qkv', 'cpu', 0.04, 0, 0),"
                " (2, 'b', 0, -1, 'fp8kv', 'cpu', 0.05, 0, 0),"
                " (3, 'c', 1, -1, 'fp8qkv', 'cpu', 0.06, 1, 0);"
                "INSERT INTO quant_stats VALUES (1, 'a', 0, 'k', 0.125, 'amax', 0.0, 0.5);"
                "INSERT INTO eval_samples (run_id, eval, mode, effort, problem_id, sample, status,"
                " correct) VALUES (4, 'e', 'fp8kv', 'low', 'p', 0, 'ok', 1);"
                "INSERT INTO flags (run_id, baseline_run_id, scope, capture, layer, variant, eval,"
                " mode, effort, metric, verdict, message) VALUES"
                " (1, NULL, 'layer', 'a', 0, 'fp8kv', NULL, NULL, NULL, 'rel_l2', 'pass', 'm1'),"
                " (1, NULL, 'layer', 'a', 0, 'fp8qkv~spec', NULL, NULL, NULL, 'rel_l2', 'pass', 'm2'),"
                " (1, NULL, 'mode_pair', 'a', 0, 'fp8qkv-bf16', NULL, NULL, NULL, 'rel_l2', 'pass',"
                "  'm3'),"
                " (2, 1, 'mode_pair', 'b', 0, 'fp8qkv-bf16', NULL, NULL, NULL, 'rel_l2', 'pass', 'm4'),"
                " (1, NULL, 'layer', 'a', 0, 'ext:vllm', NULL, NULL, NULL, 'rel_l2', 'pass', 'm5'),"
                " (4, NULL, 'eval', NULL, NULL, NULL, 'e', 'fp8kv', 'low', 'accuracy', 'pass', 'm6');");
    cr_assert_eq(tu_sql_int(db, "PRAGMA user_version"), 9);
    sqlite3_close(db);
}

Test(store, migration_10_renames_every_stored_variant_to_its_full_name)
{
    make_v9_db();
    pg_store *s = open_ok();
    sqlite3 *db = store_handle(s);
    cr_assert_eq(store_schema_version(s), store_latest_schema_version());
    cr_assert_geq(store_schema_version(s), 10);
    /* layer_metrics: fp8kv -> fp8kv@fixed; fp8qkv with P in e4m3 (or no
     * p_rounding recorded) -> fp8qkv@ideal; --p-rounding bf16 names itself;
     * ~spec rows follow; bf16, bf16~spec and ext: stay; every column kept. */
    char *rows = q_text(db, "SELECT group_concat(run_id || ':' || layer || ':' || head || ':' ||"
                            " variant || ':' || backend || ':' || rel_l2 || ':' || nan_count, '|')"
                            " FROM (SELECT * FROM layer_metrics ORDER BY run_id, variant, head)");
    cr_assert_str_eq(rows, "1:0:-1:bf16:cuda:0.01:0|1:0:-1:bf16~spec:cuda:0.001:0|"
                           "1:0:-1:ext:vllm:cuda:0.011:0|1:0:-1:fp8kv@fixed:cuda:0.02:0|"
                           "1:0:0:fp8kv@fixed:cuda:0.021:0|1:0:-1:fp8kv@fixed~spec:cuda:0.004:0|"
                           "1:0:-1:fp8qkv@ideal:cuda:0.03:0|1:0:-1:fp8qkv@ideal~spec:cuda:0.005:0|"
                           "2:0:-1:fp8kv@fixed:cpu:0.05:0|2:0:-1:fp8qkv@ideal-p-bf16:cpu:0.04:0|"
                           "3:1:-1:fp8qkv@ideal:cpu:0.06:1");
    free(rows);
    /* The gate's flags of layer and mode_pair scope, pairs included; eval
     * flags keep their mode; messages are the text printed then. */
    char *flags = q_text(db, "SELECT group_concat(run_id || ':' || scope || ':' ||"
                             " ifnull(variant, '-') || ':' || ifnull(mode, '-') || ':' || message,"
                             " '|') FROM (SELECT * FROM flags ORDER BY id)");
    cr_assert_str_eq(flags, "1:layer:fp8kv@fixed:-:m1|1:layer:fp8qkv@ideal~spec:-:m2|"
                            "1:mode_pair:fp8qkv@ideal-bf16:-:m3|"
                            "2:mode_pair:fp8qkv@ideal-p-bf16-bf16:-:m4|1:layer:ext:vllm:-:m5|"
                            "4:eval:-:fp8kv:m6");
    free(flags);
    /* config_json "variants" of sweep runs, in their order; other keys and
     * other kinds untouched. */
    char *cfg = q_text(db, "SELECT group_concat(id || '=' || config_json, '|') FROM"
                           " (SELECT * FROM runs ORDER BY id)");
    cr_assert_str_eq(cfg, "1={\"variants\":[\"bf16\",\"fp8kv@fixed\",\"fp8qkv@ideal\"],"
                          "\"p_rounding\":\"e4m3\",\"scales\":\"amax\"}|"
                          "2={\"variants\":[\"fp8qkv@ideal-p-bf16\",\"fp8kv@fixed\"],"
                          "\"p_rounding\":\"bf16\"}|3={\"capture\":\"c\"}|"
                          "4={\"modes\":[\"fp8kv\"]}");
    free(cfg);
    cr_assert_eq(tu_sql_int(db, "SELECT count(*) FROM eval_samples WHERE mode = 'fp8kv'"), 1);
    cr_assert_eq(tu_sql_int(db, "SELECT count(*) FROM quant_stats"), 1);
    cr_assert_eq(tu_sql_int(db, "SELECT count(*) FROM pragma_foreign_key_check"), 0);
    cr_assert_eq(tu_sql_int(db, "SELECT count(*) FROM sqlite_temp_schema"), 0,
                 "the migration's temporary table is left behind");
    /* The rebuilt table keeps its index and its UNIQUE key, and refuses a
     * bare fp8 mode. */
    cr_assert_eq(tu_sql_int(db, "SELECT count(*) FROM sqlite_schema WHERE type = 'index' AND"
                                " name = 'layer_metrics_run_variant'"), 1);
    cr_assert_neq(sqlite3_exec(db, "INSERT INTO layer_metrics (run_id, capture, layer, head,"
                                   " variant, backend, nan_count, inf_count) VALUES (1, 'a', 0,"
                                   " -1, 'fp8kv@fixed', 'cuda', 0, 0)", NULL, NULL, NULL),
                  SQLITE_OK);
    /* A bare fp8 mode is no stored name: the grammar refuses it since
     * migration 17 dropped the CHECK (store_put_layer_metrics). */
    pg_metric_values m = mk_metrics(0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0, 0);
    pg_err err = {0};
    cr_assert_eq(store_put_layer_metrics(s, 1, "a", 5, -1, "fp8kv", "cuda", &m, &err),
                 PG_ERR_INTERNAL, "a bare mode stored");
    store_close(s);
}

/* A committed run of kind and label; returns its id. */
static int64_t begin_labelled(pg_store *s, const char *kind, const char *label)
{
    store_run_info info = {.kind = kind, .label = label};
    int64_t id = -1;
    pg_err err = {0};
    cr_assert_eq(store_run_begin(s, &info, &id, &err), PG_OK, "%s", err.msg);
    return id;
}

Test(store, run_list_counts_filters_and_lists_the_newest_oldest_first)
{
    pg_store *s = open_ok();
    pg_err err = {0};
    const int64_t a = begin_labelled(s, "sweep", "nightly");
    const int64_t b = begin_labelled(s, "eval", NULL);
    const int64_t c = begin_labelled(s, "sweep", "nightly");
    cr_assert_eq(store_run_finish(s, a, "complete", NULL, &err), PG_OK, "%s", err.msg);
    cr_assert_eq(store_run_finish(s, c, "failed", "boom", &err), PG_OK, "%s", err.msg);
    tu_sql_exec(store_handle(s), "UPDATE runs SET pid = NULL WHERE id = 1");  /* a pre-v8 run */

    const struct { run_filter f; int64_t n; } counts[] = {
        {{NULL, NULL}, 3}, {{"sweep", NULL}, 2}, {{NULL, "nightly"}, 2},
        {{"eval", "nightly"}, 0}, {{"eval", NULL}, 1},
    };
    for (size_t i = 0; i < sizeof counts / sizeof counts[0]; i++) {
        int64_t n = -1;
        cr_assert_eq(run_list_count(s, &counts[i].f, &n, &err), PG_OK, "%s", err.msg);
        cr_expect_eq(n, counts[i].n, "count %zu: %lld", i, (long long)n);
    }

    run_list_row *rows = NULL;
    size_t n = 0;
    const run_filter all = {0};
    cr_assert_eq(run_list_read(s, &all, 0, &rows, &n, &err), PG_OK, "%s", err.msg);
    cr_assert_eq(n, 3);
    cr_expect_eq(rows[0].run.id, a);
    cr_expect_eq(rows[1].run.id, b);
    cr_expect_eq(rows[2].run.id, c);
    /* Finished: a duration, no pid (NULL); running: no duration, this process. */
    cr_expect_str_eq(rows[0].run.status, "complete");
    cr_expect(isfinite(rows[0].duration_s) && rows[0].duration_s >= 0.0);
    cr_expect_eq(rows[0].has_pid, 0);
    cr_expect_eq(rows[0].pid, 0);
    cr_expect_str_eq(rows[0].run.label, "nightly");
    cr_expect_null(rows[1].run.label);
    cr_expect_null(rows[1].run.finished_at);
    cr_expect(isnan(rows[1].duration_s));
    cr_expect_eq(rows[1].has_pid, 1);
    cr_expect_eq(rows[1].pid, (int64_t)getpid());
    cr_expect_not_null(rows[1].heartbeat_at);
    cr_expect_not_null(rows[1].run.started_at);
    cr_expect_str_eq(rows[2].run.error, "boom");
    run_list_rows_free(rows, n);

    /* The newest two, still oldest first; a filter with a limit. */
    cr_assert_eq(run_list_read(s, &all, 2, &rows, &n, &err), PG_OK, "%s", err.msg);
    cr_assert_eq(n, 2);
    cr_expect_eq(rows[0].run.id, b);
    cr_expect_eq(rows[1].run.id, c);
    run_list_rows_free(rows, n);
    const run_filter sweeps = {.kind = "sweep"};
    cr_assert_eq(run_list_read(s, &sweeps, 1, &rows, &n, &err), PG_OK, "%s", err.msg);
    cr_assert_eq(n, 1);
    cr_expect_eq(rows[0].run.id, c);
    run_list_rows_free(rows, n);
    const run_filter none = {.label = "nosuch"};
    cr_assert_eq(run_list_read(s, &none, 0, &rows, &n, &err), PG_OK, "%s", err.msg);
    cr_expect_eq(n, 0);
    cr_expect_null(rows);

    cr_expect_eq(run_list_read(s, NULL, 0, &rows, &n, &err), PG_ERR_INTERNAL);
    cr_expect_eq(run_list_count(NULL, &all, &(int64_t){0}, &err), PG_ERR_INTERNAL);
    run_list_rows_free(NULL, 0);
    store_close(s);
}

/* Inserts a whole-layer row of variant with rel_l2 and cos_sim for (run, capture, layer). */
static void put_whole_layer(pg_store *s, int64_t run, const char *capture, int layer,
                            const char *variant, double rel_l2, double cos_sim)
{
    pg_metric_values m = mk_metrics(rel_l2, 2e-2, 3e-4, 1e-2, cos_sim, 60.0, 0, 0);
    pg_err err = {0};
    cr_assert_eq(store_put_layer_metrics(s, run, capture, layer, -1, variant, "cpu", &m, &err),
                 PG_OK, "%s", err.msg);
}

Test(store, history_reads_one_metric_of_complete_runs_in_run_then_layer_order)
{
    pg_store *s = open_ok();
    pg_err err = {0};
    const int64_t a = begin_labelled(s, "sweep", "nightly");
    const int64_t running = begin_labelled(s, "sweep", "nightly");
    const int64_t c = begin_labelled(s, "sweep", NULL);
    put_whole_layer(s, a, "cap0", 1, "bf16", 0.5, NAN);
    put_whole_layer(s, a, "cap0", 0, "bf16", 0.25, 0.9);
    put_whole_layer(s, a, "cap0", 0, "fp8kv@fixed", 9.0, 0.1);  /* another variant */
    put_plain(s, a, 0, 0);                                      /* a head row */
    put_whole_layer(s, running, "cap0", 0, "bf16", 7.0, 0.5);   /* not complete */
    put_whole_layer(s, c, "cap1", 0, "bf16", 0.125, 0.8);
    cr_assert_eq(store_run_finish(s, a, "complete", NULL, &err), PG_OK, "%s", err.msg);
    cr_assert_eq(store_run_finish(s, c, "complete", NULL, &err), PG_OK, "%s", err.msg);

    history_query q = {.metric = PG_METRIC_REL_L2, .variant = "bf16", .layer = -1};
    history_row *rows = NULL;
    size_t n = 0;
    cr_assert_eq(history_store_read(s, &q, &rows, &n, &err), PG_OK, "%s", err.msg);
    cr_assert_eq(n, 3);
    cr_expect_eq(rows[0].run_id, a);
    cr_expect_eq(rows[0].layer, 0);
    cr_expect_eq(rows[0].value, 0.25);
    cr_expect_eq(rows[1].layer, 1);
    cr_expect_eq(rows[1].value, 0.5);
    cr_expect_str_eq(rows[1].label, "nightly");
    cr_expect_not_null(rows[1].started_at);
    cr_expect_null(rows[1].git_rev);
    cr_expect_eq(rows[2].run_id, c);
    cr_expect_null(rows[2].label);
    history_rows_free(rows, n);

    /* Another column (a NULL cosine reads NaN), and each filter. */
    q.metric = PG_METRIC_COS_SIM;
    q.label = "nightly";
    cr_assert_eq(history_store_read(s, &q, &rows, &n, &err), PG_OK, "%s", err.msg);
    cr_assert_eq(n, 2);
    cr_expect_eq(rows[0].value, 0.9);
    cr_expect(isnan(rows[1].value));
    history_rows_free(rows, n);
    q = (history_query){.metric = PG_METRIC_REL_L2, .variant = "bf16", .layer = 0,
                        .capture = "cap1", .backend = "cpu"};
    cr_assert_eq(history_store_read(s, &q, &rows, &n, &err), PG_OK, "%s", err.msg);
    cr_assert_eq(n, 1);
    cr_expect_eq(rows[0].run_id, c);
    history_rows_free(rows, n);
    q.backend = "cuda";
    cr_assert_eq(history_store_read(s, &q, &rows, &n, &err), PG_OK, "%s", err.msg);
    cr_expect_eq(n, 0);

    q.metric = PG_METRIC_COUNT;
    cr_expect_eq(history_store_read(s, &q, &rows, &n, &err), PG_ERR_INTERNAL);
    q.metric = PG_METRIC_REL_L2;
    q.variant = NULL;
    cr_expect_eq(history_store_read(s, &q, &rows, &n, &err), PG_ERR_INTERNAL);
    history_rows_free(NULL, 0);
    store_close(s);
}

/* unsupported_cells (schema version 19): a profile's cell round-trips with
 * its reason, counts into store_sweep_layer_rows' unsupported, and a name
 * that is no kernel profile's (an external output, a ~spec check, a typo),
 * an empty reason and a second row for the same cell are refused, nothing
 * stored. The flags table takes the gate's 'skipped' verdict. */
Test(store, unsupported_cells_round_trip_count_and_refuse_what_is_no_profile)
{
    pg_store *s = open_ok();
    sqlite3 *db = store_handle(s);
    const int64_t run = begin_run(s);
    pg_err err = {0};
    cr_assert_eq(store_put_unsupported_cell(s, run, "cap0", 1, "turboquant_k8v4@triton",
                                            "the kernel has no attention sinks", &err),
                 PG_OK, "%s", err.msg);
    char *reason = q_text(db, "SELECT reason FROM unsupported_cells WHERE layer = 1 AND variant = "
                              "'turboquant_k8v4@triton'");
    cr_assert_str_eq(reason, "the kernel has no attention sinks");
    free(reason);
    store_layer_rows rows[2];
    cr_assert_eq(store_sweep_layer_rows(s, run, "cap0", 2, rows, &err), PG_OK, "%s", err.msg);
    cr_assert_eq(rows[0].unsupported, 0);
    cr_assert_eq(rows[1].unsupported, 1);
    const char *const bad[] = {"ext:x", "fp8qkv@fa3~spec", "fp8kv@nosuch", "fp8kv"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err = (pg_err){0};
        cr_assert_eq(store_put_unsupported_cell(s, run, "cap0", 0, bad[i], "why", &err),
                     PG_ERR_DB, "%s", bad[i]);
        cr_assert_not_null(strstr(err.msg, "is no kernel profile's name"), "%s", err.msg);
    }
    cr_assert_eq(store_put_unsupported_cell(s, run, "cap0", 0, "bf16", "", &err), PG_ERR_DB);
    cr_assert_eq(store_put_unsupported_cell(s, run, "cap0", 1, "turboquant_k8v4@triton", "again",
                                            &err), PG_ERR_DB);
    cr_assert_eq(tu_sql_int(db, "SELECT count(*) FROM unsupported_cells"), 1);
    char *sql = sqlite3_mprintf("INSERT INTO flags (run_id, scope, metric, verdict, message) "
                                "VALUES (%lld, 'layer', 'supported', 'skipped', 'm')",
                                (long long)run);
    cr_assert_eq(sqlite3_exec(db, sql, NULL, NULL, NULL), SQLITE_OK, "%s", sqlite3_errmsg(db));
    sqlite3_free(sql);
    store_close(s);
}
