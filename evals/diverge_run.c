/* diverge_run.c: a teacher-forced divergence run (see diverge_run.h). */
#include "diverge_run.h"

#include <cjson/cJSON.h>
#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "db/divergence_store.h"
#include "divergence.h"
#include "prompt_logprobs.h"
#include "sglang_logprobs.h"

/* The string every server must tokenize alike: ASCII words, digits,
 * punctuation, a run of spaces, accented Latin, CJK and an emoji, so that
 * two tokenizers that merely share a vocabulary size still differ. */
#define DIV_TOKENIZER_PROBE \
    "Teacher forcing: 12345 tokens,  twice.\n caf\xc3\xa9 \xe6\xbc\xa2\xe5\xad\x97 \xf0\x9f\x99\x82"
/* Timeout of one probe request (/props, /tokenize, /v1/models): a local
 * route answers in milliseconds; a tokenizer of a long prompt in well under
 * a minute. */
#define DIV_PROBE_TIMEOUT_S 60.0
/* Largest llama-server /completion reply kept: n_probs K entries of ~100
 * bytes each plus the generation settings, far below this at K <= 4096. */
#define DIV_LLAMA_REPLY_MAX ((size_t)4 << 20)
/* Room for the messages a reader keeps. */
#define DIV_WHY_MAX 512
/* The hint added to a refusal of K by vLLM ("Requested prompt logprobs of
 * N, which is greater than max allowed: M", vllm/v1/engine/input_processor.py). */
#define DIV_VLLM_MAX_LOGPROBS_TEXT "max allowed"

const char *div_server_kind_name(div_server_kind k)
{
    switch (k) {
    case DIV_KIND_AUTO: return "auto";
    case DIV_KIND_VLLM: return "vllm";
    case DIV_KIND_LLAMA: return "llama-server";
    case DIV_KIND_SGLANG: return "sglang";
    }
    return "?";
}

pg_status div_server_kind_parse(const char *s, div_server_kind *out, pg_err *err)
{
    for (int k = DIV_KIND_AUTO; k <= DIV_KIND_SGLANG; k++)
        if (s != NULL && strcmp(s, div_server_kind_name((div_server_kind)k)) == 0) {
            *out = (div_server_kind)k;
            return PG_OK;
        }
    return pg_fail(err, PG_ERR_USAGE, "server kind '%s' is none of auto, vllm, llama-server, sglang",
                   s ? s : "(null)");
}

/* One server of the run. */
typedef struct div_server {
    const char *mode;
    const char *url;
    oa_endpoint *ep;
    div_server_kind kind;
    char *model;         /* the served model (vLLM's requests name it) */
    int64_t n_vocab;     /* 0: unknown (vLLM does not say) */
} div_server;

struct diverge_session {
    diverge_options o;
    div_server srv[DIV_MAX_SERVERS];
    int n_srv;
    const char *modes[DIV_MAX_MODES];   /* distinct, in the order given */
    int n_modes;
    div_sequences *seqs;
};

void diverge_session_free(diverge_session *ds)
{
    if (ds == NULL) return;
    for (int i = 0; i < ds->n_srv; i++) {
        oa_endpoint_close(ds->srv[i].ep);
        free(ds->srv[i].model);
    }
    free(ds);
}

const char *const *diverge_session_modes(const diverge_session *ds, int *n)
{
    *n = ds->n_modes;
    return ds->modes;
}

/* The first server of mode (there is one: diverge_prepare checks). */
static div_server *first_server(diverge_session *ds, const char *mode)
{
    for (int i = 0; i < ds->n_srv; i++)
        if (strcmp(ds->srv[i].mode, mode) == 0) return &ds->srv[i];
    return NULL;
}

/* ---- probes ------------------------------------------------------------ */

/* One probe request; its 2xx JSON object into *root (caller deletes).
 * PG_ERR_HTTP naming the request for a failed transfer or another status;
 * PG_ERR_FORMAT for a body that is no JSON object. */
static pg_status probe_json(div_server *v, const char *method, const char *path,
                            const char *body, cJSON **root, long *code_out, pg_err *err)
{
    *root = NULL;
    long code = 0;
    char *reply = NULL;
    size_t len = 0;
    pg_status st = oa_call(v->ep, method, path, body, DIV_PROBE_TIMEOUT_S, &code, &reply, &len,
                           err);
    if (code_out) *code_out = code;
    if (st != PG_OK) return st;
    if (code / 100 != 2) {
        st = pg_fail(err, PG_ERR_HTTP, "%s %s%s (mode %s): HTTP %ld: %.300s", method, v->url, path,
                     v->mode, code, reply);
    } else {
        *root = cJSON_ParseWithLength(reply, len);
        if (!cJSON_IsObject(*root)) {
            cJSON_Delete(*root);
            *root = NULL;
            st = pg_fail(err, PG_ERR_FORMAT, "%s %s%s (mode %s): the reply is not a JSON object",
                         method, v->url, path, v->mode);
        }
    }
    free(reply);
    return st;
}

/* Whether GET path on v answers 200 with a JSON object holding key (any
 * other answer, a 404 included, is no). */
static pg_status probe_has(div_server *v, const char *path, const char *key, bool *has,
                           pg_err *err)
{
    long code = 0;
    char *reply = NULL;
    size_t len = 0;
    *has = false;
    pg_status st = oa_call(v->ep, "GET", path, NULL, DIV_PROBE_TIMEOUT_S, &code, &reply, &len, err);
    if (st != PG_OK) return st;
    cJSON *root = code == 200 ? cJSON_ParseWithLength(reply, len) : NULL;
    *has = cJSON_IsObject(root) && cJSON_GetObjectItemCaseSensitive(root, key) != NULL;
    cJSON_Delete(root);
    free(reply);
    return PG_OK;
}

/* The server's kind: llama-server answers GET /props with its
 * default_generation_settings (tools/server/server.cpp); SGLang answers
 * GET /get_model_info with its model_path (python/sglang/srt/entrypoints/
 * http_server.py); anything else is taken as vLLM, which the tokenizer
 * probe then confirms (its /tokenize answers max_model_len). How it was
 * found into *how. */
static pg_status probe_kind(div_server *v, const char **how, pg_err *err)
{
    bool has = false;
    pg_status st = probe_has(v, "/props", "default_generation_settings", &has, err);
    if (st == PG_OK && has) {
        v->kind = DIV_KIND_LLAMA;
        *how = " (GET /props answered)";
        return PG_OK;
    }
    if (st == PG_OK) st = probe_has(v, "/get_model_info", "model_path", &has, err);
    if (st == PG_OK) {
        v->kind = has ? DIV_KIND_SGLANG : DIV_KIND_VLLM;
        *how = has ? " (GET /get_model_info answered)"
                   : " (neither llama-server's /props nor SGLang's /get_model_info)";
    }
    return st;
}

/* llama-server's vocabulary size: GET /v1/models data[0].meta.n_vocab. */
static pg_status probe_llama_vocab(div_server *v, pg_err *err)
{
    cJSON *root = NULL;
    pg_status st = probe_json(v, "GET", "/v1/models", NULL, &root, NULL, err);
    if (st != PG_OK) return st;
    const cJSON *m0 = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(root, "data"), 0);
    const cJSON *nv = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(m0, "meta"), "n_vocab");
    if (cJSON_IsNumber(nv) && nv->valuedouble >= 1 && nv->valuedouble <= (double)INT32_MAX &&
        floor(nv->valuedouble) == nv->valuedouble)
        v->n_vocab = (int64_t)nv->valuedouble;
    else
        st = pg_fail(err, PG_ERR_FORMAT, "GET %s/v1/models (mode %s): llama-server's reply has no "
                     "integer data[0].meta.n_vocab", v->url, v->mode);
    cJSON_Delete(root);
    return st;
}

/* Tokenizes text on v into *ids (malloc'd, *n of them); add_special: the
 * model's BOS and the like (a prompt), else none (a completion). vLLM:
 * POST /tokenize {"model", "prompt", "add_special_tokens"}; llama-server:
 * POST /tokenize {"content", "add_special", "parse_special"}. */
static pg_status tokenize(div_server *v, const char *text, bool add_special, int32_t **ids,
                          size_t *n, pg_err *err)
{
    *ids = NULL;
    *n = 0;
    cJSON *req = cJSON_CreateObject();
    bool ok = req != NULL;
    if (v->kind != DIV_KIND_LLAMA) {
        /* SGLang's /tokenize takes vLLM's request (its TokenizeRequest). */
        ok = ok && cJSON_AddStringToObject(req, "model", v->model) &&
             cJSON_AddStringToObject(req, "prompt", text) &&
             cJSON_AddBoolToObject(req, "add_special_tokens", add_special);
    } else {
        ok = ok && cJSON_AddStringToObject(req, "content", text) &&
             cJSON_AddBoolToObject(req, "add_special", add_special) &&
             cJSON_AddBoolToObject(req, "parse_special", true);
    }
    char *body = ok ? cJSON_PrintUnformatted(req) : NULL;
    cJSON_Delete(req);
    if (body == NULL) return pg_fail(err, PG_ERR_NOMEM, "out of memory for a /tokenize request");
    cJSON *root = NULL;
    pg_status st = probe_json(v, "POST", "/tokenize", body, &root, NULL, err);
    free(body);
    if (st != PG_OK) return st;
    const cJSON *toks = cJSON_GetObjectItemCaseSensitive(root, "tokens");
    const int count = cJSON_GetArraySize(toks);
    if (!cJSON_IsArray(toks))
        st = pg_fail(err, PG_ERR_FORMAT, "POST %s/tokenize (mode %s, %s): the reply has no "
                     "\"tokens\" array", v->url, v->mode, div_server_kind_name(v->kind));
    if (st == PG_OK && count > 0 && (*ids = malloc((size_t)count * sizeof **ids)) == NULL)
        st = pg_fail(err, PG_ERR_NOMEM, "out of memory for %d token ids", count);
    for (int i = 0; st == PG_OK && i < count; i++) {
        const cJSON *t = cJSON_GetArrayItem(toks, i);
        const double d = cJSON_IsNumber(t) ? t->valuedouble : -1;
        if (!(d >= 0 && d <= (double)SEQ_TOKEN_MAX) || floor(d) != d ||
            (v->n_vocab > 0 && d >= (double)v->n_vocab))
            st = pg_fail(err, PG_ERR_FORMAT, "POST %s/tokenize (mode %s): tokens[%d] is no token "
                         "id of the vocabulary", v->url, v->mode, i);
        else
            (*ids)[(*n)++] = (int32_t)d;
    }
    if (st != PG_OK) {
        free(*ids);
        *ids = NULL;
        *n = 0;
    }
    cJSON_Delete(root);
    return st;
}

/* Every server tokenizes DIV_TOKENIZER_PROBE as the reference's first does. */
static pg_status check_tokenizers(diverge_session *ds, pg_err *err)
{
    div_server *ref = first_server(ds, ds->o.reference);
    int32_t *want = NULL, *got = NULL;
    size_t n_want = 0, n_got = 0;
    pg_status st = tokenize(ref, DIV_TOKENIZER_PROBE, false, &want, &n_want, err);
    for (int i = 0; st == PG_OK && i < ds->n_srv; i++) {
        div_server *v = &ds->srv[i];
        if (v == ref) continue;
        st = tokenize(v, DIV_TOKENIZER_PROBE, false, &got, &n_got, err);
        size_t k = 0;
        while (st == PG_OK && k < n_want && k < n_got && want[k] == got[k]) k++;
        if (st == PG_OK && (k < n_want || k < n_got))
            st = pg_fail(err, PG_ERR_FORMAT, "one tokenizer: %s (mode %s) and %s (mode %s) "
                         "tokenize the probe string differently (%zu and %zu ids, first "
                         "difference at id %zu): they do not serve one model, nothing is scored",
                         ref->url, ref->mode, v->url, v->mode, n_want, n_got, k);
        free(got);
        got = NULL;
    }
    free(want);
    return st;
}

/* Gives each text-form sequence its ids on the reference server: the
 * prompt with the model's special tokens, the completion without, joined
 * (as a server generates: the prompt's ids, then the sampled ones); the
 * completion is scored. */
static pg_status tokenize_texts(diverge_session *ds, pg_err *err)
{
    div_server *ref = first_server(ds, ds->o.reference);
    pg_status st = PG_OK;
    for (size_t i = 0; st == PG_OK && i < ds->seqs->n; i++) {
        div_sequence *q = &ds->seqs->v[i];
        if (q->tokens != NULL) continue;
        int32_t *p = NULL, *c = NULL;
        size_t np = 0, nc = 0;
        st = tokenize(ref, q->prompt, true, &p, &np, err);
        if (st == PG_OK) st = tokenize(ref, q->completion, false, &c, &nc, err);
        if (st == PG_OK && (np == 0 || nc == 0))
            st = pg_fail(err, PG_ERR_FORMAT, "sequence '%s' (line %d): its %s tokenizes to no "
                         "token on %s", q->id, q->line, np == 0 ? "prompt" : "completion",
                         ref->url);
        if (st == PG_OK && (q->tokens = malloc((np + nc) * sizeof *q->tokens)) == NULL)
            st = pg_fail(err, PG_ERR_NOMEM, "out of memory for sequence '%s'", q->id);
        if (st == PG_OK) {
            memcpy(q->tokens, p, np * sizeof *p);
            memcpy(q->tokens + np, c, nc * sizeof *c);
            q->n_tokens = np + nc;
            q->score_from = np;
        }
        free(p);
        free(c);
    }
    return st;
}

/* v's vocabulary size from --vocab-size when given (a llama-server that
 * says another is PG_ERR_USAGE), and a note when it stays unknown. */
static pg_status settle_vocabulary(div_server *v, const diverge_options *o, pg_err *err)
{
    if (o->vocab_size > 0 && v->n_vocab > 0 && v->n_vocab != o->vocab_size)
        return pg_fail(err, PG_ERR_USAGE, "diverge: --vocab-size %lld, but %s at %s (mode %s) "
                       "says its vocabulary has %lld tokens", (long long)o->vocab_size,
                       div_server_kind_name(v->kind), v->url, v->mode, (long long)v->n_vocab);
    if (o->vocab_size > 0) v->n_vocab = o->vocab_size;
    if (v->n_vocab == 0)
        pg_note_warning(o->notes, "diverge: %s at %s does not say its vocabulary size: its ids "
                        "are checked to be >= 0 only (--vocab-size N checks them against N)",
                        v->url, div_server_kind_name(v->kind));
    return PG_OK;
}

/* Every sequence's tokens are ids of every server's vocabulary, where known. */
static pg_status check_vocabulary(diverge_session *ds, pg_err *err)
{
    for (int k = 0; k < ds->n_srv; k++) {
        const div_server *v = &ds->srv[k];
        for (size_t i = 0; v->n_vocab > 0 && i < ds->seqs->n; i++) {
            const div_sequence *q = &ds->seqs->v[i];
            for (size_t t = 0; t < q->n_tokens; t++)
                if (q->tokens[t] >= v->n_vocab)
                    return pg_fail(err, PG_ERR_FORMAT, "sequence '%s': token %zu is %d, outside "
                                   "the %lld-token vocabulary of %s (mode %s)", q->id, t,
                                   (int)q->tokens[t], (long long)v->n_vocab, v->url, v->mode);
        }
    }
    return PG_OK;
}

/* Stores the sequences with the run; a run that has some already (a
 * resume) must have exactly these. */
static pg_status store_sequences(diverge_session *ds, pg_store *s, int64_t run_id, pg_err *err)
{
    div_sequence_stored *had = NULL;
    size_t n_had = 0;
    pg_status st = divergence_store_read_sequences(s, run_id, &had, &n_had, err);
    if (st == PG_OK && n_had > 0 && n_had != ds->seqs->n)
        st = pg_fail(err, PG_ERR_USAGE, "run %" PRId64 " has %zu sequences, the file %zu: a "
                     "resume scores the same sequences", run_id, n_had, ds->seqs->n);
    for (size_t i = 0; st == PG_OK && i < ds->seqs->n; i++) {
        const div_sequence *q = &ds->seqs->v[i];
        if (n_had > 0) {
            const div_sequence_stored *h = NULL;
            for (size_t k = 0; k < n_had && h == NULL; k++)
                if (strcmp(had[k].seq_id, q->id) == 0) h = &had[k];
            if (h == NULL || h->n_tokens != q->n_tokens || h->score_from != q->score_from ||
                memcmp(h->tokens, q->tokens, q->n_tokens * sizeof *q->tokens) != 0)
                st = pg_fail(err, PG_ERR_USAGE, "sequence '%s' (line %d) %s in run %" PRId64
                             ": a resume scores the same sequences", q->id, q->line,
                             h == NULL ? "is not" : "differs from the one stored", run_id);
            continue;
        }
        char source[PG_ERR_MSG_MAX];
        if (q->source != NULL)
            snprintf(source, sizeof source, "%s", q->source);
        else
            snprintf(source, sizeof source, "%s:%d",
                     ds->o.sequences_path ? ds->o.sequences_path : "?", q->line);
        st = divergence_store_put_sequence(s, run_id, q->id, source, q->tokens, q->n_tokens,
                                           q->score_from, err);
    }
    divergence_store_sequences_free(had, n_had);
    return st;
}

pg_status diverge_prepare(pg_store *s, int64_t run_id, div_sequences *seqs,
                          const diverge_options *o, diverge_session **out, pg_err *err)
{
    *out = NULL;
    if (o->n_endpoints < 1 || o->n_endpoints > DIV_MAX_SERVERS)
        return pg_fail(err, PG_ERR_USAGE, "diverge: 1 .. %d servers, not %d", DIV_MAX_SERVERS,
                       o->n_endpoints);
    if (o->top_k < 1 || o->top_k > PL_MAX_TOP_K)
        return pg_fail(err, PG_ERR_USAGE, "diverge: --top-k %d is outside 1 .. %d", o->top_k,
                       PL_MAX_TOP_K);
    if (seqs == NULL || seqs->n == 0)
        return pg_fail(err, PG_ERR_USAGE, "diverge: no sequence to score");
    diverge_session *ds = calloc(1, sizeof *ds);
    if (ds == NULL) return pg_fail(err, PG_ERR_NOMEM, "diverge: out of memory");
    ds->o = *o;
    ds->seqs = seqs;
    pg_status st = PG_OK;
    for (int i = 0; st == PG_OK && i < o->n_endpoints; i++) {
        int m = 0;
        while (m < ds->n_modes && strcmp(ds->modes[m], o->modes[i]) != 0) m++;
        if (m == ds->n_modes && m == DIV_MAX_MODES)
            st = pg_fail(err, PG_ERR_USAGE, "diverge: more than %d modes", DIV_MAX_MODES);
        else if (m == ds->n_modes)
            ds->modes[ds->n_modes++] = o->modes[i];
        div_server *v = &ds->srv[ds->n_srv++];
        v->mode = o->modes[i];
        v->url = o->urls[i];
        if (st == PG_OK)
            st = oa_endpoint_open(v->mode, v->url, o->api_key_env, o->api_key, &o->client, &v->ep,
                                  err);
    }
    if (st == PG_OK && first_server(ds, o->reference) == NULL)
        st = pg_fail(err, PG_ERR_USAGE, "diverge: no --endpoint for the reference mode %s "
                     "(--reference MODE names another)", o->reference);
    if (st == PG_OK && ds->n_modes < 2)
        st = pg_fail(err, PG_ERR_USAGE, "diverge: one mode (%s) has nothing to compare with: "
                     "give the reference and at least one other mode", ds->modes[0]);
    for (int i = 0; st == PG_OK && i < ds->n_srv; i++) {
        div_server *v = &ds->srv[i];
        st = oa_wait_ready(v->ep, o->ready_deadline_s, err);
        const char *how = " (--server-kind)";
        if (st == PG_OK && o->kind == DIV_KIND_AUTO) st = probe_kind(v, &how, err);
        else v->kind = o->kind;
        if (st == PG_OK) st = oa_model_name(v->ep, &v->model, err);
        if (st == PG_OK && v->kind == DIV_KIND_LLAMA) st = probe_llama_vocab(v, err);
        if (st == PG_OK) st = settle_vocabulary(v, o, err);
        if (st == PG_OK)
            pg_note_warning(o->notes, "diverge: %s at %s is %s%s: %s", v->mode, v->url,
                            div_server_kind_name(v->kind), how,
                            v->kind == DIV_KIND_LLAMA
                                ? "one position per request at /completion (n_probs, "
                                  "cache_prompt)"
                            : v->kind == DIV_KIND_SGLANG
                                ? "a sequence per request at /generate (input logprobs, "
                                  "top_logprobs_num)"
                                : "a sequence per request at /v1/completions (prompt_logprobs)");
    }
    if (st == PG_OK) st = check_tokenizers(ds, err);
    if (st == PG_OK) st = tokenize_texts(ds, err);
    if (st == PG_OK) st = check_vocabulary(ds, err);
    if (st == PG_OK) st = store_sequences(ds, s, run_id, err);
    if (st != PG_OK) {
        diverge_session_free(ds);
        return st;
    }
    *out = ds;
    return PG_OK;
}

/* ---- scoring ----------------------------------------------------------- */

/* One scoring request's state: a whole sequence (vLLM) or one position of
 * it (llama-server). */
typedef struct score_req {
    diverge_session *ds;
    const div_sequence *q;
    const char *mode;
    int pass;
    div_scored sc;          /* vLLM: this request's; llama: the sequence's so far */
    div_scored *into;       /* where positions go: &sc, or the sequence's (llama) */
    div_server_kind kind;   /* the mode's servers' */
    pl_parser *parser;      /* vLLM */
    sg_parser *sg;          /* SGLang */
    char *body;             /* llama: the reply so far */
    size_t body_len, body_cap;
    int32_t given;          /* llama: the token scored */
    int64_t n_vocab;
    bool failed;            /* llama: an earlier position failed; the sequence is dropped */
    char server[OA_URL_MAX];  /* llama: the servers that answered its positions */
    char why[DIV_WHY_MAX];
    pg_err perr;
} score_req;

/* A whole-sequence parser's position t (vLLM, SGLang): kept when it is
 * scored (t >= score_from). */
static pg_status on_whole_position(void *ctx, size_t t, const div_side *side, pg_err *err)
{
    score_req *r = ctx;
    if (t < r->q->score_from) return PG_OK;
    return div_scored_append(r->into, side->given, side->given_logprob, side->top, side->n_top,
                             err);
}

/* Frees r's whole-sequence parser. */
static void whole_parser_free(score_req *r)
{
    pl_parser_free(r->parser);
    sg_parser_free(r->sg);
    r->parser = NULL;
    r->sg = NULL;
}

static void vllm_begin(void *ctx)
{
    score_req *r = ctx;
    whole_parser_free(r);
    div_scored_free(&r->sc);
    r->why[0] = '\0';
    r->perr = (pg_err){0};
    char what[PL_WHAT_MAX];
    snprintf(what, sizeof what, "mode %s, sequence '%s'", r->mode, r->q->id);
    if (r->kind == DIV_KIND_SGLANG)
        r->sg = sg_parser_new(r->q->tokens, r->q->n_tokens, (size_t)r->ds->o.top_k, r->n_vocab,
                              what, on_whole_position, r);
    else
        r->parser = pl_parser_new(r->q->tokens, r->q->n_tokens, (size_t)r->ds->o.top_k,
                                  r->n_vocab, what, on_whole_position, r);
}

static bool vllm_feed(void *ctx, const char *p, size_t n)
{
    score_req *r = ctx;
    if (r->parser == NULL && r->sg == NULL) {
        snprintf(r->why, sizeof r->why, "out of memory for a parser");
        return false;
    }
    const pg_status st = r->sg != NULL ? sg_parser_feed(r->sg, p, n, &r->perr)
                                       : pl_parser_feed(r->parser, p, n, &r->perr);
    if (st == PG_OK) return true;
    snprintf(r->why, sizeof r->why, "%s", r->perr.msg);
    return false;
}

static oa_read_verdict vllm_finish(void *ctx, bool whole, char *why, size_t size)
{
    score_req *r = ctx;
    if (r->why[0] != '\0') {
        snprintf(why, size, "%s", r->why);
        return OA_READ_FAIL;
    }
    if (!whole) return OA_READ_RETRY;
    const bool have = r->parser != NULL || r->sg != NULL;
    if (!have || (r->sg != NULL ? sg_parser_finish(r->sg, &r->perr)
                                : pl_parser_finish(r->parser, &r->perr)) != PG_OK) {
        snprintf(why, size, "%s", have ? r->perr.msg : "out of memory for a parser");
        return OA_READ_FAIL;
    }
    return OA_READ_OK;
}

static const oa_reply_reader VLLM_READER = {"/v1/completions", vllm_begin, vllm_feed,
                                            vllm_finish};
static const oa_reply_reader SGLANG_READER = {"/generate", vllm_begin, vllm_feed, vllm_finish};

static void llama_begin(void *ctx)
{
    score_req *r = ctx;
    r->body_len = 0;
    r->why[0] = '\0';
}

static bool llama_feed(void *ctx, const char *p, size_t n)
{
    score_req *r = ctx;
    if (n > DIV_LLAMA_REPLY_MAX - r->body_len) {
        snprintf(r->why, sizeof r->why, "reply larger than %zu MiB", DIV_LLAMA_REPLY_MAX >> 20);
        return false;
    }
    if (r->body_len + n + 1 > r->body_cap) {
        size_t nc = r->body_cap ? r->body_cap : 4096;
        while (nc < r->body_len + n + 1) nc *= 2;
        char *b = realloc(r->body, nc);
        if (b == NULL) {
            snprintf(r->why, sizeof r->why, "out of memory for a reply");
            return false;
        }
        r->body = b;
        r->body_cap = nc;
    }
    memcpy(r->body + r->body_len, p, n);
    r->body_len += n;
    r->body[r->body_len] = '\0';
    return true;
}

static oa_read_verdict llama_finish(void *ctx, bool whole, char *why, size_t size)
{
    score_req *r = ctx;
    if (r->why[0] != '\0') {
        snprintf(why, size, "%s", r->why);
        return OA_READ_FAIL;
    }
    if (!whole) return OA_READ_RETRY;
    const size_t k = (size_t)r->ds->o.top_k;
    div_entry *top = malloc(k * sizeof *top);
    if (top == NULL) {
        snprintf(why, size, "out of memory for a position");
        return OA_READ_FAIL;
    }
    char what[PL_WHAT_MAX];
    snprintf(what, sizeof what, "mode %s, sequence '%s', position %zu", r->mode, r->q->id,
             r->into->n + r->q->score_from);
    size_t n_top = 0;
    double given_lp = NAN;
    pg_err e = {0};
    pg_status st = pl_llama_position(r->body ? r->body : "", r->body_len, r->given, k, r->n_vocab,
                                     what, top, &n_top, &given_lp, &e);
    if (st == PG_OK) st = div_scored_append(r->into, r->given, given_lp, top, n_top, &e);
    free(top);
    if (st == PG_OK) return OA_READ_OK;
    snprintf(why, size, "%s", e.msg);
    return OA_READ_FAIL;
}

static const oa_reply_reader LLAMA_READER = {"/completion", llama_begin, llama_feed,
                                             llama_finish};

/* The body of r's request: vLLM and SGLang the whole sequence,
 * llama-server its tokens before position t. */
static char *request_body(const score_req *r, const div_server *v, size_t t)
{
    cJSON *o = cJSON_CreateObject();
    cJSON *ids = cJSON_CreateArray();
    bool ok = o != NULL && ids != NULL;
    const size_t n = v->kind == DIV_KIND_LLAMA ? t : r->q->n_tokens;
    for (size_t i = 0; ok && i < n; i++) {
        cJSON *x = cJSON_CreateNumber(r->q->tokens[i]);
        ok = x != NULL && cJSON_AddItemToArray(ids, x);
    }
    if (v->kind == DIV_KIND_SGLANG) {
        cJSON *sp = cJSON_CreateObject();
        ok = ok && sp != NULL && cJSON_AddNumberToObject(sp, "max_new_tokens", 0) &&
             cJSON_AddNumberToObject(sp, "temperature", 1) &&
             cJSON_AddNumberToObject(sp, "top_p", 1);
        if (!ok) cJSON_Delete(sp);
        ok = ok && cJSON_AddItemToObject(o, "sampling_params", sp) &&
             cJSON_AddItemToObject(o, "input_ids", ids) &&
             cJSON_AddBoolToObject(o, "return_logprob", true) &&
             cJSON_AddNumberToObject(o, "logprob_start_len", 0) &&
             cJSON_AddNumberToObject(o, "top_logprobs_num", r->ds->o.top_k);
        if (!ok && ids != NULL && cJSON_GetObjectItemCaseSensitive(o, "input_ids") == ids)
            ids = NULL;  /* owned by o now */
    } else if (v->kind == DIV_KIND_VLLM) {
        ok = ok && cJSON_AddStringToObject(o, "model", v->model) &&
             cJSON_AddItemToObject(o, "prompt", ids) &&
             cJSON_AddNumberToObject(o, "prompt_logprobs", r->ds->o.top_k) &&
             cJSON_AddNumberToObject(o, "max_tokens", 1) &&
             cJSON_AddBoolToObject(o, "return_token_ids", true);
    } else {
        ok = ok && cJSON_AddItemToObject(o, "prompt", ids) &&
             cJSON_AddNumberToObject(o, "n_predict", 1) &&
             cJSON_AddNumberToObject(o, "n_probs", r->ds->o.top_k) &&
             cJSON_AddBoolToObject(o, "cache_prompt", true);
    }
    if (!ok && ids != NULL && cJSON_GetObjectItemCaseSensitive(o, "prompt") != ids)
        cJSON_Delete(ids);
    char *body = ok ? cJSON_PrintUnformatted(o) : NULL;
    cJSON_Delete(o);
    return body;
}

/* What one oa_run reports to. */
typedef struct score_ctx {
    diverge_session *ds;
    pg_store *s;
    int64_t run_id;
    diverge_counts *c;
    int64_t done, total;
} score_ctx;

/* Says a failed scoring through the notes (with the hint of vLLM's K cap). */
static void note_failure(score_ctx *x, const score_req *r, const oa_response *resp)
{
    const bool cap = resp->error && strstr(resp->error, DIV_VLLM_MAX_LOGPROBS_TEXT) != NULL;
    pg_note_warning(x->ds->o.notes, "diverge: mode %s%s, sequence '%s' not scored: %s%s", r->mode,
                    r->pass == DIV_PASS_FLOOR ? " (noise floor)" : "", r->q->id,
                    resp->error ? resp->error : "(no reason)",
                    cap ? " (vLLM caps K at its --max-logprobs, default 20: start it with a "
                          "larger --max-logprobs, or give --top-k at most that)"
                        : "");
    x->c->errors++;
}

/* vLLM, SGLang: a sequence's request finished: stored, or said. */
static pg_status on_whole_done(void *ctx, const oa_request *req, const oa_response *resp,
                              const oa_progress *prog, pg_err *err)
{
    (void)prog;
    score_ctx *x = ctx;
    score_req *r = req->user;
    pg_status st = PG_OK;
    if (resp->outcome == OA_OK) {
        st = divergence_store_put_scores(x->s, x->run_id, r->mode, r->pass, r->q->id,
                                         resp->server, x->ds->o.top_k, &r->sc, err);
        if (st == PG_OK) x->c->scored++;
    } else {
        note_failure(x, r, resp);
    }
    div_scored_free(&r->sc);
    whole_parser_free(r);
    pg_note_progress_step(x->ds->o.notes, ++x->done, r->q->id);
    return st;
}

/* llama-server: one position's request finished; a failure drops its
 * sequence (said once). */
static pg_status on_llama_done(void *ctx, const oa_request *req, const oa_response *resp,
                               const oa_progress *prog, pg_err *err)
{
    (void)prog;
    (void)err;
    score_ctx *x = ctx;
    score_req *r = req->user;
    if (resp->outcome != OA_OK && !r->failed) {
        r->failed = true;
        note_failure(x, r, resp);
    }
    if (resp->outcome == OA_OK && resp->server) {
        /* several servers of the mode: the ones that answered, '+'-joined */
        if (strstr(r->server, resp->server) == NULL) {
            const size_t at = strlen(r->server);
            snprintf(r->server + at, sizeof r->server - at, "%s%s", at ? "+" : "", resp->server);
        }
    }
    return PG_OK;
}

/* The (mode, pass) jobs of a run, in the order they are sent. */
typedef struct score_job {
    const char *mode;
    int pass;
} score_job;

/* Opens mode's servers again for a second pass at one request in flight
 * each (the noise floor's other concurrency) into eps. */
static pg_status open_floor_endpoints(diverge_session *ds, const char *mode, oa_endpoint **eps,
                                      int *n, pg_err *err)
{
    *n = 0;
    oa_options one = ds->o.client;
    one.max_in_flight = 1;
    pg_status st = PG_OK;
    for (int i = 0; st == PG_OK && i < ds->n_srv; i++) {
        if (strcmp(ds->srv[i].mode, mode) != 0) continue;
        st = oa_endpoint_open(mode, ds->srv[i].url, ds->o.api_key_env, ds->o.api_key, &one,
                              &eps[*n], err);
        if (st == PG_OK) (*n)++;
    }
    return st;
}

/* Sends the whole-sequence requests (vLLM, SGLang) of reqs[0..n) (of one
 * mode and pass) to eps. */
static pg_status score_whole(score_ctx *x, oa_endpoint **eps, int n_eps, score_req *reqs,
                            size_t n, pg_err *err)
{
    oa_request *oq = calloc(n ? n : 1, sizeof *oq);
    if (oq == NULL) return pg_fail(err, PG_ERR_NOMEM, "diverge: out of memory");
    pg_status st = PG_OK;
    for (size_t i = 0; st == PG_OK && i < n; i++) {
        score_req *r = &reqs[i];
        r->into = &r->sc;
        div_server *v = first_server(x->ds, r->mode);
        r->n_vocab = v->n_vocab;
        r->kind = v->kind;
        oq[i] = (oa_request){.mode = r->mode, .problem_id = r->q->id, .user = r,
                             .reader = v->kind == DIV_KIND_SGLANG ? &SGLANG_READER : &VLLM_READER,
                             .reader_ctx = r,
                             .body_json = request_body(r, v, 0)};
        if (oq[i].body_json == NULL) st = pg_fail(err, PG_ERR_NOMEM, "diverge: out of memory");
    }
    if (st == PG_OK) st = oa_run(eps, n_eps, oq, (int)n, on_whole_done, x, err);
    for (size_t i = 0; i < n; i++) {
        free(oq[i].body_json);
        div_scored_free(&reqs[i].sc);
        whole_parser_free(&reqs[i]);
    }
    free(oq);
    return st;
}

/* Sends the llama-server requests of reqs[0..n) (one mode and pass): in
 * batches of as many sequences as the mode's servers take at once, each
 * batch position by position (a sequence's requests in order, so its slot's
 * prompt cache holds its prefix), and stores each whole sequence. */
static pg_status score_llama(score_ctx *x, oa_endpoint **eps, int n_eps, score_req *reqs,
                             size_t n, int per_server, pg_err *err)
{
    const size_t batch = (size_t)(per_server * n_eps) > 0 ? (size_t)(per_server * n_eps) : 1;
    oa_request *oq = calloc(batch, sizeof *oq);
    score_req **who = calloc(batch, sizeof *who);
    if (oq == NULL || who == NULL) {
        free(oq);
        free(who);
        return pg_fail(err, PG_ERR_NOMEM, "diverge: out of memory");
    }
    pg_status st = PG_OK;
    for (size_t b0 = 0; st == PG_OK && b0 < n; b0 += batch) {
        const size_t b1 = b0 + batch < n ? b0 + batch : n;
        size_t longest = 0;
        for (size_t i = b0; i < b1; i++) {
            reqs[i].into = &reqs[i].sc;
            reqs[i].n_vocab = first_server(x->ds, reqs[i].mode)->n_vocab;
            const size_t len = reqs[i].q->n_tokens - reqs[i].q->score_from;
            if (len > longest) longest = len;
        }
        for (size_t off = 0; st == PG_OK && off < longest; off++) {
            int m = 0;
            for (size_t i = b0; st == PG_OK && i < b1; i++) {
                score_req *r = &reqs[i];
                const size_t t = r->q->score_from + off;
                if (r->failed || t >= r->q->n_tokens) continue;
                r->given = r->q->tokens[t];
                oq[m] = (oa_request){.mode = r->mode, .problem_id = r->q->id, .user = r,
                                     .reader = &LLAMA_READER, .reader_ctx = r,
                                     .body_json = request_body(r, first_server(x->ds, r->mode), t)};
                who[m] = r;
                if (oq[m++].body_json == NULL)
                    st = pg_fail(err, PG_ERR_NOMEM, "diverge: out of memory");
            }
            if (st == PG_OK) st = oa_run(eps, n_eps, oq, m, on_llama_done, x, err);
            for (int k = 0; k < m; k++) free(oq[k].body_json);
            /* a position the reader did not append (a failure) fails its sequence */
            for (int k = 0; st == PG_OK && k < m; k++)
                if (who[k]->sc.n != off + 1) who[k]->failed = true;
        }
        for (size_t i = b0; i < b1; i++) {
            score_req *r = &reqs[i];
            if (st == PG_OK && !r->failed) {
                st = divergence_store_put_scores(x->s, x->run_id, r->mode, r->pass, r->q->id,
                                                 r->server, x->ds->o.top_k, &r->sc, err);
                if (st == PG_OK) x->c->scored++;
            }
            div_scored_free(&r->sc);
            free(r->body);
            r->body = NULL;
            r->body_cap = r->body_len = 0;
            pg_note_progress_step(x->ds->o.notes, ++x->done, r->q->id);
        }
    }
    free(oq);
    free(who);
    return st;
}

pg_status diverge_score(diverge_session *ds, pg_store *s, int64_t run_id, diverge_counts *c,
                        pg_err *err)
{
    *c = (diverge_counts){0};
    score_job jobs[DIV_MAX_MODES + 1];
    int n_jobs = 0;
    for (int m = 0; m < ds->n_modes; m++) jobs[n_jobs++] = (score_job){ds->modes[m], DIV_PASS_MAIN};
    if (ds->o.noise_floor) jobs[n_jobs++] = (score_job){ds->o.reference, DIV_PASS_FLOOR};
    const size_t n_seq = ds->seqs->n;
    score_req *reqs = calloc(n_seq, sizeof *reqs);
    if (reqs == NULL) return pg_fail(err, PG_ERR_NOMEM, "diverge: out of memory");
    score_ctx x = {ds, s, run_id, c, 0, (int64_t)n_seq * n_jobs};
    pg_note_progress_begin(ds->o.notes, x.total);
    pg_status st = PG_OK;
    for (int j = 0; st == PG_OK && j < n_jobs; j++) {
        const score_job *jb = &jobs[j];
        size_t n = 0;
        for (size_t i = 0; st == PG_OK && i < n_seq; i++) {
            /* The floor goes through the sequences in reverse order. */
            const div_sequence *q =
                &ds->seqs->v[jb->pass == DIV_PASS_FLOOR ? n_seq - 1 - i : i];
            int has = 0;
            st = divergence_store_has_scores(s, run_id, jb->mode, jb->pass, q->id, &has, err);
            if (st == PG_OK && has) {
                c->skipped++;
                pg_note_progress_step(ds->o.notes, ++x.done, q->id);
            } else if (st == PG_OK) {
                reqs[n++] = (score_req){.ds = ds, .q = q, .mode = jb->mode, .pass = jb->pass};
            }
        }
        if (st != PG_OK || n == 0) continue;
        oa_endpoint *eps[DIV_MAX_SERVERS];
        int n_eps = 0;
        bool own = jb->pass == DIV_PASS_FLOOR;
        if (own) {
            st = open_floor_endpoints(ds, jb->mode, eps, &n_eps, err);
        } else {
            for (int i = 0; i < ds->n_srv; i++)
                if (strcmp(ds->srv[i].mode, jb->mode) == 0) eps[n_eps++] = ds->srv[i].ep;
        }
        const div_server *v = first_server(ds, jb->mode);
        if (st == PG_OK && v->kind == DIV_KIND_LLAMA)
            st = score_llama(&x, eps, n_eps, reqs, n, own ? 1 : ds->o.client.max_in_flight, err);
        else if (st == PG_OK)
            st = score_whole(&x, eps, n_eps, reqs, n, err);
        if (own)
            for (int i = 0; i < n_eps; i++) oa_endpoint_close(eps[i]);
    }
    pg_note_progress_end(ds->o.notes);
    free(reqs);
    return st;
}

/* ---- comparing ---------------------------------------------------------- */

/* Position i of sc as a side. */
static div_side side_at(const div_scored *sc, size_t i)
{
    return (div_side){.top = sc->entries + sc->top_at[i],
                      .n_top = sc->top_at[i + 1] - sc->top_at[i],
                      .given = sc->given[i],
                      .given_logprob = sc->given_lp[i]};
}

/* One comparison's positions over all sequences (for its summary). */
typedef struct compare_acc {
    const char *mode;     /* Q */
    int q_pass;
    div_role role;
    div_position *pos;
    size_t *seq;
    size_t n, cap;
} compare_acc;

/* Checks that sc scored q's tokens from score_from on. */
static pg_status check_scored(const div_sequence_stored *q, const div_scored *sc,
                              const char *mode, int pass, pg_err *err)
{
    const size_t want = q->n_tokens - q->score_from;
    if (sc->n != want)
        return pg_fail(err, PG_ERR_FORMAT, "mode %s (pass %d), sequence '%s': %zu positions "
                       "scored, the sequence has %zu", mode, pass, q->seq_id, sc->n, want);
    for (size_t i = 0; i < want; i++)
        if (sc->given[i] != q->tokens[q->score_from + i])
            return pg_fail(err, PG_ERR_FORMAT, "mode %s (pass %d), sequence '%s': position %zu "
                           "scored token %" PRId32 ", the sequence has %" PRId32, mode, pass,
                           q->seq_id, q->score_from + i, sc->given[i],
                           q->tokens[q->score_from + i]);
    return PG_OK;
}

/* Compares P with Q over q's positions into acc (grown) and the store. */
static pg_status compare_one(pg_store *s, int64_t run_id, const div_sequence_stored *q,
                             size_t qi, const div_scored *p, const div_scored *qs,
                             compare_acc *acc, pg_err *err)
{
    if (acc->n + p->n > acc->cap) {
        size_t nc = acc->cap ? acc->cap : 1024;
        while (nc < acc->n + p->n) nc *= 2;
        div_position *np = realloc(acc->pos, nc * sizeof *np);
        if (np) acc->pos = np;
        size_t *ns = realloc(acc->seq, nc * sizeof *ns);
        if (ns) acc->seq = ns;
        if (!np || !ns) return pg_fail(err, PG_ERR_NOMEM, "diverge: out of memory");
        acc->cap = nc;
    }
    div_position *out = acc->pos + acc->n;
    for (size_t i = 0; i < p->n; i++) {
        const div_side sp = side_at(p, i), sq = side_at(qs, i);
        pg_err e = {0};
        if (div_position_compute(&sp, &sq, &out[i], &e) != PG_OK)
            return pg_fail(err, e.code, "mode %s against the reference, sequence '%s', position "
                           "%zu: %s", acc->mode, q->seq_id, q->score_from + i, e.msg);
        acc->seq[acc->n + i] = qi;
    }
    pg_status st = divergence_store_put_positions(s, run_id, acc->mode, acc->role, q->seq_id, out,
                                                  p->n, err);
    if (st == PG_OK) acc->n += p->n;
    return st;
}

pg_status diverge_compare(pg_store *s, int64_t run_id, const char *reference,
                          const char *const *modes, int n_modes, int top_k, pg_err *err)
{
    div_sequence_stored *seqs = NULL;
    size_t n_seq = 0;
    pg_status st = divergence_store_read_sequences(s, run_id, &seqs, &n_seq, err);
    compare_acc acc[DIV_MAX_MODES + 1];
    int n_acc = 0;
    for (int m = 0; m < n_modes && n_acc < DIV_MAX_MODES; m++)
        if (strcmp(modes[m], reference) != 0)
            acc[n_acc++] = (compare_acc){.mode = modes[m], .q_pass = DIV_PASS_MAIN,
                                         .role = DIV_ROLE_MODE};
    /* The floor: the reference's second scoring against its first, when scored. */
    int has_floor = 0;
    for (size_t i = 0; st == PG_OK && i < n_seq && !has_floor; i++)
        st = divergence_store_has_scores(s, run_id, reference, DIV_PASS_FLOOR, seqs[i].seq_id,
                                         &has_floor, err);
    if (has_floor)
        acc[n_acc++] = (compare_acc){.mode = reference, .q_pass = DIV_PASS_FLOOR,
                                     .role = DIV_ROLE_FLOOR};
    div_scored p = {0}, q = {0};
    for (size_t i = 0; st == PG_OK && i < n_seq; i++) {
        int found = 0;
        st = divergence_store_read_scores(s, run_id, reference, DIV_PASS_MAIN, seqs[i].seq_id, &p,
                                          NULL, 0, &found, err);
        if (st == PG_OK && !found)
            st = pg_fail(err, PG_ERR_FORMAT, "run %" PRId64 ": the reference %s has no scores of "
                         "sequence '%s' (the run is not whole: --resume scores it)", run_id,
                         reference, seqs[i].seq_id);
        if (st == PG_OK) st = check_scored(&seqs[i], &p, reference, DIV_PASS_MAIN, err);
        for (int a = 0; st == PG_OK && a < n_acc; a++) {
            st = divergence_store_read_scores(s, run_id, acc[a].mode, acc[a].q_pass,
                                              seqs[i].seq_id, &q, NULL, 0, &found, err);
            if (st == PG_OK && !found)
                st = pg_fail(err, PG_ERR_FORMAT, "run %" PRId64 ": mode %s%s has no scores of "
                             "sequence '%s' (the run is not whole: --resume scores it)", run_id,
                             acc[a].mode, acc[a].role == DIV_ROLE_FLOOR ? " (noise floor)" : "",
                             seqs[i].seq_id);
            if (st == PG_OK) st = check_scored(&seqs[i], &q, acc[a].mode, acc[a].q_pass, err);
            if (st == PG_OK) st = compare_one(s, run_id, &seqs[i], i, &p, &q, &acc[a], err);
        }
    }
    div_scored_free(&p);
    div_scored_free(&q);
    for (int a = 0; st == PG_OK && a < n_acc; a++) {
        div_summary sm;
        st = div_summary_compute(acc[a].pos, acc[a].seq, acc[a].n, &sm, err);
        if (st == PG_OK)
            st = divergence_store_put_summary(s, run_id, acc[a].mode, acc[a].role, reference,
                                              top_k, &sm, err);
    }
    for (int a = 0; a < n_acc; a++) {
        free(acc[a].pos);
        free(acc[a].seq);
    }
    divergence_store_sequences_free(seqs, n_seq);
    return st;
}

/* Whether stored sequences a and b are the same sequence (tokens and score_from). */
static int same_sequence(const div_sequence_stored *a, const div_sequence_stored *b)
{
    return a->n_tokens == b->n_tokens && a->score_from == b->score_from &&
           memcmp(a->tokens, b->tokens, a->n_tokens * sizeof *a->tokens) == 0;
}

/* The totals of (run_id, mode, role mode)'s positions of sequence seq_id into *t. */
static pg_status seq_total(pg_store *s, int64_t run_id, const char *mode, const char *seq_id,
                           div_seq_total *t, pg_err *err)
{
    div_position *pos = NULL;
    size_t n = 0;
    pg_status st = divergence_store_read_positions(s, run_id, mode, DIV_ROLE_MODE, seq_id, &pos,
                                                   &n, err);
    if (st == PG_OK && n == 0)
        st = pg_fail(err, PG_ERR_FORMAT, "run %" PRId64 ": mode %s has no positions of sequence "
                     "'%s' (the run was not compared whole)", run_id, mode, seq_id);
    if (st == PG_OK) *t = div_seq_total_of(pos, n);
    free(pos);
    return st;
}

pg_status diverge_pair_runs(pg_store *s, int64_t run_id, int64_t base_id, const char *mode,
                            div_paired *out, char unpaired[DIV_UNPAIRED_MAX], pg_err *err)
{
    memset(out, 0, sizeof *out);
    unpaired[0] = '\0';
    div_sequence_stored *a = NULL, *b = NULL;
    size_t na = 0, nb = 0;
    pg_status st = divergence_store_read_sequences(s, run_id, &a, &na, err);
    if (st == PG_OK) st = divergence_store_read_sequences(s, base_id, &b, &nb, err);
    /* Both come sorted by seq_id, so one walk pairs them. */
    for (size_t i = 0; st == PG_OK && unpaired[0] == '\0' && i < (na > nb ? na : nb); i++) {
        if (i >= na || i >= nb || strcmp(a[i].seq_id, b[i].seq_id) != 0)
            snprintf(unpaired, DIV_UNPAIRED_MAX, "the sequences differ: run %" PRId64 " has %zu, "
                     "baseline run %" PRId64 " %zu, the first differing '%.40s'", run_id, na,
                     base_id, nb, i < na ? a[i].seq_id : b[i].seq_id);
        else if (!same_sequence(&a[i], &b[i]))
            snprintf(unpaired, DIV_UNPAIRED_MAX, "sequence '%.40s' has other tokens in baseline "
                     "run %" PRId64 " (a tokenizer that changed tokenizes its text otherwise)",
                     a[i].seq_id, base_id);
    }
    div_summary_stored *sm = NULL;
    size_t n_sm = 0;
    int base_has = 0;
    if (st == PG_OK && unpaired[0] == '\0')
        st = divergence_store_read_summaries(s, base_id, &sm, &n_sm, err);
    for (size_t i = 0; i < n_sm; i++)
        base_has |= strcmp(sm[i].mode, mode) == 0 && strcmp(sm[i].role, div_role_name(DIV_ROLE_MODE)) == 0;
    divergence_store_summaries_free(sm, n_sm);
    if (st == PG_OK && unpaired[0] == '\0' && !base_has)
        snprintf(unpaired, DIV_UNPAIRED_MAX, "baseline run %" PRId64 " did not compare mode %s",
                 base_id, mode);
    div_seq_total *tr = NULL, *tb = NULL;
    if (st == PG_OK && unpaired[0] == '\0') {
        tr = calloc(na + 1, sizeof *tr);
        tb = calloc(na + 1, sizeof *tb);
        if (tr == NULL || tb == NULL) st = pg_fail(err, PG_ERR_NOMEM, "diverge: out of memory");
        for (size_t i = 0; st == PG_OK && i < na; i++) {
            st = seq_total(s, run_id, mode, a[i].seq_id, &tr[i], err);
            if (st == PG_OK) st = seq_total(s, base_id, mode, a[i].seq_id, &tb[i], err);
        }
        if (st == PG_OK) st = div_paired_compute(tr, tb, na, out, err);
    }
    free(tr);
    free(tb);
    divergence_store_sequences_free(a, na);
    divergence_store_sequences_free(b, nb);
    return st;
}
