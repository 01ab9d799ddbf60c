/*
 * sglang_logprobs.h: a streaming parser of SGLang's /generate reply with
 * input logprobs (issue #28), the teacher-forced scores of one token
 * sequence.
 *
 * The request (the caller's) is POST /generate with {"input_ids": [ids],
 * "sampling_params": {"max_new_tokens": 0, "temperature": 1, "top_p": 1},
 * "return_logprob": true, "logprob_start_len": 0, "top_logprobs_num": K}
 * (python/sglang/srt/managers/io_struct.py GenerateReqInput; temperature 1
 * because SGLang can scale logprobs by it). The reply's meta_info holds,
 * per input token t (tokenizer_manager.py, detokenize_logprob_tokens and
 * detokenize_top_logprobs_tokens, return_text_in_logprobs off):
 *   input_token_logprobs[t] = [logprob, id, text|null]: ids[t] and its
 *       logprob given the tokens before it; entry 0's logprob is null
 *       (nothing precedes the first token);
 *   input_top_logprobs[t]   = null for t = 0, else K triples
 *       [logprob, id, text|null]: the top K of position t's distribution.
 * Either array may come first; every other key, at any depth, is skipped.
 *
 * The reply is fed in chunks as it arrives (evals/json_stream.h); the
 * parser keeps each position's K entries and the given logprob (16 K + 8
 * bytes a position, what the caller stores anyway, about 40x less than the
 * JSON) and hands the positions over in order once both arrays are whole
 * (sg_parser_finish).
 *
 * Trust nothing: a reply is refused (PG_ERR_FORMAT, the message starting
 * with the caller's `what`) when it is not JSON, lacks meta_info's
 * input_token_logprobs or input_top_logprobs (a server that ignored
 * return_logprob or top_logprobs_num), has more or fewer entries than
 * ids in either, an entry that is not a triple, an input token whose id is
 * not ids[t], a logprob that is null where one is due, a top list of other
 * than K entries (fewer only when the vocabulary has fewer tokens, n_vocab
 * > 0), an id twice in one list or outside 0 <= id < n_vocab (n_vocab > 0),
 * or a null where position 0 has none; PG_ERR_NUMERIC for a logprob above
 * 0 beyond rounding (DIV_MASS_TOL) or a string where a number is due (a
 * NaN or Infinity some encoders write).
 */
#ifndef PG_SGLANG_LOGPROBS_H
#define PG_SGLANG_LOGPROBS_H

#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "prompt_logprobs.h"  /* pl_position_fn, PL_WHAT_MAX, PL_MAX_TOP_K */

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sg_parser sg_parser;

/* A parser of the reply to a request of ids[0..n_ids) (borrowed until
 * freed) at top_k (1 .. PL_MAX_TOP_K), n_vocab the vocabulary size (<= 0:
 * unknown), what the prefix of its messages; on_position(ctx, t, side) is
 * called for t = 1 .. n_ids - 1 by sg_parser_finish. NULL when out of
 * memory or an argument is out of range. */
sg_parser *sg_parser_new(const int32_t *ids, size_t n_ids, size_t top_k, int64_t n_vocab,
                         const char *what, pl_position_fn on_position, void *ctx);

/* Feeds the next len bytes of the reply. The errors of the top of this
 * file; after a failure every later feed returns it again. */
pg_status sg_parser_feed(sg_parser *p, const char *data, size_t len, pg_err *err);

/* Ends the reply, checks both arrays whole (the top of this file) and
 * hands every position to on_position in order; its status stops it. */
pg_status sg_parser_finish(sg_parser *p, pg_err *err);

/* Frees p; NULL is a no-op. */
void sg_parser_free(sg_parser *p);

#ifdef __cplusplus
}
#endif

#endif /* PG_SGLANG_LOGPROBS_H */
