/*
 * json_out.h: the conventions every JSON output of reports/ and the CLI
 * shares (diff --json, history --json, runs --json, eval --output): how a
 * number that JSON cannot hold is written, and how a row object of a
 * two-run comparison starts.
 */
#ifndef PG_JSON_OUT_H
#define PG_JSON_OUT_H

#include <stdint.h>

struct cJSON;

/* Adds number v to the JSON object obj under key; a NaN or infinite v is
 * added as null with a sibling "<key>_nonfinite": "nan", "inf" or "-inf"
 * (JSON has no such numbers). Returns 0 when an allocation failed. */
int report_json_number(struct cJSON *obj, const char *key, double v);

/* Adds string s under key, or null for a NULL s; 0 when out of memory. */
int report_json_string(struct cJSON *obj, const char *key, const char *s);

/* Adds v (report_json_number) when present, a plain null when not (a side
 * or a statistic a row lacks); 0 when out of memory. */
int report_json_side_number(struct cJSON *obj, const char *key, double v, int present);

/* A new JSON object for one row of a comparison of two runs: "type": type,
 * then "run_a" and "run_b"; the caller adds the row's fields and owns it.
 * NULL when out of memory. */
struct cJSON *report_json_row(const char *type, int64_t run_a, int64_t run_b);

#endif /* PG_JSON_OUT_H */
