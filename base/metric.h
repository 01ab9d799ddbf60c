/*
 * metric.h: the names of the error metrics a layer_metrics row holds, what
 * their numbers mean and which way is worse: the one table the store's
 * readers, the gate, the diff, history, advise and the reports share.
 * kernels/metrics.h defines how each is computed.
 *
 * Adding a metric: an enum entry here (a value before the counts, moving
 * PG_METRIC_VALUE_COUNT), its pg_metric_values member and its row in
 * metric.c's table; its computation in kernels/metrics.c
 * (metrics_from_sums); a schema migration adding its column in
 * db/schema.c. The store's INSERT and readers, the shard merge's column
 * rules and the diff's formats follow from the table; the tests that pin
 * the table and the schema (tests/test_metric_table.c, tests/test_store.c)
 * name it too.
 */
#ifndef PG_METRIC_H
#define PG_METRIC_H

#include <stddef.h>
#include <stdint.h>

#include "base/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The metrics, in the order help texts and the layer_metrics columns list
 * them: the six values first, then the two non-finite counts. */
typedef enum pg_metric {
    PG_METRIC_REL_L2 = 0,  /* higher is worse */
    PG_METRIC_MAX_ABS,     /* higher is worse */
    PG_METRIC_MEAN_ABS,    /* higher is worse */
    PG_METRIC_P99_ABS,     /* higher is worse */
    PG_METRIC_COS_SIM,     /* lower is worse */
    PG_METRIC_SQNR_DB,     /* lower is worse */
    PG_METRIC_NAN_COUNT,   /* higher is worse */
    PG_METRIC_INF_COUNT,   /* higher is worse */
    PG_METRIC_COUNT
} pg_metric;

/* How many of the metrics are values (the ones the gate bounds and advise
 * budgets): rel_l2 .. sqnr_db. */
#define PG_METRIC_VALUE_COUNT (PG_METRIC_SQNR_DB + 1)

/* The values of one layer_metrics row: how far a variant's output is from
 * the reference, as kernels/metrics.h computes them, db/store.h stores them
 * and db/report_store.h reads them back. One member per pg_metric, named as
 * the metric (and its column); reach a member by enum with pg_metric_value.
 * How many elements were compared is not here: it is not stored, and each
 * caller of the kernels knows it (the shape it passed). */
typedef struct pg_metric_values {
    double rel_l2, max_abs, mean_abs, p99_abs, cos_sim, sqnr_db;
    int64_t nan_count, inf_count;
} pg_metric_values;

/* What a metric's numbers mean, which decides "worse". */
typedef enum pg_metric_kind {
    PG_METRIC_KIND_ERROR,   /* an error or a count: larger is worse (worst = max) */
    PG_METRIC_KIND_COSINE,  /* cos_sim: smaller is worse (worst = min); its error is 1 - cos */
    PG_METRIC_KIND_DB       /* sqnr_db: smaller is worse (worst = min); a ratio in decibels */
} pg_metric_kind;

/* The metric's name, which is also its layer_metrics column; "?" out of range. */
const char *pg_metric_name(pg_metric m);

/* What m's numbers mean (PG_METRIC_KIND_ERROR out of range). */
pg_metric_kind pg_metric_kind_of(pg_metric m);

/* 1 when a higher value of m is worse (the errors and counts), 0 when a
 * lower one is (cos_sim, sqnr_db). */
int pg_metric_higher_is_worse(pg_metric m);

/* 1 when m is a count (an int64_t member of pg_metric_values: nan_count,
 * inf_count), 0 when it is a value (a double) or out of range. */
int pg_metric_is_count(pg_metric m);

/* The member of v that m names, a count widened to double; NaN when m is
 * out of range. */
double pg_metric_value(const pg_metric_values *v, pg_metric m);

/* The count member of v that m names; 0 when m is a value or out of range. */
int64_t pg_metric_count(const pg_metric_values *v, pg_metric m);

/* Sets the value member of v that m names to x; a no-op when m is a count
 * or out of range (pg_metric_set_count sets those). */
void pg_metric_set_value(pg_metric_values *v, pg_metric m, double x);

/* Sets the count member of v that m names to x; a no-op when m is a value
 * or out of range. */
void pg_metric_set_count(pg_metric_values *v, pg_metric m, int64_t x);

/* The non-finite output elements of v: nan_count + inf_count. */
int64_t pg_metric_nonfinite(const pg_metric_values *v);

/* The names of the first n metrics of the table, joined by ", ", into buf
 * (cut to len bytes): the list the parse messages give. */
void pg_metric_list(char *buf, size_t len, int n);

/* The metric named name among the first n of the table (PG_METRIC_VALUE_COUNT
 * or PG_METRIC_COUNT) into *m; PG_ERR_USAGE "WHAT: 'name' is not one of
 * rel_l2, max_abs, ..." otherwise (NULL name included). */
pg_status pg_metric_parse(const char *what, const char *name, int n, pg_metric *m,
                          pg_err *err);

#ifdef __cplusplus
}
#endif

#endif /* PG_METRIC_H */
