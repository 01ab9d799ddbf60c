/*
 * openai_client.c: the end-task eval HTTP client (see openai_client.h).
 *
 * oa_run() keeps one CURLM for every endpoint and one easy handle per request
 * in progress. A request holds its endpoint's in-flight slot from its first
 * attempt until it is reported, backoff waits included, so a struggling
 * server gets fewer new requests rather than more. Replies are parsed as they
 * arrive: a text/event-stream reply line by line (only the unparsed tail is
 * buffered), anything else as one JSON body. Every message that leaves this
 * file passes through scrub(), which blanks the API key wherever it appears.
 */
#include "openai_client.h"
#include "grade.h"
#include "base/clock.h"
#include "base/rng.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <curl/curl.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

/* Largest reply body (or streamed text per field) kept: far above the
 * 131072-token ceiling of gpt-oss evals (__main__.py max_tokens=131_072) at
 * a few bytes per token, small enough that 64 replies fit in memory. */
#define OA_MAX_BODY_BYTES ((size_t)64 << 20)
/* Most characters of a server's message quoted in an error. */
#define OA_MSG_SNIPPET 300
/* Room for a formatted error message. */
#define OA_ERR_MAX 1024
/* Room for the "HTTP <status>: " an error message starts with. */
#define OA_STATUS_PREFIX_MAX 32
/* Longest Server header or /version string kept for an identity: far above
 * "uvicorn" or a vLLM version, small enough for one line of a warning. */
#define OA_IDENTITY_FIELD_MAX 256
/* Default ports of the schemes (RFC 9110 sections 4.2.1 and 4.2.2). */
#define OA_HTTP_DEFAULT_PORT 80L
#define OA_HTTPS_DEFAULT_PORT 443L
/* Statuses that say a server has no /version route: 404 Not Found and 405
 * Method Not Allowed (RFC 9110 sections 15.5.5, 15.5.6). */
#define OA_HTTP_NOT_FOUND 404L
#define OA_HTTP_METHOD_NOT_ALLOWED 405L
/* Timeout of one /health or /v1/models request (oa_wait_ready, oa_model_name). */
#define OA_PROBE_TIMEOUT_S 10.0
/* Shortest timeout of a probe, so one is made even at the deadline. */
#define OA_PROBE_MIN_TIMEOUT_S 0.1
/* Longest single wait of the oa_run() loop, so retry deadlines are noticed. */
#define OA_MAX_POLL_MS 1000
/* A token count above this in a reply's usage is not believed (dropped as
 * absent): 1000x the 131072-token window gpt-oss evals uses, far above any
 * served context, and below LONG_MAX and 2^53 so the conversion is exact. */
#define OA_MAX_USAGE_TOKENS 131072000L
/* An error code inside a reply is an HTTP status only within these
 * (RFC 9110 section 15: three digits, 1xx to 5xx). */
#define OA_HTTP_STATUS_MIN 100L
#define OA_HTTP_STATUS_MAX 599L
/* The lowest status of a final response; 1xx ones are interim (RFC 9110
 * section 15.2) and are followed by another set of headers. */
#define OA_HTTP_FINAL_MIN 200L
/* The instruction gpt-oss evals appends to every AIME problem
 * (openai/gpt-oss gpt_oss/evals/aime_eval.py, AIME_TEMPLATE). */
#define OA_AIME_PROMPT_HEAD "\n"
#define OA_AIME_PROMPT_TAIL                                                                        \
    "\nPlease reason step by step, and put your final answer within \\boxed{}.\n"
/* Values vLLM accepts for reasoning_effort (vllm/entrypoints/openai/
 * chat_completion/protocol.py, ChatCompletionRequest). */
static const char *const k_efforts[] = {"none", "minimal", "low", "medium", "high", "xhigh", "max"};
/* What replaces each character of the API key wherever it shows up. */
#define OA_SCRUB_CHAR '*'

/* Default sources (openai_client.h):
 * - max_in_flight 64: below the 128 --max-num-seqs of vLLM's gpt-oss recipe
 *   (vllm-project/recipes OpenAI/GPT-OSS.md), so requests are not queued.
 * - 6 attempts, backoff base 1 s, cap 60 s, full jitter: "Exponential Backoff
 *   And Jitter", AWS Architecture Blog (2015); gpt-oss evals sleeps 2**trial
 *   without a cap, lm-eval caps at 10 s (notes-evals.md sections 1, 2).
 * - timeout 4 h, stall 60 s: see openai_client.h.
 * - connect 10 s, poll 2 s: a loading vLLM refuses connections, so polls
 *   fail fast and cheap. */

/* ------------------------------------------------------------------------ */
/* small helpers                                                            */
/* ------------------------------------------------------------------------ */

/* A growable NUL-terminated byte buffer; p NULL until the first byte. */
typedef struct buf {
    char *p;
    size_t len, cap;
} buf;

/* Appends n bytes of s; false when out of memory or past OA_MAX_BODY_BYTES. */
static bool buf_add(buf *b, const char *s, size_t n)
{
    if (n > OA_MAX_BODY_BYTES - b->len) return false;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1) cap *= 2;
        char *p = realloc(b->p, cap);
        if (p == NULL) return false;
        b->p = p;
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
    return true;
}

/* Frees b's bytes and empties it. */
static void buf_free(buf *b)
{
    free(b->p);
    *b = (buf){0};
}

/* Sleeps for s seconds (nothing when s <= 0). */
static void sleep_s(double s)
{
    if (s <= 0) return;
    struct timespec ts = {(time_t)s, (long)((s - floor(s)) * 1e9)};
    while (nanosleep(&ts, &ts) != 0) {}
}

/* Blanks every occurrence of key (when not NULL or empty) in s, in place. */
static void scrub(char *s, const char *key)
{
    if (s == NULL || key == NULL || key[0] == '\0') return;
    size_t n = strlen(key);
    for (char *p = strstr(s, key); p != NULL; p = strstr(p + n, key)) memset(p, OA_SCRUB_CHAR, n);
}

/* The server's message in a reply body: error.message ({"error":{...}}),
 * error as a string, message ({"object":"error",...}), detail (FastAPI), or
 * else the body text itself, control characters flattened; at most
 * OA_MSG_SNIPPET characters into out (size >= OA_MSG_SNIPPET + 4). */
static void server_message(const char *body, size_t len, char *out, size_t size)
{
    const char *msg = NULL;
    cJSON *root = body ? cJSON_ParseWithLength(body, len) : NULL;
    if (cJSON_IsObject(root)) {
        const cJSON *e = cJSON_GetObjectItemCaseSensitive(root, "error");
        const cJSON *m = cJSON_GetObjectItemCaseSensitive(e, "message");
        const cJSON *d = cJSON_GetObjectItemCaseSensitive(root, "detail");
        if (cJSON_IsString(m)) msg = m->valuestring;
        else if (cJSON_IsString(e)) msg = e->valuestring;
        else if (cJSON_IsString(m = cJSON_GetObjectItemCaseSensitive(root, "message")))
            msg = m->valuestring;
        else if (cJSON_IsString(d)) msg = d->valuestring;
        else if (cJSON_IsArray(d) && cJSON_IsString(m = cJSON_GetObjectItemCaseSensitive(
                                                        cJSON_GetArrayItem(d, 0), "msg")))
            msg = m->valuestring;
    }
    if (msg == NULL) {
        msg = body;
    } else {
        len = strlen(msg);
    }
    if (msg == NULL || len == 0) {
        snprintf(out, size, "(empty body)");
    } else {
        size_t n = len < OA_MSG_SNIPPET ? len : OA_MSG_SNIPPET;
        if (n > size - 4) n = size - 4;
        for (size_t i = 0; i < n; i++) {
            unsigned char c = (unsigned char)msg[i];
            out[i] = (c < 0x20 || c == 0x7f) ? ' ' : (char)c;
        }
        strcpy(out + n, n < len ? "..." : "");
    }
    cJSON_Delete(root);
}

/* ------------------------------------------------------------------------ */
/* endpoints                                                                */
/* ------------------------------------------------------------------------ */

struct oa_endpoint {
    char *mode;
    char *base_url;                  /* as given to oa_endpoint_open */
    char *url_chat, *url_health, *url_models, *url_version;
    size_t base_len;                 /* base_url's bytes before the paths (no "/v1", no "/") */
    char *model;                     /* the options' or the discovered name */
    char *id_models;                 /* oa_identity.models, from the readiness probe */
    int id_beyond_ids;               /* oa_identity.models_beyond_ids */
    char *id_server;                 /* oa_identity.server (NULL: none sent) */
    oa_version_state id_version_state;
    char *id_version;
    char *id_canonical;
    bool id_version_asked;           /* GET /version made (once) */
    char *api_key;                   /* NULL when none; kept only for scrub() */
    struct curl_slist *post_headers; /* JSON body, no Expect, Authorization */
    struct curl_slist *get_headers;  /* Authorization only */
    oa_options opt;                  /* defaults filled in */
};

static pthread_once_t g_curl_once = PTHREAD_ONCE_INIT;
static CURLcode g_curl_init_rc = CURLE_OK;

/* curl_global_init, once per process (it is not thread-safe in 7.88). */
static void curl_init_once(void)
{
    g_curl_init_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
}

/* Zeroes every header string of l (one holds the key), then frees l. */
static void wipe_headers(struct curl_slist *l)
{
    for (struct curl_slist *s = l; s != NULL; s = s->next) explicit_bzero(s->data, strlen(s->data));
    curl_slist_free_all(l);
}

void oa_endpoint_close(oa_endpoint *ep)
{
    if (ep == NULL) return;
    wipe_headers(ep->post_headers);
    wipe_headers(ep->get_headers);
    if (ep->api_key) explicit_bzero(ep->api_key, strlen(ep->api_key));
    free(ep->api_key);
    free(ep->mode);
    free(ep->base_url);
    free(ep->url_chat);
    free(ep->url_health);
    free(ep->url_models);
    free(ep->url_version);
    free(ep->model);
    free(ep->id_models);
    free(ep->id_server);
    free(ep->id_version);
    free(ep->id_canonical);
    free(ep);
}

/* Fills the zero fields of o with defaults; PG_ERR_USAGE for a negative
 * field or a cap below the base. */
static pg_status resolve_options(oa_options *o, const char *mode, pg_err *err)
{
    if (o->max_in_flight < 0 || o->max_attempts < 0 || o->backoff_base_s < 0 ||
        o->backoff_cap_s < 0 || o->timeout_s < 0 || o->connect_timeout_s < 0 || o->stall_s < 0 ||
        o->poll_s < 0 || o->server_backoff_base_s < 0 || o->server_backoff_cap_s < 0 ||
        isnan(o->backoff_base_s) || isnan(o->backoff_cap_s) || isnan(o->timeout_s) ||
        isnan(o->connect_timeout_s) || isnan(o->stall_s) || isnan(o->poll_s) ||
        isnan(o->server_backoff_base_s) || isnan(o->server_backoff_cap_s))
        return pg_fail(err, PG_ERR_USAGE, "endpoint %s: options must not be negative", mode);
    if (!o->max_in_flight) o->max_in_flight = OA_DEFAULT_MAX_IN_FLIGHT;
    if (!o->max_attempts) o->max_attempts = OA_DEFAULT_MAX_ATTEMPTS;
    if (o->backoff_base_s == 0) o->backoff_base_s = OA_DEFAULT_BACKOFF_BASE_S;
    if (o->backoff_cap_s == 0) o->backoff_cap_s = OA_DEFAULT_BACKOFF_CAP_S;
    if (o->timeout_s == 0) o->timeout_s = OA_DEFAULT_TIMEOUT_S;
    if (o->connect_timeout_s == 0) o->connect_timeout_s = OA_DEFAULT_CONNECT_TIMEOUT_S;
    if (o->stall_s == 0) o->stall_s = OA_DEFAULT_STALL_S;
    if (o->poll_s == 0) o->poll_s = OA_DEFAULT_POLL_S;
    if (o->server_backoff_base_s == 0) o->server_backoff_base_s = OA_DEFAULT_SERVER_BACKOFF_BASE_S;
    if (o->server_backoff_cap_s == 0) o->server_backoff_cap_s = OA_DEFAULT_SERVER_BACKOFF_CAP_S;
    if (o->backoff_cap_s < o->backoff_base_s)
        return pg_fail(err, PG_ERR_USAGE, "endpoint %s: backoff cap %g s is below its base %g s",
                       mode, o->backoff_cap_s, o->backoff_base_s);
    if (o->server_backoff_cap_s < o->server_backoff_base_s)
        return pg_fail(err, PG_ERR_USAGE,
                       "endpoint %s: server backoff cap %g s is below its base %g s", mode,
                       o->server_backoff_cap_s, o->server_backoff_base_s);
    return PG_OK;
}

/* The first base_len bytes of base, then path, as a new string in *out. */
static pg_status join_url(const char *base, size_t base_len, const char *path, char **out)
{
    size_t n = base_len + strlen(path) + 1;
    *out = malloc(n);
    if (*out == NULL) return PG_ERR_NOMEM;
    snprintf(*out, n, "%.*s%s", (int)base_len, base, path);
    return PG_OK;
}

pg_status oa_endpoint_open(const char *mode, const char *base_url, const char *api_key_env,
                           const char *api_key, const oa_options *opt, oa_endpoint **out,
                           pg_err *err)
{
    *out = NULL;
    if (mode == NULL || mode[0] == '\0')
        return pg_fail(err, PG_ERR_USAGE, "an endpoint needs a mode name");
    if (base_url == NULL ||
        (strncmp(base_url, "http://", 7) != 0 && strncmp(base_url, "https://", 8) != 0))
        return pg_fail(err, PG_ERR_USAGE,
                       "endpoint %s: base URL must start with http:// or https://", mode);
    const char *host = strstr(base_url, "://") + 3;
    size_t host_len = strcspn(host, "/?#");
    if (memchr(host, '@', host_len) != NULL)  /* the URL itself is not echoed: it holds a secret */
        return pg_fail(err, PG_ERR_USAGE,
                       "endpoint %s: base URL must not carry credentials; name the API key's "
                       "environment variable instead", mode);
    if (host_len == 0 || host[host_len] == '?' || host[host_len] == '#')
        return pg_fail(err, PG_ERR_USAGE, "endpoint %s: base URL '%s' has no host or has a query",
                       mode, base_url);
    /* Strip trailing slashes and one trailing "/v1": the paths below add it. */
    size_t host_end = (size_t)(host - base_url) + host_len, n = strlen(base_url);
    while (n > host_end && base_url[n - 1] == '/') n--;
    if (n >= host_end + 3 && memcmp(base_url + n - 3, "/v1", 3) == 0) n -= 3;
    while (n > host_end && base_url[n - 1] == '/') n--;

    oa_options o = opt ? *opt : (oa_options){0};
    pg_status st = resolve_options(&o, mode, err);
    if (st != PG_OK) return st;

    const char *key = NULL;
    if (api_key_env != NULL) {
        key = api_key;
        if (key == NULL || key[0] == '\0')
            return pg_fail(err, PG_ERR_USAGE,
                           "endpoint %s: environment variable %s (the API key) is not set or empty",
                           mode, api_key_env);
        if (strpbrk(key, "\r\n") != NULL)
            return pg_fail(err, PG_ERR_USAGE,
                           "endpoint %s: the API key in %s contains a line break", mode,
                           api_key_env);
    }

    pthread_once(&g_curl_once, curl_init_once);
    if (g_curl_init_rc != CURLE_OK)
        return pg_fail(err, PG_ERR_HTTP, "curl_global_init: %s",
                       curl_easy_strerror(g_curl_init_rc));

    oa_endpoint *ep = calloc(1, sizeof *ep);
    if (ep == NULL) return pg_fail(err, PG_ERR_NOMEM, "out of memory opening endpoint %s", mode);
    ep->opt = o;
    ep->opt.model = NULL;
    ep->base_len = n;
    bool ok = (ep->mode = strdup(mode)) != NULL && (ep->base_url = strdup(base_url)) != NULL &&
              join_url(base_url, n, "/v1/chat/completions", &ep->url_chat) == PG_OK &&
              join_url(base_url, n, "/health", &ep->url_health) == PG_OK &&
              join_url(base_url, n, "/v1/models", &ep->url_models) == PG_OK &&
              join_url(base_url, n, "/version", &ep->url_version) == PG_OK &&
              (o.model == NULL || (ep->model = strdup(o.model)) != NULL) &&
              (key == NULL || (ep->api_key = strdup(key)) != NULL);
    struct curl_slist *l;
    ok = ok && (l = curl_slist_append(NULL, "Content-Type: application/json")) &&
         (ep->post_headers = l) &&
         (l = curl_slist_append(l, "Accept: application/json, text/event-stream")) &&
         (l = curl_slist_append(l, "Expect:")) &&
         (l = curl_slist_append(NULL, "Accept: application/json")) && (ep->get_headers = l);
    if (ok && key != NULL) {
        size_t hn = strlen(key) + sizeof "Authorization: Bearer ";
        char *h = malloc(hn);
        ok = h != NULL;
        if (ok) {
            snprintf(h, hn, "Authorization: Bearer %s", key);
            ok = curl_slist_append(ep->post_headers, h) && curl_slist_append(ep->get_headers, h);
            explicit_bzero(h, hn);
            free(h);
        }
    }
    if (!ok) {
        oa_endpoint_close(ep);
        return pg_fail(err, PG_ERR_NOMEM, "out of memory opening endpoint %s", mode);
    }
    *out = ep;
    return PG_OK;
}

const char *oa_endpoint_url(const oa_endpoint *ep)
{
    return ep->base_url;
}

/* ------------------------------------------------------------------------ */
/* simple GETs: /health and /v1/models                                      */
/* ------------------------------------------------------------------------ */

/* libcurl write callback collecting a body into a buf (stops past the cap). */
static size_t collect_body(char *ptr, size_t size, size_t nmemb, void *userdata)
{
    return buf_add(userdata, ptr, size * nmemb) ? size * nmemb : 0;
}

/* libcurl header callback keeping the Server header of the last response
 * (a status line starts a new one: interim 1xx replies have their own) in
 * the buf userdata, at most OA_IDENTITY_FIELD_MAX bytes, trimmed. */
static size_t collect_server_header(char *ptr, size_t size, size_t nmemb, void *userdata)
{
    buf *server = userdata;
    const size_t n = size * nmemb;
    static const char name[] = "server:";
    if (n >= 5 && memcmp(ptr, "HTTP/", 5) == 0) {
        buf_free(server);
    } else if (n >= sizeof name - 1 && strncasecmp(ptr, name, sizeof name - 1) == 0) {
        size_t at = sizeof name - 1, end = n;
        while (at < end && (ptr[at] == ' ' || ptr[at] == '\t')) at++;
        while (end > at && (ptr[end - 1] == '\r' || ptr[end - 1] == '\n' || ptr[end - 1] == ' ' ||
                            ptr[end - 1] == '\t'))
            end--;
        if (end - at > OA_IDENTITY_FIELD_MAX) end = at + OA_IDENTITY_FIELD_MAX;
        buf_free(server);
        /* An empty value is still a header sent: buf_add("") gives "". */
        if (!buf_add(server, ptr + at, end - at)) return 0;
        if (server->p == NULL && !buf_add(server, "", 0)) return 0;
    }
    return n;
}

/* GET url with ep's headers within timeout_s. On a completed transfer
 * returns true with *code and body, and (server not NULL) the reply's
 * Server header in *server (p NULL when none was sent); else false with the
 * reason in why. */
static bool http_call(const oa_endpoint *ep, const char *url, const char *post_body,
                      double timeout_s, long *code, buf *body, buf *server, char *why,
                      size_t why_size)
{
    char errbuf[CURL_ERROR_SIZE] = "";
    *code = 0;
    CURL *h = curl_easy_init();
    if (h == NULL) {
        snprintf(why, why_size, "curl_easy_init failed");
        return false;
    }
    long ms = (long)ceil(timeout_s * 1000.0);
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, post_body ? ep->post_headers : ep->get_headers);
    if (post_body != NULL) {
        curl_easy_setopt(h, CURLOPT_POST, 1L);
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, post_body);
        curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)strlen(post_body));
    }
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, collect_body);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, body);
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, errbuf);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, ms > 0 ? ms : 1L);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, (long)ceil(ep->opt.connect_timeout_s * 1000.0));
    curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
    if (server != NULL) {
        curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, collect_server_header);
        curl_easy_setopt(h, CURLOPT_HEADERDATA, server);
    }
    CURLcode rc = curl_easy_perform(h);
    if (rc == CURLE_OK) curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, code);
    else snprintf(why, why_size, "%s", errbuf[0] ? errbuf : curl_easy_strerror(rc));
    curl_easy_cleanup(h);
    scrub(why, ep->api_key);
    return rc == CURLE_OK;
}

pg_status oa_call(oa_endpoint *ep, const char *method, const char *path, const char *body_json,
                  double timeout_s, long *code, char **reply, size_t *reply_len, pg_err *err)
{
    if (ep == NULL || method == NULL || path == NULL || code == NULL || reply == NULL ||
        reply_len == NULL || !(timeout_s > 0))
        return pg_fail(err, PG_ERR_USAGE, "oa_call: an argument is NULL or the timeout not > 0");
    const bool post = strcmp(method, "POST") == 0;
    if (!post && strcmp(method, "GET") != 0)
        return pg_fail(err, PG_ERR_USAGE, "oa_call: method %s is neither GET nor POST", method);
    if (post != (body_json != NULL))
        return pg_fail(err, PG_ERR_USAGE, "oa_call: %s %s: a POST needs a body, a GET has none",
                       method, path);
    *reply = NULL;
    *reply_len = 0;
    char *url = NULL;
    if (join_url(ep->base_url, ep->base_len, path, &url) != PG_OK)
        return pg_fail(err, PG_ERR_NOMEM, "out of memory for %s %s", method, path);
    buf body = {0};
    char why[OA_ERR_MAX] = "";
    pg_status st = PG_OK;
    if (!http_call(ep, url, body_json, timeout_s, code, &body, NULL, why, sizeof why)) {
        st = pg_fail(err, PG_ERR_HTTP, "%s %s: %s", method, url, why);
        buf_free(&body);
    } else if (body.p == NULL && !buf_add(&body, "", 0)) {
        st = pg_fail(err, PG_ERR_NOMEM, "out of memory for %s %s", method, url);
    } else {
        *reply = body.p;
        *reply_len = body.len;
    }
    free(url);
    return st;
}

/* Reads a ModelList body ({"data":[{"id":...},...]}): the first id into
 * *first (malloc'd) and whether want (may be NULL) is listed into *found.
 * PG_ERR_FORMAT when the body is no such list or lists none, PG_ERR_NOMEM. */
static pg_status parse_models(const buf *body, const char *want, char **first, bool *found,
                              pg_err *err)
{
    *first = NULL;
    *found = false;
    cJSON *root = body->p ? cJSON_ParseWithLength(body->p, body->len) : NULL;
    const cJSON *data = cJSON_GetObjectItemCaseSensitive(root, "data");
    pg_status st = PG_OK;
    if (!cJSON_IsArray(data))
        st = pg_fail(err, PG_ERR_FORMAT, "reply is not a model list (no \"data\" array)");
    const cJSON *m;
    cJSON_ArrayForEach(m, data)
    {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(m, "id");
        if (!cJSON_IsString(id)) continue;
        if (*first == NULL && (*first = strdup(id->valuestring)) == NULL) {
            st = pg_fail(err, PG_ERR_NOMEM, "out of memory");
            break;
        }
        if (want && strcmp(want, id->valuestring) == 0) *found = true;
    }
    if (st == PG_OK && *first == NULL) st = pg_fail(err, PG_ERR_FORMAT, "no model listed");
    cJSON_Delete(root);
    return st;
}


/* "HTTP <code>: <server message>" for a non-200 reply into why. */
static void http_status_why(const oa_endpoint *ep, long code, const buf *body, char *why,
                            size_t why_size)
{
    char msg[OA_MSG_SNIPPET + 4];
    server_message(body->p, body->len, msg, sizeof msg);
    snprintf(why, why_size, "HTTP %ld: %s", code, msg);
    scrub(why, ep->api_key);
}

/* Fields of a /v1/models entry an identity keeps besides its id: what a
 * server's launch sets (vLLM's ModelCard in vllm/entrypoints/openai/
 * protocol.py: owned_by, root, parent, max_model_len; llama-server's meta:
 * the model file's n_params, size, n_ctx_train). created and permission are
 * not: vLLM makes them anew for each request. */
static const char *const k_identity_fields[] = {"owned_by", "root", "parent", "max_model_len",
                                                "meta"};

/* qsort order of C strings. */
static int by_text(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Keeps in ep what the ready /v1/models reply (body, with its Server
 * header) says of the server: the canonical model list (oa_identity) and
 * the header. PG_ERR_NOMEM only; a body parse_models accepted is a list. */
static pg_status keep_identity(oa_endpoint *ep, const buf *body, const buf *server, pg_err *err)
{
    cJSON *root = cJSON_ParseWithLength(body->p, body->len);
    const cJSON *data = cJSON_GetObjectItemCaseSensitive(root, "data");
    const int n = cJSON_GetArraySize(data);
    char **entries = calloc((size_t)n + 1, sizeof *entries);
    bool ok = entries != NULL, beyond = false;
    int k = 0;
    const cJSON *m;
    cJSON_ArrayForEach(m, data)
    {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(m, "id");
        if (!ok || !cJSON_IsString(id)) continue;
        cJSON *e = cJSON_CreateObject();
        ok = e != NULL && cJSON_AddStringToObject(e, "id", id->valuestring) != NULL;
        for (size_t f = 0; ok && f < sizeof k_identity_fields / sizeof *k_identity_fields; f++) {
            const cJSON *v = cJSON_GetObjectItemCaseSensitive(m, k_identity_fields[f]);
            if (v == NULL || cJSON_IsNull(v)) continue;
            ok = cJSON_AddItemToObject(e, k_identity_fields[f], cJSON_Duplicate(v, 1));
            beyond = true;
        }
        if (ok) ok = (entries[k++] = cJSON_PrintUnformatted(e)) != NULL;
        cJSON_Delete(e);
    }
    cJSON_Delete(root);
    buf list = {0};
    if (ok) qsort(entries, (size_t)k, sizeof *entries, by_text);
    ok = ok && buf_add(&list, "[", 1);
    for (int i = 0; ok && i < k; i++)
        ok = (i == 0 || buf_add(&list, ",", 1)) && buf_add(&list, entries[i], strlen(entries[i]));
    ok = ok && buf_add(&list, "]", 1);
    for (int i = 0; entries != NULL && i < k; i++) free(entries[i]);
    free(entries);
    free(ep->id_models);
    free(ep->id_server);
    ep->id_models = ok ? list.p : NULL;
    ep->id_server = NULL;
    if (!ok) buf_free(&list);
    if (ok && server->p != NULL) ok = (ep->id_server = strdup(server->p)) != NULL;
    ep->id_beyond_ids = beyond;
    if (!ok) return pg_fail(err, PG_ERR_NOMEM, "out of memory keeping the identity of %s",
                            ep->base_url);
    return PG_OK;
}

/* Whether o's stop flag is set. */
static bool stop_requested(const oa_options *o)
{
    return o->stop != NULL && *o->stop != 0;
}

pg_status oa_wait_ready(oa_endpoint *ep, double deadline_s, pg_err *err)
{
    double end = pg_clock_mono_s() + deadline_s;
    char why[OA_ERR_MAX] = "no attempt made";
    const char *url = ep->url_health;
    for (;;) {  /* probes at least once, even past the deadline */
        double left = end - pg_clock_mono_s();
        double to = left < OA_PROBE_TIMEOUT_S ? left : OA_PROBE_TIMEOUT_S;
        if (to < OA_PROBE_MIN_TIMEOUT_S) to = OA_PROBE_MIN_TIMEOUT_S;
        buf body = {0};
        long code;
        url = ep->url_health;
        if (http_call(ep, url, NULL, to, &code, &body, NULL, why, sizeof why)) {
            if (code != 200) {
                http_status_why(ep, code, &body, why, sizeof why);
            } else {
                buf_free(&body);
                url = ep->url_models;
                buf server = {0};
                if (http_call(ep, url, NULL, to, &code, &body, &server, why, sizeof why)) {
                    char *first;
                    bool found;
                    pg_err e = {0};
                    if (code != 200) {
                        http_status_why(ep, code, &body, why, sizeof why);
                    } else if (parse_models(&body, ep->model, &first, &found, &e) != PG_OK) {
                        snprintf(why, sizeof why, "%s", e.msg);
                    } else {
                        pg_status st = keep_identity(ep, &body, &server, err);
                        buf_free(&body);
                        buf_free(&server);
                        if (st == PG_OK && ep->model != NULL && !found)
                            st = pg_fail(err, PG_ERR_HTTP,
                                         "%s: model '%s' is not served (it serves '%s', ...)", url,
                                         ep->model, first);
                        if (st != PG_OK) {
                            free(first);
                            return st;
                        }
                        if (ep->model == NULL) ep->model = first;
                        else free(first);
                        return PG_OK;
                    }
                }
                buf_free(&server);
            }
        }
        buf_free(&body);
        left = end - pg_clock_mono_s();
        if (stop_requested(&ep->opt))
            return pg_fail(err, PG_ERR_INTERRUPTED, "%s: interrupted while waiting for the "
                                                    "server", url);
        if (left <= 0) break;
        sleep_s(ep->opt.poll_s < left ? ep->opt.poll_s : left);
    }
    return pg_fail(err, PG_ERR_HTTP, "%s: server not ready after %.1f s (last: %s)", url,
                   deadline_s, why);
}

pg_status oa_model_name(oa_endpoint *ep, char **model, pg_err *err)
{
    *model = NULL;
    if (ep->model == NULL) {
        char why[OA_ERR_MAX] = "";
        buf body = {0};
        long code;
        bool found;
        bool ok = http_call(ep, ep->url_models, NULL, OA_PROBE_TIMEOUT_S, &code, &body, NULL, why,
                           sizeof why);
        if (ok && code != 200) {
            http_status_why(ep, code, &body, why, sizeof why);
            ok = false;
        }
        pg_err e = {0};
        if (ok && parse_models(&body, NULL, &ep->model, &found, &e) != PG_OK) {
            snprintf(why, sizeof why, "%s", e.msg);
            ok = false;
        }
        buf_free(&body);
        if (!ok) return pg_fail(err, PG_ERR_HTTP, "GET %s: %s", ep->url_models, why);
    }
    if ((*model = strdup(ep->model)) == NULL)
        return pg_fail(err, PG_ERR_NOMEM, "out of memory copying a model name");
    return PG_OK;
}

/* Asks GET /version once (OA_VERSION_TIMEOUT_S) and keeps what it said in
 * ep: the version, ABSENT for a 404 or 405, UNKNOWN for anything else.
 * PG_ERR_NOMEM only. */
static pg_status ask_version(oa_endpoint *ep, pg_err *err)
{
    ep->id_version_asked = true;
    ep->id_version_state = OA_VERSION_UNKNOWN;
    char why[OA_ERR_MAX] = "";
    buf body = {0};
    long code = 0;
    pg_status st = PG_OK;
    if (http_call(ep, ep->url_version, NULL, OA_VERSION_TIMEOUT_S, &code, &body, NULL, why, sizeof why)) {
        if (code == OA_HTTP_NOT_FOUND || code == OA_HTTP_METHOD_NOT_ALLOWED) {
            ep->id_version_state = OA_VERSION_ABSENT;
        } else if (code == 200) {
            cJSON *root = body.p ? cJSON_ParseWithLength(body.p, body.len) : NULL;
            const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, "version");
            if (cJSON_IsString(v)) {
                ep->id_version = strndup(v->valuestring, OA_IDENTITY_FIELD_MAX);
                if (ep->id_version == NULL) st = pg_fail(err, PG_ERR_NOMEM, "out of memory");
                else ep->id_version_state = OA_VERSION_ANSWERED;
            }
            cJSON_Delete(root);
        }
    }
    buf_free(&body);
    return st;
}

pg_status oa_server_identity(oa_endpoint *ep, oa_identity *id, pg_err *err)
{
    *id = (oa_identity){0};
    if (ep->id_models == NULL) return PG_OK;
    pg_status st = PG_OK;
    if (!ep->id_version_asked) st = ask_version(ep, err);
    if (st == PG_OK && ep->id_canonical == NULL) {
        const char *v = ep->id_version_state == OA_VERSION_ANSWERED ? ep->id_version
                        : ep->id_version_state == OA_VERSION_ABSENT ? "absent"
                                                                     : "unknown";
        const char *srv = ep->id_server ? ep->id_server : "-";
        const size_t n = strlen(ep->id_models) + strlen(srv) + strlen(v) + sizeof
                         "models= server= version=";
        if ((ep->id_canonical = malloc(n)) == NULL)
            st = pg_fail(err, PG_ERR_NOMEM, "out of memory");
        else snprintf(ep->id_canonical, n, "models=%s server=%s version=%s", ep->id_models, srv, v);
    }
    if (st != PG_OK) return st;
    *id = (oa_identity){ep->id_models, ep->id_beyond_ids, ep->id_server, ep->id_version_state,
                        ep->id_version, ep->id_canonical};
    return PG_OK;
}

int oa_identity_match(const oa_identity *a, const oa_identity *b, char *what, size_t size)
{
    if (size > 0) what[0] = '\0';
    if (a->models == NULL || b->models == NULL || strcmp(a->models, b->models) != 0) return 0;
    if ((a->server == NULL) != (b->server == NULL)) return 0;
    const bool same_server = a->server != NULL;
    if (same_server && strcmp(a->server, b->server) != 0) return 0;
    const oa_version_state va = a->version_state, vb = b->version_state;
    const bool both_versions = va == OA_VERSION_ANSWERED && vb == OA_VERSION_ANSWERED;
    if (both_versions && strcmp(a->version, b->version) != 0) return 0;
    /* One has the route, the other has none: different software. */
    if ((va == OA_VERSION_ANSWERED && vb == OA_VERSION_ABSENT) ||
        (va == OA_VERSION_ABSENT && vb == OA_VERSION_ANSWERED))
        return 0;
    if (!a->models_beyond_ids && !same_server && !both_versions) return 0;
    int n = snprintf(what, size, "models %s", a->models);
    if (same_server && n >= 0 && (size_t)n < size)
        n += snprintf(what + n, size - (size_t)n, ", Server header '%s'", a->server);
    if (n >= 0 && (size_t)n < size) {
        if (both_versions)
            snprintf(what + n, size - (size_t)n, ", /version '%s'", a->version);
        else if (va == OA_VERSION_ABSENT && vb == OA_VERSION_ABSENT)
            snprintf(what + n, size - (size_t)n, ", neither has /version");
        else
            snprintf(what + n, size - (size_t)n, ", /version not compared (no usable answer)");
    }
    return 1;
}

int oa_url_normalise(const char *base_url, char *out, size_t size)
{
    if (size == 0) return -1;
    snprintf(out, size, "%s", base_url ? base_url : "");
    if (base_url == NULL) return -1;
    long default_port;
    size_t scheme_len;
    if (strncasecmp(base_url, "http://", 7) == 0) {
        default_port = OA_HTTP_DEFAULT_PORT;
        scheme_len = 7;
    } else if (strncasecmp(base_url, "https://", 8) == 0) {
        default_port = OA_HTTPS_DEFAULT_PORT;
        scheme_len = 8;
    } else {
        return -1;
    }
    const char *host = base_url + scheme_len;
    const size_t host_len = strcspn(host, "/?#");
    if (host_len == 0) return -1;
    /* The port: after the last ':' that is not inside an IPv6 literal's []. */
    const char *close = memchr(host, ']', host_len);
    const char *from = close ? close : host;
    const char *colon = NULL;
    for (const char *p = from; p < host + host_len; p++)
        if (*p == ':') colon = p;
    size_t name_len = colon ? (size_t)(colon - host) : host_len;
    long port = default_port;
    if (colon != NULL && colon + 1 < host + host_len) {
        char *end = NULL;
        port = strtol(colon + 1, &end, 10);
        if (end != host + host_len || port < 0) return -1;
    }
    /* The path, without trailing slashes and one trailing "/v1". */
    const char *path = host + host_len;
    size_t path_len = strlen(path);
    while (path_len > 0 && path[path_len - 1] == '/') path_len--;
    if (path_len >= 3 && memcmp(path + path_len - 3, "/v1", 3) == 0) path_len -= 3;
    while (path_len > 0 && path[path_len - 1] == '/') path_len--;
    char port_text[24] = "";
    if (port != default_port) snprintf(port_text, sizeof port_text, ":%ld", port);
    const size_t need = scheme_len + name_len + strlen(port_text) + path_len + 1;
    if (need > size) return -1;
    size_t k = 0;
    for (size_t i = 0; i < scheme_len; i++) out[k++] = (char)tolower((unsigned char)base_url[i]);
    for (size_t i = 0; i < name_len; i++) out[k++] = (char)tolower((unsigned char)host[i]);
    memcpy(out + k, port_text, strlen(port_text));
    k += strlen(port_text);
    memcpy(out + k, path, path_len);
    k += path_len;
    out[k] = '\0';
    return 0;
}

/* ------------------------------------------------------------------------ */
/* request bodies                                                           */
/* ------------------------------------------------------------------------ */

const char *oa_prompt_template(void)
{
    return OA_AIME_PROMPT_HEAD "{problem}" OA_AIME_PROMPT_TAIL;
}

oa_sampling oa_sampling_default(void)
{
    return (oa_sampling){.temperature = 1.0, .top_p = -1.0, .stream = 1};
}

pg_status oa_build_chat_body(const char *model, const char *messages_json, const char *problem,
                             const oa_sampling *s, char **out, pg_err *err)
{
    *out = NULL;
    oa_sampling def = oa_sampling_default();
    if (s == NULL) s = &def;
    if (model == NULL || model[0] == '\0')
        return pg_fail(err, PG_ERR_USAGE, "chat request: no model name");
    if (!isfinite(s->temperature) || s->temperature < 0)
        return pg_fail(err, PG_ERR_USAGE, "chat request: temperature %g must be >= 0",
                       s->temperature);
    if (s->top_p >= 0 && !(s->top_p > 0 && s->top_p <= 1))
        return pg_fail(err, PG_ERR_USAGE, "chat request: top_p %g must be in (0, 1]", s->top_p);
    if (s->reasoning_effort != NULL) {
        bool known = false;
        for (size_t i = 0; i < sizeof k_efforts / sizeof *k_efforts; i++)
            known = known || strcmp(s->reasoning_effort, k_efforts[i]) == 0;
        if (!known)
            return pg_fail(err, PG_ERR_USAGE,
                           "chat request: reasoning_effort '%s' is not one vLLM accepts "
                           "(none, minimal, low, medium, high, xhigh, max)",
                           s->reasoning_effort);
    }

    cJSON *messages = NULL;
    if (messages_json != NULL) {
        messages = cJSON_Parse(messages_json);
        if (!cJSON_IsArray(messages) || cJSON_GetArraySize(messages) == 0) {
            cJSON_Delete(messages);
            return pg_fail(err, PG_ERR_USAGE,
                           "chat request: messages must be a non-empty JSON array");
        }
    } else {
        if (problem == NULL)
            return pg_fail(err, PG_ERR_USAGE, "chat request: neither messages nor a problem given");
        size_t n = strlen(OA_AIME_PROMPT_HEAD) + strlen(problem) + strlen(OA_AIME_PROMPT_TAIL) + 1;
        char *text = malloc(n);
        cJSON *msg = cJSON_CreateObject();
        if (text) snprintf(text, n, "%s%s%s", OA_AIME_PROMPT_HEAD, problem, OA_AIME_PROMPT_TAIL);
        if (text && msg && (messages = cJSON_CreateArray()) &&
            cJSON_AddStringToObject(msg, "role", "user") &&
            cJSON_AddStringToObject(msg, "content", text) && cJSON_AddItemToArray(messages, msg)) {
            msg = NULL;  /* owned by messages now */
        } else {
            cJSON_Delete(messages);
            messages = NULL;
        }
        cJSON_Delete(msg);
        free(text);
        if (messages == NULL)
            return pg_fail(err, PG_ERR_NOMEM, "out of memory building a chat request");
    }

    char num[32];
    cJSON *root = cJSON_CreateObject();
    bool ok = root && cJSON_AddStringToObject(root, "model", model);
    if (ok) {
        ok = cJSON_AddItemToObject(root, "messages", messages);
        if (ok) messages = NULL;
    }
    ok = ok && cJSON_AddNumberToObject(root, "temperature", s->temperature);
    if (ok && s->top_p >= 0) ok = cJSON_AddNumberToObject(root, "top_p", s->top_p);
    if (ok && s->max_tokens > 0) {
        snprintf(num, sizeof num, "%ld", s->max_tokens);
        ok = cJSON_AddRawToObject(root, "max_tokens", num);
    }
    if (ok && s->has_seed) {  /* raw: a double would round seeds past 2^53 */
        snprintf(num, sizeof num, "%lld", (long long)s->seed);
        ok = cJSON_AddRawToObject(root, "seed", num);
    }
    if (ok && s->reasoning_effort)
        ok = cJSON_AddStringToObject(root, "reasoning_effort", s->reasoning_effort);
    if (ok) ok = cJSON_AddBoolToObject(root, "stream", s->stream != 0);
    if (ok && s->return_token_ids) ok = cJSON_AddBoolToObject(root, "return_token_ids", true);
    if (ok && s->stream) {
        cJSON *so = cJSON_AddObjectToObject(root, "stream_options");
        ok = so && cJSON_AddTrueToObject(so, "include_usage");
    }
    if (ok) ok = (*out = cJSON_PrintUnformatted(root)) != NULL;
    cJSON_Delete(messages);
    cJSON_Delete(root);
    if (!ok) return pg_fail(err, PG_ERR_NOMEM, "out of memory building a chat request");
    return PG_OK;
}

/* ------------------------------------------------------------------------ */
/* one request's transfer state                                             */
/* ------------------------------------------------------------------------ */

typedef enum xf_state { XF_QUEUED, XF_ACTIVE, XF_WAITING, XF_DONE } xf_state;
/* How the current attempt's reply body is read. */
typedef enum rx_mode { RX_UNDECIDED, RX_SSE, RX_WHOLE, RX_READER } rx_mode;

/* One request across its attempts. */
typedef struct xfer {
    oa_request *req;
    oa_endpoint *ep;        /* the server of the current (or last) attempt */
    int group;              /* index of its mode in run.g */
    int srv;                /* the server it holds a slot on (run.s), or -1 */
    int failed_on;          /* the server its last attempt failed on, or -1 */
    int waits_on;           /* several servers per mode: the server whose
                               load counts this retry's wait, or -1 */
    bool stream;            /* the body asks for a streamed reply */
    char *url;              /* the current attempt's URL (a reader's path on its
                               server), or NULL: the server's chat URL */
    bool reader_stopped;    /* RX_READER: feed refused the body */
    xf_state state;
    CURL *easy;
    int attempts;
    double started;         /* monotonic start of the current attempt */
    double last_rx;         /* its start, the read that found its request sending
                               progress, or the arrival of its last body byte */
    double not_before;      /* XF_WAITING: earliest start of the next attempt */
    char errbuf[CURL_ERROR_SIZE];
    /* the current attempt's reply */
    rx_mode rx;
    buf body;               /* RX_WHOLE: the body; RX_SSE: bytes not yet parsed */
    buf event;              /* RX_SSE: data lines of the event being read */
    buf content, reasoning; /* p NULL: never present */
    char *finish_reason;
    long prompt_tokens, completion_tokens;
    bool sse_done;          /* "data: [DONE]" seen */
    char *stream_error;     /* message of an error event */
    long stream_error_code;
    bool too_big;           /* a cap was hit: the attempt was aborted */
    bool bad_event;         /* an event was not JSON */
    bool got_choice;        /* some reply object or event carried a choices[0] */
    int32_t *prompt_ids;    /* top-level prompt_token_ids, NULL: none */
    size_t n_prompt_ids;
    int32_t *ids;           /* choices[0].token_ids, joined over events; NULL: none */
    size_t n_ids, cap_ids;
    bool ids_bad;           /* an entry of either was no token id */
    bool headers_done;      /* the final (non-1xx) response headers are complete */
    bool body_started;      /* a body byte has arrived */
    curl_off_t sent;        /* request body bytes handed to the kernel, as last seen */
} xfer;

/* Clears the per-attempt reply state of x. */
static void reply_reset(xfer *x)
{
    buf_free(&x->body);
    buf_free(&x->event);
    buf_free(&x->content);
    buf_free(&x->reasoning);
    free(x->finish_reason);
    free(x->stream_error);
    x->finish_reason = x->stream_error = NULL;
    free(x->prompt_ids);
    free(x->ids);
    x->prompt_ids = x->ids = NULL;
    x->n_prompt_ids = x->n_ids = x->cap_ids = 0;
    x->ids_bad = false;
    x->rx = RX_UNDECIDED;
    x->prompt_tokens = x->completion_tokens = -1;
    x->sse_done = x->too_big = x->bad_event = x->got_choice = x->reader_stopped = false;
    x->headers_done = x->body_started = false;
    x->sent = 0;
    x->stream_error_code = 0;
    x->errbuf[0] = '\0';
}

/* Appends a JSON string value (when it is one) to field, marking it present. */
static bool add_text(xfer *x, buf *field, const cJSON *v)
{
    if (!cJSON_IsString(v)) return true;
    if (!buf_add(field, v->valuestring, strlen(v->valuestring))) {
        x->too_big = true;
        return false;
    }
    return true;
}

/* The server's integer v when it is a JSON number, integral and in [lo, hi];
 * else absent. Checked before the conversion: converting a double outside
 * long's range (1e300) or a NaN to long is undefined behaviour (C17 6.3.1.4). */
static long json_long_in(const cJSON *v, long lo, long hi, long absent)
{
    if (!cJSON_IsNumber(v)) return absent;
    const double d = v->valuedouble;
    if (!(d >= (double)lo && d <= (double)hi) || d != floor(d)) return absent;
    return (long)d;
}

/* Appends the token ids of array a (every entry an integer in 0 ..
 * INT32_MAX, else ids_bad) to *v (*n of them, *cap allocated); false when
 * out of memory. */
static bool add_ids(xfer *x, const cJSON *a, int32_t **v, size_t *n, size_t *cap)
{
    if (!cJSON_IsArray(a)) {
        x->ids_bad = true;
        return true;
    }
    const size_t k = (size_t)cJSON_GetArraySize(a);
    if (*n + k > *cap) {
        size_t nc = *cap ? *cap : 256;
        while (nc < *n + k) nc *= 2;
        int32_t *g = realloc(*v, nc * sizeof *g);
        if (g == NULL) return false;
        *v = g;
        *cap = nc;
    }
    for (const cJSON *e = a->child; e != NULL; e = e->next) {
        const long id = json_long_in(e, 0, INT32_MAX, -1);
        if (id < 0) x->ids_bad = true;
        else (*v)[(*n)++] = (int32_t)id;
    }
    if (*v == NULL) *v = malloc(sizeof **v);  /* present and empty: not NULL */
    return *v != NULL;
}

/* Takes what one reply object carries: an error, choices[0]'s message (or,
 * when delta, its delta) text and finish_reason, and usage. false when a cap
 * is hit. "reasoning" wins over the older "reasoning_content" when a server
 * sends both. */
static bool take_reply(xfer *x, const cJSON *root, bool delta)
{
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(root, "error");
    if (e != NULL && !cJSON_IsNull(e)) {
        const cJSON *m = cJSON_GetObjectItemCaseSensitive(e, "message");
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(e, "code");
        const char *msg = cJSON_IsString(m)   ? m->valuestring
                          : cJSON_IsString(e) ? e->valuestring
                                              : "(no message)";
        if (x->stream_error == NULL) x->stream_error = strdup(msg ? msg : "");
        /* Only an HTTP status says whether to retry; any other code
         * (OpenAI's are strings, a broken server's may be 1e300) is unknown. */
        x->stream_error_code = json_long_in(c, OA_HTTP_STATUS_MIN, OA_HTTP_STATUS_MAX, 0);
        return true;
    }
    const cJSON *choices = cJSON_GetObjectItemCaseSensitive(root, "choices");
    const cJSON *c0 = cJSON_IsArray(choices) ? cJSON_GetArrayItem(choices, 0) : NULL;
    const cJSON *pids = cJSON_GetObjectItemCaseSensitive(root, "prompt_token_ids");
    if (pids != NULL && !cJSON_IsNull(pids)) {
        free(x->prompt_ids);  /* a stream repeats it: the last one counts */
        x->prompt_ids = NULL;
        x->n_prompt_ids = 0;
        size_t cap = 0;
        if (!add_ids(x, pids, &x->prompt_ids, &x->n_prompt_ids, &cap)) {
            x->too_big = true;
            return false;
        }
    }
    if (cJSON_IsObject(c0)) {
        const cJSON *tids = cJSON_GetObjectItemCaseSensitive(c0, "token_ids");
        if (tids != NULL && !cJSON_IsNull(tids) &&
            !add_ids(x, tids, &x->ids, &x->n_ids, &x->cap_ids)) {
            x->too_big = true;
            return false;
        }
    }
    if (cJSON_IsObject(c0)) {  /* cJSON_GetArrayItem would take an object's first member too */
        x->got_choice = true;
        const cJSON *m = cJSON_GetObjectItemCaseSensitive(c0, delta ? "delta" : "message");
        const cJSON *r = cJSON_GetObjectItemCaseSensitive(m, "reasoning");
        if (!cJSON_IsString(r)) r = cJSON_GetObjectItemCaseSensitive(m, "reasoning_content");
        if (!add_text(x, &x->content, cJSON_GetObjectItemCaseSensitive(m, "content")) ||
            !add_text(x, &x->reasoning, r))
            return false;
        const cJSON *f = cJSON_GetObjectItemCaseSensitive(c0, "finish_reason");
        if (cJSON_IsString(f)) {
            free(x->finish_reason);
            x->finish_reason = strdup(f->valuestring);
        }
    }
    const cJSON *u = cJSON_GetObjectItemCaseSensitive(root, "usage");
    const cJSON *pt = cJSON_GetObjectItemCaseSensitive(u, "prompt_tokens");
    const cJSON *ct = cJSON_GetObjectItemCaseSensitive(u, "completion_tokens");
    /* Usage only informs (it is stored, never graded): a count out of range,
     * fractional or not a number is dropped (-1, "absent"), the answer kept. */
    if (pt != NULL) x->prompt_tokens = json_long_in(pt, 0, OA_MAX_USAGE_TOKENS, -1);
    if (ct != NULL) x->completion_tokens = json_long_in(ct, 0, OA_MAX_USAGE_TOKENS, -1);
    return true;
}

/* Handles the end of one server-sent event (a blank line). */
static bool sse_dispatch(xfer *x)
{
    if (x->event.len == 0) return true;
    bool ok = true;
    if (strcmp(x->event.p, "[DONE]") == 0) {
        x->sse_done = true;
    } else {
        cJSON *root = cJSON_ParseWithLength(x->event.p, x->event.len);
        if (!cJSON_IsObject(root)) x->bad_event = true;
        else ok = take_reply(x, root, true);
        cJSON_Delete(root);
    }
    x->event.len = 0;
    x->event.p[0] = '\0';
    return ok;
}

/* Handles one line of an event stream (without its line break). Only
 * "data:" fields matter; comments and other fields are skipped. */
static bool sse_line(xfer *x, const char *line, size_t len)
{
    if (len == 0) return sse_dispatch(x);
    if (len < 5 || memcmp(line, "data:", 5) != 0) return true;
    line += 5;
    len -= 5;
    if (len > 0 && line[0] == ' ') line++, len--;
    if ((x->event.len > 0 && !buf_add(&x->event, "\n", 1)) || !buf_add(&x->event, line, len)) {
        x->too_big = true;
        return false;
    }
    return true;
}

/* Parses every complete line buffered in x->body and keeps the rest. */
static bool sse_feed(xfer *x)
{
    size_t start = 0;
    bool ok = true;
    for (;;) {
        char *nl = memchr(x->body.p + start, '\n', x->body.len - start);
        if (nl == NULL) break;
        size_t end = (size_t)(nl - x->body.p), len = end - start;
        if (len > 0 && x->body.p[start + len - 1] == '\r') len--;
        ok = sse_line(x, x->body.p + start, len);
        start = end + 1;
        if (!ok) break;
    }
    memmove(x->body.p, x->body.p + start, x->body.len - start);
    x->body.len -= start;
    x->body.p[x->body.len] = '\0';
    return ok;
}

/* libcurl header callback of a chat request (one header line per call):
 * the blank line that ends a final (2xx-5xx) response's headers marks them
 * complete. A 1xx interim response's blank line does not: its final
 * response is still to come. */
static size_t on_chat_header(char *ptr, size_t size, size_t nmemb, void *userdata)
{
    xfer *x = userdata;
    const size_t n = size * nmemb;
    if ((n == 2 && ptr[0] == '\r' && ptr[1] == '\n') || (n == 1 && ptr[0] == '\n')) {
        long code = 0;
        curl_easy_getinfo(x->easy, CURLINFO_RESPONSE_CODE, &code);
        if (code >= OA_HTTP_FINAL_MIN) x->headers_done = true;
    }
    return n;
}

/* libcurl write callback of a chat request: decides on the first bytes
 * whether the reply is an event stream (2xx text/event-stream) or one body. */
static size_t on_chat_body(char *ptr, size_t size, size_t nmemb, void *userdata)
{
    xfer *x = userdata;
    size_t n = size * nmemb;
    x->last_rx = pg_clock_mono_s();
    if (n > 0) x->body_started = true;
    if (x->rx == RX_UNDECIDED) {
        long code = 0;
        char *ct = NULL;
        curl_easy_getinfo(x->easy, CURLINFO_RESPONSE_CODE, &code);
        curl_easy_getinfo(x->easy, CURLINFO_CONTENT_TYPE, &ct);
        const oa_reply_reader *rd = x->req->reader;
        x->rx = (rd != NULL && code / 100 == 2)                                        ? RX_READER
                : (code / 100 == 2 && ct && strncasecmp(ct, "text/event-stream", 17) == 0) ? RX_SSE
                                                                                           : RX_WHOLE;
    }
    if (x->rx == RX_READER) {
        if (x->req->reader->feed(x->req->reader_ctx, ptr, n)) return n;
        x->reader_stopped = true;
        return 0;
    }
    if (!buf_add(&x->body, ptr, n)) {
        x->too_big = true;
        return 0;
    }
    if (x->rx == RX_SSE && !sse_feed(x)) return 0;
    return n;
}

/* ------------------------------------------------------------------------ */
/* the run                                                                  */
/* ------------------------------------------------------------------------ */

/* One server's share of a run, and its health (kept only for modes with
 * several servers: openai_client.h). */
typedef struct srv_state {
    oa_endpoint *ep;
    int group;          /* its mode's index in run.g */
    int held;           /* requests holding a slot on it: active, or (a mode with
                           one server) waiting to retry */
    int waiting;        /* retries of a mode with several servers that failed here
                           and wait, holding no slot: counted in its load */
    int fails;          /* consecutive failed attempts since its last success */
    int outs;           /* times taken out since its last success */
    double out_until;   /* monotonic: out of service until then (0: not out) */
    bool probing;       /* back from a back-off, no success yet */
} srv_state;

/* The requests of one mode and how many servers they may go to. */
typedef struct mode_group {
    const char *mode;
    int next;           /* first index of reqs not yet looked at for this mode */
    int n_srv;
} mode_group;

/* The state of one oa_run() call. */
typedef struct run {
    CURLM *multi;
    xfer *x;
    int n;
    srv_state *s;      /* one per endpoint, in the caller's order */
    int n_s;
    mode_group *g;     /* one per distinct mode */
    int n_g;
    xfer **held;       /* every request started and not yet reported */
    int n_held;
    oa_progress prog;
    rng_xoshiro256 rng; /* the jitter's generator */
    oa_done_fn on_done;
    void *ctx;
} run;

/* Whether a libcurl failure is worth another attempt: the network or the
 * server went away or was too slow, not a local or protocol mistake. */
static bool curl_retryable(CURLcode rc)
{
    switch (rc) {
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_CONNECT:
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_SEND_ERROR:
    case CURLE_RECV_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_PARTIAL_FILE:
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
        return true;
    default:
        return false;
    }
}

/* Whether an HTTP status is worth another attempt: 408, 429 and 5xx. */
static bool status_retryable(long code)
{
    return code == 408 || code == 429 || code >= 500;
}

/* Creates x's easy handle (once) and starts its next attempt. */
static pg_status start_attempt(run *r, xfer *x, pg_err *err)
{
    const oa_options *o = &x->ep->opt;
    reply_reset(x);
    if (x->easy == NULL) {
        CURL *h = x->easy = curl_easy_init();
        if (h == NULL) return pg_fail(err, PG_ERR_NOMEM, "curl_easy_init failed");
        const char *body = x->req->body_json;
        curl_easy_setopt(h, CURLOPT_POST, 1L);
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)strlen(body));
        curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_chat_body);
        curl_easy_setopt(h, CURLOPT_WRITEDATA, x);
        curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_chat_header);
        curl_easy_setopt(h, CURLOPT_HEADERDATA, x);
        curl_easy_setopt(h, CURLOPT_PRIVATE, x);
        curl_easy_setopt(h, CURLOPT_ERRORBUFFER, x->errbuf);
        curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
        curl_easy_setopt(h, CURLOPT_TCP_KEEPALIVE, 1L);
    }
    /* Every attempt: a retry may go to another server of the mode. */
    const oa_reply_reader *rd = x->req->reader;
    if (rd != NULL) {
        free(x->url);
        x->url = NULL;
        if (join_url(x->ep->base_url, x->ep->base_len, rd->path, &x->url) != PG_OK)
            return pg_fail(err, PG_ERR_NOMEM, "out of memory for a request URL");
        if (rd->begin) rd->begin(x->req->reader_ctx);
    }
    curl_easy_setopt(x->easy, CURLOPT_URL, x->url ? x->url : x->ep->url_chat);
    curl_easy_setopt(x->easy, CURLOPT_HTTPHEADER, x->ep->post_headers);
    curl_easy_setopt(x->easy, CURLOPT_TIMEOUT_MS, (long)ceil(o->timeout_s * 1000.0));
    curl_easy_setopt(x->easy, CURLOPT_CONNECTTIMEOUT_MS,
                     (long)ceil(o->connect_timeout_s * 1000.0));
    x->attempts++;
    x->started = x->last_rx = pg_clock_mono_s();
    x->state = XF_ACTIVE;
    CURLMcode mc = curl_multi_add_handle(r->multi, x->easy);
    if (mc != CURLM_OK)
        return pg_fail(err, PG_ERR_HTTP, "curl_multi_add_handle: %s", curl_multi_strerror(mc));
    return PG_OK;
}

/* Gives back the slot x holds on a server, if any, and ends the wait
 * counted against one. */
static void drop_slot(run *r, xfer *x)
{
    if (x->srv >= 0) r->s[x->srv].held--;
    if (x->waits_on >= 0) r->s[x->waits_on].waiting--;
    x->srv = x->waits_on = -1;
}

/* Moves x's slot to server k and points its next attempt there. */
static void take_slot(run *r, xfer *x, int k)
{
    if (x->waits_on >= 0) r->s[x->waits_on].waiting--;
    x->waits_on = -1;
    if (x->srv == k) return;
    drop_slot(r, x);
    r->s[k].held++;
    x->srv = k;
    x->ep = r->s[k].ep;
}

/* Whether server v is out of service at now. */
static bool srv_out(const srv_state *v, double now)
{
    return v->out_until > now;
}

/* Servers out of service at now. */
static int servers_out(const run *r, double now)
{
    int n = 0;
    for (int k = 0; k < r->n_s; k++) n += srv_out(&r->s[k], now);
    return n;
}

/* Whether group g has a server other than k in service at now; with
 * healthy, one that is also not on probation. */
static bool group_has_other(const run *r, int g, int k, double now, bool healthy)
{
    for (int j = 0; j < r->n_s; j++)
        if (j != k && r->s[j].group == g && !srv_out(&r->s[j], now) &&
            !(healthy && r->s[j].probing))
            return true;
    return false;
}

/* Whether group g has a server other than k in service and not on
 * probation. */
static bool group_has_healthy(const run *r, int g, int k, double now)
{
    return group_has_other(r, g, k, now, true);
}

/* Requests server k may hold at now: none while out; one while back on
 * probation and another server of its mode is healthy (a still-dead server
 * then costs one attempt, not a slot's worth); else max_in_flight. */
static int srv_cap(const run *r, int k, double now)
{
    const srv_state *v = &r->s[k];
    if (srv_out(v, now)) return 0;
    if (v->probing && group_has_healthy(r, v->group, k, now)) return 1;
    return v->ep->opt.max_in_flight;
}

/* The server of group g that takes a request at now: of those with a free
 * slot, the one with the least outstanding requests (slots held plus the
 * retries that failed there and wait), the lowest index on a tie; -1 when
 * none can. x, a retry (NULL: a new request), counts its own slot and wait
 * as free, and goes back to the server its last attempt failed on only
 * when no other server of the mode is in service: it rather waits for a
 * slot elsewhere than spends its attempts on a server that may be dead. */
static int pick_server(const run *r, int g, const xfer *x, double now)
{
    const int avoid = x != NULL && x->failed_on >= 0 &&
                              group_has_other(r, g, x->failed_on, now, false)
                          ? x->failed_on
                          : -1;
    int best = -1, best_load = 0;
    for (int k = 0; k < r->n_s; k++) {
        if (r->s[k].group != g || k == avoid) continue;
        const int held = r->s[k].held - (x != NULL && x->srv == k);
        if (held >= srv_cap(r, k, now)) continue;
        const int load = held + r->s[k].waiting - (x != NULL && x->waits_on == k);
        if (best < 0 || load < best_load) {
            best = k;
            best_load = load;
        }
    }
    return best;
}

/* The earliest time after now a server of group g comes back, or fallback. */
static double group_back_at(const run *r, int g, double now, double fallback)
{
    double t = fallback;
    for (int k = 0; k < r->n_s; k++)
        if (r->s[k].group == g && srv_out(&r->s[k], now) && r->s[k].out_until < t)
            t = r->s[k].out_until;
    return t;
}

/* Server k answered: its failures are forgiven, and a server that was taken
 * out is said to be back. */
static void srv_success(run *r, int k)
{
    srv_state *v = &r->s[k];
    if (v->outs > 0)
        pg_note_warning(v->ep->opt.notes, "server %s (mode %s) answers again: back in service",
                        v->ep->base_url, v->ep->mode);
    v->fails = v->outs = 0;
    v->probing = false;
    v->out_until = 0;
}

/* An attempt on server k failed with a retryable failure (why): counts it,
 * and takes the server out at OA_SERVER_FAIL_LIMIT in a row, or at once
 * while it is on probation. The back-off doubles per consecutive taking-out
 * while another server of the mode is healthy (a dead server among live
 * ones is tried ever more rarely); with none healthy it is the base alone:
 * the mode's requests wait for these servers, and a doubling wait per
 * round of attempts would stretch a dead mode's end from minutes to hours.
 * An attempt that started before the server was taken out is counted
 * without extending the back-off. A mode with one server keeps no health. */
static void srv_failure(run *r, int k, const char *why, double now)
{
    srv_state *v = &r->s[k];
    if (r->g[v->group].n_srv < 2) return;
    v->fails++;
    if (srv_out(v, now) || !(v->probing || v->fails >= OA_SERVER_FAIL_LIMIT)) return;
    const oa_options *o = &v->ep->opt;
    const bool others = group_has_healthy(r, v->group, k, now);
    double d = others ? ldexp(o->server_backoff_base_s, v->outs) : o->server_backoff_base_s;
    if (!(d < o->server_backoff_cap_s)) d = o->server_backoff_cap_s;
    v->outs += others;
    if (v->outs == 0) v->outs = 1;  /* taken out: its next success is said */
    v->probing = true;
    v->out_until = now + d;
    char msg[OA_ERR_MAX];
    snprintf(msg, sizeof msg, "%s", why);
    scrub(msg, v->ep->api_key);
    pg_note_warning(o->notes, "server %s (mode %s) taken out for %.3g s after %d consecutive "
                    "failed attempts (last: %s)", v->ep->base_url, v->ep->mode, d, v->fails, msg);
}

/* Frees x's handle and reply and gives its slot back. */
static void release(run *r, xfer *x)
{
    if (x->easy) {
        if (x->state == XF_ACTIVE) curl_multi_remove_handle(r->multi, x->easy);
        curl_easy_cleanup(x->easy);
        x->easy = NULL;
    }
    reply_reset(x);
    free(x->url);
    x->url = NULL;
    for (int i = 0; i < r->n_held; i++)
        if (r->held[i] == x) {
            r->held[i] = r->held[--r->n_held];
            break;
        }
    drop_slot(r, x);
    x->state = XF_DONE;
}

/* Reports x as finished with outcome (why is the reason for OA_ERROR, without
 * URL) and calls on_done. */
static pg_status report(run *r, xfer *x, oa_outcome outcome, long code, const char *why,
                        pg_err *err)
{
    char msg[OA_ERR_MAX] = "";
    oa_response resp = {
        .outcome = outcome,
        .http_status = (int)code,
        .attempts = x->attempts,
        .latency_ms = (pg_clock_mono_s() - x->started) * 1000.0,
        .prompt_tokens = x->prompt_tokens,
        .completion_tokens = x->completion_tokens,
        .server = x->ep->base_url,
    };
    if (outcome == OA_ERROR) {
        int k = snprintf(msg, sizeof msg, "POST %s: %s", x->url ? x->url : x->ep->url_chat, why);
        if (x->attempts > 1 && k > 0 && (size_t)k < sizeof msg)
            snprintf(msg + k, sizeof msg - (size_t)k, " (after %d attempts)", x->attempts);
        scrub(msg, x->ep->api_key);
        resp.error = msg;
        r->prog.errors++;
    } else {
        resp.content = x->content.p;
        resp.reasoning = x->reasoning.p;
        resp.token_ids_bad = x->ids_bad;
        if (!x->ids_bad) {
            resp.prompt_token_ids = x->prompt_ids;
            resp.n_prompt_token_ids = x->n_prompt_ids;
            resp.token_ids = x->ids;
            resp.n_token_ids = x->n_ids;
        }
        resp.finish_reason = x->finish_reason;
        if (outcome == OA_TRUNCATED) r->prog.truncated++;
        else r->prog.ok++;
    }
    r->prog.done++;
    r->prog.in_flight = r->n_held - 1;
    r->prog.servers_out = servers_out(r, pg_clock_mono_s());
    pg_status st = r->on_done ? r->on_done(r->ctx, x->req, &resp, &r->prog, err) : PG_OK;
    release(r, x);
    if (st != PG_OK) pg_fail(err, st, "the caller stopped the run after request %s#%d",
                             x->req->problem_id ? x->req->problem_id : "?", x->req->sample);
    return st;
}

/* Whether the complete 2xx reply of x holds no answer to grade, with the
 * reason in why: no choices[0], or what grade_gradable (the one rule for
 * server replies and recorded completions) finds missing. */
static bool answer_missing(const xfer *x, long code, char *why, size_t size)
{
    const bool sse = x->rx == RX_SSE;
    const char *kind = sse ? "streamed reply" : "reply", *f = x->finish_reason;
    if (!x->got_choice && !(f != NULL && strcmp(f, GRADE_FINISH_LENGTH) == 0)) {
        snprintf(why, size, "HTTP %ld: %s had no choices[0]", code, kind);
        return true;
    }
    const char *content = x->content.len > 0 ? x->content.p : x->content.p ? "" : NULL;
    pg_err what = {0};
    if (grade_gradable(content, f, sse ? "choices[0].delta.content" : "choices[0].message.content",
                       &what) == PG_OK)
        return false;
    snprintf(why, size, "HTTP %ld: %s %s", code, kind, what.msg);
    return true;
}

/* A reader's attempt whose transfer failed (rc) after its 2xx body began:
 * the reader is told the reply is not whole, and why is libcurl's reason. */
static void rd_finish_broken(xfer *x, CURLcode rc, char *why, size_t size)
{
    char ignored[OA_ERR_MAX];
    (void)x->req->reader->finish(x->req->reader_ctx, false, ignored, sizeof ignored);
    snprintf(why, size, "%s", x->errbuf[0] ? x->errbuf : curl_easy_strerror(rc));
}

/* Classifies the attempt of x that libcurl finished with rc: reports it,
 * or schedules another attempt with full-jitter backoff. */
static pg_status attempt_done(run *r, xfer *x, CURLcode rc, pg_err *err)
{
    char why[OA_ERR_MAX];
    long code = 0;
    bool retry = false;
    curl_easy_getinfo(x->easy, CURLINFO_RESPONSE_CODE, &code);
    curl_multi_remove_handle(r->multi, x->easy);
    x->state = XF_WAITING;

    if (x->rx == RX_READER && (rc == CURLE_OK || x->reader_stopped)) {
        const oa_reply_reader *rd = x->req->reader;
        why[0] = '\0';
        const oa_read_verdict v = rd->finish(x->req->reader_ctx, rc == CURLE_OK, why, sizeof why);
        if (v == OA_READ_OK) {
            srv_success(r, x->srv);
            return report(r, x, OA_OK, code, NULL, err);
        }
        char said[OA_ERR_MAX - OA_STATUS_PREFIX_MAX];
        snprintf(said, sizeof said, "%s", why[0] ? why : "the reader refused the reply");
        snprintf(why, sizeof why, "HTTP %ld: %s", code, said);
        retry = v == OA_READ_RETRY;
    } else if (x->rx == RX_READER) {  /* the transfer broke off mid-reply */
        rd_finish_broken(x, rc, why, sizeof why);
        retry = curl_retryable(rc);
    } else if (rc != CURLE_OK && x->too_big) {
        snprintf(why, sizeof why, "reply larger than %zu MiB", OA_MAX_BODY_BYTES >> 20);
    } else if (rc != CURLE_OK) {
        snprintf(why, sizeof why, "%s", x->errbuf[0] ? x->errbuf : curl_easy_strerror(rc));
        retry = curl_retryable(rc);
    } else if (code / 100 != 2) {
        char msg[OA_MSG_SNIPPET + 4];
        server_message(x->body.p, x->body.len, msg, sizeof msg);
        snprintf(why, sizeof why, "HTTP %ld: %s", code, msg);
        retry = status_retryable(code);
    } else {
        bool parsed = true;
        if (x->rx == RX_SSE) {
            if (x->body.len > 0) parsed = sse_line(x, x->body.p, x->body.len);
            parsed = parsed && sse_dispatch(x);
        } else if (x->rx == RX_WHOLE) {
            cJSON *root = cJSON_ParseWithLength(x->body.p, x->body.len);
            if (!cJSON_IsObject(root)) x->bad_event = true;
            else if (cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(root, "choices"), 0) ==
                         NULL &&
                     cJSON_GetObjectItemCaseSensitive(root, "error") == NULL)
                x->bad_event = true;
            else parsed = take_reply(x, root, false);
            cJSON_Delete(root);
        }
        if (!parsed || x->too_big) {
            snprintf(why, sizeof why, "HTTP %ld: reply larger than %zu MiB", code,
                     OA_MAX_BODY_BYTES >> 20);
        } else if (x->stream_error) {
            snprintf(why, sizeof why, "HTTP %ld: error in reply: %.*s", code, OA_MSG_SNIPPET,
                     x->stream_error);
            retry = x->stream_error_code == 0 || status_retryable(x->stream_error_code);
        } else if (x->rx == RX_UNDECIDED) {
            snprintf(why, sizeof why, "HTTP %ld: empty reply", code);
            retry = true;
        } else if (x->bad_event) {
            snprintf(why, sizeof why, "HTTP %ld: reply is not a chat completion", code);
            retry = true;
        } else if (x->rx == RX_SSE && !x->sse_done && x->finish_reason == NULL) {
            snprintf(why, sizeof why, "HTTP %ld: stream ended before its last event", code);
            retry = true;
        } else if (answer_missing(x, code, why, sizeof why)) {
            retry = true;  /* a broken 200 is the server's failure, never a wrong answer */
        } else {
            bool trunc = x->finish_reason && strcmp(x->finish_reason, "length") == 0;
            srv_success(r, x->srv);
            return report(r, x, trunc ? OA_TRUNCATED : OA_OK, code, NULL, err);
        }
    }
    for (char *p = why; *p; p++)  /* curl and servers may end messages with a newline */
        if (*p == '\n' || *p == '\r') *p = ' ';

    const double now = pg_clock_mono_s();
    if (retry) {
        srv_failure(r, x->srv, why, now);
        x->failed_on = x->srv;
    }
    if (!retry || x->attempts >= x->ep->opt.max_attempts)
        return report(r, x, OA_ERROR, code, why, err);
    /* With several servers, a retry waits without a slot: it may go to
     * another server, and slots held by waits that avoid their own server
     * could fill every server of the mode and stall the run. Its wait still
     * counts in the load of the server it failed on. One server: the slot
     * is kept, so a struggling server gets fewer new requests. */
    if (r->g[x->group].n_srv > 1) {
        const int on = x->srv;
        drop_slot(r, x);
        x->waits_on = on;
        r->s[on].waiting++;
    }

    const oa_options *o = &x->ep->opt;
    double ceil_s = ldexp(o->backoff_base_s, x->attempts - 1);
    if (!(ceil_s < o->backoff_cap_s)) ceil_s = o->backoff_cap_s;
    double delay = rng_xoshiro_open01(&r->rng) * ceil_s;
    curl_off_t after = 0;
    if ((code == 429 || code == 503) &&
        curl_easy_getinfo(x->easy, CURLINFO_RETRY_AFTER, &after) == CURLE_OK && after > 0) {
        double ra = (double)after < o->backoff_cap_s ? (double)after : o->backoff_cap_s;
        if (ra > delay) delay = ra;
    }
    x->not_before = now + delay;
    r->prog.retries++;
    return PG_OK;
}

/* Index of the next queued request of mode group g, or -1. */
static int next_queued(run *r, int g)
{
    mode_group *q = &r->g[g];
    while (q->next < r->n && (r->x[q->next].group != g || r->x[q->next].state != XF_QUEUED))
        q->next++;
    return q->next < r->n ? q->next : -1;
}

/* When x's attempt counts as stalled, as last seen; HUGE_VAL when it is not
 * watched. Only an active, streamed attempt is, and only while it waits for
 * its response headers once it has sent a byte of its request, or once its
 * first body byte has come: before that byte (resolving, connecting, TLS)
 * connect_timeout_s bounds it, and between the headers and the first body
 * byte the request waits in the server's queue, which timeout_s alone
 * bounds (stall_s: openai_client.h). */
static double stall_deadline(const xfer *x)
{
    if (x->state != XF_ACTIVE || !x->stream) return HUGE_VAL;
    if (!x->headers_done && x->sent == 0) return HUGE_VAL;
    if (x->headers_done && !x->body_started) return HUGE_VAL;
    return x->last_rx + x->ep->opt.stall_s;
}

/* Restarts the stall clock of x, waiting for its response headers, at
 * read_at when the read that began then sent more of its request: the
 * server is silent only once it has the request. Without this an attempt
 * started just before on_done blocked the loop would be blamed for the time
 * its request sat unsent. */
static void note_request_sent(xfer *x, double read_at)
{
    if (x->state != XF_ACTIVE || !x->stream || x->headers_done) return;
    curl_off_t sent = 0;
    curl_easy_getinfo(x->easy, CURLINFO_SIZE_UPLOAD_T, &sent);
    if (sent > x->sent) {
        x->sent = sent;
        x->last_rx = read_at;
    }
}

/* Fails, as retryable timeouts, the watched attempts whose last byte came
 * stall_s or more before read_at: the start of the curl_multi_perform()
 * that has just run. That call read whatever the kernel held for them, so
 * their silence is the server's. Judged against the clock instead, an
 * attempt would be failed for time this loop did not listen: blocked in
 * on_done (a full writer queue), stopped or starved of CPU, with its bytes
 * waiting unread in the socket. *failed: whether any was. */
static pg_status fail_stalled(run *r, double read_at, bool *failed, pg_err *err)
{
    pg_status st = PG_OK;
    for (int k = r->n_held - 1; k >= 0 && st == PG_OK; k--) {  /* down: a report drops held[k] */
        xfer *x = r->held[k];
        note_request_sent(x, read_at);
        if (stall_deadline(x) > read_at) continue;
        if (x->headers_done)
            snprintf(x->errbuf, sizeof x->errbuf,
                     "no byte received for %.1f s (stall timeout %g s) mid-stream",
                     read_at - x->last_rx, x->ep->opt.stall_s);
        else
            snprintf(x->errbuf, sizeof x->errbuf,
                     "no response headers %.1f s after the request was sent (stall timeout %g s)",
                     read_at - x->last_rx, x->ep->opt.stall_s);
        *failed = true;
        st = attempt_done(r, x, CURLE_OPERATION_TIMEDOUT, err);
    }
    return st;
}

/* Starts what may start now: due retries first (they are the older
 * requests), each on the server pick_server chooses, then new requests into
 * free slots. *wait_ms: milliseconds until the next retry, stall deadline or
 * return of a server that work waits for (at most OA_MAX_POLL_MS). */
static pg_status start_ready(run *r, long *wait_ms, pg_err *err)
{
    pg_status st = PG_OK;
    const double now = pg_clock_mono_s();
    for (int k = 0; k < r->n_held && st == PG_OK; k++) {
        xfer *x = r->held[k];
        if (x->state != XF_WAITING || x->not_before > now) continue;
        const int to = pick_server(r, x->group, x, now);
        if (to < 0) continue;  /* every server of its mode is out or full */
        take_slot(r, x, to);
        st = start_attempt(r, x, err);
    }
    for (int g = 0; g < r->n_g && st == PG_OK; g++) {
        int i, k;
        while (st == PG_OK && (i = next_queued(r, g)) >= 0 &&
               (k = pick_server(r, g, NULL, now)) >= 0) {
            r->held[r->n_held++] = &r->x[i];
            take_slot(r, &r->x[i], k);
            st = start_attempt(r, &r->x[i], err);
        }
    }
    double next = now + OA_MAX_POLL_MS / 1000.0;
    for (int k = 0; k < r->n_held && st == PG_OK; k++) {
        const xfer *x = r->held[k];
        if (x->state == XF_WAITING)
            next = x->not_before > now ? fmin(next, x->not_before)
                                       : group_back_at(r, x->group, now, next);
        next = fmin(next, stall_deadline(x));
    }
    for (int g = 0; g < r->n_g && st == PG_OK; g++)
        if (next_queued(r, g) >= 0) next = group_back_at(r, g, now, next);
    r->prog.in_flight = r->n_held;
    r->prog.servers_out = servers_out(r, now);
    *wait_ms = (long)ceil((next - now) * 1000.0);
    if (*wait_ms < 0) *wait_ms = 0;
    return st;
}

/* Checks the requests and endpoints, groups the endpoints by mode, routes
 * each request to its mode, reads its stream flag; nothing is sent. */
static pg_status prepare(run *r, oa_endpoint **eps, int n_eps, oa_request *reqs, pg_err *err)
{
    for (int e = 0; e < n_eps; e++) {
        if (eps[e] == NULL) return pg_fail(err, PG_ERR_USAGE, "endpoint %d is NULL", e);
        int g = 0;
        while (g < r->n_g && strcmp(r->g[g].mode, eps[e]->mode) != 0) g++;
        if (g == r->n_g) r->g[r->n_g++] = (mode_group){.mode = eps[e]->mode};
        for (int f = 0; f < e; f++)
            if (r->s[f].group == g && strcmp(eps[f]->base_url, eps[e]->base_url) == 0)
                return pg_fail(err, PG_ERR_USAGE, "two endpoints for mode %s at %s",
                               eps[e]->mode, eps[e]->base_url);
        r->s[e] = (srv_state){.ep = eps[e], .group = g};
        r->g[g].n_srv++;
    }
    r->n_s = n_eps;
    for (int i = 0; i < r->n; i++) {
        xfer *x = &r->x[i];
        x->req = &reqs[i];
        x->group = x->srv = x->failed_on = x->waits_on = -1;
        x->prompt_tokens = x->completion_tokens = -1;
        const char *pid = reqs[i].problem_id ? reqs[i].problem_id : "?";
        for (int g = 0; g < r->n_g && reqs[i].mode; g++)
            if (strcmp(reqs[i].mode, r->g[g].mode) == 0) x->group = g;
        if (x->group < 0)
            return pg_fail(err, PG_ERR_USAGE, "request %s#%d: no endpoint for mode %s", pid,
                           reqs[i].sample, reqs[i].mode ? reqs[i].mode : "(none)");
        for (int k = 0; k < n_eps && x->ep == NULL; k++)
            if (r->s[k].group == x->group) x->ep = eps[k];
        cJSON *body = reqs[i].body_json ? cJSON_Parse(reqs[i].body_json) : NULL;
        bool is_obj = cJSON_IsObject(body);
        x->stream = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(body, "stream"));
        cJSON_Delete(body);
        if (!is_obj)
            return pg_fail(err, PG_ERR_USAGE, "request %s#%d: body is not a JSON object", pid,
                           reqs[i].sample);
    }
    return PG_OK;
}

pg_status oa_run(oa_endpoint **eps, int n_eps, oa_request *reqs, int n_reqs, oa_done_fn on_done,
                 void *ctx, pg_err *err)
{
    if (n_reqs <= 0) return PG_OK;
    if (n_eps <= 0) return pg_fail(err, PG_ERR_USAGE, "no endpoint to send %d requests to", n_reqs);
    run r = {.n = n_reqs, .on_done = on_done, .ctx = ctx};
    r.prog.total = n_reqs;
    rng_xoshiro_seed(&r.rng, (uint64_t)(pg_clock_mono_s() * 1e9) ^ ((uint64_t)getpid() << 32) ^
                                 (uintptr_t)&r);
    r.x = calloc((size_t)n_reqs, sizeof *r.x);
    r.s = calloc((size_t)n_eps, sizeof *r.s);
    r.g = calloc((size_t)n_eps, sizeof *r.g);
    r.held = calloc((size_t)n_reqs, sizeof *r.held);
    pg_status st = PG_OK;
    if (r.x == NULL || r.s == NULL || r.g == NULL || r.held == NULL)
        st = pg_fail(err, PG_ERR_NOMEM, "out of memory for %d requests", n_reqs);
    if (st == PG_OK) st = prepare(&r, eps, n_eps, reqs, err);
    if (st == PG_OK && (r.multi = curl_multi_init()) == NULL)
        st = pg_fail(err, PG_ERR_NOMEM, "curl_multi_init failed");
    if (st == PG_OK) {
        long cache = 0;
        for (int e = 0; e < n_eps; e++) cache += eps[e]->opt.max_in_flight;
        curl_multi_setopt(r.multi, CURLMOPT_MAXCONNECTS, cache);
    }

    while (st == PG_OK && r.prog.done < n_reqs) {
        /* Before anything new starts: a stop abandons what is in flight. */
        for (int e = 0; e < n_eps && st == PG_OK; e++)
            if (stop_requested(&eps[e]->opt))
                st = pg_fail(err, PG_ERR_INTERRUPTED,
                             "interrupted: %d of %d requests finished, %d in progress abandoned "
                             "(not stored; a resume sends them again)",
                             r.prog.done, n_reqs, r.n_held);
        if (st != PG_OK) break;
        long wait_ms;
        st = start_ready(&r, &wait_ms, err);
        if (st != PG_OK) break;
        int running;
        const double read_at = pg_clock_mono_s();
        CURLMcode mc = curl_multi_perform(r.multi, &running);
        if (mc != CURLM_OK) {
            st = pg_fail(err, PG_ERR_HTTP, "curl_multi_perform: %s", curl_multi_strerror(mc));
            break;
        }
        CURLMsg *m;
        int left;
        bool finished = false;
        while (st == PG_OK && (m = curl_multi_info_read(r.multi, &left)) != NULL) {
            if (m->msg != CURLMSG_DONE) continue;
            CURL *h = m->easy_handle;
            CURLcode rc = m->data.result;  /* m dies with curl_multi_remove_handle */
            xfer *x = NULL;
            curl_easy_getinfo(h, CURLINFO_PRIVATE, (char **)&x);
            st = attempt_done(&r, x, rc, err);
            finished = true;
        }
        /* After the reads, never before (fail_stalled says why). */
        if (st == PG_OK) st = fail_stalled(&r, read_at, &finished, err);
        if (st != PG_OK || r.prog.done >= n_reqs) break;
        if (finished) continue;  /* free slots and zero-delay retries start at once */
        mc = curl_multi_poll(r.multi, NULL, 0,
                             (int)(wait_ms < OA_MAX_POLL_MS ? wait_ms : OA_MAX_POLL_MS), NULL);
        if (mc != CURLM_OK)
            st = pg_fail(err, PG_ERR_HTTP, "curl_multi_poll: %s", curl_multi_strerror(mc));
    }

    /* Abandon whatever is still held (only after a failure or a stop). */
    while (r.n_held > 0) release(&r, r.held[r.n_held - 1]);
    if (r.multi) curl_multi_cleanup(r.multi);
    free(r.held);
    free(r.g);
    free(r.s);
    free(r.x);
    return st;
}
