/* cmd_eval.c: `precgate eval`: end-task accuracy per precision mode, live or from recorded completions. */
#include <cjson/cJSON.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "db/run_config.h"
#include "db/eval_store.h"
#include "db/store.h"
#include "evals/eval_run.h"
#include "reports/eval_results.h"
#include "harness/cli/cli.h"
#include "reports/term.h"
#include "harness/eval_resume.h"
#include "harness/interrupt.h"
#include "harness/progress.h"
#include "harness/run_complete.h"
#include "harness/shard.h"

#ifndef PRECGATE_GIT_REV
#define PRECGATE_GIT_REV "unknown"
#endif

/* Defaults of the live client (the numbers). */
#define EVAL_DEFAULT_SAMPLES 1
#define EVAL_DEFAULT_CONCURRENCY 64
#define EVAL_DEFAULT_READY_S 600.0
#define EVAL_DEFAULT_EFFORT "medium"
/* Bounds of the client flags: a stall below 0.1 s or a backoff base below
 * 1 ms is below the client's scheduling granularity (a loop pass, a poll);
 * the base may not pass the backoff cap (OA_DEFAULT_BACKOFF_CAP_S); more than
 * 100 attempts per sample is a typo, not a policy. */
#define EVAL_MIN_STALL_S 0.1
#define EVAL_MIN_BACKOFF_S 0.001
#define EVAL_MAX_ATTEMPTS 100
/* Largest --samples, --concurrency, --max-tokens and --temperature. */
#define EVAL_MAX_SAMPLES 1000
#define EVAL_MAX_CONCURRENCY 100000
#define EVAL_MAX_TOKENS 100000000
#define EVAL_MAX_TEMPERATURE 100
/* Largest --timeout, --stall-timeout and --ready-timeout, seconds. */
#define EVAL_MAX_WAIT_S 1e7
/* Longest effort list, host description. */
#define EVAL_LIST_MAX 256
#define EVAL_HOST_MAX 256

const char cmd_eval_usage[] =
    "usage: precgate eval --traces FILE (--endpoint MODE=URL ... | --replay) [options]\n\n"
    "Runs AIME-style problems through OpenAI-compatible servers, one or more per precision\n"
    "mode\n"
    "(or grades the completions recorded in the traces), stores every sample as it\n"
    "completes (committed in batches of 256 or 100 ms: a kill loses only the samples not\n"
    "yet committed, which --resume sends again), and scores each mode and effort (avg@K,\n"
    "pass@k, clustered SE, 95% CI) and each mode against bf16 on the same problems (paired\n"
    "difference, sign test).\n\n"
    "  --traces FILE        JSONL problems (evals/demo/aime-style-demo.jsonl is shipped)\n"
    "  --endpoint MODE=URL  a server running precision MODE (bf16, fp8kv, fp8qkv, ...);\n"
    "                       repeat per mode, and per server: a mode given several\n"
    "                       servers sends each request to the one with the least\n"
    "                       outstanding requests; 3 failed attempts in a row take a\n"
    "                       server out for a back-off while the others carry on; every\n"
    "                       server of a mode must be up and serve one model.\n"
    "                       Two modes given one URL (scheme/host case, default port,\n"
    "                       trailing / and /v1 aside) are warned of at once; two whose\n"
    "                       servers report the same /v1/models list, Server header and\n"
    "                       /version (vLLM) once ready are warned of as possibly one\n"
    "                       server (distinct servers of one model and vLLM version match\n"
    "                       too). A warning only: the run goes on\n"
    "  --replay             grade the traces' recorded completions, no server\n"
    "  --samples K          samples per problem and mode (default 1)\n"
    "  --effort LIST        reasoning efforts, comma-separated (default medium)\n"
    "  --concurrency N      requests in flight per server (default 64)\n"
    "  --server-backoff S   a server taken out stays out S seconds, doubling each time\n"
    "                       it is taken out again without a success between, up to 120\n"
    "                       (default 5); back in, it gets one request until one succeeds\n"
    "  --model NAME         served model (default: the server's /v1/models)\n"
    "  --max-tokens N       completion budget per request (default: the server's)\n"
    "  --temperature T      (default 1.0)    --top-p P   (default: the server's)\n"
    "  --seed N             base seed; each (problem id, sample) gets its own seed,\n"
    "                       the same in every mode (paired samples)\n"
    "  --api-key-env VAR    read the API key from this environment variable\n"
    "  --timeout S          bound on one attempt, connection to last byte (default 14400:\n"
    "                       a 131072-token completion at 10 tokens/s)\n"
    "  --stall-timeout S    a streamed attempt fails and is retried when its response\n"
    "                       headers have not come S seconds after its request was\n"
    "                       sent (a stopped or hung server), or when, once its first\n"
    "                       body byte has come, no byte comes for S seconds (default\n"
    "                       60; vLLM streams one event per token, so a slow but live\n"
    "                       stream is never cut). The wait from the headers to the\n"
    "                       first body byte is the server's queue (vLLM sends its\n"
    "                       headers at once, the first event once the request is\n"
    "                       scheduled): only --timeout bounds it\n"
    "  --max-attempts N     attempts per sample, the first included (default 6; 1: no\n"
    "                       retry). Retried: connection failures, timeouts, stalls, 408,\n"
    "                       429, 5xx, and 200 replies without an answer (only a\n"
    "                       non-empty content or finish_reason length is graded)\n"
    "  --backoff S          retry k waits a random 0..min(60, S*2^(k-1)) seconds\n"
    "                       (default 1; Retry-After of a 429/503 is honoured up to 60)\n"
    "  --ready-timeout S    wait this long for the servers to be up (default 600)\n"
    "  --extractor NAME     answer extraction: default or gpt-oss\n"
    "  --eval NAME          name stored with the samples (default: the traces' file name)\n"
    "  --limit N            only the first N problems of the traces (smoke tests)\n"
    "  --no-token-ids       do not ask for the token ids (\"return_token_ids\": true, vLLM;\n"
    "                       stored with each sample for diverge --from-eval, and checked\n"
    "                       against usage) from a server that refuses the field\n"
    "  --output FILE.json   also write the run's scores and pairs there (like lm-eval's\n"
    "                       results file; written whole or not at all)\n"
    "  --resume RUN         continue run RUN, sending only the samples it lacks (and\n"
    "                       retrying its errors). Everything that defines the eval must\n"
    "                       be the same (traces content, eval name, modes and the models\n"
    "                       their servers serve, efforts, samples, seed, temperature,\n"
    "                       top-p, max-tokens, extractor, prompt template), else exit 2\n"
    "                       naming the field. Servers are infrastructure, not part of\n"
    "                       the eval: URLs and how many servers a mode has may change\n"
    "                       (every server of a mode must still serve the run's model).\n"
    "                       A run whose process is\n"
    "                       gone (interrupted, killed -9 on this host) is taken as is\n"
    "  --force              with --resume: take a run still marked running whose process\n"
    "                       may be alive (on another host, or its pid exists here)\n"
    "  --db PATH            database (default $PRECGATE_DB, else ./precgate.db)\n"
    "  --label TEXT         free text stored with the run\n"
    "  --no-progress        never draw the progress bar\n"
    "  --shard I/N          run only part I (0 .. N-1) of N: the problems (after --limit)\n"
    "                       sorted by id, in N runs of consecutive ids as equal in count\n"
    "                       as can be; every sample, mode and effort of a problem is in\n"
    "                       one part, so `precgate merge` gives the scores and pairs of\n"
    "                       an unsharded run. A --resume of a part repeats its --shard\n"
    "  --job KEY            with --shard: the job the part belongs to (default: a digest\n"
    "                       of what defines the eval, as --resume compares it, and N)\n\n"
    "SIGINT or SIGTERM stops sending: the samples received are stored, the requests in\n"
    "flight are dropped (a resume sends them again), the run is marked 'interrupted' and\n"
    "not scored; a second signal kills at once.\n\n"
    "exit status: 0 complete; 1 failure or samples that failed after every retry (the run\n"
    "is then 'incomplete': scores exclude them and say how many; --resume retries them);\n"
    "2 usage error, or a --resume that differs from its run; 130 / 143 stopped by SIGINT /\n"
    "SIGTERM.\n";

typedef struct eval_args {
    const char *traces, *db, *label, *eval_name, *model, *output;
    int replay, force;
    int progress;         /* draw the progress bar (--no-progress: 0) */
    long resume, limit;   /* limit 0: every problem */
    char efforts_buf[EVAL_LIST_MAX];
    eval_run_options o;
    shard_spec shard;     /* --shard I/N; count 0 without */
    const char *job;      /* --job KEY, else the default key (job_buf) */
    char job_buf[SHARD_JOB_MAX];
} eval_args;

/* --shard I/N into the shard_spec to (a cli_option parse). */
static pg_status parse_shard(char *value, void *to, pg_err *err)
{
    return shard_parse("eval", value, to, err);
}

/* The traces' file name without directory and extension, into buf. */
static void default_eval_name(const char *path, char *buf, size_t len)
{
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    snprintf(buf, len, "%s", base);
    char *dot = strrchr(buf, '.');
    if (dot != NULL && dot != buf) *dot = '\0';
}

/* Index of the first of names[0..n-1] equal to an earlier one, or -1. */
static int duplicate_name(const char *const *names, int n)
{
    for (int i = 0; i < n; i++)
        for (int j = 0; j < i; j++)
            if (strcmp(names[i], names[j]) == 0) return i;
    return -1;
}

/* --endpoint MODE=URL, appended to the eval_run_options to (a cli_option
 * parse); the value is split in place. */
static pg_status parse_endpoint(char *value, void *to, pg_err *err)
{
    eval_run_options *o = to;
    return cli_split_endpoint("eval", value, o->modes, o->urls, &o->n_endpoints, EVAL_MAX_SERVERS, err);
}

/* --extractor NAME into the grade extractor to (a cli_option parse). */
static pg_status parse_extractor(char *value, void *to, pg_err *err)
{
    pg_err local = {0};
    if (grade_extractor_parse(value, to, &local) != PG_OK)
        return pg_fail(err, PG_ERR_USAGE, "eval: --extractor: %s", local.msg);
    return PG_OK;
}

/* Rows of eval's option table, its end row included. */
#define EVAL_OPTION_ROWS 31

/* eval's option table into opts, its values going into a, *effort, *seed
 * and *no_progress: what eval_parse parses by, and what
 * cmd_eval_option_arity answers from. */
static void eval_option_table(eval_args *a, const char **effort, unsigned long long *seed,
                              int *no_progress, int *no_token_ids,
                              cli_option opts[EVAL_OPTION_ROWS])
{
    const cli_option t[] = {
        {"traces", CLI_TEXT, .to = &a->traces},
        {"endpoint", CLI_CALL, .to = &a->o, .parse = parse_endpoint},
        {"replay", CLI_FLAG, .to = &a->replay},
        {"samples", CLI_INT, .to = &a->o.samples, .min = 1, .max = EVAL_MAX_SAMPLES},
        {"effort", CLI_TEXT, .to = effort},
        {"concurrency", CLI_INT, .to = &a->o.client.max_in_flight, .min = 1,
         .max = EVAL_MAX_CONCURRENCY},
        {"server-backoff", CLI_DOUBLE, .to = &a->o.client.server_backoff_base_s,
         .lo = EVAL_MIN_BACKOFF_S, .hi = OA_DEFAULT_SERVER_BACKOFF_CAP_S},
        {"model", CLI_TEXT, .to = &a->o.client.model},
        {"max-tokens", CLI_LONG, .to = &a->o.sampling.max_tokens, .min = 1,
         .max = EVAL_MAX_TOKENS},
        {"temperature", CLI_DOUBLE, .to = &a->o.sampling.temperature, .lo = 0,
         .hi = EVAL_MAX_TEMPERATURE},
        {"top-p", CLI_DOUBLE, .to = &a->o.sampling.top_p, .lo = 0, .hi = 1},
        {"seed", CLI_U64, .to = seed},
        {"api-key-env", CLI_TEXT, .to = &a->o.api_key_env},
        {"timeout", CLI_DOUBLE, .to = &a->o.client.timeout_s, .lo = 1, .hi = EVAL_MAX_WAIT_S},
        {"stall-timeout", CLI_DOUBLE, .to = &a->o.client.stall_s, .lo = EVAL_MIN_STALL_S,
         .hi = EVAL_MAX_WAIT_S},
        {"max-attempts", CLI_INT, .to = &a->o.client.max_attempts, .min = 1,
         .max = EVAL_MAX_ATTEMPTS},
        {"backoff", CLI_DOUBLE, .to = &a->o.client.backoff_base_s, .lo = EVAL_MIN_BACKOFF_S,
         .hi = OA_DEFAULT_BACKOFF_CAP_S},
        {"ready-timeout", CLI_DOUBLE, .to = &a->o.ready_deadline_s, .lo = 0,
         .hi = EVAL_MAX_WAIT_S},
        {"extractor", CLI_CALL, .to = &a->o.extractor, .parse = parse_extractor},
        {"eval", CLI_TEXT, .to = &a->eval_name},
        {"resume", CLI_LONG, .to = &a->resume, .min = 1, .max = CLI_RESUME_MAX},
        {"db", CLI_TEXT, .to = &a->db},
        {"label", CLI_TEXT, .to = &a->label},
        {"no-progress", CLI_FLAG, .to = no_progress},
        {"force", CLI_FLAG, .to = &a->force},
        {"limit", CLI_LONG, .to = &a->limit, .min = 1, .max = INT_MAX},
        {"output", CLI_TEXT, .to = &a->output},
        {"shard", CLI_CALL, .to = &a->shard, .parse = parse_shard},
        {"job", CLI_TEXT, .to = &a->job},
        {"no-token-ids", CLI_FLAG, .to = no_token_ids},
        {NULL},
    };
    _Static_assert(sizeof t / sizeof t[0] == EVAL_OPTION_ROWS, "EVAL_OPTION_ROWS");
    memcpy(opts, t, sizeof t);
}

/* Parses argv into a; PG_ERR_USAGE on anything unknown, missing or inconsistent. */
static pg_status eval_parse(int argc, char **argv, eval_args *a, pg_err *err)
{
    memset(a, 0, sizeof *a);
    a->resume = -1;
    a->o.samples = EVAL_DEFAULT_SAMPLES;
    a->o.ready_deadline_s = EVAL_DEFAULT_READY_S;
    a->o.client.max_in_flight = EVAL_DEFAULT_CONCURRENCY;
    a->o.sampling = oa_sampling_default();
    /* The ids a teacher-forced divergence of the samples needs (diverge --from-eval). */
    a->o.sampling.return_token_ids = 1;
    a->progress = 1;
    a->o.extractor = GRADE_DEFAULT;
    const char *effort = EVAL_DEFAULT_EFFORT;
    unsigned long long seed = 0;
    int no_progress = 0, no_token_ids = 0;
    cli_option opts[EVAL_OPTION_ROWS];
    eval_option_table(a, &effort, &seed, &no_progress, &no_token_ids, opts);
    if (cli_parse_options("eval", argc, argv, opts, NULL, err) != PG_OK) return err->code;
    if (no_token_ids) a->o.sampling.return_token_ids = 0;
    a->o.api_key = cli_env_value(a->o.api_key_env);
    snprintf(a->efforts_buf, sizeof a->efforts_buf, "%s", effort);
    a->o.seed_base = (int64_t)seed;
    if (no_progress) a->progress = 0;
    if (a->traces == NULL) return pg_fail(err, PG_ERR_USAGE, "eval: --traces FILE is required");
    if (a->job != NULL && a->shard.count == 0)
        return pg_fail(err, PG_ERR_USAGE, "eval: --job KEY names the job of a part: it goes "
                                          "with --shard I/N");
    if (a->job != NULL && shard_job_check("eval", a->job, err) != PG_OK) return err->code;
    if (a->replay && a->resume > 0)
        return pg_fail(err, PG_ERR_USAGE, "eval: --resume continues a live run; a replay has "
                                          "nothing to resume (run it again instead)");
    if (a->force && a->resume <= 0)
        return pg_fail(err, PG_ERR_USAGE, "eval: --force only goes with --resume RUN");
    if (a->replay == (a->o.n_endpoints > 0))
        return pg_fail(err, PG_ERR_USAGE, "eval: give either --replay or at least one "
                                          "--endpoint MODE=URL");
    /* Several servers per mode, but never one server twice for a mode, and
     * at most EVAL_MAX_MODES modes. */
    int n_modes = 0;
    for (int i = 0; i < a->o.n_endpoints; i++) {
        int j = 0;
        while (j < i && strcmp(a->o.modes[j], a->o.modes[i]) != 0) j++;
        n_modes += j == i;
        for (j = 0; j < i; j++)
            if (strcmp(a->o.modes[j], a->o.modes[i]) == 0 && strcmp(a->o.urls[j], a->o.urls[i]) == 0)
                return pg_fail(err, PG_ERR_USAGE, "eval: --endpoint %s=%s is given twice",
                               a->o.modes[i], a->o.urls[i]);
    }
    if (n_modes > EVAL_MAX_MODES)
        return pg_fail(err, PG_ERR_USAGE, "eval: more than %d modes", EVAL_MAX_MODES);
    /* Efforts: a comma-separated list split in place. */
    for (char *p = a->efforts_buf; *p != '\0';) {
        char *comma = strchr(p, ',');
        if (comma != NULL) *comma = '\0';
        if (*p == '\0' || a->o.n_efforts == EVAL_MAX_EFFORTS)
            return pg_fail(err, PG_ERR_USAGE, "eval: --effort: empty entry or more than %d",
                           EVAL_MAX_EFFORTS);
        a->o.efforts[a->o.n_efforts++] = p;
        if (comma == NULL) break;
        p = comma + 1;
    }
    const int dup_effort = duplicate_name(a->o.efforts, a->o.n_efforts);
    if (dup_effort >= 0)
        return pg_fail(err, PG_ERR_USAGE, "eval: --effort: '%s' is given twice",
                       a->o.efforts[dup_effort]);
    return PG_OK;
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
static cJSON *eval_config_json(const eval_args *a, const char *traces_digest)
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
static pg_status eval_shard(eval_args *a, eval_traces *t, cJSON *now, pg_err *err)
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
    const eval_args *a;
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

int cmd_eval(int argc, char **argv)
{
    pg_err err = {0};
    eval_args a;
    if (eval_parse(argc, argv, &a, &err) != PG_OK) return cli_report(&err);
    char name[EVAL_LIST_MAX];
    if (a.eval_name == NULL) default_eval_name(a.traces, name, sizeof name);
    a.o.eval_name = a.eval_name ? a.eval_name : name;

    eval_traces *t = NULL;
    if (traces_load(a.traces, &t, &err) != PG_OK) return cli_report(&err);
    const int n_in_file = t->n;
    if (a.limit > 0) traces_keep_first(t, (int)a.limit);
    char digest[TRACES_DIGEST_MAX];
    pg_status st = traces_digest(t, digest, sizeof digest, &err);
    /* From here on the first SIGINT/SIGTERM asks for a clean stop. */
    interrupt_install();
    a.o.client.stop = interrupt_flag();
    progress bar;
    const pg_notes notes = progress_notes(&bar, a.progress);
    a.o.notes = &notes;
    const char *db_path = cli_db_path(a.db);
    eval_session es = {NULL, -1, &a, NULL, 0, 0};
    if (st == PG_OK) st = store_open(db_path, &es.store, &err);
    cJSON *now = st == PG_OK ? eval_config_json(&a, digest) : NULL;
    if (st == PG_OK && now == NULL) st = pg_fail(&err, PG_ERR_NOMEM, "eval: out of memory");
    /* What the run must hold when whole (run_complete.h), over every problem. */
    if (st == PG_OK) st = run_complete_add_eval_plan(now, t, &err);
    const int n_planned = t->n;  /* before a part keeps its own problems */
    if (st == PG_OK && a.shard.count > 0) st = eval_shard(&a, t, now, &err);
    if (st == PG_OK && a.resume > 0) {
        es.run_id = a.resume;
        st = check_resume(&es, now, &err);
    } else if (st == PG_OK) {
        es.config = now;
        now = NULL;
        char *config = cJSON_PrintUnformatted(es.config);
        char host[EVAL_HOST_MAX];
        store_this_host(host, sizeof host);
        const store_run_info info = {"eval", a.label, PRECGATE_GIT_REV, host,
                                     a.replay ? "replay" : "openai-compatible servers", config};
        st = config != NULL ? store_run_begin(es.store, &info, &es.run_id, &err)
                            : pg_fail(&err, PG_ERR_NOMEM, "eval: out of memory");
        es.taken = st == PG_OK;
        free(config);
    }
    a.o.before_send = eval_before_send;
    a.o.before_send_ctx = &es;
    eval_run_counts c = {0};
    if (st == PG_OK) {
        char limited[64] = "";
        if (n_planned < n_in_file)
            snprintf(limited, sizeof limited, " (first %d of %d)", n_planned, n_in_file);
        if (a.shard.count > 0)
            term_printf(stdout, "run %lld: shard %d/%d of job %s: %d of the %d problems\n",
                   (long long)es.run_id, a.shard.index, a.shard.count, a.job, t->n, n_planned);
        term_printf(stdout, "run %lld: eval %s, %d problems%s, %s\n", (long long)es.run_id, a.o.eval_name, t->n,
               limited, a.replay ? "replay of recorded completions" : "live");
        fflush(stdout);
        const int empty_part = a.shard.count > 0 && t->n == 0;
        if (!empty_part)
            st = a.replay ? eval_replay(es.store, es.run_id, t, &a.o, &c, &err)
                          : eval_live(es.store, es.run_id, t, &a.o, &c, &err);
    }
    /* An interrupted run is not scored: its scores would describe part of
     * its plan. They are computed when a resume finishes it. */
    /* A part that owns no problem (more parts than problems) has nothing to
     * score: it is complete and empty. */
    if (st == PG_OK && !(a.shard.count > 0 && t->n == 0))
        st = eval_score_all(es.store, es.run_id, a.o.eval_name, stdout, &err);
    /* The run's state comes from what is stored, not from this invocation:
     * a resume that skipped a mode still leaves that mode's errors. */
    int64_t stored_errors = 0;
    if (st == PG_OK)
        st = eval_store_count_errors(es.store, es.run_id, a.o.eval_name, &stored_errors, &err);
    if (es.taken) {
        /* A resumed run that fails keeps what it had: incomplete, not failed. */
        const int sig = interrupt_signal();
        char why[PG_ERR_MSG_MAX];
        snprintf(why, sizeof why, "interrupted by %s", interrupt_signal_name(sig));
        const char *status = st == PG_ERR_INTERRUPTED ? "interrupted"
                             : st != PG_OK ? (a.resume > 0 ? "incomplete" : "failed")
                             : stored_errors > 0 ? "incomplete"
                                                 : "complete";
        pg_err fin = {0};
        const pg_status fst = store_run_finish(es.store, es.run_id, status,
                                               st == PG_ERR_INTERRUPTED ? why
                                               : st != PG_OK ? err.msg : NULL, &fin);
        if (fst != PG_OK && st == PG_OK) {
            err = fin;
            st = fin.code;
        }
        if (fst != PG_OK) {
            term_printf(stderr, "precgate: run %lld could not be marked %s: %s\n",
                    (long long)es.run_id, status, fin.msg);
        } else if (st == PG_ERR_INTERRUPTED && a.replay) {
            term_printf(stderr, "precgate: run %lld %s: nothing was stored (a replay is one "
                            "transaction); run the replay again\n",
                    (long long)es.run_id, why);
        } else if (st == PG_ERR_INTERRUPTED) {
            term_printf(stderr, "precgate: run %lld %s: %lld samples stored now, %lld were there "
                            "already; the requests in flight were dropped. precgate eval "
                            "--resume %lld with the same options continues it\n",
                    (long long)es.run_id, why, (long long)c.stored, (long long)c.skipped,
                    (long long)es.run_id);
        } else if (st == PG_OK && stored_errors > 0 && a.replay) {
            term_printf(stdout, "run %lld incomplete: %lld recorded completions have no answer to grade "
                   "(excluded from the scores; eval_samples.error says which)\n",
                   (long long)es.run_id, (long long)stored_errors);
        } else if (st == PG_OK && stored_errors > 0) {
            term_printf(stdout, "run %lld incomplete: %lld samples failed after every retry (excluded from the "
                   "scores); precgate eval --resume %lld retries them\n",
                   (long long)es.run_id, (long long)stored_errors, (long long)es.run_id);
        } else if (st == PG_OK) {
            term_printf(stdout, "run %lld complete: %s (%lld samples stored, %lld already there)\n",
                   (long long)es.run_id, db_path, (long long)c.stored, (long long)c.skipped);
        } else {
            term_printf(stderr, "precgate: run %lld marked %s in %s\n", (long long)es.run_id, status,
                    db_path);
        }
        /* The results file says what the store says once the run is finished;
         * failing to write it fails the command, not the stored run. */
        if (st == PG_OK && a.output != NULL) {
            char *config = cJSON_PrintUnformatted(es.config);
            st = config != NULL ? eval_results_write_json(es.store, es.run_id, a.o.eval_name,
                                                          status, config, a.output, &err)
                                : pg_fail(&err, PG_ERR_NOMEM, "eval: out of memory");
            free(config);
            if (st == PG_OK)
                term_printf(stdout, "results: wrote %s (run %lld, %s)\n", a.output, (long long)es.run_id, status);
        }
    } else if (a.resume > 0 && st != PG_OK) {
        term_printf(stderr, "precgate: run %lld left as it was (nothing sent to it)\n",
                (long long)a.resume);
    }
    cJSON_Delete(now);
    cJSON_Delete(es.config);
    store_close(es.store);
    traces_free(t);
    if (st != PG_OK) return cli_report(&err);
    return stored_errors > 0 ? cli_exit_code(PG_ERR_HTTP) : 0;
}

pg_status cmd_eval_check(int argc, char **argv, pg_err *err)
{
    eval_args a;
    return eval_parse(argc, argv, &a, err);
}

const char *cmd_eval_option(const char *name, int *takes_value)
{
    eval_args a = {0};
    const char *effort = NULL;
    unsigned long long seed = 0;
    int no_progress = 0, no_token_ids = 0;
    cli_option opts[EVAL_OPTION_ROWS];
    eval_option_table(&a, &effort, &seed, &no_progress, &no_token_ids, opts);
    const cli_option *o = cli_option_find(opts, name);
    if (o != NULL) *takes_value = o->type != CLI_FLAG;
    return o != NULL ? o->name : NULL;
}
