/* merge_lifecycle.c: a merge's lifecycle (merge_lifecycle.h): the use case behind `precgate merge`. */
#include "merge_lifecycle.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "db/diverge_config.h"
#include "db/merge_store.h"
#include "db/run_config.h"
#include "db/store.h"
#include "evals/diverge_run.h"
#include "evals/eval_run.h"
#include "evals/prompt_logprobs.h"
#include "harness/run_complete.h"
#include "harness/shard.h"
#include "reports/divergence_results.h"
#include "reports/term.h"

/* Most missing or given-twice parts one refusal lists before "...". */
#define MERGE_LIST_MAX 20
/* Room for such a list: MERGE_LIST_MAX numbers and their separators. */
#define MERGE_LIST_TEXT (MERGE_LIST_MAX * 8 + 8)
/* Length of the host name recorded with a merged run. */
#define MERGE_HOST_MAX 256

/* qsort order of parts: job, then index, then source. */
static int by_job_index(const void *pa, const void *pb)
{
    const merge_part *a = pa, *b = pb;
    int c = strcmp(a->job, b->job);
    if (c != 0) return c;
    if (a->index != b->index) return a->index < b->index ? -1 : 1;
    return strcmp(a->source, b->source);
}

/* Whether key is one of shard_config_local_keys (may differ between parts). */
static int is_local_key(const char *key)
{
    for (int i = 0; shard_config_local_keys[i] != NULL; i++)
        if (strcmp(key, shard_config_local_keys[i]) == 0) return 1;
    return 0;
}

/* Whether x is an empty "models" object: a live eval part that owns no
 * problem contacts no server, so it records none (db/eval_config.h). */
static int no_models(const cJSON *x)
{
    return x != NULL && strcmp(x->string, RUN_CONFIG_MODELS) == 0 && cJSON_IsObject(x) &&
           x->child == NULL;
}

/* The first key of a's or b's object (parsed configs) outside the local
 * keys whose values differ, or NULL when none does ("models" recorded by
 * only one of them counts as no difference). */
static const char *config_difference(const cJSON *a, const cJSON *b)
{
    const cJSON *sides[2][2] = {{a, b}, {b, a}};
    for (int s = 0; s < 2; s++) {
        const cJSON *x;
        cJSON_ArrayForEach(x, sides[s][0]) {
            if (is_local_key(x->string)) continue;
            const cJSON *y = cJSON_GetObjectItemCaseSensitive(sides[s][1], x->string);
            if (no_models(x) || no_models(y)) continue;
            if (y == NULL || !cJSON_Compare(x, y, 1)) return x->string;
        }
    }
    return NULL;
}

/* Refuses two parts of one job whose configs differ, naming the key and
 * both values (first is the job's first part). */
static pg_status check_config(const merge_part *first, const cJSON *first_cfg,
                              const merge_part *p, pg_err *err)
{
    cJSON *cfg = cJSON_Parse(p->config_json);
    if (cfg == NULL) return pg_fail(err, PG_ERR_NOMEM, "merge: out of memory");
    const char *key = config_difference(first_cfg, cfg);
    pg_status st = PG_OK;
    if (key != NULL) {
        char *va = cJSON_PrintUnformatted(cJSON_GetObjectItemCaseSensitive(first_cfg, key));
        char *vb = cJSON_PrintUnformatted(cJSON_GetObjectItemCaseSensitive(cfg, key));
        st = pg_fail(err, PG_ERR_USAGE, "merge: job %s: shard %lld (%s) and shard %lld (%s) "
                     "differ in config \"%s\": %s vs %s", first->job, (long long)first->index,
                     first->source, (long long)p->index, p->source, key, va ? va : "(none)",
                     vb ? vb : "(none)");
        free(va);
        free(vb);
    }
    cJSON_Delete(cfg);
    return st;
}

/* Refuses a part that is no whole part of a finished run: an index
 * outside its count, a sweep not complete, an eval neither complete nor
 * incomplete (finished, with failed samples excluded). */
static pg_status check_finished(const merge_part *p, pg_err *err)
{
    if (p->count < 1 || p->index < 0 || p->index >= p->count)
        return pg_fail(err, PG_ERR_USAGE, "merge: %s: run %lld of job %s records no shard "
                       "index 0 .. count-1 (config \"shard\")", p->source, (long long)p->run_id,
                       p->job);
    const int is_eval = p->kind != NULL && strcmp(p->kind, "eval") == 0;
    if (p->status != NULL && strcmp(p->status, "complete") == 0) return PG_OK;
    /* An eval is 'incomplete' both when it finished with samples that
     * failed after every retry (whole: each planned sample has its row) and
     * when a --resume of it stopped on an error (cmd_eval.c keeps such a run
     * resumable), which leaves problems without rows: runs.error tells them
     * apart, NULL for the first. */
    if (is_eval && p->status != NULL && strcmp(p->status, "incomplete") == 0 && p->error == NULL)
        return PG_OK;
    return pg_fail(err, PG_ERR_USAGE, "merge: %s: run %lld (job %s, shard %lld/%lld) is %s%s%s%s, "
                   "not a finished part: resume it (precgate %s --resume %lld --db %s, with its "
                   "options) or run the shard again into a fresh database", p->source,
                   (long long)p->run_id, p->job, (long long)p->index, (long long)p->count,
                   p->status ? p->status : "(no status)", p->error ? " (its last run stopped: " : "",
                   p->error ? p->error : "", p->error ? ")" : "",
                   p->kind != NULL && strcmp(p->kind, "diverge") == 0 ? "diverge"
                   : is_eval                                          ? "eval"
                                                                      : "run",
                   (long long)p->run_id, p->source);
}

/* Whether p is a part merge takes (check_finished would pass it). */
static int part_finished(const merge_part *p)
{
    pg_err ignored = {0};
    return check_finished(p, &ignored) == PG_OK;
}

/* Appends n to the list text (at most MERGE_LIST_MAX, then "..."). */
static void list_add(char *text, size_t len, int *listed, long long n)
{
    const size_t at = strlen(text);
    if (*listed < MERGE_LIST_MAX) snprintf(text + at, len - at, "%s%lld", *listed ? ", " : "", n);
    else if (*listed == MERGE_LIST_MAX) snprintf(text + at, len - at, ", ...");
    (*listed)++;
}

/* Checks one job's parts p[0 .. n-1] (sorted by index) as a set: one kind,
 * one count, one config; no index twice; with no earlier merge, every index
 * 0 .. count-1 present. */
static pg_status check_set(const merge_part *p, size_t n, int merged_before, pg_err *err)
{
    cJSON *first_cfg = cJSON_Parse(p[0].config_json);
    if (first_cfg == NULL) return pg_fail(err, PG_ERR_NOMEM, "merge: out of memory");
    pg_status st = PG_OK;
    char twice[MERGE_LIST_TEXT] = "";
    int n_twice = 0;
    for (size_t i = 0; st == PG_OK && i < n; i++) {
        st = check_finished(&p[i], err);
        if (st == PG_OK && p[i].count != p[0].count)
            st = pg_fail(err, PG_ERR_USAGE, "merge: job %s: shard count %lld in %s, %lld in %s",
                         p[0].job, (long long)p[0].count, p[0].source, (long long)p[i].count,
                         p[i].source);
        if (st == PG_OK && strcmp(p[i].kind, p[0].kind) != 0)
            st = pg_fail(err, PG_ERR_USAGE, "merge: job %s: a %s run in %s, a %s run in %s",
                         p[0].job, p[0].kind, p[0].source, p[i].kind, p[i].source);
        if (st == PG_OK && i > 0) st = check_config(&p[0], first_cfg, &p[i], err);
        /* The label is the runs row's, not the config's, and gate baselines
         * and history --label pick runs by it: one job, one label. */
        if (st == PG_OK && (p[i].label == NULL) != (p[0].label == NULL))
            st = pg_fail(err, PG_ERR_USAGE, "merge: job %s: shard %lld (%s) has %s, shard %lld "
                         "(%s) %s", p[0].job, (long long)p[0].index, p[0].source,
                         p[0].label ? "a --label" : "no --label", (long long)p[i].index,
                         p[i].source, p[i].label ? "has one" : "has none");
        if (st == PG_OK && p[i].label != NULL && p[0].label != NULL &&
            strcmp(p[i].label, p[0].label) != 0)
            st = pg_fail(err, PG_ERR_USAGE, "merge: job %s: shard %lld (%s) and shard %lld (%s) "
                         "differ in --label: '%s' vs '%s'", p[0].job, (long long)p[0].index,
                         p[0].source, (long long)p[i].index, p[i].source, p[0].label,
                         p[i].label);
        if (st == PG_OK && i > 0 && p[i].index == p[i - 1].index &&
            (n_twice == 0 || p[i].index != p[i - 2].index))
            list_add(twice, sizeof twice, &n_twice, (long long)p[i].index);
    }
    cJSON_Delete(first_cfg);
    if (st == PG_OK && n_twice > 0)
        st = pg_fail(err, PG_ERR_USAGE, "merge: job %s: shard%s %s of %lld given twice (one "
                     "database per part)", p[0].job, n_twice > 1 ? "s" : "", twice,
                     (long long)p[0].count);
    if (st != PG_OK || merged_before) return st;
    char missing[MERGE_LIST_TEXT] = "";
    int n_missing = 0;
    size_t at = 0;
    for (int64_t k = 0; k < p[0].count; k++) {
        while (at < n && p[at].index < k) at++;
        if (at == n || p[at].index != k) list_add(missing, sizeof missing, &n_missing, (long long)k);
    }
    if (n_missing > 0)
        return pg_fail(err, PG_ERR_USAGE, "merge: job %s: shard%s %s of %lld missing",
                       p[0].job, n_missing > 1 ? "s" : "", missing, (long long)p[0].count);
    return PG_OK;
}

/* A job merged before: every part given must be the one merged then (same
 * index, count and digest), and the merge changes nothing for it. */
static pg_status check_merged(const merge_part *p, size_t n, const merge_recorded *r, size_t nr,
                              pg_err *err)
{
    for (size_t i = 0; i < n; i++) {
        const merge_recorded *m = NULL;
        for (size_t k = 0; k < nr && m == NULL; k++)
            if (r[k].index == p[i].index) m = &r[k];
        if (m == NULL || m->count != p[i].count)
            return pg_fail(err, PG_ERR_USAGE, "merge: job %s was merged as run %lld with %lld "
                           "shards; shard %lld/%lld (%s) is not one of them: a merged job takes "
                           "no parts later (merge the whole set into another database)",
                           p[i].job, (long long)r[0].run_id, (long long)r[0].count,
                           (long long)p[i].index, (long long)p[i].count, p[i].source);
        if (strcmp(m->digest, p[i].digest) != 0)
            return pg_fail(err, PG_ERR_USAGE, "merge: job %s: shard %lld (%s) holds other rows "
                           "than the shard %lld merged as run %lld from %s (digest %s, was %s): "
                           "another execution of the same job key (a GPU sweep or a live eval "
                           "is not bit-reproducible); give each execution its own --job KEY",
                           p[i].job, (long long)p[i].index, p[i].source, (long long)m->index,
                           (long long)m->run_id, m->source, p[i].digest, m->digest);
    }
    return PG_OK;
}

/* The merged run's config_json: that of the part with the most rows (an
 * empty part may lack what the others recorded, e.g. an eval's models),
 * with "shard" replaced
 * by {"count": N} and the part's own layers or problems dropped (caller
 * frees; NULL when out of memory). */
static char *merged_config(const merge_part *first)
{
    cJSON *cfg = cJSON_Parse(first->config_json);
    if (cfg == NULL) return NULL;
    cJSON_DeleteItemFromObjectCaseSensitive(cfg, RUN_CONFIG_SHARD_LAYERS);
    cJSON_DeleteItemFromObjectCaseSensitive(cfg, RUN_CONFIG_SHARD_PROBLEMS);
    cJSON_DeleteItemFromObjectCaseSensitive(cfg, RUN_CONFIG_SHARD_SEQUENCES);
    cJSON *shard = cJSON_CreateObject();
    if (shard != NULL) cJSON_AddNumberToObject(shard, RUN_CONFIG_SHARD_COUNT, (double)first->count);
    if (shard != NULL) cJSON_ReplaceItemInObjectCaseSensitive(cfg, RUN_CONFIG_SHARD, shard);
    char *text = shard != NULL ? cJSON_PrintUnformatted(cfg) : NULL;
    cJSON_Delete(cfg);
    return text;
}

/* Refuses part p when run_id of s (the merged run, p's rows copied into
 * it) lacks a row that p's own layers or problems imply (run_complete.h),
 * or p's config cannot say which: naming p, the missing units and the
 * command that resumes p. */
static pg_status check_part_complete(pg_store *s, const merge_part *p, int64_t run_id,
                                     pg_err *err)
{
    run_missing miss;
    pg_status st = run_complete_check(s, run_id, p->kind, p->config_json, &miss, err);
    if (st != PG_OK || (!miss.unverifiable && miss.n_units == 0)) return st;
    const int is_eval = strcmp(p->kind, "eval") == 0;
    const int is_diverge = strcmp(p->kind, "diverge") == 0;
    const char *units = is_eval ? "problems" : is_diverge ? "sequences" : "layers";
    char cmd[RUN_COMPLETE_RESUME_MAX];
    run_complete_resume(p->kind, p->run_id, p->config_json, p->source, cmd, sizeof cmd);
    if (miss.unverifiable)
        return pg_fail(err, PG_ERR_USAGE, "merge: %s: run %lld (job %s, shard %lld/%lld): %s: "
                       "run the shard again with this precgate into a fresh database (or "
                       "resume it, which records it: %s)", p->source, (long long)p->run_id,
                       p->job, (long long)p->index, (long long)p->count, miss.list, cmd);
    return pg_fail(err, PG_ERR_USAGE, "merge: %s: run %lld (job %s, shard %lld/%lld) lacks rows "
                   "that its own %s imply (%lld of its %lld %s): %s; resume it (%s) or run the "
                   "shard again into a fresh database", p->source, (long long)p->run_id, p->job,
                   (long long)p->index, (long long)p->count, units,
                   (long long)miss.n_units, (long long)miss.n_expected,
                   is_eval ? "samples" : is_diverge ? "scorings" : "layers", miss.list, cmd);
}

/* The string member key of the JSON text json (a malloc'd copy), or NULL. */
static char *config_string(const char *json, const char *key)
{
    cJSON *o = cJSON_Parse(json);
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, key);
    char *v = cJSON_IsString(x) ? strdup(x->valuestring) : NULL;
    cJSON_Delete(o);
    return v;
}

/* Computes the merged diverge run run_id of s (config its config_json:
 * its reference, modes and K) from its copied sequences and scores, as an
 * unsharded run is, and prints its results to out. */
static pg_status compare_diverge(pg_store *s, int64_t run_id, const char *config, FILE *out,
                                 pg_err *err)
{
    diverge_config_doc d;
    pg_err unread = {0};
    const pg_status rst = diverge_config_read(config, &d, &unread);
    const diverge_run_config *c = &d.c;
    const char *names[DIV_MAX_MODES];
    int n = 0, ok = rst == PG_OK && c->reference != NULL && c->n_modes >= 0 && c->top_k_known &&
                    c->top_k >= 1 && c->top_k <= PL_MAX_TOP_K;
    for (int i = 0; ok && i < c->n_modes; i++) {
        ok = c->modes[i] != NULL && n < DIV_MAX_MODES;
        if (ok) names[n++] = c->modes[i];
    }
    pg_status st = rst == PG_ERR_NOMEM ? (*err = unread, rst)
                   : ok ? diverge_compare(s, run_id, c->reference, names, n, c->top_k, err)
                        : pg_fail(err, PG_ERR_USAGE, "merge: diverge run %lld: the parts' config "
                                  "lacks a \"reference\", \"modes\" or \"top_k\" it can read",
                                  (long long)run_id);
    if (st == PG_OK) st = divergence_results_print(s, run_id, out, err);
    diverge_config_doc_free(&d);
    return st;
}

/* Writes one job's parts p[0 .. n-1] into a new run of s (inside the
 * caller's transaction); an eval is scored again, its summary to out. */
static pg_status merge_job(pg_store *s, const merge_part *p, size_t n, FILE *out,
                           int64_t *run_id, pg_err *err)
{
    const char *started = p[0].started_at, *finished = p[0].finished_at;
    int incomplete = 0, one_device = 1;
    int64_t rows = 0;
    for (size_t i = 0; i < n; i++) {
        if (p[i].started_at != NULL && (started == NULL || strcmp(p[i].started_at, started) < 0))
            started = p[i].started_at;
        if (p[i].finished_at != NULL &&
            (finished == NULL || strcmp(p[i].finished_at, finished) > 0))
            finished = p[i].finished_at;
        incomplete |= strcmp(p[i].status, "incomplete") == 0;
        one_device &= p[i].device != NULL && p[0].device != NULL &&
                      strcmp(p[i].device, p[0].device) == 0;
        rows += p[i].rows;
    }
    char host[MERGE_HOST_MAX], devices[MERGE_HOST_MAX];
    store_this_host(host, sizeof host);
    snprintf(devices, sizeof devices, "%zu shards on several devices", n);
    size_t fullest = 0;
    for (size_t i = 1; i < n; i++)
        if (p[i].rows > p[fullest].rows) fullest = i;
    char *config = merged_config(&p[fullest]);
    if (config == NULL) return pg_fail(err, PG_ERR_NOMEM, "merge: out of memory");
    const merge_run_info info = {.kind = p[0].kind,
                                 .status = incomplete ? "incomplete" : "complete",
                                 .label = p[0].label,
                                 .git_rev = p[0].git_rev,
                                 .host = host,
                                 .device = one_device ? p[0].device : devices,
                                 .started_at = started,
                                 .finished_at = finished,
                                 .config_json = config};
    pg_status st = merge_store_add_run(s, &info, run_id, err);
    for (size_t i = 0; st == PG_OK && i < n; i++) st = merge_store_copy_part(s, &p[i], *run_id, err);
    for (size_t i = 0; st == PG_OK && i < n; i++) st = check_part_complete(s, &p[i], *run_id, err);
    if (st == PG_OK && strcmp(p[0].kind, "eval") == 0) {
        char *eval = config_string(config, "eval");
        st = eval != NULL ? eval_score_all(s, *run_id, eval, out, err)
                          : pg_fail(err, PG_ERR_USAGE, "merge: job %s: the eval parts' config "
                                    "names no \"eval\"", p[0].job);
        free(eval);
    }
    if (st == PG_OK && strcmp(p[0].kind, "diverge") == 0)
        st = compare_diverge(s, *run_id, config, out, err);
    if (st == PG_OK)
        term_printf(out, "run %lld: job %s, %zu shards merged (%s, %lld rows, %s)\n",
                (long long)*run_id, p[0].job, n, p[0].kind, (long long)rows, info.status);
    free(config);
    return st;
}

/* Whether paths a and b name one existing file. */
static int same_file(const char *a, const char *b)
{
    char *ra = realpath(a, NULL), *rb = realpath(b, NULL);
    const int same = ra != NULL && rb != NULL && strcmp(ra, rb) == 0;
    free(ra);
    free(rb);
    return same;
}

/* Drops from parts[0 .. *n) (sorted by by_job_index) every unfinished run
 * of a (job, index) whose own file also holds a finished run of it: a shard
 * that failed and was run again into the same database. Says so on errs;
 * the finished run is the part. Two finished runs stay: check_set refuses
 * them as given twice. */
static void drop_superseded(FILE *errs, merge_part *parts, size_t *n)
{
    size_t kept = 0;
    for (size_t g = 0, end; g < *n; g = end) {
        /* [g, end): the runs of one shard in one file, adjacent once sorted. */
        int finished = 0;
        for (end = g; end < *n && strcmp(parts[end].job, parts[g].job) == 0 &&
                      parts[end].index == parts[g].index &&
                      strcmp(parts[end].source, parts[g].source) == 0;
             end++)
            finished |= part_finished(&parts[end]);
        for (size_t i = g; i < end; i++) {
            if (!finished || part_finished(&parts[i])) {
                parts[kept++] = parts[i];
                continue;
            }
            term_printf(errs, "precgate: merge: %s: run %lld (job %s, shard %lld/%lld) is %s; a "
                            "finished run of that shard in the same file is taken instead\n",
                    parts[i].source, (long long)parts[i].run_id, parts[i].job,
                    (long long)parts[i].index, (long long)parts[i].count,
                    parts[i].status ? parts[i].status : "(no status)");
            merge_part_clear(&parts[i]);
        }
    }
    *n = kept;
}

/* What kind of JSON value x is, for messages ("a string", "missing", ...). */
static const char *json_kind(const cJSON *x)
{
    if (x == NULL) return "missing";
    if (cJSON_IsString(x)) return "a string";
    if (cJSON_IsNumber(x)) return "a number";
    if (cJSON_IsObject(x)) return "an object";
    if (cJSON_IsArray(x)) return "an array";
    if (cJSON_IsBool(x)) return "a boolean";
    return "null";
}

/* Refuses "shard"."key" of shard (a parsed object) unless it is the integer
 * merge_store_read_parts read as stored (-1: it read none). */
static pg_status check_shard_number(const merge_part *p, const cJSON *shard, const char *key,
                                    int64_t stored, pg_err *err)
{
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(shard, key);
    if (cJSON_IsNumber(x) && stored != -1 && x->valuedouble == (double)stored) return PG_OK;
    return pg_fail(err, PG_ERR_FORMAT, "merge: %s: run %lld: config_json \"shard\".\"%s\" is %s, "
                   "not an integer: not a part precgate wrote (a damaged shard database)",
                   p->source, (long long)p->run_id, key,
                   cJSON_IsNumber(x) ? "a number that is no integer" : json_kind(x));
}

/* Refuses a part whose config_json does not say which part of which job it
 * is: NULL, not JSON, not an object, "job" missing, no string or no job key
 * (shard_job_check), "shard" missing or no object, its "index" or "count"
 * no integer. PG_ERR_FORMAT naming the file, the run and the field: precgate
 * writes none of these (a damaged shard database, exit 1). */
static pg_status check_part_config(const merge_part *p, pg_err *err)
{
    if (p->config_json == NULL)
        return pg_fail(err, PG_ERR_FORMAT, "merge: %s: run %lld (%s, %s): config_json is NULL: "
                       "not a part precgate wrote (a damaged shard database)", p->source,
                       (long long)p->run_id, p->kind ? p->kind : "(no kind)",
                       p->status ? p->status : "(no status)");
    /* Nothing may follow the value (cJSON_Parse would ignore it). */
    cJSON *cfg = cJSON_ParseWithOpts(p->config_json, NULL, 1);
    const cJSON *job = cJSON_GetObjectItemCaseSensitive(cfg, "job");
    const cJSON *shard = cJSON_GetObjectItemCaseSensitive(cfg, "shard");
    pg_err job_err = {0};
    pg_status st = PG_OK;
    if (cfg == NULL || !cJSON_IsObject(cfg))
        st = pg_fail(err, PG_ERR_FORMAT, "merge: %s: run %lld: config_json is %s: not a part "
                     "precgate wrote (a damaged shard database)", p->source,
                     (long long)p->run_id, cfg == NULL ? "not JSON" : "no JSON object");
    else if (cJSON_IsString(job) && p->job == NULL)
        /* e.g. a raw control character in a string: cJSON takes it, SQLite does not */
        st = pg_fail(err, PG_ERR_FORMAT, "merge: %s: run %lld: config_json is not JSON that "
                     "SQLite reads (json_valid): not a part precgate wrote (a damaged shard "
                     "database)", p->source, (long long)p->run_id);
    else if (!cJSON_IsString(job))
        st = pg_fail(err, PG_ERR_FORMAT, "merge: %s: run %lld: config_json \"job\" is %s, not a "
                     "string: not a part precgate wrote (a damaged shard database)", p->source,
                     (long long)p->run_id, json_kind(job));
    else if (shard_job_check("merge", p->job, &job_err) != PG_OK)
        st = pg_fail(err, PG_ERR_FORMAT, "merge: %s: run %lld: config_json \"job\" is no job "
                     "key (%s)", p->source, (long long)p->run_id, job_err.msg);
    else if (!cJSON_IsObject(shard))
        st = pg_fail(err, PG_ERR_FORMAT, "merge: %s: run %lld: config_json \"shard\" is %s, not "
                     "an object: not a part precgate wrote (a damaged shard database)",
                     p->source, (long long)p->run_id, json_kind(shard));
    if (st == PG_OK) st = check_shard_number(p, shard, "index", p->index, err);
    if (st == PG_OK) st = check_shard_number(p, shard, "count", p->count, err);
    cJSON_Delete(cfg);
    return st;
}

/* Reads every part of the files named in a into *parts, sorted; a file
 * holding no part, or the database merged into, is PG_ERR_USAGE naming it. */
static pg_status read_all(const merge_request *a, const char *db_path, merge_part **parts,
                          size_t *n, pg_err *err)
{
    pg_status st = PG_OK;
    for (int f = 0; st == PG_OK && f < a->n_files; f++) {
        if (same_file(a->files[f], db_path))
            return pg_fail(err, PG_ERR_USAGE, "merge: %s is the database merged into (--into), "
                           "not a shard database", a->files[f]);
        const size_t before = *n;
        st = merge_store_read_parts(a->files[f], parts, n, err);
        for (size_t i = before; st == PG_OK && i < *n; i++) st = check_part_config(&(*parts)[i], err);
        if (st == PG_OK && *n == before)
            st = pg_fail(err, PG_ERR_USAGE, "merge: %s holds no part of a sharded job (no run "
                         "of precgate run or eval --shard I/N)", a->files[f]);
    }
    if (st == PG_OK && *n > 1) qsort(*parts, *n, sizeof **parts, by_job_index);
    if (st == PG_OK) drop_superseded(a->errs, *parts, n);
    return st;
}

pg_status merge_lifecycle_run(pg_store *s, const char *db_path, const merge_request *a, pg_err *err)
{
    merge_part *parts = NULL;
    size_t n = 0;
    pg_status st = read_all(a, db_path, &parts, &n, err);
    /* Each job: [start, end) of parts; whether it was merged before. */
    size_t *starts = calloc(n + 1, sizeof *starts);
    unsigned char *before = calloc(n + 1, 1);
    size_t n_jobs = 0;
    if (st == PG_OK && (starts == NULL || before == NULL))
        st = pg_fail(err, PG_ERR_NOMEM, "merge: out of memory");
    for (size_t i = 0; st == PG_OK && i < n; i++)
        if (i == 0 || strcmp(parts[i].job, parts[i - 1].job) != 0) starts[n_jobs++] = i;
    if (starts != NULL) starts[n_jobs] = n;
    /* Every job is checked, also after one is refused, so that a refusal
     * names each job's fault: which job comes first is the order of their
     * keys, which says nothing. The first fault is the error; the others
     * are said beside it. */
    /* The write transaction (BEGIN IMMEDIATE) starts before merged_shards is
     * read, so two merges into one database cannot both find a job not yet
     * merged: the second waits for the first, then finds it merged. */
    if (st == PG_OK) st = store_begin(s, err);
    const pg_status read_st = st;
    for (size_t j = 0; read_st == PG_OK && j < n_jobs; j++) {
        const merge_part *p = &parts[starts[j]];
        const size_t np = starts[j + 1] - starts[j];
        merge_recorded *r = NULL;
        size_t nr = 0;
        pg_err job_err = {0};
        pg_status js = merge_store_recorded(s, p->job, &r, &nr, &job_err);
        before[j] = nr > 0;
        if (js == PG_OK) js = check_set(p, np, before[j], &job_err);
        if (js == PG_OK && before[j]) js = check_merged(p, np, r, nr, &job_err);
        if (js == PG_OK && before[j])
            term_printf(a->out, "job %s: already merged as run %lld (every part given is the one merged "
                   "then); nothing changed\n", p->job, (long long)r[0].run_id);
        merge_recorded_free(r, nr);
        if (js != PG_OK && st == PG_OK) {
            *err = job_err;
            st = js;
        } else if (js != PG_OK) {
            term_printf(a->errs, "precgate: also %s\n", job_err.msg);
        }
    }
    /* Everything checked: the writes, all or nothing. The summaries wait
     * for the commit. */
    char *text = NULL;
    size_t text_len = 0;
    FILE *out = st == PG_OK ? open_memstream(&text, &text_len) : NULL;
    if (st == PG_OK && out == NULL) st = pg_fail(err, PG_ERR_NOMEM, "merge: out of memory");
    for (size_t j = 0; st == PG_OK && j < n_jobs; j++) {
        int64_t run_id = 0;
        if (!before[j])
            st = merge_job(s, &parts[starts[j]], starts[j + 1] - starts[j], out, &run_id, err);
    }
    if (st == PG_OK) st = store_commit(s, err);
    if (st != PG_OK) store_rollback(s);
    if (out != NULL) fclose(out);
    if (st == PG_OK && text != NULL) fputs(text, a->out);
    if (st != PG_OK)
        term_printf(a->errs, "precgate: merge: %s left as it was\n", db_path);
    /* A part of another job among the databases makes that job incomplete:
     * say which jobs they hold. */
    if (st != PG_OK && n_jobs > 1)
        term_printf(a->errs, "precgate: merge: the databases hold parts of %zu jobs:\n", n_jobs);
    for (size_t j = 0; st != PG_OK && n_jobs > 1 && j < n_jobs; j++)
        term_printf(a->errs, "  job %s: %zu of %lld parts, the first in %s\n", parts[starts[j]].job,
                starts[j + 1] - starts[j], (long long)parts[starts[j]].count,
                parts[starts[j]].source);
    free(text);
    free(starts);
    free(before);
    merge_parts_free(parts, n);
    return st;
}
