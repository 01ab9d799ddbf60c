/*
 * test_lifecycles.c: the eval, gate and merge lifecycles (harness/eval_lifecycle.h,
 * gate_lifecycle.h, merge_lifecycle.h)
 * called directly, without the binary: what they store, decide and say.
 */
#include <criterion/criterion.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "db/store.h"
#include "harness/eval_lifecycle.h"
#include "harness/gate_config.h"
#include "harness/gate_lifecycle.h"
#include "harness/merge_lifecycle.h"
#include "harness/regress.h"
#include "lifecycle_util.h"
#include "testutil.h"

TestSuite(lifecycles, .init = tu_scratch_setup, .fini = tu_scratch_teardown);

/* The shipped demo traces: 12 problems, 3 modes, 3 recorded samples each. */
#define DEMO_TRACES PRECGATE_SOURCE_DIR "/evals/demo/aime-style-demo.jsonl"
#define DEMO_SAMPLES 108

/* A replay of the demo traces into db_path (resume: the run to continue,
 * 0 for a new one), its narrative into *out_text. */
static pg_status replay(const char *db_path, long resume, eval_lifecycle_result *res,
                        char **out_text, pg_err *err)
{
    const lu_eval_opts o = {.resume = resume};
    return lu_replay(DEMO_TRACES, db_path, &o, res, out_text, err);
}

Test(lifecycles, an_eval_replay_stores_every_sample_and_says_its_run)
{
    const char *db_path = strdup(tu_in_dir("e.db"));
    eval_lifecycle_result res;
    pg_err err = {0};
    char *out = NULL;
    cr_assert_eq(replay(db_path, 0, &res, &out, &err), PG_OK, "%s", err.msg);
    cr_assert_eq(res.run_id, 1);
    cr_assert_str_eq(res.status, "complete");
    cr_assert_eq(res.counts.stored, DEMO_SAMPLES);
    cr_assert_eq(res.stored_errors, 0);
    cr_assert(strstr(out, "run 1: eval aime-style-demo, 12 problems, replay of recorded "
                          "completions\n") != NULL, "%s", out);
    cr_assert(strstr(out, "run 1 complete: ") != NULL, "%s", out);
    sqlite3 *db = tu_db_open("e.db");
    cr_assert_eq(tu_sql_int(db, "SELECT count(*) FROM eval_samples WHERE run_id = 1"),
                 DEMO_SAMPLES);
    char *status = tu_sql_text(db, "SELECT status FROM runs WHERE id = 1");
    cr_assert_str_eq(status, "complete");
    free(status);
    sqlite3_close(db);
    free(out);
    free((char *)db_path);
}

/* A recorded completion with no answer (null content, finish_reason stop:
 * not truncated) is an error sample, never a wrong answer, and the replay
 * ends incomplete, saying how many; the graded ones are stored beside it. */
Test(lifecycles, an_eval_replay_with_a_completion_lacking_an_answer_is_incomplete)
{
    static const char traces[] =
        "{\"id\": \"p0\", \"problem\": \"q0\", \"answer\": 1, \"completions\": ["
        "{\"mode\": \"bf16\", \"effort\": \"medium\", \"sample\": 0, \"content\": "
        "\"\\\\boxed{1}\", \"finish_reason\": \"stop\"}, "
        "{\"mode\": \"fp8kv\", \"effort\": \"medium\", \"sample\": 0, \"content\": null, "
        "\"finish_reason\": \"stop\"}]}\n"
        "{\"id\": \"p1\", \"problem\": \"q1\", \"answer\": 2, \"completions\": ["
        "{\"mode\": \"bf16\", \"effort\": \"medium\", \"sample\": 0, \"content\": "
        "\"\\\\boxed{2}\", \"finish_reason\": \"stop\"}, "
        "{\"mode\": \"fp8kv\", \"effort\": \"medium\", \"sample\": 0, \"content\": "
        "\"\\\\boxed{3}\", \"finish_reason\": \"stop\"}]}\n";
    char *path = strdup(tu_in_dir("gap.jsonl"));
    tu_write_file(path, traces, strlen(traces));
    const char *db_path = strdup(tu_in_dir("e.db"));
    eval_lifecycle_result res;
    pg_err err = {0};
    char *out = NULL;
    cr_assert_eq(lu_replay(path, db_path, NULL, &res, &out, &err), PG_OK, "%s", err.msg);
    cr_assert_eq(res.run_id, 1);
    cr_assert_not_null(res.status, "%s", out);
    cr_assert_str_eq(res.status, "incomplete", "%s", out);
    cr_assert_eq(res.stored_errors, 1, "%s", out);
    cr_assert_eq(res.counts.stored, 4);
    cr_assert_eq(res.counts.errors, 1);
    cr_assert_eq(res.counts.ok, 3);
    cr_assert(strstr(out, "run 1 incomplete: 1 recorded completions have no answer to grade")
                  != NULL, "%s", out);
    cr_assert(strstr(out, "run 1 complete") == NULL, "%s", out);
    sqlite3 *db = tu_db_open("e.db");
    cr_assert_eq(tu_sql_int(db, "SELECT count(*) FROM runs WHERE id = 1 AND status = "
                                "'incomplete'"), 1, "the stored run is not incomplete");
    cr_assert_eq(tu_sql_int(db, "SELECT count(*) FROM eval_samples WHERE run_id = 1"), 4);
    cr_assert_eq(tu_sql_int(db, "SELECT count(*) FROM eval_samples WHERE run_id = 1 AND "
                                "problem_id = 'p0' AND mode = 'fp8kv' AND error LIKE "
                                "'%%had no content and finish_reason ''stop''%%'"), 1);
    sqlite3_close(db);
    free(out);
    free((char *)db_path);
    free(path);
}

Test(lifecycles, a_resume_of_a_run_that_does_not_exist_is_refused_and_creates_none)
{
    const char *db_path = strdup(tu_in_dir("e.db"));
    eval_lifecycle_result res;
    pg_err err = {0};
    char *out = NULL;
    cr_assert_eq(replay(db_path, 0, &res, &out, &err), PG_OK, "%s", err.msg);
    free(out);
    out = NULL;
    cr_assert_eq(replay(db_path, 7, &res, &out, &err), PG_ERR_USAGE);
    cr_assert_eq(res.run_id, -1, "no run was taken");
    cr_assert_null(res.status);
    sqlite3 *db = tu_db_open("e.db");
    cr_assert_eq(tu_sql_int(db, "SELECT count(*) FROM runs"), 1);
    sqlite3_close(db);
    free(out);
    free((char *)db_path);
}

/* Gates run in db_path with the default thresholds, its report into *text. */
static pg_status gate(const char *db_path, long run, int require_baseline, gate_result *res,
                      char **text, pg_err *err)
{
    const lu_gate_opts o = {.require_baseline = require_baseline};
    return lu_gate(db_path, run, &o, res, text, err);
}

Test(lifecycles, the_gate_takes_the_older_run_as_baseline_and_requires_one_when_asked)
{
    const char *db_path = strdup(tu_in_dir("e.db"));
    eval_lifecycle_result er;
    gate_result gr;
    pg_err err = {0};
    char *text = NULL;
    for (int i = 0; i < 2; i++) {
        cr_assert_eq(replay(db_path, 0, &er, &text, &err), PG_OK, "%s", err.msg);
        free(text);
        text = NULL;
    }
    /* Run 1 has no older run: CI's --require-baseline makes that an error verdict. */
    cr_assert_eq(gate(db_path, 1, 1, &gr, &text, &err), PG_OK, "%s", err.msg);
    cr_assert_eq(gr.base_id, -1);
    cr_assert_eq(gr.exit_status, GATE_EXIT_ERROR, "%s", text);
    free(text);
    text = NULL;
    /* Run 2 is compared with run 1, the same replayed samples. */
    cr_assert_eq(gate(db_path, 2, 1, &gr, &text, &err), PG_OK, "%s", err.msg);
    cr_assert_eq(gr.base_id, 1, "%s", text);
    cr_assert_gt(gr.n_flags, 0);
    cr_assert(strstr(text, "baseline: run 1 (automatic") != NULL, "%s", text);
    sqlite3 *db = tu_db_open("e.db");
    cr_assert_eq(tu_sql_int(db, "SELECT count(*) FROM flags WHERE run_id = 2"), (long long)gr.n_flags);
    sqlite3_close(db);
    free(text);
    /* A run that does not exist is refused. */
    text = NULL;
    cr_assert_eq(gate(db_path, 9, 0, &gr, &text, &err), PG_ERR_USAGE);
    cr_assert_eq(gr.exit_status, GATE_EXIT_ERROR);
    free(text);
    free((char *)db_path);
}

Test(lifecycles, a_merge_refuses_the_database_it_merges_into_and_writes_nothing)
{
    const char *db_path = strdup(tu_in_dir("m.db"));
    pg_store *s = NULL;
    pg_err err = {0};
    cr_assert_eq(store_open(db_path, &s, &err), PG_OK, "%s", err.msg);
    const char *files[] = {db_path};
    char *said = NULL;
    size_t len = 0;
    FILE *errs = open_memstream(&said, &len);
    const merge_request rq = {.files = files, .n_files = 1, .out = stdout, .errs = errs};
    cr_assert_eq(merge_lifecycle_run(s, db_path, &rq, &err), PG_ERR_USAGE);
    fclose(errs);
    cr_assert(strstr(err.msg, "is the database merged into (--into)") != NULL, "%s", err.msg);
    free(said);
    store_close(s);
    sqlite3 *db = tu_db_open("m.db");
    cr_assert_eq(tu_sql_int(db, "SELECT count(*) FROM runs"), 0);
    sqlite3_close(db);
    free((char *)db_path);
}
