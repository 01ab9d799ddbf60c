/* eval_lifecycle.c: an eval run's lifecycle (eval_lifecycle.h): the use case behind `precgate eval`. */
#include "eval_lifecycle.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "db/eval_config.h"
#include "db/eval_store.h"
#include "db/run_config.h"
#include "db/store.h"
#include "evals/traces.h"
#include "harness/eval_resume.h"
#include "harness/interrupt.h"
#include "harness/run_complete.h"
#include "reports/eval_results.h"
#include "reports/term.h"

#ifndef PRECGATE_GIT_REV
#define PRECGATE_GIT_REV "unknown"
#endif

/* Longest host description. */
#define EVAL_HOST_MAX 256

/* The traces' file name without directory and extension, into buf. */
static void default_eval_name(const char *path, char *buf, size_t len)
{
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    snprintf(buf, len, "%s", base);
    char *dot = strrchr(buf, '.');
    if (dot != NULL && dot != buf) *dot = '\0';
}

/* This command's config and what it borrows that is not the request's. */
typedef struct eval_config_now {
    eval_run_config c;
    eval_config_pair endpoints[EVAL_MAX_SERVERS];  /* (mode, URL) of each server */
    const char **plan_names;                       /* a replay's plan (owned) */
} eval_config_now;

/* The run's configuration (never the API key itself) into n: what
 * eval_resume.h compares on --resume, plus what is only informative (traces
 * path, URLs, --model, api_key_env). Its models stay unknown until the
 * servers answer (eval_before_send). */
static void eval_config_of(const eval_lifecycle_request *a, const char *traces_digest,
                           eval_config_now *n)
{
    eval_run_config *c = &n->c;
    *c = (eval_run_config){.config_version = EVAL_CONFIG_VERSION,
                           .traces = a->traces,
                           .traces_digest = traces_digest,
                           .eval = a->o.eval_name,
                           .replay = a->replay,
                           .extractor = grade_extractor_name(a->o.extractor),
                           .limit = (int)a->limit};
    if (a->replay) return;
    c->prompt_template = oa_prompt_template();
    c->modes = a->o.modes;
    c->n_modes = a->o.n_endpoints;
    for (int i = 0; i < a->o.n_endpoints; i++)
        n->endpoints[i] = (eval_config_pair){a->o.modes[i], a->o.urls[i]};
    c->endpoints = n->endpoints;
    c->n_endpoints = a->o.n_endpoints;
    c->efforts = a->o.efforts;
    c->n_efforts = a->o.n_efforts;
    c->samples = a->o.samples;
    c->temperature = a->o.sampling.temperature;
    c->top_p = a->o.sampling.top_p;
    c->seed = (unsigned long long)a->o.seed_base;
    c->max_tokens = a->o.sampling.max_tokens;
    c->model = a->o.client.model;
    c->api_key_env = a->o.api_key_env;
}

/* Makes t the problems of part a->shard (shard_problems) and records the
 * part in the config: "job" (a->job, else the default key over *now's
 * defining fields), "shard" and "shard_problems", the ids it owns; *now is
 * then written again from n. */
static pg_status eval_shard(eval_lifecycle_request *a, eval_traces *t, eval_config_now *n,
                            cJSON **now, pg_err *err)
{
    if (a->job == NULL) {
        if (shard_default_job(*now, a->shard.count, a->job_buf, err) != PG_OK) return err->code;
        a->job = a->job_buf;
    }
    const char **ids = calloc((size_t)t->n + 1, sizeof *ids);
    unsigned char *keep = calloc((size_t)t->n + 1, 1);
    pg_status st = ids != NULL && keep != NULL ? PG_OK
                                               : pg_fail(err, PG_ERR_NOMEM, "eval: out of memory");
    for (int i = 0; st == PG_OK && i < t->n; i++) ids[i] = t->problems[i].id;
    if (st == PG_OK) st = shard_problems(ids, t->n, a->shard, keep, err);
    if (st == PG_OK) {
        int owned = 0;
        for (int i = 0; i < t->n; i++)
            if (keep[i]) ids[owned++] = ids[i];
        n->c.part = (run_config_part){.job = a->job, .index = a->shard.index,
                                      .count = a->shard.count};
        n->c.shard_problems = ids;
        n->c.n_shard_problems = owned;
        cJSON_Delete(*now);
        *now = eval_config_write(&n->c);
        n->c.shard_problems = NULL;  /* ids go below */
        if (*now == NULL) st = pg_fail(err, PG_ERR_NOMEM, "eval: out of memory");
    }
    if (st == PG_OK) traces_keep_marked(t, keep);
    free(ids);
    free(keep);
    return st;
}

/* What a resume of a part must repeat: its place in the sharded job. */
static const resume_field eval_shard_fields[] = {
    {RUN_CONFIG_SHARD, "--shard"},
    {RUN_CONFIG_JOB, "--job"},
};

/* What eval_before_send needs: the run, whether this process holds it yet. */
typedef struct eval_session {
    pg_store *store;
    int64_t run_id;
    const eval_lifecycle_request *a;
    eval_config_doc config;  /* new run: this command's; resume: the run's stored config */
    int taken;       /* the run is this process's (begun, or reopened) */
    int plan_added;  /* resume: the run's config lacked "plan", added from this command's */
} eval_session;

/* Stores es->config as the run's config_json. */
static pg_status store_config(eval_session *es, pg_err *err)
{
    char *text = cJSON_PrintUnformatted(es->config.tree);
    if (text == NULL) return pg_fail(err, PG_ERR_NOMEM, "eval: out of memory");
    const pg_status st = store_run_set_config(es->store, es->run_id, text, err);
    free(text);
    return st;
}

/* Whether mode is among pairs p[0 .. n-1]. */
static int has_mode(const eval_config_pair *p, int n, const char *mode)
{
    for (int i = 0; i < n; i++)
        if (p[i].mode != NULL && strcmp(p[i].mode, mode) == 0) return 1;
    return 0;
}

/* Whether mode's values in a[0 .. na-1] and b[0 .. nb-1] are the same, in order. */
static int same_servers(const eval_config_pair *a, int na, const eval_config_pair *b, int nb,
                        const char *mode)
{
    int i = 0, j = 0;
    for (;;) {
        while (i < na && (a[i].mode == NULL || strcmp(a[i].mode, mode) != 0)) i++;
        while (j < nb && (b[j].mode == NULL || strcmp(b[j].mode, mode) != 0)) j++;
        if (i == na || j == nb) return i == na && j == nb;
        if (a[i].value == NULL || b[j].value == NULL || strcmp(a[i].value, b[j].value) != 0)
            return 0;
        i++;
        j++;
    }
}

/* Where each mode is served now (now[0 .. n_now-1]) over the stored
 * servers had[0 .. n_had-1], into merged (room for both): a stored mode
 * served now gets its servers of now in its place, the others stay, the
 * new modes follow. Returns whether anything moved. */
static int merge_servers(const eval_config_pair *had, int n_had, const eval_config_pair *now,
                         int n_now, eval_config_pair *merged, int *n_merged)
{
    int moved = 0;
    *n_merged = 0;
    for (int i = 0; i < n_had; i++) {
        const char *mode = had[i].mode;
        if (!has_mode(now, n_now, mode)) {
            merged[(*n_merged)++] = had[i];
        } else if (!has_mode(had, i, mode)) {
            moved |= !same_servers(had, n_had, now, n_now, mode);
            for (int j = 0; j < n_now; j++)
                if (strcmp(now[j].mode, mode) == 0) merged[(*n_merged)++] = now[j];
        }
    }
    for (int j = 0; j < n_now; j++)
        if (!has_mode(had, n_had, now[j].mode)) {
            merged[(*n_merged)++] = now[j];
            moved = 1;
        }
    return moved;
}

/* eval_run_options.before_send: a new run records its servers' models; a
 * resume compares them with the run's and only then takes the run (so a
 * refused resume leaves it exactly as it was). */
static pg_status eval_before_send(void *ctx, const char *const *models, pg_err *err)
{
    eval_session *es = ctx;
    const eval_run_options *o = &es->a->o;
    /* A signal while the servers were awaited: a resume leaves the run alone. */
    if (o->client.stop != NULL && *o->client.stop != 0)
        return pg_fail(err, PG_ERR_INTERRUPTED, "eval: interrupted before anything was sent");
    const eval_run_config *had = &es->config.c;
    eval_config_pair *served = calloc((size_t)had->n_models + (size_t)o->n_endpoints + 1,
                                      sizeof *served);
    eval_config_pair *where = calloc((size_t)had->n_endpoints + (size_t)o->n_endpoints + 1,
                                     sizeof *where);
    eval_config_pair now[EVAL_MAX_SERVERS];
    for (int i = 0; i < o->n_endpoints; i++) now[i] = (eval_config_pair){o->modes[i], o->urls[i]};
    int n_served = 0, n_where = 0, added = 0;
    pg_status st = served != NULL && where != NULL
                       ? eval_resume_check_models(es->run_id, had, o->n_endpoints, o->modes,
                                                  models, served, &n_served, &added, err)
                       : pg_fail(err, PG_ERR_NOMEM, "eval: out of memory");
    if (st == PG_OK && !es->taken) {
        st = store_run_reopen(es->store, es->run_id, "eval", es->a->force, err);
        if (st == PG_OK) es->taken = 1;
    }
    /* Servers do not define the run (one may come back on another port, a
     * mode may get more of them): the stored config names where each mode
     * was served last, so --output and `runs --json` say where this resume
     * sent. */
    const int moved = st == PG_OK && had->endpoints_known &&
                      merge_servers(had->endpoints, had->n_endpoints, now, o->n_endpoints, where,
                                    &n_where);
    const char *keys[2];
    int n_keys = 0;
    eval_run_config updated = *had;
    if (added) {
        updated.models = served;
        updated.n_models = n_served;
        keys[n_keys++] = RUN_CONFIG_MODELS;
    }
    if (moved) {
        updated.endpoints = where;
        updated.n_endpoints = n_where;
        keys[n_keys++] = RUN_CONFIG_ENDPOINTS;
    }
    if (st == PG_OK && n_keys > 0)
        st = eval_config_doc_update(&es->config, &updated, keys, n_keys, err);
    if (st == PG_OK && (added || moved || es->plan_added)) st = store_config(es, err);
    free(served);
    free(where);
    return st;
}

/* Resume: refuses, before any server is contacted, a run that is not a
 * resumable eval or whose definition differs; es->config gets its config.
 * now: this command's config, c its fields. */
static pg_status check_resume(eval_session *es, const cJSON *now, const eval_run_config *c,
                              pg_err *err)
{
    store_run_state rs;
    pg_status st = store_run_read(es->store, es->run_id, &rs, err);
    if (st != PG_OK) return st;
    st = store_run_resumable(es->store, &rs, "eval", es->a->force, err);
    /* A config that does not read is refused below, as one without config_version. */
    pg_err unread = {0};
    if (st == PG_OK && eval_config_read(rs.config_json, &es->config, &unread) == PG_ERR_NOMEM)
        st = pg_fail(err, PG_ERR_NOMEM, "eval: out of memory");
    if (st == PG_OK) st = eval_resume_check_config(es->run_id, &es->config, now, err);
    if (st == PG_OK)
        st = resume_check_fields("eval", es->run_id, es->config.tree, now, eval_shard_fields,
                                 sizeof eval_shard_fields / sizeof eval_shard_fields[0], err);
    /* A run started before runs recorded their plan gets this command's: the
     * checks above proved the same traces and grid (run_complete.h). */
    if (st == PG_OK && !es->config.c.plan_known) {
        eval_run_config with_plan = es->config.c;
        with_plan.plan_known = 1;
        with_plan.plan_problems = c->plan_problems;
        with_plan.plan_modes = c->plan_modes;
        with_plan.n_plan_modes = c->n_plan_modes;
        with_plan.plan_efforts = c->plan_efforts;
        with_plan.n_plan_efforts = c->n_plan_efforts;
        with_plan.plan_samples = c->plan_samples;
        const char *const keys[] = {RUN_CONFIG_PLAN};
        st = eval_config_doc_update(&es->config, &with_plan, keys, 1, err);
        es->plan_added = st == PG_OK;
    }
    store_run_state_free(&rs);
    return st;
}

/* Opens the store and makes es's run from t (the problems after --limit;
 * n_in_file before it): the config of this command (now, with the plan over
 * every problem, then a shard's part of t), then a new run begun, or the run
 * to resume checked against now (es->config its stored config, *now kept
 * for the caller to free). *n_planned: the problems before a part kept its own. */
static pg_status eval_begin(eval_lifecycle_request *rq, eval_session *es, eval_traces *t,
                            cJSON **now, int *n_planned, pg_err *err)
{
    char digest[TRACES_DIGEST_MAX];
    pg_status st = traces_digest(t, digest, sizeof digest, err);
    if (st == PG_OK) st = store_open(rq->db_path, &es->store, err);
    eval_config_now cfg;
    eval_config_of(rq, digest, &cfg);
    /* What the run must hold when whole (run_complete.h), over every problem. */
    cfg.plan_names = NULL;
    if (st == PG_OK) st = run_complete_eval_plan(&cfg.c, t, &cfg.plan_names, err);
    *now = st == PG_OK ? eval_config_write(&cfg.c) : NULL;
    if (st == PG_OK && *now == NULL) st = pg_fail(err, PG_ERR_NOMEM, "eval: out of memory");
    *n_planned = t->n;
    if (st == PG_OK && rq->shard.count > 0) st = eval_shard(rq, t, &cfg, now, err);
    if (st == PG_OK && rq->resume > 0) {
        es->run_id = rq->resume;
        st = check_resume(es, *now, &cfg.c, err);
        free(cfg.plan_names);
        return st;
    }
    free(cfg.plan_names);
    if (st != PG_OK) return st;
    char *config = cJSON_PrintUnformatted(*now);
    cJSON_Delete(*now);
    *now = NULL;
    st = config != NULL ? eval_config_read(config, &es->config, err)
                        : pg_fail(err, PG_ERR_NOMEM, "eval: out of memory");
    char host[EVAL_HOST_MAX];
    store_this_host(host, sizeof host);
    const store_run_info info = {"eval", rq->label, PRECGATE_GIT_REV, host,
                                 rq->replay ? "replay" : "openai-compatible servers", config};
    if (st == PG_OK) st = store_run_begin(es->store, &info, &es->run_id, err);
    es->taken = st == PG_OK;
    free(config);
    return st;
}

/* Marks es's run (taken by this process) as st and res->stored_errors make
 * it, says how it ended (with res->counts) to rq->out or rq->errs, and
 * writes the results file of a finished run; res->status the mark stored.
 * Returns st, or the first failure of the marking or the results file. */
static pg_status eval_finish(const eval_lifecycle_request *rq, eval_session *es, pg_status st,
                             eval_lifecycle_result *res, pg_err *err)
{
    const long long id = (long long)es->run_id;
    const eval_run_counts *c = &res->counts;
    const int64_t stored_errors = res->stored_errors;
    /* A resumed run that fails keeps what it had: incomplete, not failed. */
    char why[PG_ERR_MSG_MAX];
    snprintf(why, sizeof why, "interrupted by %s", interrupt_signal_name(interrupt_signal()));
    const char *status = st == PG_ERR_INTERRUPTED ? "interrupted"
                         : st != PG_OK ? (rq->resume > 0 ? "incomplete" : "failed")
                         : stored_errors > 0 ? "incomplete"
                                             : "complete";
    pg_err fin = {0};
    const pg_status fst = store_run_finish(es->store, es->run_id, status,
                                           st == PG_ERR_INTERRUPTED ? why
                                           : st != PG_OK ? err->msg : NULL, &fin);
    if (fst == PG_OK) res->status = status;
    if (fst != PG_OK && st == PG_OK) {
        *err = fin;
        st = fin.code;
    }
    if (fst != PG_OK) {
        term_printf(rq->errs, "precgate: run %lld could not be marked %s: %s\n", id, status,
                    fin.msg);
    } else if (st == PG_ERR_INTERRUPTED && rq->replay) {
        term_printf(rq->errs, "precgate: run %lld %s: nothing was stored (a replay is one "
                              "transaction); run the replay again\n", id, why);
    } else if (st == PG_ERR_INTERRUPTED) {
        term_printf(rq->errs, "precgate: run %lld %s: %lld samples stored now, %lld were there "
                              "already; the requests in flight were dropped. precgate eval "
                              "--resume %lld with the same options continues it\n",
                    id, why, (long long)c->stored, (long long)c->skipped, id);
    } else if (st == PG_OK && stored_errors > 0 && rq->replay) {
        term_printf(rq->out, "run %lld incomplete: %lld recorded completions have no answer to "
                             "grade (excluded from the scores; eval_samples.error says which)\n",
                    id, (long long)stored_errors);
    } else if (st == PG_OK && stored_errors > 0) {
        term_printf(rq->out, "run %lld incomplete: %lld samples failed after every retry "
                             "(excluded from the scores); precgate eval --resume %lld retries "
                             "them\n", id, (long long)stored_errors, id);
    } else if (st == PG_OK) {
        term_printf(rq->out, "run %lld complete: %s (%lld samples stored, %lld already there)\n",
                    id, rq->db_path, (long long)c->stored, (long long)c->skipped);
    } else {
        term_printf(rq->errs, "precgate: run %lld marked %s in %s\n", id, status, rq->db_path);
    }
    /* The results file says what the store says once the run is finished;
     * failing to write it fails the command, not the stored run. */
    if (st == PG_OK && rq->output != NULL) {
        char *config = cJSON_PrintUnformatted(es->config.tree);
        st = config != NULL ? eval_results_write_json(es->store, es->run_id, rq->o.eval_name,
                                                      status, config, rq->output, err)
                            : pg_fail(err, PG_ERR_NOMEM, "eval: out of memory");
        free(config);
        if (st == PG_OK)
            term_printf(rq->out, "results: wrote %s (run %lld, %s)\n", rq->output, id, status);
    }
    return st;
}

pg_status eval_lifecycle_run(eval_lifecycle_request *rq, eval_lifecycle_result *res, pg_err *err)
{
    *res = (eval_lifecycle_result){.run_id = -1};
    if (rq->o.eval_name == NULL) {
        default_eval_name(rq->traces, rq->name_buf, sizeof rq->name_buf);
        rq->o.eval_name = rq->name_buf;
    }
    eval_traces *t = NULL;
    if (traces_load(rq->traces, &t, err) != PG_OK) return err->code;
    const int n_in_file = t->n;
    if (rq->limit > 0) traces_keep_first(t, (int)rq->limit);
    eval_session es = {NULL, -1, rq, {0}, 0, 0};
    cJSON *now = NULL;
    int n_planned = t->n;
    pg_status st = eval_begin(rq, &es, t, &now, &n_planned, err);
    rq->o.before_send = eval_before_send;
    rq->o.before_send_ctx = &es;
    /* A part that owns no problem (more parts than problems) has nothing to
     * send or score: it is complete and empty. */
    const int empty_part = rq->shard.count > 0 && t->n == 0;
    if (st == PG_OK) {
        char limited[64] = "";
        if (n_planned < n_in_file)
            snprintf(limited, sizeof limited, " (first %d of %d)", n_planned, n_in_file);
        if (rq->shard.count > 0)
            term_printf(rq->out, "run %lld: shard %d/%d of job %s: %d of the %d problems\n",
                        (long long)es.run_id, rq->shard.index, rq->shard.count, rq->job, t->n,
                        n_planned);
        term_printf(rq->out, "run %lld: eval %s, %d problems%s, %s\n", (long long)es.run_id,
                    rq->o.eval_name, t->n, limited,
                    rq->replay ? "replay of recorded completions" : "live");
        fflush(rq->out);
        if (!empty_part)
            st = rq->replay ? eval_replay(es.store, es.run_id, t, &rq->o, &res->counts, err)
                            : eval_live(es.store, es.run_id, t, &rq->o, &res->counts, err);
    }
    /* An interrupted run is not scored: its scores would describe part of
     * its plan. They are computed when a resume finishes it. */
    if (st == PG_OK && !empty_part)
        st = eval_score_all(es.store, es.run_id, rq->o.eval_name, rq->out, err);
    /* The run's state comes from what is stored, not from this invocation:
     * a resume that skipped a mode still leaves that mode's errors. */
    if (st == PG_OK)
        st = eval_store_count_errors(es.store, es.run_id, rq->o.eval_name, &res->stored_errors,
                                     err);
    if (es.taken) {
        st = eval_finish(rq, &es, st, res, err);
        res->run_id = es.run_id;
    } else if (rq->resume > 0 && st != PG_OK) {
        term_printf(rq->errs, "precgate: run %lld left as it was (nothing sent to it)\n",
                    (long long)rq->resume);
    }
    rq->o.before_send = NULL;
    rq->o.before_send_ctx = NULL;
    cJSON_Delete(now);
    eval_config_doc_free(&es.config);
    store_close(es.store);
    traces_free(t);
    return st;
}
