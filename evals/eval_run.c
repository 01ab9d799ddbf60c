/* eval_run.c: replay or live eval runs, stored (live: batched on a writer thread), then scored. */
#include "eval_run.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "db/eval_store.h"
#include "db/eval_writer.h"
#include "score.h"
#include "base/clock.h"
#include "base/note.h"
#include "base/variant.h"

/* FNV-1a 64-bit (Fowler, Noll, Vo), offset basis and prime as published. */
#define FNV64_OFFSET 0xcbf29ce484222325ull
#define FNV64_PRIME 0x100000001b3ull
/* Seeds stay below this (a 32-bit signed seed on the server). */
#define EVAL_SEED_MODULUS 2147483648ull

/* Longest reason kept for a recorded completion that cannot be graded. */
#define EVAL_REASON_MAX 256
/* Most (mode, effort) groups one run scores. */
#define EVAL_MAX_GROUPS (EVAL_MAX_MODES * EVAL_MAX_EFFORTS)

/* A sample row from a grading result and what the server or trace said. */
static eval_sample_row graded_row(const char *eval, const char *mode, const char *effort,
                                   const eval_problem *p, int sample, const char *content,
                                   const char *finish_reason, grade_extractor ex)
{
    const grade_result g = grade_completion(content, finish_reason, p->answer, ex);
    eval_sample_row r = {0};
    r.eval = eval;
    r.mode = mode;
    r.effort = effort;
    r.problem_id = p->id;
    r.sample = sample;
    r.status = g.truncated ? EVAL_SAMPLE_TRUNCATED : EVAL_SAMPLE_OK;
    r.attempts = -1;
    r.latency_ms = NAN;
    r.finish_reason = finish_reason;
    r.prompt_tokens = -1;
    r.completion_tokens = -1;
    r.content = content;
    r.has_extracted = g.extracted;
    r.extracted = g.value;
    r.correct = g.correct;
    return r;
}

int64_t eval_sample_seed(int64_t seed_base, const char *id, int sample)
{
    uint64_t h = FNV64_OFFSET;
    for (const unsigned char *p = (const unsigned char *)id; *p != '\0'; p++) {
        h ^= *p;
        h *= FNV64_PRIME;
    }
    return (int64_t)(((uint64_t)seed_base + h + (uint64_t)sample) % EVAL_SEED_MODULUS);
}

pg_status eval_replay(pg_store *s, int64_t run_id, const eval_traces *t,
                      const eval_run_options *o, eval_run_counts *c, pg_err *err)
{
    memset(c, 0, sizeof *c);
    int64_t total = 0;
    for (int i = 0; i < t->n; i++) total += t->problems[i].n_completions;
    if (total == 0)
        return pg_fail(err, PG_ERR_FORMAT, "%s: --replay needs recorded completions, and no "
                                           "problem has any", t->path);
    /* Grading is instant: one transaction for the whole replay. */
    pg_status st = store_begin(s, err);
    for (int i = 0; st == PG_OK && i < t->n; i++) {
        const eval_problem *p = &t->problems[i];
        /* A stop signal: the replay is one transaction, so nothing is kept. */
        if (o->client.stop != NULL && *o->client.stop != 0)
            st = pg_fail(err, PG_ERR_INTERRUPTED, "eval: the replay was interrupted at problem "
                                                  "%d of %d; nothing of it was stored", i + 1,
                         t->n);
        for (int j = 0; st == PG_OK && j < p->n_completions; j++) {
            const eval_completion *cp = &p->completions[j];
            eval_sample_row r = graded_row(o->eval_name, cp->mode, cp->effort, p, cp->sample,
                                           cp->content, cp->finish_reason, o->extractor);
            r.completion_tokens = cp->completion_tokens;
            /* The rule of live replies: a recording with no answer and no
             * truncation is an error, never a wrong answer. */
            pg_err what = {0};
            char why[EVAL_REASON_MAX + 128];
            if (grade_gradable(cp->content, cp->finish_reason, "content", &what) != PG_OK) {
                snprintf(why, sizeof why, "%s:%d: the recorded completion (%s, %s, sample %d) %.*s",
                         t->path, p->line, cp->mode, cp->effort, cp->sample, EVAL_REASON_MAX - 1,
                         what.msg);
                r.status = EVAL_SAMPLE_ERROR;
                r.has_extracted = 0;
                r.correct = 0;
                r.error = why;
            }
            st = eval_store_put_sample(s, run_id, &r, err);
            if (st == PG_OK) {
                c->stored++;
                if (r.status == EVAL_SAMPLE_ERROR) c->errors++;
                else if (r.status == EVAL_SAMPLE_TRUNCATED) c->truncated++;
                else c->ok++;
            }
        }
    }
    if (st == PG_OK) st = store_commit(s, err);
    else store_rollback(s);
    return st;
}

/* What the live run's completion callback needs. */
typedef struct live_ctx {
    eval_writer *writer;   /* owns the store while oa_run sends */
    const eval_run_options *o;
    double started;        /* monotonic seconds: when the first request went out */
} live_ctx;

/* Room for why a sample's token ids are unusable. */
#define EVAL_TOKEN_IDS_WHY_MAX 160

/* Why the token ids of resp are unusable, written into why, or NULL when
 * they are usable or absent (a server that does not return them). vLLM's
 * ids must agree with its usage (notes-divergence.md): a count that does
 * not is said, never guessed around. */
static const char *token_ids_check(const oa_response *resp, char *why, size_t size)
{
    if (resp->token_ids_bad) {
        snprintf(why, size, "a token id in the reply is no integer id");
        return why;
    }
    if (resp->prompt_token_ids == NULL && resp->token_ids == NULL) return NULL;
    if (resp->prompt_token_ids == NULL || resp->token_ids == NULL) {
        snprintf(why, size, "the reply has %s but no %s", resp->token_ids ? "token_ids"
                 : "prompt_token_ids", resp->token_ids ? "prompt_token_ids" : "token_ids");
        return why;
    }
    if (resp->prompt_tokens < 0 || resp->completion_tokens < 0) {
        snprintf(why, size, "the reply has no usage to check its token ids against");
        return why;
    }
    if ((long)resp->n_prompt_token_ids != resp->prompt_tokens) {
        snprintf(why, size, "prompt_token_ids has %zu ids, usage.prompt_tokens says %ld",
                 resp->n_prompt_token_ids, resp->prompt_tokens);
        return why;
    }
    if ((long)resp->n_token_ids != resp->completion_tokens) {
        snprintf(why, size, "token_ids has %zu ids, usage.completion_tokens says %ld",
                 resp->n_token_ids, resp->completion_tokens);
        return why;
    }
    return NULL;
}

/* Grades one finished request and hands the sample to the writer thread
 * (which copies it: the response's strings die with this call); draws
 * progress. Runs on the network thread: nothing here waits on SQLite,
 * except when the writer's queue is full (backpressure). */
static pg_status live_done(void *ctx, const oa_request *req, const oa_response *resp,
                           const oa_progress *pr, pg_err *err)
{
    live_ctx *lc = ctx;
    const eval_problem *p = req->user;
    eval_sample_row r = graded_row(lc->o->eval_name, req->mode, req->effort, p, req->sample,
                                   resp->content, resp->finish_reason, lc->o->extractor);
    r.attempts = resp->attempts;
    r.latency_ms = resp->latency_ms;
    r.prompt_tokens = resp->prompt_tokens;
    r.completion_tokens = resp->completion_tokens;
    r.server = resp->server;
    char ids_why[EVAL_TOKEN_IDS_WHY_MAX];
    r.token_ids_error = token_ids_check(resp, ids_why, sizeof ids_why);
    if (r.token_ids_error == NULL && resp->outcome != OA_ERROR) {
        r.prompt_token_ids = resp->prompt_token_ids;
        r.n_prompt_token_ids = resp->n_prompt_token_ids;
        r.token_ids = resp->token_ids;
        r.n_token_ids = resp->n_token_ids;
    }
    if (resp->outcome == OA_ERROR) {
        r.token_ids_error = NULL;
        /* A failure after every retry is an error, never a wrong answer. */
        r.status = EVAL_SAMPLE_ERROR;
        r.has_extracted = 0;
        r.correct = 0;
        r.error = resp->error;
    }
    pg_status st = eval_writer_put(lc->writer, &r, err);
    if (st != PG_OK) return st;
    char what[96];
    const double elapsed = pg_clock_mono_s() - lc->started;
    int n = snprintf(what, sizeof what, "%.2f/s, %d err, %d retries",
                     elapsed > 0 ? pr->done / elapsed : 0.0, pr->errors, pr->retries);
    if (pr->servers_out > 0 && n > 0 && (size_t)n < sizeof what)
        snprintf(what + n, sizeof what - (size_t)n, ", %d servers out", pr->servers_out);
    pg_note_progress_step(lc->o->notes, pr->done, what);
    return PG_OK;
}

/* Sends reqs with a writer thread storing the samples, then flushes it:
 * what the writer holds is stored even when oa_run stopped early. A writer
 * failure outranks a stop signal; any other earlier failure keeps its place
 * (a writer failure that stopped oa_run is already in err). Fills c's sample
 * counts from what was committed. */
static pg_status run_with_writer(pg_store *s, int64_t run_id, oa_endpoint **live, int n_live,
                                 oa_request *reqs, size_t n_reqs, const eval_run_options *o,
                                 eval_run_counts *c, pg_err *err)
{
    eval_writer *w = NULL;
    pg_status st = eval_writer_start(s, run_id, &o->writer, &w, err);
    if (st != PG_OK) return st;
    live_ctx lc = {w, o, pg_clock_mono_s()};
    pg_note_progress_begin(o->notes, (int64_t)n_reqs);
    st = oa_run(live, n_live, reqs, (int)n_reqs, live_done, &lc, err);
    pg_note_progress_end(o->notes);
    eval_writer_counts wc;
    pg_err werr = {0};
    const pg_status wst = eval_writer_finish(w, &wc, &werr);
    /* The batch a failed write lost must be reported: the run is failed,
     * not merely interrupted. */
    if (wst != PG_OK && (st == PG_OK || st == PG_ERR_INTERRUPTED)) {
        pg_err_clear(err);
        st = pg_fail(err, wst, "%s", werr.msg);
    }
    c->stored += wc.stored;
    c->ok += wc.ok;
    c->truncated += wc.truncated;
    c->errors += wc.errors;
    return st;
}

/* The distinct modes of o's servers, in the order first given, into modes
 * (*nm of them); mode_of[i]: server i's index in modes. PG_ERR_USAGE past
 * EVAL_MAX_MODES. */
static pg_status distinct_modes(const eval_run_options *o, const char **modes, int *nm,
                                int *mode_of, pg_err *err)
{
    *nm = 0;
    for (int i = 0; i < o->n_endpoints; i++) {
        int m = 0;
        while (m < *nm && strcmp(modes[m], o->modes[i]) != 0) m++;
        if (m == *nm) {
            if (*nm == EVAL_MAX_MODES)
                return pg_fail(err, PG_ERR_USAGE, "eval: more than %d modes", EVAL_MAX_MODES);
            modes[(*nm)++] = o->modes[i];
        }
        mode_of[i] = m;
    }
    return PG_OK;
}

/* Room for what two servers' identities share, in a warning. */
#define EVAL_MATCH_MAX 2048

/* Says through o->notes, once per two servers of different modes given the
 * same base URL once normalised (oa_url_normalise), that the comparison
 * would be of a server with itself; marks each such pair in same_url. */
static void warn_same_url(const eval_run_options *o,
                          bool same_url[EVAL_MAX_SERVERS][EVAL_MAX_SERVERS])
{
    char norm[EVAL_MAX_SERVERS][OA_URL_MAX];
    for (int i = 0; i < o->n_endpoints; i++)
        if (oa_url_normalise(o->urls[i], norm[i], sizeof norm[i]) != 0) norm[i][0] = '\0';
    for (int i = 0; i < o->n_endpoints; i++)
        for (int j = i + 1; j < o->n_endpoints; j++) {
            same_url[i][j] = norm[i][0] != '\0' && strcmp(o->modes[i], o->modes[j]) != 0 &&
                             strcmp(norm[i], norm[j]) == 0;
            if (same_url[i][j])
                pg_note_warning(o->notes,
                                "modes %s (%s) and %s (%s) are given the same server URL (%s); "
                                "the comparison is of a server with itself",
                                o->modes[i], o->urls[i], o->modes[j], o->urls[j], norm[i]);
        }
}

/* Says through o->notes, once per two contacted servers of different modes
 * not already warned of in same_url, that they report the same model and
 * server identity (oa_identity_match). Asks each server's /version once
 * (oa_server_identity). PG_ERR_NOMEM only. */
static pg_status warn_same_identity(const eval_run_options *o, oa_endpoint **eps,
                                    bool same_url[EVAL_MAX_SERVERS][EVAL_MAX_SERVERS],
                                    pg_err *err)
{
    oa_identity id[EVAL_MAX_SERVERS] = {{0}};
    pg_status st = PG_OK;
    for (int i = 0; st == PG_OK && i < o->n_endpoints; i++)
        if (eps[i] != NULL) st = oa_server_identity(eps[i], &id[i], err);
    char what[EVAL_MATCH_MAX];
    for (int i = 0; st == PG_OK && i < o->n_endpoints; i++)
        for (int j = i + 1; j < o->n_endpoints; j++)
            if (eps[i] != NULL && eps[j] != NULL && !same_url[i][j] &&
                strcmp(o->modes[i], o->modes[j]) != 0 &&
                oa_identity_match(&id[i], &id[j], what, sizeof what))
                pg_note_warning(o->notes,
                                "modes %s (%s) and %s (%s) report the same model and server "
                                "identity (%s); if they are one server the comparison is of a "
                                "server with itself",
                                o->modes[i], o->urls[i], o->modes[j], o->urls[j], what);
    return st;
}

/* Opens, awaits and asks the model of every server of a needed mode, all
 * within one shared ready deadline; the model of each (NULL: not contacted)
 * into models, and the opened ones into live[*n_live]. Every server of a
 * mode must serve one model (PG_ERR_USAGE naming both). */
static pg_status open_servers(const eval_run_options *o, const oa_options *client,
                              const int *mode_of, const int *needed, oa_endpoint **eps,
                              char **models, oa_endpoint **live, int *n_live, pg_err *err)
{
    pg_status st = PG_OK;
    const double end = pg_clock_mono_s() + o->ready_deadline_s;
    for (int i = 0; st == PG_OK && i < o->n_endpoints; i++) {
        if (!needed[mode_of[i]]) continue;
        st = oa_endpoint_open(o->modes[i], o->urls[i], o->api_key_env, o->api_key, client,
                              &eps[i], err);
        const double left = end - pg_clock_mono_s();
        if (st == PG_OK) st = oa_wait_ready(eps[i], left > 0 ? left : 0, err);
        if (st == PG_OK) st = oa_model_name(eps[i], &models[i], err);
        if (st == PG_OK) live[(*n_live)++] = eps[i];
        for (int j = 0; st == PG_OK && j < i; j++)
            if (mode_of[j] == mode_of[i] && models[j] != NULL && strcmp(models[j], models[i]))
                st = pg_fail(err, PG_ERR_USAGE,
                             "eval: mode %s: %s serves '%s' but %s serves '%s'; the servers of "
                             "one mode must serve one model", o->modes[i], o->urls[j], models[j],
                             o->urls[i], models[i]);
    }
    return st;
}

pg_status eval_live(pg_store *s, int64_t run_id, const eval_traces *t,
                    const eval_run_options *o, eval_run_counts *c, pg_err *err)
{
    memset(c, 0, sizeof *c);
    const int K = o->samples, ne = o->n_efforts, ns = o->n_endpoints;
    if (ns < 1 || ne < 1 || K < 1 || ns > EVAL_MAX_SERVERS)
        return pg_fail(err, PG_ERR_USAGE, "eval: needs one to %d --endpoint, one effort and "
                                          "one sample", EVAL_MAX_SERVERS);
    const char *modes[EVAL_MAX_MODES];
    int nm = 0, mode_of[EVAL_MAX_SERVERS];
    pg_status st = distinct_modes(o, modes, &nm, mode_of, err);
    if (st != PG_OK) return st;
    oa_endpoint *eps[EVAL_MAX_SERVERS] = {NULL};
    char *models[EVAL_MAX_SERVERS] = {NULL};
    /* The planned samples, and which of them a resumed run still lacks:
     * worked out before any server is asked for anything. */
    const size_t n_plan = (size_t)nm * (size_t)ne * (size_t)t->n * (size_t)K;
    eval_key *plan = calloc(n_plan ? n_plan : 1, sizeof *plan);
    size_t *missing = calloc(n_plan ? n_plan : 1, sizeof *missing);
    if (plan == NULL || missing == NULL)
        st = pg_fail(err, PG_ERR_NOMEM, "eval: cannot plan %zu samples", n_plan);
    size_t n_missing = 0;
    if (st == PG_OK) {
        size_t i = 0;
        for (int m = 0; m < nm; m++)
            for (int e = 0; e < ne; e++)
                for (int p = 0; p < t->n; p++)
                    for (int k = 0; k < K; k++)
                        plan[i++] = (eval_key){modes[m], o->efforts[e], t->problems[p].id, k};
        st = eval_store_missing(s, run_id, o->eval_name, plan, n_plan, missing, &n_missing, err);
    }
    /* Only the servers of modes that have work are waited for. */
    int needed[EVAL_MAX_MODES] = {0};
    for (size_t r = 0; st == PG_OK && r < n_missing; r++)
        needed[missing[r] / ((size_t)K * (size_t)t->n * (size_t)ne)] = 1;
    /* Taken-out and back-in-service notes go where progress goes. */
    oa_options client = o->client;
    if (client.notes == NULL) client.notes = o->notes;
    oa_endpoint *live[EVAL_MAX_SERVERS];
    int n_live = 0;
    /* A copy-paste slip (one server for two modes) is said at once, before
     * the wait for the servers; one under two names once they answered. A
     * warning only: the run goes on. */
    bool same_url[EVAL_MAX_SERVERS][EVAL_MAX_SERVERS];
    memset(same_url, 0, sizeof same_url);
    if (st == PG_OK) warn_same_url(o, same_url);
    if (st == PG_OK)
        st = open_servers(o, &client, mode_of, needed, eps, models, live, &n_live, err);
    if (st == PG_OK) st = warn_same_identity(o, eps, same_url, err);
    if (st == PG_OK && o->before_send != NULL)
        st = o->before_send(o->before_send_ctx, (const char *const *)models, err);
    /* Each mode's model, for its request bodies: that of its first server. */
    const char *mode_model[EVAL_MAX_MODES] = {NULL};
    for (int i = ns - 1; i >= 0; i--)
        if (models[i] != NULL) mode_model[mode_of[i]] = models[i];
    oa_request *reqs = NULL;
    if (st == PG_OK && n_missing > 0) {
        reqs = calloc(n_missing, sizeof *reqs);
        if (reqs == NULL) st = pg_fail(err, PG_ERR_NOMEM, "eval: cannot allocate requests");
    }
    for (size_t r = 0; st == PG_OK && r < n_missing; r++) {
        const size_t i = missing[r];
        const int k = (int)(i % (size_t)K), p = (int)(i / (size_t)K % (size_t)t->n);
        const int e = (int)(i / ((size_t)K * (size_t)t->n) % (size_t)ne);
        const int m = (int)(i / ((size_t)K * (size_t)t->n * (size_t)ne));
        oa_sampling sp = o->sampling;
        sp.reasoning_effort = o->efforts[e];
        /* The same seed for a (problem, sample) in every mode: paired samples. */
        sp.has_seed = 1;
        sp.seed = eval_sample_seed(o->seed_base, t->problems[p].id, k);
        const eval_problem *pr = &t->problems[p];
        reqs[r] = (oa_request){.mode = modes[m], .effort = o->efforts[e], .problem_id = pr->id,
                               .sample = k, .user = (void *)pr};
        st = oa_build_chat_body(mode_model[m], pr->messages_json, pr->problem, &sp,
                                &reqs[r].body_json, err);
    }
    c->skipped = (int64_t)(n_plan - n_missing);
    if (st == PG_OK && n_missing > 0)
        st = run_with_writer(s, run_id, live, n_live, reqs, n_missing, o, c, err);
    for (size_t r = 0; reqs != NULL && r < n_missing; r++) free(reqs[r].body_json);
    free(reqs);
    free(plan);
    free(missing);
    for (int i = 0; i < ns; i++) {
        free(models[i]);
        oa_endpoint_close(eps[i]);
    }
    return st;
}

/* One scored (mode, effort). */
typedef struct scored_group {
    char *mode, *effort;
    eval_table table;
    eval_score score;
} scored_group;

/* Baseline first, then the rest by name. */
static int mode_order(const char *a, const char *b)
{
    const int ba = strcmp(a, PG_MODE_BASELINE_NAME) == 0, bb = strcmp(b, PG_MODE_BASELINE_NAME) == 0;
    if (ba != bb) return bb - ba;
    return strcmp(a, b);
}

/* The distinct (mode, effort) groups stored for (run_id, eval), ordered. */
static pg_status list_groups(pg_store *s, int64_t run_id, const char *eval, scored_group *g,
                             int *n, pg_err *err)
{
    *n = 0;
    eval_group_stored *rows = NULL;
    size_t n_rows = 0;
    pg_status st = eval_store_read_groups(s, run_id, eval, &rows, &n_rows, err);
    if (st == PG_OK && n_rows > (size_t)EVAL_MAX_GROUPS)
        st = pg_fail(err, PG_ERR_USAGE, "eval: more than %d (mode, effort) groups",
                     EVAL_MAX_GROUPS);
    /* The strings move into g (the caller frees them), also after a failure. */
    for (size_t i = 0; i < n_rows && *n < EVAL_MAX_GROUPS; i++) {
        g[*n].mode = rows[i].mode;
        g[*n].effort = rows[i].effort;
        rows[i].mode = rows[i].effort = NULL;
        (*n)++;
    }
    eval_store_groups_free(rows, n_rows);
    /* Insertion sort: efforts together, the baseline first within each. */
    for (int i = 1; st == PG_OK && i < *n; i++)
        for (int j = i; j > 0; j--) {
            const int c = strcmp(g[j - 1].effort, g[j].effort);
            if (c < 0 || (c == 0 && mode_order(g[j - 1].mode, g[j].mode) <= 0)) break;
            scored_group tmp = g[j - 1];
            g[j - 1] = g[j];
            g[j] = tmp;
        }
    return st;
}

/* "n/a" for NaN, else v with fmt, into buf. */
static const char *num_or_na(char *buf, size_t len, const char *fmt, double v)
{
    if (isnan(v)) snprintf(buf, len, "n/a");
    else snprintf(buf, len, fmt, v);
    return buf;
}

/* Prints one group's line of the summary ("n/a" where a value is undefined). */
static void print_group(FILE *out, const scored_group *g)
{
    const eval_score *sc = &g->score;
    char acc[16], lo[16], hi[16], se[16];
    fprintf(out, "%-10s %-8s %8s  [%5s, %5s] %6s %8zu %6zu %6zu", g->mode, g->effort,
            num_or_na(acc, sizeof acc, "%.3f", sc->accuracy),
            num_or_na(lo, sizeof lo, "%.3f", sc->ci_low),
            num_or_na(hi, sizeof hi, "%.3f", sc->ci_high),
            num_or_na(se, sizeof se, "%.3f", sc->se), sc->n_scored, sc->n_errors,
            sc->n_truncated);
    for (size_t k = 0; k < sc->k; k++) {
        char v[16];
        fprintf(out, " pass@%zu %s", k + 1, num_or_na(v, sizeof v, "%.3f", sc->pass_at[k]));
    }
    fputc('\n', out);
}

/* Prints one pair's line of the summary: "no pairs" when no problem was
 * scored in both modes, "n/a" for what one problem leaves undefined, and
 * a note when the design cannot reach significance (score.h). */
static void print_pair(FILE *out, const char *effort, const char *a, const char *b,
                       const eval_pair *pr)
{
    if (pr->n_problems == 0) {
        fprintf(out, "%-8s %s - %s: no pairs (no problem scored in both modes; %zu left out)\n",
                effort, a, b, pr->n_dropped);
        return;
    }
    char se[16], lo[16], hi[16], mde[16];
    fprintf(out, "%-8s %s - %s: %+.3f  SE %s  [%s, %s]  %zu/%zu/%zu  p %.3g  MDE %s  (%zu "
                 "problems)", effort, a, b, pr->mean_diff, num_or_na(se, sizeof se, "%.3f", pr->se),
            num_or_na(lo, sizeof lo, "%+.3f", pr->ci_low),
            num_or_na(hi, sizeof hi, "%+.3f", pr->ci_high), pr->wins, pr->losses, pr->ties,
            pr->sign_p, num_or_na(mde, sizeof mde, "%.3f", pr->mde), pr->n_problems);
    if (pr->min_sign_p > EVAL_ALPHA)
        fprintf(out, "  cannot reach p < %.2f: the smallest sign-test p with %zu problems is %.3g",
                EVAL_ALPHA, pr->n_problems, pr->min_sign_p);
    fputc('\n', out);
}

/* When some mode of (run_id, eval) was served by several servers, prints
 * how many samples each server answered (and how many ended an error
 * there); nothing otherwise, so a run of one server per mode prints as
 * before. */
static pg_status print_servers(pg_store *s, int64_t run_id, const char *eval, FILE *out,
                               pg_err *err)
{
    eval_server_count *sv = NULL;
    size_t n = 0;
    const pg_status st = eval_store_read_server_counts(s, run_id, eval, &sv, &n, err);
    int several = 0;
    for (size_t i = 1; st == PG_OK && i < n; i++)
        several = several || strcmp(sv[i].mode, sv[i - 1].mode) == 0;
    if (several) fprintf(out, "servers (samples answered, errors):\n");
    for (size_t i = 0; several && i < n; i++)
        fprintf(out, "%-10s %s  %lld answered, %lld errors\n", sv[i].mode, sv[i].server,
                (long long)sv[i].answered, (long long)sv[i].errors);
    eval_store_server_counts_free(sv, n);
    return st;
}

pg_status eval_score_all(pg_store *s, int64_t run_id, const char *eval, FILE *out, pg_err *err)
{
    scored_group g[EVAL_MAX_GROUPS];
    memset(g, 0, sizeof g);
    int n = 0;
    pg_status st = list_groups(s, run_id, eval, g, &n, err);
    if (st == PG_OK && n == 0)
        st = pg_fail(err, PG_ERR_USAGE, "eval: run %lld stored no samples for '%s'",
                     (long long)run_id, eval);
    if (st == PG_OK)
        fprintf(out, "eval %s, run %lld (avg@K; 95%% percentile bootstrap over problems; SE "
                     "clustered by problem)\n%-10s %-8s %8s  %-14s %6s %8s %6s %6s\n",
                eval, (long long)run_id, "mode", "effort", "accuracy", "95% CI", "SE", "problems",
                "errors", "trunc");
    for (int i = 0; st == PG_OK && i < n; i++) {
        st = eval_store_load(s, run_id, eval, g[i].mode, g[i].effort, 0, &g[i].table, err);
        if (st == PG_OK) st = eval_score_compute(&g[i].table, &g[i].score, err);
        if (st == PG_OK) st = eval_store_put_score(s, run_id, eval, g[i].mode, g[i].effort,
                                                   &g[i].score, err);
        if (st == PG_OK) print_group(out, &g[i]);
    }
    /* Pairs within an effort: every mode against the baseline (A - B); without
     * a baseline, each mode against the first. */
    int printed_header = 0;
    for (int i = 0; st == PG_OK && i < n; i++) {
        if (i > 0 && strcmp(g[i].effort, g[i - 1].effort) == 0) continue; /* i: first of effort */
        for (int j = i + 1; st == PG_OK && j < n && strcmp(g[j].effort, g[i].effort) == 0; j++) {
            eval_pair pr;
            st = eval_pair_compute(&g[j].table, &g[i].table, &pr, err);
            if (st == PG_OK)
                st = eval_store_put_pair(s, run_id, eval, g[i].effort, g[j].mode, g[i].mode, &pr,
                                         err);
            if (st != PG_OK) break;
            if (!printed_header) {
                fprintf(out, "paired, same problems (A - B): mean diff, SE, 95%% CI, wins/losses/"
                             "ties of A, exact sign test, smallest detectable drop (80%% power, "
                             "from the design)\n");
                printed_header = 1;
            }
            print_pair(out, g[i].effort, g[j].mode, g[i].mode, &pr);
        }
    }
    if (st == PG_OK) st = print_servers(s, run_id, eval, out, err);
    for (int i = 0; i < n; i++) {
        free(g[i].mode);
        free(g[i].effort);
        eval_table_free(&g[i].table);
        eval_score_free(&g[i].score);
    }
    return st;
}
