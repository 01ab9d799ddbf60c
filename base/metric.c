/* metric.c: the metric names, kinds and polarity (see metric.h). */
#include "metric.h"

#include <stdio.h>
#include <string.h>

/* Room for the list of names in pg_metric_parse's message. */
#define METRIC_LIST_MAX 160

static const struct {
    const char *name;
    pg_metric_kind kind;
} metrics[PG_METRIC_COUNT] = {
    [PG_METRIC_REL_L2] = {"rel_l2", PG_METRIC_KIND_ERROR},
    [PG_METRIC_MAX_ABS] = {"max_abs", PG_METRIC_KIND_ERROR},
    [PG_METRIC_MEAN_ABS] = {"mean_abs", PG_METRIC_KIND_ERROR},
    [PG_METRIC_P99_ABS] = {"p99_abs", PG_METRIC_KIND_ERROR},
    [PG_METRIC_COS_SIM] = {"cos_sim", PG_METRIC_KIND_COSINE},
    [PG_METRIC_SQNR_DB] = {"sqnr_db", PG_METRIC_KIND_DB},
    [PG_METRIC_NAN_COUNT] = {"nan_count", PG_METRIC_KIND_ERROR},
    [PG_METRIC_INF_COUNT] = {"inf_count", PG_METRIC_KIND_ERROR},
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
