/*
 * test_metric_table.c: base/metric.c's accessor table against the members
 * of pg_metric_values named here by hand, and the store's writer and
 * readers, which take their column lists from that table, against the
 * layer_metrics columns read back by name.
 *
 *   Every member gets a value no other member has, set through the member
 *   itself (not the table); each pg_metric must read back its own member's
 *   value and name. A table row pointing at the wrong member (two rows
 *   swapped) fails here.
 */
#include "base/metric.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "db/report_store.h"
#include "db/sql_util.h"
#include "db/store.h"
#include "reports/diff.h"
#include "testutil.h"

/* Each metric's name and the value the test gives its member (all distinct,
 * none of them a value an out-of-range read could give). */
static const struct {
    pg_metric m;
    const char *name;
    double want;
} expected[] = {
    {PG_METRIC_REL_L2, "rel_l2", 0.125},   {PG_METRIC_MAX_ABS, "max_abs", 2.5},
    {PG_METRIC_MEAN_ABS, "mean_abs", 0.375}, {PG_METRIC_P99_ABS, "p99_abs", 1.75},
    {PG_METRIC_COS_SIM, "cos_sim", 0.96875}, {PG_METRIC_SQNR_DB, "sqnr_db", 41.5},
    {PG_METRIC_NAN_COUNT, "nan_count", 7},  {PG_METRIC_INF_COUNT, "inf_count", 11},
};
#define N_EXPECTED (sizeof expected / sizeof expected[0])

/* The values of expected, set member by member. */
static pg_metric_values distinct_values(void)
{
    pg_metric_values v;
    memset(&v, 0, sizeof v);
    v.rel_l2 = 0.125;
    v.max_abs = 2.5;
    v.mean_abs = 0.375;
    v.p99_abs = 1.75;
    v.cos_sim = 0.96875;
    v.sqnr_db = 41.5;
    v.nan_count = 7;
    v.inf_count = 11;
    return v;
}

static void setup(void)
{
    tu_scratch_setup();
}

TestSuite(metric_table, .init = setup, .fini = tu_scratch_teardown);

Test(metric_table, every_metric_reads_its_own_member)
{
    cr_assert_eq(N_EXPECTED, PG_METRIC_COUNT, "a metric the test does not know");
    const pg_metric_values v = distinct_values();
    for (size_t i = 0; i < N_EXPECTED; i++) {
        const pg_metric m = expected[i].m;
        cr_expect_str_eq(pg_metric_name(m), expected[i].name);
        cr_expect_eq(pg_metric_value(&v, m), expected[i].want, "%s: got %g, want %g",
                     expected[i].name, pg_metric_value(&v, m), expected[i].want);
        if (pg_metric_is_count(m))
            cr_expect_eq(pg_metric_count(&v, m), (int64_t)expected[i].want, "%s",
                         expected[i].name);
        else
            cr_expect_eq(pg_metric_count(&v, m), 0, "%s is no count", expected[i].name);
    }
    cr_expect_eq(pg_metric_nonfinite(&v), 18);
}

Test(metric_table, the_setters_write_only_their_member)
{
    for (size_t i = 0; i < N_EXPECTED; i++) {
        pg_metric_values v;
        memset(&v, 0, sizeof v);
        const pg_metric m = expected[i].m;
        if (pg_metric_is_count(m)) {
            pg_metric_set_count(&v, m, (int64_t)expected[i].want);
            pg_metric_set_value(&v, m, 99.0);  /* a no-op on a count */
        } else {
            pg_metric_set_value(&v, m, expected[i].want);
            pg_metric_set_count(&v, m, 99);    /* a no-op on a value */
        }
        /* Read back through the members themselves: only m's is set. */
        const double got[] = {v.rel_l2,  v.max_abs, v.mean_abs,         v.p99_abs,
                              v.cos_sim, v.sqnr_db, (double)v.nan_count, (double)v.inf_count};
        for (size_t j = 0; j < N_EXPECTED; j++)
            cr_expect_eq(got[j], j == i ? expected[i].want : 0.0, "set %s, member %s is %g",
                         expected[i].name, expected[j].name, got[j]);
    }
}

Test(metric_table, the_values_come_first_then_the_counts)
{
    for (int m = 0; m < PG_METRIC_COUNT; m++)
        cr_expect_eq(pg_metric_is_count((pg_metric)m), m >= PG_METRIC_VALUE_COUNT, "%s",
                     pg_metric_name((pg_metric)m));
    cr_expect_eq(pg_metric_kind_of(PG_METRIC_COS_SIM), PG_METRIC_KIND_COSINE);
    cr_expect_eq(pg_metric_kind_of(PG_METRIC_SQNR_DB), PG_METRIC_KIND_DB);
}

Test(metric_table, out_of_range_reads_nothing_and_writes_nothing)
{
    pg_metric_values v = distinct_values();
    cr_expect(isnan(pg_metric_value(&v, PG_METRIC_COUNT)));
    cr_expect(isnan(pg_metric_value(&v, (pg_metric)-1)));
    cr_expect_eq(pg_metric_count(&v, PG_METRIC_COUNT), 0);
    cr_expect_eq(pg_metric_is_count(PG_METRIC_COUNT), 0);
    pg_metric_set_value(&v, PG_METRIC_COUNT, 5.0);
    pg_metric_set_count(&v, (pg_metric)-1, 5);
    const pg_metric_values same = distinct_values();
    cr_expect_eq(memcmp(&v, &same, sizeof v), 0);
}

/* Opens a new store named name in the scratch directory into *s and begins
 * a sweep run in it; returns the run's id. */
static int64_t open_run(const char *name, pg_store **s)
{
    pg_err err = {0};
    cr_assert_eq(store_open(tu_in_dir(name), s, &err), PG_OK, "%s", err.msg);
    const store_run_info info = {.kind = "sweep"};
    int64_t run = 0;
    cr_assert_eq(store_run_begin(*s, &info, &run, &err), PG_OK, "%s", err.msg);
    return run;
}

Test(metric_table, the_store_round_trips_every_metric_column_by_name)
{
    pg_store *s = NULL;
    pg_err err = {0};
    const int64_t run = open_run("m.db", &s);
    const pg_metric_values v = distinct_values();
    cr_assert_eq(store_put_layer_metrics(s, run, "c", 3, -1, "bf16", "cpu", &v, &err), PG_OK,
                 "%s", err.msg);

    /* Every metric has a column of its name holding its value. */
    sqlite3 *db = store_handle(s);
    for (size_t i = 0; i < N_EXPECTED; i++) {
        cr_expect_eq(tu_sql_int(db, "SELECT count(*) FROM pragma_table_info('layer_metrics') "
                                    "WHERE name = '%s'", expected[i].name), 1,
                     "layer_metrics has no column %s", expected[i].name);
        cr_expect_eq(tu_sql_double(db, "SELECT %s FROM layer_metrics", expected[i].name),
                     expected[i].want, "column %s", expected[i].name);
        if (pg_metric_is_count(expected[i].m))
            cr_expect_eq(tu_sql_int(db, "SELECT typeof(%s) = 'integer' FROM layer_metrics",
                                    expected[i].name), 1, "%s is stored as an INTEGER",
                         expected[i].name);
    }

    /* Both readers give every metric back by enum. */
    layer_metric_row *rows = NULL;
    size_t n = 0;
    cr_assert_eq(report_store_layer_metrics(s, run, &rows, &n, &err), PG_OK, "%s", err.msg);
    cr_assert_eq(n, 1);
    for (size_t i = 0; i < N_EXPECTED; i++)
        cr_expect_eq(pg_metric_value(&rows[0].v, expected[i].m), expected[i].want, "%s",
                     expected[i].name);
    cr_expect_str_eq(rows[0].capture, "c");
    cr_expect_eq(rows[0].layer, 3);
    cr_expect_eq(rows[0].head, -1);
    layer_metric_rows_free(rows, n);
    cr_assert_eq(report_store_whole_layers(s, run, "bf16", &rows, &n, &err), PG_OK, "%s",
                 err.msg);
    cr_assert_eq(n, 1);
    cr_expect_eq(memcmp(&rows[0].v, &v, sizeof v), 0);
    layer_metric_rows_free(rows, n);
    store_close(s);
}

Test(metric_table, the_store_refuses_a_nan_in_every_value_but_cos_sim)
{
    pg_store *s = NULL;
    pg_err err = {0};
    const int64_t run = open_run("n.db", &s);
    for (int m = 0; m < PG_METRIC_VALUE_COUNT; m++) {
        pg_metric_values v = distinct_values();
        pg_metric_set_value(&v, (pg_metric)m, NAN);
        err = (pg_err){0};
        const pg_status st = store_put_layer_metrics(s, run, "c", m, -1, "bf16", "cpu", &v, &err);
        if (m == PG_METRIC_COS_SIM) {
            cr_expect_eq(st, PG_OK, "%s", err.msg);
            cr_expect_eq(tu_sql_int(store_handle(s), "SELECT cos_sim IS NULL FROM layer_metrics "
                                                     "WHERE layer = %d", m), 1);
        } else {
            char said[64];
            snprintf(said, sizeof said, "): %s is NaN", pg_metric_name((pg_metric)m));
            cr_expect_eq(st, PG_ERR_NUMERIC, "%s", pg_metric_name((pg_metric)m));
            cr_expect(strstr(err.msg, said) != NULL, "%s", err.msg);
        }
    }
    store_close(s);
}

Test(metric_table, the_diff_formats_follow_each_metric_s_kind)
{
    /* The formats each metric had when reports/diff.c listed them by hand. */
    static const struct {
        pg_metric m;
        const char *value, *delta;
    } want[] = {
        {PG_METRIC_REL_L2, "%.4e", "%+.3e"},   {PG_METRIC_MAX_ABS, "%.4e", "%+.3e"},
        {PG_METRIC_MEAN_ABS, "%.4e", "%+.3e"}, {PG_METRIC_P99_ABS, "%.4e", "%+.3e"},
        {PG_METRIC_COS_SIM, "%.9f", "%+.3e"},  {PG_METRIC_SQNR_DB, "%.3f", "%+.3f"},
        {PG_METRIC_NAN_COUNT, "%.0f", "%+.0f"}, {PG_METRIC_INF_COUNT, "%.0f", "%+.0f"},
    };
    cr_assert_eq(sizeof want / sizeof want[0], PG_METRIC_COUNT);
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        cr_expect_str_eq(diff_metric_value_fmt(want[i].m), want[i].value, "%s",
                         pg_metric_name(want[i].m));
        cr_expect_str_eq(diff_metric_delta_fmt(want[i].m), want[i].delta, "%s",
                         pg_metric_name(want[i].m));
    }
    cr_expect_str_eq(diff_metric_value_fmt(PG_METRIC_COUNT), "%g");
    cr_expect_str_eq(diff_metric_delta_fmt(PG_METRIC_COUNT), "%+g");
}
