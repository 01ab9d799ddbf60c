/* eval_resume.c: the checks that keep `eval --resume` on the same eval (see eval_resume.h). */
#include "eval_resume.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Most characters of a value quoted in a refusal. */
#define RESUME_VALUE_MAX 120
/* Room for the list of the other differing fields. */
#define RESUME_LIST_MAX 200

/* Every field an eval resume must repeat (models: eval_resume_check_models). */
static const resume_field defining[] = {
    {RUN_CONFIG_CONFIG_VERSION, "the precgate that wrote the run"},
    {RUN_CONFIG_SOURCE, "live or --replay"},
    {RUN_CONFIG_EVAL, "--eval"},
    {RUN_CONFIG_LIMIT, "--limit"},  /* before the digest it changes: the cause is named first */
    {RUN_CONFIG_TRACES_DIGEST, "the content of --traces (after --limit)"},
    {RUN_CONFIG_EXTRACTOR, "--extractor"},
    {RUN_CONFIG_PROMPT_TEMPLATE, "the prompt template"},
    {RUN_CONFIG_MODES, "--endpoint MODE=URL"},
    {RUN_CONFIG_EFFORTS, "--effort"},
    {RUN_CONFIG_SAMPLES, "--samples"},
    {RUN_CONFIG_SEED, "--seed"},
    {RUN_CONFIG_TEMPERATURE, "--temperature"},
    {RUN_CONFIG_TOP_P, "--top-p"},
    {RUN_CONFIG_MAX_TOKENS, "--max-tokens"},
};

/* v as compact JSON, cut to RESUME_VALUE_MAX, into buf; "(absent)" for NULL. */
static void show_value(const cJSON *v, char *buf, size_t len)
{
    char *text = v != NULL ? cJSON_PrintUnformatted(v) : NULL;
    snprintf(buf, len, "%.*s", RESUME_VALUE_MAX, v == NULL ? "(absent)" : text ? text : "?");
    free(text);
}

pg_status resume_check_fields(const char *cmd, int64_t run_id, const cJSON *stored,
                              const cJSON *now, const resume_field *fields, size_t n,
                              pg_err *err)
{
    const resume_field *first = NULL;
    char others[RESUME_LIST_MAX] = "";
    for (size_t i = 0; i < n; i++) {
        const cJSON *a = cJSON_GetObjectItemCaseSensitive(stored, fields[i].key);
        const cJSON *b = cJSON_GetObjectItemCaseSensitive(now, fields[i].key);
        if ((a == NULL && b == NULL) || (a != NULL && b != NULL && cJSON_Compare(a, b, 1)))
            continue;
        if (first == NULL) {
            first = &fields[i];
        } else {
            const size_t used = strlen(others);
            snprintf(others + used, sizeof others - used, "%s%s", used ? ", " : "",
                     fields[i].key);
        }
    }
    if (first == NULL) return PG_OK;
    char was[RESUME_VALUE_MAX + 1], is[RESUME_VALUE_MAX + 1];
    show_value(cJSON_GetObjectItemCaseSensitive(stored, first->key), was, sizeof was);
    show_value(cJSON_GetObjectItemCaseSensitive(now, first->key), is, sizeof is);
    return pg_fail(err, PG_ERR_USAGE,
                   "%s: --resume %lld: %s (%s) differs: the run has %s, this command gives "
                   "%s%s%s%s; a resume continues the same %s (start a new run for another)",
                   cmd, (long long)run_id, first->key, first->option, was, is,
                   others[0] ? " (also differ: " : "", others, others[0] ? ")" : "", cmd);
}

pg_status eval_resume_check_config(int64_t run_id, const eval_config_doc *stored,
                                   const cJSON *now, pg_err *err)
{
    if (!stored->c.config_version_known)
        return pg_fail(err, PG_ERR_USAGE,
                       "eval: --resume %lld: the run's stored config has no config_version (it "
                       "was started by a precgate older than the resume checks), so nothing "
                       "proves these are its traces and settings; start a new run",
                       (long long)run_id);
    return resume_check_fields("eval", run_id, stored->tree, now, defining,
                               sizeof defining / sizeof defining[0], err);
}

/* The model the run has for mode among merged[0 .. n-1] (its first pair), or NULL. */
static const eval_config_pair *model_of(const eval_config_pair *merged, int n, const char *mode)
{
    for (int i = 0; i < n; i++)
        if (strcmp(merged[i].mode, mode) == 0) return &merged[i];
    return NULL;
}

pg_status eval_resume_check_models(int64_t run_id, const eval_run_config *stored, int n,
                                   const char *const *modes, const char *const *models,
                                   eval_config_pair *merged, int *n_merged, int *added,
                                   pg_err *err)
{
    *added = 0;
    *n_merged = 0;
    if (!stored->models_known)
        return pg_fail(err, PG_ERR_USAGE, "eval: --resume %lld: the run's stored config has no "
                                          "models object", (long long)run_id);
    for (int i = 0; i < stored->n_models; i++) merged[(*n_merged)++] = stored->models[i];
    for (int m = 0; m < n; m++) {
        if (models[m] == NULL) continue;
        const eval_config_pair *had = model_of(merged, *n_merged, modes[m]);
        if (had == NULL) {
            merged[(*n_merged)++] = (eval_config_pair){modes[m], models[m]};
            *added = 1;
            continue;
        }
        if (had->value != NULL && strcmp(had->value, models[m]) == 0) continue;
        cJSON *v = had->value != NULL ? cJSON_CreateString(had->value) : NULL;
        char was[RESUME_VALUE_MAX + 1];
        if (had->value == NULL) snprintf(was, sizeof was, "(no string)");
        else show_value(v, was, sizeof was);
        cJSON_Delete(v);
        return pg_fail(err, PG_ERR_USAGE,
                       "eval: --resume %lld: models.%s (the model mode %s serves) differs: the "
                       "run has %s, the server now serves \"%.*s\"; nothing was sent",
                       (long long)run_id, modes[m], modes[m], was, RESUME_VALUE_MAX, models[m]);
    }
    return PG_OK;
}
