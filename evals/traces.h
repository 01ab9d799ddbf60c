/*
 * traces.h: end-task eval problem sets with recorded completions (JSONL), and
 * a converter from the public AIME JSONL files.
 *
 * One JSON object per line; blank lines are skipped, lines may be of any
 * length. Fields (any other key is ignored):
 *   id           string (non-empty) or integer (kept as its decimal string);
 *                unique within the file
 *   problem      string (non-empty); "prompt" is accepted instead, not both
 *   answer       integer 0..999, as a JSON number or a string of digits
 *                ("070", "70" and 70 are all 70)
 *   messages     optional array of {"role": string, "content": string}
 *                to send instead of the prompt template
 *   completions  optional array of recorded outputs:
 *                  mode, effort       non-empty strings ("fp8kv", "medium")
 *                  sample             integer >= 0
 *                  content            string, or null when the server sent
 *                                     none (gpt-oss truncated mid-reasoning)
 *                  reasoning          optional string or null
 *                  finish_reason      optional string or null
 *                  completion_tokens  optional integer >= 0 or null
 *                (mode, effort, sample) is unique within a problem.
 * A field named above must appear at most once in its object.
 *
 * Any malformed line is PG_ERR_FORMAT with a message that starts
 * "<path>:<line>: " and names the field ("completions[2].sample"); a load
 * that fails returns nothing.
 */
#ifndef PG_TRACES_H
#define PG_TRACES_H

#include <stddef.h>

#include "base/status.h"

/* Smallest and largest answer of an AIME problem. */
#define TRACES_ANSWER_MIN 0
#define TRACES_ANSWER_MAX 999

/* One recorded completion. Strings are owned by the traces. */
typedef struct eval_completion {
    char *mode;             /* precision mode that produced it */
    char *effort;           /* reasoning effort it was asked for */
    int sample;             /* sample index, >= 0 */
    char *content;          /* final text; NULL when recorded as null */
    char *reasoning;        /* NULL when absent or null */
    char *finish_reason;    /* NULL when absent or null */
    int completion_tokens;  /* -1 when absent or null */
} eval_completion;

/* One problem. */
typedef struct eval_problem {
    char *id;
    char *problem;          /* from "problem" or "prompt" */
    int answer;             /* TRACES_ANSWER_MIN..TRACES_ANSWER_MAX */
    char *messages_json;    /* the validated messages array as compact JSON, or NULL */
    int line;               /* 1-based line of the file it came from */
    int n_completions;
    eval_completion *completions;  /* in file order */
} eval_problem;

/* A loaded problem set, problems in file order. */
typedef struct eval_traces {
    char *path;             /* as given to traces_load */
    int n;
    eval_problem *problems;
} eval_traces;

/* Reads and validates the JSONL file at path into *out (NULL on failure).
 * Errors: PG_ERR_IO (cannot open or read), PG_ERR_FORMAT (a malformed line,
 * named as "path:line: field: ..."), PG_ERR_NOMEM. */
pg_status traces_load(const char *path, eval_traces **out, pg_err *err);

/* Keeps the first n problems (file order) of t and frees the rest (for
 * smoke tests: eval --limit); n >= t->n leaves t as it is. */
void traces_keep_first(eval_traces *t, int n);

/* Keeps the problems of t marked in keep[0 .. t->n-1], in file order, and
 * frees the rest (eval --shard: the problems of one part). */
void traces_keep_marked(eval_traces *t, const unsigned char *keep);

/* Releases everything traces_load made; NULL is a no-op. */
void traces_free(eval_traces *t);

/* Name of the digest below, spelled into it (a change of what it covers
 * gets a new name, so an old digest never matches by accident). */
#define TRACES_DIGEST_SCHEME "fnv1a64-v1"
/* Room for a digest: scheme, ':', the problem count, ':', 16 hex digits, NUL. */
#define TRACES_DIGEST_MAX 64

/* The content digest of what a live eval sends and grades, into out (len >=
 * TRACES_DIGEST_MAX): "fnv1a64-v1:<problems>:<16 hex digits>", FNV-1a 64 over
 * every problem's id, problem text, answer and messages (length-prefixed),
 * taken in id order, so reordering the file keeps it (a resume sends the same
 * seeds whatever the order, eval_sample_seed) while any changed, added or
 * removed problem changes it. Recorded completions, blank lines, the order
 * of a line's keys and the spelling of an answer ("007" or 7) are not
 * covered (messages are hashed as their compact JSON, key order included).
 * Not a path or mtime: a copy of the file matches.
 * FNV-1a catches accidental changes, not deliberate collisions. */
pg_status traces_digest(const eval_traces *t, char *out, size_t len, pg_err *err);

/* Converts a public AIME JSONL file (opencompass/AIME2025: question/answer;
 * HuggingFaceH4/aime_2024, math-ai/aime25: id/problem/answer/url;
 * Maxwell-Jia/AIME_2024: ID/Problem/Answer) into this format: problem text
 * from exactly one of question, problem, Problem; answer from exactly one of
 * answer, Answer (validated as above, written as a number); id from id or ID
 * when present, else "aime-<n>" with n the problem's 1-based position in the
 * file; url copied when it is a string; other fields dropped. out_path is
 * written whole to out_path.tmp, synced, then renamed over out_path; on any
 * failure out_path is untouched and the temporary file removed. Errors as
 * traces_load, naming in_path and its line. */
pg_status traces_convert_aime(const char *in_path, const char *out_path, pg_err *err);

#endif /* PG_TRACES_H */
