/* test_gate_baseline.c: the gate's baseline choice (harness/gate_baseline.h), called directly. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "db/gate_store.h"
#include "db/store.h"
#include "harness/gate_baseline.h"
#include "testutil.h"

TestSuite(gate_baseline, .init = tu_scratch_setup, .fini = tu_scratch_teardown);

/* A store in the scratch directory. */
static pg_store *open_store(void)
{
    pg_store *s = NULL;
    pg_err err = {0};
    cr_assert_eq(store_open(tu_in_dir("b.db"), &s, &err), PG_OK, "%s", err.msg);
    return s;
}

/* A sweep run labelled label with config_json config, left with status. */
static int64_t add_run(pg_store *s, const char *label, const char *config, const char *status)
{
    const store_run_info info = {.kind = "sweep", .label = label, .config_json = config};
    int64_t id = -1;
    pg_err err = {0};
    cr_assert_eq(store_run_begin(s, &info, &id, &err), PG_OK, "%s", err.msg);
    if (status != NULL) cr_assert_eq(store_run_finish(s, id, status, NULL, &err), PG_OK, "%s", err.msg);
    return id;
}

/* Stores one flag of verdict v for run id (its gate's outcome). */
static void gate_as(pg_store *s, int64_t id, gate_verdict v)
{
    gate_flag f = {.scope = GATE_SCOPE_LAYER, .layer = -1, .metric = "rel_l2", .value = NAN,
                   .baseline_value = NAN, .threshold = NAN, .verdict = v, .message = "m"};
    gate_flags flags = {.v = &f, .n = 1};
    pg_err err = {0};
    cr_assert_eq(gate_store_put_flags(s, id, -1, &flags, &err), PG_OK, "%s", err.msg);
}

/* Chooses run id's baseline (spec NULL: automatic), asserting success. */
static gate_baseline_choice choose(pg_store *s, int64_t id, const char *spec)
{
    gate_run run;
    pg_err err = {0};
    cr_assert_eq(gate_store_run(s, id, &run, &err), PG_OK, "%s", err.msg);
    gate_baseline_choice c;
    cr_assert_eq(gate_baseline_choose(s, &run, spec, &c, &err), PG_OK, "%s", err.msg);
    gate_run_free(&run);
    return c;
}

static const char AMAX[] = "{\"scales\":\"amax\",\"variants\":[\"bf16\"]}";
static const char UNIT[] = "{\"scales\":\"unit\",\"variants\":[\"bf16\"]}";

/* The newest older run of the same content that passed beats a newer one
 * that regressed, and a newer one of other content is passed over. */
Test(gate_baseline, automatic_prefers_the_newest_that_passed)
{
    pg_store *s = open_store();
    const int64_t passed = add_run(s, "n", AMAX, "complete");
    gate_as(s, passed, GATE_VERDICT_PASS);
    const int64_t regressed = add_run(s, "n", AMAX, "complete");
    gate_as(s, regressed, GATE_VERDICT_REGRESSION);
    const int64_t other = add_run(s, "n", UNIT, "complete");
    gate_as(s, other, GATE_VERDICT_PASS);
    add_run(s, "other-label", AMAX, "complete");
    const int64_t run = add_run(s, "n", AMAX, "complete");
    gate_baseline_choice c = choose(s, run, NULL);
    cr_assert(c.automatic);
    cr_assert_eq(c.base_id, passed, "baseline %lld, expected %lld", (long long)c.base_id,
                 (long long)passed);
    cr_assert(c.passed);
    store_close(s);
}

/* No older run passed: the newest of the same content, not known good. */
Test(gate_baseline, automatic_falls_back_to_the_newest_of_the_same_content)
{
    pg_store *s = open_store();
    add_run(s, "n", AMAX, "complete");
    const int64_t newer = add_run(s, "n", AMAX, "complete");
    add_run(s, "n", AMAX, "failed");
    const int64_t run = add_run(s, "n", AMAX, "complete");
    gate_baseline_choice c = choose(s, run, NULL);
    cr_assert_eq(c.base_id, newer, "baseline %lld, expected %lld", (long long)c.base_id,
                 (long long)newer);
    cr_assert_not(c.passed);
    store_close(s);
}

/* Only runs of other content: none, naming the newest and the field that differs. */
Test(gate_baseline, automatic_none_names_how_the_newest_differs)
{
    pg_store *s = open_store();
    add_run(s, "n", UNIT, "complete");
    const int64_t newest = add_run(s, "n", UNIT, "complete");
    const int64_t run = add_run(s, "n", AMAX, "complete");
    gate_baseline_choice c = choose(s, run, NULL);
    cr_assert_eq(c.base_id, -1);
    cr_assert_eq(c.newest, newest);
    cr_assert_str_eq(c.differs.field, RUN_CONFIG_SCALES);
    cr_assert_str_eq(c.differs.run_value, "amax");
    cr_assert_str_eq(c.differs.other_value, "unit");
    store_close(s);
}

/* --baseline: kept when its content differs (for the error verdict), and
 * refused when it is the run itself. */
Test(gate_baseline, explicit_keeps_a_mismatch_and_refuses_the_run_itself)
{
    pg_store *s = open_store();
    const int64_t base = add_run(s, "n", UNIT, "complete");
    const int64_t run = add_run(s, "n", AMAX, "complete");
    char spec[32];
    snprintf(spec, sizeof spec, "%lld", (long long)base);
    gate_baseline_choice c = choose(s, run, spec);
    cr_assert_not(c.automatic);
    cr_assert_eq(c.base_id, base);
    cr_assert_str_eq(c.differs.field, RUN_CONFIG_SCALES);
    gate_run r;
    pg_err err = {0};
    cr_assert_eq(gate_store_run(s, run, &r, &err), PG_OK, "%s", err.msg);
    snprintf(spec, sizeof spec, "%lld", (long long)run);
    cr_assert_eq(gate_baseline_choose(s, &r, spec, &c, &err), PG_ERR_USAGE);
    cr_assert(strstr(err.msg, "itself") != NULL, "%s", err.msg);
    cr_assert_eq(c.base_id, -1);
    gate_run_free(&r);
    store_close(s);
}
