/* metric.c: the metric names, kinds and polarity (see metric.h). */
#include "metric.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* Room for the list of names in pg_metric_parse's message. */
#define METRIC_LIST_MAX 160

/* One row per metric: its name is its pg_metric_values member's (and so its
 * column's), where that member lies, and whether it is a count (int64_t)
 * or a value (double). */
static const struct {
    const char *name;
    pg_metric_kind kind;
    size_t offset;
    int is_count;
} metrics[PG_METRIC_COUNT] = {
#define VALUE(e, member, kind) [e] = {#member, kind, offsetof(pg_metric_values, member), 0}
#define COUNT(e, member) \
    [e] = {#member, PG_METRIC_KIND_ERROR, offsetof(pg_metric_values, member), 1}
    VALUE(PG_METRIC_REL_L2, rel_l2, PG_METRIC_KIND_ERROR),
    VALUE(PG_METRIC_MAX_ABS, max_abs, PG_METRIC_KIND_ERROR),
    VALUE(PG_METRIC_MEAN_ABS, mean_abs, PG_METRIC_KIND_ERROR),
    VALUE(PG_METRIC_P99_ABS, p99_abs, PG_METRIC_KIND_ERROR),
    VALUE(PG_METRIC_COS_SIM, cos_sim, PG_METRIC_KIND_COSINE),
    VALUE(PG_METRIC_SQNR_DB, sqnr_db, PG_METRIC_KIND_DB),
    COUNT(PG_METRIC_NAN_COUNT, nan_count),
    COUNT(PG_METRIC_INF_COUNT, inf_count),
#undef VALUE
#undef COUNT
};

const char *pg_metric_name(pg_metric m)
{
    return (unsigned)m < PG_METRIC_COUNT ? metrics[m].name : "?";
}

pg_metric_kind pg_metric_kind_of(pg_metric m)
{
    return (unsigned)m < PG_METRIC_COUNT ? metrics[m].kind : PG_METRIC_KIND_ERROR;
}

int pg_metric_higher_is_worse(pg_metric m)
{
    return pg_metric_kind_of(m) == PG_METRIC_KIND_ERROR;
}

int pg_metric_is_count(pg_metric m)
{
    return (unsigned)m < PG_METRIC_COUNT && metrics[m].is_count;
}

/* The address of m's member in v (m in range). */
static const void *member(const pg_metric_values *v, pg_metric m)
{
    return (const char *)v + metrics[m].offset;
}

double pg_metric_value(const pg_metric_values *v, pg_metric m)
{
    if ((unsigned)m >= PG_METRIC_COUNT) return NAN;
    if (metrics[m].is_count) return (double)*(const int64_t *)member(v, m);
    return *(const double *)member(v, m);
}

int64_t pg_metric_count(const pg_metric_values *v, pg_metric m)
{
    return pg_metric_is_count(m) ? *(const int64_t *)member(v, m) : 0;
}

void pg_metric_set_value(pg_metric_values *v, pg_metric m, double x)
{
    if ((unsigned)m < PG_METRIC_COUNT && !metrics[m].is_count)
        *(double *)((char *)v + metrics[m].offset) = x;
}

void pg_metric_set_count(pg_metric_values *v, pg_metric m, int64_t x)
{
    if (pg_metric_is_count(m)) *(int64_t *)((char *)v + metrics[m].offset) = x;
}

int64_t pg_metric_nonfinite(const pg_metric_values *v)
{
    return v->nan_count + v->inf_count;
}

void pg_metric_list(char *buf, size_t len, int n)
{
    if (len == 0) return;
    buf[0] = '\0';
    if (n > PG_METRIC_COUNT) n = PG_METRIC_COUNT;
    size_t at = 0;
    for (int i = 0; i < n && at < len; i++)
        at += (size_t)snprintf(buf + at, len - at, "%s%s", i ? ", " : "", metrics[i].name);
}

pg_status pg_metric_parse(const char *what, const char *name, int n, pg_metric *m,
                          pg_err *err)
{
    if (n > PG_METRIC_COUNT) n = PG_METRIC_COUNT;
    for (int i = 0; name != NULL && i < n; i++)
        if (strcmp(name, metrics[i].name) == 0) {
            *m = (pg_metric)i;
            return PG_OK;
        }
    char list[METRIC_LIST_MAX];
    pg_metric_list(list, sizeof list, n);
    return pg_fail(err, PG_ERR_USAGE, "%s: '%s' is not one of %s", what,
                   name != NULL ? name : "", list);
}
