/*
 * eval_store.h: end-task eval rows in precgate's store (schema version 4):
 * eval_samples (one row per sample, stored as each completes), eval_scores
 * and eval_pairs (what evals/score.h derives from them), and the C rows
 * they are read into and written from.
 *
 * Every function works on an open pg_store (db/store.h) through
 * store_handle() (db/sql_util.h), with bound parameters only; each statement is prepared
 * once per store (sql_cached) and reset after every use. Failures are
 * PG_ERR_DB naming the database file, what failed and SQLite's message,
 * except where a contract says otherwise; a NULL store or a NULL argument
 * that must not be NULL is PG_ERR_INTERNAL.
 *
 * Transactions: a write made while no transaction is open is its own
 * transaction, committed before the call returns (a crash loses at most
 * the sample being written); inside store_begin .. store_commit it commits
 * or rolls back with the caller's transaction.
 *
 * NULLs: an integer field < 0 (attempts, tokens) and a NaN latency are
 * stored as NULL; a NaN statistic is stored as NULL where evals/score.h
 * calls it undefined; +-inf is refused with PG_ERR_NUMERIC.
 */
#ifndef PG_EVAL_STORE_H
#define PG_EVAL_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "store.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- the rows scores are made from and stored as ---------------------- */
/* evals/score.h computes the scores and pairs; their formulas are there. */

typedef enum eval_sample_status {
    EVAL_SAMPLE_OK = 0,     /* answered; correct says whether right */
    EVAL_SAMPLE_TRUNCATED,  /* cut at the token limit; graded (counted) */
    EVAL_SAMPLE_ERROR,      /* failed: excluded from every denominator */
    EVAL_SAMPLE_MISSING     /* not stored (yet): excluded like an error */
} eval_sample_status;

/* One sample's outcome; correct (0 or 1) is read only for ok/truncated. */
typedef struct eval_cell {
    eval_sample_status status;
    int correct;
} eval_cell;

/* n_problems x k samples of one (mode, effort): cells[i*k + j] is problem
 * i's sample j. problem_ids (n_problems strings) may be NULL; when both
 * tables of a pair have them they must match. eval_table_free releases a
 * table whose arrays were malloc'd (as eval_store_load builds them). */
typedef struct eval_table {
    size_t n_problems;
    size_t k;
    eval_cell *cells;
    char **problem_ids;
} eval_table;

/* Frees t's cells, ids and id array, and zeroes t; NULL is a no-op. */
void eval_table_free(eval_table *t);

/* The statistics of one (mode, effort). Arrays are owned: eval_score_free. */
typedef struct eval_score {
    size_t n_problems;     /* rows of the table */
    size_t n_scored;       /* m: problems with n_i > 0 (every mean's denominator) */
    size_t n_empty;        /* problems with n_i = 0, left out */
    size_t k;              /* K: samples per problem in the table */
    size_t n_valid;        /* ok + truncated samples */
    size_t n_errors, n_truncated, n_missing;
    double accuracy;       /* avg@K */
    double se;             /* clustered by problem */
    double ci_low, ci_high;        /* percentile bootstrap (stored) */
    double wilson_low, wilson_high; /* K = 1 only, else NaN */
    double *pass_at;       /* k entries: pass_at[j] = pass@(j+1) */
    size_t *pass_at_n;     /* k entries: problems with n_i >= j+1 that entered it */
    double *problem_mean;  /* n_problems entries: s_i, NaN where n_i = 0 */
    const char *ci_method; /* how ci_low/ci_high were made (eval_scores.ci_method; static) */
} eval_score;


/* Frees out's arrays and zeroes it; NULL is a no-op. */
void eval_score_free(eval_score *out);

/* A vs B on the same problems. */
typedef struct eval_pair {
    size_t n_problems;     /* n: problems with n_i > 0 in both tables */
    size_t n_dropped;      /* problems left out (n_i = 0 in A or B) */
    double mean_diff;      /* mean of d_i = s_A,i - s_B,i (A minus B) */
    double sd;             /* sample SD of d_i (divisor n-1) */
    double se;             /* sd / sqrt(n) */
    double ci_low, ci_high;        /* paired percentile bootstrap */
    size_t wins, losses, ties;     /* d_i > 0, d_i < 0, d_i = 0 (exact) */
    double sign_p;         /* exact two-sided sign test p on wins vs losses */
    double min_sign_p;     /* smallest sign_p n problems can give: 2 * 0.5^n (1 for n = 0) */
    size_t pooled_correct, pooled_valid; /* c and N of both modes over the n problems */
    double design_mde;     /* from n, the n_i and p~(1-p~) (the top of this file) */
    double mde;            /* max(design_mde, (z_0.975 + z_0.80) * sd / sqrt(n)) */
} eval_pair;


/* One eval_samples row. Strings are bound for the call only (the caller
 * keeps them); NULL optional strings are stored as NULL. */
typedef struct eval_sample_row {
    const char *eval, *mode, *effort, *problem_id;   /* required */
    int sample;                    /* 0 .. K-1 */
    eval_sample_status status;     /* OK, TRUNCATED or ERROR (MISSING is refused) */
    int attempts;                  /* < 0: NULL */
    double latency_ms;             /* NaN: NULL */
    const char *finish_reason;
    int64_t prompt_tokens;         /* < 0: NULL */
    int64_t completion_tokens;     /* < 0: NULL */
    const char *content;
    int has_extracted;             /* 0: extracted is NULL */
    int64_t extracted;
    int correct;                   /* 0 or 1 for OK/TRUNCATED; ignored (NULL) for ERROR */
    const char *error;
    const char *server;            /* base URL of the server that answered; NULL: replay */
    /* The token ids the server reported (vLLM "return_token_ids", schema
     * version 16): the prompt's and the completion's, NULL when not
     * reported; token_ids_error says why they are unusable (their counts
     * disagree with usage), NULL when they are usable or absent. */
    const int32_t *prompt_token_ids;
    size_t n_prompt_token_ids;
    const int32_t *token_ids;
    size_t n_token_ids;
    const char *token_ids_error;
} eval_sample_row;

/* Stores one sample of run_id. A new key is inserted; a key already stored
 * with status 'error' is replaced by row (a retried sample); a key already
 * stored as 'ok' or 'truncated' is left as it is and PG_ERR_DB says so.
 * PG_ERR_INTERNAL for a missing key string, sample < 0, status MISSING or
 * outside the enum, or correct not 0/1 on an OK/TRUNCATED row;
 * PG_ERR_NUMERIC for an infinite latency; PG_ERR_DB for an unknown run. */
pg_status eval_store_put_sample(pg_store *s, int64_t run_id, const eval_sample_row *row,
                                pg_err *err);

/* One stored sample's token ids (eval_store_read_token_ids); strings and
 * arrays malloc'd (eval_store_token_ids_free). */
typedef struct eval_token_ids {
    char *eval, *mode, *effort, *problem_id;
    int sample;
    char *status;                /* "ok", "truncated" or "error" */
    int32_t *prompt_token_ids;   /* NULL: not recorded */
    size_t n_prompt_token_ids;
    int32_t *token_ids;          /* NULL: not recorded */
    size_t n_token_ids;
    char *token_ids_error;       /* NULL: usable (or absent) */
} eval_token_ids;

/* Every sample of run_id with its token ids, ordered by eval, mode,
 * effort, problem id, sample, into *rows (*n; NULL when none; free with
 * eval_store_token_ids_free, also after a failure). A database older than
 * schema version 16 has none recorded. PG_ERR_FORMAT for a blob whose
 * length is no multiple of 4 (a damaged file); PG_ERR_NOMEM. */
pg_status eval_store_read_token_ids(pg_store *s, int64_t run_id, eval_token_ids **rows, size_t *n,
                                    pg_err *err);

/* Frees what eval_store_read_token_ids made; NULL is a no-op. */
void eval_store_token_ids_free(eval_token_ids *rows, size_t n);

/* One planned sample. */
typedef struct eval_key {
    const char *mode, *effort, *problem_id;
    int sample;
} eval_key;

/* For --resume: writes to missing[0 .. *n_missing) the indices (ascending)
 * of the planned keys of (run_id, eval) not stored with status 'ok' or
 * 'truncated' (absent, or stored as 'error': to be run again). missing must
 * hold n_planned entries. Reads only; PG_ERR_INTERNAL for a NULL key string. */
pg_status eval_store_missing(pg_store *s, int64_t run_id, const char *eval,
                             const eval_key *planned, size_t n_planned, size_t *missing,
                             size_t *n_missing, pg_err *err);

/* Reads the samples of (run_id, eval, mode, effort) into *out (free with
 * eval_table_free, also after a failure). Rows are the problems stored for
 * (run_id, eval) in any mode and effort, in problem_id order (SQLite's
 * BINARY collation), so every table of one run and eval lines up for
 * eval_pair_compute; problem_ids are filled. k is the number of samples per
 * problem, 0 to take 1 + the largest sample stored for (run_id, eval).
 * Cells with no row are EVAL_SAMPLE_MISSING. Read in one statement (one
 * snapshot). PG_ERR_SHAPE when a stored sample is >= a given k;
 * PG_ERR_FORMAT for a stored row the schema cannot hold from precgate (a
 * status outside ok/truncated/error, an ok/truncated row with correct NULL);
 * PG_ERR_NOMEM when an allocation fails. */
pg_status eval_store_load(pg_store *s, int64_t run_id, const char *eval, const char *mode,
                          const char *effort, size_t k, eval_table *out, pg_err *err);

/* Stores sc as the eval_scores row of (run_id, eval, mode, effort),
 * replacing one stored before (re-scoring is idempotent). n_problems is
 * sc->n_scored; ci_method is EVAL_CI_METHOD; pass_at_json holds pass@1 ..
 * pass@K with the shortest decimal that reads back to the same double
 * (null where NaN). PG_ERR_NOMEM when the JSON cannot be built. */
pg_status eval_store_put_score(pg_store *s, int64_t run_id, const char *eval, const char *mode,
                               const char *effort, const eval_score *sc, pg_err *err);

/* Stores p as the eval_pairs row of (run_id, eval, effort, mode_a, mode_b),
 * replacing one stored before. PG_ERR_DB (CHECK) when mode_a equals mode_b;
 * PG_ERR_NUMERIC when sign_p is NaN. */
pg_status eval_store_put_pair(pg_store *s, int64_t run_id, const char *eval, const char *effort,
                              const char *mode_a, const char *mode_b, const eval_pair *p,
                              pg_err *err);

/* One stored eval_scores row as read back. Strings are malloc'd (freed by
 * eval_store_scores_free); a NULL statistic reads as NaN. */
typedef struct eval_score_stored {
    char *eval, *mode, *effort, *ci_method, *pass_at_json;
    int64_t n_problems, k, n_errors, n_truncated, n_empty, n_missing;
    int64_t n_valid;   /* graded (ok + truncated) samples: every cell of the
                        * (n_problems + n_empty) x k table is valid, an error or missing */
    double accuracy, stderr_, ci_low, ci_high;
} eval_score_stored;

/* One stored eval_pairs row as read back; same conventions. */
typedef struct eval_pair_stored {
    char *eval, *effort, *mode_a, *mode_b;
    int64_t n_problems, wins, losses, ties;
    double mean_diff, stderr_, ci_low, ci_high, sign_p, mde;
} eval_pair_stored;

/* Reads the eval_scores rows of (run_id, eval) ordered by effort, mode into
 * *rows (malloc'd, *n of them; free with eval_store_scores_free, also after
 * a failure). eval NULL: every eval of the run. PG_ERR_NOMEM when a copy fails. */
pg_status eval_store_read_scores(pg_store *s, int64_t run_id, const char *eval,
                                 eval_score_stored **rows, size_t *n, pg_err *err);

/* Frees what eval_store_read_scores made; NULL is a no-op. */
void eval_store_scores_free(eval_score_stored *rows, size_t n);

/* Reads the eval_pairs rows of (run_id, eval) ordered by effort, mode_a, mode_b,
 * as eval_store_read_scores. */
pg_status eval_store_read_pairs(pg_store *s, int64_t run_id, const char *eval,
                                eval_pair_stored **rows, size_t *n, pg_err *err);

/* Frees what eval_store_read_pairs made; NULL is a no-op. */
void eval_store_pairs_free(eval_pair_stored *rows, size_t n);

/* The number of samples of (run_id, eval) stored with status 'error' into
 * *n. */
pg_status eval_store_count_errors(pg_store *s, int64_t run_id, const char *eval, int64_t *n,
                                  pg_err *err);

/* One (mode, effort) a run stored samples of. Strings malloc'd
 * (eval_store_groups_free). */
typedef struct eval_group_stored {
    char *mode, *effort;
} eval_group_stored;

/* The distinct (mode, effort) of (run_id, eval)'s eval_samples, ordered by
 * effort, then mode (SQLite's BINARY collation), into *rows (*n of them,
 * NULL when none; free with eval_store_groups_free, also after a failure). */
pg_status eval_store_read_groups(pg_store *s, int64_t run_id, const char *eval,
                                 eval_group_stored **rows, size_t *n, pg_err *err);

/* Frees what eval_store_read_groups made; NULL is a no-op. */
void eval_store_groups_free(eval_group_stored *rows, size_t n);

/* How many samples of one mode one server answered (issue #18). */
typedef struct eval_server_count {
    char *mode, *server;   /* server: the base URL stored in eval_samples.server */
    int64_t answered;      /* its samples stored 'ok' or 'truncated' */
    int64_t errors;        /* its samples stored 'error' (the last attempt was its) */
} eval_server_count;

/* For every (mode, server) of (run_id, eval)'s live samples (server not
 * NULL), ordered by mode then server, the counts into *rows (*n of them,
 * NULL when none, as for a replay; free with eval_store_server_counts_free,
 * also after a failure). */
pg_status eval_store_read_server_counts(pg_store *s, int64_t run_id, const char *eval,
                                        eval_server_count **rows, size_t *n, pg_err *err);

/* Frees what eval_store_read_server_counts made; NULL is a no-op. */
void eval_store_server_counts_free(eval_server_count *rows, size_t n);

/* How alike two modes' samples of one (eval, effort) are (issue #27: modes
 * that answer identically are almost surely one server). */
typedef struct eval_mode_agreement {
    char *eval, *effort, *mode_a, *mode_b;   /* mode_a < mode_b (BINARY) */
    int64_t n_shared;     /* samples graded (ok/truncated) in both modes, by (problem, sample) */
    int64_t n_same;       /* of those, the same correct and the same content (NULL = NULL) */
    int64_t n_no_text;    /* of those, the ones with content NULL in both (outcome only) */
    int64_t n_problems;   /* distinct problems of the n_shared samples */
} eval_mode_agreement;

/* For every pair of modes of (run_id, eval) stored at one effort (eval
 * NULL: every eval of the run), ordered by eval, effort, mode_a, mode_b,
 * the agreement of their samples into *rows (*n of them, NULL when none;
 * free with eval_store_mode_agreement_free, also after a failure). A pair
 * with no shared graded sample is left out. Reads only; what counts as
 * identical is the caller's (harness/regress.h). */
pg_status eval_store_read_mode_agreement(pg_store *s, int64_t run_id, const char *eval,
                                         eval_mode_agreement **rows, size_t *n, pg_err *err);

/* Frees what eval_store_read_mode_agreement made; NULL is a no-op. */
void eval_store_mode_agreement_free(eval_mode_agreement *rows, size_t n);

#ifdef __cplusplus
}
#endif

#endif /* PG_EVAL_STORE_H */
