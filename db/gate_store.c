/* gate_store.c: baselines, the rows a gate compares and the flags it writes (see gate_store.h). */
#include "gate_store.h"

#include "sql_util.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* First capacity of a growing row array. */
#define GATE_ROWS_INITIAL 64

static const char SQL_RUN[] = "SELECT kind, label, status, error FROM runs WHERE id = ?1";

/* A config_json field of runs alias t, NULL when absent or when the text is
 * not JSON (json_extract would raise "malformed JSON" for the whole query). */
#define CONFIG_FIELD(t, path) \
    "json_extract(CASE WHEN json_valid(" t ".config_json) THEN " t ".config_json END, " path ")"

/* The same defining content as run ?3 (GATE_CONTENT_FIELDS, gate_store.h):
 * each field equal, or absent in both (IS: NULL IS NULL). A run without a
 * digest therefore never matches one with a digest. */
#define SAME_CONTENT_FIELD(f) \
    " AND " CONFIG_FIELD("r", "'$." f "'") " IS " CONFIG_FIELD("me", "'$." f "'")
#define SAME_CONTENT                                                                        \
    SAME_CONTENT_FIELD("traces_digest") SAME_CONTENT_FIELD("source") SAME_CONTENT_FIELD("limit") \
    SAME_CONTENT_FIELD("scales") SAME_CONTENT_FIELD("variants")

/* Older complete runs of the same kind and label (?1, ?2) than run ?3. */
#define OLDER_SAME_KIND_LABEL                                                               \
    "SELECT r.id FROM runs r, runs me WHERE me.id = ?3 AND r.kind = ?1 AND r.label IS ?2"   \
    " AND r.status = 'complete' AND r.id < ?3"

/* Passed its gate: has flags, none of them a regression or an error. */
static const char SQL_AUTO_PASSED[] =
    OLDER_SAME_KIND_LABEL SAME_CONTENT
    " AND EXISTS (SELECT 1 FROM flags f WHERE f.run_id = r.id)"
    " AND NOT EXISTS (SELECT 1 FROM flags f WHERE f.run_id = r.id"
    "                 AND f.verdict IN ('regression', 'error'))"
    " ORDER BY r.id DESC LIMIT 1";

static const char SQL_AUTO_ANY[] = OLDER_SAME_KIND_LABEL SAME_CONTENT " ORDER BY r.id DESC LIMIT 1";

/* The newest older run of the kind and label, whatever its content. */
static const char SQL_NEWEST_OLDER[] = OLDER_SAME_KIND_LABEL " ORDER BY r.id DESC LIMIT 1";

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

/* Whole-layer rows; the first backend of a key in this order is kept. */
static const char SQL_LAYERS[] =
    "SELECT capture, layer, variant, rel_l2, max_abs, mean_abs, p99_abs, cos_sim, sqnr_db,"
    " nan_count + inf_count FROM layer_metrics WHERE run_id = ?1 AND head = -1"
    " ORDER BY capture, layer, variant, backend";

static const char SQL_FLAGS_DELETE[] = "DELETE FROM flags WHERE run_id = ?1";

static const char SQL_FLAG_INSERT[] =
    "INSERT INTO flags (run_id, baseline_run_id, scope, capture, layer, variant, eval, mode,"
    " effort, metric, value, baseline_value, threshold, verdict, message)"
    " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15)";

/* ---- errors and small helpers ----------------------------------------- */






/* Makes room for one more element of size elem in *arr (capacity *cap, n used). */
static pg_status grow(void **arr, size_t *cap, size_t n, size_t elem, pg_err *err)
{
    if (n < *cap) return PG_OK;
    const size_t c = *cap ? 2 * *cap : GATE_ROWS_INITIAL;
    void *p = realloc(*arr, c * elem);
    if (p == NULL) return pg_fail(err, PG_ERR_NOMEM, "gate: out of memory reading rows");
    *arr = p;
    *cap = c;
    return PG_OK;
}

/* Runs one-row query sql (bound: ?1 = a text, ?2 = an id, as given) into
 * *id; *found says whether it returned a row. */
static pg_status query_id(sqlite3 *db, const char *sql, const char *text, int64_t id,
                          int64_t *out, int *found, pg_err *err)
{
    sqlite3_stmt *st = NULL;
    *found = 0;
    pg_status ps = sql_prepare(db, sql, &st, err);
    if (ps == PG_OK) {
        int rc = SQLITE_OK;
        if (text != NULL) rc = sqlite3_bind_text(st, 1, text, -1, SQLITE_STATIC);
        else rc = sqlite3_bind_int64(st, 1, id);
        if (rc == SQLITE_OK) rc = sqlite3_step(st);
        if (rc == SQLITE_ROW) {
            *found = 1;
            *out = sqlite3_column_int64(st, 0);
        } else if (rc != SQLITE_DONE) {
            ps = sql_fail(db, err, "run \"%s\"", sql);
        }
    }
    sqlite3_finalize(st);
    return ps;
}

/* ---- runs and baselines ----------------------------------------------- */

void gate_run_free(gate_run *r)
{
    if (r == NULL) return;
    free(r->kind);
    free(r->label);
    free(r->status);
    free(r->error);
    memset(r, 0, sizeof *r);
}

pg_status gate_store_run(pg_store *s, int64_t id, gate_run *out, pg_err *err)
{
    if (out == NULL) return pg_fail(err, PG_ERR_INTERNAL, "gate_store_run: out is NULL");
    memset(out, 0, sizeof *out);
    sqlite3 *db = sql_handle_or_fail(s, "gate_store_run", err);
    if (db == NULL) return PG_ERR_INTERNAL;
    sqlite3_stmt *st = NULL;
    pg_status ps = sql_prepare(db, SQL_RUN, &st, err);
    if (ps == PG_OK) {
        int rc = sqlite3_bind_int64(st, 1, id);
        if (rc == SQLITE_OK) rc = sqlite3_step(st);
        if (rc == SQLITE_ROW) {
            int oom = 0;
            out->id = id;
            out->kind = sql_col_dup(st, 0, &oom);
            out->label = sql_col_dup(st, 1, &oom);
            out->status = sql_col_dup(st, 2, &oom);
            out->error = sql_col_dup(st, 3, &oom);
            if (oom || out->kind == NULL || out->status == NULL)
                ps = pg_fail(err, PG_ERR_NOMEM, "gate: out of memory reading run %" PRId64, id);
        } else if (rc == SQLITE_DONE) {
            ps = pg_fail(err, PG_ERR_USAGE, "no run %" PRId64 " in %s", id, sql_db_path(db));
        } else {
            ps = sql_fail(db, err, "read run %" PRId64, id);
        }
    }
    sqlite3_finalize(st);
    if (ps != PG_OK) gate_run_free(out);
    return ps;
}

/* Binds (kind, label, id) as ?1..?3 and steps an auto-baseline query. */
static pg_status auto_query(sqlite3 *db, const char *sql, const gate_run *run, int64_t *id,
                            int *found, pg_err *err)
{
    sqlite3_stmt *st = NULL;
    *found = 0;
    pg_status ps = sql_prepare(db, sql, &st, err);
    if (ps == PG_OK) {
        int rc = sqlite3_bind_text(st, 1, run->kind, -1, SQLITE_STATIC);
        if (rc == SQLITE_OK)
            rc = run->label != NULL ? sqlite3_bind_text(st, 2, run->label, -1, SQLITE_STATIC)
                                    : sqlite3_bind_null(st, 2);
        if (rc == SQLITE_OK) rc = sqlite3_bind_int64(st, 3, run->id);
        if (rc == SQLITE_OK) rc = sqlite3_step(st);
        if (rc == SQLITE_ROW) {
            *found = 1;
            *id = sqlite3_column_int64(st, 0);
        } else if (rc != SQLITE_DONE) {
            ps = sql_fail(db, err, "find the baseline of run %" PRId64, run->id);
        }
    }
    sqlite3_finalize(st);
    return ps;
}

pg_status gate_store_auto_baseline(pg_store *s, const gate_run *run, int64_t *base_id,
                                   int *passed, pg_err *err)
{
    if (run == NULL || run->kind == NULL || base_id == NULL || passed == NULL)
        return pg_fail(err, PG_ERR_INTERNAL, "gate_store_auto_baseline: NULL argument");
    *base_id = -1;
    *passed = 0;
    sqlite3 *db = sql_handle_or_fail(s, "gate_store_auto_baseline", err);
    if (db == NULL) return PG_ERR_INTERNAL;
    int found = 0;
    pg_status ps = auto_query(db, SQL_AUTO_PASSED, run, base_id, &found, err);
    if (ps == PG_OK && found) {
        *passed = 1;
        return PG_OK;
    }
    if (ps == PG_OK) ps = auto_query(db, SQL_AUTO_ANY, run, base_id, &found, err);
    if (ps != PG_OK || !found) *base_id = -1;
    return ps;
}

pg_status gate_store_newest_older(pg_store *s, const gate_run *run, int64_t *id, pg_err *err)
{
    if (run == NULL || run->kind == NULL || id == NULL)
        return pg_fail(err, PG_ERR_INTERNAL, "gate_store_newest_older: NULL argument");
    *id = -1;
    sqlite3 *db = sql_handle_or_fail(s, "gate_store_newest_older", err);
    if (db == NULL) return PG_ERR_INTERNAL;
    int found = 0;
    pg_status ps = auto_query(db, SQL_NEWEST_OLDER, run, id, &found, err);
    if (ps != PG_OK || !found) *id = -1;
    return ps;
}

/* --limit first: it changes the digest, and is the cause to name. */
const char *const gate_content_fields[GATE_CONTENT_FIELD_COUNT] = {"limit", "source",
                                                                   "traces_digest", "scales"};
const char *const gate_auto_fields[GATE_AUTO_FIELD_COUNT] = {"limit", "source", "traces_digest",
                                                             "scales", "variants"};

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
        char path[64];
        snprintf(path, sizeof path, "$.%s", fields[f]);
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
    pg_status ps = query_id(db, SQL_BASELINE_GET, spec, 0, run_id, &found, err);
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
        ps = query_id(db, SQL_RUN_EXISTS, NULL, id, &got, &found, err);
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
    sqlite3 *db = store_handle(s);
    sqlite3_stmt *st = NULL;
    ps = sql_prepare(db, SQL_BASELINE_SET, &st, err);
    if (ps == PG_OK) {
        int rc = sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
        if (rc == SQLITE_OK) rc = sqlite3_bind_int64(st, 2, run_id);
        if (rc == SQLITE_OK) rc = sqlite3_step(st);
        if (rc != SQLITE_DONE) ps = sql_fail(db, err, "set baseline '%s'", name);
    }
    sqlite3_finalize(st);
    return ps;
}

void gate_baselines_free(gate_baseline *b, size_t n)
{
    for (size_t i = 0; b != NULL && i < n; i++) {
        free(b[i].name);
        free(b[i].set_at);
        free(b[i].kind);
        free(b[i].label);
    }
    free(b);
}

pg_status gate_store_baseline_list(pg_store *s, gate_baseline **out, size_t *n, pg_err *err)
{
    if (out == NULL || n == NULL)
        return pg_fail(err, PG_ERR_INTERNAL, "gate_store_baseline_list: NULL argument");
    *out = NULL;
    *n = 0;
    sqlite3 *db = sql_handle_or_fail(s, "gate_store_baseline_list", err);
    if (db == NULL) return PG_ERR_INTERNAL;
    sqlite3_stmt *st = NULL;
    size_t cap = 0;
    pg_status ps = sql_prepare(db, SQL_BASELINE_LIST, &st, err);
    int rc = SQLITE_DONE;
    while (ps == PG_OK && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        ps = grow((void **)out, &cap, *n, sizeof **out, err);
        if (ps != PG_OK) break;
        gate_baseline *b = &(*out)[(*n)++];
        int oom = 0;
        memset(b, 0, sizeof *b);
        b->name = sql_col_dup(st, 0, &oom);
        b->run_id = sqlite3_column_int64(st, 1);
        b->set_at = sql_col_dup(st, 2, &oom);
        b->kind = sql_col_dup(st, 3, &oom);
        b->label = sql_col_dup(st, 4, &oom);
        if (oom) ps = pg_fail(err, PG_ERR_NOMEM, "gate: out of memory listing baselines");
    }
    if (ps == PG_OK && rc != SQLITE_DONE) ps = sql_fail(db, err, "list baselines");
    sqlite3_finalize(st);
    return ps;
}

/* ---- rows of a run ---------------------------------------------------- */

void gate_rows_free(gate_rows *r)
{
    if (r == NULL) return;
    for (size_t i = 0; i < r->n_layers; i++) {
        free((void *)r->layers[i].capture);
        free((void *)r->layers[i].variant);
    }
    free(r->layers);
    eval_store_pairs_free(r->pairs, r->n_pairs);
    eval_store_scores_free(r->scores, r->n_scores);
    memset(r, 0, sizeof *r);
}

/* Steps st (bound to run_id as ?1) and appends one element per row through
 * take; what names the table for messages. */
static pg_status read_rows(sqlite3 *db, const char *sql, int64_t run_id, const char *what,
                           pg_status (*take)(sqlite3_stmt *, gate_rows *, size_t *, pg_err *),
                           gate_rows *out, size_t *cap, pg_err *err)
{
    sqlite3_stmt *st = NULL;
    pg_status ps = sql_prepare(db, sql, &st, err);
    int rc = SQLITE_DONE;
    if (ps == PG_OK && sqlite3_bind_int64(st, 1, run_id) != SQLITE_OK)
        ps = sql_fail(db, err, "read %s of run %" PRId64, what, run_id);
    while (ps == PG_OK && (rc = sqlite3_step(st)) == SQLITE_ROW) ps = take(st, out, cap, err);
    if (ps == PG_OK && rc != SQLITE_DONE) ps = sql_fail(db, err, "read %s of run %" PRId64, what, run_id);
    sqlite3_finalize(st);
    return ps;
}

/* One layer_metrics row; a repeated key (another backend) is skipped. */
static pg_status take_layer(sqlite3_stmt *st, gate_rows *out, size_t *cap, pg_err *err)
{
    const char *capture = (const char *)sqlite3_column_text(st, 0);
    const int layer = sqlite3_column_int(st, 1);
    const char *variant = (const char *)sqlite3_column_text(st, 2);
    if (capture == NULL || variant == NULL)
        return pg_fail(err, PG_ERR_NOMEM, "gate: out of memory reading layer rows");
    if (out->n_layers > 0) {
        const gate_layer_row *p = &out->layers[out->n_layers - 1];
        if (p->layer == layer && strcmp(p->capture, capture) == 0 &&
            strcmp(p->variant, variant) == 0)
            return PG_OK;
    }
    pg_status ps = grow((void **)&out->layers, cap, out->n_layers, sizeof *out->layers, err);
    if (ps != PG_OK) return ps;
    gate_layer_row *r = &out->layers[out->n_layers];
    memset(r, 0, sizeof *r);
    int oom = 0;
    r->capture = sql_col_dup(st, 0, &oom);
    r->variant = sql_col_dup(st, 2, &oom);
    out->n_layers++;  /* counted now so that gate_rows_free releases the strings */
    if (oom) return pg_fail(err, PG_ERR_NOMEM, "gate: out of memory reading layer rows");
    r->layer = layer;
    for (int m = 0; m < PG_METRIC_VALUE_COUNT; m++) r->m[m] = sql_col_real(st, 3 + m);
    r->nonfinite = sqlite3_column_int64(st, 3 + PG_METRIC_VALUE_COUNT);
    return PG_OK;
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
    size_t cl = 0;
    pg_status ps = read_rows(db, SQL_LAYERS, run_id, "layer_metrics", take_layer, out, &cl, err);
    if (ps == PG_OK) ps = eval_store_read_pairs(s, run_id, NULL, &out->pairs, &out->n_pairs, err);
    if (ps == PG_OK)
        ps = eval_store_read_scores(s, run_id, NULL, &out->scores, &out->n_scores, err);
    sqlite3_exec(db, "RELEASE gate_load", NULL, NULL, NULL);
    return ps;
}

/* ---- flags ------------------------------------------------------------ */

static const char *const scope_names[GATE_SCOPE_COUNT] = {"layer", "mode_pair", "eval"};
static const char *const verdict_names[GATE_VERDICT_COUNT] = {
    "pass", "regression", "improvement", "no change", "inconclusive", "error"};

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

/* Binds v to parameter i, NaN as NULL. */
static int bind_real(sqlite3_stmt *st, int i, double v)
{
    return isnan(v) ? sqlite3_bind_null(st, i) : sqlite3_bind_double(st, i, v);
}

/* Binds text v (NULL as NULL) to parameter i. */
static int bind_str(sqlite3_stmt *st, int i, const char *v)
{
    return v != NULL ? sqlite3_bind_text(st, i, v, -1, SQLITE_STATIC) : sqlite3_bind_null(st, i);
}

/* Inserts flag f of run_id with the prepared SQL_FLAG_INSERT statement st. */
static pg_status insert_flag(sqlite3 *db, sqlite3_stmt *st, int64_t run_id, int64_t base_id,
                             const gate_flag *f, size_t index, pg_err *err)
{
    int rc = sqlite3_bind_int64(st, 1, run_id);
    if (rc == SQLITE_OK)
        rc = base_id >= 0 ? sqlite3_bind_int64(st, 2, base_id) : sqlite3_bind_null(st, 2);
    if (rc == SQLITE_OK) rc = sqlite3_bind_text(st, 3, gate_scope_name(f->scope), -1, SQLITE_STATIC);
    if (rc == SQLITE_OK) rc = bind_str(st, 4, f->capture);
    if (rc == SQLITE_OK) rc = f->layer >= 0 ? sqlite3_bind_int(st, 5, f->layer) : sqlite3_bind_null(st, 5);
    if (rc == SQLITE_OK) rc = bind_str(st, 6, f->variant);
    if (rc == SQLITE_OK) rc = bind_str(st, 7, f->eval);
    if (rc == SQLITE_OK) rc = bind_str(st, 8, f->mode);
    if (rc == SQLITE_OK) rc = bind_str(st, 9, f->effort);
    if (rc == SQLITE_OK) rc = bind_str(st, 10, f->metric);
    if (rc == SQLITE_OK) rc = bind_real(st, 11, f->value);
    if (rc == SQLITE_OK) rc = bind_real(st, 12, f->baseline_value);
    if (rc == SQLITE_OK) rc = bind_real(st, 13, f->threshold);
    if (rc == SQLITE_OK) rc = sqlite3_bind_text(st, 14, gate_verdict_name(f->verdict), -1, SQLITE_STATIC);
    if (rc == SQLITE_OK) rc = bind_str(st, 15, f->message);
    if (rc == SQLITE_OK) rc = sqlite3_step(st);
    pg_status ps = rc == SQLITE_DONE ? PG_OK
                                     : sql_fail(db, err, "store flag %zu of run %" PRId64, index, run_id);
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    return ps;
}

pg_status gate_store_put_flags(pg_store *s, int64_t run_id, int64_t baseline_run_id,
                               const gate_flags *f, pg_err *err)
{
    if (f == NULL) return pg_fail(err, PG_ERR_INTERNAL, "gate_store_put_flags: flags is NULL");
    sqlite3 *db = sql_handle_or_fail(s, "gate_store_put_flags", err);
    if (db == NULL) return PG_ERR_INTERNAL;
    pg_status ps = store_begin(s, err);
    if (ps != PG_OK) return ps;
    sqlite3_stmt *del = NULL, *ins = NULL;
    ps = sql_prepare(db, SQL_FLAGS_DELETE, &del, err);
    if (ps == PG_OK) ps = sql_prepare(db, SQL_FLAG_INSERT, &ins, err);
    if (ps == PG_OK) {
        int rc = sqlite3_bind_int64(del, 1, run_id);
        if (rc == SQLITE_OK) rc = sqlite3_step(del);
        if (rc != SQLITE_DONE) ps = sql_fail(db, err, "clear the flags of run %" PRId64, run_id);
    }
    for (size_t i = 0; ps == PG_OK && i < f->n; i++)
        ps = insert_flag(db, ins, run_id, baseline_run_id, &f->v[i], i, err);
    sqlite3_finalize(del);
    sqlite3_finalize(ins);
    if (ps == PG_OK) ps = store_commit(s, err);
    if (ps != PG_OK) store_rollback(s);
    return ps;
}
