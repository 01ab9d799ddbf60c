/* json_out.c: the shared JSON output conventions (see json_out.h). */
#include "json_out.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>

/* Room for "<key>_nonfinite": keys are short literals of the writers. */
#define REPORT_JSON_KEY_MAX 256

int report_json_number(struct cJSON *obj, const char *key, double v)
{
    if (isfinite(v)) return cJSON_AddNumberToObject(obj, key, v) != NULL;
    if (cJSON_AddNullToObject(obj, key) == NULL) return 0;
    char flag[REPORT_JSON_KEY_MAX];
    snprintf(flag, sizeof flag, "%s_nonfinite", key);
    const char *what = isnan(v) ? "nan" : v > 0 ? "inf" : "-inf";
    return cJSON_AddStringToObject(obj, flag, what) != NULL;
}

int report_json_string(struct cJSON *obj, const char *key, const char *s)
{
    return (s != NULL ? cJSON_AddStringToObject(obj, key, s) : cJSON_AddNullToObject(obj, key)) !=
           NULL;
}

int report_json_side_number(struct cJSON *obj, const char *key, double v, int present)
{
    return present ? report_json_number(obj, key, v) : cJSON_AddNullToObject(obj, key) != NULL;
}

struct cJSON *report_json_row(const char *type, int64_t run_a, int64_t run_b)
{
    cJSON *o = cJSON_CreateObject();
    if (o != NULL && cJSON_AddStringToObject(o, "type", type) != NULL &&
        cJSON_AddNumberToObject(o, "run_a", (double)run_a) != NULL &&
        cJSON_AddNumberToObject(o, "run_b", (double)run_b) != NULL)
        return o;
    cJSON_Delete(o);
    return NULL;
}
