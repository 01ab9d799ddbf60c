/* sglang_logprobs.c: the streaming parser of SGLang's input logprobs (see sglang_logprobs.h). */
#include "sglang_logprobs.h"

#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "divergence.h"
#include "json_stream.h"

/* Container depths of the reply: the root object, meta_info, one of its
 * two arrays, an entry of it, a triple of a top list. */
enum { DEPTH_ROOT = 1, DEPTH_META = 2, DEPTH_LIST = 3, DEPTH_ENTRY = 4, DEPTH_TRIPLE = 5 };
/* Items of a [logprob, id, text] triple. */
#define SG_TRIPLE 3

/* Which of meta_info's arrays a key names, or is open. */
typedef enum sg_list { LIST_NONE, LIST_TOKENS, LIST_TOP } sg_list;

/* The triple being read. */
typedef struct sg_triple {
    int n;            /* items so far */
    bool lp_null;     /* its logprob is null */
    double lp;        /* NaN until read */
    int64_t id;       /* -1 until read */
} sg_triple;

struct sg_parser {
    const int32_t *ids;
    size_t n_ids, top_k;
    int64_t n_vocab;
    size_t want;                /* entries a top list must have: K, or the vocabulary */
    char what[PL_WHAT_MAX];
    pl_position_fn on_position;
    void *ctx;
    js_parser *json;
    int depth;                  /* open containers */
    bool key_meta;              /* the root's last key was "meta_info" */
    bool in_meta;               /* meta_info's object is open */
    sg_list pending, open;      /* meta_info's last key; the array open */
    bool saw[3];                /* by sg_list: that array was read whole */
    size_t n_tok, n_top_lists;  /* entries read of each array */
    double *given_lp;           /* [n_ids]; NaN: null (position 0) */
    div_entry *top;             /* [n_ids * top_k] */
    size_t *n_top;              /* [n_ids] */
    int32_t *scratch;           /* [top_k]: a list's ids, sorted to find one twice */
    sg_triple cur;
    pg_status st;
    pg_err err;
};

/* Records the parser's first failure (PG_ERR_FORMAT or code) "what: ..."; returns 0 (stop). */
static int fail(sg_parser *p, pg_status code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int fail(sg_parser *p, pg_status code, const char *fmt, ...)
{
    if (p->st != PG_OK) return 0;
    char msg[PG_ERR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    p->st = pg_fail(&p->err, code, "%s: %s", p->what, msg);
    return 0;
}

/* The name of the array open, for messages. */
static const char *list_name(const sg_parser *p)
{
    return p->open == LIST_TOKENS ? "input_token_logprobs" : "input_top_logprobs";
}

/* The entry being read of the open array (its index). */
static size_t entry_index(const sg_parser *p)
{
    return (p->open == LIST_TOKENS ? p->n_tok : p->n_top_lists) - 1;
}

/* A scalar where a triple's item is due: at depth DEPTH_ENTRY of the token
 * array, DEPTH_TRIPLE of a top list. 1 when it is one, else 0. */
static int at_item(const sg_parser *p)
{
    return (p->open == LIST_TOKENS && p->depth == DEPTH_ENTRY) ||
           (p->open == LIST_TOP && p->depth == DEPTH_TRIPLE);
}

/* A scalar inside the open array but not where an item is due: refused. */
static int misplaced(sg_parser *p, const char *kind)
{
    if (p->open == LIST_TOP && p->depth == DEPTH_LIST)
        return fail(p, PG_ERR_FORMAT, "input_top_logprobs entry %zu is %s, not a list or null",
                    p->n_top_lists, kind);
    return fail(p, PG_ERR_FORMAT, "%s entry %zu holds %s where a [logprob, id, text] triple is "
                "due", list_name(p), p->open == LIST_TOKENS && p->depth == DEPTH_LIST
                                         ? p->n_tok : entry_index(p), kind);
}

/* Item n of the triple being read: a number (v), null (is_null) or other. */
static int triple_item(sg_parser *p, bool is_number, bool is_null, double v, const char *kind)
{
    sg_triple *c = &p->cur;
    const int i = c->n++;
    if (i >= SG_TRIPLE)
        return fail(p, PG_ERR_FORMAT, "%s entry %zu: a triple of more than %d items",
                    list_name(p), entry_index(p), SG_TRIPLE);
    if (i == 0 && is_null) {
        c->lp_null = true;
    } else if (i == 0 && is_number) {
        if (isnan(v) || v > DIV_MASS_TOL)
            return fail(p, PG_ERR_NUMERIC, "%s entry %zu has logprob %g (not a log-probability)",
                        list_name(p), entry_index(p), v);
        c->lp = v;
    } else if (i == 0) {
        return fail(p, PG_ERR_NUMERIC, "%s entry %zu has a logprob that is %s (NaN or Infinity "
                    "is not a log-probability)", list_name(p), entry_index(p), kind);
    } else if (i == 1) {
        if (!is_number || v != floor(v) || v < 0 || v > (double)INT32_MAX ||
            (p->n_vocab > 0 && v >= (double)p->n_vocab))
            return fail(p, PG_ERR_FORMAT, "%s entry %zu: its id is %s, not a token id of the "
                        "vocabulary", list_name(p), entry_index(p), is_number ? "out of range"
                                                                              : kind);
        c->id = (int64_t)v;
    } else if (!is_null && strcmp(kind, "a string") != 0) {
        return fail(p, PG_ERR_FORMAT, "%s entry %zu: its text is %s, not a string or null",
                    list_name(p), entry_index(p), kind);
    }
    return 1;
}

/* A scalar of the reply: an item where one is due, else refused inside the
 * arrays read and skipped elsewhere. */
static int scalar(sg_parser *p, bool is_number, bool is_null, double v, const char *kind)
{
    if (p->open == LIST_NONE || p->depth < DEPTH_LIST) return 1;
    if (at_item(p)) return triple_item(p, is_number, is_null, v, kind);
    if (p->open == LIST_TOP && p->depth == DEPTH_LIST && is_null) {
        /* position 0 has no distribution */
        const size_t t = p->n_top_lists++;
        if (t >= p->n_ids)
            return fail(p, PG_ERR_FORMAT, "input_top_logprobs has more entries than the %zu ids "
                        "sent", p->n_ids);
        if (t != 0)
            return fail(p, PG_ERR_FORMAT, "input_top_logprobs entry %zu is null: position %zu "
                        "has no top list", t, t);
        return 1;
    }
    return misplaced(p, kind);
}

/* A key: meta_info at the root, one of its two arrays inside it. */
static int cb_map_key(sg_parser *p, const char *key, size_t len)
{
#define KEY_IS(k) (len == sizeof(k) - 1 && memcmp(key, k, len) == 0)
    if (p->depth == DEPTH_ROOT) p->key_meta = KEY_IS("meta_info");
    if (p->depth == DEPTH_META && p->in_meta)
        p->pending = KEY_IS("input_token_logprobs") ? LIST_TOKENS
                     : KEY_IS("input_top_logprobs") ? LIST_TOP
                                                    : LIST_NONE;
#undef KEY_IS
    return 1;
}

/* An object opens: meta_info's; refused inside the arrays read. */
static int cb_start_map(sg_parser *p)
{
    p->depth++;
    if (p->depth == DEPTH_META && p->key_meta) p->in_meta = true;
    if (p->open != LIST_NONE && p->depth > DEPTH_LIST)
        return misplaced(p, "an object");
    if (p->depth == DEPTH_LIST && p->pending != LIST_NONE)
        return fail(p, PG_ERR_FORMAT, "meta_info.%s is an object, not a list",
                    p->pending == LIST_TOKENS ? "input_token_logprobs" : "input_top_logprobs");
    return 1;
}

/* An object closes. */
static int cb_end_map(sg_parser *p)
{
    if (p->depth == DEPTH_META && p->in_meta) p->in_meta = false;
    p->depth--;
    if (p->depth == DEPTH_ROOT - 1) p->key_meta = false;
    return 1;
}

/* An array opens: one of meta_info's two, an entry or a top list's
 * triple; refused elsewhere inside them. */
static int cb_start_array(sg_parser *p)
{
    p->depth++;
    if (p->depth == DEPTH_LIST && p->in_meta && p->pending != LIST_NONE) {
        if (p->saw[p->pending])
            return fail(p, PG_ERR_FORMAT, "meta_info has %s twice",
                        p->pending == LIST_TOKENS ? "input_token_logprobs" : "input_top_logprobs");
        p->open = p->pending;
        p->pending = LIST_NONE;
        return 1;
    }
    if (p->open == LIST_NONE) return 1;
    if (p->depth == DEPTH_ENTRY) {
        const size_t t = p->open == LIST_TOKENS ? p->n_tok++ : p->n_top_lists++;
        if (t >= p->n_ids)
            return fail(p, PG_ERR_FORMAT, "%s has more entries than the %zu ids sent",
                        list_name(p), p->n_ids);
        if (p->open == LIST_TOKENS) p->cur = (sg_triple){.lp = NAN, .id = -1};
        if (p->open == LIST_TOP && t == 0)
            return fail(p, PG_ERR_FORMAT, "input_top_logprobs entry 0 is a list: the first "
                        "token has no distribution (null expected)");
        return 1;
    }
    if (p->open == LIST_TOP && p->depth == DEPTH_TRIPLE) {
        p->cur = (sg_triple){.lp = NAN, .id = -1};
        return 1;
    }
    return misplaced(p, "a list");
}

/* qsort order of ids. */
static int id_cmp(const void *a, const void *b)
{
    const int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* A token-array entry ends: it must be ids[t] with a logprob (t >= 1). */
static int end_token_entry(sg_parser *p)
{
    const size_t t = p->n_tok - 1;
    const sg_triple *c = &p->cur;
    if (c->n != SG_TRIPLE)
        return fail(p, PG_ERR_FORMAT, "input_token_logprobs entry %zu has %d items, not a "
                    "[logprob, id, text] triple", t, c->n);
    if (c->id != p->ids[t])
        return fail(p, PG_ERR_FORMAT, "input_token_logprobs entry %zu is token %lld, but the "
                    "request sent %d there", t, (long long)c->id, (int)p->ids[t]);
    if (t > 0 && c->lp_null)
        return fail(p, PG_ERR_FORMAT, "input_token_logprobs entry %zu (token %d) has a null "
                    "logprob", t, (int)p->ids[t]);
    p->given_lp[t] = t > 0 ? c->lp : NAN;
    return 1;
}

/* A top-list triple ends: kept as position t's next entry. */
static int end_top_triple(sg_parser *p)
{
    const size_t t = p->n_top_lists - 1;
    const sg_triple *c = &p->cur;
    if (c->n != SG_TRIPLE || c->lp_null)
        return fail(p, PG_ERR_FORMAT, "input_top_logprobs entry %zu: an item is not a "
                    "[logprob, id, text] triple with a logprob", t);
    if (p->n_top[t] >= p->want)
        return fail(p, PG_ERR_FORMAT, "input_top_logprobs entry %zu has more than the %zu "
                    "tokens asked for", t, p->want);
    p->top[t * p->top_k + p->n_top[t]++] = (div_entry){.id = (int32_t)c->id, .logprob = c->lp};
    return 1;
}

/* A top list ends: exactly want entries, no id twice. */
static int end_top_list(sg_parser *p)
{
    const size_t t = p->n_top_lists - 1, n = p->n_top[t];
    if (n != p->want)
        return fail(p, PG_ERR_FORMAT, "input_top_logprobs entry %zu has %zu tokens, not the %zu "
                    "asked for (top_logprobs_num)", t, n, p->want);
    const div_entry *e = &p->top[t * p->top_k];
    for (size_t i = 0; i < n; i++) p->scratch[i] = e[i].id;
    qsort(p->scratch, n, sizeof *p->scratch, id_cmp);
    for (size_t i = 1; i < n; i++)
        if (p->scratch[i] == p->scratch[i - 1])
            return fail(p, PG_ERR_FORMAT, "input_top_logprobs entry %zu lists token %d twice", t,
                        (int)p->scratch[i]);
    return 1;
}

/* An array closes: an entry, a triple or a top list checked, or one of
 * meta_info's arrays read whole. */
static int cb_end_array(sg_parser *p)
{
    int ok = 1;
    if (p->open == LIST_TOKENS && p->depth == DEPTH_ENTRY) ok = end_token_entry(p);
    else if (p->open == LIST_TOP && p->depth == DEPTH_TRIPLE) ok = end_top_triple(p);
    else if (p->open == LIST_TOP && p->depth == DEPTH_ENTRY) ok = end_top_list(p);
    else if (p->open != LIST_NONE && p->depth == DEPTH_LIST) {
        p->saw[p->open] = true;
        p->open = LIST_NONE;
    }
    p->depth--;
    return ok;
}

/* The JSON parser's token callback: scalars to scalar(), the rest to their
 * handlers above; a refusal (recorded in p) returned as the parse's status. */
static pg_status on_token(void *ctx, const js_token *tok, pg_err *err)
{
    sg_parser *p = ctx;
    int ok = 1;
    switch (tok->type) {
    case JS_KEY: ok = cb_map_key(p, tok->text, tok->len); break;
    case JS_NUMBER: ok = scalar(p, true, false, tok->value, "a number"); break;
    case JS_STRING: ok = scalar(p, false, false, NAN, "a string"); break;
    case JS_NULL: ok = scalar(p, false, true, NAN, "null"); break;
    case JS_TRUE:
    case JS_FALSE: ok = scalar(p, false, false, NAN, "a boolean"); break;
    case JS_OBJECT_START: ok = cb_start_map(p); break;
    case JS_OBJECT_END: ok = cb_end_map(p); break;
    case JS_ARRAY_START: ok = cb_start_array(p); break;
    case JS_ARRAY_END: ok = cb_end_array(p); break;
    }
    return ok ? PG_OK : pg_fail(err, p->st, "%s", p->err.msg);
}

sg_parser *sg_parser_new(const int32_t *ids, size_t n_ids, size_t top_k, int64_t n_vocab,
                         const char *what, pl_position_fn on_position, void *ctx)
{
    if (ids == NULL || n_ids < 1 || top_k < 1 || top_k > PL_MAX_TOP_K || what == NULL ||
        on_position == NULL || n_ids > SIZE_MAX / sizeof(div_entry) / top_k)
        return NULL;
    sg_parser *p = calloc(1, sizeof *p);
    if (p == NULL) return NULL;
    p->ids = ids;
    p->n_ids = n_ids;
    p->top_k = top_k;
    p->n_vocab = n_vocab;
    p->want = n_vocab > 0 && (uint64_t)n_vocab < top_k ? (size_t)n_vocab : top_k;
    snprintf(p->what, sizeof p->what, "%s", what);
    p->on_position = on_position;
    p->ctx = ctx;
    p->given_lp = malloc(n_ids * sizeof *p->given_lp);
    p->top = malloc(n_ids * top_k * sizeof *p->top);
    p->n_top = calloc(n_ids, sizeof *p->n_top);
    p->scratch = malloc(top_k * sizeof *p->scratch);
    p->json = js_parser_new(p->what, on_token, p);
    if (!p->given_lp || !p->top || !p->n_top || !p->scratch || !p->json) {
        sg_parser_free(p);
        return NULL;
    }
    for (size_t t = 0; t < n_ids; t++) p->given_lp[t] = NAN;
    return p;
}

pg_status sg_parser_feed(sg_parser *p, const char *data, size_t len, pg_err *err)
{
    if (p == NULL) return pg_fail(err, PG_ERR_INTERNAL, "sg_parser_feed: NULL argument");
    return js_parser_feed(p->json, data, len, err);
}

pg_status sg_parser_finish(sg_parser *p, pg_err *err)
{
    if (p == NULL) return pg_fail(err, PG_ERR_INTERNAL, "sg_parser_finish: NULL argument");
    const pg_status done = js_parser_finish(p->json, err);
    if (done != PG_OK) return done;
    for (int l = LIST_TOKENS; l <= LIST_TOP; l++)
        if (!p->saw[l])
            return pg_fail(err, PG_ERR_FORMAT, "%s: the reply has no meta_info.%s (a server that "
                           "ignored return_logprob%s)", p->what,
                           l == LIST_TOKENS ? "input_token_logprobs" : "input_top_logprobs",
                           l == LIST_TOP ? " or top_logprobs_num" : "");
    if (p->n_tok != p->n_ids || p->n_top_lists != p->n_ids)
        return pg_fail(err, PG_ERR_FORMAT, "%s: input_token_logprobs has %zu entries and "
                       "input_top_logprobs %zu for the %zu ids sent", p->what, p->n_tok,
                       p->n_top_lists, p->n_ids);
    for (size_t t = 1; t < p->n_ids; t++) {
        const div_side side = {.top = &p->top[t * p->top_k], .n_top = p->n_top[t],
                               .given = p->ids[t], .given_logprob = p->given_lp[t]};
        const pg_status st = p->on_position(p->ctx, t, &side, err);
        if (st != PG_OK) return st;
    }
    return PG_OK;
}

void sg_parser_free(sg_parser *p)
{
    if (p == NULL) return;
    js_parser_free(p->json);
    free(p->given_lp);
    free(p->top);
    free(p->n_top);
    free(p->scratch);
    free(p);
}
