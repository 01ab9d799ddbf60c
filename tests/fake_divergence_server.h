/*
 * fake_divergence_server.h: loopback servers of a known model for the
 * teacher-forced divergence tests (tests/test_diverge_run.c,
 * tests/test_report_divergence.c): they speak vLLM's, SGLang's and llama-server's
 * exact reply shapes, computing each reply from the request, so a test can
 * compute the model's distributions itself. Faults make a server misbehave
 * one way; floor_jitter makes the reference's second scoring (the noise
 * floor) differ a little, as batched serving does.
 *
 * Header-only (static functions) because CMake links each test_*.c with
 * testutil.c alone, as tests/fake_openai_server.h.
 */
#ifndef PG_FAKE_DIVERGENCE_SERVER_H
#define PG_FAKE_DIVERGENCE_SERVER_H

#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fake_openai_server.h"
#include "testutil.h"

/* The fake model's vocabulary. */
#define FAKE_DIV_V 40

/* The fake model: next-token logprobs after prev at position t, a mode
 * being the shift of its logits' perturbation (0: the reference). */
static inline void model_logprobs(double shift, int prev, size_t t, double lp[FAKE_DIV_V])
{
    double mx = -HUGE_VAL, z = 0;
    for (int i = 0; i < FAKE_DIV_V; i++) {
        lp[i] = 3.0 * sin(0.37 * i + 1.3 * prev + 0.11 * (double)t) + shift * cos(0.7 * i + t);
        if (lp[i] > mx) mx = lp[i];
    }
    for (int i = 0; i < FAKE_DIV_V; i++) z += exp(lp[i] - mx);
    for (int i = 0; i < FAKE_DIV_V; i++) lp[i] -= mx + log(z);
}

/* How a fake server misbehaves. */
typedef enum fault {
    FAULT_NONE = 0,
    FAULT_SHORT,        /* one prompt_logprobs entry fewer than the prompt */
    FAULT_GENERATED,    /* only the generated token's logprobs (no prompt_logprobs) */
    FAULT_NAN,          /* a logprob NaN (as Python's json writes it) */
    FAULT_NEG_ID,       /* a key that is no token id */
    FAULT_TOKENIZER,    /* tokenizes differently */
    FAULT_BIG_ID        /* llama-server: an id past n_vocab */
} fault;

/* Which server a fake one speaks like. */
typedef enum speaks { SPEAKS_VLLM = 0, SPEAKS_LLAMA, SPEAKS_SGLANG } speaks;

typedef struct fake_model {
    double shift;
    fault fault;
    speaks llama;       /* SPEAKS_LLAMA: llama-server; SPEAKS_SGLANG; else vLLM */
    int delay_ms;       /* before each scoring reply (a slow server) */
    int tok_mod;        /* > 0: /tokenize's ids are bytes mod this, not mod FAKE_DIV_V (a
                           small vocabulary) */
    double floor_jitter; /* > 0: every second scoring of one prompt (a noise floor's
                            pass) is perturbed this much more: batching noise */
} fake_model;

/* "Tokenizes" text: one id per byte, mod FAKE_DIV_V or tok_mod (FAULT_TOKENIZER: shifted by one). */
static inline char *tokenize_reply(const fake_model *m, const char *body, size_t len)
{
    cJSON *req = cJSON_ParseWithLength(body, len);
    const cJSON *text = cJSON_GetObjectItemCaseSensitive(req, m->llama == SPEAKS_LLAMA ? "content"
                                                                                   : "prompt");
    cJSON *o = cJSON_CreateObject(), *toks = cJSON_AddArrayToObject(o, "tokens");
    for (const char *p = cJSON_IsString(text) ? text->valuestring : ""; *p; p++)
        cJSON_AddItemToArray(toks, cJSON_CreateNumber(((unsigned char)*p +
                                                      (m->fault == FAULT_TOKENIZER)) %
                                                     (m->tok_mod > 0 ? m->tok_mod : FAKE_DIV_V)));
    if (m->llama != SPEAKS_LLAMA) cJSON_AddNumberToObject(o, "max_model_len", 4096);
    char *out = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    cJSON_Delete(req);
    return out;
}

/* Appends to buf (grown) printf-style. */
static inline void cat(char **buf, size_t *len, size_t *cap, const char *fmt, ...)
{
    va_list ap, again;
    va_start(ap, fmt);
    va_copy(again, ap);
    const int n = vsnprintf(NULL, 0, fmt, ap);  /* the whole text, however long */
    va_end(ap);
    if (*len + (size_t)n + 1 > *cap) {
        *cap = (*len + (size_t)n + 1) * 2;
        *buf = realloc(*buf, *cap);
    }
    vsnprintf(*buf + *len, (size_t)n + 1, fmt, again);
    va_end(again);
    *len += (size_t)n;
}

/* The ranks of lp: rank[i] = 1 + #{j: lp[j] > lp[i]}. */
static inline void ranks(const double lp[FAKE_DIV_V], int rank[FAKE_DIV_V])
{
    for (int i = 0; i < FAKE_DIV_V; i++) {
        rank[i] = 1;
        for (int j = 0; j < FAKE_DIV_V; j++) rank[i] += lp[j] > lp[i];
    }
}

/* vLLM's /v1/completions reply to a prompt_logprobs request. */
static inline char *vllm_reply(const fake_model *m, double shift, const cJSON *req)
{
    const cJSON *prompt = cJSON_GetObjectItemCaseSensitive(req, "prompt");
    const int k = cJSON_GetObjectItemCaseSensitive(req, "prompt_logprobs")->valueint;
    const int n = cJSON_GetArraySize(prompt);
    char *b = NULL;
    size_t len = 0, cap = 0;
    cat(&b, &len, &cap, "{\"id\":\"cmpl-1\",\"object\":\"text_completion\",\"choices\":[{"
                        "\"index\":0,\"text\":\"x\",\"logprobs\":null,\"finish_reason\":\"length\"");
    if (m->fault != FAULT_GENERATED) {
        cat(&b, &len, &cap, ",\"prompt_logprobs\":[null");
        const int last = m->fault == FAULT_SHORT ? n - 1 : n;
        for (int t = 1; t < last; t++) {
            const int prev = cJSON_GetArrayItem(prompt, t - 1)->valueint;
            const int given = cJSON_GetArrayItem(prompt, t)->valueint;
            double lp[FAKE_DIV_V];
            int rank[FAKE_DIV_V];
            model_logprobs(shift, prev, (size_t)t, lp);
            ranks(lp, rank);
            cat(&b, &len, &cap, ",{");
            int first = 1;
            for (int i = 0; i < FAKE_DIV_V; i++) {
                if (rank[i] > k && i != given) continue;
                if (m->fault == FAULT_NAN && t == 2 && i == given)
                    cat(&b, &len, &cap, "%s\"%d\":{\"logprob\":NaN,\"rank\":%d}", first ? "" : ",",
                        i, rank[i]);
                else
                    cat(&b, &len, &cap, "%s\"%d\":{\"logprob\":%.17g,\"rank\":%d,"
                        "\"decoded_token\":\"t%d\"}", first ? "" : ",",
                        m->fault == FAULT_NEG_ID && t == 1 && i == given ? -5 : i, lp[i], rank[i],
                        i);
                first = 0;
            }
            cat(&b, &len, &cap, "}");
        }
        cat(&b, &len, &cap, "]");
    }
    cat(&b, &len, &cap, "}],\"usage\":{\"prompt_tokens\":%d,\"completion_tokens\":1}}", n);
    return b;
}

/* Appends SGLang's input_token_logprobs of prompt (n ids) at shift to b. */
static inline void sglang_tokens(double shift, const cJSON *prompt, int n, char **b, size_t *len,
                                 size_t *cap)
{
    cat(b, len, cap, "\"input_token_logprobs\":[[null,%d,null]",
        cJSON_GetArrayItem(prompt, 0)->valueint);
    for (int t = 1; t < n; t++) {
        const int prev = cJSON_GetArrayItem(prompt, t - 1)->valueint;
        const int given = cJSON_GetArrayItem(prompt, t)->valueint;
        double lp[FAKE_DIV_V];
        model_logprobs(shift, prev, (size_t)t, lp);
        cat(b, len, cap, ",[%.17g,%d,null]", lp[given], given);
    }
    cat(b, len, cap, "]");
}

/* Appends SGLang's input_top_logprobs of prompt (n ids) at top k and shift to b. */
static inline void sglang_tops(const fake_model *m, double shift, const cJSON *prompt, int n,
                               int k, char **b, size_t *len, size_t *cap)
{
    cat(b, len, cap, "\"input_top_logprobs\":[null");
    const int last = m->fault == FAULT_SHORT ? n - 1 : n;
    for (int t = 1; t < last; t++) {
        const int prev = cJSON_GetArrayItem(prompt, t - 1)->valueint;
        double lp[FAKE_DIV_V];
        int rank[FAKE_DIV_V];
        model_logprobs(shift, prev, (size_t)t, lp);
        ranks(lp, rank);
        cat(b, len, cap, ",[");
        for (int r = 1, first = 1; r <= k && r <= FAKE_DIV_V; r++)
            for (int i = 0; i < FAKE_DIV_V; i++)
                if (rank[i] == r) {
                    if (m->fault == FAULT_NAN && t == 2 && r == 1)
                        cat(b, len, cap, "%s[NaN,%d,null]", first ? "" : ",", i);
                    else
                        cat(b, len, cap, "%s[%.17g,%d,null]", first ? "" : ",", lp[i],
                            m->fault == FAULT_NEG_ID && t == 1 && r == 1 ? -5 : i);
                    first = 0;
                }
        cat(b, len, cap, "]");
    }
    cat(b, len, cap, "]");
}

/* SGLang's /generate reply with input logprobs. The reference's fake (shift
 * 0) gives the token logprobs first, the others the top lists first: both
 * orders. */
static inline char *sglang_reply(const fake_model *m, double shift, const cJSON *req)
{
    const cJSON *prompt = cJSON_GetObjectItemCaseSensitive(req, "input_ids");
    const int k = cJSON_GetObjectItemCaseSensitive(req, "top_logprobs_num")->valueint;
    const int n = cJSON_GetArraySize(prompt);
    char *b = NULL;
    size_t len = 0, cap = 0;
    cat(&b, &len, &cap, "{\"text\":\"\",\"output_ids\":[],\"meta_info\":{\"id\":\"r1\","
        "\"finish_reason\":{\"type\":\"length\",\"length\":0},\"prompt_tokens\":%d,", n);
    if (m->fault == FAULT_GENERATED) {
        sglang_tokens(shift, prompt, n, &b, &len, &cap);
        cat(&b, &len, &cap, ",\"output_top_logprobs\":[]");
    } else if (m->shift == 0) {
        sglang_tokens(shift, prompt, n, &b, &len, &cap);
        cat(&b, &len, &cap, ",\"output_token_logprobs\":[],");
        sglang_tops(m, shift, prompt, n, k, &b, &len, &cap);
    } else {
        sglang_tops(m, shift, prompt, n, k, &b, &len, &cap);
        cat(&b, &len, &cap, ",\"output_top_logprobs\":[],");
        sglang_tokens(shift, prompt, n, &b, &len, &cap);
    }
    cat(&b, &len, &cap, ",\"completion_tokens\":0}}");
    return b;
}

/* llama-server's /completion reply: the top n_probs after the prompt. */
static inline char *llama_reply(const fake_model *m, double shift, const cJSON *req)
{
    const cJSON *prompt = cJSON_GetObjectItemCaseSensitive(req, "prompt");
    const int k = cJSON_GetObjectItemCaseSensitive(req, "n_probs")->valueint;
    const int t = cJSON_GetArraySize(prompt);
    const int prev = cJSON_GetArrayItem(prompt, t - 1)->valueint;
    double lp[FAKE_DIV_V];
    int rank[FAKE_DIV_V];
    model_logprobs(shift, prev, (size_t)t, lp);
    ranks(lp, rank);
    char *b = NULL;
    size_t len = 0, cap = 0;
    cat(&b, &len, &cap, "{\"content\":\"x\",\"completion_probabilities\":[{\"id\":0,\"token\":"
                        "\"x\",\"logprob\":-1,\"top_logprobs\":[");
    for (int r = 1, first = 1; r <= k && r <= FAKE_DIV_V; r++)
        for (int i = 0; i < FAKE_DIV_V; i++)
            if (rank[i] == r) {
                cat(&b, &len, &cap, "%s{\"id\":%d,\"token\":\"t\",\"bytes\":[116],"
                    "\"logprob\":%.17g}", first ? "" : ",",
                    m->fault == FAULT_BIG_ID && r == 1 ? FAKE_DIV_V + 7 : i, lp[i]);
                first = 0;
            }
    cat(&b, &len, &cap, "]}],\"tokens_evaluated\":%d}", t);
    return b;
}

/* Most distinct prompts prompt_seen_odd tells apart (a test's few sequences
 * and, for llama-server, their prefixes, many times over). */
#define FAKE_DIV_SEEN_MAX 4096
/* FNV-1a over a prompt's ids. */
#define FAKE_DIV_FNV_OFFSET 1469598103934665603ull
#define FAKE_DIV_FNV_PRIME 1099511628211ull

/* Whether req's prompt was seen an odd number of times before by the
 * server of model m (its second, fourth ... scoring); each call counts one
 * more. */
static inline int prompt_seen_odd(const fake_model *m, const cJSON *req)
{
    static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    static unsigned long long hash[FAKE_DIV_SEEN_MAX];
    static unsigned count[FAKE_DIV_SEEN_MAX];
    static size_t n;
    unsigned long long h = FAKE_DIV_FNV_OFFSET ^ (unsigned long long)(uintptr_t)m;
    const cJSON *prompt = cJSON_GetObjectItemCaseSensitive(req, "prompt");
    for (const cJSON *t = cJSON_IsArray(prompt) ? prompt->child : NULL; t != NULL; t = t->next)
        h = (h ^ (unsigned long long)(t->valueint + 1)) * FAKE_DIV_FNV_PRIME;
    pthread_mutex_lock(&lock);
    size_t i = 0;
    while (i < n && hash[i] != h) i++;
    if (i == n && n < FAKE_DIV_SEEN_MAX) hash[n++] = h;
    const int odd = i < n && count[i]++ % 2 == 1;
    pthread_mutex_unlock(&lock);
    return odd;
}

static inline char *handle(void *ctx, const char *path, const char *body, size_t len, int *status)
{
    const fake_model *m = ctx;
    if (strcmp(path, "/tokenize") == 0) return tokenize_reply(m, body, len);
    if (m->delay_ms > 0) usleep((useconds_t)m->delay_ms * 1000);
    cJSON *req = cJSON_ParseWithLength(body, len);
    char *out = NULL;
    if (req == NULL) {
        *status = 400;
        out = strdup("{\"error\":{\"message\":\"bad json\"}}");
    } else {
        const double shift =
            m->shift + (m->floor_jitter > 0 && prompt_seen_odd(m, req) ? m->floor_jitter : 0.0);
        out = m->llama == SPEAKS_LLAMA    ? llama_reply(m, shift, req)
              : m->llama == SPEAKS_SGLANG ? sglang_reply(m, shift, req)
                                          : vllm_reply(m, shift, req);
    }
    cJSON_Delete(req);
    return out;
}

/* A fake server of model m. */
static inline void serve(fake_server *s, fake_model *m)
{
    fs_init(s);
    fs_route(s, "/health", (fs_reply[]){{200, "{}", NULL, NULL, 0, 0}}, 1);
    fs_route(s, "/v1/models",
             (fs_reply[]){{200,
                           m->llama == SPEAKS_LLAMA
                               ? "{\"data\":[{\"id\":\"m\",\"meta\":{\"n_vocab\":40}}]}"
                                    : "{\"data\":[{\"id\":\"m\"}]}",
                           NULL, NULL, 0, 0}},
             1);
    if (m->llama == SPEAKS_SGLANG)
        fs_route(s, "/get_model_info",
                 (fs_reply[]){{200, "{\"model_path\":\"m\",\"is_generation\":true}", NULL, NULL, 0,
                               0}},
                 1);
    if (m->llama == SPEAKS_LLAMA)
        fs_route(s, "/props",
                 (fs_reply[]){{200, "{\"default_generation_settings\":{}}", NULL, NULL, 0, 0}}, 1);
    fs_handle(s, "/tokenize", handle, m);
    fs_handle(s, m->llama == SPEAKS_LLAMA    ? "/completion"
                 : m->llama == SPEAKS_SGLANG ? "/generate"
                                             : "/v1/completions",
              handle, m);
    cr_assert(fs_start(s), "no loopback server");
}

/* Serves ref on a and mode on b, their base URLs into ua and ub (64 bytes each). */
static inline void serve_pair(fake_server *a, fake_model *ref, char *ua, fake_server *b,
                       fake_model *mode, char *ub)
{
    serve(a, ref);
    serve(b, mode);
    snprintf(ua, 64, "http://127.0.0.1:%d", a->port);
    snprintf(ub, 64, "http://127.0.0.1:%d", b->port);
}

/* Writes three token sequences of lengths 12, 9, 20 to path: s1 scored
 * from 3, s2 from 1, s3 from 10 (9, 8 and 10 scored positions). */
static inline void fake_div_write_sequences(const char *path)
{
    const char *text =
        "{\"id\":\"s1\",\"tokens\":[1,5,9,13,2,30,7,7,21,0,39,4],\"score_from\":3}\n"
        "{\"id\":\"s2\",\"tokens\":[3,3,8,1,17,25,6,11,2]}\n"
        "{\"id\":\"s3\",\"tokens\":[10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29],"
        "\"score_from\":10}\n";
    tu_write_file(path, text, strlen(text));
}

#endif /* PG_FAKE_DIVERGENCE_SERVER_H */
