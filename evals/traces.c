/*
 * traces.c: the eval problem-set JSONL format and the AIME converter (see
 * traces.h).
 *
 * Both readers go through jsonl.h's line reader (getline, so any line length;
 * blank lines skipped; each other line parsed whole as one JSON object) and
 * one duplicate-id set (open addressing, so a large file stays linear). The
 * loader builds every problem completely before appending it, and frees all
 * it built on the first error; the converter streams to a temporary file
 * that replaces the target only once it is complete and synced.
 */
#include "traces.h"
#include "jsonl.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Suffix of the converter's temporary file (as harness/capture/safetensors.c uses). */
#define TR_TMP_SUFFIX ".tmp"
/* Prefix of the ids the converter makes for problems that have none. */
#define TR_GEN_ID_PREFIX "aime-"
/* Room for a generated id: the prefix and a decimal int. */
#define TR_GEN_ID_MAX 32
/* Room for a field path such as "completions[2147483647].finish_reason". */
#define TR_FIELD_MAX 64
/* Most characters of an offending string value quoted in a message. */
#define TR_QUOTE_MAX 40


/* Copies the string member key into *out. required: absence is an error;
 * nullable: null gives NULL; non_empty: "" is an error. */
static pg_status get_string(pg_err *err, const jsonl_loc *at, const cJSON *obj, const char *key,
                            bool required, bool nullable, bool non_empty, char **out)
{
    const cJSON *x;
    pg_status st = jsonl_member(err, at, obj, key, &x);
    if (st != PG_OK) return st;
    *out = NULL;
    if (x == NULL) return required ? jsonl_field_err(err, at, key, "is missing") : PG_OK;
    if (nullable && cJSON_IsNull(x)) return PG_OK;
    if (!cJSON_IsString(x))
        return jsonl_field_err(err, at, key, "is %s, expected a string%s", jsonl_kind(x),
                         nullable ? " or null" : "");
    if (non_empty && x->valuestring[0] == '\0') return jsonl_field_err(err, at, key, "is empty");
    *out = jsonl_dup(err, at, x->valuestring);
    return *out ? PG_OK : PG_ERR_NOMEM;
}

/* Parses an answer (the value x of member key, NULL when absent): a JSON
 * integer or a string of ASCII digits, in TRACES_ANSWER_MIN..MAX. */
static pg_status parse_answer(pg_err *err, const jsonl_loc *at, const char *key, const cJSON *x,
                              int *out)
{
    long long v = 0;
    if (x == NULL) return jsonl_field_err(err, at, key, "is missing");
    if (cJSON_IsNumber(x)) {
        if (!jsonl_int(x, TRACES_ANSWER_MIN, TRACES_ANSWER_MAX, &v))
            return jsonl_field_err(err, at, key, "is %.17g, expected an integer in %d..%d",
                             x->valuedouble, TRACES_ANSWER_MIN, TRACES_ANSWER_MAX);
    } else if (cJSON_IsString(x)) {
        const char *s = x->valuestring;
        size_t i = 0;
        for (; s[i] >= '0' && s[i] <= '9'; i++)
            if (v <= TRACES_ANSWER_MAX) v = v * 10 + (s[i] - '0');
        if (i == 0 || s[i] != '\0' || v > TRACES_ANSWER_MAX)
            return jsonl_field_err(err, at, key, "is \"%.*s%s\", expected an integer in %d..%d",
                             TR_QUOTE_MAX, s, strlen(s) > TR_QUOTE_MAX ? "..." : "",
                             TRACES_ANSWER_MIN, TRACES_ANSWER_MAX);
    } else {
        return jsonl_field_err(err, at, key, "is %s, expected an integer in %d..%d", jsonl_kind(x),
                         TRACES_ANSWER_MIN, TRACES_ANSWER_MAX);
    }
    *out = (int)v;
    return PG_OK;
}

/* Parses an id (the value x of member key): a non-empty string, or an
 * integer written in decimal. */
static pg_status parse_id(pg_err *err, const jsonl_loc *at, const char *key, const cJSON *x,
                          char **out)
{
    char num[TR_GEN_ID_MAX];
    long long v;
    *out = NULL;
    if (x == NULL) return jsonl_field_err(err, at, key, "is missing");
    if (cJSON_IsString(x)) {
        if (x->valuestring[0] == '\0') return jsonl_field_err(err, at, key, "is empty");
        *out = jsonl_dup(err, at, x->valuestring);
    } else if (jsonl_int(x, -JSONL_INT_MAX, JSONL_INT_MAX, &v)) {
        snprintf(num, sizeof num, "%lld", v);
        *out = jsonl_dup(err, at, num);
    } else {
        return jsonl_field_err(err, at, key, "is %s, expected a string or an integer",
                         cJSON_IsNumber(x) ? "a non-integer number" : jsonl_kind(x));
    }
    return *out ? PG_OK : PG_ERR_NOMEM;
}

/* ------------------------------------------------------------------------ */
/* problems and completions                                                 */
/* ------------------------------------------------------------------------ */

/* Frees c's strings (not c itself); fields never set must be NULL. */
static void completion_free(eval_completion *c)
{
    free(c->mode);
    free(c->effort);
    free(c->content);
    free(c->reasoning);
    free(c->finish_reason);
}

/* Frees what p owns (not p itself); fields never set must be NULL / 0. */
static void problem_free(eval_problem *p)
{
    free(p->id);
    free(p->problem);
    free(p->messages_json);
    for (int i = 0; i < p->n_completions; i++) completion_free(&p->completions[i]);
    free(p->completions);
}

/* Records that member key's value v is not an int in 0..INT_MAX. */
static pg_status bad_count(pg_err *err, const jsonl_loc *at, const char *key, const cJSON *v)
{
    if (cJSON_IsNumber(v))
        return jsonl_field_err(err, at, key, "is %.17g, expected an integer in 0..%d", v->valuedouble,
                         INT_MAX);
    return jsonl_field_err(err, at, key, "is %s, expected an integer >= 0", jsonl_kind(v));
}

/* Fills c from the completion object x (at->ctx names it); on failure c
 * holds what was copied so far, for completion_free. */
static pg_status parse_completion(pg_err *err, const jsonl_loc *at, const cJSON *x,
                                  eval_completion *c)
{
    const cJSON *v;
    long long n;
    c->completion_tokens = -1;
    if (!cJSON_IsObject(x))
        return jsonl_field_err(err, &(jsonl_loc){at->path, at->line, NULL}, at->ctx,
                         "is %s, expected an object", jsonl_kind(x));
    pg_status st;
    if ((st = get_string(err, at, x, "mode", true, false, true, &c->mode)) != PG_OK ||
        (st = get_string(err, at, x, "effort", true, false, true, &c->effort)) != PG_OK)
        return st;
    if ((st = jsonl_member(err, at, x, "sample", &v)) != PG_OK) return st;
    if (v == NULL) return jsonl_field_err(err, at, "sample", "is missing");
    if (!jsonl_int(v, 0, INT_MAX, &n)) return bad_count(err, at, "sample", v);
    c->sample = (int)n;
    if ((st = get_string(err, at, x, "content", true, true, false, &c->content)) != PG_OK ||
        (st = get_string(err, at, x, "reasoning", false, true, false, &c->reasoning)) != PG_OK ||
        (st = get_string(err, at, x, "finish_reason", false, true, false, &c->finish_reason)) !=
            PG_OK)
        return st;
    if ((st = jsonl_member(err, at, x, "completion_tokens", &v)) != PG_OK) return st;
    if (v != NULL && !cJSON_IsNull(v)) {
        if (!jsonl_int(v, 0, INT_MAX, &n)) return bad_count(err, at, "completion_tokens", v);
        c->completion_tokens = (int)n;
    }
    return PG_OK;
}

/* Parses the completions array x into p, rejecting a repeated
 * (mode, effort, sample). */
static pg_status parse_completions(pg_err *err, const jsonl_loc *at, const cJSON *x, eval_problem *p)
{
    if (!cJSON_IsArray(x)) return jsonl_field_err(err, at, "completions", "is %s, expected an array",
                                            jsonl_kind(x));
    int n = cJSON_GetArraySize(x);
    if (n == 0) return PG_OK;
    p->completions = calloc((size_t)n, sizeof *p->completions);
    if (p->completions == NULL)
        return pg_fail(err, PG_ERR_NOMEM, "%s:%d: out of memory", at->path, at->line);
    int i = 0;
    for (const cJSON *e = x->child; e != NULL; e = e->next, i++) {
        char ctx[TR_FIELD_MAX];
        snprintf(ctx, sizeof ctx, "completions[%d]", i);
        jsonl_loc here = {at->path, at->line, ctx};
        eval_completion *c = &p->completions[i];
        p->n_completions = i + 1; /* so that problem_free sees what was copied */
        pg_status st = parse_completion(err, &here, e, c);
        if (st != PG_OK) return st;
        for (int j = 0; j < i; j++) {
            const eval_completion *o = &p->completions[j];
            if (o->sample == c->sample && strcmp(o->mode, c->mode) == 0 &&
                strcmp(o->effort, c->effort) == 0)
                return jsonl_field_err(err, at, NULL,
                                 "'%s' repeats completions[%d]: mode '%s', effort '%s', "
                                 "sample %d",
                                 ctx, j, c->mode, c->effort, c->sample);
        }
    }
    return PG_OK;
}

/* Validates the messages array x and keeps it as compact JSON in p. */
static pg_status parse_messages(pg_err *err, const jsonl_loc *at, const cJSON *x, eval_problem *p)
{
    if (!cJSON_IsArray(x)) return jsonl_field_err(err, at, "messages", "is %s, expected an array",
                                            jsonl_kind(x));
    if (x->child == NULL) return jsonl_field_err(err, at, "messages", "is empty");
    int i = 0;
    for (const cJSON *e = x->child; e != NULL; e = e->next, i++) {
        char ctx[TR_FIELD_MAX];
        snprintf(ctx, sizeof ctx, "messages[%d]", i);
        jsonl_loc here = {at->path, at->line, ctx};
        if (!cJSON_IsObject(e))
            return jsonl_field_err(err, at, ctx, "is %s, expected an object", jsonl_kind(e));
        char *role = NULL, *content = NULL;
        pg_status st = get_string(err, &here, e, "role", true, false, true, &role);
        if (st == PG_OK) st = get_string(err, &here, e, "content", true, false, false, &content);
        free(role);
        free(content);
        if (st != PG_OK) return st;
    }
    char *json = cJSON_PrintUnformatted(x);
    if (json != NULL) p->messages_json = strdup(json);
    cJSON_free(json);
    if (p->messages_json == NULL)
        return pg_fail(err, PG_ERR_NOMEM, "%s:%d: out of memory", at->path, at->line);
    return PG_OK;
}

/* Fills p from the line's object; on failure p holds what was copied so far,
 * for problem_free. */
static pg_status parse_problem(pg_err *err, const jsonl_loc *at, const cJSON *obj, eval_problem *p)
{
    const cJSON *id, *problem, *prompt, *answer, *messages, *completions;
    pg_status st;
    if ((st = jsonl_member(err, at, obj, "id", &id)) != PG_OK ||
        (st = jsonl_member(err, at, obj, "problem", &problem)) != PG_OK ||
        (st = jsonl_member(err, at, obj, "prompt", &prompt)) != PG_OK ||
        (st = jsonl_member(err, at, obj, "answer", &answer)) != PG_OK ||
        (st = jsonl_member(err, at, obj, "messages", &messages)) != PG_OK ||
        (st = jsonl_member(err, at, obj, "completions", &completions)) != PG_OK)
        return st;
    if ((st = parse_id(err, at, "id", id, &p->id)) != PG_OK) return st;
    if (problem != NULL && prompt != NULL)
        return jsonl_field_err(err, at, "problem", "and 'prompt' are both given; give one");
    const char *text_key = prompt != NULL ? "prompt" : "problem";
    if ((st = get_string(err, at, obj, text_key, true, false, true, &p->problem)) != PG_OK)
        return st;
    if ((st = parse_answer(err, at, "answer", answer, &p->answer)) != PG_OK) return st;
    if (messages != NULL && (st = parse_messages(err, at, messages, p)) != PG_OK) return st;
    if (completions != NULL && (st = parse_completions(err, at, completions, p)) != PG_OK)
        return st;
    return PG_OK;
}


/* ------------------------------------------------------------------------ */
/* loader                                                                   */
/* ------------------------------------------------------------------------ */

void traces_keep_first(eval_traces *t, int n)
{
    if (t == NULL || n < 0 || n >= t->n) return;
    for (int i = n; i < t->n; i++) problem_free(&t->problems[i]);
    t->n = n;
}

void traces_keep_marked(eval_traces *t, const unsigned char *keep)
{
    if (t == NULL || keep == NULL) return;
    int kept = 0;
    for (int i = 0; i < t->n; i++) {
        if (keep[i]) t->problems[kept++] = t->problems[i];
        else problem_free(&t->problems[i]);
    }
    t->n = kept;
}

void traces_free(eval_traces *t)
{
    if (t == NULL) return;
    for (int i = 0; i < t->n; i++) problem_free(&t->problems[i]);
    free(t->problems);
    free(t->path);
    free(t);
}

/* Appends p to t (taking its contents); false when out of memory. */
static bool append_problem(eval_traces *t, int *cap, const eval_problem *p)
{
    if (t->n == *cap) {
        if (*cap > INT_MAX / 2) return false;
        int want = *cap ? 2 * *cap : 16;
        eval_problem *grown = realloc(t->problems, (size_t)want * sizeof *grown);
        if (grown == NULL) return false;
        t->problems = grown;
        *cap = want;
    }
    t->problems[t->n++] = *p;
    return true;
}

pg_status traces_load(const char *path, eval_traces **out, pg_err *err)
{
    *out = NULL;
    eval_traces *t = calloc(1, sizeof *t);
    if (t == NULL || (t->path = strdup(path)) == NULL) {
        free(t);
        return pg_fail(err, PG_ERR_NOMEM, "%s: out of memory", path);
    }
    jsonl_reader r = {fopen(path, "r"), path, NULL, 0, 0};
    if (r.f == NULL) {
        pg_status st = pg_fail(err, PG_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
        traces_free(t);
        return st;
    }
    jsonl_id_set ids = {0};
    int cap = 0;
    pg_status st;
    for (;;) {
        cJSON *obj;
        if ((st = jsonl_next_object(&r, &obj, err)) != PG_OK || obj == NULL) break;
        jsonl_loc at = {path, r.line, NULL};
        eval_problem p = {0};
        p.line = r.line;
        st = parse_problem(err, &at, obj, &p);
        cJSON_Delete(obj);
        if (st == PG_OK) st = jsonl_check_id(err, &at, &ids, "id", p.id);
        if (st == PG_OK && !append_problem(t, &cap, &p))
            st = pg_fail(err, PG_ERR_NOMEM, "%s:%d: out of memory", path, r.line);
        if (st != PG_OK) {
            problem_free(&p);
            break;
        }
    }
    fclose(r.f);
    free(r.buf);
    jsonl_id_set_free(&ids);
    if (st != PG_OK) {
        traces_free(t);
        return st;
    }
    *out = t;
    return PG_OK;
}

/* ------------------------------------------------------------------------ */
/* AIME converter                                                           */
/* ------------------------------------------------------------------------ */

/* The one present member among keys[0..n) in *out (NULL when none; then
 * *key is keys[0]); an error when two are present. */
static pg_status one_of(pg_err *err, const jsonl_loc *at, const cJSON *obj, const char *const *keys,
                        int n, const cJSON **out, const char **key)
{
    *out = NULL;
    *key = keys[0];
    for (int i = 0; i < n; i++) {
        const cJSON *x;
        pg_status st = jsonl_member(err, at, obj, keys[i], &x);
        if (st != PG_OK) return st;
        if (x == NULL) continue;
        if (*out != NULL)
            return jsonl_field_err(err, at, keys[i], "and '%s' are both given; expected one", *key);
        *out = x;
        *key = keys[i];
    }
    return PG_OK;
}

/* Field spellings of the public AIME files (see traces.h). */
static const char *const k_aime_text_keys[] = {"question", "problem", "Problem"};
static const char *const k_aime_answer_keys[] = {"answer", "Answer"};
static const char *const k_aime_id_keys[] = {"id", "ID"};

#define N_KEYS(a) ((int)(sizeof(a) / sizeof((a)[0])))

/* Converts one public AIME object (the ordinal-th problem of the file) into
 * a line of our format in *json (cJSON-allocated). */
static pg_status convert_one(pg_err *err, const jsonl_loc *at, const cJSON *obj, int ordinal,
                             jsonl_id_set *ids, char **json)
{
    const cJSON *text, *answer, *id, *url;
    const char *text_key, *answer_key, *id_key;
    pg_status st;
    *json = NULL;
    if ((st = one_of(err, at, obj, k_aime_text_keys, N_KEYS(k_aime_text_keys), &text,
                     &text_key)) != PG_OK ||
        (st = one_of(err, at, obj, k_aime_answer_keys, N_KEYS(k_aime_answer_keys), &answer,
                     &answer_key)) != PG_OK ||
        (st = one_of(err, at, obj, k_aime_id_keys, N_KEYS(k_aime_id_keys), &id, &id_key)) !=
            PG_OK ||
        (st = jsonl_member(err, at, obj, "url", &url)) != PG_OK)
        return st;
    if (text == NULL) return jsonl_field_err(err, at, NULL, "'question' (or 'problem') is missing");
    if (!cJSON_IsString(text) || text->valuestring[0] == '\0')
        return jsonl_field_err(err, at, text_key, "is %s, expected a non-empty string",
                         cJSON_IsString(text) ? "empty" : jsonl_kind(text));
    int value;
    if ((st = parse_answer(err, at, answer_key, answer, &value)) != PG_OK) return st;
    char *id_str = NULL;
    if (id != NULL) {
        st = parse_id(err, at, id_key, id, &id_str);
    } else {
        char gen[TR_GEN_ID_MAX];
        snprintf(gen, sizeof gen, TR_GEN_ID_PREFIX "%d", ordinal);
        id_str = jsonl_dup(err, at, gen);
        st = id_str ? PG_OK : PG_ERR_NOMEM;
    }
    if (st == PG_OK) st = jsonl_check_id(err, at, ids, id ? id_key : "id", id_str);
    if (st != PG_OK) {
        free(id_str);
        return st;
    }
    cJSON *o = cJSON_CreateObject();
    bool ok = o != NULL && cJSON_AddStringToObject(o, "id", id_str) != NULL &&
              cJSON_AddStringToObject(o, "problem", text->valuestring) != NULL &&
              cJSON_AddNumberToObject(o, "answer", value) != NULL &&
              (!cJSON_IsString(url) || cJSON_AddStringToObject(o, "url", url->valuestring));
    if (ok) *json = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    free(id_str);
    if (*json == NULL)
        return pg_fail(err, PG_ERR_NOMEM, "%s:%d: out of memory", at->path, at->line);
    return PG_OK;
}

/* Converts every line of r into f. */
static pg_status convert_lines(jsonl_reader *r, FILE *f, const char *tmp, pg_err *err)
{
    jsonl_id_set ids = {0};
    pg_status st;
    int ordinal = 0;
    for (;;) {
        cJSON *obj;
        if ((st = jsonl_next_object(r, &obj, err)) != PG_OK || obj == NULL) break;
        jsonl_loc at = {r->path, r->line, NULL};
        char *json;
        st = convert_one(err, &at, obj, ++ordinal, &ids, &json);
        cJSON_Delete(obj);
        if (st != PG_OK) break;
        bool ok = fputs(json, f) != EOF && fputc('\n', f) != EOF;
        cJSON_free(json);
        if (!ok) {
            st = pg_fail(err, PG_ERR_IO, "%s: cannot write: %s", tmp, strerror(errno));
            break;
        }
    }
    jsonl_id_set_free(&ids);
    return st;
}

pg_status traces_convert_aime(const char *in_path, const char *out_path, pg_err *err)
{
    jsonl_reader r = {fopen(in_path, "r"), in_path, NULL, 0, 0};
    if (r.f == NULL) return pg_fail(err, PG_ERR_IO, "%s: cannot open: %s", in_path,
                                    strerror(errno));
    size_t tmp_len = strlen(out_path) + sizeof TR_TMP_SUFFIX;
    char *tmp = malloc(tmp_len);
    if (tmp == NULL) {
        fclose(r.f);
        return pg_fail(err, PG_ERR_NOMEM, "%s: out of memory", out_path);
    }
    snprintf(tmp, tmp_len, "%s%s", out_path, TR_TMP_SUFFIX);
    pg_status st;
    FILE *f = fopen(tmp, "w");
    if (f == NULL) {
        st = pg_fail(err, PG_ERR_IO, "%s: cannot create %s: %s", out_path, tmp, strerror(errno));
    } else {
        st = convert_lines(&r, f, tmp, err);
        if (st == PG_OK && (fflush(f) != 0 || fsync(fileno(f)) != 0))
            st = pg_fail(err, PG_ERR_IO, "%s: cannot write: %s", tmp, strerror(errno));
        if (fclose(f) != 0 && st == PG_OK)
            st = pg_fail(err, PG_ERR_IO, "%s: cannot write: %s", tmp, strerror(errno));
        if (st == PG_OK && rename(tmp, out_path) != 0)
            st = pg_fail(err, PG_ERR_IO, "%s: cannot rename %s over it: %s", out_path, tmp,
                         strerror(errno));
        if (st != PG_OK) unlink(tmp);
    }
    fclose(r.f);
    free(r.buf);
    free(tmp);
    return st;
}

/* qsort order of problem pointers: by id (ids are unique). */
static int by_id(const void *a, const void *b)
{
    return strcmp((*(const eval_problem *const *)a)->id, (*(const eval_problem *const *)b)->id);
}

pg_status traces_digest(const eval_traces *t, char *out, size_t len, pg_err *err)
{
    if (t == NULL || out == NULL || len < TRACES_DIGEST_MAX)
        return pg_fail(err, PG_ERR_INTERNAL, "traces_digest: traces or a %d-byte buffer missing",
                       TRACES_DIGEST_MAX);
    const eval_problem **order = malloc((size_t)(t->n > 0 ? t->n : 1) * sizeof *order);
    if (order == NULL) return pg_fail(err, PG_ERR_NOMEM, "%s: out of memory for the digest", t->path);
    for (int i = 0; i < t->n; i++) order[i] = &t->problems[i];
    qsort(order, (size_t)t->n, sizeof *order, by_id);
    uint64_t h = jsonl_digest_field(JSONL_FNV_OFFSET, TRACES_DIGEST_SCHEME);
    for (int i = 0; i < t->n; i++) {
        char answer[TR_GEN_ID_MAX];
        snprintf(answer, sizeof answer, "%d", order[i]->answer);
        h = jsonl_digest_field(h, order[i]->id);
        h = jsonl_digest_field(h, order[i]->problem);
        h = jsonl_digest_field(h, answer);
        h = jsonl_digest_field(h, order[i]->messages_json);
    }
    free(order);
    snprintf(out, len, "%s:%d:%016llx", TRACES_DIGEST_SCHEME, t->n, (unsigned long long)h);
    return PG_OK;
}
