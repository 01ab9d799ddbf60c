/* eval_lifecycle.c: an eval run's lifecycle (eval_lifecycle.h): the use case behind `precgate eval`. */
#include "eval_lifecycle.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* qsort order of C strings. */
static int by_name(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Adds the distinct names of names[0..n-1] (n <= EVAL_MAX_SERVERS), sorted
 * (their order defines nothing), as array key: a mode with several servers
 * is listed once. */
static void add_sorted_names(cJSON *o, const char *key, const char *const *names, int n)
{
    const char *sorted[EVAL_MAX_SERVERS > EVAL_MAX_EFFORTS ? EVAL_MAX_SERVERS : EVAL_MAX_EFFORTS];
    memcpy(sorted, names, (size_t)n * sizeof *sorted);
    qsort(sorted, (size_t)n, sizeof *sorted, by_name);
    cJSON *arr = cJSON_AddArrayToObject(o, key);
    for (int i = 0; i < n; i++)
        if (i == 0 || strcmp(sorted[i], sorted[i - 1]) != 0)
            cJSON_AddItemToArray(arr, cJSON_CreateString(sorted[i]));
}

/* mode's servers as the config records them under "endpoints": its URL
 * when it has one (what runs have always recorded, so older runs read the
 * same), else the array of its URLs in the order given. NULL when out of
 * memory. */
static cJSON *mode_endpoints(const eval_run_options *o, const char *mode)
{
    int n = 0, first = -1;
    for (int i = 0; i < o->n_endpoints; i++)
        if (strcmp(o->modes[i], mode) == 0 && n++ == 0) first = i;
    if (n == 1) return cJSON_CreateString(o->urls[first]);
    cJSON *arr = cJSON_CreateArray();
    for (int i = 0; arr != NULL && i < o->n_endpoints; i++)
        if (strcmp(o->modes[i], mode) == 0 &&
            !cJSON_AddItemToArray(arr, cJSON_CreateString(o->urls[i]))) {
            cJSON_Delete(arr);
            arr = NULL;
        }
    return arr;
}

/* The run's configuration (never the API key itself): what eval_resume.h
 * compares on --resume, plus what is only informative (traces path, URLs,
 * --model, api_key_env). "models" stays empty until the servers answer
 * (eval_before_send). NULL when out of memory. */
static cJSON *eval_config_json(const eval_lifecycle_request *a, const char *traces_digest)
{
    cJSON *o = cJSON_CreateObject();
    if (o == NULL) return NULL;
    cJSON_AddNumberToObject(o, RUN_CONFIG_CONFIG_VERSION, EVAL_CONFIG_VERSION);
    cJSON_AddStringToObject(o, RUN_CONFIG_TRACES, a->traces);
    cJSON_AddStringToObject(o, RUN_CONFIG_TRACES_DIGEST, traces_digest);
    cJSON_AddStringToObject(o, RUN_CONFIG_EVAL, a->o.eval_name);
    cJSON_AddStringToObject(o, RUN_CONFIG_SOURCE, a->replay ? "replay" : "live");
    cJSON_AddStringToObject(o, RUN_CONFIG_EXTRACTOR, grade_extractor_name(a->o.extractor));
    if (a->limit > 0) cJSON_AddNumberToObject(o, RUN_CONFIG_LIMIT, (double)a->limit);
    if (!a->replay) {
        cJSON_AddStringToObject(o, RUN_CONFIG_PROMPT_TEMPLATE, oa_prompt_template());
        add_sorted_names(o, RUN_CONFIG_MODES, a->o.modes, a->o.n_endpoints);
        cJSON *eps = cJSON_AddObjectToObject(o, RUN_CONFIG_ENDPOINTS);
        for (int i = 0; i < a->o.n_endpoints; i++)
            if (!cJSON_HasObjectItem(eps, a->o.modes[i]))
                cJSON_AddItemToObject(eps, a->o.modes[i], mode_endpoints(&a->o, a->o.modes[i]));
        cJSON_AddObjectToObject(o, RUN_CONFIG_MODELS);
        add_sorted_names(o, RUN_CONFIG_EFFORTS, a->o.efforts, a->o.n_efforts);
        cJSON_AddNumberToObject(o, RUN_CONFIG_SAMPLES, a->o.samples);
        cJSON_AddNumberToObject(o, RUN_CONFIG_TEMPERATURE, a->o.sampling.temperature);
        if (a->o.sampling.top_p >= 0) cJSON_AddNumberToObject(o, RUN_CONFIG_TOP_P, a->o.sampling.top_p);
        else cJSON_AddNullToObject(o, RUN_CONFIG_TOP_P);  /* the server's default */
        /* A string: a 64-bit seed does not fit a JSON number (a double) exactly. */
        char seed[32];
        snprintf(seed, sizeof seed, "%llu", (unsigned long long)a->o.seed_base);
        cJSON_AddStringToObject(o, RUN_CONFIG_SEED, seed);
        if (a->o.sampling.max_tokens > 0)
            cJSON_AddNumberToObject(o, RUN_CONFIG_MAX_TOKENS, (double)a->o.sampling.max_tokens);
        else cJSON_AddNullToObject(o, RUN_CONFIG_MAX_TOKENS);  /* the server's default */
        if (a->o.client.model) cJSON_AddStringToObject(o, RUN_CONFIG_EVAL_MODEL, a->o.client.model);
        if (a->o.api_key_env) cJSON_AddStringToObject(o, RUN_CONFIG_API_KEY_ENV, a->o.api_key_env);
    }
    return o;
}

/* Makes t the problems of part a->shard (shard_problems) and records the
 * part in the config now: "job" (a->job, else the default key over now's
 * defining fields), "shard" and "shard_problems", the ids it owns. */
static pg_status eval_shard(eval_lifecycle_request *a, eval_traces *t, cJSON *now, pg_err *err)
{
    if (a->job == NULL) {
        if (shard_default_job(now, a->shard.count, a->job_buf, err) != PG_OK) return err->code;
        a->job = a->job_buf;
    }
    const char **ids = calloc((size_t)t->n + 1, sizeof *ids);
    unsigned char *keep = calloc((size_t)t->n + 1, 1);
    pg_status st = ids != NULL && keep != NULL ? PG_OK
                                               : pg_fail(err, PG_ERR_NOMEM, "eval: out of memory");
    for (int i = 0; st == PG_OK && i < t->n; i++) ids[i] = t->problems[i].id;
    if (st == PG_OK) st = shard_problems(ids, t->n, a->shard, keep, err);
    if (st == PG_OK) {
        shard_config_add(now, a->job, a->shard);
        cJSON *owned = cJSON_AddArrayToObject(now, RUN_CONFIG_SHARD_PROBLEMS);
        for (int i = 0; owned != NULL && i < t->n; i++)
            if (keep[i]) cJSON_AddItemToArray(owned, cJSON_CreateString(ids[i]));
        traces_keep_marked(t, keep);
    }
    free(ids);
    free(keep);
    return st;
}

/* What a resume of a part must repeat: its place in the sharded job. */
static const resume_field eval_shard_fields[] = {
    {"shard", "--shard"},
    {"job", "--job"},
};

/* What eval_before_send needs: the run, whether this process holds it yet. */
typedef struct eval_session {
    pg_store *store;
    int64_t run_id;
    const eval_lifecycle_request *a;
    cJSON *config;   /* new run: this command's; resume: the run's stored config */
    int taken;       /* the run is this process's (begun, or reopened) */
    int plan_added;  /* resume: the run's config lacked "plan", added from this command's */
} eval_session;

/* Stores es->config as the run's config_json. */
static pg_status store_config(eval_session *es, pg_err *err)
{
    char *text = cJSON_PrintUnformatted(es->config);
    if (text == NULL) return pg_fail(err, PG_ERR_NOMEM, "eval: out of memory");
    const pg_status st = store_run_set_config(es->store, es->run_id, text, err);
    free(text);
    return st;
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
    cJSON *stored_models = cJSON_GetObjectItemCaseSensitive(es->config, RUN_CONFIG_MODELS);
    int added = 0;
    pg_status st = eval_resume_check_models(es->run_id, stored_models, o->n_endpoints, o->modes,
                                            models, &added, err);
    if (st == PG_OK && !es->taken) {
        st = store_run_reopen(es->store, es->run_id, "eval", es->a->force, err);
        if (st == PG_OK) es->taken = 1;
    }
    /* Servers do not define the run (one may come back on another port, a
     * mode may get more of them): the stored config names where each mode
     * was served last, so --output and `runs --json` say where this resume
     * sent. */
    int moved = 0;
    cJSON *eps = cJSON_GetObjectItemCaseSensitive(es->config, RUN_CONFIG_ENDPOINTS);
    for (int m = 0; st == PG_OK && cJSON_IsObject(eps) && m < o->n_endpoints; m++) {
        const cJSON *was = cJSON_GetObjectItemCaseSensitive(eps, o->modes[m]);
        cJSON *now = mode_endpoints(o, o->modes[m]);
        if (now == NULL) {
            st = pg_fail(err, PG_ERR_NOMEM, "eval: out of memory");
        } else if (was != NULL && cJSON_Compare(was, now, 1)) {
            cJSON_Delete(now);
        } else {
            if (was != NULL) cJSON_ReplaceItemInObjectCaseSensitive(eps, o->modes[m], now);
            else cJSON_AddItemToObject(eps, o->modes[m], now);
            moved = 1;
        }
    }
    if (st == PG_OK && (added || moved || es->plan_added)) st = store_config(es, err);
    return st;
}

/* Resume: refuses, before any server is contacted, a run that is not a
 * resumable eval or whose definition differs; es->config gets its config. */
static pg_status check_resume(eval_session *es, const cJSON *now, pg_err *err)
{
    store_run_state rs;
    pg_status st = store_run_read(es->store, es->run_id, &rs, err);
    if (st != PG_OK) return st;
    st = store_run_resumable(es->store, &rs, "eval", es->a->force, err);
    if (st == PG_OK) st = eval_resume_check_config(es->run_id, rs.config_json, now, err);
    if (st == PG_OK && (es->config = cJSON_Parse(rs.config_json)) == NULL)
        st = pg_fail(err, PG_ERR_NOMEM, "eval: out of memory");
    if (st == PG_OK)
        st = resume_check_fields("eval", es->run_id, es->config, now, eval_shard_fields,
                                 sizeof eval_shard_fields / sizeof eval_shard_fields[0], err);
    /* A run started before runs recorded their plan gets this command's: the
     * checks above proved the same traces and grid (run_complete.h). */
    const cJSON *plan = cJSON_GetObjectItemCaseSensitive(now, RUN_CONFIG_PLAN);
    if (st == PG_OK && plan != NULL && !cJSON_HasObjectItem(es->config, RUN_CONFIG_PLAN)) {
        if (!cJSON_AddItemToObject(es->config, "plan", cJSON_Duplicate(plan, 1)))
            st = pg_fail(err, PG_ERR_NOMEM, "eval: out of memory");
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
    *now = st == PG_OK ? eval_config_json(rq, digest) : NULL;
    if (st == PG_OK && *now == NULL) st = pg_fail(err, PG_ERR_NOMEM, "eval: out of memory");
    /* What the run must hold when whole (run_complete.h), over every problem. */
    if (st == PG_OK) st = run_complete_add_eval_plan(*now, t, err);
    *n_planned = t->n;
    if (st == PG_OK && rq->shard.count > 0) st = eval_shard(rq, t, *now, err);
    if (st != PG_OK) return st;
    if (rq->resume > 0) {
        es->run_id = rq->resume;
        return check_resume(es, *now, err);
    }
    es->config = *now;
    *now = NULL;
    char *config = cJSON_PrintUnformatted(es->config);
    char host[EVAL_HOST_MAX];
    store_this_host(host, sizeof host);
    const store_run_info info = {"eval", rq->label, PRECGATE_GIT_REV, host,
                                 rq->replay ? "replay" : "openai-compatible servers", config};
    st = config != NULL ? store_run_begin(es->store, &info, &es->run_id, err)
                        : pg_fail(err, PG_ERR_NOMEM, "eval: out of memory");
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
        char *config = cJSON_PrintUnformatted(es->config);
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
    eval_session es = {NULL, -1, rq, NULL, 0, 0};
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
    cJSON_Delete(es.config);
    store_close(es.store);
    traces_free(t);
    return st;
}
