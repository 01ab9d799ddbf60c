/*
 * prompt_logprobs.h: a streaming parser of vLLM's prompt-logprobs reply
 * (issue #28), the teacher-forced scores of one token sequence.
 *
 * The request (the caller's) is POST /v1/completions with {"prompt": [ids],
 * "prompt_logprobs": K, "max_tokens": 1}. The reply's
 * choices[0].prompt_logprobs holds one entry per prompt token: entry 0 is
 * null (nothing precedes the first token), entry t an object keyed by token
 * id (a decimal string) whose values are {"logprob", "rank",
 * "decoded_token"}; it holds the top K by rank plus the given token ids[t]
 * (K or K + 1 keys; vllm/v1/worker/gpu/sample/prompt_logprob.py, the
 * request fields in vllm/entrypoints/openai/completion/protocol.py, -inf
 * clamped to -9999.0). "return_token_ids": true adds
 * choices[0].prompt_token_ids, checked against ids when present.
 *
 * The reply is fed in chunks as it arrives (evals/json_stream.h, a strict
 * streaming JSON parser: a 30k-token reply at K = 20 is about 45 MB of
 * JSON, and a chunk may end anywhere); each position is
 * handed to the caller as soon as its object closes, so the parser's
 * memory is one position's entries whatever the sequence length. Every
 * other key of the reply, at any depth, is skipped.
 *
 * Trust nothing: a reply is refused (PG_ERR_FORMAT, the message starting
 * with the caller's `what`, e.g. the server and the sequence) when it is
 * not JSON, lacks choices[0].prompt_logprobs (a server that answers the
 * generated token's logprobs only), has an entry 0 that is not null, has
 * more or fewer entries than ids, has a position without the given token,
 * with fewer than K or more than K + 1 keys (fewer than K only when the
 * vocabulary has fewer tokens), with a key twice, a key that is no id of
 * the vocabulary (0 <= id < n_vocab when n_vocab > 0), a rank < 1, two keys
 * ranked <= K beyond K of them, or an entry without a numeric logprob;
 * PG_ERR_NUMERIC for a logprob that is NaN or above 0 (JSON has no NaN:
 * a bare NaN or Infinity is not JSON, and one sent as a string is refused
 * as such).
 */
#ifndef PG_PROMPT_LOGPROBS_H
#define PG_PROMPT_LOGPROBS_H

#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "divergence.h"
#include "json_stream.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Longest prefix of the parser's messages (the caller's `what`), NUL included. */
#define PL_WHAT_MAX JS_WHAT_MAX
/* Most keys one position may hold: K + 1 (K <= PL_MAX_TOP_K). */
#define PL_MAX_TOP_K 4096

/* Called once per scored position t (1 .. n_ids - 1), in order: side holds
 * the top K (rank <= K) and the given token ids[t] with its logprob (its
 * entries live until the call returns). A status other than PG_OK stops the
 * parse and is returned by the feed that was running. */
typedef pg_status (*pl_position_fn)(void *ctx, size_t t, const div_side *side, pg_err *err);

typedef struct pl_parser pl_parser;

/* A parser of the reply to a request of ids[0..n_ids) (borrowed until
 * pl_parser_free) at top_k, reporting to on_position(ctx, ...). NULL when
 * out of memory or an argument is invalid (n_ids < 1, top_k outside 1 ..
 * PL_MAX_TOP_K, a NULL pointer). */
pl_parser *pl_parser_new(const int32_t *ids, size_t n_ids, size_t top_k, int64_t n_vocab,
                         const char *what, pl_position_fn on_position, void *ctx);

/* Feeds the next len bytes of the reply. The errors of the top of this
 * file, or on_position's; after a failure every later feed returns it again. */
pg_status pl_parser_feed(pl_parser *p, const char *data, size_t len, pg_err *err);

/* Ends the reply: PG_ERR_FORMAT when it is incomplete JSON or lacks
 * positions (the top of this file), else PG_OK (every position handed). */
pg_status pl_parser_finish(pl_parser *p, pg_err *err);

/* Frees p; NULL is a no-op. */
void pl_parser_free(pl_parser *p);

/* ---- llama.cpp's llama-server: one position per request ---------------- */
/*
 * llama-server has no prompt logprobs (its /v1/completions refuses echo, or
 * newer builds silently return generated-token logprobs only:
 * notes-divergence.md). Position t is scored by POST /completion with
 * {"prompt": ids[0..t), "n_predict": 1, "n_probs": K, "cache_prompt": true};
 * the reply's completion_probabilities[0].top_logprobs is the top K of the
 * next token's distribution as [{"id", "token", "bytes", "logprob"}], a
 * softmax of the raw logits (tools/server/server-common.cpp, llama.cpp
 * 80fb11ac). The given token's logprob is known only when it is in that list.
 */

/* Reads one llama-server /completion reply body[0..len) for the position
 * whose given token is given, at top_k (1 .. PL_MAX_TOP_K; the list must
 * hold min(top_k, n_vocab) entries when n_vocab > 0, else top_k), into
 * top[0..*n_top) (top holds top_k entries) and *given_lp (NaN when the
 * given token is not listed). PG_ERR_FORMAT (the message starting with
 * what) for a body that is not JSON, lacks completion_probabilities[0].
 * top_logprobs (an older server answering "probs" is named as such), holds
 * another number of entries, an entry without an integer id of the
 * vocabulary or a numeric logprob, or an id twice; PG_ERR_NUMERIC for a
 * logprob that is NaN or above 0. */
pg_status pl_llama_position(const char *body, size_t len, int32_t given, size_t top_k,
                            int64_t n_vocab, const char *what, div_entry *top, size_t *n_top,
                            double *given_lp, pg_err *err);

#ifdef __cplusplus
}
#endif

#endif /* PG_PROMPT_LOGPROBS_H */
