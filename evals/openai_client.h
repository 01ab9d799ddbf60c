/*
 * openai_client.h: the live HTTP client for end-task evals, one or several
 * OpenAI-compatible servers (vLLM) per precision mode.
 *
 * Flow: oa_endpoint_open() per server (a mode may have several), oa_wait_ready() until the server
 * answers /health and /v1/models, oa_model_name() for the served model,
 * oa_build_chat_body() per request, then one oa_run() over every request of
 * every endpoint. oa_run() drives all transfers on the calling thread with
 * libcurl's multi interface, keeps at most max_in_flight requests per
 * endpoint, retries transient failures with capped, fully jittered
 * exponential backoff, and hands each finished request to on_done at once.
 *
 * Several servers of one mode: each request (and each retry) goes to the
 * server of its mode with the least outstanding requests (in flight and
 * waiting to retry on it), the lowest index on a tie; a retry avoids the
 * server its last attempt failed on when another can take it. Each server
 * keeps its own health: OA_SERVER_FAIL_LIMIT consecutive failed attempts
 * (the retryable failures: connection refused or reset, timeouts, stalls,
 * 408, 429, 5xx, a 2xx reply without an answer) take it out for a back-off
 * of server_backoff_base_s doubling per consecutive taking-out, capped at
 * server_backoff_cap_s; back in, it takes one request at a time until one
 * succeeds (a success resets its count), unless no other server of its mode
 * is in service. While every server of a mode is out, that mode's requests
 * wait for the first to come back, still bounded by max_attempts each. A
 * mode with one server has no health state (taking out its only server
 * would move no load): its retries keep their own backoff as before.
 *
 * A request that still fails after every attempt comes back with outcome
 * OA_ERROR and the reason; it is never dressed up as an answer. A 2xx reply
 * without an answer (no choices[0], no or empty content without
 * finish_reason "length", finish_reason "abort" or "error") is such a
 * failure: retried like a 5xx, then OA_ERROR naming what was missing. Secrets:
 * the API key is read from the environment variable the caller names, sent
 * only as "Authorization: Bearer ...", and never copied into an error,
 * a response or anything this module prints (it prints nothing).
 *
 * References (see ../shared/reference/notes-evals.md, section 5):
 * vLLM's vllm/entrypoints/openai/chat_completion/protocol.py for the request
 * and response fields, serve/engine/protocol.py for the error bodies.
 */
#ifndef PG_OPENAI_CLIENT_H
#define PG_OPENAI_CLIENT_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/note.h"
#include "base/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Defaults taken by a zero field of oa_options (sources in openai_client.c). */
#define OA_DEFAULT_MAX_IN_FLIGHT 64
#define OA_DEFAULT_MAX_ATTEMPTS 6
#define OA_DEFAULT_BACKOFF_BASE_S 1.0
#define OA_DEFAULT_BACKOFF_CAP_S 60.0
/* Whole attempt, 4 h: the backstop, not the hang detector (stall_s is).
 * The longest budget gpt-oss evals asks for, 131072 tokens, at a loaded 10
 * tokens/s per stream takes 3.6 h; a 32k-token gpt-oss-120b completion at
 * 50-100 tokens/s takes 5-11 min, so no healthy generation is cut and
 * restarted from scratch. lm-eval users raise aiohttp's total timeout to
 * the same 14400 s (lm-evaluation-harness PR #2307). */
#define OA_DEFAULT_TIMEOUT_S (4.0 * 3600.0)
#define OA_DEFAULT_CONNECT_TIMEOUT_S 10.0
/* Stall, 60 s: vLLM streams one event per token, 10-100 per second, so a
 * minute without a byte mid-stream is thousands of missing tokens, and a
 * minute without response headers is a server that does not run (vLLM
 * sends them at once): a stopped, hung or cut-off server, found within 60 s
 * instead of the whole-attempt bound. The wait in vLLM's queue, between the
 * headers and the first event, is not watched (stall_s says why); the
 * silences a healthy vLLM makes mid-stream are shorter: a request preempted
 * for KV space waits at the front of the queue until a running request
 * finishes (vllm/v1/core/sched/scheduler.py), seconds apart at 64 in
 * flight. */
#define OA_DEFAULT_STALL_S 60.0
#define OA_DEFAULT_POLL_S 2.0
/* Consecutive failed attempts that take a server out (modes with several
 * servers). One failure is noise a healthy vLLM makes (a 503 while its
 * queue is full, a request aborted, a connection a proxy recycled); three
 * in a row with no success between is a pattern, and at most three
 * requests' attempts are lost to a dead server before it is out. */
#define OA_SERVER_FAIL_LIMIT 3
/* Back-off of a server taken out: 5 s, doubling per consecutive taking-out
 * (no success between), capped at 120 s. A server that refuses connections
 * is restarting (process start plus loading gpt-oss-120b's weights takes
 * tens of seconds to minutes), so trying it sooner than 5 s only burns
 * attempts; at the 120 s cap a dead server costs one attempt per two
 * minutes and a restored one is back in use within two minutes: small
 * beside an hours-long nightly eval. */
#define OA_DEFAULT_SERVER_BACKOFF_BASE_S 5.0
#define OA_DEFAULT_SERVER_BACKOFF_CAP_S 120.0

/* Per-endpoint settings. Zero-initialise, then set what differs: every zero
 * field takes the default above. */
typedef struct oa_options {
    const char *model;        /* served model name; NULL: ask /v1/models */
    int max_in_flight;        /* requests in progress at once (retry waits included) */
    int max_attempts;         /* attempts per request, first one included */
    double backoff_base_s;    /* retry k waits U(0, min(cap, base * 2^(k-1))) */
    double backoff_cap_s;
    double timeout_s;         /* whole attempt, connection to last byte */
    double connect_timeout_s;
    double stall_s;           /* streamed requests: an attempt fails and is
                                 retried when (a) its final response headers
                                 are not complete this long after it last sent
                                 bytes of its request (a stopped server, whose
                                 kernel still accepts the connection and takes
                                 the request, sends none; before the first
                                 byte is sent, connect_timeout_s bounds the
                                 attempt), or (b) once its
                                 first body byte has come, no further byte
                                 comes for this long. The wait from the headers
                                 to the first body byte is not watched: it is
                                 the server's queue. vLLM returns a Starlette
                                 StreamingResponse, which sends its 200 headers
                                 (http.response.start) before iterating the
                                 generator, whose first event waits until the
                                 request is scheduled: minutes under KV-cache
                                 pressure. timeout_s alone bounds that wait.
                                 Silence is judged by a read: an attempt fails
                                 only when a curl_multi_perform() that began
                                 stall_s after its last byte found nothing, so
                                 time oa_run() spends blocked in on_done is not
                                 counted against bytes waiting in the socket,
                                 nor against a request it had not sent yet.
                                 Measured by oa_run() itself, not libcurl's
                                 LOW_SPEED check, which averages bytes/s over
                                 its last 5 s (lib/progress.c), so caught
                                 stall_s + 5 s late and kills a trickle below 1
                                 byte/s: found here within stall_s plus a few
                                 ms. Not applied to unstreamed requests, which
                                 are silent until complete: timeout_s bounds
                                 those, and TCP keepalive finds a peer whose
                                 host is gone. */
    double poll_s;            /* oa_wait_ready: pause between polls */
    double server_backoff_base_s; /* a server taken out (several per mode) stays
                                 out base * 2^(k-1) after its k-th consecutive
                                 taking-out ... */
    double server_backoff_cap_s;  /* ... at most this long */
    const pg_notes *notes;    /* NULL, or where oa_run says that a server was
                                 taken out and that it answers again (warnings) */
    const volatile sig_atomic_t *stop;  /* NULL, or a flag (interrupt_flag()) that, once
                                 nonzero, stops oa_wait_ready and oa_run with
                                 PG_ERR_INTERRUPTED: no new request or retry is
                                 started and transfers in progress are abandoned
                                 unreported (their caller stores nothing, so a
                                 resume sends them again). oa_run stops when
                                 any of its endpoints' flags is set. */
} oa_options;

/* Sampling parameters of one chat request. Start from oa_sampling_default(). */
typedef struct oa_sampling {
    double temperature;            /* default 1.0 (gpt-oss evals --temperature) */
    double top_p;                  /* < 0: not sent (server default) */
    long max_tokens;               /* <= 0: not sent */
    int has_seed;                  /* 0: no seed sent */
    int64_t seed;
    const char *reasoning_effort;  /* NULL: not sent; else low, medium, high, ... */
    int stream;                    /* 1 (default): SSE with usage; 0: one JSON reply */
    int return_token_ids;          /* 1: ask for the prompt's and the completion's token
                                      ids ("return_token_ids": true, vLLM PR #22587) */
} oa_sampling;

/* What a reader makes of a reply (oa_reply_reader.finish). */
typedef enum oa_read_verdict {
    OA_READ_OK = 0,   /* the reply is whole and usable */
    OA_READ_RETRY,    /* unusable, and another attempt may do better (cut short) */
    OA_READ_FAIL      /* unusable, and would be again (a reply of the wrong shape) */
} oa_read_verdict;

/* How a request that is no chat completion is sent and its 2xx reply read
 * (teacher-forced scoring: vLLM's /v1/completions with prompt_logprobs,
 * llama-server's /completion). The body is handed over as it arrives, never
 * buffered here, so a reader that parses as it goes (prompt_logprobs.h)
 * keeps its memory whatever the reply's size; a reply of another status is
 * read and judged as for a chat completion (its message quoted, 408, 429
 * and 5xx retried). Every routing, retry, timeout and health rule of
 * oa_run holds as for chat requests. */
typedef struct oa_reply_reader {
    const char *path;  /* after the endpoint's base URL: "/v1/completions", "/completion" */
    /* An attempt starts (a retry starts the reply over). */
    void (*begin)(void *ctx);
    /* The next n bytes of a 2xx body; false stops the attempt (the reader
     * keeps why, finish says it). */
    bool (*feed)(void *ctx, const char *p, size_t n);
    /* The 2xx body has ended (whole is false when feed stopped it or the
     * transfer broke off): the verdict, and when it is not OA_READ_OK the
     * reason in why (size bytes, no URL: oa_run adds it). */
    oa_read_verdict (*finish)(void *ctx, bool whole, char *why, size_t size);
} oa_reply_reader;

/* One request. The caller owns every field; body_json must stay valid for
 * the whole oa_run() (it is sent as is). mode routes the request to the
 * endpoint opened with the same mode; effort, problem_id, sample and user are
 * the caller's labels, handed back untouched. */
typedef struct oa_request {
    const char *mode;
    const char *effort;
    const char *problem_id;
    int sample;
    char *body_json;   /* from oa_build_chat_body(), or the reader's request */
    void *user;
    const oa_reply_reader *reader;  /* NULL: a chat completion (POST /v1/chat/completions) */
    void *reader_ctx;               /* the reader's ctx for this request */
} oa_request;

typedef enum oa_outcome {
    OA_OK = 0,      /* the model answered: non-empty content, not truncated */
    OA_TRUNCATED,   /* finish_reason "length": hit max_tokens; content may be NULL */
    OA_ERROR        /* no usable reply after every attempt; see error */
} oa_outcome;

/* What became of one request. Strings are owned by oa_run() and valid only
 * during the on_done call: copy what you keep. A NULL string was absent or
 * null in the reply. */
typedef struct oa_response {
    oa_outcome outcome;
    int http_status;          /* of the last attempt; 0 when no reply came */
    int attempts;             /* attempts made, first one included */
    double latency_ms;        /* of the last attempt */
    char *content;            /* choices[0].message.content */
    char *reasoning;          /* message.reasoning or message.reasoning_content */
    char *finish_reason;
    long prompt_tokens;       /* usage; -1 when the server sent none, or one
                                 that is not an integer in [0, 131072000] */
    long completion_tokens;
    char *error;              /* OA_ERROR only: URL, status and the server's message */
    const char *server;       /* base URL (as opened) of the server of the last
                                 attempt: the one that answered */
    /* The token ids the reply carried (vLLM with return_token_ids: the
     * top-level prompt_token_ids, and choices[0].token_ids joined over a
     * stream's events); NULL when it carried none. token_ids_bad: some
     * entry was no integer id (the ids are then NULL). */
    const int32_t *prompt_token_ids;
    size_t n_prompt_token_ids;
    const int32_t *token_ids;
    size_t n_token_ids;
    int token_ids_bad;
} oa_response;

/* Counters for a progress display, current as of the on_done call. */
typedef struct oa_progress {
    int total;       /* requests in this oa_run() */
    int done;        /* finished (any outcome), this one included */
    int ok, truncated, errors;
    int retries;     /* attempts beyond the first, over all requests so far */
    int in_flight;   /* requests started but not finished */
    int servers_out; /* servers taken out for a back-off now */
} oa_progress;

/* Called once per request, as soon as it is finished. Returning anything
 * but PG_OK (with err filled) stops oa_run(), which abandons the requests
 * still in progress and returns that status. */
typedef pg_status (*oa_done_fn)(void *ctx, const oa_request *req, const oa_response *resp,
                                const oa_progress *progress, pg_err *err);

typedef struct oa_endpoint oa_endpoint;

/* The sampling defaults: temperature 1.0, stream on, nothing else sent. */
oa_sampling oa_sampling_default(void);

/* Builds a /v1/chat/completions body into *out (malloc'd; caller frees).
 * messages_json, when not NULL, is a JSON array of messages used as is;
 * otherwise the one user message of gpt-oss evals' AIME_TEMPLATE
 * (openai/gpt-oss gpt_oss/evals/aime_eval.py):
 *     "\n" problem "\nPlease reason step by step, and put your final answer
 *     within \boxed{}.\n"
 * s NULL means oa_sampling_default(). PG_ERR_USAGE for a bad parameter. */
pg_status oa_build_chat_body(const char *model, const char *messages_json, const char *problem,
                             const oa_sampling *s, char **out, pg_err *err);

/* The prompt template oa_build_chat_body uses for a problem without
 * messages, as text with "{problem}" where the problem goes: what a run
 * records so that a template change is caught on --resume. */
const char *oa_prompt_template(void);

/* Opens an endpoint for mode at base_url ("http[s]://host:port", with or
 * without a trailing "/v1"; no user:password part). api_key_env names the
 * environment variable holding the API key, for messages (NULL: no key),
 * and api_key is its value, read by the caller (the CLI: cli_env_value);
 * a named variable whose value is NULL or empty, or holds a line break, is
 * PG_ERR_USAGE. opt NULL means all defaults. Sends nothing; reads no
 * environment. */
pg_status oa_endpoint_open(const char *mode, const char *base_url, const char *api_key_env,
                           const char *api_key, const oa_options *opt, oa_endpoint **out,
                           pg_err *err);

/* The base URL ep was opened with, as given (what oa_response.server says). */
const char *oa_endpoint_url(const oa_endpoint *ep);

/* Largest normalised base URL (oa_url_normalise), NUL included. */
#define OA_URL_MAX 2048

/* base_url as one server is named once spelt one way, into out (size
 * bytes): scheme and host lower-cased, the scheme's default port (http 80,
 * https 443) dropped, trailing slashes and one trailing "/v1" removed (the
 * client adds it), the path's case kept. Host names are not resolved:
 * "localhost", "127.0.0.1" and a machine's name stay different (the
 * identity below catches one server under two names). 0 on success; -1 when
 * base_url is no http(s) URL with a host or out is too small (out then
 * holds base_url as given, cut to fit). Pure. */
int oa_url_normalise(const char *base_url, char *out, size_t size);

/* Whether a server's GET /version answered (oa_server_identity). */
typedef enum oa_version_state {
    OA_VERSION_UNKNOWN = 0, /* not asked yet, or no usable answer: a transport
                               failure, a timeout, a 5xx, a body without a
                               "version" string. Never taken as a match. */
    OA_VERSION_ABSENT,      /* a 4xx (404 on llama-server and most servers):
                               the server has no such route */
    OA_VERSION_ANSWERED     /* 200 {"version": "..."} (vLLM) */
} oa_version_state;

/* What a server says about itself: enough to notice that two endpoints are
 * one server, never enough to prove it (two servers of one model, software
 * version and launch configuration answer alike). Strings belong to the
 * endpoint and live until oa_endpoint_close; they are the server's bytes,
 * unescaped. */
typedef struct oa_identity {
    const char *models;     /* GET /v1/models of the readiness probe, as a
                               canonical compact JSON array sorted by id: per
                               model its id and, where listed, owned_by, root,
                               parent, max_model_len (vLLM) and meta
                               (llama-server); created and permission are left
                               out (vLLM fills them per request). NULL before
                               oa_wait_ready succeeded. */
    int models_beyond_ids;  /* some model carries a field besides its id */
    const char *server;     /* the Server header of that reply ("uvicorn" for
                               vLLM, "llama.cpp"), NULL when none was sent */
    oa_version_state version_state;
    const char *version;    /* OA_VERSION_ANSWERED only, else NULL */
    const char *canonical;  /* all of the above as one line:
                               "models=JSON server=TEXT|- version=TEXT|absent|unknown" */
} oa_identity;

/* Timeout of the one GET /version oa_server_identity makes: a route of a
 * local server answers in milliseconds, and the probe must not hold the
 * eval up (a server without the route answers 404 at once). */
#define OA_VERSION_TIMEOUT_S 2.0

/* Fills *id for ep, which oa_wait_ready has found ready (else id->models is
 * NULL). The first call makes one GET /version (OA_VERSION_TIMEOUT_S, no
 * retry) and remembers its outcome; its failure is no error, only
 * OA_VERSION_UNKNOWN. PG_ERR_NOMEM only. */
pg_status oa_server_identity(oa_endpoint *ep, oa_identity *id, pg_err *err);

/* Whether a and b (oa_server_identity of two endpoints) look like one
 * server: the same models, the same Server header (or both none), and the
 * same /version where both answered (one answered and the other has no
 * such route: different), and at least one thing beyond the model ids
 * agrees: a listed field, a Server header both sent, or a version both
 * answered. A list of ids alone names the model, not the server, so it
 * never matches by itself. What agreed goes into what (size bytes, the
 * server's text unescaped, may be cut): "models [...], Server header
 * 'uvicorn', /version '0.11.0'". 1 or 0; pure. */
int oa_identity_match(const oa_identity *a, const oa_identity *b, char *what, size_t size);

/* Frees ep (wiping its copy of the key); NULL is a no-op. */
void oa_endpoint_close(oa_endpoint *ep);

/* Polls GET /health, then GET /v1/models, every poll_s until both answer
 * 200 and at least one model is listed, or deadline_s seconds have passed:
 * PG_ERR_HTTP naming the URL and the last failure. A model named in the
 * options but not listed fails at once. PG_ERR_INTERRUPTED once the
 * options' stop flag is set (looked at between polls). */
pg_status oa_wait_ready(oa_endpoint *ep, double deadline_s, pg_err *err);

/* The served model name in *model (malloc'd; caller frees): the options'
 * model when set, else the first id of GET /v1/models (remembered). */
pg_status oa_model_name(oa_endpoint *ep, char **model, pg_err *err);

/* One blocking request to ep outside oa_run (a probe: /tokenize, /props):
 * method "GET" or "POST" (body_json NULL for GET), path after the base URL,
 * within timeout_s, no retry. On a completed transfer PG_OK with the status
 * in *code and the body in *reply (malloc'd, NUL-terminated, *reply_len
 * bytes; caller frees), whatever the status; PG_ERR_HTTP "<METHOD> <URL>:
 * <reason>" when no reply came; PG_ERR_USAGE for a bad argument. */
pg_status oa_call(oa_endpoint *ep, const char *method, const char *path, const char *body_json,
                  double timeout_s, long *code, char **reply, size_t *reply_len, pg_err *err);

/* Sends every request to a server of its mode (POST /v1/chat/completions,
 * or the reader's path;
 * several endpoints may share a mode: the routing and health rules at the
 * top of this file) and calls on_done for each as it finishes, in completion order. Returns
 * PG_OK once all are reported, whatever their outcomes; PG_ERR_USAGE (before
 * sending anything) for a request without a body or an endpoint, or two
 * endpoints of one mode with the same URL; the
 * callback's status when it stops the run; PG_ERR_INTERRUPTED when a stop
 * flag (oa_options.stop) was set: the requests reported until then were
 * handed to on_done, the others never will be; PG_ERR_NOMEM or PG_ERR_HTTP
 * when libcurl itself fails. */
pg_status oa_run(oa_endpoint **eps, int n_eps, oa_request *reqs, int n_reqs,
                 oa_done_fn on_done, void *ctx, pg_err *err);

#ifdef __cplusplus
}
#endif

#endif /* PG_OPENAI_CLIENT_H */
