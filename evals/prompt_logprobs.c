/* prompt_logprobs.c: streaming parser of vLLM's prompt-logprobs reply (see prompt_logprobs.h). */
#include "prompt_logprobs.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "json_stream.h"

/* The nesting depths of the reply's fields (1 = the top-level object). */
enum {
    DEPTH_ROOT = 1,      /* {"choices": ...} */
    DEPTH_CHOICES = 2,   /* [choice, ...] */
    DEPTH_CHOICE = 3,    /* {"prompt_logprobs": ..., "prompt_token_ids": ...} */
    DEPTH_LIST = 4,      /* [null, position, ...] or [id, ...] */
    DEPTH_POSITION = 5,  /* {"id": entry, ...} */
    DEPTH_ENTRY = 6      /* {"logprob": x, "rank": r, "decoded_token": s} */
};

/* A key twice is caught as it arrives, in a hash set of the open
 * position's ids: open addressing with linear probing in a power-of-two
 * table at least PL_ID_LOAD times the most keys (load <= 1/2, so about 1.5
 * probes a key), each slot stamped with the position it belongs to, so
 * that nothing is cleared between positions. */
#define PL_ID_LOAD 2
/* Fibonacci hashing: 2^32 / the golden ratio, the multiplier's high bits
 * the slot (Knuth, TAOCP vol. 3, 6.4). */
#define PL_FIB_HASH 2654435769u

/* One slot of the id set: empty unless stamp is the open position's. */
typedef struct pl_slot {
    int32_t id;
    uint32_t stamp;
} pl_slot;

/* One key of the open position. */
typedef struct pl_key {
    int32_t id;
    double logprob;   /* NaN until read */
    long long rank;   /* 0 until read */
} pl_key;

/* Which list of choice 0 is open. */
typedef enum pl_list { LIST_NONE, LIST_LOGPROBS, LIST_TOKEN_IDS } pl_list;

struct pl_parser {
    js_parser *json;
    const int32_t *ids;
    size_t n_ids, top_k;
    int64_t n_vocab;
    char what[PL_WHAT_MAX];
    pl_position_fn on_position;
    void *ctx;
    int depth;
    int key_choices;       /* the root's current key is "choices" */
    int choices_open;      /* inside the choices array */
    long choice;           /* index of the open choice (-1 before the first) */
    int choice_key;        /* the current key of choice 0: a pl_list value */
    pl_list open;          /* the list of choice 0 being read */
    int saw_logprobs, saw_token_ids;
    size_t n_entries;      /* entries of prompt_logprobs read */
    size_t n_token_ids;    /* ids of prompt_token_ids read */
    pl_key *keys;          /* the open position's keys (top_k + 1 at most) */
    size_t n_keys;
    pl_slot *slots;        /* the open position's ids (see PL_ID_LOAD) */
    uint32_t slot_mask;    /* table size - 1 */
    int slot_shift;        /* 32 - log2(table size) */
    uint32_t stamp;        /* the open position's stamp (never 0) */
    int entry_key;         /* 1: "logprob", 2: "rank", 0: another key */
    div_entry *top;        /* what the caller is handed */
    pg_status st;
    pg_err err;
};

/* Records a failure (the parser's message prefixed with its `what`) and
 * returns 0 (stop). */
__attribute__((format(printf, 3, 4)))
static int fail(pl_parser *p, pg_status code, const char *fmt, ...)
{
    char msg[PG_ERR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (p->st == PG_OK) p->st = pg_fail(&p->err, code, "%s: %s", p->what, msg);
    return 0;
}

/* In choice 0's map, i.e. where its keys and lists are. */
static int in_choice0(const pl_parser *p)
{
    return p->choices_open && p->choice == 0;
}

/* The position index entries are read at (the entry now open). */
static size_t position(const pl_parser *p)
{
    return p->n_entries;
}

/* A scalar in prompt_logprobs itself (not null): refused. */
static int scalar_in_list(pl_parser *p, const char *kind)
{
    return fail(p, PG_ERR_FORMAT, "prompt_logprobs entry %zu is %s, not a map of token ids or "
                "null", position(p), kind);
}

/* A numeric value v (integer when is_int) at the current depth. */
static int on_number(pl_parser *p, double v, long long iv, int is_int)
{
    if (p->open == LIST_TOKEN_IDS && p->depth == DEPTH_LIST) {
        const size_t i = p->n_token_ids++;
        if (!is_int || i >= p->n_ids || iv != p->ids[i])
            return fail(p, PG_ERR_FORMAT, "prompt_token_ids[%zu] is %g, but the request sent %s",
                        i, v, i < p->n_ids ? "another id" : "fewer ids");
        return 1;
    }
    if (p->open != LIST_LOGPROBS) return 1;
    if (p->depth == DEPTH_LIST) return scalar_in_list(p, "a number");
    if (p->depth == DEPTH_POSITION)
        return fail(p, PG_ERR_FORMAT, "prompt_logprobs entry %zu: token %d's value is a number, "
                    "not an object", position(p), (int)p->keys[p->n_keys - 1].id);
    if (p->depth != DEPTH_ENTRY) return 1;
    pl_key *k = &p->keys[p->n_keys - 1];
    if (p->entry_key == 1) {
        if (isnan(v) || v > DIV_MASS_TOL) {
            p->st = pg_fail(&p->err, PG_ERR_NUMERIC, "%s: prompt_logprobs entry %zu: token %d "
                            "has logprob %g (not a log-probability)", p->what, position(p),
                            (int)k->id, v);
            return 0;
        }
        k->logprob = v;
    } else if (p->entry_key == 2) {
        if (!is_int || iv < 1)
            return fail(p, PG_ERR_FORMAT, "prompt_logprobs entry %zu: token %d has rank %g "
                        "(expected an integer >= 1)", position(p), (int)k->id, v);
        k->rank = iv;
    }
    return 1;
}

/* null: entry 0 of prompt_logprobs; refused as another entry, a logprob or
 * a token id. */
static int cb_null(pl_parser *p)
{
    if (p->open == LIST_LOGPROBS && p->depth == DEPTH_LIST) {
        if (p->n_entries != 0)
            return fail(p, PG_ERR_FORMAT, "prompt_logprobs entry %zu is null (only entry 0, the "
                        "first token, has nothing to score)", p->n_entries);
        p->n_entries++;
        return 1;
    }
    if (p->open == LIST_LOGPROBS && p->depth == DEPTH_ENTRY && p->entry_key == 1)
        return fail(p, PG_ERR_FORMAT, "prompt_logprobs entry %zu: token %d has logprob null",
                    position(p), (int)p->keys[p->n_keys - 1].id);
    if (p->open == LIST_TOKEN_IDS && p->depth == DEPTH_LIST)
        return fail(p, PG_ERR_FORMAT, "prompt_token_ids[%zu] is null", p->n_token_ids);
    return 1;
}

/* true or false: refused as an entry of prompt_logprobs or a logprob. */
static int cb_boolean(pl_parser *p)
{
    if (p->open == LIST_LOGPROBS && p->depth == DEPTH_LIST) return scalar_in_list(p, "a boolean");
    if (p->open == LIST_LOGPROBS && p->depth == DEPTH_ENTRY && p->entry_key == 1)
        return fail(p, PG_ERR_FORMAT, "prompt_logprobs entry %zu: token %d has a boolean "
                    "logprob", position(p), (int)p->keys[p->n_keys - 1].id);
    return 1;
}

/* A string value s[0..len) (its first bytes): refused as an entry of
 * prompt_logprobs or a logprob (PG_ERR_NUMERIC: a NaN some encoders write). */
static int cb_string(pl_parser *p, const unsigned char *s, size_t len)
{
    if (p->open == LIST_LOGPROBS && p->depth == DEPTH_LIST) return scalar_in_list(p, "a string");
    if (p->open == LIST_LOGPROBS && p->depth == DEPTH_ENTRY && p->entry_key == 1) {
        p->st = pg_fail(&p->err, PG_ERR_NUMERIC, "%s: prompt_logprobs entry %zu: token %d has "
                        "logprob \"%.*s\" (a string: NaN or Infinity is not a log-probability)",
                        p->what, position(p), (int)p->keys[p->n_keys - 1].id,
                        (int)(len < 32 ? len : 32), (const char *)s);
        return 0;
    }
    return 1;
}

/* Starts the id set of a new position (a fresh stamp; the table is
 * cleared only when the stamps wrap around). */
static void ids_reset(pl_parser *p)
{
    if (++p->stamp == 0) {
        memset(p->slots, 0, ((size_t)p->slot_mask + 1) * sizeof *p->slots);
        p->stamp = 1;
    }
}

/* Adds id to the open position's set: 1; 0 when it is there already. */
static int ids_add(pl_parser *p, int32_t id)
{
    uint32_t i = ((uint32_t)id * PL_FIB_HASH) >> p->slot_shift;
    for (;; i = (i + 1) & p->slot_mask) {
        pl_slot *sl = &p->slots[i];
        if (sl->stamp != p->stamp) {
            *sl = (pl_slot){id, p->stamp};
            return 1;
        }
        if (sl->id == id) return 0;
    }
}

/* Checks the closed position t and hands it to the caller. */
static int finish_position(pl_parser *p)
{
    const size_t t = position(p);
    const int32_t given = p->ids[t];
    const pl_key *g = NULL;
    size_t n_top = 0;
    for (size_t i = 0; i < p->n_keys; i++) {  /* no key twice: cb_map_key checked */
        const pl_key *k = &p->keys[i];
        if (k->rank == 0)
            return fail(p, PG_ERR_FORMAT, "prompt_logprobs entry %zu: token %d has no rank", t,
                        (int)k->id);
        if (isnan(k->logprob))
            return fail(p, PG_ERR_FORMAT, "prompt_logprobs entry %zu: token %d has no logprob",
                        t, (int)k->id);
        if (k->id == given) g = k;
        if ((size_t)k->rank <= p->top_k) p->top[n_top++] = (div_entry){k->id, k->logprob};
    }
    if (g == NULL)
        return fail(p, PG_ERR_FORMAT, "prompt_logprobs entry %zu lacks the given token %d (not "
                    "a prompt-logprobs reply for these ids)", t, (int)given);
    const size_t want = p->n_vocab > 0 && (uint64_t)p->n_vocab < p->top_k ? (size_t)p->n_vocab
                                                                            : p->top_k;
    if (n_top != want || p->n_keys > n_top + 1 || (p->n_keys == n_top + 1 &&
                                                    (size_t)g->rank <= p->top_k))
        return fail(p, PG_ERR_FORMAT, "prompt_logprobs entry %zu has %zu tokens ranked within "
                    "the top %zu and %zu in all (expected %zu, plus the given token when it "
                    "ranks below)", t, n_top, p->top_k, p->n_keys, want);
    const div_side side = {p->top, n_top, given, g->logprob};
    pg_err why;
    pg_err_clear(&why);  /* not = {0}: that writes all PG_ERR_MSG_MAX bytes, per position */
    const pg_status st = p->on_position(p->ctx, t, &side, &why);
    if (st != PG_OK) {
        p->st = pg_fail(&p->err, st, "%s: position %zu: %s", p->what, t, why.msg);
        return 0;
    }
    p->n_entries++;
    return 1;
}

/* An object opens: a position of prompt_logprobs starts its keys, a
 * choice is counted; refused as entry 0 or past the ids. */
static int cb_start_map(pl_parser *p)
{
    if (p->choices_open && p->depth == DEPTH_CHOICES) p->choice++;
    if (p->open == LIST_LOGPROBS && p->depth == DEPTH_LIST) {
        if (p->n_entries == 0)
            return fail(p, PG_ERR_FORMAT, "prompt_logprobs entry 0 is not null (the first "
                        "token has nothing before it to be scored on)");
        if (p->n_entries >= p->n_ids)
            return fail(p, PG_ERR_FORMAT, "prompt_logprobs has more entries than the %zu ids "
                        "sent", p->n_ids);
        p->n_keys = 0;
        ids_reset(p);
    }
    if (p->open == LIST_LOGPROBS && p->depth == DEPTH_POSITION) p->entry_key = 0;
    if (p->open == LIST_TOKEN_IDS && p->depth == DEPTH_LIST)
        return fail(p, PG_ERR_FORMAT, "prompt_token_ids[%zu] is an object", p->n_token_ids);
    p->depth++;
    return 1;
}

/* An object closes: an entry must have had its logprob, a position is
 * checked and handed over. */
static int cb_end_map(pl_parser *p)
{
    p->depth--;
    if (p->open == LIST_LOGPROBS && p->depth == DEPTH_POSITION) {
        const pl_key *k = &p->keys[p->n_keys - 1];
        if (isnan(k->logprob))
            return fail(p, PG_ERR_FORMAT, "prompt_logprobs entry %zu: token %d has no logprob",
                        position(p), (int)k->id);
    }
    if (p->open == LIST_LOGPROBS && p->depth == DEPTH_LIST) return finish_position(p);
    if (p->choices_open && p->depth == DEPTH_CHOICES) p->choice_key = LIST_NONE;
    return 1;
}

/* Parses a token id key (a decimal string) into *id; 0 when it is none. */
static int parse_id(const unsigned char *s, size_t len, int64_t n_vocab, int32_t *id)
{
    if (len == 0 || len > 10) return 0;
    int64_t v = 0;
    for (size_t i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9') return 0;
        v = v * 10 + (s[i] - '0');
    }
    if (v > INT32_MAX || (n_vocab > 0 && v >= n_vocab)) return 0;
    *id = (int32_t)v;
    return 1;
}

/* key == literal (len bytes). */
static int key_is(const unsigned char *key, size_t len, const char *literal)
{
    return strlen(literal) == len && memcmp(key, literal, len) == 0;
}

/* A key of the open position: a token id, new in the position and one
 * more than it may hold at most. */
static int position_key(pl_parser *p, const unsigned char *key, size_t len)
{
    int32_t id = 0;
    if (!parse_id(key, len, p->n_vocab, &id))
        return fail(p, PG_ERR_FORMAT, "prompt_logprobs entry %zu: key \"%.*s\" is no token "
                    "id of the vocabulary (0 <= id < %lld)", position(p),
                    (int)(len < 32 ? len : 32), (const char *)key, (long long)p->n_vocab);
    if (p->n_keys == p->top_k + 1)
        return fail(p, PG_ERR_FORMAT, "prompt_logprobs entry %zu has more than %zu tokens "
                    "(top %zu plus the given one)", position(p), p->top_k + 1, p->top_k);
    if (!ids_add(p, id))
        return fail(p, PG_ERR_FORMAT, "prompt_logprobs entry %zu lists token %d twice",
                    position(p), (int)id);
    p->keys[p->n_keys++] = (pl_key){id, NAN, 0};
    return 1;
}

/* A key: in prompt_logprobs (the keys of positions and
 * their entries, nearly every key of a reply: tested first), else the
 * keys that lead there. */
static int cb_map_key(pl_parser *p, const unsigned char *key, size_t len)
{
    if (p->open == LIST_LOGPROBS) {  /* depth >= DEPTH_LIST: none of the keys below */
        if (p->depth == DEPTH_ENTRY)
            p->entry_key = key_is(key, len, "logprob") ? 1 : key_is(key, len, "rank") ? 2 : 0;
        else if (p->depth == DEPTH_POSITION)
            return position_key(p, key, len);
        return 1;
    }
    if (p->depth == DEPTH_ROOT) p->key_choices = key_is(key, len, "choices");
    if (in_choice0(p) && p->depth == DEPTH_CHOICE)
        p->choice_key = key_is(key, len, "prompt_logprobs")    ? LIST_LOGPROBS
                        : key_is(key, len, "prompt_token_ids") ? LIST_TOKEN_IDS
                                                               : LIST_NONE;
    return 1;
}

/* An array opens: choices, or choice 0's prompt_logprobs or
 * prompt_token_ids; refused inside prompt_logprobs' entries. */
static int cb_start_array(pl_parser *p)
{
    if (p->depth == DEPTH_ROOT && p->key_choices) {
        p->choices_open = 1;
        p->choice = -1;
    }
    if (in_choice0(p) && p->depth == DEPTH_CHOICE && p->choice_key != LIST_NONE) {
        p->open = (pl_list)p->choice_key;
        if (p->open == LIST_LOGPROBS) p->saw_logprobs = 1;
        else p->saw_token_ids = 1;
    } else if (p->open == LIST_LOGPROBS && p->depth == DEPTH_LIST) {
        return scalar_in_list(p, "an array");
    } else if (p->open == LIST_LOGPROBS && p->depth == DEPTH_POSITION) {
        return fail(p, PG_ERR_FORMAT, "prompt_logprobs entry %zu: token %d's value is an array, "
                    "not an object", position(p), (int)p->keys[p->n_keys - 1].id);
    }
    p->depth++;
    return 1;
}

/* An array closes: the list of choice 0 or the choices end. */
static int cb_end_array(pl_parser *p)
{
    p->depth--;
    if (p->open != LIST_NONE && p->depth == DEPTH_CHOICE) p->open = LIST_NONE;
    if (p->choices_open && p->depth == DEPTH_ROOT) p->choices_open = 0;
    return 1;
}

/* A number: integers are ranks and ids, anything else a logprob. */
static int cb_number(pl_parser *p, const js_token *tok)
{
    return on_number(p, tok->value, tok->integer, tok->is_int);
}

/* The JSON parser's token callback: each token to its handler above; a
 * handler's refusal (recorded in p) returned as the parse's status. */
static pg_status on_token(void *ctx, const js_token *tok, pg_err *err)
{
    pl_parser *p = ctx;
    int ok = 1;
    switch (tok->type) {
    case JS_KEY: ok = cb_map_key(p, (const unsigned char *)tok->text, tok->len); break;
    case JS_NUMBER: ok = cb_number(p, tok); break;
    case JS_OBJECT_START: ok = cb_start_map(p); break;
    case JS_OBJECT_END: ok = cb_end_map(p); break;
    case JS_STRING: ok = cb_string(p, (const unsigned char *)tok->text, tok->len); break;
    case JS_ARRAY_START: ok = cb_start_array(p); break;
    case JS_ARRAY_END: ok = cb_end_array(p); break;
    case JS_NULL: ok = cb_null(p); break;
    case JS_TRUE:
    case JS_FALSE: ok = cb_boolean(p); break;
    }
    return ok ? PG_OK : pg_fail(err, p->st, "%s", p->err.msg);
}

pl_parser *pl_parser_new(const int32_t *ids, size_t n_ids, size_t top_k, int64_t n_vocab,
                         const char *what, pl_position_fn on_position, void *ctx)
{
    if (ids == NULL || n_ids < 1 || top_k < 1 || top_k > PL_MAX_TOP_K || what == NULL ||
        on_position == NULL)
        return NULL;
    pl_parser *p = calloc(1, sizeof *p);
    if (p == NULL) return NULL;
    p->ids = ids;
    p->n_ids = n_ids;
    p->top_k = top_k;
    p->n_vocab = n_vocab;
    snprintf(p->what, sizeof p->what, "%s", what);
    p->on_position = on_position;
    p->ctx = ctx;
    p->choice = -1;
    p->keys = malloc((top_k + 1) * sizeof *p->keys);
    p->top = malloc((top_k + 1) * sizeof *p->top);
    size_t n_slots = 1;
    for (p->slot_shift = 32; n_slots < PL_ID_LOAD * (top_k + 1); n_slots *= 2) p->slot_shift--;
    p->slot_mask = (uint32_t)(n_slots - 1);
    p->slots = calloc(n_slots, sizeof *p->slots);
    p->json = js_parser_new(p->what, on_token, p);
    if (p->keys == NULL || p->top == NULL || p->slots == NULL || p->json == NULL) {
        pl_parser_free(p);
        return NULL;
    }
    return p;
}

pg_status pl_parser_feed(pl_parser *p, const char *data, size_t len, pg_err *err)
{
    if (p == NULL) return pg_fail(err, PG_ERR_INTERNAL, "pl_parser_feed: NULL argument");
    return js_parser_feed(p->json, data, len, err);
}

pg_status pl_parser_finish(pl_parser *p, pg_err *err)
{
    if (p == NULL) return pg_fail(err, PG_ERR_INTERNAL, "pl_parser_finish: NULL argument");
    const pg_status st = js_parser_finish(p->json, err);
    if (st != PG_OK) return st;
    if (!p->saw_logprobs)
        return pg_fail(err, PG_ERR_FORMAT, "%s: the reply has no choices[0].prompt_logprobs (a "
                       "server that scores only the generated token, or no prompt-logprobs "
                       "support)", p->what);
    if (p->n_entries != p->n_ids)
        return pg_fail(err, PG_ERR_FORMAT, "%s: prompt_logprobs has %zu entries for the %zu ids "
                       "sent", p->what, p->n_entries, p->n_ids);
    if (p->saw_token_ids && p->n_token_ids != p->n_ids)
        return pg_fail(err, PG_ERR_FORMAT, "%s: prompt_token_ids has %zu ids, the request sent "
                       "%zu", p->what, p->n_token_ids, p->n_ids);
    return PG_OK;
}

void pl_parser_free(pl_parser *p)
{
    if (p == NULL) return;
    js_parser_free(p->json);
    free(p->keys);
    free(p->slots);
    free(p->top);
    free(p);
}

pg_status pl_llama_position(const char *body, size_t len, int32_t given, size_t top_k,
                            int64_t n_vocab, const char *what, div_entry *top, size_t *n_top,
                            double *given_lp, pg_err *err)
{
    if (body == NULL || what == NULL || top == NULL || n_top == NULL || given_lp == NULL ||
        top_k < 1 || top_k > PL_MAX_TOP_K)
        return pg_fail(err, PG_ERR_INTERNAL, "pl_llama_position: bad argument");
    *n_top = 0;
    *given_lp = NAN;
    cJSON *root = cJSON_ParseWithLength(body, len);
    if (root == NULL) return pg_fail(err, PG_ERR_FORMAT, "%s: the reply is not JSON", what);
    const cJSON *probs = cJSON_GetObjectItemCaseSensitive(root, "completion_probabilities");
    const cJSON *first = cJSON_IsArray(probs) ? cJSON_GetArrayItem(probs, 0) : NULL;
    const cJSON *list = cJSON_GetObjectItemCaseSensitive(first, "top_logprobs");
    pg_status st = PG_OK;
    const size_t want = n_vocab > 0 && (uint64_t)n_vocab < top_k ? (size_t)n_vocab : top_k;
    if (!cJSON_IsArray(list))
        st = pg_fail(err, PG_ERR_FORMAT, "%s: the reply has no completion_probabilities[0]."
                     "top_logprobs%s", what,
                     cJSON_GetObjectItemCaseSensitive(first, "probs") != NULL
                         ? " (it answers \"probs\": a llama-server older than the logprob "
                           "API, not supported)"
                         : " (no n_probs support)");
    else if ((size_t)cJSON_GetArraySize(list) != want)
        st = pg_fail(err, PG_ERR_FORMAT, "%s: top_logprobs has %d entries, expected %zu (n_probs "
                     "%zu)", what, cJSON_GetArraySize(list), want, top_k);
    int i = 0;
    for (const cJSON *e = st == PG_OK ? list->child : NULL; e != NULL && st == PG_OK;
         e = e->next, i++) {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(e, "id");
        const cJSON *lp = cJSON_GetObjectItemCaseSensitive(e, "logprob");
        const double v = cJSON_IsNumber(id) ? id->valuedouble : -1;
        if (!cJSON_IsNumber(id) || v < 0 || v > INT32_MAX || v != floor(v) ||
            (n_vocab > 0 && v >= (double)n_vocab)) {
            st = pg_fail(err, PG_ERR_FORMAT, "%s: top_logprobs[%d] has no token id of the "
                         "vocabulary (0 <= id < %lld)", what, i, (long long)n_vocab);
            break;
        }
        if (!cJSON_IsNumber(lp)) {
            st = pg_fail(err, PG_ERR_FORMAT, "%s: top_logprobs[%d] (token %d) has no numeric "
                         "logprob", what, i, (int)v);
            break;
        }
        if (isnan(lp->valuedouble) || lp->valuedouble > DIV_MASS_TOL) {
            st = pg_fail(err, PG_ERR_NUMERIC, "%s: top_logprobs[%d] (token %d) has logprob %g "
                         "(not a log-probability)", what, i, (int)v, lp->valuedouble);
            break;
        }
        for (size_t j = 0; j < *n_top; j++)
            if (top[j].id == (int32_t)v)
                st = pg_fail(err, PG_ERR_FORMAT, "%s: top_logprobs lists token %d twice", what,
                             (int)v);
        top[(*n_top)++] = (div_entry){(int32_t)v, lp->valuedouble};
        if ((int32_t)v == given) *given_lp = lp->valuedouble;
    }
    cJSON_Delete(root);
    if (st != PG_OK) {
        *n_top = 0;
        *given_lp = NAN;
    }
    return st;
}
