/* eval_config.c: an eval's runs.config_json, written and read in one place (see eval_config.h). */
#include "eval_config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Room for a 64-bit seed as decimal text, its NUL included. */
#define EVAL_CONFIG_U64_TEXT_MAX 24

/* Adds pairs p[0 .. n-1] to o as object key, keyed by mode in the order of
 * their first pair: with several_as_array a mode of several pairs gets the
 * array of their values, else only its first pair counts. 0 when out of memory. */
static int add_pairs(cJSON *o, const char *key, const eval_config_pair *p, int n,
                     int several_as_array)
{
    cJSON *obj = cJSON_AddObjectToObject(o, key);
    int ok = obj != NULL;
    for (int i = 0; ok && i < n; i++) {
        if (p[i].mode == NULL || cJSON_GetObjectItemCaseSensitive(obj, p[i].mode) != NULL)
            continue;
        int k = 0;
        for (int j = i; several_as_array && j < n; j++)
            k += p[j].mode != NULL && strcmp(p[j].mode, p[i].mode) == 0;
        cJSON *v = k > 1 ? cJSON_CreateArray() : cJSON_CreateString(p[i].value);
        for (int j = i; v != NULL && k > 1 && j < n; j++)
            if (p[j].mode != NULL && strcmp(p[j].mode, p[i].mode) == 0 &&
                !cJSON_AddItemToArray(v, cJSON_CreateString(p[j].value))) {
                cJSON_Delete(v);
                v = NULL;
            }
        if (v != NULL && !cJSON_AddItemToObject(obj, p[i].mode, v)) cJSON_Delete(v);
    }
    return ok;
}

/* Adds c's live settings (those of a run that sends to servers) to o; 0 when out of memory. */
static int add_live(cJSON *o, const eval_run_config *c)
{
    cJSON_AddStringToObject(o, RUN_CONFIG_PROMPT_TEMPLATE, c->prompt_template);
    int ok = run_config_add_sorted(o, RUN_CONFIG_MODES, c->modes, c->n_modes) &&
             add_pairs(o, RUN_CONFIG_ENDPOINTS, c->endpoints, c->n_endpoints, 1) &&
             add_pairs(o, RUN_CONFIG_MODELS, c->models, c->n_models, 0) &&
             run_config_add_sorted(o, RUN_CONFIG_EFFORTS, c->efforts, c->n_efforts);
    cJSON_AddNumberToObject(o, RUN_CONFIG_SAMPLES, c->samples);
    cJSON_AddNumberToObject(o, RUN_CONFIG_TEMPERATURE, c->temperature);
    if (c->top_p >= 0) cJSON_AddNumberToObject(o, RUN_CONFIG_TOP_P, c->top_p);
    else cJSON_AddNullToObject(o, RUN_CONFIG_TOP_P);  /* the server's default */
    char seed[EVAL_CONFIG_U64_TEXT_MAX];
    snprintf(seed, sizeof seed, "%llu", c->seed);
    cJSON_AddStringToObject(o, RUN_CONFIG_SEED, seed);
    if (c->max_tokens > 0) cJSON_AddNumberToObject(o, RUN_CONFIG_MAX_TOKENS, (double)c->max_tokens);
    else cJSON_AddNullToObject(o, RUN_CONFIG_MAX_TOKENS);  /* the server's default */
    if (c->model) cJSON_AddStringToObject(o, RUN_CONFIG_EVAL_MODEL, c->model);
    if (c->api_key_env) cJSON_AddStringToObject(o, RUN_CONFIG_API_KEY_ENV, c->api_key_env);
    return ok;
}

/* Adds c's "plan" to o; 0 when out of memory. */
static int add_plan(cJSON *o, const eval_run_config *c)
{
    cJSON *plan = cJSON_AddObjectToObject(o, RUN_CONFIG_PLAN);
    return plan != NULL &&
           cJSON_AddNumberToObject(plan, RUN_CONFIG_PLAN_PROBLEMS, c->plan_problems) != NULL &&
           run_config_add_sorted(plan, RUN_CONFIG_MODES, c->plan_modes, c->n_plan_modes) &&
           run_config_add_sorted(plan, RUN_CONFIG_EFFORTS, c->plan_efforts, c->n_plan_efforts) &&
           cJSON_AddNumberToObject(plan, RUN_CONFIG_SAMPLES, c->plan_samples) != NULL;
}

cJSON *eval_config_write(const eval_run_config *c)
{
    cJSON *o = cJSON_CreateObject();
    if (o == NULL) return NULL;
    cJSON_AddNumberToObject(o, RUN_CONFIG_CONFIG_VERSION, c->config_version);
    cJSON_AddStringToObject(o, RUN_CONFIG_TRACES, c->traces);
    cJSON_AddStringToObject(o, RUN_CONFIG_TRACES_DIGEST, c->traces_digest);
    cJSON_AddStringToObject(o, RUN_CONFIG_EVAL, c->eval);
    cJSON_AddStringToObject(o, RUN_CONFIG_SOURCE,
                            c->replay ? EVAL_CONFIG_SOURCE_REPLAY : EVAL_CONFIG_SOURCE_LIVE);
    cJSON_AddStringToObject(o, RUN_CONFIG_EXTRACTOR, c->extractor);
    if (c->limit > 0) cJSON_AddNumberToObject(o, RUN_CONFIG_LIMIT, c->limit);
    int ok = c->replay || add_live(o, c);
    ok = ok && (!c->plan_known || add_plan(o, c));
    if (ok && c->part.count > 0)
        ok = run_config_add_part_owning(o, &c->part, RUN_CONFIG_SHARD_PROBLEMS,
                                        c->shard_problems, c->n_shard_problems);
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

/* The object member key of o flattened into pairs (a string value: one
 * pair; an array: one per entry; anything else: one with value NULL): *n
 * their count, *known whether key is an object. *storage is owned by the
 * caller. PG_ERR_NOMEM. */
static pg_status read_pairs(const cJSON *o, const char *key, eval_config_pair **storage,
                            const eval_config_pair **list, int *n, int *known, pg_err *err)
{
    const cJSON *obj = cJSON_GetObjectItemCaseSensitive(o, key);
    *known = cJSON_IsObject(obj);
    *n = 0;
    const cJSON *m, *x;
    if (!*known) return PG_OK;
    cJSON_ArrayForEach(m, obj) *n += cJSON_IsArray(m) ? cJSON_GetArraySize(m) : 1;
    if (*n == 0) return PG_OK;
    if ((*storage = calloc((size_t)*n, sizeof **storage)) == NULL)
        return pg_fail(err, PG_ERR_NOMEM, "out of memory reading a run's config");
    int i = 0;
    cJSON_ArrayForEach(m, obj) {
        if (!cJSON_IsArray(m)) {
            (*storage)[i++] = (eval_config_pair){m->string, cJSON_IsString(m) ? m->valuestring : NULL};
            continue;
        }
        cJSON_ArrayForEach(x, m)
            (*storage)[i++] = (eval_config_pair){m->string, cJSON_IsString(x) ? x->valuestring : NULL};
    }
    *list = *storage;
    return PG_OK;
}

/* A number member key of o, or null, into *v (null: null_value); 0 when neither. */
static int read_number_or_null(const cJSON *o, const char *key, double null_value, double *v)
{
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, key);
    if (cJSON_IsNull(x)) *v = null_value;
    else if (cJSON_IsNumber(x)) *v = x->valuedouble;
    return cJSON_IsNull(x) || cJSON_IsNumber(x);
}

/* d's fields from d->tree (its storage freed and zeroed first). */
static pg_status read_fields(eval_config_doc *d, pg_err *err)
{
    for (size_t i = 0; i < sizeof d->storage / sizeof d->storage[0]; i++) free(d->storage[i]);
    for (size_t i = 0; i < sizeof d->pairs / sizeof d->pairs[0]; i++) free(d->pairs[i]);
    memset(d->storage, 0, sizeof d->storage);
    memset(d->pairs, 0, sizeof d->pairs);
    memset(&d->c, 0, sizeof d->c);
    const cJSON *t = d->tree;
    eval_run_config *c = &d->c;
    const cJSON *version = cJSON_GetObjectItemCaseSensitive(t, RUN_CONFIG_CONFIG_VERSION);
    c->config_version_known = cJSON_IsNumber(version);
    if (c->config_version_known) c->config_version = version->valueint;
    c->traces = run_config_string(t, RUN_CONFIG_TRACES);
    c->traces_digest = run_config_string(t, RUN_CONFIG_TRACES_DIGEST);
    c->eval = run_config_string(t, RUN_CONFIG_EVAL);
    const char *source = run_config_string(t, RUN_CONFIG_SOURCE);
    c->replay = source != NULL && strcmp(source, EVAL_CONFIG_SOURCE_REPLAY) == 0;
    c->source_known = c->replay || (source != NULL && strcmp(source, EVAL_CONFIG_SOURCE_LIVE) == 0);
    c->extractor = run_config_string(t, RUN_CONFIG_EXTRACTOR);
    c->limit_known = run_config_int(t, RUN_CONFIG_LIMIT, &c->limit);
    c->prompt_template = run_config_string(t, RUN_CONFIG_PROMPT_TEMPLATE);
    c->samples_known = run_config_int(t, RUN_CONFIG_SAMPLES, &c->samples);
    const cJSON *temperature = cJSON_GetObjectItemCaseSensitive(t, RUN_CONFIG_TEMPERATURE);
    c->temperature_known = cJSON_IsNumber(temperature);
    if (c->temperature_known) c->temperature = temperature->valuedouble;
    c->top_p_known = read_number_or_null(t, RUN_CONFIG_TOP_P, -1, &c->top_p);
    double max_tokens = 0;
    c->max_tokens_known = read_number_or_null(t, RUN_CONFIG_MAX_TOKENS, 0, &max_tokens);
    c->max_tokens = (long)max_tokens;
    c->seed_known = run_config_u64_text(run_config_string(t, RUN_CONFIG_SEED), &c->seed);
    c->model = run_config_string(t, RUN_CONFIG_EVAL_MODEL);
    c->api_key_env = run_config_string(t, RUN_CONFIG_API_KEY_ENV);
    const cJSON *plan = cJSON_GetObjectItemCaseSensitive(t, RUN_CONFIG_PLAN);
    c->plan_known = plan != NULL;
    c->plan_problems_known = run_config_int(plan, RUN_CONFIG_PLAN_PROBLEMS, &c->plan_problems);
    c->plan_samples_known = run_config_int(plan, RUN_CONFIG_SAMPLES, &c->plan_samples);
    run_config_read_part(t, &c->part);
    c->shard_problems_known =
        cJSON_GetObjectItemCaseSensitive(t, RUN_CONFIG_SHARD_PROBLEMS) != NULL;
    pg_status st = run_config_read_strings(t, RUN_CONFIG_MODES, &d->storage[0], &c->modes,
                                           &c->n_modes, err);
    if (st == PG_OK)
        st = run_config_read_strings(t, RUN_CONFIG_EFFORTS, &d->storage[1], &c->efforts,
                                     &c->n_efforts, err);
    if (st == PG_OK)
        st = run_config_read_strings(plan, RUN_CONFIG_MODES, &d->storage[2], &c->plan_modes,
                                     &c->n_plan_modes, err);
    if (st == PG_OK)
        st = run_config_read_strings(plan, RUN_CONFIG_EFFORTS, &d->storage[3], &c->plan_efforts,
                                     &c->n_plan_efforts, err);
    if (st == PG_OK)
        st = run_config_read_strings(t, RUN_CONFIG_SHARD_PROBLEMS, &d->storage[4],
                                     &c->shard_problems, &c->n_shard_problems, err);
    if (st == PG_OK)
        st = read_pairs(t, RUN_CONFIG_ENDPOINTS, &d->pairs[0], &c->endpoints, &c->n_endpoints,
                        &c->endpoints_known, err);
    if (st == PG_OK)
        st = read_pairs(t, RUN_CONFIG_MODELS, &d->pairs[1], &c->models, &c->n_models,
                        &c->models_known, err);
    return st;
}

pg_status eval_config_read(const char *json, eval_config_doc *out, pg_err *err)
{
    memset(out, 0, sizeof *out);
    if (json == NULL || (out->tree = cJSON_Parse(json)) == NULL || !cJSON_IsObject(out->tree))
        return pg_fail(err, PG_ERR_USAGE, "the run has no readable config_json");
    return read_fields(out, err);
}

pg_status eval_config_doc_update(eval_config_doc *d, const eval_run_config *c,
                                 const char *const *keys, int n, pg_err *err)
{
    cJSON *w = eval_config_write(c);
    if (w == NULL) return pg_fail(err, PG_ERR_NOMEM, "out of memory updating a run's config");
    for (int i = 0; i < n; i++) {
        cJSON *v = cJSON_DetachItemFromObjectCaseSensitive(w, keys[i]);
        if (v == NULL) continue;
        if (cJSON_GetObjectItemCaseSensitive(d->tree, keys[i]) != NULL)
            cJSON_ReplaceItemInObjectCaseSensitive(d->tree, keys[i], v);
        else cJSON_AddItemToObject(d->tree, keys[i], v);
    }
    cJSON_Delete(w);
    return read_fields(d, err);
}

void eval_config_doc_free(eval_config_doc *d)
{
    if (d == NULL) return;
    cJSON_Delete(d->tree);
    for (size_t i = 0; i < sizeof d->storage / sizeof d->storage[0]; i++) free(d->storage[i]);
    for (size_t i = 0; i < sizeof d->pairs / sizeof d->pairs[0]; i++) free(d->pairs[i]);
    memset(d, 0, sizeof *d);
}
