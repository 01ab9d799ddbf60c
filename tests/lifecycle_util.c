/* lifecycle_util.c: the use cases called directly (see lifecycle_util.h). */
#include "lifecycle_util.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "db/store.h"
#include "evals/grade.h"
#include "evals/openai_client.h"
#include "harness/capture/synth.h"
#include "harness/gate_config.h"
#include "harness/regress.h"
#include "harness/sweep.h"
#include "kernels/parallel.h"

/* `precgate run`'s page seed when --seed is not given (0x5EED): runs made
 * here are the runs the CLI makes, so that a resume compares alike. */
#define LU_PAGE_SEED 0x5EEDull

void lu_synth(const char *path, lu_synth_opts o)
{
    pg_err err = {0};
    synth_config cfg;
    cr_assert_eq(synth_preset(o.preset != NULL ? o.preset : "gpt-oss-120b", &cfg, &err), PG_OK,
                 "%s", err.msg);
    if (o.layers > 0) cfg.n_layers = o.layers;
    if (o.seqs > 0) cfg.n_seqs = o.seqs;
    if (o.seq_len > 0) cfg.seq_len = o.seq_len;
    if (o.context > 0) cfg.context = o.context;
    if (o.scales) cfg.write_scales = 1;
    cr_assert_eq(synth_write(&cfg, path, parallel_default_threads(), &err), PG_OK, "synth %s: %s",
                 path, err.msg);
}

/* A text being written, for what a lifecycle says. */
typedef struct lu_text {
    char *buf;
    size_t len;
    FILE *f;
} lu_text;

static void text_open(lu_text *t)
{
    *t = (lu_text){0};
    t->f = open_memstream(&t->buf, &t->len);
    cr_assert_not_null(t->f);
}

/* Closes t, handing its text to *to (freed when to is NULL). */
static void text_close(lu_text *t, char **to)
{
    fclose(t->f);
    if (to != NULL) *to = t->buf;
    else free(t->buf);
}

/* pg_notes' warning: one "warning: " line into the lu_text ctx. */
static void note_warning(void *ctx, const char *text)
{
    fprintf(((lu_text *)ctx)->f, "warning: %s\n", text);
}

pg_status lu_sweep(const char *cap, const char *db_path, const lu_sweep_opts *o,
                   run_sweep_result *res, char **said, pg_err *err)
{
    static const lu_sweep_opts none = {0};
    if (o == NULL) o = &none;
    lu_text t;
    text_open(&t);
    const pg_notes notes = {.warning = note_warning, .ctx = &t};
    const long threads = o->threads > 0 ? o->threads : parallel_default_threads();
    run_sweep_request rq = {.capture = cap, .db_path = db_path, .label = o->label,
                            .threads = threads, .scan_threads = (int)threads,
                            .resume = o->resume > 0 ? o->resume : -1, .force = o->force,
                            .seed = o->given_seed ? o->seed : LU_PAGE_SEED,
                            .given_seed = o->given_seed, .attribute = o->attribute,
                            .given_attribute = o->attribute, .out = t.f, .notes = &notes};
    /* A new run names its backend (the tests never probe for a GPU); a
     * resume takes the run's unless one is given. */
    rq.backend = o->backend != NULL ? o->backend : o->resume > 0 ? "auto" : "cpu";
    rq.given_backend = o->backend != NULL || o->resume <= 0;
    pg_status st = sweep_variants_parse(o->variants != NULL ? o->variants : SWEEP_DEFAULT_VARIANTS,
                                        &rq.variants, err);
    rq.given_variants = o->variants != NULL;
    if (st == PG_OK && o->scales != NULL) {
        st = sweep_scales_parse(o->scales, &rq.scales, err);
        rq.given_scales = 1;
    }
    if (st == PG_OK) st = run_lifecycle_sweep(&rq, res, err);
    else *res = (run_sweep_result){.run_id = -1};
    text_close(&t, said);
    return st;
}

int64_t lu_sweep_ok(const char *cap, const char *db_path, const lu_sweep_opts *o)
{
    run_sweep_result res;
    pg_err err = {0};
    char *said = NULL;
    const pg_status st = lu_sweep(cap, db_path, o, &res, &said, &err);
    cr_assert_eq(st, PG_OK, "sweep of %s: %s\n%s", cap, err.msg, said);
    free(said);
    return res.run_id;
}

void lu_eval_request(eval_lifecycle_request *rq, const char *traces, const char *db_path)
{
    *rq = (eval_lifecycle_request){.traces = traces, .db_path = db_path, .resume = -1};
    rq->o.samples = 1;
    rq->o.ready_deadline_s = 600.0;
    rq->o.client.max_in_flight = 64;
    rq->o.sampling = oa_sampling_default();
    rq->o.sampling.return_token_ids = 1;
    rq->o.extractor = GRADE_DEFAULT;
    rq->o.efforts[0] = "medium";
    rq->o.n_efforts = 1;
}

pg_status lu_eval(eval_lifecycle_request *rq, eval_lifecycle_result *res, char **said,
                  pg_err *err)
{
    lu_text out, errs;
    text_open(&out);
    text_open(&errs);
    rq->out = out.f;
    rq->errs = errs.f;
    const pg_status st = eval_lifecycle_run(rq, res, err);
    rq->out = rq->errs = NULL;
    char *errs_text = NULL;
    text_close(&errs, &errs_text);
    fputs(errs_text, out.f);
    free(errs_text);
    text_close(&out, said);
    return st;
}

pg_status lu_replay(const char *traces, const char *db_path, const lu_eval_opts *o,
                    eval_lifecycle_result *res, char **said, pg_err *err)
{
    static const lu_eval_opts none = {0};
    if (o == NULL) o = &none;
    eval_lifecycle_request rq;
    lu_eval_request(&rq, traces, db_path);
    rq.replay = 1;
    rq.label = o->label;
    rq.limit = o->limit;
    if (o->resume > 0) rq.resume = o->resume;
    return lu_eval(&rq, res, said, err);
}

int64_t lu_replay_ok(const char *traces, const char *db_path, const lu_eval_opts *o, char **said)
{
    eval_lifecycle_result res;
    pg_err err = {0};
    char *text = NULL;
    const pg_status st = lu_replay(traces, db_path, o, &res, &text, &err);
    cr_assert_eq(st, PG_OK, "replay of %s: %s\n%s", traces, err.msg, text);
    cr_assert_eq(res.stored_errors, 0, "replay of %s: %lld samples ungraded\n%s", traces,
                 (long long)res.stored_errors, text);
    if (said != NULL) *said = text;
    else free(text);
    return res.run_id;
}

pg_status lu_gate(const char *db_path, long run, const lu_gate_opts *o, gate_result *res,
                  char **report, pg_err *err)
{
    static const lu_gate_opts none = {0};
    if (o == NULL) o = &none;
    *res = (gate_result){.exit_status = GATE_EXIT_ERROR, .base_id = -1};
    lu_text t;
    text_open(&t);
    gate_config cfg;
    pg_status st = o->config != NULL ? gate_config_load(o->config, &cfg, err)
                                     : (gate_config_default(&cfg), PG_OK);
    pg_store *s = NULL;
    if (st == PG_OK) st = store_open(db_path, &s, err);
    const gate_request rq = {.run = run, .baseline = o->baseline, .config = o->config,
                             .cfg = &cfg, .junit = o->junit,
                             .require_baseline = o->require_baseline, .out = t.f};
    if (st == PG_OK) st = gate_lifecycle_run(s, db_path, &rq, res, err);
    store_close(s);
    text_close(&t, report);
    return st;
}

int lu_gate_exit(const char *db_path, long run, const lu_gate_opts *o, char **report)
{
    gate_result res;
    pg_err err = {0};
    char *text = NULL;
    const pg_status st = lu_gate(db_path, run, o, &res, &text, &err);
    cr_assert_eq(st, PG_OK, "gate of run %ld: %s\n%s", run, err.msg, text);
    if (report != NULL) *report = text;
    else free(text);
    return res.exit_status;
}
