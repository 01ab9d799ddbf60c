/* run_config.c: a sweep's runs.config_json, written and read in one place (see run_config.h). */
#include "run_config.h"

#include <stdio.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* Room for a 64-bit seed as decimal text, its NUL included. */
#define RUN_CONFIG_U64_TEXT_MAX 24

const run_config_layer_table run_config_layer_tables[RUN_CONFIG_LAYER_TABLES] = {
    {"layer_metrics", offsetof(store_layer_rows, metrics), 0},
    {"quant_stats", offsetof(store_layer_rows, quant), 0},
    {"layer_shapes", offsetof(store_layer_rows, shapes), 0},
    {"attribution", offsetof(store_layer_rows, attribution), 0},
    {"ext_diagnosis", offsetof(store_layer_rows, diagnosis), 0},
    {"unsupported_cells", offsetof(store_layer_rows, unsupported), 19},
};

pg_status run_config_path(const char *key, char out[RUN_CONFIG_PATH_MAX], pg_err *err)
{
    if (key == NULL) return pg_fail(err, PG_ERR_INTERNAL, "run_config_path: key is NULL");
    const int n = snprintf(out, RUN_CONFIG_PATH_MAX, "$.%s", key);
    if (n < 0 || n >= RUN_CONFIG_PATH_MAX)
        return pg_fail(err, PG_ERR_INTERNAL, "run_config_path: key '%s' is too long", key);
    return PG_OK;
}

pg_status run_config_add_layer_rows(cJSON *o, const store_layer_rows *rows, int n_layers,
                                    pg_err *err)
{
    cJSON *obj = cJSON_AddObjectToObject(o, RUN_CONFIG_LAYER_ROWS);
    cJSON *arr[RUN_CONFIG_LAYER_TABLES];
    for (size_t t = 0; obj != NULL && t < RUN_CONFIG_LAYER_TABLES; t++)
        if ((arr[t] = cJSON_AddArrayToObject(obj, run_config_layer_tables[t].table)) == NULL)
            obj = NULL;
    for (int l = 0; obj != NULL && l < n_layers; l++)
        for (size_t t = 0; t < RUN_CONFIG_LAYER_TABLES; t++) {
            const int64_t count =
                *(const int64_t *)((const char *)&rows[l] + run_config_layer_tables[t].offset);
            if (!cJSON_AddItemToArray(arr[t], cJSON_CreateNumber((double)count))) obj = NULL;
        }
    return obj != NULL ? PG_OK : pg_fail(err, PG_ERR_NOMEM, "run: out of memory");
}

cJSON *run_config_write(const run_config *c)
{
    cJSON *o = cJSON_CreateObject();
    if (o == NULL) return NULL;
    cJSON_AddStringToObject(o, RUN_CONFIG_CAPTURE, c->capture);
    cJSON_AddStringToObject(o, RUN_CONFIG_CAPTURE_DIGEST, c->capture_digest);
    cJSON_AddStringToObject(o, RUN_CONFIG_MODEL, c->model);
    cJSON *list = cJSON_CreateArray();
    for (int i = 0; list != NULL && i < c->n_variants; i++)
        cJSON_AddItemToArray(list, cJSON_CreateString(c->variants[i]));
    cJSON_AddItemToObject(o, RUN_CONFIG_VARIANTS, list);
    cJSON_AddStringToObject(o, RUN_CONFIG_BACKEND_REQUESTED, c->backend_requested);
    cJSON_AddStringToObject(o, RUN_CONFIG_BACKEND, c->backend);
    cJSON_AddBoolToObject(o, RUN_CONFIG_CHECK_SPEC, c->check_spec);
    cJSON_AddStringToObject(o, RUN_CONFIG_SCALES, c->scales);
    cJSON_AddBoolToObject(o, RUN_CONFIG_ATTRIBUTE, c->attribute);
    cJSON_AddNumberToObject(o, RUN_CONFIG_THREADS, (double)c->threads);
    cJSON_AddNumberToObject(o, RUN_CONFIG_PAGE_SEED, (double)c->page_seed);
    char seed[RUN_CONFIG_U64_TEXT_MAX];
    snprintf(seed, sizeof seed, "%llu", c->page_seed);
    cJSON_AddStringToObject(o, RUN_CONFIG_PAGE_SEED_DECIMAL, seed);
    cJSON_AddStringToObject(o, RUN_CONFIG_GIT_REV, c->git_rev);
    cJSON_AddNumberToObject(o, RUN_CONFIG_LAYERS, c->layers);
    cJSON_AddNumberToObject(o, RUN_CONFIG_SEQUENCES, c->sequences);
    cJSON_AddNumberToObject(o, RUN_CONFIG_TOKENS_Q, (double)c->tokens_q);
    cJSON_AddNumberToObject(o, RUN_CONFIG_TOKENS_KV, (double)c->tokens_kv);
    cJSON_AddNumberToObject(o, RUN_CONFIG_BLOCK_SIZE, c->block_size);
    pg_err ignored = {0};  /* out of memory: NULL below */
    if (c->layer_rows != NULL &&
        run_config_add_layer_rows(o, c->layer_rows, c->layers, &ignored) != PG_OK) {
        cJSON_Delete(o);
        return NULL;
    }
    if (c->part.count > 0) {
        run_config_add_part(o, &c->part);
        cJSON *layers = cJSON_AddArrayToObject(o, RUN_CONFIG_SHARD_LAYERS);
        for (int i = 0; layers != NULL && i < c->n_shard_layers; i++)
            cJSON_AddItemToArray(layers, cJSON_CreateNumber(c->shard_layers[i]));
    }
    return o;
}

const char *run_config_string(const cJSON *o, const char *key)
{
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(x) ? x->valuestring : NULL;
}

int run_config_int(const cJSON *o, const char *key, int *out)
{
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsNumber(x) || x->valuedouble < -RUN_CONFIG_INT_MAX ||
        x->valuedouble > RUN_CONFIG_INT_MAX || x->valuedouble != (double)(int)x->valuedouble)
        return 0;
    *out = (int)x->valuedouble;
    return 1;
}

pg_status run_config_read_strings(const cJSON *o, const char *key, const char ***storage,
                                  const char *const **list, int *n, pg_err *err)
{
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(o, key);
    *storage = NULL;
    *list = NULL;
    *n = cJSON_IsArray(a) ? cJSON_GetArraySize(a) : -1;
    if (*n <= 0) return PG_OK;
    if ((*storage = calloc((size_t)*n, sizeof **storage)) == NULL)
        return pg_fail(err, PG_ERR_NOMEM, "out of memory reading a run's config");
    int i = 0;
    const cJSON *x;
    cJSON_ArrayForEach(x, a) (*storage)[i++] = cJSON_IsString(x) ? x->valuestring : NULL;
    *list = *storage;
    return PG_OK;
}

/* qsort order of C strings. */
static int by_name(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

int run_config_add_sorted(cJSON *o, const char *key, const char *const *names, int n)
{
    const char **sorted = calloc((size_t)n + 1, sizeof *sorted);
    cJSON *arr = sorted != NULL ? cJSON_AddArrayToObject(o, key) : NULL;
    int m = 0, ok = arr != NULL;
    for (int i = 0; ok && i < n; i++)
        if (names[i] != NULL) sorted[m++] = names[i];
    if (ok) qsort(sorted, (size_t)m, sizeof *sorted, by_name);
    for (int i = 0; ok && i < m; i++)
        if (i == 0 || strcmp(sorted[i], sorted[i - 1]) != 0)
            ok = cJSON_AddItemToArray(arr, cJSON_CreateString(sorted[i]));
    free(sorted);
    return ok;
}

int run_config_add_strings(cJSON *o, const char *key, const char *const *names, int n)
{
    cJSON *arr = cJSON_AddArrayToObject(o, key);
    int ok = arr != NULL;
    for (int i = 0; ok && i < n; i++) ok = cJSON_AddItemToArray(arr, cJSON_CreateString(names[i]));
    return ok;
}

int run_config_add_part(cJSON *o, const run_config_part *p)
{
    const int ok = cJSON_AddStringToObject(o, RUN_CONFIG_JOB, p->job) != NULL;
    cJSON *sh = cJSON_AddObjectToObject(o, RUN_CONFIG_SHARD);
    return ok && sh != NULL && cJSON_AddNumberToObject(sh, RUN_CONFIG_SHARD_INDEX, p->index) &&
           cJSON_AddNumberToObject(sh, RUN_CONFIG_SHARD_COUNT, p->count);
}

int run_config_add_part_owning(cJSON *o, const run_config_part *p, const char *owned_key,
                               const char *const *owned, int n)
{
    return run_config_add_part(o, p) && run_config_add_strings(o, owned_key, owned, n);
}

void run_config_read_part(const cJSON *o, run_config_part *p)
{
    memset(p, 0, sizeof *p);
    const cJSON *sh = cJSON_GetObjectItemCaseSensitive(o, RUN_CONFIG_SHARD);
    const cJSON *i = cJSON_GetObjectItemCaseSensitive(sh, RUN_CONFIG_SHARD_INDEX);
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(sh, RUN_CONFIG_SHARD_COUNT);
    p->job = run_config_string(o, RUN_CONFIG_JOB);
    if (cJSON_IsNumber(i)) p->index = i->valueint;
    if (cJSON_IsNumber(c)) p->count = c->valueint;
    p->known = sh != NULL;
    p->readable = cJSON_IsNumber(i) && cJSON_IsNumber(c) && p->job != NULL;
}

/* The stored "variants" into d (n_variants -1 unless a non-empty list of strings). */
static pg_status read_variants(run_config_doc *d, pg_err *err)
{
    const char *const *list = NULL;
    int n = 0, strings = 1;
    const pg_status st = run_config_read_strings(d->tree, RUN_CONFIG_VARIANTS, &d->variant_names,
                                                 &list, &n, err);
    for (int i = 0; i < n; i++) strings = strings && list[i] != NULL;
    d->c.variants = n > 0 && strings ? list : NULL;
    d->c.n_variants = n > 0 && strings ? n : -1;
    return st;
}

/* The stored "job", "shard" and "shard_layers" into d. */
static pg_status read_shard(run_config_doc *d, pg_err *err)
{
    const cJSON *layers = cJSON_GetObjectItemCaseSensitive(d->tree, RUN_CONFIG_SHARD_LAYERS);
    run_config *c = &d->c;
    run_config_read_part(d->tree, &c->part);
    c->n_shard_layers = cJSON_IsArray(layers) ? 0 : -1;
    const int n = cJSON_IsArray(layers) ? cJSON_GetArraySize(layers) : 0;
    if (n == 0) return PG_OK;
    if ((d->shard_layer_ids = calloc((size_t)n, sizeof *d->shard_layer_ids)) == NULL)
        return pg_fail(err, PG_ERR_NOMEM, "run: out of memory reading a run's config");
    int i = 0;
    const cJSON *x;
    cJSON_ArrayForEach(x, layers) d->shard_layer_ids[i++] = cJSON_IsNumber(x) ? x->valueint : -1;
    c->shard_layers = d->shard_layer_ids;
    c->n_shard_layers = n;
    return PG_OK;
}

int run_config_u64_text(const char *text, unsigned long long *out)
{
    if (text == NULL || text[0] == '-') return 0;
    char *end = NULL;
    errno = 0;
    const unsigned long long v = strtoull(text, &end, 0);
    if (errno != 0 || end == text || *end != '\0') return 0;
    *out = v;
    return 1;
}

pg_status run_config_read(const char *json, run_config_doc *out, pg_err *err)
{
    memset(out, 0, sizeof *out);
    if (json == NULL || (out->tree = cJSON_Parse(json)) == NULL)
        return pg_fail(err, PG_ERR_USAGE, "the run has no readable config_json");
    const cJSON *t = out->tree;
    run_config *c = &out->c;
    c->capture = run_config_string(t, RUN_CONFIG_CAPTURE);
    c->capture_digest = run_config_string(t, RUN_CONFIG_CAPTURE_DIGEST);
    c->model = run_config_string(t, RUN_CONFIG_MODEL);
    c->backend_requested = run_config_string(t, RUN_CONFIG_BACKEND_REQUESTED);
    c->backend = run_config_string(t, RUN_CONFIG_BACKEND);
    const cJSON *check_spec = cJSON_GetObjectItemCaseSensitive(t, RUN_CONFIG_CHECK_SPEC);
    c->check_spec_known = cJSON_IsBool(check_spec);
    c->check_spec = cJSON_IsTrue(check_spec);
    c->scales = run_config_string(t, RUN_CONFIG_SCALES);
    const cJSON *attribute = cJSON_GetObjectItemCaseSensitive(t, RUN_CONFIG_ATTRIBUTE);
    c->attribute_known = attribute != NULL;
    c->attribute = cJSON_IsTrue(attribute);
    c->page_seed_known =
        run_config_u64_text(run_config_string(t, RUN_CONFIG_PAGE_SEED_DECIMAL), &c->page_seed);
    c->git_rev = run_config_string(t, RUN_CONFIG_GIT_REV);
    c->layer_rows_known = cJSON_HasObjectItem(t, RUN_CONFIG_LAYER_ROWS);
    c->p_rounding = run_config_string(t, RUN_CONFIG_P_ROUNDING);
    pg_status st = read_variants(out, err);
    if (st == PG_OK) st = read_shard(out, err);
    return st;
}

void run_config_doc_free(run_config_doc *d)
{
    if (d == NULL) return;
    cJSON_Delete(d->tree);
    free(d->variant_names);
    free(d->shard_layer_ids);
    memset(d, 0, sizeof *d);
}
