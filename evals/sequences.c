/* sequences.c: the teacher-forcing sequences file (see sequences.h). */
#include "sequences.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jsonl.h"

/* A non-empty (non_empty) string member key of obj into *out (malloc'd);
 * absent leaves *out NULL. */
static pg_status get_text(pg_err *err, const jsonl_loc *at, const cJSON *obj, const char *key,
                          int non_empty, char **out)
{
    const cJSON *v = NULL;
    *out = NULL;
    pg_status st = jsonl_member(err, at, obj, key, &v);
    if (st != PG_OK || v == NULL) return st;
    if (!cJSON_IsString(v))
        return jsonl_field_err(err, at, key, "is %s, expected a string", jsonl_kind(v));
    if (non_empty && v->valuestring[0] == '\0')
        return jsonl_field_err(err, at, key, "is empty");
    *out = jsonl_dup(err, at, v->valuestring);
    return *out != NULL ? PG_OK : PG_ERR_NOMEM;
}

/* The "tokens" array v into q. */
static pg_status get_tokens(pg_err *err, const jsonl_loc *at, const cJSON *v, div_sequence *q)
{
    if (!cJSON_IsArray(v))
        return jsonl_field_err(err, at, "tokens", "is %s, expected an array of token ids",
                               jsonl_kind(v));
    const int n = cJSON_GetArraySize(v);
    if (n < 2)
        return jsonl_field_err(err, at, "tokens", "has %d ids; at least 2 are needed (the "
                               "first is context only)", n);
    q->tokens = malloc((size_t)n * sizeof *q->tokens);
    if (q->tokens == NULL)
        return pg_fail(err, PG_ERR_NOMEM, "%s:%d: out of memory", at->path, at->line);
    int i = 0;
    for (const cJSON *e = v->child; e != NULL; e = e->next, i++) {
        long long id = 0;
        if (!jsonl_int(e, 0, SEQ_TOKEN_MAX, &id)) {
            char field[32];
            snprintf(field, sizeof field, "tokens[%d]", i);
            return jsonl_field_err(err, at, field, "is %s, expected a token id in 0..%d",
                                   cJSON_IsNumber(e) ? "another number" : jsonl_kind(e),
                                   SEQ_TOKEN_MAX);
        }
        q->tokens[i] = (int32_t)id;
    }
    q->n_tokens = (size_t)n;
    return PG_OK;
}

/* One line's object into q. */
static pg_status parse_sequence(pg_err *err, const jsonl_loc *at, const cJSON *obj,
                                div_sequence *q)
{
    const cJSON *tokens = NULL, *from = NULL, *prompt = NULL, *completion = NULL;
    pg_status st = get_text(err, at, obj, "id", 1, &q->id);
    if (st == PG_OK && q->id == NULL) st = jsonl_field_err(err, at, "id", "is missing");
    if (st == PG_OK) st = jsonl_member(err, at, obj, "tokens", &tokens);
    if (st == PG_OK) st = jsonl_member(err, at, obj, "score_from", &from);
    if (st == PG_OK) st = jsonl_member(err, at, obj, "prompt", &prompt);
    if (st == PG_OK) st = jsonl_member(err, at, obj, "completion", &completion);
    if (st != PG_OK) return st;
    const int text = prompt != NULL || completion != NULL;
    if (tokens != NULL && text)
        return jsonl_field_err(err, at, prompt != NULL ? "prompt" : "completion",
                               "given with tokens: a line is one form, tokens or text");
    if (tokens == NULL && !text)
        return jsonl_field_err(err, at, NULL, "has neither tokens nor prompt and completion");
    if (text) {
        if (from != NULL)
            return jsonl_field_err(err, at, "score_from", "is not allowed with prompt and "
                                   "completion (the completion is scored)");
        if (prompt == NULL) return jsonl_field_err(err, at, "prompt", "is missing");
        if (completion == NULL) return jsonl_field_err(err, at, "completion", "is missing");
        st = get_text(err, at, obj, "prompt", 0, &q->prompt);
        if (st == PG_OK) st = get_text(err, at, obj, "completion", 1, &q->completion);
        return st;
    }
    st = get_tokens(err, at, tokens, q);
    q->score_from = 1;
    long long n = 0;
    if (st == PG_OK && from != NULL) {
        if (!jsonl_int(from, 1, (double)q->n_tokens - 1, &n))
            return jsonl_field_err(err, at, "score_from", "is %s, expected an integer in "
                                   "1..%zu (the tokens before it are context)",
                                   cJSON_IsNumber(from) ? "out of range" : jsonl_kind(from),
                                   q->n_tokens - 1);
        q->score_from = (size_t)n;
    }
    return st;
}

/* Frees one sequence's fields. */
static void sequence_free(div_sequence *q)
{
    free(q->id);
    free(q->tokens);
    free(q->prompt);
    free(q->completion);
    free(q->source);
    memset(q, 0, sizeof *q);
}

void div_sequences_free(div_sequences *s)
{
    if (s == NULL) return;
    for (size_t i = 0; i < s->n; i++) sequence_free(&s->v[i]);
    free(s->v);
    s->v = NULL;
    s->n = 0;
}

/* qsort order of sequence pointers: by id (ids are unique). */
static int by_id(const void *a, const void *b)
{
    return strcmp((*(const div_sequence *const *)a)->id, (*(const div_sequence *const *)b)->id);
}

/* Hashes the unsigned n as a decimal field. */
static uint64_t digest_count(uint64_t h, size_t n)
{
    char text[24];
    snprintf(text, sizeof text, "%zu", n);
    return jsonl_digest_field(h, text);
}

pg_status div_sequences_digest(const div_sequences *s, char *out, size_t len, pg_err *err)
{
    if (s == NULL || out == NULL || len < SEQ_DIGEST_MAX)
        return pg_fail(err, PG_ERR_INTERNAL, "div_sequences_digest: sequences or a %d-byte buffer "
                       "missing", SEQ_DIGEST_MAX);
    const div_sequence **order = malloc((s->n > 0 ? s->n : 1) * sizeof *order);
    if (order == NULL) return pg_fail(err, PG_ERR_NOMEM, "sequences: out of memory for the digest");
    for (size_t i = 0; i < s->n; i++) order[i] = &s->v[i];
    qsort(order, s->n, sizeof *order, by_id);
    uint64_t h = jsonl_digest_field(JSONL_FNV_OFFSET, SEQ_DIGEST_SCHEME);
    for (size_t i = 0; i < s->n; i++) {
        const div_sequence *q = order[i];
        h = jsonl_digest_field(h, q->id);
        h = jsonl_digest_field(h, q->tokens != NULL ? "tokens" : "text");
        if (q->tokens != NULL) {
            h = digest_count(h, q->n_tokens);
            for (size_t t = 0; t < q->n_tokens; t++) {
                const uint32_t v = (uint32_t)q->tokens[t];
                const unsigned char le[4] = {(unsigned char)v, (unsigned char)(v >> 8),
                                             (unsigned char)(v >> 16), (unsigned char)(v >> 24)};
                h = jsonl_fnv1a(h, le, sizeof le);
            }
            h = digest_count(h, q->score_from);
        } else {
            h = jsonl_digest_field(h, q->prompt);
            h = jsonl_digest_field(h, q->completion);
        }
    }
    free(order);
    snprintf(out, len, "%s:%zu:%016llx", SEQ_DIGEST_SCHEME, s->n, (unsigned long long)h);
    return PG_OK;
}

void div_sequences_keep(div_sequences *s, const unsigned char *keep)
{
    size_t kept = 0;
    for (size_t i = 0; i < s->n; i++) {
        if (keep[i]) s->v[kept++] = s->v[i];
        else sequence_free(&s->v[i]);
    }
    s->n = kept;
}

pg_status div_sequences_load(const char *path, div_sequences *out, pg_err *err)
{
    if (path == NULL || out == NULL)
        return pg_fail(err, PG_ERR_INTERNAL, "div_sequences_load: NULL argument");
    memset(out, 0, sizeof *out);
    jsonl_reader r = {fopen(path, "r"), path, NULL, 0, 0};
    if (r.f == NULL) return pg_fail(err, PG_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    jsonl_id_set ids = {0};
    size_t cap = 0;
    pg_status st;
    for (;;) {
        cJSON *obj = NULL;
        if ((st = jsonl_next_object(&r, &obj, err)) != PG_OK || obj == NULL) break;
        const jsonl_loc at = {path, r.line, NULL};
        div_sequence q = {.line = r.line};
        st = parse_sequence(err, &at, obj, &q);
        cJSON_Delete(obj);
        if (st == PG_OK) st = jsonl_check_id(err, &at, &ids, "id", q.id);
        if (st == PG_OK && out->n == cap) {
            const size_t grown = cap ? 2 * cap : 16;
            div_sequence *v = realloc(out->v, grown * sizeof *v);
            if (v == NULL) st = pg_fail(err, PG_ERR_NOMEM, "%s:%d: out of memory", path, r.line);
            else {
                out->v = v;
                cap = grown;
            }
        }
        if (st != PG_OK) {
            sequence_free(&q);
            break;
        }
        out->v[out->n++] = q;
    }
    if (st == PG_OK && out->n == 0)
        st = pg_fail(err, PG_ERR_FORMAT, "%s: holds no sequence", path);
    fclose(r.f);
    free(r.buf);
    jsonl_id_set_free(&ids);
    if (st != PG_OK) div_sequences_free(out);
    return st;
}

/* Longest id and source of a sequence from an eval sample. */
#define SEQ_EVAL_ID_MAX 512

pg_status div_sequences_from_eval(const eval_token_ids *rows, size_t n, int64_t run_id,
                                  div_sequences *out, int64_t *skipped, pg_err *err)
{
    if ((rows == NULL && n > 0) || out == NULL || skipped == NULL)
        return pg_fail(err, PG_ERR_INTERNAL, "div_sequences_from_eval: NULL argument");
    memset(out, 0, sizeof *out);
    *skipped = 0;
    pg_status st = PG_OK;
    if (n > 0 && (out->v = calloc(n, sizeof *out->v)) == NULL)
        return pg_fail(err, PG_ERR_NOMEM, "out of memory for %zu sequences", n);
    for (size_t i = 0; st == PG_OK && i < n; i++) {
        const eval_token_ids *r = &rows[i];
        char id[SEQ_EVAL_ID_MAX];
        snprintf(id, sizeof id, "%s/%s/%s/%s#%d", r->eval, r->mode, r->effort, r->problem_id,
                 r->sample);
        if (r->status != NULL && strcmp(r->status, "error") == 0) {
            (*skipped)++;
            continue;
        }
        if (r->token_ids_error != NULL)
            st = pg_fail(err, PG_ERR_FORMAT, "eval run %lld, sample %s: its token ids are "
                         "unusable (%s)", (long long)run_id, id, r->token_ids_error);
        else if (r->prompt_token_ids == NULL || r->token_ids == NULL)
            st = pg_fail(err, PG_ERR_FORMAT, "eval run %lld, sample %s: no token ids were stored "
                         "(an eval made with --no-token-ids, before schema version 16, or "
                         "against a server that does not return them); a sequence rebuilt from "
                         "its text is not the one sampled (gpt-oss's prompt carries a date), so "
                         "it is not scored", (long long)run_id, id);
        else if (r->n_prompt_token_ids == 0 || r->n_token_ids == 0)
            st = pg_fail(err, PG_ERR_FORMAT, "eval run %lld, sample %s: %s no token", (long long)run_id,
                         id, r->n_prompt_token_ids == 0 ? "its prompt has" : "its completion has");
        if (st != PG_OK) break;
        div_sequence *q = &out->v[out->n];
        char source[SEQ_EVAL_ID_MAX + 32];
        snprintf(source, sizeof source, "eval run %lld: %s", (long long)run_id, id);
        q->n_tokens = r->n_prompt_token_ids + r->n_token_ids;
        q->score_from = r->n_prompt_token_ids;
        q->id = strdup(id);
        q->source = strdup(source);
        q->tokens = malloc(q->n_tokens * sizeof *q->tokens);
        out->n++;
        if (q->id == NULL || q->source == NULL || q->tokens == NULL) {
            st = pg_fail(err, PG_ERR_NOMEM, "out of memory for sample %s", id);
            break;
        }
        memcpy(q->tokens, r->prompt_token_ids, r->n_prompt_token_ids * sizeof *q->tokens);
        memcpy(q->tokens + r->n_prompt_token_ids, r->token_ids, r->n_token_ids * sizeof *q->tokens);
    }
    if (st == PG_OK && out->n == 0)
        st = pg_fail(err, PG_ERR_FORMAT, "eval run %lld has no sample to score (%lld failed)",
                     (long long)run_id, (long long)*skipped);
    if (st != PG_OK) div_sequences_free(out);
    return st;
}
