/* divergence_store.c: the divergence tables' SQL (see divergence_store.h). */
#include "divergence_store.h"

#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "le_pack.h"
#include "sql_util.h"

/* Bytes of one stored token (int32, little-endian). */
#define DIV_TOKEN_BYTES 4
/* First room for sequence offsets in divergence_store_read_mode_positions
 * (doubled as needed; a run has a few to thousands of sequences). */
#define DIV_MODE_POSITIONS_FIRST_SEQS 16

const char *div_role_name(div_role r)
{
    switch (r) {
    case DIV_ROLE_MODE: return "mode";
    case DIV_ROLE_FLOOR: return "floor";
    }
    return "?";
}

/* The offsets of a position's fields in its DIV_POSITION_BYTES. */
enum { OFF_KLD = 0, OFF_TAIL = 8, OFF_LP = 16, OFF_LQ = 24, OFF_DLOGPROB = 32, OFF_DP = 40,
       OFF_TOP_P = 48, OFF_TOP_Q = 52 };

static void pack_position(unsigned char *p, const div_position *d)
{
    le_put_f64(p + OFF_KLD, d->kld_lb);
    le_put_f64(p + OFF_TAIL, d->tail_p);
    le_put_f64(p + OFF_LP, d->lp);
    le_put_f64(p + OFF_LQ, d->lq);
    le_put_f64(p + OFF_DLOGPROB, d->dlogprob);
    le_put_f64(p + OFF_DP, d->dp);
    le_put_i32(p + OFF_TOP_P, d->top_p);
    le_put_i32(p + OFF_TOP_Q, d->top_q);
}

static void unpack_position(const unsigned char *p, div_position *d)
{
    d->kld_lb = le_get_f64(p + OFF_KLD);
    d->tail_p = le_get_f64(p + OFF_TAIL);
    d->lp = le_get_f64(p + OFF_LP);
    d->lq = le_get_f64(p + OFF_LQ);
    d->dlogprob = le_get_f64(p + OFF_DLOGPROB);
    d->dp = le_get_f64(p + OFF_DP);
    d->top_p = le_get_i32(p + OFF_TOP_P);
    d->top_q = le_get_i32(p + OFF_TOP_Q);
    d->same_top = d->top_p == d->top_q;
}

/* ---- sequences -------------------------------------------------------- */

static const char SQL_PUT_SEQUENCE[] =
    "INSERT INTO div_sequences (run_id, seq_id, source, n_tokens, score_from, tokens) "
    "VALUES (?1, ?2, ?3, ?4, ?5, ?6) "
    "ON CONFLICT (run_id, seq_id) DO UPDATE SET source = excluded.source, "
    "n_tokens = excluded.n_tokens, score_from = excluded.score_from, tokens = excluded.tokens";

static const char SQL_READ_SEQUENCES[] =
    "SELECT seq_id, source, n_tokens, score_from, tokens FROM div_sequences WHERE run_id = ?1 "
    "ORDER BY seq_id";

pg_status divergence_store_put_sequence(pg_store *s, int64_t run_id, const char *seq_id,
                                        const char *source, const int32_t *tokens, size_t n,
                                        size_t score_from, pg_err *err)
{
    sqlite3 *db = sql_handle_or_fail(s, "divergence_store_put_sequence", err);
    if (db == NULL) return PG_ERR_INTERNAL;
    if (seq_id == NULL || *seq_id == '\0' || source == NULL || *source == '\0' || tokens == NULL)
        return pg_fail(err, PG_ERR_INTERNAL, "divergence_store_put_sequence: seq_id, source or "
                                             "tokens is NULL or empty");
    if (n < 2 || n > (size_t)INT32_MAX || score_from < 1 || score_from >= n)
        return pg_fail(err, PG_ERR_INTERNAL, "divergence_store_put_sequence: sequence '%s': %zu "
                       "tokens scored from %zu (need 2 or more, scored from 1 .. n-1)", seq_id, n,
                       score_from);
    unsigned char *blob = malloc(n * DIV_TOKEN_BYTES);
    if (blob == NULL)
        return pg_fail(err, PG_ERR_NOMEM, "%s: sequence '%s': out of memory", sql_db_path(db),
                       seq_id);
    for (size_t i = 0; i < n; i++) le_put_i32(blob + i * DIV_TOKEN_BYTES, tokens[i]);
    sqlite3_stmt *st = NULL;
    pg_status ps = sql_cached(s, SQL_PUT_SEQUENCE, &st, err);
    if (ps == PG_OK) {
        sql_binder b = sql_bind_start(st);
        sql_bind_int64(&b, run_id);
        sql_bind_text(&b, seq_id);
        sql_bind_text(&b, source);
        sql_bind_int64(&b, (int64_t)n);
        sql_bind_int64(&b, (int64_t)score_from);
        sql_bind_blob(&b, blob, n * DIV_TOKEN_BYTES);
        char what[SQL_WHAT_MAX];
        snprintf(what, sizeof what, "store sequence '%.200s' of run %" PRId64, seq_id, run_id);
        ps = sql_step_write(db, &b, what, err);
    }
    free(blob);
    return ps;
}

void divergence_store_sequences_free(div_sequence_stored *rows, size_t n)
{
    if (rows == NULL) return;
    for (size_t i = 0; i < n; i++) {
        free(rows[i].seq_id);
        free(rows[i].source);
        free(rows[i].tokens);
    }
    free(rows);
}

/* Reads the current row of SQL_READ_SEQUENCES into r. */
static pg_status read_sequence_row(sqlite3_stmt *st, div_sequence_stored *r, pg_err *err)
{
    sqlite3 *db = sqlite3_db_handle(st);
    int oom = 0;
    r->seq_id = sql_col_dup(st, 0, &oom);
    r->source = sql_col_dup(st, 1, &oom);
    if (oom) return pg_fail(err, PG_ERR_NOMEM, "%s: read sequences: out of memory",
                            sql_db_path(db));
    sqlite3_int64 n = sqlite3_column_int64(st, 2);
    r->score_from = (size_t)sqlite3_column_int64(st, 3);
    const unsigned char *blob = sqlite3_column_blob(st, 4);
    size_t bytes = (size_t)sqlite3_column_bytes(st, 4);
    if (n < 2 || bytes != (size_t)n * DIV_TOKEN_BYTES)
        return pg_fail(err, PG_ERR_FORMAT, "%s: div_sequences '%s': tokens blob has %zu bytes, "
                       "not %d x n_tokens %lld (a damaged file)", sql_db_path(db),
                       r->seq_id ? r->seq_id : "?", bytes, DIV_TOKEN_BYTES, (long long)n);
    r->n_tokens = (size_t)n;
    r->tokens = malloc(r->n_tokens * sizeof *r->tokens);
    if (r->tokens == NULL)
        return pg_fail(err, PG_ERR_NOMEM, "%s: read sequence '%s': out of memory",
                       sql_db_path(db), r->seq_id);
    for (size_t i = 0; i < r->n_tokens; i++) r->tokens[i] = le_get_i32(blob + i * DIV_TOKEN_BYTES);
    return PG_OK;
}

pg_status divergence_store_read_sequences(pg_store *s, int64_t run_id,
                                          div_sequence_stored **rows, size_t *n, pg_err *err)
{
    sqlite3 *db = sql_handle_or_fail(s, "divergence_store_read_sequences", err);
    if (db == NULL) return PG_ERR_INTERNAL;
    if (rows == NULL || n == NULL)
        return pg_fail(err, PG_ERR_INTERNAL, "divergence_store_read_sequences: rows or n is NULL");
    *rows = NULL;
    *n = 0;
    sqlite3_stmt *st = NULL;
    pg_status ps = sql_cached(s, SQL_READ_SEQUENCES, &st, err);
    if (ps != PG_OK) return ps;
    size_t cap = 0;
    int rc;
    sqlite3_bind_int64(st, 1, run_id);
    while (ps == PG_OK && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (*n == cap) {
            size_t nc = cap ? 2 * cap : 16;
            div_sequence_stored *g = realloc(*rows, nc * sizeof *g);
            if (g == NULL) {
                ps = pg_fail(err, PG_ERR_NOMEM, "%s: read sequences: out of memory",
                             sql_db_path(db));
                break;
            }
            *rows = g;
            cap = nc;
        }
        div_sequence_stored *r = &(*rows)[(*n)++];
        *r = (div_sequence_stored){0};
        ps = read_sequence_row(st, r, err);
    }
    if (ps == PG_OK && rc != SQLITE_DONE)
        ps = sql_fail(db, err, "read the sequences of run %" PRId64, run_id);
    sql_release(st);
    return ps;
}

/* ---- positions -------------------------------------------------------- */

static const char SQL_PUT_POSITIONS[] =
    "INSERT INTO div_positions (run_id, mode, role, seq_id, n_positions, packed) "
    "VALUES (?1, ?2, ?3, ?4, ?5, ?6) "
    "ON CONFLICT (run_id, mode, role, seq_id) DO UPDATE SET "
    "n_positions = excluded.n_positions, packed = excluded.packed";

static const char SQL_READ_POSITIONS[] =
    "SELECT n_positions, packed FROM div_positions "
    "WHERE run_id = ?1 AND mode = ?2 AND role = ?3 AND seq_id = ?4";

pg_status divergence_store_put_positions(pg_store *s, int64_t run_id, const char *mode,
                                         div_role role, const char *seq_id,
                                         const div_position *pos, size_t n, pg_err *err)
{
    sqlite3 *db = sql_handle_or_fail(s, "divergence_store_put_positions", err);
    if (db == NULL) return PG_ERR_INTERNAL;
    if (mode == NULL || *mode == '\0' || seq_id == NULL || *seq_id == '\0' || pos == NULL ||
        n == 0 || n > (size_t)INT32_MAX || (role != DIV_ROLE_MODE && role != DIV_ROLE_FLOOR))
        return pg_fail(err, PG_ERR_INTERNAL, "divergence_store_put_positions: mode, seq_id or "
                       "positions missing, or role %d unknown", (int)role);
    unsigned char *blob = malloc(n * DIV_POSITION_BYTES);
    if (blob == NULL)
        return pg_fail(err, PG_ERR_NOMEM, "%s: positions of '%s': out of memory",
                       sql_db_path(db), seq_id);
    for (size_t i = 0; i < n; i++) pack_position(blob + i * DIV_POSITION_BYTES, &pos[i]);
    sqlite3_stmt *st = NULL;
    pg_status ps = sql_cached(s, SQL_PUT_POSITIONS, &st, err);
    if (ps == PG_OK) {
        sql_binder b = sql_bind_start(st);
        sql_bind_int64(&b, run_id);
        sql_bind_text(&b, mode);
        sql_bind_text(&b, div_role_name(role));
        sql_bind_text(&b, seq_id);
        sql_bind_int64(&b, (int64_t)n);
        sql_bind_blob(&b, blob, n * DIV_POSITION_BYTES);
        char what[SQL_WHAT_MAX];
        snprintf(what, sizeof what, "store the %s positions of mode '%.80s' on sequence '%.160s' "
                 "of run %" PRId64, div_role_name(role), mode, seq_id, run_id);
        ps = sql_step_write(db, &b, what, err);
    }
    free(blob);
    return ps;
}

/* Decodes one div_positions row (count positions in blob[0..bytes)) into
 * *pos (malloc'd); PG_ERR_FORMAT naming (mode, role, seq_id) for a blob of
 * the wrong length; PG_ERR_NOMEM. */
static pg_status unpack_positions_row(sqlite3 *db, const char *mode, div_role role,
                                      const char *seq_id, sqlite3_int64 count,
                                      const unsigned char *blob, size_t bytes,
                                      div_position **pos, pg_err *err)
{
    if (count < 1 || bytes != (size_t)count * DIV_POSITION_BYTES)
        return pg_fail(err, PG_ERR_FORMAT, "%s: div_positions (mode '%s', %s, sequence '%s'): "
                       "packed blob has %zu bytes, not %d x n_positions %lld (a damaged file)",
                       sql_db_path(db), mode, div_role_name(role), seq_id, bytes,
                       DIV_POSITION_BYTES, (long long)count);
    if ((*pos = malloc((size_t)count * sizeof **pos)) == NULL)
        return pg_fail(err, PG_ERR_NOMEM, "%s: positions of '%s': out of memory",
                       sql_db_path(db), seq_id);
    for (size_t i = 0; i < (size_t)count; i++)
        unpack_position(blob + i * DIV_POSITION_BYTES, &(*pos)[i]);
    return PG_OK;
}

/* Binds ?1 run_id, ?2 mode, ?3 role of a div_positions read; the caller binds on. */
static sql_binder bind_mode_key(sqlite3_stmt *st, int64_t run_id, const char *mode, div_role role)
{
    sql_binder b = sql_bind_start(st);
    sql_bind_int64(&b, run_id);
    sql_bind_text(&b, mode);
    sql_bind_text(&b, div_role_name(role));
    return b;
}

pg_status divergence_store_read_positions(pg_store *s, int64_t run_id, const char *mode,
                                          div_role role, const char *seq_id, div_position **pos,
                                          size_t *n, pg_err *err)
{
    sqlite3 *db = sql_handle_or_fail(s, "divergence_store_read_positions", err);
    if (db == NULL) return PG_ERR_INTERNAL;
    if (mode == NULL || seq_id == NULL || pos == NULL || n == NULL)
        return pg_fail(err, PG_ERR_INTERNAL, "divergence_store_read_positions: an argument is "
                                             "NULL");
    *pos = NULL;
    *n = 0;
    sqlite3_stmt *st = NULL;
    pg_status ps = sql_cached(s, SQL_READ_POSITIONS, &st, err);
    if (ps != PG_OK) return ps;
    sql_binder b = bind_mode_key(st, run_id, mode, role);
    sql_bind_text(&b, seq_id);
    int rc = b.rc == SQLITE_OK ? sqlite3_step(st) : b.rc;
    if (rc == SQLITE_ROW) {
        const sqlite3_int64 count = sqlite3_column_int64(st, 0);
        ps = unpack_positions_row(db, mode, role, seq_id, count, sqlite3_column_blob(st, 1),
                                  (size_t)sqlite3_column_bytes(st, 1), pos, err);
        if (ps == PG_OK) *n = (size_t)count;
    } else if (rc != SQLITE_DONE) {
        ps = sql_fail(db, err, "read the %s positions of mode '%s' on sequence '%s' of run %"
                      PRId64, div_role_name(role), mode, seq_id, run_id);
    }
    sql_release(st);
    return ps;
}

static const char SQL_READ_MODE_POSITIONS[] =
    "SELECT seq_id, n_positions, packed FROM div_positions "
    "WHERE run_id = ?1 AND mode = ?2 AND role = ?3 ORDER BY seq_id";

void div_mode_positions_free(div_mode_positions *p)
{
    if (p == NULL) return;
    free(p->pos);
    free(p->seq_at);
    *p = (div_mode_positions){0};
}

/* Appends one row's count positions (decoded from blob) to p as its next
 * sequence; the growth doubles *cap_pos and *cap_seq. */
static pg_status append_sequence(sqlite3 *db, const char *mode, div_role role,
                                 const char *seq_id, sqlite3_int64 count,
                                 const unsigned char *blob, size_t bytes, div_mode_positions *p,
                                 size_t *cap_pos, size_t *cap_seq, pg_err *err)
{
    div_position *row = NULL;
    pg_status ps = unpack_positions_row(db, mode, role, seq_id, count, blob, bytes, &row, err);
    if (ps != PG_OK) return ps;
    const size_t need = p->n + (size_t)count;
    if (need > *cap_pos) {
        size_t c = *cap_pos > 0 ? *cap_pos : (size_t)count;
        while (c < need) c *= 2;
        div_position *g = realloc(p->pos, c * sizeof *g);
        if (g == NULL) {
            ps = pg_fail(err, PG_ERR_NOMEM, "%s: positions of mode '%s': out of memory",
                         sql_db_path(db), mode);
        } else {
            p->pos = g;
            *cap_pos = c;
        }
    }
    if (ps == PG_OK && p->n_seq + 2 > *cap_seq) {
        const size_t c = *cap_seq > 0 ? 2 * *cap_seq : DIV_MODE_POSITIONS_FIRST_SEQS;
        size_t *g = realloc(p->seq_at, c * sizeof *g);
        if (g == NULL) {
            ps = pg_fail(err, PG_ERR_NOMEM, "%s: positions of mode '%s': out of memory",
                         sql_db_path(db), mode);
        } else {
            p->seq_at = g;
            *cap_seq = c;
        }
    }
    if (ps == PG_OK) {
        memcpy(p->pos + p->n, row, (size_t)count * sizeof *row);
        p->seq_at[p->n_seq] = p->n;
        p->n = need;
        p->seq_at[++p->n_seq] = p->n;
    }
    free(row);
    return ps;
}

pg_status divergence_store_read_mode_positions(pg_store *s, int64_t run_id, const char *mode,
                                               div_role role, div_mode_positions *out,
                                               pg_err *err)
{
    sqlite3 *db = sql_handle_or_fail(s, "divergence_store_read_mode_positions", err);
    if (db == NULL) return PG_ERR_INTERNAL;
    if (mode == NULL || out == NULL)
        return pg_fail(err, PG_ERR_INTERNAL, "divergence_store_read_mode_positions: mode or "
                                             "out is NULL");
    *out = (div_mode_positions){0};
    sqlite3_stmt *st = NULL;
    pg_status ps = sql_cached(s, SQL_READ_MODE_POSITIONS, &st, err);
    if (ps != PG_OK) return ps;
    sql_binder b = bind_mode_key(st, run_id, mode, role);
    size_t cap_pos = 0, cap_seq = 0;
    int rc = b.rc == SQLITE_OK ? sqlite3_step(st) : b.rc;
    for (; ps == PG_OK && rc == SQLITE_ROW; rc = sqlite3_step(st)) {
        const char *seq_id = (const char *)sqlite3_column_text(st, 0);
        ps = append_sequence(db, mode, role, seq_id != NULL ? seq_id : "?",
                             sqlite3_column_int64(st, 1), sqlite3_column_blob(st, 2),
                             (size_t)sqlite3_column_bytes(st, 2), out, &cap_pos, &cap_seq, err);
    }
    if (ps == PG_OK && rc != SQLITE_DONE)
        ps = sql_fail(db, err, "read the %s positions of mode '%s' of run %" PRId64,
                      div_role_name(role), mode, run_id);
    sql_release(st);
    if (ps != PG_OK) div_mode_positions_free(out);
    return ps;
}

/* ---- summaries -------------------------------------------------------- */

static const char SQL_PUT_SUMMARY[] =
    "INSERT INTO div_summaries (run_id, mode, role, reference, top_k, n_sequences, n_positions, "
    "n_given, kld_mean, kld_mean_se, kld_ci_low, kld_ci_high, kld_p50, kld_p90, kld_p95, "
    "kld_p99, kld_p999, kld_max, same_top, same_top_se, mean_dp, rms_dp, mean_dlogprob, "
    "ppl_ratio, tail_mass_median) "
    "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, "
    "?19, ?20, ?21, ?22, ?23, ?24, ?25) "
    "ON CONFLICT (run_id, mode, role) DO UPDATE SET reference = excluded.reference, "
    "top_k = excluded.top_k, n_sequences = excluded.n_sequences, "
    "n_positions = excluded.n_positions, n_given = excluded.n_given, "
    "kld_mean = excluded.kld_mean, kld_mean_se = excluded.kld_mean_se, "
    "kld_ci_low = excluded.kld_ci_low, kld_ci_high = excluded.kld_ci_high, "
    "kld_p50 = excluded.kld_p50, kld_p90 = excluded.kld_p90, kld_p95 = excluded.kld_p95, "
    "kld_p99 = excluded.kld_p99, kld_p999 = excluded.kld_p999, kld_max = excluded.kld_max, "
    "same_top = excluded.same_top, same_top_se = excluded.same_top_se, "
    "mean_dp = excluded.mean_dp, rms_dp = excluded.rms_dp, "
    "mean_dlogprob = excluded.mean_dlogprob, ppl_ratio = excluded.ppl_ratio, "
    "tail_mass_median = excluded.tail_mass_median";

/* The statistics in column order from kld_mean on: div_summary's doubles. */
#define SUMMARY_STAT_FIELDS(X)                                                              \
    X(kld_mean) X(kld_mean_se) X(kld_ci_low) X(kld_ci_high) X(kld_percentile[0])            \
    X(kld_percentile[1]) X(kld_percentile[2]) X(kld_percentile[3]) X(kld_percentile[4])     \
    X(kld_percentile[5]) X(same_top) X(same_top_se) X(mean_dp) X(rms_dp) X(mean_dlogprob)   \
    X(ppl_ratio) X(tail_mass_median)

pg_status divergence_store_put_summary(pg_store *s, int64_t run_id, const char *mode,
                                       div_role role, const char *reference, int64_t top_k,
                                       const div_summary *sm, pg_err *err)
{
    sqlite3 *db = sql_handle_or_fail(s, "divergence_store_put_summary", err);
    if (db == NULL) return PG_ERR_INTERNAL;
    if (mode == NULL || reference == NULL || sm == NULL ||
        (role != DIV_ROLE_MODE && role != DIV_ROLE_FLOOR))
        return pg_fail(err, PG_ERR_INTERNAL, "divergence_store_put_summary: mode, reference or "
                       "summary is NULL, or role %d unknown", (int)role);
#define CHECK_FINITE(f)                                                                     \
    if (isinf(sm->f))                                                                       \
        return pg_fail(err, PG_ERR_NUMERIC, "%s: summary of mode '%s' (%s) in run %" PRId64 \
                       ": " #f " is infinite", sql_db_path(db), mode, div_role_name(role),  \
                       run_id);
    SUMMARY_STAT_FIELDS(CHECK_FINITE)
#undef CHECK_FINITE
    sqlite3_stmt *st = NULL;
    pg_status ps = sql_cached(s, SQL_PUT_SUMMARY, &st, err);
    if (ps != PG_OK) return ps;
    sql_binder b = sql_bind_start(st);
    sql_bind_int64(&b, run_id);
    sql_bind_text(&b, mode);
    sql_bind_text(&b, div_role_name(role));
    sql_bind_text(&b, reference);
    sql_bind_int64(&b, top_k);
    sql_bind_int64(&b, (int64_t)sm->n_sequences);
    sql_bind_int64(&b, (int64_t)sm->n_positions);
    sql_bind_int64(&b, (int64_t)sm->n_given);
#define BIND_STAT(f) sql_bind_double(&b, sm->f);
    SUMMARY_STAT_FIELDS(BIND_STAT)
#undef BIND_STAT
    char what[SQL_WHAT_MAX];
    snprintf(what, sizeof what, "store the %s summary of mode '%.200s' in run %" PRId64,
             div_role_name(role), mode, run_id);
    return sql_step_write(db, &b, what, err);
}

static const char SQL_READ_SUMMARIES[] =
    "SELECT mode, role, reference, top_k, kld_mean, kld_mean_se, kld_ci_low, kld_ci_high, "
    "kld_p50, kld_p90, kld_p95, kld_p99, kld_p999, kld_max, same_top, same_top_se, mean_dp, "
    "rms_dp, mean_dlogprob, ppl_ratio, tail_mass_median, n_sequences, n_positions, n_given "
    "FROM div_summaries WHERE run_id = ?1 ORDER BY role, mode";

/* The counts, size_t in div_summary, come after the fields: finish_summary reads them. */
#define SUMMARY_COUNT_COLUMN 21

#define SUMMARY_REAL_FIELD(f) SQL_FIELD(REAL, div_summary_stored, s.f),
static const sql_field SUMMARY_FIELDS[] = {
    SQL_FIELD(TEXT, div_summary_stored, mode),
    SQL_FIELD(TEXT, div_summary_stored, role),
    SQL_FIELD(TEXT, div_summary_stored, reference),
    SQL_FIELD(INT64, div_summary_stored, top_k),
    SUMMARY_STAT_FIELDS(SUMMARY_REAL_FIELD)
};
#undef SUMMARY_REAL_FIELD

/* The counts (SUMMARY_COUNT_COLUMN on). */
static pg_status finish_summary(sqlite3_stmt *st, void *row, const char *what, pg_err *err)
{
    (void)what;
    (void)err;
    div_summary_stored *r = row;
    r->s.n_sequences = (size_t)sqlite3_column_int64(st, SUMMARY_COUNT_COLUMN);
    r->s.n_positions = (size_t)sqlite3_column_int64(st, SUMMARY_COUNT_COLUMN + 1);
    r->s.n_given = (size_t)sqlite3_column_int64(st, SUMMARY_COUNT_COLUMN + 2);
    return PG_OK;
}

static const sql_row_type SUMMARY_ROW_TYPE =
    SQL_ROW_TYPE(div_summary_stored, SUMMARY_FIELDS, finish_summary);

pg_status divergence_store_read_summaries(pg_store *s, int64_t run_id, div_summary_stored **rows,
                                          size_t *n, pg_err *err)
{
    if (rows == NULL || n == NULL)
        return pg_fail(err, PG_ERR_INTERNAL, "divergence_store_read_summaries: rows or n is NULL");
    *rows = NULL;
    *n = 0;
    char what[SQL_WHAT_MAX];
    snprintf(what, sizeof what, "read the divergence summaries of run %" PRId64, run_id);
    const sql_param params[] = {SQL_INT64(run_id)};
    void *v = NULL;
    pg_status ps = sql_read_all(s, "divergence_store_read_summaries", SQL_READ_SUMMARIES,
                                SQL_PARAMS(params), &SUMMARY_ROW_TYPE, &v, n, what, err);
    *rows = v;
    return ps;
}

void divergence_store_summaries_free(div_summary_stored *rows, size_t n)
{
    sql_rows_free(&SUMMARY_ROW_TYPE, rows, n);
}

/* ---- scores: what a server reported ----------------------------------- */

/* Bytes of a position's head in div_scores.packed (given, n_top, given_lp)
 * and of each of its entries (id, logprob). */
#define SCORE_HEAD_BYTES 16
#define SCORE_ENTRY_BYTES 12

/* Room in sc for extra more entries; false when out of memory. */
static bool reserve_entries(div_scored *sc, size_t extra)
{
    if (sc->n_entries + extra <= sc->cap_entries) return true;
    size_t nc = sc->cap_entries ? 2 * sc->cap_entries : 1024;
    while (nc < sc->n_entries + extra) nc *= 2;
    div_entry *e = realloc(sc->entries, nc * sizeof *e);
    if (e == NULL) return false;
    sc->entries = e;
    sc->cap_entries = nc;
    return true;
}

/* Room in sc for one more position; false when out of memory. */
static bool reserve_position(div_scored *sc)
{
    if (sc->n + 1 < sc->cap) return true;
    size_t nc = sc->cap ? 2 * sc->cap : 64;
    int32_t *g = realloc(sc->given, nc * sizeof *g);
    if (g) sc->given = g;
    double *l = realloc(sc->given_lp, nc * sizeof *l);
    if (l) sc->given_lp = l;
    size_t *a = realloc(sc->top_at, (nc + 1) * sizeof *a);
    if (a) sc->top_at = a;
    if (!g || !l || !a) return false;
    if (sc->cap == 0) sc->top_at[0] = 0;
    sc->cap = nc;
    return true;
}

pg_status div_scored_append(div_scored *sc, int32_t given, double given_lp, const div_entry *top,
                            size_t n_top, pg_err *err)
{
    if (sc == NULL || (top == NULL && n_top > 0))
        return pg_fail(err, PG_ERR_INTERNAL, "div_scored_append: sc or top is NULL");
    if (!reserve_position(sc) || !reserve_entries(sc, n_top))
        return pg_fail(err, PG_ERR_NOMEM, "out of memory for scores");
    if (n_top) memcpy(sc->entries + sc->n_entries, top, n_top * sizeof *top);
    sc->n_entries += n_top;
    sc->given[sc->n] = given;
    sc->given_lp[sc->n] = given_lp;
    sc->top_at[++sc->n] = sc->n_entries;
    return PG_OK;
}

void div_scored_free(div_scored *sc)
{
    if (sc == NULL) return;
    free(sc->given);
    free(sc->given_lp);
    free(sc->top_at);
    free(sc->entries);
    *sc = (div_scored){0};
}

static const char SQL_PUT_SCORES[] =
    "INSERT INTO div_scores (run_id, mode, pass, seq_id, server, top_k, n_positions, packed) "
    "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8) "
    "ON CONFLICT (run_id, mode, pass, seq_id) DO UPDATE SET server = excluded.server, "
    "top_k = excluded.top_k, n_positions = excluded.n_positions, packed = excluded.packed";

static const char SQL_READ_SCORES[] =
    "SELECT n_positions, packed, server FROM div_scores "
    "WHERE run_id = ?1 AND mode = ?2 AND pass = ?3 AND seq_id = ?4";

static const char SQL_HAS_SCORES[] =
    "SELECT count(*) FROM div_scores WHERE run_id = ?1 AND mode = ?2 AND pass = ?3 "
    "AND seq_id = ?4";

pg_status divergence_store_put_scores(pg_store *s, int64_t run_id, const char *mode, int pass,
                                      const char *seq_id, const char *server, int64_t top_k,
                                      const div_scored *sc, pg_err *err)
{
    sqlite3 *db = sql_handle_or_fail(s, "divergence_store_put_scores", err);
    if (db == NULL) return PG_ERR_INTERNAL;
    if (mode == NULL || seq_id == NULL || server == NULL || sc == NULL || sc->n == 0 ||
        (pass != DIV_PASS_MAIN && pass != DIV_PASS_FLOOR) || top_k < 1)
        return pg_fail(err, PG_ERR_INTERNAL, "divergence_store_put_scores: an argument is NULL, "
                       "no position, pass %d or top_k %" PRId64 " out of range", pass, top_k);
    const size_t bytes = sc->n * SCORE_HEAD_BYTES + sc->n_entries * SCORE_ENTRY_BYTES;
    unsigned char *blob = malloc(bytes), *p = blob;
    if (blob == NULL)
        return pg_fail(err, PG_ERR_NOMEM, "%s: scores of '%s': out of memory", sql_db_path(db),
                       seq_id);
    for (size_t i = 0; i < sc->n; i++) {
        const size_t n_top = sc->top_at[i + 1] - sc->top_at[i];
        le_put_i32(p, sc->given[i]);
        le_put_u32(p + 4, (uint32_t)n_top);
        le_put_f64(p + 8, sc->given_lp[i]);
        p += SCORE_HEAD_BYTES;
        for (size_t k = sc->top_at[i]; k < sc->top_at[i + 1]; k++) {
            le_put_i32(p, sc->entries[k].id);
            le_put_f64(p + 4, sc->entries[k].logprob);
            p += SCORE_ENTRY_BYTES;
        }
    }
    sqlite3_stmt *st = NULL;
    pg_status ps = sql_cached(s, SQL_PUT_SCORES, &st, err);
    if (ps == PG_OK) {
        sql_binder b = sql_bind_start(st);
        sql_bind_int64(&b, run_id);
        sql_bind_text(&b, mode);
        sql_bind_int64(&b, pass);
        sql_bind_text(&b, seq_id);
        sql_bind_text(&b, server);
        sql_bind_int64(&b, top_k);
        sql_bind_int64(&b, (int64_t)sc->n);
        sql_bind_blob(&b, blob, bytes);
        char what[SQL_WHAT_MAX];
        snprintf(what, sizeof what, "store the scores of mode '%.80s' (pass %d) on sequence "
                 "'%.160s' of run %" PRId64, mode, pass, seq_id, run_id);
        ps = sql_step_write(db, &b, what, err);
    }
    free(blob);
    return ps;
}

/* Walks blob[0..bytes) of count positions into sc; PG_ERR_FORMAT naming
 * the row when it does not end exactly at count positions. */
static pg_status unpack_scores(sqlite3 *db, const unsigned char *blob, size_t bytes, int64_t count,
                               const char *mode, int pass, const char *seq_id, div_scored *sc,
                               pg_err *err)
{
    size_t at = 0;
    pg_status ps = PG_OK;
    for (int64_t i = 0; i < count && ps == PG_OK; i++) {
        if (bytes - at < SCORE_HEAD_BYTES) break;
        const int32_t given = le_get_i32(blob + at);
        const size_t n_top = le_get_u32(blob + at + 4);
        const double lp = le_get_f64(blob + at + 8);
        at += SCORE_HEAD_BYTES;
        if (n_top > (bytes - at) / SCORE_ENTRY_BYTES) {
            at = bytes + 1;  /* past the end: damaged */
            break;
        }
        if (!reserve_position(sc) || !reserve_entries(sc, n_top)) {
            ps = pg_fail(err, PG_ERR_NOMEM, "out of memory for scores");
            break;
        }
        for (size_t k = 0; k < n_top; k++, at += SCORE_ENTRY_BYTES)
            sc->entries[sc->n_entries++] = (div_entry){le_get_i32(blob + at), le_get_f64(blob + at + 4)};
        sc->given[sc->n] = given;
        sc->given_lp[sc->n] = lp;
        sc->top_at[++sc->n] = sc->n_entries;
    }
    if (ps == PG_OK && (count < 1 || sc->n != (size_t)count || at != bytes))
        ps = pg_fail(err, PG_ERR_FORMAT, "%s: div_scores (mode '%s', pass %d, sequence '%s'): "
                     "packed blob of %zu bytes does not hold its %lld positions exactly (a "
                     "damaged file)", sql_db_path(db), mode, pass, seq_id, bytes,
                     (long long)count);
    return ps;
}

/* The cached statement sql with (run_id, mode, pass, seq_id) bound to ?1 .. ?4. */
static pg_status scores_key_bound(pg_store *s, const char *sql, int64_t run_id, const char *mode,
                                  int pass, const char *seq_id, sql_binder *b, pg_err *err)
{
    sqlite3_stmt *st = NULL;
    pg_status ps = sql_cached(s, sql, &st, err);
    if (ps != PG_OK) return ps;
    *b = sql_bind_start(st);
    sql_bind_int64(b, run_id);
    sql_bind_text(b, mode);
    sql_bind_int64(b, pass);
    sql_bind_text(b, seq_id);
    return PG_OK;
}

pg_status divergence_store_read_scores(pg_store *s, int64_t run_id, const char *mode, int pass,
                                       const char *seq_id, div_scored *sc, char *server,
                                       size_t size, int *found, pg_err *err)
{
    sqlite3 *db = sql_handle_or_fail(s, "divergence_store_read_scores", err);
    if (db == NULL) return PG_ERR_INTERNAL;
    if (mode == NULL || seq_id == NULL || sc == NULL || found == NULL)
        return pg_fail(err, PG_ERR_INTERNAL, "divergence_store_read_scores: an argument is NULL");
    div_scored_free(sc);
    *found = 0;
    if (server != NULL && size > 0) server[0] = '\0';
    sql_binder b;
    pg_status ps = scores_key_bound(s, SQL_READ_SCORES, run_id, mode, pass, seq_id, &b, err);
    if (ps != PG_OK) return ps;
    sqlite3_stmt *st = b.st;
    int rc = b.rc == SQLITE_OK ? sqlite3_step(st) : b.rc;
    if (rc == SQLITE_ROW) {
        *found = 1;
        const int64_t count = sqlite3_column_int64(st, 0);
        const unsigned char *blob = sqlite3_column_blob(st, 1);
        const size_t bytes = (size_t)sqlite3_column_bytes(st, 1);
        const unsigned char *srv = sqlite3_column_text(st, 2);
        if (server != NULL && size > 0) snprintf(server, size, "%s", srv ? (const char *)srv : "");
        ps = unpack_scores(db, blob, bytes, count, mode, pass, seq_id, sc, err);
    } else if (rc != SQLITE_DONE) {
        ps = sql_fail(db, err, "read the scores of mode '%s' (pass %d) on sequence '%s' of run %"
                      PRId64, mode, pass, seq_id, run_id);
    }
    sql_release(st);
    return ps;
}

pg_status divergence_store_has_scores(pg_store *s, int64_t run_id, const char *mode, int pass,
                                      const char *seq_id, int *has, pg_err *err)
{
    sqlite3 *db = sql_handle_or_fail(s, "divergence_store_has_scores", err);
    if (db == NULL) return PG_ERR_INTERNAL;
    if (mode == NULL || seq_id == NULL || has == NULL)
        return pg_fail(err, PG_ERR_INTERNAL, "divergence_store_has_scores: an argument is NULL");
    sql_binder b;
    pg_status ps = scores_key_bound(s, SQL_HAS_SCORES, run_id, mode, pass, seq_id, &b, err);
    if (ps != PG_OK) return ps;
    sqlite3_stmt *st = b.st;
    int64_t n = 0;
    char what[SQL_WHAT_MAX];
    snprintf(what, sizeof what, "count the scores of mode '%.80s' on sequence '%.160s'", mode,
             seq_id);
    ps = sql_read_int64(db, &b, what, &n, err);
    sql_release(st);
    *has = n > 0;
    return ps;
}
