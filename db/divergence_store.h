/*
 * divergence_store.h: teacher-forced divergence in precgate's store (schema
 * version 16, issue #28): the sequences a run scored (div_sequences), each
 * mode's per-position values packed into one blob per (mode, role,
 * sequence) (div_positions), and each mode's summary (div_summaries), and
 * the rows they are read into. evals/divergence.h computes the values; the
 * rows are defined here so that the store and the math share one shape.
 *
 * Conventions as db/eval_store.h: bound parameters, statements prepared
 * once per store, PG_ERR_DB naming the file and what failed, PG_ERR_INTERNAL
 * for a NULL store or argument; a write outside a transaction is its own.
 * A put replaces the row of its key (scoring again is idempotent). Blobs
 * are little-endian whatever the host (the file moves between machines).
 */
#ifndef PG_DIVERGENCE_STORE_H
#define PG_DIVERGENCE_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "store.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The runs.kind of a teacher-forced divergence run (precgate diverge). */
#define DIV_RUN_KIND "diverge"

/* The KLD percentiles reported, in percent (llama-perplexity's upper ones);
 * DIV_N_PERCENTILES of them, the maximum last. */
#define DIV_N_PERCENTILES 6
#define DIV_PERCENTILES {50.0, 90.0, 95.0, 99.0, 99.9, 100.0}

/* One reported (token id, logprob). */
typedef struct div_entry {
    int32_t id;
    double logprob;
} div_entry;

/* What one server reported over one sequence's scored positions (a
 * div_scores row): position i's given token given[i], its logprob
 * given_lp[i] (NaN: not reported) and its top list entries[top_at[i] ..
 * top_at[i + 1]). Build it with div_scored_append; free with
 * div_scored_free. */
typedef struct div_scored {
    size_t n;            /* positions */
    int32_t *given;
    double *given_lp;
    size_t *top_at;      /* n + 1 offsets into entries (top_at[0] = 0) */
    div_entry *entries;
    size_t n_entries;
    size_t cap, cap_entries;  /* allocated */
} div_scored;

/* Appends one position to sc (given, its logprob or NaN, top[0..n_top)).
 * PG_ERR_NOMEM; PG_ERR_INTERNAL for a NULL sc, or top NULL with n_top > 0. */
pg_status div_scored_append(div_scored *sc, int32_t given, double given_lp, const div_entry *top,
                            size_t n_top, pg_err *err);

/* Empties sc and frees what it holds; NULL is a no-op. */
void div_scored_free(div_scored *sc);

/* Stores sc (sc->n >= 1 positions, each with a top list) as (run_id, mode,
 * pass, seq_id)'s scores, answered by server at top_k; pass 0 or 1
 * (DIV_PASS_FLOOR). Replaces an earlier row of the key. */
pg_status divergence_store_put_scores(pg_store *s, int64_t run_id, const char *mode, int pass,
                                      const char *seq_id, const char *server, int64_t top_k,
                                      const div_scored *sc, pg_err *err);

/* Reads (run_id, mode, pass, seq_id)'s scores into *sc (emptied first;
 * div_scored_free it, also after a failure) and, when not NULL, the server
 * into server (size bytes, cut to fit); *found 0 (sc empty) when none is
 * stored. PG_ERR_FORMAT for a blob that does not walk to its n_positions
 * exactly (a damaged file); PG_ERR_NOMEM. */
pg_status divergence_store_read_scores(pg_store *s, int64_t run_id, const char *mode, int pass,
                                       const char *seq_id, div_scored *sc, char *server,
                                       size_t size, int *found, pg_err *err);

/* The pass of a mode's first scoring, and of the reference's second (the noise floor). */
#define DIV_PASS_MAIN 0
#define DIV_PASS_FLOOR 1

/* Whether (run_id, mode, pass, seq_id) has scores stored, into *has (resume). */
pg_status divergence_store_has_scores(pg_store *s, int64_t run_id, const char *mode, int pass,
                                      const char *seq_id, int *has, pg_err *err);

/* What one position gives (evals/divergence.h, div_position_compute). */
typedef struct div_position {
    double kld_lb;      /* >= 0 */
    double tail_p;      /* 1 - top-K mass of P, in [0, 1] */
    double lp, lq;      /* the given token's logprob on each side; NaN: not reported */
    double dlogprob;    /* lq - lp (NaN when either is) */
    double dp;          /* exp(lq) - exp(lp) (NaN when either is) */
    int same_top;       /* 1 when the top-1 ids agree */
    int32_t top_p, top_q;  /* the top-1 ids */
} div_position;

/* One mode's summary against the reference (evals/divergence.h defines each field). */
typedef struct div_summary {
    size_t n_sequences;          /* C: sequences with at least one position */
    size_t n_positions;          /* all scored positions */
    size_t n_given;              /* positions where both sides report the given token */
    double kld_mean, kld_mean_se, kld_ci_low, kld_ci_high;
    double kld_percentile[DIV_N_PERCENTILES];   /* at DIV_PERCENTILES */
    double same_top, same_top_se;
    double mean_dp, rms_dp, mean_dlogprob, ppl_ratio;
    double tail_mass_median;
} div_summary;

/* Bytes one position takes in div_positions.packed: kld_lb, tail_p, lp, lq,
 * dlogprob, dp (float64) and top_p, top_q (int32). same_top is top_p == top_q. */
#define DIV_POSITION_BYTES 56

/* What a row of div_positions / div_summaries compares. */
typedef enum div_role {
    DIV_ROLE_MODE = 0,   /* a mode against the reference */
    DIV_ROLE_FLOOR       /* the reference against itself scored again (noise floor) */
} div_role;

/* "mode" or "floor"; "?" outside the enum. */
const char *div_role_name(div_role r);

/* Stores sequence seq_id of run_id: tokens[0..n) (n >= 2), scored from
 * score_from (1 .. n-1), source naming where it came from. PG_ERR_INTERNAL
 * for a NULL or empty string, n < 2 or score_from out of range. */
pg_status divergence_store_put_sequence(pg_store *s, int64_t run_id, const char *seq_id,
                                        const char *source, const int32_t *tokens, size_t n,
                                        size_t score_from, pg_err *err);

/* One stored sequence; strings and tokens malloc'd (divergence_store_sequences_free). */
typedef struct div_sequence_stored {
    char *seq_id, *source;
    int32_t *tokens;
    size_t n_tokens, score_from;
} div_sequence_stored;

/* The sequences of run_id ordered by seq_id into *rows (*n of them, NULL
 * when none; free with divergence_store_sequences_free, also after a
 * failure). PG_ERR_FORMAT for a stored blob whose length is not 4 x
 * n_tokens (a damaged file); PG_ERR_NOMEM. */
pg_status divergence_store_read_sequences(pg_store *s, int64_t run_id,
                                          div_sequence_stored **rows, size_t *n, pg_err *err);

/* Frees what divergence_store_read_sequences made; NULL is a no-op. */
void divergence_store_sequences_free(div_sequence_stored *rows, size_t n);

/* Stores pos[0..n) (n >= 1) as (run_id, mode, role, seq_id)'s positions. */
pg_status divergence_store_put_positions(pg_store *s, int64_t run_id, const char *mode,
                                         div_role role, const char *seq_id,
                                         const div_position *pos, size_t n, pg_err *err);

/* Reads (run_id, mode, role, seq_id)'s positions into *pos (malloc'd, *n
 * of them; free() it); *pos NULL and *n 0 when none is stored (not yet
 * scored). PG_ERR_FORMAT for a blob of the wrong length; PG_ERR_NOMEM. */
pg_status divergence_store_read_positions(pg_store *s, int64_t run_id, const char *mode,
                                          div_role role, const char *seq_id, div_position **pos,
                                          size_t *n, pg_err *err);

/* Every position of one (run, mode, role), sequence by sequence. */
typedef struct div_mode_positions {
    size_t n;            /* positions over all sequences */
    div_position *pos;   /* n of them, the sequences in seq_id order */
    size_t n_seq;        /* sequences with a row */
    size_t *seq_at;      /* n_seq + 1 offsets: sequence q holds pos[seq_at[q] .. seq_at[q + 1]) */
} div_mode_positions;

/* Reads all positions of (run_id, mode, role) in seq_id order in one query
 * into *out (zeroed first; div_mode_positions_free it, also after a
 * failure); n 0 when none is stored. PG_ERR_FORMAT for a blob of the wrong
 * length (naming the sequence); PG_ERR_NOMEM. */
pg_status divergence_store_read_mode_positions(pg_store *s, int64_t run_id, const char *mode,
                                               div_role role, div_mode_positions *out,
                                               pg_err *err);

/* Frees what divergence_store_read_mode_positions made and zeroes p; NULL is a no-op. */
void div_mode_positions_free(div_mode_positions *p);

/* Stores sm as (run_id, mode, role)'s summary against reference at top_k
 * (NaN statistics as NULL; +-inf refused with PG_ERR_NUMERIC). */
pg_status divergence_store_put_summary(pg_store *s, int64_t run_id, const char *mode,
                                       div_role role, const char *reference, int64_t top_k,
                                       const div_summary *sm, pg_err *err);

/* One stored summary (strings malloc'd; divergence_store_summaries_free);
 * a NULL statistic reads as NaN. */
typedef struct div_summary_stored {
    char *mode, *role, *reference;
    int64_t top_k;
    div_summary s;
} div_summary_stored;

/* The summaries of run_id ordered by role, mode into *rows (*n, NULL when
 * none; free with divergence_store_summaries_free, also after a failure). */
pg_status divergence_store_read_summaries(pg_store *s, int64_t run_id, div_summary_stored **rows,
                                          size_t *n, pg_err *err);

/* Frees what divergence_store_read_summaries made; NULL is a no-op. */
void divergence_store_summaries_free(div_summary_stored *rows, size_t n);

#ifdef __cplusplus
}
#endif

#endif /* PG_DIVERGENCE_STORE_H */
