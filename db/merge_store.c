/* merge_store.c: shard databases read and folded into one run (see merge_store.h). */
#include "merge_store.h"

#include "sql_util.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

/* What a part's digest is made of, so that a digest of another scheme can
 * never equal one of these. */
#define MERGE_DIGEST_DOMAIN "precgate.merge.part.v1 xxh3-128"
/* How a digest starts: the hash that made it. */
#define MERGE_DIGEST_PREFIX "xxh3-128:"
/* Longest column list of a data table's SELECT or INSERT. */
#define MERGE_SQL_MAX 2048

const char *const merge_data_tables[] = {
    "layer_metrics", "quant_stats", "layer_shapes", "attribution", "ext_diagnosis",
    "eval_samples",  NULL,
};

/* The parts of one shard database: runs that name a job; ?1 is the
 * database's path, read back as each part's source (PART_FIELDS' order). */
static const char SQL_PARTS[] =
    "SELECT ?1, id, kind, status, label, git_rev, device, started_at, finished_at, config_json,"
    " json_extract(config_json, '$.job'),"
    " CASE json_type(config_json, '$.shard.index') WHEN 'integer'"
    "   THEN json_extract(config_json, '$.shard.index') END,"
    " CASE json_type(config_json, '$.shard.count') WHEN 'integer'"
    "   THEN json_extract(config_json, '$.shard.count') END, error"
    " FROM runs WHERE json_valid(config_json) AND json_type(config_json, '$.job') = 'text'"
    " ORDER BY id";
static const char SQL_RECORDED[] =
    "SELECT run_id, shard_index, shard_count, source, digest FROM merged_shards"
    " WHERE job = ?1 ORDER BY shard_index";
static const char SQL_ADD_RUN[] =
    "INSERT INTO runs (kind, label, status, started_at, finished_at, git_rev, host, device,"
    " config_json) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)";
static const char SQL_RECORD[] =
    "INSERT INTO merged_shards (run_id, job, shard_index, shard_count, source, source_run_id,"
    " digest, merged_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7,"
    " strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))";

/* A data table's statements: every column but run_id read from a part in
 * the order of those columns, and the INSERT of the same columns plus the
 * merged run's id (?N+1). */
typedef struct table_sql {
    char select[MERGE_SQL_MAX];
    char insert[MERGE_SQL_MAX];
    int n_cols;   /* columns read, run_id not counted */
} table_sql;

/* Fills q for table (its columns from db's schema); PG_ERR_DB when the
 * table info cannot be read, PG_ERR_INTERNAL when the SQL outgrows q. */
static pg_status table_sql_make(sqlite3 *db, const char *table, table_sql *q, pg_err *err)
{
    char *info = sqlite3_mprintf("SELECT name FROM pragma_table_info(%Q) WHERE name <> 'run_id'"
                                 " ORDER BY cid", table);
    if (info == NULL) return pg_fail(err, PG_ERR_NOMEM, "merge: out of memory");
    sqlite3_stmt *st = NULL;
    pg_status ps = sql_prepare(db, info, &st, err);
    sqlite3_free(info);
    char cols[MERGE_SQL_MAX] = "", params[MERGE_SQL_MAX] = "";
    size_t at = 0, pat = 0;
    q->n_cols = 0;
    int rc = SQLITE_ROW;
    while (ps == PG_OK && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        char *col = sqlite3_mprintf("%s\"%w\"", q->n_cols ? ", " : "",
                                    (const char *)sqlite3_column_text(st, 0));
        if (col == NULL) ps = pg_fail(err, PG_ERR_NOMEM, "merge: out of memory");
        else at += (size_t)snprintf(cols + at, at < sizeof cols ? sizeof cols - at : 0, "%s", col);
        sqlite3_free(col);
        q->n_cols++;
        pat += (size_t)snprintf(params + pat, pat < sizeof params ? sizeof params - pat : 0,
                                "%s?%d", q->n_cols > 1 ? ", " : "", q->n_cols);
    }
    if (ps == PG_OK && rc != SQLITE_DONE) ps = sql_fail(db, err, "read the columns of %s", table);
    sqlite3_finalize(st);
    if (ps != PG_OK) return ps;
    if (q->n_cols == 0) return sql_fail(db, err, "the database has no %s table", table);
    const int a = snprintf(q->select, sizeof q->select,
                           "SELECT %s FROM \"%s\" WHERE run_id = ?1 ORDER BY %s", cols, table,
                           cols);
    const int b = snprintf(q->insert, sizeof q->insert,
                           "INSERT INTO main.\"%s\" (%s, run_id) VALUES (%s, ?%d)", table, cols,
                           params, q->n_cols + 1);
    if (at >= sizeof cols || pat >= sizeof params || a < 0 || (size_t)a >= sizeof q->select ||
        b < 0 || (size_t)b >= sizeof q->insert)
        return pg_fail(err, PG_ERR_INTERNAL, "merge: the SQL of table %s outgrows %d bytes",
                       table, MERGE_SQL_MAX);
    return PG_OK;
}

/* Feeds one column value into h: its type, then its bytes (an integer or a
 * REAL's bits as 8 bytes, text or a blob with its length first). */
static void digest_value(XXH3_state_t *h, sqlite3_stmt *st, int i)
{
    const unsigned char type = (unsigned char)sqlite3_column_type(st, i);
    XXH3_128bits_update(h, &type, 1);
    if (type == SQLITE_INTEGER) {
        const int64_t v = sqlite3_column_int64(st, i);
        XXH3_128bits_update(h, &v, sizeof v);
    } else if (type == SQLITE_FLOAT) {
        const double v = sqlite3_column_double(st, i);
        XXH3_128bits_update(h, &v, sizeof v);
    } else if (type != SQLITE_NULL) {
        const void *p = type == SQLITE_TEXT ? (const void *)sqlite3_column_text(st, i)
                                            : sqlite3_column_blob(st, i);
        const int64_t len = sqlite3_column_bytes(st, i);
        XXH3_128bits_update(h, &len, sizeof len);
        if (len > 0) XXH3_128bits_update(h, p, (size_t)len);
    }
}

/* Steps the data rows of run_id in table (q's SELECT on db): each row is
 * fed to h when h is not NULL and inserted through ins (bound to the row
 * and to_run) when ins is not NULL; *rows counts them. */
static pg_status table_rows(sqlite3 *db, const char *table, const table_sql *q, int64_t run_id,
                            XXH3_state_t *h, sqlite3 *to, sqlite3_stmt *ins, int64_t to_run,
                            int64_t *rows, pg_err *err)
{
    sqlite3_stmt *st = NULL;
    pg_status ps = sql_prepare(db, q->select, &st, err);
    if (ps == PG_OK && sqlite3_bind_int64(st, 1, run_id) != SQLITE_OK)
        ps = sql_fail(db, err, "bind the run of %s", table);
    if (h != NULL) XXH3_128bits_update(h, table, strlen(table) + 1);
    int rc = SQLITE_ROW;
    while (ps == PG_OK && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        (*rows)++;
        for (int i = 0; h != NULL && i < q->n_cols; i++) digest_value(h, st, i);
        if (ins == NULL) continue;
        int brc = SQLITE_OK;
        for (int i = 0; brc == SQLITE_OK && i < q->n_cols; i++)
            brc = sqlite3_bind_value(ins, i + 1, sqlite3_column_value(st, i));
        if (brc == SQLITE_OK) brc = sqlite3_bind_int64(ins, q->n_cols + 1, to_run);
        if (brc != SQLITE_OK || sqlite3_step(ins) != SQLITE_DONE)
            ps = sql_fail(to, err, "copy a %s row of run %" PRId64 " of %s", table, run_id,
                          sql_db_path(db));
        sqlite3_reset(ins);
        sqlite3_clear_bindings(ins);
    }
    if (ps == PG_OK && rc != SQLITE_DONE)
        ps = sql_fail(db, err, "read the %s rows of run %" PRId64, table, run_id);
    sqlite3_finalize(st);
    return ps;
}

/* Reads run_id's rows of every data table in db, their digest into out
 * and their count into *rows; with to not NULL, also inserts each into
 * to_run of to (merge_store_copy_part). */
static pg_status part_rows(sqlite3 *db, int64_t run_id, sqlite3 *to, int64_t to_run,
                           char out[MERGE_DIGEST_MAX], int64_t *rows, pg_err *err)
{
    XXH3_state_t h;
    XXH3_INITSTATE(&h);
    XXH3_128bits_reset(&h);
    XXH3_128bits_update(&h, MERGE_DIGEST_DOMAIN, sizeof MERGE_DIGEST_DOMAIN);
    *rows = 0;
    pg_status ps = PG_OK;
    for (int t = 0; ps == PG_OK && merge_data_tables[t] != NULL; t++) {
        table_sql q;
        sqlite3_stmt *ins = NULL;
        ps = table_sql_make(db, merge_data_tables[t], &q, err);
        if (ps == PG_OK && to != NULL) ps = sql_prepare(to, q.insert, &ins, err);
        if (ps == PG_OK)
            ps = table_rows(db, merge_data_tables[t], &q, run_id, &h, to, ins, to_run, rows, err);
        sqlite3_finalize(ins);
    }
    const XXH128_hash_t d = XXH3_128bits_digest(&h);
    snprintf(out, MERGE_DIGEST_MAX, MERGE_DIGEST_PREFIX "%016llx%016llx",
             (unsigned long long)d.high64, (unsigned long long)d.low64);
    return ps;
}

/* Opens the shard database path read-only; with check, also checks that it
 * is whole (quick_check, a pass over the file) and of this precgate's
 * schema: done when the parts are read, not again for the copy inside the
 * central database's write transaction, whose digest check finds any change
 * since. */
static pg_status shard_open(const char *path, int check, sqlite3 **out, pg_err *err)
{
    sqlite3 *db = NULL;
    if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK) {
        const pg_status ps = sql_fail_open(path, db, err);
        sqlite3_close(db);
        return ps;
    }
    *out = db;
    sqlite3_busy_timeout(db, STORE_BUSY_TIMEOUT_MS);
    if (!check) return PG_OK;
    sqlite3_stmt *st = NULL;
    pg_status ps = sql_prepare(db, "PRAGMA quick_check", &st, err);
    int rc = ps == PG_OK ? sqlite3_step(st) : SQLITE_ERROR;
    if (ps == PG_OK && rc != SQLITE_ROW)
        ps = sql_fail(db, err, "check the shard database");
    else if (ps == PG_OK && strcmp((const char *)sqlite3_column_text(st, 0), "ok") != 0)
        ps = pg_fail(err, PG_ERR_DB, "%s: the shard database is damaged (quick_check: %s)", path,
                     (const char *)sqlite3_column_text(st, 0));
    sqlite3_finalize(st);
    int64_t version = 0;
    int found = 0;
    if (ps == PG_OK)
        ps = sql_query_int64(db, "PRAGMA user_version", NULL, 0, "read the schema version",
                             &version, &found, err);
    if (ps == PG_OK && version != store_latest_schema_version())
        ps = pg_fail(err, PG_ERR_DB, "%s: schema version %" PRId64 ", this precgate's is %d: "
                     "run that shard again with this precgate (the merged rows must have the central "
                     "database's columns)", path, version, store_latest_schema_version());
    return ps;
}

/* SQL_PARTS' columns; an index or count that is no number reads as -1. */
static const sql_field PART_FIELDS[] = {
    SQL_FIELD(TEXT, merge_part, source),      SQL_FIELD(INT64, merge_part, run_id),
    SQL_FIELD(TEXT, merge_part, kind),        SQL_FIELD(TEXT, merge_part, status),
    SQL_FIELD(TEXT, merge_part, label),       SQL_FIELD(TEXT, merge_part, git_rev),
    SQL_FIELD(TEXT, merge_part, device),      SQL_FIELD(TEXT, merge_part, started_at),
    SQL_FIELD(TEXT, merge_part, finished_at), SQL_FIELD(TEXT, merge_part, config_json),
    SQL_FIELD(TEXT, merge_part, job),         SQL_FIELD_OR(INT64, merge_part, index, -1),
    SQL_FIELD_OR(INT64, merge_part, count, -1), SQL_FIELD(TEXT, merge_part, error),
};
static const sql_row_type PART_ROW = SQL_ROW_TYPE(merge_part, PART_FIELDS, NULL);

pg_status merge_store_read_parts(const char *path, merge_part **parts, size_t *n, pg_err *err)
{
    sqlite3 *db = NULL;
    pg_status ps = shard_open(path, 1, &db, err);
    void *got = NULL;
    size_t n_got = 0;
    const sql_param params[] = {SQL_TEXT(path)};
    if (ps == PG_OK)
        ps = sql_read_all_db(db, SQL_PARTS, SQL_PARAMS(params), &PART_ROW, &got, &n_got,
                             "read the runs", err);
    merge_part *read = got;
    for (size_t i = 0; ps == PG_OK && i < n_got; i++)
        ps = part_rows(db, read[i].run_id, NULL, 0, read[i].digest, &read[i].rows, err);
    sqlite3_close(db);
    merge_part *grown = n_got > 0 ? realloc(*parts, (*n + n_got) * sizeof *grown) : *parts;
    if (grown == NULL) {
        sql_rows_free(&PART_ROW, read, n_got);
        return ps != PG_OK ? ps : pg_fail(err, PG_ERR_NOMEM, "merge: out of memory");
    }
    if (n_got > 0) memcpy(grown + *n, read, n_got * sizeof *read);
    free(read);
    *parts = grown;
    *n += n_got;
    return ps;
}

void merge_part_clear(merge_part *p)
{
    sql_row_clear(&PART_ROW, p);
    if (p != NULL) memset(p, 0, sizeof *p);
}

void merge_parts_free(merge_part *parts, size_t n)
{
    sql_rows_free(&PART_ROW, parts, n);
}

static const sql_field recorded_fields[] = {
    SQL_FIELD(INT64, merge_recorded, run_id), SQL_FIELD(INT64, merge_recorded, index),
    SQL_FIELD(INT64, merge_recorded, count),  SQL_FIELD(TEXT, merge_recorded, source),
    SQL_FIELD(TEXT, merge_recorded, digest),
};
static const sql_row_type recorded_type = SQL_ROW_TYPE(merge_recorded, recorded_fields, NULL);

pg_status merge_store_recorded(pg_store *s, const char *job, merge_recorded **rows, size_t *n,
                               pg_err *err)
{
    const sql_param params[] = {SQL_TEXT(job)};
    void *got = NULL;
    const pg_status ps = sql_read_all(s, "merge_store_recorded", SQL_RECORDED, SQL_PARAMS(params),
                                      &recorded_type, &got, n, "read merged_shards", err);
    *rows = got;
    return ps;
}

void merge_recorded_free(merge_recorded *rows, size_t n)
{
    sql_rows_free(&recorded_type, rows, n);
}

pg_status merge_store_add_run(pg_store *s, const merge_run_info *info, int64_t *run_id,
                              pg_err *err)
{
    sqlite3 *db = sql_handle_or_fail(s, "merge_store_add_run", err);
    if (db == NULL) return PG_ERR_INTERNAL;
    const sql_param params[] = {
        SQL_TEXT(info->kind),       SQL_TEXT(info->label),   SQL_TEXT(info->status),
        SQL_TEXT(info->started_at), SQL_TEXT(info->finished_at), SQL_TEXT(info->git_rev),
        SQL_TEXT(info->host),       SQL_TEXT(info->device),  SQL_TEXT(info->config_json),
    };
    const pg_status ps = sql_exec_bound(db, SQL_ADD_RUN, SQL_PARAMS(params),
                                        "insert the merged run", err);
    if (ps == PG_OK) *run_id = sqlite3_last_insert_rowid(db);
    return ps;
}

pg_status merge_store_copy_part(pg_store *s, const merge_part *part, int64_t run_id,
                                pg_err *err)
{
    sqlite3 *to = sql_handle_or_fail(s, "merge_store_copy_part", err);
    if (to == NULL) return PG_ERR_INTERNAL;
    sqlite3 *db = NULL;
    pg_status ps = shard_open(part->source, 0, &db, err);
    int64_t rows = 0;
    char digest[MERGE_DIGEST_MAX];
    if (ps == PG_OK) ps = part_rows(db, part->run_id, to, run_id, digest, &rows, err);
    sqlite3_close(db);
    if (ps == PG_OK && strcmp(digest, part->digest) != 0)
        ps = pg_fail(err, PG_ERR_DB, "%s: the rows of run %" PRId64 " changed between their "
                     "reading and their copy (a shard still being written?)", part->source,
                     part->run_id);
    const sql_param params[] = {
        SQL_INT64(run_id),      SQL_TEXT(part->job),    SQL_INT64(part->index),
        SQL_INT64(part->count), SQL_TEXT(part->source), SQL_INT64(part->run_id),
        SQL_TEXT(part->digest),
    };
    if (ps == PG_OK)
        ps = sql_exec_bound(to, SQL_RECORD, SQL_PARAMS(params), "record the merged part", err);
    return ps;
}
