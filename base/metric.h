/*
 * metric.h: the names of the error metrics a layer_metrics row holds, what
 * their numbers mean and which way is worse: the one table the store's
 * readers, the gate, the diff, history, advise and the reports share.
 * kernels/metrics.h defines how each is computed.
 */
#ifndef PG_METRIC_H
#define PG_METRIC_H

#include <stddef.h>

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
