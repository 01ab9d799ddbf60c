/* jsonl.c: the JSON-lines reading that every JSONL input shares (see jsonl.h). */
#include "jsonl.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Slots of the id set when it first grows (a power of two). */
#define JSONL_SET_INIT 64

/* ------------------------------------------------------------------------ */
/* error messages                                                           */
/* ------------------------------------------------------------------------ */

pg_status jsonl_field_err(pg_err *err, const jsonl_loc *at, const char *key, const char *fmt, ...)
{
    char detail[PG_ERR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof detail, fmt, ap);
    va_end(ap);
    if (key == NULL)
        return pg_fail(err, PG_ERR_FORMAT, "%s:%d: %s", at->path, at->line, detail);
    return pg_fail(err, PG_ERR_FORMAT, "%s:%d: '%s%s%s' %s", at->path, at->line,
                   at->ctx ? at->ctx : "", at->ctx ? "." : "", key, detail);
}

/* Describes a JSON value's type for error messages. */
const char *jsonl_kind(const cJSON *x)
{
    if (cJSON_IsNumber(x)) return "a number";
    if (cJSON_IsString(x)) return "a string";
    if (cJSON_IsArray(x)) return "an array";
    if (cJSON_IsObject(x)) return "an object";
    if (cJSON_IsBool(x)) return "a boolean";
    if (cJSON_IsNull(x)) return "null";
    return "missing";
}

/* ------------------------------------------------------------------------ */
/* field access                                                             */
/* ------------------------------------------------------------------------ */

/* obj's member named key in *out (NULL when absent); PG_ERR_FORMAT when the
 * key occurs more than once (cJSON keeps both; which one counts would be a
 * guess). */
pg_status jsonl_member(pg_err *err, const jsonl_loc *at, const cJSON *obj, const char *key,
                        const cJSON **out)
{
    const cJSON *found = NULL;
    *out = NULL;
    for (const cJSON *c = obj->child; c != NULL; c = c->next) {
        if (c->string == NULL || strcmp(c->string, key) != 0) continue;
        if (found != NULL) return jsonl_field_err(err, at, key, "appears more than once");
        found = c;
    }
    *out = found;
    return PG_OK;
}

/* True when x is a JSON integer in [lo, hi]; stores it in *out. */
bool jsonl_int(const cJSON *x, double lo, double hi, long long *out)
{
    if (!cJSON_IsNumber(x)) return false;
    double v = x->valuedouble;
    if (!isfinite(v) || v < lo || v > hi || floor(v) != v) return false;
    *out = (long long)v;
    return true;
}

/* A malloc'd copy of s, or NULL with PG_ERR_NOMEM recorded. */
char *jsonl_dup(pg_err *err, const jsonl_loc *at, const char *s)
{
    char *p = strdup(s);
    if (p == NULL) pg_fail(err, PG_ERR_NOMEM, "%s:%d: out of memory", at->path, at->line);
    return p;
}

/* ------------------------------------------------------------------------ */
/* duplicate-id set                                                         */
/* ------------------------------------------------------------------------ */

/* FNV-1a of n bytes at p, continuing from h. */
uint64_t jsonl_fnv1a(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * JSONL_FNV_PRIME;
    return h;
}

uint64_t jsonl_digest_field(uint64_t h, const char *v)
{
    const uint64_t n = v != NULL ? (uint64_t)strlen(v) : UINT64_MAX;
    unsigned char len[8];
    for (int i = 0; i < 8; i++) len[i] = (unsigned char)(n >> (8 * i));
    h = jsonl_fnv1a(h, len, sizeof len);
    return v != NULL ? jsonl_fnv1a(h, v, (size_t)n) : h;
}

/* FNV-1a of the string s. */
static uint64_t hash_str(const char *s)
{
    return jsonl_fnv1a(JSONL_FNV_OFFSET, s, strlen(s));
}

/* The slot holding id, or the empty slot where it would go (cap > 0). */
static jsonl_id_slot *id_set_slot(const jsonl_id_set *s, const char *id)
{
    size_t i = (size_t)hash_str(id) & (s->cap - 1);
    while (s->slots[i].id != NULL && strcmp(s->slots[i].id, id) != 0) i = (i + 1) & (s->cap - 1);
    return &s->slots[i];
}

/* The line id was first seen on, or 0 when it is new. */
int jsonl_id_find(const jsonl_id_set *s, const char *id)
{
    return s->cap == 0 ? 0 : id_set_slot(s, id)->line;
}

/* Adds id (not yet present) seen on line; false when out of memory. */
bool jsonl_id_add(jsonl_id_set *s, const char *id, int line)
{
    if (2 * (s->n + 1) > s->cap) {
        jsonl_id_set bigger = {calloc(s->cap ? 2 * s->cap : JSONL_SET_INIT, sizeof(jsonl_id_slot)),
                         s->cap ? 2 * s->cap : JSONL_SET_INIT, s->n};
        if (bigger.slots == NULL) return false;
        for (size_t i = 0; i < s->cap; i++)
            if (s->slots[i].id != NULL) *id_set_slot(&bigger, s->slots[i].id) = s->slots[i];
        free(s->slots);
        *s = bigger;
    }
    char *copy = strdup(id);
    if (copy == NULL) return false;
    jsonl_id_slot *slot = id_set_slot(s, id);
    slot->id = copy; /* owned by the set from here on */
    slot->line = line;
    s->n++;
    return true;
}

/* Frees the set's copies and slots and empties it. */
void jsonl_id_set_free(jsonl_id_set *s)
{
    for (size_t i = 0; i < s->cap; i++) free(s->slots[i].id);
    free(s->slots);
    *s = (jsonl_id_set){0};
}

/* Records a repeated id as an error, else adds it. */
pg_status jsonl_check_id(pg_err *err, const jsonl_loc *at, jsonl_id_set *ids, const char *key,
                          const char *id)
{
    int first = jsonl_id_find(ids, id);
    if (first != 0)
        return jsonl_field_err(err, at, key, "'%s' repeats the id of line %d", id, first);
    if (!jsonl_id_add(ids, id, at->line))
        return pg_fail(err, PG_ERR_NOMEM, "%s:%d: out of memory", at->path, at->line);
    return PG_OK;
}

/* ------------------------------------------------------------------------ */
/* line reader                                                              */
/* ------------------------------------------------------------------------ */

/* True when the n bytes at s are all JSON white space (or there are none). */
static bool blank(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r' && s[i] != '\n') return false;
    return true;
}

/* The next non-blank line's JSON object in *obj (the caller deletes it), or
 * NULL at the end of the file. */
pg_status jsonl_next_object(jsonl_reader *r, cJSON **obj, pg_err *err)
{
    *obj = NULL;
    for (;;) {
        errno = 0;
        ssize_t got = getline(&r->buf, &r->cap, r->f);
        if (got < 0) {
            if (ferror(r->f) || errno == ENOMEM || errno == EOVERFLOW)
                return pg_fail(err, errno == ENOMEM ? PG_ERR_NOMEM : PG_ERR_IO,
                               "%s:%d: cannot read: %s", r->path, r->line + 1,
                               strerror(errno ? errno : EIO));
            return PG_OK;
        }
        if (r->line == INT_MAX)
            return pg_fail(err, PG_ERR_FORMAT, "%s: more than %d lines", r->path, INT_MAX);
        r->line++;
        jsonl_loc at = {r->path, r->line, NULL};
        const char *s = r->buf;
        size_t n = (size_t)got;
        if (memchr(s, '\0', n) != NULL) return jsonl_field_err(err, &at, NULL, "contains a NUL byte");
        if (blank(s, n)) continue;
        /* The whole line must be one value (cJSON also skips a leading
         * UTF-8 byte-order mark, as a file written on Windows may have). */
        const char *end = NULL;
        cJSON *x = cJSON_ParseWithOpts(s, &end, true);
        if (x == NULL)
            return jsonl_field_err(err, &at, NULL, "invalid JSON at column %zu",
                             (size_t)((end ? end : s) - s) + 1);
        if (!cJSON_IsObject(x)) {
            pg_status st = jsonl_field_err(err, &at, NULL, "the line is %s, expected a JSON object",
                                     jsonl_kind(x));
            cJSON_Delete(x);
            return st;
        }
        *obj = x;
        return PG_OK;
    }
}