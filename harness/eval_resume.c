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
    {"config_version", "the precgate that wrote the run"},
    {"source", "live or --replay"},
    {"eval", "--eval"},
    {"limit", "--limit"},  /* before the digest it changes: the cause is named first */
    {"traces_digest", "the content of --traces (after --limit)"},
    {"extractor", "--extractor"},
    {"prompt_template", "the prompt template"},
    {"modes", "--endpoint MODE=URL"},
    {"efforts", "--effort"},
    {"samples", "--samples"},
    {"seed", "--seed"},
    {"temperature", "--temperature"},
    {"top_p", "--top-p"},
    {"max_tokens", "--max-tokens"},
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

pg_status eval_resume_check_config(int64_t run_id, const char *stored_json, const cJSON *now,
                                   pg_err *err)
{
    cJSON *stored = stored_json != NULL ? cJSON_Parse(stored_json) : NULL;
    pg_status st = PG_OK;
    if (!cJSON_IsObject(stored) ||
        !cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(stored, "config_version"))) {
        st = pg_fail(err, PG_ERR_USAGE,
                     "eval: --resume %lld: the run's stored config has no config_version (it "
                     "was started by a precgate older than the resume checks), so nothing proves "
                     "these are its traces and settings; start a new run",
                     (long long)run_id);
    }
    if (st == PG_OK)
        st = resume_check_fields("eval", run_id, stored, now, defining,
                                 sizeof defining / sizeof defining[0], err);
    cJSON_Delete(stored);
    return st;
}

pg_status eval_resume_check_models(int64_t run_id, cJSON *stored_models, int n,
                                   const char *const *modes, const char *const *models,
                                   int *added, pg_err *err)
{
    *added = 0;
    if (!cJSON_IsObject(stored_models))
        return pg_fail(err, PG_ERR_USAGE, "eval: --resume %lld: the run's stored config has no "
                                          "models object", (long long)run_id);
    for (int m = 0; m < n; m++) {
        if (models[m] == NULL) continue;
        const cJSON *had = cJSON_GetObjectItemCaseSensitive(stored_models, modes[m]);
        if (had == NULL) {
            if (cJSON_AddStringToObject(stored_models, modes[m], models[m]) == NULL)
                return pg_fail(err, PG_ERR_NOMEM, "eval: out of memory");
            *added = 1;
            continue;
        }
        if (cJSON_IsString(had) && strcmp(had->valuestring, models[m]) == 0) continue;
        char was[RESUME_VALUE_MAX + 1];
        show_value(had, was, sizeof was);
        return pg_fail(err, PG_ERR_USAGE,
                       "eval: --resume %lld: models.%s (the model mode %s serves) differs: the "
                       "run has %s, the server now serves \"%.*s\"; nothing was sent",
                       (long long)run_id, modes[m], modes[m], was, RESUME_VALUE_MAX, models[m]);
    }
    return PG_OK;
}
