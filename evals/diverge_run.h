/*
 * diverge_run.h: a teacher-forced divergence run (issue #28): every server
 * scores the same token sequences, and each precision mode's next-token
 * distributions are compared with the reference mode's position by
 * position (evals/divergence.h).
 *
 * Flow: diverge_prepare() waits for every server, finds each one's kind
 * (vLLM, llama.cpp's llama-server, SGLang; probed once and said through the notes,
 * or given), checks that every server tokenizes a probe string to the same
 * ids (else nothing is scored), tokenizes the text-form sequences once on
 * the reference server and stores the sequences with the run.
 * diverge_score() sends what the run lacks: each mode's scores of each
 * sequence (pass 0), and the reference's second scoring (pass 1, the noise
 * floor: in reverse order, one request at a time), storing each (mode,
 * pass, sequence) as it completes, so a kill loses only what was in flight
 * and a resume sends only what is missing. diverge_compare() computes every
 * mode's positions and summary from the stored scores.
 *
 * Scoring per kind (sources in notes-divergence.md):
 * - vLLM: one POST /v1/completions per sequence, {"prompt": [ids],
 *   "prompt_logprobs": K, "max_tokens": 1}, its reply parsed as it streams
 *   in (prompt_logprobs.h);
 * - SGLang: one POST /generate per sequence, {"input_ids": [ids],
 *   "sampling_params": {"max_new_tokens": 0, "temperature": 1, "top_p": 1},
 *   "return_logprob": true, "logprob_start_len": 0, "top_logprobs_num": K},
 *   its reply parsed as it streams in (sglang_logprobs.h);
 * - llama-server: one POST /completion per position, {"prompt": ids[0..t),
 *   "n_predict": 1, "n_probs": K, "cache_prompt": true}, a sequence's
 *   positions in order (its slot's prompt cache makes each cost one token),
 *   several sequences at once.
 * Every reply is checked (prompt_logprobs.h): a reply of the wrong shape is
 * an error naming the server and the sequence, and is never scored.
 */
#ifndef PG_DIVERGE_RUN_H
#define PG_DIVERGE_RUN_H

#include <stdint.h>

#include "base/note.h"
#include "base/status.h"
#include "db/store.h"
#include "divergence.h"
#include "openai_client.h"
#include "sequences.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Most servers (--endpoint) and modes of one run. */
#define DIV_MAX_SERVERS 32
#define DIV_MAX_MODES 8
/* Default K: vLLM's default --max-logprobs (vllm/config/model.py), the
 * largest K a stock vLLM server takes. */
#define DIV_DEFAULT_TOP_K 20
/* Default reference mode. */
#define DIV_DEFAULT_REFERENCE "bf16"

/* What a server is, and so how it scores. */
typedef enum div_server_kind {
    DIV_KIND_AUTO = 0,  /* probe it (diverge_prepare) */
    DIV_KIND_VLLM,      /* /v1/completions with prompt_logprobs */
    DIV_KIND_LLAMA,     /* llama.cpp's llama-server: /completion, one position per request */
    DIV_KIND_SGLANG     /* SGLang: /generate with input logprobs */
} div_server_kind;

/* "auto", "vllm", "llama-server", "sglang"; "?" outside the enum. */
const char *div_server_kind_name(div_server_kind k);

/* The kind named s ("auto", "vllm", "llama-server", "sglang") into *out;
 * PG_ERR_USAGE naming the choices otherwise. */
pg_status div_server_kind_parse(const char *s, div_server_kind *out, pg_err *err);

/* How to run. Strings are borrowed. */
typedef struct diverge_options {
    int n_endpoints;                     /* servers; a mode may repeat */
    const char *modes[DIV_MAX_SERVERS];  /* precision mode served by ... */
    const char *urls[DIV_MAX_SERVERS];   /* ... this base URL */
    const char *reference;               /* the mode compared against (P) */
    int top_k;                           /* K, one for every server */
    div_server_kind kind;                /* every server's, or AUTO: probe each */
    int noise_floor;                     /* 1: the reference scores every sequence twice */
    const char *api_key_env, *api_key;   /* as eval_run_options */
    double ready_deadline_s;
    oa_options client;                   /* max_in_flight per server, retries, timeouts */
    const pg_notes *notes;               /* the chosen strategies, progress */
    const char *sequences_path;          /* named as each stored sequence's source */
    int64_t vocab_size;                  /* > 0: every id is checked against it (vLLM and
                                            SGLang do not say theirs; a llama-server that
                                            says another is an error); 0: the server's */
} diverge_options;

/* The servers of a run once prepared. */
typedef struct diverge_session diverge_session;

/* Opens and waits for every server of o, finds its kind, checks that every
 * server tokenizes DIV_TOKENIZER_PROBE alike, tokenizes the text-form
 * sequences of seqs on the reference server (filling their tokens and
 * score_from) and stores every sequence with run_id. PG_ERR_USAGE for
 * options that do not hold (no server of the reference, K out of range,
 * one URL twice for a mode), PG_ERR_HTTP for a server that is not ready or
 * refuses a probe, PG_ERR_FORMAT for a tokenizer that differs (naming both
 * servers and the first id that differs), a reply of the wrong shape, or
 * a sequence token outside a known vocabulary (naming the sequence); a
 * server whose vocabulary size is unknown is said through the notes.
 * *out NULL on failure. */
pg_status diverge_prepare(pg_store *s, int64_t run_id, div_sequences *seqs,
                          const diverge_options *o, diverge_session **out, pg_err *err);

/* What diverge_score did. */
typedef struct diverge_counts {
    int64_t scored;    /* (mode, pass, sequence) scorings stored now */
    int64_t skipped;   /* already stored (resume) */
    int64_t errors;    /* failed after every attempt: not stored, said through the notes */
} diverge_counts;

/* Scores every (mode, pass, sequence) that run_id lacks, storing each as
 * it completes. Returns PG_OK when every request was answered or failed
 * (c->errors counts the failures, each said through the notes with its
 * server and sequence); PG_ERR_INTERRUPTED once the client's stop flag is
 * set (what completed is stored); a store failure. */
pg_status diverge_score(diverge_session *ds, pg_store *s, int64_t run_id, diverge_counts *c,
                        pg_err *err);

/* Closes the servers and frees ds; NULL is a no-op. */
void diverge_session_free(diverge_session *ds);

/* The modes of ds in the order first given (the reference among them), and
 * how many; borrowed from ds. */
const char *const *diverge_session_modes(const diverge_session *ds, int *n);

/* Computes, from run_id's stored sequences and scores, every mode's
 * positions against reference (role mode) and the reference's second
 * scoring against its first (role floor, when stored), and stores them
 * with each one's summary at top_k. PG_ERR_FORMAT when a mode lacks a
 * sequence's scores (naming both: the run is not whole), or a server's
 * scored tokens are not the sequence's; what div_position_compute says of
 * a position (naming the mode, sequence and position). */
pg_status diverge_compare(pg_store *s, int64_t run_id, const char *reference,
                          const char *const *modes, int n_modes, int top_k, pg_err *err);

/* Longest reason diverge_pair_runs gives for a pair it cannot make. */
#define DIV_UNPAIRED_MAX 256

/* Pairs mode's positions (role mode) in run run_id with those of baseline
 * run base_id over the same sequences, into *out (div_paired_compute):
 * every sequence of run_id must be in base_id with the same tokens and
 * score_from, and the other way round. When they cannot be paired, *out is
 * left zero and why is said in unpaired (else unpaired is ""): the
 * baseline lacks the mode, a sequence, or has it with other tokens (a
 * tokenizer that changed). The store's errors; PG_ERR_FORMAT when a
 * sequence's positions are missing in either run (naming it). */
pg_status diverge_pair_runs(pg_store *s, int64_t run_id, int64_t base_id, const char *mode,
                            div_paired *out, char unpaired[DIV_UNPAIRED_MAX], pg_err *err);

#ifdef __cplusplus
}
#endif

#endif /* PG_DIVERGE_RUN_H */
