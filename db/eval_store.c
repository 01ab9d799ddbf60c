/* eval_store.c: eval_samples, eval_scores and eval_pairs in the store (see eval_store.h). */
#include "eval_store.h"

#include "le_pack.h"
#include "sql_util.h"

#include <inttypes.h>
#include <math.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Room for one pass@k JSON member: "k": value, with a 20-digit k and %.17g. */
#define EVAL_JSON_MEMBER_MAX 64
/* Significant digits tried before the 17 that always round-trip a double. */
#define EVAL_SHORT_DIGITS 15
#define EVAL_ROUNDTRIP_DIGITS 17

static const char SQL_SAMPLE_UPSERT[] =
    "INSERT INTO eval_samples (run_id, eval, mode, effort, problem_id, sample, status,"
    " attempts, latency_ms, finish_reason, prompt_tokens, completion_tokens, content,"
    " extracted, correct, error, server, prompt_token_ids, token_ids, token_ids_error)"
    " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17,"
    " ?18, ?19, ?20)"
    " ON CONFLICT (run_id, eval, mode, effort, problem_id, sample) DO UPDATE SET"
    " status = excluded.status, attempts = excluded.attempts,"
    " latency_ms = excluded.latency_ms, finish_reason = excluded.finish_reason,"
    " prompt_tokens = excluded.prompt_tokens, completion_tokens = excluded.completion_tokens,"
    " content = excluded.content, extracted = excluded.extracted,"
    " correct = excluded.correct, error = excluded.error, server = excluded.server,"
    " prompt_token_ids = excluded.prompt_token_ids, token_ids = excluded.token_ids,"
    " token_ids_error = excluded.token_ids_error"
    " WHERE eval_samples.status = 'error'";

/* Bytes of one stored token id (int32, little-endian). */
#define TOKEN_ID_BYTES 4

static const char SQL_SAMPLE_STATUS[] =
    "SELECT status FROM eval_samples WHERE run_id = ?1 AND eval = ?2 AND mode = ?3"
    " AND effort = ?4 AND problem_id = ?5 AND sample = ?6";

static const char SQL_SAMPLE_DONE[] =
    "SELECT 1 FROM eval_samples WHERE run_id = ?1 AND eval = ?2 AND mode = ?3"
    " AND effort = ?4 AND problem_id = ?5 AND sample = ?6 AND status IN ('ok', 'truncated')";

/* Every sample of (run, eval): all modes give the rows, ours the cells. */
static const char SQL_LOAD[] =
    "SELECT problem_id, sample, status, correct, (mode = ?3 AND effort = ?4)"
    " FROM eval_samples WHERE run_id = ?1 AND eval = ?2 ORDER BY problem_id, sample";

static const char SQL_SCORE_UPSERT[] =
    "INSERT INTO eval_scores (run_id, eval, mode, effort, n_problems, k, accuracy, stderr,"
    " ci_low, ci_high, n_errors, n_truncated, ci_method, pass_at_json, n_empty, n_missing)"
    " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16)"
    " ON CONFLICT (run_id, eval, mode, effort) DO UPDATE SET"
    " n_problems = excluded.n_problems, k = excluded.k, accuracy = excluded.accuracy,"
    " stderr = excluded.stderr, ci_low = excluded.ci_low, ci_high = excluded.ci_high,"
    " n_errors = excluded.n_errors, n_truncated = excluded.n_truncated,"
    " ci_method = excluded.ci_method, pass_at_json = excluded.pass_at_json,"
    " n_empty = excluded.n_empty, n_missing = excluded.n_missing";

static const char SQL_PAIR_UPSERT[] =
    "INSERT INTO eval_pairs (run_id, eval, effort, mode_a, mode_b, n_problems, mean_diff,"
    " stderr, ci_low, ci_high, wins, losses, ties, sign_p, mde)"
    " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15)"
    " ON CONFLICT (run_id, eval, effort, mode_a, mode_b) DO UPDATE SET"
    " n_problems = excluded.n_problems, mean_diff = excluded.mean_diff,"
    " stderr = excluded.stderr, ci_low = excluded.ci_low, ci_high = excluded.ci_high,"
    " wins = excluded.wins, losses = excluded.losses, ties = excluded.ties,"
    " sign_p = excluded.sign_p, mde = excluded.mde";

/* ---- errors ------------------------------------------------------------ */

/* s (NULL-safe) as printable text. */
static const char *str_or_null(const char *s)
{
    return s != NULL ? s : "NULL";
}









/* Binds v, or NULL when v < 0 (the "not known" of counts). */
static void bind_count_or_null(sql_binder *b, int64_t v)
{
    if (b->rc == SQLITE_OK)
        b->rc = v < 0 ? sqlite3_bind_null(b->st, b->next) : sqlite3_bind_int64(b->st, b->next, v);
    b->next++;
}

/* Binds a size_t count (a table's size: far below INT64_MAX). */
static void bind_size(sql_binder *b, size_t v)
{
    sql_bind_int64(b, (int64_t)v);
}

/* Binds v, NaN as NULL explicitly (SQLite would do the same). */
static void bind_double_or_null(sql_binder *b, double v)
{
    if (b->rc == SQLITE_OK)
        b->rc = isnan(v) ? sqlite3_bind_null(b->st, b->next) : sqlite3_bind_double(b->st, b->next, v);
    b->next++;
}

/* Binds the key (run_id, eval, mode, effort, problem_id, sample) as ?1..?6. */
static void bind_key(sql_binder *b, int64_t run_id, const char *eval, const char *mode,
                     const char *effort, const char *problem_id, int sample)
{
    sql_bind_int64(b, run_id);
    sql_bind_text(b, eval);
    sql_bind_text(b, mode);
    sql_bind_text(b, effort);
    sql_bind_text(b, problem_id);
    sql_bind_int64(b, sample);
}

/* ---- samples ----------------------------------------------------------- */

static const char *status_text(eval_sample_status st)
{
    switch (st) {
    case EVAL_SAMPLE_OK: return "ok";
    case EVAL_SAMPLE_TRUNCATED: return "truncated";
    case EVAL_SAMPLE_ERROR: return "error";
    case EVAL_SAMPLE_MISSING: break;
    }
    return NULL;
}

/* The status named by text (NULL-safe); -1 when it is none of the stored three. */
static int status_from_text(const char *text)
{
    if (text == NULL) return -1;
    if (strcmp(text, "ok") == 0) return EVAL_SAMPLE_OK;
    if (strcmp(text, "truncated") == 0) return EVAL_SAMPLE_TRUNCATED;
    if (strcmp(text, "error") == 0) return EVAL_SAMPLE_ERROR;
    return -1;
}

/* After an upsert that changed nothing: names the status that kept the row. */
static pg_status refuse_replace(pg_store *s, sqlite3 *db, int64_t run_id,
                                const eval_sample_row *r, const char *what, pg_err *err)
{
    sqlite3_stmt *st = NULL;
    pg_status ps = sql_cached(s, SQL_SAMPLE_STATUS, &st, err);
    if (ps != PG_OK) return ps;
    sql_binder b = sql_bind_start(st);
    bind_key(&b, run_id, r->eval, r->mode, r->effort, r->problem_id, r->sample);
    char stored[16] = "?";
    if (b.rc == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW) {
        const unsigned char *t = sqlite3_column_text(st, 0);
        snprintf(stored, sizeof stored, "%s", t != NULL ? (const char *)t : "NULL");
    }
    sql_release(st);
    return pg_fail(err, PG_ERR_DB,
                   "%s: %s: already stored with status '%s' (only 'error' samples are "
                   "replaced; nothing changed)", sql_db_path(db), what, stored);
}

/* "eval sample (run R, eval 'E', ...)" for the messages about r, into what.
 * Built only when something fails: it is not free on the hot path. */
static void describe_sample(char *what, size_t size, int64_t run_id, const eval_sample_row *r)
{
    snprintf(what, size,
             "eval sample (run %" PRId64 ", eval '%s', mode '%s', effort '%s', problem '%s', "
             "sample %d)", run_id, r->eval, r->mode, r->effort, r->problem_id, r->sample);
}

pg_status eval_store_put_sample(pg_store *s, int64_t run_id, const eval_sample_row *r,
                                pg_err *err)
{
    sqlite3 *db = sql_handle_or_fail(s, "eval_store_put_sample", err);
    if (db == NULL) return err != NULL ? err->code : PG_ERR_INTERNAL;
    if (r == NULL || r->eval == NULL || r->mode == NULL || r->effort == NULL
        || r->problem_id == NULL)
        return pg_fail(err, PG_ERR_INTERNAL,
                       "eval_store_put_sample: row, eval, mode, effort or problem_id is NULL");
    char what[SQL_WHAT_MAX];
    const char *status = status_text(r->status);
    const int graded = r->status != EVAL_SAMPLE_ERROR;
    if (status == NULL || r->sample < 0 || (graded && r->correct != 0 && r->correct != 1)
        || isinf(r->latency_ms)) {
        describe_sample(what, sizeof what, run_id, r);
        if (status == NULL)
            return pg_fail(err, PG_ERR_INTERNAL, "%s: %s: status %d cannot be stored",
                           sql_db_path(db), what, (int)r->status);
        if (r->sample < 0)
            return pg_fail(err, PG_ERR_INTERNAL, "%s: %s: negative sample index",
                           sql_db_path(db), what);
        if (isinf(r->latency_ms))
            return pg_fail(err, PG_ERR_NUMERIC, "%s: %s: latency_ms is infinite",
                           sql_db_path(db), what);
        return pg_fail(err, PG_ERR_INTERNAL, "%s: %s: status '%s' needs correct 0 or 1, not %d",
                       sql_db_path(db), what, status, r->correct);
    }

    unsigned char *ids_blob[2] = {NULL, NULL};
    const int32_t *const ids[2] = {r->prompt_token_ids, r->token_ids};
    const size_t n_ids[2] = {r->n_prompt_token_ids, r->n_token_ids};
    for (int k = 0; k < 2; k++) {
        if (ids[k] == NULL) continue;
        ids_blob[k] = malloc(n_ids[k] * TOKEN_ID_BYTES + 1);
        if (ids_blob[k] == NULL) {
            free(ids_blob[0]);
            return pg_fail(err, PG_ERR_NOMEM, "%s: out of memory for token ids", sql_db_path(db));
        }
        for (size_t i = 0; i < n_ids[k]; i++) le_put_i32(ids_blob[k] + i * TOKEN_ID_BYTES, ids[k][i]);
    }
    sqlite3_stmt *st = NULL;
    pg_status ps = sql_cached(s, SQL_SAMPLE_UPSERT, &st, err);
    if (ps != PG_OK) {
        free(ids_blob[0]);
        free(ids_blob[1]);
        return ps;
    }
    sql_binder b = sql_bind_start(st);
    bind_key(&b, run_id, r->eval, r->mode, r->effort, r->problem_id, r->sample);
    sql_bind_text(&b, status);
    bind_count_or_null(&b, r->attempts);
    bind_double_or_null(&b, r->latency_ms);
    sql_bind_text(&b, r->finish_reason);
    bind_count_or_null(&b, r->prompt_tokens);
    bind_count_or_null(&b, r->completion_tokens);
    sql_bind_text(&b, r->content);
    if (r->has_extracted) sql_bind_int64(&b, r->extracted);
    else sql_bind_null(&b);
    if (graded) sql_bind_int64(&b, r->correct);
    else sql_bind_null(&b);
    sql_bind_text(&b, r->error);
    sql_bind_text(&b, r->server);
    for (int k = 0; k < 2; k++) {
        if (ids_blob[k] != NULL) sql_bind_blob(&b, ids_blob[k], n_ids[k] * TOKEN_ID_BYTES);
        else sql_bind_null(&b);
    }
    sql_bind_text(&b, r->token_ids_error);
    const int all_bound = b.next - 1 == sqlite3_bind_parameter_count(st);
    const int rc = b.rc == SQLITE_OK && all_bound ? sqlite3_step(st) : b.rc;
    /* SQLITE_STATIC blobs: bound until the step; the statement is reset below. */
    sqlite3_clear_bindings(st);
    free(ids_blob[0]);
    free(ids_blob[1]);
    if (rc == SQLITE_DONE) {
        sql_release(st);
        /* The upsert's WHERE keeps an ok/truncated row: no error, no change. */
        if (sqlite3_changes(db) > 0) return PG_OK;
        describe_sample(what, sizeof what, run_id, r);
        return refuse_replace(s, db, run_id, r, what, err);
    }
    describe_sample(what, sizeof what, run_id, r);
    if (rc == SQLITE_OK) /* every bind worked, but not every parameter was bound */
        ps = pg_fail(err, PG_ERR_INTERNAL, "%s: %s: \"%s\" has %d parameters, %d bound",
                     sql_db_path(db), what, sqlite3_sql(st), sqlite3_bind_parameter_count(st),
                     b.next - 1);
    else
        ps = sql_fail(db, err, "%s", what);
    sql_release(st);
    return ps;
}

pg_status eval_store_missing(pg_store *s, int64_t run_id, const char *eval,
                             const eval_key *planned, size_t n_planned, size_t *missing,
                             size_t *n_missing, pg_err *err)
{
    sqlite3 *db = sql_handle_or_fail(s, "eval_store_missing", err);
    if (db == NULL) return err != NULL ? err->code : PG_ERR_INTERNAL;
    if (eval == NULL || n_missing == NULL || (n_planned > 0 && (planned == NULL || missing == NULL)))
        return pg_fail(err, PG_ERR_INTERNAL,
                       "eval_store_missing: eval, planned, missing or n_missing is NULL");
    *n_missing = 0;
    sqlite3_stmt *st = NULL;
    pg_status ps = sql_cached(s, SQL_SAMPLE_DONE, &st, err);
    for (size_t i = 0; ps == PG_OK && i < n_planned; i++) {
        const eval_key *key = &planned[i];
        if (key->mode == NULL || key->effort == NULL || key->problem_id == NULL) {
            ps = pg_fail(err, PG_ERR_INTERNAL,
                         "eval_store_missing: planned key %zu has a NULL mode, effort or "
                         "problem_id", i);
            break;
        }
        sql_binder b = sql_bind_start(st);
        bind_key(&b, run_id, eval, key->mode, key->effort, key->problem_id, key->sample);
        const int rc = b.rc == SQLITE_OK ? sqlite3_step(st) : b.rc;
        if (rc == SQLITE_DONE) {
            missing[(*n_missing)++] = i;
        } else if (rc != SQLITE_ROW) {
            ps = sql_fail(db, err,
                         "look up eval sample (run %" PRId64 ", eval '%s', mode '%s', effort "
                         "'%s', problem '%s', sample %d)", run_id, eval, key->mode, key->effort,
                         key->problem_id, key->sample);
        }
        sql_release(st);
    }
    return ps;
}

/* ---- reading back ------------------------------------------------------ */

/* One loaded row of ours: its problem's index, sample, outcome. */
typedef struct loaded_cell {
    size_t problem;
    int64_t sample;
    eval_cell cell;
} loaded_cell;

/* Growable arrays of the load: problem ids and our cells. */
typedef struct load_state {
    char **ids;
    size_t n_ids, cap_ids;
    loaded_cell *cells;
    size_t n_cells, cap_cells;
    int64_t max_sample;   /* over every mode; -1 before the first row */
} load_state;

/* Grows *arr (of elem bytes each, *cap of them) to hold one more; 0 on failure. */
static int grow(void **arr, size_t *cap, size_t used, size_t elem)
{
    if (used < *cap) return 1;
    const size_t ncap = *cap ? *cap * 2 : 64;
    if (ncap > SIZE_MAX / elem) return 0;
    void *p = realloc(*arr, ncap * elem);
    if (p == NULL) return 0;
    *arr = p;
    *cap = ncap;
    return 1;
}

/* Takes one result row of SQL_LOAD into ls. */
static pg_status load_row(sqlite3 *db, sqlite3_stmt *st, const char *what, load_state *ls,
                          pg_err *err)
{
    const char *pid = (const char *)sqlite3_column_text(st, 0);
    if (pid == NULL) return sql_fail(db, err, "%s: read problem_id", what);
    const int64_t sample = sqlite3_column_int64(st, 1);
    if (sample < 0)
        return pg_fail(err, PG_ERR_FORMAT, "%s: %s: problem '%s' has sample %" PRId64,
                       sql_db_path(db), what, pid, sample);
    if (sample > ls->max_sample) ls->max_sample = sample;

    /* Rows come in problem_id order: a new id is a new problem. */
    if (ls->n_ids == 0 || strcmp(ls->ids[ls->n_ids - 1], pid) != 0) {
        if (!grow((void **)&ls->ids, &ls->cap_ids, ls->n_ids, sizeof *ls->ids))
            return pg_fail(err, PG_ERR_NOMEM, "%s: %s: out of memory", sql_db_path(db), what);
        if ((ls->ids[ls->n_ids] = strdup(pid)) == NULL)
            return pg_fail(err, PG_ERR_NOMEM, "%s: %s: out of memory", sql_db_path(db), what);
        ls->n_ids++;
    }
    if (sqlite3_column_int(st, 4) == 0) return PG_OK;   /* another mode or effort */

    const char *text = (const char *)sqlite3_column_text(st, 2);
    const int status = status_from_text(text);
    if (status < 0)
        return pg_fail(err, PG_ERR_FORMAT, "%s: %s: problem '%s' sample %" PRId64
                       " has status '%s'", sql_db_path(db), what, pid, sample, str_or_null(text));
    int correct = 0;
    if (status != EVAL_SAMPLE_ERROR) {
        if (sqlite3_column_type(st, 3) == SQLITE_NULL)
            return pg_fail(err, PG_ERR_FORMAT,
                           "%s: %s: problem '%s' sample %" PRId64 " is '%s' but not graded "
                           "(correct is NULL)", sql_db_path(db), what, pid, sample, text);
        correct = sqlite3_column_int(st, 3);
    }
    if (!grow((void **)&ls->cells, &ls->cap_cells, ls->n_cells, sizeof *ls->cells))
        return pg_fail(err, PG_ERR_NOMEM, "%s: %s: out of memory", sql_db_path(db), what);
    ls->cells[ls->n_cells++] = (loaded_cell){
        .problem = ls->n_ids - 1, .sample = sample,
        .cell = {.status = (eval_sample_status)status, .correct = correct}};
    return PG_OK;
}

pg_status eval_store_load(pg_store *s, int64_t run_id, const char *eval, const char *mode,
                          const char *effort, size_t k, eval_table *out, pg_err *err)
{
    if (out != NULL) memset(out, 0, sizeof *out);
    sqlite3 *db = sql_handle_or_fail(s, "eval_store_load", err);
    if (db == NULL) return err != NULL ? err->code : PG_ERR_INTERNAL;
    if (eval == NULL || mode == NULL || effort == NULL || out == NULL)
        return pg_fail(err, PG_ERR_INTERNAL, "eval_store_load: eval, mode, effort or out is NULL");
    char what[SQL_WHAT_MAX];
    snprintf(what, sizeof what,
             "load eval samples (run %" PRId64 ", eval '%s', mode '%s', effort '%s')", run_id,
             eval, mode, effort);

    load_state ls = {.max_sample = -1};
    sqlite3_stmt *st = NULL;
    pg_status ps = sql_cached(s, SQL_LOAD, &st, err);
    if (ps == PG_OK) {
        sql_binder b = sql_bind_start(st);
        sql_bind_int64(&b, run_id);
        sql_bind_text(&b, eval);
        sql_bind_text(&b, mode);
        sql_bind_text(&b, effort);
        int rc = b.rc;
        while (rc == SQLITE_OK || rc == SQLITE_ROW) {
            rc = sqlite3_step(st);
            if (rc == SQLITE_ROW) ps = load_row(db, st, what, &ls, err);
            if (ps != PG_OK) break;
        }
        if (ps == PG_OK && rc != SQLITE_DONE) ps = sql_fail(db, err, "%s", what);
    }
    sql_release(st);

    if (ps == PG_OK) {
        const size_t stored_k = (size_t)(ls.max_sample + 1);
        if (k == 0) {
            k = stored_k;
        } else if (stored_k > k) {
            ps = pg_fail(err, PG_ERR_SHAPE,
                         "%s: %s: sample %" PRId64 " is stored but k is %zu", sql_db_path(db), what,
                         ls.max_sample, k);
        }
    }
    if (ps == PG_OK && ls.n_ids > 0 && k > 0) {
        if (ls.n_ids > SIZE_MAX / k / sizeof *out->cells
            || (out->cells = malloc(ls.n_ids * k * sizeof *out->cells)) == NULL) {
            ps = pg_fail(err, PG_ERR_NOMEM, "%s: %s: out of memory for %zu x %zu samples",
                         sql_db_path(db), what, ls.n_ids, k);
        } else {
            for (size_t i = 0; i < ls.n_ids * k; i++)
                out->cells[i] = (eval_cell){.status = EVAL_SAMPLE_MISSING, .correct = 0};
            for (size_t c = 0; c < ls.n_cells; c++)
                out->cells[ls.cells[c].problem * k + (size_t)ls.cells[c].sample] = ls.cells[c].cell;
        }
    }
    free(ls.cells);
    /* The ids go to out (also on failure: eval_table_free releases them). */
    out->problem_ids = ls.ids;
    out->n_problems = ls.n_ids;
    out->k = ps == PG_OK ? k : 0;
    if (ps != PG_OK) {
        free(out->cells);
        out->cells = NULL;
    }
    return ps;
}

/* ---- scores and pairs -------------------------------------------------- */

/* PG_ERR_NUMERIC when one of the n named values is infinite. */
static pg_status refuse_inf(sqlite3 *db, const char *what, const char *const *names,
                            const double *values, size_t n, pg_err *err)
{
    for (size_t i = 0; i < n; i++) {
        if (isinf(values[i]))
            return pg_fail(err, PG_ERR_NUMERIC, "%s: %s: %s is infinite", sql_db_path(db), what,
                           names[i]);
    }
    return PG_OK;
}

/* Appends v to buf at *len as the shortest of %.15g / %.17g that reads back
 * to v (JSON null for NaN). buf has room (EVAL_JSON_MEMBER_MAX per member). */
static void append_json_number(char *buf, size_t cap, size_t *len, double v)
{
    char num[EVAL_JSON_MEMBER_MAX];
    if (isnan(v)) {
        snprintf(num, sizeof num, "null");
    } else {
        snprintf(num, sizeof num, "%.*g", EVAL_SHORT_DIGITS, v);
        if (strtod(num, NULL) != v) snprintf(num, sizeof num, "%.*g", EVAL_ROUNDTRIP_DIGITS, v);
    }
    int w = snprintf(buf + *len, cap - *len, "%s", num);
    if (w > 0) *len += (size_t)w;
}

/* {"1": pass@1, ..., "K": pass@K} of sc in a malloc'd string; NULL when out of memory. */
static char *pass_at_json(const eval_score *sc)
{
    const size_t k = sc->pass_at != NULL ? sc->k : 0;
    if (k > (SIZE_MAX - 3) / EVAL_JSON_MEMBER_MAX) return NULL;
    const size_t cap = 3 + k * EVAL_JSON_MEMBER_MAX;
    char *buf = malloc(cap);
    if (buf == NULL) return NULL;
    size_t len = 0;
    buf[len++] = '{';
    for (size_t j = 0; j < k; j++) {
        int w = snprintf(buf + len, cap - len, "%s\"%zu\":", j > 0 ? "," : "", j + 1);
        if (w > 0) len += (size_t)w;
        append_json_number(buf, cap, &len, sc->pass_at[j]);
    }
    snprintf(buf + len, cap - len, "}");
    return buf;
}

pg_status eval_store_put_score(pg_store *s, int64_t run_id, const char *eval, const char *mode,
                               const char *effort, const eval_score *sc, pg_err *err)
{
    sqlite3 *db = sql_handle_or_fail(s, "eval_store_put_score", err);
    if (db == NULL) return err != NULL ? err->code : PG_ERR_INTERNAL;
    if (eval == NULL || mode == NULL || effort == NULL || sc == NULL)
        return pg_fail(err, PG_ERR_INTERNAL,
                       "eval_store_put_score: eval, mode, effort or score is NULL");
    char what[SQL_WHAT_MAX];
    snprintf(what, sizeof what,
             "store eval score (run %" PRId64 ", eval '%s', mode '%s', effort '%s')", run_id,
             eval, mode, effort);
    const char *const names[] = {"accuracy", "stderr", "ci_low", "ci_high"};
    const double values[] = {sc->accuracy, sc->se, sc->ci_low, sc->ci_high};
    pg_status ps = refuse_inf(db, what, names, values, sizeof values / sizeof values[0], err);
    for (size_t j = 0; ps == PG_OK && sc->pass_at != NULL && j < sc->k; j++) {
        if (isinf(sc->pass_at[j]))
            ps = pg_fail(err, PG_ERR_NUMERIC, "%s: %s: pass@%zu is infinite", sql_db_path(db), what,
                         j + 1);
    }
    if (ps != PG_OK) return ps;
    char *json = pass_at_json(sc);
    if (json == NULL)
        return pg_fail(err, PG_ERR_NOMEM, "%s: %s: out of memory for pass_at_json", sql_db_path(db),
                       what);

    sqlite3_stmt *st = NULL;
    ps = sql_cached(s, SQL_SCORE_UPSERT, &st, err);
    if (ps == PG_OK) {
        sql_binder b = sql_bind_start(st);
        sql_bind_int64(&b, run_id);
        sql_bind_text(&b, eval);
        sql_bind_text(&b, mode);
        sql_bind_text(&b, effort);
        bind_size(&b, sc->n_scored);
        bind_size(&b, sc->k);
        bind_double_or_null(&b, sc->accuracy);
        bind_double_or_null(&b, sc->se);
        bind_double_or_null(&b, sc->ci_low);
        bind_double_or_null(&b, sc->ci_high);
        bind_size(&b, sc->n_errors);
        bind_size(&b, sc->n_truncated);
        sql_bind_text(&b, sc->ci_method);
        sql_bind_text(&b, json);
        bind_size(&b, sc->n_empty);
        bind_size(&b, sc->n_missing);
        ps = sql_step_write(db, &b, what, err);
    }
    free(json);
    return ps;
}

pg_status eval_store_put_pair(pg_store *s, int64_t run_id, const char *eval, const char *effort,
                              const char *mode_a, const char *mode_b, const eval_pair *p,
                              pg_err *err)
{
    sqlite3 *db = sql_handle_or_fail(s, "eval_store_put_pair", err);
    if (db == NULL) return err != NULL ? err->code : PG_ERR_INTERNAL;
    if (eval == NULL || effort == NULL || mode_a == NULL || mode_b == NULL || p == NULL)
        return pg_fail(err, PG_ERR_INTERNAL,
                       "eval_store_put_pair: eval, effort, mode_a, mode_b or pair is NULL");
    char what[SQL_WHAT_MAX];
    snprintf(what, sizeof what,
             "store eval pair (run %" PRId64 ", eval '%s', effort '%s', '%s' vs '%s')", run_id,
             eval, effort, mode_a, mode_b);
    const char *const names[] = {"mean_diff", "stderr", "ci_low", "ci_high", "sign_p", "mde"};
    const double values[] = {p->mean_diff, p->se, p->ci_low, p->ci_high, p->sign_p, p->mde};
    pg_status ps = refuse_inf(db, what, names, values, sizeof values / sizeof values[0], err);
    if (ps == PG_OK && isnan(p->sign_p))
        ps = pg_fail(err, PG_ERR_NUMERIC, "%s: %s: sign_p is NaN", sql_db_path(db), what);
    if (ps != PG_OK) return ps;

    sqlite3_stmt *st = NULL;
    ps = sql_cached(s, SQL_PAIR_UPSERT, &st, err);
    if (ps != PG_OK) return ps;
    sql_binder b = sql_bind_start(st);
    sql_bind_int64(&b, run_id);
    sql_bind_text(&b, eval);
    sql_bind_text(&b, effort);
    sql_bind_text(&b, mode_a);
    sql_bind_text(&b, mode_b);
    bind_size(&b, p->n_problems);
    bind_double_or_null(&b, p->mean_diff);
    bind_double_or_null(&b, p->se);
    bind_double_or_null(&b, p->ci_low);
    bind_double_or_null(&b, p->ci_high);
    bind_size(&b, p->wins);
    bind_size(&b, p->losses);
    bind_size(&b, p->ties);
    bind_double_or_null(&b, p->sign_p);
    bind_double_or_null(&b, p->mde);
    return sql_step_write(db, &b, what, err);
}

/* ---- freeing rows ------------------------------------------------------- */

void eval_table_free(eval_table *t)
{
    if (t == NULL) return;
    if (t->problem_ids != NULL) {
        for (size_t i = 0; i < t->n_problems; i++) free(t->problem_ids[i]);
        free(t->problem_ids);
    }
    free(t->cells);
    memset(t, 0, sizeof *t);
}

void eval_score_free(eval_score *out)
{
    if (out == NULL) return;
    free(out->pass_at);
    free(out->pass_at_n);
    free(out->problem_mean);
    memset(out, 0, sizeof *out);
}

/* ---- reading scores and pairs back ------------------------------------- */

static const char SQL_SCORES_READ[] =
    "SELECT eval, mode, effort, ci_method, pass_at_json, n_problems, k, n_errors, n_truncated,"
    " n_empty, n_missing, accuracy, stderr, ci_low, ci_high FROM eval_scores"
    " WHERE run_id = ?1 AND (?2 IS NULL OR eval = ?2) ORDER BY eval, effort, mode";

static const char SQL_PAIRS_READ[] =
    "SELECT eval, effort, mode_a, mode_b, n_problems, wins, losses, ties, mean_diff, stderr,"
    " ci_low, ci_high, sign_p, mde FROM eval_pairs"
    " WHERE run_id = ?1 AND (?2 IS NULL OR eval = ?2) ORDER BY eval, effort, mode_a, mode_b";

static const char SQL_ERRORS_COUNT[] =
    "SELECT count(*) FROM eval_samples WHERE run_id = ?1 AND eval = ?2 AND status = 'error'";

static const char SQL_GROUPS_READ[] =
    "SELECT DISTINCT mode, effort FROM eval_samples WHERE run_id = ?1 AND eval = ?2"
    " ORDER BY effort, mode";

/* Runs sql (?1 run_id, ?2 eval or NULL), reading every row as type
 * (sql_read_all). */
static pg_status read_rows(pg_store *s, const char *fn, const char *sql, int64_t run_id,
                           const char *eval, const sql_row_type *type, void **rows, size_t *n,
                           pg_err *err)
{
    char what[SQL_WHAT_MAX];
    snprintf(what, sizeof what, "%s: reading run %" PRId64, fn, run_id);
    const sql_param params[] = {SQL_INT64(run_id), SQL_TEXT(eval)};
    return sql_read_all(s, fn, sql, SQL_PARAMS(params), type, rows, n, what, err);
}

/* SQL_SCORES_READ's columns. */
static const sql_field SCORE_FIELDS[] = {
    SQL_FIELD(TEXT, eval_score_stored, eval),         SQL_FIELD(TEXT, eval_score_stored, mode),
    SQL_FIELD(TEXT, eval_score_stored, effort),       SQL_FIELD(TEXT, eval_score_stored, ci_method),
    SQL_FIELD(TEXT, eval_score_stored, pass_at_json),
    SQL_FIELD(INT64, eval_score_stored, n_problems),
    SQL_FIELD(INT64, eval_score_stored, k),           SQL_FIELD(INT64, eval_score_stored, n_errors),
    SQL_FIELD(INT64, eval_score_stored, n_truncated), SQL_FIELD(INT64, eval_score_stored, n_empty),
    SQL_FIELD(INT64, eval_score_stored, n_missing),   SQL_FIELD(REAL, eval_score_stored, accuracy),
    SQL_FIELD(REAL, eval_score_stored, stderr_),      SQL_FIELD(REAL, eval_score_stored, ci_low),
    SQL_FIELD(REAL, eval_score_stored, ci_high),
};

/* Derives n_valid from the counts. */
static pg_status finish_score(sqlite3_stmt *st, void *row, const char *what, pg_err *err)
{
    (void)st, (void)what, (void)err;
    eval_score_stored *r = row;
    r->n_valid = (r->n_problems + r->n_empty) * r->k - r->n_errors - r->n_missing;
    return PG_OK;
}

static const sql_row_type SCORE_ROW = SQL_ROW_TYPE(eval_score_stored, SCORE_FIELDS, finish_score);

/* SQL_PAIRS_READ's columns. */
static const sql_field PAIR_FIELDS[] = {
    SQL_FIELD(TEXT, eval_pair_stored, eval),        SQL_FIELD(TEXT, eval_pair_stored, effort),
    SQL_FIELD(TEXT, eval_pair_stored, mode_a),      SQL_FIELD(TEXT, eval_pair_stored, mode_b),
    SQL_FIELD(INT64, eval_pair_stored, n_problems), SQL_FIELD(INT64, eval_pair_stored, wins),
    SQL_FIELD(INT64, eval_pair_stored, losses),     SQL_FIELD(INT64, eval_pair_stored, ties),
    SQL_FIELD(REAL, eval_pair_stored, mean_diff),   SQL_FIELD(REAL, eval_pair_stored, stderr_),
    SQL_FIELD(REAL, eval_pair_stored, ci_low),      SQL_FIELD(REAL, eval_pair_stored, ci_high),
    SQL_FIELD(REAL, eval_pair_stored, sign_p),      SQL_FIELD(REAL, eval_pair_stored, mde),
};
static const sql_row_type PAIR_ROW = SQL_ROW_TYPE(eval_pair_stored, PAIR_FIELDS, NULL);

pg_status eval_store_read_scores(pg_store *s, int64_t run_id, const char *eval,
                                 eval_score_stored **rows, size_t *n, pg_err *err)
{
    void *v = NULL;
    const pg_status ps = read_rows(s, "eval_store_read_scores", SQL_SCORES_READ, run_id, eval,
                                   &SCORE_ROW, &v, n, err);
    *rows = v;
    return ps;
}

void eval_store_scores_free(eval_score_stored *rows, size_t n)
{
    sql_rows_free(&SCORE_ROW, rows, n);
}

pg_status eval_store_read_pairs(pg_store *s, int64_t run_id, const char *eval,
                                eval_pair_stored **rows, size_t *n, pg_err *err)
{
    void *v = NULL;
    const pg_status ps = read_rows(s, "eval_store_read_pairs", SQL_PAIRS_READ, run_id, eval,
                                   &PAIR_ROW, &v, n, err);
    *rows = v;
    return ps;
}

void eval_store_pairs_free(eval_pair_stored *rows, size_t n)
{
    sql_rows_free(&PAIR_ROW, rows, n);
}

pg_status eval_store_count_errors(pg_store *s, int64_t run_id, const char *eval, int64_t *n,
                                  pg_err *err)
{
    sqlite3 *db = sql_handle_or_fail(s, "eval_store_count_errors", err);
    if (db == NULL) return PG_ERR_INTERNAL;
    if (eval == NULL || n == NULL)
        return pg_fail(err, PG_ERR_INTERNAL, "eval_store_count_errors: eval or n is NULL");
    sqlite3_stmt *st = NULL;
    pg_status ps = sql_cached(s, SQL_ERRORS_COUNT, &st, err);
    if (ps != PG_OK) return ps;
    sql_binder b = sql_bind_start(st);
    sql_bind_int64(&b, run_id);
    sql_bind_text(&b, eval);
    char what[SQL_WHAT_MAX];
    snprintf(what, sizeof what, "count the errors of run %" PRId64 ", eval '%s'", run_id, eval);
    ps = sql_read_int64(db, &b, what, n, err);
    sql_release(st);
    return ps;
}

/* SQL_GROUPS_READ's columns. */
static const sql_field GROUP_FIELDS[] = {SQL_FIELD(TEXT, eval_group_stored, mode),
                                         SQL_FIELD(TEXT, eval_group_stored, effort)};
static const sql_row_type GROUP_ROW = SQL_ROW_TYPE(eval_group_stored, GROUP_FIELDS, NULL);

pg_status eval_store_read_groups(pg_store *s, int64_t run_id, const char *eval,
                                 eval_group_stored **rows, size_t *n, pg_err *err)
{
    if (eval == NULL || rows == NULL || n == NULL)
        return pg_fail(err, PG_ERR_INTERNAL, "eval_store_read_groups: eval, rows or n is NULL");
    void *v = NULL;
    const pg_status ps = read_rows(s, "eval_store_read_groups", SQL_GROUPS_READ, run_id, eval,
                                   &GROUP_ROW, &v, n, err);
    *rows = v;
    return ps;
}

void eval_store_groups_free(eval_group_stored *rows, size_t n)
{
    sql_rows_free(&GROUP_ROW, rows, n);
}

static const char SQL_SERVER_COUNTS[] =
    "SELECT mode, server, sum(status IN ('ok', 'truncated')), sum(status = 'error')"
    " FROM eval_samples WHERE run_id = ?1 AND eval = ?2 AND server IS NOT NULL"
    " GROUP BY mode, server ORDER BY mode, server";

/* SQL_SERVER_COUNTS's columns. */
static const sql_field SERVER_COUNT_FIELDS[] = {
    SQL_FIELD(TEXT, eval_server_count, mode), SQL_FIELD(TEXT, eval_server_count, server),
    SQL_FIELD(INT64, eval_server_count, answered), SQL_FIELD(INT64, eval_server_count, errors)};
static const sql_row_type SERVER_COUNT_ROW =
    SQL_ROW_TYPE(eval_server_count, SERVER_COUNT_FIELDS, NULL);

pg_status eval_store_read_server_counts(pg_store *s, int64_t run_id, const char *eval,
                                        eval_server_count **rows, size_t *n, pg_err *err)
{
    if (eval == NULL || rows == NULL || n == NULL)
        return pg_fail(err, PG_ERR_INTERNAL,
                       "eval_store_read_server_counts: eval, rows or n is NULL");
    void *v = NULL;
    const pg_status ps = read_rows(s, "eval_store_read_server_counts", SQL_SERVER_COUNTS, run_id,
                                   eval, &SERVER_COUNT_ROW, &v, n, err);
    *rows = v;
    return ps;
}

void eval_store_server_counts_free(eval_server_count *rows, size_t n)
{
    sql_rows_free(&SERVER_COUNT_ROW, rows, n);
}

/* Pairs of modes per (eval, effort) first (m, p), then the samples of both
 * joined on the UNIQUE key, so each side is an index lookup. */
static const char SQL_MODE_AGREEMENT[] =
    "WITH m AS (SELECT DISTINCT eval, effort, mode FROM eval_samples"
    "           WHERE run_id = ?1 AND (?2 IS NULL OR eval = ?2)),"
    " p AS (SELECT x.eval, x.effort, x.mode AS ma, y.mode AS mb FROM m x JOIN m y"
    "       ON x.eval = y.eval AND x.effort = y.effort AND x.mode < y.mode)"
    " SELECT p.eval, p.effort, p.ma, p.mb, count(*),"
    "  sum(a.correct IS b.correct AND a.content IS b.content),"
    "  sum(a.content IS NULL AND b.content IS NULL), count(DISTINCT a.problem_id)"
    " FROM p JOIN eval_samples a ON a.run_id = ?1 AND a.eval = p.eval AND a.mode = p.ma"
    "  AND a.effort = p.effort"
    " JOIN eval_samples b ON b.run_id = ?1 AND b.eval = p.eval AND b.mode = p.mb"
    "  AND b.effort = p.effort AND b.problem_id = a.problem_id AND b.sample = a.sample"
    " WHERE a.status IN ('ok', 'truncated') AND b.status IN ('ok', 'truncated')"
    " GROUP BY p.eval, p.effort, p.ma, p.mb ORDER BY p.eval, p.effort, p.ma, p.mb";

/* SQL_MODE_AGREEMENT's columns. */
static const sql_field AGREEMENT_FIELDS[] = {
    SQL_FIELD(TEXT, eval_mode_agreement, eval), SQL_FIELD(TEXT, eval_mode_agreement, effort),
    SQL_FIELD(TEXT, eval_mode_agreement, mode_a), SQL_FIELD(TEXT, eval_mode_agreement, mode_b),
    SQL_FIELD(INT64, eval_mode_agreement, n_shared),
    SQL_FIELD(INT64, eval_mode_agreement, n_same),
    SQL_FIELD(INT64, eval_mode_agreement, n_no_text),
    SQL_FIELD(INT64, eval_mode_agreement, n_problems)};
static const sql_row_type AGREEMENT_ROW =
    SQL_ROW_TYPE(eval_mode_agreement, AGREEMENT_FIELDS, NULL);

pg_status eval_store_read_mode_agreement(pg_store *s, int64_t run_id, const char *eval,
                                         eval_mode_agreement **rows, size_t *n, pg_err *err)
{
    if (rows == NULL || n == NULL)
        return pg_fail(err, PG_ERR_INTERNAL, "eval_store_read_mode_agreement: rows or n is NULL");
    void *v = NULL;
    const pg_status ps = read_rows(s, "eval_store_read_mode_agreement", SQL_MODE_AGREEMENT,
                                   run_id, eval, &AGREEMENT_ROW, &v, n, err);
    *rows = v;
    return ps;
}

void eval_store_mode_agreement_free(eval_mode_agreement *rows, size_t n)
{
    sql_rows_free(&AGREEMENT_ROW, rows, n);
}

static const char SQL_READ_TOKEN_IDS[] =
    "SELECT eval, mode, effort, problem_id, sample, status, prompt_token_ids, token_ids, "
    "token_ids_error FROM eval_samples WHERE run_id = ?1 "
    "ORDER BY eval, mode, effort, problem_id, sample";

void eval_store_token_ids_free(eval_token_ids *rows, size_t n)
{
    if (rows == NULL) return;
    for (size_t i = 0; i < n; i++) {
        free(rows[i].eval);
        free(rows[i].mode);
        free(rows[i].effort);
        free(rows[i].problem_id);
        free(rows[i].status);
        free(rows[i].prompt_token_ids);
        free(rows[i].token_ids);
        free(rows[i].token_ids_error);
    }
    free(rows);
}

/* Column col of st (a blob of int32 LE, or NULL) into *ids / *n. */
static pg_status read_ids_column(sqlite3_stmt *st, int col, const eval_token_ids *r,
                                 int32_t **ids, size_t *n, pg_err *err)
{
    *ids = NULL;
    *n = 0;
    if (sqlite3_column_type(st, col) == SQLITE_NULL) return PG_OK;
    const unsigned char *blob = sqlite3_column_blob(st, col);
    const size_t bytes = (size_t)sqlite3_column_bytes(st, col);
    sqlite3 *db = sqlite3_db_handle(st);
    if (bytes % TOKEN_ID_BYTES != 0)
        return pg_fail(err, PG_ERR_FORMAT, "%s: eval_samples %s/%s/%s/%s#%d: %s of %zu bytes is "
                       "no int32 array (a damaged file)", sql_db_path(db), r->eval, r->mode,
                       r->effort, r->problem_id, r->sample, sqlite3_column_name(st, col), bytes);
    *ids = malloc(bytes + 1);
    if (*ids == NULL) return pg_fail(err, PG_ERR_NOMEM, "%s: out of memory", sql_db_path(db));
    *n = bytes / TOKEN_ID_BYTES;
    for (size_t i = 0; i < *n; i++) (*ids)[i] = le_get_i32(blob + i * TOKEN_ID_BYTES);
    return PG_OK;
}

pg_status eval_store_read_token_ids(pg_store *s, int64_t run_id, eval_token_ids **rows, size_t *n,
                                    pg_err *err)
{
    sqlite3 *db = sql_handle_or_fail(s, "eval_store_read_token_ids", err);
    if (db == NULL) return PG_ERR_INTERNAL;
    if (rows == NULL || n == NULL)
        return pg_fail(err, PG_ERR_INTERNAL, "eval_store_read_token_ids: rows or n is NULL");
    *rows = NULL;
    *n = 0;
    sqlite3_stmt *st = NULL;
    pg_status ps = sql_cached(s, SQL_READ_TOKEN_IDS, &st, err);
    if (ps != PG_OK) return ps;
    sqlite3_bind_int64(st, 1, run_id);
    size_t cap = 0;
    int rc = SQLITE_DONE;
    while (ps == PG_OK && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (*n == cap) {
            const size_t nc = cap ? 2 * cap : 64;
            eval_token_ids *g = realloc(*rows, nc * sizeof *g);
            if (g == NULL) {
                ps = pg_fail(err, PG_ERR_NOMEM, "%s: out of memory", sql_db_path(db));
                break;
            }
            *rows = g;
            cap = nc;
        }
        eval_token_ids *r = &(*rows)[(*n)++];
        *r = (eval_token_ids){0};
        int oom = 0;
        r->eval = sql_col_dup(st, 0, &oom);
        r->mode = sql_col_dup(st, 1, &oom);
        r->effort = sql_col_dup(st, 2, &oom);
        r->problem_id = sql_col_dup(st, 3, &oom);
        r->sample = sqlite3_column_int(st, 4);
        r->status = sql_col_dup(st, 5, &oom);
        r->token_ids_error = sql_col_dup(st, 8, &oom);
        if (oom) ps = pg_fail(err, PG_ERR_NOMEM, "%s: out of memory", sql_db_path(db));
        if (ps == PG_OK)
            ps = read_ids_column(st, 6, r, &r->prompt_token_ids, &r->n_prompt_token_ids, err);
        if (ps == PG_OK) ps = read_ids_column(st, 7, r, &r->token_ids, &r->n_token_ids, err);
    }
    if (ps == PG_OK && rc != SQLITE_DONE)
        ps = sql_fail(db, err, "read the token ids of run %lld", (long long)run_id);
    sql_release(st);
    return ps;
}
