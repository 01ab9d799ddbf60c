/* gate_store.c: baselines, the rows a gate compares and the flags it writes (see gate_store.h). */
#include "gate_store.h"

#include "run_config.h"
#include "sql_util.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char SQL_RUN[] = "SELECT kind, label, status, error FROM runs WHERE id = ?1";

/* A config_json field of runs alias t, NULL when absent or when the text is
 * not JSON (json_extract would raise "malformed JSON" for the whole query). */
#define CONFIG_FIELD(t, path) \
    "json_extract(CASE WHEN json_valid(" t ".config_json) THEN " t ".config_json END, " path ")"

/* Room for the candidate query's text. */
#define GATE_CANDIDATE_SQL_MAX 4096

/* The older complete runs of kind ?1 and label ?2 (IS: NULL labels match)
 * than run ?3, newest first; then, per run, whether it passed its gate
 * (has flags, none of them a regression or an error) and whether each
 * content field (the JSON paths ?4 on, joined in by candidate_sql) equals
 * run ?3's (IS: absent in both counts as equal). */
static const char SQL_CANDIDATES_HEAD[] =
    "SELECT r.id,"
    " EXISTS (SELECT 1 FROM flags f WHERE f.run_id = r.id)"
    " AND NOT EXISTS (SELECT 1 FROM flags f WHERE f.run_id = r.id"
    "                 AND f.verdict IN ('regression', 'error')),"
    " 1";
static const char SQL_CANDIDATES_FIELD[] =
    " AND " CONFIG_FIELD("r", "?%d") " IS " CONFIG_FIELD("me", "?%d");
static const char SQL_CANDIDATES_TAIL[] =
    " FROM runs r, runs me WHERE me.id = ?3 AND r.kind = ?1 AND r.label IS ?2"
    " AND r.status = 'complete' AND r.id < ?3 ORDER BY r.id DESC";

/* One content field (?3, a JSON path) of runs ?1 and ?2, and whether they
 * are the same (absent in both counts as the same). */
static const char SQL_CONTENT_FIELD[] =
    "SELECT x, y, x IS y FROM (SELECT " CONFIG_FIELD("a", "?3") " AS x, "
    CONFIG_FIELD("b", "?3") " AS y FROM runs a, runs b WHERE a.id = ?1 AND b.id = ?2)";

static const char SQL_BASELINE_GET[] = "SELECT run_id FROM baselines WHERE name = ?1";
static const char SQL_RUN_EXISTS[] = "SELECT 1 FROM runs WHERE id = ?1";

static const char SQL_BASELINE_SET[] =
    "INSERT INTO baselines (name, run_id, set_at)"
    " VALUES (?1, ?2, strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))"
    " ON CONFLICT (name) DO UPDATE SET run_id = excluded.run_id, set_at = excluded.set_at";

static const char SQL_BASELINE_LIST[] =
    "SELECT b.name, b.run_id, b.set_at, r.kind, r.label FROM baselines b"
    " JOIN runs r ON r.id = b.run_id ORDER BY b.name";

static const char SQL_FLAGS_DELETE[] = "DELETE FROM flags WHERE run_id = ?1";

static const char SQL_FLAG_INSERT[] =
    "INSERT INTO flags (run_id, baseline_run_id, scope, capture, layer, variant, eval, mode,"
    " effort, metric, value, baseline_value, threshold, verdict, message)"
    " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15)";

/* ---- runs and baselines ----------------------------------------------- */

static const sql_field RUN_FIELDS[] = {SQL_FIELD(TEXT, gate_run, kind),
                                       SQL_FIELD(TEXT, gate_run, label),
                                       SQL_FIELD(TEXT, gate_run, status),
                                       SQL_FIELD(TEXT, gate_run, error)};
static const sql_row_type RUN_ROW = SQL_ROW_TYPE(gate_run, RUN_FIELDS, NULL);

void gate_run_free(gate_run *r)
{
    if (r == NULL) return;
    sql_row_clear(&RUN_ROW, r);
    memset(r, 0, sizeof *r);
}

pg_status gate_store_run(pg_store *s, int64_t id, gate_run *out, pg_err *err)
{
    if (out == NULL) return pg_fail(err, PG_ERR_INTERNAL, "gate_store_run: out is NULL");
    memset(out, 0, sizeof *out);
    char what[SQL_WHAT_MAX];
    snprintf(what, sizeof what, "read run %" PRId64, id);
    const sql_param params[] = {SQL_INT64(id)};
    void *v = NULL;
    size_t n = 0;
    pg_status ps = sql_read_all(s, "gate_store_run", SQL_RUN, SQL_PARAMS(params), &RUN_ROW, &v, &n,
                                what, err);
    gate_run *rows = v;
    if (n > 0) *out = rows[0];  /* id is the primary key: one row or none */
    free(rows);
    out->id = id;
    if (ps == PG_OK && n == 0)
        ps = pg_fail(err, PG_ERR_USAGE, "no run %" PRId64 " in %s", id,
                     sql_db_path(store_handle(s)));
    else if (ps == PG_OK && (out->kind == NULL || out->status == NULL))
        ps = pg_fail(err, PG_ERR_NOMEM, "gate: out of memory reading run %" PRId64, id);
    if (ps != PG_OK) gate_run_free(out);
    return ps;
}

static const sql_field CANDIDATE_FIELDS[] = {SQL_FIELD(INT64, gate_candidate, id),
                                             SQL_FIELD(INT, gate_candidate, passed),
                                             SQL_FIELD(INT, gate_candidate, same_content)};
static const sql_row_type CANDIDATE_ROW = SQL_ROW_TYPE(gate_candidate, CANDIDATE_FIELDS, NULL);

/* The candidate query comparing n_fields content fields, into sql. */
static void candidate_sql(int n_fields, char sql[GATE_CANDIDATE_SQL_MAX])
{
    size_t at = (size_t)snprintf(sql, GATE_CANDIDATE_SQL_MAX, "%s", SQL_CANDIDATES_HEAD);
    for (int f = 0; f < n_fields; f++) {
        const int param = 4 + f;  /* after kind, label and the run's id */
        at += (size_t)snprintf(sql + at, GATE_CANDIDATE_SQL_MAX - at, SQL_CANDIDATES_FIELD,
                               param, param);
    }
    snprintf(sql + at, GATE_CANDIDATE_SQL_MAX - at, "%s", SQL_CANDIDATES_TAIL);
}

pg_status gate_store_baseline_candidates(pg_store *s, const gate_run *run,
                                         const char *const *fields, int n_fields,
                                         gate_candidate **out, size_t *n, pg_err *err)
{
    if (run == NULL || run->kind == NULL || out == NULL || n == NULL ||
        (fields == NULL && n_fields > 0))
        return pg_fail(err, PG_ERR_INTERNAL, "gate_store_baseline_candidates: NULL argument");
    *out = NULL;
    *n = 0;
    if (n_fields < 0 || n_fields > GATE_CANDIDATE_FIELDS_MAX)
        return pg_fail(err, PG_ERR_INTERNAL, "gate_store_baseline_candidates: %d fields, at "
                       "most %d", n_fields, GATE_CANDIDATE_FIELDS_MAX);
    char paths[GATE_CANDIDATE_FIELDS_MAX][RUN_CONFIG_PATH_MAX];
    sql_param params[3 + GATE_CANDIDATE_FIELDS_MAX] = {
        SQL_TEXT(run->kind), SQL_TEXT(run->label), SQL_INT64(run->id)};
    for (int f = 0; f < n_fields; f++) {
        const pg_status ps = run_config_path(fields[f], paths[f], err);
        if (ps != PG_OK) return ps;
        params[3 + f] = SQL_TEXT(paths[f]);
    }
    char sql[GATE_CANDIDATE_SQL_MAX];
    candidate_sql(n_fields, sql);
    char what[SQL_WHAT_MAX];
    snprintf(what, sizeof what, "find the baseline of run %" PRId64, run->id);
    void *v = NULL;
    const pg_status ps = sql_read_all(s, "gate_store_baseline_candidates", sql, params,
                                      (size_t)(3 + n_fields), &CANDIDATE_ROW, &v, n, what, err);
    *out = v;
    return ps;
}

/* Column i's text into buf ("none" for SQL NULL, cut to fit). */
static void col_text_or_none(sqlite3_stmt *st, int i, char *buf, size_t len)
{
    const unsigned char *t = sqlite3_column_text(st, i);
    snprintf(buf, len, "%s", t != NULL ? (const char *)t : GATE_CONTENT_NONE);
}

pg_status gate_store_content_diff(pg_store *s, int64_t run_id, int64_t other_id,
                                  const char *const *fields, int n, gate_content_diff *out,
                                  pg_err *err)
{
    if (out == NULL) return pg_fail(err, PG_ERR_INTERNAL, "gate_store_content_diff: out is NULL");
    memset(out, 0, sizeof *out);
    sqlite3 *db = sql_handle_or_fail(s, "gate_store_content_diff", err);
    if (db == NULL) return PG_ERR_INTERNAL;
    sqlite3_stmt *st = NULL;
    pg_status ps = sql_prepare(db, SQL_CONTENT_FIELD, &st, err);
    for (int f = 0; ps == PG_OK && f < n && out->field == NULL; f++) {
        char path[RUN_CONFIG_PATH_MAX];
        ps = run_config_path(fields[f], path, err);
        if (ps != PG_OK) break;
        sqlite3_reset(st);
        int rc = sqlite3_bind_int64(st, 1, run_id);
        if (rc == SQLITE_OK) rc = sqlite3_bind_int64(st, 2, other_id);
        if (rc == SQLITE_OK) rc = sqlite3_bind_text(st, 3, path, -1, SQLITE_TRANSIENT);
        if (rc == SQLITE_OK) rc = sqlite3_step(st);
        if (rc == SQLITE_DONE) {
            ps = pg_fail(err, PG_ERR_USAGE, "no run %" PRId64 " or %" PRId64 " in %s", run_id,
                         other_id, sql_db_path(db));
        } else if (rc != SQLITE_ROW) {
            ps = sql_fail(db, err, "compare the content of runs %" PRId64 " and %" PRId64,
                          run_id, other_id);
        } else if (sqlite3_column_int(st, 2) == 0) {
            out->field = fields[f];
            col_text_or_none(st, 0, out->run_value, sizeof out->run_value);
            col_text_or_none(st, 1, out->other_value, sizeof out->other_value);
        }
    }
    sqlite3_finalize(st);
    return ps;
}

pg_status gate_store_resolve_baseline(pg_store *s, const char *spec, int64_t *run_id,
                                      int *by_name, pg_err *err)
{
    if (spec == NULL || run_id == NULL || by_name == NULL)
        return pg_fail(err, PG_ERR_INTERNAL, "gate_store_resolve_baseline: NULL argument");
    sqlite3 *db = sql_handle_or_fail(s, "gate_store_resolve_baseline", err);
    if (db == NULL) return PG_ERR_INTERNAL;
    int found = 0;
    *by_name = 0;
    const sql_param by_name_param[] = {SQL_TEXT(spec)};
    pg_status ps = sql_query_int64(db, SQL_BASELINE_GET, SQL_PARAMS(by_name_param),
                                   "look up the baseline name", run_id, &found, err);
    if (ps != PG_OK) return ps;
    if (found) {
        *by_name = 1;
        return PG_OK;
    }
    char *end = NULL;
    errno = 0;
    const long long id = strtoll(spec, &end, 10);
    if (spec[0] >= '0' && spec[0] <= '9' && errno == 0 && *end == '\0' && id > 0) {
        int64_t got = 0;
        const sql_param by_id[] = {SQL_INT64(id)};
        ps = sql_query_int64(db, SQL_RUN_EXISTS, SQL_PARAMS(by_id), "look up the run", &got,
                             &found, err);
        if (ps != PG_OK) return ps;
        if (found) {
            *run_id = id;
            return PG_OK;
        }
        return pg_fail(err, PG_ERR_USAGE, "--baseline %s: no baseline of that name and no run "
                                          "%lld in %s", spec, id, sql_db_path(db));
    }
    return pg_fail(err, PG_ERR_USAGE, "--baseline %s: no baseline of that name in %s (see "
                                      "precgate baseline list)", spec, sql_db_path(db));
}

pg_status gate_store_baseline_set(pg_store *s, const char *name, int64_t run_id, pg_err *err)
{
    if (name == NULL) return pg_fail(err, PG_ERR_INTERNAL, "gate_store_baseline_set: name is NULL");
    if (name[0] == '\0') return pg_fail(err, PG_ERR_USAGE, "baseline: the name is empty");
    gate_run r;
    pg_status ps = gate_store_run(s, run_id, &r, err);
    if (ps != PG_OK) return ps;
    if (strcmp(r.status, "complete") != 0)
        ps = pg_fail(err, PG_ERR_USAGE, "baseline: run %" PRId64 " is %s; only a complete run "
                                        "can be a baseline", run_id, r.status);
    gate_run_free(&r);
    if (ps != PG_OK) return ps;
    char what[SQL_WHAT_MAX];
    snprintf(what, sizeof what, "set baseline '%s'", name);
    const sql_param params[] = {SQL_TEXT(name), SQL_INT64(run_id)};
    return sql_exec_bound(store_handle(s), SQL_BASELINE_SET, SQL_PARAMS(params), what, err);
}

static const sql_field BASELINE_FIELDS[] = {
    SQL_FIELD(TEXT, gate_baseline, name), SQL_FIELD(INT64, gate_baseline, run_id),
    SQL_FIELD(TEXT, gate_baseline, set_at), SQL_FIELD(TEXT, gate_baseline, kind),
    SQL_FIELD(TEXT, gate_baseline, label),
};
static const sql_row_type BASELINE_ROW = SQL_ROW_TYPE(gate_baseline, BASELINE_FIELDS, NULL);

void gate_baselines_free(gate_baseline *b, size_t n)
{
    sql_rows_free(&BASELINE_ROW, b, n);
}

pg_status gate_store_baseline_list(pg_store *s, gate_baseline **out, size_t *n, pg_err *err)
{
    if (out == NULL || n == NULL)
        return pg_fail(err, PG_ERR_INTERNAL, "gate_store_baseline_list: NULL argument");
    void *v = NULL;
    const pg_status ps = sql_read_all(s, "gate_store_baseline_list", SQL_BASELINE_LIST, NULL, 0,
                                      &BASELINE_ROW, &v, n, "list baselines", err);
    *out = v;
    return ps;
}

/* ---- rows of a run ---------------------------------------------------- */

void gate_rows_free(gate_rows *r)
{
    if (r == NULL) return;
    layer_metric_rows_free(r->layers, r->n_layers);
    eval_store_pairs_free(r->pairs, r->n_pairs);
    eval_store_scores_free(r->scores, r->n_scores);
    memset(r, 0, sizeof *r);
}

/* Keeps the first of the rows (in key order) that share a (capture, layer,
 * variant) key, the 'cpu' one of two backends, freeing the others. */
static void drop_repeated_keys(layer_metric_row *rows, size_t *n)
{
    size_t kept = 0;
    for (size_t i = 0; i < *n; i++) {
        const layer_metric_row *p = kept > 0 ? &rows[kept - 1] : NULL;
        if (p != NULL && p->layer == rows[i].layer && strcmp(p->capture, rows[i].capture) == 0 &&
            strcmp(p->variant, rows[i].variant) == 0) {
            layer_metric_row_clear(&rows[i]);
            continue;
        }
        rows[kept++] = rows[i];
    }
    *n = kept;
}

pg_status gate_store_load(pg_store *s, int64_t run_id, gate_rows *out, pg_err *err)
{
    if (out == NULL) return pg_fail(err, PG_ERR_INTERNAL, "gate_store_load: out is NULL");
    memset(out, 0, sizeof *out);
    sqlite3 *db = sql_handle_or_fail(s, "gate_store_load", err);
    if (db == NULL) return PG_ERR_INTERNAL;
    /* A savepoint is a read transaction outside one and nests inside one. */
    if (sqlite3_exec(db, "SAVEPOINT gate_load", NULL, NULL, NULL) != SQLITE_OK)
        return sql_fail(db, err, "begin reading run %" PRId64, run_id);
    pg_status ps = report_store_whole_layers(s, run_id, NULL, &out->layers, &out->n_layers, err);
    if (ps == PG_OK) drop_repeated_keys(out->layers, &out->n_layers);
    if (ps == PG_OK) ps = eval_store_read_pairs(s, run_id, NULL, &out->pairs, &out->n_pairs, err);
    if (ps == PG_OK)
        ps = eval_store_read_scores(s, run_id, NULL, &out->scores, &out->n_scores, err);
    sqlite3_exec(db, "RELEASE gate_load", NULL, NULL, NULL);
    return ps;
}

/* ---- flags ------------------------------------------------------------ */

static const char *const scope_names[GATE_SCOPE_COUNT] = {"layer", "mode_pair", "eval",
                                                           "divergence"};
static const char *const verdict_names[GATE_VERDICT_COUNT] = {
    "pass", "regression", "improvement", "no change", "inconclusive", "error", "skipped"};

const char *gate_scope_name(gate_scope s)
{
    return (unsigned)s < GATE_SCOPE_COUNT ? scope_names[s] : "?";
}

const char *gate_verdict_name(gate_verdict v)
{
    return (unsigned)v < GATE_VERDICT_COUNT ? verdict_names[v] : "?";
}

void gate_flag_free(gate_flag *f)
{
    if (f == NULL) return;
    free(f->capture);
    free(f->variant);
    free(f->eval);
    free(f->mode);
    free(f->effort);
    free(f->metric);
    free(f->message);
}

void gate_flags_free(gate_flags *f)
{
    if (f == NULL) return;
    for (size_t i = 0; i < f->n; i++) gate_flag_free(&f->v[i]);
    free(f->v);
    memset(f, 0, sizeof *f);
}

/* Inserts flag f of run_id with the prepared SQL_FLAG_INSERT statement st
 * (NaN numbers, layer -1 and base_id < 0 stored NULL). */
static pg_status insert_flag(sqlite3 *db, sqlite3_stmt *st, int64_t run_id, int64_t base_id,
                             const gate_flag *f, size_t index, pg_err *err)
{
    sql_binder b = sql_bind_start(st);
    sql_bind_int64(&b, run_id);
    if (base_id >= 0) sql_bind_int64(&b, base_id);
    else sql_bind_null(&b);
    sql_bind_text(&b, gate_scope_name(f->scope));
    sql_bind_text(&b, f->capture);
    if (f->layer >= 0) sql_bind_int64(&b, f->layer);
    else sql_bind_null(&b);
    const char *const texts[] = {f->variant, f->eval, f->mode, f->effort, f->metric};
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) sql_bind_text(&b, texts[i]);
    sql_bind_double(&b, f->value);            /* SQLite stores NaN as NULL */
    sql_bind_double(&b, f->baseline_value);
    sql_bind_double(&b, f->threshold);
    sql_bind_text(&b, gate_verdict_name(f->verdict));
    sql_bind_text(&b, f->message);
    char what[SQL_WHAT_MAX];
    snprintf(what, sizeof what, "store flag %zu of run %" PRId64, index, run_id);
    return sql_step_write(db, &b, what, err);
}

pg_status gate_store_put_flags(pg_store *s, int64_t run_id, int64_t baseline_run_id,
                               const gate_flags *f, pg_err *err)
{
    if (f == NULL) return pg_fail(err, PG_ERR_INTERNAL, "gate_store_put_flags: flags is NULL");
    sqlite3 *db = sql_handle_or_fail(s, "gate_store_put_flags", err);
    if (db == NULL) return PG_ERR_INTERNAL;
    pg_status ps = store_begin(s, err);
    if (ps != PG_OK) return ps;
    char what[SQL_WHAT_MAX];
    snprintf(what, sizeof what, "clear the flags of run %" PRId64, run_id);
    const sql_param params[] = {SQL_INT64(run_id)};
    ps = sql_exec_bound(db, SQL_FLAGS_DELETE, SQL_PARAMS(params), what, err);
    sqlite3_stmt *ins = NULL;
    if (ps == PG_OK) ps = sql_prepare(db, SQL_FLAG_INSERT, &ins, err);
    for (size_t i = 0; ps == PG_OK && i < f->n; i++)
        ps = insert_flag(db, ins, run_id, baseline_run_id, &f->v[i], i, err);
    sqlite3_finalize(ins);
    if (ps == PG_OK) ps = store_commit(s, err);
    if (ps != PG_OK) store_rollback(s);
    return ps;
}
