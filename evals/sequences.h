/*
 * sequences.h: the token sequences teacher-forced divergence scores
 * (`precgate diverge --sequences FILE.jsonl`, issue #28).
 *
 * One JSON object per line (jsonl.h: any length, blank lines skipped, a key
 * given twice refused); any key not named here is ignored. Two forms:
 *   {"id": "s1", "tokens": [int, ...], "score_from": N}
 *       ids as the servers' tokenizer gives them, at least 2, each in
 *       0 .. SEQ_TOKEN_MAX; positions N .. len-1 are scored, the tokens
 *       before N are context; score_from is optional (default 1: every
 *       token after the first), an integer in 1 .. len-1.
 *   {"id": "s2", "prompt": "...", "completion": "..."}
 *       text, tokenized once by the reference server's /tokenize (the
 *       caller's: tokens stay NULL here); the completion is scored. The
 *       completion must not be empty; score_from is not allowed (it is the
 *       prompt's token count).
 * id is a non-empty string, unique within the file. A line with both forms,
 * or neither, is refused. Every error is PG_ERR_FORMAT "<path>:<line>:
 * '<field>' ..." and a load that fails returns nothing; PG_ERR_IO when the
 * file cannot be read; a file without a sequence is PG_ERR_FORMAT.
 */
#ifndef PG_SEQUENCES_H
#define PG_SEQUENCES_H

#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "db/eval_store.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Largest token id a sequence may hold (ids are int32 on the wire and in the store). */
#define SEQ_TOKEN_MAX INT32_MAX

/* One sequence; strings and arrays are owned by the set. */
typedef struct div_sequence {
    char *id;
    int32_t *tokens;      /* n_tokens ids; NULL for the text form until tokenized */
    size_t n_tokens;
    size_t score_from;    /* first scored position (>= 1); 0 for the text form */
    char *prompt;         /* the text form's, else NULL */
    char *completion;
    int line;             /* 1-based line of the file (0: from an eval run) */
    char *source;         /* where it came from when not a line of a file, else NULL */
} div_sequence;

/* A loaded file. */
typedef struct div_sequences {
    div_sequence *v;
    size_t n;
} div_sequences;

/* Loads path into *out (emptied first; free with div_sequences_free, also
 * after a failure). Errors as the top of this file. */
pg_status div_sequences_load(const char *path, div_sequences *out, pg_err *err);

/* The sequences of eval run run_id's samples (rows[0..n), what
 * eval_store_read_token_ids read) into *out (emptied first; free with
 * div_sequences_free, also after a failure): per sample its prompt's ids
 * then its completion's, the completion scored; id
 * "EVAL/MODE/EFFORT/PROBLEM#SAMPLE". A sample that failed (status error:
 * no completion) is left out and counted in *skipped. PG_ERR_FORMAT naming
 * the sample for one whose ids were not recorded (a sequence rebuilt from
 * text is not the one sampled: gpt-oss's Harmony prompt carries a date),
 * whose ids are unusable (its stored token_ids_error says why), or with no
 * prompt or no completion token; PG_ERR_FORMAT when no sample is left. */
pg_status div_sequences_from_eval(const eval_token_ids *rows, size_t n, int64_t run_id,
                                  div_sequences *out, int64_t *skipped, pg_err *err);

/* How a sequence set's digest starts (the scheme that made it), and room
 * for one: "SCHEME:N:" and 16 hex digits. */
#define SEQ_DIGEST_SCHEME "div-sequences-fnv1a-v1"
#define SEQ_DIGEST_MAX 64

/* The content digest of s into out (at least SEQ_DIGEST_MAX bytes):
 * "SCHEME:N:HASH", FNV-1a over every sequence in id order (strcmp): its
 * id, its form, and its tokens (little-endian int32) and score_from, or
 * its prompt and completion. Equal for the same sequences in any order of
 * the file; what --shard splits and what merge checks the parts against.
 * PG_ERR_NOMEM, PG_ERR_INTERNAL for a short buffer. */
pg_status div_sequences_digest(const div_sequences *s, char *out, size_t len, pg_err *err);

/* Keeps the sequences i of s for which keep[i] is set, in their order, and
 * frees the others. */
void div_sequences_keep(div_sequences *s, const unsigned char *keep);

/* Frees what s holds and empties it; NULL is a no-op. */
void div_sequences_free(div_sequences *s);

#ifdef __cplusplus
}
#endif

#endif /* PG_SEQUENCES_H */
