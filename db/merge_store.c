/* merge_store.c: shard databases read and folded into one run (see merge_store.h). */
#include "merge_store.h"

#include "run_config.h"
#include "sql_util.h"

#include "base/metric.h"
#include "base/utf8.h"
#include "base/variant.h"

#include <float.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
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
    "kv_format_stats", "unsupported_cells", "eval_samples",  "div_sequences", "div_scores",
    NULL,
};

/* The parts of one shard database: runs whose config_json names a "job" or
 * a "shard", and runs whose config_json no precgate wrote (not JSON, not a
 * JSON object, or NULL in a run that did not fail: only a run that failed
 * before its work began, on an input that did not validate, has none), so
 * that the merge refuses them instead of passing over them; ?1 is the
 * database's path, read back as each part's source (PART_FIELDS' order).
 * cfg is config_json when it is JSON (json_type fails on other text). */
#define JOB_PATH RUN_CONFIG_SQL_PATH(RUN_CONFIG_JOB)
#define INDEX_PATH RUN_CONFIG_SQL_SUBPATH(RUN_CONFIG_SHARD, RUN_CONFIG_SHARD_INDEX)
#define COUNT_PATH RUN_CONFIG_SQL_SUBPATH(RUN_CONFIG_SHARD, RUN_CONFIG_SHARD_COUNT)
static const char SQL_PARTS[] =
    "WITH r AS (SELECT *, CASE WHEN json_valid(config_json) THEN config_json END AS cfg"
    "           FROM runs)"
    " SELECT ?1, id, kind, status, label, git_rev, device, started_at, finished_at, config_json,"
    " CASE json_type(cfg, " JOB_PATH ") WHEN 'text' THEN json_extract(cfg, " JOB_PATH ") END,"
    " CASE json_type(cfg, " INDEX_PATH ") WHEN 'integer'"
    "   THEN json_extract(cfg, " INDEX_PATH ") END,"
    " CASE json_type(cfg, " COUNT_PATH ") WHEN 'integer'"
    "   THEN json_extract(cfg, " COUNT_PATH ") END, error"
    " FROM r WHERE CASE WHEN config_json IS NULL THEN status IS NOT 'failed'"
    "                   WHEN cfg IS NULL OR json_type(cfg) <> 'object' THEN 1"
    "                   ELSE json_type(cfg, " JOB_PATH ") IS NOT NULL"
    "                        OR json_type(cfg, " RUN_CONFIG_SQL_PATH(RUN_CONFIG_SHARD) ") IS NOT NULL END"
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

/* ---- the values of a part's rows ---------------------------------------- */

/* What a column of a part's rows must hold, beyond what the central
 * database's CHECKs refuse when the rows are copied (schema.c): SQLite's
 * column affinity keeps a text that is no number as text in an INTEGER or
 * REAL column (and 'x' >= 0 is true there), stores NaN as NULL, and takes
 * any bytes as TEXT, so only these checks keep such values out. */
typedef enum value_kind {
    VALUE_INT,      /* an INTEGER (storage class) in [lo, hi] */
    VALUE_REAL,     /* a REAL in [lo, hi]; an infinite bound admits that infinity */
    VALUE_NAME,     /* TEXT of valid UTF-8 (a name, a label, a key) */
    VALUE_VARIANT,  /* a VALUE_NAME the variant grammar takes as a full name (base/variant.h) */
    VALUE_TIME,     /* TEXT 'YYYY-MM-DDTHH:MM:SS.sssZ' (STORE_NOW_SQL's form) */
    VALUE_TEXT,     /* TEXT, any bytes (what a server or an error said) */
    VALUE_IDS,      /* a BLOB of int32 token ids: a length that is a multiple of 4 */
    VALUE_PACKED    /* a BLOB of packed scores: its layout is checked where it is read
                       (divergence_store_read_scores, when merge compares the run) */
} value_kind;

/* One column's rule: NULL allowed or not (a NULL REAL is a NaN: sql_util.h). */
typedef struct column_rule {
    const char *table, *column;
    value_kind kind;
    int nullable;
    double lo, hi;   /* VALUE_INT and VALUE_REAL only */
} column_rule;

/* cos_sim's slack beyond [-1, 1]: kernels/metrics.c divides the dot product
 * by one square root of the product of the two sums of squares, whose
 * rounding over the ~10^7 elements of a layer stays below 1e-9. */
#define COS_SIM_SLACK 1e-6
/* Bounds: a count, a layer/head/sample index (read back as int), any integer. */
#define R_COUNT 0, (double)INT64_MAX
#define R_INDEX 0, (double)INT_MAX
#define R_ANY_INT -(double)INT64_MAX, (double)INT64_MAX
/* A metric >= 0 that is +inf when the output had NaN/Inf (kernels/metrics.c). */
#define R_ERROR 0, INFINITY
/* A fraction of elements; a finite number; a finite number > 0. */
#define R_FRACTION 0, 1
#define R_FINITE -DBL_MAX, DBL_MAX
#define R_POSITIVE DBL_TRUE_MIN, DBL_MAX
/* Kinds without bounds. */
#define R_NONE 0, 0

/* Every column of the runs row of a part and of merge_data_tables but the
 * key (runs.id, run_id), as schema.c defines and db/ writes them: a column
 * missing here is refused (merge_store_check_values), so a migration that
 * adds one must add its rule. The metric columns of layer_metrics are not
 * listed: metric_rule derives theirs from base/metric.h, after the rules
 * of layer_metrics' other columns (table_rules). */
static const column_rule column_rules[] = {
    {"runs", "kind", VALUE_NAME, 0, R_NONE},
    {"runs", "label", VALUE_NAME, 1, R_NONE},
    {"runs", "status", VALUE_NAME, 0, R_NONE},
    {"runs", "started_at", VALUE_TIME, 0, R_NONE},
    {"runs", "finished_at", VALUE_TIME, 1, R_NONE},
    {"runs", "git_rev", VALUE_NAME, 1, R_NONE},
    {"runs", "host", VALUE_NAME, 1, R_NONE},
    {"runs", "device", VALUE_NAME, 1, R_NONE},
    /* read and checked as JSON by the merge (harness/cmd_merge.c) */
    {"runs", "config_json", VALUE_TEXT, 1, R_NONE},
    {"runs", "error", VALUE_TEXT, 1, R_NONE},
    {"runs", "pid", VALUE_INT, 1, R_COUNT},
    {"runs", "heartbeat_at", VALUE_TIME, 1, R_NONE},

    {"layer_metrics", "capture", VALUE_NAME, 0, R_NONE},
    {"layer_metrics", "layer", VALUE_INT, 0, R_INDEX},
    {"layer_metrics", "head", VALUE_INT, 0, -1, INT_MAX},
    {"layer_metrics", "variant", VALUE_VARIANT, 0, R_NONE},
    {"layer_metrics", "backend", VALUE_NAME, 0, R_NONE},

    {"quant_stats", "capture", VALUE_NAME, 0, R_NONE},
    {"quant_stats", "layer", VALUE_INT, 0, R_INDEX},
    {"quant_stats", "tensor", VALUE_NAME, 0, R_NONE},
    /* every --scales policy gives a finite scale > 0 (harness/sweep.c) */
    {"quant_stats", "scale", VALUE_REAL, 0, R_POSITIVE},
    {"quant_stats", "scale_source", VALUE_NAME, 0, R_NONE},
    {"quant_stats", "saturated_frac", VALUE_REAL, 1, R_FRACTION},
    {"quant_stats", "underflow_frac", VALUE_REAL, 1, R_FRACTION},

    {"layer_shapes", "capture", VALUE_NAME, 0, R_NONE},
    {"layer_shapes", "layer", VALUE_INT, 0, R_INDEX},
    {"layer_shapes", "hq", VALUE_INT, 0, 1, INT_MAX},
    {"layer_shapes", "hkv", VALUE_INT, 0, 1, INT_MAX},
    {"layer_shapes", "d", VALUE_INT, 0, 1, INT_MAX},
    {"layer_shapes", "window", VALUE_INT, 0, R_INDEX},
    {"layer_shapes", "has_sinks", VALUE_INT, 0, 0, 1},

    {"attribution", "capture", VALUE_NAME, 0, R_NONE},
    {"attribution", "layer", VALUE_INT, 0, R_INDEX},
    {"attribution", "variant", VALUE_VARIANT, 0, R_NONE},
    {"attribution", "tensor", VALUE_NAME, 0, R_NONE},
    {"attribution", "rel_l2", VALUE_REAL, 0, R_ERROR},

    {"kv_format_stats", "capture", VALUE_NAME, 0, R_NONE},
    {"kv_format_stats", "layer", VALUE_INT, 0, R_INDEX},
    {"kv_format_stats", "mode", VALUE_NAME, 0, R_NONE},
    {"kv_format_stats", "tensor", VALUE_NAME, 0, R_NONE},
    {"kv_format_stats", "format", VALUE_NAME, 0, R_NONE},
    {"kv_format_stats", "n_values", VALUE_INT, 0, R_COUNT},
    {"kv_format_stats", "saturated_frac", VALUE_REAL, 1, R_FRACTION},
    {"kv_format_stats", "underflow_frac", VALUE_REAL, 1, R_FRACTION},
    {"kv_format_stats", "code_bits", VALUE_INT, 0, 1, 8},
    {"kv_format_stats", "codes_used", VALUE_INT, 0, 0, 256},
    {"kv_format_stats", "code_entropy_bits", VALUE_REAL, 0, 0, 8},
    {"kv_format_stats", "n_scales", VALUE_INT, 0, R_COUNT},
    {"kv_format_stats", "scale_floor_frac", VALUE_REAL, 1, R_FRACTION},
    {"kv_format_stats", "scale_min", VALUE_REAL, 1, 0, DBL_MAX},
    {"kv_format_stats", "scale_mean", VALUE_REAL, 1, 0, DBL_MAX},
    {"kv_format_stats", "scale_max", VALUE_REAL, 1, 0, DBL_MAX},

    {"unsupported_cells", "capture", VALUE_NAME, 0, R_NONE},
    {"unsupported_cells", "layer", VALUE_INT, 0, R_INDEX},
    {"unsupported_cells", "variant", VALUE_VARIANT, 0, R_NONE},
    {"unsupported_cells", "reason", VALUE_TEXT, 0, R_NONE},

    {"ext_diagnosis", "capture", VALUE_NAME, 0, R_NONE},
    {"ext_diagnosis", "layer", VALUE_INT, 0, R_INDEX},
    {"ext_diagnosis", "ext_name", VALUE_NAME, 0, R_NONE},
    {"ext_diagnosis", "hypothesis", VALUE_NAME, 0, R_NONE},
    {"ext_diagnosis", "rel_l2", VALUE_REAL, 1, R_ERROR},
    {"ext_diagnosis", "not_run", VALUE_TEXT, 1, R_NONE},

    {"eval_samples", "eval", VALUE_NAME, 0, R_NONE},
    {"eval_samples", "mode", VALUE_NAME, 0, R_NONE},
    {"eval_samples", "effort", VALUE_NAME, 0, R_NONE},
    {"eval_samples", "problem_id", VALUE_NAME, 0, R_NONE},
    {"eval_samples", "sample", VALUE_INT, 0, R_INDEX},
    {"eval_samples", "status", VALUE_NAME, 0, R_NONE},
    {"eval_samples", "attempts", VALUE_INT, 1, R_COUNT},
    /* eval_store_put_sample refuses an infinite latency; NaN is stored NULL */
    {"eval_samples", "latency_ms", VALUE_REAL, 1, 0, DBL_MAX},
    {"eval_samples", "finish_reason", VALUE_NAME, 1, R_NONE},
    {"eval_samples", "prompt_tokens", VALUE_INT, 1, R_COUNT},
    {"eval_samples", "completion_tokens", VALUE_INT, 1, R_COUNT},
    {"eval_samples", "content", VALUE_TEXT, 1, R_NONE},
    {"eval_samples", "extracted", VALUE_INT, 1, R_ANY_INT},
    {"eval_samples", "correct", VALUE_INT, 1, 0, 1},
    {"eval_samples", "error", VALUE_TEXT, 1, R_NONE},
    {"eval_samples", "server", VALUE_NAME, 1, R_NONE},
    {"eval_samples", "prompt_token_ids", VALUE_IDS, 1, R_NONE},
    {"eval_samples", "token_ids", VALUE_IDS, 1, R_NONE},
    {"eval_samples", "token_ids_error", VALUE_TEXT, 1, R_NONE},

    {"div_sequences", "seq_id", VALUE_NAME, 0, R_NONE},
    {"div_sequences", "source", VALUE_TEXT, 0, R_NONE},
    {"div_sequences", "n_tokens", VALUE_INT, 0, 2, (double)INT64_MAX},
    {"div_sequences", "score_from", VALUE_INT, 0, 1, (double)INT64_MAX},
    {"div_sequences", "tokens", VALUE_IDS, 0, R_NONE},

    {"div_scores", "mode", VALUE_NAME, 0, R_NONE},
    {"div_scores", "pass", VALUE_INT, 0, 0, 1},
    {"div_scores", "seq_id", VALUE_NAME, 0, R_NONE},
    {"div_scores", "server", VALUE_NAME, 0, R_NONE},
    {"div_scores", "top_k", VALUE_INT, 0, 1, INT_MAX},
    {"div_scores", "n_positions", VALUE_INT, 0, 1, (double)INT64_MAX},
    {"div_scores", "packed", VALUE_PACKED, 0, R_NONE},
};
#define N_COLUMN_RULES (sizeof column_rules / sizeof column_rules[0])
/* The table whose metric columns metric_rule gives. */
#define METRIC_TABLE "layer_metrics"
/* The most rules one table has: its listed ones and, for METRIC_TABLE, the metrics'. */
#define TABLE_RULES_MAX (N_COLUMN_RULES + PG_METRIC_COUNT)

/* The rule of metric m's layer_metrics column, from what its numbers are
 * (base/metric.h; store_put_layer_metrics refuses NaN but in the cosine,
 * stored NULL): a count an INTEGER >= 0; an error a REAL >= 0, +inf when
 * the output had NaN/Inf (kernels/metrics.c); a cosine a REAL in [-1, 1]
 * (with COS_SIM_SLACK) or NULL; decibels any REAL but NaN. */
static column_rule metric_rule(pg_metric m)
{
    column_rule r = {METRIC_TABLE, pg_metric_name(m), VALUE_REAL, 0, R_ERROR};
    if (pg_metric_is_count(m)) {
        r.kind = VALUE_INT;
        r.lo = 0;
        r.hi = (double)INT64_MAX;
        return r;
    }
    switch (pg_metric_kind_of(m)) {
    case PG_METRIC_KIND_COSINE:
        r.nullable = 1;
        r.lo = -1 - COS_SIM_SLACK;
        r.hi = 1 + COS_SIM_SLACK;
        break;
    case PG_METRIC_KIND_DB:
        r.lo = -INFINITY;
        r.hi = INFINITY;
        break;
    case PG_METRIC_KIND_ERROR: break;
    }
    return r;
}

/* The rules of table's columns into out (TABLE_RULES_MAX of them at most),
 * in column_rules' order, METRIC_TABLE's metric columns last in the enum's
 * order; returns how many. */
static int table_rules(const char *table, column_rule *out)
{
    int n = 0;
    for (size_t i = 0; i < N_COLUMN_RULES; i++)
        if (strcmp(column_rules[i].table, table) == 0) out[n++] = column_rules[i];
    if (strcmp(table, METRIC_TABLE) == 0)
        for (int m = 0; m < PG_METRIC_COUNT; m++) out[n++] = metric_rule((pg_metric)m);
    return n;
}

/* Longest value quoted in a message, in bytes. */
#define VALUE_QUOTE_MAX 40
/* Room for a quoted value: each byte as \xNN at worst, quotes, "...". */
#define VALUE_TEXT_MAX (VALUE_QUOTE_MAX * 4 + 16)
/* Room for a rule's domain in words. */
#define DOMAIN_TEXT_MAX 96
/* The form of a stored time: d a digit, every other byte itself. */
static const char TIME_FORM[] = "dddd-dd-ddTdd:dd:dd.dddZ";

/* v as a message shows it (its storage class and a cut, escaped copy) into out. */
static void value_text(sqlite3_value *v, char *out, size_t len)
{
    const int type = sqlite3_value_type(v);
    if (type == SQLITE_NULL) {
        snprintf(out, len, "NULL");
    } else if (type == SQLITE_INTEGER) {
        snprintf(out, len, "INTEGER %lld", (long long)sqlite3_value_int64(v));
    } else if (type == SQLITE_FLOAT) {
        snprintf(out, len, "REAL %.17g", sqlite3_value_double(v));
    } else {
        const unsigned char *p = type == SQLITE_TEXT ? sqlite3_value_text(v) : sqlite3_value_blob(v);
        const int n = sqlite3_value_bytes(v);
        size_t at = (size_t)snprintf(out, len, "%s '", type == SQLITE_TEXT ? "TEXT" : "BLOB");
        for (int i = 0; p != NULL && i < n && i < VALUE_QUOTE_MAX && at < len; i++)
            at += (size_t)(p[i] >= 0x20 && p[i] < 0x7f && p[i] != '\\'
                               ? snprintf(out + at, len - at, "%c", p[i])
                               : snprintf(out + at, len - at, "\\x%02x", p[i]));
        if (at < len) snprintf(out + at, len - at, "'%s", n > VALUE_QUOTE_MAX ? "..." : "");
    }
}

/* What rule r admits, in words, into out. */
static void domain_text(const column_rule *r, char *out, size_t len)
{
    const char *null = r->nullable ? " or NULL" : "";
    switch (r->kind) {
    case VALUE_INT:
        if (r->hi >= (double)INT64_MAX)
            snprintf(out, len, "an INTEGER >= %.0f%s", r->lo, null);
        else
            snprintf(out, len, "an INTEGER in [%.0f, %.0f]%s", r->lo, r->hi, null);
        break;
    case VALUE_REAL:
        snprintf(out, len, "a REAL in [%g, %g]%s", r->lo, r->hi,
                 r->nullable ? " or NULL (NaN)" : " (not NULL: no NaN)");
        break;
    case VALUE_NAME: snprintf(out, len, "TEXT of valid UTF-8%s", null); break;
    case VALUE_VARIANT: snprintf(out, len, "a variant's full name (precgate help profiles)"); break;
    case VALUE_TIME: snprintf(out, len, "TEXT 'YYYY-MM-DDTHH:MM:SS.sssZ'%s", null); break;
    case VALUE_TEXT: snprintf(out, len, "TEXT%s", null); break;
    case VALUE_IDS: snprintf(out, len, "a BLOB of int32 token ids%s", null); break;
    case VALUE_PACKED: snprintf(out, len, "a BLOB%s", null); break;
    }
}

/* Whether text is a time of TIME_FORM. */
static int is_time(const unsigned char *text, int n)
{
    if (n != (int)sizeof TIME_FORM - 1) return 0;
    for (int i = 0; i < n; i++)
        if (TIME_FORM[i] == 'd' ? text[i] < '0' || text[i] > '9' : text[i] != TIME_FORM[i])
            return 0;
    return 1;
}

/* Whether v is a value rule r admits. */
static int value_ok(const column_rule *r, sqlite3_value *v)
{
    const int type = sqlite3_value_type(v);
    if (type == SQLITE_NULL) return r->nullable && r->kind != VALUE_VARIANT;
    if (r->kind == VALUE_INT) {
        const double x = (double)sqlite3_value_int64(v);
        return type == SQLITE_INTEGER && x >= r->lo && x <= r->hi;
    }
    if (r->kind == VALUE_REAL) {
        const double x = sqlite3_value_double(v);
        return type == SQLITE_FLOAT && !isnan(x) && x >= r->lo && x <= r->hi;
    }
    if (r->kind == VALUE_IDS) return type == SQLITE_BLOB && sqlite3_value_bytes(v) % 4 == 0;
    if (r->kind == VALUE_PACKED) return type == SQLITE_BLOB;
    if (type != SQLITE_TEXT) return 0;
    const unsigned char *text = sqlite3_value_text(v);
    const int n = sqlite3_value_bytes(v);
    if (r->kind == VALUE_TEXT) return 1;
    if (r->kind == VALUE_TIME) return is_time(text, n);
    if (utf8_invalid_at(text, (size_t)n) != (size_t)n) return 0;
    if (r->kind == VALUE_NAME) return 1;
    variant_name name;
    pg_err ignored = {0};
    return variant_name_parse("variant", (const char *)text, &name, &ignored) == PG_OK &&
           strcmp(name.full, (const char *)text) == 0;
}

/* Refuses a column of table in db that has no rule (table_rules; but the
 * key): its values would be copied unchecked. */
static pg_status check_rules_cover(sqlite3 *db, const char *path, const char *table,
                                   const char *key, pg_err *err)
{
    column_rule rules[TABLE_RULES_MAX];
    const int n_rules = table_rules(table, rules);
    char *sql = sqlite3_mprintf("SELECT name FROM pragma_table_info(%Q) ORDER BY cid", table);
    if (sql == NULL) return pg_fail(err, PG_ERR_NOMEM, "merge: out of memory");
    sqlite3_stmt *st = NULL;
    pg_status ps = sql_prepare(db, sql, &st, err);
    sqlite3_free(sql);
    int rc = SQLITE_ROW;
    while (ps == PG_OK && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        const char *col = (const char *)sqlite3_column_text(st, 0);
        int known = col != NULL && strcmp(col, key) == 0;
        for (int i = 0; !known && col != NULL && i < n_rules; i++)
            known = strcmp(rules[i].column, col) == 0;
        if (!known)
            ps = pg_fail(err, PG_ERR_FORMAT, "%s: table %s has a column %s that this precgate's "
                         "schema does not define (an altered shard database)", path, table,
                         col != NULL ? col : "(NULL)");
    }
    if (ps == PG_OK && rc != SQLITE_DONE) ps = sql_fail(db, err, "read the columns of %s", table);
    sqlite3_finalize(st);
    return ps;
}

/* Checks every value of run_id's rows of table in db (key: the column that
 * holds the run's id) against table's rules; PG_ERR_FORMAT naming path,
 * the run, the table, the row, the column, the value and what it must be. */
static pg_status check_table_values(sqlite3 *db, const char *path, const char *table,
                                    const char *key, int64_t run_id, pg_err *err)
{
    pg_status ps = check_rules_cover(db, path, table, key, err);
    column_rule rules[TABLE_RULES_MAX];
    const int n = table_rules(table, rules);
    char *cols = sqlite3_mprintf("rowid");
    for (int i = 0; cols != NULL && i < n; i++) {
        char *more = sqlite3_mprintf("%s, \"%w\"", cols, rules[i].column);
        sqlite3_free(cols);
        cols = more;
    }
    char *sql = cols != NULL ? sqlite3_mprintf("SELECT %s FROM \"%w\" WHERE \"%w\" = ?1 "
                                               "ORDER BY rowid", cols, table, key)
                             : NULL;
    sqlite3_free(cols);
    if (ps == PG_OK && sql == NULL) ps = pg_fail(err, PG_ERR_NOMEM, "merge: out of memory");
    sqlite3_stmt *st = NULL;
    if (ps == PG_OK) ps = sql_prepare(db, sql, &st, err);
    sqlite3_free(sql);
    if (ps == PG_OK && sqlite3_bind_int64(st, 1, run_id) != SQLITE_OK)
        ps = sql_fail(db, err, "bind the run of %s", table);
    int rc = SQLITE_ROW;
    while (ps == PG_OK && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        for (int i = 0; ps == PG_OK && i < n; i++) {
            sqlite3_value *v = sqlite3_column_value(st, i + 1);
            if (value_ok(&rules[i], v)) continue;
            char got[VALUE_TEXT_MAX], want[DOMAIN_TEXT_MAX];
            value_text(v, got, sizeof got);
            domain_text(&rules[i], want, sizeof want);
            ps = pg_fail(err, PG_ERR_FORMAT, "%s: run %" PRId64 ": %s row (rowid %lld): column "
                         "%s holds %s, not %s: a damaged shard database (run the shard again)",
                         path, run_id, table, (long long)sqlite3_column_int64(st, 0),
                         rules[i].column, got, want);
        }
    }
    if (ps == PG_OK && rc != SQLITE_DONE)
        ps = sql_fail(db, err, "read the %s rows of run %" PRId64, table, run_id);
    sqlite3_finalize(st);
    return ps;
}

/* Checks the values of run_id's runs row and of its rows in every data
 * table of db (check_table_values). */
static pg_status check_part_values(sqlite3 *db, const char *path, int64_t run_id, pg_err *err)
{
    pg_status ps = check_table_values(db, path, "runs", "id", run_id, err);
    for (int t = 0; ps == PG_OK && merge_data_tables[t] != NULL; t++)
        ps = check_table_values(db, path, merge_data_tables[t], "run_id", run_id, err);
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
    for (size_t i = 0; ps == PG_OK && i < n_got; i++) {
        ps = check_part_values(db, path, read[i].run_id, err);
        if (ps == PG_OK)
            ps = part_rows(db, read[i].run_id, NULL, 0, read[i].digest, &read[i].rows, err);
    }
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
